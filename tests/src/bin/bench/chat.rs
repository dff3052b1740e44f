//! Chat endpoint benchmarks (issue #11), scripted provider:
//!
//! - time to the first `data:` line of `/ai/agent/stream` through the gateway (sequential);
//! - 1,000 concurrent `/ai/agent/stream` requests: errors (a non-200, or a body without the end
//!   frames);
//! - one policy decision (in process, an MCP command line in `readOnly`);
//! - loading a 200-message thread from the session store (in process, sled on disk).

use std::{
    collections::HashSet,
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use executor_svc::{
    llm::Message,
    policy::{Call, Mode, Policy},
    session::{Session, SessionStore},
};
use futures::StreamExt;
use serde_json::json;
use taskforce_tests::StackOptions;

use crate::Latencies;

/// The 20-word answer of every run.
const SCRIPT: &str = "turns:\n  - text: \"alpha bravo charlie delta echo foxtrot golf hotel india \
                      juliet kilo lima mike november oscar papa quebec romeo sierra tango\"\n";

/// Settings.
#[derive(Debug, Clone)]
pub struct Options {
    /// Sequential requests of the first-line measurement.
    pub samples: usize,
    /// Requests sent at once.
    pub concurrent: usize,
}

/// Runs the benchmarks; rows of (measurement, result).
pub async fn run(opts: &Options) -> anyhow::Result<Vec<(String, String)>> {
    let mut rows = Vec::new();
    rows.push(policy_decision());
    rows.push(thread_load().await?);

    // The `dev` agent: native tools offered, no MCP server to wait for (the numbers in
    // BENCHMARKS.md were taken with it).
    let stack = StackOptions::full()
        .with_executor()
        .gateway_args(["--chat-agent", "dev"])
        .llm_script(SCRIPT)
        .spawn()
        .await?;
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(opts.concurrent)
        .timeout(Duration::from_secs(120))
        .build()?;
    let url = stack.url("/ai/agent/stream");
    let one = |prompt: String| {
        let (http, url) = (http.clone(), url.clone());
        async move {
            let started = Instant::now();
            let response = http
                .post(&url)
                .json(&json!({"prompt": prompt}))
                .send()
                .await?;
            if response.status().as_u16() != 200 {
                bail!("status {}", response.status());
            }
            let mut body = response.bytes_stream();
            let mut first = None;
            let mut text = Vec::new();
            while let Some(chunk) = body.next().await {
                let chunk = chunk?;
                if first.is_none() && !chunk.is_empty() {
                    first = Some(started.elapsed());
                }
                text.extend_from_slice(&chunk);
            }
            if !text.ends_with(b"event: end\ndata: [DONE]\n\n") {
                bail!("no end frames: {}", String::from_utf8_lossy(&text));
            }
            Ok::<_, anyhow::Error>(first.unwrap_or_default())
        }
    };
    eprintln!("chat: warm-up");
    for i in 0..50 {
        one(format!("warm-up {i}")).await?;
    }
    eprintln!("chat: {} sequential requests", opts.samples);
    let mut firsts = Vec::with_capacity(opts.samples);
    for i in 0..opts.samples {
        let first = one(format!("question {i}"))
            .await
            .context("a chat request")?;
        firsts.push(u64::try_from(first.as_micros()).unwrap_or(u64::MAX));
    }
    rows.push((
        "/ai/agent/stream: first `data:` bytes after the request, concurrency 1".to_owned(),
        Latencies::new(firsts).summary(),
    ));

    let n = opts.concurrent;
    eprintln!("chat: {n} requests at once");
    let started = Instant::now();
    let results = futures::future::join_all((0..n).map(|i| one(format!("at once {i}")))).await;
    let elapsed = started.elapsed();
    let errors: Vec<String> = results
        .iter()
        .filter_map(|r| r.as_ref().err().map(ToString::to_string))
        .collect();
    rows.push((
        format!("{n} concurrent /ai/agent/stream requests (20 tokens each)"),
        format!(
            "{} errors, all done in {:.2} s{}",
            errors.len(),
            elapsed.as_secs_f64(),
            errors
                .first()
                .map(|e| format!("; first error: {e}"))
                .unwrap_or_default()
        ),
    ));
    drop(stack);
    Ok(rows)
}

/// Nanoseconds per decision of an MCP command line in `readOnly` (a deny verb, the slow path).
fn policy_decision() -> (String, String) {
    let policy = Policy::default();
    let args = json!({"command": "spo list item remove --listTitle Tasks --id 42 --force"});
    let confirmed = HashSet::new();
    let call = Call {
        agent_id: "chat",
        tool: "m365_run_command",
        origin: executor_svc::policy::Origin::Mcp,
        arguments: &args,
    };
    let n = 200_000u32;
    let started = Instant::now();
    let mut blocked = 0u32;
    for _ in 0..n {
        let d = policy.check(Some(Mode::ReadOnly), std::hint::black_box(call), &confirmed);
        blocked += u32::from(!matches!(d, executor_svc::policy::Decision::Allow));
    }
    let per = started.elapsed() / n;
    (
        "policy decision (MCP command line with a deny verb, readOnly), in process".to_owned(),
        format!(
            "{:.2} µs per call ({blocked} of {n} blocked)",
            per.as_secs_f64() * 1e6
        ),
    )
}

/// Loading a thread of 200 messages from the session store.
async fn thread_load() -> anyhow::Result<(String, String)> {
    let dir = tempfile::TempDir::new()?;
    let path = dir.path().to_owned();
    let store = tokio::task::spawn_blocking(move || SessionStore::open(&path)).await??;
    let mut session = Session::new("thread-200".into(), "chat".into(), None, "q".into());
    session
        .messages
        .push(Message::system("You are a chat agent."));
    for i in 0..100 {
        session.messages.push(Message::user(format!(
            "question {i}: what do the teams of the sales department own?"
        )));
        session.messages.push(Message::Assistant {
            content: format!(
                "answer {i}: {}",
                "the sales teams own the quarterly plans. ".repeat(4)
            ),
            tool_calls: Vec::new(),
        });
    }
    store.save(&mut session, true).await?;
    let mut times = Vec::with_capacity(1000);
    for _ in 0..1000 {
        let started = Instant::now();
        let loaded = store.get("thread-200")?.context("stored")?;
        times.push(u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX));
        if loaded.messages.len() != 201 {
            bail!("loaded {} messages", loaded.messages.len());
        }
    }
    Ok((
        "loading a 200-message thread from the session store (sled, 1,000 loads)".to_owned(),
        Latencies::new(times).summary(),
    ))
}
