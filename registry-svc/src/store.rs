//! The agent store: YAML files are the source of truth, sled is the cache and index.
//!
//! Every mutation (API writes, watcher events, periodic reconciles) runs under one write lock,
//! so the cache always moves from one file state to the next. Methods are blocking: call them
//! from `spawn_blocking` (reads are sub-millisecond sled lookups and may run inline).

use std::{
    collections::{BTreeMap, HashSet},
    fs,
    ops::Bound,
    path::{Path, PathBuf},
    sync::{
        Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use prost::Message;
use taskforce_proto::{
    error::{ApiError, ErrorKind},
    ids, page_token,
    v1::{self, AgentSource, agent_change::Kind as ChangeKind},
};
use taskforce_runtime::now_ms;
use tokio::sync::broadcast;
use tracing::warn;

use crate::{
    convert,
    definition::{self, CustomAgentFile, ProfileFile},
    error::{RegistryError, Result},
    files,
};

/// Files in the config directory that are not profiles.
const NOT_PROFILES: [&str; 1] = ["llm_config.yaml"];
/// Default and largest page sizes of `list`.
pub const DEFAULT_PAGE: usize = 100;
/// Largest page size of `list`.
pub const MAX_PAGE: usize = 1000;

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
    write_lock: Mutex<()>,
    diagnostics: Mutex<BTreeMap<String, String>>,
    changes: broadcast::Sender<v1::AgentChange>,
    /// The revision of the latest change (see [`v1::AgentChange::revision`]); written under
    /// the write lock.
    revision: AtomicU64,
}

/// Everything a watcher that asked for a snapshot needs: the agents as they are, the revision
/// they are at, and a receiver of exactly the changes made after them.
pub struct Snapshot {
    /// Every agent, profiles first, each source by id.
    pub agents: Vec<v1::Agent>,
    /// The revision of the latest change the agents include.
    pub revision: u64,
    /// The changes from then on.
    pub changes: broadcast::Receiver<v1::AgentChange>,
}

impl Store {
    /// Opens (or rebuilds) the cache at `data_dir` for the config directory `root`. The cache
    /// may be stale until [`Store::reconcile_all`] runs; the caller starts the file watcher
    /// first, so that no edit falls between the reconcile and the watch.
    pub fn open(root: &Path, data_dir: &Path) -> Result<Self> {
        let custom_dir = root.join("custom");
        fs::create_dir_all(&custom_dir).map_err(|e| RegistryError::io(&custom_dir, e))?;
        // Watcher events carry canonical paths; compare like with like.
        let root = fs::canonicalize(root).map_err(|e| RegistryError::io(root, e))?;
        let custom_dir = root.join("custom");
        fs::create_dir_all(&custom_dir).map_err(|e| RegistryError::io(&custom_dir, e))?;
        let removed = files::remove_stale_temp_files(&custom_dir)
            .map_err(|e| RegistryError::io(&custom_dir, e))?;
        if removed > 0 {
            warn!(removed, dir = %custom_dir.display(), "removed temp files left by an interrupted write");
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
            write_lock: Mutex::new(()),
            diagnostics: Mutex::new(BTreeMap::new()),
            changes,
            // Microseconds since the epoch: a restarted registry goes on above the revisions
            // its watchers saw from the one before.
            revision: AtomicU64::new(now_ms().saturating_mul(1000)),
        };
        Ok(store)
    }

    /// The config directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The custom agents directory.
    pub fn custom_dir(&self) -> &Path {
        &self.custom_dir
    }

    /// A receiver of every change from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<v1::AgentChange> {
        self.changes.subscribe()
    }

    /// Every agent and a receiver of the changes after them, taken under the write lock so
    /// that no change is both in the agents and in the receiver, or in neither.
    pub fn snapshot(&self) -> Result<Snapshot> {
        let _guard = self.lock();
        let changes = self.changes.subscribe();
        let mut agents = Vec::with_capacity(self.profile.len() + self.custom.len());
        for tree in [&self.profile, &self.custom] {
            for item in tree.iter().values() {
                agents.push(self.with_runtime(v1::Agent::decode(item?.as_ref())?));
            }
        }
        Ok(Snapshot {
            agents,
            revision: self.revision.load(Ordering::Acquire),
            changes,
        })
    }

    /// Flushes the cache to disk (on shutdown; the files are durable anyway).
    pub fn flush(&self) -> Result<()> {
        self.db.flush()?;
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ()> {
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

    // ---- reads -------------------------------------------------------------------------

    /// One agent: a custom agent, else a profile agent of that name.
    pub fn get(&self, id: &str) -> Result<v1::Agent> {
        for tree in [&self.custom, &self.profile] {
            if let Some(bytes) = tree.get(id)? {
                return Ok(self.with_runtime(v1::Agent::decode(bytes.as_ref())?));
            }
        }
        Err(ApiError::new(ErrorKind::NotFound, format!("agent {id:?} not found")).into())
    }

    /// One page of agents: profiles first, then custom agents, each by id.
    pub fn list(
        &self,
        page_size: usize,
        token: &str,
        source: AgentSource,
    ) -> Result<(Vec<v1::Agent>, String)> {
        let page_size = match page_size {
            0 => DEFAULT_PAGE,
            n => n.min(MAX_PAGE),
        };
        let (start_source, after) = match page_token::parse(token)? {
            Some((source, after)) => (Some(source), after),
            None => (None, ""),
        };
        let order: &[AgentSource] = match source {
            AgentSource::Unspecified => &[AgentSource::Profile, AgentSource::Custom],
            AgentSource::Profile => &[AgentSource::Profile],
            AgentSource::Custom => &[AgentSource::Custom],
        };
        let mut out = Vec::with_capacity(page_size.min(256));
        let mut started = start_source.is_none();
        for &src in order {
            let lower = if start_source == Some(src) {
                started = true;
                Bound::Excluded(after.as_bytes().to_vec())
            } else if started {
                Bound::Unbounded
            } else {
                continue;
            };
            for item in self
                .tree(src)
                .range::<Vec<u8>, _>((lower, Bound::Unbounded))
            {
                let (key, value) = item?;
                if out.len() == page_size {
                    // There is more; the token points after the last agent of this page.
                    let token = match out.last() {
                        Some(last) => page_token::make(self.last_source(&out, src), &last.agent_id),
                        None => page_token::make(src, &String::from_utf8_lossy(&key)),
                    };
                    return Ok((out, token));
                }
                out.push(self.with_runtime(v1::Agent::decode(value.as_ref())?));
            }
        }
        Ok((out, String::new()))
    }

    fn last_source(&self, page: &[v1::Agent], fallback: AgentSource) -> AgentSource {
        page.last()
            .and_then(|a| AgentSource::try_from(a.source).ok())
            .unwrap_or(fallback)
    }

    /// Files that could not be loaded, with the reason, by path relative to the config dir.
    pub fn diagnostics(&self) -> Vec<(String, String)> {
        self.diagnostics
            .lock()
            .map(|d| d.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default()
    }

    /// Refuses with `invalid_subagents` the entries of agent `id`'s `subagents` that name no
    /// agent the registry serves (custom or profile). Run on API writes only: see
    /// [`definition::validate`] for why loading files does not check this.
    pub fn check_subagents(&self, id: &str, subagents: &[String]) -> Result<()> {
        let mut unknown = Vec::new();
        for s in subagents {
            if !self.custom.contains_key(s)? && !self.profile.contains_key(s)? {
                unknown.push(s.clone());
            }
        }
        if unknown.is_empty() {
            return Ok(());
        }
        let mut known = Vec::with_capacity(self.custom.len() + self.profile.len());
        for key in self.custom.iter().keys().chain(self.profile.iter().keys()) {
            known.push(String::from_utf8_lossy(&key?).into_owned());
        }
        Err(definition::invalid_subagents(id, &unknown, known).into())
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

    // ---- writes ------------------------------------------------------------------------

    /// Creates a custom agent from a validated definition.
    pub fn create(&self, id: &str, mut def: CustomAgentFile, now: &str) -> Result<v1::Agent> {
        let path = self.custom_path(id)?;
        let _guard = self.lock();
        if path.exists() || self.custom.contains_key(id)? || self.profile.contains_key(id)? {
            return Err(ApiError::new(
                ErrorKind::AlreadyExists,
                format!("agent {id:?} already exists"),
            )
            .into());
        }
        def.agent_id = Some(id.to_owned());
        def.workspace_id = Some(uuid::Uuid::new_v4().to_string());
        def.created_at = Some(now.to_owned());
        def.updated_at = Some(now.to_owned());
        // A new agent starts with no runtime history, even if an old one had this id.
        self.forget_facts(id)?;
        self.write_custom(id, &path, &def)
    }

    /// Replaces a custom agent, keeping its `created_at`.
    pub fn update(
        &self,
        id: &str,
        mut def: CustomAgentFile,
        expected_version: &str,
        now: &str,
    ) -> Result<v1::Agent> {
        let path = self.custom_path(id)?;
        let _guard = self.lock();
        let current = self.read_current(id, &path, expected_version)?;
        let old = serde_yaml::from_slice::<CustomAgentFile>(&current).ok();
        let created = old
            .as_ref()
            .and_then(|f| f.created_at.clone())
            .unwrap_or_else(|| now.to_owned());
        def.agent_id = Some(id.to_owned());
        // The workspace id stays what clients have seen, also for files written by hand.
        def.workspace_id = Some(old.as_ref().map_or_else(
            || definition::derived_workspace_id(id),
            |f| f.workspace_id_or_derived(id),
        ));
        def.created_at = Some(created);
        def.updated_at = Some(now.to_owned());
        self.write_custom(id, &path, &def)
    }

    /// Deletes a custom agent; returns the revision of the deletion.
    pub fn delete(&self, id: &str, expected_version: &str) -> Result<u64> {
        let path = self.custom_path(id)?;
        let _guard = self.lock();
        self.read_current(id, &path, expected_version)?;
        files::remove_durable(&path).map_err(|e| RegistryError::io(&path, e))?;
        self.custom.remove(id)?;
        self.forget_facts(id)?;
        self.forget_diagnostic(&path);
        Ok(self.notify(ChangeKind::Deleted, id, AgentSource::Custom, None))
    }

    fn custom_path(&self, id: &str) -> Result<PathBuf> {
        ids::validate_agent_id(id).map_err(|e| ApiError::field("agent_id", e.to_string()))?;
        Ok(self.custom_dir.join(format!("{id}.{}", files::EXT)))
    }

    /// Reads the current file of `id` and checks the expected version against it.
    fn read_current(&self, id: &str, path: &Path, expected_version: &str) -> Result<Vec<u8>> {
        let bytes = match fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let err = if self.profile.contains_key(id)? {
                    ApiError::new(
                        ErrorKind::ReadOnly,
                        format!("agent {id:?} is a profile agent; edit configs/{id}.yaml instead"),
                    )
                } else {
                    ApiError::new(ErrorKind::NotFound, format!("agent {id:?} not found"))
                };
                return Err(err.into());
            }
            Err(e) => return Err(RegistryError::io(path, e)),
        };
        let version = files::version_of(&bytes);
        if !expected_version.is_empty() && expected_version != version {
            return Err(ApiError::new(
                ErrorKind::VersionConflict,
                format!("agent {id:?} is at version {version}, not the expected {expected_version}; get it again and retry"),
            )
            .into());
        }
        Ok(bytes)
    }

    fn write_custom(&self, id: &str, path: &Path, def: &CustomAgentFile) -> Result<v1::Agent> {
        let yaml = definition::to_yaml(def)?;
        files::write_atomic(path, yaml.as_bytes()).map_err(|e| RegistryError::io(path, e))?;
        let agent = convert::custom_to_proto(id, files::version_of(yaml.as_bytes()), def);
        self.custom.insert(id, agent.encode_to_vec())?;
        self.forget_diagnostic(path);
        let mut agent = self.with_runtime(agent);
        agent.revision = self.notify_upserted(&agent);
        Ok(agent)
    }

    /// Tells watchers that `agent` was created or changed; returns the change's revision.
    fn notify_upserted(&self, agent: &v1::Agent) -> u64 {
        self.notify(
            ChangeKind::Upserted,
            &agent.agent_id,
            AgentSource::try_from(agent.source).unwrap_or(AgentSource::Custom),
            Some(agent.clone()),
        )
    }

    /// Tells watchers of a change (the caller holds the write lock); returns its revision.
    fn notify(
        &self,
        kind: ChangeKind,
        id: &str,
        source: AgentSource,
        agent: Option<v1::Agent>,
    ) -> u64 {
        let revision = self.revision.fetch_add(1, Ordering::AcqRel) + 1;
        let version = match (&agent, kind) {
            (Some(a), ChangeKind::Upserted | ChangeKind::Status) => a.version.clone(),
            _ => String::new(),
        };
        // No receivers is fine: nobody is watching.
        let _ = self.changes.send(v1::AgentChange {
            kind: kind.into(),
            agent_id: id.to_owned(),
            source: source.into(),
            version,
            agent,
            revision,
        });
        revision
    }

    // ---- runtime facts -----------------------------------------------------------------

    /// Records an agent's status; BUSY holds for `lease` unless reported again.
    pub fn report_status(
        &self,
        id: &str,
        status: v1::AgentStatus,
        last_task: &str,
        lease: Duration,
    ) -> Result<()> {
        let _guard = self.lock();
        let (source, tree) = if self.custom.contains_key(id)? {
            (AgentSource::Custom, &self.custom)
        } else if self.profile.contains_key(id)? {
            (AgentSource::Profile, &self.profile)
        } else {
            return Err(
                ApiError::new(ErrorKind::NotFound, format!("agent {id:?} not found")).into(),
            );
        };
        let mut facts = self.facts_of(id).unwrap_or_default();
        facts.busy_until_ms = match status {
            v1::AgentStatus::Busy => {
                now_ms().saturating_add(u64::try_from(lease.as_millis()).unwrap_or(u64::MAX))
            }
            v1::AgentStatus::Idle | v1::AgentStatus::Unspecified => 0,
        };
        if !last_task.is_empty() {
            facts.last_task = last_task.to_owned();
        }
        self.runtime.insert(
            id,
            serde_json::to_vec(&facts).map_err(|e| RegistryError::Config(e.to_string()))?,
        )?;
        if let Ok(mut all) = self.facts.write() {
            all.insert(id.to_owned(), facts.clone());
        }
        let version = match tree.get(id)? {
            Some(bytes) => v1::Agent::decode(bytes.as_ref())?.version,
            None => String::new(),
        };
        let status = v1::Agent {
            agent_id: id.to_owned(),
            source: source.into(),
            version,
            ..Default::default()
        };
        self.notify(ChangeKind::Status, id, source, Some(facts.apply(status)));
        Ok(())
    }

    fn facts_of(&self, id: &str) -> Option<RuntimeFacts> {
        self.facts.read().ok().and_then(|all| all.get(id).cloned())
    }

    fn forget_facts(&self, id: &str) -> Result<()> {
        self.runtime.remove(id)?;
        if let Ok(mut all) = self.facts.write() {
            all.remove(id);
        }
        Ok(())
    }

    /// Fills in what is not in the cache: status and last task from the runtime facts, and
    /// the resolved workspace path (from the config directory this registry serves).
    fn with_runtime(&self, mut agent: v1::Agent) -> v1::Agent {
        if let Some(v1::agent::Kind::Custom(custom)) = &mut agent.kind
            && let Some(ws) = custom.spec.as_ref().map(|s| s.workspace.as_str())
            && !ws.is_empty()
        {
            custom.workspace_path = definition::resolve_workspace(&self.root, ws)
                .to_string_lossy()
                .into_owned();
        }
        match self.facts_of(&agent.agent_id) {
            Some(facts) => facts.apply(agent),
            None => agent,
        }
    }

    // ---- reconcile ---------------------------------------------------------------------

    /// Brings the cache in line with every file in the config directory.
    pub fn reconcile_all(&self) -> Result<ReconcileStats> {
        let _guard = self.lock();
        let mut stats = ReconcileStats::default();
        for source in [AgentSource::Profile, AgentSource::Custom] {
            let dir = self.dir_of(source);
            let paths = files::yaml_files(dir).map_err(|e| RegistryError::io(dir, e))?;
            let mut seen = HashSet::with_capacity(paths.len());
            for path in paths {
                if source == AgentSource::Profile && is_not_profile(&path) {
                    continue;
                }
                stats.files += 1;
                if let Some(id) = files::stem(&path) {
                    seen.insert(id.to_owned());
                }
                self.reconcile_file(source, &path, &mut stats)?;
            }
            let tree = self.tree(source);
            for key in tree.iter().keys() {
                let key = key?;
                let id = String::from_utf8_lossy(&key).into_owned();
                if !seen.contains(&id) {
                    tree.remove(&key)?;
                    stats.removed += 1;
                    self.notify(ChangeKind::Deleted, &id, source, None);
                }
            }
            self.retain_diagnostics(dir, &seen);
        }
        Ok(stats)
    }

    /// Brings the cache in line with one file (created, changed or deleted).
    pub fn reconcile_path(&self, path: &Path) -> Result<ReconcileStats> {
        let mut stats = ReconcileStats::default();
        let Some(source) = self.source_of(path) else {
            return Ok(stats);
        };
        let _guard = self.lock();
        stats.files = 1;
        self.reconcile_file(source, path, &mut stats)?;
        Ok(stats)
    }

    fn source_of(&self, path: &Path) -> Option<AgentSource> {
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

    fn dir_of(&self, source: AgentSource) -> &Path {
        match source {
            AgentSource::Profile => &self.root,
            AgentSource::Custom | AgentSource::Unspecified => &self.custom_dir,
        }
    }

    fn reconcile_file(
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
                if tree.remove(id.as_bytes())?.is_some() {
                    stats.removed += 1;
                    self.notify(ChangeKind::Deleted, &id, source, None);
                }
                return Ok(());
            }
            Err(e) => return Err(RegistryError::io(path, e)),
        };
        let version = files::version_of(&bytes);
        if let Some(cached) = tree.get(id.as_bytes())?
            && v1::Agent::decode(cached.as_ref())
                .is_ok_and(|a| a.version == version && has_times(&a))
        {
            return Ok(());
        }
        match load(source, &id, version, &bytes) {
            Ok(mut agent) => {
                if let Some(v1::agent::Kind::Profile(p)) = &mut agent.kind {
                    (p.created_at, p.updated_at) = files::times(path);
                }
                tree.insert(id.as_bytes(), agent.encode_to_vec())?;
                self.forget_diagnostic(path);
                stats.updated += 1;
                self.notify_upserted(&self.with_runtime(agent));
            }
            Err(reason) => return self.skip_invalid(source, &id, path, reason, stats),
        }
        Ok(())
    }

    /// Leaves an invalid file out of the cache (dropping what it held), with a diagnostic.
    fn skip_invalid(
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
        if self.tree(source).remove(id.as_bytes())?.is_some() {
            stats.removed += 1;
            self.notify(ChangeKind::Deleted, id, source, None);
        }
        Ok(())
    }

    fn rel(&self, path: &Path) -> String {
        path.strip_prefix(&self.root)
            .unwrap_or(path)
            .display()
            .to_string()
    }

    fn remember_diagnostic(&self, path: &Path, reason: String) {
        if let Ok(mut d) = self.diagnostics.lock() {
            d.insert(self.rel(path), reason);
        }
    }

    fn forget_diagnostic(&self, path: &Path) {
        if let Ok(mut d) = self.diagnostics.lock() {
            d.remove(&self.rel(path));
        }
    }

    /// Drops diagnostics of files in `dir` that are gone.
    fn retain_diagnostics(&self, dir: &Path, present: &HashSet<String>) {
        let prefix = self.rel(dir);
        if let Ok(mut d) = self.diagnostics.lock() {
            d.retain(|rel, _| {
                let p = Path::new(rel);
                let parent = p
                    .parent()
                    .map(|x| x.display().to_string())
                    .unwrap_or_default();
                parent != prefix || files::stem(p).is_some_and(|s| present.contains(s))
            });
        }
    }
}

/// Reads every runtime fact; entries that do not decode are dropped (they are hints, not data).
fn load_facts(tree: &sled::Tree) -> Result<std::collections::HashMap<String, RuntimeFacts>> {
    let mut out = std::collections::HashMap::new();
    for item in tree.iter() {
        let (k, v) = item?;
        if let Ok(facts) = serde_json::from_slice(&v) {
            out.insert(String::from_utf8_lossy(&k).into_owned(), facts);
        }
    }
    Ok(out)
}

/// What the executor reported about an agent.
#[derive(Debug, Default, Clone, serde::Serialize, serde::Deserialize)]
struct RuntimeFacts {
    /// Unix milliseconds until which the agent counts as busy (0: idle).
    #[serde(default)]
    busy_until_ms: u64,
    #[serde(default)]
    last_task: String,
}

impl RuntimeFacts {
    /// `agent` with these facts: status (as of now), last task, and the lease's end.
    fn apply(self, mut agent: v1::Agent) -> v1::Agent {
        agent.status = if self.busy_until_ms > now_ms() {
            v1::AgentStatus::Busy
        } else {
            v1::AgentStatus::Idle
        }
        .into();
        agent.busy_until_ms = self.busy_until_ms;
        agent.last_task = self.last_task;
        agent
    }
}

/// Parses and validates one file into an `Agent`, or says why it cannot be served.
fn load(source: AgentSource, id: &str, version: String, bytes: &[u8]) -> Result<v1::Agent, String> {
    ids::validate_agent_id(id).map_err(|e| format!("file name is not a valid agent id: {e}"))?;
    match source {
        AgentSource::Profile => {
            let f: ProfileFile =
                serde_yaml::from_slice(bytes).map_err(|e| format!("invalid YAML: {e}"))?;
            Ok(convert::profile_to_proto(id, version, &f))
        }
        AgentSource::Custom | AgentSource::Unspecified => {
            let f: CustomAgentFile =
                serde_yaml::from_slice(bytes).map_err(|e| format!("invalid YAML: {e}"))?;
            definition::validate(id, &f)
                .map_err(|e| format!("invalid definition: {}", e.message))?;
            Ok(convert::custom_to_proto(id, version, &f))
        }
    }
}

/// Whether a cached agent has what a cache written by an older registry may lack: a profile's
/// file times.
fn has_times(agent: &v1::Agent) -> bool {
    match &agent.kind {
        Some(v1::agent::Kind::Profile(p)) => !p.updated_at.is_empty(),
        Some(v1::agent::Kind::Custom(_)) | None => true,
    }
}

fn is_not_profile(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| NOT_PROFILES.contains(&n))
}

/// Opens sled at `dir`; a database that cannot be opened is moved aside and rebuilt (the files
/// are the source of truth, so nothing is lost).
fn open_or_rebuild(dir: &Path) -> Result<sled::Db> {
    let config = |d: &Path| {
        sled::Config::new()
            .path(d)
            .cache_capacity(8 * 1024 * 1024)
            .mode(sled::Mode::LowSpace)
            .flush_every_ms(Some(1000))
    };
    match config(dir).open() {
        Ok(db) => Ok(db),
        Err(e) => {
            let aside = dir.with_extension(format!(
                "broken-{}",
                chrono::Utc::now().format("%Y%m%dT%H%M%S")
            ));
            warn!(dir = %dir.display(), aside = %aside.display(), error = %e, "cache cannot be opened; moving it aside and rebuilding from YAML");
            fs::rename(dir, &aside).map_err(|e| RegistryError::io(dir, e))?;
            Ok(config(dir).open()?)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent_file() -> CustomAgentFile {
        CustomAgentFile {
            name: "Agent".into(),
            description: "An agent".into(),
            prompt: definition::Prompt {
                system_prompt: "Be brief.".into(),
            },
            tools: definition::Allowlist {
                allowlist: vec!["file_read".into()],
            },
            ..Default::default()
        }
    }

    /// A reconciled store over a temporary config directory with one profile, `dev`.
    fn store_with_dev_profile() -> Result<(tempfile::TempDir, Store)> {
        let dir = tempfile::tempdir().map_err(|e| RegistryError::io(Path::new("tmp"), e))?;
        let root = dir.path().join("configs");
        fs::create_dir_all(&root).map_err(|e| RegistryError::io(&root, e))?;
        fs::write(root.join("dev.yaml"), "description: Dev\n")
            .map_err(|e| RegistryError::io(&root, e))?;
        let store = Store::open(&root, &dir.path().join("data"))?;
        store.reconcile_all()?;
        Ok((dir, store))
    }

    #[test]
    fn subagents_must_name_served_agents() -> Result<()> {
        let (_dir, store) = store_with_dev_profile()?;
        store.create("researcher", agent_file(), "2026-11-22T09:00:00Z")?;
        store.check_subagents("boss", &["researcher".into(), "dev".into()])?;
        let err = store.check_subagents("researcher", &["dev".into(), "nope".into()]);
        let Err(RegistryError::Api(e)) = err else {
            panic!("unknown sub-agents are refused: {err:?}");
        };
        assert_eq!(e.kind, ErrorKind::InvalidSubagents);
        let body = e.to_json();
        assert_eq!(body["invalid_subagents"], serde_json::json!(["nope"]));
        // Sorted, both sources, without the agent itself.
        assert_eq!(body["available_agents"], serde_json::json!(["dev"]));
        Ok(())
    }

    #[test]
    fn a_hand_written_file_may_name_an_agent_that_is_not_there_yet() -> Result<()> {
        let dir = tempfile::tempdir().map_err(|e| RegistryError::io(Path::new("tmp"), e))?;
        let root = dir.path().join("configs");
        let custom = root.join("custom");
        fs::create_dir_all(&custom).map_err(|e| RegistryError::io(&custom, e))?;
        let body = "name: Boss\ndescription: Delegates\nprompt: {system_prompt: p}\n\
                    tools: {allowlist: [delegate_to_agent]}\nsubagents: [zz-later]\nmodel: fast\n";
        fs::write(custom.join("boss.yaml"), body).map_err(|e| RegistryError::io(&custom, e))?;
        let selfish = body.replace("zz-later", "selfish");
        fs::write(custom.join("selfish.yaml"), selfish)
            .map_err(|e| RegistryError::io(&custom, e))?;
        let store = Store::open(&root, &dir.path().join("data"))?;
        let stats = store.reconcile_all()?;
        assert_eq!((stats.updated, stats.invalid), (1, 1), "{stats:?}");
        let Some(v1::agent::Kind::Custom(c)) = store.get("boss")?.kind else {
            panic!("boss is a custom agent");
        };
        let spec = c.spec.unwrap_or_default();
        assert_eq!(
            (spec.subagents, spec.model),
            (vec!["zz-later".into()], "fast".into())
        );
        let diagnostics = store.diagnostics();
        assert_eq!(diagnostics.len(), 1);
        assert!(
            diagnostics[0].0.ends_with("selfish.yaml"),
            "{diagnostics:?}"
        );
        assert!(diagnostics[0].1.contains("subagents"), "{diagnostics:?}");
        Ok(())
    }

    #[test]
    fn a_hand_written_mode_is_served_canonically_and_an_unknown_one_is_skipped() -> Result<()> {
        let dir = tempfile::tempdir().map_err(|e| RegistryError::io(Path::new("tmp"), e))?;
        let root = dir.path().join("configs");
        let custom = root.join("custom");
        fs::create_dir_all(&custom).map_err(|e| RegistryError::io(&custom, e))?;
        let body = "name: Reader\ndescription: Reads\nprompt: {system_prompt: p}\n\
                    tools: {allowlist: [file_read]}\nmode: read_only\n";
        fs::write(custom.join("reader.yaml"), body).map_err(|e| RegistryError::io(&custom, e))?;
        fs::write(
            custom.join("reckless.yaml"),
            body.replace("read_only", "yolo"),
        )
        .map_err(|e| RegistryError::io(&custom, e))?;
        let store = Store::open(&root, &dir.path().join("data"))?;
        let stats = store.reconcile_all()?;
        assert_eq!((stats.updated, stats.invalid), (1, 1), "{stats:?}");
        let Some(v1::agent::Kind::Custom(c)) = store.get("reader")?.kind else {
            panic!("reader is a custom agent");
        };
        assert_eq!(c.spec.unwrap_or_default().mode, "readOnly");
        assert!(store.get("reckless").is_err());
        let diagnostics = store.diagnostics();
        assert_eq!(diagnostics.len(), 1);
        assert!(
            diagnostics[0].0.ends_with("reckless.yaml"),
            "{diagnostics:?}"
        );
        assert!(diagnostics[0].1.contains("mode"), "{diagnostics:?}");
        Ok(())
    }

    #[test]
    fn busy_holds_for_its_lease_and_survives_a_reopen() -> Result<()> {
        let dir = tempfile::tempdir().map_err(|e| RegistryError::io(Path::new("tmp"), e))?;
        let (root, data) = (dir.path().join("configs"), dir.path().join("data"));
        let store = Store::open(&root, &data)?;
        store.reconcile_all()?;
        store.create("worker", agent_file(), "2026-11-22T09:00:00Z")?;
        let status = |s: &Store| s.get("worker").map(|a| (a.status, a.last_task));

        store.report_status(
            "worker",
            v1::AgentStatus::Busy,
            "sorting",
            Duration::from_secs(60),
        )?;
        assert_eq!(
            status(&store)?,
            (v1::AgentStatus::Busy.into(), "sorting".into())
        );
        // An expired lease reads as idle: a crashed executor cannot leave an agent busy.
        store.report_status("worker", v1::AgentStatus::Busy, "", Duration::ZERO)?;
        assert_eq!(
            status(&store)?,
            (v1::AgentStatus::Idle.into(), "sorting".into())
        );
        store.report_status("worker", v1::AgentStatus::Idle, "sorted", Duration::ZERO)?;
        store.flush()?;
        drop(store);

        let store = Store::open(&root, &data)?;
        store.reconcile_all()?;
        assert_eq!(
            status(&store)?,
            (v1::AgentStatus::Idle.into(), "sorted".into())
        );
        let unknown = store.report_status("nobody", v1::AgentStatus::Busy, "", Duration::ZERO);
        assert!(matches!(unknown, Err(RegistryError::Api(e)) if e.kind == ErrorKind::NotFound));
        Ok(())
    }

    #[test]
    fn a_snapshot_and_its_changes_make_every_write_visible_once_in_revision_order() -> Result<()> {
        let (_dir, store) = store_with_dev_profile()?;
        let first = store.create("alpha", agent_file(), "2026-11-22T09:00:00Z")?;
        let mut snap = store.snapshot()?;
        let ids: Vec<_> = snap.agents.iter().map(|a| a.agent_id.as_str()).collect();
        assert_eq!(ids, ["dev", "alpha"], "profiles first");
        // A profile carries its file's times.
        let Some(v1::agent::Kind::Profile(p)) = &snap.agents[0].kind else {
            panic!("dev is a profile");
        };
        assert!(
            p.created_at.ends_with('Z') && p.updated_at.ends_with('Z'),
            "{p:?}"
        );
        assert_eq!(
            snap.revision, first.revision,
            "the snapshot is at the last write"
        );
        // Nothing from before the snapshot is in its receiver.
        assert!(snap.changes.try_recv().is_err());

        let second = store.create("beta", agent_file(), "2026-11-22T09:00:00Z")?;
        store.report_status(
            "beta",
            v1::AgentStatus::Busy,
            "sorting",
            Duration::from_secs(60),
        )?;
        let deleted = store.delete("alpha", "")?;
        let mut changes = Vec::new();
        while let Ok(c) = snap.changes.try_recv() {
            changes.push(c);
        }
        let seen: Vec<_> = changes
            .iter()
            .map(|c| (c.kind(), c.agent_id.as_str()))
            .collect();
        assert_eq!(
            seen,
            [
                (ChangeKind::Upserted, "beta"),
                (ChangeKind::Status, "beta"),
                (ChangeKind::Deleted, "alpha"),
            ]
        );
        let revisions: Vec<_> = changes.iter().map(|c| c.revision).collect();
        assert_eq!(revisions, [second.revision, second.revision + 1, deleted]);
        // The upsert carries the agent as a read would answer it; the status change its facts.
        let upserted = changes[0].agent.clone().unwrap_or_default();
        assert_eq!(upserted.version, second.version);
        assert!(upserted.kind.is_some());
        let status = changes[1].agent.clone().unwrap_or_default();
        assert_eq!(status.status, i32::from(v1::AgentStatus::Busy));
        assert_eq!(status.last_task, "sorting");
        assert!(status.busy_until_ms > now_ms() && status.kind.is_none());
        Ok(())
    }

    #[test]
    fn revisions_keep_growing_across_a_reopen() -> Result<()> {
        let dir = tempfile::tempdir().map_err(|e| RegistryError::io(Path::new("tmp"), e))?;
        let (root, data) = (dir.path().join("configs"), dir.path().join("data"));
        let store = Store::open(&root, &data)?;
        let before = store.create("alpha", agent_file(), "2026-11-22T09:00:00Z")?;
        drop(store);
        let store = Store::open(&root, &data)?;
        let after = store.create("beta", agent_file(), "2026-11-22T09:00:00Z")?;
        assert!(
            after.revision > before.revision,
            "{} then {}",
            before.revision,
            after.revision
        );
        Ok(())
    }
}
