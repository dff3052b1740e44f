//! `Execute` and `Answer`: validate, load or create the session, claim it, start the driver.

use std::sync::Arc;

use taskforce_proto::v1;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tracing::{Instrument, debug, info};

use super::{Runner, StreamItem, answers, driver::Run, events};
use crate::{
    error::ExecutorError,
    llm::Message,
    registry::Target,
    session::{Session, Status},
};

/// Longest accepted mission or answer, in bytes.
const MAX_TEXT: usize = taskforce_proto::MAX_MISSION_BYTES;

impl Runner {
    /// Starts a run for `request` and returns its event stream.
    pub async fn execute(
        self: &Arc<Self>,
        request: v1::ExecuteRequest,
    ) -> Result<ReceiverStream<StreamItem>, ExecutorError> {
        let mission = request.mission.trim().to_owned();
        if mission.is_empty() {
            return Err(ExecutorError::invalid("mission", "must not be empty"));
        }
        if mission.len() > MAX_TEXT {
            return Err(ExecutorError::invalid("mission", "is longer than 256 KiB"));
        }
        let session_id = non_empty(request.session_id);
        if let Some(id) = &session_id {
            check_session_id(id)?;
        }
        // The session's own agent, when the request named none.
        let mut own_agent = None;
        // Agent ids are taken as given (not trimmed: the registry, REST and the CLI refuse
        // `" id "`), and both are checked, also the `profile` that `agent_id` overrides: a
        // malformed one is a mistake to report, not to ignore (as REST does).
        let agent_id = request.agent_id.filter(|id| !id.is_empty());
        let profile = request.profile.filter(|id| !id.is_empty());
        for (field, id) in [("agent_id", &agent_id), ("profile", &profile)] {
            if let Some(id) = id {
                check_id(field, id)?;
            }
        }
        // Seed 000: with `agent_id`, a `profile` still gives the run its LLM settings (its
        // `default_model`), while prompt and tools come from the agent.
        let llm_profile = agent_id.as_ref().and(profile.clone());
        let target = match (agent_id, profile) {
            (Some(id), _) => Target::Agent(id),
            (None, Some(profile)) => Target::Profile(profile),
            // A session goes on with its own agent.
            (None, None) => match &session_id {
                Some(id) => match self.store.get(id)? {
                    Some(stored) if stored.status == Status::Paused => {
                        return Err(awaiting_answer(id));
                    }
                    Some(stored) => {
                        own_agent = Some(stored.agent_id.clone());
                        Target::Agent(stored.agent_id)
                    }
                    None => {
                        return Err(ExecutorError::invalid(
                            "agent_id",
                            format!(
                                "session `{id}` does not exist (never started on this executor, \
                                 or deleted after it ended: see --session-ttl-hours and \
                                 --max-stored-sessions), so it has no agent to go on with; set \
                                 `agent_id` (a registry agent) or `profile` (a profile agent) to \
                                 start it"
                            ),
                        ));
                    }
                },
                None => {
                    return Err(ExecutorError::invalid(
                        "agent_id",
                        "set `agent_id` (a registry agent) or `profile` (a profile agent), or \
                         `session_id` to continue a session with its agent",
                    ));
                }
            },
        };
        // Time-ordered: a new session's key lands next to the last ones in sled, whose pages
        // are in memory, instead of on a random page to be read from disk.
        let id = session_id.clone().unwrap_or_else(|| {
            taskforce_proto::ids::mint_session_id(self.budgets.instance.as_deref())
        });
        let model_name = non_empty(request.model);
        let model_named = model_name.is_some();
        if let Some(model) = &model_name {
            taskforce_proto::ids::check_model(model)
                .map_err(|e| ExecutorError::invalid("model", e))?;
        }
        let mode = mode_of(request.mode)?;
        let mut confirmations = confirmations(request.confirmations)?;
        let no_tools = request.no_tools.unwrap_or(false);
        let agent = match (self.registry.resolve(&target).await, &own_agent) {
            (Ok(agent), _) => agent,
            (Err(ExecutorError::NotFound(why)), Some(agent)) => {
                return Err(ExecutorError::FailedPrecondition(format!(
                    "session `{id}` belongs to agent `{agent}`, which is gone ({why}); start a \
                     new session"
                )));
            }
            (Err(e), _) => return Err(e),
        };
        // Claimed before it is read, so two requests cannot both continue one stored state.
        let claim = self.claim(&id)?;
        let existing = match &session_id {
            Some(id) => self.store.get(id)?,
            None => None,
        };
        // An id minted for another executor starts nothing here: a gateway whose --executor-url
        // gives this executor's address under another's name would split that executor's
        // sessions over two (a paused one read as missing here, a second one under its id).
        if existing.is_none()
            && let Some(id) = &session_id
            && let Some(owner) = taskforce_proto::ids::minted_owner(id)
            && let Some(me) = self.budgets.instance.as_deref()
            && owner != me
        {
            return Err(ExecutorError::FailedPrecondition(format!(
                "session `{id}` was minted for executor `{owner}`, and this executor is `{me}`: \
                 the gateway's --executor-url gives this executor's address under the name \
                 `{owner}` (each NAME must be that executor's --instance)"
            )));
        }
        let mut session = match existing {
            Some(mut session) => {
                if session.agent_id != agent.agent_id {
                    return Err(ExecutorError::FailedPrecondition(format!(
                        "session `{}` belongs to agent `{}`",
                        session.id, session.agent_id
                    )));
                }
                if session.status == Status::Paused {
                    return Err(awaiting_answer(&session.id));
                }
                confirmations = grant(&mut session, mode, &confirmations)?;
                // A call the last run left unanswered (a crash mid-tool, a session stored by an
                // older version after a cancel) gets its answer first: a model API refuses a
                // conversation with an open call, so the session could never go on.
                super::agent_loop::close_open_calls(
                    &mut session.messages,
                    "the run ended before this call was answered",
                );
                // A retry of a run that failed before the model answered (the chat's fallback
                // to the plain LLM, a client trying again) asks the same once, not twice.
                let retry = session.status == Status::Failed
                    && matches!(session.messages.last(), Some(Message::User { content }) if *content == mission);
                if !retry {
                    session.messages.push(Message::user(mission.clone()));
                }
                forget_oldest(&mut session.messages, self.budgets.memory_messages);
                session.mission = mission;
                // The previous turn's answer is not this mission's (until this run gives one).
                session.final_answer.clear();
                session.model = model_name.or(session.model);
                session
            }
            // Deleted since it was read for its agent: the request named no agent to start a
            // new session with.
            None if own_agent.is_some() => {
                return Err(ExecutorError::NotFound(format!(
                    "session `{id}` was deleted while this run started"
                )));
            }
            None => {
                if let Some(id) = confirmations.iter().next() {
                    return Err(ExecutorError::invalid(
                        "confirmations",
                        format!("`{id}` is not a confirmation this session asked for"),
                    ));
                }
                let mut session = Session::new(id, agent.agent_id.clone(), model_name, mission);
                session.mode = mode.map(|m| m.as_str().to_owned());
                session.messages = vec![
                    Message::system(agent.system_prompt.clone()),
                    Message::user(session.mission.clone()),
                ];
                session
            }
        };
        // A profile given with the agent gives the session its model when neither a request
        // nor the agent names one (only then looked up: a profile that is none is a 404, as
        // when it is run itself); kept with the session, as a request's model is, for its
        // answers and later turns.
        let mut from_profile = false;
        if let Some(profile) = llm_profile
            && session.model.is_none()
            && agent.model.is_none()
        {
            from_profile = true;
            session.model = self
                .registry
                .resolve(&Target::Profile(profile))
                .await?
                .model
                .clone();
        }
        // The request's model, else the session's (a continued session keeps the one it was
        // given, as its answers do), else the one the agent's definition names, else the
        // default.
        let model = self.session_model(
            &session,
            &agent,
            !model_named && !from_profile,
            "name a `model` to go on with another",
        )?;
        // Debug only: the "run ended" line carries all of it (and the outcome), one line per run.
        debug!(session_id = %session.id, agent_id = %agent.agent_id, model = %model.model, "run starting");
        let with = Continuation {
            confirmations,
            no_tools,
            ..Continuation::default()
        };
        self.launch(claim, session, agent, model, with).await
    }

    /// Answers the pending question of a paused session and returns the continued run's
    /// event stream.
    pub async fn answer(
        self: &Arc<Self>,
        mut request: v1::AnswerRequest,
    ) -> Result<ReceiverStream<StreamItem>, ExecutorError> {
        request.session_id = session_id_of(&request.session_id)?;
        // Blank answers by key count as not given (the question's default, else it is asked
        // again), as the seed wants for missing fields; a request with neither says nothing.
        if request.answer.trim().is_empty() && request.answers.is_empty() {
            return Err(ExecutorError::invalid(
                "answer",
                "must not be empty (or give `answers` by question key)",
            ));
        }
        let mode = mode_of(request.mode)?;
        let mut confirmations = confirmations(request.confirmations)?;
        let no_tools = request.no_tools.unwrap_or(false);
        let size = request.answer.len()
            + request
                .answers
                .iter()
                .map(|(k, v)| k.len() + v.len())
                .sum::<usize>();
        if size > MAX_TEXT {
            return Err(ExecutorError::invalid("answer", "is longer than 256 KiB"));
        }
        // Claimed before it is read: of two answers to one question, one wins.
        let claim = match self.claim(&request.session_id) {
            Ok(claim) => claim,
            // An ended session has no question, whoever holds it for a moment (the sweep that
            // has just cancelled an unanswered one): say that, not "in use, try again".
            Err(in_use) => match self.store.get(&request.session_id)? {
                Some(s) if !matches!(s.status, Status::Paused | Status::Running) => {
                    return Err(no_question(&s));
                }
                _ => return Err(in_use),
            },
        };
        let mut session = self.store.get(&request.session_id)?.ok_or_else(|| {
            ExecutorError::NotFound(format!("session `{}` does not exist", request.session_id))
        })?;
        let (Status::Paused, Some(pending)) = (session.status, session.pending.clone()) else {
            return Err(no_question(&session));
        };
        if let Some(call_id) = non_empty(request.call_id)
            && call_id != pending.call_id
        {
            return Err(ExecutorError::FailedPrecondition(format!(
                "the pending question is call `{}`, not `{call_id}`",
                pending.call_id
            )));
        }
        confirmations = grant(&mut session, mode, &confirmations)?;
        let agent = match self
            .registry
            .resolve(&Target::Agent(session.agent_id.clone()))
            .await
        {
            // The session exists: what is gone is its agent, and only a cancel ends it now.
            Err(ExecutorError::NotFound(why)) => {
                return Err(ExecutorError::FailedPrecondition(format!(
                    "{why}, so session `{}` cannot go on; cancel it to end its question",
                    session.id
                )));
            }
            other => other?,
        };
        let model = self.session_model(
            &session,
            &agent,
            true,
            "configure it again to answer, or cancel the session",
        )?;
        if !pending.is_plain() {
            // Questions of sub-agents: answers by key, applied by the run before its next
            // model call.
            let mut answers: serde_json::Map<String, serde_json::Value> = request
                .answers
                .into_iter()
                .map(|(k, v)| (k, serde_json::Value::String(v)))
                .collect();
            if !request.answer.trim().is_empty() {
                let parsed = answers::parse_reply(&pending, &request.answer)
                    .map_err(|e| ExecutorError::invalid("answer", e))?;
                answers.extend(parsed);
            }
            let split = answers::split(&pending, &answers)
                .map_err(|e| ExecutorError::invalid("answers", e))?;
            self.check_askers(&agent, &pending, &split).await?;
            info!(session_id = %session.id, agent_id = %agent.agent_id, resumes = split.calls.len(), "run resuming with answers for sub-agents");
            // Kept (and stored with the running session) until the resumed sub-agents' results
            // are: a run stopped before then goes back to this question.
            session.answering = session.pending.take();
            let with = Continuation {
                resume: Some(split),
                confirmations,
                no_tools,
                ..Continuation::default()
            };
            return self.launch(claim, session, agent, model, with).await;
        }
        // An ordinary question shows no items: it takes `answer`. Its own key (the asker's)
        // is still taken in `answers` (sessions stored before keys existed have none: then any
        // one key will do).
        if let Some(unknown) = request
            .answers
            .keys()
            .find(|k| !pending.asks.is_empty() && !pending.asks.iter().any(|a| &a.key == *k))
        {
            return Err(ExecutorError::invalid(
                "answers",
                format!(
                    "unknown answer key `{unknown}`: the question waiting is an ordinary one \
                     (no items); give the answer as the `answer` text, not by key"
                ),
            ));
        }
        let answer = match request.answers.into_values().find(|v| !v.trim().is_empty()) {
            Some(answer) if request.answer.trim().is_empty() => answer,
            _ => request.answer,
        };
        if answer.trim().is_empty() {
            return Err(ExecutorError::invalid(
                "answers",
                "every answer is empty: an ordinary question needs an answer with text",
            ));
        }
        session.pending = None;
        session.messages.push(Message::Tool {
            call_id: pending.call_id.clone(),
            name: pending.tool.clone(),
            content: answer.clone(),
            is_error: false,
        });
        info!(session_id = %session.id, agent_id = %agent.agent_id, "run resuming with an answer");
        let answered = events::answered(pending.call_id, pending.tool, answer);
        let with = Continuation {
            answered: Some(answered),
            confirmations,
            no_tools,
            ..Continuation::default()
        };
        self.launch(claim, session, agent, model, with).await
    }

    /// The model `session` runs on: its own (the request's, when it named one), else the one
    /// `agent`'s definition names, else the default. One that no longer resolves and was the
    /// session's own (`stored`: not named by this request) is said so, with `what_now`: a
    /// configuration changed since.
    fn session_model(
        &self,
        session: &Session,
        agent: &crate::agent::AgentDef,
        stored: bool,
        what_now: &str,
    ) -> Result<crate::llm::ResolvedModel, ExecutorError> {
        self.router
            .resolve(session.model.as_deref().or(agent.model.as_deref()))
            .map_err(|e| match session.model.as_deref().filter(|_| stored) {
                Some(model) => ExecutorError::invalid(
                    "model",
                    format!(
                        "session `{}` runs on model `{model}`, which this executor no longer \
                         has ({e}); {what_now}",
                        session.id
                    ),
                ),
                None => ExecutorError::invalid("model", e.to_string()),
            })
    }

    /// Enters `session_id` in the live-run table, or says it is in use (a live run, or an
    /// answer or cancel being applied).
    pub(super) fn claim(self: &Arc<Self>, session_id: &str) -> Result<Claim, ExecutorError> {
        let cancel = self.shutdown.child_token();
        let mut live = self
            .live
            .lock()
            .map_err(|_| ExecutorError::Config("live-run table poisoned".into()))?;
        if live.contains_key(session_id) {
            // A run, or an answer or a cancel being applied (each holds the session briefly).
            return Err(ExecutorError::FailedPrecondition(format!(
                "session `{session_id}` is in use: a run, an answer or a cancel is going on; \
                 read the session to see which, and try again when it has ended"
            )));
        }
        live.insert(
            session_id.to_owned(),
            super::Live {
                cancel: cancel.clone(),
                running: false,
                cancel_answered: false,
            },
        );
        Ok(Claim {
            runner: Arc::clone(self),
            session_id: session_id.to_owned(),
            cancel,
            taken: false,
        })
    }

    /// Stores the claimed session as running and spawns the driver (which frees the claim when
    /// the run ends).
    ///
    /// The session and its first block of event numbers are on disk before any event is sent:
    /// an executor that dies from here on leaves a session the next start marks failed and
    /// continues past every `seq` already sent, never one its clients cannot look up.
    async fn launch(
        self: &Arc<Self>,
        claim: Claim,
        mut session: Session,
        agent: Arc<crate::agent::AgentDef>,
        model: crate::llm::ResolvedModel,
        with: Continuation,
    ) -> Result<ReceiverStream<StreamItem>, ExecutorError> {
        // Refused before anything is stored: the session stays as it was.
        if self.shutdown.is_cancelled() {
            return Err(ExecutorError::Stopping);
        }
        self.store.writable()?;
        let slot = Arc::clone(&self.run_slots)
            .try_acquire_owned()
            .map_err(|_| {
                ExecutorError::Busy(format!(
                    "the executor is running its most runs at once ({}); retry shortly",
                    self.budgets.max_live_runs
                ))
            })?;
        session.status = Status::Running;
        session.error = None;
        session.pending = None;
        // From the write on, the start finishes on a task of its own: the caller (a gRPC handler
        // that its client, e.g. a gateway giving up on a slow start, may drop at any `.await`)
        // only waits for it. Dropped mid-write, it would leave the session stored as running with
        // no run, and a stalled store's fault unrecorded; here the write ends either way, and a
        // run whose caller left finds its receiver gone and is cancelled like any other.
        let rpc = tracing::Span::current();
        self.tasks
            .spawn(
                Arc::clone(self)
                    .begin(claim, session, agent, model, with, slot)
                    .instrument(rpc),
            )
            .await?
    }

    /// The start of a run from its session's write on (see [`Runner::launch`], which spawns it):
    /// stores `session` with its first block of event numbers, then spawns the run, which holds
    /// `slot` until it has sent its last event.
    async fn begin(
        self: Arc<Self>,
        mut claim: Claim,
        mut session: Session,
        agent: Arc<crate::agent::AgentDef>,
        model: crate::llm::ResolvedModel,
        with: Continuation,
        slot: tokio::sync::OwnedSemaphorePermit,
    ) -> Result<ReceiverStream<StreamItem>, ExecutorError> {
        let reserved = session.next_seq + events::SEQ_BLOCK;
        // The session and its first block of event numbers: one write, one flush.
        session.seq_reserved = reserved;
        self.store.save(&mut session, true).await?;
        claim.taken = true;
        // A cancel from here on stops the run.
        self.set_running(&session.id, true);
        let cancel = claim.cancel.clone();
        let (tx, rx) = mpsc::channel(events::CHANNEL_CAPACITY);
        let sink = events::Sink::new(
            tx,
            session.id.clone(),
            (session.next_seq, reserved),
            cancel.clone(),
            self.store.clone(),
            self.budgets.max_events_per_second,
        );
        // The run's span: a child of the calling RPC's, so the run, its model calls and its tool
        // calls belong to the caller's trace.
        let span = tracing::info_span!(
            "run",
            otel.name = %format_args!("run {}", agent.agent_id),
            session_id = %session.id,
            agent_id = %agent.agent_id,
            otel.status_description = tracing::field::Empty,
        );
        let run = Run {
            runner: Arc::clone(&self),
            session,
            agent,
            model,
            sink: Arc::new(sink),
            cancel,
            answered: with.answered,
            resume: with.resume,
            confirmations: with.confirmations,
            no_tools: with.no_tools,
        };
        // The event stream stays open until the run's span has ended, so that the span of the
        // call streaming it (which ends with the stream) encloses the run's.
        let stream_open = Arc::clone(&run.sink);
        self.tasks.spawn(async move {
            run.drive().instrument(span).await;
            drop(stream_open);
            // The slot is free once the run has sent its last event.
            drop(slot);
        });
        Ok(ReceiverStream::new(rx))
    }
}

/// What a launched run continues with, besides its session.
#[derive(Debug, Default)]
struct Continuation {
    /// The answer to a plain question, announced as its `ToolEnd`.
    answered: Option<v1::run_event::Event>,
    /// Answers to sub-agents' questions.
    resume: Option<answers::Split>,
    /// Confirmation ids of `safeWrite` calls.
    confirmations: std::collections::HashSet<String>,
    /// Plain LLM: no tools.
    no_tools: bool,
}

/// A session entered in the live-run table for a run about to start; removed again on drop
/// unless a run took it over.
pub(super) struct Claim {
    runner: Arc<Runner>,
    session_id: String,
    cancel: tokio_util::sync::CancellationToken,
    taken: bool,
}

impl Drop for Claim {
    fn drop(&mut self) {
        if !self.taken
            && let Ok(mut live) = self.runner.live.lock()
        {
            live.remove(&self.session_id);
        }
    }
}

/// A request's `mode`, checked (`None`: unset or blank).
fn mode_of(mode: Option<String>) -> Result<Option<crate::policy::Mode>, ExecutorError> {
    non_empty(mode)
        .map(|text| {
            crate::policy::Mode::parse(&text)
                .map_err(|e| ExecutorError::invalid("mode", e.to_string()))
        })
        .transpose()
}

/// What a request continuing `session` sets for its run: its `mode` (kept with the session)
/// and its `confirmations`, each of which the session must have asked for. Returns the calls
/// they confirm (each id's full key, see [`crate::policy::confirmation_key`]).
fn grant(
    session: &mut Session,
    mode: Option<crate::policy::Mode>,
    confirmations: &std::collections::HashSet<String>,
) -> Result<std::collections::HashSet<String>, ExecutorError> {
    use crate::policy::short_id;
    let mut keys = std::collections::HashSet::new();
    for id in confirmations {
        // At most one asked-for call has a short id (`Confirmations::decide` refuses a second).
        let Some(key) = session
            .confirmations_issued
            .iter()
            .find(|key| short_id(key) == id)
        else {
            let why = if session
                .confirmations_used
                .iter()
                .any(|key| short_id(key) == id)
            {
                format!(
                    "`{id}` was already used: a confirmation allows one call, and the call asks \
                     again if it is made again"
                )
            } else {
                format!("`{id}` is not a confirmation this session asked for")
            };
            return Err(ExecutorError::invalid("confirmations", why));
        };
        keys.insert(key.clone());
    }
    if let Some(mode) = mode {
        session.mode = Some(mode.as_str().to_owned());
    }
    Ok(keys)
}

/// The confirmation ids of a request: each `c-` and 12 hex digits, at most 64.
fn confirmations(ids: Vec<String>) -> Result<std::collections::HashSet<String>, ExecutorError> {
    if ids.len() > 64 {
        return Err(ExecutorError::invalid("confirmations", "at most 64 ids"));
    }
    ids.into_iter()
        .map(|id| {
            let id = id.trim().to_owned();
            let ok = id.len() == 14
                && id.starts_with("c-")
                && id[2..].bytes().all(|b| b.is_ascii_hexdigit());
            if ok {
                Ok(id)
            } else {
                Err(ExecutorError::invalid(
                    "confirmations",
                    format!("`{id}` is not a confirmation id (`c-` and 12 hex digits)"),
                ))
            }
        })
        .collect()
}

/// Keeps a continued conversation within `max` messages (0: no limit): drops the oldest turns
/// after the system prompt, whole (from one user message to the next), so no tool result is
/// ever separated from its call.
fn forget_oldest(messages: &mut Vec<Message>, max: usize) {
    if max == 0 || messages.len() <= max {
        return;
    }
    let keep_from = messages.len() - max.saturating_sub(1);
    let start = usize::from(matches!(messages.first(), Some(Message::System { .. })));
    // The first user message at or after `keep_from` starts what is kept.
    let Some(cut) = (keep_from.max(start)..messages.len())
        .find(|&i| matches!(messages[i], Message::User { .. }))
    else {
        return;
    };
    messages.drain(start..cut);
}

/// Why `session` takes no answer: its state, and why it ended if it did (a question
/// cancelled, or left unanswered past `--paused-session-ttl-hours`, says so here).
fn no_question(session: &Session) -> ExecutorError {
    let why = session
        .error
        .as_ref()
        .filter(|_| session.status != Status::Running)
        .map(|e| format!(": {}", e.message))
        .unwrap_or_default();
    ExecutorError::FailedPrecondition(format!(
        "session `{}` has no question waiting for an answer (it is {}{why})",
        session.id,
        session.status.as_str()
    ))
}

/// A new mission for session `id`, which waits for an answer: the ways to give it one.
fn awaiting_answer(id: &str) -> ExecutorError {
    ExecutorError::AwaitingAnswer(format!(
        "session `{id}` waits for an answer to its question; answer it first (REST `POST \
         /api/v1/sessions/{id}/answer`, `taskforce answer {id} \"...\"`, gRPC `Answer`) or \
         cancel it"
    ))
}

fn non_empty(value: Option<String>) -> Option<String> {
    value.map(|v| v.trim().to_owned()).filter(|v| !v.is_empty())
}

fn check_id(field: &'static str, id: &str) -> Result<(), ExecutorError> {
    taskforce_proto::ids::validate_agent_id(id)
        .map_err(|e| ExecutorError::invalid(field, format!("`{id}`: {e}")))
}

/// A session id as a request gives it: spaces around it dropped (as `Execute` always did, so
/// every call names a session the same way), then 1-128 letters, digits, `-` and `_`;
/// anything else is a 400 naming it.
pub fn session_id_of(given: &str) -> Result<String, ExecutorError> {
    let id = given.trim();
    check_session_id(id)?;
    Ok(id.to_owned())
}

/// A session id is 1-128 letters, digits, `-` and `_`; anything else is a 400 naming it.
fn check_session_id(id: &str) -> Result<(), ExecutorError> {
    if taskforce_proto::ids::is_session_id(id) {
        Ok(())
    } else {
        Err(ExecutorError::invalid(
            "session_id",
            "must be 1-128 characters of letters, digits, `-` and `_`",
        ))
    }
}

impl Runner {
    /// Before answers resume sub-agents: each asking sub-agent must still be defined and still
    /// a sub-agent of the agent above it (from `agent`, the session's, down its `agent_path`).
    /// One that is not would fail its resumed call and lose the answer, with the run going on
    /// without it; refused instead, the question keeps waiting (restore the agent, or cancel).
    async fn check_askers(
        &self,
        agent: &crate::agent::AgentDef,
        pending: &crate::session::Pending,
        split: &answers::Split,
    ) -> Result<(), ExecutorError> {
        let resumed = |ask: &&crate::session::Ask| {
            ask.token.as_ref().is_some_and(|token| {
                split
                    .calls
                    .iter()
                    .any(|c| c.arguments["resume_token"].as_str() == Some(token))
            })
        };
        for ask in pending.asks.iter().filter(resumed) {
            let mut parent_id = agent.agent_id.clone();
            let mut subagents = agent.subagents.clone();
            for id in &ask.agent_path {
                let refused = |why: String| {
                    ExecutorError::FailedPrecondition(format!(
                        "the answer to `{}` is for `{id}`, which {why}; the question keeps \
                         waiting: restore it, or cancel the session to end its question",
                        ask.key
                    ))
                };
                if crate::tools::orchestration::find_subagent(&subagents, id).is_none() {
                    return Err(refused(format!(
                        "is no longer a sub-agent of `{parent_id}`"
                    )));
                }
                let def = match self.registry.resolve(&Target::Agent(id.clone())).await {
                    // Deleted, or its file invalid now.
                    Err(
                        e @ (ExecutorError::NotFound(_) | ExecutorError::InvalidArgument { .. }),
                    ) => {
                        return Err(refused(format!("cannot be loaded ({e})")));
                    }
                    other => other?,
                };
                parent_id.clone_from(id);
                subagents.clone_from(&def.subagents);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_id_is_trimmed_then_checked_on_every_call() {
        assert_eq!(session_id_of(" s-1_a ").ok().as_deref(), Some("s-1_a"));
        for bad in ["", "  ", "a b", "a/b", &"a".repeat(129)] {
            assert!(session_id_of(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn old_turns_are_forgotten_whole_and_the_system_prompt_stays() {
        let call = crate::llm::ToolCall {
            id: "c".into(),
            name: "t".into(),
            arguments: serde_json::json!({}),
        };
        let mut messages = vec![Message::system("s")];
        for i in 0..5 {
            messages.push(Message::user(format!("q{i}")));
            messages.push(Message::Assistant {
                content: String::new(),
                tool_calls: vec![call.clone()],
            });
            messages.push(Message::tool_result(&call, "r"));
            messages.push(Message::Assistant {
                content: format!("a{i}"),
                tool_calls: Vec::new(),
            });
        }
        messages.push(Message::user("q5"));
        forget_oldest(&mut messages, 7);
        assert!(matches!(&messages[0], Message::System { .. }));
        assert!(matches!(&messages[1], Message::User { content } if content == "q4"));
        assert_eq!(messages.len(), 6, "{messages:?}");
        let before = messages.clone();
        forget_oldest(&mut messages, 0);
        assert_eq!(messages.len(), before.len());
    }
}
