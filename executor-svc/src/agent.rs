//! An agent definition as the loop needs it, built from the registry's `Agent`.

use std::path::PathBuf;

use taskforce_proto::v1::{self, agent::Kind};

use crate::error::ExecutorError;

/// What a run needs to know about the agent it runs.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentDef {
    /// The custom agent's id, or the profile's name.
    pub agent_id: String,
    /// The registry's version of the definition (for logs).
    pub version: String,
    /// Instructions for the model, first message of a new session.
    pub system_prompt: String,
    /// Names of the tools the agent may call (its `tool_allowlist`, or the profile's `tools`).
    pub tools: Vec<String>,
    /// The agent's workspace, when its definition names one.
    pub workspace: Option<PathBuf>,
    /// The MCP servers whose tools the agent may call.
    pub mcp_servers: Vec<v1::McpServer>,
    /// Which of their tools it may call: a custom agent's `mcp_tool_allowlist`; `None` (a
    /// profile, written by the operator) is every tool of its servers.
    pub mcp_tools: Option<Vec<String>>,
    /// Registry agents it may delegate to, each offered as a tool `agent_<id>`.
    pub subagents: Vec<String>,
    /// The model alias it runs on, when its definition names one.
    pub model: Option<String>,
    /// The policy mode its runs default to, when its definition names one.
    pub mode: Option<String>,
    /// What it is for (describes it as a sub-agent tool).
    pub description: String,
    /// A profile agent's definition (a run may name it as `profile`), not a custom agent's.
    pub profile: bool,
}

impl AgentDef {
    /// Builds the definition from a registry agent.
    pub fn from_proto(agent: v1::Agent) -> Result<Self, ExecutorError> {
        let invalid = |why: &str| {
            ExecutorError::FailedPrecondition(format!(
                "the registry's definition of `{}` cannot be run: {why}",
                agent.agent_id
            ))
        };
        match &agent.kind {
            Some(Kind::Custom(custom)) => {
                let spec = custom.spec.as_ref().ok_or_else(|| invalid("no spec"))?;
                Ok(Self {
                    agent_id: agent.agent_id.clone(),
                    version: agent.version.clone(),
                    system_prompt: custom_prompt(spec),
                    tools: spec.tool_allowlist.clone(),
                    workspace: (!custom.workspace_path.is_empty())
                        .then(|| PathBuf::from(&custom.workspace_path)),
                    mcp_servers: spec.mcp_servers.clone(),
                    mcp_tools: Some(spec.mcp_tool_allowlist.clone()),
                    subagents: spec.subagents.clone(),
                    model: (!spec.model.trim().is_empty()).then(|| spec.model.trim().to_owned()),
                    mode: (!spec.mode.trim().is_empty()).then(|| spec.mode.trim().to_owned()),
                    description: spec.description.clone(),
                    profile: false,
                })
            }
            Some(Kind::Profile(profile)) => Ok(Self {
                agent_id: agent.agent_id.clone(),
                version: agent.version.clone(),
                system_prompt: taskforce_proto::profile::system_prompt(profile),
                tools: taskforce_proto::profile::tools(profile),
                workspace: None,
                mcp_servers: profile.mcp_servers.clone(),
                mcp_tools: None,
                subagents: Vec::new(),
                // The profile's `llm.default_model` (seed 000: the profile keeps its LLM
                // settings), taken as a custom agent's `model` is.
                model: profile
                    .llm
                    .as_ref()
                    .map(|llm| llm.default_model.trim())
                    .filter(|m| !m.is_empty())
                    .map(str::to_owned),
                mode: None,
                description: profile.description.clone(),
                profile: true,
            }),
            None => Err(invalid("neither a custom nor a profile agent")),
        }
    }
}

/// The custom agent's own prompt, or one made from its name and description.
fn custom_prompt(spec: &v1::AgentSpec) -> String {
    if !spec.system_prompt.trim().is_empty() {
        return spec.system_prompt.clone();
    }
    let name = if spec.name.is_empty() {
        &spec.agent_id
    } else {
        &spec.name
    };
    let mut prompt = format!("You are {name}.");
    if !spec.description.is_empty() {
        prompt.push(' ');
        prompt.push_str(&spec.description);
    }
    prompt
}
