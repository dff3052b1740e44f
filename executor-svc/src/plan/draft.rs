//! Applying one op to a working copy of the plan: who may change what (ownership and the
//! [`UnlinkPolicy`]), how each op merges, and the checks on new tasks and dependencies.

use std::collections::HashMap;

use super::apply::RejectReason;
use super::parse::shown;
use super::patch::{NewTask, Op};
use super::validate::{cycle_text, find_cycle, validate_id, validate_title};
use super::{MAX_TASKS, ORCHESTRATOR, Task, TaskStatus};

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

/// The working copy a patch is applied to; it replaces the plan's tasks only if every op passes.
pub(super) struct Draft {
    pub(super) tasks: Vec<Task>,
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
    pub(super) fn new(tasks: &[Task]) -> Self {
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

    pub(super) fn apply(
        &mut self,
        author: &str,
        op: &Op,
        policy: UnlinkPolicy,
    ) -> Result<(), OpError> {
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

    /// Creates `new`, owned by its `owner_agent` or else by `author`, under `parent` if given
    /// (already checked). Only the orchestrator may create a task for another agent.
    fn insert(
        &mut self,
        new: &NewTask,
        author: &str,
        parent: Option<&String>,
    ) -> Result<(), OpError> {
        validate_id(&new.id).map_err(invalid)?;
        let owner = new.owner_agent.as_deref().unwrap_or(author);
        if owner != author {
            if author != ORCHESTRATOR {
                return Err(forbidden(format!(
                    "`{author}` may create tasks only for itself, not for `{owner}`"
                )));
            }
            taskforce_proto::ids::validate_agent_id(owner)
                .map_err(|e| invalid(format!("owner_agent `{}`: {e}", shown(owner))))?;
        }
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
            owner_agent: owner.to_owned(),
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
