//! Keeping paths inside the agent's workspace.
//!
//! A path from the model is taken relative to the workspace (an absolute path must already lie
//! inside it), normalised lexically with no step above the root, then resolved on disk: the
//! nearest existing ancestor is canonicalised (following symlinks) and must still be inside the
//! canonical workspace. Writes never follow a symlink that leaves it. The open itself is then
//! made relative to the workspace with `openat2(RESOLVE_BENEATH)` ([`open_beneath`]), so a
//! concurrent process (say, the agent's own `python`) that swaps a directory for a symlink
//! between the check and the open cannot redirect it: the kernel refuses a path that leaves
//! the workspace at the moment of the open.

use std::{
    io,
    path::{Component, Path, PathBuf},
};

use crate::tools::{ToolError, Workspace};

use super::failed;

/// Turns between the tools that write a workspace without running the model's own programs
/// (`file_write`, `git`), so that what `git` checks before it runs (the repository's
/// configuration) is what it runs with: the calls of one turn run concurrently, and a
/// `file_write` of `.git/config` landing between the check and the call would undo it.
/// One lock per workspace, striped: two workspaces may share one, which only costs a wait.
#[derive(Debug)]
pub(crate) struct WriteTurns {
    stripes: [std::sync::Arc<tokio::sync::Mutex<()>>; 32],
}

impl Default for WriteTurns {
    fn default() -> Self {
        Self {
            stripes: std::array::from_fn(|_| std::sync::Arc::default()),
        }
    }
}

impl WriteTurns {
    /// Waits for the turn of the workspace at `root` (canonical); it lasts as long as the guard.
    pub(crate) async fn take(&self, root: &Path) -> tokio::sync::OwnedMutexGuard<()> {
        use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
        let hash = BuildHasherDefault::<DefaultHasher>::default().hash_one(root);
        let stripe = usize::try_from(hash % self.stripes.len() as u64).unwrap_or_default();
        self.stripes[stripe].clone().lock_owned().await
    }
}

/// The canonical workspace root, created if missing (once per run, see [`Workspace`]).
pub(crate) async fn root(tool: &str, workspace: &Workspace) -> Result<PathBuf, ToolError> {
    if let Some(root) = workspace.resolved() {
        return Ok(root.clone());
    }
    let (owned_tool, workspace) = (tool.to_owned(), workspace.clone());
    super::blocking(tool, move || root_blocking(&owned_tool, &workspace)).await
}

/// [`root`], on this thread.
pub(crate) fn root_blocking(tool: &str, workspace: &Workspace) -> Result<PathBuf, ToolError> {
    if let Some(root) = workspace.resolved() {
        return Ok(root.clone());
    }
    if workspace.as_os_str().is_empty() {
        return Err(failed(tool, "the agent has no workspace"));
    }
    let unusable =
        |e: std::io::Error| failed(tool, format!("workspace {}: {e}", workspace.display()));
    // Made only when missing: after a run's first, the directory is there, and a `mkdir` per
    // run would be a system call (and a failure) for nothing.
    let root = match std::fs::canonicalize(&**workspace) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(&**workspace).map_err(unusable)?;
            std::fs::canonicalize(&**workspace).map_err(unusable)?
        }
        resolved => resolved.map_err(unusable)?,
    };
    if !std::fs::metadata(&root).map_err(unusable)?.is_dir() {
        return Err(failed(
            tool,
            format!("workspace {}: not a directory", workspace.display()),
        ));
    }
    // As the sandbox's launcher refuses a program whose workspace holds a hidden path, so do
    // the tools that work in this process (`file_read`, `file_write`). The hidden paths are
    // canonical already (made so once, when the executor starts); the agent's default
    // workspace is, when it is this one.
    let own = workspace.own().map(|own| {
        if own == &**workspace {
            root.clone()
        } else {
            std::fs::canonicalize(own).unwrap_or_else(|_| own.to_path_buf())
        }
    });
    // Nor one inside a hidden path (`<data dir>/workspaces`, its ledger, its temp dirs), but
    // the agent's own default workspace there.
    if let Some(inside) = workspace
        .hidden()
        .iter()
        .find(|h| root.starts_with(h) && own.as_ref().is_none_or(|o| !root.starts_with(o)))
    {
        return Err(failed(
            tool,
            format!(
                "the workspace {} is inside {}, which the tools may not read or write; give the \
                 agent a workspace outside it (or none: its own is made there)",
                root.display(),
                inside.display()
            ),
        ));
    }
    if let Some(held) = workspace.hidden().iter().find(|h| h.starts_with(&root)) {
        return Err(failed(
            tool,
            format!(
                "the workspace {} holds {}, which the tools may not read or write; give the \
                 agent a workspace that does not contain it",
                root.display(),
                held.display()
            ),
        ));
    }
    workspace.set_resolved(&root);
    Ok(root)
}

/// `given` as a path below `root`, lexically: `..` may not climb above the root, and an absolute
/// path must start with the workspace (as configured or canonical).
pub(crate) fn lexical(
    tool: &str,
    workspace: &Path,
    root: &Path,
    given: &str,
) -> Result<PathBuf, ToolError> {
    let outside = || ToolError::OutsideWorkspace {
        tool: tool.to_owned(),
        path: given.to_owned(),
    };
    if given.trim().is_empty() || given.contains('\0') {
        let why = if given.contains('\0') {
            "`path` contains a NUL byte, which no path can hold"
        } else {
            "`path` must be a non-empty path"
        };
        return Err(ToolError::InvalidArguments {
            tool: tool.to_owned(),
            reason: why.to_owned(),
        });
    }
    let p = Path::new(given);
    let rel = if p.is_absolute() {
        p.strip_prefix(root)
            .or_else(|_| p.strip_prefix(workspace))
            .map_err(|_| outside())?
    } else {
        p
    };
    let mut parts: Vec<&std::ffi::OsStr> = Vec::new();
    for c in rel.components() {
        match c {
            Component::Normal(s) => parts.push(s),
            Component::CurDir => {}
            Component::ParentDir => {
                parts.pop().ok_or_else(outside)?;
            }
            Component::RootDir | Component::Prefix(_) => return Err(outside()),
        }
    }
    Ok(parts.iter().fold(root.to_path_buf(), |acc, s| acc.join(s)))
}

/// Opens `real` (already resolved inside `root`) relative to `root`, the kernel refusing any
/// path that leaves `root` at the moment of the open (`openat2` with `RESOLVE_BENEATH`; on a
/// kernel older than 5.6 without it, a plain open). Blocking.
pub(crate) fn open_beneath(
    tool: &str,
    root: &Path,
    real: &Path,
    given: &str,
    flags: nix::fcntl::OFlag,
) -> Result<std::fs::File, ToolError> {
    use nix::{
        errno::Errno,
        fcntl::{OFlag, OpenHow, ResolveFlag, openat2},
        sys::stat::Mode,
    };
    let outside = || ToolError::OutsideWorkspace {
        tool: tool.to_owned(),
        path: given.to_owned(),
    };
    let relative = real.strip_prefix(root).map_err(|_| outside())?;
    let relative = if relative.as_os_str().is_empty() {
        Path::new(".")
    } else {
        relative
    };
    let dir = std::fs::File::open(root).map_err(|e| failed(tool, format!("{given}: {e}")))?;
    let mut how = OpenHow::new()
        .flags(flags | OFlag::O_CLOEXEC)
        .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    if flags.contains(OFlag::O_CREAT) {
        // openat2 refuses a mode without O_CREAT.
        how = how.mode(Mode::from_bits_truncate(0o644));
    }
    match openat2(&dir, relative, how) {
        Ok(fd) => Ok(std::fs::File::from(fd)),
        Err(Errno::EXDEV) => Err(outside()),
        Err(Errno::ENOSYS) => {
            let mut options = std::fs::OpenOptions::new();
            std::os::unix::fs::OpenOptionsExt::custom_flags(&mut options, flags.bits());
            options
                .read(!flags.contains(OFlag::O_WRONLY))
                .write(flags.contains(OFlag::O_WRONLY))
                .open(real)
                .map_err(|e| failed(tool, format!("{given}: {e}")))
        }
        Err(e) => Err(failed(tool, format!("{given}: {}", io::Error::from(e)))),
    }
}

/// A path to read: it must exist and resolve (through any symlinks) inside `root`. Blocking.
pub(crate) fn resolve_existing(
    tool: &str,
    root: &Path,
    candidate: &Path,
    given: &str,
) -> Result<PathBuf, ToolError> {
    let real = match std::fs::canonicalize(candidate) {
        Ok(p) => p,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            // A dangling symlink is reported as missing, whatever it points to.
            return Err(failed(
                tool,
                format!("{given}: no such file in the workspace"),
            ));
        }
        Err(e) => return Err(failed(tool, format!("{given}: {e}"))),
    };
    if !real.starts_with(root) {
        return Err(ToolError::OutsideWorkspace {
            tool: tool.to_owned(),
            path: given.to_owned(),
        });
    }
    Ok(real)
}

/// A path to write: its parent directories are created inside `root`, and the target (if it is
/// a symlink) must resolve inside `root`; returns the real path to open. Blocking.
pub(crate) fn resolve_for_write(
    tool: &str,
    root: &Path,
    candidate: &Path,
    given: &str,
) -> Result<PathBuf, ToolError> {
    let outside = || ToolError::OutsideWorkspace {
        tool: tool.to_owned(),
        path: given.to_owned(),
    };
    let (Some(parent), Some(name)) = (candidate.parent(), candidate.file_name()) else {
        return Err(failed(tool, format!("{given}: not a file path")));
    };
    if candidate == root {
        return Err(failed(tool, format!("{given}: is the workspace directory")));
    }
    // The nearest existing ancestor must resolve inside the root before anything is created.
    let mut existing = parent;
    while std::fs::symlink_metadata(existing).is_err() {
        existing = existing.parent().ok_or_else(outside)?;
    }
    let real_existing =
        std::fs::canonicalize(existing).map_err(|e| failed(tool, format!("{given}: {e}")))?;
    if !real_existing.starts_with(root) {
        return Err(outside());
    }
    std::fs::create_dir_all(parent)
        .map_err(|e| failed(tool, format!("{given}: cannot create its directory: {e}")))?;
    let real_parent =
        std::fs::canonicalize(parent).map_err(|e| failed(tool, format!("{given}: {e}")))?;
    if !real_parent.starts_with(root) {
        return Err(outside());
    }
    let mut target = real_parent.join(name);
    if std::fs::symlink_metadata(&target).is_ok_and(|m| m.file_type().is_symlink()) {
        // Follow a link only when it lands inside; a dangling one would create its target
        // wherever it points, so it is refused too.
        target = match std::fs::canonicalize(&target) {
            Ok(real) if real.starts_with(root) => real,
            _ => return Err(outside()),
        };
    }
    match std::fs::metadata(&target) {
        Ok(meta) if meta.is_dir() => Err(failed(tool, format!("{given}: is a directory"))),
        // A FIFO or device would block the write or do something else entirely.
        Ok(meta) if !meta.is_file() => Err(failed(tool, format!("{given}: not a regular file"))),
        _ => Ok(target),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lex(given: &str) -> Result<PathBuf, ToolError> {
        lexical("t", Path::new("/ws"), Path::new("/real/ws"), given)
    }

    #[test]
    fn relative_paths_are_joined_and_normalised() {
        assert_eq!(
            lex("a/./b/../c.txt").ok(),
            Some(PathBuf::from("/real/ws/a/c.txt"))
        );
        assert_eq!(lex("/ws/x").ok(), Some(PathBuf::from("/real/ws/x")));
        assert_eq!(lex("/real/ws/y").ok(), Some(PathBuf::from("/real/ws/y")));
    }

    #[test]
    fn escapes_are_refused() {
        for p in ["../x", "a/../../x", "/etc/passwd", "/wsx/a"] {
            assert!(
                matches!(lex(p), Err(ToolError::OutsideWorkspace { .. })),
                "{p}"
            );
        }
        assert!(matches!(lex(""), Err(ToolError::InvalidArguments { .. })));
    }

    #[tokio::test]
    async fn a_workspace_is_written_by_one_tool_at_a_time() {
        let turns = WriteTurns::default();
        let held = turns.take(Path::new("/ws/a")).await;
        let wait = std::time::Duration::from_millis(50);
        assert!(
            tokio::time::timeout(wait, turns.take(Path::new("/ws/a")))
                .await
                .is_err(),
            "a second turn while the first is held"
        );
        drop(held);
        let again = tokio::time::timeout(wait * 20, turns.take(Path::new("/ws/a"))).await;
        assert!(again.is_ok(), "the turn never came back");
    }

    /// The workspace is made when missing, found when there, refused when it is a file, inside
    /// a hidden path (but for the agent's own) or holding one; hidden paths given through a
    /// symbolic link are compared as `canonical_paths` made them.
    #[test]
    fn a_workspace_is_resolved_made_and_checked() {
        use crate::tools::{Workspace, canonical_paths};
        let tmp = tempfile::tempdir().expect("tmp");
        let data = tmp.path().join("data");
        std::fs::create_dir_all(data.join("workspaces")).expect("data");
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&data, &link).expect("link");
        // The data directory as the executor was told it: through the link.
        let hidden = canonical_paths(vec![link.clone()]);
        let real = std::fs::canonicalize(&data).expect("real");
        assert_eq!(&*hidden, std::slice::from_ref(&real));
        let own = link.join("workspaces/a");
        let at = |path: &Path| Workspace::new(path).hiding(hidden.clone(), own.clone());

        // The agent's own, made at its first use, and found (not made) at the next.
        let root = root_blocking("t", &at(&own)).expect("own workspace");
        assert_eq!(root, real.join("workspaces/a"));
        assert!(root.is_dir());
        assert_eq!(root_blocking("t", &at(&own)).ok(), Some(root));

        let message = |path: &Path| match root_blocking("t", &at(path)) {
            Err(ToolError::Failed { reason, .. }) => reason,
            other => panic!("{}: {other:?}", path.display()),
        };
        // Another agent's, inside the data directory.
        assert!(
            message(&link.join("workspaces")).contains("is inside"),
            "inside"
        );
        // One holding the data directory, named by its real path.
        let holds = message(tmp.path());
        assert!(
            holds.contains("holds") && holds.contains(&*real.to_string_lossy()),
            "{holds}"
        );
        // A file where the workspace should be.
        let file = tmp.path().join("file");
        std::fs::write(&file, "x").expect("file");
        assert!(message(&file).contains("not a directory"));
    }
}
