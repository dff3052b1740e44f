//! A child process started by a test: its output goes to a log file (or to this process's
//! stderr with `TEST_LOG=1`), and it is killed when dropped.

use std::{
    fs::{File, OpenOptions},
    io,
    net::SocketAddr,
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Stdio},
    time::Duration,
};

use anyhow::{Context, bail};

use crate::wait::eventually;

/// Proxy variables inherited from the developer's shell are removed from every child: tests talk
/// to loopback only, and such a proxy must not change what they observe (a test that sets one
/// on the command keeps it).
const PROXY_VARS: [&str; 6] = [
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
];

/// True when children should log to this process's stderr (`TEST_LOG=1`).
pub fn test_log() -> bool {
    std::env::var("TEST_LOG").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// A running child process.
pub struct ChildProcess {
    name: String,
    child: Child,
    log: PathBuf,
}

impl ChildProcess {
    /// Starts `cmd`, appending its stdout and stderr to `log` (unless `TEST_LOG=1`).
    /// `RUST_LOG` defaults to `info` when neither `cmd` nor the caller's environment sets it.
    pub fn spawn(name: &str, mut cmd: Command, log: &Path) -> anyhow::Result<Self> {
        for var in PROXY_VARS {
            let given = cmd.get_envs().any(|(k, v)| k == var && v.is_some());
            if !given {
                cmd.env_remove(var);
            }
        }
        let set_by_cmd = cmd.get_envs().any(|(k, v)| k == "RUST_LOG" && v.is_some());
        if !set_by_cmd && std::env::var_os("RUST_LOG").is_none() {
            cmd.env("RUST_LOG", "info");
        }
        // A service that fails to start prints its error, not a backtrace of `main` that
        // pushes the error out of the log tail a failing test shows (panics keep theirs).
        cmd.env("RUST_LIB_BACKTRACE", "0");
        cmd.stdin(Stdio::null());
        if test_log() {
            cmd.stdout(Stdio::inherit()).stderr(Stdio::inherit());
        } else {
            let file = open_log(log)?;
            cmd.stdout(file.try_clone()?).stderr(file);
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("starting {name} ({cmd:?})"))?;
        Ok(Self {
            name: name.to_owned(),
            child,
            log: log.to_path_buf(),
        })
    }

    /// The process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// The log file (empty with `TEST_LOG=1`).
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The exit status, if the process has ended.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Sends SIGKILL and reaps the process.
    pub fn kill9(&mut self) -> io::Result<()> {
        if self.exited().is_none() {
            self.child.kill()?;
        }
        self.child.wait().map(drop)
    }

    /// Sends SIGTERM and waits up to `grace` for a clean exit, then SIGKILLs.
    /// Returns the exit status of a clean exit, `None` when it had to be killed.
    pub async fn terminate(&mut self, grace: Duration) -> anyhow::Result<Option<ExitStatus>> {
        if let Some(status) = self.exited() {
            return Ok(Some(status));
        }
        // No signal crate in the tree (and no unsafe): the `kill` utility sends it.
        let sent = Command::new("kill")
            .args(["-TERM", &self.id().to_string()])
            .status()
            .context("running kill -TERM")?;
        if !sent.success() && self.exited().is_none() {
            bail!("kill -TERM {} failed: {sent}", self.id());
        }
        let status = eventually(grace, Duration::from_millis(20), || {
            let s = self.exited();
            async move { s }
        })
        .await;
        if status.is_none() {
            self.kill9()?;
        }
        Ok(status)
    }

    /// The last `lines` lines of the log, for failure messages.
    pub fn log_tail(&self, lines: usize) -> String {
        log_tail(&self.name, &self.log, lines)
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        let _ = self.kill9();
    }
}

fn open_log(path: &Path) -> anyhow::Result<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("opening log {}", path.display()))
}

/// The last `lines` lines of a log file, headed by `name`.
pub fn log_tail(name: &str, path: &Path, lines: usize) -> String {
    if test_log() {
        return format!("--- {name}: output went to stderr (TEST_LOG=1) ---");
    }
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    let from = all.len().saturating_sub(lines);
    format!(
        "--- {name}: last {} lines of {} ---\n{}",
        all.len() - from,
        path.display(),
        all[from..].join("\n")
    )
}

/// Waits until `child` has written a socket address into `addr_file`, failing early when the
/// child exits first.
pub async fn wait_for_addr_file(
    child: &mut ChildProcess,
    addr_file: &Path,
    timeout: Duration,
) -> anyhow::Result<SocketAddr> {
    let mut exited = None;
    let addr = eventually(timeout, Duration::from_millis(20), || {
        let read = std::fs::read_to_string(addr_file)
            .ok()
            .and_then(|s| s.trim().parse::<SocketAddr>().ok());
        if read.is_none() {
            exited = child.exited();
        }
        let done = read.map(Ok).or(exited.map(Err));
        async move { done }
    })
    .await;
    match addr {
        Some(Ok(addr)) => Ok(addr),
        Some(Err(status)) => bail!(
            "{} exited ({status}) before writing {}\n{}",
            child.name,
            addr_file.display(),
            child.log_tail(60)
        ),
        None => bail!(
            "{} did not write {} within {timeout:?}\n{}",
            child.name,
            addr_file.display(),
            child.log_tail(60)
        ),
    }
}

/// Ids of the running processes whose command line is exactly `argv`, read from `/proc`
/// (to check that a service did not leave a child behind).
pub fn processes_with_args(argv: &[&str]) -> Vec<u32> {
    let want: Vec<u8> = argv.iter().flat_map(|a| a.bytes().chain([0])).collect();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == want)
                && !is_zombie(*pid)
        })
        .collect()
}

/// User plus system CPU clock ticks (1/100 s) of process `pid` so far, all threads (0 when
/// unknown).
pub fn cpu_ticks(pid: u32) -> u64 {
    let (user, system) = cpu_ticks_split(pid);
    user + system
}

/// User and system CPU clock ticks (1/100 s) of process `pid` so far, all threads ((0, 0) when
/// unknown).
pub fn cpu_ticks_split(pid: u32) -> (u64, u64) {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            let (_, rest) = s.rsplit_once(')')?;
            let f: Vec<&str> = rest.split_whitespace().collect();
            Some((f.get(11)?.parse().ok()?, f.get(12)?.parse().ok()?))
        })
        .unwrap_or((0, 0))
}

/// True while `/proc` has an entry for `pid` (a running process, or a zombie not yet reaped).
pub fn pid_exists(pid: u32) -> bool {
    Path::new("/proc").join(pid.to_string()).exists()
}

fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next().map(|st| st == "Z"))
        })
        .unwrap_or(false)
}

/// Kills, when dropped, every process whose command line is exactly `argv`: cleans up servers
/// a test made a service start, should the service fail to stop them (or be SIGKILLed).
pub struct ReapOnDrop(pub Vec<String>);

impl ReapOnDrop {
    /// A guard for `argv`.
    pub fn new(argv: &[&str]) -> Self {
        Self(argv.iter().map(|a| (*a).to_owned()).collect())
    }

    /// The running processes with this command line.
    pub fn running(&self) -> Vec<u32> {
        let argv: Vec<&str> = self.0.iter().map(String::as_str).collect();
        processes_with_args(&argv)
    }
}

impl Drop for ReapOnDrop {
    fn drop(&mut self) {
        for pid in self.running() {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
    }
}
