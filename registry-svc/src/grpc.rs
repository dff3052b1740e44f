//! The `taskforce.v1.AgentRegistry` gRPC service.

use std::sync::Arc;

use taskforce_proto::{
    MAX_LAST_TASK,
    error::{ApiError, ErrorKind},
    v1::{self, agent_registry_server::AgentRegistry},
};
use tokio::sync::{broadcast::error::RecvError, mpsc};
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};
use tracing::{info, instrument, warn};

use crate::{
    catalog::{self, ToolCatalog},
    convert,
    definition::{self, CustomAgentFile},
    error::RegistryError,
    metadata::Collector,
    store::Store,
};

/// The service, shared by all connections.
#[derive(Clone)]
pub struct RegistryService {
    store: Arc<Store>,
    catalog: Arc<ToolCatalog>,
    metadata: Arc<Collector>,
    shutdown: CancellationToken,
    /// One permit per open watch stream: each holds a snapshot of every agent while its client
    /// reads it, so their number is bounded ([`MAX_WATCHERS`]).
    watchers: Arc<tokio::sync::Semaphore>,
}

/// The most watch streams open at once (every executor and gateway holds one).
pub const MAX_WATCHERS: usize = 256;

/// How long a watcher may leave its stream's buffer full before the stream ends.
const WATCH_SEND_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Sends one item of a watch stream; false when the stream is over: the watcher left, `stop`
/// fired, or the watcher read nothing for [`WATCH_SEND_TIMEOUT`] (a client that keeps its
/// connection but does not read would otherwise hold its place among the [`MAX_WATCHERS`] for
/// good, with the changes it misses piling up).
async fn watch_send(
    tx: &mpsc::Sender<Result<v1::AgentChange, Status>>,
    item: Result<v1::AgentChange, Status>,
    stop: Option<&CancellationToken>,
) -> bool {
    let stopped = async {
        match stop {
            Some(stop) => stop.cancelled().await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        () = stopped => false,
        sent = tokio::time::timeout(WATCH_SEND_TIMEOUT, tx.send(item)) => match sent {
            Ok(sent) => sent.is_ok(),
            Err(_) => {
                warn!(waited_secs = WATCH_SEND_TIMEOUT.as_secs(), "a watcher read nothing in time; ending its stream");
                false
            }
        },
    }
}

impl RegistryService {
    /// A service over `store` and `catalog`; watch streams end when `shutdown` fires.
    pub fn new(
        store: Arc<Store>,
        catalog: Arc<ToolCatalog>,
        metadata: Arc<Collector>,
        shutdown: CancellationToken,
    ) -> Self {
        Self {
            store,
            catalog,
            metadata,
            shutdown,
            watchers: Arc::new(tokio::sync::Semaphore::new(MAX_WATCHERS)),
        }
    }

    /// Refuses a read once the cache failed: it no longer follows the files, so what it holds
    /// may be stale (hand edits are not seen), and a stale answer is not given as current.
    fn current(&self) -> Result<(), Status> {
        match self.store.fault().get() {
            None => Ok(()),
            Some(cause) => Err(stale(&cause)),
        }
    }

    /// Runs a blocking store operation off the async threads.
    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Store) -> Result<T, RegistryError> + Send + 'static,
    ) -> Result<T, Status> {
        let store = Arc::clone(&self.store);
        Ok(tokio::task::spawn_blocking(move || f(&store))
            .await
            .map_err(RegistryError::from)??)
    }

    /// Checks what a definition that passed [`definition::validate`] refers to: that its
    /// sub-agents exist, its workspace, then its MCP servers.
    async fn check(&self, id: &str, def: &CustomAgentFile) -> Result<catalog::McpCheck, Status> {
        if !def.subagents.is_empty() {
            let (id, subagents) = (id.to_owned(), def.subagents.clone());
            self.blocking(move |s| s.check_subagents(&id, &subagents))
                .await?;
        }
        if let Some(ws) = def.workspace.as_deref() {
            let dir = definition::resolve_workspace(self.store.root(), ws);
            let is_dir = tokio::fs::metadata(&dir).await.is_ok_and(|m| m.is_dir());
            if !is_dir {
                return Err(ApiError::field(
                    "workspace",
                    format!("{ws:?} is not an existing directory"),
                )
                .to_status());
            }
            // The agent's tools write in its workspace: over the config directory they could
            // write agent definitions (an MCP server is any command), which this registry serves.
            let (dir, root) = (
                tokio::fs::canonicalize(&dir).await.unwrap_or(dir),
                tokio::fs::canonicalize(self.store.root())
                    .await
                    .unwrap_or_else(|_| self.store.root().to_path_buf()),
            );
            let definitions = ["custom", "catalog", "mcp"].map(|d| root.join(d));
            if root.starts_with(&dir) || definitions.iter().any(|d| dir.starts_with(d)) {
                return Err(ApiError::field(
                    "workspace",
                    format!(
                        "{ws:?} holds the registry's config directory or lies among its \
                         definitions, where the agent's tools could write agent definitions; give \
                         it a directory of its own"
                    ),
                )
                .to_status());
            }
        }
        catalog::check_agent_mcp(def, self.catalog.discovery_timeout())
            .await
            .map_err(|e| e.to_status())
    }
}

/// How long BUSY holds when the reporter names no lease.
const DEFAULT_LEASE_SECS: u64 = 300;
/// The longest lease a report may ask for: a day (a lease of years held an agent BUSY for
/// good once its reporter was gone).
const MAX_LEASE_SECS: u32 = 86_400;

fn spec_of(spec: Option<v1::AgentSpec>) -> Result<v1::AgentSpec, Status> {
    spec.ok_or_else(|| ApiError::field("spec", "is required").to_status())
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

#[tonic::async_trait]
impl AgentRegistry for RegistryService {
    #[instrument(skip_all, fields(agent_id))]
    async fn create_agent(
        &self,
        req: Request<v1::CreateAgentRequest>,
    ) -> Result<Response<v1::Agent>, Status> {
        let spec = spec_of(req.into_inner().spec)?;
        let id = spec.agent_id.clone();
        tracing::Span::current().record("agent_id", id.as_str());
        let def = convert::spec_to_file(spec);
        definition::validate_new(&id, &def).map_err(|e| e.to_status())?;
        // Fail fast on a taken id before the (slow) MCP discovery; `create` re-checks under lock.
        if self.store.get(&id).is_ok() {
            return Err(ApiError::new(
                ErrorKind::AlreadyExists,
                format!("agent {id:?} already exists"),
            )
            .to_status());
        }
        let check = self.check(&id, &def).await?;
        let now = now();
        let mut agent = self.blocking(move |s| s.create(&id, def, &now)).await?;
        agent.warnings = check.warnings;
        info!(version = %agent.version, "agent created");
        Ok(Response::new(agent))
    }

    #[instrument(level = "debug", skip_all, fields(agent_id))]
    async fn get_agent(
        &self,
        req: Request<v1::GetAgentRequest>,
    ) -> Result<Response<v1::Agent>, Status> {
        let id = req.into_inner().agent_id;
        tracing::Span::current().record("agent_id", id.as_str());
        taskforce_proto::ids::validate_agent_id(&id)
            .map_err(|e| ApiError::field("agent_id", e.to_string()).to_status())?;
        self.current()?;
        Ok(Response::new(self.store.get(&id)?))
    }

    async fn list_agents(
        &self,
        req: Request<v1::ListAgentsRequest>,
    ) -> Result<Response<v1::ListAgentsResponse>, Status> {
        self.current()?;
        let r = req.into_inner();
        let source = v1::AgentSource::try_from(r.source).map_err(|_| {
            ApiError::field("source", format!("unknown source {}", r.source)).to_status()
        })?;
        // As over REST: a page larger than the most is refused, not quietly made smaller.
        if r.page_size as usize > crate::store::MAX_PAGE {
            return Err(ApiError::field(
                "page_size",
                format!(
                    "must be at most {}, got {}",
                    crate::store::MAX_PAGE,
                    r.page_size
                ),
            )
            .to_status());
        }
        let (agents, next_page_token) = self
            .blocking(move |s| s.list(r.page_size as usize, &r.page_token, source))
            .await?;
        Ok(Response::new(v1::ListAgentsResponse {
            agents,
            next_page_token,
        }))
    }

    #[instrument(skip_all, fields(agent_id))]
    async fn update_agent(
        &self,
        req: Request<v1::UpdateAgentRequest>,
    ) -> Result<Response<v1::Agent>, Status> {
        let r = req.into_inner();
        let id = r.agent_id;
        tracing::Span::current().record("agent_id", id.as_str());
        let mut spec = spec_of(r.spec)?;
        // The path's id is authoritative (seed 000 §5.4).
        spec.agent_id.clone_from(&id);
        let def = convert::spec_to_file(spec);
        definition::validate_new(&id, &def).map_err(|e| e.to_status())?;
        if self.store.get(&id).is_err()
            && !self.store.custom_dir().join(format!("{id}.yaml")).exists()
        {
            return Err(
                ApiError::new(ErrorKind::NotFound, format!("agent {id:?} not found")).to_status(),
            );
        }
        let check = self.check(&id, &def).await?;
        let now = now();
        let expected = r.expected_version;
        let mut agent = self
            .blocking(move |s| s.update(&id, def, &expected, &now))
            .await?;
        agent.warnings = check.warnings;
        info!(version = %agent.version, "agent updated");
        Ok(Response::new(agent))
    }

    #[instrument(skip_all, fields(agent_id))]
    async fn delete_agent(
        &self,
        req: Request<v1::DeleteAgentRequest>,
    ) -> Result<Response<v1::DeleteAgentResponse>, Status> {
        let r = req.into_inner();
        tracing::Span::current().record("agent_id", r.agent_id.as_str());
        let revision = self
            .blocking(move |s| s.delete(&r.agent_id, &r.expected_version))
            .await?;
        info!("agent deleted");
        Ok(Response::new(v1::DeleteAgentResponse { revision }))
    }

    async fn list_tools(
        &self,
        _req: Request<v1::ListToolsRequest>,
    ) -> Result<Response<v1::ListToolsResponse>, Status> {
        Ok(Response::new(v1::ListToolsResponse {
            tools: self.catalog.tools(),
        }))
    }

    async fn validate_agent(
        &self,
        req: Request<v1::ValidateAgentRequest>,
    ) -> Result<Response<v1::ValidateAgentResponse>, Status> {
        let spec = spec_of(req.into_inner().spec)?;
        let id = spec.agent_id.clone();
        let def = convert::spec_to_file(spec);
        definition::validate_new(&id, &def).map_err(|e| e.to_status())?;
        // What a save would refuse when writing the file.
        definition::file_text(&id, &def).map_err(Status::from)?;
        let mut check = self.check(&id, &def).await?;
        // Valid as an update, but not as a create: say so rather than promise a 201.
        let existing = id.clone();
        if let Ok(agent) = self.blocking(move |s| s.get(&existing)).await {
            check
                .warnings
                .push(if agent.source == v1::AgentSource::Profile as i32 {
                    format!(
                        "the profile agent `{id}` exists: creating an agent with this id is a 409 \
                     already_exists, and profile agents are read-only"
                    )
                } else {
                    format!(
                        "the agent `{id}` exists: creating one with this id is a 409 \
                     already_exists; an update (PUT) replaces it"
                    )
                });
        }
        Ok(Response::new(v1::ValidateAgentResponse {
            discovered_mcp_tools: check.discovered,
            warnings: check.warnings,
        }))
    }

    type WatchAgentsStream = ReceiverStream<Result<v1::AgentChange, Status>>;

    async fn watch_agents(
        &self,
        req: Request<v1::WatchAgentsRequest>,
    ) -> Result<Response<Self::WatchAgentsStream>, Status> {
        self.current()?;
        let permit = Arc::clone(&self.watchers)
            .try_acquire_owned()
            .map_err(|_| {
                Status::resource_exhausted(format!(
                    "{MAX_WATCHERS} watch streams are open, the most this registry serves; close \
                     one (or retry later)"
                ))
            })?;
        let req = req.into_inner();
        let exclude_status = req.exclude_status;
        let (snapshot, mut changes) = if req.snapshot {
            let s = self.blocking(Store::snapshot).await?;
            (Some((s.agents, s.revision)), s.changes)
        } else {
            (None, self.store.subscribe())
        };
        let (tx, rx) = mpsc::channel(256);
        let stop = self.shutdown.clone();
        let fault = self.store.fault().clone();
        tokio::spawn(async move {
            // Given back when the stream ends.
            let _permit = permit;
            // A cache that failed follows the files no more: the stream ends, so a follower
            // stops serving what it holds.
            let faulted = fault.occurred();
            tokio::pin!(faulted);
            if let Some((agents, revision)) = snapshot {
                let upserts = agents.into_iter().map(|agent| v1::AgentChange {
                    kind: v1::agent_change::Kind::Upserted.into(),
                    agent_id: agent.agent_id.clone(),
                    source: agent.source,
                    version: agent.version.clone(),
                    agent: Some(agent),
                    revision,
                });
                let synced = v1::AgentChange {
                    kind: v1::agent_change::Kind::Synced.into(),
                    revision,
                    ..Default::default()
                };
                for change in upserts.chain([synced]) {
                    if !watch_send(&tx, Ok(change), Some(&stop)).await {
                        return;
                    }
                }
            }
            loop {
                let item = tokio::select! {
                    () = stop.cancelled() => Err(Status::unavailable("registry is shutting down")),
                    cause = &mut faulted => Err(stale(&cause)),
                    () = tx.closed() => return,
                    c = changes.recv() => match c {
                        Ok(c) if exclude_status && c.kind() == v1::agent_change::Kind::Status => continue,
                        Ok(c) => Ok(c),
                        Err(RecvError::Lagged(n)) => {
                            warn!(missed = n, "watcher fell behind; ending its stream");
                            Err(Status::data_loss(format!("missed {n} changes; list again and watch again")))
                        }
                        Err(RecvError::Closed) => return,
                    },
                };
                // The last item (why the stream ends, the registry's stop included) is sent
                // even while stopping.
                let last = item.is_err();
                if !watch_send(&tx, item, (!last).then_some(&stop)).await || last {
                    return;
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn list_diagnostics(
        &self,
        _req: Request<v1::ListDiagnosticsRequest>,
    ) -> Result<Response<v1::ListDiagnosticsResponse>, Status> {
        let diagnostics = self
            .store
            .diagnostics()
            .into_iter()
            .map(|(path, error)| v1::Diagnostic { path, error })
            .collect();
        Ok(Response::new(v1::ListDiagnosticsResponse { diagnostics }))
    }

    #[instrument(skip_all, fields(agent_id))]
    async fn get_agent_metadata(
        &self,
        req: Request<v1::GetAgentMetadataRequest>,
    ) -> Result<Response<v1::AgentMetadata>, Status> {
        let r = req.into_inner();
        tracing::Span::current().record("agent_id", r.agent_id.as_str());
        taskforce_proto::ids::validate_agent_id(&r.agent_id)
            .map_err(|e| ApiError::field("agent_id", e.to_string()).to_status())?;
        let agent = self.store.get(&r.agent_id)?;
        let workspace = match &agent.kind {
            Some(v1::agent::Kind::Custom(c)) => c
                .spec
                .as_ref()
                .map(|s| s.workspace.clone())
                .unwrap_or_default(),
            Some(v1::agent::Kind::Profile(_)) | None => String::new(),
        };
        let mut fields = Vec::new();
        if !workspace.is_empty() {
            let dir = definition::resolve_workspace(self.store.root(), &workspace);
            let collected = self.metadata.collect(&dir, r.force_refresh).await;
            fields = collected
                .iter()
                .map(|(name, f)| v1::MetadataField {
                    name: name.clone(),
                    value: f.value.as_ref().map(taskforce_proto::json::to_pb),
                    error: f.error.clone(),
                    description: f.description.clone(),
                    include_in_list: f.include_in_list,
                })
                .collect();
        }
        Ok(Response::new(v1::AgentMetadata {
            agent_id: r.agent_id,
            fields,
        }))
    }

    #[instrument(skip_all, fields(agent_id))]
    async fn report_agent_status(
        &self,
        req: Request<v1::ReportAgentStatusRequest>,
    ) -> Result<Response<v1::ReportAgentStatusResponse>, Status> {
        let r = req.into_inner();
        tracing::Span::current().record("agent_id", r.agent_id.as_str());
        taskforce_proto::ids::validate_agent_id(&r.agent_id)
            .map_err(|e| ApiError::field("agent_id", e.to_string()).to_status())?;
        let status = v1::AgentStatus::try_from(r.status)
            .ok()
            .filter(|s| *s != v1::AgentStatus::Unspecified)
            .ok_or_else(|| {
                ApiError::field("status", format!("must be IDLE or BUSY, got {}", r.status))
                    .to_status()
            })?;
        if r.last_task.chars().count() > MAX_LAST_TASK {
            return Err(ApiError::field(
                "last_task",
                format!("must be at most {MAX_LAST_TASK} characters"),
            )
            .to_status());
        }
        if !r.reporter.is_empty() {
            check_reporter(&r.reporter, "must be empty or an executor's instance name")?;
        }
        if r.lease_seconds > MAX_LEASE_SECS {
            return Err(ApiError::field(
                "lease_seconds",
                format!(
                    "must be at most {MAX_LEASE_SECS} (a day), got {}",
                    r.lease_seconds
                ),
            )
            .to_status());
        }
        let lease = std::time::Duration::from_secs(match r.lease_seconds {
            0 => DEFAULT_LEASE_SECS,
            n => u64::from(n),
        });
        self.blocking(move |s| {
            s.report_status(&r.agent_id, status, &r.last_task, lease, &r.reporter)
        })
        .await?;
        Ok(Response::new(v1::ReportAgentStatusResponse {}))
    }

    async fn release_holds(
        &self,
        req: Request<v1::ReleaseHoldsRequest>,
    ) -> Result<Response<v1::ReleaseHoldsResponse>, Status> {
        let reporter = req.into_inner().reporter;
        check_reporter(
            &reporter,
            "must be an executor's instance name (the unnamed executors share one hold, which \
             one of them cannot end for the others)",
        )?;
        let agent_ids = self.blocking(move |s| s.release_holds(&reporter)).await?;
        Ok(Response::new(v1::ReleaseHoldsResponse { agent_ids }))
    }
}

/// Refuses a `reporter` that is no executor instance name, saying `what` it must be.
fn check_reporter(reporter: &str, what: &str) -> Result<(), Status> {
    if taskforce_proto::ids::is_instance_name(reporter) {
        return Ok(());
    }
    Err(ApiError::field(
        "reporter",
        format!(
            "{what}: 1-{} lowercase letters, digits and `-`, starting with a letter or digit",
            taskforce_proto::ids::MAX_INSTANCE_LEN
        ),
    )
    .to_status())
}

/// The answer of a read while the cache has failed.
fn stale(cause: &str) -> Status {
    ApiError::new(
        ErrorKind::Unavailable,
        format!(
            "the registry's cache no longer follows the files ({cause}), so it answers no reads: \
             free space on its --data-dir and restart it"
        ),
    )
    .to_status()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio_stream::StreamExt;

    use super::*;

    /// A watcher that reads nothing has its stream ended after [`WATCH_SEND_TIMEOUT`] (its
    /// place among the watchers is given back), and a stop ends it at once; the last item is
    /// sent even while stopping.
    #[tokio::test(start_paused = true)]
    async fn a_watcher_that_reads_nothing_is_let_go() {
        let (tx, mut rx) = mpsc::channel(1);
        let stop = CancellationToken::new();
        let change = || Ok(v1::AgentChange::default());
        assert!(watch_send(&tx, change(), Some(&stop)).await, "room for one");
        let started = tokio::time::Instant::now();
        assert!(
            !watch_send(&tx, change(), Some(&stop)).await,
            "full, nobody reads"
        );
        assert!(started.elapsed() >= WATCH_SEND_TIMEOUT);
        stop.cancel();
        let started = tokio::time::Instant::now();
        assert!(!watch_send(&tx, change(), Some(&stop)).await);
        assert!(
            started.elapsed() < WATCH_SEND_TIMEOUT,
            "a stop ends it at once"
        );
        // Stopping, the last item still goes out once there is room.
        assert!(rx.recv().await.is_some());
        let last = Err(Status::unavailable("registry is shutting down"));
        assert!(watch_send(&tx, last, None).await);
        assert!(rx.recv().await.is_some_and(|item| item.is_err()));
        drop(rx);
        assert!(!watch_send(&tx, change(), None).await, "the watcher left");
    }

    /// A service over a store in `dir` holding one custom agent, `agent-one`.
    fn service(dir: &std::path::Path) -> RegistryService {
        let root = dir.join("configs");
        std::fs::create_dir_all(&root).expect("configs");
        let store = Arc::new(Store::open(&root, &dir.join("data")).expect("store"));
        store.reconcile_all().expect("reconcile");
        let def = CustomAgentFile {
            name: "Agent".into(),
            description: "An agent".into(),
            prompt: definition::Prompt {
                system_prompt: "Be brief.".into(),
            },
            ..Default::default()
        };
        store
            .create("agent-one", def, "2026-11-27T00:00:00Z")
            .expect("create");
        let metadata = Collector::new(crate::metadata::Settings {
            task_bin: "task".into(),
            launcher: None,
            field_timeout: Duration::from_secs(1),
            ttl: Duration::from_secs(1),
            max_parallel: 1,
            hidden: Vec::new(),
        });
        RegistryService::new(
            store,
            Arc::new(ToolCatalog::new(Duration::from_secs(1))),
            Arc::new(metadata),
            CancellationToken::new(),
        )
    }

    #[tokio::test]
    async fn watch_streams_are_bounded_and_a_closed_one_frees_its_place() {
        let dir = tempfile::tempdir().expect("tmp");
        let service = service(dir.path());
        let watch = || {
            service.watch_agents(Request::new(v1::WatchAgentsRequest {
                snapshot: true,
                ..Default::default()
            }))
        };
        let mut open = Vec::new();
        for _ in 0..MAX_WATCHERS {
            open.push(
                watch()
                    .await
                    .expect("a watch within the bound")
                    .into_inner(),
            );
        }
        let refused = watch().await.expect_err("one watch too many");
        assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
        assert!(
            refused.message().contains("watch streams are open"),
            "{refused:?}"
        );
        // A client that goes away gives its place back (its task sees the closed channel).
        drop(open.pop());
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            match watch().await {
                Ok(_) => break,
                Err(e) if tokio::time::Instant::now() < deadline => {
                    assert_eq!(e.code(), tonic::Code::ResourceExhausted);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(e) => panic!("the closed watch's place never came back: {e:?}"),
            }
        }
    }

    #[tokio::test]
    async fn a_failed_cache_answers_no_reads_and_ends_its_change_streams() {
        let dir = tempfile::tempdir().expect("tmp");
        let service = service(dir.path());
        let get = || {
            Request::new(v1::GetAgentRequest {
                agent_id: "agent-one".into(),
            })
        };
        assert!(service.get_agent(get()).await.is_ok());
        let mut watching = service
            .watch_agents(Request::new(v1::WatchAgentsRequest::default()))
            .await
            .expect("watch")
            .into_inner();

        service.store.fault().set("a test's disk is full");

        let refused = service.get_agent(get()).await.expect_err("get refused");
        assert_eq!(refused.code(), tonic::Code::Unavailable);
        assert!(
            refused.message().contains("a test's disk is full"),
            "{refused:?}"
        );
        let listed = service
            .list_agents(Request::new(v1::ListAgentsRequest::default()))
            .await
            .expect_err("list refused");
        assert_eq!(listed.code(), tonic::Code::Unavailable);
        // The open stream ends with the cause; a new one is refused.
        let ended = tokio::time::timeout(Duration::from_secs(5), watching.next())
            .await
            .expect("the stream ends in time");
        match ended {
            Some(Err(status)) => assert_eq!(status.code(), tonic::Code::Unavailable),
            other => panic!("expected the stream to end with UNAVAILABLE, got {other:?}"),
        }
        let again = service
            .watch_agents(Request::new(v1::WatchAgentsRequest::default()))
            .await
            .map(drop)
            .expect_err("watch refused");
        assert_eq!(again.code(), tonic::Code::Unavailable);
    }
}
