//! Real MCP servers for tests: `mcp-server-everything` over streamable HTTP (a child process on
//! a free loopback port) and agent/catalog snippets for the `mcp-server-time` stdio server.

use std::{
    net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream},
    path::Path,
    process::Command,
    time::Duration,
};

use anyhow::{Context, bail};
use serde_json::{Value, json};

use crate::{paths, process::ChildProcess, stack::STARTUP_TIMEOUT, wait::eventually};

/// How often to try another port when the chosen one was taken in the meantime.
const PORT_ATTEMPTS: usize = 5;

/// A running `mcp-server-everything streamableHttp`; killed on drop.
pub struct McpHttpServer {
    child: ChildProcess,
    port: u16,
}

impl McpHttpServer {
    /// Starts server-everything over streamable HTTP, logging to `log`, and waits until it
    /// accepts connections. The server reads its port from `PORT`, so a free port is picked
    /// first (and another one tried if it was taken before the server bound it).
    pub async fn everything(log: &Path) -> anyhow::Result<Self> {
        let program = paths::mcp_server_everything()?;
        let mut last_error = None;
        for _ in 0..PORT_ATTEMPTS {
            let port = free_port()?;
            let mut cmd = Command::new(&program);
            cmd.arg("streamableHttp").env("PORT", port.to_string());
            let mut child = ChildProcess::spawn("mcp-server-everything", cmd, log)?;
            let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
            let up = eventually(STARTUP_TIMEOUT, Duration::from_millis(50), || {
                let state = match child.exited() {
                    Some(status) => Some(Err(status)),
                    None => TcpStream::connect_timeout(&addr, Duration::from_millis(200))
                        .ok()
                        .map(Ok),
                };
                async move { state }
            })
            .await;
            match up {
                Some(Ok(_)) => return Ok(Self { child, port }),
                Some(Err(status)) => {
                    last_error = Some(format!("exited with {status}\n{}", child.log_tail(20)))
                }
                None => bail!(
                    "mcp-server-everything did not listen on {addr} within {STARTUP_TIMEOUT:?}\n{}",
                    child.log_tail(20)
                ),
            }
        }
        bail!(
            "mcp-server-everything could not start after {PORT_ATTEMPTS} attempts: {}",
            last_error.unwrap_or_default()
        )
    }

    /// The streamable HTTP endpoint, `http://127.0.0.1:PORT/mcp`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    /// The server process (to kill it early).
    pub fn process(&mut self) -> &mut ChildProcess {
        &mut self.child
    }
}

/// A loopback port that was free a moment ago.
pub fn free_port() -> anyhow::Result<u16> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("binding a probe port")?;
    Ok(listener.local_addr()?.port())
}

/// The REST/JSON `McpServer` entry of the real `mcp-server-time` stdio server.
pub fn time_server_json() -> anyhow::Result<Value> {
    let command = paths::mcp_server_time()?;
    Ok(json!({"type": "stdio", "command": command.display().to_string()}))
}

/// A stdio "server" that never answers: `sleep SECONDS` says nothing until it ends. Tests
/// pick an unusual number so they can find the process (see
/// [`crate::process::processes_with_args`]).
pub fn hanging_server_json(seconds: u32) -> Value {
    json!({"type": "stdio", "command": "sleep", "args": [seconds.to_string()]})
}
