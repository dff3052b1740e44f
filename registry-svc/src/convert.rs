//! Conversions between the YAML domain types and the protobuf messages.

use taskforce_proto::{
    json,
    v1::{self, AgentSource, agent::Kind},
};

use crate::definition::{
    Allowlist, CustomAgentFile, McpServerConfig, ProfileFile, Prompt, canonical_mode,
};

impl From<&McpServerConfig> for v1::McpServer {
    fn from(s: &McpServerConfig) -> Self {
        Self {
            r#type: s.kind.clone(),
            command: s.command.clone(),
            args: s.args.clone(),
            env: s.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            url: s.url.clone(),
            headers: s
                .headers
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            name: s.name.clone(),
        }
    }
}

impl From<v1::McpServer> for McpServerConfig {
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

/// A request spec as a file body (timestamps are set by the store).
pub fn spec_to_file(spec: v1::AgentSpec) -> CustomAgentFile {
    CustomAgentFile {
        agent_id: Some(spec.agent_id),
        name: spec.name,
        description: spec.description,
        prompt: Prompt {
            system_prompt: spec.system_prompt,
        },
        tools: Allowlist {
            allowlist: spec.tool_allowlist,
        },
        mcp_servers: spec.mcp_servers.into_iter().map(Into::into).collect(),
        mcp_tools: (!spec.mcp_tool_allowlist.is_empty()).then_some(Allowlist {
            allowlist: spec.mcp_tool_allowlist,
        }),
        subagents: spec.subagents,
        // Not trimmed like the labels: " " is a model that validation refuses, not an unset one.
        model: (!spec.model.is_empty()).then_some(spec.model),
        // Stored in its canonical spelling; an unknown one is kept as written for validation to
        // name.
        mode: (!spec.mode.is_empty())
            .then(|| canonical_mode(&spec.mode).map_or(spec.mode, str::to_owned)),
        role: non_empty(spec.role),
        project: non_empty(spec.project),
        workspace: non_empty(spec.workspace),
        workspace_id: None,
        created_at: None,
        updated_at: None,
    }
}

fn non_empty(s: String) -> Option<String> {
    (!s.trim().is_empty()).then_some(s)
}

/// A validated custom agent file as an `Agent` message.
pub fn custom_to_proto(id: &str, version: String, f: &CustomAgentFile) -> v1::Agent {
    v1::Agent {
        agent_id: id.to_owned(),
        source: AgentSource::Custom.into(),
        version,
        kind: Some(Kind::Custom(v1::CustomAgent {
            spec: Some(v1::AgentSpec {
                agent_id: id.to_owned(),
                name: f.name.clone(),
                description: f.description.clone(),
                system_prompt: f.prompt.system_prompt.clone(),
                tool_allowlist: f.tools.allowlist.clone(),
                mcp_servers: f.mcp_servers.iter().map(Into::into).collect(),
                mcp_tool_allowlist: f.mcp_allowlist().to_vec(),
                role: f.role.clone().unwrap_or_default(),
                project: f.project.clone().unwrap_or_default(),
                workspace: f.workspace.clone().unwrap_or_default(),
                subagents: f.subagents.clone(),
                model: f.model.clone().unwrap_or_default(),
                // A hand-written file may spell it `read_only`; clients see one spelling.
                mode: f
                    .mode
                    .as_deref()
                    .map(|m| canonical_mode(m).unwrap_or(m))
                    .unwrap_or_default()
                    .to_owned(),
            }),
            created_at: f.created_at.clone().unwrap_or_default(),
            updated_at: f.updated_at.clone().unwrap_or_default(),
            workspace_id: f.workspace_id_or_derived(id),
            // Resolved when served (it depends on where the config directory is).
            workspace_path: String::new(),
        })),
        status: v1::AgentStatus::Idle.into(),
        ..Default::default()
    }
}

/// A profile file as an `Agent` message.
pub fn profile_to_proto(profile: &str, version: String, f: &ProfileFile) -> v1::Agent {
    v1::Agent {
        agent_id: profile.to_owned(),
        source: AgentSource::Profile.into(),
        version,
        kind: Some(Kind::Profile(v1::ProfileAgent {
            profile: profile.to_owned(),
            specialist: f.specialist.clone(),
            tools_config: f
                .tools
                .iter()
                .map(|t| v1::ToolConfig {
                    r#type: t.kind.clone(),
                    module: t.module.clone(),
                    params: Some(if t.params.is_null() {
                        prost_types::Struct::default()
                    } else {
                        json::to_struct(&t.params)
                    }),
                })
                .collect(),
            mcp_servers: f.mcp_servers.iter().map(Into::into).collect(),
            llm: Some(v1::LlmRef {
                config_path: f.llm.config_path.clone(),
                default_model: f.llm.default_model.clone(),
            }),
            description: f.description.clone(),
            // Set from the file by the store.
            created_at: String::new(),
            updated_at: String::new(),
        })),
        status: v1::AgentStatus::Idle.into(),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subagents_and_model_survive_spec_to_file_to_proto() {
        let spec = v1::AgentSpec {
            agent_id: "orchestrator".into(),
            name: "Orchestrator".into(),
            description: "Delegates".into(),
            system_prompt: "Plan, then delegate.".into(),
            tool_allowlist: vec!["delegate_to_agent".into()],
            subagents: vec!["researcher".into(), "coder".into()],
            model: "fast".into(),
            ..Default::default()
        };
        let file = spec_to_file(spec.clone());
        assert_eq!(file.subagents, ["researcher", "coder"]);
        assert_eq!(file.model.as_deref(), Some("fast"));
        let agent = custom_to_proto("orchestrator", "v".into(), &file);
        let Some(Kind::Custom(c)) = agent.kind else {
            panic!("a custom agent");
        };
        assert_eq!(c.spec, Some(spec));
    }

    #[test]
    fn mode_is_stored_and_served_in_its_canonical_spelling() {
        let spec = v1::AgentSpec {
            agent_id: "reader".into(),
            mode: "read_only".into(),
            ..Default::default()
        };
        let file = spec_to_file(spec);
        assert_eq!(file.mode.as_deref(), Some("readOnly"));
        let served = |f: &CustomAgentFile| match custom_to_proto("reader", "v".into(), f).kind {
            Some(Kind::Custom(c)) => c.spec.map(|s| s.mode),
            _ => None,
        };
        assert_eq!(served(&file).as_deref(), Some("readOnly"));
        let hand = CustomAgentFile {
            mode: Some("SAFE-WRITE".into()),
            ..Default::default()
        };
        assert_eq!(served(&hand).as_deref(), Some("safeWrite"));
        assert_eq!(served(&CustomAgentFile::default()).as_deref(), Some(""));
    }

    #[test]
    fn an_empty_mode_is_unset_and_an_unknown_one_is_kept_for_validation() {
        assert_eq!(spec_to_file(v1::AgentSpec::default()).mode, None);
        let unknown = v1::AgentSpec {
            mode: "yolo".into(),
            ..Default::default()
        };
        assert_eq!(spec_to_file(unknown).mode.as_deref(), Some("yolo"));
    }

    #[test]
    fn an_empty_model_is_unset_but_a_blank_one_is_kept_for_validation() {
        assert_eq!(spec_to_file(v1::AgentSpec::default()).model, None);
        let blank = v1::AgentSpec {
            model: " ".into(),
            ..Default::default()
        };
        assert_eq!(spec_to_file(blank).model.as_deref(), Some(" "));
    }
}
