//! A fake LLM server on loopback: each request takes the next scripted [`Reply`] (the last one
//! repeats) and is recorded, so tests can check what the client sent.

use std::{
    collections::VecDeque,
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{
    Router,
    body::{Body, Bytes},
    extract::{Request, State},
    http::{HeaderMap, StatusCode},
    response::Response,
};
use executor_svc::llm::{Env, LlmError, LlmEvent, LlmStream, ProviderConfig};
use futures::StreamExt;
use serde_json::Value;

/// What the fake server answers to one request.
#[derive(Clone, Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(&'static str, String)>,
    /// Body pieces, each sent after its delay.
    pub chunks: Vec<(Duration, String)>,
    /// Never answer (not even headers).
    pub hang: bool,
}

impl Reply {
    /// A 200 event stream of the given SSE frames (each already ending in a blank line).
    pub fn sse(frames: Vec<String>) -> Self {
        Self {
            status: 200,
            headers: vec![("content-type", "text/event-stream".to_owned())],
            chunks: frames.into_iter().map(|f| (Duration::ZERO, f)).collect(),
            hang: false,
        }
    }

    /// An error status with a JSON body.
    pub fn status(status: u16, body: Value) -> Self {
        Self {
            status,
            headers: vec![("content-type", "application/json".to_owned())],
            chunks: vec![(Duration::ZERO, body.to_string())],
            hang: false,
        }
    }

    /// A server that accepts the request and never answers.
    pub fn hang() -> Self {
        Self {
            hang: true,
            ..Self::status(200, Value::Null)
        }
    }

    /// Adds a response header.
    pub fn header(mut self, name: &'static str, value: &str) -> Self {
        self.headers.push((name, value.to_owned()));
        self
    }
}

/// One request as the server saw it.
#[derive(Clone, Debug)]
pub struct Seen {
    /// Path and query.
    pub uri: String,
    pub headers: HeaderMap,
    pub body: Value,
}

#[derive(Default)]
struct Shared {
    replies: Mutex<VecDeque<Reply>>,
    seen: Mutex<Vec<Seen>>,
}

/// A running fake server.
pub struct FakeServer {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
}

impl FakeServer {
    /// Starts a server on 127.0.0.1:0 that answers with `replies` in order.
    pub async fn start(replies: Vec<Reply>) -> Self {
        let shared = Arc::new(Shared {
            replies: Mutex::new(replies.into()),
            seen: Mutex::default(),
        });
        let app = Router::new()
            .fallback(handle)
            .with_state(Arc::clone(&shared));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move { axum::serve(listener, app).await.expect("serve") });
        Self { addr, shared }
    }

    /// Requests received so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.shared.seen.lock().expect("lock").clone()
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

async fn handle(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let bytes = axum::body::to_bytes(body, usize::MAX).await.expect("body");
    let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    let uri = parts.uri.to_string();
    shared.seen.lock().expect("lock").push(Seen {
        uri,
        headers: parts.headers,
        body,
    });
    let reply = {
        let mut replies = shared.replies.lock().expect("lock");
        if replies.len() > 1 {
            replies.pop_front()
        } else {
            replies.front().cloned()
        }
    }
    .expect("a reply is scripted");
    if reply.hang {
        std::future::pending::<()>().await;
    }
    let chunks = futures::stream::iter(reply.chunks).then(|(delay, text)| async move {
        tokio::time::sleep(delay).await;
        Ok::<_, std::convert::Infallible>(Bytes::from(text))
    });
    let mut response = Response::new(Body::from_stream(chunks));
    *response.status_mut() = StatusCode::from_u16(reply.status).expect("status");
    for (name, value) in reply.headers {
        response
            .headers_mut()
            .insert(name, value.parse().expect("header value"));
    }
    response
}

/// An SSE frame with only `data:`.
pub fn data(json: &Value) -> String {
    format!("data: {json}\n\n")
}

/// An SSE frame with `event:` and `data:`.
pub fn event(name: &str, json: &Value) -> String {
    format!("event: {name}\ndata: {json}\n\n")
}

/// The key used by every test provider.
pub const KEY: &str = "sk-test-0123456789abcdef";

/// A provider entry for `kind` against `base_url`, fast timeouts and retries, overridden by the
/// keys of `extra` (YAML).
pub fn provider_config(kind: &str, base_url: &str, extra: &str) -> ProviderConfig {
    let base = format!(
        "type: {kind}\nbase_url: {base_url}\napi_key_env: TEST_KEY\nrequest_timeout_secs: 2\n\
         idle_timeout_secs: 2\nmax_attempts: 3\nretry_base_delay_ms: 20\nretry_max_delay_ms: 100"
    );
    let mut entry: serde_yaml::Mapping = serde_yaml::from_str(&base).expect("base entry");
    if !extra.is_empty() {
        let extra: serde_yaml::Mapping = serde_yaml::from_str(extra).expect("extra entry");
        entry.extend(extra);
    }
    let yaml = serde_yaml::to_string(&entry).expect("yaml");
    ProviderConfig::from_yaml(&yaml).expect("provider config")
}

/// An environment holding only the test key.
pub fn env() -> Env {
    Env::from_pairs([("TEST_KEY", KEY)])
}

/// Drains a stream.
pub async fn drain(mut stream: LlmStream) -> Vec<Result<LlmEvent, LlmError>> {
    let mut out = Vec::new();
    while let Some(item) = stream.next().await {
        out.push(item);
    }
    out
}
