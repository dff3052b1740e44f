//! Sessions: a question pauses the run, survives a restart, and `Answer` completes it.

use taskforce_proto::v1::{
    AnswerRequest, CancelRequest, ExecuteRequest, GetSessionRequest, RunStatus, run_event::Event,
};
use tempfile::TempDir;
use tonic::Code;

use crate::{
    fake_registry::FakeRegistry,
    support::{Executor, Setup, collect, done_status, kinds, mission, setup},
};

/// A script whose model asks `Which city?` (call `q1`) first.
const ASK: &str =
    "turns:\n  - tool_calls:\n      - {name: ask, id: q1, arguments: {question: Which city?}}\n";

#[tokio::test]
async fn a_question_survives_a_restart_and_the_answer_completes_the_run() {
    let dir = TempDir::new().expect("tmp");
    let registry = FakeRegistry::start().await;
    let setup = Setup {
        data_dir: dir.path().join("executor"),
        registry_url: registry.url.clone(),
        script: format!("{ASK}  - text: \"Going to {{{{last_message}}}}\"\n"),
        max_steps: 10,
        max_run_secs: None,
        paused_ttl: None,
    };

    let mut executor = Executor::start(&setup).await;
    let events = executor.run("plan a trip").await;
    assert_eq!(
        kinds(&events),
        ["started", "tool_start", "question", "done"]
    );
    match &events[2].event {
        Some(Event::Question(q)) => {
            assert_eq!(
                (q.call_id.as_str(), q.question.as_str()),
                ("q1", "Which city?")
            );
        }
        other => panic!("expected Question, got {other:?}"),
    }
    assert_eq!(done_status(&events), RunStatus::Paused);
    let session_id = events[0].session_id.clone();
    executor.stop().await;

    let mut executor = Executor::start(&setup).await;
    let session = executor
        .client
        .get_session(GetSessionRequest {
            session_id: session_id.clone(),
        })
        .await
        .expect("session after restart")
        .into_inner();
    assert_eq!(session.status(), RunStatus::Paused);
    let pending = session.pending_question.expect("pending question");
    assert_eq!(pending.call_id, "q1");

    let err = executor
        .client
        .answer(AnswerRequest {
            answers: Default::default(),
            session_id: session_id.clone(),
            answer: "Lisbon".into(),
            call_id: Some("other".into()),
            ..Default::default()
        })
        .await
        .expect_err("wrong call id");
    assert_eq!(err.code(), Code::FailedPrecondition);

    let resumed = collect(
        executor
            .client
            .answer(AnswerRequest {
                answers: Default::default(),
                session_id: session_id.clone(),
                answer: "Lisbon".into(),
                call_id: Some("q1".into()),
                ..Default::default()
            })
            .await
            .expect("answer")
            .into_inner(),
    )
    .await;
    assert_eq!(
        kinds(&resumed),
        [
            "started", "tool_end", "token", "token", "token", "final", "done"
        ]
    );
    assert_eq!(
        resumed[0].seq,
        events.len() as u64,
        "seq continues across the restart"
    );
    match &resumed[5].event {
        Some(Event::FinalAnswer(answer)) => assert_eq!(answer.text, "Going to Lisbon"),
        other => panic!("expected FinalAnswer, got {other:?}"),
    }
    assert_eq!(done_status(&resumed), RunStatus::Completed);

    let err = executor
        .client
        .answer(AnswerRequest {
            session_id,
            answer: "again".into(),
            call_id: None,
            ..Default::default()
        })
        .await
        .expect_err("nothing pending");
    assert_eq!(err.code(), Code::FailedPrecondition);
    executor.stop().await;
}

#[tokio::test]
async fn a_question_nobody_answers_within_the_paused_ttl_is_cancelled() {
    let dir = TempDir::new().expect("tmp");
    let registry = FakeRegistry::start().await;
    let mut setup = setup(&dir, &registry, ASK, 10);
    setup.paused_ttl = Some(std::time::Duration::from_secs(1));
    let mut executor = Executor::start(&setup).await;
    let events = executor.run("plan a trip").await;
    assert_eq!(done_status(&events), RunStatus::Paused);
    let session_id = events[0].session_id.clone();

    // Swept every second: cancelled within a few.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    let session = loop {
        let session = executor.session(&session_id).await;
        if session.status() != RunStatus::Paused {
            break session;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "still paused past its TTL"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert_eq!(session.status(), RunStatus::Cancelled);
    assert!(session.pending_question.is_none());
    let error = session.error.expect("why it ended");
    assert_eq!(error.code, "CANCELLED");
    assert!(
        error
            .message
            .contains("the question went unanswered for 1.0 seconds")
            && error.message.contains("--paused-session-ttl-hours"),
        "{}",
        error.message
    );

    // The question is gone: an answer is refused and changes nothing.
    let err = executor
        .client
        .answer(AnswerRequest {
            session_id: session_id.clone(),
            answer: "Lisbon".into(),
            call_id: Some("q1".into()),
            ..Default::default()
        })
        .await
        .expect_err("no question left");
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert!(
        err.message()
            .contains("(it is cancelled: the question went unanswered for 1.0 seconds"),
        "{}",
        err.message()
    );
    assert_eq!(
        executor.session(&session_id).await.status(),
        RunStatus::Cancelled
    );
    executor.stop().await;
}

/// A cancel's answer is what became of the run: `true` when it ends cancelled, `false` when it
/// had ended (completed) already, also when the cancel comes as the run is ending.
#[tokio::test]
async fn a_cancel_is_answered_true_only_for_a_run_it_cancelled() {
    let dir = TempDir::new().expect("tmp");
    let registry = FakeRegistry::start().await;
    let setup = setup(
        &dir,
        &registry,
        "token_delay_ms: 1\nturns:\n  - text: \"one two three four five six\"\n",
        10,
    );
    let mut executor = Executor::start(&setup).await;
    let (mut cancelled, mut completed) = (0, 0);
    for i in 0..80u64 {
        let mut stream = executor.stream("go").await;
        let first = stream.message().await.expect("ok").expect("event");
        let mut seen = vec![first.clone()];
        if i % 2 == 1 {
            // As the run ends: right after its last token, while its end is being stored.
            while seen
                .iter()
                .filter(|e| matches!(e.event, Some(Event::Token(_))))
                .count()
                < 6
            {
                seen.push(stream.message().await.expect("ok").expect("event"));
            }
        }
        tokio::time::sleep(std::time::Duration::from_micros((i % 8) * 250)).await;
        let told = executor.cancel(&first.session_id).await;
        seen.extend(collect(stream).await);
        let streamed = done_status(&seen);
        let stored = executor.session(&first.session_id).await.status();
        assert_eq!(stored, streamed, "run {i}: stored and streamed ends differ");
        if told {
            assert_eq!(streamed, RunStatus::Cancelled, "run {i}: told cancelled");
            cancelled += 1;
        } else {
            assert_eq!(
                streamed,
                RunStatus::Completed,
                "run {i}: told not cancelled"
            );
            completed += 1;
        }
    }
    assert!(
        cancelled > 0,
        "no cancel came in time ({completed} completed)"
    );
    executor.stop().await;
}

/// A cancel that meets an answer being checked waits for it: when the answer is refused, the
/// cancel ends the question (it never says `true` and leaves the session waiting).
#[tokio::test]
async fn a_cancel_meeting_a_refused_answer_still_ends_the_question() {
    let dir = TempDir::new().expect("tmp");
    let registry = FakeRegistry::start().await;
    let setup = setup(&dir, &registry, ASK, 10);
    let mut executor = Executor::start(&setup).await;
    for i in 0..30 {
        let events = executor.run("plan a trip").await;
        assert_eq!(done_status(&events), RunStatus::Paused);
        let session_id = events[0].session_id.clone();
        let mut answering = executor.client.clone();
        let answer = AnswerRequest {
            session_id: session_id.clone(),
            answer: "Lisbon".into(),
            call_id: Some("not-the-question".into()),
            ..Default::default()
        };
        let (refused, told) = tokio::join!(
            answering.answer(answer),
            executor.client.cancel(CancelRequest {
                session_id: session_id.clone(),
            })
        );
        assert_eq!(
            refused.expect_err("a wrong call id").code(),
            Code::FailedPrecondition
        );
        assert!(told.expect("cancel").into_inner().cancelled, "try {i}");
        let session = executor.session(&session_id).await;
        assert_eq!(session.status(), RunStatus::Cancelled, "try {i}");
        assert!(session.pending_question.is_none(), "try {i}");
    }
    executor.stop().await;
}

#[tokio::test]
async fn cancel_and_shutdown_end_live_streams_with_done_cancelled() {
    let dir = TempDir::new().expect("tmp");
    let registry = FakeRegistry::start().await;
    let setup = Setup {
        data_dir: dir.path().join("executor"),
        registry_url: registry.url.clone(),
        script: "turns:\n  - tool_calls:\n      - {name: probe, arguments: {wait: true}}\n".into(),
        max_steps: 10,
        max_run_secs: None,
        paused_ttl: None,
    };
    let mut executor = Executor::start(&setup).await;

    // Cancel: the stream ends with Done{CANCELLED}.
    let mut stream = executor
        .client
        .execute(mission("wait"))
        .await
        .expect("execute")
        .into_inner();
    let first = stream.message().await.expect("ok").expect("event");
    let cancelled = executor
        .client
        .cancel(CancelRequest {
            session_id: first.session_id.clone(),
        })
        .await
        .expect("cancel")
        .into_inner();
    assert!(cancelled.cancelled);
    let rest = collect(stream).await;
    assert_eq!(done_status(&rest), RunStatus::Cancelled);

    // Shutdown: a live stream also gets Done{CANCELLED} before it closes.
    let mut client = executor.client.clone();
    let stream = client
        .execute(mission("wait again"))
        .await
        .expect("execute")
        .into_inner();
    let reader = tokio::spawn(collect(stream));
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    drop(client);
    executor.stop().await;
    let events = reader.await.expect("reader");
    assert_eq!(done_status(&events), RunStatus::Cancelled);
}

#[tokio::test]
async fn execute_with_a_session_id_continues_the_conversation() {
    let dir = TempDir::new().expect("tmp");
    let registry = FakeRegistry::start().await;
    let setup = Setup {
        data_dir: dir.path().join("executor"),
        registry_url: registry.url.clone(),
        script: "turns:\n  - text: first\n  - text: \"second: {{last_message}}\"\n".into(),
        max_steps: 10,
        max_run_secs: None,
        paused_ttl: None,
    };
    let mut executor = Executor::start(&setup).await;
    let request = |text: &str| ExecuteRequest {
        session_id: Some("my-thread".into()),
        ..mission(text)
    };
    let first = collect(
        executor
            .client
            .execute(request("one"))
            .await
            .expect("execute")
            .into_inner(),
    )
    .await;
    assert_eq!(first[0].session_id, "my-thread");
    let second = collect(
        executor
            .client
            .execute(request("two"))
            .await
            .expect("execute")
            .into_inner(),
    )
    .await;
    assert_eq!(
        second[0].seq,
        first.len() as u64,
        "seq continues in the session"
    );
    match &second[second.len() - 2].event {
        Some(Event::FinalAnswer(answer)) => assert_eq!(answer.text, "second: two"),
        other => panic!("expected FinalAnswer, got {other:?}"),
    }
    let session = executor.session("my-thread").await;
    // system, user, assistant, user, assistant
    assert_eq!(session.messages.len(), 5);
    assert_eq!(session.mission, "two");
    executor.stop().await;
}

#[tokio::test]
async fn an_unreachable_registry_is_unavailable() {
    let dir = TempDir::new().expect("tmp");
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", closed.local_addr().expect("addr"));
    drop(closed);
    let setup = Setup {
        data_dir: dir.path().join("executor"),
        registry_url: url,
        script: "turns: []\n".into(),
        max_steps: 10,
        max_run_secs: None,
        paused_ttl: None,
    };
    let mut executor = Executor::start(&setup).await;
    let err = executor
        .client
        .execute(mission("hi"))
        .await
        .expect_err("no registry");
    assert_eq!(err.code(), Code::Unavailable, "{}", err.message());
    executor.stop().await;
}

#[tokio::test]
async fn of_many_answers_to_one_question_exactly_one_continues_the_run() {
    let dir = TempDir::new().expect("tmp");
    let registry = FakeRegistry::start().await;
    let setup = Setup {
        data_dir: dir.path().join("executor"),
        registry_url: registry.url.clone(),
        script: "turns:\n  - tool_calls:\n      - {name: ask, id: q1, arguments: {question: Which city?}}\n  - text: \"Going to {{last_message}}\"\n    delay_ms: 200\n".into(),
        max_steps: 10,
        max_run_secs: None,
        paused_ttl: None,
    };
    let executor = Executor::start(&setup).await;
    let events = collect(
        executor
            .client
            .clone()
            .execute(mission("plan a trip"))
            .await
            .expect("execute")
            .into_inner(),
    )
    .await;
    assert_eq!(done_status(&events), RunStatus::Paused);
    let session_id = events[0].session_id.clone();

    let answers = (0..8).map(|i| {
        let mut client = executor.client.clone();
        let session_id = session_id.clone();
        async move {
            client
                .answer(AnswerRequest {
                    session_id,
                    answer: format!("City {i}"),
                    call_id: None,
                    ..Default::default()
                })
                .await
        }
    });
    let results = futures::future::join_all(answers).await;
    let mut streams = Vec::new();
    for result in results {
        match result {
            Ok(stream) => streams.push(stream.into_inner()),
            Err(status) => assert_eq!(status.code(), Code::FailedPrecondition, "{status:?}"),
        }
    }
    assert_eq!(streams.len(), 1, "exactly one answer wins");
    let Some(stream) = streams.pop() else {
        unreachable!("one stream")
    };
    let resumed = collect(stream).await;
    assert_eq!(done_status(&resumed), RunStatus::Completed);
    let session = executor
        .client
        .clone()
        .get_session(GetSessionRequest {
            session_id: session_id.clone(),
        })
        .await
        .expect("session")
        .into_inner();
    assert_eq!(session.status(), RunStatus::Completed);
    // system, mission, the question's call, its one answer, the final text.
    assert_eq!(session.messages.len(), 5, "{:?}", session.messages);
    let answer = session.final_answer;
    assert!(answer.starts_with("Going to City "), "{answer}");
    executor.stop().await;
}
