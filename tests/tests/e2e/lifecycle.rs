//! Stopping the registry: SIGTERM ends it promptly and cleanly, also while MCP discovery hangs,
//! and it leaves no MCP server process behind.

use std::time::Duration;

use taskforce_tests::{StackOptions, eventually, process::ReapOnDrop};

/// `sleep` seconds of the hanging global server: an unusual number, to find its process.
const HANG_SECS: &str = "3517";

#[tokio::test]
async fn sigterm_stops_the_registry_promptly_while_a_global_mcp_discovery_hangs() {
    let catalog = format!(
        "mcp_servers:\n  stuck:\n    type: stdio\n    command: sleep\n    args: [\"{HANG_SECS}\"]\n"
    );
    // Declared before the stack, so it is dropped after it.
    let servers = ReapOnDrop::new(&["sleep", HANG_SECS]);
    let mut stack = StackOptions::registry_only()
        .catalog_mcp(catalog)
        .discovery_timeout_ms(60_000)
        .spawn()
        .await
        .expect("stack starts");
    let running = eventually(Duration::from_secs(10), Duration::from_millis(50), || {
        let found = !servers.running().is_empty();
        async move { found.then_some(()) }
    })
    .await;
    assert!(running.is_some(), "the global MCP server was never started");

    let stopped = stack.stop_within(Duration::from_secs(10)).await;
    let gone = eventually(Duration::from_secs(5), Duration::from_millis(50), || {
        let none = servers.running().is_empty();
        async move { none.then_some(()) }
    })
    .await;
    let left = servers.running();
    stopped.expect("SIGTERM ends the registry within 10 s although discovery may take 60 s");
    assert!(
        gone.is_some(),
        "the registry left its MCP server running: {left:?}"
    );
}

#[tokio::test]
async fn sigterm_stops_an_idle_registry_cleanly_and_it_starts_again() {
    let mut stack = StackOptions::registry_only()
        .spawn()
        .await
        .expect("stack starts");
    stack
        .stop_within(Duration::from_secs(10))
        .await
        .expect("SIGTERM ends the registry with exit status 0");
    stack
        .restart()
        .await
        .expect("it starts again on the same dirs");
    let tools = stack
        .registry()
        .list_tools(taskforce_proto::v1::ListToolsRequest {})
        .await
        .expect("serves after the restart");
    assert!(!tools.into_inner().tools.is_empty());
}

#[tokio::test]
async fn sigterm_stops_the_registry_promptly_while_the_gateway_is_connected() {
    let mut stack = StackOptions::full().spawn().await.expect("stack starts");
    let r = stack
        .http()
        .get(stack.url("/api/v1/agents"))
        .send()
        .await
        .expect("the gateway answers");
    assert_eq!(
        r.status(),
        200,
        "the gateway holds a connection to the registry now"
    );
    stack
        .stop_within(Duration::from_secs(10))
        .await
        .expect("SIGTERM ends the registry although the gateway keeps its channel open");
}

#[tokio::test]
async fn log_settings_that_are_not_used_are_said_and_forced_text_logs_have_no_colours() {
    let wait = std::time::Duration::from_secs(2);
    let args = ["--listen", "127.0.0.1:0", "--metrics-listen", ""];
    let (code, log, _dir) = crate::auth::start_with(
        "registry-svc",
        &args,
        &[
            ("TASKFORCE_LOG_FORMAT", "yaml"),
            ("RUST_LOG", "info,[unclosed"),
        ],
        wait,
    )
    .await;
    assert_eq!(code, None, "it keeps serving: {log}");
    for said in [
        "TASKFORCE_LOG_FORMAT=\\\"yaml\\\" is neither json nor text",
        "RUST_LOG is not a valid filter",
    ] {
        assert!(log.contains(said), "{said:?} in:\n{log}");
    }
    let (_, text, _dir) = crate::auth::start_with(
        "registry-svc",
        &args,
        &[("TASKFORCE_LOG_FORMAT", "text")],
        wait,
    )
    .await;
    assert!(
        text.contains("registry listening") || text.contains("INFO"),
        "{text}"
    );
    assert!(
        !text.contains('\u{1b}'),
        "no ANSI escapes in a file: {text:?}"
    );
    // Empty is unset: JSON lines in a file, and nothing to complain about.
    let (_, empty, _dir) =
        crate::auth::start_with("registry-svc", &args, &[("TASKFORCE_LOG_FORMAT", "")], wait).await;
    assert!(!empty.contains("neither json nor text"), "{empty}");
    assert!(
        empty.lines().any(|l| l.starts_with('{')),
        "JSON lines: {empty}"
    );
}
