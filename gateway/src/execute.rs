//! Execution routes over the executor's gRPC API (`taskforce.v1.Executor`): run a mission to
//! its end (`POST /api/v1/execute`), stream its events as SSE (`POST /api/v1/execute/stream`),
//! answer a paused session's question (`POST /api/v1/sessions/{session_id}/answer`, SSE),
//! cancel a live run or a waiting question (`POST /api/v1/sessions/{session_id}/cancel`) and
//! read a session's todo plan (`GET /api/v1/sessions/{session_id}/plan`).
//!
//! Errors before a stream starts (unknown agent, empty mission) are ordinary JSON error
//! responses. Once a stream runs, every `RunEvent` is one SSE event named after its type, with
//! the event as JSON ([`crate::events`]); the stream ends after the top agent's `done`. A client
//! that disconnects drops the gRPC stream, which cancels the run in the executor.

use std::collections::HashMap;

use axum::{Json, extract::State, response::Response};
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use taskforce_proto::{
    error::ApiError,
    v1::{self, run_event::Event as Ev},
};
use tracing::{error, instrument};
use utoipa::ToSchema;

use crate::{
    error::ErrorBody,
    error::RestError,
    events::{PlanJson, QuestionItemJson, plan_json, question_items},
    extract::{JsonBody, NoBody, NoQuery, QueryParams, SessionId},
    state::AppState,
};

/// Body of `POST /api/v1/execute` and `POST /api/v1/execute/stream`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"mission": "Extract the totals of invoice 42", "agent_id": "invoice-extractor"}))]
pub struct ExecuteBody {
    /// What the agent should do. Must not be empty; at most 256 KiB (of UTF-8).
    pub mission: String,
    /// A registry agent (custom or profile) to run; wins over `profile`. Unknown → 404.
    #[serde(default)]
    pub agent_id: Option<String>,
    /// A profile agent to run when `agent_id` is not set; with `agent_id`, the profile whose
    /// `llm.default_model` a new session runs on when neither `model` nor the agent names one.
    #[serde(default)]
    pub profile: Option<String>,
    /// Continue this session instead of starting a new one; with neither `agent_id` nor
    /// `profile`, with the session's own agent (an id not in use yet then is a 400).
    #[serde(default)]
    pub session_id: Option<String>,
    /// Accepted so that existing `/execute` callers keep working, and ignored:
    /// every run is a lean ReAct agent, whatever it says.
    #[serde(default)]
    pub lean: Option<bool>,
    /// A model alias from the executor's `llm_config.yaml`.
    #[serde(default)]
    pub model: Option<String>,
    /// The policy mode: `readOnly`, `default` or `safeWrite` (unset: the session's, else none).
    #[serde(default)]
    pub mode: Option<String>,
    /// Confirmation ids (`c-…`) of `safeWrite` calls the user approves, each for one run of
    /// that call.
    #[serde(default)]
    pub confirmations: Vec<String>,
    /// Plain LLM: run the agent's prompt and model without any tools.
    #[serde(default)]
    pub no_tools: Option<bool>,
}

/// Body of `POST /api/v1/sessions/{session_id}/answer`: `answer`, `answers`, or both; at least
/// one must be non-empty.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"answers": {"coder.python_version": "3.12", "devops.ci": {"provider": "github"}}}))]
pub struct AnswerBody {
    /// The user's answer to the pending question (`answer` and `answers` together at most
    /// 256 KiB).
    #[serde(default)]
    pub answer: String,
    /// Answers by question key, for a question with `items`. Strings are passed as they are;
    /// `null` (like an empty string) is no answer: the question's default, else it is asked
    /// again; any other JSON value is passed as its compact JSON text. A key given twice is
    /// refused.
    #[serde(default, deserialize_with = "taskforce_proto::mcp_config::unique_map")]
    #[schema(value_type = Option<HashMap<String, Value>>)]
    pub answers: std::collections::BTreeMap<String, Value>,
    /// When set, must be the pending question's call id.
    #[serde(default)]
    pub call_id: Option<String>,
    /// The policy mode of the continued run, as `/execute`'s (unset: the session's).
    #[serde(default)]
    pub mode: Option<String>,
    /// Confirmation ids (`c-…`) of `safeWrite` calls the user approves with this answer, each
    /// for one run of that call.
    #[serde(default)]
    pub confirmations: Vec<String>,
    /// The continued run calls no tools: the model answers in words.
    #[serde(default)]
    pub no_tools: Option<bool>,
}

/// The executor's `AnswerRequest` for `body`: one of `answer` and `answers` must be non-empty.
fn answer_request(session_id: String, body: AnswerBody) -> Result<v1::AnswerRequest, RestError> {
    let answers: HashMap<String, String> = body
        .answers
        .into_iter()
        .map(|(key, value)| {
            let text = match value {
                Value::String(s) => s,
                Value::Null => String::new(),
                other => other.to_string(),
            };
            (key, text)
        })
        .collect();
    if body.answer.trim().is_empty() && answers.is_empty() {
        return Err(ApiError::fields(vec![
            (
                "answer".to_owned(),
                "must not be empty when answers is not given".to_owned(),
            ),
            (
                "answers".to_owned(),
                "must not be empty when answer is not given".to_owned(),
            ),
        ])
        .into());
    }
    Ok(v1::AnswerRequest {
        session_id,
        answer: body.answer,
        call_id: body.call_id.filter(|s| !s.is_empty()),
        answers,
        mode: body.mode.filter(|s| !s.is_empty()),
        confirmations: body.confirmations,
        no_tools: body.no_tools,
    })
}

/// A question the run paused on.
#[derive(Debug, Serialize, ToSchema)]
pub struct QuestionJson {
    /// Its call id (pass it back with the answer).
    pub call_id: String,
    /// The question (for sub-agents' questions: all of them, one per line, with their keys).
    pub question: String,
    /// Sub-agents' questions, consolidated: answer them by `key` with `answers`. Empty for an
    /// ordinary question.
    pub items: Vec<QuestionItemJson>,
}

/// Token and step counts of a run.
#[derive(Debug, Serialize, ToSchema)]
pub struct UsageJson {
    /// Input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Model calls.
    pub steps: u32,
    /// Tool calls.
    pub tool_calls: u32,
}

/// The error a failed run reported.
#[derive(Debug, Serialize, ToSchema)]
pub struct RunErrorJson {
    /// Upper snake case, e.g. `STEP_BUDGET_EXCEEDED`, `LLM_ERROR`.
    pub code: String,
    /// What went wrong.
    pub message: String,
}

impl From<v1::Error> for RunErrorJson {
    fn from(e: v1::Error) -> Self {
        Self {
            code: e.code,
            message: e.message,
        }
    }
}

/// Answer of `POST /api/v1/execute`: how the run ended.
#[derive(Debug, Serialize, ToSchema)]
pub struct ExecuteResultJson {
    /// The session (pass it to `answer`, `cancel`, or a later `execute`).
    pub session_id: String,
    /// `completed`, `paused`, `failed` or `cancelled`.
    pub status: String,
    /// The final answer of a completed run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub final_answer: Option<String>,
    /// The question a paused run waits on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub question: Option<QuestionJson>,
    /// The error of a failed run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<RunErrorJson>,
    /// Problems the run worked around (e.g. an MCP server that could not be started).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<RunErrorJson>,
    /// How many events the run produced.
    pub events: u64,
    /// Token and step counts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<UsageJson>,
}

/// Answer of `POST /api/v1/sessions/{session_id}/cancel`.
#[derive(Debug, Serialize, ToSchema)]
pub struct CancelJson {
    /// False when the session had neither a live run nor a question waiting.
    pub cancelled: bool,
}

/// Answer of `GET /api/v1/sessions/{session_id}/plan`.
#[derive(Debug, Serialize, ToSchema)]
pub struct SessionPlanJson {
    /// The session.
    pub session_id: String,
    /// Its plan.
    #[serde(flatten)]
    pub plan: PlanJson,
}

/// Answer of `GET /api/v1/sessions/{session_id}`: where a session stands.
#[derive(Debug, Serialize, ToSchema)]
pub struct SessionJson {
    /// The session.
    pub session_id: String,
    /// The agent it runs.
    pub agent_id: String,
    /// `running`, `completed`, `paused`, `failed` or `cancelled`.
    pub status: String,
    /// The mission of the latest run.
    pub mission: String,
    /// The final answer of the latest completed run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub final_answer: Option<String>,
    /// The question a paused session waits on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub question: Option<QuestionJson>,
    /// The model alias it runs on (absent: the default).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// RFC 3339.
    pub created_at: String,
    /// RFC 3339.
    pub updated_at: String,
    /// Messages of its conversation.
    pub messages: usize,
    /// Events so far.
    pub events: u64,
    /// Its todo plan.
    pub plan: PlanJson,
    /// Why the latest run failed or was cancelled (`INTERRUPTED`: the executor stopped during
    /// it); absent when it completed, paused or runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<RunErrorJson>,
}

/// The REST error for an executor status: like the registry's, but naming the executor.
pub fn executor_error(status: tonic::Status) -> RestError {
    RestError::from_upstream(status, "executor")
}

/// [`executor_error`] for a status that broke the run of session `session_id` (empty: not
/// known yet): naming its executor when the session id does (several executors).
pub fn run_error(status: tonic::Status, session_id: &str) -> RestError {
    match taskforce_proto::ids::minted_owner(session_id) {
        Some(owner) => RestError::from_upstream(status, &format!("executor `{owner}`")),
        None => executor_error(status),
    }
}

/// The lower-case name of a run status.
pub fn status_name(status: i32) -> &'static str {
    match v1::RunStatus::try_from(status) {
        Ok(v1::RunStatus::Running) => "running",
        Ok(v1::RunStatus::Completed) => "completed",
        Ok(v1::RunStatus::Paused) => "paused",
        Ok(v1::RunStatus::Failed) => "failed",
        Ok(v1::RunStatus::Cancelled) => "cancelled",
        Ok(v1::RunStatus::Unspecified) | Err(_) => "unspecified",
    }
}

/// The JSON of a run's usage.
pub fn usage_json(u: &v1::Usage) -> UsageJson {
    UsageJson {
        input_tokens: u.input_tokens,
        output_tokens: u.output_tokens,
        steps: u.steps,
        tool_calls: u.tool_calls,
    }
}

fn execute_request(body: ExecuteBody) -> Result<v1::ExecuteRequest, RestError> {
    if body.mission.trim().is_empty() {
        return Err(ApiError::field("mission", "must not be empty").into());
    }
    let non_empty = |v: Option<String>| v.filter(|s| !s.is_empty());
    // Both ids are checked, also the `profile` that `agent_id` overrides: a malformed one is a
    // mistake to report, not to ignore.
    for (field, id) in [("agent_id", &body.agent_id), ("profile", &body.profile)] {
        if let Some(id) = id.as_deref().filter(|s| !s.is_empty())
            && let Err(e) = taskforce_proto::ids::validate_agent_id(id)
        {
            return Err(ApiError::field(field, e.to_string()).into());
        }
    }
    Ok(v1::ExecuteRequest {
        mission: body.mission,
        agent_id: non_empty(body.agent_id),
        profile: non_empty(body.profile),
        session_id: non_empty(body.session_id),
        model: non_empty(body.model),
        mode: non_empty(body.mode),
        confirmations: body.confirmations,
        no_tools: body.no_tools,
    })
}

/// Run a mission to its end and answer how it ended.
#[utoipa::path(post, path = "/api/v1/execute", tag = "execution", request_body = ExecuteBody,
    responses(
        (status = 200, description = "The run ended (completed, paused on a question, failed or cancelled)", body = ExecuteResultJson),
        (status = 400, description = "Invalid body (e.g. empty mission)", body = ErrorBody),
        (status = 413, description = "`payload_too_large`: the body is larger than `--max-body-bytes`", body = ErrorBody),
        (status = 404, description = "`not_found`: unknown agent or profile", body = ErrorBody),
        (status = 409, description = "`session_conflict`: the session has a live run or waits for an answer", body = ErrorBody),
        (status = 429, description = "`resource_exhausted`: the executor runs its most runs at once (`--max-live-runs`), or the API key has its most runs open (`--max-runs-per-key`); header `retry-after`", body = ErrorBody),
        (status = 503, description = "`unavailable`: the executor is down, or the registry it needs; or the connection to it was lost during the run (the body then carries the run's `session_id`)", body = ErrorBody)))]
#[instrument(level = "debug", skip_all, fields(agent_id = ?body.agent_id))]
pub async fn execute(
    State(state): State<AppState>,
    QueryParams(NoQuery {}): QueryParams<NoQuery>,
    JsonBody(body): JsonBody<ExecuteBody>,
) -> Result<Json<ExecuteResultJson>, RestError> {
    let mut events = state.executors.execute(execute_request(body)?).await?;
    let mut out = ExecuteResultJson {
        session_id: String::new(),
        status: "failed".to_owned(),
        final_answer: None,
        question: None,
        error: None,
        warnings: Vec::new(),
        events: 0,
        usage: None,
    };
    let mut done = false;
    // The gateway stopping gives the run the streams' grace, then answers with what it knows
    // (the session, to continue it later) instead of dropping the connection.
    let mut stopping = crate::sse::stopping(&state.shutdown);
    loop {
        let item = tokio::select! {
            item = events.next() => match item {
                Some(item) => item,
                None => break,
            },
            () = &mut stopping => {
                let mut e = RestError::new(
                    taskforce_proto::error::ErrorKind::Unavailable,
                    "the gateway is shutting down; the run was stopped (continue its session)",
                );
                if !out.session_id.is_empty() {
                    e.0.extra
                        .push(("session_id".to_owned(), out.session_id.clone().into()));
                }
                return Err(e);
            }
        };
        let ev = item.map_err(|status| {
            let mut e = run_error(status, &out.session_id);
            // The run started: the client needs its session to look at what is left of it.
            if !out.session_id.is_empty() {
                e.0.extra
                    .push(("session_id".to_owned(), out.session_id.clone().into()));
            }
            e
        })?;
        out.events += 1;
        if out.session_id.is_empty() {
            out.session_id.clone_from(&ev.session_id);
        }
        // The run's outcome is the top agent's (`frame_id` empty). A sub-agent's answer or
        // error goes to its orchestrator, and its questions reach the client consolidated in
        // the top agent's question (`items`).
        let top = ev.frame_id.is_empty();
        match ev.event {
            Some(Ev::FinalAnswer(e)) if top => out.final_answer = Some(e.text),
            Some(Ev::Question(e)) if top => {
                out.question = Some(QuestionJson {
                    call_id: e.call_id,
                    question: e.question,
                    items: question_items(&e.items),
                });
            }
            Some(Ev::Error(e)) if top => out.error = Some(e.into()),
            Some(Ev::Warning(e)) => out.warnings.push(RunErrorJson {
                code: e.code,
                message: e.message,
            }),
            Some(Ev::Done(e)) if top => {
                out.status = status_name(e.status).to_owned();
                out.usage = e.usage.as_ref().map(usage_json);
                done = true;
                crate::sse::drain(events).await;
                break;
            }
            _ => {}
        }
    }
    if !done {
        error!(session_id = %out.session_id, "executor stream ended without a done event");
        return Err(RestError::internal());
    }
    Ok(Json(out))
}

/// Run a mission and stream its events (Server-Sent Events).
#[utoipa::path(post, path = "/api/v1/execute/stream", tag = "execution", request_body = ExecuteBody,
    responses(
        (status = 200, description = "`text/event-stream`: one event per run event (`event: run_started|token|tool_start|tool_end|tool_error|warning|question|final_answer|error|done|delegation_start|delegation_end|patch_applied|patch_rejected|plan_updated`, `data:` the event as JSON with the envelope `type`, `session_id`, `seq`, `agent_path`, `frame_id`, `time_unix_ms`), ending after the top agent's `done` (`frame_id` empty); a sub-agent's events, its `delegation_start`/`delegation_end` included, carry its `agent_path` and `frame_id`", content_type = "text/event-stream", body = crate::sse::SseEvent),
        (status = 400, description = "Invalid body (e.g. empty mission)", body = ErrorBody),
        (status = 413, description = "`payload_too_large`: the body is larger than `--max-body-bytes`", body = ErrorBody),
        (status = 404, description = "`not_found`: unknown agent or profile", body = ErrorBody),
        (status = 409, description = "`session_conflict`: the session has a live run or waits for an answer", body = ErrorBody),
        (status = 429, description = "`resource_exhausted`: the executor runs its most runs at once (`--max-live-runs`), or the API key has its most runs open (`--max-runs-per-key`); header `retry-after`", body = ErrorBody),
        (status = 503, description = "`unavailable`: the executor is down", body = ErrorBody)))]
#[instrument(level = "debug", skip_all, fields(agent_id = ?body.agent_id))]
pub async fn execute_stream(
    State(state): State<AppState>,
    QueryParams(NoQuery {}): QueryParams<NoQuery>,
    JsonBody(body): JsonBody<ExecuteBody>,
) -> Result<Response, RestError> {
    let events = state.executors.execute(execute_request(body)?).await?;
    Ok(crate::sse::respond(
        events,
        crate::sse::Native::default(),
        state.shutdown.clone(),
    ))
}

/// Answer a paused session's question and stream the continued run (Server-Sent Events).
#[utoipa::path(post, path = "/api/v1/sessions/{session_id}/answer", tag = "execution",
    request_body = AnswerBody,
    params(("session_id" = String, Path, description = "The session")),
    responses(
        (status = 200, description = "`text/event-stream` like `/api/v1/execute/stream`", content_type = "text/event-stream", body = crate::sse::SseEvent),
        (status = 400, description = "Invalid body (e.g. neither `answer` nor `answers`)", body = ErrorBody),
        (status = 413, description = "`payload_too_large`: the body is larger than `--max-body-bytes`", body = ErrorBody),
        (status = 404, description = "`not_found`: unknown session", body = ErrorBody),
        (status = 409, description = "`session_conflict`: no question waiting, another question (`call_id`), or a live run", body = ErrorBody),
        (status = 429, description = "`resource_exhausted`: the executor runs its most runs at once, or the API key has its most runs open; header `retry-after`", body = ErrorBody),
        (status = 503, description = "`unavailable`: the executor is down", body = ErrorBody)))]
#[instrument(level = "debug", skip_all, fields(session_id = %session_id))]
pub async fn answer(
    State(state): State<AppState>,
    SessionId(session_id): SessionId,
    QueryParams(NoQuery {}): QueryParams<NoQuery>,
    JsonBody(body): JsonBody<AnswerBody>,
) -> Result<Response, RestError> {
    let req = answer_request(session_id, body)?;
    let events = state
        .executors
        .locate(&req.session_id)
        .await?
        .call(|mut client| async move { client.answer(req).await })
        .await?;
    Ok(crate::sse::respond(
        events,
        crate::sse::Native::default(),
        state.shutdown.clone(),
    ))
}

/// Cancel the live run of a session, or the question a paused session waits on (it is then
/// `cancelled`).
#[utoipa::path(post, path = "/api/v1/sessions/{session_id}/cancel", tag = "execution",
    params(("session_id" = String, Path, description = "The session")),
    responses(
        (status = 200, description = "`cancelled` is false when no run was live and no question waited", body = CancelJson),
        (status = 400, description = "Invalid session id", body = ErrorBody),
        (status = 404, description = "`not_found`: unknown session", body = ErrorBody),
        (status = 503, description = "`unavailable`: the executor is down", body = ErrorBody),
        (status = 504, description = "`timeout`", body = ErrorBody)))]
#[instrument(level = "debug", skip_all, fields(session_id = %session_id))]
pub async fn cancel(
    State(state): State<AppState>,
    SessionId(session_id): SessionId,
    QueryParams(NoQuery {}): QueryParams<NoQuery>,
) -> Result<Json<CancelJson>, RestError> {
    let owner = state.executors.locate(&session_id).await?;
    let req = state.request(v1::CancelRequest { session_id });
    let res = owner
        .call(|mut client| async move { client.cancel(req).await })
        .await?;
    Ok(Json(CancelJson {
        cancelled: res.cancelled,
    }))
}

/// Delete a session without a live run (cancel that first): its conversation, question, plan
/// and sub-agents' state. Its id, used again, starts a new session.
#[utoipa::path(delete, path = "/api/v1/sessions/{session_id}", tag = "execution",
    params(("session_id" = String, Path, description = "The session")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 400, description = "Invalid session id", body = ErrorBody),
        (status = 404, description = "`not_found`: unknown session", body = ErrorBody),
        (status = 409, description = "`session_conflict`: a live run (cancel it first), or an answer or a cancel being applied", body = ErrorBody),
        (status = 503, description = "`unavailable`: the executor is down", body = ErrorBody),
        (status = 504, description = "`timeout`", body = ErrorBody)))]
#[instrument(level = "debug", skip_all, fields(session_id = %session_id))]
pub async fn delete_session(
    State(state): State<AppState>,
    SessionId(session_id): SessionId,
    QueryParams(NoQuery {}): QueryParams<NoQuery>,
    headers: axum::http::HeaderMap,
    NoBody: NoBody,
) -> Result<axum::http::StatusCode, RestError> {
    // A condition this delete could not keep is refused, not ignored: a session has no version.
    if headers.contains_key(axum::http::header::IF_MATCH)
        || headers.contains_key(axum::http::header::IF_NONE_MATCH)
    {
        return Err(RestError::new(
            taskforce_proto::error::ErrorKind::InvalidArgument,
            "a session has no version to check: delete it without If-Match or If-None-Match",
        ));
    }
    let owner = state.executors.locate(&session_id).await?;
    let req = state.request(v1::DeleteSessionRequest { session_id });
    owner
        .call(|mut client| async move { client.delete_session(req).await })
        .await?;
    Ok(axum::http::StatusCode::NO_CONTENT)
}

/// Where a session stands: status, mission, final answer or pending question, plan.
#[utoipa::path(get, path = "/api/v1/sessions/{session_id}", tag = "execution",
    params(("session_id" = String, Path, description = "The session")),
    responses(
        (status = 200, description = "The session", body = SessionJson),
        (status = 400, description = "Invalid session id", body = ErrorBody),
        (status = 404, description = "`not_found`: unknown session", body = ErrorBody),
        (status = 503, description = "`unavailable`: the executor is down", body = ErrorBody),
        (status = 504, description = "`timeout`", body = ErrorBody)))]
#[instrument(level = "debug", skip_all, fields(session_id = %session_id))]
pub async fn get_session(
    State(state): State<AppState>,
    SessionId(session_id): SessionId,
    QueryParams(NoQuery {}): QueryParams<NoQuery>,
) -> Result<Json<SessionJson>, RestError> {
    let owner = state.executors.locate(&session_id).await?;
    let req = state.request(v1::GetSessionRequest { session_id });
    let s = owner
        .call(|mut client| async move { client.get_session(req).await })
        .await?;
    Ok(Json(session_json(s)))
}

/// The JSON of a stored session (`GET /api/v1/sessions/{id}`).
pub fn session_json(s: v1::Session) -> SessionJson {
    let non_empty = |v: String| (!v.is_empty()).then_some(v);
    SessionJson {
        status: status_name(s.status).to_owned(),
        question: s.pending_question.map(|q| QuestionJson {
            call_id: q.call_id,
            question: q.question,
            items: question_items(&q.items),
        }),
        final_answer: non_empty(s.final_answer),
        model: non_empty(s.model),
        messages: s.messages.len(),
        events: s.next_seq,
        plan: plan_json(&s.plan.unwrap_or_default()),
        error: s.error.map(RunErrorJson::from),
        session_id: s.session_id,
        agent_id: s.agent_id,
        mission: s.mission,
        created_at: s.created_at,
        updated_at: s.updated_at,
    }
}

/// A session's todo plan: its tasks (owners, dependencies, status), version and Markdown view.
#[utoipa::path(get, path = "/api/v1/sessions/{session_id}/plan", tag = "execution",
    params(("session_id" = String, Path, description = "The session")),
    responses(
        (status = 200, description = "The plan (version 1 and no tasks until an orchestrator or a delegation adds one)", body = SessionPlanJson),
        (status = 400, description = "Invalid session id", body = ErrorBody),
        (status = 404, description = "`not_found`: unknown session", body = ErrorBody),
        (status = 503, description = "`unavailable`: the executor is down", body = ErrorBody),
        (status = 504, description = "`timeout`", body = ErrorBody)))]
#[instrument(level = "debug", skip_all, fields(session_id = %session_id))]
pub async fn get_plan(
    State(state): State<AppState>,
    SessionId(session_id): SessionId,
    QueryParams(NoQuery {}): QueryParams<NoQuery>,
) -> Result<Json<SessionPlanJson>, RestError> {
    let owner = state.executors.locate(&session_id).await?;
    let req = state.request(v1::GetPlanRequest {
        session_id: session_id.clone(),
    });
    let plan = owner
        .call(|mut client| async move { client.get_plan(req).await })
        .await?;
    Ok(Json(SessionPlanJson {
        session_id,
        plan: plan_json(&plan),
    }))
}
