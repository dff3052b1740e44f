//! Fake LLM APIs inside the test process, on `127.0.0.1:0`: the only thing the end-to-end tests
//! replace. They speak the real streaming protocols (OpenAI chat completions with
//! `chat.completion.chunk` events and `[DONE]`; Anthropic Messages with `message_start`,
//! `content_block_*`, `message_delta`, `message_stop`), answer each request with the next
//! scripted [`Reply`] (the last one repeats), and record every request.

use std::{
    collections::VecDeque,
    net::SocketAddr,
    sync::{Arc, Mutex},
};

use axum::{
    Router,
    body::{Body, Bytes},
    extract::{Request, State},
    http::{HeaderMap, StatusCode, header},
    response::Response,
};
use futures::StreamExt;
use serde_json::{Value, json};

/// One answer of the fake.
#[derive(Debug, Clone)]
pub enum Reply {
    /// A 200 `text/event-stream` made of these SSE frames; every frame is sent as two body
    /// chunks (cut in its middle), so the client must reassemble lines.
    Stream(Vec<String>),
    /// An error status with a JSON body.
    Status(u16, Value),
    /// A 200 event stream that sends these frames, then stays open and silent forever.
    Stall(Vec<String>),
    /// A `307 Temporary Redirect` to this URL.
    Redirect(String),
}

/// One request as the fake saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    /// Path and query.
    pub uri: String,
    /// The request headers.
    pub headers: HeaderMap,
    /// The body as JSON.
    pub body: Value,
}

impl Seen {
    /// A header as text (empty when absent).
    pub fn header(&self, name: &str) -> String {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    }
}

#[derive(Debug, Default)]
struct Shared {
    replies: Mutex<VecDeque<Reply>>,
    seen: Mutex<Vec<Seen>>,
}

/// A running fake LLM server (stopped when the test's runtime ends).
#[derive(Debug)]
pub struct FakeLlm {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

impl FakeLlm {
    /// Starts a server answering with `replies` in order (the last one repeats).
    pub async fn start(replies: Vec<Reply>) -> Self {
        assert!(!replies.is_empty(), "a fake needs at least one reply");
        let shared = Arc::new(Shared {
            replies: Mutex::new(replies.into()),
            seen: Mutex::default(),
        });
        let app = Router::new()
            .fallback(handle)
            .with_state(Arc::clone(&shared));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binding the fake LLM");
        let addr = listener.local_addr().expect("fake LLM address");
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { addr, shared }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The requests received so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.shared.seen.lock().expect("lock").clone()
    }
}

async fn handle(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let bytes = axum::body::to_bytes(body, usize::MAX)
        .await
        .unwrap_or_default();
    let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    // As the real APIs do: a conversation with a tool call left unanswered is refused (and
    // takes no scripted reply).
    let refused = unanswered_calls(parts.uri.path(), &body);
    shared.seen.lock().expect("lock").push(Seen {
        uri: parts.uri.to_string(),
        headers: parts.headers,
        body,
    });
    if let Some(refusal) = refused {
        let mut response = Response::new(Body::from(refusal.to_string()));
        *response.status_mut() = StatusCode::BAD_REQUEST;
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            "application/json".parse().expect("a valid header"),
        );
        return response;
    }
    let reply = {
        let mut replies = shared.replies.lock().expect("lock");
        if replies.len() > 1 {
            replies.pop_front()
        } else {
            replies.front().cloned()
        }
    };
    if let Some(Reply::Redirect(to)) = &reply {
        let mut response = Response::new(Body::empty());
        *response.status_mut() = StatusCode::TEMPORARY_REDIRECT;
        if let Ok(to) = to.parse() {
            response.headers_mut().insert(header::LOCATION, to);
        }
        return response;
    }
    let stall = matches!(reply, Some(Reply::Stall(_)));
    let (status, content_type, chunks) = match reply {
        Some(Reply::Stall(frames)) => (200, "text/event-stream", frames),
        Some(Reply::Stream(frames)) => {
            let chunks: Vec<String> = frames
                .iter()
                .flat_map(|f| {
                    let mut mid = f.len() / 2;
                    while !f.is_char_boundary(mid) {
                        mid -= 1;
                    }
                    [f[..mid].to_owned(), f[mid..].to_owned()]
                })
                .collect();
            (200, "text/event-stream", chunks)
        }
        Some(Reply::Status(status, body)) => (status, "application/json", vec![body.to_string()]),
        Some(Reply::Redirect(_)) | None => (500, "application/json", vec!["{}".to_owned()]),
    };
    let body = futures::stream::iter(
        chunks
            .into_iter()
            .map(|c| Ok::<_, std::convert::Infallible>(Bytes::from(c))),
    );
    let body = if stall {
        Body::from_stream(body.chain(futures::stream::pending()))
    } else {
        Body::from_stream(body)
    };
    let mut response = Response::new(body);
    *response.status_mut() = StatusCode::from_u16(status).expect("a valid status");
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        content_type.parse().expect("a valid header"),
    );
    response
}

/// The error body the API at `path` answers a conversation with (status 400) whose tool calls
/// are not all answered right after the assistant message making them, as OpenAI's chat
/// completions ("An assistant message with 'tool_calls' must be followed by tool messages
/// responding to each 'tool_call_id'") and Anthropic's Messages API (each `tool_use` needs a
/// `tool_result` in the next message) do; `None` for a conversation they take.
fn unanswered_calls(path: &str, body: &Value) -> Option<Value> {
    let messages = body["messages"].as_array()?;
    let anthropic = path.ends_with("/messages");
    for (i, message) in messages.iter().enumerate() {
        if message["role"] != "assistant" {
            continue;
        }
        let calls: Vec<&str> = if anthropic {
            block_ids(&message["content"], "tool_use", "id")
        } else {
            message["tool_calls"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|c| c["id"].as_str())
                .collect()
        };
        let answered: Vec<&str> = if anthropic {
            messages
                .get(i + 1)
                .filter(|m| m["role"] == "user")
                .map_or_else(Vec::new, |m| {
                    block_ids(&m["content"], "tool_result", "tool_use_id")
                })
        } else {
            messages[i + 1..]
                .iter()
                .take_while(|m| m["role"] == "tool")
                .filter_map(|m| m["tool_call_id"].as_str())
                .collect()
        };
        let open: Vec<&str> = calls
            .into_iter()
            .filter(|id| !answered.contains(id))
            .collect();
        if open.is_empty() {
            continue;
        }
        let open = open.join(", ");
        return Some(if anthropic {
            json!({"type": "error", "error": {"type": "invalid_request_error", "message": format!(
                "messages.{}: `tool_use` ids were found without `tool_result` blocks immediately \
                 after: {open}. Each `tool_use` block must have a corresponding `tool_result` \
                 block in the next message.", i + 1)}})
        } else {
            json!({"error": {"type": "invalid_request_error", "param": format!("messages.[{}].role", i + 1),
                "code": null, "message": format!(
                "An assistant message with 'tool_calls' must be followed by tool messages \
                 responding to each 'tool_call_id'. The following tool_call_ids did not have \
                 response messages: {open}")}})
        });
    }
    None
}

/// The `field` of every Anthropic content block of type `kind` in `content`.
fn block_ids<'a>(content: &'a Value, kind: &str, field: &str) -> Vec<&'a str> {
    content
        .as_array()
        .into_iter()
        .flatten()
        .filter(|b| b["type"] == kind)
        .filter_map(|b| b[field].as_str())
        .collect()
}

/// The OpenAI chat-completions stream.
pub mod openai {
    use super::{Reply, Value, json};

    fn chunk(delta: &Value, finish: Option<&str>) -> String {
        let event = json!({
            "id": "chatcmpl-e2e", "object": "chat.completion.chunk", "created": 1_763_860_000,
            "model": "gpt-fake", "system_fingerprint": "fp_e2e",
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
        });
        format!("data: {event}\n\n")
    }

    fn closing(finish: &str) -> Vec<String> {
        let usage = json!({
            "id": "chatcmpl-e2e", "object": "chat.completion.chunk", "created": 1_763_860_000,
            "model": "gpt-fake", "choices": [],
            "usage": {"prompt_tokens": 21, "completion_tokens": 7, "total_tokens": 28},
        });
        vec![
            chunk(&json!({}), Some(finish)),
            format!("data: {usage}\n\n"),
            "data: [DONE]\n\n".to_owned(),
        ]
    }

    /// A streamed text answer, one `content` delta per piece.
    pub fn text(pieces: &[&str]) -> Reply {
        let mut frames = vec![chunk(
            &json!({"role": "assistant", "content": "", "refusal": null}),
            None,
        )];
        frames.extend(pieces.iter().map(|p| chunk(&json!({"content": p}), None)));
        frames.extend(closing("stop"));
        Reply::Stream(frames)
    }

    /// One streamed tool call: the id and name first, then the arguments in these pieces, each
    /// its own delta (concatenated they need not be valid JSON).
    pub fn tool_call(id: &str, name: &str, argument_pieces: &[&str]) -> Reply {
        let mut frames = vec![chunk(
            &json!({"role": "assistant", "content": null, "tool_calls": [{
                "index": 0, "id": id, "type": "function",
                "function": {"name": name, "arguments": ""}}]}),
            None,
        )];
        frames.extend(argument_pieces.iter().map(|p| {
            chunk(
                &json!({"tool_calls": [{"index": 0, "function": {"arguments": p}}]}),
                None,
            )
        }));
        frames.extend(closing("tool_calls"));
        Reply::Stream(frames)
    }

    /// The start of a text answer, then silence with the connection open.
    pub fn stall_after(pieces: &[&str]) -> Reply {
        let mut frames = vec![chunk(&json!({"role": "assistant", "content": ""}), None)];
        frames.extend(pieces.iter().map(|p| chunk(&json!({"content": p}), None)));
        Reply::Stall(frames)
    }

    /// An error status with OpenAI's error body.
    pub fn error(status: u16, message: &str) -> Reply {
        Reply::Status(
            status,
            json!({"error": {"message": message, "type": "server_error", "param": null, "code": null}}),
        )
    }
}

/// The Anthropic Messages stream.
pub mod anthropic {
    use super::{Reply, Value, json};

    fn event(name: &str, data: &Value) -> String {
        format!("event: {name}\ndata: {data}\n\n")
    }

    fn message(blocks: Vec<String>, stop_reason: &str) -> Reply {
        let mut frames = vec![
            event(
                "message_start",
                &json!({"type": "message_start", "message": {
                    "id": "msg_e2e", "type": "message", "role": "assistant", "content": [],
                    "model": "claude-fake", "stop_reason": null, "stop_sequence": null,
                    "usage": {"input_tokens": 25, "output_tokens": 1}}}),
            ),
            event("ping", &json!({"type": "ping"})),
        ];
        frames.extend(blocks);
        frames.push(event(
            "message_delta",
            &json!({"type": "message_delta",
                    "delta": {"stop_reason": stop_reason, "stop_sequence": null},
                    "usage": {"output_tokens": 9}}),
        ));
        frames.push(event("message_stop", &json!({"type": "message_stop"})));
        Reply::Stream(frames)
    }

    fn text_block(index: u32, pieces: &[&str]) -> Vec<String> {
        let mut frames = vec![event(
            "content_block_start",
            &json!({"type": "content_block_start", "index": index,
                    "content_block": {"type": "text", "text": ""}}),
        )];
        frames.extend(pieces.iter().map(|p| {
            event(
                "content_block_delta",
                &json!({"type": "content_block_delta", "index": index,
                        "delta": {"type": "text_delta", "text": p}}),
            )
        }));
        frames.push(event(
            "content_block_stop",
            &json!({"type": "content_block_stop", "index": index}),
        ));
        frames
    }

    /// A streamed text answer.
    pub fn text(pieces: &[&str]) -> Reply {
        message(text_block(0, pieces), "end_turn")
    }

    /// A short text, then one `tool_use` block whose input arrives as these
    /// `input_json_delta` pieces.
    pub fn tool_use(preface: &str, id: &str, name: &str, input_pieces: &[&str]) -> Reply {
        let mut blocks = text_block(0, &[preface]);
        blocks.push(event(
            "content_block_start",
            &json!({"type": "content_block_start", "index": 1,
                    "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}}),
        ));
        blocks.extend(input_pieces.iter().map(|p| {
            event(
                "content_block_delta",
                &json!({"type": "content_block_delta", "index": 1,
                        "delta": {"type": "input_json_delta", "partial_json": p}}),
            )
        }));
        blocks.push(event(
            "content_block_stop",
            &json!({"type": "content_block_stop", "index": 1}),
        ));
        message(blocks, "tool_use")
    }
}

/// The key the executor reads from `TF_E2E_OPENAI_KEY` for the fake OpenAI server.
pub const OPENAI_KEY: &str = "sk-e2e-openai-9d27c1f4b8a3";
/// The key the executor reads from `TF_E2E_ANTHROPIC_KEY` for the fake Anthropic server.
pub const ANTHROPIC_KEY: &str = "sk-ant-e2e-3b8e6a0f5c71";

/// An `llm_config.yaml` with two providers, `fake_openai` (the default, alias `main`) and
/// `fake_anthropic` (alias `claude`), at these base URLs, keys from the environment, quick
/// retries, and no scripted fallback.
pub fn llm_config(openai_url: &str, anthropic_url: &str) -> String {
    format!(
        r"default_provider: fake_openai
default_model: main
fallback_to_scripted: false
models:
  main: {{provider: fake_openai, model: gpt-fake}}
  claude: {{provider: fake_anthropic, model: claude-fake}}
providers:
  fake_openai:
    type: openai
    base_url: {openai_url}/v1
    api_key_env: TF_E2E_OPENAI_KEY
    max_attempts: 3
    retry_base_delay_ms: 20
    retry_max_delay_ms: 100
  fake_anthropic:
    type: anthropic
    base_url: {anthropic_url}
    api_key_env: TF_E2E_ANTHROPIC_KEY
    max_attempts: 3
    retry_base_delay_ms: 20
    retry_max_delay_ms: 100
"
    )
}

/// A stack whose executor talks to these two fakes (see [`llm_config`]), with both keys set.
pub fn options(openai: &FakeLlm, anthropic: &FakeLlm) -> taskforce_tests::StackOptions {
    taskforce_tests::StackOptions::full()
        .with_executor()
        .llm_config(llm_config(&openai.url(), &anthropic.url()))
        .executor_env("TF_E2E_OPENAI_KEY", OPENAI_KEY)
        .executor_env("TF_E2E_ANTHROPIC_KEY", ANTHROPIC_KEY)
}

/// A stack whose executor talks to `openai` (the Anthropic provider points at a fake that is
/// not meant to be asked, returned to be kept alive), both keys set.
pub async fn openai_stack(openai: &FakeLlm) -> (taskforce_tests::Stack, FakeLlm) {
    let unused = FakeLlm::start(vec![anthropic::text(&["unused"])]).await;
    let stack = options(openai, &unused)
        .spawn()
        .await
        .expect("stack starts");
    (stack, unused)
}

/// Asserts no log of the stack holds `secret` (and that the executor did log something, unless
/// the logs went to stderr with `TEST_LOG=1`).
pub fn assert_not_logged(stack: &taskforce_tests::Stack, secret: &str) {
    let executor_log = std::fs::read_to_string(stack.executor_log()).unwrap_or_default();
    assert!(
        taskforce_tests::process::test_log() || executor_log.contains("gRPC listening"),
        "the executor's log is where it should be"
    );
    for log in [
        stack.executor_log(),
        stack.gateway_log(),
        stack.registry_log(),
    ] {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(
            !text.contains(secret),
            "{} contains the API key",
            log.display()
        );
    }
}
