//! Prometheus metrics of the executor, served at `/metrics` on a small listener of its own.
//!
//! Tool calls (seed 003 §8): `idp_tool_execution_seconds` (histogram), `idp_tool_success_total`
//! and `idp_tool_failure_total`, labelled by `tool` and `subagent` (the sub-agent a delegation
//! ran, empty for other tools). One process-wide registry: every run of the process counts
//! into it, as a scrape expects.

use std::{net::SocketAddr, sync::LazyLock, time::Duration};

use axum::{Router, http::header, response::IntoResponse, routing::get};
use prometheus_client::{
    encoding::{EncodeLabelSet, text::encode},
    metrics::{
        counter::Counter,
        family::Family,
        histogram::{Histogram, exponential_buckets},
    },
    registry::Registry,
};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::audit::Outcome;

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
    Metrics {
        registry,
        duration,
        success,
        failure,
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

/// Serves `/metrics` on `listener` until `stop` fires.
pub async fn serve(listener: TcpListener, stop: CancellationToken) {
    let addr: Option<SocketAddr> = listener.local_addr().ok();
    info!(addr = ?addr, "metrics listening");
    let app = Router::new().route("/metrics", get(scrape));
    let served = axum::serve(listener, app)
        .with_graceful_shutdown(async move { stop.cancelled().await })
        .await;
    if let Err(e) = served {
        warn!(error = %e, "metrics listener failed");
    }
}
