use super::*;
use serde_json::json;
use taskforce_proto::json::to_pb;

fn custom(project: &str, status: v1::AgentStatus, workspace: &str) -> v1::Agent {
    v1::Agent {
        agent_id: "yaml-researcher".into(),
        source: v1::AgentSource::Custom as i32,
        version: "0123456789abcdef".into(),
        kind: Some(v1::agent::Kind::Custom(v1::CustomAgent {
            spec: Some(v1::AgentSpec {
                agent_id: "yaml-researcher".into(),
                role: "Researcher".into(),
                project: project.into(),
                workspace: workspace.into(),
                ..Default::default()
            }),
            workspace_id: "e4f24826-22c4-4492-b6a7-f4ee0c6e1efd".into(),
            created_at: "2025-11-12T08:41:59Z".into(),
            updated_at: "2025-11-12T09:00:00Z".into(),
            ..Default::default()
        })),
        status: status as i32,
        ..Default::default()
    }
}

fn fields() -> Vec<v1::MetadataField> {
    vec![
        v1::MetadataField {
            name: "pull_request_number".into(),
            value: Some(to_pb(&json!(810))),
            error: None,
            description: "The number of the pull request.".into(),
            include_in_list: true,
        },
        v1::MetadataField {
            name: "git_branch".into(),
            value: None,
            error: Some("Command 'git rev-parse' failed: not a git repository".into()),
            description: "The name of the current git branch".into(),
            include_in_list: false,
        },
    ]
}

fn facts(agent: v1::Agent) -> AgentFacts {
    AgentFacts::from_proto(agent).expect("agent has a kind")
}

#[test]
fn show_agent_has_the_seed_shape() {
    let detail = facts(custom("Setup", v1::AgentStatus::Idle, "ws")).into_detail(fields());
    let out = serde_json::to_value(ShowAgentOutput { agent: detail }).expect("serialisable");
    assert_eq!(
        out,
        json!({"agent": {
            "name": "yaml-researcher",
            "source": "custom",
            "workspace_id": "e4f24826-22c4-4492-b6a7-f4ee0c6e1efd",
            "status": "idle",
            "role": "Researcher",
            "project": "Setup",
            "last_task": null,
            "created_at": "2025-11-12T08:41:59Z",
            "updated_at": "2025-11-12T09:00:00Z",
            "metadata_count": 2,
            "metadata": {
                "git_branch": {"value": null,
                    "error": "Command 'git rev-parse' failed: not a git repository",
                    "schema": {"description": "The name of the current git branch", "include_in_list": false}},
                "pull_request_number": {"value": 810, "error": null,
                    "schema": {"description": "The number of the pull request.", "include_in_list": true}}
            }
        }})
    );
}

#[test]
fn list_view_counts_every_field_but_shows_only_listed_values() {
    let summary = facts(custom("Setup", v1::AgentStatus::Busy, "ws")).into_summary(fields());
    let out = serde_json::to_value(&summary).expect("serialisable");
    assert_eq!(out["metadata_count"], 2);
    assert_eq!(out["metadata"], json!({"pull_request_number": 810}));
    assert_eq!(out["status"], "busy");
    assert!(out.get("updated_at").is_none() && out.get("workspace_id").is_none());
}

#[test]
fn profile_agents_have_a_name_uuid_no_role_or_project_and_their_file_times() {
    let agent = v1::Agent {
        agent_id: "dev".into(),
        source: v1::AgentSource::Profile as i32,
        kind: Some(v1::agent::Kind::Profile(v1::ProfileAgent {
            profile: "dev".into(),
            created_at: "2026-11-20T08:00:00Z".into(),
            updated_at: "2026-11-21T08:00:00Z".into(),
            ..Default::default()
        })),
        last_task: "triage".into(),
        ..Default::default()
    };
    let f = facts(agent.clone());
    assert_eq!((f.source, f.has_workspace), ("profile", false));
    assert_eq!(f.last_task.as_deref(), Some("triage"));
    // Seed 001: `workspace_id` is a UUID for every agent; a profile's is its name's, stable.
    let id = uuid::Uuid::parse_str(&f.workspace_id).expect("a UUID");
    assert_eq!(facts(agent).workspace_id, id.to_string());
    assert_ne!(id.to_string(), super::profile_workspace_id("ops"));
    let out = serde_json::to_value(f.into_summary(vec![])).expect("serialisable");
    assert_eq!(out["role"], "");
    assert_eq!(out["created_at"], "2026-11-20T08:00:00Z");
    assert_eq!(out["metadata"], json!({}));
    assert_eq!(out["metadata_count"], 0);
}

#[test]
fn filters_match_status_and_exact_project() {
    let f = facts(custom("Setup", v1::AgentStatus::Busy, ""));
    assert!(!f.has_workspace);
    assert!(f.matches(None, None));
    assert!(f.matches(Some("busy"), Some("Setup")));
    assert!(!f.matches(Some("idle"), None));
    assert!(!f.matches(None, Some("setup")));
    assert!(!f.matches(None, Some("")));
}

#[test]
fn status_filter_is_case_insensitive_and_names_the_allowed_values() {
    assert_eq!(parse_status_filter("BUSY"), Ok("busy"));
    assert_eq!(parse_status_filter("idle"), Ok("idle"));
    let err = parse_status_filter("sleeping").expect_err("not a status");
    assert!(err.contains("\"idle\", \"busy\""), "{err}");
    assert!(parse_status_filter("").is_err());
}
