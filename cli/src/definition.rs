//! An agent definition file (YAML or JSON) as the REST create body.
//!
//! Two shapes are read: the `configs/custom/{agent_id}.yaml` format (`prompt.system_prompt`,
//! `tools.allowlist`, `mcp_tools.allowlist`) and the REST body itself (`system_prompt`,
//! `tool_allowlist`, `mcp_tool_allowlist`), also mixed. Fields the service manages
//! (`created_at`, `version`, `status`, ...) are dropped, so `taskforce agents show ID --json`
//! output can be created again. Other keys pass through for the service to judge, so a typo is
//! named by the service instead of silently ignored.

use std::{io::Read, path::Path};

use serde_json::{Map, Value};

use crate::error::{Error, Result};

/// Keys of a GET body (or a YAML file) that the service manages.
const MANAGED: [&str; 7] = [
    "source",
    "version",
    "created_at",
    "updated_at",
    "workspace_id",
    "status",
    "last_task",
];

/// Reads `path` (`-`: standard input) and returns the create body.
pub fn load(path: &Path) -> Result<Value> {
    let (text, stem) = if path.as_os_str() == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|e| Error::Input(format!("reading the definition from stdin: {e}")))?;
        (text, None)
    } else {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::Input(format!("cannot read {}: {e}", path.display())))?;
        let stem = path.file_stem().and_then(|s| s.to_str()).map(str::to_owned);
        (text, stem)
    };
    let yaml: serde_yaml::Value = serde_yaml::from_str(&text)
        .map_err(|e| Error::Input(format!("{} is not valid YAML: {e}", path.display())))?;
    to_body(yaml, stem.as_deref()).map_err(|e| Error::Input(format!("{}: {e}", path.display())))
}

/// The create body of a parsed definition; `stem` (the file name) is the id when the file
/// names none.
pub fn to_body(yaml: serde_yaml::Value, stem: Option<&str>) -> Result<Value, String> {
    let json = serde_json::to_value(yaml).map_err(|e| format!("cannot be read as JSON: {e}"))?;
    let Value::Object(mut fields) = json else {
        return Err("expected a mapping of fields (agent_id, name, description, ...)".to_owned());
    };
    for key in MANAGED {
        fields.remove(key);
    }
    lift(&mut fields, "prompt", "system_prompt", "system_prompt")?;
    lift(&mut fields, "tools", "allowlist", "tool_allowlist")?;
    lift(&mut fields, "mcp_tools", "allowlist", "mcp_tool_allowlist")?;
    if !fields.contains_key("agent_id")
        && let Some(stem) = stem
    {
        // Checked here: the service's refusal would not say the id came from the file name.
        if let Err(e) = taskforce_proto::ids::validate_agent_id(stem) {
            let rule = e.to_string();
            let rule = rule.strip_prefix("agent_id ").unwrap_or(&rule);
            return Err(format!(
                "the file has no `agent_id:`, so its name {stem:?} was taken as the id, \
                 which is not a valid one (an id {rule}); add an `agent_id:` field to the file \
                 or rename the file"
            ));
        }
        fields.insert("agent_id".into(), Value::String(stem.to_owned()));
    }
    Ok(Value::Object(fields))
}

/// Moves `block.inner` (the YAML file's nesting) to the body's `flat` key. A list given for
/// an allowlist block is taken as the list itself.
fn lift(
    fields: &mut Map<String, Value>,
    block: &str,
    inner: &str,
    flat: &str,
) -> Result<(), String> {
    let Some(value) = fields.remove(block) else {
        return Ok(());
    };
    if fields.contains_key(flat) {
        return Err(format!("give either `{block}` or `{flat}`, not both"));
    }
    let lifted = match value {
        Value::Object(mut m) => {
            let v = m.remove(inner).unwrap_or(Value::Null);
            if let Some(extra) = m.keys().next() {
                return Err(format!("unknown field `{block}.{extra}`"));
            }
            v
        }
        Value::Array(items) if inner == "allowlist" => Value::Array(items),
        Value::Null => Value::Null,
        _ => return Err(format!("`{block}` must be a mapping with `{inner}`")),
    };
    fields.insert(flat.to_owned(), lifted);
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn body(yaml: &str, stem: Option<&str>) -> Result<Value, String> {
        to_body(serde_yaml::from_str(yaml).map_err(|e| e.to_string())?, stem)
    }

    #[test]
    fn the_custom_file_format_becomes_the_rest_body() {
        let yaml = r#"
agent_id: invoice-extractor
name: Invoice Extractor
description: Extracts fields.
prompt:
  system_prompt: |
    You are a LeanAgent.
tools:
  allowlist: [file_read, python]
mcp_servers:
  - type: stdio
    command: uvx
    args: [mcp-server-time]
    env: {TZ: "${TZ}"}
mcp_tools:
  allowlist: [get_current_time]
subagents: [researcher]
model: fast
created_at: "2026-11-22T09:00:00Z"
updated_at: "2026-11-22T09:00:00Z"
"#;
        assert_eq!(
            body(yaml, Some("ignored")),
            Ok(json!({
                "agent_id": "invoice-extractor", "name": "Invoice Extractor",
                "description": "Extracts fields.", "system_prompt": "You are a LeanAgent.\n",
                "tool_allowlist": ["file_read", "python"],
                "mcp_servers": [{"type": "stdio", "command": "uvx", "args": ["mcp-server-time"],
                                 "env": {"TZ": "${TZ}"}}],
                "mcp_tool_allowlist": ["get_current_time"], "subagents": ["researcher"],
                "model": "fast"
            }))
        );
    }

    #[test]
    fn the_rest_body_passes_and_the_file_name_is_the_default_id() {
        let yaml =
            "name: N\ndescription: D\nsystem_prompt: P\ntool_allowlist: [git]\nversion: abc\n";
        assert_eq!(
            body(yaml, Some("release-notes")),
            Ok(
                json!({"agent_id": "release-notes", "name": "N", "description": "D",
                      "system_prompt": "P", "tool_allowlist": ["git"]})
            )
        );
        assert_eq!(body("{\"name\": \"x\"}", None), Ok(json!({"name": "x"})));
    }

    #[test]
    fn a_file_name_that_is_no_valid_id_is_refused_naming_the_fixes() {
        let err = body("name: N\n", Some("Release Notes")).expect_err("not an id");
        assert_eq!(
            err,
            "the file has no `agent_id:`, so its name \"Release Notes\" was taken as the id, \
             which is not a valid one (an id must start with a lowercase letter or digit); add \
             an `agent_id:` field to the file or rename the file"
        );
        // The file's own id wins, whatever the file is called.
        assert_eq!(
            body("agent_id: release-notes\n", Some("Release Notes")),
            Ok(json!({"agent_id": "release-notes"}))
        );
    }

    #[test]
    fn unknown_keys_pass_for_the_service_to_name() {
        assert_eq!(
            body("agent_id: a-b-c\ncolour: red\n", None),
            Ok(json!({"agent_id": "a-b-c", "colour": "red"}))
        );
    }

    #[test]
    fn contradictions_and_wrong_shapes_are_refused() {
        let both = body("prompt: {system_prompt: a}\nsystem_prompt: b\n", None);
        assert!(both.is_err_and(|e| e.contains("not both")));
        let extra = body("tools: {allowlist: [git], denylist: [python]}\n", None);
        assert!(extra.is_err_and(|e| e.contains("tools.denylist")));
        let scalar = body("prompt: hello\n", None);
        assert!(scalar.is_err_and(|e| e.contains("`prompt` must be a mapping")));
        assert!(body("- a\n- b\n", None).is_err());
        assert_eq!(
            body("tools: [git]\n", None),
            Ok(json!({"tool_allowlist": ["git"]}))
        );
    }

    #[test]
    fn a_missing_file_is_named() {
        let err = load(Path::new("/nonexistent/agent.yaml")).expect_err("missing");
        assert!(
            err.to_string()
                .starts_with("cannot read /nonexistent/agent.yaml: "),
            "{err}"
        );
    }
}
