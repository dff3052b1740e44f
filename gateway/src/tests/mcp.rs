//! `/mcp` against the fake registry: tool results as JSON-RPC, metadata joined into
//! `show_agent`, pages followed by `list_agents`, and the REST middleware kept out of the way.

use axum::http::{Method, StatusCode};
use serde_json::{Value, json};

use super::{JSON, Reply, call, fake::FakeRegistry, fake_app};

const MCP: [(&str, &str); 4] = [
    JSON,
    ("accept", "application/json, text/event-stream"),
    ("host", "localhost"),
    ("mcp-protocol-version", "2025-06-18"),
];

async fn tool(app: &axum::Router, name: &str, args: Value) -> Reply {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": name, "arguments": args}});
    call(app, Method::POST, "/mcp", &MCP, Some(&body.to_string())).await
}

#[tokio::test]
async fn show_agent_joins_the_agent_and_its_metadata() {
    let fake = FakeRegistry::new(3, 100);
    let app = fake_app(&fake).await;
    let r = tool(&app, "show_agent", json!({"agent_name": "agent-001"})).await;
    assert_eq!(r.status, StatusCode::OK);
    let result = &r.body["result"];
    assert_eq!(result["isError"], false, "{}", r.body);
    let agent = &result["structuredContent"]["agent"];
    assert_eq!(agent["name"], "agent-001");
    assert_eq!(agent["metadata_count"], 1);
    assert_eq!(agent["metadata"]["pr"]["value"], 810);
    let text = result["content"][0]["text"].as_str().unwrap_or_default();
    assert_eq!(
        serde_json::from_str::<Value>(text).ok().as_ref(),
        Some(&result["structuredContent"])
    );
    let mut calls = fake.calls();
    calls.sort();
    assert_eq!(calls, ["get agent-001", "metadata agent-001 false"]);
}

#[tokio::test]
async fn unknown_agents_and_bad_names_are_tool_errors_without_registry_calls_for_bad_names() {
    let fake = FakeRegistry::new(1, 100);
    let app = fake_app(&fake).await;
    let r = tool(&app, "show_agent", json!({"agent_name": "nope-agent"})).await;
    assert_eq!(r.body["result"]["isError"], true, "{}", r.body);
    let text = r.body["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(text.starts_with("AgentNotFoundError"), "{text}");
    let calls_before = fake.calls().len();
    let r = tool(&app, "show_agent", json!({"agent_name": "../x"})).await;
    assert_eq!(r.body["result"]["isError"], true, "{}", r.body);
    assert_eq!(
        fake.calls().len(),
        calls_before,
        "an invalid name never reaches the registry"
    );
}

#[tokio::test]
async fn list_agents_follows_every_page_and_skips_metadata_without_workspace() {
    let fake = FakeRegistry::new(5, 2);
    let app = fake_app(&fake).await;
    let r = tool(&app, "list_agents", json!({})).await;
    let out = &r.body["result"]["structuredContent"];
    assert_eq!(out["total_count"], 5, "{}", r.body);
    assert_eq!(out["agents"][4]["name"], "agent-004");
    // The fake's agents have no workspace: no GetAgentMetadata calls.
    assert!(
        fake.calls().iter().all(|c| c.starts_with("list")),
        "{:?}",
        fake.calls()
    );
}

#[tokio::test]
async fn mcp_errors_are_not_rewritten_into_rest_error_bodies() {
    let app = fake_app(&FakeRegistry::new(1, 100)).await;
    let mut headers = MCP;
    headers[3] = ("mcp-protocol-version", "1999-01-01");
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).to_string();
    let r = call(&app, Method::POST, "/mcp", &headers, Some(&body)).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    let text = String::from_utf8_lossy(&r.raw);
    assert!(text.contains("Unsupported MCP-Protocol-Version"), "{text}");
}
