//! executor-svc binary: parse config, start logging, bind, serve until SIGINT/SIGTERM.

use anyhow::Context;
use clap::Parser;
use executor_svc::Config;
use taskforce_runtime as runtime;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = Config::parse();
    runtime::init_tracing();
    let listener = runtime::bind(config.listen, config.addr_file.as_deref())
        .await
        .with_context(|| format!("binding {}", config.listen))?;
    Ok(runtime::until_signal(|shutdown| executor_svc::run(listener, config, shutdown)).await?)
}
