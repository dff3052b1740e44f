//! Sessions in sled: the conversation, the status, a pending question, the event counter.
//!
//! A session is stored as one JSON value under its id, written whenever something a restart
//! must see changes (the run starts, a tool round ends, the run pauses or ends). A session paused
//! on a question is flushed to disk before the client hears about the question, so it survives
//! an executor restart; sessions found `RUNNING` at start belonged to a process that died and are
//! marked `FAILED`.

use std::{path::Path, time::Duration};

use serde::{Deserialize, Serialize};
use taskforce_proto::v1;
use tracing::{info, warn};

use crate::{error::ExecutorError, llm::Message};

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

/// A question a run is waiting on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Pending {
    /// The tool call that asked; the answer becomes its result.
    pub call_id: String,
    /// The tool that asked (`ask_user`).
    pub tool: String,
    /// What was asked.
    pub question: String,
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
}

impl Session {
    /// A new, running session.
    pub fn new(id: String, agent_id: String, model: Option<String>, mission: String) -> Self {
        let now = now();
        Self {
            id,
            agent_id,
            model,
            status: Status::Running,
            pending: None,
            messages: Vec::new(),
            mission,
            final_answer: String::new(),
            created_at: now.clone(),
            updated_at: now,
            next_seq: 0,
        }
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
            }),
            messages: self.messages.iter().map(message_to_proto).collect(),
            mission: self.mission.clone(),
            final_answer: self.final_answer.clone(),
            model: self.model.clone().unwrap_or_default(),
            created_at: self.created_at.clone(),
            updated_at: self.updated_at.clone(),
            next_seq: self.next_seq,
        }
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

/// The current time, RFC 3339.
pub fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// The sled-backed session store.
#[derive(Debug, Clone)]
pub struct SessionStore {
    db: sled::Db,
    sessions: sled::Tree,
}

impl SessionStore {
    /// Opens (or creates) the store in `dir` and fails sessions left `RUNNING` by a process that
    /// died. Blocking: call from `spawn_blocking`.
    pub fn open(dir: &Path) -> Result<Self, ExecutorError> {
        std::fs::create_dir_all(dir)
            .map_err(|e| ExecutorError::Config(format!("data dir {}: {e}", dir.display())))?;
        let db = sled::open(dir.join("sessions.sled"))?;
        let sessions = db.open_tree("sessions")?;
        let store = Self { db, sessions };
        let mut orphaned = 0usize;
        for entry in store.sessions.iter() {
            let (_, value) = entry?;
            let Ok(mut session) = serde_json::from_slice::<Session>(&value) else {
                continue;
            };
            if session.status == Status::Running {
                session.status = Status::Failed;
                session.updated_at = now();
                store
                    .sessions
                    .insert(session.id.as_bytes(), serde_json::to_vec(&session)?)?;
                orphaned += 1;
            }
        }
        if orphaned > 0 {
            info!(
                orphaned,
                "sessions left running by a previous process marked failed"
            );
        }
        Ok(store)
    }

    /// The session with this id.
    pub fn get(&self, id: &str) -> Result<Option<Session>, ExecutorError> {
        match self.sessions.get(id.as_bytes())? {
            Some(value) => Ok(Some(serde_json::from_slice(&value)?)),
            None => Ok(None),
        }
    }

    /// Stores `session` (stamping `updated_at`); with `durable`, waits until it is on disk.
    pub async fn save(&self, session: &mut Session, durable: bool) -> Result<(), ExecutorError> {
        session.updated_at = now();
        let value = serde_json::to_vec(session)?;
        self.sessions.insert(session.id.as_bytes(), value)?;
        if durable {
            match tokio::time::timeout(FLUSH_TIMEOUT, self.db.flush_async()).await {
                Ok(result) => {
                    result?;
                }
                Err(_) => warn!(session_id = %session.id, "session flush timed out"),
            }
        }
        Ok(())
    }

    /// Writes everything to disk (on shutdown). Blocking: call from `spawn_blocking`.
    pub fn flush(&self) -> Result<(), ExecutorError> {
        self.db.flush()?;
        Ok(())
    }
}
