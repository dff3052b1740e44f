//! Subprocess tools through the real binaries (issue 13): a model's `python` call sees none of
//! the executor's secrets in its environment, cannot write outside its workspace (Landlock,
//! where the kernel enforces it; the executor logs when it does not), and can write inside; it
//! cannot connect to the services' ports (Landlock, kernel 6.7+) nor, even when the executor
//! runs as root, read a service's environment (`/proc/<pid>/environ`: no capabilities).

use serde_json::json;
use taskforce_tests::StackOptions;

use crate::helpers::{RUN_TIMEOUT, SseReader, create_agent_with_tools};

const SECRET: &str = "ghp-confinement-test-secret-0123456789";

/// Python code that reports, in words the test looks for, what it could reach; the registry's
/// port and pid are in `target.txt` in its workspace.
fn probe_code(outside: &str) -> String {
    format!(
        "import os, socket, tempfile\n\
         port, pid = open('target.txt').read().split()\n\
         print('SECRET-SEEN' if any('{SECRET}' in v for v in os.environ.values()) else 'NO-SECRET')\n\
         try:\n    open({outside:?}, 'w').write('x')\n    print('WROTE-OUTSIDE')\n\
         except OSError as e:\n    print('REFUSED', e.errno)\n\
         try:\n    socket.create_connection(('127.0.0.1', int(port)), timeout=5).close()\n    print('REACHED-REGISTRY')\n\
         except OSError as e:\n    print('NET-REFUSED', e.errno)\n\
         try:\n    socket.socket(socket.AF_INET, socket.SOCK_STREAM, 262).connect(('127.0.0.1', int(port)))\n    print('REACHED-BY-MPTCP')\n\
         except OSError as e:\n    print('MPTCP-REFUSED', e.errno)\n\
         try:\n    socket.socket().sendto(b'x', socket.MSG_FASTOPEN, ('127.0.0.1', int(port)))\n    print('REACHED-BY-FAST-OPEN')\n\
         except OSError as e:\n    print('FAST-OPEN-REFUSED', e.errno)\n\
         try:\n    socket.socket().bind(('127.0.0.1', 0))\n    print('BOUND-EPHEMERAL')\n\
         except OSError as e:\n    print('EPHEMERAL-REFUSED', e.errno)\n\
         try:\n    open('/proc/%s/environ' % pid, 'rb').read()\n    print('READ-ENVIRON')\n\
         except OSError as e:\n    print('ENVIRON-REFUSED', e.errno)\n\
         print('CAPS', [l.split()[1] for l in open('/proc/self/status') if l.startswith(('CapEff', 'CapBnd'))])\n\
         print('TMPDIR=' + os.environ['TMPDIR'])\n\
         try:\n    d = tempfile.mkdtemp(prefix='pymp-')\n    s = socket.socket(socket.AF_UNIX)\n    s.bind(os.path.join(d, 'listener-abcdefgh'))\n    s.close()\n    print('UNIX-SOCKET-BOUND')\n\
         except OSError as e:\n    print('UNIX-SOCKET-FAILED', e)\n\
         for name, path in (('KEY', '../../state_token.key'), ('OTHER', '../neighbour/notes.txt'), ('OTHER-TMP', '../../tmp/tf-other/data.csv')):\n    try:\n        open(path, 'rb').read()\n        print('READ-' + name)\n    except OSError as e:\n        print(name + '-REFUSED', e.errno)\n\
         print('ETC-READ' if open('/etc/hostname').read() is not None else 'ETC-REFUSED')\n\
         open('inside.txt', 'w').write('ok')\n\
         print('WROTE-INSIDE')\n"
    )
}

#[tokio::test]
async fn python_sees_no_secrets_and_writes_only_in_its_workspace() {
    let outside_dir = tempfile::tempdir().expect("temp dir");
    let outside = outside_dir.path().join("escaped.txt");
    let script = format!(
        "turns:\n  - tool_calls:\n      - name: python\n        id: py\n        arguments:\n          code: {}\n  - text: \"done\"\n",
        serde_json::to_string(&probe_code(&outside.display().to_string())).expect("JSON string")
    );
    let stack = StackOptions::full()
        .with_executor()
        .executor_env("GITHUB_TOKEN", SECRET)
        .llm_script(script)
        .spawn()
        .await
        .expect("stack starts");
    create_agent_with_tools(&stack, "pythonist", &["python"]).await;
    let workspace = stack.executor_workspace("pythonist");
    std::fs::create_dir_all(&workspace).expect("workspace");
    // Another agent's workspace beside this one, in the executor's data directory.
    let neighbour = stack.executor_workspace("neighbour");
    std::fs::create_dir_all(&neighbour).expect("neighbour");
    std::fs::write(neighbour.join("notes.txt"), "private").expect("neighbour's notes");
    // And another call's temp dir, where the executor makes them (tools audit 11 F5).
    let other_tmp = stack.executor_data_dir().join("tmp/tf-other");
    std::fs::create_dir_all(&other_tmp).expect("other call's temp dir");
    std::fs::write(other_tmp.join("data.csv"), "alice,4111").expect("other call's file");
    let registry_pid = stack.registry_pid().expect("registry pid");
    std::fs::write(
        workspace.join("target.txt"),
        format!("{} {registry_pid}", stack.registry_addr().port()),
    )
    .expect("target written");
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
    // Python's multiprocessing makes its sockets in TMPDIR: the path leaves room for them.
    assert!(output.contains("UNIX-SOCKET-BOUND"), "{output}");
    let tmp_root = stack.executor_data_dir().join("tmp/tf-");
    assert!(
        output.contains(&format!("TMPDIR={}", tmp_root.display())),
        "each call's temp dir is in the data dir: {output}"
    );
    let log = std::fs::read_to_string(stack.executor_log()).unwrap_or_default();
    // Only the kernel may excuse the checks below: a probe that failed (as when it ran in a
    // directory holding the data dir) would silently turn them off.
    assert!(
        !log.contains("the probe failed") && !log.contains("the probe could not run"),
        "the Landlock probe failed: {log}"
    );
    if log.contains("the kernel does not enforce Landlock") {
        eprintln!(
            "note: this kernel does not enforce Landlock; the write confinement is not checked"
        );
        return;
    }
    assert!(output.contains("REFUSED"), "{output}");
    assert!(!outside.exists(), "python wrote {}", outside.display());
    // No capabilities, even as root: a non-dumpable service's environment stays closed.
    assert!(output.contains("ENVIRON-REFUSED"), "{output}");
    // Nor can it read the executor's data directory (the state-token key, other agents'
    // workspaces, the sessions: audit 7 F1); the rest of the file system it can.
    assert!(output.contains("KEY-REFUSED 13"), "{output}");
    assert!(output.contains("OTHER-REFUSED 13"), "{output}");
    assert!(output.contains("OTHER-TMP-REFUSED 13"), "{output}");
    assert!(output.contains("ETC-READ"), "{output}");
    assert!(
        output.contains("'0000000000000000', '0000000000000000'"),
        "no effective and no bounding capabilities: {output}"
    );
    if log.contains("partially-enforced") {
        eprintln!("note: this kernel has no Landlock network rules; the port check is skipped");
        return;
    }
    assert!(output.contains("NET-REFUSED 13"), "{output}");
    // Where Landlock does not look: seccomp refuses MPTCP and TCP Fast Open.
    assert!(output.contains("MPTCP-REFUSED 13"), "{output}");
    assert!(output.contains("FAST-OPEN-REFUSED 13"), "{output}");
    assert!(output.contains("BOUND-EPHEMERAL"), "{output}");
}

#[tokio::test]
async fn hostile_git_options_are_refused_and_write_nothing_outside() {
    let outside_dir = tempfile::tempdir().expect("temp dir");
    let out = |name: &str| outside_dir.path().join(name).display().to_string();
    let calls = [
        json!(["init"]),
        json!(["diff", format!("--output={}", out("diff.txt"))]),
        json!([
            "clone",
            format!("--upload-pack=touch {}", out("pwned")),
            "ext::sh -c touch% /tmp/x",
            "repo"
        ]),
        json!([
            "-c",
            format!("core.sshCommand=touch {}", out("ssh")),
            "status"
        ]),
        json!(["-C", "/", "status"]),
        json!(["archive", "-o", out("archive.tar"), "HEAD"]),
        json!(["format-patch", "-o", out("patches"), "HEAD~1"]),
        json!(["status"]),
    ];
    let lines: Vec<String> = calls
        .iter()
        .enumerate()
        .map(|(i, args)| format!("      - {{name: git, id: g{i}, arguments: {{args: {args}}}}}"))
        .collect();
    let script = format!(
        "turns:\n  - tool_calls:\n{}\n  - text: \"done\"\n",
        lines.join("\n")
    );
    let stack = StackOptions::full()
        .with_executor()
        .llm_script(script)
        .spawn()
        .await
        .expect("stack starts");
    create_agent_with_tools(&stack, "gitter", &["git"]).await;
    let mut sse = SseReader::open(
        &stack,
        "/api/v1/execute/stream",
        &json!({"mission": "use git", "agent_id": "gitter"}),
    )
    .await;
    let events = sse.rest(RUN_TIMEOUT).await;
    let outcome = |id: &str| {
        events
            .iter()
            .find(|(n, e)| (n == "tool_end" || n == "tool_error") && e["call_id"] == id)
            .map(|(n, e)| (n.clone(), e.to_string()))
            .unwrap_or_else(|| panic!("no outcome for {id}: {events:?}"))
    };
    // Everyday git works in the workspace...
    for id in ["g0", "g7"] {
        let (name, text) = outcome(id);
        assert_eq!(name, "tool_end", "{id}: {text}");
    }
    // ... the hostile calls are refused, saying why.
    for id in ["g1", "g2", "g3", "g4", "g5", "g6"] {
        let (name, text) = outcome(id);
        assert_eq!(name, "tool_error", "{id} ran: {text}");
        assert!(
            text.contains("refused") || text.contains("not allowed"),
            "{id}: {text}"
        );
    }
    let left: Vec<_> = std::fs::read_dir(outside_dir.path())
        .expect("read dir")
        .filter_map(Result::ok)
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "git wrote outside its workspace: {left:?}");
}

/// Reads the state-token key and writes beside it, from a workspace that holds the data dir.
const WIDE_SCRIPT: &str = r#"
turns:
  - tool_calls:
      - {name: file_read, id: read, arguments: {path: executor/state_token.key}}
      - {name: file_write, id: write, arguments: {path: executor/workspaces/other/planted.txt, content: x}}
  - text: "done"
"#;

#[tokio::test]
async fn file_tools_refuse_a_workspace_that_holds_the_executors_data_dir() {
    let stack = StackOptions::full()
        .with_executor()
        .llm_script(WIDE_SCRIPT)
        .spawn()
        .await
        .expect("stack starts");
    let data = stack.executor_data_dir();
    let wide = data
        .parent()
        .expect("the data dir has a parent")
        .to_path_buf();
    assert!(
        data.join("state_token.key").exists(),
        "the key is there to take"
    );
    let mut body = crate::helpers::agent_json("wide");
    body["tool_allowlist"] = json!(["file_read", "file_write"]);
    body["workspace"] = json!(wide);
    let r = crate::helpers::create(&stack, &body).await;
    assert_eq!(r.status, 201, "{}", r.text);
    let mut sse = SseReader::open(
        &stack,
        "/api/v1/execute/stream",
        &json!({"mission": "take it", "agent_id": "wide"}),
    )
    .await;
    let events = sse.rest(RUN_TIMEOUT).await;
    for call in ["read", "write"] {
        let (name, outcome) = events
            .iter()
            .find(|(n, e)| (n == "tool_end" || n == "tool_error") && e["call_id"] == call)
            .unwrap_or_else(|| panic!("no {call} outcome: {events:?}"));
        assert_eq!(name, "tool_error", "{outcome}");
        let message = outcome["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("holds") && message.contains(&*data.to_string_lossy()),
            "{message}"
        );
    }
    // Nor one inside it: `<data dir>/workspaces` holds the other agents' (review s16 R4).
    let mut body = crate::helpers::agent_json("nosy");
    body["tool_allowlist"] = json!(["file_read", "file_write"]);
    std::fs::create_dir_all(data.join("workspaces/other")).expect("workspaces");
    body["workspace"] = json!(data.join("workspaces"));
    let r = crate::helpers::create(&stack, &body).await;
    assert_eq!(r.status, 201, "{}", r.text);
    let mut sse = SseReader::open(
        &stack,
        "/api/v1/execute/stream",
        &json!({"mission": "take it", "agent_id": "nosy"}),
    )
    .await;
    let nosy = sse.rest(RUN_TIMEOUT).await;
    let refused = nosy
        .iter()
        .filter(|(n, e)| {
            n == "tool_error"
                && e["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("is inside"))
        })
        .count();
    assert_eq!(refused, 2, "{nosy:?}");
    assert!(!data.join("workspaces/other/planted.txt").exists());
    assert!(
        !data.join("workspaces/executor").exists(),
        "nothing written inside"
    );
    let key = std::fs::read(data.join("state_token.key")).expect("key");
    let text = events
        .iter()
        .map(|(_, e)| e.to_string())
        .collect::<String>();
    assert!(!text.contains(&hex::encode(&key)) && !text.contains(&*String::from_utf8_lossy(&key)));
}

#[tokio::test]
async fn git_alone_cannot_write_itself_a_config_that_runs_a_program() {
    // Tools audit 11 F1: a commit message written over `.git/config` by git's own `--output`,
    // naming an external diff program; the next `git diff` would run it.
    let message = "[core]\n\trepositoryformatversion = 0\n\tbare = false\n[diff]\n\texternal = sh -c \"touch PWNED\" --\n";
    let calls = [
        json!(["init", "-q", "repo"]),
        json!(["-C", "repo", "commit", "--allow-empty", "-qm", message]),
        json!([
            "-C",
            "repo",
            "log",
            "-1",
            "--format=%B",
            "--output=.git/config"
        ]),
        json!(["-C", "repo", "diff"]),
        json!(["-C", "repo", "status"]),
    ];
    // One call a turn: the calls of one turn run at once.
    let mut turns: Vec<serde_json::Value> = calls
        .iter()
        .enumerate()
        .map(|(i, args)| {
            json!({"tool_calls": [{"name": "git", "id": format!("g{i}"), "arguments": {"args": args}}]})
        })
        .collect();
    turns.push(json!({"text": "done"}));
    let script = json!({ "turns": turns });
    let stack = StackOptions::full()
        .with_executor()
        .llm_script(serde_yaml::to_string(&script).expect("YAML"))
        .spawn()
        .await
        .expect("stack starts");
    create_agent_with_tools(&stack, "gitonly", &["git"]).await;
    let mut sse = SseReader::open(
        &stack,
        "/api/v1/execute/stream",
        &json!({"mission": "try it", "agent_id": "gitonly"}),
    )
    .await;
    let events = sse.rest(RUN_TIMEOUT).await;
    let outcome = |call: &str| {
        events
            .iter()
            .find(|(n, e)| (n == "tool_end" || n == "tool_error") && e["call_id"] == call)
            .map(|(n, e)| (n.clone(), e.to_string()))
            .unwrap_or_else(|| panic!("no outcome of {call}: {events:?}"))
    };
    for call in ["g3", "g4"] {
        let (name, text) = outcome(call);
        assert_eq!(name, "tool_error", "{text}");
        assert!(text.contains("`diff.external`"), "{text}");
    }
    let workspace = stack.executor_workspace("gitonly");
    assert!(
        std::fs::read_to_string(workspace.join("repo/.git/config"))
            .is_ok_and(|c| c.contains("external")),
        "the config was written as in the audit, so the refusal is what stopped it"
    );
    assert!(!workspace.join("repo/PWNED").exists() && !workspace.join("PWNED").exists());
}
