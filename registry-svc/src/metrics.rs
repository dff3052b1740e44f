//! The registry's Prometheus metrics, served at `/metrics` on a small listener of its own
//! (`--metrics-listen`): gRPC requests (`taskforce_runtime::metrics`), and, read from the store
//! at each scrape, `taskforce_registry_agents{source}` (cached agents by `profile`/`custom`),
//! `taskforce_registry_sled_bytes` (the cache's size on disk) and
//! `taskforce_registry_reconcile_age_seconds` (time since the last full reconcile succeeded:
//! the most the cache can lag behind files whose change events were lost).

use std::sync::{
    Arc, LazyLock,
    atomic::{AtomicU64, Ordering},
};

use axum::{Router, extract::State, response::IntoResponse, routing::get};
use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{family::Family, gauge::Gauge},
};

use taskforce_runtime::now_ms;

use crate::store::Store;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SourceLabel {
    source: String,
}

struct Metrics {
    agents: Family<SourceLabel, Gauge>,
    sled_bytes: Gauge,
    reconcile_age: Gauge,
}

static METRICS: LazyLock<Metrics> = LazyLock::new(|| {
    use taskforce_runtime::metrics::register;
    let metrics = Metrics {
        agents: Family::default(),
        sled_bytes: Gauge::default(),
        reconcile_age: Gauge::default(),
    };
    register(
        "taskforce_registry_agents",
        "Agents in the cache, by source (profile, custom)",
        metrics.agents.clone(),
    );
    register(
        "taskforce_registry_sled_bytes",
        "Size of the sled cache on disk",
        metrics.sled_bytes.clone(),
    );
    register(
        "taskforce_registry_reconcile_age_seconds",
        "Seconds since the last full reconcile of the config directory succeeded",
        metrics.reconcile_age.clone(),
    );
    metrics
});

/// Unix milliseconds of the last successful full reconcile (0: none yet).
static LAST_RECONCILE_MS: AtomicU64 = AtomicU64::new(0);

/// Notes a successful full reconcile.
pub fn reconciled() {
    LAST_RECONCILE_MS.store(now_ms(), Ordering::Relaxed);
}

fn gauge(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

async fn scrape(State(store): State<Arc<Store>>) -> impl IntoResponse {
    let metrics = &*METRICS;
    let (profiles, customs) = store.counts();
    for (source, n) in [("profile", profiles), ("custom", customs)] {
        metrics
            .agents
            .get_or_create(&SourceLabel {
                source: source.to_owned(),
            })
            .set(gauge(n as u64));
    }
    // When sled cannot say, the gauge keeps its last value rather than dropping to 0.
    if let Some(bytes) = store.size_on_disk() {
        metrics.sled_bytes.set(gauge(bytes));
    }
    let last = LAST_RECONCILE_MS.load(Ordering::Relaxed);
    if last > 0 {
        metrics
            .reconcile_age
            .set(gauge(now_ms().saturating_sub(last) / 1000));
    }
    taskforce_runtime::metrics::scrape()
}

/// The metrics listener's routes: `/metrics`.
pub fn router(store: Arc<Store>) -> Router {
    Router::new()
        .route("/metrics", get(scrape))
        .with_state(store)
}
