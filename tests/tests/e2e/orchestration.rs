//! Multi-agent orchestration (seed 003) through the real registry, executor and gateway: each
//! agent runs on its own model alias, a scripted provider of its own, so every conversation
//! replays deterministically.
//!
//! - A planner delegates to sub-agents in parallel (one fails), merges a sub-agent's patch,
//!   refuses an ownership violation and a stale base version (then retries), refuses a tampered
//!   resume token; the plan endpoint shows all of it.
//! - Sub-agent patches without a `base_version`, or with an op that does not exist, are refused
//!   with the plan's version and the rejected ops; malformed session ids are a 400.
//! - A question two levels down bubbles up as one consolidated question, survives a SIGKILL of
//!   the executor, and the answer resumes the same sub-agent; the hop limit refuses a third level.

use std::path::Path;

use serde_json::{Value, json};
use taskforce_proto::v1;
use taskforce_tests::{Stack, StackOptions};

use crate::helpers::{
    RUN_TIMEOUT, SseReader, agent_json, create, event_names, get_session, run_to_end, send,
};

/// An `llm_config.yaml` with one scripted provider (and model alias) per script.
fn llm_config(dir: &Path, scripts: &[(&str, &str)]) -> String {
    let (models, providers) =
        taskforce_tests::scripts::scripted_models(dir, scripts).expect("scripts written");
    format!(
        "default_provider: scripted\nmodels:\n{models}providers:\n  scripted: {{type: scripted}}\n{providers}"
    )
}

async fn stack(dir: &Path, scripts: &[(&str, &str)]) -> Stack {
    StackOptions::full()
        .with_executor()
        .llm_config(llm_config(dir, scripts))
        .spawn()
        .await
        .expect("stack with executor starts")
}

async fn agent(stack: &Stack, id: &str, tools: &[&str], subagents: &[&str], model: &str) {
    let mut body = agent_json(id);
    body["tool_allowlist"] = json!(tools);
    body["subagents"] = json!(subagents);
    body["model"] = json!(model);
    let r = create(stack, &body).await;
    assert_eq!(r.status, 201, "creating {id}: {}", r.text);
}

fn named<'a>(events: &'a [(String, Value)], name: &str) -> Vec<&'a Value> {
    events
        .iter()
        .filter(|(n, _)| n == name)
        .map(|(_, e)| e)
        .collect()
}

/// The session id a run's events name.
fn session_of(events: &[(String, Value)]) -> String {
    events[0].1["session_id"].as_str().expect("id").to_owned()
}

/// Opens the stream of `answers` to `session`'s question.
async fn answer(stack: &Stack, session: &str, answers: Value) -> SseReader {
    let path = format!("/api/v1/sessions/{session}/answer");
    SseReader::open(stack, &path, &json!({ "answers": answers })).await
}

/// A stack whose `lead` (script `lead`) may delegate to `quick` and `mid`, each with its script
/// and tools.
async fn lead_of_two(
    dir: &Path,
    scripts: [&str; 3],
    quick_tools: &[&str],
    mid_tools: &[&str],
) -> Stack {
    let [lead, quick, mid] = scripts;
    let stack = stack(dir, &[("lead", lead), ("quick", quick), ("mid", mid)]).await;
    agent(&stack, "quick", quick_tools, &[], "quick").await;
    agent(&stack, "mid", mid_tools, &[], "mid").await;
    agent(&stack, "lead", &["file_read"], &["quick", "mid"], "lead").await;
    stack
}

const PLANNER: &str = r#"
final_text: "All delegated."
turns:
  - tool_calls:
      - name: update_todolist
        arguments: {ops: [{op: add, task: {id: plan-1, title: Decide the stack}}]}
  - tool_calls:
      - name: agent_builder
        arguments: {task: Build the service, task_id: build}
      - name: delegate_to_agent
        arguments: {agent_name: broken, task: Break something}
  - tool_calls:
      - name: agent_reviewer
        arguments: {task: Review the service, task_id: review}
  - tool_calls:
      - name: update_todolist
        arguments: {base_version: 2, ops: [{op: update, task_id: plan-1, fields: {notes: stale}}]}
  - tool_calls:
      - name: update_todolist
        arguments: {base_version: 3, ops: [{op: update, task_id: plan-1, fields: {status: COMPLETED}}]}
  - tool_calls:
      - name: agent_builder
        arguments: {task: Build again, resume_token: "v1.f0123abcd.00ff", answers: {}}
"#;

const BUILDER: &str = r#"
turns:
  - text: '{"result": {"artifact": "svc.tar", "deploy_id": "550e8400-e29b-41d4-a716-446655440000", "key": "sk-proj-Zx81kQ0pLm2vN7rT4yW9aB3cD6eF1gH5"}, "patch": {"base_version": 2, "ops": [{"op": "add_subtask", "parent_id": "build", "task": {"id": "build.smoke", "title": "Smoke test"}}]}, "new_facts": {"lang": "rust"}, "suggested_next_action": "review"}'
"#;

const REVIEWER: &str = r#"
turns:
  - text: '{"result": {"ok": true}, "patch": {"base_version": 3, "ops": [{"op": "update", "task_id": "plan-1", "fields": {"status": "FAILED"}}]}}'
"#;

const BROKEN: &str = r#"
turns:
  - error: "the model is overloaded"
"#;

#[tokio::test]
async fn a_planner_delegates_merges_patches_and_refuses_what_it_must() {
    let dir = tempfile::TempDir::new().expect("tmp");
    let stack = stack(
        dir.path(),
        &[
            ("planner", PLANNER),
            ("builder", BUILDER),
            ("reviewer", REVIEWER),
            ("broken", BROKEN),
        ],
    )
    .await;
    agent(&stack, "builder", &["file_read"], &[], "builder").await;
    agent(&stack, "reviewer", &["file_read"], &[], "reviewer").await;
    agent(&stack, "broken", &["file_read"], &[], "broken").await;
    agent(
        &stack,
        "planner",
        &["delegate_to_agent", "update_todolist"],
        &["builder", "reviewer", "broken"],
        "planner",
    )
    .await;

    let mut sse = SseReader::open(
        &stack,
        "/api/v1/execute/stream",
        &json!({"mission": "Ship a web service", "agent_id": "planner"}),
    )
    .await;
    let events = sse.rest(RUN_TIMEOUT).await;
    let names = event_names(&events);
    assert!(names.ends_with(&["final_answer", "done"]), "{names:?}");
    let done = &events[events.len() - 1].1;
    assert_eq!(done["status"], "completed", "{done}");
    let session = events[0].1["session_id"]
        .as_str()
        .expect("session")
        .to_owned();

    // Sub-agents' events are nested under their path and frame.
    let starts = named(&events, "delegation_start");
    let builder = starts
        .iter()
        .find(|e| e["agent_id"] == "builder")
        .expect("builder started");
    assert_eq!(builder["agent_path"], json!(["builder"]));
    assert_eq!(builder["task_id"], "build");
    let frame = builder["frame_id"].as_str().expect("frame id");
    assert!(!frame.is_empty());
    assert!(
        events.iter().any(|(n, e)| n == "token"
            && e["frame_id"] == frame
            && e["agent_path"] == json!(["builder"])),
        "the builder's tokens carry its frame"
    );

    // The builder's patch merged (version 2 → 3); the failing sub-agent did not stop it.
    let applied = named(&events, "patch_applied");
    assert!(
        applied
            .iter()
            .any(|e| e["author"] == "builder" && e["version"] == 3),
        "{applied:?}"
    );
    let ends = named(&events, "delegation_end");
    let broken = ends
        .iter()
        .find(|e| e["agent_id"] == "broken")
        .expect("broken ended");
    assert_eq!(broken["status"], "failed", "{broken}");
    assert_eq!(broken["result"]["error"]["code"], "LLM_ERROR", "{broken}");

    // Ownership, stale base, then the retry.
    let rejected = named(&events, "patch_rejected");
    assert!(
        rejected
            .iter()
            .any(|e| e["author"] == "reviewer" && e["reason"] == "forbidden"),
        "{rejected:?}"
    );
    let stale = rejected
        .iter()
        .find(|e| e["author"] == "orchestrator")
        .expect("the stale patch is refused");
    assert_eq!(stale["reason"], "conflict");
    assert_eq!(stale["current_version"], 3);
    assert!(
        applied
            .iter()
            .any(|e| e["author"] == "orchestrator" && e["version"] == 4),
        "the retry merged: {applied:?}"
    );

    // The tampered token is a tool error the model sees; the run went on.
    let errors = named(&events, "tool_error");
    assert!(
        errors.iter().any(|e| e["tool"] == "agent_builder"
            && e["message"]
                .as_str()
                .unwrap_or_default()
                .contains("resume_token")),
        "{errors:?}"
    );
    let plans = named(&events, "plan_updated");
    let last = plans.last().expect("plan events");
    assert!(
        last["plan"]["markdown"]
            .as_str()
            .unwrap_or_default()
            .contains("[x] build"),
        "{last}"
    );

    // The plan endpoint after all of it.
    let plan = send(
        stack
            .http()
            .get(stack.url(&format!("/api/v1/sessions/{session}/plan"))),
    )
    .await;
    assert_eq!(plan.status, 200, "{}", plan.text);
    let plan = plan.body;
    assert_eq!(plan["version"], 4, "{plan}");
    let task = |id: &str| {
        plan["tasks"]
            .as_array()
            .and_then(|ts| ts.iter().find(|t| t["id"] == id))
            .cloned()
            .unwrap_or_else(|| panic!("task {id} in {plan}"))
    };
    assert_eq!(task("plan-1")["status"], "COMPLETED");
    assert_eq!(task("plan-1")["owner_agent"], "orchestrator");
    assert_eq!(task("build")["status"], "COMPLETED");
    assert_eq!(task("build")["owner_agent"], "builder");
    assert_eq!(task("build")["result"]["artifact"], "svc.tar");
    // A sub-agent's result keeps its ids (the orchestrator acts on them) and loses its secrets,
    // alike in the plan, the stream and what the orchestrator's model read.
    let result = &task("build")["result"];
    assert_eq!(result["deploy_id"], "550e8400-e29b-41d4-a716-446655440000");
    assert_eq!(result["key"], "[redacted:api-key]", "{result}");
    let read = named(&events, "tool_end")
        .into_iter()
        .find(|e| e["tool"] == "agent_builder")
        .map(|e| e["output"].as_str().unwrap_or_default().to_owned())
        .expect("the builder's result");
    assert!(
        read.contains("550e8400-e29b-41d4-a716-446655440000") && !read.contains("sk-proj-"),
        "{read}"
    );
    for name in [
        "delegation_end",
        "plan_updated",
        "patch_applied",
        "tool_end",
    ] {
        assert!(
            !named(&events, name)
                .iter()
                .any(|e| e.to_string().contains("sk-proj-")),
            "a secret in {name}"
        );
    }
    assert_eq!(task("build.smoke")["parent_id"], "build");
    assert_eq!(task("build.smoke")["status"], "PENDING");
    assert_eq!(task("review")["status"], "COMPLETED");
    let failed: Vec<&Value> = plan["tasks"]
        .as_array()
        .map(|ts| ts.iter().filter(|t| t["owner_agent"] == "broken").collect())
        .unwrap_or_default();
    assert_eq!(failed.len(), 1, "{plan}");
    assert_eq!(failed[0]["status"], "FAILED");
    assert!(
        plan["markdown"]
            .as_str()
            .unwrap_or_default()
            .starts_with("## Plan (version 4)")
    );

    let unknown = send(stack.http().get(stack.url("/api/v1/sessions/nope/plan"))).await;
    assert_eq!(unknown.status, 404, "{}", unknown.text);

    let facts = get_session(&stack, &session).await.facts_json;
    assert!(facts.contains("\"lang\":\"rust\""), "{facts}");

    // Seed 003 §8: tool metrics with the sub-agent label, and the audit line's agent_name and
    // patch_ops.
    let metrics = stack
        .executor_metrics_addr()
        .expect("the executor's metrics");
    let scraped = send(stack.http().get(format!("http://{metrics}/metrics"))).await;
    assert_eq!(scraped.status, 200);
    let text = scraped.text;
    for line in [
        r#"idp_tool_success_total{tool="agent_builder",subagent="builder"} 1"#,
        r#"idp_tool_failure_total{tool="delegate_to_agent",subagent="broken",outcome="tool_failed"} 1"#,
        r#"idp_tool_success_total{tool="update_todolist",subagent=""} 2"#,
        r#"idp_tool_failure_total{tool="update_todolist",subagent="",outcome="tool_failed"} 1"#,
    ] {
        assert!(text.contains(line), "{line} in:\n{text}");
    }
    assert!(text.contains("idp_tool_execution_seconds_bucket"), "{text}");
    let log = std::fs::read_to_string(stack.executor_log()).expect("executor log");
    let audit = log
        .lines()
        .find(|l| l.contains("\"agent_name\":\"builder\"") && l.contains("\"tool call\""))
        .expect("the builder's delegation is audited");
    assert!(audit.contains("\"patch_ops\":\"add_subtask\""), "{audit}");
}

const CURATOR: &str = r#"
final_text: "Both tried."
turns:
  - tool_calls:
      - name: agent_sloppy
        arguments: {task: Add a task, task_id: sloppy-task}
  - tool_calls:
      - name: agent_garbled
        arguments: {task: Remove a task, task_id: garbled-task}
"#;

/// A patch without `base_version`: made from no particular version, so it is a conflict.
const SLOPPY: &str = r#"
turns:
  - text: '{"result": {}, "patch": {"ops": [{"op": "add", "task": {"id": "nb", "title": "No base"}}]}}'
"#;

/// A patch with an op that does not exist.
const GARBLED: &str = r#"
turns:
  - text: '{"result": {}, "patch": {"base_version": 1, "ops": [{"op": "delete", "task_id": "nb"}]}}'
"#;

#[tokio::test]
async fn sub_agent_patches_without_a_base_or_with_a_bad_op_are_refused_and_say_where_the_plan_is() {
    let dir = tempfile::TempDir::new().expect("tmp");
    let stack = stack(
        dir.path(),
        &[
            ("curator", CURATOR),
            ("sloppy", SLOPPY),
            ("garbled", GARBLED),
        ],
    )
    .await;
    agent(&stack, "sloppy", &["file_read"], &[], "sloppy").await;
    agent(&stack, "garbled", &["file_read"], &[], "garbled").await;
    agent(
        &stack,
        "curator",
        &["delegate_to_agent"],
        &["sloppy", "garbled"],
        "curator",
    )
    .await;
    let mut sse = SseReader::open(
        &stack,
        "/api/v1/execute/stream",
        &json!({"mission": "Curate the plan", "agent_id": "curator"}),
    )
    .await;
    let events = sse.rest(RUN_TIMEOUT).await;
    let names = event_names(&events);
    assert!(names.ends_with(&["final_answer", "done"]), "{names:?}");
    assert!(named(&events, "patch_applied").is_empty(), "{names:?}");

    let rejected = named(&events, "patch_rejected");
    let by = |author: &str| {
        rejected
            .iter()
            .find(|e| e["author"] == author)
            .unwrap_or_else(|| panic!("{author}'s patch is refused: {rejected:?}"))
    };
    assert_eq!(by("sloppy")["reason"], "conflict");
    assert_eq!(by("sloppy")["current_version"], 1);
    assert!(
        by("sloppy")["message"]
            .as_str()
            .unwrap_or_default()
            .contains("base_version 1"),
        "{}",
        by("sloppy")
    );
    assert_eq!(by("garbled")["reason"], "invalid");

    // What each sub-agent's caller reads: the status with the plan's version and the ops.
    let ends = named(&events, "delegation_end");
    let status = |agent: &str| {
        ends.iter()
            .find(|e| e["agent_id"] == agent)
            .map(|e| e["result"]["patch_status"].clone())
            .unwrap_or_else(|| panic!("{agent} ended: {ends:?}"))
    };
    let sloppy = status("sloppy");
    assert_eq!(
        (&sloppy["applied"], &sloppy["error"], &sloppy["status"]),
        (&json!(false), &json!("conflict"), &json!(409)),
        "{sloppy}"
    );
    assert_eq!(sloppy["rejected_ops"][0]["task"]["id"], "nb", "{sloppy}");
    let garbled = status("garbled");
    assert_eq!(
        (&garbled["applied"], &garbled["error"], &garbled["status"]),
        (&json!(false), &json!("invalid"), &json!(422)),
        "{garbled}"
    );
    assert_eq!(garbled["current_version"], 1, "{garbled}");
    assert_eq!(
        garbled["rejected_ops"],
        json!([{"op": "delete", "task_id": "nb"}]),
        "{garbled}"
    );

    // Nothing merged; and a malformed session id is a 400 on every session route.
    let session = events[0].1["session_id"].as_str().expect("session");
    let plan = send(
        stack
            .http()
            .get(stack.url(&format!("/api/v1/sessions/{session}/plan"))),
    )
    .await;
    assert_eq!(plan.body["version"], 1, "{}", plan.text);
    for (method, path) in [
        ("GET", "/api/v1/sessions/a.b"),
        ("GET", "/api/v1/sessions/a.b/plan"),
        ("POST", "/api/v1/sessions/a.b/cancel"),
    ] {
        let url = stack.url(path);
        let request = if method == "GET" {
            stack.http().get(url)
        } else {
            stack.http().post(url)
        };
        let r = send(request).await;
        assert_eq!(r.status, 400, "{method} {path}: {}", r.text);
        assert_eq!(r.body["details"][0]["field"], "session_id", "{}", r.text);
    }
}

const WAITER: &str = r#"
final_text: "went on without it"
turns:
  - tool_calls:
      - name: agent_sleeper
        arguments: {task: Take your time, budget: {timeout_s: 0.5}}
"#;

const SLEEPER: &str = r#"
turns:
  - delay_ms: 20000
    text: "too late"
"#;

#[tokio::test]
async fn a_sub_agent_that_hangs_fails_its_task_at_its_budget_and_the_orchestrator_goes_on() {
    let dir = tempfile::TempDir::new().expect("tmp");
    let stack = stack(dir.path(), &[("waiter", WAITER), ("sleeper", SLEEPER)]).await;
    agent(&stack, "sleeper", &["file_read"], &[], "sleeper").await;
    agent(&stack, "waiter", &["file_read"], &["sleeper"], "waiter").await;
    let started = std::time::Instant::now();
    let mut sse = SseReader::open(
        &stack,
        "/api/v1/execute/stream",
        &json!({"mission": "Wait", "agent_id": "waiter"}),
    )
    .await;
    let events = sse.rest(RUN_TIMEOUT).await;
    assert!(started.elapsed() < std::time::Duration::from_secs(15));
    let end = named(&events, "delegation_end")
        .into_iter()
        .next()
        .expect("the delegation ends");
    assert_eq!(end["status"], "failed", "{end}");
    assert_eq!(
        end["result"]["error"]["code"], "TIME_BUDGET_EXCEEDED",
        "{end}"
    );
    let last = &events[events.len() - 2].1;
    assert_eq!(last["text"], "went on without it", "{last}");
    let session = events[0].1["session_id"].as_str().expect("session");
    let plan = get_session(&stack, session).await.plan.expect("plan");
    assert_eq!(plan.tasks.len(), 1);
    assert_eq!(plan.tasks[0].status, "FAILED");
}

const LEAD: &str = r#"
final_text: "lead finished"
turns:
  - tool_calls:
      - name: agent_mid
        arguments: {task: Build it}
"#;

const MID: &str = r#"
final_text: "mid finished"
turns:
  - tool_calls:
      - name: agent_leaf
        arguments: {task: Scaffold it}
"#;

const LEAF: &str = r#"
turns:
  - tool_calls:
      - name: agent_deep
        arguments: {task: Go deeper}
  - tool_calls:
      - name: ask_user
        id: ask_py
        arguments: {question: Which Python version?, key: python_version, default: "3.12"}
  - text: '{"result": {"python": "{{last_message}}"}}'
"#;

#[tokio::test]
async fn a_question_two_levels_down_bubbles_up_survives_sigkill_and_resumes_its_frame() {
    let dir = tempfile::TempDir::new().expect("tmp");
    let mut stack = stack(
        dir.path(),
        &[("lead", LEAD), ("mid", MID), ("leaf", LEAF), ("deep", LEAF)],
    )
    .await;
    agent(&stack, "deep", &["file_read"], &[], "deep").await;
    agent(&stack, "leaf", &["ask_user"], &["deep"], "leaf").await;
    agent(&stack, "mid", &["file_read"], &["leaf"], "mid").await;
    agent(&stack, "lead", &["file_read"], &["mid"], "lead").await;

    let mut sse = SseReader::open(
        &stack,
        "/api/v1/execute/stream",
        &json!({"mission": "Make a service", "agent_id": "lead"}),
    )
    .await;
    let first = sse.rest(RUN_TIMEOUT).await;
    let names = event_names(&first);
    assert!(names.ends_with(&["question", "done"]), "{names:?}");
    assert_eq!(first[first.len() - 1].1["status"], "paused");
    let session = first[0].1["session_id"]
        .as_str()
        .expect("session")
        .to_owned();

    // The hop limit: lead → mid → leaf is allowed, leaf → deep is not: the leaf is not even
    // offered the tool (a model that calls it anyway is told it has no such tool).
    let hop = named(&first, "tool_error")
        .into_iter()
        .find(|e| e["tool"] == "agent_deep")
        .expect("the third level is refused");
    assert_eq!(hop["agent_path"], json!(["mid", "leaf"]));
    let message = hop["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("unknown tool") && message.ends_with("are: ask_user"),
        "{hop}"
    );
    assert!(
        !named(&first, "delegation_start")
            .iter()
            .any(|e| e["agent_id"] == "deep")
    );

    // Exactly one consolidated question, naming the leaf's key, default and path.
    let questions = named(&first, "question");
    assert_eq!(questions.len(), 1, "{questions:?}");
    let question = questions[0];
    assert_eq!(question["agent_path"], json!([]), "asked by the top agent");
    let items = question["items"].as_array().expect("items");
    assert_eq!(items.len(), 1, "{question}");
    assert_eq!(items[0]["key"], "leaf.python_version");
    assert_eq!(items[0]["default"], "3.12");
    assert_eq!(items[0]["agent_path"], json!(["mid", "leaf"]));
    let ends = named(&first, "delegation_end");
    assert_eq!(
        ends.iter()
            .filter(|e| e["status"] == "need_user_input")
            .count(),
        2,
        "leaf and mid both hand the question up: {ends:?}"
    );

    // Nothing but the session on disk survives this.
    stack.kill9_executor().expect("executor killed");
    stack.restart_executor().await.expect("executor restarts");
    let paused = get_session(&stack, &session).await;
    assert_eq!(paused.status(), v1::RunStatus::Paused, "{paused:?}");
    let pending = paused.pending_question.expect("pending");
    assert_eq!(pending.items.len(), 1);

    let answer_path = format!("/api/v1/sessions/{session}/answer");
    let unknown = send(
        stack
            .http()
            .post(stack.url(&answer_path))
            .json(&json!({"answers": {"nope": "x"}})),
    )
    .await;
    assert_eq!(unknown.status, 400, "{}", unknown.text);
    assert!(unknown.text.contains("nope"), "{}", unknown.text);

    let mut sse = SseReader::open(
        &stack,
        &answer_path,
        &json!({"answers": {"leaf.python_version": "3.11"}}),
    )
    .await;
    let second = sse.rest(RUN_TIMEOUT).await;
    let names = event_names(&second);
    assert!(names.ends_with(&["final_answer", "done"]), "{names:?}");
    assert_eq!(second[second.len() - 1].1["status"], "completed");
    assert_eq!(second[second.len() - 2].1["text"], "lead finished");
    let resumed: Vec<&Value> = named(&second, "delegation_start");
    assert!(
        resumed.iter().all(|e| e["resumed"] == true) && resumed.len() == 2,
        "mid and leaf resume their frames: {resumed:?}"
    );
    let leaf_end = named(&second, "delegation_end")
        .into_iter()
        .find(|e| e["agent_id"] == "leaf")
        .expect("leaf ended");
    assert_eq!(leaf_end["status"], "completed", "{leaf_end}");
    assert_eq!(leaf_end["result"]["result"]["python"], "3.11", "{leaf_end}");

    // The leaf's own conversation went on where it stopped: the answer is its ask_user result.
    let done = get_session(&stack, &session).await;
    assert_eq!(done.status(), v1::RunStatus::Completed);
    assert!(done.pending_question.is_none());
    let plan = done.plan.expect("plan");
    assert!(
        plan.tasks.iter().all(|t| t.status == "COMPLETED"),
        "{plan:?}"
    );

    // Answering again is refused: nothing is waiting.
    let again = send(
        stack
            .http()
            .post(stack.url(&answer_path))
            .json(&json!({"answers": {"leaf.python_version": "3.10"}})),
    )
    .await;
    assert_eq!(again.status, 409, "{}", again.text);
}

const ASKING_LEAF: &str = r#"
turns:
  - tool_calls:
      - name: ask_user
        arguments: {question: Which version?, key: version}
  - text: '{"result": {"version": "{{last_message}}"}}'
"#;

#[tokio::test]
async fn cancelling_a_paused_orchestration_fails_the_task_its_sub_agent_was_on() {
    let dir = tempfile::TempDir::new().expect("tmp");
    let stack = stack(dir.path(), &[("lead", LEAD), ("mid", ASKING_LEAF)]).await;
    agent(&stack, "mid", &["ask_user"], &[], "mid").await;
    agent(&stack, "lead", &["file_read"], &["mid"], "lead").await;

    let mut sse = SseReader::open(
        &stack,
        "/api/v1/execute/stream",
        &json!({"mission": "Release it", "agent_id": "lead"}),
    )
    .await;
    let first = sse.rest(RUN_TIMEOUT).await;
    assert_eq!(first[first.len() - 1].1["status"], "paused", "{first:?}");
    let session = first[0].1["session_id"]
        .as_str()
        .expect("session")
        .to_owned();
    let paused = get_session(&stack, &session).await;
    let plan = paused.plan.expect("plan");
    assert_eq!(plan.tasks.len(), 1, "{plan:?}");
    assert_eq!(plan.tasks[0].status, "IN_PROGRESS", "{plan:?}");

    let cancel = send(
        stack
            .http()
            .post(stack.url(&format!("/api/v1/sessions/{session}/cancel"))),
    )
    .await;
    assert_eq!(cancel.status, 200, "{}", cancel.text);
    let ended = get_session(&stack, &session).await;
    assert_eq!(ended.status(), v1::RunStatus::Cancelled, "{ended:?}");
    let plan = ended.plan.expect("plan");
    assert_eq!(
        plan.tasks[0].status, "FAILED",
        "no work left in progress: {plan:?}"
    );
    assert!(
        plan.tasks[0].result_json.contains("CANCELLED"),
        "the task says why: {plan:?}"
    );
}

/// An answer for a sub-agent that was deleted (or taken out of its orchestrator's `subagents`)
/// while its question waited is refused, naming it, and the question keeps waiting: resumed, it
/// would fail and the orchestrator would go on without the user's answer.
#[tokio::test]
async fn an_answer_for_a_sub_agent_that_is_gone_is_refused_and_the_question_waits() {
    let dir = tempfile::TempDir::new().expect("tmp");
    let stack = stack(dir.path(), &[("lead", LEAD), ("mid", ASKING_LEAF)]).await;
    agent(&stack, "mid", &["ask_user"], &[], "mid").await;
    agent(&stack, "lead", &["file_read"], &["mid"], "lead").await;
    let first = run_to_end(&stack, "lead", "Release it").await;
    assert_eq!(first[first.len() - 1].1["status"], "paused", "{first:?}");
    let session = session_of(&first);
    let answer_path = format!("/api/v1/sessions/{session}/answer");
    let answered = || {
        send(
            stack
                .http()
                .post(stack.url(&answer_path))
                .json(&json!({"answers": {"mid.version": "3.11"}})),
        )
    };

    let lead_with = async |subagents: Value| {
        let mut lead = agent_json("lead");
        lead["tool_allowlist"] = json!(["file_read"]);
        lead["model"] = json!("lead");
        lead["subagents"] = subagents;
        let put = send(
            stack
                .http()
                .put(stack.url("/api/v1/agents/lead"))
                .json(&lead),
        )
        .await;
        assert_eq!(put.status, 200, "{}", put.text);
    };
    // A write answers once the gateway's copy has it; the executor's follows within
    // milliseconds. Until it has, the answer would go on: each case waits for what a new run
    // of the executor shows (a run of its own, in another session).
    let executor_shows = async |agent: &str, shown: fn(&crate::helpers::Reply) -> bool| {
        let seen =
            taskforce_tests::eventually(RUN_TIMEOUT, std::time::Duration::from_millis(50), || {
                let request = stack
                    .http()
                    .post(stack.url("/api/v1/execute"))
                    .json(&json!({"mission": "Probe", "agent_id": agent}));
                async move { shown(&send(request).await).then_some(()) }
            })
            .await;
        assert!(
            seen.is_some(),
            "the executor never saw the change of {agent}"
        );
    };

    // Taken out of the orchestrator's sub-agents: a run of `lead` can no longer delegate (its
    // model's call of `agent_mid` is an unknown tool, and it ends).
    lead_with(json!([])).await;
    executor_shows("lead", |r| {
        r.status == 200 && r.body["status"] == "completed"
    })
    .await;
    let refused = answered().await;
    assert_eq!(refused.status, 409, "{}", refused.text);
    assert!(
        refused.text.contains("`mid`") && refused.text.contains("no longer a sub-agent of `lead`"),
        "{}",
        refused.text
    );
    // Deleted: a run of `mid` is a 404.
    lead_with(json!(["mid"])).await;
    let gone = send(stack.http().delete(stack.url("/api/v1/agents/mid"))).await;
    assert_eq!(gone.status, 204, "{}", gone.text);
    executor_shows("mid", |r| r.status == 404).await;
    let refused = answered().await;
    assert_eq!(refused.status, 409, "{}", refused.text);
    assert!(
        refused.text.contains("cannot be loaded"),
        "{}",
        refused.text
    );
    let waiting = get_session(&stack, &session).await;
    assert_eq!(waiting.status(), v1::RunStatus::Paused, "{waiting:?}");

    // Back again: the same answer resumes it (a refused one changes nothing, so it is tried
    // until the executor has the agent again).
    agent(&stack, "mid", &["ask_user"], &[], "mid").await;
    let resumed = taskforce_tests::eventually(
        RUN_TIMEOUT,
        std::time::Duration::from_millis(50),
        || async {
            let r = answered().await;
            (r.status == 200).then_some(r.text)
        },
    )
    .await
    .expect("the answer is taken once mid is back");
    assert!(resumed.contains(r#""status":"completed""#), "{resumed}");
    // The sub-agent's `ask_user` call, started in the first stream, ends in this one with the
    // answer (a client's spinner for it stops).
    assert!(
        resumed.contains(r#""type":"tool_end""#) && resumed.contains(r#""output":"3.11""#),
        "{resumed}"
    );
}

/// The example the README walks through: `configs/examples/orchestration`, served as shipped.
#[tokio::test]
async fn the_shipped_orchestration_example_runs_as_the_readme_shows() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs/examples/orchestration");
    let example = example.canonicalize().expect("the example exists");
    let config = std::fs::read_to_string(example.join("llm_config.yaml"))
        .expect("its llm_config")
        .replace(
            "script: scripts/",
            &format!("script: {}/scripts/", example.display()),
        );
    let stack = StackOptions::full()
        .empty_configs()
        .with_executor()
        .llm_config(config)
        .spawn()
        .await
        .expect("stack starts");
    std::fs::create_dir_all(stack.custom_dir()).expect("custom dir");
    for entry in std::fs::read_dir(example.join("custom")).expect("agents") {
        let path = entry.expect("entry").path();
        let name = path.file_name().expect("name");
        std::fs::copy(&path, stack.custom_dir().join(name)).expect("copied");
    }
    let listed = taskforce_tests::eventually(
        RUN_TIMEOUT,
        std::time::Duration::from_millis(100),
        || async {
            let r = send(stack.http().get(stack.url("/api/v1/agents?source=custom"))).await;
            (r.body["agents"].as_array().map_or(0, Vec::len) == 3).then_some(())
        },
    )
    .await;
    assert!(listed.is_some(), "the example's three agents are picked up");

    let mut sse = SseReader::open(
        &stack,
        "/api/v1/execute/stream",
        &json!({"mission": "Prepare the next release", "agent_id": "release-planner"}),
    )
    .await;
    let first = sse.rest(RUN_TIMEOUT).await;
    let names = event_names(&first);
    assert!(names.ends_with(&["question", "done"]), "{names:?}");
    let question = &first[first.len() - 2].1;
    assert_eq!(
        question["items"][0]["key"], "changelog-writer.version",
        "{question}"
    );
    assert_eq!(question["items"][0]["default"], "1.0.0", "{question}");
    assert!(
        named(&first, "patch_applied")
            .iter()
            .any(|e| e["author"] == "release-checker" && e["version"] == 3),
        "{names:?}"
    );
    let session = first[0].1["session_id"]
        .as_str()
        .expect("session")
        .to_owned();

    let mut sse = SseReader::open(
        &stack,
        &format!("/api/v1/sessions/{session}/answer"),
        &json!({"answer": "1.2.0"}),
    )
    .await;
    let second = sse.rest(RUN_TIMEOUT).await;
    let names = event_names(&second);
    assert!(names.ends_with(&["final_answer", "done"]), "{names:?}");
    let plan = send(
        stack
            .http()
            .get(stack.url(&format!("/api/v1/sessions/{session}/plan"))),
    )
    .await
    .body;
    assert_eq!(plan["version"], 3, "{plan}");
    let markdown = plan["markdown"].as_str().unwrap_or_default();
    for line in [
        "- [ ] tag · Tag the release — orchestrator",
        "- [x] changelog · Write the changelog — changelog-writer",
        "- [x] checks · Check the release candidate — release-checker",
        "  - [ ] checks.docs · Proof-read the docs — release-checker",
    ] {
        assert!(markdown.contains(line), "{line} in\n{markdown}");
    }
    let changelog = plan["tasks"]
        .as_array()
        .and_then(|ts| ts.iter().find(|t| t["id"] == "changelog"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        changelog["result"]["changelog"],
        "## 1.2.0\n- Multi-agent orchestration"
    );
}

#[tokio::test]
async fn unknown_subagents_are_refused_on_save_like_unknown_tools() {
    let dir = tempfile::TempDir::new().expect("tmp");
    let stack = stack(dir.path(), &[]).await;
    let mut body = agent_json("lonely-planner");
    body["tool_allowlist"] = json!(["delegate_to_agent"]);
    body["subagents"] = json!(["invoice-extractor", "nobody-here"]);
    let r = create(&stack, &body).await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert_eq!(r.body["error"], "invalid_subagents", "{}", r.text);
    assert_eq!(r.body["message"], "Unknown agent(s) in subagents");
    assert_eq!(r.body["invalid_subagents"], json!(["nobody-here"]));
    let available = r.body["available_agents"].as_array().expect("available");
    assert!(
        available.contains(&json!("invoice-extractor")),
        "{}",
        r.text
    );
    let missing = send(stack.http().get(stack.url("/api/v1/agents/lonely-planner"))).await;
    assert_eq!(missing.status, 404, "nothing was saved");

    body["subagents"] = json!(["lonely-planner"]);
    let r = create(&stack, &body).await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert!(r.text.contains("subagents"), "{}", r.text);

    body["subagents"] = json!(["invoice-extractor"]);
    let r = create(&stack, &body).await;
    assert_eq!(r.status, 201, "{}", r.text);
    let got = send(stack.http().get(stack.url("/api/v1/agents/lonely-planner"))).await;
    assert_eq!(got.body["subagents"], json!(["invoice-extractor"]));
    let yaml = std::fs::read_to_string(stack.custom_dir().join("lonely-planner.yaml"))
        .expect("the YAML file");
    assert!(yaml.contains("subagents:"), "{yaml}");
}

const PAIR: &str = r#"
final_text: "both answered"
turns:
  - tool_calls:
      - name: agent_asker-one
        arguments: {task: first}
      - name: agent_asker-two
        arguments: {task: second}
"#;

const ASKER: &str = r#"
final_text: '{"result": {"got": "{{last_message}}"}}'
turns:
  - tool_calls:
      - name: ask_user
        arguments: {question: Which colour?, key: colour}
"#;

#[tokio::test]
async fn parallel_questions_become_one_and_a_partial_answer_asks_for_the_rest() {
    let dir = tempfile::TempDir::new().expect("tmp");
    let stack = stack(dir.path(), &[("pair", PAIR), ("asker", ASKER)]).await;
    agent(&stack, "asker-one", &["ask_user"], &[], "asker").await;
    agent(&stack, "asker-two", &["ask_user"], &[], "asker").await;
    agent(
        &stack,
        "pair",
        &["file_read"],
        &["asker-one", "asker-two"],
        "pair",
    )
    .await;
    let mut sse = SseReader::open(
        &stack,
        "/api/v1/execute/stream",
        &json!({"mission": "Ask both", "agent_id": "pair"}),
    )
    .await;
    let first = sse.rest(RUN_TIMEOUT).await;
    let questions = named(&first, "question");
    assert_eq!(questions.len(), 1, "one consolidated question");
    let keys: Vec<&str> = questions[0]["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|i| i["key"].as_str())
        .collect();
    assert_eq!(keys, ["asker-one.colour", "asker-two.colour"]);
    let session = first[0].1["session_id"]
        .as_str()
        .expect("session")
        .to_owned();
    let path = format!("/api/v1/sessions/{session}/answer");

    // Plain text cannot say which of two questions it answers.
    let vague = send(
        stack
            .http()
            .post(stack.url(&path))
            .json(&json!({"answer": "red"})),
    )
    .await;
    assert_eq!(vague.status, 400, "{}", vague.text);

    // One of two: that sub-agent resumes, the other is asked again.
    let mut sse = SseReader::open(&stack, &path, &json!({"answer": "asker-one.colour: red"})).await;
    let second = sse.rest(RUN_TIMEOUT).await;
    let names = event_names(&second);
    assert!(names.ends_with(&["question", "done"]), "{names:?}");
    let again = named(&second, "question")[0];
    let items = again["items"].as_array().expect("items");
    assert_eq!(items.len(), 1, "{again}");
    assert_eq!(items[0]["key"], "asker-two.colour");
    let one = named(&second, "delegation_end")
        .into_iter()
        .find(|e| e["agent_id"] == "asker-one")
        .expect("asker-one finished");
    assert_eq!(one["result"]["result"]["got"], "red", "{one}");

    // `null` and blanks are no answer: a question without a default is asked again, never
    // answered with the text "null".
    for nothing in [json!(null), json!("  ")] {
        let mut sse = SseReader::open(
            &stack,
            &path,
            &json!({"answers": {"asker-two.colour": nothing}}),
        )
        .await;
        let unanswered = sse.rest(RUN_TIMEOUT).await;
        let names = event_names(&unanswered);
        assert!(
            names.ends_with(&["question", "done"]),
            "{nothing}: {names:?}"
        );
        assert!(
            named(&unanswered, "delegation_start").is_empty(),
            "{nothing}: nobody resumes: {names:?}"
        );
        assert_eq!(
            named(&unanswered, "question")[0]["items"][0]["key"],
            "asker-two.colour"
        );
    }

    let mut sse = SseReader::open(
        &stack,
        &path,
        &json!({"answers": {"asker-two.colour": "blue"}}),
    )
    .await;
    let third = sse.rest(RUN_TIMEOUT).await;
    assert_eq!(third[third.len() - 2].1["text"], "both answered");
    let plan = get_session(&stack, &session).await.plan.expect("plan");
    assert_eq!(plan.tasks.len(), 2);
    assert!(
        plan.tasks.iter().all(|t| t.status == "COMPLETED"),
        "{plan:?}"
    );
}

/// Seed 003 §10, case B: the orchestrator plans a task, hands it to a sub-agent with a long
/// brief, and the sub-agent's patch of its task merges.
fn foreman(brief: &str) -> String {
    format!(
        r#"
final_text: "Handed over."
turns:
  - tool_calls:
      - name: update_todolist
        arguments: {{ops: [{{op: add, task: {{id: WS-0, title: Typo, owner_agent: scafold}}}}]}}
  - tool_calls:
      - name: update_todolist
        arguments: {{ops: [{{op: add, task: {{id: WS-1, title: scaffold webservice}}}}, {{op: add, task: {{id: WS-2, title: docs, owner_agent: scaffold}}}}]}}
  - tool_calls:
      - name: agent_scaffold
        arguments: {{task: "{brief}", task_id: WS-1}}
"#
    )
}

const SCAFFOLD: &str = r#"
turns:
  - text: '{"result": {"artifacts": ["svc/"]}, "patch": {"base_version": 2, "ops": [{"op": "update", "task_id": "WS-1", "fields": {"status": "IN_PROGRESS", "notes": "templated"}}, {"op": "add_subtask", "parent_id": "WS-1", "task": {"id": "WS-1.c", "title": "CI"}}, {"op": "update", "task_id": "WS-2", "fields": {"notes": "mine too"}}]}}'
"#;

#[tokio::test]
async fn a_planned_task_handed_to_a_sub_agent_is_its_to_patch_whatever_the_brief_length() {
    let dir = tempfile::TempDir::new().expect("tmp");
    let brief = "Create the FastAPI service with tests. ".repeat(20);
    let foreman = foreman(brief.trim());
    let stack = stack(
        dir.path(),
        &[("foreman", foreman.as_str()), ("scaffold", SCAFFOLD)],
    )
    .await;
    agent(&stack, "scaffold", &["file_read"], &[], "scaffold").await;
    agent(
        &stack,
        "foreman",
        &["update_todolist"],
        &["scaffold"],
        "foreman",
    )
    .await;
    let mut sse = SseReader::open(
        &stack,
        "/api/v1/execute/stream",
        &json!({"mission": "Scaffold a service", "agent_id": "foreman"}),
    )
    .await;
    let events = sse.rest(RUN_TIMEOUT).await;
    let names = event_names(&events);
    assert!(names.ends_with(&["final_answer", "done"]), "{names:?}");
    // Only the typo fails, refused as any bad patch is (`patch_rejected`, `invalid`).
    let refused = named(&events, "patch_rejected");
    assert_eq!(refused.len(), 1, "only the typo fails: {refused:?}");
    assert_eq!(refused[0]["reason"], "invalid", "{refused:?}");
    let typo = refused[0]["message"].as_str().unwrap_or_default();
    assert!(
        typo.contains("owner_agent: `scafold`") && typo.contains("scaffold"),
        "{typo}"
    );
    assert!(named(&events, "tool_error").is_empty(), "{names:?}");
    let session = events[0].1["session_id"].as_str().expect("session");
    let plan = get_session(&stack, session).await.plan.expect("plan");
    let task = |id: &str| {
        plan.tasks
            .iter()
            .find(|t| t.id == id)
            .unwrap_or_else(|| panic!("{id} in {plan:?}"))
    };
    assert_eq!(plan.version, 3, "{plan:?}");
    assert_eq!(task("WS-1").owner_agent, "scaffold");
    assert_eq!(task("WS-1").status, "COMPLETED");
    assert_eq!(task("WS-1").notes, "templated");
    assert_eq!(task("WS-1.c").parent_id, "WS-1");
    assert_eq!(task("WS-2").owner_agent, "scaffold");
    assert_eq!(task("WS-2").notes, "mine too");
    assert!(plan.tasks.iter().all(|t| t.id != "WS-0"), "{plan:?}");
}

const TWINS: &str = r#"
final_text: "twins answered"
turns:
  - tool_calls:
      - name: agent_asker-one
        arguments: {task: first}
      - name: agent_asker-one
        arguments: {task: second}
"#;

#[tokio::test]
async fn one_sub_agent_asked_twice_in_a_round_gets_two_keys_and_two_answers() {
    let dir = tempfile::TempDir::new().expect("tmp");
    let stack = stack(dir.path(), &[("twins", TWINS), ("asker", ASKER)]).await;
    agent(&stack, "asker-one", &["ask_user"], &[], "asker").await;
    agent(&stack, "twins", &["file_read"], &["asker-one"], "twins").await;
    let mut sse = SseReader::open(
        &stack,
        "/api/v1/execute/stream",
        &json!({"mission": "Ask twice", "agent_id": "twins"}),
    )
    .await;
    let first = sse.rest(RUN_TIMEOUT).await;
    let question = named(&first, "question")[0];
    let keys: Vec<&str> = question["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|i| i["key"].as_str())
        .collect();
    assert_eq!(
        keys,
        ["asker-one.colour", "asker-one.colour.2"],
        "{question}"
    );
    let session = first[0].1["session_id"].as_str().expect("session");
    let path = format!("/api/v1/sessions/{session}/answer");
    // A mistyped key in `key: value` lines is refused and changes nothing.
    let typo = send(
        stack
            .http()
            .post(stack.url(&path))
            .json(&json!({"answer": "asker-one.colour: red\nasker-one.colur.2: blue"})),
    )
    .await;
    assert_eq!(typo.status, 400, "{}", typo.text);
    assert!(typo.text.contains("asker-one.colur.2"), "{}", typo.text);
    // Every call that started ended, also the delegations that came back with a question.
    let top = |name: &str| {
        named(&first, name)
            .iter()
            .filter(|e| e["frame_id"].as_str().is_none_or(str::is_empty))
            .count()
    };
    assert_eq!(top("tool_start"), 2, "{:?}", event_names(&first));
    assert_eq!(top("tool_end"), 2, "{:?}", event_names(&first));
    let mut sse = SseReader::open(
        &stack,
        &path,
        &json!({"answer": "asker-one.colour: crimson-7f3a\nasker-one.colour.2: blue"}),
    )
    .await;
    let second = sse.rest(RUN_TIMEOUT).await;
    let names = event_names(&second);
    assert!(names.ends_with(&["final_answer", "done"]), "{names:?}");
    let mut got: Vec<(String, String)> = named(&second, "delegation_end")
        .iter()
        .map(|e| {
            let task = e["task_id"].as_str().unwrap_or_default().to_owned();
            (
                task,
                e["result"]["result"]["got"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        })
        .collect();
    got.sort();
    let plan = get_session(&stack, session).await.plan.expect("plan");
    let title = |id: &str| {
        plan.tasks
            .iter()
            .find(|t| t.id == id)
            .map(|t| t.title.clone())
            .unwrap_or_default()
    };
    let by_title: Vec<(String, String)> = got
        .iter()
        .map(|(task, answer)| (title(task), answer.clone()))
        .collect();
    assert!(
        by_title.contains(&("first".into(), "crimson-7f3a".into()))
            && by_title.contains(&("second".into(), "blue".into())),
        "each delegation got its own answer: {by_title:?}"
    );
    // The resume calls the executor made are audited without the user's answers or tokens.
    let log = std::fs::read_to_string(stack.executor_log()).expect("executor log");
    assert!(!log.contains("crimson-7f3a"), "an answer in the log");
    assert!(
        log.contains("[resume token]"),
        "the resume calls are audited"
    );
}

const SLOW_ASKING_LEAF: &str = r#"
turns:
  - tool_calls:
      - name: ask_user
        arguments: {question: Which port?, key: port}
  - delay_ms: 4000
    text: '{"result": {"port": "{{last_message}}"}}'
"#;

/// Answers the paused `session` and reads the continued run until its sub-agent is resumed.
async fn answer_until_resumed(stack: &Stack, session: &str, port: &str) -> SseReader {
    let mut sse = answer(stack, session, json!({"mid.port": port})).await;
    let opened = sse.until("delegation_start", RUN_TIMEOUT).await;
    let resumed = &opened[opened.len() - 1].1;
    assert_eq!(resumed["resumed"], true, "{opened:?}");
    sse
}

/// The session is back on its question (`code` says why), its sub-agent's task still in
/// progress.
async fn back_on_the_question(stack: &Stack, session: &str, code: &str) {
    let paused = get_session(stack, session).await;
    assert_eq!(paused.status(), v1::RunStatus::Paused, "{paused:?}");
    let pending = paused
        .pending_question
        .as_ref()
        .expect("the question waits");
    assert_eq!(pending.items.len(), 1, "{paused:?}");
    assert_eq!(pending.items[0].key, "mid.port");
    let error = paused.error.as_ref().expect("why");
    assert_eq!(error.code, code, "{error:?}");
    assert!(error.message.contains("answer"), "{error:?}");
    let plan = paused.plan.as_ref().expect("plan");
    assert_eq!(plan.tasks[0].status, "IN_PROGRESS", "{plan:?}");
}

#[tokio::test]
async fn an_answer_a_stop_or_a_crash_interrupts_leaves_the_question_waiting_not_the_work_lost() {
    let dir = tempfile::TempDir::new().expect("tmp");
    let mut stack = stack(dir.path(), &[("lead", LEAD), ("mid", SLOW_ASKING_LEAF)]).await;
    agent(&stack, "mid", &["ask_user"], &[], "mid").await;
    agent(&stack, "lead", &["file_read"], &["mid"], "lead").await;
    let first = run_to_end(&stack, "lead", "Serve it").await;
    assert_eq!(first[first.len() - 1].1["status"], "paused", "{first:?}");
    let session = session_of(&first);

    // A graceful stop while the answered sub-agent works: the stream says so and asks again.
    let mut sse = answer_until_resumed(&stack, &session, "port-8080").await;
    stack.stop_executor().await.expect("executor stops");
    let stopped = sse.rest(RUN_TIMEOUT).await;
    let names = event_names(&stopped);
    assert!(
        names.ends_with(&["warning", "question", "done"]),
        "{names:?}"
    );
    assert_eq!(stopped[stopped.len() - 1].1["status"], "paused");
    assert_eq!(stopped[stopped.len() - 3].1["code"], "EXECUTOR_STOPPING");
    let ends = named(&stopped, "delegation_end");
    assert_eq!(ends.len(), 1, "{stopped:?}");
    assert_eq!(
        ends[0]["status"], "need_user_input",
        "not failed: {stopped:?}"
    );
    stack.restart_executor().await.expect("executor restarts");
    back_on_the_question(&stack, &session, "EXECUTOR_STOPPING").await;
    // The answer that was not applied is not in the conversation either (recheck F3).
    let restored = get_session(&stack, &session).await;
    assert!(
        !format!("{:?}", restored.messages).contains("port-8080"),
        "{:?}",
        restored.messages
    );

    // A crash (kill -9) there: the same question waits after the restart.
    let _sse = answer_until_resumed(&stack, &session, "8081").await;
    stack.kill9_executor().expect("executor killed");
    stack.restart_executor().await.expect("executor restarts");
    back_on_the_question(&stack, &session, "INTERRUPTED").await;

    // Answered again, the sub-agent goes on from its question and the run completes.
    let done = answer(&stack, &session, json!({"mid.port": "9090"}))
        .await
        .rest(RUN_TIMEOUT)
        .await;
    assert_eq!(done[done.len() - 1].1["status"], "completed", "{done:?}");
    let end = named(&done, "delegation_end")[0];
    assert_eq!(end["result"]["result"]["port"], "9090", "{end}");
    let seqs: Vec<u64> = first
        .iter()
        .chain(&stopped)
        .chain(&done)
        .filter_map(|(_, e)| e["seq"].as_u64())
        .collect();
    assert!(
        seqs.windows(2).all(|w| w[0] < w[1]),
        "seq only grows: {seqs:?}"
    );
}

const PAIR_LEAD: &str = r#"
final_text: "lead finished"
turns:
  - tool_calls:
      - name: agent_quick
        arguments: {task: Name it}
      - name: agent_mid
        arguments: {task: Serve it}
"#;

const QUICK_ASKING_LEAF: &str = r#"
turns:
  - tool_calls:
      - name: ask_user
        arguments: {question: Which name?, key: name}
  - text: '{"result": {"name": "{{last_message}}"}, "new_facts": {"named": true}}'
"#;

/// Runs `lead` of [`PAIR_LEAD`] until `quick` and `mid` both asked, then answers both (the
/// answer for `mid` is one no stored text holds by chance); the first run's events, the
/// session and the answer's stream.
async fn pair_answered(stack: &Stack) -> (Vec<(String, Value)>, String, SseReader) {
    let first = run_to_end(stack, "lead", "Name and serve it").await;
    assert_eq!(first[first.len() - 1].1["status"], "paused", "{first:?}");
    let session = session_of(&first);
    let sse = answer(
        stack,
        &session,
        json!({"quick.name": "Ada", "mid.port": "port-8080"}),
    )
    .await;
    (first, session, sse)
}

#[tokio::test]
async fn a_stop_while_answers_resume_two_sub_agents_keeps_the_one_that_finished() {
    let dir = tempfile::TempDir::new().expect("tmp");
    let mut stack = lead_of_two(
        dir.path(),
        [PAIR_LEAD, QUICK_ASKING_LEAF, SLOW_ASKING_LEAF],
        &["ask_user"],
        &["ask_user"],
    )
    .await;
    // Both answered: `quick` finishes at once, `mid` is still working when the executor stops.
    let (first, session, mut sse) = pair_answered(&stack).await;
    let quick = sse.until("delegation_end", RUN_TIMEOUT).await;
    let end = &quick[quick.len() - 1].1;
    assert_eq!(
        (end["agent_id"].as_str(), end["status"].as_str()),
        (Some("quick"), Some("completed")),
        "{quick:?}"
    );
    stack.stop_executor().await.expect("executor stops");
    let stopped = sse.rest(RUN_TIMEOUT).await;
    let names = event_names(&stopped);
    assert!(
        names.ends_with(&["warning", "question", "done"]),
        "{names:?}"
    );
    let warning = &stopped[stopped.len() - 3].1;
    assert!(
        warning["message"]
            .as_str()
            .is_some_and(|m| m.contains("finished before the stop are kept")),
        "{warning}"
    );
    let asked: Vec<&str> = stopped[stopped.len() - 2].1["items"]
        .as_array()
        .map(|items| items.iter().filter_map(|i| i["key"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(asked, ["mid.port"], "{stopped:?}");

    stack.restart_executor().await.expect("executor restarts");
    let paused = get_session(&stack, &session).await;
    assert_eq!(paused.status(), v1::RunStatus::Paused, "{paused:?}");
    let pending = paused
        .pending_question
        .as_ref()
        .expect("the question waits");
    let keys: Vec<&str> = pending.items.iter().map(|i| i.key.as_str()).collect();
    assert_eq!(
        keys,
        ["mid.port"],
        "only the interrupted one is asked again"
    );
    let plan = paused.plan.as_ref().expect("plan");
    let status = |agent: &str| {
        plan.tasks
            .iter()
            .find(|t| t.owner_agent == agent)
            .map(|t| t.status.clone())
            .unwrap_or_default()
    };
    assert_eq!(
        (status("quick").as_str(), status("mid").as_str()),
        ("COMPLETED", "IN_PROGRESS"),
        "{plan:?}"
    );
    let history = format!("{:?}", paused.messages);
    assert!(history.contains("Ada"), "quick's result is kept: {history}");
    assert!(
        !history.contains("port-8080"),
        "mid's answer was not applied: {history}"
    );
    // `quick` is done: an answer for it is refused, not run again.
    let again = send(
        stack
            .http()
            .post(stack.url(&format!("/api/v1/sessions/{session}/answer")))
            .json(&json!({"answers": {"quick.name": "Bob"}})),
    )
    .await;
    assert_eq!(again.status, 400, "{}", again.text);

    let done = answer(&stack, &session, json!({"mid.port": "9090"}))
        .await
        .rest(RUN_TIMEOUT)
        .await;
    assert_eq!(done[done.len() - 1].1["status"], "completed", "{done:?}");
    let ends = named(&done, "delegation_end");
    assert_eq!(ends.len(), 1, "only mid runs again: {done:?}");
    assert_eq!(ends[0]["agent_id"], "mid");
    assert_eq!(ends[0]["result"]["result"]["port"], "9090", "{}", ends[0]);
    let completed = get_session(&stack, &session).await;
    let runs_of_quick = named(&first, "delegation_end")
        .into_iter()
        .chain(named(&stopped, "delegation_end"))
        .chain(named(&quick, "delegation_end"))
        .filter(|e| e["agent_id"] == "quick" && e["status"] == "completed")
        .count();
    assert_eq!(runs_of_quick, 1, "quick ran to its end once");
    assert_eq!(completed.final_answer, "lead finished");
}

#[tokio::test]
async fn a_stop_while_an_answer_resumes_a_nested_sub_agent_puts_the_whole_branch_back() {
    let dir = tempfile::TempDir::new().expect("tmp");
    let scripts = [("lead", LEAD), ("mid", MID), ("leaf", SLOW_ASKING_LEAF)];
    let mut stack = stack(dir.path(), &scripts).await;
    agent(&stack, "leaf", &["ask_user"], &[], "leaf").await;
    agent(&stack, "mid", &["file_read"], &["leaf"], "mid").await;
    agent(&stack, "lead", &["file_read"], &["mid"], "lead").await;
    let first = run_to_end(&stack, "lead", "Serve it").await;
    assert_eq!(first[first.len() - 1].1["status"], "paused", "{first:?}");
    let session = session_of(&first);

    // The answer resumes `mid`, which resumes `leaf`; the stop comes while `leaf` works.
    let mut sse = answer(&stack, &session, json!({"leaf.port": "port-8080"})).await;
    sse.until("delegation_start", RUN_TIMEOUT).await;
    let opened = sse.until("delegation_start", RUN_TIMEOUT).await;
    assert_eq!(opened[opened.len() - 1].1["agent_id"], "leaf", "{opened:?}");
    stack.stop_executor().await.expect("executor stops");
    let stopped = sse.rest(RUN_TIMEOUT).await;
    let warning = named(&stopped, "warning")
        .into_iter()
        .find(|w| w["code"] == "EXECUTOR_STOPPING")
        .expect("the stop is said");
    // Nothing finished: no part of the answer is kept.
    assert!(
        warning["message"]
            .as_str()
            .is_some_and(|m| !m.contains("kept")),
        "{warning}"
    );
    stack.restart_executor().await.expect("executor restarts");
    let paused = get_session(&stack, &session).await;
    assert_eq!(paused.status(), v1::RunStatus::Paused, "{paused:?}");
    let keys: Vec<&str> = paused
        .pending_question
        .as_ref()
        .map(|q| q.items.iter().map(|i| i.key.as_str()).collect())
        .unwrap_or_default();
    assert_eq!(keys, ["leaf.port"], "{paused:?}");
    let history = format!("{:?}", paused.messages);
    assert!(
        !history.contains("port-8080"),
        "an answer not applied: {history}"
    );

    let done = answer(&stack, &session, json!({"leaf.port": "9090"}))
        .await
        .rest(RUN_TIMEOUT)
        .await;
    assert_eq!(done[done.len() - 1].1["status"], "completed", "{done:?}");
    let leaf = named(&done, "delegation_end")
        .into_iter()
        .find(|e| e["agent_id"] == "leaf")
        .expect("leaf ends");
    assert_eq!(leaf["result"]["result"]["port"], "9090", "{leaf}");
}

/// Asks, then (answered) has a helper check the answer, then works on.
const MID_WITH_HELPER: &str = r#"
turns:
  - tool_calls:
      - name: ask_user
        arguments: {question: Which port?, key: port}
  - tool_calls:
      - name: agent_helper
        arguments: {task: Check the port}
  - delay_ms: 4000
    text: '{"result": {"port": "checked"}}'
"#;

const HELPER: &str = r#"
turns:
  - text: '{"result": {"checked": true}}'
"#;

#[tokio::test]
async fn a_stop_undoes_the_tasks_an_interrupted_sub_agent_created() {
    let dir = tempfile::TempDir::new().expect("tmp");
    let scripts = [
        ("lead", PAIR_LEAD),
        ("quick", QUICK_ASKING_LEAF),
        ("mid", MID_WITH_HELPER),
        ("helper", HELPER),
    ];
    let mut stack = stack(dir.path(), &scripts).await;
    agent(&stack, "helper", &["file_read"], &[], "helper").await;
    agent(&stack, "quick", &["ask_user"], &[], "quick").await;
    agent(&stack, "mid", &["ask_user"], &["helper"], "mid").await;
    agent(&stack, "lead", &["file_read"], &["quick", "mid"], "lead").await;
    // Both answered: `quick` finishes, `mid` has its helper done (a new task) and is stopped
    // while it works on.
    let (_, session, mut sse) = pair_answered(&stack).await;
    loop {
        let ended = sse.until("delegation_end", RUN_TIMEOUT).await;
        if ended[ended.len() - 1].1["agent_id"] == "helper" {
            break;
        }
    }
    stack.stop_executor().await.expect("executor stops");
    sse.rest(RUN_TIMEOUT).await;
    stack.restart_executor().await.expect("executor restarts");
    let tasks = |session: &v1::Session| -> Vec<(String, String)> {
        session
            .plan
            .as_ref()
            .map(|p| {
                p.tasks
                    .iter()
                    .map(|t| (t.owner_agent.clone(), t.status.clone()))
                    .collect()
            })
            .unwrap_or_default()
    };
    let paused = get_session(&stack, &session).await;
    assert_eq!(paused.status(), v1::RunStatus::Paused, "{paused:?}");
    let pair = |owner: &str, status: &str| (owner.to_owned(), status.to_owned());
    assert_eq!(
        tasks(&paused),
        [pair("quick", "COMPLETED"), pair("mid", "IN_PROGRESS")],
        "the helper's task is undone with `mid`'s work"
    );

    // Answered again, `mid` has its helper done again: one helper task, not two.
    let done = answer(&stack, &session, json!({"mid.port": "9090"}))
        .await
        .rest(RUN_TIMEOUT)
        .await;
    assert_eq!(done[done.len() - 1].1["status"], "completed", "{done:?}");
    let completed = get_session(&stack, &session).await;
    assert_eq!(
        tasks(&completed),
        [
            pair("quick", "COMPLETED"),
            pair("mid", "COMPLETED"),
            pair("helper", "COMPLETED")
        ]
    );
}

const SLOW_WORKER: &str = r#"
turns:
  - delay_ms: 3000
    text: '{"result": {"worked": true}}'
"#;

#[tokio::test]
async fn a_cancel_while_a_sub_agent_asks_and_another_works_ends_the_run_cancelled() {
    let dir = tempfile::TempDir::new().expect("tmp");
    let stack = lead_of_two(
        dir.path(),
        [PAIR_LEAD, QUICK_ASKING_LEAF, SLOW_WORKER],
        &["ask_user"],
        &["file_read"],
    )
    .await;
    let body = json!({"mission": "Name and serve it", "agent_id": "lead"});
    let mut sse = SseReader::open(&stack, "/api/v1/execute/stream", &body).await;
    // `quick` has asked; `mid` still works when the user cancels.
    let asked = sse.until("delegation_end", RUN_TIMEOUT).await;
    assert_eq!(
        asked[asked.len() - 1].1["status"],
        "need_user_input",
        "{asked:?}"
    );
    let session = session_of(&asked);
    let cancel = send(
        stack
            .http()
            .post(stack.url(&format!("/api/v1/sessions/{session}/cancel"))),
    )
    .await;
    assert_eq!(cancel.body["cancelled"], true, "{}", cancel.text);
    let rest = sse.rest(RUN_TIMEOUT).await;
    assert_eq!(rest[rest.len() - 1].1["status"], "cancelled", "{rest:?}");
    assert!(named(&rest, "question").is_empty(), "{rest:?}");
    let ended = get_session(&stack, &session).await;
    assert_eq!(ended.status(), v1::RunStatus::Cancelled, "{ended:?}");
    assert!(ended.pending_question.is_none(), "{ended:?}");
    // The sub-agent that asked waits on nothing: its task failed with the cancel.
    let plan = ended.plan.expect("plan");
    let quick = plan
        .tasks
        .iter()
        .find(|t| t.owner_agent == "quick")
        .expect("task");
    assert_eq!(quick.status, "FAILED", "{plan:?}");
}

const DOUBLE_BOOKING_LEAD: &str = r#"
final_text: "lead finished"
turns:
  - tool_calls:
      - name: agent_quick
        arguments: {task: Name it, task_id: p1}
      - name: agent_mid
        arguments: {task: Name it too, task_id: p1}
"#;

const SLOW_NAMER: &str = r#"
turns:
  - delay_ms: 300
    text: '{"result": {"named": true}}'
"#;

#[tokio::test]
async fn a_task_a_delegation_works_on_cannot_be_delegated_again_until_it_ends() {
    let dir = tempfile::TempDir::new().expect("tmp");
    let stack = lead_of_two(
        dir.path(),
        [DOUBLE_BOOKING_LEAD, SLOW_NAMER, SLOW_NAMER],
        &["file_read"],
        &["file_read"],
    )
    .await;
    let events = run_to_end(&stack, "lead", "Name it").await;
    assert_eq!(
        events[events.len() - 1].1["status"],
        "completed",
        "{events:?}"
    );
    // One of the two got the task; the other was told why not, and nothing ran for it.
    let started = named(&events, "delegation_start");
    assert_eq!(started.len(), 1, "{events:?}");
    let worker = started[0]["agent_id"].as_str().expect("agent").to_owned();
    let refused: Vec<&Value> = named(&events, "tool_error")
        .into_iter()
        .filter(|e| {
            e["message"]
                .as_str()
                .is_some_and(|m| m.contains(&format!("is being worked on by `{worker}`")))
        })
        .collect();
    assert_eq!(refused.len(), 1, "{events:?}");
    assert_ne!(refused[0]["tool"], format!("agent_{worker}"));
    let plan = get_session(&stack, &session_of(&events)).await.plan;
    let plan = plan.expect("plan");
    let task = plan.tasks.iter().find(|t| t.id == "p1").expect("p1");
    assert_eq!(
        (task.status.as_str(), task.owner_agent.as_str()),
        ("COMPLETED", worker.as_str())
    );
}

const FANNING_LEAD: &str = r#"
final_text: "lead finished"
turns:
  - tool_calls:
      - name: agent_mid
        arguments: {task: Look around}
      - name: agent_mid
        arguments: {task: Look around again}
"#;

const LOOPING: &str = r#"
final_text: "never reached"
turns:
  - tool_calls: [{name: file_read, arguments: {path: a.txt}}]
  - tool_calls: [{name: file_read, arguments: {path: a.txt}}]
  - tool_calls: [{name: file_read, arguments: {path: a.txt}}]
  - tool_calls: [{name: file_read, arguments: {path: a.txt}}]
  - tool_calls: [{name: file_read, arguments: {path: a.txt}}]
"#;

#[tokio::test]
async fn max_steps_bounds_the_whole_run_its_parallel_sub_agents_included() {
    let dir = tempfile::TempDir::new().expect("tmp");
    let stack = StackOptions::full()
        .with_executor()
        .llm_config(llm_config(
            dir.path(),
            &[("lead", FANNING_LEAD), ("mid", LOOPING)],
        ))
        .executor_args(["--max-steps", "4"])
        .spawn()
        .await
        .expect("stack with executor starts");
    agent(&stack, "mid", &["file_read"], &[], "mid").await;
    agent(&stack, "lead", &["file_read"], &["mid"], "lead").await;
    let mut sse = SseReader::open(
        &stack,
        "/api/v1/execute/stream",
        &json!({"mission": "Explore", "agent_id": "lead"}),
    )
    .await;
    let events = sse.rest(RUN_TIMEOUT).await;
    let done = &events[events.len() - 1].1;
    // The looping sub-agents ran out, the lead did not: the run's last call was kept for it,
    // and it decided (its script answers).
    assert_eq!(done["status"], "completed", "{events:?}");
    let answer = named(&events, "final_answer")
        .into_iter()
        .find(|e| e["agent_path"].as_array().is_none_or(Vec::is_empty))
        .expect("the lead's answer");
    assert_eq!(answer["text"], "lead finished", "{answer}");
    // The lead's calls and both sub-agents' together: never more than four.
    assert_eq!(done["usage"]["steps"], 4, "{done}");
    // Both delegations failed: each sub-agent that started ran out (the two in parallel, or
    // the first alone, leaving the second none to start with, which refuses it).
    let top = |e: &&Value| e["agent_path"].as_array().is_none_or(Vec::is_empty);
    let failed = events
        .iter()
        .filter(|(_, e)| top(&e) && e["tool"] == "agent_mid")
        .filter(|(n, e)| n == "tool_error" || (n == "tool_end" && e["is_error"] == true))
        .count();
    assert_eq!(failed, 2, "{events:?}");
    let ends = named(&events, "delegation_end");
    assert!(!ends.is_empty(), "{events:?}");
    for end in ends {
        assert_eq!(end["status"], "failed", "{end}");
        assert_eq!(
            end["result"]["error"]["code"], "STEP_BUDGET_EXCEEDED",
            "{end}"
        );
    }
    assert!(
        named(&events, "error")
            .iter()
            .all(|e| e["agent_path"].as_array().is_some_and(|p| !p.is_empty())),
        "only the sub-agents failed: {events:?}"
    );
}

#[tokio::test]
async fn a_callers_shared_context_does_not_hide_the_plan_or_the_sub_agents_task() {
    use crate::fake_llm::{FakeLlm, openai, openai_stack};
    let llm = FakeLlm::start(vec![
        // The lead delegates with keys of its own, two of them the executor's.
        openai::tool_call(
            "call_1",
            "agent_helper",
            &[r#"{"task": "Help", "shared_context": {"plan": "mine", "your_task_id": "zzz", "custom": "X"}}"#],
        ),
        // The helper answers; then the lead.
        openai::text(&["helped"]),
        openai::text(&["all done"]),
    ])
    .await;
    let (stack, _unused) = openai_stack(&llm).await;
    for (id, subagents) in [("helper", &[][..]), ("lead", &["helper"][..])] {
        let mut body = agent_json(id);
        body["tool_allowlist"] = json!(["file_read"]);
        body["subagents"] = json!(subagents);
        let r = create(&stack, &body).await;
        assert_eq!(r.status, 201, "creating {id}: {}", r.text);
    }
    let events = run_to_end(&stack, "lead", "Get help").await;
    assert_eq!(
        events[events.len() - 1].1["status"],
        "completed",
        "{events:?}"
    );
    // The helper's first request: its task, then the shared context it was given.
    let seen = llm.seen();
    let helper = seen.get(1).expect("the helper's request");
    let task = helper.body["messages"]
        .as_array()
        .and_then(|m| m.iter().rev().find(|m| m["role"] == "user"))
        .and_then(|m| m["content"].as_str())
        .expect("the helper's task message")
        .to_owned();
    let shared: Value = task
        .split_once("shared_context: ")
        .and_then(|(_, json)| serde_json::from_str(json).ok())
        .unwrap_or_else(|| panic!("a shared_context line: {task}"));
    assert_eq!(
        shared["custom"], "X",
        "the caller's own keys pass: {shared}"
    );
    assert!(shared["plan"]["version"].is_u64(), "{shared}");
    let task_id = shared["your_task_id"].as_str().expect("a task id");
    assert_ne!(task_id, "zzz", "{shared}");
    assert!(
        shared["plan"]["tasks"]
            .as_array()
            .is_some_and(|t| t.iter().any(|t| t["id"] == task_id)),
        "{shared}"
    );
}
