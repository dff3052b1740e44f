//! How the MCP server is reached: streamable HTTP at `/mcp` on the gateway's port, or stdio.
//!
//! HTTP is served statelessly (no `Mcp-Session-Id`), like the rest of the gateway, so any
//! replica can answer any request; answers are plain JSON, so no request holds a stream open.
//! The MCP specification's security rules are enforced by rmcp before a request reaches a tool:
//! `Host` must be an allowed name (DNS rebinding), a present `Origin` must be an allowed origin
//! (403 otherwise), an unsupported `MCP-Protocol-Version` is a 400 and an unknown method a
//! JSON-RPC `-32601`.

use std::{net::IpAddr, sync::Arc};

use rmcp::{
    ServiceExt,
    transport::{
        StreamableHttpServerConfig, StreamableHttpService, stdio_pipes,
        streamable_http_server::session::never::NeverSessionManager,
    },
};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::TaskforceMcp;
use crate::{config::Config, error::GatewayError, state::AppState};

/// `Host` names always accepted on `/mcp`.
pub const LOOPBACK_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "::1"];
/// The value of `--mcp-allowed-hosts` / `--mcp-allowed-origins` that turns the check off.
pub const ANY: &str = "*";

/// The tower service mounted at `/mcp`.
pub type McpHttpService = StreamableHttpService<TaskforceMcp, NeverSessionManager>;

/// The `Host` values `/mcp` accepts: `--mcp-allowed-hosts` when given, else the loopback names
/// plus the address the gateway listens on (unless that is `0.0.0.0` / `::`). `None`: any.
pub fn allowed_hosts(config: &Config) -> Option<Vec<String>> {
    let given: Vec<String> = config
        .mcp_allowed_hosts
        .iter()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .collect();
    if given.iter().any(|h| h == ANY) {
        return None;
    }
    if !given.is_empty() {
        return Some(given);
    }
    let mut hosts: Vec<String> = LOOPBACK_HOSTS.iter().map(|h| (*h).to_owned()).collect();
    let ip = config.listen.ip();
    if !ip.is_loopback() && !ip.is_unspecified() {
        hosts.push(ip.to_string());
    }
    Some(hosts)
}

/// The origins `/mcp` accepts from browsers; `None`: any. Requests without `Origin` (every
/// non-browser client) always pass.
pub fn allowed_origins(config: &Config) -> Option<Vec<String>> {
    let given: Vec<String> = config
        .mcp_allowed_origins
        .iter()
        .map(|o| o.trim().to_owned())
        .filter(|o| !o.is_empty())
        .collect();
    (!given.iter().any(|o| o == ANY)).then_some(given)
}

/// Warns when the gateway listens beyond loopback but `/mcp` would refuse every `Host` that
/// remote clients send.
pub fn warn_on_unreachable_hosts(config: &Config) {
    let ip: IpAddr = config.listen.ip();
    if ip.is_unspecified() && config.mcp_allowed_hosts.is_empty() {
        warn!(
            listen = %config.listen,
            "/mcp accepts only loopback Host headers; set --mcp-allowed-hosts to the names remote MCP clients use (or * behind a trusted proxy)"
        );
    }
}

/// The streamable HTTP service over `state`'s registry channel. It stops answering (and ends
/// open streams) when the gateway's shutdown token fires.
pub fn http_service(state: &AppState, config: &Config) -> McpHttpService {
    let server = TaskforceMcp::new(state.clone());
    let mut http = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_max_request_body_bytes(config.max_body_bytes)
        .with_cancellation_token(state.shutdown.child_token());
    http = match allowed_hosts(config) {
        Some(hosts) => http.with_allowed_hosts(hosts),
        None => http.disable_allowed_hosts(),
    };
    http = match allowed_origins(config) {
        Some(origins) => http
            .with_allowed_origins(origins)
            .enforce_origin_validation(),
        None => http.disable_allowed_origins(),
    };
    StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(NeverSessionManager::default()),
        http,
    )
}

/// Serves the MCP server on stdin/stdout until the client closes stdin or `shutdown` fires.
/// stdout carries only protocol messages; logs go to stderr.
pub async fn serve_stdio(config: Config, shutdown: CancellationToken) -> Result<(), GatewayError> {
    config.validate()?;
    let state = AppState::new(&config, shutdown.clone())?;
    info!(registry = %config.registry_url, "mcp server on stdio");
    let running = match TaskforceMcp::new(state)
        .serve_with_ct(stdio_pipes(), shutdown.child_token())
        .await
    {
        Ok(r) => r,
        // A signal before the client initialised is an ordinary stop.
        Err(_) if shutdown.is_cancelled() => return Ok(()),
        Err(e) => return Err(GatewayError::Mcp(e.to_string())),
    };
    let reason = running
        .waiting()
        .await
        .map_err(|e| GatewayError::Mcp(e.to_string()))?;
    info!(reason = ?reason, "mcp stdio session ended");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(listen: &str, hosts: &[&str], origins: &[&str]) -> Config {
        Config {
            listen: listen.parse().expect("socket address"),
            mcp_allowed_hosts: hosts.iter().map(|h| (*h).to_owned()).collect(),
            mcp_allowed_origins: origins.iter().map(|o| (*o).to_owned()).collect(),
            ..Config::default()
        }
    }

    #[test]
    fn default_hosts_are_loopback_plus_a_specific_listen_address() {
        let loopback = allowed_hosts(&config("127.0.0.1:8080", &[], &[]));
        assert_eq!(
            loopback,
            Some(vec!["localhost".into(), "127.0.0.1".into(), "::1".into()])
        );
        let lan = allowed_hosts(&config("10.1.2.3:8080", &[], &[])).unwrap_or_default();
        assert!(lan.contains(&"10.1.2.3".to_owned()) && lan.contains(&"localhost".to_owned()));
        let any = allowed_hosts(&config("0.0.0.0:8080", &[], &[])).unwrap_or_default();
        assert_eq!(any.len(), LOOPBACK_HOSTS.len());
    }

    #[test]
    fn configured_hosts_replace_the_default_and_star_disables_the_check() {
        let given = allowed_hosts(&config(
            "0.0.0.0:8080",
            &["gateway", " mcp.example.com "],
            &[],
        ));
        assert_eq!(
            given,
            Some(vec!["gateway".into(), "mcp.example.com".into()])
        );
        assert_eq!(allowed_hosts(&config("0.0.0.0:8080", &["*"], &[])), None);
    }

    #[test]
    fn origins_are_checked_unless_star() {
        let o = allowed_origins(&config("127.0.0.1:8080", &[], &["http://localhost:*"]));
        assert_eq!(o, Some(vec!["http://localhost:*".into()]));
        assert_eq!(
            allowed_origins(&config("127.0.0.1:8080", &[], &["*"])),
            None
        );
        // An empty list still validates: every present Origin is refused.
        assert_eq!(
            allowed_origins(&config("127.0.0.1:8080", &[], &[])),
            Some(vec![])
        );
    }
}
