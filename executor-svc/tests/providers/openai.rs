//! The OpenAI-compatible client against a fake server speaking the real streaming protocol.

use executor_svc::llm::{
    LlmError, LlmEvent, LlmProvider, LlmRequest, Message, OpenAiProvider, StopReason, ToolCall,
    ToolDefinition, Usage,
};
use serde_json::{Value, json};

use crate::support::{FakeServer, KEY, Reply, data, drain, env, provider_config};

pub(crate) fn chunk(delta: Value, finish: Option<&str>) -> String {
    data(
        &json!({ "id": "c1", "object": "chat.completion.chunk", "model": "m",
                  "choices": [{ "index": 0, "delta": delta, "finish_reason": finish }] }),
    )
}

pub(crate) fn usage_chunk(prompt: u64, completion: u64) -> String {
    data(&json!({ "id": "c1", "choices": [], "usage": {
        "prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion } }))
}

pub(crate) fn done() -> String {
    "data: [DONE]\n\n".to_owned()
}

pub(crate) fn text_reply(words: &[&str]) -> Reply {
    let mut frames = vec![chunk(json!({ "role": "assistant", "content": "" }), None)];
    frames.extend(words.iter().map(|w| chunk(json!({ "content": w }), None)));
    frames.extend([chunk(json!({}), Some("stop")), usage_chunk(11, 3), done()]);
    Reply::sse(frames)
}

pub(crate) fn provider(server: &FakeServer, extra: &str) -> OpenAiProvider {
    let config = provider_config("openai", &format!("{}/v1", server.url()), extra);
    OpenAiProvider::new("test-openai", &config, &env()).expect("provider")
}

pub(crate) fn request() -> LlmRequest<'static> {
    LlmRequest {
        model: "gpt-test".into(),
        messages: vec![Message::system("be brief"), Message::user("hi")].into(),
        tools: vec![ToolDefinition {
            name: "python".into(),
            description: "run code".into(),
            parameters: json!({ "type": "object", "properties": { "code": { "type": "string" } } }),
        }]
        .into(),
        temperature: Some(0.5),
        max_tokens: Some(100),
    }
}

#[tokio::test]
async fn text_stream_yields_deltas_then_usage_then_done() {
    let server = FakeServer::start(vec![text_reply(&["Hello", " wide", " world"])]).await;
    let events = drain(provider(&server, "").stream(&request())).await;
    let events: Vec<LlmEvent> = events.into_iter().map(|e| e.expect("event")).collect();
    assert_eq!(
        events,
        vec![
            LlmEvent::TextDelta("Hello".into()),
            LlmEvent::TextDelta(" wide".into()),
            LlmEvent::TextDelta(" world".into()),
            LlmEvent::Usage(Usage {
                input_tokens: 11,
                output_tokens: 3
            }),
            LlmEvent::Done {
                stop_reason: StopReason::EndTurn
            },
        ]
    );
    let seen = server.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].uri, "/v1/chat/completions");
    assert_eq!(seen[0].headers["authorization"], format!("Bearer {KEY}"));
    let body = &seen[0].body;
    assert_eq!(body["model"], "gpt-test");
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"]["include_usage"], true);
    // Another OpenAI-compatible server gets the older name of the cap; the temperature goes out
    // as configured, not widened from an f32 (0.5 is exact either way: see below).
    assert_eq!(body["max_tokens"], 100);
    assert!(body.get("max_completion_tokens").is_none(), "{body}");
    assert_eq!(body["temperature"], 0.5);
    assert_eq!(
        body["messages"][0],
        json!({ "role": "system", "content": "be brief" })
    );
    assert_eq!(body["tools"][0]["type"], "function");
    assert_eq!(body["tools"][0]["function"]["name"], "python");
}

#[tokio::test]
async fn tool_calls_split_over_many_deltas_are_assembled_by_index() {
    let args_a = r#"{"code": "print(\"hi\")", "timeout": 5}"#;
    let args_b = r#"{"query": "rust sse"}"#;
    let mut frames = vec![chunk(json!({ "role": "assistant", "content": null }), None)];
    let start = |index: u32, id: &str, name: &str| {
        chunk(
            json!({ "tool_calls": [{ "index": index, "id": id, "type": "function",
                                       "function": { "name": name, "arguments": "" } }] }),
            None,
        )
    };
    let piece = |index: u32, text: &str| {
        chunk(
            json!({ "tool_calls": [{ "index": index, "function": { "arguments": text } }] }),
            None,
        )
    };
    frames.push(start(0, "call_a", "python"));
    frames.push(start(1, "call_b", "web_search"));
    // Interleave 3-byte pieces of both calls' arguments.
    let (a, b): (Vec<char>, Vec<char>) = (args_a.chars().collect(), args_b.chars().collect());
    for i in 0..a.len().max(b.len()).div_ceil(3) {
        for (index, chars) in [(0, &a), (1, &b)] {
            let part: String = chars.iter().skip(i * 3).take(3).collect();
            if !part.is_empty() {
                frames.push(piece(index, &part));
            }
        }
    }
    frames.extend([
        chunk(json!({}), Some("tool_calls")),
        usage_chunk(20, 9),
        done(),
    ]);
    let server = FakeServer::start(vec![Reply::sse(frames)]).await;
    let response = provider(&server, "")
        .complete(&request())
        .await
        .expect("response");
    assert_eq!(response.text, "");
    assert_eq!(
        response.tool_calls,
        vec![
            ToolCall {
                id: "call_a".into(),
                name: "python".into(),
                arguments: json!({ "code": "print(\"hi\")", "timeout": 5 })
            },
            ToolCall {
                id: "call_b".into(),
                name: "web_search".into(),
                arguments: json!({ "query": "rust sse" })
            },
        ]
    );
    assert_eq!(response.stop_reason, StopReason::ToolUse);
    assert_eq!(
        response.usage,
        Some(Usage {
            input_tokens: 20,
            output_tokens: 9
        })
    );
}

#[tokio::test]
async fn conversation_with_tool_results_is_sent_in_openai_shape() {
    let server = FakeServer::start(vec![text_reply(&["ok"])]).await;
    let call = ToolCall {
        id: "call_1".into(),
        name: "python".into(),
        arguments: json!({ "code": "1+1" }),
    };
    let mut request = request();
    request.messages.to_mut().push(Message::Assistant {
        content: String::new(),
        tool_calls: vec![call.clone()],
    });
    request
        .messages
        .to_mut()
        .push(Message::tool_result(&call, "2"));
    provider(&server, "")
        .complete(&request)
        .await
        .expect("response");
    let messages = &server.seen()[0].body["messages"];
    assert_eq!(messages[2]["content"], Value::Null);
    assert_eq!(
        messages[2]["tool_calls"][0]["function"]["arguments"],
        r#"{"code":"1+1"}"#
    );
    assert_eq!(
        messages[3],
        json!({ "role": "tool", "tool_call_id": "call_1", "content": "2" })
    );
}

#[tokio::test]
async fn malformed_tool_call_json_is_reported_and_the_stream_goes_on() {
    let frames = vec![
        chunk(
            json!({ "tool_calls": [{ "index": 0, "id": "call_x", "function": { "name": "python", "arguments": "{\"code\": " } }] }),
            None,
        ),
        chunk(
            json!({ "tool_calls": [{ "index": 0, "function": { "arguments": "print(1)" } }] }),
            None,
        ),
        chunk(json!({}), Some("tool_calls")),
        done(),
    ];
    let server = FakeServer::start(vec![Reply::sse(frames)]).await;
    let events = drain(provider(&server, "").stream(&request())).await;
    match &events[0] {
        Err(LlmError::MalformedToolCall { id, name, raw, .. }) => {
            assert_eq!(
                (id.as_str(), name.as_str(), raw.as_str()),
                ("call_x", "python", "{\"code\": print(1)")
            );
        }
        other => panic!("expected a malformed tool call, got {other:?}"),
    }
    assert_eq!(
        events.last(),
        Some(&Ok(LlmEvent::Done {
            stop_reason: StopReason::ToolUse
        }))
    );
    let err = provider(&server, "")
        .complete(&request())
        .await
        .expect_err("complete fails");
    assert!(err.to_string().contains("not valid JSON"), "{err}");
}

#[tokio::test]
async fn an_odd_usage_report_is_read_leniently_and_never_fails_the_answer() {
    let reply = |usage: &str| {
        Reply::sse(vec![
            chunk(json!({ "content": "hi" }), None),
            chunk(json!({}), Some("stop")),
            format!("data: {{\"id\": \"c1\", \"choices\": [], \"usage\": {usage}}}\n\n"),
            done(),
        ])
    };
    let server = FakeServer::start(vec![
        reply(
            r#"{"prompt_tokens": 18446744073709551615, "completion_tokens": 18446744073709551615}"#,
        ),
        reply(r#"{"prompt_tokens": 12.0, "completion_tokens": -1}"#),
    ])
    .await;
    for expected in [
        Usage {
            input_tokens: executor_svc::llm::MAX_CALL_TOKENS,
            output_tokens: executor_svc::llm::MAX_CALL_TOKENS,
        },
        Usage {
            input_tokens: 12,
            output_tokens: 0,
        },
    ] {
        let events = drain(provider(&server, "").stream(&request())).await;
        let events: Vec<LlmEvent> = events.into_iter().map(|e| e.expect("event")).collect();
        assert!(events.contains(&LlmEvent::Usage(expected)), "{events:?}");
        assert!(matches!(events.last(), Some(LlmEvent::Done { .. })));
    }
}

#[tokio::test]
async fn a_compressed_stream_or_a_content_type_in_capitals_is_said_plainly() {
    let server = FakeServer::start(vec![
        text_reply(&["hi"]).header("content-encoding", "gzip"),
        Reply {
            headers: vec![(
                "content-type",
                "Text/Event-Stream; charset=utf-8".to_owned(),
            )],
            ..text_reply(&["hi"])
        },
    ])
    .await;
    let events = drain(provider(&server, "").stream(&request())).await;
    let err = events
        .iter()
        .find_map(|e| e.as_ref().err())
        .expect("refused");
    assert!(
        err.to_string()
            .contains("came compressed (Content-Encoding: gzip)"),
        "{err}"
    );
    let events = drain(provider(&server, "").stream(&request())).await;
    assert_eq!(events.first(), Some(&Ok(LlmEvent::TextDelta("hi".into()))));
}

#[tokio::test]
async fn a_key_a_provider_echoes_inside_its_stream_is_not_repeated() {
    // An error chunk, and a line that is not JSON, each quoting the key.
    let error_chunk = data(
        &json!({"error": {"message": format!("upstream rejected key {KEY}"), "type": "server_error"}}),
    );
    let garbage = format!("data: {{not json, auth was Bearer {KEY}\n\n");
    let server = FakeServer::start(vec![
        Reply::sse(vec![error_chunk]),
        Reply::sse(vec![garbage]),
    ])
    .await;
    for _ in 0..2 {
        let events = drain(provider(&server, "").stream(&request())).await;
        let err = events
            .iter()
            .find_map(|e| e.as_ref().err())
            .expect("the stream fails");
        let text = err.to_string();
        assert!(!text.contains(KEY), "{text}");
        assert!(text.contains("***"), "{text}");
    }
}

#[tokio::test]
async fn azure_addressing_uses_deployment_api_version_and_api_key_header() {
    let server = FakeServer::start(vec![text_reply(&["hi"])]).await;
    let extra = "azure: {deployment: gpt4o-prod, api_version: 2024-10-21}\nheaders: {x-trace: abc}";
    let config = provider_config("openai", &server.url(), extra);
    let provider = OpenAiProvider::new("azure", &config, &env()).expect("provider");
    provider.complete(&request()).await.expect("response");
    let seen = &server.seen()[0];
    assert_eq!(
        seen.uri,
        "/openai/deployments/gpt4o-prod/chat/completions?api-version=2024-10-21"
    );
    assert_eq!(seen.headers["api-key"], KEY);
    assert_eq!(seen.headers["x-trace"], "abc");
    assert!(!seen.headers.contains_key("authorization"));
    // Azure's reasoning deployments refuse `max_tokens`.
    assert_eq!(seen.body["max_completion_tokens"], 100);
    assert!(seen.body.get("max_tokens").is_none(), "{}", seen.body);
}

#[tokio::test]
async fn the_cap_field_and_temperature_are_sent_as_configured() {
    let server = FakeServer::start(vec![text_reply(&["hi"])]).await;
    let p = provider(&server, "max_tokens_field: max_completion_tokens");
    let mut req = request();
    req.temperature = Some(0.2);
    p.complete(&req).await.expect("response");
    let body = &server.seen()[0].body;
    assert_eq!(body["max_completion_tokens"], 100);
    assert!(body.get("max_tokens").is_none(), "{body}");
    // 0.2, not 0.20000000298023224 (an f32 widened).
    assert_eq!(body["temperature"].to_string(), "0.2");
}

#[tokio::test]
async fn a_refusal_is_the_answer_text_and_the_turn_ends_as_a_refusal() {
    let frames = vec![
        chunk(
            json!({ "role": "assistant", "content": null, "refusal": "" }),
            None,
        ),
        chunk(json!({ "refusal": "I'm sorry, " }), None),
        chunk(json!({ "refusal": "I cannot help with that." }), None),
        chunk(json!({}), Some("stop")),
        done(),
    ];
    let server = FakeServer::start(vec![Reply::sse(frames)]).await;
    let response = provider(&server, "")
        .complete(&request())
        .await
        .expect("response");
    assert_eq!(response.text, "I'm sorry, I cannot help with that.");
    assert_eq!(response.stop_reason, StopReason::Refusal);
}

#[tokio::test]
async fn ollama_style_calls_without_index_and_a_stop_finish_are_still_tool_use() {
    let call = |id: &str, args: &str| {
        chunk(
            json!({ "tool_calls": [{ "id": id, "function": { "name": "git", "arguments": args } }] }),
            None,
        )
    };
    let frames = vec![
        call("a", r#"{"cmd":"status"}"#),
        call("b", r#"{"cmd":"log"}"#),
        chunk(json!({}), Some("stop")),
        done(),
    ];
    let server = FakeServer::start(vec![Reply::sse(frames)]).await;
    let response = provider(&server, "stream_usage: false")
        .complete(&request())
        .await
        .expect("response");
    assert_eq!(response.tool_calls.len(), 2);
    assert_eq!(response.tool_calls[1].arguments, json!({ "cmd": "log" }));
    assert_eq!(response.stop_reason, StopReason::ToolUse);
    assert!(server.seen()[0].body.get("stream_options").is_none());
}
