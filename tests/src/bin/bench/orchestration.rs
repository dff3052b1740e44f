//! Orchestration benchmarks (issue #10), scripted provider, straight over the executor's gRPC:
//!
//! - delegation overhead: from the parent's `tool_start` of `agent_<id>` to the sub-agent's
//!   `delegation_start`, as the client receives them (one stream, so the gap is executor work);
//! - executor CPU of a two-level delegation run (orchestrator → A → B, 5 model calls, 2
//!   delegations) against one agent doing 3 model calls and 2 `file_read` calls;
//! - 200 concurrent orchestrator runs each delegating to two sub-agents that pause before they
//!   answer: errors and executor RSS per run in flight.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use serde_json::json;
use taskforce_proto::v1::{self, executor_client::ExecutorClient, run_event::Event};
use taskforce_tests::StackOptions;
use tempfile::TempDir;
use tonic::transport::{Channel, Endpoint};

use crate::{
    Latencies,
    runs::{cpu_ticks, status_kb},
};

/// Settings.
#[derive(Debug, Clone)]
pub struct Options {
    /// Sequential runs of the latency and CPU measurements.
    pub samples: usize,
    /// Orchestrator runs held in flight at once.
    pub in_flight: usize,
    /// How long each sub-agent of those runs pauses before it answers, in milliseconds.
    pub hold_ms: u64,
}

fn llm_config(dir: &std::path::Path, hold_ms: u64) -> anyhow::Result<String> {
    let call = |tool: &str| {
        format!("  - tool_calls:\n      - name: {tool}\n        arguments: {{task: work}}\n")
    };
    let answer = "  - text: \"ok\"\n";
    let scripts = [
        ("orch", format!("{}{answer}", call("agent_bench-a"))),
        ("mid", format!("{}{answer}", call("agent_bench-b"))),
        ("leaf", answer.to_owned()),
        (
            "solo",
            format!(
                "{}{}{answer}",
                "  - tool_calls:\n      - name: file_read\n        arguments: {path: ping}\n",
                "  - tool_calls:\n      - name: file_read\n        arguments: {path: ping}\n"
            ),
        ),
        (
            "fan",
            format!(
                "  - tool_calls:\n      - name: agent_bench-x\n        arguments: {{task: one}}\n      \
                 - name: agent_bench-y\n        arguments: {{task: two}}\n{answer}"
            ),
        ),
        (
            "slow",
            format!("  - delay_ms: {hold_ms}\n    text: \"ok\"\n"),
        ),
    ];
    let scripts = scripts.map(|(name, turns)| (name, format!("turns:\n{turns}")));
    let (models, providers) = taskforce_tests::scripts::scripted_models(dir, &scripts)?;
    Ok(format!(
        "default_provider: solo\ndefault_model: solo\nfallback_to_scripted: false\n\
         models:\n{models}providers:\n{providers}"
    ))
}

/// Runs the benchmarks; rows of (measurement, result).
pub async fn run(opts: &Options) -> anyhow::Result<Vec<(String, String)>> {
    let files = TempDir::new()?;
    let workspace = files.path().join("workspace");
    std::fs::create_dir_all(&workspace)?;
    std::fs::write(workspace.join("ping"), "pong")?;
    let stack = StackOptions::full()
        .empty_configs()
        .with_executor()
        .llm_config(llm_config(files.path(), opts.hold_ms)?)
        .spawn()
        .await?;
    let agents = [
        ("bench-b", "leaf", vec![], vec!["file_read"]),
        ("bench-a", "mid", vec!["bench-b"], vec!["file_read"]),
        ("bench-orch", "orch", vec!["bench-a"], vec!["file_read"]),
        ("bench-solo", "solo", vec![], vec!["file_read"]),
        ("bench-x", "slow", vec![], vec!["file_read"]),
        ("bench-y", "slow", vec![], vec!["file_read"]),
        (
            "bench-fan",
            "fan",
            vec!["bench-x", "bench-y"],
            vec!["file_read"],
        ),
    ];
    for (id, model, subagents, tools) in agents {
        let body = json!({"agent_id": id, "name": id, "description": "Benchmark agent.",
            "system_prompt": "You are a benchmark agent.", "tool_allowlist": tools,
            "subagents": subagents, "model": model,
            "workspace": workspace.display().to_string()});
        let r = stack
            .http()
            .post(stack.url("/api/v1/agents"))
            .json(&body)
            .send()
            .await?;
        if r.status().as_u16() != 201 {
            let status = r.status();
            bail!("creating {id} answered {status}: {}", r.text().await?);
        }
    }
    let addr = stack.executor_addr().context("no executor")?;
    let mut channels = Vec::new();
    for _ in 0..4 {
        channels.push(
            Endpoint::from_shared(format!("http://{addr}"))?
                .tcp_nodelay(true)
                .connect()
                .await?,
        );
    }
    let exec = stack.executor_pid().unwrap_or(0);
    let mut rows = Vec::new();

    eprintln!("orchestration: warm-up");
    for _ in 0..50 {
        one(&channels[0], "bench-orch").await?;
        one(&channels[0], "bench-solo").await?;
    }

    eprintln!(
        "orchestration: {} two-level runs, then {} single-agent runs",
        opts.samples, opts.samples
    );
    let (overheads, cpu_orch) = {
        let start = cpu_ticks(exec);
        let mut gaps = Vec::with_capacity(opts.samples);
        for _ in 0..opts.samples {
            let r = one(&channels[0], "bench-orch").await?;
            gaps.push(r.delegation_gap.context("no delegation seen")?);
        }
        (Latencies::new(gaps), cpu_ticks(exec).saturating_sub(start))
    };
    let cpu_solo = {
        let start = cpu_ticks(exec);
        for _ in 0..opts.samples {
            one(&channels[0], "bench-solo").await?;
        }
        cpu_ticks(exec).saturating_sub(start)
    };
    // Clock ticks are 10 ms (USER_HZ = 100).
    #[allow(clippy::cast_precision_loss)]
    let per = |ticks: u64| (ticks * 10_000) as f64 / opts.samples.max(1) as f64;
    rows.push((
        "delegation overhead: parent's `tool_start` of `agent_<id>` → sub-agent's `delegation_start`, concurrency 1".to_owned(),
        overheads.summary(),
    ));
    rows.push((
        format!(
            "executor CPU per run: two-level delegation (5 model calls, 2 delegations) vs one agent (3 model calls, 2 file_read), {} runs each",
            opts.samples
        ),
        format!(
            "{:.0} µs vs {:.0} µs: {:.0} µs more",
            per(cpu_orch),
            per(cpu_solo),
            per(cpu_orch) - per(cpu_solo)
        ),
    ));

    let n = opts.in_flight;
    eprintln!("orchestration: {n} orchestrator runs in flight, two sub-agents each");
    let before = status_kb(exec, "VmRSS:");
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let stop = Arc::clone(&stop);
        tokio::spawn(async move {
            let mut peak = 0;
            while !stop.load(Ordering::Relaxed) {
                peak = peak.max(status_kb(exec, "VmRSS:"));
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            peak
        })
    };
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(n);
    for i in 0..n {
        let channel = channels[i % channels.len()].clone();
        tasks.push(tokio::spawn(
            async move { one(&channel, "bench-fan").await },
        ));
    }
    let mut errors = 0;
    let mut delegations = 0;
    for task in tasks {
        match task.await? {
            Ok(r) if r.completed => delegations += r.delegations,
            Ok(_) | Err(_) => errors += 1,
        }
    }
    let elapsed = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    let peak = sampler.await?;
    if elapsed < Duration::from_millis(opts.hold_ms) {
        bail!("the runs ended before their sub-agents' pause: not in flight together");
    }
    #[allow(clippy::cast_precision_loss)]
    let per_run = peak.saturating_sub(before) as f64 / n.max(1) as f64;
    rows.push((
        format!(
            "{n} concurrent orchestrator runs, each delegating to two sub-agents that pause {} ms",
            opts.hold_ms
        ),
        format!(
            "{errors} errors, {delegations} delegations completed in {:.2} s; executor RSS {:.1} → {:.1} MB: {per_run:.0} KB per run in flight",
            elapsed.as_secs_f64(),
            kb_mb(before),
            kb_mb(peak)
        ),
    ));
    drop(stack);
    Ok(rows)
}

#[allow(clippy::cast_precision_loss)]
fn kb_mb(kb: u64) -> f64 {
    kb as f64 / 1024.0
}

/// How one run went.
struct Outcome {
    completed: bool,
    /// Microseconds from the first `tool_start` of a sub-agent tool to its `delegation_start`.
    delegation_gap: Option<u64>,
    delegations: usize,
}

async fn one(channel: &Channel, agent: &str) -> anyhow::Result<Outcome> {
    let mut client = ExecutorClient::new(channel.clone());
    let request = v1::ExecuteRequest {
        mission: "work".to_owned(),
        agent_id: Some(agent.to_owned()),
        ..Default::default()
    };
    let mut stream = tokio::time::timeout(Duration::from_secs(60), client.execute(request))
        .await
        .context("Execute did not answer")??
        .into_inner();
    let mut out = Outcome {
        completed: false,
        delegation_gap: None,
        delegations: 0,
    };
    let mut tool_start: Option<Instant> = None;
    while let Some(event) = tokio::time::timeout(Duration::from_secs(60), stream.message())
        .await
        .context("the run stalled")??
    {
        match event.event {
            Some(Event::ToolStart(e)) if e.tool.starts_with("agent_") && tool_start.is_none() => {
                tool_start = Some(Instant::now());
            }
            Some(Event::DelegationStart(_)) if out.delegation_gap.is_none() => {
                out.delegation_gap =
                    tool_start.map(|t| u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX));
            }
            Some(Event::DelegationEnd(e)) if e.status == "completed" => out.delegations += 1,
            Some(Event::Done(d)) => {
                out.completed = d.status() == v1::RunStatus::Completed;
            }
            _ => {}
        }
    }
    Ok(out)
}
