//! The gateway's MCP tools (seed 001) through the official Python MCP SDK
//! (`tests/mcp_client/call.py`): `show_agent` and `list_agents` over streamable HTTP, with real
//! workspaces collected by the real `task` binary, every result checked against the seed's
//! contract schemas. The transports themselves are `mcp_transport`'s.

use std::time::Duration;

use serde_json::{Value, json};
use taskforce_proto::v1;
use taskforce_tests::{Stack, paths};
use tokio::process::Command;

use crate::metadata::{
    FIELD_TIMEOUT_MS, TIMEOUT_MARGIN, create_agent, git_init, metadata_stack, workspace,
};

/// How long one client run may take (Python start-up, the SDK, a few calls).
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(90);

/// The seed's example Taskfile plus a failing and a too-slow field and a helper task.
const FULL_TASKFILE: &str = "version: '3'\ntasks:\n  git_branch:\n    desc: The name of the current git branch\n    cmds: [git rev-parse --abbrev-ref HEAD]\n  pull_request_number:\n    desc: The number of the pull request.\n    meta: {include_in_list: true}\n    cmds: [echo 810]\n  checks_passed:\n    desc: Whether CI passed\n    meta: {include_in_list: true}\n    cmds: [echo true]\n  pr_status:\n    desc: PR status (if available)\n    meta: {include_in_list: true}\n    cmds: [gh-not-installed pr view]\n  slow:\n    desc: Takes too long\n    cmds: [sleep 30]\n  helper:\n    cmds: [echo not a field]\n";

/// Runs the Python client with `target` (`--url URL` or `--stdio CMD…`, last) and `calls`;
/// returns its JSON report.
pub async fn mcp_client(target: &[String], calls: &Value, extra: &[&str]) -> Value {
    let python = paths::tool("venv/bin/python").expect("the test venv exists");
    let script = paths::workspace_root().join("tests/mcp_client/call.py");
    let mut cmd = Command::new(python);
    cmd.arg(script)
        .arg("--calls")
        .arg(calls.to_string())
        .args(extra)
        .args(target)
        .env("NO_PROXY", "127.0.0.1,localhost")
        .kill_on_drop(true);
    let out = tokio::time::timeout(CLIENT_TIMEOUT, cmd.output())
        .await
        .expect("the MCP client finishes in time")
        .expect("the MCP client runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "MCP client failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("client output is not JSON ({e}): {stdout}"))
}

/// The client over streamable HTTP at the stack's `/mcp`.
pub async fn over_http(stack: &Stack, calls: Value) -> Vec<Value> {
    let report = mcp_client(&["--url".into(), stack.url("/mcp")], &calls, &[]).await;
    results(report)
}

/// The results of a report, each successful one checked against the contract schemas.
pub fn results(report: Value) -> Vec<Value> {
    let results = report["results"].as_array().cloned().unwrap_or_default();
    for r in &results {
        assert_eq!(r["contract_errors"], json!([]), "contract violated: {r}");
    }
    results
}

pub fn structured(r: &Value) -> &Value {
    assert_eq!(r["is_error"], false, "tool failed: {r}");
    assert_eq!(
        serde_json::from_str::<Value>(r["text"].as_str().unwrap_or_default())
            .ok()
            .as_ref(),
        Some(&r["structured"]),
        "the text content is the structured content as JSON"
    );
    &r["structured"]
}

pub fn tool_error(r: &Value) -> String {
    assert_eq!(r["is_error"], true, "expected a tool error: {r}");
    r["text"].as_str().unwrap_or_default().to_owned()
}

pub fn show(name: &str) -> Value {
    json!({"tool": "show_agent", "args": {"agent_name": name}})
}

pub fn list(args: Value) -> Value {
    json!({"tool": "list_agents", "args": args})
}

#[tokio::test]
async fn show_agent_covers_the_seed_scenarios() {
    let stack = metadata_stack().spawn().await.expect("stack starts");
    let full = workspace(&stack, "full", Some(FULL_TASKFILE));
    git_init(&full, "005-workspace-metadata");
    let bare = workspace(&stack, "bare", None);
    create_agent(&stack, "yaml-researcher", "Setup", Some(&full)).await;
    create_agent(&stack, "no-taskfile", "Setup", Some(&bare)).await;
    create_agent(&stack, "no-workspace", "Other", None).await;

    let r = over_http(
        &stack,
        json!([
            show("yaml-researcher"),
            show("no-taskfile"),
            show("no-workspace")
        ]),
    )
    .await;
    // Cold: the slow field times out, and the call does not wait longer than that.
    let elapsed = Duration::from_millis(r[0]["elapsed_ms"].as_u64().unwrap_or(u64::MAX));
    assert!(
        elapsed < Duration::from_millis(FIELD_TIMEOUT_MS) + TIMEOUT_MARGIN,
        "{elapsed:?}"
    );
    let agent = &structured(&r[0])["agent"];
    assert_eq!(agent["name"], "yaml-researcher");
    assert_eq!(
        (&agent["role"], &agent["project"], &agent["status"]),
        (&json!("Coder"), &json!("Setup"), &json!("idle"))
    );
    assert_eq!(agent["last_task"], Value::Null);
    assert_eq!(
        agent["workspace_id"].as_str().map(str::len),
        Some(36),
        "a UUID: {agent}"
    );
    assert_eq!(
        agent["metadata_count"], 5,
        "tasks without desc are no fields: {agent}"
    );
    let m = &agent["metadata"];
    assert_eq!(
        m["git_branch"],
        json!({"value": "005-workspace-metadata", "error": null,
            "schema": {"description": "The name of the current git branch", "include_in_list": false}})
    );
    assert_eq!(
        m["pull_request_number"]["value"],
        json!(810),
        "a JSON number, not a string"
    );
    assert_eq!(m["checks_passed"]["value"], json!(true), "a JSON boolean");
    assert_eq!(m["pr_status"]["value"], Value::Null);
    let failed = m["pr_status"]["error"].as_str().unwrap_or_default();
    assert!(
        failed.contains("gh-not-installed pr view") && failed.contains("failed"),
        "{failed}"
    );
    let slow = m["slow"]["error"].as_str().unwrap_or_default();
    assert!(
        m["slow"]["value"].is_null() && slow.contains("timed out"),
        "{slow}"
    );

    for (r, name) in [(&r[1], "no-taskfile"), (&r[2], "no-workspace")] {
        let agent = &structured(r)["agent"];
        assert_eq!(agent["name"], name);
        assert_eq!(
            (&agent["metadata_count"], &agent["metadata"]),
            (&json!(0), &json!({})),
            "{agent}"
        );
    }

    // The list view: values of include_in_list fields only, metadata_count of all fields.
    let r = over_http(&stack, json!([list(json!({"project_filter": "Setup"}))])).await;
    let out = structured(&r[0]);
    assert_eq!(out["total_count"], 2, "{out}");
    let names: Vec<&str> = out["agents"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| a["name"].as_str())
        .collect();
    assert_eq!(names, ["no-taskfile", "yaml-researcher"], "ordered by name");
    assert_eq!(out["agents"][0]["metadata"], json!({}));
    let listed = &out["agents"][1];
    assert_eq!(listed["metadata_count"], 5);
    assert_eq!(
        listed["metadata"],
        json!({"pull_request_number": 810, "checks_passed": true, "pr_status": null})
    );
}

#[tokio::test]
async fn list_agents_filters_by_status_and_project() {
    let stack = metadata_stack().spawn().await.expect("stack starts");
    // Scenario 5: a fresh stack has no workspaces, so no agent has metadata.
    let r = over_http(&stack, json!([list(json!({}))])).await;
    let fresh = structured(&r[0]);
    assert!(fresh["total_count"].as_u64().unwrap_or(0) >= 3, "{fresh}");
    for a in fresh["agents"].as_array().into_iter().flatten() {
        assert_eq!(
            (&a["metadata_count"], &a["metadata"]),
            (&json!(0), &json!({})),
            "{a}"
        );
    }

    let private = workspace(
        &stack,
        "private",
        Some(
            "version: '3'\ntasks:\n  a:\n    desc: First\n    cmds: [echo 1]\n  b:\n    desc: Second\n    cmds: [echo 2]\n",
        ),
    );
    create_agent(&stack, "fleet-mcp-public", "Setup", Some(&private)).await;
    create_agent(&stack, "fleet-metadata", "Setup", None).await;
    create_agent(&stack, "other-project", "Billing", None).await;
    stack
        .registry()
        .report_agent_status(v1::ReportAgentStatusRequest {
            agent_id: "fleet-metadata".into(),
            status: v1::AgentStatus::Busy as i32,
            last_task: "Listing all fleet agents".into(),
            lease_seconds: 300,
            ..Default::default()
        })
        .await
        .expect("status reported");

    let r = over_http(
        &stack,
        json!([
            list(json!({"status_filter": "busy"})),
            list(json!({"status_filter": "idle", "project_filter": "Setup"})),
            list(json!({"project_filter": "Billing", "status_filter": null})),
            list(json!({"project_filter": "Nobody"})),
            list(json!({"status_filter": "sleeping"})),
        ]),
    )
    .await;
    let busy = structured(&r[0]);
    assert_eq!(busy["total_count"], 1, "{busy}");
    assert_eq!(busy["agents"][0]["name"], "fleet-metadata");
    assert_eq!(busy["agents"][0]["status"], "busy");
    assert_eq!(busy["agents"][0]["last_task"], "Listing all fleet agents");
    let idle = structured(&r[1]);
    assert_eq!(idle["total_count"], 1, "{idle}");
    assert_eq!(idle["agents"][0]["name"], "fleet-mcp-public");
    // All fields are excluded from lists: the count says there is more to see.
    assert_eq!(
        (
            &idle["agents"][0]["metadata_count"],
            &idle["agents"][0]["metadata"]
        ),
        (&json!(2), &json!({}))
    );
    let billing = structured(&r[2]);
    assert_eq!(
        (&billing["total_count"], &billing["agents"][0]["name"]),
        (&json!(1), &json!("other-project"))
    );
    assert_eq!(structured(&r[3]), &json!({"agents": [], "total_count": 0}));
    let invalid = tool_error(&r[4]);
    assert!(
        invalid.contains("sleeping") && invalid.contains("\"idle\", \"busy\""),
        "{invalid}"
    );
}

#[tokio::test]
async fn unknown_and_invalid_names_are_tool_errors() {
    let stack = metadata_stack().spawn().await.expect("stack starts");
    let r = over_http(
        &stack,
        json!([
            show("no-such-agent"),
            show("Not A Name"),
            show("../etc/passwd"),
            show("ab"),
            show(&"x".repeat(100_000)),
            json!({"tool": "show_agent", "args": {}}),
            json!({"tool": "show_agent", "args": {"agent_name": 123}}),
            list(json!({"status_filter": 5})),
        ]),
    )
    .await;
    let missing = tool_error(&r[0]);
    assert!(
        missing.contains("AgentNotFoundError") && missing.contains("no-such-agent"),
        "{missing}"
    );
    for (result, name) in r[1..4].iter().zip(["Not A Name", "../etc/passwd", "ab"]) {
        let invalid = tool_error(result);
        assert!(
            invalid.contains("ValidationError") && invalid.contains(name),
            "{invalid}"
        );
    }
    // A long name is quoted, not echoed in full.
    let long = tool_error(&r[4]);
    assert!(
        long.contains("ValidationError") && long.contains("xxxx…") && long.len() < 400,
        "{} bytes: {}",
        long.len(),
        &long[..long.len().min(400)]
    );
    // Arguments that do not fit the input schema are a ValidationError too (seed 001).
    for (result, problem) in r[5..]
        .iter()
        .zip(["agent_name", "invalid type", "invalid type"])
    {
        let invalid = tool_error(result);
        assert!(
            invalid.starts_with("ValidationError: invalid arguments:") && invalid.contains(problem),
            "{invalid}"
        );
    }
}
