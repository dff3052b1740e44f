//! A ledger on disk of the tool subprocess groups that are running, so that an executor started
//! after a crash (SIGKILL, out of memory) kills the groups its predecessor left behind: nothing
//! else would, since their timeouts lived in the dead process.
//!
//! One file per group, named by the leader's pid and holding its start time (field 22 of
//! `/proc/<pid>/stat`), so a pid the kernel has since given to another program is left alone.
//! Without [`install`] (embedded uses, tests) recording does nothing.

use std::{
    io,
    path::{Path, PathBuf},
    sync::OnceLock,
};

use nix::{
    sys::signal::{Signal, killpg},
    unistd::Pid,
};
use tracing::{debug, info, warn};

static DIR: OnceLock<PathBuf> = OnceLock::new();

/// Uses `dir` as the ledger (created if missing) after killing every group recorded there whose
/// leader still runs; returns how many were killed. Blocking: call from `spawn_blocking`.
pub fn install(dir: &Path) -> io::Result<usize> {
    std::fs::create_dir_all(dir)?;
    let mut killed = 0;
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let recorded = std::fs::read_to_string(&path).unwrap_or_default();
        let pid = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.parse::<i32>().ok());
        if let Some(pid) = pid
            && recorded
                .trim()
                .parse::<u64>()
                .ok()
                .is_some_and(|t| Some(t) == start_time(pid))
        {
            match killpg(Pid::from_raw(pid), Signal::SIGKILL) {
                Ok(()) => {
                    info!(
                        pid,
                        "killed a tool subprocess group left by a previous executor"
                    );
                    killed += 1;
                }
                Err(e) => warn!(pid, error = %e, "could not kill a leftover tool subprocess group"),
            }
        }
        if let Err(e) = std::fs::remove_file(&path) {
            warn!(path = %path.display(), error = %e, "could not remove a ledger entry");
        }
    }
    // A second install (tests serving twice in one process) keeps the first directory.
    let _ = DIR.set(dir.to_path_buf());
    Ok(killed)
}

/// The ledger entry of a running group; removed when dropped (the group is then killed and
/// reaped, or ended by itself).
#[derive(Debug)]
pub(crate) struct Entry(Option<PathBuf>);

/// Records the group led by `pid`.
pub(crate) fn record(pid: Option<u32>) -> Entry {
    let (Some(dir), Some(pid)) = (DIR.get(), pid.and_then(|p| i32::try_from(p).ok())) else {
        return Entry(None);
    };
    let Some(started) = start_time(pid) else {
        return Entry(None);
    };
    let path = dir.join(pid.to_string());
    match std::fs::write(&path, started.to_string()) {
        Ok(()) => Entry(Some(path)),
        // The directory of an executor served earlier in this process (tests) is gone.
        Err(e) if e.kind() == io::ErrorKind::NotFound => Entry(None),
        Err(e) => {
            warn!(pid, error = %e, "could not record a tool subprocess in the ledger");
            Entry(None)
        }
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        if let Some(path) = self.0.take()
            && let Err(e) = std::fs::remove_file(&path)
        {
            debug!(path = %path.display(), error = %e, "ledger entry already gone");
        }
    }
}

/// Field 22 of `/proc/<pid>/stat`: the process's start time in clock ticks after boot.
fn start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: count after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_times_are_read_and_a_reused_pid_is_not_killed() {
        let me = i32::try_from(std::process::id()).unwrap_or(i32::MAX);
        assert!(start_time(me).is_some_and(|t| t > 0));
        let dir = tempfile::TempDir::new().expect("tmp");
        // This process's pid with a start time it does not have: left alone, entry removed.
        std::fs::write(dir.path().join(me.to_string()), "1").expect("write");
        std::fs::write(dir.path().join("not-a-pid"), "1").expect("write");
        assert_eq!(install(dir.path()).expect("install"), 0);
        assert_eq!(std::fs::read_dir(dir.path()).expect("dir").count(), 0);
    }
}
