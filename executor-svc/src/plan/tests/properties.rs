//! Properties over random sequences of patches and code-driven changes: every change keeps the
//! invariants, a refused patch changes nothing, and parsing and rendering do not depend on key
//! order.

use proptest::prelude::*;
use serde_json::Value;

use super::strategies::{Base, Step, author, op, ops, seeded, step, text};
use crate::plan::{ORCHESTRATOR, Op, Patch, Plan, RejectReason, UnlinkPolicy};

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn random_patches_keep_the_invariants(steps in prop::collection::vec(step(), 1..60)) {
        let mut plan = seeded();
        let mut accepted = plan.version - 1;
        for step in steps {
            match step {
                Step::Patch { author, base, ops, policy } => {
                    let base_version = match base {
                        Base::Absent => None,
                        Base::Current => Some(plan.version),
                        Base::Stale(k) if k % 2 == 0 => Some(plan.version + k),
                        Base::Stale(k) => Some(plan.version.saturating_sub(k)),
                    };
                    let stale = base_version.is_some_and(|v| v != plan.version);
                    let patch = Patch { base_version, ops };
                    let before = serde_json::to_string(&plan).expect("serializes");
                    let before_plan = plan.clone();
                    match plan.apply(&author, &patch, policy) {
                        Ok(version) => {
                            prop_assert!(!stale);
                            accepted += 1;
                            prop_assert_eq!(version, plan.version);
                        }
                        Err(rejection) => {
                            prop_assert_eq!(
                                serde_json::to_string(&plan).expect("serializes"),
                                before
                            );
                            prop_assert_eq!(&plan, &before_plan);
                            prop_assert_eq!(rejection.current_version, plan.version);
                            prop_assert_eq!(rejection.reason == RejectReason::Conflict, stale);
                            if stale {
                                prop_assert_eq!(rejection.rejected_ops, patch.ops_json());
                            } else if !patch.ops.is_empty() {
                                prop_assert!(rejection.message.starts_with("ops["), "{}", rejection.message);
                                prop_assert_eq!(rejection.rejected_ops.len(), 1);
                            }
                        }
                    }
                }
                Step::Ensure { id, title, owner } => {
                    let count = plan.tasks.len();
                    match plan.ensure_task(id.as_deref(), &title, ORCHESTRATOR, &owner) {
                        Ok(got) => {
                            prop_assert!(plan.task(&got).is_some());
                            if let Some(id) = id {
                                prop_assert_eq!(got, id);
                            }
                        }
                        Err(_) => prop_assert_eq!(plan.tasks.len(), count),
                    }
                }
                Step::SetStatus { id, status } => {
                    let known = plan.task(&id).is_some();
                    prop_assert_eq!(plan.set_status(&id, status, None), known);
                }
            }
            if let Err(e) = plan.check_invariants() {
                prop_assert!(false, "invariant broken: {}\n{:#?}", e, plan);
            }
            prop_assert_eq!(plan.version, 1 + accepted);
        }
    }

    #[test]
    fn markdown_is_stable_under_key_order(
        steps in prop::collection::vec((author(), ops()), 1..25),
        turn in 0usize..16,
    ) {
        let mut one = seeded();
        let mut two = one.clone();
        for (author, ops) in steps {
            let value = serde_json::to_value(Patch { base_version: None, ops })
                .expect("serializes");
            let (first, second) = (text(&value, turn, false), text(&value, turn + 1, true));
            let p1: Patch = serde_json::from_str(&first).expect("reparses");
            let p2 = Patch::from_json(
                &serde_json::from_str::<Value>(&second).expect("json"),
            )
            .expect("reparses");
            prop_assert_eq!(&p1, &p2);
            let r1 = one.apply(&author, &p1, UnlinkPolicy::default());
            let r2 = two.apply(&author, &p2, UnlinkPolicy::default());
            prop_assert_eq!(r1, r2);
            prop_assert_eq!(&one, &two);
            let md = one.render_markdown();
            prop_assert_eq!(&md, &two.render_markdown());
            prop_assert_eq!(&md, &one.render_markdown());
            prop_assert!(md.ends_with('\n') && !md.ends_with("\n\n"), "{}", md);
        }
        let back: Plan = serde_json::from_str(&serde_json::to_string(&one).expect("json"))
            .expect("parses");
        prop_assert_eq!(back.render_markdown(), one.render_markdown());
    }

    #[test]
    fn ops_round_trip_through_json(op in op()) {
        let json = op.to_json();
        prop_assert_eq!(&Op::try_from(json.clone()).expect("reparses"), &op);
        prop_assert_eq!(json["op"].as_str(), Some(op.name()));
    }
}
