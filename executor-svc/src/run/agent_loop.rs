//! The ReAct loop: model turn → tool calls → results → … until an answer, a question, a
//! failure, or cancellation. Tokens and tool events go out as they happen; the driver emits the
//! closing events.

use futures::StreamExt;
use serde_json::Value;

use super::{
    RunCtx,
    calls::{self, Requested, Tools},
    events,
};
use crate::{
    llm::{LlmError, LlmEvent, Message, ToolCall, ToolDefinition},
    session::{Pending, Session},
};

/// How the loop ended.
#[derive(Debug, Clone, PartialEq)]
pub enum LoopEnd {
    /// The model answered.
    Completed(String),
    /// A tool asked the user something.
    Paused(Pending),
    /// The run failed.
    Failed {
        /// Upper snake case code for the `Error` event.
        code: &'static str,
        /// What happened.
        message: String,
    },
    /// The run's cancellation fired (client gone, `Cancel`, shutdown or the time budget).
    Cancelled,
}

/// Token and call counts of one run.
#[derive(Debug, Clone, Copy, Default)]
pub struct Counts {
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Completion tokens.
    pub output_tokens: u64,
    /// Model calls.
    pub steps: u32,
    /// Tool calls.
    pub tool_calls: u32,
}

/// Runs the loop on `session` until it ends; `session.messages` grows as it goes.
pub async fn run(
    ctx: &RunCtx,
    tools: &Tools,
    definitions: &[ToolDefinition],
    session: &mut Session,
    counts: &mut Counts,
) -> LoopEnd {
    loop {
        if ctx.cancel.is_cancelled() {
            return LoopEnd::Cancelled;
        }
        if counts.steps >= ctx.max_steps {
            return LoopEnd::Failed {
                code: "STEP_BUDGET_EXCEEDED",
                message: format!(
                    "the run used its {} model calls without a final answer",
                    ctx.max_steps
                ),
            };
        }
        counts.steps += 1;
        let request = ctx.model.request(&session.messages, definitions);
        let mut stream = ctx.model.provider.stream(&request);
        let mut text = String::new();
        let mut requested = Vec::new();
        loop {
            let next = tokio::select! {
                () = ctx.cancel.cancelled() => return LoopEnd::Cancelled,
                next = stream.next() => next,
            };
            match next {
                Some(Ok(LlmEvent::TextDelta(delta))) => {
                    text.push_str(&delta);
                    ctx.sink.emit(events::token(delta)).await;
                }
                Some(Ok(LlmEvent::ToolCall(call))) => requested.push(Requested::Call(call)),
                Some(Ok(LlmEvent::Usage(usage))) => {
                    counts.input_tokens += usage.input_tokens;
                    counts.output_tokens += usage.output_tokens;
                }
                Some(Ok(LlmEvent::Done { .. })) => break,
                Some(Err(LlmError::MalformedToolCall {
                    id, name, error, ..
                })) => requested.push(Requested::Malformed { id, name, error }),
                Some(Err(e)) => {
                    return LoopEnd::Failed {
                        code: "LLM_ERROR",
                        message: e.to_string(),
                    };
                }
                None => {
                    return LoopEnd::Failed {
                        code: "LLM_ERROR",
                        message: format!(
                            "{}: the model's stream ended without finishing",
                            ctx.model.provider.name()
                        ),
                    };
                }
            }
        }
        drop(stream);
        session.messages.push(Message::Assistant {
            content: text.clone(),
            tool_calls: requested.iter().map(as_tool_call).collect(),
        });
        if requested.is_empty() {
            return LoopEnd::Completed(text);
        }
        counts.tool_calls += u32::try_from(requested.len()).unwrap_or(u32::MAX);
        let results = calls::run_all(ctx, tools, &requested).await;
        let mut pending = None;
        for done in results {
            if done.question && pending.is_none() {
                pending = Some(Pending {
                    call_id: done.call_id,
                    tool: done.tool,
                    question: done.content,
                });
                continue;
            }
            let content = if done.question {
                "only one question can wait for the user at a time; ask again later".to_owned()
            } else {
                done.content
            };
            session.messages.push(Message::Tool {
                call_id: done.call_id,
                name: done.tool,
                content,
                is_error: done.is_error || done.question,
            });
        }
        if let Some(pending) = pending {
            return LoopEnd::Paused(pending);
        }
        // A round's results are what a crash would lose; the driver stores the run's end.
        if let Err(e) = ctx.store.save(session, false).await {
            tracing::warn!(session_id = %session.id, error = %e, "cannot store the session");
        }
    }
}

/// The call as it goes into the conversation (malformed arguments kept as the model's text).
fn as_tool_call(requested: &Requested) -> ToolCall {
    match requested {
        Requested::Call(call) => call.clone(),
        Requested::Malformed { id, name, .. } => ToolCall {
            id: id.clone(),
            name: name.clone(),
            arguments: Value::Object(serde_json::Map::new()),
        },
    }
}

/// Answers every call of the last assistant turn that has no result yet (a run stopped
/// mid-round), so the conversation stays valid for the next model call.
pub fn close_open_calls(messages: &mut Vec<Message>, why: &str) {
    let Some(turn) = messages
        .iter()
        .rposition(|m| matches!(m, Message::Assistant { .. }))
    else {
        return;
    };
    let Message::Assistant { tool_calls, .. } = &messages[turn] else {
        return;
    };
    let answered: Vec<&str> = messages[turn..]
        .iter()
        .filter_map(|m| match m {
            Message::Tool { call_id, .. } => Some(call_id.as_str()),
            _ => None,
        })
        .collect();
    let open: Vec<Message> = tool_calls
        .iter()
        .filter(|c| !answered.contains(&c.id.as_str()))
        .map(|c| Message::Tool {
            call_id: c.id.clone(),
            name: c.name.clone(),
            content: why.to_owned(),
            is_error: true,
        })
        .collect();
    messages.extend(open);
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn call(id: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: "probe".into(),
            arguments: json!({}),
        }
    }

    #[test]
    fn open_calls_of_the_last_turn_get_error_results() {
        let mut messages = vec![
            Message::user("go"),
            Message::Assistant {
                content: String::new(),
                tool_calls: vec![call("a"), call("b")],
            },
            Message::tool_result(&call("a"), "done"),
        ];
        close_open_calls(&mut messages, "cancelled");
        assert_eq!(messages.len(), 4);
        match &messages[3] {
            Message::Tool {
                call_id, is_error, ..
            } => assert_eq!((call_id.as_str(), *is_error), ("b", true)),
            other => panic!("{other:?}"),
        }
        close_open_calls(&mut messages, "cancelled");
        assert_eq!(messages.len(), 4, "nothing left open");
    }
}
