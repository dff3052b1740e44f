//! Subprocess tools through the real binaries (issue 13): a model's `python` call sees none of
//! the executor's secrets in its environment, cannot write outside its workspace (Landlock,
//! where the kernel enforces it; the executor logs when it does not), and can write inside.

use serde_json::json;
use taskforce_tests::StackOptions;

use crate::helpers::{RUN_TIMEOUT, SseReader, create_agent_with_tools};

const SECRET: &str = "ghp-confinement-test-secret-0123456789";

#[tokio::test]
async fn python_sees_no_secrets_and_writes_only_in_its_workspace() {
    let outside_dir = tempfile::tempdir().expect("temp dir");
    let outside = outside_dir.path().join("escaped.txt");
    let code = format!(
        "import os\n\
         print('SECRET-SEEN' if any('{SECRET}' in v for v in os.environ.values()) else 'NO-SECRET')\n\
         try:\n    open({outside:?}, 'w').write('x')\n    print('WROTE-OUTSIDE')\n\
         except OSError as e:\n    print('REFUSED', e.errno)\n\
         open('inside.txt', 'w').write('ok')\n\
         print('WROTE-INSIDE')\n",
        outside = outside.display().to_string()
    );
    let script = format!(
        "turns:\n  - tool_calls:\n      - name: python\n        id: py\n        arguments:\n          code: {}\n  - text: \"done\"\n",
        serde_json::to_string(&code).expect("JSON string")
    );
    let stack = StackOptions::full()
        .with_executor()
        .executor_env("GITHUB_TOKEN", SECRET)
        .llm_script(script)
        .spawn()
        .await
        .expect("stack starts");
    create_agent_with_tools(&stack, "pythonist", &["python"]).await;
    let mut sse = SseReader::open(
        &stack,
        "/api/v1/execute/stream",
        &json!({"mission": "try it", "agent_id": "pythonist"}),
    )
    .await;
    let events = sse.rest(RUN_TIMEOUT).await;
    let (_, end) = events
        .iter()
        .find(|(n, e)| (n == "tool_end" || n == "tool_error") && e["call_id"] == "py")
        .unwrap_or_else(|| panic!("no python outcome: {events:?}"));
    let output = end.to_string();
    assert!(output.contains("NO-SECRET"), "{output}");
    assert!(!output.contains(SECRET), "{output}");
    assert!(output.contains("WROTE-INSIDE"), "{output}");
    let log = std::fs::read_to_string(stack.executor_log()).unwrap_or_default();
    if log.contains("Landlock is not enforced") {
        eprintln!(
            "note: this kernel does not enforce Landlock; the write confinement is not checked"
        );
        return;
    }
    assert!(output.contains("REFUSED"), "{output}");
    assert!(!outside.exists(), "python wrote {}", outside.display());
}
