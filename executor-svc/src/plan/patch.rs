//! What a patch is: a [`Patch`] of [`Op`]s, the [`NewTask`] an op creates and the [`Fields`] an
//! `update` changes, and their JSON form. The parsing itself is in `parse`.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::TaskStatus;
use super::parse::{describe, parse_fields, parse_new_task, parse_op, parse_ops, shown};

/// A change to the plan, applied as a whole or not at all.
///
/// Deserializing goes through [`Patch::from_json`], so it accepts the same shapes (an object with
/// `ops`, or a bare array of ops) and fails with the same messages.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "Value")]
pub struct Patch {
    /// The plan version the author last read; `None` means "whatever is current".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_version: Option<u64>,
    /// What to change, in order.
    pub ops: Vec<Op>,
}

/// One change within a [`Patch`]. On the wire: an object tagged by `"op"`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", try_from = "Value")]
pub enum Op {
    /// A new top-level task, owned by the author.
    Add {
        /// The task to create.
        task: NewTask,
    },
    /// A new subtask of `parent_id`, owned by the author (who must own the parent, unless the
    /// author is the orchestrator).
    AddSubtask {
        /// The task the new one goes under.
        parent_id: String,
        /// The task to create.
        task: NewTask,
    },
    /// Changes some fields of a task the author owns (any task, for the orchestrator).
    Update {
        /// The task to change.
        task_id: String,
        /// The fields to change; absent ones stay as they are.
        fields: Fields,
    },
    /// Makes `task_id` depend on `dep_id`; allowed across owners.
    LinkDep {
        /// The dependent task.
        task_id: String,
        /// The task it must wait for.
        dep_id: String,
    },
    /// Removes the dependency of `task_id` on `dep_id`; who may is set by
    /// [`UnlinkPolicy`](super::UnlinkPolicy).
    UnlinkDep {
        /// The dependent task.
        task_id: String,
        /// The task it no longer waits for.
        dep_id: String,
    },
}

/// A task as a patch creates it. Its owner is the patch's author unless `owner_agent` names
/// another: only the orchestrator may create a task for another agent (to delegate it later).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "Value")]
pub struct NewTask {
    /// The new task's id; must not be in use.
    pub id: String,
    /// What to do, in a line; stored trimmed.
    pub title: String,
    /// The starting status; `PENDING` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<TaskStatus>,
    /// Ids of existing tasks it depends on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depends_on: Vec<String>,
    /// Free text.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub notes: String,
    /// The tool meant to carry it out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// Arguments for the tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<Value>,
    /// The agent that will own it; the author when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_agent: Option<String>,
}

/// The fields an `update` may change. `owner_agent`, `parent_id` and `id` are not among them:
/// a patch naming them is refused.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "Value")]
pub struct Fields {
    /// A new title (validated like a new task's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// A new status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<TaskStatus>,
    /// New notes, replacing the old ones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notes: Option<String>,
    /// A new dependency list, replacing the old one; dropping a dependency counts as an unlink.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub depends_on: Option<Vec<String>>,
    /// A new tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// New tool arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<Value>,
}

impl Fields {
    /// The keys an update's `fields` may hold.
    pub(super) const KEYS: [&'static str; 6] =
        ["title", "status", "notes", "depends_on", "tool", "params"];

    /// True when nothing would change.
    pub(super) fn is_empty(&self) -> bool {
        self.title.is_none()
            && self.status.is_none()
            && self.notes.is_none()
            && self.depends_on.is_none()
            && self.tool.is_none()
            && self.params.is_none()
    }
}

impl Patch {
    /// Reads a patch from JSON: `{"base_version": 12, "ops": [...]}` (`base_version` optional) or
    /// a bare array of ops. The error names where the problem is, e.g.
    /// ``ops[2]: unknown op `remove` `` or `ops[0].task.id: missing`.
    pub fn from_json(value: &Value) -> Result<Patch, String> {
        match value {
            Value::Array(items) => Ok(Patch {
                base_version: None,
                ops: parse_ops(items)?,
            }),
            Value::Object(map) => {
                if let Some(key) = map.keys().find(|k| *k != "base_version" && *k != "ops") {
                    return Err(format!(
                        "patch: unknown key `{}` (a patch has `base_version` and `ops`)",
                        shown(key)
                    ));
                }
                let base_version = match map.get("base_version") {
                    None | Some(Value::Null) => None,
                    Some(v) => Some(v.as_u64().ok_or_else(|| {
                        format!(
                            "base_version: expected a non-negative integer, got {}",
                            describe(v)
                        )
                    })?),
                };
                let ops = match map.get("ops") {
                    None | Some(Value::Null) => return Err("ops: missing".to_owned()),
                    Some(Value::Array(items)) => parse_ops(items)?,
                    Some(other) => {
                        return Err(format!(
                            "ops: expected an array of ops, got {}",
                            describe(other)
                        ));
                    }
                };
                Ok(Patch { base_version, ops })
            }
            other => Err(format!(
                "patch: expected an object with `ops` (and optionally `base_version`) or an array \
                 of ops, got {}",
                describe(other)
            )),
        }
    }

    /// The ops as JSON, for a conflict's `rejected_ops`.
    pub fn ops_json(&self) -> Vec<Value> {
        self.ops.iter().map(Op::to_json).collect()
    }
}

impl TryFrom<Value> for Patch {
    type Error = String;

    fn try_from(value: Value) -> Result<Self, Self::Error> {
        Patch::from_json(&value)
    }
}

impl Op {
    /// The wire name: `add`, `add_subtask`, `update`, `link_dep` or `unlink_dep`.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Add { .. } => "add",
            Op::AddSubtask { .. } => "add_subtask",
            Op::Update { .. } => "update",
            Op::LinkDep { .. } => "link_dep",
            Op::UnlinkDep { .. } => "unlink_dep",
        }
    }

    /// The op as JSON, in the shape [`Patch::from_json`] reads.
    pub fn to_json(&self) -> Value {
        // Every key is a string and every value plain data, so serializing cannot fail; the
        // fallback only keeps this function total.
        serde_json::to_value(self).unwrap_or_else(|e| {
            let mut map = Map::new();
            map.insert("op".to_owned(), Value::String(self.name().to_owned()));
            map.insert("error".to_owned(), Value::String(e.to_string()));
            Value::Object(map)
        })
    }
}

impl TryFrom<Value> for Op {
    type Error = String;

    fn try_from(value: Value) -> Result<Self, Self::Error> {
        parse_op("", &value)
    }
}

impl TryFrom<Value> for NewTask {
    type Error = String;

    fn try_from(value: Value) -> Result<Self, Self::Error> {
        parse_new_task("", &value)
    }
}

impl TryFrom<Value> for Fields {
    type Error = String;

    fn try_from(value: Value) -> Result<Self, Self::Error> {
        parse_fields("", &value)
    }
}
