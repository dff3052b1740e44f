//! Changes made by code rather than by patches: they never bump the version.

use serde_json::json;

use super::sample;
use crate::plan::{MAX_TITLE_LEN, ORCHESTRATOR, Patch, Plan, TaskStatus, UnlinkPolicy};

#[test]
fn ensure_task_creates_fresh_ids() {
    let mut plan = Plan::default();
    let mut ensure = |id, task| plan.ensure_task(id, task, ORCHESTRATOR, "coder");
    assert_eq!(ensure(None, "first").expect("t1"), "t1");
    assert_eq!(ensure(Some("t3"), "named").expect("t3"), "t3");
    // Two tasks: the search starts at t3, which is taken.
    assert_eq!(ensure(None, "third").expect("t4"), "t4");
    assert_eq!(ensure(None, "fourth").expect("t5"), "t5");
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
        plan.ensure_task(Some("t2"), "ignored", ORCHESTRATOR, "someone")
            .expect("exists"),
        "t2"
    );
    assert_eq!(plan.task("t2").expect("t2").title, "Review");
    let err = plan
        .ensure_task(Some("bad id"), "T", ORCHESTRATOR, "x")
        .expect_err("bad id");
    assert!(err.starts_with("`task_id`: "), "{err}");
    let err = plan
        .ensure_task(Some("ok"), " \n ", ORCHESTRATOR, "x")
        .expect_err("blank");
    assert!(err.starts_with("`task` "), "{err}");
    assert!(plan.ensure_task(None, "", ORCHESTRATOR, "x").is_err());
    assert_eq!(plan.tasks.len(), 3);
}

#[test]
fn a_delegated_task_belongs_to_the_agent_it_went_to() {
    let mut plan = Plan::default();
    let add = Patch::from_json(&json!({"ops": [
        {"op": "add", "task": {"id": "WS-1", "title": "scaffold webservice"}},
    ]}))
    .expect("patch");
    plan.apply(ORCHESTRATOR, &add, UnlinkPolicy::default())
        .expect("planned");
    // The orchestrator hands its task over; the sub-agent may then update it.
    assert_eq!(
        plan.ensure_task(Some("WS-1"), "do it", ORCHESTRATOR, "scaffold")
            .expect("handed over"),
        "WS-1"
    );
    assert_eq!(plan.task("WS-1").expect("WS-1").owner_agent, "scaffold");
    let update = Patch::from_json(&json!({"base_version": 2, "ops": [
        {"op": "update", "task_id": "WS-1", "fields": {"status": "IN_PROGRESS", "notes": "started"}},
        {"op": "add_subtask", "parent_id": "WS-1", "task": {"id": "WS-1.c", "title": "CI"}},
    ]}))
    .expect("patch");
    plan.apply("scaffold", &update, UnlinkPolicy::default())
        .expect("the owner's patch merges");
    // A sub-agent may pass on only what it owns.
    let err = plan
        .ensure_task(Some("WS-1"), "steal", "other", "helper")
        .expect_err("not its task");
    assert!(err.contains("owned by `scaffold`"), "{err}");
    // Someone else's task goes back to its owner for a retry, but not once it is done: that
    // would overwrite its result (recheck F2).
    plan.ensure_task(Some("WS-1"), "retry", "other", "scaffold")
        .expect("a retry");
    plan.set_status("WS-1", TaskStatus::Completed, Some(json!({"ok": true})));
    let err = plan
        .ensure_task(Some("WS-1"), "again", "other", "scaffold")
        .expect_err("done");
    assert!(err.contains("completed"), "{err}");
    plan.ensure_task(Some("WS-1"), "again", ORCHESTRATOR, "scaffold")
        .expect("the orchestrator may");
    plan.set_status("WS-1", TaskStatus::InProgress, None);
    plan.ensure_task(Some("WS-1.c"), "sub", "scaffold", "helper")
        .expect("its own subtask");
    assert_eq!(plan.task("WS-1.c").expect("sub").owner_agent, "helper");
    plan.check_invariants().expect("valid");
}

#[test]
fn a_long_task_text_becomes_a_shortened_title() {
    let mut plan = Plan::default();
    let brief = format!("\n  {}\nsecond line", "Detailed brief. ".repeat(40));
    let id = plan
        .ensure_task(None, &brief, ORCHESTRATOR, "coder")
        .expect("a long brief is fine");
    let title = &plan.task(&id).expect("task").title;
    assert_eq!(title.chars().count(), MAX_TITLE_LEN);
    assert!(
        title.starts_with("Detailed brief.") && title.ends_with('…'),
        "{title}"
    );
    plan.check_invariants().expect("valid");
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
