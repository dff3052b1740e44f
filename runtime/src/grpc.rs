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

/// A fault that keeps a service from doing its work, such as its store failing to write (a
/// full disk: sled refuses every write after its first I/O error, so only a restart mends
/// that). Set by whoever meets it (the first cause is kept) and cleared only by whoever can
/// tell it is over; [`serve_grpc`] reports the service NOT_SERVING while it is set, so a
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
            tracing::error!(cause = %cause, "the service cannot do its work; it reports NOT_SERVING");
            *current = Some(cause);
            true
        });
    }

    /// Ends the fault: the service serves again.
    pub fn clear(&self) {
        self.0.send_if_modified(|current| {
            let was = current.take();
            if let Some(cause) = &was {
                tracing::info!(cause = %cause, "the fault is over; the service reports SERVING again");
            }
            was.is_some()
        });
    }

    /// The cause, while set.
    pub fn get(&self) -> Option<String> {
        self.0.borrow().clone()
    }

    /// Resolves once a cause is set (at once if one is), with it.
    pub async fn occurred(&self) -> String {
        let mut rx = self.0.subscribe();
        let cause = rx
            .wait_for(Option::is_some)
            .await
            .map(|cause| cause.clone().unwrap_or_default());
        match cause {
            Ok(cause) => cause,
            Err(_) => std::future::pending().await,
        }
    }

    /// Follows the fault for as long as the service runs: `serving(false)` when it is set,
    /// `serving(true)` when it is cleared.
    async fn follow<F: std::future::Future<Output = ()>>(&self, serving: impl Fn(bool) -> F) {
        let mut rx = self.0.subscribe();
        let mut was_serving = true;
        loop {
            let now_serving = rx.borrow_and_update().is_none();
            if now_serving != was_serving {
                serving(now_serving).await;
                was_serving = now_serving;
            }
            if rx.changed().await.is_err() {
                return;
            }
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
/// While `fault` is set, both health entries are NOT_SERVING while the server goes on answering
/// (its calls say what is wrong).
/// The most calls one connection may have open at once.
pub const MAX_STREAMS_PER_CONNECTION: u32 = 1024;

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
    // Each call runs in a span that continues the caller's trace (see `crate::telemetry`),
    // named, as its metrics are, by the server's own methods (a client's made-up path is
    // `unknown`); the gateway's readiness probes make none.
    let methods = crate::metrics::GrpcMethods::of(S::NAME);
    let tracing = crate::telemetry::RequestSpanLayer::new({
        let methods = methods.clone();
        move |req: &http::Request<Body>| {
            if !crate::telemetry::traces_exported() || crate::telemetry::is_probe_call(req) {
                return tracing::Span::none();
            }
            crate::telemetry::server_span("gRPC", methods.label(req.uri().path()), req.headers())
        }
    });
    // Dead peers are found (keepalive pings), and one connection holds at most
    // `MAX_STREAMS_PER_CONNECTION` calls (the gateway multiplexes its runs on one).
    let mut builder = builder
        .max_concurrent_streams(MAX_STREAMS_PER_CONNECTION)
        .http2_keepalive_interval(Some(Duration::from_secs(30)))
        .http2_keepalive_timeout(Some(Duration::from_secs(20)))
        .tcp_keepalive(Some(Duration::from_secs(60)))
        .layer(tracing)
        .layer(crate::metrics::GrpcMetricsLayer::new(methods))
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
        fault
            .follow(|serving| {
                let health = faulted.clone();
                async move {
                    let status = if serving {
                        tonic_health::ServingStatus::Serving
                    } else {
                        tonic_health::ServingStatus::NotServing
                    };
                    health.set_service_status("", status).await;
                    health.set_service_status(S::NAME, status).await;
                }
            })
            .await;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_fault_is_followed_while_set_and_ends_when_cleared() {
        let fault = Fault::default();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let follower = fault.clone();
        let task = tokio::spawn(async move {
            follower
                .follow(|serving| {
                    let tx = tx.clone();
                    async move {
                        let _ = tx.send(serving);
                    }
                })
                .await;
        });
        fault.set("the disk is full");
        fault.set("a second cause is not kept");
        assert_eq!(rx.recv().await, Some(false));
        assert_eq!(fault.get().as_deref(), Some("the disk is full"));
        fault.clear();
        assert_eq!(rx.recv().await, Some(true));
        assert_eq!(fault.get(), None);
        task.abort();
    }
}
