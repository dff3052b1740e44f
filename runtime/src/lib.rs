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
//! - `init`: a service started as PID 1 starts itself again as its child and stays PID 1 as its
//!   init (reaps orphans, passes SIGTERM and SIGINT on, keeps no readable copy of the
//!   environment), see [`run_main`].
//! - [`http_server`]: serving an axum router with a header-read timeout (the gateway, `/metrics`).
//! - [`metrics`]: the process-wide Prometheus registry, `/metrics`, HTTP and gRPC request metrics.
//! - [`sandbox`]: the command line of `taskforce-sandbox`, the tool and task launcher.
//! - [`store`]: opening a sled store with the log segment size it was made with.
//! - this file also: [`read_regular`], reading a file someone else may have made (a workspace's),
//!   and [`read_config`], a configuration file.
//! - [`telemetry`]: logs and OpenTelemetry traces.
//! - [`yaml`]: YAML with the guards every file a user writes gets.
//! - `mcp_client` (feature `mcp-client`): connecting to an MCP server through `rmcp`, shared by
//!   the registry (discovery) and the executor (tool calls).

pub mod auth;
pub mod env;
mod grpc;
pub mod http_server;
#[cfg(target_os = "linux")]
mod init;
#[cfg(feature = "mcp-client")]
pub mod mcp_client;
pub mod metrics;
pub mod sandbox;
pub mod store;
pub mod telemetry;
pub mod yaml;

use std::{net::SocketAddr, path::Path};

pub use grpc::{Fault, GrpcError, MAX_DECODING_BYTES, serve_grpc};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// The bytes of the regular file at `path`, at most `max + 1` of them (so a caller can tell a
/// longer file), blocking. Opened without waiting: a named pipe (which the agents' tools can
/// make in a workspace) would otherwise hold the thread until a writer came. With
/// `follow_links` false, a symbolic link is refused by the open itself (`ELOOP`). Anything but
/// a regular file is `InvalidInput`, saying what it is ("not a regular file but a named
/// pipe"); what was checked is what is read (the check is of the open file).
pub fn read_regular(path: &Path, max: u64, follow_links: bool) -> std::io::Result<Vec<u8>> {
    use std::{
        io::Read,
        os::unix::fs::{FileTypeExt, OpenOptionsExt},
    };
    let mut flags = nix::libc::O_NONBLOCK;
    if !follow_links {
        flags |= nix::libc::O_NOFOLLOW;
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(path)?;
    let kind = file.metadata()?.file_type();
    if !kind.is_file() {
        let what = if kind.is_dir() {
            "a directory"
        } else if kind.is_fifo() {
            "a named pipe"
        } else if kind.is_socket() {
            "a socket"
        } else {
            "a device"
        };
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("not a regular file but {what}"),
        ));
    }
    let mut bytes = Vec::new();
    file.take(max.saturating_add(1)).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// The most bytes of a configuration file (the LLM configuration, a servers file, an API keys
/// file, a scripted provider's script): far more than any needs.
pub const MAX_CONFIG_BYTES: u64 = 4 * 1024 * 1024;

/// The text of the configuration file at `path`: a regular file (links followed: a Kubernetes
/// ConfigMap's files are links), UTF-8, of at most [`MAX_CONFIG_BYTES`]. A named pipe or a
/// device (`/dev/zero`) is refused at once, not waited on or read without end.
pub fn read_config(path: &Path) -> std::io::Result<String> {
    let bytes = read_regular(path, MAX_CONFIG_BYTES, true)?;
    if u64::try_from(bytes.len()).unwrap_or(u64::MAX) > MAX_CONFIG_BYTES {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("larger than {MAX_CONFIG_BYTES} bytes, the most a configuration file may have"),
        ));
    }
    String::from_utf8(bytes)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "not UTF-8 text"))
}

/// How long a service's exit waits for blocking work still running (a store's flush that a
/// full or failing disk keeps from finishing): the process ends anyway.
pub const EXIT_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Runs a service's `main` on a multi-threaded tokio runtime that, once `main` returns, waits at
/// most [`EXIT_WAIT`] for blocking tasks (tokio's own `#[tokio::main]` waits for them without
/// end, so one stuck write would keep the process from exiting). A service started as PID 1 (a
/// container without an init) first becomes its own init: it starts itself again as its
/// child, the service, and stays PID 1 (see `init`).
pub fn run_main<F: std::future::Future>(main: F) -> std::io::Result<F::Output> {
    #[cfg(target_os = "linux")]
    init::become_init_if_pid1()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let out = runtime.block_on(main);
    runtime.shutdown_timeout(EXIT_WAIT);
    Ok(out)
}

/// Opens a sled database with `open`, trying again for up to [`EXIT_WAIT`] while another
/// holder has its lock: a service that is stopping (the same process restarting it, or the old
/// process of a restart) lets go of it shortly after its last handle is dropped, not at once.
/// A lock still held after that is returned as the error it is.
pub fn open_waiting_for_lock<T, E: std::fmt::Display>(
    open: impl FnMut() -> Result<T, E>,
) -> Result<T, E> {
    waiting_for_lock(open, lock_held)
}

/// Tries `lock` again for up to [`EXIT_WAIT`] while `held` says another holder has the lock (a
/// stopping process lets go of it shortly after, not at once); the last answer otherwise.
pub fn waiting_for_lock<T, E: std::fmt::Display>(
    mut lock: impl FnMut() -> Result<T, E>,
    held: impl Fn(&E) -> bool,
) -> Result<T, E> {
    let deadline = std::time::Instant::now() + EXIT_WAIT;
    let mut told = false;
    loop {
        match lock() {
            Err(e) if held(&e) && std::time::Instant::now() < deadline => {
                if !std::mem::replace(&mut told, true) {
                    tracing::info!(error = %e, "waiting for another holder to let go of its lock");
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            done => return done,
        }
    }
}

/// Whether a store's open failed because another holder has its lock (sled says so only in its
/// message: an `Other` I/O error).
pub fn lock_held(e: &impl std::fmt::Display) -> bool {
    e.to_string().contains("could not acquire lock")
}

/// An I/O error in words for a client: a full disk (or quota) as such, since some stores (sled)
/// hand on such errors with their debug text as the message.
pub fn describe_io(e: &std::io::Error) -> String {
    if is_disk_full(e) {
        "no space left on the device".to_owned()
    } else {
        e.to_string()
    }
}

/// Whether `e` says the disk (or the user's quota) is full.
pub fn is_disk_full(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
    )
}

/// Milliseconds since the Unix epoch (0 if the clock is before it).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Checks a service URL given on the command line (`--registry-url`, `--executor-url`, the OTLP
/// endpoint): `http://` or `https://`, a host, and a port that is one (1-65535) if given. The
/// connections are made lazily, so a URL that cannot work must be refused here, at start, not
/// reported later as a lost connection. Returns the port (the scheme's default if none is given).
pub fn check_service_url(url: &str) -> Result<u16, String> {
    let trimmed = url.trim();
    let uri: http::Uri = trimmed
        .parse()
        .map_err(|e| format!("`{trimmed}` is not a URL ({e}); expected http://HOST:PORT"))?;
    let default_port = match uri.scheme_str() {
        Some("http") => 80,
        Some("https") => 443,
        Some(other) => {
            return Err(format!(
                "`{trimmed}` has the scheme `{other}`; expected http:// or https://"
            ));
        }
        None => {
            return Err(format!(
                "`{trimmed}` has no scheme; expected http://HOST:PORT"
            ));
        }
    };
    let Some(authority) = uri.authority() else {
        return Err(format!(
            "`{trimmed}` names no host; expected http://HOST:PORT"
        ));
    };
    if authority.host().is_empty() {
        return Err(format!(
            "`{trimmed}` names no host; expected http://HOST:PORT"
        ));
    }
    // The text after the host's last `:` (not one inside an IPv6 address's brackets).
    let port = authority
        .as_str()
        .rsplit_once(':')
        .map(|(_, port)| port)
        .filter(|port| !port.contains(']'));
    match port {
        None => Ok(default_port),
        Some(port) => match port.parse::<u16>() {
            Ok(p) if p > 0 => Ok(p),
            _ => Err(format!(
                "`{trimmed}` has the port `{port}`, which is not one (1-65535)"
            )),
        },
    }
}

/// [`check_service_url`] as a clap value parser: the URL, trimmed.
pub fn service_url(url: &str) -> Result<String, String> {
    check_service_url(url).map(|_| url.trim().to_owned())
}

/// A value of an environment switch that is neither on nor off.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{name} must be 1, true, yes or on, or 0, false, no or off (any case); got {value:?}")]
pub struct BadSwitch {
    /// The variable.
    pub name: String,
    /// What it held.
    pub value: String,
}

/// Whether the environment switch `name` (holding `value`) is on: `1`, `true`, `yes`, `on` turn
/// it on, `0`, `false`, `no`, `off` off (any case); unset or empty is `default`. Anything else
/// is an error naming the variable: a typo (`O` for `0`) must not leave a switch on silently.
pub fn switch(name: &str, value: Option<&str>, default: bool) -> Result<bool, BadSwitch> {
    match value.map(|v| v.trim().to_ascii_lowercase()).as_deref() {
        None | Some("") => Ok(default),
        Some("1" | "true" | "yes" | "on") => Ok(true),
        Some("0" | "false" | "no" | "off") => Ok(false),
        Some(_) => Err(BadSwitch {
            name: name.to_owned(),
            value: value.unwrap_or_default().to_owned(),
        }),
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

/// How long a new connection of a gRPC server may stay silent: a client that opens one and sends
/// nothing (not even HTTP/2's preface) is dropped then, rather than holding a descriptor for good.
pub const OPENING_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// How many new connections may wait for their first bytes at once; past it, accepting waits
/// (the kernel's backlog holds the rest) instead of descriptors running out.
const OPENING_AT_ONCE: usize = 512;

/// How long accepting pauses after an error (out of descriptors): retrying at once would spin.
const ACCEPT_BACKOFF: std::time::Duration = std::time::Duration::from_millis(100);

/// Accepted connections with `TCP_NODELAY` (small replies and events are not held back by
/// Nagle's algorithm) that have sent their first bytes within [`OPENING_TIMEOUT`]; an accept
/// error pauses accepting for [`ACCEPT_BACKOFF`].
pub fn incoming(
    listener: TcpListener,
) -> impl futures::Stream<Item = std::io::Result<tokio::net::TcpStream>> {
    use futures::StreamExt;
    tokio_stream::wrappers::TcpListenerStream::new(listener)
        .then(|conn| async move {
            match conn {
                Ok(conn) => Some(conn),
                Err(e) => {
                    tracing::debug!(error = %e, "accepting a connection failed; pausing");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    None
                }
            }
        })
        .filter_map(|conn| async move { conn })
        .map(|conn| async move {
            let mut first = [0u8; 1];
            match tokio::time::timeout(OPENING_TIMEOUT, conn.peek(&mut first)).await {
                Ok(Ok(n)) if n > 0 => Some(conn.set_nodelay(true).map(|()| conn)),
                // Silent past the timeout, or closed before a byte: dropped.
                _ => None,
            }
        })
        .buffer_unordered(OPENING_AT_ONCE)
        .filter_map(|conn| async move { conn })
}

/// Server reflection, `v1` and `v1alpha` (grpcurl 1.8 asks for the latter), over the Taskforce,
/// health and `google.rpc` descriptors, so clients also decode error details. It lists the
/// services this server has: `service` (the one Taskforce service it serves), health and
/// reflection.
#[allow(clippy::type_complexity)]
pub fn reflection(
    service: &str,
) -> Result<
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
        [
            service,
            "grpc.health.v1.Health",
            "grpc.reflection.v1.ServerReflection",
            "grpc.reflection.v1alpha.ServerReflection",
        ]
        .into_iter()
        .fold(
            tonic_reflection::server::Builder::configure()
                .register_encoded_file_descriptor_set(taskforce_proto::FILE_DESCRIPTOR_SET)
                .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
                .register_encoded_file_descriptor_set(tonic_types::pb::FILE_DESCRIPTOR_SET),
            tonic_reflection::server::Builder::with_service_name,
        )
    };
    Ok((builder().build_v1()?, builder().build_v1alpha()?))
}

/// The log filter when `RUST_LOG` is not set: seed 004's `AGENT_LOG_LEVEL`
/// (`debug|info|warn|error`), else `info`; `Err` names a level that is none of them (`info`
/// is used then). A level above `info` keeps the tool calls' audit lines (target `audit`, at
/// `info`): seed 004 asks for one per call, and a quieter log is not a reason to lose them
/// (`RUST_LOG=warn` drops them too, when that is wanted).
fn default_level(agent_level: Option<&str>) -> Result<&'static str, String> {
    match agent_level
        .map(|l| l.trim().to_ascii_lowercase())
        .as_deref()
    {
        Some("trace") => Ok("trace"),
        Some("debug") => Ok("debug"),
        // rmcp says three INFO lines per MCP connection (each `/mcp` request, each server a
        // run starts): noise at the default level, there with `debug`.
        None | Some("" | "info") => Ok("info,rmcp=warn"),
        Some("warn" | "warning") => Ok("warn,audit=info"),
        Some("error") => Ok("error,audit=info"),
        Some(_) => Err(format!(
            "AGENT_LOG_LEVEL={:?} is none of debug, info, warn, error; using info",
            agent_level.unwrap_or_default()
        )),
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
    use super::*;

    /// A regular file is read (one byte past `max` at most); a named pipe is refused at once,
    /// not waited on; a link is followed only when asked.
    #[test]
    fn only_regular_files_are_read_and_pipes_do_not_wait() {
        let dir = tempfile::tempdir().expect("tmp");
        let file = dir.path().join("file");
        std::fs::write(&file, b"0123456789").expect("file");
        assert_eq!(read_regular(&file, 4, true).ok(), Some(b"01234".to_vec()));
        assert_eq!(
            read_regular(&file, 64, false).ok(),
            Some(b"0123456789".to_vec())
        );
        let pipe = dir.path().join("pipe");
        nix::unistd::mkfifo(&pipe, nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");
        let refused = read_regular(&pipe, 64, true).expect_err("a pipe is refused");
        assert_eq!(refused.kind(), std::io::ErrorKind::InvalidInput);
        assert!(refused.to_string().contains("a named pipe"), "{refused}");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&file, &link).expect("link");
        assert_eq!(
            read_regular(&link, 64, true).ok(),
            Some(b"0123456789".to_vec())
        );
        let not_followed = read_regular(&link, 64, false).expect_err("a link is refused");
        assert_eq!(not_followed.raw_os_error(), Some(nix::libc::ELOOP));
        assert!(read_regular(dir.path(), 64, true).is_err(), "a directory");
    }

    /// A configuration file is text of a bounded size, through links (a ConfigMap's); a device
    /// such as `/dev/zero` is not read without end, nor a pipe waited on.
    #[test]
    fn a_configuration_file_is_bounded_text() {
        let dir = tempfile::tempdir().expect("tmp");
        let file = dir.path().join("llm_config.yaml");
        std::fs::write(&file, "models: {}\n").expect("file");
        let link = dir.path().join("link.yaml");
        std::os::unix::fs::symlink(&file, &link).expect("link");
        assert_eq!(read_config(&link).ok().as_deref(), Some("models: {}\n"));
        let refused = read_config(Path::new("/dev/zero")).expect_err("a device");
        assert!(refused.to_string().contains("a device"), "{refused}");
        let big = dir.path().join("big.yaml");
        let size = usize::try_from(MAX_CONFIG_BYTES).expect("fits") + 1;
        std::fs::write(&big, vec![b'#'; size]).expect("big");
        let refused = read_config(&big).expect_err("too large");
        assert!(refused.to_string().contains("larger than"), "{refused}");
        std::fs::write(&big, b"\xff\xfe").expect("bytes");
        assert!(read_config(&big).is_err(), "not UTF-8");
    }

    #[test]
    fn service_urls_need_a_scheme_a_host_and_a_real_port() {
        assert_eq!(check_service_url("http://127.0.0.1:50051"), Ok(50051));
        assert_eq!(check_service_url(" https://registry "), Ok(443));
        assert_eq!(check_service_url("http://[::1]:8080/"), Ok(8080));
        assert_eq!(check_service_url("http://[::1]"), Ok(80));
        for (bad, says) in [
            ("notaurl", "no scheme"),
            ("ftp://127.0.0.1:21", "scheme `ftp`"),
            ("http://127.0.0.1:99999", "port `99999`"),
            ("http://127.0.0.1:0", "port `0`"),
            ("http://", "not a URL"),
            ("", "not a URL"),
        ] {
            let err = check_service_url(bad).expect_err(bad);
            assert!(err.contains(says), "{bad}: {err}");
        }
    }
    use super::default_level;

    #[cfg(target_os = "linux")]
    #[test]
    fn a_switch_is_on_off_default_or_an_error_naming_it() {
        for on in ["1", "true", "YES", " On "] {
            assert_eq!(super::switch("S", Some(on), false), Ok(true), "{on}");
        }
        for off in ["0", "False", "no", "OFF"] {
            assert_eq!(super::switch("S", Some(off), true), Ok(false), "{off}");
        }
        assert_eq!(super::switch("S", None, true), Ok(true));
        assert_eq!(super::switch("S", Some(" "), false), Ok(false));
        let e = super::switch("MCP_M365_ENABLE", Some("O"), true).expect_err("a typo");
        assert!(
            e.to_string().contains("MCP_M365_ENABLE") && e.to_string().contains("\"O\""),
            "{e}"
        );
    }

    #[test]
    fn the_process_becomes_non_dumpable() {
        super::protect_secrets();
        assert_eq!(nix::sys::prctl::get_dumpable(), Ok(false));
    }

    #[test]
    fn agent_log_level_sets_the_default_level() {
        assert_eq!(default_level(None), Ok("info,rmcp=warn"));
        assert_eq!(default_level(Some("")), Ok("info,rmcp=warn"));
        assert_eq!(default_level(Some("DEBUG")), Ok("debug"));
        assert_eq!(default_level(Some("warning")), Ok("warn,audit=info"));
        assert_eq!(
            default_level(Some("verbose")),
            Err(
                "AGENT_LOG_LEVEL=\"verbose\" is none of debug, info, warn, error; using info"
                    .to_owned()
            )
        );
    }

    #[test]
    fn a_quiet_agent_log_level_keeps_the_audit_lines() {
        use std::sync::{
            Arc,
            atomic::{AtomicUsize, Ordering},
        };
        use tracing_subscriber::{EnvFilter, layer::SubscriberExt};
        struct Count(Arc<AtomicUsize>);
        impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Count {
            fn on_event(
                &self,
                _: &tracing::Event<'_>,
                _: tracing_subscriber::layer::Context<'_, S>,
            ) {
                self.0.fetch_add(1, Ordering::Relaxed);
            }
        }
        for (level, seen) in [("error", 1), ("warn", 2), ("info", 3)] {
            let count = Arc::new(AtomicUsize::new(0));
            let filter = default_level(Some(level)).map(EnvFilter::new);
            let subscriber = tracing_subscriber::registry()
                .with(filter.ok())
                .with(Count(Arc::clone(&count)));
            tracing::subscriber::with_default(subscriber, || {
                tracing::info!(target: "audit", "a tool call");
                tracing::info!(target: "taskforce", "a run started");
                tracing::warn!(target: "taskforce", "a retry");
            });
            assert_eq!(
                count.load(Ordering::Relaxed),
                seen,
                "AGENT_LOG_LEVEL={level}"
            );
        }
    }
}
