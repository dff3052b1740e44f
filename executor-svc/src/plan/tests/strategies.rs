//! Input generators for the proptest properties: random ops, patches and code-driven steps over
//! a small id pool, and a JSON writer that varies key order.

use proptest::prelude::*;
use serde_json::{Value, json};

use crate::plan::{Fields, NewTask, ORCHESTRATOR, Op, Patch, Plan, TaskStatus, UnlinkPolicy};

// A small pool, so ids collide and dependencies close cycles; invalid ids now and then.
const IDS: &[&str] = &["a", "b", "c", "d", "e", "a.1", "b-2"];
const BAD_IDS: &[&str] = &["bad id", "", "ü"];

fn id() -> impl Strategy<Value = String> {
    prop_oneof![
        20 => prop::sample::select(IDS),
        1 => prop::sample::select(BAD_IDS),
    ]
    .prop_map(str::to_owned)
}

pub(super) fn author() -> impl Strategy<Value = String> {
    // The orchestrator more often than the others, so that more patches pass.
    prop_oneof![
        3 => Just(ORCHESTRATOR),
        1 => prop::sample::select(vec!["reviewer", "coder"]),
    ]
    .prop_map(str::to_owned)
}

fn title() -> impl Strategy<Value = String> {
    prop_oneof![
        10 => Just("Do it"),
        2 => Just("  Trim me "),
        1 => Just("Two\nlines"),
        1 => Just(""),
    ]
    .prop_map(str::to_owned)
}

/// Mostly one to three ops; now and then none, which is refused.
pub(super) fn ops() -> impl Strategy<Value = Vec<Op>> {
    prop_oneof![
        1 => Just(Vec::new()),
        12 => prop::collection::vec(op(), 1..3),
    ]
}

fn status() -> impl Strategy<Value = TaskStatus> {
    prop::sample::select(TaskStatus::ALL.to_vec())
}

fn deps() -> impl Strategy<Value = Vec<String>> {
    prop_oneof![
        3 => Just(Vec::new()),
        2 => prop::collection::vec(id(), 1..3),
    ]
}

fn params() -> impl Strategy<Value = Option<Value>> {
    // Never `null`: it reads back as absent, and the round trip below compares exactly.
    prop::option::of(prop_oneof![
        Just(json!({"path": "x", "n": 1, "deep": {"b": [1, 2], "a": true}})),
        Just(json!([1, "two"])),
        Just(json!("s")),
    ])
}

fn new_task() -> impl Strategy<Value = NewTask> {
    (
        id(),
        title(),
        prop::option::of(status()),
        deps(),
        prop::sample::select(vec!["", "a note", "line\nline"]),
        prop::option::of(Just("git".to_owned())),
        params(),
    )
        .prop_map(
            |(id, title, status, depends_on, notes, tool, params)| NewTask {
                id,
                title,
                status,
                depends_on,
                notes: notes.to_owned(),
                tool,
                params,
                owner_agent: None,
            },
        )
}

fn fields() -> impl Strategy<Value = Fields> {
    (
        prop::option::of(title()),
        prop::option::of(status()),
        prop::option::of(Just("noted".to_owned())),
        prop::option::of(deps()),
        prop::option::of(Just("python".to_owned())),
        params(),
    )
        .prop_map(|(title, status, notes, depends_on, tool, params)| Fields {
            title,
            status,
            notes,
            depends_on,
            tool,
            params,
        })
}

pub(super) fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => new_task().prop_map(|task| Op::Add { task }),
        2 => (id(), new_task()).prop_map(|(parent_id, task)| Op::AddSubtask { parent_id, task }),
        2 => (id(), fields()).prop_map(|(task_id, fields)| Op::Update { task_id, fields }),
        4 => (id(), id()).prop_map(|(task_id, dep_id)| Op::LinkDep { task_id, dep_id }),
        2 => (id(), id()).prop_map(|(task_id, dep_id)| Op::UnlinkDep { task_id, dep_id }),
    ]
}

fn policy() -> impl Strategy<Value = UnlinkPolicy> {
    prop::sample::select(vec![
        UnlinkPolicy::DependentOwner,
        UnlinkPolicy::AnyAuthor,
        UnlinkPolicy::OrchestratorOnly,
    ])
}

/// What the patch's `base_version` is, relative to the plan when it is applied.
#[derive(Debug, Clone)]
pub(super) enum Base {
    Absent,
    Current,
    Stale(u64),
}

#[derive(Debug, Clone)]
pub(super) enum Step {
    Patch {
        author: String,
        base: Base,
        ops: Vec<Op>,
        policy: UnlinkPolicy,
    },
    Ensure {
        id: Option<String>,
        title: String,
        owner: String,
    },
    SetStatus {
        id: String,
        status: TaskStatus,
    },
}

pub(super) fn step() -> impl Strategy<Value = Step> {
    let base = prop_oneof![
        2 => Just(Base::Absent),
        5 => Just(Base::Current),
        1 => (1u64..3).prop_map(Base::Stale),
    ];
    prop_oneof![
        8 => (author(), base, ops(), policy())
            .prop_map(|(author, base, ops, policy)| Step::Patch { author, base, ops, policy }),
        1 => (prop::option::of(id()), title(), author())
            .prop_map(|(id, title, owner)| Step::Ensure { id, title, owner }),
        1 => (id(), status()).prop_map(|(id, status)| Step::SetStatus { id, status }),
    ]
}

/// Writes `value` as JSON text with every object's keys in the order `order` picks
/// (rotated by `turn`, reversed or not), so two texts of one value differ in key order.
fn write_json(value: &Value, turn: usize, reverse: bool, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            if reverse {
                entries.reverse();
            }
            if !entries.is_empty() {
                let k = turn % entries.len();
                entries.rotate_left(k);
            }
            out.push('{');
            for (n, (key, item)) in entries.into_iter().enumerate() {
                if n > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                write_json(item, turn / 2 + 1, reverse, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (n, item) in items.iter().enumerate() {
                if n > 0 {
                    out.push(',');
                }
                write_json(item, turn + n, reverse, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

pub(super) fn text(value: &Value, turn: usize, reverse: bool) -> String {
    let mut out = String::new();
    write_json(value, turn, reverse, &mut out);
    out
}

/// Most of the id pool already taken, by all three authors, so that ops mostly meet
/// tasks that exist (and link them into cycles) rather than fail on unknown ids.
pub(super) fn seeded() -> Plan {
    let mut plan = Plan::default();
    for (author, ids) in [(ORCHESTRATOR, ["a", "b"]), ("reviewer", ["c", "d"])] {
        let ops = ids
            .iter()
            .map(|id| Op::Add {
                task: NewTask {
                    id: (*id).to_owned(),
                    title: format!("Task {id}"),
                    status: None,
                    depends_on: Vec::new(),
                    notes: String::new(),
                    tool: None,
                    params: None,
                    owner_agent: None,
                },
            })
            .collect();
        let seed = Patch {
            base_version: None,
            ops,
        };
        plan.apply(author, &seed, UnlinkPolicy::default())
            .expect("seed patch applies");
    }
    plan
}
