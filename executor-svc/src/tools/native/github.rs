//! `github`: one GitHub REST API call, `method` + `path` (+ JSON `body`), as the catalog's schema
//! says. The token comes from the configuration (`GITHUB_TOKEN`), is sent only to the configured
//! API host, and never appears in logs or outputs.

use std::sync::Arc;

use futures::{FutureExt, future::BoxFuture};
use reqwest::{Method, header};
use secrecy::ExposeSecret;
use serde::Deserialize;
use serde_json::Value;
use tracing::debug;

use super::{NativeToolsConfig, cap_text, catalog_definition, failed, http::send, parse_args};
use crate::{
    llm::ToolDefinition,
    tools::{Tool, ToolContext, ToolError, ToolOutcome},
};

const TOOL: &str = "github";

/// `github`: calls the API at [`NativeToolsConfig::github_api_url`].
#[derive(Debug)]
pub struct GitHub {
    definition: ToolDefinition,
    config: Arc<NativeToolsConfig>,
    client: Option<super::http::WebClient>,
}

impl GitHub {
    /// The tool; see [`super::WebSearch::new`] about `client`.
    pub fn new(config: Arc<NativeToolsConfig>, client: Option<super::http::WebClient>) -> Self {
        Self {
            definition: catalog_definition(TOOL),
            config,
            client,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GitHubArgs {
    method: String,
    path: String,
    body: Option<Value>,
}

/// Checks an API path: absolute, no scheme or host, no `..`, no whitespace.
fn check_path(path: &str) -> Result<(), String> {
    if !path.starts_with('/') || path.starts_with("//") {
        return Err(format!(
            "`path` must be an API path starting with `/`, such as /repos/OWNER/REPO, not {path:?}"
        ));
    }
    // The URL parser reads `%2e` as a dot in dot segments (`%2e%2e`, `.%2E`), and a server or
    // proxy behind the API's base may read `%2f` and `%5c` as separators (`a%2f..%2fadmin`):
    // so does this, so no spelling of a dot segment gets through.
    let route = path
        .split(['?', '#'])
        .next()
        .unwrap_or(path)
        .to_ascii_lowercase()
        .replace("%2e", ".")
        .replace("%2f", "/")
        .replace("%5c", "/");
    if route.split('/').any(|seg| seg == ".." || seg == ".")
        || path.contains(char::is_whitespace)
        || path.contains('\\')
    {
        return Err(format!("`path` {path:?} is not a plain API path"));
    }
    Ok(())
}

impl Tool for GitHub {
    fn definition(&self) -> &ToolDefinition {
        &self.definition
    }

    fn call<'a>(
        &'a self,
        ctx: &'a ToolContext,
        arguments: Value,
    ) -> BoxFuture<'a, Result<ToolOutcome, ToolError>> {
        async move {
            let args: GitHubArgs = parse_args(TOOL, arguments)?;
            let invalid = |reason: String| ToolError::InvalidArguments {
                tool: TOOL.to_owned(),
                reason,
            };
            let method = match args.method.to_ascii_uppercase().as_str() {
                "GET" => Method::GET,
                "POST" => Method::POST,
                "PATCH" => Method::PATCH,
                "PUT" => Method::PUT,
                "DELETE" => Method::DELETE,
                other => {
                    return Err(invalid(format!(
                        "`method` must be GET, POST, PATCH, PUT or DELETE, not {other:?}"
                    )));
                }
            };
            check_path(&args.path).map_err(invalid)?;
            // As the schema says: a JSON object, and not on a GET (which would drop it).
            match &args.body {
                Some(Value::Object(_)) if method == Method::GET => {
                    return Err(invalid(
                        "a GET takes no `body`; put parameters in the `path`'s query".to_owned(),
                    ));
                }
                Some(Value::Object(_)) | None | Some(Value::Null) => {}
                Some(_) => return Err(invalid("`body` must be a JSON object".to_owned())),
            }
            let token = self.config.github_token.as_ref();
            if token.is_none() && method != Method::GET {
                return Err(ToolError::Unavailable {
                    tool: TOOL.to_owned(),
                    reason:
                        "GITHUB_TOKEN is not set on the executor; only GET calls work without it"
                            .to_owned(),
                });
            }
            let url = format!(
                "{}{}",
                self.config.github_api_url.trim_end_matches('/'),
                args.path
            );
            let url = reqwest::Url::parse(&url)
                .map_err(|e| failed(TOOL, format!("bad GitHub API URL: {e}")))?;
            // However the path was spelled, the call (and the token) stay under the API's base.
            let base = reqwest::Url::parse(&self.config.github_api_url)
                .map_err(|e| failed(TOOL, format!("bad GitHub API URL: {e}")))?;
            if !super::guard::within(&base, &url) {
                return Err(invalid(format!(
                    "`path` {:?} leads outside the GitHub API",
                    args.path
                )));
            }
            let auth = match token {
                Some(t) => {
                    let mut value =
                        header::HeaderValue::from_str(&format!("Bearer {}", t.expose_secret()))
                            .map_err(|_| {
                                failed(TOOL, "GITHUB_TOKEN holds characters a header cannot carry")
                            })?;
                    value.set_sensitive(true);
                    Some(value)
                }
                None => None,
            };
            let build = |c: &reqwest::Client| {
                let mut req = c
                    .request(method.clone(), url.clone())
                    .header(header::ACCEPT, "application/vnd.github+json")
                    .header("X-GitHub-Api-Version", "2022-11-28");
                if let Some(value) = auth {
                    req = req.header(header::AUTHORIZATION, value);
                }
                match &args.body {
                    Some(body) if method != Method::GET => req.json(body),
                    _ => req,
                }
            };
            let resp = send(
                TOOL,
                ctx,
                self.client.as_ref(),
                build,
                self.config.max_download_bytes,
            )
            .await?;
            debug!(method = %method, path = %args.path, status = resp.status.as_u16(), "github");
            let mut text = String::from_utf8_lossy(&resp.body).into_owned();
            if let Some(t) = token.filter(|t| !t.expose_secret().is_empty()) {
                // An echoing server (or a mistake upstream) must not hand the token to the model.
                text = text.replace(t.expose_secret(), "***");
            }
            if resp.cut {
                text.push_str("\n[response cut: it was larger than the download limit]");
            }
            let text = cap_text(text, ctx.limits.max_output_bytes);
            let status = resp.status;
            if status.is_success() {
                Ok(ToolOutcome::ok(if text.is_empty() {
                    format!("HTTP {status}")
                } else {
                    text
                }))
            } else {
                Ok(ToolOutcome::failed(format!(
                    "GitHub API answered HTTP {status}\n{text}"
                )))
            }
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_paths_must_be_plain() {
        assert!(check_path("/repos/o/r/issues?state=open&per_page=5").is_ok());
        // An encoded slash inside a name (a branch `feature/x`) is not a step up.
        assert!(check_path("/repos/o/r/branches/feature%2Fx").is_ok());
        for bad in [
            "repos/o/r",
            "//evil.example/x",
            "/repos/../user",
            "/%2e%2e/outside-prefix",
            "/%2E%2E/x",
            "/.%2e/x",
            "/repos/%2e/x",
            "/repos/o/r%2f..%2f..%2fadmin",
            "/repos/o/r%5C..",
            "/a b",
            "/x\\y",
        ] {
            assert!(check_path(bad).is_err(), "{bad}");
        }
    }
}
