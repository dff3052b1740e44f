//! `mcp_tool_allowlist` is checked against what the agent's own MCP servers really expose,
//! over stdio and streamable HTTP, with discovery cut off by the timeout.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use taskforce_proto::{error::ErrorKind, v1};
use taskforce_tests::{StackOptions, eventually, mcp, mcp::McpHttpServer, process::ReapOnDrop};
use tonic::Code;

use crate::helpers::{agent_json, api_error, create, custom_files, read_yaml, send, spec};

/// `sleep` seconds of the hanging server: an unusual number, to find its processes.
const HANG_SECS: u32 = 3523;

/// Generous: the Python and Node servers start slowly on a busy machine.
const SLOW_SERVER_TIMEOUT_MS: u64 = 30_000;

fn with_mcp(id: &str, server: &Value, allow: &[&str]) -> Value {
    let mut body = agent_json(id);
    body["mcp_servers"] = json!([server]);
    body["mcp_tool_allowlist"] = json!(allow);
    body
}

#[tokio::test]
async fn stdio_mcp_allowlist_is_checked_against_mcp_server_time() {
    let stack = StackOptions::full()
        .discovery_timeout_ms(SLOW_SERVER_TIMEOUT_MS)
        .spawn()
        .await
        .expect("stack starts");
    let server = mcp::time_server_json().expect("mcp-server-time is installed");

    let r = create(
        &stack,
        &with_mcp("time-teller", &server, &["get_current_time"]),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.body["mcp_tool_allowlist"], json!(["get_current_time"]));
    assert_eq!(r.body["mcp_servers"], json!([server]));
    let yaml = read_yaml(&stack.custom_dir().join("time-teller.yaml"));
    assert_eq!(
        yaml["mcp_tools"]["allowlist"][0].as_str(),
        Some("get_current_time")
    );
    assert_eq!(yaml["mcp_servers"][0]["type"].as_str(), Some("stdio"));
    assert!(r.body.get("warnings").is_none(), "{}", r.text);

    // Servers without an allowlist: saved, and told that the agent gets none of their tools.
    let bare = create(&stack, &with_mcp("time-bare", &server, &[])).await;
    assert_eq!(bare.status, 201, "{}", bare.text);
    assert_eq!(
        bare.body["warnings"],
        json!([
            "mcp_tool_allowlist is empty, so the agent is offered none of its MCP servers' \
                tools (2 discovered); list the ones it may use"
        ]),
        "{}",
        bare.text
    );

    let before = custom_files(&stack);
    for allow in [&["no_such_tool"][..], &["get_current_time", "no_such_tool"]] {
        let r = create(&stack, &with_mcp("time-liar", &server, allow)).await;
        r.assert_error(400, "invalid_mcp_tools");
        assert_eq!(
            r.body["invalid_tools"],
            json!(["no_such_tool"]),
            "{}",
            r.text
        );
        let available = r.body["available_tools"].to_string();
        assert!(
            available.contains("get_current_time") && available.contains("convert_time"),
            "{}",
            r.text
        );
    }
    assert_eq!(
        custom_files(&stack),
        before,
        "refused agents are not written"
    );

    let r = send(
        stack
            .http()
            .put(stack.url("/api/v1/agents/time-teller"))
            .json(&with_mcp("time-teller", &server, &["convert_time"])),
    )
    .await;
    assert_eq!(r.status, 200, "update re-validates and accepts: {}", r.text);
    let r = send(
        stack
            .http()
            .put(stack.url("/api/v1/agents/time-teller"))
            .json(&with_mcp("time-teller", &server, &["Convert_Time"])),
    )
    .await;
    r.assert_error(400, "invalid_mcp_tools");

    let r = send(
        stack
            .http()
            .post(stack.url("/api/v1/agents:validate"))
            .json(&with_mcp("time-check", &server, &[])),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let discovered = r.body["discovered_mcp_tools"].to_string();
    assert!(
        discovered.contains("get_current_time") && discovered.contains("convert_time"),
        "{}",
        r.text
    );

    let mut grpc_spec = spec("time-grpc");
    grpc_spec.mcp_servers = vec![v1::McpServer {
        r#type: "stdio".into(),
        command: server["command"].as_str().expect("command").into(),
        ..Default::default()
    }];
    grpc_spec.mcp_tool_allowlist = vec!["no_such_tool".into()];
    let e = stack
        .registry()
        .create_agent(v1::CreateAgentRequest {
            spec: Some(grpc_spec),
        })
        .await
        .expect_err("unknown MCP tool");
    assert_eq!(e.code(), Code::InvalidArgument);
    assert_eq!(api_error(&e).kind, ErrorKind::InvalidMcpTools);
}

#[tokio::test]
async fn streamable_http_mcp_allowlist_is_checked_against_server_everything() {
    let stack = StackOptions::full()
        .discovery_timeout_ms(SLOW_SERVER_TIMEOUT_MS)
        .spawn()
        .await
        .expect("stack starts");
    let everything = McpHttpServer::everything(&stack.root().join("server-everything.log"))
        .await
        .expect("server-everything starts");
    let server = json!({"type": "http", "url": everything.url()});

    let r = create(&stack, &with_mcp("echoer", &server, &["echo"])).await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.body["mcp_servers"], json!([server]));

    let r = create(
        &stack,
        &with_mcp("echo-liar", &server, &["echo", "no_such_tool"]),
    )
    .await;
    r.assert_error(400, "invalid_mcp_tools");
    assert_eq!(
        r.body["invalid_tools"],
        json!(["no_such_tool"]),
        "{}",
        r.text
    );
    assert!(
        r.body["available_tools"].to_string().contains("\"echo\""),
        "{}",
        r.text
    );
    assert!(!stack.custom_dir().join("echo-liar.yaml").exists());

    // `sse` servers are tried over streamable HTTP first.
    let sse = json!({"type": "sse", "url": everything.url()});
    let r = create(&stack, &with_mcp("echo-sse", &sse, &["echo"])).await;
    assert_eq!(r.status, 201, "{}", r.text);
}

#[tokio::test]
async fn a_hanging_mcp_server_is_cut_off_and_only_an_empty_allowlist_is_accepted() {
    let stack = StackOptions::full()
        .discovery_timeout_ms(500)
        .spawn()
        .await
        .expect("stack starts");
    let hanging = mcp::hanging_server_json(HANG_SECS);
    let servers = ReapOnDrop::new(&["sleep", &HANG_SECS.to_string()]);
    let before = custom_files(&stack);

    let started = Instant::now();
    let r = create(
        &stack,
        &with_mcp("stuck-agent", &hanging, &["get_current_time"]),
    )
    .await;
    let took = started.elapsed();
    r.assert_error(400, "invalid_mcp_tools");
    assert!(
        took < Duration::from_secs(5),
        "refusal took {took:?}; the timeout is 500 ms"
    );
    assert_eq!(custom_files(&stack), before);

    let mut grpc_spec = spec("stuck-grpc");
    grpc_spec.mcp_servers = vec![v1::McpServer {
        r#type: "stdio".into(),
        command: "sleep".into(),
        args: vec![HANG_SECS.to_string()],
        ..Default::default()
    }];
    grpc_spec.mcp_tool_allowlist = vec!["anything".into()];
    let started = Instant::now();
    let e = stack
        .registry()
        .create_agent(v1::CreateAgentRequest {
            spec: Some(grpc_spec),
        })
        .await
        .expect_err("non-empty allowlist without discovery");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "gRPC refusal took {:?}",
        started.elapsed()
    );
    assert_eq!(e.code(), Code::InvalidArgument);
    assert_eq!(api_error(&e).kind, ErrorKind::InvalidMcpTools);

    let started = Instant::now();
    let r = create(&stack, &with_mcp("stuck-agent", &hanging, &[])).await;
    assert_eq!(
        r.status, 201,
        "an empty allowlist is accepted when discovery fails: {}",
        r.text
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "accept took {:?}",
        started.elapsed()
    );
    assert_eq!(r.body["mcp_servers"], json!([hanging]));

    let r = send(
        stack
            .http()
            .post(stack.url("/api/v1/agents:validate"))
            .json(&with_mcp("stuck-check", &hanging, &[])),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(
        r.body["warnings"].as_array().is_some_and(|w| !w.is_empty()),
        "a failed discovery is reported as a warning: {}",
        r.text
    );

    // Cut off means stopped: no hanging server outlives its discovery.
    let left = eventually(Duration::from_secs(5), Duration::from_millis(50), || {
        let none = servers.running().is_empty();
        async move { none.then_some(()) }
    })
    .await;
    let pids = servers.running();
    assert!(
        left.is_some(),
        "hanging MCP servers still run after their discovery: {pids:?}"
    );
}

#[tokio::test]
async fn a_secret_a_server_echoes_in_its_tool_list_is_masked_or_its_tool_left_out() {
    const SECRET: &str = "tf-e2e-echoed-s3cr3t";
    let stack = StackOptions::full()
        .discovery_timeout_ms(SLOW_SERVER_TIMEOUT_MS)
        .registry_env("TF_E2E_ECHOED_SECRET", SECRET)
        .spawn()
        .await
        .expect("stack starts");
    let dir = tempfile::TempDir::new().expect("tmp");
    let python = taskforce_tests::paths::python().expect("the test venv exists");
    let fixture = taskforce_tests::paths::workspace_root().join("tests/fixtures/ops_mcp.py");
    let server = json!({
        "type": "stdio",
        "command": python.to_str().expect("utf-8 path"),
        "args": [fixture.to_str().expect("utf-8 path")],
        "env": {
            "OPS_LOG": dir.path().join("ops.log").to_str().expect("utf-8 path"),
            "OPS_ECHO": "${TF_E2E_ECHOED_SECRET}",
        },
    });
    let body = with_mcp("echoer", &server, &["ops_run"]);
    let r = send(
        stack
            .http()
            .post(stack.url("/api/v1/agents:validate"))
            .json(&body),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["valid"], true, "{}", r.text);
    assert!(!r.text.contains(SECRET), "the secret came back: {}", r.text);
    assert_eq!(
        r.body["discovered_mcp_tools"],
        json!(["ops_run"]),
        "{}",
        r.text
    );
    // A tool named after it cannot be allowlisted: the registry never saw it.
    let named = with_mcp("echoer", &server, &[&format!("ops_{SECRET}")]);
    create(&stack, &named)
        .await
        .assert_error(400, "invalid_mcp_tools");
    assert!(
        stack.logs().contains("they are left out") && !stack.logs().contains(SECRET),
        "{}",
        stack.logs()
    );
}

#[tokio::test]
async fn an_mcp_server_that_cannot_start_is_a_failed_discovery() {
    let stack = StackOptions::full()
        .discovery_timeout_ms(5_000)
        .spawn()
        .await
        .expect("stack starts");
    let missing = json!({"type": "stdio", "command": "/nonexistent/taskforce-mcp-server"});
    create(&stack, &with_mcp("no-server", &missing, &["x_tool"]))
        .await
        .assert_error(400, "invalid_mcp_tools");
    let r = create(&stack, &with_mcp("no-server", &missing, &[])).await;
    assert_eq!(r.status, 201, "{}", r.text);
}

#[tokio::test]
async fn malformed_mcp_server_entries_are_400() {
    let stack = StackOptions::full()
        .discovery_timeout_ms(500)
        .spawn()
        .await
        .expect("stack starts");
    let before = custom_files(&stack);
    for (what, server) in [
        (
            "unknown type",
            json!({"type": "websocket", "url": "ws://127.0.0.1:1"}),
        ),
        ("stdio without command", json!({"type": "stdio"})),
        ("http without url", json!({"type": "http"})),
        (
            "http with a non-http url",
            json!({"type": "http", "url": "ftp://127.0.0.1/mcp"}),
        ),
        (
            "stdio with a url",
            json!({"type": "stdio", "command": "true", "url": "http://127.0.0.1:1/mcp"}),
        ),
        // Entries no process or request can be made of.
        (
            "a NUL in an argument",
            json!({"type": "stdio", "command": "python3", "args": ["a\u{0}b"]}),
        ),
        (
            "an env name with `=`",
            json!({"type": "stdio", "command": "python3", "env": {"A=B": "v"}}),
        ),
        (
            "a header name with a line break",
            json!({"type": "http", "url": "http://127.0.0.1:1/mcp", "headers": {"bad header\n": "v"}}),
        ),
        (
            "a url with no host",
            json!({"type": "http", "url": "http:// /mcp"}),
        ),
    ] {
        let r = create(&stack, &with_mcp("bad-mcp", &server, &[])).await;
        assert_eq!(r.status, 400, "{what}: {}", r.text);
        r.assert_error(400, "invalid_mcp_config")
            .assert_names("mcp_servers");
    }
    let mut body = agent_json("bad-mcp");
    body["mcp_tool_allowlist"] = json!(["echo"]);
    create(&stack, &body)
        .await
        .assert_error(400, "invalid_argument")
        .assert_names("mcp_tool_allowlist");
    assert_eq!(custom_files(&stack), before);
}
