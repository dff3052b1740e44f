//! registry-svc binary: parse config, start logging, bind, serve until SIGINT/SIGTERM.

use anyhow::Context;
use clap::Parser;
use registry_svc::Config;
use tokio_util::sync::CancellationToken;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = Config::parse();
    init_tracing();
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("binding {}", config.listen))?;
    if let Some(path) = &config.addr_file {
        std::fs::write(path, listener.local_addr()?.to_string())
            .with_context(|| format!("writing {}", path.display()))?;
    }
    let shutdown = CancellationToken::new();
    tokio::spawn(signals(shutdown.clone()));
    registry_svc::run(listener, config, shutdown).await?;
    Ok(())
}

/// Human logs on a terminal, JSON otherwise; `RUST_LOG` filters (default `info`).
fn init_tracing() {
    use std::io::IsTerminal;
    let filter =
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if std::io::stderr().is_terminal() {
        builder.init();
    } else {
        builder.json().init();
    }
}

/// First SIGINT/SIGTERM starts a graceful shutdown; a second one exits at once.
async fn signals(shutdown: CancellationToken) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        return;
    };
    for round in 0..2 {
        tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
        if round == 0 {
            tracing::info!("shutting down");
            shutdown.cancel();
        } else {
            std::process::exit(130);
        }
    }
}
