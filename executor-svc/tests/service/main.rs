//! The executor service end to end, in-process: the library served on a loopback port, a fake
//! registry (one custom agent, one profile), the scripted provider, and test tools; `mcp` runs
//! real MCP servers.
//!
//! Logs show with `TEST_LOG=1`.

mod budgets;
mod fake_registry;
mod mcp;
mod registry;
mod runs;
mod sessions;
mod support;
