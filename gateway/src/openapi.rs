//! The OpenAPI 3 document of every route, generated with utoipa from the handlers' annotations
//! and rendered once, on first use.

use std::sync::LazyLock;

use axum::{
    body::Bytes,
    http::{HeaderValue, header},
    response::{IntoResponse, Response},
};
use utoipa::OpenApi;

use crate::{
    agents, chat,
    error::{ErrorBody, FieldViolation},
    execute, health, metadata, sessions,
    sse::SseEvent,
    tools,
};

/// The document.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "Taskforce gateway",
        description = "REST front door over the Taskforce registry and executors: custom and profile agents, workspace metadata, the tool catalog, runs and their sessions (JSON or Server-Sent Events), the chat endpoints, probes. The MCP server (tools list_agents and show_agent) is at /mcp (streamable HTTP)."
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
        sessions::list_sessions,
        execute::get_session,
        execute::delete_session,
        execute::cancel,
        execute::get_plan,
        chat::agent_stream,
        chat::plain_stream,
        health::healthz,
        health::readyz,
        crate::metrics,
        openapi_json,
    ),
    components(schemas(ErrorBody, FieldViolation, SseEvent, agents::SourceParam)),
    modifiers(&Security),
    tags(
        (name = "agents", description = "Custom agents (editable) and profile agents (read-only)"),
        (name = "execution", description = "Running agents: missions, event streams (SSE), answers, cancellation"),
        (name = "tools", description = "The tool catalog allowlists are checked against"),
        (name = "chat", description = "The chat endpoints: the chat agent or the plain LLM in the chat UI's SSE framing"),
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
                             operation lists the scope it needs: read, write, execute or, to \
                             list every session, admin (which holds all of them).",
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

/// The document, rendered on first use.
static DOCUMENT: LazyLock<Bytes> = LazyLock::new(render);

/// The OpenAPI 3 document of the gateway (rendered once).
#[utoipa::path(get, path = "/openapi.json", tag = "ops",
    responses((status = 200, description = "This document", content_type = "application/json")))]
pub async fn openapi_json() -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        DOCUMENT.clone(),
    )
        .into_response()
}

/// The document as JSON bytes.
pub fn render() -> Bytes {
    // Serialising the generated document cannot fail; an empty object is the fallback.
    let mut doc = serde_json::to_value(ApiDoc::openapi()).unwrap_or_default();
    constraints(&mut doc);
    Bytes::from(serde_json::to_vec(&doc).unwrap_or_else(|_| b"{}".to_vec()))
}

/// An agent id: `taskforce_proto::ids::validate_agent_id`.
const AGENT_ID: &str = "^[a-z0-9][a-z0-9_-]{2,63}$";
/// A sessions list's `page_token`: `s:<RFC 3339 time>/<session id>` (a time that is no date,
/// February 30, passes the pattern and is refused by the gateway).
const SESSION_PAGE_TOKEN: &str = "^(s:[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T([01][0-9]|2[0-3]):[0-5][0-9]:([0-5][0-9]|60)([.][0-9]+)?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])/[A-Za-z0-9_-]{1,128})?$";
/// One `If-Match` value `extract::parse_if_match` takes: `*`, or one strong entity tag, quoted
/// or bare (visible ASCII without `"` and `,`).
const IF_MATCH: &str = "^[ \\t]*(?!W/)(\\*|\"[!#-+\\--~]+\"|[!#-+\\--~]+)[ \\t]*$";
/// An agent id, or empty for "not set".
const AGENT_ID_OR_EMPTY: &str = "^([a-z0-9][a-z0-9_-]{2,63})?$";

/// The rules the gateway and the services enforce that the generated schemas cannot state
/// from the Rust types, so a client (or a contract tester) knows every 400 in advance. Each
/// names where the rule is enforced.
fn constraints(doc: &mut serde_json::Value) {
    use serde_json::json;
    let merge = |target: &mut serde_json::Value, extra: serde_json::Value| {
        if let (Some(t), serde_json::Value::Object(e)) = (target.as_object_mut(), extra) {
            t.extend(e);
        }
    };
    // Path and query parameters: `extract::agent_id` (agent ids), the page tokens of agents
    // (`p:` or `c:` and the id to list after) and of sessions (`s:<updated_at>/<session id>`).
    if let Some(paths) = doc["paths"].as_object_mut() {
        for (path, item) in paths.iter_mut() {
            for op in item
                .as_object_mut()
                .into_iter()
                .flat_map(|o| o.values_mut())
            {
                // Every 429 carries `retry-after` (`error::json_response`).
                if let Some(busy) = op
                    .get_mut("responses")
                    .and_then(|r| r.get_mut("429"))
                    .and_then(|r| r.as_object_mut())
                {
                    busy.insert(
                        "headers".into(),
                        json!({"retry-after": {"required": true,
                            "description": "Seconds to wait before retrying",
                            "schema": {"type": "string", "pattern": "^[0-9]+$"}}}),
                    );
                }
                let params = op.get_mut("parameters").and_then(|p| p.as_array_mut());
                for param in params.into_iter().flatten() {
                    match (param["name"].as_str(), param["in"].as_str()) {
                        (Some("agent_id"), Some("path")) => {
                            param["schema"] = json!({"type": "string", "pattern": AGENT_ID});
                        }
                        (Some("session_id"), Some("path")) => {
                            param["schema"] =
                                json!({"type": "string", "pattern": "^[A-Za-z0-9_-]{1,128}$"});
                        }
                        (Some("If-Match"), Some("header")) => {
                            // `extract::parse_if_match`: `*`, or one strong tag, quoted or bare.
                            param["schema"] = json!({"type": "string", "pattern": IF_MATCH});
                        }
                        (Some("agent_id"), Some("query")) => {
                            param["schema"] = json!({"type": "string", "pattern": AGENT_ID});
                        }
                        // `taskforce_proto::page_token`: agents' and sessions' tokens (a
                        // session's: an RFC 3339 time, then the session id).
                        (Some("page_token"), Some("query")) if path == "/api/v1/sessions" => {
                            param["schema"] = json!({"type": "string",
                                "pattern": SESSION_PAGE_TOKEN});
                        }
                        (Some("page_token"), Some("query")) => {
                            param["schema"] =
                                json!({"type": "string", "pattern": "^([pc]:[\\s\\S]*)?$"});
                        }
                        _ => {}
                    }
                }
            }
        }
    }
    // Create and validate name the agent in the body (`AgentCreateRequest`); an update takes it
    // from the path.
    for path in ["/api/v1/agents", "/api/v1/agents:validate"] {
        if let Some(body) = doc["paths"][path]["post"]
            .get_mut("requestBody")
            .and_then(|b| b.get_mut("content"))
            .and_then(|c| c.get_mut("application/json"))
        {
            body["schema"] = json!({"$ref": "#/components/schemas/AgentCreateRequest"});
        }
    }
    let schemas = &mut doc["components"]["schemas"];
    // Agent bodies: `registry-svc` `definition::validate` (lengths, non-blank text, modes, model
    // aliases, sub-agent ids) and `extract` (the id).
    let text = |max: usize| json!({"minLength": 1, "maxLength": max, "pattern": "\\S"});
    let props = &mut schemas["AgentRequest"]["properties"];
    merge(
        &mut props["agent_id"],
        json!({"pattern": AGENT_ID_OR_EMPTY}),
    );
    merge(&mut props["name"], text(100));
    merge(&mut props["description"], text(500));
    merge(&mut props["system_prompt"], text(256 * 1024));
    merge(&mut props["tool_allowlist"], json!({"minItems": 1}));
    merge(
        &mut props["subagents"],
        json!({"uniqueItems": true, "items": {"type": "string", "pattern": "^[a-z0-9][a-z0-9_-]{2,57}$"}}),
    );
    // `definition::validate` and the executor: no whitespace or control characters, at most
    // 128 (empty: the default).
    let model = json!({"pattern": "^[^\\s\\u0000-\\u001f\\u007f-\\u009f]{0,128}$"});
    merge(&mut props["model"], model.clone());
    for label in ["role", "project"] {
        merge(&mut props[label], json!({"maxLength": 100}));
    }
    merge(
        &mut props["workspace"],
        json!({"maxLength": 4096, "pattern": "^[^\\u0000]*$"}),
    );
    // The read-only fields of a GET body, accepted and ignored (`model::AgentRequest`'s
    // skipped fields), so the documented GET-then-PUT round trip fits the schema.
    for read_only in [
        "source",
        "version",
        "created_at",
        "updated_at",
        "workspace_id",
        "status",
        "last_task",
    ] {
        props[read_only] = json!({"description":
            "Read-only, as a GET returns it: accepted and ignored, so a GET body can be sent back"});
    }
    merge(
        &mut schemas["AgentRequest"],
        json!({"required": ["name", "description", "system_prompt", "tool_allowlist"]}),
    );
    let mut create = schemas["AgentRequest"].clone();
    merge(
        &mut create,
        json!({"required": ["agent_id", "name", "description", "system_prompt", "tool_allowlist"]}),
    );
    merge(
        &mut create["properties"]["agent_id"],
        json!({"pattern": AGENT_ID}),
    );
    schemas["AgentCreateRequest"] = create;
    // MCP servers: `taskforce_proto::mcp_config::validate`, one branch per type.
    let none = json!({"maxLength": 0});
    let no_list = json!({"maxItems": 0});
    let no_map = json!({"maxProperties": 0});
    merge(
        &mut schemas["McpServerJson"],
        json!({"required": ["type"], "oneOf": [
            {"properties": {"type": {"const": "stdio"}, "command": {"pattern": "\\S"},
                "name": none, "url": none, "headers": no_map}, "required": ["command"]},
            {"properties": {"type": {"enum": ["http", "sse"]}, "url": {"pattern": "^https?://"},
                "name": none, "command": none, "args": no_list, "env": no_map}, "required": ["url"]},
            {"properties": {"type": {"const": "global"}, "name": {"pattern": "^[A-Za-z0-9_-]{1,64}$"},
                "command": none, "url": none, "args": no_list, "env": no_map, "headers": no_map},
                "required": ["name"]}
        ]}),
    );
    // Runs: `execute::execute_request` (a mission with text; empty ids mean "not set") and the
    // executor (session ids, confirmation ids).
    let props = &mut schemas["ExecuteBody"]["properties"];
    merge(
        &mut props["mission"],
        json!({"minLength": 1, "pattern": "\\S"}),
    );
    for id in ["agent_id", "profile"] {
        merge(&mut props[id], json!({"pattern": AGENT_ID_OR_EMPTY}));
    }
    merge(&mut props["model"], model);
    merge(
        &mut props["session_id"],
        json!({"pattern": "^[A-Za-z0-9_-]{0,128}$"}),
    );
    let confirmation = json!({"items": {"type": "string", "pattern": "^c-[0-9a-f]{12}$"}});
    merge(&mut props["confirmations"], confirmation.clone());
    merge(
        &mut schemas["AnswerBody"]["properties"]["confirmations"],
        confirmation,
    );
    // Answers: `execute::answer_request` (an answer with text, or at least one keyed answer).
    merge(
        &mut schemas["AnswerBody"],
        json!({"anyOf": [
            {"required": ["answer"], "properties": {"answer": {"pattern": "\\S"}}},
            {"required": ["answers"], "properties": {"answers": {"type": "object", "minProperties": 1}}}
        ]}),
    );
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
        assert_eq!(scope("/api/v1/agents:validate", "post"), "write");
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
        assert!(request["_source"].is_null());
        // A GET body fits the request schema (its read-only fields are any JSON, ignored).
        for read_only in [
            "source",
            "version",
            "created_at",
            "last_task",
            "workspace_id",
        ] {
            assert!(
                request[read_only].is_object() && request[read_only].get("type").is_none(),
                "{read_only}: {}",
                request[read_only]
            );
        }
        assert!(request["subagents"].is_object() && request["model"].is_object());
        let answer = &doc["components"]["schemas"]["AnswerBody"]["properties"];
        assert!(answer["answers"].is_object() && answer["answer"].is_object());
        for continued in ["mode", "confirmations", "no_tools"] {
            assert!(answer[continued].is_object(), "AnswerBody.{continued}");
        }
        assert!(answer["confirmations"]["items"]["pattern"].is_string());
        // Any JSON where any JSON comes back or is taken (not only objects).
        let schemas = &doc["components"]["schemas"];
        for (schema, field) in [("QuestionItemJson", "default"), ("PlanTaskJson", "result")] {
            assert!(
                schemas[schema]["properties"][field].get("type").is_none(),
                "{schema}.{field} is typed: {}",
                schemas[schema]["properties"][field]
            );
        }
        assert!(
            answer["answers"]["additionalProperties"]
                .get("type")
                .is_none()
        );
        assert_eq!(
            schemas["ExecuteBody"]["properties"]["model"]["pattern"],
            schemas["AgentRequest"]["properties"]["model"]["pattern"]
        );
        // The headers the responses carry.
        let busy = &paths["/api/v1/execute"]["post"]["responses"]["429"]["headers"];
        assert_eq!(busy["retry-after"]["required"], true);
        for chat in ["/ai/agent/stream", "/ai/stream"] {
            assert!(
                paths[chat]["post"]["responses"]["200"]["headers"]["x-thread-id"].is_object(),
                "{chat}"
            );
        }
        let get_params = paths["/api/v1/agents/{agent_id}"]["get"]["parameters"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert!(get_params.iter().any(|p| p["name"] == "If-None-Match"));
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
