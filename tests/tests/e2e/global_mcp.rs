//! The executor's global MCP servers (issue #11, seed 004 §4, §6.1, §8) through the real
//! binaries: connected at start-up and inventoried in the log, shown in the executor's `/readyz`
//! and `/metrics`, reconnected after the server is killed; a fixture server whose tool takes a
//! command line (so reads and writes are both exercised under every mode); the real CLI for
//! Microsoft 365 MCP server (npm `@pnp/cli-microsoft365-mcp-server`, which starts offline)
//! behind the default chat agent, strictly read-only whatever the mode; and the fallback when
//! no server can be started.

use std::{path::Path, time::Duration};

use serde_json::{Value, json};
use taskforce_tests::{Stack, StackOptions, paths, wait::eventually};

use crate::{
    chat_stream::{END, post},
    helpers::{agent_json, create},
};

/// How long a global server may take to come up (node and Python start in a second or two).
const UP_WITHIN: Duration = Duration::from_secs(60);

/// `GET /readyz` of the executor's metrics listener.
async fn readyz(stack: &Stack) -> Value {
    let metrics = stack
        .executor_metrics_addr()
        .expect("the metrics address its log names");
    let reply = stack
        .http()
        .get(format!("http://{metrics}/readyz"))
        .send()
        .await
        .expect("readyz answers");
    assert_eq!(reply.status(), 200);
    reply.json().await.expect("JSON")
}

/// Waits until `/readyz` shows `server` as `pred` wants it; returns its entry.
async fn server_state(stack: &Stack, server: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let found = eventually(UP_WITHIN, Duration::from_millis(100), || async {
        let health = readyz(stack).await;
        let entry = health["mcp_servers"][server].clone();
        pred(&entry).then_some(entry)
    })
    .await;
    match found {
        Some(entry) => entry,
        None => panic!(
            "{server} never reached the expected state: {}\n{}",
            readyz(stack).await,
            stack.logs()
        ),
    }
}

fn log_of(stack: &Stack, which: &Path) -> String {
    std::fs::read_to_string(which)
        .unwrap_or_else(|e| panic!("{}: {e}\n{}", which.display(), stack.logs()))
}

/// Every deny verb of seed 004 §9, each in one call.
const DENY_VERBS: [&str; 10] = [
    "remove", "delete", "set", "add", "grant", "revoke", "update", "create", "disable", "enable",
];

/// A read whose option value holds a deny word, and a write whose option value holds a read
/// word: the command's verb decides, never its option values.
const OPTION_VALUE_CALLS: [&str; 2] = [
    r#"{name: ops_run, id: url, arguments: {command: "ops widget get --url https://x.example/sites/add-ins"}}"#,
    r#"{name: ops_run, id: send, arguments: {command: "ops widget send --subject 'weekly status'"}}"#,
];

fn ops_script() -> String {
    let mut calls =
        vec![r#"{name: ops_run, id: read, arguments: {command: "ops widget list"}}"#.to_owned()];
    calls.extend(OPTION_VALUE_CALLS.map(str::to_owned));
    for verb in DENY_VERBS {
        calls.push(format!(
            r#"{{name: ops_run, id: {verb}, arguments: {{command: "ops widget {verb} --name w"}}}}"#
        ));
    }
    format!(
        "turns:\n  - match: \"ops please\"\n    tool_calls:\n{}\n  - text: \"Done.\"\n",
        calls
            .iter()
            .map(|c| format!("      - {c}"))
            .collect::<Vec<_>>()
            .join("\n")
    )
}

/// The commands the fixture server ran, sorted: calls of one turn run concurrently, so their
/// order in its log is not theirs.
fn commands_ran(log: &Path) -> Vec<String> {
    let mut lines: Vec<String> = std::fs::read_to_string(log)
        .expect("the fixture's log")
        .lines()
        .map(str::to_owned)
        .collect();
    lines.sort();
    lines
}

/// Runs `opsbot` in `mode`; the tool results by call id (`tool_end` or `tool_error`, text).
async fn ops_run(stack: &Stack, mode: &str) -> Vec<(String, String, String)> {
    let body = json!({"agent_id": "opsbot", "mission": "ops please", "mode": mode});
    crate::policy_modes::run(stack, body)
        .await
        .into_iter()
        .map(|(n, e)| {
            let text = e["message"]
                .as_str()
                .or(e["output"].as_str())
                .unwrap_or_default();
            (
                e["call_id"].as_str().unwrap_or_default().to_owned(),
                n,
                text.to_owned(),
            )
        })
        .collect()
}

#[tokio::test]
async fn a_global_server_is_inventoried_checked_policed_per_mode_and_reconnected_after_a_kill() {
    let dir = tempfile::TempDir::new().expect("tmp");
    let ran = dir.path().join("ops.log");
    let pid_file = dir.path().join("ops.pid");
    let python = paths::python().expect("the test venv exists");
    let fixture = paths::workspace_root().join("tests/fixtures/ops_mcp.py");
    let global = format!(
        "mcp_servers:\n  ops:\n    command: {}\n    args: [{}]\n    env: {{OPS_LOG: {}, OPS_PID_FILE: {}}}\n    health_interval_ms: 300\n",
        python.display(),
        fixture.display(),
        ran.display(),
        pid_file.display()
    );
    let stack = StackOptions::full()
        .with_executor()
        .global_mcp(global)
        .executor_env("AGENT_WRITE_ALLOWLIST", "ops widget add")
        // `ops` names its verbs last, as `m365` does: its command lines can be reads.
        .executor_env("AGENT_COMMAND_PROGRAMS", "m365,ops")
        .llm_script(ops_script())
        .spawn()
        .await
        .expect("stack starts");

    // Connected at boot (before any run), inventoried in the log, healthy.
    let up = server_state(&stack, "ops", |e| e["state"] == "up").await;
    assert_eq!(up["tools"], json!(["ops_run"]), "{up}");
    assert_eq!(up["strict_read_only"], false);
    let health = readyz(&stack).await;
    assert_eq!(health["status"], "ready", "{health}");
    let log = log_of(&stack, &stack.executor_log());
    assert!(
        log.lines()
            .any(|l| l.contains("global MCP server connected") && l.contains("ops_run")),
        "the inventory is logged:\n{log}"
    );

    // An agent uses it by name; the registry cannot list its tools and accepts the allowlist.
    let mut body = agent_json("opsbot");
    body["tool_allowlist"] = json!(["ask_user"]);
    body["mcp_servers"] = json!([{"type": "global", "name": "ops"}]);
    body["mcp_tool_allowlist"] = json!(["ops_run"]);
    let r = create(&stack, &body).await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(
        r.body["mcp_servers"],
        json!([{"type": "global", "name": "ops"}])
    );

    // readOnly: the reads run, every deny verb is refused, allowlisted or not, and so is a
    // write whose option value holds a read word.
    let results = ops_run(&stack, "readOnly").await;
    assert_eq!(results.len(), 13, "{results:?}");
    for (id, event, text) in &results {
        if id == "read" {
            assert_eq!(
                (event.as_str(), text.as_str()),
                ("tool_end", "ran: ops widget list")
            );
        } else if id == "url" {
            assert_eq!(
                event, "tool_end",
                "a get reads whatever its URL holds: {text}"
            );
        } else if id == "send" {
            assert_eq!(event, "tool_error", "{text}");
            assert!(
                text.starts_with("policy_blocked: readOnly mode") && text.contains("not a read"),
                "{text}"
            );
        } else {
            assert_eq!(event, "tool_error", "{id}: {text}");
            assert!(
                text.starts_with("policy_blocked: readOnly mode"),
                "{id}: {text}"
            );
            assert!(
                text.contains(id.as_str()),
                "the reason names the verb: {text}"
            );
        }
    }
    assert_eq!(
        commands_ran(&ran),
        [
            "ops widget get --url https://x.example/sites/add-ins",
            "ops widget list"
        ]
    );

    // default: the allowlisted write runs too, nothing else.
    let results = ops_run(&stack, "default").await;
    for (id, event, text) in &results {
        match id.as_str() {
            "read" | "url" | "add" => assert_eq!(event, "tool_end", "{id}: {text}"),
            _ => assert!(text.contains("has not allowlisted"), "{id}: {text}"),
        }
    }
    assert_eq!(
        commands_ran(&ran),
        [
            "ops widget add --name w",
            "ops widget get --url https://x.example/sites/add-ins",
            "ops widget get --url https://x.example/sites/add-ins",
            "ops widget list",
            "ops widget list"
        ]
    );

    // The server is killed: the executor notices, reconnects (a new process), and says so.
    let pid = std::fs::read_to_string(&pid_file)
        .expect("pid")
        .trim()
        .to_owned();
    let status = std::process::Command::new("kill")
        .args(["-9", &pid])
        .status()
        .expect("kill");
    assert!(status.success());
    let again = server_state(&stack, "ops", |e| {
        e["state"] == "up" && e["reconnects"].as_u64() >= Some(1)
    })
    .await;
    assert_eq!(again["tools"], json!(["ops_run"]));
    let new_pid = std::fs::read_to_string(&pid_file).expect("pid");
    assert_ne!(new_pid.trim(), pid, "a new server process");
    let results = ops_run(&stack, "readOnly").await;
    assert!(
        results
            .iter()
            .any(|(id, e, _)| id == "read" && e == "tool_end"),
        "{results:?}"
    );
    let scrape = stack
        .http()
        .get(format!(
            "http://{}/metrics",
            stack
                .executor_metrics_addr()
                .expect("the metrics address its log names")
        ))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    assert!(
        scrape.contains("taskforce_mcp_server_up{server=\"ops\"} 1"),
        "{scrape}"
    );
    assert!(
        scrape.contains("taskforce_mcp_server_tools{server=\"ops\"} 1"),
        "{scrape}"
    );
}

const M365_SCRIPT: &str = r#"
turns:
  - match: "hello"
    text: "Plain answer."
  - match: "which sites"
    tool_calls:
      - {name: m365_search_commands, id: s1, arguments: {query: "spo site list"}}
      - {name: m365_run_command, id: d1, arguments: {command: "m365 spo site remove --url https://contoso.sharepoint.com/sites/x"}}
      - {name: m365_run_command, id: l1, arguments: {command: "m365 status"}}
  - text: "I could not read the tenant."
"#;

#[tokio::test]
async fn the_m365_server_serves_the_default_chat_agent_strictly_read_only_and_without_a_cli_says_so()
 {
    let server = paths::m365_mcp_server().expect("the M365 MCP server is installed");
    let stack = StackOptions::full()
        .with_executor()
        .executor_env("MCP_M365_ENABLE", "1")
        .executor_env("MCP_M365_START_CMD", server.display().to_string())
        // Even allowlisted, a write to the strictly read-only server is refused in `default`.
        .executor_env("AGENT_WRITE_ALLOWLIST", "m365 spo site remove")
        .llm_script(M365_SCRIPT)
        .spawn()
        .await
        .expect("stack starts");
    let up = server_state(&stack, "m365", |e| e["state"] == "up").await;
    let tools: Vec<&str> = up["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for tool in [
        "m365_search_commands",
        "m365_get_command_docs",
        "m365_run_command",
        "m365_get_best_practices",
    ] {
        assert!(tools.contains(&tool), "{tool} in {tools:?}");
    }
    assert_eq!(up["strict_read_only"], true);

    // The default chat agent is the M365 assistant.
    let (status, thread, text) = post(
        &stack,
        "/ai/agent/stream",
        &json!({"prompt": "which sites do we have?", "mode": "default"}),
    )
    .await;
    assert_eq!(status, 200);
    assert!(text.ends_with(END), "{text}");
    let answer: String = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| !d.starts_with('{') && *d != "[DONE]")
        .collect();
    assert_eq!(answer, "I could not read the tenant.", "{text}");
    let frames: Vec<Value> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str(d).ok())
        .collect();
    let frame = |event: &str, tool: &str, needle: &str| {
        frames.iter().any(|f| {
            f["event"] == event
                && f["tool"] == tool
                && f["text"].as_str().is_some_and(|t| t.contains(needle))
        })
    };
    assert!(
        frame(
            "tool_start",
            "m365_search_commands",
            "🔧 running: m365_search_commands"
        ),
        "{text}"
    );
    assert!(
        frame("tool_end", "m365_search_commands", "✅ done"),
        "{text}"
    );
    assert!(
        frame("tool_error", "m365_run_command", "strictly read-only"),
        "the write is refused whatever the mode: {text}"
    );
    assert!(
        frame("tool_error", "m365_run_command", "m365_run_command failed"),
        "a CLI that is not there is a tool_error: {text}"
    );
    // The audit line of the refused write, with the thread and the mode it was checked in.
    let log = log_of(&stack, &stack.executor_log());
    let audit = log
        .lines()
        .find(|l| l.contains("\"tool call\"") && l.contains("spo site remove"))
        .unwrap_or_else(|| panic!("no audit line for the write:\n{log}"));
    for needle in [
        format!("\"thread_id\":\"{thread}\""),
        "\"outcome\":\"policy_blocked\"".to_owned(),
        "\"policy_mode\":\"readOnly\"".to_owned(),
        "\"tool\":\"m365_run_command\"".to_owned(),
        "\"agent_id\":\"m365-assistant\"".to_owned(),
    ] {
        assert!(audit.contains(&needle), "{needle} in {audit}");
    }
}

#[tokio::test]
async fn with_no_mcp_server_startable_the_chat_answers_without_tools_and_the_logs_say_why() {
    let stack = StackOptions::full()
        .with_executor()
        // A run that waited for a start-up would wait this long.
        .executor_args(["--mcp-connect-timeout-ms", "120000"])
        .executor_env("MCP_M365_ENABLE", "1")
        .executor_env("MCP_M365_START_CMD", "/nonexistent/m365-mcp-server --stdio")
        .llm_script(M365_SCRIPT)
        .spawn()
        .await
        .expect("stack starts");
    let down = server_state(&stack, "m365", |e| e["state"] == "down").await;
    assert!(
        down["error"]
            .as_str()
            .is_some_and(|e| e.contains("/nonexistent/m365-mcp-server")),
        "{down}"
    );
    assert_eq!(readyz(&stack).await["status"], "degraded");

    let started = std::time::Instant::now();
    let (status, _, text) = post(&stack, "/ai/agent/stream", &json!({"prompt": "hello"})).await;
    assert_eq!(status, 200);
    assert_eq!(text, format!("data: Plain\n\ndata:  answer.\n\n{END}"));
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "a down server does not hold the run up for the connect timeout"
    );
    let gateway = log_of(&stack, &stack.gateway_log());
    assert!(
        gateway.contains("the LLM answers without its tools"),
        "{gateway}"
    );
    let executor = log_of(&stack, &stack.executor_log());
    assert!(executor.contains("global MCP server is down"), "{executor}");
}

#[tokio::test]
async fn agent_enable_off_connects_no_global_server() {
    let dir = tempfile::TempDir::new().expect("tmp");
    let stack = StackOptions::full()
        .with_executor()
        .global_mcp(format!(
            "mcp_servers:\n  ops:\n    command: {}\n",
            dir.path().join("never-started").display()
        ))
        .executor_env("AGENT_ENABLE", "0")
        .executor_env("MCP_M365_ENABLE", "1")
        .spawn()
        .await
        .expect("stack starts");
    let health = readyz(&stack).await;
    assert_eq!(health, json!({"status": "ready", "mcp_servers": {}}));
}
