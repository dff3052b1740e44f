//! Who may change what: owners, the orchestrator, and the unlink policies.

use serde_json::json;

use super::{apply, patch, sample};
use crate::plan::{ORCHESTRATOR, Plan, RejectReason, TaskStatus, UnlinkPolicy};

#[test]
fn sub_agent_cannot_update_a_task_it_does_not_own() {
    let mut plan = sample();
    let before = plan.clone();
    let err = apply(
        &mut plan,
        "reviewer",
        json!([{"op": "update", "task_id": "t1", "fields": {"status": "COMPLETED"}}]),
    )
    .expect_err("forbidden");
    assert_eq!(err.reason, RejectReason::Forbidden);
    assert!(err.message.starts_with("ops[0]: "), "{}", err.message);
    assert!(err.message.contains("`t1`"), "{}", err.message);
    assert!(err.message.contains("`orchestrator`"), "{}", err.message);
    assert_eq!(err.rejected_ops.len(), 1);
    assert_eq!(plan, before);
}

#[test]
fn owner_and_orchestrator_may_update() {
    let mut plan = sample();
    apply(
        &mut plan,
        "reviewer",
        json!([{"op": "update", "task_id": "t2", "fields": {
            "status": "IN_PROGRESS", "title": "  Review it  ", "tool": "git", "params": {"a": 1}
        }}]),
    )
    .expect("owner updates");
    apply(
        &mut plan,
        ORCHESTRATOR,
        json!([{"op": "update", "task_id": "t2.a", "fields": {"status": "FAILED"}}]),
    )
    .expect("orchestrator updates");
    let t2 = plan.task("t2").expect("t2");
    assert_eq!(t2.status, TaskStatus::InProgress);
    assert_eq!(t2.title, "Review it");
    assert_eq!(t2.tool.as_deref(), Some("git"));
    assert_eq!(t2.params, Some(json!({"a": 1})));
    assert_eq!(plan.task("t2.a").expect("t2.a").status, TaskStatus::Failed);
}

#[test]
fn add_makes_the_author_the_owner_unless_the_orchestrator_names_another() {
    let mut plan = Plan::default();
    apply(
        &mut plan,
        "coder",
        json!([{"op": "add", "task": {"id": "x", "title": "X"}}]),
    )
    .expect("adds");
    let x = plan.task("x").expect("x");
    assert_eq!(x.owner_agent, "coder");
    assert_eq!(x.status, TaskStatus::Pending);
    assert_eq!(x.parent_id, None);
    let err = apply(
        &mut plan,
        "coder",
        json!([{"op": "add", "task": {"id": "y", "title": "Y", "owner_agent": "orchestrator"}}]),
    )
    .expect_err("a sub-agent cannot plan for the orchestrator");
    assert_eq!(err.reason, RejectReason::Forbidden);
    assert!(plan.task("y").is_none());
}

#[test]
fn add_subtask_under_foreign_parent_is_forbidden() {
    let mut plan = sample();
    let before = plan.clone();
    let err = apply(
        &mut plan,
        "reviewer",
        json!([{"op": "add_subtask", "parent_id": "t1", "task": {"id": "t1.a", "title": "A"}}]),
    )
    .expect_err("forbidden");
    assert_eq!(err.reason, RejectReason::Forbidden);
    assert!(err.message.starts_with("ops[0]: "), "{}", err.message);
    assert_eq!(plan, before);
}

#[test]
fn add_subtask_is_owned_by_its_author_and_points_at_its_parent() {
    let mut plan = sample();
    apply(
        &mut plan,
        ORCHESTRATOR,
        json!([{"op": "add_subtask", "parent_id": "t2", "task": {"id": "t2.b", "title": "B"}}]),
    )
    .expect("orchestrator may add under any task");
    let b = plan.task("t2.b").expect("t2.b");
    assert_eq!(b.owner_agent, ORCHESTRATOR);
    assert_eq!(b.parent_id.as_deref(), Some("t2"));
    let a = plan.task("t2.a").expect("t2.a");
    assert_eq!(a.owner_agent, "reviewer");
    assert_eq!(a.parent_id.as_deref(), Some("t2"));
}

#[test]
fn link_dep_across_owners_is_allowed_and_idempotent() {
    let mut plan = sample();
    apply(
        &mut plan,
        "coder",
        json!([{"op": "add", "task": {"id": "c", "title": "Code"}}]),
    )
    .expect("adds");
    for _ in 0..2 {
        apply(
            &mut plan,
            "coder",
            json!([{"op": "link_dep", "task_id": "t2", "dep_id": "c"}]),
        )
        .expect("links");
    }
    assert_eq!(plan.task("t2").expect("t2").depends_on, ["t1", "c"]);
}

#[test]
fn unlink_by_non_owner_is_refused_by_default_policy() {
    let mut plan = sample();
    let before = plan.clone();
    let unlink = json!([{"op": "unlink_dep", "task_id": "t2", "dep_id": "t1"}]);
    let err = apply(&mut plan, "coder", unlink.clone()).expect_err("forbidden");
    assert_eq!(err.reason, RejectReason::Forbidden);
    assert!(err.message.contains("`reviewer`"), "{}", err.message);
    assert_eq!(plan, before);
    apply(&mut plan, "reviewer", unlink).expect("the dependent's owner may");
    assert!(plan.task("t2").expect("t2").depends_on.is_empty());
}

#[test]
fn unlink_policies_decide_who_may_unlink() {
    let unlink = patch(json!([{"op": "unlink_dep", "task_id": "t2", "dep_id": "t1"}]));
    let mut plan = sample();
    plan.apply("coder", &unlink, UnlinkPolicy::AnyAuthor)
        .expect("anyone may");

    let mut plan = sample();
    let err = plan
        .apply("reviewer", &unlink, UnlinkPolicy::OrchestratorOnly)
        .expect_err("even the owner may not");
    assert_eq!(err.reason, RejectReason::Forbidden);
    plan.apply(ORCHESTRATOR, &unlink, UnlinkPolicy::OrchestratorOnly)
        .expect("the orchestrator may");
}

#[test]
fn update_depends_on_cannot_sidestep_the_unlink_policy() {
    let mut plan = sample();
    let drop_deps = patch(json!([
        {"op": "update", "task_id": "t2", "fields": {"depends_on": []}}
    ]));
    let err = plan
        .apply("reviewer", &drop_deps, UnlinkPolicy::OrchestratorOnly)
        .expect_err("forbidden");
    assert_eq!(err.reason, RejectReason::Forbidden);
    plan.apply("reviewer", &drop_deps, UnlinkPolicy::DependentOwner)
        .expect("the owner may under the default");
}

#[test]
fn only_the_orchestrator_creates_tasks_for_another_agent() {
    let mut plan = sample();
    apply(
        &mut plan,
        ORCHESTRATOR,
        json!([{"op": "add", "task": {"id": "WS-1", "title": "Scaffold", "owner_agent": "scaffold"}}]),
    )
    .expect("the orchestrator plans for a sub-agent");
    assert_eq!(plan.task("WS-1").expect("WS-1").owner_agent, "scaffold");
    apply(
        &mut plan,
        "scaffold",
        json!([{"op": "update", "task_id": "WS-1", "fields": {"status": "IN_PROGRESS"}}]),
    )
    .expect("its owner updates it");
    let before = plan.clone();
    let err = apply(
        &mut plan,
        "reviewer",
        json!([{"op": "add", "task": {"id": "x", "title": "X", "owner_agent": "scaffold"}}]),
    )
    .expect_err("not for another");
    assert_eq!(err.reason, RejectReason::Forbidden);
    assert!(err.message.contains("only for itself"), "{}", err.message);
    let err = apply(
        &mut plan,
        ORCHESTRATOR,
        json!([{"op": "add", "task": {"id": "x", "title": "X", "owner_agent": "Not An Id"}}]),
    )
    .expect_err("bad owner");
    assert_eq!(err.reason, RejectReason::Invalid);
    assert!(
        err.message.contains("owner_agent `Not An Id`"),
        "{}",
        err.message
    );
    assert_eq!(plan, before);
    apply(
        &mut plan,
        "reviewer",
        json!([{"op": "add", "task": {"id": "mine", "title": "Mine", "owner_agent": "reviewer"}}]),
    )
    .expect("naming itself is fine");
}
