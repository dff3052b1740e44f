//! Changes made by code rather than by patches: they never bump the version.

use serde_json::json;

use super::sample;
use crate::plan::{Plan, TaskStatus};

#[test]
fn ensure_task_creates_fresh_ids() {
    let mut plan = Plan::default();
    assert_eq!(plan.ensure_task(None, "first", "coder").expect("t1"), "t1");
    assert_eq!(
        plan.ensure_task(Some("t3"), "named", "coder").expect("t3"),
        "t3"
    );
    // Two tasks: the search starts at t3, which is taken.
    assert_eq!(plan.ensure_task(None, "third", "coder").expect("t4"), "t4");
    assert_eq!(plan.ensure_task(None, "fourth", "coder").expect("t5"), "t5");
    let t4 = plan.task("t4").expect("t4");
    assert_eq!(
        (t4.owner_agent.as_str(), t4.status, t4.title.as_str()),
        ("coder", TaskStatus::Pending, "third")
    );
    assert_eq!(
        plan.version, 1,
        "code-driven changes do not bump the version"
    );
    plan.check_invariants().expect("valid");
}

#[test]
fn ensure_task_returns_existing_ids_and_validates_new_ones() {
    let mut plan = sample();
    assert_eq!(
        plan.ensure_task(Some("t2"), "ignored", "someone")
            .expect("exists"),
        "t2"
    );
    assert_eq!(plan.task("t2").expect("t2").title, "Review");
    assert!(plan.ensure_task(Some("bad id"), "T", "x").is_err());
    assert!(plan.ensure_task(Some("ok"), " ", "x").is_err());
    assert!(plan.ensure_task(None, "", "x").is_err());
    assert_eq!(plan.tasks.len(), 3);
}

#[test]
fn set_status_changes_status_and_result_without_a_version_bump() {
    let mut plan = sample();
    assert!(plan.set_status("t1", TaskStatus::Completed, Some(json!({"ok": true}))));
    let t1 = plan.task("t1").expect("t1");
    assert_eq!(t1.status, TaskStatus::Completed);
    assert_eq!(t1.result, Some(json!({"ok": true})));
    assert!(!plan.set_status("nope", TaskStatus::Failed, None));
    assert_eq!(plan.version, 3);
}
