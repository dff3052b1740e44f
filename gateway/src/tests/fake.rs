//! An in-process registry that answers from a fixed list and records what it was asked.

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use taskforce_proto::{
    error::{ApiError, ErrorKind},
    v1::{self, agent_registry_server::AgentRegistry},
};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

/// Agents are `agent-000`, `agent-001`, …; pages hold at most `page` agents whatever the client
/// asks, so listing everything takes several calls.
#[derive(Clone, Default)]
pub struct FakeRegistry {
    pub agents: usize,
    pub page: usize,
    pub calls: Arc<Mutex<Vec<String>>>,
}

impl FakeRegistry {
    pub fn new(agents: usize, page: usize) -> Self {
        Self {
            agents,
            page,
            calls: Arc::default(),
        }
    }

    fn record(&self, call: String) {
        if let Ok(mut calls) = self.calls.lock() {
            calls.push(call);
        }
    }

    pub fn calls(&self) -> Vec<String> {
        self.calls.lock().map(|c| c.clone()).unwrap_or_default()
    }
}

pub fn custom(id: &str, version: &str) -> v1::Agent {
    v1::Agent {
        agent_id: id.to_owned(),
        source: v1::AgentSource::Custom as i32,
        version: version.to_owned(),
        kind: Some(v1::agent::Kind::Custom(v1::CustomAgent {
            spec: Some(v1::AgentSpec {
                agent_id: id.to_owned(),
                name: "Name".into(),
                description: "Description".into(),
                system_prompt: "Prompt".into(),
                tool_allowlist: vec!["file_read".into()],
                ..Default::default()
            }),
            created_at: "2026-11-22T09:00:00Z".into(),
            updated_at: "2026-11-22T09:00:00Z".into(),
            ..Default::default()
        })),
        ..Default::default()
    }
}

fn not_found(id: &str) -> Status {
    ApiError::new(ErrorKind::NotFound, format!("agent {id:?} not found")).to_status()
}

#[tonic::async_trait]
impl AgentRegistry for FakeRegistry {
    async fn create_agent(
        &self,
        req: Request<v1::CreateAgentRequest>,
    ) -> Result<Response<v1::Agent>, Status> {
        let spec = req.into_inner().spec.unwrap_or_default();
        self.record(format!("create {}", spec.agent_id));
        if spec.agent_id == "taken-agent" {
            return Err(ApiError::new(
                ErrorKind::AlreadyExists,
                "agent \"taken-agent\" already exists",
            )
            .to_status());
        }
        Ok(Response::new(custom(&spec.agent_id, "0000000000000001")))
    }

    async fn get_agent(
        &self,
        req: Request<v1::GetAgentRequest>,
    ) -> Result<Response<v1::Agent>, Status> {
        let id = req.into_inner().agent_id;
        self.record(format!("get {id}"));
        match id.as_str() {
            "slow-agent" => {
                tokio::time::sleep(Duration::from_secs(10)).await;
                Err(not_found(&id))
            }
            "broken-agent" => {
                Err(ApiError::new(ErrorKind::Internal, "sled: corrupted page").to_status())
            }
            _ if id.starts_with("agent-") => Ok(Response::new(custom(&id, "0000000000000001"))),
            _ => Err(not_found(&id)),
        }
    }

    async fn list_agents(
        &self,
        req: Request<v1::ListAgentsRequest>,
    ) -> Result<Response<v1::ListAgentsResponse>, Status> {
        let r = req.into_inner();
        self.record(format!(
            "list size={} token={} source={}",
            r.page_size, r.page_token, r.source
        ));
        let start: usize = if r.page_token.is_empty() {
            0
        } else {
            r.page_token
                .parse()
                .map_err(|_| Status::invalid_argument("bad token"))?
        };
        let end = (start + self.page.min(r.page_size as usize)).min(self.agents);
        let agents = (start..end)
            .map(|i| custom(&format!("agent-{i:03}"), "0000000000000001"))
            .collect();
        let next_page_token = if end < self.agents {
            end.to_string()
        } else {
            String::new()
        };
        Ok(Response::new(v1::ListAgentsResponse {
            agents,
            next_page_token,
        }))
    }

    async fn update_agent(
        &self,
        req: Request<v1::UpdateAgentRequest>,
    ) -> Result<Response<v1::Agent>, Status> {
        let r = req.into_inner();
        let spec_id = r.spec.map(|s| s.agent_id).unwrap_or_default();
        self.record(format!(
            "update {} spec={} expected={}",
            r.agent_id, spec_id, r.expected_version
        ));
        if !r.expected_version.is_empty() && r.expected_version != "0000000000000001" {
            return Err(ApiError::new(ErrorKind::VersionConflict, "stale").to_status());
        }
        Ok(Response::new(custom(&r.agent_id, "0000000000000002")))
    }

    async fn delete_agent(
        &self,
        req: Request<v1::DeleteAgentRequest>,
    ) -> Result<Response<v1::DeleteAgentResponse>, Status> {
        let r = req.into_inner();
        self.record(format!(
            "delete {} expected={}",
            r.agent_id, r.expected_version
        ));
        Ok(Response::new(v1::DeleteAgentResponse {}))
    }

    async fn list_tools(
        &self,
        _req: Request<v1::ListToolsRequest>,
    ) -> Result<Response<v1::ListToolsResponse>, Status> {
        self.record("tools".into());
        Ok(Response::new(v1::ListToolsResponse {
            tools: vec![v1::Tool {
                name: "file_read".into(),
                origin: "native".into(),
                approval_risk_level: "LOW".into(),
                available: true,
                ..Default::default()
            }],
        }))
    }

    async fn validate_agent(
        &self,
        req: Request<v1::ValidateAgentRequest>,
    ) -> Result<Response<v1::ValidateAgentResponse>, Status> {
        self.record(format!(
            "validate {}",
            req.into_inner().spec.unwrap_or_default().agent_id
        ));
        Ok(Response::new(v1::ValidateAgentResponse {
            discovered_mcp_tools: vec!["get_current_time".into()],
            warnings: vec![],
        }))
    }

    type WatchAgentsStream = ReceiverStream<Result<v1::AgentChange, Status>>;

    async fn watch_agents(
        &self,
        _req: Request<v1::WatchAgentsRequest>,
    ) -> Result<Response<Self::WatchAgentsStream>, Status> {
        Err(Status::unimplemented("not in the fake"))
    }

    async fn list_diagnostics(
        &self,
        _req: Request<v1::ListDiagnosticsRequest>,
    ) -> Result<Response<v1::ListDiagnosticsResponse>, Status> {
        Ok(Response::new(v1::ListDiagnosticsResponse {
            diagnostics: vec![v1::Diagnostic {
                path: "custom/bad.yaml".into(),
                error: "invalid YAML".into(),
            }],
        }))
    }

    async fn get_agent_metadata(
        &self,
        req: Request<v1::GetAgentMetadataRequest>,
    ) -> Result<Response<v1::AgentMetadata>, Status> {
        let r = req.into_inner();
        self.record(format!("metadata {} {}", r.agent_id, r.force_refresh));
        Ok(Response::new(v1::AgentMetadata {
            agent_id: r.agent_id,
            fields: vec![v1::MetadataField {
                name: "pr".into(),
                value: Some(taskforce_proto::json::to_pb(&serde_json::json!(810))),
                error: None,
                description: "PR number".into(),
                include_in_list: true,
            }],
        }))
    }

    async fn report_agent_status(
        &self,
        _req: Request<v1::ReportAgentStatusRequest>,
    ) -> Result<Response<v1::ReportAgentStatusResponse>, Status> {
        Ok(Response::new(v1::ReportAgentStatusResponse {}))
    }
}
