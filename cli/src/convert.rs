//! Protobuf → the gateway's JSON shapes (docs/rest-api.md), so `--grpc` prints exactly what the
//! gateway would: the gateway's own conversions (agents, tools, run events, sessions, the
//! create body), used here as a library.

use serde_json::Value;
use taskforce_proto::v1;

/// An agent as `GET /api/v1/agents/{id}` answers it; `None` for one of neither kind.
pub fn agent_json(agent: &v1::Agent) -> Option<Value> {
    gateway::model::SavedAgentJson::from_proto(agent.clone())
        .and_then(|a| serde_json::to_value(a).ok())
}

/// A catalog entry as `GET /api/v1/tools` lists it.
pub fn tool_json(t: &v1::Tool) -> Value {
    serde_json::to_value(gateway::tools::ToolJson::from(t.clone())).unwrap_or(Value::Null)
}

/// A run event as the gateway's SSE `data:` line: the envelope (`type`, `session_id`, `seq`,
/// `agent_path`, `frame_id`, `time_unix_ms`) plus the event's fields. `None` for an event of a
/// kind this CLI does not know.
pub fn event_json(ev: &v1::RunEvent) -> Option<Value> {
    gateway::events::event_json(ev).and_then(|(_, json)| serde_json::to_value(json).ok())
}

/// A session as `GET /api/v1/sessions/{id}` answers it.
pub fn session_json(s: &v1::Session) -> Value {
    serde_json::to_value(gateway::execute::session_json(s.clone())).unwrap_or(Value::Null)
}

/// The `AgentSpec` of a REST create body, read as the gateway reads it (unknown fields are
/// refused, the read-only fields of a GET body ignored); the error names what does not fit.
pub fn spec_of_body(body: Value) -> Result<v1::AgentSpec, String> {
    serde_json::from_value::<gateway::model::AgentRequest>(body)
        .map(|b| b.into_spec(None))
        .map_err(|e| e.to_string())
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
    use serde_json::{Map, json};
    use taskforce_proto::v1::run_event::Event as Ev;

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
            ..Default::default()
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
