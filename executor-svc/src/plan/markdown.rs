//! The plan as Markdown: a pure function of its value, so the same plan always renders the same.

use std::collections::{HashMap, HashSet};

use super::Plan;

impl Plan {
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
