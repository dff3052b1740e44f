//! A stack: `registry-svc` (and optionally the `executor-svc` and the `gateway`) as real child
//! processes over one
//! temporary directory holding a copy of the sample configs and the sled data.

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use anyhow::{Context, bail};
use taskforce_proto::v1::agent_registry_client::AgentRegistryClient;
use tempfile::TempDir;
use tonic::transport::{Channel, Endpoint};
use tonic_health::pb::{
    HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
};

mod executor;

use crate::{
    paths,
    process::{ChildProcess, log_tail, wait_for_addr_file},
    wait::eventually,
};

/// How long a service may take to start on a busy machine.
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);
/// The gRPC service whose health decides the registry's readiness.
const REGISTRY_SERVICE: &str = "taskforce.v1.AgentRegistry";

/// What the gateway logs when its read model is complete (`gateway::read_model`).
pub const READ_MODEL_IN_SYNC: &str = "serving agent reads from the registry's change stream";
/// How the gateway's log line begins when its read model lost the change stream.
pub const READ_MODEL_LOST: &str = "lost the registry's change stream";

/// The address the last "metrics listening" line of a service's JSON log names: a port taken
/// when the service started (`--metrics-listen 127.0.0.1:0`), so no other process can have
/// taken it first, as a port probed free beforehand could be.
pub fn metrics_addr(log: &Path) -> anyhow::Result<SocketAddr> {
    let text =
        std::fs::read_to_string(log).with_context(|| format!("reading {}", log.display()))?;
    text.lines()
        .rev()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .find(|line| line["fields"]["message"] == "metrics listening")
        .and_then(|line| line["fields"]["addr"].as_str()?.parse().ok())
        .with_context(|| format!("{} names no metrics address", log.display()))
}

/// One thing the gateway's log says of its read model (see [`Stack::read_model_events`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadModelEvent {
    /// The copy became complete with this many agents.
    Synced {
        /// Agents in the copy.
        agents: u64,
    },
    /// The copy was dropped with the stream.
    Lost,
}

/// What to start, and how.
#[derive(Debug, Clone)]
pub struct StackOptions {
    /// Start the gateway too.
    pub gateway: bool,
    /// Copy the repository's `configs/` into the stack (else start from an empty config dir).
    pub sample_configs: bool,
    /// `--mcp-discovery-timeout-ms`.
    pub mcp_discovery_timeout_ms: Option<u64>,
    /// `--reconcile-interval-secs`.
    pub reconcile_interval_secs: Option<u64>,
    /// Written to `<config>/catalog/mcp_servers.yaml` (the global MCP servers).
    pub catalog_mcp_yaml: Option<String>,
    /// Extra environment of the registry process.
    pub registry_env: Vec<(String, String)>,
    /// Extra flags of the registry (`--metrics-listen 127.0.0.1:9999`, ...).
    pub registry_args: Vec<String>,
    /// `--max-body-bytes` of the gateway.
    pub max_body_bytes: Option<u64>,
    /// Extra flags of the gateway (`--chat-agent dev`, ...).
    pub gateway_args: Vec<String>,
    /// Extra environment of the gateway process.
    pub gateway_env: Vec<(String, String)>,
    /// Start the executor too (over the stack's registry and `<config>/llm_config.yaml`), and
    /// point the gateway's `--executor-url` at it.
    pub executor: bool,
    /// Extra environment of the executor process (API keys, `TASKFORCE_LLM_SCRIPT`, ...).
    pub executor_env: Vec<(String, String)>,
    /// Extra flags of the executor (`--tool-timeout-secs 2`, ...).
    pub executor_args: Vec<String>,
    /// Written to `<config>/llm_config.yaml` (replacing the sample's) before the executor starts.
    pub llm_config_yaml: Option<String>,
    /// Written to `<config>/mcp/global.yaml` (the executor's global MCP servers).
    pub global_mcp_yaml: Option<String>,
    /// Written to `e2e-llm-script.yaml` in the temp dir (outside the config dir, where the
    /// registry would read it as a profile), which `TASKFORCE_LLM_SCRIPT` then names: the script
    /// every scripted provider of the executor replays.
    pub llm_script_yaml: Option<String>,
    /// Instance names of several executors (see [`StackOptions::executors`]); empty: one
    /// unnamed executor.
    pub executor_names: Vec<String>,
}

impl Default for StackOptions {
    fn default() -> Self {
        Self {
            gateway: true,
            sample_configs: true,
            mcp_discovery_timeout_ms: None,
            reconcile_interval_secs: None,
            catalog_mcp_yaml: None,
            registry_env: Vec::new(),
            registry_args: Vec::new(),
            max_body_bytes: None,
            gateway_args: Vec::new(),
            gateway_env: Vec::new(),
            executor: false,
            executor_env: Vec::new(),
            executor_args: Vec::new(),
            llm_config_yaml: None,
            global_mcp_yaml: None,
            llm_script_yaml: None,
            executor_names: Vec::new(),
        }
    }
}

impl StackOptions {
    /// Registry and gateway over the sample configs.
    pub fn full() -> Self {
        Self::default()
    }

    /// The registry alone over the sample configs.
    pub fn registry_only() -> Self {
        Self {
            gateway: false,
            ..Self::default()
        }
    }

    /// Sets `--mcp-discovery-timeout-ms`.
    pub fn discovery_timeout_ms(mut self, ms: u64) -> Self {
        self.mcp_discovery_timeout_ms = Some(ms);
        self
    }

    /// Sets `--reconcile-interval-secs`.
    pub fn reconcile_interval_secs(mut self, secs: u64) -> Self {
        self.reconcile_interval_secs = Some(secs);
        self
    }

    /// Sets the global MCP servers file's content.
    pub fn catalog_mcp(mut self, yaml: impl Into<String>) -> Self {
        self.catalog_mcp_yaml = Some(yaml.into());
        self
    }

    /// Adds an environment variable to the registry process.
    pub fn registry_env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.registry_env.push((key.into(), value.into()));
        self
    }

    /// Adds an environment variable to every service of the stack (registry, executor, gateway).
    pub fn env_all(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        let (key, value) = (key.into(), value.into());
        self.registry_env.push((key.clone(), value.clone()));
        self.executor_env.push((key.clone(), value.clone()));
        self.gateway_env.push((key, value));
        self
    }

    /// Adds flags to the registry's command line.
    pub fn registry_args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.registry_args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Sets the gateway's `--max-body-bytes`.
    pub fn max_body_bytes(mut self, n: u64) -> Self {
        self.max_body_bytes = Some(n);
        self
    }

    /// Adds flags to the gateway's command line.
    pub fn gateway_args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.gateway_args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Starts the executor too (see [`StackOptions::executor`]).
    pub fn with_executor(mut self) -> Self {
        self.executor = true;
        self
    }

    /// Starts from an empty config directory instead of the sample configs.
    pub fn empty_configs(mut self) -> Self {
        self.sample_configs = false;
        self
    }

    /// Starts the stack.
    pub async fn spawn(self) -> anyhow::Result<Stack> {
        Stack::spawn(self).await
    }
}

/// Registry and gateway over a copy of the sample configs.
pub async fn spawn_stack() -> anyhow::Result<Stack> {
    Stack::spawn(StackOptions::full()).await
}

/// The registry alone over a copy of the sample configs.
pub async fn spawn_registry() -> anyhow::Result<Stack> {
    Stack::spawn(StackOptions::registry_only()).await
}

/// Running services over one temp dir; the children are killed on drop.
pub struct Stack {
    /// `None` once kept (`TEST_KEEP_DIRS=1`).
    dir: Option<TempDir>,
    root: PathBuf,
    config_dir: PathBuf,
    data_dir: PathBuf,
    opts: StackOptions,
    registry: Option<ChildProcess>,
    registry_addr: SocketAddr,
    channel: Channel,
    gateway: Option<ChildProcess>,
    gateway_addr: Option<SocketAddr>,
    executor: Option<ChildProcess>,
    executor_addr: Option<SocketAddr>,
    more_executors: Vec<executor::MoreExecutor>,
    http: reqwest::Client,
}

impl Stack {
    /// Creates the temp dir, copies the configs, starts the services and waits until ready.
    pub async fn spawn(opts: StackOptions) -> anyhow::Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("taskforce-e2e-")
            .tempdir()
            .context("creating the stack's temp dir")?;
        let root = dir.path().to_path_buf();
        let config_dir = root.join("configs");
        let data_dir = root.join("data").join("registry");
        if opts.sample_configs {
            paths::copy_dir(&paths::sample_configs(), &config_dir)
                .context("copying the sample configs")?;
        }
        std::fs::create_dir_all(config_dir.join("custom"))?;
        std::fs::create_dir_all(config_dir.join("catalog"))?;
        if let Some(yaml) = &opts.catalog_mcp_yaml {
            std::fs::write(config_dir.join("catalog").join("mcp_servers.yaml"), yaml)?;
        }
        if let Some(yaml) = &opts.llm_config_yaml {
            std::fs::write(config_dir.join("llm_config.yaml"), yaml)?;
        }
        if let Some(yaml) = &opts.global_mcp_yaml {
            std::fs::create_dir_all(config_dir.join("mcp"))?;
            std::fs::write(config_dir.join("mcp").join("global.yaml"), yaml)?;
        }
        if let Some(yaml) = &opts.llm_script_yaml {
            std::fs::write(root.join(executor::SCRIPT_FILE), yaml)?;
        }
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(60))
            .build()
            .context("building the HTTP client")?;
        let placeholder: SocketAddr = "127.0.0.1:1".parse()?;
        let mut stack = Self {
            dir: Some(dir),
            root,
            config_dir,
            data_dir,
            opts,
            registry: None,
            registry_addr: placeholder,
            channel: Endpoint::from_static("http://127.0.0.1:1").connect_lazy(),
            gateway: None,
            gateway_addr: None,
            executor: None,
            executor_addr: None,
            more_executors: Vec::new(),
            http,
        };
        stack.start_registry(None).await?;
        if stack.opts.executor {
            stack.start_executor(None).await?;
        }
        if stack.opts.gateway {
            stack.start_gateway().await?;
        }
        Ok(stack)
    }

    // ---- clients -----------------------------------------------------------------------

    /// A gRPC client of the registry (cheap; take a new one after a restart).
    pub fn registry(&self) -> AgentRegistryClient<Channel> {
        AgentRegistryClient::new(self.channel.clone())
    }

    /// A `grpc.health.v1` client of the registry.
    pub fn health(&self) -> HealthClient<Channel> {
        HealthClient::new(self.channel.clone())
    }

    /// The registry's address.
    pub fn registry_addr(&self) -> SocketAddr {
        self.registry_addr
    }

    /// The HTTP client (no proxy, 60 s timeout).
    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }

    /// The gateway's base URL, `http://127.0.0.1:PORT`.
    ///
    /// # Panics
    /// When the stack runs without a gateway (a bug in the test).
    pub fn gateway_url(&self) -> String {
        let addr = self
            .gateway_addr
            .expect("this stack was started without the gateway");
        format!("http://{addr}")
    }

    /// The gateway URL of `path` (which starts with `/`).
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.gateway_url())
    }

    // ---- directories -------------------------------------------------------------------

    /// The stack's temp dir.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The config dir (`--config-dir`).
    pub fn config_dir(&self) -> &Path {
        &self.config_dir
    }

    /// The custom agents directory.
    pub fn custom_dir(&self) -> PathBuf {
        self.config_dir.join("custom")
    }

    /// The sled directory (`--data-dir`).
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// The registry's log file.
    pub fn registry_log(&self) -> PathBuf {
        self.root.join("registry.log")
    }

    /// The gateway's log file.
    pub fn gateway_log(&self) -> PathBuf {
        self.root.join("gateway.log")
    }

    /// What the gateway's log says of its read model, in order: each time it became complete
    /// (with how many agents) and each time it lost the registry's change stream.
    pub fn read_model_events(&self) -> Vec<ReadModelEvent> {
        std::fs::read_to_string(self.gateway_log())
            .unwrap_or_default()
            .lines()
            .filter_map(|line| {
                let fields = serde_json::from_str::<serde_json::Value>(line).ok()?["fields"].take();
                match fields["message"].as_str()? {
                    READ_MODEL_IN_SYNC => Some(ReadModelEvent::Synced {
                        agents: fields["agents"].as_u64()?,
                    }),
                    m if m.starts_with(READ_MODEL_LOST) => Some(ReadModelEvent::Lost),
                    _ => None,
                }
            })
            .collect()
    }

    /// Where the registry serves `/metrics`: the stack has it pick a free port (unless the
    /// test names one), and its log says which.
    pub fn registry_metrics_addr(&self) -> anyhow::Result<SocketAddr> {
        metrics_addr(&self.registry_log())
    }

    /// The executor's log file.
    pub fn executor_log(&self) -> PathBuf {
        self.root.join("executor.log")
    }

    /// The executor's address, when the stack runs one.
    pub fn executor_addr(&self) -> Option<SocketAddr> {
        self.executor_addr
    }

    /// The tails of the logs, for failure messages.
    pub fn logs(&self) -> String {
        let mut out = log_tail("registry-svc", &self.registry_log(), 80);
        if self.opts.executor {
            out.push('\n');
            out.push_str(&log_tail("executor-svc", &self.executor_log(), 80));
        }
        for name in self.opts.executor_names.iter().skip(1) {
            out.push('\n');
            out.push_str(&log_tail(
                &format!("executor-svc {name}"),
                &self.executor_log_of(name),
                80,
            ));
        }
        if self.opts.gateway {
            out.push('\n');
            out.push_str(&log_tail("gateway", &self.gateway_log(), 80));
        }
        out
    }

    // ---- life cycle --------------------------------------------------------------------

    /// The registry's process id, while it runs.
    pub fn registry_pid(&self) -> Option<u32> {
        self.registry.as_ref().map(ChildProcess::id)
    }

    /// The gateway's process id, while it runs.
    pub fn gateway_pid(&self) -> Option<u32> {
        self.gateway.as_ref().map(ChildProcess::id)
    }

    /// Kills the registry with SIGKILL (no shutdown code runs).
    pub fn kill9(&mut self) -> anyhow::Result<()> {
        if let Some(mut child) = self.registry.take() {
            child.kill9().context("killing the registry")?;
        }
        Ok(())
    }

    /// Stops the gateway with SIGTERM; an error (after a SIGKILL) when it does not exit cleanly
    /// within 30 s.
    pub async fn stop_gateway(&mut self) -> anyhow::Result<()> {
        let child = self.gateway.take();
        self.terminate(child, "gateway", STARTUP_TIMEOUT).await
    }

    /// Stops `child` with SIGTERM; an error (after a SIGKILL) when it does not exit cleanly
    /// within `grace`.
    pub(crate) async fn terminate(
        &self,
        child: Option<ChildProcess>,
        name: &str,
        grace: Duration,
    ) -> anyhow::Result<()> {
        let Some(mut child) = child else {
            return Ok(());
        };
        match child.terminate(grace).await? {
            Some(status) if status.success() => Ok(()),
            Some(status) => bail!(
                "the {name} exited with {status} on SIGTERM\n{}",
                self.logs()
            ),
            None => bail!(
                "the {name} did not exit within {grace:?} of SIGTERM (killed)\n{}",
                self.logs()
            ),
        }
    }

    /// Stops the registry with SIGTERM; an error when it does not exit cleanly within 30 s.
    pub async fn stop(&mut self) -> anyhow::Result<()> {
        self.stop_within(STARTUP_TIMEOUT).await
    }

    /// Stops the registry with SIGTERM; an error (after a SIGKILL) when it does not exit
    /// cleanly within `grace`.
    pub async fn stop_within(&mut self, grace: Duration) -> anyhow::Result<()> {
        let child = self.registry.take();
        self.terminate(child, "registry", grace).await
    }

    /// Starts the registry again over the same config and data dirs (stopping it first with
    /// SIGTERM if it runs). It gets its old port back when possible, so the gateway keeps
    /// working; otherwise it takes a new port and the gateway is restarted to follow it.
    pub async fn restart(&mut self) -> anyhow::Result<()> {
        self.stop().await?;
        let old = self.registry_addr;
        match self.start_registry(Some(old)).await {
            Ok(()) => Ok(()),
            Err(first) => {
                self.start_registry(None)
                    .await
                    .with_context(|| format!("restarting on {old} failed first: {first:#}"))?;
                if self.gateway.is_some() {
                    if let Some(mut g) = self.gateway.take() {
                        g.kill9()?;
                    }
                    self.start_gateway().await?;
                }
                Ok(())
            }
        }
    }

    async fn start_registry(&mut self, port_of: Option<SocketAddr>) -> anyhow::Result<()> {
        let addr_file = self.root.join("registry.addr");
        let _ = std::fs::remove_file(&addr_file);
        let listen = port_of.map_or_else(|| "127.0.0.1:0".to_owned(), |a| a.to_string());
        let mut cmd = Command::new(paths::binary("registry-svc")?);
        cmd.arg("--listen")
            .arg(&listen)
            .arg("--addr-file")
            .arg(&addr_file)
            .arg("--config-dir")
            .arg(&self.config_dir)
            .arg("--data-dir")
            .arg(&self.data_dir);
        if let Some(ms) = self.opts.mcp_discovery_timeout_ms {
            cmd.arg("--mcp-discovery-timeout-ms").arg(ms.to_string());
        }
        if let Some(secs) = self.opts.reconcile_interval_secs {
            cmd.arg("--reconcile-interval-secs").arg(secs.to_string());
        }
        // Many registries run at once: each serves its metrics on a port of its own, unless the
        // test names one.
        if !self
            .opts
            .registry_args
            .iter()
            .any(|a| a == "--metrics-listen")
        {
            cmd.arg("--metrics-listen").arg("127.0.0.1:0");
        }
        cmd.args(&self.opts.registry_args);
        cmd.envs(self.opts.registry_env.iter().map(|(k, v)| (k, v)));
        let mut child = ChildProcess::spawn("registry-svc", cmd, &self.registry_log())?;
        let addr = wait_for_addr_file(&mut child, &addr_file, STARTUP_TIMEOUT).await?;
        let channel = Endpoint::from_shared(format!("http://{addr}"))?
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(60))
            .connect_lazy();
        let mut health = HealthClient::new(channel.clone());
        let ready = eventually(STARTUP_TIMEOUT, Duration::from_millis(50), || {
            let mut health = health.clone();
            async move {
                let req = HealthCheckRequest {
                    service: REGISTRY_SERVICE.to_owned(),
                };
                match health.check(req).await {
                    Ok(r) if r.get_ref().status == ServingStatus::Serving as i32 => Some(()),
                    _ => None,
                }
            }
        })
        .await;
        if ready.is_none() {
            let last = health
                .check(HealthCheckRequest {
                    service: REGISTRY_SERVICE.to_owned(),
                })
                .await;
            bail!(
                "registry at {addr} not SERVING within {STARTUP_TIMEOUT:?} (last answer: {last:?})\n{}",
                child.log_tail(60)
            );
        }
        self.registry = Some(child);
        self.registry_addr = addr;
        self.channel = channel;
        Ok(())
    }

    async fn start_gateway(&mut self) -> anyhow::Result<()> {
        let addr_file = self.root.join("gateway.addr");
        let _ = std::fs::remove_file(&addr_file);
        let mut cmd = Command::new(paths::binary("gateway")?);
        cmd.arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--addr-file")
            .arg(&addr_file)
            .arg("--registry-url")
            .arg(format!("http://{}", self.registry_addr));
        if let Some(n) = self.opts.max_body_bytes {
            cmd.arg("--max-body-bytes").arg(n.to_string());
        }
        // A stack without an executor says so: runs get 503 and `/readyz` checks only the
        // registry.
        cmd.arg("--executor-url")
            .arg(self.executor_urls().unwrap_or_default());
        cmd.args(&self.opts.gateway_args);
        cmd.envs(self.opts.gateway_env.iter().map(|(k, v)| (k, v)));
        let mut child = ChildProcess::spawn("gateway", cmd, &self.gateway_log())?;
        let addr = wait_for_addr_file(&mut child, &addr_file, STARTUP_TIMEOUT).await?;
        let url = format!("http://{addr}/readyz");
        let http = self.http.clone();
        let ready = eventually(STARTUP_TIMEOUT, Duration::from_millis(50), || {
            let (http, url) = (http.clone(), url.clone());
            async move {
                match http.get(&url).send().await {
                    Ok(r) if r.status().is_success() => Some(()),
                    _ => None,
                }
            }
        })
        .await;
        if ready.is_none() {
            let last = self.http.get(&url).send().await.map(|r| r.status());
            bail!(
                "gateway at {addr} not ready within {STARTUP_TIMEOUT:?} (last GET /readyz: {last:?})\n{}",
                child.log_tail(60)
            );
        }
        self.gateway = Some(child);
        self.gateway_addr = Some(addr);
        Ok(())
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        if let Some(mut g) = self.gateway.take() {
            let _ = g.kill9();
        }
        if let Some(mut e) = self.executor.take() {
            let _ = e.kill9();
        }
        for more in &mut self.more_executors {
            if let Some(mut e) = more.child.take() {
                let _ = e.kill9();
            }
        }
        if let Some(mut r) = self.registry.take() {
            // SIGKILL, not SIGTERM: a graceful stop waits for clients to close their HTTP/2
            // connections, and a current-thread test runtime is blocked right here. Tests that
            // need a graceful stop call `stop()`.
            let _ = r.kill9();
        }
        if std::thread::panicking() {
            eprintln!(
                "stack dir: {} (TEST_KEEP_DIRS=1 keeps it)\n{}",
                self.root.display(),
                self.logs()
            );
        }
        let keep = std::env::var("TEST_KEEP_DIRS").is_ok_and(|v| !v.is_empty() && v != "0");
        if keep && let Some(dir) = self.dir.take() {
            eprintln!("kept stack dir {}", dir.keep().display());
        }
    }
}
