//! Faults of an OpenAI-compatible server: rate limits, 5xx, hangs, stalls, refused connections,
//! error chunks. The retry and timeout machinery is shared with the Anthropic client.

use std::time::{Duration, Instant};

use executor_svc::llm::{LlmError, LlmEvent, LlmProvider, OpenAiProvider};
use serde_json::json;

use crate::{
    openai::{chunk, provider, request, text_reply},
    support::{FakeServer, KEY, Reply, data, drain, env, provider_config},
};

#[tokio::test]
async fn rate_limit_is_retried_after_the_servers_retry_after() {
    let limited = Reply::status(429, json!({ "error": { "message": "slow down" } }));
    let server = FakeServer::start(vec![
        limited.header("retry-after", "1"),
        text_reply(&["fine"]),
    ])
    .await;
    let started = Instant::now();
    let response = provider(&server, "")
        .complete(&request())
        .await
        .expect("response after retry");
    assert_eq!(response.text, "fine");
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "waited {:?}",
        started.elapsed()
    );
    assert_eq!(server.seen().len(), 2);
    // Read uncompressed, as it comes.
    assert_eq!(server.seen()[0].headers["accept-encoding"], "identity");
}

#[tokio::test]
async fn an_exhausted_quota_is_not_retried() {
    let quota = Reply::status(
        429,
        json!({ "error": { "message": "You exceeded your current quota", "type": "insufficient_quota", "code": "insufficient_quota" } }),
    );
    let server = FakeServer::start(vec![quota, text_reply(&["never"])]).await;
    let err = provider(&server, "")
        .complete(&request())
        .await
        .expect_err("a quota error");
    assert!(err.to_string().contains("current quota"), "{err}");
    assert_eq!(server.seen().len(), 1, "retried: {err}");
}

#[tokio::test]
async fn retry_after_ms_is_preferred_and_a_too_long_wait_fails_at_once() {
    let limited = Reply::status(429, json!({ "error": { "message": "slow down" } }));
    let server = FakeServer::start(vec![
        limited.clone().header("retry-after-ms", "150"),
        text_reply(&["ok"]),
    ])
    .await;
    let started = Instant::now();
    provider(&server, "")
        .complete(&request())
        .await
        .expect("response after retry");
    assert!(started.elapsed() >= Duration::from_millis(150));

    let server = FakeServer::start(vec![limited.header("retry-after", "3600")]).await;
    let started = Instant::now();
    let err = provider(&server, "")
        .complete(&request())
        .await
        .expect_err("gives up");
    assert!(
        matches!(
            err,
            LlmError::Status {
                status: 429,
                attempts: 1,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .contains("not retried: the server asked to wait 3600s"),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn server_errors_are_retried_a_bounded_number_of_times_and_name_the_status() {
    let server = FakeServer::start(vec![Reply::status(
        500,
        json!({ "error": { "message": "model exploded" } }),
    )])
    .await;
    let err = provider(&server, "")
        .complete(&request())
        .await
        .expect_err("fails");
    assert_eq!(server.seen().len(), 3);
    match &err {
        LlmError::Status {
            provider,
            status,
            message,
            attempts,
        } => {
            assert_eq!(
                (provider.as_str(), *status, message.as_str(), *attempts),
                ("test-openai", 500, "model exploded", 3)
            );
        }
        other => panic!("expected a status error, got {other:?}"),
    }
    assert_eq!(
        err.to_string(),
        "test-openai: HTTP 500 after 3 attempt(s): model exploded"
    );
}

#[tokio::test]
async fn client_errors_are_not_retried_and_never_show_the_key() {
    let message = format!("Incorrect API key provided: {KEY}");
    let server = FakeServer::start(vec![Reply::status(
        401,
        json!({ "error": { "message": message } }),
    )])
    .await;
    let err = provider(&server, "")
        .complete(&request())
        .await
        .expect_err("fails");
    assert_eq!(server.seen().len(), 1);
    let text = format!("{err} {err:?}");
    assert!(text.contains("HTTP 401") && text.contains("***"), "{text}");
    assert!(!text.contains(KEY), "{text}");
}

#[tokio::test]
async fn a_server_that_never_answers_times_out() {
    let server = FakeServer::start(vec![Reply::hang()]).await;
    let extra = "request_timeout_secs: 0.3\nmax_attempts: 2";
    let started = Instant::now();
    let err = provider(&server, extra)
        .complete(&request())
        .await
        .expect_err("times out");
    assert!(
        matches!(
            err,
            LlmError::Timeout {
                waiting_for: "the response",
                attempts: 2,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(server.seen().len(), 2);
}

#[tokio::test]
async fn a_stream_that_stalls_times_out_without_retry() {
    let mut reply = text_reply(&["one", " two"]);
    reply
        .chunks
        .insert(2, (Duration::from_secs(30), String::new()));
    let server = FakeServer::start(vec![reply]).await;
    let events = drain(provider(&server, "idle_timeout_secs: 0.3").stream(&request())).await;
    assert_eq!(events[0], Ok(LlmEvent::TextDelta("one".into())));
    assert!(
        matches!(
            events.last(),
            Some(Err(LlmError::Timeout {
                waiting_for: "the next chunk",
                ..
            }))
        ),
        "{events:?}"
    );
    assert_eq!(server.seen().len(), 1);
}

#[tokio::test]
async fn refused_connections_are_retried_then_reported() {
    let addr = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().expect("addr")
    };
    let config = provider_config("openai", &format!("http://{addr}/v1"), "");
    let provider = OpenAiProvider::new("test-openai", &config, &env()).expect("provider");
    let err = provider.complete(&request()).await.expect_err("fails");
    assert!(
        matches!(err, LlmError::Connect { attempts: 3, .. }),
        "{err:?}"
    );
    assert!(
        !err.to_string().contains(&addr.port().to_string()),
        "no URL in {err}"
    );
}

#[tokio::test]
async fn error_chunks_and_non_stream_bodies_are_clear_errors() {
    let error = data(
        &json!({ "error": { "message": "context too long", "type": "invalid_request_error" } }),
    );
    let server = FakeServer::start(vec![Reply::sse(vec![error])]).await;
    let err = provider(&server, "")
        .complete(&request())
        .await
        .expect_err("fails");
    assert_eq!(
        err.to_string(),
        "test-openai: invalid_request_error: context too long"
    );

    let server = FakeServer::start(vec![Reply::status(
        200,
        json!({ "error": "no streaming here" }),
    )])
    .await;
    let err = provider(&server, "")
        .complete(&request())
        .await
        .expect_err("fails");
    assert!(
        matches!(&err, LlmError::Stream { message, .. } if message.contains("no streaming here")),
        "{err:?}"
    );

    let server = FakeServer::start(vec![Reply::sse(vec![chunk(
        json!({ "content": "cut" }),
        None,
    )])])
    .await;
    let err = provider(&server, "")
        .complete(&request())
        .await
        .expect_err("fails");
    assert!(
        err.to_string()
            .contains("ended before the response was complete"),
        "{err}"
    );
}
