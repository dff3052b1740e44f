//! The session's todo plan and the patch engine that changes it.
//!
//! A session has one master [`Plan`]. The orchestrator (author [`ORCHESTRATOR`]) and sub-agents
//! (author = their agent id) change it only through a [`Patch`]: a list of [`Op`]s applied as a
//! whole or not at all, optionally pinned to the plan version the author last read. A refused
//! patch comes back as a [`Rejection`] that serializes to JSON the model can read and act on.
//!
//! Code (not the model) also changes the plan, without bumping the version: a delegation names
//! or creates its task ([`Plan::ensure_task`]) and moves its status ([`Plan::set_status`]).
//!
//! Everything here is pure: no I/O, no clock, no randomness, so the same patches on the same plan
//! always give the same plan and the same [`Plan::render_markdown`].
//!
//! # Layout
//!
//! - `mod.rs` (here): the plan itself ([`Plan`], [`Task`], [`TaskStatus`]), the limits, and the
//!   code-driven changes ([`Plan::ensure_task`], [`Plan::set_status`]).
//! - `patch`: what a patch is ([`Patch`], [`Op`], [`NewTask`], [`Fields`]) and its JSON form.
//! - `parse`: reading patches from JSON, with messages that say where the problem is.
//! - `apply`: [`Plan::apply`], a patch as a whole or not at all, and the [`Rejection`] that says
//!   why one was refused.
//! - `draft`: the rules for each op: ownership, [`UnlinkPolicy`], new tasks and dependencies.
//! - `validate`: ids, titles, dependency cycles, and [`Plan::check_invariants`].
//! - `markdown`: [`Plan::render_markdown`].
//! - `tests`: unit tests by subject, and proptest properties over random patch sequences.

mod apply;
mod draft;
mod markdown;
mod parse;
mod patch;
mod validate;

#[cfg(test)]
mod tests;

pub use apply::{RejectReason, Rejection};
pub use draft::UnlinkPolicy;
pub use patch::{Fields, NewTask, Op, Patch};

use std::collections::HashSet;
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use validate::validate_id;

/// The author name of the orchestrator, the one author that may change every task.
pub const ORCHESTRATOR: &str = "orchestrator";

/// The most ops one patch may carry.
pub const MAX_OPS: usize = 200;

/// The most tasks a plan may hold.
pub const MAX_TASKS: usize = 1000;

/// The longest task id, in characters.
pub const MAX_ID_LEN: usize = 64;

/// The longest task title, in characters (after trimming).
pub const MAX_TITLE_LEN: usize = 500;

/// Where a task stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum TaskStatus {
    /// Not started yet; the status of every new task.
    Pending,
    /// Someone is working on it.
    InProgress,
    /// Done.
    Completed,
    /// Given up on, or it went wrong.
    Failed,
}

impl TaskStatus {
    /// Every status, in the order messages list them.
    pub const ALL: [TaskStatus; 4] = [
        TaskStatus::Pending,
        TaskStatus::InProgress,
        TaskStatus::Completed,
        TaskStatus::Failed,
    ];

    /// The wire name: `PENDING`, `IN_PROGRESS`, `COMPLETED` or `FAILED`.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Pending => "PENDING",
            TaskStatus::InProgress => "IN_PROGRESS",
            TaskStatus::Completed => "COMPLETED",
            TaskStatus::Failed => "FAILED",
        }
    }

    /// The Markdown checkbox this status renders as.
    fn checkbox(self) -> &'static str {
        match self {
            TaskStatus::Pending => "[ ]",
            TaskStatus::InProgress => "[~]",
            TaskStatus::Completed => "[x]",
            TaskStatus::Failed => "[!]",
        }
    }

    /// The status with this exact wire name.
    fn from_wire(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == name)
    }
}

impl fmt::Display for TaskStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One task of the plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Task {
    /// Unique in the plan; 1–64 characters of `[A-Za-z0-9._-]`.
    pub id: String,
    /// What to do, in a line.
    pub title: String,
    /// Where it stands.
    pub status: TaskStatus,
    /// Ids of the tasks that must be done first; each exists, none twice, no cycles.
    #[serde(default)]
    pub depends_on: Vec<String>,
    /// The agent that owns it: only it and the orchestrator may update it.
    pub owner_agent: String,
    /// The task this is a subtask of; set at creation, never changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_id: Option<String>,
    /// Free text the owner keeps up to date.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub notes: String,
    /// The tool meant to carry it out, if one is named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// Arguments for [`Task::tool`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<Value>,
    /// What came out of it; set by code through [`Plan::set_status`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
}

/// The master todo plan of a session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// Bumped by one for every merged patch; starts at 1.
    pub version: u64,
    /// Every task, in insertion order (subtasks included; they point at their parent).
    pub tasks: Vec<Task>,
}

impl Default for Plan {
    fn default() -> Self {
        Self {
            version: 1,
            tasks: Vec::new(),
        }
    }
}

impl Plan {
    /// The task with this id.
    pub fn task(&self, id: &str) -> Option<&Task> {
        self.tasks.iter().find(|t| t.id == id)
    }

    /// The id of the task a delegation by `delegator` to `owner` works on, which `owner` then
    /// owns. An existing `id` is handed to `owner` when `delegator` may (it owns the task, or is
    /// the orchestrator); a new `id` is validated and created; `None` creates a task with a fresh
    /// id `t<n>`, the smallest `n` ≥ `tasks.len() + 1` not in use. A new task's title is the
    /// first line of `task`, shortened to [`MAX_TITLE_LEN`] characters. Errors name the
    /// delegation's field at fault. Does not bump the version: only merged patches do.
    pub fn ensure_task(
        &mut self,
        id: Option<&str>,
        task: &str,
        delegator: &str,
        owner: &str,
    ) -> Result<String, String> {
        if let Some(id) = id
            && let Some(existing) = self.tasks.iter_mut().find(|t| t.id == id)
        {
            // Only its owner (or the orchestrator) hands a task on. Another agent may still
            // send it back to its owner (a retry), but not once it is done: that would run it
            // again and overwrite a result that is not its own.
            if delegator != ORCHESTRATOR && existing.owner_agent != delegator {
                if existing.owner_agent != owner {
                    return Err(format!(
                        "`task_id`: task `{id}` is owned by `{}`; `{delegator}` may delegate \
                         only tasks it owns",
                        existing.owner_agent
                    ));
                }
                if existing.status == TaskStatus::Completed {
                    return Err(format!(
                        "`task_id`: task `{id}` is owned by `{owner}` and completed; only the \
                         orchestrator may have it done again (leave out `task_id` for a new \
                         task)"
                    ));
                }
            }
            existing.owner_agent = owner.to_owned();
            return Ok(id.to_owned());
        }
        if self.tasks.len() >= MAX_TASKS {
            return Err(format!(
                "the plan already has {MAX_TASKS} tasks, the most it may hold"
            ));
        }
        let title = title_of(task).ok_or("`task` must not be empty")?;
        let id = match id {
            Some(id) => {
                validate_id(id).map_err(|e| format!("`task_id`: {e}"))?;
                id.to_owned()
            }
            None => {
                let used: HashSet<&str> = self.tasks.iter().map(|t| t.id.as_str()).collect();
                // At most `tasks.len()` candidates are taken, so this ends within that many steps.
                (self.tasks.len() + 1..)
                    .map(|n| format!("t{n}"))
                    .find(|candidate| !used.contains(candidate.as_str()))
                    .unwrap_or_default()
            }
        };
        self.tasks.push(Task {
            id: id.clone(),
            title,
            status: TaskStatus::Pending,
            depends_on: Vec::new(),
            owner_agent: owner.to_owned(),
            parent_id: None,
            notes: String::new(),
            tool: None,
            params: None,
            result: None,
        });
        Ok(id)
    }

    /// Removes the tasks `ids` and their subtasks, and every dependency on them (code-driven, as
    /// a stop undoing what an interrupted sub-agent did). Bumps the version when a task went,
    /// so a client holding the plan by its version reads it again.
    pub fn remove_tasks(&mut self, ids: &HashSet<String>) {
        let mut gone: HashSet<String> = ids.clone();
        // Subtasks point at their parent; a chain is never longer than the tasks there are.
        for _ in 0..self.tasks.len() {
            let more: Vec<String> = self
                .tasks
                .iter()
                .filter(|t| !gone.contains(&t.id))
                .filter(|t| t.parent_id.as_ref().is_some_and(|p| gone.contains(p)))
                .map(|t| t.id.clone())
                .collect();
            if more.is_empty() {
                break;
            }
            gone.extend(more);
        }
        let count = self.tasks.len();
        self.tasks.retain(|t| !gone.contains(&t.id));
        if self.tasks.len() == count {
            return;
        }
        self.version += 1;
        for task in &mut self.tasks {
            task.depends_on.retain(|d| !gone.contains(d));
        }
    }

    /// Sets the status of task `id` and its result (`None` clears it); false if there is no such
    /// task. Does not bump the version: only merged patches do.
    pub fn set_status(&mut self, id: &str, status: TaskStatus, result: Option<Value>) -> bool {
        match self.tasks.iter_mut().find(|t| t.id == id) {
            Some(task) => {
                task.status = status;
                task.result = result;
                true
            }
            None => false,
        }
    }
}

/// A task's title from a delegation's `task` text: its first line that is not blank, trimmed,
/// shortened to [`MAX_TITLE_LEN`] characters (ending in `…`); `None` when there is none.
fn title_of(task: &str) -> Option<String> {
    let line = task.lines().map(str::trim).find(|l| !l.is_empty())?;
    if line.chars().count() <= MAX_TITLE_LEN {
        return Some(line.to_owned());
    }
    let mut title: String = line.chars().take(MAX_TITLE_LEN - 1).collect();
    title.truncate(title.trim_end().len());
    title.push('…');
    Some(title)
}
