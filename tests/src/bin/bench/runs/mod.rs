//! Executor benchmarks (issue #3): agent runs with the scripted provider (no LLM latency), and
//! the LangGraph peer's streamed-run workload against an OpenAI-compatible fake LLM.
//!
//! Every workload runs on the agent [`stack::AGENT`], whose only tool is `file_read` over a
//! workspace holding the 4-byte file `ping`: the cheapest native tool (no subprocess, no
//! network; a few file-system calls), and the argument `fake_llm.py` sends (`{"path": "ping"}`,
//! the tool's first string property) reads that file successfully.
//!
//! # Layout
//! - `stack`: registry, executor (with the benchmark's `llm_config.yaml`) and gateway.
//! - `client`: one streamed run through the gateway, checked and timed; closed loops of them.

mod client;
mod stack;

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
pub use client::Timed;
use client::{Budget, LoopResult, closed_loop, http, streamed_run};
use serde_json::json;
use stack::{AGENT, LlmSetup, RunStack};
use taskforce_proto::v1::{self, run_event::Event};

use crate::{Latencies, micros, us};

/// Words of every answer (the peer's `FAKE_LLM_WORDS`).
const WORDS: usize = 20;

/// Settings of the executor benchmarks.
#[derive(Debug, Clone)]
pub struct Options {
    /// Tool-calling model calls of the step-overhead script.
    pub steps: usize,
    /// Sequential runs of each step-overhead measurement.
    pub samples: usize,
    /// Seconds of each throughput level.
    pub seconds: u64,
    /// Concurrent streams of the throughput levels.
    pub levels: Vec<usize>,
    /// Runs held in flight at once for the memory measurement.
    pub in_flight: usize,
    /// How long each of those runs pauses before its answer, in milliseconds.
    pub hold_ms: u64,
}

/// Rows of (measurement, result).
pub type Rows = Vec<(String, String)>;

/// The scripted-provider benchmarks: step overhead, first-event latency, runs per second,
/// and memory with many runs in flight.
pub async fn scripted(opts: &Options) -> anyhow::Result<Rows> {
    let setup = LlmSetup {
        steps: opts.steps,
        hold_ms: opts.hold_ms,
        openai_base_url: None,
        env: Vec::new(),
    };
    let stack = RunStack::start(&setup).await?;
    let result = scripted_on(&stack, opts).await;
    result.with_context(|| stack.logs())
}

async fn scripted_on(stack: &RunStack, opts: &Options) -> anyhow::Result<Rows> {
    let mut rows = Rows::new();
    let url = stack.url("/api/v1/execute/stream");
    let max_level = opts.levels.iter().copied().max().unwrap_or(1);
    let http = http(max_level.max(opts.in_flight))?;
    // Warm-up: connections, the registry's definition cache, lazy initialisation.
    eprintln!("runs: warm-up");
    closed_loop(&http, &url, "peer", WORDS, 10, Budget::RunsPerClient(20)).await?;

    eprintln!("runs: step overhead over gRPC");
    let mut grpc = stack.executor_client().await?;
    let (one, one_first) = sequential_grpc(&mut grpc, "answer", 1, opts.samples).await?;
    let (many, _) = sequential_grpc(&mut grpc, "steps", opts.steps + 1, opts.samples).await?;
    rows.push((
        "1-step run (a 20-token answer), gRPC, concurrency 1".into(),
        format!(
            "{} · first event {}",
            one.summary(),
            one_first.summary_short()
        ),
    ));
    rows.push((
        format!(
            "{}-step run ({} × file_read, then the answer), gRPC, concurrency 1",
            opts.steps + 1,
            opts.steps
        ),
        many.summary(),
    ));
    let per_step = |a: u64, b: u64| {
        #[allow(clippy::cast_precision_loss)]
        let v = (b as f64 - a as f64) / opts.steps as f64;
        v
    };
    rows.push((
        "executor overhead per agent step (model turn + tool call + session save + events)".into(),
        format!(
            "{:.0} µs from p50s · {:.0} µs from p90s",
            per_step(one.pct(0.5), many.pct(0.5)),
            per_step(one.pct(0.9), many.pct(0.9))
        ),
    ));

    tokio::time::sleep(Duration::from_secs(1)).await;
    eprintln!("runs: {} in flight at once", opts.in_flight);
    rows.extend(in_flight(stack, &http, &url, opts).await?);

    let mut total_runs = 20 * 10 + 2 * (opts.samples + opts.samples.min(50)) + opts.in_flight;
    for &conc in &opts.levels {
        eprintln!("runs: concurrency {conc} for {} s", opts.seconds);
        let cpu = Cpu::new(stack);
        let r = closed_loop(
            &http,
            &url,
            "peer",
            WORDS,
            conc,
            Budget::Seconds(opts.seconds),
        )
        .await
        .with_context(|| format!("streamed runs at concurrency {conc}"))?;
        total_runs += r.runs.len();
        rows.push((
            format!("CPU per run at concurrency {conc}"),
            cpu.per_run(r.runs.len()),
        ));
        rows.push((
            format!(
                "streamed runs (file_read, then 20 tokens) through the gateway, concurrency {conc}"
            ),
            format!(
                "{:.0} runs/s · first event {} · total {} ({} runs, 0 errors)",
                r.rate(),
                r.latencies(|t| t.first_event).summary_short(),
                r.latencies(|t| t.total).summary_short(),
                r.runs.len()
            ),
        ));
    }
    rows.push((
        format!(
            "executor RSS after all of the above, {total_runs} sessions stored (VmRSS / VmHWM)"
        ),
        format!(
            "{} / {}; sessions.sled on disk {:.1} MB",
            kb(status_kb(stack.executor_pid(), "VmRSS:")),
            kb(status_kb(stack.executor_pid(), "VmHWM:")),
            mb(stack.sessions_on_disk())
        ),
    ));
    Ok(rows)
}

/// `runs` runs one after the other, each with a mission of `mission_bytes` (so each session
/// holds about that much), on an executor started with `--max-session-store-mb max_mb`: what
/// the sessions' bytes (the executor's gauge) and the store's files come to as they go on.
pub async fn session_store(max_mb: u64, runs: usize, mission_bytes: usize) -> anyhow::Result<Rows> {
    let stack = RunStack::start(&LlmSetup {
        env: vec![("TASKFORCE_MAX_SESSION_STORE_MB".into(), max_mb.to_string())],
        ..LlmSetup::default()
    })
    .await?;
    let http = http(1)?;
    let (url, metrics) = (stack.url("/api/v1/execute"), stack.executor_metrics_url()?);
    let filler = "x".repeat(mission_bytes);
    let every = (runs / 6).max(1);
    let mut rows = Rows::new();
    for i in 1..=runs {
        let body = json!({"mission": format!("{i} {filler}"), "agent_id": AGENT});
        let r = http.post(&url).json(&body).send().await?;
        if !r.status().is_success() {
            bail!("run {i} answered {}: {}", r.status(), r.text().await?);
        }
        r.bytes().await?;
        if i % every == 0 || i == runs {
            // The store is trimmed by a task of its own, woken by the save past the limit.
            tokio::time::sleep(Duration::from_millis(500)).await;
            let text = http.get(&metrics).send().await?.text().await?;
            let gauge = |name: &str| {
                text.lines()
                    .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse::<f64>().ok())
                    .unwrap_or(f64::NAN)
            };
            rows.push((
                format!("after {i} runs"),
                format!(
                    "{:.0} sessions of {:.1} MB stored · sessions.sled on disk {:.1} MB (blobs {:.1} MB)",
                    gauge("taskforce_sessions_stored"),
                    gauge("taskforce_session_store_bytes") / 1e6,
                    mb(stack.sessions_on_disk()),
                    mb(stack.session_blobs_on_disk())
                ),
            ));
        }
    }
    // Listing them: a page's sessions are read from the store.
    for size in [100, 1000] {
        let url = stack.url(&format!("/api/v1/sessions?page_size={size}"));
        let mut took = Vec::new();
        for _ in 0..10 {
            let t = Instant::now();
            let r = http.get(&url).send().await?;
            if !r.status().is_success() {
                bail!("listing answered {}: {}", r.status(), r.text().await?);
            }
            r.bytes().await?;
            took.push(t.elapsed());
        }
        took.sort_unstable();
        rows.push((
            format!("GET /api/v1/sessions?page_size={size}"),
            format!(
                "p50 {:.1} ms (10 lists)",
                took[took.len() / 2].as_secs_f64() * 1e3
            ),
        ));
    }
    Ok(rows)
}

/// Streamed runs at concurrency `conc` with telemetry off and on, in alternating rounds of
/// `seconds` over two stacks (in the order off, on, on, off, ...): "off" with no `OTEL_*`
/// variable (no exporter is built), "on" exporting every span to an OTLP receiver in this process. Metrics are recorded in both (the
/// recorder has no switch) and scraped from all three services after each "on" round.
pub async fn telemetry(conc: usize, seconds: u64, rounds: usize) -> anyhow::Result<Rows> {
    let receiver = taskforce_tests::otlp::Receiver::counting().await?;
    let off = RunStack::start(&LlmSetup::default()).await?;
    let on = RunStack::start(&LlmSetup {
        env: vec![("OTEL_EXPORTER_OTLP_ENDPOINT".into(), receiver.url())],
        ..LlmSetup::default()
    })
    .await?;
    let http = http(conc)?;
    let (url_off, url_on) = (
        off.url("/api/v1/execute/stream"),
        on.url("/api/v1/execute/stream"),
    );
    for url in [&url_off, &url_on] {
        closed_loop(&http, url, "peer", WORDS, 10, Budget::RunsPerClient(20)).await?;
    }
    let mut totals = [(0usize, 0f64, 0f64); 2];
    let mut rows = Rows::new();
    for round in 0..rounds {
        // Off first in odd rounds, on first in even ones: a drift over the run (stored
        // sessions, the page cache, another process) then weighs on both alike.
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for i in order {
            let (stack, url) = [(&off, &url_off), (&on, &url_on)][i];
            eprintln!("telemetry: round {} {}", round + 1, ["off", "on"][i]);
            let cpu = Cpu::new(stack);
            let r = closed_loop(&http, url, "peer", WORDS, conc, Budget::Seconds(seconds))
                .await
                .with_context(|| format!("round {} {}", round + 1, ["off", "on"][i]))?;
            totals[i].0 += r.runs.len();
            totals[i].1 += r.wall.as_secs_f64();
            totals[i].2 += cpu.servers_ms(r.runs.len()) * r.runs.len() as f64;
            rows.push((
                format!("round {}, telemetry {}", round + 1, ["off", "on"][i]),
                format!(
                    "{:.0} runs/s · servers' CPU {:.0} µs per run ({}) · first event {} · total {}",
                    r.rate(),
                    cpu.servers_ms(r.runs.len()) * 1000.0,
                    cpu.per_run(r.runs.len()),
                    r.latencies(|t| t.first_event).summary_short(),
                    r.latencies(|t| t.total).summary_short(),
                ),
            ));
        }
    }
    // The last batch leaves within the exporter's schedule delay (5 s by default).
    tokio::time::sleep(Duration::from_secs(6)).await;
    #[allow(clippy::cast_precision_loss)]
    let rate = |t: (usize, f64, f64)| t.0 as f64 / t.1.max(f64::EPSILON);
    #[allow(clippy::cast_precision_loss)]
    let cpu_us = |t: (usize, f64, f64)| t.2 / t.0.max(1) as f64 * 1000.0;
    let (off_rate, on_rate) = (rate(totals[0]), rate(totals[1]));
    rows.push((
        format!("**all rounds, concurrency {conc}: off → on**"),
        format!(
            "**{off_rate:.0} → {on_rate:.0} runs/s ({:+.1}%)** · servers' CPU per run {:.0} → {:.0} µs · {} spans received for {} runs",
            (on_rate / off_rate.max(f64::EPSILON) - 1.0) * 100.0,
            cpu_us(totals[0]),
            cpu_us(totals[1]),
            receiver.count(),
            totals[1].0,
        ),
    ));
    Ok(rows)
}

/// Starts `opts.in_flight` streamed runs at once (each pausing `hold_ms` before its answer),
/// samples the executor's and the gateway's RSS meanwhile, and checks they were all in flight
/// together and all completed.
async fn in_flight(
    stack: &RunStack,
    http: &reqwest::Client,
    url: &str,
    opts: &Options,
) -> anyhow::Result<Rows> {
    let (exec, gw) = (stack.executor_pid(), stack.gateway_pid());
    let before = (status_kb(exec, "VmRSS:"), status_kb(gw, "VmRSS:"));
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let stop = Arc::clone(&stop);
        tokio::spawn(async move {
            let mut peak = (0, 0);
            while !stop.load(Ordering::Relaxed) {
                peak.0 = peak.0.max(status_kb(exec, "VmRSS:"));
                peak.1 = peak.1.max(status_kb(gw, "VmRSS:"));
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            peak
        })
    };
    let n = opts.in_flight;
    let r = closed_loop(http, url, "hold", WORDS, n, Budget::RunsPerClient(1)).await;
    stop.store(true, Ordering::Relaxed);
    let peak = sampler.await?;
    let r = r.with_context(|| format!("{n} concurrent streamed runs"))?;
    let together = r.max_in_flight();
    if together < n {
        bail!("only {together} of {n} runs were in flight at once; raise --hold-ms");
    }
    let hwm = status_kb(exec, "VmHWM:");
    #[allow(clippy::cast_precision_loss)]
    let per_run = |peak: u64, before: u64| peak.saturating_sub(before) as f64 / n as f64;
    Ok(vec![
        (
            format!(
                "{n} concurrent streamed runs, each paused {} ms before its answer",
                opts.hold_ms
            ),
            format!(
                "{n} in flight at once, 0 errors; first event {} · total {}",
                r.latencies(|t| t.first_event).summary_short(),
                r.latencies(|t| t.total).summary_short()
            ),
        ),
        (
            "executor RSS: before → peak while in flight (VmHWM)".into(),
            format!(
                "{} → {} ({}) = {:.1} KB per run",
                kb(before.0),
                kb(peak.0),
                kb(hwm),
                per_run(peak.0, before.0)
            ),
        ),
        (
            "gateway RSS: before → peak while in flight".into(),
            format!(
                "{} → {} = {:.1} KB per stream",
                kb(before.1),
                kb(peak.1),
                per_run(peak.1, before.1)
            ),
        ),
    ])
}

/// Runs `model` `n` times one after another over the executor's gRPC API (after a warm-up)
/// and times each run to its first event and to its `Done`; every run must complete in `steps`
/// model calls.
async fn sequential_grpc(
    client: &mut v1::executor_client::ExecutorClient<tonic::transport::Channel>,
    model: &str,
    steps: usize,
    n: usize,
) -> anyhow::Result<(Latencies, Latencies)> {
    let mut out = Vec::with_capacity(n);
    let mut firsts = Vec::with_capacity(n);
    for i in 0..n + n.min(50) {
        let t = Instant::now();
        let request = v1::ExecuteRequest {
            mission: "Please read the file ping, then answer.".into(),
            agent_id: Some(AGENT.into()),
            model: Some(model.into()),
            ..Default::default()
        };
        let mut events = client.execute(request).await?.into_inner();
        let mut done = None;
        let mut first = None;
        while let Some(ev) = events.message().await? {
            first.get_or_insert_with(|| micros(t.elapsed()));
            if let Some(Event::Done(d)) = ev.event {
                done = Some(d);
            }
        }
        let Some(done) = done else {
            bail!("a `{model}` run ended without Done");
        };
        let used = done.usage.map_or(0, |u| u.steps);
        if done.status != v1::RunStatus::Completed as i32 || used as usize != steps {
            bail!(
                "a `{model}` run ended with status {} after {used} steps (want completed, {steps})",
                done.status
            );
        }
        // These runs take milliseconds; seconds mean the executor is stuck (e.g. waiting out
        // a flush timeout), and the benchmark would otherwise crawl on for many minutes.
        if t.elapsed() > Duration::from_secs(2) {
            bail!(
                "a `{model}` run took {:?} (scripted runs take milliseconds); see the executor log",
                t.elapsed()
            );
        }
        if i >= n.min(50) {
            out.push(micros(t.elapsed()));
            firsts.push(first.unwrap_or_default());
        }
    }
    Ok((Latencies::new(out), Latencies::new(firsts)))
}

/// One row of the side by side: (workload, clients, runs, result).
pub struct PeerRow {
    /// `run_seq`, `run_c10`, ….
    pub phase: String,
    /// Concurrent clients.
    pub clients: usize,
    /// What was measured.
    pub result: LoopResult,
    /// CPU time per run of executor, gateway and registry together, in ms.
    pub server_cpu_ms: f64,
}

/// The peer's streamed-run workload (`bench_langgraph.py` phases `run_seq` and `run_c<C>`)
/// through our gateway, with the executor's OpenAI-compatible provider on `base_url` (the
/// peer's `fake_llm.py`): 3 warm-up runs, `seq_runs` runs one after another, then for each
/// `C` in `levels`, `C` clients making `per_client` runs each.
pub async fn side_by_side(
    base_url: &str,
    seq_runs: usize,
    levels: &[usize],
    per_client: usize,
) -> anyhow::Result<Vec<PeerRow>> {
    let setup = LlmSetup {
        openai_base_url: Some(base_url.to_owned()),
        ..LlmSetup::default()
    };
    let stack = RunStack::start(&setup).await?;
    let url = stack.url("/api/v1/execute/stream");
    let max = levels.iter().copied().max().unwrap_or(1);
    let http = http(max)?;
    let epoch = Instant::now();
    for _ in 0..3 {
        streamed_run(&http, &url, "fake", WORDS, epoch)
            .await
            .with_context(|| format!("a warm-up run against {base_url}\n{}", stack.logs()))?;
    }
    let mut rows = Vec::new();
    let phases = std::iter::once(("run_seq".to_owned(), 1, seq_runs))
        .chain(levels.iter().map(|&c| (format!("run_c{c}"), c, per_client)));
    for (phase, clients, runs) in phases {
        let cpu = Cpu::new(&stack);
        let result = closed_loop(
            &http,
            &url,
            "fake",
            WORDS,
            clients,
            Budget::RunsPerClient(runs),
        )
        .await
        .with_context(|| format!("{phase}\n{}", stack.logs()))?;
        let server_cpu_ms = cpu.servers_ms(result.runs.len());
        rows.push(PeerRow {
            phase,
            clients,
            result,
            server_cpu_ms,
        });
    }
    Ok(rows)
}

/// Percentile with linear interpolation, as `bench_langgraph.py` computes them, in ms.
pub fn pct_ms(runs: &[Timed], f: fn(&Timed) -> u64, p: f64) -> f64 {
    let mut v: Vec<f64> = runs.iter().map(|t| f(t) as f64 / 1000.0).collect();
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return f64::NAN;
    }
    let k = (v.len() - 1) as f64 * p;
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let (lo, hi) = (k.floor() as usize, k.ceil() as usize);
    v[lo] + (v[hi] - v[lo]) * (k - k.floor())
}

/// CPU time of the processes of a benchmark (and of this client) since it was made.
struct Cpu {
    pids: [(&'static str, u32); 4],
    start: [u64; 4],
}

impl Cpu {
    fn new(stack: &RunStack) -> Self {
        let pids = [
            ("executor", stack.executor_pid()),
            ("gateway", stack.gateway_pid()),
            ("registry", stack.registry_pid()),
            ("client", std::process::id()),
        ];
        Self {
            pids,
            start: pids.map(|(_, pid)| cpu_ticks(pid)),
        }
    }

    /// CPU time per run of the three services together (not the client), in ms.
    fn servers_ms(&self, runs: usize) -> f64 {
        let ticks: u64 = self.pids[..3]
            .iter()
            .zip(self.start)
            .map(|(&(_, pid), start)| cpu_ticks(pid).saturating_sub(start))
            .sum();
        #[allow(clippy::cast_precision_loss)]
        let ms = (ticks * 10) as f64 / runs.max(1) as f64;
        ms
    }

    /// CPU time per run of each process, since `new`.
    fn per_run(&self, runs: usize) -> String {
        let parts: Vec<String> = self
            .pids
            .iter()
            .zip(self.start)
            .map(|(&(name, pid), start)| {
                // Clock ticks are 10 ms on Linux (USER_HZ = 100).
                #[allow(clippy::cast_precision_loss)]
                let per =
                    (cpu_ticks(pid).saturating_sub(start) * 10_000) as f64 / runs.max(1) as f64;
                format!("{name} {per:.0} µs")
            })
            .collect();
        parts.join(" · ")
    }
}

pub use taskforce_tests::process::cpu_ticks;

#[allow(clippy::cast_precision_loss)]
fn mb(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// A field of `/proc/<pid>/status` in kB (0 when unreadable).
/// A `/proc/<pid>/status` field in KB (0 when unknown).
pub fn status_kb(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(field))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

fn kb(v: u64) -> String {
    #[allow(clippy::cast_precision_loss)]
    let mb = v as f64 / 1024.0;
    format!("{mb:.1} MB")
}

impl Latencies {
    /// `p50 … · p99 …`.
    pub fn summary_short(&self) -> String {
        format!("p50 {} · p99 {}", us(self.pct(0.5)), us(self.pct(0.99)))
    }
}
