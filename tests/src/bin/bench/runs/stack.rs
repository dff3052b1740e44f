//! The stack the run benchmarks drive: registry, executor and gateway from the harness, the
//! executor with the benchmark's own `llm_config.yaml` (scripted providers, and optionally an
//! OpenAI-compatible one), and the agent every run uses.

use std::{net::SocketAddr, path::Path};

use anyhow::{Context, bail};
use serde_json::json;
use taskforce_proto::v1::executor_client::ExecutorClient;
use taskforce_tests::{Stack, StackOptions};
use tempfile::TempDir;
use tonic::transport::{Channel, Endpoint};

/// The agent every benchmark run uses.
pub const AGENT: &str = "bench-runner";
/// The environment variable holding the (dummy) key of the OpenAI-compatible provider.
const KEY_ENV: &str = "TASKFORCE_BENCH_LLM_KEY";
/// The 20-word answer of every scripted workload, the same words `fake_llm.py` streams.
pub const ANSWER: &str = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo \
                          lima mike november oscar papa quebec romeo sierra tango";

/// What the executor's `llm_config.yaml` holds besides the scripted models.
#[derive(Debug, Clone, Default)]
pub struct LlmSetup {
    /// Model calls of the `steps` script that make a tool call before its answer.
    pub steps: usize,
    /// Pause of the `hold` script before its answer, in milliseconds.
    pub hold_ms: u64,
    /// Base URL of an OpenAI-compatible server, served as the model `fake`.
    pub openai_base_url: Option<String>,
    /// Environment of all three services (e.g. `OTEL_EXPORTER_OTLP_ENDPOINT`).
    pub env: Vec<(String, String)>,
}

/// The harness's stack with the benchmark's models, and the agent.
pub struct RunStack {
    stack: Stack,
    executor_addr: SocketAddr,
    /// The scripts and the agent's workspace; dropped after the stack.
    _files: TempDir,
}

impl RunStack {
    /// Starts everything and creates [`AGENT`] with `file_read` over a workspace holding the
    /// 4-byte file `ping`.
    pub async fn start(setup: &LlmSetup) -> anyhow::Result<Self> {
        let files = TempDir::new()?;
        let workspace = files.path().join("workspace");
        std::fs::create_dir_all(&workspace)?;
        std::fs::write(workspace.join("ping"), "pong")?;
        let mut options = StackOptions::full();
        for (key, value) in &setup.env {
            options = options.env_all(key, value);
        }
        let stack = options
            .empty_configs()
            .with_executor()
            .llm_config(llm_config(files.path(), setup)?)
            .executor_env(KEY_ENV, "not-a-real-key")
            .spawn()
            .await?;
        let executor_addr = stack.executor_addr().context("the stack has no executor")?;
        let this = Self {
            stack,
            executor_addr,
            _files: files,
        };
        this.create_agent(&workspace).await?;
        Ok(this)
    }

    async fn create_agent(&self, workspace: &Path) -> anyhow::Result<()> {
        let body = json!({
            "agent_id": AGENT,
            "name": "Benchmark runner",
            "description": "Runs the executor benchmarks.",
            "system_prompt": "You are a benchmark agent. Use file_read when asked to.",
            "tool_allowlist": ["file_read"],
            "workspace": workspace.display().to_string(),
        });
        let r = self
            .stack
            .http()
            .post(self.stack.url("/api/v1/agents"))
            .json(&body)
            .send()
            .await?;
        if r.status().as_u16() != 201 {
            let status = r.status();
            bail!("creating the agent answered {status}: {}", r.text().await?);
        }
        Ok(())
    }

    /// The gateway URL of `path`.
    pub fn url(&self, path: &str) -> String {
        self.stack.url(path)
    }

    /// A gRPC client of the executor over a new connection.
    pub async fn executor_client(&self) -> anyhow::Result<ExecutorClient<Channel>> {
        let channel = Endpoint::from_shared(format!("http://{}", self.executor_addr))?
            .tcp_nodelay(true)
            .connect()
            .await
            .context("connecting to the executor")?;
        Ok(ExecutorClient::new(channel))
    }

    /// The executor's process id (0 when it is not running).
    pub fn executor_pid(&self) -> u32 {
        self.stack.executor_pid().unwrap_or(0)
    }

    /// The gateway's process id (0 when it is not running).
    pub fn gateway_pid(&self) -> u32 {
        self.stack.gateway_pid().unwrap_or(0)
    }

    /// The registry's process id (0 when it is not running).
    pub fn registry_pid(&self) -> u32 {
        self.stack.registry_pid().unwrap_or(0)
    }

    /// Bytes the executor's session store takes on disk.
    pub fn sessions_on_disk(&self) -> u64 {
        taskforce_runtime::store::dir_bytes(&self.stack.executor_data_dir())
    }

    /// Bytes of the session store's blob files (values and tree leaves sled keeps outside its
    /// log).
    pub fn session_blobs_on_disk(&self) -> u64 {
        taskforce_runtime::store::dir_bytes(
            &self
                .stack
                .executor_data_dir()
                .join("sessions.sled")
                .join("blobs"),
        )
    }

    /// The executor's `/metrics` URL.
    pub fn executor_metrics_url(&self) -> anyhow::Result<String> {
        Ok(format!(
            "http://{}/metrics",
            self.stack.executor_metrics_addr()?
        ))
    }

    /// The services' logs.
    pub fn logs(&self) -> String {
        self.stack.logs()
    }
}

/// Writes the scripts into `dir`; returns the `llm_config.yaml` that serves them.
fn llm_config(dir: &Path, setup: &LlmSetup) -> anyhow::Result<String> {
    let read = "  - tool_calls:\n      - name: file_read\n        arguments: {path: ping}\n";
    let answer = format!("  - text: \"{ANSWER}\"\n");
    let scripts = [
        ("answer", answer.clone()),
        ("peer", format!("{read}{answer}")),
        ("steps", format!("{}{answer}", read.repeat(setup.steps))),
        (
            "hold",
            format!(
                "{read}  - delay_ms: {}\n    text: \"{ANSWER}\"\n",
                setup.hold_ms
            ),
        ),
    ];
    let scripts = scripts.map(|(name, turns)| (name, format!("turns:\n{turns}")));
    let (mut models, mut providers) = taskforce_tests::scripts::scripted_models(dir, &scripts)?;
    if let Some(url) = &setup.openai_base_url {
        models.push_str("  fake: {provider: fake, model: fake-model}\n");
        providers.push_str(&format!(
            "  fake: {{type: openai, base_url: \"{url}\", api_key_env: {KEY_ENV}, \
             model: fake-model, max_attempts: 1}}\n"
        ));
    }
    Ok(format!(
        "default_provider: answer\ndefault_model: answer\nfallback_to_scripted: false\n\
         models:\n{models}providers:\n{providers}"
    ))
}
