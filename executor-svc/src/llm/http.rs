//! HTTP plumbing shared by the OpenAI-compatible and Anthropic clients: one endpoint with its
//! headers, retries with backoff and jitter before the first byte, timeouts, and error bodies.

use std::time::Duration;

use reqwest::{
    Response, Url,
    header::{self, HeaderMap, HeaderName, HeaderValue},
};
use secrecy::{ExposeSecret, SecretString};
use tracing::{debug, warn};

use super::{
    LlmError,
    config::{HttpSettings, ProviderConfig},
    env::{Env, expand},
    error::excerpt,
};

/// Largest error body read to find the server's message.
const MAX_ERROR_BODY: usize = 64 * 1024;

/// Where and how one provider's requests go.
#[derive(Debug)]
pub(crate) struct Endpoint {
    /// Provider name, for errors and logs.
    pub provider: String,
    /// Shared connection pool (connect timeout set on it).
    pub client: reqwest::Client,
    /// Full URL of the streaming endpoint, query included.
    pub url: Url,
    /// Authentication and extra headers (secret ones marked sensitive).
    pub headers: HeaderMap,
    /// Timeouts and retry policy.
    pub settings: HttpSettings,
    /// The key and the values of configured headers and query parameters that came from
    /// `${VAR}`, only so they can be scrubbed from server messages.
    pub secrets: Vec<SecretString>,
}

impl Endpoint {
    /// Builds an endpoint for provider `name`: `url` plus the configured query, `auth` headers
    /// (marked sensitive) plus the configured ones, and a client with the connect timeout.
    pub fn new(
        name: &str,
        config: &ProviderConfig,
        env: &Env,
        mut url: Url,
        auth: Vec<(&'static str, String)>,
        secret: Option<SecretString>,
    ) -> Result<Self, LlmError> {
        let settings = config.http_settings()?;
        let mut secrets: Vec<SecretString> = secret.into_iter().collect();
        // A value taken from the environment is the operator's secret whatever its name.
        // A query's values also as the URL carries them (a server quoting the URL back quotes
        // them encoded).
        let mut expanded = |value: &String, in_query: bool| -> Result<String, LlmError> {
            for value in taskforce_runtime::env::placeholder_values(value, |name| env.get(name)) {
                if in_query {
                    let encoded: String =
                        url::form_urlencoded::byte_serialize(value.as_bytes()).collect();
                    if encoded != value {
                        secrets.push(SecretString::from(encoded));
                    }
                }
                secrets.push(SecretString::from(value));
            }
            expand(value, env)
        };
        if !config.query.is_empty() {
            let mut pairs = url.query_pairs_mut();
            for (key, value) in &config.query {
                pairs.append_pair(key, &expanded(value, true)?);
            }
        }
        let mut headers = HeaderMap::new();
        for (key, value) in &config.headers {
            let name = HeaderName::from_bytes(key.as_bytes()).map_err(|e| {
                LlmError::Config(format!("provider {name}: header name {key:?}: {e}"))
            })?;
            let mut value = HeaderValue::from_str(&expanded(value, false)?)
                .map_err(|e| LlmError::Config(format!("provider {name}: header {key}: {e}")))?;
            value.set_sensitive(true);
            headers.insert(name, value);
        }
        for (key, value) in auth {
            let mut value = HeaderValue::from_str(&value).map_err(|_| {
                LlmError::Config(format!(
                    "provider {name}: the API key is not a valid header value"
                ))
            })?;
            value.set_sensitive(true);
            headers.insert(key, value);
        }
        taskforce_runtime::env::never_log(secrets.iter().map(|s| s.expose_secret()));
        let client = reqwest::Client::builder()
            .connect_timeout(settings.connect_timeout)
            // A redirect would carry the key headers (`x-api-key`, configured ones) to wherever
            // it points: a provider's endpoint answers, it does not send clients elsewhere.
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("taskforce-executor/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| {
                LlmError::Config(format!("provider {name}: HTTP client: {}", error_chain(&e)))
            })?;
        Ok(Self {
            provider: name.to_owned(),
            client,
            url,
            headers,
            settings,
            secrets,
        })
    }

    /// Replaces the API key and the other secrets of the configuration, where they appear, in
    /// text that came from the server.
    pub fn scrub(&self, text: &str) -> String {
        let secrets: Vec<&str> = self
            .secrets
            .iter()
            .map(|s| s.expose_secret())
            .filter(|s| s.len() >= 8)
            .collect();
        taskforce_runtime::env::scrub(text, &secrets)
    }

    /// POSTs `body`, retrying 408/429/5xx and connection failures before any response byte, with
    /// exponential backoff and jitter or the server's `Retry-After`.
    pub async fn send(&self, body: Vec<u8>) -> Result<Response, LlmError> {
        let settings = &self.settings;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let request = self
                .client
                .post(self.url.clone())
                .headers(self.headers.clone())
                .header(header::CONTENT_TYPE, "application/json")
                .header(header::ACCEPT, "text/event-stream")
                // The stream is read as it comes: no compression (a proxy would otherwise be
                // free to choose one, RFC 9110 §12.5.3).
                .header(header::ACCEPT_ENCODING, "identity")
                .body(body.clone());
            debug!(provider = %self.provider, attempt, "sending LLM request");
            let (error, retry_after) =
                match tokio::time::timeout(settings.request_timeout, request.send()).await {
                    Err(_) => {
                        let error = LlmError::Timeout {
                            provider: self.provider.clone(),
                            after: settings.request_timeout,
                            waiting_for: "the response",
                            attempts: attempt,
                        };
                        (error, None)
                    }
                    Ok(Err(e)) => {
                        let retryable = e.is_connect() || e.is_timeout() || e.is_request();
                        let error = LlmError::Connect {
                            provider: self.provider.clone(),
                            message: self.scrub(&error_chain(&e.without_url())),
                            attempts: attempt,
                        };
                        if !retryable {
                            return Err(error);
                        }
                        (error, None)
                    }
                    Ok(Ok(response)) if response.status().is_success() => return Ok(response),
                    Ok(Ok(mut response)) => {
                        let status = response.status().as_u16();
                        let retry_after = retry_after(response.headers());
                        let (message, code) = self.error_body(&mut response).await;
                        let error = LlmError::Status {
                            provider: self.provider.clone(),
                            status,
                            message,
                            attempts: attempt,
                        };
                        // A 429 for an exhausted quota (OpenAI's `insufficient_quota`) is not a
                        // rate limit: waiting does not help.
                        let quota = code.as_deref() == Some("insufficient_quota");
                        if !(status == 408 || status == 429 || status >= 500) || quota {
                            return Err(error);
                        }
                        (error, retry_after)
                    }
                };
            if attempt >= settings.max_attempts {
                return Err(error);
            }
            let delay = match retry_after {
                Some(wait) if wait > settings.max_retry_after => {
                    warn!(provider = %self.provider, wait = ?wait, "server asks to wait longer than allowed, giving up");
                    // Said in the error: the attempts left were not made, and why.
                    let mut error = error;
                    if let LlmError::Status { message, .. } = &mut error {
                        message.push_str(&format!(
                            " (not retried: the server asked to wait {wait:?}, more than the \
                             provider's max_retry_after_secs of {:?})",
                            settings.max_retry_after
                        ));
                    }
                    return Err(error);
                }
                Some(wait) => wait,
                None => backoff(settings, attempt),
            };
            warn!(provider = %self.provider, attempt, delay = ?delay, error = %error, "LLM request failed, retrying");
            tokio::time::sleep(delay).await;
        }
    }

    /// The server's error message from an error body (OpenAI, Anthropic and Ollama shapes), or an
    /// excerpt of the body.
    pub async fn error_message(&self, response: &mut Response) -> String {
        self.error_body(response).await.0
    }

    /// [`Self::error_message`], and the error's `code` (or `type`) when the body has one.
    async fn error_body(&self, response: &mut Response) -> (String, Option<String>) {
        let status = response.status();
        let mut body = Vec::new();
        let read = async {
            while let Ok(Some(chunk)) = response.chunk().await {
                body.extend_from_slice(&chunk);
                if body.len() >= MAX_ERROR_BODY {
                    break;
                }
            }
        };
        if tokio::time::timeout(self.settings.idle_timeout, read)
            .await
            .is_err()
        {
            debug!(provider = %self.provider, "error body did not arrive in time");
        }
        let text = String::from_utf8_lossy(&body);
        let json = serde_json::from_str::<serde_json::Value>(&text).ok();
        let error = json.as_ref().map(|json| json.get("error").unwrap_or(json));
        let field = |name: &str| {
            error
                .and_then(|e| e.get(name))
                .and_then(|v| v.as_str())
                .map(str::to_owned)
        };
        let code = field("code").or_else(|| field("type"));
        let message = error
            .and_then(|error| {
                error
                    .get("message")
                    .and_then(|m| m.as_str())
                    .or_else(|| error.as_str())
                    .map(str::to_owned)
            })
            .unwrap_or_else(|| {
                let trimmed = text.trim();
                if trimmed.is_empty() {
                    status.canonical_reason().unwrap_or("no message").to_owned()
                } else {
                    excerpt(trimmed)
                }
            });
        (self.scrub(&message), code)
    }
}

/// Exponential backoff with "equal jitter": half the step fixed, half random.
fn backoff(settings: &HttpSettings, attempt: u32) -> Duration {
    let exp = settings
        .backoff_base
        .saturating_mul(1u32 << attempt.saturating_sub(1).min(16));
    let step = exp.min(settings.backoff_max);
    step / 2 + step.mul_f64(fastrand::f64() / 2.0)
}

/// `retry-after-ms` (OpenAI) or `Retry-After` in seconds or as an HTTP date. `None` (the
/// backoff's own wait) for a negative or unreadable value and a date already past (a zero wait
/// would retry at once, each time); a number too large for a `Duration` is the longest wait.
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    let seconds = |secs: f64| match Duration::try_from_secs_f64(secs) {
        Ok(wait) => Some(wait),
        Err(_) if secs > 0.0 => Some(Duration::MAX),
        Err(_) => None,
    };
    if let Some(ms) = text("retry-after-ms").and_then(|v| v.parse::<f64>().ok()) {
        return seconds(ms / 1000.0);
    }
    let value = text("retry-after")?;
    if let Ok(secs) = value.parse::<f64>() {
        return seconds(secs);
    }
    let when = httpdate::parse_http_date(value).ok()?;
    when.duration_since(std::time::SystemTime::now()).ok()
}

/// An error and its sources on one line.
pub(crate) fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Parses a provider URL built from `base_url`.
pub(crate) fn parse_url(provider: &str, url: &str) -> Result<Url, LlmError> {
    Url::parse(url).map_err(|e| {
        LlmError::Config(taskforce_runtime::env::without_url_credentials(&format!(
            "provider {provider}: base_url gives {url:?}: {e}"
        )))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retry_after_past_negative_or_huge_is_read_as_no_wait_given_or_the_longest() {
        let with = |name: &str, value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(
                reqwest::header::HeaderName::from_bytes(name.as_bytes()).expect("name"),
                value.parse().expect("value"),
            );
            retry_after(&headers)
        };
        assert_eq!(with("retry-after", "2"), Some(Duration::from_secs(2)));
        assert_eq!(
            with("retry-after-ms", "1500"),
            Some(Duration::from_millis(1500))
        );
        // The backoff's own wait, not a retry at once.
        assert_eq!(with("retry-after", "Wed, 21 Oct 2015 07:28:00 GMT"), None);
        assert_eq!(with("retry-after", "-5"), None);
        assert_eq!(with("retry-after", "soon"), None);
        // Longer than any max_retry_after: not retried.
        assert_eq!(with("retry-after", "1e20"), Some(Duration::MAX));
        assert_eq!(with("retry-after-ms", "1e30"), Some(Duration::MAX));
    }

    #[test]
    fn values_from_the_environment_are_scrubbed_from_server_messages() {
        let config: ProviderConfig = serde_yaml::from_str(
            "type: openai\nheaders: {X-Tenant: 'Bearer ${TENANT_TOKEN}', X-Plain: json}\nquery: {sig: '${SIG}'}\n",
        )
        .expect("provider");
        let env = Env::from_pairs([
            ("TENANT_TOKEN", "tenant-canary-123"),
            ("SIG", "sig/canary+456="),
        ]);
        let url = Url::parse("https://llm.example/v1/chat").expect("url");
        let key = SecretString::from("key-canary-789".to_owned());
        let endpoint =
            Endpoint::new("p", &config, &env, url, Vec::new(), Some(key)).expect("endpoint");
        let echoed = "bad request: got tenant-canary-123, sig/canary+456=, key-canary-789 and json";
        assert_eq!(
            endpoint.scrub(echoed),
            "bad request: got ***, ***, *** and json"
        );
        // The query's value as the URL carried it.
        assert_eq!(
            endpoint.scrub("no route for /v1/chat?sig=sig%2Fcanary%2B456%3D"),
            "no route for /v1/chat?sig=***"
        );
    }
}
