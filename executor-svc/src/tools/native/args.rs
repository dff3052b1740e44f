//! The native tools' flags (part of the executor's [`crate::Config`]): endpoints, binaries, the
//! GitHub token and the subprocess sandbox, each with the environment variable it has always
//! been read from. Values are checked by clap at start, so a bad one stops the executor naming
//! the flag and its variable.

use std::path::PathBuf;

use clap::builder::BoolishValueParser;
use secrecy::{ExposeSecret, SecretString};

use super::{
    ConnectPorts, DEFAULT_GITHUB_API_URL, DEFAULT_WEB_SEARCH_URL, NativeToolsConfig,
    ResourceLimits, SandboxConfig, SandboxMode,
};

/// Flags of the native tools.
#[derive(Debug, Clone, clap::Args)]
pub struct NativeToolsArgs {
    /// Search URL prefix of `web_search`; the URL-encoded query is appended.
    #[arg(long, env = "TASKFORCE_WEB_SEARCH_URL", default_value = DEFAULT_WEB_SEARCH_URL,
          value_parser = taskforce_runtime::service_url)]
    pub web_search_url: String,
    /// Address ranges the web tools may reach although they are not public (CIDRs or single
    /// addresses, comma-separated).
    #[arg(long, env = "TASKFORCE_WEB_ALLOW_NETS", value_delimiter = ',', value_parser = parse_net)]
    pub web_allow_nets: Vec<ipnet::IpNet>,
    /// GitHub REST API base URL (GitHub Enterprise: `https://HOST/api/v3`).
    #[arg(long, env = "GITHUB_API_URL", default_value = DEFAULT_GITHUB_API_URL,
          value_parser = taskforce_runtime::service_url)]
    pub github_api_url: String,
    /// GitHub token of the `github` tool (without one, only unauthenticated reads).
    #[arg(long, env = "GITHUB_TOKEN", hide_env_values = true, value_parser = secret)]
    pub github_token: Option<SecretString>,
    /// `GH_TOKEN`, read when `GITHUB_TOKEN` is not set.
    #[arg(long, env = "GH_TOKEN", hide = true, value_parser = secret)]
    pub gh_token: Option<SecretString>,
    /// The Python interpreter (a name looked up on `PATH`, or a path).
    #[arg(long, env = "TASKFORCE_PYTHON", default_value = "python3")]
    pub python: PathBuf,
    /// The PowerShell binary; the tool is unavailable when it is not found.
    #[arg(long, env = "TASKFORCE_PWSH", default_value = "pwsh")]
    pub pwsh: PathBuf,
    /// How `python`, `git` and `powershell` are confined: `landlock`, `bwrap` or `none`.
    #[arg(
        long,
        env = "TASKFORCE_TOOL_SANDBOX",
        value_enum,
        ignore_case = true,
        default_value = "landlock"
    )]
    pub tool_sandbox: SandboxMode,
    /// In `landlock` mode, refuse to run tools (and to start) on a kernel without Landlock. A
    /// switch: `1`/`true`/`yes`/`on` or `0`/`false`/`no`/`off` (the flag alone: on).
    #[arg(long, env = "TASKFORCE_TOOL_SANDBOX_REQUIRE", value_parser = BoolishValueParser::new(),
          hide_possible_values = true, num_args = 0..=1, default_missing_value = "true",
          default_value = "false")]
    pub tool_sandbox_require: bool,
    /// The sandbox launcher (default: `taskforce-sandbox` next to the executor's binary).
    #[arg(long, env = "TASKFORCE_TOOL_LAUNCHER")]
    pub tool_launcher: Option<PathBuf>,
    /// The bubblewrap binary of `bwrap` mode.
    #[arg(long, env = "TASKFORCE_TOOL_BWRAP", default_value = "bwrap")]
    pub tool_bwrap: PathBuf,
    /// CPU seconds per tool process (0: the executor's own limit, unchanged).
    #[arg(long, env = "TASKFORCE_TOOL_CPU_SECONDS", default_value_t = ResourceLimits::default().cpu_seconds)]
    pub tool_cpu_seconds: u64,
    /// Address space per tool process, in MiB (0: the executor's own limit, unchanged).
    #[arg(long, env = "TASKFORCE_TOOL_MEMORY_MB",
          default_value_t = ResourceLimits::default().address_space_bytes >> 20)]
    pub tool_memory_mb: u64,
    /// Open files per tool process (0: the executor's own limit, unchanged).
    #[arg(long, env = "TASKFORCE_TOOL_OPEN_FILES", default_value_t = ResourceLimits::default().open_files)]
    pub tool_open_files: u64,
    /// Processes and threads of the executor's user while a tool runs (0: the executor's own limit, unchanged).
    #[arg(long, env = "TASKFORCE_TOOL_PROCESSES", default_value_t = ResourceLimits::default().processes)]
    pub tool_processes: u64,
    /// The TCP ports `python`, `git` and `powershell` may connect to (Landlock, kernel 6.7+):
    /// comma-separated, `none`, or `any`; never the services' own ports.
    #[arg(long, env = "TASKFORCE_TOOL_CONNECT_PORTS", default_value_t = ConnectPorts::default())]
    pub tool_connect_ports: ConnectPorts,
}

impl NativeToolsArgs {
    /// The tools' configuration: these flags over [`NativeToolsConfig::default`].
    pub fn config(&self) -> NativeToolsConfig {
        taskforce_runtime::env::never_log(
            [&self.github_token, &self.gh_token]
                .into_iter()
                .flatten()
                .map(|t| t.expose_secret()),
        );
        NativeToolsConfig {
            web_search_url: self.web_search_url.clone(),
            github_api_url: self.github_api_url.clone(),
            // An empty variable counts as unset, as it always has.
            github_token: [&self.github_token, &self.gh_token]
                .into_iter()
                .flatten()
                .find(|t| !t.expose_secret().is_empty())
                .cloned(),
            python_bin: self.python.clone(),
            pwsh_bin: self.pwsh.clone(),
            web_allow_nets: self.web_allow_nets.clone(),
            sandbox: SandboxConfig {
                mode: self.tool_sandbox,
                require: self.tool_sandbox_require,
                launcher: self.tool_launcher.clone(),
                bwrap_bin: self.tool_bwrap.clone(),
                limits: ResourceLimits {
                    cpu_seconds: self.tool_cpu_seconds,
                    address_space_bytes: self.tool_memory_mb.saturating_mul(1 << 20),
                    open_files: self.tool_open_files,
                    processes: self.tool_processes,
                },
                connect_ports: self.tool_connect_ports.clone(),
                hidden: Vec::new(),
                temp_root: None,
            },
            ..NativeToolsConfig::default()
        }
    }
}

/// `10.0.0.0/8`, or one address (`127.0.0.1`, `::1`) as a one-address net.
fn parse_net(entry: &str) -> Result<ipnet::IpNet, String> {
    let entry = entry.trim();
    entry
        .parse::<ipnet::IpNet>()
        .ok()
        .or_else(|| {
            entry
                .parse::<std::net::IpAddr>()
                .ok()
                .map(ipnet::IpNet::from)
        })
        .ok_or_else(|| format!("`{entry}` is not a CIDR (10.0.0.0/8) or an address"))
}

fn secret(value: &str) -> Result<SecretString, std::convert::Infallible> {
    Ok(SecretString::from(value.trim()))
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    fn parse(args: &[&str]) -> Result<NativeToolsConfig, clap::Error> {
        let argv = std::iter::once("executor-svc").chain(args.iter().copied());
        crate::Config::try_parse_from(argv).map(|c| c.tools.config())
    }

    #[test]
    fn defaults_are_the_configs_defaults() {
        let c = parse(&[]).expect("defaults");
        let d = NativeToolsConfig::default();
        assert_eq!(c.sandbox, d.sandbox);
        assert_eq!(c.sandbox.limits.address_space_bytes, 2 << 30);
        assert_eq!(
            (c.web_search_url, c.github_api_url, c.python_bin),
            (d.web_search_url, d.github_api_url, d.python_bin)
        );
    }

    #[test]
    fn sandbox_settings_are_read_and_bad_values_refused_naming_the_flag() {
        let c = parse(&[
            "--tool-sandbox",
            "BWRAP",
            "--tool-sandbox-require",
            "1",
            "--tool-memory-mb",
            "512",
            "--tool-open-files",
            "64",
            "--tool-processes",
            "0",
        ])
        .expect("parse");
        assert_eq!(c.sandbox.mode, SandboxMode::Bwrap);
        assert!(c.sandbox.require);
        assert_eq!(c.sandbox.limits.address_space_bytes, 512 << 20);
        assert_eq!(
            (c.sandbox.limits.open_files, c.sandbox.limits.processes),
            (64, 0)
        );
        for (flag, value) in [
            ("--tool-sandbox", "firejail"),
            ("--tool-cpu-seconds", "lots"),
            ("--tool-sandbox-require", "maybe"),
            ("--web-allow-nets", "10.0.0.0/8,intranet"),
        ] {
            let e = parse(&[flag, value]).expect_err(flag).to_string();
            assert!(e.contains(flag), "{e}");
        }
    }

    #[test]
    fn nets_are_a_comma_separated_list() {
        let c = parse(&["--web-allow-nets", "127.0.0.0/8, ::1"]).expect("parse");
        assert_eq!(c.web_allow_nets.len(), 2);
    }

    #[test]
    fn the_github_token_falls_back_to_gh_token_and_never_prints() {
        let c = parse(&["--gh-token", "t0k"]).expect("parse");
        let token = c.github_token.as_ref().map(ExposeSecret::expose_secret);
        assert_eq!(token, Some("t0k"));
        assert!(!format!("{c:?}").contains("t0k"));
        let c = parse(&["--gh-token", "gh", "--github-token", "github"]).expect("parse");
        let token = c.github_token.as_ref().map(ExposeSecret::expose_secret);
        assert_eq!(token, Some("github"));
        let c = parse(&["--github-token", " ", "--gh-token", "gh"]).expect("parse");
        let token = c.github_token.as_ref().map(ExposeSecret::expose_secret);
        assert_eq!(token, Some("gh"));
    }
}
