//! Opening a sled store with the log segment size it was made with, and moving the executor's
//! session store to larger segments.
//!
//! sled writes its log in segments and keeps a value (or a whole tree leaf, up to 16 entries)
//! larger than a quarter of a segment as a file of its own (a "blob"). A blob that a newer
//! version replaced is deleted only once the log segment holding the replacement is full, and
//! with blobs the log itself grows by a few bytes per write: with sled's default segment of
//! 512 KiB, sessions of a few hundred KB made the executor's store grow by about 2 MB a run
//! without end. With 8 MiB segments a leaf of up to 2 MiB stays in
//! the log, where sled reclaims its space, and larger ones are let go as segments fill: 60-66 MB
//! of such sessions took 185-303 MB of files over 3,600 runs (`bench --session-store`). The
//! registry's cache stays small with the default segments (and larger with 8 MiB ones), so it
//! keeps them.

use std::{
    ffi::OsString,
    fs,
    path::{Path, PathBuf},
};

/// The bytes a store holds, kept current as its values are written and removed.
#[derive(Debug, Default)]
pub struct StoredBytes(std::sync::atomic::AtomicU64);

impl StoredBytes {
    /// A value of `old` bytes became one of `new` (0 for none: an insert, a removal).
    /// Saturating: a total counted while the store changed under the count never wraps.
    pub fn replaced(&self, old: u64, new: u64) {
        let _ = self.0.fetch_update(
            std::sync::atomic::Ordering::Relaxed,
            std::sync::atomic::Ordering::Relaxed,
            |b| Some(b.saturating_sub(old).saturating_add(new)),
        );
    }

    /// Sets the total (from a scan of the store).
    pub fn set(&self, total: u64) {
        self.0.store(total, std::sync::atomic::Ordering::Relaxed);
    }

    /// The total.
    pub fn get(&self) -> u64 {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// sled's log segment size for the session store (a power of two): see the module's doc.
pub const SEGMENT_BYTES: usize = 8 * 1024 * 1024;

/// sled's default log segment size.
pub const DEFAULT_SEGMENT_BYTES: usize = 512 * 1024;

/// sled's configuration for the store at `path`: segments of `segment_bytes` (a power of two)
/// for a new store, of the size it was made with for an existing one (sled refuses to open it
/// with any other).
pub fn sled_config(path: &Path, segment_bytes: usize) -> sled::Config {
    sled::Config::new()
        .path(path)
        .segment_size(persisted_segment_size(path).unwrap_or(segment_bytes))
}

/// The segment size the store at `path` was made with (`None`: no store there yet, or its
/// settings cannot be read).
fn persisted_segment_size(path: &Path) -> Option<usize> {
    // Text lines, then a checksum.
    String::from_utf8_lossy(&fs::read(path.join("conf")).ok()?)
        .lines()
        .find_map(|line| line.strip_prefix("segment_size: "))
        .and_then(|v| v.trim().parse().ok())
}

/// `path` with `suffix` appended to its last component.
fn beside(path: &Path, suffix: &str) -> PathBuf {
    let mut name = OsString::from(path.as_os_str());
    name.push(suffix);
    PathBuf::from(name)
}

/// Moves the store at `path` to [`SEGMENT_BYTES`] segments when it was made with others (by an
/// earlier version): every tree is copied into a new store beside it, which then takes its
/// place. Returns whether it did. Also finishes or undoes a move a crash interrupted: a copy
/// not yet in place is dropped, the old store put back if it was already moved aside. Blocking;
/// call before opening the store. On an error the store is left as it was (open it with
/// [`sled_config`], which keeps its segment size).
pub fn upgrade_segments(
    path: &Path,
    configure: impl Fn(sled::Config) -> sled::Config,
) -> Result<bool, String> {
    let copy = beside(path, ".resegmenting");
    let old = beside(path, ".before-resegmenting");
    let say = |what: &str, p: &Path, e: std::io::Error| format!("{what} {}: {e}", p.display());
    if !path.exists() && old.exists() {
        // Moved aside, the copy not yet in place: the copy may be incomplete, the old is whole.
        fs::rename(&old, path).map_err(|e| say("putting back", &old, e))?;
    }
    if copy.exists() {
        fs::remove_dir_all(&copy).map_err(|e| say("removing", &copy, e))?;
    }
    if old.exists() {
        // The copy is in place: the old store is no longer needed.
        fs::remove_dir_all(&old).map_err(|e| say("removing", &old, e))?;
    }
    let Some(segment) = persisted_segment_size(path).filter(|s| *s != SEGMENT_BYTES) else {
        return Ok(false);
    };
    let before = dir_bytes(path);
    let copied =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| -> Result<(), String> {
            let from =
                crate::open_waiting_for_lock(|| configure(sled_config(path, SEGMENT_BYTES)).open())
                    .map_err(|e| format!("opening {}: {e}", path.display()))?;
            let to = configure(sled::Config::new().path(&copy).segment_size(SEGMENT_BYTES))
                .open()
                .map_err(|e| format!("making {}: {e}", copy.display()))?;
            // `import` panics on a write that fails (a full disk): caught below.
            to.import(from.export());
            to.flush()
                .map_err(|e| format!("writing {}: {e}", copy.display()))?;
            Ok(())
        }))
        .unwrap_or_else(|_| Err("the copy failed (is the disk full?)".to_owned()));
    if let Err(e) = copied {
        let _ = fs::remove_dir_all(&copy);
        return Err(e);
    }
    fs::rename(path, &old).map_err(|e| say("moving aside", path, e))?;
    fs::rename(&copy, path).map_err(|e| say("moving in place", &copy, e))?;
    if let Some(parent) = path.parent() {
        let _ = fs::File::open(parent).and_then(|d| d.sync_all());
    }
    let _ = fs::remove_dir_all(&old);
    tracing::info!(
        store = %path.display(),
        from_segment_bytes = segment,
        to_segment_bytes = SEGMENT_BYTES,
        bytes_before = before,
        bytes_after = dir_bytes(path),
        "moved the store to larger log segments, so replaced values no longer pile up on disk"
    );
    Ok(true)
}

/// The bytes of the files under `dir` (0 for what cannot be read).
pub fn dir_bytes(dir: &Path) -> u64 {
    fs::read_dir(dir).map_or(0, |entries| {
        entries
            .filter_map(Result::ok)
            .map(|e| match e.file_type() {
                Ok(t) if t.is_dir() => dir_bytes(&e.path()),
                Ok(_) => e.metadata().map_or(0, |m| m.len()),
                Err(_) => 0,
            })
            .sum()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn old_store(path: &Path) -> sled::Db {
        sled::Config::new()
            .path(path)
            .segment_size(DEFAULT_SEGMENT_BYTES)
            .open()
            .expect("open")
    }

    #[test]
    fn a_store_with_small_segments_is_moved_to_large_ones_with_every_tree() {
        let dir = tempfile::TempDir::new().expect("tmp");
        let path = dir.path().join("s.sled");
        {
            let db = old_store(&path);
            db.insert("top", "level").expect("insert");
            let tree = db.open_tree("sessions").expect("tree");
            for i in 0..300u32 {
                tree.insert(i.to_be_bytes(), vec![7u8; 300_000 * (i as usize % 2)])
                    .expect("insert");
            }
            db.flush().expect("flush");
        }
        assert_eq!(persisted_segment_size(&path), Some(DEFAULT_SEGMENT_BYTES));
        assert_eq!(upgrade_segments(&path, |c| c), Ok(true));
        assert_eq!(persisted_segment_size(&path), Some(SEGMENT_BYTES));
        assert!(!beside(&path, ".resegmenting").exists());
        assert!(!beside(&path, ".before-resegmenting").exists());
        let db = sled_config(&path, SEGMENT_BYTES)
            .open()
            .expect("opens with the new size");
        assert_eq!(db.get("top").expect("get").as_deref(), Some(&b"level"[..]));
        let tree = db.open_tree("sessions").expect("tree");
        assert_eq!(tree.len(), 300);
        assert_eq!(
            tree.get(3u32.to_be_bytes()).expect("get").map(|v| v.len()),
            Some(300_000)
        );
        drop(db);
        assert_eq!(upgrade_segments(&path, |c| c), Ok(false), "once only");
    }

    #[test]
    fn a_move_a_crash_interrupted_is_undone_or_finished() {
        let dir = tempfile::TempDir::new().expect("tmp");
        let path = dir.path().join("s.sled");
        drop(old_store(&path));
        // Moved aside, the copy (here: garbage) not yet in place: the old one comes back.
        fs::rename(&path, beside(&path, ".before-resegmenting")).expect("aside");
        fs::create_dir_all(beside(&path, ".resegmenting")).expect("copy");
        fs::write(beside(&path, ".resegmenting").join("db"), b"half").expect("write");
        assert_eq!(upgrade_segments(&path, |c| c), Ok(true));
        assert_eq!(persisted_segment_size(&path), Some(SEGMENT_BYTES));
        // A new store: nothing to move.
        let fresh = dir.path().join("new.sled");
        assert_eq!(upgrade_segments(&fresh, |c| c), Ok(false));
        drop(sled_config(&fresh, SEGMENT_BYTES).open().expect("open"));
        assert_eq!(persisted_segment_size(&fresh), Some(SEGMENT_BYTES));
    }
}
