//! A patch applies as a whole or not at all, against the version its author read.

use serde_json::{Value, json};

use super::{apply, sample};
use crate::plan::{MAX_OPS, ORCHESTRATOR, Plan, RejectReason};

#[test]
fn stale_base_version_is_a_conflict_and_changes_nothing() {
    let mut plan = sample();
    let before = plan.clone();
    let ops = json!([{"op": "update", "task_id": "t2", "fields": {"status": "COMPLETED"}}]);
    let err = apply(
        &mut plan,
        "reviewer",
        json!({"base_version": 2, "ops": ops}),
    )
    .expect_err("stale");
    assert_eq!(err.reason, RejectReason::Conflict);
    assert!(err.message.contains("version 2"), "{}", err.message);
    assert!(err.message.contains("version 3"), "{}", err.message);
    assert_eq!(err.current_version, 3);
    assert_eq!(Value::Array(err.rejected_ops), ops);
    assert_eq!(plan, before);
}

#[test]
fn missing_base_version_means_current() {
    let mut plan = sample();
    let v = apply(
        &mut plan,
        "reviewer",
        json!({"ops": [{"op": "update", "task_id": "t2", "fields": {"notes": "n"}}]}),
    )
    .expect("applies");
    assert_eq!(v, 4);
    assert_eq!(plan.task("t2").expect("t2").notes, "n");
}

#[test]
fn version_bumps_once_per_merged_patch() {
    let mut plan = Plan::default();
    assert_eq!(plan.version, 1);
    let v = apply(
        &mut plan,
        ORCHESTRATOR,
        json!([
            {"op": "add", "task": {"id": "a", "title": "A"}},
            {"op": "add", "task": {"id": "b", "title": "B"}},
            {"op": "link_dep", "task_id": "b", "dep_id": "a"}
        ]),
    )
    .expect("applies");
    assert_eq!((v, plan.version), (2, 2));
    apply(
        &mut plan,
        ORCHESTRATOR,
        json!([{"op": "add", "task": {"id": "a", "title": "again"}}]),
    )
    .expect_err("duplicate");
    assert_eq!(plan.version, 2);
    let v = apply(
        &mut plan,
        ORCHESTRATOR,
        json!({"base_version": 2, "ops": [{"op": "update", "task_id": "a", "fields": {"status": "COMPLETED"}}]}),
    )
    .expect("applies");
    assert_eq!(v, 3);
}

#[test]
fn a_failing_op_rolls_back_the_whole_patch() {
    let mut plan = sample();
    let before = plan.clone();
    let bad = json!({"op": "update", "task_id": "missing", "fields": {"notes": "x"}});
    let err = apply(
        &mut plan,
        ORCHESTRATOR,
        json!([
            {"op": "add", "task": {"id": "new", "title": "New"}},
            {"op": "update", "task_id": "t1", "fields": {"status": "COMPLETED"}},
            bad
        ]),
    )
    .expect_err("invalid");
    assert!(err.message.starts_with("ops[2]: "), "{}", err.message);
    assert_eq!(err.rejected_ops, vec![bad]);
    assert_eq!(plan, before);
}

#[test]
fn ops_see_the_effects_of_earlier_ops_in_the_same_patch() {
    let mut plan = Plan::default();
    apply(
        &mut plan,
        "coder",
        json!([
            {"op": "add", "task": {"id": "a", "title": "A"}},
            {"op": "add_subtask", "parent_id": "a", "task": {"id": "a.1", "title": "A1"}},
            {"op": "update", "task_id": "a.1", "fields": {"status": "IN_PROGRESS"}}
        ]),
    )
    .expect("applies");
    assert_eq!(plan.tasks.len(), 2);
}

#[test]
fn empty_and_oversized_patches_are_invalid() {
    let mut plan = sample();
    let err = apply(&mut plan, ORCHESTRATOR, json!([])).expect_err("empty");
    assert_eq!(err.reason, RejectReason::Invalid);
    assert_eq!(err.message, "a patch needs at least one op");
    assert!(err.rejected_ops.is_empty());

    let ops: Vec<Value> = (0..=MAX_OPS)
        .map(|i| json!({"op": "add", "task": {"id": format!("n{i}"), "title": "N"}}))
        .collect();
    let err = apply(&mut plan, ORCHESTRATOR, Value::Array(ops)).expect_err("too many");
    assert_eq!(err.reason, RejectReason::Invalid);
    assert!(err.message.contains("at most 200 ops"), "{}", err.message);
    assert_eq!(plan.tasks.len(), 3);
}
