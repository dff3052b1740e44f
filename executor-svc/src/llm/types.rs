//! Provider-neutral request, conversation and event types.
//!
//! Every provider translates these to and from its wire format; nothing above the `llm` module
//! sees a provider's JSON.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use super::LlmError;
use serde_json::{Value, json};

/// One message of a conversation, in the order the model saw them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Message {
    /// Instructions for the model. Several are joined with blank lines where a provider takes one.
    System {
        /// The instructions.
        content: String,
    },
    /// What the user (or the mission) says.
    User {
        /// The text.
        content: String,
    },
    /// A turn the model took: text, tool calls, or both.
    Assistant {
        /// Text the model wrote (may be empty when it only called tools).
        #[serde(default)]
        content: String,
        /// Tool calls the model made in this turn, in its order.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
    },
    /// The result of one tool call, answering the call with the same id.
    Tool {
        /// The id of the [`ToolCall`] this answers.
        call_id: String,
        /// The tool's name (OpenAI ignores it; kept for logs, sessions and the scripted provider).
        name: String,
        /// The tool's output, or an error description.
        content: String,
        /// Whether the call failed (Anthropic passes this to the model as `is_error`).
        #[serde(default)]
        is_error: bool,
    },
}

impl Message {
    /// A system message.
    pub fn system(content: impl Into<String>) -> Self {
        Self::System {
            content: content.into(),
        }
    }

    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Self::User {
            content: content.into(),
        }
    }

    /// An assistant message with text only.
    pub fn assistant(content: impl Into<String>) -> Self {
        Self::Assistant {
            content: content.into(),
            tool_calls: Vec::new(),
        }
    }

    /// A successful tool result.
    pub fn tool_result(call: &ToolCall, content: impl Into<String>) -> Self {
        Self::Tool {
            call_id: call.id.clone(),
            name: call.name.clone(),
            content: content.into(),
            is_error: false,
        }
    }
}

/// A complete tool call: the model's streamed pieces already assembled and parsed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The provider's id for the call; tool results refer to it.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments, parsed as JSON (an object for every well-behaved model).
    pub arguments: Value,
}

/// A tool the model may call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolDefinition {
    /// The name the model calls it by.
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// JSON schema of the arguments object.
    pub parameters: Value,
}

/// One call to a model. It borrows the conversation and the tools (a run's loop builds one per
/// step and must not copy the whole conversation each time); providers encode it at once.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LlmRequest<'a> {
    /// The provider's model name (already resolved from an alias).
    pub model: String,
    /// The conversation so far.
    pub messages: Cow<'a, [Message]>,
    /// Tools offered to the model; empty means none.
    #[serde(default)]
    pub tools: Cow<'a, [ToolDefinition]>,
    /// Sampling temperature; the provider's default when unset.
    #[serde(default)]
    pub temperature: Option<f64>,
    /// Cap on output tokens; the provider's default when unset (Anthropic needs one: 4096).
    #[serde(default)]
    pub max_tokens: Option<u32>,
}

/// Token counts for one call, as the provider reported them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Completion tokens.
    pub output_tokens: u64,
}

/// Parses a provider's JSON event. One that has a UTF-16 surrogate escape without its pair (a
/// proxy built on UTF-16 strings cut a character between two deltas, or sent half of one)
/// is read with each such escape as U+FFFD: serde refuses it, and the whole answer was lost.
pub(crate) fn from_json<T: serde::de::DeserializeOwned>(data: &str) -> serde_json::Result<T> {
    match serde_json::from_str(data) {
        Err(e) if data.contains("\\u") => match without_lone_surrogates(data) {
            Some(fixed) => serde_json::from_str(&fixed).map_err(|_| e),
            None => Err(e),
        },
        parsed => parsed,
    }
}

/// `data` (JSON text) with every `\uXXXX` escape of a surrogate that is not part of a pair
/// replaced by `\uFFFD`; `None` when it has none.
fn without_lone_surrogates(data: &str) -> Option<String> {
    let escape = |at: usize| -> Option<u16> {
        let hex = data.get(at + 2..at + 6)?;
        (data.get(at..at + 2) == Some("\\u"))
            .then(|| u16::from_str_radix(hex, 16).ok())
            .flatten()
    };
    let bytes = data.as_bytes();
    let mut out = String::with_capacity(data.len());
    let (mut at, mut copied, mut changed) = (0, 0, false);
    while at < bytes.len() {
        if bytes[at] != b'\\' {
            at += 1;
            continue;
        }
        match escape(at) {
            Some(0xD800..=0xDBFF)
                if escape(at + 6).is_some_and(|low| (0xDC00..=0xDFFF).contains(&low)) =>
            {
                at += 12;
            }
            Some(0xD800..=0xDFFF) => {
                out.push_str(&data[copied..at]);
                out.push_str("\\uFFFD");
                at += 6;
                copied = at;
                changed = true;
            }
            // Another escape (`\\`, `\"`, ...): its second character is not a backslash.
            _ => at += 2,
        }
    }
    changed.then(|| {
        out.push_str(&data[copied..]);
        out
    })
}

/// The most tokens one model call is counted for: a provider's absurd count (`u64::MAX`) would
/// otherwise overflow a run's totals and wrap the token counters.
pub const MAX_CALL_TOKENS: u64 = 1_000_000_000;

/// Reads a provider's token count leniently: any JSON number (`12.0`, as some compatible
/// proxies send, is 12), capped at [`MAX_CALL_TOKENS`]; a negative one or anything else is no
/// count. The usage is a report, not the answer: it never fails a stream.
pub(crate) fn token_count<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    let value = Option::<serde_json::Value>::deserialize(d)?;
    Ok(value
        .as_ref()
        .and_then(serde_json::Value::as_number)
        .and_then(|n| {
            let count = n.as_u64().or_else(|| {
                n.as_f64().filter(|f| f.is_finite() && *f >= 0.0).map(|f| {
                    // Rounded and capped below, where the cast cannot overflow.
                    f.min(MAX_CALL_TOKENS as f64).round() as u64
                })
            })?;
            Some(count.min(MAX_CALL_TOKENS))
        }))
}

/// Why the model stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// It finished its answer.
    EndTurn,
    /// It wants tool results before going on.
    ToolUse,
    /// It hit the output token cap.
    MaxTokens,
    /// A content filter stopped it.
    ContentFilter,
    /// It declined to answer (Anthropic's `refusal`, OpenAI's `refusal` text).
    Refusal,
    /// Anything else the provider said, verbatim.
    Other(String),
}

impl StopReason {
    /// The warning a final answer that ended this way gets (code, message): the text is cut
    /// off or is no answer, though the turn ended normally on the wire.
    pub fn answer_warning(&self) -> Option<(&'static str, &'static str)> {
        match self {
            Self::EndTurn | Self::ToolUse | Self::Other(_) => None,
            Self::MaxTokens => Some((
                "OUTPUT_TRUNCATED",
                "the model stopped at its output token limit (the model's max_tokens), so the answer is cut off",
            )),
            Self::ContentFilter => Some((
                "CONTENT_FILTERED",
                "the provider's content filter stopped the answer, so it is incomplete",
            )),
            Self::Refusal => Some(("MODEL_REFUSED", "the model declined to answer")),
        }
    }

    /// Maps an OpenAI `finish_reason` or an Anthropic `stop_reason`.
    pub fn from_wire(reason: &str) -> Self {
        match reason {
            "stop" | "end_turn" | "stop_sequence" => Self::EndTurn,
            "tool_calls" | "function_call" | "tool_use" => Self::ToolUse,
            // Anthropic's context-window stop cuts the answer the same way.
            "length" | "max_tokens" | "model_context_window_exceeded" => Self::MaxTokens,
            "content_filter" => Self::ContentFilter,
            "refusal" => Self::Refusal,
            other => Self::Other(other.to_owned()),
        }
    }
}

/// One item of a provider's stream.
///
/// Order: any number of `TextDelta` and `ToolCall`, at most one `Usage`, then exactly one `Done`
/// (unless the stream ends with an error).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum LlmEvent {
    /// A piece of the answer text, to forward as a token.
    TextDelta(String),
    /// A complete tool call (never partial: deltas are assembled inside the provider).
    ToolCall(ToolCall),
    /// Token counts for the call.
    Usage(Usage),
    /// The model finished this turn.
    Done {
        /// Why it stopped.
        stop_reason: StopReason,
    },
}

/// A whole turn, collected from a stream by [`LlmProvider::complete`](super::LlmProvider::complete).
#[derive(Debug, Clone, PartialEq)]
pub struct LlmResponse {
    /// All text deltas, joined.
    pub text: String,
    /// Tool calls in the order they completed.
    pub tool_calls: Vec<ToolCall>,
    /// Token counts, when the provider sent them.
    pub usage: Option<Usage>,
    /// Why the model stopped.
    pub stop_reason: StopReason,
}

impl LlmResponse {
    /// The assistant message for this turn, to append to the conversation.
    pub fn to_message(&self) -> Message {
        Message::Assistant {
            content: self.text.clone(),
            tool_calls: self.tool_calls.clone(),
        }
    }
}

/// A finished call: parsed arguments (empty means `{}`), or the error the loop reports.
pub(crate) fn assemble(id: String, name: String, raw: String) -> Result<LlmEvent, LlmError> {
    let text = raw.trim();
    let parsed = if text.is_empty() {
        Ok(json!({}))
    } else {
        serde_json::from_str::<Value>(text)
    };
    match parsed {
        Ok(_) if name.is_empty() => Err(LlmError::MalformedToolCall {
            id,
            name,
            raw,
            error: "the call has no tool name".to_owned(),
        }),
        Ok(arguments) => Ok(LlmEvent::ToolCall(ToolCall {
            id,
            name,
            arguments,
        })),
        Err(e) => Err(LlmError::MalformedToolCall {
            id,
            name,
            raw,
            error: e.to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_surrogate_without_its_pair_is_read_as_a_replacement_character() {
        let text = |json: &str| {
            from_json::<Value>(json)
                .ok()
                .and_then(|v| v["c"].as_str().map(str::to_owned))
        };
        // Half a character at a delta's end, the other half at the next's start.
        assert_eq!(text(r#"{"c": "A\ud83d"}"#).as_deref(), Some("A\u{fffd}"));
        assert_eq!(text(r#"{"c": "\ude00B"}"#).as_deref(), Some("\u{fffd}B"));
        assert_eq!(
            text(r#"{"c": "X\udc00Y\ud800"}"#).as_deref(),
            Some("X\u{fffd}Y\u{fffd}")
        );
        // Whole pairs and escaped backslashes are left as they are.
        assert_eq!(
            text(r#"{"c": "\ud83d\ude00 \\ud800"}"#).as_deref(),
            Some("😀 \\ud800")
        );
        assert!(from_json::<Value>(r#"{"c": "\u12"}"#).is_err());
    }

    #[test]
    fn every_cut_or_declined_end_gets_its_warning() {
        for (wire, code) in [
            ("length", Some("OUTPUT_TRUNCATED")),
            ("max_tokens", Some("OUTPUT_TRUNCATED")),
            ("model_context_window_exceeded", Some("OUTPUT_TRUNCATED")),
            ("content_filter", Some("CONTENT_FILTERED")),
            ("refusal", Some("MODEL_REFUSED")),
            ("stop", None),
            ("end_turn", None),
            ("tool_use", None),
            ("pause_turn", None),
        ] {
            let got = StopReason::from_wire(wire).answer_warning().map(|(c, _)| c);
            assert_eq!(got, code, "{wire}");
        }
    }
}
