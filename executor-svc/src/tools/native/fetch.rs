//! `web_fetch`: an http(s) URL as text, HTML converted, text and JSON passed through.

use std::{fmt::Write as _, sync::Arc};

use futures::{FutureExt, future::BoxFuture};
use reqwest::Url;
use serde::Deserialize;
use serde_json::Value;
use tracing::debug;

use super::{
    NativeToolsConfig, cap_text, catalog_definition, html::html_to_text, http::send, parse_args,
};
use crate::{
    llm::ToolDefinition,
    tools::{Tool, ToolContext, ToolError, ToolOutcome},
};

/// `web_fetch`: an http(s) URL as text; HTML converted, text and JSON as they are.
#[derive(Debug)]
pub struct WebFetch {
    definition: ToolDefinition,
    config: Arc<NativeToolsConfig>,
    client: Option<super::http::WebClient>,
}

impl WebFetch {
    /// The tool; see [`super::WebSearch::new`] about `client`.
    pub fn new(config: Arc<NativeToolsConfig>, client: Option<super::http::WebClient>) -> Self {
        Self {
            definition: catalog_definition("web_fetch"),
            config,
            client,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FetchArgs {
    url: String,
}

/// How a body is shown, by content type (sniffed when absent).
fn is_html(content_type: &str, body: &[u8]) -> Option<bool> {
    match content_type {
        "text/html" | "application/xhtml+xml" => Some(true),
        t if t.starts_with("text/")
            || t.ends_with("json")
            || t.ends_with("xml")
            || t.ends_with("javascript")
            || t.ends_with("yaml") =>
        {
            Some(false)
        }
        "" => {
            let head = String::from_utf8_lossy(&body[..body.len().min(1024)]).to_ascii_lowercase();
            if head.contains("<html") || head.contains("<!doctype html") {
                Some(true)
            } else if std::str::from_utf8(body).is_ok()
                || !body[..body.len().min(8192)].contains(&0)
            {
                Some(false)
            } else {
                None
            }
        }
        _ => None,
    }
}

impl Tool for WebFetch {
    fn definition(&self) -> &ToolDefinition {
        &self.definition
    }

    fn call<'a>(
        &'a self,
        ctx: &'a ToolContext,
        arguments: Value,
    ) -> BoxFuture<'a, Result<ToolOutcome, ToolError>> {
        async move {
            const TOOL: &str = "web_fetch";
            let args: FetchArgs = parse_args(TOOL, arguments)?;
            let invalid = |reason: String| ToolError::InvalidArguments { tool: TOOL.into(), reason };
            let url = Url::parse(args.url.trim()).map_err(|e| invalid(format!("`url` is not a URL: {e}")))?;
            if !matches!(url.scheme(), "http" | "https") {
                return Err(invalid(format!("only http and https URLs can be fetched, not {}:", url.scheme())));
            }
            let page = send(TOOL, ctx, self.client.as_ref(), |c| c.get(url.clone()), self.config.max_download_bytes).await?;
            let text = match is_html(&page.content_type, &page.body) {
                Some(true) => html_to_text(&String::from_utf8_lossy(&page.body)),
                Some(false) => String::from_utf8_lossy(&page.body).into_owned(),
                None => {
                    return Ok(ToolOutcome::failed(format!(
                        "{url} returned binary content ({}, {} bytes or more); web_fetch shows text only",
                        page.content_type, page.body.len()
                    )));
                }
            };
            debug!(url = %url, status = page.status.as_u16(), bytes = page.body.len(), "web_fetch");
            let mut text = cap_text(text, ctx.limits.max_output_bytes);
            if page.cut {
                let _ = write!(text, "\n[download cut at {} bytes]", self.config.max_download_bytes);
            }
            if page.status.is_success() {
                Ok(ToolOutcome::ok(text))
            } else {
                Ok(ToolOutcome::failed(format!("HTTP {}\n{text}", page.status)))
            }
        }
        .boxed()
    }
}
