//! The executor's global MCP servers (seed 004 §4, §6.1, §8): one connection per server per
//! executor, made at start-up, its tools inventoried in the log, health-checked on an interval
//! with a cheap read call (`tools/list`), reconnected with backoff after the server exits or
//! fails a check, closed at shutdown. An agent uses one with an `mcp_servers` entry
//! `{type: global, name: <name>}`; runs never start a global server themselves, so a server
//! that is down makes a run's tools unavailable at once instead of holding the run up.
//!
//! The servers come from a YAML file (`--global-mcp-config`, default
//! `configs/mcp/global.yaml`; a missing file means none) and the built-in `m365` server (the
//! CLI for Microsoft 365 MCP server, seed 004), configured by the environment:
//! `MCP_M365_START_CMD` (its command line; unset: `npx -y @pnp/cli-microsoft365-mcp-server@latest`),
//! `MCP_M365_STRICT_READONLY` (default `1`: every call is checked as in `readOnly`, whatever the
//! run's mode), `MCP_M365_HEALTH_INTERVAL_MS` (default 30000, the interval of every global
//! server without its own), `MCP_M365_ENABLE` (default `1`). `AGENT_ENABLE=0` connects none.

use std::{
    collections::{BTreeMap, HashMap},
    path::Path,
    sync::Arc,
    time::Duration,
};

use futures::future::join_all;
use serde::{Deserialize, Serialize};
use taskforce_proto::v1;
use taskforce_runtime::{now_ms, switch};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::mcp::{McpPool, Server};

/// The built-in server's name.
pub const M365: &str = "m365";

/// The documented launch of the CLI for Microsoft 365 MCP server.
pub const M365_DEFAULT_COMMAND: &str = "npx -y @pnp/cli-microsoft365-mcp-server@latest";

/// Longest wait between two reconnection attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// How often a supervisor looks whether its server's process is still there.
const LIVENESS_TICK: Duration = Duration::from_millis(500);

/// One server of the file.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ServerEntry {
    /// `stdio` (default), `http` or `sse`.
    #[serde(rename = "type", default = "stdio")]
    pub kind: String,
    /// stdio: the program.
    #[serde(default)]
    pub command: String,
    /// stdio: its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// stdio: extra environment (`${VAR}` placeholders are expanded from the executor's).
    #[serde(default, deserialize_with = "taskforce_proto::mcp_config::unique_map")]
    pub env: BTreeMap<String, String>,
    /// http/sse: the endpoint.
    #[serde(default)]
    pub url: String,
    /// http/sse: extra headers (`${VAR}` placeholders are expanded).
    #[serde(default, deserialize_with = "taskforce_proto::mcp_config::unique_map")]
    pub headers: BTreeMap<String, String>,
    /// Check every call as in `readOnly`, whatever the run's mode.
    #[serde(default)]
    pub strict_read_only: bool,
    /// Health-check interval in milliseconds (default: `MCP_M365_HEALTH_INTERVAL_MS`).
    #[serde(default)]
    pub health_interval_ms: Option<u64>,
}

fn stdio() -> String {
    "stdio".to_owned()
}

/// The file's shape.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct GlobalFile {
    #[serde(default, deserialize_with = "taskforce_proto::mcp_config::unique_map")]
    mcp_servers: BTreeMap<String, ServerEntry>,
}

/// The global servers to connect, by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GlobalSettings {
    /// Servers by name.
    pub servers: BTreeMap<String, ServerEntry>,
    /// The interval of servers without their own.
    pub health_interval: Duration,
}

impl GlobalSettings {
    /// The servers of the file at `path` (missing: none) and the built-in `m365`, as the
    /// environment (`get`) configures them; none when `AGENT_ENABLE` is off.
    pub fn load(path: &Path, get: impl Fn(&str) -> Option<String>) -> Result<Self, String> {
        let health_interval = match get("MCP_M365_HEALTH_INTERVAL_MS") {
            None => Duration::from_millis(30_000),
            Some(v) => match v.trim().parse::<u64>() {
                Ok(ms) if ms > 0 => Duration::from_millis(ms),
                _ => {
                    return Err(format!(
                        "MCP_M365_HEALTH_INTERVAL_MS must be a positive number of milliseconds, got {v:?}"
                    ));
                }
            },
        };
        let mut settings = Self {
            servers: BTreeMap::new(),
            health_interval,
        };
        let on = |name: &str| switch(name, get(name).as_deref(), true).map_err(|e| e.to_string());
        if !on("AGENT_ENABLE")? {
            return Ok(settings);
        }
        let file: GlobalFile = match taskforce_runtime::read_config(path) {
            Ok(text) => match taskforce_runtime::yaml::yaml(text.as_bytes()) {
                Ok(file) => file,
                // An emptied file: no servers, as before the guarded reader.
                Err(taskforce_runtime::yaml::YamlError::Empty) => GlobalFile::default(),
                Err(e) => {
                    return Err(format!(
                        "{}: {}",
                        path.display(),
                        taskforce_runtime::auth::without_values(&e.to_string(), &text)
                    ));
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => GlobalFile::default(),
            Err(e) => return Err(format!("{}: {e}", path.display())),
        };
        settings.servers = file.mcp_servers;
        if on("MCP_M365_ENABLE")? {
            let entry = settings
                .servers
                .entry(M365.to_owned())
                .or_insert_with(|| ServerEntry::stdio(""));
            if let Some(cmd) = get("MCP_M365_START_CMD").filter(|c| !c.trim().is_empty()) {
                let words = shlex::split(&cmd)
                    .filter(|w| !w.is_empty())
                    .ok_or_else(|| format!("MCP_M365_START_CMD is not a command line: {cmd:?}"))?;
                entry.kind = stdio();
                entry.command = words[0].clone();
                entry.args = words[1..].to_vec();
                entry.url.clear();
            } else if entry.command.is_empty() && entry.url.is_empty() {
                let mut words = M365_DEFAULT_COMMAND.split(' ').map(str::to_owned);
                entry.command = words.next().unwrap_or_default();
                entry.args = words.collect();
            }
            entry.strict_read_only = on("MCP_M365_STRICT_READONLY")?;
        } else {
            settings.servers.remove(M365);
        }
        for (name, entry) in &settings.servers {
            entry
                .check()
                .map_err(|e| format!("global MCP server `{name}`: {e}"))?;
        }
        Ok(settings)
    }
}

impl ServerEntry {
    /// A stdio server started with `command` (no arguments), strictly read-only.
    pub fn stdio(command: &str) -> Self {
        Self {
            kind: stdio(),
            command: command.to_owned(),
            args: Vec::new(),
            env: BTreeMap::new(),
            url: String::new(),
            headers: BTreeMap::new(),
            strict_read_only: true,
            health_interval_ms: None,
        }
    }

    fn check(&self) -> Result<(), String> {
        if self.kind == "global" {
            return Err(
                "type must be stdio, http or sse (this file defines global servers)".into(),
            );
        }
        taskforce_proto::mcp_config::validate(&self.config())
    }

    fn config(&self) -> v1::McpServer {
        v1::McpServer {
            r#type: self.kind.clone(),
            command: self.command.clone(),
            args: self.args.clone(),
            env: self.env.clone().into_iter().collect::<HashMap<_, _>>(),
            url: self.url.clone(),
            headers: self.headers.clone().into_iter().collect::<HashMap<_, _>>(),
            name: String::new(),
        }
    }
}

/// A global server's state, as `/readyz` shows it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Health {
    /// `connecting` (never up yet), `up` or `down`.
    pub state: &'static str,
    /// Its tools at the last successful check.
    pub tools: Vec<String>,
    /// Why it is down.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// When it was last checked (milliseconds since the Unix epoch).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checked_at_ms: Option<u64>,
    /// Connections made after the first.
    pub reconnects: u64,
    /// Every call is checked as in `readOnly`.
    pub strict_read_only: bool,
    /// Whether it was ever connected (a connection after that is a reconnect).
    #[serde(skip)]
    pub ever_up: bool,
}

impl Health {
    /// A server not connected yet.
    pub fn connecting(strict_read_only: bool) -> Self {
        Self {
            state: "connecting",
            tools: Vec::new(),
            error: None,
            checked_at_ms: None,
            reconnects: 0,
            strict_read_only,
            ever_up: false,
        }
    }
}

/// One global server and how often it is checked (its health lives in the server).
#[derive(Debug)]
struct Supervised {
    name: String,
    server: Arc<Server>,
    interval: Duration,
}

/// The executor's global servers.
#[derive(Debug, Default)]
pub struct GlobalServers {
    servers: BTreeMap<String, Arc<Supervised>>,
}

impl GlobalServers {
    /// The servers of `settings`, in `pool` (not connected yet: see [`GlobalServers::supervise`]).
    pub fn new(settings: &GlobalSettings, pool: &McpPool) -> Self {
        let servers = settings
            .servers
            .iter()
            .map(|(name, entry)| {
                // Down (0) until its first connection: an alert on it fires while it starts.
                crate::metrics::mcp_server(name, false, 0);
                let supervised = Supervised {
                    name: name.clone(),
                    server: pool.pinned(name, &entry.config(), entry.strict_read_only),
                    interval: entry
                        .health_interval_ms
                        .filter(|ms| *ms > 0)
                        .map_or(settings.health_interval, Duration::from_millis),
                };
                (name.clone(), Arc::new(supervised))
            })
            .collect();
        Self { servers }
    }

    /// The server called `name`.
    pub fn get(&self, name: &str) -> Option<Arc<Server>> {
        self.servers.get(name).map(|s| Arc::clone(&s.server))
    }

    /// The names of the configured servers.
    pub fn names(&self) -> Vec<String> {
        self.servers.keys().cloned().collect()
    }

    /// Every server's state, by name.
    pub fn health(&self) -> BTreeMap<String, Health> {
        self.servers
            .iter()
            .filter_map(|(name, s)| Some((name.clone(), s.server.with_health(|h| h.clone())?)))
            .collect()
    }

    /// Connects every server and keeps it connected until `stop` fires, then hangs up.
    pub async fn supervise(self: Arc<Self>, stop: CancellationToken) {
        join_all(
            self.servers
                .values()
                .map(|s| Arc::clone(s).supervise(stop.clone())),
        )
        .await;
        for s in self.servers.values() {
            s.server.disconnect().await;
        }
    }
}

impl Supervised {
    /// Records a connection attempt or check; returns whether the server is up.
    fn record(&self, result: Result<Vec<String>, String>, connected: bool) -> bool {
        self.server
            .with_health(|health| self.note(health, result, connected))
            .unwrap_or(false)
    }

    fn note(
        &self,
        health: &mut Health,
        result: Result<Vec<String>, String>,
        connected: bool,
    ) -> bool {
        let was = health.state;
        health.checked_at_ms = Some(now_ms());
        let up = match result {
            Ok(tools) => {
                if connected {
                    if health.ever_up {
                        health.reconnects += 1;
                    }
                    health.ever_up = true;
                    info!(server = %self.name, count = tools.len(), tools = %tools.join(","), "global MCP server connected; its tools");
                } else if tools != health.tools {
                    info!(server = %self.name, count = tools.len(), tools = %tools.join(","), "global MCP server's tools changed");
                }
                health.state = "up";
                health.tools = tools;
                health.error = None;
                true
            }
            Err(error) => {
                if was != "down" || health.error.as_deref() != Some(error.as_str()) {
                    warn!(server = %self.name, error = %error, "global MCP server is down; reconnecting with backoff");
                }
                health.state = "down";
                health.error = Some(error);
                false
            }
        };
        crate::metrics::mcp_server(&self.name, up, health.tools.len());
        up
    }

    /// Keeps the server connected until `stop` fires. Every failure (a start that fails, a
    /// check that fails, a process that exits) waits the backoff before the next start, and the
    /// backoff doubles; only a server that passes a health check after connecting resets it,
    /// so one that crashes right after each start is not restarted in a tight loop.
    async fn supervise(self: Arc<Self>, stop: CancellationToken) {
        let mut backoff = Duration::from_secs(1);
        let mut up = false;
        let mut next_check = tokio::time::Instant::now();
        loop {
            let failed = if up {
                if self.server.is_connected().await {
                    if tokio::time::Instant::now() >= next_check {
                        up = self
                            .record(self.server.check().await.map_err(|e| e.to_string()), false);
                        next_check = tokio::time::Instant::now() + self.interval;
                        if up {
                            backoff = Duration::from_secs(1);
                        }
                    }
                } else {
                    // The process exited between checks.
                    up = self.record(Err(super::mcp::CONNECTION_CLOSED.to_owned()), false);
                }
                !up
            } else {
                let attempt = tokio::select! {
                    r = self.server.establish() => r,
                    () = stop.cancelled() => return,
                };
                up = self.record(attempt.map_err(|e| e.to_string()), true);
                next_check = tokio::time::Instant::now() + self.interval;
                !up
            };
            let wait = if failed {
                let wait = backoff;
                backoff = (backoff * 2).min(MAX_BACKOFF);
                wait
            } else {
                LIVENESS_TICK
            };
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(wait) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn m365_is_built_in_strict_and_started_the_documented_way() {
        let s = GlobalSettings::load(Path::new("/nonexistent.yaml"), env(&[])).expect("loads");
        let m365 = &s.servers[M365];
        assert_eq!(m365.command, "npx");
        assert_eq!(m365.args, ["-y", "@pnp/cli-microsoft365-mcp-server@latest"]);
        assert!(m365.strict_read_only);
        assert_eq!(s.health_interval, Duration::from_secs(30));
    }

    #[test]
    fn the_environment_configures_m365_and_agent_enable_turns_everything_off() {
        let s = GlobalSettings::load(
            Path::new("/nonexistent.yaml"),
            env(&[
                ("MCP_M365_START_CMD", "node '/opt/m 365/index.js' --x"),
                ("MCP_M365_STRICT_READONLY", "0"),
                ("MCP_M365_HEALTH_INTERVAL_MS", "500"),
            ]),
        )
        .expect("loads");
        let m365 = &s.servers[M365];
        assert_eq!(m365.command, "node");
        assert_eq!(m365.args, ["/opt/m 365/index.js", "--x"]);
        assert!(!m365.strict_read_only);
        assert_eq!(s.health_interval, Duration::from_millis(500));
        let off = GlobalSettings::load(
            Path::new("/nonexistent.yaml"),
            env(&[("AGENT_ENABLE", "0")]),
        )
        .expect("loads");
        assert!(off.servers.is_empty());
        let no_m365 = GlobalSettings::load(
            Path::new("/nonexistent.yaml"),
            env(&[("MCP_M365_ENABLE", "off")]),
        )
        .expect("loads");
        assert!(no_m365.servers.is_empty());
        for bad in [
            ("MCP_M365_HEALTH_INTERVAL_MS", "soon"),
            ("MCP_M365_START_CMD", "node 'unclosed"),
        ] {
            let err = GlobalSettings::load(Path::new("/nonexistent.yaml"), env(&[bad]))
                .expect_err("refused");
            assert!(err.contains(bad.0), "{err}");
        }
    }

    #[test]
    fn the_file_adds_servers_and_bad_entries_are_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("global.yaml");
        std::fs::write(
            &path,
            "mcp_servers:\n  time:\n    command: uvx\n    args: [mcp-server-time]\n    health_interval_ms: 100\n",
        )
        .expect("write");
        let s = GlobalSettings::load(&path, env(&[])).expect("loads");
        assert_eq!(s.servers.keys().collect::<Vec<_>>(), ["m365", "time"]);
        assert!(!s.servers["time"].strict_read_only);
        std::fs::write(
            &path,
            "mcp_servers:\n  web:\n    type: http\n    url: ftp://x\n",
        )
        .expect("write");
        let err = GlobalSettings::load(&path, env(&[])).expect_err("refused");
        assert!(err.contains("`web`") && err.contains("url"), "{err}");
        // A server named twice is refused, not the last one kept; an emptied file is none.
        std::fs::write(
            &path,
            "mcp_servers:\n  a: {command: uvx}\n  a: {type: http, url: http://h/}\n",
        )
        .expect("write");
        let err = GlobalSettings::load(&path, env(&[])).expect_err("refused");
        assert!(err.contains("duplicate key `a`"), "{err}");
        std::fs::write(&path, "\n").expect("write");
        let s = GlobalSettings::load(&path, env(&[])).expect("loads");
        assert_eq!(s.servers.keys().collect::<Vec<_>>(), ["m365"]);
    }

    #[tokio::test]
    async fn a_server_that_cannot_start_is_down_with_its_reason_and_runs_are_told_at_once() {
        let settings = GlobalSettings {
            servers: BTreeMap::from([(
                "broken".to_owned(),
                ServerEntry::stdio("/nonexistent/mcp-server"),
            )]),
            health_interval: Duration::from_secs(30),
        };
        let pool = McpPool::new(super::super::mcp::McpTimeouts::default());
        let global = Arc::new(GlobalServers::new(&settings, &pool));
        // Down in the metrics from the start, before its first attempt.
        assert!(
            crate::metrics::render().contains("taskforce_mcp_server_up{server=\"broken\"} 0"),
            "{}",
            crate::metrics::render()
        );
        let stop = CancellationToken::new();
        let task = tokio::spawn(Arc::clone(&global).supervise(stop.clone()));
        let mut health = global.health();
        for _ in 0..100 {
            if health["broken"].state == "down" {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
            health = global.health();
        }
        assert_eq!(health["broken"].state, "down");
        assert!(
            health["broken"]
                .error
                .as_deref()
                .is_some_and(|e| e.contains("/nonexistent/mcp-server")),
            "{health:?}"
        );
        let server = global.get("broken").expect("configured");
        let started = std::time::Instant::now();
        let err = server.tools(None).await.expect_err("down");
        assert!(started.elapsed() < Duration::from_secs(1));
        assert!(
            err.to_string().contains("`broken` is not connected"),
            "{err}"
        );
        stop.cancel();
        task.await.expect("supervisor stops");
    }
}
