//! Page tokens.
//!
//! Agent lists (`ListAgents`, `GET /api/v1/agents`): `p:<id>` after a profile agent, `c:<id>`
//! after a custom agent. Profiles come first, so a token says where the next page starts in
//! both sources. The registry and the gateway's read model hand out and accept the same tokens.
//!
//! Session lists (`ListSessions`, `GET /api/v1/sessions`): `s:<updated_at>/<session_id>` after
//! the session of that id changed at that time, the order being by `updated_at`, then
//! `session_id`, both descending. Every executor knows where such a token falls in its own
//! sessions, so the gateway hands the same token to each and merges their pages.

use crate::{error::ApiError, v1::AgentSource};

/// Most items of one page of either list.
pub const MAX_PAGE_SIZE: u32 = 1000;

/// Sessions of a page of a session list that asks for no size.
pub const DEFAULT_SESSION_PAGE_SIZE: u32 = 100;

/// `n` when it is a page size a list takes (1 to [`MAX_PAGE_SIZE`]), else the `page_size`
/// field error.
pub fn page_size(n: u32) -> Result<u32, ApiError> {
    if (1..=MAX_PAGE_SIZE).contains(&n) {
        Ok(n)
    } else {
        Err(ApiError::field(
            "page_size",
            format!("must be between 1 and {MAX_PAGE_SIZE}, got {n}"),
        ))
    }
}

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

/// The token of a session list's page that ended with session `id`, changed at `updated_at`.
pub fn make_session(updated_at: &str, id: &str) -> String {
    format!("s:{updated_at}/{id}")
}

/// Where the page of a session list's `token` starts: `None` for the empty token (the first
/// page), else the `updated_at` and the session id to continue after. Anything no page returned
/// is a `page_token` field error.
pub fn parse_session(token: &str) -> Result<Option<(&str, &str)>, ApiError> {
    if token.is_empty() {
        return Ok(None);
    }
    let bad = || ApiError::field("page_token", "is not a token returned by a previous page");
    let (updated_at, id) = token
        .strip_prefix("s:")
        .and_then(|rest| rest.split_once('/'))
        .ok_or_else(bad)?;
    // RFC 3339, as the executors write it (upper-case `T` and `Z`, as the OpenAPI document's
    // pattern has it; chrono also takes a space and lower case).
    let time = updated_at
        .bytes()
        .all(|b| b.is_ascii_digit() || b"-:.TZ+".contains(&b))
        && chrono::DateTime::parse_from_rfc3339(updated_at).is_ok();
    if !time || !crate::ids::is_session_id(id) {
        return Err(bad());
    }
    Ok(Some((updated_at, id)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_token_round_trips_and_anything_else_is_a_page_token_error() {
        let token = make_session("2026-11-29T12:00:00.123Z", "a_4b1c");
        assert_eq!(
            parse_session(&token).ok(),
            Some(Some(("2026-11-29T12:00:00.123Z", "a_4b1c")))
        );
        assert_eq!(parse_session("").ok(), Some(None));
        for bad in [
            "c:coder",
            "s:",
            "s:2026-11-29T12:00:00Z",
            "s:/a_4b1c",
            "s:yesterday/a_4b1c",
            "s:2026-11-29T12:00:00Z/",
            "s:2026-11-29T12:00:00Z/not an id",
            "s:2026-13-99T99:99:99Z/a_4b1c",
            "s:9/a_4b1c",
            "s:-/a_4b1c",
            "s:2026-11-29t12:00:00z/a_4b1c",
            "s:2026-11-29 12:00:00Z/a_4b1c",
        ] {
            let err = parse_session(bad).err().map(|e| e.message);
            assert!(err.is_some_and(|m| m.contains("page_token")), "{bad}");
        }
    }

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
