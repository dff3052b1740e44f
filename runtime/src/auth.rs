//! API keys with scopes, checked in one tower layer on every surface: the gateway's REST and
//! `/mcp` routes and both gRPC services (metadata `authorization`).
//!
//! A caller sends `Authorization: Bearer <token>`. The keys come from a YAML file
//! (`--api-keys-file`) or the environment (`TASKFORCE_API_KEYS`, the same YAML inline):
//!
//! ```yaml
//! keys:
//!   - name: ops            # shows in logs and errors; the token never does
//!     token: "a-long-random-string"
//!     scopes: [admin]
//!   - name: ci
//!     sha256: "<hex SHA-256 of the token>"   # keep only the digest in the file
//!     scopes: [read, execute]
//! ```
//!
//! Scopes: `read` (lists, lookups, sessions, the catalog), `write` (create, update, delete
//! agents), `execute` (start, answer, cancel runs), `admin` (everything). A presented token is
//! hashed with SHA-256 and compared with every key's digest in constant time.
//!
//! Without keys, authentication is off only when every listener is on a loopback address;
//! binding elsewhere refuses to start unless `--insecure-no-auth` is given (which warns at
//! every start). The services call each other with `TASKFORCE_SERVICE_TOKEN`.

use std::{
    fmt,
    net::SocketAddr,
    path::{Path, PathBuf},
    sync::Arc,
    task::{Context, Poll},
};

use futures::future::{Either, Ready, ready};
use http::{HeaderValue, Method, Request, Response, header::AUTHORIZATION};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tower::{Layer, Service};
use tracing::{info, warn};

/// Shortest token accepted in a keys file: anything shorter is guessable.
pub const MIN_TOKEN_CHARS: usize = 16;
/// The realm in `WWW-Authenticate`.
pub const REALM: &str = "taskforce";

/// What a key may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// Lists, lookups, sessions, plans, the tool catalog, diagnostics.
    Read,
    /// Creating, updating and deleting agents.
    Write,
    /// Starting, answering and cancelling runs.
    Execute,
    /// Everything.
    Admin,
}

impl Scope {
    /// The scope's name, as in the keys file.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Write => "write",
            Self::Execute => "execute",
            Self::Admin => "admin",
        }
    }

    fn bit(self) -> u8 {
        match self {
            Self::Read => 1,
            Self::Write => 2,
            Self::Execute => 4,
            Self::Admin => 8,
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who called: the key's name and scopes (put in the request's extensions).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The key's `name`.
    pub name: Arc<str>,
    scopes: u8,
}

impl Principal {
    /// Whether the key holds `scope` (or `admin`).
    pub fn has(&self, scope: Scope) -> bool {
        self.scopes & (scope.bit() | Scope::Admin.bit()) != 0
    }
}

/// `path` for an error message when it names a YAML file (`.yaml`, `.yml`), else not: it may be
/// a key given where a path belongs (a base64 key holds `/`, a JWT `.`), and an error message
/// is printed whole, unmasked.
fn shown_path(path: &Path) -> String {
    let yaml = path
        .extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case("yaml") || e.eq_ignore_ascii_case("yml"));
    if yaml {
        path.to_string_lossy().into_owned()
    } else {
        "(not shown: a name not ending in .yaml or .yml may be a key rather than a path)".to_owned()
    }
}

/// A YAML error `message` about `input` with every quoted value taken from `input` that could
/// be a key (as long as one) left out: serde_yaml quotes the scalar it did not expect, and a
/// keys document's scalars are keys (and a key may be pasted in the wrong field of any
/// configuration). A shorter one (a misspelt field, a scope) stays.
pub fn without_values(message: &str, input: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(open) = rest.find(['"', '`']) {
        let quote = rest.as_bytes()[open] as char;
        out.push_str(&rest[..=open]);
        let after = &rest[open + 1..];
        let Some(close) = after.find(quote) else {
            rest = after;
            continue;
        };
        let quoted = &after[..close];
        if quoted.chars().count() < MIN_TOKEN_CHARS || !input.contains(quoted) {
            out.push_str(quoted);
        } else {
            out.push_str("<value not shown>");
        }
        out.push(quote);
        rest = &after[close + 1..];
    }
    out.push_str(rest);
    out
}

/// Why the keys could not be loaded, or the service must not start.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// The keys file could not be read.
    #[error("reading the API keys file {}: {source}", shown_path(path))]
    Read {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        source: std::io::Error,
    },
    /// The keys are not valid.
    #[error("API keys in {origin}: {reason}")]
    Invalid {
        /// `the file <path>` or `TASKFORCE_API_KEYS`.
        origin: String,
        /// What is wrong, naming the key.
        reason: String,
    },
    /// A listener is not on loopback and no keys are configured.
    #[error(
        "refusing to listen on {addr} without authentication: configure API keys \
         (--api-keys-file or TASKFORCE_API_KEYS), bind to a loopback address, \
         or pass --insecure-no-auth"
    )]
    Unprotected {
        /// The non-loopback listener.
        addr: SocketAddr,
    },
    /// Keys and `--insecure-no-auth` together.
    #[error("--insecure-no-auth contradicts the configured API keys; drop one of them")]
    Contradiction,
    /// `TASKFORCE_SERVICE_TOKEN` cannot be sent as a header.
    #[error("TASKFORCE_SERVICE_TOKEN is not a valid header value (visible ASCII only)")]
    ServiceToken,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KeysFile {
    keys: Vec<KeyEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyEntry {
    name: String,
    #[serde(default)]
    token: Option<String>,
    #[serde(default)]
    sha256: Option<String>,
    scopes: Vec<Scope>,
}

struct Key {
    digest: [u8; 32],
    principal: Principal,
}

/// The configured keys; cheap to clone.
#[derive(Clone)]
pub struct Keys(Arc<[Key]>);

impl fmt::Debug for Keys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Names only: digests are as good as secrets against a weak token.
        f.debug_list()
            .entries(self.0.iter().map(|k| &k.principal.name))
            .finish()
    }
}

impl Keys {
    /// Parses a keys document (see the module docs); `origin` names it in errors.
    pub fn parse(yaml: &str, origin: &str) -> Result<Self, AuthError> {
        let invalid = |reason: String| AuthError::Invalid {
            origin: origin.to_owned(),
            reason,
        };
        let file: KeysFile = crate::yaml::yaml(yaml.as_bytes()).map_err(|e| {
            invalid(format!(
                "not a keys document (`keys:`, a list of `name`, `token` or `sha256`, and \
                 `scopes`): {}",
                without_values(&e.to_string(), yaml)
            ))
        })?;
        if file.keys.is_empty() {
            return Err(invalid("`keys` is empty".into()));
        }
        let mut keys = Vec::with_capacity(file.keys.len());
        for (i, entry) in file.keys.into_iter().enumerate() {
            let name = entry.name.trim();
            if name.is_empty() {
                return Err(invalid(format!("key #{} has no `name`", i + 1)));
            }
            if keys.iter().any(|k: &Key| &*k.principal.name == name) {
                return Err(invalid(format!("two keys are named {name:?}")));
            }
            if entry.scopes.is_empty() {
                return Err(invalid(format!("key {name:?} has no `scopes`")));
            }
            let digest = match (entry.token, entry.sha256) {
                (Some(token), None) => {
                    if token.chars().count() < MIN_TOKEN_CHARS {
                        return Err(invalid(format!(
                            "the token of key {name:?} is shorter than {MIN_TOKEN_CHARS} characters"
                        )));
                    }
                    if !token.bytes().all(|b| b.is_ascii_graphic()) {
                        return Err(invalid(format!(
                            "the token of key {name:?} must be visible ASCII without spaces"
                        )));
                    }
                    Sha256::digest(token.as_bytes()).into()
                }
                (None, Some(hex_digest)) => {
                    let mut digest = [0u8; 32];
                    hex::decode_to_slice(hex_digest.trim(), &mut digest).map_err(|_| {
                        invalid(format!(
                            "the sha256 of key {name:?} is not 64 hexadecimal digits"
                        ))
                    })?;
                    digest
                }
                _ => {
                    return Err(invalid(format!(
                        "key {name:?} needs exactly one of `token` and `sha256`"
                    )));
                }
            };
            // Two keys with one token would be one caller with the scopes of whichever is
            // compared last: say which ones, whatever was meant.
            if let Some(twin) = keys.iter().find(|k| k.digest == digest) {
                return Err(invalid(format!(
                    "keys {:?} and {name:?} have the same token (or sha256)",
                    &*twin.principal.name
                )));
            }
            keys.push(Key {
                digest,
                principal: Principal {
                    name: name.into(),
                    scopes: entry.scopes.iter().fold(0, |acc, s| acc | s.bit()),
                },
            });
        }
        Ok(Self(keys.into()))
    }

    /// The key `token` belongs to. Every key is compared, in constant time, whatever matches.
    pub fn verify(&self, token: &str) -> Option<&Principal> {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let mut found = None;
        for key in self.0.iter() {
            if bool::from(key.digest.ct_eq(&digest)) {
                found = Some(&key.principal);
            }
        }
        found
    }

    /// How many keys there are.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Never true for parsed keys (a document without keys is refused).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Checks `headers` for `scope` under `access`.
    pub fn check(
        &self,
        headers: &http::HeaderMap,
        access: Access,
    ) -> Result<Option<Principal>, Denied> {
        let scope = match access {
            Access::Public => return Ok(None),
            Access::AnyKey => None,
            Access::Needs(scope) => Some(scope),
        };
        let token = bearer(headers)?;
        let principal = self.verify(token).ok_or(Denied::Invalid)?;
        let Some(scope) = scope else {
            return Ok(Some(principal.clone()));
        };
        if principal.has(scope) {
            Ok(Some(principal.clone()))
        } else {
            Err(Denied::Forbidden {
                key: principal.name.clone(),
                needs: scope,
            })
        }
    }
}

fn bearer(headers: &http::HeaderMap) -> Result<&str, Denied> {
    let mut values = headers.get_all(AUTHORIZATION).iter();
    let value = values.next().ok_or(Denied::Missing)?;
    // Two credentials are one too many: which would count is not the caller's guess to make.
    if values.next().is_some() {
        return Err(Denied::Several);
    }
    let value = value.to_str().map_err(|_| Denied::Malformed)?;
    let (scheme, token) = value.split_once(' ').ok_or(Denied::Malformed)?;
    if !scheme.eq_ignore_ascii_case("bearer") || token.trim().is_empty() {
        return Err(Denied::Malformed);
    }
    Ok(token.trim())
}

/// The authentication flags every service takes.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct AuthArgs {
    /// YAML file of API keys (`keys: [{name, token | sha256, scopes}]`); with keys, every call
    /// but health, readiness, metrics and the OpenAPI document needs `Authorization: Bearer`.
    #[arg(long, env = "TASKFORCE_API_KEYS_FILE")]
    pub api_keys_file: Option<PathBuf>,
    /// The same YAML document inline (for container environments); used when no file is given.
    #[arg(long, env = "TASKFORCE_API_KEYS", hide_env_values = true)]
    pub api_keys: Option<String>,
    /// Serve without authentication on a non-loopback address (a warning at every start). A
    /// switch: `1`/`true`/`yes`/`on` or `0`/`false`/`no`/`off` (the flag alone: on).
    #[arg(long, env = "TASKFORCE_INSECURE_NO_AUTH",
          value_parser = clap::builder::BoolishValueParser::new(), hide_possible_values = true,
          num_args = 0..=1, default_missing_value = "true", default_value = "false")]
    pub insecure_no_auth: bool,
    /// The token this service sends when it calls the other services (the gateway calling the
    /// registry and executors, an executor calling the registry).
    #[arg(long, env = "TASKFORCE_SERVICE_TOKEN", hide_env_values = true)]
    pub service_token: Option<String>,
}

impl AuthArgs {
    /// The keys to enforce (`None`: authentication is off), after the start-up rule: no keys
    /// is allowed only when every address in `listeners` is loopback, or with
    /// `--insecure-no-auth`.
    pub fn keys(&self, service: &str, listeners: &[SocketAddr]) -> Result<Option<Keys>, AuthError> {
        // Every service reads its keys, also one that calls no other (the registry).
        crate::env::never_log(self.service_token.as_deref());
        for flag in
            secrets_on_command_line(std::env::args_os().map(|a| a.to_string_lossy().into_owned()))
        {
            warn!(
                service,
                flag,
                "a secret was given on the command line, which every process of this machine can \
                 read in /proc/<pid>/cmdline (the service's tools and MCP servers too); pass it \
                 in the environment (TASKFORCE_API_KEYS, TASKFORCE_SERVICE_TOKEN) or a file \
                 (--api-keys-file) instead"
            );
        }
        let keys = match (&self.api_keys_file, &self.api_keys) {
            (Some(path), inline) => {
                if inline.is_some() {
                    warn!(
                        service,
                        "TASKFORCE_API_KEYS (--api-keys) is set and not used: the keys file \
                         (--api-keys-file) wins; unset one of them"
                    );
                }
                let text = crate::read_config(path).map_err(|source| AuthError::Read {
                    path: path.clone(),
                    source,
                })?;
                Some(Keys::parse(&text, &format!("the file {}", path.display()))?)
            }
            // Set but empty (a secret that did not reach the environment) is no choice to run
            // without keys: that takes leaving the variable unset.
            (None, Some(inline)) if inline.trim().is_empty() => {
                return Err(AuthError::Invalid {
                    origin: "TASKFORCE_API_KEYS".to_owned(),
                    reason: "it is set but empty: give the keys document, or unset it to serve \
                             without keys (on loopback only)"
                        .to_owned(),
                });
            }
            (None, Some(inline)) => Some(Keys::parse(inline, "TASKFORCE_API_KEYS")?),
            (None, _) => None,
        };
        match keys {
            Some(_) if self.insecure_no_auth => Err(AuthError::Contradiction),
            Some(keys) => {
                info!(
                    service,
                    keys = keys.len(),
                    "authentication on: calls need an API key"
                );
                Ok(Some(keys))
            }
            None if self.insecure_no_auth => {
                warn!(
                    service,
                    "authentication is OFF (--insecure-no-auth): anyone who reaches this port can use it"
                );
                Ok(None)
            }
            None => match listeners.iter().find(|a| !a.ip().is_loopback()) {
                Some(addr) => Err(AuthError::Unprotected { addr: *addr }),
                None => {
                    info!(
                        service,
                        "authentication off: the API listens on loopback only (the metrics listener needs no key wherever it is)"
                    );
                    Ok(None)
                }
            },
        }
    }

    /// The `authorization` value for calls to the other services.
    pub fn outgoing(&self) -> Result<Option<HeaderValue>, AuthError> {
        crate::env::never_log(self.service_token.as_deref());
        authorization_value(self.service_token.as_deref().unwrap_or_default())
            .map_err(|_| AuthError::ServiceToken)
    }
}

/// The flags of `args` (a command line) that carry a secret: `--api-keys` and
/// `--service-token`, as `--flag value` or `--flag=value`.
fn secrets_on_command_line(args: impl Iterator<Item = String>) -> Vec<&'static str> {
    let mut found = Vec::new();
    for arg in args {
        for flag in ["--api-keys", "--service-token"] {
            let given = arg == flag
                || arg
                    .strip_prefix(flag)
                    .is_some_and(|rest| rest.starts_with('='));
            if given && !found.contains(&flag) {
                found.push(flag);
            }
        }
    }
    found
}

/// A token that is not visible ASCII (a space, a control or non-ASCII character): no key is,
/// so it could only be a mistake.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a token is visible ASCII without spaces")]
pub struct InvalidToken;

/// `Bearer <token>` as a sensitive header value (kept out of debug output); `None` for a blank
/// token, an error for one that is not visible ASCII without spaces, as keys are.
pub fn authorization_value(token: &str) -> Result<Option<HeaderValue>, InvalidToken> {
    let token = token.trim();
    if token.is_empty() {
        return Ok(None);
    }
    if !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(InvalidToken);
    }
    let mut value = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| InvalidToken)?;
    value.set_sensitive(true);
    Ok(Some(value))
}

/// What a request needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Anyone (health, readiness, metrics, the OpenAPI document).
    Public,
    /// Any valid key, whatever its scopes (gRPC reflection: the schema, no data).
    AnyKey,
    /// A key holding this scope.
    Needs(Scope),
}

/// Why a request was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Denied {
    /// No `Authorization` header (401).
    Missing,
    /// Not `Bearer <token>` (401).
    Malformed,
    /// More than one `Authorization` header (401).
    Several,
    /// No key has this token (401).
    Invalid,
    /// The key lacks the scope (403).
    Forbidden {
        /// The key's name.
        key: Arc<str>,
        /// The scope the request needs.
        needs: Scope,
    },
}

impl Denied {
    /// True for 403 (a known key without the scope), false for 401.
    pub fn is_forbidden(&self) -> bool {
        matches!(self, Self::Forbidden { .. })
    }

    /// A sentence for the caller (never the token).
    pub fn message(&self) -> String {
        match self {
            Self::Missing => {
                "authentication required: send `Authorization: Bearer <API key>`".to_owned()
            }
            Self::Malformed => "the Authorization header must be `Bearer <API key>`".to_owned(),
            Self::Several => "send one Authorization header, not several".to_owned(),
            Self::Invalid => "the API key is not valid".to_owned(),
            Self::Forbidden { key, needs } => {
                format!("the API key {key:?} lacks the `{needs}` scope this call needs")
            }
        }
    }

    /// The `WWW-Authenticate` value of a 401.
    pub fn challenge(&self) -> HeaderValue {
        let value = match self {
            Self::Missing => format!("Bearer realm=\"{REALM}\""),
            Self::Malformed | Self::Several | Self::Invalid => {
                format!("Bearer realm=\"{REALM}\", error=\"invalid_token\"")
            }
            Self::Forbidden { needs, .. } => {
                format!("Bearer realm=\"{REALM}\", error=\"insufficient_scope\", scope=\"{needs}\"")
            }
        };
        HeaderValue::from_str(&value).unwrap_or_else(|_| HeaderValue::from_static("Bearer"))
    }

    /// The refusal as a gRPC status (UNAUTHENTICATED or PERMISSION_DENIED).
    pub fn to_status(&self) -> tonic::Status {
        if self.is_forbidden() {
            tonic::Status::permission_denied(self.message())
        } else {
            tonic::Status::unauthenticated(self.message())
        }
    }
}

/// The access a gRPC method of the Taskforce services needs: health is public; reflection
/// takes any valid key; changing agents and validating one (it starts the agent's MCP servers)
/// need `write`; runs, deleting a session, and the executors' status reports (and releases of
/// their holds) need `execute`; listing the sessions needs `admin`; everything else (reads, the watch stream,
/// unknown methods) needs `read`.
pub fn grpc_access(path: &str) -> Access {
    if path.starts_with("/grpc.health.v1.Health/") {
        return Access::Public;
    }
    if path.starts_with("/grpc.reflection.") {
        return Access::AnyKey;
    }
    match path {
        "/taskforce.v1.AgentRegistry/CreateAgent"
        | "/taskforce.v1.AgentRegistry/UpdateAgent"
        | "/taskforce.v1.AgentRegistry/DeleteAgent"
        | "/taskforce.v1.AgentRegistry/ValidateAgent" => Access::Needs(Scope::Write),
        "/taskforce.v1.AgentRegistry/ReportAgentStatus"
        | "/taskforce.v1.AgentRegistry/ReleaseHolds"
        | "/taskforce.v1.Executor/Execute"
        | "/taskforce.v1.Executor/Answer"
        | "/taskforce.v1.Executor/Cancel"
        | "/taskforce.v1.Executor/DeleteSession" => Access::Needs(Scope::Execute),
        // It names every session, and a session's id is what lets a caller continue it.
        "/taskforce.v1.Executor/ListSessions" => Access::Needs(Scope::Admin),
        _ => Access::Needs(Scope::Read),
    }
}

/// A gRPC refusal as an HTTP response (trailers-only, as tonic sends statuses).
pub fn grpc_reject<B: Default>(denied: &Denied) -> Response<B> {
    denied.to_status().into_http()
}

/// The layer: `policy` says what a request needs, `reject` builds the refusal. Without keys it
/// passes everything through.
pub struct AuthLayer<B> {
    keys: Option<Keys>,
    policy: fn(&Method, &str) -> Access,
    reject: fn(&Denied) -> Response<B>,
}

impl<B> Clone for AuthLayer<B> {
    fn clone(&self) -> Self {
        Self {
            keys: self.keys.clone(),
            policy: self.policy,
            reject: self.reject,
        }
    }
}

impl<B> AuthLayer<B> {
    /// A layer enforcing `keys` (none: off) by `policy`, refusing with `reject`.
    pub fn new(
        keys: Option<Keys>,
        policy: fn(&Method, &str) -> Access,
        reject: fn(&Denied) -> Response<B>,
    ) -> Self {
        Self {
            keys,
            policy,
            reject,
        }
    }
}

impl<B: Default> AuthLayer<B> {
    /// The gRPC layer ([`grpc_access`], statuses).
    pub fn grpc(keys: Option<Keys>) -> Self {
        Self::new(keys, |_, path| grpc_access(path), grpc_reject)
    }
}

impl<S, B> Layer<S> for AuthLayer<B> {
    type Service = Auth<S, B>;

    fn layer(&self, inner: S) -> Self::Service {
        Auth {
            inner,
            layer: self.clone(),
        }
    }
}

/// Marks `refusal`, answered before `req`'s body was read, `Connection: close` when `req` is
/// an HTTP/1 request with a body: hyper then closes the connection, and a client that keeps
/// connections would otherwise send its next request into it.
pub fn close_unread<B, R>(req: &Request<B>, refusal: &mut Response<R>) {
    let headers = req.headers();
    let unread = req.version() < http::Version::HTTP_2
        && (headers.contains_key(http::header::TRANSFER_ENCODING)
            || headers
                .get(http::header::CONTENT_LENGTH)
                .is_some_and(|n| n.as_bytes() != b"0"));
    if unread {
        refusal
            .headers_mut()
            .insert(http::header::CONNECTION, HeaderValue::from_static("close"));
    }
}

/// The service of [`AuthLayer`].
pub struct Auth<S, B> {
    inner: S,
    layer: AuthLayer<B>,
}

impl<S: Clone, B> Clone for Auth<S, B> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            layer: self.layer.clone(),
        }
    }
}

impl<S, ReqB, ResB> Service<Request<ReqB>> for Auth<S, ResB>
where
    S: Service<Request<ReqB>, Response = Response<ResB>>,
{
    type Response = Response<ResB>;
    type Error = S::Error;
    type Future = Either<Ready<Result<Response<ResB>, S::Error>>, S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<ReqB>) -> Self::Future {
        let Some(keys) = &self.layer.keys else {
            return Either::Right(self.inner.call(req));
        };
        let access = (self.layer.policy)(req.method(), req.uri().path());
        match keys.check(req.headers(), access) {
            Ok(principal) => {
                if let Some(p) = principal {
                    req.extensions_mut().insert(p);
                }
                Either::Right(self.inner.call(req))
            }
            Err(denied) => {
                tracing::debug!(path = %req.uri().path(), reason = %denied.message(), "call refused");
                let mut refusal = (self.layer.reject)(&denied);
                close_unread(&req, &mut refusal);
                Either::Left(ready(Ok(refusal)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = r#"
keys:
  - name: ops
    token: "ops-token-0123456789"
    scopes: [admin]
  - name: ci
    sha256: "c0f9b2dbbbd4a5a8a5a8b1b8e1b6a4d7f1a7b2a0c5d8e3f6a9b2c5d8e1f4a7b0"
    scopes: [read, execute]
  - name: reader
    token: "reader-token-0123456789"
    scopes: [read]
"#;

    #[test]
    fn insecure_no_auth_is_a_switch_like_the_others() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            auth: AuthArgs,
        }
        let parse = |args: &[&str]| {
            <Cli as clap::Parser>::try_parse_from(
                std::iter::once("svc").chain(args.iter().copied()),
            )
            .map(|cli| cli.auth.insecure_no_auth)
            .map_err(|e| e.to_string())
        };
        assert_eq!(parse(&[]), Ok(false));
        assert_eq!(parse(&["--insecure-no-auth"]), Ok(true));
        for on in ["1", "true", "yes", "on"] {
            assert_eq!(
                parse(&[&format!("--insecure-no-auth={on}")]),
                Ok(true),
                "{on}"
            );
        }
        for off in ["0", "false", "no", "off"] {
            assert_eq!(
                parse(&[&format!("--insecure-no-auth={off}")]),
                Ok(false),
                "{off}"
            );
        }
        assert!(parse(&["--insecure-no-auth=maybe"]).is_err());
    }

    #[test]
    fn a_token_is_visible_ascii_without_spaces() {
        assert_eq!(authorization_value("  "), Ok(None));
        let value = authorization_value(" key-123 ")
            .expect("valid")
            .expect("some");
        assert_eq!(value.to_str().ok(), Some("Bearer key-123"));
        for bad in ["two words", "caf\u{e9}", "a\nb", "tab\there"] {
            assert_eq!(authorization_value(bad), Err(InvalidToken), "{bad:?}");
        }
    }

    #[test]
    fn keys_no_request_could_present_or_that_collide_stop_the_start() {
        let doc = |tokens: &[&str]| {
            let mut yaml = "keys:\n".to_owned();
            for (i, token) in tokens.iter().enumerate() {
                yaml.push_str(&format!(
                    "  - {{name: k{i}, token: \"{token}\", scopes: [read]}}\n"
                ));
            }
            yaml
        };
        for bad in [
            "caf\u{e9}-0123456789abcdef",
            "tab\there-0123456789abcdef",
            "space here-0123456789abcdef",
        ] {
            let e = Keys::parse(&doc(&[bad]), "test")
                .expect_err(bad)
                .to_string();
            assert!(e.contains("visible ASCII"), "{bad:?}: {e}");
        }
        let twins = doc(&["same-token-0123456789", "same-token-0123456789"]);
        let e = Keys::parse(&twins, "test").expect_err("twins").to_string();
        assert!(e.contains("\"k0\" and \"k1\" have the same token"), "{e}");
        // Set but empty is no way to turn keys off.
        let loopback: SocketAddr = ([127, 0, 0, 1], 8080).into();
        let empty = AuthArgs {
            api_keys: Some(" ".to_owned()),
            ..AuthArgs::default()
        };
        let e = empty
            .keys("test", &[loopback])
            .expect_err("empty keys")
            .to_string();
        assert!(e.contains("set but empty"), "{e}");
        assert!(
            AuthArgs::default()
                .keys("test", &[loopback])
                .is_ok_and(|k| k.is_none())
        );
    }

    #[test]
    fn a_key_given_where_the_document_or_its_path_belongs_is_not_repeated_in_the_error() {
        let key = "supersecret-token-1234567890abcdef";
        for doc in [
            key.to_owned(),
            format!("keys: [{key}]"),
            format!("keys: [{{name: ci, token: another-token-0123456789, scopes: [{key}]}}]"),
            format!("keys: [{{name: ci, {key}: x, scopes: [read]}}]"),
        ] {
            let e = Keys::parse(&doc, "TASKFORCE_API_KEYS")
                .expect_err("not keys")
                .to_string();
            assert!(!e.contains("supersecret"), "{e}");
            assert!(e.contains("TASKFORCE_API_KEYS: not a keys document"), "{e}");
        }
        // A short name is no key: a misspelt field is named.
        let e = Keys::parse(
            "keys: [{name: ci, tokne: another-token-0123456789, scopes: [read]}]",
            "test",
        )
        .expect_err("unknown field")
        .to_string();
        assert!(e.contains("`tokne`"), "{e}");
        for key in [
            key,
            "ab/cd+ef/0123456789ghij",
            "eyJhbGciOi.eyJzdWIiOi.c2lnbmF0dXJl",
        ] {
            let read = AuthArgs {
                api_keys_file: Some(key.into()),
                ..AuthArgs::default()
            }
            .keys("test", &[([127, 0, 0, 1], 8080).into()])
            .expect_err("no such file")
            .to_string();
            assert!(
                !read.contains(key) && read.contains("No such file"),
                "{read}"
            );
        }
        let read = AuthArgs {
            api_keys_file: Some("/no/such/keys.yaml".into()),
            ..AuthArgs::default()
        }
        .keys("test", &[([127, 0, 0, 1], 8080).into()])
        .expect_err("no such file")
        .to_string();
        assert!(read.contains("/no/such/keys.yaml"), "{read}");
    }

    #[test]
    fn secrets_given_as_flags_are_found() {
        let line =
            |args: &[&str]| super::secrets_on_command_line(args.iter().map(|a| (*a).to_owned()));
        assert_eq!(
            line(&["svc", "--service-token", "x", "--api-keys=keys: []"]),
            ["--service-token", "--api-keys"]
        );
        assert!(line(&["svc", "--api-keys-file", "/k.yaml", "--listen", "x"]).is_empty());
    }

    fn headers(auth: Option<&str>) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        if let Some(a) = auth {
            h.insert(
                AUTHORIZATION,
                HeaderValue::from_str(a).unwrap_or_else(|_| HeaderValue::from_static("x")),
            );
        }
        h
    }

    #[test]
    fn tokens_and_digests_verify_and_scopes_decide() {
        let keys = Keys::parse(DOC, "test").expect("valid keys");
        assert_eq!(keys.len(), 3);
        let ops = keys.verify("ops-token-0123456789").expect("ops");
        assert!(ops.has(Scope::Write) && ops.has(Scope::Execute));
        let reader = keys.verify("reader-token-0123456789").expect("reader");
        assert!(reader.has(Scope::Read) && !reader.has(Scope::Write));
        assert!(keys.verify("reader-token-012345678").is_none());
        // A digest entry accepts the token it was made from.
        let digest = hex::encode(Sha256::digest(b"ci-token-0123456789abc"));
        let doc = format!("keys: [{{name: ci, sha256: \"{digest}\", scopes: [execute]}}]");
        let ci = Keys::parse(&doc, "test").expect("digest keys");
        assert_eq!(
            &*ci.verify("ci-token-0123456789abc").expect("ci").name,
            "ci"
        );
    }

    #[test]
    fn checks_give_401_without_or_with_a_bad_key_and_403_without_the_scope() {
        let keys = Keys::parse(DOC, "test").expect("valid keys");
        let write = Access::Needs(Scope::Write);
        assert_eq!(keys.check(&headers(None), write), Err(Denied::Missing));
        assert_eq!(
            keys.check(&headers(Some("Basic abc")), write),
            Err(Denied::Malformed)
        );
        assert_eq!(
            keys.check(&headers(Some("Bearer nope-nope-nope-nope")), write),
            Err(Denied::Invalid)
        );
        let denied = keys
            .check(&headers(Some("Bearer reader-token-0123456789")), write)
            .expect_err("reader cannot write");
        assert!(denied.is_forbidden());
        assert!(denied.message().contains("`write`") && !denied.message().contains("token-0123"));
        assert!(
            keys.check(&headers(Some("bearer ops-token-0123456789")), write)
                .is_ok()
        );
        // Two keys, in either order, are refused: neither wins silently.
        for [first, second] in [
            ["Bearer nope-nope-nope-nope", "Bearer ops-token-0123456789"],
            ["Bearer ops-token-0123456789", "Bearer nope-nope-nope-nope"],
        ] {
            let mut two = headers(Some(first));
            two.append(AUTHORIZATION, HeaderValue::from_static(second));
            let denied = keys.check(&two, write).expect_err("two credentials");
            assert_eq!(denied, Denied::Several);
            assert!(denied.message().contains("one Authorization header"));
        }
        assert_eq!(keys.check(&headers(None), Access::Public), Ok(None));
        assert_eq!(
            keys.check(&headers(None), Access::AnyKey),
            Err(Denied::Missing)
        );
        assert!(
            keys.check(
                &headers(Some("Bearer reader-token-0123456789")),
                Access::AnyKey
            )
            .is_ok_and(|p| p.is_some())
        );
    }

    #[test]
    fn bad_documents_are_refused_naming_the_problem() {
        for (doc, needle) in [
            ("keys: []", "empty"),
            ("keys: [{name: a, token: short, scopes: [read]}]", "shorter"),
            (
                "keys: [{name: a, token: aaaaaaaaaaaaaaaaaaaa, scopes: []}]",
                "no `scopes`",
            ),
            (
                "keys: [{name: a, token: aaaaaaaaaaaaaaaaaaaa, scopes: [root]}]",
                "root",
            ),
            (
                "keys: [{name: a, sha256: xyz, scopes: [read]}]",
                "64 hexadecimal",
            ),
            ("keys: [{name: a, scopes: [read]}]", "exactly one"),
            (
                "keys: [{name: a, token: aaaaaaaaaaaaaaaaaaaa, scopes: [read]}, {name: a, token: bbbbbbbbbbbbbbbbbbbb, scopes: [read]}]",
                "two keys",
            ),
            (
                "keys: [{name: a, token: aaaaaaaaaaaaaaaaaaaa, scopes: [read], extra: 1}]",
                "extra",
            ),
        ] {
            let err = Keys::parse(doc, "test").expect_err(doc).to_string();
            assert!(err.contains(needle), "{doc}: {err}");
        }
    }

    #[test]
    fn without_keys_only_loopback_listeners_may_start() {
        let args = AuthArgs::default();
        let loopback: SocketAddr = "127.0.0.1:1".parse().unwrap_or_else(|_| unreachable!());
        let any: SocketAddr = "0.0.0.0:1".parse().unwrap_or_else(|_| unreachable!());
        assert!(matches!(args.keys("t", &[loopback]), Ok(None)));
        assert!(matches!(
            args.keys("t", &[loopback, any]),
            Err(AuthError::Unprotected { .. })
        ));
        let insecure = AuthArgs {
            insecure_no_auth: true,
            ..AuthArgs::default()
        };
        assert!(matches!(insecure.keys("t", &[any]), Ok(None)));
        let both = AuthArgs {
            insecure_no_auth: true,
            api_keys: Some(DOC.to_owned()),
            ..AuthArgs::default()
        };
        assert!(matches!(
            both.keys("t", &[any]),
            Err(AuthError::Contradiction)
        ));
        let keyed = AuthArgs {
            api_keys: Some(DOC.to_owned()),
            ..AuthArgs::default()
        };
        assert!(matches!(keyed.keys("t", &[any]), Ok(Some(_))));
    }

    #[test]
    fn grpc_methods_map_to_scopes() {
        assert_eq!(grpc_access("/grpc.health.v1.Health/Check"), Access::Public);
        assert_eq!(
            grpc_access("/taskforce.v1.AgentRegistry/DeleteAgent"),
            Access::Needs(Scope::Write)
        );
        assert_eq!(
            grpc_access("/taskforce.v1.Executor/Execute"),
            Access::Needs(Scope::Execute)
        );
        // Validating starts the agent's MCP servers: a writer's act, not a reader's.
        assert_eq!(
            grpc_access("/taskforce.v1.AgentRegistry/ValidateAgent"),
            Access::Needs(Scope::Write)
        );
        assert_eq!(
            grpc_access("/taskforce.v1.Executor/GetSession"),
            Access::Needs(Scope::Read)
        );
        assert_eq!(
            grpc_access("/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"),
            Access::AnyKey
        );
    }
}
