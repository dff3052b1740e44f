//! Cancelling a live run whose tool is a long `python` subprocess: an SSE client that
//! disconnects (reqwest, and a real `curl -N` killed mid-run), a `POST /execute` client that
//! gives up, and `POST /sessions/{id}/cancel`. Each time the subprocess is killed (checked in
//! `/proc`), the session is stored as cancelled, and the executor keeps serving.

use std::{path::Path, process::Stdio, time::Duration};

use serde_json::{Value, json};
use taskforce_proto::v1;
use taskforce_tests::{Stack, StackOptions, eventually, process::pid_exists};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::helpers::{
    RUN_TIMEOUT, STEP, SseReader, create_agent_with_tools, event_names, get_session, send,
};

const AGENT: &str = "sleeper";
/// How long a cancelled run may take to kill its subprocess and store its status.
pub const GONE_WITHIN: Duration = Duration::from_secs(10);

/// A python call that publishes its PID (atomically, by rename) and then sleeps for a minute;
/// then an answer, for runs that get that far. Only missions naming "the long job" start it;
/// others are answered at once.
pub const SLEEPER_SCRIPT: &str = r#"
turns:
  - match: "long job"
    text: "Starting the long job."
    tool_calls:
      - name: python
        id: call_sleep
        arguments:
          code: |
            import os, time
            print("the long job started", flush=True)
            with open("pid.tmp", "w") as f:
                f.write(str(os.getpid()))
            os.rename("pid.tmp", "pid.txt")
            time.sleep(60)
  - text: "The long job ended."
"#;

async fn stack() -> Stack {
    let stack = StackOptions::full()
        .with_executor()
        .llm_script(SLEEPER_SCRIPT)
        .spawn()
        .await
        .expect("stack with executor starts");
    create_agent_with_tools(&stack, AGENT, &["python"]).await;
    stack
}

/// Waits for the PID the sleeping python wrote into `workspace/pid.txt`, and checks it runs.
pub async fn sleeping_pid(stack: &Stack, workspace: &Path) -> u32 {
    let pid = written_pid(stack, workspace).await;
    assert!(pid_exists(pid), "python {pid} runs");
    pid
}

/// Waits for the PID the sleeping python wrote into `workspace/pid.txt`.
async fn written_pid(stack: &Stack, workspace: &Path) -> u32 {
    let file = workspace.join("pid.txt");
    eventually(RUN_TIMEOUT, STEP, || {
        let pid = std::fs::read_to_string(&file)
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok());
        async move { pid }
    })
    .await
    .unwrap_or_else(|| panic!("python never wrote {}\n{}", file.display(), stack.logs()))
}

/// Waits until `pid` is gone from `/proc` (killed and reaped).
pub async fn assert_gone(stack: &Stack, pid: u32) {
    let gone = eventually(GONE_WITHIN, STEP, || async move {
        (!pid_exists(pid)).then_some(())
    })
    .await;
    assert!(
        gone.is_some(),
        "python {pid} still exists {GONE_WITHIN:?} after the cancellation ({:?})\n{}",
        std::fs::read_to_string(format!("/proc/{pid}/stat")),
        stack.logs()
    );
}

/// Waits until the session is stored with `status`.
pub async fn assert_status(stack: &Stack, session: &str, status: v1::RunStatus) -> v1::Session {
    let found = eventually(GONE_WITHIN, STEP, || async move {
        let s = get_session(stack, session).await;
        (s.status() == status).then_some(s)
    })
    .await;
    match found {
        Some(s) => s,
        None => panic!(
            "session {session} is not {status:?} within {GONE_WITHIN:?}: {:?}\n{}",
            get_session(stack, session).await,
            stack.logs()
        ),
    }
}

#[tokio::test]
async fn an_sse_client_that_disconnects_cancels_the_run_and_kills_its_python() {
    let stack = stack().await;
    let mut sse = SseReader::open(
        &stack,
        "/api/v1/execute/stream",
        &json!({"mission": "Run the long job", "agent_id": AGENT}),
    )
    .await;
    let seen = sse.until("tool_start", RUN_TIMEOUT).await;
    let session = seen[0].1["session_id"]
        .as_str()
        .expect("session")
        .to_owned();
    let pid = sleeping_pid(&stack, &stack.executor_workspace(AGENT)).await;

    drop(sse); // the client goes away mid-run

    assert_gone(&stack, pid).await;
    let stored = assert_status(&stack, &session, v1::RunStatus::Cancelled).await;
    // Why, told apart from a cancel someone asked for.
    assert_eq!(
        stored.error.as_ref().map(|e| e.code.as_str()),
        Some("CLIENT_GONE"),
        "{stored:?}"
    );
    let tool = stored
        .messages
        .iter()
        .find(|m| m.role == "tool" && m.call_id == "call_sleep")
        .expect("the open call got a result");
    assert!(tool.is_error, "{tool:?}");

    // The executor still serves.
    let r = send(
        stack
            .http()
            .post(stack.url("/api/v1/execute"))
            .json(&json!({
                "mission": "Say hello", "profile": "dev"
            })),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["status"], "completed", "{}", r.text);
}

#[tokio::test]
async fn cancel_over_rest_ends_the_stream_as_cancelled_and_kills_its_python() {
    let stack = stack().await;
    let mut sse = SseReader::open(
        &stack,
        "/api/v1/execute/stream",
        &json!({"mission": "Run the long job", "agent_id": AGENT}),
    )
    .await;
    let seen = sse.until("tool_start", RUN_TIMEOUT).await;
    let session = seen[0].1["session_id"]
        .as_str()
        .expect("session")
        .to_owned();
    let pid = sleeping_pid(&stack, &stack.executor_workspace(AGENT)).await;

    let c = send(
        stack
            .http()
            .post(stack.url(&format!("/api/v1/sessions/{session}/cancel"))),
    )
    .await;
    assert_eq!(
        (c.status.as_u16(), &c.body),
        (200, &json!({"cancelled": true})),
        "{}",
        c.text
    );
    let rest = sse.rest(GONE_WITHIN).await;
    let names = event_names(&rest);
    assert_eq!(names.last(), Some(&"done"), "{names:?}");
    let done: &Value = &rest[rest.len() - 1].1;
    assert_eq!(done["status"], "cancelled", "{done}");
    assert!(
        !names.contains(&"final_answer"),
        "a cancelled run has no answer: {names:?}"
    );
    assert_gone(&stack, pid).await;
    let stored = get_session(&stack, &session).await;
    assert_eq!(stored.status(), v1::RunStatus::Cancelled, "{stored:?}");
    // The call the cancel ended is audited (and counted) as cancelled, not as a tool's error.
    let log = std::fs::read_to_string(stack.executor_log()).unwrap_or_default();
    let audit = log
        .lines()
        .find(|l| l.contains("\"tool call\"") && l.contains("\"tool\":\"python\""))
        .unwrap_or_else(|| panic!("no audit line for the call:\n{log}"));
    assert!(audit.contains("\"outcome\":\"cancelled\""), "{audit}");
}

#[tokio::test]
async fn a_curl_client_killed_mid_run_cancels_the_run_and_kills_its_python() {
    let stack = stack().await;
    let body = json!({"mission": "Run the long job", "agent_id": AGENT}).to_string();
    let url = stack.url("/api/v1/execute/stream");
    let mut curl = tokio::process::Command::new("curl");
    curl.args([
        "-sN",
        "--max-time",
        "120",
        "-X",
        "POST",
        "-H",
        "content-type: application/json",
        "-d",
        &body,
        &url,
    ])
    .env_remove("http_proxy")
    .env_remove("HTTP_PROXY")
    .env_remove("all_proxy")
    .env_remove("ALL_PROXY")
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .kill_on_drop(true);
    let mut curl = curl.spawn().expect("curl starts");
    let mut lines = BufReader::new(curl.stdout.take().expect("curl's stdout")).lines();
    let mut session = None;
    let read = async {
        let session = &mut session;
        while let Some(line) = lines.next_line().await.expect("curl's output reads") {
            if let Some(data) = line.strip_prefix("data:") {
                let event: Value = serde_json::from_str(data.trim()).expect("SSE data is JSON");
                if session.is_none() {
                    *session = event["session_id"].as_str().map(str::to_owned);
                }
                if event["type"] == "tool_start" {
                    return;
                }
            }
        }
        panic!("curl's stream ended before tool_start");
    };
    tokio::time::timeout(RUN_TIMEOUT, read)
        .await
        .expect("tool_start reaches curl in time");
    let session = session.expect("the events name the session");
    let pid = sleeping_pid(&stack, &stack.executor_workspace(AGENT)).await;

    curl.kill().await.expect("curl is killed"); // SIGKILL: the connection just drops

    assert_gone(&stack, pid).await;
    assert_status(&stack, &session, v1::RunStatus::Cancelled).await;
}

#[tokio::test]
async fn a_rest_execute_client_that_gives_up_cancels_the_run_and_kills_its_python() {
    let stack = stack().await;
    // The client names the session, since it leaves before the reply would.
    let session = "given-up-by-its-client";
    let request = stack
        .http()
        .post(stack.url("/api/v1/execute"))
        .json(&json!({"mission": "Run the long job", "agent_id": AGENT, "session_id": session}));
    let client = tokio::spawn(async move { request.send().await });
    let pid = sleeping_pid(&stack, &stack.executor_workspace(AGENT)).await;

    client.abort(); // the connection closes with the task
    assert!(client.await.is_err_and(|e| e.is_cancelled()));

    assert_gone(&stack, pid).await;
    let stored = assert_status(&stack, session, v1::RunStatus::Cancelled).await;
    assert_eq!(stored.mission, "Run the long job");
}
