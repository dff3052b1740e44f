//! The MCP tools' inputs and outputs (seed 001), and how a registry agent plus its metadata
//! becomes one. Field names are normative; `source` is ours (additive).
//!
//! Profile agents are listed too: they have no workspace, role or project, so `role` and
//! `project` are empty strings and `metadata` is empty; their `workspace_id` is a UUID derived
//! from the profile's name (stable, as a custom agent's); `created_at` and `updated_at` are
//! their file's times.

use std::collections::BTreeMap;

use rmcp::schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use taskforce_proto::v1;

use crate::{
    metadata::{MetadataMap, to_map},
    model::status_name,
};

/// The schema of a count: a non-negative integer, without the `"format": "uint"` schemars
/// gives `usize` (no JSON Schema format; clients that validate warn about it).
fn count_schema(_: &mut rmcp::schemars::SchemaGenerator) -> rmcp::schemars::Schema {
    rmcp::schemars::json_schema!({"type": "integer", "minimum": 0})
}

/// The status names `status_filter` accepts, as `status` spells them.
pub const STATUS_NAMES: [&str; 2] = ["idle", "busy"];

/// Input of `show_agent`.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct ShowAgentArgs {
    /// The agent's name (its id, as `list_agents` shows it), e.g. `invoice-extractor`.
    #[schemars(
        length(min = 3, max = 64),
        regex(pattern = r"^[a-z0-9][a-z0-9_-]{2,63}$")
    )]
    pub agent_name: String,
}

/// Input of `list_agents`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct ListAgentsArgs {
    /// Only agents with this status: `idle` or `busy`.
    #[serde(default)]
    #[schemars(extend("enum" = ["idle", "busy", null]))]
    pub status_filter: Option<String>,
    /// Only agents of this project (exact match; `""` matches agents without a project).
    #[serde(default)]
    pub project_filter: Option<String>,
}

/// Output of `show_agent`.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct ShowAgentOutput {
    /// The agent with its full metadata.
    pub agent: AgentDetail,
}

/// One agent as `show_agent` shows it.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct AgentDetail {
    /// The agent's id.
    pub name: String,
    /// `custom` or `profile`.
    pub source: String,
    /// A UUID, stable for the agent's lifetime (for a profile agent, derived from its name).
    pub workspace_id: String,
    /// `idle` or `busy`.
    pub status: String,
    /// Free text; empty when unset.
    pub role: String,
    /// Empty when unset.
    pub project: String,
    /// The task of the latest run; `null` when none.
    pub last_task: Option<String>,
    /// RFC 3339; the file's time for a profile, or a hand-written file without a valid one.
    pub created_at: String,
    /// RFC 3339; the file's time for a profile, or a hand-written file without a valid one.
    pub updated_at: String,
    /// Number of metadata fields.
    #[schemars(schema_with = "count_schema")]
    pub metadata_count: usize,
    /// Every field with its value, error and schema.
    pub metadata: MetadataMap,
}

/// Output of `list_agents`.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct ListAgentsOutput {
    /// Profile agents first, then custom agents, each ordered by name.
    pub agents: Vec<AgentSummary>,
    /// Number of agents returned (after the filters).
    #[schemars(schema_with = "count_schema")]
    pub total_count: usize,
}

/// One agent as `list_agents` shows it.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct AgentSummary {
    /// The agent's id.
    pub name: String,
    /// `custom` or `profile`.
    pub source: String,
    /// `idle` or `busy`.
    pub status: String,
    /// Free text; empty when unset.
    pub role: String,
    /// Empty when unset.
    pub project: String,
    /// The task of the latest run; `null` when none.
    pub last_task: Option<String>,
    /// RFC 3339; the file's time for a profile, or a hand-written file without a valid one.
    pub created_at: String,
    /// Number of metadata fields (all of them, not only those shown here).
    #[schemars(schema_with = "count_schema")]
    pub metadata_count: usize,
    /// Values only, of the fields marked `include_in_list`.
    pub metadata: BTreeMap<String, Value>,
}

/// The parts of a registry agent the views need.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentFacts {
    /// The agent's id.
    pub name: String,
    /// `custom` or `profile`.
    pub source: &'static str,
    /// See [`AgentDetail::workspace_id`].
    pub workspace_id: String,
    /// `idle` or `busy`.
    pub status: &'static str,
    /// See [`AgentDetail::role`].
    pub role: String,
    /// See [`AgentDetail::project`].
    pub project: String,
    /// Whether a workspace is configured (else there is no metadata to ask for).
    pub has_workspace: bool,
    /// See [`AgentDetail::last_task`].
    pub last_task: Option<String>,
    /// See [`AgentDetail::created_at`].
    pub created_at: String,
    /// See [`AgentDetail::updated_at`].
    pub updated_at: String,
}

/// The `workspace_id` of profile `name`: a name-based UUID (v5), the same for the profile
/// every time, and unlike any custom agent's (theirs are derived from `taskforce:agent:<id>`).
fn profile_workspace_id(name: &str) -> String {
    uuid::Uuid::new_v5(
        &uuid::Uuid::NAMESPACE_URL,
        format!("taskforce:profile:{name}").as_bytes(),
    )
    .to_string()
}

impl AgentFacts {
    /// The facts of a registry agent; `None` for one without a definition (a registry bug).
    pub fn from_proto(agent: v1::Agent) -> Option<Self> {
        let v1::Agent {
            agent_id,
            kind,
            status,
            last_task,
            ..
        } = agent;
        let mut facts = Self {
            name: agent_id,
            source: "custom",
            workspace_id: String::new(),
            status: status_name(status),
            role: String::new(),
            project: String::new(),
            has_workspace: false,
            last_task: (!last_task.is_empty()).then_some(last_task),
            created_at: String::new(),
            updated_at: String::new(),
        };
        match kind? {
            v1::agent::Kind::Custom(c) => {
                let spec = c.spec.unwrap_or_default();
                if facts.name.is_empty() {
                    facts.name = spec.agent_id;
                }
                facts.workspace_id = c.workspace_id;
                facts.role = spec.role;
                facts.project = spec.project;
                facts.has_workspace = !spec.workspace.is_empty();
                facts.created_at = c.created_at;
                facts.updated_at = c.updated_at;
            }
            v1::agent::Kind::Profile(p) => {
                facts.source = "profile";
                if facts.name.is_empty() {
                    facts.name = p.profile;
                }
                facts.workspace_id = profile_workspace_id(&facts.name);
                facts.created_at = p.created_at;
                facts.updated_at = p.updated_at;
            }
        }
        Some(facts)
    }

    /// Whether the agent passes `list_agents`' filters (already validated).
    pub fn matches(&self, status: Option<&str>, project: Option<&str>) -> bool {
        status.is_none_or(|s| s == self.status) && project.is_none_or(|p| p == self.project)
    }

    /// The `show_agent` view with every field.
    pub fn into_detail(self, fields: Vec<v1::MetadataField>) -> AgentDetail {
        let metadata = to_map(fields);
        AgentDetail {
            name: self.name,
            source: self.source.to_owned(),
            workspace_id: self.workspace_id,
            status: self.status.to_owned(),
            role: self.role,
            project: self.project,
            last_task: self.last_task,
            created_at: self.created_at,
            updated_at: self.updated_at,
            metadata_count: metadata.len(),
            metadata,
        }
    }

    /// The `list_agents` view: values of the `include_in_list` fields, count of all fields.
    pub fn into_summary(self, fields: Vec<v1::MetadataField>) -> AgentSummary {
        let all = to_map(fields);
        let metadata_count = all.len();
        let metadata = all
            .into_iter()
            .filter(|(_, f)| f.schema.include_in_list)
            .map(|(name, f)| (name, f.value))
            .collect();
        AgentSummary {
            name: self.name,
            source: self.source.to_owned(),
            status: self.status.to_owned(),
            role: self.role,
            project: self.project,
            last_task: self.last_task,
            created_at: self.created_at,
            metadata_count,
            metadata,
        }
    }
}

/// The canonical status name for a `status_filter` value (case-insensitive), or the error
/// message naming the allowed values.
pub fn parse_status_filter(value: &str) -> Result<&'static str, String> {
    STATUS_NAMES
        .into_iter()
        .find(|s| s.eq_ignore_ascii_case(value.trim()))
        .ok_or_else(|| {
            format!(
                "ValidationError: invalid status_filter {value:?}; allowed values are {}",
                STATUS_NAMES.map(|s| format!("\"{s}\"")).join(", ")
            )
        })
}

#[cfg(test)]
mod tests;
