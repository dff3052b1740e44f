//! One event source, two SSE dialects: a run's gRPC event stream becomes Server-Sent Events
//! through a [`Dialect`] that says how each run event looks on the wire.
//!
//! - [`Native`]: ours (`/api/v1/execute/stream`, `/answer`): one `event: <kind>` per run event
//!   with the event as JSON, keep-alive comments, ending after the top agent's `done`.
//! - [`crate::chat::Chat`]: seed 004's (`/ai/agent/stream`, `/ai/stream`): tokens as plain
//!   `data:` lines, tool events as compact JSON, `event: end` + `data: [DONE]`, nothing else.
//!
//! The source reads the stream to its end after the run's last event (dropping it early resets
//! the HTTP/2 stream, and h2 closes a connection after 1,024 resets). When the gateway stops, a
//! stream whose run has not ended within [`STOP_GRACE`] gets a final error in its dialect and
//! ends (the executor then cancels the run, as for any client that leaves).

use std::{convert::Infallible, future::Future, pin::Pin};

use axum::response::{
    IntoResponse, Response,
    sse::{Event, KeepAlive, Sse},
};
use futures::{Stream, StreamExt, stream};
use taskforce_proto::{error::ErrorKind, v1};
use tokio_util::sync::CancellationToken;
use tonic::Streaming;
use tracing::{debug, warn};

use crate::{
    error::RestError,
    events::{ends_run, event_json},
    execute::run_error,
};

/// How long the end of a stream (its trailers, right after `done`) is awaited.
const DRAIN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// How long open streams may go on after the gateway was told to stop.
pub const STOP_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// The final error of a stream the gateway's stop ended.
pub const STOPPING: &str = "the gateway is shutting down; the run was stopped";

/// How run events look on the wire.
pub trait Dialect: Send + 'static {
    /// The SSE events of one run event (none: nothing is sent for it).
    fn frames(&mut self, event: &v1::RunEvent) -> Vec<Event>;

    /// The last SSE events when the stream broke (a gRPC error in the middle).
    fn broken(&mut self, error: RestError) -> Vec<Event>;

    /// Whether to send keep-alive comments (some clients print every line they get).
    fn keep_alive(&self) -> bool;
}

/// Our dialect: `event: <kind>`, `data: <the event as JSON>`. It remembers the run's session and
/// last `seq`, so an error the gateway adds (the executor's connection lost, the gateway
/// stopping) carries the same envelope as the run's own events.
#[derive(Debug, Default)]
pub struct Native {
    session_id: String,
    next_seq: u64,
}

impl Dialect for Native {
    fn frames(&mut self, ev: &v1::RunEvent) -> Vec<Event> {
        if self.session_id != ev.session_id {
            self.session_id.clone_from(&ev.session_id);
        }
        self.next_seq = ev.seq + 1;
        match event_json(ev).map(|(name, json)| (name, serde_json::to_string(&json))) {
            Some((name, Ok(data))) => vec![Event::default().event(name).data(data)],
            Some((name, Err(e))) => {
                // Only a map key that is not text fails, and these have none.
                warn!(seq = ev.seq, event = name, error = %e, "cannot render a run event");
                Vec::new()
            }
            None => {
                debug!(seq = ev.seq, "skipping a run event of an unknown kind");
                Vec::new()
            }
        }
    }

    fn broken(&mut self, error: RestError) -> Vec<Event> {
        let ev = v1::RunEvent {
            session_id: self.session_id.clone(),
            seq: self.next_seq,
            agent_path: Vec::new(),
            time_unix_ms: i64::try_from(taskforce_runtime::now_ms()).unwrap_or(i64::MAX),
            frame_id: String::new(),
            event: Some(v1::run_event::Event::Error(v1::Error {
                code: error.0.kind.body_code().to_ascii_uppercase(),
                message: error.0.message,
            })),
        };
        self.frames(&ev)
    }

    fn keep_alive(&self) -> bool {
        true
    }
}

/// Reads a run's stream to its end after its last event.
pub async fn drain(mut events: Streaming<v1::RunEvent>) {
    let rest = async { while let Some(Ok(_)) = events.next().await {} };
    if tokio::time::timeout(DRAIN_TIMEOUT, rest).await.is_err() {
        debug!("a run stream did not end after `done`; dropping it");
    }
}

/// A future that completes [`STOP_GRACE`] after `stop` fired: made once per stream, so waiting
/// for the stop costs nothing per event.
pub fn stopping(stop: &CancellationToken) -> Pin<Box<dyn Future<Output = ()> + Send>> {
    let stop = stop.clone();
    Box::pin(async move {
        stop.cancelled_owned().await;
        tokio::time::sleep(STOP_GRACE).await;
    })
}

/// The SSE events of `events` in `dialect`, ending after the run's last event, or with a final
/// error [`STOP_GRACE`] after `stop` fired.
pub fn frames<D: Dialect>(
    events: Streaming<v1::RunEvent>,
    dialect: D,
    stop: CancellationToken,
) -> impl Stream<Item = Event> + Send {
    // The state: the stream (absent once broken), the dialect, whether the run ended, the
    // gateway's stop, and the run's session (its id names its executor, for an error).
    let state = (Some(events), dialect, false, stopping(&stop), String::new());
    stream::unfold(Some(state), |state| async move {
        let (events, mut dialect, ended, mut stopped, mut session) = state?;
        let mut events = events?;
        if ended {
            drain(events).await;
            return None;
        }
        loop {
            let next = tokio::select! {
                next = events.next() => next,
                () = &mut stopped => {
                    let out = dialect.broken(RestError::new(ErrorKind::Unavailable, STOPPING));
                    return Some((out, Some((None, dialect, true, stopped, session))));
                }
            };
            match next {
                None => return None,
                Some(Ok(ev)) => {
                    if session.is_empty() {
                        session.clone_from(&ev.session_id);
                    }
                    let out = dialect.frames(&ev);
                    let ended = ends_run(&ev);
                    if out.is_empty() && !ended {
                        continue;
                    }
                    return Some((out, Some((Some(events), dialect, ended, stopped, session))));
                }
                Some(Err(status)) => {
                    let out = dialect.broken(run_error(status, &session));
                    return Some((out, Some((None, dialect, true, stopped, session))));
                }
            }
        }
    })
    .flat_map(stream::iter)
}

/// The response streaming `events` in `dialect`.
pub fn respond<D: Dialect>(
    events: Streaming<v1::RunEvent>,
    dialect: D,
    stop: CancellationToken,
) -> Response {
    let keep_alive = dialect.keep_alive();
    sse_response(frames(events, dialect, stop), keep_alive)
}

/// An SSE response of `frames`.
pub fn sse_response(
    frames: impl Stream<Item = Event> + Send + 'static,
    keep_alive: bool,
) -> Response {
    let stream: std::pin::Pin<Box<dyn Stream<Item = Result<Event, Infallible>> + Send>> =
        Box::pin(frames.map(Ok));
    let sse = Sse::new(stream);
    if keep_alive {
        sse.keep_alive(KeepAlive::default()).into_response()
    } else {
        sse.into_response()
    }
}

/// One Server-Sent Event as a client's parser sees it (the items of every `text/event-stream`
/// answer): its `event` name when it has one, its `data`, and an `id` when it has one.
#[derive(Debug, utoipa::ToSchema)]
pub struct SseEvent {
    /// The event name (`run_started`, `token`, ... on `/api/v1/execute/stream`; `end` on the
    /// chat streams); absent for unnamed `message` events.
    pub event: Option<String>,
    /// The data: a run event as JSON text, a chat token, or `[DONE]`.
    pub data: String,
    /// The event id, when the stream sets one.
    pub id: Option<String>,
    /// A reconnection delay in milliseconds, when the stream sets one.
    pub retry: Option<u64>,
}
