//! Policy modes (issue #11, first slice) through the real binaries: `mode` on
//! `/api/v1/execute/stream` decides which tool calls run, for native tools and for the real
//! `mcp-server-time` alike; a blocked call is a `tool_error` the model reads, and the run goes on.

use serde_json::{Value, json};
use taskforce_tests::{Stack, StackOptions, mcp};

use crate::helpers::{RUN_TIMEOUT, SseReader, agent_json, create, send};

/// The same two turns three times, so a continued session (the confirmation) replays them.
const SCRIPT: &str = r#"
turns:
  - tool_calls: &calls
      - {name: file_write, id: w1, arguments: {path: notes.txt, content: hello}}
      - {name: file_read, id: r1, arguments: {path: missing.txt}}
      - {name: get_current_time, id: t1, arguments: {timezone: UTC}}
      - {name: convert_time, id: t2, arguments: {source_timezone: UTC, time: "12:00", target_timezone: Asia/Tokyo}}
  - text: "Done: {{last_message}}"
  - tool_calls: *calls
  - text: "Done again: {{last_message}}"
  - tool_calls: *calls
  - text: "Done a third time: {{last_message}}"
"#;

async fn stack(allowlist: &str) -> Stack {
    let stack = StackOptions::full()
        .with_executor()
        .discovery_timeout_ms(30_000)
        .executor_env("AGENT_WRITE_ALLOWLIST", allowlist)
        .llm_script(SCRIPT)
        .spawn()
        .await
        .expect("stack starts");
    let mut body = agent_json("writer");
    body["tool_allowlist"] = json!(["file_write", "file_read"]);
    body["mcp_servers"] = json!([mcp::time_server_json().expect("mcp-server-time")]);
    body["mcp_tool_allowlist"] = json!(["get_current_time", "convert_time"]);
    let r = create(&stack, &body).await;
    assert_eq!(r.status, 201, "{}", r.text);
    stack
}

/// Runs the script in `mode` (with `confirmations`); the tool events by call id.
pub(crate) async fn run(stack: &Stack, body: Value) -> Vec<(String, Value)> {
    run_in(stack, body).await.1
}

/// Like [`run`], with the session id.
async fn run_in(stack: &Stack, body: Value) -> (String, Vec<(String, Value)>) {
    let mut sse = SseReader::open(stack, "/api/v1/execute/stream", &body).await;
    let events = sse.rest(RUN_TIMEOUT).await;
    assert_eq!(
        events[events.len() - 1].1["status"],
        "completed",
        "{events:?}"
    );
    let session = events[0].1["session_id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    (session, results(events))
}

/// The tool results (`tool_end`, `tool_error`) of a run's events.
fn results(events: Vec<(String, Value)>) -> Vec<(String, Value)> {
    events
        .into_iter()
        .filter(|(n, _)| n == "tool_end" || n == "tool_error")
        .collect()
}

fn outcome<'a>(events: &'a [(String, Value)], call: &str) -> (&'a str, String) {
    events
        .iter()
        .find(|(_, e)| e["call_id"] == call)
        .map(|(n, e)| {
            let text = e["message"]
                .as_str()
                .or(e["output"].as_str())
                .unwrap_or_default();
            (n.as_str(), text.to_owned())
        })
        .unwrap_or_else(|| panic!("no result for {call}: {events:?}"))
}

#[tokio::test]
async fn read_only_runs_reads_and_blocks_writes_of_native_and_mcp_tools() {
    let stack = stack("file_write").await;
    let events = run(
        &stack,
        json!({"mission": "note it", "agent_id": "writer", "mode": "readOnly"}),
    )
    .await;
    let (kind, message) = outcome(&events, "w1");
    assert_eq!(kind, "tool_error");
    assert!(
        message.starts_with("policy_blocked: readOnly mode"),
        "{message}"
    );
    let (_, message) = outcome(&events, "r1");
    assert!(
        !message.contains("policy_blocked"),
        "reads run (the file is missing): {message}"
    );
    assert_eq!(outcome(&events, "t1").0, "tool_end", "`get_…` reads");
    let (kind, message) = outcome(&events, "t2");
    assert_eq!(kind, "tool_error", "`convert_time` is no read verb");
    assert!(message.contains("policy_blocked"), "{message}");
    let workspace = stack.executor_workspace("writer");
    assert!(
        !workspace.join("notes.txt").exists(),
        "the blocked write did not happen"
    );
    let log = std::fs::read_to_string(stack.executor_log()).expect("log");
    assert!(
        log.lines().any(|l| l.contains("\"tool\":\"file_write\"")
            && l.contains("policy_blocked")
            && l.contains("\"policy_mode\":\"readOnly\"")
            && l.contains("\"thread_id\"")),
        "the audit line says so"
    );

    // A definition's mode is the default of its runs.
    let mut body = agent_json("careful");
    body["tool_allowlist"] = json!(["file_write", "file_read"]);
    body["mode"] = json!("read_only");
    let r = create(&stack, &body).await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(
        r.body["mode"], "readOnly",
        "stored in its canonical spelling"
    );
    let events = run(&stack, json!({"mission": "note it", "agent_id": "careful"})).await;
    let (kind, message) = outcome(&events, "w1");
    assert_eq!(kind, "tool_error");
    assert!(
        message.starts_with("policy_blocked: readOnly mode"),
        "{message}"
    );

    let bad = send(
        stack
            .http()
            .post(stack.url("/api/v1/execute"))
            .json(&json!({"mission": "x", "agent_id": "writer", "mode": "yolo"})),
    )
    .await;
    assert_eq!(bad.status, 400, "{}", bad.text);
    assert!(bad.text.contains("mode"), "{}", bad.text);
}

#[tokio::test]
async fn default_runs_allowlisted_writes_and_safe_write_needs_a_confirmation_per_call() {
    let stack = stack("file_write").await;
    let events = run(
        &stack,
        json!({"mission": "note it", "agent_id": "writer", "mode": "default"}),
    )
    .await;
    assert_eq!(outcome(&events, "w1").0, "tool_end", "allowlisted");
    assert_eq!(outcome(&events, "t2").0, "tool_error", "not allowlisted");
    let workspace = stack.executor_workspace("writer");
    std::fs::remove_file(workspace.join("notes.txt")).expect("written");

    let (session, events) = run_in(
        &stack,
        json!({"mission": "note it", "agent_id": "writer", "mode": "safeWrite"}),
    )
    .await;
    let (kind, message) = outcome(&events, "w1");
    assert_eq!(kind, "tool_error");
    assert!(message.starts_with("confirmation_required"), "{message}");
    assert!(!workspace.join("notes.txt").exists());
    let id = message
        .split('`')
        .find(|part| part.starts_with("c-"))
        .expect("a confirmation id")
        .to_owned();

    // Only the session that asked can grant it.
    let foreign = send(stack.http().post(stack.url("/api/v1/execute")).json(&json!({
        "mission": "note it", "agent_id": "writer", "mode": "safeWrite", "confirmations": [id]
    })))
    .await;
    assert_eq!(foreign.status, 400, "{}", foreign.text);
    assert!(
        foreign
            .text
            .contains("is not a confirmation this session asked for"),
        "{}",
        foreign.text
    );
    assert!(!workspace.join("notes.txt").exists());

    // A grant its run does not use (readOnly blocks the write) is not used up.
    let events = run(
        &stack,
        json!({"mission": "note it", "agent_id": "writer", "session_id": session,
               "mode": "readOnly", "confirmations": [id]}),
    )
    .await;
    assert_eq!(outcome(&events, "w1").0, "tool_error", "readOnly: blocked");
    assert!(!workspace.join("notes.txt").exists());

    let events = run(
        &stack,
        json!({"mission": "note it", "agent_id": "writer", "session_id": session,
               "mode": "safeWrite", "confirmations": [id]}),
    )
    .await;
    assert_eq!(outcome(&events, "w1").0, "tool_end", "confirmed: runs");
    assert!(workspace.join("notes.txt").exists());

    // Used up: the same call asks again.
    std::fs::remove_file(workspace.join("notes.txt")).expect("written");
    let again = send(stack.http().post(stack.url("/api/v1/execute")).json(&json!({
        "mission": "note it", "agent_id": "writer", "session_id": session, "confirmations": [id]
    })))
    .await;
    assert_eq!(again.status, 400, "granted once: {}", again.text);
    assert!(
        again.text.contains("was already used"),
        "the refusal says why: {}",
        again.text
    );

    let bad = send(
        stack
            .http()
            .post(stack.url("/api/v1/execute"))
            .json(&json!({"mission": "x", "agent_id": "writer", "confirmations": ["rm -rf"]})),
    )
    .await;
    assert_eq!(bad.status, 400, "{}", bad.text);
}

/// A `safeWrite` write the user is asked about: the write asks for a confirmation, the model
/// asks the user, and the same write runs once the answer grants it.
const ASK_THEN_WRITE: &str = r#"
turns:
  - tool_calls:
      - {name: file_write, id: w1, arguments: {path: notes.txt, content: hello}}
  - tool_calls:
      - {name: ask_user, id: q1, arguments: {question: "May I write notes.txt?"}}
  - tool_calls:
      - {name: file_write, id: w2, arguments: {path: notes.txt, content: hello}}
  - text: "Written: {{last_message}}"
"#;

/// A `safeWrite` session paused on its question: its session id and the write's
/// confirmation id.
async fn paused_on_the_write(stack: &Stack) -> (String, String) {
    let mut sse = SseReader::open(
        stack,
        "/api/v1/execute/stream",
        &json!({"mission": "note it", "agent_id": "careful", "mode": "safeWrite"}),
    )
    .await;
    let events = sse.rest(RUN_TIMEOUT).await;
    assert_eq!(events[events.len() - 1].1["status"], "paused", "{events:?}");
    let session = events[0].1["session_id"]
        .as_str()
        .expect("session")
        .to_owned();
    let tools = results(events);
    let (kind, message) = outcome(&tools, "w1");
    assert_eq!(kind, "tool_error");
    let id = message
        .split('`')
        .find(|part| part.starts_with("c-"))
        .unwrap_or_else(|| panic!("a confirmation id: {message}"))
        .to_owned();
    (session, id)
}

#[tokio::test]
async fn an_answer_over_rest_or_the_cli_grants_the_confirmation_its_question_was_about() {
    let stack = StackOptions::full()
        .with_executor()
        .executor_env("AGENT_WRITE_ALLOWLIST", "file_write")
        .llm_script(ASK_THEN_WRITE)
        .spawn()
        .await
        .expect("stack starts");
    let mut body = agent_json("careful");
    body["tool_allowlist"] = json!(["file_write", "ask_user"]);
    let r = create(&stack, &body).await;
    assert_eq!(r.status, 201, "{}", r.text);
    let notes = stack.executor_workspace("careful").join("notes.txt");

    // REST: a confirmation the session never asked for is refused, and the question still waits.
    let (session, id) = paused_on_the_write(&stack).await;
    let path = format!("/api/v1/sessions/{session}/answer");
    let bad = send(stack.http().post(stack.url(&path)).json(&json!({
        "answer": "yes", "mode": "safeWrite", "confirmations": ["c-000000000000"]
    })))
    .await;
    bad.assert_error(400, "invalid_argument")
        .assert_names("c-000000000000");
    let still = send(
        stack
            .http()
            .get(stack.url(&format!("/api/v1/sessions/{session}"))),
    )
    .await;
    assert_eq!(still.body["status"], "paused", "{}", still.text);
    assert!(!notes.exists());

    let mut sse = SseReader::open(
        &stack,
        &path,
        &json!({"answer": "yes", "mode": "safeWrite", "confirmations": [id]}),
    )
    .await;
    let events = sse.rest(RUN_TIMEOUT).await;
    assert_eq!(
        events[events.len() - 1].1["status"],
        "completed",
        "{events:?}"
    );
    assert_eq!(outcome(&results(events), "w2").0, "tool_end", "granted");
    assert_eq!(std::fs::read_to_string(&notes).expect("written"), "hello");
    std::fs::remove_file(&notes).expect("remove");

    // The CLI, through the gateway.
    let (session, id) = paused_on_the_write(&stack).await;
    let out = crate::cli::cli(
        &stack,
        &[
            "answer",
            &session,
            "yes",
            "--mode",
            "safeWrite",
            "--confirm",
            &id,
        ],
    )
    .await;
    let out = out.expect_code(0);
    assert!(
        out.contains(&format!("session {session}: completed")),
        "{out}"
    );
    assert_eq!(std::fs::read_to_string(&notes).expect("written"), "hello");
}

/// A sub-agent runs in its parent's mode, or in its own definition's when that is stricter:
/// an agent defined readOnly does not write under a parent that has no mode (policy audit 5).
#[tokio::test]
async fn a_read_only_sub_agent_stays_read_only_under_a_parent_without_a_mode() {
    let stack = StackOptions::full()
        .with_executor()
        .executor_env("AGENT_WRITE_ALLOWLIST", "file_write")
        .llm_script(
            r##"
final_text: "done"
turns:
  - match: "#C01#"
    tool_calls: [{name: file_write, id: c01, arguments: {path: careful.txt, content: "no"}}]
  - match: "#C02#"
    tool_calls: [{name: agent_careful, id: c02, arguments: {task: "#C01# note it"}}]
"##,
        )
        .spawn()
        .await
        .expect("stack starts");
    let mut careful = agent_json("careful");
    careful["tool_allowlist"] = json!(["file_write"]);
    careful["mode"] = json!("readOnly");
    let mut boss = agent_json("boss");
    boss["tool_allowlist"] = json!(["file_read"]);
    boss["subagents"] = json!(["careful"]);
    for body in [careful, boss] {
        let r = create(&stack, &body).await;
        assert_eq!(r.status, 201, "{}", r.text);
    }
    run(&stack, json!({"mission": "#C02#", "agent_id": "boss"})).await;
    assert!(
        !stack
            .executor_workspace("careful")
            .join("careful.txt")
            .exists(),
        "the readOnly sub-agent wrote"
    );
    let log = std::fs::read_to_string(stack.executor_log()).expect("log");
    assert!(
        log.lines().any(|l| l.contains("\"tool\":\"file_write\"")
            && l.contains("policy_blocked")
            && l.contains("\"policy_mode\":\"readOnly\"")),
        "the audit line says why"
    );
}
