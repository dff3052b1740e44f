//! The JSON of the executor's run events (one SSE event each) and of a session's todo plan.
//!
//! Fields that travel as JSON text over gRPC (`result_json`, `ops_json`, a plan task's
//! `params_json`, a question item's `default_json`) are parsed, so REST clients get JSON values;
//! text that is empty or not JSON becomes `null`.

use serde::Serialize;
use serde_json::Value;
use taskforce_proto::v1::{self, run_event::Event as Ev};
use utoipa::ToSchema;

use crate::execute::{status_name, usage_json};

/// One question of a sub-agent, bubbled up into a consolidated question.
#[derive(Debug, Serialize, ToSchema)]
pub struct QuestionItemJson {
    /// The key to answer it by (`answers` of the answer body).
    pub key: String,
    /// The question.
    pub text: String,
    /// Whether the run needs an answer (else `default`, or nothing, is used).
    pub required: bool,
    /// The proposed answer (any JSON value), used when the key is left unanswered; `null` when
    /// none.
    pub default: Value,
    /// The sub-agent that asks.
    pub agent_path: Vec<String>,
}

/// The items of a question (empty for an ordinary question).
pub fn question_items(items: &[v1::QuestionItem]) -> Vec<QuestionItemJson> {
    items
        .iter()
        .map(|i| QuestionItemJson {
            key: i.key.clone(),
            text: i.text.clone(),
            required: i.required,
            default: parse_json(&i.default_json),
            agent_path: i.agent_path.clone(),
        })
        .collect()
}

/// One task of a todo plan.
#[derive(Debug, Serialize, ToSchema)]
pub struct PlanTaskJson {
    /// Unique in the plan.
    pub id: String,
    pub title: String,
    /// `PENDING`, `IN_PROGRESS`, `COMPLETED` or `FAILED`.
    #[schema(example = "PENDING")]
    pub status: String,
    /// Ids of the tasks this one waits for.
    pub depends_on: Vec<String>,
    /// An agent id, or `orchestrator`.
    pub owner_agent: String,
    /// The parent task of a subtask; `null` for a top-level task.
    pub parent_id: Option<String>,
    pub notes: String,
    /// The tool the task is meant to use; empty when none.
    pub tool: String,
    /// The tool's parameters (a JSON object), or `null`.
    #[schema(value_type = Object, nullable)]
    pub params: Value,
    /// The result a delegation stored on the task (any JSON value), or `null`.
    pub result: Value,
}

/// A session's todo plan; `version` bumps once per merged patch.
#[derive(Debug, Serialize, ToSchema)]
pub struct PlanJson {
    /// 1 until an orchestrator writes a plan; bumped by one per merged patch.
    pub version: u64,
    pub tasks: Vec<PlanTaskJson>,
    /// The tasks rendered as Markdown (deterministic).
    pub markdown: String,
}

/// The plan JSON of the plan route and of the `plan_updated` event.
pub fn plan_json(plan: &v1::Plan) -> PlanJson {
    PlanJson {
        version: plan.version,
        tasks: plan
            .tasks
            .iter()
            .map(|t| PlanTaskJson {
                id: t.id.clone(),
                title: t.title.clone(),
                status: t.status.clone(),
                depends_on: t.depends_on.clone(),
                owner_agent: t.owner_agent.clone(),
                parent_id: (!t.parent_id.is_empty()).then(|| t.parent_id.clone()),
                notes: t.notes.clone(),
                tool: t.tool.clone(),
                params: parse_json(&t.params_json),
                result: parse_json(&t.result_json),
            })
            .collect(),
        markdown: plan.markdown.clone(),
    }
}

/// JSON text as a value; empty or invalid text is `null`.
pub fn parse_json(text: &str) -> Value {
    if text.trim().is_empty() {
        return Value::Null;
    }
    serde_json::from_str(text).unwrap_or(Value::Null)
}

/// True for the event that ends a run: `done` of the top agent. Sub-agents run in frames of
/// their own (`frame_id` set) whose end is `delegation_end`, not the run's.
pub fn ends_run(ev: &v1::RunEvent) -> bool {
    ev.frame_id.is_empty() && matches!(ev.event, Some(Ev::Done(_)))
}

/// The JSON of one run event: the envelope (`session_id`, `seq`, `agent_path`, `frame_id`,
/// `time_unix_ms`) and its `type`, then the event's own fields. Borrowed from the gRPC event and
/// serialized straight to text (a stream's events are the gateway's busiest path).
#[derive(Debug, Serialize)]
pub struct EventJson<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    session_id: &'a str,
    seq: u64,
    agent_path: &'a [String],
    frame_id: &'a str,
    time_unix_ms: i64,
    #[serde(flatten)]
    fields: Fields<'a>,
}

/// The fields of each kind of event.
#[derive(Debug, Serialize)]
#[serde(untagged)]
enum Fields<'a> {
    RunStarted {
        agent_id: &'a str,
        model: &'a str,
        provider: &'a str,
    },
    Text {
        text: &'a str,
    },
    ToolStart {
        call_id: &'a str,
        tool: &'a str,
        arguments_json: &'a str,
    },
    ToolEnd {
        call_id: &'a str,
        tool: &'a str,
        output: &'a str,
        is_error: bool,
        duration_ms: u64,
    },
    ToolError {
        call_id: &'a str,
        tool: &'a str,
        message: &'a str,
    },
    Question {
        call_id: &'a str,
        question: &'a str,
        items: Vec<QuestionItemJson>,
    },
    Coded {
        code: &'a str,
        message: &'a str,
    },
    Done {
        status: &'static str,
        usage: Option<crate::execute::UsageJson>,
    },
    DelegationStart {
        call_id: &'a str,
        agent_id: &'a str,
        task: &'a str,
        task_id: &'a str,
        resumed: bool,
    },
    DelegationEnd {
        call_id: &'a str,
        agent_id: &'a str,
        task_id: &'a str,
        status: &'a str,
        result: Value,
    },
    PatchApplied {
        author: &'a str,
        version: u64,
        ops: Value,
    },
    PatchRejected {
        author: &'a str,
        reason: &'a str,
        message: &'a str,
        current_version: u64,
        rejected_ops: Value,
    },
    PlanUpdated {
        plan: PlanJson,
    },
}

/// The SSE event name and JSON of one run event. `None` for an event without a kind (one this
/// gateway does not know yet).
pub fn event_json(ev: &v1::RunEvent) -> Option<(&'static str, EventJson<'_>)> {
    let (kind, fields) = match ev.event.as_ref()? {
        Ev::RunStarted(e) => (
            "run_started",
            Fields::RunStarted {
                agent_id: &e.agent_id,
                model: &e.model,
                provider: &e.provider,
            },
        ),
        Ev::Token(e) => ("token", Fields::Text { text: &e.text }),
        Ev::ToolStart(e) => (
            "tool_start",
            Fields::ToolStart {
                call_id: &e.call_id,
                tool: &e.tool,
                arguments_json: &e.arguments_json,
            },
        ),
        Ev::ToolEnd(e) => (
            "tool_end",
            Fields::ToolEnd {
                call_id: &e.call_id,
                tool: &e.tool,
                output: &e.output,
                is_error: e.is_error,
                duration_ms: e.duration_ms,
            },
        ),
        Ev::ToolError(e) => (
            "tool_error",
            Fields::ToolError {
                call_id: &e.call_id,
                tool: &e.tool,
                message: &e.message,
            },
        ),
        Ev::Question(e) => (
            "question",
            Fields::Question {
                call_id: &e.call_id,
                question: &e.question,
                items: question_items(&e.items),
            },
        ),
        Ev::FinalAnswer(e) => ("final_answer", Fields::Text { text: &e.text }),
        Ev::Error(e) => (
            "error",
            Fields::Coded {
                code: &e.code,
                message: &e.message,
            },
        ),
        Ev::Warning(e) => (
            "warning",
            Fields::Coded {
                code: &e.code,
                message: &e.message,
            },
        ),
        Ev::Done(e) => (
            "done",
            Fields::Done {
                status: status_name(e.status),
                usage: e.usage.as_ref().map(usage_json),
            },
        ),
        Ev::DelegationStart(e) => (
            "delegation_start",
            Fields::DelegationStart {
                call_id: &e.call_id,
                agent_id: &e.agent_id,
                task: &e.task,
                task_id: &e.task_id,
                resumed: e.resumed,
            },
        ),
        Ev::DelegationEnd(e) => (
            "delegation_end",
            Fields::DelegationEnd {
                call_id: &e.call_id,
                agent_id: &e.agent_id,
                task_id: &e.task_id,
                status: &e.status,
                result: parse_json(&e.result_json),
            },
        ),
        Ev::PatchApplied(e) => (
            "patch_applied",
            Fields::PatchApplied {
                author: &e.author,
                version: e.version,
                ops: parse_json(&e.ops_json),
            },
        ),
        Ev::PatchRejected(e) => (
            "patch_rejected",
            Fields::PatchRejected {
                author: &e.author,
                reason: &e.reason,
                message: &e.message,
                current_version: e.current_version,
                rejected_ops: parse_json(&e.rejected_ops_json),
            },
        ),
        Ev::PlanUpdated(e) => (
            "plan_updated",
            Fields::PlanUpdated {
                plan: plan_json(e.plan.as_ref().unwrap_or(&v1::Plan::default())),
            },
        ),
    };
    let json = EventJson {
        kind,
        session_id: &ev.session_id,
        seq: ev.seq,
        agent_path: &ev.agent_path,
        frame_id: &ev.frame_id,
        time_unix_ms: ev.time_unix_ms,
        fields,
    };
    Some((kind, json))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn envelope(event: Ev) -> v1::RunEvent {
        v1::RunEvent {
            session_id: "s-1".into(),
            seq: 7,
            agent_path: vec!["boss".into(), "researcher".into()],
            time_unix_ms: 1,
            frame_id: "f-2".into(),
            event: Some(event),
        }
    }

    fn fields(event: Ev) -> (&'static str, Value) {
        let ev = envelope(event);
        let (name, json) = event_json(&ev).expect("a known event");
        let mut v = serde_json::to_value(json).expect("serializable");
        assert_eq!(v["type"], name);
        assert_eq!(v["frame_id"], "f-2");
        assert_eq!(v["agent_path"], json!(["boss", "researcher"]));
        if let Some(o) = v.as_object_mut() {
            for k in [
                "type",
                "session_id",
                "seq",
                "agent_path",
                "frame_id",
                "time_unix_ms",
            ] {
                o.remove(k);
            }
        }
        (name, v)
    }

    #[test]
    fn json_text_is_parsed_and_anything_else_is_null() {
        assert_eq!(parse_json(r#"{"a": [1]}"#), json!({"a": [1]}));
        assert_eq!(parse_json("\"x\""), json!("x"));
        assert_eq!(parse_json(""), Value::Null);
        assert_eq!(parse_json("  "), Value::Null);
        assert_eq!(parse_json("{not json"), Value::Null);
    }

    #[test]
    fn delegation_events_have_their_documented_fields() {
        let start = Ev::DelegationStart(v1::DelegationStart {
            call_id: "c-1".into(),
            agent_id: "researcher".into(),
            task: "Find the totals".into(),
            task_id: "t1".into(),
            resumed: true,
        });
        assert_eq!(
            fields(start),
            (
                "delegation_start",
                json!({"call_id": "c-1", "agent_id": "researcher", "task": "Find the totals",
                       "task_id": "t1", "resumed": true})
            )
        );
        let end = |result_json: &str| {
            Ev::DelegationEnd(v1::DelegationEnd {
                call_id: "c-1".into(),
                agent_id: "researcher".into(),
                task_id: "t1".into(),
                status: "completed".into(),
                result_json: result_json.into(),
            })
        };
        assert_eq!(
            fields(end(r#"{"success": true, "result": 42}"#)),
            (
                "delegation_end",
                json!({"call_id": "c-1", "agent_id": "researcher", "task_id": "t1",
                       "status": "completed", "result": {"success": true, "result": 42}})
            )
        );
        assert_eq!(fields(end("")).1["result"], Value::Null);
        assert_eq!(fields(end("oops")).1["result"], Value::Null);
    }

    #[test]
    fn patch_events_parse_their_ops() {
        let applied = Ev::PatchApplied(v1::PatchApplied {
            author: "orchestrator".into(),
            version: 3,
            ops_json: r#"[{"op": "add", "task": {"id": "t1", "title": "Look"}}]"#.into(),
        });
        assert_eq!(
            fields(applied),
            (
                "patch_applied",
                json!({"author": "orchestrator", "version": 3,
                       "ops": [{"op": "add", "task": {"id": "t1", "title": "Look"}}]})
            )
        );
        let rejected = Ev::PatchRejected(v1::PatchRejected {
            author: "researcher".into(),
            reason: "conflict".into(),
            message: "base_version 1 is stale; the plan is at 3".into(),
            current_version: 3,
            rejected_ops_json: r#"[{"op": "update", "task_id": "t1"}]"#.into(),
        });
        assert_eq!(
            fields(rejected),
            (
                "patch_rejected",
                json!({"author": "researcher", "reason": "conflict",
                       "message": "base_version 1 is stale; the plan is at 3",
                       "current_version": 3, "rejected_ops": [{"op": "update", "task_id": "t1"}]})
            )
        );
    }

    #[test]
    fn plan_updated_carries_the_plan_json() {
        let plan = v1::Plan {
            version: 2,
            tasks: vec![
                v1::PlanTask {
                    id: "t1".into(),
                    title: "Research".into(),
                    status: "IN_PROGRESS".into(),
                    owner_agent: "researcher".into(),
                    params_json: r#"{"q": "x"}"#.into(),
                    ..Default::default()
                },
                v1::PlanTask {
                    id: "t1.1".into(),
                    title: "Sub".into(),
                    status: "PENDING".into(),
                    depends_on: vec!["t1".into()],
                    owner_agent: "orchestrator".into(),
                    parent_id: "t1".into(),
                    notes: "later".into(),
                    tool: "web_search".into(),
                    result_json: "[1, 2]".into(),
                    ..Default::default()
                },
            ],
            markdown: "- [ ] t1 Research\n".into(),
        };
        let ev = Ev::PlanUpdated(v1::PlanUpdated { plan: Some(plan) });
        assert_eq!(
            fields(ev),
            (
                "plan_updated",
                json!({"plan": {"version": 2, "tasks": [
                    {"id": "t1", "title": "Research", "status": "IN_PROGRESS", "depends_on": [],
                     "owner_agent": "researcher", "parent_id": null, "notes": "", "tool": "",
                     "params": {"q": "x"}, "result": null},
                    {"id": "t1.1", "title": "Sub", "status": "PENDING", "depends_on": ["t1"],
                     "owner_agent": "orchestrator", "parent_id": "t1", "notes": "later",
                     "tool": "web_search", "params": null, "result": [1, 2]}],
                    "markdown": "- [ ] t1 Research\n"}})
            )
        );
        let empty = Ev::PlanUpdated(v1::PlanUpdated { plan: None });
        assert_eq!(
            fields(empty).1,
            json!({"plan": {"version": 0, "tasks": [], "markdown": ""}})
        );
    }

    #[test]
    fn questions_list_their_items_and_plain_ones_an_empty_list() {
        let q = Ev::Question(v1::Question {
            call_id: "c-9".into(),
            question: "python_version: Which Python?\nci: Which CI?".into(),
            items: vec![
                v1::QuestionItem {
                    key: "python_version".into(),
                    text: "Which Python?".into(),
                    required: true,
                    default_json: "\"3.12\"".into(),
                    agent_path: vec!["boss".into(), "coder".into()],
                },
                v1::QuestionItem {
                    key: "ci".into(),
                    text: "Which CI?".into(),
                    required: false,
                    default_json: String::new(),
                    agent_path: vec!["boss".into(), "ops".into()],
                },
            ],
        });
        assert_eq!(
            fields(q),
            (
                "question",
                json!({"call_id": "c-9", "question": "python_version: Which Python?\nci: Which CI?",
                       "items": [
                           {"key": "python_version", "text": "Which Python?", "required": true,
                            "default": "3.12", "agent_path": ["boss", "coder"]},
                           {"key": "ci", "text": "Which CI?", "required": false,
                            "default": null, "agent_path": ["boss", "ops"]}]})
            )
        );
        let plain = Ev::Question(v1::Question {
            call_id: "c-1".into(),
            question: "Which invoice?".into(),
            items: Vec::new(),
        });
        assert_eq!(fields(plain).1["items"], json!([]));
    }

    #[test]
    fn only_the_top_agents_done_ends_a_run() {
        let done = Ev::Done(v1::Done::default());
        assert!(!ends_run(&envelope(done.clone())));
        let top = v1::RunEvent {
            frame_id: String::new(),
            ..envelope(done)
        };
        assert!(ends_run(&top));
        let token = v1::RunEvent {
            frame_id: String::new(),
            ..envelope(Ev::Token(v1::Token::default()))
        };
        assert!(!ends_run(&token));
    }
}
