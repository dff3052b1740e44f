//! How the MCP server is reached over HTTP: streamable HTTP at `/mcp` on the gateway's port;
//! and the check of each JSON-RPC message that HTTP and stdio ([`super::stdio`]) share.
//!
//! HTTP is served statelessly (no `Mcp-Session-Id`), like the rest of the gateway, so any
//! replica can answer any request; answers are plain JSON, so no request holds a stream open.
//! The MCP specification's security rules are enforced by rmcp before a request reaches a tool:
//! `Host` must be an allowed name (DNS rebinding), a present `Origin` must be an allowed origin
//! (403 otherwise), an unsupported `MCP-Protocol-Version` is a 400 and an unknown method a
//! JSON-RPC `-32601`. Before rmcp, [`check`] finds what is not a JSON-RPC 2.0 message (or a
//! `tools/call` whose params do not fit), and the transport answers it with the JSON-RPC error
//! for it ([`check_message`] on `/mcp`, one line on stdio).

use std::{net::IpAddr, sync::Arc};

use rmcp::transport::{
    StreamableHttpServerConfig, StreamableHttpService,
    streamable_http_server::session::never::NeverSessionManager,
};
use tracing::warn;

use super::TaskforceMcp;
use crate::{config::Config, state::AppState};

/// `Host` names always accepted on `/mcp`.
pub const LOOPBACK_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "::1"];
/// The value of `--mcp-allowed-hosts` / `--mcp-allowed-origins` that turns the check off.
pub const ANY: &str = "*";

/// The tower service mounted at `/mcp`.
pub type McpHttpService = StreamableHttpService<TaskforceMcp, NeverSessionManager>;

/// The `Host` values `/mcp` accepts: `--mcp-allowed-hosts` when given, else the loopback
/// names; either way the address the gateway listens on (unless that is `0.0.0.0` / `::`), as
/// a client that was given that address sends it. `None`: any.
pub fn allowed_hosts(config: &Config) -> Option<Vec<String>> {
    let given: Vec<String> = config
        .mcp_allowed_hosts
        .iter()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .collect();
    if given.iter().any(|h| h == ANY) {
        return None;
    }
    let mut hosts = if given.is_empty() {
        LOOPBACK_HOSTS.iter().map(|h| (*h).to_owned()).collect()
    } else {
        given
    };
    let ip = config.listen.ip();
    if !ip.is_unspecified() && !hosts.contains(&ip.to_string()) {
        hosts.push(ip.to_string());
    }
    Some(hosts)
}

/// The origins `/mcp` accepts from browsers; `None`: any. Requests without `Origin` (every
/// non-browser client) always pass.
pub fn allowed_origins(config: &Config) -> Option<Vec<String>> {
    let given: Vec<String> = config
        .mcp_allowed_origins
        .iter()
        .map(|o| o.trim().to_owned())
        .filter(|o| !o.is_empty())
        .collect();
    (!given.iter().any(|o| o == ANY)).then_some(given)
}

/// CORS for `/mcp`, so a page served from another origin (a browser MCP inspector on
/// `http://localhost:5173`) can call it: preflights are answered (any origin, no credentials),
/// and answers name the requesting origin. Which origins may call is
/// still decided per request by rmcp's `Origin` check (`--mcp-allowed-origins`, 403 for the
/// others): the preflight only lets the browser send the request that check then sees.
pub fn cors() -> tower_http::cors::CorsLayer {
    use http::{Method, header};
    tower_http::cors::CorsLayer::new()
        .allow_origin(tower_http::cors::AllowOrigin::mirror_request())
        // The server is stateless: POST only (rmcp answers GET and DELETE with 405).
        .allow_methods([Method::POST])
        // Whatever a client asks to send: protocol revisions add headers (2026-07-28's
        // `Mcp-Method`, `Mcp-Name` and `Mcp-Param-*`), and the `Origin` and key checks of the
        // request itself decide.
        .allow_headers(tower_http::cors::AllowHeaders::mirror_request())
        .expose_headers([header::HeaderName::from_static("mcp-protocol-version")])
        .max_age(std::time::Duration::from_secs(600))
}

/// Warns when the gateway listens beyond loopback but `/mcp` would refuse every `Host` that
/// remote clients send.
pub fn warn_on_unreachable_hosts(config: &Config) {
    let ip: IpAddr = config.listen.ip();
    if ip.is_unspecified() && config.mcp_allowed_hosts.is_empty() {
        warn!(
            listen = %config.listen,
            "/mcp accepts only loopback Host headers; set --mcp-allowed-hosts to the names remote MCP clients use (or * behind a trusted proxy)"
        );
    }
}

/// The streamable HTTP service over `state`'s registry channel. It stops answering (and ends
/// open streams) when the gateway's shutdown token fires.
pub fn http_service(state: &AppState, config: &Config) -> McpHttpService {
    let server = TaskforceMcp::new(state.clone());
    let mut http = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_max_request_body_bytes(config.max_body_bytes)
        .with_cancellation_token(state.shutdown.child_token());
    http = match allowed_hosts(config) {
        Some(hosts) => http.with_allowed_hosts(hosts),
        None => http.disable_allowed_hosts(),
    };
    http = match allowed_origins(config) {
        Some(origins) => http
            .with_allowed_origins(origins)
            .enforce_origin_validation(),
        None => http.disable_allowed_origins(),
    };
    StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(NeverSessionManager::default()),
        http,
    )
}

/// JSON-RPC 2.0's error codes for a message that is not JSON, not a request, or a request
/// whose params do not fit its method.
const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
const INVALID_PARAMS: i64 = -32602;

/// A message [`check`] refuses, and the JSON-RPC error that answers it on either transport.
#[derive(Debug, Clone, PartialEq)]
pub struct Rejection {
    /// The HTTP status of the answer on `/mcp` (stdio sends the same body without one).
    pub status: http::StatusCode,
    /// The id to answer: the message's, or `null` when it has none to use.
    pub id: serde_json::Value,
    /// The JSON-RPC error code.
    pub code: i64,
    /// What is wrong, for the client.
    pub message: String,
    /// The message is a notification (a `method`, no `id`) whose `params` do not fit: JSON-RPC
    /// answers no notification, so stdio says nothing (HTTP still answers the POST, as MCP's
    /// transport allows).
    pub notification: bool,
}

impl Rejection {
    /// A message that is no request (`what`), with no id to answer: HTTP 400.
    fn invalid_request(what: &str) -> Self {
        Self {
            status: http::StatusCode::BAD_REQUEST,
            id: serde_json::Value::Null,
            code: INVALID_REQUEST,
            message: format!("invalid request: {what}"),
            notification: false,
        }
    }

    /// A message over `limit` bytes (`--max-body-bytes`): invalid request, HTTP 413.
    pub fn too_large(limit: usize) -> Self {
        Self {
            status: http::StatusCode::PAYLOAD_TOO_LARGE,
            id: serde_json::Value::Null,
            code: INVALID_REQUEST,
            message: format!(
                "the request body is over {limit} bytes (the gateway's --max-body-bytes)"
            ),
            notification: false,
        }
    }

    /// A request body that did not arrive within `timeout` (the gateway's request timeout).
    pub fn late(timeout: std::time::Duration) -> Self {
        Self {
            status: http::StatusCode::REQUEST_TIMEOUT,
            id: serde_json::Value::Null,
            code: INVALID_REQUEST,
            message: format!(
                "the request body did not arrive within {}s (the gateway's request timeout)",
                timeout.as_secs()
            ),
            notification: false,
        }
    }

    /// The JSON-RPC error answer.
    pub fn answer(&self) -> serde_json::Value {
        serde_json::json!({
            "jsonrpc": "2.0",
            "id": self.id,
            "error": {"code": self.code, "message": self.message},
        })
    }
}

/// Checks a JSON `POST` to `/mcp` with [`check`] before rmcp reads it, answering what fails with
/// its JSON-RPC error and HTTP status; a body over `limit` bytes (`--max-body-bytes`) is
/// [`Rejection::too_large`], one that does not arrive within `timeout` [`Rejection::late`].
///
/// rmcp answers a body that is not JSON or not one message with a plain-text 415 (the status of
/// a wrong `Content-Type`, which a client cannot tell apart) and bad `tools/call` params with
/// "method not found". Other requests (another `Content-Type`, other methods) reach rmcp
/// unchanged.
pub async fn check_message(
    axum::extract::State((timeout, limit)): axum::extract::State<(std::time::Duration, usize)>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let json = request
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.trim_start()
                .to_ascii_lowercase()
                .starts_with("application/json")
        });
    if request.method() != http::Method::POST || !json {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    // Within the request timeout: a body sent a byte at a time would hold the connection.
    let checked = match tokio::time::timeout(timeout, axum::body::to_bytes(body, limit)).await {
        Ok(Ok(bytes)) => check(&bytes).map(|()| bytes),
        Ok(Err(_)) => Err(Rejection::too_large(limit)),
        Err(_) => Err(Rejection::late(timeout)),
    };
    match checked {
        Ok(bytes) => {
            next.run(axum::extract::Request::from_parts(
                parts,
                axum::body::Body::from(bytes),
            ))
            .await
        }
        Err(rejection) => {
            // rmcp's refusals of the request's `Host` and `Origin` (its first check, before it
            // reads anything else) come first, as for a message it reads: asked with a `ping`
            // of the same headers, which changes nothing. A page of a refused origin gets its
            // 403, not an answer that tells it a gateway is there. (Only those: a protocol
            // revision may want more of a request than a ping has.)
            let mut probe = axum::extract::Request::new(axum::body::Body::from(PROBE));
            *probe.method_mut() = parts.method.clone();
            *probe.uri_mut() = parts.uri.clone();
            *probe.version_mut() = parts.version;
            *probe.headers_mut() = parts.headers.clone();
            probe.headers_mut().remove(http::header::CONTENT_LENGTH);
            let refused = next.run(probe).await;
            if refused.status() == http::StatusCode::FORBIDDEN {
                return refused;
            }
            axum::response::IntoResponse::into_response((
                rejection.status,
                axum::Json(rejection.answer()),
            ))
        }
    }
}

/// The message that asks rmcp whether it would take a request's headers ([`check_message`]).
const PROBE: &str = r#"{"jsonrpc":"2.0","id":0,"method":"ping"}"#;

/// What is wrong with `message` as one JSON-RPC 2.0 message for the MCP server, on `/mcp` (a
/// request body) and on stdio (a line):
/// - not JSON: parse error (-32700), HTTP 400;
/// - not one JSON-RPC 2.0 message (a batch, another `jsonrpc`, no `method`, an `id` that is
///   neither a string nor an integer): invalid request (-32600), HTTP 400;
/// - a request with a `result` or `error`, or a message rmcp cannot read at all (which it
///   would answer with a plain-text 415): invalid request (-32600), HTTP 400;
/// - `params` that are not an object, a `_meta` that is not one, a `tools/call` without a tool
///   `name` or whose `arguments` are not an object, or params of one of MCP's own methods that
///   rmcp cannot read (an `initialize` without `clientInfo`: rmcp would answer "method not
///   found"): invalid params (-32602) naming the problem, HTTP 200 like every JSON-RPC error
///   answer.
///
/// Notifications and a client's answers (`result` or `error`, no `method`) that pass are
/// answered by rmcp as before: not at all.
pub fn check(message: &[u8]) -> Result<(), Rejection> {
    use serde_json::Value;
    let bad = http::StatusCode::BAD_REQUEST;
    let message_bytes = message;
    let message: Value = serde_json::from_slice(message).map_err(|e| Rejection {
        status: bad,
        id: Value::Null,
        code: PARSE_ERROR,
        message: format!("parse error: {e}"),
        notification: false,
    })?;
    // The last of two equal keys is what `Value` keeps; rmcp's typed read refuses the message
    // (a 415 over HTTP, an answer without `id` over stdio): said here, naming the key.
    if let Some(key) = duplicate_key(message_bytes) {
        return Err(Rejection::invalid_request(&format!(
            "the key `{key}` appears twice in one object"
        )));
    }
    let Value::Object(object) = &message else {
        let what = if message.is_array() {
            "a batch; send one JSON-RPC message per request"
        } else {
            "not a JSON-RPC message (a JSON object)"
        };
        return Err(Rejection::invalid_request(what));
    };
    let id = object.get("id").cloned().unwrap_or(Value::Null);
    // MCP's ids are strings or integers (rmcp reads no other number: a 1.5 or a 2^64 was its
    // plain-text 415).
    let id_valid = id.is_string() || id.is_i64() || id.is_u64();
    let answer_id = if id_valid { id } else { Value::Null };
    let invalid = |what: &str| {
        Err(Rejection {
            status: bad,
            id: answer_id.clone(),
            code: INVALID_REQUEST,
            message: format!("invalid request: {what}"),
            notification: false,
        })
    };
    if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return invalid("`jsonrpc` must be \"2.0\"");
    }
    if object.contains_key("id") && !id_valid {
        return invalid("`id` must be a string or an integer");
    }
    let answer = object.contains_key("result") || object.contains_key("error");
    const UNREADABLE: &str = "not a JSON-RPC message the MCP server can read";
    let Some(method) = object.get("method") else {
        // A client's answer to a server request.
        if answer {
            return rmcp_reads(&message, None).or_else(|_| invalid(UNREADABLE));
        }
        return invalid("no `method`");
    };
    let Some(method) = method.as_str() else {
        return invalid("`method` must be a string");
    };
    if answer {
        return invalid("a request or notification has no `result` or `error`");
    }
    let params = object.get("params");
    // What is wrong with its shape, else (None) what rmcp makes of it.
    let shape = match (method, params) {
        (_, Some(Value::Object(p)))
            if p.get("_meta")
                .is_some_and(|m| !m.is_object() && !m.is_null()) =>
        {
            Some("`_meta` must be an object")
        }
        ("tools/call", Some(Value::Object(p))) => match (p.get("name"), p.get("arguments")) {
            (Some(Value::String(_)), None | Some(Value::Object(_) | Value::Null)) => None,
            (Some(Value::String(_)), Some(_)) => Some("`arguments` must be an object"),
            _ => Some("`name` (the tool's name, a string) is missing"),
        },
        ("tools/call", _) => {
            Some("`params` must be an object with the tool's `name` and its `arguments`")
        }
        (_, None | Some(Value::Null | Value::Object(_))) => None,
        (_, Some(_)) => Some("`params` must be an object"),
    };
    let problem = match shape {
        Some(problem) => problem.to_owned(),
        None => match rmcp_reads(&message, Some((method, params))) {
            Ok(()) => return Ok(()),
            Err(None) => return invalid(UNREADABLE),
            Err(Some(problem)) => problem,
        },
    };
    let notification = !object.contains_key("id");
    Err(Rejection {
        // A request's error is its answer (200); a notification has none, so the POST that
        // carried one it cannot take fails (MCP's transport: an HTTP error status).
        status: if notification {
            http::StatusCode::BAD_REQUEST
        } else {
            http::StatusCode::OK
        },
        id: answer_id,
        code: INVALID_PARAMS,
        message: format!("invalid params: {problem}"),
        notification,
    })
}

/// The first key that appears twice in one object of `json` (valid JSON), if any.
fn duplicate_key(json: &[u8]) -> Option<String> {
    use serde::de::{Deserializer, MapAccess, SeqAccess, Visitor};
    /// Walks a JSON value; fails with the key that one of its objects repeats.
    struct Unique;
    impl<'de> serde::Deserialize<'de> for Unique {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            d.deserialize_any(Unique)
        }
    }
    impl<'de> Visitor<'de> for Unique {
        type Value = Unique;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("JSON")
        }
        fn visit_bool<E>(self, _: bool) -> Result<Unique, E> {
            Ok(Unique)
        }
        fn visit_i64<E>(self, _: i64) -> Result<Unique, E> {
            Ok(Unique)
        }
        fn visit_u64<E>(self, _: u64) -> Result<Unique, E> {
            Ok(Unique)
        }
        fn visit_f64<E>(self, _: f64) -> Result<Unique, E> {
            Ok(Unique)
        }
        fn visit_str<E>(self, _: &str) -> Result<Unique, E> {
            Ok(Unique)
        }
        fn visit_unit<E>(self) -> Result<Unique, E> {
            Ok(Unique)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Unique, A::Error> {
            while seq.next_element::<Unique>()?.is_some() {}
            Ok(Unique)
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Unique, A::Error> {
            let mut keys = std::collections::HashSet::new();
            while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                if !keys.insert(key.clone()) {
                    return Err(serde::de::Error::custom(key));
                }
                map.next_value::<Unique>()?;
            }
            Ok(Unique)
        }
    }
    serde_json::from_slice::<Unique>(json).err().map(|e| {
        e.to_string()
            .split(" at line")
            .next()
            .unwrap_or_default()
            .to_owned()
    })
}

/// What is wrong with the `params` of a request of one of MCP's own methods, as rmcp reads
/// them (`missing field `clientInfo``). rmcp takes a known method whose params it cannot
/// read for a method of its own name it does not know, and answers "method not found".
fn params_problem(method: &str, params: Option<&serde_json::Value>) -> Option<String> {
    use rmcp::model as m;
    fn read<T: serde::de::DeserializeOwned>(request: serde_json::Value) -> Option<String> {
        serde_json::from_value::<T>(request)
            .err()
            .map(|e| e.to_string())
    }
    let mut request = serde_json::json!({ "method": method });
    if let Some(params) = params {
        request["params"] = params.clone();
    }
    match method {
        "initialize" => read::<m::InitializeRequest>(request),
        "ping" => read::<m::PingRequest>(request),
        "tools/list" => read::<m::ListToolsRequest>(request),
        "completion/complete" => read::<m::CompleteRequest>(request),
        "prompts/list" => read::<m::ListPromptsRequest>(request),
        "prompts/get" => read::<m::GetPromptRequest>(request),
        "resources/list" => read::<m::ListResourcesRequest>(request),
        "resources/templates/list" => read::<m::ListResourceTemplatesRequest>(request),
        "resources/read" => read::<m::ReadResourceRequest>(request),
        _ => None,
    }
}

/// Whether rmcp reads `message` as it means it (one typed read, from the parsed JSON):
/// `Err(None)` when it cannot read it at all (it would answer a plain-text 415), and
/// `Err(Some(problem))` for a request of one of MCP's own methods (`request`: its method and
/// params) whose params do not fit, which rmcp reads as a method of that name it does not know
/// (it would answer "method not found").
fn rmcp_reads(
    message: &serde_json::Value,
    request: Option<(&str, Option<&serde_json::Value>)>,
) -> Result<(), Option<String>> {
    use rmcp::model::{ClientJsonRpcMessage, ClientRequest, JsonRpcMessage};
    use serde::Deserialize as _;
    let problem = || request.and_then(|(method, params)| params_problem(method, params));
    match ClientJsonRpcMessage::deserialize(message) {
        Ok(JsonRpcMessage::Request(r)) if matches!(r.request, ClientRequest::CustomRequest(_)) => {
            problem().map_or(Ok(()), |p| Err(Some(p)))
        }
        Ok(_) => Ok(()),
        Err(_) => Err(problem()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(listen: &str, hosts: &[&str], origins: &[&str]) -> Config {
        Config {
            listen: listen.parse().expect("socket address"),
            mcp_allowed_hosts: hosts.iter().map(|h| (*h).to_owned()).collect(),
            mcp_allowed_origins: origins.iter().map(|o| (*o).to_owned()).collect(),
            ..Config::default()
        }
    }

    #[test]
    fn default_hosts_are_loopback_plus_a_specific_listen_address() {
        let loopback = allowed_hosts(&config("127.0.0.1:8080", &[], &[]));
        assert_eq!(
            loopback,
            Some(vec!["localhost".into(), "127.0.0.1".into(), "::1".into()])
        );
        let lan = allowed_hosts(&config("10.1.2.3:8080", &[], &[])).unwrap_or_default();
        assert!(lan.contains(&"10.1.2.3".to_owned()) && lan.contains(&"localhost".to_owned()));
        let any = allowed_hosts(&config("0.0.0.0:8080", &[], &[])).unwrap_or_default();
        assert_eq!(any.len(), LOOPBACK_HOSTS.len());
        let other_loopback = allowed_hosts(&config("127.0.0.2:8080", &[], &[])).unwrap_or_default();
        assert!(other_loopback.contains(&"127.0.0.2".to_owned()));
    }

    #[test]
    fn configured_hosts_replace_the_default_and_star_disables_the_check() {
        let given = allowed_hosts(&config(
            "0.0.0.0:8080",
            &["gateway", " mcp.example.com "],
            &[],
        ));
        assert_eq!(
            given,
            Some(vec!["gateway".into(), "mcp.example.com".into()])
        );
        assert_eq!(allowed_hosts(&config("0.0.0.0:8080", &["*"], &[])), None);
        // The address it listens on passes too.
        let own = allowed_hosts(&config("10.1.2.3:8080", &["gateway"], &[]));
        assert_eq!(own, Some(vec!["gateway".into(), "10.1.2.3".into()]));
    }

    #[test]
    fn origins_are_checked_unless_star() {
        let o = allowed_origins(&config("127.0.0.1:8080", &[], &["http://localhost:*"]));
        assert_eq!(o, Some(vec!["http://localhost:*".into()]));
        assert_eq!(
            allowed_origins(&config("127.0.0.1:8080", &[], &["*"])),
            None
        );
        // An empty list still validates: every present Origin is refused.
        assert_eq!(
            allowed_origins(&config("127.0.0.1:8080", &[], &[])),
            Some(vec![])
        );
    }

    #[test]
    fn ids_must_be_strings_or_integers_and_params_objects() {
        let code = |body: &str| check(body.as_bytes()).err().map(|r| (r.id, r.code));
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":7,"method":"ping"}"#), None);
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","id":"a","method":"ping","params":{}}"#),
            None
        );
        for id in ["1.5", "18446744073709551616", "-1e3"] {
            let body = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#);
            assert_eq!(
                code(&body),
                Some((serde_json::Value::Null, INVALID_REQUEST)),
                "{id}"
            );
        }
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":"x"}"#),
            Some((serde_json::json!(1), INVALID_PARAMS))
        );
    }

    #[test]
    fn tools_call_needs_an_object_with_a_tool_name_and_object_arguments() {
        let rejected = |params: &str| {
            let body = format!(r#"{{"jsonrpc":"2.0","id":"c","method":"tools/call"{params}}}"#);
            check(body.as_bytes()).err().map(|r| {
                assert_eq!(r.answer()["id"], "c");
                assert_eq!(r.status, http::StatusCode::OK);
                r.code
            })
        };
        for ok in [
            r#","params":{"name":"list_agents"}"#,
            r#","params":{"name":"list_agents","arguments":null}"#,
            r#","params":{"name":"show_agent","arguments":{"agent_name":"x"}}"#,
        ] {
            assert_eq!(rejected(ok), None, "{ok}");
        }
        for bad in [
            "",
            r#","params":"list_agents""#,
            r#","params":["list_agents"]"#,
            r#","params":{"arguments":{}}"#,
            r#","params":{"name":7}"#,
            r#","params":{"name":"show_agent","arguments":["x"]}"#,
        ] {
            assert_eq!(rejected(bad), Some(INVALID_PARAMS), "{bad}");
        }
    }

    #[test]
    fn what_rmcp_cannot_read_is_a_json_rpc_error_naming_the_problem() {
        let rejected = |body: &str| {
            check(body.as_bytes())
                .err()
                .map(|r| (r.code, r.message, r.status))
        };
        for ok in [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"progressToken":1}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{}}"#,
            // Not MCP's: rmcp answers "method not found".
            r#"{"jsonrpc":"2.0","id":1,"method":"x/unknown","params":{"a":1}}"#,
        ] {
            assert_eq!(rejected(ok), None, "{ok}");
        }
        for (bad, code, names) in [
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":5}}"#,
                INVALID_PARAMS,
                "`_meta`",
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{"_meta":"x"}}"#,
                INVALID_PARAMS,
                "`_meta`",
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"initialize"}"#,
                INVALID_PARAMS,
                "params",
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":5,"capabilities":{},"clientInfo":{"name":"x","version":"1"}}}"#,
                INVALID_PARAMS,
                "invalid type",
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{}}}"#,
                INVALID_PARAMS,
                "clientInfo",
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","result":{}}"#,
                INVALID_REQUEST,
                "`result`",
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"error":5}"#,
                INVALID_REQUEST,
                "the MCP server can read",
            ),
        ] {
            let got = rejected(bad);
            assert!(
                got.as_ref()
                    .is_some_and(|(c, m, _)| *c == code && m.contains(names)),
                "{bad}: {got:?}"
            );
        }
    }

    #[test]
    fn a_rejection_answers_with_a_json_rpc_error() {
        let answer = Rejection::too_large(10).answer();
        assert_eq!(answer["jsonrpc"], "2.0");
        assert_eq!(answer["id"], serde_json::Value::Null);
        assert_eq!(answer["error"]["code"], INVALID_REQUEST);
        assert!(
            answer["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("10 bytes")),
            "{answer}"
        );
    }
}
