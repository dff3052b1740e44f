//! The tool catalog: exactly the native and orchestration tools, plus tools of globally
//! configured MCP servers discovered in the background, and never a secret in any answer.

use std::time::Duration;

use serde_json::{Value, json};
use taskforce_proto::{json::from_struct, v1};
use taskforce_tests::{
    StackOptions, eventually, mcp, paths,
    process::{ReapOnDrop, test_log},
    spawn_stack,
};

use crate::helpers::{NATIVE_TOOLS, ORCHESTRATION_TOOLS, catalog_tools, create, send};

/// The catalog over REST.
async fn tools(stack: &taskforce_tests::Stack) -> Vec<Value> {
    let r = send(stack.http().get(stack.url("/api/v1/tools"))).await;
    assert_eq!(r.status, 200, "{}", r.text);
    r.body["tools"]
        .as_array()
        .expect("tools is an array")
        .clone()
}

fn names(tools: &[Value]) -> Vec<String> {
    tools
        .iter()
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .collect()
}

fn assert_tool_shape(t: &Value) {
    assert!(t["name"].as_str().is_some_and(|s| !s.is_empty()), "{t}");
    assert!(
        t["description"].as_str().is_some_and(|s| !s.is_empty()),
        "description: {t}"
    );
    assert!(t["parameters_schema"].is_object(), "parameters_schema: {t}");
    assert!(
        t["requires_approval"].is_boolean(),
        "requires_approval: {t}"
    );
    assert!(
        ["LOW", "MEDIUM", "HIGH"].contains(&t["approval_risk_level"].as_str().unwrap_or_default()),
        "approval_risk_level: {t}"
    );
}

#[tokio::test]
async fn catalog_lists_exactly_the_native_and_orchestration_tools_with_their_fields() {
    let stack = spawn_stack().await.expect("stack starts");
    let tools = tools(&stack).await;
    assert_eq!(
        names(&tools),
        catalog_tools(),
        "exactly the native tools (without llm_generate), then the orchestration tools"
    );
    for t in &tools {
        assert_tool_shape(t);
        let name = t["name"].as_str().unwrap_or_default();
        let origin = if ORCHESTRATION_TOOLS.contains(&name) {
            "orchestration"
        } else {
            "native"
        };
        assert_eq!(t["origin"], origin, "{t}");
        assert!(
            t.get("mcp_server_id")
                .is_none_or(|v| v.is_null() || v == ""),
            "native tools have no server: {t}"
        );
        assert_eq!(t["parameters_schema"]["type"], "object", "{t}");
    }
    let python = tools
        .iter()
        .find(|t| t["name"] == "python")
        .expect("python");
    assert!(
        python["parameters_schema"]["properties"].is_object(),
        "{python}"
    );

    let grpc = stack
        .registry()
        .list_tools(v1::ListToolsRequest {})
        .await
        .expect("ListTools")
        .into_inner()
        .tools;
    assert_eq!(grpc.len(), tools.len());
    for g in &grpc {
        let rest = tools
            .iter()
            .find(|t| t["name"] == g.name.as_str())
            .expect("same tools over gRPC and REST");
        assert_eq!(rest["description"], g.description.as_str());
        assert_eq!(rest["approval_risk_level"], g.approval_risk_level.as_str());
        assert_eq!(rest["requires_approval"], g.requires_approval);
        let schema = g
            .parameters_schema
            .as_ref()
            .map(from_struct)
            .unwrap_or_default();
        assert_eq!(rest["parameters_schema"], schema, "schema of {}", g.name);
    }
}

#[tokio::test]
async fn global_mcp_tools_appear_in_the_catalog_and_secrets_never_leave_the_registry() {
    let secret = "tf-e2e-secret-value-5b0c9e";
    let time_server = paths::mcp_server_time().expect("mcp-server-time is installed");
    let catalog = format!(
        "mcp_servers:\n  time:\n    type: stdio\n    command: {}\n    env:\n      TF_E2E_TOKEN: \"${{TF_E2E_SECRET}}\"\n",
        time_server.display()
    );
    let stack = StackOptions::full()
        .catalog_mcp(catalog)
        .registry_env("TF_E2E_SECRET", secret)
        .discovery_timeout_ms(20_000)
        .spawn()
        .await
        .expect("stack starts");

    let found = eventually(
        Duration::from_secs(30),
        Duration::from_millis(200),
        || async {
            let tools = tools(&stack).await;
            tools
                .iter()
                .any(|t| t["name"] == "get_current_time")
                .then_some(tools)
        },
    )
    .await
    .expect("the global MCP server's tools appear within 30 s");
    for name in ["get_current_time", "convert_time"] {
        let t = found
            .iter()
            .find(|t| t["name"] == name)
            .expect("MCP tool listed");
        assert_tool_shape(t);
        assert_eq!(t["origin"], "mcp", "{t}");
        assert_eq!(t["mcp_server_id"], "time", "{t}");
    }
    let native = found.iter().filter(|t| t["origin"] == "native").count();
    assert_eq!(
        native,
        NATIVE_TOOLS.len(),
        "native tools are still all there"
    );

    // An agent whose MCP server env holds the placeholder: validation launches the server
    // (expanding it), but the definition is stored and returned as written.
    let mut body = crate::helpers::agent_json("secret-holder");
    let mut server = mcp::time_server_json().expect("mcp-server-time");
    server["env"] = json!({"TF_E2E_TOKEN": "${TF_E2E_SECRET}"});
    body["mcp_servers"] = json!([server]);
    body["mcp_tool_allowlist"] = json!(["get_current_time"]);
    let r = create(&stack, &body).await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(
        r.body["mcp_servers"][0]["env"]["TF_E2E_TOKEN"],
        "${TF_E2E_SECRET}"
    );
    let file = std::fs::read_to_string(stack.custom_dir().join("secret-holder.yaml"))
        .expect("file written");
    assert!(
        file.contains("${TF_E2E_SECRET}") && !file.contains(secret),
        "{file}"
    );

    let mut answers = Vec::new();
    for path in [
        "/api/v1/tools",
        "/api/v1/agents",
        "/api/v1/agents/secret-holder",
        "/api/v1/diagnostics",
        "/openapi.json",
    ] {
        answers.push((
            path.to_owned(),
            send(stack.http().get(stack.url(path))).await.text,
        ));
    }
    let validate = send(
        stack
            .http()
            .post(stack.url("/api/v1/agents:validate"))
            .json(&body),
    )
    .await;
    answers.push(("validate".into(), validate.text));
    let mut client = stack.registry();
    let grpc_tools = client
        .list_tools(v1::ListToolsRequest {})
        .await
        .expect("ListTools");
    answers.push(("ListTools".into(), format!("{grpc_tools:?}")));
    let grpc_agents = client
        .list_agents(v1::ListAgentsRequest::default())
        .await
        .expect("ListAgents");
    answers.push(("ListAgents".into(), format!("{grpc_agents:?}")));
    for (what, text) in &answers {
        assert!(!text.contains(secret), "{what} leaks the secret: {text}");
    }
    if !test_log() {
        for log in [stack.registry_log(), stack.gateway_log()] {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            assert!(!text.contains(secret), "{} holds the secret", log.display());
        }
    }
}

#[tokio::test]
async fn catalog_is_served_while_a_global_mcp_server_hangs() {
    let catalog =
        "mcp_servers:\n  stuck:\n    type: stdio\n    command: sleep\n    args: [\"3529\"]\n";
    // Dropped after the stack: the registry may not stop the hanging server (see lifecycle).
    let _servers = ReapOnDrop::new(&["sleep", "3529"]);
    let stack = StackOptions::full()
        .catalog_mcp(catalog)
        .discovery_timeout_ms(30_000)
        .spawn()
        .await
        .expect("stack starts");
    let r = tokio::time::timeout(
        Duration::from_secs(10),
        send(stack.http().get(stack.url("/api/v1/tools"))),
    )
    .await
    .expect("the catalog does not wait for MCP discovery");
    assert_eq!(r.status, 200, "{}", r.text);
    let tools = r.body["tools"].as_array().expect("tools");
    assert_eq!(
        tools.len(),
        catalog_tools().len(),
        "only native and orchestration tools while discovery hangs: {}",
        r.text
    );
}
