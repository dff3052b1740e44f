//! Shared test helpers: request bodies, reply decoding, listings and file snapshots.

use std::{
    collections::{BTreeMap, BTreeSet},
    future::Future,
    path::Path,
    time::Duration,
};

use reqwest::{RequestBuilder, StatusCode, header::HeaderMap};
use serde_json::{Value, json};
use taskforce_proto::{
    error::ApiError,
    v1::{self, AgentSource, agent::Kind},
};
use taskforce_tests::Stack;

/// The native tools of seed 002, in its order.
pub const NATIVE_TOOLS: [&str; 9] = [
    "web_search",
    "web_fetch",
    "file_read",
    "file_write",
    "python",
    "git",
    "github",
    "powershell",
    "ask_user",
];

/// The orchestration tools (seed 003), listed after the native ones and allowlisted like them.
pub const ORCHESTRATION_TOOLS: [&str; 2] = ["delegate_to_agent", "update_todolist"];

/// Every tool an allowlist may name: the native tools, then the orchestration tools.
/// A scripted model that takes 1.5 s to answer a mission with "slowly" in it, and answers
/// anything else at once: one run holds a slot while others come and go.
pub const SLOW_SCRIPT: &str = r#"
turns:
  - match: "slowly"
    delay_ms: 1500
    text: "done slowly"
  - text: "quick"
"#;

/// Resident memory of `pid` in MiB (Linux `/proc`).
pub fn rss_mib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0, |kib| kib / 1024)
}

pub fn catalog_tools() -> Vec<&'static str> {
    NATIVE_TOOLS
        .into_iter()
        .chain(ORCHESTRATION_TOOLS)
        .collect()
}

/// Agent ids in the sample configs: the profile first, then the custom agents.
pub const SAMPLE_IDS: [&str; 4] = ["dev", "invoice-extractor", "m365-assistant", "time-keeper"];

/// How long an external edit may take to show (the contract says 1 s; slack for busy boxes).
pub const EDIT_VISIBLE_WITHIN: Duration = Duration::from_millis(1500);
/// Polling step.
pub const STEP: Duration = Duration::from_millis(50);

/// A valid REST create body.
pub fn agent_json(id: &str) -> Value {
    json!({
        "agent_id": id,
        "name": "Test Agent",
        "description": "An agent made by the end-to-end tests.",
        "system_prompt": "You are a LeanAgent.\nAnswer briefly.\n",
        "tool_allowlist": ["file_read", "python"],
    })
}

/// A valid gRPC spec.
pub fn spec(id: &str) -> v1::AgentSpec {
    v1::AgentSpec {
        agent_id: id.to_owned(),
        name: "Test Agent".to_owned(),
        description: "An agent made by the end-to-end tests.".to_owned(),
        system_prompt: "You are a LeanAgent.\nAnswer briefly.\n".to_owned(),
        tool_allowlist: vec!["file_read".to_owned(), "python".to_owned()],
        ..Default::default()
    }
}

/// A decoded HTTP reply.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    /// The body as JSON (`Null` when empty or not JSON).
    pub body: Value,
    /// The raw body.
    pub text: String,
}

impl Reply {
    /// A header as text.
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    }

    /// The ETag with its quotes (and a weak prefix) removed.
    pub fn etag(&self) -> Option<String> {
        self.header("etag")
            .map(|e| e.trim_start_matches("W/").trim_matches('"').to_owned())
    }

    /// Asserts a JSON error reply: status, `error` code, and a non-empty `message`.
    pub fn assert_error(&self, status: u16, code: &str) -> &Self {
        assert_eq!(
            self.status.as_u16(),
            status,
            "unexpected status; body: {}",
            self.text
        );
        assert_eq!(
            self.body["error"], code,
            "unexpected error code; body: {}",
            self.text
        );
        let message = self.body["message"].as_str().unwrap_or_default();
        assert!(
            !message.is_empty(),
            "error without a message: {}",
            self.text
        );
        self
    }

    /// Asserts the error's message or details mention `needle`.
    pub fn assert_names(&self, needle: &str) -> &Self {
        let message = self.body["message"].as_str().unwrap_or_default();
        let details = self.body["details"].to_string();
        assert!(
            message.contains(needle) || details.contains(needle),
            "error does not name {needle:?}: {}",
            self.text
        );
        self
    }
}

/// Sends a request and decodes the reply.
pub async fn send(req: RequestBuilder) -> Reply {
    let resp = req.send().await.expect("HTTP request is answered");
    let status = resp.status();
    let headers = resp.headers().clone();
    let text = resp.text().await.expect("HTTP body is readable");
    let body = serde_json::from_str(&text).unwrap_or(Value::Null);
    Reply {
        status,
        headers,
        body,
        text,
    }
}

/// Streams a new run of `agent_id` on `mission` through the gateway to its end; its events.
pub async fn run_to_end(stack: &Stack, agent_id: &str, mission: &str) -> Vec<(String, Value)> {
    let body = json!({"mission": mission, "agent_id": agent_id});
    SseReader::open(stack, "/api/v1/execute/stream", &body)
        .await
        .rest(RUN_TIMEOUT)
        .await
}

/// POST /api/v1/agents with a JSON body.
/// The `agent_id`s of a `GET /api/v1/agents` body, in order.
pub fn listed_ids(body: &Value) -> Vec<&str> {
    body["agents"]
        .as_array()
        .expect("agents is an array")
        .iter()
        .filter_map(|a| a["agent_id"].as_str())
        .collect()
}

pub async fn create(stack: &Stack, body: &Value) -> Reply {
    send(stack.http().post(stack.url("/api/v1/agents")).json(body)).await
}

/// GET /api/v1/agents/{id} (the id is put in the path as given).
pub async fn get(stack: &Stack, id: &str) -> Reply {
    send(stack.http().get(stack.url(&format!("/api/v1/agents/{id}")))).await
}

/// The gRPC error as the contract's error model.
pub fn api_error(status: &tonic::Status) -> ApiError {
    ApiError::from_status(status)
}

/// Every agent of `source` over gRPC, following pages.
pub async fn grpc_list_all(stack: &Stack, source: AgentSource) -> Vec<v1::Agent> {
    let mut client = stack.registry();
    let mut out = Vec::new();
    let mut token = String::new();
    loop {
        let page = client
            .list_agents(v1::ListAgentsRequest {
                page_size: 1000,
                page_token: token.clone(),
                source: source.into(),
            })
            .await
            .expect("ListAgents succeeds")
            .into_inner();
        out.extend(page.agents);
        if page.next_page_token.is_empty() {
            return out;
        }
        token = page.next_page_token;
    }
}

/// `(id, version)` of every agent, as listed over gRPC.
pub async fn grpc_versions(stack: &Stack) -> Vec<(String, String)> {
    grpc_list_all(stack, AgentSource::Unspecified)
        .await
        .into_iter()
        .map(|a| (a.agent_id, a.version))
        .collect()
}

/// The spec of a custom agent.
pub fn custom_spec(agent: &v1::Agent) -> &v1::AgentSpec {
    match &agent.kind {
        Some(Kind::Custom(c)) => c.spec.as_ref().expect("a custom agent has a spec"),
        other => panic!("{} is not a custom agent: {other:?}", agent.agent_id),
    }
}

/// The custom part of a custom agent.
pub fn custom_of(agent: &v1::Agent) -> &v1::CustomAgent {
    match &agent.kind {
        Some(Kind::Custom(c)) => c,
        other => panic!("{} is not a custom agent: {other:?}", agent.agent_id),
    }
}

/// Every entry name in a directory (hidden and temp files too).
pub fn dir_entries(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .expect("directory is readable")
        .map(|e| {
            e.expect("entry is readable")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect()
}

/// The content of every file in the custom dir, by name.
pub fn custom_files(stack: &Stack) -> BTreeMap<String, Vec<u8>> {
    let dir = stack.custom_dir();
    dir_entries(&dir)
        .into_iter()
        .map(|n| {
            let bytes = std::fs::read(dir.join(&n)).expect("file is readable");
            (n, bytes)
        })
        .collect()
}

/// Parses a YAML file.
pub fn read_yaml(path: &Path) -> serde_yaml::Value {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_yaml::from_str(&text)
        .unwrap_or_else(|e| panic!("{} is not YAML: {e}\n{text}", path.display()))
}

/// The top-level keys of a YAML mapping, in file order.
pub fn yaml_keys(v: &serde_yaml::Value) -> Vec<String> {
    v.as_mapping()
        .expect("a YAML mapping")
        .keys()
        .map(|k| k.as_str().expect("string keys").to_owned())
        .collect()
}

/// A hand-written custom agent file in the seed's style.
pub fn hand_written_yaml(id: &str, description: &str) -> String {
    format!(
        "agent_id: {id}\nname: Hand Written\ndescription: {description}\nprompt:\n  system_prompt: |\n    You are a LeanAgent.\ntools:\n  allowlist:\n    - ask_user\n"
    )
}

/// True when `s` is 16 lowercase hex digits (the documented version shape).
pub fn is_version(s: &str) -> bool {
    s.len() == 16
        && s.chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
}

// ---- runs through the executor ----------------------------------------------------------

/// Longest a whole run may take in a test (the machine may be busy with other stacks).
pub const RUN_TIMEOUT: Duration = Duration::from_secs(60);

/// Creates a custom agent over REST with exactly these native tools; asserts 201.
pub async fn create_agent_with_tools(stack: &Stack, id: &str, tools: &[&str]) {
    let mut body = agent_json(id);
    body["tool_allowlist"] = json!(tools);
    let r = create(stack, &body).await;
    assert_eq!(r.status, 201, "creating {id}: {}", r.text);
}

/// Parses a whole SSE body into `(event, data as JSON)` pairs; comments (keep-alives) skipped.
pub fn parse_sse(text: &str) -> Vec<(String, Value)> {
    text.replace("\r\n", "\n")
        .split("\n\n")
        .filter_map(parse_sse_block)
        .collect()
}

/// Parses one SSE event block into `(event, data as JSON)`; `None` for comments (keep-alives).
fn parse_sse_block(block: &str) -> Option<(String, Value)> {
    let mut name = String::new();
    let mut data = String::new();
    for line in block.lines() {
        if let Some(v) = line.strip_prefix("event:") {
            v.trim().clone_into(&mut name);
        } else if let Some(v) = line.strip_prefix("data:") {
            if !data.is_empty() {
                data.push('\n');
            }
            data.push_str(v.strip_prefix(' ').unwrap_or(v));
        }
    }
    if name.is_empty() && data.is_empty() {
        return None;
    }
    let value =
        serde_json::from_str(&data).unwrap_or_else(|e| panic!("SSE data is JSON ({e}): {data:?}"));
    Some((name, value))
}

/// The names of SSE events, in order.
pub fn event_names(events: &[(String, Value)]) -> Vec<&str> {
    events.iter().map(|(n, _)| n.as_str()).collect()
}

/// An SSE response read event by event, as a browser or `curl -N` reads it.
pub struct SseReader {
    resp: reqwest::Response,
    buf: String,
    ended: bool,
}

impl SseReader {
    /// POSTs `body` to the gateway's `path` and opens its event stream; asserts 200 and
    /// `text/event-stream`.
    pub async fn open(stack: &Stack, path: &str, body: &Value) -> Self {
        Self::open_request(stack, path, stack.http().post(stack.url(path)).json(body)).await
    }

    /// Sends `request` (a POST to `path`) and opens its event stream, as [`SseReader::open`].
    pub async fn open_request(stack: &Stack, path: &str, request: reqwest::RequestBuilder) -> Self {
        let resp = tokio::time::timeout(RUN_TIMEOUT, request.send())
            .await
            .expect("the stream opens in time")
            .expect("the stream request is answered");
        let status = resp.status();
        let content_type = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        if status != 200 {
            let text = resp.text().await.unwrap_or_default();
            panic!("{path}: {status}: {text}\n{}", stack.logs());
        }
        assert!(
            content_type.starts_with("text/event-stream"),
            "{content_type}"
        );
        Self {
            resp,
            buf: String::new(),
            ended: false,
        }
    }

    /// The next event; `None` once the server closed the stream. Panics after `timeout`.
    pub async fn next(&mut self, timeout: Duration) -> Option<(String, Value)> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            self.buf = self.buf.replace("\r\n", "\n");
            if let Some(end) = self.buf.find("\n\n") {
                let block: String = self.buf.drain(..end + 2).collect();
                if let Some(event) = parse_sse_block(&block) {
                    return Some(event);
                }
                continue;
            }
            if self.ended {
                return parse_sse_block(&std::mem::take(&mut self.buf));
            }
            let chunk = tokio::time::timeout_at(deadline, self.resp.chunk())
                .await
                .unwrap_or_else(|_| {
                    panic!("no SSE event within {timeout:?}; so far: {:?}", self.buf)
                })
                .expect("the stream reads");
            match chunk {
                Some(bytes) => self.buf.push_str(&String::from_utf8_lossy(&bytes)),
                None => self.ended = true,
            }
        }
    }

    /// Every event until the server closes the stream (within `timeout` in all).
    pub async fn rest(&mut self, timeout: Duration) -> Vec<(String, Value)> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut out = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match self.next(left).await {
                Some(event) => out.push(event),
                None => return out,
            }
        }
    }

    /// Events until (and including) the first named `name`; panics if the stream ends first.
    pub async fn until(&mut self, name: &str, timeout: Duration) -> Vec<(String, Value)> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut out = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let event = self
                .next(left)
                .await
                .unwrap_or_else(|| panic!("the stream ended before `{name}`: {out:?}"));
            let found = event.0 == name;
            out.push(event);
            if found {
                return out;
            }
        }
    }
}

/// Every event of a gRPC run stream until it ends (within [`RUN_TIMEOUT`]).
pub async fn grpc_events(mut stream: tonic::Streaming<v1::RunEvent>) -> Vec<v1::RunEvent> {
    let mut out = Vec::new();
    let read = async {
        while let Some(event) = stream.message().await.expect("the run stream reads") {
            out.push(event);
        }
    };
    tokio::time::timeout(RUN_TIMEOUT, read)
        .await
        .expect("the run stream ends in time");
    out
}

/// The session as the executor stores it (gRPC `GetSession`).
pub async fn get_session(stack: &Stack, session_id: &str) -> v1::Session {
    stack
        .executor()
        .get_session(v1::GetSessionRequest {
            session_id: session_id.to_owned(),
        })
        .await
        .unwrap_or_else(|e| panic!("GetSession {session_id}: {e}\n{}", stack.logs()))
        .into_inner()
}

/// Calls `probe` every [`STEP`] until `check` accepts its answer; panics with the last answer
/// after `within`.
pub async fn until<T, P, Fut, C>(within: Duration, what: &str, mut probe: P, check: C) -> T
where
    T: std::fmt::Debug,
    P: FnMut() -> Fut,
    Fut: Future<Output = T>,
    C: Fn(&T) -> bool,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let answer = probe().await;
        if check(&answer) {
            return answer;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not seen within {within:?}; last answer: {answer:?}"
        );
        tokio::time::sleep(STEP).await;
    }
}

/// A browser's CORS preflight of a POST to `/mcp` from `http://localhost:5173`, asking for
/// `headers`.
pub async fn mcp_preflight(stack: &Stack, headers: &str) -> Reply {
    send(
        stack
            .http()
            .request(reqwest::Method::OPTIONS, stack.url("/mcp"))
            .header("origin", "http://localhost:5173")
            .header("access-control-request-method", "POST")
            .header("access-control-request-headers", headers),
    )
    .await
}
