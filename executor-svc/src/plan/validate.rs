//! Validation shared by patches and code-driven changes: ids, titles, dependency cycles, and the
//! invariants every change keeps ([`Plan::check_invariants`]).

use std::collections::{HashMap, HashSet};

use super::parse::shown;
use super::{MAX_ID_LEN, MAX_TASKS, MAX_TITLE_LEN, Plan, Task};

pub(super) fn validate_id(id: &str) -> Result<(), String> {
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
pub(super) fn validate_title(title: &str) -> Result<String, String> {
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

/// The first dependency cycle in `tasks`, as task positions in dependency order (each depends on
/// the next, the last on the first), or `None` when the graph is acyclic. Deterministic: tasks
/// and their dependencies are walked in order. Dependencies on unknown ids are skipped.
pub(super) fn find_cycle(tasks: &[Task], index: &HashMap<&str, usize>) -> Option<Vec<usize>> {
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
pub(super) fn cycle_text(tasks: &[Task], cycle: &[usize], first: Option<&str>) -> String {
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

impl Plan {
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
}
