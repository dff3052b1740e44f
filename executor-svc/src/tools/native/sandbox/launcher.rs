//! `taskforce-sandbox`, the launcher every `python`, `git` and `powershell` subprocess starts
//! through: it confines itself (resource limits; Landlock, or bubblewrap; the TCP ports it may
//! connect to; no capabilities) with safe APIs, then runs the real program as its child, which
//! inherits the confinement, and exits as it did. It is the program's child subreaper: when the
//! program ends, whatever it started that left the process group (`setsid()`, a double fork)
//! is killed, since the executor's kill of the group would miss it. The workspace forbids
//! `unsafe`, so a `pre_exec` hook in the executor is not an option; a separate program is.
//!
//! Exit codes follow the shell's: 126 when the sandbox could not be set up, 127 when the program
//! was not found; the reason goes to stderr, where the tool output shows it.

use std::{
    ffi::OsString,
    path::{Path, PathBuf},
    process::{Command, ExitCode},
};

use clap::Parser;
use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, NetPort, Ruleset, RulesetAttr,
    RulesetCreatedAttr, RulesetError, RulesetStatus, Scope, path_beneath_rules,
};
use nix::sys::resource::{Resource, getrlimit, setrlimit};

pub use taskforce_runtime::sandbox::{
    Confine, ConnectPorts, EXIT_NOT_FOUND, EXIT_SETUP, LauncherArgs, ResourceLimits,
};

/// The Landlock ABI the ruleset is written for: write rights of V5 (device ioctls included)
/// and V6's scopes (no signals to, no abstract sockets of, processes outside the sandbox).
const TARGET_ABI: ABI = ABI::V6;

/// Devices a program may write to although they are outside the workspace.
const WRITABLE_DEVICES: [&str; 5] = [
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/tty",
    "/dev/random",
];

/// What [`run`] prints for `--probe`: how much of the Landlock ruleset the kernel enforces.
pub fn status_word(status: &RulesetStatus) -> &'static str {
    match status {
        RulesetStatus::FullyEnforced => "fully-enforced",
        RulesetStatus::PartiallyEnforced => "partially-enforced",
        RulesetStatus::NotEnforced => "not-enforced",
    }
}

/// The launcher: parses `args`, confines itself, and `exec`s the program (returning only on
/// failure, or after `--probe`).
pub fn run(args: impl IntoIterator<Item = OsString>) -> ExitCode {
    let args = match LauncherArgs::try_parse_from(args) {
        Ok(a) => a,
        Err(e) => return fail(EXIT_SETUP, &e.to_string()),
    };
    // Relative to the workspace the program runs in, a hidden path would hide nothing.
    if let Some(relative) = args.hidden.iter().find(|h| h.is_relative()) {
        return fail(
            EXIT_SETUP,
            &format!("--hidden {} is not an absolute path", relative.display()),
        );
    }
    if let Some(exposed) = exposed(&args) {
        return fail(
            EXIT_SETUP,
            &format!(
                "the workspace holds {}, which the program may not read; give the agent a \
                 workspace outside it",
                exposed.display()
            ),
        );
    }
    if let Err(e) = apply_limits(&args) {
        return fail(EXIT_SETUP, &format!("cannot set resource limits: {e}"));
    }
    close_inherited_fds();
    let mut program = args.command.first().cloned();
    let mut rest: Vec<OsString> = args.command.iter().skip(1).cloned().collect();
    match args.confine {
        Confine::Landlock | Confine::LandlockRequired => {
            let status = match landlock(&args) {
                Ok(s) => s,
                Err(e) => return fail(EXIT_SETUP, &format!("cannot set up Landlock: {e}")),
            };
            if args.probe {
                println!("landlock: {}", status_word(&status));
                return ExitCode::SUCCESS;
            }
            if status == RulesetStatus::NotEnforced && args.confine == Confine::LandlockRequired {
                return fail(
                    EXIT_SETUP,
                    "this kernel does not enforce Landlock and the executor requires it \
                     (TASKFORCE_TOOL_SANDBOX_REQUIRE); the program was not run",
                );
            }
        }
        Confine::Bwrap => {
            if let Err(e) = restrict_connections(&args.connect_ports) {
                return fail(EXIT_SETUP, &format!("cannot set up Landlock: {e}"));
            }
            if args.probe {
                println!("bwrap");
                return ExitCode::SUCCESS;
            }
            let Some(p) = program.take() else {
                return fail(EXIT_SETUP, "no program to run");
            };
            let mut wrapped = bwrap_args(&args);
            wrapped.push(p);
            wrapped.append(&mut rest);
            rest = wrapped;
            program = Some(args.bwrap.into());
        }
    }
    let Some(program) = program else {
        return fail(EXIT_SETUP, "no program to run");
    };
    // bubblewrap drops them itself (`--cap-drop ALL`), after it has used them.
    if args.confine != Confine::Bwrap
        && let Err(e) = drop_capabilities()
    {
        return fail(EXIT_SETUP, &format!("cannot drop capabilities: {e}"));
    }
    if args.connect_ports != ConnectPorts::Any {
        let applied = connection_filter().and_then(|f| seccompiler::apply_filter(&f));
        if let Err(e) = applied {
            return fail(
                EXIT_SETUP,
                &format!("cannot set up the seccomp filter: {e}"),
            );
        }
    }
    // The program runs as the launcher's child rather than in its place, so that what it leaves
    // behind comes back here (a child subreaper) and can be found when it ends.
    if let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
        return fail(EXIT_SETUP, &format!("cannot become a child subreaper: {e}"));
    }
    let outputs = own_outputs();
    let mut child = match Command::new(&program).args(&rest).spawn() {
        Ok(child) => child,
        Err(e) => {
            let code = if e.kind() == std::io::ErrorKind::NotFound {
                EXIT_NOT_FOUND
            } else {
                EXIT_SETUP
            };
            return fail(
                code,
                &format!("cannot run {}: {e}", Path::new(&program).display()),
            );
        }
    };
    // SIGTERM (the executor's, at a timeout or a cancel, just before it kills the group) ends
    // everything below the launcher first, escaped or not: once the launcher is gone, what the
    // program left would go to init. Blocked only once the program has started, which inherits
    // the mask; one arriving before that ends the launcher as it did before.
    let mut term = nix::sys::signal::SigSet::empty();
    term.add(nix::sys::signal::Signal::SIGTERM);
    if term.thread_block().is_ok() {
        std::thread::spawn(move || {
            if term.wait().is_ok() {
                kill_below(true, &[]);
                std::process::exit(128 + 15);
            }
        });
    }
    let status = loop {
        match child.wait() {
            Ok(status) => break status,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return fail(EXIT_SETUP, &format!("cannot wait for the program: {e}")),
        }
    };
    kill_below(false, &outputs);
    exit_as(status)
}

/// Kills the processes below the launcher: all of them (`all`), or once the program has ended,
/// those that would outlive the call: the ones no longer in the launcher's process group
/// (`setsid()`, a double fork, `start_new_session=True`), which the executor's kill of the
/// group misses, and the ones that do not hold the call's output (`outputs`), which the
/// executor no longer waits for. A process still holding the output is left to the executor,
/// which gives it a second and then kills the group (a server the program started). Costs
/// nothing when nothing is left running.
fn kill_below(all: bool, outputs: &[PathBuf]) {
    use nix::{
        errno::Errno,
        sys::{
            signal::{Signal, kill},
            wait::{WaitPidFlag, WaitStatus, waitpid},
        },
        unistd::{Pid, getpgrp, getpid},
    };
    let reap = || loop {
        match waitpid(None::<Pid>, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) => return true,
            Err(Errno::EINTR) | Ok(_) => {}
            // No child left means no descendant left (an orphan comes here).
            Err(_) => return false,
        }
    };
    let (me, group) = (getpid().as_raw(), getpgrp().as_raw());
    // A process may fork while it is found: look again until a look finds none.
    for _ in 0..16 {
        if !reap() {
            return;
        }
        let table = process_table();
        let mut doomed = Vec::new();
        let mut frontier = vec![me];
        while let Some(parent) = frontier.pop() {
            for p in table.iter().filter(|p| p.ppid == parent) {
                frontier.push(p.pid);
                if all || p.pgrp != group || !holds_any(p.pid, outputs) {
                    doomed.push(p.pid);
                }
            }
        }
        if doomed.is_empty() {
            return;
        }
        for pid in doomed {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
}

/// What the launcher's stdout and stderr are (`pipe:[…]`), to know who still holds them.
fn own_outputs() -> Vec<PathBuf> {
    [1, 2]
        .iter()
        .filter_map(|fd| std::fs::read_link(format!("/proc/self/fd/{fd}")).ok())
        .filter(|target| target.to_string_lossy().starts_with("pipe:"))
        .collect()
}

/// Whether process `pid` has one of `targets` open (unknown counts as no).
fn holds_any(pid: i32, targets: &[PathBuf]) -> bool {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.filter_map(Result::ok)
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .any(|target| targets.contains(&target))
}

/// One live process, from `/proc/<pid>/stat`.
struct Proc {
    pid: i32,
    ppid: i32,
    pgrp: i32,
}

/// Every live process (zombies, already killed, left out).
fn process_table() -> Vec<Proc> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|entry| {
        let pid: i32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // `pid (comm) state ppid pgrp ...`: the name may hold spaces and parentheses.
        let mut rest = stat.get(stat.rfind(')')? + 1..)?.split_whitespace();
        if matches!(rest.next()?, "Z" | "X") {
            return None;
        }
        let ppid = rest.next()?.parse().ok()?;
        let pgrp = rest.next()?.parse().ok()?;
        Some(Proc { pid, ppid, pgrp })
    })
    .collect()
}

/// Ends the launcher as the program ended: with its exit code, or by the signal that killed it
/// (the executor reports which: the CPU limit's SIGXCPU or SIGKILL); no core dump is written,
/// the limits say so.
fn exit_as(status: std::process::ExitStatus) -> ExitCode {
    use std::os::unix::process::ExitStatusExt;
    if let Some(code) = status.code() {
        return ExitCode::from(u8::try_from(code & 0xff).unwrap_or(EXIT_SETUP));
    }
    let signal = status.signal().unwrap_or(9);
    if let Ok(sig) = nix::sys::signal::Signal::try_from(signal) {
        let _ = nix::sys::signal::raise(sig);
    }
    // A signal the launcher ignores (SIGPIPE: Rust ignores it) ends it the shell's way.
    ExitCode::from(u8::try_from((128 + signal) & 0xff).unwrap_or(EXIT_SETUP))
}

/// Closes every descriptor above stderr. Rust opens its own with close-on-exec, but whatever
/// started the executor may have handed it others (a shell's `exec 7>file`, a supervisor's
/// socket) that would otherwise reach every tool's program: a file or socket to write to outside
/// the sandbox's rules. Without `/proc` (the executor's hosts have it) the first 1,024 are closed.
fn close_inherited_fds() {
    let open: Vec<i32> = match std::fs::read_dir("/proc/self/fd") {
        Ok(dir) => dir
            .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
            .collect(),
        Err(_) => (0..1024).collect(),
    };
    for fd in open.into_iter().filter(|fd| *fd > 2) {
        // The directory's own descriptor is already closed: EBADF, as for any number not open.
        let _ = nix::unistd::close(fd);
    }
}

fn fail(code: u8, message: &str) -> ExitCode {
    eprintln!("taskforce-sandbox: {message}");
    ExitCode::from(code)
}

/// Lowers each configured limit (soft and hard, so the program cannot raise it again), never
/// above the current hard limit; no core dumps.
fn apply_limits(args: &LauncherArgs) -> nix::Result<()> {
    for (resource, value) in [
        (Resource::RLIMIT_CPU, args.cpu_seconds),
        (Resource::RLIMIT_AS, args.address_space),
        (Resource::RLIMIT_NOFILE, args.open_files),
        (Resource::RLIMIT_NPROC, args.processes),
        (Resource::RLIMIT_CORE, 0),
    ] {
        if value == 0 && resource != Resource::RLIMIT_CORE {
            continue;
        }
        let (_, hard) = getrlimit(resource)?;
        let soft = value.min(hard);
        // Past the CPU soft limit comes SIGXCPU; a second later the hard limit's SIGKILL.
        let hard = if resource == Resource::RLIMIT_CPU {
            value.saturating_add(1).min(hard)
        } else {
            soft
        };
        setrlimit(resource, soft, hard)?;
    }
    Ok(())
}

/// Drops every capability this process has, the bounding set included, so the program runs
/// with none, even as root: without `CAP_SYS_PTRACE` and `CAP_DAC_OVERRIDE` it cannot read the
/// services' `/proc/<pid>/environ` (they are non-dumpable), and an empty bounding set keeps
/// `exec` from granting root its capabilities again. A launcher without capabilities (any
/// other user) has nothing to drop.
fn drop_capabilities() -> Result<(), caps::errors::CapsError> {
    use caps::{CapSet, Capability};
    if caps::has_cap(None, CapSet::Effective, Capability::CAP_SETPCAP)? {
        caps::clear(None, CapSet::Bounding)?;
    }
    for set in [
        CapSet::Ambient,
        CapSet::Inheritable,
        CapSet::Effective,
        CapSet::Permitted,
    ] {
        caps::clear(None, set)?;
    }
    Ok(())
}

/// Restricts this process (and what it `exec`s) to writing under the workspace, the writable
/// directories and a few devices, and to connecting to the allowed TCP ports; reads stay
/// allowed everywhere but under the hidden paths. Best effort: on a kernel without Landlock
/// the status says `NotEnforced`, and on one before 6.7 (no network rules) `PartiallyEnforced`.
fn landlock(args: &LauncherArgs) -> Result<RulesetStatus, RulesetError> {
    let abi = TARGET_ABI;
    let write = AccessFs::from_write(abi);
    let read = AccessFs::ReadFile | AccessFs::ReadDir;
    let dirs = std::iter::once(&args.workspace).chain(&args.writable);
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(write)?;
    // Reads are confined only when something is hidden: then everything else is granted.
    let readable = readable_around(&args.hidden);
    let mut own = write;
    if !readable.is_empty() {
        ruleset = ruleset.handle_access(read)?;
        own |= read;
    }
    if let ConnectPorts::Only(_) = args.connect_ports {
        ruleset = ruleset.handle_access(AccessNet::ConnectTcp | AccessNet::BindTcp)?;
    }
    let status = ruleset
        .scope(Scope::from_all(abi))?
        .create()?
        .add_rules(path_beneath_rules(readable, read))?
        .add_rules(path_beneath_rules(dirs, own))?
        .add_rules(path_beneath_rules(
            WRITABLE_DEVICES,
            AccessFs::WriteFile | AccessFs::Truncate | AccessFs::IoctlDev,
        ))?
        .add_rules(port_rules(&args.connect_ports))?
        .restrict_self()?;
    Ok(status.ruleset)
}

/// A hidden path at or under the workspace or a writable directory: the program would read
/// (and write) it there, whatever else hides it.
fn exposed(args: &LauncherArgs) -> Option<PathBuf> {
    let real = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let open: Vec<PathBuf> = std::iter::once(&args.workspace)
        .chain(&args.writable)
        .map(|d| real(d))
        .collect();
    args.hidden
        .iter()
        .map(|h| real(h))
        .find(|h| open.iter().any(|d| h.starts_with(d)))
}

/// What to grant read access to so that everything but the `hidden` paths can be read: each
/// entry of every directory on the way from `/` down to a hidden path, but those ways and the
/// hidden paths themselves (nor a symbolic link that leads into one). Empty when nothing is to
/// be hidden (a path that does not exist, or `/`, hides nothing): reads are then not confined.
/// A program cannot list the directories on those ways either (`ls /`); it can open what is
/// in them by name.
fn readable_around(hidden: &[PathBuf]) -> Vec<PathBuf> {
    use std::collections::HashSet;
    let hidden: Vec<PathBuf> = hidden
        .iter()
        .filter_map(|h| std::fs::canonicalize(h).ok())
        .filter(|h| h.parent().is_some())
        .collect();
    let ways: HashSet<PathBuf> = hidden
        .iter()
        .flat_map(|h| h.ancestors().skip(1).map(Path::to_path_buf))
        .collect();
    let mut out = Vec::new();
    for dir in &ways {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if ways.contains(&path) || hidden.contains(&path) {
                continue;
            }
            let real = std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone());
            if hidden
                .iter()
                .any(|h| real.starts_with(h) || h.starts_with(&real))
            {
                continue;
            }
            out.push(path);
        }
    }
    out
}

/// What backs the TCP port rule where Landlock does not look, refused with `EACCES`: MPTCP
/// sockets (their connections pass the TCP hooks by), TCP Fast Open sends (they connect in
/// `sendto`/`sendmsg`, not `connect`), and io_uring (its operations pass seccomp by).
fn connection_filter() -> Result<seccompiler::BpfProgram, seccompiler::Error> {
    use std::collections::BTreeMap;

    use seccompiler::{
        SeccompAction, SeccompCmpArgLen as Len, SeccompCmpOp as Op, SeccompCondition as Cond,
        SeccompFilter, SeccompRule,
    };
    const IPPROTO_MPTCP: u64 = 262;
    const MSG_FASTOPEN: u64 = 0x2000_0000;
    let fast_open = |flags: u8| -> Result<SeccompRule, seccompiler::Error> {
        Ok(SeccompRule::new(vec![Cond::new(
            flags,
            Len::Dword,
            Op::MaskedEq(MSG_FASTOPEN),
            MSG_FASTOPEN,
        )?])?)
    };
    let rules = BTreeMap::from([
        (
            libc::SYS_socket,
            vec![SeccompRule::new(vec![Cond::new(
                2,
                Len::Dword,
                Op::Eq,
                IPPROTO_MPTCP,
            )?])?],
        ),
        (libc::SYS_sendto, vec![fast_open(3)?]),
        (libc::SYS_sendmsg, vec![fast_open(2)?]),
        (libc::SYS_sendmmsg, vec![fast_open(3)?]),
        (libc::SYS_io_uring_setup, vec![]),
    ]);
    let denied = SeccompAction::Errno(u32::try_from(libc::EACCES).unwrap_or(13));
    let arch = std::env::consts::ARCH.try_into()?;
    let filter = SeccompFilter::new(rules, SeccompAction::Allow, denied, arch)?;
    Ok(filter.try_into()?)
}

/// In `bwrap` mode, before bubblewrap starts: only the connection rules of [`landlock`].
fn restrict_connections(ports: &ConnectPorts) -> Result<(), RulesetError> {
    if *ports == ConnectPorts::Any {
        return Ok(());
    }
    Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessNet::ConnectTcp | AccessNet::BindTcp)?
        .create()?
        .add_rules(port_rules(ports))?
        .restrict_self()?;
    Ok(())
}

/// One rule per allowed port, and binding only to a port the kernel picks (port 0): a program
/// that listened on a fixed port could take a service's port while it restarts.
fn port_rules(ports: &ConnectPorts) -> impl Iterator<Item = Result<NetPort, RulesetError>> + '_ {
    let (ports, ephemeral) = match ports {
        ConnectPorts::Any => (&[][..], None),
        ConnectPorts::Only(ports) => (
            ports.as_slice(),
            Some(Ok(NetPort::new(0, AccessNet::BindTcp))),
        ),
    };
    ports
        .iter()
        .map(|port| Ok(NetPort::new(*port, AccessNet::ConnectTcp)))
        .chain(ephemeral)
}

/// bubblewrap's arguments before the program: the whole file system read-only, fresh `/dev`,
/// `/proc` and `/tmp`, the workspace and writable directories bound read-write, new PID, IPC and
/// UTS namespaces, and the sandbox dies with the launcher's process group.
fn bwrap_args(args: &LauncherArgs) -> Vec<OsString> {
    let mut out: Vec<OsString> = [
        "--die-with-parent",
        "--cap-drop",
        "ALL",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--tmpfs",
        "/tmp",
    ]
    .into_iter()
    .map(OsString::from)
    .collect();
    // Over the read-only root, before the workspace is bound (it may lie under one).
    for hidden in &args.hidden {
        if hidden.is_dir() {
            out.extend(["--tmpfs".into(), hidden.clone().into()]);
        } else if hidden.exists() {
            out.extend([
                "--ro-bind".into(),
                "/dev/null".into(),
                hidden.clone().into(),
            ]);
        }
    }
    for dir in std::iter::once(&args.workspace).chain(&args.writable) {
        out.extend(["--bind".into(), dir.clone().into(), dir.clone().into()]);
    }
    out.extend(["--chdir".into(), args.workspace.clone().into(), "--".into()]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bwrap_binds_the_workspace_writable_over_a_read_only_root() {
        let a = LauncherArgs::new(
            Path::new("/ws"),
            vec![],
            &ResourceLimits::default(),
            Confine::Bwrap,
            Path::new("bwrap"),
        );
        let got: Vec<String> = bwrap_args(&a)
            .iter()
            .map(|s| s.to_string_lossy().into_owned())
            .collect();
        let s = got.join(" ");
        assert!(
            s.contains("--ro-bind / /")
                && s.contains("--bind /ws /ws")
                && s.ends_with("--chdir /ws --"),
            "{s}"
        );
    }

    #[test]
    fn bwrap_covers_hidden_paths_before_it_binds_the_workspace() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (data, keys) = (dir.path().join("data"), dir.path().join("keys.yaml"));
        std::fs::create_dir_all(data.join("workspaces/a")).expect("dirs");
        std::fs::write(&keys, "keys: []").expect("keys");
        let mut a = LauncherArgs::new(
            &data.join("workspaces/a"),
            vec![],
            &ResourceLimits::default(),
            Confine::Bwrap,
            Path::new("bwrap"),
        );
        a.hidden = vec![data.clone(), keys.clone(), dir.path().join("absent")];
        let s = bwrap_args(&a)
            .iter()
            .map(|s| s.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ");
        let tmpfs = format!("--tmpfs {}", data.display());
        let bind = format!("--bind {0}/workspaces/a {0}/workspaces/a", data.display());
        assert!(
            s.contains(&format!("--ro-bind /dev/null {}", keys.display())),
            "{s}"
        );
        assert!(!s.contains("absent"), "{s}");
        assert!(
            s.find(&tmpfs)
                .zip(s.find(&bind))
                .is_some_and(|(t, b)| t < b),
            "{s}"
        );
    }

    #[test]
    fn a_workspace_that_holds_a_hidden_path_is_refused() {
        let mut a = LauncherArgs::new(
            Path::new("/var/lib/taskforce"),
            vec![],
            &ResourceLimits::default(),
            Confine::Landlock,
            Path::new("bwrap"),
        );
        a.hidden = vec![PathBuf::from("/var/lib/taskforce/executor")];
        assert!(exposed(&a).is_some());
        a.workspace = PathBuf::from("/var/lib/taskforce/executor/workspaces/x");
        assert_eq!(
            exposed(&a),
            None,
            "a workspace inside the data directory is fine"
        );
    }

    #[test]
    fn reads_are_granted_around_hidden_paths_only() {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = std::fs::canonicalize(dir.path()).expect("canonical");
        let data = root.join("data");
        std::fs::create_dir_all(data.join("workspaces/a")).expect("dirs");
        std::fs::create_dir_all(root.join("config")).expect("config");
        std::os::unix::fs::symlink(&data, root.join("shortcut")).expect("link");
        let readable = readable_around(std::slice::from_ref(&data));
        // The neighbours on the way are granted; the hidden path, the ways to it and a link
        // into it are not.
        assert!(readable.contains(&root.join("config")), "{readable:?}");
        assert!(readable.contains(&PathBuf::from("/etc")), "{readable:?}");
        for never in [
            data.clone(),
            root.clone(),
            root.join("shortcut"),
            "/".into(),
        ] {
            assert!(!readable.contains(&never), "{never:?} in {readable:?}");
        }
        assert!(
            readable.iter().all(|p| !p.starts_with(&data)),
            "{readable:?}"
        );
        // Nothing to hide, nothing confined.
        assert!(readable_around(&[]).is_empty());
        assert!(readable_around(&[root.join("absent")]).is_empty());
        assert!(readable_around(&[PathBuf::from("/")]).is_empty());
    }
}
