//! gateway: the stateless REST front door over the registry's gRPC API.
//!
//! Every request is translated to one `taskforce.v1.AgentRegistry` call (listing without
//! `page_size` pages through all agents) over one lazily connected, shared gRPC channel; JSON is
//! mapped to protobuf and back, and registry errors (`google.rpc.Status` with details) become the
//! JSON error bodies of `docs/rest-api.md`. The gateway holds no state, so any number can run.
//!
//! # Layout
//! - [`config`]: flags and environment.
//! - [`registry`]: the gRPC channel and the state shared by handlers.
//! - [`model`]: the agent JSON shapes and their protobuf conversions.
//! - [`agents`]: `/api/v1/agents` handlers (CRUD and `:validate`).
//! - [`tools`]: `/api/v1/tools` and `/api/v1/diagnostics`.
//! - [`health`]: `/healthz` and `/readyz`.
//! - [`openapi`]: the OpenAPI 3 document at `/openapi.json`.
//! - [`extract`]: extractors with JSON rejections, id and `If-Match` checks.
//! - [`error`]: the crate's error, the REST error response, and the JSON safety net.

pub mod agents;
pub mod config;
pub mod error;
pub mod extract;
pub mod health;
pub mod model;
pub mod openapi;
pub mod registry;
pub mod tools;

use axum::{
    Router,
    extract::DefaultBodyLimit,
    http::{Method, StatusCode, Uri},
    middleware::map_response,
    routing::{get, post},
};
use taskforce_proto::error::ErrorKind;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tower_http::{timeout::TimeoutLayer, trace::TraceLayer};
use tracing::info;

pub use config::Config;
pub use error::{GatewayError, RestError};
pub use registry::AppState;

/// Serves the gateway on `listener` until `shutdown` fires, then lets in-flight requests finish.
pub async fn run(
    listener: TcpListener,
    config: Config,
    shutdown: CancellationToken,
) -> Result<(), GatewayError> {
    config.validate()?;
    let state = AppState::new(&config, shutdown.clone())?;
    let app = router(state, &config);
    info!(
        addr = %listener.local_addr().map(|a| a.to_string()).unwrap_or_default(),
        registry = %config.registry_url,
        "gateway listening"
    );
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        // Small JSON answers must not wait for Nagle's algorithm.
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await?;
    info!("gateway stopped");
    Ok(())
}

/// Every route with its middleware: ordinary routes get the request timeout; every response
/// passes the JSON error safety net; the body limit applies to every extractor.
pub fn router(state: AppState, config: &Config) -> Router {
    let api = Router::new()
        .route("/api/v1/tools", get(tools::list_tools))
        .route(
            "/api/v1/agents",
            get(agents::list_agents).post(agents::create_agent),
        )
        .route("/api/v1/agents:validate", post(agents::validate_agent))
        .route(
            "/api/v1/agents/{agent_id}",
            get(agents::get_agent)
                .put(agents::update_agent)
                .delete(agents::delete_agent),
        )
        .route("/api/v1/diagnostics", get(tools::list_diagnostics))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::GATEWAY_TIMEOUT,
            config.request_timeout(),
        ));
    let ops = Router::new()
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/openapi.json", get(openapi::openapi_json));
    api.merge(ops)
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(config.max_body_bytes))
        .layer(map_response(error::json_errors))
        // Every 5xx path logs its cause itself (`error`, `health`), so the trace layer's own
        // failure event would only repeat it.
        .layer(TraceLayer::new_for_http().on_failure(()))
        .with_state(state)
}

async fn not_found(method: Method, uri: Uri) -> RestError {
    RestError::new(
        ErrorKind::NotFound,
        format!("no route for {method} {}", uri.path()),
    )
}

async fn method_not_allowed(method: Method, uri: Uri) -> RestError {
    RestError::new(
        ErrorKind::MethodNotAllowed,
        format!("method {method} is not allowed on {}", uri.path()),
    )
}

#[cfg(test)]
mod tests;
