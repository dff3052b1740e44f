//! The registry's periodic full reconcile, in process over a temporary directory of N custom
//! agents: the first pass (fills the cache), a pass that reads every file (what every periodic
//! pass cost before files were stamped), and a pass over unchanged files (stat only).

use std::{fs, time::Instant};

use anyhow::Context as _;
use registry_svc::store::{ReconcileStats, Store};

use crate::runs::Rows;

/// One agent's YAML, as a person would write it.
fn definition(i: usize) -> String {
    format!(
        "name: Agent {i}\ndescription: Agent number {i}, written by the benchmark.\n\
         prompt:\n  system_prompt: You are agent {i}. Answer briefly.\n\
         tools:\n  allowlist: [file_read, file_write]\n"
    )
}

pub fn run(n: usize) -> anyhow::Result<Rows> {
    let dir = tempfile::tempdir()?;
    let root = dir.path().join("configs");
    let custom = root.join("custom");
    fs::create_dir_all(&custom)?;
    for i in 0..n {
        fs::write(custom.join(format!("agent-{i:05}.yaml")), definition(i))?;
    }
    let store = Store::open(&root, &dir.path().join("data")).context("opening the store")?;
    let mut rows = Rows::new();
    let mut pass = |what: &str| -> anyhow::Result<ReconcileStats> {
        let started = Instant::now();
        let stats = store.reconcile_all()?;
        let took = started.elapsed();
        rows.push((
            format!("full reconcile of {n} agents: {what}"),
            format!(
                "{:.1} ms ({:.2} µs per file; read {}, unchanged {}, updated {})",
                took.as_secs_f64() * 1e3,
                took.as_secs_f64() * 1e6 / n.max(1) as f64,
                stats.files - stats.unchanged,
                stats.unchanged,
                stats.updated,
            ),
        ));
        Ok(stats)
    };
    pass("first pass (fills the cache)")?;
    // Files changed within the racy window are read on every pass; wait it out.
    std::thread::sleep(std::time::Duration::from_millis(2100));
    pass("every file read, none changed (each pass before stamps)")?;
    let stats = pass("no file changed (stat only)")?;
    anyhow::ensure!(
        stats.unchanged == n,
        "expected {n} unchanged files, got {stats:?}"
    );
    Ok(rows)
}
