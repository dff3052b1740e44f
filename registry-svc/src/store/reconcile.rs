//! Reconciling the cache with the files (all of them at start and periodically, one per
//! watcher event), and the diagnostics of files that cannot be served.

use std::{
    collections::{HashMap, HashSet},
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use prost::Message;
use taskforce_proto::{
    error::ApiError,
    ids,
    v1::{self, AgentSource, agent_change::Kind as ChangeKind},
};
use tracing::warn;

use super::{ReconcileStats, Store};
use crate::{
    convert,
    definition::{self, CustomAgentFile, ProfileFile},
    error::{RegistryError, Result},
    files,
};

/// Files in the config directory that are not profiles.
const NOT_PROFILES: [&str; 1] = ["llm_config.yaml"];

/// A file changed this recently is read again on every pass: file times tick coarsely (a few
/// milliseconds), so two writes of the same size within one tick leave the same stamp.
pub(super) const RACY: Duration = Duration::from_secs(2);

/// The stamp of each file as it was last read. An API write needs no entry of its own: its
/// rename gives the path a new inode, so the next pass reads the file.
pub(super) type Stamps = HashMap<PathBuf, Stamp>;

/// A file's identity, size and times when it was read. Any write changes the change time
/// (`ctime`, which no one can set by hand), so an unchanged stamp means unchanged content, and a
/// periodic reconcile reads only the files that changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Stamp {
    ino: u64,
    len: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Stamp {
    /// The stamp of `path` now, or `None` when it cannot be stat'ed or changed within `racy`
    /// of now (or in the future: a clock that disagrees is read every time, never trusted).
    fn of(path: &Path, racy: Duration) -> Option<Self> {
        let meta = std::fs::metadata(path).ok()?;
        let ctime = (meta.ctime(), meta.ctime_nsec());
        let now = SystemTime::now().duration_since(UNIX_EPOCH).ok()?;
        let changed = Duration::new(u64::try_from(ctime.0).ok()?, u32::try_from(ctime.1).ok()?);
        if now.checked_sub(changed)? < racy {
            return None;
        }
        Some(Self {
            ino: meta.ino(),
            len: meta.len(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime,
        })
    }
}

impl Store {
    /// Files that could not be loaded, with the reason, by path relative to the config dir.
    pub fn diagnostics(&self) -> Vec<(String, String)> {
        self.diagnostics
            .lock()
            .map(|d| d.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default()
    }

    /// Brings the cache in line with every file in the config directory.
    pub fn reconcile_all(&self) -> Result<ReconcileStats> {
        let mut stamps = self.lock();
        let mut stats = ReconcileStats::default();
        // Files read for the first time in this pass claim workspace ids as equals.
        self.end_workspace_pass();
        let result = self.reconcile_dirs(&mut stamps, &mut stats);
        self.end_workspace_pass();
        result.map(|()| stats)
    }

    /// [`Store::reconcile_all`] under the write lock.
    fn reconcile_dirs(&self, stamps: &mut Stamps, stats: &mut ReconcileStats) -> Result<()> {
        for source in [AgentSource::Profile, AgentSource::Custom] {
            let dir = self.dir_of(source);
            let paths = files::yaml_files(dir).map_err(|e| {
                // Said where users look (the diagnostics), not only in the log; the agents of
                // the directory stay served as they were last read. The next pass that reads
                // the config directory forgets it.
                let rel = self.rel(dir);
                let key = if rel.is_empty() {
                    "./".to_owned()
                } else {
                    format!("{rel}/")
                };
                if let Ok(mut d) = self.diagnostics.lock() {
                    d.insert(
                        key,
                        format!(
                            "the directory cannot be read ({e}); its agents are served as they \
                             were last read"
                        ),
                    );
                }
                RegistryError::io(dir, e)
            })?;
            let mut seen = HashSet::with_capacity(paths.len());
            for path in paths {
                if source == AgentSource::Profile && is_not_profile(&path) {
                    continue;
                }
                stats.files += 1;
                if let Some(id) = files::stem(&path) {
                    seen.insert(id.to_owned());
                }
                self.reconcile_file(source, &path, stamps, stats)?;
            }
            let tree = self.tree(source);
            for key in tree.iter().keys() {
                let key = key?;
                let id = String::from_utf8_lossy(&key).into_owned();
                if !seen.contains(&id) && self.uncache(source, &id)? {
                    stats.removed += 1;
                    self.notify(ChangeKind::Deleted, &id, source, None);
                    self.reread_other(source, &id, stats)?;
                }
            }
            self.retain_diagnostics(dir, &seen);
            // A `.yml` file is not read (the file name is the id, with one extension); say so
            // instead of ignoring it silently.
            for path in files::misnamed_files(dir).map_err(|e| RegistryError::io(dir, e))? {
                self.remember_diagnostic(&path, misnamed(&path));
            }
            // Nor is one in a subdirectory of `custom/` (moved there to keep it, or by mistake).
            if source == AgentSource::Custom {
                self.forget_nested_diagnostics(dir);
                for path in files::nested_files(dir) {
                    self.remember_diagnostic(&path, nested(dir, &path));
                }
                // The times kept for invalid files that are gone (a missed watcher event).
                if let Ok(mut kept) = self.times_before_invalid.lock() {
                    kept.retain(|id, _| seen.contains(id));
                }
            }
            stamps.retain(|path, _| {
                path.parent() != Some(dir) || files::stem(path).is_some_and(|id| seen.contains(id))
            });
        }
        Ok(())
    }

    /// Brings the cache in line with one file (created, changed or deleted).
    pub fn reconcile_path(&self, path: &Path) -> Result<ReconcileStats> {
        self.end_workspace_pass();
        let result = self.reconcile_one(path);
        self.end_workspace_pass();
        result
    }

    /// [`Store::reconcile_path`] for each of `paths` (a watcher's batch) in one pass: files
    /// that arrive together claim workspace ids as equals, as in a full reconcile. Returns the
    /// paths that failed; the others count.
    pub fn reconcile_paths<'a>(
        &self,
        paths: impl IntoIterator<Item = &'a Path>,
    ) -> Vec<(&'a Path, RegistryError)> {
        self.end_workspace_pass();
        let failed = paths
            .into_iter()
            .filter_map(|p| self.reconcile_one(p).err().map(|e| (p, e)))
            .collect();
        self.end_workspace_pass();
        failed
    }

    fn reconcile_one(&self, path: &Path) -> Result<ReconcileStats> {
        let mut stats = ReconcileStats::default();
        let Some(source) = self.source_of(path) else {
            self.reconcile_misnamed(path);
            return Ok(stats);
        };
        let mut stamps = self.lock();
        stats.files = 1;
        self.reconcile_file(source, path, &mut stamps, &mut stats)?;
        Ok(stats)
    }

    /// Says, or stops saying, that `path` (a `.yml` file in a definitions directory, created,
    /// renamed or deleted) is not read: as soon as it changes, not only at the next full pass.
    fn reconcile_misnamed(&self, path: &Path) {
        let in_definitions = path
            .parent()
            .is_some_and(|dir| dir == self.custom_dir || dir == self.root);
        if !in_definitions || !files::is_misnamed(path) {
            return;
        }
        if path.is_file() {
            self.remember_diagnostic(path, misnamed(path));
        } else {
            self.forget_diagnostic(path);
        }
    }

    pub(super) fn source_of(&self, path: &Path) -> Option<AgentSource> {
        if !files::is_definition_file(path) {
            return None;
        }
        let dir = path.parent()?;
        if dir == self.custom_dir {
            Some(AgentSource::Custom)
        } else if dir == self.root && !is_not_profile(path) {
            Some(AgentSource::Profile)
        } else {
            None
        }
    }

    fn reconcile_file(
        &self,
        source: AgentSource,
        path: &Path,
        stamps: &mut Stamps,
        stats: &mut ReconcileStats,
    ) -> Result<()> {
        // Stamped before reading: a write after this point changes the stamp again, so the
        // next pass reads the file again.
        let stamp = Stamp::of(path, self.racy);
        if stamp.is_some() && stamp == stamps.get(path).copied() && !self.freed(source, path)? {
            stats.unchanged += 1;
            return Ok(());
        }
        self.read_file(source, path, stats)?;
        match stamp {
            Some(stamp) => stamps.insert(path.to_path_buf(), stamp),
            None => stamps.remove(path),
        };
        Ok(())
    }

    /// Reads one file and brings its cache entry in line with it.
    fn read_file(
        &self,
        source: AgentSource,
        path: &Path,
        stats: &mut ReconcileStats,
    ) -> Result<()> {
        let Some(id) = files::stem(path).map(str::to_owned) else {
            return Ok(());
        };
        let tree = self.tree(source);
        let bytes = match files::read_at_most(path, files::MAX_DEFINITION_BYTES) {
            Ok(Some(b)) => b,
            Ok(None) => {
                let reason = format!(
                    "the file is larger than {} bytes, the most a definition may have",
                    files::MAX_DEFINITION_BYTES
                );
                return self.skip_invalid(source, &id, path, reason, stats);
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                self.forget_diagnostic(path);
                self.forget_times_before_invalid(&id);
                if self.uncache(source, &id)? {
                    stats.removed += 1;
                    self.notify(ChangeKind::Deleted, &id, source, None);
                }
                // Also when it was not served (an invalid profile): a custom file refused
                // for it is served again.
                return self.reread_other(source, &id, stats);
            }
            // One file that cannot be read (permissions, a link, a pipe) is that file's
            // problem, said in the diagnostics; the others are served.
            Err(e) => {
                let reason = format!("cannot be read: {e}");
                return self.skip_invalid(source, &id, path, reason, stats);
            }
        };
        // One id, one agent, decided by the files alone (so a rebuilt cache serves what the
        // running one did): a valid profile keeps its id, and a custom file taking it (a
        // hand-written `custom/dev.yaml` beside `configs/dev.yaml`) is not read, as the API
        // refuses it. An invalid profile (an empty file, a custom agent's file copied to the
        // config directory) takes no id from a valid custom agent.
        if source != AgentSource::Profile && self.profile.contains_key(id.as_bytes())? {
            return self.skip_invalid(source, &id, path, taken(&id), stats);
        }
        let version = files::version_of(&bytes);
        let cached = tree
            .get(id.as_bytes())?
            .and_then(|c| v1::Agent::decode(c.as_ref()).ok());
        if cached
            .as_ref()
            .is_some_and(|a| a.version == version && has_times(a))
        {
            return Ok(());
        }
        // The workspace id and the times this agent was served with until this change of its
        // file.
        let (workspace_before, before) = match cached.and_then(|a| a.kind) {
            Some(v1::agent::Kind::Custom(c)) => {
                (Some(c.workspace_id), Some((c.created_at, c.updated_at)))
            }
            _ => (None, self.times_before_invalid(source, &id)),
        };
        match load(source, &id, version, &bytes) {
            Ok(mut agent) => {
                match &mut agent.kind {
                    Some(v1::agent::Kind::Profile(p)) => {
                        (p.created_at, p.updated_at) = files::times(path);
                    }
                    Some(v1::agent::Kind::Custom(c)) => {
                        served_times(&mut c.created_at, &mut c.updated_at, path, before);
                    }
                    None => {}
                }
                if source != AgentSource::Profile {
                    self.settle_workspace(&id, &mut agent, workspace_before.as_deref())?;
                } else if self.custom.contains_key(id.as_bytes())? {
                    let custom = self.custom_dir.join(format!("{id}.{}", files::EXT));
                    self.skip_invalid(AgentSource::Custom, &id, &custom, taken(&id), stats)?;
                }
                self.cache(source, &id, &agent)?;
                self.forget_diagnostic(path);
                self.forget_times_before_invalid(&id);
                stats.updated += 1;
                self.notify_upserted(&self.with_runtime(agent));
            }
            Err(reason) => {
                self.skip_invalid(source, &id, path, reason, stats)?;
                // A profile that turned invalid holds its id no more.
                return self.reread_other(source, &id, stats);
            }
        }
        Ok(())
    }

    /// Whether `path` is a custom file refused for a profile that is not served any more (gone
    /// or invalid while no event said so): read again even though it did not change.
    fn freed(&self, source: AgentSource, path: &Path) -> Result<bool> {
        if source == AgentSource::Profile {
            return Ok(false);
        }
        let Some(id) = files::stem(path) else {
            return Ok(false);
        };
        Ok(self
            .diagnostic(path)
            .is_some_and(|(_, why)| why == taken(id))
            && !self.profile.contains_key(id.as_bytes())?)
    }

    /// After `source`'s agent `id` went away: the other kind's file of that id, refused while
    /// this one held the id, is read again (and served).
    fn reread_other(
        &self,
        source: AgentSource,
        id: &str,
        stats: &mut ReconcileStats,
    ) -> Result<()> {
        let other = other_kind(source);
        let name = format!("{id}.{}", files::EXT);
        let path = match other {
            AgentSource::Profile => self.root.join(name),
            AgentSource::Custom | AgentSource::Unspecified => self.custom_dir.join(name),
        };
        // Only a custom file refused for the profile (never a profile: no loop between the
        // two, and an invalid file is not parsed again for nothing).
        if self
            .diagnostic(&path)
            .is_some_and(|(_, why)| why == taken(id))
        {
            self.read_file(other, &path, stats)?;
        }
        Ok(())
    }

    /// Leaves an invalid file out of the cache (dropping what it held), with a diagnostic.
    pub(super) fn skip_invalid(
        &self,
        source: AgentSource,
        id: &str,
        path: &Path,
        reason: String,
        stats: &mut ReconcileStats,
    ) -> Result<()> {
        warn!(path = %path.display(), error = %reason, "skipping invalid definition");
        stats.invalid += 1;
        self.remember_diagnostic(path, reason);
        if source != AgentSource::Profile
            && let Some(v1::agent::Kind::Custom(c)) = self
                .tree(source)
                .get(id.as_bytes())?
                .and_then(|c| v1::Agent::decode(c.as_ref()).ok())
                .and_then(|a| a.kind)
            && let Ok(mut before) = self.times_before_invalid.lock()
        {
            before.insert(id.to_owned(), (c.created_at, c.updated_at));
        }
        if self.uncache(source, id)? {
            stats.removed += 1;
            self.notify(ChangeKind::Deleted, id, source, None);
        }
        Ok(())
    }

    /// The times a custom agent was served with before its file turned invalid, if it was
    /// ([`Store::skip_invalid`] keeps them until the file is valid again or gone).
    fn times_before_invalid(&self, source: AgentSource, id: &str) -> Option<(String, String)> {
        if source == AgentSource::Profile {
            return None;
        }
        self.times_before_invalid.lock().ok()?.get(id).cloned()
    }

    /// Forgets the times [`Store::skip_invalid`] kept for `id`.
    fn forget_times_before_invalid(&self, id: &str) {
        if let Ok(mut before) = self.times_before_invalid.lock() {
            before.remove(id);
        }
    }

    pub(super) fn rel(&self, path: &Path) -> String {
        path.strip_prefix(&self.root)
            .unwrap_or(path)
            .display()
            .to_string()
    }

    pub(super) fn remember_diagnostic(&self, path: &Path, reason: String) {
        if let Ok(mut d) = self.diagnostics.lock() {
            d.insert(self.rel(path), reason);
        }
    }

    /// Why the file at `path` is not served, when it is a definition file that is invalid.
    pub(super) fn diagnostic(&self, path: &Path) -> Option<(String, String)> {
        let rel = self.rel(path);
        let reason = self.diagnostics.lock().ok()?.get(&rel).cloned()?;
        Some((rel, reason))
    }

    pub(super) fn forget_diagnostic(&self, path: &Path) {
        if let Ok(mut d) = self.diagnostics.lock() {
            d.remove(&self.rel(path));
        }
    }

    /// Drops the diagnostics of files in the subdirectories of `dir` (each full pass says them
    /// again while they are there).
    fn forget_nested_diagnostics(&self, dir: &Path) {
        let prefix = format!("{}/", self.rel(dir));
        if let Ok(mut d) = self.diagnostics.lock() {
            d.retain(|rel, _| !(rel.starts_with(&prefix) && rel[prefix.len()..].contains('/')));
        }
    }

    /// Drops diagnostics of files in `dir` that are gone.
    pub(super) fn retain_diagnostics(&self, dir: &Path, present: &HashSet<String>) {
        let prefix = self.rel(dir);
        if let Ok(mut d) = self.diagnostics.lock() {
            d.retain(|rel, _| {
                let p = Path::new(rel);
                let parent = p
                    .parent()
                    .map(|x| x.display().to_string())
                    .unwrap_or_default();
                parent != prefix
                    || (files::is_definition_file(p)
                        && files::stem(p).is_some_and(|s| present.contains(s)))
            });
        }
    }
}

/// Why a custom file is not read: a profile has its id.
fn taken(id: &str) -> String {
    format!(
        "the id {id:?} is the profile {id}.{}'s (in the config directory); rename this file",
        files::EXT
    )
}

/// The other kind of definition file (profiles and custom agents share the ids).
fn other_kind(source: AgentSource) -> AgentSource {
    match source {
        AgentSource::Profile => AgentSource::Custom,
        AgentSource::Custom | AgentSource::Unspecified => AgentSource::Profile,
    }
}

/// Why a file in a subdirectory of `custom/` is not read.
fn nested(custom: &Path, path: &Path) -> String {
    let dir = custom
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    // A `.yml` file is not read in `custom/` either: it is to be renamed too.
    let name = format!("{}.{}", files::stem(path).unwrap_or_default(), files::EXT);
    format!(
        "not read: agent files are read only directly in `{dir}/`, not in its subdirectories; \
         move it to `{dir}/{name}` to serve it"
    )
}

/// Why a `.yml` file is not read.
fn misnamed(path: &Path) -> String {
    let stem = files::stem(path).unwrap_or_default();
    format!(
        "not read: definition files end in `.{}`; rename it to `{stem}.{}`",
        files::EXT,
        files::EXT
    )
}

/// Parses and validates one file into an `Agent`, or says why it cannot be served.
fn load(source: AgentSource, id: &str, version: String, bytes: &[u8]) -> Result<v1::Agent, String> {
    ids::validate_agent_id(id).map_err(|e| format!("file name is not a valid agent id: {e}"))?;
    match source {
        AgentSource::Profile => {
            let f: ProfileFile = files::yaml(bytes).map_err(|e| format!("invalid YAML: {e}"))?;
            if let Some(why) = f.not_a_profile() {
                return Err(why);
            }
            definition::validate_profile(&f)
                .map_err(|e| format!("invalid profile: {}", with_named_entries(&e)))?;
            Ok(convert::profile_to_proto(id, version, &f))
        }
        AgentSource::Custom | AgentSource::Unspecified => {
            let mut f: CustomAgentFile =
                files::yaml(bytes).map_err(|e| format!("invalid YAML: {e}"))?;
            // Written before repeats were refused (or by hand): served without them.
            if f.drop_repeated_tools() {
                tracing::warn!(
                    agent_id = id,
                    "a tool is listed twice in the agent's file; it is used once"
                );
            }
            definition::validate(id, &f)
                .map_err(|e| format!("invalid definition: {}", with_named_entries(&e)))?;
            Ok(convert::custom_to_proto(id, version, &f))
        }
    }
}

/// A validation error's message with the entries it refused (`invalid_tools`,
/// `invalid_subagents`, ...), which an API client reads from the error body but a diagnostic
/// has only as text: `Unknown tool(s) in tool_allowlist: web_surf, fly`.
fn with_named_entries(e: &ApiError) -> String {
    let named: Vec<&str> = e
        .extra
        .iter()
        .filter(|(key, _)| key.starts_with("invalid_"))
        .filter_map(|(_, value)| value.as_array())
        .flatten()
        .filter_map(serde_json::Value::as_str)
        .collect();
    if named.is_empty() {
        e.message.clone()
    } else {
        format!("{}: {}", e.message, named.join(", "))
    }
}

/// Whether a cached agent has what a cache written by an older registry may lack: a profile's
/// file times, a custom agent's served times.
fn has_times(agent: &v1::Agent) -> bool {
    match &agent.kind {
        Some(v1::agent::Kind::Profile(p)) => !p.updated_at.is_empty(),
        Some(v1::agent::Kind::Custom(c)) => !c.created_at.is_empty() && !c.updated_at.is_empty(),
        None => true,
    }
}

/// A custom agent's times as served: the registry writes both (RFC 3339) on every create and
/// update; a hand-written file may leave them out or hold something else (`yesterday`), and
/// then the file's own times stand in, so clients always get RFC 3339. The file is not changed.
///
/// `before` is what the agent was served with until this change of its file (seen while the
/// registry ran): a hand edit that leaves `updated_at` as it was (or older) is served with the
/// file's modification time, so `updated_at` moves with every change; a file without
/// `created_at` keeps the one it was served with (an editor's save by rename gives the file a
/// new creation time). A file read for the first time (at start, after a `git checkout`) is
/// served with the times it holds.
fn served_times(
    created_at: &mut String,
    updated_at: &mut String,
    path: &Path,
    before: Option<(String, String)>,
) {
    let (created, modified) = files::times(path);
    let (created_before, updated_before) = before.unzip();
    if !is_rfc3339(created_at) {
        *created_at = created_before.filter(|t| is_rfc3339(t)).unwrap_or(created);
    }
    let stood_still = match (
        chrono::DateTime::parse_from_rfc3339(updated_at),
        updated_before.map(|t| chrono::DateTime::parse_from_rfc3339(&t)),
    ) {
        (Ok(now), Some(Ok(before))) => now <= before,
        _ => false,
    };
    if !is_rfc3339(updated_at) || stood_still {
        *updated_at = modified;
    }
}

/// The `created_at` an update keeps: the file's, else the one served for it (as
/// [`served_times`] serves it), else the file's own creation time.
pub(super) fn served_created_at(
    written: Option<String>,
    served: Option<String>,
    path: &Path,
) -> String {
    written
        .filter(|t| is_rfc3339(t))
        .or(served.filter(|t| is_rfc3339(t)))
        .unwrap_or_else(|| files::times(path).0)
}

/// Whether `t` is an RFC 3339 time as clients read one: `T` and `Z` in upper case, as the
/// registry writes them, no leap second, a year from 1. chrono also takes a lower-case `t` or
/// `z`, a space, `:60` and year 0, which Python's and JavaScript's parsers refuse.
fn is_rfc3339(t: &str) -> bool {
    use chrono::Datelike as _;
    chrono::DateTime::parse_from_rfc3339(t).is_ok_and(|time| {
        t.as_bytes().get(10) == Some(&b'T')
            && !t.contains('z')
            && time.timestamp_subsec_nanos() < 1_000_000_000
            && time.year() >= 1
    })
}

fn is_not_profile(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| NOT_PROFILES.contains(&n))
}
