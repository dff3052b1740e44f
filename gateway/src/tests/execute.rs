//! The execution routes against an in-process fake executor.

use std::pin::Pin;

use axum::http::{Method, StatusCode, header};
use futures::{Stream, stream};
use taskforce_proto::{
    error::{ApiError, ErrorKind},
    v1::{
        self,
        executor_server::{Executor, ExecutorServer},
        run_event::Event as Ev,
    },
};
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::{Request, Response, Status};

use super::{JSON, app, assert_error, call, dead_url};
use crate::Config;

type EventStream = Pin<Box<dyn Stream<Item = Result<v1::RunEvent, Status>> + Send>>;

/// Runs answer with `run_started`, two tokens, the final answer and `done`; the agent
/// `missing-agent` and the session `missing` are unknown; `ask-agent` pauses on a question.
#[derive(Clone, Default)]
struct FakeExecutor;

fn ev(seq: u64, event: Ev) -> Result<v1::RunEvent, Status> {
    Ok(v1::RunEvent {
        session_id: "s-1".into(),
        seq,
        agent_path: Vec::new(),
        time_unix_ms: 1,
        event: Some(event),
    })
}

fn done(seq: u64, status: v1::RunStatus) -> Result<v1::RunEvent, Status> {
    ev(
        seq,
        Ev::Done(v1::Done {
            status: status as i32,
            usage: Some(v1::Usage {
                input_tokens: 3,
                output_tokens: 2,
                steps: 1,
                tool_calls: 0,
            }),
        }),
    )
}

#[tonic::async_trait]
impl Executor for FakeExecutor {
    type ExecuteStream = EventStream;
    type AnswerStream = EventStream;

    async fn execute(
        &self,
        req: Request<v1::ExecuteRequest>,
    ) -> Result<Response<EventStream>, Status> {
        let req = req.into_inner();
        let agent = req.agent_id.unwrap_or_default();
        if agent == "missing-agent" {
            return Err(
                ApiError::new(ErrorKind::NotFound, "agent `missing-agent` not found").to_status(),
            );
        }
        let mut events = vec![
            ev(
                0,
                Ev::RunStarted(v1::RunStarted {
                    agent_id: agent.clone(),
                    model: "scripted".into(),
                    provider: "scripted".into(),
                }),
            ),
            ev(1, Ev::Token(v1::Token { text: "He".into() })),
            ev(2, Ev::Token(v1::Token { text: "llo".into() })),
        ];
        if agent == "ask-agent" {
            events.push(ev(
                3,
                Ev::Question(v1::Question {
                    call_id: "c-1".into(),
                    question: "Which invoice?".into(),
                }),
            ));
            events.push(done(4, v1::RunStatus::Paused));
        } else {
            events.push(ev(
                3,
                Ev::FinalAnswer(v1::FinalAnswer {
                    text: "Hello".into(),
                }),
            ));
            events.push(done(4, v1::RunStatus::Completed));
        }
        Ok(Response::new(Box::pin(stream::iter(events))))
    }

    async fn answer(
        &self,
        req: Request<v1::AnswerRequest>,
    ) -> Result<Response<EventStream>, Status> {
        let req = req.into_inner();
        if req.session_id == "missing" {
            return Err(
                ApiError::new(ErrorKind::NotFound, "session `missing` does not exist").to_status(),
            );
        }
        let events = vec![
            ev(5, Ev::FinalAnswer(v1::FinalAnswer { text: req.answer })),
            done(6, v1::RunStatus::Completed),
        ];
        Ok(Response::new(Box::pin(stream::iter(events))))
    }

    async fn cancel(
        &self,
        req: Request<v1::CancelRequest>,
    ) -> Result<Response<v1::CancelResponse>, Status> {
        Ok(Response::new(v1::CancelResponse {
            cancelled: req.into_inner().session_id == "live",
        }))
    }

    async fn get_session(
        &self,
        _req: Request<v1::GetSessionRequest>,
    ) -> Result<Response<v1::Session>, Status> {
        Err(Status::unimplemented("not in the fake"))
    }
}

async fn serve_executor() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("local addr");
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(ExecutorServer::new(FakeExecutor))
            .serve_with_incoming(TcpListenerStream::new(listener)),
    );
    format!("http://{addr}")
}

async fn executor_app() -> axum::Router {
    app(Config {
        executor_url: serve_executor().await,
        registry_url: dead_url().await,
        ..Config::default()
    })
}

/// `(event, data)` pairs of an SSE body.
fn sse_events(raw: &[u8]) -> Vec<(String, serde_json::Value)> {
    let text = String::from_utf8_lossy(raw);
    text.split("\n\n")
        .filter_map(|block| {
            let mut name = None;
            let mut data = None;
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("event: ") {
                    name = Some(v.to_owned());
                } else if let Some(v) = line.strip_prefix("data: ") {
                    data = serde_json::from_str(v).ok();
                }
            }
            Some((name?, data?))
        })
        .collect()
}

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
