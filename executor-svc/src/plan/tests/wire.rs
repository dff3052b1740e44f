//! The JSON forms: patches and their parse errors, ops, rejections, statuses and plans.

use serde_json::json;

use super::{apply, patch, sample};
use crate::plan::parse::parse_op;
use crate::plan::{Op, Patch, Plan, RejectReason, TaskStatus, UnlinkPolicy};

#[test]
fn fields_cannot_change_owner_parent_or_id() {
    for key in ["owner_agent", "parent_id", "id"] {
        let err = Patch::from_json(&json!([
            {"op": "update", "task_id": "t1", "fields": {key: "x"}}
        ]))
        .expect_err("refused");
        assert_eq!(err, format!("ops[0].fields.{key}: cannot be changed"));
    }
    let err = Patch::from_json(&json!([
        {"op": "update", "task_id": "t1", "fields": {"colour": "x"}}
    ]))
    .expect_err("refused");
    assert!(
        err.starts_with("ops[0].fields.colour: unknown field"),
        "{err}"
    );
}

#[test]
fn bare_array_patch_parses() {
    let p = patch(json!([
        {"op": "update", "task_id": "WS-1", "fields": {"status": "IN_PROGRESS", "notes": "…"}},
        {"op": "add_subtask", "parent_id": "WS-1", "task": {"id": "WS-1.c", "title": "Smoke-Test", "status": "PENDING"}}
    ]));
    assert_eq!(p.base_version, None);
    assert_eq!(p.ops.len(), 2);
    assert_eq!(p.ops[1].name(), "add_subtask");
    let with_version = patch(json!({"base_version": 12, "ops": [
        {"op": "link_dep", "task_id": "a", "dep_id": "b"}
    ]}));
    assert_eq!(with_version.base_version, Some(12));
    assert_eq!(
        with_version.ops[0],
        Op::LinkDep {
            task_id: "a".into(),
            dep_id: "b".into()
        }
    );
}

#[test]
fn unknown_op_is_named() {
    let err = Patch::from_json(&json!({"ops": [
        {"op": "add", "task": {"id": "a", "title": "A"}},
        {"op": "link_dep", "task_id": "a", "dep_id": "b"},
        {"op": "remove", "task_id": "a"}
    ]}))
    .expect_err("unknown op");
    assert!(err.starts_with("ops[2]: unknown op `remove`"), "{err}");
}

#[test]
fn parse_errors_name_the_place() {
    for (value, expected) in [
        (
            json!([{"op": "add", "task": {"title": "A"}}]),
            "ops[0].task.id: missing",
        ),
        (json!([{"op": "add"}]), "ops[0].task: missing"),
        (json!([{"task_id": "a"}]), "ops[0].op: missing"),
        (
            json!([{"op": "link_dep", "task_id": 3, "dep_id": "b"}]),
            "ops[0].task_id: expected a string, got `3`",
        ),
        (
            json!([{"op": "add", "task": {"id": "a", "title": "A", "depends_on": ["b", 1]}}]),
            "ops[0].task.depends_on[1]: expected a string, got `1`",
        ),
        (
            json!([{"op": "update", "task_id": "a", "fields": {"status": "DONE"}}]),
            "ops[0].fields.status: unknown status `DONE` (expected PENDING, IN_PROGRESS, \
             COMPLETED or FAILED)",
        ),
        (
            json!([{"op": "add", "parent_id": "p", "task": {"id": "a", "title": "A"}}]),
            "ops[0]: unknown key `parent_id` for op `add` (it takes task)",
        ),
        (
            json!({"base_version": "3", "ops": []}),
            "base_version: expected a non-negative integer, got the string \"3\"",
        ),
        (json!({"base_version": 3}), "ops: missing"),
        (
            json!({"ops": {}}),
            "ops: expected an array of ops, got an object",
        ),
        (
            json!({"op": "add", "ops": []}),
            "patch: unknown key `op` (a patch has `base_version` and `ops`)",
        ),
        (
            json!([7]),
            "ops[0]: expected an object with an `op` key, got `7`",
        ),
    ] {
        assert_eq!(
            Patch::from_json(&value).expect_err("refused"),
            expected,
            "{value}"
        );
    }
}

#[test]
fn patch_deserializes_like_from_json() {
    let text = r#"[{"op":"link_dep","task_id":"a","dep_id":"b"}]"#;
    let p: Patch = serde_json::from_str(text).expect("parses");
    assert_eq!(p, patch(serde_json::from_str(text).expect("json")));
    let err = serde_json::from_str::<Patch>(r#"[{"op":"remove"}]"#).expect_err("refused");
    assert!(err.to_string().contains("unknown op `remove`"), "{err}");
    let err =
        serde_json::from_str::<Op>(r#"{"op":"add","task":{"title":"x"}}"#).expect_err("refused");
    assert!(err.to_string().contains("task.id: missing"), "{err}");
}

#[test]
fn op_json_round_trips() {
    let p = patch(json!([
        {"op": "add", "task": {"id": "a", "title": "A", "status": "FAILED", "depends_on": ["b"],
            "notes": "n", "tool": "git", "params": {"x": [1, 2]}}},
        {"op": "add_subtask", "parent_id": "a", "task": {"id": "a.1", "title": "A1"}},
        {"op": "update", "task_id": "a", "fields": {"title": "T", "status": "COMPLETED",
            "notes": "", "depends_on": [], "tool": "t", "params": 3}},
        {"op": "link_dep", "task_id": "a", "dep_id": "b"},
        {"op": "unlink_dep", "task_id": "a", "dep_id": "b"}
    ]));
    for op in &p.ops {
        let json = op.to_json();
        assert_eq!(json["op"], op.name());
        assert_eq!(&parse_op("", &json).expect("reparses"), op);
    }
    let again = Patch::from_json(&serde_json::to_value(&p).expect("serializes")).expect("reparses");
    assert_eq!(again, p);
}

#[test]
fn rejection_serializes_for_the_model() {
    let mut plan = sample();
    let err = apply(
        &mut plan,
        "coder",
        json!([{"op": "update", "task_id": "t1", "fields": {"notes": "x"}}]),
    )
    .expect_err("forbidden");
    let json = serde_json::to_value(&err).expect("serializes");
    assert_eq!(json["error"], "forbidden");
    assert_eq!(json["current_version"], 3);
    assert_eq!(json["message"], err.message);
    assert_eq!(
        json["rejected_ops"],
        json!([{"op": "update", "task_id": "t1", "fields": {"notes": "x"}}])
    );
    assert_eq!(
        json.as_object().map(|m| m.len()),
        Some(4),
        "exactly four keys: {json}"
    );
    assert_eq!(err.to_string(), format!("forbidden: {}", err.message));
    let _: &dyn std::error::Error = &err;
}

#[test]
fn wire_names() {
    assert_eq!(
        TaskStatus::ALL.map(TaskStatus::as_str),
        ["PENDING", "IN_PROGRESS", "COMPLETED", "FAILED"]
    );
    for status in TaskStatus::ALL {
        assert_eq!(
            serde_json::to_value(status).expect("serializes"),
            status.as_str()
        );
    }
    assert_eq!(RejectReason::Conflict.as_str(), "conflict");
    assert_eq!(RejectReason::Forbidden.as_str(), "forbidden");
    assert_eq!(RejectReason::Invalid.as_str(), "invalid");
    assert_eq!(UnlinkPolicy::default(), UnlinkPolicy::DependentOwner);
}

#[test]
fn plan_round_trips_through_json() {
    let mut plan = sample();
    plan.set_status("t2", TaskStatus::Failed, Some(json!("boom")));
    let text = serde_json::to_string(&plan).expect("serializes");
    let back: Plan = serde_json::from_str(&text).expect("parses");
    assert_eq!(back, plan);
    assert_eq!(back.render_markdown(), plan.render_markdown());
}
