//! Starting the executor in-process, test tools, and reading event streams.

use std::{
    path::{Path, PathBuf},
    sync::{
        Arc, LazyLock, Once,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use executor_svc::{
    Config, ExecutorError, Parts,
    llm::{Env, LlmConfig, LlmRouter, ToolDefinition},
    tools::{Tool, ToolContext, ToolError, ToolOutcome},
};
use futures::future::BoxFuture;
use serde_json::{Value, json};
use taskforce_proto::v1::{
    ExecuteRequest, GetSessionRequest, RunEvent, Session, executor_client::ExecutorClient,
    run_event::Event,
};
use tokio::{net::TcpListener, task::JoinHandle};
use tokio_util::sync::CancellationToken;
use tonic::{Streaming, transport::Channel};

/// Longest any single wait in these tests may take.
pub const WAIT: Duration = Duration::from_secs(10);

fn init_tracing() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        if std::env::var_os("TEST_LOG").is_some() {
            drop(taskforce_runtime::telemetry::init("executor-svc-test"));
        }
    });
}

/// A test tool: `probe` answers `probed: <x>`, or with `{"wait": true}` blocks until the run is
/// cancelled and records that it saw the cancellation.
#[derive(Debug, Default)]
pub struct Probe {
    /// Set when a waiting call saw `ctx.cancel` fire.
    pub saw_cancel: Arc<AtomicBool>,
}

static PROBE: LazyLock<ToolDefinition> = LazyLock::new(|| ToolDefinition {
    name: "probe".into(),
    description: "Answers with its argument.".into(),
    parameters: json!({"type": "object", "properties": {"x": {"type": "string"}}}),
});

static ASK: LazyLock<ToolDefinition> = LazyLock::new(|| ToolDefinition {
    name: "ask".into(),
    description: "Asks the user.".into(),
    parameters: json!({"type": "object", "properties": {"question": {"type": "string"}}}),
});

impl Tool for Probe {
    fn definition(&self) -> &ToolDefinition {
        &PROBE
    }

    fn call<'a>(
        &'a self,
        ctx: &'a ToolContext,
        arguments: Value,
    ) -> BoxFuture<'a, Result<ToolOutcome, ToolError>> {
        Box::pin(async move {
            if arguments["wait"] == json!(true) {
                ctx.cancel.cancelled().await;
                self.saw_cancel.store(true, Ordering::SeqCst);
                return Err(ToolError::Cancelled {
                    tool: "probe".into(),
                });
            }
            let x = arguments["x"].as_str().unwrap_or("nothing");
            Ok(ToolOutcome::ok(format!("probed: {x}")))
        })
    }
}

/// A test tool: `ask` asks the user `question`.
#[derive(Debug)]
pub struct Ask;

impl Tool for Ask {
    fn definition(&self) -> &ToolDefinition {
        &ASK
    }

    fn call<'a>(
        &'a self,
        _ctx: &'a ToolContext,
        arguments: Value,
    ) -> BoxFuture<'a, Result<ToolOutcome, ToolError>> {
        Box::pin(async move {
            Ok(ToolOutcome::Question {
                question: arguments["question"].as_str().unwrap_or("?").to_owned(),
                key: None,
                required: true,
                default: None,
            })
        })
    }
}

/// An executor served in-process.
pub struct Executor {
    /// A client connected to it.
    pub client: ExecutorClient<Channel>,
    /// Where it listens.
    pub addr: std::net::SocketAddr,
    /// The `probe` tool it offers.
    pub probe: Arc<Probe>,
    shutdown: CancellationToken,
    server: JoinHandle<Result<(), ExecutorError>>,
}

/// How to start one.
pub struct Setup {
    /// Where sessions live (reuse it to restart on the same data).
    pub data_dir: PathBuf,
    /// The fake registry's URL.
    pub registry_url: String,
    /// The scripted provider's script (YAML).
    pub script: String,
    /// Most model calls per run.
    pub max_steps: u32,
    /// Wall-clock budget per run, in seconds (`None`: the default).
    pub max_run_secs: Option<u64>,
    /// How long a paused session waits for its answer (`None`: the default).
    pub paused_ttl: Option<std::time::Duration>,
}

impl Executor {
    /// Starts the executor library on a fresh loopback port.
    pub async fn start(setup: &Setup) -> Self {
        init_tracing();
        let script_path = setup.data_dir.join("script.yaml");
        std::fs::create_dir_all(&setup.data_dir).expect("data dir");
        std::fs::write(&script_path, &setup.script).expect("script");
        let router = router(&script_path);
        let probe = Arc::new(Probe::default());
        let tools: Vec<Arc<dyn Tool>> = vec![Arc::clone(&probe) as Arc<dyn Tool>, Arc::new(Ask)];
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let mut config = Config::with_defaults(addr);
        config.data_dir = setup.data_dir.clone();
        config.registry_url = setup.registry_url.clone();
        config.max_steps = setup.max_steps;
        if let Some(secs) = setup.max_run_secs {
            config.max_run_secs = secs;
        }
        if let Some(ttl) = setup.paused_ttl {
            config.paused_session_ttl = ttl;
        }
        let shutdown = CancellationToken::new();
        let parts = Parts { router, tools };
        let server = tokio::spawn(executor_svc::run_with(
            listener,
            config,
            parts,
            shutdown.clone(),
        ));
        let client = ExecutorClient::connect(format!("http://{addr}"))
            .await
            .expect("connect");
        Self {
            client,
            addr,
            probe,
            shutdown,
            server,
        }
    }

    /// Whether its gRPC health service says the server is SERVING.
    pub async fn serving(&self) -> bool {
        use tonic_health::pb::{HealthCheckRequest, health_check_response::ServingStatus};
        let channel = Channel::from_shared(format!("http://{}", self.addr))
            .expect("url")
            .connect()
            .await
            .expect("connect");
        let mut health = tonic_health::pb::health_client::HealthClient::new(channel);
        let answer = health
            .check(HealthCheckRequest::default())
            .await
            .expect("health")
            .into_inner();
        answer.status() == ServingStatus::Serving
    }

    /// Starts `text` as a mission of the `helper` agent; its event stream.
    pub async fn stream(&mut self, text: &str) -> Streaming<RunEvent> {
        self.client
            .execute(mission(text))
            .await
            .expect("execute")
            .into_inner()
    }

    /// Runs `text` as a mission of the `helper` agent to its end; its events.
    pub async fn run(&mut self, text: &str) -> Vec<RunEvent> {
        let stream = self.stream(text).await;
        collect(stream).await
    }

    /// Cancels session `id`; whether the executor says it cancelled something.
    pub async fn cancel(&mut self, id: &str) -> bool {
        self.client
            .cancel(taskforce_proto::v1::CancelRequest {
                session_id: id.to_owned(),
            })
            .await
            .expect("cancel")
            .into_inner()
            .cancelled
    }

    /// The session `id`, which must exist.
    pub async fn session(&mut self, id: &str) -> Session {
        self.client
            .get_session(GetSessionRequest {
                session_id: id.to_owned(),
            })
            .await
            .expect("session")
            .into_inner()
    }

    /// Stops it and waits until it has released its data directory.
    pub async fn stop(self) {
        self.stop_with().await.expect("executor ran cleanly");
    }

    /// Stops it; what its run ended with.
    pub async fn stop_with(self) -> Result<(), executor_svc::ExecutorError> {
        drop(self.client);
        self.shutdown.cancel();
        tokio::time::timeout(WAIT * 2, self.server)
            .await
            .expect("executor stops in time")
            .expect("executor task")
    }
}

fn router(script: &Path) -> Arc<LlmRouter> {
    let yaml = format!(
        "default_provider: test\nproviders:\n  test:\n    type: scripted\n    script: {}\n",
        script.display()
    );
    let config = LlmConfig::from_yaml(&yaml).expect("llm config");
    let env = Env::from_pairs(Vec::<(String, String)>::new());
    Arc::new(LlmRouter::new(&config, Path::new("."), &env).expect("router"))
}

/// An `Execute` request for the `helper` agent.
pub fn mission(text: &str) -> ExecuteRequest {
    ExecuteRequest {
        mission: text.into(),
        agent_id: Some("helper".into()),
        ..ExecuteRequest::default()
    }
}

/// Reads a stream to its end (each event within [`WAIT`]).
pub async fn collect(mut stream: Streaming<RunEvent>) -> Vec<RunEvent> {
    let mut events = Vec::new();
    while let Some(event) = tokio::time::timeout(WAIT, stream.message())
        .await
        .expect("next event in time")
        .expect("stream ok")
    {
        events.push(event);
    }
    events
}

/// A one-word name for each event, for asserting order.
pub fn kinds(events: &[RunEvent]) -> Vec<&'static str> {
    events
        .iter()
        .map(|e| match e.event.as_ref().expect("event set") {
            Event::RunStarted(_) => "started",
            Event::Token(_) => "token",
            Event::ToolStart(_) => "tool_start",
            Event::ToolEnd(_) => "tool_end",
            Event::ToolError(_) => "tool_error",
            Event::Question(_) => "question",
            Event::FinalAnswer(_) => "final",
            Event::Error(_) => "error",
            Event::Warning(_) => "warning",
            Event::Done(_) => "done",
            Event::DelegationStart(_) => "delegation_start",
            Event::DelegationEnd(_) => "delegation_end",
            Event::PatchApplied(_) => "patch_applied",
            Event::PatchRejected(_) => "patch_rejected",
            Event::PlanUpdated(_) => "plan_updated",
        })
        .collect()
}

/// The `Done` event's status.
pub fn done_status(events: &[RunEvent]) -> taskforce_proto::v1::RunStatus {
    match events.last().and_then(|e| e.event.as_ref()) {
        Some(Event::Done(done)) => done.status(),
        other => panic!("the last event is not Done: {other:?}"),
    }
}

/// A [`Setup`] in `dir` against `registry`.
pub fn setup(
    dir: &tempfile::TempDir,
    registry: &crate::fake_registry::FakeRegistry,
    script: &str,
    max_steps: u32,
) -> Setup {
    Setup {
        data_dir: dir.path().join("executor"),
        registry_url: registry.url.clone(),
        script: script.to_owned(),
        max_steps,
        max_run_secs: None,
        paused_ttl: None,
    }
}
