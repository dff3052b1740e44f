//! Following a run's event stream: tokens as they arrive, tool calls and results as short
//! lines, the end as the session id and its status (human), or every event as one JSON line
//! (`--json`); and the exit code of the run's status.

use std::io::Write;

use futures::StreamExt;
use serde_json::{Value, json};

use crate::{
    backend::EventStream,
    convert::{ends_run, is_top},
    error::{Error, Result},
    render::{clip, text},
};

/// The session of the run being followed, once its first event named it: what an interrupted
/// CLI tells the user to look up (a process follows one run at a time).
static FOLLOWING: std::sync::Mutex<String> = std::sync::Mutex::new(String::new());

/// The session of the run being followed (empty before its first event).
pub fn following() -> String {
    FOLLOWING.lock().map(|s| s.clone()).unwrap_or_default()
}

/// Widest tool argument or output shown on a line.
const LINE_WIDTH: usize = 100;

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The run's session.
    pub session_id: String,
    /// `completed`, `paused`, `failed`, `cancelled` (from the top agent's `done`).
    pub status: String,
    /// The top agent's last `error` event (`code`, `message`), if any.
    pub error: Option<(String, String)>,
}

impl Outcome {
    /// What stderr says about a run that failed or was cancelled (stdout has its events): a
    /// sentence, or with `--json` the error body with the session. `None` for other runs.
    pub fn stderr_line(&self, json: bool) -> Option<String> {
        if self.exit_code() != 1 {
            return None;
        }
        let (code, message) = self.error.clone().unwrap_or_else(|| {
            let ended = match self.status.as_str() {
                "cancelled" => "the run was cancelled".to_owned(),
                other => format!("the run {other}"),
            };
            (self.status.to_ascii_uppercase(), ended)
        });
        Some(if json {
            json!({
                "error": code.to_ascii_lowercase(),
                "message": message,
                "session_id": self.session_id,
            })
            .to_string()
        } else if self.error.is_some() {
            format!(
                "error: the run {}: {code}: {message} (session {})",
                self.status, self.session_id
            )
        } else {
            format!("error: {message} (session {})", self.session_id)
        })
    }

    /// The process exit code: 0 completed, 2 paused on a question, 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self.status.as_str() {
            "completed" => 0,
            "paused" => 2,
            _ => 1,
        }
    }
}

/// Prints a run's events to `out` until the top agent's `done`. `answer_hint` is the command
/// prefix that answers a question (`taskforce answer`, with this invocation's connection
/// flags, such as `--grpc`).
pub async fn follow(
    mut events: EventStream,
    out: &mut impl Write,
    json: bool,
    answer_hint: &str,
) -> Result<Outcome> {
    let mut printer = Printer::default();
    let mut last_error: Option<Value> = None;
    let mut run_error: Option<(String, String)> = None;
    while let Some(event) = events.next().await {
        let event = match event {
            Ok(event) => event,
            Err(e) => {
                if !json {
                    printer.end_line(out)?;
                }
                return Err(with_session(e, &printer.session_id));
            }
        };
        let printed = if json {
            writeln!(out, "{event}").and_then(|()| out.flush())
        } else {
            printer.print(out, &event)
        };
        if printer.session_id.is_empty()
            && let Some(id) = event["session_id"].as_str()
        {
            id.clone_into(&mut printer.session_id);
            if let Ok(mut following) = FOLLOWING.lock() {
                id.clone_into(&mut following);
            }
        }
        if event["type"] == "question" && is_top(&event) {
            printer.question = Some(event.clone());
        }
        // The gateway ends a stream it lost the executor of with an `error` event and no
        // `done`: that error, not a broken stream, is what ended the run.
        last_error = (event["type"] == "error" && is_top(&event)).then(|| event.clone());
        if let Some(e) = &last_error {
            run_error = Some((text(&e["code"]), text(&e["message"])));
        }
        if ends_run(&event) {
            let outcome = Outcome {
                session_id: printer.session_id.clone(),
                status: text(&event["status"]),
                error: run_error,
            };
            let printed = printed.and_then(|()| {
                if json {
                    Ok(())
                } else {
                    printer.summary(out, &outcome, &event, answer_hint)
                }
            });
            return match printed {
                // The run has ended: a reader that stopped reading (a closed pipe) does not
                // change how.
                Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
                _ => Ok(outcome),
            };
        }
        printed?;
    }
    if !json {
        printer.end_line(out)?;
    }
    let error = match last_error {
        Some(e) => Error::Api {
            status: None,
            body: json!({
                "error": text(&e["code"]).to_ascii_lowercase(),
                "message": text(&e["message"]),
            }),
        },
        None => Error::Protocol {
            service: "run stream",
            message: "the event stream ended before the run did".to_owned(),
        },
    };
    Err(with_session(error, &printer.session_id))
}

/// Adds where to look next to an error that broke a run's stream.
fn with_session(e: Error, session_id: &str) -> Error {
    if session_id.is_empty() {
        return e;
    }
    Error::RunBroken {
        error: Box::new(e),
        session_id: session_id.to_owned(),
    }
}

/// What the human view remembers between events.
#[derive(Debug, Default)]
struct Printer {
    session_id: String,
    /// Something is on the current line (tokens without a newline yet).
    mid_line: bool,
    /// The frame whose tokens are on the current line.
    token_frame: Option<String>,
    /// The top agent streamed text since its last tool call (its final answer was printed).
    top_text: bool,
    /// The top agent's question, shown at the end.
    question: Option<Value>,
}

impl Printer {
    /// Ends a line of tokens.
    fn end_line(&mut self, out: &mut impl Write) -> std::io::Result<()> {
        if self.mid_line {
            writeln!(out)?;
            self.mid_line = false;
        }
        self.token_frame = None;
        Ok(())
    }

    /// Prints a line of its own (after ending a line of tokens).
    fn line(&mut self, out: &mut impl Write, prefix: &str, text: &str) -> std::io::Result<()> {
        self.end_line(out)?;
        writeln!(out, "{prefix}{text}")
    }

    fn print(&mut self, out: &mut impl Write, ev: &Value) -> std::io::Result<()> {
        let top = is_top(ev);
        let prefix = agent_prefix(ev);
        let kind = ev["type"].as_str().unwrap_or_default();
        match kind {
            "token" => {
                let frame = text(&ev["frame_id"]);
                if self.token_frame.as_deref() != Some(frame.as_str()) {
                    self.end_line(out)?;
                    write!(out, "{prefix}")?;
                    self.token_frame = Some(frame);
                }
                let t = text(&ev["text"]);
                write!(out, "{t}")?;
                self.mid_line = !t.ends_with('\n');
                if !self.mid_line {
                    self.token_frame = None;
                }
                if top && !t.trim().is_empty() {
                    self.top_text = true;
                }
                out.flush()?;
            }
            "tool_start" => {
                if top {
                    self.top_text = false;
                }
                let args = clip(&text(&ev["arguments_json"]), LINE_WIDTH);
                let line = format!("→ {} {args}", text(&ev["tool"]));
                self.line(out, &prefix, line.trim_end())?;
            }
            "tool_end" => {
                let output = clip(text(&ev["output"]).trim(), LINE_WIDTH);
                let ms = ev["duration_ms"].as_u64().unwrap_or(0);
                let tool = text(&ev["tool"]);
                let line = if ev["is_error"].as_bool().unwrap_or(false) {
                    format!("✗ {tool} failed ({ms} ms): {output}")
                } else {
                    format!("← {tool} ({ms} ms): {output}")
                };
                self.line(out, &prefix, &line)?;
            }
            "tool_error" => {
                let line = format!(
                    "✗ {}: {}",
                    text(&ev["tool"]),
                    clip(&text(&ev["message"]), LINE_WIDTH)
                );
                self.line(out, &prefix, &line)?;
            }
            "warning" => {
                let line = format!("! {}: {}", text(&ev["code"]), text(&ev["message"]));
                self.line(out, &prefix, &line)?;
            }
            "error" => {
                let line = format!("✗ {}: {}", text(&ev["code"]), text(&ev["message"]));
                self.line(out, &prefix, &line)?;
            }
            "final_answer" if top && !self.top_text => {
                // Nothing was streamed (a provider that does not stream): show the answer.
                self.end_line(out)?;
                writeln!(out, "{}", text(&ev["text"]))?;
                self.top_text = true;
            }
            "delegation_start" => {
                let verb = if ev["resumed"].as_bool().unwrap_or(false) {
                    "resumes"
                } else {
                    "starts"
                };
                let line = format!("▶ {verb}: {}", clip(&text(&ev["task"]), LINE_WIDTH));
                self.line(out, &prefix, &line)?;
            }
            "delegation_end" => {
                let line = format!("■ {}", text(&ev["status"]));
                self.line(out, &prefix, &line)?;
            }
            "patch_applied" => {
                let line = format!(
                    "plan v{}: {}'s patch applied",
                    text(&ev["version"]),
                    text(&ev["author"])
                );
                self.line(out, &prefix, &line)?;
            }
            "patch_rejected" => {
                let line = format!(
                    "plan: {}'s patch rejected ({}): {}",
                    text(&ev["author"]),
                    text(&ev["reason"]),
                    text(&ev["message"])
                );
                self.line(out, &prefix, &line)?;
            }
            // run_started, question (shown at the end), a sub-agent's final answer (its
            // delegation_end follows), plan_updated, done: nothing on their own line.
            _ => {}
        }
        Ok(())
    }

    /// The end of a run: the question and how to answer it, or the session and its status.
    fn summary(
        &mut self,
        out: &mut impl Write,
        outcome: &Outcome,
        done: &Value,
        answer_hint: &str,
    ) -> std::io::Result<()> {
        self.end_line(out)?;
        let session = &outcome.session_id;
        let usage = &done["usage"];
        let steps = usage["steps"].as_u64().unwrap_or(0);
        let calls = usage["tool_calls"].as_u64().unwrap_or(0);
        let stats = format!(
            "{steps} step{}, {calls} tool call{}",
            plural(steps),
            plural(calls)
        );
        match (outcome.status.as_str(), &self.question) {
            ("paused", Some(q)) => {
                writeln!(out)?;
                for line in text(&q["question"]).lines() {
                    writeln!(out, "? {line}")?;
                }
                let items = q["items"].as_array().cloned().unwrap_or_default();
                writeln!(out, "session {session}: paused, waiting for an answer")?;
                // Naming the question: pasted twice, the second is refused instead of answering
                // the question the run asks next.
                let call = match text(&q["call_id"]) {
                    id if id.is_empty() => String::new(),
                    id => format!(" --call-id {}", crate::args::shell_word(&id)),
                };
                if items.is_empty() {
                    writeln!(
                        out,
                        "answer with: {answer_hint} {session}{call} \"<your answer>\""
                    )?;
                } else {
                    let sets: Vec<String> = items
                        .iter()
                        .map(|i| format!("--set '{}=<answer>'", text(&i["key"])))
                        .collect();
                    writeln!(
                        out,
                        "answer with: {answer_hint} {session}{call} {}",
                        sets.join(" ")
                    )?;
                    writeln!(out, "(a key left out takes its default)")?;
                }
            }
            (status, _) => {
                writeln!(out)?;
                writeln!(out, "session {session}: {status} ({stats})")?;
            }
        }
        out.flush()
    }
}

fn plural(n: u64) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// `[researcher] ` for a sub-agent's event (its path below the top agent), empty for the top.
fn agent_prefix(ev: &Value) -> String {
    let path: Vec<String> = ev["agent_path"]
        .as_array()
        .into_iter()
        .flatten()
        .map(text)
        .collect();
    if path.is_empty() {
        String::new()
    } else {
        format!("[{}] ", path.join("/"))
    }
}

#[cfg(test)]
mod tests {
    use futures::stream;
    use serde_json::json;

    use super::*;

    fn ev(kind: &str, fields: Value) -> Value {
        let mut v = json!({"type": kind, "session_id": "s-1", "seq": 1, "agent_path": [],
                           "frame_id": "", "time_unix_ms": 0});
        if let (Some(v), Value::Object(f)) = (v.as_object_mut(), fields) {
            v.extend(f);
        }
        v
    }

    async fn human(events: Vec<Value>, json: bool) -> (Result<Outcome>, String) {
        let stream: EventStream = Box::pin(stream::iter(events.into_iter().map(Ok)));
        let mut out = Vec::new();
        let r = follow(stream, &mut out, json, "taskforce answer").await;
        (r, String::from_utf8(out).expect("UTF-8"))
    }

    /// Output whose reader has gone: every write is a broken pipe.
    struct Closed;

    impl Write for Closed {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::ErrorKind::BrokenPipe.into())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Err(std::io::ErrorKind::BrokenPipe.into())
        }
    }

    #[tokio::test]
    async fn output_closed_before_the_end_is_an_error_but_not_once_the_run_ended() {
        for json in [true, false] {
            let ended = vec![ev("done", json!({"status": "completed"}))];
            let stream: EventStream = Box::pin(stream::iter(ended.into_iter().map(Ok)));
            let r = follow(stream, &mut Closed, json, "taskforce answer").await;
            assert!(
                matches!(&r, Ok(o) if o.exit_code() == 0),
                "json {json}: {r:?}"
            );
            let going = vec![
                ev("token", json!({"text": "a\n"})),
                ev("done", json!({"status": "completed"})),
            ];
            let stream: EventStream = Box::pin(stream::iter(going.into_iter().map(Ok)));
            let r = follow(stream, &mut Closed, json, "taskforce answer").await;
            assert!(
                matches!(&r, Err(e) if e.is_broken_pipe()),
                "json {json}: {r:?}"
            );
        }
    }

    #[tokio::test]
    async fn a_completed_run_prints_tokens_tools_and_the_session() {
        let (r, out) = human(
            vec![
                ev("run_started", json!({"agent_id": "a"})),
                ev("token", json!({"text": "Let me"})),
                ev("token", json!({"text": " look."})),
                ev("tool_start", json!({"tool": "file_read", "arguments_json": "{\"path\":\"n.txt\"}"})),
                ev("tool_end", json!({"tool": "file_read", "output": "hello\nworld", "is_error": false, "duration_ms": 3})),
                ev("token", json!({"text": "It says hello."})),
                ev("final_answer", json!({"text": "It says hello."})),
                ev("done", json!({"status": "completed", "usage": {"steps": 2, "tool_calls": 1}})),
            ],
            false,
        )
        .await;
        assert_eq!(
            r.ok(),
            Some(Outcome {
                session_id: "s-1".into(),
                status: "completed".into(),
                error: None,
            })
        );
        assert_eq!(
            out,
            "Let me look.\n→ file_read {\"path\":\"n.txt\"}\n← file_read (3 ms): hello …\n\
             It says hello.\n\nsession s-1: completed (2 steps, 1 tool call)\n"
        );
    }

    #[tokio::test]
    async fn a_stream_the_gateway_ended_with_an_error_is_that_error_not_a_broken_stream() {
        let (r, _) = human(
            vec![
                ev("run_started", json!({"agent_id": "a"})),
                ev(
                    "error",
                    json!({"code": "UNAVAILABLE", "message": "the connection to the executor was lost; try again later"}),
                ),
            ],
            true,
        )
        .await;
        let body = r.err().map(|e| e.to_json()).unwrap_or_default();
        assert_eq!(body["error"], "unavailable", "{body}");
        assert_eq!(body["session_id"], "s-1", "{body}");
        let (r, _) = human(vec![ev("run_started", json!({"agent_id": "a"}))], true).await;
        let body = r.err().map(|e| e.to_json()).unwrap_or_default();
        assert_eq!(
            body["error"], "internal",
            "a stream that just stops: {body}"
        );
    }

    #[test]
    fn a_grpc_stream_that_breaks_under_a_run_is_unavailable() {
        let broken = tonic::Status::internal("h2 protocol error: error reading a body");
        assert_eq!(
            Error::from_stream_status(&broken).to_json()["error"],
            "unavailable"
        );
        let refused = taskforce_proto::error::ApiError::new(
            taskforce_proto::error::ErrorKind::Internal,
            "a bug",
        )
        .to_status();
        assert_eq!(
            Error::from_stream_status(&refused).to_json()["error"],
            "internal"
        );
    }

    #[tokio::test]
    async fn a_paused_run_shows_the_question_and_how_to_answer() {
        let (r, out) = human(
            vec![
                ev(
                    "tool_start",
                    json!({"tool": "ask_user", "arguments_json": "{}"}),
                ),
                ev(
                    "question",
                    json!({"call_id": "c1", "question": "Which currency?", "items": []}),
                ),
                ev("done", json!({"status": "paused"})),
            ],
            false,
        )
        .await;
        assert_eq!(r.map(|o| o.exit_code()).ok(), Some(2));
        assert!(out.contains("? Which currency?\n"), "{out}");
        assert!(
            out.ends_with("session s-1: paused, waiting for an answer\nanswer with: taskforce answer s-1 --call-id c1 \"<your answer>\"\n"),
            "{out}"
        );
    }

    #[tokio::test]
    async fn sub_agents_are_prefixed_and_their_done_does_not_end_the_run() {
        let mut sub = ev("token", json!({"text": "sub text"}));
        sub["agent_path"] = json!(["researcher"]);
        sub["frame_id"] = json!("f1");
        let mut sub_done = ev("done", json!({"status": "completed"}));
        sub_done["frame_id"] = json!("f1");
        let (r, out) = human(
            vec![
                ev("token", json!({"text": "top"})),
                sub,
                sub_done,
                ev(
                    "error",
                    json!({"code": "LLM_ERROR", "message": "overloaded"}),
                ),
                ev("done", json!({"status": "failed"})),
            ],
            false,
        )
        .await;
        let outcome = r.expect("ends");
        assert_eq!(outcome.exit_code(), 1);
        assert!(out.starts_with("top\n[researcher] sub text\n"), "{out}");
        // stdout has the events; stderr says why the exit code is 1.
        assert_eq!(
            outcome.stderr_line(false).as_deref(),
            Some("error: the run failed: LLM_ERROR: overloaded (session s-1)")
        );
        let body: Value =
            serde_json::from_str(&outcome.stderr_line(true).expect("a line")).expect("JSON");
        assert_eq!(body["error"], "llm_error");
        assert_eq!(body["session_id"], "s-1");
        // A cancel without an error says so once.
        let cancelled = Outcome {
            status: "cancelled".into(),
            error: None,
            ..outcome.clone()
        };
        assert_eq!(
            cancelled.stderr_line(false).as_deref(),
            Some("error: the run was cancelled (session s-1)")
        );
        let body: Value =
            serde_json::from_str(&cancelled.stderr_line(true).expect("a line")).expect("JSON");
        assert_eq!(body["error"], "cancelled");
        assert_eq!(body["message"], "the run was cancelled");
        let completed = Outcome {
            status: "completed".into(),
            error: None,
            ..outcome
        };
        assert_eq!(completed.stderr_line(false), None);
    }

    #[tokio::test]
    async fn json_prints_one_event_per_line() {
        let events = vec![
            ev("token", json!({"text": "a"})),
            ev("done", json!({"status": "completed"})),
        ];
        let (r, out) = human(events.clone(), true).await;
        assert!(r.is_ok());
        let lines: Vec<Value> = out
            .lines()
            .map(|l| serde_json::from_str(l).expect("a JSON line"))
            .collect();
        assert_eq!(lines, events);
    }

    #[tokio::test]
    async fn a_stream_that_ends_early_is_an_error_naming_the_session() {
        let (r, _) = human(vec![ev("token", json!({"text": "a"}))], false).await;
        let err = r.expect_err("no done");
        assert!(
            err.render()
                .ends_with("\nsession s-1: `taskforce sessions show s-1` shows how it ended"),
            "{}",
            err.render()
        );
        assert_eq!(err.to_json()["session_id"], "s-1");
    }
}
