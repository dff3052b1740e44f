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
    body: Body<D>,
}

impl<D: Decode> Reader<D> {
    async fn start(endpoint: Arc<Endpoint>, mut response: Response, decoder: D) -> Self {
        let mut body = Body::new(endpoint.provider.clone(), decoder);
        let content_type = response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok());
        // Some proxies answer 200 with a JSON error; say what came instead of "stream ended".
        if let Some(content_type) = content_type.filter(|ct| !ct.contains("event-stream")) {
            let content_type = content_type.to_owned();
            let status = response.status();
            let text = endpoint.error_message(&mut response).await;
            let message =
                format!("expected an event stream, got HTTP {status} with {content_type}: {text}");
            body.fail(LlmError::Stream {
                provider: endpoint.provider.clone(),
                message,
            });
        }
        Self {
            endpoint,
            response,
            body,
        }
    }

    async fn next(&mut self) -> Option<Result<LlmEvent, LlmError>> {
        loop {
            if let Some(item) = self.body.pending.pop_front() {
                return Some(item);
            }
            if self.body.finished {
                return None;
            }
            let idle = self.endpoint.settings.idle_timeout;
            match tokio::time::timeout(idle, self.response.chunk()).await {
                Err(_) => self.body.fail(LlmError::Timeout {
                    provider: self.endpoint.provider.clone(),
                    after: idle,
                    waiting_for: "the next chunk",
                    attempts: 1,
                }),
                Ok(Err(e)) => self.body.fail(LlmError::Stream {
                    provider: self.endpoint.provider.clone(),
                    message: self.endpoint.scrub(&error_chain(&e.without_url())),
                }),
                Ok(Ok(Some(chunk))) => self.body.feed(&chunk),
                Ok(Ok(None)) => self.body.end(),
            }
        }
    }
}

/// The I/O-free half of a [`Reader`]: body bytes in, [`LlmEvent`]s out (in `pending`).
struct Body<D> {
    provider: String,
    sse: SseDecoder,
    decoder: D,
    events: Vec<SseEvent>,
    pending: VecDeque<Result<LlmEvent, LlmError>>,
    /// Nothing more is decoded: the response is complete, or failed.
    finished: bool,
}

impl<D: Decode> Body<D> {
    fn new(provider: String, decoder: D) -> Self {
        Self {
            provider,
            sse: SseDecoder::default(),
            decoder,
            events: Vec::new(),
            pending: VecDeque::new(),
            finished: false,
        }
    }

    /// Ends the stream with `error`.
    fn fail(&mut self, error: LlmError) {
        self.finished = true;
        self.pending.push_back(Err(error));
    }

    fn feed(&mut self, chunk: &[u8]) {
        if self.finished {
            return;
        }
        let step = match self.sse.feed(chunk, &mut self.events) {
            Ok(()) => self.dispatch(),
            Err(message) => Err(LlmError::Stream {
                provider: self.provider.clone(),
                message,
            }),
        };
        if let Err(e) = step {
            self.fail(e);
        }
    }

    fn end(&mut self) {
        if self.finished {
            return;
        }
        self.sse.finish(&mut self.events);
        let step = self.dispatch().and_then(|()| {
            if self.finished {
                return Ok(());
            }
            self.finished = true;
            self.decoder.eof(&mut self.pending)
        });
        if let Err(e) = step {
            self.fail(e);
        }
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

/// Decodes a recorded body, delivered in `chunks`, exactly as a live call would but without a
/// connection or timeouts: the way in for the fuzz targets (`fuzz/`) and for tests.
pub(crate) fn decode_chunks<D: Decode>(
    provider: &str,
    decoder: D,
    chunks: &[&[u8]],
) -> Vec<Result<LlmEvent, LlmError>> {
    let mut body = Body::new(provider.to_owned(), decoder);
    let mut out = Vec::new();
    for chunk in chunks {
        body.feed(chunk);
        out.extend(body.pending.drain(..));
    }
    body.end();
    out.extend(body.pending.drain(..));
    out
}
