//! An agent definition file (YAML or JSON) as the REST create (or update) body.
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

/// Keys of a GET body (or a YAML file) that the service manages (and `version`, kept aside).
const MANAGED: [&str; 6] = [
    "source",
    "created_at",
    "updated_at",
    "workspace_id",
    "status",
    "last_task",
];

/// A definition file read: the create body, and the version it was read at, if it says.
#[derive(Debug, Clone, PartialEq)]
pub struct Definition {
    /// The REST create (or update) body.
    pub body: Value,
    /// The file's `expected_version` (a REST update body's) or else its `version` (an
    /// `agents show --json` output's): the version an update of it expects to replace.
    pub version: Option<String>,
}

impl Definition {
    /// The agent id the body names, for an update: it must name one.
    pub fn agent_id(&self) -> Result<&str> {
        self.body["agent_id"]
            .as_str()
            .ok_or_else(|| Error::Input("the definition has no `agent_id`".to_owned()))
    }
}

/// Reads `path` (`-`: standard input) and returns the definition.
pub fn load(path: &Path) -> Result<Definition> {
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
    to_definition(yaml, stem.as_deref())
        .map_err(|e| Error::Input(format!("{}: {e}", path.display())))
}

/// The definition of a parsed file; `stem` (the file name) is the id when the file names none.
pub fn to_definition(yaml: serde_yaml::Value, stem: Option<&str>) -> Result<Definition, String> {
    let json = serde_json::to_value(yaml).map_err(|e| format!("cannot be read as JSON: {e}"))?;
    let Value::Object(mut fields) = json else {
        return Err("expected a mapping of fields (agent_id, name, description, ...)".to_owned());
    };
    let mut version = None;
    for key in ["version", "expected_version"] {
        match fields.remove(key) {
            Some(Value::String(v)) if !v.is_empty() => version = Some(v),
            None | Some(Value::Null) => {}
            Some(Value::String(_)) => return Err(format!("`{key}` is empty")),
            Some(other) => return Err(format!("`{key}` must be a string, not {other}")),
        }
    }
    // A profile agent's `agents show --json` output: the service would refuse its `llm`, `tools`
    // ... as unknown fields of a JSON body the user never wrote; say what the file is instead.
    if fields.get("source").and_then(Value::as_str) == Some("profile") {
        return Err(
            "this is a profile agent's definition (`source: profile`), which `create` and \
             `update` do not take: profiles are files in the registry's configs/ directory; \
             for a custom agent, write its `agent_id`, `name`, `description`, `system_prompt` \
             and `tool_allowlist`"
                .to_owned(),
        );
    }
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
    Ok(Definition {
        body: Value::Object(fields),
        version,
    })
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

    fn definition(yaml: &str, stem: Option<&str>) -> Result<Definition, String> {
        to_definition(serde_yaml::from_str(yaml).map_err(|e| e.to_string())?, stem)
    }

    fn body(yaml: &str, stem: Option<&str>) -> Result<Value, String> {
        definition(yaml, stem).map(|d| d.body)
    }

    #[test]
    fn the_version_a_file_was_read_at_is_kept_beside_the_body() {
        let shown = definition("agent_id: a-b-c\nversion: v1\nname: N\n", None);
        assert_eq!(
            shown,
            Ok(Definition {
                body: json!({"agent_id": "a-b-c", "name": "N"}),
                version: Some("v1".to_owned())
            })
        );
        // A REST update body's `expected_version` says it more precisely than `version`.
        let put = definition("agent_id: a-b-c\nversion: v1\nexpected_version: v2\n", None);
        assert_eq!(put.map(|d| d.version), Ok(Some("v2".to_owned())));
        assert_eq!(
            definition("agent_id: a-b-c\n", None).map(|d| d.version),
            Ok(None)
        );
        let empty = definition("version: ''\n", None).expect_err("empty");
        assert_eq!(empty, "`version` is empty");
        let number = definition("expected_version: 5\n", None).expect_err("a number");
        assert_eq!(number, "`expected_version` must be a string, not 5");
        let no_id = definition("name: N\n", None).expect("no id is fine for the body");
        assert!(no_id.agent_id().is_err());
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
    fn a_profile_agents_shown_definition_is_refused_saying_what_it_is() {
        let shown = r#"{"agent_id": "dev", "source": "profile", "llm": {"default_model": "m"}}"#;
        let err = body(shown, Some("dev")).expect_err("a profile");
        assert!(err.contains("profile agent's definition"), "{err}");
        // A custom agent's shown definition is still taken.
        let custom = r#"{"agent_id": "a-b-c", "source": "custom", "name": "N"}"#;
        assert_eq!(
            body(custom, None),
            Ok(json!({"agent_id": "a-b-c", "name": "N"}))
        );
    }

    #[test]
    fn a_file_name_that_is_no_valid_id_is_refused_naming_the_fixes() {
        let err = body("name: N\n", Some("Release Notes")).expect_err("not an id");
        assert_eq!(
            err,
            "the file has no `agent_id:`, so its name \"Release Notes\" was taken as the id, \
             which is not a valid one (an id must start with a lowercase ASCII letter (a-z) or \
             digit, found 'R'); add an `agent_id:` field to the file or rename the file"
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
