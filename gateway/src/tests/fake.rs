//! In-process fakes: a registry that answers from a fixed list and records what it was asked,
//! and an executor with canned runs (also a multi-agent one) and a canned plan.

use std::{
    collections::BTreeMap,
    pin::Pin,
    sync::{Arc, Mutex},
    time::Duration,
};

use futures::{Stream, stream};
use taskforce_proto::{
    error::{ApiError, ErrorKind},
    v1::{
        self, agent_registry_server::AgentRegistry, executor_server::Executor,
        run_event::Event as Ev,
    },
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
        self.record(format!(
            "create {} subagents={} model={} mode={}",
            spec.agent_id,
            spec.subagents.join(","),
            spec.model,
            spec.mode
        ));
        if spec.agent_id == "taken-agent" {
            return Err(ApiError::new(
                ErrorKind::AlreadyExists,
                "agent \"taken-agent\" already exists",
            )
            .to_status());
        }
        if let Some(unknown) = spec.subagents.iter().find(|s| !s.starts_with("agent-")) {
            return Err(ApiError::invalid_subagents(
                "Unknown agent(s) in subagents",
                std::slice::from_ref(unknown),
                &["agent-000".into(), "agent-001".into()],
            )
            .to_status());
        }
        // The registry also takes other spellings (`read_only`); the fake only the stored ones.
        if !["", "readOnly", "default", "safeWrite"].contains(&spec.mode.as_str()) {
            return Err(ApiError::field(
                "mode",
                format!(
                    "must be one of readOnly, default, safeWrite, got {:?}",
                    spec.mode
                ),
            )
            .to_status());
        }
        let mut agent = custom(&spec.agent_id, "0000000000000001");
        if let Some(v1::agent::Kind::Custom(c)) = agent.kind.as_mut()
            && let Some(stored) = c.spec.as_mut()
        {
            stored.subagents = spec.subagents;
            stored.model = spec.model;
            stored.mode = spec.mode;
        }
        Ok(Response::new(agent))
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
        Ok(Response::new(v1::DeleteAgentResponse::default()))
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

    async fn release_holds(
        &self,
        _req: Request<v1::ReleaseHoldsRequest>,
    ) -> Result<Response<v1::ReleaseHoldsResponse>, Status> {
        Ok(Response::new(v1::ReleaseHoldsResponse::default()))
    }
}

/// A boxed stream of run events.
pub type EventStream = Pin<Box<dyn Stream<Item = Result<v1::RunEvent, Status>> + Send>>;

/// Runs answer with `run_started`, two tokens, the final answer and `done`; the agent
/// `missing-agent` and the session `missing` are unknown; `ask-agent` pauses on a question;
/// `orchestrator` delegates to `researcher` (see [`orchestrator_run`]). Answers come back as the
/// final answer: the `answer`, or with `answers` their JSON (sorted by key). The plan of every
/// session is [`plan`]; the session `missing` has none and `bad id` is not a session id.
#[derive(Clone, Default)]
pub struct FakeExecutor;

/// An event of the top agent.
pub fn ev(seq: u64, event: Ev) -> Result<v1::RunEvent, Status> {
    in_frame(seq, "", &[], event)
}

/// An event of a sub-agent's frame.
fn in_frame(seq: u64, frame: &str, path: &[&str], event: Ev) -> Result<v1::RunEvent, Status> {
    Ok(v1::RunEvent {
        session_id: "s-1".into(),
        seq,
        agent_path: path.iter().map(|s| (*s).to_owned()).collect(),
        time_unix_ms: 1,
        frame_id: frame.into(),
        event: Some(event),
    })
}

fn done_event(status: v1::RunStatus) -> Ev {
    Ev::Done(v1::Done {
        status: status as i32,
        usage: Some(v1::Usage {
            input_tokens: 3,
            output_tokens: 2,
            steps: 1,
            tool_calls: 0,
        }),
    })
}

/// The top agent's `done`.
pub fn done(seq: u64, status: v1::RunStatus) -> Result<v1::RunEvent, Status> {
    ev(seq, done_event(status))
}

/// The plan every session has.
pub fn plan() -> v1::Plan {
    v1::Plan {
        version: 2,
        tasks: vec![
            v1::PlanTask {
                id: "t1".into(),
                title: "Find the totals".into(),
                status: "COMPLETED".into(),
                owner_agent: "researcher".into(),
                result_json: r#"{"total": 99}"#.into(),
                ..Default::default()
            },
            v1::PlanTask {
                id: "t1.1".into(),
                title: "Check the currency".into(),
                status: "PENDING".into(),
                depends_on: vec!["t1".into()],
                owner_agent: "orchestrator".into(),
                parent_id: "t1".into(),
                notes: "EUR?".into(),
                tool: "web_search".into(),
                params_json: r#"{"query": "EUR"}"#.into(),
                result_json: "not json".into(),
            },
        ],
        markdown: "- [x] t1 Find the totals\n  - [ ] t1.1 Check the currency\n".into(),
    }
}

/// The orchestrator's run: it writes a plan, delegates `t1` to `researcher` (whose events,
/// `delegation_start` and `delegation_end` included, are in its frame `f-1` with the path
/// `["researcher"]`, as the executor sends them), and pauses on the researcher's question,
/// consolidated. The frame also sends a `final_answer` and a `done`, which the executor does
/// not do today: neither may end the stream or become the run's answer.
pub fn orchestrator_run() -> Vec<Result<v1::RunEvent, Status>> {
    let sub = ["researcher"];
    vec![
        ev(
            0,
            Ev::RunStarted(v1::RunStarted {
                agent_id: "orchestrator".into(),
                model: "scripted".into(),
                provider: "scripted".into(),
            }),
        ),
        ev(
            1,
            Ev::PatchApplied(v1::PatchApplied {
                author: "orchestrator".into(),
                version: 1,
                ops_json: r#"[{"op": "add", "task": {"id": "t1", "title": "Find the totals"}}]"#
                    .into(),
            }),
        ),
        ev(2, Ev::PlanUpdated(v1::PlanUpdated { plan: Some(plan()) })),
        in_frame(
            3,
            "f-1",
            &sub,
            Ev::DelegationStart(v1::DelegationStart {
                call_id: "c-1".into(),
                agent_id: "researcher".into(),
                task: "Find the totals".into(),
                task_id: "t1".into(),
                resumed: false,
            }),
        ),
        in_frame(4, "f-1", &sub, Ev::Token(v1::Token { text: "Hm".into() })),
        in_frame(
            5,
            "f-1",
            &sub,
            Ev::PatchRejected(v1::PatchRejected {
                author: "researcher".into(),
                reason: "forbidden".into(),
                message: "task t9 is owned by orchestrator".into(),
                current_version: 1,
                rejected_ops_json: r#"[{"op": "update", "task_id": "t9"}]"#.into(),
            }),
        ),
        in_frame(
            6,
            "f-1",
            &sub,
            Ev::FinalAnswer(v1::FinalAnswer {
                text: "the sub-agent's answer".into(),
            }),
        ),
        in_frame(7, "f-1", &sub, done_event(v1::RunStatus::Completed)),
        in_frame(
            8,
            "f-1",
            &sub,
            Ev::DelegationEnd(v1::DelegationEnd {
                call_id: "c-1".into(),
                agent_id: "researcher".into(),
                task_id: "t1".into(),
                status: "need_user_input".into(),
                result_json: r#"{"success": false, "need_user_input": ["currency"]}"#.into(),
            }),
        ),
        ev(
            9,
            Ev::Question(v1::Question {
                call_id: "c-2".into(),
                question: "researcher.currency: Which currency?".into(),
                items: vec![v1::QuestionItem {
                    key: "researcher.currency".into(),
                    text: "Which currency?".into(),
                    required: true,
                    default_json: r#""EUR""#.into(),
                    agent_path: vec!["researcher".into()],
                }],
            }),
        ),
        done(10, v1::RunStatus::Paused),
    ]
}

#[tonic::async_trait]
impl Executor for FakeExecutor {
    type ExecuteStream = EventStream;
    type AnswerStream = EventStream;

    async fn execute(
        &self,
        req: Request<v1::ExecuteRequest>,
    ) -> Result<Response<EventStream>, Status> {
        let req = req.into_inner();
        let agent = req.agent_id.unwrap_or_default();
        if agent == "missing-agent" {
            return Err(
                ApiError::new(ErrorKind::NotFound, "agent `missing-agent` not found").to_status(),
            );
        }
        if agent == "orchestrator" {
            return Ok(Response::new(Box::pin(stream::iter(orchestrator_run()))));
        }
        // Says which model the request named.
        if agent == "model-echo" {
            let events = vec![
                ev(
                    0,
                    Ev::Token(v1::Token {
                        text: req.model.unwrap_or_default(),
                    }),
                ),
                done(1, v1::RunStatus::Completed),
            ];
            return Ok(Response::new(Box::pin(stream::iter(events))));
        }
        // A chat agent whose model fails before it says anything, unless run without tools.
        if agent == "failing-chat" && req.no_tools != Some(true) {
            let events = vec![
                ev(
                    0,
                    Ev::RunStarted(v1::RunStarted {
                        agent_id: agent,
                        model: "scripted".into(),
                        provider: "scripted".into(),
                    }),
                ),
                ev(
                    1,
                    Ev::Error(v1::Error {
                        code: "LLM_ERROR".into(),
                        message: "the model is overloaded".into(),
                    }),
                ),
                done(2, v1::RunStatus::Failed),
            ];
            return Ok(Response::new(Box::pin(stream::iter(events))));
        }
        let mut events = vec![
            ev(
                0,
                Ev::RunStarted(v1::RunStarted {
                    agent_id: agent.clone(),
                    model: "scripted".into(),
                    provider: "scripted".into(),
                }),
            ),
            ev(1, Ev::Token(v1::Token { text: "He".into() })),
            ev(2, Ev::Token(v1::Token { text: "llo".into() })),
        ];
        if agent == "ask-agent" {
            events.push(ev(
                3,
                Ev::Question(v1::Question {
                    call_id: "c-1".into(),
                    question: "Which invoice?".into(),
                    items: Vec::new(),
                }),
            ));
            events.push(done(4, v1::RunStatus::Paused));
        } else {
            events.push(ev(
                3,
                Ev::FinalAnswer(v1::FinalAnswer {
                    text: "Hello".into(),
                }),
            ));
            events.push(done(4, v1::RunStatus::Completed));
        }
        Ok(Response::new(Box::pin(stream::iter(events))))
    }

    async fn answer(
        &self,
        req: Request<v1::AnswerRequest>,
    ) -> Result<Response<EventStream>, Status> {
        let req = req.into_inner();
        if req.session_id == "missing" {
            return Err(
                ApiError::new(ErrorKind::NotFound, "session `missing` does not exist").to_status(),
            );
        }
        let text = if req.answers.is_empty() {
            req.answer
        } else {
            let sorted: BTreeMap<_, _> = req.answers.into_iter().collect();
            serde_json::to_string(&sorted).unwrap_or_default()
        };
        let events = vec![
            ev(5, Ev::FinalAnswer(v1::FinalAnswer { text })),
            done(6, v1::RunStatus::Completed),
        ];
        Ok(Response::new(Box::pin(stream::iter(events))))
    }

    async fn cancel(
        &self,
        req: Request<v1::CancelRequest>,
    ) -> Result<Response<v1::CancelResponse>, Status> {
        Ok(Response::new(v1::CancelResponse {
            cancelled: req.into_inner().session_id == "live",
        }))
    }

    async fn get_session(
        &self,
        _req: Request<v1::GetSessionRequest>,
    ) -> Result<Response<v1::Session>, Status> {
        Err(Status::unimplemented("not in the fake"))
    }

    async fn delete_session(
        &self,
        _req: Request<v1::DeleteSessionRequest>,
    ) -> Result<Response<v1::DeleteSessionResponse>, Status> {
        Err(Status::unimplemented("not in the fake"))
    }

    async fn list_sessions(
        &self,
        _req: Request<v1::ListSessionsRequest>,
    ) -> Result<Response<v1::ListSessionsResponse>, Status> {
        Err(Status::unimplemented("not in the fake"))
    }

    async fn get_plan(
        &self,
        req: Request<v1::GetPlanRequest>,
    ) -> Result<Response<v1::Plan>, Status> {
        match req.into_inner().session_id.as_str() {
            "missing" => Err(ApiError::new(
                ErrorKind::NotFound,
                "session `missing` does not exist",
            )
            .to_status()),
            "bad id" => Err(ApiError::field("session_id", "is not a session id").to_status()),
            _ => Ok(Response::new(plan())),
        }
    }
}
