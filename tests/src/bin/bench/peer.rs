//! The LangGraph peer's CRUD workload (its assistants create, get, and
//! search with limit 100 over 1000 present, at concurrency 1 and 10, 200 operations each), run
//! against our REST gateway so the two tables line up.

use std::sync::{
    Arc,
    atomic::{AtomicUsize, Ordering},
};

use anyhow::bail;
use serde_json::json;
use taskforce_tests::StackOptions;
use tokio::time::Instant;

use crate::{Latencies, micros, seed};

/// Operations per phase, as in the peer's reference run.
const OPS: usize = 200;

/// Rows of (phase, concurrency, ops/s, latencies).
pub async fn run() -> anyhow::Result<Vec<(String, usize, f64, Latencies)>> {
    let stack = StackOptions::full().empty_configs().spawn().await?;
    let http = reqwest::Client::builder().tcp_nodelay(true).build()?;
    let mut rows = Vec::new();
    for conc in [1, 10] {
        let (url, h) = (stack.url("/api/v1/agents"), http.clone());
        let (rps, lat) = concurrent(conc, move |i| {
            let (h, url) = (h.clone(), url.clone());
            async move {
                let body = json!({
                    "agent_id": format!("peer-{conc}-{i:04}"),
                    "name": "Peer-shaped agent",
                    "description": "Created by the peer-shaped CRUD benchmark.",
                    "system_prompt": "You are a helpful assistant.",
                    "tool_allowlist": ["web_search"]
                });
                expect(h.post(url).json(&body).send().await?, 201).await
            }
        })
        .await?;
        rows.push(("create (durable)".to_owned(), conc, rps, lat));
    }
    for conc in [1, 10] {
        let (base, h) = (stack.url("/api/v1/agents"), http.clone());
        let (rps, lat) = concurrent(conc, move |i| {
            let (h, url) = (h.clone(), format!("{base}/peer-1-{:04}", i % OPS));
            async move { expect(h.get(url).send().await?, 200).await }
        })
        .await?;
        rows.push(("get".to_owned(), conc, rps, lat));
    }
    // Top up to 1000 agents (not timed), as the peer's search phase does.
    seed(&stack.custom_dir(), 1000 - 2 * OPS)?;
    crate::wait_for_count(&stack, 1000).await?;
    for conc in [1, 10] {
        let (url, h) = (stack.url("/api/v1/agents?page_size=100"), http.clone());
        let (rps, lat) = concurrent(conc, move |_| {
            let (h, url) = (h.clone(), url.clone());
            async move {
                let body: serde_json::Value = h.get(url).send().await?.json().await?;
                let got = body["agents"].as_array().map_or(0, Vec::len);
                if got != 100 {
                    bail!("a page held {got} agents, expected 100");
                }
                Ok(())
            }
        })
        .await?;
        rows.push((
            "list page_size=100 (1000 present)".to_owned(),
            conc,
            rps,
            lat,
        ));
    }
    Ok(rows)
}

async fn expect(r: reqwest::Response, status: u16) -> anyhow::Result<()> {
    if r.status().as_u16() != status {
        bail!(
            "answered {}: {}",
            r.status(),
            r.text().await.unwrap_or_default()
        );
    }
    Ok(())
}

/// Runs [`OPS`] calls of `f` with `conc` in flight; returns ops/s and latencies.
async fn concurrent<F, Fut>(conc: usize, f: F) -> anyhow::Result<(f64, Latencies)>
where
    F: Fn(usize) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = anyhow::Result<()>> + Send,
{
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..conc {
        let (f, next) = (f.clone(), Arc::clone(&next));
        workers.spawn(async move {
            let mut lat = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= OPS {
                    return anyhow::Ok(lat);
                }
                let t = std::time::Instant::now();
                f(i).await?;
                lat.push(micros(t.elapsed()));
            }
        });
    }
    let mut all = Vec::with_capacity(OPS);
    while let Some(r) = workers.join_next().await {
        all.extend(r??);
    }
    #[allow(clippy::cast_precision_loss)]
    let rps = all.len() as f64 / started.elapsed().as_secs_f64();
    Ok((rps, Latencies::new(all)))
}
