//! What API keys cost a request (issue 13: ≤ 20 µs p50): `GET /api/v1/agents/{id}` through the
//! gateway, one at a time, on a stack without keys and on one with `keys` keys (the gateway
//! checks the caller's key, the registry the gateway's service token), in alternating rounds
//! so a drifting machine affects both sides alike.

use anyhow::bail;
use taskforce_tests::StackOptions;

use super::{Latencies, sequential, us};

const SERVICE: &str = "bench-service-key-0123456789abcdef";
const CALLER: &str = "bench-caller-key-0123456789abcdef";

/// Rows for `rounds` rounds of `samples` sequential GETs per side, with `keys` keys configured.
pub async fn run(
    samples: usize,
    rounds: usize,
    keys: usize,
) -> anyhow::Result<Vec<(String, String)>> {
    let mut doc = format!(
        "keys:\n- {{name: services, token: {SERVICE}, scopes: [admin]}}\n- {{name: caller, token: {CALLER}, scopes: [read]}}\n"
    );
    for i in 2..keys.max(2) {
        doc.push_str(&format!(
            "- {{name: other-{i}, token: other-key-{i:04}-0123456789abcdef, scopes: [read]}}\n"
        ));
    }
    let mut off_all = Vec::new();
    let mut on_all = Vec::new();
    let mut rows = Vec::new();
    for round in 0..rounds {
        for with_keys in [false, true] {
            let mut opts = StackOptions::full();
            if with_keys {
                opts = opts
                    .env_all("TASKFORCE_API_KEYS", doc.clone())
                    .env_all("TASKFORCE_SERVICE_TOKEN", SERVICE);
            }
            let stack = opts.spawn().await?;
            let http = reqwest::Client::builder().tcp_nodelay(true).build()?;
            let url = stack.url("/api/v1/agents/invoice-extractor");
            let lat = sequential(samples, |_| {
                let mut req = http.get(&url);
                if with_keys {
                    req = req.bearer_auth(CALLER);
                }
                async move {
                    let r = req.send().await?;
                    if !r.status().is_success() {
                        bail!("GET answered {}", r.status());
                    }
                    r.bytes().await?;
                    Ok(())
                }
            })
            .await?;
            rows.push((
                format!(
                    "round {}: REST GET /api/v1/agents/{{id}}, concurrency 1, {}",
                    round + 1,
                    if with_keys { "with keys" } else { "no keys" }
                ),
                lat.summary(),
            ));
            if with_keys {
                on_all.extend(lat.0);
            } else {
                off_all.extend(lat.0);
            }
        }
    }
    let (off, on) = (Latencies::new(off_all), Latencies::new(on_all));
    let delta = i128::from(on.pct(0.5)) - i128::from(off.pct(0.5));
    rows.push((
        format!("all rounds: p50 no keys / with {keys} keys / difference"),
        format!("{} / {} / {delta} µs", us(off.pct(0.5)), us(on.pct(0.5))),
    ));
    Ok(rows)
}
