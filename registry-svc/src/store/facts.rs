//! Runtime facts the executors report: BUSY for a lease (one hold per reporting executor), the
//! last task. Not in YAML; kept in their own sled tree and in memory, so reads never touch the
//! tree.

use std::{collections::BTreeMap, time::Duration};

use prost::Message;
use taskforce_proto::{
    error::{ApiError, ErrorKind},
    v1::{self, AgentSource, agent_change::Kind as ChangeKind},
};
use taskforce_runtime::now_ms;

use super::Store;
use crate::{
    definition,
    error::{RegistryError, Result},
};

impl Store {
    /// Records `reporter`'s status of an agent: BUSY holds for `lease` unless reported again,
    /// IDLE ends `reporter`'s hold only (another executor's run keeps the agent BUSY).
    pub fn report_status(
        &self,
        id: &str,
        status: v1::AgentStatus,
        last_task: &str,
        lease: Duration,
        reporter: &str,
    ) -> Result<()> {
        let _guard = self.lock();
        let Some((source, tree)) = self.tree_of(id)? else {
            return Err(
                ApiError::new(ErrorKind::NotFound, format!("agent {id:?} not found")).into(),
            );
        };
        let mut facts = self.facts_of(id).unwrap_or_default();
        let now = now_ms();
        facts.holds.retain(|_, until| *until > now);
        match status {
            v1::AgentStatus::Busy => {
                let until =
                    now.saturating_add(u64::try_from(lease.as_millis()).unwrap_or(u64::MAX));
                facts.holds.insert(reporter.to_owned(), until);
            }
            v1::AgentStatus::Idle | v1::AgentStatus::Unspecified => {
                facts.holds.remove(reporter);
            }
        }
        if !last_task.is_empty() {
            facts.last_task = last_task.to_owned();
        }
        self.put_facts(id, source, tree, facts)
    }

    /// Ends every hold of `reporter` (an executor restarting under its name: the runs its
    /// previous process held are gone); returns the agents whose hold ended, sorted.
    pub fn release_holds(&self, reporter: &str) -> Result<Vec<String>> {
        let _guard = self.lock();
        let now = now_ms();
        let mut held: Vec<(String, RuntimeFacts)> = match self.facts.read() {
            Ok(all) => all
                .iter()
                .filter(|(_, f)| f.holds.get(reporter).is_some_and(|until| *until > now))
                .map(|(id, f)| (id.clone(), f.clone()))
                .collect(),
            Err(_) => Vec::new(),
        };
        held.sort_by(|a, b| a.0.cmp(&b.0));
        let mut released = Vec::with_capacity(held.len());
        for (id, mut facts) in held {
            // An agent deleted meanwhile has no facts to keep.
            let Some((source, tree)) = self.tree_of(&id)? else {
                continue;
            };
            facts.holds.retain(|r, until| r != reporter && *until > now);
            self.put_facts(&id, source, tree, facts)?;
            released.push(id);
        }
        Ok(released)
    }

    /// The source and cache tree holding agent `id`, if any.
    fn tree_of(&self, id: &str) -> Result<Option<(AgentSource, &sled::Tree)>> {
        Ok(if self.custom.contains_key(id)? {
            Some((AgentSource::Custom, &self.custom))
        } else if self.profile.contains_key(id)? {
            Some((AgentSource::Profile, &self.profile))
        } else {
            None
        })
    }

    /// Stores `facts` of agent `id` (in `tree`) in sled and in memory, and tells the watchers
    /// its status. Called with the store's lock held.
    fn put_facts(
        &self,
        id: &str,
        source: AgentSource,
        tree: &sled::Tree,
        mut facts: RuntimeFacts,
    ) -> Result<()> {
        facts.busy_until_ms = facts.busy_until();
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

    pub(super) fn facts_of(&self, id: &str) -> Option<RuntimeFacts> {
        self.facts.read().ok().and_then(|all| all.get(id).cloned())
    }

    pub(super) fn forget_facts(&self, id: &str) -> Result<()> {
        self.runtime.remove(id)?;
        if let Ok(mut all) = self.facts.write() {
            all.remove(id);
        }
        Ok(())
    }

    /// Fills in what is not in the cache: status and last task from the runtime facts, and
    /// the resolved workspace path (from the config directory this registry serves).
    pub(super) fn with_runtime(&self, mut agent: v1::Agent) -> v1::Agent {
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
}

/// Reads every runtime fact; entries that do not decode are dropped (they are hints, not data).
pub(super) fn load_facts(
    tree: &sled::Tree,
) -> Result<std::collections::HashMap<String, RuntimeFacts>> {
    let mut out = std::collections::HashMap::new();
    for item in tree.iter() {
        let (k, v) = item?;
        if let Ok(mut facts) = serde_json::from_slice::<RuntimeFacts>(&v) {
            // Written before holds were kept per reporter: the unnamed reporter's.
            if facts.holds.is_empty() && facts.busy_until_ms > 0 {
                facts.holds.insert(String::new(), facts.busy_until_ms);
            }
            out.insert(String::from_utf8_lossy(&k).into_owned(), facts);
        }
    }
    Ok(out)
}

/// What the executors reported about an agent.
#[derive(Debug, Default, Clone, serde::Serialize, serde::Deserialize)]
pub(super) struct RuntimeFacts {
    /// Per reporter (an executor's instance name, "" for an unnamed one), the Unix
    /// milliseconds until which its BUSY holds.
    #[serde(default)]
    holds: BTreeMap<String, u64>,
    /// The end of the last hold: all facts written before holds were per reporter have
    /// (read as the unnamed reporter's hold), and all a registry of that time can read.
    #[serde(default)]
    busy_until_ms: u64,
    #[serde(default)]
    last_task: String,
}

impl RuntimeFacts {
    /// When the last hold ends (0: none).
    fn busy_until(&self) -> u64 {
        self.holds.values().copied().max().unwrap_or(0)
    }

    /// `agent` with these facts: status (as of now), last task, and the end of the last hold.
    fn apply(self, mut agent: v1::Agent) -> v1::Agent {
        let busy_until_ms = self.busy_until();
        agent.status = if busy_until_ms > now_ms() {
            v1::AgentStatus::Busy
        } else {
            v1::AgentStatus::Idle
        }
        .into();
        agent.busy_until_ms = busy_until_ms;
        agent.last_task = self.last_task;
        agent
    }
}
