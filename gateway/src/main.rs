//! gateway binary: parse config, start logging (stderr), then either bind and serve HTTP or,
//! with `--mcp-stdio`, serve MCP on stdin/stdout; until SIGINT/SIGTERM (or stdin closes).

use anyhow::Context;
use clap::Parser;
use gateway::Config;
use taskforce_runtime as runtime;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = Config::parse();
    runtime::init_tracing();
    config.validate()?;
    if config.mcp_stdio {
        return Ok(
            runtime::until_signal(|shutdown| gateway::mcp::serve_stdio(config, shutdown)).await?,
        );
    }
    let listener = runtime::bind(config.listen, config.addr_file.as_deref())
        .await
        .with_context(|| format!("binding {}", config.listen))?;
    Ok(runtime::until_signal(|shutdown| gateway::run(listener, config, shutdown)).await?)
}
