//! MCP tools: the tools of an agent's `mcp_servers`, called through `rmcp`.
//!
//! The [`McpPool`] keeps one connection per server configuration (same command, arguments,
//! environment, URL and headers), shared by every call and every run. A connection is made on
//! first use, within the connect timeout; one that failed or whose server died is made again on
//! the next use, so a restarted server is picked up without restarting the executor. Calls are
//! bounded by the call timeout and the run's cancellation (a dropped call is cancelled on the
//! server too: rmcp sends `notifications/cancelled`). Connections idle for longer than the idle
//! timeout are closed by [`McpPool::reap_idle`], so servers of edited or deleted agents do not
//! linger.

use std::{
    collections::{BTreeMap, HashMap},
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use futures::future::BoxFuture;
use rmcp::{
    ServiceError,
    model::{CallToolRequestParams, CallToolResult, ContentBlock},
};
use serde_json::Value;
use taskforce_proto::v1;
use taskforce_runtime::mcp_client::{self, ConnectError, DiscoveredTool, McpClient};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::{
    Tool, ToolContext, ToolError, ToolOutcome,
    global::{GlobalServers, GlobalSettings, Health},
};
use crate::llm::ToolDefinition;

/// Timeouts of MCP connections and calls.
#[derive(Debug, Clone, Copy)]
pub struct McpTimeouts {
    /// Starting (or connecting to) a server, the handshake and listing its tools.
    pub connect: Duration,
    /// One tool call.
    pub call: Duration,
    /// A connection unused this long is closed (`None`: kept until shutdown).
    pub idle: Option<Duration>,
}

impl Default for McpTimeouts {
    fn default() -> Self {
        Self {
            connect: Duration::from_secs(30),
            call: Duration::from_secs(60),
            idle: Some(Duration::from_secs(600)),
        }
    }
}

/// One connection per MCP server configuration, reused across calls and runs.
#[derive(Debug)]
pub struct McpPool {
    servers: Mutex<HashMap<String, Arc<Server>>>,
    timeouts: McpTimeouts,
    /// What `Server::last_used` counts from.
    epoch: Instant,
    /// The executor's global servers (none unless built [`McpPool::with_global`]).
    global: Arc<GlobalServers>,
}

/// A server configuration and its current connection.
#[derive(Debug)]
pub struct Server {
    /// Set for one of the executor's global servers ([`super::global`]): the supervisor keeps
    /// it connected, runs only use the connection it made.
    global: Option<Global>,
    config: v1::McpServer,
    /// How messages name the server: its command or URL as configured (placeholders not
    /// expanded, so no secret shows).
    label: String,
    timeouts: McpTimeouts,
    /// The live connection; `None` before the first use and after a failure. The lock is held
    /// while connecting, so concurrent users share one connection attempt.
    conn: tokio::sync::Mutex<Option<Arc<Connection>>>,
    /// When the last connection attempt failed, and why: the users that waited on it get its
    /// answer instead of each trying again (and waiting out the connect timeout again).
    failed: Mutex<Option<(Instant, ConnectError)>>,
    /// The pool's epoch.
    epoch: Instant,
    /// Milliseconds from the epoch to the last use.
    last_used: AtomicU64,
}

/// What a global server has besides its connection.
#[derive(Debug)]
struct Global {
    /// Its name in the executor's configuration (`m365`).
    name: String,
    /// Every call is checked as in `readOnly`, whatever the run's mode.
    strict_read_only: bool,
    /// Its state as its supervisor last saw it (runs are told why it is down).
    health: Mutex<Health>,
}

#[derive(Debug)]
struct Connection {
    client: McpClient,
    /// The server's tools as last listed: at connection, and again after it said they changed.
    tools: Mutex<Arc<Vec<DiscoveredTool>>>,
    /// A stdio server's process group in the ledger while it runs, so that an executor
    /// started after this one was killed (SIGKILL) kills what it left running.
    _ledger: crate::tools::native::ledger::Entry,
    /// A stdio server's stderr, read while the connection is kept.
    _stderr: Option<mcp_client::ServerStderr>,
}

impl From<mcp_client::Connected> for Connection {
    fn from(c: mcp_client::Connected) -> Self {
        Self {
            client: c.client,
            tools: Mutex::new(Arc::new(c.tools)),
            _ledger: crate::tools::native::ledger::record(c.pid),
            _stderr: c.stderr,
        }
    }
}

impl Connection {
    fn alive(&self) -> bool {
        !self.client.is_closed() && !self.client.is_transport_closed()
    }
}

impl McpPool {
    /// An empty pool.
    pub fn new(timeouts: McpTimeouts) -> Self {
        Self {
            servers: Mutex::new(HashMap::new()),
            timeouts,
            epoch: Instant::now(),
            global: Arc::default(),
        }
    }

    /// A pool with the global servers of `settings` (connected once
    /// [`GlobalServers::supervise`] runs).
    pub fn with_global(timeouts: McpTimeouts, settings: &GlobalSettings) -> Self {
        let mut pool = Self::new(timeouts);
        pool.global = Arc::new(GlobalServers::new(settings, &pool));
        pool
    }

    /// The executor's global servers.
    pub fn global(&self) -> &Arc<GlobalServers> {
        &self.global
    }

    /// The pool's entry of `config` (created on first sight; no connection is made here).
    pub fn server(&self, config: &v1::McpServer) -> Arc<Server> {
        let key = config_key(config);
        let mut servers = self.lock_servers();
        Arc::clone(servers.entry(key).or_insert_with(|| {
            Arc::new(Server {
                global: None,
                config: config.clone(),
                label: label(config),
                timeouts: self.timeouts,
                conn: tokio::sync::Mutex::new(None),
                failed: Mutex::new(None),
                epoch: self.epoch,
                last_used: AtomicU64::new(0),
            })
        }))
    }

    /// A global server: kept out of the pool's map (never reaped, never shared with an agent's
    /// own servers) and connected by its supervisor, not by runs.
    pub fn pinned(
        &self,
        name: &str,
        config: &v1::McpServer,
        strict_read_only: bool,
    ) -> Arc<Server> {
        Arc::new(Server {
            global: Some(Global {
                name: name.to_owned(),
                strict_read_only,
                health: Mutex::new(Health::connecting(strict_read_only)),
            }),
            config: config.clone(),
            label: name.to_owned(),
            timeouts: self.timeouts,
            conn: tokio::sync::Mutex::new(None),
            failed: Mutex::new(None),
            epoch: self.epoch,
            last_used: AtomicU64::new(0),
        })
    }

    /// Closes every connection unused for longer than `idle`; forgets configurations no run
    /// holds any more. Returns how many connections were closed.
    pub fn reap_idle(&self, idle: Duration) -> usize {
        let servers: Vec<Arc<Server>> = self.lock_servers().values().cloned().collect();
        let now = self.epoch.elapsed();
        let mut closed = 0;
        for server in servers {
            let last = Duration::from_millis(server.last_used.load(Ordering::Relaxed));
            if now.saturating_sub(last) <= idle {
                continue;
            }
            // `try_lock`: a server being connected to is in use.
            let Ok(mut slot) = server.conn.try_lock() else {
                continue;
            };
            if slot.take().is_some() {
                info!(server = %server.label, idle_secs = idle.as_secs(), "closing an idle MCP connection");
                closed += 1;
            }
        }
        // Entries only the map holds (no run has their tools) go too.
        self.lock_servers().retain(|_, s| {
            Arc::strong_count(s) > 1 || s.conn.try_lock().map_or(true, |c| c.is_some())
        });
        closed
    }

    /// Reaps idle connections every so often until `stop` fires (when the idle timeout is set).
    pub async fn reap_until(self: Arc<Self>, stop: CancellationToken) {
        let Some(idle) = self.timeouts.idle else {
            return;
        };
        let every = (idle / 2).clamp(Duration::from_secs(1), Duration::from_secs(60));
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(every) => {
                    self.reap_idle(idle);
                }
            }
        }
    }

    fn lock_servers(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Server>>> {
        lock(&self.servers)
    }

    /// Hangs up every connection (stdio servers are killed with their process group).
    pub async fn close(&self) {
        let servers: Vec<Arc<Server>> = self.lock_servers().drain().map(|(_, s)| s).collect();
        for server in servers {
            server.disconnect().await;
        }
    }
}

impl Server {
    /// How messages name this server.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// How errors the model reads name this server: its program, or its URL without user
    /// info, query or fragment (a credential written in them as it is, not as a `${VAR}`, would
    /// go to the model's provider).
    fn program(&self) -> String {
        match &self.global {
            Some(_) => self.label.clone(),
            None if self.config.r#type == "stdio" => format!("stdio:{}", self.config.command),
            None => bare_url(&self.config.url),
        }
    }

    /// The live connection, made (again) when there is none or the last one died. A global
    /// server's is its supervisor's: a run never waits on a start-up, it is told the server is
    /// down.
    async fn connection(&self) -> Result<Arc<Connection>, ConnectError> {
        self.touch();
        if let Some(global) = &self.global {
            if let Some(conn) = self.current().await {
                return Ok(conn);
            }
            let why = lock(&global.health)
                .error
                .clone()
                .unwrap_or_else(|| "not connected yet".to_owned());
            return Err(ConnectError::Protocol(format!(
                "the global MCP server `{}` is not connected ({why}); the executor reconnects it in the background",
                global.name
            )));
        }
        let asked = Instant::now();
        let mut slot = self.conn.lock().await;
        if let Some(conn) = slot.as_ref() {
            if conn.alive() {
                return Ok(Arc::clone(conn));
            }
            warn!(server = %self.label, "MCP server connection closed; reconnecting");
        }
        *slot = None;
        // An attempt that failed while this caller waited for the lock is this caller's answer.
        if let Some((at, why)) = lock(&self.failed).as_ref()
            && *at >= asked
        {
            return Err(why.duplicate());
        }
        match mcp_client::connect_and_list(&self.config, self.timeouts.connect).await {
            Ok(connected) => {
                info!(server = %self.label, tools = connected.tools.len(), "MCP server connected");
                *lock(&self.failed) = None;
                let conn = Arc::new(Connection::from(connected));
                *slot = Some(Arc::clone(&conn));
                Ok(conn)
            }
            Err(why) => {
                *lock(&self.failed) = Some((Instant::now(), why.duplicate()));
                Err(why)
            }
        }
    }

    /// `text` (from the server) without the values its configuration took from the
    /// environment.
    fn scrub(&self, text: &str) -> String {
        mcp_client::scrub(text, &mcp_client::secrets_of(&self.config))
    }

    /// The live connection, if there is one.
    async fn current(&self) -> Option<Arc<Connection>> {
        self.conn
            .lock()
            .await
            .as_ref()
            .filter(|c| c.alive())
            .cloned()
    }

    /// Whether there is a live connection.
    pub(crate) async fn is_connected(&self) -> bool {
        self.current().await.is_some()
    }

    /// Connects (a global server's supervisor): the slot is locked only to swap the new
    /// connection in, so runs are not held up by a slow start. Returns the tools' names.
    pub(crate) async fn establish(&self) -> Result<Vec<String>, ConnectError> {
        let connected = mcp_client::connect_and_list(&self.config, self.timeouts.connect).await?;
        let names = connected.tools.iter().map(|t| t.name.clone()).collect();
        let old = self
            .conn
            .lock()
            .await
            .replace(Arc::new(Connection::from(connected)));
        hang_up(old).await;
        Ok(names)
    }

    /// A health check of the live connection: a `tools/list` within the connect timeout. A
    /// failed check drops the connection. Returns the tools' names.
    pub(crate) async fn check(&self) -> Result<Vec<String>, ConnectError> {
        let Some(conn) = self.current().await else {
            return Err(ConnectError::Protocol(CONNECTION_CLOSED.to_owned()));
        };
        let tools = self.relist(&conn, self.timeouts.connect).await?;
        Ok(tools.iter().map(|t| t.name.clone()).collect())
    }

    /// Lists `conn`'s tools again within `within` and keeps the list; a connection that cannot
    /// list them is forgotten (its error without the configuration's secrets). The one path of
    /// the health check, the check after a timed-out call and a changed tool list.
    async fn relist(
        &self,
        conn: &Arc<Connection>,
        within: Duration,
    ) -> Result<Arc<Vec<DiscoveredTool>>, ConnectError> {
        let secrets = mcp_client::secrets_of(&self.config);
        let listed = tokio::time::timeout(within, mcp_client::list_tools(&conn.client, &secrets))
            .await
            .unwrap_or(Err(ConnectError::Timeout(within)));
        let listed = match listed {
            Ok(tools) => tools,
            Err(e) => {
                self.forget(conn).await;
                return Err(match e {
                    ConnectError::Protocol(message) => ConnectError::Protocol(self.scrub(&message)),
                    other => other,
                });
            }
        };
        let listed = Arc::new(listed);
        *lock(&conn.tools) = Arc::clone(&listed);
        Ok(listed)
    }

    /// A global server's health, changed by `f` (its supervisor records each check); `None`
    /// for an agent's own server.
    pub(crate) fn with_health<R>(&self, f: impl FnOnce(&mut Health) -> R) -> Option<R> {
        self.global.as_ref().map(|g| f(&mut lock(&g.health)))
    }

    /// Hangs up the connection, if any.
    pub(crate) async fn disconnect(&self) {
        let conn = self.conn.lock().await.take();
        hang_up(conn).await;
    }

    fn touch(&self) {
        let now = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_used.store(now, Ordering::Relaxed);
    }

    /// After a call to `conn` got no answer in time: whether the server still answers at all
    /// (a `tools/list` within [`STILL_ANSWERING_WITHIN`], or the connect timeout when shorter).
    /// One that does not is forgotten: a stdio server stuck on the call (one that handles a call
    /// at a time), or an HTTP server that restarted and no longer knows the session, would
    /// otherwise make every later call wait out the call timeout too.
    async fn still_answering(&self, conn: &Arc<Connection>) -> bool {
        let within = STILL_ANSWERING_WITHIN.min(self.timeouts.connect);
        let answered = self.relist(conn, within).await.is_ok();
        if !answered {
            warn!(server = %self.label, "an MCP server stopped answering; closing its connection");
        }
        answered
    }

    /// Forgets `conn` if it is still the current connection (its server died).
    async fn forget(&self, conn: &Arc<Connection>) {
        let mut slot = self.conn.lock().await;
        if slot.as_ref().is_some_and(|c| Arc::ptr_eq(c, conn)) {
            *slot = None;
        }
    }

    /// The tools of `conn`, listed again (within the connect timeout) when the server said
    /// they changed (`notifications/tools/list_changed`); a connection that cannot list them
    /// is forgotten.
    async fn listed(
        &self,
        conn: &Arc<Connection>,
    ) -> Result<Arc<Vec<DiscoveredTool>>, ConnectError> {
        if !conn.client.service().tools_changed() {
            return Ok(Arc::clone(&lock(&conn.tools)));
        }
        // Marked changed again unless the new list is taken (a run cancelled meanwhile).
        let relisting = mcp_client::ToolsStale(&conn.client);
        let listed = self.relist(conn, self.timeouts.connect).await?;
        info!(server = %self.label, tools = listed.len(), "MCP server's tools changed; listed again");
        relisting.listed();
        Ok(listed)
    }

    /// The server's tools that `allowed` admits (`None`: all of them), as tools a run can call;
    /// connects when needed.
    pub async fn tools(
        self: &Arc<Self>,
        allowed: Option<&[String]>,
    ) -> Result<Vec<Arc<dyn Tool>>, ConnectError> {
        let conn = self.connection().await?;
        let listed = self.listed(&conn).await?;
        Ok(listed
            .iter()
            .filter(|t| allowed.is_none_or(|names| names.iter().any(|n| n == &t.name)))
            .map(|t| {
                Arc::new(McpTool {
                    server: Arc::clone(self),
                    definition: ToolDefinition {
                        name: t.name.clone(),
                        description: t.description.clone(),
                        parameters: t.input_schema.clone(),
                    },
                }) as Arc<dyn Tool>
            })
            .collect())
    }
}

/// One tool of one MCP server.
#[derive(Debug)]
pub struct McpTool {
    server: Arc<Server>,
    definition: ToolDefinition,
}

impl Tool for McpTool {
    fn definition(&self) -> &ToolDefinition {
        &self.definition
    }

    fn origin(&self) -> crate::policy::Origin {
        crate::policy::Origin::Mcp
    }

    fn strict_read_only(&self) -> Option<&str> {
        self.server
            .global
            .as_ref()
            .filter(|g| g.strict_read_only)
            .map(|g| g.name.as_str())
    }

    fn call<'a>(
        &'a self,
        ctx: &'a ToolContext,
        arguments: Value,
    ) -> BoxFuture<'a, Result<ToolOutcome, ToolError>> {
        Box::pin(async move {
            let tool = self.definition.name.clone();
            let arguments = match arguments {
                Value::Object(map) => map,
                Value::Null => serde_json::Map::new(),
                other => {
                    return Err(ToolError::InvalidArguments {
                        tool,
                        reason: format!("expected a JSON object, got {other}"),
                    });
                }
            };
            let server = &self.server;
            let conn = server
                .connection()
                .await
                .map_err(|e| ToolError::ServerUnavailable {
                    tool: tool.clone(),
                    server: server.program(),
                    reason: e.to_string(),
                })?;
            let params = CallToolRequestParams::new(tool.clone()).with_arguments(arguments);
            // The call and the check after a timeout end within the tool time limit, whose
            // backstop would otherwise drop the check half-way (leaving a stuck server).
            let timeout = server
                .timeouts
                .call
                .min(ctx.limits.timeout.saturating_sub(STILL_ANSWERING_WITHIN))
                .max(Duration::from_secs(1));
            let result = tokio::select! {
                r = tokio::time::timeout(timeout, conn.client.call_tool(params)) => r,
                () = ctx.cancel.cancelled() => return Err(ToolError::Cancelled { tool }),
            };
            server.touch();
            match result {
                Err(_) => {
                    let checked = tokio::select! {
                        answering = server.still_answering(&conn) => answering,
                        () = ctx.cancel.cancelled() => return Err(ToolError::Cancelled { tool }),
                    };
                    if checked {
                        Err(ToolError::Timeout {
                            tool,
                            after: timeout,
                        })
                    } else {
                        Err(ToolError::ServerUnavailable {
                            tool,
                            server: server.program(),
                            reason: format!(
                                "no answer to the call within {timeout:?}, nor to a check after \
                                 it; its connection is closed"
                            ),
                        })
                    }
                }
                // What the server returns of its configured credentials (a failed call's error
                // quoting them, a tool that prints its environment) is masked before the model,
                // the events or the store see it.
                Ok(Ok(result)) => Ok(match outcome(result) {
                    ToolOutcome::Output { content, is_error } => ToolOutcome::Output {
                        content: server.scrub(&content),
                        is_error,
                    },
                    other => other,
                }),
                // The server said no (unknown tool, bad arguments): the model may recover.
                Ok(Err(ServiceError::McpError(e))) => Ok(ToolOutcome::failed(format!(
                    "the MCP server refused the call: {}",
                    server.scrub(&e.message)
                ))),
                Ok(Err(e)) => {
                    if !conn.alive()
                        || matches!(
                            e,
                            ServiceError::TransportClosed | ServiceError::TransportSend(_)
                        )
                    {
                        server.forget(&conn).await;
                    }
                    Err(ToolError::ServerUnavailable {
                        tool,
                        server: server.program(),
                        reason: server.scrub(&taskforce_runtime::mcp_client::readable(&e)),
                    })
                }
            }
        })
    }
}

/// How long a server whose call timed out gets to answer a `tools/list` before its connection
/// is closed ([`Server::still_answering`]).
const STILL_ANSWERING_WITHIN: Duration = Duration::from_secs(5);

/// Why a global server is down when its process went away between checks.
pub(crate) const CONNECTION_CLOSED: &str = "the server's connection closed (the process exited?)";

/// Closes `conn` (stdio servers are killed with their process group) unless a call still holds
/// it, in which case it closes when that call lets go.
async fn hang_up(conn: Option<Arc<Connection>>) {
    if let Some(conn) = conn.and_then(|c| Arc::try_unwrap(c).ok()) {
        let _ = tokio::time::timeout(Duration::from_secs(2), conn.client.cancel()).await;
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The model's view of a call result: text parts joined, other parts described.
fn outcome(result: CallToolResult) -> ToolOutcome {
    let mut parts: Vec<String> = result.content.iter().map(describe).collect();
    if parts.is_empty()
        && let Some(structured) = &result.structured_content
    {
        parts.push(structured.to_string());
    }
    let text = parts.join("\n");
    if result.is_error == Some(true) {
        ToolOutcome::failed(text)
    } else {
        ToolOutcome::ok(text)
    }
}

fn describe(block: &ContentBlock) -> String {
    match block {
        ContentBlock::Text(t) => t.text.clone(),
        ContentBlock::Image(i) => {
            format!("[image: {}, {} base64 bytes]", i.mime_type, i.data.len())
        }
        ContentBlock::Audio(a) => {
            format!("[audio: {}, {} base64 bytes]", a.mime_type, a.data.len())
        }
        ContentBlock::Resource(r) => match serde_json::to_value(&r.resource) {
            Ok(Value::Object(m)) => match m.get("text").and_then(Value::as_str) {
                Some(text) => text.to_owned(),
                None => format!(
                    "[resource: {}]",
                    m.get("uri").and_then(Value::as_str).unwrap_or("?")
                ),
            },
            _ => "[resource]".to_owned(),
        },
        ContentBlock::ResourceLink(r) => format!("[resource link: {}]", r.uri),
        // A kind of content newer than this client: pass its JSON on.
        other => serde_json::to_string(other).unwrap_or_else(|_| "[content]".to_owned()),
    }
}

/// A stable key of a configuration (maps sorted).
fn config_key(c: &v1::McpServer) -> String {
    fn sorted(m: &HashMap<String, String>) -> BTreeMap<&String, &String> {
        m.iter().collect()
    }
    serde_json::json!([
        c.r#type,
        c.command,
        c.args,
        sorted(&c.env),
        c.url,
        sorted(&c.headers)
    ])
    .to_string()
}

/// `url` without its user info, query and fragment (`<invalid URL>` when it does not parse).
fn bare_url(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut bare) => {
            let _ = bare.set_username("");
            let _ = bare.set_password(None);
            bare.set_query(None);
            bare.set_fragment(None);
            bare.to_string()
        }
        Err(_) => "<invalid URL>".to_owned(),
    }
}

/// A stdio server's command line (so two servers of one program differ), or a server's URL
/// without its user, password and query (a literal token there would be in every log line and
/// warning event that names the server); as configured, placeholders not expanded. A long
/// command line is cut at 160 characters.
fn label(c: &v1::McpServer) -> String {
    const MOST: usize = 160;
    if c.r#type != "stdio" {
        return bare_url(&c.url);
    }
    let mut label = format!("stdio:{}", c.command);
    for arg in &c.args {
        label.push(' ');
        label.push_str(arg);
    }
    taskforce_proto::cut_chars(&label, MOST)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_entry_per_configuration_whatever_the_map_order() {
        let pool = McpPool::new(McpTimeouts::default());
        let mut a = v1::McpServer {
            r#type: "stdio".into(),
            command: "srv".into(),
            ..Default::default()
        };
        a.env.insert("A".into(), "1".into());
        a.env.insert("B".into(), "2".into());
        let b = a.clone();
        assert!(Arc::ptr_eq(&pool.server(&a), &pool.server(&b)));
        let mut c = a.clone();
        c.args.push("--other".into());
        assert!(!Arc::ptr_eq(&pool.server(&a), &pool.server(&c)));
    }

    #[test]
    fn a_stdio_server_is_named_by_its_command_line() {
        let mut c = v1::McpServer {
            r#type: "stdio".into(),
            command: "uvx".into(),
            args: vec!["mcp-server-time".into(), "--token=${TOKEN}".into()],
            ..Default::default()
        };
        assert_eq!(label(&c), "stdio:uvx mcp-server-time --token=${TOKEN}");
        c.args = vec!["é".repeat(200)];
        let long = label(&c);
        assert!(long.ends_with('…') && long.chars().count() == 161, "{long}");
        // A URL server is named without what its URL carries as credentials.
        let http = v1::McpServer {
            r#type: "http".into(),
            url: "https://user:s3cret@mcp.example/mcp?api_key=s3cret".into(),
            ..Default::default()
        };
        assert_eq!(label(&http), "https://mcp.example/mcp");
    }

    #[test]
    fn errors_the_model_reads_name_a_url_without_its_credentials() {
        assert_eq!(
            bare_url("https://user:pw@mcp.example.org:8443/mcp?api_key=k#x"),
            "https://mcp.example.org:8443/mcp"
        );
        assert_eq!(bare_url("not a url"), "<invalid URL>");
    }

    #[test]
    fn results_become_text_and_errors_stay_errors() {
        let ok =
            CallToolResult::success(vec![ContentBlock::text("one"), ContentBlock::text("two")]);
        assert_eq!(outcome(ok), ToolOutcome::ok("one\ntwo"));
        let failed = CallToolResult::error(vec![ContentBlock::text("bad")]);
        assert_eq!(outcome(failed), ToolOutcome::failed("bad"));
    }

    #[tokio::test]
    async fn a_server_that_cannot_start_is_an_error_and_is_tried_again() {
        let pool = McpPool::new(McpTimeouts {
            connect: Duration::from_secs(5),
            call: Duration::from_secs(5),
            idle: None,
        });
        let server = pool.server(&v1::McpServer {
            r#type: "stdio".into(),
            command: "/nonexistent/mcp-server".into(),
            ..Default::default()
        });
        assert!(matches!(
            server.tools(None).await,
            Err(ConnectError::Spawn { .. })
        ));
        assert!(matches!(
            server.tools(None).await,
            Err(ConnectError::Spawn { .. })
        ));
    }
}
