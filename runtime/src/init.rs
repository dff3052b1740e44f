//! A service started as PID 1 (a container with no init) is its own init: before anything else
//! runs, the process starts its own program again as its child (with the same arguments and
//! environment), which is the service; the parent stays PID 1, reaps every orphan the kernel
//! hands it, passes the stop signals on to the service and exits with the service's status.
//!
//! Why not `tini`: an init keeps the container's whole environment (the service token, the API
//! keys, the model providers' keys) in its `/proc/1/environ` for its whole life, and `tini` is
//! dumpable, so any process of the same user (an agent's stdio MCP server, a tool without
//! Landlock) could read them there. This init makes itself non-dumpable first, as the service
//! does ([`crate::protect_secrets`]). (A `fork` would save starting the program again, but the
//! workspace forbids `unsafe`.)

use std::os::unix::process::CommandExt;

use nix::{
    sys::{
        signal::{SigSet, SigmaskHow, Signal, kill, sigprocmask},
        wait::{WaitPidFlag, WaitStatus, waitpid},
    },
    unistd::Pid,
};

/// The signals the init passes on to the service: the stops it handles (others sent to PID 1
/// stay pending, as they would for a service that is PID 1 itself: PID 1 ignores what it does
/// not handle).
const FORWARDED: [Signal; 2] = [Signal::SIGTERM, Signal::SIGINT];

/// When this process is PID 1, starts this program again as its child (the service) and runs
/// [`init`], never returning; anywhere else it unblocks the signals the service handles (an
/// init's child starts with them blocked) and returns. Call before anything else: the init
/// starts no thread.
pub fn become_init_if_pid1() -> std::io::Result<()> {
    let mut watched = SigSet::empty();
    for signal in FORWARDED.into_iter().chain([Signal::SIGCHLD]) {
        watched.add(signal);
    }
    if std::process::id() != 1 {
        // The service (here or as an init's child, which starts with the init's mask): its
        // stop signals and its children's ends must reach it.
        sigprocmask(SigmaskHow::SIG_UNBLOCK, Some(&watched), None)?;
        return Ok(());
    }
    // Nothing of this process (its environment holds the service's secrets) is for another
    // process of its user to read.
    let _ = nix::sys::prctl::set_dumpable(false);
    // Blocked before the service starts, so a signal arriving meanwhile waits for the loop
    // (the child unblocks them for itself, above).
    sigprocmask(SigmaskHow::SIG_BLOCK, Some(&watched), None)?;
    let exe = std::env::current_exe().map_err(|e| {
        std::io::Error::new(e.kind(), format!("PID 1 cannot find its own program: {e}"))
    })?;
    // In a process group of its own: a Ctrl-C on a terminal (`docker run -it`) reaches the
    // init's group, and the init passes it on once; a second SIGINT would stop the service
    // at once, without draining its runs.
    let service = std::process::Command::new(&exe)
        .args(std::env::args_os().skip(1))
        .process_group(0)
        .spawn()
        .map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!("PID 1 cannot start the service ({}): {e}", exe.display()),
            )
        })?;
    let pid = i32::try_from(service.id()).map_err(std::io::Error::other)?;
    init(Pid::from_raw(pid), &watched)
}

/// PID 1's loop: reaps every child that ends (the service, and the orphans reparented to PID
/// 1), passes the [`FORWARDED`] signals on to `service`, and exits as the service did (its exit
/// code, or 128 + the signal that killed it).
fn init(service: Pid, watched: &SigSet) -> ! {
    loop {
        let Ok(signal) = watched.wait() else {
            continue;
        };
        if signal != Signal::SIGCHLD {
            let _ = kill(service, signal);
            continue;
        }
        loop {
            match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::Exited(pid, code)) if pid == service => std::process::exit(code),
                Ok(WaitStatus::Signaled(pid, signal, _)) if pid == service => {
                    std::process::exit(128 + signal as i32)
                }
                // No child has ended (any more), or none is left.
                Ok(WaitStatus::StillAlive) | Err(_) => break,
                // An orphan reaped.
                Ok(_) => {}
            }
        }
    }
}
