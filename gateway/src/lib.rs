//! gateway: the REST, SSE and MCP front door over the registry's and the executors' gRPC APIs.
//!
//! Agent routes become `taskforce.v1.AgentRegistry` calls (listing without `page_size` pages
//! through all agents) over one lazily connected, shared gRPC channel; JSON is mapped to
//! protobuf and back, and gRPC errors (`google.rpc.Status` with details) become the JSON error
//! bodies of `docs/rest-api.md`. Run routes (`/api/v1/execute`, `/api/v1/execute/stream`,
//! session answer, cancel and plan, and seed 004's `/ai/agent/stream` and `/ai/stream`) go to
//! the executors of `--executor-url`: one, or several by name, where a new run goes to the next
//! one in turn and a session id names the executor that owns it, so later calls about it reach
//! that executor. A run's gRPC event stream is relayed as SSE, and a client that goes away
//! cancels it. The MCP server (`/mcp`, or stdio with `--mcp-stdio`) offers `list_agents` and
//! `show_agent` over the registry channel. API keys (when configured) are checked on every
//! route but the public ones. Definitions, sessions and run state live in the registry and the
//! executors; the gateway owns none of them, so any number can run side by side.
//!
//! # Layout
//! - [`config`]: flags and environment, validated at start.
//! - [`channel`]: the lazily connected gRPC channels to the services.
//! - [`state`]: [`AppState`], what every handler shares (the registry channel and clients,
//!   the executors, the agents' read model, API keys, limits).
//! - [`executors`]: the executors behind the gateway and which one owns a session.
//! - [`model`]: the agent JSON shapes and their protobuf conversions.
//! - [`agents`]: `/api/v1/agents` handlers (CRUD and `:validate`).
//! - [`execute`]: `/api/v1/execute` (to the end, or as SSE) and session read, answer, cancel
//!   and plan, over the executor's gRPC API.
//! - [`sessions`]: `GET /api/v1/sessions`, every executor's sessions merged into pages.
//! - [`chat`]: seed 004's `/ai/agent/stream` and `/ai/stream`.
//! - `taskforce_runtime::http_server::serve`: HTTP/1 and HTTP/2 on the listener, with a time limit on a request's headers.
//! - [`sse`]: a run's event stream as Server-Sent Events, in our dialect or seed 004's.
//! - [`events`]: the JSON of run events (SSE) and of a session's todo plan.
//! - [`limits`]: open runs per API key (`--max-runs-per-key`).
//! - [`metadata`]: `/api/v1/agents/{agent_id}/metadata` (workspace metadata, seed 001).
//! - [`mcp`]: the MCP server (tools, streamable HTTP at `/mcp`, stdio).
//! - [`tools`]: `/api/v1/tools` and `/api/v1/diagnostics`.
//! - [`health`]: `/healthz` and `/readyz`; this file also serves `/metrics`.
//! - [`openapi`]: the OpenAPI 3 document at `/openapi.json`.
//! - [`read_model`]: every agent as JSON, kept current from the registry's change stream.
//! - [`extract`]: extractors with JSON rejections, id and `If-Match` checks.
//! - [`error`]: the crate's error, the REST error response, and the JSON safety net.

pub mod agents;
pub mod channel;
pub mod chat;
pub mod config;
pub mod error;
pub mod events;
pub mod execute;
pub mod executors;
pub mod extract;
pub mod health;
pub mod limits;
pub mod mcp;
pub mod metadata;
pub mod model;
pub mod openapi;
pub mod read_model;
pub mod sessions;
pub mod sse;
pub mod state;
pub mod tools;

use axum::{
    Router,
    extract::DefaultBodyLimit,
    http::{Method, StatusCode, Uri},
    middleware::map_response,
    routing::{get, post},
};
use taskforce_proto::error::ErrorKind;
use taskforce_runtime::telemetry::RequestSpanLayer;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tower_http::timeout::TimeoutLayer;
use tracing::{info, warn};

pub use config::Config;
pub use error::{GatewayError, RestError};
pub use state::AppState;

/// Serves the gateway on `listener` until `shutdown` fires, then lets in-flight requests finish.
pub async fn run(
    listener: TcpListener,
    config: Config,
    shutdown: CancellationToken,
) -> Result<(), GatewayError> {
    config.validate()?;
    let state = AppState::new(&config, shutdown.clone())?;
    mcp::transport::warn_on_unreachable_hosts(&config);
    let follower = tokio::spawn(state.agents.clone().follow(
        state.registry.clone(),
        config.request_timeout(),
        shutdown.clone(),
    ));
    let app = router(state, &config);
    info!(
        addr = %listener.local_addr().map(|a| a.to_string()).unwrap_or_default(),
        registry = %config.registry_url,
        "gateway listening"
    );
    let served = taskforce_runtime::http_server::serve(listener, app, shutdown.clone());
    // Open streams end within their grace period; connections still open a little after that
    // (a client that does not read) are dropped: a stop never waits on clients.
    let grace = async {
        shutdown.cancelled().await;
        tokio::time::sleep(sse::STOP_GRACE * 2).await;
    };
    tokio::select! {
        () = served => {}
        () = grace => warn!("connections still open after the grace period; closing them"),
    }
    // Also when serving failed: the follower stops on `shutdown`.
    shutdown.cancel();
    if let Err(e) = follower.await {
        warn!(error = %e, "the read model's follower ended abnormally");
    }
    info!("gateway stopped");
    Ok(())
}

/// Every route with its middleware: ordinary routes get the request timeout (runs and streams
/// do not); every REST
/// response passes the JSON error safety net; the body limit applies to every extractor. `/mcp`
/// sits outside the timeout and the REST error net: it answers in JSON-RPC and enforces its own
/// body limit (the same `--max-body-bytes`).
pub fn router(state: AppState, config: &Config) -> Router {
    let mcp = mcp::http_service(&state, config);
    let rebinding = rebinding_guard(&state, config);
    let auth =
        taskforce_runtime::auth::AuthLayer::new(state.keys.clone(), access, error::auth_rejection);
    let body_limits = (config.request_timeout(), config.max_body_bytes);
    let body_in_time = limits::BodyInTimeLayer {
        timeout: config.request_timeout(),
        max: config.max_body_bytes,
    };
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
        .route(
            "/api/v1/agents/{agent_id}/metadata",
            get(metadata::get_agent_metadata),
        )
        .route("/api/v1/diagnostics", get(tools::list_diagnostics))
        .route("/api/v1/sessions", get(sessions::list_sessions))
        .route(
            "/api/v1/sessions/{session_id}",
            get(execute::get_session).delete(execute::delete_session),
        )
        .route(
            "/api/v1/sessions/{session_id}/cancel",
            post(execute::cancel),
        )
        .route("/api/v1/sessions/{session_id}/plan", get(execute::get_plan))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::GATEWAY_TIMEOUT,
            config.request_timeout(),
        ))
        // Outside the timeout: a body the client is slow to send is its 408, not our 504, and
        // the request's own time starts once its body is here.
        .route_layer(body_in_time);
    // Runs are long-lived: no request timeout (the executor enforces its own run budget).
    let runs = Router::new()
        .route("/api/v1/execute", post(execute::execute))
        .route("/api/v1/execute/stream", post(execute::execute_stream))
        .route(
            "/api/v1/sessions/{session_id}/answer",
            post(execute::answer),
        )
        .route("/ai/agent/stream", post(chat::agent_stream))
        .route("/ai/stream", post(chat::plain_stream))
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            limits::per_key,
        ))
        .route_layer(body_in_time);
    let ops = Router::new()
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/openapi.json", get(openapi::openapi_json))
        .route("/metrics", get(metrics));
    api.merge(runs)
        .merge(ops)
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(config.max_body_bytes))
        .layer(map_response(error::json_errors))
        .with_state(state)
        .route_service(
            "/mcp",
            tower::ServiceBuilder::new()
                .layer(map_response(error::mcp_plain_errors))
                .layer(mcp::cors())
                .layer(axum::middleware::from_fn_with_state(
                    body_limits,
                    mcp::check_message,
                ))
                .service(mcp),
        )
        // API keys (when configured): before anything else runs, after metrics and tracing see
        // the request, so refusals are counted and traced.
        .layer(auth)
        // Without keys on loopback: only loopback `Host`s (DNS rebinding), as on `/mcp`; no
        // layer at all otherwise.
        .layer(tower::util::option_layer(rebinding.map(|hosts| {
            axum::middleware::from_fn_with_state(hosts, host_guard)
        })))
        // Requests by route template, method and status, `/mcp` included.
        .layer(axum::middleware::from_fn(
            taskforce_runtime::metrics::http_metrics,
        ))
        // A span per request, continuing the caller's W3C trace. Every 5xx path logs its cause
        // itself (`error`, `health`, rmcp).
        .layer(RequestSpanLayer::new(|req: &axum::extract::Request| {
            // Named as the metrics label them: a client's path or method is no span name.
            taskforce_runtime::telemetry::server_span(
                taskforce_runtime::metrics::method_label(req.method()),
                taskforce_runtime::metrics::route_label(req),
                req.headers(),
            )
        }))
}

/// Prometheus metrics of the gateway: HTTP requests by route template, method and status
/// (`taskforce_http_requests_total`, `taskforce_http_request_duration_seconds`).
#[utoipa::path(get, path = "/metrics", tag = "ops",
    responses((status = 200, description = "Prometheus (OpenMetrics) text format", content_type = "application/openmetrics-text", body = String)))]
pub async fn metrics() -> impl axum::response::IntoResponse {
    taskforce_runtime::metrics::scrape()
}

/// The scope each route needs (see `docs/security.md`): health, readiness, metrics and the
/// OpenAPI document are public; runs, answers, cancels, deleting a session and the chat
/// streams need `execute`;
/// anything but a read (`GET`, `HEAD`) under `/api/v1/agents` (creating, updating, deleting,
/// and validating, which starts the agent's MCP servers) needs `write`; listing every session
/// needs `admin`; every other route (reads, `/mcp`, unknown paths) needs `read`.
///
/// Decided by whole path segments, never by a prefix or suffix of the path: an id is any
/// segment (an agent named `metadata`, a session named `cancel`), and a write to it is a write.
pub fn access(method: &Method, path: &str) -> taskforce_runtime::auth::Access {
    use taskforce_runtime::auth::{Access, Scope};
    let read = matches!(*method, Method::GET | Method::HEAD);
    let segments: Vec<&str> = path.strip_prefix('/').unwrap_or(path).split('/').collect();
    match segments.as_slice() {
        ["healthz" | "readyz" | "openapi.json" | "metrics"] => Access::Public,
        // A browser's CORS preflight carries no credentials; it is answered without running
        // anything (see `mcp::cors`).
        ["mcp"] if *method == Method::OPTIONS => Access::Public,
        ["api", "v1", "execute"]
        | ["api", "v1", "execute", "stream"]
        | ["ai", "agent", "stream"]
        | ["ai", "stream"] => Access::Needs(Scope::Execute),
        ["api", "v1", "sessions", _, "answer" | "cancel"] if !read => Access::Needs(Scope::Execute),
        ["api", "v1", "sessions", _] if !read => Access::Needs(Scope::Execute),
        // It names every session, and a session's id is what lets a caller continue it.
        ["api", "v1", "sessions"] => Access::Needs(Scope::Admin),
        ["api", "v1", "agents:validate"] => Access::Needs(Scope::Write),
        ["api", "v1", "agents", ..] if !read => Access::Needs(Scope::Write),
        _ => Access::Needs(Scope::Read),
    }
}

/// The `Host` names every route accepts when the gateway serves without API keys on a loopback
/// address (the default of `scripts/run.sh`): those `/mcp` accepts (loopback names, or
/// `--mcp-allowed-hosts`). A web page the browser loaded from a name that now resolves to
/// 127.0.0.1 (DNS rebinding) sends its own name, and without keys nothing else would stop it
/// from creating agents (whose MCP servers the registry starts) or running them. `None`: any
/// host (keys decide, or the gateway is reachable from the network anyway).
fn rebinding_guard(state: &AppState, config: &Config) -> Option<std::sync::Arc<[String]>> {
    if state.keys.is_some() || !config.listen.ip().is_loopback() {
        return None;
    }
    // Its own address is in it (127.0.0.2, say), as a client that was given it sends it.
    Some(mcp::transport::allowed_hosts(config)?.into())
}

/// Refuses (403) a request whose `Host` is not in `allowed` (see [`rebinding_guard`]).
async fn host_guard(
    axum::extract::State(allowed): axum::extract::State<std::sync::Arc<[String]>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let host = match request.headers().get(http::header::HOST) {
        // Not text: no name it could be.
        Some(value) => value.to_str().unwrap_or("(not text)"),
        None => request
            .uri()
            .authority()
            .map(http::uri::Authority::as_str)
            .unwrap_or_default(),
    };
    // A browser always names the host; a request naming none is no page's.
    if host.trim().is_empty() || host_allowed(host, &allowed) {
        return next.run(request).await;
    }
    let mut refusal = RestError::new(
        ErrorKind::PermissionDenied,
        format!(
            "`Host: {host}` is not a name this gateway answers without API keys (it listens on \
             loopback and accepts {}): a page from another site reaching it through DNS \
             rebinding is refused; use one of those names, or configure API keys",
            allowed.join(", ")
        ),
    )
    .into_response();
    taskforce_runtime::auth::close_unread(&request, &mut refusal);
    refusal
}

/// Whether `host` (a `Host` value) is one of `allowed`, each a name with or without a port
/// (`localhost`, `localhost:8080`, `::1`, `[::1]:8080`), as `/mcp` reads them: a name without
/// a port allows every port.
fn host_allowed(host: &str, allowed: &[String]) -> bool {
    let (name, port) = host_parts(host);
    allowed.iter().any(|entry| {
        let (allowed_name, allowed_port) = host_parts(entry);
        allowed_name.eq_ignore_ascii_case(name) && allowed_port.is_none_or(|p| Some(p) == port)
    })
}

/// A `Host` value as its name and port: `[::1]:8080` is `::1` and `8080`, a bare IPv6 address
/// (`::1`) has no port.
fn host_parts(host: &str) -> (&str, Option<&str>) {
    let host = host.trim();
    if let Some(rest) = host.strip_prefix('[') {
        let (name, after) = rest.split_once(']').unwrap_or((rest, ""));
        return (name, after.strip_prefix(':'));
    }
    if host.matches(':').count() > 1 {
        return (host, None);
    }
    match host.rsplit_once(':') {
        Some((name, port)) if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => {
            (name, Some(port))
        }
        _ => (host, None),
    }
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
