//! The plan patch engine: `Patch::from_json`, `Plan::apply` and the code-driven changes
//! (`ensure_task`, `set_status`), over a sequence of JSON documents.
//!
//! The first byte picks authors and unlink policies; the rest is read as JSON values one after
//! another: `{"ensure": [id or null, title, owner]}` and `{"status": [id, status]}` are
//! code-driven changes, anything else is a patch. Checks, after every step:
//! - nothing panics, and the plan keeps its invariants (`check_invariants`);
//! - a patch that parses reads back equal from its own JSON, op by op too;
//! - an accepted patch bumps the version by one; a refused one leaves the plan exactly as it was
//!   and says so with the current version, and serializes;
//! - code-driven changes never bump the version; the Markdown renders.
#![no_main]

use executor_svc::plan::{ORCHESTRATOR, Op, Patch, Plan, TaskStatus, UnlinkPolicy};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

const AUTHORS: [&str; 4] = [ORCHESTRATOR, "coder", "reviewer", ORCHESTRATOR];
const POLICIES: [UnlinkPolicy; 3] = [
    UnlinkPolicy::DependentOwner,
    UnlinkPolicy::AnyAuthor,
    UnlinkPolicy::OrchestratorOnly,
];

fuzz_target!(|data: &[u8]| {
    let Some((&schedule, rest)) = data.split_first() else {
        return;
    };
    let mut plan = Plan::default();
    let docs = serde_json::Deserializer::from_slice(rest).into_iter::<Value>();
    for (step, doc) in docs.enumerate().take(64) {
        let Ok(doc) = doc else { break };
        let pick = usize::from(schedule.rotate_left(step as u32 * 3));
        let author = AUTHORS[pick % AUTHORS.len()];
        let policy = POLICIES[(pick / 4) % POLICIES.len()];
        let version = plan.version;
        if let Some(args) = doc.get("ensure").and_then(Value::as_array) {
            let text = |i: usize| args.get(i).and_then(Value::as_str).unwrap_or_default();
            let id = args.first().and_then(Value::as_str);
            if let Ok(got) = plan.ensure_task(id, text(1), author, text(2)) {
                assert!(
                    plan.task(&got).is_some(),
                    "ensure_task gave {got:?}, not in the plan"
                );
                if let Some(id) = id {
                    assert_eq!(got, id);
                }
            }
            assert_eq!(plan.version, version, "ensure_task bumped the version");
        } else if let Some(args) = doc.get("status").and_then(Value::as_array) {
            let id = args.first().and_then(Value::as_str).unwrap_or_default();
            let status = TaskStatus::ALL[pick % TaskStatus::ALL.len()];
            let known = plan.task(id).is_some();
            assert_eq!(plan.set_status(id, status, args.get(1).cloned()), known);
            assert_eq!(plan.version, version, "set_status bumped the version");
        } else if let Ok(patch) = Patch::from_json(&doc) {
            json_round_trips(&patch);
            let before = plan.clone();
            match plan.apply(author, &patch, policy) {
                Ok(new) => {
                    assert_eq!(new, version + 1);
                    assert_eq!(plan.version, new);
                }
                Err(rejection) => {
                    assert_eq!(plan, before, "a refused patch changed the plan");
                    assert_eq!(rejection.current_version, plan.version);
                    assert!(!rejection.message.is_empty());
                    serde_json::to_value(&rejection).expect("a rejection serializes");
                }
            }
        }
        if let Err(e) = plan.check_invariants() {
            panic!("step {step} broke the plan: {e}\n{plan:#?}");
        }
        let _ = plan.render_markdown();
    }
});

fn json_round_trips(patch: &Patch) {
    let json = serde_json::to_value(patch).expect("a patch serializes");
    let back = Patch::from_json(&json)
        .unwrap_or_else(|e| panic!("a parsed patch's JSON does not parse ({e}): {json}"));
    assert_eq!(&back, patch, "the patch changed through its JSON: {json}");
    for op in &patch.ops {
        let back = Op::try_from(op.to_json())
            .unwrap_or_else(|e| panic!("an op's JSON does not parse ({e}): {}", op.to_json()));
        assert_eq!(&back, op);
    }
}
