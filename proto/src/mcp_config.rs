//! The rules of one MCP server entry, shared by the registry (agent definitions, the catalog
//! file) and the executor (its global servers file): `stdio` needs `command`, `sse`/`http` need
//! an `http(s)` `url` (seed 000 §5.1), `global` needs only the `name` of one of the executor's
//! global servers.

use crate::v1;

/// Checks one entry; the error says what is wrong, naming the field.
pub fn validate(s: &v1::McpServer) -> Result<(), String> {
    if !s.name.is_empty() && s.r#type != "global" {
        return Err(format!(
            "type {} takes no name (only type global does)",
            s.r#type
        ));
    }
    match s.r#type.as_str() {
        "global" => {
            let valid = (1..=64).contains(&s.name.len())
                && s.name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
            if !valid {
                return Err(format!(
                    "type global requires a name of 1-64 letters, digits, `-` or `_`, got {:?}",
                    s.name
                ));
            }
            if !s.command.is_empty()
                || !s.args.is_empty()
                || !s.env.is_empty()
                || !s.url.is_empty()
                || !s.headers.is_empty()
            {
                return Err(
                    "type global takes only a name (the executor configures the server)".into(),
                );
            }
        }
        "stdio" => {
            if s.command.trim().is_empty() {
                return Err("type stdio requires a command".into());
            }
            if !s.url.is_empty() || !s.headers.is_empty() {
                return Err("type stdio takes no url or headers".into());
            }
        }
        "sse" | "http" => {
            if s.url.trim().is_empty() {
                return Err(format!("type {} requires a url", s.r#type));
            }
            if !(s.url.starts_with("http://") || s.url.starts_with("https://")) {
                return Err(format!(
                    "url must start with http:// or https://, got {:?}",
                    s.url
                ));
            }
            if !s.command.is_empty() || !s.args.is_empty() || !s.env.is_empty() {
                return Err(format!("type {} takes no command, args or env", s.r#type));
            }
        }
        other => {
            return Err(format!(
                "type must be one of stdio, sse, http, global, got {other:?}"
            ));
        }
    }
    Ok(())
}
