//! Orchestration tools (seed 003): each sub-agent an agent may use as a tool `agent_<id>`,
//! the `delegate_to_agent` meta-tool, and `update_todolist`.
//!
//! They run through the same path as every other tool (policy, timeouts, audit, metrics), and
//! reach the run through [`Orchestrate`], a handle the loop puts in the call's
//! [`ToolContext`]: `tools/` never imports `run/`.

use std::{fmt::Debug, time::Duration};

use futures::{FutureExt, future::BoxFuture};
use serde_json::{Map, Value, json};

use super::{Tool, ToolContext, ToolError, ToolOutcome, catalog_definition};
use crate::llm::ToolDefinition;

/// Prefix of sub-agent tool names.
pub const AGENT_TOOL_PREFIX: &str = "agent_";

/// Whether `tool` delegates to a sub-agent (`delegate_to_agent`, `agent_<id>`).
pub fn is_delegation(tool: &str) -> bool {
    tool == "delegate_to_agent" || tool.starts_with(AGENT_TOOL_PREFIX)
}

/// The sub-agent `named` refers to among `subagents`: its id, `agent_<id>`, or the id with `_`
/// for `-` (the seed writes `scaffold_webservice`).
pub fn find_subagent<'a>(subagents: &'a [String], named: &str) -> Option<&'a String> {
    let named = named.strip_prefix(AGENT_TOOL_PREFIX).unwrap_or(named);
    subagents.iter().find(|s| *s == named).or_else(|| {
        subagents
            .iter()
            .find(|s| s.replace('-', "_") == named.replace('-', "_"))
    })
}

/// What a run offers tools that orchestrate: implemented by `run/` per frame.
pub trait Orchestrate: Send + Sync + Debug {
    /// Runs (or resumes) a sub-agent for the calling frame; the result is the seed's object
    /// (`{success, result, patch, new_facts, …}` or `{success: false, need_user_input, …}`).
    fn delegate<'a>(
        &'a self,
        ctx: &'a ToolContext,
        request: Delegation,
    ) -> BoxFuture<'a, Result<ToolOutcome, ToolError>>;

    /// Merges a patch of the calling agent into the session's plan.
    fn update_plan<'a>(&'a self, patch: Value) -> BoxFuture<'a, Result<ToolOutcome, ToolError>>;
}

/// One delegation as the model asked for it.
#[derive(Debug, Clone, PartialEq)]
pub struct Delegation {
    /// The sub-agent, as named (an agent id; `delegate_to_agent` may also say `agent_<id>`).
    pub agent: String,
    /// What it should do.
    pub task: String,
    /// The plan task it works on (created when absent or unknown).
    pub task_id: Option<String>,
    /// Inputs for it (a JSON object).
    pub inputs: Value,
    /// Context from the caller, merged into the plan snapshot and facts it sees.
    pub shared_context: Value,
    /// Narrows its tools to these.
    pub allowed_tools: Option<Vec<String>>,
    /// Most model calls it may make.
    pub max_steps: Option<u32>,
    /// Its wall-clock budget.
    pub timeout: Option<Duration>,
    /// Resuming a frame that asked: its token and the answers by key.
    pub resume: Option<(String, Map<String, Value>)>,
}

/// A delegation tool: `agent_<id>` (one sub-agent, with the seed §4 input schema) or
/// `delegate_to_agent` (seed §5.1: the agent named in the arguments). Both go the same path.
#[derive(Debug)]
pub struct Delegate {
    definition: ToolDefinition,
    /// The sub-agent of an `agent_<id>` tool; `None`: `agent_name` says.
    agent: Option<String>,
}

impl Delegate {
    /// `agent_<id>` for sub-agent `agent_id`, described by its own `description`.
    pub fn agent(agent_id: &str, description: &str) -> Self {
        let about = if description.trim().is_empty() {
            format!("Sub-agent `{agent_id}`")
        } else {
            format!("Sub-agent `{agent_id}`: {}", description.trim())
        };
        Self {
            definition: ToolDefinition {
                name: format!("{AGENT_TOOL_PREFIX}{agent_id}"),
                description: format!(
                    "{about}. Returns {{success, result, patch, new_facts, \
                     suggested_next_action}}, or {{success: false, need_user_input, \
                     state_token}} when it needs answers from the user (the user is asked for \
                     you, and it resumes by itself)."
                ),
                parameters: json!({
                    "type": "object",
                    "properties": {
                        "task": {"type": "string", "description": "What the sub-agent should do"},
                        "task_id": {"type": "string", "description": "The plan task this works on (created when absent)"},
                        "inputs": {"type": "object"},
                        "shared_context": {"type": "object"},
                        "allowed_tools": {"type": "array", "items": {"type": "string"}},
                        "budget": {"type": "object", "properties": {
                            "max_steps": {"type": "integer", "minimum": 1},
                            "timeout_s": {"type": "number", "exclusiveMinimum": 0}},
                            "additionalProperties": false},
                        "resume_token": {"type": "string"},
                        "answers": {"type": "object"}
                    },
                    "required": ["task"],
                    "additionalProperties": true
                }),
            },
            agent: Some(agent_id.to_owned()),
        }
    }

    /// `delegate_to_agent`, as the catalog describes it.
    pub fn by_name() -> Self {
        Self {
            definition: catalog_definition("delegate_to_agent"),
            agent: None,
        }
    }
}

impl Tool for Delegate {
    fn definition(&self) -> &ToolDefinition {
        &self.definition
    }

    fn bounds_own_time(&self) -> bool {
        true
    }

    fn call<'a>(
        &'a self,
        ctx: &'a ToolContext,
        arguments: Value,
    ) -> BoxFuture<'a, Result<ToolOutcome, ToolError>> {
        async move {
            let name = self.name().to_owned();
            let agent = match &self.agent {
                Some(agent) => agent.clone(),
                None => string(&name, &arguments, "agent_name")?
                    .ok_or_else(|| invalid(&name, "`agent_name` is required"))?,
            };
            let request = parse(&name, agent, &arguments)?;
            // Errors name the tool the model called (`delegate_to_agent`, not `agent_<id>`).
            orchestra(ctx, &name)?
                .delegate(ctx, request)
                .await
                .map_err(|e| e.of_tool(&name))
        }
        .boxed()
    }
}

/// `update_todolist`: the orchestrator's patch of the session's plan.
#[derive(Debug)]
pub struct UpdateTodolist {
    definition: ToolDefinition,
}

impl UpdateTodolist {
    /// The tool, as the catalog describes it.
    pub fn new() -> Self {
        Self {
            definition: catalog_definition("update_todolist"),
        }
    }
}

impl Default for UpdateTodolist {
    fn default() -> Self {
        Self::new()
    }
}

impl Tool for UpdateTodolist {
    fn definition(&self) -> &ToolDefinition {
        &self.definition
    }

    fn call<'a>(
        &'a self,
        ctx: &'a ToolContext,
        arguments: Value,
    ) -> BoxFuture<'a, Result<ToolOutcome, ToolError>> {
        async move {
            let name = self.name().to_owned();
            orchestra(ctx, &name)?.update_plan(arguments).await
        }
        .boxed()
    }
}

fn orchestra<'a>(ctx: &'a ToolContext, tool: &str) -> Result<&'a dyn Orchestrate, ToolError> {
    ctx.orchestra
        .as_deref()
        .ok_or_else(|| ToolError::Unavailable {
            tool: tool.to_owned(),
            reason: "orchestration is not available in this context".to_owned(),
        })
}

fn invalid(tool: &str, reason: impl Into<String>) -> ToolError {
    ToolError::InvalidArguments {
        tool: tool.to_owned(),
        reason: reason.into(),
    }
}

fn string(tool: &str, args: &Value, key: &str) -> Result<Option<String>, ToolError> {
    match args.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.trim().is_empty() => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.trim().to_owned())),
        Some(_) => Err(invalid(tool, format!("`{key}` must be a string"))),
    }
}

fn object(tool: &str, args: &Value, key: &str) -> Result<Value, ToolError> {
    match args.get(key) {
        None | Some(Value::Null) => Ok(Value::Object(Map::new())),
        Some(v @ Value::Object(_)) => Ok(v.clone()),
        Some(_) => Err(invalid(tool, format!("`{key}` must be an object"))),
    }
}

/// The seed §4 arguments (`task` required; the rest optional; extra properties ignored).
fn parse(tool: &str, agent: String, args: &Value) -> Result<Delegation, ToolError> {
    if !args.is_object() {
        return Err(invalid(tool, "arguments must be a JSON object"));
    }
    let task = string(tool, args, "task")?.ok_or_else(|| invalid(tool, "`task` is required"))?;
    let allowed_tools = match args.get("allowed_tools") {
        None | Some(Value::Null) => None,
        Some(Value::Array(items)) => Some(
            items
                .iter()
                .map(|i| {
                    i.as_str().map(str::to_owned).ok_or_else(|| {
                        invalid(tool, "`allowed_tools` must be a list of tool names")
                    })
                })
                .collect::<Result<Vec<_>, _>>()?,
        ),
        Some(_) => {
            return Err(invalid(
                tool,
                "`allowed_tools` must be a list of tool names",
            ));
        }
    };
    let budget = object(tool, args, "budget")?;
    // A budget the executor does not enforce (`max_tokens`) would be silently no budget.
    if let Some(unknown) = budget.as_object().and_then(|b| {
        b.keys()
            .find(|k| !matches!(k.as_str(), "max_steps" | "timeout_s"))
    }) {
        return Err(invalid(
            tool,
            format!(
                "`budget.{unknown}` is no budget this executor enforces (`max_steps`, `timeout_s`)"
            ),
        ));
    }
    let max_steps = match budget.get("max_steps") {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            v.as_u64()
                .filter(|n| *n >= 1)
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| invalid(tool, "`budget.max_steps` must be a positive integer"))?,
        ),
    };
    let timeout = match budget.get("timeout_s") {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            v.as_f64()
                .filter(|s| s.is_finite() && *s > 0.0 && *s <= 86_400.0)
                .map(Duration::from_secs_f64)
                .ok_or_else(|| {
                    invalid(
                        tool,
                        "`budget.timeout_s` must be a number of seconds above 0",
                    )
                })?,
        ),
    };
    let resume = match string(tool, args, "resume_token")? {
        None => None,
        Some(token) => match object(tool, args, "answers")? {
            Value::Object(answers) => Some((token, answers)),
            _ => None,
        },
    };
    Ok(Delegation {
        agent,
        task,
        task_id: string(tool, args, "task_id")?,
        inputs: object(tool, args, "inputs")?,
        shared_context: object(tool, args, "shared_context")?,
        allowed_tools,
        max_steps,
        timeout,
        resume,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_names_the_tool_the_model_called() {
        let failed = ToolError::Failed {
            tool: "agent_nope".into(),
            reason: "`nope` is not a sub-agent".into(),
        };
        assert_eq!(
            failed.of_tool("delegate_to_agent").to_string(),
            "delegate_to_agent failed: `nope` is not a sub-agent"
        );
    }

    #[test]
    fn sub_agents_are_found_by_id_tool_name_or_underscored_id() {
        let subs = vec!["scaffold-webservice".to_owned(), "reviewer".to_owned()];
        for named in [
            "scaffold-webservice",
            "agent_scaffold-webservice",
            "scaffold_webservice",
        ] {
            assert_eq!(
                find_subagent(&subs, named).map(String::as_str),
                Some("scaffold-webservice"),
                "{named}"
            );
        }
        assert_eq!(find_subagent(&subs, "writer"), None);
    }

    #[test]
    fn seed_arguments_parse_and_bad_budgets_are_named() {
        let args = json!({"task": " review ", "budget": {"max_steps": 3, "timeout_s": 1.5},
            "allowed_tools": ["file_read"], "resume_token": "t", "answers": {"a.k": "v"},
            "extra": 1});
        let d = parse("agent_x", "x".into(), &args).expect("parses");
        assert_eq!(d.task, "review");
        assert_eq!(d.max_steps, Some(3));
        assert_eq!(d.timeout, Some(Duration::from_millis(1500)));
        assert_eq!(d.allowed_tools, Some(vec!["file_read".to_owned()]));
        assert_eq!(d.resume.map(|r| r.0), Some("t".to_owned()));
        for (bad, named) in [
            (json!({}), "`task`"),
            (
                json!({"task": "t", "budget": {"max_steps": 0}}),
                "max_steps",
            ),
            (
                json!({"task": "t", "budget": {"timeout_s": -1}}),
                "timeout_s",
            ),
            (
                json!({"task": "t", "budget": {"max_tokens": 5}}),
                "`budget.max_tokens` is no budget this executor enforces",
            ),
            (json!({"task": "t", "allowed_tools": "x"}), "allowed_tools"),
            (json!({"task": "t", "inputs": []}), "inputs"),
        ] {
            let err = parse("agent_x", "x".into(), &bad).expect_err("refused");
            assert!(err.to_string().contains(named), "{err}");
        }
    }
}
