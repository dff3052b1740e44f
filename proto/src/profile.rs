//! What a profile agent is, said the way a custom agent says it: its system prompt (profiles
//! have none of their own) and its tools, for the executor that runs it and the API that shows
//! it (seed 000 lists `name`, `system_prompt` and `tool_allowlist` for every agent).

use crate::v1;

/// The system prompt a profile agent runs with: who it is and what it is for.
pub fn system_prompt(profile: &v1::ProfileAgent) -> String {
    let specialist = if profile.specialist.is_empty() {
        "generic"
    } else {
        &profile.specialist
    };
    let mut prompt = format!(
        "You are the {specialist} agent of the `{}` profile. Use the tools offered when they \
         help, and finish with a direct answer to the mission.",
        profile.profile
    );
    if !profile.description.is_empty() {
        prompt.push_str("\n\n");
        prompt.push_str(&profile.description);
    }
    prompt
}

/// The native tools a profile agent is given: its `tools` entries' types, in order, each as the
/// catalog names it (seed 000's class names, `WebSearchTool`, are `web_search`).
pub fn tools(profile: &v1::ProfileAgent) -> Vec<String> {
    profile
        .tools_config
        .iter()
        .map(|t| {
            crate::catalog::profile_tool(&t.r#type).map_or_else(|| t.r#type.clone(), str::to_owned)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_profile_says_who_it_is_and_lists_its_tools() {
        let profile = v1::ProfileAgent {
            profile: "dev".into(),
            description: "General-purpose development agent.".into(),
            tools_config: vec![
                v1::ToolConfig {
                    r#type: "file_read".into(),
                    ..Default::default()
                },
                v1::ToolConfig {
                    r#type: "git".into(),
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        assert_eq!(
            system_prompt(&profile),
            "You are the generic agent of the `dev` profile. Use the tools offered when they \
             help, and finish with a direct answer to the mission.\n\nGeneral-purpose \
             development agent."
        );
        assert_eq!(tools(&profile), ["file_read", "git"]);
    }
}
