//! Unit tests of the plan and its patch engine, one module per subject, and the proptest
//! properties (`properties`, with their input generators in `strategies`).

use serde_json::{Value, json};

use super::{ORCHESTRATOR, Patch, Plan, Rejection, UnlinkPolicy};

mod code_driven;
mod markdown;
mod ownership;
mod properties;
mod strategies;
mod validation;
mod whole_patch;
mod wire;

fn patch(value: Value) -> Patch {
    Patch::from_json(&value).expect("patch parses")
}

fn apply(plan: &mut Plan, author: &str, value: Value) -> Result<u64, Rejection> {
    plan.apply(author, &patch(value), UnlinkPolicy::default())
}

/// t1 (orchestrator), t2 (reviewer) depending on t1, t2.a (reviewer) under t2.
fn sample() -> Plan {
    let mut plan = Plan::default();
    apply(
        &mut plan,
        ORCHESTRATOR,
        json!([{"op": "add", "task": {"id": "t1", "title": "Validate the project name"}}]),
    )
    .expect("orchestrator adds");
    apply(
        &mut plan,
        "reviewer",
        json!({"base_version": 2, "ops": [
            {"op": "add", "task": {"id": "t2", "title": "Review", "depends_on": ["t1"]}},
            {"op": "add_subtask", "parent_id": "t2", "task": {"id": "t2.a", "title": "Read"}}
        ]}),
    )
    .expect("reviewer adds");
    plan
}
