//! The OpenAPI 3 document of every route, generated with utoipa from the handlers' annotations
//! and rendered once at start-up.

use axum::{
    body::Bytes,
    extract::State,
    http::{HeaderValue, header},
    response::{IntoResponse, Response},
};
use utoipa::{OpenApi, ToSchema};

use crate::{agents, chat, execute, health, metadata, registry::AppState, tools};

/// Every 4xx/5xx body. `error` is one of `invalid_argument`, `invalid_tools`,
/// `invalid_mcp_tools`, `invalid_mcp_config`, `invalid_subagents`, `not_found`,
/// `already_exists`, `version_conflict`, `read_only`, `session_conflict`, `payload_too_large`,
/// `method_not_allowed`, `unavailable`, `timeout`, `resource_exhausted`, `unauthenticated`,
/// `permission_denied`, `internal`.
#[derive(Debug, ToSchema)]
#[schema(example = json!({
    "error": "invalid_tools",
    "message": "Unknown tool(s) in tool_allowlist",
    "invalid_tools": ["foo_tool"],
    "available_tools": ["web_search", "web_fetch", "file_read"]
}))]
pub struct ErrorBody {
    /// The error code.
    pub error: String,
    /// A sentence that names the problem.
    pub message: String,
    /// Field problems of a 400.
    pub details: Option<Vec<FieldViolation>>,
    /// `invalid_tools` / `invalid_mcp_tools`: the names that are not offered.
    pub invalid_tools: Option<Vec<String>>,
    /// `invalid_tools` / `invalid_mcp_tools`: the names that are.
    pub available_tools: Option<Vec<String>>,
    /// `invalid_subagents`: the `subagents` entries that name no known agent.
    pub invalid_subagents: Option<Vec<String>>,
    /// `invalid_subagents`: the agents that could be named (sorted; at most 100).
    pub available_agents: Option<Vec<String>>,
}

/// One bad field.
#[derive(Debug, ToSchema)]
pub struct FieldViolation {
    /// The field, e.g. `name` or `mcp_servers[0]`.
    pub field: String,
    /// What is wrong with it.
    pub description: String,
}

/// The document.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "Taskforce gateway",
        description = "REST front door over the Taskforce registry: custom and profile agents, workspace metadata, the tool catalog, runs over the executor (JSON or Server-Sent Events), probes. The MCP server (tools list_agents and show_agent) is at /mcp (streamable HTTP)."
    ),
    paths(
        tools::list_tools,
        agents::create_agent,
        agents::list_agents,
        agents::get_agent,
        agents::update_agent,
        agents::delete_agent,
        agents::validate_agent,
        metadata::get_agent_metadata,
        tools::list_diagnostics,
        execute::execute,
        execute::execute_stream,
        execute::answer,
        execute::get_session,
        execute::cancel,
        execute::get_plan,
        chat::agent_stream,
        chat::plain_stream,
        health::healthz,
        health::readyz,
        crate::metrics,
        openapi_json,
    ),
    components(schemas(ErrorBody, FieldViolation, agents::SourceParam)),
    modifiers(&Security),
    tags(
        (name = "agents", description = "Custom agents (editable) and profile agents (read-only)"),
        (name = "execution", description = "Running agents: missions, event streams (SSE), answers, cancellation"),
        (name = "tools", description = "The tool catalog allowlists are checked against"),
        (name = "chat", description = "Seed 004's chat endpoints: the chat agent or the plain LLM in the chat UI's SSE framing"),
        (name = "ops", description = "Probes and this document")
    )
)]
pub struct ApiDoc;

/// The `bearer` security scheme, and on every operation that is not public the scope it needs
/// (from [`crate::access`], the policy the gateway enforces) with its 401 and 403 answers.
struct Security;

impl utoipa::Modify for Security {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        use taskforce_runtime::auth::Access;
        use utoipa::openapi::{
            ContentBuilder, Ref, ResponseBuilder,
            security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme},
        };
        doc.components
            .get_or_insert_with(Default::default)
            .add_security_scheme(
                "bearer",
                SecurityScheme::Http(
                    HttpBuilder::new()
                        .scheme(HttpAuthScheme::Bearer)
                        .description(Some(
                            "An API key as `Authorization: Bearer <key>`, required when the \
                             gateway has keys configured (`TASKFORCE_API_KEYS_FILE`). Each \
                             operation lists the scope it needs: read, write or execute \
                             (admin holds all three).",
                        ))
                        .build(),
                ),
            );
        let refusal = |description: &str| {
            ResponseBuilder::new()
                .description(description)
                .content(
                    "application/json",
                    ContentBuilder::new()
                        .schema(Some(Ref::from_schema_name("ErrorBody")))
                        .build(),
                )
                .build()
        };
        for (path, item) in &mut doc.paths.paths {
            let operations = [
                (axum::http::Method::GET, &mut item.get),
                (axum::http::Method::PUT, &mut item.put),
                (axum::http::Method::POST, &mut item.post),
                (axum::http::Method::DELETE, &mut item.delete),
                (axum::http::Method::PATCH, &mut item.patch),
            ];
            for (method, operation) in operations {
                let Some(op) = operation else { continue };
                let scope = match crate::access(&method, path) {
                    Access::Public => continue,
                    Access::AnyKey => "",
                    Access::Needs(scope) => scope.as_str(),
                };
                let scopes: &[&str] = if scope.is_empty() { &[] } else { &[scope] };
                op.security = Some(vec![SecurityRequirement::new(
                    "bearer",
                    scopes.iter().copied(),
                )]);
                op.responses.responses.insert(
                    "401".to_owned(),
                    refusal("`unauthenticated`: no API key, or not a valid one (with `WWW-Authenticate`)").into(),
                );
                op.responses.responses.insert(
                    "403".to_owned(),
                    refusal(&format!(
                        "`permission_denied`: the API key lacks the `{scope}` scope"
                    ))
                    .into(),
                );
            }
        }
    }
}

/// The OpenAPI 3 document of the gateway (pre-rendered at start-up).
#[utoipa::path(get, path = "/openapi.json", tag = "ops",
    responses((status = 200, description = "This document", content_type = "application/json")))]
pub async fn openapi_json(State(state): State<AppState>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        state.openapi,
    )
        .into_response()
}

/// The document as JSON bytes.
pub fn render() -> Bytes {
    // Serialising the generated document cannot fail; an empty object is the fallback.
    Bytes::from(
        ApiDoc::openapi()
            .to_json()
            .unwrap_or_else(|_| "{}".to_owned()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn every_operation_but_the_public_ones_states_its_scope_and_refusals() {
        let doc: Value = serde_json::from_slice(&render()).expect("JSON");
        assert_eq!(
            doc["components"]["securitySchemes"]["bearer"]["scheme"],
            "bearer"
        );
        let paths = doc["paths"].as_object().expect("paths");
        for (path, item) in paths {
            for (method, op) in item.as_object().expect("operations") {
                let public =
                    ["/healthz", "/readyz", "/openapi.json", "/metrics"].contains(&path.as_str());
                assert_eq!(op["security"].is_array(), !public, "{method} {path}");
                assert_eq!(
                    op["responses"]["401"].is_object(),
                    !public,
                    "{method} {path}"
                );
            }
        }
        let scope =
            |path: &str, method: &str| paths[path][method]["security"][0]["bearer"][0].clone();
        assert_eq!(scope("/api/v1/agents", "get"), "read");
        assert_eq!(scope("/api/v1/agents", "post"), "write");
        assert_eq!(scope("/api/v1/agents/{agent_id}", "delete"), "write");
        assert_eq!(scope("/api/v1/agents:validate", "post"), "read");
        assert_eq!(scope("/api/v1/agents/{agent_id}/metadata", "get"), "read");
        assert_eq!(scope("/api/v1/execute/stream", "post"), "execute");
        assert_eq!(
            scope("/api/v1/sessions/{session_id}/answer", "post"),
            "execute"
        );
        assert_eq!(scope("/api/v1/sessions/{session_id}", "get"), "read");
        assert_eq!(scope("/ai/agent/stream", "post"), "execute");
    }

    #[test]
    fn every_route_is_documented_with_errors() {
        let doc: Value = serde_json::from_slice(&render()).expect("valid JSON");
        assert!(doc["openapi"].as_str().is_some_and(|v| v.starts_with("3.")));
        let paths = &doc["paths"];
        for (path, method) in [
            ("/api/v1/tools", "get"),
            ("/api/v1/agents", "get"),
            ("/api/v1/agents", "post"),
            ("/api/v1/agents/{agent_id}", "get"),
            ("/api/v1/agents/{agent_id}", "put"),
            ("/api/v1/agents/{agent_id}", "delete"),
            ("/api/v1/agents:validate", "post"),
            ("/api/v1/agents/{agent_id}/metadata", "get"),
            ("/api/v1/diagnostics", "get"),
            ("/openapi.json", "get"),
            ("/healthz", "get"),
            ("/readyz", "get"),
            ("/api/v1/execute", "post"),
            ("/api/v1/execute/stream", "post"),
            ("/api/v1/sessions/{session_id}/answer", "post"),
            ("/api/v1/sessions/{session_id}/cancel", "post"),
            ("/api/v1/sessions/{session_id}/plan", "get"),
        ] {
            assert!(paths[path][method].is_object(), "{method} {path} missing");
        }
        assert!(paths["/api/v1/agents/{agent_id}"]["get"]["responses"]["404"].is_object());
        assert!(paths["/api/v1/agents"]["post"]["responses"]["409"].is_object());
        for schema in [
            "ErrorBody",
            "AgentJson",
            "CustomAgentJson",
            "ProfileAgentJson",
            "AgentRequest",
            "ToolJson",
            "AgentMetadataJson",
            "MetadataFieldJson",
            "ExecuteBody",
            "ExecuteResultJson",
            "AnswerBody",
            "QuestionItemJson",
            "SessionPlanJson",
            "PlanTaskJson",
        ] {
            assert!(
                doc["components"]["schemas"][schema].is_object(),
                "schema {schema} missing"
            );
        }
        let request = &doc["components"]["schemas"]["AgentRequest"]["properties"];
        assert!(request["_source"].is_null() && request["source"].is_null());
        assert!(request["subagents"].is_object() && request["model"].is_object());
        let answer = &doc["components"]["schemas"]["AnswerBody"]["properties"];
        assert!(answer["answers"].is_object() && answer["answer"].is_object());
        let plan = &paths["/api/v1/sessions/{session_id}/plan"]["get"]["responses"];
        for status in ["200", "400", "404", "503"] {
            assert!(plan[status].is_object(), "plan {status}");
        }
        let stream = paths["/api/v1/execute/stream"]["post"]["responses"]["200"]["description"]
            .as_str()
            .unwrap_or_default();
        for event in [
            "delegation_start",
            "delegation_end",
            "patch_applied",
            "patch_rejected",
            "plan_updated",
        ] {
            assert!(stream.contains(event), "{event} not listed: {stream}");
        }
    }
}
