//! Seed 004's chat endpoints through the real binaries, read as raw bytes the way an unchanged
//! chat UI reads them: `/ai/agent/stream` (the chat agent, `readOnly` by default) and
//! `/ai/stream` (the plain LLM), thread memory by `threadId` across an executor restart.

use serde_json::json;
use taskforce_proto::v1;
use taskforce_tests::{Stack, StackOptions};

use crate::helpers::{RUN_TIMEOUT, get_session};

/// Turns picked by what the conversation last said, so one script serves every prompt.
const SCRIPT: &str = r#"
turns:
  - match: "read the notes"
    text: "Reading."
    tool_calls: [{name: file_read, arguments: {path: notes.txt}}]
  - match: "some notes"
    tool_calls: [{name: file_write, arguments: {path: out.txt, content: x}}]
  - match: "policy_blocked"
    text: "Read: two\nlines"
  - match: "hello"
    text: "hi"
  - match: "the secrets"
    tool_calls: [{name: file_read, arguments: {path: secrets.txt}}]
  - match: "open the vault"
    tool_calls: [{name: file_read, arguments: {path: "vault-sk-proj-Zx81kQ0pLm2vN7rT4yW9aB3cD6eF1gH5.txt"}}]
  - match: "redacted"
    text: "masked"
  - match: "plan a trip"
    tool_calls: [{name: ask_user, arguments: {question: "Where to?"}}]
  - match: "Lisbon"
    text: "Booked."
  - match: "think long"
    text: "Thought."
    delay_ms: 60000
  - match: "the long job"
    tool_calls:
      - name: python
        arguments: {code: "import time\nopen('ran.txt', 'a').write('x')\ntime.sleep(60)"}
"#;

/// A planted token, key and id.
const PLANTED: [&str; 3] = [
    "ghp_0123456789abcdefghijABCDEFGHIJ012345",
    "sk-proj-Zx81kQ0pLm2vN7rT4yW9aB3cD6eF1gH5",
    "3f2504e0-4f89-11d3-9a0c-0305e82c3301",
];

async fn stack() -> Stack {
    let stack = StackOptions::full()
        .with_executor()
        .gateway_args(["--chat-agent", "dev"])
        // `default` mode runs python (the client-abort test); `readOnly` never does.
        .executor_env("AGENT_WRITE_ALLOWLIST", "python")
        .llm_script(SCRIPT)
        .spawn()
        .await
        .expect("stack starts");
    let workspace = stack.executor_workspace("dev");
    std::fs::create_dir_all(&workspace).expect("workspace");
    std::fs::write(workspace.join("notes.txt"), "some notes").expect("notes");
    stack
}

/// POSTs `body` and reads the whole answer as bytes; returns (status, x-thread-id, text).
pub(crate) async fn post(
    stack: &Stack,
    path: &str,
    body: &serde_json::Value,
) -> (u16, String, String) {
    let response = tokio::time::timeout(
        RUN_TIMEOUT,
        stack.http().post(stack.url(path)).json(body).send(),
    )
    .await
    .expect("answered in time")
    .expect("answered");
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let thread = response
        .headers()
        .get("x-thread-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let bytes = tokio::time::timeout(RUN_TIMEOUT, response.bytes())
        .await
        .expect("the stream ends")
        .expect("body");
    if status == 200 {
        assert!(
            content_type.starts_with("text/event-stream"),
            "{content_type}"
        );
    }
    (
        status,
        thread,
        String::from_utf8(bytes.to_vec()).expect("UTF-8"),
    )
}

pub(crate) const END: &str = "event: end\ndata: [DONE]\n\n";

#[tokio::test]
async fn the_answer_starts_before_the_agent_says_anything() {
    let stack = stack().await;
    // The model's first word is a minute away: the answer's headers (and its thread id) are
    // not held back until then, where a proxy in between would cut a silent connection.
    let response = tokio::time::timeout(
        std::time::Duration::from_secs(20),
        stack
            .http()
            .post(stack.url("/ai/agent/stream"))
            .json(&json!({"prompt": "think long"}))
            .send(),
    )
    .await
    .expect("the answer starts before the model speaks")
    .expect("answered");
    assert_eq!(response.status().as_u16(), 200);
    assert!(
        response
            .headers()
            .get("x-thread-id")
            .is_some_and(|t| !t.is_empty())
    );
}

#[tokio::test]
async fn the_agent_stream_speaks_the_seed_framing_byte_for_byte_and_read_only_blocks_writes() {
    let stack = stack().await;
    let (status, thread, body) = post(
        &stack,
        "/ai/agent/stream",
        &json!({"prompt": "Please read the notes", "threadId": "c123-456"}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(thread, "c123-456");
    let expected = concat!(
        "data: Reading.\n\n",
        "data: {\"text\":\"🔧 running: file_read notes.txt\",\"event\":\"tool_start\",\"tool\":\"file_read\"}\n\n",
        "data: {\"text\":\"✅ done\",\"event\":\"tool_end\",\"tool\":\"file_read\"}\n\n",
        "data: {\"text\":\"🔧 running: file_write out.txt\",\"event\":\"tool_start\",\"tool\":\"file_write\"}\n\n",
        "data: {\"text\":\"⚠️ file_write failed: policy_blocked: readOnly mode: `file_write` is not a read; only reads run\",\"event\":\"tool_error\",\"tool\":\"file_write\"}\n\n",
        "data: Read:\n\n",
        "data:  two\n\n",
        "data: \ndata: lines\n\n",
        "event: end\ndata: [DONE]\n\n",
    );
    assert_eq!(body, expected);
    assert!(!stack.executor_workspace("dev").join("out.txt").exists());

    // An empty prompt: an error text, then the end.
    let (status, thread, body) = post(&stack, "/ai/agent/stream", &json!({"prompt": "  "})).await;
    assert_eq!(status, 200);
    assert!(!thread.is_empty(), "a new thread id");
    assert_eq!(body, format!("data: ⚠️ the prompt is empty\n\n{END}"));

    // A bad mode is a text too (the UI shows text), and nothing ran.
    let (_, _, body) = post(
        &stack,
        "/ai/agent/stream",
        &json!({"prompt": "read the notes", "mode": "yolo"}),
    )
    .await;
    assert!(
        body.starts_with("data: ⚠️ ") && body.contains("mode") && body.ends_with(END),
        "{body}"
    );

    // Not JSON: the usual JSON error (400, like every JSON route).
    let response = stack
        .http()
        .post(stack.url("/ai/agent/stream"))
        .header("content-type", "text/plain")
        .body("hi")
        .send()
        .await
        .expect("answered");
    assert_eq!(response.status().as_u16(), 400);
}

#[tokio::test]
async fn a_thread_waiting_on_a_question_takes_the_next_prompt_as_its_answer() {
    let stack = stack().await;
    let (_, thread, asked) = post(
        &stack,
        "/ai/agent/stream",
        &json!({"prompt": "plan a trip"}),
    )
    .await;
    assert_eq!(
        asked,
        format!(
            "data: {{\"text\":\"🔧 running: ask_user\",\"event\":\"tool_start\",\"tool\":\"ask_user\"}}\n\n\
             data: Where to?\n\n{END}"
        )
    );
    let (_, same, answered) = post(
        &stack,
        "/ai/agent/stream",
        &json!({"prompt": "Lisbon", "threadId": thread}),
    )
    .await;
    assert_eq!(same, thread);
    assert_eq!(
        answered,
        format!(
            "data: {{\"text\":\"✅ done\",\"event\":\"tool_end\",\"tool\":\"ask_user\"}}\n\n\
             data: Booked.\n\n{END}"
        )
    );
    let session = get_session(&stack, &thread).await;
    assert_eq!(session.status(), v1::RunStatus::Completed);
}

#[tokio::test]
async fn the_prompt_that_answers_a_question_runs_under_its_own_mode() {
    let stack = stack().await;
    let (_, thread, _) = post(
        &stack,
        "/ai/agent/stream",
        &json!({"prompt": "plan a trip", "mode": "default"}),
    )
    .await;
    // `default` would run the allowlisted python; this prompt asks for `readOnly`.
    let (_, _, answered) = post(
        &stack,
        "/ai/agent/stream",
        &json!({"prompt": "the long job", "threadId": thread, "mode": "readOnly"}),
    )
    .await;
    assert!(
        answered.contains("\"event\":\"tool_error\",\"tool\":\"python\""),
        "{answered}"
    );
    assert!(answered.ends_with(END), "{answered}");
    assert!(!stack.executor_workspace("dev").join("ran.txt").exists());
}

#[tokio::test]
async fn a_client_that_goes_away_cancels_the_chat_run_and_the_thread_goes_on_without_rerunning_the_tool()
 {
    let stack = stack().await;
    let mut response = stack
        .http()
        .post(stack.url("/ai/agent/stream"))
        .json(&json!({"prompt": "run the long job", "mode": "default"}))
        .send()
        .await
        .expect("answered");
    let thread = response
        .headers()
        .get("x-thread-id")
        .and_then(|v| v.to_str().ok())
        .expect("thread")
        .to_owned();
    let mut seen = String::new();
    while !seen.contains("tool_start") {
        let chunk = tokio::time::timeout(RUN_TIMEOUT, response.chunk())
            .await
            .expect("a frame in time")
            .expect("body")
            .expect("not ended yet");
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    let ran = stack.executor_workspace("dev").join("ran.txt");
    let started = taskforce_tests::wait::eventually(
        RUN_TIMEOUT,
        std::time::Duration::from_millis(20),
        || async { ran.exists().then_some(()) },
    )
    .await;
    assert!(started.is_some(), "python started");
    drop(response); // the UI's AbortController

    let cancelled = taskforce_tests::wait::eventually(
        RUN_TIMEOUT,
        std::time::Duration::from_millis(50),
        || async {
            (get_session(&stack, &thread).await.status() == v1::RunStatus::Cancelled).then_some(())
        },
    )
    .await;
    assert!(
        cancelled.is_some(),
        "the run is cancelled\n{}",
        stack.logs()
    );
    let (_, same, next) = post(
        &stack,
        "/ai/agent/stream",
        &json!({"prompt": "hello", "threadId": thread}),
    )
    .await;
    assert_eq!(same, thread);
    assert_eq!(next, format!("data: hi\n\n{END}"));
    assert_eq!(
        std::fs::read_to_string(&ran).expect("ran"),
        "x",
        "the tool ran once"
    );
}

#[tokio::test]
async fn a_thread_remembers_across_prompts_and_an_executor_restart_and_the_plain_stream_has_no_tools()
 {
    let mut stack = stack().await;
    let (_, thread, first) = post(&stack, "/ai/agent/stream", &json!({"prompt": "hello"})).await;
    assert_eq!(first, format!("data: hi\n\n{END}"));
    stack.kill9_executor().expect("killed");
    stack.restart_executor().await.expect("restarted");
    let (_, again, second) = post(
        &stack,
        "/ai/agent/stream",
        &json!({"prompt": "hello again", "threadId": thread}),
    )
    .await;
    assert_eq!(again, thread);
    assert_eq!(second, format!("data: hi\n\n{END}"));
    let session = get_session(&stack, &thread).await;
    let users: Vec<&str> = session
        .messages
        .iter()
        .filter(|m| m.role == "user")
        .map(|m| m.content.as_str())
        .collect();
    assert_eq!(users, ["hello", "hello again"]);
    assert_eq!(session.status(), v1::RunStatus::Completed);

    // The plain LLM: no tool is offered (the script's tool call finds none), and the stream
    // shows no tool events, also for that call.
    let (_, plain_thread, plain) =
        post(&stack, "/ai/stream", &json!({"prompt": "read the notes"})).await;
    assert!(plain.starts_with("data: Reading.\n\n"), "{plain}");
    assert!(
        !plain.contains("unknown tool") && !plain.contains("tool_start"),
        "{plain}"
    );
    assert!(plain.ends_with(END));
    let plain_session = get_session(&stack, &plain_thread).await;
    assert!(
        format!("{:?}", plain_session.messages).contains("unknown tool"),
        "the model was told: {:?}",
        plain_session.messages
    );
    assert_ne!(plain_thread, thread);
}

#[tokio::test]
async fn planted_secrets_in_tool_output_reach_neither_the_stream_nor_the_model_nor_the_log() {
    let stack = stack().await;
    let secrets = format!(
        "GITHUB_TOKEN={}\nkey: {}\nuser id {}\n",
        PLANTED[0], PLANTED[1], PLANTED[2]
    );
    std::fs::write(stack.executor_workspace("dev").join("secrets.txt"), secrets).expect("file");
    let (_, thread, body) = post(
        &stack,
        "/api/v1/execute/stream",
        &json!({"mission": "show me the secrets", "profile": "dev"}),
    )
    .await;
    let _ = thread;
    assert!(body.contains("[redacted:"), "{body}");
    assert!(
        body.contains("masked"),
        "the model saw the masked text: {body}"
    );
    let session_id = body
        .split("\"session_id\":\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("session id")
        .to_owned();
    let session = get_session(&stack, &session_id).await;
    let context: String = session.messages.iter().map(|m| m.content.clone()).collect();
    let log = std::fs::read_to_string(stack.executor_log()).expect("log");
    for secret in PLANTED {
        assert!(!body.contains(secret), "{secret} in the stream");
        assert!(!context.contains(secret), "{secret} in the model's context");
        assert!(!log.contains(secret), "{secret} in the log");
    }

    // A secret the model writes into a call's arguments is not shown in its `tool_start`
    // (the call itself keeps it), over REST and in the chat.
    let (_, _, body) = post(
        &stack,
        "/api/v1/execute/stream",
        &json!({"mission": "open the vault", "profile": "dev"}),
    )
    .await;
    assert!(body.contains("vault-[redacted:api-key].txt"), "{body}");
    assert!(!body.contains(PLANTED[1]), "{body}");
    let (_, _, chat) = post(
        &stack,
        "/ai/agent/stream",
        &json!({"prompt": "open the vault"}),
    )
    .await;
    assert!(
        chat.contains("running: file_read vault-[redacted:api-key].txt"),
        "{chat}"
    );
    assert!(!chat.contains(PLANTED[1]), "{chat}");
}
