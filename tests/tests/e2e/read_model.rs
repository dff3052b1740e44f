//! The gateway answers agent reads from its copy of the registry (kept current by the change
//! stream): a client reads its own writes at once, changes made elsewhere (gRPC, files,
//! status reports) show up, and a gateway that lost the stream answers from the registry
//! instead of serving what it had.

use std::collections::BTreeMap;

use reqwest::StatusCode;
use serde_json::Value;
use taskforce_proto::v1::{self, AgentSource};
use taskforce_tests::{ReadModelEvent, Stack, spawn_stack};

use crate::helpers::{
    EDIT_VISIBLE_WITHIN, agent_json, create, grpc_list_all, hand_written_yaml, send, spec, until,
};

/// How many times the gateway's copy has become complete.
fn syncs(stack: &Stack) -> usize {
    stack
        .read_model_events()
        .iter()
        .filter(|e| matches!(e, ReadModelEvent::Synced { .. }))
        .count()
}

/// Waits until the gateway's copy has become complete `n` times.
async fn until_synced(stack: &Stack, n: usize) {
    until(
        EDIT_VISIBLE_WITHIN * 4,
        "the gateway's copy in sync",
        || async { syncs(stack) },
        |&c| c >= n,
    )
    .await;
}

async fn get(stack: &Stack, id: &str) -> crate::helpers::Reply {
    send(stack.http().get(stack.url(&format!("/api/v1/agents/{id}")))).await
}

fn etag(reply: &crate::helpers::Reply) -> String {
    reply
        .headers
        .get("etag")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test]
async fn every_write_through_the_gateway_is_read_back_at_once() {
    let stack = spawn_stack().await.expect("stack starts");
    until_synced(&stack, 1).await;
    for i in 0..25 {
        let id = format!("copy-{i:02}");
        let created = create(&stack, &agent_json(&id)).await;
        assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
        let read = get(&stack, &id).await;
        assert_eq!(
            read.status,
            StatusCode::OK,
            "create {i} then get: {}",
            read.text
        );
        assert_eq!(read.body, created.body, "create {i}");
        assert_eq!(etag(&read), etag(&created));

        let mut body = agent_json(&id);
        body["description"] = Value::from(format!("revision {i}"));
        let put = send(
            stack
                .http()
                .put(stack.url(&format!("/api/v1/agents/{id}")))
                .json(&body),
        )
        .await;
        assert_eq!(put.status, StatusCode::OK, "{}", put.text);
        let read = get(&stack, &id).await;
        assert_eq!(
            read.body["description"],
            format!("revision {i}"),
            "update {i} then get"
        );
        assert_eq!(etag(&read), etag(&put));

        if i % 2 == 0 {
            let del = send(
                stack
                    .http()
                    .delete(stack.url(&format!("/api/v1/agents/{id}"))),
            )
            .await;
            assert_eq!(del.status, StatusCode::NO_CONTENT, "{}", del.text);
            let read = get(&stack, &id).await;
            assert_eq!(
                read.status,
                StatusCode::NOT_FOUND,
                "delete {i} then get: {}",
                read.text
            );
            assert_eq!(read.body["error"], "not_found");
        }
    }
    // The copy lists what the registry lists, each entry as its own GET answers it.
    let listed = send(stack.http().get(stack.url("/api/v1/agents"))).await;
    let listed: BTreeMap<String, Value> = listed.body["agents"]
        .as_array()
        .expect("agents")
        .iter()
        .map(|a| {
            (
                a["agent_id"].as_str().unwrap_or_default().to_owned(),
                a.clone(),
            )
        })
        .collect();
    let registry: Vec<String> = grpc_list_all(&stack, AgentSource::Unspecified)
        .await
        .into_iter()
        .map(|a| a.agent_id)
        .collect();
    assert_eq!(
        listed.keys().cloned().collect::<Vec<_>>().len(),
        registry.len()
    );
    for id in &registry {
        let one = get(&stack, id).await;
        assert_eq!(listed.get(id), Some(&one.body), "{id}");
    }
    assert_eq!(
        syncs(&stack),
        1,
        "no write fell back to a resync\n{}",
        stack.logs()
    );
}

#[tokio::test]
async fn changes_made_elsewhere_reach_the_gateway() {
    let stack = spawn_stack().await.expect("stack starts");
    until_synced(&stack, 1).await;
    let mut registry = stack.registry();
    // Over gRPC, past the gateway.
    registry
        .create_agent(v1::CreateAgentRequest {
            spec: Some(spec("over-grpc")),
        })
        .await
        .expect("CreateAgent");
    until(
        EDIT_VISIBLE_WITHIN,
        "a gRPC create",
        || get(&stack, "over-grpc"),
        |r| r.status == StatusCode::OK,
    )
    .await;
    // By hand, in the config directory.
    std::fs::write(
        stack.custom_dir().join("by-hand.yaml"),
        hand_written_yaml("by-hand", "Typed."),
    )
    .expect("write by hand");
    until(
        EDIT_VISIBLE_WITHIN,
        "a hand-written file",
        || get(&stack, "by-hand"),
        |r| r.body["description"] == "Typed.",
    )
    .await;
    let idle_tag = etag(&get(&stack, "by-hand").await);
    // What an executor reports.
    let mut report = async |status: v1::AgentStatus, task: &str, lease_seconds| {
        registry
            .report_agent_status(v1::ReportAgentStatusRequest {
                agent_id: "by-hand".into(),
                status: status.into(),
                last_task: task.into(),
                lease_seconds,
                ..Default::default()
            })
            .await
            .expect("ReportAgentStatus");
    };
    report(v1::AgentStatus::Busy, "tidy the inbox", 60).await;
    let busy = until(
        EDIT_VISIBLE_WITHIN,
        "BUSY",
        || get(&stack, "by-hand"),
        |r| r.body["status"] == "busy",
    )
    .await;
    assert_eq!(busy.body["last_task"], "tidy the inbox");
    // The body changed, so its tag did: a client asking with the earlier one gets the new
    // status, not a 304; the new tag is a 304.
    let busy_tag = etag(&busy);
    assert_ne!(busy_tag, idle_tag);
    assert!(
        busy_tag.starts_with(&idle_tag[..idle_tag.len() - 1]),
        "{busy_tag} {idle_tag}"
    );
    let conditional = |tag: String| {
        send(
            stack
                .http()
                .get(stack.url("/api/v1/agents/by-hand"))
                .header("If-None-Match", tag),
        )
    };
    let fresh = conditional(idle_tag.clone()).await;
    assert_eq!(fresh.status, StatusCode::OK, "{}", fresh.text);
    assert_eq!(fresh.body["status"], "busy");
    assert_eq!(
        conditional(busy_tag.clone()).await.status,
        StatusCode::NOT_MODIFIED
    );
    // A write's If-Match compares the version: the GET's tag of the busy agent will do.
    let mut replaced = agent_json("by-hand");
    replaced["description"] = "Typed again.".into();
    let put = send(
        stack
            .http()
            .put(stack.url("/api/v1/agents/by-hand"))
            .header("If-Match", busy_tag)
            .json(&replaced),
    )
    .await;
    assert_eq!(put.status, StatusCode::OK, "{}", put.text);
    report(v1::AgentStatus::Idle, "", 0).await;
    until(
        EDIT_VISIBLE_WITHIN,
        "IDLE",
        || get(&stack, "by-hand"),
        |r| r.body["status"] == "idle",
    )
    .await;
    std::fs::remove_file(stack.custom_dir().join("by-hand.yaml")).expect("remove by hand");
    until(
        EDIT_VISIBLE_WITHIN,
        "a removed file",
        || get(&stack, "by-hand"),
        |r| r.status == StatusCode::NOT_FOUND,
    )
    .await;
}

#[tokio::test]
async fn a_gateway_that_lost_the_stream_answers_from_the_registry_not_from_its_copy() {
    let mut stack = spawn_stack().await.expect("stack starts");
    until_synced(&stack, 1).await;
    let made = create(&stack, &agent_json("kept")).await;
    assert_eq!(made.status, StatusCode::CREATED, "{}", made.text);

    let gateway = stack.gateway_pid();
    stack.stop().await.expect("registry stops");
    // The copy still holds `kept`, but nothing keeps it current: the registry's absence shows
    // (as soon as the gateway has read the end of the stream).
    until(
        EDIT_VISIBLE_WITHIN,
        "503 without a registry",
        || get(&stack, "kept"),
        |r| r.status == StatusCode::SERVICE_UNAVAILABLE,
    )
    .await;
    let listed = send(stack.http().get(stack.url("/api/v1/agents"))).await;
    assert_eq!(
        listed.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        listed.text
    );

    // Edited while the registry is down; the copy must not keep the old description.
    std::fs::write(
        stack.custom_dir().join("kept.yaml"),
        hand_written_yaml("kept", "Edited offline."),
    )
    .expect("edit by hand");
    stack.restart().await.expect("registry restarts");
    let back = get(&stack, "kept").await;
    assert_eq!(back.body["description"], "Edited offline.", "{}", back.text);
    // A second snapshot (unless the registry came back on another port and the gateway was
    // started again to follow it).
    until_synced(&stack, if stack.gateway_pid() == gateway { 2 } else { 1 }).await;
    let back = get(&stack, "kept").await;
    assert_eq!(back.body["description"], "Edited offline.", "{}", back.text);
}

#[tokio::test]
async fn a_watcher_that_excludes_status_gets_definition_changes_only() {
    let stack = spawn_stack().await.expect("stack starts");
    let mut registry = stack.registry();
    registry
        .create_agent(v1::CreateAgentRequest {
            spec: Some(spec("watched")),
        })
        .await
        .expect("CreateAgent");
    let watch = |exclude_status| {
        let mut client = stack.registry();
        async move {
            client
                .watch_agents(v1::WatchAgentsRequest {
                    snapshot: false,
                    exclude_status,
                })
                .await
                .expect("WatchAgents")
                .into_inner()
        }
    };
    let mut all = watch(false).await;
    let mut definitions = watch(true).await;
    for status in [v1::AgentStatus::Busy, v1::AgentStatus::Idle] {
        registry
            .report_agent_status(v1::ReportAgentStatusRequest {
                agent_id: "watched".into(),
                status: status.into(),
                last_task: "a task".into(),
                lease_seconds: 60,
                ..Default::default()
            })
            .await
            .expect("ReportAgentStatus");
    }
    let bad = registry
        .report_agent_status(v1::ReportAgentStatusRequest {
            agent_id: "watched".into(),
            status: v1::AgentStatus::Busy.into(),
            reporter: "Executor One".into(),
            ..Default::default()
        })
        .await
        .expect_err("a reporter that is no instance name");
    assert_eq!(bad.code(), tonic::Code::InvalidArgument, "{bad:?}");
    assert!(bad.message().contains("reporter"), "{bad:?}");
    // A lease of years would hold the agent BUSY for good once its reporter was gone.
    let bad = registry
        .report_agent_status(v1::ReportAgentStatusRequest {
            agent_id: "watched".into(),
            status: v1::AgentStatus::Busy.into(),
            lease_seconds: u32::MAX,
            ..Default::default()
        })
        .await
        .expect_err("a lease of years");
    assert_eq!(bad.code(), tonic::Code::InvalidArgument, "{bad:?}");
    assert!(bad.message().contains("lease_seconds"), "{bad:?}");
    // Unnamed executors share one hold: none of them may end it for all.
    for reporter in ["", "Executor One"] {
        let bad = registry
            .release_holds(v1::ReleaseHoldsRequest {
                reporter: reporter.into(),
            })
            .await
            .expect_err("a release by no instance name");
        assert_eq!(bad.code(), tonic::Code::InvalidArgument, "{bad:?}");
        assert!(bad.message().contains("reporter"), "{bad:?}");
    }
    registry
        .delete_agent(v1::DeleteAgentRequest {
            agent_id: "watched".into(),
            ..Default::default()
        })
        .await
        .expect("DeleteAgent");
    let next = async |stream: &mut tonic::Streaming<v1::AgentChange>| {
        tokio::time::timeout(EDIT_VISIBLE_WITHIN, stream.message())
            .await
            .expect("a change in time")
            .expect("the stream goes on")
            .expect("a change")
            .kind()
    };
    use v1::agent_change::Kind;
    for want in [Kind::Status, Kind::Status, Kind::Deleted] {
        assert_eq!(next(&mut all).await, want);
    }
    assert_eq!(next(&mut definitions).await, Kind::Deleted);
}

/// Sends `signal` to process `pid` (`kill -STOP`, `kill -CONT`).
fn signal(pid: u32, signal: &str) {
    let sent = std::process::Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(sent.success(), "kill {signal} {pid}");
}

/// Continues a stopped process when dropped, whatever the test did.
struct Continue(u32);

impl Drop for Continue {
    fn drop(&mut self) {
        signal(self.0, "-CONT");
    }
}

/// A registry that stops answering (a stopped process: the connection stays open) while a
/// write is on its way: the gateway's HTTP/2 keep-alive gives up on it, and the write's 503
/// says it may have been applied, so the client reads before retrying.
#[tokio::test]
async fn a_write_on_its_way_to_a_registry_that_hangs_may_have_been_applied() {
    // A request timeout past the keep-alive's 10 s, so that the keep-alive is what gives up.
    let stack = taskforce_tests::StackOptions::full()
        .gateway_args(["--request-timeout-secs", "40"])
        .spawn()
        .await
        .expect("stack starts");
    let created = create(&stack, &agent_json("hung-write")).await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    let pid = stack.registry_pid().expect("the registry runs");
    signal(pid, "-STOP");
    let _resume = Continue(pid);
    let mut body = agent_json("hung-write");
    body["description"] = "Changed while the registry hung.".into();
    let put = send(
        stack
            .http()
            .put(stack.url("/api/v1/agents/hung-write"))
            .json(&body),
    )
    .await;
    assert_eq!(put.status, StatusCode::SERVICE_UNAVAILABLE, "{}", put.text);
    assert!(put.text.contains("may have applied"), "{}", put.text);
}
