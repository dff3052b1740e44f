//! executor-svc: runs agents and streams what happens.
//!
//! This first slice is the LLM layer the agent loop is built on: one [`llm::LlmProvider`] trait
//! with streaming and native tool calls, an OpenAI-compatible client, an Anthropic client, and a
//! scripted provider for tests and offline runs, configured from `configs/llm_config.yaml` and the
//! environment. The formats of `llm_config.yaml` and of scripts are in the crate's `README.md`.
//!
//! # Layout
//! - [`llm`]: providers, their configuration, and the model router.
//!   - `llm::types`: messages, tools, requests, stream events; `llm::error`: `LlmError`.
//!   - `llm::config`, `llm::env`, `llm::router`: `llm_config.yaml`, keys and overrides from the
//!     environment, aliases resolved to a provider, the scripted fallback.
//!   - `llm::openai`, `llm::anthropic`: the HTTP clients, each a request builder (`mod.rs`) and a
//!     stream decoder (`decode.rs`); `llm::http` (retries, timeouts, error bodies), `llm::stream`
//!     (body → events) and `llm::sse` (event-stream parsing) are shared by both.
//!   - `llm::scripted`: deterministic replay of a YAML script.
//! - [`tools`]: the [`tools::Tool`] trait every native and MCP tool implements.

pub mod llm;
pub mod tools;
