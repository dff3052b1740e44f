//! Confining the subprocess tools (`python`, `git`, `powershell`): every program starts through
//! the [`launcher`] (`taskforce-sandbox`, installed next to the executor), which lowers its
//! resource limits and confines its writes to the workspace and a per-call temp dir, then runs
//! it as its child, and when it ends kills what it left outside its process group.
//!
//! The mode comes from `TASKFORCE_TOOL_SANDBOX`: `landlock` (the default; best effort on a
//! kernel without Landlock, which is logged once, unless `TASKFORCE_TOOL_SANDBOX_REQUIRE=1`),
//! `bwrap` (bubblewrap must be installed, or the executor does not start), or `none` (the
//! program runs directly, as before: own process group, minimal environment, timeout only).

pub mod launcher;

use std::{
    ffi::OsString,
    fmt,
    path::{Path, PathBuf},
    sync::OnceLock,
};

use tracing::{info, warn};

use super::failed;
use crate::tools::ToolError;
use launcher::{Confine, LauncherArgs};
pub use taskforce_runtime::sandbox::{ConnectPorts, LAUNCHER_NAME, ResourceLimits};

/// How subprocess tools are confined.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SandboxMode {
    /// Resource limits and Landlock (writes only under the workspace and the call's temp dir).
    Landlock,
    /// Resource limits and bubblewrap (a read-only root, the workspace bound writable).
    #[value(alias = "bubblewrap")]
    Bwrap,
    /// No launcher: the program runs directly.
    #[value(alias = "off")]
    None,
}

/// The sandbox settings of [`super::NativeToolsConfig`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxConfig {
    /// `TASKFORCE_TOOL_SANDBOX`.
    pub mode: SandboxMode,
    /// `TASKFORCE_TOOL_SANDBOX_REQUIRE`: in `landlock` mode, refuse to run tools (and to start)
    /// on a kernel without Landlock instead of running them with the limits only.
    pub require: bool,
    /// `TASKFORCE_TOOL_LAUNCHER`: the launcher binary; `None` looks next to the executor's.
    pub launcher: Option<PathBuf>,
    /// `TASKFORCE_TOOL_BWRAP`: the bubblewrap binary for `bwrap` mode.
    pub bwrap_bin: PathBuf,
    /// The resource limits.
    pub limits: ResourceLimits,
    /// `TASKFORCE_TOOL_CONNECT_PORTS`: the TCP ports the programs may connect to.
    pub connect_ports: ConnectPorts,
    /// What the programs may not read: the executor's data directory (sessions, the
    /// state-token key, other agents' workspaces) and its API keys file. Set by the executor.
    pub hidden: Vec<PathBuf>,
    /// Where each call's temp dir (`TMPDIR`) is made: inside the hidden data directory, so one
    /// call's temp files are no other call's to read (each call is granted its own). `None`:
    /// the system's temp dir. Set by the executor.
    pub temp_root: Option<PathBuf>,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        Self {
            mode: SandboxMode::Landlock,
            require: false,
            launcher: None,
            bwrap_bin: PathBuf::from("bwrap"),
            limits: ResourceLimits::default(),
            connect_ports: ConnectPorts::default(),
            hidden: Vec::new(),
            temp_root: None,
        }
    }
}

/// A sandbox setting the executor cannot start with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SandboxError {
    /// The launcher binary is missing.
    #[error(
        "the tool sandbox launcher {path} does not exist: install `{LAUNCHER_NAME}` next to the \
         executor, point TASKFORCE_TOOL_LAUNCHER at it, or set TASKFORCE_TOOL_SANDBOX=none"
    )]
    NoLauncher {
        /// Where it was looked for.
        path: String,
    },
    /// `bwrap` mode without bubblewrap.
    #[error(
        "TASKFORCE_TOOL_SANDBOX=bwrap but bubblewrap ({bin}) is not installed: install it \
         (Debian: `apt-get install bubblewrap`) or choose landlock"
    )]
    NoBwrap {
        /// The binary looked for.
        bin: String,
    },
    /// Landlock is required but the kernel does not enforce it (or the probe failed).
    #[error("TASKFORCE_TOOL_SANDBOX_REQUIRE is set but Landlock is not available: {reason}")]
    LandlockMissing {
        /// What the probe found.
        reason: String,
    },
}

/// What the first probe found about Landlock on this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LandlockState {
    /// The ruleset is enforced (fully, or partially on an older kernel).
    Enforced(String),
    /// The kernel does not enforce Landlock: tools run with the resource limits only.
    BestEffort(String),
}

/// The tools' shared sandbox: settings, the launcher's path, what the Landlock probe found.
pub struct Sandbox {
    config: SandboxConfig,
    launcher: PathBuf,
}

/// What the Landlock probe found: a property of the host's kernel, probed (and logged) once per
/// process.
static LANDLOCK: OnceLock<LandlockState> = OnceLock::new();

impl fmt::Debug for Sandbox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sandbox")
            .field("mode", &self.config.mode)
            .field("launcher", &self.launcher)
            .finish_non_exhaustive()
    }
}

/// A program wrapped for its sandbox, and the per-call temp dir it may write (removed on drop).
#[derive(Debug)]
pub(crate) struct Wrapped {
    /// What to start: the launcher, or the program itself in `none` mode.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// `TMPDIR` and friends, pointing at the temp dir.
    pub env: Vec<(&'static str, OsString)>,
    /// The temp dir, held for the call (dropping it removes the dir).
    pub _temp: Option<TempDir>,
}

impl Sandbox {
    /// The sandbox for `config`; the launcher defaults to the executor binary's directory (or
    /// its parent when that is cargo's `deps/`, where test binaries live).
    pub fn new(config: SandboxConfig) -> Self {
        let launcher = config
            .launcher
            .clone()
            .unwrap_or_else(taskforce_runtime::sandbox::launcher_beside_exe);
        Self { config, launcher }
    }

    /// The mode.
    pub fn mode(&self) -> SandboxMode {
        self.config.mode
    }

    /// Start-up checks: the launcher exists, bubblewrap is installed for `bwrap`, and in
    /// `landlock` mode a probe (logged once) finds Landlock, which must be enforced when required.
    /// Blocking (the probe runs the launcher once).
    pub fn check(&self) -> Result<(), SandboxError> {
        if self.config.mode == SandboxMode::None {
            warn!(
                "TASKFORCE_TOOL_SANDBOX=none: python, git and powershell run without resource limits or file-system confinement"
            );
            return Ok(());
        }
        if !self.launcher.is_file() {
            return Err(SandboxError::NoLauncher {
                path: self.launcher.display().to_string(),
            });
        }
        if self.config.mode == SandboxMode::Bwrap {
            if which::which(&self.config.bwrap_bin).is_err() {
                return Err(SandboxError::NoBwrap {
                    bin: self.config.bwrap_bin.display().to_string(),
                });
            }
            return Ok(());
        }
        match self.landlock_state() {
            LandlockState::BestEffort(reason) if self.config.require => {
                Err(SandboxError::LandlockMissing { reason })
            }
            _ => Ok(()),
        }
    }

    /// What the Landlock probe found (probing once, blocking, on first use).
    pub fn landlock_state(&self) -> LandlockState {
        LANDLOCK.get_or_init(|| self.probe()).clone()
    }

    /// Runs the launcher with `--probe` and logs the outcome once.
    fn probe(&self) -> LandlockState {
        // A fresh directory of its own: the system's temp dir itself may hold the data directory
        // (a hidden path), where the launcher refuses to run (as it does for a tool).
        let out = TempDir::new(self.config.temp_root.as_deref()).and_then(|dir| {
            let mut args = self.launcher_args(&dir.path, Vec::new());
            args.probe = true;
            taskforce_runtime::env::minimal_command(&self.launcher, &[])
                .args(args.to_args())
                .output()
        });
        let state = match out {
            Ok(o) if o.status.success() => {
                let said = String::from_utf8_lossy(&o.stdout).trim().to_owned();
                if said.ends_with("not-enforced") {
                    LandlockState::BestEffort("the kernel does not enforce Landlock".to_owned())
                } else {
                    LandlockState::Enforced(said)
                }
            }
            Ok(o) => LandlockState::BestEffort(format!(
                "the probe failed ({}): {}",
                o.status,
                String::from_utf8_lossy(&o.stderr).trim()
            )),
            Err(e) => LandlockState::BestEffort(format!("the probe could not run: {e}")),
        };
        match &state {
            LandlockState::Enforced(status) => info!(status = %status, "tool sandbox: landlock"),
            LandlockState::BestEffort(reason) => warn!(
                reason = %reason,
                required = self.config.require,
                "tool sandbox: Landlock is not enforced; python, git and powershell run with resource limits only (best-effort mode)"
            ),
        }
        state
    }

    fn launcher_args(&self, workspace: &Path, writable: Vec<PathBuf>) -> LauncherArgs {
        let confine = match (self.config.mode, self.config.require) {
            (SandboxMode::Bwrap, _) => Confine::Bwrap,
            (_, true) => Confine::LandlockRequired,
            (_, false) => Confine::Landlock,
        };
        let mut args = LauncherArgs::new(
            workspace,
            writable,
            &self.config.limits,
            confine,
            &self.config.bwrap_bin,
        );
        args.connect_ports = self.config.connect_ports.clone();
        args.hidden.clone_from(&self.config.hidden);
        args
    }

    /// `program args` wrapped for the sandbox, with a fresh temp dir; blocking (creates the dir,
    /// and probes Landlock on first use).
    pub(crate) fn wrap(
        &self,
        tool: &str,
        workspace: &Path,
        program: &Path,
        args: Vec<OsString>,
    ) -> Result<Wrapped, ToolError> {
        if self.config.mode == SandboxMode::None {
            return Ok(Wrapped {
                program: program.to_path_buf(),
                args,
                env: Vec::new(),
                _temp: None,
            });
        }
        if !self.launcher.is_file() {
            return Err(ToolError::Unavailable {
                tool: tool.to_owned(),
                reason: SandboxError::NoLauncher {
                    path: self.launcher.display().to_string(),
                }
                .to_string(),
            });
        }
        if self.config.mode == SandboxMode::Landlock {
            // Logs once whether Landlock is enforced; the launcher itself refuses when required.
            self.landlock_state();
        }
        let temp = TempDir::new(self.config.temp_root.as_deref())
            .map_err(|e| failed(tool, format!("cannot create a temp dir: {e}")))?;
        let mut launcher = self.launcher_args(workspace, vec![temp.path.clone()]);
        launcher.command = std::iter::once(program.as_os_str().to_owned())
            .chain(args)
            .collect();
        let dir: OsString = temp.path.clone().into();
        Ok(Wrapped {
            program: self.launcher.clone(),
            args: launcher.to_args(),
            env: vec![("TMPDIR", dir.clone()), ("TMP", dir.clone()), ("TEMP", dir)],
            _temp: Some(temp),
        })
    }
}

/// A per-call temp dir (mode 0700) under `root` (else the system's), removed with everything in it on drop:
/// at once when the tool left it empty (one `rmdir`, the common case), else on the blocking pool
/// when a runtime is there (a runtime shutting down may never run that task: the empty dirs of
/// calls ended by a stop were left behind).
#[derive(Debug)]
pub(crate) struct TempDir {
    path: PathBuf,
}

/// The longest `TMPDIR` with room for the Unix sockets programs make in it (108 bytes in all,
/// `/pymp-xxxxxxxx/listener-xxxxxxxx` for Python's multiprocessing): a longer one only earns
/// a warning at start.
pub const TEMP_PATH_ROOM: usize = 70;

impl TempDir {
    /// A new dir in `root` (or the system's temp dir), with a short name: its path must leave
    /// room for a Unix socket's ([`TEMP_PATH_ROOM`]).
    fn new(root: Option<&Path>) -> std::io::Result<Self> {
        use std::os::unix::fs::DirBuilderExt;
        let root = root.map_or_else(std::env::temp_dir, Path::to_path_buf);
        // 48 random bits in a directory only this executor writes; a clash is tried again.
        let mut attempts = 0;
        loop {
            let id = uuid::Uuid::new_v4().simple().to_string();
            let path = root.join(format!("tf-{}", &id[..12]));
            match std::fs::DirBuilder::new().mode(0o700).create(&path) {
                Ok(()) => return Ok(Self { path }),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && attempts < 8 => {
                    attempts += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let path = std::mem::take(&mut self.path);
        if std::fs::remove_dir(&path).is_ok() {
            return;
        }
        let remove = move || {
            if let Err(e) = std::fs::remove_dir_all(&path) {
                warn!(path = %path.display(), error = %e, "could not remove a tool's temp dir");
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(h) => drop(h.spawn_blocking(remove)),
            Err(_) => remove(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tools_temp_dir_is_removed_on_drop_also_when_the_runtime_stops_right_after() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        let (empty, full) = runtime.block_on(async {
            let empty = TempDir::new(None).expect("temp dir");
            let full = TempDir::new(None).expect("temp dir");
            std::fs::write(full.path.join("left.txt"), "by the tool").expect("file");
            let paths = (empty.path.clone(), full.path.clone());
            drop((empty, full));
            // An empty one is gone at once, with no task that a stopping runtime could drop.
            assert!(!paths.0.exists(), "{}", paths.0.display());
            paths
        });
        // Shutting down waits for the blocking pool's removal of the other.
        drop(runtime);
        assert!(!empty.exists() && !full.exists(), "{}", full.display());
    }

    #[test]
    fn bwrap_mode_without_bubblewrap_refuses_to_start() {
        let sandbox = Sandbox::new(SandboxConfig {
            mode: SandboxMode::Bwrap,
            launcher: Some(std::env::current_exe().expect("exe")),
            bwrap_bin: PathBuf::from("/nonexistent/bwrap"),
            ..SandboxConfig::default()
        });
        let err = sandbox.check().expect_err("must refuse");
        assert!(matches!(err, SandboxError::NoBwrap { .. }), "{err}");
        assert!(err.to_string().contains("not installed"), "{err}");
    }

    #[test]
    fn a_missing_launcher_refuses_to_start_unless_the_sandbox_is_off() {
        let missing = SandboxConfig {
            launcher: Some(PathBuf::from("/nonexistent/taskforce-sandbox")),
            ..SandboxConfig::default()
        };
        let err = Sandbox::new(missing.clone())
            .check()
            .expect_err("must refuse");
        assert!(err.to_string().contains("TASKFORCE_TOOL_LAUNCHER"), "{err}");
        let off = SandboxConfig {
            mode: SandboxMode::None,
            ..missing
        };
        assert_eq!(Sandbox::new(off).check(), Ok(()));
    }
}
