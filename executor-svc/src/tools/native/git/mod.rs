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
    workspace::{self, WriteTurns},
};
use crate::{
    llm::ToolDefinition,
    tools::{Tool, ToolContext, ToolError, ToolOutcome},
};

/// Configuration the model cannot change (`-c` is refused), given through the environment; it
/// outranks the repository's own `.git/config`, which other tools (and git itself) may write:
/// no hooks, no fsmonitor, no credential helpers, no signing (gpg), and git never enters a
/// submodule (or a repository nested in the workspace's as one), whose own configuration the
/// tool does not check (`fetch` and `pull` also get `--no-recurse-submodules`, which outranks
/// a `.gitmodules` file). Anything else in a repository's configuration must pass
/// [`config::allowed`] before git runs.
const FORCED_CONFIG: [(&str, &str); 12] = [
    ("core.hooksPath", "/dev/null"),
    ("core.fsmonitor", "false"),
    ("credential.helper", ""),
    ("commit.gpgSign", "false"),
    ("tag.gpgSign", "false"),
    ("diff.ignoreSubmodules", "all"),
    ("submodule.recurse", "false"),
    ("fetch.recurseSubmodules", "false"),
    ("push.recurseSubmodules", "no"),
    // Checking a signature (`log --format=%G?`) would run these.
    ("gpg.program", "/dev/null"),
    ("gpg.ssh.program", "/dev/null"),
    ("gpg.x509.program", "/dev/null"),
];

/// `git`: runs the configured git binary in the workspace.
#[derive(Debug)]
pub struct Git {
    definition: ToolDefinition,
    bin: PathBuf,
    sandbox: Arc<Sandbox>,
    turns: Arc<WriteTurns>,
}

impl Git {
    /// The tool, running `bin` (e.g. `git`) in `sandbox`; it checks and runs in the workspace's
    /// turn among `turns` (shared with `file_write`), so nothing writes the repository's
    /// configuration between the check and the call.
    pub(crate) fn new(bin: PathBuf, sandbox: Arc<Sandbox>, turns: Arc<WriteTurns>) -> Self {
        Self {
            definition: catalog_definition("git"),
            bin,
            sandbox,
            turns,
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
            let started = tokio::time::Instant::now();
            let args: GitArgs = parse_args("git", arguments)?;
            let invalid = |reason: String| ToolError::InvalidArguments {
                tool: "git".to_owned(),
                reason,
            };
            let cwd = workspace::root("git", &ctx.workspace).await?;
            let _turn = self.turns.take(&cwd).await;
            // The arguments, then the repository's files, in one hop off the async threads.
            let (given, root) = (args.args.clone(), cwd.clone());
            let checked = super::blocking("git", move || {
                let checked = args::check(&given, &root).map_err(|r| invalid(r.to_string()))?;
                // What resumes an operation in progress runs what its state files say.
                let ends = given.iter().any(|a| a == "--abort" || a == "--quit");
                let resumes = matches!(
                    checked.subcommand,
                    Some("rebase" | "cherry-pick" | "revert")
                ) && !ends;
                match config::repository_problem(&root, &checked.dir, resumes) {
                    Some(problem) => Err(super::failed("git", problem)),
                    None => Ok(checked),
                }
            })
            .await?;
            self.check_config(ctx, &cwd, &checked).await?;
            let mut argv = args.args;
            if matches!(checked.subcommand, Some("fetch" | "pull"))
                && let Some(at) = args::subcommand_at(&argv)
            {
                argv.insert(at + 1, "--no-recurse-submodules".to_owned());
            }
            let spec = Spawn {
                tool: "git",
                program: &self.bin,
                args: argv.into_iter().map(OsString::from).collect(),
                env: git_env(&cwd, &ctx.agent_id),
                stdin: None,
                cwd,
                // The call's limit covers the checks and the wait for the workspace's turn.
                timeout: ctx.limits.timeout.saturating_sub(started.elapsed()),
                sandbox: self.sandbox.clone(),
            };
            let cap = ctx.limits.max_output_bytes;
            Ok(process::run(ctx, spec, cap).await?.into_outcome(cap))
        }
        .boxed()
    }
}

impl Git {
    /// Refuses the call when a repository it runs git in has a setting outside
    /// [`config::allowed`], lives outside the workspace or has a remote the tool would not
    /// reach: the one at `checked.dir`, and when the call talks to other repositories, each
    /// local one its arguments or its remotes name.
    async fn check_config(
        &self,
        ctx: &ToolContext,
        root: &Path,
        checked: &args::Checked,
    ) -> Result<(), ToolError> {
        let remotes = self
            .probe(ctx, root, &checked.dir, checked.reaches, None)
            .await?;
        if !checked.reaches {
            return Ok(());
        }
        if checked.subcommand == Some("push") {
            refuse_local_push(root, checked, &remotes).await?;
        }
        let dir = checked.dir.clone();
        let mut others: Vec<PathBuf> = remotes.into_iter().map(|(_, path)| path).collect();
        others.extend(checked.local_urls.iter().cloned());
        let others = super::blocking("git", move || {
            others.sort();
            others.dedup();
            others.retain(|o| *o != dir && o.is_dir());
            Ok(others)
        })
        .await?;
        for other in &others {
            self.probe(ctx, root, other, false, Some(other)).await?;
        }
        Ok(())
    }

    /// Lists the configuration of the repository git would use at `dir` (inside the canonical
    /// workspace `root`), git itself reading it in the call's sandbox and environment, and
    /// checks it ([`config::read`], its remotes when the call `reaches` them): the local
    /// repositories its remotes name, or the refusal (naming the repository `reached` when the
    /// call only reaches it).
    async fn probe(
        &self,
        ctx: &ToolContext,
        root: &Path,
        dir: &Path,
        reaches: bool,
        reached: Option<&Path>,
    ) -> Result<Vec<(String, PathBuf)>, ToolError> {
        let whose = |problem: String| match reached {
            Some(other) => {
                let shown = other.strip_prefix(root).unwrap_or(other);
                format!(
                    "this call also runs git in the repository at `{}` (inside the workspace), \
                     and {problem}",
                    shown.display()
                )
            }
            None => problem,
        };
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
        if listed.code != Some(0) || listed.stdout_total > listed.stdout.len() {
            let why = String::from_utf8_lossy(&listed.stderr);
            return Err(super::failed(
                "git",
                whose(format!(
                    "the repository's configuration could not be read ({}), so git does not run \
                     with it",
                    if why.trim().is_empty() {
                        "it is too large"
                    } else {
                        why.trim()
                    }
                )),
            ));
        }
        let (dir, root) = (dir.to_path_buf(), root.to_path_buf());
        let read = super::blocking("git", move || {
            Ok(config::read(&listed.stdout, &dir, &root, reaches))
        });
        read.await?
            .map_err(|problem| super::failed("git", whose(problem)))
    }
}

/// Refuses a push to a repository inside the workspace (the one named, a remote whose URL is
/// local, or, with no repository named, any local remote the push might use): git runs the
/// receiving repository's hooks there without the tool's settings (a local push clears them),
/// and the model can write hooks.
async fn refuse_local_push(
    root: &Path,
    checked: &args::Checked,
    remotes: &[(String, PathBuf)],
) -> Result<(), ToolError> {
    let targets: Vec<PathBuf> = match &checked.repository {
        Some(name) if remotes.iter().any(|(n, _)| n == name) => remotes
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, p)| p.clone())
            .collect(),
        Some(_) => checked.local_urls.clone(),
        None => remotes.iter().map(|(_, p)| p.clone()).collect(),
    };
    let local =
        super::blocking("git", move || Ok(targets.into_iter().find(|t| t.is_dir()))).await?;
    match local {
        Some(target) => Err(super::failed(
            "git",
            format!(
                "pushing to a repository inside the workspace (`{}`) runs that repository's \
                 hooks, which the git tool cannot switch off there; push to an https:// remote \
                 (or fetch from this repository in the other one){}",
                target.strip_prefix(root).unwrap_or(&target).display(),
                if checked.repository.is_none() {
                    ", and name the remote to push to"
                } else {
                    ""
                }
            ),
        )),
        None => Ok(()),
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
        ("GIT_CONFIG_KEY_5", "GIT_CONFIG_VALUE_5"),
        ("GIT_CONFIG_KEY_6", "GIT_CONFIG_VALUE_6"),
        ("GIT_CONFIG_KEY_7", "GIT_CONFIG_VALUE_7"),
        ("GIT_CONFIG_KEY_8", "GIT_CONFIG_VALUE_8"),
        ("GIT_CONFIG_KEY_9", "GIT_CONFIG_VALUE_9"),
        ("GIT_CONFIG_KEY_10", "GIT_CONFIG_VALUE_10"),
        ("GIT_CONFIG_KEY_11", "GIT_CONFIG_VALUE_11"),
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
        // A partial clone's promisor remote is not fetched from behind the call's back.
        ("GIT_NO_LAZY_FETCH", "1".into()),
        // Reads stay reads: `status` does not write the index back with refreshed file times
        // (readOnly mode lets it run; `diff` and `describe --dirty` still do, see
        // docs/agent-stream.md).
        ("GIT_OPTIONAL_LOCKS", "0".into()),
        // No home: the https transport would read the executor's user's `~/.netrc` (and send
        // the credentials it holds for a host the model names).
        ("HOME", "/dev/null".into()),
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
