//! Tools an agent may call: the native tools ([`native`]) and MCP tools ([`mcp`]), behind one
//! trait.
//!
//! Every call gets a [`ToolContext`] (the agent's workspace, the run's cancellation, limits) and
//! returns a [`ToolOutcome`]: output for the model, or a question that pauses the run
//! (`ask_user`). A tool never panics on input from the model: bad arguments are a
//! [`ToolError::InvalidArguments`] that the loop hands back to the model as an error result.

pub mod global;
pub mod mcp;
pub mod native;
pub mod orchestration;

use std::{
    path::{Path, PathBuf},
    sync::{Arc, OnceLock},
    time::Duration,
};

use futures::future::BoxFuture;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::llm::ToolDefinition;

/// Limits every tool call runs under.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Wall-clock limit of one call (subprocesses are killed when it passes).
    pub timeout: Duration,
    /// Largest output handed back to the model; more is cut, and the cut is said.
    pub max_output_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(60),
            max_output_bytes: 64 * 1024,
        }
    }
}

/// `paths` made canonical where they exist (else as given), for [`Workspace::hiding`]: once,
/// when the executor starts, instead of at every run's first tool call.
pub fn canonical_paths(paths: Vec<PathBuf>) -> Arc<[PathBuf]> {
    paths
        .into_iter()
        .map(|p| std::fs::canonicalize(&p).unwrap_or(p))
        .collect()
}

/// An agent's workspace in one run: the directory as configured, and its canonical path once a
/// tool of the run has made the directory and resolved it. Clones share that resolution, so a
/// run with twenty file reads resolves its workspace once; the next run resolves it again. (A
/// workspace removed while its run goes on is not made again until the next run: the tools then
/// say that it does not exist.) Dereferences to the configured path.
#[derive(Debug, Clone)]
pub struct Workspace {
    path: PathBuf,
    root: Arc<OnceLock<PathBuf>>,
    hidden: Arc<[PathBuf]>,
    own: Option<PathBuf>,
}

impl Workspace {
    /// The workspace at `path`, not resolved yet.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            root: Arc::default(),
            hidden: Arc::new([]),
            own: None,
        }
    }

    /// The same, refused by every tool when it holds one of `hidden` (the executor's data
    /// directory, the API keys file): a workspace at or above one would hand it to the tools.
    /// A workspace inside one of them is refused too, but for `own`: the agent's default
    /// workspace (`<data dir>/workspaces/<agent id>`), the one place in there that is its.
    /// `hidden` are compared as given: make them canonical ([`canonical_paths`]).
    pub fn hiding(self, hidden: Arc<[PathBuf]>, own: PathBuf) -> Self {
        Self {
            hidden,
            own: Some(own),
            ..self
        }
    }

    /// What this workspace may not hold.
    pub(crate) fn hidden(&self) -> &[PathBuf] {
        &self.hidden
    }

    /// The agent's default workspace, the one allowed inside a hidden path.
    pub(crate) fn own(&self) -> Option<&Path> {
        self.own.as_deref()
    }

    /// The canonical path, when a tool of this run has resolved it.
    pub(crate) fn resolved(&self) -> Option<&PathBuf> {
        self.root.get()
    }

    /// Remembers the canonical path for the rest of the run.
    pub(crate) fn set_resolved(&self, root: &Path) {
        let _ = self.root.set(root.to_path_buf());
    }
}

impl std::ops::Deref for Workspace {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.path
    }
}

/// What a tool call may use.
#[derive(Debug, Clone)]
pub struct ToolContext {
    /// The agent's workspace: file tools and subprocesses stay inside it.
    pub workspace: Workspace,
    /// The agent being run (for logs and audit).
    pub agent_id: String,
    /// The run's session.
    pub session_id: String,
    /// Fires when the run is cancelled (client gone, budget spent, shutdown): stop at once and
    /// kill any subprocess.
    pub cancel: CancellationToken,
    /// Time and size limits.
    pub limits: Limits,
    /// The id of this call (a sub-agent's questions name the delegation they came from).
    pub call_id: String,
    /// The frame's link to orchestration (sub-agents, the plan); set by the loop.
    pub orchestra: Option<Arc<dyn orchestration::Orchestrate>>,
}

/// How a call ended, when it did not fail.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolOutcome {
    /// Text for the model. `is_error` marks a failure the model should see and may recover
    /// from (a command that exited non-zero, a 404 from a web page).
    Output {
        /// What the model reads.
        content: String,
        /// True when the call did not do what was asked.
        is_error: bool,
    },
    /// The run pauses until a user answers (only `ask_user`).
    Question {
        /// What to ask.
        question: String,
        /// A short name for the answer (bubbled-up questions are answered by key).
        key: Option<String>,
        /// Whether the asker cannot go on without an answer.
        required: bool,
        /// A proposed answer.
        default: Option<Value>,
    },
    /// A sub-agent needs answers: `content` (its `need_user_input` result) goes to the model,
    /// and the frame pauses until the user has answered `asks`.
    NeedInput {
        /// What the model reads.
        content: String,
        /// The questions, keyed, each naming the frame to resume.
        asks: Vec<crate::session::Ask>,
    },
}

impl ToolOutcome {
    /// A successful output.
    pub fn ok(content: impl Into<String>) -> Self {
        Self::Output {
            content: content.into(),
            is_error: false,
        }
    }

    /// An output that reports a failure to the model.
    pub fn failed(content: impl Into<String>) -> Self {
        Self::Output {
            content: content.into(),
            is_error: true,
        }
    }
}

impl ToolError {
    /// The same error, said of `name` (the tool the model called, when another one's path
    /// made it: `delegate_to_agent` runs `agent_<id>`'s).
    pub fn of_tool(mut self, name: &str) -> Self {
        let (Self::InvalidArguments { tool, .. }
        | Self::OutsideWorkspace { tool, .. }
        | Self::Timeout { tool, .. }
        | Self::Cancelled { tool }
        | Self::Unavailable { tool, .. }
        | Self::ServerUnavailable { tool, .. }
        | Self::Failed { tool, .. }) = &mut self;
        name.clone_into(tool);
        self
    }
}

/// Why a call could not run.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// The model's arguments do not match the tool's schema.
    #[error("invalid arguments for {tool}: {reason}")]
    InvalidArguments {
        /// The tool.
        tool: String,
        /// What is wrong, naming the argument.
        reason: String,
    },
    /// A path leaves the workspace (`..`, an absolute path elsewhere, a symlink out).
    #[error("{tool}: {path} is outside the agent's workspace")]
    OutsideWorkspace {
        /// The tool.
        tool: String,
        /// The path as given.
        path: String,
    },
    /// The call did not finish within its limit.
    #[error("{tool} timed out after {after:?}")]
    Timeout {
        /// The tool.
        tool: String,
        /// The limit.
        after: Duration,
    },
    /// The run was cancelled while the call ran.
    #[error("{tool} was cancelled")]
    Cancelled {
        /// The tool.
        tool: String,
    },
    /// The tool cannot run on this host (e.g. `powershell` without `pwsh`).
    #[error("{tool} is not available: {reason}")]
    Unavailable {
        /// The tool.
        tool: String,
        /// Why.
        reason: String,
    },
    /// The MCP server behind the tool could not be started or reached, or died during the
    /// call; it is started again on the next use.
    #[error(
        "{tool}: MCP server `{server}` is unavailable ({reason}); it is reconnected on its next use"
    )]
    ServerUnavailable {
        /// The tool.
        tool: String,
        /// The server, as configured (command or URL).
        server: String,
        /// What went wrong.
        reason: String,
    },
    /// Anything else (I/O, HTTP, a subprocess that could not start).
    #[error("{tool} failed: {reason}")]
    Failed {
        /// The tool.
        tool: String,
        /// What went wrong.
        reason: String,
    },
}

/// The catalog's definition of `name` (a native or an orchestration tool). Every such tool is in
/// the catalog (a unit test checks it); a missing one would get an empty schema rather than a
/// panic.
pub(crate) fn catalog_definition(name: &str) -> ToolDefinition {
    let catalog = taskforce_proto::catalog::native_tools()
        .into_iter()
        .chain(taskforce_proto::catalog::orchestration_tools());
    match catalog.into_iter().find(|t| t.name == name) {
        Some(t) => ToolDefinition {
            name: t.name.to_owned(),
            description: t.description.to_owned(),
            parameters: t.parameters_schema,
        },
        None => ToolDefinition {
            name: name.to_owned(),
            description: String::new(),
            parameters: serde_json::json!({ "type": "object", "properties": {} }),
        },
    }
}

/// A tool the loop can call.
pub trait Tool: Send + Sync + std::fmt::Debug {
    /// Name, description and JSON schema as the model sees them.
    fn definition(&self) -> &ToolDefinition;

    /// The name in allowlists and in the model's tool list (case-sensitive).
    fn name(&self) -> &str {
        &self.definition().name
    }

    /// Whether it can work in this executor (its program is installed): one that cannot is
    /// not offered to the model, which would only waste a call on it.
    fn available(&self) -> bool {
        true
    }

    /// True for tools that bound their own time (sub-agents run under their own budget, within
    /// their parent's): the loop then does not apply the per-call timeout.
    fn bounds_own_time(&self) -> bool {
        false
    }

    /// Where the tool comes from: the policy trusts only the executor's own tools by name.
    fn origin(&self) -> crate::policy::Origin {
        crate::policy::Origin::Executor
    }

    /// The global MCP server this tool belongs to when that server is strictly read-only
    /// (`MCP_M365_STRICT_READONLY`): its calls are checked as in `readOnly`, whatever the mode.
    fn strict_read_only(&self) -> Option<&str> {
        None
    }

    /// Runs one call. Must honour `ctx.cancel` and `ctx.limits`.
    fn call<'a>(
        &'a self,
        ctx: &'a ToolContext,
        arguments: Value,
    ) -> BoxFuture<'a, Result<ToolOutcome, ToolError>>;
}
