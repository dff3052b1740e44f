//! The stack the run benchmarks drive: the registry from the harness, then an executor with the
//! benchmark's own `llm_config.yaml` (scripted providers, and optionally an OpenAI-compatible
//! one) and a gateway pointed at it. The harness starts the executor with the stack's config,
//! written before the benchmark could add its scripts, so the two are started here.

use std::{net::SocketAddr, path::PathBuf, process::Command, time::Duration};

use anyhow::{Context, bail};
use serde_json::json;
use taskforce_proto::v1::executor_client::ExecutorClient;
use taskforce_tests::{
    Stack, StackOptions, eventually, paths,
    process::{ChildProcess, wait_for_addr_file},
    stack::STARTUP_TIMEOUT,
};
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
}

/// Registry (harness), executor and gateway (started here), and the agent.
pub struct RunStack {
    /// Kept for its registry and temp dir; dropped last.
    stack: Stack,
    executor: ChildProcess,
    gateway: ChildProcess,
    executor_addr: SocketAddr,
    gateway_url: String,
}

impl RunStack {
    /// Starts everything and creates [`AGENT`] with `file_read` over a workspace holding the
    /// 4-byte file `ping`.
    pub async fn start(setup: &LlmSetup) -> anyhow::Result<Self> {
        let stack = StackOptions::registry_only()
            .empty_configs()
            .spawn()
            .await?;
        let root = stack.root().to_path_buf();
        let llm_config = write_llm_config(&root, setup)?;
        let workspace = root.join("workspace");
        std::fs::create_dir_all(&workspace)?;
        std::fs::write(workspace.join("ping"), "pong")?;

        let addr_file = root.join("executor.addr");
        let mut cmd = Command::new(paths::binary("executor-svc")?);
        cmd.arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--addr-file")
            .arg(&addr_file)
            .arg("--registry-url")
            .arg(format!("http://{}", stack.registry_addr()))
            .arg("--data-dir")
            .arg(root.join("data").join("executor"))
            .arg("--config-dir")
            .arg(stack.config_dir())
            .arg("--llm-config")
            .arg(&llm_config)
            .env(KEY_ENV, "not-a-real-key");
        let mut executor = ChildProcess::spawn("executor-svc", cmd, &root.join("executor.log"))?;
        let executor_addr = wait_for_addr_file(&mut executor, &addr_file, STARTUP_TIMEOUT).await?;

        let addr_file = root.join("gateway.addr");
        let mut cmd = Command::new(paths::binary("gateway")?);
        cmd.arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--addr-file")
            .arg(&addr_file)
            .arg("--registry-url")
            .arg(format!("http://{}", stack.registry_addr()))
            .arg("--executor-url")
            .arg(format!("http://{executor_addr}"));
        let mut gateway = ChildProcess::spawn("gateway", cmd, &root.join("gateway.log"))?;
        let gateway_addr = wait_for_addr_file(&mut gateway, &addr_file, STARTUP_TIMEOUT).await?;
        let gateway_url = format!("http://{gateway_addr}");
        let ready = eventually(STARTUP_TIMEOUT, Duration::from_millis(50), || {
            let (http, url) = (stack.http().clone(), format!("{gateway_url}/readyz"));
            async move {
                let r = http.get(url).send().await.ok()?;
                r.status().is_success().then_some(())
            }
        })
        .await;
        if ready.is_none() {
            bail!("the gateway did not become ready\n{}", gateway.log_tail(40));
        }
        let this = Self {
            stack,
            executor,
            gateway,
            executor_addr,
            gateway_url,
        };
        this.create_agent(&workspace).await?;
        Ok(this)
    }

    async fn create_agent(&self, workspace: &std::path::Path) -> anyhow::Result<()> {
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
            .post(self.url("/api/v1/agents"))
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
        format!("{}{path}", self.gateway_url)
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

    /// The executor's process id.
    pub fn executor_pid(&self) -> u32 {
        self.executor.id()
    }

    /// The gateway's process id.
    pub fn gateway_pid(&self) -> u32 {
        self.gateway.id()
    }

    /// The registry's process id (0 when it is not running).
    pub fn registry_pid(&self) -> u32 {
        self.stack.registry_pid().unwrap_or(0)
    }

    /// Bytes the executor's session store takes on disk.
    pub fn sessions_on_disk(&self) -> u64 {
        dir_size(&self.stack.root().join("data").join("executor"))
    }

    /// The tails of the executor's and the gateway's logs.
    pub fn logs(&self) -> String {
        format!(
            "{}\n{}",
            self.executor.log_tail(30),
            self.gateway.log_tail(30)
        )
    }
}

/// Writes the scripts and `llm_config.yaml` into `root`; returns the config's path.
fn write_llm_config(root: &std::path::Path, setup: &LlmSetup) -> anyhow::Result<PathBuf> {
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
    let mut models = String::from("models:\n");
    let mut providers = String::from("providers:\n");
    for (name, turns) in &scripts {
        std::fs::write(
            root.join(format!("{name}.yaml")),
            format!("turns:\n{turns}"),
        )?;
        models.push_str(&format!(
            "  {name}: {{provider: {name}, model: scripted}}\n"
        ));
        providers.push_str(&format!(
            "  {name}: {{type: scripted, script: {name}.yaml}}\n"
        ));
    }
    if let Some(url) = &setup.openai_base_url {
        models.push_str("  fake: {provider: fake, model: fake-model}\n");
        providers.push_str(&format!(
            "  fake: {{type: openai, base_url: \"{url}\", api_key_env: {KEY_ENV}, \
             model: fake-model, max_attempts: 1}}\n"
        ));
    }
    let path = root.join("bench_llm_config.yaml");
    std::fs::write(
        &path,
        format!(
            "default_provider: answer\ndefault_model: answer\nfallback_to_scripted: false\n\
             {models}{providers}"
        ),
    )?;
    Ok(path)
}

fn dir_size(dir: &std::path::Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => dir_size(&e.path()),
            Ok(_) => e.metadata().map_or(0, |m| m.len()),
            Err(_) => 0,
        })
        .sum()
}
