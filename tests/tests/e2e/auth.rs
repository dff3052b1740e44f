//! API keys with scopes on every surface (issue 13): REST and `/mcp` on the gateway, gRPC on
//! the registry and the executor (the real grpcurl), the CLI's `--token`, the services calling
//! each other with their service token, and the start-up rule (no keys off loopback refuses to
//! start; `--insecure-no-auth` starts with a warning). Tokens never reach a log.

use std::{process::Stdio, time::Duration};

use serde_json::{Value, json};
use taskforce_tests::{Stack, StackOptions, paths};

use crate::helpers::{RUN_TIMEOUT, Reply, SLOW_SCRIPT, SseReader, agent_json, send};

const ADMIN: &str = "admin-token-3f9c1d2e7a8b4c5d";
const READER: &str = "reader-token-9a8b7c6d5e4f3a2b";
const RUNNER: &str = "runner-token-1a2b3c4d5e6f7a8b";
const WRITER: &str = "writer-token-5e6f7a8b9c0d1e2f";

fn keys_yaml() -> String {
    format!(
        "keys:\n\
         - {{name: services, token: {ADMIN}, scopes: [admin]}}\n\
         - {{name: dashboard, token: {READER}, scopes: [read]}}\n\
         - {{name: runner, token: {RUNNER}, scopes: [execute]}}\n\
         - {{name: editor, token: {WRITER}, scopes: [write]}}\n"
    )
}

async fn stack() -> Stack {
    StackOptions::full()
        .with_executor()
        .env_all("TASKFORCE_API_KEYS", keys_yaml())
        .env_all("TASKFORCE_SERVICE_TOKEN", ADMIN)
        .spawn()
        .await
        .expect("stack with keys starts")
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

async fn get(stack: &Stack, path: &str, token: Option<&str>) -> Reply {
    let mut req = stack.http().get(stack.url(path));
    if let Some(t) = token {
        req = req.header("authorization", bearer(t));
    }
    send(req).await
}

async fn post(stack: &Stack, path: &str, token: Option<&str>, body: &Value) -> Reply {
    let mut req = stack.http().post(stack.url(path)).json(body);
    if let Some(t) = token {
        req = req.header("authorization", bearer(t));
    }
    send(req).await
}

#[tokio::test]
async fn rest_needs_a_key_with_the_routes_scope_and_public_routes_stay_open() {
    let stack = stack().await;

    // No key, a malformed header, an unknown key: 401 with a challenge and the usual body.
    let r = get(&stack, "/api/v1/agents", None).await;
    r.assert_error(401, "unauthenticated");
    assert!(
        r.header("www-authenticate")
            .is_some_and(|h| h.starts_with("Bearer realm=\"taskforce\"")),
        "{:?}",
        r.header("www-authenticate")
    );
    let r = send(
        stack
            .http()
            .get(stack.url("/api/v1/agents"))
            .header("authorization", format!("Basic {READER}")),
    )
    .await;
    r.assert_error(401, "unauthenticated");
    let r = get(&stack, "/api/v1/agents", Some("not-a-key-of-this-stack")).await;
    r.assert_error(401, "unauthenticated");
    assert!(
        r.header("www-authenticate")
            .is_some_and(|h| h.contains("invalid_token")),
        "{:?}",
        r.header("www-authenticate")
    );
    assert_eq!(r.header("connection"), None, "no body left unread");
    // Refused before its body was read, an HTTP/1 request's connection closes: said so, so a
    // client keeping connections does not send its next request into it.
    let r = send(
        stack
            .http()
            .post(stack.url("/api/v1/agents"))
            .json(&serde_json::json!({"agent_id": "refused"})),
    )
    .await;
    r.assert_error(401, "unauthenticated");
    assert_eq!(r.header("connection").as_deref(), Some("close"));

    // Health, readiness, metrics and the OpenAPI document need nothing.
    for path in ["/healthz", "/readyz", "/openapi.json", "/metrics"] {
        let r = get(&stack, path, None).await;
        assert_eq!(r.status, 200, "{path}: {}", r.text);
    }
    // The document declares the scheme and the refusals.
    let doc = get(&stack, "/openapi.json", None).await.body;
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"]["scheme"], "bearer",
        "{doc}"
    );
    assert!(
        doc["paths"]["/api/v1/agents"]["get"]["responses"]["401"].is_object(),
        "{}",
        doc["paths"]["/api/v1/agents"]["get"]["responses"]
    );

    // read: lists and looks up; cannot create (403 naming the scope) and changes nothing.
    let r = get(&stack, "/api/v1/agents", Some(READER)).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let before = r.body["agents"].as_array().map_or(0, Vec::len);
    let r = post(
        &stack,
        "/api/v1/agents",
        Some(READER),
        &agent_json("by-reader"),
    )
    .await;
    r.assert_error(403, "permission_denied")
        .assert_names("write");
    assert!(
        r.header("www-authenticate")
            .is_some_and(|h| h.contains("insufficient_scope")),
        "{:?}",
        r.header("www-authenticate")
    );
    let r = get(&stack, "/api/v1/agents/by-reader", Some(READER)).await;
    r.assert_error(404, "not_found");

    // write: creates (the gateway reaches the registry with its service token).
    let r = post(
        &stack,
        "/api/v1/agents",
        Some(WRITER),
        &agent_json("by-editor"),
    )
    .await;
    assert_eq!(r.status, 201, "{}\n{}", r.text, stack.logs());
    // ...but cannot read or run.
    get(&stack, "/api/v1/agents/by-editor", Some(WRITER))
        .await
        .assert_error(403, "permission_denied");
    // An agent whose id reads like a route (`metadata`) is an agent: a reader cannot change it.
    let r = post(
        &stack,
        "/api/v1/agents",
        Some(WRITER),
        &agent_json("metadata"),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.text);
    for method in [reqwest::Method::PUT, reqwest::Method::DELETE] {
        let r = send(
            stack
                .http()
                .request(method.clone(), stack.url("/api/v1/agents/metadata"))
                .header("authorization", bearer(READER))
                .json(&agent_json("metadata")),
        )
        .await;
        r.assert_error(403, "permission_denied")
            .assert_names("write");
    }
    let r = get(&stack, "/api/v1/agents/metadata", Some(READER)).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let after = get(&stack, "/api/v1/agents", Some(READER)).await;
    assert_eq!(
        after.body["agents"].as_array().map_or(0, Vec::len),
        before + 2,
        "{}",
        after.text
    );

    // execute: runs to the end through gateway -> executor -> registry, all with keys.
    let mission =
        json!({"mission": "Extract the totals of invoice 42", "agent_id": "invoice-extractor"});
    post(&stack, "/api/v1/execute", Some(READER), &mission)
        .await
        .assert_error(403, "permission_denied");
    let r = post(&stack, "/api/v1/execute", Some(RUNNER), &mission).await;
    assert_eq!(r.status, 200, "{}\n{}", r.text, stack.logs());
    assert_eq!(r.body["status"], "completed", "{}", r.text);
    // The session is read with `read`, cancelled with `execute`.
    let session = r.body["session_id"].as_str().unwrap_or_default().to_owned();
    let r = get(&stack, &format!("/api/v1/sessions/{session}"), Some(READER)).await;
    assert_eq!(r.status, 200, "{}", r.text);
    post(
        &stack,
        &format!("/api/v1/sessions/{session}/cancel"),
        Some(READER),
        &json!({}),
    )
    .await
    .assert_error(403, "permission_denied");

    // /mcp: read.
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "auth-test", "version": "1"}}});
    let mcp = |token: Option<&str>| {
        let mut req = stack
            .http()
            .post(stack.url("/mcp"))
            .header("accept", "application/json, text/event-stream")
            .json(&init);
        if let Some(t) = token {
            req = req.header("authorization", bearer(t));
        }
        send(req)
    };
    mcp(None).await.assert_error(401, "unauthenticated");
    mcp(Some(RUNNER))
        .await
        .assert_error(403, "permission_denied");
    let r = mcp(Some(READER)).await;
    assert_eq!(r.status, 200, "{}", r.text);
    // A browser's CORS preflight carries no token: it is answered, and runs nothing.
    let preflight = crate::helpers::mcp_preflight(&stack, "authorization, content-type").await;
    assert_eq!(preflight.status, 200, "{}", preflight.text);
    assert_eq!(
        preflight.header("access-control-allow-origin").as_deref(),
        Some("http://localhost:5173")
    );

    // No token reached a log.
    for log in [
        stack.registry_log(),
        stack.executor_log(),
        stack.gateway_log(),
    ] {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        for token in [ADMIN, READER, RUNNER, WRITER] {
            assert!(!text.contains(token), "{} has a token", log.display());
        }
    }
}

/// Runs grpcurl against `addr` with an optional bearer token.
async fn grpcurl(
    addr: &str,
    token: Option<&str>,
    data: &Value,
    method: &str,
) -> crate::grpcurl::Run {
    let mut args = vec!["-plaintext".to_owned(), "-max-time".into(), "30".into()];
    if let Some(t) = token {
        args.extend(["-H".to_owned(), format!("authorization: Bearer {t}")]);
    }
    args.extend([
        "-d".to_owned(),
        data.to_string(),
        addr.to_owned(),
        method.to_owned(),
    ]);
    crate::grpcurl::run(args).await
}

#[tokio::test]
async fn grpc_needs_a_key_with_the_methods_scope_and_health_stays_open() {
    let stack = stack().await;
    let registry = stack.registry_addr().to_string();
    let executor = stack
        .executor_addr()
        .expect("the stack has an executor")
        .to_string();
    let list = "taskforce.v1.AgentRegistry/ListAgents";

    let r = grpcurl(&registry, None, &json!({}), list).await;
    assert!(
        !r.ok && r.stderr.contains("Unauthenticated"),
        "{}",
        r.stderr
    );
    let r = grpcurl(&registry, Some("not-a-key-of-this-stack"), &json!({}), list).await;
    assert!(
        !r.ok && r.stderr.contains("Unauthenticated"),
        "{}",
        r.stderr
    );
    let r = grpcurl(&registry, Some(READER), &json!({}), list).await;
    assert!(r.ok, "{}", r.stderr);
    assert!(r.stdout.contains("invoice-extractor"), "{}", r.stdout);

    // Deleting needs write: a reader gets PERMISSION_DENIED and the agent stays.
    let delete = "taskforce.v1.AgentRegistry/DeleteAgent";
    let r = grpcurl(
        &registry,
        Some(READER),
        &json!({"agent_id": "invoice-extractor"}),
        delete,
    )
    .await;
    assert!(
        !r.ok && r.stderr.contains("PermissionDenied"),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("`write`"), "{}", r.stderr);
    let r = grpcurl(
        &registry,
        Some(READER),
        &json!({"agent_id": "invoice-extractor"}),
        "taskforce.v1.AgentRegistry/GetAgent",
    )
    .await;
    assert!(r.ok, "{}", r.stderr);

    // The executor: sessions are read with `read`, runs need `execute`.
    let r = grpcurl(
        &executor,
        None,
        &json!({"session_id": "nope"}),
        "taskforce.v1.Executor/GetSession",
    )
    .await;
    assert!(
        !r.ok && r.stderr.contains("Unauthenticated"),
        "{}",
        r.stderr
    );
    let r = grpcurl(
        &executor,
        Some(READER),
        &json!({"mission": "Extract the totals of invoice 42", "agent_id": "invoice-extractor"}),
        "taskforce.v1.Executor/Execute",
    )
    .await;
    assert!(
        !r.ok && r.stderr.contains("PermissionDenied"),
        "{}",
        r.stderr
    );
    let r = grpcurl(
        &executor,
        Some(RUNNER),
        &json!({"mission": "Extract the totals of invoice 42", "agent_id": "invoice-extractor"}),
        "taskforce.v1.Executor/Execute",
    )
    .await;
    assert!(r.ok, "{}\n{}", r.stderr, stack.logs());
    assert!(
        r.stdout.contains("COMPLETED") || r.stdout.contains("completed"),
        "{}",
        r.stdout
    );

    // Health needs no key (probes, as Kubernetes' gRPC probes call it); reflection needs one.
    for addr in [&registry, &executor] {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .expect("a URL")
            .connect()
            .await
            .expect("connects");
        let answer = tonic_health::pb::health_client::HealthClient::new(channel)
            .check(tonic_health::pb::HealthCheckRequest::default())
            .await
            .expect("health answers without a key")
            .into_inner();
        assert_eq!(
            answer.status,
            tonic_health::pb::health_check_response::ServingStatus::Serving as i32
        );
    }
    // A made-up method without a key is refused before anything else looks at it: its path
    // names no series of the request metrics (anyone could grow them without bound).
    let protos = tempfile::tempdir().expect("a temporary directory");
    std::fs::write(
        protos.path().join("evil.proto"),
        "syntax = \"proto3\";\npackage evil;\nmessage M {}\nservice Svc { rpc Method1 (M) returns (M); }\n",
    )
    .expect("evil.proto");
    // The second call carries the services' probe marker: it hides nothing but a probe's
    // NOT_FOUND.
    for marker in [None, Some("x-taskforce-probe: 1")] {
        let mut args = vec![
            "-plaintext".to_owned(),
            "-import-path".into(),
            protos.path().display().to_string(),
            "-proto".into(),
            "evil.proto".into(),
        ];
        if let Some(header) = marker {
            args.extend(["-H".to_owned(), header.to_owned()]);
        }
        args.extend([registry.clone(), "evil.Svc/Method1".into()]);
        let r = crate::grpcurl::run(args).await;
        assert!(
            !r.ok && r.stderr.contains("Unauthenticated"),
            "{}",
            r.stderr
        );
    }
    let metrics_url = format!(
        "http://{}/metrics",
        stack
            .registry_metrics_addr()
            .expect("the registry's metrics")
    );
    let metrics = send(stack.http().get(metrics_url)).await.text;
    assert!(!metrics.contains("evil"), "{metrics}");
    assert!(
        metrics.contains(r#"taskforce_grpc_server_requests_total{method="unknown",code="16"} 2"#),
        "{metrics}"
    );

    let r = crate::grpcurl::run(vec!["-plaintext".into(), registry.clone(), "list".into()]).await;
    assert!(!r.ok, "{}", r.stdout);
    let r = crate::grpcurl::run(vec![
        "-plaintext".into(),
        "-H".into(),
        format!("authorization: Bearer {READER}"),
        registry.clone(),
        "list".into(),
    ])
    .await;
    assert!(
        r.ok && r.stdout.contains("taskforce.v1.AgentRegistry"),
        "{}",
        r.stderr
    );
}

#[tokio::test]
async fn the_cli_sends_its_token() {
    let stack = stack().await;
    let env = |token: Option<&str>| {
        let mut env = vec![
            ("TASKFORCE_GATEWAY_URL", stack.gateway_url()),
            (
                "TASKFORCE_REGISTRY_URL",
                format!("http://{}", stack.registry_addr()),
            ),
        ];
        if let Some(t) = token {
            env.push(("TASKFORCE_TOKEN", t.to_owned()));
        }
        env
    };
    let out = crate::cli::run_cli(&env(None), &["agents", "list"]).await;
    assert_eq!(out.code, Some(1), "{}\n{}", out.stdout, out.stderr);
    assert!(
        out.stderr.contains("authentication required"),
        "{}",
        out.stderr
    );
    let out = crate::cli::run_cli(&env(Some(READER)), &["agents", "list"]).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stdout.contains("invoice-extractor"), "{}", out.stdout);
    let out = crate::cli::run_cli(&env(Some(READER)), &["--grpc", "agents", "list"]).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stdout.contains("invoice-extractor"), "{}", out.stdout);
    let out = crate::cli::run_cli(
        &env(Some(READER)),
        &["agents", "delete", "invoice-extractor"],
    )
    .await;
    assert_eq!(out.code, Some(1), "{}\n{}", out.stdout, out.stderr);
    assert!(out.stderr.contains("`write`"), "{}", out.stderr);
}

/// Starts `binary` with `args` and no keys in its environment; returns its exit status (or
/// `None` if it is still running after `wait`) and its stderr.
pub(crate) async fn start(
    binary: &str,
    args: &[&str],
    wait: Duration,
) -> (Option<i32>, String, tempfile::TempDir) {
    start_with(binary, args, &[("TASKFORCE_LOG_FORMAT", "text")], wait).await
}

/// [`start`] with `envs` set (text logs are not the default then: stderr is a file).
pub(crate) async fn start_with(
    binary: &str,
    args: &[&str],
    envs: &[(&str, &str)],
    wait: Duration,
) -> (Option<i32>, String, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::create_dir_all(dir.path().join("configs").join("custom")).expect("config dir");
    let log = dir.path().join("stderr.log");
    let file = std::fs::File::create(&log).expect("log file");
    let mut cmd = tokio::process::Command::new(paths::binary(binary).expect("built"));
    cmd.args(args)
        .current_dir(dir.path())
        .env_remove("TASKFORCE_API_KEYS")
        .env_remove("TASKFORCE_API_KEYS_FILE")
        .env_remove("TASKFORCE_INSECURE_NO_AUTH")
        .env_remove("RUST_LOG")
        .envs(envs.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(file)
        .kill_on_drop(true);
    let mut child = cmd.spawn().expect("starts");
    let code = match tokio::time::timeout(wait, child.wait()).await {
        Ok(status) => status.ok().and_then(|s| s.code()),
        Err(_) => {
            let _ = child.kill().await;
            None
        }
    };
    (code, std::fs::read_to_string(&log).unwrap_or_default(), dir)
}

#[tokio::test]
async fn without_keys_a_non_loopback_listener_refuses_to_start_unless_told_it_is_insecure() {
    for (binary, flag) in [
        ("registry-svc", "--listen"),
        ("executor-svc", "--listen"),
        ("gateway", "--listen"),
    ] {
        let args = [
            flag,
            "0.0.0.0:0",
            "--metrics-listen",
            "",
            "--registry-url",
            "http://127.0.0.1:9",
        ];
        let args: Vec<&str> = if binary == "registry-svc" {
            args[..4].to_vec()
        } else if binary == "gateway" {
            vec![flag, "0.0.0.0:0", "--registry-url", "http://127.0.0.1:9"]
        } else {
            args.to_vec()
        };
        let (code, stderr, _dir) = start(binary, &args, Duration::from_secs(30)).await;
        assert!(
            code.is_some_and(|c| c != 0),
            "{binary} exit {code:?}: {stderr}"
        );
        assert!(
            stderr.contains("refusing to listen on 0.0.0.0")
                && stderr.contains("--insecure-no-auth"),
            "{binary}: {stderr}"
        );

        let mut insecure = args.clone();
        insecure.push("--insecure-no-auth");
        let (code, stderr, _dir) = start(binary, &insecure, Duration::from_secs(3)).await;
        assert_eq!(code, None, "{binary} should keep running: {stderr}");
        assert!(
            stderr.contains("authentication is OFF"),
            "{binary}: {stderr}"
        );
    }
}

#[tokio::test]
async fn each_key_has_its_own_cap_on_open_runs() {
    const OTHER: &str = "runner2-token-8b7a6c5d4e3f2a1b";
    let keys = format!(
        "{}- {{name: runner2, token: {OTHER}, scopes: [execute]}}\n",
        keys_yaml()
    );
    let stack = StackOptions::full()
        .with_executor()
        .env_all("TASKFORCE_API_KEYS", keys)
        .env_all("TASKFORCE_SERVICE_TOKEN", ADMIN)
        .gateway_args(["--max-runs-per-key", "1"])
        .llm_script(SLOW_SCRIPT)
        .spawn()
        .await
        .expect("stack starts");
    let body = |mission: &str| json!({"mission": mission, "agent_id": "invoice-extractor"});
    // The runner's only slot is taken by a slow stream...
    let path = "/api/v1/execute/stream";
    let request = stack
        .http()
        .post(stack.url(path))
        .header("authorization", bearer(RUNNER))
        .json(&body("Answer slowly"));
    let mut first = SseReader::open_request(&stack, path, request).await;
    first.until("run_started", RUN_TIMEOUT).await;
    // ... so its next run gets 429 naming the key, with retry-after, and starts nothing...
    let r = post(&stack, "/api/v1/execute", Some(RUNNER), &body("hi")).await;
    r.assert_error(429, "resource_exhausted")
        .assert_names("\"runner\"");
    assert_eq!(r.header("retry-after").as_deref(), Some("1"), "{}", r.text);
    // ... while another key runs.
    let r = post(&stack, "/api/v1/execute", Some(OTHER), &body("hi")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    // When the stream has ended, the slot is free again.
    let events = first.rest(RUN_TIMEOUT).await;
    assert!(events.iter().any(|(n, _)| n == "done"), "{events:?}");
    let mut status = 0;
    for _ in 0..50 {
        let r = post(&stack, "/api/v1/execute", Some(RUNNER), &body("hi")).await;
        status = r.status.as_u16();
        if status == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(status, 200, "the slot came back");
}

/// Without keys on loopback (the stack `scripts/run.sh` starts), every route answers only
/// loopback `Host` names: a page whose name was made to resolve to 127.0.0.1 (DNS rebinding)
/// can neither create an agent (whose MCP servers the registry would start) nor run one.
#[tokio::test]
async fn without_keys_a_foreign_host_is_refused_on_every_route() {
    let port_of = |stack: &Stack| {
        reqwest::Url::parse(&stack.url("/"))
            .ok()
            .and_then(|u| u.port())
            .expect("a port")
    };
    let stack = StackOptions::full()
        .spawn()
        .await
        .expect("stack without keys starts");
    let port = port_of(&stack);
    for host in [
        format!("rebound.example:{port}"),
        "rebound.example".to_owned(),
    ] {
        let r = send(
            stack
                .http()
                .post(stack.url("/api/v1/agents"))
                .header("host", &host)
                .json(&agent_json("rebound")),
        )
        .await;
        r.assert_error(403, "permission_denied");
        assert!(r.text.contains("DNS rebinding"), "{}", r.text);
    }
    let r = get(&stack, "/api/v1/agents/rebound", None).await;
    r.assert_error(404, "not_found");
    for host in [format!("localhost:{port}"), format!("127.0.0.1:{port}")] {
        let r = send(
            stack
                .http()
                .get(stack.url("/api/v1/agents"))
                .header("host", &host),
        )
        .await;
        assert_eq!(r.status, 200, "{host}: {}", r.text);
    }

    // A list given with `--mcp-allowed-hosts` replaces the loopback names, on every route
    // and `/mcp` alike, but the address the gateway listens on still passes.
    let listed = StackOptions::full()
        .gateway_args(["--mcp-allowed-hosts", "gateway.internal"])
        .spawn()
        .await
        .expect("stack with a host list starts");
    let port = port_of(&listed);
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "host-test", "version": "1"}}});
    for (host, passes) in [
        (format!("127.0.0.1:{port}"), true),
        (format!("gateway.internal:{port}"), true),
        (format!("localhost:{port}"), false),
    ] {
        let rest = send(
            listed
                .http()
                .get(listed.url("/api/v1/agents"))
                .header("host", &host),
        )
        .await;
        let mcp = send(
            listed
                .http()
                .post(listed.url("/mcp"))
                .header("host", &host)
                .header("accept", "application/json, text/event-stream")
                .json(&init),
        )
        .await;
        for (route, r) in [("REST", &rest), ("/mcp", &mcp)] {
            if passes {
                assert_eq!(r.status, 200, "{route} {host}: {}", r.text);
            } else {
                assert_eq!(r.status, 403, "{route} {host}: {}", r.text);
            }
        }
    }
}

/// An executor whose service token the registry refuses says what to fix (500 naming
/// `TASKFORCE_SERVICE_TOKEN`), not "unavailable, try again later": waiting fixes nothing.
#[tokio::test]
async fn an_executor_whose_token_the_registry_refuses_says_so() {
    let stack = StackOptions::full()
        .with_executor()
        .env_all("TASKFORCE_API_KEYS", keys_yaml())
        .env_all("TASKFORCE_SERVICE_TOKEN", ADMIN)
        // The editor's key cannot read agents.
        .executor_env("TASKFORCE_SERVICE_TOKEN", WRITER)
        .spawn()
        .await
        .expect("stack with keys starts");
    let mission =
        json!({"mission": "Extract the totals of invoice 42", "agent_id": "invoice-extractor"});
    let r = post(&stack, "/api/v1/execute", Some(RUNNER), &mission).await;
    r.assert_error(500, "internal");
    // The executor says it to its callers (the gateway logs it, a gRPC client reads it).
    let mut request = tonic::Request::new(taskforce_proto::v1::ExecuteRequest {
        mission: "Extract the totals".to_owned(),
        agent_id: Some("invoice-extractor".to_owned()),
        ..Default::default()
    });
    request.metadata_mut().insert(
        "authorization",
        bearer(RUNNER).parse().expect("a metadata value"),
    );
    let refused = stack
        .executor()
        .execute(request)
        .await
        .expect_err("the run cannot start");
    assert_eq!(refused.code(), tonic::Code::Internal, "{refused:?}");
    assert!(
        refused.message().contains("TASKFORCE_SERVICE_TOKEN"),
        "{refused:?}"
    );
    assert!(!refused.message().contains(WRITER), "{refused:?}");
    // And its log says it once, from the start (its watch of the registry was refused), not
    // at every retry.
    let said = "runs will fail until TASKFORCE_SERVICE_TOKEN";
    let log = || std::fs::read_to_string(stack.executor_log()).unwrap_or_default();
    let seen = taskforce_tests::eventually(
        std::time::Duration::from_secs(10),
        std::time::Duration::from_millis(100),
        || async { log().contains(said).then_some(()) },
    )
    .await;
    assert!(seen.is_some(), "{}", log());
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    let log = log();
    assert_eq!(log.matches(said).count(), 1, "{log}");
    assert!(!log.contains(WRITER));
}

/// A gateway whose service token is a read-only key serves reads and says at start that
/// creates and runs will fail (a dashboard's gateway may mean it, so it still starts).
#[tokio::test]
async fn a_gateway_with_a_read_only_service_token_warns_at_start() {
    let mut options = StackOptions::full()
        .env_all("TASKFORCE_API_KEYS", keys_yaml())
        .env_all("TASKFORCE_SERVICE_TOKEN", ADMIN);
    options
        .gateway_env
        .push(("TASKFORCE_SERVICE_TOKEN".to_owned(), READER.to_owned()));
    let stack = options.spawn().await.expect("stack starts");
    let r = get(&stack, "/api/v1/agents", Some(READER)).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let logs = stack.logs();
    assert!(
        logs.contains("without every scope") && logs.contains("write, execute"),
        "{logs}"
    );
    assert!(!logs.contains(READER), "the token itself is never logged");
}

#[tokio::test]
async fn listing_every_session_needs_admin() {
    let stack = stack().await;
    // A session to list.
    let r = post(
        &stack,
        "/api/v1/execute",
        Some(RUNNER),
        &json!({"mission": "Extract the totals of invoice 42", "agent_id": "invoice-extractor"}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let id = r.body["session_id"]
        .as_str()
        .expect("a session id")
        .to_owned();

    // A session's id lets a caller continue it: `read` looks one up, only `admin` lists them.
    for token in [READER, RUNNER, WRITER] {
        get(&stack, "/api/v1/sessions", Some(token))
            .await
            .assert_error(403, "permission_denied")
            .assert_names("admin");
    }
    let r = get(&stack, &format!("/api/v1/sessions/{id}"), Some(READER)).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let r = get(&stack, "/api/v1/sessions", Some(ADMIN)).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["sessions"][0]["session_id"], json!(id), "{}", r.text);

    // The same on the executor's gRPC API (the real grpcurl).
    let executor = stack
        .executor_addr()
        .expect("the stack has an executor")
        .to_string();
    let method = "taskforce.v1.Executor/ListSessions";
    let r = grpcurl(&executor, Some(READER), &json!({}), method).await;
    assert!(
        !r.ok && r.stderr.contains("PermissionDenied") && r.stderr.contains("`admin`"),
        "{}",
        r.stderr
    );
    let r = grpcurl(
        &executor,
        Some(ADMIN),
        &json!({"status": "RUN_STATUS_COMPLETED"}),
        method,
    )
    .await;
    assert!(r.ok, "{}", r.stderr);
    assert!(r.stdout.contains(&id), "{}", r.stdout);

    // Deleting one needs `execute`.
    let delete = |token: &'static str| {
        send(
            stack
                .http()
                .delete(stack.url(&format!("/api/v1/sessions/{id}")))
                .header("authorization", bearer(token)),
        )
    };
    delete(READER)
        .await
        .assert_error(403, "permission_denied")
        .assert_names("execute");
    let r = get(&stack, &format!("/api/v1/sessions/{id}"), Some(READER)).await;
    assert_eq!(r.status, 200, "still there: {}", r.text);
    assert_eq!(delete(RUNNER).await.status, 204);
}
