//! OpenTelemetry traces through the real binaries: an OTLP receiver in this test (the
//! collector's own gRPC `TraceService`) gets the spans of one streamed run from the gateway, the
//! executor and the registry as ONE trace, continuing the client's W3C `traceparent`, with
//! parent/child links across both hops (gateway → executor → registry); log lines carry the
//! trace id; without `OTEL_EXPORTER_OTLP_ENDPOINT` nothing is exported or complained about.

use std::{collections::HashMap, time::Duration};

use serde_json::json;
use taskforce_tests::{
    Stack, StackOptions,
    otlp::{Receiver, Span as Got},
    wait::eventually,
};

use crate::helpers::{agent_json, create, parse_sse, send};

/// Turns picked by what the conversation last said.
const SCRIPT: &str = r#"
turns:
  - match: "Read the notes"
    tool_calls: [{name: file_read, arguments: {path: notes.txt}}]
  - match: "traced notes"
    delay_ms: 150
    text: "Done."
  - match: "Read the lost notes"
    tool_calls: [{name: file_read, arguments: {path: lost.txt}}, {name: zz_made_up, arguments: {}}]
  - match: "Take your time"
    delay_ms: 30000
    text: "Too late."
  - error: "the model is overloaded"
"#;

/// The caller's trace: what a client (or a proxy in front of the gateway) sends.
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";

/// The `traceparent` of a client's span in trace `trace_id` (sampled).
fn traceparent(trace_id: &str) -> String {
    format!("00-{trace_id}-{CLIENT_SPAN}-01")
}

/// A `tracestate` of 32 members of ~510 characters each.
fn big_tracestate() -> String {
    (0..32)
        .map(|i| format!("k{i:03}{}={}", "a".repeat(250), "v".repeat(256)))
        .collect::<Vec<_>>()
        .join(",")
}

/// POSTs `body` to `path` in trace `trace_id`, as a client continuing its own trace would.
async fn post_traced(
    stack: &Stack,
    path: &str,
    trace_id: &str,
    body: &serde_json::Value,
) -> reqwest::Response {
    stack
        .http()
        .post(stack.url(path))
        .header("traceparent", traceparent(trace_id))
        .json(body)
        .send()
        .await
        .expect("answered")
}

/// The full stack on the script, exporting to `received` every `schedule_delay_ms`, with an
/// agent `agent_id` that may use `file_read`.
async fn traced_stack(received: &Receiver, schedule_delay_ms: &str, agent_id: &str) -> Stack {
    let stack = StackOptions::full()
        .with_executor()
        .llm_script(SCRIPT)
        .env_all("OTEL_EXPORTER_OTLP_ENDPOINT", received.url())
        .env_all("OTEL_BSP_SCHEDULE_DELAY", schedule_delay_ms)
        .spawn()
        .await
        .expect("stack starts");
    let mut body = agent_json(agent_id);
    body["tool_allowlist"] = json!(["file_read"]);
    assert_eq!(create(&stack, &body).await.status, 201);
    stack
}

/// The spans of `trace_id` once `complete` says they all arrived (spans leave in batches), or
/// the test fails showing what did arrive.
async fn trace_when(
    received: &Receiver,
    stack: &Stack,
    trace_id: &str,
    complete: impl Fn(&[Got]) -> bool,
) -> Vec<Got> {
    let of_trace = || -> Vec<Got> {
        received
            .spans()
            .into_iter()
            .filter(|g| g.trace_id == trace_id)
            .collect()
    };
    let arrived = eventually(Duration::from_secs(20), Duration::from_millis(100), || {
        let done = complete(&of_trace());
        async move { done.then_some(()) }
    })
    .await;
    let spans = of_trace();
    assert!(
        arrived.is_some(),
        "the trace is incomplete: {spans:#?}\n{}",
        stack.logs()
    );
    spans
}

#[tokio::test]
async fn one_run_is_one_trace_across_gateway_executor_and_registry() {
    let received = Receiver::start().await.expect("the OTLP receiver starts");
    let stack = traced_stack(&received, "100", "traced").await;
    let workspace = stack.executor_workspace("traced");
    std::fs::create_dir_all(&workspace).expect("workspace");
    std::fs::write(workspace.join("notes.txt"), "the traced notes").expect("notes");

    let response = stack
        .http()
        .post(stack.url("/api/v1/execute/stream"))
        .header("traceparent", traceparent(TRACE_ID))
        // A caller's `tracestate` as large as the W3C allows (32 members, ~16 KiB): passed on
        // cut, not whole (which the services' header limit refused: the gateway said 503).
        .header("tracestate", big_tracestate())
        // The services' own probe marker means nothing from a REST client: still traced.
        .header("x-taskforce-probe", "1")
        .json(&json!({"mission": "Read the notes", "agent_id": "traced"}))
        .send()
        .await
        .expect("answered");
    let text = response.text().await.expect("the stream ends");
    assert!(
        parse_sse(&text).iter().any(|(name, _)| name == "done"),
        "{text}"
    );

    // Each service's part of the trace.
    let spans = trace_when(&received, &stack, TRACE_ID, |spans| {
        let has = |service: &str, prefix: &str| {
            spans
                .iter()
                .any(|g| g.service == service && g.name.starts_with(prefix))
        };
        has("gateway", "POST /api/v1/execute/stream")
            && has("executor-svc", "gRPC /taskforce.v1.Executor/Execute")
            && has("executor-svc", "tool file_read")
            && has("executor-svc", "llm ")
            && has("registry-svc", "gRPC /taskforce.v1.AgentRegistry/")
    })
    .await;
    let by_id: HashMap<&str, &Got> = spans.iter().map(|g| (g.span_id.as_str(), g)).collect();
    let parent_of = |g: &Got| by_id.get(g.parent.as_str()).copied();
    let find = |service: &str, prefix: &str| {
        spans
            .iter()
            .find(|g| g.service == service && g.name.starts_with(prefix))
            .unwrap_or_else(|| panic!("no {service} span {prefix}: {spans:#?}"))
    };

    // The gateway's request span continues the client's span.
    let rest = find("gateway", "POST /api/v1/execute/stream");
    assert_eq!(rest.parent, CLIENT_SPAN, "{spans:#?}");
    // Hop 1: the executor's Execute span is a child of a gateway span of this request.
    let execute = find("executor-svc", "gRPC /taskforce.v1.Executor/Execute");
    // Each carries the semantic conventions' attributes of its call, status included (a
    // streamed call's from its trailers).
    let attribute = |g: &Got, key: &str| g.attributes.get(key).cloned().unwrap_or_default();
    // Nothing a trace view has no use for (the module a span was made in).
    assert!(
        spans.iter().all(|g| !g.attributes.contains_key("target")),
        "{spans:#?}"
    );
    for (g, key, value) in [
        (rest, "http.request.method", "POST"),
        (rest, "http.route", "/api/v1/execute/stream"),
        (rest, "http.response.status_code", "200"),
        (execute, "rpc.system", "grpc"),
        (execute, "rpc.service", "taskforce.v1.Executor"),
        (execute, "rpc.method", "Execute"),
        (execute, "rpc.grpc.status_code", "0"),
    ] {
        assert_eq!(attribute(g, key), value, "{key} of {g:#?}");
    }
    let caller = parent_of(execute).unwrap_or_else(|| panic!("Execute has no parent: {spans:#?}"));
    assert_eq!(caller.service, "gateway", "{spans:#?}");
    // The run, its model call and its tool call descend from the Execute span.
    let descends_from = |g: &Got, ancestor: &Got| {
        let mut at = parent_of(g);
        while let Some(p) = at {
            if p.span_id == ancestor.span_id {
                return true;
            }
            at = parent_of(p);
        }
        false
    };
    for prefix in ["run traced", "llm ", "tool file_read"] {
        let span = find("executor-svc", prefix);
        assert!(
            descends_from(span, execute),
            "{prefix} is not under Execute: {spans:#?}"
        );
    }
    // A request's span lasts as long as its streamed response: the gateway's and the
    // executor's end after the run's last model call.
    let last_llm = spans
        .iter()
        .filter(|g| g.service == "executor-svc" && g.name.starts_with("llm "))
        .map(|g| g.end_unix_nano)
        .max()
        .unwrap_or(u64::MAX);
    for request in [rest, execute] {
        assert!(
            request.end_unix_nano >= last_llm,
            "{request:?} ended before the run's last model call ({last_llm}): {spans:#?}"
        );
    }
    // ...and the run's: the call streaming it encloses it.
    let run = find("executor-svc", "run traced");
    assert!(
        run.end_unix_nano <= execute.end_unix_nano,
        "the run ends after the call streaming it: {spans:#?}"
    );
    // Hop 2: the registry's request spans in this trace are children of executor spans (the
    // definition lookup, the BUSY report), and its other spans are inside those.
    let registry: Vec<&Got> = spans
        .iter()
        .filter(|g| g.service == "registry-svc")
        .collect();
    assert!(!registry.is_empty());
    for span in registry {
        let caller = parent_of(span).unwrap_or_else(|| panic!("{span:?} has no parent"));
        let expected = if span.name.starts_with("gRPC ") {
            "executor-svc"
        } else {
            "registry-svc"
        };
        assert_eq!(caller.service, expected, "{span:?}: {spans:#?}");
    }

    // A model call's span covers the call (this one answers after 150 ms), not only its start.
    let slowest = spans
        .iter()
        .filter(|g| g.name.starts_with("llm "))
        .map(|g| g.end_unix_nano.saturating_sub(g.start_unix_nano))
        .max()
        .unwrap_or(0);
    assert!(
        slowest >= 140_000_000,
        "llm spans last {slowest} ns: {spans:#?}"
    );
    assert!(spans.iter().all(|g| g.error.is_none()), "{spans:#?}");

    // Log lines inside the request carry the trace id.
    let log = std::fs::read_to_string(stack.executor_log()).expect("executor log");
    assert!(
        log.lines()
            .any(|l| l.contains("run ended") && l.contains(TRACE_ID)),
        "no log line of the run carries the trace id:\n{log}"
    );
    // The readiness probes the stack's start made (each asking the registry and the executor
    // whether they take the gateway's token) are no traces, like the probes themselves.
    let probes: Vec<Got> = received
        .spans()
        .into_iter()
        .filter(|g| g.name.contains("readyz") || g.name.ends_with("/GetSession"))
        .collect();
    assert!(probes.is_empty(), "{probes:#?}");
}

/// A run that starts an MCP server's connection (kept open for later runs) ends its spans when
/// it ends: the connection's tasks do not hold the run's span open, so the trace arrives whole
/// while the connection lives on; also when a log filter turns the connection's own span off.
#[tokio::test]
async fn a_run_that_opens_an_mcp_connection_is_exported_when_it_ends() {
    const MCP_TRACE: &str = "7bf92f3577b34da6a3ce929d0e0e4739";
    const CLOCK_SCRIPT: &str = r#"
turns:
  - tool_calls: [{name: get_current_time, id: t1, arguments: {timezone: UTC}}]
  - text: "It is {{last_message}}"
"#;
    let received = Receiver::start().await.expect("the OTLP receiver starts");
    let stack = StackOptions::full()
        .with_executor()
        .discovery_timeout_ms(30_000)
        .llm_script(CLOCK_SCRIPT)
        .env_all("OTEL_EXPORTER_OTLP_ENDPOINT", received.url())
        .env_all("OTEL_BSP_SCHEDULE_DELAY", "100")
        .executor_env("RUST_LOG", "info,taskforce_runtime::mcp_client=off")
        .spawn()
        .await
        .expect("stack starts");
    let mut body = agent_json("clocked");
    body["mcp_servers"] =
        json!([taskforce_tests::mcp::time_server_json().expect("mcp-server-time is installed")]);
    body["mcp_tool_allowlist"] = json!(["get_current_time"]);
    let r = create(&stack, &body).await;
    assert_eq!(r.status, 201, "{}", r.text);
    let text = post_traced(
        &stack,
        "/api/v1/execute/stream",
        MCP_TRACE,
        &json!({"mission": "What time is it?", "agent_id": "clocked"}),
    )
    .await
    .text()
    .await
    .expect("the stream ends");
    let events = parse_sse(&text);
    assert!(
        events
            .iter()
            .any(|(name, data)| name == "done" && data["status"] == "completed"),
        "{text}"
    );
    // The whole trace arrives while the executor (and the MCP connection) keep running.
    let spans = trace_when(&received, &stack, MCP_TRACE, |spans| {
        let has = |prefix: &str| {
            spans
                .iter()
                .any(|g| g.service == "executor-svc" && g.name.starts_with(prefix))
        };
        has("gRPC /taskforce.v1.Executor/Execute")
            && has("run clocked")
            && has("tool get_current_time")
    })
    .await;
    let run = spans
        .iter()
        .find(|g| g.name == "run clocked")
        .unwrap_or_else(|| panic!("{spans:#?}"));
    let tool = spans
        .iter()
        .find(|g| g.name == "tool get_current_time")
        .unwrap_or_else(|| panic!("{spans:#?}"));
    assert_eq!(tool.parent, run.span_id, "{spans:#?}");
}

/// The readiness probe's marker keeps only the probe's own reads out of traces: a client that
/// sends it on any other method is traced as always.
#[tokio::test]
async fn the_probe_marker_hides_only_the_probes_own_calls() {
    const MARKED: &str = "5bf92f3577b34da6a3ce929d0e0e4736";
    let received = Receiver::start().await.expect("the OTLP receiver starts");
    let stack = traced_stack(&received, "100", "marked").await;
    fn marked<T>(message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        for (key, value) in [
            ("traceparent", traceparent(MARKED)),
            ("x-taskforce-probe", "readyz".to_owned()),
        ] {
            request
                .metadata_mut()
                .insert(key, value.parse().expect("metadata value"));
        }
        request
    }
    // The probe's read first: had it a span, it would be sent no later than the second's.
    stack
        .registry()
        .get_agent(marked(taskforce_proto::v1::GetAgentRequest {
            agent_id: "marked".into(),
        }))
        .await
        .expect("GetAgent");
    stack
        .registry()
        .list_agents(marked(taskforce_proto::v1::ListAgentsRequest::default()))
        .await
        .expect("ListAgents");
    let spans = trace_when(&received, &stack, MARKED, |spans| {
        spans.iter().any(|g| g.name.ends_with("/ListAgents"))
    })
    .await;
    assert!(
        spans.iter().all(|g| !g.name.ends_with("/GetAgent")),
        "the probe's read is no trace: {spans:#?}"
    );
}

#[tokio::test]
async fn a_request_whose_client_left_ends_its_span_when_it_left() {
    const LEFT: &str = "5bf92f3577b34da6a3ce929d0e0e4737";
    let received = Receiver::start().await.expect("the OTLP receiver starts");
    let stack = traced_stack(&received, "100", "patient").await;
    // A blocking run the client gives up on after a second.
    let gave_up = stack
        .http()
        .post(stack.url("/api/v1/execute"))
        .header("traceparent", traceparent(LEFT))
        .timeout(Duration::from_secs(1))
        .json(&json!({"mission": "Take your time", "agent_id": "patient"}))
        .send()
        .await;
    assert!(gave_up.is_err(), "{gave_up:?}");
    let spans = trace_when(&received, &stack, LEFT, |spans| {
        spans
            .iter()
            .any(|g| g.service == "gateway" && g.name == "POST /api/v1/execute")
    })
    .await;
    let rest = spans
        .iter()
        .find(|g| g.service == "gateway")
        .unwrap_or_else(|| panic!("{spans:#?}"));
    let lasted = rest.end_unix_nano.saturating_sub(rest.start_unix_nano);
    assert!(
        lasted >= 900_000_000,
        "the request span ends at its last poll, not when the client left: {lasted} ns"
    );
}

#[tokio::test]
async fn an_mcp_tool_call_is_one_trace_with_the_registry_calls_it_makes() {
    let received = Receiver::start().await.expect("the OTLP receiver starts");
    let stack = traced_stack(&received, "100", "shown").await;
    let mcp_trace = "6bf92f3577b34da6a3ce929d0e0e4738";
    let r = stack
        .http()
        .post(stack.url("/mcp"))
        .header("accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2025-06-18")
        .header("traceparent", traceparent(mcp_trace))
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "show_agent", "arguments": {"agent_name": "shown"}}}))
        .send()
        .await
        .expect("answered");
    assert_eq!(r.status(), 200);
    let spans = trace_when(&received, &stack, mcp_trace, |spans| {
        spans.iter().any(|g| g.name == "POST /mcp")
            && spans.iter().any(|g| g.service == "registry-svc")
    })
    .await;
    let request = spans
        .iter()
        .find(|g| g.name == "POST /mcp")
        .unwrap_or_else(|| panic!("{spans:#?}"));
    assert_eq!(request.parent, CLIENT_SPAN, "{spans:#?}");
    for registry in spans.iter().filter(|g| g.name.starts_with("gRPC ")) {
        assert_eq!(registry.parent, request.span_id, "{registry:?}: {spans:#?}");
    }
}

#[tokio::test]
async fn failed_tool_calls_model_calls_and_runs_are_failed_spans() {
    let received = Receiver::start().await.expect("the OTLP receiver starts");
    let stack = traced_stack(&received, "100", "failing").await;
    let failed_trace = "5bf92f3577b34da6a3ce929d0e0e4737";
    let r = post_traced(
        &stack,
        "/api/v1/execute",
        failed_trace,
        &json!({"mission": "Read the lost notes", "agent_id": "failing"}),
    )
    .await;
    let result: serde_json::Value = r.json().await.expect("an ExecuteResult");
    assert_eq!(result["status"], "failed", "{result}");
    let failed: Vec<Got> = trace_when(&received, &stack, failed_trace, |spans| {
        let has = |prefix: &str| {
            spans
                .iter()
                .any(|g| g.error.is_some() && g.name.starts_with(prefix))
        };
        has("tool file_read") && has("tool unknown") && has("llm ") && has("run failing")
    })
    .await
    .into_iter()
    .filter(|g| g.error.is_some())
    .collect();
    // A tool name the model made up names no span: span names stay a small set.
    assert!(
        !failed.iter().any(|g| g.name.contains("zz_made_up")),
        "{failed:#?}"
    );
    let llm = failed.iter().find(|g| g.name.starts_with("llm "));
    assert!(
        llm.is_some_and(|g| g.error.as_deref().is_some_and(|e| e.contains("overloaded"))),
        "{failed:#?}"
    );
    // A run that failed is no failed request: the client asked well and got its answer.
    assert!(
        !failed.iter().any(|g| g.name.starts_with("POST ")),
        "{failed:#?}"
    );

    // A client's mistake is no failure, but its status is on the span: a REST 404 and a gRPC
    // NOT_FOUND (a trailers-only answer).
    let missing = "8bf92f3577b34da6a3ce929d0e0e4738";
    let parent = traceparent(missing);
    let r = stack
        .http()
        .get(stack.url("/api/v1/agents/no-such-agent"))
        .header("traceparent", &parent)
        .send()
        .await
        .expect("answered");
    assert_eq!(r.status(), 404);
    let mut request = tonic::Request::new(taskforce_proto::v1::GetAgentRequest {
        agent_id: "no-such-agent".into(),
    });
    request
        .metadata_mut()
        .insert("traceparent", parent.parse().expect("metadata value"));
    let status = stack
        .registry()
        .get_agent(request)
        .await
        .expect_err("no such agent");
    assert_eq!(status.code(), tonic::Code::NotFound);
    let spans = trace_when(&received, &stack, missing, |spans| {
        spans.iter().any(|g| g.name.starts_with("GET "))
            && spans.iter().any(|g| g.name.ends_with("/GetAgent"))
    })
    .await;
    for (prefix, key, value) in [
        (
            "GET /api/v1/agents/{agent_id}",
            "http.response.status_code",
            "404",
        ),
        (
            "gRPC /taskforce.v1.AgentRegistry/GetAgent",
            "rpc.grpc.status_code",
            "5",
        ),
    ] {
        let g = spans
            .iter()
            .find(|g| g.name == prefix)
            .unwrap_or_else(|| panic!("no {prefix}: {spans:#?}"));
        assert_eq!(
            g.attributes.get(key).map(String::as_str),
            Some(value),
            "{g:#?}"
        );
        assert!(g.error.is_none(), "{g:#?}");
    }
}

#[tokio::test]
async fn without_an_endpoint_nothing_is_exported_or_complained_about() {
    let stack = StackOptions::full()
        .with_executor()
        .spawn()
        .await
        .expect("stack starts");
    let r = post_traced(
        &stack,
        "/api/v1/execute",
        TRACE_ID,
        &json!({"mission": "hello", "agent_id": "invoice-extractor"}),
    )
    .await;
    assert_eq!(r.status(), 200);
    let logs = stack.logs();
    for word in ["OTLP", "opentelemetry", TRACE_ID] {
        assert!(!logs.contains(word), "{word} in the logs:\n{logs}");
    }
}

/// Asks the gateway for an agent its read model does not have (a span in the registry too),
/// every 100 ms within `within`, until `check` (run after each request) says something.
async fn asking_the_registry_until<T, F, Fut>(
    stack: &Stack,
    within: Duration,
    check: F,
) -> Option<T>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    taskforce_tests::eventually(within, Duration::from_millis(100), || {
        let (http, url) = (
            stack.http().clone(),
            stack.url("/api/v1/agents/not-an-agent"),
        );
        let checked = check();
        async move {
            let _ = http.get(url).send().await;
            checked.await
        }
    })
    .await
}

/// [`asking_the_registry_until`] the registry's log says its trace exports fail; the log then.
async fn until_exports_fail(stack: &Stack) -> String {
    let registry_log = stack.registry_log();
    asking_the_registry_until(stack, Duration::from_secs(30), || {
        let log = registry_log.clone();
        async move {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            text.contains("trace export failed").then_some(text)
        }
    })
    .await
    .unwrap_or_else(|| panic!("the failure is said:\n{}", stack.logs()))
}

#[tokio::test]
async fn an_endpoint_that_is_down_is_said_once_not_per_batch() {
    // Nothing listens there: bound and dropped.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port");
    let stack = StackOptions::full()
        .env_all("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{closed}"))
        .env_all("OTEL_BSP_SCHEDULE_DELAY", "50")
        .spawn()
        .await
        .expect("stack starts");
    let registry_log = stack.registry_log();
    // Several batches fail (requests make spans; each schedule exports them). An agent the
    // gateway's read model does not have is asked of the registry: a span there too.
    let said = until_exports_fail(&stack).await;
    // More requests, more spans, more failed batches: until the registry counts two (a batch
    // is made only of spans made since the last one, so the requests go on meanwhile).
    let metrics_url = format!(
        "http://{}/metrics",
        stack.registry_metrics_addr().expect("registry metrics")
    );
    let failed_again = asking_the_registry_until(&stack, Duration::from_secs(20), || {
        let (http, metrics_url) = (stack.http().clone(), metrics_url.clone());
        async move {
            let metrics = http.get(metrics_url).send().await.ok()?.text().await.ok()?;
            let failures: f64 = metrics
                .lines()
                .find_map(|l| l.strip_prefix("taskforce_trace_export_failures_total "))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0.0);
            (failures >= 2.0).then_some(())
        }
    })
    .await;
    assert!(
        failed_again.is_some(),
        "several batches failed: {}",
        send(stack.http().get(&metrics_url)).await.text
    );
    let text = std::fs::read_to_string(&registry_log).unwrap_or(said);
    assert_eq!(
        text.matches("trace export failed").count(),
        1,
        "once, not per batch:\n{text}"
    );
    assert!(!text.contains("BatchSpanProcessor.ExportError"), "{text}");
}

#[tokio::test]
async fn a_stop_does_not_wait_on_an_endpoint_that_never_answers() {
    // Connections are taken (the kernel's backlog) and never answered.
    let hung = std::net::TcpListener::bind("127.0.0.1:0").expect("a listener");
    let addr = hung.local_addr().expect("its address");
    let mut stack = StackOptions::full()
        .env_all("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{addr}"))
        .env_all("OTEL_EXPORTER_OTLP_TIMEOUT", "300")
        .env_all("OTEL_BSP_SCHEDULE_DELAY", "50")
        .spawn()
        .await
        .expect("stack starts");
    let registry_log = stack.registry_log();
    until_exports_fail(&stack).await;
    stack.stop().await.expect("the registry stops");
    let text = std::fs::read_to_string(&registry_log).unwrap_or_default();
    // The short flush of a failing endpoint, said in one line of its own.
    assert!(
        text.contains("trace exports are failing: the spans still held get 0.5 s"),
        "{text}"
    );
    assert!(
        !text.contains("BatchSpanProcessor.Shutdown.Timeout"),
        "{text}"
    );
    drop(hung);
}

#[tokio::test]
async fn a_stopping_service_exports_the_spans_it_still_holds() {
    let received = Receiver::start().await.expect("the OTLP receiver starts");
    // No export on the schedule within this test: only a stop sends the batch.
    let mut stack = traced_stack(&received, "600000", "flushed").await;
    let r = stack
        .http()
        .post(stack.url("/api/v1/execute"))
        .json(&json!({"mission": "hello", "agent_id": "flushed"}))
        .send()
        .await
        .expect("answered");
    assert_eq!(r.status(), 200);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        received.spans().is_empty(),
        "spans left before the schedule or a stop: {:#?}",
        received.spans()
    );

    stack.stop_gateway().await.expect("the gateway stops");
    stack.stop_executor().await.expect("the executor stops");
    stack.stop().await.expect("the registry stops");
    let services: std::collections::BTreeSet<String> =
        received.spans().into_iter().map(|g| g.service).collect();
    assert_eq!(
        services.into_iter().collect::<Vec<_>>(),
        ["executor-svc", "gateway", "registry-svc"],
        "{}",
        stack.logs()
    );
}
