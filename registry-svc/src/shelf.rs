//! One source's agents (custom or profile): the sled tree that persists the cache across
//! restarts, and a decoded copy in memory that every read uses. Both change together, under the
//! store's write lock; reads never touch sled.

use std::{
    collections::BTreeMap,
    ops::Bound,
    sync::{Arc, RwLock},
};

use prost::Message;
use taskforce_proto::v1;

use crate::error::Result;

/// The agents of one source.
pub struct Shelf {
    tree: sled::Tree,
    mem: RwLock<BTreeMap<String, Arc<v1::Agent>>>,
}

impl Shelf {
    /// Loads the decoded copy from `tree`; entries that do not decode are left to the reconcile,
    /// which reads their files again.
    pub fn open(tree: sled::Tree) -> Result<Self> {
        let mut mem = BTreeMap::new();
        for item in tree.iter() {
            let (key, value) = item?;
            if let Ok(agent) = v1::Agent::decode(value.as_ref()) {
                mem.insert(String::from_utf8_lossy(&key).into_owned(), Arc::new(agent));
            }
        }
        Ok(Self {
            tree,
            mem: RwLock::new(mem),
        })
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, Arc<v1::Agent>>> {
        self.mem
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<String, Arc<v1::Agent>>> {
        self.mem
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The agent with this id.
    pub fn get(&self, id: &str) -> Option<Arc<v1::Agent>> {
        self.read().get(id).cloned()
    }

    /// True when an agent has this id.
    pub fn contains(&self, id: &str) -> bool {
        self.read().contains_key(id)
    }

    /// Number of agents.
    pub fn len(&self) -> usize {
        self.read().len()
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.read().is_empty()
    }

    /// Adds or replaces an agent (keyed by its id).
    pub fn insert(&self, agent: v1::Agent) -> Result<()> {
        self.tree
            .insert(agent.agent_id.as_bytes(), agent.encode_to_vec())?;
        self.write().insert(agent.agent_id.clone(), Arc::new(agent));
        Ok(())
    }

    /// Removes an agent; true when there was one (in memory or in sled).
    pub fn remove(&self, id: &str) -> Result<bool> {
        let in_tree = self.tree.remove(id.as_bytes())?.is_some();
        let in_mem = self.write().remove(id).is_some();
        Ok(in_tree || in_mem)
    }

    /// Every id in sled or in memory (undecodable sled entries included, so a reconcile can drop
    /// them).
    pub fn ids(&self) -> Result<Vec<String>> {
        let mut ids: Vec<String> = self.read().keys().cloned().collect();
        for key in self.tree.iter().keys() {
            ids.push(String::from_utf8_lossy(&key?).into_owned());
        }
        ids.sort_unstable();
        ids.dedup();
        Ok(ids)
    }

    /// Up to `limit` agents after `after` (all from the start when `None`), in id order.
    pub fn page(&self, after: Option<&str>, limit: usize) -> Vec<Arc<v1::Agent>> {
        let lower = after.map_or(Bound::Unbounded, |a| Bound::Excluded(a.to_owned()));
        self.read()
            .range::<String, _>((lower, Bound::Unbounded))
            .take(limit)
            .map(|(_, a)| Arc::clone(a))
            .collect()
    }
}
