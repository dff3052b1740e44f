//! `/api/v1/tools` (the tool catalog, seed 002) and `/api/v1/diagnostics`.

use axum::{Json, extract::State};
use serde::Serialize;
use serde_json::Value;
use taskforce_proto::{json::from_struct, v1};
use tracing::instrument;
use utoipa::ToSchema;

use crate::{
    error::ErrorBody,
    error::RestError,
    extract::{NoQuery, QueryParams},
    state::AppState,
};

/// One tool the service offers.
#[derive(Debug, Serialize, ToSchema)]
pub struct ToolJson {
    /// The name used in allowlists (case-sensitive).
    pub name: String,
    pub description: String,
    /// JSON schema of the arguments.
    #[schema(value_type = Object)]
    pub parameters_schema: Value,
    pub requires_approval: bool,
    /// `LOW`, `MEDIUM` or `HIGH`.
    pub approval_risk_level: String,
    /// `native`, `orchestration` (`delegate_to_agent`, `update_todolist`) or `mcp`.
    pub origin: String,
    /// The configured MCP server (only for `origin: mcp`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mcp_server_id: Option<String>,
    /// False when the tool cannot run on this host (e.g. `powershell` without `pwsh`).
    pub available: bool,
}

impl From<v1::Tool> for ToolJson {
    fn from(t: v1::Tool) -> Self {
        let mcp_server_id = (t.origin == "mcp").then_some(t.mcp_server_id);
        Self {
            name: t.name,
            description: t.description,
            parameters_schema: t
                .parameters_schema
                .as_ref()
                .map_or_else(|| Value::Object(Default::default()), from_struct),
            requires_approval: t.requires_approval,
            approval_risk_level: t.approval_risk_level,
            origin: t.origin,
            mcp_server_id,
            available: t.available,
        }
    }
}

/// `GET /api/v1/tools`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ToolListJson {
    pub tools: Vec<ToolJson>,
}

/// A YAML file that was skipped as invalid.
#[derive(Debug, Serialize, ToSchema)]
pub struct DiagnosticJson {
    /// Path relative to the config directory.
    pub path: String,
    /// Why it was skipped.
    pub error: String,
}

/// `GET /api/v1/diagnostics`.
#[derive(Debug, Serialize, ToSchema)]
pub struct DiagnosticsJson {
    pub diagnostics: Vec<DiagnosticJson>,
}

/// The tool catalog: native tools, orchestration tools and tools of globally configured MCP
/// servers. Never waits on MCP discovery.
#[utoipa::path(get, path = "/api/v1/tools", tag = "tools",
    responses(
        (status = 200, description = "The catalog", body = ToolListJson),
        (status = 503, description = "`unavailable`", body = ErrorBody),
        (status = 504, description = "`timeout`", body = ErrorBody)))]
#[instrument(level = "debug", skip_all)]
pub async fn list_tools(
    State(state): State<AppState>,
    QueryParams(NoQuery {}): QueryParams<NoQuery>,
) -> Result<Json<ToolListJson>, RestError> {
    let res = state
        .registry
        .clone()
        .list_tools(state.request(v1::ListToolsRequest {}))
        .await?
        .into_inner();
    Ok(Json(ToolListJson {
        tools: res.tools.into_iter().map(ToolJson::from).collect(),
    }))
}

/// Files in the config directory that could not be loaded, and why.
#[utoipa::path(get, path = "/api/v1/diagnostics", tag = "agents",
    responses(
        (status = 200, description = "Skipped files", body = DiagnosticsJson),
        (status = 503, description = "`unavailable`", body = ErrorBody),
        (status = 504, description = "`timeout`", body = ErrorBody)))]
#[instrument(level = "debug", skip_all)]
pub async fn list_diagnostics(
    State(state): State<AppState>,
    QueryParams(NoQuery {}): QueryParams<NoQuery>,
) -> Result<Json<DiagnosticsJson>, RestError> {
    let res = state
        .registry
        .clone()
        .list_diagnostics(state.request(v1::ListDiagnosticsRequest {}))
        .await?
        .into_inner();
    Ok(Json(DiagnosticsJson {
        diagnostics: res
            .diagnostics
            .into_iter()
            .map(|d| DiagnosticJson {
                path: d.path,
                error: d.error,
            })
            .collect(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use taskforce_proto::json::to_struct;

    fn tool(origin: &str, server: &str) -> v1::Tool {
        v1::Tool {
            name: "web_search".into(),
            description: "Search the web".into(),
            parameters_schema: Some(to_struct(&json!({"type": "object", "required": ["query"]}))),
            requires_approval: false,
            approval_risk_level: "LOW".into(),
            origin: origin.into(),
            mcp_server_id: server.into(),
            available: true,
        }
    }

    #[test]
    fn native_tools_have_no_server_id() {
        let v = serde_json::to_value(ToolJson::from(tool("native", ""))).expect("serialisable");
        assert_eq!(
            v,
            json!({
                "name": "web_search",
                "description": "Search the web",
                "parameters_schema": {"type": "object", "required": ["query"]},
                "requires_approval": false,
                "approval_risk_level": "LOW",
                "origin": "native",
                "available": true
            })
        );
    }

    #[test]
    fn mcp_tools_name_their_server() {
        let v = serde_json::to_value(ToolJson::from(tool("mcp", "time"))).expect("serialisable");
        assert_eq!(v["mcp_server_id"], "time");
        assert_eq!(v["origin"], "mcp");
    }

    #[test]
    fn a_missing_schema_is_an_empty_object() {
        let t = v1::Tool {
            parameters_schema: None,
            ..tool("native", "")
        };
        assert_eq!(ToolJson::from(t).parameters_schema, json!({}));
    }
}
