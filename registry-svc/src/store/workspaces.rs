//! One workspace per agent. A custom agent's file names its `workspace_id` (the API writes a
//! fresh UUID on create; a file without one is served with a UUID derived from its agent id),
//! so a file copied from another agent's names that agent's workspace. Like a file that lists a
//! tool twice, such a copy is served rather than refused (refusing would make agents vanish on
//! upgrade): with the workspace id derived from its own agent id, and a warning naming both
//! files. The files are not changed; an update through the API writes the id the agent is
//! served with.
//!
//! Of the agents whose files name one workspace id, the one that keeps it is
//! 1. the agent whose id it is derived from (its own id is the only one it could fall back to);
//! 2. else the agent served with it before the other file was read (the cache remembers who is
//!    served with what, so neither a restart nor a reconcile changes it);
//! 3. else, for files that are read for the first time in the same pass (a new or rebuilt
//!    cache, or duplicates cached by a registry without this rule), the agent created first
//!    (`created_at` as served), then the one whose file is older, then the smaller agent id.
//!
//! The index of who is served with which workspace id lives in memory: built from the cache at
//! open, changed only under the write lock.

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    path::{Path, PathBuf},
    time::SystemTime,
};

use chrono::{DateTime, Utc};
use prost::Message;
use taskforce_proto::v1;
use tracing::warn;

use super::Store;
use crate::{definition, error::Result, files};

/// Who is served with which workspace id.
#[derive(Debug, Default)]
pub(super) struct Workspaces {
    /// A workspace id (canonical, see [`canonical`]) → the custom agent served with it.
    holders: HashMap<String, String>,
    /// Workspace ids taken in the current pass by an agent not served with them before: who
    /// keeps one of them is decided by rule 3, not by which file was read first.
    fresh: HashSet<String>,
}

/// What decides who keeps a workspace id two agents' files name (see the module's rules).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Claim {
    /// The workspace id is derived from this agent's id.
    pub derives: bool,
    /// The agent was served with it before this pass.
    pub prior: bool,
    /// The agent's `created_at` as served, when it is RFC 3339.
    pub created: Option<DateTime<Utc>>,
    /// When the agent's file was made (its modification time where creation times are not kept).
    pub file_created: Option<SystemTime>,
    /// The agent id.
    pub id: String,
}

impl Claim {
    /// The claim of custom agent `id`, served as `agent`, on `workspace_id`.
    fn of(workspace_id: &str, id: &str, agent: &v1::Agent, prior: bool, path: &Path) -> Self {
        let created = match &agent.kind {
            Some(v1::agent::Kind::Custom(c)) => DateTime::parse_from_rfc3339(&c.created_at)
                .ok()
                .map(|t| t.with_timezone(&Utc)),
            _ => None,
        };
        let file_created = std::fs::metadata(path)
            .ok()
            .and_then(|m| m.created().or_else(|_| m.modified()).ok());
        Self {
            derives: canonical(&definition::derived_workspace_id(id)) == canonical(workspace_id),
            prior,
            created,
            file_created,
            id: id.to_owned(),
        }
    }

    /// Whether this claim keeps the workspace id over `other`'s. Unknown times count as the
    /// latest; the ids of two agents differ, so one of two claims always wins.
    pub fn beats(&self, other: &Self) -> bool {
        let key = |c: &Self| {
            (
                !c.derives,
                !c.prior,
                c.created.is_none(),
                c.created,
                c.file_created.is_none(),
                c.file_created,
                c.id.clone(),
            )
        };
        key(self) < key(other)
    }
}

impl Store {
    fn workspaces(&self) -> std::sync::MutexGuard<'_, Workspaces> {
        self.workspaces
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Indexes the cached custom agents by workspace id (at open, before anything else uses the
    /// store). Two served with one id (cached by a registry without this rule) are settled:
    /// the keeper by rule 1, else rule 3; the others move to their own ids. Counts the cached
    /// custom agents' bytes on the way.
    pub(super) fn index_workspaces(&self) -> Result<()> {
        let mut groups: BTreeMap<String, Vec<(String, v1::Agent)>> = BTreeMap::new();
        let mut bytes = 0;
        for item in self.custom.iter() {
            let (key, value) = item?;
            bytes += value.len() as u64;
            let Ok(agent) = v1::Agent::decode(value.as_ref()) else {
                continue;
            };
            if let Some(w) = workspace_of(&agent) {
                let id = String::from_utf8_lossy(&key).into_owned();
                groups.entry(canonical(w)).or_default().push((id, agent));
            }
        }
        // Before any move below, whose rewrite changes it by its difference.
        self.custom_bytes.set(bytes);
        let mut ws = self.workspaces();
        let mut moving = Vec::new();
        for (w, mut agents) in groups {
            if agents.len() > 1 {
                // Every one of them was served with it: rule 2 decides nothing.
                let claims: Vec<Claim> = agents
                    .iter()
                    .map(|(id, a)| Claim::of(&w, id, a, true, &self.custom_file(id)))
                    .collect();
                let mut keeper = 0;
                for (i, claim) in claims.iter().enumerate().skip(1) {
                    if claim.beats(&claims[keeper]) {
                        keeper = i;
                    }
                }
                agents.swap(0, keeper);
            }
            let mut agents = agents.into_iter();
            if let Some((keeper, _)) = agents.next() {
                for (id, _) in agents {
                    moving.push((id, w.clone(), keeper.clone()));
                }
                ws.holders.insert(w, keeper);
            }
        }
        for (id, w, keeper) in moving {
            self.move_to_own(&mut ws, &id, &w, &keeper)?;
        }
        Ok(())
    }

    /// Settles the workspace id of custom agent `id`, about to be cached as `agent` (read from
    /// its file, or written through the API): it keeps the id its file names unless another
    /// agent keeps that (see the module's rules), and then gets its own derived id. `before` is
    /// the workspace id it was served with until now.
    pub(super) fn settle_workspace(
        &self,
        id: &str,
        agent: &mut v1::Agent,
        before: Option<&str>,
    ) -> Result<()> {
        let Some(named) = workspace_of(agent).map(str::to_owned) else {
            return Ok(());
        };
        let w = canonical(&named);
        let before = before.map(canonical);
        let prior = before.as_deref() == Some(w.as_str());
        let mut ws = self.workspaces();
        // A holder whose file is gone (renamed, removed) or names another id now is only not
        // reconciled yet: it keeps nothing.
        let holder = match ws.holders.get(&w) {
            Some(h) if h == id => None,
            Some(h) => self
                .cached_custom(h)?
                .filter(|_| self.file_still_names(h, &w))
                .map(|a| (h.clone(), a)),
            None => None,
        };
        if let Some(old) = before.filter(|old| *old != w) {
            ws.release(id, &old);
        }
        if ws.holders.get(&w).is_some_and(|h| h == id) {
            return Ok(());
        }
        let Some((holder, held)) = holder else {
            ws.holders.insert(w.clone(), id.to_owned());
            if prior {
                ws.fresh.remove(&w);
            } else {
                ws.fresh.insert(w);
            }
            return Ok(());
        };
        let mine = Claim::of(&w, id, agent, prior, &self.custom_file(id));
        let holder_prior = !ws.fresh.contains(&w);
        let theirs = Claim::of(&w, &holder, &held, holder_prior, &self.custom_file(&holder));
        if mine.beats(&theirs) {
            ws.holders.insert(w.clone(), id.to_owned());
            if !prior {
                ws.fresh.insert(w.clone());
            }
            self.move_to_own(&mut ws, &holder, &w, id)
        } else {
            let own = self.take_own(&mut ws, id)?;
            warn!(
                agent_id = id,
                path = %self.custom_file(id).display(),
                other_agent_id = %holder,
                other_path = %self.custom_file(&holder).display(),
                workspace_id = %named,
                served_workspace_id = %own,
                "the agent's file names another agent's workspace_id (a copied file?); it is served with a workspace_id of its own"
            );
            set_workspace(agent, own);
            Ok(())
        }
    }

    /// Custom agent `id`, served as `removed` until now, left the cache: its workspace id is
    /// free again.
    pub(super) fn release_workspace(&self, id: &str, removed: &[u8]) {
        if let Some(w) = v1::Agent::decode(removed)
            .ok()
            .as_ref()
            .and_then(workspace_of)
        {
            self.workspaces().release(id, &canonical(w));
        }
    }

    /// The workspace id an API update writes into custom agent `id`'s file, which names `named`:
    /// `served`, the one the agent is served with (an update keeps it, also for a copy whose
    /// original is gone), else the file's while no other agent keeps it, else (a copied file,
    /// none named, not a UUID) the one derived from `id`.
    pub(super) fn workspace_for_update(
        &self,
        id: &str,
        served: Option<&str>,
        named: Option<String>,
    ) -> String {
        let ws = self.workspaces();
        served
            .map(str::to_owned)
            .into_iter()
            .chain(named)
            .filter(|w| uuid::Uuid::parse_str(w).is_ok())
            .find(|w| ws.holders.get(&canonical(w)).is_none_or(|h| h == id))
            .unwrap_or_else(|| definition::derived_workspace_id(id))
    }

    /// Whether custom agent `holder`'s file still names workspace id `w` (canonical), itself or
    /// (naming none) through the id derived from `holder`.
    fn file_still_names(&self, holder: &str, w: &str) -> bool {
        let Ok(Some(bytes)) =
            files::read_at_most(&self.custom_file(holder), files::MAX_DEFINITION_BYTES)
        else {
            return false;
        };
        let named = match files::yaml::<definition::CustomAgentFile>(&bytes) {
            Ok(file) => file.workspace_id,
            Err(_) => super::write::kept_fields(&bytes).0,
        };
        canonical(&named.unwrap_or_else(|| definition::derived_workspace_id(holder))) == w
    }

    /// Ends a pass: what was taken in it counts as served from now on (rule 2).
    pub(super) fn end_workspace_pass(&self) {
        self.workspaces().fresh.clear();
    }

    /// Takes the workspace id derived from `id` for it; an agent served with that one (its file
    /// names it) moves to its own. Returns the id.
    fn take_own(&self, ws: &mut Workspaces, id: &str) -> Result<String> {
        let own = definition::derived_workspace_id(id);
        ws.fresh.remove(&own);
        if let Some(other) = ws.holders.insert(own.clone(), id.to_owned())
            && other != id
        {
            self.move_to_own(ws, &other, &own, id)?;
        }
        Ok(own)
    }

    /// Custom agent `id`, served with workspace id `lost` that `keeper` keeps, is served with
    /// its own derived one from now on.
    fn move_to_own(&self, ws: &mut Workspaces, id: &str, lost: &str, keeper: &str) -> Result<()> {
        let Some(mut agent) = self.cached_custom(id)? else {
            return Ok(());
        };
        let own = self.take_own(ws, id)?;
        warn!(
            agent_id = id,
            path = %self.custom_file(id).display(),
            other_agent_id = keeper,
            other_path = %self.custom_file(keeper).display(),
            workspace_id = lost,
            served_workspace_id = %own,
            "the agent's file names another agent's workspace_id (a copied file?), which that agent keeps; it is served with a workspace_id of its own"
        );
        set_workspace(&mut agent, own);
        self.cache(v1::AgentSource::Custom, id, &agent)?;
        self.notify_upserted(&self.with_runtime(agent));
        Ok(())
    }

    /// Custom agent `id` as cached.
    pub(super) fn cached_custom(&self, id: &str) -> Result<Option<v1::Agent>> {
        Ok(self
            .custom
            .get(id.as_bytes())?
            .and_then(|bytes| v1::Agent::decode(bytes.as_ref()).ok()))
    }

    /// The definition file of custom agent `id`.
    fn custom_file(&self, id: &str) -> PathBuf {
        self.custom_dir.join(format!("{id}.{}", files::EXT))
    }
}

impl Workspaces {
    /// `id` is no longer served with `w`.
    fn release(&mut self, id: &str, w: &str) {
        if self.holders.get(w).is_some_and(|h| h == id) {
            self.holders.remove(w);
            self.fresh.remove(w);
        }
    }
}

/// The workspace id a cached custom agent is served with (none in an entry cached before
/// there were workspace ids).
fn workspace_of(agent: &v1::Agent) -> Option<&str> {
    match &agent.kind {
        Some(v1::agent::Kind::Custom(c)) if !c.workspace_id.is_empty() => {
            Some(c.workspace_id.as_str())
        }
        _ => None,
    }
}

fn set_workspace(agent: &mut v1::Agent, w: String) {
    if let Some(v1::agent::Kind::Custom(c)) = &mut agent.kind {
        c.workspace_id = w;
    }
}

/// One spelling per UUID (a file may write it in capitals, or without hyphens), so a copy is
/// recognised however it spells the id.
fn canonical(w: &str) -> String {
    uuid::Uuid::parse_str(w).map_or_else(|_| w.to_owned(), |u| u.to_string())
}

#[cfg(test)]
mod tests;
