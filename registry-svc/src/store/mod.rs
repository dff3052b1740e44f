//! The agent store: YAML files are the source of truth, sled is the cache and index.
//!
//! Every mutation (API writes, watcher events, periodic reconciles) runs under one write lock,
//! so the cache always moves from one file state to the next. Methods are blocking: call them
//! from `spawn_blocking` (reads are sub-millisecond sled lookups and may run inline).
//!
//! # Layout
//! - this file: the store, opening (or rebuilding) sled, the trees.
//! - [`read`]: one agent, pages of agents and their tokens, sub-agent checks.
//! - [`write`]: create, update and delete custom agents, with version checks.
//! - [`facts`]: what the executors report (BUSY with a lease, last task).
//! - [`reconcile`]: bringing the cache in line with the files, and the diagnostics.
//! - [`changes`]: revisions, the change broadcast and snapshots for watchers.
//! - [`workspaces`]: one workspace id per agent, also when a file was copied from another's.

mod changes;
mod facts;
mod read;
mod reconcile;
mod workspaces;
mod write;

use std::{
    collections::BTreeMap,
    fs,
    path::{Path, PathBuf},
    sync::{
        Mutex,
        atomic::{AtomicU64, Ordering},
    },
};

use prost::Message;
use taskforce_proto::{
    error::{ApiError, ErrorKind},
    v1::{self, AgentSource},
};
use taskforce_runtime::now_ms;
use tokio::sync::broadcast;
use tracing::warn;

use crate::{
    error::{RegistryError, Result},
    files,
};

pub use changes::Snapshot;
use facts::{RuntimeFacts, load_facts};

/// Default and largest page sizes of `list`.
pub const DEFAULT_PAGE: usize = 100;
/// Largest page size of `list`.
pub const MAX_PAGE: usize = 1000;
/// Most bytes of agents in one page of `list`: large agents make a page shorter than its size
/// (a client follows `next_page_token` either way), so a page always fits the clients' 64 MiB
/// decoding limit, also when the custom agents' quota is larger than that.
pub const MAX_PAGE_BYTES: usize = 16 * 1024 * 1024;

/// What a full reconcile did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ReconcileStats {
    /// Files looked at.
    pub files: usize,
    /// Cache entries added or replaced.
    pub updated: usize,
    /// Cache entries dropped.
    pub removed: usize,
    /// Files skipped as invalid.
    pub invalid: usize,
    /// Files not read: their metadata showed no change since they were last read.
    pub unchanged: usize,
}

/// The store. Cheap to share behind an `Arc`.
pub struct Store {
    root: PathBuf,
    custom_dir: PathBuf,
    db: sled::Db,
    custom: sled::Tree,
    profile: sled::Tree,
    /// Runtime facts by agent id (status, last task): not in YAML, survive restarts.
    runtime: sled::Tree,
    /// The runtime facts in memory, so reads never touch the runtime tree.
    facts: std::sync::RwLock<std::collections::HashMap<String, RuntimeFacts>>,
    /// Held by every write and reconcile; it guards what each file looked like when it was last
    /// read (see [`reconcile::Stamp`]), which only reconciles read and change.
    write_lock: Mutex<reconcile::Stamps>,
    diagnostics: Mutex<BTreeMap<String, String>>,
    /// The times (created, updated) a custom agent was served with before its file turned
    /// invalid (a broken save, a slow write seen half-way), by id: when the file is fixed, its
    /// `updated_at` moves on from these and its `created_at` stays, as after any hand edit.
    /// Memory only; gone with the file.
    times_before_invalid: Mutex<std::collections::HashMap<String, (String, String)>>,
    /// Which custom agent is served with which workspace id; changed only under the write lock.
    workspaces: Mutex<workspaces::Workspaces>,
    /// How long after its last change a file is too fresh to be stamped.
    racy: std::time::Duration,
    changes: broadcast::Sender<v1::AgentChange>,
    /// The revision of the latest change (see [`v1::AgentChange::revision`]); written under
    /// the write lock.
    revision: AtomicU64,
    /// Bytes of the cached custom agents (their encoded definitions), and the most API writes
    /// may grow them to (0: no limit).
    custom_bytes: taskforce_runtime::store::StoredBytes,
    max_custom_bytes: AtomicU64,
    /// Set when the cache failed to write: sled refuses every write after its first I/O error
    /// (a full disk), so the store refuses API writes and the service reports NOT_SERVING until
    /// it is restarted (and rebuilds the cache from the files).
    fault: taskforce_runtime::Fault,
    /// The lock on the config directory ([`lock_config_dir`]), held as long as the store.
    _config_lock: fs::File,
}

impl Store {
    /// Opens (or rebuilds) the cache at `data_dir` for the config directory `root`. The cache
    /// may be stale until [`Store::reconcile_all`] runs; the caller starts the file watcher
    /// first, so that no edit falls between the reconcile and the watch.
    pub fn open(root: &Path, data_dir: &Path) -> Result<Self> {
        if !root.exists() {
            // A new volume starts empty; a mistyped path looks the same, so say so.
            warn!(dir = %root.display(), "the config directory did not exist; made it empty (no profile agents; custom agents go to its custom/)");
        }
        let custom_dir = root.join("custom");
        fs::create_dir_all(&custom_dir).map_err(|e| RegistryError::io(&custom_dir, e))?;
        // Watcher events carry canonical paths; compare like with like.
        let root = fs::canonicalize(root).map_err(|e| RegistryError::io(root, e))?;
        let custom_dir = root.join("custom");
        fs::create_dir_all(&custom_dir).map_err(|e| RegistryError::io(&custom_dir, e))?;
        // Before anything of the directory is touched: the temp files are another registry's
        // writes in progress while that one runs.
        let config_lock = lock_config_dir(&root)?;
        let removed = files::remove_stale_temp_files(&custom_dir, &root.join(files::STAGING))
            .map_err(|e| RegistryError::io(&custom_dir, e))?;
        if removed > 0 {
            warn!(removed, dir = %root.display(), "removed temp files left by an interrupted write (in custom/ and .staging/)");
        }
        let db = open_or_rebuild(data_dir)?;
        let (changes, _) = broadcast::channel(4096);
        let runtime = db.open_tree("runtime")?;
        let store = Self {
            root,
            custom: db.open_tree("custom")?,
            profile: db.open_tree("profile")?,
            facts: std::sync::RwLock::new(load_facts(&runtime)?),
            runtime,
            db,
            custom_dir,
            write_lock: Mutex::default(),
            diagnostics: Mutex::new(BTreeMap::new()),
            times_before_invalid: Mutex::default(),
            workspaces: Mutex::default(),
            racy: reconcile::RACY,
            changes,
            // Microseconds since the epoch: a restarted registry goes on above the revisions
            // its watchers saw from the one before.
            revision: AtomicU64::new(now_ms().saturating_mul(1000)),
            fault: taskforce_runtime::Fault::default(),
            _config_lock: config_lock,
            custom_bytes: taskforce_runtime::store::StoredBytes::default(),
            max_custom_bytes: AtomicU64::new(0),
        };
        store.index_workspaces()?;
        Ok(store)
    }

    /// Set once the cache failed to write (see the field).
    pub fn fault(&self) -> &taskforce_runtime::Fault {
        &self.fault
    }

    /// Marks the cache broken when `e` is its failure (sled refuses every write after its first
    /// I/O error: no retry mends it, only a restart); whether it was.
    pub fn note_failure(&self, e: &RegistryError) -> bool {
        let cache = matches!(e, RegistryError::Cache(_));
        if cache {
            self.fault.set(format!("its cache failed to write ({e})"));
        }
        cache
    }

    /// The config directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Whether the profile `id` is served or has its file: its id is not a custom agent's.
    fn profile_holds(&self, id: &str) -> Result<bool> {
        Ok(self.profile.contains_key(id.as_bytes())?
            || self.root.join(format!("{id}.{}", files::EXT)).is_file())
    }

    /// The custom agents directory.
    pub fn custom_dir(&self) -> &Path {
        &self.custom_dir
    }

    /// Flushes the cache to disk (on shutdown; the files are durable anyway).
    pub fn flush(&self) -> Result<()> {
        self.db.flush()?;
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, reconcile::Stamps> {
        self.write_lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn tree(&self, source: AgentSource) -> &sled::Tree {
        match source {
            AgentSource::Profile => &self.profile,
            AgentSource::Custom | AgentSource::Unspecified => &self.custom,
        }
    }

    /// Drops agent `id` from `source`'s cache (a custom agent's workspace id is free again);
    /// whether it was there.
    fn uncache(&self, source: AgentSource, id: &str) -> Result<bool> {
        let removed = self.tree(source).remove(id.as_bytes())?;
        if let Some(bytes) = &removed
            && source != AgentSource::Profile
        {
            self.release_workspace(id, bytes);
            self.custom_bytes.replaced(bytes.len() as u64, 0);
        }
        Ok(removed.is_some())
    }

    /// Caches `agent` as `id` in `source`'s tree.
    fn cache(&self, source: AgentSource, id: &str, agent: &v1::Agent) -> Result<()> {
        let value = agent.encode_to_vec();
        let new = value.len();
        let old = self.tree(source).insert(id.as_bytes(), value)?;
        if source != AgentSource::Profile {
            self.custom_bytes
                .replaced(old.map_or(0, |o| o.len() as u64), new as u64);
        }
        Ok(())
    }

    /// Refuses API writes that would grow the custom agents' bytes past `max` (0: no limit).
    pub fn set_max_custom_bytes(&self, max: u64) {
        self.max_custom_bytes.store(max, Ordering::Relaxed);
    }

    /// Bytes of the cached custom agents.
    pub fn custom_bytes(&self) -> u64 {
        self.custom_bytes.get()
    }

    /// Whether custom agent `id`, cached as `new` bytes, fits under the limit: 507
    /// `quota_exceeded` when it would grow the total past it (a write that does not grow it,
    /// such as a smaller update, always fits).
    fn room_for(&self, id: &str, new: usize) -> Result<()> {
        let max = self.max_custom_bytes.load(Ordering::Relaxed);
        if max == 0 {
            return Ok(());
        }
        let old = self.custom.get(id.as_bytes())?.map_or(0, |v| v.len()) as u64;
        let (new, total) = (new as u64, self.custom_bytes());
        if new <= old || total.saturating_sub(old).saturating_add(new) <= max {
            return Ok(());
        }
        Err(ApiError::new(
            ErrorKind::QuotaExceeded,
            format!(
                "the custom agents take {total} bytes, and agent {id:?} ({new} bytes) would take \
                 them past the registry's limit of {max} (--max-custom-agents-mb); delete agents \
                 that are no longer needed, or raise the limit"
            ),
        )
        .into())
    }

    /// The sled cache's size on disk, in bytes. sled stats its files to answer, and one try
    /// can fail while it rewrites them: it tries three times; `None` means it could not say.
    pub fn size_on_disk(&self) -> Option<u64> {
        (0..3).find_map(|_| self.db.size_on_disk().ok())
    }

    /// Number of cached agents by source (profile, custom).
    pub fn counts(&self) -> (usize, usize) {
        (self.profile.len(), self.custom.len())
    }

    fn dir_of(&self, source: AgentSource) -> &Path {
        match source {
            AgentSource::Profile => &self.root,
            AgentSource::Custom | AgentSource::Unspecified => &self.custom_dir,
        }
    }
}

/// Locks the config directory for this registry (an advisory lock on the directory itself,
/// which needs no write access, leaves no file, and is let go when the process ends, however it
/// ends): a second registry on the same directory, with a data directory of its own (so sled's
/// lock does not stop it), would write the same files, take this one's writes in progress for
/// leftovers and remove them, and cache other versions; it is refused at start, after waiting
/// up to [`taskforce_runtime::EXIT_WAIT`] for a registry that is stopping (a restart).
fn lock_config_dir(root: &Path) -> Result<fs::File> {
    let dir = fs::File::open(root).map_err(|e| RegistryError::io(root, e))?;
    let locked = taskforce_runtime::waiting_for_lock(
        || dir.try_lock(),
        |e| matches!(e, fs::TryLockError::WouldBlock),
    );
    match locked {
        Ok(()) => Ok(dir),
        Err(fs::TryLockError::WouldBlock) => Err(RegistryError::Config(format!(
            "--config-dir {}: another registry is using it (it holds the directory's lock); \
             stop that one, or give this registry a config directory of its own",
            root.display()
        ))),
        Err(fs::TryLockError::Error(e)) => Err(RegistryError::io(root, e)),
    }
}

/// Opens sled at `dir`; a database that cannot be opened is moved aside and rebuilt (the files
/// are the source of truth, so nothing is lost). Only a sled database is ever moved: a `dir`
/// that is a file, or a directory without sled's files, is the operator's and an error.
fn open_or_rebuild(dir: &Path) -> Result<sled::Db> {
    // sled's default 512 KiB log segments: unlike the executor's session store (see
    // `taskforce_runtime::store`), the cache stays small with them. 50 agents of 50 KB each,
    // replaced 40 times through the API, took 14-15 MB of files (with 8 MiB segments, 34-42 MB).
    // A cache made with other segments keeps them.
    let config = |d: &Path| {
        taskforce_runtime::store::sled_config(d, taskforce_runtime::store::DEFAULT_SEGMENT_BYTES)
            .cache_capacity(8 * 1024 * 1024)
            .mode(sled::Mode::LowSpace)
            .flush_every_ms(Some(1000))
    };
    match taskforce_runtime::open_waiting_for_lock(|| config(dir).open()) {
        Ok(db) => Ok(db),
        // Another process (a second registry on the same --data-dir) has it open: its cache is
        // alive, not broken, and moving it aside would lose what that registry writes next.
        Err(e) if taskforce_runtime::lock_held(&e) => Err(RegistryError::Config(format!(
            "--data-dir {}: another process (a registry started twice?) is using the cache \
             there ({e}); stop it, or give this registry its own --data-dir",
            dir.display()
        ))),
        Err(e) if !is_sled_database(dir) => Err(RegistryError::Config(format!(
            "--data-dir {}: cannot open the cache there ({e}); it must be a directory the \
             registry may write (it is made when missing)",
            dir.display()
        ))),
        // Not a broken cache: one the registry may not write (a read-only volume), or a full
        // disk; setting it aside would not help, and would pile up copies at each restart.
        Err(sled::Error::Io(io))
            if taskforce_runtime::is_disk_full(&io)
                || matches!(
                    io.kind(),
                    std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::ReadOnlyFilesystem
                ) =>
        {
            let fix = if taskforce_runtime::is_disk_full(&io) {
                "free space, then start the registry again"
            } else {
                "give the registry a directory it may write"
            };
            Err(RegistryError::Config(format!(
                "--data-dir {}: cannot write the cache there ({}); {fix}",
                dir.display(),
                taskforce_runtime::describe_io(&io)
            )))
        }
        Err(e) => {
            let aside = dir.join(format!(
                "{ASIDE_PREFIX}{}",
                chrono::Utc::now().format("%Y%m%dT%H%M%S%.3f")
            ));
            warn!(dir = %dir.display(), aside = %aside.display(), error = %e, "cache cannot be opened; moving it aside and rebuilding from YAML");
            move_into(dir, &aside)?;
            Ok(config(dir).open()?)
        }
    }
}

/// The name of a directory in `--data-dir` holding a cache set aside (see [`move_into`]).
const ASIDE_PREFIX: &str = "broken-";

/// Moves sled's files in `dir` (`conf`, `db`, `blobs/`, `snap.*`) into `aside`, a new directory
/// in it. Not `dir` itself: a data directory that is a mount point (a volume of its own, as in
/// Docker Compose) cannot be renamed, and the file system around it may be read-only; and
/// nothing else of it (a volume's `lost+found`, earlier caches set aside).
fn move_into(dir: &Path, aside: &Path) -> Result<()> {
    fs::create_dir(aside).map_err(|e| RegistryError::io(aside, e))?;
    let entries = fs::read_dir(dir).map_err(|e| RegistryError::io(dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| RegistryError::io(dir, e))?;
        let name = entry.file_name();
        let sleds = matches!(name.to_str(), Some("conf" | "db" | "blobs"))
            || name.to_string_lossy().starts_with("snap.");
        if sleds {
            fs::rename(entry.path(), aside.join(&name))
                .map_err(|e| RegistryError::io(&entry.path(), e))?;
        }
    }
    Ok(())
}

/// Whether `dir` is a directory holding a sled database (its `conf` or `db` file).
fn is_sled_database(dir: &Path) -> bool {
    dir.is_dir() && (dir.join("conf").is_file() || dir.join("db").is_file())
}

#[cfg(test)]
mod tests;
