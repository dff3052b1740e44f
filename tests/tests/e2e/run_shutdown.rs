//! The executor binary stopped while a run's `python` tool is running: SIGTERM ends the run
//! with `Done{CANCELLED}`, kills the subprocess and exits cleanly; SIGKILL leaves the session
//! `RUNNING` on disk, which the next start marks `FAILED`, and the subprocess running, which the
//! next start kills (from its ledger). Either way the session is kept and the restarted executor
//! serves it again. A client of the gateway whose run's executor dies hears that the connection
//! was lost (503 `unavailable`), with the run's session.

use std::time::Duration;

use serde_json::json;
use taskforce_proto::v1::{self, run_event::Event};
use taskforce_tests::{Stack, StackOptions, eventually, process::pid_exists};

use crate::{
    helpers::{RUN_TIMEOUT, SseReader, create_agent_with_tools, get_session, grpc_events, send},
    run_cancel::{SLEEPER_SCRIPT, assert_gone, sleeping_pid},
};

const AGENT: &str = "sleeper";

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

/// The long job, started: its session, the rest of its stream, the python's PID, and the `seq`
/// of the last event read.
struct LongJob {
    session: String,
    stream: tonic::Streaming<v1::RunEvent>,
    pid: u32,
    last_seq: u64,
}

/// Starts the long job over gRPC and reads its stream until the python call starts.
async fn start_long_job(stack: &Stack) -> LongJob {
    let mut stream = stack
        .executor()
        .execute(v1::ExecuteRequest {
            mission: "Run the long job".to_owned(),
            agent_id: Some(AGENT.to_owned()),
            ..Default::default()
        })
        .await
        .expect("Execute starts")
        .into_inner();
    let mut session = String::new();
    let mut last_seq = 0;
    let read = async {
        while let Some(event) = stream.message().await.expect("the stream reads") {
            session.clone_from(&event.session_id);
            last_seq = event.seq;
            if matches!(event.event, Some(Event::ToolStart(_))) {
                return;
            }
        }
        panic!("the stream ended before the tool started");
    };
    tokio::time::timeout(RUN_TIMEOUT, read)
        .await
        .expect("the tool starts in time");
    let pid = sleeping_pid(stack, &stack.executor_workspace(AGENT)).await;
    LongJob {
        session,
        stream,
        pid,
        last_seq,
    }
}

/// A short run on a new session completes (the executor serves).
async fn assert_serves(stack: &Stack) {
    let events = grpc_events(
        stack
            .executor()
            .execute(v1::ExecuteRequest {
                mission: "Say hello".to_owned(),
                agent_id: Some(AGENT.to_owned()),
                ..Default::default()
            })
            .await
            .expect("Execute starts")
            .into_inner(),
    )
    .await;
    match events.last().and_then(|e| e.event.as_ref()) {
        Some(Event::Done(done)) => assert_eq!(done.status(), v1::RunStatus::Completed),
        other => panic!("the run ends with Done: {other:?}"),
    }
}

#[tokio::test]
async fn sigterm_mid_run_cancels_it_kills_its_python_and_the_session_is_kept_as_cancelled() {
    let mut stack = stack().await;
    let LongJob {
        session,
        stream,
        pid,
        last_seq,
    } = start_long_job(&stack).await;
    let rest = tokio::spawn(grpc_events(stream));

    stack
        .stop_executor()
        .await
        .expect("a clean exit on SIGTERM with a live run");

    let rest = rest.await.expect("the stream reader ends");
    match rest.last().and_then(|e| e.event.as_ref()) {
        Some(Event::Done(done)) => {
            assert_eq!(done.status(), v1::RunStatus::Cancelled, "{rest:?}");
        }
        other => panic!("the stream ends with Done: {other:?}"),
    }
    assert!(rest.iter().all(|e| e.seq > last_seq), "{rest:?}");
    // The client is told why: the cancellation was the executor's, not the user's.
    assert!(
        rest.iter().any(|e| matches!(
            &e.event,
            Some(Event::Warning(w)) if w.code == "EXECUTOR_STOPPING"
        )),
        "{rest:?}"
    );
    assert_gone(&stack, pid).await;

    stack.restart_executor().await.expect("executor restarts");
    let stored = get_session(&stack, &session).await;
    assert_eq!(stored.status(), v1::RunStatus::Cancelled, "{stored:?}");
    let last = rest.last().map_or(last_seq, |e| e.seq);
    assert_eq!(stored.next_seq, last + 1, "{stored:?}");
    assert_serves(&stack).await;
}

#[tokio::test]
async fn sigkill_mid_run_leaves_a_session_the_next_start_marks_failed() {
    let mut stack = stack().await;
    let LongJob {
        session,
        stream,
        pid,
        last_seq,
    } = start_long_job(&stack).await;
    let busy = eventually(
        Duration::from_secs(10),
        Duration::from_millis(50),
        || async { (agent_status(&stack, AGENT).await == v1::AgentStatus::Busy).then_some(()) },
    )
    .await;
    assert!(busy.is_some(), "the run's BUSY never arrived");

    stack.kill9_executor().expect("executor killed");
    drop(stream);
    // Nothing of the dead executor can stop its subprocess...
    assert!(pid_exists(pid), "python {pid} still runs after the SIGKILL");

    // ...but the next start finds it in its ledger and kills it.
    stack.restart_executor().await.expect("executor restarts");
    assert_gone(&stack, pid).await;
    // The BUSY the dead executor reported ends with the restart, not with its lease.
    let idle = eventually(
        Duration::from_secs(10),
        Duration::from_millis(50),
        || async { (agent_status(&stack, AGENT).await == v1::AgentStatus::Idle).then_some(()) },
    )
    .await;
    assert!(idle.is_some(), "the agent stays busy\n{}", stack.logs());
    let stored = get_session(&stack, &session).await;
    assert_eq!(stored.status(), v1::RunStatus::Failed, "{stored:?}");
    assert_eq!(stored.mission, "Run the long job");
    assert_eq!(
        stored.error.as_ref().map(|e| e.code.as_str()),
        Some("INTERRUPTED"),
        "{stored:?}"
    );

    // The session continues with a new mission.
    let events = grpc_events(
        stack
            .executor()
            .execute(v1::ExecuteRequest {
                mission: "Say hello".to_owned(),
                agent_id: Some(AGENT.to_owned()),
                session_id: Some(session.clone()),
                ..Default::default()
            })
            .await
            .expect("Execute continues the session")
            .into_inner(),
    )
    .await;
    assert!(events.iter().all(|e| e.session_id == session), "{events:?}");
    assert!(
        events.iter().all(|e| e.seq > last_seq),
        "seq keeps growing across the crash (last before it: {last_seq}): {:?}",
        events.iter().map(|e| e.seq).collect::<Vec<_>>()
    );
    match events.last().and_then(|e| e.event.as_ref()) {
        Some(Event::Done(done)) => assert_eq!(done.status(), v1::RunStatus::Completed),
        other => panic!("the run ends with Done: {other:?}\n{}", stack.logs()),
    }
    assert_serves(&stack).await;
}

/// A named executor that restarts ends every BUSY hold its previous process left, also those
/// no session says were running (a run that ended within the IDLE grace before the crash, an
/// IDLE the registry never got); another executor's hold on the same agent stays.
#[tokio::test]
async fn a_restarted_named_executor_ends_every_hold_its_previous_process_left() {
    let mut stack = StackOptions::full()
        .with_executor()
        .executor_args(["--instance", "exec-a"])
        .spawn()
        .await
        .expect("stack with a named executor starts");
    for id in ["alpha", "beta"] {
        create_agent_with_tools(&stack, id, &["python"]).await;
    }
    // What the previous process left: two holds of its own, and another executor's.
    for (agent_id, reporter) in [("alpha", "exec-a"), ("beta", "exec-a"), ("beta", "exec-b")] {
        stack
            .registry()
            .report_agent_status(v1::ReportAgentStatusRequest {
                agent_id: agent_id.to_owned(),
                status: v1::AgentStatus::Busy.into(),
                last_task: "left over".to_owned(),
                lease_seconds: 300,
                reporter: reporter.to_owned(),
            })
            .await
            .expect("ReportAgentStatus");
    }
    assert_eq!(agent_status(&stack, "alpha").await, v1::AgentStatus::Busy);

    stack.kill9_executor().expect("executor killed");
    stack.restart_executor().await.expect("executor restarts");
    let idle = eventually(
        Duration::from_secs(10),
        Duration::from_millis(50),
        || async { (agent_status(&stack, "alpha").await == v1::AgentStatus::Idle).then_some(()) },
    )
    .await;
    assert!(
        idle.is_some(),
        "alpha stays busy for its lease\n{}",
        stack.logs()
    );
    assert_eq!(
        agent_status(&stack, "beta").await,
        v1::AgentStatus::Busy,
        "exec-b's hold is not exec-a's to end"
    );
}

/// The registry's status of agent `id`.
async fn agent_status(stack: &Stack, id: &str) -> v1::AgentStatus {
    let agent = stack
        .registry()
        .get_agent(v1::GetAgentRequest {
            agent_id: id.to_owned(),
        })
        .await
        .expect("GetAgent")
        .into_inner();
    agent.status()
}

/// A model that calls the MCP fixture's `sleep` for an hour.
const MCP_SLEEP: &str = "turns:\n  - tool_calls:\n      - {name: sleep, id: s1, arguments: {seconds: 3600}}\n  - text: done\n";

#[tokio::test]
async fn an_mcp_server_a_killed_executor_left_running_is_killed_by_the_next_start() {
    let mut stack = StackOptions::full()
        .with_executor()
        .discovery_timeout_ms(30_000)
        .llm_script(MCP_SLEEP)
        .spawn()
        .await
        .expect("stack with executor starts");
    let python = taskforce_tests::paths::python().expect("the test tools' python");
    let fixture = taskforce_tests::paths::workspace_root()
        .join("executor-svc/tests/service/fixtures/mcp_fixture.py");
    // An argument the fixture ignores, so that this test finds its own server.
    let mark = format!("--tf-e2e-orphan-{}", std::process::id());
    let argv = [
        python.display().to_string(),
        fixture.display().to_string(),
        mark.clone(),
    ];
    let mut body = crate::helpers::agent_json("mcp-sleeper");
    body["mcp_servers"] = json!([{"type": "stdio", "command": argv[0], "args": [argv[1], mark]}]);
    body["mcp_tool_allowlist"] = json!(["sleep"]);
    let r = crate::helpers::create(&stack, &body).await;
    assert_eq!(r.status, 201, "{}", r.text);
    let mut stream = stack
        .executor()
        .execute(v1::ExecuteRequest {
            mission: "Sleep".to_owned(),
            agent_id: Some("mcp-sleeper".to_owned()),
            ..Default::default()
        })
        .await
        .expect("Execute starts")
        .into_inner();
    let started = async {
        while let Some(event) = stream.message().await.expect("the stream reads") {
            if matches!(event.event, Some(Event::ToolStart(_))) {
                return;
            }
        }
        panic!("the stream ended before the tool started");
    };
    tokio::time::timeout(RUN_TIMEOUT, started)
        .await
        .expect("the call starts in time");
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let servers = taskforce_tests::process::processes_with_args(&argv);
    assert_eq!(servers.len(), 1, "{servers:?}");

    // The server is in its own process group: the executor's death does not reach it...
    stack.kill9_executor().expect("executor killed");
    drop(stream);
    assert!(
        pid_exists(servers[0]),
        "the server still runs after the SIGKILL"
    );
    // ...but the next start finds it in its ledger and kills it.
    stack.restart_executor().await.expect("executor restarts");
    assert_gone(&stack, servers[0]).await;
}

/// A model that takes a minute to answer.
const SLOW: &str = "turns:\n  - delay_ms: 60000\n    text: late\n";

#[tokio::test]
async fn sigterm_on_the_gateway_ends_open_streams_with_a_final_event_in_each_dialect() {
    let mut stack = StackOptions::full()
        .with_executor()
        .gateway_args(["--chat-agent", "dev"])
        .llm_script(SLOW)
        .spawn()
        .await
        .expect("stack starts");
    let mut native = crate::helpers::SseReader::open(
        &stack,
        "/api/v1/execute/stream",
        &serde_json::json!({"mission": "Take your time", "profile": "dev"}),
    )
    .await;
    native.until("run_started", RUN_TIMEOUT).await;
    // The chat endpoint answers once the run shows something: its request is still open.
    let chat = stack
        .http()
        .post(stack.url("/ai/agent/stream"))
        .json(&serde_json::json!({"prompt": "take your time"}))
        .send();
    let chat = tokio::spawn(async move {
        let response = chat.await.expect("the chat stream opens");
        assert_eq!(response.status(), 200);
        response.text().await.expect("the chat stream ends")
    });
    // And a blocking run, which gets an answer too, not a dropped connection.
    let (http, url) = (stack.http().clone(), stack.url("/api/v1/execute"));
    let plain = tokio::spawn(async move {
        send(
            http.post(url)
                .json(&json!({"mission": "Take your time", "profile": "dev"})),
        )
        .await
    });
    // The three runs are under way.
    let metrics = format!(
        "http://{}/metrics",
        stack
            .executor_metrics_addr()
            .expect("the executor's metrics")
    );
    let http = stack.http();
    let started = taskforce_tests::wait::eventually(
        RUN_TIMEOUT,
        std::time::Duration::from_millis(20),
        || async {
            let text = http.get(&metrics).send().await.ok()?.text().await.ok()?;
            text.lines()
                .any(|l| l.trim() == "taskforce_runs_in_flight 3")
                .then_some(())
        },
    )
    .await;
    assert!(started.is_some(), "{}", stack.logs());

    let stopping = std::time::Instant::now();
    let (stopped, rest, chat_text, plain) = tokio::join!(
        stack.stop_gateway(),
        native.rest(RUN_TIMEOUT),
        async { chat.await.expect("the chat client") },
        async { plain.await.expect("the blocking client") }
    );
    stopped.expect("the gateway exits cleanly on SIGTERM");
    assert!(
        stopping.elapsed() < std::time::Duration::from_secs(30),
        "streams do not hold the stop for the run's minute"
    );
    let (name, last) = rest.last().expect("a final event");
    assert_eq!(name, "error", "{rest:?}");
    assert_eq!(last["code"], "UNAVAILABLE");
    assert!(
        last["message"]
            .as_str()
            .is_some_and(|m| m.contains("shutting down")),
        "{last}"
    );
    assert_eq!(
        chat_text,
        "data: ⚠️ the gateway is shutting down; the run was stopped\n\nevent: end\ndata: [DONE]\n\n"
    );
    assert_eq!(plain.status, 503, "{}", plain.text);
    assert!(
        plain.text.contains("shutting down") && plain.body["session_id"].is_string(),
        "{}",
        plain.text
    );
}

#[tokio::test]
async fn an_executor_lost_mid_run_is_unavailable_with_the_session_over_sse_and_execute() {
    let mut stack = stack().await;
    let body = json!({"mission": "Run the long job", "agent_id": AGENT});
    let mut sse = SseReader::open(&stack, "/api/v1/execute/stream", &body).await;
    let (session, last_seq) = loop {
        let (name, ev) = sse
            .next(RUN_TIMEOUT)
            .await
            .expect("events until the tool starts");
        if name == "tool_start" {
            let session = ev["session_id"].as_str().unwrap_or_default().to_owned();
            break (session, ev["seq"].as_u64().unwrap_or_default());
        }
    };
    let (http, url) = (stack.http().clone(), stack.url("/api/v1/execute"));
    let plain = tokio::spawn(async move { send(http.post(url).json(&body)).await });
    // Both runs are live in the executor before it dies.
    let metrics = format!(
        "http://{}/metrics",
        stack.executor_metrics_addr().expect("executor metrics")
    );
    let http = stack.http().clone();
    let both = eventually(Duration::from_secs(30), Duration::from_millis(50), || {
        let req = http.get(&metrics);
        async move {
            let text = send(req).await.text;
            text.lines()
                .any(|l| l.trim() == "taskforce_runs_in_flight 2")
                .then_some(())
        }
    })
    .await;
    assert!(both.is_some(), "two runs in flight");
    tokio::time::sleep(Duration::from_millis(300)).await;

    stack.kill9_executor().expect("executor killed");
    let (name, error) = sse
        .next(RUN_TIMEOUT)
        .await
        .expect("a last event after the executor died");
    assert_eq!(name, "error", "{error}");
    assert_eq!(error["code"], "UNAVAILABLE", "{error}");
    assert!(
        error["message"]
            .as_str()
            .is_some_and(|m| m.contains("connection to the executor was lost")),
        "{error}"
    );
    // The envelope of every event: the client still knows which session it was.
    assert_eq!(error["session_id"], session.as_str(), "{error}");
    assert!(
        error["seq"].as_u64().is_some_and(|s| s > last_seq),
        "{error}"
    );
    assert_eq!(error["frame_id"], "", "{error}");
    assert!(
        error["time_unix_ms"].as_i64().is_some_and(|t| t > 0),
        "{error}"
    );

    let plain = plain.await.expect("the /execute call ends");
    plain.assert_error(503, "unavailable");
    assert!(
        plain.body["session_id"]
            .as_str()
            .is_some_and(|s| !s.is_empty() && s != session),
        "{}",
        plain.text
    );
    // The restarted executor kills the dead one's pythons and serves again.
    stack.restart_executor().await.expect("executor restarts");
    assert_serves(&stack).await;
}
