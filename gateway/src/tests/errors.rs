//! Error bodies and the routes around the agents: bad input, limits, missing or slow registry,
//! probes, the catalog and the OpenAPI document.

use axum::http::{Method, StatusCode, header};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::{
    Headers, JSON, app, assert_error, call, dead_url, fake::FakeRegistry, fake_app, get, serve,
};
use crate::{AppState, Config, router};

#[tokio::test]
async fn bad_bodies_are_json_400s_that_name_the_problem() {
    let fake = FakeRegistry::new(0, 10);
    let app = fake_app(&fake).await;
    let cases: [(Headers, &str, &str); 4] = [
        (&[JSON], r#"{"agent_id": "abc", "colour": "red"}"#, "colour"),
        (&[JSON], r#"{"agent_id": "abc""#, "malformed JSON"),
        (
            &[JSON],
            r#"{"tool_allowlist": "file_read"}"#,
            "tool_allowlist",
        ),
        (
            &[("content-type", "text/plain")],
            r#"{"agent_id": "abc"}"#,
            "Content-Type",
        ),
    ];
    for (headers, body, needle) in cases {
        let r = call(&app, Method::POST, "/api/v1/agents", headers, Some(body)).await;
        assert_error(&r, StatusCode::BAD_REQUEST, "invalid_argument");
        assert!(
            r.body["message"]
                .as_str()
                .is_some_and(|m| m.contains(needle)),
            "{needle}: {:?}",
            r.body
        );
    }
    let readonly =
        r#"{"agent_id":"abc","source":"custom","version":"v","created_at":"t","updated_at":"t"}"#;
    let r = call(
        &app,
        Method::POST,
        "/api/v1/agents:validate",
        &[JSON],
        Some(readonly),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(
        r.body,
        json!({"valid": true, "discovered_mcp_tools": ["get_current_time"], "warnings": []})
    );
    assert!(fake.calls().iter().all(|c| c.starts_with("validate")));
}

#[tokio::test]
async fn oversized_bodies_are_413_json() {
    let url = serve(FakeRegistry::new(0, 10)).await;
    let app = app(Config {
        max_body_bytes: 64,
        ..Config::with_registry(url)
    });
    let big = format!(
        r#"{{"agent_id":"abc","system_prompt":"{}"}}"#,
        "x".repeat(200)
    );
    let r = call(&app, Method::POST, "/api/v1/agents", &[JSON], Some(&big)).await;
    assert_error(&r, StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large");
}

/// A body that says it is `len` bytes long and never sends one (a client waiting for its
/// `100 Continue`).
struct Announced(u64);

impl http_body::Body for Announced {
    type Data = axum::body::Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        std::task::Poll::Pending
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.0)
    }
}

#[tokio::test]
async fn a_body_announced_too_large_or_encoded_is_refused_unread() {
    use tower::ServiceExt;
    let fake = FakeRegistry::new(0, 10);
    let app = fake_app(&fake).await;
    // Refused at once (the request timeout would answer 408 after it, had the body been
    // awaited).
    let request = axum::http::Request::post("/api/v1/agents")
        .header("content-type", "application/json")
        .body(axum::body::Body::new(Announced(5_000_000)))
        .expect("request");
    let answer = tokio::time::timeout(
        std::time::Duration::from_secs(2),
        app.clone().oneshot(request),
    )
    .await
    .expect("answered at once")
    .expect("infallible");
    assert_eq!(answer.status(), StatusCode::PAYLOAD_TOO_LARGE);
    // A content coding the gateway does not decode.
    for coding in ["gzip", "br, gzip"] {
        let r = call(
            &app,
            Method::POST,
            "/api/v1/agents",
            &[JSON, ("content-encoding", coding)],
            Some(r#"{"agent_id": "abc"}"#),
        )
        .await;
        assert_error(&r, StatusCode::UNSUPPORTED_MEDIA_TYPE, "invalid_argument");
        assert!(
            r.body["message"]
                .as_str()
                .is_some_and(|m| m.contains(coding))
        );
    }
    assert!(fake.calls().is_empty(), "{:?}", fake.calls());
    // `identity` is no coding: the body is read.
    let r = call(
        &app,
        Method::POST,
        "/api/v1/agents",
        &[JSON, ("content-encoding", "identity")],
        Some(r#"{"agent_id": "abc"}"#),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{:?}", r.body);
}

#[tokio::test]
async fn a_session_id_that_is_not_text_is_a_400_naming_it() {
    let app = app(Config::with_registry(dead_url().await));
    for (method, path) in [
        (Method::GET, "/api/v1/sessions/%ff"),
        (Method::DELETE, "/api/v1/sessions/%ff"),
        (Method::GET, "/api/v1/sessions/%ff/plan"),
        (Method::POST, "/api/v1/sessions/%ff/cancel"),
        (Method::POST, "/api/v1/sessions/%ff/answer"),
    ] {
        let r = call(
            &app,
            method.clone(),
            path,
            &[JSON],
            Some(r#"{"answer": "a"}"#),
        )
        .await;
        assert_error(&r, StatusCode::BAD_REQUEST, "invalid_argument");
        assert!(
            r.body["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("invalid session_id: ") && m.contains("UTF-8")),
            "{method} {path}: {:?}",
            r.body
        );
    }
}

#[tokio::test]
async fn unknown_routes_and_methods_are_json() {
    let app = app(Config::with_registry(dead_url().await));
    assert_error(
        &get(&app, "/nope").await,
        StatusCode::NOT_FOUND,
        "not_found",
    );
    assert_error(
        &get(&app, "/api/v1/agents/abc/extra").await,
        StatusCode::NOT_FOUND,
        "not_found",
    );
    let r = call(&app, Method::PATCH, "/api/v1/agents/abc", &[], None).await;
    assert_error(&r, StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed");
    assert!(r.headers.contains_key(header::ALLOW));
    let r = call(&app, Method::DELETE, "/api/v1/tools", &[], None).await;
    assert_error(&r, StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed");
}

#[tokio::test]
async fn a_missing_registry_is_503_and_not_ready_but_alive() {
    let app = app(Config::with_registry(dead_url().await));
    assert_error(
        &get(&app, "/api/v1/agents/abc").await,
        StatusCode::SERVICE_UNAVAILABLE,
        "unavailable",
    );
    assert_error(
        &get(&app, "/api/v1/tools").await,
        StatusCode::SERVICE_UNAVAILABLE,
        "unavailable",
    );
    assert_error(
        &get(&app, "/readyz").await,
        StatusCode::SERVICE_UNAVAILABLE,
        "unavailable",
    );
    let r = get(&app, "/healthz").await;
    assert_eq!(
        (r.status, r.body),
        (StatusCode::OK, json!({"status": "ok"}))
    );
}

#[tokio::test]
async fn ready_when_the_registry_serves_and_not_while_stopping() {
    let config = Config::with_registry(serve(FakeRegistry::new(0, 10)).await);
    let stop = CancellationToken::new();
    let app = router(
        AppState::new(&config, stop.clone()).expect("valid config"),
        &config,
    );
    let r = get(&app, "/readyz").await;
    assert_eq!(
        (r.status, r.body),
        (StatusCode::OK, json!({"status": "ready"}))
    );
    stop.cancel();
    assert_error(
        &get(&app, "/readyz").await,
        StatusCode::SERVICE_UNAVAILABLE,
        "unavailable",
    );
}

#[tokio::test]
async fn not_ready_while_the_registry_refuses_the_gateways_token() {
    // The registry's own serving path, with API keys.
    let keys = taskforce_runtime::auth::Keys::parse(
        "keys:\n- {name: gateway, token: right-token-0123456789, scopes: [admin]}\n",
        "the test",
    )
    .expect("keys");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let stop = CancellationToken::new();
    let server = tokio::spawn(taskforce_runtime::serve_grpc(
        tonic::transport::Server::builder(),
        listener,
        taskforce_proto::v1::agent_registry_server::AgentRegistryServer::new(FakeRegistry::new(
            0, 10,
        )),
        Some(keys),
        stop.clone(),
        async {},
        std::time::Duration::from_secs(1),
        taskforce_runtime::Fault::default(),
    ));
    for (token, ready) in [
        (Some("wrong-token-0123456789"), false),
        (None, false),
        (Some("right-token-0123456789"), true),
    ] {
        let mut config = Config::with_registry(format!("http://{addr}"));
        config.auth.service_token = token.map(str::to_owned);
        let r = get(&app(config), "/readyz").await;
        if ready {
            assert_eq!(r.status, StatusCode::OK, "{token:?}: {}", r.body);
        } else {
            assert_error(&r, StatusCode::SERVICE_UNAVAILABLE, "unavailable");
            let message = r.body["message"].as_str().unwrap_or_default();
            assert!(
                message.contains("the registry refuses the gateway's credentials")
                    && message.contains("TASKFORCE_SERVICE_TOKEN"),
                "{token:?}: {message}"
            );
        }
    }
    stop.cancel();
    let _ = server.await;
}

#[tokio::test]
async fn registry_internals_stay_out_of_5xx_bodies() {
    let app = fake_app(&FakeRegistry::new(0, 10)).await;
    let r = get(&app, "/api/v1/agents/broken-agent").await;
    assert_error(&r, StatusCode::INTERNAL_SERVER_ERROR, "internal");
    assert!(!r.body.to_string().contains("sled"));
}

#[tokio::test]
async fn slow_registry_calls_time_out_with_504_json() {
    let url = serve(FakeRegistry::new(0, 10)).await;
    let app = app(Config {
        request_timeout_secs: 1,
        ..Config::with_registry(url)
    });
    assert_error(
        &get(&app, "/api/v1/agents/slow-agent").await,
        StatusCode::GATEWAY_TIMEOUT,
        "timeout",
    );
}

#[tokio::test]
async fn tools_diagnostics_and_openapi_are_served() {
    let app = fake_app(&FakeRegistry::new(0, 10)).await;
    let r = get(&app, "/api/v1/tools").await;
    assert_eq!(r.body["tools"][0]["name"], "file_read");
    assert!(r.body["tools"][0].get("mcp_server_id").is_none());
    let r = get(&app, "/api/v1/diagnostics").await;
    assert_eq!(
        r.body,
        json!({"diagnostics": [{"path": "custom/bad.yaml", "error": "invalid YAML"}]})
    );
    let r = get(&app, "/openapi.json").await;
    assert_eq!(r.headers[header::CONTENT_TYPE], "application/json");
    assert!(r.body["paths"]["/api/v1/agents:validate"]["post"].is_object());
}

#[test]
fn validating_an_agent_needs_write_because_it_starts_the_agents_mcp_servers() {
    use taskforce_runtime::auth::{Access, Scope};
    assert_eq!(
        crate::access(&http::Method::POST, "/api/v1/agents:validate"),
        Access::Needs(Scope::Write)
    );
    assert_eq!(
        crate::access(&http::Method::GET, "/api/v1/agents"),
        Access::Needs(Scope::Read)
    );
}

#[test]
fn the_scope_a_route_needs_is_decided_by_whole_segments_so_an_id_is_never_a_route() {
    use http::Method;
    use taskforce_runtime::auth::{Access, Scope};
    let needs = |method: Method, path: &str| crate::access(&method, path);
    // An agent whose id is `metadata` is an agent: changing it is a write.
    for method in [Method::PUT, Method::DELETE, Method::POST, Method::PATCH] {
        for path in [
            "/api/v1/agents/metadata",
            "/api/v1/agents/x",
            "/api/v1/agents",
            "/api/v1/agents/x/metadata",
            "/api/v1/agents/x/",
        ] {
            assert_eq!(
                needs(method.clone(), path),
                Access::Needs(Scope::Write),
                "{method} {path}"
            );
        }
    }
    assert_eq!(
        needs(Method::GET, "/api/v1/agents/x/metadata"),
        Access::Needs(Scope::Read)
    );
    // A session whose id is `answer` or `cancel` is read with `read`; answering needs `execute`.
    for path in ["/api/v1/sessions/answer", "/api/v1/sessions/cancel"] {
        assert_eq!(
            needs(Method::GET, path),
            Access::Needs(Scope::Read),
            "{path}"
        );
    }
    for path in [
        "/api/v1/sessions/s1/answer",
        "/api/v1/sessions/answer/cancel",
        "/api/v1/execute",
        "/ai/agent/stream",
    ] {
        assert_eq!(
            needs(Method::POST, path),
            Access::Needs(Scope::Execute),
            "{path}"
        );
    }
    assert_eq!(needs(Method::GET, "/healthz"), Access::Public);
    assert_eq!(needs(Method::OPTIONS, "/mcp"), Access::Public);
    assert_eq!(needs(Method::POST, "/mcp"), Access::Needs(Scope::Read));
}

#[test]
fn a_host_is_allowed_by_name_and_by_port_when_the_entry_names_one() {
    let allowed: Vec<String> = ["localhost", "::1", "127.0.0.1:8080", "[::2]:9000"]
        .into_iter()
        .map(str::to_owned)
        .collect();
    for ok in [
        "localhost",
        "LocalHost:1234",
        "[::1]:8080",
        "::1",
        "127.0.0.1:8080",
        "[::2]:9000",
    ] {
        assert!(crate::host_allowed(ok, &allowed), "{ok}");
    }
    for refused in [
        "rebound.example",
        "127.0.0.1",
        "127.0.0.1:8081",
        "[::2]:9001",
        "evil:localhost",
    ] {
        assert!(!crate::host_allowed(refused, &allowed), "{refused}");
    }
}
