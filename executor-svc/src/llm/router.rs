//! Builds the providers of an [`LlmConfig`] and resolves model names to a provider and model.
//!
//! Environment overrides, applied on top of the file:
//! - `TASKFORCE_LLM_PROVIDER` / `TASKFORCE_LLM_MODEL`: send every request to this provider and
//!   model (the model defaults to the provider's `model:`; the provider to `default_provider`).
//! - `OPENAI_BASE_URL` / `ANTHROPIC_BASE_URL`: the `base_url` of every provider of that type
//!   (Azure entries excepted).
//! - `TASKFORCE_LLM_SCRIPT`: the script of every scripted provider, the built-in one included.
//!
//! A provider whose key (or other environment) is missing is unavailable; with
//! `fallback_to_scripted` (the default) its models run on the built-in scripted provider and
//! [`LlmRouter::scripted_reason`] says why.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    sync::Arc,
};

use tracing::warn;

use super::{
    AnthropicProvider, LlmError, LlmProvider, LlmRequest, Message, OpenAiProvider, Script,
    ScriptedProvider, ToolDefinition,
    config::{LlmConfig, ProviderType},
    env::Env,
};

/// Name of the built-in scripted provider.
pub const BUILTIN_SCRIPTED: &str = "scripted";

/// A model name resolved to the provider that serves it.
#[derive(Debug, Clone)]
pub struct ResolvedModel {
    /// The provider.
    pub provider: Arc<dyn LlmProvider>,
    /// The provider's model name.
    pub model: String,
    /// Temperature from the alias.
    pub temperature: Option<f64>,
    /// Output cap from the alias.
    pub max_tokens: Option<u32>,
    /// Why this runs on a scripted provider, if it does.
    pub scripted_reason: Option<String>,
}

impl ResolvedModel {
    /// A request for this model with the alias's defaults.
    pub fn request<'a>(
        &self,
        messages: &'a [Message],
        tools: &'a [ToolDefinition],
    ) -> LlmRequest<'a> {
        LlmRequest {
            model: self.model.clone(),
            messages: messages.into(),
            tools: tools.into(),
            temperature: self.temperature,
            max_tokens: self.max_tokens,
        }
    }
}

/// A provider, or why it is unavailable.
type Built = Result<Arc<dyn LlmProvider>, String>;

/// What a name resolves to: a model, or why it cannot be served.
type Route = Result<ResolvedModel, String>;

/// The configured providers and model aliases.
#[derive(Debug)]
pub struct LlmRouter {
    aliases: BTreeMap<String, Route>,
    /// Each provider with its configured model (`@provider` references).
    providers: BTreeMap<String, Route>,
    default_model: Route,
    default_provider: Route,
    forced: Option<Route>,
}

impl LlmRouter {
    /// The names of the providers runs can use (each once), as model calls label them.
    pub fn provider_names(&self) -> std::collections::BTreeSet<String> {
        self.aliases
            .values()
            .chain(self.providers.values())
            .chain([&self.default_model, &self.default_provider])
            .chain(&self.forced)
            .filter_map(|route| route.as_ref().ok())
            .map(|m| m.provider.name().to_owned())
            .collect()
    }

    /// Reads `path` (a missing file means "scripted only") with the process environment.
    pub fn from_file(path: &Path) -> Result<Self, LlmError> {
        let config = LlmConfig::load(path)?;
        let base_dir = path.parent().unwrap_or(Path::new("."));
        Self::new(&config, base_dir, &Env::process())
    }

    /// Builds every provider of `config`; script paths are relative to `base_dir`.
    pub fn new(config: &LlmConfig, base_dir: &Path, env: &Env) -> Result<Self, LlmError> {
        let env_script = env.get("TASKFORCE_LLM_SCRIPT").map(PathBuf::from);
        let builtin: Arc<dyn LlmProvider> = match &env_script {
            Some(path) => Arc::new(ScriptedProvider::new(
                BUILTIN_SCRIPTED,
                Script::from_file(path)?,
            )),
            None => Arc::new(ScriptedProvider::builtin(BUILTIN_SCRIPTED)),
        };
        let mut providers: BTreeMap<&str, (Built, ProviderType)> = BTreeMap::new();
        for (name, entry) in &config.providers {
            let mut entry = entry.clone();
            let base_url_var = match entry.kind {
                ProviderType::Openai if entry.azure.is_none() => Some("OPENAI_BASE_URL"),
                ProviderType::Anthropic => Some("ANTHROPIC_BASE_URL"),
                _ => None,
            };
            if let Some(url) = base_url_var.and_then(|var| env.get(var)) {
                entry.base_url = Some(url);
            }
            let missing = match entry.kind {
                ProviderType::Scripted => None,
                _ => entry.missing_env(env),
            };
            let built: Built = match (entry.kind, missing) {
                (_, Some(why)) => Err(why),
                (ProviderType::Scripted, None) => {
                    let path = env_script
                        .clone()
                        .or_else(|| entry.script.as_ref().map(|p| base_dir.join(p)));
                    let provider = match path {
                        Some(path) => {
                            ScriptedProvider::new(name.clone(), Script::from_file(&path)?)
                        }
                        None => ScriptedProvider::builtin(name.clone()),
                    };
                    Ok(Arc::new(provider))
                }
                (ProviderType::Openai, None) => {
                    Ok(Arc::new(OpenAiProvider::new(name, &entry, env)?))
                }
                (ProviderType::Anthropic, None) => {
                    Ok(Arc::new(AnthropicProvider::new(name, &entry, env)?))
                }
            };
            providers.insert(name.as_str(), (built, entry.kind));
        }

        // A route to `provider` for `model`, falling back to the built-in script when allowed.
        let route =
            |provider: &str, model: String, temperature, max_tokens| -> Result<Route, LlmError> {
                let (built, kind) = match providers.get(provider) {
                    Some((built, kind)) => (built.clone(), *kind),
                    None if provider == BUILTIN_SCRIPTED => {
                        (Ok(Arc::clone(&builtin)), ProviderType::Scripted)
                    }
                    None => return Err(LlmError::Config(format!("unknown provider `{provider}`"))),
                };
                let resolved = |provider, scripted_reason| ResolvedModel {
                    provider,
                    model: model.clone(),
                    temperature,
                    max_tokens,
                    scripted_reason,
                };
                Ok(match built {
                    Ok(p) if kind == ProviderType::Scripted => {
                        Ok(resolved(p, Some("the configuration chooses it".into())))
                    }
                    Ok(p) => Ok(resolved(p, None)),
                    Err(why) if config.fallback_to_scripted => {
                        let reason = format!("provider `{provider}` is unavailable: {why}");
                        warn!(provider, reason = %why, "using the scripted provider instead");
                        Ok(resolved(Arc::clone(&builtin), Some(reason)))
                    }
                    Err(why) => Err(format!("provider `{provider}` is unavailable: {why}")),
                })
            };

        let mut aliases = BTreeMap::new();
        for (alias, m) in &config.models {
            if let (Some(t), Some(entry)) = (m.temperature, config.providers.get(&m.provider)) {
                // What the provider's API accepts, so a typo is a start-up error, not a 400
                // on every run.
                let max = if entry.kind == ProviderType::Anthropic {
                    1.0
                } else {
                    2.0
                };
                if !(0.0..=max).contains(&t) {
                    return Err(LlmError::Config(format!(
                        "model `{alias}`: temperature {t} is out of range for provider `{}` (0 to {max})",
                        m.provider
                    )));
                }
            }
            let resolved = route(&m.provider, m.model.clone(), m.temperature, m.max_tokens)
                .map_err(|e| LlmError::Config(format!("model `{alias}`: {e}")))?;
            aliases.insert(alias.clone(), resolved);
        }
        let provider_model = |name: &str| {
            let configured = config.providers.get(name).and_then(|p| p.model.clone());
            configured.unwrap_or_else(|| BUILTIN_SCRIPTED.to_owned())
        };
        let mut by_provider = BTreeMap::new();
        for name in config.providers.keys() {
            by_provider.insert(name.clone(), route(name, provider_model(name), None, None)?);
        }
        let default_provider = route(
            &config.default_provider,
            provider_model(&config.default_provider),
            None,
            None,
        )?;
        let default_alias = config
            .default_model
            .clone()
            .or_else(|| config.models.contains_key("main").then(|| "main".into()));
        let default_model = match default_alias {
            Some(alias) => aliases.get(&alias).cloned().ok_or_else(|| {
                LlmError::Config(format!("default_model `{alias}` is not in `models`"))
            })?,
            None => default_provider.clone(),
        };

        let forced_provider = env.get("TASKFORCE_LLM_PROVIDER");
        let forced_model = env.get("TASKFORCE_LLM_MODEL");
        let forced = match (forced_provider, forced_model) {
            (None, None) => None,
            (provider, model) => {
                let provider = provider.unwrap_or_else(|| config.default_provider.clone());
                let model = model.unwrap_or_else(|| provider_model(&provider));
                Some(
                    route(&provider, model, None, None)
                        .map_err(|e| LlmError::Config(format!("TASKFORCE_LLM_PROVIDER: {e}")))?,
                )
            }
        };
        Ok(Self {
            aliases,
            providers: by_provider,
            default_model,
            default_provider,
            forced,
        })
    }

    /// Resolves a model name: an alias from `models`, a provider reference `@provider` (its
    /// configured model) or `@provider/model`, else a model of `default_provider`; `None` is
    /// the default model. `TASKFORCE_LLM_PROVIDER`/`_MODEL` override all of it.
    pub fn resolve(&self, model: Option<&str>) -> Result<ResolvedModel, LlmError> {
        let route = match (&self.forced, model) {
            (Some(forced), _) => forced.clone(),
            (None, None) => self.default_model.clone(),
            (None, Some(name)) => match (self.aliases.get(name), name.strip_prefix('@')) {
                (Some(route), _) => route.clone(),
                (None, Some(reference)) => self.provider_route(reference),
                (None, None) => self.default_provider.clone().map(|r| ResolvedModel {
                    model: name.to_owned(),
                    ..r
                }),
            },
        };
        route.map_err(LlmError::Config)
    }

    /// `provider` or `provider/model` (the gateway's `AI_DESTINATION_NAME`).
    fn provider_route(&self, reference: &str) -> Route {
        let (provider, model) = match reference.split_once('/') {
            Some((p, m)) if !m.is_empty() => (p, Some(m)),
            Some((p, _)) => (p, None),
            None => (reference, None),
        };
        let Some(route) = self.providers.get(provider) else {
            let known: Vec<&str> = self.providers.keys().map(String::as_str).collect();
            return Err(format!(
                "unknown provider `{provider}` in `@{reference}`; llm_config.yaml has: {}",
                known.join(", ")
            ));
        };
        route.clone().map(|r| ResolvedModel {
            model: model.map_or(r.model.clone(), str::to_owned),
            ..r
        })
    }

    /// Why the default model runs on a scripted provider, or `None` when it runs on a real one.
    /// The run command logs this ("using the scripted provider: ...").
    pub fn scripted_reason(&self) -> Option<String> {
        self.resolve(None).ok().and_then(|m| m.scripted_reason)
    }
}
