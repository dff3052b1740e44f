//! A small incremental decoder for `text/event-stream` bodies (the WHATWG rules that matter for
//! LLM APIs: `event:` and `data:` fields, multi-line data, comments, CRLF/LF/CR line ends, events
//! dispatched on a blank line). Bytes arrive in arbitrary chunks; a line may be split anywhere,
//! even inside a UTF-8 sequence.

/// One dispatched server-sent event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct SseEvent {
    /// The `event:` field; empty when absent (the spec's "message").
    pub event: String,
    /// The `data:` lines joined with `\n`.
    pub data: String,
}

/// Longest line accepted; a server that sends more without a line end is broken or hostile.
const MAX_LINE: usize = 16 * 1024 * 1024;

/// Incremental decoder: feed chunks, collect events.
#[derive(Debug, Default)]
pub(crate) struct SseDecoder {
    buf: Vec<u8>,
    /// The previous chunk ended in `\r`: a `\n` at the start of the next one belongs to it.
    after_cr: bool,
    event: String,
    data: String,
    has_data: bool,
}

impl SseDecoder {
    /// Feeds a chunk and appends the events it completes to `out`.
    pub fn feed(&mut self, chunk: &[u8], out: &mut Vec<SseEvent>) -> Result<(), String> {
        let mut chunk = chunk;
        if self.after_cr && chunk.first() == Some(&b'\n') {
            chunk = &chunk[1..];
        }
        self.after_cr = false;
        let mut start = 0;
        let mut i = 0;
        while i < chunk.len() {
            let b = chunk[i];
            if b == b'\n' || b == b'\r' {
                let line_end = i;
                if b == b'\r' {
                    if chunk.get(i + 1) == Some(&b'\n') {
                        i += 1;
                    } else if i + 1 == chunk.len() {
                        self.after_cr = true;
                    }
                }
                if self.buf.is_empty() {
                    self.line(&chunk[start..line_end], out);
                } else {
                    self.buf.extend_from_slice(&chunk[start..line_end]);
                    let line = std::mem::take(&mut self.buf);
                    self.line(&line, out);
                }
                start = i + 1;
            }
            i += 1;
        }
        self.buf.extend_from_slice(&chunk[start..]);
        if self.buf.len() > MAX_LINE {
            return Err(format!(
                "an event-stream line is longer than {MAX_LINE} bytes"
            ));
        }
        Ok(())
    }

    /// Ends the body: a last event without its blank line is still dispatched (lenient).
    pub fn finish(&mut self, out: &mut Vec<SseEvent>) {
        if !self.buf.is_empty() {
            let line = std::mem::take(&mut self.buf);
            self.line(&line, out);
        }
        self.dispatch(out);
    }

    fn line(&mut self, line: &[u8], out: &mut Vec<SseEvent>) {
        if line.is_empty() {
            self.dispatch(out);
            return;
        }
        if line[0] == b':' {
            return; // comment, e.g. keep-alive
        }
        let line = String::from_utf8_lossy(line);
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line.as_ref(), ""),
        };
        match field {
            "event" => value.clone_into(&mut self.event),
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            _ => {} // id, retry and unknown fields do not matter here
        }
    }

    fn dispatch(&mut self, out: &mut Vec<SseEvent>) {
        if self.has_data {
            out.push(SseEvent {
                event: std::mem::take(&mut self.event),
                data: std::mem::take(&mut self.data),
            });
        }
        self.event.clear();
        self.has_data = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_in_pieces(body: &[u8], piece: usize) -> Vec<SseEvent> {
        let mut decoder = SseDecoder::default();
        let mut out = Vec::new();
        for chunk in body.chunks(piece) {
            decoder.feed(chunk, &mut out).expect("feed");
        }
        decoder.finish(&mut out);
        out
    }

    #[test]
    fn events_survive_any_chunking_and_line_ending() {
        let body = "event: message_start\ndata: {\"a\":1}\n\n: keep-alive\r\n\r\ndata: héllo\r\ndata: world\r\rdata:[DONE]\n\n";
        let expected = vec![
            SseEvent {
                event: "message_start".into(),
                data: "{\"a\":1}".into(),
            },
            SseEvent {
                event: String::new(),
                data: "héllo\nworld".into(),
            },
            SseEvent {
                event: String::new(),
                data: "[DONE]".into(),
            },
        ];
        for piece in 1..body.len() {
            assert_eq!(
                decode_in_pieces(body.as_bytes(), piece),
                expected,
                "piece size {piece}"
            );
        }
    }

    #[test]
    fn unterminated_last_event_is_dispatched_at_the_end() {
        assert_eq!(
            decode_in_pieces(b"data: tail", 4),
            vec![SseEvent {
                event: String::new(),
                data: "tail".into()
            }]
        );
    }

    #[test]
    fn event_without_data_is_not_dispatched() {
        assert!(decode_in_pieces(b"event: ping\n\n", 3).is_empty());
    }
}
