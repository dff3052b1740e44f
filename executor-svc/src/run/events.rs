//! The event sink of one run: numbers events, stamps them, and sends them to the client's
//! stream. A send that fails means the client left: the run's cancellation fires.

use std::time::Duration;

use taskforce_proto::v1::{self, run_event::Event};
use tokio::sync::{Mutex, mpsc};
use tokio_util::sync::CancellationToken;
use tonic::Status;

/// Items of a gRPC event stream.
pub type StreamItem = Result<v1::RunEvent, Status>;

/// Longest wait for a slow client to take one event before the run treats it as gone.
const SEND_TIMEOUT: Duration = Duration::from_secs(30);

/// Events buffered per stream before the run waits for the client.
pub const CHANNEL_CAPACITY: usize = 64;

/// Where a run's events go.
#[derive(Debug)]
pub struct Sink {
    tx: mpsc::Sender<StreamItem>,
    session_id: String,
    agent_path: Vec<String>,
    /// The next `seq`; held across the send so events leave in `seq` order.
    seq: Mutex<u64>,
    cancel: CancellationToken,
}

impl Sink {
    /// A sink for `session_id`, numbering from `next_seq`, cancelling `cancel` when the client
    /// is gone.
    pub fn new(
        tx: mpsc::Sender<StreamItem>,
        session_id: String,
        next_seq: u64,
        cancel: CancellationToken,
    ) -> Self {
        Self {
            tx,
            session_id,
            agent_path: Vec::new(),
            seq: Mutex::new(next_seq),
            cancel,
        }
    }

    /// Sends one event; false when the client is gone (and the run is then cancelled).
    pub async fn emit(&self, event: Event) -> bool {
        let mut seq = self.seq.lock().await;
        let item = v1::RunEvent {
            session_id: self.session_id.clone(),
            seq: *seq,
            agent_path: self.agent_path.clone(),
            time_unix_ms: chrono::Utc::now().timestamp_millis(),
            event: Some(event),
        };
        *seq += 1;
        let sent = matches!(
            tokio::time::timeout(SEND_TIMEOUT, self.tx.send(Ok(item))).await,
            Ok(Ok(()))
        );
        if !sent {
            self.cancel.cancel();
        }
        sent
    }

    /// The `seq` the next event will get.
    pub async fn next_seq(&self) -> u64 {
        *self.seq.lock().await
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
