//! registry-svc: owns agent definitions and the tool catalog.
//!
//! Source of truth is YAML on disk (`configs/custom/{agent_id}.yaml` for custom agents,
//! `configs/{profile}.yaml` for profiles); sled is a cache and index, reconciled on start, kept
//! current by a file watcher, and rebuilt from YAML when it cannot be opened.
//!
//! # Layout
//! - [`config`]: flags and environment.
//! - [`definition`]: the YAML shapes and their validation rules.
//! - [`convert`]: YAML shapes ⇄ protobuf messages.
//! - [`files`]: atomic durable writes, scans, content versions.
//! - [`store`]: the sled-backed store; every mutation goes through it under one lock.
//! - [`watcher`]: file watcher plus periodic reconcile.
//! - [`mcp`]: MCP discovery through `rmcp`.
//! - [`metadata`]: workspace metadata from the tasks of a workspace's Taskfile, run with `task`, cached.
//! - [`catalog`]: the tool catalog and MCP allowlist validation.
//! - [`grpc`]: the `taskforce.v1.AgentRegistry` service.
//! - [`metrics`]: Prometheus metrics and the `/metrics` listener.
//! - [`error`]: the crate's error type.

pub mod catalog;
pub mod config;
pub mod convert;
pub mod definition;
pub mod error;
pub mod files;
pub mod grpc;
pub mod mcp;
pub mod metadata;
pub mod metrics;
pub mod store;
pub mod watcher;

use std::{sync::Arc, time::Duration};

use taskforce_proto::v1::agent_registry_server::AgentRegistryServer;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::info;

pub use config::Config;
pub use error::RegistryError;

/// How long a stop waits for open connections before dropping them.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Serves the registry on `listener` until `shutdown` fires, then stops every background task
/// and flushes the cache.
pub async fn run(
    listener: TcpListener,
    config: Config,
    shutdown: CancellationToken,
) -> Result<(), RegistryError> {
    let started = std::time::Instant::now();
    let keys = config
        .auth
        .keys(
            "registry-svc",
            &[listener
                .local_addr()
                .map_err(|e| RegistryError::Config(format!("listener: {e}")))?],
        )
        .map_err(|e| RegistryError::Config(e.to_string()))?;
    // A mistyped directory would otherwise be made, and an empty registry served from it.
    if !config.config_dir.is_dir() {
        return Err(RegistryError::Config(format!(
            "--config-dir (TASKFORCE_CONFIG_DIR) {} is not a directory: point it at the \
             directory that holds the profiles and custom/ (create it first for an empty registry)",
            config.config_dir.display()
        )));
    }
    if let Some(launcher) = config.task_launcher.as_deref()
        && !launcher.is_file()
    {
        return Err(RegistryError::Config(format!(
            "--task-launcher (TASKFORCE_TASK_LAUNCHER) {} does not exist",
            launcher.display()
        )));
    }
    // Read before the cache is rebuilt, so a bad file stops the start at once.
    let global = catalog::GlobalMcpFile::load(&config.catalog_file()).map_err(|e| {
        RegistryError::Config(format!(
            "--catalog-mcp-file (TASKFORCE_CATALOG_MCP_FILE): {e}"
        ))
    })?;
    // The model providers' keys (the variables the executor's llm_config.yaml names for them)
    // are never an MCP server's to read, here or in the executor.
    let llm_config = config
        .llm_config
        .clone()
        .unwrap_or_else(|| config.config_dir.join("llm_config.yaml"));
    let named = config.llm_config.is_some();
    // The executor's variable, in an environment file both services share: not read here.
    if !named && std::env::var_os("TASKFORCE_LLM_CONFIG").is_some() {
        tracing::warn!(
            "TASKFORCE_LLM_CONFIG is the executor's setting; the registry reads \
             TASKFORCE_REGISTRY_LLM_CONFIG (or --llm-config), so it uses {}",
            config.config_dir.join("llm_config.yaml").display()
        );
    }
    let problem = match taskforce_runtime::read_config(&llm_config) {
        Ok(text) => taskforce_runtime::env::reserve_secrets_of_llm_config(&text)
            .err()
            .map(|e| {
                format!(
                    "is not YAML ({e}); the ${{VAR}}s and api_key_env names written in it are \
                     still refused in MCP servers"
                )
            }),
        Err(e) if named => Some(e.to_string()),
        Err(_) => None,
    };
    if let Some(problem) = problem {
        let what = format!(
            "--llm-config (TASKFORCE_REGISTRY_LLM_CONFIG) {}: {problem}",
            llm_config.display()
        );
        if named {
            return Err(RegistryError::Config(what));
        }
        tracing::warn!("{what}");
    }
    let (root, data) = (config.config_dir.clone(), config.data_dir.clone());
    let store =
        Arc::new(tokio::task::spawn_blocking(move || store::Store::open(&root, &data)).await??);
    store.set_max_custom_bytes(config.max_custom_agents_mb.saturating_mul(1024 * 1024));
    let installed = watcher::install(&store);
    let reconciling = Arc::clone(&store);
    let stats = tokio::task::spawn_blocking(move || reconciling.reconcile_all()).await??;
    metrics::reconciled();
    info!(?stats, "reconciled cache with the config directory");
    let (profiles, customs) = store.counts();
    info!(
        profiles,
        customs,
        elapsed_ms = started.elapsed().as_millis(),
        "registry cache ready"
    );

    let catalog = Arc::new(catalog::ToolCatalog::new(Duration::from_millis(
        config.mcp_discovery_timeout_ms,
    )));

    let tasks = CancellationToken::new();
    let discovery = tokio::spawn(Arc::clone(&catalog).run_global_discovery(
        global.mcp_servers,
        Duration::from_secs(config.catalog_refresh_secs),
        tasks.clone(),
    ));
    let watch = tokio::spawn(watcher::run(
        Arc::clone(&store),
        installed,
        Duration::from_secs(config.reconcile_interval_secs.max(1)),
        tasks.clone(),
    ));

    let metadata = Arc::new(metadata::Collector::new(config.metadata_settings()));
    let service = grpc::RegistryService::new(Arc::clone(&store), catalog, metadata, tasks.clone());

    let metrics_task = taskforce_runtime::metrics::listen(
        &config.metrics_listen,
        metrics::router(Arc::clone(&store)),
        tasks.clone(),
    )
    .await
    .map_err(RegistryError::Config)?;
    let stop_tasks = tasks.clone();
    // Connections that stay open (idle HTTP/2 clients, watch streams) get a grace period, then
    // are dropped: a stop must not wait for clients.
    let result = taskforce_runtime::serve_grpc(
        tonic::transport::Server::builder().timeout(Duration::from_secs(60)),
        listener,
        AgentRegistryServer::new(service),
        keys,
        shutdown,
        async move { stop_tasks.cancel() },
        SHUTDOWN_GRACE,
        store.fault().clone(),
    )
    .await;
    // The server may have ended on its own: the background tasks stop with it.
    tasks.cancel();
    let _ = tokio::join!(discovery, watch);
    // Its open connections get a graceful end; one that will not end holds the stop no longer
    // than the exit wait.
    if let Some(task) = metrics_task {
        let _ = tokio::time::timeout(taskforce_runtime::EXIT_WAIT, task).await;
    }
    // A full or failing disk can keep sled's flush from ever returning: the stop goes on (the
    // cache is reconciled with the files at the next start).
    let flushed = match tokio::time::timeout(
        taskforce_runtime::EXIT_WAIT,
        tokio::task::spawn_blocking(move || store.flush()),
    )
    .await
    {
        Ok(flushed) => flushed?,
        Err(_) => {
            tracing::error!(
                "the cache did not finish its last flush in time; the next start reconciles it with the files"
            );
            Ok(())
        }
    };
    info!("registry stopped");
    result.map_err(|e| RegistryError::Config(e.to_string()))?;
    flushed
}
