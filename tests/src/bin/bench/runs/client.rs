//! One streamed run through the gateway (`POST /api/v1/execute/stream`, read as SSE the way a
//! browser would), checked and timed, and a closed loop of such runs.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};

use super::stack::AGENT;
use crate::micros;

/// Timings of one checked run, in microseconds from sending the request.
#[derive(Debug, Clone, Copy)]
pub struct Timed {
    /// The first SSE event (`run_started`).
    pub first_event: u64,
    /// The first non-empty token of the answer after the tool result.
    pub first_token: u64,
    /// The stream's end (after `done`).
    pub total: u64,
    /// When the request was sent, relative to the start of the batch.
    pub sent_at: u64,
}

/// An HTTP client for `conc` streams at once (HTTP/1.1, one connection per stream, no proxy).
pub fn http(conc: usize) -> anyhow::Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .no_proxy()
        .tcp_nodelay(true)
        .pool_max_idle_per_host(conc)
        .timeout(Duration::from_secs(120))
        .build()?)
}

/// Runs `model` once on [`AGENT`] and checks the stream: one successful tool call, then
/// `words` non-empty tokens, a final answer and `done` with status `completed`.
pub async fn streamed_run(
    http: &reqwest::Client,
    url: &str,
    model: &str,
    words: usize,
    epoch: Instant,
) -> anyhow::Result<Timed> {
    let body = json!({"mission": "Please read the file ping, then answer.", "agent_id": AGENT,
                      "model": model});
    let t0 = Instant::now();
    let sent_at = micros(t0 - epoch);
    let mut r = http.post(url).json(&body).send().await?;
    if !r.status().is_success() {
        let status = r.status();
        bail!("the stream answered {status}: {}", r.text().await?);
    }
    let (mut first_event, mut first_token) = (None, None);
    let (mut tool_ok, mut tokens, mut answered, mut done) = (false, 0, false, false);
    let mut buf: Vec<u8> = Vec::with_capacity(4096);
    while let Some(chunk) = r.chunk().await? {
        buf.extend_from_slice(&chunk);
        while let Some(end) = buf.windows(2).position(|w| w == b"\n\n") {
            let frame: Vec<u8> = buf.drain(..end + 2).collect();
            let frame = std::str::from_utf8(&frame).context("an SSE frame is not UTF-8")?;
            let (mut event, mut data) = ("", String::new());
            for line in frame.lines() {
                if let Some(v) = line.strip_prefix("event:") {
                    event = v.trim_start();
                } else if let Some(v) = line.strip_prefix("data:") {
                    data.push_str(v.strip_prefix(' ').unwrap_or(v));
                }
            }
            if event.is_empty() {
                continue; // a keep-alive comment
            }
            first_event.get_or_insert_with(|| micros(t0.elapsed()));
            match event {
                "tool_end" => {
                    let v: Value = serde_json::from_str(&data)?;
                    if v["is_error"] != Value::Bool(false) {
                        bail!("the tool call failed: {data}");
                    }
                    tool_ok = true;
                }
                "token" if tool_ok && !data.contains("\"text\":\"\"") => {
                    first_token.get_or_insert_with(|| micros(t0.elapsed()));
                    tokens += 1;
                }
                "final_answer" => answered = true,
                "error" | "tool_error" => bail!("the run reported {event}: {data}"),
                "done" => {
                    let v: Value = serde_json::from_str(&data)?;
                    if v["status"] != "completed" {
                        bail!("the run ended {}: {data}", v["status"]);
                    }
                    done = true;
                }
                _ => {}
            }
        }
    }
    let total = micros(t0.elapsed());
    if !(tool_ok && answered && done && tokens == words) {
        bail!(
            "incomplete run: tool result {tool_ok}, {tokens} answer tokens (want {words}), \
             final answer {answered}, done {done}"
        );
    }
    Ok(Timed {
        first_event: first_event.unwrap_or(total),
        first_token: first_token.unwrap_or(total),
        total,
        sent_at,
    })
}

/// How long a closed loop goes on.
#[derive(Debug, Clone, Copy)]
pub enum Budget {
    /// Each client makes this many runs.
    RunsPerClient(usize),
    /// Clients start runs until this much time has passed.
    Seconds(u64),
}

/// What a closed loop measured.
pub struct LoopResult {
    /// Every run, in completion order.
    pub runs: Vec<Timed>,
    /// From the first request to the last stream's end.
    pub wall: Duration,
}

impl LoopResult {
    /// Completed runs per second.
    pub fn rate(&self) -> f64 {
        #[allow(clippy::cast_precision_loss)]
        let n = self.runs.len() as f64;
        n / self.wall.as_secs_f64()
    }

    /// One timing of every run, sorted.
    pub fn latencies(&self, f: fn(&Timed) -> u64) -> crate::Latencies {
        crate::Latencies::new(self.runs.iter().map(f).collect())
    }

    /// The most runs that were between their first event and their end at one moment.
    pub fn max_in_flight(&self) -> usize {
        let mut edges: Vec<(u64, i32)> = self
            .runs
            .iter()
            .flat_map(|t| [(t.sent_at + t.first_event, 1), (t.sent_at + t.total, -1)])
            .collect();
        edges.sort_unstable_by_key(|&(at, d)| (at, d));
        let (mut now, mut max) = (0i32, 0i32);
        for (_, d) in edges {
            now += d;
            max = max.max(now);
        }
        usize::try_from(max).unwrap_or_default()
    }
}

/// `clients` tasks, each running `model` back to back within `budget`. Any failed run fails
/// the whole loop.
pub async fn closed_loop(
    http: &reqwest::Client,
    url: &str,
    model: &str,
    words: usize,
    clients: usize,
    budget: Budget,
) -> anyhow::Result<LoopResult> {
    let epoch = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..clients {
        let (http, url, model) = (http.clone(), url.to_owned(), model.to_owned());
        tasks.spawn(async move {
            let mut out = Vec::new();
            loop {
                let go = match budget {
                    Budget::RunsPerClient(n) => out.len() < n,
                    Budget::Seconds(s) => epoch.elapsed() < Duration::from_secs(s),
                };
                if !go {
                    return anyhow::Ok(out);
                }
                out.push(streamed_run(&http, &url, &model, words, epoch).await?);
            }
        });
    }
    let mut runs = Vec::new();
    while let Some(r) = tasks.join_next().await {
        runs.extend(r??);
    }
    Ok(LoopResult {
        runs,
        wall: epoch.elapsed(),
    })
}
