//! Workspace metadata through the MCP server (issue #4): `show_agent` and `list_agents` over
//! streamable HTTP, cold (every call collects: TTL 0) and warm (answered from the cache), with
//! `n` agents whose workspaces declare three fields each.

use std::path::Path;

use anyhow::{Context, bail};
use serde_json::{Value, json};
use taskforce_proto::v1;
use taskforce_tests::{Stack, StackOptions, paths};

use crate::{Latencies, sequential};

/// Rows for `n` agents.
pub async fn run(n: usize) -> anyhow::Result<Vec<(String, String)>> {
    let task = paths::tool("venv/bin/task")?;
    let mut rows = Vec::new();
    for (label, ttl) in [("cold", "0"), ("warm", "600")] {
        let stack = StackOptions::full()
            .empty_configs()
            .registry_env("TASKFORCE_TASK_BIN", task.display().to_string())
            .registry_env("TASKFORCE_METADATA_TTL_SECS", ttl)
            .spawn()
            .await?;
        seed(&stack, n).await?;
        let show = |i: usize| {
            call(
                &stack,
                "show_agent",
                json!({ "agent_name": agent_id(i % n) }),
            )
        };
        let lat = sequential(if ttl == "0" { 10 } else { 50 }, show).await?;
        rows.push((format!("MCP show_agent, 3 fields, {label}"), lat.summary()));
        let list = |_| call(&stack, "list_agents", json!({}));
        let lat = sequential(if ttl == "0" { 5 } else { 20 }, list).await?;
        rows.push((
            format!("MCP list_agents, {n} agents × 3 fields, {label}"),
            lat.summary(),
        ));
    }
    rows.push(task_floor(&task)?);
    Ok(rows)
}

fn agent_id(i: usize) -> String {
    format!("meta-{i:03}")
}

/// Creates `n` agents, each with a workspace of three fields (one shown in lists).
async fn seed(stack: &Stack, n: usize) -> anyhow::Result<()> {
    let mut client = stack.registry();
    for i in 0..n {
        let ws = stack.root().join(format!("ws-{i:03}"));
        std::fs::create_dir_all(&ws)?;
        std::fs::write(
            ws.join("Taskfile.yml"),
            format!(
                "version: '3'\ntasks:\n  pr_number:\n    desc: PR number\n    meta: {{include_in_list: true}}\n    cmds: [echo {i}]\n\
                 \x20 branch:\n    desc: Branch\n    cmds: [echo feature-{i}]\n\
                 \x20 ready:\n    desc: Ready to merge\n    cmds: [echo true]\n"
            ),
        )?;
        client
            .create_agent(v1::CreateAgentRequest {
                spec: Some(v1::AgentSpec {
                    agent_id: agent_id(i),
                    name: format!("Metadata agent {i}"),
                    description: "An agent of the metadata benchmark.".into(),
                    system_prompt: "Be brief.".into(),
                    tool_allowlist: vec!["git".into()],
                    role: "Coder".into(),
                    project: "Bench".into(),
                    workspace: ws.display().to_string(),
                    ..Default::default()
                }),
            })
            .await
            .with_context(|| format!("creating agent {i}"))?;
    }
    Ok(())
}

/// One stateless MCP `tools/call` over streamable HTTP; fails on a tool error.
async fn call(stack: &Stack, tool: &str, arguments: Value) -> anyhow::Result<()> {
    let reply = stack
        .http()
        .post(stack.url("/mcp"))
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-06-18")
        .json(&json!({
            "jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": { "name": tool, "arguments": arguments }
        }))
        .send()
        .await?;
    if !reply.status().is_success() {
        bail!("{tool}: HTTP {}", reply.status());
    }
    let body: Value = reply.json().await?;
    if body["result"]["isError"] == json!(true) || body.get("error").is_some() {
        bail!("{tool} failed: {body}");
    }
    Ok(())
}

/// What one `task` process costs on this machine: the floor of any cold collection.
fn task_floor(task: &Path) -> anyhow::Result<(String, String)> {
    let mut lat = Vec::new();
    for _ in 0..10 {
        let t = std::time::Instant::now();
        let out = std::process::Command::new(task).arg("--version").output()?;
        if !out.status.success() {
            bail!("task --version failed");
        }
        lat.push(crate::micros(t.elapsed()));
    }
    Ok((
        "one `task --version` process (floor of a cold field)".into(),
        Latencies::new(lat).summary(),
    ))
}
