//! Reading patches from JSON. By hand rather than through serde's derive so that every message
//! says where the problem is (`ops[2].fields.status: …`): the model fixes a patch faster from
//! that.

use serde_json::{Map, Value};

use super::TaskStatus;
use super::patch::{Fields, NewTask, Op};

/// The op names, in the order error messages list them.
const OP_NAMES: &str = "add, add_subtask, update, link_dep, unlink_dep";

pub(super) fn parse_ops(items: &[Value]) -> Result<Vec<Op>, String> {
    items
        .iter()
        .enumerate()
        .map(|(i, item)| parse_op(&format!("ops[{i}]"), item))
        .collect()
}

pub(super) fn parse_op(path: &str, value: &Value) -> Result<Op, String> {
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

pub(super) fn parse_new_task(path: &str, value: &Value) -> Result<NewTask, String> {
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
    let (p, v) = field("owner_agent");
    let owner_agent = opt_string(&p, v)?.filter(|o| !o.trim().is_empty());
    Ok(NewTask {
        id,
        title,
        status,
        depends_on,
        notes,
        tool,
        params: opt_value(map.get("params")),
        owner_agent,
    })
}

pub(super) fn parse_fields(path: &str, value: &Value) -> Result<Fields, String> {
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
pub(super) fn describe(value: &Value) -> String {
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
pub(super) fn shown(text: &str) -> String {
    const MAX: usize = 80;
    match text.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}
