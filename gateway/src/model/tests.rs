use super::*;
use serde_json::json;
use taskforce_proto::json::to_struct;

fn custom_agent() -> v1::Agent {
    v1::Agent {
        agent_id: "invoice-extractor".into(),
        source: v1::AgentSource::Custom as i32,
        version: "0123456789abcdef".into(),
        kind: Some(v1::agent::Kind::Custom(v1::CustomAgent {
            spec: Some(v1::AgentSpec {
                agent_id: "invoice-extractor".into(),
                name: "Invoice Extractor".into(),
                description: "Extracts fields".into(),
                system_prompt: "You are a LeanAgent.".into(),
                tool_allowlist: vec!["file_read".into()],
                mcp_servers: vec![v1::McpServer {
                    r#type: "stdio".into(),
                    command: "uvx".into(),
                    args: vec!["mcp-server-time".into()],
                    env: [("TZ".to_owned(), "${TZ}".to_owned())]
                        .into_iter()
                        .collect(),
                    ..Default::default()
                }],
                mcp_tool_allowlist: vec!["get_current_time".into()],
                subagents: vec!["researcher".into(), "dev".into()],
                model: "fast".into(),
                mode: "safeWrite".into(),
                ..Default::default()
            }),
            created_at: "2026-11-22T09:00:00Z".into(),
            updated_at: "2026-11-22T09:30:00Z".into(),
            ..Default::default()
        })),
        ..Default::default()
    }
}

fn to_json(agent: v1::Agent) -> Value {
    serde_json::to_value(AgentJson::from_proto(agent).expect("agent has a kind"))
        .expect("serialisable")
}

#[test]
fn custom_agents_have_the_documented_shape() {
    assert_eq!(
        to_json(custom_agent()),
        json!({
            "source": "custom",
            "agent_id": "invoice-extractor",
            "name": "Invoice Extractor",
            "description": "Extracts fields",
            "system_prompt": "You are a LeanAgent.",
            "tool_allowlist": ["file_read"],
            "mcp_servers": [{"type": "stdio", "command": "uvx", "args": ["mcp-server-time"], "env": {"TZ": "${TZ}"}}],
            "mcp_tool_allowlist": ["get_current_time"],
            "subagents": ["researcher", "dev"],
            "model": "fast",
            "mode": "safeWrite",
            "role": "",
            "project": "",
            "workspace": "",
            "workspace_id": "",
            "status": "idle",
            "last_task": null,
            "created_at": "2026-11-22T09:00:00Z",
            "updated_at": "2026-11-22T09:30:00Z",
            "version": "0123456789abcdef"
        })
    );
}

#[test]
fn profile_agents_have_the_documented_shape() {
    let agent = v1::Agent {
        agent_id: "dev".into(),
        source: v1::AgentSource::Profile as i32,
        version: "fedcba9876543210".into(),
        kind: Some(v1::agent::Kind::Profile(v1::ProfileAgent {
            profile: "dev".into(),
            specialist: "generic".into(),
            tools_config: vec![v1::ToolConfig {
                r#type: "web_search".into(),
                module: String::new(),
                params: Some(to_struct(&json!({"max_results": 5}))),
            }],
            mcp_servers: vec![v1::McpServer {
                r#type: "http".into(),
                url: "http://localhost:9000/mcp".into(),
                ..Default::default()
            }],
            llm: Some(v1::LlmRef {
                config_path: "configs/llm_config.yaml".into(),
                default_model: "main".into(),
            }),
            created_at: "2026-11-20T08:00:00Z".into(),
            updated_at: "2026-11-21T08:00:00Z".into(),
            description: "Development profile".into(),
        })),
        ..Default::default()
    };
    assert_eq!(
        to_json(agent),
        json!({
            "source": "profile",
            "agent_id": "dev",
            "name": "dev",
            "profile": "dev",
            "description": "Development profile",
            "system_prompt": "You are the generic agent of the `dev` profile. Use the tools \
                              offered when they help, and finish with a direct answer to the \
                              mission.\n\nDevelopment profile",
            "tool_allowlist": ["web_search"],
            "specialist": "generic",
            "tools_config": [{"type": "web_search", "module": "", "params": {"max_results": 5}}],
            "mcp_servers": [{"type": "http", "url": "http://localhost:9000/mcp"}],
            "llm": {"config_path": "configs/llm_config.yaml", "default_model": "main"},
            "created_at": "2026-11-20T08:00:00Z",
            "updated_at": "2026-11-21T08:00:00Z",
            "status": "idle",
            "last_task": null,
            "version": "fedcba9876543210"
        })
    );
}

#[test]
fn an_agent_without_a_kind_is_refused() {
    let agent = v1::Agent {
        kind: None,
        ..custom_agent()
    };
    assert!(AgentJson::from_proto(agent).is_none());
}

#[test]
fn a_get_body_can_be_put_back() {
    let body = to_json(custom_agent());
    let req: AgentRequest = serde_json::from_value(body).expect("GET body is a valid PUT body");
    let spec = req.into_spec(Some("invoice-extractor".into()));
    let original = match custom_agent().kind {
        Some(v1::agent::Kind::Custom(c)) => c.spec.expect("spec"),
        _ => unreachable!(),
    };
    assert_eq!(spec, original);
}

#[test]
fn the_path_id_replaces_the_body_id() {
    let req: AgentRequest =
        serde_json::from_value(json!({"agent_id": "other", "name": "n"})).expect("valid body");
    assert_eq!(req.into_spec(Some("abc".into())).agent_id, "abc");
}

#[test]
fn unknown_fields_are_refused_and_named() {
    let err = serde_json::from_value::<AgentRequest>(json!({"agent_id": "abc", "colour": "red"}))
        .expect_err("unknown field");
    assert!(err.to_string().contains("colour"), "{err}");
    let err = serde_json::from_value::<AgentRequest>(
        json!({"mcp_servers": [{"type": "stdio", "cmd": "x"}]}),
    )
    .expect_err("unknown server field");
    assert!(err.to_string().contains("cmd"), "{err}");
}

#[test]
fn wrong_types_are_refused_and_nulls_are_empty() {
    let err = serde_json::from_value::<AgentRequest>(json!({"tool_allowlist": "file_read"}))
        .expect_err("wrong type");
    assert!(err.to_string().contains("invalid type"), "{err}");
    let req: AgentRequest = serde_json::from_value(
        json!({"agent_id": "abc", "mcp_servers": null, "expected_version": null}),
    )
    .expect("nulls are empty");
    assert!(req.mcp_servers.is_empty());
    assert!(req.expected_version.is_none());
}

#[test]
fn list_omits_an_empty_page_token() {
    let empty = AgentListJson {
        agents: Vec::new(),
        next_page_token: String::new(),
    };
    assert_eq!(
        serde_json::to_value(&empty).expect("serialisable"),
        json!({"agents": []})
    );
    let more = AgentListJson {
        agents: Vec::new(),
        next_page_token: "abc".into(),
    };
    assert_eq!(
        serde_json::to_value(&more).expect("serialisable"),
        json!({"agents": [], "next_page_token": "abc"})
    );
}

#[test]
fn subagents_and_model_are_optional_on_input() {
    let req: AgentRequest =
        serde_json::from_value(json!({"agent_id": "abc", "subagents": null})).expect("valid body");
    let spec = req.into_spec(None);
    assert!(spec.subagents.is_empty() && spec.model.is_empty());
    let req: AgentRequest = serde_json::from_value(
        json!({"agent_id": "boss", "subagents": ["researcher"], "model": "fast"}),
    )
    .expect("valid body");
    let spec = req.into_spec(None);
    assert_eq!(
        (spec.subagents, spec.model),
        (vec!["researcher".to_owned()], "fast".to_owned())
    );
}

#[test]
fn mode_is_optional_on_input_and_passed_on_as_written() {
    for body in [
        json!({"agent_id": "abc"}),
        json!({"agent_id": "abc", "mode": null}),
    ] {
        let req: AgentRequest = serde_json::from_value(body).expect("valid body");
        assert_eq!(req.into_spec(None).mode, "");
    }
    // The registry checks and canonicalises it, so every spelling it takes reaches it.
    for mode in ["readOnly", "read_only", "SAFE-WRITE", "yolo"] {
        let req: AgentRequest =
            serde_json::from_value(json!({"agent_id": "abc", "mode": mode})).expect("valid body");
        assert_eq!(req.into_spec(None).mode, mode);
    }
}

#[test]
fn mode_is_always_present_on_output() {
    let mut agent = custom_agent();
    if let Some(v1::agent::Kind::Custom(c)) = agent.kind.as_mut()
        && let Some(spec) = c.spec.as_mut()
    {
        spec.mode.clear();
    }
    assert_eq!(to_json(agent)["mode"], "");
}

#[test]
fn mode_is_in_the_openapi_document() {
    let doc: Value =
        serde_json::from_slice(&crate::openapi::render()).expect("the document is JSON");
    let schemas = &doc["components"]["schemas"];
    for schema in ["AgentRequest", "CustomAgentJson"] {
        let mode = &schemas[schema]["properties"]["mode"];
        assert_eq!(mode["type"], "string", "{schema}: {mode}");
        assert!(
            mode["description"]
                .as_str()
                .is_some_and(|d| d.contains("safeWrite")),
            "{schema}: {mode}"
        );
    }
    let required = |schema: &str| schemas[schema]["required"].clone();
    assert!(
        !required("AgentRequest")
            .as_array()
            .is_some_and(|r| r.contains(&json!("mode")))
    );
    assert!(
        required("CustomAgentJson")
            .as_array()
            .is_some_and(|r| r.contains(&json!("mode")))
    );
}
