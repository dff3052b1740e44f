//! The gRPC server wiring every Taskforce gRPC service shares.

use std::{convert::Infallible, future::Future, time::Duration};

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::{body::Body, server::NamedService, transport::Server};
use tower::Service;
use tracing::{info, warn};

/// The largest answer a Taskforce gRPC client accepts: a page of 1000 agents with long prompts
/// is several MiB, and tonic's default (4 MiB) is too tight.
pub const MAX_DECODING_BYTES: usize = 64 * 1024 * 1024;

/// A fault that keeps a service from doing its work until it is restarted, such as its store
/// failing to write (a full disk: sled refuses every write after its first I/O error). Set
/// once, by whoever meets it; [`serve_grpc`] then reports the service NOT_SERVING, so a
/// gateway sends new work elsewhere and an orchestrator's health probe restarts it.
#[derive(Debug, Clone)]
pub struct Fault(std::sync::Arc<tokio::sync::watch::Sender<Option<String>>>);

impl Default for Fault {
    fn default() -> Self {
        Self(std::sync::Arc::new(tokio::sync::watch::Sender::new(None)))
    }
}

impl Fault {
    /// Records `cause` (the first one is kept) and logs it once.
    pub fn set(&self, cause: impl std::fmt::Display) {
        self.0.send_if_modified(|current| {
            if current.is_some() {
                return false;
            }
            let cause = cause.to_string();
            tracing::error!(cause = %cause, "the service cannot do its work until it is restarted; it reports NOT_SERVING");
            *current = Some(cause);
            true
        });
    }

    /// The cause, once set.
    pub fn get(&self) -> Option<String> {
        self.0.borrow().clone()
    }

    /// Resolves once a cause is set.
    async fn occurred(&self) {
        let mut rx = self.0.subscribe();
        if rx.wait_for(Option::is_some).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// Why a gRPC server could not serve.
#[derive(Debug, thiserror::Error)]
pub enum GrpcError {
    /// The reflection service could not be built from the descriptors.
    #[error("reflection: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    /// The transport failed.
    #[error("server: {0}")]
    Transport(#[from] tonic::transport::Error),
}

/// Serves `service` on `listener` with `grpc.health.v1` (SERVING for the service and the
/// server), reflection, request metrics ([`crate::metrics::GrpcMetricsLayer`]), a span per
/// call continuing the caller's trace ([`crate::telemetry::server_span`]) and, with `keys`,
/// API-key checks ([`crate::auth::grpc_access`]; health stays public), until
/// `shutdown` fires. Then both health entries turn NOT_SERVING,
/// `drain` runs (a service lets its streams finish), and connections still open `grace` after
/// the shutdown (idle HTTP/2 clients, watch streams) are dropped: a stop never waits on clients.
/// Once `fault` is set, both health entries turn NOT_SERVING while the server goes on answering
/// (its calls say what is wrong).
#[allow(clippy::too_many_arguments)]
pub async fn serve_grpc<S, D>(
    builder: Server,
    listener: TcpListener,
    service: S,
    keys: Option<crate::auth::Keys>,
    shutdown: CancellationToken,
    drain: D,
    grace: Duration,
    fault: Fault,
) -> Result<(), GrpcError>
where
    S: Service<http::Request<Body>, Error = Infallible>
        + NamedService
        + Clone
        + Send
        + Sync
        + 'static,
    S::Response: axum::response::IntoResponse,
    S::Future: Send + 'static,
    D: Future<Output = ()> + Send,
{
    let (health, health_service) = tonic_health::server::health_reporter();
    health.set_serving::<S>().await;
    let (reflection_v1, reflection_v1alpha) = crate::reflection(S::NAME)?;
    let addr = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    info!(service = S::NAME, addr = %addr, "gRPC listening");
    let stopping = shutdown.clone();
    let faulted = health.clone();
    // Each call runs in a span that continues the caller's trace (see `crate::telemetry`).
    let tracing = crate::telemetry::RequestSpanLayer::new(|req: &http::Request<Body>| {
        crate::telemetry::server_span("gRPC", req.uri().path(), req.headers())
    });
    let mut builder = builder
        .layer(tracing)
        .layer(crate::metrics::GrpcMetricsLayer)
        .layer(crate::auth::AuthLayer::grpc(keys));
    let server = builder
        .add_service(health_service)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(service)
        .serve_with_incoming_shutdown(crate::incoming(listener), async move {
            stopping.cancelled().await;
            health
                .set_service_status("", tonic_health::ServingStatus::NotServing)
                .await;
            health.set_not_serving::<S>().await;
            drain.await;
        });
    let grace_period = async {
        shutdown.cancelled().await;
        tokio::time::sleep(grace).await;
    };
    let not_serving = async move {
        fault.occurred().await;
        faulted
            .set_service_status("", tonic_health::ServingStatus::NotServing)
            .await;
        faulted.set_not_serving::<S>().await;
        std::future::pending::<()>().await;
    };
    tokio::select! {
        r = server => Ok(r?),
        () = not_serving => Ok(()),
        () = grace_period => {
            warn!(grace_secs = grace.as_secs(), "connections still open after the grace period; closing them");
            Ok(())
        }
    }
}
