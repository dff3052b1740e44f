//! The subprocess tools' sandbox: writes only inside the workspace and the call's temp dir,
//! resource limits in effect, no service secrets in the environment, and what a hostile repository
//! configuration makes git run is confined too.

use std::{path::Path, process::Command, time::Duration};

use executor_svc::tools::{
    ToolError,
    native::{LandlockState, NativeToolsConfig, Sandbox, SandboxMode},
};
use serde_json::json;

use super::{config, ctx, ctx_with, ok_text, output, tool_with};

/// Python that writes `inside.txt` in the workspace, a file in its temp dir, and tries a file in
/// `outside`; prints what happened to each.
fn writer(outside: &Path) -> String {
    format!(
        r#"
import os, tempfile
open("inside.txt", "w").write("in")
fd, tmp = tempfile.mkstemp()
os.write(fd, b"t"); os.close(fd)
print("tmp", tmp, os.environ.get("TMPDIR"))
try:
    open({outside:?} + "/escaped.txt", "w").write("out")
    print("outside: written")
except OSError as e:
    print("outside: refused", e.errno)
"#,
        outside = outside.display().to_string()
    )
}

/// True when this host's kernel enforces Landlock (it does where the project's tests run; the
/// confinement tests say so and pass vacuously elsewhere).
fn landlock_enforced() -> bool {
    let enforced = matches!(
        Sandbox::new(config().sandbox).landlock_state(),
        LandlockState::Enforced(_)
    );
    if !enforced {
        eprintln!("this kernel does not enforce Landlock: the write confinement is not tested");
    }
    enforced
}

#[tokio::test]
async fn python_writes_inside_the_workspace_and_its_temp_dir_but_not_outside() {
    let dir = tempfile::tempdir().expect("tempdir");
    let outside = tempfile::tempdir().expect("outside");
    let text = ok_text(
        tool_with(&config(), "python")
            .call(&ctx(dir.path()), json!({ "code": writer(outside.path()) }))
            .await,
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("inside.txt")).expect("inside"),
        "in"
    );
    // The temp dir is the call's own (not the shared /tmp), and is gone after the call.
    let tmp_line = text
        .lines()
        .find(|l| l.starts_with("tmp "))
        .expect("tmp line");
    let tmpdir = tmp_line.split_whitespace().nth(2).expect("TMPDIR");
    assert!(tmpdir.contains("/tf-"), "{text}");
    for _ in 0..50 {
        if !Path::new(tmpdir).exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!Path::new(tmpdir).exists(), "{tmpdir} was left behind");
    if landlock_enforced() {
        assert!(text.contains("outside: refused 13"), "{text}");
        assert!(!outside.path().join("escaped.txt").exists());
    }
}

#[tokio::test]
async fn without_the_sandbox_the_same_write_lands_outside() {
    // The control for the test above: the refusal comes from the sandbox, not from the host.
    let dir = tempfile::tempdir().expect("tempdir");
    let outside = tempfile::tempdir().expect("outside");
    let mut c = config();
    c.sandbox.mode = SandboxMode::None;
    let text = ok_text(
        tool_with(&c, "python")
            .call(&ctx(dir.path()), json!({ "code": writer(outside.path()) }))
            .await,
    );
    assert!(text.contains("outside: written"), "{text}");
}

#[tokio::test]
async fn resource_limits_are_in_effect() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut c = config();
    c.sandbox.limits.open_files = 100;
    c.sandbox.limits.address_space_bytes = 1024 << 20;
    let code = r#"
import resource
print("nofile", resource.getrlimit(resource.RLIMIT_NOFILE))
print("as", resource.getrlimit(resource.RLIMIT_AS))
print("cpu", resource.getrlimit(resource.RLIMIT_CPU))
try:
    b = bytearray(1536 << 20)
    print("allocated")
except MemoryError:
    print("allocation refused")
"#;
    let text = ok_text(
        tool_with(&c, "python")
            .call(&ctx(dir.path()), json!({ "code": code }))
            .await,
    );
    assert!(text.contains("nofile (100, 100)"), "{text}");
    assert!(
        text.contains(&format!("as ({0}, {0})", 1024u64 << 20)),
        "{text}"
    );
    assert!(text.contains("cpu (60, 61)"), "{text}");
    assert!(text.contains("allocation refused"), "{text}");
}

#[tokio::test]
async fn the_cpu_limit_ends_a_busy_loop_long_before_the_timeout() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut c = config();
    c.sandbox.limits.cpu_seconds = 1;
    let started = std::time::Instant::now();
    let (text, is_error) = output(
        tool_with(&c, "python")
            .call(
                &ctx_with(dir.path(), Duration::from_secs(30), 64 * 1024),
                json!({ "code": "while True: pass" }),
            )
            .await,
    );
    assert!(is_error, "{text}");
    // The soft limit's SIGXCPU, or the hard limit's SIGKILL, named.
    assert!(
        text.contains("killed by signal 24 (SIGXCPU)")
            || text.contains("killed by signal 9 (SIGKILL)"),
        "{text}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
}

/// Run by [`python_sees_no_service_secrets`] in a child test process whose environment holds
/// the secrets (this process cannot set variables without `unsafe`); a no-op otherwise.
#[tokio::test]
async fn child_python_environment_probe() {
    let Ok(secret) = std::env::var("TASKFORCE_TEST_SECRET") else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let text = ok_text(
        tool_with(&config(), "python")
            .call(
                &ctx(dir.path()),
                json!({ "code": "import os\nfor k, v in sorted(os.environ.items()): print(k, v)" }),
            )
            .await,
    );
    for leaked in [
        secret.as_str(),
        "OPENAI_API_KEY",
        "GITHUB_TOKEN",
        "TASKFORCE_TEST_SECRET",
    ] {
        assert!(!text.contains(leaked), "{leaked} reached python:\n{text}");
    }
    assert!(text.contains("PATH "), "{text}");
}

#[test]
fn python_sees_no_service_secrets() {
    let exe = std::env::current_exe().expect("current exe");
    let out = Command::new(exe)
        .args([
            "--exact",
            "sandbox::child_python_environment_probe",
            "--test-threads=1",
        ])
        .env("TASKFORCE_TEST_SECRET", "s3cr3t-value-42")
        .env("OPENAI_API_KEY", "sk-test-should-not-leak")
        .env("GITHUB_TOKEN", "ghp_shouldnotleak")
        .output()
        .expect("run the child test");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn git_refuses_a_repository_whose_config_names_a_program_and_runs_no_hook() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = ctx(dir.path());
    let git = tool_with(&config(), "git");
    ok_text(
        git.call(&c, json!({ "args": ["init", "-q", "-b", "main"] }))
            .await,
    );
    std::fs::write(dir.path().join("a.txt"), "a\n").expect("a");
    // A hook and an external diff driver, as another tool (or git's own `--output`) could
    // write them into `.git/`.
    let script = "#!/bin/sh\ntouch ran-in-workspace\n";
    for path in [".git/hooks/pre-commit", "ext-diff.sh"] {
        let p = dir.path().join(path);
        std::fs::write(&p, script).expect("script");
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("chmod");
    }
    let cfg = dir.path().join(".git/config");
    let clean = std::fs::read_to_string(&cfg).expect("config");
    for hostile in [
        format!(
            "[diff]\n\texternal = {}\n",
            dir.path().join("ext-diff.sh").display()
        ),
        "[core]\n\tworktree = /etc\n".to_owned(),
        "[include]\n\tpath = elsewhere.cfg\n".to_owned(),
    ] {
        std::fs::write(&cfg, format!("{clean}{hostile}")).expect("write config");
        std::fs::write(dir.path().join("a.txt"), "b\n").expect("a");
        for args in [json!(["diff"]), json!(["status"]), json!(["add", "a.txt"])] {
            let refused = git.call(&c, json!({ "args": args })).await;
            let text = format!("{refused:?}");
            assert!(refused.is_err(), "{hostile}: {args} ran: {text}");
            assert!(
                text.contains("does not run with")
                    && text.contains("the repository's configuration"),
                "{text}"
            );
        }
        assert!(
            !dir.path().join("ran-in-workspace").exists(),
            "{hostile}: a program ran"
        );
    }
    // A `.git` file naming a repository outside the workspace.
    let elsewhere = tempfile::tempdir().expect("elsewhere");
    assert!(
        std::process::Command::new("git")
            .args(["init", "-q"])
            .current_dir(elsewhere.path())
            .status()
            .expect("git")
            .success()
    );
    let linked = dir.path().join("linked");
    std::fs::create_dir(&linked).expect("dir");
    std::fs::write(
        linked.join(".git"),
        format!("gitdir: {}\n", elsewhere.path().join(".git").display()),
    )
    .expect("gitdir file");
    let refused = git
        .call(&c, json!({ "args": ["-C", "linked", "status"] }))
        .await;
    assert!(
        format!("{refused:?}").contains("outside the workspace"),
        "{refused:?}"
    );

    // Back to a plain configuration, git works again, and hooks stay off.
    std::fs::write(&cfg, &clean).expect("write config");
    ok_text(git.call(&c, json!({ "args": ["add", "a.txt"] })).await);
    ok_text(
        git.call(&c, json!({ "args": ["commit", "-qm", "a"] }))
            .await,
    );
    assert!(
        !dir.path().join("ran-in-workspace").exists(),
        "the pre-commit hook ran"
    );
}

/// Runs the system's git in `dir` as a user would (not through the tool); whether it succeeded.
fn plain_git(dir: &Path, args: &[&str]) -> bool {
    Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.com")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.com")
        .output()
        .expect("git")
        .status
        .success()
}

/// A workspace and the `git` tool working in it.
struct GitWorkspace {
    dir: tempfile::TempDir,
    ctx: executor_svc::tools::ToolContext,
    git: std::sync::Arc<dyn executor_svc::tools::Tool>,
}

impl GitWorkspace {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        Self {
            ctx: ctx(dir.path()),
            git: tool_with(&config(), "git"),
            dir,
        }
    }

    /// A workspace that is a git repository (`init` through the tool, branch `main`).
    async fn initialized() -> Self {
        let ws = Self::new();
        ok_text(ws.run(json!(["init", "-q", "-b", "main"])).await);
        ws
    }

    /// One call of the tool with `args`.
    async fn run(
        &self,
        args: serde_json::Value,
    ) -> Result<executor_svc::tools::ToolOutcome, ToolError> {
        self.git.call(&self.ctx, json!({ "args": args })).await
    }
}

/// Appends `text` to the file at `path`.
fn append(path: &Path, text: &str) {
    use std::io::Write;
    std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .expect("append");
}

#[tokio::test]
async fn git_never_enters_a_nested_repository_whose_configuration_it_did_not_check() {
    let ws = GitWorkspace::initialized().await;
    let (dir, run) = (&ws.dir, |args| ws.run(args));
    // A repository nested in the workspace's, whose files pass through a "clean filter" that
    // its own configuration names: git status in it runs the program.
    let sub = dir.path().join("sub");
    let marker = dir.path().join("filter-ran");
    std::fs::create_dir(&sub).expect("sub");
    assert!(plain_git(&sub, &["init", "-q", "-b", "main"]));
    std::fs::write(sub.join("f.txt"), "one\n").expect("f");
    std::fs::write(sub.join(".gitattributes"), "* filter=x\n").expect("attributes");
    assert!(plain_git(&sub, &["add", "."]) && plain_git(&sub, &["commit", "-qm", "s"]));
    append(
        &sub.join(".git/config"),
        &format!(
            "[filter \"x\"]\n\tclean = \"sh -c 'touch {}; cat'\"\n",
            marker.display()
        ),
    );
    ok_text(run(json!(["add", "sub"])).await);
    ok_text(run(json!(["commit", "-qm", "with sub"])).await);
    // Same size, a new time: git must read the file (through the filter) to know it changed.
    let later = std::time::SystemTime::now() + Duration::from_secs(5);
    std::fs::File::options()
        .write(true)
        .open(sub.join("f.txt"))
        .and_then(|f| f.set_modified(later))
        .expect("touch");
    for args in [
        json!(["status"]),
        json!(["status", "--porcelain=v2"]),
        json!(["status", "--ignore-submodules=all"]),
        json!(["diff", "--stat"]),
        json!(["commit", "-qam", "again", "--allow-empty"]),
    ] {
        let (text, _) = output(run(args.clone()).await);
        assert!(
            !marker.exists(),
            "{args} ran the nested repository's filter: {text}"
        );
    }
    for (args, named) in [
        (
            json!(["status", "--ignore-submodules=none"]),
            "--ignore-submodules=none",
        ),
        (json!(["diff", "--submodule=diff"]), "--submodule=diff"),
        (
            json!(["diff", "--ignore-submodules=dirty"]),
            "--ignore-submodules=dirty",
        ),
    ] {
        match run(args.clone()).await {
            Err(ToolError::InvalidArguments { reason, .. }) => {
                assert!(
                    reason.contains(named) && reason.contains("submodule"),
                    "{reason}"
                )
            }
            other => panic!("{args} was not refused: {other:?}"),
        }
    }
    assert!(!marker.exists(), "a refused call ran the filter");
    // The same status run by hand enters the nested repository and runs the filter: the
    // repository is as hostile as this test says.
    assert!(plain_git(dir.path(), &["status"]));
    assert!(marker.exists(), "the test's filter never runs");
}

#[tokio::test]
async fn a_call_that_reaches_another_repository_checks_its_configuration_and_remotes() {
    let outside = tempfile::tempdir().expect("outside");
    let ws = GitWorkspace::new();
    let (dir, run) = (&ws.dir, |args| ws.run(args));
    ok_text(run(json!(["init", "-q", "-b", "main", "repo"])).await);
    std::fs::write(dir.path().join("repo/a.txt"), "a\n").expect("a");
    ok_text(run(json!(["-C", "repo", "add", "a.txt"])).await);
    ok_text(run(json!(["-C", "repo", "commit", "-qm", "a"])).await);
    // A clean peer is cloned and fetched from, by path and through a remote.
    ok_text(run(json!(["clone", "-q", "repo", "peer"])).await);
    ok_text(run(json!(["-C", "peer", "fetch", "-q", "origin"])).await);
    ok_text(run(json!(["-C", "repo", "remote", "add", "up", "../peer"])).await);
    ok_text(run(json!(["-C", "repo", "fetch", "-q", "up"])).await);

    // A push to a repository in the workspace would run its hooks without the tool's settings
    // (git clears them for a local push): refused, however the repository is named.
    for args in [
        json!(["-C", "repo", "push", "../peer", "main:x"]),
        json!(["-C", "repo", "push", "up", "main:x"]),
        json!(["-C", "repo", "push", ".", "main:x"]),
        json!(["-C", "peer", "push"]),
    ] {
        let refused = format!("{:?}", run(args.clone()).await);
        assert!(
            refused.contains("pushing to a repository inside the workspace"),
            "{args}: {refused}"
        );
    }

    // A peer whose configuration names a program: a call that reaches it runs git there with
    // that configuration, so it is refused, however the peer is named.
    let peer_config = dir.path().join("peer/.git/config");
    let clean = std::fs::read_to_string(&peer_config).expect("config");
    append(
        &peer_config,
        "[uploadpack]\n\tpackObjectsHook = touch ran\n",
    );
    std::fs::create_dir(dir.path().join("repo/sub")).expect("sub");
    for args in [
        json!(["-C", "repo", "fetch", "../peer"]),
        json!(["-C", "repo", "fetch", "up"]),
        json!(["-C", "repo", "pull", "up", "main"]),
        json!(["clone", "-q", "peer", "copy"]),
        // git reads a relative URL from the top of the working tree, not from -C's directory.
        json!(["-C", "repo/sub", "fetch", "../peer"]),
    ] {
        let refused = run(args.clone()).await;
        let text = format!("{refused:?}");
        assert!(
            text.contains("`peer`") && text.contains("`uploadpack.packobjectshook`"),
            "{args}: {text}"
        );
    }
    assert!(!dir.path().join("copy").exists());
    // Calls that reach no other repository are not concerned.
    ok_text(run(json!(["-C", "repo", "status"])).await);
    std::fs::write(&peer_config, &clean).expect("config");

    // A remote, or a branch's remote, written into the configuration that leads outside.
    let repo_config = dir.path().join("repo/.git/config");
    let repo_clean = std::fs::read_to_string(&repo_config).expect("config");
    for (hostile, named) in [
        (
            format!("[remote \"out\"]\n\turl = {}\n", outside.path().display()),
            "`remote.out.url`",
        ),
        (
            format!(
                "[branch \"main\"]\n\tremote = {}\n",
                outside.path().display()
            ),
            "`branch.main.remote`",
        ),
    ] {
        std::fs::write(&repo_config, format!("{repo_clean}{hostile}")).expect("config");
        let refused = format!("{:?}", run(json!(["-C", "repo", "fetch"])).await);
        assert!(
            refused.contains(named) && refused.contains("outside the workspace"),
            "{refused}"
        );
        ok_text(run(json!(["-C", "repo", "log", "--oneline"])).await);
    }
    // Listing the remotes reaches none of them.
    let listed = ok_text(run(json!(["-C", "repo", "remote", "-v"])).await);
    assert!(listed.contains("up"), "{listed}");
    let outside_repo = outside.path().display().to_string();
    std::fs::write(
        &repo_config,
        format!("{repo_clean}[remote \"out\"]\n\turl = {outside_repo}\n"),
    )
    .expect("config");
    let refused = format!("{:?}", run(json!(["-C", "repo", "remote", "update"])).await);
    assert!(refused.contains("`remote.out.url`"), "{refused}");
}

#[tokio::test]
async fn a_repository_whose_git_directory_leads_outside_is_refused() {
    let outside = tempfile::tempdir().expect("outside");
    assert!(plain_git(outside.path(), &["init", "-q"]));
    let ws = GitWorkspace::initialized().await;
    let (dir, run) = (&ws.dir, |args| ws.run(args));
    let git_dir = dir.path().join(".git");
    let elsewhere = outside.path().join(".git");
    // (the file in the git directory, what it holds or links to, what the refusal names)
    let alternates = format!("{}\n", elsewhere.join("objects").display());
    let common = elsewhere.display().to_string();
    for (file, content, link, named) in [
        (
            "objects/info/alternates",
            alternates.as_str(),
            false,
            "objects/info/alternates",
        ),
        (
            "MERGE_MSG",
            "/etc/hostname",
            true,
            "the symlink `MERGE_MSG`",
        ),
        ("commondir", common.as_str(), false, "`commondir`"),
    ] {
        let path = git_dir.join(file);
        if link {
            std::os::unix::fs::symlink(content, &path).expect("link");
        } else {
            std::fs::write(&path, content).expect("write");
        }
        let refused = format!("{:?}", run(json!(["log", "--oneline"])).await);
        assert!(
            refused.contains("leads outside the workspace") && refused.contains(named),
            "{named}: {refused}"
        );
        std::fs::remove_file(&path).expect("undo");
    }
    let (status, _) = output(run(json!(["status"])).await);
    assert!(status.starts_with("exit code: 0"), "{status}");
}

#[tokio::test]
async fn an_operation_in_progress_is_not_resumed_from_state_that_runs_a_program() {
    let ws = GitWorkspace::initialized().await;
    let (dir, run) = (&ws.dir, |args| ws.run(args));
    let marker = dir.path().join("ran");
    let state = dir.path().join(".git/rebase-merge");
    std::fs::create_dir_all(&state).expect("state dir");
    let todo = format!("pick 0000000 x\nexec touch {}\n", marker.display());
    std::fs::write(state.join("git-rebase-todo"), todo).expect("todo");
    for args in [json!(["rebase", "--continue"]), json!(["rebase", "--skip"])] {
        let refused = format!("{:?}", run(args.clone()).await);
        assert!(refused.contains("`exec` line"), "{args}: {refused}");
    }
    std::fs::write(state.join("git-rebase-todo"), "pick 0000000 x\n").expect("todo");
    std::fs::write(state.join("strategy"), "x/evil\n").expect("strategy");
    let refused = format!("{:?}", run(json!(["rebase", "--continue"])).await);
    assert!(refused.contains("strategy `x/evil`"), "{refused}");
    // Ending it is allowed (git itself may say there is nothing to end).
    let ended = format!("{:?}", run(json!(["rebase", "--abort"])).await);
    assert!(!ended.contains("cannot be resumed"), "{ended}");
    std::fs::remove_dir_all(&state).expect("state");
    let seq = dir.path().join(".git/sequencer");
    std::fs::create_dir_all(&seq).expect("sequencer");
    std::fs::write(seq.join("opts"), "[options]\n\tgpg-sign = -S\n").expect("opts");
    let refused = format!("{:?}", run(json!(["cherry-pick", "--continue"])).await);
    assert!(refused.contains("gpg-sign"), "{refused}");
    assert!(!marker.exists());
}

#[tokio::test]
async fn a_missing_launcher_makes_the_tools_unavailable() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut c = NativeToolsConfig::default();
    c.sandbox.launcher = Some("/nonexistent/taskforce-sandbox".into());
    let r = tool_with(&c, "python")
        .call(&ctx(dir.path()), json!({ "code": "print(1)" }))
        .await;
    match r {
        Err(ToolError::Unavailable { reason, .. }) => {
            assert!(reason.contains("TASKFORCE_TOOL_LAUNCHER"), "{reason}")
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
    assert!(c.check().is_err());
}

#[tokio::test]
async fn bwrap_mode_binds_only_the_workspace_writable() {
    if !Path::new("/usr/bin/bwrap").exists() && !Path::new("/usr/local/bin/bwrap").exists() {
        eprintln!("bubblewrap is not installed: bwrap mode is not tested");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let outside = tempfile::tempdir().expect("outside");
    let mut c = config();
    c.sandbox.mode = SandboxMode::Bwrap;
    c.sandbox.limits.open_files = 90;
    c.check()
        .expect("bwrap mode starts where bubblewrap is installed");
    let code = format!(
        "{}\nimport resource\nprint('nofile', resource.getrlimit(resource.RLIMIT_NOFILE))\n",
        writer(outside.path())
    );
    let (text, is_error) = output(
        tool_with(&c, "python")
            .call(&ctx(dir.path()), json!({ "code": code }))
            .await,
    );
    if text.contains("taskforce-sandbox") || text.contains("bwrap:") {
        // bubblewrap is installed but cannot make namespaces here (a container without them).
        eprintln!("bubblewrap cannot run on this host: {text}");
        return;
    }
    assert!(!is_error, "{text}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("inside.txt")).expect("inside"),
        "in"
    );
    // `/tmp` is the sandbox's own tmpfs: whatever was written there never reaches the host.
    assert!(!outside.path().join("escaped.txt").exists(), "{text}");
    assert!(text.contains("nofile (90, 90)"), "{text}");
}

/// A descriptor the executor inherited without close-on-exec (a shell's `exec 7>file`) does not
/// reach the tool's program: it could write there whatever the sandbox forbids.
#[test]
fn descriptors_the_executor_inherited_do_not_reach_the_program() {
    let dir = tempfile::tempdir().expect("tempdir");
    let leaked = dir.path().join("leaked.txt");
    let out = Command::new("bash")
        .arg("-c")
        .arg(r#"exec 7>"$1"; exec "$0" --workspace "$2" -- /bin/ls /proc/self/fd"#)
        .arg(env!("CARGO_BIN_EXE_taskforce-sandbox"))
        .arg(&leaked)
        .arg(dir.path())
        .output()
        .expect("run the launcher");
    assert!(out.status.success(), "{out:?}");
    let fds: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    // 0-2, and the descriptor `ls` reads the directory with.
    assert!(fds.iter().any(|fd| fd == "2"), "{fds:?}");
    assert!(
        !fds.iter().any(|fd| fd == "7"),
        "fd 7 reached the program: {fds:?}"
    );
    assert!(fds.len() <= 4, "{fds:?}");
}
