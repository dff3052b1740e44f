//! The one gRPC channel to the registry and the state every handler shares.

use std::time::Duration;

use axum::body::Bytes;
use taskforce_proto::v1::agent_registry_client::AgentRegistryClient;
use taskforce_runtime::telemetry::{TracedChannel, traced};
use tokio_util::sync::CancellationToken;
use tonic::transport::{Channel, Endpoint};
use tonic_health::pb::health_client::HealthClient;

use crate::{config::Config, error::GatewayError};

/// How long establishing the TCP connection to the registry may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// HTTP/2 PING interval, so a dead registry connection is noticed between requests.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(30);
/// How long to wait for a PING answer before dropping the connection.
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest registry answer accepted (a full page of 1000 agents with long prompts is several MiB;
/// tonic's default of 4 MiB is too tight).
pub(crate) const MAX_DECODING_BYTES: usize = 64 * 1024 * 1024;

/// What every handler needs; cloning it clones a few reference counts.
#[derive(Clone)]
pub struct AppState {
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
    /// The OpenAPI document, rendered once.
    pub openapi: Bytes,
    /// How `/ai/agent/stream` runs.
    pub chat: crate::chat::ChatSettings,
    /// The API keys every route but the public ones checks (`None`: authentication is off).
    pub keys: Option<taskforce_runtime::auth::Keys>,
    /// Open runs per API key (`--max-runs-per-key`).
    pub runs_per_key: std::sync::Arc<crate::limits::RunsPerKey>,
    /// Every agent, kept current from the registry's change stream while it is connected.
    pub agents: crate::read_model::ReadModel,
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
        let channel =
            lazy_channel(&config.registry_url).map_err(|source| GatewayError::RegistryUrl {
                url: config.registry_url.clone(),
                source,
            })?;
        Ok(Self {
            registry: AgentRegistryClient::new(traced(channel.clone(), token.clone()))
                .max_decoding_message_size(MAX_DECODING_BYTES),
            executors: crate::executors::Executors::parse(&config.executor_url, token)?,
            health: HealthClient::new(channel),
            max_body_bytes: config.max_body_bytes,
            grpc_timeout: config.request_timeout(),
            shutdown,
            openapi: crate::openapi::render(),
            chat: crate::chat::ChatSettings::from_config(config),
            keys,
            runs_per_key: std::sync::Arc::new(crate::limits::RunsPerKey::new(
                config.max_runs_per_key,
            )),
            agents: crate::read_model::ReadModel::new(),
        })
    }

    /// A registry request carrying the gateway's deadline.
    pub fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut req = tonic::Request::new(message);
        req.set_timeout(self.grpc_timeout);
        req
    }
}

/// One HTTP/2 channel to `url`, connected on first use and reconnected when it drops.
pub fn lazy_channel(url: &str) -> Result<Channel, tonic::transport::Error> {
    Ok(Endpoint::from_shared(url.to_owned())?
        .connect_timeout(CONNECT_TIMEOUT)
        .tcp_nodelay(true)
        .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
        .keep_alive_timeout(KEEPALIVE_TIMEOUT)
        .keep_alive_while_idle(true)
        .connect_lazy())
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
