//! gateway binary: parse config, start logging and tracing (stderr), then either bind and serve HTTP or,
//! with `--mcp-stdio`, serve MCP on stdin/stdout; until SIGINT/SIGTERM (or stdin closes).

use anyhow::Context;
use clap::Parser;
use gateway::Config;
use taskforce_runtime as runtime;

/// jemalloc, not glibc's malloc: less CPU per request, none of glibc's slowdown as a busy process
/// ages (`BENCHMARKS.md`, "The allocator").
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = Config::parse();
    let telemetry = runtime::telemetry::init("gateway");
    runtime::protect_secrets();
    config.validate()?;
    if config.mcp_stdio {
        let served =
            runtime::until_signal(|shutdown| gateway::mcp::serve_stdio(config, shutdown)).await;
        telemetry.shutdown().await;
        return Ok(served?);
    }
    let listener = runtime::bind(config.listen, config.addr_file.as_deref())
        .await
        .with_context(|| format!("binding {}", config.listen))?;
    let served = runtime::until_signal(|shutdown| gateway::run(listener, config, shutdown)).await;
    telemetry.shutdown().await;
    Ok(served?)
}
