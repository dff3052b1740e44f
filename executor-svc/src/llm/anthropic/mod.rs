//! Anthropic Messages (`POST {base_url}/v1/messages`, streamed).
//!
//! System messages become the top-level `system`; tool results become `tool_result` blocks in a
//! user message (consecutive results and user text share one message, results first); a
//! `tool_use` block's `input_json_delta` pieces are joined and parsed at `content_block_stop`.

mod decode;

use std::sync::Arc;

use secrecy::ExposeSecret;
use serde_json::{Value, json};

use super::{
    LlmError, LlmEvent, LlmProvider, LlmRequest, LlmStream, Message,
    config::ProviderConfig,
    env::Env,
    http::{Endpoint, parse_url},
    stream::{decode_chunks, sse_stream},
};
use decode::EventDecoder;

/// Default API root when `base_url` is absent.
pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";
/// The API version header this client speaks.
pub const API_VERSION: &str = "2023-06-01";
/// Output cap sent when the request sets none (the API requires one).
pub const DEFAULT_MAX_TOKENS: u32 = 4096;

/// A client for one Anthropic provider entry.
#[derive(Debug)]
pub struct AnthropicProvider {
    endpoint: Arc<Endpoint>,
}

impl AnthropicProvider {
    /// Builds the client for provider `name`; the key comes from `config.api_key_env` in `env`.
    pub fn new(name: &str, config: &ProviderConfig, env: &Env) -> Result<Self, LlmError> {
        let key = config.api_key(env)?;
        let base = config
            .base_url
            .as_deref()
            .unwrap_or(DEFAULT_BASE_URL)
            .trim_end_matches('/');
        // Accept a base URL given with or without the version segment.
        let base = base.strip_suffix("/v1").unwrap_or(base);
        let url = parse_url(name, &format!("{base}/v1/messages"))?;
        let mut auth = vec![("anthropic-version", API_VERSION.to_owned())];
        if let Some(key) = &key {
            auth.push(("x-api-key", key.expose_secret().to_owned()));
        }
        let endpoint = Endpoint::new(name, config, env, url, auth, key)?;
        Ok(Self {
            endpoint: Arc::new(endpoint),
        })
    }
}

impl LlmProvider for AnthropicProvider {
    fn name(&self) -> &str {
        &self.endpoint.provider
    }

    fn stream(&self, request: &LlmRequest<'_>) -> LlmStream {
        let decoder = EventDecoder::new(self.endpoint.provider.clone());
        sse_stream(Arc::clone(&self.endpoint), request_body(request), decoder)
    }
}

/// Decodes a recorded Messages event-stream body, delivered in `chunks`, exactly as a live call
/// does (without a connection or timeouts). The entry point of the fuzz targets in `fuzz/`; not
/// part of the API.
#[doc(hidden)]
pub fn decode_body(chunks: &[&[u8]]) -> Vec<Result<LlmEvent, LlmError>> {
    decode_chunks("fuzz", EventDecoder::new("fuzz".to_owned()), chunks)
}

/// The tools the conversation's earlier turns called, declared without a schema, or `None`
/// when it called none.
fn tools_in_history(request: &LlmRequest<'_>) -> Option<Vec<Value>> {
    let mut names: Vec<&str> = request
        .messages
        .iter()
        .flat_map(|m| match m {
            Message::Assistant { tool_calls, .. } => tool_calls.as_slice(),
            _ => &[],
        })
        .map(|call| call.name.as_str())
        .collect();
    names.sort_unstable();
    names.dedup();
    (!names.is_empty()).then(|| {
        names
            .into_iter()
            .map(|name| {
                json!({ "name": name, "description": "Used earlier in this conversation; not offered now.",
                        "input_schema": { "type": "object" } })
            })
            .collect()
    })
}

fn request_body(request: &LlmRequest<'_>) -> Vec<u8> {
    let mut system = Vec::new();
    let mut messages: Vec<(&'static str, Vec<Value>)> = Vec::new();
    let mut push = |role: &'static str, block: Value, first: bool| match messages.last_mut() {
        Some((last, blocks)) if *last == role => {
            if first {
                // Tool results must lead the user message that carries them.
                let at = blocks
                    .iter()
                    .take_while(|b| b["type"] == "tool_result")
                    .count();
                blocks.insert(at, block);
            } else {
                blocks.push(block);
            }
        }
        _ => messages.push((role, vec![block])),
    };
    for message in request.messages.iter() {
        match message {
            Message::System { content } => system.push(content.as_str()),
            Message::User { content } => {
                push("user", json!({ "type": "text", "text": content }), false)
            }
            Message::Assistant {
                content,
                tool_calls,
            } => {
                if !content.is_empty() {
                    push(
                        "assistant",
                        json!({ "type": "text", "text": content }),
                        false,
                    );
                }
                for call in tool_calls {
                    let input = if call.arguments.is_object() {
                        call.arguments.clone()
                    } else {
                        json!({})
                    };
                    let block = json!({ "type": "tool_use", "id": call.id, "name": call.name, "input": input });
                    push("assistant", block, false);
                }
            }
            Message::Tool {
                call_id,
                content,
                is_error,
                ..
            } => {
                let block = json!({ "type": "tool_result", "tool_use_id": call_id,
                                    "content": content, "is_error": is_error });
                push("user", block, true);
            }
        }
    }
    let messages: Vec<Value> = messages
        .into_iter()
        .map(|(role, content)| json!({ "role": role, "content": content }))
        .collect();
    let mut body = json!({
        "model": request.model,
        "max_tokens": request.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
        "messages": messages,
        "stream": true,
    });
    if !system.is_empty() {
        body["system"] = json!(system.join("\n\n"));
    }
    if !request.tools.is_empty() {
        let tools: Vec<Value> = request
            .tools
            .iter()
            .map(|t| json!({ "name": t.name, "description": t.description, "input_schema": t.parameters }))
            .collect();
        body["tools"] = Value::Array(tools);
    } else if let Some(used) = tools_in_history(request) {
        // A turn without tools over a history with tool calls (`no_tools`, `/ai/stream`): the
        // Messages API (and Bedrock behind Anthropic-compatible proxies) refuses `tool_use` and
        // `tool_result` blocks without `tools`, so the tools used are declared and none may be
        // called this turn.
        body["tools"] = Value::Array(used);
        body["tool_choice"] = json!({ "type": "none" });
    }
    if let Some(temperature) = request.temperature {
        body["temperature"] = json!(temperature);
    }
    // Serialising a `Value` cannot fail.
    serde_json::to_vec(&body).unwrap_or_default()
}
