//! Connecting to an agent's MCP server through `rmcp`, shared by the registry (tool discovery)
//! and the executor (tool calls).
//!
//! A stdio server runs in its own process group with a minimal environment and is killed when
//! its client is dropped. `${VAR}` placeholders are expanded here, at launch, from this
//! process's environment ([`crate::env`]), and never logged; an unset one is a
//! [`ConnectError::Placeholder`] naming the field and the variable.

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

use crate::env::{ExpandError, MCP_SERVER_ENV, expand_for_mcp_server, minimal_command};

/// A live client session with one MCP server.
pub type McpClient = RunningService<RoleClient, Listener>;

/// The client's side of a session: it notes the server's `notifications/tools/list_changed`, so
/// that its tools are listed again before they are next offered ([`Listener::tools_changed`]).
#[derive(Debug, Default)]
pub struct Listener {
    tools_changed: std::sync::atomic::AtomicBool,
}

impl Listener {
    /// Whether the server said its tools changed since the last call (which clears it).
    pub fn tools_changed(&self) -> bool {
        self.tools_changed
            .swap(false, std::sync::atomic::Ordering::AcqRel)
    }
}

/// Marks a client's tools changed again when dropped, unless [`ToolsStale::listed`] said the
/// new list was taken: a listing cut short (its run cancelled) does not lose the change.
pub struct ToolsStale<'a>(pub &'a McpClient);

impl ToolsStale<'_> {
    /// The new list was taken.
    pub fn listed(self) {
        std::mem::forget(self);
    }
}

impl Drop for ToolsStale<'_> {
    fn drop(&mut self) {
        self.0
            .service()
            .tools_changed
            .store(true, std::sync::atomic::Ordering::Release);
    }
}

impl rmcp::ClientHandler for Listener {
    fn on_tool_list_changed(
        &self,
        _context: rmcp::service::NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + rmcp::service::MaybeSendFuture + '_ {
        self.tools_changed
            .store(true, std::sync::atomic::Ordering::Release);
        std::future::ready(())
    }
}

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
    /// A `${VAR}` placeholder of the configuration could not be expanded.
    #[error("{field}: {source}")]
    Placeholder {
        /// Which part of the configuration holds it (`env LOCAL_TIMEZONE`, `args[1]`, ...).
        field: String,
        /// The cause, naming the variable (never a value).
        source: ExpandError,
    },
    /// The MCP handshake or `tools/list` failed.
    #[error("{0}")]
    Protocol(String),
}

impl ConnectError {
    /// The same error again (one attempt's answer, given to every caller that waited on it).
    #[must_use]
    pub fn duplicate(&self) -> Self {
        match self {
            Self::Timeout(d) => Self::Timeout(*d),
            Self::Spawn { command, source } => Self::Spawn {
                command: command.clone(),
                source: std::io::Error::new(source.kind(), source.to_string()),
            },
            Self::Placeholder { field, source } => Self::Placeholder {
                field: field.clone(),
                source: source.clone(),
            },
            Self::Protocol(message) => Self::Protocol(message.clone()),
        }
    }
}

/// An `rmcp` error as a user reads it: without the Rust type paths its messages carry
/// (`Transport [rmcp::transport::worker::WorkerTransport<…>] error: …`), which say nothing to a
/// user and show the service's internals.
pub fn readable(error: &dyn std::fmt::Display) -> String {
    // A server's URL in the error (reqwest's "for url (...)") without its credentials.
    let text = crate::env::without_url_credentials(&error.to_string());
    let mut out = String::with_capacity(text.len());
    let mut rest = text.as_str();
    while let Some(open) = rest.find('[') {
        let (before, from) = rest.split_at(open);
        // The bracketed span, brackets nested inside it included.
        let mut depth = 0usize;
        let close = from.char_indices().find_map(|(i, c)| {
            match c {
                '[' => depth += 1,
                ']' => depth -= 1,
                _ => {}
            }
            (depth == 0).then_some(i)
        });
        match close {
            Some(close) if from[..close].contains("::") => {
                out.push_str(before.trim_end());
                rest = &from[close + 1..];
            }
            _ => {
                out.push_str(before);
                out.push('[');
                rest = &from[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// Starts (stdio) or connects to (streamable HTTP) `server` and completes the MCP handshake
/// (its tools not listed yet). Not bounded by a timeout: [`connect_and_list`] wraps it.
async fn connect(server: &v1::McpServer) -> Result<Connected, ConnectError> {
    // The connection outlives the request or run that opened it, and rmcp's tasks keep the span
    // they were started in open as long as they run: started in a run's, they would hold that
    // run's span (and its trace's root) open, unexported, until the connection closes, and put
    // the run's trace id on the connection's log lines for its whole life. So it is made on a
    // task of its own, which runs in no span whatever the log filter; the caller owns the task
    // (dropped, as when its timeout passes, it is aborted, and a started server with it).
    let server = server.clone();
    let task = tokio_util::task::AbortOnDropHandle::new(tokio::spawn(async move {
        connect_here(&server).await
    }));
    task.await
        .map_err(|e| ConnectError::Protocol(format!("connecting stopped: {e}")))?
}

/// [`connect`] in the current task.
async fn connect_here(server: &v1::McpServer) -> Result<Connected, ConnectError> {
    // Whatever the server prints or echoes, rmcp's own log lines do not show its secrets.
    crate::env::never_log(secrets_of(server));
    let protocol = |e: &dyn std::fmt::Display| ConnectError::Protocol(readable(e));
    match server.r#type.as_str() {
        "stdio" => {
            let (transport, stderr) = spawn_stdio(server)?;
            let pid = transport.id();
            match Listener::default().serve(transport).await {
                Ok(client) => Ok(Connected {
                    client,
                    tools: Vec::new(),
                    pid,
                    stderr: Some(stderr),
                }),
                // Why a server did not start is mostly on its stderr (a missing module, a bad
                // flag, a missing key): its last lines go with the error.
                Err(e) => Err(ConnectError::Protocol(match stderr.last_words().await {
                    Some(said) => format!("{}; its stderr ended with: {said}", readable(&e)),
                    None => readable(&e),
                })),
            }
        }
        // `sse` servers are tried with streamable HTTP first, as the MCP specification's
        // backwards-compatibility section says; rmcp has no client for the legacy transport.
        _ => {
            let mut headers = HashMap::new();
            for (k, v) in &server.headers {
                let name = http::HeaderName::try_from(k.as_str()).map_err(|e| protocol(&e))?;
                let value = expand(v, || format!("header {k}"))?;
                let value = http::HeaderValue::try_from(value).map_err(|e| protocol(&e))?;
                headers.insert(name, value);
            }
            let mut config = StreamableHttpClientTransportConfig::with_uri(server.url.as_str());
            config.custom_headers = headers;
            let transport = StreamableHttpClientTransport::from_config(config);
            let client = Listener::default().serve(transport).await.map_err(|e| {
                let hint = if server.r#type == "sse" {
                    " (only servers that speak streamable HTTP can be used)"
                } else {
                    ""
                };
                ConnectError::Protocol(format!("{}{hint}", readable(&e)))
            })?;
            Ok(Connected {
                client,
                tools: Vec::new(),
                pid: None,
                stderr: None,
            })
        }
    }
}

/// Every tool of a connected server whose configuration holds `secrets` ([`secrets_of`]).
/// What the server says of its tools reaches the model, the registry's answers and the logs,
/// so a secret it echoes there is masked in descriptions and schemas, and a tool whose name
/// holds one is left out (it could not be named without showing it).
pub async fn list_tools(
    client: &McpClient,
    secrets: &[String],
) -> Result<Vec<DiscoveredTool>, ConnectError> {
    let tools = client
        .list_all_tools()
        .await
        .map_err(|e| ConnectError::Protocol(readable(&e)))?;
    Ok(discovered(tools, secrets))
}

fn discovered(tools: Vec<rmcp::model::Tool>, secrets: &[String]) -> Vec<DiscoveredTool> {
    let holds_secret = |name: &str| secrets.iter().any(|s| !s.is_empty() && name.contains(s));
    let mut hidden = 0;
    let tools = tools
        .into_iter()
        .filter(|t| {
            let keep = !holds_secret(&t.name);
            hidden += usize::from(!keep);
            keep
        })
        .map(|t| DiscoveredTool {
            name: t.name.into_owned(),
            description: scrub(t.description.as_deref().unwrap_or_default(), secrets),
            input_schema: scrub_json(Value::Object((*t.input_schema).clone()), secrets),
        })
        .collect();
    if hidden > 0 {
        tracing::warn!(
            tools = hidden,
            "an MCP server named tools after a value of its configuration's ${{VAR}}s; they are left out"
        );
    }
    tools
}

/// `value` with every secret in its string values masked (not in keys: property names are
/// identifiers the model calls with, and two that masked alike would merge).
fn scrub_json(value: Value, secrets: &[String]) -> Value {
    if secrets.is_empty() {
        return value;
    }
    match value {
        Value::String(s) => Value::String(scrub(&s, secrets)),
        Value::Array(items) => {
            Value::Array(items.into_iter().map(|v| scrub_json(v, secrets)).collect())
        }
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| (k, scrub_json(v, secrets)))
                .collect(),
        ),
        other => other,
    }
}

/// A server connected and listed by [`connect_and_list`].
#[derive(Debug)]
pub struct Connected {
    /// The live client.
    pub client: McpClient,
    /// The server's tools.
    pub tools: Vec<DiscoveredTool>,
    /// A stdio server's pid, the leader of its process group (killed with the client).
    pub pid: Option<u32>,
    /// A stdio server's stderr, read as long as the connection is kept.
    pub stderr: Option<ServerStderr>,
}

/// Connects to `server` and lists its tools, all within `timeout`. A server that echoes its
/// credentials in an error does not get them shown ([`scrub`]).
pub async fn connect_and_list(
    server: &v1::McpServer,
    timeout: Duration,
) -> Result<Connected, ConnectError> {
    let secrets = secrets_of(server);
    let work = async {
        let mut connected = connect(server).await?;
        connected.tools = list_tools(&connected.client, &secrets).await?;
        Ok(connected)
    };
    match tokio::time::timeout(timeout, work).await {
        Ok(Err(ConnectError::Protocol(message))) => {
            Err(ConnectError::Protocol(scrub(&message, &secrets)))
        }
        Ok(r) => r,
        Err(_) => Err(ConnectError::Timeout(timeout)),
    }
}

/// The values `server`'s configuration takes from the environment (`${VAR}` in its headers,
/// `env` and `args`, 8 characters or more): the operator's secrets, never to be shown, also
/// when a server echoes them in an error.
pub fn secrets_of(server: &v1::McpServer) -> Vec<String> {
    server
        .headers
        .values()
        .chain(server.env.values())
        .chain(&server.args)
        .flat_map(|v| {
            crate::env::placeholder_values(v, |name| {
                (!crate::env::is_reserved(name) && !crate::env::is_plain_setting(name))
                    .then(|| std::env::var(name).ok())
                    .flatten()
            })
        })
        .collect()
}

pub use crate::env::scrub;

/// What a stdio server writes to its stderr: read (and dropped but for its last bytes) for as
/// long as this is kept, since a pipe nobody reads would block the server once full. The reading
/// ends when the server closes its stderr (it exited) or this is dropped.
#[derive(Debug)]
pub struct ServerStderr {
    tail: std::sync::Arc<std::sync::Mutex<Tail>>,
    reader: tokio_util::task::AbortOnDropHandle<()>,
}

/// The last bytes of a stream, and whether earlier ones were dropped.
#[derive(Debug, Default)]
struct Tail {
    bytes: std::collections::VecDeque<u8>,
    cut: bool,
}

/// How much of a server's stderr [`ServerStderr`] keeps.
const STDERR_TAIL_BYTES: usize = 600;

impl ServerStderr {
    fn follow(stderr: Option<tokio::process::ChildStderr>) -> Self {
        use tokio::io::AsyncReadExt;
        let tail = std::sync::Arc::new(std::sync::Mutex::new(Tail::default()));
        let kept = std::sync::Arc::clone(&tail);
        let reader = tokio::spawn(async move {
            let Some(mut stderr) = stderr else { return };
            let mut buf = [0u8; 4096];
            while let Ok(n @ 1..) = stderr.read(&mut buf).await {
                let Ok(mut tail) = kept.lock() else { return };
                tail.bytes.extend(&buf[..n]);
                let extra = tail.bytes.len().saturating_sub(STDERR_TAIL_BYTES);
                if extra > 0 {
                    tail.bytes.drain(..extra);
                    tail.cut = true;
                }
            }
        });
        Self {
            tail,
            reader: tokio_util::task::AbortOnDropHandle::new(reader),
        }
    }

    /// Its last lines (up to [`STDERR_TAIL_BYTES`], joined with ` | `), once the server has
    /// closed its stderr (it exited) or after a moment; `None` when it wrote nothing.
    async fn last_words(self) -> Option<String> {
        let _ = tokio::time::timeout(Duration::from_millis(300), self.reader).await;
        let (bytes, cut) = {
            let tail = self.tail.lock().ok()?;
            (tail.bytes.iter().copied().collect::<Vec<u8>>(), tail.cut)
        };
        // A line cut at its start is left out: what it held could be part of a secret that the
        // masking, which knows whole values, would not recognise.
        let whole = match (cut, bytes.iter().position(|b| *b == b'\n')) {
            (false, _) => &bytes[..],
            (true, Some(end)) => &bytes[end + 1..],
            (true, None) => &[][..],
        };
        let text = String::from_utf8_lossy(whole);
        let lines: Vec<&str> = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        (!lines.is_empty()).then(|| lines.join(" | "))
    }
}

fn spawn_stdio(server: &v1::McpServer) -> Result<(TokioChildProcess, ServerStderr), ConnectError> {
    let program = expand(&server.command, || "command".to_owned())?;
    let mut cmd = tokio::process::Command::from(minimal_command(program, &MCP_SERVER_ENV));
    for (i, arg) in server.args.iter().enumerate() {
        cmd.arg(expand(arg, || format!("args[{i}]"))?);
    }
    for (k, v) in &server.env {
        cmd.env(k, expand(v, || format!("env {k}"))?);
    }
    let mut wrap = CommandWrap::from(cmd);
    wrap.wrap(ProcessGroup::leader()).wrap(KillOnDrop);
    let (transport, stderr) = TokioChildProcess::builder(wrap)
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| ConnectError::Spawn {
            command: server.command.clone(),
            source,
        })?;
    Ok((transport, ServerStderr::follow(stderr)))
}

/// Expands the placeholders of one configuration value; `field` names it in the error.
fn expand(value: &str, field: impl FnOnce() -> String) -> Result<String, ConnectError> {
    expand_for_mcp_server(value).map_err(|source| ConnectError::Placeholder {
        field: field(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_no_one_keeps_secret_are_not_masked() {
        // PATH is set in every test process, and long enough to be masked if it were a secret.
        let path = std::env::var("PATH").unwrap_or_default();
        assert!(path.len() >= 8, "{path:?}");
        let server = v1::McpServer {
            r#type: "stdio".into(),
            command: "server".into(),
            args: vec![
                "--path=${PATH}".into(),
                "${TF_TEST_MCP_UNSET_SECRET}".into(),
            ],
            ..Default::default()
        };
        assert!(secrets_of(&server).is_empty(), "{:?}", secrets_of(&server));
        assert!(crate::env::is_plain_setting("HOSTNAME"));
        assert!(crate::env::is_plain_setting("LC_ALL"));
        assert!(!crate::env::is_plain_setting("GITHUB_TOKEN"));
        assert!(!crate::env::is_plain_setting("OTEL_EXPORTER_OTLP_HEADERS"));
    }

    #[test]
    fn rmcp_errors_lose_their_type_paths() {
        let raw = "Send message error Transport [rmcp::transport::worker::WorkerTransport<rmcp::transport::streamable_http_client::StreamableHttpClientWorker<reqwest::async_impl::client::Client>>] error: Unexpected content type: Some(\"text/plain\"), when send initialize request";
        assert_eq!(
            readable(&raw),
            "Send message error Transport error: Unexpected content type: Some(\"text/plain\"), when send initialize request"
        );
        assert_eq!(readable(&"args[1] and [a] stay"), "args[1] and [a] stay");
        assert_eq!(readable(&"unclosed [x::y"), "unclosed [x::y");
    }

    #[test]
    fn what_a_server_echoes_of_its_configured_secrets_is_masked() {
        let values =
            crate::env::placeholder_values("Bearer ${A} ${B:-default-value} ${C}", |n| match n {
                "A" => Some("secret-token-1".to_owned()),
                "C" => Some("short".to_owned()),
                _ => None,
            });
        assert_eq!(values, ["secret-token-1"]);
        assert_eq!(
            scrub("401: got authorization=Bearer secret-token-1", &values),
            "401: got authorization=Bearer ***"
        );
        assert_eq!(scrub("nothing here", &values), "nothing here");
    }

    #[test]
    fn a_secret_in_a_servers_tool_list_is_masked_or_its_tool_left_out() {
        let secrets = vec!["s3cr3t-value".to_owned()];
        let schema = |v: Value| match v {
            Value::Object(o) => std::sync::Arc::new(o),
            _ => std::sync::Arc::new(serde_json::Map::new()),
        };
        let tools = vec![
            rmcp::model::Tool::new(
                "tool_s3cr3t-value",
                "named after the secret",
                schema(serde_json::json!({"type": "object"})),
            ),
            rmcp::model::Tool::new(
                "lookup",
                "uses token s3cr3t-value",
                schema(serde_json::json!({"type": "object", "properties": {
                    "s3cr3t-value": {"type": "string", "default": "x s3cr3t-value"}}})),
            ),
        ];
        let found = discovered(tools.clone(), &secrets);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].name, "lookup");
        assert_eq!(found[0].description, "uses token ***");
        assert_eq!(
            found[0].input_schema,
            serde_json::json!({"type": "object", "properties": {
                "s3cr3t-value": {"type": "string", "default": "x ***"}}})
        );
        // A server with no secrets keeps what it says.
        let plain = discovered(tools, &[]);
        assert_eq!(plain.len(), 2);
        assert_eq!(plain[1].description, "uses token s3cr3t-value");
    }

    #[tokio::test]
    async fn an_unset_placeholder_names_the_field_and_the_variable_and_starts_nothing() {
        let mut s = v1::McpServer {
            r#type: "stdio".into(),
            command: "/nonexistent/mcp-server".into(),
            ..Default::default()
        };
        s.env
            .insert("TOKEN".into(), "${TF_SURELY_UNSET_VAR}".into());
        let r = connect_and_list(&s, Duration::from_secs(5)).await;
        let Err(e @ ConnectError::Placeholder { .. }) = r else {
            panic!("expected a placeholder error, got {r:?}");
        };
        assert_eq!(
            e.to_string().split(" (").next(),
            Some("env TOKEN: environment variable TF_SURELY_UNSET_VAR is not set")
        );
        s.env
            .insert("TOKEN".into(), "${TF_SURELY_UNSET_VAR:-}".into());
        let r = connect_and_list(&s, Duration::from_secs(5)).await;
        assert!(matches!(r, Err(ConnectError::Spawn { .. })), "{r:?}");
    }

    #[tokio::test]
    async fn an_unset_placeholder_in_a_header_is_an_error_too() {
        let mut s = v1::McpServer {
            r#type: "http".into(),
            url: "http://127.0.0.1:9/mcp".into(),
            ..Default::default()
        };
        s.headers.insert(
            "Authorization".into(),
            "Bearer ${TF_SURELY_UNSET_VAR}".into(),
        );
        let r = connect_and_list(&s, Duration::from_secs(5)).await;
        assert!(
            matches!(&r, Err(ConnectError::Placeholder { field, .. }) if field == "header Authorization"),
            "{r:?}"
        );
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
