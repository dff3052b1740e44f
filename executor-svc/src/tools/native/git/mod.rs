//! `git`: one git command in the workspace, arguments as a list (never through a shell).
//!
//! The workspace is the boundary: the arguments pass [`args::check`] (an allowlist of
//! subcommands and their options; every path inside the workspace; `https://` or local
//! repositories only), and git's environment shuts the other doors: `GIT_CEILING_DIRECTORIES`
//! stops it from finding a repository above the workspace, neither the system nor the user's
//! configuration is read, hooks and fsmonitor are off, only the `file` and `https` transports
//! exist, and editors and prompts are no-ops.

mod allowlist;
mod args;
mod config;

pub(crate) use args::subcommand_at;

use std::{
    ffi::OsString,
    path::{Path, PathBuf},
    sync::Arc,
};

use futures::{FutureExt, future::BoxFuture};
use serde::Deserialize;
use serde_json::Value;

use super::{
    catalog_definition, parse_args,
    process::{self, Spawn},
    sandbox::Sandbox,
    workspace,
};
use crate::{
    llm::ToolDefinition,
    tools::{Tool, ToolContext, ToolError, ToolOutcome},
};

/// Configuration the model cannot change (`-c` is refused), given through the environment; it
/// outranks the repository's own `.git/config`, which other tools (and git itself) may write:
/// no hooks, no fsmonitor, no credential helpers, no signing (gpg). Anything else in a
/// repository's configuration must pass [`config::allowed`] before git runs.
const FORCED_CONFIG: [(&str, &str); 5] = [
    ("core.hooksPath", "/dev/null"),
    ("core.fsmonitor", "false"),
    ("credential.helper", ""),
    ("commit.gpgSign", "false"),
    ("tag.gpgSign", "false"),
];

/// `git`: runs the configured git binary in the workspace.
#[derive(Debug)]
pub struct Git {
    definition: ToolDefinition,
    bin: PathBuf,
    sandbox: Arc<Sandbox>,
}

impl Git {
    /// The tool, running `bin` (e.g. `git`) in `sandbox`.
    pub fn new(bin: PathBuf, sandbox: Arc<Sandbox>) -> Self {
        Self {
            definition: catalog_definition("git"),
            bin,
            sandbox,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GitArgs {
    args: Vec<String>,
}

impl Tool for Git {
    fn definition(&self) -> &ToolDefinition {
        &self.definition
    }

    fn call<'a>(
        &'a self,
        ctx: &'a ToolContext,
        arguments: Value,
    ) -> BoxFuture<'a, Result<ToolOutcome, ToolError>> {
        async move {
            let args: GitArgs = parse_args("git", arguments)?;
            let invalid = |reason: String| ToolError::InvalidArguments {
                tool: "git".to_owned(),
                reason,
            };
            let cwd = workspace::root("git", &ctx.workspace).await?;
            let (checked, root) = (args.args.clone(), cwd.clone());
            let dir = super::blocking("git", move || {
                args::check(&checked, &root).map_err(|r| invalid(r.to_string()))
            })
            .await?;
            self.check_config(ctx, &cwd, &dir).await?;
            let spec = Spawn {
                tool: "git",
                program: &self.bin,
                args: args.args.into_iter().map(OsString::from).collect(),
                env: git_env(&cwd, &ctx.agent_id),
                stdin: None,
                cwd,
                timeout: ctx.limits.timeout,
                sandbox: self.sandbox.clone(),
            };
            let cap = ctx.limits.max_output_bytes;
            Ok(process::run(ctx, spec, cap).await?.into_outcome(cap))
        }
        .boxed()
    }
}

impl Git {
    /// Refuses the call when the repository git would use at `dir` (inside the canonical
    /// workspace `root`) has a setting outside [`config::allowed`] or lives outside the
    /// workspace; git itself lists the settings, in the call's sandbox and environment.
    async fn check_config(
        &self,
        ctx: &ToolContext,
        root: &Path,
        dir: &Path,
    ) -> Result<(), ToolError> {
        let probe = Spawn {
            tool: "git",
            program: &self.bin,
            args: config::probe_args(dir),
            env: git_env(root, &ctx.agent_id),
            stdin: None,
            cwd: root.to_path_buf(),
            timeout: ctx.limits.timeout,
            sandbox: self.sandbox.clone(),
        };
        let listed = process::run(ctx, probe, PROBE_CAP).await?;
        if listed.code != Some(0) || listed.dropped > 0 {
            let why = String::from_utf8_lossy(&listed.stderr);
            return Err(super::failed(
                "git",
                format!(
                    "the repository's configuration could not be read ({}), so git does not run \
                     with it",
                    if why.trim().is_empty() {
                        "it is too large"
                    } else {
                        why.trim()
                    }
                ),
            ));
        }
        match config::problems(&listed.stdout, dir, root) {
            Some(problem) => Err(super::failed("git", problem)),
            None => Ok(()),
        }
    }
}

/// The most configuration listing read: a repository's settings are a few hundred bytes.
const PROBE_CAP: usize = 256 * 1024;

/// git's environment: no repository above the workspace, no system or user configuration, the
/// forced configuration, only the `file` and `https` transports, no prompts or editors, and an
/// identity for commits (the user's configuration, which would hold one, is not read).
fn git_env(cwd: &Path, agent_id: &str) -> Vec<(&'static str, OsString)> {
    const KEYS: [(&str, &str); FORCED_CONFIG.len()] = [
        ("GIT_CONFIG_KEY_0", "GIT_CONFIG_VALUE_0"),
        ("GIT_CONFIG_KEY_1", "GIT_CONFIG_VALUE_1"),
        ("GIT_CONFIG_KEY_2", "GIT_CONFIG_VALUE_2"),
        ("GIT_CONFIG_KEY_3", "GIT_CONFIG_VALUE_3"),
        ("GIT_CONFIG_KEY_4", "GIT_CONFIG_VALUE_4"),
    ];
    let ceiling = cwd
        .parent()
        .map(|p| p.as_os_str().to_owned())
        .unwrap_or_default();
    let name = format!("Taskforce agent {agent_id}");
    let email = format!("{agent_id}@taskforce.invalid");
    let mut env: Vec<(&'static str, OsString)> = vec![
        ("GIT_CEILING_DIRECTORIES", ceiling),
        ("GIT_TERMINAL_PROMPT", "0".into()),
        ("GIT_PAGER", "cat".into()),
        ("GIT_EDITOR", "true".into()),
        ("GIT_SEQUENCE_EDITOR", "true".into()),
        ("GIT_CONFIG_NOSYSTEM", "1".into()),
        ("GIT_CONFIG_GLOBAL", "/dev/null".into()),
        ("GIT_ALLOW_PROTOCOL", "file:https".into()),
        ("GIT_AUTHOR_NAME", name.clone().into()),
        ("GIT_AUTHOR_EMAIL", email.clone().into()),
        ("GIT_COMMITTER_NAME", name.into()),
        ("GIT_COMMITTER_EMAIL", email.into()),
        ("GIT_CONFIG_COUNT", FORCED_CONFIG.len().to_string().into()),
    ];
    for ((k, v), (key, value)) in KEYS.iter().zip(FORCED_CONFIG) {
        env.push((k, key.into()));
        env.push((v, value.into()));
    }
    env
}
