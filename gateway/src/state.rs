//! What every handler shares: the registry's channel and clients, the executors, the agents'
//! read model, the API keys and the run limits.

use std::{sync::Arc, time::Duration};

use taskforce_proto::v1::{self, agent_registry_client::AgentRegistryClient};
use taskforce_runtime::telemetry::{TracedChannel, traced};
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;
use tonic_health::pb::health_client::HealthClient;
use tracing::error;

use crate::{
    channel::lazy_channel,
    config::Config,
    error::{GatewayError, RestError},
};

/// Page size used to collect every agent.
const FULL_LIST_PAGE: u32 = 1000;

/// What every handler needs, behind one reference count: axum clones the state for every
/// extractor and layer of every request, so a clone must cost one atomic increment.
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// The fields of [`AppState`].
pub struct Shared {
    /// The registry's `taskforce.v1.AgentRegistry` client over the shared channel.
    pub registry: AgentRegistryClient<TracedChannel>,
    /// The executors (`--executor-url`), each over its own lazy channel.
    pub executors: crate::executors::Executors,
    /// The registry's `grpc.health.v1.Health` client over the same channel.
    pub health: HealthClient<Channel>,
    /// `--max-body-bytes`, for the 413 message.
    pub max_body_bytes: usize,
    /// The deadline sent with every registry call (the request timeout), so the registry can
    /// give up on work nobody waits for any more.
    pub grpc_timeout: Duration,
    /// Fired when the gateway shuts down; `/readyz` answers 503 from then on.
    pub shutdown: CancellationToken,
    /// How `/ai/agent/stream` runs.
    pub chat: crate::chat::ChatSettings,
    /// The API keys every route but the public ones checks (`None`: authentication is off).
    pub keys: Option<taskforce_runtime::auth::Keys>,
    /// Open runs per API key (`--max-runs-per-key`).
    pub runs_per_key: Arc<crate::limits::RunsPerKey>,
    /// Every agent, kept current from the registry's change stream while it is connected.
    pub agents: crate::read_model::ReadModel,
}

/// Warns when the gateway's service token is one of its own keys without every scope its calls
/// to the services need (they share the keys, as docs/security.md asks): reads would work and
/// creates or runs fail with 500. A gateway meant only for reads may have such a token, so it
/// is said, not refused. A token that is none of the gateway's keys is not judged.
fn warn_on_narrow_service_token(keys: Option<&taskforce_runtime::auth::Keys>, token: Option<&str>) {
    use taskforce_runtime::auth::Scope;
    let Some(principal) = keys.zip(token).and_then(|(keys, t)| keys.verify(t.trim())) else {
        return;
    };
    let missing: Vec<&str> = [Scope::Read, Scope::Write, Scope::Execute]
        .into_iter()
        .filter(|s| !principal.has(*s))
        .map(Scope::as_str)
        .collect();
    if !missing.is_empty() {
        tracing::warn!(
            key = %principal.name,
            missing = %missing.join(", "),
            "TASKFORCE_SERVICE_TOKEN is a key without every scope the gateway's calls need: \
             requests that need the missing ones will fail with 500 (give it admin, or read, \
             write and execute)"
        );
    }
}

impl AppState {
    /// The state for `config`, with a lazily connected channel: no I/O happens here but reading
    /// the API keys file. Without keys, a `--listen` address off loopback is refused (see
    /// [`taskforce_runtime::auth`]); `--mcp-stdio` has no listener.
    pub fn new(config: &Config, shutdown: CancellationToken) -> Result<Self, GatewayError> {
        let listeners = if config.mcp_stdio {
            Vec::new()
        } else {
            vec![config.listen]
        };
        let keys = config.auth.keys("gateway", &listeners)?;
        let token = config.auth.outgoing()?;
        warn_on_narrow_service_token(keys.as_ref(), config.auth.service_token.as_deref());
        let channel = lazy_channel(&config.registry_url)
            .map_err(|reason| GatewayError::RegistryUrl { reason })?;
        Ok(Self(Arc::new(Shared {
            registry: AgentRegistryClient::new(traced(channel.clone(), token.clone()))
                .max_decoding_message_size(taskforce_runtime::MAX_DECODING_BYTES),
            executors: crate::executors::Executors::parse(&config.executor_url, token)?,
            health: HealthClient::new(channel),
            max_body_bytes: config.max_body_bytes,
            grpc_timeout: config.request_timeout(),
            shutdown,
            chat: crate::chat::ChatSettings::from_config(config),
            keys,
            runs_per_key: Arc::new(crate::limits::RunsPerKey::new(config.max_runs_per_key)),
            agents: crate::read_model::ReadModel::new(),
        })))
    }

    /// Agents from the registry, profiles first: with `page_size`, that one page after
    /// `page_token` and the next page's token; without, every page from `page_token` on (and
    /// an empty token).
    pub async fn list_agents(
        &self,
        source: v1::AgentSource,
        page_size: Option<u32>,
        mut page_token: String,
    ) -> Result<(Vec<v1::Agent>, String), RestError> {
        let mut client = self.registry.clone();
        let mut agents = Vec::new();
        loop {
            let req = v1::ListAgentsRequest {
                page_size: page_size.unwrap_or(FULL_LIST_PAGE),
                page_token: page_token.clone(),
                source: source.into(),
            };
            let page = client.list_agents(self.request(req)).await?.into_inner();
            if agents.is_empty() {
                agents = page.agents;
            } else {
                agents.extend(page.agents);
            }
            if page_size.is_some() || page.next_page_token.is_empty() {
                return Ok((agents, page.next_page_token));
            }
            if page.next_page_token == page_token {
                // A registry that hands back the token it was given would make this loop forever.
                error!(page_token = %page_token, "registry repeated a page token while listing every agent");
                return Err(RestError::internal());
            }
            page_token = page.next_page_token;
        }
    }

    /// A registry request carrying the gateway's deadline.
    pub fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut req = tonic::Request::new(message);
        req.set_timeout(self.grpc_timeout);
        req
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_bad_registry_url_is_a_start_up_error() {
        let config = Config::with_registry("not a url");
        assert!(matches!(
            AppState::new(&config, CancellationToken::new()),
            Err(GatewayError::RegistryUrl { .. })
        ));
    }

    #[tokio::test]
    async fn a_bad_executor_url_is_a_start_up_error() {
        let config = Config {
            executor_url: "not a url".into(),
            ..Config::default()
        };
        assert!(matches!(
            AppState::new(&config, CancellationToken::new()),
            Err(GatewayError::ExecutorUrl { .. })
        ));
    }

    #[tokio::test]
    async fn a_missing_registry_does_not_stop_start_up() {
        let config = Config::with_registry("http://127.0.0.1:9");
        assert!(AppState::new(&config, CancellationToken::new()).is_ok());
    }
}
