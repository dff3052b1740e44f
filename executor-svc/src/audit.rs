//! The audit log: one line per tool call, on the `audit` tracing target.
//!
//! Fields: time, agent, session (and the same id as `thread_id`, the chat endpoints' name for
//! it), agent path, tool, the sub-agent a delegation ran (`agent_name`), a patch's ops, input
//! (cut to 200 characters), outcome (`policy_blocked` when the policy refused the call), the
//! run's policy mode, the SHA-256 of the first 4 KiB of the output, and the duration. Route the
//! target to its own sink with `RUST_LOG` / a subscriber filter on `audit`.

use std::time::Duration;

use sha2::{Digest, Sha256};

/// How much of the input goes into the line.
const INPUT_CHARS: usize = 200;
/// How much of the output is hashed.
const HASHED_BYTES: usize = 4096;

/// How a call ended, for the audit line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Output the tool reported as success.
    Ok,
    /// Output the tool reported as a failure.
    ToolFailed,
    /// The call could not run (bad arguments, unknown tool, timeout, ...).
    Error,
    /// The policy blocked it.
    Blocked,
    /// It asked the user a question.
    Question,
    /// The run was cancelled (or its client left, or its time ran out) during the call.
    Cancelled,
}

impl Outcome {
    /// Its name in the audit line and the metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::ToolFailed => "tool_failed",
            Self::Error => "error",
            Self::Blocked => "policy_blocked",
            Self::Question => "question",
            Self::Cancelled => "cancelled",
        }
    }
}

/// One audited call.
#[derive(Debug, Clone, Copy)]
pub struct Record<'a> {
    /// The agent.
    pub agent_id: &'a str,
    /// The session.
    pub session_id: &'a str,
    /// The frame's agent path (empty for the top agent).
    pub agent_path: &'a [String],
    /// The tool call id.
    pub call_id: &'a str,
    /// The tool.
    pub tool: &'a str,
    /// The sub-agent a delegation ran (seed 003 §8's `agent_name`).
    pub subagent: Option<&'a str>,
    /// The ops of a patch the call made, comma-separated.
    pub patch_ops: Option<&'a str>,
    /// The arguments as JSON text.
    pub input: &'a str,
    /// How it ended (`policy_blocked` when the policy refused it).
    pub outcome: Outcome,
    /// The run's policy mode, when it has one.
    pub mode: Option<&'a str>,
    /// What the model got back (output, error or question).
    pub output: &'a str,
    /// How long it took.
    pub duration: Duration,
}

/// Writes the audit line for one call.
pub fn log(record: Record<'_>) {
    tracing::info!(
        target: "audit",
        time = %crate::session::now(),
        agent_id = record.agent_id,
        session_id = record.session_id,
        // The chat endpoints' conversation id is the session id (seed 004 §3.5 says threadId).
        thread_id = record.session_id,
        agent_path = %record.agent_path.join("/"),
        call_id = record.call_id,
        tool = record.tool,
        agent_name = record.subagent.unwrap_or(""),
        patch_ops = record.patch_ops.unwrap_or(""),
        input = %cut(record.input),
        outcome = record.outcome.as_str(),
        policy_mode = record.mode.unwrap_or(""),
        output_sha256 = %output_hash(record.output),
        duration_ms = u64::try_from(record.duration.as_millis()).unwrap_or(u64::MAX),
        "tool call"
    );
}

/// At most [`INPUT_CHARS`] characters.
fn cut(input: &str) -> &str {
    match input.char_indices().nth(INPUT_CHARS) {
        Some((end, _)) => &input[..end],
        None => input,
    }
}

/// Hex SHA-256 of the first 4 KiB of `output`.
pub fn output_hash(output: &str) -> String {
    let bytes = output.as_bytes();
    hex::encode(Sha256::digest(&bytes[..bytes.len().min(HASHED_BYTES)]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_is_cut_on_a_char_boundary() {
        let long = "é".repeat(300);
        assert_eq!(cut(&long).chars().count(), 200);
        assert_eq!(cut("short"), "short");
    }

    #[test]
    fn only_the_first_4_kib_are_hashed() {
        let a = "x".repeat(4096);
        let b = format!("{a}tail");
        assert_eq!(output_hash(&a), output_hash(&b));
        assert_ne!(output_hash("a"), output_hash("b"));
    }
}
