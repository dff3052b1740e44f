//! Workspace metadata (seed 001): `GET /api/v1/agents/{agent_id}/metadata`, and the per-field
//! JSON shape it shares with the MCP `show_agent` tool.
//!
//! The registry collects the fields (one per task of the workspace's Taskfile) and caches
//! them; this module only maps its `AgentMetadata` to JSON. A metadata problem is never an
//! error here: it is an empty map or a field with `value: null` and an `error`.

use std::collections::BTreeMap;

use axum::{Json, extract::State};
use rmcp::schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use taskforce_proto::{json::from_pb, v1};
use tracing::instrument;
use utoipa::{IntoParams, ToSchema};

use crate::{
    error::ErrorBody,
    error::RestError,
    extract::{AgentId, QueryParams},
    state::AppState,
};

/// What a field is: the task's `desc` and whether list views show it.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct FieldSchemaJson {
    /// The task's `desc`.
    pub description: String,
    /// The task's `meta.include_in_list`: `list_agents` shows the value.
    pub include_in_list: bool,
}

/// One metadata field with its value, error and schema.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct MetadataFieldJson {
    /// What the task printed, trimmed: typed when it is JSON (`810`, `true`), else a string;
    /// `null` when it printed nothing or failed.
    pub value: Value,
    /// Why there is no value (the command and the reason); `null` on success.
    pub error: Option<String>,
    /// The field's declaration.
    pub schema: FieldSchemaJson,
}

/// Every field of one agent, by name (sorted).
pub type MetadataMap = BTreeMap<String, MetadataFieldJson>;

impl From<v1::MetadataField> for MetadataFieldJson {
    fn from(f: v1::MetadataField) -> Self {
        Self {
            value: f.value.as_ref().map_or(Value::Null, from_pb),
            error: f.error,
            schema: FieldSchemaJson {
                description: f.description,
                include_in_list: f.include_in_list,
            },
        }
    }
}

/// The registry's fields as a map by name.
pub fn to_map(fields: Vec<v1::MetadataField>) -> MetadataMap {
    fields
        .into_iter()
        .map(|f| {
            let name = f.name.clone();
            (name, MetadataFieldJson::from(f))
        })
        .collect()
}

/// `GET /api/v1/agents/{agent_id}/metadata`.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({
    "agent_id": "yaml-researcher",
    "metadata_count": 1,
    "metadata": {"pull_request_number": {"value": 810, "error": null,
        "schema": {"description": "The number of the pull request.", "include_in_list": true}}}
}))]
pub struct AgentMetadataJson {
    /// The agent.
    pub agent_id: String,
    /// Number of fields (all of them).
    pub metadata_count: usize,
    /// The fields by name; empty without a workspace or a loadable Taskfile.
    pub metadata: BTreeMap<String, MetadataFieldJson>,
}

/// Query of `GET /api/v1/agents/{agent_id}/metadata`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct MetadataQuery {
    /// Collect now instead of answering from the registry's cache (default `false`).
    #[serde(default)]
    force_refresh: bool,
}

/// The workspace metadata of one agent. Fields that failed or timed out have `value: null` and
/// an `error`; they never fail the request.
#[utoipa::path(get, path = "/api/v1/agents/{agent_id}/metadata", tag = "agents",
    params(("agent_id" = String, Path, description = "`[a-z0-9][a-z0-9-_]{2,63}`"), MetadataQuery),
    responses(
        (status = 200, description = "The agent's metadata", body = AgentMetadataJson),
        (status = 400, description = "Invalid agent_id or query", body = ErrorBody),
        (status = 404, description = "`not_found`", body = ErrorBody),
        (status = 503, description = "`unavailable`", body = ErrorBody),
        (status = 504, description = "`timeout`", body = ErrorBody)))]
#[instrument(level = "debug", skip_all, fields(agent_id = %id))]
pub async fn get_agent_metadata(
    State(state): State<AppState>,
    AgentId(id): AgentId,
    QueryParams(q): QueryParams<MetadataQuery>,
) -> Result<Json<AgentMetadataJson>, RestError> {
    let req = v1::GetAgentMetadataRequest {
        agent_id: id.clone(),
        force_refresh: q.force_refresh,
    };
    let res = state
        .registry
        .clone()
        .get_agent_metadata(state.request(req))
        .await?
        .into_inner();
    let metadata = to_map(res.fields);
    Ok(Json(AgentMetadataJson {
        agent_id: id,
        metadata_count: metadata.len(),
        metadata,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use taskforce_proto::json::to_pb;

    #[test]
    fn fields_keep_their_type_and_unset_values_are_null() {
        let map = to_map(vec![
            v1::MetadataField {
                name: "pr".into(),
                value: Some(to_pb(&json!(810))),
                error: None,
                description: "PR number".into(),
                include_in_list: true,
            },
            v1::MetadataField {
                name: "branch".into(),
                value: None,
                error: Some("Command 'git branch' failed: not a repo".into()),
                description: "Branch".into(),
                include_in_list: false,
            },
        ]);
        assert_eq!(
            serde_json::to_value(&map).expect("serialisable"),
            json!({
                "branch": {"value": null, "error": "Command 'git branch' failed: not a repo",
                    "schema": {"description": "Branch", "include_in_list": false}},
                "pr": {"value": 810, "error": null,
                    "schema": {"description": "PR number", "include_in_list": true}}
            })
        );
    }
}
