//! Whole runs through the real executor binary against fake OpenAI and Anthropic servers in the
//! test process: a tool call streamed in pieces to `file_write`, another to `file_read`, then a
//! streamed answer; the SSE events arrive in order, the fakes receive the tool results and the
//! key from the environment, and the key is never logged nor shown to tool subprocesses.

use serde_json::{Value, json};

use crate::{
    fake_llm::{self, ANTHROPIC_KEY, FakeLlm, OPENAI_KEY, Seen, anthropic, openai},
    helpers::{RUN_TIMEOUT, SseReader, create_agent_with_tools, event_names, run_to_end},
};

const AGENT: &str = "scribe";
const CONTENT: &str = "hello from the fake";

/// Event names with each run of consecutive `token`s collapsed into one.
fn collapsed(names: &[&str]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for name in names {
        if *name == "token" && out.last().is_some_and(|l| l == "token") {
            continue;
        }
        out.push((*name).to_owned());
    }
    out
}

/// The arguments of a `tool_start` event, parsed.
fn arguments(event: &Value) -> Value {
    serde_json::from_str(event["arguments_json"].as_str().unwrap_or_default())
        .unwrap_or_else(|e| panic!("arguments_json is JSON ({e}): {event}"))
}

/// Runs the scribe through the gateway's SSE stream and returns the events.
async fn run(stack: &taskforce_tests::Stack, model: Option<&str>) -> Vec<(String, Value)> {
    let mut body = json!({"mission": "Write a note, then read it back", "agent_id": AGENT});
    if let Some(model) = model {
        body["model"] = json!(model);
    }
    SseReader::open(stack, "/api/v1/execute/stream", &body)
        .await
        .rest(RUN_TIMEOUT)
        .await
}

/// Checks the tool events and the answer both runs share, and the file in the workspace.
fn assert_tools_and_answer(stack: &taskforce_tests::Stack, events: &[(String, Value)]) {
    let by_name = |n: &str| -> Vec<&Value> {
        events
            .iter()
            .filter(|(name, _)| name == n)
            .map(|(_, e)| e)
            .collect()
    };
    let starts = by_name("tool_start");
    let ends = by_name("tool_end");
    assert_eq!(starts.len(), 2, "{events:?}");
    assert_eq!(starts[0]["tool"], "file_write");
    assert_eq!(
        arguments(starts[0]),
        json!({"path": "notes.txt", "content": CONTENT}),
        "the pieces were joined"
    );
    assert_eq!(starts[1]["tool"], "file_read");
    assert_eq!(arguments(starts[1]), json!({"path": "notes.txt"}));
    assert_eq!(ends[0]["is_error"], false, "{}", ends[0]);
    assert_eq!(ends[1]["is_error"], false, "{}", ends[1]);
    assert!(
        ends[1]["output"]
            .as_str()
            .is_some_and(|o| o.contains(CONTENT)),
        "{}",
        ends[1]
    );
    for (start, end) in starts.iter().zip(&ends) {
        assert_eq!(start["call_id"], end["call_id"]);
    }
    let (_, answer) = &events[events.len() - 2];
    assert_eq!(answer["text"], format!("The file says: {CONTENT}"));
    let last_tokens: String = events
        .iter()
        .rev()
        .skip(2)
        .take_while(|(n, _)| n == "token")
        .map(|(_, e)| e["text"].as_str().unwrap_or_default())
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    assert_eq!(last_tokens, format!("The file says: {CONTENT}"));
    let (_, done) = &events[events.len() - 1];
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["usage"]["steps"], 3, "{done}");
    assert_eq!(done["usage"]["tool_calls"], 2, "{done}");
    let written = std::fs::read_to_string(stack.executor_workspace(AGENT).join("notes.txt"))
        .expect("the note is in the agent's workspace");
    assert_eq!(written, CONTENT);
}

/// The JSON request bodies the fake got, asserting there were `n`.
fn bodies(seen: &[Seen], n: usize) -> Vec<&Value> {
    assert_eq!(seen.len(), n, "requests: {seen:#?}");
    seen.iter().map(|s| &s.body).collect()
}

#[tokio::test]
async fn a_whole_run_over_the_openai_protocol_streams_tool_calls_and_the_answer_in_order() {
    let llm = FakeLlm::start(vec![
        openai::tool_call(
            "call_w",
            "file_write",
            &[
                "{\"pa",
                "th\": \"notes.txt\", \"con",
                "tent\": \"hello from",
                " the fake\"}",
            ],
        ),
        openai::tool_call("call_r", "file_read", &["{\"path\":", " \"notes.txt\"}"]),
        openai::text(&["The file ", "says: hello ", "from the fake"]),
    ])
    .await;
    let (stack, unused) = fake_llm::openai_stack(&llm).await;
    // `powershell` is offered only where `pwsh` is installed (a model would waste calls on it).
    create_agent_with_tools(&stack, AGENT, &["file_write", "file_read", "powershell"]).await;
    let pwsh = std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|d| d.join("pwsh").is_file()));
    let offered: &[&str] = if pwsh {
        &["file_write", "file_read", "powershell"]
    } else {
        &["file_write", "file_read"]
    };

    let events = run(&stack, None).await;
    let names = event_names(&events);
    assert_eq!(
        collapsed(&names),
        [
            "run_started",
            "tool_start",
            "tool_end",
            "tool_start",
            "tool_end",
            "token",
            "final_answer",
            "done"
        ],
        "{names:?}\n{}",
        stack.logs()
    );
    let (_, started) = &events[0];
    assert_eq!(
        (&started["provider"], &started["model"]),
        (&json!("fake_openai"), &json!("gpt-fake"))
    );
    assert_tools_and_answer(&stack, &events);
    let (_, done) = &events[events.len() - 1];
    assert_eq!(
        (
            &done["usage"]["input_tokens"],
            &done["usage"]["output_tokens"]
        ),
        (&json!(63), &json!(21)),
        "the usage the fake reported, summed over three calls: {done}"
    );

    let seen = llm.seen();
    let requests = bodies(&seen, 3);
    for s in &seen {
        assert_eq!(s.uri, "/v1/chat/completions");
        assert_eq!(s.header("authorization"), format!("Bearer {OPENAI_KEY}"));
        assert_eq!(s.body["model"], "gpt-fake");
        assert_eq!(s.body["stream"], true);
        let tools: Vec<&str> = s.body["tools"]
            .as_array()
            .expect("tools")
            .iter()
            .filter_map(|t| t["function"]["name"].as_str())
            .collect();
        assert_eq!(tools, offered, "{}", s.body);
    }
    let messages = requests[2]["messages"].as_array().expect("messages");
    let assistant = messages
        .iter()
        .find(|m| m["role"] == "assistant" && m["tool_calls"][0]["id"] == "call_w")
        .unwrap_or_else(|| panic!("the first call is replayed: {messages:#?}"));
    let replayed: Value = serde_json::from_str(
        assistant["tool_calls"][0]["function"]["arguments"]
            .as_str()
            .unwrap_or_default(),
    )
    .expect("replayed arguments are JSON");
    assert_eq!(replayed, json!({"path": "notes.txt", "content": CONTENT}));
    let result = messages
        .iter()
        .find(|m| m["role"] == "tool" && m["tool_call_id"] == "call_r")
        .unwrap_or_else(|| panic!("the read result is sent back: {messages:#?}"));
    assert!(
        result["content"]
            .as_str()
            .is_some_and(|c| c.contains(CONTENT)),
        "{result}"
    );
    fake_llm::assert_not_logged(&stack, OPENAI_KEY);
    assert!(unused.seen().is_empty());
}

#[tokio::test]
async fn a_whole_run_over_the_anthropic_protocol_streams_tool_calls_and_the_answer_in_order() {
    let llm = FakeLlm::start(vec![
        anthropic::tool_use(
            "I will write it.",
            "toolu_w",
            "file_write",
            &[
                "",
                "{\"path\": \"no",
                "tes.txt\", \"content\": \"hello",
                " from the fake\"}",
            ],
        ),
        anthropic::tool_use(
            "Now I read it.",
            "toolu_r",
            "file_read",
            &["{\"pa", "th\": \"notes.txt\"}"],
        ),
        anthropic::text(&["The file ", "says: hello ", "from the fake"]),
    ])
    .await;
    let unused = FakeLlm::start(vec![openai::text(&["unused"])]).await;
    let stack = fake_llm::options(&unused, &llm)
        .spawn()
        .await
        .expect("stack starts");
    create_agent_with_tools(&stack, AGENT, &["file_write", "file_read"]).await;

    let events = run(&stack, Some("claude")).await;
    let names = event_names(&events);
    assert_eq!(
        collapsed(&names),
        [
            "run_started",
            "token",
            "tool_start",
            "tool_end",
            "token",
            "tool_start",
            "tool_end",
            "token",
            "final_answer",
            "done"
        ],
        "{names:?}\n{}",
        stack.logs()
    );
    let (_, started) = &events[0];
    assert_eq!(
        (&started["provider"], &started["model"]),
        (&json!("fake_anthropic"), &json!("claude-fake"))
    );
    assert_eq!(events[1].1["text"], "I will write it.");
    assert_tools_and_answer(&stack, &events);

    let seen = llm.seen();
    let requests = bodies(&seen, 3);
    for s in &seen {
        assert_eq!(s.uri, "/v1/messages");
        assert_eq!(s.header("x-api-key"), ANTHROPIC_KEY);
        assert_eq!(s.header("anthropic-version"), "2023-06-01");
        assert!(s.header("authorization").is_empty(), "no bearer token");
        assert_eq!(s.body["model"], "claude-fake");
        assert_eq!(s.body["stream"], true);
        assert!(
            s.body["system"].to_string().contains("LeanAgent"),
            "the system prompt: {}",
            s.body["system"]
        );
    }
    let messages = requests[2]["messages"].as_array().expect("messages");
    let results: Vec<&Value> = messages
        .iter()
        .filter(|m| m["role"] == "user")
        .filter_map(|m| m["content"].as_array())
        .flatten()
        .filter(|b| b["type"] == "tool_result")
        .collect();
    assert_eq!(results.len(), 2, "{messages:#?}");
    assert_eq!(results[1]["tool_use_id"], "toolu_r");
    assert!(
        results[1]["content"].to_string().contains(CONTENT),
        "{}",
        results[1]
    );
    let first_use = messages
        .iter()
        .filter(|m| m["role"] == "assistant")
        .filter_map(|m| m["content"].as_array())
        .flatten()
        .find(|b| b["type"] == "tool_use")
        .unwrap_or_else(|| panic!("the first call is replayed: {messages:#?}"));
    assert_eq!(first_use["id"], "toolu_w");
    assert_eq!(
        first_use["input"],
        json!({"path": "notes.txt", "content": CONTENT})
    );
    fake_llm::assert_not_logged(&stack, ANTHROPIC_KEY);
    assert!(unused.seen().is_empty());
}

#[tokio::test]
async fn tool_subprocesses_never_see_the_api_keys() {
    let llm = FakeLlm::start(vec![
        openai::tool_call(
            "call_env",
            "python",
            &[
                "{\"code\": \"import os\\nprint(os.environ.get('TF_E2E_OPENAI_KEY'))\\n",
                "print(sorted(os.environ))\\n\"}",
            ],
        ),
        openai::text(&["Checked."]),
    ])
    .await;
    let (stack, _unused) = fake_llm::openai_stack(&llm).await;
    create_agent_with_tools(&stack, "env-reader", &["python"]).await;

    let events = run_to_end(&stack, "env-reader", "Show the environment").await;
    let end = events
        .iter()
        .find(|(n, _)| n == "tool_end")
        .map(|(_, e)| e)
        .unwrap_or_else(|| panic!("{events:?}\n{}", stack.logs()));
    let output = end["output"].as_str().unwrap_or_default();
    assert!(output.contains("stdout:\nNone\n"), "{output}");
    for secret in [OPENAI_KEY, ANTHROPIC_KEY, "TF_E2E_"] {
        assert!(!output.contains(secret), "{secret} leaked: {output}");
    }
    assert_eq!(events[events.len() - 1].1["status"], "completed");
    let seen = llm.seen();
    assert_eq!(seen.len(), 2);
    assert!(!seen[1].body["messages"].to_string().contains(ANTHROPIC_KEY));
}

/// A session cancelled while it waits on its question goes on with a new mission on a real
/// protocol: the question's call is answered in the stored conversation (the API refuses one
/// with an open call, as the fake does), and the session keeps the model it was given (here
/// not the default provider's).
#[tokio::test]
async fn a_session_cancelled_on_its_question_goes_on_with_its_own_model() {
    let claude = FakeLlm::start(vec![
        anthropic::tool_use(
            "Let me ask.",
            "toolu_q",
            "ask_user",
            &["{\"question\": \"Which file?\"}"],
        ),
        anthropic::text(&["Fresh start."]),
    ])
    .await;
    let default = FakeLlm::start(vec![openai::text(&["not this one"])]).await;
    let stack = fake_llm::options(&default, &claude)
        .spawn()
        .await
        .expect("stack starts");
    create_agent_with_tools(&stack, AGENT, &["ask_user"]).await;
    let started = json!({"mission": "Read a file", "agent_id": AGENT, "model": "claude"});
    let events = SseReader::open(&stack, "/api/v1/execute/stream", &started)
        .await
        .rest(RUN_TIMEOUT)
        .await;
    let (_, done) = events.last().expect("events");
    assert_eq!(done["status"], "paused", "{events:?}");
    let session = done["session_id"].as_str().unwrap_or_default().to_owned();
    let r = crate::helpers::send(
        stack
            .http()
            .post(stack.url(&format!("/api/v1/sessions/{session}/cancel")))
            .json(&json!({})),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);

    // No model named: the session's own, not the default provider.
    let next = json!({"mission": "Never mind, say hi", "session_id": session});
    let events = SseReader::open(&stack, "/api/v1/execute/stream", &next)
        .await
        .rest(RUN_TIMEOUT)
        .await;
    let (_, done) = events.last().expect("events");
    assert_eq!(done["status"], "completed", "{events:?}\n{}", stack.logs());
    assert!(default.seen().is_empty(), "{:#?}", default.seen());
    let seen = claude.seen();
    let bodies = bodies(&seen, 2);
    let messages = bodies[1]["messages"].as_array().expect("messages");
    let answered = messages
        .iter()
        .flat_map(|m| m["content"].as_array().into_iter().flatten())
        .find(|b| b["type"] == "tool_result" && b["tool_use_id"] == "toolu_q")
        .unwrap_or_else(|| panic!("the question's call is answered: {messages:#?}"));
    assert!(answered.to_string().contains("cancelled"), "{answered}");
}

/// A model that answers without end (9 MiB of text here) fails the run at the executor's cap
/// (8 MiB) with an error that says so, instead of an answer nobody can read back through the
/// gateway and that pushes every other session out of the store.
#[tokio::test]
async fn an_answer_past_the_cap_fails_the_run_and_says_why() {
    let piece = "x".repeat(1024 * 1024);
    let pieces: Vec<&str> = std::iter::repeat_n(piece.as_str(), 9).collect();
    let llm = FakeLlm::start(vec![openai::text(&pieces)]).await;
    let (stack, _unused) = fake_llm::openai_stack(&llm).await;
    create_agent_with_tools(&stack, "talker", &["file_read"]).await;
    let events = run_to_end(&stack, "talker", "Talk").await;
    let error = events
        .iter()
        .find(|(n, _)| n == "error")
        .map(|(_, e)| e)
        .unwrap_or_else(|| panic!("{:?}", event_names(&events)));
    assert_eq!(error["code"], "LLM_ERROR", "{error}");
    assert!(
        error["message"]
            .as_str()
            .is_some_and(|m| m.contains("longer than 8 MiB")),
        "{error}"
    );
    assert_eq!(events[events.len() - 1].1["status"], "failed");
}

/// A tool call without a name is answered as such (its arguments were fine), and the run goes
/// on to the model's answer.
#[tokio::test]
async fn a_call_without_a_name_is_told_so() {
    let llm = FakeLlm::start(vec![
        openai::tool_call("call_1", "", &["{}"]),
        openai::text(&["Done."]),
    ])
    .await;
    let (stack, _unused) = fake_llm::openai_stack(&llm).await;
    create_agent_with_tools(&stack, "nameless", &["file_read"]).await;
    let events = run_to_end(&stack, "nameless", "Call something").await;
    let error = events
        .iter()
        .find(|(n, _)| n == "tool_error")
        .map(|(_, e)| e)
        .unwrap_or_else(|| panic!("{:?}", event_names(&events)));
    assert!(
        error["message"]
            .as_str()
            .is_some_and(|m| m.contains("names no tool") && !m.contains("not valid JSON")),
        "{error}"
    );
    assert_eq!(events[events.len() - 1].1["status"], "completed");
}
