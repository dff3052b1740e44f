//! Workspace metadata (seed 001) through `GET /api/v1/agents/{id}/metadata`: real workspaces in
//! the stack's temp dir, collected by the real `task` binary; the cache and `force_refresh`;
//! failures and timeouts as field errors; the registry's secrets never reach a task. Also the
//! workspace helpers the MCP tests share.

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use serde_json::{Value, json};
use taskforce_tests::{Stack, StackOptions, paths};

use crate::helpers::{Reply, agent_json, create, send};

/// `--metadata-timeout-ms` of the stacks here: long enough for `task` on a busy machine, short
/// enough for the timeout test.
pub const FIELD_TIMEOUT_MS: u64 = 4000;
/// Slack on top of the field timeout for one request on a busy 2-core machine.
pub const TIMEOUT_MARGIN: Duration = Duration::from_secs(4);
/// A value the registry's environment holds and no task may see.
const SECRET: &str = "s3cret-7f1d2a";

/// Registry and gateway over the sample configs, with the real `task` binary, a 4 s field
/// timeout and a secret in the registry's environment.
pub fn metadata_stack() -> StackOptions {
    let task = paths::tool("venv/bin/task").expect("task is installed");
    StackOptions::full()
        .registry_env("TASKFORCE_TASK_BIN", task.display().to_string())
        .registry_env(
            "TASKFORCE_METADATA_TIMEOUT_MS",
            FIELD_TIMEOUT_MS.to_string(),
        )
        .registry_env("TASKFORCE_TEST_SECRET", SECRET)
}

/// Creates `<stack>/workspaces/<name>` with `taskfile` as its `Taskfile.yml` (none when `None`).
pub fn workspace(stack: &Stack, name: &str, taskfile: Option<&str>) -> PathBuf {
    let dir = stack.root().join("workspaces").join(name);
    std::fs::create_dir_all(&dir).expect("workspace dir");
    if let Some(yaml) = taskfile {
        std::fs::write(dir.join("Taskfile.yml"), yaml).expect("Taskfile.yml");
    }
    dir
}

/// Makes `dir` a git repository on `branch` with one commit.
pub fn git_init(dir: &Path, branch: &str) {
    for args in [
        vec!["init", "-q", "-b", branch],
        vec![
            "-c",
            "user.name=Taskforce Tests",
            "-c",
            "user.email=tests@taskforce.invalid",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "init",
        ],
    ] {
        let out = Command::new("git")
            .args(&args)
            .current_dir(dir)
            .output()
            .expect("git runs");
        assert!(out.status.success(), "git {args:?}: {out:?}");
    }
}

/// Creates a custom agent over REST with a role, a project and (optionally) a workspace.
pub async fn create_agent(stack: &Stack, id: &str, project: &str, workspace: Option<&Path>) {
    let mut body = agent_json(id);
    body["role"] = json!("Coder");
    body["project"] = json!(project);
    if let Some(dir) = workspace {
        body["workspace"] = json!(dir.display().to_string());
    }
    let r = create(stack, &body).await;
    assert_eq!(r.status, 201, "creating {id}: {}", r.text);
}

async fn metadata(stack: &Stack, id: &str, query: &str) -> Reply {
    let url = stack.url(&format!("/api/v1/agents/{id}/metadata{query}"));
    send(stack.http().get(url)).await
}

#[tokio::test]
async fn force_refresh_bypasses_the_cache_and_values_keep_their_json_type() {
    let stack = metadata_stack().spawn().await.expect("stack starts");
    let ws = workspace(
        &stack,
        "counter",
        Some(
            "version: '3'\ntasks:\n  counter:\n    desc: A number read from a file\n    meta: {include_in_list: true}\n    cmds: [cat counter.txt]\n  flag:\n    desc: A boolean\n    cmds: [echo true]\n",
        ),
    );
    std::fs::write(ws.join("counter.txt"), "41\n").expect("counter");
    create_agent(&stack, "counter-agent", "Metrics", Some(&ws)).await;

    let r = metadata(&stack, "counter-agent", "").await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        r.body,
        json!({
            "agent_id": "counter-agent",
            "metadata_count": 2,
            "metadata": {
                "counter": {"value": 41, "error": null,
                    "schema": {"description": "A number read from a file", "include_in_list": true}},
                "flag": {"value": true, "error": null,
                    "schema": {"description": "A boolean", "include_in_list": false}}
            }
        })
    );

    std::fs::write(ws.join("counter.txt"), "42\n").expect("counter");
    let cached = metadata(&stack, "counter-agent", "?force_refresh=false").await;
    assert_eq!(
        cached.body["metadata"]["counter"]["value"], 41,
        "{}",
        cached.text
    );
    let fresh = metadata(&stack, "counter-agent", "?force_refresh=true").await;
    assert_eq!(
        fresh.body["metadata"]["counter"]["value"], 42,
        "{}",
        fresh.text
    );
    // The refresh replaced the cached entry.
    let after = metadata(&stack, "counter-agent", "").await;
    assert_eq!(
        after.body["metadata"]["counter"]["value"], 42,
        "{}",
        after.text
    );
}

#[tokio::test]
async fn unknown_and_invalid_ids_and_agents_without_workspace() {
    let stack = metadata_stack().spawn().await.expect("stack starts");
    metadata(&stack, "no-such-agent", "")
        .await
        .assert_error(404, "not_found");
    metadata(&stack, "Bad..Id", "")
        .await
        .assert_error(400, "invalid_argument")
        .assert_names("agent_id");
    metadata(&stack, "invoice-extractor", "?force_refresh=maybe")
        .await
        .assert_error(400, "invalid_argument");
    // A sample agent without a workspace, and a profile agent: no metadata, no error.
    for id in ["invoice-extractor", "dev"] {
        let r = metadata(&stack, id, "?force_refresh=true").await;
        assert_eq!(
            r.body,
            json!({"agent_id": id, "metadata_count": 0, "metadata": {}}),
            "{}",
            r.text
        );
    }
}

#[tokio::test]
async fn failures_and_timeouts_are_field_errors_within_the_timeout() {
    let stack = metadata_stack().spawn().await.expect("stack starts");
    let ws = workspace(
        &stack,
        "troubled",
        Some(
            "version: '3'\ntasks:\n  ok:\n    desc: Works\n    cmds: [echo fine]\n  broken:\n    desc: Fails\n    cmds: [ls /definitely/not/here]\n  slow:\n    desc: Too slow\n    cmds: [sleep 347]\n  background:\n    desc: Leaves a helper running\n    cmds: [\"sh -c 'sleep 348 > /dev/null 2>&1 &'\", echo started]\n  helper:\n    cmds: [echo not a field]\n",
        ),
    );
    create_agent(&stack, "troubled-agent", "Setup", Some(&ws)).await;
    let sleeping = || taskforce_tests::process::processes_with_args(&["sleep", "347"]);
    let left = || taskforce_tests::process::processes_with_args(&["sleep", "348"]);
    let before = (sleeping().len(), left().len());
    let started = Instant::now();
    let r = metadata(&stack, "troubled-agent", "").await;
    let took = started.elapsed();
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(
        took < Duration::from_millis(FIELD_TIMEOUT_MS) + TIMEOUT_MARGIN,
        "took {took:?}"
    );
    let m = &r.body["metadata"];
    assert_eq!(
        r.body["metadata_count"], 4,
        "tasks without desc are no fields: {m}"
    );
    assert_eq!(m["ok"]["value"], "fine");
    assert_eq!(m["background"]["value"], "started", "{m}");
    assert_eq!(m["broken"]["value"], Value::Null);
    let broken = m["broken"]["error"].as_str().unwrap_or_default();
    assert!(
        broken.contains("ls /definitely/not/here") && broken.contains("failed"),
        "error names the command and the failure: {broken:?}"
    );
    assert_eq!(m["slow"]["value"], Value::Null);
    let slow = m["slow"]["error"].as_str().unwrap_or_default();
    assert!(
        slow.contains("sleep 347") && slow.contains("timed out"),
        "{slow:?}"
    );
    // Nothing of the timed-out task is left running (audit 8: its `sleep` outlived it).
    let gone = taskforce_tests::eventually(
        Duration::from_secs(5),
        Duration::from_millis(100),
        || async { (sleeping().len() <= before.0 && left().len() <= before.1).then_some(()) },
    )
    .await;
    assert!(
        gone.is_some(),
        "a task's processes are still running (timed out: {:?}; left behind: {:?})",
        sleeping(),
        left()
    );
}

#[tokio::test]
async fn tasks_do_not_see_the_registry_environment() {
    let stack = metadata_stack().spawn().await.expect("stack starts");
    let ws = workspace(
        &stack,
        "snoop",
        Some(
            "version: '3'\ntasks:\n  environment:\n    desc: Everything a task sees\n    cmds: [env]\n  secret:\n    desc: One variable\n    cmds: ['echo \"secret=$TASKFORCE_TEST_SECRET\"']\n",
        ),
    );
    create_agent(&stack, "snoop-agent", "Setup", Some(&ws)).await;
    let r = metadata(&stack, "snoop-agent", "").await;
    assert_eq!(r.status, 200, "{}", r.text);
    let env = r.body["metadata"]["environment"]["value"]
        .as_str()
        .unwrap_or_default();
    assert!(env.contains("PATH="), "env ran: {}", r.text);
    assert_eq!(r.body["metadata"]["secret"]["value"], "secret=");
    assert!(!r.text.contains(SECRET), "the secret leaked: {}", r.text);
    let log = std::fs::read_to_string(stack.registry_log()).unwrap_or_default();
    assert!(!log.contains(SECRET), "the secret is in the registry log");
}

#[tokio::test]
async fn tasks_run_confined_to_their_workspace_like_the_agents_tools() {
    let stack = metadata_stack().spawn().await.expect("stack starts");
    // The agent's own tools can write its Taskfile: what it runs may not write elsewhere or
    // call the services.
    let outside = stack.root().join("planted-by-a-task.txt");
    let taskfile = format!(
        "version: '3'\ntasks:\n  inside:\n    desc: Writes in the workspace\n    cmds: ['echo ok > here.txt && cat here.txt']\n  \
         outside:\n    desc: Writes outside\n    cmds: ['echo pwned > {}']\n  \
         registry:\n    desc: Calls the registry\n    cmds: ['python3 -c \"import socket; socket.create_connection((\\\"127.0.0.1\\\", {}), timeout=3)\"']\n  \
         files:\n    desc: Open files limit\n    cmds: ['python3 -c \"import resource; print(resource.getrlimit(resource.RLIMIT_NOFILE)[0])\"']\n",
        outside.display(),
        stack.registry_addr().port()
    );
    let ws = workspace(&stack, "confined", Some(&taskfile));
    create_agent(&stack, "confined-agent", "Setup", Some(&ws)).await;
    let r = metadata(&stack, "confined-agent", "").await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["metadata"]["inside"]["value"], "ok", "{}", r.text);
    let log = std::fs::read_to_string(stack.registry_log()).unwrap_or_default();
    // The test command builds every binary, the launcher among them: no silent skip.
    assert!(
        !log.contains("run unconfined"),
        "no taskforce-sandbox beside the registry: {log}"
    );
    assert!(
        !outside.exists(),
        "a task wrote outside its workspace: {}",
        r.text
    );
    assert!(
        r.body["metadata"]["outside"]["error"].is_string(),
        "{}",
        r.text
    );
    assert!(
        r.body["metadata"]["registry"]["error"].is_string(),
        "{}",
        r.text
    );
    // The tools' resource limits too (open files: 256 by default).
    assert_eq!(r.body["metadata"]["files"]["value"], 256, "{}", r.text);
}

/// A Taskfile under another of the names `task` looks for is read too, and where several are
/// there, the one `task` itself would pick: `Taskfile.yaml` before `Taskfile.dist.yml`, and a
/// user's `Taskfile.yml` over the committed `Taskfile.dist.yml`.
#[tokio::test]
async fn a_taskfile_under_any_of_tasks_names_is_read_as_task_picks_it() {
    let stack = metadata_stack().spawn().await.expect("stack starts");
    let field = |value: &str| {
        format!("version: '3'\ntasks:\n  picked:\n    desc: Which file\n    cmds: [echo {value}]\n")
    };
    let ws = workspace(&stack, "names", None);
    create_agent(&stack, "names-agent", "Names", Some(&ws)).await;
    let picked = |r: &Reply| r.body["metadata"]["picked"]["value"].clone();

    std::fs::write(ws.join("Taskfile.dist.yml"), field("dist")).expect("dist");
    let r = metadata(&stack, "names-agent", "?force_refresh=true").await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(picked(&r), json!("dist"), "{}", r.text);
    assert_eq!(
        r.body["metadata"]["picked"]["error"],
        Value::Null,
        "{}",
        r.text
    );

    std::fs::write(ws.join("Taskfile.yaml"), field("yaml")).expect("yaml");
    let r = metadata(&stack, "names-agent", "?force_refresh=true").await;
    assert_eq!(picked(&r), json!("yaml"), "{}", r.text);

    std::fs::write(ws.join("Taskfile.yml"), field("yml")).expect("yml");
    let r = metadata(&stack, "names-agent", "?force_refresh=true").await;
    assert_eq!(picked(&r), json!("yml"), "{}", r.text);

    // None of them: no metadata, as without a Taskfile.
    for name in ["Taskfile.yml", "Taskfile.yaml", "Taskfile.dist.yml"] {
        std::fs::remove_file(ws.join(name)).expect("remove");
    }
    let r = metadata(&stack, "names-agent", "?force_refresh=true").await;
    assert_eq!(r.body["metadata_count"], 0, "{}", r.text);
}

/// The tasks of the Taskfiles a Taskfile `includes:` are fields too, named as `task --list`
/// names them (`<namespace>:<task>`), with `include_in_list` from the file they are written in;
/// an included `internal: true` task, or one without a `desc`, is none.
#[tokio::test]
async fn the_tasks_of_included_taskfiles_are_fields_named_as_task_lists_them() {
    let stack = metadata_stack().spawn().await.expect("stack starts");
    let ws = workspace(
        &stack,
        "includes",
        Some(
            "version: '3'\nincludes:\n  lint: ./lint\ntasks:\n  top:\n    desc: The root's own\n    cmds: [echo top]\n",
        ),
    );
    std::fs::create_dir_all(ws.join("lint")).expect("lint dir");
    std::fs::write(
        ws.join("lint/Taskfile.yml"),
        "version: '3'\ntasks:\n  warnings:\n    desc: How many warnings\n    meta: {include_in_list: true}\n    cmds: [echo 3]\n  broken:\n    desc: A failing check\n    cmds: [exit 4]\n  helper:\n    cmds: [echo no desc]\n  secret:\n    desc: Internal\n    internal: true\n    cmds: [echo internal]\n",
    )
    .expect("included Taskfile");
    create_agent(&stack, "includes-agent", "Lint", Some(&ws)).await;

    let r = metadata(&stack, "includes-agent", "").await;
    assert_eq!(r.status, 200, "{}", r.text);
    let names: Vec<&str> = r.body["metadata"]
        .as_object()
        .map(|m| m.keys().map(String::as_str).collect())
        .unwrap_or_default();
    assert_eq!(names, ["lint:broken", "lint:warnings", "top"], "{}", r.text);
    assert_eq!(r.body["metadata_count"], 3, "{}", r.text);
    let field = &r.body["metadata"]["lint:warnings"];
    assert_eq!(field["value"], 3, "{}", r.text);
    assert_eq!(field["schema"]["description"], "How many warnings");
    assert_eq!(field["schema"]["include_in_list"], true);
    assert_eq!(r.body["metadata"]["top"]["value"], "top", "{}", r.text);
    // A failing included task names its own command, from its own file.
    let broken = &r.body["metadata"]["lint:broken"];
    assert_eq!(broken["value"], Value::Null, "{}", r.text);
    assert!(
        broken["error"]
            .as_str()
            .is_some_and(|e| e.starts_with("Command 'exit 4' failed")),
        "{}",
        r.text
    );
}

/// A Taskfile the agent's tools could have made into a trap is not read: a named pipe (which
/// would hold the collection, and every request waiting on it, until a writer came) or a
/// symbolic link (to a file outside the workspace). The answer is empty metadata.
#[tokio::test]
async fn a_taskfile_that_is_a_pipe_or_a_link_is_not_read() {
    let stack = metadata_stack().spawn().await.expect("stack starts");
    let piped = workspace(&stack, "piped", None);
    let made = Command::new("mkfifo")
        .arg(piped.join("Taskfile.yml"))
        .status()
        .expect("mkfifo runs");
    assert!(made.success());
    let linked = workspace(&stack, "linked", None);
    let outside = stack.root().join("outside.yml");
    std::fs::write(
        &outside,
        "version: '3'\ntasks:\n  leak:\n    desc: Read through a link\n    cmds: [echo leaked]\n",
    )
    .expect("outside Taskfile");
    std::os::unix::fs::symlink(&outside, linked.join("Taskfile.yml")).expect("link");
    create_agent(&stack, "piped-agent", "Traps", Some(&piped)).await;
    create_agent(&stack, "linked-agent", "Traps", Some(&linked)).await;
    // (Reading the pipe would wait past the gateway's request timeout: a 504, not this 200.)
    for id in ["piped-agent", "linked-agent"] {
        let r = metadata(&stack, id, "?force_refresh=true").await;
        assert_eq!(r.status, 200, "{id}: {}", r.text);
        assert_eq!(r.body["metadata_count"], 0, "{id}: {}", r.text);
    }
}
