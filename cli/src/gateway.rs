//! The gateway's REST API and its SSE run streams (docs/rest-api.md).
//!
//! Every request has a timeout; a stream has one for its response headers and then an idle
//! timeout between two chunks (the gateway sends a keep-alive comment every 15 s, so a silent
//! stream is a dead one).

use std::{io, time::Duration};

use futures::{StreamExt, stream};
use reqwest::{Client, RequestBuilder, Response, Url, header};
use serde_json::Value;
use sse_stream::SseStream;

use crate::{
    backend::EventStream,
    error::{Error, Result, chain},
};

/// The service name in messages.
const SERVICE: &str = "gateway";

/// A client of one gateway.
#[derive(Debug, Clone)]
pub struct Gateway {
    http: Client,
    base: Url,
    timeout: Duration,
    idle: Duration,
}

impl Gateway {
    /// A client of the gateway at `base` (`http://` or `https://`).
    pub fn new(
        base: &str,
        timeout: Duration,
        idle: Duration,
        authorization: Option<http::HeaderValue>,
    ) -> Result<Self> {
        let base = parse_http_url(base, "--gateway (TASKFORCE_GATEWAY_URL)")?;
        let mut headers = http::HeaderMap::new();
        if let Some(value) = authorization {
            headers.insert(http::header::AUTHORIZATION, value);
        }
        let http = Client::builder()
            .connect_timeout(timeout)
            .default_headers(headers)
            .build()
            .map_err(|e| Error::Input(format!("cannot build the HTTP client: {}", chain(&e))))?;
        Ok(Self {
            http,
            base,
            timeout,
            idle,
        })
    }

    /// The URL of `segments` below the base (each segment percent-encoded).
    fn url(&self, segments: &[&str]) -> Result<Url> {
        // A URL would read these as "this" and "the parent" path segment, not as an id.
        if let Some(dots) = segments.iter().find(|s| matches!(**s, "." | "..")) {
            return Err(Error::Input(format!(
                "`{dots}` is not a valid id (letters, digits, `-` and `_`)"
            )));
        }
        let mut url = self.base.clone();
        url.path_segments_mut()
            .map_err(|()| Error::Input(format!("{} cannot be a base URL", self.base)))?
            .pop_if_empty()
            .extend(segments);
        Ok(url)
    }

    /// `GET` of `segments`, answered with JSON.
    pub async fn get(&self, segments: &[&str], query: &[(&str, &str)]) -> Result<Value> {
        let mut url = self.url(segments)?;
        if !query.is_empty() {
            url.query_pairs_mut().extend_pairs(query);
        }
        self.json(self.http.get(url)).await
    }

    /// `POST` of `body` to `segments`, answered with JSON.
    pub async fn post(&self, segments: &[&str], body: &Value) -> Result<Value> {
        let url = self.url(segments)?;
        self.json(self.http.post(url).json(body)).await
    }

    /// `PUT` of `body` to `segments`, answered with JSON.
    pub async fn put(&self, segments: &[&str], body: &Value) -> Result<Value> {
        let url = self.url(segments)?;
        self.json(self.http.put(url).json(body)).await
    }

    /// `DELETE` of `segments`.
    pub async fn delete(&self, segments: &[&str], query: &[(&str, &str)]) -> Result<()> {
        let mut url = self.url(segments)?;
        if !query.is_empty() {
            url.query_pairs_mut().extend_pairs(query);
        }
        self.send(self.http.delete(url).timeout(self.timeout))
            .await
            .map(drop)
    }

    /// Sends a request with the timeout and decodes a JSON answer.
    async fn json(&self, req: RequestBuilder) -> Result<Value> {
        let resp = self.send(req.timeout(self.timeout)).await?;
        let url = resp.url().to_string();
        let bytes = resp
            .bytes()
            .await
            .map_err(|e| request_error(&e, &url, self.timeout))?;
        serde_json::from_slice(&bytes).map_err(|e| Error::Protocol {
            service: SERVICE,
            message: format!("the answer of {url} is not JSON: {e}"),
        })
    }

    /// Sends a request; a non-2xx answer becomes its JSON error body.
    async fn send(&self, req: RequestBuilder) -> Result<Response> {
        let (client, req) = req.build_split();
        let req = req.map_err(|e| Error::Input(format!("bad request: {}", chain(&e))))?;
        let url = req.url().to_string();
        let resp = match tokio::time::timeout(self.timeout, client.execute(req)).await {
            Ok(Ok(resp)) => resp,
            Ok(Err(e)) => return Err(request_error(&e, &url, self.timeout)),
            Err(_) => return Err(self.timed_out(&url)),
        };
        if resp.status().is_success() {
            return Ok(resp);
        }
        Err(self.error_of(resp).await)
    }

    /// The error of a non-2xx answer: its JSON body, or the status and text.
    async fn error_of(&self, resp: Response) -> Error {
        let status = resp.status();
        let text = match tokio::time::timeout(self.timeout, resp.text()).await {
            Ok(Ok(text)) => text,
            Ok(Err(_)) | Err(_) => String::new(),
        };
        let body = match serde_json::from_str::<Value>(&text) {
            Ok(body) if body.get("error").is_some() => body,
            _ => {
                let reason = status.canonical_reason().unwrap_or("error");
                let text: String = text.trim().chars().take(300).collect();
                let message = if text.is_empty() {
                    format!("HTTP {} {reason}", status.as_u16())
                } else {
                    text
                };
                serde_json::json!({"error": reason.to_ascii_lowercase().replace(' ', "_"),
                                   "message": message})
            }
        };
        Error::Api {
            status: Some(status.as_u16()),
            body,
        }
    }

    fn timed_out(&self, url: &str) -> Error {
        Error::Timeout {
            service: SERVICE,
            url: url.to_owned(),
            after: self.timeout,
            what: "--timeout",
        }
    }

    /// `POST` of `body` to `segments`, answered with an SSE run stream: each event's `data:` as
    /// JSON.
    pub async fn stream(&self, segments: &[&str], body: &Value) -> Result<EventStream> {
        let url = self.url(segments)?;
        let resp = self
            .send(
                self.http
                    .post(url.clone())
                    .header(header::ACCEPT, "text/event-stream")
                    .json(body),
            )
            .await?;
        let content_type = resp
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        if !content_type.starts_with("text/event-stream") {
            return Err(Error::Protocol {
                service: SERVICE,
                message: format!("{url} answered {content_type:?}, not an event stream"),
            });
        }
        let idle = self.idle;
        let chunks = stream::unfold(Some(resp), move |resp| async move {
            let mut resp = resp?;
            match tokio::time::timeout(idle, resp.chunk()).await {
                Ok(Ok(Some(bytes))) => Some((Ok(bytes), Some(resp))),
                Ok(Ok(None)) => None,
                Ok(Err(e)) => Some((Err(io::Error::other(e)), None)),
                Err(_) => Some((
                    Err(io::Error::new(io::ErrorKind::TimedOut, IdleTimeout)),
                    None,
                )),
            }
        });
        let url = url.to_string();
        let events = SseStream::from_bytes_stream(chunks).filter_map(move |item| {
            let out = match item {
                Ok(sse) => sse.data.map(|data| event_of(sse.event, &data)),
                Err(e) => Some(Err(stream_error(&e, &url, idle))),
            };
            futures::future::ready(out)
        });
        Ok(Box::pin(events))
    }
}

/// The marker of an idle stream.
#[derive(Debug, thiserror::Error)]
#[error("no event within the idle timeout")]
struct IdleTimeout;

/// One SSE event as the event JSON (its `type` from `event:` when the data has none).
fn event_of(name: Option<String>, data: &str) -> Result<Value> {
    let mut value: Value = serde_json::from_str(data).map_err(|e| Error::Protocol {
        service: SERVICE,
        message: format!("an event's data is not JSON ({e}): {data}"),
    })?;
    if let (Some(name), Some(obj)) = (name, value.as_object_mut()) {
        obj.entry("type").or_insert(Value::String(name));
    }
    Ok(value)
}

/// The error of a broken or silent stream.
fn stream_error(e: &sse_stream::Error, url: &str, idle: Duration) -> Error {
    if let sse_stream::Error::Body(body) = e
        && let Some(io) = body.downcast_ref::<io::Error>()
        && io.get_ref().is_some_and(|inner| inner.is::<IdleTimeout>())
    {
        return Error::Idle {
            service: SERVICE,
            url: url.to_owned(),
            after: idle,
        };
    }
    Error::Transport {
        service: SERVICE,
        url: url.to_owned(),
        cause: format!("the event stream broke: {}", chain(e)),
    }
}

/// The error of a request that got no (whole) answer within `after`.
fn request_error(e: &reqwest::Error, url: &str, after: Duration) -> Error {
    // reqwest's own sentence repeats the URL: its causes say what happened.
    let cause = std::error::Error::source(e).map_or_else(|| e.to_string(), chain);
    if e.is_connect() {
        Error::Unreachable {
            service: SERVICE,
            url: origin(url),
            cause,
        }
    } else if e.is_timeout() {
        Error::Timeout {
            service: SERVICE,
            url: url.to_owned(),
            after,
            what: "--timeout",
        }
    } else {
        // hyper's word for an HTTP/2-only server's answer to HTTP/1 (a gRPC port).
        let cause = if cause.contains("invalid HTTP version") {
            format!(
                "{cause}; is this the gateway's address? The registry and the executor speak \
                 gRPC only: reach them with --grpc and --registry or --executor"
            )
        } else {
            cause
        };
        Error::Transport {
            service: SERVICE,
            url: url.to_owned(),
            cause,
        }
    }
}

/// `scheme://host:port` of a URL (what "cannot reach" is about).
fn origin(url: &str) -> String {
    Url::parse(url).map_or_else(|_| url.to_owned(), |u| u.origin().ascii_serialization())
}

/// An `http://` or `https://` URL; `flag` names where it came from.
pub fn parse_http_url(s: &str, flag: &str) -> Result<Url> {
    let url = Url::parse(s.trim()).map_err(|e| Error::Usage(format!("{flag} {s:?}: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(Error::Usage(format!(
            "{flag} {s:?}: expected an http:// or https:// URL"
        )));
    }
    Ok(url)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_joined_and_encoded_below_the_base() {
        let g = Gateway::new(
            "http://127.0.0.1:8080/prefix/",
            Duration::from_secs(1),
            Duration::from_secs(1),
            None,
        )
        .expect("a valid URL");
        let url = g.url(&["api", "v1", "agents", "a/b?c"]).expect("joins");
        assert_eq!(
            url.as_str(),
            "http://127.0.0.1:8080/prefix/api/v1/agents/a%2Fb%3Fc"
        );
    }

    #[test]
    fn only_http_urls_are_gateways() {
        assert!(parse_http_url("http://localhost:8080", "--gateway").is_ok());
        for bad in ["localhost:8080", "grpc://x:1", "ftp://x", "http//x"] {
            assert!(parse_http_url(bad, "--gateway").is_err(), "{bad}");
        }
    }

    #[test]
    fn an_event_takes_its_name_when_the_data_has_no_type() {
        let v = event_of(Some("token".into()), r#"{"text": "hi"}"#).expect("JSON");
        assert_eq!(v["type"], "token");
        let v = event_of(Some("x".into()), r#"{"type": "done"}"#).expect("JSON");
        assert_eq!(v["type"], "done");
        assert!(event_of(None, "not json").is_err());
    }
}
