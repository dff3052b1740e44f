//! `/healthz` (the process is up) and `/readyz` (the registry and at least one executor answer
//! `grpc.health.v1` SERVING; executors that do not are listed).

use std::time::Duration;

use axum::{
    Json,
    extract::State,
    response::{IntoResponse, Response},
};
use serde::Serialize;
use taskforce_proto::{
    error::ErrorKind,
    v1::{agent_registry_server::SERVICE_NAME, executor_server::SERVICE_NAME as EXECUTOR_SERVICE},
};
use tonic::transport::Channel;
use tonic_health::pb::{
    HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
};
use tracing::warn;
use utoipa::ToSchema;

use crate::{
    error::ErrorBody,
    error::{RestError, cause},
    state::AppState,
};

/// How long `/readyz` waits for each health answer.
const READY_TIMEOUT: Duration = Duration::from_secs(2);

/// Body of the probes.
#[derive(Debug, Serialize, ToSchema)]
pub struct StatusJson {
    /// `ok` (`/healthz`) or `ready` (`/readyz`).
    #[schema(value_type = String, example = "ok")]
    pub status: &'static str,
    /// `/readyz` only: executors that are down while another one serves (new runs go to those
    /// that serve; their sessions' calls are 503 until they are back). Absent when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub executors_down: Vec<String>,
}

/// Liveness: the process is up.
#[utoipa::path(get, path = "/healthz", tag = "ops",
    responses((status = 200, description = "Up", body = StatusJson, example = json!({"status": "ok"}))))]
pub async fn healthz() -> Json<StatusJson> {
    Json(StatusJson {
        status: "ok",
        executors_down: Vec::new(),
    })
}

/// Readiness: the registry and at least one executor answer their gRPC health checks with
/// SERVING (with several executors, one that is down is listed but does not make the gateway
/// unready: new runs go to the others).
#[utoipa::path(get, path = "/readyz", tag = "ops",
    responses(
        (status = 200, description = "Ready; `executors_down` lists executors that are down while another serves", body = StatusJson, example = json!({"status": "ready"})),
        (status = 503, description = "`unavailable`: the registry, or every executor, is down or not serving (the message names which), or the gateway is stopping", body = ErrorBody)))]
pub async fn readyz(State(state): State<AppState>) -> Response {
    if state.shutdown.is_cancelled() {
        return RestError::new(ErrorKind::Unavailable, "the gateway is shutting down")
            .into_response();
    }
    let registry = check(
        state.health.clone(),
        SERVICE_NAME,
        "the registry".to_owned(),
    );
    let executors = futures::future::join_all(state.executors.all().iter().map(|r| {
        let who = match &r.name {
            Some(name) => format!("the executor `{name}` ({})", r.url),
            None => format!("the executor ({})", r.url),
        };
        check(r.health.clone(), EXECUTOR_SERVICE, who)
    }));
    let (registry, executors) = tokio::join!(registry, executors);
    let serving = executors.iter().filter(|e| e.is_ok()).count();
    let down: Vec<String> = executors.into_iter().filter_map(Result::err).collect();
    let problems: Vec<String> = match registry {
        Err(e) => std::iter::once(e).chain(down.iter().cloned()).collect(),
        Ok(()) if serving == 0 && !down.is_empty() => down.clone(),
        Ok(()) => Vec::new(),
    };
    if problems.is_empty() {
        Json(StatusJson {
            status: "ready",
            executors_down: down,
        })
        .into_response()
    } else {
        RestError::new(ErrorKind::Unavailable, problems.join("; ")).into_response()
    }
}

/// Asks `who`'s health service about `service`; `Err` says what is wrong.
async fn check(
    mut health: HealthClient<Channel>,
    service: &str,
    who: String,
) -> Result<(), String> {
    let mut req = tonic::Request::new(HealthCheckRequest {
        service: service.to_owned(),
    });
    req.set_timeout(READY_TIMEOUT);
    match tokio::time::timeout(READY_TIMEOUT, health.check(req)).await {
        Ok(Ok(res)) => match res.into_inner().status() {
            ServingStatus::Serving => Ok(()),
            other => Err(format!(
                "{who} is not serving (status {})",
                other.as_str_name()
            )),
        },
        Ok(Err(status)) => {
            warn!(service, code = ?status.code(), error = %cause(&status), "health check failed");
            Err(format!("{who} is not reachable"))
        }
        Err(_) => {
            warn!(
                service,
                timeout_ms = READY_TIMEOUT.as_millis(),
                "health check timed out"
            );
            Err(format!("{who} did not answer its health check in time"))
        }
    }
}
