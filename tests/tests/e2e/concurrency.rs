//! Optimistic concurrency: among writers holding the same version, exactly one wins.

use futures::future::join_all;
use serde_json::json;
use taskforce_proto::{error::ErrorKind, v1};
use taskforce_tests::{spawn_registry, spawn_stack};
use tonic::Code;

use crate::helpers::{agent_json, api_error, create, custom_spec, get, read_yaml, send, spec};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_updates_with_the_same_expected_version_have_exactly_one_winner() {
    let stack = spawn_registry().await.expect("stack starts");
    let created = stack
        .registry()
        .create_agent(v1::CreateAgentRequest {
            spec: Some(spec("hot-agent")),
        })
        .await
        .expect("create")
        .into_inner();
    let results = join_all((0..32).map(|i| {
        let mut client = stack.registry();
        let version = created.version.clone();
        async move {
            let mut s = spec("hot-agent");
            s.description = format!("writer {i}");
            let r = client
                .update_agent(v1::UpdateAgentRequest {
                    agent_id: "hot-agent".into(),
                    spec: Some(s),
                    expected_version: version,
                })
                .await;
            (i, r)
        }
    }))
    .await;

    let mut winners = Vec::new();
    for (i, r) in results {
        match r {
            Ok(agent) => winners.push((i, agent.into_inner())),
            Err(e) => {
                assert_eq!(e.code(), Code::Aborted, "writer {i}: {e:?}");
                assert_eq!(api_error(&e).kind, ErrorKind::VersionConflict, "writer {i}");
            }
        }
    }
    assert_eq!(
        winners.len(),
        1,
        "winners: {:?}",
        winners.iter().map(|w| w.0).collect::<Vec<_>>()
    );
    let (winner, won) = &winners[0];
    let now = stack
        .registry()
        .get_agent(v1::GetAgentRequest {
            agent_id: "hot-agent".into(),
        })
        .await
        .expect("get")
        .into_inner();
    assert_eq!(custom_spec(&now).description, format!("writer {winner}"));
    assert_eq!(now.version, won.version);
    let yaml = read_yaml(&stack.custom_dir().join("hot-agent.yaml"));
    assert_eq!(
        yaml["description"].as_str(),
        Some(format!("writer {winner}").as_str()),
        "the file holds the winner"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_puts_with_the_same_if_match_have_exactly_one_winner() {
    let stack = spawn_stack().await.expect("stack starts");
    let version = create(&stack, &agent_json("hot-rest"))
        .await
        .etag()
        .expect("ETag");
    let url = stack.url("/api/v1/agents/hot-rest");
    let replies = join_all((0..16).map(|i| {
        let mut body = agent_json("hot-rest");
        body["description"] = json!(format!("writer {i}"));
        let req = stack
            .http()
            .put(&url)
            .header("If-Match", format!("\"{version}\""))
            .json(&body);
        async move { (i, send(req).await) }
    }))
    .await;
    let mut winners = Vec::new();
    for (i, r) in replies {
        if r.status == 200 {
            winners.push(i);
        } else {
            r.assert_error(409, "version_conflict");
        }
    }
    assert_eq!(winners.len(), 1, "winners: {winners:?}");
    assert_eq!(
        get(&stack, "hot-rest").await.body["description"],
        format!("writer {}", winners[0])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_creates_of_one_id_have_exactly_one_winner() {
    let stack = spawn_registry().await.expect("stack starts");
    let results = join_all((0..16).map(|i| {
        let mut client = stack.registry();
        async move {
            let mut s = spec("first-come");
            s.description = format!("creator {i}");
            (
                i,
                client
                    .create_agent(v1::CreateAgentRequest { spec: Some(s) })
                    .await,
            )
        }
    }))
    .await;
    let mut winners = Vec::new();
    for (i, r) in results {
        match r {
            Ok(_) => winners.push(i),
            Err(e) => assert_eq!(e.code(), Code::AlreadyExists, "creator {i}: {e:?}"),
        }
    }
    assert_eq!(winners.len(), 1, "winners: {winners:?}");
    let yaml = read_yaml(&stack.custom_dir().join("first-come.yaml"));
    assert_eq!(
        yaml["description"].as_str(),
        Some(format!("creator {}", winners[0]).as_str())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_deletes_have_exactly_one_winner() {
    let stack = spawn_registry().await.expect("stack starts");
    let created = stack
        .registry()
        .create_agent(v1::CreateAgentRequest {
            spec: Some(spec("doomed")),
        })
        .await
        .expect("create")
        .into_inner();
    let results = join_all((0..8).map(|i| {
        let mut client = stack.registry();
        let version = created.version.clone();
        async move {
            let r = client
                .delete_agent(v1::DeleteAgentRequest {
                    agent_id: "doomed".into(),
                    expected_version: version,
                })
                .await;
            (i, r)
        }
    }))
    .await;
    let ok = results.iter().filter(|(_, r)| r.is_ok()).count();
    assert_eq!(ok, 1, "{results:?}");
    for (i, r) in &results {
        if let Err(e) = r {
            assert_eq!(e.code(), Code::NotFound, "deleter {i}: {e:?}");
        }
    }
    assert!(!stack.custom_dir().join("doomed.yaml").exists());
}
