//! The event sink of one run: numbers events, stamps them, and sends them to the client's
//! stream. A send that fails means the client left: the run's cancellation fires. Numbers are
//! reserved on disk in blocks before they are used, so a session continued after a crash never
//! repeats a `seq` its clients saw.

use std::time::{Duration, Instant};

use taskforce_proto::v1::{self, run_event::Event};
use tokio::sync::{Mutex, mpsc};
use tokio_util::sync::CancellationToken;
use tonic::Status;
use tracing::{info, warn};

use crate::session::SessionStore;

/// Items of a gRPC event stream.
pub type StreamItem = Result<v1::RunEvent, Status>;

/// Longest wait for a slow client to take one event before the run treats it as gone.
const SEND_TIMEOUT: Duration = Duration::from_secs(30);

/// Events buffered per stream before the run waits for the client.
pub const CHANNEL_CAPACITY: usize = 64;

/// How many `seq`s one durable reservation covers.
pub const SEQ_BLOCK: u64 = 256;

/// The next `seq`, the reservation on disk it must stay below, whether the run reserved
/// blocks past the first (stored with the session), and the stream's pace.
#[derive(Debug)]
struct Numbering {
    next: u64,
    reserved: u64,
    extended: bool,
    pace: Pace,
}

/// A token bucket: `rate` events per second after a burst of as many (`rate` 0: no limit).
#[derive(Debug)]
struct Pace {
    rate: f64,
    tokens: f64,
    at: Instant,
}

impl Pace {
    fn new(rate: u32) -> Self {
        Self {
            rate: f64::from(rate),
            tokens: f64::from(rate),
            at: Instant::now(),
        }
    }

    /// Takes one event's token; how long to wait first when the bucket is empty.
    fn take(&mut self, now: Instant) -> Option<Duration> {
        if self.rate <= 0.0 {
            return None;
        }
        let refill = now.saturating_duration_since(self.at).as_secs_f64() * self.rate;
        self.tokens = (self.tokens + refill).min(self.rate) - 1.0;
        self.at = now;
        (self.tokens < 0.0).then(|| Duration::from_secs_f64(-self.tokens / self.rate))
    }
}

/// Where a run's events go: the stream shared by the run's frames, and the frame's place in it.
/// Sub-agents get a [`Sink::child`] that stamps their `agent_path` and `frame_id` on every event.
#[derive(Debug)]
pub struct Sink {
    stream: std::sync::Arc<Stream>,
    agent_path: Vec<String>,
    frame_id: String,
}

/// The one event stream of a run.
#[derive(Debug)]
struct Stream {
    tx: mpsc::Sender<StreamItem>,
    session_id: String,
    /// The next `seq`; held across the send so events leave in `seq` order.
    seq: Mutex<Numbering>,
    cancel: CancellationToken,
    /// Where `seq` reservations go.
    store: SessionStore,
    /// Set when the client took no event for [`SEND_TIMEOUT`] (the run was then cancelled).
    too_slow: std::sync::atomic::AtomicBool,
}

impl Sink {
    /// A sink for `session_id`, numbering from `next_seq` while below `reserved` (already on
    /// disk with the session, [`crate::session::Session::seq_reserved`]), reserving further blocks in `store`,
    /// sending at most `per_second` events a second after a burst of as many (0: no limit),
    /// and cancelling `cancel` when the client is gone.
    pub fn new(
        tx: mpsc::Sender<StreamItem>,
        session_id: String,
        (next_seq, reserved): (u64, u64),
        cancel: CancellationToken,
        store: SessionStore,
        per_second: u32,
    ) -> Self {
        Self {
            stream: std::sync::Arc::new(Stream {
                tx,
                session_id,
                seq: Mutex::new(Numbering {
                    next: next_seq,
                    reserved,
                    extended: false,
                    pace: Pace::new(per_second),
                }),
                cancel,
                store,
                too_slow: std::sync::atomic::AtomicBool::new(false),
            }),
            agent_path: Vec::new(),
            frame_id: String::new(),
        }
    }

    /// The sink of a sub-agent's frame: same stream and numbering, its path one level deeper.
    pub fn child(&self, agent_id: &str, frame_id: &str) -> Self {
        let mut agent_path = self.agent_path.clone();
        agent_path.push(agent_id.to_owned());
        Self {
            stream: std::sync::Arc::clone(&self.stream),
            agent_path,
            frame_id: frame_id.to_owned(),
        }
    }

    /// The frame's agent path (empty for the top agent).
    pub fn agent_path(&self) -> &[String] {
        &self.agent_path
    }

    /// Sends one event; false when the client is gone (and the run is then cancelled).
    pub async fn emit(&self, event: Event) -> bool {
        let stream = &*self.stream;
        let mut seq = stream.seq.lock().await;
        // A flood is slowed to the stream's pace (the lock keeps the order while it waits).
        if let Some(wait) = seq.pace.take(Instant::now()) {
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = stream.cancel.cancelled() => {}
            }
        }
        if seq.next >= seq.reserved {
            let upto = seq.next + SEQ_BLOCK;
            if let Err(e) = stream.store.reserve_seqs(&stream.session_id, upto).await {
                warn!(session_id = %stream.session_id, error = %e, "cannot reserve event numbers");
            }
            seq.reserved = upto;
            seq.extended = true;
        }
        // `Done` is the last event: the driver stored the exact next `seq` before sending it.
        let release = matches!(event, Event::Done(_)) && self.frame_id.is_empty() && seq.extended;
        let item = v1::RunEvent {
            session_id: stream.session_id.clone(),
            seq: seq.next,
            agent_path: self.agent_path.clone(),
            time_unix_ms: chrono::Utc::now().timestamp_millis(),
            frame_id: self.frame_id.clone(),
            event: Some(event),
        };
        seq.next += 1;
        let sent = match tokio::time::timeout(SEND_TIMEOUT, stream.tx.send(Ok(item))).await {
            Ok(Ok(())) => true,
            Ok(Err(_)) => false,
            // Connected but not reading: treated as gone, and said so (see `too_slow`).
            Err(_) => {
                if !stream
                    .too_slow
                    .swap(true, std::sync::atomic::Ordering::Relaxed)
                {
                    info!(session_id = %stream.session_id, waited_secs = SEND_TIMEOUT.as_secs(), "the client took no event in time; cancelling the run");
                }
                false
            }
        };
        if !sent {
            stream.cancel.cancel();
        }
        if release && let Err(e) = stream.store.release_seqs(&stream.session_id) {
            warn!(session_id = %stream.session_id, error = %e, "cannot release event numbers");
        }
        sent
    }

    /// Whether the run was cancelled because its client stopped reading (connected, but took
    /// no event for 30 s).
    pub fn client_too_slow(&self) -> bool {
        self.stream
            .too_slow
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The `seq` the next event will get.
    pub async fn next_seq(&self) -> u64 {
        self.stream.seq.lock().await.next
    }

    /// Resolves when the client has dropped its end of the stream.
    pub async fn closed(&self) {
        self.stream.tx.closed().await;
    }
}

/// A `Token` event.
pub fn token(text: String) -> Event {
    Event::Token(v1::Token { text })
}

/// A `Warning` event: something the run works around.
pub fn warning(code: &str, message: String) -> Event {
    Event::Warning(v1::Warning {
        code: code.to_owned(),
        message,
    })
}

/// The `ToolEnd` of a question the user answered: its output is the answer.
pub fn answered(call_id: String, tool: String, answer: String) -> Event {
    Event::ToolEnd(v1::ToolEnd {
        call_id,
        tool,
        output: answer,
        is_error: false,
        duration_ms: 0,
    })
}

/// A `ToolError` event.
pub fn tool_error(call_id: &str, tool: &str, message: String) -> Event {
    Event::ToolError(v1::ToolError {
        call_id: call_id.to_owned(),
        tool: tool.to_owned(),
        message,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pace_allows_a_burst_then_spaces_events_out() {
        let start = Instant::now();
        let mut pace = Pace::new(10);
        for _ in 0..10 {
            assert_eq!(pace.take(start), None, "the burst passes");
        }
        let wait = pace.take(start).expect("the 11th waits");
        assert!((wait.as_secs_f64() - 0.1).abs() < 1e-9, "{wait:?}");
        // A second later the bucket is full again (never fuller than the burst).
        let later = start + Duration::from_secs(5);
        for _ in 0..10 {
            assert_eq!(pace.take(later), None);
        }
        assert!(pace.take(later).is_some());
        let mut free = Pace::new(0);
        assert!((0..10_000).all(|_| free.take(start).is_none()));
    }
}
