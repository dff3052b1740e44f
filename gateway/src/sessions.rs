//! `GET /api/v1/sessions`: the sessions of every executor behind the gateway, the most recently
//! changed first, in pages.
//!
//! Each executor keeps its own sessions. A page token is a place in the one order all of them
//! share (`updated_at`, then `session_id`, both descending), so the gateway asks every executor
//! for a page after the same place and merges their answers into one page.

use axum::{Json, extract::State};
use serde::{Deserialize, Serialize};
use taskforce_proto::v1;
use tracing::instrument;
use utoipa::{IntoParams, ToSchema};

use crate::{
    error::{ErrorBody, RestError},
    execute::{RunErrorJson, status_name},
    extract::QueryParams,
    state::AppState,
};

/// A session status, as a filter.
#[derive(Debug, Clone, Copy, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum StatusParam {
    /// A run is live.
    Running,
    /// The latest run finished with a final answer.
    Completed,
    /// Waiting for an answer to its question.
    Paused,
    /// The latest run failed.
    Failed,
    /// The latest run was cancelled.
    Cancelled,
}

impl StatusParam {
    /// The proto status.
    pub fn to_proto(self) -> v1::RunStatus {
        match self {
            Self::Running => v1::RunStatus::Running,
            Self::Completed => v1::RunStatus::Completed,
            Self::Paused => v1::RunStatus::Paused,
            Self::Failed => v1::RunStatus::Failed,
            Self::Cancelled => v1::RunStatus::Cancelled,
        }
    }
}

/// Query of `GET /api/v1/sessions`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct SessionsQuery {
    /// Only the sessions of this agent.
    agent_id: Option<String>,
    /// Only the sessions in this status.
    #[param(inline)]
    status: Option<StatusParam>,
    /// Sessions per page (1..1000, default 100).
    #[param(minimum = 1, maximum = 1000)]
    page_size: Option<u32>,
    /// `next_page_token` of the previous page.
    page_token: Option<String>,
}

/// One session of a list: where it stands, without its conversation.
#[derive(Debug, Serialize, ToSchema)]
pub struct SessionSummaryJson {
    /// The session.
    pub session_id: String,
    /// The agent it runs.
    pub agent_id: String,
    /// `running`, `completed`, `paused`, `failed` or `cancelled`.
    pub status: String,
    /// The mission of the latest run: its first 200 characters, then `…` when longer.
    pub mission: String,
    /// The question a paused session waits on, cut as `mission` is
    /// (`GET /api/v1/sessions/{session_id}` has all of it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub question: Option<QuestionSummaryJson>,
    /// The model alias it runs on (absent: the default).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// RFC 3339.
    pub created_at: String,
    /// RFC 3339: the order of the list.
    pub updated_at: String,
    /// Why the latest run failed or was cancelled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<RunErrorJson>,
}

/// The question a listed session waits on.
#[derive(Debug, Serialize, ToSchema)]
pub struct QuestionSummaryJson {
    /// Its call id (pass it back with the answer).
    pub call_id: String,
    /// The question, cut to 200 characters.
    pub question: String,
}

/// Answer of `GET /api/v1/sessions`.
#[derive(Debug, Serialize, ToSchema)]
pub struct SessionListJson {
    /// The most recently changed first.
    pub sessions: Vec<SessionSummaryJson>,
    /// Where the next page starts; absent on the last page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_page_token: Option<String>,
}

/// List the sessions of every executor, the most recently changed first.
#[utoipa::path(get, path = "/api/v1/sessions", tag = "execution", params(SessionsQuery),
    responses(
        (status = 200, description = "Sessions, without their conversations", body = SessionListJson),
        (status = 400, description = "Invalid query (`agent_id`, `status`, `page_size` or `page_token`)", body = ErrorBody),
        (status = 503, description = "`unavailable`: an executor is down (the error names it; no partial list is returned), or the gateway has none", body = ErrorBody),
        (status = 504, description = "`timeout`", body = ErrorBody)))]
#[instrument(level = "debug", skip_all)]
pub async fn list_sessions(
    State(state): State<AppState>,
    QueryParams(q): QueryParams<SessionsQuery>,
) -> Result<Json<SessionListJson>, RestError> {
    if let Some(id) = &q.agent_id {
        crate::extract::check_agent_id(id)?;
    }
    let page_size = taskforce_proto::page_token::page_size(
        q.page_size
            .unwrap_or(taskforce_proto::page_token::DEFAULT_SESSION_PAGE_SIZE),
    )?;
    let page_token = q.page_token.unwrap_or_default();
    // Checked here too, so a bad token is one 400, not one per executor.
    taskforce_proto::page_token::parse_session(&page_token)?;
    let request = v1::ListSessionsRequest {
        agent_id: q.agent_id,
        status: q
            .status
            .map_or(v1::RunStatus::Unspecified, StatusParam::to_proto) as i32,
        page_size,
        page_token,
    };
    let pages = futures::future::join_all(state.executors.every()?.iter().map(|replica| {
        let request = state.request(request.clone());
        replica.call(|mut client| async move { client.list_sessions(request).await })
    }))
    .await;
    let pages = pages.into_iter().collect::<Result<Vec<_>, _>>()?;
    let (sessions, more) = merge(pages, page_size as usize);
    let next_page_token = sessions
        .last()
        .filter(|_| more)
        .map(|s| taskforce_proto::page_token::make_session(&s.updated_at, &s.session_id))
        .unwrap_or_default();
    Ok(Json(list_json(v1::ListSessionsResponse {
        sessions,
        next_page_token,
    })))
}

/// The JSON of a page of sessions (also the CLI's, from an executor's answer).
pub fn list_json(page: v1::ListSessionsResponse) -> SessionListJson {
    SessionListJson {
        sessions: page.sessions.into_iter().map(summary_json).collect(),
        next_page_token: (!page.next_page_token.is_empty()).then_some(page.next_page_token),
    }
}

/// The first `size` sessions of the executors' pages in the list's order, and whether more
/// follow (some executor had more, or their pages hold more than `size` together).
fn merge(pages: Vec<v1::ListSessionsResponse>, size: usize) -> (Vec<v1::SessionSummary>, bool) {
    let mut more = false;
    let mut all = Vec::new();
    for page in pages {
        more |= !page.next_page_token.is_empty();
        all.extend(page.sessions);
    }
    all.sort_unstable_by(|a, b| {
        (&b.updated_at, &b.session_id).cmp(&(&a.updated_at, &a.session_id))
    });
    if all.len() > size {
        all.truncate(size);
        more = true;
    }
    (all, more)
}

fn summary_json(s: v1::SessionSummary) -> SessionSummaryJson {
    SessionSummaryJson {
        status: status_name(s.status).to_owned(),
        question: s.pending_question.map(|q| QuestionSummaryJson {
            call_id: q.call_id,
            question: q.question,
        }),
        model: (!s.model.is_empty()).then_some(s.model),
        error: s.error.map(RunErrorJson::from),
        session_id: s.session_id,
        agent_id: s.agent_id,
        mission: s.mission,
        created_at: s.created_at,
        updated_at: s.updated_at,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(sessions: &[(&str, &str)], more: bool) -> v1::ListSessionsResponse {
        v1::ListSessionsResponse {
            sessions: sessions
                .iter()
                .map(|(id, at)| v1::SessionSummary {
                    session_id: (*id).into(),
                    updated_at: (*at).into(),
                    ..Default::default()
                })
                .collect(),
            next_page_token: if more { "s:x/y".into() } else { String::new() },
        }
    }

    fn ids(sessions: &[v1::SessionSummary]) -> Vec<&str> {
        sessions.iter().map(|s| s.session_id.as_str()).collect()
    }

    #[test]
    fn executors_pages_merge_into_one_in_the_shared_order() {
        let a = page(
            &[
                ("a3", "2026-11-29T12:00:03Z"),
                ("a1", "2026-11-29T12:00:01Z"),
            ],
            false,
        );
        let b = page(
            &[
                ("b4", "2026-11-29T12:00:04Z"),
                ("b2", "2026-11-29T12:00:01Z"),
            ],
            false,
        );
        let (merged, more) = merge(vec![a.clone(), b.clone()], 10);
        // Equal times: the larger id first.
        assert_eq!((ids(&merged), more), (vec!["b4", "a3", "b2", "a1"], false));
        // Cut to the page: more follow.
        let (merged, more) = merge(vec![a.clone(), b], 3);
        assert_eq!((ids(&merged), more), (vec!["b4", "a3", "b2"], true));
        // An executor with more pages: more follow even if this page is not full.
        let c = page(&[("c5", "2026-11-29T12:00:05Z")], true);
        let (merged, more) = merge(vec![a, c], 10);
        assert_eq!((ids(&merged), more), (vec!["c5", "a3", "a1"], true));
    }
}
