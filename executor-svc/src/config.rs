//! Flags with environment fallbacks; the defaults work from the repository root on a laptop.
//! Ranges are checked by clap, so a bad value stops the executor at start naming the flag.

use std::{net::SocketAddr, path::PathBuf, time::Duration};

/// executor-svc configuration.
#[derive(Debug, Clone, clap::Parser)]
#[command(name = "executor-svc", about = "Taskforce executor (gRPC)")]
pub struct Config {
    /// Address to serve gRPC on.
    #[arg(
        long,
        env = "TASKFORCE_EXECUTOR_LISTEN",
        default_value = "127.0.0.1:50052"
    )]
    pub listen: SocketAddr,
    /// The registry's gRPC URL (connected lazily, on first use).
    #[arg(
        long,
        env = "TASKFORCE_REGISTRY_URL",
        default_value = "http://127.0.0.1:50051",
        value_parser = taskforce_runtime::service_url
    )]
    pub registry_url: String,
    /// Where sessions (sled) and default agent workspaces live.
    #[arg(
        long,
        env = "TASKFORCE_EXECUTOR_DATA_DIR",
        default_value = ".tf-data/executor"
    )]
    pub data_dir: PathBuf,
    /// LLM providers and model aliases (a missing file means "scripted only").
    #[arg(
        long,
        env = "TASKFORCE_LLM_CONFIG",
        default_value = "configs/llm_config.yaml"
    )]
    pub llm_config: PathBuf,
    /// Write the bound address to this file once listening (for tests and scripts using port 0).
    #[arg(long, env = "TASKFORCE_EXECUTOR_ADDR_FILE")]
    pub addr_file: Option<PathBuf>,
    /// Most model calls one run (one `Execute` or `Answer`) may make, its sub-agents' included.
    #[arg(long, env = "TASKFORCE_MAX_STEPS", default_value_t = 30,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub max_steps: u32,
    /// Wall-clock budget of one run, in seconds.
    #[arg(long, env = "TASKFORCE_MAX_RUN_SECS", default_value_t = 600,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub max_run_secs: u64,
    /// Time limit of one tool call, in seconds.
    #[arg(long, env = "TASKFORCE_TOOL_TIMEOUT_SECS", default_value_t = 120,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub tool_timeout_secs: u64,
    /// Largest tool output handed to the model, in bytes (at least 1024).
    #[arg(long, env = "TASKFORCE_TOOL_MAX_OUTPUT_BYTES", default_value_t = 64 * 1024,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1024..))]
    pub tool_max_output_bytes: usize,
    /// How long the registry keeps an agent BUSY without a renewal, in seconds (renewed at half).
    #[arg(long, env = "TASKFORCE_BUSY_LEASE_SECS", default_value_t = 120,
          value_parser = clap::value_parser!(u32).range(2..=86_400))]
    pub busy_lease_secs: u32,
    /// Time limit of starting an MCP server (or connecting to it), its handshake and tool list,
    /// in milliseconds.
    #[arg(
        long,
        env = "TASKFORCE_MCP_CONNECT_TIMEOUT_MS",
        default_value_t = 30_000,
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub mcp_connect_timeout_ms: u64,
    /// Time limit of one MCP tool call, in milliseconds.
    #[arg(long, env = "TASKFORCE_MCP_CALL_TIMEOUT_MS", default_value_t = 60_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub mcp_call_timeout_ms: u64,
    /// Delete completed, failed and cancelled sessions this many hours after their last change
    /// (0: keep them); paused sessions are kept until answered or cancelled.
    #[arg(long, env = "TASKFORCE_SESSION_TTL_HOURS", default_value_t = 168)]
    pub session_ttl_hours: u64,
    /// Cancel a paused session (a question nobody answered) this many hours after it paused
    /// (fractions allowed; 0: keep it until answered or cancelled); it then expires like any
    /// ended session.
    #[arg(long = "paused-session-ttl-hours", env = "TASKFORCE_PAUSED_SESSION_TTL_HOURS",
          default_value = "720", value_parser = hours)]
    pub paused_session_ttl: Duration,
    /// Most sessions stored: past it the oldest completed, failed and cancelled ones are deleted
    /// (down to nine tenths of it); running and paused ones are kept. 0: no limit.
    #[arg(long, env = "TASKFORCE_MAX_STORED_SESSIONS", default_value_t = 50_000)]
    pub max_stored_sessions: usize,
    /// Most mebibytes of sessions stored (their JSON as kept in the store): past it the oldest
    /// completed, failed and cancelled ones are deleted (down to nine tenths of it); running
    /// and paused ones are kept. The store's files take more than this (its log keeps replaced
    /// versions until it reclaims their space: up to about four times this, and some 100 MB
    /// of log segments, measured). 0: no limit.
    #[arg(long, env = "TASKFORCE_MAX_SESSION_STORE_MB", default_value_t = 256)]
    pub max_session_store_mb: u64,
    /// Close an MCP connection unused for this many seconds (0: keep until shutdown).
    #[arg(long, env = "TASKFORCE_MCP_IDLE_SECS", default_value_t = 600)]
    pub mcp_idle_secs: u64,
    /// Deepest delegation: orchestrator → A → B is two hops; a third is refused (0: agents may
    /// not delegate at all).
    #[arg(long, env = "TASKFORCE_MAX_DELEGATION_HOPS", default_value_t = 2)]
    pub max_delegation_hops: u32,

    /// Default wall-clock budget of one sub-agent delegation (a `budget.timeout_s` may ask for
    /// another; never more than the parent has left).
    #[arg(long, env = "TASKFORCE_SUBAGENT_TIMEOUT_SECS", default_value_t = 120,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub subagent_timeout_secs: u64,

    /// Who may remove a dependency link from the plan: `dependent-owner` (the owner of the
    /// dependent task, or the orchestrator), `any-author` or `orchestrator-only`.
    #[arg(long, env = "TASKFORCE_PLAN_UNLINK_POLICY", default_value = "dependent-owner",
          value_parser = ["dependent-owner", "any-author", "orchestrator-only"])]
    pub plan_unlink_policy: String,

    /// Most messages a session keeps (0: all): when a new mission continues a longer one, its
    /// oldest turns are dropped from the stored session, whole (a tool result never loses its
    /// call; the system prompt stays), so neither the model nor a read of the session sees
    /// them again. At least 2: the system prompt and the new mission.
    #[arg(long, env = "AGENT_MEMORY_MESSAGES", default_value_t = 200, value_parser = memory_messages)]
    pub memory_messages: usize,

    /// Where the executor serves Prometheus metrics (`/metrics`); empty: nowhere.
    #[arg(
        long,
        env = "TASKFORCE_EXECUTOR_METRICS_LISTEN",
        default_value = "127.0.0.1:9464"
    )]
    pub metrics_listen: String,

    /// `0`: connect no global MCP server (the gateway's `/ai/agent/stream` reads the same
    /// variable).
    #[arg(long, env = "AGENT_ENABLE", default_value = "1")]
    pub agent_enable: String,

    /// The executor's global MCP servers (YAML, `mcp_servers: {name: {...}}`; a missing file
    /// holds none). The built-in `m365` comes on top of the file's servers unless
    /// `MCP_M365_ENABLE=0` (`MCP_M365_*` configure it); `AGENT_ENABLE=0` turns all of them off.
    #[arg(
        long,
        env = "TASKFORCE_GLOBAL_MCP_CONFIG",
        default_value = "configs/mcp/global.yaml"
    )]
    pub global_mcp_config: PathBuf,

    /// This executor's name among several behind one gateway (e.g. its Kubernetes pod name):
    /// the session ids it mints are `<instance>_<uuid>`, so the gateway sends a session's
    /// answer, cancel and lookup to its owner. Unset: plain UUIDs (one executor).
    #[arg(long, env = "TASKFORCE_EXECUTOR_INSTANCE", value_parser = instance_name)]
    pub instance: Option<String>,

    /// Most runs live at once (streams between their start and their end; paused sessions do not
    /// count); more get `RESOURCE_EXHAUSTED` (REST 429 with `retry-after`).
    #[arg(long, env = "TASKFORCE_MAX_LIVE_RUNS", default_value_t = 2048,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub max_live_runs: u32,
    /// Most events per second one run's stream sends, after a burst of as many (a model or
    /// tool flooding its client is slowed down to this pace, not cut off); 0: no limit.
    #[arg(long, env = "TASKFORCE_MAX_EVENTS_PER_SECOND", default_value_t = 2000)]
    pub max_events_per_second: u32,

    /// Time limit of one registry call, in milliseconds.
    #[arg(long, env = "TASKFORCE_REGISTRY_TIMEOUT_MS", default_value_t = 5000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub registry_timeout_ms: u64,
    /// API keys and the service token (see `taskforce_runtime::auth`).
    #[command(flatten)]
    pub auth: taskforce_runtime::auth::AuthArgs,
    /// The native tools: endpoints, binaries, the GitHub token, the subprocess sandbox.
    #[command(flatten)]
    pub tools: crate::tools::native::NativeToolsArgs,
}

fn memory_messages(text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(1) => Err(
            "1 would keep not even the new mission with the system prompt: use 0 \
                      (keep all) or at least 2"
                .to_owned(),
        ),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("`{text}` is not a number of messages: {e}")),
    }
}

fn instance_name(text: &str) -> Result<String, String> {
    if taskforce_proto::ids::is_instance_name(text) {
        Ok(text.to_owned())
    } else {
        Err(format!(
            "`{text}` is not an instance name: 1-{} lowercase letters, digits and `-`, starting with a letter or digit",
            taskforce_proto::ids::MAX_INSTANCE_LEN
        ))
    }
}

impl Config {
    /// A configuration with every default, serving on `listen` (for tests and embedding).
    pub fn with_defaults(listen: SocketAddr) -> Self {
        use clap::Parser;
        let mut config = Self::parse_from(["executor-svc"]);
        config.listen = listen;
        // Tests start many executors: none claims the metrics port unless asked to.
        config.metrics_listen = String::new();
        // ... and none starts the global MCP servers (`npx` for `m365`) unless asked to.
        config.agent_enable = "0".to_owned();
        config
    }

    /// What the tools may not read or write: the sessions, the state-token key and the other
    /// agents' workspaces in the data directory, and the API keys.
    pub fn hidden_paths(&self) -> Vec<PathBuf> {
        taskforce_runtime::sandbox::hidden_paths(&self.data_dir, self.auth.api_keys_file.as_deref())
    }

    /// The checks that span several flags (clap checks each alone): the ports the tools may
    /// connect to leave out the executor's own and the registry's, which a tool could otherwise
    /// call (`--tool-connect-ports any` is the operator's explicit choice and passes).
    pub fn check(&self) -> Result<(), String> {
        use crate::tools::native::ConnectPorts;
        let allowed = &self.tools.tool_connect_ports;
        if *allowed == ConnectPorts::Any {
            return Ok(());
        }
        let mut own = vec![("--listen", self.listen.port())];
        if let Ok(port) = taskforce_runtime::check_service_url(&self.registry_url) {
            own.push(("--registry-url", port));
        }
        if let Ok(addr) = self.metrics_listen.trim().parse::<SocketAddr>() {
            own.push(("--metrics-listen", addr.port()));
        }
        match own
            .into_iter()
            .find(|(_, port)| *port != 0 && allowed.allows(*port))
        {
            Some((flag, port)) => Err(format!(
                "--tool-connect-ports (TASKFORCE_TOOL_CONNECT_PORTS) allows port {port}, the port \
                 of {flag}: python, git and powershell could call the services there; leave it \
                 out, or serve on another port"
            )),
            None => Ok(()),
        }
    }

    /// The sweep cancelling unanswered paused sessions, unless `--paused-session-ttl-hours` is 0.
    pub fn paused_ttl(&self) -> Option<Duration> {
        (!self.paused_session_ttl.is_zero()).then_some(self.paused_session_ttl)
    }

    /// The wall-clock budget of one run.
    pub fn run_budget(&self) -> Duration {
        Duration::from_secs(self.max_run_secs)
    }

    /// Timeouts of MCP connections and calls.
    pub fn mcp_timeouts(&self) -> crate::tools::mcp::McpTimeouts {
        crate::tools::mcp::McpTimeouts {
            connect: Duration::from_millis(self.mcp_connect_timeout_ms),
            call: Duration::from_millis(self.mcp_call_timeout_ms),
            idle: (self.mcp_idle_secs > 0).then(|| Duration::from_secs(self.mcp_idle_secs)),
        }
    }

    /// Hop limit and default time budget of sub-agent delegations.
    pub fn delegation_limits(&self) -> crate::run::DelegationLimits {
        crate::run::DelegationLimits {
            max_hops: self.max_delegation_hops,
            timeout: Duration::from_secs(self.subagent_timeout_secs),
            unlink: match self.plan_unlink_policy.as_str() {
                "any-author" => crate::plan::UnlinkPolicy::AnyAuthor,
                "orchestrator-only" => crate::plan::UnlinkPolicy::OrchestratorOnly,
                _ => crate::plan::UnlinkPolicy::DependentOwner,
            },
        }
    }

    /// The limits every tool call runs under.
    pub fn tool_limits(&self) -> crate::tools::Limits {
        crate::tools::Limits {
            timeout: Duration::from_secs(self.tool_timeout_secs),
            max_output_bytes: self.tool_max_output_bytes,
        }
    }
}

/// Most hours a TTL may be (about 114 years): longer is "keep" in all but name.
const MAX_TTL_HOURS: f64 = 1_000_000.0;

/// A number of hours (`720`, `0.5`), 0 to [`MAX_TTL_HOURS`].
fn hours(text: &str) -> Result<Duration, String> {
    let h: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a number of hours (such as 720 or 0.5)"))?;
    if !(0.0..=MAX_TTL_HOURS).contains(&h) {
        return Err(format!(
            "{text:?} is not between 0 and {MAX_TTL_HOURS} hours"
        ));
    }
    Ok(Duration::from_secs_f64(h * 3600.0))
}

/// `d` as a person reads it: an hour or more in hours (`720 hours`, `1.5 hours`), less in
/// seconds.
pub fn describe_hours(d: Duration) -> String {
    let hours = d.as_secs_f64() / 3600.0;
    if hours < 1.0 {
        return format!("{:.1} seconds", d.as_secs_f64());
    }
    let text = format!("{hours:.2}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    format!("{text} hour{}", if text == "1" { "" } else { "s" })
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::Config;

    #[test]
    fn the_paused_session_ttl_takes_hours_and_fractions() {
        let ttl = |v: &str| {
            Config::try_parse_from(["executor-svc", &format!("--paused-session-ttl-hours={v}")])
                .map(|c| c.paused_ttl())
        };
        assert_eq!(
            Config::parse_from(["executor-svc"]).paused_ttl(),
            Some(std::time::Duration::from_secs(720 * 3600))
        );
        assert_eq!(
            ttl("0.5").ok(),
            Some(Some(std::time::Duration::from_secs(1800)))
        );
        assert_eq!(ttl("0").ok(), Some(None));
        for bad in ["-1", "ten", "NaN", "inf", "2000000", ""] {
            let e = ttl(bad).expect_err(bad);
            assert!(e.to_string().contains("--paused-session-ttl-hours"), "{e}");
        }
        assert_eq!(
            super::describe_hours(std::time::Duration::from_secs(720 * 3600)),
            "720 hours"
        );
        assert_eq!(
            super::describe_hours(std::time::Duration::from_millis(1500)),
            "1.5 seconds"
        );
        assert_eq!(
            super::describe_hours(std::time::Duration::from_secs(5400)),
            "1.5 hours"
        );
        assert_eq!(
            super::describe_hours(std::time::Duration::from_secs(3600)),
            "1 hour"
        );
    }

    #[test]
    fn out_of_range_values_are_refused_naming_the_flag() {
        for (flag, value) in [
            ("--max-steps", "0"),
            ("--max-run-secs", "0"),
            ("--tool-timeout-secs", "0"),
            ("--tool-max-output-bytes", "1023"),
            ("--busy-lease-secs", "1"),
            ("--mcp-connect-timeout-ms", "0"),
            ("--mcp-call-timeout-ms", "0"),
            ("--subagent-timeout-secs", "0"),
            ("--registry-timeout-ms", "0"),
            ("--memory-messages", "1"),
        ] {
            let e = Config::try_parse_from(["executor-svc", flag, value]).expect_err(flag);
            assert!(e.to_string().contains(flag), "{e}");
        }
    }

    #[test]
    fn unusable_urls_and_ports_are_refused_at_start() {
        for url in ["notaurl", "ftp://127.0.0.1:50051", "http://127.0.0.1:99999"] {
            let e = Config::try_parse_from(["executor-svc", "--registry-url", url]).expect_err(url);
            assert!(e.to_string().contains("--registry-url"), "{e}");
        }
        for port in ["8o", "0", "65536", ""] {
            let e = Config::try_parse_from(["executor-svc", "--tool-connect-ports", port])
                .expect_err(port);
            assert!(e.to_string().contains("--tool-connect-ports"), "{e}");
        }
        let parse = |args: &[&str]| {
            let argv = ["executor-svc"].iter().chain(args).copied();
            Config::try_parse_from(argv).expect("parses")
        };
        assert_eq!(parse(&[]).check(), Ok(()), "the defaults pass");
        let registry_on_443 = parse(&["--registry-url", "https://registry.internal"]);
        let e = registry_on_443
            .check()
            .expect_err("443 is a default tool port");
        assert!(
            e.contains("port 443") && e.contains("--registry-url"),
            "{e}"
        );
        let own = parse(&["--listen", "127.0.0.1:80"])
            .check()
            .expect_err("own port");
        assert!(own.contains("--listen"), "{own}");
        let any = parse(&["--listen", "127.0.0.1:80", "--tool-connect-ports", "ANY"]);
        assert_eq!(any.check(), Ok(()), "`any` is the operator's choice");
        let none = parse(&["--listen", "127.0.0.1:80", "--tool-connect-ports", "none"]);
        assert_eq!(none.check(), Ok(()));
    }
}
