//! `git`'s allowlist: everyday commands work in the workspace; options that run programs or
//! write elsewhere are refused before git starts, and nothing appears outside.

use std::path::Path;

use executor_svc::tools::ToolError;
use serde_json::{Value, json};

use super::{ctx, ok_text, output, tool};

/// Every entry under `dir`, for "nothing was created here" checks.
fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

#[tokio::test]
async fn everyday_git_works_in_the_workspace() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = ctx(dir.path());
    let git = tool("git");
    let run = |args: Value| {
        let (git, c) = (git.clone(), &c);
        async move { ok_text(git.call(c, json!({ "args": args })).await) }
    };
    run(json!(["init", "-q", "-b", "main"])).await;
    std::fs::write(dir.path().join("a.txt"), "one\n").expect("a");
    run(json!(["add", "a.txt"])).await;
    run(json!(["commit", "-q", "-m", "first"])).await;
    // What readOnly mode lets run does not write: the same content at a newer time leaves the
    // index's file times stale, and `status` would write them back unless git's optional locks
    // are off. (`diff` and `describe --dirty` still refresh them: docs/agent-stream.md.)
    std::thread::sleep(std::time::Duration::from_millis(1100));
    std::fs::write(dir.path().join("a.txt"), "one\n").expect("a");
    let index = dir.path().join(".git/index");
    let before = std::fs::read(&index).expect("index");
    run(json!(["status"])).await;
    assert_eq!(
        std::fs::read(&index).expect("index"),
        before,
        "status rewrote the index"
    );
    std::fs::write(dir.path().join("a.txt"), "one\ntwo\n").expect("a");
    let diff = run(json!(["diff", "--stat"])).await;
    assert!(diff.contains("a.txt | 1 +"), "{diff}");
    run(json!(["commit", "-am", "second"])).await;
    let log = run(json!(["log", "--oneline", "--format=%s|%an"])).await;
    assert!(
        log.contains("second|Taskforce agent tester") && log.contains("first|"),
        "{log}"
    );
    run(json!(["switch", "-c", "feature"])).await;
    let branches = run(json!(["branch", "--list"])).await;
    assert!(branches.contains("* feature"), "{branches}");
    let inside = run(json!(["diff", "--output=out.diff", "HEAD~1"])).await;
    assert!(inside.starts_with("exit code: 0"), "{inside}");
    assert!(
        std::fs::read_to_string(dir.path().join("out.diff"))
            .expect("out.diff")
            .contains("+two")
    );
    // Reading configuration is allowed; the user's configuration is not read (no name set).
    let (cfg, _) = output(
        git.call(&c, json!({ "args": ["config", "--get", "user.name"] }))
            .await,
    );
    assert!(cfg.starts_with("exit code: 1"), "{cfg}");
}

#[tokio::test]
async fn hostile_git_options_are_refused_and_nothing_is_created_outside() {
    let dir = tempfile::tempdir().expect("tempdir");
    let outside = tempfile::tempdir().expect("outside");
    let out = outside.path().display().to_string();
    let c = ctx(dir.path());
    let git = tool("git");
    ok_text(
        git.call(&c, json!({ "args": ["init", "-q", "-b", "main"] }))
            .await,
    );
    std::fs::write(dir.path().join("a.txt"), "a\n").expect("a");
    ok_text(git.call(&c, json!({ "args": ["add", "."] })).await);
    ok_text(
        git.call(&c, json!({ "args": ["commit", "-qm", "a"] }))
            .await,
    );

    let pwned = format!("touch {out}/pwned");
    let cases: Vec<(Value, &str)> = vec![
        (json!(["diff", format!("--output={out}/diff")]), "--output="),
        (
            json!(["clone", format!("--upload-pack={pwned}"), ".", "copy"]),
            "--upload-pack",
        ),
        (json!(["clone", "-u", pwned, ".", "copy"]), "`-u`"),
        (
            json!(["-c", format!("core.sshCommand={pwned}"), "fetch", "origin"]),
            "`-c`",
        ),
        (
            json!(["clone", format!("ext::sh -c touch% {out}/pwned"), "copy"]),
            "ext::",
        ),
        (
            json!(["archive", "-o", format!("{out}/a.tar"), "HEAD"]),
            "`-o`",
        ),
        (json!(["format-patch", "-o", out.clone(), "-1"]), "`-o`"),
        (json!(["-C", "/", "status"]), "`-C`"),
        (
            json!(["clone", "--template", out.clone(), ".", "copy"]),
            "--template",
        ),
        (json!(["rebase", "--exec", pwned, "main"]), "--exec"),
        (json!(["config", "core.pager", "sh"]), "config"),
    ];
    for (args, named) in cases {
        let r = git.call(&c, json!({ "args": args })).await;
        match r {
            Err(ToolError::InvalidArguments { tool, reason }) => {
                assert_eq!(tool, "git");
                assert!(
                    reason.contains(named) && reason.contains("refused"),
                    "{args}: {reason}"
                );
            }
            other => panic!("{args} was not refused: {other:?}"),
        }
    }
    assert!(
        entries(outside.path()).is_empty(),
        "created outside: {:?}",
        entries(outside.path())
    );
    assert!(!dir.path().join("copy").exists());
}

#[tokio::test]
async fn an_argument_the_tool_does_not_take_is_refused_naming_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = super::ctx(dir.path());
    for (name, args, field) in [
        (
            "git",
            serde_json::json!({"args": ["status"], "cwd": "repo"}),
            "cwd",
        ),
        (
            "file_read",
            serde_json::json!({"path": "a.txt", "offset": 3}),
            "offset",
        ),
    ] {
        let r = super::tool(name).call(&c, args).await;
        assert!(
            matches!(&r, Err(executor_svc::tools::ToolError::InvalidArguments { reason, .. }) if reason.contains(field)),
            "{name}: {r:?}"
        );
    }
}

#[tokio::test]
async fn a_nul_byte_is_named_as_such() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = super::ctx(dir.path());
    for (name, args) in [
        (
            "git",
            serde_json::json!({"args": ["commit", "-m", "a\u{0}b"]}),
        ),
        ("file_read", serde_json::json!({"path": "a\u{0}.txt"})),
        (
            "file_write",
            serde_json::json!({"path": "a\u{0}.txt", "content": "x"}),
        ),
    ] {
        let r = super::tool(name).call(&c, args).await;
        assert!(format!("{r:?}").contains("NUL byte"), "{name}: {r:?}");
    }
}
