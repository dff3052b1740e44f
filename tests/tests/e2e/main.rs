//! End-to-end tests: every test starts the real `registry-svc` (and usually the `gateway`) as
//! child processes over its own temp dir, and talks to them over gRPC, REST, grpcurl and the
//! file system, the way users and operators do.
//!
//! Build the binaries first: `cargo build -p registry-svc -p gateway -p executor-svc --bins`, then
//! `cargo test -p taskforce-tests --test e2e`. `TEST_LOG=1` shows the services' logs.
//!
//! # Layout
//! - `helpers`: request bodies, reply decoding, listings and file snapshots.
//! - `listing`: the sample profile and custom agents over gRPC and REST.
//! - `grpcurl`: the real grpcurl against reflection and health, no proto files.
//! - `rest_crud`: create/get/update/delete over REST and the YAML files they produce.
//! - `read_model`: the gateway's copy of the agents: own writes at once, changes made elsewhere,
//!   a lost stream.
//! - `auth`: API keys and scopes on REST, `/mcp`, both gRPC services and the CLI; the start-up
//!   rule for non-loopback listeners.
//! - `bad_input`: invalid ids, fields, bodies and versions over REST.
//! - `bad_input_grpc`: the core bad-input cases over gRPC.
//! - `chat_stream`: seed 004's `/ai/agent/stream` and `/ai/stream`, byte for byte, thread memory.
//! - `tool_catalog`: native tools, global MCP tools, no secrets in responses.
//! - `global_mcp`: the executor's global MCP servers: connected at start, in `/readyz` and
//!   `/metrics`, reconnected after the server is killed.
//! - `metrics`: `/metrics` of every service after a run, parsed with the reference parser.
//! - `cli`: the `taskforce` CLI binary: agents, tools, runs, answers, sessions, health, errors.
//! - `mcp_server`: the MCP tools through the Python MCP SDK, seed 001's scenarios and filters.
//! - `mcp_transport`: `/mcp`'s Origin/Host/protocol rules, the initialize handshake, stdio mode.
//! - `metadata`: workspace metadata over REST: cache, failures, timeouts, no secrets (seed 001).
//! - `mcp_validation`: `mcp_tool_allowlist` checked against real MCP servers.
//! - `crash_safety`: SIGKILL in the middle of a write burst, restart, cache rebuild.
//! - `deploy`: `deploy/` offline: docker-compose config, hadolint, kustomize + kubernetes-validate,
//!   and the binaries started as the compose file and the dev overlay start them.
//! - `contract`: schemathesis against the OpenAPI document with keys on: 0 failures.
//! - `confinement`: a model's `python` call: no secrets in its environment, no writes outside.
//! - `concurrency`: optimistic concurrency under contention.
//! - `external_edits`: hand edits of the YAML directory while the registry runs.
//! - `execute`: runs through the executor: `/api/v1/execute`, its SSE stream, errors.
//! - `gateway_meta`: health, readiness and the OpenAPI document.
//! - `lifecycle`: stopping the registry with SIGTERM.
//! - `orchestration`: sub-agents, plan patches, bubbled-up questions across a SIGKILL (seed 003).
//! - `scale_out`: two executors behind one gateway, readiness over executors, workspaces the
//!   registry resolves for the executor.
//! - `ssrf`: `web_fetch` against loopback in every spelling, by name, by redirect, metadata.
//! - `init`: a service started as PID 1 is its own init (signals, its environment unreadable).
//! - `traces`: one run as one OpenTelemetry trace over the three services (an OTLP receiver in
//!   the test), trace ids in the logs, nothing exported without an endpoint.
//! - `policy_modes`: `readOnly`, `default`, `safeWrite` over native and real MCP tools.
//! - `run_mcp`: an agent's MCP tools (real `mcp-server-time`) in a run through all three binaries.
//! - `fake_llm`, `run_resume`, `run_cancel`, `run_shutdown`, `run_providers`, `run_faults`: runs
//!   through the real executor binary, against fake OpenAI/Anthropic servers in the test process:
//!   resuming after a restart, cancellation, SIGTERM/SIGKILL mid-run, whole runs over both
//!   protocols, and faults (LLM 500s, malformed tool JSON, broken definitions, huge and hanging
//!   tools).

mod auth;
mod bad_input;
mod bad_input_grpc;
mod chat_stream;
mod cli;
mod concurrency;
mod confinement;
mod contract;
mod crash_safety;
mod deploy;
mod execute;
mod external_edits;
mod fake_llm;
mod gateway_meta;
mod global_mcp;
mod grpcurl;
mod helpers;
mod init;
mod lifecycle;
mod listing;
mod mcp_server;
mod mcp_transport;
mod mcp_validation;
mod metadata;
mod metrics;
mod orchestration;
mod policy_modes;
mod read_model;
mod rest_crud;
mod run_cancel;
mod run_faults;
mod run_mcp;
mod run_providers;
mod run_resume;
mod run_shutdown;
mod scale_out;
mod ssrf;
mod tool_catalog;
mod traces;
