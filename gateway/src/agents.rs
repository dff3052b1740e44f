//! `/api/v1/agents`: create, list, get, replace, delete and validate agents.

use axum::{
    Json,
    extract::State,
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use serde::Deserialize;
use taskforce_proto::{error::ApiError, v1};
use tracing::{error, instrument};
use utoipa::{IntoParams, ToSchema};

use crate::{
    error::ErrorBody,
    error::RestError,
    extract::{AgentId, JsonBody, NoBody, NoQuery, QueryParams, expected_version},
    model::{AgentJson, AgentListJson, AgentRequest, SavedAgentJson, ValidateJson},
    read_model::Lookup,
    state::AppState,
};

/// Which agents to list.
#[derive(Debug, Clone, Copy, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum SourceParam {
    /// `configs/custom/*.yaml`.
    Custom,
    /// `configs/*.yaml`.
    Profile,
}

/// Query of `GET /api/v1/agents`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// Only agents of this source.
    source: Option<SourceParam>,
    /// Agents per page (1..1000). Without it, every agent is returned in one answer.
    #[param(minimum = 1, maximum = 1000)]
    page_size: Option<u32>,
    /// `next_page_token` of the previous page.
    page_token: Option<String>,
}

/// Query of `DELETE /api/v1/agents/{agent_id}`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct DeleteQuery {
    /// Delete only if the stored version is this one (like `If-Match`).
    expected_version: Option<String>,
}

/// The response for one registry agent: `status`, its JSON, its `ETag` ([`crate::read_model::etag`]), and with
/// `location` a `Location` header. An agent without a definition is a registry bug (500).
fn agent_response(
    status: StatusCode,
    agent: v1::Agent,
    location: bool,
) -> Result<Response, RestError> {
    if agent.kind.is_none() {
        error!(agent_id = %agent.agent_id, "registry returned an agent without a definition");
        return Err(RestError::internal());
    }
    let busy = agent.status == i32::from(v1::AgentStatus::Busy);
    let etag = HeaderValue::from_str(&crate::read_model::etag(
        &agent.version,
        busy,
        &agent.last_task,
    ))
    .ok();
    let location = location
        .then(|| HeaderValue::from_str(&format!("/api/v1/agents/{}", agent.agent_id)).ok())
        .flatten();
    let body = SavedAgentJson::from_proto(agent).ok_or_else(RestError::internal)?;
    let mut res = (status, Json(body)).into_response();
    if let Some(v) = etag {
        res.headers_mut().insert(header::ETAG, v);
    }
    if let Some(v) = location {
        res.headers_mut().insert(header::LOCATION, v);
    }
    Ok(res)
}

/// Bodies of a list up to this size are sent whole (with a `Content-Length`); larger ones in
/// pieces of about this size, each written as the connection takes it, so a client that does
/// not read holds no more than this of it (and the listed agents' shared JSON).
const LIST_CHUNK: usize = 64 * 1024;

/// A 200 with an agent list from the read model.
fn listing_response(listing: crate::read_model::Listing) -> Response {
    if listing.len_hint() <= LIST_CHUNK {
        return json_response(listing.into_vec(), None);
    }
    let chunks = futures::stream::iter(
        listing
            .chunks(LIST_CHUNK)
            .map(Ok::<_, std::convert::Infallible>),
    );
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        axum::body::Body::from_stream(chunks),
    )
        .into_response()
}

/// A 200 with JSON rendered by the read model, and its `ETag` if it has one.
fn json_response(json: Vec<u8>, etag: Option<&str>) -> Response {
    let mut res = (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        json,
    )
        .into_response();
    if let Some(v) = etag.and_then(|v| HeaderValue::from_str(v).ok()) {
        res.headers_mut().insert(header::ETAG, v);
    }
    res
}

/// Create a custom agent.
#[utoipa::path(post, path = "/api/v1/agents", tag = "agents", request_body = AgentRequest,
    responses(
        (status = 201, description = "Created; `warnings` when the save could not check something (as `:validate` says)", body = SavedAgentJson, headers(
            ("Location" = String, description = "/api/v1/agents/{agent_id}"),
            ("ETag" = String, description = "`\"<version>\"` (a new agent has not run)"))),
        (status = 400, description = "Invalid body, id, tools or MCP configuration", body = ErrorBody),
        (status = 409, description = "`already_exists`", body = ErrorBody),
        (status = 413, description = "`payload_too_large`", body = ErrorBody),
        (status = 503, description = "`unavailable`: the registry is down", body = ErrorBody),
        (status = 507, description = "`quota_exceeded`: the custom agents would pass the registry's `--max-custom-agents-mb`; nothing was written", body = ErrorBody),
        (status = 504, description = "`timeout`", body = ErrorBody)))]
#[instrument(level = "debug", skip_all, fields(agent_id = %body.agent_id))]
pub async fn create_agent(
    State(state): State<AppState>,
    QueryParams(NoQuery {}): QueryParams<NoQuery>,
    headers: HeaderMap,
    JsonBody(body): JsonBody<AgentRequest>,
) -> Result<Response, RestError> {
    crate::extract::create_preconditions(&headers)?;
    let req = v1::CreateAgentRequest {
        spec: Some(body.into_spec(None)),
    };
    let agent = state
        .registry
        .clone()
        .create_agent(state.request(req))
        .await
        .map_err(RestError::from_write)?
        .into_inner();
    state.agents.wait_for(agent.revision).await;
    agent_response(StatusCode::CREATED, agent, true)
}

/// List agents: profile agents first, then custom agents, each ordered by id.
#[utoipa::path(get, path = "/api/v1/agents", tag = "agents", params(ListQuery),
    responses(
        (status = 200, description = "Agents", body = AgentListJson),
        (status = 400, description = "Invalid query", body = ErrorBody),
        (status = 503, description = "`unavailable`", body = ErrorBody),
        (status = 504, description = "`timeout`", body = ErrorBody)))]
#[instrument(level = "debug", skip_all)]
pub async fn list_agents(
    State(state): State<AppState>,
    QueryParams(q): QueryParams<ListQuery>,
) -> Result<Response, RestError> {
    let source = match q.source {
        None => v1::AgentSource::Unspecified,
        Some(SourceParam::Custom) => v1::AgentSource::Custom,
        Some(SourceParam::Profile) => v1::AgentSource::Profile,
    };
    if let Some(n) = q.page_size {
        taskforce_proto::page_token::page_size(n)?;
    }
    let token = q.page_token.unwrap_or_default();
    let page_size = q.page_size.map(|n| n as usize);
    if let Lookup::Found(listing) = state.agents.list(source, page_size, &token) {
        return Ok(listing_response(listing?));
    }
    let (agents, next_page_token) = state.list_agents(source, q.page_size, token).await?;
    let agents = agents
        .into_iter()
        .filter_map(|a| {
            let id = (a.kind.is_none()).then(|| a.agent_id.clone());
            let json = AgentJson::from_proto(a);
            if let Some(id) = id {
                error!(agent_id = %id, "registry listed an agent without a definition; skipped");
            }
            json
        })
        .collect();
    Ok(Json(AgentListJson {
        agents,
        next_page_token,
    })
    .into_response())
}

/// Get one agent, custom or profile.
#[utoipa::path(get, path = "/api/v1/agents/{agent_id}", tag = "agents",
    params(
        ("agent_id" = String, Path, description = "`[a-z0-9][a-z0-9-_]{2,63}`"),
        ("If-None-Match" = Option<String>, Header, description = "ETags (weak or strong, comma separated) or `*`: a 304 when one names the agent's current ETag")),
    responses(
        (status = 200, description = "The agent", body = AgentJson,
            headers(("ETag" = String, description = "`\"<version>\"`, or `\"<version>-<hash of status and last_task>\"` once the agent has run"))),
        (status = 304, description = "Not modified: `If-None-Match` names the agent's current ETag (no body)"),
        (status = 400, description = "Invalid agent_id, or the agent's definition file is invalid (the message names the file and the problem)", body = ErrorBody),
        (status = 404, description = "`not_found`", body = ErrorBody),
        (status = 503, description = "`unavailable`", body = ErrorBody),
        (status = 504, description = "`timeout`", body = ErrorBody)))]
#[instrument(level = "debug", skip_all, fields(agent_id = %id))]
pub async fn get_agent(
    State(state): State<AppState>,
    AgentId(id): AgentId,
    headers: HeaderMap,
    QueryParams(NoQuery {}): QueryParams<NoQuery>,
) -> Result<Response, RestError> {
    // An agent the copy does not hold is asked of the registry: it knows whether a definition
    // file for it exists but is invalid (a 400 naming the problem) or there is none (404).
    let response = if let Lookup::Found(Some(agent)) = state.agents.get(&id) {
        json_response(agent.json, Some(&agent.etag))
    } else {
        let req = v1::GetAgentRequest { agent_id: id };
        let agent = state
            .registry
            .clone()
            .get_agent(state.request(req))
            .await?
            .into_inner();
        agent_response(StatusCode::OK, agent, false)?
    };
    Ok(not_modified(&headers, response))
}

/// A 304 (the ETag, no body) for a response whose ETag `If-None-Match` names (weakly, as
/// RFC 9110 §13.1.2 compares them; `*` names any), else `response`.
fn not_modified(headers: &HeaderMap, response: Response) -> Response {
    let (Some(asked), Some(etag)) = (
        headers.get(header::IF_NONE_MATCH),
        response.headers().get(header::ETAG),
    ) else {
        return response;
    };
    let (Ok(asked), Ok(current)) = (asked.to_str(), etag.to_str()) else {
        return response;
    };
    let opaque = |tag: &str| tag.trim().trim_start_matches("W/").to_owned();
    let current = opaque(current);
    if !asked
        .split(',')
        .any(|t| t.trim() == "*" || opaque(t) == current)
    {
        return response;
    }
    let mut out = Response::new(axum::body::Body::empty());
    *out.status_mut() = StatusCode::NOT_MODIFIED;
    out.headers_mut().insert(header::ETAG, etag.clone());
    out
}

/// Replace a custom agent. The path's id is authoritative.
#[utoipa::path(put, path = "/api/v1/agents/{agent_id}", tag = "agents", request_body = AgentRequest,
    params(
        ("agent_id" = String, Path, description = "`[a-z0-9][a-z0-9-_]{2,63}`"),
        ("If-Match" = Option<String>, Header, description = "`\"<version>\"` or an `ETag` of the agent: replace only that version (a tag's runtime-facts suffix is not compared)")),
    responses(
        (status = 200, description = "Replaced; `warnings` as for a create", body = SavedAgentJson,
            headers(("ETag" = String, description = "`\"<version>\"`, or `\"<version>-<hash of status and last_task>\"` once the agent has run"))),
        (status = 400, description = "Invalid id, body, tools or MCP configuration", body = ErrorBody),
        (status = 404, description = "`not_found`", body = ErrorBody),
        (status = 409, description = "`version_conflict` (stale version) or `read_only` (profile agent)", body = ErrorBody),
        (status = 413, description = "`payload_too_large`", body = ErrorBody),
        (status = 503, description = "`unavailable`", body = ErrorBody),
        (status = 507, description = "`quota_exceeded`: the update would grow the custom agents past the registry's `--max-custom-agents-mb`; nothing was replaced", body = ErrorBody),
        (status = 504, description = "`timeout`", body = ErrorBody)))]
#[instrument(level = "debug", skip_all, fields(agent_id = %id))]
pub async fn update_agent(
    State(state): State<AppState>,
    AgentId(id): AgentId,
    headers: HeaderMap,
    QueryParams(NoQuery {}): QueryParams<NoQuery>,
    JsonBody(body): JsonBody<AgentRequest>,
) -> Result<Response, RestError> {
    // As on a delete: an empty version is a check asked for without its version (a script's
    // unset variable), not an update without a check (leaving it out, or null, is that).
    if body
        .expected_version
        .as_deref()
        .is_some_and(|v| v.trim().is_empty())
    {
        return Err(empty_expected_version("replace"));
    }
    let expected = expected_version(&headers, body.expected_version.as_deref())?;
    let req = v1::UpdateAgentRequest {
        agent_id: id.clone(),
        spec: Some(body.into_spec(Some(id))),
        expected_version: expected,
    };
    let agent = state
        .registry
        .clone()
        .update_agent(state.request(req))
        .await
        .map_err(RestError::from_write)?
        .into_inner();
    state.agents.wait_for(agent.revision).await;
    agent_response(StatusCode::OK, agent, false)
}

/// The 400 of an `expected_version` given empty: `what` (replace, delete) names the write.
fn empty_expected_version(what: &str) -> RestError {
    RestError(ApiError::field(
        "expected_version",
        format!("is empty; leave it out to {what} whatever version is stored"),
    ))
}

/// Delete a custom agent.
#[utoipa::path(delete, path = "/api/v1/agents/{agent_id}", tag = "agents",
    params(
        ("agent_id" = String, Path, description = "`[a-z0-9][a-z0-9-_]{2,63}`"),
        ("If-Match" = Option<String>, Header, description = "`\"<version>\"` or an `ETag` of the agent: delete only that version (a tag's runtime-facts suffix is not compared)"),
        DeleteQuery),
    responses(
        (status = 204, description = "Deleted"),
        (status = 400, description = "Invalid agent_id or If-Match", body = ErrorBody),
        (status = 404, description = "`not_found`", body = ErrorBody),
        (status = 409, description = "`version_conflict` or `read_only`", body = ErrorBody),
        (status = 503, description = "`unavailable`", body = ErrorBody),
        (status = 504, description = "`timeout`", body = ErrorBody)))]
#[instrument(level = "debug", skip_all, fields(agent_id = %id))]
pub async fn delete_agent(
    State(state): State<AppState>,
    AgentId(id): AgentId,
    headers: HeaderMap,
    QueryParams(q): QueryParams<DeleteQuery>,
    NoBody: NoBody,
) -> Result<StatusCode, RestError> {
    // `?expected_version=` is a check asked for without its version (a script's unset
    // variable), refused as an empty `If-Match` is, not a delete without a check.
    if q.expected_version
        .as_deref()
        .is_some_and(|v| v.trim().is_empty())
    {
        return Err(empty_expected_version("delete"));
    }
    let expected = expected_version(&headers, q.expected_version.as_deref())?;
    let req = v1::DeleteAgentRequest {
        agent_id: id,
        expected_version: expected,
    };
    let deleted = state
        .registry
        .clone()
        .delete_agent(state.request(req))
        .await
        .map_err(RestError::from_write)?
        .into_inner();
    state.agents.wait_for(deleted.revision).await;
    Ok(StatusCode::NO_CONTENT)
}

/// Check a definition exactly as create would, without saving it.
#[utoipa::path(post, path = "/api/v1/agents:validate", tag = "agents", request_body = AgentRequest,
    responses(
        (status = 200, description = "Valid", body = ValidateJson),
        (status = 400, description = "Invalid body, id, tools or MCP configuration", body = ErrorBody),
        (status = 413, description = "`payload_too_large`", body = ErrorBody),
        (status = 503, description = "`unavailable`", body = ErrorBody),
        (status = 504, description = "`timeout`", body = ErrorBody)))]
#[instrument(level = "debug", skip_all, fields(agent_id = %body.agent_id))]
pub async fn validate_agent(
    State(state): State<AppState>,
    QueryParams(NoQuery {}): QueryParams<NoQuery>,
    JsonBody(body): JsonBody<AgentRequest>,
) -> Result<Json<ValidateJson>, RestError> {
    let req = v1::ValidateAgentRequest {
        spec: Some(body.into_spec(None)),
    };
    let res = state
        .registry
        .clone()
        .validate_agent(state.request(req))
        .await?
        .into_inner();
    Ok(Json(ValidateJson {
        valid: true,
        discovered_mcp_tools: res.discovered_mcp_tools,
        warnings: res.warnings,
    }))
}
