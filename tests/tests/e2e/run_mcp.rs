//! MCP tools in runs through the three real binaries: an agent created over REST with the real
//! `mcp-server-time` (stdio) and an allowlist runs through the gateway's SSE; a `${VAR}` in the
//! server's `env` is expanded by the executor and shows in no event, response or log.

use serde_json::json;
use taskforce_tests::{StackOptions, mcp};

use crate::helpers::{RUN_TIMEOUT, SseReader, agent_json, create, event_names, run_to_end, send};

const SECRET: &str = "tf-secret-4e1f9a7c";

const SCRIPT: &str = r#"
turns:
  - tool_calls:
      - {name: get_current_time, id: t1, arguments: {timezone: UTC}}
      - {name: convert_time, id: t2, arguments: {source_timezone: UTC, time: "12:00", target_timezone: Asia/Tokyo}}
  - text: "It is {{last_message}}"
"#;

#[tokio::test]
async fn an_agents_mcp_tools_run_through_the_gateway_within_its_allowlist() {
    let stack = StackOptions::full()
        .with_executor()
        .discovery_timeout_ms(30_000)
        // Only the executor has the secret: the registry, which cannot expand the server's
        // placeholder, leaves checking the allowlist to the executor.
        .executor_env("TF_E2E_MCP_SECRET", SECRET)
        .llm_script(SCRIPT)
        .spawn()
        .await
        .expect("stack with executor starts");
    let mut server = mcp::time_server_json().expect("mcp-server-time is installed");
    server["env"] = json!({"TF_E2E_TOKEN": "${TF_E2E_MCP_SECRET}"});
    let mut body = agent_json("clock");
    body["mcp_servers"] = json!([server]);
    body["mcp_tool_allowlist"] = json!(["get_current_time"]);
    // The services' own secrets are never a server's: the service token, the providers' keys.
    for reserved in [
        "${TASKFORCE_SERVICE_TOKEN}",
        "Bearer ${TASKFORCE_API_KEYS:-}",
        "${OPENAI_API_KEY}",
        "${GITHUB_TOKEN:-}",
    ] {
        let mut leaky = body.clone();
        leaky["mcp_servers"][0]["env"] = json!({"STOLEN": reserved});
        let r = create(&stack, &leaky).await;
        assert_eq!(r.status, 400, "{reserved}: {}", r.text);
        assert!(r.text.contains("own secrets"), "{}", r.text);
    }
    let r = create(&stack, &body).await;
    assert_eq!(r.status, 201, "{}", r.text);
    // The create says it too (as `:validate` below), and a read of the agent does not.
    let created = r.body["warnings"].to_string();
    assert!(
        created.contains("TF_E2E_MCP_SECRET") && created.contains("when the executor runs"),
        "{}",
        r.text
    );
    assert!(!created.contains(SECRET), "{created}");
    let read = send(stack.http().get(stack.url("/api/v1/agents/clock"))).await;
    assert_eq!(read.status, 200, "{}", read.text);
    assert!(read.body.get("warnings").is_none(), "{}", read.text);
    // `:validate` says why the registry did not list the server's tools, naming the variable.
    let mut other = body.clone();
    other["agent_id"] = json!("clock-check");
    let v = send(
        stack
            .http()
            .post(stack.url("/api/v1/agents:validate"))
            .json(&other),
    )
    .await;
    assert_eq!(v.status, 200, "{}", v.text);
    let warnings = v.body["warnings"].to_string();
    assert!(
        warnings.contains("TF_E2E_MCP_SECRET") && warnings.contains("when the executor runs"),
        "{warnings}"
    );
    assert!(!warnings.contains(SECRET), "{warnings}");

    let mut sse = SseReader::open(
        &stack,
        "/api/v1/execute/stream",
        &json!({"mission": "What time is it in UTC?", "agent_id": "clock"}),
    )
    .await;
    let events = sse.rest(RUN_TIMEOUT).await;
    let names = event_names(&events);
    assert_eq!(names.first(), Some(&"run_started"), "{names:?}");
    assert_eq!(names.last(), Some(&"done"), "{names:?}");
    let (_, done) = &events[events.len() - 1];
    assert_eq!(done["status"], "completed", "{events:?}\n{}", stack.logs());
    assert!(!names.contains(&"warning"), "{events:?}");

    // The allowed MCP tool ran on the real server.
    let end = events
        .iter()
        .find(|(n, e)| n == "tool_end" && e["tool"] == "get_current_time")
        .map(|(_, e)| e)
        .unwrap_or_else(|| panic!("no get_current_time result: {events:?}\n{}", stack.logs()));
    assert_eq!(end["is_error"], false, "{end}");
    let output = end["output"].as_str().unwrap_or_default();
    let time: serde_json::Value = serde_json::from_str(output)
        .unwrap_or_else(|e| panic!("mcp-server-time answers JSON ({e}): {output}"));
    assert_eq!(time["timezone"], "UTC", "{output}");
    // The server's other tool is not in the allowlist: the model is told it does not exist.
    let refused = events
        .iter()
        .find(|(n, e)| n == "tool_error" && e["tool"] == "convert_time")
        .map(|(_, e)| e)
        .unwrap_or_else(|| panic!("convert_time was not refused: {events:?}"));
    assert!(
        refused["message"]
            .as_str()
            .is_some_and(|m| m.contains("unknown tool `convert_time`")),
        "{refused}"
    );

    // The secret was expanded for the server only: never in events, responses or logs.
    let everything = format!("{events:?}{}", stack.logs());
    assert!(!everything.contains(SECRET), "the secret leaked");
    let got = crate::helpers::send(stack.http().get(stack.url("/api/v1/agents/clock"))).await;
    assert!(!got.text.contains(SECRET), "{}", got.text);
    assert!(got.text.contains("${TF_E2E_MCP_SECRET}"), "{}", got.text);
}

/// The registry refuses, at save, an MCP server reading a variable the executor's LLM config
/// takes a provider's key from, when that file is outside its config directory (`--llm-config`,
/// as the Compose and Kubernetes set-ups give it); a named file that is missing stops it.
#[tokio::test]
async fn the_registry_refuses_the_provider_keys_of_the_llm_config_it_is_given() {
    let files = tempfile::tempdir().expect("temp dir");
    let llm = files.path().join("executor-llm.yaml");
    std::fs::write(
        &llm,
        "default_model: main\nmodels:\n  main: {provider: corp, model: m}\nproviders:\n  corp:\n    type: openai\n    base_url: http://127.0.0.1:9/v1\n    api_key_env: TF_E2E_CORP_LLM_KEY\n",
    )
    .expect("write");
    let stack = StackOptions::full()
        .registry_args(["--llm-config".to_owned(), llm.display().to_string()])
        .spawn()
        .await
        .expect("stack starts");
    let mut body = agent_json("corp-reader");
    body["mcp_servers"] = json!([{
        "type": "stdio",
        "command": "mcp-server-time",
        "env": {"STOLEN": "${TF_E2E_CORP_LLM_KEY}"}
    }]);
    let r = create(&stack, &body).await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert!(
        r.text.contains("own secrets") && r.text.contains("TF_E2E_CORP_LLM_KEY"),
        "{}",
        r.text
    );
    let r = send(stack.http().get(stack.url("/api/v1/agents/corp-reader"))).await;
    assert_eq!(r.status, 404, "nothing saved: {}", r.text);

    let missing = files.path().join("no-such-llm.yaml");
    let (code, stderr, _dir) = crate::auth::start(
        "registry-svc",
        &[
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "",
            "--llm-config",
            missing.to_str().expect("utf-8 path"),
        ],
        std::time::Duration::from_secs(30),
    )
    .await;
    assert!(code.is_some_and(|c| c != 0), "exit {code:?}: {stderr}");
    assert!(
        stderr.contains("--llm-config") && stderr.contains("no-such-llm.yaml"),
        "{stderr}"
    );
}

/// A stdio server that prints its own secret (not JSON-RPC) before it speaks MCP: at
/// `RUST_LOG=debug` the MCP library logs such lines, and the executor's log shows `***`.
#[tokio::test]
async fn what_an_mcp_server_prints_of_its_secret_is_masked_in_the_debug_log() {
    let stack = StackOptions::full()
        .with_executor()
        .discovery_timeout_ms(30_000)
        .executor_env("TF_E2E_MCP_SECRET", SECRET)
        .executor_env("RUST_LOG", "debug")
        .llm_script("turns:\n  - text: done\n")
        .spawn()
        .await
        .expect("stack with executor starts");
    let time = mcp::time_server_json().expect("mcp-server-time is installed");
    let server = json!({
        "type": "stdio",
        "command": "sh",
        "args": ["-c", "echo \"leaked=$TF_E2E_TOKEN\"; exec \"$0\"", time["command"]],
        "env": {"TF_E2E_TOKEN": "${TF_E2E_MCP_SECRET}"},
    });
    let mut body = agent_json("printer");
    body["mcp_servers"] = json!([server]);
    body["mcp_tool_allowlist"] = json!(["get_current_time"]);
    let r = create(&stack, &body).await;
    assert_eq!(r.status, 201, "{}", r.text);
    let events = run_to_end(&stack, "printer", "Anything").await;
    assert_eq!(
        events[events.len() - 1].1["status"],
        "completed",
        "{events:?}\n{}",
        stack.logs()
    );
    let log = std::fs::read_to_string(stack.executor_log()).unwrap_or_default();
    assert!(!log.contains(SECRET), "the secret is in the executor's log");
    assert!(
        log.contains("leaked=***"),
        "the server's line is logged, masked: {log}"
    );
}

/// A tool that returns its server's environment (server-everything's `get-env`, over stdio):
/// the secret a `${VAR}` gave the server reaches neither the model, the events nor the session,
/// masked as the server's errors are.
#[tokio::test]
async fn what_an_mcp_tool_returns_of_its_servers_secret_is_masked() {
    let stack = StackOptions::full()
        .with_executor()
        .discovery_timeout_ms(30_000)
        .executor_env("TF_E2E_MCP_SECRET", SECRET)
        .llm_script(
            "turns:\n  - tool_calls: [{name: get-env, id: e1, arguments: {}}]\n  \
             - text: \"Seen: {{last_message}}\"\n",
        )
        .spawn()
        .await
        .expect("stack with executor starts");
    let everything = taskforce_tests::paths::mcp_server_everything()
        .expect("mcp-server-everything is installed");
    let mut body = agent_json("env-reader");
    body["mcp_servers"] = json!([{
        "type": "stdio",
        "command": everything.to_str().expect("utf-8 path"),
        "args": ["stdio"],
        // A name no pattern takes for a secret's: only the value's origin (a `${VAR}`) says so.
        "env": {"TF_E2E_GREETING": "${TF_E2E_MCP_SECRET}"},
    }]);
    body["mcp_tool_allowlist"] = json!(["get-env"]);
    let r = create(&stack, &body).await;
    assert_eq!(r.status, 201, "{}", r.text);
    let events = run_to_end(&stack, "env-reader", "Show the environment").await;
    let all = format!("{events:?}");
    assert_eq!(
        events[events.len() - 1].1["status"],
        "completed",
        "{all}\n{}",
        stack.logs()
    );
    assert!(
        !all.contains(SECRET),
        "the secret reached the events: {all}"
    );
    let output = events
        .iter()
        .find(|(n, e)| n == "tool_end" && e["tool"] == "get-env")
        .and_then(|(_, e)| e["output"].as_str())
        .unwrap_or_else(|| panic!("get-env ran: {all}"));
    assert!(output.contains(r#""TF_E2E_GREETING": "***""#), "{output}");
}

/// Two MCP servers with a tool of the same name: the first server's is offered, and the run
/// says why the second's is not (a `warning` event naming the tool), instead of the model
/// silently never reaching it.
#[tokio::test]
async fn a_tool_name_two_mcp_servers_share_is_said_in_the_run() {
    let stack = StackOptions::full()
        .with_executor()
        .discovery_timeout_ms(30_000)
        .llm_script("turns:\n  - text: done\n")
        .spawn()
        .await
        .expect("stack with executor starts");
    let first = mcp::time_server_json().expect("mcp-server-time is installed");
    // The same program under another configuration: a second server, the same tools.
    let mut second = first.clone();
    second["args"] = json!(["--local-timezone", "Asia/Tokyo"]);
    let mut body = agent_json("two-clocks");
    body["mcp_servers"] = json!([first, second]);
    body["mcp_tool_allowlist"] = json!(["get_current_time"]);
    // Said at save too: the second server's tool of that name is never reached.
    let r = create(&stack, &body).await;
    assert_eq!(r.status, 201, "{}", r.text);
    let saved = r.body["warnings"].to_string();
    assert!(
        saved.contains("`get_current_time` is a tool of mcp_servers[0] and of mcp_servers[1]"),
        "{}",
        r.text
    );
    let events = run_to_end(&stack, "two-clocks", "What time is it?").await;
    let warnings: Vec<&serde_json::Value> = events
        .iter()
        .filter(|(n, e)| n == "warning" && e["code"] == "MCP_TOOL_NAME_TAKEN")
        .map(|(_, e)| e)
        .collect();
    assert_eq!(warnings.len(), 1, "{events:?}\n{}", stack.logs());
    let message = warnings[0]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("`get_current_time`") && message.contains("Asia/Tokyo"),
        "{message}"
    );
    let (_, done) = &events[events.len() - 1];
    assert_eq!(done["status"], "completed", "{events:?}");
}
