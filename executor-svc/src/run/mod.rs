//! Runs: starting, continuing, cancelling and driving agent runs.
//!
//! - `events`: the event sink of one run (numbering, sending, noticing a client that left).
//! - `agent_loop`: the ReAct loop.
//! - `calls`: one round of concurrent tool calls, through the policy and into the audit log.
//! - `driver`: one run from start to its closing events, with the budgets and the status lease.
//! - `start`: request validation and session set-up for `Execute` and `Answer`.
//! - `delegate`: sub-agent frames (seed 003): delegations, plan merges, bubbled-up questions.
//! - `merge`: plan patches merged (or refused) with their events.
//! - `answers`: pending questions and the answers that continue them (pure).

mod agent_loop;
mod answers;
mod calls;
mod delegate;
mod driver;
mod events;
mod merge;
mod start;
mod stopped;

use std::{
    collections::HashMap,
    path::PathBuf,
    sync::{Arc, Mutex, atomic::AtomicU32},
    time::Duration,
};

use tokio_util::{sync::CancellationToken, task::TaskTracker};
use tracing::warn;

pub use events::StreamItem;
pub use start::session_id_of;

use crate::{
    agent::AgentDef,
    llm::{LlmRouter, ResolvedModel},
    registry::Registry,
    session::{Orchestration, Session, SessionStore},
    tools::{Limits, Tool, mcp::McpPool},
};
use agent_loop::Counts;
use events::Sink;

/// Budgets and limits of runs.
#[derive(Debug, Clone)]
pub struct Budgets {
    /// Most model calls per run.
    pub max_steps: u32,
    /// Wall-clock budget per run.
    pub max_duration: Duration,
    /// Limits of each tool call.
    pub tool_limits: Limits,
    /// Workspace of agents whose definition names none: `<this>/<agent_id>`.
    pub workspaces: PathBuf,
    /// What no agent's workspace may hold (the data directory, the API keys file).
    pub hidden: std::sync::Arc<[PathBuf]>,
    /// This executor's instance name, the owner part of the session ids it mints.
    pub instance: Option<String>,
    /// Most runs live at once; more are refused with `RESOURCE_EXHAUSTED`.
    pub max_live_runs: usize,
    /// Most events per second one run's stream sends (bursts up to as many); 0: no limit.
    pub max_events_per_second: u32,
    /// Sub-agent delegations.
    pub delegation: DelegationLimits,
    /// The policy every tool call passes (what a run's mode allows).
    pub policy: crate::policy::Policy,
    /// Most messages a continued conversation keeps (0: all): thread memory stays bounded.
    pub memory_messages: usize,
    /// Masks secrets in tool output.
    pub redactor: crate::redact::Redactor,
}

/// Guards of sub-agent delegations (seed 003 §7).
#[derive(Debug, Clone)]
pub struct DelegationLimits {
    /// Deepest delegation (orchestrator → A → B is 2).
    pub max_hops: u32,
    /// Default wall-clock budget of a delegation.
    pub timeout: Duration,
    /// Who may remove dependency links from the plan.
    pub unlink: crate::plan::UnlinkPolicy,
}

/// A session in use ([`Runner::claim`]).
#[derive(Debug)]
struct Live {
    /// Cancels its run.
    cancel: CancellationToken,
    /// Its run is going and a cancel stops it: set once the run has started, cleared when its
    /// end is decided. While it is not set (an answer or a cancel being checked, a run's end
    /// being stored) a cancel waits for the session instead of answering for an outcome that is
    /// not known yet.
    running: bool,
    /// A cancel was answered `true` while the run was going: the run ends cancelled, even if
    /// its loop had just finished otherwise.
    cancel_answered: bool,
}

/// What [`Runner::cancel_live`] found.
enum LiveState {
    /// A running run, now cancelled.
    Cancelled,
    /// Held by something else for now.
    Busy,
    /// Not in use.
    Free,
}

/// How long a cancel waits for a session held by an answer, another cancel or a run's end.
const CANCEL_WAIT: Duration = Duration::from_secs(10);

/// Everything a run needs, shared by all runs.
#[derive(Debug)]
pub struct Runner {
    router: Arc<LlmRouter>,
    tools: HashMap<String, Arc<dyn Tool>>,
    /// Connections to agents' MCP servers, shared by all runs.
    mcp: Arc<McpPool>,
    store: SessionStore,
    registry: Registry,
    budgets: Budgets,
    /// The sessions in use (a run, or an answer, a cancel or a sweep being applied), by id.
    live: Mutex<HashMap<String, Live>>,
    /// Every run task; waited for on shutdown.
    tasks: TaskTracker,
    /// One permit per live run (`--max-live-runs`).
    run_slots: Arc<tokio::sync::Semaphore>,
    /// Fires on shutdown; every run's cancellation is its child.
    shutdown: CancellationToken,
}

/// What one frame of a run works with: the top agent's, or a sub-agent's.
#[derive(Debug)]
pub struct RunCtx {
    /// Where events go (a sub-agent's sink stamps its path).
    sink: Arc<Sink>,
    /// The agent.
    agent: Arc<AgentDef>,
    /// The session.
    session_id: String,
    /// Fires when the frame must stop.
    cancel: CancellationToken,
    /// Limits of each tool call.
    limits: Limits,
    /// The agent's workspace.
    workspace: crate::tools::Workspace,
    /// The model.
    model: ResolvedModel,
    /// The model alias the frame runs on (sub-agents without one of their own inherit it).
    model_alias: Option<String>,
    /// Most model calls.
    max_steps: u32,
    /// Model calls made so far (a sub-agent gets at most what is left).
    steps_used: AtomicU32,
    /// Model calls made so far by all the run's frames: `--max-steps` bounds the run (one
    /// `Execute` or `Answer`), its sub-agents' calls included.
    run_steps: Arc<AtomicU32>,
    /// When the frame's time is up (a sub-agent gets at most what is left).
    deadline: tokio::time::Instant,
    /// Where the frame sits among the run's frames.
    frame: FrameInfo,
    /// The run's policy mode (sub-agents share their parent's); `None`: no mode.
    mode: Option<crate::policy::Mode>,
    /// `safeWrite` confirmations, shared by the run's frames.
    confirmations: Arc<Mutex<Confirmations>>,
    /// The run's shared orchestration state (plan, facts, waiting frames).
    orchestra: Arc<Orchestra>,
    /// Everything runs share (registry, router, tools, store).
    runner: Arc<Runner>,
}

/// `safeWrite` confirmations of a run: the calls the user granted with this request (each used
/// up by the call it confirms, which also takes it off the session's), and the calls the session
/// asked confirmations for and are not used yet (stored with the session, so only a later
/// message of the same session can grant them). Each is a call's full
/// [`confirmation_key`](crate::policy::confirmation_key); the user confirms its short id.
#[derive(Debug, Default)]
pub struct Confirmations {
    /// Granted and not used yet.
    pub granted: std::collections::HashSet<String>,
    /// Asked for, oldest first.
    pub issued: Vec<String>,
    /// Used up by the call they allowed, oldest first.
    pub used: Vec<String>,
}

/// Appends `id` to `ids`, keeping the latest [`MAX_ISSUED_CONFIRMATIONS`].
fn remember(ids: &mut Vec<String>, id: String) {
    ids.push(id);
    let over = ids.len().saturating_sub(MAX_ISSUED_CONFIRMATIONS);
    ids.drain(..over);
}

/// Most confirmation ids a session keeps asking for.
pub const MAX_ISSUED_CONFIRMATIONS: usize = 32;

impl Confirmations {
    /// The policy's decision on `call`, keeping the books: a granted confirmation is used up by
    /// the call it allows, and a confirmation asked for is remembered for the session.
    pub fn decide(
        &mut self,
        policy: &crate::policy::Policy,
        mode: Option<crate::policy::Mode>,
        call: crate::policy::Call<'_>,
    ) -> crate::policy::Decision {
        use crate::policy::{Decision, short_id};
        let decision = policy.check(mode, call, &self.granted);
        match &decision {
            Decision::Allow if !self.granted.is_empty() => {
                let key = crate::policy::confirmation_key(call.agent_id, call.tool, call.arguments);
                // Used up only here, by the call it confirms: a grant this run does not use
                // (the model did not make the call again) can be given again.
                if self.granted.remove(&key) {
                    self.issued.retain(|issued| *issued != key);
                    if !self.used.contains(&key) {
                        remember(&mut self.used, key);
                    }
                }
            }
            Decision::Confirm { id, key, .. } if !self.issued.contains(key) => {
                // Another call of this conversation already has this short id: the user could
                // not tell the two apart by it, so this one is not asked for.
                // (A session stored before ids were bound to whole keys holds the short id
                // alone: that is this call's, asked for again, not another's.)
                let taken = self
                    .issued
                    .iter()
                    .chain(&self.used)
                    .any(|other| other != key && other != id && short_id(other) == id);
                if taken {
                    return Decision::Block {
                        reason: format!(
                            "safeWrite mode: this call's confirmation id `{id}` is already \
                             another call's in this conversation, so the user could not tell \
                             them apart; make the call differently"
                        ),
                    };
                }
                // The same call made again asks again, with the same id.
                self.used.retain(|used| used != key && used != id);
                self.issued.retain(|issued| issued != id);
                remember(&mut self.issued, key.clone());
            }
            _ => {}
        }
        decision
    }
}

/// Where a frame sits: its id, depth and the agents above it.
#[derive(Debug, Clone, Default)]
pub struct FrameInfo {
    /// Empty for the top agent.
    pub id: String,
    /// 0 for the top agent; each delegation adds one.
    pub depth: u32,
    /// The agents of every frame above this one, top first.
    pub ancestors: Vec<String>,
    /// The ids of the sub-agent frames from the top agent's down to this one (empty for the
    /// top agent): what a stop puts back undoes the tasks a frame on it created.
    pub path: Vec<String>,
}

/// A run's orchestration state, shared by its frames; merges are serialised by its lock.
#[derive(Debug, Default)]
pub struct Orchestra {
    state: Mutex<Orchestration>,
    /// Token and step counts of the run's sub-agents, added to the run's usage.
    usage: Mutex<Counts>,
    /// Sub-agents that answers resumed and a stop interrupted.
    interrupted: Mutex<Vec<stopped::Interrupted>>,
}

impl Orchestra {
    fn new(state: Orchestration) -> Self {
        Self {
            state: Mutex::new(state),
            usage: Mutex::default(),
            interrupted: Mutex::default(),
        }
    }

    /// Runs `f` on the state (a poisoned lock still holds a consistent state: every change is
    /// made on a copy or is a single assignment).
    fn with<R>(&self, f: impl FnOnce(&mut Orchestration) -> R) -> R {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&mut state)
    }

    /// A copy of the state, for storing with the session.
    fn snapshot(&self) -> Orchestration {
        self.with(|state| state.clone())
    }

    fn add_usage(&self, counts: &Counts) {
        let mut usage = self
            .usage
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        usage.input_tokens = usage.input_tokens.saturating_add(counts.input_tokens);
        usage.output_tokens = usage.output_tokens.saturating_add(counts.output_tokens);
        usage.steps += counts.steps;
        usage.tool_calls += counts.tool_calls;
    }

    fn interrupt(&self, stop: stopped::Interrupted) {
        self.interrupted
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(stop);
    }

    /// Whether a stop interrupted a sub-agent of frame `frame_id`.
    fn interrupted_below(&self, frame_id: &str) -> bool {
        self.interrupted
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .any(|i| i.parent == frame_id)
    }

    fn take_interrupted(&self) -> Vec<stopped::Interrupted> {
        std::mem::take(
            &mut self
                .interrupted
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    fn usage(&self) -> Counts {
        *self
            .usage
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Runner {
    /// A runner over these parts; `tools` are every native tool the executor offers (agents get
    /// the ones their definition allows), `mcp` the connections to agents' MCP servers.
    pub fn new(
        router: Arc<LlmRouter>,
        tools: Vec<Arc<dyn Tool>>,
        mcp: Arc<McpPool>,
        store: SessionStore,
        registry: Registry,
        budgets: Budgets,
        shutdown: CancellationToken,
    ) -> Self {
        let tools = tools
            .into_iter()
            .map(|t| (t.name().to_owned(), t))
            .collect();
        let run_slots = Arc::new(tokio::sync::Semaphore::new(budgets.max_live_runs.max(1)));
        Self {
            router,
            tools,
            mcp,
            store,
            registry,
            budgets,
            live: Mutex::new(HashMap::new()),
            tasks: TaskTracker::new(),
            run_slots,
            shutdown,
        }
    }

    /// Cancels the session's live run (which then ends `cancelled`), or ends the question a
    /// paused session waits on (it is then `cancelled`, and expires like any ended session).
    /// False when there was neither. A session held by an answer being checked, another cancel
    /// or a run's end being stored is waited for (at most [`CANCEL_WAIT`]), so that the answer
    /// says what became of the session.
    pub async fn cancel(self: &Arc<Self>, session_id: &str) -> Result<bool, crate::ExecutorError> {
        let deadline = tokio::time::Instant::now() + CANCEL_WAIT;
        loop {
            match self.cancel_live(session_id) {
                LiveState::Cancelled => return Ok(true),
                LiveState::Busy if tokio::time::Instant::now() >= deadline => {
                    return Err(crate::ExecutorError::FailedPrecondition(format!(
                        "session `{session_id}` stayed in use (an answer, a cancel or a run's \
                         end being applied) for {} s; read it, and cancel again if it still runs \
                         or waits",
                        CANCEL_WAIT.as_secs()
                    )));
                }
                LiveState::Busy => tokio::time::sleep(Duration::from_millis(5)).await,
                // Claimed first, so an answer cannot continue the session meanwhile; taken by
                // another in between, it is looked at again.
                LiveState::Free => match self.claim(session_id) {
                    Ok(claim) => {
                        let ended = self
                            .end_paused(session_id, None, "cancelled while waiting for an answer")
                            .await;
                        drop(claim);
                        if matches!(ended, Ok(true)) {
                            tracing::info!(session_id, "paused session cancelled");
                        }
                        return ended;
                    }
                    Err(crate::ExecutorError::FailedPrecondition(_)) => {}
                    Err(e) => return Err(e),
                },
            }
        }
    }

    /// Ends the question the claimed session `session_id` waits on, `why` being the reason its
    /// call and the session's error give: the session is then `cancelled` and expires like any
    /// ended session. With `paused_before`, only when it has waited since before then (an
    /// answer may have continued it, and it may have paused again since). False when the
    /// session is not (or no longer) such a paused one.
    async fn end_paused(
        &self,
        session_id: &str,
        paused_before: Option<chrono::DateTime<chrono::Utc>>,
        why: &str,
    ) -> Result<bool, crate::ExecutorError> {
        let Some(mut session) = self.store.get(session_id)? else {
            return Ok(false);
        };
        let waited = paused_before
            .is_none_or(|cutoff| crate::session::changed_before(&session.updated_at, cutoff));
        if session.status != crate::session::Status::Paused || !waited {
            return Ok(false);
        }
        session.status = crate::session::Status::Cancelled;
        session.pending = None;
        // The question's call (and any call waiting with it) gets its answer: a conversation
        // with an unanswered call is one a model API refuses, so the session could not go on.
        agent_loop::close_open_calls(&mut session.messages, why);
        session.error = crate::session::RunError::new("CANCELLED", why);
        session
            .orchestration
            .end_waiting(&serde_json::json!({"code": "CANCELLED", "message": why}));
        self.store.save(&mut session, true).await?;
        Ok(true)
    }

    /// Now and then, until `stop`, cancels the paused sessions whose question has waited longer
    /// than `ttl` for its answer (`--paused-session-ttl-hours`), so that sessions nobody
    /// answers do not stay forever: each is then `cancelled`, saying why, and expires with the
    /// ended sessions. A session in use (an answer or a cancel being applied) is left to the
    /// next sweep.
    pub async fn expire_paused_until(self: Arc<Self>, ttl: Duration, stop: CancellationToken) {
        let Ok(age) = chrono::Duration::from_std(ttl) else {
            warn!("the paused-session TTL is too long to apply; paused sessions are kept");
            return;
        };
        let why = format!(
            "the question went unanswered for {} (--paused-session-ttl-hours)",
            crate::config::describe_hours(ttl)
        );
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(crate::session::sweep_period(Some(ttl))) => {}
            }
            let cutoff = chrono::Utc::now() - age;
            let store = self.store.clone();
            let listed = tokio::task::spawn_blocking(move || store.paused_before(cutoff))
                .await
                .map_err(crate::ExecutorError::from)
                .and_then(|ids| ids);
            let ids = match listed {
                Ok(ids) => ids,
                Err(e) => {
                    warn!(error = %e, "listing paused sessions failed");
                    continue;
                }
            };
            let mut cancelled = 0usize;
            for id in ids {
                if stop.is_cancelled() {
                    return;
                }
                // In use: the next sweep sees it again, if it is still paused.
                let Ok(claim) = self.claim(&id) else {
                    continue;
                };
                match self.end_paused(&id, Some(cutoff), &why).await {
                    Ok(true) => cancelled += 1,
                    Ok(false) => {}
                    Err(e) => {
                        warn!(session_id = %id, error = %e, "cancelling an unanswered session failed")
                    }
                }
                drop(claim);
            }
            if cancelled > 0 {
                tracing::info!(
                    cancelled,
                    "cancelled paused sessions nobody answered in time"
                );
            }
        }
    }

    /// Cancels the running run of `session_id`, if it has one.
    fn cancel_live(&self, session_id: &str) -> LiveState {
        let Ok(mut live) = self.live.lock() else {
            // Never poisoned (nothing panics holding it); `claim` reports it if it were.
            return LiveState::Free;
        };
        match live.get_mut(session_id) {
            Some(entry) if entry.running => {
                entry.cancel_answered = true;
                entry.cancel.cancel();
                LiveState::Cancelled
            }
            Some(_) => LiveState::Busy,
            None => LiveState::Free,
        }
    }

    /// Marks the claimed session's run as going (`true`: a cancel stops it) or its end as
    /// decided (`false`); returns whether a cancel was answered `true` while it ran.
    fn set_running(&self, session_id: &str, running: bool) -> bool {
        let Ok(mut live) = self.live.lock() else {
            return false;
        };
        live.get_mut(session_id).is_some_and(|entry| {
            entry.running = running;
            entry.cancel_answered
        })
    }

    /// The stored session.
    pub fn session(&self, session_id: &str) -> Result<Option<Session>, crate::ExecutorError> {
        self.store.get(session_id)
    }

    /// Deletes a session that has no live run and no answer or cancel being applied (those
    /// are a `session_conflict`): false when there was none.
    pub async fn delete_session(
        self: &Arc<Self>,
        session_id: &str,
    ) -> Result<bool, crate::ExecutorError> {
        let claim = self.claim(session_id).map_err(|e| match e {
            crate::ExecutorError::FailedPrecondition(_) => {
                crate::ExecutorError::FailedPrecondition(format!(
                    "session `{session_id}` is in use (a live run, or an answer or a cancel \
                     being applied): cancel its run, then delete it"
                ))
            }
            other => other,
        })?;
        let deleted = self.store.delete(session_id).await;
        drop(claim);
        if matches!(deleted, Ok(true)) {
            tracing::info!(session_id, "session deleted");
        }
        deleted
    }

    /// A page of the stored sessions, the most recently changed first (see
    /// [`crate::session::SessionStore::list`]). Blocking.
    pub fn list_sessions(
        &self,
        req: &taskforce_proto::v1::ListSessionsRequest,
    ) -> Result<taskforce_proto::v1::ListSessionsResponse, crate::ExecutorError> {
        let agent_id = req.agent_id.as_deref().filter(|a| !a.is_empty());
        if let Some(id) = agent_id {
            taskforce_proto::ids::validate_agent_id(id)
                .map_err(|e| crate::ExecutorError::invalid("agent_id", e.to_string()))?;
        }
        let status = match taskforce_proto::v1::RunStatus::try_from(req.status) {
            Ok(taskforce_proto::v1::RunStatus::Unspecified) => None,
            Ok(status) => Some(status),
            Err(_) => {
                return Err(crate::ExecutorError::invalid(
                    "status",
                    format!("{} is not a run status", req.status),
                ));
            }
        };
        let filter = crate::session::index::Filter { agent_id, status };
        self.store.list(filter, req.page_size, &req.page_token)
    }

    /// Waits (at most `grace`) for every run to send its last event and stop.
    pub async fn drain(&self, grace: Duration) -> bool {
        self.tasks.close();
        tokio::time::timeout(grace, self.tasks.wait()).await.is_ok()
    }

    /// The todo plan of a session (as of its last checkpoint).
    pub fn plan(
        &self,
        session_id: &str,
    ) -> Result<Option<crate::plan::Plan>, crate::ExecutorError> {
        Ok(self
            .store
            .get(session_id)?
            .map(|session| session.orchestration.plan))
    }

    /// The session store (for the final flush).
    pub fn store(&self) -> &SessionStore {
        &self.store
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::Confirmations;
    use crate::policy::{Call, Decision, Mode, Origin, Policy, PolicyConfig, short_id};

    fn policy() -> Policy {
        Policy::new(&PolicyConfig::from_lookup(|k| {
            (k == "AGENT_WRITE_ALLOWLIST").then(|| "file_write".to_owned())
        }))
    }

    /// The arguments of the allowlisted write both tests make.
    fn write_args() -> serde_json::Value {
        json!({"path": "notes.txt", "content": "v1"})
    }

    /// The top agent's `file_write` of `args`.
    fn write_call(args: &serde_json::Value) -> Call<'_> {
        Call {
            agent_id: "top",
            tool: "file_write",
            origin: Origin::Executor,
            arguments: args,
        }
    }

    #[test]
    fn a_confirmation_runs_only_the_call_it_was_asked_for_once() {
        let p = policy();
        let args = write_args();
        let call = write_call(&args);
        let mut books = Confirmations::default();
        let Decision::Confirm { key, .. } = books.decide(&p, Some(Mode::SafeWrite), call) else {
            panic!("asks first");
        };
        assert_eq!(books.issued, std::slice::from_ref(&key));
        books.granted.insert(key.clone());
        assert_eq!(
            books.decide(&p, Some(Mode::SafeWrite), call),
            Decision::Allow
        );
        assert!(books.issued.is_empty() && books.used == [key]);
        // Used up: the same call asks again.
        assert!(matches!(
            books.decide(&p, Some(Mode::SafeWrite), call),
            Decision::Confirm { .. }
        ));
    }

    #[test]
    fn a_call_whose_short_id_is_another_calls_is_refused() {
        let p = policy();
        let args = write_args();
        let call = write_call(&args);
        let key = crate::policy::confirmation_key("top", "file_write", &args);
        // Another call asked for earlier with the same 12 digits (a collision a model can
        // search for): the user could not tell the two apart.
        let other = format!("{}{}", short_id(&key), "0".repeat(52));
        assert_ne!(other, key);
        for books in [
            Confirmations {
                issued: vec![other.clone()],
                ..Confirmations::default()
            },
            Confirmations {
                used: vec![other.clone()],
                ..Confirmations::default()
            },
        ] {
            let mut books = books;
            let Decision::Block { reason } = books.decide(&p, Some(Mode::SafeWrite), call) else {
                panic!("refused");
            };
            assert!(reason.contains("already another call's"), "{reason}");
            assert!(!books.issued.contains(&key), "not asked for");
            // Granting the other call's key does not run this one either.
            books.granted.insert(other.clone());
            assert!(!matches!(
                books.decide(&p, Some(Mode::SafeWrite), call),
                Decision::Allow
            ));
        }
        // A session stored before ids were bound to keys holds the short id alone: the call
        // asks again (no refusal), and its whole key replaces the short id.
        let mut books = Confirmations {
            issued: vec![short_id(&key).to_owned()],
            ..Confirmations::default()
        };
        assert!(matches!(
            books.decide(&p, Some(Mode::SafeWrite), call),
            Decision::Confirm { .. }
        ));
        assert_eq!(books.issued, [key]);
    }
}
