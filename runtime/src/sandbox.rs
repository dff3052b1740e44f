//! The command line of `taskforce-sandbox`, the launcher every tool subprocess and every
//! workspace metadata task starts through: what the executor and the registry write, and what the
//! launcher (in `executor-svc`) parses. It confines itself (resource limits; Landlock, or
//! bubblewrap; the TCP ports it may connect to; no capabilities), then `exec`s the program.

use std::{
    ffi::OsString,
    fmt,
    path::{Path, PathBuf},
};

use clap::{Parser, ValueEnum};

/// The launcher's file name, looked up next to the service's binary.
pub const LAUNCHER_NAME: &str = "taskforce-sandbox";

/// Exit code when the sandbox cannot be set up (the shell's "cannot execute").
pub const EXIT_SETUP: u8 = 126;
/// Exit code when the program is not found (the shell's "command not found").
pub const EXIT_NOT_FOUND: u8 = 127;

/// `taskforce-sandbox` next to the running executable (leaving cargo's `deps/`, where the
/// test binaries are); the default of the executor's `TASKFORCE_TOOL_LAUNCHER` and the
/// registry's `--task-launcher`.
pub fn launcher_beside_exe() -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_default();
    let mut dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    if !dir.join(LAUNCHER_NAME).is_file() && dir.file_name().is_some_and(|n| n == "deps") {
        dir.pop();
    }
    dir.join(LAUNCHER_NAME)
}

/// Per-process resource limits of a tool's programs (setrlimit); 0 leaves one unchanged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceLimits {
    /// CPU seconds per process (`RLIMIT_CPU`): `TASKFORCE_TOOL_CPU_SECONDS`, default 60.
    pub cpu_seconds: u64,
    /// Address space per process (`RLIMIT_AS`): `TASKFORCE_TOOL_MEMORY_MB`, default 2048 MiB.
    pub address_space_bytes: u64,
    /// Open files per process (`RLIMIT_NOFILE`): `TASKFORCE_TOOL_OPEN_FILES`, default 256.
    pub open_files: u64,
    /// Processes and threads of the executor's user (`RLIMIT_NPROC`, counted per user, the
    /// executor's own threads included, and not enforced for root): `TASKFORCE_TOOL_PROCESSES`,
    /// default 512, which stops a fork bomb well before it hurts the host while leaving the
    /// executor's few dozen threads and several concurrent tool calls room.
    pub processes: u64,
}

impl Default for ResourceLimits {
    fn default() -> Self {
        Self {
            cpu_seconds: 60,
            address_space_bytes: 2048 * 1024 * 1024,
            open_files: 256,
            processes: 512,
        }
    }
}

/// The TCP ports a tool's programs may connect to (Landlock, kernel 6.7+): by default DNS, HTTP
/// and HTTPS, so `git clone https://…` and `pip download` work while the services' own ports
/// (the registry's gRPC, the executor's, the gateway's) stay out of reach of a program that
/// would use them to leave its sandbox (asking the registry to validate an agent whose MCP
/// server is any command, say).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConnectPorts {
    /// No restriction (`any`).
    Any,
    /// Only these ports (`none`: no TCP connection at all).
    Only(Vec<u16>),
}

impl Default for ConnectPorts {
    fn default() -> Self {
        Self::Only(vec![53, 80, 443])
    }
}

impl ConnectPorts {
    /// Whether a connection to `port` is allowed.
    pub fn allows(&self, port: u16) -> bool {
        match self {
            Self::Any => true,
            Self::Only(ports) => ports.contains(&port),
        }
    }
}

impl std::str::FromStr for ConnectPorts {
    type Err = String;

    /// `any`, `none`, or comma-separated ports (`53,80,443`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        if s.eq_ignore_ascii_case("any") {
            return Ok(Self::Any);
        }
        if s.eq_ignore_ascii_case("none") {
            return Ok(Self::Only(Vec::new()));
        }
        let mut ports = Vec::new();
        for part in s.split(',') {
            let part = part.trim();
            match part.parse::<u16>() {
                Ok(port) if port > 0 => {
                    if !ports.contains(&port) {
                        ports.push(port);
                    }
                }
                _ => {
                    return Err(format!(
                        "`{part}` is not a TCP port (1-65535); give ports separated by commas \
                         (53,80,443), `any` or `none`"
                    ));
                }
            }
        }
        Ok(Self::Only(ports))
    }
}

impl fmt::Display for ConnectPorts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Any => f.write_str("any"),
            Self::Only(ports) if ports.is_empty() => f.write_str("none"),
            Self::Only(ports) => {
                let ports: Vec<String> = ports.iter().map(u16::to_string).collect();
                f.write_str(&ports.join(","))
            }
        }
    }
}

/// How the launcher confines the program after the resource limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Confine {
    /// Landlock; without kernel support the program runs with the limits only.
    Landlock,
    /// Landlock, and refuse to run the program without it.
    LandlockRequired,
    /// bubblewrap: a read-only root with the workspace and the temp dir bound writable.
    Bwrap,
}

/// The launcher's command line; [`LauncherArgs::to_args`] writes it, the binary parses it.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "taskforce-sandbox",
    about = "Runs a tool program confined to its workspace"
)]
pub struct LauncherArgs {
    /// The directory the program may write under (its working directory).
    #[arg(long)]
    pub workspace: PathBuf,
    /// More directories the program may write under (the per-call temp dir).
    #[arg(long)]
    pub writable: Vec<PathBuf>,
    /// Paths the program may not read either (the executor's data directory: its sessions, its
    /// state-token key, other agents' workspaces; its API keys file). Landlock then grants
    /// reads everywhere else; bubblewrap mounts an empty directory (or file) over each.
    #[arg(long)]
    pub hidden: Vec<PathBuf>,
    /// CPU seconds per process (0: unchanged).
    #[arg(long, default_value_t = 0)]
    pub cpu_seconds: u64,
    /// Address space per process in bytes (0: unchanged).
    #[arg(long, default_value_t = 0)]
    pub address_space: u64,
    /// Open files per process (0: unchanged).
    #[arg(long, default_value_t = 0)]
    pub open_files: u64,
    /// Processes of the user, this one's children included (0: unchanged).
    #[arg(long, default_value_t = 0)]
    pub processes: u64,
    /// How to confine the file system.
    #[arg(long, value_enum, default_value_t = Confine::Landlock)]
    pub confine: Confine,
    /// The bubblewrap binary, for `--confine bwrap`.
    #[arg(long, default_value = "bwrap")]
    pub bwrap: PathBuf,
    /// The TCP ports the program may connect to: `any`, `none`, or `53,80,443`.
    #[arg(long, default_value = "any")]
    pub connect_ports: ConnectPorts,
    /// Apply the confinement, print how much of Landlock is enforced, and exit.
    #[arg(long)]
    pub probe: bool,
    /// The program and its arguments.
    #[arg(last = true)]
    pub command: Vec<OsString>,
}

impl LauncherArgs {
    /// The arguments to start the launcher with (the program and its arguments come after).
    pub fn new(
        workspace: &Path,
        writable: Vec<PathBuf>,
        limits: &ResourceLimits,
        confine: Confine,
        bwrap: &Path,
    ) -> Self {
        Self {
            workspace: workspace.to_path_buf(),
            writable,
            hidden: Vec::new(),
            cpu_seconds: limits.cpu_seconds,
            address_space: limits.address_space_bytes,
            open_files: limits.open_files,
            processes: limits.processes,
            confine,
            bwrap: bwrap.to_path_buf(),
            connect_ports: ConnectPorts::Any,
            probe: false,
            command: Vec::new(),
        }
    }

    /// The command line, `--` and the program included.
    pub fn to_args(&self) -> Vec<OsString> {
        let mut out: Vec<OsString> = vec!["--workspace".into(), self.workspace.clone().into()];
        for w in &self.writable {
            out.extend(["--writable".into(), w.clone().into()]);
        }
        for h in &self.hidden {
            out.extend(["--hidden".into(), h.clone().into()]);
        }
        for (flag, v) in [
            ("--cpu-seconds", self.cpu_seconds),
            ("--address-space", self.address_space),
            ("--open-files", self.open_files),
            ("--processes", self.processes),
        ] {
            out.extend([flag.into(), v.to_string().into()]);
        }
        let confine = match self.confine {
            Confine::Landlock => "landlock",
            Confine::LandlockRequired => "landlock-required",
            Confine::Bwrap => "bwrap",
        };
        out.extend([
            "--confine".into(),
            confine.into(),
            "--bwrap".into(),
            self.bwrap.clone().into(),
            "--connect-ports".into(),
            self.connect_ports.to_string().into(),
        ]);
        if self.probe {
            out.push("--probe".into());
        }
        out.push("--".into());
        out.extend(self.command.iter().cloned());
        out
    }
}

/// What a service's confined programs may not read: its data directory and its API keys file,
/// made absolute (the launcher runs in a workspace, where a relative path names nothing).
pub fn hidden_paths(data_dir: &Path, api_keys_file: Option<&Path>) -> Vec<PathBuf> {
    std::iter::once(data_dir)
        .chain(api_keys_file)
        .map(|p| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hidden_paths_are_absolute() {
        let hidden = hidden_paths(
            Path::new(".tf-data/executor"),
            Some(Path::new("/etc/k.yaml")),
        );
        assert!(hidden.iter().all(|p| p.is_absolute()), "{hidden:?}");
        assert!(hidden[0].ends_with(".tf-data/executor"), "{hidden:?}");
        assert_eq!(hidden[1], Path::new("/etc/k.yaml"));
    }

    #[test]
    fn the_command_line_round_trips() {
        let limits = ResourceLimits::default();
        let mut a = LauncherArgs::new(
            Path::new("/ws"),
            vec![PathBuf::from("/tmp/t")],
            &limits,
            Confine::LandlockRequired,
            Path::new("bwrap"),
        );
        a.command = vec!["python3".into(), "-".into(), "--probe".into()];
        a.hidden = vec![PathBuf::from("/var/lib/x"), PathBuf::from("/etc/keys.yaml")];
        let mut argv: Vec<OsString> = vec!["taskforce-sandbox".into()];
        argv.extend(a.to_args());
        let parsed = LauncherArgs::try_parse_from(argv).expect("parse");
        assert_eq!(parsed.workspace, Path::new("/ws"));
        assert_eq!(parsed.writable, vec![PathBuf::from("/tmp/t")]);
        assert_eq!(parsed.hidden, a.hidden);
        assert_eq!(parsed.open_files, limits.open_files);
        assert_eq!(parsed.confine, Confine::LandlockRequired);
        assert_eq!(parsed.connect_ports, ConnectPorts::Any);
        a.connect_ports = ConnectPorts::default();
        let mut argv: Vec<OsString> = vec!["taskforce-sandbox".into()];
        argv.extend(a.to_args());
        let parsed = LauncherArgs::try_parse_from(argv).expect("parse");
        assert_eq!(parsed.connect_ports, ConnectPorts::Only(vec![53, 80, 443]));
        assert!(
            !parsed.probe,
            "a program's own --probe is not the launcher's"
        );
        assert_eq!(parsed.command, a.command);
    }
}
