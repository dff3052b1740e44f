//! executor-svc: runs agents and streams what happens.
//!
//! A run takes a mission for a registry agent (or a profile), asks the configured model, runs
//! the tool calls it makes (concurrently, each through one policy check and into the audit log),
//! and streams every step as a `taskforce.v1.RunEvent` until the final answer. Sessions live in
//! sled, so a run paused on a question continues with `Answer`, also after a restart. The
//! formats of `llm_config.yaml` and of scripts are in the crate's `README.md`.
//!
//! # Layout
//! - [`config`]: flags and environment.
//! - [`grpc`]: the `taskforce.v1.Executor` service, a thin layer over [`run::Runner`].
//! - [`run`](mod@run): starting, continuing and cancelling runs; the loop (one per frame: the
//!   top agent's and each sub-agent's), tool rounds, the event sink, delegations, answers.
//! - [`session`]: sessions in sled.
//! - [`plan`]: the todo plan and its patch engine (pure).
//! - [`token`]: signed state tokens naming a paused sub-agent frame.
//! - [`metrics`]: Prometheus metrics and the `/metrics` listener.
//! - [`redact`]: masks secrets (tokens, keys, IDs) in tool output before anything sees it.
//! - [`registry`]: the registry link: definitions (cached, invalidated by its watch stream) and
//!   BUSY/IDLE reports with a lease.
//! - [`agent`]: a registry agent as a run needs it (prompt, tools, workspace).
//! - [`policy`]: the one policy check every tool call passes: the run's mode (`readOnly`,
//!   `default`, `safeWrite`) against verbs, deny patterns and the operator's write allowlist.
//! - [`audit`]: one audit line per tool call (target `audit`).
//! - [`llm`]: providers, their configuration, and the model router.
//!   - `llm::types`: messages, tools, requests, stream events; `llm::error`: `LlmError`.
//!   - `llm::config`, `llm::env`, `llm::router`: `llm_config.yaml`, keys and overrides from the
//!     environment, aliases resolved to a provider, the scripted fallback.
//!   - `llm::openai`, `llm::anthropic`: the HTTP clients, each a request builder (`mod.rs`) and a
//!     stream decoder (`decode.rs`); `llm::http` (retries, timeouts, error bodies), `llm::stream`
//!     (body → events) and `llm::sse` (event-stream parsing) are shared by both.
//!   - `llm::scripted`: deterministic replay of a YAML script.
//! - [`tools`]: the [`tools::Tool`] trait every native and MCP tool implements;
//!   `tools::native`: the nine native tools (files, python, git, web, GitHub, PowerShell, ask_user);
//!   `tools::mcp`: the tools of an agent's `mcp_servers`, over one pooled connection per server;
//!   `tools::global`: the executor's global MCP servers (connected at start, health-checked);
//!   `tools::orchestration`: sub-agents as tools (`agent_<id>`), `delegate_to_agent`,
//!   `update_todolist`, reaching the run through the `Orchestrate` handle.
//! - [`error`]: the crate's error type and its gRPC mapping.
//!
//! Binaries: `main.rs` (`executor-svc`) and `bin/taskforce-sandbox.rs`, the launcher that
//! confines the `python`, `git` and `powershell` subprocesses before it `exec`s them.

pub mod agent;
pub mod audit;
pub mod config;
pub mod error;
pub mod grpc;
pub mod llm;
pub mod metrics;
pub mod plan;
pub mod policy;
pub mod redact;
pub mod registry;
pub mod run;
pub mod session;
pub mod token;
pub mod tools;

use std::{sync::Arc, time::Duration};

use futures::future::OptionFuture;

use taskforce_proto::v1::executor_server::ExecutorServer;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

pub use config::Config;
pub use error::ExecutorError;

use crate::{llm::LlmRouter, tools::Tool};

/// How long a stop waits for runs to send their last event and for connections to close.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// What a server runs with besides its configuration: the model router and the tools.
#[derive(Debug)]
pub struct Parts {
    /// Providers and model aliases.
    pub router: Arc<LlmRouter>,
    /// Every tool the executor offers; agents get those their definition allows.
    pub tools: Vec<Arc<dyn Tool>>,
}

impl Parts {
    /// The router from `config.llm_config` and the nine native tools (configured by
    /// `config.tools`, see [`tools::native::NativeToolsArgs`]); fails when the subprocess
    /// tools' sandbox cannot be had as configured.
    pub fn from_config(config: &Config) -> Result<Self, ExecutorError> {
        // The providers' keys are never an MCP server's to read (`${VAR}` of an agent's server).
        // A file that is not YAML fails just below, naming the problem.
        if let Ok(text) = taskforce_runtime::read_config(&config.llm_config) {
            let _ = taskforce_runtime::env::reserve_secrets_of_llm_config(&text);
        }
        let router = Arc::new(LlmRouter::from_file(&config.llm_config)?);
        metrics::init(router.provider_names().iter().map(String::as_str));
        let mut native = config.tools.config();
        native.sandbox.hidden = config.hidden_paths();
        native.sandbox.temp_root = Some(tool_temp_root(&config.data_dir)?);
        native
            .check()
            .map_err(|e| ExecutorError::Config(format!("tool sandbox: {e}")))?;
        Ok(Self {
            router,
            tools: tools::native::native_tools(&native),
        })
    }
}

/// The tools' temp dirs' directory, `<data dir>/tmp`, made if missing.
const TOOL_TEMP: &str = "tmp";

/// Removes what the tools' temp dirs' directory holds: the temp dirs of calls of an executor
/// that was killed. Only once the data directory is this executor's (its store is open).
fn empty_tool_temp_root(data_dir: &std::path::Path) {
    let root = data_dir.join(TOOL_TEMP);
    let Ok(entries) = std::fs::read_dir(&root) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if let Err(e) = std::fs::remove_dir_all(&path) {
            warn!(path = %path.display(), error = %e, "could not remove a tool's temp dir left by a previous executor");
        }
    }
}

fn tool_temp_root(data_dir: &std::path::Path) -> Result<std::path::PathBuf, ExecutorError> {
    use std::os::unix::fs::DirBuilderExt;
    let root = std::path::absolute(data_dir.join(TOOL_TEMP))
        .map_err(|e| ExecutorError::Config(format!("--data-dir: {e}")))?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&root)
        .map_err(|e| {
            ExecutorError::Config(format!("the tools' temp dir {}: {e}", root.display()))
        })?;
    // Each call's `TMPDIR` is `<root>/tf-<12 characters>`.
    let longest = root.as_os_str().len() + "/tf-000000000000".len();
    if longest > tools::native::TEMP_PATH_ROOM {
        warn!(
            temp_dir = %root.display(),
            "the tools' TMPDIR will be {longest} bytes long, more than {}: programs that make \
             Unix sockets there (Python's multiprocessing) may fail with \"AF_UNIX path too \
             long\"; a shorter --data-dir avoids it",
            tools::native::TEMP_PATH_ROOM
        );
    }
    Ok(root)
}

/// Serves the executor on `listener` until `shutdown` fires, with the configured LLM router and
/// tools.
pub async fn run(
    listener: TcpListener,
    config: Config,
    shutdown: CancellationToken,
) -> Result<(), ExecutorError> {
    let parts = Parts::from_config(&config)?;
    run_with(listener, config, parts, shutdown).await
}

/// Serves the executor on `listener` with these `parts` until `shutdown` fires; live runs end
/// with `Done{CANCELLED}`, then sessions are flushed.
pub async fn run_with(
    listener: TcpListener,
    config: Config,
    parts: Parts,
    shutdown: CancellationToken,
) -> Result<(), ExecutorError> {
    let keys = config
        .auth
        .keys(
            "executor-svc",
            &[listener
                .local_addr()
                .map_err(|e| ExecutorError::Config(format!("listener: {e}")))?],
        )
        .map_err(|e| ExecutorError::Config(e.to_string()))?;
    let service_token = config
        .auth
        .outgoing()
        .map_err(|e| ExecutorError::Config(e.to_string()))?;
    let data_dir = config.data_dir.clone();
    let store =
        tokio::task::spawn_blocking(move || session::SessionStore::open(&data_dir)).await??;
    let data_dir = config.data_dir.clone();
    tokio::task::spawn_blocking(move || empty_tool_temp_root(&data_dir)).await?;
    let ledger = config.data_dir.join("subprocesses");
    let killed = tokio::task::spawn_blocking(move || tools::native::ledger::install(&ledger))
        .await?
        .map_err(|e| ExecutorError::Config(format!("subprocess ledger: {e}")))?;
    if killed > 0 {
        warn!(
            killed,
            "killed tool subprocesses a previous executor left running"
        );
    }
    let model = parts.router.resolve(None)?;
    info!(provider = model.provider.name(), model = %model.model, "default model");
    if let Some(reason) = parts.router.scripted_reason() {
        warn!(reason = %reason, "the default model runs on the scripted provider: answers are replayed, no LLM is called");
    }
    let registry = registry::Registry::new(
        &config.registry_url,
        Duration::from_millis(config.registry_timeout_ms),
        config.busy_lease_secs,
        config.instance.as_deref(),
        service_token,
    )?;
    let tasks = CancellationToken::new();
    let global = tools::global::GlobalSettings::load(&config.global_mcp_config, |k| {
        if k == "AGENT_ENABLE" {
            Some(config.agent_enable.clone())
        } else {
            std::env::var(k).ok()
        }
    })
    .map_err(ExecutorError::Config)?;
    let mcp = Arc::new(tools::mcp::McpPool::with_global(
        config.mcp_timeouts(),
        &global,
    ));
    info!(servers = ?mcp.global().names(), "global MCP servers");
    let reaper = tokio::spawn(Arc::clone(&mcp).reap_until(tasks.clone()));
    let supervisor = tokio::spawn(Arc::clone(mcp.global()).supervise(tasks.clone()));
    store.set_limits(
        config.max_stored_sessions,
        config.max_session_store_mb.saturating_mul(1024 * 1024),
    );
    let expiry = (config.session_ttl_hours > 0
        || config.max_stored_sessions > 0
        || config.max_session_store_mb > 0)
        .then(|| {
            let ttl = (config.session_ttl_hours > 0)
                .then(|| Duration::from_secs(config.session_ttl_hours.saturating_mul(3600)));
            tokio::spawn(store.clone().expire_until(ttl, tasks.clone()))
        });
    let budgets = run::Budgets {
        max_steps: config.max_steps,
        max_duration: config.run_budget(),
        tool_limits: config.tool_limits(),
        workspaces: config.data_dir.join("workspaces"),
        hidden: tools::canonical_paths(config.hidden_paths()),
        instance: config.instance.clone(),
        max_live_runs: config.max_live_runs as usize,
        max_events_per_second: config.max_events_per_second,
        delegation: config.delegation_limits(),
        policy: policy::Policy::new(&policy::PolicyConfig::from_env()),
        memory_messages: config.memory_messages,
        redactor: redact::Redactor::new(
            &redact::RedactConfig::from_env().map_err(|e| ExecutorError::Config(e.to_string()))?,
        )
        .map_err(|e| ExecutorError::Config(format!("AGENT_REDACT_PATTERNS: {e}")))?,
    };
    let metrics = taskforce_runtime::metrics::listen(
        &config.metrics_listen,
        metrics::router(Arc::clone(mcp.global()), store.fault().clone()),
        tasks.clone(),
    )
    .await
    .map_err(ExecutorError::Config)?;
    // Once nothing of the start can fail: a start refused for its configuration ends no hold.
    let release = tokio::spawn(
        registry
            .clone()
            .release_previous_holds(store.interrupted_agents().to_vec(), tasks.clone()),
    );
    let watch = tokio::spawn(registry.clone().watch(tasks.clone()));
    let idle_reports = tokio::spawn(registry.clone().report_idle(tasks.clone()));
    let runner = Arc::new(run::Runner::new(
        parts.router,
        parts.tools,
        Arc::clone(&mcp),
        store,
        registry,
        budgets,
        shutdown.child_token(),
    ));
    // Questions nobody answers do not keep their sessions forever.
    let unanswered = config
        .paused_ttl()
        .map(|ttl| tokio::spawn(Arc::clone(&runner).expire_paused_until(ttl, tasks.clone())));

    let draining = Arc::clone(&runner);
    let fault = runner.store().fault().clone();
    // Runs are cancelled with the shutdown; they get to send `Done` before streams close, and
    // connections that stay open (idle HTTP/2 clients) get a grace period, then are dropped.
    let result = taskforce_runtime::serve_grpc(
        // A call's request must arrive, and its handler answer (a run answers with its stream
        // at once), within a minute: a client sending half a request holds nothing for long.
        tonic::transport::Server::builder().timeout(std::time::Duration::from_secs(60)),
        listener,
        ExecutorServer::new(grpc::ExecutorService::new(Arc::clone(&runner))),
        keys,
        shutdown,
        async move {
            if !draining.drain(SHUTDOWN_GRACE).await {
                warn!("runs still going after the grace period");
            }
        },
        SHUTDOWN_GRACE * 2,
        fault,
    )
    .await;
    tasks.cancel();
    if let Err(e) = watch.await {
        warn!(error = %e, "registry watch task failed");
    }
    if let Err(e) = release.await {
        warn!(error = %e, "hold release task failed");
    }
    if let Err(e) = idle_reports.await {
        warn!(error = %e, "status report task failed");
    }
    if let Err(e) = reaper.await {
        warn!(error = %e, "MCP reaper task failed");
    }
    if let Err(e) = supervisor.await {
        warn!(error = %e, "global MCP supervisor failed");
    }
    // Its open connections get a graceful end; one that will not end holds the stop no longer
    // than the exit wait.
    let metrics = OptionFuture::from(metrics);
    if let Ok(Some(Err(e))) = tokio::time::timeout(taskforce_runtime::EXIT_WAIT, metrics).await {
        warn!(error = %e, "metrics task failed");
    }
    if let Some(Err(e)) = OptionFuture::from(expiry).await {
        warn!(error = %e, "session expiry task failed");
    }
    if let Some(Err(e)) = OptionFuture::from(unanswered).await {
        warn!(error = %e, "paused-session expiry task failed");
    }
    runner.drain(SHUTDOWN_GRACE).await;
    mcp.close().await;
    let store = runner.store().clone();
    drop(runner);
    // A full or failing disk can keep sled's flush from ever returning: the stop goes on.
    let flushed = store.flush().await;
    info!("executor stopped");
    result?;
    flushed
}
