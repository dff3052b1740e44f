//! A service started as PID 1 (a container without an init, as the images start them) is its
//! own init: it starts itself again as its child, which serves; PID 1 passes SIGTERM on and
//! exits with the service's status; neither process lets another process of its user read the
//! environment (the service token, the API keys) in `/proc/<pid>/environ`, which `tini` did.
//!
//! Run in a new PID namespace (`unshare --pid --fork`, util-linux) as uid 65532 (`setpriv`), as
//! in the images; a machine that cannot make one skips the test, saying so.

use std::{
    path::Path,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use taskforce_tests::paths;

/// The uid and gid of the images' user.
const USER: &str = "65532";
const SECRET: &str = "pid1-test-service-token-0123456789";

/// `command` run as the images' user.
fn as_user(command: &str) -> Command {
    let mut c = Command::new("setpriv");
    c.args([
        &format!("--reuid={USER}"),
        &format!("--regid={USER}"),
        "--clear-groups",
        "--",
        command,
    ]);
    c
}

/// The children of process `pid`.
fn children(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// The program process `pid` runs.
fn exe(pid: u32) -> String {
    std::fs::read_link(format!("/proc/{pid}/exe"))
        .map(|p| p.display().to_string())
        .unwrap_or_default()
}

/// The `unshare` process, killed (with its namespace: `--kill-child`) if the test fails.
struct Namespace(std::process::Child);

impl Drop for Namespace {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < deadline, "{what} did not happen in time");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_service_started_as_pid_1_is_its_own_init_and_keeps_its_environment_unreadable() {
    let namespaces = Command::new("unshare")
        .args(["--pid", "--fork", "--", "true"])
        .stderr(Stdio::null())
        .status();
    let user = as_user("true").stderr(Stdio::null()).status();
    if !namespaces.is_ok_and(|s| s.success()) || !user.is_ok_and(|s| s.success()) {
        eprintln!("skipped: this machine cannot start a PID namespace as root (unshare, setpriv)");
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    for sub in ["config", "data"] {
        std::fs::create_dir(dir.path().join(sub)).expect("dir");
    }
    // A copy the images' user can run: the build's directory may be closed to it (a clone in
    // a private temp dir).
    let registry = dir.path().join("registry-svc");
    std::fs::copy(
        paths::binary("registry-svc").expect("registry-svc is built"),
        &registry,
    )
    .expect("copy of registry-svc");
    // The images' user writes the state; the test's temp dir is root's.
    let open = Command::new("chmod")
        .args(["-R", "a+rwx"])
        .arg(dir.path())
        .status()
        .expect("chmod");
    assert!(open.success());
    let addr_file = dir.path().join("addr");
    let log = std::fs::File::create(dir.path().join("log")).expect("log file");
    let mut unshare = Namespace(
        Command::new("unshare")
            .args(["--pid", "--fork", "--kill-child", "--", "setpriv"])
            .args([
                &format!("--reuid={USER}"),
                &format!("--regid={USER}"),
                "--clear-groups",
                "--",
            ])
            .arg(&registry)
            .args(["--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"])
            .arg("--addr-file")
            .arg(&addr_file)
            .arg("--config-dir")
            .arg(dir.path().join("config"))
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .env("TASKFORCE_SERVICE_TOKEN", SECRET)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("unshare starts"),
    );
    let logs = || std::fs::read_to_string(dir.path().join("log")).unwrap_or_default();
    wait_for("the registry listening", || {
        addr_file.exists() || unshare.0.try_wait().ok().flatten().is_some()
    });
    assert!(
        addr_file.exists(),
        "the registry did not start:\n{}",
        logs()
    );

    // PID 1 of the namespace is the registry's program, and its one child is the service.
    let init = children(unshare.0.id());
    assert_eq!(init.len(), 1, "{init:?}");
    let init = init[0];
    assert_eq!(exe(init), registry.display().to_string());
    let service = children(init);
    assert_eq!(
        service.len(),
        1,
        "PID 1 runs the service as its child: {service:?}"
    );
    let service = service[0];
    assert_eq!(exe(service), registry.display().to_string());
    // What the service's tools and MCP servers (the same user) could try.
    for (who, pid) in [("PID 1", init), ("the service", service)] {
        let read = as_user("cat")
            .arg(format!("/proc/{pid}/environ"))
            .output()
            .expect("cat runs");
        assert!(
            !read.status.success() && !String::from_utf8_lossy(&read.stdout).contains(SECRET),
            "{who}'s environment is readable by its user: {}",
            String::from_utf8_lossy(&read.stdout).replace('\0', "\n")
        );
    }

    // A stop of the container: SIGTERM to PID 1 reaches the service, which stops cleanly.
    let term = Command::new("kill")
        .args(["-TERM", &init.to_string()])
        .status()
        .expect("kill");
    assert!(term.success());
    let mut status = None;
    wait_for("the namespace's end", || {
        status = unshare.0.try_wait().ok().flatten();
        status.is_some()
    });
    assert!(
        status.is_some_and(|s| s.success()),
        "{status:?}\n{}",
        logs()
    );
    assert!(logs().contains("registry stopped"), "{}", logs());
    assert!(!Path::new(&format!("/proc/{service}")).exists());
}
