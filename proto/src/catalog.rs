//! The native tool catalog: the single source of truth for `tool_allowlist` validation.
//!
//! `llm_generate` is deliberately not offered (seed 002, C.9).

use serde_json::{Value, json};

/// Risk of a tool call, shown to users who approve calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RiskLevel {
    /// Reads only.
    Low,
    /// Writes inside the workspace or talks to outside services.
    Medium,
    /// Runs arbitrary code.
    High,
}

impl RiskLevel {
    /// The wire spelling: `LOW`, `MEDIUM`, `HIGH`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Low => "LOW",
            Self::Medium => "MEDIUM",
            Self::High => "HIGH",
        }
    }
}

/// One native tool as the catalog describes it.
#[derive(Debug, Clone)]
pub struct NativeTool {
    /// Name used in allowlists (case-sensitive).
    pub name: &'static str,
    /// What the tool does, for humans and LLMs.
    pub description: &'static str,
    /// Whether a call must be approved by a user first.
    pub requires_approval: bool,
    /// Risk shown with the approval.
    pub risk: RiskLevel,
    /// JSON schema of the arguments.
    pub parameters_schema: Value,
}

/// The names of all native tools, in catalog order.
pub const NATIVE_TOOL_NAMES: [&str; 9] = [
    "web_search",
    "web_fetch",
    "file_read",
    "file_write",
    "python",
    "git",
    "github",
    "powershell",
    "ask_user",
];

/// True when `name` is a native tool (exact, case-sensitive match).
pub fn is_native_tool(name: &str) -> bool {
    NATIVE_TOOL_NAMES.contains(&name)
}

/// The orchestration tools (seed 003): built into the executor's loop rather than standalone
/// tools, allowlisted like native tools. `delegate_to_agent` runs one of the agent's
/// `subagents`; `update_todolist` patches the session's todo plan.
pub const ORCHESTRATION_TOOL_NAMES: [&str; 2] = ["delegate_to_agent", "update_todolist"];

/// True when `name` is an orchestration tool.
pub fn is_orchestration_tool(name: &str) -> bool {
    ORCHESTRATION_TOOL_NAMES.contains(&name)
}

/// True when `name` may appear in a `tool_allowlist`: a native or an orchestration tool.
pub fn is_catalog_tool(name: &str) -> bool {
    is_native_tool(name) || is_orchestration_tool(name)
}

/// The catalog tool a profile's `tools[].type` names: the tool's own name (`web_search`) or, as
/// seed 000's profiles write it, its class name (`WebSearchTool`, `GitHubTool`: the name
/// without `Tool`, compared without case and underscores). `None` for anything else.
pub fn profile_tool(kind: &str) -> Option<&'static str> {
    let all = || NATIVE_TOOL_NAMES.iter().chain(&ORCHESTRATION_TOOL_NAMES);
    if let Some(name) = all().find(|n| **n == kind) {
        return Some(name);
    }
    let class = kind.strip_suffix("Tool")?;
    let squash = |s: &str| -> String {
        s.chars()
            .filter(|c| *c != '_')
            .map(|c| c.to_ascii_lowercase())
            .collect()
    };
    let wanted = squash(class);
    all().find(|n| squash(n) == wanted).copied()
}

/// The JSON schema of one patch op of the todo plan (seed 003 §3), shared by `update_todolist`
/// and the sub-agents' result format.
pub fn patch_op_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "op": { "type": "string", "enum": ["add", "add_subtask", "update", "link_dep", "unlink_dep"] },
            "task": { "type": "object", "description": "add / add_subtask: {id, title, status?, depends_on?, notes?, tool?, params?, owner_agent?} (owner_agent: the sub-agent the task is planned for; yours when absent)" },
            "parent_id": { "type": "string", "description": "add_subtask: the parent task" },
            "task_id": { "type": "string", "description": "update / link_dep / unlink_dep: the task" },
            "fields": { "type": "object", "description": "update: {title?, status?, notes?, depends_on?, tool?, params?}" },
            "dep_id": { "type": "string", "description": "link_dep / unlink_dep: the task depended on" }
        },
        "required": ["op"]
    })
}

/// The orchestration tools, in [`ORCHESTRATION_TOOL_NAMES`] order.
pub fn orchestration_tools() -> Vec<NativeTool> {
    vec![
        NativeTool {
            name: "delegate_to_agent",
            description: "Delegate a task to one of your sub-agents and get its structured result \
                          ({success, result, patch, new_facts} or {success: false, need_user_input})",
            requires_approval: false,
            risk: RiskLevel::Medium,
            parameters_schema: open_object(
                json!({
                    "agent_name": { "type": "string", "description": "The sub-agent's id" },
                    "task": { "type": "string", "description": "What the sub-agent should do" },
                    "task_id": { "type": "string", "description": "The plan task this works on (created when absent)" },
                    "inputs": { "type": "object", "description": "Inputs for the sub-agent" },
                    "shared_context": { "type": "object", "description": "Context shared with the sub-agent (its plan, facts and your_task_id keys are the executor's)" },
                    "resume_token": { "type": "string", "description": "Resumes a sub-agent that asked for input: the state_token of its need_user_input result" },
                    "answers": { "type": "object", "description": "The answers to its questions, by key (with resume_token)" },
                    "allowed_tools": { "type": "array", "items": { "type": "string" }, "description": "Narrow the sub-agent's tools to these" },
                    "budget": { "type": "object", "properties": {
                        "max_steps": { "type": "integer", "minimum": 1 },
                        "timeout_s": { "type": "number", "exclusiveMinimum": 0 } },
                        "additionalProperties": false }
                }),
                // Seed 003's LLM-visible schema: `inputs` is not optional (a call that leaves it
                // out is still taken, as `{}`).
                &["agent_name", "task", "inputs"],
            ),
        },
        NativeTool {
            name: "update_todolist",
            description: "Change the session's todo plan with a patch of ops (add, add_subtask, \
                          update, link_dep, unlink_dep); applies whole or not at all",
            requires_approval: false,
            risk: RiskLevel::Low,
            parameters_schema: open_object(
                json!({
                    "base_version": { "type": "integer", "minimum": 1, "description": "The plan version the ops were written against (default: the current one)" },
                    "ops": { "type": "array", "items": patch_op_schema() }
                }),
                &["ops"],
            ),
        },
    ]
}

/// An arguments object: the tools refuse a field they do not take (naming it), rather than
/// ignore it (a `cwd` the model thought it set).
fn object(properties: Value, required: &[&str]) -> Value {
    with_extras(properties, required, false)
}

/// An arguments object whose extra fields are ignored: the orchestration tools, as seed 003
/// gives its agent tools (`additionalProperties: true`).
fn open_object(properties: Value, required: &[&str]) -> Value {
    with_extras(properties, required, true)
}

fn with_extras(properties: Value, required: &[&str], extras: bool) -> Value {
    json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": extras
    })
}

/// The full native catalog, in [`NATIVE_TOOL_NAMES`] order.
pub fn native_tools() -> Vec<NativeTool> {
    let string = |d: &str| json!({ "type": "string", "description": d });
    vec![
        NativeTool {
            name: "web_search",
            description: "Search the web and return titles, URLs and snippets of the top results",
            requires_approval: false,
            risk: RiskLevel::Low,
            parameters_schema: object(
                json!({
                    "query": string("What to search for"),
                    "num_results": { "type": "integer", "minimum": 1, "maximum": 20, "default": 5 }
                }),
                &["query"],
            ),
        },
        NativeTool {
            name: "web_fetch",
            description: "Fetch a URL and return its content as text (HTML converted to text)",
            requires_approval: false,
            risk: RiskLevel::Low,
            parameters_schema: object(
                json!({ "url": string("The http(s) URL to fetch") }),
                &["url"],
            ),
        },
        NativeTool {
            name: "file_read",
            description: "Read a text file inside the agent's workspace",
            requires_approval: false,
            risk: RiskLevel::Low,
            parameters_schema: object(
                json!({
                    "path": string("Path relative to the workspace"),
                    "max_bytes": { "type": "integer", "minimum": 1 }
                }),
                &["path"],
            ),
        },
        NativeTool {
            name: "file_write",
            description: "Write a text file inside the agent's workspace, creating directories as needed",
            requires_approval: true,
            risk: RiskLevel::Medium,
            parameters_schema: object(
                json!({
                    "path": string("Path relative to the workspace"),
                    "content": string("The full new content"),
                    "append": { "type": "boolean", "default": false }
                }),
                &["path", "content"],
            ),
        },
        NativeTool {
            name: "python",
            description: "Run a Python program in the agent's workspace and return stdout, stderr and exit code",
            requires_approval: true,
            risk: RiskLevel::High,
            parameters_schema: object(
                json!({
                    "code": string("Python source to run"),
                    "timeout_seconds": { "type": "integer", "minimum": 1, "maximum": 600,
                        "description": "Seconds before the program is killed; the executor's own limit (--tool-timeout-secs, 120 s by default) is never exceeded" }
                }),
                &["code"],
            ),
        },
        NativeTool {
            name: "git",
            description: "Run a git command in the agent's workspace",
            requires_approval: true,
            risk: RiskLevel::Medium,
            parameters_schema: object(
                json!({
                    "args": { "type": "array", "items": { "type": "string" }, "description": "Arguments after `git`" }
                }),
                &["args"],
            ),
        },
        NativeTool {
            name: "github",
            description: "Call the GitHub REST API (issues, pull requests, repositories)",
            requires_approval: true,
            risk: RiskLevel::Medium,
            parameters_schema: object(
                json!({
                    "method": { "type": "string", "enum": ["GET", "POST", "PATCH", "PUT", "DELETE"] },
                    "path": string("API path such as /repos/{owner}/{repo}/issues"),
                    "body": { "type": "object" }
                }),
                &["method", "path"],
            ),
        },
        NativeTool {
            name: "powershell",
            description: "Run a PowerShell script through pwsh in the agent's workspace",
            requires_approval: true,
            risk: RiskLevel::High,
            parameters_schema: object(
                json!({
                    "script": string("PowerShell source to run"),
                    "timeout_seconds": { "type": "integer", "minimum": 1, "maximum": 600,
                        "description": "Seconds before the program is killed; the executor's own limit (--tool-timeout-secs, 120 s by default) is never exceeded" }
                }),
                &["script"],
            ),
        },
        NativeTool {
            name: "ask_user",
            description: "Ask the user a question and pause until they answer",
            requires_approval: false,
            risk: RiskLevel::Low,
            parameters_schema: object(
                json!({
                    "question": string("The question to ask"),
                    "key": string("A short name for the answer (e.g. python_version); used when a sub-agent's question is bubbled up"),
                    "required": { "type": "boolean", "default": true },
                    "default": { "description": "A proposed answer, shown to the user and used when they leave it blank" }
                }),
                &["question"],
            ),
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalog_has_the_nine_native_tools_in_order_and_no_llm_generate() {
        let names: Vec<_> = native_tools().iter().map(|t| t.name).collect();
        assert_eq!(names, NATIVE_TOOL_NAMES);
        assert!(!is_native_tool("llm_generate"));
        assert!(!is_native_tool("Web_Search"));
    }

    #[test]
    fn orchestration_tools_are_catalog_tools_but_not_native_ones() {
        let names: Vec<_> = orchestration_tools().iter().map(|t| t.name).collect();
        assert_eq!(names, ORCHESTRATION_TOOL_NAMES);
        assert!(is_catalog_tool("delegate_to_agent") && !is_native_tool("delegate_to_agent"));
        assert!(is_catalog_tool("web_search") && !is_catalog_tool("agent_x"));
    }

    #[test]
    fn native_tools_refuse_extra_fields_and_orchestration_tools_ignore_them() {
        // As the tools parse them: native arguments deny unknown fields, the orchestration
        // tools (seed 003's agent tools) take extra ones and ignore them.
        for t in native_tools() {
            assert_eq!(
                t.parameters_schema["additionalProperties"], false,
                "{}",
                t.name
            );
        }
        for t in orchestration_tools() {
            assert_eq!(
                t.parameters_schema["additionalProperties"], true,
                "{}",
                t.name
            );
        }
    }

    #[test]
    fn a_profile_names_a_tool_by_its_name_or_by_seed_000s_class_name() {
        for (kind, tool) in [
            ("web_search", Some("web_search")),
            ("WebSearchTool", Some("web_search")),
            ("WebFetchTool", Some("web_fetch")),
            ("FileReadTool", Some("file_read")),
            ("GitHubTool", Some("github")),
            ("PowerShellTool", Some("powershell")),
            ("PythonTool", Some("python")),
            ("AskUserTool", Some("ask_user")),
            ("DelegateToAgentTool", Some("delegate_to_agent")),
            ("WebSearch", None),
            ("Tool", None),
            ("ShellTool", None),
            ("web-search", None),
        ] {
            assert_eq!(profile_tool(kind), tool, "{kind}");
        }
    }

    #[test]
    fn delegate_to_agent_requires_what_seed_003_does() {
        let delegate = orchestration_tools()
            .into_iter()
            .find(|t| t.name == "delegate_to_agent")
            .map(|t| t.parameters_schema);
        assert_eq!(
            delegate.map(|s| s["required"].clone()),
            Some(serde_json::json!(["agent_name", "task", "inputs"]))
        );
    }

    #[test]
    fn every_schema_is_an_object_with_its_required_fields_declared() {
        for t in native_tools().into_iter().chain(orchestration_tools()) {
            assert_eq!(t.parameters_schema["type"], "object", "{}", t.name);
            let props = t.parameters_schema["properties"]
                .as_object()
                .cloned()
                .unwrap_or_default();
            for r in t.parameters_schema["required"]
                .as_array()
                .cloned()
                .unwrap_or_default()
            {
                assert!(
                    props.contains_key(r.as_str().unwrap_or_default()),
                    "{}",
                    t.name
                );
            }
        }
    }
}
