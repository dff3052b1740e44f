//! The execution routes through the real registry, executor (scripted provider, offline) and
//! gateway: a run to its end, the SSE stream of a run, and the JSON errors before a run starts.

use serde_json::{Value, json};
use taskforce_tests::{Stack, StackOptions};

use crate::helpers::{RUN_TIMEOUT, SLOW_SCRIPT, SseReader, parse_sse, rss_mib, send};

async fn stack() -> Stack {
    StackOptions::full()
        .with_executor()
        .spawn()
        .await
        .expect("stack with executor starts")
}

#[tokio::test]
async fn execute_runs_a_custom_agent_to_its_final_answer() {
    let stack = stack().await;
    let r = send(stack.http().post(stack.url("/api/v1/execute")).json(
        &json!({"mission": "Extract the totals of invoice 42", "agent_id": "invoice-extractor"}),
    ))
    .await;
    assert_eq!(r.status, 200, "{}\n{}", r.text, stack.logs());
    assert_eq!(r.body["status"], "completed", "{}", r.text);
    assert!(
        r.body["final_answer"]
            .as_str()
            .is_some_and(|a| !a.is_empty()),
        "{}",
        r.text
    );
    assert!(
        r.body["session_id"].as_str().is_some_and(|s| !s.is_empty()),
        "{}",
        r.text
    );
    assert!(
        r.body["events"].as_u64().is_some_and(|n| n >= 3),
        "{}",
        r.text
    );

    // Cancelling a finished session cancels nothing.
    let session = r.body["session_id"].as_str().unwrap_or_default();
    let c = send(
        stack
            .http()
            .post(stack.url(&format!("/api/v1/sessions/{session}/cancel"))),
    )
    .await;
    assert_eq!(
        (c.status.as_u16(), &c.body),
        (200, &json!({"cancelled": false})),
        "{}",
        c.text
    );

    // A session goes on with its own agent when the request names none (audit 6 F1); a new
    // session id alone names no agent.
    let r = send(
        stack
            .http()
            .post(stack.url("/api/v1/execute"))
            .json(&json!({"mission": "And the VAT?", "session_id": session})),
    )
    .await;
    assert_eq!(r.body["status"], "completed", "{}", r.text);
    assert_eq!(r.body["session_id"], session, "{}", r.text);
    let r = send(
        stack
            .http()
            .post(stack.url("/api/v1/execute"))
            .json(&json!({"mission": "Hi", "session_id": "never-used-before"})),
    )
    .await;
    r.assert_error(400, "invalid_argument");
    assert!(
        r.text.contains("does not exist (never started"),
        "{}",
        r.text
    );

    // Existing callers send `lean` (seed 000 §6): accepted, with `agent_id` or `profile`.
    for body in [
        json!({"mission": "Say hello", "agent_id": "invoice-extractor", "lean": true}),
        json!({"mission": "Say hello", "profile": "dev", "lean": false}),
    ] {
        let r = send(stack.http().post(stack.url("/api/v1/execute")).json(&body)).await;
        assert_eq!(r.body["status"], "completed", "{body}: {}", r.text);
    }

    // A session whose agent was deleted says so when it is continued without an agent (not a
    // 404 for an agent the request never named), and changes nothing.
    let before = send(
        stack
            .http()
            .get(stack.url(&format!("/api/v1/sessions/{session}"))),
    )
    .await;
    assert_eq!(before.status, 200, "{}", before.text);
    let d = send(
        stack
            .http()
            .delete(stack.url("/api/v1/agents/invoice-extractor")),
    )
    .await;
    assert!(d.status.is_success(), "{}", d.text);
    let r = send(
        stack
            .http()
            .post(stack.url("/api/v1/execute"))
            .json(&json!({"mission": "Still there?", "session_id": session})),
    )
    .await;
    assert_eq!(r.status, 409, "{}", r.text);
    assert!(
        r.text.contains("invoice-extractor") && r.text.contains("which is gone"),
        "{}",
        r.text
    );
    let after = send(
        stack
            .http()
            .get(stack.url(&format!("/api/v1/sessions/{session}"))),
    )
    .await;
    assert_eq!(after.body, before.body, "the session is unchanged");
}

#[tokio::test]
async fn execute_stream_sends_every_event_as_sse_and_ends_after_done() {
    let stack = stack().await;
    // Read event by event, as `curl -N` does; the server closes the stream after `done`.
    let mut sse = SseReader::open(
        &stack,
        "/api/v1/execute/stream",
        &json!({"mission": "Extract the totals of invoice 42", "agent_id": "invoice-extractor"}),
    )
    .await;
    let events = sse.rest(RUN_TIMEOUT).await;
    let text = format!("{events:?}");
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names.first(), Some(&"run_started"), "{names:?}");
    assert!(names.contains(&"token"), "{names:?}");
    assert!(
        names.ends_with(&["final_answer", "done"]),
        "{names:?}\n{text}"
    );
    let (_, done) = &events[events.len() - 1];
    assert_eq!(done["status"], "completed", "{done}");
    let (_, started) = &events[0];
    assert_eq!(started["agent_id"], "invoice-extractor", "{started}");
    let session = started["session_id"].as_str().unwrap_or_default();
    assert!(!session.is_empty(), "{started}");
    let mut last_seq = None;
    for (name, data) in &events {
        assert_eq!(data["type"], name.as_str(), "{data}");
        assert_eq!(data["session_id"], session, "{data}");
        let seq = data["seq"].as_u64().expect("seq");
        assert!(last_seq.is_none_or(|l| seq > l), "seq grows: {data}");
        last_seq = Some(seq);
    }
    let (_, answer) = &events[events.len() - 2];
    assert!(
        answer["text"].as_str().is_some_and(|t| !t.is_empty()),
        "{answer}"
    );
}

#[tokio::test]
async fn errors_before_a_run_are_json_with_the_right_status() {
    let stack = stack().await;
    for path in ["/api/v1/execute", "/api/v1/execute/stream"] {
        send(
            stack
                .http()
                .post(stack.url(path))
                .json(&json!({"mission": "Do it", "agent_id": "no-such-agent"})),
        )
        .await
        .assert_error(404, "not_found");
        send(
            stack
                .http()
                .post(stack.url(path))
                .json(&json!({"mission": "", "agent_id": "invoice-extractor"})),
        )
        .await
        .assert_error(400, "invalid_argument");
        send(
            stack
                .http()
                .post(stack.url(path))
                .json(&json!({"mission": "Do it", "bogus": 1})),
        )
        .await
        .assert_error(400, "invalid_argument");
        // The rule of an agent's `model`, for a request's too.
        let r = send(stack.http().post(stack.url(path)).json(
            &json!({"mission": "Do it", "agent_id": "invoice-extractor", "model": "gpt 4o"}),
        ))
        .await;
        r.assert_error(400, "invalid_argument");
        assert!(r.text.contains("model"), "{}", r.text);
    }
    // REST and gRPC refuse the same ids: spaces around an id, and a malformed `profile` that
    // `agent_id` overrides.
    for (agent_id, profile, field) in [
        (" invoice-extractor ", None, "agent_id"),
        ("invoice-extractor", Some("Not A Profile"), "profile"),
    ] {
        let r = send(
            stack
                .http()
                .post(stack.url("/api/v1/execute"))
                .json(&json!({"mission": "Do it", "agent_id": agent_id, "profile": profile})),
        )
        .await;
        r.assert_error(400, "invalid_argument").assert_names(field);
        let status = stack
            .executor()
            .execute(taskforce_proto::v1::ExecuteRequest {
                mission: "Do it".into(),
                agent_id: Some(agent_id.into()),
                profile: profile.map(str::to_owned),
                ..Default::default()
            })
            .await
            .expect_err("gRPC refuses it too");
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
        assert!(status.message().contains(field), "{status:?}");
    }
    // A custom agent is no profile, also once a run by its id has cached its definition.
    let mut session = String::new();
    for _ in 0..2 {
        let ran = send(
            stack
                .http()
                .post(stack.url("/api/v1/execute"))
                .json(&json!({"mission": "Do it", "agent_id": "invoice-extractor"})),
        )
        .await;
        assert_eq!(ran.status.as_u16(), 200, "{}", ran.text);
        session = ran.body["session_id"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        send(
            stack
                .http()
                .post(stack.url("/api/v1/execute"))
                .json(&json!({"mission": "Do it", "profile": "invoice-extractor"})),
        )
        .await
        .assert_error(404, "not_found")
        .assert_names("is a custom agent");
    }
    // What a route does not take is a 400 naming it, and does nothing: a query parameter, a
    // body on a DELETE.
    assert!(!session.is_empty(), "a session ran");
    let at = |rest: &str| stack.url(&format!("/api/v1/sessions/{session}{rest}"));
    for (r, name) in [
        (send(stack.http().get(at("?x=1"))).await, "x"),
        (send(stack.http().get(at("/plan?x=1"))).await, "x"),
        (
            send(stack.http().post(at("/cancel?force=true"))).await,
            "force",
        ),
        (send(stack.http().delete(at("?force=true"))).await, "force"),
        (
            send(stack.http().get(stack.url("/api/v1/tools?x=1"))).await,
            "x",
        ),
        (
            send(stack.http().get(stack.url("/api/v1/diagnostics?x=1"))).await,
            "x",
        ),
    ] {
        r.assert_error(400, "invalid_argument");
        assert_eq!(r.body["details"][0]["field"], name, "{}", r.text);
    }
    send(stack.http().delete(at("")).json(&json!({"x": 1})))
        .await
        .assert_error(400, "invalid_argument");
    let kept = send(stack.http().get(at(""))).await;
    assert_eq!(kept.status.as_u16(), 200, "{}", kept.text);
}

#[tokio::test]
async fn a_profile_runs_on_its_default_model_and_a_requests_model_wins() {
    let dir = tempfile::TempDir::new().expect("tmp");
    let (models, providers) = taskforce_tests::scripts::scripted_models(
        dir.path(),
        &[
            ("sleepy", "final_text: \"the profile's model answers\"\n"),
            ("other", "final_text: \"the request's model answers\"\n"),
        ],
    )
    .expect("scripts written");
    let stack = StackOptions::full()
        .with_executor()
        .llm_config(format!(
            "default_provider: scripted\nmodels:\n{models}providers:\n  scripted: {{type: scripted}}\n{providers}"
        ))
        .spawn()
        .await
        .expect("stack with executor starts");
    std::fs::write(
        stack.config_dir().join("sleepyprof.yaml"),
        // Its tool written as seed 000's profiles write them: a class name and its module.
        "profile: sleepyprof\ndescription: Sleeps.\nspecialist: generic\nllm:\n  \
         default_model: sleepy\ntools:\n  - type: FileReadTool\n    \
         module: taskforce.infrastructure.tools.native.file_tools\n    params: {}\n",
    )
    .expect("writes the profile");
    let served = taskforce_tests::eventually(
        std::time::Duration::from_secs(10),
        std::time::Duration::from_millis(50),
        || {
            let req = stack.http().get(stack.url("/api/v1/agents/sleepyprof"));
            async move { Some(send(req).await).filter(|r| r.status == 200) }
        },
    )
    .await
    .expect("the registry serves the new profile");
    assert_eq!(
        served.body["tool_allowlist"],
        json!(["file_read"]),
        "{}",
        served.text
    );
    assert_eq!(
        served.body["tools_config"][0]["type"], "FileReadTool",
        "as written: {}",
        served.text
    );
    let mut session = String::new();
    for (body, answer) in [
        (
            json!({"mission": "Hi", "profile": "sleepyprof"}),
            "the profile's model answers",
        ),
        (
            json!({"mission": "Hi", "profile": "sleepyprof", "model": "other"}),
            "the request's model answers",
        ),
        // Seed 000: with `agent_id`, the profile still gives the LLM settings.
        (
            json!({"mission": "Hi", "agent_id": "invoice-extractor", "profile": "sleepyprof"}),
            "the profile's model answers",
        ),
        (
            json!({"mission": "Hi", "agent_id": "invoice-extractor", "profile": "sleepyprof",
                   "model": "other"}),
            "the request's model answers",
        ),
    ] {
        let r = send(stack.http().post(stack.url("/api/v1/execute")).json(&body)).await;
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(r.body["final_answer"], answer, "{}", r.text);
        session = r.body["session_id"].as_str().unwrap_or_default().to_owned();
    }
    // A session keeps the model it was given: the profile's does not replace it.
    let r = send(
        stack
            .http()
            .post(stack.url("/api/v1/execute"))
            .json(&json!({
        "mission": "Again", "agent_id": "invoice-extractor", "profile": "sleepyprof",
        "session_id": session})),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        r.body["final_answer"], "the request's model answers",
        "{}",
        r.text
    );
    send(stack.http().post(stack.url("/api/v1/execute")).json(
        &json!({"mission": "Hi", "agent_id": "invoice-extractor", "profile": "no-such-profile"}),
    ))
    .await
    .assert_error(404, "not_found")
    .assert_names("no-such-profile");
}

/// Runs a program to its end (60 s at most) and returns its stdout; fails the test otherwise.
async fn output_of(program: &std::path::Path, args: &[&str]) -> String {
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args).kill_on_drop(true);
    let out = tokio::time::timeout(std::time::Duration::from_secs(60), cmd.output())
        .await
        .expect("finishes within 60 s")
        .expect("runs");
    assert!(
        out.status.success(),
        "{} failed: {}",
        program.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test]
async fn a_run_streams_over_grpc_to_the_real_grpcurl_in_order() {
    let stack = stack().await;
    let addr = stack.executor_addr().expect("executor runs").to_string();
    let grpcurl = taskforce_tests::paths::grpcurl().expect("grpcurl is installed");
    let request =
        json!({"mission": "Extract the totals of invoice 42", "agent_id": "invoice-extractor"})
            .to_string();
    let out = output_of(
        &grpcurl,
        &[
            "-plaintext",
            "-max-time",
            "30",
            "-d",
            &request,
            &addr,
            "taskforce.v1.Executor/Execute",
        ],
    )
    .await;
    let events: Vec<Value> = serde_json::Deserializer::from_str(&out)
        .into_iter::<Value>()
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| panic!("grpcurl printed a stream of JSON messages ({e}):\n{out}"));
    let kind = |e: &Value| {
        [
            "runStarted",
            "token",
            "toolStart",
            "toolEnd",
            "toolError",
            "question",
            "finalAnswer",
            "error",
            "done",
        ]
        .into_iter()
        .find(|k| e.get(*k).is_some())
        .unwrap_or("?")
    };
    let kinds: Vec<&str> = events.iter().map(kind).collect();
    assert_eq!(kinds.first(), Some(&"runStarted"), "{kinds:?}");
    assert!(kinds.contains(&"token"), "{kinds:?}");
    assert_eq!(
        &kinds[kinds.len().saturating_sub(2)..],
        ["finalAnswer", "done"],
        "{kinds:?}"
    );
    let status = events
        .last()
        .and_then(|e| e["done"]["status"].as_str())
        .unwrap_or_default();
    assert!(status.contains("COMPLETED"), "{status}");
    let session = events[0]["sessionId"].as_str().unwrap_or_default();
    assert!(
        events.iter().all(|e| e["sessionId"] == session),
        "every event names the session"
    );
}

#[tokio::test]
async fn a_run_streams_as_sse_to_the_real_curl_in_order() {
    let stack = stack().await;
    let body = json!({"mission": "Say hello", "profile": "dev"}).to_string();
    let url = stack.url("/api/v1/execute/stream");
    let out = output_of(
        std::path::Path::new("curl"),
        &[
            "-sN",
            "--max-time",
            "30",
            "-X",
            "POST",
            "-H",
            "content-type: application/json",
            "-d",
            &body,
            &url,
        ],
    )
    .await;
    let events = parse_sse(&out);
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names.first(), Some(&"run_started"), "{out}");
    assert!(names.contains(&"token"), "{out}");
    assert_eq!(
        &names[names.len().saturating_sub(2)..],
        ["final_answer", "done"],
        "{out}"
    );
    assert_eq!(
        events.last().map(|(_, d)| d["status"].clone()),
        Some(json!("completed")),
        "{out}"
    );
}

#[tokio::test]
async fn runs_past_the_executors_limit_get_429_with_retry_after_and_change_nothing() {
    let stack = StackOptions::full()
        .with_executor()
        .executor_args(["--max-live-runs", "1"])
        .llm_script(SLOW_SCRIPT)
        .spawn()
        .await
        .expect("stack starts");
    let body = |mission: &str| json!({"mission": mission, "agent_id": "invoice-extractor"});
    // One run holds the only slot...
    let mut first = SseReader::open(&stack, "/api/v1/execute/stream", &body("Answer slowly")).await;
    first.until("run_started", RUN_TIMEOUT).await;
    // ... so the next gets 429 with retry-after, over REST and over gRPC, and no session.
    let r = send(stack.http().post(stack.url("/api/v1/execute")).json(
        &json!({"mission": "hi", "agent_id": "invoice-extractor", "session_id": "refused-1"}),
    ))
    .await;
    r.assert_error(429, "resource_exhausted")
        .assert_names("most runs at once");
    assert_eq!(r.header("retry-after").as_deref(), Some("1"), "{}", r.text);
    let status = stack
        .executor()
        .execute(taskforce_proto::v1::ExecuteRequest {
            mission: "hi".into(),
            agent_id: Some("invoice-extractor".into()),
            ..Default::default()
        })
        .await
        .expect_err("refused");
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
    let r = send(stack.http().get(stack.url("/api/v1/sessions/refused-1"))).await;
    r.assert_error(404, "not_found");
    // Once the first run has ended (its last event, then its bookkeeping), its slot is free
    // again: a client that honours `retry-after` gets in.
    let events = first.rest(RUN_TIMEOUT).await;
    assert!(events.iter().any(|(n, _)| n == "done"), "{events:?}");
    let http = stack.http().clone();
    let url = stack.url("/api/v1/execute");
    let ran = taskforce_tests::eventually(
        std::time::Duration::from_secs(5),
        std::time::Duration::from_millis(1000),
        || {
            let req = http.post(&url).json(&body("hi"));
            async move {
                let r = send(req).await;
                (r.status == 200 && r.body["status"] == "completed").then_some(())
            }
        },
    )
    .await;
    assert!(
        ran.is_some(),
        "no run got in after the first ended\n{}",
        stack.logs()
    );
}

#[tokio::test]
async fn a_thousand_runs_at_once_against_a_cap_of_100_get_429_and_the_executor_stays_up() {
    let stack = StackOptions::full()
        .with_executor()
        .executor_args(["--max-live-runs", "100"])
        .llm_script("turns:\n  - delay_ms: 8000\n    text: \"done slowly\"\n")
        .spawn()
        .await
        .expect("stack starts");
    let pid = stack.executor_pid().expect("the executor runs");
    let before = rss_mib(pid);
    let url = stack.url("/api/v1/execute");
    let body = json!({"mission": "hi", "agent_id": "invoice-extractor"});
    let calls = (0..1000).map(|_| send(stack.http().post(&url).json(&body)));
    let replies = futures::future::join_all(calls).await;
    let ok = replies.iter().filter(|r| r.status == 200).count();
    let refused: Vec<_> = replies.iter().filter(|r| r.status == 429).collect();
    assert_eq!(
        ok + refused.len(),
        1000,
        "only 200 and 429: {:?}",
        replies
            .iter()
            .filter(|r| r.status != 200 && r.status != 429)
            .map(|r| &r.text)
            .take(3)
            .collect::<Vec<_>>()
    );
    assert!(
        (1..=100).contains(&ok),
        "{ok} runs got in past a cap of 100"
    );
    assert!(
        refused
            .iter()
            .all(|r| r.body["error"] == "resource_exhausted"
                && r.header("retry-after").as_deref() == Some("1")),
        "{}",
        refused[0].text
    );
    // Still up, and memory did not follow the flood.
    let after = rss_mib(pid);
    assert!(
        after < before + 150,
        "executor RSS grew from {before} MiB to {after} MiB"
    );
    let r = send(stack.http().get(stack.url("/readyz"))).await;
    assert_eq!(r.status, 200, "{}", r.text);
}

#[tokio::test]
async fn a_flood_of_events_is_slowed_to_the_streams_pace_and_nothing_is_lost() {
    let words = vec!["word"; 300].join(" ");
    let stack = StackOptions::full()
        .with_executor()
        .executor_args(["--max-events-per-second", "100"])
        .llm_script(format!("turns:\n  - text: \"{words}\"\n"))
        .spawn()
        .await
        .expect("stack starts");
    let mut stream = SseReader::open(
        &stack,
        "/api/v1/execute/stream",
        &json!({"mission": "flood", "agent_id": "invoice-extractor"}),
    )
    .await;
    let events = stream.rest(RUN_TIMEOUT).await;
    let tokens = events.iter().filter(|(n, _)| n == "token").count();
    assert!(tokens >= 300, "{tokens} tokens: none is dropped");
    assert!(events.iter().any(|(n, _)| n == "done"), "{events:?}");
    // A burst of 100, then 100 a second: the rest of 300+ events take at least 2 s (the
    // events' own timestamps, so a slow machine only makes it longer).
    let times: Vec<i64> = events
        .iter()
        .filter_map(|(_, e)| e["time_unix_ms"].as_i64())
        .collect();
    let span = times
        .iter()
        .max()
        .zip(times.iter().min())
        .map(|(a, b)| a - b);
    assert!(
        span.is_some_and(|ms| ms >= (i64::try_from(events.len()).unwrap_or(0) - 100) * 10 - 50),
        "{} events in {span:?} ms",
        events.len()
    );
}

#[tokio::test]
async fn past_the_most_stored_sessions_the_oldest_ended_ones_are_deleted() {
    oldest_ended_sessions_go(
        &["--max-stored-sessions", "5"],
        12,
        |i| format!("run {i}"),
        5,
    )
    .await;
}

#[tokio::test]
async fn past_the_most_bytes_of_stored_sessions_the_oldest_ended_ones_are_deleted() {
    // Each session holds its mission twice (the session's `mission` and its message): about
    // 400 KB, so a MiB holds two of them.
    oldest_ended_sessions_go(
        &["--max-session-store-mb", "1"],
        6,
        |i| format!("{i}{}", "x".repeat(200_000)),
        2,
    )
    .await;
}

/// Runs `runs` sessions with missions `mission(i)` on an executor started with `args`, and
/// checks that the oldest is deleted, the newest kept, and at most `most` stay.
async fn oldest_ended_sessions_go(
    args: &[&str],
    runs: usize,
    mission: impl Fn(usize) -> String,
    most: usize,
) {
    let stack = StackOptions::full()
        .with_executor()
        .executor_args(args.iter().copied())
        .spawn()
        .await
        .expect("stack starts");
    let mut sessions = Vec::new();
    for i in 0..runs {
        let r = send(
            stack
                .http()
                .post(stack.url("/api/v1/execute"))
                .json(&json!({"mission": mission(i), "agent_id": "invoice-extractor"})),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.text);
        sessions.push(r.body["session_id"].as_str().unwrap_or_default().to_owned());
    }
    let http = stack.http().clone();
    let url = |id: &str| stack.url(&format!("/api/v1/sessions/{id}"));
    let (first, last) = (url(&sessions[0]), url(&sessions[runs - 1]));
    let trimmed = taskforce_tests::eventually(
        std::time::Duration::from_secs(10),
        std::time::Duration::from_millis(100),
        || {
            let (http, first) = (http.clone(), first.clone());
            async move {
                let r = send(http.get(first)).await;
                (r.status == 404).then_some(())
            }
        },
    )
    .await;
    assert!(
        trimmed.is_some(),
        "the oldest session is still stored\n{}",
        stack.logs()
    );
    let r = send(stack.http().get(last)).await;
    assert_eq!(r.status, 200, "the newest is kept: {}", r.text);
    // The expiry task trims when woken, so a trim can have run before the last runs ended
    // (the oldest gone, the count over again until its next turn): wait for it.
    let count = || {
        let http = http.clone();
        let urls: Vec<String> = sessions.iter().map(|id| url(id)).collect();
        async move {
            let mut stored = 0;
            for u in urls {
                if send(http.get(u)).await.status == 200 {
                    stored += 1;
                }
            }
            stored
        }
    };
    let within = taskforce_tests::eventually(
        std::time::Duration::from_secs(10),
        std::time::Duration::from_millis(100),
        || {
            let counted = count();
            async move { (counted.await <= most).then_some(()) }
        },
    )
    .await;
    assert!(
        within.is_some(),
        "{} of {runs} sessions stored with {args:?}",
        count().await
    );
}

#[tokio::test]
async fn a_request_body_that_trickles_in_is_answered_408_within_the_request_timeout() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let stack = StackOptions::full()
        .with_executor()
        .gateway_args(["--request-timeout-secs", "2"])
        .spawn()
        .await
        .expect("stack starts");
    let addr = stack.gateway_url().trim_start_matches("http://").to_owned();
    // Half a body, then nothing: on routes without a request timeout (runs, /mcp), and on
    // those with one, where it is the client's 408 and not the gateway's 504.
    for (method, path, extra) in [
        ("POST", "/api/v1/execute/stream", ""),
        ("POST", "/api/v1/execute", ""),
        (
            "POST",
            "/mcp",
            "Accept: application/json, text/event-stream\r\n",
        ),
        ("POST", "/api/v1/agents", ""),
        ("PUT", "/api/v1/agents/invoice-extractor", ""),
    ] {
        let mut conn = tokio::net::TcpStream::connect(&addr)
            .await
            .expect("connect");
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
             {extra}Content-Length: 100\r\n\r\n{{\"mission\": "
        );
        conn.write_all(head.as_bytes()).await.expect("write");
        let mut answer = Vec::new();
        let mut buf = [0u8; 4096];
        // Far past the 2 s it may take; what is asserted is the answer, not the time.
        let read = tokio::time::timeout(std::time::Duration::from_secs(30), async {
            while !String::from_utf8_lossy(&answer).contains("\r\n\r\n{") {
                match conn.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => answer.extend_from_slice(&buf[..n]),
                }
            }
        })
        .await;
        let text = String::from_utf8_lossy(&answer);
        assert!(
            read.is_ok(),
            "{path}: no answer to a trickling body: {text}"
        );
        assert!(text.starts_with("HTTP/1.1 408"), "{path}: {text}");
        // REST's JSON error; `/mcp` answers in JSON-RPC.
        assert!(
            text.contains(r#""error":"timeout""#) || path == "/mcp",
            "{path}: {text}"
        );
    }
}
