//! The registry (`taskforce.v1.AgentRegistry`) and the executor (`taskforce.v1.Executor`)
//! straight over gRPC, answering in the gateway's JSON shapes ([`crate::convert`]).
//!
//! A channel is connected when first needed, within the timeout, so "cannot reach" is told
//! apart from an error of the service. Unary calls carry the timeout as their gRPC deadline;
//! run streams have none (the executor keeps its own run budget), only an idle timeout between
//! two events.

use std::time::Duration;

use futures::stream;
use serde_json::{Value, json};
use taskforce_proto::v1::{
    self, agent_registry_client::AgentRegistryClient, executor_client::ExecutorClient,
};
use taskforce_runtime::telemetry::{TracedChannel, traced};
use tonic::{
    Request, Streaming,
    transport::{Channel, Endpoint},
};

use crate::{
    args::Source,
    backend::{AnswerBody, EventStream, ExecuteBody},
    convert,
    error::{Error, Result, chain},
};

/// Agents per `ListAgents` page.
const PAGE_SIZE: u32 = 1000;

/// Clients of the registry and the executor.
#[derive(Debug, Clone)]
pub struct Grpc {
    registry: Endpoint,
    /// Or why its URL cannot be used: said by the commands that use the executor only
    /// (`TASKFORCE_EXECUTOR_URL` may hold the gateway's `NAME=URL` list, which `agents` need
    /// not read).
    executor: std::result::Result<Endpoint, String>,
    timeout: Duration,
    idle: Duration,
    authorization: Option<http::HeaderValue>,
}

impl Grpc {
    /// Clients of the registry and the executor at these URLs (connected when used), sending
    /// `authorization` with every call.
    pub fn new(
        registry: &str,
        executor: &str,
        timeout: Duration,
        idle: Duration,
        authorization: Option<http::HeaderValue>,
    ) -> Result<Self> {
        Ok(Self {
            registry: endpoint(registry, "--registry (TASKFORCE_REGISTRY_URL)", timeout)?,
            executor: endpoint(executor, "--executor (TASKFORCE_EXECUTOR_URL)", timeout).map_err(
                |e| match e {
                    Error::Usage(message) => message,
                    other => other.to_string(),
                },
            ),
            timeout,
            idle,
            authorization,
        })
    }

    async fn registry(&self) -> Result<AgentRegistryClient<TracedChannel>> {
        let channel = connect(&self.registry, "registry", self.timeout).await?;
        Ok(
            AgentRegistryClient::new(traced(channel, self.authorization.clone()))
                .max_decoding_message_size(taskforce_runtime::MAX_DECODING_BYTES),
        )
    }

    /// The executor's endpoint, or the usage error of its URL.
    fn executor_endpoint(&self) -> Result<&Endpoint> {
        self.executor
            .as_ref()
            .map_err(|message| Error::Usage(message.clone()))
    }

    async fn executor(&self) -> Result<ExecutorClient<TracedChannel>> {
        let channel = connect(self.executor_endpoint()?, "executor", self.timeout).await?;
        Ok(
            ExecutorClient::new(traced(channel, self.authorization.clone()))
                .max_decoding_message_size(taskforce_runtime::MAX_DECODING_BYTES),
        )
    }

    /// A unary request with the timeout as its deadline.
    fn request<T>(&self, message: T) -> Request<T> {
        let mut req = Request::new(message);
        req.set_timeout(self.timeout);
        req
    }

    /// Awaits a unary call within the timeout.
    async fn call<T>(
        &self,
        endpoint: &Endpoint,
        service: &'static str,
        call: impl Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    ) -> Result<T> {
        let timed_out = || Error::Timeout {
            service,
            url: uri_text(endpoint),
            after: self.timeout,
            what: "--timeout",
        };
        match tokio::time::timeout(self.timeout, call).await {
            Ok(Ok(resp)) => Ok(resp.into_inner()),
            Ok(Err(status)) if is_deadline(&status) => Err(timed_out()),
            // An HTTP server's answer read as gRPC (a REST port given for a gRPC one).
            Ok(Err(status)) if not_grpc(&status) => Err(Error::Transport {
                service,
                url: uri_text(endpoint),
                cause: format!(
                    "the answer is not gRPC ({}); is this the {service}'s gRPC address, not \
                     the gateway's REST one?",
                    status.message()
                ),
            }),
            Ok(Err(status)) => Err(Error::from_status(&status)),
            Err(_) => Err(timed_out()),
        }
    }

    /// `{"agents": [...]}`, every page.
    pub async fn list_agents(&self, source: Option<Source>) -> Result<Value> {
        let mut client = self.registry().await?;
        let source = match source {
            None => v1::AgentSource::Unspecified,
            Some(Source::Custom) => v1::AgentSource::Custom,
            Some(Source::Profile) => v1::AgentSource::Profile,
        };
        let mut agents = Vec::new();
        let mut page_token = String::new();
        loop {
            let req = self.request(v1::ListAgentsRequest {
                page_size: PAGE_SIZE,
                page_token: std::mem::take(&mut page_token),
                source: source.into(),
            });
            let page = self
                .call(&self.registry, "registry", client.list_agents(req))
                .await?;
            agents.extend(page.agents.iter().filter_map(convert::agent_json));
            if page.next_page_token.is_empty() {
                return Ok(json!({ "agents": agents }));
            }
            page_token = page.next_page_token;
        }
    }

    /// One agent.
    pub async fn get_agent(&self, id: &str) -> Result<Value> {
        let mut client = self.registry().await?;
        let req = self.request(v1::GetAgentRequest {
            agent_id: id.to_owned(),
        });
        let agent = self
            .call(&self.registry, "registry", client.get_agent(req))
            .await?;
        agent_value(&agent)
    }

    /// Creates a custom agent from a REST create body.
    pub async fn create_agent(&self, body: Value) -> Result<Value> {
        let spec = convert::spec_of_body(body).map_err(Error::Input)?;
        let mut client = self.registry().await?;
        let req = self.request(v1::CreateAgentRequest { spec: Some(spec) });
        let agent = self
            .call(&self.registry, "registry", client.create_agent(req))
            .await?;
        agent_value(&agent)
    }

    /// Replaces custom agent `id` with a REST update body (with `expected_version`, only if
    /// that is its stored version).
    pub async fn update_agent(
        &self,
        id: &str,
        body: Value,
        expected_version: Option<&str>,
    ) -> Result<Value> {
        let spec = convert::spec_of_body(body).map_err(Error::Input)?;
        let mut client = self.registry().await?;
        let req = self.request(v1::UpdateAgentRequest {
            agent_id: id.to_owned(),
            spec: Some(spec),
            expected_version: expected_version.unwrap_or_default().to_owned(),
        });
        let agent = self
            .call(&self.registry, "registry", client.update_agent(req))
            .await?;
        agent_value(&agent)
    }

    /// Checks a REST create body as a create would: the gateway's `:validate` answer.
    pub async fn validate_agent(&self, body: Value) -> Result<Value> {
        let spec = convert::spec_of_body(body).map_err(Error::Input)?;
        let mut client = self.registry().await?;
        let req = self.request(v1::ValidateAgentRequest { spec: Some(spec) });
        let checked = self
            .call(&self.registry, "registry", client.validate_agent(req))
            .await?;
        Ok(json!({
            "valid": true,
            "discovered_mcp_tools": checked.discovered_mcp_tools,
            "warnings": checked.warnings,
        }))
    }

    /// Deletes a custom agent (with `expected_version`, only if that is its stored version).
    pub async fn delete_agent(&self, id: &str, expected_version: Option<&str>) -> Result<()> {
        let mut client = self.registry().await?;
        let req = self.request(v1::DeleteAgentRequest {
            agent_id: id.to_owned(),
            expected_version: expected_version.unwrap_or_default().to_owned(),
        });
        self.call(&self.registry, "registry", client.delete_agent(req))
            .await
            .map(drop)
    }

    /// `{"tools": [...]}`.
    pub async fn tools(&self) -> Result<Value> {
        let mut client = self.registry().await?;
        let req = self.request(v1::ListToolsRequest {});
        let tools = self
            .call(&self.registry, "registry", client.list_tools(req))
            .await?;
        let tools: Vec<Value> = tools.tools.iter().map(convert::tool_json).collect();
        Ok(json!({ "tools": tools }))
    }

    /// A session.
    pub async fn session(&self, id: &str) -> Result<Value> {
        let mut client = self.executor().await?;
        let req = self.request(v1::GetSessionRequest {
            session_id: id.to_owned(),
        });
        let session = self
            .call(
                self.executor_endpoint()?,
                "executor",
                client.get_session(req),
            )
            .await?;
        Ok(convert::session_json(&session))
    }

    /// Deletes a session.
    pub async fn delete_session(&self, id: &str) -> Result<()> {
        let mut client = self.executor().await?;
        let req = self.request(v1::DeleteSessionRequest {
            session_id: id.to_owned(),
        });
        self.call(
            self.executor_endpoint()?,
            "executor",
            client.delete_session(req),
        )
        .await?;
        Ok(())
    }

    /// A page of the sessions of the executor.
    pub async fn sessions(
        &self,
        args: &crate::args::SessionsListArgs,
        status: Option<gateway::sessions::StatusParam>,
    ) -> Result<Value> {
        let mut client = self.executor().await?;
        let req = self.request(v1::ListSessionsRequest {
            agent_id: args.agent.clone(),
            status: status.map_or(v1::RunStatus::Unspecified, |s| s.to_proto()) as i32,
            page_size: args.limit.unwrap_or(0),
            page_token: args.page_token.clone().unwrap_or_default(),
        });
        let page = self
            .call(
                self.executor_endpoint()?,
                "executor",
                client.list_sessions(req),
            )
            .await?;
        serde_json::to_value(gateway::sessions::list_json(page)).map_err(Error::from_json)
    }

    /// Cancels a session's live run or waiting question.
    pub async fn cancel(&self, id: &str) -> Result<Value> {
        let mut client = self.executor().await?;
        let req = self.request(v1::CancelRequest {
            session_id: id.to_owned(),
        });
        let answer = self
            .call(self.executor_endpoint()?, "executor", client.cancel(req))
            .await?;
        Ok(serde_json::json!({"cancelled": answer.cancelled}))
    }

    /// Starts a run.
    pub async fn execute(&self, body: &ExecuteBody) -> Result<EventStream> {
        let mut client = self.executor().await?;
        // No deadline: it would bound the whole run, not just its start.
        let req = v1::ExecuteRequest {
            mission: body.mission.clone(),
            agent_id: body.agent_id.clone(),
            profile: body.profile.clone(),
            session_id: body.session_id.clone(),
            model: body.model.clone(),
            mode: body.mode.clone(),
            confirmations: body.confirmations.clone(),
            no_tools: None,
        };
        let events = self
            .call(self.executor_endpoint()?, "executor", client.execute(req))
            .await?;
        Ok(self.events(events))
    }

    /// Answers a paused session.
    pub async fn answer(&self, session: &str, body: &AnswerBody) -> Result<EventStream> {
        let mut client = self.executor().await?;
        let req = v1::AnswerRequest {
            session_id: session.to_owned(),
            answer: body.answer.clone(),
            call_id: body.call_id.clone(),
            answers: body.answers.clone().into_iter().collect(),
            mode: body.mode.clone(),
            confirmations: body.confirmations.clone(),
            no_tools: None,
        };
        let events = self
            .call(self.executor_endpoint()?, "executor", client.answer(req))
            .await?;
        Ok(self.events(events))
    }

    /// A run's gRPC stream as event JSON, with the idle timeout between two events.
    fn events(&self, events: Streaming<v1::RunEvent>) -> EventStream {
        let idle = self.idle;
        // A stream came from the executor, so its endpoint is valid.
        let url = self.executor.as_ref().map(uri_text).unwrap_or_default();
        Box::pin(stream::unfold(Some(events), move |events| {
            let url = url.clone();
            async move {
                let mut events = events?;
                loop {
                    let Ok(next) = tokio::time::timeout(idle, events.message()).await else {
                        let e = Error::Idle {
                            service: "executor",
                            url,
                            after: idle,
                        };
                        return Some((Err(e), None));
                    };
                    match next {
                        Ok(Some(ev)) => match convert::event_json(&ev) {
                            Some(json) => return Some((Ok(json), Some(events))),
                            // An event kind this CLI does not know yet.
                            None => continue,
                        },
                        Ok(None) => return None,
                        Err(status) => {
                            return Some((Err(Error::from_stream_status(&status)), None));
                        }
                    }
                }
            }
        }))
    }
}

/// An agent as JSON; one of neither kind is a registry bug.
fn agent_value(agent: &v1::Agent) -> Result<Value> {
    convert::agent_json(agent).ok_or_else(|| Error::Protocol {
        service: "registry",
        message: format!("agent {:?} is neither custom nor profile", agent.agent_id),
    })
}

/// The endpoint of a gRPC URL (`http://HOST:PORT`; `grpc://` is taken as `http://`).
pub fn endpoint(url: &str, flag: &str, timeout: Duration) -> Result<Endpoint> {
    let url = url.trim();
    let http = match url.strip_prefix("grpc://") {
        Some(rest) => format!("http://{rest}"),
        None => url.to_owned(),
    };
    if !http.starts_with("http://") {
        return Err(Error::Usage(format!(
            "{flag} {url:?}: expected http://HOST:PORT (or grpc://HOST:PORT)"
        )));
    }
    let endpoint = Endpoint::from_shared(http)
        .map_err(|e| Error::Usage(format!("{flag} {url:?}: {}", chain(&e))))?;
    // A gRPC call's path is its method: an address with a path or a query is a mistake (a
    // REST URL given for a gRPC one), not something to drop silently.
    if endpoint
        .uri()
        .path_and_query()
        .is_some_and(|p| p.as_str() != "/")
    {
        return Err(Error::Usage(format!(
            "{flag} {url:?}: a gRPC address is HOST:PORT, without a path or a query"
        )));
    }
    Ok(endpoint.connect_timeout(timeout))
}

/// True for the status of a call whose deadline (the request's timeout) ran out: tonic says
/// `Cancelled: Timeout expired`, which alone would not say which service or which wait.
pub fn is_deadline(status: &tonic::Status) -> bool {
    status.code() == tonic::Code::Cancelled
        && status.message() == tonic::TimeoutExpired(()).to_string()
}

/// Whether `status` is tonic's reading of an answer that was no gRPC (the JSON or HTML of an
/// HTTP server, whose first byte it takes for a compression flag).
fn not_grpc(status: &tonic::Status) -> bool {
    status.code() == tonic::Code::Internal && status.message().contains("invalid compression flag")
}

/// An endpoint's URL as people write it (`http://host:port`, without the root path's `/`).
fn uri_text(endpoint: &Endpoint) -> String {
    endpoint.uri().to_string().trim_end_matches('/').to_owned()
}

/// Connects within `timeout`; a failure is "cannot reach the `service`".
pub async fn connect(
    endpoint: &Endpoint,
    service: &'static str,
    timeout: Duration,
) -> Result<Channel> {
    let url = uri_text(endpoint);
    match tokio::time::timeout(timeout, endpoint.connect()).await {
        Ok(Ok(channel)) => Ok(channel),
        Ok(Err(e)) => Err(Error::Unreachable {
            service,
            url,
            cause: chain(&e),
        }),
        Err(_) => Err(Error::Timeout {
            service,
            url,
            after: timeout,
            what: "--timeout, connecting",
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_urls_are_http_urls() {
        let t = Duration::from_secs(1);
        assert_eq!(
            endpoint("grpc://127.0.0.1:50051", "--registry", t)
                .map(|e| e.uri().to_string())
                .ok(),
            Some("http://127.0.0.1:50051/".to_owned())
        );
        assert!(endpoint("http://127.0.0.1:50051", "--registry", t).is_ok());
        let err = endpoint("127.0.0.1:50051", "--registry", t).expect_err("no scheme");
        assert!(err.to_string().contains("--registry"), "{err}");
        assert!(endpoint("https://x:1", "--executor", t).is_err());
    }

    #[tokio::test]
    async fn a_service_that_never_answers_is_a_timeout_naming_it_and_the_flag() {
        // Accepts connections and reads nothing, so the HTTP/2 handshake can go through but
        // no call is ever answered.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binds");
        let url = format!("http://{}", listener.local_addr().expect("an address"));
        let held = tokio::spawn(async move {
            let mut sockets = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                sockets.push(socket);
            }
        });
        let timeout = Duration::from_millis(500);
        let grpc = Grpc::new(&url, &url, timeout, timeout, None).expect("valid URLs");
        let err = grpc.tools().await.expect_err("nobody answers");
        held.abort();
        assert_eq!(
            err.to_string(),
            format!("the registry at {url} did not answer within 0.5s (--timeout)")
        );
    }
}
