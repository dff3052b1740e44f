//! Runs: starting, continuing, cancelling and driving agent runs.
//!
//! - `events`: the event sink of one run (numbering, sending, noticing a client that left).
//! - `agent_loop`: the ReAct loop.
//! - `calls`: one round of concurrent tool calls, through the policy and into the audit log.
//! - `driver`: one run from start to its closing events, with the budgets and the status lease.
//! - `start`: request validation and session set-up for `Execute` and `Answer`.

mod agent_loop;
mod calls;
mod driver;
mod events;
mod start;

use std::{
    collections::HashMap,
    path::PathBuf,
    sync::{Arc, Mutex},
    time::Duration,
};

use tokio_util::{sync::CancellationToken, task::TaskTracker};

pub use events::StreamItem;

use crate::{
    agent::AgentDef,
    llm::{LlmRouter, ResolvedModel},
    registry::Registry,
    session::{Session, SessionStore},
    tools::{Limits, Tool, mcp::McpPool},
};
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
    /// What a relative `workspace` in a definition is relative to: the registry's config
    /// directory, so both services mean the same directory.
    pub config_dir: PathBuf,
}

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
    /// Cancellation of each live run, by session id.
    live: Mutex<HashMap<String, CancellationToken>>,
    /// Every run task; waited for on shutdown.
    tasks: TaskTracker,
    /// Fires on shutdown; every run's cancellation is its child.
    shutdown: CancellationToken,
}

/// What one run works with.
#[derive(Debug)]
pub struct RunCtx {
    /// Where events go.
    sink: Arc<Sink>,
    /// The agent.
    agent: Arc<AgentDef>,
    /// The session.
    session_id: String,
    /// Fires when the run must stop.
    cancel: CancellationToken,
    /// Limits of each tool call.
    limits: Limits,
    /// The agent's workspace.
    workspace: PathBuf,
    /// The model.
    model: ResolvedModel,
    /// Most model calls.
    max_steps: u32,
    /// Where the session is stored after each tool round.
    store: SessionStore,
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
        Self {
            router,
            tools,
            mcp,
            store,
            registry,
            budgets,
            live: Mutex::new(HashMap::new()),
            tasks: TaskTracker::new(),
            shutdown,
        }
    }

    /// Cancels the live run of `session_id`; false when there is none.
    pub fn cancel(&self, session_id: &str) -> bool {
        let token = self
            .live
            .lock()
            .ok()
            .and_then(|live| live.get(session_id).cloned());
        match token {
            Some(token) => {
                token.cancel();
                true
            }
            None => false,
        }
    }

    /// The stored session.
    pub fn session(&self, session_id: &str) -> Result<Option<Session>, crate::ExecutorError> {
        self.store.get(session_id)
    }

    /// Waits (at most `grace`) for every run to send its last event and stop.
    pub async fn drain(&self, grace: Duration) -> bool {
        self.tasks.close();
        tokio::time::timeout(grace, self.tasks.wait()).await.is_ok()
    }

    /// The session store (for the final flush).
    pub fn store(&self) -> &SessionStore {
        &self.store
    }
}
