//! The driver that turns one HTTP response body into a stream of [`LlmEvent`]s: the idle timeout
//! between chunks, event-stream decoding (the `sse-stream` crate, the parser the CLI and the MCP
//! client read event streams with too), and a protocol [`Decode`]r per provider.

use std::{collections::VecDeque, pin::Pin, sync::Arc, time::Duration};

use ::sse_stream::{ByteStreamBody, Sse, SseStream};
use bytes::Bytes;
use futures::{Stream, StreamExt, stream};
use reqwest::{Response, header};

use super::{
    LlmError, LlmEvent, LlmStream,
    http::{Endpoint, error_chain},
};

/// One dispatched server-sent event that carried data (an event without `data:` is not one).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct SseEvent {
    /// The `event:` field; empty when absent (the spec's "message").
    pub event: String,
    /// The `data:` lines joined with `\n`.
    pub data: String,
}

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

/// Most bytes read from one response body. The event-stream parser buffers a line until its end,
/// so this bounds the memory a broken or hostile server can take; it is far above the longest
/// answer a model streams (128k output tokens are about 40 MB of chat-completion chunks).
const MAX_BODY: usize = 128 * 1024 * 1024;

/// Why the bytes of a body stopped coming.
#[derive(Debug, thiserror::Error)]
enum BodyError {
    #[error("no chunk within {0:?}")]
    Idle(Duration),
    /// The transport failed; the text is already scrubbed of secrets.
    #[error("{0}")]
    Transport(String),
    #[error("the event stream is longer than {0} bytes")]
    TooLong(usize),
}

/// The chunks of one body, in order.
type Chunks = Pin<Box<dyn Stream<Item = Result<Bytes, BodyError>> + Send>>;

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
    Box::pin(stream::unfold(
        Phase::Connect(endpoint, body, decoder),
        |phase| async move {
            let mut reader = match phase {
                Phase::Connect(endpoint, body, decoder) => match endpoint.send(body).await {
                    Ok(response) => {
                        Box::new(Reader::from_response(endpoint, response, decoder).await)
                    }
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

/// The chunks of `response`, each within the endpoint's idle timeout.
fn response_chunks(endpoint: Arc<Endpoint>, response: Response) -> Chunks {
    Box::pin(stream::unfold(
        Some((endpoint, response)),
        |state| async move {
            let (endpoint, mut response) = state?;
            let idle = endpoint.settings.idle_timeout;
            let error = match tokio::time::timeout(idle, response.chunk()).await {
                Ok(Ok(Some(chunk))) => return Some((Ok(chunk), Some((endpoint, response)))),
                Ok(Ok(None)) => return None,
                Err(_) => BodyError::Idle(idle),
                Ok(Err(e)) => BodyError::Transport(endpoint.scrub(&error_chain(&e.without_url()))),
            };
            Some((Err(error), None))
        },
    ))
}

/// The events of a body of at most `max` bytes. A last event whose blank line never came is still
/// dispatched: the body's end reads as a line end and a blank line.
fn sse_events(chunks: Chunks, max: usize) -> SseStream<ByteStreamBody<Chunks, Bytes>> {
    let capped = chunks.scan(0usize, move |read, item| {
        let item = item.and_then(|chunk| {
            *read = read.saturating_add(chunk.len());
            if *read > max {
                Err(BodyError::TooLong(max))
            } else {
                Ok(chunk)
            }
        });
        futures::future::ready(Some(item))
    });
    let end = stream::once(async { Ok(Bytes::from_static(b"\n\n")) });
    // One line per piece: the parser reports a bad line before the events it completed earlier
    // in the same piece, so a body cut into other chunks (the network decides) would lose them.
    let lines = capped
        .chain(end)
        .flat_map(|item| stream::iter(item.map_or_else(|e| vec![Err(e)], line_pieces)));
    SseStream::from_bytes_stream(Box::pin(lines) as Chunks)
}

/// `chunk` cut after each line end (`\n` or `\r`), without copying.
fn line_pieces(mut chunk: Bytes) -> Vec<Result<Bytes, BodyError>> {
    let mut pieces = Vec::new();
    while let Some(end) = chunk.iter().position(|b| matches!(b, b'\n' | b'\r')) {
        pieces.push(Ok(chunk.split_to(end + 1)));
    }
    if !chunk.is_empty() {
        pieces.push(Ok(chunk));
    }
    pieces
}

/// Reads one response body event by event, through the protocol decoder.
struct Reader<D> {
    provider: String,
    /// The endpoint read from, whose secrets are taken out of every error (a provider may echo
    /// its key in an error chunk, or in a line that is not JSON).
    endpoint: Option<Arc<Endpoint>>,
    events: SseStream<ByteStreamBody<Chunks, Bytes>>,
    decoder: D,
    pending: VecDeque<Result<LlmEvent, LlmError>>,
    /// Nothing more is decoded: the response is complete, or failed.
    finished: bool,
}

impl<D: Decode> Reader<D> {
    fn new(provider: String, chunks: Chunks, max: usize, decoder: D) -> Self {
        Self {
            provider,
            endpoint: None,
            events: sse_events(chunks, max),
            decoder,
            pending: VecDeque::new(),
            finished: false,
        }
    }

    async fn from_response(endpoint: Arc<Endpoint>, mut response: Response, decoder: D) -> Self {
        let content_type = response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            // Media types are the same in any case (`Text/Event-Stream`).
            .filter(|ct| !ct.to_ascii_lowercase().contains("event-stream"))
            .map(str::to_owned);
        // The request asks for none (`Accept-Encoding: identity`); a proxy that compresses
        // anyway made "malformed event stream: invalid line" of it.
        let coding = response
            .headers()
            .get(header::CONTENT_ENCODING)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|c| !c.is_empty() && !c.eq_ignore_ascii_case("identity"))
            .map(str::to_owned);
        // Some proxies answer 200 with a JSON error; say what came instead of "stream ended".
        let refused = match (content_type, coding) {
            (Some(content_type), _) => {
                let status = response.status();
                let text = endpoint.error_message(&mut response).await;
                Some(format!(
                    "expected an event stream, got HTTP {status} with {content_type}: {text}"
                ))
            }
            (None, Some(coding)) => Some(format!(
                "the event stream came compressed (Content-Encoding: {coding}) though none was \
                 asked for: a proxy between the executor and the provider compresses it"
            )),
            (None, None) => None,
        };
        let provider = endpoint.provider.clone();
        let mut reader = Self::new(
            provider,
            response_chunks(Arc::clone(&endpoint), response),
            MAX_BODY,
            decoder,
        );
        reader.endpoint = Some(endpoint);
        if let Some(message) = refused {
            reader.fail(LlmError::Stream {
                provider: reader.provider.clone(),
                message,
            });
        }
        reader
    }

    /// Ends the stream with `error`.
    fn fail(&mut self, error: LlmError) {
        self.finished = true;
        self.pending.push_back(Err(error));
    }

    async fn next(&mut self) -> Option<Result<LlmEvent, LlmError>> {
        loop {
            if let Some(item) = self.pending.pop_front() {
                return Some(item.map_err(|e| self.scrubbed(e)));
            }
            if self.finished {
                return None;
            }
            let step = match self.events.next().await {
                Some(Ok(sse)) => self.event(sse),
                Some(Err(e)) => Err(self.stream_error(e)),
                None => {
                    self.finished = true;
                    self.decoder.eof(&mut self.pending)
                }
            };
            if let Err(e) = step {
                self.fail(e);
            }
        }
    }

    /// `error` without the endpoint's secrets in the text the server gave it.
    fn scrubbed(&self, error: LlmError) -> LlmError {
        let Some(endpoint) = &self.endpoint else {
            return error;
        };
        match error {
            LlmError::Stream { provider, message } => LlmError::Stream {
                provider,
                message: endpoint.scrub(&message),
            },
            LlmError::Provider {
                provider,
                kind,
                message,
            } => LlmError::Provider {
                provider,
                kind: endpoint.scrub(&kind),
                message: endpoint.scrub(&message),
            },
            other => other,
        }
    }

    fn event(&mut self, sse: Sse) -> Result<(), LlmError> {
        let Some(data) = sse.data else {
            return Ok(()); // an event without data is not dispatched
        };
        let event = SseEvent {
            event: sse.event.unwrap_or_default(),
            data,
        };
        if let Progress::Complete = self.decoder.event(event, &mut self.pending)? {
            self.finished = true;
        }
        Ok(())
    }

    fn stream_error(&self, e: ::sse_stream::Error) -> LlmError {
        let provider = self.provider.clone();
        let body = match &e {
            ::sse_stream::Error::Body(body) => body.downcast_ref::<BodyError>(),
            _ => None,
        };
        match body {
            Some(&BodyError::Idle(after)) => LlmError::Timeout {
                provider,
                after,
                waiting_for: "the next chunk",
                attempts: 1,
            },
            Some(body) => LlmError::Stream {
                provider,
                message: body.to_string(),
            },
            None => LlmError::Stream {
                provider,
                message: format!("malformed event stream: {e}"),
            },
        }
    }
}

/// Decodes a recorded body, delivered in `chunks`, exactly as a live call would but without a
/// connection or timeouts: the way in for the fuzz targets (`fuzz/`) and for tests.
pub(crate) fn decode_chunks<D: Decode>(
    provider: &str,
    decoder: D,
    chunks: &[&[u8]],
) -> Vec<Result<LlmEvent, LlmError>> {
    decode_recorded(provider, decoder, chunks, MAX_BODY)
}

fn decode_recorded<D: Decode>(
    provider: &str,
    decoder: D,
    chunks: &[&[u8]],
    max: usize,
) -> Vec<Result<LlmEvent, LlmError>> {
    let chunks: Vec<Result<Bytes, BodyError>> = chunks
        .iter()
        .map(|chunk| Ok(Bytes::copy_from_slice(chunk)))
        .collect();
    let chunks: Chunks = Box::pin(stream::iter(chunks));
    let mut reader = Reader::new(provider.to_owned(), chunks, max, decoder);
    futures::executor::block_on(async {
        let mut out = Vec::new();
        while let Some(item) = reader.next().await {
            out.push(item);
        }
        out
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by the `openai_stream` and `anthropic_stream` fuzz targets: a bad line after an
    /// event in the same chunk was reported before that event, so the events a body yields
    /// depended on where the network cut it.
    #[test]
    fn events_before_a_bad_line_come_out_however_the_body_is_cut() {
        for body in [
            &b"data: {\"choices\":[{\"delta\":{\"content\":\"Hello\"}}]}\n\n\0\n"[..],
            b"data:\0\n\n\0\n",
            b"data: \"id\":ONE]\n\na\xa8\x97\0ge\n\0\x0f\xff\xff\x97\0",
            b"data: x\r\n\r\ndata: \xff\n\n",
            b"data:\n\ne\n",
        ] {
            for decode in [
                crate::llm::openai::decode_body,
                crate::llm::anthropic::decode_body,
            ] {
                let bytes: Vec<&[u8]> = body.chunks(1).collect();
                assert_eq!(
                    decode(&bytes),
                    decode(&[body]),
                    "{}",
                    String::from_utf8_lossy(body)
                );
            }
        }
    }

    /// An OpenAI-compatible stream that ends (`[DONE]`) without any choice is a failed call,
    /// not an empty answer; one whose answer only lacks a finish reason is taken.
    #[test]
    fn a_done_without_any_answer_is_an_error() {
        for body in [
            &b"data: [DONE]\n\n"[..],
            b"data: {\"choices\":[]}\n\ndata: [DONE]\n\n",
            b"data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\ndata: [DONE]\n\n",
        ] {
            let out = crate::llm::openai::decode_body(&[body]);
            assert!(
                matches!(out.last(), Some(Err(LlmError::Stream { message, .. })) if message.contains("without an answer")),
                "{out:?}"
            );
        }
        let lenient = crate::llm::openai::decode_body(&[
            b"data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\ndata: [DONE]\n\n",
        ]);
        assert!(
            matches!(lenient.last(), Some(Ok(LlmEvent::Done { .. }))),
            "{lenient:?}"
        );
    }

    /// Records each event as a text delta `event|data`, and the end of the body as `eof`.
    struct Record;

    impl Decode for Record {
        fn event(
            &mut self,
            event: SseEvent,
            out: &mut VecDeque<Result<LlmEvent, LlmError>>,
        ) -> Result<Progress, LlmError> {
            let done = event.data == "[DONE]";
            out.push_back(Ok(LlmEvent::TextDelta(format!(
                "{}|{}",
                event.event, event.data
            ))));
            Ok(if done {
                Progress::Complete
            } else {
                Progress::More
            })
        }

        fn eof(&mut self, out: &mut VecDeque<Result<LlmEvent, LlmError>>) -> Result<(), LlmError> {
            out.push_back(Ok(LlmEvent::TextDelta("eof".to_owned())));
            Ok(())
        }
    }

    fn decode(body: &[u8], piece: usize, max: usize) -> Vec<Result<String, String>> {
        let chunks: Vec<&[u8]> = body.chunks(piece).collect();
        decode_recorded("p", Record, &chunks, max)
            .into_iter()
            .map(|item| match item {
                Ok(LlmEvent::TextDelta(text)) => Ok(text),
                Ok(other) => Err(format!("unexpected {other:?}")),
                Err(e) => Err(e.to_string()),
            })
            .collect()
    }

    fn texts(items: &[&str]) -> Vec<Result<String, String>> {
        items.iter().map(|t| Ok((*t).to_owned())).collect()
    }

    #[test]
    fn events_survive_any_chunking_and_line_ending() {
        let body = "event: message_start\ndata: {\"a\":1}\n\n: keep-alive\r\n\r\ndata: héllo\r\ndata: world\r\rdata:[DONE]\n\ndata: after the end\n\n";
        let expected = texts(&["message_start|{\"a\":1}", "|héllo\nworld", "|[DONE]"]);
        for piece in 1..body.len() {
            assert_eq!(
                decode(body.as_bytes(), piece, MAX_BODY),
                expected,
                "piece size {piece}"
            );
        }
    }

    #[test]
    fn unterminated_last_event_is_dispatched_at_the_end() {
        assert_eq!(decode(b"data: tail", 4, MAX_BODY), texts(&["|tail", "eof"]));
    }

    #[test]
    fn event_without_data_is_not_dispatched() {
        assert_eq!(decode(b"event: ping\n\n", 3, MAX_BODY), texts(&["eof"]));
    }

    #[test]
    fn a_malformed_line_ends_the_stream_with_an_error_naming_it() {
        let out = decode(b"data: one\n\nno colon here\n\ndata: two\n\n", 11, MAX_BODY);
        assert_eq!(out.len(), 2, "{out:?}");
        assert_eq!(out[0], Ok("|one".to_owned()));
        let error = out[1].clone().expect_err("an error");
        assert!(
            error.contains("malformed event stream: invalid line"),
            "{error}"
        );
    }

    #[test]
    fn a_body_past_the_limit_ends_with_an_error_and_no_more_events() {
        let out = decode(b"data: one\n\ndata: two\n\n", 4, 16);
        assert_eq!(out.len(), 2, "{out:?}");
        assert_eq!(out[0], Ok("|one".to_owned()));
        let error = out[1].clone().expect_err("an error");
        assert!(error.contains("longer than 16 bytes"), "{error}");
    }
}
