//! A run paused on `ask_user` survives a restart of the executor binary (SIGKILL or SIGTERM)
//! and continues with the answer: over the gateway's answer SSE and over gRPC `Answer`; the
//! completed run survives one too.

use serde_json::json;
use taskforce_proto::v1::{self, run_event::Event};
use taskforce_tests::{Stack, StackOptions};

use crate::helpers::{
    RUN_TIMEOUT, SseReader, create_agent_with_tools, event_names, get_session, grpc_events, send,
};

const AGENT: &str = "asker";
const QUESTION: &str = "Which currency should the totals use?";

/// Asks one question, then answers with the user's reply quoted.
const SCRIPT: &str = r#"
turns:
  - text: "I need one detail first."
    tool_calls:
      - name: ask_user
        id: call_ask
        arguments: {question: "Which currency should the totals use?"}
  - text: "Totals in {{last_message}}: 1234.50"
"#;

async fn stack() -> Stack {
    let stack = StackOptions::full()
        .with_executor()
        .llm_script(SCRIPT)
        .spawn()
        .await
        .expect("stack with executor starts");
    create_agent_with_tools(&stack, AGENT, &["ask_user"]).await;
    stack
}

#[tokio::test]
async fn a_question_survives_a_sigkilled_executor_and_the_answer_sse_finishes_the_run() {
    let mut stack = stack().await;
    let mut sse = SseReader::open(
        &stack,
        "/api/v1/execute/stream",
        &json!({"mission": "Total invoice 42", "agent_id": AGENT}),
    )
    .await;
    let first = sse.rest(RUN_TIMEOUT).await;
    let names = event_names(&first);
    assert!(names.ends_with(&["question", "done"]), "{names:?}");
    let (_, question) = &first[first.len() - 2];
    assert_eq!(question["question"], QUESTION, "{question}");
    assert_eq!(question["call_id"], "call_ask", "{question}");
    assert_eq!(first[first.len() - 1].1["status"], "paused");
    let session = first[0].1["session_id"]
        .as_str()
        .expect("session id")
        .to_owned();
    let last_seq = first[first.len() - 1].1["seq"].as_u64().expect("seq");

    // No shutdown code runs: the paused session must already be on disk.
    let old_pid = stack.executor_pid();
    stack.kill9_executor().expect("executor killed");
    stack.restart_executor().await.expect("executor restarts");
    assert_ne!(stack.executor_pid(), old_pid, "a new process");

    let paused = get_session(&stack, &session).await;
    assert_eq!(paused.status(), v1::RunStatus::Paused, "{paused:?}");
    let pending = paused
        .pending_question
        .as_ref()
        .expect("a pending question");
    assert_eq!(
        (pending.call_id.as_str(), pending.question.as_str()),
        ("call_ask", QUESTION)
    );

    let mut sse = SseReader::open(
        &stack,
        &format!("/api/v1/sessions/{session}/answer"),
        &json!({"answer": "EUR", "call_id": "call_ask"}),
    )
    .await;
    let second = sse.rest(RUN_TIMEOUT).await;
    let names = event_names(&second);
    assert_eq!(names.first(), Some(&"run_started"), "{names:?}");
    assert_eq!(
        names.get(1),
        Some(&"tool_end"),
        "the answer is announced: {names:?}"
    );
    assert!(names.contains(&"token"), "{names:?}");
    assert!(names.ends_with(&["final_answer", "done"]), "{names:?}");
    assert_eq!(second[1].1["call_id"], "call_ask");
    assert_eq!(second[1].1["output"], "EUR");
    let answer = &second[second.len() - 2].1;
    assert_eq!(answer["text"], "Totals in EUR: 1234.50", "{answer}");
    assert_eq!(second[second.len() - 1].1["status"], "completed");
    assert_eq!(
        second[0].1["seq"].as_u64(),
        Some(last_seq + 1),
        "seq continues across the restart"
    );
    assert!(
        second
            .iter()
            .all(|(_, e)| e["session_id"] == session.as_str())
    );

    // The run's end was on disk when `done` went out: a SIGKILL right after keeps it completed
    // (it was left to sled's periodic flush, and came back `failed` without its answer).
    stack.kill9_executor().expect("executor killed again");
    stack
        .restart_executor()
        .await
        .expect("executor restarts again");
    let done = get_session(&stack, &session).await;
    assert_eq!(done.status(), v1::RunStatus::Completed, "{done:?}");
    assert_eq!(done.final_answer, "Totals in EUR: 1234.50");
    assert!(done.pending_question.is_none(), "{done:?}");
    assert!(
        done.messages
            .iter()
            .any(|m| m.role == "tool" && m.call_id == "call_ask" && m.content == "EUR"),
        "the answer is in the conversation: {:?}",
        done.messages
    );
}

#[tokio::test]
async fn a_question_survives_a_sigtermed_executor_and_grpc_answer_finishes_the_run() {
    let mut stack = stack().await;
    let request = v1::ExecuteRequest {
        mission: "Total invoice 7".to_owned(),
        agent_id: Some(AGENT.to_owned()),
        ..Default::default()
    };
    let first = grpc_events(
        stack
            .executor()
            .execute(request)
            .await
            .expect("Execute starts")
            .into_inner(),
    )
    .await;
    let Some(Event::Question(question)) = first.iter().rev().nth(1).and_then(|e| e.event.clone())
    else {
        panic!("the run pauses on a question: {first:?}");
    };
    assert_eq!(question.question, QUESTION);
    let session = first[0].session_id.clone();

    stack
        .stop_executor()
        .await
        .expect("a clean stop on SIGTERM");
    stack.restart_executor().await.expect("executor restarts");

    let answer = |call_id: &str| v1::AnswerRequest {
        answers: Default::default(),
        session_id: session.clone(),
        answer: "CHF".to_owned(),
        call_id: Some(call_id.to_owned()),
        ..Default::default()
    };
    // The guard against answering another question than the one shown.
    let wrong = stack
        .executor()
        .answer(answer("call_other"))
        .await
        .expect_err("a wrong call id is refused");
    assert_eq!(wrong.code(), tonic::Code::FailedPrecondition, "{wrong:?}");

    let second = grpc_events(
        stack
            .executor()
            .answer(answer(&question.call_id))
            .await
            .expect("Answer starts")
            .into_inner(),
    )
    .await;
    let last = second.last().and_then(|e| e.event.clone());
    let Some(Event::Done(done)) = last else {
        panic!("the stream ends with Done: {second:?}");
    };
    assert_eq!(done.status(), v1::RunStatus::Completed, "{second:?}");
    let answer_text = second.iter().find_map(|e| match &e.event {
        Some(Event::FinalAnswer(a)) => Some(a.text.clone()),
        _ => None,
    });
    assert_eq!(answer_text.as_deref(), Some("Totals in CHF: 1234.50"));
    assert_eq!(
        get_session(&stack, &session).await.status(),
        v1::RunStatus::Completed
    );

    // The question was answered once; a second answer has nothing to answer.
    let again = stack
        .executor()
        .answer(answer(&question.call_id))
        .await
        .expect_err("nothing is pending any more");
    assert_eq!(again.code(), tonic::Code::FailedPrecondition, "{again:?}");
}

#[tokio::test]
async fn answers_that_do_not_fit_the_session_are_refused_over_rest_with_clear_errors() {
    let stack = stack().await;
    let r = send(
        stack
            .http()
            .post(stack.url("/api/v1/execute"))
            .json(&json!({"mission": "Total invoice 9", "agent_id": AGENT})),
    )
    .await;
    assert_eq!(r.body["status"], "paused", "{}", r.text);
    assert_eq!(r.body["question"]["call_id"], "call_ask", "{}", r.text);
    let session = r.body["session_id"]
        .as_str()
        .expect("session id")
        .to_owned();
    let answer_url = stack.url(&format!("/api/v1/sessions/{session}/answer"));
    let post = |url: String, body: serde_json::Value| {
        let req = stack.http().post(url).json(&body);
        async move { send(req).await }
    };

    post(answer_url.clone(), json!({"answer": "  "}))
        .await
        .assert_error(400, "invalid_argument")
        .assert_names("answer");
    // An ordinary question has no default: blank or null answers by key are a 400 too.
    let blank = post(
        answer_url.clone(),
        json!({"answers": {"x": " ", "y": null}}),
    )
    .await;
    blank.assert_error(400, "invalid_argument");
    assert_eq!(
        blank.body["details"][0]["field"], "answers",
        "{}",
        blank.text
    );
    post(
        stack.url("/api/v1/sessions/no-such-session/answer"),
        json!({"answer": "EUR"}),
    )
    .await
    .assert_error(404, "not_found");
    // A state conflict is 409 `session_conflict`; the message says what to do.
    let wrong = post(
        answer_url.clone(),
        json!({"answer": "EUR", "call_id": "call_other"}),
    )
    .await;
    assert_eq!(wrong.status, 409, "{}", wrong.text);
    assert_eq!(wrong.body["error"], "session_conflict", "{}", wrong.text);
    assert!(wrong.text.contains("call_ask"), "{}", wrong.text);
    let busy = post(
        stack.url("/api/v1/execute"),
        json!({"mission": "Something else", "agent_id": AGENT, "session_id": session}),
    )
    .await;
    assert_eq!(busy.status, 409, "{}", busy.text);
    assert_eq!(busy.body["error"], "session_conflict", "{}", busy.text);
    assert!(busy.text.contains("answer it first"), "{}", busy.text);

    // The question is still there, and answering it works once.
    let mut sse = SseReader::open(
        &stack,
        &format!("/api/v1/sessions/{session}/answer"),
        &json!({"answer": "USD"}),
    )
    .await;
    let events = sse.rest(RUN_TIMEOUT).await;
    assert_eq!(
        events[events.len() - 1].1["status"],
        "completed",
        "{events:?}"
    );
    let again = post(answer_url, json!({"answer": "USD"})).await;
    assert_eq!(again.status, 409, "{}", again.text);
    assert_eq!(again.body["error"], "session_conflict", "{}", again.text);
    assert!(again.text.contains("no question waiting"), "{}", again.text);

    // Answers by key must use the question's key.
    let r = post(
        stack.url("/api/v1/execute"),
        json!({"mission": "Total invoice 10", "agent_id": AGENT}),
    )
    .await;
    assert_eq!(r.body["status"], "paused", "{}", r.text);
    let orphan = r.body["session_id"].as_str().expect("session").to_owned();
    let answer_url = stack.url(&format!("/api/v1/sessions/{orphan}/answer"));
    let stray = post(answer_url.clone(), json!({"answers": {"nope": "EUR"}})).await;
    stray.assert_error(400, "invalid_argument");
    // The question shows no items: the refusal says to use `answer`, not a key it never showed.
    assert!(
        stray.text.contains("give the answer as the `answer` text")
            && !stray.text.contains("asker.answer"),
        "{}",
        stray.text
    );
    // Its agent deleted, a paused session cannot go on: the answer says so, a cancel ends it.
    let deleted = send(
        stack
            .http()
            .delete(stack.url(&format!("/api/v1/agents/{AGENT}"))),
    )
    .await;
    assert_eq!(deleted.status, 204, "{}", deleted.text);
    // The delete answers once the gateway's copy has it; the executor's copy follows within
    // milliseconds (a busy machine: longer). Until it has, a run of the agent still starts
    // (and pauses on its question, harmlessly); an answer would go on too.
    let seen =
        taskforce_tests::eventually(RUN_TIMEOUT, std::time::Duration::from_millis(50), || {
            let url = stack.url("/api/v1/execute");
            async move {
                let r = post(
                    url,
                    json!({"mission": "Total invoice 10", "agent_id": AGENT}),
                )
                .await;
                (r.status == 404).then_some(())
            }
        })
        .await;
    assert!(seen.is_some(), "the executor still runs the deleted agent");
    let gone = post(answer_url, json!({"answer": "EUR"})).await;
    assert_eq!(gone.status, 409, "{}", gone.text);
    assert!(gone.text.contains("cancel it"), "{}", gone.text);
    let cancel_url = stack.url(&format!("/api/v1/sessions/{orphan}/cancel"));
    let cancelled = post(cancel_url.clone(), json!(null)).await;
    assert_eq!(
        cancelled.body,
        json!({"cancelled": true}),
        "{}",
        cancelled.text
    );
    let ended = get_session(&stack, &orphan).await;
    assert_eq!(ended.status(), v1::RunStatus::Cancelled);
    assert!(ended.pending_question.is_none(), "{ended:?}");
    assert_eq!(
        ended.error.as_ref().map(|e| e.code.as_str()),
        Some("CANCELLED"),
        "{ended:?}"
    );
    let shown = send(
        stack
            .http()
            .get(stack.url(&format!("/api/v1/sessions/{orphan}"))),
    )
    .await;
    assert_eq!(shown.body["error"]["code"], "CANCELLED", "{}", shown.text);
    let twice = post(cancel_url, json!(null)).await;
    assert_eq!(twice.body, json!({"cancelled": false}), "{}", twice.text);
}

#[tokio::test]
async fn ten_simultaneous_answers_to_one_question_continue_the_run_once_and_the_rest_get_409() {
    let stack = stack().await;
    let r = send(
        stack
            .http()
            .post(stack.url("/api/v1/execute"))
            .json(&json!({"mission": "Total invoice 7", "agent_id": AGENT})),
    )
    .await;
    assert_eq!(r.body["status"], "paused", "{}", r.text);
    let session = r.body["session_id"]
        .as_str()
        .expect("session id")
        .to_owned();
    let url = stack.url(&format!("/api/v1/sessions/{session}/answer"));
    let answers = (0..10).map(|i| {
        send(
            stack
                .http()
                .post(url.clone())
                .json(&json!({"answer": format!("CUR{i}")})),
        )
    });
    let replies = futures::future::join_all(answers).await;
    let continued: Vec<_> = replies.iter().filter(|r| r.status == 200).collect();
    let refused = replies.iter().filter(|r| r.status == 409).count();
    assert_eq!(
        (continued.len(), refused),
        (1, 9),
        "{:?}",
        replies
            .iter()
            .map(|r| (r.status, &r.text))
            .collect::<Vec<_>>()
    );
    assert!(
        replies
            .iter()
            .filter(|r| r.status == 409)
            .all(|r| r.body["error"] == "session_conflict"),
        "every refusal is a session_conflict"
    );
    // The one that got in finished the run, with its own answer, once.
    let text = &continued[0].text;
    assert_eq!(text.matches("event: final_answer").count(), 1, "{text}");
    assert_eq!(
        get_session(&stack, &session).await.status(),
        v1::RunStatus::Completed
    );
}

/// A turn that asks two questions: the first waits, and the second's call, whose `tool_start`
/// went out, ends as a `tool_error` on the stream (the model reads the same), so every started
/// call is ended.
#[tokio::test]
async fn a_second_question_in_one_turn_ends_as_a_tool_error_on_the_stream() {
    let stack = StackOptions::full()
        .with_executor()
        .llm_script(
            r#"
turns:
  - tool_calls:
      - {name: ask_user, id: q1, arguments: {question: "First?"}}
      - {name: ask_user, id: q2, arguments: {question: "Second?"}}
  - text: "done"
"#,
        )
        .spawn()
        .await
        .expect("stack with executor starts");
    create_agent_with_tools(&stack, AGENT, &["ask_user"]).await;
    let events = SseReader::open(
        &stack,
        "/api/v1/execute/stream",
        &json!({"mission": "Ask twice", "agent_id": AGENT}),
    )
    .await
    .rest(RUN_TIMEOUT)
    .await;
    let started: Vec<&str> = events
        .iter()
        .filter(|(n, _)| n == "tool_start")
        .filter_map(|(_, e)| e["call_id"].as_str())
        .collect();
    assert_eq!(started, ["q1", "q2"], "{events:?}");
    let refused = events
        .iter()
        .find(|(n, e)| n == "tool_error" && e["call_id"] == "q2")
        .unwrap_or_else(|| panic!("q2 has no end: {events:?}"));
    assert!(
        refused.1["message"]
            .as_str()
            .is_some_and(|m| m.contains("only one question")),
        "{refused:?}"
    );
    assert_eq!(events[events.len() - 1].1["status"], "paused", "{events:?}");
}
