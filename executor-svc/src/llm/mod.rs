//! LLM providers behind one trait, with streaming and native tool calls.
//!
//! - [`types`]: provider-neutral messages, tools, requests and stream events.
//! - [`error`]: the error type, [`LlmError`].
//! - [`config`]: the shape of `llm_config.yaml`.
//! - [`env`](mod@env): the environment, API keys that never print, `${VAR}` expansion.
//! - [`router`]: builds the configured providers and resolves model aliases ([`LlmRouter`]).
//! - [`openai`]: OpenAI-compatible chat completions (OpenAI, Azure, Ollama, vLLM, LiteLLM).
//! - [`anthropic`]: Anthropic Messages.
//! - [`scripted`]: deterministic replay of a YAML script, for tests and offline runs.
//! - `http`, `stream`: retries, timeouts and event-stream decoding (`sse-stream`) shared by the HTTP
//!   clients.

pub mod anthropic;
pub mod config;
pub mod env;
pub mod error;
mod http;
pub mod openai;
pub mod router;
pub mod scripted;
mod stream;
pub mod types;

use std::{fmt, pin::Pin};

use futures::{Stream, StreamExt, future::BoxFuture};

pub use anthropic::AnthropicProvider;
pub use config::{LlmConfig, ProviderConfig};
pub use env::Env;
pub use error::LlmError;
pub use openai::OpenAiProvider;
pub use router::{LlmRouter, ResolvedModel};
pub use scripted::{Script, ScriptedProvider};
pub use types::{
    LlmEvent, LlmRequest, LlmResponse, MAX_CALL_TOKENS, Message, StopReason, ToolCall,
    ToolDefinition, Usage,
};

/// The events of one model call. An `Err` ends it, except [`LlmError::MalformedToolCall`].
/// Dropping the stream cancels the call (and closes its connection).
pub type LlmStream = Pin<Box<dyn Stream<Item = Result<LlmEvent, LlmError>> + Send + 'static>>;

/// A model API: one streamed call per [`LlmRequest`].
pub trait LlmProvider: Send + Sync + fmt::Debug {
    /// The provider's name in the configuration (for logs and errors).
    fn name(&self) -> &str;

    /// Starts a call. Nothing is sent until the stream is first polled; retries happen inside,
    /// before the first event.
    fn stream(&self, request: &LlmRequest<'_>) -> LlmStream;

    /// Runs a call to the end and collects it; any error, a malformed tool call included, fails it.
    fn complete(
        &self,
        request: &LlmRequest<'_>,
    ) -> BoxFuture<'static, Result<LlmResponse, LlmError>> {
        Box::pin(collect(self.name().to_owned(), self.stream(request)))
    }
}

/// Collects a stream into an [`LlmResponse`].
pub async fn collect(provider: String, mut stream: LlmStream) -> Result<LlmResponse, LlmError> {
    let mut text = String::new();
    let mut tool_calls = Vec::new();
    let mut usage = None;
    while let Some(event) = stream.next().await {
        match event? {
            LlmEvent::TextDelta(delta) => text.push_str(&delta),
            LlmEvent::ToolCall(call) => tool_calls.push(call),
            LlmEvent::Usage(u) => usage = Some(u),
            LlmEvent::Done { stop_reason } => {
                return Ok(LlmResponse {
                    text,
                    tool_calls,
                    usage,
                    stop_reason,
                });
            }
        }
    }
    Err(LlmError::Stream {
        provider,
        message: "the stream ended without a final event".to_owned(),
    })
}
