//! Flags with environment fallbacks; the defaults work on a laptop next to a local registry.

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use crate::error::GatewayError;

/// Default `--listen`.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";
/// Default `--registry-url`.
pub const DEFAULT_REGISTRY_URL: &str = "http://127.0.0.1:50051";
/// Default `--executor-url`.
pub const DEFAULT_EXECUTOR_URL: &str = "http://127.0.0.1:50052";
/// Default `--max-body-bytes` (1 MiB).
pub const DEFAULT_MAX_BODY_BYTES: usize = 1024 * 1024;
/// Default `--chat-agent`: the sample read-only M365 assistant (`configs/custom/m365-assistant.yaml`).
pub const DEFAULT_CHAT_AGENT: &str = "m365-assistant";
/// Default `--request-timeout-secs`.
pub const DEFAULT_REQUEST_TIMEOUT_SECS: u64 = 30;
/// Default `--mcp-allowed-origins`: pages served from this machine, on any port.
pub const DEFAULT_MCP_ALLOWED_ORIGINS: &str = "http://localhost:*,http://127.0.0.1:*,http://[::1]:*,https://localhost:*,https://127.0.0.1:*,https://[::1]:*";

/// gateway configuration.
#[derive(Debug, Clone, clap::Parser)]
#[command(
    name = "gateway",
    about = "Taskforce gateway (the REST, SSE and MCP front door over the registry's and the executors' gRPC APIs)"
)]
pub struct Config {
    /// Address to serve HTTP on.
    #[arg(long, env = "TASKFORCE_GATEWAY_LISTEN", default_value = DEFAULT_LISTEN)]
    pub listen: SocketAddr,
    /// The registry's gRPC endpoint. The connection is made lazily, so the gateway starts (and
    /// answers 503) while the registry is not up yet.
    #[arg(long, env = "TASKFORCE_REGISTRY_URL", default_value = DEFAULT_REGISTRY_URL,
          value_parser = taskforce_runtime::service_url)]
    pub registry_url: String,
    /// The executors' gRPC endpoints (`/api/v1/execute`, sessions): one URL; or several
    /// comma-separated `NAME=URL` entries, each NAME the executor's `--instance` (new runs take
    /// turns, a session's calls go to the executor its id names); or empty for none (runs get
    /// 503). Connected lazily like the registry's, so the gateway starts while they are not up.
    #[arg(long, env = "TASKFORCE_EXECUTOR_URL", default_value = DEFAULT_EXECUTOR_URL)]
    pub executor_url: String,
    /// Write the bound address to this file once listening (for tests and scripts using port 0).
    #[arg(long, env = "TASKFORCE_GATEWAY_ADDR_FILE")]
    pub addr_file: Option<PathBuf>,
    /// Largest accepted request body; larger ones get 413 `payload_too_large`.
    #[arg(long, env = "TASKFORCE_GATEWAY_MAX_BODY_BYTES", default_value_t = DEFAULT_MAX_BODY_BYTES)]
    pub max_body_bytes: usize,
    /// Time limit of one ordinary (non-streaming) request, in seconds; past it the client gets
    /// 504 `timeout` and the registry call is cancelled.
    #[arg(long, env = "TASKFORCE_GATEWAY_REQUEST_TIMEOUT_SECS", default_value_t = DEFAULT_REQUEST_TIMEOUT_SECS)]
    pub request_timeout_secs: u64,
    /// Serve the MCP server (`list_agents`, `show_agent`) on stdin/stdout instead of HTTP, for
    /// desktop MCP clients that start the gateway themselves. Logs go to stderr.
    #[arg(long)]
    pub mcp_stdio: bool,
    /// Browser origins allowed to call `/mcp` (comma-separated, `scheme://host:port`, `:*` for
    /// any port); requests with another `Origin` get 403, requests without one pass. `*` allows
    /// any origin.
    #[arg(
        long,
        env = "TASKFORCE_MCP_ALLOWED_ORIGINS",
        value_delimiter = ',',
        default_value = DEFAULT_MCP_ALLOWED_ORIGINS,
        value_parser = origin
    )]
    pub mcp_allowed_origins: Vec<String>,
    /// `Host` values `/mcp` accepts (comma-separated names, `name:port` for one port), against
    /// DNS rebinding; others get 403. Default: `localhost`, `127.0.0.1`, `::1` and the
    /// `--listen` address when it is a specific one. `*` accepts any (behind a trusted proxy).
    #[arg(long, env = "TASKFORCE_MCP_ALLOWED_HOSTS", value_delimiter = ',')]
    pub mcp_allowed_hosts: Vec<String>,
    /// The agent (custom id or profile) that serves `/ai/agent/stream` and `/ai/stream`.
    #[arg(long, env = "TASKFORCE_CHAT_AGENT", default_value = DEFAULT_CHAT_AGENT,
          value_parser = agent_id)]
    pub chat_agent: String,
    /// The policy mode of `/ai/agent/stream` requests that name none.
    #[arg(long, env = "AGENT_DEFAULT_MODE", default_value = "readOnly")]
    pub agent_default_mode: String,
    /// `0`: `/ai/agent/stream` answers as the plain LLM, no tools.
    /// A switch (`1`/`true`/`yes`/`on` or `0`/`false`/`no`/`off`); anything else stops the
    /// gateway at start-up.
    #[arg(long, env = "AGENT_ENABLE", default_value = "1", action = clap::ArgAction::Set,
          value_parser = agent_enable)]
    pub agent_enable: bool,
    /// The model alias (of the executor's `llm_config.yaml`) chat runs use; unset: the chat
    /// agent's model, else the executor's default.
    #[arg(long, env = "AI_MODEL_NAME")]
    pub ai_model_name: Option<String>,
    /// The provider entry (of the executor's `llm_config.yaml`) chat runs use: with `AI_MODEL_NAME` that provider's model of that name, alone
    /// the provider's configured model; unset: `AI_MODEL_NAME` alone decides.
    #[arg(long, env = "AI_DESTINATION_NAME")]
    pub ai_destination_name: Option<String>,
    /// Most chat prompts per `threadId` per minute, counted by this gateway (0: no limit).
    #[arg(long, env = "AGENT_RATE_LIMIT_PER_MINUTE", default_value_t = 0)]
    pub agent_rate_limit_per_minute: u32,
    /// Most runs and streams one API key may have open through this gateway at once (runs,
    /// answers, chat prompts); more get 429 `resource_exhausted` with `retry-after`. 0: no
    /// limit. Counted only when API keys are configured.
    #[arg(long, env = "TASKFORCE_MAX_RUNS_PER_KEY", default_value_t = crate::limits::DEFAULT_MAX_RUNS_PER_KEY)]
    pub max_runs_per_key: usize,
    /// API keys and the service token (see `taskforce_runtime::auth`).
    #[command(flatten)]
    pub auth: taskforce_runtime::auth::AuthArgs,
}

impl Default for Config {
    /// The documented defaults, without reading flags or the environment (for tests).
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            registry_url: DEFAULT_REGISTRY_URL.to_owned(),
            executor_url: DEFAULT_EXECUTOR_URL.to_owned(),
            addr_file: None,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            request_timeout_secs: DEFAULT_REQUEST_TIMEOUT_SECS,
            mcp_stdio: false,
            mcp_allowed_origins: DEFAULT_MCP_ALLOWED_ORIGINS
                .split(',')
                .map(str::to_owned)
                .collect(),
            mcp_allowed_hosts: Vec::new(),
            chat_agent: DEFAULT_CHAT_AGENT.to_owned(),
            agent_default_mode: "readOnly".to_owned(),
            agent_enable: true,
            agent_rate_limit_per_minute: 0,
            ai_model_name: None,
            ai_destination_name: None,
            auth: taskforce_runtime::auth::AuthArgs::default(),
            max_runs_per_key: crate::limits::DEFAULT_MAX_RUNS_PER_KEY,
        }
    }
}

impl Config {
    /// The defaults, talking to the registry at `registry_url`, without an executor.
    pub fn with_registry(registry_url: impl Into<String>) -> Self {
        Self {
            registry_url: registry_url.into(),
            executor_url: String::new(),
            ..Self::default()
        }
    }

    /// Checks the values that clap cannot check on its own.
    pub fn validate(&self) -> Result<(), GatewayError> {
        if self.max_body_bytes == 0 {
            return Err(GatewayError::Config(
                "--max-body-bytes must be at least 1".into(),
            ));
        }
        if self.request_timeout_secs == 0 {
            return Err(GatewayError::Config(
                "--request-timeout-secs must be at least 1".into(),
            ));
        }
        taskforce_proto::mode::Mode::parse(&self.agent_default_mode).map_err(|e| {
            GatewayError::Config(format!("--agent-default-mode (AGENT_DEFAULT_MODE): {e}"))
        })?;
        Ok(())
    }

    /// The time limit of one ordinary request.
    pub fn request_timeout(&self) -> Duration {
        Duration::from_secs(self.request_timeout_secs)
    }
}

/// `AGENT_ENABLE` as a switch ([`taskforce_runtime::switch`]).
fn agent_enable(value: &str) -> Result<bool, taskforce_runtime::BadSwitch> {
    taskforce_runtime::switch("AGENT_ENABLE", Some(value), true)
}

/// An `--mcp-allowed-origins` entry: `*`, or an origin as browsers send it
/// (`scheme://host[:port]`, no path); an empty entry (a trailing comma) is skipped later.
fn origin(entry: &str) -> Result<String, String> {
    let entry = entry.trim();
    if entry.is_empty() || entry == "*" {
        return Ok(entry.to_owned());
    }
    let bad = || {
        format!(
            "`{entry}` is not an origin: expected `*` or scheme://host[:port], such as http://localhost"
        )
    };
    let uri: http::Uri = entry.parse().map_err(|_| bad())?;
    let plain = uri.scheme().is_some()
        && uri.authority().is_some_and(|a| !a.host().is_empty())
        && matches!(uri.path(), "" | "/")
        && uri.query().is_none();
    plain.then(|| entry.to_owned()).ok_or_else(bad)
}

/// `--chat-agent`: an agent id (custom or profile), checked at start, not on every prompt.
fn agent_id(id: &str) -> Result<String, String> {
    let id = id.trim();
    taskforce_proto::ids::validate_agent_id(id)
        .map(|()| id.to_owned())
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn agent_enable_is_a_switch_and_a_typo_stops_the_start() {
        let parsed = Config::try_parse_from(["gateway", "--agent-enable", "off"]);
        assert!(parsed.is_ok_and(|c| !c.agent_enable));
        let parsed = Config::try_parse_from(["gateway", "--agent-enable", "maybe"]);
        let Err(e) = parsed else {
            panic!("maybe is no switch");
        };
        assert!(e.to_string().contains("AGENT_ENABLE must be"), "{e}");
    }

    #[test]
    fn defaults_match_the_flag_defaults() {
        let parsed = Config::try_parse_from(["gateway"]);
        let Ok(parsed) = parsed else {
            panic!("defaults must parse: {parsed:?}");
        };
        let built = Config::default();
        // The environment may override flags on a developer machine; compare only when unset.
        if std::env::var_os("TASKFORCE_GATEWAY_LISTEN").is_none() {
            assert_eq!(parsed.listen, built.listen);
        }
        if std::env::var_os("TASKFORCE_REGISTRY_URL").is_none() {
            assert_eq!(parsed.registry_url, built.registry_url);
        }
        if std::env::var_os("TASKFORCE_EXECUTOR_URL").is_none() {
            assert_eq!(parsed.executor_url, built.executor_url);
        }
        assert_eq!(
            DEFAULT_LISTEN.parse::<SocketAddr>().ok(),
            Some(built.listen)
        );
        if std::env::var_os("TASKFORCE_MCP_ALLOWED_ORIGINS").is_none() {
            assert_eq!(parsed.mcp_allowed_origins, built.mcp_allowed_origins);
            assert_eq!(parsed.mcp_allowed_origins.len(), 6);
        }
        assert!(!parsed.mcp_stdio);
        assert!(built.validate().is_ok());
    }

    #[test]
    fn zero_limits_are_refused() {
        let c = Config {
            max_body_bytes: 0,
            ..Config::default()
        };
        assert!(c.validate().is_err());
        let c = Config {
            request_timeout_secs: 0,
            ..Config::default()
        };
        assert!(c.validate().is_err());
    }

    #[test]
    fn an_unknown_default_mode_is_refused_at_start_and_named() {
        let c = Config {
            agent_default_mode: "yolo".into(),
            ..Config::default()
        };
        let Err(e) = c.validate() else {
            panic!("yolo is no mode");
        };
        assert!(e.to_string().contains("AGENT_DEFAULT_MODE"), "{e}");
        assert!(e.to_string().contains("`yolo` is not a mode"), "{e}");
        let c = Config {
            agent_default_mode: "safe_write".into(),
            ..Config::default()
        };
        assert!(c.validate().is_ok());
    }

    #[tokio::test]
    async fn origins_urls_and_the_chat_agent_are_checked_at_start() {
        for (flag, value) in [
            ("--mcp-allowed-origins", "not an origin"),
            ("--mcp-allowed-origins", "http://localhost/path"),
            ("--chat-agent", "BAD AGENT"),
            ("--registry-url", "notaurl"),
        ] {
            let e = Config::try_parse_from(["gateway", flag, value]).expect_err(value);
            assert!(e.to_string().contains(flag), "{e}");
        }
        let ok = Config::try_parse_from([
            "gateway",
            "--mcp-allowed-origins",
            "*,https://app.example:8443,",
            "--chat-agent",
            "dev",
        ]);
        assert!(ok.is_ok(), "{ok:?}");
        let twice = crate::executors::Executors::parse(
            "e0=http://127.0.0.1:50052,e1=http://127.0.0.1:50052",
            None,
        );
        let Err(e) = twice else {
            panic!("one executor under two names");
        };
        assert!(e.to_string().contains("given twice"), "{e}");
    }
}
