//! Sessions in sled: the conversation, the status, a pending question, the event counter.
//!
//! A session is stored as one JSON value under its id, written whenever something a restart
//! must see changes (the run starts, a tool round ends, the run pauses or ends). A session paused
//! on a question is flushed to disk before the client hears about the question, so it survives
//! an executor restart; sessions found `RUNNING` at start belonged to a process that died and are
//! marked `FAILED`.

use std::{
    path::Path,
    sync::{
        Arc,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
    time::Duration,
};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use taskforce_proto::v1;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::{error::ExecutorError, llm::Message};

pub mod index;

/// sled's page cache: sessions are read once per run, so a small cache costs little and keeps
/// memory from following the number of stored sessions (sled's default is 1 GiB).
const CACHE_BYTES: u64 = 16 * 1024 * 1024;

/// How long a flush may take before the write is reported as not durable.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(5);

/// Where a session stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// A run is live.
    Running,
    /// The last run finished with a final answer.
    Completed,
    /// Waiting for an answer to [`Session::pending`].
    Paused,
    /// The last run failed.
    Failed,
    /// The last run was cancelled.
    Cancelled,
}

impl Status {
    /// The lower-case name (`completed`, …), as metrics label it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Completed => "completed",
            Self::Paused => "paused",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }

    /// The wire enum.
    pub fn to_proto(self) -> v1::RunStatus {
        match self {
            Self::Running => v1::RunStatus::Running,
            Self::Completed => v1::RunStatus::Completed,
            Self::Paused => v1::RunStatus::Paused,
            Self::Failed => v1::RunStatus::Failed,
            Self::Cancelled => v1::RunStatus::Cancelled,
        }
    }
}

/// What a paused run waits on: one question of its own `ask_user`, or the questions of
/// sub-agents (bubbled up through their delegations), consolidated into one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Pending {
    /// The tool call that asked (the answer becomes its result); for sub-agents' questions an
    /// id of the consolidated question.
    pub call_id: String,
    /// The tool that asked (`ask_user`), or `need_user_input`.
    pub tool: String,
    /// What was asked, as shown to the user.
    pub question: String,
    /// Every question waiting, by key (empty in sessions stored before sub-agents existed: then
    /// the one question above is the frame's own `ask_user`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub asks: Vec<Ask>,
}

impl Pending {
    /// True when the only question is the frame's own `ask_user`: answered with plain text,
    /// shown without items (what clients saw before sub-agents existed).
    pub fn is_plain(&self) -> bool {
        self.asks.len() <= 1 && self.asks.iter().all(|a| a.token.is_none())
    }
}

/// One question waiting for the user, as a frame sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ask {
    /// Unique among the questions waiting: `<agent_id>.<key the asker gave>`, with `.2`, `.3`,
    /// ... added to a key asked again in the same round.
    pub key: String,
    /// The question.
    pub text: String,
    /// Whether the run can go on without an answer (then the default, or nothing, is used).
    pub required: bool,
    /// The proposed answer, shown to the user and used when they leave it blank.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<Value>,
    /// The agent that asks.
    pub agent_path: Vec<String>,
    /// The call of this frame that produced it: its own `ask_user` call, or the delegation
    /// whose sub-agent asks.
    pub call_id: String,
    /// `ask_user`, or the sub-agent tool (`agent_<id>`) that resumes the asking frame.
    pub tool: String,
    /// The signed reference to the sub-agent frame that waits (absent for an own `ask_user`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// The delegated task (passed again when resuming).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub task: String,
    /// An answer already given while other questions of its group are still open.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<Value>,
    /// The key the asking frame knows this question by, when `key` had to differ from it to
    /// stay unique (two delegations to one sub-agent asking the same thing: `asker.port` and
    /// `asker.port.2`); its answer goes back under this key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub asked_as: Option<String>,
}

impl Ask {
    /// The wire form of the question.
    pub fn to_proto(&self) -> v1::QuestionItem {
        v1::QuestionItem {
            key: self.key.clone(),
            text: self.text.clone(),
            required: self.required,
            default_json: self
                .default
                .as_ref()
                .map(Value::to_string)
                .unwrap_or_default(),
            agent_path: self.agent_path.clone(),
        }
    }
}

/// What multi-agent orchestration keeps per session: the todo plan, the facts sub-agents
/// reported, and the sub-agent frames waiting for answers.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Orchestration {
    /// The master todo plan.
    #[serde(default)]
    pub plan: crate::plan::Plan,
    /// `new_facts` of every sub-agent, merged.
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub facts: serde_json::Map<String, Value>,
    /// Paused sub-agent frames, by frame id.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub frames: std::collections::BTreeMap<String, Frame>,
    /// Tasks a delegation of the live run works on, until it ends (never stored: a stored
    /// session has no delegation running).
    #[serde(skip)]
    pub working: std::collections::BTreeSet<String>,
    /// Tasks the live run created, with the path of the sub-agent frame that created each
    /// (`FrameInfo::path`; never stored, like `working`).
    #[serde(skip)]
    pub created: std::collections::BTreeMap<String, Vec<String>>,
}

impl Orchestration {
    /// True when nothing was orchestrated (most sessions): then nothing extra is stored.
    pub fn is_empty(&self) -> bool {
        self.plan.tasks.is_empty() && self.facts.is_empty() && self.frames.is_empty()
    }

    /// Ends the sub-agents waiting for answers: each one's task still in progress fails with
    /// `error` (`{"code", "message"}`), as a sub-agent cancelled while running does.
    pub fn end_waiting(&mut self, error: &Value) {
        let all = std::mem::take(&mut self.frames);
        self.end_frames(all.into_values(), error);
    }

    /// [`Orchestration::end_waiting`] of the sub-agents below frame `top` only (a frame that
    /// ended without pausing leaves no question of its own sub-agents to answer).
    pub fn end_waiting_below(&mut self, top: &str, error: &Value) {
        let below = |id: &str| {
            let mut at = id;
            // A chain is never longer than the frames there are.
            for _ in 0..=self.frames.len() {
                match self.frames.get(at).map(|f| f.parent.as_str()) {
                    Some(parent) if parent == top => return true,
                    Some(parent) if !parent.is_empty() => at = parent,
                    _ => return false,
                }
            }
            false
        };
        let ids: Vec<String> = self.frames.keys().filter(|id| below(id)).cloned().collect();
        let ended: Vec<Frame> = ids.iter().filter_map(|id| self.frames.remove(id)).collect();
        self.end_frames(ended.into_iter(), error);
    }

    fn end_frames(&mut self, frames: impl Iterator<Item = Frame>, error: &Value) {
        for frame in frames {
            let in_progress =
                self.plan.tasks.iter().any(|t| {
                    t.id == frame.task_id && t.status == crate::plan::TaskStatus::InProgress
                });
            if in_progress {
                self.plan.set_status(
                    &frame.task_id,
                    crate::plan::TaskStatus::Failed,
                    Some(serde_json::json!({ "error": error })),
                );
            }
        }
    }
}

/// A sub-agent's frame, stored while it waits for answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Frame {
    /// Its id (named by its state token).
    pub id: String,
    /// The sub-agent.
    pub agent_id: String,
    /// Agent ids from below the top agent down to this one.
    pub agent_path: Vec<String>,
    /// The frame that delegated to it (empty: the top agent).
    pub parent: String,
    /// The model alias it runs on (`None`: the default).
    pub model: Option<String>,
    /// Its conversation.
    pub messages: Vec<Message>,
    /// What it waits on.
    pub pending: Pending,
    /// The plan task it works on.
    pub task_id: String,
    /// The delegated task.
    pub task: String,
    /// The tools it may call (the intersection with `allowed_tools`, when that was given).
    pub allowed_tools: Option<Vec<String>>,
    /// Model calls it may still make.
    pub steps_left: u32,
    /// Wall-clock budget left, in milliseconds.
    pub time_left_ms: u64,
}

/// One conversation with one agent.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Session {
    /// The id clients continue it by.
    pub id: String,
    /// The agent (custom id or profile name) it runs.
    pub agent_id: String,
    /// The model alias it runs on (`None`: the default).
    pub model: Option<String>,
    /// Its policy mode (`readOnly`, `default`, `safeWrite`; `None`: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// `safeWrite` confirmation ids its runs asked for and the user has not granted yet.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub confirmations_issued: Vec<String>,
    /// Confirmation ids already used up by the call they allowed (the latest
    /// [`MAX_ISSUED_CONFIRMATIONS`](crate::run::MAX_ISSUED_CONFIRMATIONS)), so granting one again
    /// is refused for what it is.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub confirmations_used: Vec<String>,
    /// Where it stands.
    pub status: Status,
    /// The question a paused session waits on.
    pub pending: Option<Pending>,
    /// The conversation, system prompt first.
    pub messages: Vec<Message>,
    /// The mission of the latest run.
    pub mission: String,
    /// The final answer of the latest completed run.
    pub final_answer: String,
    /// RFC 3339.
    pub created_at: String,
    /// RFC 3339.
    pub updated_at: String,
    /// The `seq` of the next event.
    pub next_seq: u64,
    /// While a run is live: the `seq` its events stay below unless it reserves more (in the
    /// store's reservation tree). Stored with the session when the run starts, so one write and
    /// one flush make both durable; 0 when no run is live.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub seq_reserved: u64,
    /// Plan, facts and waiting sub-agents (multi-agent orchestration).
    #[serde(default, skip_serializing_if = "Orchestration::is_empty")]
    pub orchestration: Orchestration,
    /// Why the latest run failed or was cancelled (`None` otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<RunError>,
    /// While a run applies answers to sub-agents' questions: the question they answered,
    /// until the resumed sub-agents have ended and their results are stored. A run stopped
    /// before that (the executor's shutdown, a crash) puts the session back on this question
    /// ([`Session::back_to_question`]): the sub-agents wait on as they were, not lost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answering: Option<Pending>,
}

/// How a run that did not complete ended: the `error` event's code and message (or why it was
/// cancelled), kept so that a client that was not listening can read it later.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunError {
    /// Upper snake case (`TIME_BUDGET_EXCEEDED`, `CANCELLED`, ...).
    pub code: String,
    /// What happened.
    pub message: String,
}

impl RunError {
    /// A run error of `code` saying `message`.
    pub fn new(code: &str, message: impl Into<String>) -> Option<Self> {
        Some(Self {
            code: code.to_owned(),
            message: message.into(),
        })
    }
}

impl Session {
    /// A new, running session.
    pub fn new(id: String, agent_id: String, model: Option<String>, mission: String) -> Self {
        let now = now();
        Self {
            id,
            agent_id,
            model,
            mode: None,
            confirmations_issued: Vec::new(),
            confirmations_used: Vec::new(),
            status: Status::Running,
            pending: None,
            messages: Vec::new(),
            mission,
            final_answer: String::new(),
            created_at: now.clone(),
            updated_at: now,
            next_seq: 0,
            seq_reserved: 0,
            orchestration: Orchestration::default(),
            error: None,
            answering: None,
        }
    }

    /// Puts a session whose run stopped while it applied answers to sub-agents' questions back
    /// on that question, as it was stored when the run started (its sub-agents' frames were
    /// still waiting then). `false` when it was not applying answers.
    pub fn back_to_question(&mut self, why: &str) -> bool {
        let Some(question) = self.answering.take() else {
            return false;
        };
        self.status = Status::Paused;
        self.pending = Some(question);
        self.error = RunError::new(
            "INTERRUPTED",
            format!(
                "{why} while it applied the answers to this question, so they were not \
                 applied: answer it again"
            ),
        );
        self.updated_at = now();
        true
    }

    /// Puts it in `index` as stored at `updated_ms` (its `updated_at`).
    fn index_in(&self, index: &index::SessionIndex, updated_ms: i64) {
        index.put(&self.id, &self.agent_id, self.status.to_proto(), updated_ms);
    }

    /// The wire form.
    pub fn to_proto(&self) -> v1::Session {
        v1::Session {
            session_id: self.id.clone(),
            agent_id: self.agent_id.clone(),
            status: self.status.to_proto() as i32,
            pending_question: self.pending.as_ref().map(|p| v1::PendingQuestion {
                call_id: p.call_id.clone(),
                question: p.question.clone(),
                items: question_items(p),
            }),
            messages: self.messages.iter().map(message_to_proto).collect(),
            mission: self.mission.clone(),
            final_answer: self.final_answer.clone(),
            model: self.model.clone().unwrap_or_default(),
            created_at: self.created_at.clone(),
            updated_at: self.updated_at.clone(),
            next_seq: self.next_seq,
            plan: Some(plan_to_proto(&self.orchestration.plan)),
            facts_json: if self.orchestration.facts.is_empty() {
                String::new()
            } else {
                Value::Object(self.orchestration.facts.clone()).to_string()
            },
            error: self.error.as_ref().map(|e| v1::Error {
                code: e.code.clone(),
                message: e.message.clone(),
            }),
        }
    }
}

/// What a list shows of a stored session, read without its conversation, plan or sub-agents.
#[derive(Deserialize)]
struct Listed {
    id: String,
    agent_id: String,
    model: Option<String>,
    status: Status,
    pending: Option<Pending>,
    mission: String,
    created_at: String,
    updated_at: String,
    #[serde(default)]
    error: Option<RunError>,
}

impl Listed {
    fn into_summary(self) -> v1::SessionSummary {
        v1::SessionSummary {
            session_id: self.id,
            agent_id: self.agent_id,
            status: self.status.to_proto() as i32,
            mission: index::preview(&self.mission),
            pending_question: self.pending.map(|p| v1::PendingQuestion {
                call_id: p.call_id,
                question: index::preview(&p.question),
                items: Vec::new(),
            }),
            model: self.model.unwrap_or_default(),
            created_at: self.created_at,
            updated_at: self.updated_at,
            error: self.error.map(|e| v1::Error {
                code: e.code,
                message: e.message,
            }),
        }
    }
}

/// The wire form of a plan, with its Markdown view.
pub fn plan_to_proto(plan: &crate::plan::Plan) -> v1::Plan {
    let json = |v: &Option<Value>| v.as_ref().map(Value::to_string).unwrap_or_default();
    v1::Plan {
        version: plan.version,
        tasks: plan
            .tasks
            .iter()
            .map(|t| v1::PlanTask {
                id: t.id.clone(),
                title: t.title.clone(),
                status: t.status.as_str().to_owned(),
                depends_on: t.depends_on.clone(),
                owner_agent: t.owner_agent.clone(),
                parent_id: t.parent_id.clone().unwrap_or_default(),
                notes: t.notes.clone(),
                tool: t.tool.clone().unwrap_or_default(),
                params_json: json(&t.params),
                result_json: json(&t.result),
            })
            .collect(),
        markdown: plan.render_markdown(),
    }
}

/// The items of a question as clients see them: none for a plain `ask_user`.
pub fn question_items(pending: &Pending) -> Vec<v1::QuestionItem> {
    if pending.is_plain() {
        Vec::new()
    } else {
        pending.asks.iter().map(Ask::to_proto).collect()
    }
}

fn message_to_proto(message: &Message) -> v1::SessionMessage {
    let plain = |role: &str, content: &str| v1::SessionMessage {
        role: role.to_owned(),
        content: content.to_owned(),
        ..v1::SessionMessage::default()
    };
    match message {
        Message::System { content } => plain("system", content),
        Message::User { content } => plain("user", content),
        Message::Assistant {
            content,
            tool_calls,
        } => v1::SessionMessage {
            tool_calls_json: tool_calls
                .iter()
                .map(|c| serde_json::to_string(c).unwrap_or_default())
                .collect(),
            ..plain("assistant", content)
        },
        Message::Tool {
            call_id,
            name,
            content,
            is_error,
        } => v1::SessionMessage {
            call_id: call_id.clone(),
            name: name.clone(),
            is_error: *is_error,
            ..plain("tool", content)
        },
    }
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// The current time, RFC 3339.
pub fn now() -> String {
    index::rfc3339(chrono::Utc::now().timestamp_millis())
}

/// When a stored session ended (its `updated_at`), or `None` when it is running, paused or
/// unreadable. Reads only those two fields: the scans that expire and trim sessions look at
/// every stored one (50,000 by default), and skipping the conversation instead of decoding it
/// makes each ~2.4× cheaper (1.1 vs 2.8 µs for a 1.4 KB session).
fn ended_at(value: &[u8]) -> Option<String> {
    let head = Head::read(value)?;
    (!matches!(head.status, Status::Running | Status::Paused)).then_some(head.updated_at)
}

/// A stored session's status and last change, read without the rest (see [`ended_at`]).
#[derive(Deserialize)]
struct Head {
    status: Status,
    updated_at: String,
}

impl Head {
    fn read(value: &[u8]) -> Option<Self> {
        serde_json::from_slice(value).ok()
    }
}

/// How often the sessions are swept for those past `ttl`: a quarter of it, between a second and
/// an hour.
pub fn sweep_period(ttl: Option<Duration>) -> Duration {
    ttl.map_or(Duration::from_secs(3600), |t| {
        (t / 4).clamp(Duration::from_secs(1), Duration::from_secs(3600))
    })
}

/// Whether a session last changed at `updated_at` (RFC 3339) did so before `cutoff`; an
/// unreadable time is not old.
pub fn changed_before(updated_at: &str, cutoff: chrono::DateTime<chrono::Utc>) -> bool {
    chrono::DateTime::parse_from_rfc3339(updated_at).is_ok_and(|t| t < cutoff)
}

/// How often a store over its limits with nothing left to delete looks again.
const STUCK_RETRY: Duration = Duration::from_secs(60);

/// The sled-backed session store.
#[derive(Debug, Clone)]
pub struct SessionStore {
    sessions: sled::Tree,
    /// Per live run, the `seq` below which events may have been sent (see
    /// [`SessionStore::reserve_seqs`]): what a session stored mid-run cannot know.
    seqs: sled::Tree,
    /// One flush at a time, shared by every writer waiting for one.
    durability: Arc<GroupCommit>,
    /// Signs the state tokens naming the sub-agent frames stored here.
    tokens: crate::token::TokenKey,
    /// Sessions stored and their bytes, and the most of each to keep (0: no limit); past
    /// either the oldest ended ones go.
    stored: Arc<Stored>,
    /// Set when a write failed: sled refuses every write after its first I/O error (a full
    /// disk), so no run can be stored until the executor is restarted; or when a flush did not
    /// finish in time, until one finishes.
    fault: taskforce_runtime::Fault,
    /// Runs' ends that could not be stored (see [`SessionStore::keep_unsaved`]).
    unsaved: Arc<std::sync::Mutex<std::collections::HashMap<String, Session>>>,
    /// The agents of the runs a previous process left running (see
    /// [`SessionStore::interrupted_agents`]).
    interrupted: Arc<[String]>,
    /// The stored sessions' summaries, for lists.
    index: Arc<index::SessionIndex>,
}

/// The count and the bytes of the stored sessions against their limits.
#[derive(Debug, Default)]
struct Stored {
    count: AtomicUsize,
    /// Their keys and values as stored (sled's files hold more: its log keeps replaced
    /// versions until it reclaims their space).
    bytes: taskforce_runtime::store::StoredBytes,
    max: AtomicUsize,
    max_bytes: AtomicU64,
    /// Woken when the count or the bytes pass their limit.
    over: tokio::sync::Notify,
}

impl Stored {
    /// Whether more sessions, or more bytes of them, are stored than the limits allow.
    fn over(&self) -> bool {
        let (max, max_bytes) = self.limits();
        (max > 0 && self.count.load(Ordering::Relaxed) > max)
            || (max_bytes > 0 && self.bytes.get() > max_bytes)
    }

    fn limits(&self) -> (usize, u64) {
        (
            self.max.load(Ordering::Relaxed),
            self.max_bytes.load(Ordering::Relaxed),
        )
    }

    /// One session more (`added`), and its bytes now `new` instead of `old`.
    fn changed(&self, added: bool, old: u64, new: u64) {
        if added {
            self.count.fetch_add(1, Ordering::Relaxed);
        }
        self.bytes.replaced(old, new);
        self.report();
        if self.over() {
            self.over.notify_one();
        }
    }

    /// One session of `bytes` fewer.
    fn removed(&self, bytes: u64) {
        // Saturating: the figures are approximate only if the store changed under a scan.
        let _ = self
            .count
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |c| {
                Some(c.saturating_sub(1))
            });
        self.bytes.replaced(bytes, 0);
        self.report();
    }

    /// Sets both figures from a scan of the whole store.
    fn set(&self, count: usize, bytes: u64) {
        self.count.store(count, Ordering::Relaxed);
        self.bytes.set(bytes);
        self.report();
    }

    fn report(&self) {
        crate::metrics::session_store(self.count.load(Ordering::Relaxed), self.bytes.get());
    }
}

/// The bytes a stored session takes: its key and its value.
fn stored_len(key: &[u8], value: &[u8]) -> u64 {
    (key.len() + value.len()) as u64
}

/// Group commit: writers that need their write on disk count themselves in, and one flush at a
/// time covers everyone counted before it started. Flushes run `sled::Db::flush` on the
/// [`Flusher`]'s thread, never many at once on sled's own small pool: concurrent `flush_async`
/// calls there can occupy every thread of it while waiting for the log writes that pool was to
/// run, which deadlocked the store under load.
#[derive(Debug)]
struct GroupCommit {
    /// Bumped after each write that must become durable.
    written: AtomicU64,
    /// Held while a flush runs; the `written` count the last finished flush covered.
    flushed: tokio::sync::Mutex<u64>,
    flusher: Flusher,
}

type FlushReply = tokio::sync::oneshot::Sender<sled::Result<usize>>;

/// sled's flush, on a thread of its own: on a disk that takes no more writes it never returns,
/// and a tokio blocking thread stuck in it would keep the runtime, and the process, from
/// ending. The thread holds the database only while it flushes, so dropping the store closes
/// it (and frees its lock for the next open) at once, not whenever the thread next wakes; the
/// thread then ends.
#[derive(Debug)]
struct Flusher {
    /// The one strong handle: the thread upgrades a weak one for each flush.
    _db: Arc<sled::Db>,
    tx: std::sync::mpsc::Sender<FlushReply>,
    /// Set while the store's fault is a flush that did not finish in time: a slow disk (not
    /// a full one) lets a later flush finish, which ends the fault.
    stalled: Arc<std::sync::atomic::AtomicBool>,
}

impl Flusher {
    fn start(db: sled::Db, fault: taskforce_runtime::Fault) -> Result<Self, ExecutorError> {
        let (tx, rx) = std::sync::mpsc::channel::<FlushReply>();
        let stalled = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let was_stalled = Arc::clone(&stalled);
        let db = Arc::new(db);
        let weak = Arc::downgrade(&db);
        std::thread::Builder::new()
            .name("session-flush".into())
            .spawn(move || {
                while let Ok(reply) = rx.recv() {
                    let Some(db) = weak.upgrade() else { break };
                    let flushed = db.flush();
                    drop(db);
                    if flushed.is_ok() && was_stalled.swap(false, Ordering::SeqCst) {
                        fault.clear();
                    }
                    let _ = reply.send(flushed);
                }
            })
            .map_err(|e| ExecutorError::Config(format!("cannot start the flush thread: {e}")))?;
        Ok(Self {
            _db: db,
            tx,
            stalled,
        })
    }

    /// Flushes, waiting at most `within`; past it the store is taken as broken.
    async fn flush(&self, within: Duration) -> Result<(), ExecutorError> {
        let stopped =
            || ExecutorError::Unavailable("the session store's flush thread stopped".into());
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.tx.send(tx).map_err(|_| stopped())?;
        match tokio::time::timeout(within, rx).await {
            Ok(Ok(flushed)) => flushed.map(drop).map_err(ExecutorError::from),
            Ok(Err(_)) => Err(stopped()),
            Err(_) => Err(ExecutorError::StoreStalled(within)),
        }
    }
}

/// Opens sled at `path`. A database that cannot be read (damaged: a truncated or overwritten
/// file) is moved aside, kept for whoever wants to recover it, and the store starts empty: the
/// sessions are lost (paused ones can no longer be answered), but the executor serves instead
/// of failing every start. Another process holding it is an error, as is a `path` that is no
/// sled database.
fn open_or_move_aside(path: &Path) -> Result<sled::Db, ExecutorError> {
    let configure = |c: sled::Config| c.cache_capacity(CACHE_BYTES);
    if let Err(e) = taskforce_runtime::store::upgrade_segments(path, configure) {
        warn!(store = %path.display(), error = %e, "could not move the session store to larger log segments; it keeps its own, where replaced sessions can pile up on disk");
    }
    let open = || {
        configure(taskforce_runtime::store::sled_config(
            path,
            taskforce_runtime::store::SEGMENT_BYTES,
        ))
        .open()
    };
    match taskforce_runtime::open_waiting_for_lock(open) {
        Ok(db) => Ok(db),
        Err(e) if taskforce_runtime::lock_held(&e) => Err(ExecutorError::Config(format!(
            "{}: another process (an executor started twice?) is using the session store \
                 there ({e}); stop it, or give this executor its own --data-dir",
            path.display()
        ))),
        Err(e @ (sled::Error::Corruption { .. } | sled::Error::Unsupported(_)))
            if path.join("conf").is_file() || path.join("db").is_file() =>
        {
            let aside = path.with_extension(format!(
                "sled.damaged-{}",
                chrono::Utc::now().format("%Y%m%dT%H%M%S")
            ));
            std::fs::rename(path, &aside).map_err(|r| {
                ExecutorError::Config(format!(
                    "the session store {} is damaged ({e}) and could not be moved aside ({r})",
                    path.display()
                ))
            })?;
            tracing::error!(store = %path.display(), moved_to = %aside.display(), error = %e, "the session store is damaged: moved it aside and started with no sessions");
            Ok(open()?)
        }
        Err(e) => Err(e.into()),
    }
}

impl SessionStore {
    /// Opens (or creates) the store in `dir` and fails sessions left `RUNNING` by a process that
    /// died. Blocking: call from `spawn_blocking`.
    pub fn open(dir: &Path) -> Result<Self, ExecutorError> {
        Self::open_in(dir).map_err(|e| match e {
            // sled says only what failed ("Read-only file system"), not where.
            ExecutorError::Store(e) => ExecutorError::Config(format!(
                "session store in {}: {e} (the executor writes its sessions under --data-dir: \
                 it needs space there and write access)",
                dir.display()
            )),
            other => other,
        })
    }

    fn open_in(dir: &Path) -> Result<Self, ExecutorError> {
        std::fs::create_dir_all(dir)
            .map_err(|e| ExecutorError::Config(format!("data dir {}: {e}", dir.display())))?;
        let db = open_or_move_aside(&dir.join("sessions.sled"))?;
        let sessions = db.open_tree("sessions")?;
        let seqs = db.open_tree("seq_reserved")?;
        let fault = taskforce_runtime::Fault::default();
        let flusher = Flusher::start(db, fault.clone())?;
        let mut store = Self {
            sessions,
            seqs,
            durability: Arc::new(GroupCommit {
                written: AtomicU64::new(0),
                flushed: tokio::sync::Mutex::new(0),
                flusher,
            }),
            tokens: crate::token::TokenKey::load_or_create(dir)?,
            stored: Arc::default(),
            fault,
            unsaved: Arc::default(),
            interrupted: Arc::new([]),
            index: Arc::default(),
        };
        let mut interrupted = std::collections::BTreeSet::new();
        let mut orphaned = 0usize;
        let (mut count, mut bytes) = (0usize, 0u64);
        for entry in store.sessions.iter() {
            let (key, value) = entry?;
            count += 1;
            bytes += stored_len(&key, &value);
            let Ok(mut session) = serde_json::from_slice::<Session>(&value) else {
                continue;
            };
            if session.status == Status::Running {
                if !session.back_to_question("the executor stopped (a crash or a kill)") {
                    session.status = Status::Failed;
                    session.error = RunError::new(
                        "INTERRUPTED",
                        "the executor stopped during the run (a crash or a kill); continue the \
                         session to go on",
                    );
                    session.updated_at = now();
                }
                // Events after the last save were sent too: continue past all of them.
                session.next_seq = session
                    .next_seq
                    .max(session.seq_reserved)
                    .max(store.reserved_seq(&session.id)?);
                session.seq_reserved = 0;
                let rewritten = serde_json::to_vec(&session)?;
                bytes = bytes + stored_len(&key, &rewritten) - stored_len(&key, &value);
                store.sessions.insert(key, rewritten)?;
                orphaned += 1;
                interrupted.insert(session.agent_id.clone());
            }
            session.index_in(&store.index, index::millis(&session.updated_at));
        }
        store.interrupted = interrupted.into_iter().collect();
        store.stored.set(count, bytes);
        // No run is live yet: every reservation is spent.
        store.seqs.clear()?;
        if orphaned > 0 {
            info!(
                orphaned,
                "sessions left running by a previous process marked failed (or, when they were \
                 applying answers, put back on their question)"
            );
        }
        Ok(store)
    }

    /// The agents whose runs the previous process left running when it stopped (each once,
    /// sorted): the BUSY it reported for them ends with it.
    pub fn interrupted_agents(&self) -> &[String] {
        &self.interrupted
    }

    /// The key of the state tokens that name this store's paused sub-agent frames.
    pub fn tokens(&self) -> &crate::token::TokenKey {
        &self.tokens
    }

    /// The session with this id.
    pub fn get(&self, id: &str) -> Result<Option<Session>, ExecutorError> {
        if let Some(session) = self.unsaved.lock().ok().and_then(|u| u.get(id).cloned()) {
            return Ok(Some(session));
        }
        match self.sessions.get(id.as_bytes())? {
            Some(value) => Ok(Some(serde_json::from_slice(&value)?)),
            None => Ok(None),
        }
    }

    /// Keeps in memory how a run ended that could not be stored, so that reading its session
    /// says so (not the last state that reached the disk) for as long as this process runs.
    /// Only runs that were live when the store failed get here: it then takes no new ones.
    pub fn keep_unsaved(&self, session: &Session) {
        if let Ok(mut unsaved) = self.unsaved.lock() {
            unsaved.insert(session.id.clone(), session.clone());
        }
        // Listed as it is read, in its place (a delete takes it out as the stored one).
        self.index
            .set_status(&session.id, session.status.to_proto());
    }

    /// Forgets how an unstored run of `id` ended: the session was stored again, or deleted.
    fn forget_unsaved(&self, id: &str) {
        if let Ok(mut unsaved) = self.unsaved.lock()
            && !unsaved.is_empty()
        {
            unsaved.remove(id);
        }
    }

    /// Set once a write failed (see the field).
    pub fn fault(&self) -> &taskforce_runtime::Fault {
        &self.fault
    }

    /// Refuses new work while the store cannot write.
    pub fn writable(&self) -> Result<(), ExecutorError> {
        match self.fault.get() {
            None => Ok(()),
            Some(cause) => Err(ExecutorError::Unavailable(format!(
                "the executor cannot store sessions: {cause}. If its disk is full, free space \
                 on its --data-dir and restart it"
            ))),
        }
    }

    /// Stores `session` (stamping `updated_at`); with `durable`, waits until it is on disk.
    /// A failure sets the store's fault (see [`Self::fault`]): for good after an I/O error, until
    /// a flush finishes after one that did not finish in time.
    pub async fn save(&self, session: &mut Session, durable: bool) -> Result<(), ExecutorError> {
        self.noted(self.save_inner(session, durable).await)
    }

    /// `result`, its store failure noted as the store's fault: a flush that did not finish in
    /// time (a full disk, whose flush never returns, or a slow one: a later flush ends the
    /// fault), or an I/O error (for good). Saves and deletes alike, so readiness says it
    /// whichever write met the failing disk first.
    fn noted<T>(&self, result: Result<T, ExecutorError>) -> Result<T, ExecutorError> {
        if let Err(e @ (ExecutorError::StoreStalled(_) | ExecutorError::Store(_))) = &result {
            let stalled = &self.durability.flusher.stalled;
            match e {
                ExecutorError::StoreStalled(_) if self.fault.get().is_none() => {
                    stalled.store(true, Ordering::SeqCst);
                }
                ExecutorError::StoreStalled(_) => {}
                _ => stalled.store(false, Ordering::SeqCst),
            }
            self.fault
                .set(format!("its session store failed to write ({e})"));
        }
        result
    }

    async fn save_inner(&self, session: &mut Session, durable: bool) -> Result<(), ExecutorError> {
        // The time in both forms, so the index does not read back what was just written.
        let updated_ms = chrono::Utc::now().timestamp_millis();
        session.updated_at = index::rfc3339(updated_ms);
        let key = session.id.as_bytes();
        let value = serde_json::to_vec(session)?;
        let new = stored_len(key, &value);
        let old = self.sessions.insert(key, value)?;
        self.stored.changed(
            old.is_none(),
            old.map_or(0, |old| stored_len(key, &old)),
            new,
        );
        session.index_in(&self.index, updated_ms);
        if durable {
            self.make_durable(&session.id).await?;
        }
        self.forget_unsaved(&session.id);
        Ok(())
    }

    /// Returns once every write made before the call is on disk, within [`FLUSH_TIMEOUT`].
    async fn make_durable(&self, session_id: &str) -> Result<(), ExecutorError> {
        let group = &self.durability;
        let mine = group.written.fetch_add(1, Ordering::SeqCst) + 1;
        let flush = async {
            let mut flushed = group.flushed.lock().await;
            if *flushed >= mine {
                // A flush that started after this write has finished.
                return Ok(());
            }
            let upto = group.written.load(Ordering::SeqCst);
            group.flusher.flush(FLUSH_TIMEOUT).await?;
            *flushed = upto;
            Ok::<(), ExecutorError>(())
        };
        // Waiting for the flush lock counts too: behind a stalled flush, every write stalls.
        match tokio::time::timeout(FLUSH_TIMEOUT, flush).await {
            Ok(result) => result,
            Err(_) => Err(ExecutorError::StoreStalled(FLUSH_TIMEOUT)),
        }
        .inspect_err(|e| tracing::debug!(session_id, error = %e, "session flush failed"))
    }

    /// Deletes ended sessions (completed, failed, cancelled) last updated before `cutoff`;
    /// running and paused ones stay whatever their age. Returns how many went. Blocking: call
    /// from `spawn_blocking`.
    pub fn expire(&self, cutoff: chrono::DateTime<chrono::Utc>) -> Result<usize, ExecutorError> {
        let mut removed = 0;
        for entry in self.sessions.iter() {
            let (key, value) = entry?;
            let Some(updated_at) = ended_at(&value) else {
                continue;
            };
            let old = changed_before(&updated_at, cutoff);
            if old && self.noted(self.delete_unchanged(&key, &value, &updated_at))? {
                removed += 1;
            }
        }
        Ok(removed)
    }

    /// The ids of the paused sessions that have waited for their answer since before `cutoff`
    /// (a paused session's last change is its pause). Blocking: call from `spawn_blocking`.
    pub fn paused_before(
        &self,
        cutoff: chrono::DateTime<chrono::Utc>,
    ) -> Result<Vec<String>, ExecutorError> {
        let mut ids = Vec::new();
        for entry in self.sessions.iter() {
            let (key, value) = entry?;
            let Some(head) = Head::read(&value) else {
                continue;
            };
            if head.status == Status::Paused && changed_before(&head.updated_at, cutoff) {
                ids.push(String::from_utf8_lossy(&key).into_owned());
            }
        }
        Ok(ids)
    }

    /// Deletes a session only if it is still `value` (a run may have just continued it), last
    /// changed at `updated_at`.
    fn delete_unchanged(
        &self,
        key: &[u8],
        value: &[u8],
        updated_at: &str,
    ) -> Result<bool, ExecutorError> {
        let deleted = self
            .sessions
            .compare_and_swap(key, Some(value), None as Option<&[u8]>)?
            .is_ok();
        if deleted {
            self.stored.removed(stored_len(key, value));
            self.index
                .remove(&String::from_utf8_lossy(key), index::millis(updated_at));
        }
        Ok(deleted)
    }

    /// Deletes session `id` and waits until that is on disk; false when there was none. The
    /// caller holds the session (no run can start on it meanwhile).
    pub async fn delete(&self, id: &str) -> Result<bool, ExecutorError> {
        self.noted(self.delete_inner(id).await)
    }

    async fn delete_inner(&self, id: &str) -> Result<bool, ExecutorError> {
        self.forget_unsaved(id);
        let Some(old) = self.sessions.remove(id.as_bytes())? else {
            return Ok(false);
        };
        self.stored.removed(stored_len(id.as_bytes(), &old));
        if let Some(head) = Head::read(&old) {
            self.index.remove(id, index::millis(&head.updated_at));
        }
        self.seqs.remove(id.as_bytes())?;
        self.make_durable(id).await?;
        Ok(true)
    }

    /// A page of the stored sessions' summaries (see [`index::SessionIndex::page`]): `size` 0
    /// is `page_token::DEFAULT_SESSION_PAGE_SIZE`, more than `page_token::MAX_PAGE_SIZE` is
    /// refused, as is a page token no page gave. Blocking: it reads the page's sessions.
    pub fn list(
        &self,
        filter: index::Filter<'_>,
        size: u32,
        page_token: &str,
    ) -> Result<v1::ListSessionsResponse, ExecutorError> {
        use taskforce_proto::page_token;
        // A field error of the contract's checks, as this crate's.
        let invalid = |field: &'static str, e: taskforce_proto::error::ApiError| {
            let why = e.field_violations.into_iter().next().map(|(_, d)| d);
            ExecutorError::invalid(field, why.unwrap_or(e.message))
        };
        let size = match size {
            0 => page_token::DEFAULT_SESSION_PAGE_SIZE,
            n => page_token::page_size(n).map_err(|e| invalid("page_size", e))?,
        } as usize;
        let after = page_token::parse_session(page_token)
            .map_err(|e| invalid("page_token", e))?
            .map(|(updated_at, id)| (index::millis(updated_at), id));
        let (places, more) = self.index.page(filter, size, after);
        let next_page_token = match places.last() {
            Some((ms, id)) if more => {
                taskforce_proto::page_token::make_session(&index::rfc3339(*ms), id)
            }
            _ => String::new(),
        };
        let mut sessions = Vec::with_capacity(places.len());
        // Runs' ends that could not be stored (none, but after a failing disk), listed as they
        // are read (`get`).
        let unsaved = self
            .unsaved
            .lock()
            .ok()
            .filter(|u| !u.is_empty())
            .map(|u| u.clone())
            .unwrap_or_default();
        for (_, id) in &places {
            let value = match unsaved.get(&**id).map(serde_json::to_vec) {
                Some(json) => sled::IVec::from(json?),
                // Gone since (expired, trimmed): not listed. Unreadable: said, not listed.
                None => match self.sessions.get(id.as_bytes())? {
                    Some(value) => value,
                    None => continue,
                },
            };
            match serde_json::from_slice::<Listed>(&value) {
                Ok(listed) => sessions.push(listed.into_summary()),
                Err(e) => {
                    warn!(session_id = %id, error = %e, "a stored session cannot be read; not listed");
                }
            }
        }
        Ok(v1::ListSessionsResponse {
            sessions,
            next_page_token,
        })
    }

    /// Keeps at most `max` sessions and `max_bytes` of them (0: no limit): past either, the
    /// oldest ended sessions are deleted down to nine tenths of it, so the scan this needs runs
    /// rarely.
    pub fn set_limits(&self, max: usize, max_bytes: u64) {
        self.stored.max.store(max, Ordering::Relaxed);
        self.stored.max_bytes.store(max_bytes, Ordering::Relaxed);
        // A store opened over lowered limits is trimmed at once, not at the next sweep.
        if self.stored.over() {
            self.stored.over.notify_one();
        }
    }

    /// How many sessions are stored.
    pub fn stored(&self) -> usize {
        self.stored.count.load(Ordering::Relaxed)
    }

    /// The bytes of the stored sessions (keys and values).
    pub fn stored_bytes(&self) -> u64 {
        self.stored.bytes.get()
    }

    /// Deletes the oldest ended sessions while more sessions, or more bytes of them, are
    /// stored than [`Self::set_limits`] allows, down to nine tenths of that limit; running and
    /// paused ones stay. Returns how many went. Blocking.
    pub fn trim(&self) -> Result<usize, ExecutorError> {
        if !self.stored.over() {
            return Ok(0);
        }
        let mut ended = Vec::new();
        let (mut count, mut bytes) = (0usize, 0u64);
        for entry in self.sessions.iter() {
            let (key, value) = entry?;
            count += 1;
            bytes += stored_len(&key, &value);
            if let Some(updated_at) = ended_at(&value) {
                ended.push((updated_at, key, value));
            }
        }
        self.stored.set(count, bytes);
        let (max, max_bytes) = self.stored.limits();
        let keep = if max == 0 { usize::MAX } else { max - max / 10 };
        let keep_bytes = if max_bytes == 0 {
            u64::MAX
        } else {
            max_bytes - max_bytes / 10
        };
        // RFC 3339 times of one format sort as text.
        ended.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let mut removed = 0;
        for (updated_at, key, value) in ended {
            if count <= keep && bytes <= keep_bytes {
                break;
            }
            if self.noted(self.delete_unchanged(&key, &value, &updated_at))? {
                removed += 1;
                count -= 1;
                bytes = bytes.saturating_sub(stored_len(&key, &value));
            }
        }
        Ok(removed)
    }

    /// Deletes ended sessions older than `ttl` (`None`: never) now and then, and the oldest
    /// ended ones whenever more sessions, or more bytes of them, are stored than the limits
    /// allow, until `stop` fires. When what is left over the limits is running or paused (kept),
    /// it says so once and tries again every [`STUCK_RETRY`] instead of at every save.
    pub async fn expire_until(self, ttl: Option<Duration>, stop: CancellationToken) {
        let every = sweep_period(ttl);
        let mut stuck = false;
        loop {
            let by_age = tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(if stuck { every.min(STUCK_RETRY) } else { every }) => true,
                () = self.stored.over.notified(), if !stuck => false,
            };
            let cutoff = ttl
                .filter(|_| by_age)
                .and_then(|t| chrono::Duration::from_std(t).ok())
                .map(|t| chrono::Utc::now() - t);
            let store = self.clone();
            let work = move || -> Result<(usize, usize), ExecutorError> {
                let expired = cutoff.map_or(Ok(0), |c| store.expire(c))?;
                Ok((expired, store.trim()?))
            };
            match tokio::task::spawn_blocking(work).await {
                Ok(Ok((0, 0))) => {}
                Ok(Ok((expired, trimmed))) => {
                    info!(expired, trimmed, "deleted ended sessions");
                }
                Ok(Err(e)) => warn!(error = %e, "deleting ended sessions failed"),
                Err(e) => warn!(error = %e, "deleting ended sessions failed"),
            }
            let over = self.stored.over();
            if over && !stuck {
                let (max, max_bytes) = self.stored.limits();
                warn!(
                    sessions = self.stored(),
                    bytes = self.stored_bytes(),
                    max_sessions = max,
                    max_bytes,
                    "more sessions are stored than --max-stored-sessions or \
                     --max-session-store-mb allow, and the rest are running or paused (kept \
                     until they end); ended ones are deleted as they end"
                );
            }
            stuck = over;
        }
    }

    /// Records, durably, that events of session `id` numbered below `upto` may be sent. A run
    /// reserves numbers before it uses them (its first block with the session itself,
    /// [`Session::seq_reserved`], further blocks here), so when the process dies mid-run the
    /// next start continues the session's `seq` past every event already sent (a gap, never a
    /// repeat).
    pub async fn reserve_seqs(&self, id: &str, upto: u64) -> Result<(), ExecutorError> {
        self.seqs
            .insert(id.as_bytes(), upto.to_be_bytes().to_vec())?;
        self.make_durable(id).await
    }

    /// Forgets the further reservations of a run that ended (its session then holds the exact
    /// next `seq`).
    pub fn release_seqs(&self, id: &str) -> Result<(), ExecutorError> {
        self.seqs.remove(id.as_bytes())?;
        Ok(())
    }

    /// The reservation of session `id` (0: none).
    fn reserved_seq(&self, id: &str) -> Result<u64, ExecutorError> {
        Ok(self
            .seqs
            .get(id.as_bytes())?
            .and_then(|v| <[u8; 8]>::try_from(v.as_ref()).ok())
            .map_or(0, u64::from_be_bytes))
    }

    /// Writes everything to disk (on shutdown). Blocking: call from `spawn_blocking`.
    pub async fn flush(&self) -> Result<(), ExecutorError> {
        self.durability
            .flusher
            .flush(taskforce_runtime::EXIT_WAIT)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ending_the_waiting_below_a_frame_leaves_the_others_waiting() {
        let mut o = Orchestration::default();
        for (id, parent) in [("a", ""), ("b", "a"), ("c", "b"), ("d", "")] {
            let task = o
                .plan
                .ensure_task(Some(&format!("t{id}")), id, crate::plan::ORCHESTRATOR, id)
                .expect("task");
            o.plan
                .set_status(&task, crate::plan::TaskStatus::InProgress, None);
            let frame = Frame {
                id: id.into(),
                agent_id: id.into(),
                agent_path: vec![id.into()],
                parent: parent.into(),
                model: None,
                messages: Vec::new(),
                pending: Pending {
                    call_id: "c".into(),
                    tool: "ask_user".into(),
                    question: "?".into(),
                    asks: Vec::new(),
                },
                task_id: task,
                task: id.into(),
                allowed_tools: None,
                steps_left: 1,
                time_left_ms: 1,
            };
            o.frames.insert(id.into(), frame);
        }
        o.end_waiting_below("a", &serde_json::json!({"code": "X"}));
        let left: Vec<&str> = o.frames.keys().map(String::as_str).collect();
        assert_eq!(left, ["a", "d"]);
        let status = |t: &str| o.plan.task(t).map(|t| t.status);
        assert_eq!(status("tb"), Some(crate::plan::TaskStatus::Failed));
        assert_eq!(status("tc"), Some(crate::plan::TaskStatus::Failed));
        assert_eq!(status("td"), Some(crate::plan::TaskStatus::InProgress));
    }

    /// Opens the store again once the dropped one has let go of sled's lock: a flush leaves
    /// work on sled's own thread pool that can hold the database for a moment after the last
    /// handle is dropped (a process that restarts never meets this).
    fn reopen(dir: &Path) -> SessionStore {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            match SessionStore::open(dir) {
                Ok(store) => return store,
                Err(e) if std::time::Instant::now() >= deadline => panic!("reopen: {e}"),
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }

    fn stored(store: &SessionStore, id: &str, status: Status, updated_at: &str) {
        let mut session = Session::new(id.into(), "agent".into(), None, "m".into());
        session.status = status;
        session.updated_at = updated_at.into();
        let value = serde_json::to_vec(&session).expect("json");
        store.sessions.insert(id.as_bytes(), value).expect("insert");
    }

    #[tokio::test]
    async fn a_damaged_store_is_moved_aside_and_the_executor_starts_empty() {
        let dir = tempfile::TempDir::new().expect("tmp");
        let store = SessionStore::open(dir.path()).expect("open");
        stored(&store, "s1", Status::Paused, "2026-11-27T00:00:00.000Z");
        store.flush().await.expect("flush");
        drop(store);
        // Wait for sled's threads to let go of the files. (sled reads past a damaged log by
        // itself, losing what it cannot read; a damaged `conf` it refuses.)
        std::thread::sleep(Duration::from_millis(200));
        let conf = dir.path().join("sessions.sled").join("conf");
        std::fs::write(conf, b"\xff\xfe garbage").expect("conf");
        let store = reopen(dir.path());
        assert!(store.get("s1").expect("get").is_none());
        let aside = std::fs::read_dir(dir.path())
            .expect("dir")
            .filter_map(Result::ok)
            .any(|e| e.file_name().to_string_lossy().contains("damaged"));
        assert!(aside, "the damaged store is kept");
    }

    #[test]
    fn a_store_an_earlier_version_made_keeps_its_sessions_on_larger_segments() {
        let dir = tempfile::TempDir::new().expect("tmp");
        let path = dir.path().join("sessions.sled");
        {
            // sled's default segments, as every executor before this one made them.
            let db = sled::Config::new()
                .path(&path)
                .segment_size(taskforce_runtime::store::DEFAULT_SEGMENT_BYTES)
                .open()
                .expect("open");
            let session = Session::new("s1".into(), "agent".into(), None, "m".into());
            db.open_tree("sessions")
                .expect("tree")
                .insert("s1", serde_json::to_vec(&session).expect("json"))
                .expect("insert");
            db.flush().expect("flush");
        }
        let store = reopen(dir.path());
        assert_eq!(
            store.get("s1").expect("get").map(|s| s.agent_id).as_deref(),
            Some("agent")
        );
        assert_eq!(store.stored(), 1);
        let conf = std::fs::read(path.join("conf")).expect("conf");
        assert!(
            String::from_utf8_lossy(&conf).contains(&format!(
                "segment_size: {}",
                taskforce_runtime::store::SEGMENT_BYTES
            )),
            "{}",
            String::from_utf8_lossy(&conf)
        );
    }

    #[test]
    fn only_old_ended_sessions_expire() {
        let dir = tempfile::TempDir::new().expect("tmp");
        let store = SessionStore::open(dir.path()).expect("open");
        let old = "2020-01-01T00:00:00.000Z";
        stored(&store, "old-done", Status::Completed, old);
        stored(&store, "old-failed", Status::Failed, old);
        stored(&store, "old-cancelled", Status::Cancelled, old);
        stored(&store, "old-paused", Status::Paused, old);
        stored(&store, "new-done", Status::Completed, &now());
        let cutoff = chrono::Utc::now() - chrono::Duration::hours(1);
        assert_eq!(store.expire(cutoff).expect("expire"), 3);
        for (id, kept) in [
            ("old-done", false),
            ("old-failed", false),
            ("old-cancelled", false),
            ("old-paused", true),
            ("new-done", true),
        ] {
            assert_eq!(store.get(id).expect("get").is_some(), kept, "{id}");
        }
    }

    #[tokio::test]
    async fn lists_show_what_is_stored_after_saves_a_restart_and_an_expiry() {
        let dir = tempfile::TempDir::new().expect("tmp");
        let all = index::Filter::default();
        let listed = |store: &SessionStore, filter, size| -> Vec<String> {
            let page = store.list(filter, size, "").expect("list");
            page.sessions.into_iter().map(|s| s.session_id).collect()
        };
        {
            let store = SessionStore::open(dir.path()).expect("open");
            stored(
                &store,
                "old-done",
                Status::Completed,
                "2020-01-01T00:00:00.000Z",
            );
            stored(
                &store,
                "old-paused",
                Status::Paused,
                "2020-01-01T00:00:01.000Z",
            );
        }
        let store = reopen(dir.path());
        // Read from the store at open.
        assert_eq!(listed(&store, all, 0), ["old-paused", "old-done"]);
        let mut live = Session::new("live".into(), "coder".into(), None, "x".repeat(500));
        store.save(&mut live, false).await.expect("save");
        let page = store.list(all, 1, "").expect("list");
        assert_eq!(page.sessions[0].session_id, "live");
        assert_eq!(page.sessions[0].mission.chars().count(), 201);
        assert!(!page.next_page_token.is_empty());
        let rest = store.list(all, 5, &page.next_page_token).expect("next");
        let rest: Vec<_> = rest
            .sessions
            .iter()
            .map(|s| s.session_id.as_str())
            .collect();
        assert_eq!(rest, ["old-paused", "old-done"]);
        let paused = index::Filter {
            status: Some(v1::RunStatus::Paused),
            ..all
        };
        assert_eq!(listed(&store, paused, 0), ["old-paused"]);
        let cutoff = chrono::Utc::now() - chrono::Duration::hours(1);
        assert_eq!(store.expire(cutoff).expect("expire"), 1);
        assert_eq!(listed(&store, all, 0), ["live", "old-paused"]);
        for (size, token, field) in [(1001, "", "page_size"), (1, "c:coder", "page_token")] {
            let err = store.list(all, size, token).err().map(|e| e.to_string());
            assert!(err.is_some_and(|e| e.starts_with(field)), "{field}");
        }
    }

    #[tokio::test]
    async fn a_deleted_session_is_gone_from_reads_lists_and_the_counts() {
        let dir = tempfile::TempDir::new().expect("tmp");
        let store = SessionStore::open(dir.path()).expect("open");
        let mut kept = Session::new("kept".into(), "coder".into(), None, "m".into());
        store.save(&mut kept, false).await.expect("save");
        let mut gone = Session::new("gone".into(), "coder".into(), None, "m".into());
        gone.status = Status::Paused;
        store.save(&mut gone, false).await.expect("save");
        assert_eq!(store.stored(), 2);
        assert!(store.delete("gone").await.expect("delete"));
        assert!(store.get("gone").expect("get").is_none());
        let listed = store.list(index::Filter::default(), 0, "").expect("list");
        let ids: Vec<_> = listed
            .sessions
            .iter()
            .map(|s| s.session_id.as_str())
            .collect();
        assert_eq!(ids, ["kept"]);
        assert_eq!(store.stored(), 1);
        assert!(!store.delete("gone").await.expect("delete again"));
        // On disk: a store opened again does not have it either.
        drop(store);
        let store = reopen(dir.path());
        assert!(store.get("gone").expect("get").is_none());
        assert!(store.get("kept").expect("get").is_some());
    }

    #[test]
    fn only_sessions_paused_before_the_cutoff_are_listed() {
        let dir = tempfile::TempDir::new().expect("tmp");
        let store = SessionStore::open(dir.path()).expect("open");
        let old = "2020-01-01T00:00:00.000Z";
        stored(&store, "old-paused", Status::Paused, old);
        stored(&store, "new-paused", Status::Paused, &now());
        stored(&store, "old-done", Status::Completed, old);
        stored(&store, "old-running", Status::Running, old);
        stored(&store, "unreadable-time", Status::Paused, "yesterday");
        let cutoff = chrono::Utc::now() - chrono::Duration::hours(1);
        assert_eq!(store.paused_before(cutoff).expect("scan"), ["old-paused"]);
    }

    #[test]
    fn past_the_most_to_keep_the_oldest_ended_sessions_go() {
        let dir = tempfile::TempDir::new().expect("tmp");
        {
            let store = SessionStore::open(dir.path()).expect("open");
            for i in 0..12 {
                let at = format!("2026-01-01T00:00:{i:02}.000Z");
                stored(&store, &format!("done-{i:02}"), Status::Completed, &at);
            }
            stored(
                &store,
                "paused-old",
                Status::Paused,
                "2020-01-01T00:00:00.000Z",
            );
        }
        let store = reopen(dir.path());
        assert_eq!(store.stored(), 13);
        assert_eq!(store.trim().expect("no limit"), 0);
        store.set_limits(20, 0);
        assert_eq!(store.trim().expect("under the limit"), 0);
        // 13 stored, at most 10: down to 9, the oldest ended first, the paused one kept.
        store.set_limits(10, 0);
        assert_eq!(store.trim().expect("trim"), 4);
        assert_eq!(store.stored(), 9);
        for (id, kept) in [
            ("paused-old", true),
            ("done-00", false),
            ("done-03", false),
            ("done-04", true),
            ("done-11", true),
        ] {
            assert_eq!(store.get(id).expect("get").is_some(), kept, "{id}");
        }
    }

    #[test]
    fn past_the_most_bytes_to_keep_the_oldest_ended_sessions_go() {
        let dir = tempfile::TempDir::new().expect("tmp");
        let store = SessionStore::open(dir.path()).expect("open");
        let big = |id: &str, status: Status, at: &str| {
            let mut session = Session::new(id.into(), "agent".into(), None, "x".repeat(10_000));
            session.status = status;
            session.updated_at = at.into();
            let value = serde_json::to_vec(&session).expect("json");
            let len = stored_len(id.as_bytes(), &value);
            store.sessions.insert(id.as_bytes(), value).expect("insert");
            len
        };
        let mut total = 0;
        for i in 0..10 {
            total += big(
                &format!("done-{i}"),
                Status::Completed,
                &format!("2026-01-01T00:00:0{i}.000Z"),
            );
        }
        let paused = big("paused-old", Status::Paused, "2020-01-01T00:00:00.000Z");
        drop(store);
        let store = reopen(dir.path());
        assert_eq!(store.stored_bytes(), total + paused, "counted at open");
        // Room for about five of the eleven: down to nine tenths of it, the oldest ended
        // first, the paused one kept.
        let each = total / 10;
        store.set_limits(0, 5 * each + each / 2);
        let removed = store.trim().expect("trim");
        assert!(store.stored_bytes() <= (5 * each + each / 2) * 9 / 10);
        assert_eq!(removed, 7, "{} bytes left", store.stored_bytes());
        assert_eq!(store.stored(), 4);
        for (id, kept) in [
            ("paused-old", true),
            ("done-0", false),
            ("done-6", false),
            ("done-7", true),
            ("done-9", true),
        ] {
            assert_eq!(store.get(id).expect("get").is_some(), kept, "{id}");
        }
        // Only running and paused ones over the limit: nothing to delete.
        store.set_limits(0, 1);
        assert_eq!(store.trim().expect("trim"), 3);
        assert_eq!(store.trim().expect("trim"), 0);
        assert_eq!(store.stored_bytes(), paused);
    }

    #[tokio::test]
    async fn a_run_left_running_continues_past_every_number_it_reserved() {
        let dir = tempfile::TempDir::new().expect("tmp");
        {
            let store = SessionStore::open(dir.path()).expect("open");
            // A run's start: the session with its first block, then one block more.
            let mut first = Session::new("first".into(), "a".into(), None, "m".into());
            first.next_seq = 10;
            first.seq_reserved = 266;
            store.save(&mut first, true).await.expect("save");
            let mut second = Session::new("second".into(), "b".into(), None, "m".into());
            second.seq_reserved = 256;
            store.save(&mut second, true).await.expect("save");
            store.reserve_seqs("second", 512).await.expect("reserve");
            // An ended run: its exact next number, no reservation.
            let mut ended = Session::new("ended".into(), "c".into(), None, "m".into());
            ended.status = Status::Completed;
            ended.next_seq = 7;
            store.save(&mut ended, true).await.expect("save");
        }
        let store = reopen(dir.path());
        for (id, status, next) in [
            ("first", Status::Failed, 266),
            ("second", Status::Failed, 512),
            ("ended", Status::Completed, 7),
        ] {
            let session = store.get(id).expect("get").expect("stored");
            assert_eq!((session.status, session.next_seq), (status, next), "{id}");
            assert_eq!(session.seq_reserved, 0, "{id}");
        }
        assert_eq!(
            store.interrupted_agents(),
            ["a", "b"],
            "the agents of the runs left running, not of the ended one"
        );
    }
}
