//! Runs: event order, error results, bad requests, profiles, and a client that leaves.

use std::{sync::atomic::Ordering, time::Duration};

use futures::StreamExt;

use taskforce_proto::v1::{
    AgentStatus, DeleteSessionRequest, ExecuteRequest, GetSessionRequest, ListSessionsRequest,
    RunStatus, run_event::Event,
};
use tempfile::TempDir;
use tonic::Code;

use crate::{
    fake_registry::FakeRegistry,
    support::{Executor, WAIT, collect, done_status, kinds, mission, setup},
};

/// Twenty words: streamed as twenty tokens.
const TWENTY: &str = "one two three four five six seven eight nine ten eleven twelve thirteen \
fourteen fifteen sixteen seventeen eighteen nineteen twenty";

#[tokio::test]
async fn a_tool_call_then_a_twenty_token_answer_streams_in_order() {
    let dir = TempDir::new().expect("tmp");
    let registry = FakeRegistry::start().await;
    let script = format!(
        "turns:\n  - text: \"Checking.\"\n    tool_calls:\n      - {{name: probe, id: c1, arguments: {{x: hello}}}}\n  - text: \"{TWENTY}\"\n"
    );
    let mut executor = Executor::start(&setup(&dir, &registry, &script, 10)).await;
    let stream = executor
        .client
        .execute(mission("probe it"))
        .await
        .expect("execute")
        .into_inner();
    let events = collect(stream).await;

    let mut expected = vec!["started", "token", "tool_start", "tool_end"];
    expected.extend(std::iter::repeat_n("token", 20));
    expected.extend(["final", "done"]);
    assert_eq!(kinds(&events), expected);
    let session_id = events[0].session_id.clone();
    for (i, event) in events.iter().enumerate() {
        assert_eq!(event.seq, i as u64, "seq is contiguous from 0");
        assert_eq!(event.session_id, session_id);
        assert!(
            event.agent_path.is_empty(),
            "the top agent has an empty path"
        );
    }
    match &events[3].event {
        Some(Event::ToolEnd(end)) => {
            assert_eq!((end.call_id.as_str(), end.tool.as_str()), ("c1", "probe"));
            assert_eq!(end.output, "probed: hello");
            assert!(!end.is_error);
        }
        other => panic!("expected ToolEnd, got {other:?}"),
    }
    match &events[events.len() - 2].event {
        Some(Event::FinalAnswer(answer)) => assert_eq!(answer.text, TWENTY),
        other => panic!("expected FinalAnswer, got {other:?}"),
    }
    assert_eq!(done_status(&events), RunStatus::Completed);

    let session = executor.session(&session_id).await;
    assert_eq!(session.status(), RunStatus::Completed);
    assert_eq!(session.final_answer, TWENTY);
    assert_eq!(session.next_seq, events.len() as u64);
    // system, user, assistant (call), tool, assistant (answer)
    assert_eq!(session.messages.len(), 5);

    // BUSY with the mission at the start, IDLE at the end (the IDLE report follows `Done`).
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let reports = registry.reports.lock().expect("reports").clone();
        if reports.len() >= 2 {
            assert_eq!(
                reports[0],
                ("helper".into(), AgentStatus::Busy, "probe it".into())
            );
            assert_eq!(reports[1].1, AgentStatus::Idle);
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "reports: {reports:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    executor.stop().await;
}

#[tokio::test]
async fn unknown_tools_and_malformed_arguments_become_error_results() {
    let dir = TempDir::new().expect("tmp");
    let registry = FakeRegistry::start().await;
    let script = "turns:\n  - tool_calls:\n      - {name: nope, id: u1, arguments: {}}\n      - {name: probe, id: m1, arguments: \"{not json\"}\n  - text: done\n";
    let mut executor = Executor::start(&setup(&dir, &registry, script, 10)).await;
    let events = collect(
        executor
            .client
            .execute(mission("try"))
            .await
            .expect("execute")
            .into_inner(),
    )
    .await;
    let errors: Vec<(String, String)> = events
        .iter()
        .filter_map(|e| match &e.event {
            Some(Event::ToolError(err)) => Some((err.call_id.clone(), err.message.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(errors.len(), 2, "{events:?}");
    assert!(
        errors
            .iter()
            .any(|(id, m)| id == "u1" && m.contains("unknown tool `nope`"))
    );
    assert!(
        errors
            .iter()
            .any(|(id, m)| id == "m1" && m.contains("not valid JSON"))
    );
    assert_eq!(done_status(&events), RunStatus::Completed);
    executor.stop().await;
}

#[tokio::test]
async fn bad_requests_are_refused_with_clear_codes() {
    let dir = TempDir::new().expect("tmp");
    let registry = FakeRegistry::start().await;
    let mut executor = Executor::start(&setup(&dir, &registry, "turns: []\n", 10)).await;

    let err = executor
        .client
        .execute(ExecuteRequest {
            agent_id: Some("nobody".into()),
            ..mission("hello")
        })
        .await
        .expect_err("unknown agent");
    assert_eq!(err.code(), Code::NotFound);
    assert!(err.message().contains("nobody"), "{}", err.message());

    let err = executor
        .client
        .execute(mission("   "))
        .await
        .expect_err("empty mission");
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("mission"), "{}", err.message());

    let err = executor
        .client
        .execute(ExecuteRequest {
            agent_id: None,
            profile: Some("nope".into()),
            ..mission("hello")
        })
        .await
        .expect_err("unknown profile");
    assert_eq!(err.code(), Code::NotFound);

    let err = executor
        .client
        .get_session(GetSessionRequest {
            session_id: "missing".into(),
        })
        .await
        .expect_err("unknown session");
    assert_eq!(err.code(), Code::NotFound);
    executor.stop().await;
}

#[tokio::test]
async fn a_profile_runs_when_no_agent_id_is_given() {
    let dir = TempDir::new().expect("tmp");
    let registry = FakeRegistry::start().await;
    let script =
        "turns:\n  - tool_calls:\n      - {name: probe, arguments: {x: p}}\n  - text: ok\n";
    let mut executor = Executor::start(&setup(&dir, &registry, script, 10)).await;
    let request = ExecuteRequest {
        agent_id: None,
        profile: Some("dev".into()),
        ..mission("as before")
    };
    let events = collect(
        executor
            .client
            .execute(request)
            .await
            .expect("execute")
            .into_inner(),
    )
    .await;
    match &events[0].event {
        Some(Event::RunStarted(started)) => assert_eq!(started.agent_id, "dev"),
        other => panic!("expected RunStarted, got {other:?}"),
    }
    assert!(kinds(&events).contains(&"tool_end"), "{events:?}");
    assert_eq!(done_status(&events), RunStatus::Completed);
    executor.stop().await;
}

#[tokio::test]
async fn an_answer_cut_off_at_the_token_limit_completes_with_a_warning() {
    let dir = TempDir::new().expect("tmp");
    let registry = FakeRegistry::start().await;
    let script = "turns:\n  - {match: total, text: The invoice total is 12, stop_reason: max_tokens}\n  - {match: secret, text: I cannot, stop_reason: refusal}\n";
    let mut executor = Executor::start(&setup(&dir, &registry, script, 10)).await;
    let mut warned = Vec::new();
    for ask in ["the total?", "the secret?"] {
        let events = collect(
            executor
                .client
                .execute(mission(ask))
                .await
                .expect("execute")
                .into_inner(),
        )
        .await;
        assert_eq!(done_status(&events), RunStatus::Completed, "{events:?}");
        // The warning comes before the answer it is about.
        let k = kinds(&events);
        let (w, a) = (
            k.iter().position(|k| *k == "warning"),
            k.iter().position(|k| *k == "final"),
        );
        assert!(w.is_some() && w < a, "{k:?}");
        warned.extend(events.iter().filter_map(|e| match &e.event {
            Some(Event::Warning(w)) => Some(w.code.clone()),
            _ => None,
        }));
    }
    assert_eq!(warned, ["OUTPUT_TRUNCATED", "MODEL_REFUSED"]);
    executor.stop().await;
}

#[tokio::test]
async fn a_client_that_drops_the_stream_cancels_the_run() {
    let dir = TempDir::new().expect("tmp");
    let registry = FakeRegistry::start().await;
    let script = "turns:\n  - tool_calls:\n      - {name: probe, arguments: {wait: true}}\n";
    let mut executor = Executor::start(&setup(&dir, &registry, script, 10)).await;
    let mut stream = executor
        .client
        .execute(mission("wait forever"))
        .await
        .expect("execute")
        .into_inner();
    let mut session_id = String::new();
    loop {
        let event = tokio::time::timeout(WAIT, stream.message())
            .await
            .expect("event in time")
            .expect("stream ok")
            .expect("not ended");
        session_id.clone_from(&event.session_id);
        if matches!(event.event, Some(Event::ToolStart(_))) {
            break;
        }
    }
    assert!(!executor.probe.saw_cancel.load(Ordering::SeqCst));
    drop(stream);
    let dropped = tokio::time::Instant::now();
    while !executor.probe.saw_cancel.load(Ordering::SeqCst) {
        assert!(
            dropped.elapsed() < Duration::from_secs(1),
            "the tool saw no cancellation"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The session records the cancellation.
    loop {
        let session = executor.session(&session_id).await;
        if session.status() == RunStatus::Cancelled {
            break;
        }
        assert!(dropped.elapsed() < WAIT, "status {:?}", session.status());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    executor.stop().await;
}

#[tokio::test]
async fn a_call_past_its_deadline_ends_and_cancels_the_run() {
    let dir = TempDir::new().expect("tmp");
    let registry = FakeRegistry::start().await;
    let script = "turns:\n  - tool_calls:\n      - {name: probe, arguments: {wait: true}}\n";
    let mut executor = Executor::start(&setup(&dir, &registry, script, 10)).await;
    // A client that gives its call a deadline and keeps reading (the server, not the client,
    // is to end the call when it passes).
    let mut request = tonic::Request::new(mission("wait forever"));
    request.set_timeout(Duration::from_millis(500));
    let mut stream = executor
        .client
        .execute(request)
        .await
        .expect("execute")
        .into_inner();
    let ended = loop {
        match tokio::time::timeout(WAIT, stream.message())
            .await
            .expect("the call ends in time")
        {
            Ok(Some(_)) => {}
            Ok(None) => panic!("the stream ended without an error"),
            Err(status) => break status,
        }
    };
    assert_eq!(ended.code(), tonic::Code::DeadlineExceeded, "{ended:?}");
    let since = tokio::time::Instant::now();
    while !executor.probe.saw_cancel.load(Ordering::SeqCst) {
        assert!(since.elapsed() < WAIT, "the tool saw no cancellation");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    executor.stop().await;
}

/// Every run start is made durable (session and `seq` reservation flushed) before its first
/// event; hundreds of runs at once must share flushes, not pile them up. Concurrent sled
/// `flush_async` calls once deadlocked the store here, and every later run then waited out the
/// flush timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_concurrent_runs_all_complete_promptly() {
    let dir = TempDir::new().expect("tmp");
    let registry = FakeRegistry::start().await;
    let script = "turns:\n  - tool_calls:\n      - {name: probe, id: c1, arguments: {x: hi}}\n  - text: done\n";
    let executor = Executor::start(&setup(&dir, &registry, script, 5)).await;
    let started = std::time::Instant::now();
    let runs = (0..400).map(|i| {
        let mut client = executor.client.clone();
        async move {
            let stream = client
                .execute(mission(&format!("run {i}")))
                .await
                .expect("execute")
                .into_inner();
            done_status(&collect(stream).await)
        }
    });
    let statuses = futures::stream::iter(runs)
        .buffer_unordered(50)
        .collect::<Vec<_>>()
        .await;
    assert!(
        statuses.iter().all(|s| *s == RunStatus::Completed),
        "{statuses:?}"
    );
    // No run waited out a flush timeout (5 s); on a loaded 2-core machine 400 debug-build runs
    // take a few seconds.
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "400 runs took {:?}",
        started.elapsed()
    );
    executor.stop().await;
}

/// A small tmpfs (`None` where none can be mounted: not root, no `mount`), unmounted when
/// dropped, also by a test that fails.
struct SmallDisk(std::path::PathBuf);

impl SmallDisk {
    fn mount(dir: &std::path::Path) -> Option<Self> {
        std::fs::create_dir_all(dir).ok()?;
        std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=8m", "tmpfs"])
            .arg(dir)
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
            .then(|| Self(dir.to_path_buf()))
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

/// An executor running `script` with its data on a small tmpfs (`None` where none can be
/// mounted), the tmpfs, and what they need kept alive.
async fn on_small_disk(script: &str) -> Option<(Executor, SmallDisk, TempDir, FakeRegistry)> {
    let dir = TempDir::new().expect("tmp");
    let Some(disk) = SmallDisk::mount(&dir.path().join("small")) else {
        eprintln!("note: no tmpfs could be mounted (not root?); the full-disk path is not checked");
        return None;
    };
    let registry = FakeRegistry::start().await;
    let mut config = setup(&dir, &registry, script, 10);
    config.data_dir = disk.0.join("executor");
    Some((Executor::start(&config).await, disk, dir, registry))
}

/// Checks that `executor`, its store failed, refuses a new run, saying it needs a restart.
async fn refuses_new_runs_until_restarted(executor: &mut Executor) {
    let refused = executor
        .client
        .execute(mission("again"))
        .await
        .expect_err("refused");
    assert_eq!(refused.code(), Code::Unavailable, "{refused:?}");
    assert!(refused.message().contains("restart"), "{refused:?}");
}

/// Fills the file system of `dir` with one file; returns it.
fn fill(dir: &std::path::Path) -> std::path::PathBuf {
    use std::io::Write;
    let path = dir.join("filler");
    let mut f = std::fs::File::create(&path).expect("filler");
    let block = vec![0u8; 64 * 1024];
    while f.write_all(&block).is_ok() {}
    let _ = f.sync_all();
    path
}

#[tokio::test]
async fn a_run_whose_end_cannot_be_stored_fails_and_new_runs_are_refused() {
    // An answer larger than what sled's log has room for once the disk is full.
    let script = format!(
        "turns:\n  - {{text: {}, delay_ms: 1500}}\n",
        "x".repeat(1024 * 1024)
    );
    let Some((mut executor, disk, _dir, _registry)) = on_small_disk(&script).await else {
        return;
    };
    let mut stream = executor.stream("go").await;
    // The run is stored and under way; then the disk fills up before it ends.
    let first = stream.next().await.expect("an event").expect("ok");
    assert!(
        matches!(first.event, Some(Event::RunStarted(_))),
        "{first:?}"
    );
    let filler = fill(&disk.0);
    let events = collect(stream).await;
    assert_eq!(done_status(&events), RunStatus::Failed, "{events:?}");
    let failed = events
        .iter()
        .any(|e| matches!(&e.event, Some(Event::Error(err)) if err.code == "STORE_FAILED"));
    assert!(failed, "{events:?}");
    // Its session says how it ended, not the last state that reached the disk.
    let session = executor.session(&events[0].session_id).await;
    assert_eq!(session.status(), RunStatus::Failed, "{session:?}");
    assert_eq!(
        session.error.as_ref().map(|e| e.code.as_str()),
        Some("STORE_FAILED")
    );
    // And its listing says the same, also under a status filter.
    for status in [RunStatus::Unspecified, RunStatus::Failed] {
        let listed = executor
            .client
            .list_sessions(ListSessionsRequest {
                status: status as i32,
                ..Default::default()
            })
            .await
            .expect("list")
            .into_inner();
        let summary = listed
            .sessions
            .iter()
            .find(|s| s.session_id == events[0].session_id)
            .unwrap_or_else(|| panic!("listed under {status:?}: {listed:?}"));
        assert_eq!(summary.status(), RunStatus::Failed, "{summary:?}");
    }
    // Until a restart, new runs are refused, saying why, and nothing is stored.
    let _ = std::fs::remove_file(&filler);
    refuses_new_runs_until_restarted(&mut executor).await;
    // The stop says its last flush did not finish, and it does not hang on it.
    assert!(executor.stop_with().await.is_err());
}

#[tokio::test]
async fn a_delete_that_cannot_be_stored_stops_new_runs_as_a_failed_save_does() {
    let Some((mut executor, disk, _dir, _registry)) =
        on_small_disk("turns:\n  - {text: done}\n").await
    else {
        return;
    };
    let mut ids = Vec::new();
    for n in 0..20 {
        let events = collect(executor.stream(&format!("run {n}")).await).await;
        assert_eq!(done_status(&events), RunStatus::Completed, "run {n}");
        ids.push(events[0].session_id.clone());
    }
    let filler = fill(&disk.0);
    // Deletes write too: on a full disk one of them fails, and from then on the executor
    // says it cannot store sessions (its readiness with it) until it is restarted.
    let mut failed = None;
    for id in &ids {
        let deleted = executor
            .client
            .delete_session(DeleteSessionRequest {
                session_id: id.clone(),
            })
            .await;
        if let Err(status) = deleted {
            failed = Some(status);
            break;
        }
    }
    let failed = failed.expect("a delete on a full disk fails");
    assert_eq!(failed.code(), Code::Unavailable, "{failed:?}");
    assert!(
        !executor.serving().await,
        "health says it cannot store sessions"
    );
    let _ = std::fs::remove_file(&filler);
    refuses_new_runs_until_restarted(&mut executor).await;
    let _ = executor.stop_with().await;
}
