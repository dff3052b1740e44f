//! What can go wrong, said so a person knows what to do (`Display`, [`Error::render`]) and as
//! the REST error body for scripts ([`Error::to_json`]).

use std::{fmt::Write as _, time::Duration};

use serde_json::{Value, json};
use taskforce_proto::error::ApiError;

/// The CLI's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An error of one command.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No connection could be made.
    #[error("cannot reach the {service} at {url}: {cause}")]
    Unreachable {
        /// `gateway`, `registry` or `executor`.
        service: &'static str,
        /// The URL tried.
        url: String,
        /// Why (the cause chain).
        cause: String,
    },
    /// A connection broke or a request could not be sent.
    #[error("the request to the {service} at {url} failed: {cause}")]
    Transport {
        /// `gateway`, `registry` or `executor`.
        service: &'static str,
        /// The URL used.
        url: String,
        /// Why (the cause chain).
        cause: String,
    },
    /// No answer in time.
    #[error("the {service} at {url} did not answer within {} ({what})", secs(*.after))]
    Timeout {
        /// `gateway`, `registry` or `executor`.
        service: &'static str,
        /// The URL used.
        url: String,
        /// The wait that ran out.
        after: Duration,
        /// Which wait it was (`--timeout`, `--timeout, connecting`).
        what: &'static str,
    },
    /// A run's stream stayed silent longer than the idle timeout.
    #[error("no event from the {service} at {url} for {} (--idle-timeout)", secs(*.after))]
    Idle {
        /// `gateway` or `executor`.
        service: &'static str,
        /// The URL of the stream.
        url: String,
        /// The idle timeout.
        after: Duration,
    },
    /// The service answered with an error: the REST error body, or a gRPC status as that body.
    #[error("{}", api_message(.body))]
    Api {
        /// HTTP status, when the answer came over HTTP.
        status: Option<u16>,
        /// `{"error": code, "message", ...}`.
        body: Value,
    },
    /// Bad input that is no flag: a definition file that cannot be read or used, a request
    /// that cannot be built.
    #[error("{0}")]
    Input(String),
    /// Bad usage the CLI sees itself, before any request: a flag or argument value that
    /// cannot be right (a URL that is not one, an empty mission). Exit 64, like clap's own.
    #[error("{0}")]
    Usage(String),
    /// The service answered something this CLI cannot read.
    #[error("unexpected answer from the {service}: {message}")]
    Protocol {
        /// `gateway`, `registry` or `executor`.
        service: &'static str,
        /// What was wrong with it.
        message: String,
    },
    /// A service is up but does not say it is healthy (`health`).
    #[error("{target} is not healthy: {status}")]
    Unhealthy {
        /// The target checked.
        target: String,
        /// What it said.
        status: String,
    },
    /// A run's stream broke after the run had started.
    #[error("{error}")]
    RunBroken {
        /// What broke it.
        error: Box<Error>,
        /// The run's session, to look at afterwards.
        session_id: String,
    },
    /// Writing to stdout failed.
    #[error("writing the output failed: {0}")]
    Output(#[from] std::io::Error),
}

impl Error {
    /// The error of a gRPC status from `service`, decoded like the gateway decodes it.
    pub fn from_status(status: &tonic::Status) -> Self {
        Self::Api {
            status: None,
            body: ApiError::from_status(status).to_json(),
        }
    }

    /// The error that broke a run's gRPC stream: a break no service made (the connection to
    /// the executor was lost mid-run) is `unavailable`, as the gateway reports it over REST.
    pub fn from_stream_status(status: &tonic::Status) -> Self {
        let broken = matches!(
            status.code(),
            tonic::Code::Unknown | tonic::Code::Internal | tonic::Code::Unavailable
        ) && !taskforce_proto::error::from_taskforce(status);
        if broken {
            return Self::Api {
                status: None,
                body: json!({
                    "error": "unavailable",
                    "message": format!(
                        "the connection to the executor was lost; try again later ({})",
                        status.message()
                    ),
                }),
            };
        }
        Self::from_status(status)
    }

    /// A request body that could not be encoded.
    pub fn from_json(e: serde_json::Error) -> Self {
        Self::Input(format!("cannot encode the request: {e}"))
    }

    /// The REST error body of this error (the service's own for [`Error::Api`]).
    pub fn to_json(&self) -> Value {
        let code = match self {
            Self::Api { body, .. } => return body.clone(),
            Self::RunBroken { error, session_id } => {
                let mut body = error.to_json();
                if let Some(obj) = body.as_object_mut() {
                    obj.insert("session_id".into(), json!(session_id));
                }
                return body;
            }
            Self::Unreachable { .. } | Self::Transport { .. } | Self::Unhealthy { .. } => {
                "unavailable"
            }
            Self::Timeout { .. } | Self::Idle { .. } => "timeout",
            Self::Input(_) | Self::Usage(_) => "invalid_argument",
            Self::Protocol { .. } | Self::Output(_) => "internal",
        };
        json!({"error": code, "message": self.to_string()})
    }

    /// The error as lines for a person: the message, then the body's details (unknown tools
    /// and the available ones, bad fields).
    pub fn render(&self) -> String {
        if let Self::RunBroken { error, session_id } = self {
            return format!(
                "{}\nsession {session_id}: `taskforce sessions show {session_id}` shows how it ended",
                error.render()
            );
        }
        let mut out = format!("error: {self}");
        if let Self::Api { status, body } = self {
            let code = body["error"].as_str().unwrap_or_default();
            match (code.is_empty(), status) {
                (false, Some(s)) => {
                    let _ = write!(out, " ({code}, HTTP {s})");
                }
                (false, None) => {
                    let _ = write!(out, " ({code})");
                }
                (true, Some(s)) => {
                    let _ = write!(out, " (HTTP {s})");
                }
                (true, None) => {}
            }
            if let Some(fields) = body.as_object() {
                for (key, value) in fields {
                    let empty_list = value.as_array().is_some_and(Vec::is_empty);
                    if empty_list || matches!(key.as_str(), "error" | "message" | "details") {
                        continue;
                    }
                    let _ = write!(out, "\n  {key}: {}", list_or_json(value));
                }
            }
            let message = body["message"].as_str().unwrap_or_default();
            for d in body["details"].as_array().into_iter().flatten() {
                let field = d["field"].as_str().unwrap_or_default();
                let description = d["description"].as_str().unwrap_or_default();
                let line = format!("{field}: {description}");
                // A message that lists its fields already says it.
                if !message.contains(&line) {
                    let _ = write!(out, "\n  - {line}");
                }
            }
            if code == "unauthenticated" || *status == Some(401) {
                out.push_str("\n  hint: pass the API key with --token KEY or set TASKFORCE_TOKEN");
            }
        }
        out
    }

    /// The process exit code of this error: 64 for bad usage, 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Usage(_) => crate::EXIT_USAGE,
            _ => crate::EXIT_FAILED,
        }
    }

    /// True when the output went to a closed pipe (`taskforce agents list | head`).
    pub fn is_broken_pipe(&self) -> bool {
        matches!(self, Self::Output(e) if e.kind() == std::io::ErrorKind::BrokenPipe)
    }
}

/// An error body's message (or, when it has none, the body itself).
fn api_message(body: &Value) -> String {
    match body["message"].as_str() {
        Some(m) if !m.is_empty() => m.to_owned(),
        _ => body.to_string(),
    }
}

/// A list of strings as `a, b, c`; anything else as compact JSON.
fn list_or_json(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Array(items) if items.iter().all(Value::is_string) => items
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(", "),
        other => other.to_string(),
    }
}

/// A duration as seconds, without a trailing `.0`.
fn secs(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s.fract() == 0.0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{s}s")
    }
}

/// An error and its sources as one line, each cause once (`error sending request: client
/// error (Connect): tcp connect error: Connection refused (os error 111)`).
pub fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut next = Some(error);
    while let Some(e) = next {
        let text = e.to_string();
        if !text.is_empty() && !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        next = e.source();
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use taskforce_proto::error::ErrorKind;

    #[test]
    fn an_invalid_tools_body_lists_the_tools() {
        let e = Error::Api {
            status: Some(400),
            body: json!({"error": "invalid_tools", "message": "Unknown tool(s) in tool_allowlist",
                         "invalid_tools": ["foo_tool"], "available_tools": ["file_read", "python"]}),
        };
        let text = e.render();
        let mut lines: Vec<&str> = text.lines().collect();
        lines[1..].sort_unstable();
        assert_eq!(
            lines,
            [
                "error: Unknown tool(s) in tool_allowlist (invalid_tools, HTTP 400)",
                "  available_tools: file_read, python",
                "  invalid_tools: foo_tool"
            ]
        );
        assert_eq!(e.to_json()["invalid_tools"], json!(["foo_tool"]));
    }

    #[test]
    fn empty_lists_are_left_out() {
        let e = Error::Api {
            status: Some(400),
            body: json!({"error": "invalid_mcp_tools", "message": "Unknown MCP tool(s)",
                         "invalid_mcp_tools": ["nope"], "available_tools": []}),
        };
        assert_eq!(
            e.render(),
            "error: Unknown MCP tool(s) (invalid_mcp_tools, HTTP 400)\n  invalid_mcp_tools: nope"
        );
    }

    #[test]
    fn a_missing_key_says_how_to_send_one() {
        let hint = "\n  hint: pass the API key with --token KEY or set TASKFORCE_TOKEN";
        let rest = Error::Api {
            status: Some(401),
            body: json!({"error": "unauthenticated",
                         "message": "authentication required: send `Authorization: Bearer <API key>`"}),
        };
        assert!(rest.render().ends_with(hint), "{}", rest.render());
        assert!(rest.to_json().get("hint").is_none());
        let grpc = Error::from_status(&tonic::Status::unauthenticated("the API key is not valid"));
        assert_eq!(
            grpc.render(),
            format!("error: the API key is not valid (unauthenticated){hint}")
        );
        let forbidden = Error::Api {
            status: Some(403),
            body: json!({"error": "permission_denied", "message": "lacks the `write` scope"}),
        };
        assert!(
            !forbidden.render().contains("hint"),
            "{}",
            forbidden.render()
        );
    }

    #[test]
    fn bad_usage_exits_64_and_other_errors_1() {
        assert_eq!(Error::Usage("--gateway \"x\"".into()).exit_code(), 64);
        assert_eq!(Error::Input("cannot read f".into()).exit_code(), 1);
    }

    #[test]
    fn field_details_are_listed_unless_the_message_says_them() {
        let e = Error::Api {
            status: Some(400),
            body: json!({"error": "invalid_argument", "message": "name: must not be empty",
                         "details": [{"field": "name", "description": "must not be empty"},
                                     {"field": "mode", "description": "unknown mode"}]}),
        };
        assert_eq!(
            e.render(),
            "error: name: must not be empty (invalid_argument, HTTP 400)\n  - mode: unknown mode"
        );
    }

    #[test]
    fn a_grpc_status_reads_like_the_rest_body() {
        let status = ApiError::new(ErrorKind::NotFound, "agent nope not found").to_status();
        let e = Error::from_status(&status);
        assert_eq!(e.to_string(), "agent nope not found");
        assert_eq!(
            e.to_json(),
            json!({"error": "not_found", "message": "agent nope not found"})
        );
        assert_eq!(e.render(), "error: agent nope not found (not_found)");
    }

    #[test]
    fn local_errors_have_a_body_too() {
        let e = Error::Unreachable {
            service: "gateway",
            url: "http://127.0.0.1:1".into(),
            cause: "Connection refused".into(),
        };
        assert_eq!(
            e.to_json(),
            json!({"error": "unavailable",
                   "message": "cannot reach the gateway at http://127.0.0.1:1: Connection refused"})
        );
        let t = Error::Timeout {
            service: "executor",
            url: "http://x".into(),
            after: Duration::from_millis(2500),
            what: "--timeout",
        };
        assert_eq!(
            t.to_string(),
            "the executor at http://x did not answer within 2.5s (--timeout)"
        );
    }

    #[test]
    fn a_cause_chain_names_each_cause_once() {
        let inner = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let outer = std::io::Error::other(inner);
        assert_eq!(chain(&outer), "refused");
    }
}
