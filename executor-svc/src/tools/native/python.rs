//! `python` and `powershell`: a program from the model, run in the workspace.
//!
//! Python reads the program from stdin (`python3 -`), so its size is not bound by the argument
//! length limit; PowerShell gets it as `-Command`. Both run through [`process::run`].

use std::{ffi::OsString, path::PathBuf, sync::Arc};

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

/// `python`: runs Python source with the interpreter in [`super::NativeToolsConfig::python_bin`].
#[derive(Debug)]
pub struct Python {
    definition: ToolDefinition,
    bin: PathBuf,
    sandbox: Arc<Sandbox>,
}

impl Python {
    /// The tool, running `bin` (e.g. `python3`) in `sandbox`.
    pub fn new(bin: PathBuf, sandbox: Arc<Sandbox>) -> Self {
        Self {
            definition: catalog_definition("python"),
            bin,
            sandbox,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PythonArgs {
    code: String,
    timeout_seconds: Option<u64>,
}

impl Tool for Python {
    fn definition(&self) -> &ToolDefinition {
        &self.definition
    }

    fn call<'a>(
        &'a self,
        ctx: &'a ToolContext,
        arguments: Value,
    ) -> BoxFuture<'a, Result<ToolOutcome, ToolError>> {
        async move {
            let args: PythonArgs = parse_args("python", arguments)?;
            let cwd = workspace::root("python", &ctx.workspace).await?;
            let spec = Spawn {
                tool: "python",
                program: &self.bin,
                args: vec!["-".into()],
                env: vec![
                    ("PYTHONUNBUFFERED", "1".into()),
                    ("PYTHONIOENCODING", "utf-8".into()),
                    ("PYTHONDONTWRITEBYTECODE", "1".into()),
                ],
                stdin: Some(args.code.into_bytes()),
                cwd,
                timeout: process::timeout("python", ctx, args.timeout_seconds)?,
                sandbox: self.sandbox.clone(),
            };
            let cap = ctx.limits.max_output_bytes;
            Ok(process::run(ctx, spec, cap).await?.into_outcome(cap))
        }
        .boxed()
    }
}

/// True when PowerShell (`pwsh`) is on `PATH`.
pub fn powershell_available() -> bool {
    which::which("pwsh").is_ok()
}

/// `powershell`: runs a script through `pwsh` when it is installed.
#[derive(Debug)]
pub struct Powershell {
    definition: ToolDefinition,
    bin: PathBuf,
    sandbox: Arc<Sandbox>,
}

impl Powershell {
    /// The tool, running `bin` (e.g. `pwsh`) in `sandbox`.
    pub fn new(bin: PathBuf, sandbox: Arc<Sandbox>) -> Self {
        Self {
            definition: catalog_definition("powershell"),
            bin,
            sandbox,
        }
    }

    /// True when this tool's binary is installed.
    pub fn installed(&self) -> bool {
        which::which(&self.bin).is_ok()
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PowershellArgs {
    script: String,
    timeout_seconds: Option<u64>,
}

impl Tool for Powershell {
    fn definition(&self) -> &ToolDefinition {
        &self.definition
    }

    fn available(&self) -> bool {
        self.installed()
    }

    fn call<'a>(
        &'a self,
        ctx: &'a ToolContext,
        arguments: Value,
    ) -> BoxFuture<'a, Result<ToolOutcome, ToolError>> {
        async move {
            let args: PowershellArgs = parse_args("powershell", arguments)?;
            if !self.installed() {
                return Err(ToolError::Unavailable {
                    tool: "powershell".to_owned(),
                    reason: format!(
                        "PowerShell (`{}`) is not installed on the executor's host; install \
                         PowerShell 7 or use the python tool",
                        self.bin.display()
                    ),
                });
            }
            let cwd = workspace::root("powershell", &ctx.workspace).await?;
            let spec = Spawn {
                tool: "powershell",
                program: &self.bin,
                args: ["-NoLogo", "-NoProfile", "-NonInteractive", "-Command"]
                    .into_iter()
                    .map(OsString::from)
                    .chain([OsString::from(args.script)])
                    .collect(),
                env: vec![("POWERSHELL_TELEMETRY_OPTOUT", "1".into())],
                stdin: None,
                cwd,
                timeout: process::timeout("powershell", ctx, args.timeout_seconds)?,
                sandbox: self.sandbox.clone(),
            };
            let cap = ctx.limits.max_output_bytes;
            Ok(process::run(ctx, spec, cap).await?.into_outcome(cap))
        }
        .boxed()
    }
}
