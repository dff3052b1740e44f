//! The event sink of one run: numbers events, stamps them, and sends them to the client's
//! stream. A send that fails means the client left: the run's cancellation fires. Numbers are
//! reserved on disk in blocks before they are used, so a session continued after a crash never
//! repeats a `seq` its clients saw.

use std::time::Duration;

use taskforce_proto::v1::{self, run_event::Event};
use tokio::sync::{Mutex, mpsc};
use tokio_util::sync::CancellationToken;
use tonic::Status;
use tracing::warn;

use crate::session::SessionStore;

/// Items of a gRPC event stream.
pub type StreamItem = Result<v1::RunEvent, Status>;

/// Longest wait for a slow client to take one event before the run treats it as gone.
const SEND_TIMEOUT: Duration = Duration::from_secs(30);

/// Events buffered per stream before the run waits for the client.
pub const CHANNEL_CAPACITY: usize = 64;

/// How many `seq`s one durable reservation covers.
pub const SEQ_BLOCK: u64 = 256;

/// The next `seq`, and the reservation on disk it must stay below.
#[derive(Debug)]
struct Numbering {
    next: u64,
    reserved: u64,
}

/// Where a run's events go.
#[derive(Debug)]
pub struct Sink {
    tx: mpsc::Sender<StreamItem>,
    session_id: String,
    agent_path: Vec<String>,
    /// The next `seq`; held across the send so events leave in `seq` order.
    seq: Mutex<Numbering>,
    cancel: CancellationToken,
    /// Where `seq` reservations go.
    store: SessionStore,
}

impl Sink {
    /// A sink for `session_id`, numbering from `next_seq` while below `reserved` (already on
    /// disk through [`SessionStore::reserve_seqs`]), reserving further blocks in `store`, and
    /// cancelling `cancel` when the client is gone.
    pub fn new(
        tx: mpsc::Sender<StreamItem>,
        session_id: String,
        (next_seq, reserved): (u64, u64),
        cancel: CancellationToken,
        store: SessionStore,
    ) -> Self {
        Self {
            tx,
            session_id,
            agent_path: Vec::new(),
            seq: Mutex::new(Numbering {
                next: next_seq,
                reserved,
            }),
            cancel,
            store,
        }
    }

    /// Sends one event; false when the client is gone (and the run is then cancelled).
    pub async fn emit(&self, event: Event) -> bool {
        let mut seq = self.seq.lock().await;
        if seq.next >= seq.reserved {
            let upto = seq.next + SEQ_BLOCK;
            if let Err(e) = self.store.reserve_seqs(&self.session_id, upto).await {
                warn!(session_id = %self.session_id, error = %e, "cannot reserve event numbers");
            }
            seq.reserved = upto;
        }
        // `Done` is the last event: the driver stored the exact next `seq` before sending it.
        let last = matches!(event, Event::Done(_));
        let item = v1::RunEvent {
            session_id: self.session_id.clone(),
            seq: seq.next,
            agent_path: self.agent_path.clone(),
            time_unix_ms: chrono::Utc::now().timestamp_millis(),
            event: Some(event),
        };
        seq.next += 1;
        let sent = matches!(
            tokio::time::timeout(SEND_TIMEOUT, self.tx.send(Ok(item))).await,
            Ok(Ok(()))
        );
        if !sent {
            self.cancel.cancel();
        }
        if last && let Err(e) = self.store.release_seqs(&self.session_id) {
            warn!(session_id = %self.session_id, error = %e, "cannot release event numbers");
        }
        sent
    }

    /// The `seq` the next event will get.
    pub async fn next_seq(&self) -> u64 {
        self.seq.lock().await.next
    }

    /// Resolves when the client has dropped its end of the stream.
    pub async fn closed(&self) {
        self.tx.closed().await;
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

/// A `ToolError` event.
pub fn tool_error(call_id: &str, tool: &str, message: String) -> Event {
    Event::ToolError(v1::ToolError {
        call_id: call_id.to_owned(),
        tool: tool.to_owned(),
        message,
    })
}
