//! The MCP server on stdin/stdout (`gateway --mcp-stdio`), one JSON-RPC message per line.
//!
//! Every line goes through [`check`] before rmcp reads it, so a message gets the answer the
//! same body POSTed to `/mcp` gets: a line that fails the check (or is over `--max-body-bytes`)
//! is answered here with the same JSON-RPC error body and never reaches rmcp; the other lines
//! reach rmcp unchanged (valid notifications stay unanswered). rmcp alone answers a `tools/call`
//! whose params do not fit with "invalid request" (without the id) or "method not found", and a
//! line that is not JSON not at all.
//!
//! rmcp's messages and these answers go through one writer task that owns stdout and writes
//! whole lines, so they never interleave. stdout carries protocol messages only; logs go to
//! stderr.

use std::{
    io,
    pin::Pin,
    task::{Context, Poll, ready},
    time::Duration,
};

use rmcp::{
    ServiceExt,
    transport::{async_rw::AsyncRwTransport, stdio_pipes},
};
use tokio::{
    io::{AsyncBufRead, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, ReadBuf},
    sync::mpsc,
};
use tokio_util::sync::{CancellationToken, PollSender};
use tracing::{debug, info, warn};

use super::{
    TaskforceMcp,
    transport::{Rejection, check},
};
use crate::{config::Config, error::GatewayError, state::AppState};

/// How long one line may take to reach stdout; past it the client is taken to have stopped
/// reading, and the session ends.
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// Lines queued for stdout before rmcp's writes and the reading of stdin wait.
const QUEUED_LINES: usize = 64;
/// The UTF-8 byte order mark, which rmcp ignores at the start of a line (RFC 8259 §8.1).
const BOM: &[u8] = b"\xEF\xBB\xBF";
/// What a line may hold besides its message: a [`BOM`] before it, `\r\n` after it.
const FRAMING: usize = BOM.len() + 2;

/// Serves the MCP server on stdin/stdout until the client closes stdin, stdout stops taking
/// lines, or `shutdown` fires.
pub async fn serve_stdio(config: Config, shutdown: CancellationToken) -> Result<(), GatewayError> {
    config.validate()?;
    let state = AppState::new(&config, shutdown.clone())?;
    info!(registry = %config.registry_url, "mcp server on stdio");
    let session = shutdown.child_token();
    let (stdin, stdout) = stdio_pipes();
    let (lines, queued) = mpsc::channel(QUEUED_LINES);
    let mut writer = tokio::spawn(write_lines(stdout, queued, session.clone()));
    let limit = config.max_body_bytes;
    let transport = AsyncRwTransport::new_server(
        CheckedLines::new(stdin, limit, PollSender::new(lines.clone())),
        LineOut::new(PollSender::new(lines)),
    )
    // Longer lines were answered already.
    .with_max_line_length(limit.saturating_add(FRAMING));
    let served = match TaskforceMcp::new(state)
        .serve_with_ct(transport, session)
        .await
    {
        Ok(running) => running
            .waiting()
            .await
            .map(|reason| info!(reason = ?reason, "mcp stdio session ended"))
            .map_err(|e| GatewayError::Mcp(e.to_string())),
        // A signal before the client initialised is an ordinary stop, and so is a client that
        // closed stdin without initialising (it gave up, or only asked `server/discover`).
        Err(_) if shutdown.is_cancelled() => Ok(()),
        Err(rmcp::service::ServerInitializeError::ConnectionClosed(_)) => {
            info!("stdin closed before the client initialised; the mcp stdio session ended");
            Ok(())
        }
        Err(e) => Err(GatewayError::Mcp(e.to_string())),
    };
    // rmcp has dropped the transport and with it every sender: the writer ends once the lines
    // still queued are out.
    if tokio::time::timeout(WRITE_TIMEOUT, &mut writer)
        .await
        .is_err()
    {
        writer.abort();
        warn!(
            timeout_secs = WRITE_TIMEOUT.as_secs(),
            "stdout still had lines to write; leaving them"
        );
    }
    served
}

/// Writes each queued line to `out` and flushes it, until every sender is gone. A failed write,
/// or one that takes over [`WRITE_TIMEOUT`], ends the session.
async fn write_lines<W: AsyncWrite + Unpin>(
    mut out: W,
    mut lines: mpsc::Receiver<Vec<u8>>,
    session: CancellationToken,
) {
    while let Some(line) = lines.recv().await {
        let write = async {
            out.write_all(&line).await?;
            out.flush().await
        };
        let error = match tokio::time::timeout(WRITE_TIMEOUT, write).await {
            Ok(Ok(())) => continue,
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("no line written in {}s", WRITE_TIMEOUT.as_secs()),
        };
        warn!(
            error,
            "stdout takes no more lines; ending the mcp stdio session"
        );
        session.cancel();
        return;
    }
}

/// The error of a side whose writer task has stopped.
fn writer_gone() -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, "the stdout writer has stopped")
}

/// A JSON-RPC error answer as one line.
fn answer_line(rejection: &Rejection) -> Vec<u8> {
    let mut line = rejection.answer().to_string().into_bytes();
    line.push(b'\n');
    line
}

/// stdin as rmcp reads it: the lines that pass [`check`]. A line that does not, or that is over
/// `limit` bytes (`--max-body-bytes`), is answered with its JSON-RPC error instead. Blank lines
/// and an unterminated last line are dropped, as rmcp drops them.
///
/// rmcp polls its reads inside a `select!` and may drop one half-way, so all state lives here,
/// never in a future.
struct CheckedLines<R> {
    read: BufReader<R>,
    /// The line being read, up to its `\n`.
    line: Vec<u8>,
    /// Set while dropping the rest of a line over the limit, up to its `\n`.
    discarding: bool,
    /// A line that passed, handed to rmcp from `passed[handed..]`.
    passed: Vec<u8>,
    handed: usize,
    limit: usize,
    answers: PollSender<Vec<u8>>,
    /// An answer waiting for room in the queue; stdin is not read meanwhile, so a client that
    /// floods bad lines and reads no answers is slowed down, not buffered for.
    answer: Option<Vec<u8>>,
}

impl<R: AsyncRead + Unpin> CheckedLines<R> {
    fn new(read: R, limit: usize, answers: PollSender<Vec<u8>>) -> Self {
        Self {
            read: BufReader::new(read),
            line: Vec::new(),
            discarding: false,
            passed: Vec::new(),
            handed: 0,
            limit,
            answers,
            answer: None,
        }
    }

    /// Checks the whole line just read: it passes, or its answer is queued.
    fn finish_line(&mut self) {
        let line = std::mem::take(&mut self.line);
        let message = line.strip_suffix(b"\n").unwrap_or(&line);
        let message = message.strip_suffix(b"\r").unwrap_or(message);
        let message = message.strip_prefix(BOM).unwrap_or(message);
        if message.trim_ascii().is_empty() {
            return;
        }
        let checked = if message.len() > self.limit {
            Err(Rejection::too_large(self.limit))
        } else {
            check(message)
        };
        match checked {
            Ok(()) => {
                self.passed = line;
                self.handed = 0;
            }
            // JSON-RPC answers no notification, a bad one neither.
            Err(rejection) if rejection.notification => {
                debug!(code = rejection.code, error = %rejection.message, "dropping an invalid mcp notification");
            }
            Err(rejection) => {
                debug!(code = rejection.code, id = %rejection.id, error = %rejection.message, "answering an invalid mcp message");
                self.answer = Some(answer_line(&rejection));
            }
        }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for CheckedLines<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if let Some(answer) = this.answer.take() {
                match this.answers.poll_reserve(cx) {
                    Poll::Ready(Ok(())) => {
                        this.answers.send_item(answer).map_err(|_| writer_gone())?
                    }
                    Poll::Ready(Err(_)) => return Poll::Ready(Err(writer_gone())),
                    Poll::Pending => {
                        this.answer = Some(answer);
                        return Poll::Pending;
                    }
                }
            }
            if this.handed < this.passed.len() {
                let n = buf.remaining().min(this.passed.len() - this.handed);
                buf.put_slice(&this.passed[this.handed..this.handed + n]);
                this.handed += n;
                return Poll::Ready(Ok(()));
            }
            let available = ready!(Pin::new(&mut this.read).poll_fill_buf(cx))?;
            if available.is_empty() {
                return Poll::Ready(Ok(()));
            }
            let newline = available.iter().position(|b| *b == b'\n');
            let take = newline.map_or(available.len(), |i| i + 1);
            let complete = if this.discarding {
                this.discarding = newline.is_none();
                false
            } else if this.line.len().saturating_add(take) > this.limit.saturating_add(FRAMING) {
                this.line.clear();
                this.discarding = newline.is_none();
                let rejection = Rejection::too_large(this.limit);
                debug!(
                    limit = this.limit,
                    "answering an mcp message over the limit"
                );
                this.answer = Some(answer_line(&rejection));
                false
            } else {
                this.line.extend_from_slice(&available[..take]);
                newline.is_some()
            };
            Pin::new(&mut this.read).consume(take);
            if complete {
                this.finish_line();
            }
        }
    }
}

/// rmcp's side of stdout: what it writes goes to the writer task's queue in whole lines.
struct LineOut {
    lines: PollSender<Vec<u8>>,
    /// What rmcp wrote after its last `\n` (rmcp writes whole messages; this is for safety).
    partial: Vec<u8>,
}

impl LineOut {
    fn new(lines: PollSender<Vec<u8>>) -> Self {
        Self {
            lines,
            partial: Vec::new(),
        }
    }
}

impl AsyncWrite for LineOut {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let Some(end) = buf.iter().rposition(|b| *b == b'\n') else {
            this.partial.extend_from_slice(buf);
            return Poll::Ready(Ok(buf.len()));
        };
        ready!(this.lines.poll_reserve(cx)).map_err(|_| writer_gone())?;
        let mut lines = std::mem::take(&mut this.partial);
        lines.extend_from_slice(&buf[..=end]);
        this.lines.send_item(lines).map_err(|_| writer_gone())?;
        Poll::Ready(Ok(end + 1))
    }

    /// Queued is as far as this side goes: the writer task flushes every line it writes.
    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().lines.close();
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};
    use tokio::io::AsyncReadExt;

    use super::*;

    /// What rmcp would read from `input` and the answers written for it, with `limit`.
    async fn run(input: &[u8], limit: usize) -> (String, Vec<Value>) {
        let (tx, mut rx) = mpsc::channel(QUEUED_LINES);
        let mut read = CheckedLines::new(input, limit, PollSender::new(tx));
        let mut passed = String::new();
        read.read_to_string(&mut passed).await.expect("reads");
        drop(read);
        let mut answers = Vec::new();
        while let Some(line) = rx.recv().await {
            assert_eq!(line.last(), Some(&b'\n'));
            answers.push(serde_json::from_slice(&line).expect("an answer is JSON"));
        }
        (passed, answers)
    }

    #[tokio::test]
    async fn lines_that_fail_the_check_get_the_answer_of_mcp_over_http() {
        let good = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"list_agents","arguments":{}}}"#;
        let bad_params = r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":"x"}"#;
        let bad_id =
            r#"{"jsonrpc":"2.0","id":1.5,"method":"tools/call","params":{"name":"list_agents"}}"#;
        let batch = r#"[{"jsonrpc":"2.0","id":3,"method":"ping"}]"#;
        let notification = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
        // A notification whose params do not fit: dropped, not answered (JSON-RPC answers no
        // notification).
        let bad_notification =
            r#"{"jsonrpc":"2.0","method":"notifications/initialized","params":[]}"#;
        let input = format!(
            "{good}\n\n{bad_params}\r\n{bad_id}\n{bad_notification}\n{batch}\n{{not json\n{notification}\n\u{feff}{good}\r\n{good}"
        );
        let (passed, answers) = run(input.as_bytes(), 1024).await;
        // Good lines unchanged (a BOM and `\r\n` included); an unterminated last line dropped.
        assert_eq!(
            passed,
            format!("{good}\n{notification}\n\u{feff}{good}\r\n")
        );
        let expected: Vec<Value> = [bad_params, bad_id, batch, "{not json"]
            .iter()
            .map(|m| check(m.as_bytes()).expect_err("fails the check").answer())
            .collect();
        assert_eq!(answers, expected);
        let codes: Vec<&Value> = answers.iter().map(|a| &a["error"]["code"]).collect();
        assert_eq!(
            codes,
            [
                &json!(-32602),
                &json!(-32600),
                &json!(-32600),
                &json!(-32700)
            ]
        );
        assert_eq!(answers[0]["id"], 2);
        assert_eq!(answers[1]["id"], Value::Null);
    }

    #[tokio::test]
    async fn a_line_over_the_limit_is_answered_and_the_next_one_still_read() {
        let good = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
        let long = format!(
            r#"{{"jsonrpc":"2.0","id":2,"method":"ping","params":{{"x":"{}"}}}}"#,
            "a".repeat(10_000)
        );
        let input = format!("{long}\n{good}\n");
        let (passed, answers) = run(input.as_bytes(), 100).await;
        assert_eq!(passed, format!("{good}\n"));
        assert_eq!(answers, [Rejection::too_large(100).answer()]);
        // Exactly at the limit passes, with a BOM and `\r\n` around it.
        let line = format!("\u{feff}{good}\r\n");
        let (passed, answers) = run(line.as_bytes(), good.len()).await;
        assert_eq!((passed, answers), (line, vec![]));
    }

    #[tokio::test]
    async fn rmcp_writes_reach_the_queue_as_whole_lines() {
        let (tx, mut rx) = mpsc::channel(QUEUED_LINES);
        let mut out = LineOut::new(PollSender::new(tx));
        out.write_all(b"{\"a\":").await.expect("writes");
        out.write_all(b"1}\n{\"b\":2}\n{\"c\"")
            .await
            .expect("writes");
        out.shutdown().await.expect("closes");
        assert_eq!(
            rx.recv().await.as_deref(),
            Some(&b"{\"a\":1}\n{\"b\":2}\n"[..])
        );
        assert_eq!(rx.recv().await, None);
    }
}
