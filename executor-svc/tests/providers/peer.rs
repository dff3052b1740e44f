//! A manual check against the peer benchmark's fake LLM (`../shared/peers/fake_llm.py`), not part
//! of the suite: start it, then
//! `FAKE_LLM_URL=http://127.0.0.1:18080/v1 cargo test -p executor-svc --test providers -- --ignored`.

use executor_svc::llm::{
    Env, LlmEvent, LlmProvider, LlmRequest, Message, OpenAiProvider, ProviderConfig, StopReason,
    ToolDefinition,
};
use serde_json::json;

use crate::support::drain;

#[tokio::test]
#[ignore = "needs the peer fake LLM running; set FAKE_LLM_URL"]
async fn peer_fake_llm_tool_call_then_streamed_answer() {
    let url = std::env::var("FAKE_LLM_URL").expect("FAKE_LLM_URL");
    let config =
        ProviderConfig::from_yaml(&format!("type: openai\nbase_url: {url}")).expect("config");
    let provider =
        OpenAiProvider::new("fake", &config, &Env::from_pairs::<&str, &str>([])).expect("provider");
    let tool = ToolDefinition {
        name: "echo".into(),
        description: "echoes text".into(),
        parameters: json!({ "type": "object", "properties": { "text": { "type": "string" } } }),
    };
    let mut request = LlmRequest {
        model: "fake-model".into(),
        messages: vec![Message::user("say something")],
        tools: vec![tool],
        ..LlmRequest::default()
    };
    let first = provider.complete(&request).await.expect("tool turn");
    assert_eq!(first.stop_reason, StopReason::ToolUse);
    assert_eq!(first.tool_calls[0].name, "echo");
    assert_eq!(first.tool_calls[0].arguments, json!({ "text": "ping" }));
    assert!(first.usage.is_some());

    request.messages.push(first.to_message());
    request
        .messages
        .push(Message::tool_result(&first.tool_calls[0], "ping"));
    let events = drain(provider.stream(&request)).await;
    let deltas = events
        .iter()
        .filter(|e| matches!(e, Ok(LlmEvent::TextDelta(_))))
        .count();
    let text: String = events
        .iter()
        .filter_map(|e| match e {
            Ok(LlmEvent::TextDelta(t)) => Some(t.as_str()),
            _ => None,
        })
        .collect();
    let words = std::env::var("FAKE_LLM_WORDS")
        .ok()
        .and_then(|w| w.parse().ok())
        .unwrap_or(20);
    assert_eq!(deltas, words, "one delta per word: {text}");
    assert!(text.starts_with("alpha bravo charlie"), "{text}");
    assert!(matches!(
        events.last(),
        Some(Ok(LlmEvent::Done {
            stop_reason: StopReason::EndTurn
        }))
    ));
    assert!(events.iter().any(|e| matches!(e, Ok(LlmEvent::Usage(_)))));
}
