//! MCP tools in runs, against real MCP servers: a stdio server built on the official Python SDK
//! (`fixtures/mcp_fixture.py`) and `@modelcontextprotocol/server-everything` over streamable
//! HTTP. The tools come from `scripts/install-test-deps.sh` (under `.tools/`, or
//! `TASKFORCE_TOOLS_DIR`).

use std::{
    net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream},
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use taskforce_proto::v1::{self, RunEvent, RunStatus, run_event::Event};
use tempfile::TempDir;

use crate::{
    fake_registry::FakeRegistry,
    support::{Executor, collect, done_status, kinds, mission, setup},
};

fn tools_dir() -> PathBuf {
    std::env::var_os("TASKFORCE_TOOLS_DIR").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.tools"),
        PathBuf::from,
    )
}

fn test_tool(relative: &str) -> PathBuf {
    let path = tools_dir().join(relative);
    assert!(
        path.exists(),
        "{} is missing: run scripts/install-test-deps.sh first",
        path.display()
    );
    path
}

/// The fixture server over stdio, started with the test venv's Python (which has the SDK).
fn fixture_server() -> v1::McpServer {
    let script =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/service/fixtures/mcp_fixture.py");
    v1::McpServer {
        r#type: "stdio".into(),
        command: test_tool("venv/bin/python").display().to_string(),
        args: vec![script.display().to_string()],
        ..v1::McpServer::default()
    }
}

/// A script whose turns each make one call, then answer with the last tool result.
fn script_of_calls(calls: &[(&str, &str)]) -> String {
    let mut script = String::from("turns:\n");
    for (i, (name, args)) in calls.iter().enumerate() {
        script.push_str(&format!(
            "  - tool_calls:\n      - {{name: {name}, id: c{i}, arguments: {args}}}\n"
        ));
    }
    script.push_str("  - text: \"last: {{last_message}}\"\n");
    script
}

/// What `f` picks from each event, in order.
fn pick<T>(events: &[RunEvent], f: impl Fn(&Event) -> Option<T>) -> Vec<T> {
    events
        .iter()
        .filter_map(|e| e.event.as_ref().and_then(&f))
        .collect()
}

/// `(tool, output, is_error)` of every `ToolEnd`.
fn tool_ends(events: &[RunEvent]) -> Vec<(String, String, bool)> {
    pick(events, |e| match e {
        Event::ToolEnd(end) => Some((end.tool.clone(), end.output.clone(), end.is_error)),
        _ => None,
    })
}

/// `(code, message)` of every warning.
fn warnings(events: &[RunEvent]) -> Vec<(String, String)> {
    pick(events, |e| match e {
        Event::Warning(w) => Some((w.code.clone(), w.message.clone())),
        _ => None,
    })
}

/// `(tool, message)` of every `ToolError`.
fn tool_errors(events: &[RunEvent]) -> Vec<(String, String)> {
    pick(events, |e| match e {
        Event::ToolError(t) => Some((t.tool.clone(), t.message.clone())),
        _ => None,
    })
}

fn process_alive(pid: &str) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    // A zombie has exited; only its parent has not collected it yet.
    !status.is_empty() && !status.contains("State:\tZ")
}

async fn run(executor: &mut Executor, text: &str) -> Vec<RunEvent> {
    let stream = executor
        .client
        .execute(mission(text))
        .await
        .expect("execute")
        .into_inner();
    collect(stream).await
}

#[tokio::test]
async fn stdio_mcp_tools_are_filtered_by_the_allowlist_and_share_one_connection() {
    let dir = TempDir::new().expect("tmp");
    let registry = FakeRegistry::start().await;
    registry.set_helper_mcp(vec![fixture_server()], &["pid", "echo"]);
    // `sleep` exists on the server but is not in the allowlist.
    let script = "turns:\n  - tool_calls:\n      - {name: pid, id: p, arguments: {}}\n      - {name: echo, id: e, arguments: {text: hi}}\n      - {name: sleep, id: s, arguments: {seconds: 0}}\n  - text: done\n";
    let mut executor = Executor::start(&setup(&dir, &registry, script, 5)).await;

    let first = run(&mut executor, "which process?").await;
    assert_eq!(
        done_status(&first),
        RunStatus::Completed,
        "{:?}",
        kinds(&first)
    );
    let ends = tool_ends(&first);
    assert_eq!(ends.len(), 2, "{ends:?}");
    let pid = ends
        .iter()
        .find(|(tool, _, _)| tool == "pid")
        .map(|(_, out, _)| out.clone())
        .expect("pid result");
    assert!(pid.parse::<u32>().is_ok(), "a pid: {pid}");
    assert!(
        ends.contains(&("echo".into(), "echo: hi".into(), false)),
        "{ends:?}"
    );
    let errors = tool_errors(&first);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].0, "sleep");
    assert!(errors[0].1.contains("unknown tool `sleep`"), "{errors:?}");
    assert!(warnings(&first).is_empty(), "{:?}", warnings(&first));

    // A second run talks to the same server process.
    let second = run(&mut executor, "which process now?").await;
    let again = tool_ends(&second)
        .into_iter()
        .find(|(tool, _, _)| tool == "pid")
        .map(|(_, out, _)| out)
        .expect("pid result");
    assert_eq!(
        again, pid,
        "one connection per server config, reused across runs"
    );
    assert!(process_alive(&pid));

    executor.stop().await;
    // Stopping the executor stops the server it started.
    let deadline = Instant::now() + Duration::from_secs(10);
    while process_alive(&pid) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        !process_alive(&pid),
        "the MCP server {pid} outlived the executor"
    );
}

#[tokio::test]
async fn a_server_that_dies_mid_call_warns_and_is_restarted_on_its_next_use() {
    let dir = TempDir::new().expect("tmp");
    let registry = FakeRegistry::start().await;
    registry.set_helper_mcp(vec![fixture_server()], &["pid", "crash"]);
    let script = script_of_calls(&[("pid", "{}"), ("crash", "{}"), ("pid", "{}")]);
    let mut executor = Executor::start(&setup(&dir, &registry, &script, 10)).await;

    let events = run(&mut executor, "crash it").await;
    assert_eq!(
        done_status(&events),
        RunStatus::Completed,
        "{:?}",
        kinds(&events)
    );
    let pids: Vec<String> = tool_ends(&events)
        .into_iter()
        .filter(|(tool, _, _)| tool == "pid")
        .map(|(_, out, _)| out)
        .collect();
    assert_eq!(pids.len(), 2, "{:?}", tool_ends(&events));
    assert_ne!(pids[0], pids[1], "a new server process after the crash");
    assert!(!process_alive(&pids[0]));
    let errors = tool_errors(&events);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].0, "crash");
    assert!(errors[0].1.contains("MCP server"), "{errors:?}");
    let warned = warnings(&events);
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert_eq!(warned[0].0, "MCP_SERVER_DISCONNECTED");
    // The model saw the failure and the run went on to its answer.
    match &events[events.len() - 2].event {
        Some(Event::FinalAnswer(answer)) => assert_eq!(answer.text, format!("last: {}", pids[1])),
        other => panic!("expected the final answer, got {other:?}"),
    }
    executor.stop().await;
}

#[tokio::test]
async fn a_server_that_cannot_start_leaves_the_run_going_with_the_other_tools() {
    let dir = TempDir::new().expect("tmp");
    let registry = FakeRegistry::start().await;
    let broken = v1::McpServer {
        r#type: "stdio".into(),
        command: "/nonexistent/mcp-server".into(),
        ..v1::McpServer::default()
    };
    registry.set_helper_mcp(vec![broken, fixture_server()], &["echo"]);
    let script = script_of_calls(&[("probe", "{x: native}"), ("echo", "{text: mcp}")]);
    let mut executor = Executor::start(&setup(&dir, &registry, &script, 10)).await;

    let events = run(&mut executor, "go").await;
    assert_eq!(
        done_status(&events),
        RunStatus::Completed,
        "{:?}",
        kinds(&events)
    );
    let warned = warnings(&events);
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert_eq!(warned[0].0, "MCP_SERVER_UNAVAILABLE");
    assert!(
        warned[0].1.contains("/nonexistent/mcp-server"),
        "{warned:?}"
    );
    let order = kinds(&events);
    let warning_at = order.iter().position(|k| *k == "warning");
    let first_tool_at = order.iter().position(|k| *k == "tool_start");
    assert!(warning_at < first_tool_at, "{order:?}");
    assert_eq!(
        tool_ends(&events),
        vec![
            ("probe".into(), "probed: native".into(), false),
            ("echo".into(), "echo: mcp".into(), false)
        ]
    );
    executor.stop().await;
}

/// `mcp-server-everything streamableHttp` on `port`; killed on drop.
struct Everything(Child);

impl Everything {
    fn start(port: u16) -> Self {
        let child = Command::new(test_tool("node/node_modules/.bin/mcp-server-everything"))
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start mcp-server-everything");
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
            assert!(
                Instant::now() < deadline,
                "server-everything did not listen on {addr}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Self(child)
    }
}

impl Drop for Everything {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn a_streamable_http_server_that_restarts_is_reconnected_on_the_next_run() {
    let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let server = Everything::start(port);
    let dir = TempDir::new().expect("tmp");
    let registry = FakeRegistry::start().await;
    let config = v1::McpServer {
        r#type: "http".into(),
        url: format!("http://127.0.0.1:{port}/mcp"),
        ..v1::McpServer::default()
    };
    registry.set_helper_mcp(vec![config], &["echo"]);
    let script = script_of_calls(&[("echo", "{message: hello}")]);
    let mut executor = Executor::start(&setup(&dir, &registry, &script, 5)).await;

    let events = run(&mut executor, "echo").await;
    assert_eq!(
        tool_ends(&events),
        vec![("echo".into(), "Echo: hello".into(), false)],
        "{:?}",
        kinds(&events)
    );

    // The server goes away: the run still ends, with a warning and an error result.
    drop(server);
    let events = run(&mut executor, "echo again").await;
    assert_eq!(
        done_status(&events),
        RunStatus::Completed,
        "{:?}",
        kinds(&events)
    );
    let warned = warnings(&events);
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert!(
        warned[0].0 == "MCP_SERVER_DISCONNECTED" || warned[0].0 == "MCP_SERVER_UNAVAILABLE",
        "{warned:?}"
    );

    // It comes back on the same address: the next run uses it again, no executor restart.
    let _server = Everything::start(port);
    let events = run(&mut executor, "echo once more").await;
    assert_eq!(
        tool_ends(&events),
        vec![("echo".into(), "Echo: hello".into(), false)],
        "{:?}",
        kinds(&events)
    );
    assert!(warnings(&events).is_empty(), "{:?}", warnings(&events));
    executor.stop().await;
}

#[tokio::test]
async fn idle_connections_are_closed_and_made_again_on_the_next_use() {
    use executor_svc::tools::{
        Limits, ToolContext,
        mcp::{McpPool, McpTimeouts},
    };
    let pool = McpPool::new(McpTimeouts {
        connect: Duration::from_secs(30),
        call: Duration::from_secs(30),
        idle: None,
    });
    let ctx = ToolContext {
        workspace: executor_svc::tools::Workspace::new(std::env::temp_dir()),
        agent_id: "helper".into(),
        session_id: "s".into(),
        cancel: tokio_util::sync::CancellationToken::new(),
        limits: Limits::default(),
        call_id: "call-1".into(),
        orchestra: None,
    };
    let pid_of = |pool: &McpPool| {
        let server = pool.server(&fixture_server());
        let ctx = &ctx;
        async move {
            let tools = server
                .tools(Some(&["pid".to_owned()]))
                .await
                .expect("tools");
            let tool = tools.first().expect("the pid tool");
            match tool
                .call(ctx, serde_json::json!({}))
                .await
                .expect("pid call")
            {
                executor_svc::tools::ToolOutcome::Output { content, .. } => content,
                other => panic!("unexpected {other:?}"),
            }
        }
    };
    let first = pid_of(&pool).await;
    assert_eq!(
        pool.reap_idle(Duration::from_secs(3600)),
        0,
        "recently used"
    );
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(pool.reap_idle(Duration::from_millis(1)), 1);
    let deadline = Instant::now() + Duration::from_secs(10);
    while process_alive(&first) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!process_alive(&first), "the idle server was stopped");
    let second = pid_of(&pool).await;
    assert_ne!(first, second);
    pool.close().await;
}
