//! Rendering the plan as Markdown.

use serde_json::json;

use super::apply;
use crate::plan::{ORCHESTRATOR, Plan};

#[test]
fn markdown_renders_nested_subtasks_deterministically() {
    let mut plan = Plan::default();
    apply(
        &mut plan,
        ORCHESTRATOR,
        json!([{"op": "add", "task": {"id": "t1", "title": "Validate the project name"}}]),
    )
    .expect("adds");
    apply(
        &mut plan,
        "scaffold-webservice",
        json!([
            {"op": "add", "task": {"id": "t2", "title": "Scaffold the webservice",
                "status": "IN_PROGRESS", "depends_on": ["t1"]}},
            {"op": "add_subtask", "parent_id": "t2", "task": {"id": "t2.a",
                "title": "Smoke test", "status": "COMPLETED", "notes": "ran it\n\nall green  "}},
            {"op": "add_subtask", "parent_id": "t2.a", "task": {"id": "t2.a.1",
                "title": "Deep\nline"}}
        ]),
    )
    .expect("adds");
    apply(
        &mut plan,
        ORCHESTRATOR,
        json!([
            {"op": "add", "task": {"id": "t3", "title": "Set up CI", "status": "FAILED"}},
            {"op": "add_subtask", "parent_id": "t1", "task": {"id": "t1.a", "title": "Late child"}}
        ]),
    )
    .expect("adds");
    let expected = "## Plan (version 4)\n\
        \n\
        - [ ] t1 · Validate the project name — orchestrator\n\
        \x20 - [ ] t1.a · Late child — orchestrator\n\
        - [~] t2 · Scaffold the webservice — scaffold-webservice · depends on: t1\n\
        \x20 - [x] t2.a · Smoke test — scaffold-webservice\n\
        \x20   > ran it\n\
        \x20   >\n\
        \x20   > all green\n\
        \x20   - [ ] t2.a.1 · Deep line — scaffold-webservice\n\
        - [!] t3 · Set up CI — orchestrator\n";
    assert_eq!(plan.render_markdown(), expected);
    assert_eq!(plan.clone().render_markdown(), expected);
}

#[test]
fn markdown_of_an_empty_plan() {
    let plan = Plan {
        version: 7,
        tasks: Vec::new(),
    };
    assert_eq!(
        plan.render_markdown(),
        "## Plan (version 7)\n\n_No tasks yet._\n"
    );
}

#[test]
fn markdown_shows_every_task_of_a_malformed_plan() {
    let mut plan = Plan::default();
    plan.ensure_task(Some("a"), "A", ORCHESTRATOR, "x")
        .expect("a");
    plan.ensure_task(Some("b"), "B", ORCHESTRATOR, "x")
        .expect("b");
    plan.tasks[0].parent_id = Some("b".into());
    plan.tasks[1].parent_id = Some("a".into());
    assert!(plan.check_invariants().is_err());
    let md = plan.render_markdown();
    assert!(
        md.contains("- [ ] a · A") && md.contains("  - [ ] b · B"),
        "{md}"
    );
}
