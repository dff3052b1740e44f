//! Connecting to an agent's MCP server through `rmcp`, shared by the registry (tool discovery)
//! and the executor (tool calls).
//!
//! A stdio server runs in its own process group with a minimal environment and is killed when
//! its client is dropped. `${VAR}` placeholders are expanded here, at launch, from this
//! process's environment, and never logged.

use std::{collections::HashMap, process::Stdio, time::Duration};

use process_wrap::tokio::{CommandWrap, KillOnDrop, ProcessGroup};
use rmcp::{
    RoleClient, ServiceExt,
    service::RunningService,
    transport::{
        StreamableHttpClientTransport, TokioChildProcess,
        streamable_http_client::StreamableHttpClientTransportConfig,
    },
};
use serde_json::Value;

use taskforce_proto::v1;

/// Environment variables a stdio server inherits; everything else (API keys of this service,
/// for one) stays out. Mirrors the MCP SDKs' default environment.
const INHERITED_ENV: [&str; 8] = [
    "HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LANG", "TMPDIR",
];

/// A live client session with one MCP server.
pub type McpClient = RunningService<RoleClient, ()>;

/// A tool an MCP server exposes.
#[derive(Debug, Clone, PartialEq)]
pub struct DiscoveredTool {
    /// Tool name, as used in `mcp_tool_allowlist`.
    pub name: String,
    /// Its description, possibly empty.
    pub description: String,
    /// JSON schema of its input.
    pub input_schema: Value,
}

/// Why a server could not be reached or listed.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The server did not answer in time.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// The program could not be started.
    #[error("could not start {command:?}: {source}")]
    Spawn {
        /// The configured command (before `${VAR}` expansion).
        command: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The MCP handshake or `tools/list` failed.
    #[error("{0}")]
    Protocol(String),
}

/// Starts (stdio) or connects to (streamable HTTP) `server` and completes the MCP handshake.
/// Not bounded by a timeout: callers wrap it (see [`connect_and_list`]).
pub async fn connect(server: &v1::McpServer) -> Result<McpClient, ConnectError> {
    let protocol = |e: &dyn std::fmt::Display| ConnectError::Protocol(e.to_string());
    match server.r#type.as_str() {
        "stdio" => {
            let transport = spawn_stdio(server)?;
            ().serve(transport).await.map_err(|e| protocol(&e))
        }
        // `sse` servers are tried with streamable HTTP first, as the MCP specification's
        // backwards-compatibility section says; rmcp has no client for the legacy transport.
        _ => {
            let mut headers = HashMap::new();
            for (k, v) in &server.headers {
                let name = http::HeaderName::try_from(k.as_str()).map_err(|e| protocol(&e))?;
                let value = http::HeaderValue::try_from(expand(v)).map_err(|e| protocol(&e))?;
                headers.insert(name, value);
            }
            let mut config = StreamableHttpClientTransportConfig::with_uri(server.url.as_str());
            config.custom_headers = headers;
            let transport = StreamableHttpClientTransport::from_config(config);
            ().serve(transport).await.map_err(|e| {
                let hint = if server.r#type == "sse" {
                    " (only servers that speak streamable HTTP can be used)"
                } else {
                    ""
                };
                ConnectError::Protocol(format!("{e}{hint}"))
            })
        }
    }
}

/// Every tool of a connected server.
pub async fn list_tools(client: &McpClient) -> Result<Vec<DiscoveredTool>, ConnectError> {
    let tools = client
        .list_all_tools()
        .await
        .map_err(|e| ConnectError::Protocol(e.to_string()))?;
    Ok(tools
        .into_iter()
        .map(|t| DiscoveredTool {
            name: t.name.into_owned(),
            description: t.description.map(|d| d.into_owned()).unwrap_or_default(),
            input_schema: Value::Object((*t.input_schema).clone()),
        })
        .collect())
}

/// Connects to `server` and lists its tools, all within `timeout`; returns the live client
/// with the tools.
pub async fn connect_and_list(
    server: &v1::McpServer,
    timeout: Duration,
) -> Result<(McpClient, Vec<DiscoveredTool>), ConnectError> {
    let work = async {
        let client = connect(server).await?;
        let tools = list_tools(&client).await?;
        Ok((client, tools))
    };
    match tokio::time::timeout(timeout, work).await {
        Ok(r) => r,
        Err(_) => Err(ConnectError::Timeout(timeout)),
    }
}

fn spawn_stdio(server: &v1::McpServer) -> Result<TokioChildProcess, ConnectError> {
    let mut cmd = tokio::process::Command::new(expand(&server.command));
    cmd.args(server.args.iter().map(|a| expand(a)))
        .env_clear()
        .envs(
            INHERITED_ENV
                .iter()
                .filter_map(|k| std::env::var(k).ok().map(|v| (*k, v))),
        )
        .envs(server.env.iter().map(|(k, v)| (k, expand(v))));
    let mut wrap = CommandWrap::from(cmd);
    wrap.wrap(ProcessGroup::leader()).wrap(KillOnDrop);
    let (transport, _) = TokioChildProcess::builder(wrap)
        .stderr(Stdio::null())
        .spawn()
        .map_err(|source| ConnectError::Spawn {
            command: server.command.clone(),
            source,
        })?;
    Ok(transport)
}

/// Replaces `${VAR}` with the variable's value (empty when unset).
pub fn expand(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        match after.find('}') {
            Some(end) => {
                out.push_str(&std::env::var(&after[..end]).unwrap_or_default());
                rest = &after[end + 1..];
            }
            None => {
                out.push_str(&rest[start..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_expand_from_the_environment() {
        // PATH is set in every test environment.
        let path = std::env::var("PATH").unwrap_or_default();
        assert_eq!(expand("a${PATH}b"), format!("a{path}b"));
        assert_eq!(expand("${TASKFORCE_SURELY_UNSET_VAR}"), "");
        assert_eq!(expand("no ${ end"), "no ${ end");
    }

    #[tokio::test]
    async fn a_missing_program_is_a_spawn_error() {
        let s = v1::McpServer {
            r#type: "stdio".into(),
            command: "/nonexistent/mcp-server".into(),
            ..Default::default()
        };
        let r = connect_and_list(&s, Duration::from_secs(5)).await;
        assert!(matches!(r, Err(ConnectError::Spawn { .. })), "{r:?}");
    }

    #[tokio::test]
    async fn a_server_that_never_answers_is_cut_off() {
        let s = v1::McpServer {
            r#type: "stdio".into(),
            command: "sleep".into(),
            args: vec!["30".into()],
            ..Default::default()
        };
        let started = std::time::Instant::now();
        let r = connect_and_list(&s, Duration::from_millis(300)).await;
        assert!(matches!(r, Err(ConnectError::Timeout(_))), "{r:?}");
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}
