//! The environment and `${VAR}` expansion. Keys are held in [`secrecy::SecretString`], whose
//! `Debug` prints `[REDACTED]`.
//!
//! The environment is passed around as an [`Env`] so tests never touch the process's own (and
//! edition 2024 makes `set_var` unsafe for good reason).

use std::{collections::BTreeMap, fmt, sync::Arc};

use super::LlmError;

/// A view of environment variables: the process's, or a fixed map in tests.
#[derive(Clone)]
pub struct Env(Arc<Lookup>);

type Lookup = dyn Fn(&str) -> Option<String> + Send + Sync;

impl Env {
    /// The process environment.
    pub fn process() -> Self {
        Self(Arc::new(|name| std::env::var(name).ok()))
    }

    /// A fixed set of variables (nothing else is set).
    pub fn from_pairs<K: Into<String>, V: Into<String>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        let map: BTreeMap<String, String> = pairs
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
        Self(Arc::new(move |name| map.get(name).cloned()))
    }

    /// One variable; empty counts as unset.
    pub fn get(&self, name: &str) -> Option<String> {
        (self.0)(name).filter(|v| !v.is_empty())
    }
}

impl fmt::Debug for Env {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Env(..)")
    }
}

/// Expands `${VAR}` and `${VAR:-default}` placeholders from `env`, by the rule every
/// Taskforce file follows ([`taskforce_runtime::env`]): an unset variable is an error naming it.
pub fn expand(value: &str, env: &Env) -> Result<String, LlmError> {
    taskforce_runtime::env::expand(value, |name| env.get(name))
        .map_err(|e| LlmError::Config(e.to_string()))
}
