//! `python`, `git` and `powershell` as real subprocesses.

use std::{
    path::Path,
    time::{Duration, Instant},
};

use executor_svc::tools::{ToolError, native::powershell_available};
use serde_json::json;

use super::{ctx, ctx_with, ok_text, output, tool};

/// True while `pid` is a live (non-zombie) process.
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name: `123 (python3) S ...`.
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z') && !rest.starts_with('X')),
        Err(_) => false,
    }
}

/// True when `pid` is dead within a second (SIGKILL is delivered asynchronously, and a killed
/// grandchild is reaped by init, not by us).
async fn dies(pid: u32) -> bool {
    let deadline = Instant::now() + Duration::from_secs(1);
    while alive(pid) {
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    true
}

/// Waits (up to 10 s) for `file` in `dir` to hold a pid.
async fn pid_from(dir: &Path, file: &str) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(s) = std::fs::read_to_string(dir.join(file))
            && let Ok(pid) = s.trim().parse()
        {
            return pid;
        }
        assert!(Instant::now() < deadline, "{file} never appeared");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Python that records its pid and a grandchild's, then sleeps.
const SLEEPER: &str = r#"
import os, subprocess, time
child = subprocess.Popen(["sleep", "60"])
with open("child.pid.tmp", "w") as f: f.write(str(child.pid))
os.rename("child.pid.tmp", "child.pid")
with open("py.pid.tmp", "w") as f: f.write(str(os.getpid()))
os.rename("py.pid.tmp", "py.pid")
time.sleep(60)
"#;

#[tokio::test]
async fn python_prints_in_the_workspace_and_reports_exit_codes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = ctx(dir.path());
    let text = ok_text(
        tool("python")
            .call(&c, json!({ "code": "import os\nopen('made.txt','w').write('hi')\nprint('sum', 2 + 3)\nprint(os.getcwd())" }))
            .await,
    );
    assert!(text.starts_with("exit code: 0\n"), "{text}");
    assert!(text.contains("sum 5"), "{text}");
    let real = std::fs::canonicalize(dir.path()).expect("canon");
    assert!(text.contains(&real.display().to_string()), "{text}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("made.txt")).expect("made"),
        "hi"
    );

    let (text, is_error) = output(
        tool("python")
            .call(&c, json!({ "code": "import sys\nprint('partial')\nsys.stderr.write('boom\\n')\nsys.exit(3)" }))
            .await,
    );
    assert!(is_error, "{text}");
    assert!(text.starts_with("exit code: 3\n"), "{text}");
    assert!(
        text.contains("stdout:\npartial") && text.contains("stderr:\nboom"),
        "{text}"
    );
}

#[tokio::test]
async fn python_sees_a_minimal_environment() {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = ok_text(
        tool("python")
            .call(
                &ctx(dir.path()),
                json!({ "code": "import os\nprint(' '.join(sorted(os.environ)))" }),
            )
            .await,
    );
    let stdout = text.split("stdout:\n").nth(1).unwrap_or_default();
    // Passed on purpose, or set by the tool itself or a shell wrapper (pyenv's shim is a bash
    // script that sets PWD, SHLVL and its PYENV_* variables).
    let allowed = |v: &str| {
        ["PATH", "HOME", "LANG", "TZ", "PWD", "SHLVL", "_"].contains(&v)
            || v.starts_with("PYTHON")
            || v.trim_start_matches('_').starts_with("PYENV")
    };
    // Wrappers such as pyenv's shim add their own variables; what must not happen is a variable
    // of the executor's environment reaching the child, other than the allowed few.
    let leaked: Vec<&str> = stdout
        .split_whitespace()
        .filter(|v| !allowed(v) && std::env::var_os(v).is_some())
        .collect();
    assert!(leaked.is_empty(), "leaked into the child: {leaked:?}");
    // `cargo test` sets CARGO_* in this process; none of it reaches the child.
    assert!(!stdout.contains("CARGO"), "{text}");
    assert!(
        stdout.contains("PATH") && stdout.contains("PYTHONUNBUFFERED"),
        "{text}"
    );
}

#[tokio::test]
async fn python_timeout_kills_the_process_group() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = ctx_with(dir.path(), Duration::from_secs(10), 64 * 1024);
    let py = tool("python");
    let started = Instant::now();
    let call = py.call(&c, json!({ "code": SLEEPER, "timeout_seconds": 2 }));
    let result = call.await;
    assert!(
        matches!(result, Err(ToolError::Timeout { after, .. }) if after == Duration::from_secs(2)),
        "{result:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "{:?}",
        started.elapsed()
    );
    let (py_pid, child_pid) = (
        pid_from(dir.path(), "py.pid").await,
        pid_from(dir.path(), "child.pid").await,
    );
    assert!(dies(py_pid).await, "python {py_pid} survived the timeout");
    assert!(
        dies(child_pid).await,
        "its child {child_pid} survived the timeout"
    );
}

#[tokio::test]
async fn cancellation_kills_a_long_python_within_a_second() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = ctx_with(dir.path(), Duration::from_secs(60), 64 * 1024);
    let cancel = c.cancel.clone();
    let py = tool("python");
    let path = dir.path().to_path_buf();
    let canceller = async move {
        let pids = (
            pid_from(&path, "py.pid").await,
            pid_from(&path, "child.pid").await,
        );
        cancel.cancel();
        (pids, Instant::now())
    };
    let (result, (pids, cancelled_at)) =
        tokio::join!(py.call(&c, json!({ "code": SLEEPER })), canceller);
    let took = cancelled_at.elapsed();
    assert!(
        matches!(result, Err(ToolError::Cancelled { .. })),
        "{result:?}"
    );
    assert!(
        took < Duration::from_secs(1),
        "the call ended {took:?} after cancellation"
    );
    assert!(
        dies(pids.0).await,
        "python {} survived cancellation",
        pids.0
    );
    assert!(
        dies(pids.1).await,
        "its child {} survived cancellation",
        pids.1
    );
}

#[tokio::test]
async fn subprocess_output_is_capped_and_the_cut_is_said() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = ctx_with(dir.path(), Duration::from_secs(20), 1000);
    let text = ok_text(
        tool("python")
            .call(&c, json!({ "code": "import sys\nsys.stdout.write('x' * 3_000_000)\nsys.stderr.write('y' * 5000 + 'THE-LAST-LINE')" }))
            .await,
    );
    assert!(text.len() < 1200, "{} bytes", text.len());
    // Each cut names the stream's whole size; stderr keeps its end, however long it was.
    assert!(
        text.contains("[stdout cut: the first ") && text.contains(" of 3000000 bytes shown]"),
        "{text}"
    );
    assert!(
        text.contains("[stderr cut: the last ") && text.contains(" of 5013 bytes shown]"),
        "{text}"
    );
    assert!(text.contains("yyyyTHE-LAST-LINE\n"), "{text}");
}

#[tokio::test]
async fn git_runs_in_the_workspace_repository_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = ctx(dir.path());
    let git = tool("git");
    let text = ok_text(
        git.call(&c, json!({ "args": ["init", "-q", "-b", "main"] }))
            .await,
    );
    assert!(text.starts_with("exit code: 0"), "{text}");
    assert!(dir.path().join(".git").is_dir());
    std::fs::write(dir.path().join("a.txt"), "a").expect("a");
    let text = ok_text(
        git.call(
            &c,
            json!({ "args": ["status", "--porcelain=v1", "--branch"] }),
        )
        .await,
    );
    assert!(
        text.contains("## No commits yet on main") && text.contains("?? a.txt"),
        "{text}"
    );

    // A sub-directory workspace does not see the repository above it.
    let sub = dir.path().join("sub");
    let (text, is_error) = output(git.call(&ctx(&sub), json!({ "args": ["status"] })).await);
    assert!(
        is_error && text.contains("exit code: 128") && text.contains("not a git repository"),
        "{text}"
    );

    for args in [
        json!(["-C", "/", "status"]),
        json!(["-c", "core.pager=sh", "log"]),
        json!([]),
    ] {
        let r = git.call(&c, json!({ "args": args })).await;
        assert!(
            matches!(r, Err(ToolError::InvalidArguments { .. })),
            "{args}: {r:?}"
        );
    }
}

#[tokio::test]
async fn powershell_without_pwsh_is_unavailable_with_a_clear_reason() {
    if powershell_available() {
        return; // Only meaningful on hosts without PowerShell (like CI here).
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let r = tool("powershell")
        .call(&ctx(dir.path()), json!({ "script": "Get-Date" }))
        .await;
    match r {
        Err(ToolError::Unavailable { tool, reason }) => {
            assert_eq!(tool, "powershell");
            assert!(reason.contains("not installed"), "{reason}");
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
}

#[tokio::test]
async fn dropping_the_call_kills_its_process_group() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = ctx_with(dir.path(), Duration::from_secs(60), 64 * 1024);
    let py = tool("python");
    let task = tokio::spawn(async move { py.call(&c, json!({ "code": SLEEPER })).await });
    let pids = (
        pid_from(dir.path(), "py.pid").await,
        pid_from(dir.path(), "child.pid").await,
    );
    task.abort();
    let _ = task.await;
    assert!(
        dies(pids.0).await && dies(pids.1).await,
        "{pids:?} survived the dropped call"
    );
}

#[tokio::test]
async fn a_timeout_says_what_the_program_printed_by_then() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = ctx_with(dir.path(), Duration::from_secs(10), 64 * 1024);
    let code = "import time\nprint('started the job', flush=True)\ntime.sleep(60)";
    let result = tool("python")
        .call(&c, json!({ "code": code, "timeout_seconds": 2 }))
        .await;
    let text = match &result {
        Err(e) => e.to_string(),
        Ok(o) => panic!("{code}: {o:?}"),
    };
    assert!(text.contains("timed out after 2s"), "{text}");
    assert!(text.contains("started the job"), "{text}");
}

#[tokio::test]
async fn a_program_that_leaves_a_background_process_ends_the_call_when_it_ends() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = ctx_with(dir.path(), Duration::from_secs(20), 64 * 1024);
    let started = Instant::now();
    // It exits at once, but the server it started keeps the output open.
    let code = "import subprocess\nsubprocess.Popen(['sleep', '60'])\nprint('launched the server', flush=True)";
    let text = ok_text(tool("python").call(&c, json!({ "code": code })).await);
    assert!(text.starts_with("exit code: 0\n"), "{text}");
    assert!(text.contains("launched the server"), "{text}");
    assert!(text.contains("kept its output open"), "{text}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn processes_the_program_leaves_do_not_outlive_the_call() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = ctx_with(dir.path(), Duration::from_secs(20), 64 * 1024);
    // A new session (as a server started with start_new_session=True), a daemon made the
    // classic way (fork, setsid, fork again, the middle one exits), neither in the call's
    // process group, and a quiet background process in it: none holds the output.
    let code = r#"
import os, subprocess
p = subprocess.Popen(["sleep", "60"], start_new_session=True,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
q = subprocess.Popen(["sleep", "60"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
r, w = os.pipe()
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.close(r)
        for fd in (0, 1, 2):
            os.close(fd)
        os.write(w, str(os.getpid()).encode())
        os.close(w)
        import time
        time.sleep(60)
        os._exit(0)
    os._exit(0)
os.close(w)
daemon = os.read(r, 32).decode()
print(p.pid, daemon, q.pid)
"#;
    let text = ok_text(tool("python").call(&c, json!({ "code": code })).await);
    let pids: Vec<u32> = text
        .lines()
        .find(|l| l.chars().next().is_some_and(|ch| ch.is_ascii_digit()))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect();
    assert_eq!(pids.len(), 3, "{text}");
    for pid in pids {
        assert!(dies(pid).await, "{pid} outlived the call: {text}");
    }
}

#[tokio::test]
async fn a_timeout_also_kills_what_left_the_group_and_the_program_blocks_no_signal() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = ctx_with(dir.path(), Duration::from_secs(3), 64 * 1024);
    let code = r#"
import os, signal, subprocess, time
print("mask", signal.pthread_sigmask(signal.SIG_BLOCK, []), flush=True)
p = subprocess.Popen(["sleep", "60"], start_new_session=True,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
open("escaped.pid", "w").write(str(p.pid))
time.sleep(60)
"#;
    let r = tool("python").call(&c, json!({ "code": code })).await;
    let text = format!("{r:?}");
    assert!(text.contains("timed out"), "{text}");
    // As a shell's child would, the program starts with no signal blocked.
    assert!(text.contains("mask set()"), "{text}");
    let escaped = pid_from(dir.path(), "escaped.pid").await;
    assert!(dies(escaped).await, "{escaped} outlived the timed-out call");
}

#[tokio::test]
async fn a_timeout_of_zero_seconds_is_refused_naming_the_field() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = ctx_with(dir.path(), Duration::from_secs(10), 64 * 1024);
    let r = tool("python")
        .call(&c, json!({ "code": "print(1)", "timeout_seconds": 0 }))
        .await;
    assert!(
        matches!(&r, Err(ToolError::InvalidArguments { reason, .. }) if reason.contains("timeout_seconds")),
        "{r:?}"
    );
}

#[tokio::test]
async fn a_program_killed_by_a_signal_is_told_which() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = ctx_with(dir.path(), Duration::from_secs(10), 64 * 1024);
    let r = tool("python")
        .call(
            &c,
            json!({ "code": "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)" }),
        )
        .await;
    let text = format!("{r:?}");
    assert!(text.contains("killed by signal 9 (SIGKILL)"), "{text}");
}
