//! One error model, two transports: every error kind maps to exactly one gRPC code and one HTTP
//! status, and travels over gRPC as a `google.rpc.Status` with an `ErrorInfo` (reason plus
//! metadata) and, for bad input, a `BadRequest` with field violations. The gateway decodes it back
//! into the JSON error body the seeds specify.

use std::collections::HashMap;

use serde_json::{Value, json};
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

/// `ErrorInfo.domain` of Taskforce errors.
pub const DOMAIN: &str = "taskforce.dev";

/// The most bytes of text each part of an error (its message, each list of its details, its
/// field violations) carries in a gRPC status: with the encodings (percent-encoding, base64)
/// all of it stays well within the 16 KiB of trailers common clients take.
pub const TRAILER_TEXT: usize = 2048;

/// How many of `items` (as text), from the first, fit in `budget` bytes together.
fn leading_within(items: impl Iterator<Item = String>, budget: usize) -> usize {
    let mut used = 0;
    items
        .take_while(|item| {
            used += item.len() + 1;
            used <= budget
        })
        .count()
}

/// `text` cut to at most `budget` bytes (at a character), marked with `…` when cut.
fn cut(text: &str, budget: usize) -> String {
    if text.len() <= budget {
        return text.to_owned();
    }
    let mut end = budget.saturating_sub('…'.len_utf8());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// Whether a Taskforce service made `status` (its `ErrorInfo` is of the Taskforce domain), as
/// opposed to the transport failing to reach one or breaking under a call.
pub fn from_taskforce(status: &Status) -> bool {
    status
        .get_error_details()
        .error_info()
        .is_some_and(|info| info.domain == DOMAIN)
}

/// Every kind of error a client can see.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The request is malformed or a field is invalid.
    InvalidArgument,
    /// `tool_allowlist` names tools the service does not offer.
    InvalidTools,
    /// `mcp_tool_allowlist` names tools the agent's MCP servers do not expose.
    InvalidMcpTools,
    /// An `mcp_servers` entry is not a valid server configuration.
    InvalidMcpConfig,
    /// `subagents` names agents the registry does not know.
    InvalidSubagents,
    /// No such agent.
    NotFound,
    /// The id is taken.
    AlreadyExists,
    /// `expected_version` does not match the stored version.
    VersionConflict,
    /// The agent cannot be changed through the API (profile agents).
    ReadOnly,
    /// A session's state does not allow the request: it has a live run, it waits for an answer,
    /// or it has no question (or another one) waiting.
    SessionConflict,
    /// The request body exceeds the size limit.
    PayloadTooLarge,
    /// The route exists but not with this method (REST), or the RPC is not implemented (gRPC).
    MethodNotAllowed,
    /// The service (or one it depends on) is not reachable right now.
    Unavailable,
    /// The operation did not finish in time.
    Timeout,
    /// The service is at a limit (e.g. its most live runs); retry later (`retry-after`).
    ResourceExhausted,
    /// A write would pass a storage limit (the registry's `--max-custom-agents-mb`): retrying
    /// does not help, freeing room or raising the limit does.
    QuotaExceeded,
    /// No valid API key came with the request.
    Unauthenticated,
    /// The API key lacks the scope the request needs.
    PermissionDenied,
    /// A bug or an I/O failure on the server.
    Internal,
}

impl ErrorKind {
    /// Every kind, for exhaustive tests.
    pub const ALL: [Self; 19] = [
        Self::InvalidArgument,
        Self::InvalidTools,
        Self::InvalidMcpTools,
        Self::InvalidMcpConfig,
        Self::InvalidSubagents,
        Self::NotFound,
        Self::AlreadyExists,
        Self::VersionConflict,
        Self::ReadOnly,
        Self::SessionConflict,
        Self::PayloadTooLarge,
        Self::MethodNotAllowed,
        Self::Unavailable,
        Self::Timeout,
        Self::ResourceExhausted,
        Self::QuotaExceeded,
        Self::Unauthenticated,
        Self::PermissionDenied,
        Self::Internal,
    ];

    /// The `ErrorInfo.reason`, upper snake case.
    pub fn reason(self) -> &'static str {
        match self {
            Self::InvalidArgument => "INVALID_ARGUMENT",
            Self::InvalidTools => "INVALID_TOOLS",
            Self::InvalidMcpTools => "INVALID_MCP_TOOLS",
            Self::InvalidMcpConfig => "INVALID_MCP_CONFIG",
            Self::InvalidSubagents => "INVALID_SUBAGENTS",
            Self::NotFound => "NOT_FOUND",
            Self::AlreadyExists => "ALREADY_EXISTS",
            Self::VersionConflict => "VERSION_CONFLICT",
            Self::ReadOnly => "READ_ONLY",
            Self::SessionConflict => "SESSION_CONFLICT",
            Self::PayloadTooLarge => "PAYLOAD_TOO_LARGE",
            Self::MethodNotAllowed => "METHOD_NOT_ALLOWED",
            Self::Unavailable => "UNAVAILABLE",
            Self::Timeout => "TIMEOUT",
            Self::ResourceExhausted => "RESOURCE_EXHAUSTED",
            Self::QuotaExceeded => "QUOTA_EXCEEDED",
            Self::Unauthenticated => "UNAUTHENTICATED",
            Self::PermissionDenied => "PERMISSION_DENIED",
            Self::Internal => "INTERNAL",
        }
    }

    /// The `error` field of the JSON body (the reason in lower case, e.g. `invalid_tools`).
    pub fn body_code(self) -> String {
        self.reason().to_ascii_lowercase()
    }

    /// The gRPC status code.
    pub fn grpc_code(self) -> Code {
        match self {
            Self::InvalidArgument
            | Self::InvalidTools
            | Self::InvalidMcpTools
            | Self::InvalidMcpConfig
            | Self::InvalidSubagents => Code::InvalidArgument,
            Self::NotFound => Code::NotFound,
            Self::AlreadyExists => Code::AlreadyExists,
            Self::VersionConflict => Code::Aborted,
            Self::ReadOnly | Self::SessionConflict => Code::FailedPrecondition,
            Self::PayloadTooLarge | Self::ResourceExhausted | Self::QuotaExceeded => {
                Code::ResourceExhausted
            }
            Self::MethodNotAllowed => Code::Unimplemented,
            Self::Unavailable => Code::Unavailable,
            Self::Timeout => Code::DeadlineExceeded,
            Self::Unauthenticated => Code::Unauthenticated,
            Self::PermissionDenied => Code::PermissionDenied,
            Self::Internal => Code::Internal,
        }
    }

    /// The HTTP status code.
    pub fn http_status(self) -> u16 {
        match self {
            Self::InvalidArgument
            | Self::InvalidTools
            | Self::InvalidMcpTools
            | Self::InvalidMcpConfig
            | Self::InvalidSubagents => 400,
            Self::NotFound => 404,
            Self::AlreadyExists
            | Self::VersionConflict
            | Self::ReadOnly
            | Self::SessionConflict => 409,
            Self::PayloadTooLarge => 413,
            Self::MethodNotAllowed => 405,
            Self::Unavailable => 503,
            Self::Timeout => 504,
            Self::ResourceExhausted => 429,
            Self::QuotaExceeded => 507,
            Self::Unauthenticated => 401,
            Self::PermissionDenied => 403,
            Self::Internal => 500,
        }
    }

    /// The kind with this reason, if any.
    pub fn from_reason(reason: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.reason() == reason)
    }

    /// The kind for a status without Taskforce details (e.g. from a proxy or tonic itself).
    pub fn from_code(code: Code) -> Self {
        match code {
            Code::InvalidArgument => Self::InvalidArgument,
            Code::NotFound => Self::NotFound,
            Code::AlreadyExists => Self::AlreadyExists,
            Code::Aborted => Self::VersionConflict,
            Code::FailedPrecondition => Self::ReadOnly,
            Code::ResourceExhausted => Self::PayloadTooLarge,
            Code::Unavailable | Code::Cancelled => Self::Unavailable,
            Code::DeadlineExceeded => Self::Timeout,
            Code::Unimplemented => Self::MethodNotAllowed,
            Code::Unauthenticated => Self::Unauthenticated,
            Code::PermissionDenied => Self::PermissionDenied,
            // tonic's own report of a message over a size limit (the services refuse bad input
            // as `InvalidArgument` with details): the answer was too large to read, no fault
            // of the caller's.
            Code::Ok | Code::Unknown | Code::Internal | Code::DataLoss | Code::OutOfRange => {
                Self::Internal
            }
        }
    }
}

/// Whether `status` is tonic's own report of a call that ran past the deadline its client gave
/// it (`CANCELLED` "Timeout expired", made on this side: the server said nothing).
pub fn is_client_deadline(status: &Status) -> bool {
    status.code() == Code::Cancelled
        && status.details().is_empty()
        && status.message() == tonic::TimeoutExpired(()).to_string()
}

/// A client-facing error: kind, message, and structured details.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    /// What went wrong, in one word.
    pub kind: ErrorKind,
    /// A sentence that names the problem.
    pub message: String,
    /// `(field, description)` pairs for bad input.
    pub field_violations: Vec<(String, String)>,
    /// Extra top-level body fields, such as `invalid_tools` and `available_tools` (JSON values).
    pub extra: Vec<(String, Value)>,
}

impl ApiError {
    /// An error with no details.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            field_violations: Vec::new(),
            extra: Vec::new(),
        }
    }

    /// A bad field.
    pub fn field(field: impl Into<String>, description: impl Into<String>) -> Self {
        let description = description.into();
        let field = field.into();
        Self {
            message: format!("{field}: {description}"),
            field_violations: vec![(field, description)],
            ..Self::new(ErrorKind::InvalidArgument, String::new())
        }
    }

    /// Several bad fields at once (the message lists them all).
    pub fn fields(violations: Vec<(String, String)>) -> Self {
        let message = violations
            .iter()
            .map(|(f, d)| format!("{f}: {d}"))
            .collect::<Vec<_>>()
            .join("; ");
        Self {
            message,
            field_violations: violations,
            ..Self::new(ErrorKind::InvalidArgument, String::new())
        }
    }

    /// The seed 002 `invalid_tools` error (or its MCP twin).
    pub fn invalid_tools(
        kind: ErrorKind,
        message: &str,
        invalid: &[String],
        available: &[String],
    ) -> Self {
        Self {
            extra: vec![
                ("invalid_tools".to_owned(), json!(invalid)),
                ("available_tools".to_owned(), json!(available)),
            ],
            ..Self::new(kind, message)
        }
    }

    /// The `invalid_subagents` error, shaped like [`ApiError::invalid_tools`]: the unknown ids
    /// and the agents that could be named instead.
    pub fn invalid_subagents(message: &str, invalid: &[String], available: &[String]) -> Self {
        Self {
            extra: vec![
                ("invalid_subagents".to_owned(), json!(invalid)),
                ("available_agents".to_owned(), json!(available)),
            ],
            ..Self::new(ErrorKind::InvalidSubagents, message)
        }
    }

    /// This error within [`TRAILER_TEXT`] bytes of each part (its message, each of its extra
    /// fields, its field violations), as every client is sent it, over gRPC and REST alike. A
    /// list cut short says so in the message.
    pub fn bounded(&self) -> Self {
        let mut message = self.message.clone();
        let extra = self
            .extra
            .iter()
            .map(|(k, v)| match v {
                Value::Array(items) => {
                    let kept = leading_within(items.iter().map(Value::to_string), TRAILER_TEXT);
                    if kept < items.len() {
                        message
                            .push_str(&format!(" ({k} lists the first {kept} of {})", items.len()));
                    }
                    (k.clone(), Value::Array(items[..kept].to_vec()))
                }
                Value::String(text) => (k.clone(), Value::String(cut(text, TRAILER_TEXT))),
                other => {
                    let text = other.to_string();
                    if text.len() <= TRAILER_TEXT {
                        (k.clone(), other.clone())
                    } else {
                        (k.clone(), Value::String(cut(&text, TRAILER_TEXT)))
                    }
                }
            })
            .collect();
        let kept = leading_within(
            self.field_violations.iter().map(|(f, d)| format!("{f}{d}")),
            TRAILER_TEXT,
        );
        let field_violations = match self.field_violations.first() {
            // One violation too long alone is kept, cut: it names the field at fault.
            Some((field, description)) if kept == 0 => vec![(
                cut(field, TRAILER_TEXT / 2),
                cut(description, TRAILER_TEXT / 2),
            )],
            _ => self.field_violations[..kept].to_vec(),
        };
        Self {
            kind: self.kind,
            message: cut(&message, TRAILER_TEXT),
            field_violations,
            extra,
        }
    }

    /// Encodes as a gRPC status with `ErrorInfo` and `BadRequest` details, [`bounded`]: a
    /// status travels in HTTP/2 trailers, which peers cap (16 KiB is common), and one past the
    /// cap breaks the whole connection, every other call on it included.
    ///
    /// [`bounded`]: ApiError::bounded
    pub fn to_status(&self) -> Status {
        let Self {
            kind,
            message,
            field_violations,
            extra,
        } = self.bounded();
        // A value's JSON text, cut again: escapes can make it longer than the text it holds.
        let metadata: HashMap<String, String> = extra
            .into_iter()
            .map(|(k, v)| match v {
                Value::Array(_) => (k, v.to_string()),
                other => (k, cut(&other.to_string(), TRAILER_TEXT)),
            })
            .collect();
        let mut details = ErrorDetails::with_error_info(kind.reason(), DOMAIN, metadata);
        if !field_violations.is_empty() {
            details.set_bad_request(
                field_violations
                    .into_iter()
                    .map(|(f, d)| tonic_types::FieldViolation::new(f, d))
                    .collect::<Vec<_>>(),
            );
        }
        if kind == ErrorKind::ResourceExhausted {
            // gRPC's `retry-after`: a live run usually ends within a second or two.
            details.set_retry_info(Some(std::time::Duration::from_secs(1)));
        }
        Status::with_error_details(kind.grpc_code(), message, details)
    }

    /// Decodes a gRPC status produced by [`ApiError::to_status`] (or any other status).
    pub fn from_status(status: &Status) -> Self {
        let details = status.get_error_details();
        let info = details.error_info();
        let kind = info
            .and_then(|i| ErrorKind::from_reason(&i.reason))
            .unwrap_or_else(|| {
                if is_client_deadline(status) {
                    ErrorKind::Timeout
                } else {
                    ErrorKind::from_code(status.code())
                }
            });
        let mut extra: Vec<(String, Value)> = info
            .map(|i| {
                i.metadata
                    .iter()
                    .map(|(k, v)| {
                        (
                            k.clone(),
                            serde_json::from_str(v).unwrap_or_else(|_| json!(v)),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        extra.sort_by(|a, b| b.0.cmp(&a.0));
        let field_violations = details
            .bad_request()
            .map(|b| {
                b.field_violations
                    .iter()
                    .map(|v| (v.field.clone(), v.description.clone()))
                    .collect()
            })
            .unwrap_or_default();
        Self {
            kind,
            message: status.message().to_owned(),
            field_violations,
            extra,
        }
    }

    /// The JSON error body: `{"error", "message", ...extra, "details"?}`, [`bounded`] (a body
    /// echoing a client's 1 MB field name four times was 4 MB).
    ///
    /// [`bounded`]: ApiError::bounded
    pub fn to_json(&self) -> Value {
        let bounded = self.bounded();
        let this = &bounded;
        let mut body = serde_json::Map::new();
        body.insert("error".into(), json!(this.kind.body_code()));
        body.insert("message".into(), json!(this.message));
        for (k, v) in &this.extra {
            body.insert(k.clone(), v.clone());
        }
        if !this.field_violations.is_empty() {
            body.insert(
                "details".into(),
                this.field_violations
                    .iter()
                    .map(|(f, d)| json!({ "field": f, "description": d }))
                    .collect(),
            );
        }
        Value::Object(body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_stays_within_what_trailers_take_and_says_what_it_cut() {
        let invalid: Vec<String> = (0..1000).map(|i| format!("unknown-tool-{i:04}")).collect();
        let available: Vec<String> = (0..5).map(|i| format!("tool-{i}")).collect();
        let violations: Vec<(String, String)> = (0..500)
            .map(|i| (format!("tool_allowlist[{i}]"), "is listed twice".to_owned()))
            .collect();
        let mut e = ApiError::invalid_tools(
            ErrorKind::InvalidTools,
            "Unknown tool(s) in tool_allowlist",
            &invalid,
            &available,
        );
        e.field_violations = violations;
        let status = e.to_status();
        let encoded = status.message().len() + status.details().len();
        assert!(encoded < 8 * 1024, "{encoded} bytes");
        let back = ApiError::from_status(&status);
        let listed = back
            .extra
            .iter()
            .find(|(k, _)| k == "invalid_tools")
            .and_then(|(_, v)| v.as_array())
            .map_or(0, Vec::len);
        assert!(listed > 50 && listed < 1000, "{listed}");
        assert_eq!(
            back.message,
            format!(
                "Unknown tool(s) in tool_allowlist (invalid_tools lists the first {listed} of 1000)"
            )
        );
        // A short list is whole, and its message untouched.
        let whole = ApiError::from_status(
            &ApiError::invalid_tools(ErrorKind::InvalidTools, "m", &available, &available)
                .to_status(),
        );
        assert_eq!(whole.message, "m");
        assert!(back.field_violations.len() < 500 && !back.field_violations.is_empty());
        // A message alone is cut at a character, and marked.
        let long = ApiError::new(ErrorKind::InvalidArgument, "é".repeat(5000)).to_status();
        assert!(long.message().len() <= TRAILER_TEXT && long.message().ends_with('…'));
    }

    #[test]
    fn a_json_body_is_bounded_as_a_status_is() {
        // A client's 900 KB unknown field, named in the message and in the one violation.
        let field = "a".repeat(900_000);
        let mut error = ApiError::new(
            ErrorKind::InvalidArgument,
            format!("invalid request body: unknown field `{field}`, expected one of `name`"),
        );
        error
            .field_violations
            .push((field.clone(), format!("unknown field `{field}`")));
        error.extra.push(("hint".into(), json!(field)));
        let body = error.to_json();
        assert!(
            body.to_string().len() < 4 * TRAILER_TEXT,
            "{}",
            body.to_string().len()
        );
        let message = body["message"].as_str().unwrap_or_default();
        assert!(message.starts_with("invalid request body: unknown field `aaa"));
        assert!(message.ends_with('…'));
        // The field at fault is still named, cut.
        assert_eq!(body["details"].as_array().map(Vec::len), Some(1));
        assert!(
            body["details"][0]["field"]
                .as_str()
                .is_some_and(|f| f.starts_with("aaa"))
        );
        // Small errors are untouched.
        let small = ApiError::field("name", "must not be empty");
        assert_eq!(small.bounded(), small);
    }

    #[test]
    fn every_kind_round_trips_through_a_grpc_status() {
        for kind in ErrorKind::ALL {
            let e = ApiError::new(kind, "boom");
            let back = ApiError::from_status(&e.to_status());
            assert_eq!(back.kind, kind);
            assert_eq!(back.message, "boom");
        }
    }

    #[test]
    fn invalid_tools_body_matches_the_seed_shape() {
        let e = ApiError::invalid_tools(
            ErrorKind::InvalidTools,
            "Unknown tool(s) in tool_allowlist",
            &["foo_tool".into()],
            &["web_search".into()],
        );
        let body = ApiError::from_status(&e.to_status()).to_json();
        assert_eq!(
            body,
            json!({
                "error": "invalid_tools",
                "message": "Unknown tool(s) in tool_allowlist",
                "invalid_tools": ["foo_tool"],
                "available_tools": ["web_search"]
            })
        );
        assert_eq!(e.kind.http_status(), 400);
    }

    #[test]
    fn invalid_subagents_body_has_the_invalid_tools_shape() {
        let e = ApiError::invalid_subagents(
            "Unknown agent(s) in subagents",
            &["nope".into()],
            &["dev".into(), "researcher".into()],
        );
        let status = e.to_status();
        assert_eq!(status.code(), Code::InvalidArgument);
        assert_eq!(
            status
                .get_error_details()
                .error_info()
                .map(|i| i.reason.clone()),
            Some("INVALID_SUBAGENTS".to_owned())
        );
        let back = ApiError::from_status(&status);
        assert_eq!(back.kind, ErrorKind::InvalidSubagents);
        assert_eq!(
            back.to_json(),
            json!({
                "error": "invalid_subagents",
                "message": "Unknown agent(s) in subagents",
                "invalid_subagents": ["nope"],
                "available_agents": ["dev", "researcher"]
            })
        );
        assert_eq!(e.kind.http_status(), 400);
    }

    #[test]
    fn field_violations_survive_and_are_listed() {
        let e = ApiError::fields(vec![("name".into(), "must not be empty".into())]);
        let back = ApiError::from_status(&e.to_status());
        assert_eq!(back.field_violations, e.field_violations);
        assert_eq!(back.to_json()["details"][0]["field"], "name");
    }
}
