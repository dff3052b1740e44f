//! The MCP server's transports: streamable HTTP's security rules (Origin, Host, protocol
//! version, unknown methods) with raw requests; the 2025 initialize handshake and the stdio mode
//! (`gateway --mcp-stdio`) through the Python MCP SDK; stdout carrying nothing but JSON-RPC;
//! malformed messages answered alike on both transports.

use std::process::Stdio;

use serde_json::{Value, json};
use taskforce_tests::{Stack, paths, spawn_stack};
use tokio::{
    io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, Lines},
    process::{Child, ChildStdin, ChildStdout, Command},
    task::JoinHandle,
};

use crate::{
    helpers::{Reply, send},
    mcp_server::{CLIENT_TIMEOUT, list, mcp_client, results, show, structured},
    metadata::metadata_stack,
};

#[tokio::test]
async fn the_initialize_handshake_and_the_stdio_mode_serve_the_same_tools() {
    let stack = metadata_stack().spawn().await.expect("stack starts");
    let calls = json!([show("invoice-extractor"), list(json!({}))]);
    // The 2025 handshake (initialize) over HTTP; the stdio run below, like every run in
    // `mcp_server`, probes 2026-07-28 `server/discover` first.
    let legacy = mcp_client(
        &["--url".into(), stack.url("/mcp")],
        &calls,
        &["--mode", "legacy"],
    )
    .await;
    // A handshake-era version (the newest the SDK and rmcp share, 2025-11-25 today).
    let negotiated = legacy["protocol_version"].as_str().unwrap_or_default();
    assert!(negotiated.starts_with("2025-"), "{legacy}");
    let gateway = paths::binary("gateway").expect("gateway is built");
    let target = [
        "--stdio".to_owned(),
        gateway.display().to_string(),
        "--mcp-stdio".into(),
        "--registry-url".into(),
        format!("http://{}", stack.registry_addr()),
    ];
    let stdio = mcp_client(&target, &calls, &[]).await;
    assert_eq!(stdio["server_name"], "taskforce-gateway");
    let names: Vec<&str> = stdio["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(names, ["list_agents", "show_agent"]);
    for t in stdio["tools"].as_array().into_iter().flatten() {
        assert!(
            t["output_schema"].is_object(),
            "declared output schema: {t}"
        );
    }
    let (a, b) = (results(legacy), results(stdio));
    assert_eq!(structured(&a[0]), structured(&b[0]));
    assert_eq!(structured(&a[1]), structured(&b[1]));
    assert_eq!(structured(&b[0])["agent"]["name"], "invoice-extractor");
}

/// A gateway in stdio mode (`RUST_LOG=debug`) over a stack's registry, driven line by line.
struct StdioGateway {
    child: Child,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
    /// stderr, drained all along so debug logs can never fill the pipe and stall the gateway.
    logs: JoinHandle<Vec<u8>>,
}

impl StdioGateway {
    fn start(stack: &Stack) -> Self {
        let mut child = Command::new(paths::binary("gateway").expect("gateway is built"))
            .args(["--mcp-stdio", "--registry-url"])
            .arg(format!("http://{}", stack.registry_addr()))
            .env("RUST_LOG", "debug")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("gateway starts");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let mut stderr = child.stderr.take().expect("stderr");
        let logs = tokio::spawn(async move {
            let mut buf = Vec::new();
            let _ = stderr.read_to_end(&mut buf).await;
            buf
        });
        Self {
            child,
            stdin,
            stdout,
            logs,
        }
    }

    /// Writes `message` as one line.
    async fn send(&mut self, message: &str) {
        tokio::time::timeout(
            CLIENT_TIMEOUT,
            self.stdin.write_all(format!("{message}\n").as_bytes()),
        )
        .await
        .expect("the gateway reads its stdin in time")
        .expect("write");
    }

    /// The next line on stdout, as JSON.
    async fn answer(&mut self) -> Value {
        let line = tokio::time::timeout(CLIENT_TIMEOUT, self.stdout.next_line())
            .await
            .expect("the gateway answers in time")
            .expect("stdout is readable")
            .expect("the gateway answers before closing stdout");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON-RPC ({e}): {line}"))
    }

    /// The 2025 handshake: `initialize` (answered) and `notifications/initialized`.
    async fn initialize(&mut self) -> Value {
        self.send(&json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "e2e", "version": "1"}}}).to_string()).await;
        let answer = self.answer().await;
        self.send(r#"{"jsonrpc": "2.0", "method": "notifications/initialized"}"#)
            .await;
        answer
    }

    /// Closes stdin; returns what stdout still carried, the exit status and the logs.
    async fn close(mut self) -> (Vec<String>, std::process::ExitStatus, String) {
        drop(self.stdin);
        let mut rest = Vec::new();
        while let Some(line) = tokio::time::timeout(CLIENT_TIMEOUT, self.stdout.next_line())
            .await
            .expect("the gateway closes stdout in time")
            .expect("stdout is readable")
        {
            rest.push(line);
        }
        let status = tokio::time::timeout(CLIENT_TIMEOUT, self.child.wait())
            .await
            .expect("the gateway exits when stdin closes")
            .expect("exit status");
        let logs = tokio::time::timeout(CLIENT_TIMEOUT, self.logs)
            .await
            .expect("stderr closes")
            .expect("stderr drained");
        (rest, status, String::from_utf8_lossy(&logs).into_owned())
    }
}

#[tokio::test]
async fn stdio_mode_keeps_stdout_for_the_protocol() {
    let stack = metadata_stack().spawn().await.expect("stack starts");
    let mut gateway = StdioGateway::start(&stack);
    let init = gateway.initialize().await;
    gateway
        .send(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "list_agents", "arguments": {}}}).to_string())
        .await;
    let listed = gateway.answer().await;
    // Two answers (initialize, tools/call), then closing stdin ends the session; nothing else
    // may ever appear on stdout.
    let (rest, status, logs) = gateway.close().await;
    assert!(status.success(), "{status}: {logs}");
    assert_eq!(rest, Vec::<String>::new());
    assert_eq!(init["jsonrpc"], "2.0", "{init}");
    assert_eq!(listed["jsonrpc"], "2.0", "{listed}");
    assert!(
        listed["result"]["structuredContent"]["total_count"]
            .as_u64()
            .is_some(),
        "{listed}"
    );
    assert!(!logs.is_empty(), "logs go to stderr");
    // A client that closes stdin without initialising (it gave up) ends it as cleanly.
    let (rest, status, logs) = StdioGateway::start(&stack).close().await;
    assert!(status.success(), "{status}: {logs}");
    assert_eq!(rest, Vec::<String>::new());
}

/// A message that is not a valid JSON-RPC request gets the same answer over stdio as over
/// `/mcp`, body for body: a `tools/call` whose params are not an object is invalid params
/// (-32602, not rmcp's "method not found"), one whose id is neither a string nor an integer an
/// invalid request (-32600, id `null`), and so on; the session goes on.
#[tokio::test]
async fn stdio_answers_malformed_messages_as_http_does() {
    let stack = spawn_stack().await.expect("stack starts");
    let mut gateway = StdioGateway::start(&stack);
    let init = gateway.initialize().await;
    assert!(init["result"]["serverInfo"].is_object(), "{init}");
    let cases = [
        (
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":"list_agents"}"#,
            -32602,
        ),
        (
            r#"{"jsonrpc":"2.0","id":1.5,"method":"tools/call","params":{"name":"list_agents","arguments":{}}}"#,
            -32600,
        ),
        (
            r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"show_agent","arguments":["ws"]}}"#,
            -32602,
        ),
        (r#"[{"jsonrpc":"2.0","id":4,"method":"ping"}]"#, -32600),
        ("{not json", -32700),
        // What rmcp cannot read: it answered a plain-text 415, or "method not found".
        (
            r#"{"jsonrpc":"2.0","id":6,"method":"tools/list","params":{"_meta":5}}"#,
            -32602,
        ),
        (
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/list","result":{}}"#,
            -32600,
        ),
        (
            r#"{"jsonrpc":"2.0","id":8,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{}}}"#,
            -32602,
        ),
    ];
    for (message, code) in cases {
        let http = raw_text_post(&stack, &[("MCP-Protocol-Version", "2025-06-18")], message).await;
        gateway.send(message).await;
        let stdio = gateway.answer().await;
        assert_eq!(stdio["error"]["code"], code, "{message}: {stdio}");
        assert_eq!(stdio, http.body, "{message}: {}", http.text);
    }
    // A well-formed call on the same session still reaches its tool.
    gateway
        .send(r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"list_agents","arguments":{}}}"#)
        .await;
    let listed = gateway.answer().await;
    assert_eq!(listed["id"], 5, "{listed}");
    assert!(
        listed["result"]["structuredContent"]["agents"].is_array(),
        "{listed}"
    );
    let (rest, status, logs) = gateway.close().await;
    assert!(status.success(), "{status}: {logs}");
    assert_eq!(rest, Vec::<String>::new());
}

/// A raw JSON-RPC POST to `/mcp` with `headers`.
async fn raw_post(stack: &Stack, headers: &[(&str, &str)], body: Value) -> Reply {
    raw_text_post(stack, headers, &body.to_string()).await
}

/// A POST to `/mcp` of `body` as it is, with `headers`.
async fn raw_text_post(stack: &Stack, headers: &[(&str, &str)], body: &str) -> Reply {
    let mut req = stack
        .http()
        .post(stack.url("/mcp"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    send(req.body(body.to_owned())).await
}

#[tokio::test]
async fn http_transport_enforces_origin_host_and_protocol_rules() {
    let stack = metadata_stack().spawn().await.expect("stack starts");
    let version = ("MCP-Protocol-Version", "2025-06-18");
    let tools_list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}});

    let ok = raw_post(
        &stack,
        &[version, ("Origin", "http://localhost:5173")],
        tools_list.clone(),
    )
    .await;
    assert_eq!(ok.status, 200, "{}", ok.text);
    // A page of another origin may read the answer (CORS), after a preflight the gateway
    // answers; the Origin check below still decides which origins are served.
    assert_eq!(
        ok.header("access-control-allow-origin").as_deref(),
        Some("http://localhost:5173")
    );
    // Also the headers of later protocol revisions (2026-07-28's `Mcp-Method`, `Mcp-Name`).
    let preflight = crate::helpers::mcp_preflight(
        &stack,
        "content-type, mcp-protocol-version, mcp-method, mcp-name",
    )
    .await;
    assert_eq!(preflight.status, 200, "{}", preflight.text);
    let allowed = preflight
        .header("access-control-allow-headers")
        .unwrap_or_default();
    for header in ["mcp-protocol-version", "mcp-method", "mcp-name"] {
        assert!(allowed.contains(header), "{header} in {allowed}");
    }
    assert!(
        ok.header("access-control-expose-headers")
            .is_some_and(|h| h.contains("mcp-protocol-version")),
        "{:?}",
        ok.header("access-control-expose-headers")
    );
    assert_eq!(
        ok.body["result"]["tools"].as_array().map(Vec::len),
        Some(2),
        "{}",
        ok.text
    );
    // Counts are plain non-negative integers: no format JSON Schema does not know.
    assert!(!ok.text.contains("\"uint"), "{}", ok.text);
    // The input schemas say the limits the server enforces.
    let schema = |tool: &str| {
        ok.body["result"]["tools"]
            .as_array()
            .and_then(|tools| tools.iter().find(|t| t["name"] == tool))
            .map(|t| t["inputSchema"]["properties"].clone())
            .unwrap_or_default()
    };
    let name = &schema("show_agent")["agent_name"];
    assert_eq!(
        (&name["minLength"], &name["maxLength"], &name["pattern"]),
        (&json!(3), &json!(64), &json!("^[a-z0-9][a-z0-9_-]{2,63}$")),
        "{}",
        ok.text
    );
    assert_eq!(
        schema("list_agents")["status_filter"]["enum"],
        json!(["idle", "busy", null]),
        "{}",
        ok.text
    );

    // There is one page and no cursor is ever given: any cursor is invalid params.
    let paged = raw_post(
        &stack,
        &[version],
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"cursor": "zzz"}}),
    )
    .await;
    assert_eq!(paged.body["error"]["code"], -32602, "{}", paged.text);
    assert!(
        paged.body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("cursor")),
        "{}",
        paged.text
    );

    let evil = raw_post(
        &stack,
        &[version, ("Origin", "http://evil.example")],
        tools_list.clone(),
    )
    .await;
    assert_eq!(evil.status, 403, "{}", evil.text);
    let rebound = raw_post(
        &stack,
        &[version, ("Host", "evil.example")],
        tools_list.clone(),
    )
    .await;
    assert_eq!(rebound.status, 403, "{}", rebound.text);
    // Both refusals in the gateway's JSON error body, saying what was refused.
    for (refused, named) in [(&evil, "Origin"), (&rebound, "Host")] {
        assert_eq!(
            refused.body["error"], "permission_denied",
            "{}",
            refused.text
        );
        assert!(
            refused.body["message"]
                .as_str()
                .is_some_and(|m| m.contains(named)),
            "{}",
            refused.text
        );
    }
    let future = raw_post(
        &stack,
        &[("MCP-Protocol-Version", "1999-01-01")],
        tools_list,
    )
    .await;
    assert_eq!(future.status, 400, "{}", future.text);

    let unknown = raw_post(
        &stack,
        &[version],
        json!({"jsonrpc": "2.0", "id": 7, "method": "agents/teleport", "params": {}}),
    )
    .await;
    assert_eq!(unknown.body["error"]["code"], -32601, "{}", unknown.text);
    assert_eq!(unknown.body["id"], 7);

    // Stateless: no server-initiated stream to open.
    let get = send(
        stack
            .http()
            .get(stack.url("/mcp"))
            .header("accept", "text/event-stream"),
    )
    .await;
    assert_eq!(get.status, 405, "{}", get.text);
}

/// What is not a JSON-RPC 2.0 message gets JSON-RPC's own error for it, as JSON: not JSON is a
/// parse error, not a request an invalid request (both HTTP 400), a `tools/call` whose params
/// do not fit invalid params; a wrong `Content-Type` stays a 415.
#[tokio::test]
async fn malformed_messages_get_json_rpc_errors() {
    let stack = metadata_stack().spawn().await.expect("stack starts");
    let version = ("MCP-Protocol-Version", "2025-06-18");
    let cases: [(&str, u16, Value, i64, &str); 11] = [
        (
            r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}"#,
            400,
            Value::Null,
            -32600,
            "`id` appears twice",
        ),
        (
            r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"show_agent","name":"list_agents","arguments":{}}}"#,
            400,
            Value::Null,
            -32600,
            "`name` appears twice",
        ),
        ("{not json", 400, Value::Null, -32700, "parse error"),
        ("", 400, Value::Null, -32700, "parse error"),
        (
            r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#,
            400,
            Value::Null,
            -32600,
            "batch",
        ),
        (
            r#"{"jsonrpc":"1.0","id":3,"method":"ping"}"#,
            400,
            json!(3),
            -32600,
            "jsonrpc",
        ),
        (
            r#"{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}"#,
            400,
            Value::Null,
            -32600,
            "`id`",
        ),
        (
            r#"{"jsonrpc":"2.0","id":"x"}"#,
            400,
            json!("x"),
            -32600,
            "no `method`",
        ),
        (
            r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"show_agent","arguments":["ws"]}}"#,
            200,
            json!(4),
            -32602,
            "`arguments` must be an object",
        ),
        (
            r#"{"jsonrpc":"2.0","id":6,"method":"tools/call"}"#,
            200,
            json!(6),
            -32602,
            "`params`",
        ),
        (
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"arguments":{}}}"#,
            200,
            json!(7),
            -32602,
            "`name`",
        ),
    ];
    for (body, status, id, code, says) in cases {
        let r = raw_text_post(&stack, &[version], body).await;
        assert_eq!(r.status, status, "{body}: {}", r.text);
        assert_eq!(r.body["jsonrpc"], "2.0", "{body}: {}", r.text);
        assert_eq!(r.body["id"], id, "{body}: {}", r.text);
        assert_eq!(r.body["error"]["code"], code, "{body}: {}", r.text);
        let message = r.body["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(says), "{body}: {}", r.text);
    }
    // A well-formed call still reaches its tool; a wrong Content-Type is still rmcp's 415.
    let ok = raw_post(
        &stack,
        &[version],
        json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call",
            "params": {"name": "list_agents", "arguments": {}}}),
    )
    .await;
    assert_eq!(ok.status, 200, "{}", ok.text);
    assert!(
        ok.body["result"]["structuredContent"]["agents"].is_array(),
        "{}",
        ok.text
    );
    let plain = send(
        stack
            .http()
            .post(stack.url("/mcp"))
            .header("content-type", "text/plain")
            .header("accept", "application/json, text/event-stream")
            .header(version.0, version.1)
            .body("{}"),
    )
    .await;
    assert_eq!(plain.status, 415, "{}", plain.text);
    // A notification it cannot take has no answer to carry the error: the POST fails.
    let note = raw_text_post(
        &stack,
        &[version],
        r#"{"jsonrpc":"2.0","method":"notifications/initialized","params":[]}"#,
    )
    .await;
    assert_eq!(note.status, 400, "{}", note.text);
    // Under a revision that wants more of every request (2026-07-28), a malformed message
    // still gets its own JSON-RPC error.
    let later = raw_text_post(
        &stack,
        &[
            ("MCP-Protocol-Version", "2026-07-28"),
            ("Mcp-Method", "tools/call"),
        ],
        "{not json",
    )
    .await;
    assert_eq!(
        (
            later.status.as_u16(),
            &later.body["error"]["code"],
            &later.body["id"]
        ),
        (400, &json!(-32700), &Value::Null),
        "{}",
        later.text
    );
    // The request's own checks come first: a refused origin gets its 403 whatever the body.
    for body in [
        "{not json",
        r#"{"jsonrpc":"2.0","id":4,"method":"tools/call"}"#,
    ] {
        let refused =
            raw_text_post(&stack, &[version, ("Origin", "http://evil.example")], body).await;
        assert_eq!(refused.status, 403, "{body}: {}", refused.text);
        assert_eq!(refused.body["error"], "permission_denied", "{body}");
    }
}
