//! Multi-agent orchestration through the gateway: the new run events, the consolidated
//! question and its `answers`, and the session plan route.

use axum::http::{Method, StatusCode};
use serde_json::json;

use super::{JSON, app, assert_error, call, dead_url, executor_app, get, sse_events};
use crate::Config;

const ORCHESTRATE: &str = r#"{"mission": "Total of invoice 42?", "agent_id": "orchestrator"}"#;

fn plan_json() -> serde_json::Value {
    json!({
        "version": 2,
        "tasks": [
            {"id": "t1", "title": "Find the totals", "status": "COMPLETED", "depends_on": [],
             "owner_agent": "researcher", "parent_id": null, "notes": "", "tool": "",
             "params": null, "result": {"total": 99}},
            {"id": "t1.1", "title": "Check the currency", "status": "PENDING", "depends_on": ["t1"],
             "owner_agent": "orchestrator", "parent_id": "t1", "notes": "EUR?", "tool": "web_search",
             "params": {"query": "EUR"}, "result": null}
        ],
        "markdown": "- [x] t1 Find the totals\n  - [ ] t1.1 Check the currency\n"
    })
}

#[tokio::test]
async fn an_orchestrated_stream_carries_every_new_event_and_ends_with_the_top_done() {
    let app = executor_app().await;
    let r = call(
        &app,
        Method::POST,
        "/api/v1/execute/stream",
        &[JSON],
        Some(ORCHESTRATE),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    let events = sse_events(&r.raw);
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "run_started",
            "patch_applied",
            "plan_updated",
            "delegation_start",
            "token",
            "patch_rejected",
            "final_answer",
            "done",
            "delegation_end",
            "question",
            "done"
        ],
        "the sub-agent's done does not end the stream"
    );
    let data = |i: usize| events[i].1.clone();
    assert_eq!(
        data(1),
        json!({"type": "patch_applied", "session_id": "s-1", "seq": 1, "agent_path": [],
               "frame_id": "", "time_unix_ms": 1, "author": "orchestrator", "version": 1,
               "ops": [{"op": "add", "task": {"id": "t1", "title": "Find the totals"}}]})
    );
    assert_eq!(data(2)["plan"], plan_json());
    assert_eq!(
        data(3),
        json!({"type": "delegation_start", "session_id": "s-1", "seq": 3,
               "agent_path": ["researcher"], "frame_id": "f-1", "time_unix_ms": 1,
               "call_id": "c-1", "agent_id": "researcher", "task": "Find the totals",
               "task_id": "t1", "resumed": false})
    );
    assert_eq!(data(4)["frame_id"], "f-1");
    assert_eq!(data(4)["agent_path"], json!(["researcher"]));
    assert_eq!(
        data(5),
        json!({"type": "patch_rejected", "session_id": "s-1", "seq": 5,
               "agent_path": ["researcher"], "frame_id": "f-1", "time_unix_ms": 1,
               "author": "researcher", "reason": "forbidden",
               "message": "task t9 is owned by orchestrator", "current_version": 1,
               "rejected_ops": [{"op": "update", "task_id": "t9"}]})
    );
    assert_eq!(
        data(8),
        json!({"type": "delegation_end", "session_id": "s-1", "seq": 8,
               "agent_path": ["researcher"], "frame_id": "f-1", "time_unix_ms": 1,
               "call_id": "c-1", "agent_id": "researcher", "task_id": "t1",
               "status": "need_user_input",
               "result": {"success": false, "need_user_input": ["currency"]}})
    );
    assert_eq!(
        data(9)["items"],
        json!([{"key": "researcher.currency", "text": "Which currency?", "required": true,
                "default": "EUR", "agent_path": ["researcher"]}])
    );
    assert_eq!(data(10)["status"], "paused");
}

#[tokio::test]
async fn execute_answers_with_the_top_agents_outcome_and_the_question_items() {
    let app = executor_app().await;
    let r = call(
        &app,
        Method::POST,
        "/api/v1/execute",
        &[JSON],
        Some(ORCHESTRATE),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(
        r.body,
        json!({
            "session_id": "s-1",
            "status": "paused",
            "question": {
                "call_id": "c-2",
                "question": "researcher.currency: Which currency?",
                "items": [{"key": "researcher.currency", "text": "Which currency?",
                           "required": true, "default": "EUR", "agent_path": ["researcher"]}]
            },
            "events": 11,
            "usage": {"input_tokens": 3, "output_tokens": 2, "steps": 1, "tool_calls": 0}
        }),
        "the sub-agent's final answer and done are not the run's"
    );
    let plain = r#"{"mission": "Do it", "agent_id": "ask-agent"}"#;
    let r = call(&app, Method::POST, "/api/v1/execute", &[JSON], Some(plain)).await;
    assert_eq!(r.body["question"]["items"], json!([]), "{:?}", r.body);
}

#[tokio::test]
async fn answers_by_key_pass_strings_as_they_are_and_other_values_as_json() {
    let app = executor_app().await;
    let answer = |body: &'static str| {
        let app = app.clone();
        async move {
            call(
                &app,
                Method::POST,
                "/api/v1/sessions/s-1/answer",
                &[JSON],
                Some(body),
            )
            .await
        }
    };
    let r = answer(
        r#"{"answers": {"currency": "EUR", "amount": 99, "ci": {"provider": "github"}, "ok": true}, "call_id": "c-2"}"#,
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let events = sse_events(&r.raw);
    let sent: serde_json::Value =
        serde_json::from_str(events[0].1["text"].as_str().unwrap_or_default()).expect("JSON");
    assert_eq!(
        sent,
        json!({"amount": "99", "ci": "{\"provider\":\"github\"}", "currency": "EUR", "ok": "true"})
    );
    let r = answer(r#"{"answer": "EUR"}"#).await;
    assert_eq!(sse_events(&r.raw)[0].1["text"], "EUR");
    for neither in [
        r#"{}"#,
        r#"{"answer": ""}"#,
        r#"{"answer": "  ", "answers": {}}"#,
        r#"{"answers": null, "call_id": "c-2"}"#,
    ] {
        let r = answer(neither).await;
        assert_error(&r, StatusCode::BAD_REQUEST, "invalid_argument");
        let fields: Vec<&str> = r.body["details"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|d| d["field"].as_str())
            .collect();
        assert_eq!(fields, ["answer", "answers"], "{neither}: {:?}", r.body);
    }
    let r = answer(r#"{"answers": ["EUR"]}"#).await;
    assert_error(&r, StatusCode::BAD_REQUEST, "invalid_argument");
    // A key given twice is refused, not the last one kept.
    let r = answer(r#"{"answers": {"currency": "EUR", "currency": "USD"}}"#).await;
    assert_error(&r, StatusCode::BAD_REQUEST, "invalid_argument");
    assert!(
        r.body["message"]
            .as_str()
            .is_some_and(|m| m.contains("duplicate key `currency`")),
        "{:?}",
        r.body
    );
}

#[tokio::test]
async fn the_plan_route_answers_the_plan_or_the_executors_error() {
    let running = executor_app().await;
    let r = get(&running, "/api/v1/sessions/s-1/plan").await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    let mut want = plan_json();
    want["session_id"] = json!("s-1");
    assert_eq!(r.body, want);
    assert_error(
        &get(&running, "/api/v1/sessions/missing/plan").await,
        StatusCode::NOT_FOUND,
        "not_found",
    );
    let r = get(&running, "/api/v1/sessions/bad%20id/plan").await;
    assert_error(&r, StatusCode::BAD_REQUEST, "invalid_argument");
    assert_eq!(r.body["details"][0]["field"], "session_id");
    let r = call(
        &running,
        Method::POST,
        "/api/v1/sessions/s-1/plan",
        &[],
        None,
    )
    .await;
    assert_error(&r, StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed");

    let down = app(Config {
        executor_url: dead_url().await,
        ..Config::default()
    });
    let r = get(&down, "/api/v1/sessions/s-1/plan").await;
    assert_error(&r, StatusCode::SERVICE_UNAVAILABLE, "unavailable");
    assert!(
        r.body["message"]
            .as_str()
            .is_some_and(|m| m.contains("executor"))
    );
}
