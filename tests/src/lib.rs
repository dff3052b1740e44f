//! Harness for the end-to-end tests and benchmarks: it starts the real `registry-svc`,
//! `executor-svc` and `gateway` binaries as child processes on loopback ports chosen by the
//! kernel (the registry alone, with the gateway, or all three, with one executor or several),
//! each stack in its own temporary directory, and hands back typed clients.
//!
//! Environment:
//! - `TASKFORCE_BIN_DIR`: where the built binaries are (default: derived from the running
//!   executable, `target/debug/deps/e2e-…` → `target/debug`).
//! - `TASKFORCE_TOOLS_DIR`: where `scripts/install-test-deps.sh` put grpcurl and the MCP servers
//!   (default: `<workspace>/.tools`).
//! - `TEST_LOG=1`: children log to this process's stderr instead of a file in the temp dir
//!   (the file's tail is printed when a test fails).
//! - `TEST_KEEP_DIRS=1`: keep the temp dirs of stacks for inspection.
//!
//! # Layout
//! - [`paths`]: the workspace, the built binaries, the test tools, the sample configs.
//! - [`process`]: a child process with its log, killed on drop.
//! - [`wait`]: polling with a deadline instead of sleeping.
//! - [`stack`]: [`Stack`] and [`spawn_stack`]: registry, gateway and executors over one temp
//!   dir; `stack::executor` holds the executor's options, its client and its restart.
//! - [`scripts`]: scripted models, one provider and alias per script.
//! - [`mcp`]: real MCP servers for tests (streamable HTTP server-everything, mcp-server-time).
//! - [`otlp`]: an OTLP trace receiver, for the tracing test and the telemetry benchmark.
//!
//! The tests themselves are one binary, `tests/e2e/`; the benchmark is `src/bin/bench/`.

pub mod mcp;
pub mod otlp;
pub mod paths;
pub mod process;
pub mod scripts;
pub mod stack;
pub mod wait;

pub use stack::{ReadModelEvent, Stack, StackOptions, spawn_registry, spawn_stack};
pub use wait::eventually;
