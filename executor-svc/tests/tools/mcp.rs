//! MCP tools against a real stdio MCP server that misbehaves on request: a call it never
//! answers, and a tool list that changes.

use std::{path::Path, sync::Arc, time::Duration};

use executor_svc::tools::{
    Tool, ToolError, ToolOutcome,
    mcp::{McpPool, McpTimeouts, Server},
};
use serde_json::json;
use taskforce_proto::v1;
use taskforce_runtime::mcp_client::ConnectError;

use super::ctx;

/// A stdio MCP server (newline-delimited JSON-RPC) with the tools `hang` (never answers),
/// `pid` (its process id) and `change` (swaps `hang` for `fresh`, then says its tools changed).
/// `serial` handles one message at a time, so a hanging call blocks everything after it;
/// `threaded` answers the others meanwhile.
const SERVER: &str = r#"
import json, os, sys, threading, time
mode = sys.argv[1]
names = ["hang", "pid", "change"]
out = threading.Lock()
def send(obj):
    with out:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()
def text(mid, value):
    send({"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": value}]}})
def handle(msg):
    method, mid = msg.get("method"), msg.get("id")
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": mid, "result": {
            "protocolVersion": msg["params"]["protocolVersion"],
            "capabilities": {"tools": {"listChanged": True}},
            "serverInfo": {"name": "fixture", "version": "1"}}})
    elif method == "tools/list":
        tools = [{"name": n, "description": n, "inputSchema": {"type": "object"}} for n in names]
        send({"jsonrpc": "2.0", "id": mid, "result": {"tools": tools}})
    elif method == "tools/call":
        name = msg["params"]["name"]
        if name == "hang":
            time.sleep(3600)
        elif name == "change":
            names.remove("hang")
            names.append("fresh")
            send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        text(mid, str(os.getpid()))
    elif mid is not None:
        send({"jsonrpc": "2.0", "id": mid, "result": {}})
for line in sys.stdin:
    msg = json.loads(line)
    if mode == "threaded" and msg.get("method") == "tools/call":
        threading.Thread(target=handle, args=(msg,), daemon=True).start()
    else:
        handle(msg)
"#;

/// A pool (calls time out after 1 s) with the stdio server `python3 script args...`.
fn python_server(connect: Duration, script: &Path, args: &[&str]) -> (McpPool, Arc<Server>) {
    let pool = McpPool::new(McpTimeouts {
        connect,
        call: Duration::from_secs(1),
        idle: None,
    });
    let mut argv = vec![script.display().to_string()];
    argv.extend(args.iter().map(|a| (*a).to_owned()));
    let server = pool.server(&v1::McpServer {
        r#type: "stdio".into(),
        command: "python3".into(),
        args: argv,
        ..Default::default()
    });
    (pool, server)
}

fn server(dir: &Path, mode: &str) -> (McpPool, Arc<Server>) {
    let script = dir.join("server.py");
    std::fs::write(&script, SERVER).expect("write the server");
    python_server(Duration::from_secs(20), &script, &[mode])
}

async fn tool(server: &Arc<Server>, name: &str) -> Arc<dyn Tool> {
    let tools = server
        .tools(None)
        .await
        .expect("the server lists its tools");
    tools
        .into_iter()
        .find(|t| t.name() == name)
        .unwrap_or_else(|| panic!("no tool {name}"))
}

async fn pid(server: &Arc<Server>, dir: &Path) -> String {
    match tool(server, "pid").await.call(&ctx(dir), json!({})).await {
        Ok(ToolOutcome::Output {
            content,
            is_error: false,
        }) => content,
        other => panic!("pid: {other:?}"),
    }
}

/// A server stuck on a call (it handles one at a time) does not answer the check after the
/// call's timeout: its connection is closed and the next call starts the server again, instead
/// of every later call waiting out the timeout on the stuck one.
#[tokio::test]
async fn a_server_stuck_on_a_call_is_started_again_for_the_next() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (pool, server) = server(dir.path(), "serial");
    let first = pid(&server, dir.path()).await;
    let hang = tool(&server, "hang").await;
    match hang.call(&ctx(dir.path()), json!({})).await {
        Err(ToolError::ServerUnavailable { reason, .. }) => {
            assert!(reason.contains("nor to a check"), "{reason}");
        }
        other => panic!("a stuck server is unavailable: {other:?}"),
    }
    let second = pid(&server, dir.path()).await;
    assert_ne!(first, second, "the stuck server was not replaced");
    pool.close().await;
}

/// A server that answers other requests while one call is slow keeps its connection: the call
/// times out and the next one reaches the same process.
#[tokio::test]
async fn a_slow_call_on_a_server_that_still_answers_keeps_the_connection() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (pool, server) = server(dir.path(), "threaded");
    let first = pid(&server, dir.path()).await;
    let hang = tool(&server, "hang").await;
    assert!(
        matches!(
            hang.call(&ctx(dir.path()), json!({})).await,
            Err(ToolError::Timeout { .. })
        ),
        "a slow call times out"
    );
    assert_eq!(pid(&server, dir.path()).await, first);
    pool.close().await;
}

/// `notifications/tools/list_changed`: the next listing has the server's new tools, not the
/// ones it dropped.
#[tokio::test]
async fn a_server_whose_tools_changed_is_listed_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (pool, server) = server(dir.path(), "serial");
    let change = tool(&server, "change").await;
    let before = pid(&server, dir.path()).await;
    assert!(matches!(
        change.call(&ctx(dir.path()), json!({})).await,
        Ok(ToolOutcome::Output {
            is_error: false,
            ..
        })
    ));
    // The notification was sent before the call's answer; the client handles it on a task of
    // its own, so it is waited for (a few seconds at most).
    let mut names = Vec::new();
    for _ in 0..100 {
        names = server
            .tools(None)
            .await
            .expect("listed")
            .iter()
            .map(|t| t.name().to_owned())
            .collect();
        if names.iter().any(|n| n == "fresh") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(names, ["pid", "change", "fresh"]);
    assert_eq!(pid(&server, dir.path()).await, before, "same connection");
    pool.close().await;
}

/// Callers that wait while a connection attempt fails get its answer: they do not each try
/// again, one after the other, each waiting out the connect timeout.
#[tokio::test]
async fn callers_waiting_on_a_failed_connection_share_its_answer() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Says it started, then never answers `initialize`.
    let script = dir.path().join("mute.py");
    let starts = dir.path().join("starts");
    std::fs::write(
        &script,
        format!(
            "import time\nopen({:?}, 'a').write('started\\n')\ntime.sleep(3600)\n",
            starts.display().to_string()
        ),
    )
    .expect("write the server");
    let (pool, server) = python_server(Duration::from_secs(2), &script, &[]);
    let results = futures::future::join_all((0..3).map(|_| server.tools(None))).await;
    for r in &results {
        assert!(
            matches!(r, Err(ConnectError::Timeout(_))),
            "a mute server is a timeout"
        );
    }
    let started = std::fs::read_to_string(&starts).unwrap_or_default();
    assert_eq!(
        started.lines().count(),
        1,
        "one attempt for the three callers"
    );
    // A later caller tries again.
    assert!(server.tools(None).await.is_err());
    let started = std::fs::read_to_string(&starts).unwrap_or_default();
    assert_eq!(started.lines().count(), 2, "a new attempt for a new caller");
    pool.close().await;
}

/// A server that fails at start says why on its stderr: the error carries its last lines.
#[tokio::test]
async fn a_server_that_exits_at_start_is_an_error_with_its_last_words() {
    let dir = tempfile::tempdir().expect("tempdir");
    let script = dir.path().join("broken.py");
    // A long first line, cut by the tail kept: left out whole, not shown from its middle.
    std::fs::write(
        &script,
        "import sys\nsys.stderr.write('token=' + 'x' * 900 + '\\nstarting\\nModuleNotFoundError: No module named mcp_thing\\n')\nsys.exit(3)\n",
    )
    .expect("write the server");
    let (pool, server) = python_server(Duration::from_secs(20), &script, &[]);
    match server.tools(None).await {
        Err(ConnectError::Protocol(message)) => assert!(
            message.ends_with(
                "its stderr ended with: starting | ModuleNotFoundError: No module named mcp_thing"
            ),
            "{message}"
        ),
        other => panic!("a server that exits is an error: {other:?}"),
    }
    pool.close().await;
}
