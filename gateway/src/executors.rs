//! The executors behind the gateway (`--executor-url`): one, several, or none, and which one a
//! session belongs to.
//!
//! Several executors are named (`NAME=URL`, the names their `--instance` flags give them; one
//! may be). A new run goes to the next executor in turn, with a session id the gateway mints
//! as `<name>_<uuid>` for a named one ([`taskforce_proto::ids::mint_session_id`]); every later
//! call about that session (answer, cancel, lookup, plan, the next chat turn) goes to the
//! executor its id names, also after that executor restarted; a minted id naming an executor
//! the gateway does not list is an error naming it. A session id chosen by a client names no
//! owner: it goes to the executor that rendezvous hashing of the id picks, the same one every
//! time as long as the list of names is the same, or, when that one does not hold it (the list
//! changed), to the one that does ([`Executors::locate`]). A new run whose executor cannot take it (down,
//! stopping, hung) goes to the next one instead, so one executor down does not fail or slow
//! every other new run; a session's calls only ever go to its owner, and when it is down the
//! error names it.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use taskforce_proto::{
    error::ErrorKind,
    ids,
    v1::{ExecuteRequest, RunEvent, executor_client::ExecutorClient},
};
use taskforce_runtime::telemetry::{TracedChannel, traced};
use tonic::transport::Channel;
use tonic_health::pb::health_client::HealthClient;
use tracing::warn;

use crate::{
    channel::lazy_channel,
    error::{GatewayError, RestError},
};

/// One executor.
#[derive(Clone)]
pub struct Replica {
    /// Its instance name (`None` for a single unnamed executor).
    pub name: Option<String>,
    /// Its URL, as configured.
    pub url: String,
    /// Its `taskforce.v1.Executor` client.
    pub client: ExecutorClient<TracedChannel>,
    /// Its `grpc.health.v1.Health` client over the same channel.
    pub health: HealthClient<Channel>,
}

impl Replica {
    /// Waits for this executor to answer a new run's `call`; after `start` ([`START_TIMEOUT`])
    /// without an answer, waits on only if the executor answers a health check within `alive`
    /// ([`ALIVE_TIMEOUT`]; any answer: it is alive, just slow), else gives up with an
    /// `Unavailable` that says so.
    async fn take_unless_hung<T>(
        &self,
        call: impl std::future::Future<Output = Result<T, tonic::Status>>,
        (start, alive): (Duration, Duration),
    ) -> Result<T, tonic::Status> {
        tokio::pin!(call);
        if let Ok(answer) = tokio::time::timeout(start, &mut call).await {
            return answer;
        }
        let mut health = self.health.clone();
        // No `grpc-timeout` on the probe: tonic would end it as `Cancelled`, an answer from
        // nobody, racing the timer here.
        let probe = tokio::time::timeout(
            alive,
            health.check(tonic_health::pb::HealthCheckRequest::default()),
        );
        tokio::select! {
            answer = &mut call => answer,
            answered = probe => match answered {
                // The executor's own answers: it is alive (a refused token is still an answer).
                Ok(Ok(_)) => call.await,
                Ok(Err(status)) if matches!(status.code(), tonic::Code::Unauthenticated | tonic::Code::PermissionDenied | tonic::Code::NotFound | tonic::Code::Unimplemented) => call.await,
                _ => Err(tonic::Status::unavailable(format!(
                    "it did not take the run within {start:?}, nor answer a health check within {alive:?}"
                ))),
            },
        }
    }

    /// `call` with a client of this executor: its answer, or the REST error naming it.
    pub async fn call<T, Fut>(
        &self,
        call: impl FnOnce(ExecutorClient<TracedChannel>) -> Fut,
    ) -> Result<T, RestError>
    where
        Fut: std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        call(self.client.clone())
            .await
            .map(tonic::Response::into_inner)
            .map_err(|status| self.error(status))
    }

    /// The REST error for a status this executor answered, naming it when it has a name.
    pub fn error(&self, status: tonic::Status) -> RestError {
        match &self.name {
            Some(name) => RestError::from_upstream(status, &format!("executor `{name}`")),
            None => RestError::from_upstream(status, "executor"),
        }
    }
}

/// Whether a call failed because its executor could not be reached or went away under it (a
/// stopping executor's GOAWAY, a reset), not because the executor answered that it cannot run
/// it (its registry down: every executor would answer the same). A new run that failed so goes
/// to another executor with a new session id; one an executor did start before it went away
/// lost its client, so that executor cancels it.
pub fn unreachable(status: &tonic::Status) -> bool {
    (status.code() == tonic::Code::Unavailable && !taskforce_proto::error::from_taskforce(status))
        || crate::error::lost_connection(status)
}

/// Whether an executor refused the gateway's own credentials (its `TASKFORCE_SERVICE_TOKEN`):
/// the client was let in by the gateway, so the refusal is the executor's keys, not the run's.
fn refuses_gateway(status: &tonic::Status) -> bool {
    matches!(
        status.code(),
        tonic::Code::Unauthenticated | tonic::Code::PermissionDenied
    )
}

/// How long a new run waits for its executor to take it, while another executor could, before
/// asking whether that executor is alive at all: a hung executor (a stopped process, a stalled
/// machine) accepts connections but answers nothing, and only HTTP/2 keep-alive (10 s) would
/// notice.
const START_TIMEOUT: Duration = Duration::from_secs(5);

/// How long that executor then has to answer a health check on the same connection. One that
/// does is only slow to start the run (a slow registry or disk, which every executor would meet
/// alike): the run keeps waiting for it, and the executor's own timeouts bound the wait. One
/// that does not is passed over.
const ALIVE_TIMEOUT: Duration = Duration::from_secs(2);

/// Most client-chosen session ids [`Executors::locate`] remembers on another executor than
/// they hash to (past it, it forgets them all and finds each again on its next call).
const MOVED_KEPT: usize = 4096;

/// How long an executor that could not take a new run is asked only after the others.
const SUSPECT_FOR: Duration = Duration::from_secs(30);

/// A new run as [`Executors::start_new`] left it: the executor that answered last, the session
/// id the run got, and that executor's answer (when none could take it, `start_new` is the
/// error naming them all instead).
pub struct Started<'a> {
    pub replica: &'a Replica,
    pub session_id: Option<String>,
    pub answer: Result<tonic::Response<tonic::Streaming<RunEvent>>, tonic::Status>,
}

/// The configured executors; cloning clones reference counts.
#[derive(Clone)]
pub struct Executors {
    replicas: Arc<[Replica]>,
    /// Client-chosen session ids found on another executor than they hash to (see
    /// [`Executors::locate`]), so their later calls ask no one; at most [`MOVED_KEPT`].
    moved: Arc<std::sync::Mutex<std::collections::HashMap<String, usize>>>,
    next: Arc<AtomicUsize>,
    /// Per replica, until when (ms after `epoch`) new runs try it last: it could not take one.
    suspect_until: Arc<[AtomicU64]>,
    epoch: Instant,
}

impl Executors {
    /// Parses `--executor-url`: empty (no executor), one URL (optionally `NAME=URL`), or several
    /// comma-separated `NAME=URL` entries with distinct names. Connects lazily: no I/O here.
    pub fn parse(
        spec: &str,
        authorization: Option<http::HeaderValue>,
    ) -> Result<Self, GatewayError> {
        let entries: Vec<&str> = spec
            .split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .collect();
        let bad = |why: String| GatewayError::Config(format!("--executor-url: {why}"));
        let mut replicas: Vec<Replica> = Vec::with_capacity(entries.len());
        for entry in &entries {
            let (name, url) = match entry.split_once('=') {
                Some((name, url)) => (Some(name.trim()), url.trim()),
                None => (None, *entry),
            };
            if let Some(name) = name {
                if !ids::is_instance_name(name) {
                    return Err(bad(format!(
                        "`{name}` is not an executor name: 1-{} lowercase letters, digits and `-`, starting with a letter or digit",
                        ids::MAX_INSTANCE_LEN
                    )));
                }
                if replicas.iter().any(|r| r.name.as_deref() == Some(name)) {
                    return Err(bad(format!("the name `{name}` is given twice")));
                }
            } else if entries.len() > 1 {
                return Err(bad(format!(
                    "`{entry}` has no name: with several executors each entry is NAME=URL (the executor's --instance)"
                )));
            }
            if let Some(other) = replicas.iter().find(|r| r.url == url) {
                return Err(bad(format!(
                    "`{url}` is given twice (as `{}` and `{}`): each executor once",
                    other.name.as_deref().unwrap_or_default(),
                    name.unwrap_or_default()
                )));
            }
            let channel =
                lazy_channel(url).map_err(|reason| GatewayError::ExecutorUrl { reason })?;
            replicas.push(Replica {
                name: name.map(str::to_owned),
                url: url.to_owned(),
                client: ExecutorClient::new(traced(channel.clone(), authorization.clone()))
                    .max_decoding_message_size(taskforce_runtime::MAX_DECODING_BYTES),
                health: HealthClient::new(channel),
            });
        }
        Ok(Self {
            moved: Arc::default(),
            suspect_until: replicas.iter().map(|_| AtomicU64::new(0)).collect(),
            replicas: replicas.into(),
            next: Arc::new(AtomicUsize::new(0)),
            epoch: Instant::now(),
        })
    }

    /// Every executor (for readiness).
    pub fn all(&self) -> &[Replica] {
        &self.replicas
    }

    /// Every executor, or the error that there is none (for a call that needs them all).
    pub fn every(&self) -> Result<&[Replica], RestError> {
        if self.replicas.is_empty() {
            return Err(no_executor());
        }
        Ok(&self.replicas)
    }

    /// The executor that owns session `id` by its id alone (see [`Executors::locate`]).
    pub fn owner(&self, id: &str) -> Result<&Replica, RestError> {
        Ok(&self.replicas[self.owner_index(id)?])
    }

    /// The executor of session `id`, for a call about it. An id naming its owner, or one
    /// executor: that one ([`Executors::owner`]), with no call. A client's own id with several
    /// executors: the one rendezvous hashing picks when it holds the session (or cannot say:
    /// down); else the first other one that holds it, all asked at once within
    /// [`ALIVE_TIMEOUT`] (but those that could not take a run lately), since a change in the
    /// list of names (an executor added or removed) moves about 1/N of such ids and their
    /// sessions stay where they were, and remembered, so its later calls ask no one; else the
    /// hashed one, where a run naming the id starts it. Without the search a moved chat thread would
    /// go on as a new conversation, its memory on the other executor.
    pub async fn locate(&self, id: &str) -> Result<&Replica, RestError> {
        let index = self.owner_index(id)?;
        let hashed = &self.replicas[index];
        let named =
            ids::session_owner(id).is_some_and(|owner| hashed.name.as_deref() == Some(owner));
        if self.replicas.len() == 1 || named {
            return Ok(hashed);
        }
        let remembered = self.moved.lock().ok().and_then(|m| m.get(id).copied());
        if let Some(i) = remembered {
            return Ok(&self.replicas[i]);
        }
        if holds(hashed, id).await != Some(false) {
            return Ok(hashed);
        }
        // Those that could not take a run lately are not waited on.
        let now = self.now_ms();
        let others = self
            .replicas
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != index && self.suspect_until[i].load(Ordering::Relaxed) <= now)
            .map(|(i, r)| async move { (holds(r, id).await == Some(true)).then_some(i) });
        let found = futures::future::join_all(others)
            .await
            .into_iter()
            .flatten()
            .next();
        let Some(i) = found else {
            return Ok(hashed);
        };
        tracing::info!(session_id = %id, executor = self.replicas[i].name.as_deref().unwrap_or_default(), hashed = hashed.name.as_deref().unwrap_or_default(), "session found on another executor than its id hashes to (the list of executors changed)");
        if let Ok(mut moved) = self.moved.lock() {
            if moved.len() >= MOVED_KEPT {
                moved.clear();
            }
            moved.insert(id.to_owned(), i);
        }
        Ok(&self.replicas[i])
    }

    /// Starts `request`'s run and returns its event stream. A request naming a session goes to
    /// the session's owner; a new run goes through [`Executors::start_new`].
    pub async fn execute(
        &self,
        request: ExecuteRequest,
    ) -> Result<tonic::Streaming<RunEvent>, RestError> {
        if let Some(id) = &request.session_id {
            return self
                .locate(id)
                .await?
                .call(|mut client| async move { client.execute(request).await })
                .await;
        }
        let started = self.start_new(request).await?;
        started
            .answer
            .map(tonic::Response::into_inner)
            .map_err(|status| started.replica.error(status))
    }

    /// Starts a new run (`request` names no session, or a session id minted for it that this
    /// replaces when the executors are named): the next executor in turn takes it; when
    /// that one cannot ([`unreachable`], or hung: no answer within [`START_TIMEOUT`] nor to a
    /// health check, while another could) the next one is tried, each at most once, and it is
    /// offered new runs last for [`SUSPECT_FOR`]. One at its most live runs passes the run on
    /// too (the last one's answer is the client's), without being suspect. With several executors
    /// and none able to take it, the error names them all. The chat endpoint starts new
    /// conversations through it too.
    pub async fn start_new(&self, mut request: ExecuteRequest) -> Result<Started<'_>, RestError> {
        if self.replicas.is_empty() {
            return Err(no_executor());
        }
        let order = self.start_order(self.next.fetch_add(1, Ordering::Relaxed));
        let count = order.len();
        let mut last_session = request.session_id.clone();
        for (tried, index) in order.into_iter().enumerate() {
            let replica = &self.replicas[index];
            let last = tried + 1 == count;
            // A named executor's sessions carry its name, also when it is the only one (so
            // they keep their owner when a second one is added).
            if let Some(name) = replica.name.as_deref() {
                request.session_id = Some(ids::mint_session_id(Some(name)));
                last_session.clone_from(&request.session_id);
            }
            // Copied only while another executor may still have to be asked.
            let attempt = if last {
                std::mem::take(&mut request)
            } else {
                request.clone()
            };
            let mut client = replica.client.clone();
            let call = client.execute(attempt);
            let answer = if last {
                call.await
            } else {
                replica
                    .take_unless_hung(call, (START_TIMEOUT, ALIVE_TIMEOUT))
                    .await
            };
            match &answer {
                Ok(_) => self.suspect_until[index].store(0, Ordering::Relaxed),
                Err(status) if unreachable(status) => {
                    let until = self.now_ms().saturating_add(ms(SUSPECT_FOR));
                    self.suspect_until[index].store(until, Ordering::Relaxed);
                    warn!(executor = replica.name.as_deref().unwrap_or_default(), error = %status.message(), last, "executor could not take a new run");
                    if !last {
                        continue;
                    }
                    if count > 1
                        && let Err(status) = answer
                    {
                        return Err(self.none_reachable(replica, status));
                    }
                }
                // At its most live runs: another may have room (not suspect: it answers).
                Err(status) if status.code() == tonic::Code::ResourceExhausted && !last => {
                    continue;
                }
                // It refuses the gateway's service token (a key rotated on some executors
                // first): another may take it, and this one is offered runs last, as a down one.
                Err(status) if refuses_gateway(status) && !last => {
                    let until = self.now_ms().saturating_add(ms(SUSPECT_FOR));
                    self.suspect_until[index].store(until, Ordering::Relaxed);
                    warn!(executor = replica.name.as_deref().unwrap_or_default(), error = %status.message(), "executor refuses the gateway's service token; the new run goes to the next one");
                    continue;
                }
                Err(_) => {}
            }
            return Ok(Started {
                replica,
                session_id: last_session,
                answer,
            });
        }
        Err(no_executor())
    }

    /// The executors new run number `turn` is offered to: those that did not recently fail to
    /// take one, in turn (each of them gets its share while another is suspect), then those
    /// that did.
    fn start_order(&self, turn: usize) -> Vec<usize> {
        let now = self.now_ms();
        let (healthy, suspects): (Vec<usize>, Vec<usize>) = (0..self.replicas.len())
            .partition(|&i| self.suspect_until[i].load(Ordering::Relaxed) <= now);
        let mut order = Vec::with_capacity(self.replicas.len());
        for group in [healthy, suspects] {
            if !group.is_empty() {
                let first = turn % group.len();
                order.extend_from_slice(&group[first..]);
                order.extend_from_slice(&group[..first]);
            }
        }
        order
    }

    /// The error of a new run no executor took: with several, naming them all.
    fn none_reachable(&self, last: &Replica, status: tonic::Status) -> RestError {
        if self.replicas.len() < 2 {
            return last.error(status);
        }
        let names: Vec<&str> = self
            .replicas
            .iter()
            .filter_map(|r| r.name.as_deref())
            .collect();
        RestError::new(
            ErrorKind::Unavailable,
            format!(
                "no executor could take the run ({}); try again later",
                names.join(", ")
            ),
        )
    }

    fn now_ms(&self) -> u64 {
        ms(self.epoch.elapsed())
    }

    /// The executor of session `id`: the one its id names; else, for an id a gateway or an
    /// executor minted (`<name>_<uuid>`) naming an executor this gateway does not list, an
    /// error (the session is elsewhere: asking another executor would call it missing, and a
    /// run naming it would start a second session under its id); else (a client's own id)
    /// the one rendezvous hashing picks.
    fn owner_index(&self, id: &str) -> Result<usize, RestError> {
        if self.replicas.is_empty() {
            return Err(no_executor());
        }
        let named = |name: &str| {
            self.replicas
                .iter()
                .position(|r| r.name.as_deref() == Some(name))
        };
        if let Some(i) = ids::session_owner(id).and_then(named) {
            return Ok(i);
        }
        // Only a minted id pays for the list of names.
        let names = || -> Vec<&str> {
            self.replicas
                .iter()
                .filter_map(|r| r.name.as_deref())
                .collect()
        };
        if let Some(owner) = ids::minted_owner(id)
            && let names = names()
            && !names.is_empty()
        {
            return Err(RestError::new(
                ErrorKind::Unavailable,
                format!(
                    "session `{id}` belongs to executor `{owner}`, which this gateway does not \
                     list (its --executor-url names {})",
                    names.join(", ")
                ),
            ));
        }
        if self.replicas.len() == 1 {
            return Ok(0);
        }
        // Rendezvous hashing: the highest score of (name, id) wins.
        let score = |r: &Replica| score(r.name.as_deref().unwrap_or_default(), id);
        Ok(self
            .replicas
            .iter()
            .enumerate()
            .max_by_key(|(_, r)| score(r))
            .map_or(0, |(i, _)| i))
    }
}

/// Whether `replica` holds session `id` (its plan, the smallest answer about a session):
/// `None` when it cannot say (down, slow, refusing).
async fn holds(replica: &Replica, id: &str) -> Option<bool> {
    let mut request = tonic::Request::new(taskforce_proto::v1::GetPlanRequest {
        session_id: id.to_owned(),
    });
    request.set_timeout(ALIVE_TIMEOUT);
    match tokio::time::timeout(ALIVE_TIMEOUT, replica.client.clone().get_plan(request)).await {
        Ok(Ok(_)) => Some(true),
        Ok(Err(status)) if status.code() == tonic::Code::NotFound => Some(false),
        _ => None,
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn no_executor() -> RestError {
    RestError::new(
        ErrorKind::Unavailable,
        "this gateway has no executor (its --executor-url is empty)",
    )
}

/// FNV-1a over `name`, a separator and `id`, then MurmurHash3's 64-bit finaliser so that ids
/// differing in their last characters still score independently: stable across builds and
/// platforms, unlike std's hasher, so every gateway replica picks the same executor for an id.
fn score(name: &str, id: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes().chain([0]).chain(id.bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(e: &Executors) -> Vec<Option<&str>> {
        e.all().iter().map(|r| r.name.as_deref()).collect()
    }

    #[tokio::test]
    async fn parses_none_one_and_several() {
        assert!(Executors::parse("", None).is_ok_and(|e| e.all().is_empty()));
        let one = Executors::parse("http://127.0.0.1:50052", None).expect("one");
        assert_eq!(names(&one), [None]);
        let two = Executors::parse("a=http://a:1, b=http://b:1", None).expect("two");
        assert_eq!(names(&two), [Some("a"), Some("b")]);
        for bad in [
            "http://a:1,http://b:1",
            "a=http://a:1,a=http://b:1",
            "A=http://a:1",
            "a=not a url",
        ] {
            assert!(Executors::parse(bad, None).is_err(), "{bad}");
        }
    }

    #[tokio::test]
    async fn executors_that_could_not_take_a_run_are_offered_the_next_ones_last() {
        let e =
            Executors::parse("e0=http://e0:1,e1=http://e1:1,e2=http://e2:1", None).expect("three");
        assert_eq!(e.start_order(1), [1, 2, 0]);
        e.suspect_until[0].store(e.now_ms() + ms(SUSPECT_FOR), Ordering::Relaxed);
        // While e0 is suspect, e1 and e2 take turns (not e1 twice as often).
        let firsts: Vec<usize> = (0..4).map(|turn| e.start_order(turn)[0]).collect();
        assert_eq!(firsts, [1, 2, 1, 2]);
        assert_eq!(e.start_order(1), [2, 1, 0]);
    }

    #[tokio::test]
    async fn sessions_stay_with_their_owner_and_new_runs_take_turns() {
        let e =
            Executors::parse("e0=http://e0:1,e1=http://e1:1,e2=http://e2:1", None).expect("three");
        let mut owners = Vec::new();
        for _ in 0..3 {
            let next = e.start_order(e.next.fetch_add(1, Ordering::Relaxed))[0];
            let id = ids::mint_session_id(e.all()[next].name.as_deref());
            let owner = ids::session_owner(&id).expect("owned").to_owned();
            assert_eq!(
                e.all()[e.owner_index(&id).expect("routed")].name.as_deref(),
                Some(owner.as_str())
            );
            owners.push(owner);
        }
        owners.sort();
        assert_eq!(owners, ["e0", "e1", "e2"]);
        // A client's own id: the same executor every time, and ids spread over all of them.
        let picked: std::collections::BTreeSet<usize> = (0..60)
            .map(|i| e.owner_index(&format!("thread-{i}")).expect("routed"))
            .collect();
        assert_eq!(picked.len(), 3);
        assert_eq!(
            e.owner_index("thread-7").ok(),
            e.owner_index("thread-7").ok()
        );
        // A minted id of an executor this gateway does not list (scaled down, a typo in one
        // gateway's list) is not hashed to another one, where it would not exist.
        let elsewhere = ids::mint_session_id(Some("e3"));
        let err = e.owner_index(&elsewhere).expect_err("not listed");
        assert_eq!(err.0.kind, ErrorKind::Unavailable);
        assert_eq!(
            err.0.message,
            format!(
                "session `{elsewhere}` belongs to executor `e3`, which this gateway does not list \
                 (its --executor-url names e0, e1, e2)"
            )
        );
        // A client's own id with a `_` is hashed as before, also `<word>_<a v4 UUID>`.
        assert!(e.owner_index("e3_my-thread").is_ok());
        assert!(
            e.owner_index(&format!("e3_{}", uuid::Uuid::new_v4()))
                .is_ok()
        );
        // One unnamed executor takes every id (its own are `<its --instance>_<uuid>`).
        let one = Executors::parse("http://e0:1", None).expect("one");
        assert_eq!(one.owner_index(&elsewhere).ok(), Some(0));
        assert!(
            Executors::parse("", None)
                .expect("none")
                .owner("x")
                .is_err()
        );
    }

    /// An executor's address whose health service answers (`serving`), or a listener that takes
    /// connections and answers nothing (a stopped process).
    async fn executor_at(serving: bool) -> (Replica, tokio::task::JoinHandle<()>) {
        let (url, task) = if serving {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("listener");
            let url = format!("http://{}", listener.local_addr().expect("address"));
            let (_, health) = tonic_health::server::health_reporter();
            let task = tokio::spawn(async move {
                let _ = tonic::transport::Server::builder()
                    .add_service(health)
                    .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
                    .await;
            });
            (url, task)
        } else {
            crate::tests::silent_listener().await
        };
        let e = Executors::parse(&format!("e0={url}"), None).expect("one");
        (e.all()[0].clone(), task)
    }

    /// An HTTP/2 server at a new address answering every request with `answer`: `None` resets
    /// the stream (what a call meets when the executor's connection breaks under it, e.g. a
    /// GOAWAY of a stopping executor), `Some(status)` a gRPC answer of that status and no
    /// messages.
    async fn h2_server_at(answer: Option<u8>) -> (String, tokio::task::JoinHandle<()>) {
        use hyper_util::{rt::TokioExecutor, rt::TokioIo, server::conn::auto};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("listener");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let service = tower::service_fn(move |_: http::Request<_>| async move {
                    let status = answer.ok_or_else(|| std::io::Error::other("connection broke"))?;
                    http::Response::builder()
                        .header("content-type", "application/grpc")
                        .header("grpc-status", status.to_string())
                        .body(axum::body::Body::empty())
                        .map_err(std::io::Error::other)
                });
                tokio::spawn(async move {
                    let _ = auto::Builder::new(TokioExecutor::new())
                        .http2_only()
                        .serve_connection(
                            TokioIo::new(tcp),
                            hyper_util::service::TowerToHyperService::new(service),
                        )
                        .await;
                });
            }
        });
        (url, task)
    }

    #[tokio::test]
    async fn a_new_run_moves_on_from_an_executor_whose_connection_breaks_or_that_refuses_the_gateway()
     {
        // A broken connection (a gRPC INTERNAL "h2 protocol error", not UNAVAILABLE), and an
        // executor refusing the gateway's token (UNAUTHENTICATED, PERMISSION_DENIED).
        for first in [None, Some(16), Some(7)] {
            let (refusing, refusing_task) = h2_server_at(first).await;
            let (ok, ok_task) = h2_server_at(Some(0)).await;
            let e = Executors::parse(&format!("e0={refusing},e1={ok}"), None).expect("two");
            let status = e.all()[0]
                .client
                .clone()
                .execute(ExecuteRequest::default())
                .await
                .expect_err("refused");
            assert!(
                crate::error::lost_connection(&status) || refuses_gateway(&status),
                "{status:?}"
            );
            // The next run is e0's turn first: it goes on to e1, and e0 is offered runs last.
            e.next.store(0, Ordering::Relaxed);
            let started = e
                .start_new(ExecuteRequest::default())
                .await
                .map_err(|err| format!("{err:?}"))
                .expect("started");
            assert_eq!(started.replica.name.as_deref(), Some("e1"), "{first:?}");
            assert!(started.answer.is_ok(), "{:?}", started.answer.err());
            assert!(
                started
                    .session_id
                    .as_deref()
                    .is_some_and(|id| ids::session_owner(id) == Some("e1")),
                "{:?}",
                started.session_id
            );
            assert_eq!(e.start_order(0), [1, 0], "{first:?}");
            refusing_task.abort();
            ok_task.abort();
        }
    }

    #[tokio::test]
    async fn a_single_named_executor_gets_session_ids_with_its_name() {
        let (ok, ok_task) = h2_server_at(Some(0)).await;
        let named = Executors::parse(&format!("e0={ok}"), None).expect("one named");
        let started = named
            .start_new(ExecuteRequest::default())
            .await
            .map_err(|err| format!("{err:?}"))
            .expect("started");
        let minted = started.session_id.clone().unwrap_or_default();
        assert_eq!(ids::session_owner(&minted), Some("e0"), "{minted:?}");
        // Unnamed, the executor mints it (with its own --instance, if any).
        let unnamed = Executors::parse(&ok, None).expect("one");
        let started = unnamed
            .start_new(ExecuteRequest::default())
            .await
            .map_err(|err| format!("{err:?}"))
            .expect("started");
        assert_eq!(started.session_id, None);
        ok_task.abort();
    }

    #[tokio::test]
    async fn a_slow_start_is_waited_for_while_the_executor_answers_its_health_check() {
        let short = (Duration::from_millis(100), Duration::from_secs(2));
        let slow = async {
            tokio::time::sleep(Duration::from_millis(600)).await;
            Ok::<_, tonic::Status>("taken")
        };
        let (alive, task) = executor_at(true).await;
        assert_eq!(
            alive
                .take_unless_hung(slow, short)
                .await
                .expect("waited for"),
            "taken"
        );
        task.abort();

        let (hung, task) = executor_at(false).await;
        let never = std::future::pending::<Result<&str, tonic::Status>>();
        let started = Instant::now();
        let status = hung
            .take_unless_hung(
                never,
                (Duration::from_millis(100), Duration::from_millis(300)),
            )
            .await
            .expect_err("passed over");
        assert_eq!(status.code(), tonic::Code::Unavailable);
        assert!(status.message().contains("health check"), "{status:?}");
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        task.abort();
    }
}
