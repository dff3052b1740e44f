//! Request extractors whose rejections are the JSON error body, and `If-Match` parsing.
//!
//! axum's own extractors answer with plain-text bodies and statuses such as 415 and 422; the REST
//! contract wants 400 `invalid_argument` (413 `payload_too_large` for oversized bodies) with a
//! message naming the problem.

use axum::{
    Json,
    extract::{FromRequest, FromRequestParts, Path, Query, Request, rejection::JsonRejection},
    http::{HeaderMap, StatusCode, header, request::Parts},
};
use serde::de::DeserializeOwned;
use taskforce_proto::{
    error::{ApiError, ErrorKind},
    ids,
};

use crate::{error::RestError, state::AppState};

/// The query of a route that takes none: a parameter given is a 400, never ignored (a version
/// meant as a check, `?expected_version=` on a PUT, would otherwise make the write
/// unconditional without a word).
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoQuery {}

/// A request without a body (`DELETE`): one that says something (a version to check) is a 400
/// instead of being ignored.
#[derive(Debug)]
pub struct NoBody;

impl FromRequest<AppState> for NoBody {
    type Rejection = RestError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        // An agent's delete takes the version to check, elsewhere: say where.
        let hint = if req.uri().path().starts_with("/api/v1/agents/") {
            ": give the version to check as `If-Match` or `?expected_version=`"
        } else {
            ""
        };
        let body = axum::body::Bytes::from_request(req, state)
            .await
            .map_err(|r| RestError::new(ErrorKind::InvalidArgument, r.body_text()))?;
        if body.iter().all(u8::is_ascii_whitespace) {
            Ok(Self)
        } else {
            Err(RestError::new(
                ErrorKind::InvalidArgument,
                format!("this request takes no body{hint}"),
            ))
        }
    }
}

/// A JSON object request body; any rejection is a JSON 400 (or 413). Other JSON values are
/// refused even where every field has a default (serde would read a struct from an array).
#[derive(Debug)]
pub struct JsonBody<T>(pub T);

impl<T: DeserializeOwned> FromRequest<AppState> for JsonBody<T> {
    type Rejection = RestError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        match Json::<ObjectOnly<T>>::from_request(req, state).await {
            Ok(Json(ObjectOnly(v))) => Ok(Self(v)),
            Err(r) => Err(json_rejection(&r, state.max_body_bytes)),
        }
    }
}

/// `T` read from a JSON object only.
struct ObjectOnly<T>(T);

impl<'de, T: serde::Deserialize<'de>> serde::Deserialize<'de> for ObjectOnly<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Object<T>(std::marker::PhantomData<T>);
        impl<'de, T: serde::Deserialize<'de>> serde::de::Visitor<'de> for Object<T> {
            type Value = T;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
                T::deserialize(serde::de::value::MapAccessDeserializer::new(map))
            }
        }
        d.deserialize_map(Object(std::marker::PhantomData))
            .map(ObjectOnly)
    }
}

/// The 413 of a body over `limit` bytes (`--max-body-bytes`).
pub fn too_large(limit: usize) -> RestError {
    RestError::new(
        ErrorKind::PayloadTooLarge,
        format!("request body is larger than the limit of {limit} bytes"),
    )
}

/// The REST error for a JSON body axum could not read.
pub fn json_rejection(r: &JsonRejection, limit: usize) -> RestError {
    if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
        return too_large(limit);
    }
    let message = match r {
        JsonRejection::MissingJsonContentType(_) => {
            "expected a JSON body with `Content-Type: application/json`".to_owned()
        }
        JsonRejection::JsonSyntaxError(e) => format!("malformed JSON: {}", e.body_text()),
        JsonRejection::JsonDataError(e) => {
            let message = format!("invalid request body: {}", e.body_text());
            return with_field(message, e);
        }
        other => format!("could not read the request body: {}", other.body_text()),
    };
    RestError::new(ErrorKind::InvalidArgument, message)
}

/// A 400 with `message`, and a `details` entry for the field at fault when the rejection `e`
/// knows it (a wrong type, an unknown or missing field), as the body's validation gives.
fn with_field(message: String, e: &(dyn std::error::Error + 'static)) -> RestError {
    let mut error = ApiError::new(ErrorKind::InvalidArgument, message);
    if let Some(violation) = field_at_fault(e) {
        error.field_violations.push(violation);
    }
    RestError(error)
}

/// The field a deserialization error `e` (or one of its sources) is about, and what is wrong
/// with it: serde's path (`name`, `mcp_servers[0].url`), ending in the field an unknown-field
/// or missing-field error names (`mcp_servers[0].command`).
fn field_at_fault(e: &(dyn std::error::Error + 'static)) -> Option<(String, String)> {
    fn of<E: std::fmt::Display>(e: &serde_path_to_error::Error<E>) -> Option<(String, String)> {
        let inner = e.inner().to_string();
        let path = Some(e.path().to_string()).filter(|p| p != ".");
        let named = ["unknown field `", "missing field `"]
            .iter()
            .find_map(|p| inner.split_once(p))
            .and_then(|(_, rest)| rest.split_once('`'))
            .map(|(field, _)| field);
        let field = match (path, named) {
            // An unknown field's path ends in it; a missing one's is where it is missing.
            (Some(path), Some(named)) if path == named || path.ends_with(&format!(".{named}")) => {
                path
            }
            (Some(path), Some(named)) => format!("{path}.{named}"),
            (Some(path), None) => path,
            (None, Some(named)) => named.to_owned(),
            (None, None) => return None,
        };
        Some((field, inner))
    }
    let mut at = Some(e);
    while let Some(e) = at {
        if let Some(json) = e.downcast_ref::<serde_path_to_error::Error<serde_json::Error>>() {
            return of(json);
        }
        if let Some(query) = e.downcast_ref::<serde_path_to_error::Error<serde::de::value::Error>>()
        {
            return of(query);
        }
        at = e.source();
    }
    None
}

/// Query parameters; a malformed query string is a JSON 400.
#[derive(Debug)]
pub struct QueryParams<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for QueryParams<T> {
    type Rejection = RestError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match Query::<T>::from_request_parts(parts, state).await {
            Ok(Query(v)) => Ok(Self(v)),
            Err(r) => Err(with_field(
                format!("invalid query string: {}", r.body_text()),
                &r,
            )),
        }
    }
}

/// The `{agent_id}` path segment, percent-decoded and checked against the id rule before
/// anything is sent to the registry.
#[derive(Debug, Clone)]
pub struct AgentId(pub String);

impl<S: Send + Sync> FromRequestParts<S> for AgentId {
    type Rejection = RestError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let id = path_segment(parts, state, "agent_id").await?;
        check_agent_id(&id)?;
        Ok(Self(id))
    }
}

/// The `{session_id}` path segment, percent-decoded (the executor checks it).
#[derive(Debug, Clone)]
pub struct SessionId(pub String);

impl<S: Send + Sync> FromRequestParts<S> for SessionId {
    type Rejection = RestError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        path_segment(parts, state, "session_id").await.map(Self)
    }
}

/// A route's one path segment, percent-decoded; a 400 naming it and the problem when it is not
/// text (`%ff`).
async fn path_segment<S: Send + Sync>(
    parts: &mut Parts,
    state: &S,
    name: &str,
) -> Result<String, RestError> {
    let Path(segment) = Path::<String>::from_request_parts(parts, state)
        .await
        .map_err(|r| {
            RestError::new(
                ErrorKind::InvalidArgument,
                format!("invalid {name}: {}", r.body_text()),
            )
        })?;
    Ok(segment)
}

/// Checks a path id against the id rule; the error names the rule.
pub fn check_agent_id(id: &str) -> Result<(), RestError> {
    ids::validate_agent_id(id).map_err(|e| {
        RestError(ApiError {
            message: format!("invalid agent_id: {e} (ids match [a-z0-9][a-z0-9-_]{{2,63}})"),
            field_violations: vec![("agent_id".to_owned(), e.to_string())],
            ..ApiError::new(ErrorKind::InvalidArgument, String::new())
        })
    })
}

/// Parses one `If-Match` value into the expected version: `"v"` or a bare `v`; `*` means "any
/// version" (`None`). Lists and weak tags cannot be expressed to the registry and are refused.
pub fn parse_if_match(value: &str) -> Result<Option<String>, RestError> {
    let v = value.trim();
    let bad =
        |why: &str| RestError::new(ErrorKind::InvalidArgument, format!("If-Match header {why}"));
    if v == "*" {
        return Ok(None);
    }
    if v.starts_with("W/") {
        return Err(bad(
            "must be a strong entity tag such as \"<version>\", not a weak one",
        ));
    }
    let unquoted = match v.strip_prefix('"') {
        Some(rest) => rest
            .strip_suffix('"')
            .ok_or_else(|| bad("has an unterminated quote"))?,
        None => v,
    };
    if unquoted.contains(['"', ',']) {
        return Err(bad("must name exactly one version"));
    }
    if unquoted.is_empty() {
        return Err(bad("is empty"));
    }
    Ok(Some(
        crate::read_model::version_of_etag(unquoted).to_owned(),
    ))
}

/// The expected version of a write: from `If-Match`, or else from the body or query (`other`);
/// empty when neither is given. Both given and different is a 400, and so is `If-None-Match`
/// (a client that sends `If-None-Match: *` to mean "only if it does not exist" must not have
/// its agent replaced: creating is `POST /api/v1/agents`).
pub fn expected_version(headers: &HeaderMap, other: Option<&str>) -> Result<String, RestError> {
    if headers.contains_key(header::IF_NONE_MATCH) {
        return Err(RestError::new(
            ErrorKind::InvalidArgument,
            "If-None-Match is not taken on an update or delete (it would not be kept): give \
             the version to replace in If-Match, or create with POST /api/v1/agents, which \
             never replaces an agent",
        ));
    }
    let mut values = headers.get_all(header::IF_MATCH).iter();
    let from_header = match (values.next(), values.next()) {
        (None, _) => None,
        (Some(h), None) => {
            let text = h.to_str().map_err(|_| {
                RestError::new(
                    ErrorKind::InvalidArgument,
                    "If-Match header is not valid ASCII",
                )
            })?;
            parse_if_match(text)?
        }
        (Some(_), Some(_)) => {
            return Err(RestError::new(
                ErrorKind::InvalidArgument,
                "If-Match header must name exactly one version",
            ));
        }
    };
    // The ETag pasted as it was sent (quoted or not) does too.
    let other = other
        .map(|s| crate::read_model::version_of_etag(s.trim_matches('"')))
        .filter(|s| !s.is_empty());
    match (from_header, other) {
        (Some(h), Some(o)) if h != o => Err(RestError(ApiError::field(
            "expected_version",
            format!("is {o:?} but the If-Match header says {h:?}"),
        ))),
        (Some(h), _) => Ok(h),
        (None, Some(o)) => Ok(o.to_owned()),
        (None, None) => Ok(String::new()),
    }
}

/// The preconditions of a create: `If-None-Match: *` is what a create is anyway (never
/// replaces); `If-Match`, or `If-None-Match` naming versions, cannot hold for an agent that is
/// to be made, and is a 400 rather than ignored.
pub fn create_preconditions(headers: &HeaderMap) -> Result<(), RestError> {
    if headers.contains_key(header::IF_MATCH) {
        return Err(RestError::new(
            ErrorKind::InvalidArgument,
            "If-Match names a version to replace, and a create has none: replace with PUT \
             /api/v1/agents/{agent_id}",
        ));
    }
    match headers.get(header::IF_NONE_MATCH).map(|v| v.as_bytes()) {
        None | Some(b"*") => Ok(()),
        Some(_) => Err(RestError::new(
            ErrorKind::InvalidArgument,
            "If-None-Match on a create takes only `*` (a create never replaces an agent)",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn preconditions_that_a_write_would_not_keep_are_refused() {
        let with = |name: header::HeaderName, value: &'static str| {
            let mut h = HeaderMap::new();
            h.insert(name, HeaderValue::from_static(value));
            h
        };
        let none_match = with(header::IF_NONE_MATCH, "*");
        assert!(expected_version(&none_match, None).is_err());
        assert!(create_preconditions(&none_match).is_ok());
        assert!(create_preconditions(&HeaderMap::new()).is_ok());
        assert!(create_preconditions(&with(header::IF_NONE_MATCH, "\"3\"")).is_err());
        assert!(create_preconditions(&with(header::IF_MATCH, "\"3\"")).is_err());
        assert_eq!(
            expected_version(&with(header::IF_MATCH, "\"3\""), None).ok(),
            Some("3".to_owned())
        );
    }

    fn ok(v: &str) -> Option<String> {
        parse_if_match(v).expect("valid If-Match")
    }

    #[test]
    fn a_deserialization_error_names_the_field_at_fault() {
        #[derive(Debug, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct Server {
            command: String,
        }
        #[derive(Debug, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct Body {
            name: String,
            #[serde(default)]
            servers: Vec<Server>,
        }
        let field = |json: &str| {
            let e = serde_path_to_error::deserialize::<_, Body>(
                &mut serde_json::Deserializer::from_str(json),
            )
            .expect_err("refused");
            field_at_fault(&e).map(|(field, _)| field)
        };
        assert_eq!(field(r#"{"name": 5}"#).as_deref(), Some("name"));
        assert_eq!(field(r#"{"servers": []}"#).as_deref(), Some("name"));
        assert_eq!(
            field(r#"{"name": "a", "bogus": 1}"#).as_deref(),
            Some("bogus")
        );
        assert_eq!(
            field(r#"{"name": "a", "servers": [{"cwd": "/"}]}"#).as_deref(),
            Some("servers[0].cwd")
        );
        assert_eq!(
            field(r#"{"name": "a", "servers": [{}]}"#).as_deref(),
            Some("servers[0].command")
        );
    }

    #[test]
    fn if_match_accepts_quoted_and_bare_versions() {
        assert_eq!(ok("\"0123456789abcdef\""), Some("0123456789abcdef".into()));
        assert_eq!(ok("0123456789abcdef"), Some("0123456789abcdef".into()));
        assert_eq!(ok("  \"abc\" "), Some("abc".into()));
        assert_eq!(ok("*"), None);
    }

    #[test]
    fn if_match_refuses_lists_weak_tags_and_broken_quotes() {
        for bad in ["\"a\", \"b\"", "W/\"abc\"", "\"abc", "\"\"", "", "a,b"] {
            let err = parse_if_match(bad).expect_err(bad);
            assert_eq!(err.0.kind, ErrorKind::InvalidArgument, "{bad}");
            assert!(err.0.message.contains("If-Match"), "{bad}");
        }
    }

    #[test]
    fn header_wins_and_must_agree_with_the_body() {
        let mut h = HeaderMap::new();
        assert_eq!(expected_version(&h, None).ok(), Some(String::new()));
        assert_eq!(expected_version(&h, Some("")).ok(), Some(String::new()));
        assert_eq!(expected_version(&h, Some("v1")).ok(), Some("v1".into()));
        h.insert(header::IF_MATCH, HeaderValue::from_static("\"v1\""));
        assert_eq!(expected_version(&h, None).ok(), Some("v1".into()));
        assert_eq!(expected_version(&h, Some("v1")).ok(), Some("v1".into()));
        let err = expected_version(&h, Some("v2")).expect_err("disagreeing versions");
        assert_eq!(err.0.field_violations[0].0, "expected_version");
        h.append(header::IF_MATCH, HeaderValue::from_static("\"v3\""));
        assert!(expected_version(&h, None).is_err());
    }

    #[test]
    fn path_ids_are_checked_against_the_rule() {
        assert!(check_agent_id("invoice-extractor").is_ok());
        for bad in ["../x", "..", "a/b", "AB", "ab", "x.yaml", ""] {
            let err = check_agent_id(bad).expect_err(bad);
            assert_eq!(err.0.kind, ErrorKind::InvalidArgument);
            assert!(err.0.message.contains("[a-z0-9]"), "{}", err.0.message);
            assert_eq!(err.0.field_violations[0].0, "agent_id");
        }
    }
}
