//! A tiny in-process registry: one custom agent (`helper`, tools `probe` and `ask`) and one
//! profile (`dev`, tool `probe`); it records status reports.

use std::{
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
};

use taskforce_proto::v1::{
    self, Agent, AgentSource, AgentStatus, CustomAgent, ProfileAgent, ToolConfig,
    agent::Kind,
    agent_registry_server::{AgentRegistry, AgentRegistryServer},
};
use tokio::{
    net::TcpListener,
    sync::{broadcast, mpsc},
};
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};

/// `(agent_id, status, last_task)` of every `ReportAgentStatus`.
pub type Reports = Arc<Mutex<Vec<(String, AgentStatus, String)>>>;

/// A running fake registry.
pub struct FakeRegistry {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// Status reports received so far.
    pub reports: Reports,
    /// What the fake serves and counts.
    pub state: Arc<State>,
    stop: CancellationToken,
}

/// The fake's mutable state.
#[derive(Debug)]
pub struct State {
    /// The `helper` agent's system prompt.
    pub prompt: Mutex<String>,
    /// The `helper` agent's MCP servers and `mcp_tool_allowlist`.
    pub mcp: Mutex<(Vec<v1::McpServer>, Vec<String>)>,
    /// `GetAgent` calls served.
    pub gets: AtomicUsize,
    /// `WatchAgents` streams opened.
    pub watchers: AtomicUsize,
    /// Changes pushed to every watcher.
    pub changes: broadcast::Sender<v1::AgentChange>,
}

impl FakeRegistry {
    /// Changes `helper`'s prompt and tells the watchers.
    pub fn update_helper(&self, prompt: &str) {
        *self.state.prompt.lock().expect("prompt") = prompt.to_owned();
        let _ = self.state.changes.send(v1::AgentChange {
            kind: v1::agent_change::Kind::Upserted as i32,
            agent_id: "helper".into(),
            source: AgentSource::Custom as i32,
            version: "v2".into(),
            ..Default::default()
        });
    }
}

impl FakeRegistry {
    /// Gives `helper` these MCP servers and MCP tool allowlist (before its first run).
    pub fn set_helper_mcp(&self, servers: Vec<v1::McpServer>, allowlist: &[&str]) {
        *self.state.mcp.lock().expect("mcp") =
            (servers, allowlist.iter().map(|s| (*s).to_owned()).collect());
    }
}

impl Drop for FakeRegistry {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl FakeRegistry {
    /// Serves the fake on a fresh loopback port.
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr: SocketAddr = listener.local_addr().expect("addr");
        let reports = Reports::default();
        let state = Arc::new(State {
            prompt: Mutex::new("You help with tests.".into()),
            mcp: Mutex::new((Vec::new(), Vec::new())),
            gets: AtomicUsize::new(0),
            watchers: AtomicUsize::new(0),
            changes: broadcast::channel(16).0,
        });
        let service = Fake {
            reports: Arc::clone(&reports),
            state: Arc::clone(&state),
        };
        let stop = CancellationToken::new();
        let stopping = stop.clone();
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(AgentRegistryServer::new(service))
                .serve_with_incoming_shutdown(TcpListenerStream::new(listener), async move {
                    stopping.cancelled().await;
                }),
        );
        Self {
            url: format!("http://{addr}"),
            reports,
            state,
            stop,
        }
    }
}

struct Fake {
    reports: Reports,
    state: Arc<State>,
}

fn helper(prompt: &str, mcp: &(Vec<v1::McpServer>, Vec<String>)) -> Agent {
    Agent {
        agent_id: "helper".into(),
        source: AgentSource::Custom as i32,
        version: "v1".into(),
        kind: Some(Kind::Custom(CustomAgent {
            spec: Some(v1::AgentSpec {
                agent_id: "helper".into(),
                name: "Helper".into(),
                system_prompt: prompt.into(),
                tool_allowlist: vec!["probe".into(), "ask".into()],
                mcp_servers: mcp.0.clone(),
                mcp_tool_allowlist: mcp.1.clone(),
                ..v1::AgentSpec::default()
            }),
            ..CustomAgent::default()
        })),
        ..Agent::default()
    }
}

fn dev_profile() -> Agent {
    Agent {
        agent_id: "dev".into(),
        source: AgentSource::Profile as i32,
        version: "p1".into(),
        kind: Some(Kind::Profile(ProfileAgent {
            profile: "dev".into(),
            specialist: "generic".into(),
            tools_config: vec![ToolConfig {
                r#type: "probe".into(),
                ..ToolConfig::default()
            }],
            ..ProfileAgent::default()
        })),
        ..Agent::default()
    }
}

fn unimplemented<T>() -> Result<Response<T>, Status> {
    Err(Status::unimplemented("not in the fake registry"))
}

#[tonic::async_trait]
impl AgentRegistry for Fake {
    type WatchAgentsStream = ReceiverStream<Result<v1::AgentChange, Status>>;

    async fn get_agent(
        &self,
        request: Request<v1::GetAgentRequest>,
    ) -> Result<Response<Agent>, Status> {
        self.state.gets.fetch_add(1, Ordering::SeqCst);
        match request.into_inner().agent_id.as_str() {
            "helper" => {
                let prompt = self.state.prompt.lock().expect("prompt").clone();
                let mcp = self.state.mcp.lock().expect("mcp").clone();
                Ok(Response::new(helper(&prompt, &mcp)))
            }
            "dev" => Ok(Response::new(dev_profile())),
            other => Err(Status::not_found(format!("no agent `{other}`"))),
        }
    }

    async fn watch_agents(
        &self,
        _: Request<v1::WatchAgentsRequest>,
    ) -> Result<Response<Self::WatchAgentsStream>, Status> {
        // Forwards pushed changes until the client goes away.
        let (tx, rx) = mpsc::channel(16);
        let mut changes = self.state.changes.subscribe();
        self.state.watchers.fetch_add(1, Ordering::SeqCst);
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = tx.closed() => break,
                    change = changes.recv() => match change {
                        Ok(change) => {
                            if tx.send(Ok(change)).await.is_err() {
                                break;
                            }
                        }
                        Err(_) => break,
                    },
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn report_agent_status(
        &self,
        request: Request<v1::ReportAgentStatusRequest>,
    ) -> Result<Response<v1::ReportAgentStatusResponse>, Status> {
        let r = request.into_inner();
        let status = AgentStatus::try_from(r.status).unwrap_or(AgentStatus::Unspecified);
        self.reports
            .lock()
            .expect("reports")
            .push((r.agent_id, status, r.last_task));
        Ok(Response::new(v1::ReportAgentStatusResponse {}))
    }

    async fn release_holds(
        &self,
        _req: Request<v1::ReleaseHoldsRequest>,
    ) -> Result<Response<v1::ReleaseHoldsResponse>, Status> {
        Ok(Response::new(v1::ReleaseHoldsResponse::default()))
    }

    async fn create_agent(
        &self,
        _: Request<v1::CreateAgentRequest>,
    ) -> Result<Response<Agent>, Status> {
        unimplemented()
    }

    async fn list_agents(
        &self,
        _: Request<v1::ListAgentsRequest>,
    ) -> Result<Response<v1::ListAgentsResponse>, Status> {
        unimplemented()
    }

    async fn update_agent(
        &self,
        _: Request<v1::UpdateAgentRequest>,
    ) -> Result<Response<Agent>, Status> {
        unimplemented()
    }

    async fn delete_agent(
        &self,
        _: Request<v1::DeleteAgentRequest>,
    ) -> Result<Response<v1::DeleteAgentResponse>, Status> {
        unimplemented()
    }

    async fn list_tools(
        &self,
        _: Request<v1::ListToolsRequest>,
    ) -> Result<Response<v1::ListToolsResponse>, Status> {
        unimplemented()
    }

    async fn validate_agent(
        &self,
        _: Request<v1::ValidateAgentRequest>,
    ) -> Result<Response<v1::ValidateAgentResponse>, Status> {
        unimplemented()
    }

    async fn list_diagnostics(
        &self,
        _: Request<v1::ListDiagnosticsRequest>,
    ) -> Result<Response<v1::ListDiagnosticsResponse>, Status> {
        unimplemented()
    }

    async fn get_agent_metadata(
        &self,
        _: Request<v1::GetAgentMetadataRequest>,
    ) -> Result<Response<v1::AgentMetadata>, Status> {
        unimplemented()
    }
}
