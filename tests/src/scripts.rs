//! Scripted models for tests and benchmarks: each script becomes a scripted provider of its own
//! with a model alias of the same name, so every agent (or workload) replays its own
//! conversation.

use std::{io, path::Path};

/// Writes each `(alias, script YAML)` to `<dir>/<alias>.yaml` and returns the lines of an
/// `llm_config.yaml`'s `models:` and `providers:` mappings that serve them (without those two
/// keys: callers add their own entries and header).
pub fn scripted_models(
    dir: &Path,
    scripts: &[(&str, impl AsRef<str>)],
) -> io::Result<(String, String)> {
    let mut models = String::new();
    let mut providers = String::new();
    for (alias, script) in scripts {
        let path = dir.join(format!("{alias}.yaml"));
        std::fs::write(&path, script.as_ref())?;
        models.push_str(&format!(
            "  {alias}: {{provider: {alias}, model: {alias}}}\n"
        ));
        providers.push_str(&format!(
            "  {alias}: {{type: scripted, script: \"{}\"}}\n",
            path.display()
        ));
    }
    Ok((models, providers))
}
