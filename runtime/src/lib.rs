//! Process plumbing every Taskforce binary shares, kept out of the contract crate
//! (`taskforce-proto`): logging and trace set-up ([`telemetry`]), `${VAR}` placeholders
//! ([`env`]), binding the listener, the shutdown signal, and the gRPC
//! server wiring the registry and the executor both use ([`serve_grpc`]: health, reflection,
//! accepted connections with `TCP_NODELAY`, a graceful stop with a grace period).
//!
//! # Layout
//! - this file: [`bind`] (with `--addr-file`), the shutdown signal, [`serve_grpc`].
//! - `grpc`: the gRPC server wiring behind [`serve_grpc`] (health, reflection, `TCP_NODELAY`,
//!   graceful stop).
//! - [`auth`]: API keys with scopes, one tower layer for REST, `/mcp` and gRPC.
//! - [`env`]: `${VAR}` placeholders, the one expander every configuration uses.
//! - [`metrics`]: the process-wide Prometheus registry, `/metrics`, HTTP and gRPC request metrics.
//! - [`telemetry`]: logs and OpenTelemetry traces.
//! - `mcp_client` (feature `mcp-client`): connecting to an MCP server through `rmcp`, shared by
//!   the registry (discovery) and the executor (tool calls).

pub mod auth;
pub mod env;
mod grpc;
#[cfg(feature = "mcp-client")]
pub mod mcp_client;
pub mod metrics;
pub mod telemetry;

use std::{net::SocketAddr, path::Path};

pub use grpc::{GrpcError, serve_grpc};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// Milliseconds since the Unix epoch (0 if the clock is before it).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Whether an environment switch is on: `0`, `false`, `no`, `off` (any case) turn it off;
/// unset or empty is `default`.
pub fn switch_on(value: Option<&str>, default: bool) -> bool {
    match value.map(|v| v.trim().to_ascii_lowercase()) {
        Some(v) if !v.is_empty() => !matches!(v.as_str(), "0" | "false" | "no" | "off"),
        _ => default,
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

/// Runs `serve` with a token that [`cancel_on_signals`] fires; the signal watcher ends with it.
pub async fn until_signal<F, Fut>(serve: F) -> Fut::Output
where
    F: FnOnce(CancellationToken) -> Fut,
    Fut: std::future::Future,
{
    let shutdown = CancellationToken::new();
    let signals = tokio::spawn(cancel_on_signals(shutdown.clone()));
    let out = serve(shutdown).await;
    signals.abort();
    out
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

/// Accepted connections with `TCP_NODELAY`, so small replies and events are not held back by
/// Nagle's algorithm.
pub fn incoming(
    listener: TcpListener,
) -> impl futures::Stream<Item = std::io::Result<tokio::net::TcpStream>> {
    use futures::StreamExt;
    tokio_stream::wrappers::TcpListenerStream::new(listener).map(|conn| {
        let conn = conn?;
        conn.set_nodelay(true)?;
        Ok(conn)
    })
}

/// Server reflection, `v1` and `v1alpha` (grpcurl 1.8 asks for the latter), over the Taskforce,
/// health and `google.rpc` descriptors, so clients also decode error details.
#[allow(clippy::type_complexity)]
pub fn reflection() -> Result<
    (
        tonic_reflection::server::v1::ServerReflectionServer<
            impl tonic_reflection::server::v1::ServerReflection,
        >,
        tonic_reflection::server::v1alpha::ServerReflectionServer<
            impl tonic_reflection::server::v1alpha::ServerReflection,
        >,
    ),
    tonic_reflection::server::Error,
> {
    let builder = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(taskforce_proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_types::pb::FILE_DESCRIPTOR_SET)
    };
    Ok((builder().build_v1()?, builder().build_v1alpha()?))
}

/// The log level when `RUST_LOG` is not set: seed 004's `AGENT_LOG_LEVEL`
/// (`debug|info|warn|error`), else `info`.
fn default_level(agent_level: Option<&str>) -> &'static str {
    match agent_level
        .map(|l| l.trim().to_ascii_lowercase())
        .as_deref()
    {
        Some("trace") => "trace",
        Some("debug") => "debug",
        Some("warn" | "warning") => "warn",
        Some("error") => "error",
        _ => "info",
    }
}

/// Makes this process non-dumpable (Linux): its `/proc/<pid>/environ`, memory and open files are
/// then closed to the other processes of its user, among them the programs it starts (an agent's
/// MCP servers, metadata tasks, tools), which could otherwise read its secrets (the service
/// token, the model providers' keys) there; and it leaves no core dumps. A kernel that refuses
/// is reported and the service goes on.
pub fn protect_secrets() {
    #[cfg(target_os = "linux")]
    if let Err(e) = nix::sys::prctl::set_dumpable(false) {
        tracing::warn!(error = %e, "cannot make the process non-dumpable; its /proc entries stay readable by its user's other processes");
    }
}

#[cfg(test)]
mod tests {
    use super::default_level;

    #[cfg(target_os = "linux")]
    #[test]
    fn the_process_becomes_non_dumpable() {
        super::protect_secrets();
        assert_eq!(nix::sys::prctl::get_dumpable(), Ok(false));
    }

    #[test]
    fn agent_log_level_sets_the_default_level() {
        assert_eq!(default_level(None), "info");
        assert_eq!(default_level(Some("DEBUG")), "debug");
        assert_eq!(default_level(Some("warning")), "warn");
        assert_eq!(default_level(Some("loud")), "info");
    }
}
