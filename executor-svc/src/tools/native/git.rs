//! `git`: one git command in the workspace, arguments as a list (never through a shell).
//!
//! The workspace is the boundary: options that point git elsewhere (`-C`, `--git-dir`,
//! `--work-tree`) or inject configuration (`-c`, `--config-env`, which can run programs) are
//! refused, and `GIT_CEILING_DIRECTORIES` stops git from finding a repository above the workspace.

use std::{ffi::OsString, path::PathBuf};

use futures::{FutureExt, future::BoxFuture};
use serde::Deserialize;
use serde_json::Value;

use super::{
    catalog_definition, parse_args,
    process::{self, Spawn},
    workspace,
};
use crate::{
    llm::ToolDefinition,
    tools::{Tool, ToolContext, ToolError, ToolOutcome},
};

/// Global options that would leave the workspace or run arbitrary programs.
const REFUSED: [&str; 7] = [
    "-C",
    "-c",
    "--git-dir",
    "--work-tree",
    "--config-env",
    "--exec-path",
    "--namespace",
];

/// `git`: runs the configured git binary in the workspace.
#[derive(Debug)]
pub struct Git {
    definition: ToolDefinition,
    bin: PathBuf,
}

impl Git {
    /// The tool, running `bin` (e.g. `git`).
    pub fn new(bin: PathBuf) -> Self {
        Self {
            definition: catalog_definition("git"),
            bin,
        }
    }
}

#[derive(Deserialize)]
struct GitArgs {
    args: Vec<String>,
}

/// The first refused global option in `args` (before the subcommand), if any.
fn refused_option(args: &[String]) -> Option<&str> {
    for a in args {
        if !a.starts_with('-') {
            // The subcommand: what follows are its own arguments.
            return None;
        }
        let name = a.split('=').next().unwrap_or(a);
        if REFUSED.contains(&name) || (a.starts_with("-C") || a.starts_with("-c")) && a.len() > 2 {
            return Some(a);
        }
    }
    None
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
            if args.args.is_empty() {
                return Err(invalid("`args` is empty; give a git subcommand such as [\"status\"]".into()));
            }
            if let Some(opt) = refused_option(&args.args) {
                return Err(invalid(format!(
                    "`{opt}` is not allowed: git runs in the agent's workspace with its own configuration"
                )));
            }
            let cwd = workspace::root("git", &ctx.workspace).await?;
            let ceiling = cwd.parent().map(|p| p.as_os_str().to_owned()).unwrap_or_default();
            let spec = Spawn {
                tool: "git",
                program: &self.bin,
                args: args.args.into_iter().map(OsString::from).collect(),
                env: vec![
                    ("GIT_CEILING_DIRECTORIES", ceiling),
                    ("GIT_TERMINAL_PROMPT", "0".into()),
                    ("GIT_PAGER", "cat".into()),
                    ("GIT_CONFIG_NOSYSTEM", "1".into()),
                ],
                stdin: None,
                cwd,
                timeout: ctx.limits.timeout,
            };
            let cap = ctx.limits.max_output_bytes;
            Ok(process::run(ctx, spec, cap).await?.into_outcome(cap))
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn options_that_leave_the_workspace_are_refused_before_the_subcommand_only() {
        assert_eq!(refused_option(&v(&["-C", "/etc", "status"])), Some("-C"));
        assert_eq!(
            refused_option(&v(&["-c", "core.pager=x", "log"])),
            Some("-c")
        );
        assert_eq!(
            refused_option(&v(&["-ccore.pager=x", "log"])),
            Some("-ccore.pager=x")
        );
        assert_eq!(
            refused_option(&v(&["--git-dir=/x/.git", "log"])),
            Some("--git-dir=/x/.git")
        );
        assert_eq!(refused_option(&v(&["--no-pager", "log", "-C", "x"])), None);
        assert_eq!(refused_option(&v(&["commit", "-c", "HEAD"])), None);
    }
}
