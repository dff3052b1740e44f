//! The properties both LLM stream decoders must keep; shared by `openai_stream` and
//! `anthropic_stream`.

use executor_svc::llm::{LlmError, LlmEvent};

/// A decoder's entry point: a recorded body in chunks, to the items a live call would yield.
pub type DecodeBody = fn(&[&[u8]]) -> Vec<Result<LlmEvent, LlmError>>;

/// Decodes `body` (whole, a byte at a time, and cut at points derived from its bytes) and checks:
/// - the chunking does not matter: every split yields the same items;
/// - the stream ends: its last item is `Done` or an error that ends it (not a malformed tool
///   call, after which the stream goes on);
/// - nothing comes after `Done` or after an ending error, and there is at most one `Done`;
/// - at most one `Usage`, and only `Done` may follow it (the documented order of `LlmEvent`);
/// - no empty text delta, and every tool call has a name.
pub fn check(decode: DecodeBody, body: &[u8]) {
    let whole = decode(&[body]);
    let bytes: Vec<&[u8]> = body.chunks(1).collect();
    assert_eq!(
        decode(&bytes),
        whole,
        "a byte at a time decodes differently"
    );
    let cuts = cut(body);
    assert_eq!(
        decode(&cuts),
        whole,
        "cut at {:?} decodes differently",
        cuts.len()
    );

    let Some(last) = whole.last() else {
        panic!("the stream yielded nothing, not even an error");
    };
    assert!(
        matches!(last, Ok(LlmEvent::Done { .. }))
            || matches!(last, Err(e) if !matches!(e, LlmError::MalformedToolCall { .. })),
        "the stream does not end with Done or an error: {last:?}"
    );
    let mut usage_seen = false;
    for (i, item) in whole.iter().enumerate() {
        let is_last = i + 1 == whole.len();
        match item {
            Ok(LlmEvent::Done { .. }) => assert!(is_last, "items after Done: {whole:?}"),
            Ok(LlmEvent::Usage(_)) => {
                assert!(!usage_seen, "two Usage items: {whole:?}");
                usage_seen = true;
            }
            Ok(LlmEvent::TextDelta(text)) => {
                assert!(!text.is_empty(), "an empty text delta");
                assert!(!usage_seen, "text after Usage: {whole:?}");
            }
            Ok(LlmEvent::ToolCall(call)) => {
                assert!(
                    !call.name.is_empty(),
                    "a tool call without a name: {call:?}"
                );
                assert!(!usage_seen, "a tool call after Usage: {whole:?}");
            }
            Err(LlmError::MalformedToolCall { .. }) => {
                assert!(!usage_seen, "a tool call after Usage: {whole:?}");
            }
            Err(e) => assert!(is_last, "items after the error {e:?}: {whole:?}"),
        }
    }
}

/// `body` cut into pieces of 1 to 16 bytes, the sizes taken from its own bytes (so the same input
/// is always cut the same way, and the fuzzer can steer the cuts).
fn cut(body: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut rest = body;
    let mut i = 0;
    while !rest.is_empty() {
        let size = usize::from(body[i % body.len()] % 16) + 1;
        let (piece, tail) = rest.split_at(size.min(rest.len()));
        out.push(piece);
        rest = tail;
        i += 1;
    }
    out
}
