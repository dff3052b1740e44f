//! One run from start to its closing events: the wall-clock budget, a client that leaves, the
//! BUSY/IDLE lease, storing the session, and the last events (answer, question, error, `Done`).

use std::{
    sync::{Arc, atomic::AtomicU32},
    time::Instant,
};

use futures::future::{BoxFuture, join_all};
use serde_json::json;
use taskforce_proto::v1::{self, run_event::Event};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::{
    FrameInfo, Orchestra, RunCtx, Runner,
    agent_loop::{self, Conversation, Counts, LoopEnd},
    answers::{self, Split},
    calls::Tools,
    events::{self, Sink},
    stopped,
};
use crate::{
    agent::AgentDef,
    llm::{ResolvedModel, ToolDefinition},
    session::{RunError, Session, Status, question_items},
    tools::{Tool, orchestration},
};

/// A run ready to be driven.
#[derive(Debug)]
pub(super) struct Run {
    pub(super) runner: Arc<Runner>,
    pub(super) session: Session,
    pub(super) agent: Arc<AgentDef>,
    pub(super) model: ResolvedModel,
    pub(super) sink: Arc<Sink>,
    pub(super) cancel: CancellationToken,
    /// The answer that resumes a paused run, announced as the question's `ToolEnd`.
    pub(super) answered: Option<Event>,
    /// Answers to sub-agents' questions, applied before the first model call.
    pub(super) resume: Option<Split>,
    /// Confirmation ids of `safeWrite` calls the user approved with this request.
    pub(super) confirmations: std::collections::HashSet<String>,
    /// Plain LLM: the run offers no tools.
    pub(super) no_tools: bool,
}

impl Conversation for Session {
    fn messages(&mut self) -> &mut Vec<crate::llm::Message> {
        &mut self.messages
    }

    fn checkpoint<'a>(&'a mut self, ctx: &'a RunCtx) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            self.orchestration = ctx.orchestra.snapshot();
            // The answers' results are in the conversation now.
            self.answering = None;
            if let Err(e) = ctx.runner.store.save(self, false).await {
                warn!(session_id = %self.id, error = %e, "cannot store the session");
            }
        })
    }
}

impl Run {
    /// Drives the run to its end; reports BUSY while it runs and IDLE after.
    pub(super) async fn drive(self) {
        let done = CancellationToken::new();
        let registry = self.runner.registry.clone();
        let agent_id = self.agent.agent_id.clone();
        let mission = self.session.mission.clone();
        let lease = registry.hold_busy(&agent_id, &mission, done.clone());
        let work = async {
            self.work().await;
            done.cancel();
        };
        tokio::join!(work, lease);
    }

    async fn work(mut self) {
        let started = Instant::now();
        let runner = Arc::clone(&self.runner);
        let sink = Arc::clone(&self.sink);
        sink.emit(Event::RunStarted(v1::RunStarted {
            agent_id: self.agent.agent_id.clone(),
            model: self.model.model.clone(),
            provider: self.model.provider.name().to_owned(),
        }))
        .await;
        // Let the stream send it now: the client's first event should not wait for a model
        // that answers without yielding (a local or scripted one) to finish its turn.
        tokio::task::yield_now().await;
        let model_alias = self
            .session
            .model
            .clone()
            .or_else(|| self.agent.model.clone());
        let orchestra = Arc::new(Orchestra::new(std::mem::take(
            &mut self.session.orchestration,
        )));
        let ctx = Arc::new(RunCtx {
            sink: Arc::clone(&self.sink),
            workspace: workspace_for(&runner, &self.agent),
            agent: Arc::clone(&self.agent),
            session_id: self.session.id.clone(),
            cancel: self.cancel.clone(),
            limits: runner.budgets.tool_limits.clone(),
            model: self.model.clone(),
            model_alias,
            max_steps: runner.budgets.max_steps,
            steps_used: AtomicU32::new(0),
            run_steps: Arc::default(),
            deadline: tokio::time::Instant::now() + runner.budgets.max_duration,
            frame: FrameInfo::default(),
            orchestra: Arc::clone(&orchestra),
            runner: Arc::clone(&runner),
            // The request's (kept with the session), else the agent's default.
            mode: self
                .session
                .mode
                .as_deref()
                .or(self.agent.mode.as_deref())
                .and_then(|m| crate::policy::Mode::parse(m).ok()),
            confirmations: Arc::new(std::sync::Mutex::new(super::Confirmations {
                granted: std::mem::take(&mut self.confirmations),
                issued: std::mem::take(&mut self.session.confirmations_issued),
                used: std::mem::take(&mut self.session.confirmations_used),
            })),
        });
        // `launch` stored the session as running before the stream was returned.
        if let Some(answered) = self.answered.take() {
            sink.emit(answered).await;
        }

        let in_flight = crate::metrics::RunInFlight::start();
        let mut counts = Counts::default();
        let mut timed_out = false;
        // The client left before anything else stopped the run (not after a cancel it asked
        // for, as a UI's "stop" that then closes the stream).
        let mut client_left = false;
        let end = {
            let (session, counts) = (&mut self.session, &mut counts);
            let resume = self.resume.take();
            let no_tools = self.no_tools;
            let run = async {
                // Inside the raced future: a departed client or the budget also stops a slow
                // MCP connection.
                let (tools, definitions) = if no_tools {
                    (Tools::new(), Vec::new())
                } else {
                    select_tools(&runner, &ctx, None).await
                };
                agent_loop::run(&ctx, &tools, &definitions, session, counts, resume).await
            };
            // A bug that panics in a run ends that run as failed, stored and released, not with
            // its session left `running` (and refusing every later call) until a restart.
            let run = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(run));
            let run = futures::FutureExt::map(run, |ended| {
                ended.unwrap_or_else(|_| {
                    tracing::error!("the run panicked; it is ended as failed");
                    LoopEnd::Failed {
                        code: "INTERNAL",
                        message: "the run failed on an internal error; see the executor log"
                            .to_owned(),
                    }
                })
            });
            tokio::pin!(run);
            let budget = tokio::time::sleep(runner.budgets.max_duration);
            tokio::pin!(budget);
            let mut client_gone = false;
            // The loop always ends soon after the cancellation fires (tools get a short grace),
            // so the budget and a departed client only cancel, and the loop says how it ended.
            loop {
                tokio::select! {
                    end = &mut run => break end,
                    () = &mut budget, if !timed_out => {
                        timed_out = true;
                        self.cancel.cancel();
                    }
                    () = sink.closed(), if !client_gone => {
                        client_gone = true;
                        client_left = !self.cancel.is_cancelled();
                        info!(session_id = %ctx.session_id, "client left; cancelling the run");
                        self.cancel.cancel();
                    }
                }
            }
        };
        let end = match end {
            LoopEnd::Cancelled if timed_out => LoopEnd::Failed {
                code: "TIME_BUDGET_EXCEEDED",
                message: format!(
                    "the run did not finish within its {:?} budget",
                    runner.budgets.max_duration
                ),
            },
            other => other,
        };
        // Sub-agents' model calls and tokens count as the run's.
        let sub = orchestra.usage();
        counts.input_tokens = counts.input_tokens.saturating_add(sub.input_tokens);
        counts.output_tokens = counts.output_tokens.saturating_add(sub.output_tokens);
        counts.steps += sub.steps;
        counts.tool_calls += sub.tool_calls;
        self.session.orchestration = orchestra.snapshot();
        {
            let mut books = ctx
                .confirmations
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            self.session.confirmations_issued = std::mem::take(&mut books.issued);
            self.session.confirmations_used = std::mem::take(&mut books.used);
        }
        let interrupted = orchestra.take_interrupted();
        self.finish(end, counts, started, &interrupted, client_left)
            .await;
        drop(in_flight);
    }

    /// Stores the outcome, frees the session, then sends the closing events.
    async fn finish(
        mut self,
        end: LoopEnd,
        counts: Counts,
        started: Instant,
        interrupted: &[stopped::Interrupted],
        client_left: bool,
    ) {
        let runner = Arc::clone(&self.runner);
        // The end is decided: a cancel from now on waits for it instead. One answered `true`
        // before (possibly after the loop had just ended otherwise) is kept: the run ends
        // cancelled, as its client was told, unless it failed or the executor is stopping.
        let mut end = end;
        if runner.set_running(&self.session.id, false)
            && matches!(end, LoopEnd::Completed(_) | LoopEnd::Paused(_))
            && !runner.shutdown.is_cancelled()
        {
            end = LoopEnd::Cancelled;
        }
        // A shutdown stopped the run while it applied answers to sub-agents' questions: the
        // session goes back to that question as it was stored when this run started (no
        // checkpoint has replaced it while `answering` is set), keeping what finished: the
        // answers to the agent's own questions and the sub-agents that got to their end. The
        // ones the stop interrupted wait as they were (see `run_frame`), their answers not in
        // the history.
        let mut restored = None;
        if matches!(end, LoopEnd::Cancelled | LoopEnd::Paused(_))
            && runner.shutdown.is_cancelled()
            && self.cancel.is_cancelled()
            && self.session.answering.is_some()
        {
            match runner.store.get(&self.session.id) {
                Ok(Some(stored)) if stored.answering.is_some() => {
                    let ran = std::mem::replace(&mut self.session, stored);
                    // Confirmations this run used stay used: their calls ran.
                    self.session.confirmations_issued = ran.confirmations_issued.clone();
                    self.session.confirmations_used = ran.confirmations_used.clone();
                    let paused = match &end {
                        LoopEnd::Paused(pending) => Some(pending.asks.as_slice()),
                        _ => None,
                    };
                    let kept = stopped::keep_finished(&mut self.session, ran, paused, interrupted);
                    let any_kept = kept.is_some();
                    let pending = match kept {
                        Some(asks) => Some(answers::pending(asks)),
                        None => self.session.answering.take(),
                    };
                    if let Some(pending) = pending {
                        end = LoopEnd::Paused(pending);
                        restored = Some(any_kept);
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    warn!(session_id = %self.session.id, error = %e, "cannot read the session back to restore its question");
                }
            }
        }
        self.session.answering = None;
        // A run that failed or was cancelled (not by the executor's stop) leaves no sub-agent
        // waiting on a question: their tasks fail, as for a cancelled question.
        if matches!(end, LoopEnd::Failed { .. } | LoopEnd::Cancelled)
            && !runner.shutdown.is_cancelled()
        {
            let error = match &end {
                LoopEnd::Failed { code, message } => json!({"code": code, "message": message}),
                _ => json!({"code": "CANCELLED", "message": "the run was cancelled"}),
            };
            self.session.orchestration.end_waiting(&error);
        }
        // `launch` cleared the last run's `error`: only a failure or a cancel sets it here.
        let session = &mut self.session;
        let (status, closing) = match end {
            LoopEnd::Completed(text) => {
                session.final_answer.clone_from(&text);
                let event = Event::FinalAnswer(v1::FinalAnswer { text });
                (Status::Completed, vec![event])
            }
            LoopEnd::Paused(pending) => {
                let event = Event::Question(v1::Question {
                    call_id: pending.call_id.clone(),
                    question: pending.question.clone(),
                    items: question_items(&pending),
                });
                session.pending = Some(pending);
                // Put back on the question it was answering (above): say why it asks again.
                if let Some(kept) = restored {
                    let why = if kept {
                        "the executor is shutting down: the sub-agents still working stopped and \
                         wait on their questions again, those answers not applied (answer them \
                         once the executor is back); the answers and sub-agents that finished \
                         before the stop are kept"
                    } else {
                        "the executor is shutting down: the sub-agents stopped and wait on their \
                         questions again, the answers not applied (answer once the executor is \
                         back)"
                    };
                    session.error = RunError::new("EXECUTOR_STOPPING", why);
                    let warning = events::warning("EXECUTOR_STOPPING", why.to_owned());
                    (Status::Paused, vec![warning, event])
                } else {
                    (Status::Paused, vec![event])
                }
            }
            LoopEnd::Failed { code, message } => {
                agent_loop::close_open_calls(&mut session.messages, "the run failed");
                warn!(session_id = %session.id, code, error = %message, "run failed");
                // This runs in the run's span (its task is instrumented with it).
                taskforce_runtime::telemetry::fail_span(
                    &tracing::Span::current(),
                    &format!("{code}: {message}"),
                );
                session.error = RunError::new(code, message.clone());
                let event = Event::Error(v1::Error {
                    code: code.to_owned(),
                    message,
                });
                (Status::Failed, vec![event])
            }
            LoopEnd::Cancelled => {
                agent_loop::close_open_calls(&mut session.messages, "the run was cancelled");
                // Nobody asked for this cancellation: say why, so it does not read as the
                // user's.
                let stopping = runner.shutdown.is_cancelled().then_some(
                    "the executor is shutting down; the run was stopped (continue the session \
                     once it is back)",
                );
                session.error = match stopping {
                    Some(why) => RunError::new("EXECUTOR_STOPPING", why),
                    None if self.sink.client_too_slow() => RunError::new(
                        "CLIENT_TOO_SLOW",
                        "the client stopped reading the run's events (none taken for 30 s), so \
                         the run was stopped; continue the session to go on",
                    ),
                    None if client_left => RunError::new(
                        "CLIENT_GONE",
                        "the client disconnected before the run ended (or its gateway stopped), \
                         so the run was stopped; continue the session to go on",
                    ),
                    None => RunError::new("CANCELLED", "the run was cancelled"),
                };
                let stopping =
                    stopping.map(|why| events::warning("EXECUTOR_STOPPING", why.to_owned()));
                (Status::Cancelled, stopping.into_iter().collect())
            }
        };
        session.status = status;
        // Every event still to come: the closing ones and `Done`.
        session.next_seq =
            self.sink.next_seq().await + 1 + u64::try_from(closing.len()).unwrap_or(u64::MAX);
        session.seq_reserved = 0;
        // On disk before the client hears how the run ended (`done`, the ExecuteResult): a
        // crash right after must not turn a completed run into a failed one. Concurrent runs
        // share one flush (the store's group commit). A run whose end could not be stored
        // did not end as it would say: it failed, and says why.
        let (status, closing) = match runner.store.save(session, true).await {
            Ok(()) => (status, closing),
            Err(e) => {
                warn!(session_id = %session.id, error = %e, "cannot store the session");
                let message = format!(
                    "the session could not be stored ({e}), so this run's outcome is lost; the \
                     executor needs space on its --data-dir and a restart"
                );
                session.status = Status::Failed;
                session.error = RunError::new("STORE_FAILED", message.clone());
                runner.store.keep_unsaved(session);
                let event = Event::Error(v1::Error {
                    code: "STORE_FAILED".to_owned(),
                    message,
                });
                (Status::Failed, vec![event])
            }
        };
        crate::metrics::run_ended(status.as_str());
        if let Ok(mut live) = runner.live.lock() {
            live.remove(&session.id);
        }
        for event in closing {
            self.sink.emit(event).await;
        }
        let usage = v1::Usage {
            input_tokens: counts.input_tokens,
            output_tokens: counts.output_tokens,
            steps: counts.steps,
            tool_calls: counts.tool_calls,
        };
        self.sink
            .emit(Event::Done(v1::Done {
                status: status.to_proto() as i32,
                usage: Some(usage),
            }))
            .await;
        info!(
            session_id = %session.id,
            agent_id = %self.agent.agent_id,
            model = %self.model.model,
            status = ?status,
            steps = counts.steps,
            tool_calls = counts.tool_calls,
            elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            "run ended"
        );
    }
}

/// Where an agent's tools work: its definition's workspace as the registry resolved it, else
/// `<workspaces>/<agent_id>`. Created by the first tool that works in it.
pub(super) fn workspace_for(runner: &Runner, agent: &AgentDef) -> crate::tools::Workspace {
    let own = runner.budgets.workspaces.join(&agent.agent_id);
    let path = agent.workspace.clone().unwrap_or_else(|| own.clone());
    crate::tools::Workspace::new(path).hiding(runner.budgets.hidden.clone(), own)
}

/// The frame's tools: the native tools of its allowlist the executor has (others are skipped,
/// logged), the orchestration tools (a tool `agent_<id>` per sub-agent, `delegate_to_agent`
/// and, for the top agent, `update_todolist`, when allowlisted), then the allowed tools of its
/// MCP servers. `allowed` (a delegation's `allowed_tools`) narrows all of them. A server that
/// cannot be reached is left out with a warning event; the run goes on with the other tools.
pub(super) async fn select_tools(
    runner: &Runner,
    ctx: &RunCtx,
    allowed: Option<&[String]>,
) -> (Tools, Vec<ToolDefinition>) {
    let agent = &ctx.agent;
    let permitted = |name: &str| allowed.is_none_or(|a| a.iter().any(|n| n == name));
    let mut tools = Tools::new();
    let mut definitions = Vec::new();
    // False when the name is taken already: the first tool of a name is offered.
    let mut offer = |tool: &Arc<dyn Tool>, tools: &mut Tools| {
        if !permitted(tool.name()) {
            return true;
        }
        if tools.contains_key(tool.name()) {
            warn!(agent_id = %agent.agent_id, tool = %tool.name(), "two tools share this name; the first is offered");
            return false;
        }
        definitions.push(tool.definition().clone());
        tools.insert(tool.name().to_owned(), Arc::clone(tool));
        true
    };
    // Past the hop limit every delegation is refused: none is offered (a wasted model call).
    let may_delegate =
        !agent.subagents.is_empty() && ctx.frame.depth < runner.budgets.delegation.max_hops;
    for name in &agent.tools {
        let orchestration: Option<Arc<dyn Tool>> = match name.as_str() {
            "delegate_to_agent" if may_delegate => {
                Some(Arc::new(orchestration::Delegate::by_name()))
            }
            "update_todolist" if ctx.frame.depth == 0 => {
                Some(Arc::new(orchestration::UpdateTodolist::new()))
            }
            _ => None,
        };
        if let Some(tool) = orchestration {
            offer(&tool, &mut tools);
            continue;
        }
        if taskforce_proto::catalog::is_orchestration_tool(name) {
            continue;
        }
        match runner.tools.get(name) {
            Some(tool) if tool.available() => {
                offer(tool, &mut tools);
            }
            Some(_) => {
                tracing::debug!(agent_id = %agent.agent_id, tool = %name, "the tool's program is not installed in this executor; not offered")
            }
            None => {
                warn!(agent_id = %agent.agent_id, tool = %name, "tool not available in this executor; not offered")
            }
        }
    }
    if may_delegate {
        let subs = join_all(agent.subagents.iter().map(|id| async move {
            let target = crate::registry::Target::Agent(id.clone());
            runner.registry.resolve(&target).await
        }))
        .await;
        for (id, def) in agent.subagents.iter().zip(subs) {
            // An agent that cannot be loaded now is still offered: calling it says why.
            let description = def.map(|d| d.description.clone()).unwrap_or_default();
            let tool: Arc<dyn Tool> = Arc::new(orchestration::Delegate::agent(id, &description));
            offer(&tool, &mut tools);
        }
    }
    if agent.mcp_tools.as_ref().is_some_and(Vec::is_empty) {
        return (tools, definitions);
    }
    let mut servers = Vec::with_capacity(agent.mcp_servers.len());
    for config in &agent.mcp_servers {
        if config.r#type != "global" {
            servers.push(runner.mcp.server(config));
            continue;
        }
        match runner.mcp.global().get(&config.name) {
            Some(server) => servers.push(server),
            None => {
                let configured = runner.mcp.global().names();
                let message = format!(
                    "global MCP server `{}` is not configured in this executor (configured: {}); \
                     its tools are not offered in this run",
                    config.name,
                    if configured.is_empty() {
                        "none; AGENT_ENABLE=0 turns them all off".to_owned()
                    } else {
                        configured.join(", ")
                    }
                );
                warn!(agent_id = %agent.agent_id, server = %config.name, "{message}");
                ctx.sink
                    .emit(events::warning("MCP_SERVER_UNAVAILABLE", message))
                    .await;
            }
        }
    }
    let allowed = agent.mcp_tools.as_deref();
    let found = tokio::select! {
        found = join_all(servers.iter().map(|s| s.tools(allowed))) => found,
        // The loop notices the cancellation at once.
        () = ctx.cancel.cancelled() => return (tools, definitions),
    };
    for (server, found) in servers.iter().zip(found) {
        match found {
            Ok(server_tools) => {
                for tool in &server_tools {
                    if !offer(tool, &mut tools) {
                        let message = format!(
                            "MCP server `{}` has a tool `{}`, the name of a tool this agent has \
                             already (native, a sub-agent's or another MCP server's); it is not \
                             offered in this run (rename it on the server, or take it out of \
                             mcp_tool_allowlist)",
                            server.label(),
                            tool.name()
                        );
                        ctx.sink
                            .emit(events::warning("MCP_TOOL_NAME_TAKEN", message))
                            .await;
                    }
                }
            }
            Err(e) => {
                warn!(agent_id = %agent.agent_id, server = %server.label(), error = %e, "MCP server unavailable; its tools are not offered in this run");
                let message = format!(
                    "MCP server `{}` is unavailable ({e}); its tools are not offered in this \
                     run, and it is tried again on the next run",
                    server.label()
                );
                ctx.sink
                    .emit(events::warning("MCP_SERVER_UNAVAILABLE", message))
                    .await;
            }
        }
    }
    (tools, definitions)
}
