//! The nine native tools, real implementations of the catalog in
//! [`taskforce_proto::catalog::native_tools`].
//!
//! # Layout
//! - `args`: the native tools' flags (endpoints, binaries, the GitHub token, the sandbox).
//! - `workspace`: confining paths to the agent's workspace (no `..`, absolute path or symlink
//!   escape).
//! - `files`: `file_read` and `file_write`.
//! - `process`: running a subprocess in the workspace (own process group, minimal environment,
//!   timeout, cancellation, output cap), shared by `python`, `powershell` and `git`.
//! - [`sandbox`]: the resource limits and Landlock/bubblewrap confinement those three run in,
//!   and [`sandbox::launcher`], the `taskforce-sandbox` program that applies them.
//! - `python`: `python` and `powershell`; `git`: `git` (`git::args` checks its arguments
//!   against the allowlist of subcommands and options in `git::allowlist`).
//! - `html`: HTML tokens (html5ever's tokenizer) and HTML → text, for the web tools.
//! - `http`: the capped, cancellable HTTP request the web and GitHub tools share.
//! - `guard`: where the web tools may connect (no loopback, private or metadata addresses).
//! - `search`: `web_search` (DuckDuckGo's HTML page by default); `fetch`: `web_fetch`.
//! - `github`: `github`, the GitHub REST API with a token from the environment.
//! - `ask_user`: `ask_user`, which pauses the run with a question.
//! - [`ledger`]: running subprocess groups on disk, killed by the next start after a crash.
//!
//! Every tool takes its name, description and schema from the catalog, so what the registry
//! lists and what the model sees never differ.

mod args;
mod ask_user;
mod fetch;
mod files;
mod git;
mod github;
mod guard;
mod html;
mod http;
pub mod ledger;
mod process;
mod python;
pub mod sandbox;
mod search;
mod workspace;

use std::{fmt, path::PathBuf, sync::Arc, time::Duration};

use secrecy::SecretString;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tracing::warn;

use super::{Tool, ToolContext, ToolError};

pub use args::NativeToolsArgs;
pub use ask_user::AskUser;
pub use fetch::WebFetch;
pub use files::{FileRead, FileWrite};
pub use git::Git;
pub(crate) use git::subcommand_at as git_subcommand_at;
pub use github::GitHub;
pub use guard::NetGuard;
pub use html::html_to_text;
pub use python::{Powershell, Python, powershell_available};
pub use sandbox::{
    ConnectPorts, LandlockState, ResourceLimits, Sandbox, SandboxConfig, SandboxError, SandboxMode,
    TEMP_PATH_ROOM,
};
pub use search::WebSearch;

/// Default search endpoint: DuckDuckGo's HTML results page; the URL-encoded query is appended.
pub const DEFAULT_WEB_SEARCH_URL: &str = "https://html.duckduckgo.com/html/?q=";
/// Default GitHub REST API base URL.
pub const DEFAULT_GITHUB_API_URL: &str = "https://api.github.com";

/// Configuration of the native tools: endpoints, binaries, caps.
#[derive(Debug, Clone)]
pub struct NativeToolsConfig {
    /// Search URL prefix; the URL-encoded query is appended (DuckDuckGo's HTML page format).
    pub web_search_url: String,
    /// GitHub REST API base URL (GitHub Enterprise: `https://HOST/api/v3`).
    pub github_api_url: String,
    /// GitHub token, sent as `Authorization: Bearer`; `None` makes unauthenticated reads only.
    pub github_token: Option<SecretString>,
    /// The Python interpreter (a name looked up on `PATH`, or a path).
    pub python_bin: PathBuf,
    /// The git binary.
    pub git_bin: PathBuf,
    /// The PowerShell binary; the tool is unavailable when it is not found.
    pub pwsh_bin: PathBuf,
    /// Largest body `web_fetch`, `web_search` and `github` download before converting (the text
    /// handed to the model is further cut to the call's `max_output_bytes`).
    pub max_download_bytes: usize,
    /// Largest content `file_write` accepts.
    pub max_write_bytes: usize,
    /// Upper bound of one HTTP request, below the call's own timeout.
    pub http_timeout: Duration,
    /// `User-Agent` of the web and GitHub requests.
    pub user_agent: String,
    /// Address ranges the web tools may reach although they are not public (loopback,
    /// private, link-local, ...): `--web-allow-nets` / `TASKFORCE_WEB_ALLOW_NETS`.
    pub web_allow_nets: Vec<ipnet::IpNet>,
    /// How `python`, `git` and `powershell` are confined (`--tool-*` / `TASKFORCE_TOOL_*`).
    pub sandbox: SandboxConfig,
}

impl Default for NativeToolsConfig {
    fn default() -> Self {
        Self {
            web_search_url: DEFAULT_WEB_SEARCH_URL.to_owned(),
            github_api_url: DEFAULT_GITHUB_API_URL.to_owned(),
            github_token: None,
            python_bin: PathBuf::from("python3"),
            git_bin: PathBuf::from("git"),
            pwsh_bin: PathBuf::from("pwsh"),
            max_download_bytes: 5 * 1024 * 1024,
            max_write_bytes: 10 * 1024 * 1024,
            http_timeout: Duration::from_secs(30),
            user_agent: concat!("taskforce-executor/", env!("CARGO_PKG_VERSION")).to_owned(),
            web_allow_nets: Vec::new(),
            sandbox: SandboxConfig::default(),
        }
    }
}

impl NativeToolsConfig {
    /// Start-up checks of the subprocess sandbox (see [`Sandbox::check`]); blocking, briefly. An
    /// interpreter that is not there is said (the `python` tool's calls fail until it is
    /// installed), not refused: agents without `python` run as ever.
    pub fn check(&self) -> Result<(), SandboxError> {
        if which::which(&self.python_bin).is_err() {
            tracing::warn!(
                python = %self.python_bin.display(),
                "the python tool's interpreter (--python, TASKFORCE_PYTHON) is not found; its calls fail until it is installed"
            );
        }
        Sandbox::new(self.sandbox.clone()).check()
    }
}

/// All nine native tools, in catalog order, sharing one HTTP client.
pub fn native_tools(config: &NativeToolsConfig) -> Vec<Arc<dyn Tool>> {
    let config = Arc::new(config.clone());
    let client = http_client(&config, None);
    // Its own client: redirects stay under the API's base, with the token.
    let github = http_client(&config, reqwest::Url::parse(&config.github_api_url).ok());
    let sandbox = Arc::new(Sandbox::new(config.sandbox.clone()));
    let turns = Arc::new(workspace::WriteTurns::default());
    vec![
        Arc::new(WebSearch::new(config.clone(), client.clone())),
        Arc::new(WebFetch::new(config.clone(), client)),
        Arc::new(FileRead::new()),
        Arc::new(FileWrite::taking_turns(
            config.max_write_bytes,
            turns.clone(),
        )),
        Arc::new(Python::new(config.python_bin.clone(), sandbox.clone())),
        Arc::new(Git::new(config.git_bin.clone(), sandbox.clone(), turns)),
        Arc::new(GitHub::new(config.clone(), github)),
        Arc::new(Powershell::new(config.pwsh_bin.clone(), sandbox)),
        Arc::new(AskUser::new()),
    ]
}

/// The web tools' client (redirects under `scope` only, when given); `None` (and the HTTP
/// tools unavailable) if TLS cannot be set up.
fn http_client(config: &NativeToolsConfig, scope: Option<reqwest::Url>) -> Option<http::WebClient> {
    let builder = reqwest::Client::builder()
        .user_agent(config.user_agent.clone())
        .connect_timeout(Duration::from_secs(10))
        .timeout(config.http_timeout);
    let guard = NetGuard::new(
        config.web_allow_nets.clone(),
        &[&config.web_search_url, &config.github_api_url],
    );
    match http::WebClient::scoped(builder, guard, scope) {
        Ok(c) => Some(c),
        Err(e) => {
            warn!(error = %e, "could not build the HTTP client; web and github tools are unavailable");
            None
        }
    }
}

pub(crate) use super::catalog_definition;

/// Parses the model's arguments into `T`, naming the problem when they do not fit.
pub(crate) fn parse_args<T: DeserializeOwned>(
    tool: &str,
    arguments: Value,
) -> Result<T, ToolError> {
    serde_json::from_value(arguments).map_err(|e| ToolError::InvalidArguments {
        tool: tool.to_owned(),
        reason: e.to_string(),
    })
}

/// Cuts `text` to at most `max` bytes on a character boundary and says so at the end.
pub(crate) fn cap_text(mut text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    let total = text.len();
    let mut cut = max;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    text.truncate(cut);
    text.push_str(&format!(
        "\n[output cut: showing the first {cut} of {total} bytes]"
    ));
    text
}

/// Runs `work` within the call's timeout and until `ctx.cancel` fires, whichever comes first.
pub(crate) async fn bounded<T>(
    tool: &str,
    ctx: &ToolContext,
    work: impl Future<Output = Result<T, ToolError>>,
) -> Result<T, ToolError> {
    tokio::select! {
        r = work => r,
        () = tokio::time::sleep(ctx.limits.timeout) => Err(ToolError::Timeout {
            tool: tool.to_owned(),
            after: ctx.limits.timeout,
        }),
        () = ctx.cancel.cancelled() => Err(ToolError::Cancelled { tool: tool.to_owned() }),
    }
}

/// Runs blocking file-system work on the blocking pool, in one hop (each `tokio::fs` call is
/// its own hop; a tool's handful of calls cost more in thread hand-offs than in the calls).
pub(crate) async fn blocking<T: Send + 'static>(
    tool: &str,
    work: impl FnOnce() -> Result<T, ToolError> + Send + 'static,
) -> Result<T, ToolError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| failed(tool, format!("background task: {e}")))?
}

/// A shorthand for [`ToolError::Failed`].
pub(crate) fn failed(tool: &str, reason: impl fmt::Display) -> ToolError {
    ToolError::Failed {
        tool: tool.to_owned(),
        reason: reason.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_native_tool_takes_its_definition_from_the_catalog() {
        let tools = native_tools(&NativeToolsConfig::default());
        let catalog = taskforce_proto::catalog::native_tools();
        assert_eq!(tools.len(), catalog.len());
        for (tool, entry) in tools.iter().zip(catalog) {
            let def = tool.definition();
            assert_eq!(tool.name(), entry.name);
            assert_eq!(def.name, entry.name);
            assert_eq!(def.description, entry.description);
            assert_eq!(def.parameters, entry.parameters_schema);
        }
    }

    #[test]
    fn cap_text_cuts_on_a_char_boundary_and_says_so() {
        let out = cap_text("héllo".repeat(10), 2);
        assert!(out.starts_with('h'));
        assert!(out.contains("[output cut: showing the first 1 of 60 bytes]"));
        assert_eq!(cap_text("short".into(), 10), "short");
    }
}
