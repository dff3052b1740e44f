//! gateway binary: parse config, start logging (stderr), then either bind and serve HTTP or,
//! with `--mcp-stdio`, serve MCP on stdin/stdout; until SIGINT/SIGTERM (or stdin closes).

use anyhow::Context;
use clap::Parser;
use gateway::Config;
use taskforce_proto::runtime;
use tokio_util::sync::CancellationToken;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = Config::parse();
    runtime::init_tracing();
    config.validate()?;
    if config.mcp_stdio {
        let shutdown = CancellationToken::new();
        let signals = tokio::spawn(runtime::cancel_on_signals(shutdown.clone()));
        let result = gateway::mcp::serve_stdio(config, shutdown).await;
        signals.abort();
        return Ok(result?);
    }
    let listener = runtime::bind(config.listen, config.addr_file.as_deref())
        .await
        .with_context(|| format!("binding {}", config.listen))?;
    let shutdown = CancellationToken::new();
    let signals = tokio::spawn(runtime::cancel_on_signals(shutdown.clone()));
    let result = gateway::run(listener, config, shutdown).await;
    signals.abort();
    Ok(result?)
}
