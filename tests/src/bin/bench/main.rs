//! Benchmarks: starts the real release binaries on loopback and measures what users wait for.
//! Run from the workspace root:
//!
//! ```text
//! # registry and gateway (issue #2), and workspace metadata over MCP (issue #4)
//! cargo run --release -p taskforce-tests --bin bench -- --agents 1000,10000 --metadata-agents 50
//! # the executor (issue #3), scripted provider
//! cargo run --release -p taskforce-tests --bin bench -- --runs
//! # multi-agent orchestration (issue #10), scripted provider
//! cargo run --release -p taskforce-tests --bin bench -- --orchestration
//! # streamed runs with OpenTelemetry export off and on (issue #12)
//! cargo run --release -p taskforce-tests --bin bench -- --telemetry
//! # what API keys cost a request (issue #13)
//! cargo run --release -p taskforce-tests --bin bench -- --auth
//! # the chat endpoint and the policy engine (issue #11), scripted provider
//! cargo run --release -p taskforce-tests --bin bench -- --chat
//! # the LangGraph peer's streamed-run workload, against ../shared/peers/fake_llm.py
//! cargo run --release -p taskforce-tests --bin bench -- --fake-llm http://127.0.0.1:18080/v1
//! ```
//!
//! Prints Markdown tables; `BENCHMARKS.md` records runs.

use std::{
    future::Future,
    path::Path,
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use clap::Parser;
use taskforce_proto::v1::{self, agent_registry_client::AgentRegistryClient};
use taskforce_tests::StackOptions;
use tonic::transport::{Channel, Endpoint};

#[derive(Debug, Parser)]
#[command(about = "Benchmarks the registry, the gateway and the executor on loopback")]
struct Args {
    /// Agent counts to measure, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "1000,10000")]
    agents: Vec<usize>,
    /// Requests of each sequential (concurrency 1) latency measurement.
    #[arg(long, default_value_t = 5000)]
    samples: usize,
    /// Seconds of each throughput measurement.
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    /// Concurrent requests of the throughput measurements.
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// HTTP/2 connections the gRPC load spreads over.
    #[arg(long, default_value_t = 4)]
    connections: usize,
    /// Durable creates to time.
    #[arg(long, default_value_t = 300)]
    creates: usize,
    /// Creates in flight of the concurrent REST create measurement (also `--creates` of them);
    /// 0 skips it.
    #[arg(long, default_value_t = 16)]
    create_concurrency: usize,
    /// Agents of the workspace-metadata (MCP) benchmark; 0 skips it. Needs the `task` binary
    /// from `scripts/install-test-deps.sh`.
    #[arg(long, default_value_t = 50)]
    metadata_agents: usize,
    /// Skip the peer-shaped REST CRUD workload.
    #[arg(long)]
    no_peer_crud: bool,
    /// MCP tool calls of the MCP overhead measurement (`--runs`; 0 skips it).
    #[arg(long, default_value_t = 2000)]
    mcp_calls: usize,
    /// Benchmark the executor (agent runs on the scripted provider) instead of the registry.
    #[arg(long)]
    runs: bool,
    /// Tool-calling model calls of the step-overhead run (`--runs`).
    #[arg(long, default_value_t = 20)]
    run_steps: usize,
    /// Sequential runs of each step-overhead measurement (`--runs`).
    #[arg(long, default_value_t = 300)]
    run_samples: usize,
    /// Concurrent streams of the runs-per-second levels (`--runs`), comma separated.
    #[arg(long, value_delimiter = ',', default_value = "1,50,500")]
    run_concurrency: Vec<usize>,
    /// Streamed runs held in flight at once for the memory measurement (`--runs`).
    #[arg(long, default_value_t = 1000)]
    in_flight: usize,
    /// How long each of those runs pauses before its answer, in milliseconds (`--runs`).
    #[arg(long, default_value_t = 10_000)]
    hold_ms: u64,
    /// Run the LangGraph peer's streamed-run workload (`run_seq`, then `run_c<C>` for each
    /// `--peer-concurrency`) with the executor's OpenAI-compatible provider on this base URL
    /// (`bench/peers/fake_llm.py`: `http://127.0.0.1:18080/v1`), instead of the registry.
    #[arg(long)]
    fake_llm: Option<String>,
    /// Runs of the sequential phase of `--fake-llm`.
    #[arg(long, default_value_t = 50)]
    peer_runs: usize,
    /// Client counts of the concurrent phases of `--fake-llm`, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "10,50")]
    peer_concurrency: Vec<usize>,
    /// Runs per client of the concurrent phases of `--fake-llm`.
    #[arg(long, default_value_t = 5)]
    peer_runs_per_client: usize,
    /// Benchmarks the chat endpoint and the policy engine instead of the registry.
    #[arg(long)]
    chat: bool,
    /// Requests sent at once by `--chat`.
    #[arg(long, default_value_t = 1000)]
    chat_concurrent: usize,
    /// Compares streamed runs with OpenTelemetry export off and on (issue #12).
    #[arg(long)]
    telemetry: bool,
    /// Times the registry's periodic full reconcile over `--agents` agent files, in process.
    #[arg(long)]
    reconcile: bool,
    /// Runs sessions of `--session-bytes` each, one after the other, on an executor keeping at
    /// most `--session-store-mb` of them, and reports the store's bytes and files as it goes.
    #[arg(long)]
    session_store: bool,
    /// Most mebibytes of sessions the `--session-store` executor keeps.
    #[arg(long, default_value_t = 64)]
    session_store_mb: u64,
    /// Bytes of each `--session-store` run's mission.
    #[arg(long, default_value_t = 200_000)]
    session_bytes: usize,
    /// Runs of `--session-store`.
    #[arg(long, default_value_t = 900)]
    session_runs: usize,
    /// Measures the gateway's memory while clients ask for the whole agent list and read
    /// nothing (100 agents with 250 KiB prompts, 20 clients).
    #[arg(long)]
    slow_readers: bool,
    /// Rounds of each side of `--telemetry` (alternating off, on).
    #[arg(long, default_value_t = 3)]
    telemetry_rounds: usize,
    /// Compares REST reads without and with API keys (issue #13).
    #[arg(long)]
    auth: bool,
    /// Keys configured for `--auth` (every key is compared, in constant time).
    #[arg(long, default_value_t = 10)]
    auth_keys: usize,
    /// Rounds of each side of `--auth` (alternating without, with keys).
    #[arg(long, default_value_t = 3)]
    auth_rounds: usize,
    /// Benchmarks multi-agent orchestration instead of the registry.
    #[arg(long)]
    orchestration: bool,
    /// Sequential runs of each orchestration latency/CPU measurement.
    #[arg(long, default_value_t = 1000)]
    orchestration_samples: usize,
    /// Orchestrator runs held in flight at once (`--orchestration`).
    #[arg(long, default_value_t = 200)]
    orchestration_in_flight: usize,
    /// How long each of their sub-agents pauses, in milliseconds (`--orchestration`).
    #[arg(long, default_value_t = 2000)]
    orchestration_hold_ms: u64,
}

mod auth;
mod chat;
mod mcp_call;
mod metadata;
mod orchestration;
mod peer;
mod reconcile;
mod runs;
mod slow_readers;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if cfg!(debug_assertions) {
        eprintln!("warning: a debug build; run with --release for meaningful numbers");
    }
    if args.runs || args.fake_llm.is_some() {
        return bench_runs(&args).await;
    }
    if args.telemetry {
        let rows = runs::telemetry(50, args.seconds, args.telemetry_rounds.max(1))
            .await
            .context("telemetry benchmark")?;
        println!(
            "\n### streamed runs, telemetry off vs on (concurrency 50)\n\n| measurement | result |\n|---|---|"
        );
        print_rows(rows);
        return Ok(());
    }
    if args.slow_readers {
        let rows = slow_readers::run(100, 250 * 1024, 20)
            .await
            .context("slow readers benchmark")?;
        println!("\n### clients that do not read\n\n| measurement | result |\n|---|---|");
        print_rows(rows);
        return Ok(());
    }
    if args.session_store {
        let rows =
            runs::session_store(args.session_store_mb, args.session_runs, args.session_bytes)
                .await
                .context("session store benchmark")?;
        println!(
            "\n### the session store, {} MiB at most, missions of {} bytes\n\n| measurement | result |\n|---|---|",
            args.session_store_mb, args.session_bytes
        );
        print_rows(rows);
        return Ok(());
    }
    if args.reconcile {
        for &n in &args.agents {
            let rows = reconcile::run(n).with_context(|| format!("reconcile of {n} agents"))?;
            println!("\n### full reconcile, {n} agents\n\n| measurement | result |\n|---|---|");
            print_rows(rows);
        }
        return Ok(());
    }
    if args.auth {
        let rows = auth::run(args.samples, args.auth_rounds.max(1), args.auth_keys)
            .await
            .context("auth benchmark")?;
        println!(
            "\n### API keys: REST reads without and with keys\n\n| measurement | result |\n|---|---|"
        );
        print_rows(rows);
        return Ok(());
    }
    if args.chat {
        let opts = chat::Options {
            samples: args.orchestration_samples.min(1000),
            concurrent: args.chat_concurrent,
        };
        let rows = chat::run(&opts).await.context("chat benchmark")?;
        println!("\n### chat endpoint and policy\n\n| measurement | result |\n|---|---|");
        print_rows(rows);
        return Ok(());
    }
    if args.orchestration {
        let opts = orchestration::Options {
            samples: args.orchestration_samples,
            in_flight: args.orchestration_in_flight,
            hold_ms: args.orchestration_hold_ms,
        };
        let rows = orchestration::run(&opts)
            .await
            .context("orchestration benchmark")?;
        println!("\n### multi-agent orchestration\n\n| measurement | result |\n|---|---|");
        print_rows(rows);
        return Ok(());
    }
    for &n in &args.agents {
        let rows = run(&args, n)
            .await
            .with_context(|| format!("benchmark with {n} agents"))?;
        println!("\n### {n} agents\n\n| measurement | result |\n|---|---|");
        print_rows(rows);
    }
    if !args.no_peer_crud {
        let rows = peer::run().await.context("peer-shaped CRUD benchmark")?;
        println!(
            "\n### peer-shaped CRUD through the gateway (200 ops per phase)\n\n\
             | phase | conc | ops/s | p50 ms | p99 ms |\n|---|---:|---:|---:|---:|"
        );
        for (phase, conc, rps, lat) in rows {
            println!(
                "| {phase} | {conc} | {rps:.0} | {:.2} | {:.2} |",
                lat.pct(0.5) as f64 / 1000.0,
                lat.pct(0.99) as f64 / 1000.0
            );
        }
    }
    if args.metadata_agents > 0 {
        let rows = metadata::run(args.metadata_agents)
            .await
            .context("workspace metadata benchmark")?;
        println!("\n### workspace metadata over MCP\n\n| measurement | result |\n|---|---|");
        print_rows(rows);
    }
    Ok(())
}

/// The executor benchmarks (`--runs`) and the peer's streamed-run workload (`--fake-llm`).
async fn bench_runs(args: &Args) -> anyhow::Result<()> {
    let cores = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "{cores} cores; load average at start: {}",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    if args.runs {
        let opts = runs::Options {
            steps: args.run_steps.max(1),
            samples: args.run_samples.max(1),
            seconds: args.seconds,
            levels: args.run_concurrency.clone(),
            in_flight: args.in_flight,
            hold_ms: args.hold_ms,
        };
        let rows = runs::scripted(&opts).await.context("executor benchmark")?;
        println!("\n### agent runs, scripted provider\n\n| measurement | result |\n|---|---|");
        print_rows(rows);
        if args.mcp_calls > 0 {
            mcp_call::run(args.mcp_calls)
                .await
                .context("MCP call benchmark")?;
        }
    }
    if let Some(url) = &args.fake_llm {
        let rows = runs::side_by_side(
            url,
            args.peer_runs,
            &args.peer_concurrency,
            args.peer_runs_per_client,
        )
        .await
        .context("the peer's streamed-run workload")?;
        println!(
            "\n### the peer's streamed runs through the gateway ({url})\n\n\
             | phase | clients | runs | runs/s | first event p50 / p99 ms | first answer token p50 / p99 ms | total p50 / p99 ms | server CPU ms/run |\n\
             |---|---:|---:|---:|---|---|---|---:|"
        );
        for row in rows {
            let r = &row.result.runs;
            let pair = |f: fn(&runs::Timed) -> u64| {
                format!(
                    "{:.2} / {:.2}",
                    runs::pct_ms(r, f, 0.5),
                    runs::pct_ms(r, f, 0.99)
                )
            };
            println!(
                "| {} | {} | {} | {:.1} | {} | {} | {} | {:.2} |",
                row.phase,
                row.clients,
                r.len(),
                row.result.rate(),
                pair(|t| t.first_event),
                pair(|t| t.first_token),
                pair(|t| t.total),
                row.server_cpu_ms
            );
        }
    }
    Ok(())
}

fn print_rows(rows: Vec<(String, String)>) {
    for (name, value) in rows {
        println!("| {name} | {value} |");
    }
}

/// One full round with `n` agents; returns (measurement, result) rows.
async fn run(args: &Args, n: usize) -> anyhow::Result<Vec<(String, String)>> {
    let mut rows = Vec::new();
    let mut stack = StackOptions::full().empty_configs().spawn().await?;
    stack.stop().await?;
    seed(&stack.custom_dir(), n)?;

    std::fs::remove_dir_all(stack.data_dir()).context("removing the cache")?;
    let t = Instant::now();
    stack.restart().await?;
    rows.push((
        format!("cold start, {n} YAML files, no cache (spawn → SERVING)"),
        ms(t.elapsed()),
    ));
    let t = Instant::now();
    stack.restart().await?;
    rows.push((
        format!("cold start, {n} YAML files, warm cache (spawn → SERVING)"),
        ms(t.elapsed()),
    ));
    let ids: Arc<Vec<String>> = Arc::new((0..n).map(agent_id).collect());
    // The REST reads below are served from the gateway's copy: wait until it has the agents.
    copy_in_sync(&stack, n).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    rows.extend(rss_rows(&stack, "idle RSS after start"));

    let health = stack.health();
    let lat = sequential(args.samples, |_| {
        let mut h = health.clone();
        async move {
            h.check(tonic_health::pb::HealthCheckRequest {
                service: String::new(),
            })
            .await
            .map(drop)
        }
    })
    .await?;
    rows.push((
        "gRPC Health/Check, concurrency 1 (transport floor: no registry work)".into(),
        lat.summary(),
    ));

    let client = stack.registry();
    let lat = sequential(args.samples, |i| {
        let (mut c, id) = (client.clone(), ids[i % ids.len()].clone());
        async move {
            c.get_agent(v1::GetAgentRequest { agent_id: id })
                .await
                .map(drop)
        }
    })
    .await?;
    rows.push(("gRPC GetAgent, concurrency 1".into(), lat.summary()));

    let channels = Arc::new(channels(stack.registry_addr().to_string(), args.connections).await?);
    let all_ids = Arc::clone(&ids);
    let (rps, lat) = load(args, move |i| {
        let mut c = AgentRegistryClient::new(channels[i % channels.len()].clone());
        let id = all_ids[i % all_ids.len()].clone();
        async move {
            c.get_agent(v1::GetAgentRequest { agent_id: id })
                .await
                .map(drop)
        }
    })
    .await?;
    rows.push((
        format!(
            "gRPC GetAgent, concurrency {} over {} connections",
            args.concurrency, args.connections
        ),
        format!("{rps:.0} req/s; {}", lat.summary()),
    ));

    let lat = sequential(20, |_| list_all(client.clone(), n)).await?;
    rows.push((
        format!("list all {n} agents over gRPC (pages of 1000)"),
        lat.summary(),
    ));

    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(args.concurrency)
        .tcp_nodelay(true)
        .build()?;
    let urls: Arc<Vec<String>> = Arc::new(
        ids.iter()
            .map(|id| stack.url(&format!("/api/v1/agents/{id}")))
            .collect(),
    );
    let rest_http = http.clone();
    let rest_get = move |i: usize| get_body(rest_http.clone(), urls[i % urls.len()].clone());
    let cpu = ServerCpu::now(&stack);
    let lat = sequential(args.samples, rest_get.clone()).await?;
    let cpu = cpu.per_op(&stack, args.samples + args.samples.min(50));
    rows.push((
        "REST GET /api/v1/agents/{id}, concurrency 1".into(),
        format!("{}; server CPU {cpu} µs/request", lat.summary()),
    ));
    let cpu = ServerCpu::now(&stack);
    let (rps, lat) = load(args, rest_get).await?;
    let cpu = cpu.per_op(&stack, lat.0.len());
    rows.push((
        format!(
            "REST GET /api/v1/agents/{{id}}, concurrency {}",
            args.concurrency
        ),
        format!(
            "{rps:.0} req/s; {}; server CPU {cpu} µs/request",
            lat.summary()
        ),
    ));
    let page_url = stack.url("/api/v1/agents?page_size=100");
    let lat = sequential(args.samples.min(2000), |_| {
        get_body(http.clone(), page_url.clone())
    })
    .await?;
    rows.push((
        "REST GET /api/v1/agents?page_size=100, concurrency 1".into(),
        lat.summary(),
    ));
    let list_url = stack.url("/api/v1/agents");
    // Checked once, untimed: parsing 10,000 agents is the client's cost, not the server's.
    let body: serde_json::Value = http.get(list_url.clone()).send().await?.json().await?;
    let got = body["agents"].as_array().map_or(0, Vec::len);
    if got != n {
        bail!("listed {got} agents, expected {n}");
    }
    let cpu = ServerCpu::now(&stack);
    let lat = sequential(10, |_| get_body(http.clone(), list_url.clone())).await?;
    // Ten timed lists and the warm-up's ten.
    let cpu = cpu.per_op(&stack, 20 * n);
    rows.push((
        format!("REST GET /api/v1/agents (all {n}, body received)"),
        format!("{}; server CPU {cpu} µs per agent listed", lat.summary()),
    ));

    let create_url = stack.url("/api/v1/agents");
    let rest_create = |prefix: &'static str| {
        let (http, url) = (http.clone(), create_url.clone());
        move |i: usize| {
            let (http, url) = (http.clone(), url.clone());
            async move {
                let id = format!("{prefix}-{i:05}");
                let r = http
                    .post(url)
                    .json(&serde_json::json!({
                        "agent_id": id, "name": "Bench", "description": "Created by the benchmark.",
                        "system_prompt": "You are a LeanAgent.", "tool_allowlist": ["file_read"],
                    }))
                    .send()
                    .await?;
                if r.status() != reqwest::StatusCode::CREATED {
                    bail!("create answered {}", r.status());
                }
                r.bytes().await?;
                anyhow::Ok(())
            }
        }
    };
    let cpu = ServerCpu::now(&stack);
    let creates = args.creates;
    let lat = sequential(creates, rest_create("rest-created")).await?;
    let warmups = creates.min(50);
    let cpu = cpu.per_op(&stack, creates + warmups);
    rows.push((
        "REST create (fsync'd YAML; answered once the gateway's copy has it), concurrency 1".into(),
        format!("{}; server CPU {cpu} µs/create", lat.summary()),
    ));
    if args.create_concurrency > 0 {
        let cpu = ServerCpu::now(&stack);
        let (per_s, lat) = in_flight(
            creates,
            args.create_concurrency,
            rest_create("rest-concurrent"),
        )
        .await?;
        let cpu = cpu.per_op(&stack, creates);
        rows.push((
            format!(
                "REST create, {} in flight ({creates} creates)",
                args.create_concurrency
            ),
            format!(
                "{per_s:.0} creates/s; {}; server CPU {cpu} µs/create",
                lat.summary()
            ),
        ));
    }

    rows.push(durable_write_floor(&stack, args.creates).await?);

    let lat = sequential(args.creates, |i| {
        let mut c = client.clone();
        async move {
            c.create_agent(v1::CreateAgentRequest {
                spec: Some(spec(&format!("created-{i:05}"))),
            })
            .await
            .map(drop)
        }
    })
    .await?;
    rows.push((
        "durable create over gRPC (fsync'd YAML + cache)".into(),
        lat.summary(),
    ));

    tokio::time::sleep(Duration::from_secs(3)).await;
    rows.extend(rss_rows(&stack, "RSS idle after the runs above"));
    drop(stack);
    Ok(rows)
}

/// The floor under a durable create's CPU on this machine: the registry's own atomic write
/// (`files::write_atomic`: temp file, write, fsync, rename, directory fsync) of an agent's
/// YAML, `n` times into a directory of the stack's temp dir (the file system its registry
/// writes to, outside the watched config dir), in this process and nothing else: no HTTP, no
/// gRPC, no sled, no watcher. Returns its row.
async fn durable_write_floor(
    stack: &taskforce_tests::Stack,
    n: usize,
) -> anyhow::Result<(String, String)> {
    let dir = stack.root().join("write-floor");
    let staging = dir.join(registry_svc::files::STAGING);
    std::fs::create_dir_all(&dir)?;
    let yaml = std::fs::read(stack.custom_dir().join("rest-created-00000.yaml"))
        .context("reading a YAML file the REST creates wrote")?;
    let (user, system) = tokio::task::spawn_blocking(move || {
        let me = std::process::id();
        let (u0, s0) = taskforce_tests::process::cpu_ticks_split(me);
        for i in 0..n {
            let path = dir.join(format!("floor-{i:05}.yaml"));
            registry_svc::files::write_atomic(&path, &yaml, &staging)
                .with_context(|| format!("writing {}", path.display()))?;
        }
        let (u1, s1) = taskforce_tests::process::cpu_ticks_split(me);
        std::fs::remove_dir_all(&dir)?;
        anyhow::Ok((u1.saturating_sub(u0), s1.saturating_sub(s0)))
    })
    .await??;
    #[allow(clippy::cast_precision_loss)]
    let us = |ticks: u64| ticks as f64 * 10_000.0 / n.max(1) as f64;
    Ok((
        "the same durable YAML write alone, in-process (write_atomic: fsync, rename, dir fsync)"
            .into(),
        format!(
            "CPU {:.0} µs/write (user {:.0}, kernel {:.0})",
            us(user + system),
            us(user),
            us(system)
        ),
    ))
}

/// `GET url`, failing unless it answers 2xx, with its whole body received.
async fn get_body(http: reqwest::Client, url: String) -> anyhow::Result<()> {
    let r = http.get(url).send().await?;
    if !r.status().is_success() {
        bail!("GET answered {}", r.status());
    }
    r.bytes().await?;
    Ok(())
}

/// CPU time of the gateway and the registry at one moment, in clock ticks (1/100 s).
struct ServerCpu {
    gateway: u64,
    registry: u64,
}

impl ServerCpu {
    fn now(stack: &taskforce_tests::Stack) -> Self {
        let ticks = |pid: Option<u32>| pid.map_or(0, runs::cpu_ticks);
        Self {
            gateway: ticks(stack.gateway_pid()),
            registry: ticks(stack.registry_pid()),
        }
    }

    /// Microseconds of CPU per operation since `self`, over `ops` operations: the sum, then
    /// the gateway's and the registry's shares.
    #[allow(clippy::cast_precision_loss)]
    fn per_op(&self, stack: &taskforce_tests::Stack, ops: usize) -> String {
        let now = Self::now(stack);
        let us = |ticks: u64| ticks as f64 * 10_000.0 / ops.max(1) as f64;
        let (g, r) = (
            us(now.gateway.saturating_sub(self.gateway)),
            us(now.registry.saturating_sub(self.registry)),
        );
        format!("{:.2} (gateway {g:.2}, registry {r:.2})", g + r)
    }
}

/// Waits (up to 30 s) until the gateway serves the `n` agents from its copy of the registry:
/// its log's last word on the change stream is that the copy is in sync with `n` agents.
async fn copy_in_sync(stack: &taskforce_tests::Stack, n: usize) -> anyhow::Result<()> {
    let want = taskforce_tests::ReadModelEvent::Synced { agents: n as u64 };
    let deadline = Instant::now() + Duration::from_secs(30);
    while stack.read_model_events().last() != Some(&want) {
        if Instant::now() > deadline {
            bail!("the gateway's copy of the {n} agents was not in sync within 30 s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

fn rss_rows(stack: &taskforce_tests::Stack, label: &str) -> Vec<(String, String)> {
    [
        ("registry-svc", stack.registry_pid()),
        ("gateway", stack.gateway_pid()),
    ]
    .into_iter()
    .map(|(name, pid)| {
        let rss = pid.map_or_else(|| "not running".to_owned(), rss);
        (format!("{label}, {name}"), rss)
    })
    .collect()
}

/// Writes `n` custom agents the way the API would.
fn seed(dir: &Path, n: usize) -> anyhow::Result<()> {
    for i in 0..n {
        let id = agent_id(i);
        let yaml = format!(
            "agent_id: {id}\nname: Bench agent {i}\ndescription: An agent of the benchmark.\n\
             prompt:\n  system_prompt: |\n    You are agent {i}. Answer briefly and use tools only when needed.\n\
             tools:\n  allowlist:\n  - file_read\n  - python\n\
             created_at: 2026-11-22T09:00:00Z\nupdated_at: 2026-11-22T09:00:00Z\n"
        );
        std::fs::write(dir.join(format!("{id}.yaml")), yaml)?;
    }
    Ok(())
}

/// Waits until the registry lists `n` agents (the watcher picks up seeded files).
async fn wait_for_count(stack: &taskforce_tests::Stack, n: usize) -> anyhow::Result<()> {
    let client = stack.registry();
    let found =
        taskforce_tests::eventually(Duration::from_secs(30), Duration::from_millis(50), || {
            let c = client.clone();
            async move { list_all(c, n).await.ok() }
        })
        .await;
    found.context("the seeded agents did not show up within 30 s")
}

fn agent_id(i: usize) -> String {
    format!("bench-{i:05}")
}

fn spec(id: &str) -> v1::AgentSpec {
    v1::AgentSpec {
        agent_id: id.to_owned(),
        name: "Created".into(),
        description: "Created by the benchmark.".into(),
        system_prompt: "You are a benchmark agent.".into(),
        tool_allowlist: vec!["file_read".into()],
        ..Default::default()
    }
}

async fn list_all(mut c: AgentRegistryClient<Channel>, n: usize) -> Result<(), tonic::Status> {
    let (mut token, mut got) = (String::new(), 0);
    loop {
        let page = c
            .list_agents(v1::ListAgentsRequest {
                page_size: 1000,
                page_token: token,
                source: 0,
            })
            .await?
            .into_inner();
        got += page.agents.len();
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    if got == n {
        Ok(())
    } else {
        Err(tonic::Status::internal(format!(
            "listed {got} agents, expected {n}"
        )))
    }
}

async fn channels(addr: String, n: usize) -> anyhow::Result<Vec<Channel>> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(
            Endpoint::from_shared(format!("http://{addr}"))?
                .tcp_nodelay(true)
                .connect()
                .await?,
        );
    }
    Ok(out)
}

/// Latencies in microseconds, sorted.
struct Latencies(Vec<u64>);

impl Latencies {
    fn new(mut v: Vec<u64>) -> Self {
        v.sort_unstable();
        Self(v)
    }

    fn pct(&self, p: f64) -> u64 {
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss
        )]
        let i = ((self.0.len() as f64 - 1.0) * p).round() as usize;
        self.0.get(i).copied().unwrap_or_default()
    }

    fn summary(&self) -> String {
        format!(
            "p50 {} · p99 {} (n={})",
            us(self.pct(0.5)),
            us(self.pct(0.99)),
            self.0.len()
        )
    }
}

fn us(v: u64) -> String {
    if v >= 10_000 {
        format!("{:.1} ms", v as f64 / 1000.0)
    } else {
        format!("{v} µs")
    }
}

fn ms(d: Duration) -> String {
    format!("{} ms", d.as_millis())
}

/// Runs `f(0..n)` one after another and times each call.
async fn sequential<F, Fut, E>(n: usize, f: F) -> anyhow::Result<Latencies>
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = Result<(), E>>,
    E: Into<anyhow::Error>,
{
    // Warm-up (connections, caches, lazy initialisation), on indices the run does not use.
    for i in n..n + n.min(50) {
        f(i).await.map_err(Into::into)?;
    }
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let t = Instant::now();
        f(i).await.map_err(Into::into)?;
        out.push(micros(t.elapsed()));
    }
    Ok(Latencies::new(out))
}

/// Keeps `args.concurrency` calls in flight for `args.seconds`; returns requests per second and
/// the latencies. Any failed call fails the benchmark.
async fn load<F, Fut, E>(args: &Args, f: F) -> anyhow::Result<(f64, Latencies)>
where
    F: Fn(usize) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<(), E>> + Send,
    E: Into<anyhow::Error>,
{
    let end = Instant::now() + Duration::from_secs(args.seconds);
    let next =
        move |worker: usize, done: usize| (Instant::now() < end).then_some(worker * 7919 + done);
    workers(args.concurrency, next, f).await
}

/// Runs `f(0..n)` with `concurrency` calls in flight (no warm-up); returns calls per second and
/// the latencies. Any failed call fails the benchmark.
async fn in_flight<F, Fut, E>(
    n: usize,
    concurrency: usize,
    f: F,
) -> anyhow::Result<(f64, Latencies)>
where
    F: Fn(usize) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<(), E>> + Send,
    E: Into<anyhow::Error>,
{
    let taken = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let next = move |_: usize, _: usize| {
        let i = taken.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        (i < n).then_some(i)
    };
    workers(concurrency, next, f).await
}

/// `concurrency` workers each calling `f(i)` for the `i`s that `next(worker, calls done by it)`
/// gives, until it gives none; returns calls per second and the latencies.
async fn workers<N, F, Fut, E>(
    concurrency: usize,
    next: N,
    f: F,
) -> anyhow::Result<(f64, Latencies)>
where
    N: Fn(usize, usize) -> Option<usize> + Clone + Send + 'static,
    F: Fn(usize) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<(), E>> + Send,
    E: Into<anyhow::Error>,
{
    let started = Instant::now();
    let mut workers = tokio::task::JoinSet::new();
    for w in 0..concurrency.max(1) {
        let (f, next) = (f.clone(), next.clone());
        workers.spawn(async move {
            let mut lat = Vec::new();
            while let Some(i) = next(w, lat.len()) {
                let t = Instant::now();
                f(i).await.map_err(Into::into)?;
                lat.push(micros(t.elapsed()));
            }
            anyhow::Ok(lat)
        });
    }
    let mut all = Vec::new();
    while let Some(r) = workers.join_next().await {
        all.extend(r??);
    }
    #[allow(clippy::cast_precision_loss)]
    let per_s = all.len() as f64 / started.elapsed().as_secs_f64();
    Ok((per_s, Latencies::new(all)))
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// `VmRSS` of a process, from `/proc`.
fn rss(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .map(|l| l.trim_start_matches("VmRSS:").trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".into())
}
