//! The router against an in-process fake registry (or none): routes, shapes, headers and error
//! bodies as a REST client sees them.

mod agents;
mod chat;
mod errors;
mod execute;
mod fake;
mod mcp;
mod orchestration;

use axum::{
    Router,
    body::{Body, to_bytes},
    http::{HeaderMap, Method, Request, StatusCode, header},
};
use fake::{FakeExecutor, FakeRegistry};
use serde_json::Value;
use taskforce_proto::v1::{
    agent_registry_server::AgentRegistryServer, executor_server::ExecutorServer,
};
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use crate::{AppState, Config, router};

/// A listener on a free port that takes connections and answers nothing (a stopped or hung
/// process): its URL, and the task holding the connections.
pub(crate) async fn silent_listener() -> (String, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("listener");
    let url = format!("http://{}", listener.local_addr().expect("address"));
    let task = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((conn, _)) = listener.accept().await {
            held.push(conn);
        }
    });
    (url, task)
}

/// Serves `fake` (with a SERVING health service) on a free port; returns its URL.
async fn serve(fake: FakeRegistry) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("local addr");
    let (health, health_service) = tonic_health::server::health_reporter();
    health
        .set_serving::<AgentRegistryServer<FakeRegistry>>()
        .await;
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(health_service)
            .add_service(AgentRegistryServer::new(fake))
            .serve_with_incoming(TcpListenerStream::new(listener)),
    );
    format!("http://{addr}")
}

/// Serves the fake executor on a free port; returns its URL.
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

/// The router over the fake executor (and no registry).
async fn executor_app() -> Router {
    app(Config {
        executor_url: serve_executor().await,
        registry_url: dead_url().await,
        ..Config::default()
    })
}

/// `(event, data)` pairs of an SSE body.
fn sse_events(raw: &[u8]) -> Vec<(String, Value)> {
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

/// A URL where nothing listens.
async fn dead_url() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("local addr");
    drop(listener);
    format!("http://{addr}")
}

fn app(config: Config) -> Router {
    router(
        AppState::new(&config, CancellationToken::new()).expect("valid config"),
        &config,
    )
}

async fn fake_app(fake: &FakeRegistry) -> Router {
    app(Config::with_registry(serve(fake.clone()).await))
}

type Headers<'a> = &'a [(&'a str, &'a str)];

struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    body: Value,
    raw: Vec<u8>,
}

async fn call(
    app: &Router,
    method: Method,
    uri: &str,
    headers: Headers<'_>,
    body: Option<&str>,
) -> Reply {
    let mut req = Request::builder().method(method).uri(uri);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req
        .body(body.map_or_else(Body::empty, |b| Body::from(b.to_owned())))
        .expect("request");
    let res = app.clone().oneshot(req).await.expect("infallible");
    let status = res.status();
    let headers = res.headers().clone();
    let raw = to_bytes(res.into_body(), 16 << 20)
        .await
        .expect("body")
        .to_vec();
    let body = serde_json::from_slice(&raw).unwrap_or(Value::Null);
    Reply {
        status,
        headers,
        body,
        raw,
    }
}

async fn get(app: &Router, uri: &str) -> Reply {
    call(app, Method::GET, uri, &[], None).await
}

const JSON: (&str, &str) = ("content-type", "application/json");

fn assert_error(r: &Reply, status: StatusCode, code: &str) {
    assert_eq!(r.status, status, "{:?}", r.body);
    assert_eq!(r.headers[header::CONTENT_TYPE], "application/json");
    assert_eq!(r.body["error"], code, "{:?}", r.body);
    assert!(
        r.body["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{:?}",
        r.body
    );
}
