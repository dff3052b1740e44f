//! Faults from issue 3 through the real binaries: each gives a clear error event or status,
//! keeps the executor serving, and loses no session. An LLM answering 500s, an LLM stream that
//! stalls, malformed tool-call JSON from the LLM, a stored definition broken by hand, a tool
//! printing 20 MB, a tool that hangs past its timeout.

use serde_json::{Value, json};
use taskforce_proto::v1;
use taskforce_tests::{Stack, StackOptions, eventually};

use crate::{
    fake_llm::{self, FakeLlm, OPENAI_KEY, anthropic, openai},
    helpers::{
        EDIT_VISIBLE_WITHIN, RUN_TIMEOUT, STEP, SseReader, create_agent_with_tools, event_names,
        get, get_session, hand_written_yaml, send,
    },
    run_cancel::{SLEEPER_SCRIPT, assert_gone},
};

/// Runs `agent_id` with `mission` over the gateway's SSE stream; every event.
async fn stream(stack: &Stack, agent_id: &str, mission: &str) -> Vec<(String, Value)> {
    SseReader::open(
        stack,
        "/api/v1/execute/stream",
        &json!({"mission": mission, "agent_id": agent_id}),
    )
    .await
    .rest(RUN_TIMEOUT)
    .await
}

/// The first event named `name`.
fn first<'a>(events: &'a [(String, Value)], name: &str) -> &'a Value {
    events
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, e)| e)
        .unwrap_or_else(|| panic!("no `{name}` event: {:?}", event_names(events)))
}

/// `POST /api/v1/execute`, the whole run in one reply.
async fn execute(stack: &Stack, body: &Value) -> crate::helpers::Reply {
    send(stack.http().post(stack.url("/api/v1/execute")).json(body)).await
}

#[tokio::test]
async fn llm_500s_are_retried_then_fail_the_run_with_an_error_event_and_the_executor_keeps_serving()
{
    let llm = FakeLlm::start(vec![
        openai::error(500, "upstream exploded"),
        openai::error(500, "upstream exploded"),
        openai::error(500, "upstream exploded"),
        openai::text(&["Recovered."]),
    ])
    .await;
    let (stack, _unused) = fake_llm::openai_stack(&llm).await;

    let events = stream(&stack, "invoice-extractor", "Total invoice 42").await;
    let names = event_names(&events);
    assert_eq!(names, ["run_started", "error", "done"], "{events:?}");
    let error = first(&events, "error");
    assert_eq!(error["code"], "LLM_ERROR", "{error}");
    let message = error["message"].as_str().unwrap_or_default();
    for needle in ["fake_openai", "500", "upstream exploded", "3 attempt"] {
        assert!(message.contains(needle), "{needle:?} in {message:?}");
    }
    assert!(!message.contains(OPENAI_KEY));
    assert_eq!(first(&events, "done")["status"], "failed");
    assert_eq!(llm.seen().len(), 3, "max_attempts: 3");
    let failed = events[0].1["session_id"].as_str().expect("session id");

    // The process keeps serving and the failed session is kept.
    let r = execute(
        &stack,
        &json!({"mission": "Total invoice 43", "agent_id": "invoice-extractor"}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["status"], "completed", "{}", r.text);
    assert_eq!(r.body["final_answer"], "Recovered.", "{}", r.text);
    let stored = get_session(&stack, failed).await;
    assert_eq!(stored.status(), v1::RunStatus::Failed, "{stored:?}");
    assert_eq!(stored.mission, "Total invoice 42");
    // The session says why, for a client that was not listening.
    let why = stored.error.as_ref().expect("the run's error is kept");
    assert_eq!(why.code, "LLM_ERROR");
    assert_eq!(why.message, message);
    fake_llm::assert_not_logged(&stack, OPENAI_KEY);
    // The failed call is counted once (its retries inside it), the good one is timed.
    let metrics = stack
        .executor_metrics_addr()
        .expect("the executor's metrics");
    let scraped = send(stack.http().get(format!("http://{metrics}/metrics"))).await;
    assert!(
        scraped
            .text
            .contains("taskforce_llm_errors_total{provider=\"fake_openai\"} 1"),
        "{}",
        scraped.text
    );
    assert!(
        scraped
            .text
            .contains("taskforce_llm_request_duration_seconds_count{provider=\"fake_openai\"} 1"),
        "{}",
        scraped.text
    );

    // Trying the failed mission again (as the chat's fallback does) asks it once, not twice.
    let again = execute(
        &stack,
        &json!({"mission": "Total invoice 42", "agent_id": "invoice-extractor", "session_id": failed}),
    )
    .await;
    assert_eq!(again.body["status"], "completed", "{}", again.text);
    let stored = get_session(&stack, failed).await;
    let roles: Vec<&str> = stored.messages.iter().map(|m| m.role.as_str()).collect();
    assert_eq!(roles, ["system", "user", "assistant"], "{stored:?}");
    assert!(
        stored.error.is_none(),
        "a completed run clears the error: {stored:?}"
    );
}

/// A provider answering with a redirect fails the call: the client follows none, so the API
/// key and the configured headers never reach the host it points to.
#[tokio::test]
async fn an_llm_redirect_is_not_followed_and_the_key_goes_nowhere_else() {
    let elsewhere = FakeLlm::start(vec![openai::text(&["Followed."])]).await;
    let llm = FakeLlm::start(vec![fake_llm::Reply::Redirect(format!(
        "{}/v1/chat/completions",
        elsewhere.url()
    ))])
    .await;
    let (stack, _unused) = fake_llm::openai_stack(&llm).await;
    let events = stream(&stack, "invoice-extractor", "Total invoice 42").await;
    let error = first(&events, "error");
    assert_eq!(error["code"], "LLM_ERROR", "{error}");
    assert!(
        error["message"].as_str().is_some_and(|m| m.contains("307")),
        "{error}"
    );
    assert_eq!(first(&events, "done")["status"], "failed");
    assert!(!llm.seen().is_empty(), "the provider was asked");
    assert!(
        elsewhere.seen().is_empty(),
        "the redirect was followed: {:?}",
        elsewhere.seen()
    );
}

#[tokio::test]
async fn an_llm_stream_that_stalls_fails_the_run_after_the_idle_timeout_and_the_executor_keeps_serving()
 {
    let llm = FakeLlm::start(vec![
        openai::stall_after(&["Hel", "lo"]),
        openai::text(&["Recovered."]),
    ])
    .await;
    let unused = FakeLlm::start(vec![anthropic::text(&["unused"])]).await;
    let config = fake_llm::llm_config(&llm.url(), &unused.url()).replace(
        "    max_attempts: 3\n",
        "    max_attempts: 3\n    idle_timeout_secs: 1\n",
    );
    let stack = fake_llm::options(&llm, &unused)
        .llm_config(config)
        .spawn()
        .await
        .expect("stack starts");

    let events = stream(&stack, "invoice-extractor", "Total invoice 42").await;
    let names = event_names(&events);
    assert_eq!(
        names,
        ["run_started", "token", "token", "error", "done"],
        "{events:?}"
    );
    let error = first(&events, "error");
    assert_eq!(error["code"], "LLM_ERROR", "{error}");
    let message = error["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("fake_openai") && message.contains("timed out"),
        "{message}"
    );
    assert_eq!(first(&events, "done")["status"], "failed");
    assert_eq!(llm.seen().len(), 1, "a stream that started is not retried");

    let r = execute(
        &stack,
        &json!({"mission": "Total invoice 43", "agent_id": "invoice-extractor"}),
    )
    .await;
    assert_eq!(r.body["final_answer"], "Recovered.", "{}", r.text);
}

#[tokio::test]
async fn malformed_tool_call_json_gets_an_error_result_and_the_run_goes_on() {
    let llm = FakeLlm::start(vec![
        openai::tool_call("call_bad", "file_read", &["{\"path\": ", "\"notes.t"]),
        openai::text(&["I could not ", "read it."]),
    ])
    .await;
    let (stack, _unused) = fake_llm::openai_stack(&llm).await;

    let events = stream(&stack, "invoice-extractor", "Read notes.txt").await;
    let names = event_names(&events);
    assert_eq!(
        &names[..3],
        ["run_started", "tool_start", "tool_error"],
        "{events:?}"
    );
    assert!(
        names.ends_with(&["final_answer", "done"]),
        "{names:?}\n{}",
        stack.logs()
    );
    let tool_error = first(&events, "tool_error");
    assert_eq!(tool_error["call_id"], "call_bad");
    assert_eq!(tool_error["tool"], "file_read");
    assert!(
        tool_error["message"]
            .as_str()
            .is_some_and(|m| m.contains("not valid JSON")),
        "{tool_error}"
    );
    assert_eq!(
        first(&events, "final_answer")["text"],
        "I could not read it."
    );
    assert_eq!(first(&events, "done")["status"], "completed");

    let seen = llm.seen();
    assert_eq!(seen.len(), 2, "{seen:#?}");
    let messages = seen[1].body["messages"].as_array().expect("messages");
    let result = messages
        .iter()
        .find(|m| m["role"] == "tool" && m["tool_call_id"] == "call_bad")
        .unwrap_or_else(|| panic!("the model is told: {messages:#?}"));
    assert!(
        result["content"]
            .as_str()
            .is_some_and(|c| c.contains("not valid JSON")),
        "{result}"
    );
}

#[tokio::test]
async fn a_definition_broken_by_hand_is_refused_naming_its_problem_until_it_is_fixed() {
    let stack = StackOptions::full()
        .with_executor()
        .spawn()
        .await
        .expect("stack starts");
    create_agent_with_tools(&stack, "fragile", &["file_read"]).await;
    let run = json!({"mission": "Say hello", "agent_id": "fragile"});
    let r = execute(&stack, &run).await;
    assert_eq!(r.body["status"], "completed", "{}", r.text);
    let session = r.body["session_id"].as_str().expect("session").to_owned();

    // An unknown tool: the registry skips the file, lists it as a diagnostic, and serves the
    // rest (README, "Agents as YAML").
    let file = stack.custom_dir().join("fragile.yaml");
    let broken =
        hand_written_yaml("fragile", "Broken by hand.").replace("ask_user", "no_such_tool");
    std::fs::write(&file, broken).expect("hand edit");
    let gone = eventually(EDIT_VISIBLE_WITHIN * 4, STEP, || async {
        let r = get(&stack, "fragile").await;
        // The watcher may see the file while the write is under way (empty, half written):
        // wait for the diagnosis of the whole file.
        (r.status == 400 && r.text.contains("no_such_tool")).then_some(r)
    })
    .await
    .unwrap_or_else(|| panic!("the registry drops the broken definition\n{}", stack.logs()));
    gone.assert_error(400, "invalid_argument")
        .assert_names("custom/fragile.yaml");
    let d = send(stack.http().get(stack.url("/api/v1/diagnostics"))).await;
    assert!(d.text.contains("custom/fragile.yaml"), "{}", d.text);

    // The executor follows the registry (its cache is evicted by the watch stream); running it
    // is the seed's 400 "agent config invalid", naming the file and what is wrong with it.
    let refused = eventually(EDIT_VISIBLE_WITHIN * 4, STEP, || async {
        let r = execute(&stack, &run).await;
        (r.status == 400 && r.text.contains("no_such_tool")).then_some(r)
    })
    .await
    .unwrap_or_else(|| panic!("execute keeps running the broken agent\n{}", stack.logs()));
    refused
        .assert_error(400, "invalid_argument")
        .assert_names("custom/fragile.yaml")
        .assert_names("no_such_tool");
    let stream = send(
        stack
            .http()
            .post(stack.url("/api/v1/execute/stream"))
            .json(&run),
    )
    .await;
    stream.assert_error(400, "invalid_argument");
    let grpc = stack
        .executor()
        .execute(v1::ExecuteRequest {
            mission: "Say hello".to_owned(),
            agent_id: Some("fragile".to_owned()),
            session_id: Some(session.clone()),
            ..Default::default()
        })
        .await
        .expect_err("gRPC refuses it too");
    assert_eq!(grpc.code(), tonic::Code::InvalidArgument, "{grpc:?}");
    // A nonexistent agent is still a 404.
    let r = execute(
        &stack,
        &json!({"mission": "Say hello", "agent_id": "nobody-here"}),
    )
    .await;
    r.assert_error(404, "not_found");

    // Nothing was lost, and everything else keeps running.
    let stored = get_session(&stack, &session).await;
    assert_eq!(stored.status(), v1::RunStatus::Completed, "{stored:?}");
    let other = execute(
        &stack,
        &json!({"mission": "Say hello", "agent_id": "invoice-extractor"}),
    )
    .await;
    assert_eq!(other.body["status"], "completed", "{}", other.text);

    std::fs::write(&file, hand_written_yaml("fragile", "Fixed by hand.")).expect("fix");
    let back = eventually(EDIT_VISIBLE_WITHIN * 4, STEP, || async {
        let r = execute(&stack, &run).await;
        (r.status == 200).then_some(r)
    })
    .await
    .unwrap_or_else(|| panic!("the fixed agent runs again\n{}", stack.logs()));
    assert_eq!(back.body["status"], "completed", "{}", back.text);
}

/// Prints 20 MB to stdout, then answers.
const PRINTER_SCRIPT: &str = r#"
turns:
  - text: "Printing."
    tool_calls:
      - name: python
        id: call_print
        arguments: {code: "import sys\nsys.stdout.write('x' * 20_000_000)\n"}
  - text: "Printed."
"#;

#[tokio::test]
async fn a_tool_printing_20_mb_is_capped_and_the_run_completes() {
    let stack = StackOptions::full()
        .with_executor()
        .llm_script(PRINTER_SCRIPT)
        .spawn()
        .await
        .expect("stack starts");
    create_agent_with_tools(&stack, "printer", &["python"]).await;
    let events = stream(&stack, "printer", "Print a lot").await;
    let names = event_names(&events);
    assert!(
        names.ends_with(&["final_answer", "done"]),
        "{names:?}\n{}",
        stack.logs()
    );
    let end = first(&events, "tool_end");
    assert_eq!(end["is_error"], false, "exit code 0");
    let output = end["output"].as_str().unwrap_or_default();
    // The default --tool-max-output-bytes: 64 KiB, plus a line saying what was cut.
    let cap = 64 * 1024;
    assert!(
        output.len() <= cap + 256,
        "output is {} bytes, not capped",
        output.len()
    );
    assert!(output.contains("xxxx"), "the start is kept");
    assert!(
        output.contains("cut"),
        "the cut is said: {:?}",
        &output[output.len().saturating_sub(200)..]
    );
    assert_eq!(first(&events, "final_answer")["text"], "Printed.");
    assert_eq!(first(&events, "done")["status"], "completed");

    let session = events[0].1["session_id"].as_str().expect("session id");
    let stored = get_session(&stack, session).await;
    let tool = stored
        .messages
        .iter()
        .find(|m| m.role == "tool")
        .expect("a tool result");
    assert!(
        tool.content.len() <= cap + 256,
        "the model got {} bytes",
        tool.content.len()
    );
}

#[tokio::test]
async fn a_tool_that_hangs_past_its_timeout_is_killed_and_the_run_goes_on() {
    let stack = StackOptions::full()
        .with_executor()
        .llm_script(SLEEPER_SCRIPT)
        .executor_args(["--tool-timeout-secs", "3"])
        .spawn()
        .await
        .expect("stack starts");
    create_agent_with_tools(&stack, "sleeper", &["python"]).await;
    let events = stream(&stack, "sleeper", "Run the long job").await;
    let names = event_names(&events);
    assert_eq!(&names[..2], ["run_started", "token"], "{names:?}");
    assert!(names.contains(&"tool_error"), "{names:?}\n{}", stack.logs());
    assert!(names.ends_with(&["final_answer", "done"]), "{names:?}");
    let error = first(&events, "tool_error");
    assert_eq!(error["call_id"], "call_sleep");
    assert!(
        error["message"]
            .as_str()
            .is_some_and(|m| m.contains("timed out") && m.contains("3s")),
        "{error}"
    );
    assert_eq!(
        first(&events, "final_answer")["text"],
        "The long job ended."
    );
    assert_eq!(first(&events, "done")["status"], "completed");
    // On a loaded machine python may not even have started within the limit; when it did, the
    // process it wrote down is gone, and the model read what it had printed before (the tool's
    // own timeout, not the run loop's backstop, ended the call).
    let pid_file = stack.executor_workspace("sleeper").join("pid.txt");
    if let Some(pid) = std::fs::read_to_string(&pid_file)
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
    {
        assert_gone(&stack, pid).await;
        assert!(
            error["message"].as_str().is_some_and(
                |m| m.contains("what it printed by then") && m.contains("the long job started")
            ),
            "{error}"
        );
    }
}
