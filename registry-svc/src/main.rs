//! registry-svc binary: parse config, start logging and tracing, bind, serve until SIGINT/SIGTERM.

use anyhow::Context;
use clap::Parser;
use registry_svc::Config;
use taskforce_runtime as runtime;

/// jemalloc, not glibc's malloc: less CPU per request, none of glibc's slowdown as a busy process
/// ages (`BENCHMARKS.md`, "The allocator").
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> anyhow::Result<()> {
    runtime::run_main(serve())?
}

async fn serve() -> anyhow::Result<()> {
    let config = Config::parse();
    let telemetry = runtime::telemetry::init("registry-svc");
    runtime::protect_secrets();
    let listener = runtime::bind(config.listen, config.addr_file.as_deref())
        .await
        .with_context(|| format!("binding {}", config.listen))?;
    let served =
        runtime::until_signal(|shutdown| registry_svc::run(listener, config, shutdown)).await;
    // The last spans leave before the process does.
    telemetry.shutdown().await;
    Ok(served?)
}
