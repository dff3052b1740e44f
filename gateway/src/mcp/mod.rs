//! The MCP server (seed 001): tools `list_agents` and `show_agent` over the registry, with
//! workspace metadata, served over streamable HTTP at `/mcp` and over stdio
//! (`gateway --mcp-stdio`).
//!
//! Tool results are structured content (with the same JSON as text, for older clients) that
//! matches the declared output schema. Unknown agents, invalid names and invalid filters are tool
//! errors (`isError: true`) whose text names the problem; metadata problems never fail a tool.
//!
//! # Layout
//! - this file: the server and its tools.
//! - [`view`]: tool inputs and outputs, and their construction from registry messages.
//! - [`transport`]: the streamable HTTP service (Host and Origin checks) and the JSON-RPC
//!   message check both transports share.
//! - [`stdio`]: stdio mode, each line checked like a request to `/mcp`.

pub mod stdio;
pub mod transport;
pub mod view;

use futures::StreamExt;
use rmcp::{
    ErrorData, Json, RoleServer, ServerHandler,
    handler::server::{router::tool::ToolRouter, tool::ToolCallContext, wrapper::Parameters},
    model::{
        CallToolRequestParams, CallToolResponse, ContentBlock, Implementation, ServerCapabilities,
        ServerConfig,
    },
    service::RequestContext,
    tool, tool_handler, tool_router,
};
use taskforce_proto::{error::ErrorKind, ids, v1};
use taskforce_runtime::telemetry::RequestSpan;
use tracing::{error, instrument, warn};

use crate::{error::RestError, state::AppState};
use view::{
    AgentFacts, ListAgentsArgs, ListAgentsOutput, ShowAgentArgs, ShowAgentOutput,
    parse_status_filter,
};

pub use stdio::serve_stdio;
pub use transport::{check, check_message, cors, http_service};

/// How many `GetAgentMetadata` calls `list_agents` keeps in flight.
pub const METADATA_CONCURRENCY: usize = 16;

/// What the server tells clients about itself at initialisation.
const INSTRUCTIONS: &str = "Taskforce agents. `list_agents` lists agents (filter by \
    `status_filter` idle|busy and `project_filter`) with the workspace metadata fields marked for \
    lists; `show_agent` shows one agent with every metadata field, its error and its schema.";

/// The MCP server: a registry client and the tool router. Cheap to clone (one per HTTP request).
#[derive(Clone)]
pub struct TaskforceMcp {
    state: AppState,
    tool_router: ToolRouter<Self>,
}

/// A tool error's text for a registry error.
fn registry_error(status: tonic::Status, agent_name: &str) -> String {
    let e = RestError::from(status).0;
    match e.kind {
        ErrorKind::NotFound => format!(
            "AgentNotFoundError: no agent named {agent_name:?}; list_agents shows the agents that exist"
        ),
        ErrorKind::InvalidArgument => format!("ValidationError: {}", e.message),
        _ => e.message,
    }
}

#[tool_router]
impl TaskforceMcp {
    /// A server over `state`'s registry channel.
    pub fn new(state: AppState) -> Self {
        Self {
            state,
            tool_router: Self::tool_router(),
        }
    }

    /// Show one agent with its full workspace metadata.
    #[tool(
        description = "Show one agent: status, role, project, last task, timestamps and its \
            workspace metadata (every field with value, error and schema). `agent_name` is the \
            agent's id as list_agents shows it.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    #[instrument(level = "debug", skip_all, fields(agent_name = %args.agent_name))]
    pub async fn show_agent(
        &self,
        Parameters(args): Parameters<ShowAgentArgs>,
    ) -> Result<Json<ShowAgentOutput>, String> {
        let name = args.agent_name;
        ids::validate_agent_id(&name).map_err(|e| {
            format!(
                "ValidationError: invalid agent_name {:?}: {e} (names match [a-z0-9][a-z0-9-_]{{2,63}})",
                crate::chat::short(&name, 80)
            )
        })?;
        let mut agents = self.state.registry.clone();
        let mut metadata = self.state.registry.clone();
        let get = agents.get_agent(self.state.request(v1::GetAgentRequest {
            agent_id: name.clone(),
        }));
        // Asked together: the metadata is usually the slow part, and an unknown agent only costs
        // one more cheap NOT_FOUND.
        let meta = metadata.get_agent_metadata(self.state.request(v1::GetAgentMetadataRequest {
            agent_id: name.clone(),
            force_refresh: false,
        }));
        let (agent, meta) = tokio::join!(get, meta);
        let agent = agent.map_err(|s| registry_error(s, &name))?.into_inner();
        let facts = AgentFacts::from_proto(agent).ok_or_else(|| {
            error!(agent_id = %name, "registry returned an agent without a definition");
            "internal error; see the gateway log".to_owned()
        })?;
        let fields = match meta {
            Ok(m) => m.into_inner().fields,
            Err(status) => {
                warn!(agent_id = %name, code = ?status.code(), error = %status.message(), "metadata unavailable; showing none");
                Vec::new()
            }
        };
        Ok(Json(ShowAgentOutput {
            agent: facts.into_detail(fields),
        }))
    }

    /// List agents with their list-view metadata.
    #[tool(
        description = "List agents, optionally only those with `status_filter` (idle or busy) \
            and `project_filter` (exact project name). Each agent carries `metadata_count` (all \
            workspace metadata fields) and `metadata` (values of the fields marked \
            include_in_list). `total_count` is the number of agents returned.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    #[instrument(level = "debug", skip_all)]
    pub async fn list_agents(
        &self,
        Parameters(args): Parameters<ListAgentsArgs>,
    ) -> Result<Json<ListAgentsOutput>, String> {
        let status = args
            .status_filter
            .as_deref()
            .map(parse_status_filter)
            .transpose()?;
        let project = args.project_filter.as_deref();
        let agents = self.all_agents().await?;
        let selected: Vec<AgentFacts> = agents
            .into_iter()
            .filter_map(AgentFacts::from_proto)
            .filter(|a| a.matches(status, project))
            .collect();
        let summaries: Vec<_> = futures::stream::iter(selected)
            .map(|facts| async move {
                let fields = self.metadata_of(&facts).await;
                facts.into_summary(fields)
            })
            .buffered(METADATA_CONCURRENCY)
            .collect()
            .await;
        Ok(Json(ListAgentsOutput {
            total_count: summaries.len(),
            agents: summaries,
        }))
    }
}

impl TaskforceMcp {
    /// Every agent, page by page.
    async fn all_agents(&self) -> Result<Vec<v1::Agent>, String> {
        self.state
            .list_agents(v1::AgentSource::Unspecified, None, String::new())
            .await
            .map(|(agents, _)| agents)
            .map_err(|e| e.0.message)
    }

    /// The metadata fields of one listed agent; empty without a workspace or on any error.
    async fn metadata_of(&self, facts: &AgentFacts) -> Vec<v1::MetadataField> {
        if !facts.has_workspace {
            return Vec::new();
        }
        let req = v1::GetAgentMetadataRequest {
            agent_id: facts.name.clone(),
            force_refresh: false,
        };
        match self
            .state
            .registry
            .clone()
            .get_agent_metadata(self.state.request(req))
            .await
        {
            Ok(m) => m.into_inner().fields,
            Err(status) => {
                warn!(agent_id = %facts.name, code = ?status.code(), error = %status.message(), "metadata unavailable; listing none");
                Vec::new()
            }
        }
    }
}

/// What rmcp's tool router puts before a tool error when the arguments do not deserialize.
const BAD_ARGUMENTS: &str = "failed to deserialize parameters:";

/// A tool result whose arguments did not deserialize (missing `agent_name`, a number for a
/// filter) is labelled `ValidationError`, like every other bad argument (seed 001).
fn labelled(mut response: CallToolResponse) -> CallToolResponse {
    if let CallToolResponse::Complete(result) = &mut response
        && result.is_error == Some(true)
        && let Some(ContentBlock::Text(text)) = result.content.first_mut()
        && let Some(problem) = text.text.strip_prefix(BAD_ARGUMENTS)
    {
        text.text = format!("ValidationError: invalid arguments:{problem}");
    }
    response
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for TaskforceMcp {
    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        // The HTTP request's span (none over stdio, or without trace export): the tool's calls
        // to the registry continue its trace. rmcp runs the call in a task of its own.
        let span = context
            .extensions
            .get::<http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<RequestSpan>())
            .map_or_else(tracing::Span::none, |s| s.0.clone());
        let call = ToolCallContext::new(self, request, context);
        tracing::Instrument::instrument(self.tool_router.call(call), span)
            .await
            .map(labelled)
    }

    /// Every tool, on the one page there is. This server hands out no cursor, so any cursor is
    /// invalid: `-32602`, as MCP's "Pagination" says (rmcp's own list ignores it).
    async fn list_tools(
        &self,
        request: Option<rmcp::model::PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListToolsResult, ErrorData> {
        if let Some(cursor) = request.and_then(|r| r.cursor) {
            return Err(ErrorData::invalid_params(
                format!("invalid cursor {cursor:?}: tools/list has one page and gives no cursors"),
                None,
            ));
        }
        let result = rmcp::model::ListToolsResult::with_all_items(self.tool_router.list_all());
        // Cache hints only for the protocol version that has them, as rmcp answers.
        Ok(
            if context
                .protocol_version()
                .is_some_and(|v| v >= rmcp::model::ProtocolVersion::V_2026_07_28)
            {
                result
                    .with_ttl_ms(0)
                    .with_cache_scope(rmcp::model::CacheScope::Public)
            } else {
                result
            },
        )
    }

    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(
                Implementation::new("taskforce-gateway", env!("CARGO_PKG_VERSION"))
                    .with_title("Taskforce"),
            )
            .with_instructions(INSTRUCTIONS)
    }
}
