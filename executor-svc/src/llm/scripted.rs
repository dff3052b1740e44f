//! The `scripted` provider: replays a YAML script of turns, deterministically and offline.
//!
//! It holds no state between calls: which turn answers is a function of the request alone, so
//! concurrent runs, resumed sessions and restarts all see the same replies. The format is
//! documented in the crate's README ("Scripted provider") and on [`Script`].

use std::{path::Path, time::Duration};

use futures::StreamExt;
use serde::Deserialize;
use serde_json::Value;

use super::{
    LlmError, LlmEvent, LlmProvider, LlmRequest, LlmStream, Message, StopReason, Usage,
    types::assemble,
};

/// Text answered when a script has no turn left and sets no `final_text`.
pub const DEFAULT_FINAL_TEXT: &str = "The script has no more turns for this conversation.";

/// Final text of the built-in script, used when no provider is configured.
pub const BUILTIN_FINAL_TEXT: &str = "This is the scripted provider: no LLM is configured (see \
configs/llm_config.yaml), so no model read your request. You asked: {{last_message}}";

/// A script: turns, picked per request.
///
/// For a request whose conversation already holds `n` assistant messages, the reply is the first
/// turn at position `n` or later whose `match` is absent or occurs (case-insensitively) in the last
/// user or tool message. Without `match`, turn `n` answers the `n`-th model call of a conversation;
/// with `match`, one script can serve several conversations (an orchestrator and its sub-agents).
/// When no turn is left, the reply is `final_text`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Script {
    /// The turns, in order.
    #[serde(default)]
    pub turns: Vec<Turn>,
    /// The answer once the script runs out ([`DEFAULT_FINAL_TEXT`] when absent).
    #[serde(default)]
    pub final_text: Option<String>,
    /// Pause between streamed text pieces, in milliseconds (0: none).
    #[serde(default)]
    pub token_delay_ms: u64,
}

/// One model turn of a script.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Turn {
    /// Only answer when the last user or tool message contains this (case-insensitive).
    #[serde(default, rename = "match")]
    pub when: Option<String>,
    /// Text to stream, split before each whitespace run (`{{last_message}}` is replaced by the
    /// last user or tool message).
    #[serde(default)]
    pub text: Option<String>,
    /// Tool calls to make after the text.
    #[serde(default)]
    pub tool_calls: Vec<ScriptedCall>,
    /// Fail the call with this provider error message instead.
    #[serde(default)]
    pub error: Option<String>,
    /// Pause before the turn's first event, in milliseconds.
    #[serde(default)]
    pub delay_ms: u64,
    /// End the turn with this stop reason as a provider would say it (`max_tokens`, `length`,
    /// `content_filter`, `refusal`, ...) instead of a normal end (or tool use).
    #[serde(default)]
    pub stop_reason: Option<String>,
}

/// One scripted tool call.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptedCall {
    /// The tool.
    pub name: String,
    /// Arguments: a mapping, or a JSON string (which may be malformed on purpose, to test how
    /// the loop handles [`LlmError::MalformedToolCall`]).
    #[serde(default)]
    pub arguments: Option<Value>,
    /// The call id; `call_{turn}_{i}` when absent.
    #[serde(default)]
    pub id: Option<String>,
}

impl Script {
    /// Parses and checks a script.
    pub fn from_yaml(text: &str) -> Result<Self, LlmError> {
        let script: Self = taskforce_runtime::yaml::yaml(text.as_bytes())
            .map_err(|e| LlmError::Config(format!("script: {e}")))?;
        for (n, turn) in script.turns.iter().enumerate() {
            if turn.text.is_none() && turn.tool_calls.is_empty() && turn.error.is_none() {
                return Err(LlmError::Config(format!(
                    "script: turn {n} has no text, tool_calls or error"
                )));
            }
            if turn.tool_calls.iter().any(|c| c.name.trim().is_empty()) {
                return Err(LlmError::Config(format!(
                    "script: turn {n} has a tool call without a name"
                )));
            }
        }
        Ok(script)
    }

    /// Reads a script file.
    pub fn from_file(path: &Path) -> Result<Self, LlmError> {
        let text = taskforce_runtime::read_config(path)
            .map_err(|e| LlmError::Config(format!("cannot read script {}: {e}", path.display())))?;
        Self::from_yaml(&text).map_err(|e| LlmError::Config(format!("{}: {e}", path.display())))
    }

    /// The turn that answers `request`, and its position; `None` once the script has run out.
    pub fn pick(&self, request: &LlmRequest<'_>) -> Option<(usize, &Turn)> {
        let taken = request
            .messages
            .iter()
            .filter(|m| matches!(m, Message::Assistant { .. }))
            .count();
        let last = last_input(request).to_lowercase();
        self.turns.iter().enumerate().skip(taken).find(|(_, turn)| {
            turn.when
                .as_ref()
                .is_none_or(|w| last.contains(&w.to_lowercase()))
        })
    }
}

/// The last user or tool message's text ("" when there is none).
fn last_input<'r>(request: &'r LlmRequest<'_>) -> &'r str {
    request
        .messages
        .iter()
        .rev()
        .find_map(|m| match m {
            Message::User { content } | Message::Tool { content, .. } => Some(content.as_str()),
            _ => None,
        })
        .unwrap_or_default()
}

/// Splits text into streamed pieces: each whitespace run starts a new piece, so joining the pieces
/// gives the text back.
pub fn pieces(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut start, mut seen_word, mut prev_ws) = (0, false, false);
    for (i, c) in text.char_indices() {
        let ws = c.is_whitespace();
        if ws && !prev_ws && seen_word {
            out.push(&text[start..i]);
            start = i;
        }
        seen_word |= !ws;
        prev_ws = ws;
    }
    if start < text.len() {
        out.push(&text[start..]);
    }
    out
}

/// A provider that replays a [`Script`].
#[derive(Debug, Clone)]
pub struct ScriptedProvider {
    name: String,
    script: Script,
    /// The most characters of the last message `{{last_message}}` repeats (`None`: all).
    echo_limit: Option<usize>,
}

/// The most of a request the built-in script repeats: a deployment without a model would
/// otherwise answer a 256 KiB mission word by word (about 50,000 events, paced over 25 s).
pub const BUILTIN_ECHO_CHARS: usize = 1000;

/// `text` cut to its first `limit` characters, saying how many were left out.
fn at_most(text: &str, limit: Option<usize>) -> std::borrow::Cow<'_, str> {
    match limit.and_then(|n| text.char_indices().nth(n)) {
        Some((cut, _)) => std::borrow::Cow::Owned(format!(
            "{}… ({} more characters)",
            &text[..cut],
            text[cut..].chars().count()
        )),
        None => std::borrow::Cow::Borrowed(text),
    }
}

impl ScriptedProvider {
    /// A provider named `name` replaying `script`.
    pub fn new(name: impl Into<String>, script: Script) -> Self {
        Self {
            name: name.into(),
            script,
            echo_limit: None,
        }
    }

    /// The built-in script: no turns, and a final text that says no LLM is configured (and
    /// repeats at most [`BUILTIN_ECHO_CHARS`] of the request).
    pub fn builtin(name: impl Into<String>) -> Self {
        let script = Script {
            final_text: Some(BUILTIN_FINAL_TEXT.to_owned()),
            ..Script::default()
        };
        Self {
            echo_limit: Some(BUILTIN_ECHO_CHARS),
            ..Self::new(name, script)
        }
    }

    /// The script it replays.
    pub fn script(&self) -> &Script {
        &self.script
    }

    fn events(&self, request: &LlmRequest<'_>) -> Vec<(Duration, Result<LlmEvent, LlmError>)> {
        let fallback = Turn {
            text: Some(
                self.script
                    .final_text
                    .clone()
                    .unwrap_or_else(|| DEFAULT_FINAL_TEXT.to_owned()),
            ),
            ..Turn::default()
        };
        let (position, turn) = self
            .script
            .pick(request)
            .unwrap_or((self.script.turns.len(), &fallback));
        let mut out = Vec::new();
        let mut delay = Duration::from_millis(turn.delay_ms);
        if let Some(message) = &turn.error {
            let error = LlmError::Provider {
                provider: self.name.clone(),
                kind: "scripted_error".to_owned(),
                message: message.clone(),
            };
            return vec![(delay, Err(error))];
        }
        let token_delay = Duration::from_millis(self.script.token_delay_ms);
        let mut output_tokens = 0;
        if let Some(text) = &turn.text {
            let text = text.replace(
                "{{last_message}}",
                &at_most(last_input(request), self.echo_limit),
            );
            for piece in pieces(&text) {
                out.push((
                    std::mem::replace(&mut delay, token_delay),
                    Ok(LlmEvent::TextDelta(piece.to_owned())),
                ));
                output_tokens += 1;
            }
        }
        for (i, call) in turn.tool_calls.iter().enumerate() {
            let id = call
                .id
                .clone()
                .unwrap_or_else(|| format!("call_{position}_{i}"));
            let raw = match &call.arguments {
                None | Some(Value::Null) => String::new(),
                Some(Value::String(raw)) => raw.clone(),
                Some(other) => other.to_string(),
            };
            out.push((
                std::mem::take(&mut delay),
                assemble(id, call.name.clone(), raw),
            ));
            output_tokens += 1;
        }
        let input_tokens = request.messages.iter().map(|m| count_words(m) as u64).sum();
        out.push((
            Duration::ZERO,
            Ok(LlmEvent::Usage(Usage {
                input_tokens,
                output_tokens,
            })),
        ));
        let stop_reason = match &turn.stop_reason {
            Some(wire) => StopReason::from_wire(wire),
            None if turn.tool_calls.is_empty() => StopReason::EndTurn,
            None => StopReason::ToolUse,
        };
        out.push((delay, Ok(LlmEvent::Done { stop_reason })));
        out
    }
}

fn count_words(message: &Message) -> usize {
    let words = |text: &str| text.split_whitespace().count();
    match message {
        Message::System { content } | Message::User { content } | Message::Tool { content, .. } => {
            words(content)
        }
        Message::Assistant {
            content,
            tool_calls,
        } => words(content) + tool_calls.len(),
    }
}

impl LlmProvider for ScriptedProvider {
    fn name(&self) -> &str {
        &self.name
    }

    fn stream(&self, request: &LlmRequest<'_>) -> LlmStream {
        let events = self.events(request);
        if events.iter().all(|(delay, _)| delay.is_zero()) {
            return Box::pin(futures::stream::iter(
                events.into_iter().map(|(_, event)| event),
            ));
        }
        Box::pin(
            futures::stream::iter(events).then(|(delay, event)| async move {
                if !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
                event
            }),
        )
    }
}
