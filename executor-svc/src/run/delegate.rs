//! Sub-agent frames (seed 003): a delegation runs a registry agent's loop as a frame of the
//! same run, with its own conversation, tools, budgets and a sink that nests its events under
//! its `agent_path`. Its final answer becomes the seed's result object; its patch is merged
//! into the session's plan; its questions bubble up as `need_user_input` with a state token
//! naming the frame, which stays in the session until the answers resume it.

use std::{
    sync::{Arc, atomic::AtomicU32},
    time::Duration,
};

use futures::{FutureExt, future::BoxFuture};
use serde_json::{Map, Value, json};
use taskforce_proto::v1::{self, run_event::Event};
use tracing::info;

use super::{
    FrameInfo, Orchestra, RunCtx,
    agent_loop::{self, Counts, LoopEnd},
    answers::{self, Split},
    driver::{select_tools, workspace_for},
    merge::{merge, plan_updated, update_plan},
};
use crate::{
    agent::AgentDef,
    llm::Message,
    plan::{ORCHESTRATOR, TaskStatus},
    registry::Target,
    session::{Ask, Frame, Orchestration},
    tools::{
        ToolContext, ToolError, ToolOutcome,
        orchestration::{AGENT_TOOL_PREFIX, Delegation, Orchestrate, find_subagent},
    },
};

/// What every sub-agent is told about working inside a plan.
const SUBAGENT_GUIDE: &str = "\n\n## Working as a sub-agent\n\
You work on one task of a larger plan, delegated to you by another agent. The task message \
holds `inputs` and a `shared_context` with the plan snapshot (its `version` and tasks) and the \
facts known so far. You never change the plan directly: finish with a final answer that is ONE \
JSON object, every key optional:\n\
{\"result\": {…}, \"patch\": {\"base_version\": <plan version>, \"ops\": [{\"op\": \"add\"|\
\"add_subtask\"|\"update\"|\"link_dep\"|\"unlink_dep\", …}]}, \"new_facts\": {…}, \
\"suggested_next_action\": \"…\"}\n\
You may only update tasks you own. If you need information only the user has, call \
`ask_user` with a short `key`; the question is passed on and you continue with the answer.";

/// A frame's link to orchestration, handed to its tool calls.
#[derive(Debug)]
pub struct FrameHandle {
    ctx: Arc<RunCtx>,
}

impl FrameHandle {
    /// The handle of the frame `ctx`.
    pub fn new(ctx: Arc<RunCtx>) -> Self {
        Self { ctx }
    }
}

impl Orchestrate for FrameHandle {
    fn delegate<'a>(
        &'a self,
        tool: &'a ToolContext,
        request: Delegation,
    ) -> BoxFuture<'a, Result<ToolOutcome, ToolError>> {
        delegate(&self.ctx, &tool.call_id, request).boxed()
    }

    fn update_plan<'a>(&'a self, patch: Value) -> BoxFuture<'a, Result<ToolOutcome, ToolError>> {
        update_plan(&self.ctx, patch).boxed()
    }
}

fn failed(agent: &str, reason: impl Into<String>) -> ToolError {
    ToolError::Failed {
        tool: format!("{AGENT_TOOL_PREFIX}{agent}"),
        reason: reason.into(),
    }
}

/// The sub-agent `named` refers to among the parent's `subagents`, or why there is none.
fn which(parent: &RunCtx, named: &str) -> Result<String, ToolError> {
    let subs = &parent.agent.subagents;
    if let Some(id) = find_subagent(subs, named) {
        return Ok(id.clone());
    }
    Err(failed(
        named,
        format!(
            "`{named}` is not a sub-agent of `{}`; it may delegate to: {}",
            parent.agent.agent_id,
            if subs.is_empty() {
                "none".to_owned()
            } else {
                subs.join(", ")
            }
        ),
    ))
}

/// Runs or resumes a sub-agent for `parent`'s call `call_id`.
async fn delegate(
    parent: &Arc<RunCtx>,
    call_id: &str,
    request: Delegation,
) -> Result<ToolOutcome, ToolError> {
    let agent_id = which(parent, &request.agent)?;
    if request.resume.is_none() {
        guard(parent, &agent_id)?;
    }
    // The definition as it is now (also for a resumed frame: it may have been edited). Loaded
    // before a paused frame is taken out of the session, so a failure here loses none.
    let def = parent
        .runner
        .registry
        .resolve(&Target::Agent(agent_id.clone()))
        .await
        .map_err(|e| failed(&agent_id, format!("cannot load the sub-agent: {e}")))?;
    let is_resume = request.resume.is_some();
    // The task is freed when the delegation ends, however it ends (the guard is made where
    // the task is taken, before any `.await`: a cancel there would leave it taken).
    let (frame, split, _working) = match &request.resume {
        Some((token, answers)) => {
            let (frame, split) = resumed_frame(parent, &agent_id, token, answers)?;
            let working = Working::of(parent, &frame.task_id);
            (frame, split, working)
        }
        None => {
            let (frame, working) = new_frame(parent, &def, &request).await?;
            (frame, None, working)
        }
    };
    run_frame(parent, call_id, def, frame, split, is_resume).await
}

/// The task a delegation works on, taken until the delegation ends (this is dropped): no
/// other delegation may take it meanwhile, so two sub-agents never write one task's result.
struct Working {
    orchestra: Arc<Orchestra>,
    task_id: String,
}

impl Working {
    /// The guard of `task_id`, which the caller has just marked working.
    fn of(parent: &RunCtx, task_id: &str) -> Self {
        Self {
            orchestra: Arc::clone(&parent.orchestra),
            task_id: task_id.to_owned(),
        }
    }
}

impl Drop for Working {
    fn drop(&mut self) {
        self.orchestra.with(|o| o.working.remove(&self.task_id));
    }
}

/// Why task `id` cannot be delegated now: a delegation works on it, or waits on answers.
fn busy(o: &Orchestration, id: &str) -> Option<String> {
    let agent = if o.working.contains(id) {
        o.plan.task(id).map(|t| t.owner_agent.clone())?
    } else {
        o.frames
            .values()
            .find(|f| f.task_id == id)?
            .agent_id
            .clone()
    };
    Some(format!(
        "`task_id`: task `{id}` is being worked on by `{agent}` (its delegation has not ended); \
         delegate it once that ends, or leave out `task_id` to give this sub-agent a task of its \
         own"
    ))
}

/// The stored frame a resume token names, with the answers applied to its questions.
fn resumed_frame(
    parent: &RunCtx,
    agent_id: &str,
    token: &str,
    answers: &Map<String, Value>,
) -> Result<(Frame, Option<Split>), ToolError> {
    let frame_id = parent
        .runner
        .store
        .tokens()
        .verify(&parent.session_id, token)
        .map_err(|e| failed(agent_id, e.to_string()))?;
    let taken = parent.orchestra.with(|o| {
        let frame = o.frames.get(&frame_id)?;
        if frame.agent_id != agent_id || frame.parent != parent.frame.id {
            return None;
        }
        let frame = o.frames.remove(&frame_id)?;
        o.working.insert(frame.task_id.clone());
        Some(frame)
    });
    let frame = taken.ok_or_else(|| {
        failed(
            agent_id,
            "`resume_token` names no question of this sub-agent that is still waiting (it was \
             answered already, or belongs to another delegation)",
        )
    })?;
    match answers::split(&frame.pending, answers) {
        Ok(split) => Ok((frame, Some(split))),
        Err(message) => {
            // Refused answers change nothing: the frame waits on.
            parent.orchestra.with(|o| {
                o.working.remove(&frame.task_id);
                o.frames.insert(frame.id.clone(), frame)
            });
            Err(ToolError::InvalidArguments {
                tool: format!("{AGENT_TOOL_PREFIX}{agent_id}"),
                reason: message,
            })
        }
    }
}

/// The guards of a new delegation: hop limit and cycles.
fn guard(parent: &RunCtx, agent_id: &str) -> Result<(), ToolError> {
    let limits = &parent.runner.budgets.delegation;
    if parent.frame.depth + 1 > limits.max_hops {
        return Err(failed(
            agent_id,
            format!(
                "delegation refused: the hop limit is {} (levels of sub-agents below the \
                 orchestrator), and `{}` is already {} level(s) down",
                limits.max_hops, parent.agent.agent_id, parent.frame.depth
            ),
        ));
    }
    if agent_id == parent.agent.agent_id || parent.frame.ancestors.iter().any(|a| a == agent_id) {
        let mut chain = parent.frame.ancestors.clone();
        chain.push(parent.agent.agent_id.clone());
        chain.push(agent_id.to_owned());
        return Err(failed(
            agent_id,
            format!(
                "delegation refused: it would make a cycle ({})",
                chain.join(" → ")
            ),
        ));
    }
    Ok(())
}

/// Who `ctx` is in the plan: the orchestrator at the top, a sub-agent by its id.
fn author(ctx: &RunCtx) -> &str {
    if ctx.frame.depth == 0 {
        ORCHESTRATOR
    } else {
        &ctx.agent.agent_id
    }
}

/// A new frame for a delegation to `def`, within the budget its parent has left, and the
/// guard of the task it works on.
async fn new_frame(
    parent: &RunCtx,
    def: &AgentDef,
    request: &Delegation,
) -> Result<(Frame, Working), ToolError> {
    let runner = &parent.runner;
    let agent_id = def.agent_id.as_str();
    let steps_used = parent.steps_used.load(std::sync::atomic::Ordering::Relaxed);
    let depth = parent.sink.agent_path().len() + 1;
    let run_left = super::agent_loop::run_steps_below(runner.budgets.max_steps, depth)
        .saturating_sub(parent.run_steps.load(std::sync::atomic::Ordering::Relaxed));
    let steps_left = parent.max_steps.saturating_sub(steps_used).min(run_left);
    let steps = request
        .max_steps
        .unwrap_or(runner.budgets.max_steps)
        .min(steps_left);
    let time_left = parent
        .deadline
        .saturating_duration_since(tokio::time::Instant::now());
    let time = request
        .timeout
        .unwrap_or(runner.budgets.delegation.timeout)
        .min(time_left);
    if steps == 0 || time.is_zero() {
        return Err(failed(
            agent_id,
            format!(
                "delegation refused: `{}` has no budget left for a sub-agent ({steps_left} \
                 model calls, {time_left:?})",
                parent.agent.agent_id
            ),
        ));
    }
    let (task_id, plan) = parent
        .orchestra
        .with(|o| {
            if let Some(reason) = request.task_id.as_deref().and_then(|id| busy(o, id)) {
                return Err(reason);
            }
            let existed = request
                .task_id
                .as_deref()
                .is_some_and(|id| o.plan.task(id).is_some());
            let id = o.plan.ensure_task(
                request.task_id.as_deref(),
                &request.task,
                author(parent),
                agent_id,
            )?;
            if !existed {
                o.created.insert(id.clone(), parent.frame.path.clone());
            }
            o.plan.set_status(&id, TaskStatus::InProgress, None);
            o.working.insert(id.clone());
            Ok::<_, String>((id, o.plan.clone()))
        })
        .map_err(|reason| ToolError::InvalidArguments {
            tool: format!("{AGENT_TOOL_PREFIX}{agent_id}"),
            reason,
        })?;
    let working = Working::of(parent, &task_id);
    parent.sink.emit(plan_updated(&plan)).await;
    let facts = parent.orchestra.with(|o| o.facts.clone());
    // The caller's keys, then the executor's over them: a caller's own `plan`, `facts` or
    // `your_task_id` must not hide the plan's version (the sub-agent's patches need it) or
    // which task is the sub-agent's.
    let mut shared = match &request.shared_context {
        Value::Object(extra) => extra.clone(),
        _ => serde_json::Map::new(),
    };
    shared.insert(
        "plan".into(),
        json!({"version": plan.version, "tasks": plan.tasks}),
    );
    shared.insert("facts".into(), json!(facts));
    shared.insert("your_task_id".into(), Value::String(task_id.clone()));
    let shared = Value::Object(shared);
    let message = format!(
        "{}\n\ninputs: {}\nshared_context: {}",
        request.task, request.inputs, shared
    );
    let mut agent_path = parent.sink.agent_path().to_vec();
    agent_path.push(agent_id.to_owned());
    let frame = Frame {
        id: format!("f{}", uuid::Uuid::new_v4().simple()),
        agent_id: agent_id.to_owned(),
        agent_path,
        parent: parent.frame.id.clone(),
        model: def.model.clone().or_else(|| parent.model_alias.clone()),
        messages: vec![
            Message::system(format!("{}{SUBAGENT_GUIDE}", def.system_prompt)),
            Message::user(message),
        ],
        pending: answers::pending(Vec::new()),
        task_id,
        task: request.task.clone(),
        allowed_tools: request.allowed_tools.clone(),
        steps_left: steps,
        time_left_ms: u64::try_from(time.as_millis()).unwrap_or(u64::MAX),
    };
    Ok((frame, working))
}

/// Runs `frame` to its end (answer, questions, failure) under its budget.
async fn run_frame(
    parent: &Arc<RunCtx>,
    call_id: &str,
    def: Arc<AgentDef>,
    mut frame: Frame,
    split: Option<Split>,
    resumed: bool,
) -> Result<ToolOutcome, ToolError> {
    let runner = Arc::clone(&parent.runner);
    let agent_id = frame.agent_id.clone();
    let model = runner
        .router
        .resolve(frame.model.as_deref())
        .map_err(|e| failed(&agent_id, format!("its model: {e}")))?;
    // What the parent has left bounds a resumed frame too.
    let time = Duration::from_millis(frame.time_left_ms).min(
        parent
            .deadline
            .saturating_duration_since(tokio::time::Instant::now()),
    );
    let started = tokio::time::Instant::now();
    let mut ancestors = parent.frame.ancestors.clone();
    ancestors.push(parent.agent.agent_id.clone());
    let mut path = parent.frame.path.clone();
    path.push(frame.id.clone());
    // The parent's mode, or the sub-agent's own when that is stricter (an agent defined
    // readOnly stays read-only under a parent that may write).
    let mode = crate::policy::Mode::stricter(
        parent.mode,
        def.mode
            .as_deref()
            .and_then(|m| crate::policy::Mode::parse(m).ok()),
    );
    let ctx = Arc::new(RunCtx {
        sink: Arc::new(parent.sink.child(&agent_id, &frame.id)),
        workspace: workspace_for(&runner, &def),
        agent: def,
        session_id: parent.session_id.clone(),
        cancel: parent.cancel.child_token(),
        limits: parent.limits.clone(),
        model,
        model_alias: frame.model.clone(),
        max_steps: frame.steps_left,
        steps_used: AtomicU32::new(0),
        run_steps: Arc::clone(&parent.run_steps),
        deadline: started + time,
        frame: FrameInfo {
            id: frame.id.clone(),
            depth: parent.frame.depth + 1,
            ancestors,
            path,
        },
        orchestra: Arc::clone(&parent.orchestra),
        runner: Arc::clone(&runner),
        mode,
        confirmations: Arc::clone(&parent.confirmations),
    });
    ctx.sink
        .emit(Event::DelegationStart(v1::DelegationStart {
            call_id: call_id.to_owned(),
            agent_id: agent_id.clone(),
            task: frame.task.clone(),
            task_id: frame.task_id.clone(),
            resumed,
        }))
        .await;
    info!(session_id = %ctx.session_id, agent_id = %agent_id, frame_id = %frame.id, resumed, "sub-agent starting");
    // A resumed frame as it waited: what the executor's shutdown puts back (below).
    let waiting = resumed.then(|| frame.clone());
    let mut counts = Counts::default();
    let mut timed_out = false;
    let end = {
        let (messages, counts) = (&mut frame.messages, &mut counts);
        let allowed = frame.allowed_tools.clone();
        let run = async {
            let (tools, definitions) = select_tools(&runner, &ctx, allowed.as_deref()).await;
            agent_loop::run(&ctx, &tools, &definitions, messages, counts, split).await
        };
        tokio::pin!(run);
        let budget = tokio::time::sleep(time);
        tokio::pin!(budget);
        loop {
            tokio::select! {
                end = &mut run => break end,
                () = &mut budget, if !timed_out => {
                    timed_out = true;
                    ctx.cancel.cancel();
                }
            }
        }
    };
    parent.orchestra.add_usage(&counts);
    let end = match end {
        LoopEnd::Cancelled if timed_out => LoopEnd::Failed {
            code: "TIME_BUDGET_EXCEEDED",
            message: format!("the sub-agent did not finish within its {time:?} budget"),
        },
        other => other,
    };
    // The executor stops while answers resumed this frame (it was cut off, or paused because
    // a sub-agent of its own was): it waits on its questions again, as it was (a restart can
    // resume it), instead of failing its task. The answers are not applied; the run pauses on
    // them again. The top agent's run puts such a sub-agent back as the session stored it,
    // with the ones below it (`stopped`); the others that answers resumed keep what they did.
    if runner.shutdown.is_cancelled()
        && let Some(waiting) = waiting
        && (matches!(end, LoopEnd::Cancelled)
            || matches!(end, LoopEnd::Paused(_)) && parent.orchestra.interrupted_below(&frame.id))
    {
        parent.orchestra.interrupt(super::stopped::Interrupted {
            call_id: call_id.to_owned(),
            frame_id: waiting.id.clone(),
            parent: parent.frame.id.clone(),
        });
        return Ok(paused(&ctx, call_id, waiting).await);
    }
    match end {
        LoopEnd::Completed(text) => Ok(completed(&ctx, call_id, &frame, &text).await),
        LoopEnd::Paused(pending) => {
            frame.steps_left = frame.steps_left.saturating_sub(counts.steps);
            frame.time_left_ms = u64::try_from(time.saturating_sub(started.elapsed()).as_millis())
                .unwrap_or(u64::MAX);
            frame.pending = pending;
            Ok(paused(&ctx, call_id, frame).await)
        }
        LoopEnd::Failed { code, message } => {
            let error = json!({"code": code, "message": message});
            // Its own sub-agents' questions went with it.
            parent
                .orchestra
                .with(|o| o.end_waiting_below(&frame.id, &error));
            Ok(ended_badly(&ctx, call_id, &frame, error).await)
        }
        LoopEnd::Cancelled => {
            let error = json!({"code": "CANCELLED", "message": "the run was cancelled"});
            parent
                .orchestra
                .with(|o| o.end_waiting_below(&frame.id, &error));
            ended_badly(&ctx, call_id, &frame, error).await;
            Err(ToolError::Cancelled {
                tool: format!("{AGENT_TOOL_PREFIX}{agent_id}"),
            })
        }
    }
}

/// The structured result in a sub-agent's final answer: a JSON object with any of `result`,
/// `patch`, `new_facts`, `suggested_next_action` (also inside a ```json fence); else the text
/// is the result.
fn structured(text: &str) -> Map<String, Value> {
    let trimmed = text.trim();
    let body = trimmed
        .strip_prefix("```json")
        .or_else(|| trimmed.strip_prefix("```"))
        .and_then(|b| b.strip_suffix("```"))
        .unwrap_or(trimmed)
        .trim();
    if let Ok(Value::Object(map)) = serde_json::from_str::<Value>(body)
        && ["result", "patch", "new_facts", "suggested_next_action"]
            .iter()
            .any(|k| map.contains_key(*k))
    {
        return map;
    }
    let mut map = Map::new();
    map.insert("result".to_owned(), json!({"text": text}));
    map
}

/// A sub-agent answered: merge its patch and facts, complete its task, build the result.
async fn completed(ctx: &RunCtx, call_id: &str, frame: &Frame, text: &str) -> ToolOutcome {
    // Masked before it is read: the result, facts and patch that reach the plan, the stream
    // and the store are what the orchestrator's model sees.
    let mut out = structured(&ctx.runner.budgets.redactor.redact_keeping_ids(text));
    let result = out.remove("result").unwrap_or(Value::Null);
    let patch = out.remove("patch").filter(|p| !p.is_null());
    let facts = match out.remove("new_facts") {
        Some(Value::Object(facts)) => facts,
        _ => Map::new(),
    };
    let next = out.remove("suggested_next_action").unwrap_or(Value::Null);
    let patch_status = match &patch {
        Some(patch) => Some(merge(ctx, &frame.agent_id, patch).await),
        None => None,
    };
    let plan = ctx.orchestra.with(|o| {
        o.facts.extend(facts.clone());
        o.plan
            .set_status(&frame.task_id, TaskStatus::Completed, Some(result.clone()));
        o.plan.clone()
    });
    ctx.sink.emit(plan_updated(&plan)).await;
    let mut content = json!({
        "success": true,
        "agent": frame.agent_id,
        "task_id": frame.task_id,
        "result": result,
        "patch": patch,
        "new_facts": facts,
        "suggested_next_action": next,
    });
    if let (Some(content), Some(status)) = (content.as_object_mut(), patch_status) {
        content.insert("patch_status".to_owned(), status);
    }
    delegation_end(ctx, call_id, frame, "completed", &content).await;
    ToolOutcome::Output {
        content: content.to_string(),
        is_error: false,
    }
}

/// A sub-agent failed (or was cancelled): its task fails with the error as its result.
async fn ended_badly(ctx: &RunCtx, call_id: &str, frame: &Frame, error: Value) -> ToolOutcome {
    let plan = ctx.orchestra.with(|o| {
        o.plan.set_status(
            &frame.task_id,
            TaskStatus::Failed,
            Some(json!({"error": error})),
        );
        o.plan.clone()
    });
    ctx.sink.emit(plan_updated(&plan)).await;
    let content = json!({
        "success": false,
        "agent": frame.agent_id,
        "task_id": frame.task_id,
        "error": error,
    });
    delegation_end(ctx, call_id, frame, "failed", &content).await;
    ToolOutcome::Output {
        content: content.to_string(),
        is_error: true,
    }
}

/// A sub-agent needs answers: store its frame, hand its questions up with a token naming it.
async fn paused(ctx: &RunCtx, call_id: &str, frame: Frame) -> ToolOutcome {
    let token = ctx.runner.store.tokens().sign(&ctx.session_id, &frame.id);
    let tool = format!("{AGENT_TOOL_PREFIX}{}", frame.agent_id);
    let asks: Vec<Ask> = frame
        .pending
        .asks
        .iter()
        .filter(|a| a.answer.is_none())
        .map(|a| Ask {
            key: a.key.clone(),
            text: a.text.clone(),
            required: a.required,
            default: a.default.clone(),
            agent_path: a.agent_path.clone(),
            call_id: call_id.to_owned(),
            tool: tool.clone(),
            token: Some(token.clone()),
            task: frame.task.clone(),
            answer: None,
            asked_as: None,
        })
        .collect();
    let questions: Vec<Value> = asks
        .iter()
        .map(|a| json!({"key": a.key, "text": a.text, "required": a.required}))
        .collect();
    let defaults: Map<String, Value> = asks
        .iter()
        .filter_map(|a| a.default.clone().map(|d| (a.key.clone(), d)))
        .collect();
    let content = json!({
        "success": false,
        "agent": frame.agent_id,
        "task_id": frame.task_id,
        "need_user_input": {
            "questions": questions,
            "context": format!("`{}` needs answers to go on with: {}", frame.agent_id, frame.task),
            "proposed_defaults": defaults,
        },
        "state_token": token,
    });
    delegation_end(ctx, call_id, &frame, "need_user_input", &content).await;
    ctx.orchestra
        .with(|o| o.frames.insert(frame.id.clone(), frame));
    ToolOutcome::NeedInput {
        content: content.to_string(),
        asks,
    }
}

async fn delegation_end(ctx: &RunCtx, call_id: &str, frame: &Frame, status: &str, result: &Value) {
    ctx.sink
        .emit(Event::DelegationEnd(v1::DelegationEnd {
            call_id: call_id.to_owned(),
            agent_id: frame.agent_id.clone(),
            task_id: frame.task_id.clone(),
            status: status.to_owned(),
            result_json: result.to_string(),
        }))
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn final_answers_are_read_as_structured_results_when_they_are() {
        let s = structured("```json\n{\"result\": {\"ok\": 1}, \"new_facts\": {\"a\": 2}}\n```");
        assert_eq!(s["result"], json!({"ok": 1}));
        assert_eq!(s["new_facts"], json!({"a": 2}));
        let s = structured("All done, nothing to add.");
        assert_eq!(s["result"], json!({"text": "All done, nothing to add."}));
        let s = structured("{\"unrelated\": true}");
        assert_eq!(s["result"], json!({"text": "{\"unrelated\": true}"}));
    }
}
