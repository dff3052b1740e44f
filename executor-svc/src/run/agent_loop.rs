//! The ReAct loop: model turn → tool calls → results → … until an answer, a question, a
//! failure, or cancellation. Tokens and tool events go out as they happen; the driver emits the
//! closing events.

use std::sync::{Arc, atomic::Ordering};

use futures::{StreamExt, future::BoxFuture};
use serde_json::Value;
use taskforce_runtime::telemetry::{SpanEnd, fail_span};

use super::{
    RunCtx,
    answers::{self, Split},
    calls::{self, Finished, Kind, Requested, Tools},
    delegate, events,
};
use crate::{
    llm::{LlmError, LlmEvent, Message, StopReason, ToolCall, ToolDefinition},
    session::{Ask, Pending},
    tools::orchestration::Orchestrate,
};

/// A model call that failed: counted, its span marked failed, and the run's end.
fn llm_failed(ctx: &RunCtx, span: &SpanEnd, message: String) -> LoopEnd {
    crate::metrics::llm_error(ctx.model.provider.name());
    fail_span(&span.0, &message);
    LoopEnd::Failed {
        code: "LLM_ERROR",
        message,
    }
}

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

/// The most text one model turn may answer. Far above any model's output limit (128k tokens
/// are under 1 MiB of text), it bounds what one response makes the executor hold, store (twice:
/// the answer and its message) and send (a 100 MB answer took 1 GB, could not be read back
/// through the gateway's 64 MiB limit, and pushed every other session out of the store).
pub const MAX_ANSWER_BYTES: usize = 8 * 1024 * 1024;

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

/// A frame's conversation: the top agent's lives in its session (stored after every tool
/// round), a sub-agent's in memory until its frame pauses or ends.
pub trait Conversation: Send {
    /// The messages, system prompt first.
    fn messages(&mut self) -> &mut Vec<Message>;

    /// Stores what a crash would lose (after a tool round).
    fn checkpoint<'a>(&'a mut self, ctx: &'a RunCtx) -> BoxFuture<'a, ()>;
}

impl Conversation for Vec<Message> {
    fn messages(&mut self) -> &mut Vec<Message> {
        self
    }

    fn checkpoint<'a>(&'a mut self, _ctx: &'a RunCtx) -> BoxFuture<'a, ()> {
        Box::pin(async {})
    }
}

/// Runs the loop until it ends; the conversation grows as it goes. With `resume`, the answers
/// to the frame's pending questions are applied first (results, sub-agents resumed).
pub async fn run(
    ctx: &Arc<RunCtx>,
    tools: &Tools,
    definitions: &[ToolDefinition],
    convo: &mut dyn Conversation,
    counts: &mut Counts,
    resume: Option<Split>,
) -> LoopEnd {
    let orchestra: Arc<dyn Orchestrate> = Arc::new(delegate::FrameHandle::new(Arc::clone(ctx)));
    if let Some(split) = resume {
        if let Some(pending) = apply_answers(ctx, tools, &orchestra, convo, counts, split).await {
            return paused_unless_cancelled(ctx, pending);
        }
        convo.checkpoint(ctx).await;
    }
    loop {
        if ctx.cancel.is_cancelled() {
            return LoopEnd::Cancelled;
        }
        let depth = ctx.sink.agent_path().len();
        let who = if depth == 0 {
            "the run"
        } else {
            "the sub-agent"
        };
        if counts.steps >= ctx.max_steps {
            return LoopEnd::Failed {
                code: "STEP_BUDGET_EXCEEDED",
                message: format!(
                    "{who} used its {} model calls without a final answer",
                    ctx.max_steps
                ),
            };
        }
        // The run's budget, shared by its frames (parallel sub-agents included), less the calls
        // kept for the agents above this one. Counted only when taken: a refused call keeps
        // nothing of what is kept.
        let run_max = ctx.runner.budgets.max_steps;
        let limit = run_steps_below(run_max, depth);
        let taken = ctx
            .run_steps
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < limit).then_some(n + 1)
            });
        if taken.is_err() {
            let message = if depth == 0 {
                format!(
                    "the run used its {run_max} model calls (its sub-agents' included) without \
                     a final answer"
                )
            } else {
                let kept = if depth == 1 {
                    "the last one is kept for the agent that delegated to this one, so it can \
                     decide what to do"
                        .to_owned()
                } else {
                    format!(
                        "the last {depth} are kept for the agents that delegated to this one, \
                         one each, so they can decide what to do"
                    )
                };
                format!(
                    "the run has used {limit} of its {run_max} model calls (its sub-agents' \
                     included); {kept}"
                )
            };
            return LoopEnd::Failed {
                code: "STEP_BUDGET_EXCEEDED",
                message,
            };
        }
        counts.steps += 1;
        ctx.steps_used.store(counts.steps, Ordering::Relaxed);
        let request = ctx.model.request(convo.messages(), definitions);
        // One span per model call, open until this turn's answer is read (it ends when dropped,
        // not when the stream was made), marked failed when the call fails.
        let llm_span = SpanEnd(tracing::info_span!(
            "llm",
            otel.name = %format_args!("llm {}", ctx.model.provider.name()),
            otel.kind = "client",
            provider = ctx.model.provider.name(),
            model = %ctx.model.model,
            otel.status_description = tracing::field::Empty,
        ));
        let mut stream = llm_span.0.in_scope(|| ctx.model.provider.stream(&request));
        let asked = std::time::Instant::now();
        let mut usage_seen = (0, 0);
        let mut text = String::new();
        let mut requested = Vec::new();
        let stopped: StopReason = loop {
            let next = tokio::select! {
                () = ctx.cancel.cancelled() => return LoopEnd::Cancelled,
                next = stream.next() => next,
            };
            match next {
                Some(Ok(LlmEvent::TextDelta(delta))) => {
                    if text.len() + delta.len() > MAX_ANSWER_BYTES {
                        let message = format!(
                            "{}: the model's answer is longer than {} MiB, the most a run keeps",
                            ctx.model.provider.name(),
                            MAX_ANSWER_BYTES >> 20
                        );
                        return llm_failed(ctx, &llm_span, message);
                    }
                    text.push_str(&delta);
                    ctx.sink.emit(events::token(delta)).await;
                }
                Some(Ok(LlmEvent::ToolCall(call))) => requested.push(Requested::Call(call)),
                Some(Ok(LlmEvent::Usage(usage))) => {
                    counts.input_tokens = counts.input_tokens.saturating_add(usage.input_tokens);
                    counts.output_tokens = counts.output_tokens.saturating_add(usage.output_tokens);
                    usage_seen = (usage.input_tokens, usage.output_tokens);
                }
                Some(Ok(LlmEvent::Done { stop_reason })) => {
                    crate::metrics::llm_call(
                        ctx.model.provider.name(),
                        asked.elapsed(),
                        usage_seen.0,
                        usage_seen.1,
                    );
                    break stop_reason;
                }
                Some(Err(LlmError::MalformedToolCall {
                    id,
                    name,
                    raw,
                    error,
                })) => requested.push(Requested::Malformed {
                    id,
                    name,
                    raw,
                    error,
                }),
                Some(Err(e)) => return llm_failed(ctx, &llm_span, e.to_string()),
                None => {
                    let message = format!(
                        "{}: the model's stream ended without finishing",
                        ctx.model.provider.name()
                    );
                    return llm_failed(ctx, &llm_span, message);
                }
            }
        };
        drop(stream);
        drop(llm_span);
        calls::unique_call_ids(&mut requested);
        convo.messages().push(Message::Assistant {
            content: text.clone(),
            tool_calls: requested.iter().map(as_tool_call).collect(),
        });
        if requested.is_empty() {
            // A cut-off or declined answer is still the answer, but not as if it were whole.
            if let Some((code, message)) = stopped.answer_warning() {
                ctx.sink
                    .emit(events::warning(code, message.to_owned()))
                    .await;
            }
            return LoopEnd::Completed(text);
        }
        counts.tool_calls += u32::try_from(requested.len()).unwrap_or(u32::MAX);
        let results = calls::run_all(ctx, tools, &orchestra, &requested).await;
        let asks = absorb(ctx, results, convo.messages()).await;
        if !asks.is_empty() {
            return paused_unless_cancelled(ctx, answers::pending(asks));
        }
        // A round's results are what a crash would lose; the driver stores the run's end.
        convo.checkpoint(ctx).await;
    }
}

/// A round that raised questions pauses on them, unless the run was cancelled meanwhile (by
/// the user, a client that left, or its time budget): a cancel ends the run, whatever a
/// sub-agent asked. The executor's own stop pauses, so the questions wait for its restart.
/// The most model calls of the run (`run_max`, its frames' together) a frame `depth` levels
/// down may take: the last `depth` are kept for the agents above it, one each, so a sub-agent
/// that runs out leaves every agent that delegated to it a call to decide what to do.
pub(super) fn run_steps_below(run_max: u32, depth: usize) -> u32 {
    run_max.saturating_sub(u32::try_from(depth).unwrap_or(u32::MAX))
}

fn paused_unless_cancelled(ctx: &RunCtx, pending: crate::session::Pending) -> LoopEnd {
    if ctx.cancel.is_cancelled() && !ctx.runner.shutdown.is_cancelled() {
        LoopEnd::Cancelled
    } else {
        LoopEnd::Paused(pending)
    }
}

/// Applies answers to the frame's pending questions: own questions get their results, and
/// the sub-agents whose questions are all answered are resumed in one round of calls (through
/// the same tool path as every call). Returns what still waits for the user.
async fn apply_answers(
    ctx: &Arc<RunCtx>,
    tools: &Tools,
    orchestra: &Arc<dyn Orchestrate>,
    convo: &mut dyn Conversation,
    counts: &mut Counts,
    split: Split,
) -> Option<Pending> {
    let Split {
        results,
        calls: resumes,
        mut still,
    } = split;
    let messages = convo.messages();
    for (call_id, name, content) in results {
        // The question's call ends with its answer (a top frame's plain answer says so when
        // the run resumes; these come by key, and in sub-agents).
        ctx.sink
            .emit(events::answered(
                call_id.clone(),
                name.clone(),
                content.clone(),
            ))
            .await;
        messages.push(Message::Tool {
            call_id,
            name,
            content,
            is_error: false,
        });
    }
    if !resumes.is_empty() {
        messages.push(Message::Assistant {
            content: String::new(),
            tool_calls: resumes.clone(),
        });
        counts.tool_calls += u32::try_from(resumes.len()).unwrap_or(u32::MAX);
        let requested: Vec<Requested> = resumes.into_iter().map(Requested::Call).collect();
        let results = calls::run_all(ctx, tools, orchestra, &requested).await;
        still.extend(absorb(ctx, results, messages).await);
    }
    (!still.is_empty()).then(|| answers::pending(still))
}

/// Puts a round's results into the conversation and returns the questions it raised: the
/// first own `ask_user` (its result comes with the answer), and every sub-agent's.
async fn absorb(ctx: &RunCtx, results: Vec<Finished>, messages: &mut Vec<Message>) -> Vec<Ask> {
    let mut asks = Vec::new();
    let mut asked = false;
    for done in results {
        let (content, is_error) = match done.kind {
            Kind::Question {
                key,
                required,
                default,
            } if !asked => {
                asked = true;
                asks.push(Ask {
                    key: format!(
                        "{}.{}",
                        ctx.agent.agent_id,
                        key.as_deref().unwrap_or("answer")
                    ),
                    text: done.content,
                    required,
                    default,
                    agent_path: ctx.sink.agent_path().to_vec(),
                    call_id: done.call_id,
                    tool: done.tool,
                    token: None,
                    task: String::new(),
                    answer: None,
                    asked_as: None,
                });
                continue;
            }
            Kind::Question { .. } => {
                let refused = "only one question can wait for the user at a time; ask again later";
                // Its `tool_start` went out: the stream says how the call ended.
                ctx.sink
                    .emit(events::tool_error(
                        &done.call_id,
                        &done.tool,
                        refused.to_owned(),
                    ))
                    .await;
                (refused.to_owned(), true)
            }
            Kind::NeedInput(more) => {
                asks.extend(more);
                (done.content, done.is_error)
            }
            Kind::Plain => (done.content, done.is_error),
        };
        messages.push(Message::Tool {
            call_id: done.call_id,
            name: done.tool,
            content,
            is_error,
        });
    }
    asks
}

/// The call as it goes into the conversation (malformed arguments kept as the model's text).
fn as_tool_call(requested: &Requested) -> ToolCall {
    match requested {
        Requested::Call(call) => call.clone(),
        // The model reads back what it wrote, next to the error result that explains it: as the
        // text it was (OpenAI's wire carries arguments as text; Anthropic's, an object, gets `{}`).
        Requested::Malformed { id, name, raw, .. } => ToolCall {
            id: id.clone(),
            name: name.clone(),
            arguments: Value::String(raw.clone()),
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

    #[test]
    fn a_malformed_call_keeps_the_text_the_model_wrote() {
        let malformed = Requested::Malformed {
            id: "m1".into(),
            name: "file_read".into(),
            raw: "{\"path\": b.txt}".into(),
            error: "expected value".into(),
        };
        assert_eq!(
            as_tool_call(&malformed).arguments,
            json!("{\"path\": b.txt}")
        );
    }
}
