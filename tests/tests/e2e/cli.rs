//! The real `taskforce` CLI binary against real stacks: agents (create from YAML, list, show,
//! update on a version, validate, delete) in human and `--json` output through the gateway and over `--grpc`, the tool
//! catalog, runs streamed to completion (`--agent` and `--profile`), a run paused on `ask_user`
//! (exit 2) that `answer` completes, `sessions show`, `health` probes, and bad input.
//!
//! `--json` output is compared with the gateway's own REST answers, in both modes: the CLI's
//! gRPC mode converts protobuf to the gateway's shapes itself, and these comparisons keep the
//! two from drifting apart.

use std::{
    path::Path,
    process::Stdio,
    time::{Duration, Instant},
};

use serde_json::{Value, json};
use taskforce_tests::{Stack, StackOptions, paths};

use crate::helpers::{NATIVE_TOOLS, create_agent_with_tools, is_version, send};

/// Longest a CLI invocation may take (a whole scripted run included).
const CLI_TIMEOUT: Duration = Duration::from_secs(90);

/// What a CLI invocation did.
#[derive(Debug)]
pub(crate) struct Out {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Out {
    /// Asserts exit code `code`; returns stdout.
    pub(crate) fn expect_code(&self, code: i32) -> &str {
        assert_eq!(
            self.code,
            Some(code),
            "exit code\n--- stdout\n{}\n--- stderr\n{}",
            self.stdout,
            self.stderr
        );
        &self.stdout
    }

    /// Asserts success and parses stdout as one JSON value.
    fn json(&self) -> Value {
        let out = self.expect_code(0);
        serde_json::from_str(out.trim())
            .unwrap_or_else(|e| panic!("stdout is one JSON value ({e}):\n{out}"))
    }

    /// Parses stdout as JSON lines.
    fn json_lines(&self) -> Vec<Value> {
        self.stdout
            .lines()
            .map(|l| {
                serde_json::from_str(l)
                    .unwrap_or_else(|e| panic!("a JSON line ({e}): {l}\n{}", self.stdout))
            })
            .collect()
    }
}

/// Runs `taskforce args...` through the gateway, then the same over `--grpc`: both answers, in
/// that order.
async fn cli_both_modes(stack: &Stack, args: &[&str]) -> [Out; 2] {
    let grpc: Vec<&str> = std::iter::once("--grpc")
        .chain(args.iter().copied())
        .collect();
    [cli(stack, args).await, cli(stack, &grpc).await]
}

/// Runs `taskforce args...` with the stack's gateway, registry and executor in its environment
/// (as `TASKFORCE_*_URL`), nothing else of this process's Taskforce or proxy settings.
pub(crate) async fn cli(stack: &Stack, args: &[&str]) -> Out {
    let mut env = vec![
        (
            "TASKFORCE_REGISTRY_URL",
            format!("http://{}", stack.registry_addr()),
        ),
        ("TASKFORCE_GATEWAY_URL", stack.gateway_url()),
    ];
    if let Some(addr) = stack.executor_addr() {
        env.push(("TASKFORCE_EXECUTOR_URL", format!("http://{addr}")));
    }
    run_cli(&env, args).await
}

/// Runs the CLI with exactly these `TASKFORCE_*` variables.
pub(crate) async fn run_cli(env: &[(&str, String)], args: &[&str]) -> Out {
    let bin = paths::cli().expect("the taskforce CLI is built");
    let mut cmd = tokio::process::Command::new(bin);
    cmd.args(args)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .env_remove("TASKFORCE_GATEWAY_URL")
        .env_remove("TASKFORCE_REGISTRY_URL")
        .env_remove("TASKFORCE_EXECUTOR_URL")
        .env_remove("TASKFORCE_TIMEOUT_SECS")
        .env_remove("TASKFORCE_IDLE_TIMEOUT_SECS");
    for var in [
        "http_proxy",
        "https_proxy",
        "all_proxy",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
    ] {
        cmd.env_remove(var);
    }
    cmd.envs(env.iter().map(|(k, v)| (k, v)));
    let out = tokio::time::timeout(CLI_TIMEOUT, cmd.output())
        .await
        .unwrap_or_else(|_| panic!("taskforce {args:?} did not finish within {CLI_TIMEOUT:?}"))
        .expect("the CLI starts");
    Out {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// GET of the gateway's `path` as JSON (asserting 200).
async fn rest(stack: &Stack, path: &str) -> Value {
    let r = send(stack.http().get(stack.url(path))).await;
    assert_eq!(r.status, 200, "GET {path}: {}", r.text);
    r.body
}

/// The session id of the human output's summary line (`session ID: status ...`).
fn session_of(stdout: &str) -> String {
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix("session "))
        .find_map(|rest| rest.split_once(": ").map(|(id, _)| id.to_owned()))
        .unwrap_or_else(|| panic!("no `session ID: status` line in:\n{stdout}"))
}

/// A port nothing listens on while the returned socket lives: bound but not listening (so a
/// connection is refused), and without `SO_REUSEADDR`, so no other test's listener can take it.
fn dead_port() -> (tokio::net::TcpSocket, u16) {
    let socket = tokio::net::TcpSocket::new_v4().expect("a socket");
    socket
        .bind((std::net::Ipv4Addr::LOCALHOST, 0).into())
        .expect("binds a port");
    let port = socket.local_addr().expect("has an address").port();
    (socket, port)
}

fn path_str(p: &Path) -> &str {
    p.to_str().expect("temp paths are UTF-8")
}

#[tokio::test]
async fn a_grpc_listing_larger_than_tonics_default_limit_is_read_whole() {
    let stack = StackOptions::full().spawn().await.expect("stack starts");
    // 20 agents with prompts near the 256 KiB cap: one page of them is over 4 MiB.
    let prompt = "word ".repeat(50_000);
    for i in 0..20 {
        let mut body = crate::helpers::agent_json(&format!("big-agent-{i:02}"));
        body["system_prompt"] = json!(prompt);
        let r = crate::helpers::create(&stack, &body).await;
        assert_eq!(r.status, 201, "{}", r.text);
    }
    let listed = cli(
        &stack,
        &["--grpc", "agents", "list", "--source", "custom", "--json"],
    )
    .await
    .json();
    let big = listed["agents"].as_array().map_or(0, |a| {
        a.iter()
            .filter(|a| {
                a["system_prompt"]
                    .as_str()
                    .is_some_and(|p| p.len() > 200_000)
            })
            .count()
    });
    assert_eq!(big, 20, "every big agent is listed");
}

#[tokio::test]
async fn agents_round_trip_in_human_and_json_output_over_the_gateway_and_grpc() {
    let stack = StackOptions::full().spawn().await.expect("stack starts");

    // The custom file format, without an id: the file name is the id.
    let file = stack.root().join("release-notes.yaml");
    std::fs::write(
        &file,
        "name: Release Notes\ndescription: Writes release notes.\nprompt:\n  system_prompt: |\n    \
         You write concise release notes.\n    Never invent changes.\ntools:\n  allowlist: [git, file_read]\n",
    )
    .expect("writes the definition");
    let created = cli(&stack, &["agents", "create", "-f", path_str(&file)]).await;
    let line = created.expect_code(0).trim().to_owned();
    let version = line
        .strip_prefix("created agent release-notes (version ")
        .and_then(|v| v.strip_suffix(')'))
        .unwrap_or_else(|| panic!("{line}"));
    assert!(is_version(version), "{line}");
    assert!(stack.custom_dir().join("release-notes.yaml").is_file());

    // What the save could not check is said with it: a server only the executor can start.
    let deferred = stack.root().join("clock-later.yaml");
    std::fs::write(
        &deferred,
        [
            "name: Clock",
            "description: Tells the time.",
            "prompt: {system_prompt: Tell the time.}",
            "tools: {allowlist: [ask_user]}",
            "mcp_servers:",
            "  - type: stdio",
            "    command: uvx",
            "    args: [mcp-server-time]",
            "    env: {LOCAL_TIMEZONE: '${TF_E2E_ONLY_THE_EXECUTOR_HAS_IT}'}",
            "mcp_tools: {allowlist: [get_current_time]}",
        ]
        .join("\n"),
    )
    .expect("writes the definition");
    let created = cli(&stack, &["agents", "create", "-f", path_str(&deferred)]).await;
    let said = created.expect_code(0);
    assert!(said.contains("created agent clock-later"), "{said}");
    assert!(!said.contains("warning"), "warnings go to stderr: {said}");
    let warned = &created.stderr;
    assert!(
        warned.contains("warning: mcp_servers[0]: not discovered here")
            && warned.contains("TF_E2E_ONLY_THE_EXECUTOR_HAS_IT"),
        "{warned}"
    );
    let stored = rest(&stack, "/api/v1/agents/release-notes").await;
    assert_eq!(stored["version"], version);
    assert_eq!(stored["tool_allowlist"], json!(["git", "file_read"]));
    assert_eq!(
        stored["system_prompt"],
        "You write concise release notes.\nNever invent changes.\n"
    );

    // The table: a header, the profile and the new custom agent.
    let table = cli(&stack, &["agents", "list"]).await;
    let table = table.expect_code(0);
    let lines: Vec<Vec<&str>> = table
        .lines()
        .map(|l| {
            l.split("  ")
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .collect()
        })
        .collect();
    assert_eq!(
        lines.first().map(Vec::as_slice),
        Some(&["ID", "SOURCE", "STATUS", "NAME", "DESCRIPTION"][..]),
        "{table}"
    );
    assert!(
        lines.contains(&vec![
            "release-notes",
            "custom",
            "idle",
            "Release Notes",
            "Writes release notes."
        ]),
        "{table}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.len() >= 3 && l[..3] == ["dev", "profile", "idle"]),
        "{table}"
    );

    // --json is the gateway's own answer, in both modes.
    let listed = rest(&stack, "/api/v1/agents").await;
    assert_eq!(
        cli(&stack, &["agents", "list", "--json"]).await.json(),
        listed
    );
    assert_eq!(
        cli(&stack, &["--grpc", "agents", "list", "--json"])
            .await
            .json(),
        listed
    );
    // The gateway's `NAME=URL` list in TASKFORCE_EXECUTOR_URL (as a multi-executor host sets
    // it) stops only the commands that use the executor, naming the variable.
    let listing = [
        (
            "TASKFORCE_REGISTRY_URL",
            format!("http://{}", stack.registry_addr()),
        ),
        (
            "TASKFORCE_EXECUTOR_URL",
            "executor-0=http://127.0.0.1:9".to_owned(),
        ),
    ];
    let agents = run_cli(&listing, &["--grpc", "agents", "list", "--json"]).await;
    assert!(agents.expect_code(0).contains("\"agents\""));
    let session = run_cli(&listing, &["--grpc", "sessions", "show", "s-1"]).await;
    session.expect_code(64);
    assert!(
        session.stderr.contains("TASKFORCE_EXECUTOR_URL"),
        "{}",
        session.stderr
    );
    let custom = cli(
        &stack,
        &["--grpc", "agents", "list", "--source", "custom", "--json"],
    )
    .await
    .json();
    assert_eq!(custom, rest(&stack, "/api/v1/agents?source=custom").await);
    assert!(
        custom["agents"]
            .as_array()
            .is_some_and(|a| !a.is_empty() && a.iter().all(|a| a["source"] == "custom")),
        "{custom}"
    );
    assert_eq!(
        cli(&stack, &["agents", "show", "release-notes", "--json"])
            .await
            .json(),
        stored
    );
    assert_eq!(
        cli(
            &stack,
            &["--grpc", "agents", "show", "release-notes", "--json"]
        )
        .await
        .json(),
        stored
    );
    assert_eq!(
        cli(&stack, &["--grpc", "agents", "show", "dev", "--json"])
            .await
            .json(),
        rest(&stack, "/api/v1/agents/dev").await
    );

    // The human view.
    let shown = cli(&stack, &["agents", "show", "release-notes"]).await;
    let shown = shown.expect_code(0);
    for needle in [
        "id:          release-notes\n",
        "source:      custom\n",
        "name:        Release Notes\n",
        "tools:       git, file_read\n",
        &format!("version:     {version}\n"),
        "system prompt:\n  You write concise release notes.\n  Never invent changes.\n",
    ] {
        assert!(shown.contains(needle), "{needle:?} in:\n{shown}");
    }

    // A REST body in YAML, created over gRPC.
    let body_file = stack.root().join("grpc-made.yaml");
    std::fs::write(
        &body_file,
        "agent_id: grpc-made\nname: Made over gRPC\ndescription: A test agent.\n\
         system_prompt: Be brief.\ntool_allowlist: [python]\nmode: read_only\n",
    )
    .expect("writes the body");
    let made = cli(
        &stack,
        &[
            "--grpc",
            "agents",
            "create",
            "-f",
            path_str(&body_file),
            "--json",
        ],
    )
    .await
    .json();
    assert_eq!(made["agent_id"], "grpc-made");
    assert_eq!(made["mode"], "readOnly", "the registry normalised it");
    assert_eq!(made, rest(&stack, "/api/v1/agents/grpc-made").await);

    // A GET body (`agents show --json`) can be created again after a delete.
    let saved = stack.root().join("saved.json");
    std::fs::write(&saved, stored.to_string()).expect("saves the agent");
    let deleted = cli(&stack, &["agents", "delete", "release-notes"]).await;
    assert_eq!(deleted.expect_code(0), "deleted agent release-notes\n");
    send(stack.http().get(stack.url("/api/v1/agents/release-notes")))
        .await
        .assert_error(404, "not_found");
    assert!(!stack.custom_dir().join("release-notes.yaml").exists());
    let again = cli(
        &stack,
        &[
            "--grpc",
            "agents",
            "create",
            "-f",
            path_str(&saved),
            "--json",
        ],
    )
    .await
    .json();
    for field in ["name", "description", "system_prompt", "tool_allowlist"] {
        assert_eq!(again[field], stored[field], "{field}");
    }

    assert_eq!(
        cli(
            &stack,
            &["--grpc", "agents", "delete", "grpc-made", "--json"]
        )
        .await
        .json(),
        json!({"agent_id": "grpc-made", "deleted": true})
    );
    // Deleted over gRPC, so the gateway hears of it on the registry's change stream: soon.
    let gone =
        taskforce_tests::eventually(Duration::from_secs(10), Duration::from_millis(50), || {
            let req = stack.http().get(stack.url("/api/v1/agents/grpc-made"));
            async move {
                let r = send(req).await;
                (r.status == 404).then_some(r)
            }
        })
        .await
        .expect("the gateway no longer serves the deleted agent");
    gone.assert_error(404, "not_found");

    // A deleted agent is an error naming it, in both modes.
    for gone in cli_both_modes(&stack, &["agents", "show", "grpc-made"]).await {
        gone.expect_code(1);
        assert!(gone.stdout.is_empty(), "{}", gone.stdout);
        assert!(
            gone.stderr.starts_with("error: ") && gone.stderr.contains("grpc-made"),
            "{}",
            gone.stderr
        );
        assert!(gone.stderr.contains("not_found"), "{}", gone.stderr);
    }
}

/// The version `agents create|update` printed: `<done> agent ID (version V)`.
fn saved_version(out: &Out, done: &str, id: &str) -> String {
    let line = out.expect_code(0).trim();
    line.strip_prefix(&format!("{done} agent {id} (version "))
        .and_then(|v| v.strip_suffix(')'))
        .filter(|v| is_version(v))
        .unwrap_or_else(|| panic!("{line}"))
        .to_owned()
}

#[tokio::test]
async fn agents_update_validate_and_delete_on_a_version_over_the_gateway_and_grpc() {
    let stack = StackOptions::full().spawn().await.expect("stack starts");
    let file = stack.root().join("notes.yaml");
    std::fs::write(
        &file,
        "name: Notes\ndescription: Takes notes.\nprompt: {system_prompt: Be brief.}\n\
         tools: {allowlist: [file_read]}\n",
    )
    .expect("writes the definition");

    // Validate saves nothing, in both modes, and says what it found.
    let checked = cli(&stack, &["agents", "validate", "-f", path_str(&file)]).await;
    assert_eq!(
        checked.expect_code(0),
        "valid: notes\ndiscovered MCP tools: -\n"
    );
    assert!(!stack.custom_dir().join("notes.yaml").exists());
    let grpc = cli(
        &stack,
        &[
            "--grpc",
            "agents",
            "validate",
            "-f",
            path_str(&file),
            "--json",
        ],
    )
    .await
    .json();
    assert_eq!(
        grpc,
        json!({"valid": true, "discovered_mcp_tools": [], "warnings": []})
    );
    let bad = stack.root().join("bad-tools.yaml");
    std::fs::write(
        &bad,
        "name: B\ndescription: D\nsystem_prompt: P\ntool_allowlist: [nope]\n",
    )
    .expect("writes the definition");
    for refused in cli_both_modes(&stack, &["agents", "validate", "-f", path_str(&bad)]).await {
        refused.expect_code(1);
        assert!(
            refused.stderr.contains("invalid_tools") && refused.stderr.contains("nope"),
            "{}",
            refused.stderr
        );
    }

    let v1 = saved_version(
        &cli(&stack, &["agents", "create", "-f", path_str(&file)]).await,
        "created",
        "notes",
    );
    // A taken id is still valid (as an update), with the warning that a create is a 409.
    let taken = cli(&stack, &["agents", "validate", "-f", path_str(&file)]).await;
    assert!(
        taken
            .expect_code(0)
            .contains("warning: the agent `notes` exists"),
        "{}",
        taken.stdout
    );

    // `agents show --json`, edited and sent back, replaces the version it was read at.
    let mut shown = cli(&stack, &["agents", "show", "notes", "--json"])
        .await
        .json();
    assert_eq!(shown["version"], v1.as_str());
    shown["description"] = json!("Takes careful notes.");
    let edited = stack.root().join("edited.json");
    std::fs::write(&edited, shown.to_string()).expect("saves the edit");
    let v2 = saved_version(
        &cli(&stack, &["agents", "update", "-f", path_str(&edited)]).await,
        "updated",
        "notes",
    );
    assert_ne!(v2, v1);
    let stored = rest(&stack, "/api/v1/agents/notes").await;
    assert_eq!(stored["description"], "Takes careful notes.");
    assert_eq!(stored["version"], v2.as_str());

    // The same file again is stale now (it carries v1), in both modes, and changes nothing.
    for stale in cli_both_modes(&stack, &["agents", "update", "-f", path_str(&edited)]).await {
        stale.expect_code(1);
        assert!(stale.stdout.is_empty(), "{}", stale.stdout);
        assert!(
            stale.stderr.contains("version_conflict"),
            "{}",
            stale.stderr
        );
    }
    assert_eq!(
        rest(&stack, "/api/v1/agents/notes").await["version"],
        v2.as_str()
    );

    // `--if-version` names the version instead; `--force` replaces whatever is stored. (A
    // version is the definition's hash: each step changes the description.)
    let mut edit = |description: &str| {
        shown["description"] = json!(description);
        std::fs::write(&edited, shown.to_string()).expect("saves the edit");
    };
    edit("Takes short notes.");
    let v3 = saved_version(
        &cli(
            &stack,
            &[
                "--grpc",
                "agents",
                "update",
                "-f",
                path_str(&edited),
                "--if-version",
                &v2,
            ],
        )
        .await,
        "updated",
        "notes",
    );
    assert_ne!(v3, v2);
    let both = cli(
        &stack,
        &[
            "agents",
            "update",
            "-f",
            path_str(&edited),
            "--force",
            "--if-version",
            &v3,
        ],
    )
    .await;
    both.expect_code(64);
    // An empty version (a script's unset variable) is no version: refused, not "no check", in
    // the mode where the service could not tell the two apart.
    for args in [
        &[
            "--grpc",
            "agents",
            "update",
            "-f",
            path_str(&edited),
            "--if-version",
            "",
        ][..],
        &["--grpc", "agents", "delete", "notes", "--if-version", ""][..],
    ] {
        let empty = cli(&stack, args).await;
        empty.expect_code(64);
        assert!(empty.stderr.contains("--if-version"), "{}", empty.stderr);
    }
    assert_eq!(
        rest(&stack, "/api/v1/agents/notes").await["version"],
        v3.as_str()
    );
    edit("Takes no notes at all.");
    let forced = cli(
        &stack,
        &[
            "agents",
            "update",
            "-f",
            path_str(&edited),
            "--force",
            "--json",
        ],
    )
    .await
    .json();
    assert_eq!(forced, rest(&stack, "/api/v1/agents/notes").await);
    assert_eq!(forced["description"], "Takes no notes at all.");
    let v4 = forced["version"].as_str().expect("a version").to_owned();
    assert_ne!(v4, v3);

    // An update of an agent that is not there is no create.
    let ghost = stack.root().join("ghost.yaml");
    std::fs::write(
        &ghost,
        "name: G\ndescription: D\nsystem_prompt: P\ntool_allowlist: [git]\n",
    )
    .expect("writes");
    let missing = cli(&stack, &["agents", "update", "-f", path_str(&ghost)]).await;
    missing.expect_code(1);
    assert!(missing.stderr.contains("not_found"), "{}", missing.stderr);
    assert!(!stack.custom_dir().join("ghost.yaml").exists());

    // A delete on a stale version keeps the agent, in both modes; on the stored one it goes.
    for stale in cli_both_modes(&stack, &["agents", "delete", "notes", "--if-version", &v1]).await {
        stale.expect_code(1);
        assert!(
            stale.stderr.contains("version_conflict"),
            "{}",
            stale.stderr
        );
    }
    assert!(stack.custom_dir().join("notes.yaml").is_file());
    let deleted = cli(
        &stack,
        &["--grpc", "agents", "delete", "notes", "--if-version", &v4],
    )
    .await;
    assert_eq!(deleted.expect_code(0), "deleted agent notes\n");
    assert!(!stack.custom_dir().join("notes.yaml").exists());
}

#[tokio::test]
async fn tools_lists_the_catalog_over_the_gateway_and_grpc() {
    let stack = StackOptions::full().spawn().await.expect("stack starts");
    let catalog = rest(&stack, "/api/v1/tools").await;
    assert_eq!(cli(&stack, &["tools", "--json"]).await.json(), catalog);
    assert_eq!(
        cli(&stack, &["--grpc", "tools", "--json"]).await.json(),
        catalog
    );

    let table = cli(&stack, &["tools"]).await;
    let table = table.expect_code(0);
    assert!(
        table.starts_with("NAME ")
            && table
                .lines()
                .next()
                .is_some_and(|l| l.ends_with("DESCRIPTION")),
        "{table}"
    );
    let names: Vec<&str> = table
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    for tool in NATIVE_TOOLS {
        assert!(names.contains(&tool), "{tool} in:\n{table}");
    }
    let file_read = table
        .lines()
        .find(|l| l.starts_with("file_read "))
        .expect("a file_read row");
    let cells: Vec<&str> = file_read.split_whitespace().collect();
    assert_eq!(&cells[1..5], ["native", "LOW", "no", "yes"], "{file_read}");
}

/// One script for every conversation of the run tests, told apart by `match`.
const SCRIPT: &str = r#"
turns:
  - match: "read the notes"
    text: "Let me read the notes."
    tool_calls:
      - name: file_read
        id: call_read
        arguments: {path: notes.txt}
  - match: "total invoice"
    text: "I need one detail first."
    tool_calls:
      - name: ask_user
        id: call_ask
        arguments: {question: "Which currency should the totals use?"}
  - match: "EUR"
    text: "Totals in {{last_message}}: 1234.50"
  - match: "USD"
    text: "Totals in {{last_message}}: 1234.50"
  - text: "Done: {{last_message}}"
"#;

const NOTES: &str = "the secret number is 42";

/// A stack with the executor on [`SCRIPT`], an agent `reader` (file_read) with a notes file
/// in its workspace, and an agent `asker` (ask_user).
async fn run_stack() -> Stack {
    let stack = StackOptions::full()
        .with_executor()
        .llm_script(SCRIPT)
        .spawn()
        .await
        .expect("stack with executor starts");
    create_agent_with_tools(&stack, "reader", &["file_read"]).await;
    create_agent_with_tools(&stack, "asker", &["ask_user"]).await;
    let workspace = stack.executor_workspace("reader");
    std::fs::create_dir_all(&workspace).expect("creates the workspace");
    std::fs::write(workspace.join("notes.txt"), NOTES).expect("writes the notes");
    stack
}

/// The text of the top agent's tokens in a `--json` run.
fn top_text(events: &[Value]) -> String {
    events
        .iter()
        .filter(|e| e["type"] == "token" && e["frame_id"] == "")
        .filter_map(|e| e["text"].as_str())
        .collect()
}

fn types(events: &[Value]) -> Vec<&str> {
    events.iter().filter_map(|e| e["type"].as_str()).collect()
}

#[tokio::test]
async fn run_streams_a_scripted_run_to_completion_and_sessions_show_reads_it() {
    let stack = run_stack().await;

    let human = cli(
        &stack,
        &["run", "--agent", "reader", "Please read the notes"],
    )
    .await;
    let out = human.expect_code(0);
    assert!(out.starts_with("Let me read the notes.\n"), "{out}");
    assert!(
        out.contains("\n→ file_read {\"path\":\"notes.txt\"}\n"),
        "a short tool call line:\n{out}"
    );
    assert!(
        out.lines()
            .any(|l| l.starts_with("← file_read (") && l.contains(NOTES)),
        "a short tool result line:\n{out}"
    );
    assert!(
        out.contains(&format!("Done: {NOTES}")),
        "the streamed answer:\n{out}"
    );
    let session = session_of(out);
    assert!(
        out.ends_with(&format!(
            "\nsession {session}: completed (2 steps, 1 tool call)\n"
        )),
        "{out}"
    );

    // sessions show: human, and --json as the gateway answers, in both modes.
    let shown = cli(&stack, &["sessions", "show", &session]).await;
    let shown = shown.expect_code(0);
    assert!(shown.contains("status:   completed\n"), "{shown}");
    assert!(shown.contains("agent:    reader\n"), "{shown}");
    assert!(
        shown.contains(&format!("final answer:\n  Done: {NOTES}")),
        "{shown}"
    );
    let rest_session = rest(&stack, &format!("/api/v1/sessions/{session}")).await;
    assert_eq!(rest_session["status"], "completed");
    assert_eq!(
        cli(&stack, &["sessions", "show", &session, "--json"])
            .await
            .json(),
        rest_session
    );
    assert_eq!(
        cli(&stack, &["--grpc", "sessions", "show", &session, "--json"])
            .await
            .json(),
        rest_session
    );

    // --json: one event per line, the same run over the gateway's SSE and over gRPC.
    let mut runs = Vec::new();
    for run in cli_both_modes(
        &stack,
        &[
            "--json",
            "run",
            "--agent",
            "reader",
            "Please read the notes",
        ],
    )
    .await
    {
        run.expect_code(0);
        let events = run.json_lines();
        let names = types(&events);
        assert_eq!(names.first(), Some(&"run_started"), "{names:?}");
        assert!(names.ends_with(&["final_answer", "done"]), "{names:?}");
        assert!(
            names.contains(&"tool_start") && names.contains(&"tool_end"),
            "{names:?}"
        );
        let done = &events[events.len() - 1];
        assert_eq!(done["status"], "completed", "{done}");
        let answer = &events[events.len() - 2];
        assert_eq!(answer["text"], format!("Done: {NOTES}"), "{answer}");
        assert_eq!(
            top_text(&events),
            format!("Let me read the notes.Done: {NOTES}")
        );
        let id = events[0]["session_id"].as_str().unwrap_or_default();
        assert!(
            !id.is_empty() && events.iter().all(|e| e["session_id"] == id),
            "every event names the session"
        );
        runs.push(names.into_iter().map(str::to_owned).collect::<Vec<_>>());
    }
    assert_eq!(runs[0], runs[1], "the same events over SSE and gRPC");

    // Seed 000's `--profile` keeps working, in both modes.
    for run in cli_both_modes(&stack, &["run", "--profile", "dev", "Say hello"]).await {
        let out = run.expect_code(0);
        assert!(out.starts_with("Done: Say hello\n"), "{out}");
        assert!(out.contains(": completed ("), "{out}");
    }

    // Continuing a session with --session keeps its id.
    let more = cli(
        &stack,
        &[
            "run",
            "--agent",
            "reader",
            "--session",
            &session,
            "Now read the notes again",
        ],
    )
    .await;
    assert_eq!(session_of(more.expect_code(0)), session);
    // Without --agent, the session's own.
    let more = cli(&stack, &["run", "--session", &session, "Once more"]).await;
    assert_eq!(session_of(more.expect_code(0)), session);
}

#[tokio::test]
async fn a_run_paused_on_ask_user_exits_2_and_answer_completes_it_in_both_modes() {
    let stack = run_stack().await;

    // Through the gateway.
    let paused = cli(&stack, &["run", "--agent", "asker", "Total invoice 42"]).await;
    let out = paused.expect_code(2);
    let session = out
        .lines()
        .find_map(|l| l.strip_prefix("session "))
        .and_then(|l| l.strip_suffix(": paused, waiting for an answer"))
        .unwrap_or_else(|| panic!("a paused summary line:\n{out}"))
        .to_owned();
    assert!(
        out.contains("\n? Which currency should the totals use?\n"),
        "{out}"
    );
    assert!(
        out.ends_with(&format!(
            "answer with: taskforce answer {session} --call-id call_ask \"<your answer>\"\n"
        )),
        "{out}"
    );
    let shown = cli(&stack, &["sessions", "show", &session]).await;
    let shown = shown.expect_code(0);
    assert!(shown.contains("status:   paused\n"), "{shown}");
    assert!(
        shown.contains("question (call_ask):\n  Which currency should the totals use?\n"),
        "{shown}"
    );

    // sessions list finds it with its question, in both modes and both outputs.
    let listed = cli_both_modes(&stack, &["sessions", "list", "--status", "paused"]).await;
    for out in &listed {
        let out = out.expect_code(0);
        let row = out
            .lines()
            .find(|l| l.starts_with(session.as_str()))
            .unwrap_or_else(|| panic!("a row for {session}:\n{out}"));
        assert!(
            row.contains("asker") && row.contains("paused") && row.contains("asks: Which currency"),
            "{out}"
        );
    }
    let [gateway_page, grpc_page] = cli_both_modes(
        &stack,
        &[
            "sessions", "list", "--agent", "asker", "--limit", "1", "--json",
        ],
    )
    .await;
    let page = gateway_page.json();
    assert_eq!(
        page,
        rest(&stack, "/api/v1/sessions?agent_id=asker&page_size=1").await
    );
    assert_eq!(page, grpc_page.json());
    assert_eq!(page["sessions"][0]["session_id"], json!(session), "{page}");
    let bad = cli(&stack, &["sessions", "list", "--status", "sleeping"]).await;
    bad.expect_code(64);
    assert!(bad.stderr.contains("--status"), "{}", bad.stderr);

    let answered = cli(&stack, &["answer", &session, "EUR"]).await;
    let out = answered.expect_code(0);
    assert!(out.contains("Totals in EUR: 1234.50"), "{out}");
    assert!(
        out.contains("← ask_user ("),
        "the answer is announced:\n{out}"
    );
    assert_eq!(session_of(out), session);
    assert!(
        out.contains(&format!("session {session}: completed")),
        "{out}"
    );
    let done = rest(&stack, &format!("/api/v1/sessions/{session}")).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["final_answer"], "Totals in EUR: 1234.50", "{done}");

    // Nothing waits any more: answering again is an error the executor names.
    let again = cli(&stack, &["answer", &session, "USD"]).await;
    again.expect_code(1);
    assert!(
        again.stderr.contains("session_conflict"),
        "{}",
        again.stderr
    );

    // sessions delete, then it is gone for both transports.
    let deleted = cli(&stack, &["sessions", "delete", &session]).await;
    assert_eq!(
        deleted.expect_code(0),
        format!("session {session}: deleted\n")
    );
    let gone = cli(
        &stack,
        &["--grpc", "--json", "sessions", "delete", &session],
    )
    .await;
    gone.expect_code(1);
    assert!(gone.stderr.contains("not_found"), "{}", gone.stderr);

    // Over gRPC, with --json.
    let paused = cli(
        &stack,
        &[
            "--grpc",
            "--json",
            "run",
            "--agent",
            "asker",
            "Total invoice 7",
        ],
    )
    .await;
    paused.expect_code(2);
    let events = paused.json_lines();
    assert!(
        types(&events).ends_with(&["question", "done"]),
        "{events:?}"
    );
    let question = &events[events.len() - 2];
    assert_eq!(question["call_id"], "call_ask", "{question}");
    assert_eq!(events[events.len() - 1]["status"], "paused");
    let session = events[0]["session_id"]
        .as_str()
        .expect("a session id")
        .to_owned();
    let human = cli(&stack, &["--grpc", "sessions", "show", &session, "--json"])
        .await
        .json();
    assert_eq!(human["status"], "paused");
    assert_eq!(human["question"]["call_id"], "call_ask");

    let answered = cli(
        &stack,
        &[
            "--grpc",
            "--json",
            "answer",
            &session,
            "USD",
            "--call-id",
            "call_ask",
        ],
    )
    .await;
    answered.expect_code(0);
    let events = answered.json_lines();
    assert_eq!(events[events.len() - 1]["status"], "completed");
    assert_eq!(top_text(&events), "Totals in USD: 1234.50");
    let done = cli(&stack, &["--grpc", "sessions", "show", &session, "--json"])
        .await
        .json();
    assert_eq!(done["final_answer"], "Totals in USD: 1234.50", "{done}");

    // The hint names --grpc when the run went over gRPC.
    let paused = cli(
        &stack,
        &["--grpc", "run", "--agent", "asker", "Total invoice 9"],
    )
    .await;
    let out = paused.expect_code(2);
    assert!(
        out.contains("answer with: taskforce --grpc answer "),
        "{out}"
    );
    // A question nobody will answer is cancelled, over either transport.
    let waiting = session_of(out);
    let cancelled = cli(&stack, &["--grpc", "cancel", &waiting]).await;
    assert!(
        cancelled
            .expect_code(0)
            .contains(&format!("session {waiting}: cancelled")),
        "{}",
        cancelled.stdout
    );
    let again = cli(&stack, &["--json", "cancel", &waiting]).await.json();
    assert_eq!(again, json!({"cancelled": false}));
    let ended = rest(&stack, &format!("/api/v1/sessions/{waiting}")).await;
    assert_eq!(ended["status"], "cancelled", "{ended}");

    // Connection flags given on the command line are in the hint, so it can be pasted as it
    // is; the token (a secret) is not.
    let registry = format!("http://{}", stack.registry_addr());
    let executor = format!(
        "http://{}",
        stack.executor_addr().expect("the executor runs")
    );
    let gateway = stack.gateway_url();
    let flag_sets: [Vec<&str>; 2] = [
        vec!["--gateway", &gateway, "--idle-timeout", "120"],
        vec!["--grpc", "--registry", &registry, "--executor", &executor],
    ];
    for flags in flag_sets {
        let args: Vec<&str> = flags
            .iter()
            .copied()
            .chain(["--token", "not-to-be-printed"])
            .chain(["run", "--agent", "asker", "Total invoice 11"])
            .collect();
        let paused = run_cli(&[], &args).await;
        let out = paused.expect_code(2);
        assert!(!out.contains("not-to-be-printed"), "{out}");
        let hint = out
            .lines()
            .find_map(|l| l.strip_prefix("answer with: "))
            .unwrap_or_else(|| panic!("a hint in:\n{out}"));
        let session = session_of(out);
        assert_eq!(
            hint,
            format!(
                "taskforce {} answer {session} --call-id call_ask \"<your answer>\"",
                flags.join(" ")
            )
        );
        // Pasted (with an answer), it completes the run.
        let words: Vec<&str> = hint
            .trim_end_matches(" \"<your answer>\"")
            .split(' ')
            .skip(1)
            .chain(["EUR"])
            .collect();
        let answered = run_cli(&[], &words).await;
        let out = answered.expect_code(0);
        assert!(
            out.contains(&format!("session {session}: completed")),
            "{out}"
        );
    }
}

#[tokio::test]
async fn health_probes_grpc_and_http_targets() {
    let stack = StackOptions::full()
        .with_executor()
        .spawn()
        .await
        .expect("stack with executor starts");
    let registry = format!("grpc://{}", stack.registry_addr());
    let executor = format!(
        "grpc://{}",
        stack.executor_addr().expect("the executor runs")
    );
    let healthz = stack.url("/healthz");
    let readyz = stack.url("/readyz");
    for target in [&registry, &executor] {
        let out = cli(&stack, &["health", target]).await;
        assert_eq!(out.expect_code(0), format!("{target}: SERVING\n"));
    }
    let out = cli(
        &stack,
        &[
            "health",
            &registry,
            "--service",
            "taskforce.v1.AgentRegistry",
        ],
    )
    .await;
    out.expect_code(0);
    for target in [&healthz, &readyz] {
        let out = cli(&stack, &["health", target]).await;
        assert_eq!(out.expect_code(0), format!("{target}: 200 OK\n"));
    }
    assert_eq!(
        cli(&stack, &["health", &registry, "--json"]).await.json(),
        json!({"target": registry, "healthy": true, "status": "SERVING"})
    );

    // Nothing listening, a 404, a service the server does not know: not healthy, and fast.
    let (_held, port) = dead_port();
    for target in [
        format!("grpc://127.0.0.1:{port}"),
        format!("http://127.0.0.1:{port}/healthz"),
    ] {
        let started = Instant::now();
        let out = cli(&stack, &["health", &target]).await;
        out.expect_code(1);
        assert!(
            out.stderr
                .contains(&format!("cannot reach the service at {target}")),
            "{}",
            out.stderr
        );
        assert!(started.elapsed() < Duration::from_secs(5), "{target}");
    }
    let missing = stack.url("/nope");
    let out = cli(&stack, &["health", &missing]).await;
    out.expect_code(1);
    assert!(
        out.stderr.contains("is not healthy: HTTP 404 Not Found"),
        "{}",
        out.stderr
    );
    let out = cli(&stack, &["health", &registry, "--service", "no.Such"]).await;
    out.expect_code(1);
    assert!(
        out.stderr.contains("is not healthy: NotFound"),
        "{}",
        out.stderr
    );
    // A target that is none is bad usage.
    let out = cli(&stack, &["health", "localhost:1"]).await;
    out.expect_code(64);
    assert!(
        out.stderr.contains("expected grpc://HOST:PORT"),
        "{}",
        out.stderr
    );
}

#[tokio::test]
async fn bad_input_is_a_clear_error_on_stderr_with_a_nonzero_exit() {
    let stack = StackOptions::full()
        .with_executor()
        .spawn()
        .await
        .expect("stack with executor starts");

    // Unknown agents, in both modes, human and JSON.
    for mode in [&[][..], &["--grpc"][..]] {
        let with = |rest: &[&'static str]| -> Vec<&str> {
            mode.iter().copied().chain(rest.iter().copied()).collect()
        };
        let run = cli(&stack, &with(&["run", "--agent", "no-such-agent", "Do it"])).await;
        run.expect_code(1);
        assert!(run.stdout.is_empty(), "{}", run.stdout);
        assert!(run.stderr.contains("no-such-agent"), "{}", run.stderr);
        let show = cli(
            &stack,
            &with(&["--json", "agents", "show", "no-such-agent"]),
        )
        .await;
        show.expect_code(1);
        let body: Value = serde_json::from_str(show.stderr.trim())
            .unwrap_or_else(|e| panic!("a JSON error body on stderr ({e}): {}", show.stderr));
        assert_eq!(body["error"], "not_found", "{body}");
        assert!(
            body["message"]
                .as_str()
                .is_some_and(|m| m.contains("no-such-agent")),
            "{body}"
        );
    }

    // `--session` continues a session: an id that is none is an error, in both modes, and no
    // session is made under it; `..` is no id either.
    for out in cli_both_modes(
        &stack,
        &[
            "run",
            "--profile",
            "dev",
            "--session",
            "no-such-session",
            "Go on",
        ],
    )
    .await
    {
        out.expect_code(1);
        assert!(
            out.stderr.contains("`no-such-session` does not exist"),
            "{}",
            out.stderr
        );
    }
    for shown in cli_both_modes(&stack, &["--json", "sessions", "show", ".."]).await {
        shown.expect_code(1);
        assert!(
            shown.stderr.contains("invalid_argument"),
            "{}",
            shown.stderr
        );
    }
    let never = send(
        stack
            .http()
            .get(stack.url("/api/v1/sessions/no-such-session")),
    )
    .await;
    assert_eq!(never.status, 404, "{}", never.text);

    // A definition file that is not there, or not a definition.
    let missing = stack.root().join("missing.yaml");
    let out = cli(&stack, &["agents", "create", "-f", path_str(&missing)]).await;
    out.expect_code(1);
    assert!(
        out.stderr
            .starts_with(&format!("error: cannot read {}: ", missing.display())),
        "{}",
        out.stderr
    );
    let list = stack.root().join("list.yaml");
    std::fs::write(&list, "- a\n- b\n").expect("writes");
    let out = cli(&stack, &["agents", "create", "-f", path_str(&list)]).await;
    out.expect_code(1);
    assert!(out.stderr.contains("expected a mapping"), "{}", out.stderr);

    // Unknown tools: the service's error with its lists, in both modes; nothing is written.
    let bad = stack.root().join("bad-one.yaml");
    std::fs::write(
        &bad,
        "name: x\ndescription: y\nsystem_prompt: z\ntool_allowlist: [foo_tool, file_read]\n",
    )
    .expect("writes");
    for out in cli_both_modes(&stack, &["agents", "create", "-f", path_str(&bad)]).await {
        out.expect_code(1);
        assert!(
            out.stderr
                .starts_with("error: Unknown tool(s) in tool_allowlist (invalid_tools"),
            "{}",
            out.stderr
        );
        assert!(
            out.stderr.contains("\n  invalid_tools: foo_tool\n"),
            "{}",
            out.stderr
        );
        assert!(
            out.stderr.contains("\n  available_tools: web_search, "),
            "{}",
            out.stderr
        );
    }
    assert!(!stack.custom_dir().join("bad-one.yaml").exists());

    // Nothing listening: "cannot reach", naming the URL.
    let (_held, port) = dead_port();
    let nowhere = format!("http://127.0.0.1:{port}");
    let out = cli(&stack, &["--gateway", &nowhere, "agents", "list"]).await;
    out.expect_code(1);
    assert!(
        out.stderr
            .starts_with(&format!("error: cannot reach the gateway at {nowhere}: ")),
        "{}",
        out.stderr
    );
    let out = cli(&stack, &["--grpc", "--registry", &nowhere, "tools"]).await;
    out.expect_code(1);
    assert!(
        out.stderr
            .starts_with(&format!("error: cannot reach the registry at {nowhere}: ")),
        "{}",
        out.stderr
    );

    // The wrong kind of port: a gRPC service given as the gateway, the gateway as a gRPC
    // service; each error says what was probably meant.
    let registry_url = format!("http://{}", stack.registry_addr());
    let out = cli(&stack, &["--gateway", &registry_url, "agents", "list"]).await;
    out.expect_code(1);
    assert!(
        out.stderr.contains("is this the gateway's address?"),
        "{}",
        out.stderr
    );
    let gateway_url = stack.gateway_url();
    let out = cli(&stack, &["--grpc", "--registry", &gateway_url, "tools"]).await;
    out.expect_code(1);
    assert!(
        out.stderr.contains("is this the registry's gRPC address"),
        "{}",
        out.stderr
    );

    // A service that takes the connection but never answers: a timeout naming it and the
    // flag, over gRPC as through the gateway.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("binds");
    let silent_url = format!("http://{}", silent.local_addr().expect("an address"));
    let holder = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            held.push(socket);
        }
    });
    let out = cli(
        &stack,
        &[
            "--grpc",
            "--registry",
            &silent_url,
            "--timeout",
            "1",
            "tools",
        ],
    )
    .await;
    out.expect_code(1);
    assert_eq!(
        out.stderr,
        format!("error: the registry at {silent_url} did not answer within 1s (--timeout)\n")
    );
    holder.abort();

    // A definition without an id, in a file whose name is no id: the error says where the id
    // came from and how to fix it, before any request.
    let spaced = stack.root().join("Release Notes.yaml");
    std::fs::write(
        &spaced,
        "name: Release Notes\ndescription: d\nsystem_prompt: p\n",
    )
    .expect("writes");
    let out = cli(&stack, &["agents", "create", "-f", path_str(&spaced)]).await;
    out.expect_code(1);
    assert!(
        out.stderr
            .contains("its name \"Release Notes\" was taken as the id")
            && out
                .stderr
                .contains("add an `agent_id:` field to the file or rename the file")
            && !out.stderr.contains("agent_id: agent_id"),
        "{}",
        out.stderr
    );

    // Bad usage is 64, never 2 (which means "paused"), and is found before any request:
    // a missing argument, no agent to run, a flag value that cannot be right.
    let out = cli(&stack, &["run", "--agent", "dev"]).await;
    out.expect_code(64);
    let out = cli(&stack, &["answer", "some-session"]).await;
    out.expect_code(64);
    for out in cli_both_modes(&stack, &["run", "Do it"]).await {
        out.expect_code(64);
        assert!(
            out.stderr.contains("--agent") && out.stderr.contains("--profile"),
            "{}",
            out.stderr
        );
    }
    for args in [
        &["--gateway", "notaurl", "agents", "list"][..],
        &["--grpc", "--registry", "notaurl", "tools"][..],
        &["run", "--agent", "dev", " "][..],
        // Empty ids are no ids: refused before any request.
        &["agents", "show", ""][..],
        &["agents", "delete", ""][..],
        &["sessions", "show", ""][..],
        &["cancel", ""][..],
        &["answer", "", "yes"][..],
        &["run", "--agent", "", "Do it"][..],
        // The page size's range, in both transports.
        &["sessions", "list", "--limit", "0"][..],
        &["--grpc", "sessions", "list", "--limit", "1001"][..],
        // A gRPC address with a path, and a gRPC service asked of an HTTP target.
        &["health", "grpc://127.0.0.1:1/path"][..],
        &[
            "--grpc",
            "--executor",
            "http://127.0.0.1:1/api",
            "sessions",
            "show",
            "s",
        ][..],
        &["health", "--service", "x", "http://127.0.0.1:1/readyz"][..],
    ] {
        let out = cli(&stack, args).await;
        out.expect_code(64);
        assert!(
            out.stderr.starts_with("error: "),
            "{args:?}: {}",
            out.stderr
        );
    }
    // With --json, clap's refusals are the same error body as every other error.
    for args in [
        &["--json", "run", "Do it"][..],
        &["--json", "--timeout", "abc", "agents", "list"][..],
    ] {
        let out = cli(&stack, args).await;
        out.expect_code(64);
        let body: serde_json::Value = serde_json::from_str(out.stderr.trim())
            .unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {}", out.stderr));
        assert_eq!(body["error"], "invalid_argument", "{body}");
        assert!(
            body["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{body}"
        );
    }
}

/// A python run on `script` with agent `agent_id`, its CLI (`taskforce run`) started with piped
/// output and read up to the line of its first tool call (the run and its session are under
/// way): the stack, the CLI and its stdout's line reader.
async fn cli_run_under_way(
    script: &str,
    agent_id: &str,
) -> (
    Stack,
    tokio::process::Child,
    tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
) {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let stack = StackOptions::full()
        .with_executor()
        .llm_script(script)
        .spawn()
        .await
        .expect("stack starts");
    create_agent_with_tools(&stack, agent_id, &["python"]).await;
    let bin = paths::cli().expect("the taskforce CLI is built");
    let mut child = tokio::process::Command::new(bin)
        .args(["run", "--agent", agent_id, "Do it"])
        .env("TASKFORCE_GATEWAY_URL", stack.gateway_url())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the CLI starts");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let started = tokio::time::timeout(CLI_TIMEOUT, async {
        while let Ok(Some(line)) = stdout.next_line().await {
            if line.starts_with("→ python") {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(started, Ok(true), "the run's tool call was shown");
    (stack, child, stdout)
}

/// The CLI's exit code and stderr once it has exited, and the session its stderr names
/// (`session ID: ...`), checked to have ended cancelled.
async fn exits_naming_a_cancelled_session(
    stack: &Stack,
    child: tokio::process::Child,
) -> (Option<i32>, String) {
    let out = tokio::time::timeout(CLI_TIMEOUT, child.wait_with_output())
        .await
        .expect("the CLI exits")
        .expect("output");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let session = stderr
        .lines()
        .find_map(|l| l.strip_prefix("session "))
        .and_then(|rest| rest.split_once(':'))
        .map(|(id, _)| id.to_owned())
        .unwrap_or_else(|| panic!("no session line: {stderr}"));
    let path = format!("/api/v1/sessions/{session}");
    let ended = taskforce_tests::eventually(CLI_TIMEOUT, Duration::from_millis(50), || async {
        let r = send(stack.http().get(stack.url(&path))).await;
        (r.status == 200 && r.body["status"] == "cancelled").then_some(r.body)
    })
    .await;
    assert!(ended.is_some(), "session {session} ends cancelled");
    (out.status.code(), stderr)
}

#[tokio::test]
async fn ctrl_c_cancels_the_run_exits_130_and_names_the_session() {
    const SCRIPT: &str = r#"
turns:
  - tool_calls:
      - name: python
        id: py
        arguments: {code: "import time\ntime.sleep(60)"}
  - text: "never reached in time"
"#;
    let (stack, child, _stdout) = cli_run_under_way(SCRIPT, "sleeper").await;
    let pid = child.id().expect("running").to_string();
    let sent = tokio::process::Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .await
        .expect("kill runs");
    assert!(sent.success());
    let (code, stderr) = exits_naming_a_cancelled_session(&stack, child).await;
    assert_eq!(code, Some(130), "{stderr}");
    assert!(stderr.contains("interrupted (Ctrl-C)"), "{stderr}");
}

/// A run whose output is closed (`taskforce run ... | head -1`) is cancelled with its stream:
/// the CLI exits 1 (not 0: the run did not complete), naming the session on stderr.
#[tokio::test]
async fn closing_a_runs_output_cancels_it_and_exits_1() {
    const SCRIPT: &str = r#"
turns:
  - tool_calls:
      - name: python
        id: py1
        arguments: {code: "import time\ntime.sleep(1)\nprint('first')"}
  - tool_calls:
      - name: python
        id: py2
        arguments: {code: "import time\ntime.sleep(60)"}
  - text: "never reached in time"
"#;
    let (stack, child, stdout) = cli_run_under_way(SCRIPT, "piped").await;
    // Close the pipe as `head -1` would: the CLI's next line (the call's output, a second
    // later) finds no reader.
    drop(stdout);
    let (code, stderr) = exits_naming_a_cancelled_session(&stack, child).await;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("the output was closed"), "{stderr}");
}
