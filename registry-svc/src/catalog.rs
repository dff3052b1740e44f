//! The tool catalog: native and orchestration tools from the contract plus tools of globally
//! configured MCP servers.
//!
//! Serving the catalog never waits on MCP: a background task discovers the global servers and
//! swaps in a new snapshot. Validation of an agent's own MCP servers does discover them, bounded
//! by the discovery timeout.

use std::{
    collections::BTreeMap,
    path::Path,
    sync::{Arc, RwLock},
    time::Duration,
};

use futures::future::join_all;
use serde::Deserialize;
use taskforce_proto::{
    catalog,
    error::{ApiError, ErrorKind},
    json, v1,
};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::{
    definition::{self, CustomAgentFile, McpServerConfig},
    error::RegistryError,
    mcp,
};

/// `configs/catalog/mcp_servers.yaml`: servers whose tools every agent's catalog lists.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GlobalMcpFile {
    /// Servers by id (the id becomes `mcp_server_id`).
    #[serde(default, deserialize_with = "taskforce_proto::mcp_config::unique_map")]
    pub mcp_servers: BTreeMap<String, McpServerConfig>,
}

impl GlobalMcpFile {
    /// Reads the file; a missing file means no global servers.
    pub fn load(path: &Path) -> Result<Self, RegistryError> {
        let bad = |e: String| RegistryError::Config(format!("{}: {e}", path.display()));
        match taskforce_runtime::read_config(path) {
            Ok(text) => {
                let f: Self =
                    crate::files::yaml(text.as_bytes()).map_err(|e| bad(e.to_string()))?;
                for (id, s) in &f.mcp_servers {
                    if s.is_global() {
                        return Err(bad(format!(
                            "mcp_servers.{id}: type global names an executor's server; \
                             the catalog needs a stdio, http or sse server"
                        )));
                    }
                    definition::validate_mcp_server(s)
                        .map_err(|e| bad(format!("mcp_servers.{id}: {e}")))?;
                }
                Ok(f)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            Err(e) => Err(RegistryError::io(path, e)),
        }
    }
}

/// The catalog snapshot holder.
pub struct ToolCatalog {
    /// The native tools, then the orchestration tools (`origin: orchestration`): both fixed.
    native: Vec<v1::Tool>,
    mcp: RwLock<Arc<Vec<v1::Tool>>>,
    discovery_timeout: Duration,
}

impl ToolCatalog {
    /// A catalog with the native and orchestration tools and no MCP tools yet.
    pub fn new(discovery_timeout: Duration) -> Self {
        let pwsh = which::which("pwsh").is_ok();
        let native = catalog::native_tools()
            .into_iter()
            .map(|t| (t, "native"))
            .chain(
                catalog::orchestration_tools()
                    .into_iter()
                    .map(|t| (t, "orchestration")),
            )
            .map(|(t, origin)| v1::Tool {
                name: t.name.to_owned(),
                description: t.description.to_owned(),
                parameters_schema: Some(json::to_struct(&t.parameters_schema)),
                requires_approval: t.requires_approval,
                approval_risk_level: t.risk.as_str().to_owned(),
                origin: origin.to_owned(),
                mcp_server_id: String::new(),
                available: t.name != "powershell" || pwsh,
            })
            .collect();
        Self {
            native,
            mcp: RwLock::new(Arc::new(Vec::new())),
            discovery_timeout,
        }
    }

    /// The discovery timeout for agent MCP servers.
    pub fn discovery_timeout(&self) -> Duration {
        self.discovery_timeout
    }

    /// Every tool: native first, then orchestration, then MCP tools by server id.
    pub fn tools(&self) -> Vec<v1::Tool> {
        let mcp = self.mcp.read().map(|g| Arc::clone(&g)).unwrap_or_default();
        self.native.iter().chain(mcp.iter()).cloned().collect()
    }

    /// Discovers the global servers until `stop` fires: at once, then every `refresh`
    /// (a server that failed is retried sooner, every 30 s).
    pub async fn run_global_discovery(
        self: Arc<Self>,
        servers: BTreeMap<String, McpServerConfig>,
        refresh: Duration,
        stop: CancellationToken,
    ) {
        if servers.is_empty() {
            return;
        }
        let mut known: BTreeMap<String, Vec<v1::Tool>> = BTreeMap::new();
        loop {
            let timeout = self.discovery_timeout;
            let round = join_all(
                servers
                    .iter()
                    .map(|(id, s)| async move { (id.clone(), mcp::discover(s, timeout).await) }),
            );
            // A stop cuts a discovery short; dropping it kills the servers' process groups.
            let results = tokio::select! {
                () = stop.cancelled() => return,
                r = round => r,
            };
            let mut failed = false;
            for (id, r) in results {
                match r {
                    Ok(tools) => {
                        info!(mcp_server_id = %id, tools = tools.len(), "discovered global MCP tools");
                        known.insert(
                            id.clone(),
                            tools.into_iter().map(|t| mcp_tool(&id, t)).collect(),
                        );
                    }
                    Err(e) => {
                        failed = true;
                        warn!(mcp_server_id = %id, error = %e, "global MCP server discovery failed; keeping its last known tools");
                    }
                }
            }
            let snapshot: Vec<v1::Tool> = known.values().flatten().cloned().collect();
            if let Ok(mut g) = self.mcp.write() {
                *g = Arc::new(snapshot);
            }
            let wait = if failed {
                refresh.min(Duration::from_secs(30))
            } else {
                refresh
            };
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(wait) => {}
            }
        }
    }
}

fn mcp_tool(server_id: &str, t: mcp::DiscoveredTool) -> v1::Tool {
    v1::Tool {
        name: t.name,
        description: t.description,
        parameters_schema: Some(json::to_struct(&t.input_schema)),
        requires_approval: false,
        approval_risk_level: "MEDIUM".to_owned(),
        origin: "mcp".to_owned(),
        mcp_server_id: server_id.to_owned(),
        available: true,
    }
}

/// What MCP validation found.
#[derive(Debug, Default)]
pub struct McpCheck {
    /// Tool names discovered across the agent's servers.
    pub discovered: Vec<String>,
    /// Servers that could not be discovered, with the reason.
    pub warnings: Vec<String>,
}

/// Discovers the agent's MCP servers and checks `mcp_tool_allowlist` against them (seed 002
/// B.6): if discovery fails entirely, an empty allowlist is accepted and any other is refused.
pub async fn check_agent_mcp(
    def: &CustomAgentFile,
    timeout: Duration,
) -> Result<McpCheck, ApiError> {
    let mut check = McpCheck::default();
    if def.mcp_servers.is_empty() {
        return Ok(check);
    }
    // A global server is the executor's: the registry cannot list its tools, so an allowlist
    // naming them is checked when the executor runs the agent.
    let global = def.mcp_servers.iter().any(McpServerConfig::is_global);
    let reachable: Vec<(usize, &McpServerConfig)> = def
        .mcp_servers
        .iter()
        .enumerate()
        .filter(|(_, s)| !s.is_global())
        .collect();
    let results = join_all(reachable.iter().map(|(_, s)| mcp::discover(s, timeout))).await;
    // Each discovered name, with the servers that offer it.
    let mut offered_by: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    let (mut any_ok, mut deferred) = (false, false);
    for ((i, _), r) in reachable.iter().zip(results) {
        match r {
            Ok(tools) => {
                any_ok = true;
                for tool in tools {
                    offered_by.entry(tool.name).or_default().push(*i);
                }
            }
            // Secrets are the executor's: a server whose `${VAR}` the registry cannot expand
            // is checked, like a global one, when the executor runs the agent.
            Err(e @ mcp::DiscoveryError::Placeholder { .. }) => {
                deferred = true;
                check.warnings.push(format!(
                    "mcp_servers[{i}]: not discovered here ({e}); its tools are checked when the executor runs the agent"
                ));
            }
            Err(e) => {
                warn!(server = i, error = %e, "MCP discovery failed for an agent's server");
                check
                    .warnings
                    .push(format!("mcp_servers[{i}]: discovery failed: {e}"));
            }
        }
    }
    check.discovered = offered_by.keys().cloned().collect();
    let allow = def.mcp_allowlist();
    // A run offers the first tool of a name (its native tools first, then its servers' in
    // order): an allowlisted MCP tool that another tool shadows is never reached.
    for name in allow {
        if def.tools.allowlist.contains(name) {
            check.warnings.push(format!(
                "mcp_tool_allowlist: `{name}` is also in tool_allowlist; a run offers that tool, \
                 not the MCP server's"
            ));
        } else if let Some([first, more @ ..]) = offered_by.get(name).map(Vec::as_slice)
            && !more.is_empty()
        {
            let others: Vec<String> = more.iter().map(|i| format!("mcp_servers[{i}]")).collect();
            check.warnings.push(format!(
                "mcp_tool_allowlist: `{name}` is a tool of mcp_servers[{first}] and of {}; a run \
                 offers mcp_servers[{first}]'s only",
                others.join(", ")
            ));
        }
    }
    if allow.is_empty() {
        // Saved as asked, but said: a client that reads the allowlist as an optional narrowing
        // (seed 002) would expect the servers' tools, and gets none.
        check.warnings.push(format!(
            "mcp_tool_allowlist is empty, so the agent is offered none of its MCP servers' tools \
             ({} discovered); list the ones it may use",
            check.discovered.len()
        ));
    }
    if allow.is_empty() || global || deferred {
        return Ok(check);
    }
    if !any_ok {
        return Err(ApiError::invalid_tools(
            ErrorKind::InvalidMcpTools,
            &format!(
                "MCP discovery failed for every server, so mcp_tool_allowlist cannot be validated: {}",
                check.warnings.join("; ")
            ),
            allow,
            &[],
        ));
    }
    let unknown: Vec<String> = allow
        .iter()
        .filter(|t| !offered_by.contains_key(*t))
        .cloned()
        .collect();
    if !unknown.is_empty() {
        let mut msg = "Unknown tool(s) in mcp_tool_allowlist".to_owned();
        if !check.warnings.is_empty() {
            msg.push_str(&format!(" ({})", check.warnings.join("; ")));
        }
        return Err(ApiError::invalid_tools(
            ErrorKind::InvalidMcpTools,
            &msg,
            &unknown,
            &check.discovered,
        ));
    }
    Ok(check)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_catalog_lists_native_then_orchestration_tools_told_apart_by_origin() {
        let tools = ToolCatalog::new(Duration::from_secs(1)).tools();
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
        let want: Vec<&str> = catalog::NATIVE_TOOL_NAMES
            .into_iter()
            .chain(catalog::ORCHESTRATION_TOOL_NAMES)
            .collect();
        assert_eq!(names, want);
        for t in &tools {
            let origin = if catalog::is_native_tool(&t.name) {
                "native"
            } else {
                "orchestration"
            };
            assert_eq!(t.origin, origin, "{}", t.name);
            assert!(t.parameters_schema.is_some(), "{}", t.name);
        }
        let delegate = tools.iter().find(|t| t.name == "delegate_to_agent");
        assert!(delegate.is_some_and(|t| t.available && t.mcp_server_id.is_empty()));
    }
}
