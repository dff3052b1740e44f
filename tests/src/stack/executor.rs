//! The executor's part of a stack: its options (environment, flags, `llm_config.yaml`), a gRPC
//! client, and stopping, killing and restarting the `executor-svc` binary alone over the same
//! data dir (sessions survive in its sled store).

use std::{net::SocketAddr, path::PathBuf, process::Command, time::Duration};

use anyhow::{Context, bail};
use taskforce_proto::v1::executor_client::ExecutorClient;
use tonic::transport::{Channel, Endpoint};
use tonic_health::pb::{
    HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
};

use super::{STARTUP_TIMEOUT, Stack, StackOptions};
use crate::{
    paths,
    process::{ChildProcess, wait_for_addr_file},
    wait::eventually,
};

/// The gRPC service whose health decides the executor's readiness.
const EXECUTOR_SERVICE: &str = "taskforce.v1.Executor";

/// The scripted provider's script in the temp dir (see [`StackOptions::llm_script`]).
pub(super) const SCRIPT_FILE: &str = "e2e-llm-script.yaml";

/// Variables of the developer's shell that would change which LLM the executor calls; removed
/// from its environment so a stack runs on what the test configured (see
/// `executor-svc/README.md`, "Environment, read at start").
const LLM_VARS: [&str; 7] = [
    "TASKFORCE_LLM_PROVIDER",
    "TASKFORCE_LLM_MODEL",
    "TASKFORCE_LLM_SCRIPT",
    "OPENAI_BASE_URL",
    "ANTHROPIC_BASE_URL",
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
];

/// Variables of the developer's shell that would change the executor's global MCP servers and
/// policy; removed likewise (a test sets what it needs with `executor_env`).
const GLOBAL_MCP_VARS: [&str; 10] = [
    "AGENT_ENABLE",
    "AGENT_COMMAND_PROGRAMS",
    "AGENT_WRITE_OPTIONS",
    "MCP_M365_START_CMD",
    "MCP_M365_STRICT_READONLY",
    "MCP_M365_HEALTH_INTERVAL_MS",
    "AGENT_WRITE_ALLOWLIST",
    "AGENT_READ_TOOLS",
    "AGENT_REDACT",
    "TASKFORCE_GLOBAL_MCP_CONFIG",
];

impl StackOptions {
    /// Adds an environment variable to the executor process.
    pub fn executor_env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.executor_env.push((key.into(), value.into()));
        self
    }

    /// Adds flags to the executor's command line.
    pub fn executor_args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.executor_args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Makes every scripted provider of the executor replay this script (YAML, see
    /// `executor-svc/README.md`), through `TASKFORCE_LLM_SCRIPT`.
    pub fn llm_script(mut self, yaml: impl Into<String>) -> Self {
        self.llm_script_yaml = Some(yaml.into());
        self
    }

    /// Sets the content of `<config>/mcp/global.yaml` (the executor's global MCP servers).
    pub fn global_mcp(mut self, yaml: impl Into<String>) -> Self {
        self.global_mcp_yaml = Some(yaml.into());
        self
    }

    /// Runs several executors with these instance names (`--instance`) behind the gateway, which
    /// lists them as `NAME=URL`; the first is the one [`Stack::executor`] talks to.
    pub fn executors<I, S>(mut self, names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.executor = true;
        self.executor_names = names.into_iter().map(Into::into).collect();
        self
    }

    /// Sets the content of `<config>/llm_config.yaml`.
    pub fn llm_config(mut self, yaml: impl Into<String>) -> Self {
        self.llm_config_yaml = Some(yaml.into());
        self
    }
}

impl Stack {
    /// A gRPC client of the executor (cheap; take a new one after a restart).
    ///
    /// # Panics
    /// When the stack runs without an executor (a bug in the test).
    pub fn executor(&self) -> ExecutorClient<Channel> {
        let addr = self
            .executor_addr
            .expect("this stack was started without the executor");
        let channel = Endpoint::from_shared(format!("http://{addr}"))
            .expect("a valid URL")
            .connect_timeout(Duration::from_secs(5))
            .connect_lazy();
        ExecutorClient::new(channel)
    }

    /// The executor's process id, while it runs.
    pub fn executor_pid(&self) -> Option<u32> {
        self.executor.as_ref().map(ChildProcess::id)
    }

    /// The executor's `--data-dir` (sessions, default workspaces).
    pub fn executor_data_dir(&self) -> PathBuf {
        self.root.join("data").join("executor")
    }

    /// The workspace of an agent whose definition names none.
    pub fn executor_workspace(&self, agent_id: &str) -> PathBuf {
        self.executor_data_dir().join("workspaces").join(agent_id)
    }

    /// Kills the executor with SIGKILL (no shutdown code runs).
    pub fn kill9_executor(&mut self) -> anyhow::Result<()> {
        if let Some(mut child) = self.executor.take() {
            child.kill9().context("killing the executor")?;
        }
        Ok(())
    }

    /// Stops the executor with SIGTERM; an error (after a SIGKILL) when it does not exit cleanly
    /// within 30 s.
    pub async fn stop_executor(&mut self) -> anyhow::Result<()> {
        let child = self.executor.take();
        self.terminate(child, "executor", STARTUP_TIMEOUT).await
    }

    /// Starts the executor again over the same data dir (stopping it first with SIGTERM if it
    /// runs). It gets its old port back when possible, so the gateway keeps working; otherwise
    /// it takes a new port and the gateway is restarted to follow it.
    pub async fn restart_executor(&mut self) -> anyhow::Result<()> {
        self.stop_executor().await?;
        let old = self
            .executor_addr
            .context("this stack was started without the executor")?;
        match self.start_executor(Some(old)).await {
            Ok(()) => Ok(()),
            Err(first) => {
                self.start_executor(None)
                    .await
                    .with_context(|| format!("restarting on {old} failed first: {first:#}"))?;
                if let Some(mut g) = self.gateway.take() {
                    g.kill9()?;
                    self.start_gateway().await?;
                }
                Ok(())
            }
        }
    }

    /// Starts `executor-svc` over the stack's registry and config dir, with its sessions in the
    /// temp dir and the stack's `llm_config.yaml` (the sample one runs offline on the scripted
    /// provider), and waits until its health says SERVING. With [`StackOptions::executors`] it
    /// is the first named executor, and the others start too.
    pub(super) async fn start_executor(
        &mut self,
        port_of: Option<SocketAddr>,
    ) -> anyhow::Result<()> {
        let first = self.opts.executor_names.first().cloned();
        let (child, addr) = self.spawn_executor(first.as_deref(), true, port_of).await?;
        self.executor = Some(child);
        self.executor_addr = Some(addr);
        if self.more_executors.is_empty() {
            for name in self.opts.executor_names.clone().iter().skip(1) {
                let (child, addr) = self.spawn_executor(Some(name), false, None).await?;
                self.more_executors.push(MoreExecutor {
                    name: name.clone(),
                    child: Some(child),
                    addr,
                });
            }
        }
        Ok(())
    }

    /// The executors as the gateway's `--executor-url` lists them.
    pub(super) fn executor_urls(&self) -> Option<String> {
        let first = self.executor_addr?;
        let Some(name) = self.opts.executor_names.first() else {
            return Some(format!("http://{first}"));
        };
        let mut urls = format!("{name}=http://{first}");
        for more in &self.more_executors {
            urls.push_str(&format!(",{}=http://{}", more.name, more.addr));
        }
        Some(urls)
    }

    /// The address of executor `name` (see [`StackOptions::executors`]).
    pub fn executor_addr_of(&self, name: &str) -> Option<SocketAddr> {
        if self.opts.executor_names.first().is_some_and(|n| n == name) {
            return self.executor_addr;
        }
        self.more_executors
            .iter()
            .find(|m| m.name == name)
            .map(|m| m.addr)
    }

    /// The data dir of executor `name` (the first one's is [`Stack::executor_data_dir`]).
    pub fn executor_data_dir_of(&self, name: &str) -> PathBuf {
        if self.opts.executor_names.first().is_some_and(|n| n == name) {
            self.executor_data_dir()
        } else {
            self.root.join("data").join(format!("executor-{name}"))
        }
    }

    /// Where the executor serves `/metrics` (see [`Stack::registry_metrics_addr`]).
    pub fn executor_metrics_addr(&self) -> anyhow::Result<SocketAddr> {
        super::metrics_addr(&self.executor_log())
    }

    /// The log file of executor `name` (see [`StackOptions::executors`]).
    pub fn executor_log_of(&self, name: &str) -> PathBuf {
        if self.opts.executor_names.first().is_some_and(|n| n == name) {
            self.executor_log()
        } else {
            self.root.join(format!("executor-{name}.log"))
        }
    }

    /// Stops executor `name` with SIGTERM (the first one stops like [`Stack::stop_executor`]).
    pub async fn stop_executor_of(&mut self, name: &str) -> anyhow::Result<()> {
        let Some(i) = self.more_executors.iter().position(|m| m.name == name) else {
            return self.stop_executor().await;
        };
        let child = self.more_executors[i].child.take();
        self.terminate(child, "executor", STARTUP_TIMEOUT).await
    }

    /// Restarts executor `name` (SIGTERM, then the same data dir and port); the first one
    /// restarts like [`Stack::restart_executor`].
    pub async fn restart_executor_of(&mut self, name: &str) -> anyhow::Result<()> {
        let Some(i) = self.more_executors.iter().position(|m| m.name == name) else {
            return self.restart_executor().await;
        };
        self.stop_executor_of(name).await?;
        let addr = self.more_executors[i].addr;
        let (child, _) = self.spawn_executor(Some(name), false, Some(addr)).await?;
        self.more_executors[i].child = Some(child);
        Ok(())
    }

    async fn spawn_executor(
        &self,
        name: Option<&str>,
        first: bool,
        port_of: Option<SocketAddr>,
    ) -> anyhow::Result<(ChildProcess, SocketAddr)> {
        let (addr_file, data_dir, log) = match name {
            Some(name) if !first => (
                self.root.join(format!("executor-{name}.addr")),
                self.executor_data_dir_of(name),
                self.executor_log_of(name),
            ),
            _ => (
                self.root.join("executor.addr"),
                self.executor_data_dir(),
                self.executor_log(),
            ),
        };
        let _ = std::fs::remove_file(&addr_file);
        let listen = port_of.map_or_else(|| "127.0.0.1:0".to_owned(), |a| a.to_string());
        let mut cmd = Command::new(paths::binary("executor-svc")?);
        cmd.arg("--listen")
            .arg(&listen)
            .arg("--addr-file")
            .arg(&addr_file)
            .arg("--registry-url")
            .arg(format!("http://{}", self.registry_addr))
            .arg("--data-dir")
            .arg(data_dir)
            .arg("--llm-config")
            .arg(self.config_dir.join("llm_config.yaml"))
            .arg("--global-mcp-config")
            .arg(self.config_dir.join("mcp").join("global.yaml"));
        if let Some(name) = name {
            cmd.arg("--instance").arg(name);
        }
        // Many executors run at once: each serves its metrics on a port of its own, unless the
        // test names one.
        if !self
            .opts
            .executor_args
            .iter()
            .any(|a| a == "--metrics-listen")
        {
            cmd.arg("--metrics-listen").arg("127.0.0.1:0");
        }
        cmd.args(&self.opts.executor_args);
        for var in LLM_VARS {
            cmd.env_remove(var);
        }
        if self.opts.llm_script_yaml.is_some() {
            cmd.env("TASKFORCE_LLM_SCRIPT", self.root.join(SCRIPT_FILE));
        }
        // The built-in `m365` global server would start `npx` in every stack: tests that want
        // it turn it on (with `MCP_M365_START_CMD`).
        cmd.env("MCP_M365_ENABLE", "0");
        for var in GLOBAL_MCP_VARS {
            cmd.env_remove(var);
        }
        cmd.envs(self.opts.executor_env.iter().map(|(k, v)| (k, v)));
        let mut child = ChildProcess::spawn("executor-svc", cmd, &log)?;
        let addr = wait_for_addr_file(&mut child, &addr_file, STARTUP_TIMEOUT).await?;
        wait_serving(&mut child, addr).await?;
        Ok((child, addr))
    }
}

/// An executor besides the first (see [`StackOptions::executors`]).
pub(super) struct MoreExecutor {
    name: String,
    pub(super) child: Option<ChildProcess>,
    addr: SocketAddr,
}

/// Waits until the executor's health says SERVING (its session store is open).
async fn wait_serving(child: &mut ChildProcess, addr: SocketAddr) -> anyhow::Result<()> {
    let channel = Endpoint::from_shared(format!("http://{addr}"))?
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(10))
        .connect_lazy();
    let health = HealthClient::new(channel);
    let ready = eventually(STARTUP_TIMEOUT, Duration::from_millis(50), || {
        let mut health = health.clone();
        async move {
            let req = HealthCheckRequest {
                service: EXECUTOR_SERVICE.to_owned(),
            };
            match health.check(req).await {
                Ok(r) if r.get_ref().status == ServingStatus::Serving as i32 => Some(()),
                _ => None,
            }
        }
    })
    .await;
    if ready.is_none() {
        bail!(
            "executor at {addr} not SERVING within {STARTUP_TIMEOUT:?} (exited: {:?})\n{}",
            child.exited(),
            child.log_tail(60)
        );
    }
    Ok(())
}
