//! Prometheus metrics every service shares: one process-wide registry each service registers
//! its families in ([`register`]), the text encoding ([`render`]), the `/metrics` handler, and
//! request metrics for gRPC servers ([`GrpcMetricsLayer`]) and HTTP routers ([`http_metrics`]).
//!
//! Request series (labels bounded: methods and route templates come from the service's own
//! routes, never from a client's path):
//! - `taskforce_grpc_server_requests_total{method, code}` and
//!   `taskforce_grpc_server_request_duration_seconds{method}` (until the response headers: for a
//!   server stream, the time to its start, or until its client gave up on it); a method the
//!   server does not have is `unknown`, a call whose client gave up on it before the answer is
//!   code `1` (CANCELLED), and the NOT_FOUND reads of the gateway's readiness probe are not
//!   counted;
//! - `taskforce_http_requests_total{route, method, code}` and
//!   `taskforce_http_request_duration_seconds{route, method}`; a request whose client left
//!   before the response is code `499` (nginx's "client closed request"), its duration until
//!   then.

use std::{
    collections::HashSet,
    pin::Pin,
    sync::{Arc, LazyLock, Mutex},
    task::{Context, Poll},
    time::Instant,
};

use axum::{
    extract::{MatchedPath, Request},
    http::header,
    middleware::Next,
    response::{IntoResponse, Response},
};
use prometheus_client::{
    encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder, text::encode},
    metrics::{
        counter::Counter,
        family::Family,
        histogram::{Histogram, exponential_buckets},
    },
    registry::{Metric, Registry},
};

/// A label value that comes from users or configuration (an MCP tool's name, a server's, a
/// provider's), written with the text format's escapes (`\\`, `\"`, `\n`): prometheus-client
/// writes label values as they are, so a name holding a quote or a line break would otherwise
/// end its label early and break (or forge series in) every later scrape.
#[derive(Debug, Clone, Default, Hash, PartialEq, Eq)]
pub struct LabelText(pub String);

impl From<&str> for LabelText {
    fn from(value: &str) -> Self {
        Self(value.to_owned())
    }
}

impl EncodeLabelValue for LabelText {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> std::fmt::Result {
        use std::fmt::Write as _;
        let mut rest = self.0.as_str();
        while let Some(at) = rest.find(['\\', '"', '\n']) {
            encoder.write_str(&rest[..at])?;
            encoder.write_str(match rest.as_bytes()[at] {
                b'\\' => "\\\\",
                b'"' => "\\\"",
                _ => "\\n",
            })?;
            rest = &rest[at + 1..];
        }
        encoder.write_str(rest)
    }
}

/// The process's registry.
static REGISTRY: LazyLock<Mutex<Registry>> = LazyLock::new(|| Mutex::new(Registry::default()));

fn registry() -> std::sync::MutexGuard<'static, Registry> {
    REGISTRY
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Registers a metric family (the client appends `_total` to counters).
pub fn register(name: &str, help: &str, metric: impl Metric) {
    registry().register(name, help, metric);
}

/// Every registered metric in the Prometheus (OpenMetrics) text format.
pub fn render() -> String {
    let mut out = String::new();
    if let Err(e) = encode(&mut out, &registry()) {
        tracing::warn!(error = %e, "cannot encode metrics");
    }
    out
}

/// The answer of `GET /metrics` (a service's handler returns it).
pub fn scrape() -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        render(),
    )
        .into_response()
}

/// Binds `addr` (empty: serves nothing) and serves `app` (a service's `/metrics` and friends)
/// there until `stop` fires. A bind failure names the flag.
pub async fn listen(
    addr: &str,
    app: axum::Router,
    stop: tokio_util::sync::CancellationToken,
) -> Result<Option<tokio::task::JoinHandle<()>>, String> {
    let addr = addr.trim();
    if addr.is_empty() {
        return Ok(None);
    }
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("--metrics-listen {addr}: {e}"))?;
    let local = listener
        .local_addr()
        .map_err(|e| format!("--metrics-listen {addr}: {e}"))?;
    // The bound address (port 0 picks one): tests and scripts read it from this line.
    tracing::info!(addr = %local, "metrics listening");
    // With the gateway's header-read limit: the port needs no login, and a client that never
    // finished its headers would otherwise hold a connection (and the stop) for good.
    Ok(Some(tokio::spawn(crate::http_server::serve(
        listener, app, stop,
    ))))
}

/// Latency buckets of requests: 0.1 ms … ~26 s.
pub fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.0001, 4.0, 10))
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GrpcLabels {
    method: String,
    code: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MethodLabel {
    method: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HttpLabels {
    route: String,
    method: String,
    code: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    route: String,
    method: String,
}

struct Requests {
    grpc_total: Family<GrpcLabels, Counter>,
    grpc_seconds: Family<MethodLabel, Histogram>,
    http_total: Family<HttpLabels, Counter>,
    http_seconds: Family<RouteLabels, Histogram>,
}

static REQUESTS: LazyLock<Requests> = LazyLock::new(|| {
    let requests = Requests {
        grpc_total: Family::default(),
        grpc_seconds: Family::new_with_constructor(latency_histogram as fn() -> _),
        http_total: Family::default(),
        http_seconds: Family::new_with_constructor(latency_histogram as fn() -> _),
    };
    register(
        "taskforce_grpc_server_requests",
        "gRPC requests served, by method and status code",
        requests.grpc_total.clone(),
    );
    register(
        "taskforce_grpc_server_request_duration_seconds",
        "Time from a gRPC request to its response headers (or to its client giving up)",
        requests.grpc_seconds.clone(),
    );
    register(
        "taskforce_http_requests",
        "HTTP requests served, by route template, method and status",
        requests.http_total.clone(),
    );
    register(
        "taskforce_http_request_duration_seconds",
        "Time from an HTTP request to its response headers (or to its client leaving)",
        requests.http_seconds.clone(),
    );
    requests
});

/// The code of a gRPC call whose client gave up on it before its answer (CANCELLED).
const GRPC_CLIENT_LEFT: &str = "1";

/// The code of an HTTP request whose client left before its response ("client closed request").
const HTTP_CLIENT_LEFT: &str = "499";

/// A request's series, counted once: when its response is ready ([`Counted::finish`]) or, when
/// its client left first (its future dropped), with the "client left" code.
struct Counted {
    labels: Option<Labels>,
    started: Instant,
}

enum Labels {
    Grpc { method: String },
    Http { route: String, method: String },
}

impl Counted {
    fn new(labels: Labels) -> Self {
        Self {
            labels: Some(labels),
            started: Instant::now(),
        }
    }

    /// Counts the request with the `code` of its response.
    fn finish(mut self, code: &str) {
        if let Some(labels) = self.labels.take() {
            count(labels, code, self.started);
        }
    }

    /// Does not count the request.
    fn forget(mut self) {
        self.labels = None;
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        if let Some(labels) = self.labels.take() {
            let code = match labels {
                Labels::Grpc { .. } => GRPC_CLIENT_LEFT,
                Labels::Http { .. } => HTTP_CLIENT_LEFT,
            };
            count(labels, code, self.started);
        }
    }
}

fn count(labels: Labels, code: &str, started: Instant) {
    let requests = &*REQUESTS;
    let elapsed = started.elapsed().as_secs_f64();
    match labels {
        Labels::Grpc { method } => {
            requests
                .grpc_total
                .get_or_create(&GrpcLabels {
                    method: method.clone(),
                    code: code.to_owned(),
                })
                .inc();
            requests
                .grpc_seconds
                .get_or_create(&MethodLabel { method })
                .observe(elapsed);
        }
        Labels::Http { route, method } => {
            requests
                .http_total
                .get_or_create(&HttpLabels {
                    route: route.clone(),
                    method: method.clone(),
                    code: code.to_owned(),
                })
                .inc();
            requests
                .http_seconds
                .get_or_create(&RouteLabels { route, method })
                .observe(elapsed);
        }
    }
}

/// The methods a gRPC server has, as `/package.Service/Method` paths: what its request metrics
/// and spans are named by. Any other path (a client's made-up one, answered UNIMPLEMENTED, or
/// refused by the key check before that) is `unknown`, so a client cannot grow the series.
#[derive(Debug, Clone)]
pub struct GrpcMethods(Arc<HashSet<String>>);

impl GrpcMethods {
    /// The methods of `service` (a Taskforce service's full name), health and reflection.
    pub fn of(service: &str) -> Self {
        let mut paths: HashSet<String> = [
            "/grpc.health.v1.Health/Check",
            "/grpc.health.v1.Health/Watch",
            "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
            "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
        ]
        .into_iter()
        .map(str::to_owned)
        .collect();
        let set = <prost_types::FileDescriptorSet as prost::Message>::decode(
            taskforce_proto::FILE_DESCRIPTOR_SET,
        )
        .unwrap_or_default();
        for file in &set.file {
            for s in &file.service {
                if format!("{}.{}", file.package(), s.name()) == service {
                    paths.extend(s.method.iter().map(|m| format!("/{service}/{}", m.name())));
                }
            }
        }
        Self(Arc::new(paths))
    }

    /// `path` when it is one of the methods, else `unknown`.
    pub fn label<'a>(&self, path: &'a str) -> &'a str {
        if self.0.contains(path) {
            path
        } else {
            "unknown"
        }
    }
}

/// A tower layer counting the requests of a tonic server (`Server::builder().layer(...)`) by
/// its [`GrpcMethods`].
#[derive(Debug, Clone)]
pub struct GrpcMetricsLayer {
    methods: GrpcMethods,
}

impl GrpcMetricsLayer {
    /// Counts the calls of `methods`' server.
    pub fn new(methods: GrpcMethods) -> Self {
        Self { methods }
    }
}

impl<S> tower::Layer<S> for GrpcMetricsLayer {
    type Service = GrpcMetrics<S>;

    fn layer(&self, inner: S) -> Self::Service {
        GrpcMetrics {
            inner,
            methods: self.methods.clone(),
        }
    }
}

/// The service of [`GrpcMetricsLayer`].
#[derive(Debug, Clone)]
pub struct GrpcMetrics<S> {
    inner: S,
    methods: GrpcMethods,
}

impl<S, B, R> tower::Service<http::Request<B>> for GrpcMetrics<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<R>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let probe = crate::telemetry::is_probe_call(&request);
        let counted = Counted::new(Labels::Grpc {
            method: self.methods.label(request.uri().path()).to_owned(),
        });
        let future = self.inner.call(request);
        Box::pin(async move {
            let result = future.await;
            // The response headers' status (a trailers-only error), else 0 (a unary success,
            // a started stream); an error of the service itself (none of tonic's) is its own.
            let code = match &result {
                Ok(response) => response
                    .headers()
                    .get("grpc-status")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("0"),
                Err(_) => "2",
            };
            // The gateway's readiness probe reads something that does not exist on purpose:
            // that NOT_FOUND is no client's. Anything else a call marked so gets (a refused
            // key) is counted: the marker hides nothing else.
            if probe && code == "5" {
                counted.forget();
            } else {
                counted.finish(code);
            }
            result
        })
    }
}

/// An HTTP method as a label: the standard ones by name, any other `other` (a client's made-up
/// method must not make a new series).
pub fn method_label(method: &http::Method) -> &'static str {
    match *method {
        http::Method::GET => "GET",
        http::Method::POST => "POST",
        http::Method::PUT => "PUT",
        http::Method::DELETE => "DELETE",
        http::Method::PATCH => "PATCH",
        http::Method::HEAD => "HEAD",
        http::Method::OPTIONS => "OPTIONS",
        http::Method::CONNECT => "CONNECT",
        http::Method::TRACE => "TRACE",
        _ => "other",
    }
}

/// The route of a request as a label: its route template (`/api/v1/agents/{id}`), or
/// `unmatched` when no route matched (a client's path must not make a new series).
pub fn route_label<B>(request: &http::Request<B>) -> &str {
    request
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", MatchedPath::as_str)
}

/// Axum middleware counting HTTP requests by route template (`/api/v1/agents/{id}`); requests
/// that match no route count as `unmatched`, methods that are not standard as `other`, and a
/// request whose client left before its response as `499`.
pub async fn http_metrics(request: Request, next: Next) -> Response {
    let counted = Counted::new(Labels::Http {
        route: route_label(&request).to_owned(),
        method: method_label(request.method()).to_owned(),
    });
    let response = next.run(request).await;
    counted.finish(response.status().as_str());
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn made_up_methods_and_paths_make_no_series_of_their_own() {
        let audit = http::Method::from_bytes(b"AUDITA").expect("a token");
        assert_eq!(method_label(&audit), "other");
        assert_eq!(method_label(&http::Method::DELETE), "DELETE");
        let request = http::Request::get("/no/such/path/abc123")
            .body(())
            .expect("a request");
        assert_eq!(route_label(&request), "unmatched");
    }

    #[test]
    fn a_counted_request_renders_with_its_method_and_code() {
        let method = "/taskforce.v1.Executor/Execute".to_owned();
        Counted::new(Labels::Grpc { method }).finish("0");
        let text = render();
        assert!(
            text.contains(
                r#"taskforce_grpc_server_requests_total{method="/taskforce.v1.Executor/Execute",code="0"} 1"#
            ),
            "{text}"
        );
        // A request whose client left before its response counts with that code.
        drop(Counted::new(Labels::Http {
            route: "/api/v1/execute".to_owned(),
            method: "POST".to_owned(),
        }));
        let text = render();
        assert!(
            text.contains(
                r#"taskforce_http_requests_total{route="/api/v1/execute",method="POST",code="499"} 1"#
            ),
            "{text}"
        );
    }

    #[test]
    fn only_a_servers_own_methods_name_its_series() {
        let registry = GrpcMethods::of("taskforce.v1.AgentRegistry");
        for own in [
            "/taskforce.v1.AgentRegistry/GetAgent",
            "/taskforce.v1.AgentRegistry/ReportAgentStatus",
            "/grpc.health.v1.Health/Check",
        ] {
            assert_eq!(registry.label(own), own);
        }
        for other in [
            "/taskforce.v1.Executor/Execute",
            "/taskforce.v1.AgentRegistry/Evil123",
            "/evil.Svc/Method1",
            "/x21691",
        ] {
            assert_eq!(registry.label(other), "unknown", "{other}");
        }
        let executor = GrpcMethods::of("taskforce.v1.Executor");
        assert_eq!(
            executor.label("/taskforce.v1.Executor/Execute"),
            "/taskforce.v1.Executor/Execute"
        );
    }
}
