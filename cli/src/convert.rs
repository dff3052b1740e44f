//! Protobuf ⇄ the gateway's JSON shapes (docs/rest-api.md), so `--grpc` prints what the gateway
//! would: agents, tools, run events, plans, sessions, and the create body as an `AgentSpec`.
//!
//! This mirrors the gateway's conversions instead of depending on the gateway crate (which
//! would pull a web server into a CLI that also serves as a container healthcheck); the
//! end-to-end tests compare `--grpc --json` with the gateway's output, so the two cannot drift
//! apart unnoticed.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Map, Value, json};
use taskforce_proto::{
    json::from_struct,
    v1::{self, run_event::Event as Ev},
};

/// JSON text as a value; empty or invalid text is `null` (as the gateway does).
pub fn parse_json(text: &str) -> Value {
    if text.trim().is_empty() {
        return Value::Null;
    }
    serde_json::from_str(text).unwrap_or(Value::Null)
}

/// `idle` or `busy`.
fn agent_status(status: i32) -> &'static str {
    match v1::AgentStatus::try_from(status) {
        Ok(v1::AgentStatus::Busy) => "busy",
        Ok(v1::AgentStatus::Idle | v1::AgentStatus::Unspecified) | Err(_) => "idle",
    }
}

/// The lower-case name of a run status.
pub fn run_status(status: i32) -> &'static str {
    match v1::RunStatus::try_from(status) {
        Ok(v1::RunStatus::Running) => "running",
        Ok(v1::RunStatus::Completed) => "completed",
        Ok(v1::RunStatus::Paused) => "paused",
        Ok(v1::RunStatus::Failed) => "failed",
        Ok(v1::RunStatus::Cancelled) => "cancelled",
        Ok(v1::RunStatus::Unspecified) | Err(_) => "unspecified",
    }
}

/// One MCP server; empty fields are left out.
fn mcp_server(s: &v1::McpServer) -> Value {
    let mut out = Map::new();
    out.insert("type".into(), json!(s.r#type));
    let mut put = |key: &str, value: Value, empty: bool| {
        if !empty {
            out.insert(key.into(), value);
        }
    };
    put("command", json!(s.command), s.command.is_empty());
    put("args", json!(s.args), s.args.is_empty());
    let env: BTreeMap<_, _> = s.env.iter().collect();
    put("env", json!(env), env.is_empty());
    put("url", json!(s.url), s.url.is_empty());
    let headers: BTreeMap<_, _> = s.headers.iter().collect();
    put("headers", json!(headers), headers.is_empty());
    put("name", json!(s.name), s.name.is_empty());
    Value::Object(out)
}

/// An agent as `GET /api/v1/agents/{id}` answers it; `None` for one of neither kind.
pub fn agent_json(agent: &v1::Agent) -> Option<Value> {
    let status = agent_status(agent.status);
    let last_task = (!agent.last_task.is_empty()).then_some(agent.last_task.as_str());
    Some(match agent.kind.as_ref()? {
        v1::agent::Kind::Custom(c) => {
            let default = v1::AgentSpec::default();
            let spec = c.spec.as_ref().unwrap_or(&default);
            let id = if agent.agent_id.is_empty() {
                &spec.agent_id
            } else {
                &agent.agent_id
            };
            json!({
                "source": "custom",
                "agent_id": id,
                "name": spec.name,
                "description": spec.description,
                "system_prompt": spec.system_prompt,
                "tool_allowlist": spec.tool_allowlist,
                "mcp_servers": spec.mcp_servers.iter().map(mcp_server).collect::<Vec<_>>(),
                "mcp_tool_allowlist": spec.mcp_tool_allowlist,
                "subagents": spec.subagents,
                "model": spec.model,
                "mode": spec.mode,
                "role": spec.role,
                "project": spec.project,
                "workspace": spec.workspace,
                "workspace_id": c.workspace_id,
                "status": status,
                "last_task": last_task,
                "created_at": c.created_at,
                "updated_at": c.updated_at,
                "version": agent.version,
            })
        }
        v1::agent::Kind::Profile(p) => {
            let id = if agent.agent_id.is_empty() {
                &p.profile
            } else {
                &agent.agent_id
            };
            let mut out = json!({
                "source": "profile",
                "agent_id": id,
                "profile": p.profile,
                "description": p.description,
                "specialist": p.specialist,
                "tools_config": p.tools_config.iter().map(|t| json!({
                    "type": t.r#type,
                    "module": t.module,
                    "params": t.params.as_ref().map_or_else(|| json!({}), from_struct),
                })).collect::<Vec<_>>(),
                "mcp_servers": p.mcp_servers.iter().map(mcp_server).collect::<Vec<_>>(),
                "status": status,
                "last_task": last_task,
                "version": agent.version,
            });
            if let (Some(llm), Some(obj)) = (&p.llm, out.as_object_mut()) {
                obj.insert(
                    "llm".into(),
                    json!({"config_path": llm.config_path, "default_model": llm.default_model}),
                );
            }
            out
        }
    })
}

/// A catalog entry as `GET /api/v1/tools` lists it.
pub fn tool_json(t: &v1::Tool) -> Value {
    let mut out = json!({
        "name": t.name,
        "description": t.description,
        "parameters_schema": t.parameters_schema.as_ref().map_or_else(|| json!({}), from_struct),
        "requires_approval": t.requires_approval,
        "approval_risk_level": t.approval_risk_level,
        "origin": t.origin,
        "available": t.available,
    });
    if t.origin == "mcp"
        && let Some(obj) = out.as_object_mut()
    {
        obj.insert("mcp_server_id".into(), json!(t.mcp_server_id));
    }
    out
}

/// The items of a question (empty for an ordinary question).
fn question_items(items: &[v1::QuestionItem]) -> Vec<Value> {
    items
        .iter()
        .map(|i| {
            json!({"key": i.key, "text": i.text, "required": i.required,
                   "default": parse_json(&i.default_json), "agent_path": i.agent_path})
        })
        .collect()
}

/// A todo plan as the plan route and `plan_updated` carry it.
pub fn plan_json(plan: &v1::Plan) -> Value {
    let tasks: Vec<Value> = plan
        .tasks
        .iter()
        .map(|t| {
            json!({
                "id": t.id, "title": t.title, "status": t.status, "depends_on": t.depends_on,
                "owner_agent": t.owner_agent,
                "parent_id": (!t.parent_id.is_empty()).then_some(&t.parent_id),
                "notes": t.notes, "tool": t.tool,
                "params": parse_json(&t.params_json), "result": parse_json(&t.result_json),
            })
        })
        .collect();
    json!({"version": plan.version, "tasks": tasks, "markdown": plan.markdown})
}

/// A run's usage.
fn usage_json(u: &v1::Usage) -> Value {
    json!({"input_tokens": u.input_tokens, "output_tokens": u.output_tokens,
           "steps": u.steps, "tool_calls": u.tool_calls})
}

/// A run event as the gateway's SSE `data:` line: the envelope (`type`, `session_id`, `seq`,
/// `agent_path`, `frame_id`, `time_unix_ms`) plus the event's fields. `None` for an event of a
/// kind this CLI does not know.
pub fn event_json(ev: &v1::RunEvent) -> Option<Value> {
    let (name, fields) = match ev.event.as_ref()? {
        Ev::RunStarted(e) => (
            "run_started",
            json!({"agent_id": e.agent_id, "model": e.model, "provider": e.provider}),
        ),
        Ev::Token(e) => ("token", json!({"text": e.text})),
        Ev::ToolStart(e) => (
            "tool_start",
            json!({"call_id": e.call_id, "tool": e.tool, "arguments_json": e.arguments_json}),
        ),
        Ev::ToolEnd(e) => (
            "tool_end",
            json!({"call_id": e.call_id, "tool": e.tool, "output": e.output,
                   "is_error": e.is_error, "duration_ms": e.duration_ms}),
        ),
        Ev::ToolError(e) => (
            "tool_error",
            json!({"call_id": e.call_id, "tool": e.tool, "message": e.message}),
        ),
        Ev::Question(e) => (
            "question",
            json!({"call_id": e.call_id, "question": e.question,
                   "items": question_items(&e.items)}),
        ),
        Ev::FinalAnswer(e) => ("final_answer", json!({"text": e.text})),
        Ev::Error(e) => ("error", json!({"code": e.code, "message": e.message})),
        Ev::Warning(e) => ("warning", json!({"code": e.code, "message": e.message})),
        Ev::Done(e) => (
            "done",
            json!({"status": run_status(e.status), "usage": e.usage.as_ref().map(usage_json)}),
        ),
        Ev::DelegationStart(e) => (
            "delegation_start",
            json!({"call_id": e.call_id, "agent_id": e.agent_id, "task": e.task,
                   "task_id": e.task_id, "resumed": e.resumed}),
        ),
        Ev::DelegationEnd(e) => (
            "delegation_end",
            json!({"call_id": e.call_id, "agent_id": e.agent_id, "task_id": e.task_id,
                   "status": e.status, "result": parse_json(&e.result_json)}),
        ),
        Ev::PatchApplied(e) => (
            "patch_applied",
            json!({"author": e.author, "version": e.version, "ops": parse_json(&e.ops_json)}),
        ),
        Ev::PatchRejected(e) => (
            "patch_rejected",
            json!({"author": e.author, "reason": e.reason, "message": e.message,
                   "current_version": e.current_version,
                   "rejected_ops": parse_json(&e.rejected_ops_json)}),
        ),
        Ev::PlanUpdated(e) => (
            "plan_updated",
            json!({"plan": plan_json(e.plan.as_ref().unwrap_or(&v1::Plan::default()))}),
        ),
    };
    let mut out = json!({
        "type": name,
        "session_id": ev.session_id,
        "seq": ev.seq,
        "agent_path": ev.agent_path,
        "frame_id": ev.frame_id,
        "time_unix_ms": ev.time_unix_ms,
    });
    if let (Some(out), Value::Object(fields)) = (out.as_object_mut(), fields) {
        out.extend(fields);
    }
    Some(out)
}

/// A session as `GET /api/v1/sessions/{id}` answers it: where it stands, its question or
/// final answer, how many messages and events, its plan.
pub fn session_json(s: &v1::Session) -> Value {
    let mut out = json!({
        "session_id": s.session_id,
        "agent_id": s.agent_id,
        "status": run_status(s.status),
        "mission": s.mission,
        "created_at": s.created_at,
        "updated_at": s.updated_at,
        "messages": s.messages.len(),
        "events": s.next_seq,
        "plan": plan_json(s.plan.as_ref().unwrap_or(&v1::Plan::default())),
    });
    if let Some(obj) = out.as_object_mut() {
        if !s.final_answer.is_empty() {
            obj.insert("final_answer".into(), json!(s.final_answer));
        }
        if let Some(q) = &s.pending_question {
            obj.insert(
                "question".into(),
                json!({"call_id": q.call_id, "question": q.question,
                       "items": question_items(&q.items)}),
            );
        }
        if !s.model.is_empty() {
            obj.insert("model".into(), json!(s.model));
        }
    }
    out
}

/// One MCP server of a create body.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct McpServerBody {
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default)]
    command: String,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    url: String,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default)]
    name: String,
}

/// The REST create body (docs/rest-api.md), read for `CreateAgent`. Unknown fields are refused
/// as the gateway refuses them; the registry checks the values.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct AgentBody {
    #[serde(default)]
    agent_id: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    description: String,
    #[serde(default)]
    system_prompt: String,
    #[serde(default)]
    tool_allowlist: Vec<String>,
    #[serde(default)]
    mcp_servers: Vec<McpServerBody>,
    #[serde(default)]
    mcp_tool_allowlist: Vec<String>,
    #[serde(default)]
    subagents: Vec<String>,
    #[serde(default)]
    model: String,
    #[serde(default)]
    mode: String,
    #[serde(default)]
    role: String,
    #[serde(default)]
    project: String,
    #[serde(default)]
    workspace: String,
}

/// The `AgentSpec` of a REST create body; the error names the field that does not fit.
pub fn spec_of_body(body: Value) -> Result<v1::AgentSpec, String> {
    let b: AgentBody = serde_json::from_value(body).map_err(|e| e.to_string())?;
    Ok(v1::AgentSpec {
        agent_id: b.agent_id,
        name: b.name,
        description: b.description,
        system_prompt: b.system_prompt,
        tool_allowlist: b.tool_allowlist,
        mcp_servers: b
            .mcp_servers
            .into_iter()
            .map(|s| v1::McpServer {
                r#type: s.kind,
                command: s.command,
                args: s.args,
                env: s.env.into_iter().collect(),
                url: s.url,
                headers: s.headers.into_iter().collect(),
                name: s.name,
            })
            .collect(),
        mcp_tool_allowlist: b.mcp_tool_allowlist,
        role: b.role,
        project: b.project,
        workspace: b.workspace,
        subagents: b.subagents,
        model: b.model,
        mode: b.mode,
    })
}

/// True for the event that ends a run: the top agent's `done` (sub-agents' frames end with
/// `delegation_end`).
pub fn ends_run(event: &Value) -> bool {
    event["type"] == "done" && is_top(event)
}

/// True for an event of the top agent (empty or missing `frame_id`).
pub fn is_top(event: &Value) -> bool {
    event["frame_id"].as_str().is_none_or(str::is_empty)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_custom_agent_has_every_rest_field() {
        let agent = v1::Agent {
            agent_id: "notes".into(),
            source: v1::AgentSource::Custom.into(),
            version: "0123456789abcdef".into(),
            kind: Some(v1::agent::Kind::Custom(v1::CustomAgent {
                spec: Some(v1::AgentSpec {
                    agent_id: "notes".into(),
                    name: "Notes".into(),
                    tool_allowlist: vec!["file_read".into()],
                    mcp_servers: vec![v1::McpServer {
                        r#type: "stdio".into(),
                        command: "uvx".into(),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
                created_at: "2026-01-01T00:00:00Z".into(),
                updated_at: "2026-01-01T00:00:00Z".into(),
                workspace_id: "w".into(),
                ..Default::default()
            })),
            status: v1::AgentStatus::Busy.into(),
            last_task: String::new(),
        };
        let j = agent_json(&agent).expect("a custom agent");
        assert_eq!(j["source"], "custom");
        assert_eq!(j["status"], "busy");
        assert_eq!(j["last_task"], Value::Null);
        assert_eq!(
            j["mcp_servers"],
            json!([{"type": "stdio", "command": "uvx"}])
        );
        assert_eq!(j.as_object().map(Map::len), Some(20));
        assert!(agent_json(&v1::Agent::default()).is_none());
    }

    #[test]
    fn only_mcp_tools_name_their_server() {
        let native = v1::Tool {
            name: "file_read".into(),
            origin: "native".into(),
            mcp_server_id: "x".into(),
            ..Default::default()
        };
        assert!(tool_json(&native).get("mcp_server_id").is_none());
        let mcp = v1::Tool {
            origin: "mcp".into(),
            mcp_server_id: "time".into(),
            ..native
        };
        assert_eq!(tool_json(&mcp)["mcp_server_id"], "time");
    }

    #[test]
    fn events_carry_the_envelope_and_their_fields() {
        let ev = v1::RunEvent {
            session_id: "s".into(),
            seq: 3,
            agent_path: vec!["sub".into()],
            time_unix_ms: 9,
            frame_id: "f".into(),
            event: Some(Ev::Done(v1::Done {
                status: v1::RunStatus::Paused.into(),
                usage: None,
            })),
        };
        let j = event_json(&ev).expect("known");
        assert_eq!(
            j,
            json!({"type": "done", "session_id": "s", "seq": 3, "agent_path": ["sub"],
                   "frame_id": "f", "time_unix_ms": 9, "status": "paused", "usage": null})
        );
        assert!(!ends_run(&j), "a sub-agent's done does not end the run");
        assert!(ends_run(&json!({"type": "done", "frame_id": ""})));
        assert!(event_json(&v1::RunEvent::default()).is_none());
    }

    #[test]
    fn a_body_becomes_a_spec_and_unknown_fields_are_named() {
        let spec = spec_of_body(
            json!({"agent_id": "a-1", "name": "A", "tool_allowlist": ["git"],
            "mcp_servers": [{"type": "http", "url": "http://x", "headers": {"k": "v"}}]}),
        )
        .expect("a valid body");
        assert_eq!(spec.agent_id, "a-1");
        assert_eq!(
            spec.mcp_servers[0].headers.get("k").map(String::as_str),
            Some("v")
        );
        let err = spec_of_body(json!({"agent_id": "a", "colour": "red"})).expect_err("unknown");
        assert!(err.contains("colour"), "{err}");
    }
}
