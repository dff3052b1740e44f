//! The Taskforce wire contract, shared by every service and the gateway.
//!
//! # Layout
//! - [`v1`]: generated protobuf types and tonic clients/servers for `taskforce.v1`.
//! - [`ids`]: the agent id rule (`[a-z0-9][a-z0-9-_]{2,63}`).
//! - [`catalog`]: the native tool catalog: names, descriptions, JSON schemas, approval risk.
//! - [`error`]: error kinds with one mapping to gRPC codes and one to HTTP statuses.
//! - [`json`]: `google.protobuf.Struct` ⇄ `serde_json::Value`.
//! - [`mcp_config`]: the rules of one MCP server entry.
//! - [`mode`]: the policy modes of a run (`readOnly`, `default`, `safeWrite`).
//! - [`page_token`]: the page tokens of agent lists.
//! - [`profile`]: a profile agent said the way a custom agent says it (prompt, tools).
//!
//! No I/O and no business logic live here.

pub mod catalog;
pub mod error;
pub mod ids;
pub mod json;
pub mod mcp_config;
pub mod mode;
pub mod page_token;
pub mod profile;

/// Generated code for the `taskforce.v1` package.
#[allow(clippy::all, missing_docs)]
pub mod v1 {
    tonic::include_proto!("taskforce.v1");
}

/// The longest mission (a chat's prompt) and answer a run takes, in bytes.
pub const MAX_MISSION_BYTES: usize = 256 * 1024;

/// `text`'s first `max` characters and `…` when it is longer (the `…` not counted), cut at a
/// character: the one way previews, excerpts and labels are shortened.
pub fn cut_chars(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

/// The longest `last_task` the registry keeps, in characters: a status report's task is the
/// run's mission cut to it.
pub const MAX_LAST_TASK: usize = 2000;

/// Encoded `FileDescriptorSet` of every Taskforce proto (and its imports), for server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/taskforce_descriptor.bin"));
