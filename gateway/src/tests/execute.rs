//! The execution routes against an in-process fake executor.

use axum::http::{Method, StatusCode, header};
use taskforce_proto::error::{ApiError, ErrorKind};
use tonic::Status;

use super::{JSON, app, assert_error, call, dead_url, executor_app, sse_events};
use crate::Config;

#[tokio::test]
async fn execute_runs_to_the_end() {
    let app = executor_app().await;
    let body = r#"{"mission": "Do it", "agent_id": "invoice-extractor"}"#;
    let r = call(&app, Method::POST, "/api/v1/execute", &[JSON], Some(body)).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(
        r.body,
        serde_json::json!({"session_id": "s-1", "status": "completed", "final_answer": "Hello",
            "events": 5, "usage": {"input_tokens": 3, "output_tokens": 2, "steps": 1, "tool_calls": 0}})
    );
    let body = r#"{"mission": "Do it", "agent_id": "ask-agent"}"#;
    let r = call(&app, Method::POST, "/api/v1/execute", &[JSON], Some(body)).await;
    assert_eq!(r.body["status"], "paused", "{:?}", r.body);
    assert_eq!(r.body["question"]["call_id"], "c-1", "{:?}", r.body);
    assert!(r.body["final_answer"].is_null());
}

#[tokio::test]
async fn execute_stream_is_sse_ending_with_done() {
    let app = executor_app().await;
    let body = r#"{"mission": "Do it", "profile": "dev"}"#;
    let r = call(
        &app,
        Method::POST,
        "/api/v1/execute/stream",
        &[JSON],
        Some(body),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(
        r.headers[header::CONTENT_TYPE]
            .to_str()
            .is_ok_and(|v| v.starts_with("text/event-stream"))
    );
    let events = sse_events(&r.raw);
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        ["run_started", "token", "token", "final_answer", "done"]
    );
    assert_eq!(events[1].1["text"], "He");
    assert_eq!(events[1].1["seq"], 1);
    assert_eq!(events[1].1["session_id"], "s-1");
    assert_eq!(events[4].1["status"], "completed");
    assert_eq!(events[4].1["usage"]["steps"], 1);
}

#[tokio::test]
async fn answer_streams_and_cancel_reports() {
    let app = executor_app().await;
    let body = r#"{"answer": "Invoice 42", "call_id": "c-1"}"#;
    let r = call(
        &app,
        Method::POST,
        "/api/v1/sessions/s-1/answer",
        &[JSON],
        Some(body),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    let events = sse_events(&r.raw);
    assert_eq!(events[0].1["text"], "Invoice 42");
    assert_eq!(events.len(), 2);
    let r = call(
        &app,
        Method::POST,
        "/api/v1/sessions/missing/answer",
        &[JSON],
        Some(body),
    )
    .await;
    assert_error(&r, StatusCode::NOT_FOUND, "not_found");
    let r = call(
        &app,
        Method::POST,
        "/api/v1/sessions/live/cancel",
        &[],
        None,
    )
    .await;
    assert_eq!(r.body, serde_json::json!({"cancelled": true}));
    let r = call(
        &app,
        Method::POST,
        "/api/v1/sessions/idle/cancel",
        &[],
        None,
    )
    .await;
    assert_eq!(r.body, serde_json::json!({"cancelled": false}));
}

#[tokio::test]
async fn errors_before_the_run_are_json() {
    let app = executor_app().await;
    for path in ["/api/v1/execute", "/api/v1/execute/stream"] {
        let body = r#"{"mission": "Do it", "agent_id": "missing-agent"}"#;
        let r = call(&app, Method::POST, path, &[JSON], Some(body)).await;
        assert_error(&r, StatusCode::NOT_FOUND, "not_found");
        let r = call(
            &app,
            Method::POST,
            path,
            &[JSON],
            Some(r#"{"mission": "  "}"#),
        )
        .await;
        assert_error(&r, StatusCode::BAD_REQUEST, "invalid_argument");
        let r = call(
            &app,
            Method::POST,
            path,
            &[JSON],
            Some(r#"{"mission": "x", "extra": 1}"#),
        )
        .await;
        assert_error(&r, StatusCode::BAD_REQUEST, "invalid_argument");
    }
}

#[tokio::test]
async fn a_dead_executor_is_503() {
    let app = app(Config {
        executor_url: dead_url().await,
        ..Config::default()
    });
    let r = call(
        &app,
        Method::POST,
        "/api/v1/execute",
        &[JSON],
        Some(r#"{"mission": "x"}"#),
    )
    .await;
    assert_error(&r, StatusCode::SERVICE_UNAVAILABLE, "unavailable");
    assert!(
        r.body["message"]
            .as_str()
            .is_some_and(|m| m.contains("executor"))
    );
}

#[test]
fn a_connection_giving_up_is_unavailable_not_payload_too_large() {
    use crate::execute::executor_error;
    // What tonic reports for an HTTP/2 GOAWAY with ENHANCE_YOUR_CALM: no Taskforce details.
    let goaway = executor_error(Status::resource_exhausted("h2 protocol error"));
    assert_eq!(goaway.0.kind, ErrorKind::Unavailable);
    // A Taskforce error with details keeps its kind.
    let real = executor_error(ApiError::new(ErrorKind::PayloadTooLarge, "big").to_status());
    assert_eq!(real.0.kind, ErrorKind::PayloadTooLarge);
}

#[test]
fn a_broken_run_names_the_executor_its_session_id_names() {
    use crate::execute::run_error;
    let lost = || Status::internal("h2 protocol error: connection reset");
    let minted = taskforce_proto::ids::mint_session_id(Some("e2"));
    let named = run_error(lost(), &minted);
    assert_eq!(named.0.kind, ErrorKind::Unavailable);
    assert!(
        named.0.message.contains("executor `e2`"),
        "{}",
        named.0.message
    );
    // A client's own id (or none yet) names no executor.
    let thread = format!("e2_{}", uuid::Uuid::new_v4());
    for id in ["", "my_thread", &thread] {
        let plain = run_error(lost(), id);
        assert!(!plain.0.message.contains('`'), "{}", plain.0.message);
    }
}
