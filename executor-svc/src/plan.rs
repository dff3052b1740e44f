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

use std::collections::{HashMap, HashSet};
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

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

/// The op names, in the order error messages list them.
const OP_NAMES: &str = "add, add_subtask, update, link_dep, unlink_dep";

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
    /// Removes the dependency of `task_id` on `dep_id`; who may is set by [`UnlinkPolicy`].
    UnlinkDep {
        /// The dependent task.
        task_id: String,
        /// The task it no longer waits for.
        dep_id: String,
    },
}

/// A task as a patch creates it. Keys it does not know (such as `owner_agent`) are ignored:
/// the owner is always the author of the patch.
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
    const KEYS: [&'static str; 6] = ["title", "status", "notes", "depends_on", "tool", "params"];

    /// True when nothing would change.
    fn is_empty(&self) -> bool {
        self.title.is_none()
            && self.status.is_none()
            && self.notes.is_none()
            && self.depends_on.is_none()
            && self.tool.is_none()
            && self.params.is_none()
    }
}

/// Who may remove a dependency (with `unlink_dep`, or by dropping it from `depends_on` in an
/// `update`). The orchestrator always may.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UnlinkPolicy {
    /// Only the owner of the dependent task (`task_id`) or the orchestrator.
    #[default]
    DependentOwner,
    /// Any author.
    AnyAuthor,
    /// Only the orchestrator.
    OrchestratorOnly,
}

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
    fn ops_json(&self) -> Vec<Value> {
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

// ---------------------------------------------------------------------------------------------
// Parsing. By hand rather than through serde's derive so that every message says where the
// problem is (`ops[2].fields.status: …`): the model fixes a patch faster from that.

fn parse_ops(items: &[Value]) -> Result<Vec<Op>, String> {
    items
        .iter()
        .enumerate()
        .map(|(i, item)| parse_op(&format!("ops[{i}]"), item))
        .collect()
}

fn parse_op(path: &str, value: &Value) -> Result<Op, String> {
    let Value::Object(map) = value else {
        return Err(at(
            path,
            &format!(
                "expected an object with an `op` key, got {}",
                describe(value)
            ),
        ));
    };
    let name = match map.get("op") {
        None | Some(Value::Null) => return Err(at(&join(path, "op"), "missing")),
        Some(Value::String(name)) => name.as_str(),
        Some(other) => {
            return Err(at(
                &join(path, "op"),
                &format!("expected a string, got {}", describe(other)),
            ));
        }
    };
    let keys: &[&str] = match name {
        "add" => &["task"],
        "add_subtask" => &["parent_id", "task"],
        "update" => &["task_id", "fields"],
        "link_dep" | "unlink_dep" => &["task_id", "dep_id"],
        other => {
            return Err(at(
                path,
                &format!("unknown op `{}` (expected one of {OP_NAMES})", shown(other)),
            ));
        }
    };
    // Strict about keys: a stray key usually means the model meant another op or shape (e.g.
    // `parent_id` on an `add`), and applying what it said instead would be a silent surprise.
    if let Some(key) = map
        .keys()
        .find(|k| *k != "op" && !keys.contains(&k.as_str()))
    {
        return Err(at(
            path,
            &format!(
                "unknown key `{}` for op `{name}` (it takes {})",
                shown(key),
                keys.join(", ")
            ),
        ));
    }
    let field = |key: &str| (join(path, key), map.get(key));
    Ok(match name {
        "add" => {
            let (p, v) = field("task");
            Op::Add {
                task: parse_new_task(&p, required(&p, v)?)?,
            }
        }
        "add_subtask" => {
            let (pp, parent) = field("parent_id");
            let (tp, task) = field("task");
            Op::AddSubtask {
                parent_id: req_string(&pp, parent)?,
                task: parse_new_task(&tp, required(&tp, task)?)?,
            }
        }
        "update" => {
            let (ip, id) = field("task_id");
            let (fp, fields) = field("fields");
            Op::Update {
                task_id: req_string(&ip, id)?,
                fields: parse_fields(&fp, required(&fp, fields)?)?,
            }
        }
        _ => {
            let (ip, id) = field("task_id");
            let (dp, dep) = field("dep_id");
            let (task_id, dep_id) = (req_string(&ip, id)?, req_string(&dp, dep)?);
            if name == "link_dep" {
                Op::LinkDep { task_id, dep_id }
            } else {
                Op::UnlinkDep { task_id, dep_id }
            }
        }
    })
}

fn parse_new_task(path: &str, value: &Value) -> Result<NewTask, String> {
    let map = object(path, value)?;
    let field = |key: &str| (join(path, key), map.get(key));
    let (p, v) = field("id");
    let id = req_string(&p, v)?;
    let (p, v) = field("title");
    let title = req_string(&p, v)?;
    let (p, v) = field("status");
    let status = opt_status(&p, v)?;
    let (p, v) = field("depends_on");
    let depends_on = opt_strings(&p, v)?.unwrap_or_default();
    let (p, v) = field("notes");
    let notes = opt_string(&p, v)?.unwrap_or_default();
    let (p, v) = field("tool");
    let tool = opt_string(&p, v)?;
    Ok(NewTask {
        id,
        title,
        status,
        depends_on,
        notes,
        tool,
        params: opt_value(map.get("params")),
    })
}

fn parse_fields(path: &str, value: &Value) -> Result<Fields, String> {
    let map = object(path, value)?;
    if let Some(key) = map.keys().find(|k| !Fields::KEYS.contains(&k.as_str())) {
        let why = if matches!(key.as_str(), "id" | "owner_agent" | "parent_id") {
            "cannot be changed".to_owned()
        } else {
            format!("unknown field (expected {})", Fields::KEYS.join(", "))
        };
        return Err(at(&join(path, &shown(key)), &why));
    }
    let field = |key: &str| (join(path, key), map.get(key));
    let (p, v) = field("title");
    let title = opt_string(&p, v)?;
    let (p, v) = field("status");
    let status = opt_status(&p, v)?;
    let (p, v) = field("notes");
    let notes = opt_string(&p, v)?;
    let (p, v) = field("depends_on");
    let depends_on = opt_strings(&p, v)?;
    let (p, v) = field("tool");
    let tool = opt_string(&p, v)?;
    Ok(Fields {
        title,
        status,
        notes,
        depends_on,
        tool,
        params: opt_value(map.get("params")),
    })
}

fn object<'a>(path: &str, value: &'a Value) -> Result<&'a Map<String, Value>, String> {
    match value {
        Value::Object(map) => Ok(map),
        other => Err(at(
            path,
            &format!("expected an object, got {}", describe(other)),
        )),
    }
}

/// A present value; `null` counts as missing, as it does for the optional fields.
fn required<'a>(path: &str, value: Option<&'a Value>) -> Result<&'a Value, String> {
    match value {
        None | Some(Value::Null) => Err(at(path, "missing")),
        Some(v) => Ok(v),
    }
}

fn req_string(path: &str, value: Option<&Value>) -> Result<String, String> {
    opt_string(path, value)?.ok_or_else(|| at(path, "missing"))
}

fn opt_string(path: &str, value: Option<&Value>) -> Result<Option<String>, String> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(at(
            path,
            &format!("expected a string, got {}", describe(other)),
        )),
    }
}

fn opt_status(path: &str, value: Option<&Value>) -> Result<Option<TaskStatus>, String> {
    let Some(name) = opt_string(path, value)? else {
        return Ok(None);
    };
    TaskStatus::from_wire(&name).map(Some).ok_or_else(|| {
        at(
            path,
            &format!(
                "unknown status `{}` (expected PENDING, IN_PROGRESS, COMPLETED or FAILED)",
                shown(&name)
            ),
        )
    })
}

fn opt_strings(path: &str, value: Option<&Value>) -> Result<Option<Vec<String>>, String> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(j, item)| match item {
                Value::String(s) => Ok(s.clone()),
                other => Err(at(
                    &format!("{path}[{j}]"),
                    &format!("expected a string, got {}", describe(other)),
                )),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        Some(other) => Err(at(
            path,
            &format!("expected an array of task ids, got {}", describe(other)),
        )),
    }
}

/// Free-form JSON; `null` counts as absent so that it round-trips through `Option`.
fn opt_value(value: Option<&Value>) -> Option<Value> {
    value.filter(|v| !v.is_null()).cloned()
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

fn at(path: &str, message: &str) -> String {
    if path.is_empty() {
        message.to_owned()
    } else {
        format!("{path}: {message}")
    }
}

/// A short description of a JSON value for error messages.
fn describe(value: &Value) -> String {
    match value {
        Value::Null => "null".to_owned(),
        Value::Bool(b) => format!("`{b}`"),
        Value::Number(n) => format!("`{n}`"),
        Value::String(s) => format!("the string \"{}\"", shown(s)),
        Value::Array(_) => "an array".to_owned(),
        Value::Object(_) => "an object".to_owned(),
    }
}

/// Model-supplied text cut to a length that keeps messages short, whatever was sent.
fn shown(text: &str) -> String {
    const MAX: usize = 80;
    match text.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

// ---------------------------------------------------------------------------------------------
// Validation shared by patches and code-driven changes.

fn validate_id(id: &str) -> Result<(), String> {
    if id.is_empty() {
        return Err("a task id must not be empty".to_owned());
    }
    if id.chars().count() > MAX_ID_LEN {
        return Err(format!(
            "task id `{}` is longer than {MAX_ID_LEN} characters",
            shown(id)
        ));
    }
    if !id
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    {
        return Err(format!(
            "task id `{}` may only contain letters, digits, `.`, `_` and `-`",
            shown(id)
        ));
    }
    Ok(())
}

/// The title as stored (trimmed), or why it is refused.
fn validate_title(title: &str) -> Result<String, String> {
    let title = title.trim();
    if title.is_empty() {
        return Err("a task title must not be empty".to_owned());
    }
    if title.chars().count() > MAX_TITLE_LEN {
        return Err(format!(
            "task title `{}` is longer than {MAX_TITLE_LEN} characters",
            shown(title)
        ));
    }
    Ok(title.to_owned())
}

/// Whether `author` may remove a dependency of `dependent` under `policy`.
fn may_unlink(
    policy: UnlinkPolicy,
    author: &str,
    dependent: &Task,
    dep_id: &str,
) -> Result<(), String> {
    if author == ORCHESTRATOR {
        return Ok(());
    }
    match policy {
        UnlinkPolicy::AnyAuthor => Ok(()),
        UnlinkPolicy::DependentOwner if dependent.owner_agent == author => Ok(()),
        UnlinkPolicy::DependentOwner => Err(format!(
            "`{author}` may not remove the dependency of `{}` on `{}`: only its owner `{}` or the \
             orchestrator may",
            dependent.id,
            shown(dep_id),
            dependent.owner_agent
        )),
        UnlinkPolicy::OrchestratorOnly => Err(format!(
            "`{author}` may not remove the dependency of `{}` on `{}`: only the orchestrator may \
             remove dependencies",
            dependent.id,
            shown(dep_id)
        )),
    }
}

/// The first dependency cycle in `tasks`, as task positions in dependency order (each depends on
/// the next, the last on the first), or `None` when the graph is acyclic. Deterministic: tasks
/// and their dependencies are walked in order. Dependencies on unknown ids are skipped.
fn find_cycle(tasks: &[Task], index: &HashMap<&str, usize>) -> Option<Vec<usize>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        OnPath,
        Done,
    }
    let mut marks = vec![Mark::New; tasks.len()];
    // Iterative, so a long dependency chain cannot overflow the stack.
    let mut path: Vec<(usize, usize)> = Vec::new();
    for start in 0..tasks.len() {
        if marks[start] != Mark::New {
            continue;
        }
        marks[start] = Mark::OnPath;
        path.push((start, 0));
        while let Some(top) = path.last_mut() {
            let (node, next) = *top;
            let Some(dep) = tasks[node].depends_on.get(next) else {
                marks[node] = Mark::Done;
                path.pop();
                continue;
            };
            top.1 += 1;
            let Some(&j) = index.get(dep.as_str()) else {
                continue;
            };
            match marks[j] {
                Mark::New => {
                    marks[j] = Mark::OnPath;
                    path.push((j, 0));
                }
                Mark::OnPath => {
                    let from = path.iter().position(|&(k, _)| k == j).unwrap_or(0);
                    return Some(path[from..].iter().map(|&(k, _)| k).collect());
                }
                Mark::Done => {}
            }
        }
    }
    None
}

/// `a → b → a`, starting at `first` when it is on the cycle, so the message leads with the task
/// the failing op touched.
fn cycle_text(tasks: &[Task], cycle: &[usize], first: Option<&str>) -> String {
    let start = first
        .and_then(|id| cycle.iter().position(|&k| tasks[k].id == id))
        .unwrap_or(0);
    let mut names: Vec<&str> = cycle[start..]
        .iter()
        .chain(&cycle[..start])
        .map(|&k| tasks[k].id.as_str())
        .collect();
    if let Some(&head) = names.first() {
        names.push(head);
    }
    names.join(" → ")
}

// ---------------------------------------------------------------------------------------------
// Applying patches.

/// The working copy a patch is applied to; it replaces the plan's tasks only if every op passes.
struct Draft {
    tasks: Vec<Task>,
    /// Id → position. Tasks are only ever appended, so positions never move.
    index: HashMap<String, usize>,
}

/// A failed op: why, and the message without its `ops[i]: ` prefix.
type OpError = (RejectReason, String);

fn invalid(message: String) -> OpError {
    (RejectReason::Invalid, message)
}

fn forbidden(message: String) -> OpError {
    (RejectReason::Forbidden, message)
}

impl Draft {
    fn new(tasks: &[Task]) -> Self {
        let tasks = tasks.to_vec();
        let index = tasks
            .iter()
            .enumerate()
            .map(|(i, t)| (t.id.clone(), i))
            .collect();
        Self { tasks, index }
    }

    fn position(&self, id: &str, role: &str) -> Result<usize, OpError> {
        self.index
            .get(id)
            .copied()
            .ok_or_else(|| invalid(format!("unknown {role} `{}`", shown(id))))
    }

    fn apply(&mut self, author: &str, op: &Op, policy: UnlinkPolicy) -> Result<(), OpError> {
        let by_orchestrator = author == ORCHESTRATOR;
        match op {
            Op::Add { task } => self.insert(task, author, None),
            Op::AddSubtask { parent_id, task } => {
                let parent = &self.tasks[self.position(parent_id, "parent task")?];
                if !by_orchestrator && parent.owner_agent != author {
                    return Err(forbidden(format!(
                        "`{author}` may not add a subtask under `{}`: it is owned by `{}`",
                        parent.id, parent.owner_agent
                    )));
                }
                self.insert(task, author, Some(parent_id))
            }
            Op::Update { task_id, fields } => {
                let pos = self.position(task_id, "task")?;
                let task = &self.tasks[pos];
                if !by_orchestrator && task.owner_agent != author {
                    return Err(forbidden(format!(
                        "`{author}` may not update `{}`: it is owned by `{}`",
                        task.id, task.owner_agent
                    )));
                }
                if fields.is_empty() {
                    return Err(invalid(format!(
                        "update of `{}` names no field to change",
                        task.id
                    )));
                }
                let title = fields
                    .title
                    .as_deref()
                    .map(validate_title)
                    .transpose()
                    .map_err(invalid)?;
                let depends_on = match &fields.depends_on {
                    Some(deps) => {
                        let deps = self.resolve_deps(task_id, deps)?;
                        // Dropping a dependency through `update` is an unlink, so the policy
                        // cannot be sidestepped by rewriting the list.
                        if let Some(gone) = task.depends_on.iter().find(|d| !deps.contains(d)) {
                            may_unlink(policy, author, task, gone).map_err(forbidden)?;
                        }
                        Some(deps)
                    }
                    None => None,
                };
                let task = &mut self.tasks[pos];
                if let Some(title) = title {
                    task.title = title;
                }
                if let Some(status) = fields.status {
                    task.status = status;
                }
                if let Some(notes) = &fields.notes {
                    task.notes.clone_from(notes);
                }
                if let Some(tool) = &fields.tool {
                    task.tool = Some(tool.clone());
                }
                if let Some(params) = &fields.params {
                    task.params = Some(params.clone());
                }
                if let Some(deps) = depends_on {
                    task.depends_on = deps;
                    self.check_acyclic(task_id)?;
                }
                Ok(())
            }
            Op::LinkDep { task_id, dep_id } => {
                let pos = self.position(task_id, "task")?;
                self.position(dep_id, "dependency")?;
                if task_id == dep_id {
                    return Err(invalid(format!("`{task_id}` cannot depend on itself")));
                }
                let task = &mut self.tasks[pos];
                if task.depends_on.contains(dep_id) {
                    // Already linked: asking again is harmless.
                    return Ok(());
                }
                task.depends_on.push(dep_id.clone());
                self.check_acyclic(task_id)
            }
            Op::UnlinkDep { task_id, dep_id } => {
                let pos = self.position(task_id, "task")?;
                let task = &self.tasks[pos];
                may_unlink(policy, author, task, dep_id).map_err(forbidden)?;
                let Some(link) = task.depends_on.iter().position(|d| d == dep_id) else {
                    return Err(invalid(format!(
                        "`{task_id}` does not depend on `{}`",
                        shown(dep_id)
                    )));
                };
                self.tasks[pos].depends_on.remove(link);
                Ok(())
            }
        }
    }

    /// Creates `new` owned by `author`, under `parent` if given (already checked).
    fn insert(
        &mut self,
        new: &NewTask,
        author: &str,
        parent: Option<&String>,
    ) -> Result<(), OpError> {
        validate_id(&new.id).map_err(invalid)?;
        if self.index.contains_key(&new.id) {
            return Err(invalid(format!("task id `{}` is already in use", new.id)));
        }
        if self.tasks.len() >= MAX_TASKS {
            return Err(invalid(format!(
                "the plan already has {MAX_TASKS} tasks, the most it may hold"
            )));
        }
        let title = validate_title(&new.title).map_err(invalid)?;
        let depends_on = self.resolve_deps(&new.id, &new.depends_on)?;
        let linked = !depends_on.is_empty();
        self.index.insert(new.id.clone(), self.tasks.len());
        self.tasks.push(Task {
            id: new.id.clone(),
            title,
            status: new.status.unwrap_or(TaskStatus::Pending),
            depends_on,
            owner_agent: author.to_owned(),
            parent_id: parent.cloned(),
            notes: new.notes.clone(),
            tool: new.tool.clone(),
            params: new.params.clone(),
            result: None,
        });
        if linked {
            self.check_acyclic(&new.id)?;
        }
        Ok(())
    }

    /// `deps` for task `id`, checked (each exists, none is `id`) and with repeats dropped:
    /// a repeated id is a slip that changes nothing, not worth refusing a patch over.
    fn resolve_deps(&self, id: &str, deps: &[String]) -> Result<Vec<String>, OpError> {
        let mut out: Vec<String> = Vec::with_capacity(deps.len());
        for dep in deps {
            if dep == id {
                return Err(invalid(format!("`{id}` cannot depend on itself")));
            }
            self.position(dep, "task in depends_on")?;
            if !out.contains(dep) {
                out.push(dep.clone());
            }
        }
        Ok(out)
    }

    /// Refuses the op if the dependency graph (all of it) now has a cycle.
    fn check_acyclic(&self, touched: &str) -> Result<(), OpError> {
        let index: HashMap<&str, usize> = self
            .index
            .iter()
            .map(|(id, &pos)| (id.as_str(), pos))
            .collect();
        match find_cycle(&self.tasks, &index) {
            None => Ok(()),
            Some(cycle) => Err(invalid(format!(
                "this would make a dependency cycle: {}",
                cycle_text(&self.tasks, &cycle, Some(touched))
            ))),
        }
    }
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

    /// The task with this id.
    pub fn task(&self, id: &str) -> Option<&Task> {
        self.tasks.iter().find(|t| t.id == id)
    }

    /// The id of the task a delegation works on, creating it (owned by `owner`, `PENDING`) if
    /// needed: an existing `id` is returned as is; a new `id` is validated and created; `None`
    /// creates a task with a fresh id `t<n>`, the smallest `n` ≥ `tasks.len() + 1` not in use.
    /// Does not bump the version: only merged patches do.
    pub fn ensure_task(
        &mut self,
        id: Option<&str>,
        title: &str,
        owner: &str,
    ) -> Result<String, String> {
        if let Some(id) = id
            && self.task(id).is_some()
        {
            return Ok(id.to_owned());
        }
        if self.tasks.len() >= MAX_TASKS {
            return Err(format!(
                "the plan already has {MAX_TASKS} tasks, the most it may hold"
            ));
        }
        let title = validate_title(title)?;
        let id = match id {
            Some(id) => {
                validate_id(id)?;
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

    /// Checks what every change keeps true: version ≥ 1, at most [`MAX_TASKS`] tasks, valid and
    /// unique ids, valid titles, every dependency and parent exists, no self-dependency, no
    /// repeated dependency, no dependency cycle, no parent cycle. The error says what is wrong.
    pub fn check_invariants(&self) -> Result<(), String> {
        if self.version == 0 {
            return Err("version is 0; plans start at 1".to_owned());
        }
        if self.tasks.len() > MAX_TASKS {
            return Err(format!("{} tasks, more than {MAX_TASKS}", self.tasks.len()));
        }
        let mut index: HashMap<&str, usize> = HashMap::with_capacity(self.tasks.len());
        for (i, task) in self.tasks.iter().enumerate() {
            validate_id(&task.id)?;
            if index.insert(task.id.as_str(), i).is_some() {
                return Err(format!("task id `{}` appears twice", task.id));
            }
            if validate_title(&task.title)? != task.title {
                return Err(format!("task `{}` has an untrimmed title", task.id));
            }
        }
        for task in &self.tasks {
            let mut seen = HashSet::new();
            for dep in &task.depends_on {
                if *dep == task.id {
                    return Err(format!("`{}` depends on itself", task.id));
                }
                if !index.contains_key(dep.as_str()) {
                    return Err(format!("`{}` depends on unknown `{dep}`", task.id));
                }
                if !seen.insert(dep.as_str()) {
                    return Err(format!("`{}` lists dependency `{dep}` twice", task.id));
                }
            }
            if let Some(parent) = &task.parent_id
                && !index.contains_key(parent.as_str())
            {
                return Err(format!("`{}` has unknown parent `{parent}`", task.id));
            }
        }
        if let Some(cycle) = find_cycle(&self.tasks, &index) {
            return Err(format!(
                "dependency cycle: {}",
                cycle_text(&self.tasks, &cycle, None)
            ));
        }
        // Each task has at most one parent, so walking up from every task while remembering which
        // tasks are known to reach a root is linear.
        let mut reaches_root = vec![false; self.tasks.len()];
        let mut walked_from = vec![usize::MAX; self.tasks.len()];
        for start in 0..self.tasks.len() {
            let mut walk: Vec<usize> = Vec::new();
            let mut k = start;
            while !reaches_root[k] {
                if walked_from[k] == start {
                    return Err(format!(
                        "the parents of `{}` form a cycle",
                        self.tasks[start].id
                    ));
                }
                walked_from[k] = start;
                walk.push(k);
                match self.tasks[k]
                    .parent_id
                    .as_deref()
                    .and_then(|p| index.get(p))
                {
                    Some(&parent) => k = parent,
                    None => break,
                }
            }
            for k in walk {
                reaches_root[k] = true;
            }
        }
        Ok(())
    }

    /// The plan as Markdown, a pure function of its value: a `## Plan (version N)` heading, then
    /// one line per task (top-level tasks in insertion order, each followed by its subtasks,
    /// indented two spaces per level), notes as quoted lines below their task.
    pub fn render_markdown(&self) -> String {
        let mut out = format!("## Plan (version {})\n\n", self.version);
        if self.tasks.is_empty() {
            out.push_str("_No tasks yet._\n");
            return out;
        }
        let ids: HashSet<&str> = self.tasks.iter().map(|t| t.id.as_str()).collect();
        let mut children: HashMap<&str, Vec<usize>> = HashMap::new();
        let mut roots = Vec::new();
        for (i, task) in self.tasks.iter().enumerate() {
            match task.parent_id.as_deref() {
                Some(parent) if ids.contains(parent) => {
                    children.entry(parent).or_default().push(i);
                }
                _ => roots.push(i),
            }
        }
        let mut done = vec![false; self.tasks.len()];
        for i in roots {
            self.render_task(i, 0, &children, &mut done, &mut out);
        }
        // Only a malformed plan (a parent cycle) leaves tasks unreached; show them rather than
        // hide them.
        for i in 0..self.tasks.len() {
            self.render_task(i, 0, &children, &mut done, &mut out);
        }
        out
    }

    fn render_task(
        &self,
        i: usize,
        depth: usize,
        children: &HashMap<&str, Vec<usize>>,
        done: &mut [bool],
        out: &mut String,
    ) {
        if done[i] {
            return;
        }
        done[i] = true;
        let task = &self.tasks[i];
        let indent = "  ".repeat(depth);
        out.push_str(&format!(
            "{indent}- {} {} · {} — {}",
            task.status.checkbox(),
            task.id,
            one_line(&task.title),
            one_line(&task.owner_agent)
        ));
        if !task.depends_on.is_empty() {
            out.push_str(" · depends on: ");
            out.push_str(&task.depends_on.join(", "));
        }
        out.push('\n');
        for line in task.notes.trim().lines() {
            let line = line.trim_end();
            if line.is_empty() {
                out.push_str(&format!("{indent}  >\n"));
            } else {
                out.push_str(&format!("{indent}  > {line}\n"));
            }
        }
        for &child in children.get(task.id.as_str()).into_iter().flatten() {
            self.render_task(child, depth + 1, children, done, out);
        }
    }
}

/// `text` with every run of whitespace (newlines included) made one space, so a title cannot
/// break the list.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn patch(value: Value) -> Patch {
        Patch::from_json(&value).expect("patch parses")
    }

    fn apply(plan: &mut Plan, author: &str, value: Value) -> Result<u64, Rejection> {
        plan.apply(author, &patch(value), UnlinkPolicy::default())
    }

    /// t1 (orchestrator), t2 (reviewer) depending on t1, t2.a (reviewer) under t2.
    fn sample() -> Plan {
        let mut plan = Plan::default();
        apply(
            &mut plan,
            ORCHESTRATOR,
            json!([{"op": "add", "task": {"id": "t1", "title": "Validate the project name"}}]),
        )
        .expect("orchestrator adds");
        apply(
            &mut plan,
            "reviewer",
            json!({"base_version": 2, "ops": [
                {"op": "add", "task": {"id": "t2", "title": "Review", "depends_on": ["t1"]}},
                {"op": "add_subtask", "parent_id": "t2", "task": {"id": "t2.a", "title": "Read"}}
            ]}),
        )
        .expect("reviewer adds");
        plan
    }

    #[test]
    fn stale_base_version_is_a_conflict_and_changes_nothing() {
        let mut plan = sample();
        let before = plan.clone();
        let ops = json!([{"op": "update", "task_id": "t2", "fields": {"status": "COMPLETED"}}]);
        let err = apply(
            &mut plan,
            "reviewer",
            json!({"base_version": 2, "ops": ops}),
        )
        .expect_err("stale");
        assert_eq!(err.reason, RejectReason::Conflict);
        assert!(err.message.contains("version 2"), "{}", err.message);
        assert!(err.message.contains("version 3"), "{}", err.message);
        assert_eq!(err.current_version, 3);
        assert_eq!(Value::Array(err.rejected_ops), ops);
        assert_eq!(plan, before);
    }

    #[test]
    fn missing_base_version_means_current() {
        let mut plan = sample();
        let v = apply(
            &mut plan,
            "reviewer",
            json!({"ops": [{"op": "update", "task_id": "t2", "fields": {"notes": "n"}}]}),
        )
        .expect("applies");
        assert_eq!(v, 4);
        assert_eq!(plan.task("t2").expect("t2").notes, "n");
    }

    #[test]
    fn sub_agent_cannot_update_a_task_it_does_not_own() {
        let mut plan = sample();
        let before = plan.clone();
        let err = apply(
            &mut plan,
            "reviewer",
            json!([{"op": "update", "task_id": "t1", "fields": {"status": "COMPLETED"}}]),
        )
        .expect_err("forbidden");
        assert_eq!(err.reason, RejectReason::Forbidden);
        assert!(err.message.starts_with("ops[0]: "), "{}", err.message);
        assert!(err.message.contains("`t1`"), "{}", err.message);
        assert!(err.message.contains("`orchestrator`"), "{}", err.message);
        assert_eq!(err.rejected_ops.len(), 1);
        assert_eq!(plan, before);
    }

    #[test]
    fn owner_and_orchestrator_may_update() {
        let mut plan = sample();
        apply(
            &mut plan,
            "reviewer",
            json!([{"op": "update", "task_id": "t2", "fields": {
                "status": "IN_PROGRESS", "title": "  Review it  ", "tool": "git", "params": {"a": 1}
            }}]),
        )
        .expect("owner updates");
        apply(
            &mut plan,
            ORCHESTRATOR,
            json!([{"op": "update", "task_id": "t2.a", "fields": {"status": "FAILED"}}]),
        )
        .expect("orchestrator updates");
        let t2 = plan.task("t2").expect("t2");
        assert_eq!(t2.status, TaskStatus::InProgress);
        assert_eq!(t2.title, "Review it");
        assert_eq!(t2.tool.as_deref(), Some("git"));
        assert_eq!(t2.params, Some(json!({"a": 1})));
        assert_eq!(plan.task("t2.a").expect("t2.a").status, TaskStatus::Failed);
    }

    #[test]
    fn add_makes_the_author_the_owner_whatever_the_task_says() {
        let mut plan = Plan::default();
        apply(
            &mut plan,
            "coder",
            json!([{"op": "add", "task": {"id": "x", "title": "X", "owner_agent": "orchestrator"}}]),
        )
        .expect("adds");
        let x = plan.task("x").expect("x");
        assert_eq!(x.owner_agent, "coder");
        assert_eq!(x.status, TaskStatus::Pending);
        assert_eq!(x.parent_id, None);
    }

    #[test]
    fn fields_cannot_change_owner_parent_or_id() {
        for key in ["owner_agent", "parent_id", "id"] {
            let err = Patch::from_json(&json!([
                {"op": "update", "task_id": "t1", "fields": {key: "x"}}
            ]))
            .expect_err("refused");
            assert_eq!(err, format!("ops[0].fields.{key}: cannot be changed"));
        }
        let err = Patch::from_json(&json!([
            {"op": "update", "task_id": "t1", "fields": {"colour": "x"}}
        ]))
        .expect_err("refused");
        assert!(
            err.starts_with("ops[0].fields.colour: unknown field"),
            "{err}"
        );
    }

    #[test]
    fn empty_update_is_invalid() {
        let mut plan = sample();
        let err = apply(
            &mut plan,
            ORCHESTRATOR,
            json!([{"op": "update", "task_id": "t1", "fields": {}}]),
        )
        .expect_err("invalid");
        assert_eq!(err.reason, RejectReason::Invalid);
        assert!(err.message.contains("no field"), "{}", err.message);
    }

    #[test]
    fn add_subtask_under_foreign_parent_is_forbidden() {
        let mut plan = sample();
        let before = plan.clone();
        let err = apply(
            &mut plan,
            "reviewer",
            json!([{"op": "add_subtask", "parent_id": "t1", "task": {"id": "t1.a", "title": "A"}}]),
        )
        .expect_err("forbidden");
        assert_eq!(err.reason, RejectReason::Forbidden);
        assert!(err.message.starts_with("ops[0]: "), "{}", err.message);
        assert_eq!(plan, before);
    }

    #[test]
    fn add_subtask_is_owned_by_its_author_and_points_at_its_parent() {
        let mut plan = sample();
        apply(
            &mut plan,
            ORCHESTRATOR,
            json!([{"op": "add_subtask", "parent_id": "t2", "task": {"id": "t2.b", "title": "B"}}]),
        )
        .expect("orchestrator may add under any task");
        let b = plan.task("t2.b").expect("t2.b");
        assert_eq!(b.owner_agent, ORCHESTRATOR);
        assert_eq!(b.parent_id.as_deref(), Some("t2"));
        let a = plan.task("t2.a").expect("t2.a");
        assert_eq!(a.owner_agent, "reviewer");
        assert_eq!(a.parent_id.as_deref(), Some("t2"));
    }

    #[test]
    fn add_subtask_under_unknown_parent_is_invalid() {
        let mut plan = sample();
        let err = apply(
            &mut plan,
            ORCHESTRATOR,
            json!([{"op": "add_subtask", "parent_id": "nope", "task": {"id": "n.a", "title": "A"}}]),
        )
        .expect_err("invalid");
        assert_eq!(err.reason, RejectReason::Invalid);
        assert_eq!(err.message, "ops[0]: unknown parent task `nope`");
    }

    #[test]
    fn cycle_is_refused_with_its_path() {
        let mut plan = sample();
        let before = plan.clone();
        let err = apply(
            &mut plan,
            ORCHESTRATOR,
            json!([{"op": "link_dep", "task_id": "t1", "dep_id": "t2"}]),
        )
        .expect_err("cycle");
        assert_eq!(err.reason, RejectReason::Invalid);
        assert_eq!(
            err.message,
            "ops[0]: this would make a dependency cycle: t1 → t2 → t1"
        );
        assert_eq!(plan, before);

        // A longer cycle, closed by replacing a dependency list.
        apply(
            &mut plan,
            ORCHESTRATOR,
            json!([{"op": "add", "task": {"id": "t3", "title": "C", "depends_on": ["t2"]}}]),
        )
        .expect("adds");
        let err = apply(
            &mut plan,
            ORCHESTRATOR,
            json!([
                {"op": "update", "task_id": "t2.a", "fields": {"notes": "fine"}},
                {"op": "update", "task_id": "t1", "fields": {"depends_on": ["t3"]}}
            ]),
        )
        .expect_err("cycle");
        assert_eq!(
            err.message,
            "ops[1]: this would make a dependency cycle: t1 → t3 → t2 → t1"
        );
        assert_eq!(plan.task("t2.a").expect("t2.a").notes, "");
    }

    #[test]
    fn self_and_unknown_dependencies_are_invalid() {
        let mut plan = sample();
        for (ops, expected) in [
            (
                json!([{"op": "link_dep", "task_id": "t1", "dep_id": "t1"}]),
                "ops[0]: `t1` cannot depend on itself",
            ),
            (
                json!([{"op": "add", "task": {"id": "s", "title": "S", "depends_on": ["s"]}}]),
                "ops[0]: `s` cannot depend on itself",
            ),
            (
                json!([{"op": "link_dep", "task_id": "t1", "dep_id": "zz"}]),
                "ops[0]: unknown dependency `zz`",
            ),
            (
                json!([{"op": "link_dep", "task_id": "zz", "dep_id": "t1"}]),
                "ops[0]: unknown task `zz`",
            ),
            (
                json!([{"op": "add", "task": {"id": "s", "title": "S", "depends_on": ["zz"]}}]),
                "ops[0]: unknown task in depends_on `zz`",
            ),
        ] {
            let err = apply(&mut plan, ORCHESTRATOR, ops).expect_err("invalid");
            assert_eq!(err.reason, RejectReason::Invalid);
            assert_eq!(err.message, expected);
        }
    }

    #[test]
    fn ids_and_titles_are_validated() {
        let long_id = "x".repeat(65);
        let long_title = "y".repeat(501);
        for (task, needle) in [
            (json!({"id": "", "title": "T"}), "must not be empty"),
            (json!({"id": long_id, "title": "T"}), "longer than 64"),
            (json!({"id": "a b", "title": "T"}), "may only contain"),
            (json!({"id": "t1", "title": "T"}), "already in use"),
            (
                json!({"id": "ok", "title": "   "}),
                "title must not be empty",
            ),
            (json!({"id": "ok", "title": long_title}), "longer than 500"),
        ] {
            let mut plan = sample();
            let err = apply(
                &mut plan,
                ORCHESTRATOR,
                json!([{"op": "add", "task": task}]),
            )
            .expect_err("invalid");
            assert_eq!(err.reason, RejectReason::Invalid);
            assert!(err.message.contains(needle), "{}", err.message);
        }
        let mut plan = Plan::default();
        apply(
            &mut plan,
            ORCHESTRATOR,
            json!([{"op": "add", "task": {"id": "A-z_0.9", "title": "y".repeat(500)}}]),
        )
        .expect("limits themselves are allowed");
    }

    #[test]
    fn link_dep_across_owners_is_allowed_and_idempotent() {
        let mut plan = sample();
        apply(
            &mut plan,
            "coder",
            json!([{"op": "add", "task": {"id": "c", "title": "Code"}}]),
        )
        .expect("adds");
        for _ in 0..2 {
            apply(
                &mut plan,
                "coder",
                json!([{"op": "link_dep", "task_id": "t2", "dep_id": "c"}]),
            )
            .expect("links");
        }
        assert_eq!(plan.task("t2").expect("t2").depends_on, ["t1", "c"]);
    }

    #[test]
    fn unlink_by_non_owner_is_refused_by_default_policy() {
        let mut plan = sample();
        let before = plan.clone();
        let unlink = json!([{"op": "unlink_dep", "task_id": "t2", "dep_id": "t1"}]);
        let err = apply(&mut plan, "coder", unlink.clone()).expect_err("forbidden");
        assert_eq!(err.reason, RejectReason::Forbidden);
        assert!(err.message.contains("`reviewer`"), "{}", err.message);
        assert_eq!(plan, before);
        apply(&mut plan, "reviewer", unlink).expect("the dependent's owner may");
        assert!(plan.task("t2").expect("t2").depends_on.is_empty());
    }

    #[test]
    fn unlink_policies_decide_who_may_unlink() {
        let unlink = patch(json!([{"op": "unlink_dep", "task_id": "t2", "dep_id": "t1"}]));
        let mut plan = sample();
        plan.apply("coder", &unlink, UnlinkPolicy::AnyAuthor)
            .expect("anyone may");

        let mut plan = sample();
        let err = plan
            .apply("reviewer", &unlink, UnlinkPolicy::OrchestratorOnly)
            .expect_err("even the owner may not");
        assert_eq!(err.reason, RejectReason::Forbidden);
        plan.apply(ORCHESTRATOR, &unlink, UnlinkPolicy::OrchestratorOnly)
            .expect("the orchestrator may");
    }

    #[test]
    fn update_depends_on_cannot_sidestep_the_unlink_policy() {
        let mut plan = sample();
        let drop_deps = patch(json!([
            {"op": "update", "task_id": "t2", "fields": {"depends_on": []}}
        ]));
        let err = plan
            .apply("reviewer", &drop_deps, UnlinkPolicy::OrchestratorOnly)
            .expect_err("forbidden");
        assert_eq!(err.reason, RejectReason::Forbidden);
        plan.apply("reviewer", &drop_deps, UnlinkPolicy::DependentOwner)
            .expect("the owner may under the default");
    }

    #[test]
    fn unlink_of_a_missing_link_is_invalid() {
        let mut plan = sample();
        let err = apply(
            &mut plan,
            ORCHESTRATOR,
            json!([{"op": "unlink_dep", "task_id": "t1", "dep_id": "t2"}]),
        )
        .expect_err("invalid");
        assert_eq!(err.reason, RejectReason::Invalid);
        assert_eq!(err.message, "ops[0]: `t1` does not depend on `t2`");
    }

    #[test]
    fn repeated_dependencies_are_kept_once() {
        let mut plan = sample();
        apply(
            &mut plan,
            ORCHESTRATOR,
            json!([{"op": "add", "task": {"id": "d", "title": "D", "depends_on": ["t1", "t2", "t1"]}}]),
        )
        .expect("adds");
        assert_eq!(plan.task("d").expect("d").depends_on, ["t1", "t2"]);
        plan.check_invariants().expect("valid");
    }

    #[test]
    fn version_bumps_once_per_merged_patch() {
        let mut plan = Plan::default();
        assert_eq!(plan.version, 1);
        let v = apply(
            &mut plan,
            ORCHESTRATOR,
            json!([
                {"op": "add", "task": {"id": "a", "title": "A"}},
                {"op": "add", "task": {"id": "b", "title": "B"}},
                {"op": "link_dep", "task_id": "b", "dep_id": "a"}
            ]),
        )
        .expect("applies");
        assert_eq!((v, plan.version), (2, 2));
        apply(
            &mut plan,
            ORCHESTRATOR,
            json!([{"op": "add", "task": {"id": "a", "title": "again"}}]),
        )
        .expect_err("duplicate");
        assert_eq!(plan.version, 2);
        let v = apply(
            &mut plan,
            ORCHESTRATOR,
            json!({"base_version": 2, "ops": [{"op": "update", "task_id": "a", "fields": {"status": "COMPLETED"}}]}),
        )
        .expect("applies");
        assert_eq!(v, 3);
    }

    #[test]
    fn a_failing_op_rolls_back_the_whole_patch() {
        let mut plan = sample();
        let before = plan.clone();
        let bad = json!({"op": "update", "task_id": "missing", "fields": {"notes": "x"}});
        let err = apply(
            &mut plan,
            ORCHESTRATOR,
            json!([
                {"op": "add", "task": {"id": "new", "title": "New"}},
                {"op": "update", "task_id": "t1", "fields": {"status": "COMPLETED"}},
                bad
            ]),
        )
        .expect_err("invalid");
        assert!(err.message.starts_with("ops[2]: "), "{}", err.message);
        assert_eq!(err.rejected_ops, vec![bad]);
        assert_eq!(plan, before);
    }

    #[test]
    fn ops_see_the_effects_of_earlier_ops_in_the_same_patch() {
        let mut plan = Plan::default();
        apply(
            &mut plan,
            "coder",
            json!([
                {"op": "add", "task": {"id": "a", "title": "A"}},
                {"op": "add_subtask", "parent_id": "a", "task": {"id": "a.1", "title": "A1"}},
                {"op": "update", "task_id": "a.1", "fields": {"status": "IN_PROGRESS"}}
            ]),
        )
        .expect("applies");
        assert_eq!(plan.tasks.len(), 2);
    }

    #[test]
    fn empty_and_oversized_patches_are_invalid() {
        let mut plan = sample();
        let err = apply(&mut plan, ORCHESTRATOR, json!([])).expect_err("empty");
        assert_eq!(err.reason, RejectReason::Invalid);
        assert_eq!(err.message, "a patch needs at least one op");
        assert!(err.rejected_ops.is_empty());

        let ops: Vec<Value> = (0..=MAX_OPS)
            .map(|i| json!({"op": "add", "task": {"id": format!("n{i}"), "title": "N"}}))
            .collect();
        let err = apply(&mut plan, ORCHESTRATOR, Value::Array(ops)).expect_err("too many");
        assert_eq!(err.reason, RejectReason::Invalid);
        assert!(err.message.contains("at most 200 ops"), "{}", err.message);
        assert_eq!(plan.tasks.len(), 3);
    }

    #[test]
    fn the_plan_holds_at_most_a_thousand_tasks() {
        let mut plan = Plan::default();
        for chunk in 0..MAX_TASKS / MAX_OPS {
            let ops: Vec<Value> = (0..MAX_OPS)
                .map(
                    |i| json!({"op": "add", "task": {"id": format!("n{chunk}-{i}"), "title": "N"}}),
                )
                .collect();
            apply(&mut plan, ORCHESTRATOR, Value::Array(ops)).expect("fits");
        }
        assert_eq!(plan.tasks.len(), MAX_TASKS);
        let err = apply(
            &mut plan,
            ORCHESTRATOR,
            json!([{"op": "add", "task": {"id": "one-more", "title": "N"}}]),
        )
        .expect_err("full");
        assert_eq!(err.reason, RejectReason::Invalid);
        assert!(err.message.contains("1000 tasks"), "{}", err.message);
        assert!(plan.ensure_task(None, "more", ORCHESTRATOR).is_err());
        plan.check_invariants().expect("valid");
    }

    #[test]
    fn bare_array_patch_parses() {
        let p = patch(json!([
            {"op": "update", "task_id": "WS-1", "fields": {"status": "IN_PROGRESS", "notes": "…"}},
            {"op": "add_subtask", "parent_id": "WS-1", "task": {"id": "WS-1.c", "title": "Smoke-Test", "status": "PENDING"}}
        ]));
        assert_eq!(p.base_version, None);
        assert_eq!(p.ops.len(), 2);
        assert_eq!(p.ops[1].name(), "add_subtask");
        let with_version = patch(json!({"base_version": 12, "ops": [
            {"op": "link_dep", "task_id": "a", "dep_id": "b"}
        ]}));
        assert_eq!(with_version.base_version, Some(12));
        assert_eq!(
            with_version.ops[0],
            Op::LinkDep {
                task_id: "a".into(),
                dep_id: "b".into()
            }
        );
    }

    #[test]
    fn unknown_op_is_named() {
        let err = Patch::from_json(&json!({"ops": [
            {"op": "add", "task": {"id": "a", "title": "A"}},
            {"op": "link_dep", "task_id": "a", "dep_id": "b"},
            {"op": "remove", "task_id": "a"}
        ]}))
        .expect_err("unknown op");
        assert!(err.starts_with("ops[2]: unknown op `remove`"), "{err}");
    }

    #[test]
    fn parse_errors_name_the_place() {
        for (value, expected) in [
            (
                json!([{"op": "add", "task": {"title": "A"}}]),
                "ops[0].task.id: missing",
            ),
            (json!([{"op": "add"}]), "ops[0].task: missing"),
            (json!([{"task_id": "a"}]), "ops[0].op: missing"),
            (
                json!([{"op": "link_dep", "task_id": 3, "dep_id": "b"}]),
                "ops[0].task_id: expected a string, got `3`",
            ),
            (
                json!([{"op": "add", "task": {"id": "a", "title": "A", "depends_on": ["b", 1]}}]),
                "ops[0].task.depends_on[1]: expected a string, got `1`",
            ),
            (
                json!([{"op": "update", "task_id": "a", "fields": {"status": "DONE"}}]),
                "ops[0].fields.status: unknown status `DONE` (expected PENDING, IN_PROGRESS, \
                 COMPLETED or FAILED)",
            ),
            (
                json!([{"op": "add", "parent_id": "p", "task": {"id": "a", "title": "A"}}]),
                "ops[0]: unknown key `parent_id` for op `add` (it takes task)",
            ),
            (
                json!({"base_version": "3", "ops": []}),
                "base_version: expected a non-negative integer, got the string \"3\"",
            ),
            (json!({"base_version": 3}), "ops: missing"),
            (
                json!({"ops": {}}),
                "ops: expected an array of ops, got an object",
            ),
            (
                json!({"op": "add", "ops": []}),
                "patch: unknown key `op` (a patch has `base_version` and `ops`)",
            ),
            (
                json!([7]),
                "ops[0]: expected an object with an `op` key, got `7`",
            ),
        ] {
            assert_eq!(
                Patch::from_json(&value).expect_err("refused"),
                expected,
                "{value}"
            );
        }
    }

    #[test]
    fn patch_deserializes_like_from_json() {
        let text = r#"[{"op":"link_dep","task_id":"a","dep_id":"b"}]"#;
        let p: Patch = serde_json::from_str(text).expect("parses");
        assert_eq!(p, patch(serde_json::from_str(text).expect("json")));
        let err = serde_json::from_str::<Patch>(r#"[{"op":"remove"}]"#).expect_err("refused");
        assert!(err.to_string().contains("unknown op `remove`"), "{err}");
        let err = serde_json::from_str::<Op>(r#"{"op":"add","task":{"title":"x"}}"#)
            .expect_err("refused");
        assert!(err.to_string().contains("task.id: missing"), "{err}");
    }

    #[test]
    fn op_json_round_trips() {
        let p = patch(json!([
            {"op": "add", "task": {"id": "a", "title": "A", "status": "FAILED", "depends_on": ["b"],
                "notes": "n", "tool": "git", "params": {"x": [1, 2]}}},
            {"op": "add_subtask", "parent_id": "a", "task": {"id": "a.1", "title": "A1"}},
            {"op": "update", "task_id": "a", "fields": {"title": "T", "status": "COMPLETED",
                "notes": "", "depends_on": [], "tool": "t", "params": 3}},
            {"op": "link_dep", "task_id": "a", "dep_id": "b"},
            {"op": "unlink_dep", "task_id": "a", "dep_id": "b"}
        ]));
        for op in &p.ops {
            let json = op.to_json();
            assert_eq!(json["op"], op.name());
            assert_eq!(&parse_op("", &json).expect("reparses"), op);
        }
        let again =
            Patch::from_json(&serde_json::to_value(&p).expect("serializes")).expect("reparses");
        assert_eq!(again, p);
    }

    #[test]
    fn rejection_serializes_for_the_model() {
        let mut plan = sample();
        let err = apply(
            &mut plan,
            "coder",
            json!([{"op": "update", "task_id": "t1", "fields": {"notes": "x"}}]),
        )
        .expect_err("forbidden");
        let json = serde_json::to_value(&err).expect("serializes");
        assert_eq!(json["error"], "forbidden");
        assert_eq!(json["current_version"], 3);
        assert_eq!(json["message"], err.message);
        assert_eq!(
            json["rejected_ops"],
            json!([{"op": "update", "task_id": "t1", "fields": {"notes": "x"}}])
        );
        assert_eq!(
            json.as_object().map(|m| m.len()),
            Some(4),
            "exactly four keys: {json}"
        );
        assert_eq!(err.to_string(), format!("forbidden: {}", err.message));
        let _: &dyn std::error::Error = &err;
    }

    #[test]
    fn wire_names() {
        assert_eq!(
            TaskStatus::ALL.map(TaskStatus::as_str),
            ["PENDING", "IN_PROGRESS", "COMPLETED", "FAILED"]
        );
        for status in TaskStatus::ALL {
            assert_eq!(
                serde_json::to_value(status).expect("serializes"),
                status.as_str()
            );
        }
        assert_eq!(RejectReason::Conflict.as_str(), "conflict");
        assert_eq!(RejectReason::Forbidden.as_str(), "forbidden");
        assert_eq!(RejectReason::Invalid.as_str(), "invalid");
        assert_eq!(UnlinkPolicy::default(), UnlinkPolicy::DependentOwner);
    }

    #[test]
    fn markdown_renders_nested_subtasks_deterministically() {
        let mut plan = Plan::default();
        apply(
            &mut plan,
            ORCHESTRATOR,
            json!([{"op": "add", "task": {"id": "t1", "title": "Validate the project name"}}]),
        )
        .expect("adds");
        apply(
            &mut plan,
            "scaffold-webservice",
            json!([
                {"op": "add", "task": {"id": "t2", "title": "Scaffold the webservice",
                    "status": "IN_PROGRESS", "depends_on": ["t1"]}},
                {"op": "add_subtask", "parent_id": "t2", "task": {"id": "t2.a",
                    "title": "Smoke test", "status": "COMPLETED", "notes": "ran it\n\nall green  "}},
                {"op": "add_subtask", "parent_id": "t2.a", "task": {"id": "t2.a.1",
                    "title": "Deep\nline"}}
            ]),
        )
        .expect("adds");
        apply(
            &mut plan,
            ORCHESTRATOR,
            json!([
                {"op": "add", "task": {"id": "t3", "title": "Set up CI", "status": "FAILED"}},
                {"op": "add_subtask", "parent_id": "t1", "task": {"id": "t1.a", "title": "Late child"}}
            ]),
        )
        .expect("adds");
        let expected = "## Plan (version 4)\n\
            \n\
            - [ ] t1 · Validate the project name — orchestrator\n\
            \x20 - [ ] t1.a · Late child — orchestrator\n\
            - [~] t2 · Scaffold the webservice — scaffold-webservice · depends on: t1\n\
            \x20 - [x] t2.a · Smoke test — scaffold-webservice\n\
            \x20   > ran it\n\
            \x20   >\n\
            \x20   > all green\n\
            \x20   - [ ] t2.a.1 · Deep line — scaffold-webservice\n\
            - [!] t3 · Set up CI — orchestrator\n";
        assert_eq!(plan.render_markdown(), expected);
        assert_eq!(plan.clone().render_markdown(), expected);
    }

    #[test]
    fn markdown_of_an_empty_plan() {
        let plan = Plan {
            version: 7,
            tasks: Vec::new(),
        };
        assert_eq!(
            plan.render_markdown(),
            "## Plan (version 7)\n\n_No tasks yet._\n"
        );
    }

    #[test]
    fn markdown_shows_every_task_of_a_malformed_plan() {
        let mut plan = Plan::default();
        plan.ensure_task(Some("a"), "A", "x").expect("a");
        plan.ensure_task(Some("b"), "B", "x").expect("b");
        plan.tasks[0].parent_id = Some("b".into());
        plan.tasks[1].parent_id = Some("a".into());
        assert!(plan.check_invariants().is_err());
        let md = plan.render_markdown();
        assert!(
            md.contains("- [ ] a · A") && md.contains("  - [ ] b · B"),
            "{md}"
        );
    }

    #[test]
    fn ensure_task_creates_fresh_ids() {
        let mut plan = Plan::default();
        assert_eq!(plan.ensure_task(None, "first", "coder").expect("t1"), "t1");
        assert_eq!(
            plan.ensure_task(Some("t3"), "named", "coder").expect("t3"),
            "t3"
        );
        // Two tasks: the search starts at t3, which is taken.
        assert_eq!(plan.ensure_task(None, "third", "coder").expect("t4"), "t4");
        assert_eq!(plan.ensure_task(None, "fourth", "coder").expect("t5"), "t5");
        let t4 = plan.task("t4").expect("t4");
        assert_eq!(
            (t4.owner_agent.as_str(), t4.status, t4.title.as_str()),
            ("coder", TaskStatus::Pending, "third")
        );
        assert_eq!(
            plan.version, 1,
            "code-driven changes do not bump the version"
        );
        plan.check_invariants().expect("valid");
    }

    #[test]
    fn ensure_task_returns_existing_ids_and_validates_new_ones() {
        let mut plan = sample();
        assert_eq!(
            plan.ensure_task(Some("t2"), "ignored", "someone")
                .expect("exists"),
            "t2"
        );
        assert_eq!(plan.task("t2").expect("t2").title, "Review");
        assert!(plan.ensure_task(Some("bad id"), "T", "x").is_err());
        assert!(plan.ensure_task(Some("ok"), " ", "x").is_err());
        assert!(plan.ensure_task(None, "", "x").is_err());
        assert_eq!(plan.tasks.len(), 3);
    }

    #[test]
    fn set_status_changes_status_and_result_without_a_version_bump() {
        let mut plan = sample();
        assert!(plan.set_status("t1", TaskStatus::Completed, Some(json!({"ok": true}))));
        let t1 = plan.task("t1").expect("t1");
        assert_eq!(t1.status, TaskStatus::Completed);
        assert_eq!(t1.result, Some(json!({"ok": true})));
        assert!(!plan.set_status("nope", TaskStatus::Failed, None));
        assert_eq!(plan.version, 3);
    }

    #[test]
    fn check_invariants_names_what_is_wrong() {
        let broken = |change: fn(&mut Plan)| {
            let mut plan = sample();
            change(&mut plan);
            plan.check_invariants().expect_err("broken")
        };
        assert_eq!(
            broken(|p| p.tasks[1].id = "t1".into()),
            "task id `t1` appears twice"
        );
        assert_eq!(
            broken(|p| p.tasks[0].depends_on.push("t1".into())),
            "`t1` depends on itself"
        );
        assert_eq!(
            broken(|p| p.tasks[0].depends_on.push("zz".into())),
            "`t1` depends on unknown `zz`"
        );
        assert_eq!(
            broken(|p| p.tasks[0].depends_on.push("t2".into())),
            "dependency cycle: t1 → t2 → t1"
        );
        assert_eq!(
            broken(|p| p.tasks[2].parent_id = Some("zz".into())),
            "`t2.a` has unknown parent `zz`"
        );
        assert_eq!(broken(|p| p.version = 0), "version is 0; plans start at 1");
        sample().check_invariants().expect("valid");
    }

    #[test]
    fn plan_round_trips_through_json() {
        let mut plan = sample();
        plan.set_status("t2", TaskStatus::Failed, Some(json!("boom")));
        let text = serde_json::to_string(&plan).expect("serializes");
        let back: Plan = serde_json::from_str(&text).expect("parses");
        assert_eq!(back, plan);
        assert_eq!(back.render_markdown(), plan.render_markdown());
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        // A small pool, so ids collide and dependencies close cycles; invalid ids now and then.
        const IDS: &[&str] = &["a", "b", "c", "d", "e", "a.1", "b-2"];
        const BAD_IDS: &[&str] = &["bad id", "", "ü"];

        fn id() -> impl Strategy<Value = String> {
            prop_oneof![
                20 => prop::sample::select(IDS),
                1 => prop::sample::select(BAD_IDS),
            ]
            .prop_map(str::to_owned)
        }

        fn author() -> impl Strategy<Value = String> {
            // The orchestrator more often than the others, so that more patches pass.
            prop_oneof![
                3 => Just(ORCHESTRATOR),
                1 => prop::sample::select(vec!["reviewer", "coder"]),
            ]
            .prop_map(str::to_owned)
        }

        fn title() -> impl Strategy<Value = String> {
            prop_oneof![
                10 => Just("Do it"),
                2 => Just("  Trim me "),
                1 => Just("Two\nlines"),
                1 => Just(""),
            ]
            .prop_map(str::to_owned)
        }

        /// Mostly one to three ops; now and then none, which is refused.
        fn ops() -> impl Strategy<Value = Vec<Op>> {
            prop_oneof![
                1 => Just(Vec::new()),
                12 => prop::collection::vec(op(), 1..3),
            ]
        }

        fn status() -> impl Strategy<Value = TaskStatus> {
            prop::sample::select(TaskStatus::ALL.to_vec())
        }

        fn deps() -> impl Strategy<Value = Vec<String>> {
            prop_oneof![
                3 => Just(Vec::new()),
                2 => prop::collection::vec(id(), 1..3),
            ]
        }

        fn params() -> impl Strategy<Value = Option<Value>> {
            // Never `null`: it reads back as absent, and the round trip below compares exactly.
            prop::option::of(prop_oneof![
                Just(json!({"path": "x", "n": 1, "deep": {"b": [1, 2], "a": true}})),
                Just(json!([1, "two"])),
                Just(json!("s")),
            ])
        }

        fn new_task() -> impl Strategy<Value = NewTask> {
            (
                id(),
                title(),
                prop::option::of(status()),
                deps(),
                prop::sample::select(vec!["", "a note", "line\nline"]),
                prop::option::of(Just("git".to_owned())),
                params(),
            )
                .prop_map(|(id, title, status, depends_on, notes, tool, params)| {
                    NewTask {
                        id,
                        title,
                        status,
                        depends_on,
                        notes: notes.to_owned(),
                        tool,
                        params,
                    }
                })
        }

        fn fields() -> impl Strategy<Value = Fields> {
            (
                prop::option::of(title()),
                prop::option::of(status()),
                prop::option::of(Just("noted".to_owned())),
                prop::option::of(deps()),
                prop::option::of(Just("python".to_owned())),
                params(),
            )
                .prop_map(|(title, status, notes, depends_on, tool, params)| Fields {
                    title,
                    status,
                    notes,
                    depends_on,
                    tool,
                    params,
                })
        }

        fn op() -> impl Strategy<Value = Op> {
            prop_oneof![
                4 => new_task().prop_map(|task| Op::Add { task }),
                2 => (id(), new_task()).prop_map(|(parent_id, task)| Op::AddSubtask { parent_id, task }),
                2 => (id(), fields()).prop_map(|(task_id, fields)| Op::Update { task_id, fields }),
                4 => (id(), id()).prop_map(|(task_id, dep_id)| Op::LinkDep { task_id, dep_id }),
                2 => (id(), id()).prop_map(|(task_id, dep_id)| Op::UnlinkDep { task_id, dep_id }),
            ]
        }

        fn policy() -> impl Strategy<Value = UnlinkPolicy> {
            prop::sample::select(vec![
                UnlinkPolicy::DependentOwner,
                UnlinkPolicy::AnyAuthor,
                UnlinkPolicy::OrchestratorOnly,
            ])
        }

        /// What the patch's `base_version` is, relative to the plan when it is applied.
        #[derive(Debug, Clone)]
        enum Base {
            Absent,
            Current,
            Stale(u64),
        }

        #[derive(Debug, Clone)]
        enum Step {
            Patch {
                author: String,
                base: Base,
                ops: Vec<Op>,
                policy: UnlinkPolicy,
            },
            Ensure {
                id: Option<String>,
                title: String,
                owner: String,
            },
            SetStatus {
                id: String,
                status: TaskStatus,
            },
        }

        fn step() -> impl Strategy<Value = Step> {
            let base = prop_oneof![
                2 => Just(Base::Absent),
                5 => Just(Base::Current),
                1 => (1u64..3).prop_map(Base::Stale),
            ];
            prop_oneof![
                8 => (author(), base, ops(), policy())
                    .prop_map(|(author, base, ops, policy)| Step::Patch { author, base, ops, policy }),
                1 => (prop::option::of(id()), title(), author())
                    .prop_map(|(id, title, owner)| Step::Ensure { id, title, owner }),
                1 => (id(), status()).prop_map(|(id, status)| Step::SetStatus { id, status }),
            ]
        }

        /// Writes `value` as JSON text with every object's keys in the order `order` picks
        /// (rotated by `turn`, reversed or not), so two texts of one value differ in key order.
        fn write_json(value: &Value, turn: usize, reverse: bool, out: &mut String) {
            match value {
                Value::Object(map) => {
                    let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                    if reverse {
                        entries.reverse();
                    }
                    if !entries.is_empty() {
                        let k = turn % entries.len();
                        entries.rotate_left(k);
                    }
                    out.push('{');
                    for (n, (key, item)) in entries.into_iter().enumerate() {
                        if n > 0 {
                            out.push(',');
                        }
                        out.push_str(&Value::String(key.clone()).to_string());
                        out.push(':');
                        write_json(item, turn / 2 + 1, reverse, out);
                    }
                    out.push('}');
                }
                Value::Array(items) => {
                    out.push('[');
                    for (n, item) in items.iter().enumerate() {
                        if n > 0 {
                            out.push(',');
                        }
                        write_json(item, turn + n, reverse, out);
                    }
                    out.push(']');
                }
                scalar => out.push_str(&scalar.to_string()),
            }
        }

        fn text(value: &Value, turn: usize, reverse: bool) -> String {
            let mut out = String::new();
            write_json(value, turn, reverse, &mut out);
            out
        }

        /// Most of the id pool already taken, by all three authors, so that ops mostly meet
        /// tasks that exist (and link them into cycles) rather than fail on unknown ids.
        fn seeded() -> Plan {
            let mut plan = Plan::default();
            for (author, ids) in [(ORCHESTRATOR, ["a", "b"]), ("reviewer", ["c", "d"])] {
                let ops = ids
                    .iter()
                    .map(|id| Op::Add {
                        task: NewTask {
                            id: (*id).to_owned(),
                            title: format!("Task {id}"),
                            status: None,
                            depends_on: Vec::new(),
                            notes: String::new(),
                            tool: None,
                            params: None,
                        },
                    })
                    .collect();
                let seed = Patch {
                    base_version: None,
                    ops,
                };
                plan.apply(author, &seed, UnlinkPolicy::default())
                    .expect("seed patch applies");
            }
            plan
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(256))]

            #[test]
            fn random_patches_keep_the_invariants(steps in prop::collection::vec(step(), 1..60)) {
                let mut plan = seeded();
                let mut accepted = plan.version - 1;
                for step in steps {
                    match step {
                        Step::Patch { author, base, ops, policy } => {
                            let base_version = match base {
                                Base::Absent => None,
                                Base::Current => Some(plan.version),
                                Base::Stale(k) if k % 2 == 0 => Some(plan.version + k),
                                Base::Stale(k) => Some(plan.version.saturating_sub(k)),
                            };
                            let stale = base_version.is_some_and(|v| v != plan.version);
                            let patch = Patch { base_version, ops };
                            let before = serde_json::to_string(&plan).expect("serializes");
                            let before_plan = plan.clone();
                            match plan.apply(&author, &patch, policy) {
                                Ok(version) => {
                                    prop_assert!(!stale);
                                    accepted += 1;
                                    prop_assert_eq!(version, plan.version);
                                }
                                Err(rejection) => {
                                    prop_assert_eq!(
                                        serde_json::to_string(&plan).expect("serializes"),
                                        before
                                    );
                                    prop_assert_eq!(&plan, &before_plan);
                                    prop_assert_eq!(rejection.current_version, plan.version);
                                    prop_assert_eq!(rejection.reason == RejectReason::Conflict, stale);
                                    if stale {
                                        prop_assert_eq!(rejection.rejected_ops, patch.ops_json());
                                    } else if !patch.ops.is_empty() {
                                        prop_assert!(rejection.message.starts_with("ops["), "{}", rejection.message);
                                        prop_assert_eq!(rejection.rejected_ops.len(), 1);
                                    }
                                }
                            }
                        }
                        Step::Ensure { id, title, owner } => {
                            let count = plan.tasks.len();
                            match plan.ensure_task(id.as_deref(), &title, &owner) {
                                Ok(got) => {
                                    prop_assert!(plan.task(&got).is_some());
                                    if let Some(id) = id {
                                        prop_assert_eq!(got, id);
                                    }
                                }
                                Err(_) => prop_assert_eq!(plan.tasks.len(), count),
                            }
                        }
                        Step::SetStatus { id, status } => {
                            let known = plan.task(&id).is_some();
                            prop_assert_eq!(plan.set_status(&id, status, None), known);
                        }
                    }
                    if let Err(e) = plan.check_invariants() {
                        prop_assert!(false, "invariant broken: {}\n{:#?}", e, plan);
                    }
                    prop_assert_eq!(plan.version, 1 + accepted);
                }
            }

            #[test]
            fn markdown_is_stable_under_key_order(
                steps in prop::collection::vec((author(), ops()), 1..25),
                turn in 0usize..16,
            ) {
                let mut one = seeded();
                let mut two = one.clone();
                for (author, ops) in steps {
                    let value = serde_json::to_value(Patch { base_version: None, ops })
                        .expect("serializes");
                    let (first, second) = (text(&value, turn, false), text(&value, turn + 1, true));
                    let p1: Patch = serde_json::from_str(&first).expect("reparses");
                    let p2 = Patch::from_json(
                        &serde_json::from_str::<Value>(&second).expect("json"),
                    )
                    .expect("reparses");
                    prop_assert_eq!(&p1, &p2);
                    let r1 = one.apply(&author, &p1, UnlinkPolicy::default());
                    let r2 = two.apply(&author, &p2, UnlinkPolicy::default());
                    prop_assert_eq!(r1, r2);
                    prop_assert_eq!(&one, &two);
                    let md = one.render_markdown();
                    prop_assert_eq!(&md, &two.render_markdown());
                    prop_assert_eq!(&md, &one.render_markdown());
                    prop_assert!(md.ends_with('\n') && !md.ends_with("\n\n"), "{}", md);
                }
                let back: Plan = serde_json::from_str(&serde_json::to_string(&one).expect("json"))
                    .expect("parses");
                prop_assert_eq!(back.render_markdown(), one.render_markdown());
            }

            #[test]
            fn ops_round_trip_through_json(op in op()) {
                let json = op.to_json();
                prop_assert_eq!(&Op::try_from(json.clone()).expect("reparses"), &op);
                prop_assert_eq!(json["op"].as_str(), Some(op.name()));
            }
        }
    }
}
