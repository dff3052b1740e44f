//! MCP tool call overhead on a persistent stdio session (issue #3): the same `echo` call to the
//! real `@modelcontextprotocol/server-everything`, through a bare rmcp client session and
//! through the executor's MCP tool (pooled connection, liveness check, timeout and cancellation,
//! result conversion), interleaved in blocks so drift on a busy machine hits both alike.

use std::time::{Duration, Instant};

use anyhow::Context;
use executor_svc::tools::{
    Limits, ToolContext, ToolOutcome,
    mcp::{McpPool, McpTimeouts},
};
use rmcp::model::CallToolRequestParams;
use serde_json::json;
use taskforce_proto::v1;
use taskforce_runtime::mcp_client;
use taskforce_tests::paths;
use tokio_util::sync::CancellationToken;

use super::Latencies;

const BLOCK: usize = 100;
const TIMEOUT: Duration = Duration::from_secs(60);

/// Measures `calls` calls each way (after a warm-up) and prints a Markdown table.
pub async fn run(calls: usize) -> anyhow::Result<()> {
    let program = paths::mcp_server_everything()?;
    let config = v1::McpServer {
        r#type: "stdio".into(),
        command: program.display().to_string(),
        args: vec!["stdio".into()],
        ..v1::McpServer::default()
    };
    let bare = mcp_client::connect_and_list(&config, TIMEOUT)
        .await
        .context("starting server-everything for the bare session")?
        .client;
    let pool = McpPool::new(McpTimeouts {
        connect: TIMEOUT,
        call: TIMEOUT,
        idle: None,
    });
    let tools = pool
        .server(&config)
        .tools(Some(&["echo".to_owned()]))
        .await
        .context("starting server-everything for the executor's pool")?;
    let echo = tools
        .first()
        .context("server-everything has no echo tool")?;
    let ctx = ToolContext {
        workspace: executor_svc::tools::Workspace::new(std::env::temp_dir()),
        agent_id: "bench".into(),
        session_id: "bench".into(),
        cancel: CancellationToken::new(),
        limits: Limits::default(),
        call_id: "bench".into(),
        orchestra: None,
    };
    let args = json!({"message": "hello"});
    let bare_call = || async {
        let params = CallToolRequestParams::new("echo")
            .with_arguments(args.as_object().cloned().unwrap_or_default());
        let started = Instant::now();
        let result = bare.call_tool(params).await.context("bare echo")?;
        anyhow::ensure!(result.is_error != Some(true), "bare echo failed");
        Ok::<_, anyhow::Error>(micros(started))
    };
    let ours_call = || async {
        let started = Instant::now();
        let outcome = echo
            .call(&ctx, args.clone())
            .await
            .context("executor echo")?;
        anyhow::ensure!(
            matches!(
                outcome,
                ToolOutcome::Output {
                    is_error: false,
                    ..
                }
            ),
            "executor echo failed: {outcome:?}"
        );
        Ok::<_, anyhow::Error>(micros(started))
    };
    for _ in 0..BLOCK {
        bare_call().await?;
        ours_call().await?;
    }
    let (mut b, mut o) = (Vec::with_capacity(calls), Vec::with_capacity(calls));
    while b.len() < calls {
        for _ in 0..BLOCK.min(calls - b.len()) {
            b.push(bare_call().await?);
        }
        for _ in 0..BLOCK.min(calls - o.len()) {
            o.push(ours_call().await?);
        }
    }
    let (b, o) = (Latencies::new(b), Latencies::new(o));
    println!("\n### MCP tool call on a persistent stdio session (server-everything `echo`)\n");
    println!("| path | latency |");
    println!("|---|---|");
    println!("| bare rmcp client session | {} |", b.summary());
    println!(
        "| executor MCP tool (pool, checks, conversion) | {} |",
        o.summary()
    );
    println!(
        "| overhead (p50 difference) | {} µs |",
        i128::from(o.pct(0.5)) - i128::from(b.pct(0.5))
    );
    let _ = bare.cancel().await;
    pool.close().await;
    Ok(())
}

fn micros(started: Instant) -> u64 {
    u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX)
}
