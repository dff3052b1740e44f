//! `configs/llm_config.yaml`: model aliases, providers, and the environment that overrides them.
//!
//! Keys are read only from the environment (`api_key_env`), held in a [`SecretString`], which never prints
//! its value.

use std::{collections::BTreeMap, path::Path, time::Duration};

use secrecy::SecretString;
use serde::Deserialize;

use super::{
    LlmError,
    env::{Env, expand},
};

/// The whole `llm_config.yaml`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LlmConfig {
    /// Provider for model names that are not aliases.
    #[serde(default = "default_provider")]
    pub default_provider: String,
    /// Alias used when a request names no model (`main` when absent and defined).
    #[serde(default)]
    pub default_model: Option<String>,
    /// Route a model whose provider lacks its key (or other environment) to the built-in scripted
    /// provider instead of failing; set `false` in production.
    #[serde(default = "yes")]
    pub fallback_to_scripted: bool,
    /// Model aliases (`main`, `fast`, ...) → provider and the provider's model name.
    #[serde(default, deserialize_with = "taskforce_proto::mcp_config::unique_map")]
    pub models: BTreeMap<String, ModelConfig>,
    /// Providers by name.
    #[serde(default, deserialize_with = "taskforce_proto::mcp_config::unique_map")]
    pub providers: BTreeMap<String, ProviderConfig>,
}

/// One model alias.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    /// Name of an entry in `providers`.
    pub provider: String,
    /// The provider's model name (for Azure: any, the deployment decides).
    pub model: String,
    /// Default temperature for requests through this alias.
    #[serde(default)]
    pub temperature: Option<f64>,
    /// Default output token cap for requests through this alias.
    #[serde(default)]
    pub max_tokens: Option<u32>,
}

/// The name of the output token cap in an OpenAI-compatible request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MaxTokensField {
    /// `max_completion_tokens`.
    MaxCompletionTokens,
    /// `max_tokens` (deprecated by OpenAI).
    MaxTokens,
}

impl MaxTokensField {
    /// The JSON field name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::MaxCompletionTokens => "max_completion_tokens",
            Self::MaxTokens => "max_tokens",
        }
    }
}

/// Which protocol a provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderType {
    /// OpenAI chat completions: OpenAI, Azure OpenAI, Ollama, vLLM, LiteLLM and others.
    Openai,
    /// Anthropic Messages.
    Anthropic,
    /// Replays a YAML script, offline.
    Scripted,
}

/// One provider entry.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderConfig {
    /// The protocol.
    #[serde(rename = "type")]
    pub kind: ProviderType,
    /// API root: `https://api.openai.com/v1`, `http://localhost:11434/v1` (Ollama), an Azure
    /// resource `https://NAME.openai.azure.com`, `https://api.anthropic.com`. Defaults per type.
    #[serde(default)]
    pub base_url: Option<String>,
    /// Environment variable holding the API key; none for keyless servers (Ollama, vLLM).
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// Model used when this provider is forced by `TASKFORCE_LLM_PROVIDER` without a model.
    #[serde(default)]
    pub model: Option<String>,
    /// Extra headers; values may hold `${VAR}` placeholders, expanded from the environment.
    #[serde(default, deserialize_with = "taskforce_proto::mcp_config::unique_map")]
    pub headers: BTreeMap<String, String>,
    /// Extra query parameters (same `${VAR}` expansion).
    #[serde(default, deserialize_with = "taskforce_proto::mcp_config::unique_map")]
    pub query: BTreeMap<String, String>,
    /// Azure OpenAI: deployment in the path, `api-version` query, `api-key` header.
    #[serde(default)]
    pub azure: Option<AzureConfig>,
    /// OpenAI: the request field of the output token cap (a model alias's `max_tokens`):
    /// `max_completion_tokens` (what OpenAI and Azure OpenAI take; their reasoning models refuse
    /// the older name) or `max_tokens` (what other OpenAI-compatible servers take). Default: the
    /// first for Azure and `api.openai.com`, the second for any other server.
    #[serde(default)]
    pub max_tokens_field: Option<MaxTokensField>,
    /// OpenAI: ask for usage in the stream (`stream_options.include_usage`); turn off for servers
    /// that reject the field.
    #[serde(default = "yes")]
    pub stream_usage: bool,
    /// Scripted: path of the script (relative to the config file), or the built-in script.
    #[serde(default)]
    pub script: Option<String>,
    /// Seconds to establish a connection.
    #[serde(default = "secs_10")]
    pub connect_timeout_secs: f64,
    /// Seconds from sending a request to its response headers.
    #[serde(default = "secs_120")]
    pub request_timeout_secs: f64,
    /// Longest silence, in seconds, between two chunks of a streamed response.
    #[serde(default = "secs_120")]
    pub idle_timeout_secs: f64,
    /// Requests per call, retries included (retries only before the first response byte).
    #[serde(default = "three")]
    pub max_attempts: u32,
    /// First retry delay in milliseconds; doubles per retry, with jitter.
    #[serde(default = "ms_500")]
    pub retry_base_delay_ms: u64,
    /// Largest retry delay in milliseconds.
    #[serde(default = "ms_8000")]
    pub retry_max_delay_ms: u64,
    /// A `Retry-After` longer than this many seconds is not waited for: the call fails at once.
    #[serde(default = "secs_60")]
    pub max_retry_after_secs: f64,
}

/// Azure OpenAI addressing.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AzureConfig {
    /// Deployment name: the URL becomes `{base_url}/openai/deployments/{deployment}/chat/completions`.
    pub deployment: String,
    /// The `api-version` query parameter, e.g. `2024-10-21`.
    pub api_version: String,
}

/// Timeouts and retry policy of one HTTP provider, from its [`ProviderConfig`].
#[derive(Debug, Clone)]
pub struct HttpSettings {
    /// Time to establish a connection.
    pub connect_timeout: Duration,
    /// Time from sending to the response headers.
    pub request_timeout: Duration,
    /// Longest gap between two body chunks.
    pub idle_timeout: Duration,
    /// Requests per call, retries included (at least 1).
    pub max_attempts: u32,
    /// First backoff step.
    pub backoff_base: Duration,
    /// Largest backoff step.
    pub backoff_max: Duration,
    /// Longest `Retry-After` honoured.
    pub max_retry_after: Duration,
}

impl ProviderConfig {
    /// Parses one provider entry from YAML (handy in tests and tools).
    pub fn from_yaml(text: &str) -> Result<Self, LlmError> {
        taskforce_runtime::yaml::yaml(text.as_bytes()).map_err(|e| {
            LlmError::Config(format!(
                "provider entry: {}",
                taskforce_runtime::auth::without_values(&e.to_string(), text)
            ))
        })
    }

    /// The timeouts and retry policy, validated.
    pub fn http_settings(&self) -> Result<HttpSettings, LlmError> {
        let secs = |name: &str, value: f64| {
            Duration::try_from_secs_f64(value)
                .ok()
                .filter(|d| !d.is_zero())
                .ok_or_else(|| {
                    LlmError::Config(format!(
                        "{name} must be a positive number of seconds, got {value}"
                    ))
                })
        };
        Ok(HttpSettings {
            connect_timeout: secs("connect_timeout_secs", self.connect_timeout_secs)?,
            request_timeout: secs("request_timeout_secs", self.request_timeout_secs)?,
            idle_timeout: secs("idle_timeout_secs", self.idle_timeout_secs)?,
            max_attempts: self.max_attempts.max(1),
            backoff_base: Duration::from_millis(self.retry_base_delay_ms),
            backoff_max: Duration::from_millis(
                self.retry_max_delay_ms.max(self.retry_base_delay_ms),
            ),
            max_retry_after: Duration::try_from_secs_f64(self.max_retry_after_secs)
                .unwrap_or(Duration::ZERO),
        })
    }

    /// The API key from `api_key_env`, if one is configured. Unset or empty is an error.
    pub fn api_key(&self, env: &Env) -> Result<Option<SecretString>, LlmError> {
        let Some(var) = &self.api_key_env else {
            return Ok(None);
        };
        // Any name a variable is set under works (`openai-key` too); one that is not set is
        // named only when it reads as a plain variable name: a key pasted where its variable's
        // name goes is said without being shown.
        let plain_name = var
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        match env.get(var) {
            Some(key) if !key.trim().is_empty() => Ok(Some(SecretString::from(key.trim()))),
            _ if !plain_name => Err(LlmError::Config(
                "api_key_env names no environment variable that is set, and is no plain \
                 variable name (a key pasted in its place? name the variable that holds the \
                 key); its value is not shown"
                    .to_owned(),
            )),
            _ => Err(LlmError::Config(format!(
                "environment variable {var} is not set (api_key_env)"
            ))),
        }
    }

    /// What in the environment this provider needs and lacks, if anything.
    pub fn missing_env(&self, env: &Env) -> Option<String> {
        let reason = |e: LlmError| match e {
            LlmError::Config(message) => message,
            other => other.to_string(),
        };
        if let Err(e) = self.api_key(env) {
            return Some(reason(e));
        }
        let values = self.headers.values().chain(self.query.values());
        values
            .filter_map(|v| expand(v, env).err())
            .map(reason)
            .next()
    }
}

impl LlmConfig {
    /// Parses YAML text.
    pub fn from_yaml(text: &str) -> Result<Self, LlmError> {
        // A value that could be a key (a key pasted in the wrong field) is not repeated.
        taskforce_runtime::yaml::yaml(text.as_bytes()).map_err(|e| {
            LlmError::Config(format!(
                "llm config: {}",
                taskforce_runtime::auth::without_values(&e.to_string(), text)
            ))
        })
    }

    /// Reads a file; a missing file gives [`LlmConfig::default`] (scripted only).
    pub fn load(path: &Path) -> Result<Self, LlmError> {
        match taskforce_runtime::read_config(path) {
            Ok(text) => Self::from_yaml(&text)
                .map_err(|e| LlmError::Config(format!("{}: {e}", path.display()))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            Err(e) => Err(LlmError::Config(format!(
                "cannot read {}: {e}",
                path.display()
            ))),
        }
    }
}

impl Default for LlmConfig {
    /// Nothing configured: everything goes to the built-in scripted provider.
    fn default() -> Self {
        Self {
            default_provider: default_provider(),
            default_model: None,
            fallback_to_scripted: true,
            models: BTreeMap::new(),
            providers: BTreeMap::new(),
        }
    }
}

fn default_provider() -> String {
    "scripted".to_owned()
}
fn yes() -> bool {
    true
}
fn three() -> u32 {
    3
}
fn secs_10() -> f64 {
    10.0
}
fn secs_60() -> f64 {
    60.0
}
fn secs_120() -> f64 {
    120.0
}
fn ms_500() -> u64 {
    500
}
fn ms_8000() -> u64 {
    8000
}
