//! The REST JSON shapes of agents (docs/rest-api.md, seed 000 §5) and their conversion to and
//! from the registry's protobuf messages. Conversions move out of the protobuf values, so a
//! response costs no string copies.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize, de::IgnoredAny};
use serde_json::Value;
use taskforce_proto::{json::from_struct, v1};
use utoipa::ToSchema;

/// Reads `null` as the type's default, so clients that send `"args": null` are not refused.
fn null_as_default<'de, D: Deserializer<'de>, T: Default + Deserialize<'de>>(
    d: D,
) -> Result<T, D::Error> {
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// One MCP server; empty fields are omitted. Values may hold `${VAR}` placeholders, which are
/// stored and returned as written.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct McpServerJson {
    /// `stdio`, `http` (streamable HTTP), `sse`, or `global` (one of the executor's global
    /// MCP servers, named by `name`).
    #[serde(rename = "type", default, deserialize_with = "null_as_default")]
    #[schema(example = "stdio")]
    pub kind: String,
    /// stdio: the program to start.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub command: String,
    /// stdio: its arguments.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub args: Vec<String>,
    /// stdio: extra environment variables.
    #[serde(
        default,
        deserialize_with = "taskforce_proto::mcp_config::unique_map",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub env: BTreeMap<String, String>,
    /// http/sse: the endpoint URL.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub url: String,
    /// http/sse: extra request headers.
    #[serde(
        default,
        deserialize_with = "taskforce_proto::mcp_config::unique_map",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub headers: BTreeMap<String, String>,
    /// global: the name of one of the executor's global MCP servers (`m365`).
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "String::is_empty"
    )]
    #[schema(example = "m365")]
    pub name: String,
}

impl From<v1::McpServer> for McpServerJson {
    fn from(s: v1::McpServer) -> Self {
        Self {
            kind: s.r#type,
            command: s.command,
            args: s.args,
            env: s.env.into_iter().collect(),
            url: s.url,
            headers: s.headers.into_iter().collect(),
            name: s.name,
        }
    }
}

impl From<McpServerJson> for v1::McpServer {
    fn from(s: McpServerJson) -> Self {
        Self {
            r#type: s.kind,
            command: s.command,
            args: s.args,
            env: s.env.into_iter().collect(),
            url: s.url,
            headers: s.headers.into_iter().collect(),
            name: s.name,
        }
    }
}

/// Body of create, update and validate. Unknown fields are a 400; the read-only fields of a GET
/// body (`source`, `version`, `created_at`, `updated_at`, `workspace_id`, `status`, `last_task`)
/// are accepted and ignored, so a GET body can be PUT back. Field rules are checked by the registry, which names every bad field.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentRequest {
    /// The id (create and validate); on update the path's id is authoritative.
    #[serde(default, deserialize_with = "null_as_default")]
    #[schema(example = "invoice-extractor")]
    pub agent_id: String,
    /// 1 to 100 characters, no control characters.
    #[serde(default, deserialize_with = "null_as_default")]
    pub name: String,
    /// 1 to 500 characters; no control characters but line breaks and tabs.
    #[serde(default, deserialize_with = "null_as_default")]
    pub description: String,
    /// The complete system prompt (at most 256 KiB); no control characters but line breaks and
    /// tabs.
    #[serde(default, deserialize_with = "null_as_default")]
    pub system_prompt: String,
    /// Native and orchestration tools the agent may use (at least one; names of
    /// `GET /api/v1/tools` that are not MCP tools).
    #[serde(default, deserialize_with = "null_as_default")]
    pub tool_allowlist: Vec<String>,
    /// MCP servers whose tools the agent may use.
    #[serde(default, deserialize_with = "null_as_default")]
    pub mcp_servers: Vec<McpServerJson>,
    /// When set, only these tools of the agent's MCP servers.
    #[serde(default, deserialize_with = "null_as_default")]
    pub mcp_tool_allowlist: Vec<String>,
    /// Registry agents (custom or profile) this agent may delegate to, each offered to it as a
    /// tool `agent_<id>`. Ids of at most 58 characters, not the agent itself, no duplicates;
    /// unknown ids are a 400 `invalid_subagents`.
    #[serde(default, deserialize_with = "null_as_default")]
    #[schema(example = json!(["researcher", "coder"]))]
    pub subagents: Vec<String>,
    /// A model alias of the executor's `llm_config.yaml` the agent runs on (1 to 128
    /// characters, no whitespace); empty: the request's model, else the executor's default.
    #[serde(default, deserialize_with = "null_as_default")]
    #[schema(example = "fast")]
    pub model: String,
    /// The policy mode runs of this agent default to (an execute request's `mode` wins):
    /// `readOnly`, `default` or `safeWrite`, accepted in any case and with `-`/`_` ignored
    /// (`read_only`), stored and returned in those spellings; another value is a 400 naming
    /// `mode`. Empty: no default.
    #[serde(default, deserialize_with = "null_as_default")]
    #[schema(example = "readOnly")]
    pub mode: String,
    /// The agent's role in a team, free text without control characters (shown by the MCP
    /// view).
    #[serde(default, deserialize_with = "null_as_default")]
    pub role: String,
    /// The project the agent works on (`list_agents` filters by it); no control characters.
    #[serde(default, deserialize_with = "null_as_default")]
    pub project: String,
    /// A directory with a Taskfile (`Taskfile.yml`, ...) of metadata fields: absolute, or
    /// relative to the registry's config directory. Must exist.
    #[serde(default, deserialize_with = "null_as_default")]
    pub workspace: String,
    /// PUT only: the version the update is based on (like `If-Match`); left out or null, the
    /// update replaces whatever version is stored. Given empty, it is a 400.
    #[serde(default)]
    #[schema(min_length = 1)]
    pub expected_version: Option<String>,
    #[serde(default, rename = "source")]
    #[schema(ignore)]
    _source: Option<IgnoredAny>,
    #[serde(default, rename = "version")]
    #[schema(ignore)]
    _version: Option<IgnoredAny>,
    #[serde(default, rename = "created_at")]
    #[schema(ignore)]
    _created_at: Option<IgnoredAny>,
    #[serde(default, rename = "updated_at")]
    #[schema(ignore)]
    _updated_at: Option<IgnoredAny>,
    #[serde(default, rename = "workspace_id")]
    #[schema(ignore)]
    _workspace_id: Option<IgnoredAny>,
    #[serde(default, rename = "status")]
    #[schema(ignore)]
    _status: Option<IgnoredAny>,
    #[serde(default, rename = "last_task")]
    #[schema(ignore)]
    _last_task: Option<IgnoredAny>,
}

impl AgentRequest {
    /// The spec to send to the registry; `path_id`, when given, replaces the body's id.
    pub fn into_spec(self, path_id: Option<String>) -> v1::AgentSpec {
        v1::AgentSpec {
            agent_id: path_id.unwrap_or(self.agent_id),
            name: self.name,
            description: self.description,
            system_prompt: self.system_prompt,
            tool_allowlist: self.tool_allowlist,
            mcp_servers: self.mcp_servers.into_iter().map(Into::into).collect(),
            mcp_tool_allowlist: self.mcp_tool_allowlist,
            role: self.role,
            project: self.project,
            workspace: self.workspace,
            subagents: self.subagents,
            model: self.model,
            mode: self.mode,
        }
    }
}

/// `idle` or `busy`, as the MCP view and REST spell a status.
pub fn status_name(status: i32) -> &'static str {
    match v1::AgentStatus::try_from(status) {
        Ok(v1::AgentStatus::Busy) => "busy",
        Ok(v1::AgentStatus::Idle | v1::AgentStatus::Unspecified) | Err(_) => "idle",
    }
}

/// A custom agent (`configs/custom/{agent_id}.yaml`), editable through the API.
#[derive(Debug, Serialize, ToSchema)]
pub struct CustomAgentJson {
    /// Always `custom`.
    #[schema(value_type = String, example = "custom")]
    pub source: &'static str,
    pub agent_id: String,
    pub name: String,
    pub description: String,
    pub system_prompt: String,
    pub tool_allowlist: Vec<String>,
    pub mcp_servers: Vec<McpServerJson>,
    pub mcp_tool_allowlist: Vec<String>,
    /// Agents it may delegate to; empty when none.
    pub subagents: Vec<String>,
    /// The model alias it runs on; empty when unset.
    pub model: String,
    /// The policy mode its runs default to (`readOnly`, `default` or `safeWrite`); empty when
    /// unset.
    #[schema(example = "readOnly")]
    pub mode: String,
    /// Free text; empty when unset.
    pub role: String,
    /// Empty when unset.
    pub project: String,
    /// The workspace directory as configured; empty when none.
    pub workspace: String,
    /// A UUID, stable for the agent's lifetime.
    pub workspace_id: String,
    /// RFC 3339, set by the service.
    pub created_at: String,
    /// RFC 3339, set by the service.
    pub updated_at: String,
    /// Opaque (16 hex digits); the `ETag` is made of it (with the runtime facts once the agent
    /// has run).
    pub version: String,
    // The runtime facts come last: the read model writes them after the stored JSON.
    /// `idle` or `busy` (reported by the executor).
    #[schema(example = "idle")]
    pub status: &'static str,
    /// The task of the latest run, if any.
    pub last_task: Option<String>,
}

/// A native tool entry of a profile's `tools:` list.
#[derive(Debug, Serialize, ToSchema)]
pub struct ToolConfigJson {
    #[serde(rename = "type")]
    pub kind: String,
    pub module: String,
    #[schema(value_type = Object)]
    pub params: Value,
}

/// LLM settings of a profile.
#[derive(Debug, Serialize, ToSchema)]
pub struct LlmJson {
    pub config_path: String,
    pub default_model: String,
}

/// A profile agent (`configs/{profile}.yaml`), read-only through the API.
#[derive(Debug, Serialize, ToSchema)]
pub struct ProfileAgentJson {
    /// Always `profile`.
    #[schema(value_type = String, example = "profile")]
    pub source: &'static str,
    pub agent_id: String,
    /// The profile's name (a profile has no other), so every agent has a `name`.
    pub name: String,
    pub profile: String,
    pub description: String,
    /// The system prompt it runs with (profiles have none of their own: it says who the agent
    /// is, from `specialist`, `profile` and `description`).
    pub system_prompt: String,
    /// The native tools it is given: the types of `tools_config`. (Its MCP servers offer all
    /// their tools: a profile has no `mcp_tool_allowlist`.)
    pub tool_allowlist: Vec<String>,
    pub specialist: String,
    pub tools_config: Vec<ToolConfigJson>,
    pub mcp_servers: Vec<McpServerJson>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub llm: Option<LlmJson>,
    /// When its file was created (RFC 3339; its modification time where the file system keeps
    /// no creation time), as for custom agents and MCP `list_agents`.
    pub created_at: String,
    /// When its file was last modified (RFC 3339).
    pub updated_at: String,
    /// Opaque; the `ETag` is made of it.
    pub version: String,
    // The runtime facts come last (see `CustomAgentJson`).
    /// `idle` or `busy` (reported by the executor).
    #[schema(example = "idle")]
    pub status: &'static str,
    /// The task of the latest run, if any.
    pub last_task: Option<String>,
}

/// An agent as create and update answer it (and a GET, without `warnings`).
#[derive(Debug, Serialize, ToSchema)]
pub struct SavedAgentJson {
    #[serde(flatten)]
    pub agent: AgentJson,
    /// What the save could not check, as `:validate` says it (an MCP server the registry
    /// could not discover, and why: its tools are checked when the executor runs the agent);
    /// present only when there is any.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

impl SavedAgentJson {
    /// The JSON of a registry agent's answer; `None` as for [`AgentJson::from_proto`].
    pub fn from_proto(mut agent: v1::Agent) -> Option<Self> {
        let warnings = std::mem::take(&mut agent.warnings);
        Some(Self {
            agent: AgentJson::from_proto(agent)?,
            warnings,
        })
    }
}

/// Any agent, told apart by `source`.
#[derive(Debug, Serialize, ToSchema)]
#[serde(untagged)]
pub enum AgentJson {
    /// `source: custom`.
    Custom(CustomAgentJson),
    /// `source: profile`.
    Profile(ProfileAgentJson),
}

impl AgentJson {
    /// The JSON of a registry agent; `None` for an agent that carries neither kind (a registry
    /// bug, reported by the caller).
    pub fn from_proto(agent: v1::Agent) -> Option<Self> {
        let v1::Agent {
            agent_id,
            version,
            kind,
            status,
            last_task,
            ..
        } = agent;
        let (status, last_task) = (
            status_name(status),
            (!last_task.is_empty()).then_some(last_task),
        );
        Some(match kind? {
            v1::agent::Kind::Custom(c) => {
                let spec = c.spec.unwrap_or_default();
                Self::Custom(CustomAgentJson {
                    source: "custom",
                    agent_id: if agent_id.is_empty() {
                        spec.agent_id
                    } else {
                        agent_id
                    },
                    name: spec.name,
                    description: spec.description,
                    system_prompt: spec.system_prompt,
                    tool_allowlist: spec.tool_allowlist,
                    mcp_servers: spec.mcp_servers.into_iter().map(Into::into).collect(),
                    mcp_tool_allowlist: spec.mcp_tool_allowlist,
                    subagents: spec.subagents,
                    model: spec.model,
                    mode: spec.mode,
                    role: spec.role,
                    project: spec.project,
                    workspace: spec.workspace,
                    workspace_id: c.workspace_id,
                    status,
                    last_task,
                    created_at: c.created_at,
                    updated_at: c.updated_at,
                    version,
                })
            }
            v1::agent::Kind::Profile(p) => Self::Profile(ProfileAgentJson {
                source: "profile",
                agent_id: if agent_id.is_empty() {
                    p.profile.clone()
                } else {
                    agent_id
                },
                name: p.profile.clone(),
                system_prompt: taskforce_proto::profile::system_prompt(&p),
                tool_allowlist: taskforce_proto::profile::tools(&p),
                profile: p.profile,
                description: p.description,
                specialist: p.specialist,
                tools_config: p
                    .tools_config
                    .into_iter()
                    .map(|t| ToolConfigJson {
                        kind: t.r#type,
                        module: t.module,
                        params: t
                            .params
                            .as_ref()
                            .map_or_else(|| Value::Object(Default::default()), from_struct),
                    })
                    .collect(),
                mcp_servers: p.mcp_servers.into_iter().map(Into::into).collect(),
                llm: p.llm.map(|l| LlmJson {
                    config_path: l.config_path,
                    default_model: l.default_model,
                }),
                created_at: p.created_at,
                updated_at: p.updated_at,
                status,
                last_task,
                version,
            }),
        })
    }
}

/// `GET /api/v1/agents`.
#[derive(Debug, Serialize, ToSchema)]
pub struct AgentListJson {
    /// Profile agents first, then custom agents, each ordered by id.
    pub agents: Vec<AgentJson>,
    /// Present when more pages follow (only with `page_size`).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub next_page_token: String,
}

/// `POST /api/v1/agents:validate`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ValidateJson {
    /// Always `true` (an invalid definition is a 400).
    pub valid: bool,
    /// Tools discovered on the agent's MCP servers.
    pub discovered_mcp_tools: Vec<String>,
    /// Non-fatal findings, such as an MCP server that could not be reached.
    pub warnings: Vec<String>,
}

#[cfg(test)]
mod tests;
