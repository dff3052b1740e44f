//! `/healthz` (the process is up) and `/readyz` (the registry answers `grpc.health.v1` SERVING).

use std::time::Duration;

use axum::{
    Json,
    extract::State,
    response::{IntoResponse, Response},
};
use serde::Serialize;
use taskforce_proto::{error::ErrorKind, v1::agent_registry_server::SERVICE_NAME};
use tonic_health::pb::{HealthCheckRequest, health_check_response::ServingStatus};
use tracing::warn;
use utoipa::ToSchema;

use crate::{
    error::{RestError, cause},
    openapi::ErrorBody,
    registry::AppState,
};

/// How long `/readyz` waits for the registry's health answer.
const READY_TIMEOUT: Duration = Duration::from_secs(2);

/// Body of the probes.
#[derive(Debug, Serialize, ToSchema)]
pub struct StatusJson {
    /// `ok` (`/healthz`) or `ready` (`/readyz`).
    #[schema(value_type = String, example = "ok")]
    pub status: &'static str,
}

/// Liveness: the process is up.
#[utoipa::path(get, path = "/healthz", tag = "ops",
    responses((status = 200, description = "Up", body = StatusJson, example = json!({"status": "ok"}))))]
pub async fn healthz() -> Json<StatusJson> {
    Json(StatusJson { status: "ok" })
}

/// Readiness: the registry answers its gRPC health check with SERVING.
#[utoipa::path(get, path = "/readyz", tag = "ops",
    responses(
        (status = 200, description = "Ready", body = StatusJson, example = json!({"status": "ready"})),
        (status = 503, description = "`unavailable`: the registry is down or not serving, or the gateway is stopping", body = ErrorBody)))]
pub async fn readyz(State(state): State<AppState>) -> Response {
    if state.shutdown.is_cancelled() {
        return RestError::new(ErrorKind::Unavailable, "the gateway is shutting down")
            .into_response();
    }
    let mut req = tonic::Request::new(HealthCheckRequest {
        service: SERVICE_NAME.to_owned(),
    });
    req.set_timeout(READY_TIMEOUT);
    let unready = match tokio::time::timeout(READY_TIMEOUT, state.health.clone().check(req)).await {
        Ok(Ok(res)) => match res.into_inner().status() {
            ServingStatus::Serving => return Json(StatusJson { status: "ready" }).into_response(),
            other => format!(
                "the registry is not serving (status {})",
                other.as_str_name()
            ),
        },
        Ok(Err(status)) => {
            warn!(code = ?status.code(), error = %cause(&status), "registry health check failed");
            "the registry is not reachable".to_owned()
        }
        Err(_) => {
            warn!(
                timeout_ms = READY_TIMEOUT.as_millis(),
                "registry health check timed out"
            );
            "the registry did not answer its health check in time".to_owned()
        }
    };
    RestError::new(ErrorKind::Unavailable, unready).into_response()
}
