//! Changes: every mutation gets the next revision and goes to the watchers; a snapshot gives a
//! watcher every agent plus exactly the changes after them.

use std::sync::atomic::Ordering;

use prost::Message;
use taskforce_proto::v1::{self, AgentSource, agent_change::Kind as ChangeKind};
use tokio::sync::broadcast;

use super::Store;
use crate::error::Result;

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

    /// Tells watchers that `agent` was created or changed; returns the change's revision.
    pub(super) fn notify_upserted(&self, agent: &v1::Agent) -> u64 {
        self.notify(
            ChangeKind::Upserted,
            &agent.agent_id,
            AgentSource::try_from(agent.source).unwrap_or(AgentSource::Custom),
            Some(agent.clone()),
        )
    }

    /// Tells watchers of a change (the caller holds the write lock); returns its revision.
    pub(super) fn notify(
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
}
