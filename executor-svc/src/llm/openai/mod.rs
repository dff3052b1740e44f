//! OpenAI-compatible chat completions (`POST {base_url}/chat/completions`, streamed): OpenAI,
//! Azure OpenAI, Ollama, vLLM, LiteLLM and every server that copies the protocol.
//!
//! Tool calls arrive as deltas keyed by `index`: the first carries the id and the name, the rest
//! pieces of the JSON arguments. They are assembled here and handed on complete when the choice
//! finishes; arguments that do not parse become [`LlmError::MalformedToolCall`].

mod decode;

use secrecy::ExposeSecret;
use std::sync::Arc;

use serde_json::{Value, json};

use super::{
    LlmError, LlmEvent, LlmProvider, LlmRequest, LlmStream, Message,
    config::{MaxTokensField, ProviderConfig},
    env::Env,
    http::{Endpoint, parse_url},
    stream::{decode_chunks, sse_stream},
};
use decode::ChunkDecoder;

/// Default API root when `base_url` is absent.
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

/// A client for one OpenAI-compatible provider entry.
#[derive(Debug)]
pub struct OpenAiProvider {
    endpoint: Arc<Endpoint>,
    stream_usage: bool,
    max_tokens_field: MaxTokensField,
}

impl OpenAiProvider {
    /// Builds the client for provider `name`; the key comes from `config.api_key_env` in `env`.
    pub fn new(name: &str, config: &ProviderConfig, env: &Env) -> Result<Self, LlmError> {
        let key = config.api_key(env)?;
        let base = config
            .base_url
            .as_deref()
            .unwrap_or(DEFAULT_BASE_URL)
            .trim_end_matches('/');
        let (url, auth) = match &config.azure {
            Some(azure) => {
                let url = format!(
                    "{base}/openai/deployments/{}/chat/completions",
                    azure.deployment
                );
                let mut url = parse_url(name, &url)?;
                url.query_pairs_mut()
                    .append_pair("api-version", &azure.api_version);
                let auth = key
                    .as_ref()
                    .map(|k| ("api-key", k.expose_secret().to_owned()));
                (url, auth)
            }
            None => {
                let url = parse_url(name, &format!("{base}/chat/completions"))?;
                let auth = key
                    .as_ref()
                    .map(|k| ("authorization", format!("Bearer {}", k.expose_secret())));
                (url, auth)
            }
        };
        let max_tokens_field = config.max_tokens_field.unwrap_or(
            if config.azure.is_some() || url.host_str() == Some("api.openai.com") {
                MaxTokensField::MaxCompletionTokens
            } else {
                MaxTokensField::MaxTokens
            },
        );
        let endpoint = Endpoint::new(name, config, env, url, auth.into_iter().collect(), key)?;
        Ok(Self {
            endpoint: Arc::new(endpoint),
            stream_usage: config.stream_usage,
            max_tokens_field,
        })
    }
}

impl LlmProvider for OpenAiProvider {
    fn name(&self) -> &str {
        &self.endpoint.provider
    }

    fn stream(&self, request: &LlmRequest<'_>) -> LlmStream {
        let body = request_body(request, self.stream_usage, self.max_tokens_field);
        let decoder = ChunkDecoder::new(self.endpoint.provider.clone());
        sse_stream(Arc::clone(&self.endpoint), body, decoder)
    }
}

/// Decodes a recorded chat-completions event-stream body, delivered in `chunks`, exactly as a live call
/// does (without a connection or timeouts). The entry point of the fuzz targets in `fuzz/`; not
/// part of the API.
#[doc(hidden)]
pub fn decode_body(chunks: &[&[u8]]) -> Vec<Result<LlmEvent, LlmError>> {
    decode_chunks("fuzz", ChunkDecoder::new("fuzz".to_owned()), chunks)
}

/// The JSON body of a streamed chat completion.
fn request_body(
    request: &LlmRequest<'_>,
    stream_usage: bool,
    max_tokens_field: MaxTokensField,
) -> Vec<u8> {
    let messages: Vec<Value> = request.messages.iter().map(wire_message).collect();
    let mut body = json!({ "model": request.model, "messages": messages, "stream": true });
    if stream_usage {
        body["stream_options"] = json!({ "include_usage": true });
    }
    if !request.tools.is_empty() {
        let tools: Vec<Value> = request
            .tools
            .iter()
            .map(|t| {
                json!({ "type": "function", "function": {
                    "name": t.name, "description": t.description, "parameters": t.parameters } })
            })
            .collect();
        body["tools"] = Value::Array(tools);
    }
    if let Some(temperature) = request.temperature {
        body["temperature"] = json!(temperature);
    }
    if let Some(max_tokens) = request.max_tokens {
        body[max_tokens_field.as_str()] = json!(max_tokens);
    }
    // Serialising a `Value` cannot fail.
    serde_json::to_vec(&body).unwrap_or_default()
}

fn wire_message(message: &Message) -> Value {
    match message {
        Message::System { content } => json!({ "role": "system", "content": content }),
        Message::User { content } => json!({ "role": "user", "content": content }),
        Message::Assistant {
            content,
            tool_calls,
        } if tool_calls.is_empty() => {
            json!({ "role": "assistant", "content": content })
        }
        Message::Assistant {
            content,
            tool_calls,
        } => {
            let calls: Vec<Value> = tool_calls
                .iter()
                .map(|c| {
                    let arguments = match &c.arguments {
                        Value::String(raw) => raw.clone(),
                        other => other.to_string(),
                    };
                    json!({ "id": c.id, "type": "function",
                            "function": { "name": c.name, "arguments": arguments } })
                })
                .collect();
            let content = if content.is_empty() {
                Value::Null
            } else {
                json!(content)
            };
            json!({ "role": "assistant", "content": content, "tool_calls": calls })
        }
        Message::Tool {
            call_id, content, ..
        } => {
            json!({ "role": "tool", "tool_call_id": call_id, "content": content })
        }
    }
}
