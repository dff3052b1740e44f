//! The agent routes: paging, ids, ETag/If-Match, Location, status codes.

use axum::http::{Method, StatusCode, header};
use serde_json::json;

use super::{JSON, assert_error, call, fake::FakeRegistry, fake_app, get};

#[tokio::test]
async fn listing_without_page_size_collects_every_page() {
    let fake = FakeRegistry::new(5, 2);
    let app = fake_app(&fake).await;
    let r = get(&app, "/api/v1/agents").await;
    assert_eq!(r.status, StatusCode::OK);
    let ids: Vec<&str> = r.body["agents"]
        .as_array()
        .expect("agents")
        .iter()
        .filter_map(|a| a["agent_id"].as_str())
        .collect();
    assert_eq!(
        ids,
        [
            "agent-000",
            "agent-001",
            "agent-002",
            "agent-003",
            "agent-004"
        ]
    );
    assert!(r.body.get("next_page_token").is_none());
    assert_eq!(
        fake.calls(),
        [
            "list size=1000 token= source=0",
            "list size=1000 token=2 source=0",
            "list size=1000 token=4 source=0"
        ]
    );
}

#[tokio::test]
async fn listing_with_page_size_returns_one_page_and_its_token() {
    let fake = FakeRegistry::new(5, 100);
    let app = fake_app(&fake).await;
    let r = get(&app, "/api/v1/agents?page_size=2&source=custom").await;
    assert_eq!(r.body["agents"].as_array().map(Vec::len), Some(2));
    assert_eq!(r.body["next_page_token"], "2");
    let r = get(&app, "/api/v1/agents?page_size=3&page_token=2").await;
    assert_eq!(r.body["agents"].as_array().map(Vec::len), Some(3));
    assert!(r.body.get("next_page_token").is_none());
    assert_eq!(
        fake.calls(),
        [
            "list size=2 token= source=1",
            "list size=3 token=2 source=0"
        ]
    );
    for bad in [
        "page_size=0",
        "page_size=1001",
        "page_size=x",
        "source=both",
    ] {
        assert_error(
            &get(&app, &format!("/api/v1/agents?{bad}")).await,
            StatusCode::BAD_REQUEST,
            "invalid_argument",
        );
    }
}

#[tokio::test]
async fn get_sends_the_etag_and_bad_ids_never_reach_the_registry() {
    let fake = FakeRegistry::new(1, 10);
    let app = fake_app(&fake).await;
    let r = get(&app, "/api/v1/agents/agent-000").await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.headers[header::ETAG], "\"0000000000000001\"");
    assert_eq!(r.body["source"], "custom");
    // A client that has this version is told so, without the body.
    for (asked, status) in [
        ("\"0000000000000001\"", StatusCode::NOT_MODIFIED),
        ("W/\"0000000000000001\", \"x\"", StatusCode::NOT_MODIFIED),
        ("*", StatusCode::NOT_MODIFIED),
        ("\"0000000000000000\"", StatusCode::OK),
    ] {
        let r = call(
            &app,
            Method::GET,
            "/api/v1/agents/agent-000",
            &[("if-none-match", asked)],
            None,
        )
        .await;
        assert_eq!(r.status, status, "{asked}");
        assert_eq!(r.headers[header::ETAG], "\"0000000000000001\"");
        assert_eq!(r.raw.is_empty(), status == StatusCode::NOT_MODIFIED);
    }
    for bad in [
        "..%2Fx",
        "..%2F..%2Fetc%2Fpasswd",
        "AB",
        "x.yaml",
        "%2e%2e",
        "a%00b",
        "%FF%FE",
    ] {
        let r = get(&app, &format!("/api/v1/agents/{bad}")).await;
        assert_error(&r, StatusCode::BAD_REQUEST, "invalid_argument");
        assert!(
            r.body["message"]
                .as_str()
                .is_some_and(|m| m.contains("agent_id")),
            "{:?}",
            r.body
        );
    }
    assert_error(
        &get(&app, "/api/v1/agents/nobody-here").await,
        StatusCode::NOT_FOUND,
        "not_found",
    );
    assert_eq!(
        fake.calls(),
        [
            "get agent-000",
            "get agent-000",
            "get agent-000",
            "get agent-000",
            "get agent-000",
            "get nobody-here"
        ]
    );
}

#[tokio::test]
async fn create_answers_201_with_location_and_etag() {
    let fake = FakeRegistry::new(0, 10);
    let app = fake_app(&fake).await;
    let body = r#"{"agent_id":"agent-new","name":"n","description":"d","system_prompt":"p","tool_allowlist":["file_read"]}"#;
    let r = call(&app, Method::POST, "/api/v1/agents", &[JSON], Some(body)).await;
    assert_eq!(r.status, StatusCode::CREATED);
    assert_eq!(r.headers[header::LOCATION], "/api/v1/agents/agent-new");
    assert_eq!(r.headers[header::ETAG], "\"0000000000000001\"");
    let taken = r#"{"agent_id":"taken-agent"}"#;
    let r = call(&app, Method::POST, "/api/v1/agents", &[JSON], Some(taken)).await;
    assert_error(&r, StatusCode::CONFLICT, "already_exists");
}

#[tokio::test]
async fn put_uses_the_path_id_and_if_match_in_either_form() {
    let fake = FakeRegistry::new(1, 10);
    let app = fake_app(&fake).await;
    let got = get(&app, "/api/v1/agents/agent-000").await;
    let mut body = got.body.clone();
    body["agent_id"] = json!("something-else");
    let body = body.to_string();
    for if_match in ["\"0000000000000001\"", "0000000000000001"] {
        let r = call(
            &app,
            Method::PUT,
            "/api/v1/agents/agent-000",
            &[JSON, ("if-match", if_match)],
            Some(&body),
        )
        .await;
        assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
        assert_eq!(r.headers[header::ETAG], "\"0000000000000002\"");
    }
    let r = call(
        &app,
        Method::PUT,
        "/api/v1/agents/agent-000",
        &[JSON, ("if-match", "\"stale\"")],
        Some(&body),
    )
    .await;
    assert_error(&r, StatusCode::CONFLICT, "version_conflict");
    let calls = fake.calls();
    assert_eq!(
        calls[1],
        "update agent-000 spec=agent-000 expected=0000000000000001"
    );
    assert_eq!(calls[3], "update agent-000 spec=agent-000 expected=stale");
}

#[tokio::test]
async fn an_empty_expected_version_is_a_400_and_null_or_none_is_no_check() {
    let fake = FakeRegistry::new(1, 10);
    let app = fake_app(&fake).await;
    let mut body = get(&app, "/api/v1/agents/agent-000").await.body;
    for empty in ["", " "] {
        body["expected_version"] = json!(empty);
        let r = call(
            &app,
            Method::PUT,
            "/api/v1/agents/agent-000",
            &[JSON],
            Some(&body.to_string()),
        )
        .await;
        assert_error(&r, StatusCode::BAD_REQUEST, "invalid_argument");
        let message = r.body["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("expected_version")
                && message.contains("leave it out to replace whatever version is stored"),
            "{message}"
        );
    }
    assert!(
        fake.calls().iter().all(|c| !c.starts_with("update")),
        "{:?}",
        fake.calls()
    );
    body["expected_version"] = serde_json::Value::Null;
    let r = call(
        &app,
        Method::PUT,
        "/api/v1/agents/agent-000",
        &[JSON],
        Some(&body.to_string()),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(
        fake.calls().last().map(String::as_str),
        Some("update agent-000 spec=agent-000 expected=")
    );
}

#[tokio::test]
async fn delete_answers_204_with_an_empty_body() {
    let fake = FakeRegistry::new(1, 10);
    let app = fake_app(&fake).await;
    let r = call(
        &app,
        Method::DELETE,
        "/api/v1/agents/agent-000?expected_version=abc",
        &[],
        None,
    )
    .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    assert!(r.raw.is_empty());
    let r = call(
        &app,
        Method::DELETE,
        "/api/v1/agents/agent-000",
        &[("if-match", "\"def\"")],
        None,
    )
    .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    assert_eq!(
        fake.calls(),
        [
            "delete agent-000 expected=abc",
            "delete agent-000 expected=def"
        ]
    );
}

#[tokio::test]
async fn a_version_given_where_it_is_not_read_is_a_400_not_ignored() {
    let fake = FakeRegistry::new(1, 10);
    let app = fake_app(&fake).await;
    let body = get(&app, "/api/v1/agents/agent-000").await.body.to_string();
    let stale = r#"{"expected_version":"0000000000000000"}"#;
    for (method, uri, b) in [
        // The DELETE spelling on a PUT, a DELETE's query misspelt, a DELETE with a body.
        (
            Method::PUT,
            "/api/v1/agents/agent-000?expected_version=0000000000000000",
            Some(body.as_str()),
        ),
        (
            Method::DELETE,
            "/api/v1/agents/agent-000?version=0000000000000000",
            None,
        ),
        (Method::DELETE, "/api/v1/agents/agent-000", Some(stale)),
        (Method::GET, "/api/v1/agents?pagesize=5", None),
        (Method::GET, "/api/v1/agents/agent-000?source=custom", None),
        (
            Method::POST,
            "/api/v1/agents:validate?dry=1",
            Some(body.as_str()),
        ),
    ] {
        let r = call(&app, method.clone(), uri, &[JSON], b).await;
        assert_error(&r, StatusCode::BAD_REQUEST, "invalid_argument");
    }
    // Nothing reached the registry but the first GET.
    assert!(
        fake.calls()
            .iter()
            .all(|c| !c.starts_with("update") && !c.starts_with("delete")),
        "{:?}",
        fake.calls()
    );
}

#[tokio::test]
async fn subagents_and_model_go_to_the_registry_and_come_back() {
    let fake = FakeRegistry::new(2, 10);
    let app = fake_app(&fake).await;
    let body = json!({"agent_id": "boss", "name": "Boss", "description": "Delegates",
        "system_prompt": "Plan.", "tool_allowlist": ["delegate_to_agent"],
        "subagents": ["agent-000", "agent-001"], "model": "fast"});
    let r = call(
        &app,
        Method::POST,
        "/api/v1/agents",
        &[JSON],
        Some(&body.to_string()),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    assert_eq!(r.body["subagents"], json!(["agent-000", "agent-001"]));
    assert_eq!(r.body["model"], "fast");
    let r = get(&app, "/api/v1/agents/agent-000").await;
    assert_eq!(
        (&r.body["subagents"], &r.body["model"]),
        (&json!([]), &json!("")),
        "always present, empty when unset"
    );
    assert_eq!(
        fake.calls(),
        [
            "create boss subagents=agent-000,agent-001 model=fast mode=",
            "get agent-000"
        ]
    );
}

#[tokio::test]
async fn unknown_subagents_are_a_400_with_the_available_agents() {
    let fake = FakeRegistry::new(2, 10);
    let app = fake_app(&fake).await;
    let body = r#"{"agent_id": "boss", "subagents": ["agent-000", "nope"]}"#;
    let r = call(&app, Method::POST, "/api/v1/agents", &[JSON], Some(body)).await;
    assert_error(&r, StatusCode::BAD_REQUEST, "invalid_subagents");
    assert_eq!(
        r.body,
        json!({
            "error": "invalid_subagents",
            "message": "Unknown agent(s) in subagents",
            "invalid_subagents": ["nope"],
            "available_agents": ["agent-000", "agent-001"]
        })
    );
}

#[tokio::test]
async fn mode_goes_to_the_registry_and_comes_back() {
    let fake = FakeRegistry::new(1, 10);
    let app = fake_app(&fake).await;
    let body = json!({"agent_id": "reader", "name": "Reader", "description": "Reads",
        "system_prompt": "Read.", "tool_allowlist": ["file_read"], "mode": "readOnly"});
    let r = call(
        &app,
        Method::POST,
        "/api/v1/agents",
        &[JSON],
        Some(&body.to_string()),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
    assert_eq!(r.body["mode"], "readOnly");
    let r = get(&app, "/api/v1/agents/agent-000").await;
    assert_eq!(r.body["mode"], "", "always present, empty when unset");
    assert_eq!(
        fake.calls(),
        [
            "create reader subagents= model= mode=readOnly",
            "get agent-000"
        ]
    );
}

#[tokio::test]
async fn an_unknown_mode_is_a_400_naming_the_field() {
    let fake = FakeRegistry::new(0, 10);
    let app = fake_app(&fake).await;
    let body = r#"{"agent_id": "reader", "mode": "yolo"}"#;
    let r = call(&app, Method::POST, "/api/v1/agents", &[JSON], Some(body)).await;
    assert_error(&r, StatusCode::BAD_REQUEST, "invalid_argument");
    assert_eq!(
        r.body["details"],
        json!([{"field": "mode",
            "description": "must be one of readOnly, default, safeWrite, got \"yolo\""}])
    );
    let r = call(
        &app,
        Method::POST,
        "/api/v1/agents",
        &[JSON],
        Some(r#"{"agent_id": "reader", "mode": 3}"#),
    )
    .await;
    assert_error(&r, StatusCode::BAD_REQUEST, "invalid_argument");
    assert_eq!(fake.calls(), ["create reader subagents= model= mode=yolo"]);
}
