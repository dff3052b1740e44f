//! Seed 004's chat endpoints: `POST /ai/agent/stream` (the chat agent with its tools, under a
//! policy mode) and `POST /ai/stream` (the plain LLM, no tools), in the seed's SSE framing so an
//! existing chat UI streams them unchanged:
//!
//! ```text
//! data: <token text>                                   (non-empty pieces; lines split per SSE)
//! data: {"text":"🔧 running: <tool> …","event":"tool_start","tool":"<tool>"}
//! data: {"text":"✅ done","event":"tool_end","tool":"<tool>"}
//! data: {"text":"⚠️ <tool> failed: …","event":"tool_error","tool":"<tool>"}
//! event: end
//! data: [DONE]
//! ```
//!
//! Nothing else goes on the wire (no keep-alive comments, no ids): the conversation's
//! `threadId` (a new one when the request has none) comes back in the `x-thread-id` header. A
//! `threadId` is the executor's session id, so memory survives an executor restart. Every
//! failure is a `data:` text followed by the end frames, since the UI shows text.

use axum::{
    extract::State,
    http::{HeaderName, HeaderValue},
    response::{IntoResponse, Response, sse::Event},
};
use futures::{StreamExt, stream};
use serde::Deserialize;
use serde_json::Value;
use taskforce_proto::v1::{self, run_event::Event as Ev};
use tonic::{Code, Streaming};
use tracing::{info, instrument, warn};
use utoipa::ToSchema;

use crate::{
    config::Config,
    error::RestError,
    extract::JsonBody,
    sse::{Dialect, STOPPING, frames, respond, sse_response},
    state::AppState,
};

/// The response header carrying the conversation's thread id.
pub const THREAD_HEADER: HeaderName = HeaderName::from_static("x-thread-id");

/// How the chat endpoints run, from the gateway's configuration.
#[derive(Debug, Clone)]
pub struct ChatSettings {
    /// The agent serving them.
    pub agent: String,
    /// The mode of requests that name none.
    pub default_mode: String,
    /// `false`: `/ai/agent/stream` answers as the plain LLM.
    pub tools_enabled: bool,
    /// Prompts per thread per minute (`None`: no limit), shared by the gateway's handlers.
    pub rate_limit: Option<std::sync::Arc<RateLimit>>,
    /// The model of chat runs: `AI_MODEL_NAME` (an alias), or `@AI_DESTINATION_NAME[/model]`
    /// (a provider entry).
    pub model: Option<String>,
}

impl ChatSettings {
    /// The settings of `config`.
    pub fn from_config(config: &Config) -> Self {
        Self {
            rate_limit: (config.agent_rate_limit_per_minute > 0)
                .then(|| std::sync::Arc::new(RateLimit::new(config.agent_rate_limit_per_minute))),
            model: chat_model(
                config.ai_destination_name.as_deref(),
                config.ai_model_name.as_deref(),
            ),
            agent: config.chat_agent.clone(),
            default_mode: config.agent_default_mode.clone(),
            tools_enabled: config.agent_enable,
        }
    }
}

/// The model reference of chat runs: `AI_DESTINATION_NAME` names a provider entry
/// (`@provider`, with `AI_MODEL_NAME` as its model: `@provider/model`), `AI_MODEL_NAME` alone an
/// alias or a model of the default provider.
fn chat_model(destination: Option<&str>, model: Option<&str>) -> Option<String> {
    fn given(v: Option<&str>) -> Option<&str> {
        v.map(str::trim).filter(|v| !v.is_empty())
    }
    match (given(destination), given(model)) {
        (Some(d), Some(m)) => Some(format!("@{d}/{m}")),
        (Some(d), None) => Some(format!("@{d}")),
        (None, m) => m.map(str::to_owned),
    }
}

/// A sliding one-minute window of prompts per thread. Threads idle for a minute are forgotten
/// when the table is swept, so it stays as small as the threads in use.
#[derive(Debug)]
pub struct RateLimit {
    per_minute: u32,
    seen: std::sync::Mutex<
        std::collections::HashMap<String, std::collections::VecDeque<std::time::Instant>>,
    >,
}

impl RateLimit {
    const WINDOW: std::time::Duration = std::time::Duration::from_secs(60);

    /// A limit of `per_minute` prompts per thread.
    pub fn new(per_minute: u32) -> Self {
        Self {
            per_minute,
            seen: std::sync::Mutex::default(),
        }
    }

    /// Counts a prompt of `thread` now; false when it is over the limit (then it is not counted).
    pub fn admit(&self, thread: &str, now: std::time::Instant) -> bool {
        let mut seen = self
            .seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if seen.len() > 10_000 {
            seen.retain(|_, times| {
                times
                    .back()
                    .is_some_and(|t| now.duration_since(*t) < Self::WINDOW)
            });
        }
        let times = seen.entry(thread.to_owned()).or_default();
        while times
            .front()
            .is_some_and(|t| now.duration_since(*t) >= Self::WINDOW)
        {
            times.pop_front();
        }
        if times.len() >= self.per_minute as usize {
            return false;
        }
        times.push_back(now);
        true
    }
}

/// Body of `POST /ai/agent/stream` and `POST /ai/stream`; other keys are ignored, as the
/// existing UI may send more.
#[derive(Debug, Deserialize, ToSchema)]
pub struct ChatBody {
    /// What the user asks.
    #[serde(default)]
    pub prompt: String,
    /// Continues this conversation (letters, digits, `-`, `_`; up to 128); a new one when
    /// absent.
    #[serde(default, rename = "threadId")]
    pub thread_id: Option<String>,
    /// `readOnly` (default: `AGENT_DEFAULT_MODE`), `default` or `safeWrite`.
    #[serde(default)]
    pub mode: Option<String>,
    /// `safeWrite` confirmation ids this message grants (the prompt may also say
    /// `confirm c-…`); only ids this thread asked for are accepted, each for one run of its call.
    #[serde(default)]
    pub confirmations: Vec<String>,
}

/// The confirmation ids a prompt grants in words: `confirm c-<12 hex>` (any case, any place).
fn confirmations_in(prompt: &str) -> Vec<String> {
    let words = id_words(prompt);
    words
        .windows(2)
        .filter(|w| w[0].starts_with("confirm"))
        .map(|w| w[1].clone())
        .filter(|id| is_confirmation_id(id))
        .collect()
}

/// `text`'s words of letters, digits and `-`, lower-cased.
fn id_words(text: &str) -> Vec<String> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .map(str::to_ascii_lowercase)
        .collect()
}

/// `c-` and 12 hex digits.
fn is_confirmation_id(id: &str) -> bool {
    id.len() == 14 && id.starts_with("c-") && id[2..].bytes().all(|b| b.is_ascii_hexdigit())
}

/// A failed tool call as the UI shows it: one line, shortened, but never without the
/// confirmation id a `safeWrite` refusal carries (the user needs it to confirm).
/// The executor's message already names the tool (`file_read failed: …`, `git: MCP server …`):
/// that prefix is not said twice.
fn tool_failure(tool: &str, message: &str) -> String {
    let reason = message
        .strip_prefix(tool)
        .and_then(|rest| rest.strip_prefix(" failed: ").or(rest.strip_prefix(": ")))
        .unwrap_or(message);
    // The executor's message names its id twice (`confirmation id c-…`, `confirm c-…`).
    let mut ids: Vec<String> = id_words(message)
        .into_iter()
        .filter(|w| is_confirmation_id(w))
        .collect();
    ids.dedup();
    let suffix = |reason: &str| -> String {
        ids.iter()
            .filter(|id| !reason.contains(id.as_str()))
            .map(|id| format!(" (confirmation id {id})"))
            .collect()
    };
    // The whole line within the limit, the ids a confirmation needs kept whole.
    let prefix = format!("⚠️ {tool} failed: ");
    let room = MAX_TOOL_ERROR
        .saturating_sub(prefix.chars().count() + suffix("").chars().count())
        .saturating_sub(1);
    let reason = short(reason, room);
    let ids = suffix(&reason);
    format!("{prefix}{reason}{ids}")
}

/// Most characters of a `tool_error` text.
const MAX_TOOL_ERROR: usize = 300;

/// The most characters of what a `tool_start` shows a call runs: room for a command line with
/// its options, so what it runs is seen, not only how it starts.
const MAX_TOOL_START: usize = 300;

/// The seed's dialect: only the top agent's tokens and tool events, as the UI expects them.
#[derive(Debug, Default)]
pub struct Chat {
    /// The answer so far has text: a question or an error after it starts a new paragraph
    /// instead of running on from the model's last word.
    spoke: bool,
    /// The stream said why the run stops (an error, the executor stopping).
    explained: bool,
    /// The plain LLM's stream (`/ai/stream`, a fallback): no tool events, even for a call the
    /// model made to a tool it was not offered.
    plain: bool,
}

impl Chat {
    /// The dialect of a plain LLM's stream.
    fn plain() -> Self {
        Self {
            plain: true,
            ..Self::default()
        }
    }

    /// `text` as its own paragraph of the answer.
    fn paragraph(&mut self, text: &str) -> Event {
        let framed = if self.spoke {
            text_frame(&format!("\n\n{text}"))
        } else {
            text_frame(text)
        };
        self.spoke = true;
        framed
    }
}

/// A tool event as compact JSON with the keys in the seed's order (`text`, `event`, `tool`).
fn tool_frame(text: &str, event: &str, tool: &str) -> Event {
    let quote = |s: &str| Value::String(s.to_owned()).to_string();
    Event::default().data(format!(
        "{{\"text\":{},\"event\":{},\"tool\":{}}}",
        quote(text),
        quote(event),
        quote(tool)
    ))
}

/// At most `max` characters of `text`, on one line.
pub(crate) fn short(text: &str, max: usize) -> String {
    let line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    taskforce_proto::cut_chars(&line, max)
}

/// What a tool call runs, for its `tool_start` text: every command-like argument it has (a
/// tool runs whichever it reads, so none is left out), `git`'s `args`, the first line of
/// `python`'s or `powershell`'s `code`.
fn running_detail(args: &Value) -> String {
    let mut pieces: Vec<String> = [
        "command",
        "cmd",
        "commandLine",
        "command_line",
        "args",
        "query",
        "url",
        "path",
    ]
    .iter()
    .filter_map(|k| taskforce_proto::json::command_text(&args[*k]))
    .filter(|t| !t.trim().is_empty())
    .collect();
    if let Some(code) = args["code"].as_str()
        && let Some(first) = code.lines().map(str::trim).find(|l| !l.is_empty())
    {
        pieces.push(first.to_owned());
    }
    pieces.join(" · ")
}

fn text_frame(text: &str) -> Event {
    // axum starts a new `data:` line after each CR and each LF, so a CRLF would reach the client
    // as two line breaks; SSE cannot carry a CR anyway, so a line end is sent as one LF, and a
    // lone CR as one too (on the wire it ended a line only for spec-following parsers: a client
    // splitting on LF read `\rdata: ` as text).
    let text = if text.contains('\r') {
        std::borrow::Cow::Owned(text.replace("\r\n", "\n").replace('\r', "\n"))
    } else {
        std::borrow::Cow::Borrowed(text)
    };
    if reads_as_json(&text) {
        // The seed's UIs parse JSON `data:` and show its `delta|content|text`: a token ` 5`,
        // `true` or `"quoted"` would parse to something with none of them and vanish, and a
        // `[DONE]` would end their stream. Such a text goes as `{"text": ...}`, which they show.
        return Event::default().data(serde_json::json!({ "text": text }).to_string());
    }
    Event::default().data(text)
}

/// Whether a client's JSON handling would take `text`, sent as `data:`, for JSON (or for the
/// stream's end).
fn reads_as_json(text: &str) -> bool {
    text.trim() == "[DONE]" || serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok()
}

fn end_frame() -> Event {
    Event::default().event("end").data("[DONE]")
}

impl Dialect for Chat {
    fn frames(&mut self, ev: &v1::RunEvent) -> Vec<Event> {
        // Sub-agents' events stay out of a chat: their work reaches it through the top agent.
        if !ev.frame_id.is_empty() {
            return Vec::new();
        }
        if self.plain
            && matches!(
                ev.event,
                Some(Ev::ToolStart(_) | Ev::ToolEnd(_) | Ev::ToolError(_))
            )
        {
            return Vec::new();
        }
        match &ev.event {
            Some(Ev::Token(t)) if !t.text.is_empty() => {
                self.spoke = true;
                vec![text_frame(&t.text)]
            }
            Some(Ev::ToolStart(t)) => {
                let args: Value = serde_json::from_str(&t.arguments_json).unwrap_or(Value::Null);
                let what = match running_detail(&args) {
                    detail if detail.is_empty() => t.tool.clone(),
                    detail => format!("{} {}", t.tool, short(&detail, MAX_TOOL_START)),
                };
                vec![tool_frame(
                    &format!("🔧 running: {what}"),
                    "tool_start",
                    &t.tool,
                )]
            }
            Some(Ev::ToolEnd(t)) if t.is_error => vec![tool_frame(
                &tool_failure(&t.tool, &t.output),
                "tool_error",
                &t.tool,
            )],
            Some(Ev::ToolEnd(t)) => vec![tool_frame("✅ done", "tool_end", &t.tool)],
            Some(Ev::ToolError(t)) => vec![tool_frame(
                &tool_failure(&t.tool, &t.message),
                "tool_error",
                &t.tool,
            )],
            Some(Ev::Question(q)) => vec![self.paragraph(&q.question)],
            Some(Ev::Error(e)) => {
                self.explained = true;
                vec![self.paragraph(&format!("⚠️ {}", e.message))]
            }
            // The executor stopping stops the run: without a word the answer would look whole.
            Some(Ev::Warning(w)) if w.code == "EXECUTOR_STOPPING" => {
                self.explained = true;
                vec![self.paragraph(&format!("⚠️ {}", w.message))]
            }
            // An answer the model cut off or declined is shown, and said to be one.
            Some(Ev::Warning(w))
                if matches!(
                    w.code.as_str(),
                    "OUTPUT_TRUNCATED" | "CONTENT_FILTERED" | "MODEL_REFUSED"
                ) =>
            {
                vec![self.paragraph(&format!("⚠️ {}", w.message))]
            }
            Some(Ev::Done(d))
                if d.status() == v1::RunStatus::Cancelled
                    && !std::mem::replace(&mut self.explained, true) =>
            {
                vec![self.paragraph("⚠️ the run was cancelled"), end_frame()]
            }
            Some(Ev::Done(_)) => vec![end_frame()],
            _ => Vec::new(),
        }
    }

    fn broken(&mut self, error: RestError) -> Vec<Event> {
        vec![
            self.paragraph(&format!("⚠️ {}", error.0.message)),
            end_frame(),
        ]
    }

    fn keep_alive(&self) -> bool {
        false
    }
}

/// Whether the executor refused a new prompt because the session waits for an answer.
fn awaits_answer(status: &tonic::Status) -> bool {
    status.code() == Code::FailedPrecondition
        && taskforce_proto::error::ApiError::from_status(status)
            .extra
            .iter()
            .any(|(k, v)| k == "session_status" && v == "paused")
}

/// How a chat run began.
enum Opening {
    /// Its first frames, and the rest of its stream.
    Answering(Vec<Event>, Box<Streaming<v1::RunEvent>>, Chat),
    /// It failed before sending anything the user would see.
    FailedEarly(String),
    /// The gateway is stopping and the run had still shown nothing.
    Stopped,
}

/// Reads a run until it has something to show, or fails first (then the rest is drained).
async fn opening(
    mut events: Streaming<v1::RunEvent>,
    thread: &str,
    stop: &tokio_util::sync::CancellationToken,
) -> Opening {
    let mut chat = Chat::default();
    let mut stopped = crate::sse::stopping(stop);
    loop {
        let next = tokio::select! {
            next = events.next() => next,
            () = &mut stopped => return Opening::Stopped,
        };
        match next {
            Some(Ok(ev)) => {
                if ev.frame_id.is_empty() {
                    match &ev.event {
                        Some(Ev::Error(e)) => {
                            crate::sse::drain(events).await;
                            return Opening::FailedEarly(format!("{}: {}", e.code, e.message));
                        }
                        // The run goes on without that server's tools: the LLM answers
                        // unaided, the fallback of seed 004 §3.4; the log says why.
                        Some(Ev::Warning(w)) if w.code == "MCP_SERVER_UNAVAILABLE" => {
                            warn!(thread_id = %thread, reason = %w.message, "an MCP server of the chat agent is unavailable; the LLM answers without its tools");
                        }
                        _ => {}
                    }
                }
                let first = chat.frames(&ev);
                if !first.is_empty() {
                    return Opening::Answering(first, Box::new(events), chat);
                }
            }
            Some(Err(status)) => return Opening::FailedEarly(status.message().to_owned()),
            None => return Opening::FailedEarly("the run's stream ended early".to_owned()),
        }
    }
}

/// A whole answer that is only an error text and the end.
fn failure(message: &str) -> Response {
    sse_response(stream::iter(failure_frames(message)), false)
}

/// The frames of a whole answer that is only an error text and the end.
fn failure_frames(message: &str) -> Vec<Event> {
    vec![text_frame(&format!("⚠️ {message}")), end_frame()]
}

fn with_thread(mut response: Response, thread: &str) -> Response {
    if let Ok(value) = HeaderValue::from_str(thread) {
        response.headers_mut().insert(THREAD_HEADER, value);
    }
    response
}

/// Runs the chat agent on the prompt (with tools unless `plain`) and streams it.
async fn run(state: &AppState, body: ChatBody, plain: bool) -> Response {
    let given = body
        .thread_id
        .as_deref()
        .map(str::trim)
        .filter(|t| !t.is_empty());
    // A conversation this request starts: the gateway chose its id, so it may choose another.
    let minted = given.is_none();
    let mut thread = match given {
        Some(t) if taskforce_proto::ids::is_session_id(t) => t.to_owned(),
        Some(_) => {
            return failure("`threadId` must be 1-128 letters, digits, `-` or `_`");
        }
        // A placeholder until an executor takes the conversation (`start_new` names its owner).
        None => taskforce_proto::ids::mint_session_id(None),
    };
    if body.prompt.trim().is_empty() {
        return with_thread(failure("the prompt is empty"), &thread);
    }
    if body.prompt.len() > taskforce_proto::MAX_MISSION_BYTES {
        return with_thread(failure("the prompt is longer than 256 KiB"), &thread);
    }
    let settings = &state.chat;
    if let Some(limit) = &settings.rate_limit
        && !limit.admit(&thread, std::time::Instant::now())
    {
        return with_thread(
            failure(&format!(
                "too many prompts in this conversation: at most {} per minute; try again shortly",
                limit.per_minute
            )),
            &thread,
        );
    }
    let plain = plain || !settings.tools_enabled;
    let mode = body
        .mode
        .filter(|m| !m.trim().is_empty())
        .unwrap_or_else(|| settings.default_mode.clone());
    let mut confirmations = body.confirmations.clone();
    for id in confirmations_in(&body.prompt) {
        if !confirmations.contains(&id) {
            confirmations.push(id);
        }
    }
    let request = |thread: &str, no_tools: bool| v1::ExecuteRequest {
        mission: body.prompt.clone(),
        agent_id: Some(settings.agent.clone()),
        session_id: Some(thread.to_owned()),
        mode: Some(mode.clone()),
        model: settings.model.clone(),
        no_tools: Some(no_tools),
        confirmations: confirmations.clone(),
        ..Default::default()
    };
    // A new conversation starts as a new run does: on the next executor that can take it.
    let (owner, first) = if minted {
        match state.executors.start_new(request(&thread, plain)).await {
            Ok(started) => {
                if let Some(id) = started.session_id {
                    thread = id;
                }
                (started.replica, started.answer)
            }
            Err(e) => return with_thread(failure(&e.0.message), &thread),
        }
    } else {
        match state.executors.locate(&thread).await {
            Ok(owner) => {
                let first = owner.client.clone().execute(request(&thread, plain)).await;
                (owner, first)
            }
            Err(e) => return with_thread(failure(&e.0.message), &thread),
        }
    };
    let mut executor = owner.client.clone();
    let started = match first {
        // A conversation waiting on a question: the prompt answers it.
        Err(status) if awaits_answer(&status) => {
            executor
                .answer(v1::AnswerRequest {
                    session_id: thread.clone(),
                    answer: body.prompt.clone(),
                    // The request's policy holds for the run its answer continues.
                    mode: Some(mode.clone()),
                    confirmations: confirmations.clone(),
                    no_tools: Some(plain),
                    ..Default::default()
                })
                .await
        }
        // The agent could not start with its tools: the plain LLM answers (seed 004 §3.4).
        Err(status) if !plain && matches!(status.code(), Code::Internal | Code::Unknown) => {
            warn!(thread_id = %thread, error = %status.message(), "the chat agent failed to start; falling back to the plain LLM");
            executor.execute(request(&thread, true)).await
        }
        other => other,
    };
    let response = match started {
        Ok(events) if plain => respond(events.into_inner(), Chat::plain(), state.shutdown.clone()),
        // The answer's headers (and `x-thread-id`) go at once; its body waits for what the
        // agent shows first (a proxy in between sees an answer, not a silent connection).
        Ok(events) => {
            let (stop, fallback, at, replica) = (
                state.shutdown.clone(),
                request(&thread, true),
                thread.clone(),
                owner.clone(),
            );
            let body = stream::once(async move {
                match opening(events.into_inner(), &at, &stop).await {
                    Opening::Answering(first, rest, chat) => stream::iter(first)
                        .chain(frames(*rest, chat, stop))
                        .boxed(),
                    Opening::Stopped => stream::iter(failure_frames(STOPPING)).boxed(),
                    // The agent failed before it said anything: the plain LLM answers (seed
                    // 004 §3.4).
                    Opening::FailedEarly(reason) => {
                        warn!(thread_id = %at, reason = %reason, "the chat agent failed before answering; falling back to the plain LLM");
                        match executor.execute(fallback).await {
                            Ok(events) => frames(events.into_inner(), Chat::plain(), stop).boxed(),
                            Err(status) => {
                                stream::iter(failure_frames(&replica.error(status).0.message))
                                    .boxed()
                            }
                        }
                    }
                }
            })
            .flatten();
            sse_response(body, false)
        }
        Err(status) => failure(&owner.error(status).0.message),
    };
    info!(thread_id = %thread, plain, "chat run streaming");
    with_thread(response, &thread)
}

/// Ask the chat agent (with its tools, under a policy mode) and stream the answer in seed
/// 004's framing.
#[utoipa::path(post, path = "/ai/agent/stream", tag = "chat", request_body = ChatBody,
    responses(
        (status = 200, description = "`text/event-stream` in the chat UI's framing: tokens as `data: <text>` (a token that would read as JSON as `data: {\"text\"}`), tool events as `data: {\"text\",\"event\",\"tool\"}`, failures as a `data: ⚠️ …` text, then `event: end` + `data: [DONE]`", content_type = "text/event-stream", body = crate::sse::SseEvent,
            headers(("x-thread-id" = String, description = "The conversation's id (a new one when the request had none); absent when `threadId` was invalid"))),
        (status = 400, description = "The body is not a JSON object, not `application/json`, or a known key (`prompt`, `threadId`, `mode`, `confirmations`) has the wrong JSON type", body = crate::error::ErrorBody),
        (status = 413, description = "`payload_too_large`: the body is larger than `--max-body-bytes`", body = crate::error::ErrorBody),
        (status = 429, description = "`resource_exhausted`: the API key has its most runs open (`--max-runs-per-key`); header `retry-after`", body = crate::error::ErrorBody)))]
#[instrument(level = "debug", skip_all)]
pub async fn agent_stream(
    State(state): State<AppState>,
    JsonBody(body): JsonBody<ChatBody>,
) -> Response {
    run(&state, body, false).await.into_response()
}

/// Stream the plain LLM's answer (no tools) in the same framing.
#[utoipa::path(post, path = "/ai/stream", tag = "chat", request_body = ChatBody,
    responses(
        (status = 200, description = "`text/event-stream` like `/ai/agent/stream`, without tool events", content_type = "text/event-stream", body = crate::sse::SseEvent,
            headers(("x-thread-id" = String, description = "As for `/ai/agent/stream`"))),
        (status = 400, description = "The body is not a JSON object, not `application/json`, or a known key (`prompt`, `threadId`, `mode`, `confirmations`) has the wrong JSON type", body = crate::error::ErrorBody),
        (status = 413, description = "`payload_too_large`: the body is larger than `--max-body-bytes`", body = crate::error::ErrorBody),
        (status = 429, description = "`resource_exhausted`: the API key has its most runs open (`--max-runs-per-key`); header `retry-after`", body = crate::error::ErrorBody)))]
#[instrument(level = "debug", skip_all)]
pub async fn plain_stream(
    State(state): State<AppState>,
    JsonBody(body): JsonBody<ChatBody>,
) -> Response {
    run(&state, body, true).await.into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_destination_names_a_provider_and_the_model_name_its_model() {
        assert_eq!(chat_model(None, None), None);
        assert_eq!(chat_model(None, Some(" main ")).as_deref(), Some("main"));
        assert_eq!(chat_model(Some("openai"), None).as_deref(), Some("@openai"));
        assert_eq!(
            chat_model(Some("openai"), Some("gpt-4.1")).as_deref(),
            Some("@openai/gpt-4.1")
        );
        assert_eq!(chat_model(Some(" "), Some("")), None);
    }

    #[tokio::test]
    async fn chat_text_keeps_its_line_breaks_on_the_wire() {
        // Found by the `sse_roundtrip` fuzz target: "a\r\nb" arrived as "a\n\nb".
        let frames = futures::stream::iter([text_frame("line one\r\nline two\r")]);
        let body = crate::sse::sse_response(frames, false).into_body();
        let wire = axum::body::to_bytes(body, usize::MAX)
            .await
            .unwrap_or_default();
        // Line ends are LF only: a lone CR too (a client splitting on LF would read it as text).
        assert_eq!(&wire[..], b"data: line one\ndata: line two\ndata: \n\n");
    }

    #[tokio::test]
    async fn a_text_that_reads_as_json_goes_as_an_object_with_its_text() {
        let token = |text: &str| {
            Ev::Token(v1::Token {
                text: text.to_owned(),
            })
        };
        let out = wire(vec![
            token("Es gibt"),
            token(" 5"),
            token(" Teams"),
            token("true"),
            token("\"quoted\""),
            token("[DONE]"),
            token("{\"text\": \"x\"}"),
        ])
        .await;
        assert_eq!(
            out,
            "data: Es gibt\n\ndata: {\"text\":\" 5\"}\n\ndata:  Teams\n\ndata: {\"text\":\"true\"}\n\n\
             data: {\"text\":\"\\\"quoted\\\"\"}\n\ndata: {\"text\":\"[DONE]\"}\n\n\
             data: {\"text\":\"{\\\"text\\\": \\\"x\\\"}\"}\n\n"
        );
    }

    /// The wire bytes of `events` through the chat dialect.
    async fn wire(events: Vec<Ev>) -> String {
        wire_of(Chat::default(), events).await
    }

    /// The wire bytes of `events` through `chat`.
    async fn wire_of(mut chat: Chat, events: Vec<Ev>) -> String {
        let frames: Vec<Event> = events
            .into_iter()
            .flat_map(|event| {
                chat.frames(&v1::RunEvent {
                    event: Some(event),
                    ..Default::default()
                })
            })
            .collect();
        let body = crate::sse::sse_response(futures::stream::iter(frames), false).into_body();
        let bytes = axum::body::to_bytes(body, usize::MAX)
            .await
            .unwrap_or_default();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    fn done(status: v1::RunStatus) -> Ev {
        Ev::Done(v1::Done {
            status: status.into(),
            usage: None,
        })
    }

    #[tokio::test]
    async fn the_plain_stream_shows_no_tool_events_even_for_a_call_the_model_made_anyway() {
        let start = Ev::ToolStart(v1::ToolStart {
            tool: "file_read".into(),
            call_id: "c".into(),
            arguments_json: "{}".into(),
        });
        let failed = Ev::ToolEnd(v1::ToolEnd {
            tool: "file_read".into(),
            call_id: "c".into(),
            output: "unknown tool `file_read`; this agent's tools are: none".into(),
            is_error: true,
            ..Default::default()
        });
        let token = Ev::Token(v1::Token {
            text: "Hello.".into(),
        });
        let events = vec![start, failed, token, done(v1::RunStatus::Completed)];
        assert_eq!(
            wire_of(Chat::plain(), events.clone()).await,
            "data: Hello.\n\nevent: end\ndata: [DONE]\n\n"
        );
        assert!(wire(events).await.contains("tool_start"));
    }

    #[tokio::test]
    async fn a_stopped_run_says_so_once_and_a_question_starts_its_own_paragraph() {
        let token = Ev::Token(v1::Token {
            text: "Working.".into(),
        });
        let question = Ev::Question(v1::Question {
            call_id: "q".into(),
            question: "Which site?".into(),
            items: Vec::new(),
        });
        assert_eq!(
            wire(vec![token.clone(), question, done(v1::RunStatus::Paused)]).await,
            "data: Working.\n\ndata: \ndata: \ndata: Which site?\n\nevent: end\ndata: [DONE]\n\n"
        );
        let stopping = Ev::Warning(v1::Warning {
            code: "EXECUTOR_STOPPING".into(),
            message: "the executor is shutting down".into(),
        });
        let text = wire(vec![
            token.clone(),
            stopping,
            done(v1::RunStatus::Cancelled),
        ])
        .await;
        assert_eq!(text.matches("⚠️").count(), 1, "{text}");
        assert!(
            text.contains("data: ⚠️ the executor is shutting down\n\n"),
            "{text}"
        );
        let text = wire(vec![token.clone(), done(v1::RunStatus::Cancelled)]).await;
        assert!(
            text.contains("data: ⚠️ the run was cancelled\n\n"),
            "{text}"
        );
        let text = wire(vec![done(v1::RunStatus::Completed)]).await;
        assert_eq!(text, "event: end\ndata: [DONE]\n\n");
        // An answer cut off at the token limit is shown, and said to be cut off.
        let truncated = Ev::Warning(v1::Warning {
            code: "OUTPUT_TRUNCATED".into(),
            message: "the answer is cut off".into(),
        });
        let other = Ev::Warning(v1::Warning {
            code: "MCP_SERVER_DISCONNECTED".into(),
            message: "not for the reader".into(),
        });
        let text = wire(vec![
            token.clone(),
            other,
            truncated,
            done(v1::RunStatus::Completed),
        ])
        .await;
        assert!(
            text.starts_with("data: Working.\n\n")
                && text.contains("data: ⚠️ the answer is cut off\n\n")
                && !text.contains("not for the reader"),
            "{text}"
        );
    }

    #[test]
    fn a_refused_write_keeps_its_confirmation_id_however_long_the_message() {
        // As the executor words it: the id twice.
        let message = format!(
            "confirmation_required: `m365_run_command m365 spo list add --title Tasks` {} \
             confirmation id c-0123456789ab; the user confirms with the words `confirm \
             c-0123456789ab`",
            "changes something; ".repeat(30)
        );
        let shown = tool_failure("m365_run_command", &message);
        assert!(
            shown.ends_with("… (confirmation id c-0123456789ab)"),
            "{shown}"
        );
        assert!(shown.chars().count() <= MAX_TOOL_ERROR, "{shown}");
        assert_eq!(shown.matches("c-0123456789ab").count(), 1, "{shown}");
        let long = tool_failure("file_read", &"x".repeat(1000));
        assert_eq!(long.chars().count(), MAX_TOOL_ERROR, "{long}");
        assert_eq!(
            tool_failure("git", "short c-0123456789ab"),
            "⚠️ git failed: short c-0123456789ab"
        );
    }

    #[test]
    fn a_failure_names_its_tool_once() {
        assert_eq!(
            tool_failure("file_read", "file_read failed: notes.txt: no such file"),
            "⚠️ file_read failed: notes.txt: no such file"
        );
        assert_eq!(
            tool_failure("git", "git: MCP server `x` is unavailable"),
            "⚠️ git failed: MCP server `x` is unavailable"
        );
        assert_eq!(
            tool_failure("git", "gitlab failed: no"),
            "⚠️ git failed: gitlab failed: no",
            "only the tool's own name is taken off"
        );
    }

    #[test]
    fn the_running_text_shows_every_command_a_call_carries() {
        // A tool runs whichever command argument it reads: none is left out.
        assert_eq!(
            running_detail(&serde_json::json!({"command": "m365 status", "cmd": "touch x"})),
            "m365 status · touch x"
        );
        assert_eq!(
            running_detail(&serde_json::json!({"args": ["log", "-3"]})),
            "log -3"
        );
        assert_eq!(
            running_detail(&serde_json::json!({"code": "\nimport os\nos.remove('x')"})),
            "import os"
        );
        assert_eq!(running_detail(&serde_json::json!({"n": 1})), "");
    }

    #[tokio::test]
    async fn a_tool_start_shows_a_long_command_line_to_its_hidden_end() {
        // A second command past the first 120 characters is still shown (review L3).
        let line = format!(
            "m365 spo list get --webUrl https://contoso.sharepoint.com/sites/{} ; m365 spo site remove",
            "a".repeat(100)
        );
        let start = Ev::ToolStart(v1::ToolStart {
            tool: "m365_run_command".into(),
            call_id: "c".into(),
            arguments_json: serde_json::json!({ "command": line }).to_string(),
        });
        let shown = wire(vec![start]).await;
        assert!(shown.contains("m365 spo site remove"), "{shown}");
        let start = Ev::ToolStart(v1::ToolStart {
            tool: "run".into(),
            call_id: "c".into(),
            arguments_json: serde_json::json!({ "command": "x".repeat(1000) }).to_string(),
        });
        let shown = wire(vec![start]).await;
        assert!(
            shown.contains(&format!("{}…", "x".repeat(MAX_TOOL_START))),
            "{shown}"
        );
        assert!(
            !shown.contains(&"x".repeat(MAX_TOOL_START + 1)),
            "cut: {shown}"
        );
    }

    #[test]
    fn short_texts_are_one_line() {
        assert_eq!(short("a  b\nc", 10), "a b c");
        assert_eq!(short("abcdef", 3), "abc…");
    }

    #[test]
    fn the_rate_limit_counts_per_thread_in_a_sliding_minute() {
        let limit = RateLimit::new(2);
        let t0 = std::time::Instant::now();
        assert!(limit.admit("a", t0));
        assert!(limit.admit("a", t0));
        assert!(!limit.admit("a", t0 + std::time::Duration::from_secs(30)));
        assert!(limit.admit("b", t0), "another thread has its own count");
        assert!(limit.admit("a", t0 + std::time::Duration::from_secs(61)));
    }

    #[test]
    fn a_prompt_grants_the_ids_it_confirms_in_words() {
        assert_eq!(
            confirmations_in("Yes, confirm c-0123456789ab please; CONFIRMED C-ABCDEF012345."),
            ["c-0123456789ab", "c-abcdef012345"]
        );
        assert!(
            confirmations_in("c-0123456789ab").is_empty(),
            "only after `confirm`"
        );
        assert!(confirmations_in("confirm c-123").is_empty());
    }
}
