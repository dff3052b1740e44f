//! MCP tool discovery: start (or connect to) a server, list its tools, hang up. The connection
//! itself is [`taskforce_runtime::mcp_client`], shared with the executor.

use std::time::Duration;

use taskforce_proto::v1;
use taskforce_runtime::mcp_client;

pub use taskforce_runtime::mcp_client::{ConnectError as DiscoveryError, DiscoveredTool};

use crate::definition::McpServerConfig;

/// Lists the tools of one server, within `timeout`.
pub async fn discover(
    server: &McpServerConfig,
    timeout: Duration,
) -> Result<Vec<DiscoveredTool>, DiscoveryError> {
    let mcp_client::Connected { client, tools, .. } =
        mcp_client::connect_and_list(&v1::McpServer::from(server), timeout).await?;
    // Hanging up is best effort: the process group is killed on drop either way.
    let _ = client.cancel().await;
    Ok(tools)
}
