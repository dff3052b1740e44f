//! Seed 004's chat endpoints over the fake executor: the exact bytes, the thread header, and
//! the fallback to the plain LLM when the agent fails before answering.

use axum::http::{Method, StatusCode};

use super::{JSON, app, call, dead_url, serve_executor};
use crate::Config;

const END: &str = "event: end\ndata: [DONE]\n\n";

async fn chat_app(agent: &str) -> axum::Router {
    app(Config {
        executor_url: serve_executor().await,
        registry_url: dead_url().await,
        chat_agent: agent.to_owned(),
        ..Config::default()
    })
}

#[tokio::test]
async fn tokens_are_plain_data_lines_and_the_thread_comes_back_in_a_header() {
    let app = chat_app("chat").await;
    let r = call(
        &app,
        Method::POST,
        "/ai/agent/stream",
        &[JSON],
        Some(r#"{"prompt": "hi", "threadId": "t-1", "extra": true}"#),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(
        r.headers.get("x-thread-id").and_then(|v| v.to_str().ok()),
        Some("t-1")
    );
    assert_eq!(
        String::from_utf8_lossy(&r.raw),
        format!("data: He\n\ndata: llo\n\n{END}")
    );
}

#[tokio::test]
async fn an_agent_that_fails_before_answering_is_replaced_by_the_plain_llm() {
    let app = chat_app("failing-chat").await;
    let r = call(
        &app,
        Method::POST,
        "/ai/agent/stream",
        &[JSON],
        Some(r#"{"prompt": "hi"}"#),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(
        String::from_utf8_lossy(&r.raw),
        format!("data: He\n\ndata: llo\n\n{END}"),
        "the plain LLM's answer, with nothing of the failed attempt"
    );
    let thread = r.headers.get("x-thread-id").and_then(|v| v.to_str().ok());
    assert!(thread.is_some_and(|t| !t.is_empty()));
}

#[tokio::test]
async fn a_bad_thread_id_is_a_text_then_the_end() {
    let app = chat_app("chat").await;
    let r = call(
        &app,
        Method::POST,
        "/ai/stream",
        &[JSON],
        Some(r#"{"prompt": "hi", "threadId": "no spaces"}"#),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    let body = String::from_utf8_lossy(&r.raw);
    assert!(
        body.starts_with("data: ⚠️ `threadId`") && body.ends_with(END),
        "{body}"
    );
}

#[tokio::test]
async fn a_prompt_over_256_kib_is_named_a_prompt() {
    let app = chat_app("chat").await;
    let body = serde_json::json!({"prompt": "x".repeat(taskforce_proto::MAX_MISSION_BYTES + 1)})
        .to_string();
    let r = call(&app, Method::POST, "/ai/agent/stream", &[JSON], Some(&body)).await;
    assert_eq!(r.status, StatusCode::OK);
    let body = String::from_utf8_lossy(&r.raw);
    assert!(
        body.starts_with("data: ⚠️ the prompt is longer than 256 KiB") && body.ends_with(END),
        "{body}"
    );
}

#[tokio::test]
async fn prompts_over_the_per_thread_limit_get_a_text_and_the_end() {
    let app = app(Config {
        executor_url: serve_executor().await,
        registry_url: dead_url().await,
        chat_agent: "chat".to_owned(),
        agent_rate_limit_per_minute: 1,
        ..Config::default()
    });
    let body = Some(r#"{"prompt": "hi", "threadId": "busy"}"#);
    let first = call(&app, Method::POST, "/ai/agent/stream", &[JSON], body).await;
    assert_eq!(
        String::from_utf8_lossy(&first.raw),
        format!("data: He\n\ndata: llo\n\n{END}")
    );
    let second = call(&app, Method::POST, "/ai/agent/stream", &[JSON], body).await;
    let text = String::from_utf8_lossy(&second.raw);
    assert!(
        text.starts_with("data: ⚠️ too many prompts") && text.ends_with(END),
        "{text}"
    );
    let other = call(
        &app,
        Method::POST,
        "/ai/agent/stream",
        &[JSON],
        Some(r#"{"prompt": "hi", "threadId": "calm"}"#),
    )
    .await;
    assert!(String::from_utf8_lossy(&other.raw).starts_with("data: He"));
}

#[tokio::test]
async fn ai_model_name_picks_the_model_of_chat_runs() {
    let app = app(Config {
        executor_url: serve_executor().await,
        registry_url: dead_url().await,
        chat_agent: "model-echo".to_owned(),
        ai_model_name: Some("fast".to_owned()),
        ..Config::default()
    });
    let r = call(
        &app,
        Method::POST,
        "/ai/stream",
        &[JSON],
        Some(r#"{"prompt": "hi"}"#),
    )
    .await;
    assert_eq!(
        String::from_utf8_lossy(&r.raw),
        format!("data: fast\n\n{END}")
    );
}
