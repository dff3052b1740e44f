//! Budgets: a run stops after its step budget or its wall-clock budget, with an error event.

use std::{sync::atomic::Ordering, time::Duration};

use taskforce_proto::v1::{RunStatus, run_event::Event};
use tempfile::TempDir;

use crate::{
    fake_registry::FakeRegistry,
    support::{Executor, collect, done_status, kinds, mission, setup},
};

#[tokio::test]
async fn an_exhausted_step_budget_fails_the_run() {
    let dir = TempDir::new().expect("tmp");
    let registry = FakeRegistry::start().await;
    let call = "  - tool_calls:\n      - {name: probe, arguments: {x: again}}\n";
    let script = format!("turns:\n{call}{call}{call}{call}");
    let mut executor = Executor::start(&setup(&dir, &registry, &script, 2)).await;
    let events = collect(
        executor
            .client
            .execute(mission("loop"))
            .await
            .expect("execute")
            .into_inner(),
    )
    .await;
    let n = events.len();
    assert_eq!(kinds(&events)[n - 2..], ["error", "done"]);
    match &events[n - 2].event {
        Some(Event::Error(err)) => assert_eq!(err.code, "STEP_BUDGET_EXCEEDED"),
        other => panic!("expected Error, got {other:?}"),
    }
    assert_eq!(done_status(&events), RunStatus::Failed);
    let tool_ends = kinds(&events).iter().filter(|k| **k == "tool_end").count();
    assert_eq!(tool_ends, 2, "two steps ran their tool call");
    executor.stop().await;
}

#[tokio::test]
async fn a_run_over_its_time_budget_fails() {
    let dir = TempDir::new().expect("tmp");
    let registry = FakeRegistry::start().await;
    let script = "turns:\n  - tool_calls:\n      - {name: probe, arguments: {wait: true}}\n";
    let mut setup = setup(&dir, &registry, script, 10);
    setup.max_run_secs = Some(1);
    let mut executor = Executor::start(&setup).await;
    let started = tokio::time::Instant::now();
    let events = collect(
        executor
            .client
            .execute(mission("too slow"))
            .await
            .expect("execute")
            .into_inner(),
    )
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    let n = events.len();
    assert_eq!(kinds(&events)[n - 3..], ["tool_error", "error", "done"]);
    match &events[n - 2].event {
        Some(Event::Error(err)) => assert_eq!(err.code, "TIME_BUDGET_EXCEEDED"),
        other => panic!("expected Error, got {other:?}"),
    }
    assert_eq!(done_status(&events), RunStatus::Failed);
    assert!(executor.probe.saw_cancel.load(Ordering::SeqCst));
    executor.stop().await;
}
