//! Native tool tests: real files, real subprocesses, local HTTP servers for the web and GitHub.
//!
//! # Layout
//! - `files`: `file_read` / `file_write` and workspace confinement.
//! - `process`: `python`, `git`, `powershell` (timeouts, cancellation, output caps).
//! - `git`: the git allowlist (everyday commands work, hostile options are refused).
//! - `sandbox`: what confines `python` and `git` (writes, resource limits, environment).
//! - `web`: `web_search` and `web_fetch` against a local axum server.
//! - `github`: `github` against a local server that checks the token.
//! - `mcp`: MCP tools against a stdio server that misbehaves on request.

mod files;
mod git;
mod github;
mod mcp;
mod process;
mod sandbox;
mod web;

use std::{path::Path, sync::Arc, time::Duration};

use executor_svc::tools::{
    Limits, Tool, ToolContext, ToolError, ToolOutcome,
    native::{NativeToolsConfig, native_tools},
};
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// A context for `workspace` with the given limits.
pub fn ctx_with(workspace: &Path, timeout: Duration, max_output_bytes: usize) -> ToolContext {
    ToolContext {
        workspace: executor_svc::tools::Workspace::new(workspace),
        agent_id: "tester".into(),
        session_id: "s-1".into(),
        cancel: CancellationToken::new(),
        limits: Limits {
            timeout,
            max_output_bytes,
        },
        call_id: "call-1".into(),
        orchestra: None,
    }
}

/// A context with the default limits.
pub fn ctx(workspace: &Path) -> ToolContext {
    ctx_with(workspace, Duration::from_secs(20), 64 * 1024)
}

/// The native tool `name` built from `config`.
pub fn tool_with(config: &NativeToolsConfig, name: &str) -> Arc<dyn Tool> {
    native_tools(config)
        .into_iter()
        .find(|t| t.name() == name)
        .unwrap_or_else(|| panic!("no native tool {name}"))
}

/// The default configuration, with the launcher cargo built for these tests.
pub fn config() -> NativeToolsConfig {
    let mut c = NativeToolsConfig::default();
    c.sandbox.launcher = Some(env!("CARGO_BIN_EXE_taskforce-sandbox").into());
    c
}

/// The native tool `name` with the default configuration.
pub fn tool(name: &str) -> Arc<dyn Tool> {
    tool_with(&config(), name)
}

/// The text of an output, and whether it is an error; panics on anything else.
pub fn output(result: Result<ToolOutcome, ToolError>) -> (String, bool) {
    match result {
        Ok(ToolOutcome::Output { content, is_error }) => (content, is_error),
        other => panic!("expected an output, got {other:?}"),
    }
}

/// A successful output's text.
pub fn ok_text(result: Result<ToolOutcome, ToolError>) -> String {
    let (text, is_error) = output(result);
    assert!(!is_error, "expected success, got an error output: {text}");
    text
}

#[tokio::test]
async fn ask_user_returns_the_question_and_refuses_an_empty_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ask = tool("ask_user");
    let got = ask
        .call(
            &ctx(dir.path()),
            json!({ "question": "  Which invoice?  " }),
        )
        .await
        .expect("ask_user");
    assert_eq!(
        got,
        ToolOutcome::Question {
            question: "Which invoice?".into(),
            key: None,
            required: true,
            default: None,
        }
    );
    let err = ask.call(&ctx(dir.path()), json!({ "question": " " })).await;
    assert!(
        matches!(err, Err(ToolError::InvalidArguments { .. })),
        "{err:?}"
    );
    let err = ask.call(&ctx(dir.path()), json!({})).await;
    assert!(
        matches!(err, Err(ToolError::InvalidArguments { .. })),
        "{err:?}"
    );
}

#[test]
fn the_nine_tools_are_built_in_catalog_order_with_the_catalog_schemas() {
    let tools = native_tools(&NativeToolsConfig::default());
    let names: Vec<_> = tools.iter().map(|t| t.name().to_owned()).collect();
    assert_eq!(names, taskforce_proto::catalog::NATIVE_TOOL_NAMES);
    for (t, c) in tools.iter().zip(taskforce_proto::catalog::native_tools()) {
        assert_eq!(t.definition().parameters, c.parameters_schema, "{}", c.name);
    }
}
