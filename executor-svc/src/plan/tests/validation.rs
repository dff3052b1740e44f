//! Ops that would break the plan are refused, and the invariants name what is wrong.

use serde_json::{Value, json};

use super::{apply, sample};
use crate::plan::{MAX_OPS, MAX_TASKS, ORCHESTRATOR, Plan, RejectReason};

#[test]
fn empty_update_is_invalid() {
    let mut plan = sample();
    let err = apply(
        &mut plan,
        ORCHESTRATOR,
        json!([{"op": "update", "task_id": "t1", "fields": {}}]),
    )
    .expect_err("invalid");
    assert_eq!(err.reason, RejectReason::Invalid);
    assert!(err.message.contains("no field"), "{}", err.message);
}

#[test]
fn add_subtask_under_unknown_parent_is_invalid() {
    let mut plan = sample();
    let err = apply(
        &mut plan,
        ORCHESTRATOR,
        json!([{"op": "add_subtask", "parent_id": "nope", "task": {"id": "n.a", "title": "A"}}]),
    )
    .expect_err("invalid");
    assert_eq!(err.reason, RejectReason::Invalid);
    assert_eq!(err.message, "ops[0]: unknown parent task `nope`");
}

#[test]
fn cycle_is_refused_with_its_path() {
    let mut plan = sample();
    let before = plan.clone();
    let err = apply(
        &mut plan,
        ORCHESTRATOR,
        json!([{"op": "link_dep", "task_id": "t1", "dep_id": "t2"}]),
    )
    .expect_err("cycle");
    assert_eq!(err.reason, RejectReason::Invalid);
    assert_eq!(
        err.message,
        "ops[0]: this would make a dependency cycle: t1 → t2 → t1"
    );
    assert_eq!(plan, before);

    // A longer cycle, closed by replacing a dependency list.
    apply(
        &mut plan,
        ORCHESTRATOR,
        json!([{"op": "add", "task": {"id": "t3", "title": "C", "depends_on": ["t2"]}}]),
    )
    .expect("adds");
    let err = apply(
        &mut plan,
        ORCHESTRATOR,
        json!([
            {"op": "update", "task_id": "t2.a", "fields": {"notes": "fine"}},
            {"op": "update", "task_id": "t1", "fields": {"depends_on": ["t3"]}}
        ]),
    )
    .expect_err("cycle");
    assert_eq!(
        err.message,
        "ops[1]: this would make a dependency cycle: t1 → t3 → t2 → t1"
    );
    assert_eq!(plan.task("t2.a").expect("t2.a").notes, "");
}

#[test]
fn self_and_unknown_dependencies_are_invalid() {
    let mut plan = sample();
    for (ops, expected) in [
        (
            json!([{"op": "link_dep", "task_id": "t1", "dep_id": "t1"}]),
            "ops[0]: `t1` cannot depend on itself",
        ),
        (
            json!([{"op": "add", "task": {"id": "s", "title": "S", "depends_on": ["s"]}}]),
            "ops[0]: `s` cannot depend on itself",
        ),
        (
            json!([{"op": "link_dep", "task_id": "t1", "dep_id": "zz"}]),
            "ops[0]: unknown dependency `zz`",
        ),
        (
            json!([{"op": "link_dep", "task_id": "zz", "dep_id": "t1"}]),
            "ops[0]: unknown task `zz`",
        ),
        (
            json!([{"op": "add", "task": {"id": "s", "title": "S", "depends_on": ["zz"]}}]),
            "ops[0]: unknown task in depends_on `zz`",
        ),
    ] {
        let err = apply(&mut plan, ORCHESTRATOR, ops).expect_err("invalid");
        assert_eq!(err.reason, RejectReason::Invalid);
        assert_eq!(err.message, expected);
    }
}

#[test]
fn ids_and_titles_are_validated() {
    let long_id = "x".repeat(65);
    let long_title = "y".repeat(501);
    for (task, needle) in [
        (json!({"id": "", "title": "T"}), "must not be empty"),
        (json!({"id": long_id, "title": "T"}), "longer than 64"),
        (json!({"id": "a b", "title": "T"}), "may only contain"),
        (json!({"id": "t1", "title": "T"}), "already in use"),
        (
            json!({"id": "ok", "title": "   "}),
            "title must not be empty",
        ),
        (json!({"id": "ok", "title": long_title}), "longer than 500"),
    ] {
        let mut plan = sample();
        let err = apply(
            &mut plan,
            ORCHESTRATOR,
            json!([{"op": "add", "task": task}]),
        )
        .expect_err("invalid");
        assert_eq!(err.reason, RejectReason::Invalid);
        assert!(err.message.contains(needle), "{}", err.message);
    }
    let mut plan = Plan::default();
    apply(
        &mut plan,
        ORCHESTRATOR,
        json!([{"op": "add", "task": {"id": "A-z_0.9", "title": "y".repeat(500)}}]),
    )
    .expect("limits themselves are allowed");
}

#[test]
fn unlink_of_a_missing_link_is_invalid() {
    let mut plan = sample();
    let err = apply(
        &mut plan,
        ORCHESTRATOR,
        json!([{"op": "unlink_dep", "task_id": "t1", "dep_id": "t2"}]),
    )
    .expect_err("invalid");
    assert_eq!(err.reason, RejectReason::Invalid);
    assert_eq!(err.message, "ops[0]: `t1` does not depend on `t2`");
}

#[test]
fn repeated_dependencies_are_kept_once() {
    let mut plan = sample();
    apply(
        &mut plan,
        ORCHESTRATOR,
        json!([{"op": "add", "task": {"id": "d", "title": "D", "depends_on": ["t1", "t2", "t1"]}}]),
    )
    .expect("adds");
    assert_eq!(plan.task("d").expect("d").depends_on, ["t1", "t2"]);
    plan.check_invariants().expect("valid");
}

#[test]
fn the_plan_holds_at_most_a_thousand_tasks() {
    let mut plan = Plan::default();
    for chunk in 0..MAX_TASKS / MAX_OPS {
        let ops: Vec<Value> = (0..MAX_OPS)
            .map(|i| json!({"op": "add", "task": {"id": format!("n{chunk}-{i}"), "title": "N"}}))
            .collect();
        apply(&mut plan, ORCHESTRATOR, Value::Array(ops)).expect("fits");
    }
    assert_eq!(plan.tasks.len(), MAX_TASKS);
    let err = apply(
        &mut plan,
        ORCHESTRATOR,
        json!([{"op": "add", "task": {"id": "one-more", "title": "N"}}]),
    )
    .expect_err("full");
    assert_eq!(err.reason, RejectReason::Invalid);
    assert!(err.message.contains("1000 tasks"), "{}", err.message);
    assert!(
        plan.ensure_task(None, "more", ORCHESTRATOR, ORCHESTRATOR)
            .is_err()
    );
    plan.check_invariants().expect("valid");
}

#[test]
fn check_invariants_names_what_is_wrong() {
    let broken = |change: fn(&mut Plan)| {
        let mut plan = sample();
        change(&mut plan);
        plan.check_invariants().expect_err("broken")
    };
    assert_eq!(
        broken(|p| p.tasks[1].id = "t1".into()),
        "task id `t1` appears twice"
    );
    assert_eq!(
        broken(|p| p.tasks[0].depends_on.push("t1".into())),
        "`t1` depends on itself"
    );
    assert_eq!(
        broken(|p| p.tasks[0].depends_on.push("zz".into())),
        "`t1` depends on unknown `zz`"
    );
    assert_eq!(
        broken(|p| p.tasks[0].depends_on.push("t2".into())),
        "dependency cycle: t1 → t2 → t1"
    );
    assert_eq!(
        broken(|p| p.tasks[2].parent_id = Some("zz".into())),
        "`t2.a` has unknown parent `zz`"
    );
    assert_eq!(broken(|p| p.version = 0), "version is 0; plans start at 1");
    sample().check_invariants().expect("valid");
}
