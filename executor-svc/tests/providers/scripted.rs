//! The scripted provider: determinism, turn selection, and the documented format.

use std::time::{Duration, Instant};

use executor_svc::llm::{
    LlmError, LlmEvent, LlmProvider, LlmRequest, Message, Script, ScriptedProvider, StopReason,
    ToolCall,
    scripted::{BUILTIN_ECHO_CHARS, DEFAULT_FINAL_TEXT, pieces},
};
use serde_json::json;

use crate::support::drain;

const SCRIPT: &str = r#"
turns:
  - text: "Let me run that."
    tool_calls:
      - name: python
        arguments: {code: "print(6 * 7)"}
  - match: "42"
    text: "The answer is 42."
final_text: "Nothing more to say."
"#;

fn request(messages: Vec<Message>) -> LlmRequest<'static> {
    LlmRequest {
        model: "scripted".into(),
        messages: messages.into(),
        ..LlmRequest::default()
    }
}

#[tokio::test]
async fn turns_replay_in_order_and_identically_every_time() {
    let provider = ScriptedProvider::new("scripted", Script::from_yaml(SCRIPT).expect("script"));
    let first = request(vec![Message::user("compute 6 * 7")]);
    let events = drain(provider.stream(&first)).await;
    assert_eq!(
        events,
        drain(provider.stream(&first)).await,
        "same request, same events"
    );
    let call = ToolCall {
        id: "call_0_0".into(),
        name: "python".into(),
        arguments: json!({ "code": "print(6 * 7)" }),
    };
    let expected = [
        Ok(LlmEvent::TextDelta("Let".into())),
        Ok(LlmEvent::TextDelta(" me".into())),
        Ok(LlmEvent::TextDelta(" run".into())),
        Ok(LlmEvent::TextDelta(" that.".into())),
        Ok(LlmEvent::ToolCall(call.clone())),
    ];
    assert_eq!(events[..5], expected);
    assert_eq!(
        events.last(),
        Some(&Ok(LlmEvent::Done {
            stop_reason: StopReason::ToolUse
        }))
    );

    let second = request(vec![
        Message::user("compute 6 * 7"),
        Message::Assistant {
            content: "Let me run that.".into(),
            tool_calls: vec![call.clone()],
        },
        Message::tool_result(&call, "42\n"),
    ]);
    let response = provider.complete(&second).await.expect("response");
    assert_eq!(response.text, "The answer is 42.");
    assert_eq!(response.stop_reason, StopReason::EndTurn);
    assert!(response.usage.is_some());

    let mut third = second.messages.to_vec();
    third.push(Message::assistant("The answer is 42."));
    third.push(Message::user("and now?"));
    assert_eq!(
        provider
            .complete(&request(third))
            .await
            .expect("response")
            .text,
        "Nothing more to say."
    );
}

#[tokio::test]
async fn match_lets_one_script_serve_several_conversations() {
    let script = Script::from_yaml(
        r#"
turns:
  - match: plan a trip
    tool_calls: [{name: delegate_to_agent, arguments: {agent: flights, mission: "find flights"}}]
  - match: find flights
    text: "Flight LH123."
  - match: LH123
    text: "Your trip: LH123."
"#,
    )
    .expect("script");
    let provider = ScriptedProvider::new("scripted", script);
    let orchestrator = provider
        .complete(&request(vec![Message::user("Plan a trip to Rome")]))
        .await
        .expect("turn");
    assert_eq!(orchestrator.tool_calls[0].name, "delegate_to_agent");
    let sub_agent = provider
        .complete(&request(vec![Message::user("find flights")]))
        .await
        .expect("turn");
    assert_eq!(sub_agent.text, "Flight LH123.");
    let call = orchestrator.tool_calls[0].clone();
    let back = request(vec![
        Message::user("Plan a trip to Rome"),
        orchestrator.to_message(),
        Message::tool_result(&call, "Flight LH123."),
    ]);
    assert_eq!(
        provider.complete(&back).await.expect("turn").text,
        "Your trip: LH123."
    );
    let unmatched = provider
        .complete(&request(vec![Message::user("something else")]))
        .await
        .expect("turn");
    assert_eq!(unmatched.text, DEFAULT_FINAL_TEXT);
}

#[tokio::test]
async fn string_arguments_errors_and_delays_are_scriptable() {
    let script = Script::from_yaml(
        r#"
token_delay_ms: 20
turns:
  - delay_ms: 50
    text: "a b c"
    tool_calls: [{name: python, id: c1, arguments: '{"code": '}]
  - error: "scripted outage"
"#,
    )
    .expect("script");
    let provider = ScriptedProvider::new("scripted", script);
    let started = Instant::now();
    let events = drain(provider.stream(&request(vec![Message::user("go")]))).await;
    assert!(
        started.elapsed() >= Duration::from_millis(90),
        "{:?}",
        started.elapsed()
    );
    assert!(
        matches!(&events[3], Err(LlmError::MalformedToolCall { id, .. }) if id == "c1"),
        "{events:?}"
    );
    let second = request(vec![
        Message::user("go"),
        Message::assistant("a b c"),
        Message::user("again"),
    ]);
    let err = provider
        .complete(&second)
        .await
        .expect_err("scripted error");
    assert_eq!(err.to_string(), "scripted: scripted_error: scripted outage");
}

#[tokio::test]
async fn builtin_script_answers_offline_and_says_so() {
    let provider = ScriptedProvider::builtin("scripted");
    let response = provider
        .complete(&request(vec![Message::user("Summarise the invoice")]))
        .await
        .expect("answer");
    assert!(
        response.text.contains("no LLM is configured"),
        "{}",
        response.text
    );
    assert!(
        response.text.ends_with("You asked: Summarise the invoice"),
        "{}",
        response.text
    );
    // A long request is repeated in part (a 256 KiB one was about 50,000 events), saying so;
    // a script of one's own repeats it whole.
    let long = format!("{} and more", "word ".repeat(50_000));
    let response = provider
        .complete(&request(vec![Message::user(long.clone())]))
        .await
        .expect("answer");
    let asked = &response.text[response.text.find("You asked: ").expect("asked") + 11..];
    assert_eq!(
        asked,
        format!(
            "{}… ({} more characters)",
            &long[..BUILTIN_ECHO_CHARS],
            long.len() - BUILTIN_ECHO_CHARS
        )
    );
    let own = ScriptedProvider::new(
        "own",
        Script::from_yaml("turns: [{text: \"{{last_message}}\"}]").expect("script"),
    );
    let response = own
        .complete(&request(vec![Message::user(long.clone())]))
        .await
        .expect("answer");
    assert_eq!(response.text, long);
}

#[test]
fn pieces_split_before_whitespace_and_join_back() {
    let text = "  Hello,  wide\nworld! ";
    let parts = pieces(text);
    assert_eq!(parts, vec!["  Hello,", "  wide", "\nworld!", " "]);
    assert_eq!(parts.concat(), text);
    assert!(pieces("").is_empty());
}

#[test]
fn invalid_scripts_are_refused_with_the_reason() {
    let err = Script::from_yaml("turns: [{match: x}]").expect_err("empty turn");
    assert!(err.to_string().contains("turn 0 has no text"), "{err}");
    let err = Script::from_yaml("turns: [{txt: hi}]").expect_err("unknown field");
    assert!(err.to_string().contains("txt"), "{err}");
}
