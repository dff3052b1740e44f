//! Running one subprocess for a tool: in the workspace, in its own process group, with a minimal
//! environment, a timeout, the run's cancellation and an output cap, started through the
//! [`super::sandbox`] launcher (resource limits, writes confined to the workspace and a per-call
//! temp dir).
//!
//! The whole process group is killed (SIGKILL) and reaped when the call times out, is cancelled,
//! or its future is dropped, so nothing the program started outlives the call; the group is in
//! the [`super::ledger`] while it runs, so even an executor killed outright does not leave it
//! running past the next start.

use std::{
    ffi::OsString,
    path::{Path, PathBuf},
    process::Stdio,
    sync::Arc,
    time::Duration,
};

use process_wrap::tokio::{ChildWrapper, CommandWrap, KillOnDrop, ProcessGroup};
use taskforce_runtime::env::{TOOL_ENV, minimal_command};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tracing::{debug, warn};

use super::{failed, sandbox::Sandbox};
use crate::tools::{ToolContext, ToolError, ToolOutcome};

/// How long the launcher may take to end what is below it before the group is killed.
const LAUNCHER_GRACE: Duration = Duration::from_millis(500);

/// How long reaping a killed process group may take before it is left to `KillOnDrop`.
const REAP_GRACE: Duration = Duration::from_secs(2);

/// One program to run.
#[derive(Debug)]
pub(crate) struct Spawn<'a> {
    /// The tool, for errors and logs.
    pub tool: &'a str,
    /// The binary (looked up on `PATH`).
    pub program: &'a Path,
    /// Its arguments, never through a shell.
    pub args: Vec<OsString>,
    /// Extra environment on top of [`TOOL_ENV`], the few variables passed through from the
    /// executor's (everything else, API keys and tokens, stays out of the child).
    pub env: Vec<(&'static str, OsString)>,
    /// Written to stdin, which is then closed; `None` gives an empty stdin.
    pub stdin: Option<Vec<u8>>,
    /// The working directory (the canonical workspace).
    pub cwd: PathBuf,
    /// Wall-clock limit.
    pub timeout: Duration,
    /// The sandbox the program starts in.
    pub sandbox: Arc<Sandbox>,
}

/// What a finished program left.
#[derive(Debug)]
pub(crate) struct Finished {
    /// Exit code; `None` when a signal ended it.
    pub code: Option<i32>,
    /// The signal that ended it, if one did.
    pub signal: Option<i32>,
    /// Captured stdout: its first bytes, at most the cap.
    pub stdout: Vec<u8>,
    /// Captured stderr: its last bytes, at most the cap.
    pub stderr: Vec<u8>,
    /// How many bytes the program wrote to stdout.
    pub stdout_total: usize,
    /// How many bytes the program wrote to stderr.
    pub stderr_total: usize,
    /// The program ended, but a process it started kept the output open and was killed.
    pub lingered: bool,
}

impl Finished {
    /// The output for the model: exit code, stdout, stderr, about `max` bytes of them; a
    /// non-zero exit is a failed outcome. When both do not fit, stderr keeps up to half of
    /// `max` (its end: a traceback's last lines say what went wrong) and stdout the rest (its
    /// beginning), each cut said with its size.
    pub fn into_outcome(self, max: usize) -> ToolOutcome {
        let code = match (self.code, self.signal) {
            (Some(c), _) => c.to_string(),
            (None, Some(s)) => match nix::sys::signal::Signal::try_from(s) {
                // SIGKILL and SIGXCPU are what the sandbox's CPU limit sends.
                Ok(name) => format!("killed by signal {s} ({name})"),
                Err(_) => format!("killed by signal {s}"),
            },
            (None, None) => "killed by a signal".to_owned(),
        };
        let mut text = format!("exit code: {code}\n");
        let room = max.saturating_sub(text.len());
        let (out, err) = (&self.stdout, &self.stderr);
        let totals = [
            self.stdout_total.max(out.len()),
            self.stderr_total.max(err.len()),
        ];
        let err_room = if out.len() + err.len() <= room {
            err.len()
        } else {
            err.len()
                .min((room / 2).max(room.saturating_sub(out.len())))
        };
        let out_room = room.saturating_sub(err_room);
        for ((name, bytes, keep, from_end), total) in [
            ("stdout", out, out_room, false),
            ("stderr", err, err_room, true),
        ]
        .into_iter()
        .zip(totals)
        {
            if bytes.is_empty() {
                continue;
            }
            text.push_str(name);
            text.push_str(":\n");
            let (piece, shown) = part(bytes, keep, from_end);
            text.push_str(&piece);
            if !text.ends_with('\n') {
                text.push('\n');
            }
            if shown < total {
                let which = if from_end { "last" } else { "first" };
                text.push_str(&format!(
                    "[{name} cut: the {which} {shown} of {total} bytes shown]\n"
                ));
            }
        }
        if self.stdout.is_empty() && self.stderr.is_empty() {
            text.push_str("(no output)\n");
        }
        if self.lingered {
            text.push_str(&format!(
                "[a process the program started kept its output open; it was killed {}s after \
                 the program ended (a server cannot be left running by a tool call)]\n",
                LINGER.as_secs()
            ));
        }
        if self.code == Some(0) {
            ToolOutcome::ok(text)
        } else {
            ToolOutcome::failed(text)
        }
    }
}

/// A timeout that says what the program had printed by then (the model would otherwise see
/// nothing of a program that printed and then hung, or that exited leaving a background
/// process holding its output open: the group runs until all of it has ended). Without output,
/// or for a cancel, the error as it was.
fn with_partial_output(
    e: ToolError,
    stdout: &Captured,
    stderr: &Captured,
    cap: usize,
) -> ToolError {
    let ToolError::Timeout { tool, after } = e else {
        return e;
    };
    if stdout.total == 0 && stderr.total == 0 {
        return ToolError::Timeout { tool, after };
    }
    let printed = Finished {
        code: None,
        signal: None,
        stdout: stdout.kept().to_vec(),
        stderr: stderr.kept().to_vec(),
        stdout_total: stdout.total,
        stderr_total: stderr.total,
        lingered: false,
    }
    .into_outcome(cap);
    let ToolOutcome::Output { content, .. } = printed else {
        return ToolError::Timeout { tool, after };
    };
    let printed = content
        .strip_prefix("exit code: killed by a signal\n")
        .unwrap_or(&content)
        .to_owned();
    ToolError::Failed {
        reason: format!(
            "timed out after {after:?}, and its processes were killed (a background process that \
             keeps the output open counts as running); what it printed by then:\n{printed}"
        ),
        tool,
    }
}

/// At most `keep` bytes of `bytes` as text, from the start or the end, on a character boundary.
fn part(bytes: &[u8], keep: usize, from_end: bool) -> (String, usize) {
    // The tail starts at a character (not in the middle of one's bytes).
    let mut start = if from_end {
        bytes.len().saturating_sub(keep)
    } else {
        0
    };
    while start < bytes.len() && start > 0 && bytes[start] & 0xC0 == 0x80 {
        start += 1;
    }
    leading_text(&bytes[start..], keep)
}

/// The longest start of `bytes` whose text (invalid bytes as U+FFFD) fits `budget` bytes, cut
/// at a whole character, and how many of `bytes` it shows: a notice of the cut counts these,
/// not the text's length (a replaced byte is 3 bytes of text).
fn leading_text(bytes: &[u8], budget: usize) -> (String, usize) {
    let mut text = String::with_capacity(budget.min(bytes.len()));
    let mut used = 0;
    for chunk in bytes.utf8_chunks() {
        let valid = chunk.valid();
        let room = budget - text.len();
        if valid.len() > room {
            let mut end = room;
            while !valid.is_char_boundary(end) {
                end -= 1;
            }
            text.push_str(&valid[..end]);
            return (text, used + end);
        }
        text.push_str(valid);
        used += valid.len();
        if !chunk.invalid().is_empty() {
            if text.len() + '\u{fffd}'.len_utf8() > budget {
                return (text, used);
            }
            text.push('\u{fffd}');
            used += chunk.invalid().len();
        }
    }
    (text, used)
}

/// Runs `spec` to the end, its timeout, or `ctx.cancel`, keeping at most `cap` bytes of each
/// stream (the rest is drained so the program never blocks on a full pipe).
pub(crate) async fn run(
    ctx: &ToolContext,
    spec: Spawn<'_>,
    cap: usize,
) -> Result<Finished, ToolError> {
    let tool = spec.tool;
    let (sandbox, cwd, program) = (
        spec.sandbox.clone(),
        spec.cwd.clone(),
        spec.program.to_path_buf(),
    );
    let args = spec.args;
    // Kept until the end of the call: dropping it removes the call's temp dir.
    let wrapped = super::blocking(tool, {
        let tool = tool.to_owned();
        move || sandbox.wrap(&tool, &cwd, &program, args)
    })
    .await?;
    let mut cmd = tokio::process::Command::from(minimal_command(&wrapped.program, &TOOL_ENV));
    cmd.args(&wrapped.args)
        .current_dir(&spec.cwd)
        .envs(spec.env.iter().chain(&wrapped.env).map(|(k, v)| (*k, v)))
        .stdin(if spec.stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut wrap = CommandWrap::from(cmd);
    wrap.wrap(ProcessGroup::leader()).wrap(KillOnDrop);
    let child = wrap.spawn().map_err(|e| {
        failed(
            tool,
            format!("could not start {}: {e}", wrapped.program.display()),
        )
    })?;
    let recorded = super::ledger::record(child.id());
    let mut guard = GroupGuard {
        child,
        ended: false,
        _recorded: recorded,
    };
    let child = &mut guard.child;
    let pid = child.id();
    debug!(tool, pid, agent_id = %ctx.agent_id, session_id = %ctx.session_id, "subprocess started");
    let stdin = child.stdin().take();
    let (stdout, stderr) = (child.stdout().take(), child.stderr().take());
    let input = spec.stdin;
    let (mut out, mut err) = (Captured::new(cap, false), Captured::new(cap, true));
    let ended = {
        let feed = async move {
            if let (Some(mut pipe), Some(bytes)) = (stdin, input) {
                // A program that exits without reading its stdin is not an error here.
                let _ = pipe.write_all(&bytes).await;
            }
        };
        let work = async {
            let reading = async {
                tokio::join!(
                    feed,
                    read_capped(stdout, &mut out),
                    read_capped(stderr, &mut err)
                )
            };
            tokio::pin!(reading);
            // The output ends when every process holding the pipes has ended; the program may
            // have ended long before, leaving a background process (a server it started)
            // holding them: the call then ends `LINGER` after the program did, and the rest
            // of its group is killed.
            let read = tokio::select! {
                r = &mut reading => Some(r),
                exited = leader(child.as_mut()).wait() => match exited {
                    Ok(_) => tokio::time::timeout(LINGER, &mut reading).await.ok(),
                    // Not known to have ended: read to the end (or the timeout) as before.
                    Err(_) => Some(reading.await),
                },
            };
            let lingered = read.is_none();
            if lingered {
                let _ = child.start_kill();
            }
            let status = child.wait().await;
            let (o, e) = read.map_or((Ok(()), Ok(())), |((), o, e)| (o, e));
            (o, e, status, lingered)
        };
        tokio::select! {
            r = work => Ok(r),
            () = tokio::time::sleep(spec.timeout) => Err(ToolError::Timeout { tool: tool.to_owned(), after: spec.timeout }),
            () = ctx.cancel.cancelled() => Err(ToolError::Cancelled { tool: tool.to_owned() }),
        }
    };
    match ended {
        Ok((o, e, status, lingered)) => {
            // The wait covers the whole group: nothing of it is left to kill.
            guard.ended = status.is_ok();
            let status = status.map_err(|e| failed(tool, e))?;
            o.map_err(|e| failed(tool, e))?;
            e.map_err(|e| failed(tool, e))?;
            debug!(
                tool,
                pid,
                code = status.code(),
                lingered,
                "subprocess ended"
            );
            Ok(Finished {
                code: status.code(),
                signal: std::os::unix::process::ExitStatusExt::signal(&status),
                stdout_total: out.total,
                stderr_total: err.total,
                stdout: out.into_kept(),
                stderr: err.into_kept(),
                lingered,
            })
        }
        Err(e) => {
            let launched = spec.sandbox.mode() != super::sandbox::SandboxMode::None;
            kill_group(tool, pid, guard.child.as_mut(), launched).await;
            guard.ended = true;
            Err(with_partial_output(e, &out, &err, cap))
        }
    }
}

/// How long the output may stay open after the program ended (a background process it started
/// holds it) before the rest of its group is killed and the call ends.
const LINGER: Duration = Duration::from_secs(1);

/// The program itself in its wrappers (kill-on-drop, process group): waiting on it waits for
/// it alone, not for its whole group.
fn leader(mut child: &mut dyn ChildWrapper) -> &mut dyn ChildWrapper {
    // Each wrapper's `inner_mut` is the next one in; the innermost's is itself.
    for _ in 0..8 {
        let at: *const dyn ChildWrapper = child;
        let next: *const dyn ChildWrapper = child.inner_mut();
        if std::ptr::addr_eq(at, next) {
            break;
        }
        child = child.inner_mut();
    }
    child
}

/// Kills the process group when the call's future is dropped mid-run (the loop gave up on it):
/// `KillOnDrop` alone would kill only the leader, leaving what it started running.
struct GroupGuard {
    child: Box<dyn ChildWrapper>,
    ended: bool,
    /// Dropped after the kill in `drop`: the group is gone before its ledger entry is.
    _recorded: super::ledger::Entry,
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if !self.ended {
            let pid = self.child.id();
            match self.child.start_kill() {
                Ok(()) => debug!(pid, "subprocess group killed on drop"),
                Err(e) => warn!(pid, error = %e, "could not kill a dropped subprocess group"),
            }
        }
    }
}

/// Kills the whole group and reaps it, bounded; `KillOnDrop` is the backstop.
async fn kill_group(tool: &str, pid: Option<u32>, child: &mut dyn ChildWrapper, launched: bool) {
    // The launcher first, alone: it kills what the program started outside the group, which
    // the group's kill would miss (see the launcher's `kill_below`).
    if launched
        && let Some(raw) = pid.and_then(|p| i32::try_from(p).ok())
        && nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(raw),
            nix::sys::signal::Signal::SIGTERM,
        )
        .is_ok()
    {
        let _ = tokio::time::timeout(LAUNCHER_GRACE, leader(child).wait()).await;
    }
    if let Err(e) = child.start_kill() {
        warn!(tool, pid, error = %e, "could not kill the subprocess group");
        return;
    }
    match tokio::time::timeout(REAP_GRACE, child.wait()).await {
        Ok(_) => debug!(tool, pid, "subprocess group killed"),
        Err(_) => warn!(
            tool,
            pid, "subprocess group did not exit after SIGKILL in time"
        ),
    }
}

/// What was read of one stream: at most `cap` bytes of it, its beginning (stdout: what a
/// program printed first) or its end (stderr: a traceback's last lines say what went wrong),
/// and how much there was. Kept where the caller can still see it when the reading is given up
/// (a timeout).
#[derive(Debug)]
struct Captured {
    buf: Vec<u8>,
    total: usize,
    cap: usize,
    keep_end: bool,
}

impl Captured {
    fn new(cap: usize, keep_end: bool) -> Self {
        Self {
            buf: Vec::new(),
            total: 0,
            cap,
            keep_end,
        }
    }

    fn push(&mut self, bytes: &[u8]) {
        self.total += bytes.len();
        if self.keep_end {
            self.buf.extend_from_slice(bytes);
            // Trimmed in steps, so a long stream is not moved at every read.
            if self.buf.len() > self.cap.saturating_mul(2) {
                self.buf.drain(..self.buf.len() - self.cap);
            }
        } else {
            let room = self.cap.saturating_sub(self.buf.len());
            self.buf.extend_from_slice(&bytes[..bytes.len().min(room)]);
        }
    }

    /// The bytes kept, at most `cap`.
    fn kept(&self) -> &[u8] {
        &self.buf[self.buf.len().saturating_sub(self.cap)..]
    }

    fn into_kept(mut self) -> Vec<u8> {
        let extra = self.buf.len().saturating_sub(self.cap);
        self.buf.drain(..extra);
        self.buf
    }
}

/// Reads the stream to its end into `into`, which keeps what its cap allows and counts the rest
/// (the program never blocks on a full pipe).
async fn read_capped<R: AsyncRead + Unpin>(
    pipe: Option<R>,
    into: &mut Captured,
) -> std::io::Result<()> {
    let Some(mut pipe) = pipe else {
        return Ok(());
    };
    let mut chunk = [0u8; 8192];
    loop {
        let n = pipe.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        into.push(&chunk[..n]);
    }
}

/// The effective timeout: the model may ask for less than the call's limit, never more.
/// `timeout_seconds: 0` is refused (the schema's minimum is 1).
pub(crate) fn timeout(
    tool: &str,
    ctx: &ToolContext,
    requested_seconds: Option<u64>,
) -> Result<Duration, ToolError> {
    if requested_seconds == Some(0) {
        return Err(ToolError::InvalidArguments {
            tool: tool.to_owned(),
            reason: "`timeout_seconds` must be at least 1".to_owned(),
        });
    }
    Ok(requested_seconds
        .map(Duration::from_secs)
        .map_or(ctx.limits.timeout, |t| t.min(ctx.limits.timeout)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(outcome: ToolOutcome) -> String {
        match outcome {
            ToolOutcome::Output { content, .. } => content,
            other => panic!("not an output: {other:?}"),
        }
    }

    #[test]
    fn a_cut_inside_a_character_says_what_was_shown() {
        // Two-byte characters: wherever the cut lands (odd and even limits), the count is of
        // the bytes shown; bytes that are not UTF-8 (each shown as a 3-byte U+FFFD) count as
        // the bytes they are.
        for (max, stdout) in (10_000..10_004)
            .map(|max| (max, "é".repeat(50_000).into_bytes()))
            .chain([(10_000, vec![0xff; 30_000])])
        {
            let total = stdout.len();
            let shown = text(
                Finished {
                    code: Some(0),
                    signal: None,
                    stdout,
                    stderr: Vec::new(),
                    stdout_total: 0,
                    stderr_total: 0,
                    lingered: false,
                }
                .into_outcome(max),
            );
            let line = shown.lines().nth(2).unwrap_or_default();
            let kept = line.len() - line.matches('\u{fffd}').count() * 2;
            assert!(
                shown.contains(&format!(
                    "[stdout cut: the first {kept} of {total} bytes shown]"
                )),
                "{max}, {kept}: {}",
                &shown[shown.len().saturating_sub(120)..]
            );
        }
    }

    #[test]
    fn a_flood_on_stdout_leaves_the_end_of_stderr_and_both_cuts_are_said() {
        let max = 64 * 1024;
        let stdout = "row of data\n".repeat(20_000).into_bytes();
        let stderr = format!("{}ValueError: THE REAL ERROR\n", "  frame\n".repeat(10_000));
        let (out_len, err_len) = (stdout.len(), stderr.len());
        let shown = text(
            Finished {
                code: Some(1),
                signal: None,
                stdout,
                stderr: stderr.into_bytes(),
                stdout_total: 0,
                stderr_total: 0,
                lingered: false,
            }
            .into_outcome(max),
        );
        assert!(
            shown.starts_with("exit code: 1\nstdout:\nrow of data\n"),
            "{}",
            &shown[..80]
        );
        assert!(
            shown.contains("ValueError: THE REAL ERROR\n"),
            "the traceback's end is kept"
        );
        assert!(
            shown.contains(&format!(" of {out_len} bytes shown]")),
            "stdout's cut"
        );
        assert!(shown.contains("[stderr cut: the last "), "stderr's cut");
        assert!(
            shown.contains(&format!(" of {err_len} bytes shown]")),
            "its total"
        );
        assert!(shown.len() <= max + 200, "{}", shown.len());
        // Small output is whole, with nothing said.
        let small = text(
            Finished {
                code: Some(0),
                signal: None,
                stdout: b"fine\n".to_vec(),
                stderr: b"warning\n".to_vec(),
                stdout_total: 0,
                stderr_total: 0,
                lingered: false,
            }
            .into_outcome(max),
        );
        assert_eq!(small, "exit code: 0\nstdout:\nfine\nstderr:\nwarning\n");
    }

    #[test]
    fn a_stream_keeps_its_beginning_or_its_end_and_counts_all_of_it() {
        let (mut head, mut tail) = (Captured::new(10, false), Captured::new(10, true));
        for n in 0..1000u32 {
            let piece = format!("{n:04}|");
            head.push(piece.as_bytes());
            tail.push(piece.as_bytes());
        }
        assert_eq!((head.total, tail.total), (5000, 5000));
        assert_eq!(head.kept(), b"0000|0001|");
        assert_eq!(tail.kept(), b"0998|0999|");
        assert_eq!(tail.into_kept(), b"0998|0999|");
        assert_eq!(head.into_kept(), b"0000|0001|");
    }
}
