//! The error type of the LLM layer.
//!
//! Messages name the provider (its name in `llm_config.yaml`), the HTTP status and what the server
//! said; they never carry an API key (server messages are scrubbed of the key before they get
//! here, and URLs are left out of transport errors).

use std::time::Duration;

/// What went wrong talking to a model.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LlmError {
    /// The server answered with an error status (after retries, where the status is retryable).
    #[error("{provider}: HTTP {status} after {attempts} attempt(s): {message}")]
    Status {
        /// Provider name from the configuration.
        provider: String,
        /// HTTP status code.
        status: u16,
        /// The server's error message (or an excerpt of its body).
        message: String,
        /// Requests sent, retries included.
        attempts: u32,
    },
    /// No connection could be made, or it broke before the response headers.
    #[error("{provider}: request failed after {attempts} attempt(s): {message}")]
    Connect {
        /// Provider name from the configuration.
        provider: String,
        /// The transport's description (without the URL).
        message: String,
        /// Requests sent, retries included.
        attempts: u32,
    },
    /// The server did not answer in time.
    #[error("{provider}: timed out after {after:?} waiting for {waiting_for} (attempt {attempts})")]
    Timeout {
        /// Provider name from the configuration.
        provider: String,
        /// The time limit that ran out.
        after: Duration,
        /// `"the response"` (before headers) or `"the next chunk"` (mid-stream).
        waiting_for: &'static str,
        /// Requests sent, retries included.
        attempts: u32,
    },
    /// The stream broke or violated the protocol after it had started (never retried: tokens may
    /// already have reached the user).
    #[error("{provider}: stream failed: {message}")]
    Stream {
        /// Provider name from the configuration.
        provider: String,
        /// What happened.
        message: String,
    },
    /// The provider reported an error inside the stream (Anthropic `error` event, an OpenAI-style
    /// `{"error": ...}` chunk, or a scripted `error` turn).
    #[error("{provider}: {kind}: {message}")]
    Provider {
        /// Provider name from the configuration.
        provider: String,
        /// The provider's error type, e.g. `overloaded_error`.
        kind: String,
        /// The provider's message.
        message: String,
    },
    /// The model called a tool with arguments that are not valid JSON. The only error that does
    /// not end the stream: the other calls, usage and `Done` still follow, so the loop can answer
    /// this call with an error result and go on.
    #[error(
        "the model called `{name}` (call {id}) with arguments that are not valid JSON ({error}): {}",
        excerpt(raw)
    )]
    MalformedToolCall {
        /// The call's id, for the error result the loop sends back.
        id: String,
        /// The tool's name.
        name: String,
        /// The arguments text as the model sent it.
        raw: String,
        /// The JSON parser's complaint.
        error: String,
    },
    /// The request cannot be sent as it is (e.g. it has no messages).
    #[error("invalid LLM request: {0}")]
    InvalidRequest(String),
    /// `llm_config.yaml`, a script file, or the environment is wrong.
    #[error("LLM configuration: {0}")]
    Config(String),
}

impl LlmError {
    /// Whether the stream ends after this error. Only [`LlmError::MalformedToolCall`] does not.
    pub fn is_terminal(&self) -> bool {
        !matches!(self, Self::MalformedToolCall { .. })
    }
}

/// At most 200 characters of `text`, marked when cut.
pub(crate) fn excerpt(text: &str) -> String {
    taskforce_proto::cut_chars(text, 200)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_tool_call_message_is_cut_and_only_it_is_not_terminal() {
        let err = LlmError::MalformedToolCall {
            id: "c1".into(),
            name: "python".into(),
            raw: "x".repeat(500),
            error: "expected value".into(),
        };
        let text = err.to_string();
        assert!(text.contains("`python`"), "{text}");
        assert!(text.len() < 400, "{text}");
        assert!(!err.is_terminal());
        assert!(LlmError::InvalidRequest("x".into()).is_terminal());
    }
}
