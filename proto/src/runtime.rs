//! Process plumbing every Taskforce binary shares (feature `runtime`): logging set-up, binding
//! the listener, and the shutdown signal. Kept here because services share only this crate.

use std::{net::SocketAddr, path::Path};

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// Human logs on a terminal, JSON otherwise, to stderr; `RUST_LOG` filters (default `info`).
pub fn init_tracing() {
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

/// Binds `addr` and, when `addr_file` is given, writes the bound address there (so scripts and
/// tests can ask for port 0 and learn the port).
pub async fn bind(addr: SocketAddr, addr_file: Option<&Path>) -> std::io::Result<TcpListener> {
    let listener = TcpListener::bind(addr).await?;
    if let Some(path) = addr_file {
        let bound = listener.local_addr()?.to_string();
        // Write then rename, so a reader never sees a half-written address.
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, bound)?;
        std::fs::rename(&tmp, path)?;
    }
    Ok(listener)
}

/// Cancels `shutdown` on the first SIGINT or SIGTERM; a second signal exits at once (130).
pub async fn cancel_on_signals(shutdown: CancellationToken) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::warn!("signal handlers unavailable; stop the process with SIGKILL");
        return;
    };
    for round in 0..2 {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        if round == 0 {
            tracing::info!("shutting down");
            shutdown.cancel();
        } else {
            std::process::exit(130);
        }
    }
}
