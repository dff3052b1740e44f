//! The command line: global connection flags (each with an environment fallback) and the
//! subcommands.

use std::{path::PathBuf, time::Duration};

use clap::{ArgGroup, Args, Parser, Subcommand, ValueEnum};

/// The default gateway (REST and SSE).
pub const DEFAULT_GATEWAY: &str = "http://127.0.0.1:8080";
/// The default registry (gRPC).
pub const DEFAULT_REGISTRY: &str = "http://127.0.0.1:50051";
/// The default executor (gRPC).
pub const DEFAULT_EXECUTOR: &str = "http://127.0.0.1:50052";
/// How long an ordinary request may take when `--timeout` is not given.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a run's stream may stay silent when `--idle-timeout` is not given.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(300);
/// How long `health` waits when `--timeout` is not given: it runs as a container healthcheck.
pub const DEFAULT_HEALTH_TIMEOUT: Duration = Duration::from_secs(3);

/// taskforce: manage agents and run them, through the Taskforce gateway (default) or straight
/// over gRPC (`--grpc`).
///
/// Exit codes: 0 success (a run completed), 1 error (a run failed or was cancelled), 2 a run
/// paused on a question (answer it with `taskforce answer`), 64 bad usage, 130 interrupted.
#[derive(Debug, Parser)]
#[command(name = "taskforce", version, propagate_version = true)]
pub struct Cli {
    /// Where the services are and how long to wait for them.
    #[command(flatten)]
    pub conn: Connection,
    /// Machine-readable output: one JSON object per result on stdout (one event per line for
    /// a run); errors as a JSON error body on stderr.
    #[arg(long, global = true, help_heading = "Output")]
    pub json: bool,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The services and the waits.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Connection")]
pub struct Connection {
    /// The gateway's base URL (REST and SSE).
    #[arg(long, global = true, env = "TASKFORCE_GATEWAY_URL", default_value = DEFAULT_GATEWAY, value_name = "URL")]
    pub gateway: String,
    /// Talk to the registry and the executor over gRPC instead of the gateway.
    #[arg(long, global = true)]
    pub grpc: bool,
    /// The registry's gRPC URL (with `--grpc`).
    #[arg(long, global = true, env = "TASKFORCE_REGISTRY_URL", default_value = DEFAULT_REGISTRY, value_name = "URL")]
    pub registry: String,
    /// The executor's gRPC URL (with `--grpc`).
    #[arg(long, global = true, env = "TASKFORCE_EXECUTOR_URL", default_value = DEFAULT_EXECUTOR, value_name = "URL")]
    pub executor: String,
    /// Seconds to wait for a connection and for each answer [default: 30; health: 3].
    #[arg(long, global = true, env = "TASKFORCE_TIMEOUT_SECS", value_name = "SECS", value_parser = parse_secs)]
    pub timeout: Option<Duration>,
    /// Seconds a run's stream may stay silent before the CLI gives up on it (the gateway sends
    /// a keep-alive every 15 s; over gRPC a long tool call is silent).
    #[arg(long, global = true, env = "TASKFORCE_IDLE_TIMEOUT_SECS", default_value = "300", value_name = "SECS", value_parser = parse_secs)]
    pub idle_timeout: Duration,
    /// The API key sent as `Authorization: Bearer` (to the gateway, or to both services with
    /// `--grpc`); needed when the services have keys configured.
    #[arg(
        long,
        global = true,
        env = "TASKFORCE_TOKEN",
        hide_env_values = true,
        value_name = "KEY"
    )]
    pub token: Option<String>,
}

impl Connection {
    /// The `authorization` header value of `--token`, if one is given.
    pub fn authorization(&self) -> crate::error::Result<Option<http::HeaderValue>> {
        taskforce_runtime::auth::authorization_value(self.token.as_deref().unwrap_or_default())
            .map_err(|_| {
                crate::error::Error::Usage(
                    "--token must be visible ASCII without spaces (an API key)".to_owned(),
                )
            })
    }

    /// The wait for one request.
    pub fn timeout(&self) -> Duration {
        self.timeout.unwrap_or(DEFAULT_TIMEOUT)
    }

    /// The flags that reach the services again as this invocation did, for a command the CLI
    /// suggests (`answer with: ...`): `--grpc`, and each URL or wait that differs from what the
    /// suggestion would get without it when pasted: its environment variable's value when that
    /// is set (`env` looks one up), else its default. Never `--token`: it is a secret, and
    /// `TASKFORCE_TOKEN` is the way to keep it out of the shell history.
    pub fn repeat_flags(&self, env: impl Fn(&str) -> Option<String>) -> Vec<String> {
        // The word to repeat of a value other than the one a pasted command would get.
        let url = |value: &str, default: &str, var: &str| {
            let pasted = env(var).unwrap_or_else(|| default.to_owned());
            (value != pasted).then(|| shell_word(value))
        };
        let secs = |value: Duration, default: Duration, var: &str| {
            // A variable that does not parse would fail the pasted command: say the value.
            let pasted = env(var).map_or(Some(default), |v| parse_secs(&v).ok());
            (pasted != Some(value)).then(|| value.as_secs_f64().to_string())
        };
        let mut given = if self.grpc {
            vec![
                (
                    "--registry",
                    url(&self.registry, DEFAULT_REGISTRY, "TASKFORCE_REGISTRY_URL"),
                ),
                (
                    "--executor",
                    url(&self.executor, DEFAULT_EXECUTOR, "TASKFORCE_EXECUTOR_URL"),
                ),
            ]
        } else {
            vec![(
                "--gateway",
                url(&self.gateway, DEFAULT_GATEWAY, "TASKFORCE_GATEWAY_URL"),
            )]
        };
        let idle_var = "TASKFORCE_IDLE_TIMEOUT_SECS";
        given.extend([
            (
                "--timeout",
                secs(self.timeout(), DEFAULT_TIMEOUT, "TASKFORCE_TIMEOUT_SECS"),
            ),
            (
                "--idle-timeout",
                secs(self.idle_timeout, DEFAULT_IDLE_TIMEOUT, idle_var),
            ),
        ]);
        let mut flags: Vec<String> = self.grpc.then(|| "--grpc".to_owned()).into_iter().collect();
        for (flag, word) in given {
            if let Some(word) = word {
                flags.extend([flag.to_owned(), word]);
            }
        }
        flags
    }
}

/// `s` as one word of a POSIX shell: as it is when that is safe, else in single quotes.
pub(crate) fn shell_word(s: &str) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || "_@%+=:,./-".contains(c);
    if !s.is_empty() && s.chars().all(safe) {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// List, show, create, update, validate and delete agent definitions.
    #[command(subcommand)]
    Agents(AgentsCommand),
    /// The tool catalog: native tools, orchestration tools, and the tools of the registry's
    /// catalog MCP servers (`configs/catalog/mcp_servers.yaml`; not the executor's global MCP
    /// servers, which are connected by the executor and named by agents).
    Tools,
    /// Run a mission with an agent (or a profile), streaming what happens.
    Run(RunArgs),
    /// Answer the question a paused session waits on, and stream the continued run.
    Answer(AnswerArgs),
    /// Cancel a session's live run, or the question a paused session waits on.
    Cancel {
        /// The session id.
        #[arg(value_parser = clap::builder::NonEmptyStringValueParser::new())]
        session: String,
    },
    /// Read sessions.
    #[command(subcommand)]
    Sessions(SessionsCommand),
    /// Check a service: `grpc://HOST:PORT` (grpc.health.v1) or `http(s)://...` (a GET);
    /// exit 0 when it is healthy. Small and fast, for container healthchecks.
    Health(HealthArgs),
}

/// `taskforce agents ...`.
#[derive(Debug, Subcommand)]
pub enum AgentsCommand {
    /// Every agent, profile agents first (table: id, source, status, name, description).
    List {
        /// Only agents of this source.
        #[arg(long, value_enum)]
        source: Option<Source>,
    },
    /// One agent's definition.
    Show {
        /// The agent id.
        #[arg(value_parser = clap::builder::NonEmptyStringValueParser::new())]
        id: String,
    },
    /// Create a custom agent from a YAML (or JSON) definition: the `configs/custom/*.yaml`
    /// format or the REST create body.
    Create {
        /// The definition file (`-`: standard input). Without `agent_id`, the file name is the id.
        #[arg(short = 'f', long = "file", value_name = "FILE")]
        file: PathBuf,
    },
    /// Replace a custom agent with a YAML (or JSON) definition, as `create` reads it.
    ///
    /// The update is refused (409 `version_conflict`) when the agent changed since the version the
    /// file carries (`agents show ID --json` output has it) or `--if-version` names.
    Update {
        /// The definition file (`-`: standard input). Without `agent_id`, the file name is the id.
        #[arg(short = 'f', long = "file", value_name = "FILE")]
        file: PathBuf,
        /// Only replace the agent if its stored version is this one (over the file's `version`).
        #[arg(long, value_name = "VERSION", conflicts_with = "force",
              value_parser = clap::builder::NonEmptyStringValueParser::new())]
        if_version: Option<String>,
        /// Replace whatever version is stored, ignoring the file's `version`.
        #[arg(long)]
        force: bool,
    },
    /// Check a YAML (or JSON) definition as `create` would, without saving it.
    ///
    /// Its fields, its tools, and the tools its MCP servers offer are checked.
    Validate {
        /// The definition file (`-`: standard input). Without `agent_id`, the file name is the id.
        #[arg(short = 'f', long = "file", value_name = "FILE")]
        file: PathBuf,
    },
    /// Delete a custom agent.
    Delete {
        /// The agent id.
        #[arg(value_parser = clap::builder::NonEmptyStringValueParser::new())]
        id: String,
        /// Only delete the agent if its stored version is this one.
        #[arg(long, value_name = "VERSION",
              value_parser = clap::builder::NonEmptyStringValueParser::new())]
        if_version: Option<String>,
    },
}

/// Where an agent comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Source {
    /// `configs/custom/{agent_id}.yaml`.
    Custom,
    /// `configs/{profile}.yaml`.
    Profile,
}

impl Source {
    /// The REST spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Custom => "custom",
            Self::Profile => "profile",
        }
    }
}

/// `taskforce run ...`.
#[derive(Debug, Args)]
// One of `--agent` and `--profile`, unless `--session` continues a session (then its own agent
// by default): bad usage fails before any request.
#[command(group(
    ArgGroup::new("target")
        .required(true)
        .multiple(true)
        .args(["agent", "profile", "session"])
))]
pub struct RunArgs {
    /// The agent to run (custom or profile).
    #[arg(long, value_name = "ID", conflicts_with = "profile", value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub agent: Option<String>,
    /// A profile agent to run (as the older profile-based CLI did).
    #[arg(long, value_name = "NAME", value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub profile: Option<String>,
    /// The model: an alias of the executor's `llm_config.yaml`, `@provider[/model]`, or a model
    /// name of its default provider.
    #[arg(long)]
    pub model: Option<String>,
    /// The policy mode: `readOnly`, `default` or `safeWrite`.
    #[arg(long)]
    pub mode: Option<String>,
    /// Continue this session (its conversation) with a new mission, with its own agent (`--agent`
    /// or `--profile` may only name that one).
    #[arg(long, value_name = "ID", value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub session: Option<String>,
    /// Approve a `safeWrite` call by its confirmation id (`c-...`); repeatable.
    #[arg(long = "confirm", value_name = "ID")]
    pub confirmations: Vec<String>,
    /// What the agent should do.
    pub mission: String,
}

/// `taskforce answer ...`.
#[derive(Debug, Args)]
pub struct AnswerArgs {
    /// The paused session.
    #[arg(value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub session: String,
    /// The answer (for an ordinary question).
    #[arg(required_unless_present = "set")]
    pub answer: Option<String>,
    /// Answer one item of a consolidated question (sub-agents' questions) by its key;
    /// repeatable.
    #[arg(long = "set", value_name = "KEY=VALUE", value_parser = parse_key_value)]
    pub set: Vec<(String, String)>,
    /// Only answer if this is the pending question's call id.
    #[arg(long, value_name = "ID")]
    pub call_id: Option<String>,
    /// The policy mode of the continued run: `readOnly`, `default` or `safeWrite` (default:
    /// the session's).
    #[arg(long)]
    pub mode: Option<String>,
    /// Approve a `safeWrite` call by its confirmation id (`c-...`); repeatable.
    #[arg(long = "confirm", value_name = "ID")]
    pub confirmations: Vec<String>,
}

/// `taskforce sessions ...`.
#[derive(Debug, Subcommand)]
pub enum SessionsCommand {
    /// A session: status, mission, question or final answer, error, plan (`--json`: the REST body).
    Show {
        /// The session id.
        #[arg(value_parser = clap::builder::NonEmptyStringValueParser::new())]
        id: String,
    },
    /// The sessions, the most recently changed first (needs an `admin` key when the services
    /// have keys; with `--grpc`, the sessions of the one executor at `--executor`).
    List(SessionsListArgs),
    /// Deletes a session without a live run (cancel that first): its conversation, question,
    /// plan and sub-agents' state.
    Delete {
        /// The session id.
        #[arg(value_parser = clap::builder::NonEmptyStringValueParser::new())]
        id: String,
    },
}

/// `taskforce sessions list`.
#[derive(Debug, Args)]
pub struct SessionsListArgs {
    /// Only the sessions of this agent.
    #[arg(long, value_name = "ID")]
    pub agent: Option<String>,
    /// Only the sessions in this status: `running`, `completed`, `paused`, `failed` or
    /// `cancelled`.
    #[arg(long)]
    pub status: Option<String>,
    /// At most this many sessions (1 to 1000; default 100).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub limit: Option<u32>,
    /// Where to go on: the `next_page_token` a list printed.
    #[arg(long, value_name = "TOKEN")]
    pub page_token: Option<String>,
}

/// `taskforce health ...`.
#[derive(Debug, Args)]
pub struct HealthArgs {
    /// `grpc://HOST:PORT`, or an `http://` / `https://` URL.
    pub target: String,
    /// The gRPC service to check (default: the server as a whole).
    #[arg(long, default_value = "")]
    pub service: String,
}

/// Seconds (fractions allowed) as a duration; zero, negative and absurd values are refused.
fn parse_secs(s: &str) -> Result<Duration, String> {
    let secs: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number of seconds"))?;
    if !(secs > 0.0 && secs <= 31_536_000.0) {
        return Err(format!("{s} is out of range (more than 0, at most a year)"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// `KEY=VALUE`, split at the first `=`; the key must not be empty.
fn parse_key_value(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_owned(), v.to_owned())),
        _ => Err(format!("{s:?} is not KEY=VALUE")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_take_fractions_and_refuse_nonsense() {
        assert_eq!(parse_secs("2.5"), Ok(Duration::from_millis(2500)));
        assert_eq!(parse_secs("30"), Ok(Duration::from_secs(30)));
        for bad in ["0", "-1", "abc", "", "NaN", "inf"] {
            assert!(parse_secs(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn key_values_split_at_the_first_equals_sign() {
        assert_eq!(
            parse_key_value("coder.version=a=b"),
            Ok(("coder.version".to_owned(), "a=b".to_owned()))
        );
        assert_eq!(parse_key_value("k="), Ok(("k".to_owned(), String::new())));
        assert!(parse_key_value("=v").is_err());
        assert!(parse_key_value("novalue").is_err());
    }

    #[test]
    fn the_command_line_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    #[test]
    fn agent_and_profile_exclude_each_other() {
        let r = Cli::try_parse_from(["taskforce", "run", "--agent", "a", "--profile", "p", "m"]);
        assert!(r.is_err());
        let cli = Cli::try_parse_from(["taskforce", "run", "--profile", "dev", "hello"])
            .map_err(|e| e.to_string());
        assert!(
            matches!(&cli, Ok(Cli { command: Command::Run(r), .. }) if r.profile.as_deref() == Some("dev") && r.mission == "hello"),
            "{cli:?}"
        );
    }

    #[test]
    fn run_needs_an_agent_or_a_profile() {
        let err = Cli::try_parse_from(["taskforce", "run", "x"]).expect_err("bad usage");
        assert_eq!(err.kind(), clap::error::ErrorKind::MissingRequiredArgument);
        let text = err.to_string();
        assert!(
            text.contains("--agent") && text.contains("--profile"),
            "{text}"
        );
    }

    #[test]
    fn suggested_commands_repeat_the_connection_flags_but_not_the_token() {
        let parse = |args: &[&str]| match Cli::try_parse_from(args) {
            Ok(cli) => cli.conn,
            Err(e) => panic!("{args:?}: {e}"),
        };
        let no_env = |_: &str| None;
        let conn = parse(&[
            "taskforce",
            "--grpc",
            "--registry",
            "http://r:1",
            "--executor",
            "http://e:2",
            "--gateway",
            "http://unused:3",
            "--token",
            "s3cret",
            "--timeout",
            "2.5",
            "answer",
            "s",
            "x",
        ]);
        assert_eq!(
            conn.repeat_flags(no_env),
            [
                "--grpc",
                "--registry",
                "http://r:1",
                "--executor",
                "http://e:2",
                "--timeout",
                "2.5"
            ]
        );
        let conn = parse(&[
            "taskforce",
            "--gateway",
            "http://gw:8080/a b",
            "--idle-timeout",
            "600",
            "answer",
            "s",
            "x",
        ]);
        assert_eq!(
            conn.repeat_flags(no_env),
            ["--gateway", "'http://gw:8080/a b'", "--idle-timeout", "600"]
        );
        // Defaults, and values that come from (or equal) the environment, go without saying.
        let conn = parse(&["taskforce", "--timeout", "30", "answer", "s", "x"]);
        assert!(conn.repeat_flags(no_env).is_empty());
        let conn = parse(&[
            "taskforce",
            "--gateway",
            "http://gw:1",
            "--timeout",
            "5",
            "answer",
            "s",
            "x",
        ]);
        let env = |var: &str| match var {
            "TASKFORCE_GATEWAY_URL" => Some("http://gw:1".to_owned()),
            "TASKFORCE_TIMEOUT_SECS" => Some("5.0".to_owned()),
            _ => None,
        };
        assert!(conn.repeat_flags(env).is_empty());
        // A flag that overrides its variable is said, also when it names the default: pasted,
        // the command would get the variable's value.
        let conn = parse(&[
            "taskforce",
            "--gateway",
            DEFAULT_GATEWAY,
            "--timeout",
            "30",
            "answer",
            "s",
            "x",
        ]);
        let env = |var: &str| match var {
            "TASKFORCE_GATEWAY_URL" => Some("http://elsewhere:1".to_owned()),
            "TASKFORCE_TIMEOUT_SECS" => Some("10".to_owned()),
            _ => None,
        };
        assert_eq!(
            conn.repeat_flags(env),
            ["--gateway", DEFAULT_GATEWAY, "--timeout", "30"]
        );
    }

    #[test]
    fn shell_words_are_quoted_only_when_needed() {
        assert_eq!(shell_word("http://127.0.0.1:8080"), "http://127.0.0.1:8080");
        assert_eq!(shell_word("http://x/it's"), r"'http://x/it'\''s'");
        assert_eq!(shell_word(""), "''");
    }

    #[test]
    fn answer_needs_text_or_keys() {
        assert!(Cli::try_parse_from(["taskforce", "answer", "s1"]).is_err());
        assert!(Cli::try_parse_from(["taskforce", "answer", "s1", "yes"]).is_ok());
        assert!(Cli::try_parse_from(["taskforce", "answer", "s1", "--set", "a.b=1"]).is_ok());
    }
}
