//! Prometheus metrics of the executor, served at `/metrics` on a small listener of its own.
//!
//! Tool calls (seed 003 §8): `idp_tool_execution_seconds` (histogram), `idp_tool_success_total`
//! and `idp_tool_failure_total`, labelled by `tool` and `subagent` (the sub-agent a delegation
//! ran, empty for other tools); failures also by `outcome` (`tool_failed`: the tool said it
//! failed, `error`: the call could not run, `policy_blocked`: the policy refused it,
//! `cancelled`: the run was cancelled, its client left or its time ran out during the call); at most
//! [`MAX_LABEL_VALUES`] values of each label, later ones counted as `other` (the executor's own
//! tools always by their names). Global MCP servers: `taskforce_mcp_server_up` (1 up, 0 down) and `taskforce_mcp_server_tools`, labelled
//! by `server`. Runs: `taskforce_runs_in_flight`, `taskforce_runs_total{status}`; model calls:
//! `taskforce_llm_request_duration_seconds`, `taskforce_llm_tokens_total{kind}` and
//! `taskforce_llm_errors_total`, labelled by `provider`. The session store:
//! `taskforce_sessions_stored`, `taskforce_session_store_bytes`. gRPC requests: see
//! `taskforce_runtime::metrics`. One process-wide registry (the runtime's): every run of the
//! process counts into it, as a scrape expects.
//!
//! The listener also serves `/readyz`: JSON with the global MCP servers' health (200 while
//! the executor serves; a server that is down is `"status": "degraded"`, since runs go on
//! without its tools and the chat endpoint falls back to the plain LLM; 503 `"unavailable"`
//! with the `reason` once the session store has failed).

use std::{
    sync::{Arc, LazyLock},
    time::Duration,
};

use axum::{Json, Router, extract::State, response::IntoResponse, routing::get};
use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{
        counter::Counter,
        family::Family,
        gauge::Gauge,
        histogram::{Histogram, exponential_buckets},
    },
};

use taskforce_runtime::metrics::LabelText;

use crate::{audit::Outcome, tools::global::GlobalServers};

/// Labels of a global MCP server.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ServerLabels {
    server: LabelText,
}

/// Labels of a tool call.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolLabels {
    tool: LabelText,
    subagent: LabelText,
}

/// Labels of a failed tool call: how it failed besides which.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FailureLabels {
    tool: LabelText,
    subagent: LabelText,
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusLabel {
    status: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProviderLabel {
    provider: LabelText,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TokenLabels {
    provider: LabelText,
    kind: String,
}

struct Metrics {
    runs_in_flight: Gauge,
    runs: Family<StatusLabel, Counter>,
    llm_seconds: Family<ProviderLabel, Histogram>,
    llm_tokens: Family<TokenLabels, Counter>,
    llm_errors: Family<ProviderLabel, Counter>,
    duration: Family<ToolLabels, Histogram>,
    success: Family<ToolLabels, Counter>,
    failure: Family<FailureLabels, Counter>,
    server_up: Family<ServerLabels, Gauge>,
    server_tools: Family<ServerLabels, Gauge>,
    sessions_stored: Gauge,
    session_store_bytes: Gauge,
}

fn histogram() -> Histogram {
    // 1 ms … ~4.4 min: native tools take milliseconds, sub-agents and web calls minutes.
    Histogram::new(exponential_buckets(0.001, 4.0, 10))
}

static METRICS: LazyLock<Metrics> = LazyLock::new(|| {
    use taskforce_runtime::metrics::register;
    let runs_in_flight = Gauge::default();
    let runs = Family::<StatusLabel, Counter>::default();
    let llm_seconds =
        Family::<ProviderLabel, Histogram>::new_with_constructor(histogram as fn() -> _);
    let llm_tokens = Family::<TokenLabels, Counter>::default();
    let llm_errors = Family::<ProviderLabel, Counter>::default();
    register(
        "taskforce_runs_in_flight",
        "Runs (Execute or Answer) going on now",
        runs_in_flight.clone(),
    );
    register(
        "taskforce_runs",
        "Runs ended, by status (completed, paused, failed, cancelled)",
        runs.clone(),
    );
    register(
        "taskforce_llm_request_duration_seconds",
        "Model calls that succeeded, from the request to the end of the streamed answer, by provider (failed ones: taskforce_llm_errors_total)",
        llm_seconds.clone(),
    );
    register(
        "taskforce_llm_tokens",
        "Tokens the providers reported, by provider and kind (input, output)",
        llm_tokens.clone(),
    );
    register(
        "taskforce_llm_errors",
        "Model calls that failed (refused, an error status, a broken or cut-off stream), by provider",
        llm_errors.clone(),
    );
    let duration = Family::<ToolLabels, Histogram>::new_with_constructor(histogram as fn() -> _);
    let success = Family::<ToolLabels, Counter>::default();
    let failure = Family::<FailureLabels, Counter>::default();
    register(
        "idp_tool_execution_seconds",
        "Duration of tool calls, sub-agent delegations included",
        duration.clone(),
    );
    // The client appends `_total` to counters.
    register(
        "idp_tool_success",
        "Tool calls that succeeded",
        success.clone(),
    );
    register(
        "idp_tool_failure",
        "Tool calls that failed",
        failure.clone(),
    );
    let server_up = Family::<ServerLabels, Gauge>::default();
    let server_tools = Family::<ServerLabels, Gauge>::default();
    register(
        "taskforce_mcp_server_up",
        "Whether a global MCP server is connected and passed its last health check",
        server_up.clone(),
    );
    register(
        "taskforce_mcp_server_tools",
        "Tools a global MCP server listed at its last health check",
        server_tools.clone(),
    );
    let sessions_stored = Gauge::default();
    let session_store_bytes = Gauge::default();
    register(
        "taskforce_sessions_stored",
        "Sessions in the executor's store (running, paused and ended)",
        sessions_stored.clone(),
    );
    register(
        "taskforce_session_store_bytes",
        "Bytes of the sessions in the executor's store (their JSON; the store's files take more)",
        session_store_bytes.clone(),
    );
    Metrics {
        sessions_stored,
        session_store_bytes,
        runs_in_flight,
        runs,
        llm_seconds,
        llm_tokens,
        llm_errors,
        duration,
        success,
        failure,
        server_up,
        server_tools,
    }
});

/// The session store's figures: how many sessions, and their bytes.
pub fn session_store(sessions: usize, bytes: u64) {
    METRICS
        .sessions_stored
        .set(i64::try_from(sessions).unwrap_or(i64::MAX));
    METRICS
        .session_store_bytes
        .set(i64::try_from(bytes).unwrap_or(i64::MAX));
}

/// Most distinct values of the `tool` label, and of the `subagent` label: MCP tool names and
/// agent ids are the users', so the series they make are bounded; later values count as
/// [`OTHER`].
pub const MAX_LABEL_VALUES: usize = 256;

/// The label value of whatever is past [`MAX_LABEL_VALUES`].
pub const OTHER: &str = "other";

/// `value` as a label among those `seen` (at most [`MAX_LABEL_VALUES`]), else [`OTHER`].
fn bounded(seen: &std::sync::Mutex<std::collections::HashSet<String>>, value: &str) -> String {
    let Ok(mut seen) = seen.lock() else {
        return OTHER.to_owned();
    };
    if value.is_empty() || seen.contains(value) {
        return value.to_owned();
    }
    if seen.len() < MAX_LABEL_VALUES {
        seen.insert(value.to_owned());
        value.to_owned()
    } else {
        OTHER.to_owned()
    }
}

/// The `tool` label of a call: an executor's own tool (`own`) by its name, others within the
/// cap (their names come from MCP servers and agent ids, so they are not a fixed few).
fn tool_label(
    seen: &std::sync::Mutex<std::collections::HashSet<String>>,
    tool: &str,
    own: bool,
) -> String {
    if own {
        tool.to_owned()
    } else {
        bounded(seen, tool)
    }
}

/// The `tool` and `subagent` values labelled so far.
static TOOL_VALUES: LazyLock<std::sync::Mutex<std::collections::HashSet<String>>> =
    LazyLock::new(Default::default);
static SUBAGENT_VALUES: LazyLock<std::sync::Mutex<std::collections::HashSet<String>>> =
    LazyLock::new(Default::default);

/// Counts one tool call; `own`: one of the executor's own tools (not a delegation), labelled by
/// its name whatever the cap.
pub fn tool_call(
    tool: &str,
    own: bool,
    subagent: Option<&str>,
    outcome: Outcome,
    duration: Duration,
) {
    let labels = ToolLabels {
        tool: LabelText(tool_label(&TOOL_VALUES, tool, own)),
        subagent: LabelText(bounded(&SUBAGENT_VALUES, subagent.unwrap_or_default())),
    };
    let metrics = &*METRICS;
    metrics
        .duration
        .get_or_create(&labels)
        .observe(duration.as_secs_f64());
    match outcome {
        Outcome::Ok | Outcome::Question => metrics.success.get_or_create(&labels).inc(),
        Outcome::ToolFailed | Outcome::Error | Outcome::Blocked | Outcome::Cancelled => metrics
            .failure
            .get_or_create(&FailureLabels {
                tool: labels.tool,
                subagent: labels.subagent,
                outcome: outcome.as_str(),
            })
            .inc(),
    };
}

/// Counts a run in flight until dropped.
#[derive(Debug)]
pub struct RunInFlight(());

impl RunInFlight {
    /// One more run in flight.
    pub fn start() -> Self {
        METRICS.runs_in_flight.inc();
        Self(())
    }
}

impl Drop for RunInFlight {
    fn drop(&mut self) {
        METRICS.runs_in_flight.dec();
    }
}

/// Makes the counters whose label values are known at start exist at 0 (each run status, each
/// provider's errors and tokens), so a rate or a ratio over them is 0, not "no data", before
/// the first run or failure.
pub fn init<'a>(providers: impl IntoIterator<Item = &'a str>) {
    let metrics = &*METRICS;
    for status in ["completed", "paused", "failed", "cancelled"] {
        drop(metrics.runs.get_or_create(&StatusLabel {
            status: status.to_owned(),
        }));
    }
    for provider in providers {
        let label = ProviderLabel {
            provider: provider.into(),
        };
        drop(metrics.llm_errors.get_or_create(&label));
        for kind in ["input", "output"] {
            drop(metrics.llm_tokens.get_or_create(&TokenLabels {
                provider: provider.into(),
                kind: kind.to_owned(),
            }));
        }
    }
}

/// Counts a run that ended with `status`.
pub fn run_ended(status: &str) {
    METRICS
        .runs
        .get_or_create(&StatusLabel {
            status: status.to_owned(),
        })
        .inc();
}

/// Records one model call of `provider`.
pub fn llm_call(provider: &str, duration: Duration, input_tokens: u64, output_tokens: u64) {
    let metrics = &*METRICS;
    metrics
        .llm_seconds
        .get_or_create(&ProviderLabel {
            provider: provider.into(),
        })
        .observe(duration.as_secs_f64());
    for (kind, n) in [("input", input_tokens), ("output", output_tokens)] {
        if n > 0 {
            metrics
                .llm_tokens
                .get_or_create(&TokenLabels {
                    provider: provider.into(),
                    kind: kind.to_owned(),
                })
                .inc_by(n);
        }
    }
}

/// Counts a model call that failed.
pub fn llm_error(provider: &str) {
    METRICS
        .llm_errors
        .get_or_create(&ProviderLabel {
            provider: provider.into(),
        })
        .inc();
}

/// Records a global MCP server's state.
pub fn mcp_server(server: &str, up: bool, tools: usize) {
    let labels = ServerLabels {
        server: server.into(),
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
    LazyLock::force(&METRICS);
    taskforce_runtime::metrics::render()
}

async fn scrape() -> impl IntoResponse {
    LazyLock::force(&METRICS);
    taskforce_runtime::metrics::scrape()
}

/// `/readyz`: the executor serves (503 once its session store failed); the global MCP
/// servers' health says how well.
async fn ready(
    State((global, fault)): State<(Arc<GlobalServers>, taskforce_runtime::Fault)>,
) -> axum::response::Response {
    let health = global.health();
    if let Some(cause) = fault.get() {
        let body =
            serde_json::json!({ "status": "unavailable", "reason": cause, "mcp_servers": health });
        return (http::StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response();
    }
    let status = if health.values().all(|h| h.state == "up") {
        "ready"
    } else {
        "degraded"
    };
    Json(serde_json::json!({ "status": status, "mcp_servers": health })).into_response()
}

/// The metrics listener's routes: `/metrics` and `/readyz`.
pub fn router(global: Arc<GlobalServers>, fault: taskforce_runtime::Fault) -> Router {
    Router::new()
        .route("/metrics", get(scrape))
        .route("/readyz", get(ready))
        .with_state((global, fault))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_past_the_most_count_as_other() {
        let seen = std::sync::Mutex::default();
        for n in 0..MAX_LABEL_VALUES {
            assert_eq!(bounded(&seen, &format!("tool_{n}")), format!("tool_{n}"));
        }
        assert_eq!(bounded(&seen, "one_too_many"), OTHER);
        assert_eq!(
            bounded(&seen, "tool_7"),
            "tool_7",
            "a value seen before stays"
        );
        assert_eq!(bounded(&seen, ""), "", "no sub-agent is no value");
        // The executor's own tools keep their names past the cap; others do not.
        assert_eq!(tool_label(&seen, "file_read", true), "file_read");
        assert_eq!(tool_label(&seen, "file_read", false), OTHER);
    }

    #[test]
    fn names_with_quotes_and_line_breaks_stay_inside_their_labels() {
        // An MCP server's tool, or a global server, may be named anything.
        let name = "evil\"} 1\nfake_metric{a=\"b\\";
        tool_call(name, false, None, Outcome::Ok, Duration::from_millis(1));
        mcp_server(name, true, 1);
        let text = render();
        assert!(
            !text.lines().any(|l| l.starts_with("fake_metric")),
            "{text}"
        );
        let escaped = r#"evil\"} 1\nfake_metric{a=\"b\\"#;
        for series in [
            format!(r#"idp_tool_success_total{{tool="{escaped}",subagent=""}} 1"#),
            format!(r#"taskforce_mcp_server_up{{server="{escaped}"}} 1"#),
        ] {
            assert!(text.contains(&series), "{series} in {text}");
        }
    }
}
