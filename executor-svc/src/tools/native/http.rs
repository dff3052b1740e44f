//! The capped, cancellable HTTP request `web_search`, `web_fetch` and `github` share.

use std::{fmt::Write as _, sync::Arc};

use reqwest::{RequestBuilder, header::CONTENT_TYPE};

use super::{bounded, failed, guard::NetGuard};
use crate::tools::{ToolContext, ToolError};

/// The web tools' HTTP client and the rule of where it may connect ([`NetGuard`]: its
/// resolver and redirect policy are the client's; address literals are checked here).
#[derive(Debug, Clone)]
pub struct WebClient {
    client: reqwest::Client,
    guard: Arc<NetGuard>,
}

impl WebClient {
    /// A client that follows `guard`, and with a `scope`, follows redirects only under it
    /// (same origin, a path below its path): the `github` tool's token stays with the API (a
    /// GitHub Enterprise host serves other applications beside `/api/v3`).
    pub fn scoped(
        builder: reqwest::ClientBuilder,
        guard: NetGuard,
        scope: Option<reqwest::Url>,
    ) -> reqwest::Result<Self> {
        let guard = Arc::new(guard);
        // Never through `HTTP(S)_PROXY`: a proxy resolves the host names itself, so the guard's
        // resolver would only ever see the proxy's, and a name of a loopback, private or
        // metadata address would be fetched by the proxy (tools audit F3).
        let client = builder
            .no_proxy()
            .dns_resolver(Arc::clone(&guard))
            .redirect(guard.redirect_policy(scope))
            .build()?;
        Ok(Self { client, guard })
    }
}

/// A response read up to a byte cap.
#[derive(Debug)]
pub(crate) struct Fetched {
    /// HTTP status.
    pub status: reqwest::StatusCode,
    /// `Content-Type` without parameters, lowercased (empty when absent).
    pub content_type: String,
    /// The body, at most the cap.
    pub body: Vec<u8>,
    /// True when the body was longer than the cap.
    pub cut: bool,
}

/// Sends `request`, reading at most `max_bytes` of the body, within the call's timeout and
/// until `ctx.cancel` fires (which drops the connection).
pub(crate) async fn send(
    tool: &str,
    ctx: &ToolContext,
    client: Option<&WebClient>,
    request: impl FnOnce(&reqwest::Client) -> RequestBuilder,
    max_bytes: usize,
) -> Result<Fetched, ToolError> {
    let Some(client) = client else {
        return Err(ToolError::Unavailable {
            tool: tool.to_owned(),
            reason: "the executor could not set up its HTTP client".to_owned(),
        });
    };
    let built = request(&client.client)
        .build()
        .map_err(|e| failed(tool, describe(e)))?;
    client
        .guard
        .check_url(built.url())
        .map_err(|why| failed(tool, format!("{} is refused: {why}", built.url())))?;
    let http = client.client.clone();
    let work = async move {
        let mut resp = http
            .execute(built)
            .await
            .map_err(|e| failed(tool, describe(e)))?;
        let status = resp.status();
        let content_type = resp
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .unwrap_or_default()
            .trim()
            .to_ascii_lowercase();
        let mut body = Vec::new();
        let mut cut = false;
        while let Some(chunk) = resp.chunk().await.map_err(|e| failed(tool, describe(e)))? {
            let room = max_bytes.saturating_sub(body.len());
            body.extend_from_slice(&chunk[..chunk.len().min(room)]);
            if chunk.len() > room {
                cut = true;
                break;
            }
        }
        Ok(Fetched {
            status,
            content_type,
            body,
            cut,
        })
    };
    bounded(tool, ctx, work).await
}

/// An HTTP error with its cause chain, without the URL (the caller names what it fetched).
fn describe(e: reqwest::Error) -> String {
    let e = e.without_url();
    let mut s = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(cause) = source {
        let _ = write!(s, ": {cause}");
        source = cause.source();
    }
    s
}
