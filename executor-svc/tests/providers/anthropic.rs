//! The Anthropic Messages client against a fake server speaking the real streaming protocol.

use executor_svc::llm::{
    AnthropicProvider, LlmError, LlmEvent, LlmProvider, LlmRequest, Message, StopReason, ToolCall,
    ToolDefinition, Usage,
};
use serde_json::{Value, json};

use crate::support::{FakeServer, KEY, Reply, drain, env, event, provider_config};

fn provider(server: &FakeServer) -> AnthropicProvider {
    let config = provider_config("anthropic", &server.url(), "");
    AnthropicProvider::new("test-anthropic", &config, &env()).expect("provider")
}

fn message_start() -> String {
    event(
        "message_start",
        &json!({ "type": "message_start", "message": {
        "id": "msg_1", "type": "message", "role": "assistant", "content": [], "model": "claude-test",
        "stop_reason": null, "usage": { "input_tokens": 25, "output_tokens": 1 } } }),
    )
}

fn block_start(index: u32, block: Value) -> String {
    event(
        "content_block_start",
        &json!({ "type": "content_block_start", "index": index, "content_block": block }),
    )
}

fn block_delta(index: u32, delta: Value) -> String {
    event(
        "content_block_delta",
        &json!({ "type": "content_block_delta", "index": index, "delta": delta }),
    )
}

fn block_stop(index: u32) -> String {
    event(
        "content_block_stop",
        &json!({ "type": "content_block_stop", "index": index }),
    )
}

fn message_end(stop_reason: &str, output_tokens: u64) -> Vec<String> {
    vec![
        event(
            "message_delta",
            &json!({ "type": "message_delta",
            "delta": { "stop_reason": stop_reason, "stop_sequence": null }, "usage": { "output_tokens": output_tokens } }),
        ),
        event("message_stop", &json!({ "type": "message_stop" })),
    ]
}

fn request() -> LlmRequest<'static> {
    let call = ToolCall {
        id: "toolu_0".into(),
        name: "file_read".into(),
        arguments: json!({ "path": "a.txt" }),
    };
    LlmRequest {
        model: "claude-test".into(),
        messages: vec![
            Message::system("You are terse."),
            Message::user("read a.txt then search"),
            Message::Assistant {
                content: "Reading.".into(),
                tool_calls: vec![call.clone()],
            },
            Message::tool_result(&call, "contents"),
        ]
        .into(),
        tools: vec![ToolDefinition {
            name: "web_search".into(),
            description: "search the web".into(),
            parameters: json!({ "type": "object", "properties": { "query": { "type": "string" } } }),
        }]
        .into(),
        temperature: None,
        max_tokens: None,
    }
}

#[tokio::test]
async fn text_and_tool_use_stream_with_input_json_deltas() {
    let mut frames = vec![
        message_start(),
        event("ping", &json!({ "type": "ping" })),
        block_start(0, json!({ "type": "text", "text": "" })),
        block_delta(0, json!({ "type": "text_delta", "text": "Let me" })),
        block_delta(0, json!({ "type": "text_delta", "text": " search." })),
        block_stop(0),
        block_start(
            1,
            json!({ "type": "tool_use", "id": "toolu_1", "name": "web_search", "input": {} }),
        ),
        block_delta(1, json!({ "type": "input_json_delta", "partial_json": "" })),
        block_delta(
            1,
            json!({ "type": "input_json_delta", "partial_json": "{\"query\": \"ru" }),
        ),
        block_delta(
            1,
            json!({ "type": "input_json_delta", "partial_json": "st sse\"}" }),
        ),
        block_stop(1),
    ];
    frames.extend(message_end("tool_use", 42));
    let server = FakeServer::start(vec![Reply::sse(frames)]).await;
    let events: Vec<LlmEvent> = drain(provider(&server).stream(&request()))
        .await
        .into_iter()
        .map(|e| e.expect("event"))
        .collect();
    assert_eq!(
        events,
        vec![
            LlmEvent::TextDelta("Let me".into()),
            LlmEvent::TextDelta(" search.".into()),
            LlmEvent::ToolCall(ToolCall {
                id: "toolu_1".into(),
                name: "web_search".into(),
                arguments: json!({ "query": "rust sse" }),
            }),
            LlmEvent::Usage(Usage {
                input_tokens: 25,
                output_tokens: 42
            }),
            LlmEvent::Done {
                stop_reason: StopReason::ToolUse
            },
        ]
    );

    let seen = &server.seen()[0];
    assert_eq!(seen.uri, "/v1/messages");
    assert_eq!(seen.headers["x-api-key"], KEY);
    assert_eq!(seen.headers["anthropic-version"], "2023-06-01");
    let body = &seen.body;
    assert_eq!(body["system"], "You are terse.");
    assert_eq!(body["max_tokens"], 4096);
    assert_eq!(body["stream"], true);
    assert_eq!(body["tools"][0]["input_schema"]["type"], "object");
    assert_eq!(
        body["messages"],
        json!([
            { "role": "user", "content": [{ "type": "text", "text": "read a.txt then search" }] },
            { "role": "assistant", "content": [
                { "type": "text", "text": "Reading." },
                { "type": "tool_use", "id": "toolu_0", "name": "file_read", "input": { "path": "a.txt" } } ] },
            { "role": "user", "content": [
                { "type": "tool_result", "tool_use_id": "toolu_0", "content": "contents", "is_error": false } ] },
        ])
    );
}

#[tokio::test]
async fn error_event_mid_stream_is_a_provider_error() {
    let frames = vec![
        message_start(),
        block_start(0, json!({ "type": "text", "text": "" })),
        block_delta(0, json!({ "type": "text_delta", "text": "Hel" })),
        event(
            "error",
            &json!({ "type": "error", "error": { "type": "overloaded_error", "message": "Overloaded" } }),
        ),
    ];
    let server = FakeServer::start(vec![Reply::sse(frames)]).await;
    let events = drain(provider(&server).stream(&request())).await;
    assert_eq!(events[0], Ok(LlmEvent::TextDelta("Hel".into())));
    assert_eq!(
        events[1],
        Err(LlmError::Provider {
            provider: "test-anthropic".into(),
            kind: "overloaded_error".into(),
            message: "Overloaded".into(),
        })
    );
    assert_eq!(events.len(), 2, "an error ends the stream");
}

#[tokio::test]
async fn overloaded_status_is_retried_and_malformed_tool_input_is_reported() {
    let overloaded = Reply::status(
        529,
        json!({ "type": "error", "error": { "type": "overloaded_error", "message": "Overloaded" } }),
    );
    let mut frames = vec![
        message_start(),
        block_start(
            0,
            json!({ "type": "tool_use", "id": "toolu_9", "name": "python", "input": {} }),
        ),
        block_delta(
            0,
            json!({ "type": "input_json_delta", "partial_json": "{\"code\": \"x" }),
        ),
        block_stop(0),
    ];
    frames.extend(message_end("tool_use", 7));
    let server = FakeServer::start(vec![overloaded, Reply::sse(frames)]).await;
    let events = drain(provider(&server).stream(&request())).await;
    assert_eq!(server.seen().len(), 2);
    assert!(
        matches!(&events[0], Err(LlmError::MalformedToolCall { id, raw, .. }) if id == "toolu_9" && raw == "{\"code\": \"x"),
        "{events:?}"
    );
    assert_eq!(
        events.last(),
        Some(&Ok(LlmEvent::Done {
            stop_reason: StopReason::ToolUse
        }))
    );
}

#[tokio::test]
async fn a_stream_cut_before_message_stop_is_an_error() {
    let frames = vec![
        message_start(),
        block_start(0, json!({ "type": "text", "text": "partial" })),
    ];
    let server = FakeServer::start(vec![Reply::sse(frames)]).await;
    let err = provider(&server)
        .complete(&request())
        .await
        .expect_err("fails");
    assert!(
        err.to_string().contains("ended before message_stop"),
        "{err}"
    );
}

/// A turn offering no tools over a history with tool calls declares the tools used, callable
/// by none: the Messages API refuses `tool_use` blocks in a request without `tools`.
#[tokio::test]
async fn a_turn_without_tools_over_tool_history_declares_them_and_calls_none() {
    let mut frames = vec![
        message_start(),
        block_start(0, json!({ "type": "text", "text": "" })),
        block_delta(0, json!({ "type": "text_delta", "text": "Done." })),
        block_stop(0),
    ];
    frames.extend(message_end("end_turn", 2));
    let server = FakeServer::start(vec![Reply::sse(frames.clone()), Reply::sse(frames)]).await;
    let mut no_tools = request();
    no_tools.tools = Vec::new().into();
    drain(provider(&server).stream(&no_tools)).await;
    let body = &server.seen()[0].body;
    assert_eq!(body["tool_choice"], json!({ "type": "none" }));
    assert_eq!(body["tools"].as_array().map(Vec::len), Some(1), "{body}");
    assert_eq!(body["tools"][0]["name"], "file_read");
    assert_eq!(body["tools"][0]["input_schema"]["type"], "object");

    // Without tool calls in the history, no tools at all.
    let mut plain = no_tools;
    plain.messages = vec![Message::user("hello")].into();
    drain(provider(&server).stream(&plain)).await;
    let body = &server.seen()[1].body;
    assert!(
        body.get("tools").is_none() && body.get("tool_choice").is_none(),
        "{body}"
    );
}
