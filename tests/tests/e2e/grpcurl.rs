//! The real grpcurl 1.8 against the registry: reflection (v1alpha, which grpcurl 1.8 asks for)
//! and health work with no proto files at hand.

use std::time::Duration;

use serde_json::{Value, json};
use taskforce_tests::{Stack, paths, spawn_registry};
use tokio::process::Command;

pub struct Run {
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
}

/// Runs grpcurl with `args`.
pub async fn run(args: Vec<String>) -> Run {
    let program = paths::grpcurl().expect("grpcurl is installed");
    let mut cmd = Command::new(program);
    cmd.args(&args).kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(60), cmd.output())
        .await
        .expect("grpcurl finishes within 60 s")
        .expect("grpcurl runs");
    Run {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Runs `grpcurl -plaintext -d DATA ADDR METHOD`.
async fn invoke(stack: &Stack, data: &Value, method: &str) -> Run {
    let (data, addr) = (data.to_string(), stack.registry_addr().to_string());
    let args = ["-plaintext", "-max-time", "30", "-d", &data, &addr, method];
    run(args.iter().map(|s| (*s).to_owned()).collect()).await
}

/// Runs `grpcurl -plaintext ADDR VERB [SYMBOL]`.
async fn verb(stack: &Stack, verb: &str, symbol: Option<&str>) -> Run {
    let mut args = vec![
        "-plaintext".to_owned(),
        stack.registry_addr().to_string(),
        verb.to_owned(),
    ];
    args.extend(symbol.map(str::to_owned));
    run(args).await
}

/// Calls `method` with a JSON request and parses the JSON answer.
async fn call(stack: &Stack, method: &str, request: &Value) -> Value {
    let run = invoke(stack, request, method).await;
    assert!(
        run.ok,
        "grpcurl {method} failed:\n{}\n{}",
        run.stdout, run.stderr
    );
    serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("grpcurl {method} printed no JSON ({e}):\n{}", run.stdout))
}

/// A field by its JSON name (grpcurl prints lowerCamelCase) or its proto name.
fn field<'a>(v: &'a Value, camel: &str, snake: &str) -> &'a Value {
    if v.get(camel).is_some() {
        &v[camel]
    } else {
        &v[snake]
    }
}

#[tokio::test]
async fn grpcurl_lists_and_describes_the_services_through_reflection() {
    let stack = spawn_registry().await.expect("stack starts");
    let run = verb(&stack, "list", None).await;
    assert!(run.ok, "grpcurl list failed:\n{}", run.stderr);
    let services: Vec<&str> = run.stdout.lines().map(str::trim).collect();
    for wanted in ["taskforce.v1.AgentRegistry", "grpc.health.v1.Health"] {
        assert!(
            services.contains(&wanted),
            "{wanted} missing from `grpcurl list`:\n{}",
            run.stdout
        );
    }
    // Only what this server serves: the executor's service is another process's.
    assert!(
        !services.contains(&"taskforce.v1.Executor"),
        "the registry lists the executor's service:\n{}",
        run.stdout
    );

    let run = verb(&stack, "describe", Some("taskforce.v1.AgentRegistry")).await;
    assert!(run.ok, "grpcurl describe failed:\n{}", run.stderr);
    for rpc in [
        "CreateAgent",
        "GetAgent",
        "ListAgents",
        "UpdateAgent",
        "DeleteAgent",
        "ListTools",
        "ValidateAgent",
        "WatchAgents",
        "ListDiagnostics",
    ] {
        assert!(
            run.stdout.contains(&format!("rpc {rpc}")),
            "describe lacks rpc {rpc}:\n{}",
            run.stdout
        );
    }

    let run = verb(&stack, "describe", Some("taskforce.v1.AgentSpec")).await;
    assert!(
        run.ok && run.stdout.contains("tool_allowlist"),
        "describe AgentSpec:\n{}\n{}",
        run.stdout,
        run.stderr
    );

    let health = call(&stack, "grpc.health.v1.Health/Check", &json!({})).await;
    assert_eq!(health["status"], "SERVING");
}

#[tokio::test]
async fn grpcurl_round_trips_an_agent_with_json_requests() {
    let stack = spawn_registry().await.expect("stack starts");
    let spec = json!({
        "agent_id": "grpcurl-agent",
        "name": "Made by grpcurl",
        "description": "Created from JSON through server reflection.",
        "system_prompt": "You are a LeanAgent.",
        "tool_allowlist": ["file_read", "ask_user"],
    });
    let created = call(
        &stack,
        "taskforce.v1.AgentRegistry/CreateAgent",
        &json!({ "spec": spec }),
    )
    .await;
    assert_eq!(field(&created, "agentId", "agent_id"), "grpcurl-agent");
    assert_eq!(created["source"], "AGENT_SOURCE_CUSTOM");
    let version = created["version"].as_str().expect("a version").to_owned();
    assert!(
        stack.custom_dir().join("grpcurl-agent.yaml").is_file(),
        "the YAML file is written"
    );

    let got = call(
        &stack,
        "taskforce.v1.AgentRegistry/GetAgent",
        &json!({"agent_id": "grpcurl-agent"}),
    )
    .await;
    assert_eq!(got["version"], version.as_str());
    let got_spec = field(&got["custom"], "spec", "spec");
    assert_eq!(
        field(got_spec, "toolAllowlist", "tool_allowlist"),
        &json!(["file_read", "ask_user"])
    );

    let listed = call(
        &stack,
        "taskforce.v1.AgentRegistry/ListAgents",
        &json!({"source": "AGENT_SOURCE_CUSTOM"}),
    )
    .await;
    let ids: Vec<&str> = listed["agents"]
        .as_array()
        .expect("agents")
        .iter()
        .filter_map(|a| field(a, "agentId", "agent_id").as_str())
        .collect();
    assert_eq!(
        ids,
        [
            "grpcurl-agent",
            "invoice-extractor",
            "m365-assistant",
            "time-keeper"
        ]
    );

    let deleted = call(
        &stack,
        "taskforce.v1.AgentRegistry/DeleteAgent",
        &json!({"agent_id": "grpcurl-agent", "expected_version": version}),
    )
    .await;
    // Only the revision of the deletion (uint64: a JSON string), so watchers can be waited for.
    let fields: Vec<&String> = deleted.as_object().expect("an object").keys().collect();
    assert_eq!(fields, ["revision"], "{deleted}");
    assert!(
        deleted["revision"]
            .as_str()
            .is_some_and(|r| r.parse::<u64>().is_ok_and(|n| n > 0)),
        "{deleted}"
    );
    assert!(
        !stack.custom_dir().join("grpcurl-agent.yaml").exists(),
        "the YAML file is removed"
    );

    let run = invoke(
        &stack,
        &json!({"agent_id": "grpcurl-agent"}),
        "taskforce.v1.AgentRegistry/GetAgent",
    )
    .await;
    assert!(
        !run.ok,
        "GetAgent of a deleted agent succeeded:\n{}",
        run.stdout
    );
    assert!(
        run.stderr.contains("NotFound"),
        "expected NotFound:\n{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("NOT_FOUND"),
        "expected the ErrorInfo reason in the details:\n{}",
        run.stderr
    );
}

#[tokio::test]
async fn grpcurl_shows_field_violations_of_a_bad_create() {
    let stack = spawn_registry().await.expect("stack starts");
    let run = invoke(
        &stack,
        &json!({"spec": {"agent_id": "AB"}}),
        "taskforce.v1.AgentRegistry/CreateAgent",
    )
    .await;
    assert!(!run.ok, "a bad create succeeded:\n{}", run.stdout);
    assert!(run.stderr.contains("InvalidArgument"), "{}", run.stderr);
    assert!(
        run.stderr.contains("google.rpc.BadRequest") && run.stderr.contains("agent_id"),
        "{}",
        run.stderr
    );
}
