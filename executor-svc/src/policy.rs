//! The one policy check every tool call passes before it runs.
//!
//! This is the hook the policy modes (`readOnly`, `default`, `safeWrite`, allow and deny
//! patterns) plug into in a later issue; for now every call is allowed. A blocked call must not
//! run: the loop hands [`Decision::Block`]'s reason to the model as a `policy_blocked` error
//! result and the run goes on.

use serde_json::Value;

/// What the policy says about one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Run it.
    Allow,
    /// Do not run it; the reason goes to the model and the audit log.
    Block {
        /// Why, in a sentence the model can act on.
        reason: String,
    },
}

/// The call being checked.
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    /// The agent making it.
    pub agent_id: &'a str,
    /// The tool.
    pub tool: &'a str,
    /// The model's arguments.
    pub arguments: &'a Value,
}

/// Checks one call. Allows everything until policy modes exist.
pub fn check(call: Call<'_>) -> Decision {
    let _ = (call.agent_id, call.tool, call.arguments);
    Decision::Allow
}
