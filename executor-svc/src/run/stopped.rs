//! What a graceful stop leaves of a run that was applying answers to sub-agents' questions.
//!
//! The run began from the session as stored with its question (`answering` set). When the
//! executor stops, every sub-agent that answers resumed either finished (it answered, failed, or
//! asked something new: its result is in the conversation) or was stopped while it worked (it
//! waits on its question again, see `run_frame`). The finished ones keep what they did, so
//! answering again does not repeat their work; the stopped ones go back to their questions as
//! the stored session had them, together with every sub-agent below them. Pure: no I/O.

use std::collections::{BTreeMap, HashSet};

use crate::{
    llm::Message,
    session::{Ask, Frame, Session},
};

/// A sub-agent a stop interrupted: the id of the call that resumed it, its frame's id, and
/// the id of the frame that called (empty: the top agent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interrupted {
    pub call_id: String,
    pub frame_id: String,
    pub parent: String,
}

/// Turns `stored` (the session as it waited on its question) into where the stop leaves it,
/// with what finished in `ran` (the run's state; `paused`: the questions it ended on, if it
/// paused). Returns the questions to wait on; `None` when nothing of the run is kept, and then
/// `stored` is unchanged (it waits on its question as before).
pub fn keep_finished(
    stored: &mut Session,
    ran: Session,
    paused: Option<&[Ask]>,
    interrupted: &[Interrupted],
) -> Option<Vec<Ask>> {
    let question = stored.answering.as_ref()?;
    let paused = paused?;
    let base = stored.messages.len();
    // The run grew the stored conversation; anything else is no state to build on.
    if ran.messages.len() < base || ran.messages[..base] != stored.messages[..] {
        return None;
    }
    // The top agent's sub-agents; those below go back with them.
    let interrupted: Vec<&Interrupted> =
        interrupted.iter().filter(|i| i.parent.is_empty()).collect();
    let stopped: HashSet<&str> = interrupted.iter().map(|i| i.call_id.as_str()).collect();
    let mut tokens = HashSet::new();
    let mut kept = Vec::new();
    for message in ran.messages.into_iter().skip(base) {
        match message {
            Message::Assistant {
                content,
                mut tool_calls,
            } => {
                tool_calls.retain(|call| {
                    let stop = stopped.contains(call.id.as_str());
                    if stop && let Some(token) = call.arguments["resume_token"].as_str() {
                        tokens.insert(token.to_owned());
                    }
                    !stop
                });
                if !tool_calls.is_empty() || !content.is_empty() {
                    kept.push(Message::Assistant {
                        content,
                        tool_calls,
                    });
                }
            }
            Message::Tool { ref call_id, .. } if stopped.contains(call_id.as_str()) => {}
            other => kept.push(other),
        }
    }
    if kept.is_empty() {
        return None;
    }
    // What the run paused on, each stopped sub-agent's questions as they were first asked.
    let mut asks: Vec<Ask> = paused
        .iter()
        .filter(|a| !stopped.contains(a.call_id.as_str()))
        .cloned()
        .collect();
    asks.extend(
        question
            .asks
            .iter()
            .filter(|a| a.token.as_ref().is_some_and(|t| tokens.contains(t)))
            // Asked again: an answer recorded earlier was not applied either.
            .map(|a| Ask {
                answer: None,
                ..a.clone()
            }),
    );
    stored.messages.extend(kept);

    let mut orchestration = ran.orchestration;
    let before = std::mem::take(&mut stored.orchestration);
    for frame_id in interrupted.iter().map(|i| i.frame_id.as_str()) {
        let now: Vec<String> = under(&orchestration.frames, &before.frames, frame_id);
        for id in now {
            orchestration.frames.remove(&id);
        }
        for id in under(&before.frames, &orchestration.frames, frame_id) {
            let Some(frame) = before.frames.get(&id) else {
                continue;
            };
            // Its task is where it was while it waited (a nested sub-agent that finished
            // under a stopped one is resumed again, so its task is open again).
            if let Some(task) = before.plan.tasks.iter().find(|t| t.id == frame.task_id) {
                orchestration
                    .plan
                    .set_status(&task.id, task.status, task.result.clone());
            }
            orchestration.frames.insert(id, frame.clone());
        }
    }
    // The tasks they (or any sub-agent below them) created go too: they run again from their
    // questions and create what they need again.
    let mut undone: HashSet<String> = orchestration
        .created
        .iter()
        .filter(|(id, path)| {
            before.plan.task(id).is_none() && interrupted.iter().any(|i| path.contains(&i.frame_id))
        })
        .map(|(id, _)| id.clone())
        .collect();
    // But not one the rest of the run took up: a kept sub-agent works on it, or a task that
    // stays is below it (and so, in turn, the tasks it is below). A dependency on one that
    // goes is dropped: who added it is not recorded, and the branch itself may have.
    loop {
        let taken_up: Vec<String> = undone
            .iter()
            .filter(|id| {
                orchestration.frames.values().any(|f| &f.task_id == *id)
                    || orchestration
                        .plan
                        .tasks
                        .iter()
                        .any(|t| !undone.contains(&t.id) && t.parent_id.as_ref() == Some(*id))
            })
            .cloned()
            .collect();
        if taken_up.is_empty() {
            break;
        }
        for id in taken_up {
            undone.remove(&id);
        }
    }
    orchestration.plan.remove_tasks(&undone);
    stored.orchestration = orchestration;
    stored.answering = None;
    Some(asks)
}

/// The ids of `frames` at or below `top`, following parents through `frames` and `other`.
fn under(
    frames: &BTreeMap<String, Frame>,
    other: &BTreeMap<String, Frame>,
    top: &str,
) -> Vec<String> {
    let parent = |id: &str| {
        frames
            .get(id)
            .or_else(|| other.get(id))
            .map(|f| f.parent.as_str())
    };
    frames
        .keys()
        .filter(|id| {
            let mut at = id.as_str();
            // A chain is never longer than the frames there are.
            for _ in 0..=frames.len() + other.len() {
                if at == top {
                    return true;
                }
                match parent(at) {
                    Some(p) if !p.is_empty() => at = p,
                    _ => return false,
                }
            }
            false
        })
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::{
        llm::ToolCall,
        plan::{ORCHESTRATOR, TaskStatus},
        session::{Orchestration, Pending},
    };

    fn ask(key: &str, token: &str, call_id: &str) -> Ask {
        Ask {
            key: key.into(),
            text: format!("{key}?"),
            required: true,
            default: None,
            agent_path: vec![key.split('.').next().unwrap_or_default().into()],
            call_id: call_id.into(),
            tool: "agent_x".into(),
            token: Some(token.into()),
            task: "t".into(),
            answer: None,
            asked_as: None,
        }
    }

    fn frame(id: &str, parent: &str, task_id: &str) -> Frame {
        Frame {
            id: id.into(),
            agent_id: id.into(),
            agent_path: vec![id.into()],
            parent: parent.into(),
            model: None,
            messages: vec![Message::user(format!("{id} works"))],
            pending: Pending {
                call_id: format!("ask-{id}"),
                tool: "ask_user".into(),
                question: "?".into(),
                asks: Vec::new(),
            },
            task_id: task_id.into(),
            task: "t".into(),
            allowed_tools: None,
            steps_left: 5,
            time_left_ms: 1000,
        }
    }

    fn resume(id: &str, token: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: "agent_x".into(),
            arguments: json!({"task": "t", "resume_token": token, "answers": {"k": "secret"}}),
        }
    }

    fn result(call_id: &str, content: &str) -> Message {
        Message::Tool {
            call_id: call_id.into(),
            name: "agent_x".into(),
            content: content.into(),
            is_error: false,
        }
    }

    /// A session waiting on questions of sub-agents `a` and `b` (`b` waits on its own `b1`),
    /// stored as a run that answers them began.
    fn waiting() -> Session {
        let mut s = Session::new("s".into(), "lead".into(), None, "m".into());
        s.messages = vec![Message::user("go")];
        let plan = &mut s.orchestration.plan;
        for (task, owner) in [("ta", "a"), ("tb", "b"), ("tb1", "b1")] {
            let id = plan
                .ensure_task(Some(task), task, ORCHESTRATOR, owner)
                .expect("task");
            plan.set_status(&id, TaskStatus::InProgress, None);
        }
        for f in [
            frame("a", "", "ta"),
            frame("b", "", "tb"),
            frame("b1", "b", "tb1"),
        ] {
            s.orchestration.frames.insert(f.id.clone(), f);
        }
        s.answering = Some(Pending {
            call_id: "need_user_input-1".into(),
            tool: "need_user_input".into(),
            question: "answer a and b".into(),
            asks: vec![ask("a.k", "TA", "call-a"), ask("b.k", "TB", "call-b")],
        });
        s
    }

    /// The run that resumed both: `a` finished, `b` was stopped (its `b1` finished below it and
    /// it had started a new `b2`).
    fn ran(stored: &Session) -> (Session, Vec<Ask>) {
        let mut ran = stored.clone();
        ran.answering = None;
        ran.messages.push(Message::Assistant {
            content: String::new(),
            tool_calls: vec![resume("r-a", "TA"), resume("r-b", "TB")],
        });
        ran.messages.push(result("r-a", "a done"));
        ran.messages.push(result("r-b", "b needs input"));
        let o = &mut ran.orchestration;
        o.frames.remove("a");
        o.frames.remove("b1");
        o.frames.insert("b2".into(), frame("b2", "b", "tb2"));
        o.plan
            .set_status("ta", TaskStatus::Completed, Some(json!("a")));
        o.plan
            .set_status("tb1", TaskStatus::Completed, Some(json!("b1")));
        o.facts.insert("a_found".into(), json!(1));
        // The tasks they created: `a` a helper, `b` the task of `b2`, `b2` a subtask of it.
        create(
            o,
            &[
                ("ta-h", "a", &["a"], None),
                ("tb2", "b2", &["b"], None),
                ("tb2.x", "b2", &["b", "b2"], Some("tb2")),
            ],
        );
        if let Some(ta) = o.plan.tasks.iter_mut().find(|t| t.id == "ta") {
            ta.depends_on.push("tb2".into());
        }
        // `b` asks again under its resume call.
        (ran, vec![ask("b.k", "TB", "r-b")])
    }

    /// Tasks created in the run: `(id, owner, the creating frame's path, parent)`.
    fn create(o: &mut Orchestration, tasks: &[(&str, &str, &[&str], Option<&str>)]) {
        for &(task, owner, path, parent) in tasks {
            o.plan
                .ensure_task(Some(task), task, ORCHESTRATOR, owner)
                .expect("task");
            o.created
                .insert(task.into(), path.iter().map(|p| (*p).to_owned()).collect());
            if let Some(t) = o.plan.tasks.iter_mut().find(|t| t.id == task) {
                t.parent_id = parent.map(str::to_owned);
            }
        }
    }

    #[test]
    fn a_stop_keeps_the_sub_agents_that_finished_and_puts_back_the_ones_it_interrupted() {
        let mut stored = waiting();
        // `b`'s answer was recorded in an earlier round (held back by another question).
        if let Some(q) = stored.answering.as_mut() {
            q.asks[1].answer = Some(json!("8080"));
        }
        let before = stored.clone();
        let (mut ran, paused) = ran(&stored);
        // `b2` made a task that `a`, which finished, put a subtask under: it stays.
        let o = &mut ran.orchestration;
        create(
            o,
            &[
                ("tb2.kept", "b2", &["b", "b2"], None),
                ("ta.sub", "a", &["a"], Some("tb2.kept")),
            ],
        );
        let version = o.plan.version;
        let stop = [Interrupted {
            call_id: "r-b".into(),
            frame_id: "b".into(),
            parent: String::new(),
        }];
        let asks = keep_finished(&mut stored, ran, Some(&paused), &stop).expect("kept");
        // `a`'s resume and result stay; `b`'s resume (with its answers) is gone.
        assert_eq!(stored.messages.len(), 3, "{:?}", stored.messages);
        assert_eq!(
            stored.messages[1],
            Message::Assistant {
                content: String::new(),
                tool_calls: vec![resume("r-a", "TA")],
            }
        );
        assert_eq!(stored.messages[2], result("r-a", "a done"));
        // `b` is asked as it was first asked, its earlier answer not applied either.
        assert_eq!(asks, vec![ask("b.k", "TB", "call-b")]);
        let o = &stored.orchestration;
        let status = |id: &str| o.plan.tasks.iter().find(|t| t.id == id).map(|t| t.status);
        assert_eq!(status("ta"), Some(TaskStatus::Completed));
        assert_eq!(o.facts.get("a_found"), Some(&json!(1)));
        // `b` and everything below it as it was: `b1` waits again, `b2` never was.
        let frames: Vec<&str> = o.frames.keys().map(String::as_str).collect();
        assert_eq!(frames, ["b", "b1"]);
        assert_eq!(o.frames["b1"], before.orchestration.frames["b1"]);
        assert_eq!(status("tb1"), Some(TaskStatus::InProgress));
        // The tasks `a` created stay; those of `b`'s branch go, and no task depends on them.
        let ids: Vec<&str> = o.plan.tasks.iter().map(|t| t.id.as_str()).collect();
        assert_eq!(ids, ["ta", "tb", "tb1", "ta-h", "tb2.kept", "ta.sub"]);
        assert!(o.plan.tasks.iter().all(|t| t.depends_on.is_empty()));
        // A client holding the plan of the last `plan_updated` reads it again.
        assert_eq!(o.plan.version, version + 1);
        assert!(stored.answering.is_none());
    }

    #[test]
    fn a_stop_that_interrupted_every_sub_agent_leaves_the_stored_question_as_it_was() {
        let mut stored = waiting();
        let before = stored.clone();
        let (ran, paused) = ran(&stored);
        let stop = [
            Interrupted {
                call_id: "r-a".into(),
                frame_id: "a".into(),
                parent: String::new(),
            },
            Interrupted {
                call_id: "r-b".into(),
                frame_id: "b".into(),
                parent: String::new(),
            },
            // Below `b`: it goes back with `b`.
            Interrupted {
                call_id: "r-b1".into(),
                frame_id: "b1".into(),
                parent: "b".into(),
            },
        ];
        assert!(keep_finished(&mut stored, ran, Some(&paused), &stop).is_none());
        assert_eq!(stored.messages, before.messages);
        assert_eq!(stored.orchestration, before.orchestration);
        assert_eq!(stored.answering, before.answering);
        // Nor does a run that did not pause, or one whose history is not the stored one's.
        let (ran, _) = self::ran(&stored);
        assert!(keep_finished(&mut stored, ran, None, &[]).is_none());
        let (mut ran, paused) = self::ran(&stored);
        ran.messages[0] = Message::user("other");
        assert!(keep_finished(&mut stored, ran, Some(&paused), &[]).is_none());
        assert_eq!(stored.messages, before.messages);
    }
}
