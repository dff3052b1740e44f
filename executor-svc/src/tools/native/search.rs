//! `web_search`: a search results page (DuckDuckGo's HTML format) parsed into titles, URLs and
//! snippets.

use std::{fmt::Write as _, sync::Arc};

use futures::{FutureExt, future::BoxFuture};
use reqwest::Url;
use serde::Deserialize;
use serde_json::Value;
use tracing::debug;

use super::{
    NativeToolsConfig, cap_text, catalog_definition, failed,
    html::{Token, attr, for_each_token, has_class},
    http::send,
    parse_args,
};
use crate::{
    llm::ToolDefinition,
    tools::{Tool, ToolContext, ToolError, ToolOutcome},
};

/// Percent-encodes a query value (`application/x-www-form-urlencoded`, space as `+`).
fn encode_query(q: &str) -> String {
    let mut out = String::with_capacity(q.len());
    for b in q.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            b' ' => out.push('+'),
            _ => {
                let _ = write!(out, "%{b:02X}");
            }
        }
    }
    out
}

/// One search hit.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Hit {
    pub title: String,
    pub url: String,
    pub snippet: String,
}

/// Results from a DuckDuckGo HTML page: `a.result__a` (title, link) followed by an element with
/// class `result__snippet`; redirect links (`/l/?uddg=`) are unwrapped and ads skipped.
pub(crate) fn parse_results(html: &str, page_url: &Url) -> Vec<Hit> {
    let mut hits: Vec<Hit> = Vec::new();
    // What is being collected: (is_title, end tag name, text so far).
    let mut capture: Option<(bool, String, String)> = None;
    for_each_token(html, |token| {
        if let Some((is_title, end, text)) = capture.as_mut() {
            match token {
                Token::Text(t) => text.push_str(t),
                Token::End(name) if name == end => {
                    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
                    if let Some(last) = hits.last_mut() {
                        if *is_title {
                            last.title = text;
                        } else if last.snippet.is_empty() {
                            last.snippet = text;
                        }
                    }
                    capture = None;
                }
                _ => {}
            }
            return;
        }
        let Token::Start(tag) = token else {
            return;
        };
        if has_class(tag, "result__a") {
            if let Some(url) = attr(tag, "href").and_then(|h| target_url(h, page_url)) {
                hits.push(Hit {
                    title: String::new(),
                    url,
                    snippet: String::new(),
                });
                capture = Some((true, tag.name.to_string(), String::new()));
            }
        } else if has_class(tag, "result__snippet") && !hits.is_empty() {
            capture = Some((false, tag.name.to_string(), String::new()));
        }
    });
    hits.retain(|h| !h.title.is_empty());
    hits
}

/// The real target of a result link; `None` for ads and links that do not parse.
fn target_url(href: &str, page_url: &Url) -> Option<String> {
    let url = page_url.join(href).ok()?;
    if url.path().starts_with("/y.js") {
        return None;
    }
    if url.path().starts_with("/l/") {
        return url
            .query_pairs()
            .find(|(k, _)| k == "uddg")
            .map(|(_, v)| v.into_owned());
    }
    Some(url.to_string())
}

/// `web_search`: the configured search page, parsed into titles, URLs and snippets.
#[derive(Debug)]
pub struct WebSearch {
    definition: ToolDefinition,
    config: Arc<NativeToolsConfig>,
    client: Option<super::http::WebClient>,
}

impl WebSearch {
    /// The tool; `client` is `None` when no HTTP client could be built (the tool is then
    /// unavailable).
    pub fn new(config: Arc<NativeToolsConfig>, client: Option<super::http::WebClient>) -> Self {
        Self {
            definition: catalog_definition("web_search"),
            config,
            client,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SearchArgs {
    query: String,
    num_results: Option<u64>,
}

impl Tool for WebSearch {
    fn definition(&self) -> &ToolDefinition {
        &self.definition
    }

    fn call<'a>(
        &'a self,
        ctx: &'a ToolContext,
        arguments: Value,
    ) -> BoxFuture<'a, Result<ToolOutcome, ToolError>> {
        async move {
            const TOOL: &str = "web_search";
            let args: SearchArgs = parse_args(TOOL, arguments)?;
            let query = args.query.trim();
            if query.is_empty() {
                return Err(ToolError::InvalidArguments {
                    tool: TOOL.into(),
                    reason: "`query` is empty".into(),
                });
            }
            let n = usize::try_from(args.num_results.unwrap_or(5).clamp(1, 20)).unwrap_or(5);
            let url = Url::parse(&format!(
                "{}{}",
                self.config.web_search_url,
                encode_query(query)
            ))
            .map_err(|e| failed(TOOL, format!("bad search URL in the configuration: {e}")))?;
            let page = send(
                TOOL,
                ctx,
                self.client.as_ref(),
                |c| c.get(url.clone()),
                self.config.max_download_bytes,
            )
            .await?;
            if !page.status.is_success() {
                return Ok(ToolOutcome::failed(format!(
                    "the search service answered HTTP {}",
                    page.status
                )));
            }
            let hits = parse_results(&String::from_utf8_lossy(&page.body), &url);
            debug!(query, hits = hits.len(), "web_search");
            if hits.is_empty() {
                return Ok(ToolOutcome::ok(format!("no results for \"{query}\"")));
            }
            let mut text = String::new();
            for (i, h) in hits.iter().take(n).enumerate() {
                let _ = writeln!(text, "{}. {}\n   {}", i + 1, h.title, h.url);
                if !h.snippet.is_empty() {
                    let _ = writeln!(text, "   {}", h.snippet);
                }
            }
            Ok(ToolOutcome::ok(cap_text(
                text.trim_end().to_owned(),
                ctx.limits.max_output_bytes,
            )))
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_are_form_encoded() {
        assert_eq!(
            encode_query("rust async/await & co"),
            "rust+async%2Fawait+%26+co"
        );
        assert_eq!(encode_query("é"), "%C3%A9");
    }

    #[test]
    fn results_pair_titles_with_their_snippets_skipping_ads() {
        let base =
            Url::parse("https://html.duckduckgo.com/html/?q=x").unwrap_or_else(|e| panic!("{e}"));
        let page = r#"<div class="result"><a class="result__a" href="https://duckduckgo.com/y.js?ad_domain=x">Ad</a>
            <a class="result__snippet">ad text</a></div>
            <div><a class='result__a big' href=/l/?uddg=https%3A%2F%2Fexample.com%2Fa&amp;rut=1>Rust &amp;
              <b>async</b></a><div class="result__snippet">Fast &lt;and&gt; safe</div>
            <a class="result__snippet">a second snippet</a></div>
            <a class="result__a" href="https://example.org/">Second</a>"#;
        assert_eq!(
            parse_results(page, &base),
            vec![
                Hit {
                    title: "Rust & async".into(),
                    url: "https://example.com/a".into(),
                    snippet: "Fast <and> safe".into(),
                },
                Hit {
                    title: "Second".into(),
                    url: "https://example.org/".into(),
                    snippet: String::new(),
                },
            ]
        );
    }

    #[test]
    fn redirect_links_are_unwrapped_and_ads_skipped() {
        let base =
            Url::parse("https://html.duckduckgo.com/html/?q=x").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            target_url(
                "//duckduckgo.com/l/?uddg=https%3A%2F%2Fexample.com%2Fa%3Fb%3D1&rut=abc",
                &base
            )
            .as_deref(),
            Some("https://example.com/a?b=1")
        );
        assert_eq!(
            target_url("https://duckduckgo.com/y.js?ad_domain=x", &base),
            None
        );
        assert_eq!(
            target_url("https://example.org/", &base).as_deref(),
            Some("https://example.org/")
        );
    }
}
