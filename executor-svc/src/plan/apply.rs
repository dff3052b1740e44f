//! Applying a patch as a whole or not at all, and the [`Rejection`] that says why one was
//! refused.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::draft::{Draft, UnlinkPolicy};
use super::patch::Patch;
use super::{MAX_OPS, Plan};

/// Why a patch was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RejectReason {
    /// The patch was written against another version of the plan.
    Conflict,
    /// The author may not make this change.
    Forbidden,
    /// The change is malformed or would break the plan.
    Invalid,
}

impl RejectReason {
    /// The wire name: `conflict`, `forbidden` or `invalid`.
    pub fn as_str(self) -> &'static str {
        match self {
            RejectReason::Conflict => "conflict",
            RejectReason::Forbidden => "forbidden",
            RejectReason::Invalid => "invalid",
        }
    }
}

impl fmt::Display for RejectReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A refused patch. Serializes as
/// `{"error": "conflict", "message": …, "current_version": …, "rejected_ops": […]}` so it can be
/// handed to the model as it is.
#[derive(Debug, Clone, PartialEq, Serialize, thiserror::Error)]
#[error("{reason}: {message}")]
pub struct Rejection {
    /// Why.
    #[serde(rename = "error")]
    pub reason: RejectReason,
    /// What exactly, for the model; for an op's failure it starts with `ops[i]: `.
    pub message: String,
    /// The plan's version, unchanged by the refused patch.
    pub current_version: u64,
    /// The op that failed, or every op for a conflict, or none when the patch as a whole is wrong.
    pub rejected_ops: Vec<Value>,
}

impl Plan {
    /// Applies `patch` by `author` as a whole and returns the new version, or refuses it and
    /// leaves the plan exactly as it was.
    pub fn apply(
        &mut self,
        author: &str,
        patch: &Patch,
        policy: UnlinkPolicy,
    ) -> Result<u64, Rejection> {
        let reject = |reason, message, rejected_ops| Rejection {
            reason,
            message,
            current_version: self.version,
            rejected_ops,
        };
        if let Some(base) = patch.base_version
            && base != self.version
        {
            return Err(reject(
                RejectReason::Conflict,
                format!(
                    "the patch is based on version {base} but the plan is at version {}: read \
                     the plan again and resend the patch with base_version {}",
                    self.version, self.version
                ),
                patch.ops_json(),
            ));
        }
        // Whole-patch problems name no op: echoing hundreds of ops back would only cost tokens.
        if patch.ops.is_empty() {
            return Err(reject(
                RejectReason::Invalid,
                "a patch needs at least one op".to_owned(),
                Vec::new(),
            ));
        }
        if patch.ops.len() > MAX_OPS {
            return Err(reject(
                RejectReason::Invalid,
                format!(
                    "a patch may have at most {MAX_OPS} ops, this one has {}",
                    patch.ops.len()
                ),
                Vec::new(),
            ));
        }
        let mut draft = Draft::new(&self.tasks);
        for (i, op) in patch.ops.iter().enumerate() {
            if let Err((reason, message)) = draft.apply(author, op, policy) {
                return Err(reject(
                    reason,
                    format!("ops[{i}]: {message}"),
                    vec![op.to_json()],
                ));
            }
        }
        self.tasks = draft.tasks;
        // Saturating only so no input can panic; 2^64 patches are not going to happen.
        self.version = self.version.saturating_add(1);
        Ok(self.version)
    }
}
