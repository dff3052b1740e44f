//! The LLM providers against fake servers on loopback that speak the real protocols, the scripted
//! provider, and configuration. One test binary.

mod anthropic;
mod faults;
mod openai;
mod router;
mod scripted;
mod support;
