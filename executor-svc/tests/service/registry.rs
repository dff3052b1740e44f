//! The registry link: definitions are cached while the watch stream runs, and a change evicts.

use std::{sync::atomic::Ordering, time::Duration};

use taskforce_proto::v1::RunStatus;
use tempfile::TempDir;

use crate::{
    fake_registry::FakeRegistry,
    support::{Executor, Setup, WAIT, collect, done_status, mission},
};

/// Runs `helper` once and returns the system prompt its session started with.
async fn prompt_of_a_run(executor: &mut Executor) -> String {
    let events = collect(
        executor
            .client
            .execute(mission("hi"))
            .await
            .expect("execute")
            .into_inner(),
    )
    .await;
    assert_eq!(done_status(&events), RunStatus::Completed);
    let session = executor.session(&events[0].session_id).await;
    session.messages[0].content.clone()
}

#[tokio::test]
async fn definitions_are_cached_until_the_registry_says_they_changed() {
    let dir = TempDir::new().expect("tmp");
    let registry = FakeRegistry::start().await;
    let setup = Setup {
        data_dir: dir.path().join("executor"),
        registry_url: registry.url.clone(),
        script: "final_text: ok\n".into(),
        max_steps: 10,
        max_run_secs: None,
        paused_ttl: None,
    };
    let mut executor = Executor::start(&setup).await;
    let deadline = tokio::time::Instant::now() + WAIT;
    while registry.state.watchers.load(Ordering::SeqCst) == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the executor never watched"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    assert_eq!(prompt_of_a_run(&mut executor).await, "You help with tests.");
    assert_eq!(prompt_of_a_run(&mut executor).await, "You help with tests.");
    assert_eq!(
        registry.state.gets.load(Ordering::SeqCst),
        1,
        "the second run used the cache"
    );

    registry.update_helper("You are new.");
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if prompt_of_a_run(&mut executor).await == "You are new." {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the change never reached the executor"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    executor.stop().await;
}
