//! Decoding of the Messages event stream: text deltas, `tool_use` blocks assembled from their
//! `input_json_delta` pieces, usage, stop reason, and `error` events.

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
#[serde(tag = "type", rename_all = "snake_case")]
enum WireEvent {
    MessageStart {
        message: StartMessage,
    },
    ContentBlockStart {
        index: usize,
        content_block: Value,
    },
    ContentBlockDelta {
        index: usize,
        delta: Value,
    },
    ContentBlockStop {
        index: usize,
    },
    MessageDelta {
        #[serde(default)]
        delta: Value,
        #[serde(default)]
        usage: Option<WireUsage>,
    },
    MessageStop,
    Ping,
    Error {
        error: Value,
    },
    #[serde(other)]
    Unknown,
}

#[derive(Deserialize)]
struct StartMessage {
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default, deserialize_with = "crate::llm::types::token_count")]
    input_tokens: Option<u64>,
    #[serde(default, deserialize_with = "crate::llm::types::token_count")]
    output_tokens: Option<u64>,
}

/// A `tool_use` block being assembled.
#[derive(Debug)]
struct OpenBlock {
    index: usize,
    id: String,
    name: String,
    json: String,
}

#[derive(Debug, Default)]
pub(super) struct EventDecoder {
    provider: String,
    tools: Vec<OpenBlock>,
    usage: Usage,
    saw_usage: bool,
    stop: Option<StopReason>,
}

type Out = VecDeque<Result<LlmEvent, LlmError>>;

impl EventDecoder {
    /// A decoder for one response from `provider`.
    pub(super) fn new(provider: String) -> Self {
        Self {
            provider,
            ..Self::default()
        }
    }

    fn add_usage(&mut self, usage: Option<WireUsage>) {
        if let Some(usage) = usage {
            self.saw_usage = true;
            // message_start carries the input, message_delta the cumulative output.
            self.usage.input_tokens = usage.input_tokens.unwrap_or(self.usage.input_tokens);
            self.usage.output_tokens = usage.output_tokens.unwrap_or(self.usage.output_tokens);
        }
    }

    fn error(&self, message: String) -> LlmError {
        LlmError::Stream {
            provider: self.provider.clone(),
            message,
        }
    }
}

impl Decode for EventDecoder {
    fn event(&mut self, event: SseEvent, out: &mut Out) -> Result<Progress, LlmError> {
        let wire: WireEvent = crate::llm::types::from_json(&event.data).map_err(|e| {
            self.error(format!(
                "invalid `{}` event ({e}): {}",
                event.event,
                excerpt(&event.data)
            ))
        })?;
        match wire {
            WireEvent::MessageStart { message } => self.add_usage(message.usage),
            WireEvent::ContentBlockStart {
                index,
                content_block,
            } => {
                if content_block["type"] == "tool_use" {
                    let text = |k: &str| content_block[k].as_str().unwrap_or_default().to_owned();
                    self.tools.push(OpenBlock {
                        index,
                        id: text("id"),
                        name: text("name"),
                        json: String::new(),
                    });
                } else if let Some(text) = content_block["text"].as_str().filter(|t| !t.is_empty())
                {
                    out.push_back(Ok(LlmEvent::TextDelta(text.to_owned())));
                }
            }
            WireEvent::ContentBlockDelta { index, delta } => match delta["type"].as_str() {
                Some("text_delta") => {
                    if let Some(text) = delta["text"].as_str().filter(|t| !t.is_empty()) {
                        out.push_back(Ok(LlmEvent::TextDelta(text.to_owned())));
                    }
                }
                Some("input_json_delta") => {
                    let Some(block) = self.tools.iter_mut().find(|b| b.index == index) else {
                        return Err(
                            self.error(format!("input_json_delta for unknown block {index}"))
                        );
                    };
                    block
                        .json
                        .push_str(delta["partial_json"].as_str().unwrap_or_default());
                }
                _ => {} // thinking, signature and future delta types are not ours to show
            },
            WireEvent::ContentBlockStop { index } => {
                if let Some(at) = self.tools.iter().position(|b| b.index == index) {
                    let block = self.tools.remove(at);
                    out.push_back(assemble(block.id, block.name, block.json));
                }
            }
            WireEvent::MessageDelta { delta, usage } => {
                if let Some(reason) = delta["stop_reason"].as_str() {
                    self.stop = Some(StopReason::from_wire(reason));
                }
                self.add_usage(usage);
            }
            WireEvent::MessageStop => {
                if self.saw_usage {
                    out.push_back(Ok(LlmEvent::Usage(self.usage)));
                }
                let stop_reason = self.stop.take().unwrap_or(StopReason::EndTurn);
                out.push_back(Ok(LlmEvent::Done { stop_reason }));
                return Ok(Progress::Complete);
            }
            WireEvent::Error { error } => {
                let field = |k: &str| error[k].as_str().map(str::to_owned);
                return Err(LlmError::Provider {
                    provider: self.provider.clone(),
                    kind: field("type").unwrap_or_else(|| "error".to_owned()),
                    message: field("message").unwrap_or_else(|| error.to_string()),
                });
            }
            WireEvent::Ping | WireEvent::Unknown => {}
        }
        Ok(Progress::More)
    }

    fn eof(&mut self, _out: &mut Out) -> Result<(), LlmError> {
        Err(self.error("the stream ended before message_stop".to_owned()))
    }
}
