//! The crate's error type, the REST error response, and the safety net that turns every
//! non-JSON 4xx/5xx (from axum, tower-http or hyper) into the JSON error body.
//!
//! The error model itself (kinds, HTTP statuses, body shape) lives in
//! [`taskforce_proto::error`]; this module only carries it over HTTP.

use std::future::{Ready, ready};

use axum::{
    body::Body,
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use taskforce_proto::error::{ApiError, ErrorKind};
use tracing::{error, warn};

/// Everything that can stop the gateway from starting or serving.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// A flag or environment variable has an unusable value.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// `--registry-url` is not a usable endpoint URL.
    #[error("--registry-url: {reason}")]
    RegistryUrl {
        /// Why it cannot be used (naming the value).
        reason: String,
    },
    /// An `--executor-url` entry is not a usable endpoint URL.
    #[error("--executor-url: {reason}")]
    ExecutorUrl {
        /// Why it cannot be used (naming the value).
        reason: String,
    },
    /// The MCP server could not start or failed (stdio mode).
    #[error("mcp server error: {0}")]
    Mcp(String),
    /// The HTTP server failed.
    #[error("server error: {0}")]
    Serve(#[from] std::io::Error),
    /// The API keys are unusable, or none are configured for a non-loopback `--listen`.
    #[error(transparent)]
    Auth(#[from] taskforce_runtime::auth::AuthError),
}

/// A client-facing error as an HTTP response: status from the kind, body from
/// [`ApiError::to_json`].
#[derive(Debug, Clone, PartialEq)]
pub struct RestError(pub ApiError);

impl RestError {
    /// An error with no details.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self(ApiError::new(kind, message))
    }

    /// A 500 whose body says nothing; the caller logs the cause.
    pub fn internal() -> Self {
        Self::new(ErrorKind::Internal, "internal error; see the gateway log")
    }

    /// The HTTP status of this error.
    pub fn status(&self) -> StatusCode {
        StatusCode::from_u16(self.0.kind.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }
}

impl From<ApiError> for RestError {
    fn from(e: ApiError) -> Self {
        Self(e)
    }
}

impl From<tonic::Status> for RestError {
    /// Decodes the registry's rich status (see [`RestError::from_upstream`]).
    fn from(status: tonic::Status) -> Self {
        Self::from_upstream(status, "registry")
    }
}

/// Whether `status` is the connection breaking under a call rather than an answer: no
/// Taskforce service said it (a reset, a service that died or stopped mid-call, a connection
/// that closed before the call went out on it: hyper's "operation was canceled: connection
/// closed", which tonic reads as `Cancelled`; or a service that stopped answering, found by the
/// HTTP/2 keep-alive: `Unavailable` from hyper's keep-alive timeout, with calls on their way
/// unanswered).
pub(crate) fn lost_connection(status: &tonic::Status) -> bool {
    !taskforce_proto::error::from_taskforce(status)
        && !taskforce_proto::error::is_client_deadline(status)
        && (matches!(status.code(), tonic::Code::Unknown | tonic::Code::Cancelled)
            || (status.code() == tonic::Code::Internal
                && status.message().starts_with("h2 protocol error"))
            || (status.code() == tonic::Code::Unavailable && keep_alive_timed_out(status)))
}

/// Whether `status` came from the HTTP/2 keep-alive giving up on an unanswered PING (tonic's
/// message is only "http2 error"; the hyper error is among its sources).
fn keep_alive_timed_out(status: &tonic::Status) -> bool {
    std::iter::successors(std::error::Error::source(status), |e| e.source())
        .filter_map(|e| e.downcast_ref::<hyper::Error>())
        .any(hyper::Error::is_timeout)
}

impl RestError {
    /// [`RestError::from`] for a registry call that writes: when the connection broke or the
    /// call timed out, the write may have been applied, and the message says so (retrying a
    /// create blindly would meet a 409).
    pub fn from_write(status: tonic::Status) -> Self {
        let lost = lost_connection(&status);
        let mut err = Self::from(status);
        let what = match err.0.kind {
            _ if lost => "the connection to the registry was lost during the write",
            ErrorKind::Timeout => "the registry did not answer in time",
            _ => return err,
        };
        err.0.message =
            format!("{what}; it may have applied the write: read the agent before retrying");
        err
    }

    /// Decodes a rich status of `service` (`registry`, `executor`). 5xx causes are logged here
    /// and replaced by a short message naming the service, so the body says little and the log
    /// says everything. RESOURCE_EXHAUSTED without Taskforce details is the HTTP/2 connection
    /// giving up (a GOAWAY with ENHANCE_YOUR_CALM, flow control), not a body that was too large
    /// (the services say that with details): it is `unavailable`.
    pub fn from_upstream(status: tonic::Status, service: &str) -> Self {
        let mut api = ApiError::from_status(&status);
        if status.code() == tonic::Code::ResourceExhausted && status.details().is_empty() {
            api.kind = ErrorKind::Unavailable;
        }
        match api.kind {
            ErrorKind::Unauthenticated | ErrorKind::PermissionDenied => {
                // The caller was let in here; the service refused the gateway's own token.
                error!(code = ?status.code(), error = %cause(&status), "the {service} refused the gateway's TASKFORCE_SERVICE_TOKEN");
                Self::new(
                    ErrorKind::Internal,
                    format!("the {service} refused the gateway's credentials; see the gateway log"),
                )
            }
            // The service answered, and says what it lacks (the executor without its
            // registry): its message names the cause, and the service is not to blame.
            ErrorKind::Unavailable if taskforce_proto::error::from_taskforce(&status) => {
                warn!(code = ?status.code(), error = %cause(&status), "the {service} lacks a service it needs");
                Self::new(ErrorKind::Unavailable, status.message())
            }
            ErrorKind::Unavailable => {
                warn!(code = ?status.code(), error = %cause(&status), "{service} unavailable");
                Self::new(
                    ErrorKind::Unavailable,
                    format!("the {service} is unavailable; try again later"),
                )
            }
            ErrorKind::Timeout => {
                warn!(code = ?status.code(), error = %cause(&status), "{service} call timed out");
                Self::new(
                    ErrorKind::Timeout,
                    format!("the {service} did not answer in time"),
                )
            }
            // No service said this: the connection broke under the call (the service died
            // mid-stream, a reset). The service is what is missing, not a bug.
            // A service that stops (GOAWAY) while a call is on its way reaches tonic as an
            // `Internal` h2 protocol error: the same case.
            ErrorKind::Internal if lost_connection(&status) => {
                warn!(code = ?status.code(), error = %cause(&status), "lost the connection to the {service}");
                Self::new(
                    ErrorKind::Unavailable,
                    format!("the connection to the {service} was lost; try again later"),
                )
            }
            ErrorKind::Internal => {
                error!(code = ?status.code(), error = %cause(&status), "{service} call failed");
                Self::new(
                    ErrorKind::Internal,
                    format!("internal error; see the gateway and {service} logs"),
                )
            }
            ErrorKind::InvalidArgument
            | ErrorKind::InvalidTools
            | ErrorKind::InvalidMcpTools
            | ErrorKind::InvalidMcpConfig
            | ErrorKind::InvalidSubagents
            | ErrorKind::NotFound
            | ErrorKind::AlreadyExists
            | ErrorKind::VersionConflict
            | ErrorKind::ReadOnly
            | ErrorKind::SessionConflict
            | ErrorKind::PayloadTooLarge
            | ErrorKind::ResourceExhausted
            | ErrorKind::QuotaExceeded
            | ErrorKind::MethodNotAllowed => Self(api),
        }
    }
}

/// The status message followed by its source chain (`tcp connect error: Connection refused`).
pub fn cause(status: &tonic::Status) -> String {
    let mut out = status.message().to_owned();
    let mut source = std::error::Error::source(status);
    while let Some(e) = source {
        out.push_str(": ");
        out.push_str(&e.to_string());
        source = e.source();
    }
    out
}

impl IntoResponse for RestError {
    fn into_response(self) -> Response {
        json_response(self.status(), &self.0)
    }
}

/// A refused call as the usual JSON error body: 401 `unauthenticated` with `WWW-Authenticate`,
/// or 403 `permission_denied`.
pub fn auth_rejection(denied: &taskforce_runtime::auth::Denied) -> Response {
    let kind = if denied.is_forbidden() {
        ErrorKind::PermissionDenied
    } else {
        ErrorKind::Unauthenticated
    };
    let mut res = RestError::new(kind, denied.message()).into_response();
    res.headers_mut()
        .insert(header::WWW_AUTHENTICATE, denied.challenge());
    res
}

/// `status` with the JSON body of `e`.
pub(crate) fn json_response(status: StatusCode, e: &ApiError) -> Response {
    // Serialising a `Value` cannot fail; an empty object is the (unreachable) fallback.
    let body = serde_json::to_vec(&e.to_json()).unwrap_or_else(|_| b"{}".to_vec());
    let mut res = Response::new(Body::from(body));
    *res.status_mut() = status;
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if e.kind == ErrorKind::ResourceExhausted {
        res.headers_mut().insert(
            header::RETRY_AFTER,
            HeaderValue::from_static(RETRY_AFTER_SECS),
        );
    }
    res
}

/// The `retry-after` of a 429: a live run usually ends within a second or two.
const RETRY_AFTER_SECS: &str = "1";

/// The kind for an HTTP error status that did not come with a JSON body.
pub fn kind_for_http(status: StatusCode) -> ErrorKind {
    match status.as_u16() {
        401 => ErrorKind::Unauthenticated,
        403 => ErrorKind::PermissionDenied,
        404 => ErrorKind::NotFound,
        405 => ErrorKind::MethodNotAllowed,
        408 | 504 => ErrorKind::Timeout,
        413 => ErrorKind::PayloadTooLarge,
        429 => ErrorKind::ResourceExhausted,
        502 | 503 => ErrorKind::Unavailable,
        507 => ErrorKind::QuotaExceeded,
        s if (400..500).contains(&s) => ErrorKind::InvalidArgument,
        _ => ErrorKind::Internal,
    }
}

/// A message for an HTTP error status that did not come with one.
fn message_for_http(status: StatusCode) -> &'static str {
    match status.as_u16() {
        404 => "no such resource",
        405 => "method not allowed on this route",
        408 | 504 => "the request did not finish in time",
        413 => "request body is larger than the limit",
        415 => "expected a request with Content-Type: application/json",
        502 | 503 => "the service is unavailable; try again later",
        s if (400..500).contains(&s) => "the request is invalid",
        _ => "internal error; see the gateway log",
    }
}

fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json") || v.contains("+json"))
}

/// Response middleware: a 4xx/5xx without a JSON body becomes the JSON error body for its
/// status; headers such as `Allow` are kept. Success responses pass untouched, so the cost on the
/// hot path is one status check.
pub fn json_errors(res: Response) -> Ready<Response> {
    let status = res.status();
    if !(status.is_client_error() || status.is_server_error()) || is_json(res.headers()) {
        return ready(res);
    }
    match status {
        StatusCode::GATEWAY_TIMEOUT => warn!("request timed out"),
        s if s.is_server_error() => warn!(status = s.as_u16(), "server error without a json body"),
        _ => {}
    }
    let (parts, _) = res.into_parts();
    ready(with_json_error(parts, message_for_http(status)))
}

/// A response of `parts` (its status and headers, such as `Allow`) with the JSON error body
/// for its status, `message` its message.
fn with_json_error(mut parts: http::response::Parts, message: &str) -> Response {
    let status = parts.status;
    let fresh = json_response(status, &ApiError::new(kind_for_http(status), message));
    let (fresh_parts, body) = fresh.into_parts();
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.extend(fresh_parts.headers);
    Response::from_parts(parts, body)
}

/// Most of a plain-text refusal's body that becomes its JSON message.
const PLAIN_ERROR_BYTES: usize = 4096;

/// `/mcp`'s refusals that rmcp answers in plain text (a disallowed `Origin`: 403 "Forbidden:
/// Origin header is not allowed"; a method or media type it does not take) as the JSON error
/// body every other refusal of the gateway has, the text its message. JSON-RPC answers (JSON)
/// and successes pass untouched.
pub async fn mcp_plain_errors(res: Response) -> Response {
    let status = res.status();
    if !(status.is_client_error() || status.is_server_error()) || is_json(res.headers()) {
        return res;
    }
    let (parts, body) = res.into_parts();
    // rmcp's refusals are a short body made at once; anything else is not waited for.
    let read = tokio::time::timeout(
        std::time::Duration::from_secs(1),
        axum::body::to_bytes(body, PLAIN_ERROR_BYTES),
    )
    .await;
    let text = match read {
        Ok(Ok(bytes)) => String::from_utf8_lossy(&bytes).trim().to_owned(),
        Ok(Err(_)) | Err(_) => String::new(),
    };
    let message = if text.is_empty() {
        message_for_http(status)
    } else {
        &text
    };
    with_json_error(parts, message)
}

/// Every 4xx/5xx body. `error` is one of `invalid_argument`, `invalid_tools`,
/// `invalid_mcp_tools`, `invalid_mcp_config`, `invalid_subagents`, `not_found`,
/// `already_exists`, `version_conflict`, `read_only`, `session_conflict`, `payload_too_large`,
/// `method_not_allowed`, `unavailable`, `timeout`, `resource_exhausted`, `quota_exceeded`,
/// `unauthenticated`, `permission_denied`, `internal`.
#[derive(Debug, utoipa::ToSchema)]
#[schema(example = json!({
    "error": "invalid_tools",
    "message": "Unknown tool(s) in tool_allowlist",
    "invalid_tools": ["foo_tool"],
    "available_tools": ["web_search", "web_fetch", "file_read"]
}))]
pub struct ErrorBody {
    /// The error code.
    pub error: String,
    /// A sentence that names the problem.
    pub message: String,
    /// Field problems of a 400.
    pub details: Option<Vec<FieldViolation>>,
    /// `invalid_tools` / `invalid_mcp_tools`: the names that are not offered.
    pub invalid_tools: Option<Vec<String>>,
    /// `invalid_tools` / `invalid_mcp_tools`: the names that are.
    pub available_tools: Option<Vec<String>>,
    /// `invalid_subagents`: the `subagents` entries that name no known agent.
    pub invalid_subagents: Option<Vec<String>>,
    /// `invalid_subagents`: the agents that could be named (sorted; at most 100).
    pub available_agents: Option<Vec<String>>,
}

/// One bad field.
#[derive(Debug, utoipa::ToSchema)]
pub struct FieldViolation {
    /// The field, e.g. `name` or `mcp_servers[0]`.
    pub field: String,
    /// What is wrong with it.
    pub description: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::to_bytes;
    use serde_json::{Value, json};

    async fn body_json(res: Response) -> Value {
        let bytes = to_bytes(res.into_body(), 1 << 20).await.unwrap_or_default();
        serde_json::from_slice(&bytes).unwrap_or(Value::Null)
    }

    #[tokio::test]
    async fn registry_client_errors_keep_their_details() {
        let status = ApiError::invalid_tools(
            ErrorKind::InvalidTools,
            "Unknown tool(s) in tool_allowlist",
            &["foo_tool".into()],
            &["web_search".into()],
        )
        .to_status();
        let res = RestError::from(status).into_response();
        assert_eq!(res.status(), StatusCode::BAD_REQUEST);
        assert_eq!(
            body_json(res).await,
            json!({
                "error": "invalid_tools",
                "message": "Unknown tool(s) in tool_allowlist",
                "invalid_tools": ["foo_tool"],
                "available_tools": ["web_search"]
            })
        );
    }

    #[tokio::test]
    async fn unknown_subagents_keep_their_details() {
        let status = ApiError::invalid_subagents(
            "Unknown agent(s) in subagents",
            &["nope".into()],
            &["dev".into(), "researcher".into()],
        )
        .to_status();
        let res = RestError::from(status).into_response();
        assert_eq!(res.status(), StatusCode::BAD_REQUEST);
        assert_eq!(
            body_json(res).await,
            json!({
                "error": "invalid_subagents",
                "message": "Unknown agent(s) in subagents",
                "invalid_subagents": ["nope"],
                "available_agents": ["dev", "researcher"]
            })
        );
    }

    #[tokio::test]
    async fn conflicts_and_not_found_map_to_409_and_404() {
        let stale = ApiError::new(ErrorKind::VersionConflict, "stale").to_status();
        assert_eq!(RestError::from(stale).status(), StatusCode::CONFLICT);
        let ro = ApiError::new(ErrorKind::ReadOnly, "profile").to_status();
        assert_eq!(RestError::from(ro).status(), StatusCode::CONFLICT);
        let missing = tonic::Status::not_found("agent \"x\" not found");
        let res = RestError::from(missing).into_response();
        assert_eq!(res.status(), StatusCode::NOT_FOUND);
        assert_eq!(body_json(res).await["error"], "not_found");
    }

    #[tokio::test]
    async fn transport_failures_are_503_without_internals() {
        let down =
            tonic::Status::unavailable("tcp connect error: Connection refused (os error 111)");
        let res = RestError::from(down).into_response();
        assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
        let body = body_json(res).await;
        assert_eq!(body["error"], "unavailable");
        assert!(!body["message"].as_str().unwrap_or_default().contains("tcp"));
        let boom = tonic::Status::internal("sled: corrupted page 7");
        let body = body_json(RestError::from(boom).into_response()).await;
        assert_eq!(body["error"], "internal");
        assert!(
            !body["message"]
                .as_str()
                .unwrap_or_default()
                .contains("sled")
        );
    }

    #[tokio::test]
    async fn plain_error_responses_become_json_and_keep_headers() {
        let mut res = Response::new(Body::from("Method Not Allowed"));
        *res.status_mut() = StatusCode::METHOD_NOT_ALLOWED;
        res.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET,HEAD"));
        res.headers_mut()
            .insert(header::CONTENT_LENGTH, HeaderValue::from_static("18"));
        let out = json_errors(res).await;
        assert_eq!(out.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(out.headers()[header::ALLOW], "GET,HEAD");
        assert!(out.headers().get(header::CONTENT_LENGTH).is_none());
        assert_eq!(body_json(out).await["error"], "method_not_allowed");
    }

    #[tokio::test]
    async fn success_and_json_errors_pass_untouched() {
        let ok = json_errors(Response::new(Body::from("hi"))).await;
        assert_eq!(ok.status(), StatusCode::OK);
        let already =
            RestError::new(ErrorKind::NotFound, "agent \"abc\" not found").into_response();
        let out = json_errors(already).await;
        assert_eq!(body_json(out).await["message"], "agent \"abc\" not found");
    }

    #[tokio::test]
    async fn a_service_stopping_under_a_call_is_unavailable_not_internal() {
        // What tonic makes of a GOAWAY that arrives while the call is on its way.
        let goaway = tonic::Status::internal(
            "h2 protocol error: http2 error: connection error received: not a result of an error",
        );
        let res = RestError::from_upstream(goaway.clone(), "registry").into_response();
        assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
        // For a write, the outcome is unknown, and the message says so.
        let write = RestError::from_write(goaway);
        assert!(write.0.message.contains("may have applied"), "{write:?}");
        let answered = RestError::from_write(
            ApiError::new(ErrorKind::AlreadyExists, "agent \"a\" already exists").to_status(),
        );
        assert!(!answered.0.message.contains("may have"), "{answered:?}");
        // A connection that closed before the call went out on it (a stopping executor's):
        // as lost, not an answer.
        let closed = tonic::Status::cancelled(
            "operation was canceled: transport error: operation was canceled: connection closed",
        );
        assert!(lost_connection(&closed));
        assert!(crate::executors::unreachable(&closed));
        // A registry write past the gateway's own deadline: a timeout whose write may have
        // been applied, not a lost connection.
        let deadline = tonic::Status::cancelled(tonic::TimeoutExpired(()).to_string());
        assert!(!lost_connection(&deadline));
        // One that could not be reached at all did not apply a write (one that stopped
        // answering, found by the keep-alive, may have: tests/e2e, with a stopped registry).
        let refused = tonic::Status::unavailable("tcp connect error: Connection refused");
        assert!(
            !RestError::from_write(refused)
                .0
                .message
                .contains("may have")
        );
        let write = RestError::from_write(deadline);
        assert_eq!(write.0.kind, ErrorKind::Timeout);
        assert!(write.0.message.contains("may have applied"), "{write:?}");
        // A service's own internal error stays one.
        let own = ApiError::new(ErrorKind::Internal, "internal error; see the registry log");
        let res = RestError::from_upstream(own.to_status(), "registry").into_response();
        assert_eq!(res.status(), StatusCode::INTERNAL_SERVER_ERROR);
    }

    #[test]
    fn http_statuses_map_to_kinds() {
        assert_eq!(
            kind_for_http(StatusCode::GATEWAY_TIMEOUT),
            ErrorKind::Timeout
        );
        assert_eq!(
            kind_for_http(StatusCode::REQUEST_TIMEOUT),
            ErrorKind::Timeout
        );
        assert_eq!(
            kind_for_http(StatusCode::PAYLOAD_TOO_LARGE),
            ErrorKind::PayloadTooLarge
        );
        assert_eq!(
            kind_for_http(StatusCode::UNSUPPORTED_MEDIA_TYPE),
            ErrorKind::InvalidArgument
        );
        assert_eq!(
            kind_for_http(StatusCode::BAD_GATEWAY),
            ErrorKind::Unavailable
        );
        assert_eq!(
            kind_for_http(StatusCode::INTERNAL_SERVER_ERROR),
            ErrorKind::Internal
        );
    }
}
