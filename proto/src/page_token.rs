//! The page tokens of agent lists (`ListAgents`, `GET /api/v1/agents`): `p:<id>` after a
//! profile agent, `c:<id>` after a custom agent. Profiles come first, so a token says where
//! the next page starts in both sources. The registry and the gateway's read model hand out
//! and accept the same tokens.

use crate::{error::ApiError, v1::AgentSource};

/// The token of a page that ended with agent `id` of `source`.
pub fn make(source: AgentSource, id: &str) -> String {
    let tag = match source {
        AgentSource::Profile => 'p',
        AgentSource::Custom | AgentSource::Unspecified => 'c',
    };
    format!("{tag}:{id}")
}

/// Where the page of `token` starts in a list of `filter`'s agents (`Unspecified`: both
/// sources): `None` for the empty token (the first page), else the source and the id to
/// continue after. A token no page of that list returned (another source's, an id that is no
/// agent id) is a `page_token` field error, not an empty page.
pub fn parse(token: &str, filter: AgentSource) -> Result<Option<(AgentSource, &str)>, ApiError> {
    if token.is_empty() {
        return Ok(None);
    }
    let bad = || ApiError::field("page_token", "is not a token returned by a previous page");
    let (tag, id) = token.split_once(':').ok_or_else(bad)?;
    let source = match tag {
        "p" => AgentSource::Profile,
        "c" => AgentSource::Custom,
        _ => return Err(bad()),
    };
    if crate::ids::validate_agent_id(id).is_err() {
        return Err(bad());
    }
    if filter != AgentSource::Unspecified && filter != source {
        return Err(ApiError::field(
            "page_token",
            "is a token of a list of other agents: give the `source` of the page that returned it",
        ));
    }
    Ok(Some((source, id)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_round_trips_and_a_foreign_one_is_a_page_token_error() {
        let token = make(AgentSource::Profile, "coder");
        assert_eq!(
            parse(&token, AgentSource::Unspecified).ok(),
            Some(Some((AgentSource::Profile, "coder")))
        );
        assert_eq!(parse("", AgentSource::Custom).ok(), Some(None));
        for bad in ["x:coder", "coder", "P:coder", "c:", "p:zz zz"] {
            let err = parse(bad, AgentSource::Unspecified)
                .err()
                .map(|e| e.message);
            assert!(err.is_some_and(|m| m.contains("page_token")), "{bad}");
        }
        // A profile's token does not page a list of custom agents.
        let err = parse(&token, AgentSource::Custom).err().map(|e| e.message);
        assert!(err.is_some_and(|m| m.contains("other agents")));
        assert!(parse(&token, AgentSource::Profile).is_ok());
    }
}
