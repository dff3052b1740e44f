//! The gateway's SSE encoding of run events, in both dialects, read back by a real SSE parser
//! (`sse-stream`, the one the CLI reads the gateway with).
//!
//! The input picks an event kind and its strings. Checks:
//! - encoding never panics (axum's `Event` panics on a CR or LF in a field it does not split);
//! - native dialect: each run event with a kind is one SSE event, named after the kind, whose
//!   data is exactly `events::event_json` (and nothing for an event without a kind);
//! - chat dialect: a token, a question and an error arrive as the text they carry (line ends as
//!   `\n`: SSE cannot carry a CR; one that would read as JSON as `{"text": ...}`); tool events as `{"text","event","tool"}` with the tool's name;
//!   `done` as `event: end` + `[DONE]`; a sub-agent's events not at all;
//! - both dialects' final error after a broken stream reads back with its message.
#![no_main]

use std::convert::Infallible;

use bytes::Bytes;
use futures::{StreamExt, executor::block_on, stream};
use gateway::{
    chat::Chat,
    error::RestError,
    events::event_json,
    sse::{Dialect, Native, sse_response},
};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use sse_stream::{Sse, SseStream};
use taskforce_proto::{
    error::ErrorKind,
    v1::{self, run_event::Event as Ev},
};

/// The text a seed UI shows of a chat `data:`: the `text` of a JSON object that has one (what
/// the gateway sends a text that would read as JSON as), else the data itself.
fn shown(data: &str) -> String {
    match serde_json::from_str::<Value>(data) {
        Ok(Value::Object(o)) if !o.contains_key("event") => o
            .get("text")
            .and_then(Value::as_str)
            .map_or_else(|| data.to_owned(), str::to_owned),
        _ => data.to_owned(),
    }
}

/// What a seed UI shows of each event's `data:`.
fn shown_texts(decoded: &[Sse]) -> Vec<String> {
    decoded
        .iter()
        .filter_map(|e| e.data.as_deref())
        .map(shown)
        .collect()
}

fuzz_target!(|data: &[u8]| {
    let Some((&kind, rest)) = data.split_first() else {
        return;
    };
    let Some((&flags, rest)) = rest.split_first() else {
        return;
    };
    let mut parts = rest.split(|b| *b == 0).map(String::from_utf8_lossy);
    let mut s = move || parts.next().map(|p| p.into_owned()).unwrap_or_default();
    let sub_agent = flags & 1 == 1;
    let ev = run_event(kind, flags, sub_agent, &mut s);

    // Native.
    let decoded = round_trip(Native::default().frames(&ev));
    match event_json(&ev) {
        Some((name, json)) => {
            assert_eq!(decoded.len(), 1, "{decoded:?}");
            assert_eq!(decoded[0].event.as_deref(), Some(name));
            let data = decoded[0]
                .data
                .as_deref()
                .expect("native events carry data");
            let back: Value = serde_json::from_str(data).expect("native data is JSON");
            let json = serde_json::to_value(&json).expect("an event renders as JSON");
            assert_eq!(back, json, "native event changed on the wire");
        }
        None => assert!(decoded.is_empty()),
    }

    // Chat.
    let decoded = round_trip(Chat::default().frames(&ev));
    let texts = shown_texts(&decoded);
    match (&ev.event, sub_agent) {
        (_, true) => assert!(decoded.is_empty(), "a sub-agent's event reached a chat"),
        (Some(Ev::Token(t)), _) => assert_eq!(texts, non_empty(&lines(&t.text))),
        (Some(Ev::Question(q)), _) => assert_eq!(texts, non_empty(&lines(&q.question))),
        (Some(Ev::Error(e)), _) => assert_eq!(texts, [lines(&format!("⚠️ {}", e.message))]),
        (Some(Ev::ToolStart(t)), _) => tool_frame(&decoded, "tool_start", &t.tool),
        (Some(Ev::ToolEnd(t)), _) if t.is_error => tool_frame(&decoded, "tool_error", &t.tool),
        (Some(Ev::ToolEnd(t)), _) => tool_frame(&decoded, "tool_end", &t.tool),
        (Some(Ev::ToolError(t)), _) => tool_frame(&decoded, "tool_error", &t.tool),
        (Some(Ev::Done(d)), _) => {
            // A cancelled run says so before the end: the UI must not take its text as whole.
            let said: &[&str] = if d.status() == v1::RunStatus::Cancelled {
                &["⚠️ the run was cancelled", "[DONE]"]
            } else {
                &["[DONE]"]
            };
            assert_eq!(texts, said);
            let last = decoded.last().expect("an end frame");
            assert_eq!(last.event.as_deref(), Some("end"));
        }
        _ => assert!(decoded.is_empty()),
    }

    // The final error of a broken stream.
    let message = s();
    let decoded =
        round_trip(Native::default().broken(RestError::new(ErrorKind::Unavailable, &message)));
    assert_eq!(decoded.len(), 1);
    let back: Value =
        serde_json::from_str(decoded[0].data.as_deref().unwrap_or_default()).expect("JSON");
    assert_eq!(back["message"], Value::String(message.clone()));
    let decoded =
        round_trip(Chat::default().broken(RestError::new(ErrorKind::Unavailable, &message)));
    let texts = shown_texts(&decoded);
    assert_eq!(texts, [lines(&format!("⚠️ {message}")).as_str(), "[DONE]"]);
});

/// A run event of kind `kind % 15` with strings from `s`.
fn run_event(kind: u8, flags: u8, sub_agent: bool, s: &mut impl FnMut() -> String) -> v1::RunEvent {
    let is_error = flags & 2 == 2;
    let n = u64::from(flags);
    let event = match kind % 16 {
        0 => Ev::RunStarted(v1::RunStarted {
            agent_id: s(),
            model: s(),
            provider: s(),
        }),
        1 => Ev::Token(v1::Token { text: s() }),
        2 => Ev::ToolStart(v1::ToolStart {
            call_id: s(),
            tool: s(),
            arguments_json: s(),
        }),
        3 => Ev::ToolEnd(v1::ToolEnd {
            call_id: s(),
            tool: s(),
            output: s(),
            is_error,
            duration_ms: n,
        }),
        4 => Ev::ToolError(v1::ToolError {
            call_id: s(),
            tool: s(),
            message: s(),
        }),
        5 => Ev::Question(v1::Question {
            call_id: s(),
            question: s(),
            items: vec![v1::QuestionItem {
                key: s(),
                text: s(),
                required: is_error,
                default_json: s(),
                agent_path: vec![s()],
            }],
        }),
        6 => Ev::FinalAnswer(v1::FinalAnswer { text: s() }),
        7 => Ev::Error(v1::Error {
            code: s(),
            message: s(),
        }),
        8 => Ev::Warning(v1::Warning {
            code: s(),
            message: s(),
        }),
        9 => Ev::Done(v1::Done {
            status: i32::from(flags >> 2),
            usage: is_error.then(|| v1::Usage {
                input_tokens: n,
                ..Default::default()
            }),
        }),
        10 => Ev::DelegationStart(v1::DelegationStart {
            call_id: s(),
            agent_id: s(),
            task: s(),
            task_id: s(),
            resumed: is_error,
        }),
        11 => Ev::DelegationEnd(v1::DelegationEnd {
            call_id: s(),
            agent_id: s(),
            task_id: s(),
            status: s(),
            result_json: s(),
        }),
        12 => Ev::PatchApplied(v1::PatchApplied {
            author: s(),
            version: n,
            ops_json: s(),
        }),
        13 => Ev::PatchRejected(v1::PatchRejected {
            author: s(),
            reason: s(),
            message: s(),
            current_version: n,
            rejected_ops_json: s(),
        }),
        14 => Ev::PlanUpdated(v1::PlanUpdated {
            plan: Some(v1::Plan {
                version: n,
                tasks: vec![v1::PlanTask {
                    id: s(),
                    title: s(),
                    status: s(),
                    depends_on: vec![s()],
                    owner_agent: s(),
                    parent_id: s(),
                    notes: s(),
                    tool: s(),
                    params_json: s(),
                    result_json: s(),
                }],
                markdown: s(),
            }),
        }),
        _ => {
            return v1::RunEvent {
                session_id: s(),
                ..Default::default()
            };
        }
    };
    v1::RunEvent {
        session_id: s(),
        seq: n,
        agent_path: vec![s()],
        time_unix_ms: i64::from(flags),
        frame_id: if sub_agent { s() + "f" } else { String::new() },
        event: Some(event),
    }
}

/// `frames` encoded as the gateway sends them, then parsed by `sse-stream`, a byte at a time
/// and whole (which must agree).
fn round_trip(frames: Vec<axum::response::sse::Event>) -> Vec<Sse> {
    let response = sse_response(stream::iter(frames), false);
    let body = block_on(axum::body::to_bytes(response.into_body(), usize::MAX))
        .expect("an SSE body collects");
    let parse = |chunks: Vec<Bytes>| -> Vec<Sse> {
        let stream =
            SseStream::from_bytes_stream(stream::iter(chunks.into_iter().map(Ok::<_, Infallible>)));
        block_on(stream.collect::<Vec<_>>())
            .into_iter()
            .map(|r| r.unwrap_or_else(|e| panic!("the gateway sent invalid SSE ({e}): {body:?}")))
            .collect()
    };
    let whole = parse(vec![body.clone()]);
    let bytes = parse(body.iter().map(|b| Bytes::copy_from_slice(&[*b])).collect());
    assert_eq!(whole, bytes, "the parse depends on the chunking");
    // Events without data are not dispatched by browsers' EventSource: drop them here too.
    whole.into_iter().filter(|e| e.data.is_some()).collect()
}

/// `text` with its line ends as SSE delivers them: CRLF and CR become LF.
fn lines(text: &str) -> String {
    text.replace("\r\n", "\n").replace('\r', "\n")
}

/// `[text]`, or nothing for empty text (an empty data field sends nothing).
fn non_empty(text: &str) -> Vec<&str> {
    if text.is_empty() {
        Vec::new()
    } else {
        vec![text]
    }
}

fn tool_frame(decoded: &[Sse], event: &str, tool: &str) {
    assert_eq!(decoded.len(), 1, "{decoded:?}");
    let back: Value = serde_json::from_str(decoded[0].data.as_deref().unwrap_or_default())
        .expect("a tool frame is JSON");
    assert_eq!(back["event"], event);
    assert_eq!(back["tool"], tool);
    assert!(back["text"].is_string());
}
