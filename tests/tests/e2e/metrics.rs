//! `/metrics` on every service (issue #12), after a run through the gateway, parsed strictly
//! with the reference OpenMetrics parser (PyPI `prometheus-client`): the gateway's HTTP
//! requests by route template, both gRPC servers' requests by method and code, the executor's
//! runs, model calls and tool calls, the registry's agents by source, sled size and reconcile
//! age.

use std::io::Write;

use serde_json::{Value, json};
use taskforce_tests::{Stack, StackOptions, paths};

use crate::helpers::{RUN_TIMEOUT, SseReader, create_agent_with_tools};

const SCRIPT: &str = r#"
turns:
  - match: "Take your time"
    delay_ms: 30000
    text: "Too late."
  - match: "What do the notes say"
    tool_calls:
      - {name: file_read, arguments: {path: notes.txt}}
      - {name: python, arguments: {code: "print(1)"}}
      - {name: made_up_tool, arguments: {}}
  - match: "hello"
    text: "It says hello."
"#;

/// One sample: name, labels, value.
type Sample = (String, serde_json::Map<String, Value>, f64);

/// Scrapes `url` and parses it with the reference parser.
async fn scrape(stack: &Stack, url: &str) -> Vec<Sample> {
    let reply = stack.http().get(url).send().await.expect("scrape");
    assert_eq!(reply.status(), 200, "{url}");
    let content_type = reply
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    assert!(
        content_type.starts_with("application/openmetrics-text"),
        "{content_type}"
    );
    let text = reply.text().await.expect("text");
    let mut parser = std::process::Command::new(paths::python().expect("venv"))
        .arg(paths::workspace_root().join("tests/fixtures/parse_metrics.py"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("parser starts");
    parser
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write");
    let out = parser.wait_with_output().expect("parser ends");
    assert!(
        out.status.success(),
        "{url} is not valid OpenMetrics: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    let samples: Vec<(String, serde_json::Map<String, Value>, f64)> =
        serde_json::from_slice(&out.stdout).expect("JSON");
    samples
}

/// The value of the sample `name` whose labels include `labels`.
fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    samples
        .iter()
        .find(|(n, l, _)| {
            n == name
                && labels
                    .iter()
                    .all(|(k, v)| l.get(*k).and_then(Value::as_str) == Some(*v))
        })
        .map(|(_, _, v)| *v)
}

/// The full stack on [`SCRIPT`].
async fn stack() -> Stack {
    StackOptions::full()
        .with_executor()
        .llm_script(SCRIPT)
        .spawn()
        .await
        .expect("stack starts")
}

#[tokio::test]
async fn every_service_serves_its_metrics_after_a_run() {
    let stack = stack().await;
    let registry_metrics = stack
        .registry_metrics_addr()
        .expect("the registry's metrics");
    let executor_metrics = stack
        .executor_metrics_addr()
        .expect("the executor's metrics");
    create_agent_with_tools(&stack, "reader", &["file_read"]).await;
    let workspace = stack.executor_workspace("reader");
    std::fs::create_dir_all(&workspace).expect("workspace");
    std::fs::write(workspace.join("notes.txt"), "hello").expect("notes");
    let mut sse = SseReader::open(
        &stack,
        "/api/v1/execute/stream",
        &json!({"agent_id": "reader", "mission": "What do the notes say?"}),
    )
    .await;
    let events = sse.rest(RUN_TIMEOUT).await;
    assert_eq!(
        events[events.len() - 1].1["status"],
        "completed",
        "{events:?}"
    );

    let gateway = scrape(&stack, &stack.url("/metrics")).await;
    let posted = [
        ("route", "/api/v1/execute/stream"),
        ("method", "POST"),
        ("code", "200"),
    ];
    assert_eq!(
        value(&gateway, "taskforce_http_requests_total", &posted),
        Some(1.0)
    );
    assert!(
        value(
            &gateway,
            "taskforce_http_requests_total",
            &[("route", "/api/v1/agents")]
        )
        .is_some(),
        "the create is counted under its route"
    );
    assert!(
        value(
            &gateway,
            "taskforce_http_request_duration_seconds_count",
            &[("route", "/api/v1/execute/stream")]
        )
        .is_some()
    );

    let executor = scrape(&stack, &format!("http://{executor_metrics}/metrics")).await;
    let execute = [("method", "/taskforce.v1.Executor/Execute"), ("code", "0")];
    assert_eq!(
        value(&executor, "taskforce_grpc_server_requests_total", &execute),
        Some(1.0)
    );
    assert_eq!(
        value(
            &executor,
            "taskforce_runs_total",
            &[("status", "completed")]
        ),
        Some(1.0)
    );
    assert_eq!(value(&executor, "taskforce_runs_in_flight", &[]), Some(0.0));
    // The run's session, stored.
    assert_eq!(
        value(&executor, "taskforce_sessions_stored", &[]),
        Some(1.0)
    );
    assert!(
        value(&executor, "taskforce_session_store_bytes", &[]).is_some_and(|b| b > 100.0),
        "the session's bytes"
    );
    // What has not happened yet is 0, not missing (a failure ratio evaluates from the start).
    assert_eq!(
        value(&executor, "taskforce_runs_total", &[("status", "failed")]),
        Some(0.0)
    );
    assert_eq!(
        value(
            &executor,
            "taskforce_llm_errors_total",
            &[("provider", "scripted")]
        ),
        Some(0.0)
    );
    assert_eq!(
        value(
            &executor,
            "taskforce_llm_request_duration_seconds_count",
            &[("provider", "scripted")]
        ),
        Some(2.0),
        "two model calls"
    );
    assert_eq!(
        value(
            &executor,
            "idp_tool_success_total",
            &[("tool", "file_read")]
        ),
        Some(1.0)
    );
    // A call of a tool the agent was not given: the executor's own keep their names, a name a
    // model made up is `unknown` (it must not grow the series).
    for tool in ["python", "unknown"] {
        assert_eq!(
            value(
                &executor,
                "idp_tool_failure_total",
                &[("tool", tool), ("outcome", "error")]
            ),
            Some(1.0),
            "{tool}"
        );
    }
    assert!(
        !executor
            .iter()
            .any(|(_, l, _)| l.get("tool").and_then(Value::as_str) == Some("made_up_tool")),
        "a made-up name is no label"
    );

    let registry = scrape(&stack, &format!("http://{registry_metrics}/metrics")).await;
    assert_eq!(
        value(
            &registry,
            "taskforce_registry_agents",
            &[("source", "custom")]
        ),
        Some(4.0),
        "three samples and the new agent"
    );
    assert_eq!(
        value(
            &registry,
            "taskforce_registry_agents",
            &[("source", "profile")]
        ),
        Some(1.0)
    );
    // Some bytes on disk (a scrape while sled cannot say keeps the last value, 0 at first).
    assert!(value(&registry, "taskforce_registry_sled_bytes", &[]).is_some());
    let url = format!("http://{registry_metrics}/metrics");
    let written = taskforce_tests::eventually(
        std::time::Duration::from_secs(10),
        std::time::Duration::from_millis(200),
        || {
            let url = url.clone();
            let stack = &stack;
            async move {
                let samples = scrape(stack, &url).await;
                value(&samples, "taskforce_registry_sled_bytes", &[])
                    .is_some_and(|b| b > 0.0)
                    .then_some(())
            }
        },
    )
    .await;
    assert!(written.is_some(), "the sled size stayed 0");
    assert!(value(&registry, "taskforce_registry_reconcile_age_seconds", &[]).is_some());
    let create = [
        ("method", "/taskforce.v1.AgentRegistry/CreateAgent"),
        ("code", "0"),
    ];
    assert_eq!(
        value(&registry, "taskforce_grpc_server_requests_total", &create),
        Some(1.0)
    );
}

#[tokio::test]
async fn a_request_whose_client_left_is_counted_and_readiness_probes_are_not() {
    let stack = stack().await;
    let registry_url = format!(
        "http://{}/metrics",
        stack
            .registry_metrics_addr()
            .expect("the registry's metrics")
    );
    create_agent_with_tools(&stack, "patient", &["file_read"]).await;

    // Readiness probes read an agent and a session that do not exist on purpose: no client's
    // NOT_FOUND.
    for _ in 0..3 {
        let ready = stack.http().get(stack.url("/readyz")).send().await;
        assert_eq!(ready.map(|r| r.status().as_u16()).ok(), Some(200));
    }
    let registry = scrape(&stack, &registry_url).await;
    let probe_miss = [
        ("method", "/taskforce.v1.AgentRegistry/GetAgent"),
        ("code", "5"),
    ];
    assert_eq!(
        value(
            &registry,
            "taskforce_grpc_server_requests_total",
            &probe_miss
        ),
        None
    );

    // A blocking run the client gives up on after a second: counted, as 499.
    let gave_up = stack
        .http()
        .post(stack.url("/api/v1/execute"))
        .timeout(std::time::Duration::from_secs(1))
        .json(&json!({"mission": "Take your time", "agent_id": "patient"}))
        .send()
        .await;
    assert!(gave_up.is_err(), "{gave_up:?}");
    let left = [
        ("route", "/api/v1/execute"),
        ("method", "POST"),
        ("code", "499"),
    ];
    let counted = taskforce_tests::eventually(
        std::time::Duration::from_secs(10),
        std::time::Duration::from_millis(100),
        || {
            let stack = &stack;
            async move {
                let gateway = scrape(stack, &stack.url("/metrics")).await;
                value(&gateway, "taskforce_http_requests_total", &left)
                    .filter(|n| *n == 1.0)
                    .and(value(
                        &gateway,
                        "taskforce_http_request_duration_seconds_count",
                        &[("route", "/api/v1/execute")],
                    ))
            }
        },
    )
    .await;
    assert_eq!(counted, Some(1.0), "the abandoned request is not counted");
}
