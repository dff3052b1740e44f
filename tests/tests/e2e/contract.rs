//! The OpenAPI document is the contract: the real `schemathesis` generates requests from it
//! (examples, coverage of every constraint, fuzzing, stateful sequences) against the real
//! stack with API keys on, and every check (`--checks all`: no 5xx, documented statuses and
//! bodies, schema-valid requests accepted, schema-violating ones refused, SSE events as
//! declared, 401 without a key) must pass. `tests/contract/schemathesis.toml` lists the one
//! thing a document cannot state (references to things that do not exist are a 400).

use std::{process::Stdio, time::Duration};

use taskforce_tests::{StackOptions, paths};

const KEY: &str = "contract-test-admin-key-0123456789";
/// The whole run's limit; it takes about a minute on two cores.
const BUDGET: Duration = Duration::from_secs(600);

#[tokio::test]
async fn schemathesis_finds_no_contract_failure() {
    let stack = StackOptions::full()
        .with_executor()
        .env_all(
            "TASKFORCE_API_KEYS",
            format!("{{keys: [{{name: contract, token: {KEY}, scopes: [admin]}}]}}"),
        )
        .env_all("TASKFORCE_SERVICE_TOKEN", KEY)
        .spawn()
        .await
        .expect("stack starts");
    let mut out = schemathesis(&stack).await;
    let mut report = String::from_utf8_lossy(&out.stdout).into_owned();
    // Schemathesis's own generator can fail (a Hypothesis `FlakyFailure` while it draws a case, on
    // a loaded machine): that is a runtime error of the tool, not a finding about the API, and
    // it comes with no `FAILURES` section. Such a run is made once more, and that one decides.
    let tool_error = report.contains("Runtime Error") && report.contains("hypothesis.errors");
    if !out.status.success() && tool_error && !report.contains("FAILURES") {
        eprintln!("schemathesis hit an error of its own; running it again:\n{report}");
        out = schemathesis(&stack).await;
        report = String::from_utf8_lossy(&out.stdout).into_owned();
    }
    assert!(
        out.status.success(),
        "schemathesis found failures:\n{report}\n{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        stack.logs()
    );
    assert!(
        report.contains(" passed") && !report.contains("failures"),
        "{report}"
    );
}

/// One run of schemathesis against `stack`'s OpenAPI document.
async fn schemathesis(stack: &taskforce_tests::Stack) -> std::process::Output {
    let program =
        paths::schemathesis().expect("schemathesis is installed (scripts/install-test-deps.sh)");
    let mut cmd = tokio::process::Command::new(program);
    cmd.arg("--config-file")
        .arg(paths::schemathesis_config())
        .arg("run")
        .arg(stack.url("/openapi.json"))
        .args(["--checks", "all"])
        .args(["--max-examples", "40"])
        .args(["--workers", "2"])
        .args(["--request-timeout", "30"])
        // A fixed seed: the same cases every run, so a failure reproduces.
        .args(["--seed", "20261123"])
        .args(["--header", &format!("Authorization: Bearer {KEY}")])
        .env("NO_COLOR", "1")
        .env("SCHEMATHESIS_HOOKS", "")
        .current_dir(stack.root())
        .stdin(Stdio::null())
        .kill_on_drop(true);
    tokio::time::timeout(BUDGET, cmd.output())
        .await
        .unwrap_or_else(|_| panic!("schemathesis did not finish within {BUDGET:?}"))
        .expect("schemathesis runs")
}
