use serde_json::{Value, json};

use super::*;

fn custom(id: &str, prompt: &str) -> v1::Agent {
    v1::Agent {
        agent_id: id.into(),
        source: AgentSource::Custom.into(),
        version: format!("v-{id}-{}", prompt.len()),
        kind: Some(v1::agent::Kind::Custom(v1::CustomAgent {
            spec: Some(v1::AgentSpec {
                agent_id: id.into(),
                name: format!("Agent {id}"),
                description: "d".into(),
                // Text that looks like the runtime fields must stay text.
                system_prompt: prompt.into(),
                tool_allowlist: vec!["file_read".into()],
                mcp_servers: vec![v1::McpServer {
                    r#type: "stdio".into(),
                    command: "uvx".into(),
                    env: [("status".to_owned(), "idle".to_owned())]
                        .into_iter()
                        .collect(),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            created_at: "2026-11-22T09:00:00Z".into(),
            updated_at: "2026-11-22T09:30:00Z".into(),
            workspace_id: "w".into(),
            ..Default::default()
        })),
        ..Default::default()
    }
}

fn profile(id: &str) -> v1::Agent {
    v1::Agent {
        agent_id: id.into(),
        source: AgentSource::Profile.into(),
        version: format!("p-{id}"),
        kind: Some(v1::agent::Kind::Profile(v1::ProfileAgent {
            profile: id.into(),
            specialist: "s".into(),
            ..Default::default()
        })),
        ..Default::default()
    }
}

fn upsert(agent: v1::Agent) -> v1::AgentChange {
    v1::AgentChange {
        kind: ChangeKind::Upserted.into(),
        agent_id: agent.agent_id.clone(),
        source: agent.source,
        version: agent.version.clone(),
        agent: Some(agent),
        revision: 1,
    }
}

fn json_of(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).expect("valid JSON")
}

/// What the registry path would answer for `agent`.
fn expected(agent: v1::Agent) -> Value {
    serde_json::to_value(AgentJson::from_proto(agent).expect("has a kind")).expect("serialises")
}

fn agents(list: impl IntoIterator<Item = v1::Agent>) -> Agents {
    let mut agents = Agents::default();
    for a in list {
        agents.apply(upsert(a));
    }
    agents
}

#[test]
fn an_agent_is_served_exactly_as_the_registry_path_renders_it() {
    let prompt = r#"say ","status":"idle","last_task":null} and "quotes""#;
    let mut agent = custom("coder", prompt);
    agent.last_task = "fix \"the\" bug\n".into();
    agent.busy_until_ms = now_ms() + 60_000;
    agent.status = v1::AgentStatus::Busy.into();
    let model = agents([agent.clone(), profile("coder-profile")]);
    let mut out = Vec::new();
    model
        .get("coder")
        .expect("present")
        .write(now_ms(), &mut out);
    assert_eq!(json_of(&out), expected(agent));
    let mut out = Vec::new();
    model
        .get("coder-profile")
        .expect("present")
        .write(now_ms(), &mut out);
    assert_eq!(json_of(&out), expected(profile("coder-profile")));
}

#[test]
fn busy_ends_with_its_lease_and_status_changes_keep_the_definition() {
    let mut model = agents([custom("worker", "p")]);
    let status = |busy_until_ms, task: &str| v1::AgentChange {
        kind: ChangeKind::Status.into(),
        agent_id: "worker".into(),
        source: AgentSource::Custom.into(),
        agent: Some(v1::Agent {
            agent_id: "worker".into(),
            busy_until_ms,
            last_task: task.into(),
            ..Default::default()
        }),
        ..Default::default()
    };
    let now = now_ms();
    model.apply(status(now + 1000, "sort the inbox"));
    let render = |model: &Agents, at| {
        let mut out = Vec::new();
        model.get("worker").expect("present").write(at, &mut out);
        json_of(&out)
    };
    let busy = render(&model, now);
    assert_eq!(busy["status"], "busy");
    assert_eq!(busy["last_task"], "sort the inbox");
    assert_eq!(busy["system_prompt"], "p");
    // An unrenewed lease reads as idle once it has run out.
    assert_eq!(render(&model, now + 1001)["status"], "idle");
    model.apply(status(0, "sort the inbox"));
    assert_eq!(render(&model, now)["status"], "idle");
    // A status change for an agent the copy does not have adds nothing.
    let mut unknown = status(now + 1000, "x");
    unknown.agent_id = "ghost".into();
    model.apply(unknown);
    assert!(model.get("ghost").is_none());
}

#[test]
fn deletes_remove_and_custom_agents_shadow_profiles_of_the_same_id() {
    let mut model = agents([profile("shared"), custom("shared", "mine")]);
    let mut out = Vec::new();
    model.get("shared").expect("present").write(0, &mut out);
    assert_eq!(json_of(&out)["source"], "custom");
    model.apply(v1::AgentChange {
        kind: ChangeKind::Deleted.into(),
        agent_id: "shared".into(),
        source: AgentSource::Custom.into(),
        ..Default::default()
    });
    let mut out = Vec::new();
    model.get("shared").expect("the profile").write(0, &mut out);
    assert_eq!(json_of(&out)["source"], "profile");
}

#[test]
fn pages_follow_the_registry_order_and_tokens() {
    let model = agents(
        ["b", "a", "c"]
            .map(|id| custom(&format!("custom-{id}"), "p"))
            .into_iter()
            .chain(["z", "y"].map(|id| profile(&format!("profile-{id}")))),
    );
    let ids = |body: &Value| -> Vec<String> {
        body["agents"]
            .as_array()
            .expect("agents")
            .iter()
            .map(|a| a["agent_id"].as_str().expect("id").to_owned())
            .collect()
    };
    let all = json_of(
        &model
            .list(AgentSource::Unspecified, None, "")
            .expect("list"),
    );
    assert_eq!(
        ids(&all),
        ["profile-y", "profile-z", "custom-a", "custom-b", "custom-c"]
    );
    assert!(all.get("next_page_token").is_none());
    // Pages of two walk the same order, across the two sources.
    let (mut token, mut seen) = (String::new(), Vec::new());
    loop {
        let page = json_of(
            &model
                .list(AgentSource::Unspecified, Some(2), &token)
                .expect("page"),
        );
        seen.extend(ids(&page));
        match page["next_page_token"].as_str() {
            Some(t) => token = t.to_owned(),
            None => break,
        }
    }
    assert_eq!(seen, ids(&all));
    // A page that ends exactly at the last agent has no token.
    let exact = json_of(&model.list(AgentSource::Custom, Some(3), "").expect("page"));
    assert_eq!(ids(&exact), ["custom-a", "custom-b", "custom-c"]);
    assert!(exact.get("next_page_token").is_none());
    assert_eq!(
        ids(&json_of(
            &model.list(AgentSource::Profile, None, "").expect("list")
        )),
        ["profile-y", "profile-z"]
    );
    let empty = json_of(
        &Agents::default()
            .list(AgentSource::Unspecified, None, "")
            .expect("list"),
    );
    assert_eq!(empty, json!({"agents": []}));
    let bad = model.list(AgentSource::Unspecified, Some(2), "nonsense");
    assert!(bad.is_err_and(|e| e.message.contains("page_token")));
}

#[tokio::test]
async fn a_copy_out_of_sync_sends_readers_to_the_registry_and_writers_do_not_wait() {
    let model = ReadModel::new();
    assert!(matches!(model.get("coder"), Lookup::NotSynced));
    assert!(matches!(
        model.list(AgentSource::Unspecified, None, ""),
        Lookup::NotSynced
    ));
    // Not in sync: returns at once, not after WRITE_VISIBLE_WITHIN.
    tokio::time::timeout(Duration::from_millis(200), model.wait_for(42))
        .await
        .expect("no wait while out of sync");
}

#[tokio::test]
async fn a_writer_waits_for_its_revision_and_a_stalled_stream_drops_the_copy() {
    let model = ReadModel::new();
    if let Ok(mut slot) = model.inner.agents.write() {
        *slot = Some(agents([custom("coder", "p")]));
    }
    model.inner.progress.send_replace(Progress {
        synced: true,
        revision: 10,
    });
    assert!(matches!(model.get("coder"), Lookup::Found(Some(_))));
    assert!(matches!(model.get("nobody"), Lookup::Found(None)));
    // Already seen.
    tokio::time::timeout(Duration::from_millis(200), model.wait_for(10))
        .await
        .expect("seen revisions do not wait");
    // Arrives while waiting.
    let waiter = tokio::spawn({
        let model = model.clone();
        async move { model.wait_for(12).await }
    });
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(!waiter.is_finished());
    model.inner.progress.send_modify(|p| p.revision = 12);
    tokio::time::timeout(Duration::from_millis(500), waiter)
        .await
        .expect("woken by its revision")
        .expect("joined");
    assert!(model.is_synced());
    // Never arrives: after the bound the copy is dropped, so reads go to the registry.
    tokio::time::pause();
    model.wait_for(13).await;
    assert!(!model.is_synced());
    assert!(matches!(model.get("coder"), Lookup::NotSynced));
}

#[test]
fn a_list_sent_in_pieces_is_the_list_sent_whole() {
    let model = agents(
        (0..40)
            .map(|i| custom(&format!("custom-{i:02}"), &"p".repeat(i * 50)))
            .chain(["z", "y"].map(|id| profile(&format!("profile-{id}")))),
    );
    for (page_size, token) in [(None, ""), (Some(7), ""), (Some(50), "")] {
        let whole = model
            .list(AgentSource::Unspecified, page_size, token)
            .expect("list");
        for size in [1, 100, 1000, usize::MAX] {
            let pieces: Vec<_> = model
                .listing(AgentSource::Unspecified, page_size, token)
                .expect("listing")
                .chunks(size)
                .collect();
            assert_eq!(
                pieces.concat(),
                whole,
                "page {page_size:?}, pieces of {size}"
            );
            // Each piece is about `size` (at least one agent), none empty.
            assert!(pieces.iter().all(|p| !p.is_empty()));
            if size == 1 {
                // One agent a piece.
                assert_eq!(pieces.len(), page_size.unwrap_or(42).min(42));
            }
        }
    }
    let empty = Agents::default()
        .listing(AgentSource::Unspecified, None, "")
        .expect("listing");
    assert_eq!(
        empty.chunks(10).collect::<Vec<_>>().concat(),
        br#"{"agents":[]}"#
    );
}
