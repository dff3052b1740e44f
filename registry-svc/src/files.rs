//! The YAML directory: atomic durable writes, deletes, scans, and content versions.

use std::{
    fs::{self, File},
    io::{self, Write},
    path::{Path, PathBuf},
    sync::atomic::{AtomicU64, Ordering},
};

use sha2::{Digest, Sha256};

pub use taskforce_runtime::yaml::{MAX_FLOW_DEPTH, YamlError, yaml};

/// The file extension of agent definitions.
pub const EXT: &str = "yaml";
/// Prefix of the temporary files of earlier versions, written beside the definitions; such files
/// are never read as definitions.
const TMP_PREFIX: &str = ".tmp-";
/// The directory, in the config root, where a write stages its file before renaming it into
/// place. The file watcher watches the definitions directories without their subdirectories, so
/// a write makes one event (the rename) instead of six (create, open, modify, close, and both
/// halves of the rename); the definitions directory holds definitions only; and the staged file
/// shares the definitions' file system.
pub const STAGING: &str = ".staging";
/// Largest definition file read (a system prompt of 256 Ki characters is at most 1 MiB of
/// UTF-8); a larger file is skipped with a diagnostic, without reading it all into memory.
pub const MAX_DEFINITION_BYTES: u64 = 2 * 1024 * 1024;

/// The bytes of `path`, or `Ok(None)` when it holds more than `max` (only `max + 1` are read).
pub fn read_at_most(path: &Path, max: u64) -> io::Result<Option<Vec<u8>>> {
    // Opening a named pipe would wait for a writer, holding the store's lock, and the watcher
    // would not see edits of a link's target (it would be served stale): the file is opened
    // without waiting and without following a link, and only a regular file is read. One
    // check, at the open itself, so nothing swapped in before it slips through.
    let bytes = taskforce_runtime::read_regular(path, max, false).map_err(|e| {
        // `O_NOFOLLOW` on a link answers ELOOP: say what it is.
        let link = e.raw_os_error() == Some(libc::ELOOP)
            && fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
        if link {
            plain_only(
                "not a regular file but a symbolic link; copy the file here instead of linking it",
            )
        } else if e.kind() == io::ErrorKind::InvalidInput {
            plain_only(&e.to_string())
        } else {
            e
        }
    })?;
    Ok((u64::try_from(bytes.len()).unwrap_or(u64::MAX) <= max).then_some(bytes))
}

/// The error of a definition that is `what` instead of a regular file.
fn plain_only(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("{what}; definitions are plain files"),
    )
}

/// The version of a definition: the first 16 hex digits of the SHA-256 of its file's bytes, so
/// any change, also by hand, gives a new version, and a rebuilt cache gives the same one.
pub fn version_of(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    hex::encode(&digest[..8])
}

/// When the file at `path` was created and last modified, RFC 3339 in UTC (the modification
/// time where the file system keeps no creation time; empty strings when it cannot be read).
pub fn times(path: &Path) -> (String, String) {
    let Ok(meta) = std::fs::metadata(path) else {
        return (String::new(), String::new());
    };
    let rfc3339 = |t: std::time::SystemTime| {
        chrono::DateTime::<chrono::Utc>::from(t).to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    };
    let modified = meta.modified().map(rfc3339).unwrap_or_default();
    let created = meta
        .created()
        .map(rfc3339)
        .unwrap_or_else(|_| modified.clone());
    (created, modified)
}

/// Writes `bytes` to `path` atomically and durably: a temp file in `staging` (made if missing),
/// fsync, rename over the target, fsync the directory. A crash leaves either the old or the new
/// file (and perhaps a staged file, removed by [`remove_stale_temp_files`]). When `staging`
/// cannot be used (a read-only config root, another file system than `path`'s), the temp file is
/// written beside `path` instead.
pub fn write_atomic(path: &Path, bytes: &[u8], staging: &Path) -> io::Result<()> {
    write_atomic_if(path, bytes, staging, || true).map(drop)
}

/// [`write_atomic`], but only if `unchanged()` still holds right before the rename (after the
/// fsync, the slow part): `Ok(false)`, with nothing written, when it does not. A hand edit that
/// lands while an API write is on its way to disk is then a conflict instead of being
/// overwritten; only one landing in the microseconds between that check and the rename can
/// still be.
pub fn write_atomic_if(
    path: &Path,
    bytes: &[u8],
    staging: &Path,
    unchanged: impl Fn() -> bool,
) -> io::Result<bool> {
    write_via(path, bytes, staging, &unchanged)
        .or_else(|_| write_via(path, bytes, parent(path)?, &unchanged))
}

/// A fresh temp name in `dir` for `path`'s file (ending in `suffix`), which the watcher and
/// the reconcile skip and [`remove_stale_temp_files`] cleans up after a crash.
fn temp_beside(path: &Path, dir: &Path, suffix: &str) -> PathBuf {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    dir.join(format!(
        "{TMP_PREFIX}{name}.{}.{}{suffix}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ))
}

fn write_via(
    path: &Path,
    bytes: &[u8],
    staging: &Path,
    unchanged: &dyn Fn() -> bool,
) -> io::Result<bool> {
    let dir = parent(path)?;
    let tmp = temp_beside(path, staging, "");
    let result = (|| {
        let mut f = match File::create(&tmp) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                fs::create_dir_all(staging)?;
                File::create(&tmp)?
            }
            other => other?,
        };
        f.write_all(bytes)?;
        f.sync_all()?;
        if !unchanged() {
            return Ok(false);
        }
        fs::rename(&tmp, path)?;
        sync_dir(dir).map(|()| true)
    })();
    if !matches!(result, Ok(true)) {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Removes `path` durably (fsyncs the directory).
pub fn remove_durable(path: &Path) -> io::Result<()> {
    fs::remove_file(path)?;
    sync_dir(parent(path)?)
}

/// Removes `path` durably, but only if it still holds `expected`: `Ok(false)`, the file left
/// in place, when it does not. The file is first moved aside (one atomic rename, to a temp name
/// beside it) and compared there, so a hand edit that landed before the move is put back, and
/// one landing after it makes a new file that the removal does not touch: no edit is lost to a
/// delete. (An update's [`write_atomic_if`] still has an instant between its check and its
/// rename.)
pub fn remove_durable_if(path: &Path, expected: &[u8]) -> io::Result<bool> {
    let dir = parent(path)?;
    let aside = temp_beside(path, dir, ".removed");
    fs::rename(path, &aside)?;
    // Read whole only when it has the expected length (the caller's bounded read).
    let compared = fs::metadata(&aside)
        .and_then(|m| Ok(m.len() == expected.len() as u64 && fs::read(&aside)? == expected));
    let same = compared.as_ref().is_ok_and(|same| *same);
    if !same {
        // Back under its name, unless a newer file has taken it meanwhile (that one wins).
        match fs::hard_link(&aside, path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            // A file system without hard links: put it back by renaming.
            Err(_) => {
                fs::rename(&aside, path)?;
                sync_dir(dir)?;
                return Ok(false);
            }
        }
    }
    fs::remove_file(&aside)?;
    sync_dir(dir)?;
    compared.map(|_| same)
}

fn parent(path: &Path) -> io::Result<&Path> {
    path.parent()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "path has no parent directory"))
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Removes temp files left behind by a crash mid-write, in `dir` (where earlier versions and
/// the cross-device fallback of [`write_atomic`] write them) and in `staging`.
pub fn remove_stale_temp_files(dir: &Path, staging: &Path) -> io::Result<usize> {
    let mut n = 0;
    for dir in [dir, staging] {
        let entries = match fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        for entry in entries {
            let entry = entry?;
            if entry.file_name().to_string_lossy().starts_with(TMP_PREFIX) {
                fs::remove_file(entry.path())?;
                n += 1;
            }
        }
    }
    Ok(n)
}

/// The `*.yaml` files directly in `dir` (hidden and temp files excluded), sorted.
/// Entries that are not regular files (links, pipes, directories) are listed too: reading one
/// is refused with a diagnostic ([`read_at_most`]) rather than skipped without a word.
pub fn yaml_files(dir: &Path) -> io::Result<Vec<PathBuf>> {
    files_where(dir, is_definition_file, true)
}

/// The `*.yml` files directly in `dir` (not hidden), sorted: definitions under the wrong
/// extension, which are not read.
pub fn misnamed_files(dir: &Path) -> io::Result<Vec<PathBuf>> {
    files_where(dir, is_misnamed, false)
}

/// The definition files (`*.yaml`, `*.yml`) in the subdirectories directly in `dir` (neither
/// hidden), sorted: agent files moved where they are not read. A subdirectory that cannot be
/// read (a volume's `lost+found`) is passed over: it holds nothing this could say.
pub fn nested_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(rd) = fs::read_dir(dir) else {
        return out;
    };
    for entry in rd.flatten() {
        let hidden = entry
            .file_name()
            .to_str()
            .is_none_or(|n| n.starts_with('.'));
        if hidden || !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let sub = entry.path();
        for wanted in [is_definition_file as fn(&Path) -> bool, is_misnamed] {
            out.extend(files_where(&sub, wanted, false).unwrap_or_default());
        }
    }
    out.sort();
    out
}

/// Whether `path` names a definition under the wrong extension (`*.yml`, `*.YAML`, ..., not
/// hidden).
pub fn is_misnamed(path: &Path) -> bool {
    // `.yml`, and `.YAML`, `.Yml`, ... (saved so on Windows or macOS, whose file systems do
    // not tell the cases apart).
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e != EXT && (e.eq_ignore_ascii_case(EXT) || e.eq_ignore_ascii_case("yml")))
        && path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| !n.starts_with('.'))
}

/// The regular files directly in `dir` that `wanted` picks, sorted (none when `dir` is missing).
fn files_where(
    dir: &Path,
    wanted: impl Fn(&Path) -> bool,
    any_type: bool,
) -> io::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    match fs::read_dir(dir) {
        Ok(rd) => {
            for entry in rd {
                let entry = entry?;
                let path = entry.path();
                if wanted(&path) && (any_type || entry.file_type()?.is_file()) {
                    out.push(path);
                }
            }
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    out.sort();
    Ok(out)
}

/// True for `name.yaml` that is not hidden or temporary.
pub fn is_definition_file(path: &Path) -> bool {
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
        return false;
    };
    !name.starts_with('.') && path.extension().is_some_and(|e| e == EXT)
}

/// The file stem, which is the agent id.
pub fn stem(path: &Path) -> Option<&str> {
    path.file_stem().and_then(|s| s.to_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_whose_file_changed_meanwhile_writes_nothing() -> io::Result<()> {
        let root = tempfile::tempdir()?;
        let (p, staging) = (root.path().join("a.yaml"), root.path().join(STAGING));
        write_atomic(&p, b"hand edit", &staging)?;
        assert!(!write_atomic_if(&p, b"api write", &staging, || false)?);
        assert_eq!(fs::read(&p)?, b"hand edit");
        assert_eq!(fs::read_dir(&staging)?.count(), 0, "no staged file is left");
        assert!(write_atomic_if(&p, b"api write", &staging, || true)?);
        assert_eq!(fs::read(&p)?, b"api write");
        Ok(())
    }

    #[test]
    fn a_delete_removes_only_the_content_it_expected_and_leaves_no_temp_file() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("a.yaml");
        fs::write(&path, b"name: old\n")?;
        // Changed by hand since it was read: kept as it is.
        fs::write(&path, b"name: edited\n")?;
        assert!(!remove_durable_if(&path, b"name: old\n")?);
        assert_eq!(fs::read(&path)?, b"name: edited\n");
        // Same length, other bytes: kept too.
        fs::write(&path, b"name: olt\n")?;
        assert!(!remove_durable_if(&path, b"name: old\n")?);
        assert_eq!(fs::read(&path)?, b"name: olt\n");
        // As read: removed.
        assert!(remove_durable_if(&path, b"name: olt\n")?);
        assert!(!path.exists());
        assert_eq!(fs::read_dir(dir.path())?.count(), 0, "no temp file left");
        // Gone already: NotFound, as for a plain removal.
        let missing = remove_durable_if(&path, b"x").expect_err("missing");
        assert_eq!(missing.kind(), io::ErrorKind::NotFound);
        Ok(())
    }

    #[test]
    fn atomic_write_replaces_content_and_leaves_no_temp_file() -> io::Result<()> {
        let root = tempfile::tempdir()?;
        let (dir, staging) = (root.path().join("custom"), root.path().join(STAGING));
        fs::create_dir(&dir)?;
        let p = dir.join("abc.yaml");
        write_atomic(&p, b"one", &staging)?;
        write_atomic(&p, b"two", &staging)?;
        assert_eq!(fs::read(&p)?, b"two");
        let entries: Vec<_> = fs::read_dir(&dir)?
            .map(|e| e.map(|e| e.file_name()))
            .collect::<io::Result<_>>()?;
        assert_eq!(
            entries,
            ["abc.yaml"],
            "the definitions directory holds definitions only"
        );
        assert_eq!(fs::read_dir(&staging)?.count(), 0);
        assert_eq!(remove_stale_temp_files(&dir, &staging)?, 0);
        Ok(())
    }

    #[test]
    fn a_staging_directory_that_cannot_be_used_falls_back_to_beside_the_target() -> io::Result<()> {
        let root = tempfile::tempdir()?;
        let dir = root.path().join("custom");
        fs::create_dir(&dir)?;
        let not_a_dir = root.path().join("file");
        fs::write(&not_a_dir, b"")?;
        let p = dir.join("abc.yaml");
        write_atomic(&p, b"one", &not_a_dir.join(STAGING))?;
        assert_eq!(fs::read(&p)?, b"one");
        assert_eq!(
            fs::read_dir(&dir)?.count(),
            1,
            "no temp file left beside it"
        );
        Ok(())
    }

    #[test]
    fn temp_files_of_interrupted_writes_are_removed() -> io::Result<()> {
        let root = tempfile::tempdir()?;
        let (dir, staging) = (root.path().join("custom"), root.path().join(STAGING));
        fs::create_dir(&dir)?;
        assert_eq!(
            remove_stale_temp_files(&dir, &staging)?,
            0,
            "no staging directory yet"
        );
        fs::create_dir(&staging)?;
        fs::write(staging.join(format!("{TMP_PREFIX}a.yaml.1.0")), b"half")?;
        fs::write(dir.join(format!("{TMP_PREFIX}b.yaml.1.0")), b"half")?;
        fs::write(dir.join("c.yaml"), b"kept")?;
        assert_eq!(remove_stale_temp_files(&dir, &staging)?, 2);
        assert_eq!(yaml_files(&dir)?, vec![dir.join("c.yaml")]);
        assert_eq!(fs::read_dir(&staging)?.count(), 0);
        Ok(())
    }

    #[test]
    fn reads_stop_past_the_cap() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let p = dir.path().join("a.yaml");
        fs::write(&p, vec![b'x'; 11])?;
        assert_eq!(read_at_most(&p, 11)?.map(|b| b.len()), Some(11));
        assert_eq!(read_at_most(&p, 10)?, None);
        Ok(())
    }

    #[test]
    fn version_changes_with_content_only() {
        assert_eq!(version_of(b"a"), version_of(b"a"));
        assert_ne!(version_of(b"a"), version_of(b"b"));
        assert_eq!(version_of(b"a").len(), 16);
    }

    #[test]
    fn hidden_and_temp_files_are_not_definitions() {
        assert!(is_definition_file(Path::new("/x/abc.yaml")));
        assert!(!is_definition_file(Path::new("/x/.hidden.yaml")));
        assert!(!is_definition_file(Path::new("/x/.tmp-abc.yaml.1.2")));
        assert!(!is_definition_file(Path::new("/x/abc.yml.bak")));
    }
}
