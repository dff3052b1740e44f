//! The gRPC channels to the registry and the executors: lazily connected, kept alive.

use std::time::Duration;

use tonic::transport::{Channel, Endpoint};

/// How long establishing the TCP connection to a service may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// HTTP/2 PING interval, so a dead or hung service is noticed between requests: the agent copy
/// follows the registry's change stream, which is quiet while nothing changes, so a registry
/// that hangs (stopped, a stalled VM, a black-holed network) is noticed by the PINGs alone, and
/// the copy is served until then (at most interval + timeout).
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
/// How long to wait for a PING answer before dropping the connection.
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(5);

/// One HTTP/2 channel to `url`, connected on first use and reconnected when it drops; `Err`
/// says why `url` cannot work (checked here, at start: a lazy channel would only report it as
/// a lost connection on every call).
pub fn lazy_channel(url: &str) -> Result<Channel, String> {
    taskforce_runtime::check_service_url(url)?;
    Ok(Endpoint::from_shared(url.trim().to_owned())
        .map_err(|e| format!("`{url}`: {e}"))?
        .connect_timeout(CONNECT_TIMEOUT)
        .tcp_nodelay(true)
        .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
        .keep_alive_timeout(KEEPALIVE_TIMEOUT)
        .keep_alive_while_idle(true)
        .connect_lazy())
}
