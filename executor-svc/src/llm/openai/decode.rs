//! Decoding of the chat-completions event stream: text deltas, tool-call deltas assembled by
//! `index`, usage, and the finish reason.

use std::collections::VecDeque;

use serde::Deserialize;
use serde_json::Value;

use crate::llm::{
    LlmError, LlmEvent, StopReason, Usage,
    error::excerpt,
    stream::{Decode, Progress, SseEvent},
    types::assemble,
};

#[derive(Deserialize)]
struct Chunk {
    #[serde(default)]
    choices: Option<Vec<Choice>>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct Choice {
    #[serde(default)]
    delta: Option<Delta>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct Delta {
    #[serde(default)]
    content: Option<String>,
    /// The model's refusal, streamed instead of `content`.
    #[serde(default)]
    refusal: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<ToolCallDelta>>,
}

#[derive(Deserialize)]
struct ToolCallDelta {
    #[serde(default)]
    index: Option<usize>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<FunctionDelta>,
}

#[derive(Deserialize)]
struct FunctionDelta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default, deserialize_with = "crate::llm::types::token_count")]
    prompt_tokens: Option<u64>,
    #[serde(default, deserialize_with = "crate::llm::types::token_count")]
    completion_tokens: Option<u64>,
}

/// A tool call being assembled.
#[derive(Debug, Default)]
struct PartialCall {
    index: Option<usize>,
    id: String,
    name: String,
    arguments: String,
}

/// Decoder state for one response.
#[derive(Debug, Default)]
pub(super) struct ChunkDecoder {
    provider: String,
    calls: Vec<PartialCall>,
    stop: Option<StopReason>,
    usage: Option<Usage>,
    /// The model streamed a refusal: the turn ends as one, whatever the finish reason says.
    refused: bool,
    /// Whether any choice came: text, a refusal, a tool call or a finish reason.
    answered: bool,
}

type Out = VecDeque<Result<LlmEvent, LlmError>>;

impl ChunkDecoder {
    /// A decoder for one response from `provider`.
    pub(super) fn new(provider: String) -> Self {
        Self {
            provider,
            ..Self::default()
        }
    }

    fn tool_delta(&mut self, delta: ToolCallDelta) {
        // Keyed by `index`; servers that omit it (older Ollama) start a new call with each new id.
        let slot = match delta.index {
            Some(index) => self.calls.iter().position(|c| c.index == Some(index)),
            None => match &delta.id {
                Some(id) if !self.calls.iter().any(|c| &c.id == id) => None,
                _ => self.calls.len().checked_sub(1),
            },
        };
        let slot = slot.unwrap_or_else(|| {
            self.calls.push(PartialCall {
                index: delta.index,
                ..PartialCall::default()
            });
            self.calls.len() - 1
        });
        let call = &mut self.calls[slot];
        // Some servers repeat the id and name in every delta: the first one wins.
        if let Some(id) = delta.id.filter(|id| !id.is_empty() && call.id.is_empty()) {
            call.id = id;
        }
        if let Some(function) = delta.function {
            if let Some(name) = function
                .name
                .filter(|n| !n.is_empty() && call.name.is_empty())
            {
                call.name = name;
            }
            if let Some(arguments) = function.arguments {
                call.arguments.push_str(&arguments);
            }
        }
    }

    fn flush_calls(&mut self, out: &mut Out) {
        for (n, call) in self.calls.drain(..).enumerate() {
            let id = if call.id.is_empty() {
                format!("call_{n}")
            } else {
                call.id
            };
            out.push_back(assemble(id, call.name, call.arguments));
        }
    }

    fn finish(&mut self, out: &mut Out) {
        let had_calls = !self.calls.is_empty();
        self.flush_calls(out);
        if let Some(usage) = self.usage.take() {
            out.push_back(Ok(LlmEvent::Usage(usage)));
        }
        let stop_reason = match self.stop.take() {
            // Ollama says "stop" even when it called tools.
            Some(StopReason::EndTurn) | None if had_calls => StopReason::ToolUse,
            Some(StopReason::EndTurn) | None if self.refused => StopReason::Refusal,
            Some(reason) => reason,
            None => StopReason::EndTurn,
        };
        out.push_back(Ok(LlmEvent::Done { stop_reason }));
    }
}

impl Decode for ChunkDecoder {
    fn event(&mut self, event: SseEvent, out: &mut Out) -> Result<Progress, LlmError> {
        let data = event.data.trim();
        if data == "[DONE]" {
            // Lenient about a missing finish reason after an answer (some compatible servers
            // leave it out), not about no answer at all: that is a failed call, not an empty
            // answer to give the user.
            if !self.answered {
                return Err(LlmError::Stream {
                    provider: self.provider.clone(),
                    message: "the stream ended ([DONE]) without an answer: no text, no tool \
                              call, no finish_reason"
                        .to_owned(),
                });
            }
            self.finish(out);
            return Ok(Progress::Complete);
        }
        let chunk: Chunk = crate::llm::types::from_json(data).map_err(|e| LlmError::Stream {
            provider: self.provider.clone(),
            message: format!("invalid chunk ({e}): {}", excerpt(data)),
        })?;
        if let Some(error) = chunk.error {
            let field = |name: &str| error.get(name).and_then(Value::as_str).map(str::to_owned);
            return Err(LlmError::Provider {
                provider: self.provider.clone(),
                kind: field("type")
                    .or_else(|| field("code"))
                    .unwrap_or_else(|| "error".to_owned()),
                message: field("message")
                    .or_else(|| error.as_str().map(str::to_owned))
                    .unwrap_or_else(|| error.to_string()),
            });
        }
        if let Some(usage) = chunk.usage {
            self.usage = Some(Usage {
                input_tokens: usage.prompt_tokens.unwrap_or(0),
                output_tokens: usage.completion_tokens.unwrap_or(0),
            });
        }
        // One choice is asked for (no `n`); others are ignored.
        if let Some(choice) = chunk.choices.and_then(|c| c.into_iter().next()) {
            if let Some(delta) = choice.delta {
                if let Some(text) = delta.content.filter(|t| !t.is_empty()) {
                    self.answered = true;
                    out.push_back(Ok(LlmEvent::TextDelta(text)));
                }
                // The refusal is what the model said: the user reads it, the history keeps it.
                if let Some(text) = delta.refusal.filter(|t| !t.is_empty()) {
                    self.answered = true;
                    self.refused = true;
                    out.push_back(Ok(LlmEvent::TextDelta(text)));
                }
                for call in delta.tool_calls.into_iter().flatten() {
                    self.answered = true;
                    self.tool_delta(call);
                }
            }
            if let Some(reason) = choice.finish_reason {
                self.answered = true;
                self.stop = Some(StopReason::from_wire(&reason));
                // Calls are complete now; usage and [DONE] may still follow.
                let had_calls = !self.calls.is_empty();
                self.flush_calls(out);
                if had_calls && self.stop == Some(StopReason::EndTurn) {
                    self.stop = Some(StopReason::ToolUse);
                }
            }
        }
        Ok(Progress::More)
    }

    fn eof(&mut self, out: &mut Out) -> Result<(), LlmError> {
        // Lenient: a server that finished the choice but never sent [DONE] still gave an answer.
        if self.stop.is_none() {
            return Err(LlmError::Stream {
                provider: self.provider.clone(),
                message: "the stream ended before the response was complete".to_owned(),
            });
        }
        self.finish(out);
        Ok(())
    }
}
