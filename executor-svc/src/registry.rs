//! The link to the registry: definitions (cached while a watch stream says they are current),
//! and BUSY/IDLE status reports with a lease.
//!
//! Reports follow transitions, not runs: BUSY when an agent's first run starts (or when a run
//! starts and the last BUSY report is older than half the lease, which also refreshes its last
//! task), IDLE [`IDLE_GRACE`] after its last run ended unless another run started meanwhile.
//! Under load on one agent that is one report per half lease instead of one per run, and runs
//! one after another make no BUSY/IDLE pair each. [`Registry::report_idle`] sends the IDLE
//! reports.
//!
//! The cache is only trusted while a `WatchAgents` stream is connected: every change evicts its
//! agent, and losing the stream clears the cache and reconnects with backoff. A generation
//! counter keeps a fetch that raced with an eviction from re-inserting the stale definition.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use taskforce_proto::v1::{
    AgentStatus, GetAgentRequest, ReleaseHoldsRequest, ReportAgentStatusRequest,
    WatchAgentsRequest, agent_change::Kind as ChangeKind,
    agent_registry_client::AgentRegistryClient,
};
use tokio_util::sync::CancellationToken;
use tonic::{Code, transport::Channel};
use tracing::{debug, info, warn};

use crate::{agent::AgentDef, error::ExecutorError};

/// An agent's live runs and its last BUSY report.
/// How long an agent whose last run ended stays BUSY before IDLE is reported: a run that
/// starts within it continues the BUSY report instead of making an IDLE/BUSY pair.
pub const IDLE_GRACE: Duration = Duration::from_millis(250);

/// An agent with live runs, or whose IDLE report is due.
#[derive(Debug, Default)]
struct Running {
    live: usize,
    reported: Option<Instant>,
    /// When IDLE is to be reported (set when the last run ended).
    idle_at: Option<Instant>,
    /// When an IDLE report of it first failed to reach the registry, and the wait before the
    /// next try.
    idle_retry: Option<(Instant, Duration)>,
}

/// The wait before an IDLE report that did not reach the registry is tried again; it doubles
/// up to [`IDLE_RETRY_MAX`], and the tries end when the lease would have ended the BUSY anyway.
const IDLE_RETRY_FIRST: Duration = Duration::from_secs(1);

/// The longest wait between two tries of an IDLE report.
const IDLE_RETRY_MAX: Duration = Duration::from_secs(30);

/// What a run asks for: a registry agent or a profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A custom or profile agent by id.
    Agent(String),
    /// A profile agent by profile name.
    Profile(String),
}

/// A cloneable handle on the registry.
#[derive(Debug, Clone)]
pub struct Registry {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    url: String,
    client: AgentRegistryClient<taskforce_runtime::telemetry::TracedChannel>,
    timeout: Duration,
    lease_secs: u32,
    /// Who the status reports say they come from: the executor's instance name ("" unnamed).
    reporter: String,
    cache: Mutex<HashMap<String, Arc<AgentDef>>>,
    watching: AtomicBool,
    generation: AtomicU64,
    /// Live runs per agent and when BUSY was last reported for it: IDLE is only reported
    /// when the last one ends, BUSY when the first starts or the report is getting old.
    running: Mutex<HashMap<String, Running>>,
    /// Wakes [`Registry::report_idle`] when an IDLE report became due later.
    idle_due: tokio::sync::Notify,
}

impl Registry {
    /// A client for `url`, connected on first use, reporting as `reporter` (the instance name).
    pub fn new(
        url: &str,
        timeout: Duration,
        lease_secs: u32,
        reporter: Option<&str>,
        authorization: Option<http::HeaderValue>,
    ) -> Result<Self, ExecutorError> {
        let endpoint = Channel::from_shared(url.to_owned())
            .map_err(|e| ExecutorError::Config(format!("--registry-url {url}: {e}")))?
            .connect_timeout(timeout)
            .tcp_nodelay(true)
            .http2_keep_alive_interval(Duration::from_secs(30))
            .keep_alive_timeout(Duration::from_secs(10));
        Ok(Self {
            inner: Arc::new(Inner {
                url: url.to_owned(),
                client: AgentRegistryClient::new(taskforce_runtime::telemetry::traced(
                    endpoint.connect_lazy(),
                    authorization,
                )),
                timeout,
                lease_secs: lease_secs.max(2),
                reporter: reporter.unwrap_or_default().to_owned(),
                cache: Mutex::new(HashMap::new()),
                watching: AtomicBool::new(false),
                generation: AtomicU64::new(0),
                running: Mutex::new(HashMap::new()),
                idle_due: tokio::sync::Notify::new(),
            }),
        })
    }

    /// The definition to run for `target`.
    pub async fn resolve(&self, target: &Target) -> Result<Arc<AgentDef>, ExecutorError> {
        let (id, what) = match target {
            Target::Agent(id) => (id, "agent"),
            Target::Profile(name) => (name, "profile"),
        };
        let def = self.definition(id, what).await?;
        // A run that names a profile runs only a profile, cached or not.
        if matches!(target, Target::Profile(_)) && !def.profile {
            return Err(ExecutorError::NotFound(format!(
                "profile `{id}` is not defined in the registry (`{id}` is a custom agent)"
            )));
        }
        Ok(def)
    }

    /// The definition of agent `id` (`what` names it in errors): the cached one while the
    /// registry's changes are followed, else the registry's.
    async fn definition(&self, id: &String, what: &str) -> Result<Arc<AgentDef>, ExecutorError> {
        let inner = &self.inner;
        if inner.watching.load(Ordering::Acquire)
            && let Some(def) = self.cached(id)
        {
            return Ok(def);
        }
        let generation = inner.generation.load(Ordering::Acquire);
        let mut client = inner.client.clone();
        let request = GetAgentRequest {
            agent_id: id.clone(),
        };
        let agent = match tokio::time::timeout(inner.timeout, client.get_agent(request)).await {
            Err(_) => {
                warn!(registry = %inner.url, timeout = ?inner.timeout, "the registry did not answer");
                return Err(ExecutorError::Unavailable(format!(
                    "the registry did not answer within {:?}, so {what} `{id}` cannot be loaded; \
                     try again later",
                    inner.timeout
                )));
            }
            Ok(Err(status)) if status.code() == Code::NotFound => {
                return Err(ExecutorError::NotFound(format!(
                    "{what} `{id}` is not defined in the registry"
                )));
            }
            Ok(Err(status)) if status.code() == Code::InvalidArgument => {
                return Err(ExecutorError::invalid(
                    if what == "agent" {
                        "agent_id"
                    } else {
                        "profile"
                    },
                    status.message().to_owned(),
                ));
            }
            // A setting to fix, not an outage to wait out.
            Ok(Err(status))
                if matches!(
                    status.code(),
                    Code::Unauthenticated | Code::PermissionDenied
                ) =>
            {
                tracing::error!(registry = %inner.url, error = %status.message(), "the registry refuses this executor's service token");
                return Err(ExecutorError::Config(format!(
                    "the registry refuses this executor's service token ({}): set \
                     TASKFORCE_SERVICE_TOKEN of the executor to a registry key with the `read` and \
                     `execute` scopes (or `admin`)",
                    status.message()
                )));
            }
            Ok(Err(status)) => {
                warn!(registry = %inner.url, code = ?status.code(), error = %status.message(), "the registry failed");
                return Err(ExecutorError::Unavailable(format!(
                    "the registry is unavailable ({}), so {what} `{id}` cannot be loaded; try \
                     again later",
                    status.message()
                )));
            }
            Ok(Ok(response)) => response.into_inner(),
        };
        let def = Arc::new(AgentDef::from_proto(agent)?);
        if inner.watching.load(Ordering::Acquire)
            && inner.generation.load(Ordering::Acquire) == generation
            && let Ok(mut cache) = inner.cache.lock()
        {
            cache.insert(id.clone(), Arc::clone(&def));
        }
        Ok(def)
    }

    fn cached(&self, id: &str) -> Option<Arc<AgentDef>> {
        self.inner.cache.lock().ok()?.get(id).cloned()
    }

    fn evict(&self, id: Option<&str>) {
        self.inner.generation.fetch_add(1, Ordering::AcqRel);
        if let Ok(mut cache) = self.inner.cache.lock() {
            match id {
                Some(id) => {
                    cache.remove(id);
                }
                None => cache.clear(),
            }
        }
    }

    /// Follows `WatchAgents` until `shutdown`, evicting changed agents; reconnects with backoff
    /// and clears the cache whenever the stream is lost.
    pub async fn watch(self, shutdown: CancellationToken) {
        let mut backoff = Duration::from_millis(250);
        // Said once per streak of refusals: a setting to fix, found at start, not at a run.
        let mut refusal_said = false;
        loop {
            let mut client = self.inner.client.clone();
            let call = tokio::time::timeout(
                self.inner.timeout,
                client.watch_agents(WatchAgentsRequest {
                    snapshot: false,
                    exclude_status: true,
                }),
            );
            let stream = tokio::select! {
                () = shutdown.cancelled() => return,
                r = call => r,
            };
            match stream {
                Ok(Ok(response)) => {
                    refusal_said = false;
                    let mut stream = response.into_inner();
                    self.inner.watching.store(true, Ordering::Release);
                    backoff = Duration::from_millis(250);
                    debug!(url = %self.inner.url, "watching registry changes");
                    loop {
                        let next = tokio::select! {
                            () = shutdown.cancelled() => return,
                            next = stream.message() => next,
                        };
                        match next {
                            // Asked without them; a registry that sends them anyway changes
                            // no definition with them.
                            Ok(Some(change)) if change.kind() == ChangeKind::Status => {}
                            Ok(Some(change)) => self.evict(Some(&change.agent_id)),
                            Ok(None) => break,
                            Err(status) => {
                                debug!(error = %status.message(), "registry watch stream broke");
                                break;
                            }
                        }
                    }
                    info!(url = %self.inner.url, "lost the registry watch stream; reconnecting");
                }
                Ok(Err(status))
                    if matches!(
                        status.code(),
                        Code::Unauthenticated | Code::PermissionDenied
                    ) =>
                {
                    if !std::mem::replace(&mut refusal_said, true) {
                        tracing::error!(registry = %self.inner.url, error = %status.message(), "the registry refuses this executor's service token: runs will fail until TASKFORCE_SERVICE_TOKEN holds a registry key with the `read` and `execute` scopes (or `admin`)");
                    }
                }
                Ok(Err(status)) => debug!(error = %status.message(), "registry watch refused"),
                Err(_) => debug!("registry watch did not connect in time"),
            }
            self.inner.watching.store(false, Ordering::Release);
            self.evict(None);
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(Duration::from_secs(10));
        }
    }

    /// Reports `agent_id` BUSY with `task` until `done` fires (renewing the lease at half its
    /// length); IDLE follows from [`Registry::report_idle`] when no other run of the agent is
    /// going or starts within [`IDLE_GRACE`]. A dead executor stops renewing, so the registry's
    /// lease ends BUSY.
    pub async fn hold_busy(&self, agent_id: &str, task: &str, done: CancellationToken) {
        let lease = self.inner.lease_secs;
        let renew = Duration::from_secs(u64::from(lease / 2));
        if self.start_run(agent_id, renew) {
            self.report(agent_id, AgentStatus::Busy, task).await;
        }
        loop {
            tokio::select! {
                () = done.cancelled() => break,
                () = tokio::time::sleep(renew) => {
                    self.report(agent_id, AgentStatus::Busy, "").await;
                }
            }
        }
        if self.end_run(agent_id, Instant::now()) == 0 {
            self.inner.idle_due.notify_one();
        }
    }

    /// Ends the BUSY holds the previous process of this executor left (its runs are gone),
    /// unless `stop` fires first. A named executor asks the registry to end every hold of its
    /// name (`ReleaseHolds`: also those of runs that had ended but whose IDLE was never sent),
    /// tried again 1 s doubling to 30 s while the lease would still hold them, then says BUSY
    /// again for the agents whose runs started meanwhile (their BUSY may have reached the
    /// registry first). An unnamed executor (unnamed executors share one hold), or one whose
    /// registry does not know `ReleaseHolds`, reports IDLE for `lost` instead: the agents of
    /// the runs its previous process left running.
    pub async fn release_previous_holds(self, lost: Vec<String>, stop: CancellationToken) {
        if self.inner.reporter.is_empty() {
            self.release_lost_runs(&lost);
            return;
        }
        let started = Instant::now();
        let mut wait = IDLE_RETRY_FIRST;
        loop {
            let mut client = self.inner.client.clone();
            let request = ReleaseHoldsRequest {
                reporter: self.inner.reporter.clone(),
            };
            let answer = tokio::select! {
                () = stop.cancelled() => return,
                answer = tokio::time::timeout(self.inner.timeout, client.release_holds(request)) => answer,
            };
            match answer {
                Ok(Ok(released)) => {
                    let released = released.into_inner().agent_ids;
                    if !released.is_empty() {
                        // The first few by name: thousands of agents make no useful line.
                        info!(
                            count = released.len(),
                            first = ?released.iter().take(10).collect::<Vec<_>>(),
                            "ended the BUSY holds this executor's previous process left"
                        );
                    }
                    for agent_id in self.live_agents() {
                        self.report(&agent_id, AgentStatus::Busy, "").await;
                        // Its last run may have ended, and its IDLE gone out, before this BUSY
                        // arrived: say IDLE again (nothing is queued while one is pending).
                        if !self.has_live_runs(&agent_id) {
                            self.queue_idle(agent_id, Instant::now(), None);
                            self.inner.idle_due.notify_one();
                        }
                    }
                    return;
                }
                Ok(Err(e))
                    if e.code() == Code::Unimplemented
                        || taskforce_proto::error::from_taskforce(&e) =>
                {
                    warn!(error = %e.message(), "the registry did not end this executor's holds; reporting IDLE for the runs left running");
                    self.release_lost_runs(&lost);
                    return;
                }
                Ok(Err(e)) => {
                    debug!(error = %e.message(), "releasing the previous process's holds failed; trying again");
                }
                Err(_) => debug!("releasing the previous process's holds timed out; trying again"),
            }
            let Some(next) = self.next_try(started, wait) else {
                return;
            };
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(wait) => {}
            }
            wait = next;
        }
    }

    /// Queues IDLE reports of `agents` (the agents of the runs the previous process left
    /// running), due now unless a run of the agent starts first. Only this reporter's hold
    /// ends.
    fn release_lost_runs(&self, agents: &[String]) {
        if agents.is_empty() {
            return;
        }
        let now = Instant::now();
        for agent_id in agents {
            self.queue_idle(agent_id.clone(), now, None);
        }
        self.inner.idle_due.notify_one();
    }

    /// The agents with live runs.
    fn live_agents(&self) -> Vec<String> {
        self.inner.running.lock().map_or_else(
            |_| Vec::new(),
            |running| {
                running
                    .iter()
                    .filter(|(_, r)| r.live > 0)
                    .map(|(id, _)| id.clone())
                    .collect()
            },
        )
    }

    /// Sends the IDLE reports as they fall due (one that does not reach the registry is tried
    /// again later), until `stop` fires; then sends those still waiting at once (the runs have
    /// ended by then).
    pub async fn report_idle(self, stop: CancellationToken) {
        loop {
            let next = self.next_idle();
            let wake = async {
                match next {
                    Some(at) => tokio::time::sleep_until(at.into()).await,
                    None => std::future::pending().await,
                }
            };
            let stopping = tokio::select! {
                () = stop.cancelled() => true,
                () = self.inner.idle_due.notified() => continue,
                () = wake => false,
            };
            let now = Instant::now();
            let due = self.take_idle(if stopping { None } else { Some(now) });
            // Together, so that a stop waits for the slowest one, not for their sum.
            let reached = futures::future::join_all(
                due.iter()
                    .map(|(agent_id, _)| self.report(agent_id, AgentStatus::Idle, "")),
            )
            .await;
            if stopping {
                return;
            }
            for ((agent_id, retry), reached) in due.into_iter().zip(reached) {
                if self.after_idle(agent_id.clone(), retry, reached) {
                    self.report(&agent_id, AgentStatus::Busy, "").await;
                }
            }
        }
    }

    /// What follows an IDLE report of `agent_id` (`reached`: the registry answered it): one
    /// that did not reach the registry is queued again ([`Registry::retry_idle`]); true when
    /// BUSY is to be said again, because a run of the agent started while the IDLE was on its
    /// way (its BUSY may have reached the registry first).
    fn after_idle(
        &self,
        agent_id: String,
        retry: Option<(Instant, Duration)>,
        reached: bool,
    ) -> bool {
        if !reached {
            self.retry_idle(agent_id, retry);
            return false;
        }
        self.has_live_runs(&agent_id)
    }

    /// Whether `agent_id` has live runs.
    fn has_live_runs(&self, agent_id: &str) -> bool {
        self.inner
            .running
            .lock()
            .is_ok_and(|running| running.get(agent_id).is_some_and(|r| r.live > 0))
    }

    /// The earliest pending IDLE report.
    fn next_idle(&self) -> Option<Instant> {
        let running = self.inner.running.lock().ok()?;
        running.values().filter_map(|r| r.idle_at).min()
    }

    /// Removes and returns the agents whose IDLE is due by `now` (`None`: every pending one),
    /// each with its retry state.
    fn take_idle(&self, now: Option<Instant>) -> Vec<(String, Option<(Instant, Duration)>)> {
        let Ok(mut running) = self.inner.running.lock() else {
            return Vec::new();
        };
        let due: Vec<String> = running
            .iter()
            .filter(|(_, r)| r.live == 0 && r.idle_at.is_some_and(|at| now.is_none_or(|n| at <= n)))
            .map(|(id, _)| id.clone())
            .collect();
        due.into_iter()
            .filter_map(|id| {
                let retry = running.remove(&id)?.idle_retry;
                Some((id, retry))
            })
            .collect()
    }

    /// Queues the IDLE report of `agent_id` again after one that did not reach the registry
    /// (`retry`: that report's retry state), unless a run of it started meanwhile (its own
    /// reports take over) or its lease has ended the BUSY by now.
    fn retry_idle(&self, agent_id: String, retry: Option<(Instant, Duration)>) {
        let now = Instant::now();
        let (since, wait) = retry.unwrap_or((now, IDLE_RETRY_FIRST));
        if let Some(next) = self.next_try(since, wait) {
            self.queue_idle(agent_id, now + wait, Some((since, next)));
        }
    }

    /// Whether a report first tried at `since` is worth trying again `wait` from now: until the
    /// lease would have ended the BUSY it is about anyway. `Some` holds the wait after that
    /// try (doubled, up to [`IDLE_RETRY_MAX`]).
    fn next_try(&self, since: Instant, wait: Duration) -> Option<Duration> {
        let lease = Duration::from_secs(u64::from(self.inner.lease_secs));
        (since.elapsed() < lease).then(|| (wait * 2).min(IDLE_RETRY_MAX))
    }

    /// Queues an IDLE report of `agent_id` at `at`, unless the agent has an entry already (a
    /// run: its own reports take over).
    fn queue_idle(&self, agent_id: String, at: Instant, retry: Option<(Instant, Duration)>) {
        if let Ok(mut running) = self.inner.running.lock() {
            running.entry(agent_id).or_insert(Running {
                idle_at: Some(at),
                idle_retry: retry,
                ..Running::default()
            });
        }
    }

    /// Counts a run of `agent_id` in; true when BUSY is to be reported: its first run, or the
    /// last report is `renew` old.
    fn start_run(&self, agent_id: &str, renew: Duration) -> bool {
        let Ok(mut running) = self.inner.running.lock() else {
            return true;
        };
        let now = Instant::now();
        let entry = running.entry(agent_id.to_owned()).or_default();
        entry.live += 1;
        // Its IDLE, if pending, is not sent: the agent stays BUSY.
        entry.idle_at = None;
        entry.idle_retry = None;
        let due = entry
            .reported
            .is_none_or(|at| now.duration_since(at) >= renew);
        if due {
            entry.reported = Some(now);
        }
        due
    }

    /// Counts a run of `agent_id` out at `now`; returns how many are left. When none is, its
    /// IDLE falls due [`IDLE_GRACE`] later.
    fn end_run(&self, agent_id: &str, now: Instant) -> usize {
        let Ok(mut running) = self.inner.running.lock() else {
            return 0;
        };
        let Some(entry) = running.get_mut(agent_id) else {
            return 0;
        };
        entry.live = entry.live.saturating_sub(1);
        if entry.live == 0 {
            entry.idle_at = Some(now + IDLE_GRACE);
        }
        entry.live
    }

    /// Sends one status report; false when it did not reach the registry (no answer in time,
    /// or unreachable), true when the registry took it or refused it for good.
    async fn report(&self, agent_id: &str, status: AgentStatus, task: &str) -> bool {
        let mut client = self.inner.client.clone();
        let request = ReportAgentStatusRequest {
            agent_id: agent_id.to_owned(),
            status: status as i32,
            last_task: last_task(task),
            lease_seconds: self.inner.lease_secs,
            reporter: self.inner.reporter.clone(),
        };
        match tokio::time::timeout(self.inner.timeout, client.report_agent_status(request)).await {
            Ok(Ok(_)) => true,
            // An agent deleted while it ran (or right after): nothing to report, nothing wrong.
            Ok(Err(e))
                if e.code() == tonic::Code::NotFound
                    && taskforce_proto::error::from_taskforce(&e) =>
            {
                tracing::debug!(agent_id, ?status, "status not reported: the agent is gone");
                true
            }
            Ok(Err(e)) => {
                warn!(agent_id, ?status, error = %e.message(), "status report failed");
                // The registry's own answers say they are (a refusal, an unknown agent); any
                // other error is the way there (down, restarting, a connection broken).
                taskforce_proto::error::from_taskforce(&e)
            }
            Err(_) => {
                warn!(agent_id, ?status, "status report timed out");
                false
            }
        }
    }
}

/// A run's mission as the registry keeps it as the agent's `last_task`: cut to
/// [`taskforce_proto::MAX_LAST_TASK`] characters, marked with `…` (a longer one made the
/// registry refuse the whole report, and the agent looked idle while it ran).
fn last_task(mission: &str) -> String {
    let max = taskforce_proto::MAX_LAST_TASK;
    // The `…` counts here: the registry refuses more than `max` characters in all.
    match mission.char_indices().nth(max) {
        None => mission.to_owned(),
        Some(_) => taskforce_proto::cut_chars(mission, max - 1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_mission_is_cut_to_the_registrys_last_task() {
        assert_eq!(last_task("short"), "short");
        let exact = "é".repeat(taskforce_proto::MAX_LAST_TASK);
        assert_eq!(last_task(&exact), exact);
        let cut = last_task(&"é".repeat(taskforce_proto::MAX_LAST_TASK + 1));
        assert_eq!(cut.chars().count(), taskforce_proto::MAX_LAST_TASK);
        assert!(cut.ends_with("é…"), "{cut}");
    }

    #[tokio::test]
    async fn busy_is_reported_on_transitions_and_when_the_report_gets_old() {
        let registry = test_registry();
        let renew = Duration::from_secs(60);
        let now = Instant::now();
        assert!(registry.start_run("a", renew), "the first run reports BUSY");
        assert!(
            !registry.start_run("a", renew),
            "a second, overlapping run does not"
        );
        assert!(registry.start_run("b", renew), "another agent has its own");
        assert_eq!(registry.end_run("a", now), 1);
        assert!(!registry.start_run("a", renew));
        // A report as old as the renewal interval is repeated (with the newest task).
        assert!(registry.start_run("a", Duration::ZERO));
        assert_eq!(registry.end_run("a", now), 2);
        assert_eq!(registry.end_run("a", now), 1);
        assert_eq!(registry.end_run("a", now), 0, "the last run ended");
        assert_eq!(
            registry.next_idle(),
            Some(now + IDLE_GRACE),
            "IDLE falls due"
        );
        assert!(
            registry.take_idle(Some(now)).is_empty(),
            "not before the grace"
        );
        // A run within the grace keeps BUSY: no IDLE, no new BUSY report.
        assert!(!registry.start_run("a", renew));
        assert_eq!(registry.next_idle(), None);
        assert_eq!(registry.end_run("a", now), 0);
        assert_eq!(
            registry.take_idle(Some(now + IDLE_GRACE)),
            vec![("a".to_owned(), None)]
        );
        assert!(
            registry.start_run("a", renew),
            "after IDLE, BUSY again on the next run"
        );
        assert_eq!(registry.end_run("nobody", now), 0);
        // Stopping sends every pending IDLE at once, of agents without live runs only.
        assert_eq!(registry.end_run("a", now), 0);
        assert_eq!(registry.take_idle(None), vec![("a".to_owned(), None)]);
        assert!(registry.take_idle(None).is_empty(), "b still runs");
    }

    fn test_registry() -> Registry {
        Registry::new(
            "http://127.0.0.1:9",
            Duration::from_secs(1),
            120,
            Some("e0"),
            None,
        )
        .expect("a valid URL")
    }

    #[tokio::test]
    async fn the_runs_a_previous_process_left_are_reported_idle_at_once() {
        let registry = test_registry();
        let renew = Duration::from_secs(60);
        registry.release_lost_runs(&["a".to_owned(), "b".to_owned()]);
        assert!(registry.next_idle().is_some_and(|at| at <= Instant::now()));
        // A run of b that starts first keeps it BUSY, and reports so (nothing was reported
        // by this process yet).
        assert!(registry.start_run("b", renew));
        assert_eq!(
            registry.take_idle(Some(Instant::now())),
            vec![("a".to_owned(), None)]
        );
        assert_eq!(registry.next_idle(), None);
    }

    #[tokio::test]
    async fn an_idle_report_the_registry_did_not_get_is_tried_again_until_the_lease_ends() {
        // Nothing listens on port 9: every report fails to reach the registry.
        let registry = test_registry();
        let stop = CancellationToken::new();
        let reporter = tokio::spawn(registry.clone().report_idle(stop.clone()));
        registry.release_lost_runs(&["a".to_owned()]);
        let requeued = async {
            loop {
                if let Some(at) = registry.next_idle()
                    && at > Instant::now()
                {
                    return at;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        let at = tokio::time::timeout(Duration::from_secs(5), requeued)
            .await
            .expect("queued again after the failed report");
        assert!(at <= Instant::now() + IDLE_RETRY_FIRST);
        stop.cancel();
        reporter.await.expect("stops");

        // Past the lease nothing is queued (on a machine up for longer than a lease).
        if let Some(long_ago) = Instant::now().checked_sub(Duration::from_secs(121)) {
            registry.retry_idle("b".to_owned(), Some((long_ago, IDLE_RETRY_MAX)));
            assert!(registry.take_idle(None).iter().all(|(id, _)| id != "b"));
        }
        // A run that starts meanwhile takes over: no IDLE is queued while it runs.
        assert!(registry.start_run("c", Duration::from_secs(60)));
        registry.retry_idle("c".to_owned(), None);
        assert_eq!(registry.next_idle(), None, "c runs");
        assert!(registry.has_live_runs("c"));
        assert_eq!(registry.end_run("c", Instant::now()), 0, "c's own run");
    }

    #[tokio::test]
    async fn busy_is_said_again_when_a_run_started_while_its_idle_was_on_its_way() {
        let registry = test_registry();
        let renew = Duration::from_secs(60);
        assert!(registry.start_run("a", renew));
        assert_eq!(registry.end_run("a", Instant::now()), 0);
        let due = registry.take_idle(None);
        assert_eq!(due, vec![("a".to_owned(), None)], "IDLE is sent");
        // A run starts before the IDLE's answer is back.
        assert!(registry.start_run("a", renew), "its BUSY is sent too");
        assert!(
            registry.after_idle("a".to_owned(), None, true),
            "BUSY is said again after the IDLE"
        );
        // No run: nothing more; not reached: queued again, no BUSY.
        assert_eq!(registry.end_run("a", Instant::now()), 0);
        let _ = registry.take_idle(None);
        assert!(!registry.after_idle("a".to_owned(), None, true));
        assert!(!registry.after_idle("a".to_owned(), None, false));
        assert!(registry.next_idle().is_some(), "queued again");
    }
}
