//! `/healthz` (the process is up) and `/readyz` (the registry and at least one executor answer
//! `grpc.health.v1` SERVING and take the gateway's service token; executors that do not are
//! listed).

use std::time::Duration;

use axum::{
    Json,
    extract::State,
    response::{IntoResponse, Response},
};
use serde::Serialize;
use taskforce_proto::{
    error::ErrorKind,
    v1::{
        self, agent_registry_server::SERVICE_NAME,
        executor_server::SERVICE_NAME as EXECUTOR_SERVICE,
    },
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

/// How much longer than a call's own deadline its answer is waited for at most.
const BACKSTOP: Duration = Duration::from_millis(100);

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
/// SERVING and accept the gateway's credentials (with several executors, one that is down is
/// listed but does not make the gateway unready: new runs go to the others).
#[utoipa::path(get, path = "/readyz", tag = "ops",
    responses(
        (status = 200, description = "Ready; `executors_down` lists executors that are down while another serves", body = StatusJson, example = json!({"status": "ready"})),
        (status = 503, description = "`unavailable`: the registry, or every executor, is down, not serving or refuses the gateway's TASKFORCE_SERVICE_TOKEN (the message names which), or the gateway is stopping", body = ErrorBody)))]
pub async fn readyz(State(state): State<AppState>) -> Response {
    if state.shutdown.is_cancelled() {
        return RestError::new(ErrorKind::Unavailable, "the gateway is shutting down")
            .into_response();
    }
    let mut registry_client = state.registry.clone();
    let registry = check(
        state.health.clone(),
        SERVICE_NAME,
        "the registry".to_owned(),
        async move {
            registry_client
                .get_agent(probe(v1::GetAgentRequest {
                    agent_id: PROBE_ID.to_owned(),
                }))
                .await
                .map(drop)
        },
    );
    let executors = futures::future::join_all(state.executors.all().iter().map(|r| {
        let who = match &r.name {
            Some(name) => format!("the executor `{name}` ({})", r.url),
            None => format!("the executor ({})", r.url),
        };
        let mut client = r.client.clone();
        let credentials = async move {
            client
                .get_session(probe(v1::GetSessionRequest {
                    session_id: PROBE_ID.to_owned(),
                }))
                .await
                .map(drop)
        };
        check(r.health.clone(), EXECUTOR_SERVICE, who, credentials)
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

/// What readiness asks for behind each service's key check: an agent and a session that do
/// not exist (a `not_found` means the gateway's credentials were accepted).
const PROBE_ID: &str = "readyz-probe";

fn probe<T>(message: T) -> tonic::Request<T> {
    let mut req = tonic::Request::new(message);
    req.set_timeout(READY_TIMEOUT);
    req.metadata_mut().insert(
        taskforce_runtime::telemetry::PROBE_HEADER,
        tonic::metadata::MetadataValue::from_static("readyz"),
    );
    req
}

/// Asks `who`'s health service about `service`, then whether `who` takes the gateway's own
/// credentials (`credentials`, a read behind its key check: a service that refuses
/// `TASKFORCE_SERVICE_TOKEN` would fail every call while its health check says SERVING);
/// `Err` says what is wrong.
async fn check(
    health: HealthClient<Channel>,
    service: &str,
    who: String,
    credentials: impl std::future::Future<Output = Result<(), tonic::Status>>,
) -> Result<(), String> {
    serving(health, service, &who).await?;
    match tokio::time::timeout(READY_TIMEOUT, credentials).await {
        Ok(Err(status))
            if matches!(
                status.code(),
                tonic::Code::Unauthenticated | tonic::Code::PermissionDenied
            ) =>
        {
            warn!(service, code = ?status.code(), error = %cause(&status), "a service refuses the gateway's credentials");
            Err(format!(
                "{who} refuses the gateway's credentials (check TASKFORCE_SERVICE_TOKEN and that \
                 its key has the scopes the gateway needs)"
            ))
        }
        // Any answer past the key check (here: not found), or trouble the health check sees.
        _ => Ok(()),
    }
}

/// Asks `who`'s health service about `service`.
async fn serving(
    mut health: HealthClient<Channel>,
    service: &str,
    who: &str,
) -> Result<(), String> {
    let mut req = tonic::Request::new(HealthCheckRequest {
        service: service.to_owned(),
    });
    req.set_timeout(READY_TIMEOUT);
    // tonic's deadline (the request's timeout) ends a silent call; this one is a backstop.
    match tokio::time::timeout(READY_TIMEOUT + BACKSTOP, health.check(req)).await {
        Ok(Ok(res)) => match res.into_inner().status() {
            ServingStatus::Serving => Ok(()),
            other => Err(format!(
                "{who} is not serving (status {})",
                other.as_str_name()
            )),
        },
        Ok(Err(status)) if !taskforce_proto::error::is_client_deadline(&status) => {
            warn!(service, code = ?status.code(), error = %cause(&status), "health check failed");
            Err(format!("{who} is not reachable"))
        }
        Ok(Err(_)) | Err(_) => {
            warn!(
                service,
                timeout_ms = READY_TIMEOUT.as_millis(),
                "health check timed out"
            );
            Err(format!("{who} did not answer its health check in time"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A service that takes connections and never answers (a stopped or hung process) is
    /// said to be silent, not unreachable; one whose port is closed is unreachable.
    #[tokio::test]
    async fn a_hung_service_is_told_apart_from_one_that_is_down() {
        let (url, held) = crate::tests::silent_listener().await;
        let hung = HealthClient::new(crate::channel::lazy_channel(&url).expect("channel"));
        let said = serving(hung, "", "the executor").await.expect_err("hung");
        assert_eq!(said, "the executor did not answer its health check in time");
        held.abort();

        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").expect("listener");
            format!("http://{}", l.local_addr().expect("address"))
        };
        let down = HealthClient::new(crate::channel::lazy_channel(&closed).expect("channel"));
        let said = serving(down, "", "the executor").await.expect_err("down");
        assert_eq!(said, "the executor is not reachable");
    }
}
