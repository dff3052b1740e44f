//! The driver that turns one HTTP response body into a stream of [`LlmEvent`]s: event-stream
//! decoding, the idle timeout between chunks, and a protocol [`Decode`]r per provider.

use std::{collections::VecDeque, sync::Arc};

use reqwest::{Response, header};

use super::{
    LlmError, LlmEvent, LlmStream,
    http::{Endpoint, error_chain},
    sse::{SseDecoder, SseEvent},
};

/// Result of feeding one event to a protocol decoder.
pub(crate) enum Progress {
    /// More events are expected.
    More,
    /// The response is complete; the rest of the body is not read.
    Complete,
}

/// A protocol's view of the event stream: turns SSE events into [`LlmEvent`]s.
pub(crate) trait Decode: Send + 'static {
    /// Handles one event, pushing output items. An `Err` ends the stream.
    fn event(
        &mut self,
        event: SseEvent,
        out: &mut VecDeque<Result<LlmEvent, LlmError>>,
    ) -> Result<Progress, LlmError>;
    /// The body ended before [`Progress::Complete`]: push the tail or fail.
    fn eof(&mut self, out: &mut VecDeque<Result<LlmEvent, LlmError>>) -> Result<(), LlmError>;
}

/// Sends `body` to `endpoint` and decodes the event stream with `decoder`. Nothing happens until
/// the stream is first polled; dropping it closes the connection.
pub(crate) fn sse_stream<D: Decode>(
    endpoint: Arc<Endpoint>,
    body: Vec<u8>,
    decoder: D,
) -> LlmStream {
    enum Phase<D> {
        Connect(Arc<Endpoint>, Vec<u8>, D),
        Read(Box<Reader<D>>),
        End,
    }
    Box::pin(futures::stream::unfold(
        Phase::Connect(endpoint, body, decoder),
        |phase| async move {
            let mut reader = match phase {
                Phase::Connect(endpoint, body, decoder) => match endpoint.send(body).await {
                    Ok(response) => Box::new(Reader::start(endpoint, response, decoder).await),
                    Err(e) => return Some((Err(e), Phase::End)),
                },
                Phase::Read(reader) => reader,
                Phase::End => return None,
            };
            let item = reader.next().await?;
            Some((item, Phase::Read(reader)))
        },
    ))
}

/// Reads one response body, chunk by chunk, each within the idle timeout.
struct Reader<D> {
    endpoint: Arc<Endpoint>,
    response: Response,
    sse: SseDecoder,
    decoder: D,
    events: Vec<SseEvent>,
    pending: VecDeque<Result<LlmEvent, LlmError>>,
    finished: bool,
}

impl<D: Decode> Reader<D> {
    async fn start(endpoint: Arc<Endpoint>, mut response: Response, decoder: D) -> Self {
        let mut pending = VecDeque::new();
        let content_type = response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok());
        // Some proxies answer 200 with a JSON error; say what came instead of "stream ended".
        if let Some(content_type) = content_type.filter(|ct| !ct.contains("event-stream")) {
            let content_type = content_type.to_owned();
            let status = response.status();
            let body = endpoint.error_message(&mut response).await;
            let message =
                format!("expected an event stream, got HTTP {status} with {content_type}: {body}");
            pending.push_back(Err(LlmError::Stream {
                provider: endpoint.provider.clone(),
                message,
            }));
        }
        let finished = !pending.is_empty();
        Self {
            endpoint,
            response,
            sse: SseDecoder::default(),
            decoder,
            events: Vec::new(),
            pending,
            finished,
        }
    }

    async fn next(&mut self) -> Option<Result<LlmEvent, LlmError>> {
        loop {
            if let Some(item) = self.pending.pop_front() {
                return Some(item);
            }
            if self.finished {
                return None;
            }
            let idle = self.endpoint.settings.idle_timeout;
            let step = match tokio::time::timeout(idle, self.response.chunk()).await {
                Err(_) => Err(LlmError::Timeout {
                    provider: self.endpoint.provider.clone(),
                    after: idle,
                    waiting_for: "the next chunk",
                    attempts: 1,
                }),
                Ok(Err(e)) => Err(LlmError::Stream {
                    provider: self.endpoint.provider.clone(),
                    message: self.endpoint.scrub(&error_chain(&e.without_url())),
                }),
                Ok(Ok(Some(chunk))) => self.feed(&chunk),
                Ok(Ok(None)) => self.end(),
            };
            if let Err(e) = step {
                self.finished = true;
                self.pending.push_back(Err(e));
            }
        }
    }

    fn feed(&mut self, chunk: &[u8]) -> Result<(), LlmError> {
        let provider = &self.endpoint.provider;
        self.sse
            .feed(chunk, &mut self.events)
            .map_err(|message| LlmError::Stream {
                provider: provider.clone(),
                message,
            })?;
        self.dispatch()
    }

    fn end(&mut self) -> Result<(), LlmError> {
        self.sse.finish(&mut self.events);
        self.dispatch()?;
        if !self.finished {
            self.finished = true;
            self.decoder.eof(&mut self.pending)?;
        }
        Ok(())
    }

    fn dispatch(&mut self) -> Result<(), LlmError> {
        for event in self.events.drain(..) {
            if self.finished {
                break;
            }
            if let Progress::Complete = self.decoder.event(event, &mut self.pending)? {
                self.finished = true;
            }
        }
        self.events.clear();
        Ok(())
    }
}
