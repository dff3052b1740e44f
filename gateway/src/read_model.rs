//! The gateway's copy of every agent, kept current by the registry's change stream, so reading
//! an agent or a list costs no registry call.
//!
//! [`ReadModel::follow`] asks the registry for `WatchAgents` with a snapshot: every agent, then
//! a `KIND_SYNCED` marker, then each change as it happens (definitions, deletions, and the
//! BUSY/IDLE facts the executors report). Each agent is held as its REST JSON, rendered once,
//! without the two runtime fields, which are appended when served (`status` is computed from
//! the lease's end at that moment, so an expired lease reads as idle here too).
//!
//! The copy is only used while the stream is connected and the snapshot is complete; before
//! that, and from the moment the stream is lost until a new snapshot is complete, reads go to
//! the registry as they would without a copy: a reader never gets stale data silently. A write
//! through this gateway waits, before it answers, until the stream has delivered the change it
//! made (the registry stamps every change with a growing revision), so a client always reads
//! its own writes; a change that does not arrive within [`WRITE_VISIBLE_WITHIN`] drops the copy
//! and reconnects.

use std::{
    collections::BTreeMap,
    ops::Bound,
    sync::{Arc, RwLock},
    time::Duration,
};

use axum::body::Bytes;
use taskforce_proto::{
    error::ApiError,
    page_token,
    v1::{self, AgentSource, agent_change::Kind as ChangeKind},
};
use taskforce_runtime::{now_ms, telemetry::TracedChannel};
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use crate::model::AgentJson;

/// Longest wait for the change stream to deliver a write made through this gateway.
pub const WRITE_VISIBLE_WITHIN: Duration = Duration::from_secs(2);
/// Longest pause between two attempts to reach the change stream.
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// The end of an agent's JSON with the runtime facts of an idle agent that never ran; what the
/// stored JSON is cut before.
const IDLE_TAIL: &[u8] = br#","status":"idle","last_task":null}"#;

/// The answer of a lookup in the copy.
#[derive(Debug)]
pub enum Lookup<T> {
    /// The copy is not in sync: ask the registry.
    NotSynced,
    /// The copy's answer.
    Found(T),
}

/// One agent, as served.
#[derive(Debug)]
pub struct AgentBody {
    /// Its JSON.
    pub json: Vec<u8>,
    /// Its `ETag` ([`etag`]).
    pub etag: String,
}

/// The `ETag` of an agent's JSON: `"<version>"` while its runtime facts are as a new agent's
/// (idle, no `last_task`), else `"<version>-<16 hex digits>"`, the hash of the facts as served,
/// so that a `GET` naming an earlier tag in `If-None-Match` gets the new status, not a 304. A
/// write's `If-Match` compares the version only ([`crate::extract::parse_if_match`]): a run
/// that changed the status in between does not make an update conflict.
pub fn etag(version: &str, busy: bool, last_task: &str) -> String {
    use sha2::Digest;
    if !busy && last_task.is_empty() {
        return format!("\"{version}\"");
    }
    // The same on every gateway and build: gateways behind one load balancer agree.
    let mut facts = sha2::Sha256::new();
    facts.update(if busy { b"busy\0" } else { b"idle\0" });
    facts.update(last_task.as_bytes());
    format!("\"{version}-{}\"", hex::encode(&facts.finalize()[..8]))
}

/// The `ETag`s of an agent idle and busy.
fn etags(version: &str, last_task: &str) -> [String; 2] {
    [false, true].map(|busy| etag(version, busy, last_task))
}

/// The version an `ETag`'s value (unquoted) names: a tag of [`etag`] carries the runtime facts
/// after the version, and a write's precondition is the version alone.
pub fn version_of_etag(tag: &str) -> &str {
    match tag.rsplit_once('-') {
        Some((version, facts))
            if !version.is_empty()
                && facts.len() == 16
                && facts.bytes().all(|b| b.is_ascii_hexdigit()) =>
        {
            version
        }
        _ => tag,
    }
}

/// A cloneable handle on the copy.
#[derive(Debug, Clone, Default)]
pub struct ReadModel {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// `None` while not in sync.
    agents: RwLock<Option<Agents>>,
    /// Whether the copy is in sync, and the revision of the latest change applied.
    progress: watch::Sender<Progress>,
    /// Asks the follower to drop the stream and take a new snapshot.
    resync: Notify,
}

#[derive(Debug, Default, Clone, Copy)]
struct Progress {
    synced: bool,
    revision: u64,
}

/// Every agent by source and id.
#[derive(Debug, Default)]
struct Agents {
    profile: BTreeMap<String, Entry>,
    custom: BTreeMap<String, Entry>,
}

/// One agent: its JSON up to the runtime facts, and the facts.
#[derive(Debug, Clone)]
struct Entry {
    json: Listed,
    version: String,
    /// Its `ETag` while idle and while busy ([`etag`]): made when the facts change, not at
    /// each read (whether it is busy depends on the time of the read).
    etags: [String; 2],
}

impl Entry {
    /// The entry of a registry agent; `None` (logged) for one without a definition.
    fn of(mut agent: v1::Agent) -> Option<Self> {
        let (busy_until_ms, last_task) =
            (agent.busy_until_ms, std::mem::take(&mut agent.last_task));
        let version = agent.version.clone();
        let id = agent.agent_id.clone();
        agent.status = v1::AgentStatus::Idle.into();
        let Some(json) = AgentJson::from_proto(agent) else {
            error!(agent_id = %id, "registry sent an agent without a definition; left out");
            return None;
        };
        let mut head = serde_json::to_vec(&json).ok()?;
        if !head.ends_with(IDLE_TAIL) {
            error!(agent_id = %id, "an agent's JSON does not end with its runtime facts; left out");
            return None;
        }
        head.truncate(head.len() - IDLE_TAIL.len());
        Some(Self {
            json: Listed {
                head: head.into(),
                busy_until_ms,
                last_task: last_task_json(&last_task),
            },
            etags: etags(&version, &last_task),
            version,
        })
    }

    /// Takes the runtime facts of a status change.
    fn set_facts(&mut self, agent: &v1::Agent) {
        self.json.busy_until_ms = agent.busy_until_ms;
        self.json.last_task = last_task_json(&agent.last_task);
        self.etags = etags(&self.version, &agent.last_task);
    }

    /// Appends the agent's JSON, with its status as of `now_ms`.
    fn write(&self, now_ms: u64, out: &mut Vec<u8>) {
        self.json.write(now_ms, out);
    }
}

/// An agent's JSON as served (in the copy, and in a [`Listing`], which shares it).
#[derive(Debug, Clone)]
struct Listed {
    /// The REST JSON without `,"status":…,"last_task":…}`.
    head: Bytes,
    busy_until_ms: u64,
    /// `last_task` as JSON (`null` or a string).
    last_task: Bytes,
}

impl Listed {
    /// Appends the agent's JSON, with its status as of `now_ms`.
    fn write(&self, now_ms: u64, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.head);
        out.extend_from_slice(if self.busy_until_ms > now_ms {
            br#","status":"busy","last_task":"#
        } else {
            br#","status":"idle","last_task":"#
        });
        out.extend_from_slice(&self.last_task);
        out.push(b'}');
    }

    /// About the bytes [`Listed::write`] appends.
    fn len(&self) -> usize {
        self.head.len() + self.last_task.len() + 32
    }
}

/// A page of the agent list (or all of it) as of the moment it was taken: the agents' JSON is
/// shared with the copy, and the body is written from it as it is sent ([`Listing::chunks`]),
/// so a client that reads slowly holds a handle per agent instead of the whole body.
#[derive(Debug)]
pub struct Listing {
    items: Vec<Listed>,
    /// The `next_page_token` as JSON, when there is more.
    next_page_token: Option<Vec<u8>>,
    now_ms: u64,
}

impl Listing {
    /// About the bytes of the body.
    pub fn len_hint(&self) -> usize {
        self.items.iter().map(Listed::len).sum::<usize>() + 64
    }

    /// The whole body.
    pub fn into_vec(mut self) -> Vec<u8> {
        let mut next = 0;
        self.write_from(&mut next, usize::MAX, self.len_hint())
    }

    /// The body in pieces of about `size` bytes (at least one agent each), each written when
    /// it is asked for.
    pub fn chunks(mut self, size: usize) -> impl Iterator<Item = Bytes> + Send {
        let capacity = size.min(self.len_hint()) + 1024;
        let mut next = 0;
        let mut done = false;
        std::iter::from_fn(move || {
            if done {
                return None;
            }
            let out = self.write_from(&mut next, size, capacity);
            done = next == self.items.len();
            Some(Bytes::from(out))
        })
    }

    /// Writes the agents from `*next` on until about `size` bytes are written (at least one
    /// agent), the list's opening before the first and its end after the last.
    fn write_from(&mut self, next: &mut usize, size: usize, capacity: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(capacity);
        if *next == 0 {
            out.extend_from_slice(br#"{"agents":["#);
        }
        let first = *next;
        while *next < self.items.len() && (out.len() < size || *next == first) {
            if *next > 0 {
                out.push(b',');
            }
            self.items[*next].write(self.now_ms, &mut out);
            *next += 1;
        }
        if *next == self.items.len() {
            out.push(b']');
            if let Some(token) = self.next_page_token.take() {
                out.extend_from_slice(br#","next_page_token":"#);
                out.extend_from_slice(&token);
            }
            out.push(b'}');
        }
        out
    }
}

/// `last_task` as JSON: `null` when empty.
fn last_task_json(task: &str) -> Bytes {
    if task.is_empty() {
        Bytes::from_static(b"null")
    } else {
        json_string(task).into()
    }
}

/// `s` as a JSON string.
fn json_string(s: &str) -> Vec<u8> {
    // Serialising a string into a Vec cannot fail.
    serde_json::to_vec(s).unwrap_or_else(|_| b"\"\"".to_vec())
}

impl Agents {
    fn tree(&mut self, source: AgentSource) -> &mut BTreeMap<String, Entry> {
        match source {
            AgentSource::Profile => &mut self.profile,
            AgentSource::Custom | AgentSource::Unspecified => &mut self.custom,
        }
    }

    /// Applies one change of the stream (not `KIND_SYNCED`).
    fn apply(&mut self, change: v1::AgentChange) {
        let source = change.source();
        match (change.kind(), change.agent) {
            (ChangeKind::Upserted, Some(agent)) => match Entry::of(agent) {
                Some(entry) => {
                    self.tree(source).insert(change.agent_id, entry);
                }
                None => {
                    self.tree(source).remove(&change.agent_id);
                }
            },
            (ChangeKind::Deleted, _) => {
                self.tree(source).remove(&change.agent_id);
            }
            (ChangeKind::Status, Some(agent)) => {
                if let Some(entry) = self.tree(source).get_mut(&change.agent_id) {
                    entry.set_facts(&agent);
                }
            }
            (kind, _) => {
                warn!(?kind, agent_id = %change.agent_id, "ignored a malformed agent change")
            }
        }
    }

    /// A custom agent, else a profile agent of that id (as the registry answers).
    fn get(&self, id: &str) -> Option<&Entry> {
        self.custom.get(id).or_else(|| self.profile.get(id))
    }

    /// The `GET /api/v1/agents` body: profiles first, then custom agents, each by id; one page
    /// of `page_size` after `token`, or everything.
    #[cfg(test)]
    fn list(
        &self,
        source: AgentSource,
        page_size: Option<usize>,
        token: &str,
    ) -> Result<Vec<u8>, ApiError> {
        self.listing(source, page_size, token)
            .map(Listing::into_vec)
    }

    /// What [`Agents::list`] sends, not yet written.
    fn listing(
        &self,
        source: AgentSource,
        page_size: Option<usize>,
        token: &str,
    ) -> Result<Listing, ApiError> {
        let start = page_token::parse(token, source)?;
        let order: &[(AgentSource, &BTreeMap<String, Entry>)] = match source {
            AgentSource::Unspecified => &[
                (AgentSource::Profile, &self.profile),
                (AgentSource::Custom, &self.custom),
            ],
            AgentSource::Profile => &[(AgentSource::Profile, &self.profile)],
            AgentSource::Custom => &[(AgentSource::Custom, &self.custom)],
        };
        let limit = page_size.unwrap_or(usize::MAX);
        let mut listing = Listing {
            items: Vec::with_capacity(order.iter().map(|(_, t)| t.len()).sum::<usize>().min(limit)),
            next_page_token: None,
            now_ms: now_ms(),
        };
        let mut started = start.is_none();
        let mut last: Option<(AgentSource, &str)> = None;
        for &(src, tree) in order {
            let lower = match start {
                Some((s, after)) if s == src => {
                    started = true;
                    Bound::Excluded(after)
                }
                _ if started => Bound::Unbounded,
                _ => continue,
            };
            for (id, entry) in tree.range::<str, _>((lower, Bound::Unbounded)) {
                if listing.items.len() == limit {
                    // There is more: the token points after the last agent of this page.
                    let (s, id) = last.unwrap_or((src, id.as_str()));
                    listing.next_page_token = Some(json_string(&page_token::make(s, id)));
                    return Ok(listing);
                }
                listing.items.push(entry.json.clone());
                last = Some((src, id.as_str()));
            }
        }
        Ok(listing)
    }
}

impl ReadModel {
    /// An empty copy, not in sync until [`ReadModel::follow`] has a snapshot.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether reads are served from the copy.
    pub fn is_synced(&self) -> bool {
        self.inner.progress.borrow().synced
    }

    /// Agent `id` from the copy: `Found(None)` when there is no such agent.
    pub fn get(&self, id: &str) -> Lookup<Option<AgentBody>> {
        let Ok(guard) = self.inner.agents.read() else {
            return Lookup::NotSynced;
        };
        let Some(agents) = guard.as_ref() else {
            return Lookup::NotSynced;
        };
        Lookup::Found(agents.get(id).map(|entry| {
            let now = now_ms();
            let mut json = Vec::with_capacity(entry.json.len());
            entry.write(now, &mut json);
            AgentBody {
                json,
                etag: entry.etags[usize::from(entry.json.busy_until_ms > now)].clone(),
            }
        }))
    }

    /// The body of `GET /api/v1/agents` from the copy (see the handler for the parameters).
    pub fn list(
        &self,
        source: AgentSource,
        page_size: Option<usize>,
        token: &str,
    ) -> Lookup<Result<Listing, ApiError>> {
        let Ok(guard) = self.inner.agents.read() else {
            return Lookup::NotSynced;
        };
        match guard.as_ref() {
            Some(agents) => Lookup::Found(agents.listing(source, page_size, token)),
            None => Lookup::NotSynced,
        }
    }

    /// Waits until the copy holds the change of `revision` (a write's answer), so the writer's
    /// next read sees it. Returns at once when the copy is not in sync (reads go to the
    /// registry then); a change that does not arrive in time drops the copy and asks for a new
    /// snapshot.
    pub async fn wait_for(&self, revision: u64) {
        if revision == 0 {
            return;
        }
        let mut progress = self.inner.progress.subscribe();
        let arrived = progress.wait_for(|p| !p.synced || p.revision >= revision);
        if tokio::time::timeout(WRITE_VISIBLE_WITHIN, arrived)
            .await
            .is_err()
        {
            warn!(
                revision,
                "the registry's change stream did not deliver a write in time; serving reads from the registry until it has caught up"
            );
            self.drop_copy();
            self.inner.resync.notify_one();
        }
    }

    fn drop_copy(&self) {
        if let Ok(mut agents) = self.inner.agents.write() {
            *agents = None;
        }
        self.inner.progress.send_modify(|p| p.synced = false);
    }

    /// Follows the registry's change stream until `shutdown`: takes a snapshot, then applies
    /// every change; when the stream is lost (or stalls), drops the copy and tries again with
    /// backoff. `connect_timeout` bounds opening the stream; an idle stream is kept honest by
    /// the channel's HTTP/2 keep-alive.
    pub async fn follow(
        self,
        client: v1::agent_registry_client::AgentRegistryClient<TracedChannel>,
        connect_timeout: Duration,
        shutdown: CancellationToken,
    ) {
        let mut backoff = Duration::from_millis(100);
        loop {
            let result = tokio::select! {
                () = shutdown.cancelled() => return,
                r = self.follow_once(client.clone(), connect_timeout) => r,
            };
            let was_synced = self.is_synced();
            self.drop_copy();
            match result {
                Ok(()) => backoff = Duration::from_millis(100),
                // A stream that served starts over quickly: the registry restarting is the
                // usual cause, and it is back within a moment.
                Err(why) if was_synced => {
                    info!(error = %why, "lost the registry's change stream; reads go to the registry until it is back");
                    backoff = Duration::from_millis(100);
                }
                Err(why) => debug!(error = %why, "registry change stream not available"),
            }
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    /// One stream: `Ok` when asked to resync after being in sync, `Err` with the reason when
    /// the stream could not be opened or broke.
    async fn follow_once(
        &self,
        mut client: v1::agent_registry_client::AgentRegistryClient<TracedChannel>,
        connect_timeout: Duration,
    ) -> Result<(), String> {
        let open = client.watch_agents(v1::WatchAgentsRequest {
            snapshot: true,
            exclude_status: false,
        });
        let mut stream = tokio::time::timeout(connect_timeout, open)
            .await
            .map_err(|_| "the registry did not open the stream in time".to_owned())?
            .map_err(|s| s.message().to_owned())?
            .into_inner();
        let mut building = Some(Agents::default());
        loop {
            let change = tokio::select! {
                () = self.inner.resync.notified() => return Ok(()),
                next = stream.message() => match next {
                    Ok(Some(change)) => change,
                    Ok(None) => return Err("the registry ended the stream".to_owned()),
                    Err(status) => return Err(status.message().to_owned()),
                },
            };
            let revision = change.revision;
            match (change.kind(), building.as_mut()) {
                (ChangeKind::Synced, Some(_)) => {
                    let agents = building.take().unwrap_or_default();
                    let count = agents.profile.len() + agents.custom.len();
                    if let Ok(mut slot) = self.inner.agents.write() {
                        *slot = Some(agents);
                    }
                    self.inner.progress.send_replace(Progress {
                        synced: true,
                        revision,
                    });
                    info!(
                        agents = count,
                        "serving agent reads from the registry's change stream"
                    );
                }
                (ChangeKind::Synced, None) => {
                    return Err("the registry sent a second snapshot marker".to_owned());
                }
                (_, Some(snapshot)) => snapshot.apply(change),
                (_, None) => {
                    if let Ok(mut slot) = self.inner.agents.write()
                        && let Some(agents) = slot.as_mut()
                    {
                        agents.apply(change);
                    }
                    self.inner
                        .progress
                        .send_modify(|p| p.revision = p.revision.max(revision));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
