//! One round of tool calls: every call of a model turn runs concurrently, each through the
//! policy check and into the audit log, and comes back as a result for the model.

use std::{collections::HashMap, sync::Arc, time::Instant};

use futures::future::join_all;
use serde_json::Value;
use taskforce_proto::v1::{self, run_event::Event};

use super::{RunCtx, events};
use crate::{
    audit,
    llm::ToolCall,
    policy,
    session::Ask,
    tools::{
        Tool, ToolContext, ToolError, ToolOutcome,
        orchestration::{AGENT_TOOL_PREFIX, Orchestrate, find_subagent},
    },
};

/// Grace a cancelled tool gets to stop by itself before its call is dropped.
const CANCEL_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// A call as the model made it: parsed, or with arguments that are not JSON.
#[derive(Debug, Clone)]
pub enum Requested {
    /// A well-formed call.
    Call(ToolCall),
    /// A call whose arguments did not parse.
    Malformed {
        /// Call id.
        id: String,
        /// Tool name.
        name: String,
        /// The arguments as the model wrote them.
        raw: String,
        /// The parser's complaint.
        error: String,
    },
}

impl Requested {
    fn ids(&self) -> (&str, &str) {
        match self {
            Self::Call(c) => (&c.id, &c.name),
            Self::Malformed { id, name, .. } => (id, name),
        }
    }

    fn id_mut(&mut self) -> &mut String {
        match self {
            Self::Call(c) => &mut c.id,
            Self::Malformed { id, .. } => id,
        }
    }
}

/// Gives each call of one model turn an id of its own: a provider that sent one id twice (two
/// parallel calls) made two results nobody could tell apart, and a conversation the real APIs
/// refuse ("tool_use ids must be unique") in every later turn of the session. A repeat becomes
/// `<id>-2` (`-3`, ...).
pub fn unique_call_ids(requested: &mut [Requested]) {
    let mut seen = std::collections::HashSet::with_capacity(requested.len());
    for call in requested.iter_mut() {
        if seen.insert(call.ids().0.to_owned()) {
            continue;
        }
        let base = call.ids().0.to_owned();
        let fresh = (2..)
            .map(|n| format!("{base}-{n}"))
            .find(|candidate| !seen.contains(candidate))
            .unwrap_or_default();
        seen.insert(fresh.clone());
        *call.id_mut() = fresh;
    }
}

/// How one call ended.
#[derive(Debug, Clone)]
pub struct Finished {
    /// Call id.
    pub call_id: String,
    /// Tool name.
    pub tool: String,
    /// What the model reads (for a question: the question).
    pub content: String,
    /// Whether it failed.
    pub is_error: bool,
    /// Whether it pauses the frame.
    pub kind: Kind,
}

/// Whether a call pauses its frame.
#[derive(Debug, Clone)]
pub enum Kind {
    /// A result; the frame goes on.
    Plain,
    /// The frame's own `ask_user`.
    Question {
        /// The asker's key for the answer.
        key: Option<String>,
        /// Whether an answer is needed.
        required: bool,
        /// The proposed answer.
        default: Option<Value>,
    },
    /// Sub-agents need answers (`content` is their `need_user_input` result).
    NeedInput(Vec<Ask>),
}

/// The tools one agent may call, by name.
pub type Tools = HashMap<String, Arc<dyn Tool>>;

/// Runs every call concurrently; results come back in the calls' order.
pub async fn run_all(
    ctx: &RunCtx,
    tools: &Tools,
    orchestra: &Arc<dyn Orchestrate>,
    calls: &[Requested],
) -> Vec<Finished> {
    join_all(
        calls
            .iter()
            .map(|call| run_one(ctx, tools, orchestra, call)),
    )
    .await
}

async fn run_one(
    ctx: &RunCtx,
    tools: &Tools,
    orchestra: &Arc<dyn Orchestrate>,
    requested: &Requested,
) -> Finished {
    let started = Instant::now();
    let (call_id, name) = requested.ids();
    let input = match requested {
        Requested::Call(c) => c.arguments.to_string(),
        Requested::Malformed { .. } => String::new(),
    };
    // The stream shows the call without the secrets the model put in it (a password in a
    // command line); the call itself, and the model's context, keep them.
    let shown = ctx
        .runner
        .budgets
        .redactor
        .redact_keeping_ids(&input)
        .into_owned();
    ctx.sink
        .emit(Event::ToolStart(v1::ToolStart {
            call_id: call_id.to_owned(),
            tool: name.to_owned(),
            arguments_json: shown,
        }))
        .await;
    let tool = tools.get(name);
    // The call's name in its span and in the metrics: a tool the agent has or one of the
    // catalog's (the executor's own, also when this agent was not offered them); a name the
    // model made up is `unknown` (the span's `tool` attribute keeps it), so neither span names
    // nor the metrics' series grow with what a model says.
    let label = if tool.is_some() || taskforce_proto::catalog::is_catalog_tool(name) {
        name
    } else {
        "unknown"
    };
    let (outcome, audit_outcome) = match requested {
        // A call without a name has nothing wrong with its arguments.
        Requested::Malformed { .. } if name.is_empty() => (
            Err("this call names no tool; call one of the tools offered, by its name".to_owned()),
            audit::Outcome::Error,
        ),
        Requested::Malformed { error, .. } => (
            Err(format!(
                "the arguments of this `{name}` call are not valid JSON ({error}); call it \
                 again with a JSON object"
            )),
            audit::Outcome::Error,
        ),
        Requested::Call(call) => {
            let span = tracing::info_span!(
                "tool",
                otel.name = %format_args!("tool {label}"),
                tool = name,
                call_id = call_id,
                otel.status_description = tracing::field::Empty,
            );
            let outcome = tracing::Instrument::instrument(
                call_tool(ctx, tools, orchestra, call),
                span.clone(),
            )
            .await;
            // A failed call is a failed span in the trace (refused by the policy, unknown tool,
            // bad arguments, or the tool saying it failed).
            match &outcome {
                (Err(message), _) => taskforce_runtime::telemetry::fail_span(&span, message),
                (Ok(ToolOutcome::Output { is_error: true, .. }), _) => {
                    taskforce_runtime::telemetry::fail_span(&span, "the tool reported a failure");
                }
                _ => {}
            }
            outcome
        }
    };
    let duration = started.elapsed();
    let (content, is_error, kind) = match outcome {
        Ok(ToolOutcome::Output { content, is_error }) => {
            // Masked before anything sees it: the stream, the model's context, the audit hash.
            let content = redacted(
                ctx,
                name,
                cap(content, ctx.limits.max_output_bytes + NOTICE_ROOM),
            );
            ctx.sink
                .emit(Event::ToolEnd(v1::ToolEnd {
                    call_id: call_id.to_owned(),
                    tool: name.to_owned(),
                    output: content.clone(),
                    is_error,
                    duration_ms: u64::try_from(duration.as_millis()).unwrap_or(u64::MAX),
                }))
                .await;
            (content, is_error, Kind::Plain)
        }
        // The driver announces the question once the paused session is on disk.
        Ok(ToolOutcome::Question {
            question,
            key,
            required,
            default,
        }) => (
            question,
            false,
            Kind::Question {
                key,
                required,
                default,
            },
        ),
        // Its `delegation_end` event told the stream the details; the call itself ends here
        // (its resume is a new call), and the model reads the request for input.
        Ok(ToolOutcome::NeedInput { content, asks }) => {
            ctx.sink
                .emit(Event::ToolEnd(v1::ToolEnd {
                    call_id: call_id.to_owned(),
                    tool: name.to_owned(),
                    output: content.clone(),
                    is_error: false,
                    duration_ms: u64::try_from(duration.as_millis()).unwrap_or(u64::MAX),
                }))
                .await;
            (content, false, Kind::NeedInput(asks))
        }
        Err(message) => {
            let message = redacted(ctx, name, message);
            ctx.sink
                .emit(events::tool_error(call_id, name, message.clone()))
                .await;
            (message, true, Kind::Plain)
        }
    };
    let subagent = subagent_of(ctx, tools, requested);
    let patch_ops = patch_ops_of(requested, subagent.is_some(), &content);
    let input = match requested {
        Requested::Call(c) => audit_input(&c.arguments).unwrap_or(input),
        Requested::Malformed { .. } => input,
    };
    audit::log(audit::Record {
        agent_id: &ctx.agent.agent_id,
        session_id: &ctx.session_id,
        agent_path: ctx.sink.agent_path(),
        call_id,
        tool: name,
        subagent: subagent.as_deref(),
        patch_ops: patch_ops.as_deref(),
        input: &input,
        outcome: audit_outcome,
        mode: effective_mode(ctx, tool).map(policy::Mode::as_str),
        output: &content,
        duration,
    });
    // The executor's own tools are a fixed few: they keep their names past the label cap that
    // many MCP tools or sub-agents may reach (`label` keeps them also when this agent was not
    // offered them: `delegate_to_agent` at the hop limit, `python` outside a delegation's
    // `allowed_tools`).
    let own = taskforce_proto::catalog::is_catalog_tool(name)
        || (tool.is_some_and(|t| t.origin() == crate::policy::Origin::Executor)
            && !name.starts_with(AGENT_TOOL_PREFIX));
    crate::metrics::tool_call(label, own, subagent.as_deref(), audit_outcome, duration);
    Finished {
        call_id: call_id.to_owned(),
        tool: name.to_owned(),
        content,
        is_error,
        kind,
    }
}

/// The sub-agent a call delegates to: `agent_<id>`'s, or `delegate_to_agent`'s `agent_name`
/// when it names one of the agent's sub-agents.
fn subagent_of(ctx: &RunCtx, tools: &Tools, requested: &Requested) -> Option<String> {
    let Requested::Call(call) = requested else {
        return None;
    };
    if call.name == "delegate_to_agent" {
        let named = call.arguments["agent_name"].as_str()?;
        return find_subagent(&ctx.agent.subagents, named).cloned();
    }
    let id = call.name.strip_prefix(AGENT_TOOL_PREFIX)?;
    tools
        .get(&call.name)
        .filter(|t| t.bounds_own_time())
        .map(|_| id.to_owned())
}

/// The ops of a patch a call made: `update_todolist`'s arguments, or the patch in a
/// sub-agent's result (comma-separated op names).
fn patch_ops_of(requested: &Requested, delegation: bool, output: &str) -> Option<String> {
    let Requested::Call(call) = requested else {
        return None;
    };
    let names = |ops: &Value| -> Option<String> {
        let ops = ops.as_array()?;
        Some(
            ops.iter()
                .map(|op| op["op"].as_str().unwrap_or("?"))
                .collect::<Vec<_>>()
                .join(","),
        )
    };
    if call.name == "update_todolist" {
        return names(&call.arguments["ops"]);
    }
    if delegation {
        let result: Value = serde_json::from_str(output).ok()?;
        return names(&result["patch"]["ops"]);
    }
    None
}

/// The mode a call is checked in: a strictly read-only server's tools are checked as in
/// `readOnly`, whatever the run's mode.
fn effective_mode(ctx: &RunCtx, tool: Option<&Arc<dyn Tool>>) -> Option<policy::Mode> {
    if tool.is_some_and(|t| t.strict_read_only().is_some()) {
        Some(policy::Mode::ReadOnly)
    } else {
        ctx.mode
    }
}

/// Policy, lookup, then the call under its time limit and the run's cancellation.
async fn call_tool(
    ctx: &RunCtx,
    tools: &Tools,
    orchestra: &Arc<dyn Orchestrate>,
    call: &ToolCall,
) -> (Result<ToolOutcome, String>, audit::Outcome) {
    let Some(tool) = tools.get(&call.name) else {
        let mut names: Vec<&str> = tools.keys().map(String::as_str).collect();
        names.sort_unstable();
        let message = format!(
            "unknown tool `{}`; this agent's tools are: {}",
            call.name,
            if names.is_empty() {
                "none".to_owned()
            } else {
                names.join(", ")
            }
        );
        return (Err(message), audit::Outcome::Error);
    };
    let call_ref = policy::Call {
        agent_id: &ctx.agent.agent_id,
        tool: &call.name,
        origin: tool.origin(),
        arguments: &call.arguments,
    };
    let strict = tool.strict_read_only();
    let mode = effective_mode(ctx, Some(tool));
    // Without a mode the agent's allowlist is the whole policy: nothing to check or lock.
    let decision = match mode {
        None => policy::Decision::Allow,
        Some(_) => ctx
            .confirmations
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .decide(&ctx.runner.budgets.policy, mode, call_ref),
    };
    match decision {
        policy::Decision::Allow => {}
        policy::Decision::Block { reason } => {
            let reason = match strict {
                Some(server) => {
                    let switch = if server == crate::tools::global::M365 {
                        "MCP_M365_STRICT_READONLY=1"
                    } else {
                        "strict_read_only"
                    };
                    format!(
                        "the MCP server `{server}` is strictly read-only ({switch}, whatever \
                         the mode): {reason}"
                    )
                }
                None => reason,
            };
            return (
                Err(format!("policy_blocked: {reason}")),
                audit::Outcome::Blocked,
            );
        }
        policy::Decision::Confirm { id, command, .. } => {
            return (
                Err(format!(
                    "confirmation_required: `{command}` changes something; safeWrite mode runs it \
                     only after the user confirms it. Tell the user the exact command and the \
                     confirmation id `{id}` (they confirm in their next message of this \
                     conversation: `confirmations` in the request, or the words `confirm {id}`)"
                )),
                audit::Outcome::Blocked,
            );
        }
    }
    let tool_ctx = ToolContext {
        workspace: ctx.workspace.clone(),
        agent_id: ctx.agent.agent_id.clone(),
        session_id: ctx.session_id.clone(),
        cancel: ctx.cancel.clone(),
        limits: ctx.limits.clone(),
        call_id: call.id.clone(),
        orchestra: Some(Arc::clone(orchestra)),
    };
    // Sub-agents run under their own budget, which never exceeds their parent's.
    let timeout = if tool.bounds_own_time() {
        ctx.deadline
            .saturating_duration_since(tokio::time::Instant::now())
            .saturating_add(CANCEL_GRACE)
    } else {
        // A backstop: the tools keep to the limit themselves and say more when they end a call
        // for it (what a program had printed by then), so theirs must fire first.
        ctx.limits.timeout.saturating_add(CANCEL_GRACE)
    };
    let cancelled = async {
        ctx.cancel.cancelled().await;
        tokio::time::sleep(CANCEL_GRACE).await;
    };
    let result = tokio::select! {
        r = tokio::time::timeout(timeout, tool.call(&tool_ctx, call.arguments.clone())) => {
            r.unwrap_or_else(|_| Err(ToolError::Timeout { tool: call.name.clone(), after: timeout }))
        }
        () = cancelled => Err(ToolError::Cancelled { tool: call.name.clone() }),
    };
    match result {
        Ok(
            outcome @ ToolOutcome::Output {
                is_error: false, ..
            },
        ) => (Ok(outcome), audit::Outcome::Ok),
        Ok(outcome @ ToolOutcome::Output { .. }) => (Ok(outcome), audit::Outcome::ToolFailed),
        Ok(outcome @ (ToolOutcome::Question { .. } | ToolOutcome::NeedInput { .. })) => {
            (Ok(outcome), audit::Outcome::Question)
        }
        Err(e) => {
            if let ToolError::ServerUnavailable { server, reason, .. } = &e {
                let message = format!(
                    "MCP server `{server}` failed during a call ({reason}); the run goes on, and \
                     the server is started again on its next use"
                );
                ctx.sink
                    .emit(events::warning("MCP_SERVER_DISCONNECTED", message))
                    .await;
            }
            let outcome = if matches!(e, ToolError::Cancelled { .. }) {
                audit::Outcome::Cancelled
            } else {
                audit::Outcome::Error
            };
            (Err(e.to_string()), outcome)
        }
    }
}

/// The input of a call that resumes a sub-agent as the audit line shows it: the user's answers
/// by key only (an answer to an own question is logged as a hash of the output, never in clear)
/// and no live resume token. `None` for every other call (logged as the model wrote it).
fn audit_input(arguments: &Value) -> Option<String> {
    let Value::Object(args) = arguments else {
        return None;
    };
    if !args.contains_key("resume_token") && !args.contains_key("answers") {
        return None;
    }
    let mut shown = args.clone();
    if let Some(token) = shown.get_mut("resume_token") {
        *token = Value::String("[resume token]".into());
    }
    if let Some(Value::Object(answers)) = shown.get_mut("answers") {
        for answer in answers.values_mut() {
            *answer = Value::String("[answer]".into());
        }
    }
    Some(Value::Object(shown).to_string())
}

/// `text`, the output of `tool`, with the secrets the redactor recognises masked (a
/// delegation's output keeps its ids: see [`crate::redact::Redactor::redact_keeping_ids`]).
fn redacted(ctx: &RunCtx, tool: &str, text: String) -> String {
    let redactor = &ctx.runner.budgets.redactor;
    let masked = if crate::tools::orchestration::is_delegation(tool) {
        redactor.redact_keeping_ids(&text)
    } else {
        redactor.redact(&text)
    };
    match masked {
        std::borrow::Cow::Borrowed(_) => text,
        std::borrow::Cow::Owned(masked) => masked,
    }
}

/// At most `max` bytes of `content`, cut on a character boundary and marked.
/// Past the output limit, what a tool's own notes of its cuts may take (`[stdout cut: ...]`,
/// `[file cut: ...]`): the native tools cut their output to the limit and say so after it, and
/// that is not cut again here (which lost the note and told the model a wrong total).
const NOTICE_ROOM: usize = 512;

fn cap(mut content: String, max: usize) -> String {
    if content.len() <= max {
        return content;
    }
    let total = content.len();
    let mut end = max;
    while !content.is_char_boundary(end) {
        end -= 1;
    }
    content.truncate(end);
    content.push_str(&format!("\n[output cut: {end} of {total} bytes shown]"));
    content
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_call_id_given_twice_in_one_turn_is_made_unique() {
        use crate::llm::ToolCall;
        let call = |id: &str| {
            Requested::Call(ToolCall {
                id: id.into(),
                name: "python".into(),
                arguments: serde_json::json!({}),
            })
        };
        let mut requested = vec![
            call("call_SAME"),
            call("call_SAME"),
            call("call_SAME-2"),
            Requested::Malformed {
                id: "call_SAME".into(),
                name: "python".into(),
                raw: "{".into(),
                error: "eof".into(),
            },
        ];
        unique_call_ids(&mut requested);
        let ids: Vec<&str> = requested.iter().map(|r| r.ids().0).collect();
        assert_eq!(
            ids,
            ["call_SAME", "call_SAME-2", "call_SAME-2-2", "call_SAME-3"]
        );
    }

    use super::{Requested, cap, unique_call_ids};

    #[test]
    fn long_output_is_cut_on_a_char_boundary_and_says_so() {
        let out = cap("é".repeat(100), 51);
        assert!(out.starts_with(&"é".repeat(25)));
        assert!(
            out.ends_with("[output cut: 50 of 200 bytes shown]"),
            "{out}"
        );
        assert_eq!(cap("short".into(), 51), "short");
    }
}
