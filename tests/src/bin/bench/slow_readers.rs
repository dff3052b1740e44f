//! Clients that ask for the whole agent list and never read it: what they cost the gateway's
//! memory (limits audit F2: the list was built whole per request).

use std::time::Duration;

use anyhow::bail;
use serde_json::json;
use taskforce_tests::StackOptions;
use tokio::io::AsyncWriteExt;

use crate::runs::status_kb;

/// `agents` agents with `prompt_bytes` prompts, then `clients` connections that each send
/// `GET /api/v1/agents` and read nothing: the gateway's RSS before, while they wait, and after
/// they close.
pub async fn run(
    agents: usize,
    prompt_bytes: usize,
    clients: usize,
) -> anyhow::Result<Vec<(String, String)>> {
    let stack = StackOptions::full().empty_configs().spawn().await?;
    let gateway = stack.gateway_pid().unwrap_or(0);
    let prompt = "x".repeat(prompt_bytes);
    for i in 0..agents {
        let r = stack
            .http()
            .post(stack.url("/api/v1/agents"))
            .json(&json!({"agent_id": format!("big-{i:05}"), "name": "Big",
                "description": "A large prompt.", "system_prompt": prompt,
                "tool_allowlist": ["file_read"]}))
            .send()
            .await?;
        if r.status() != reqwest::StatusCode::CREATED {
            bail!("create answered {}: {}", r.status(), r.text().await?);
        }
    }
    let mb = |kb: u64| format!("{:.1} MB", kb as f64 / 1024.0);
    let before = status_kb(gateway, "VmRSS:");
    let addr = stack.gateway_url().trim_start_matches("http://").to_owned();
    let mut held = Vec::with_capacity(clients);
    for _ in 0..clients {
        let socket = tokio::net::TcpSocket::new_v4()?;
        // A small window: the kernel takes little of the answer for a client that reads nothing.
        socket.set_recv_buffer_size(4096)?;
        let mut conn = socket.connect(addr.parse()?).await?;
        conn.write_all(format!("GET /api/v1/agents HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes())
            .await?;
        held.push(conn);
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let waiting = status_kb(gateway, "VmRSS:");
    drop(held);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = status_kb(gateway, "VmRSS:");
    #[allow(clippy::cast_precision_loss)]
    let list_mb = (agents * prompt_bytes) as f64 / 1e6;
    Ok(vec![(
        format!(
            "gateway RSS, {clients} clients not reading an unpaged list of {agents} agents (about {list_mb:.0} MB)"
        ),
        format!(
            "{} before → {} while they wait → {} after they close",
            mb(before),
            mb(waiting),
            mb(after)
        ),
    )])
}
