//! Prometheus metrics of the executor, served at `/metrics` on a small listener of its own.
//!
//! Tool calls (seed 003 §8): `idp_tool_execution_seconds` (histogram), `idp_tool_success_total`
//! and `idp_tool_failure_total`, labelled by `tool` and `subagent` (the sub-agent a delegation
//! ran, empty for other tools). Global MCP servers: `taskforce_mcp_server_up` (1 up, 0 down)
//! and `taskforce_mcp_server_tools`, labelled by `server`. One process-wide registry: every run
//! of the process counts into it, as a scrape expects.
//!
//! The listener also serves `/readyz`: JSON with the global MCP servers' health (always 200
//! while the executor serves; a server that is down is `"status": "degraded"`, since runs go
//! on without its tools and the chat endpoint falls back to the plain LLM).

use std::{
    net::SocketAddr,
    sync::{Arc, LazyLock},
    time::Duration,
};

use axum::{Json, Router, extract::State, http::header, response::IntoResponse, routing::get};
use prometheus_client::{
    encoding::{EncodeLabelSet, text::encode},
    metrics::{
        counter::Counter,
        family::Family,
        gauge::Gauge,
        histogram::{Histogram, exponential_buckets},
    },
    registry::Registry,
};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::{audit::Outcome, tools::global::GlobalServers};

/// Labels of a global MCP server.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ServerLabels {
    server: String,
}

/// Labels of a tool call.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolLabels {
    tool: String,
    subagent: String,
}

struct Metrics {
    registry: Registry,
    duration: Family<ToolLabels, Histogram>,
    success: Family<ToolLabels, Counter>,
    failure: Family<ToolLabels, Counter>,
    server_up: Family<ServerLabels, Gauge>,
    server_tools: Family<ServerLabels, Gauge>,
}

fn histogram() -> Histogram {
    // 1 ms … ~4.4 min: native tools take milliseconds, sub-agents and web calls minutes.
    Histogram::new(exponential_buckets(0.001, 4.0, 10))
}

static METRICS: LazyLock<Metrics> = LazyLock::new(|| {
    let mut registry = Registry::default();
    let duration = Family::<ToolLabels, Histogram>::new_with_constructor(histogram as fn() -> _);
    let success = Family::<ToolLabels, Counter>::default();
    let failure = Family::<ToolLabels, Counter>::default();
    registry.register(
        "idp_tool_execution_seconds",
        "Duration of tool calls, sub-agent delegations included",
        duration.clone(),
    );
    // The client appends `_total` to counters.
    registry.register(
        "idp_tool_success",
        "Tool calls that succeeded",
        success.clone(),
    );
    registry.register(
        "idp_tool_failure",
        "Tool calls that failed",
        failure.clone(),
    );
    let server_up = Family::<ServerLabels, Gauge>::default();
    let server_tools = Family::<ServerLabels, Gauge>::default();
    registry.register(
        "taskforce_mcp_server_up",
        "Whether a global MCP server is connected and passed its last health check",
        server_up.clone(),
    );
    registry.register(
        "taskforce_mcp_server_tools",
        "Tools a global MCP server listed at its last health check",
        server_tools.clone(),
    );
    Metrics {
        registry,
        duration,
        success,
        failure,
        server_up,
        server_tools,
    }
});

/// Counts one tool call.
pub fn tool_call(tool: &str, subagent: Option<&str>, outcome: Outcome, duration: Duration) {
    let labels = ToolLabels {
        tool: tool.to_owned(),
        subagent: subagent.unwrap_or_default().to_owned(),
    };
    let metrics = &*METRICS;
    metrics
        .duration
        .get_or_create(&labels)
        .observe(duration.as_secs_f64());
    match outcome {
        Outcome::Ok | Outcome::Question => metrics.success.get_or_create(&labels).inc(),
        Outcome::ToolFailed | Outcome::Error | Outcome::Blocked => {
            metrics.failure.get_or_create(&labels).inc()
        }
    };
}

/// Records a global MCP server's state.
pub fn mcp_server(server: &str, up: bool, tools: usize) {
    let labels = ServerLabels {
        server: server.to_owned(),
    };
    let metrics = &*METRICS;
    metrics.server_up.get_or_create(&labels).set(i64::from(up));
    metrics
        .server_tools
        .get_or_create(&labels)
        .set(i64::try_from(tools).unwrap_or(i64::MAX));
}

/// The metrics in the Prometheus (OpenMetrics) text format.
pub fn render() -> String {
    let mut out = String::new();
    if let Err(e) = encode(&mut out, &METRICS.registry) {
        warn!(error = %e, "cannot encode metrics");
    }
    out
}

async fn scrape() -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        render(),
    )
}

/// `/readyz`: the executor serves; the global MCP servers' health says how well.
async fn ready(State(global): State<Arc<GlobalServers>>) -> impl IntoResponse {
    let health = global.health();
    let status = if health.values().all(|h| h.state == "up") {
        "ready"
    } else {
        "degraded"
    };
    Json(serde_json::json!({ "status": status, "mcp_servers": health }))
}

/// Serves `/metrics` and `/readyz` on `listener` until `stop` fires.
pub async fn serve(listener: TcpListener, global: Arc<GlobalServers>, stop: CancellationToken) {
    let addr: Option<SocketAddr> = listener.local_addr().ok();
    info!(addr = ?addr, "metrics listening");
    let app = Router::new()
        .route("/metrics", get(scrape))
        .route("/readyz", get(ready))
        .with_state(global);
    let served = axum::serve(listener, app)
        .with_graceful_shutdown(async move { stop.cancelled().await })
        .await;
    if let Err(e) = served {
        warn!(error = %e, "metrics listener failed");
    }
}
