//! `ask_user`: pauses the run with a question; the loop stores it and resumes with the answer.

use futures::{FutureExt, future::BoxFuture};
use serde::Deserialize;
use serde_json::Value;

use super::{catalog_definition, parse_args};
use crate::{
    llm::ToolDefinition,
    tools::{Tool, ToolContext, ToolError, ToolOutcome},
};

/// `ask_user`: returns [`ToolOutcome::Question`].
#[derive(Debug)]
pub struct AskUser {
    definition: ToolDefinition,
}

impl AskUser {
    /// The tool.
    pub fn new() -> Self {
        Self {
            definition: catalog_definition("ask_user"),
        }
    }
}

impl Default for AskUser {
    fn default() -> Self {
        Self::new()
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AskArgs {
    question: String,
    #[serde(default)]
    key: Option<String>,
    #[serde(default)]
    required: Option<bool>,
    #[serde(default)]
    default: Option<Value>,
}

impl Tool for AskUser {
    fn definition(&self) -> &ToolDefinition {
        &self.definition
    }

    fn call<'a>(
        &'a self,
        _ctx: &'a ToolContext,
        arguments: Value,
    ) -> BoxFuture<'a, Result<ToolOutcome, ToolError>> {
        async move {
            let args: AskArgs = parse_args("ask_user", arguments)?;
            let question = args.question.trim();
            if question.is_empty() {
                return Err(ToolError::InvalidArguments {
                    tool: "ask_user".to_owned(),
                    reason: "`question` is empty".to_owned(),
                });
            }
            let key = match args.key.as_deref().map(str::trim) {
                None | Some("") => None,
                Some(key) if valid_key(key) => Some(key.to_owned()),
                Some(key) => {
                    return Err(ToolError::InvalidArguments {
                        tool: "ask_user".to_owned(),
                        reason: format!(
                            "`key` `{key}` must be 1-64 letters, digits, `_`, `-` or `.`"
                        ),
                    });
                }
            };
            Ok(ToolOutcome::Question {
                question: question.to_owned(),
                key,
                required: args.required.unwrap_or(true),
                default: args.default.filter(|d| !d.is_null()),
            })
        }
        .boxed()
    }
}

/// Keys name answers in JSON objects and `key: value` lines: keep them plain.
fn valid_key(key: &str) -> bool {
    (1..=64).contains(&key.len())
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}
