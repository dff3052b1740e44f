//! Plan merges: a patch of the orchestrator (`update_todolist`) or of a sub-agent (its result's
//! `patch`) goes into the session's plan whole or not at all, serialised by the run's lock;
//! every merge and refusal is an event, and the model reads how it went.

use serde_json::{Value, json};
use taskforce_proto::v1::{self, run_event::Event};

use super::RunCtx;
use crate::{
    plan::{ORCHESTRATOR, Op, Patch, RejectReason, Rejection},
    session::plan_to_proto,
    tools::{ToolError, ToolOutcome, orchestration::find_subagent},
};

/// Merges a sub-agent's (`author`'s) patch (JSON) into the plan and says how it went, for the
/// model: applied with the new version, or the seed's 409 conflict / refusal with the current
/// version and the rejected ops. A sub-agent's patch must name the version it was made from
/// (`base_version`): without one it could overwrite what a sibling merged meanwhile, so it is a
/// conflict like a stale one.
pub(super) async fn merge(ctx: &RunCtx, author: &str, patch: &Value) -> Value {
    let parsed = match Patch::from_json(patch) {
        Ok(parsed) => parsed,
        Err(message) => return invalid(ctx, author, patch, message).await,
    };
    if parsed.base_version.is_none() {
        let version = ctx.orchestra.with(|o| o.plan.version);
        let rejection = Rejection {
            reason: RejectReason::Conflict,
            message: format!(
                "the patch names no base_version: a sub-agent's patch names the plan version it \
                 was made from; the plan is at version {version}: read it and resend the patch \
                 with base_version {version}"
            ),
            current_version: version,
            rejected_ops: parsed.ops_json(),
        };
        return refused(ctx, author, &rejection).await;
    }
    merge_parsed(ctx, author, &parsed).await
}

/// Refuses `patch` as invalid (`message` says why): every op of it rejected.
async fn invalid(ctx: &RunCtx, author: &str, patch: &Value, message: String) -> Value {
    let rejected_ops = match patch.get("ops").unwrap_or(patch) {
        Value::Array(ops) => ops.clone(),
        _ => Vec::new(),
    };
    let rejection = Rejection {
        reason: RejectReason::Invalid,
        message,
        current_version: ctx.orchestra.with(|o| o.plan.version),
        rejected_ops,
    };
    refused(ctx, author, &rejection).await
}

/// [`merge`] of a patch already parsed.
async fn merge_parsed(ctx: &RunCtx, author: &str, parsed: &Patch) -> Value {
    let merged = ctx.orchestra.with(|o| {
        let before: std::collections::HashSet<String> =
            o.plan.tasks.iter().map(|t| t.id.clone()).collect();
        let version = o
            .plan
            .apply(author, parsed, ctx.runner.budgets.delegation.unlink)?;
        for task in o.plan.tasks.iter().filter(|t| !before.contains(&t.id)) {
            o.created.insert(task.id.clone(), ctx.frame.path.clone());
        }
        Ok((version, o.plan.clone()))
    });
    match merged {
        Ok((version, plan)) => {
            let ops: Vec<Value> = parsed.ops.iter().map(|op| op.to_json()).collect();
            ctx.sink
                .emit(Event::PatchApplied(v1::PatchApplied {
                    author: author.to_owned(),
                    version,
                    ops_json: Value::Array(ops).to_string(),
                }))
                .await;
            ctx.sink.emit(plan_updated(&plan)).await;
            json!({"applied": true, "version": version, "plan_markdown": plan.render_markdown()})
        }
        Err(rejection) => refused(ctx, author, &rejection).await,
    }
}

/// A refused patch: its `patch_rejected` event, and what the model reads (`applied: false`,
/// the reason, its status, the current version and the rejected ops).
async fn refused(ctx: &RunCtx, author: &str, rejection: &Rejection) -> Value {
    ctx.sink.emit(rejected(author, rejection)).await;
    let mut body = serde_json::to_value(rejection).unwrap_or(Value::Null);
    if let Some(body) = body.as_object_mut() {
        body.insert("applied".to_owned(), Value::Bool(false));
        body.insert("status".to_owned(), json!(status_of(rejection)));
    }
    body
}

/// The HTTP-like status the seed names for a refused patch.
fn status_of(rejection: &Rejection) -> u16 {
    match rejection.reason {
        RejectReason::Conflict => 409,
        RejectReason::Forbidden => 403,
        RejectReason::Invalid => 422,
    }
}

fn rejected(author: &str, rejection: &Rejection) -> Event {
    Event::PatchRejected(v1::PatchRejected {
        author: author.to_owned(),
        reason: rejection.reason.as_str().to_owned(),
        message: rejection.message.clone(),
        current_version: rejection.current_version,
        rejected_ops_json: Value::Array(rejection.rejected_ops.clone()).to_string(),
    })
}

/// A `PlanUpdated` event.
pub(super) fn plan_updated(plan: &crate::plan::Plan) -> Event {
    Event::PlanUpdated(v1::PlanUpdated {
        plan: Some(plan_to_proto(plan)),
    })
}

/// `update_todolist`: the orchestrator's own patch.
pub(super) async fn update_plan(ctx: &RunCtx, arguments: Value) -> Result<ToolOutcome, ToolError> {
    if ctx.frame.depth > 0 {
        return Err(ToolError::Unavailable {
            tool: "update_todolist".to_owned(),
            reason: "sub-agents propose plan changes as the `patch` of their final result"
                .to_owned(),
        });
    }
    // Refused patches have one shape, a bad one's as a conflict's (`patch_rejected`, 422).
    let status = match Patch::from_json(&arguments) {
        Err(message) => invalid(ctx, ORCHESTRATOR, &arguments, message).await,
        Ok(mut patch) => match name_owners(&mut patch, &ctx.agent.subagents) {
            Some(why) => invalid(ctx, ORCHESTRATOR, &arguments, why).await,
            None => merge_parsed(ctx, ORCHESTRATOR, &patch).await,
        },
    };
    let applied = status["applied"].as_bool().unwrap_or(false);
    Ok(ToolOutcome::Output {
        content: status.to_string(),
        is_error: !applied,
    })
}

/// Names the owners of `patch`'s new tasks by agent id: a sub-agent named as its tool
/// (`agent_scaffold`, as seed §10 writes owners) becomes its id. Why `patch` gives a new task
/// to an agent that is neither the orchestrator nor one of its `subagents` (a slip no
/// delegation could ever pick up), if it does.
fn name_owners(patch: &mut Patch, subagents: &[String]) -> Option<String> {
    patch.ops.iter_mut().enumerate().find_map(|(i, op)| {
        let (Op::Add { task } | Op::AddSubtask { task, .. }) = op else {
            return None;
        };
        let owner = task.owner_agent.as_deref()?;
        if owner == ORCHESTRATOR || subagents.iter().any(|s| s == owner) {
            return None;
        }
        if let Some(id) = find_subagent(subagents, owner) {
            task.owner_agent = Some(id.clone());
            return None;
        }
        Some(format!(
            "ops[{i}].task.owner_agent: `{owner}` is neither `{ORCHESTRATOR}` nor a sub-agent of \
             this agent ({})",
            if subagents.is_empty() {
                "it has none".to_owned()
            } else {
                subagents.join(", ")
            }
        ))
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::name_owners;
    use crate::plan::{Op, Patch};

    #[test]
    fn a_planned_task_goes_only_to_the_orchestrator_or_a_sub_agent() {
        let subs = vec!["scaffold".to_owned(), "ci".to_owned()];
        let patch = |owner: &str| {
            Patch::from_json(&json!({"ops": [
                {"op": "add", "task": {"id": "a", "title": "A"}},
                {"op": "add", "task": {"id": "b", "title": "B", "owner_agent": owner}},
            ]}))
            .expect("patch")
        };
        let unknown_owner = |owner: &str, subs: &[String]| name_owners(&mut patch(owner), subs);
        assert_eq!(unknown_owner("scaffold", &subs), None);
        assert_eq!(unknown_owner("orchestrator", &subs), None);
        let why = unknown_owner("scafold", &subs).expect("a typo");
        assert!(
            why.starts_with("ops[1].task.owner_agent: `scafold`") && why.contains("scaffold, ci"),
            "{why}"
        );
        assert!(
            unknown_owner("x", &[])
                .expect("none")
                .contains("it has none")
        );
        // The sub-agent named as its tool (seed §10) is the sub-agent, stored by its id.
        let mut by_tool = patch("agent_scaffold");
        assert_eq!(name_owners(&mut by_tool, &subs), None);
        let Op::Add { task } = &by_tool.ops[1] else {
            panic!("an add: {by_tool:?}");
        };
        assert_eq!(task.owner_agent.as_deref(), Some("scaffold"));
    }
}
