//! The OpenAI-compatible chat-completions stream decoder (event-stream framing plus chunk
//! decoding and tool-call assembly), fed a recorded response body.
//!
//! Checks the properties in `common/llm_stream.rs`: chunking does not matter, the stream always
//! ends with `Done` or an error, nothing follows the end, at most one `Usage` and only before
//! `Done`, no empty deltas, no nameless tool calls.
#![no_main]

#[path = "common/llm_stream.rs"]
mod llm_stream;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    llm_stream::check(executor_svc::llm::openai::decode_body, data);
});
