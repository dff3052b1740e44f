//! An OTLP trace receiver: the OpenTelemetry collector's own gRPC `TraceService`, keeping every
//! span it is sent, for the tracing test, or only counting them, for the telemetry benchmark
//! (where the receiver shares the machine's two cores with the services it measures).

use std::{
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
};

use opentelemetry_proto::tonic::{
    collector::trace::v1::{
        ExportTraceServiceRequest, ExportTraceServiceResponse,
        trace_service_server::{TraceService, TraceServiceServer},
    },
    common::v1::any_value::Value as AnyValue,
};

/// `Status.code` ERROR of the OTLP protocol.
const ERROR: i32 = 2;

/// One received span, flattened.
#[derive(Debug, Clone)]
pub struct Span {
    /// The `service.name` of its resource.
    pub service: String,
    /// Its name.
    pub name: String,
    /// Lower-case hex.
    pub trace_id: String,
    /// Lower-case hex.
    pub span_id: String,
    /// Lower-case hex; empty for a root span.
    pub parent: String,
    /// When it started, in nanoseconds since the Unix epoch.
    pub start_unix_nano: u64,
    /// When it ended, in nanoseconds since the Unix epoch.
    pub end_unix_nano: u64,
    /// Its status message when its status is ERROR.
    pub error: Option<String>,
    /// Its attributes, each value as text (`"404"`, `"grpc"`).
    pub attributes: std::collections::HashMap<String, String>,
}

/// A running receiver on a loopback port; stops when dropped.
pub struct Receiver {
    addr: SocketAddr,
    store: Arc<Store>,
    task: tokio::task::JoinHandle<()>,
}

impl Receiver {
    /// Starts a receiver on a free loopback port that keeps every span.
    pub async fn start() -> std::io::Result<Self> {
        Self::listen(true).await
    }

    /// Starts a receiver on a free loopback port that only counts the spans (decoded, as any
    /// collector does, and dropped): [`Receiver::spans`] stays empty.
    pub async fn counting() -> std::io::Result<Self> {
        Self::listen(false).await
    }

    async fn listen(keep: bool) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let store = Arc::new(Store {
            keep,
            count: AtomicUsize::new(0),
            spans: Mutex::new(Vec::new()),
        });
        let service = TraceServiceServer::from_arc(Arc::clone(&store));
        let task = tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
                .await;
        });
        Ok(Self { addr, store, task })
    }

    /// Its URL, for `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every span received so far (none for a [`Receiver::counting`] one).
    pub fn spans(&self) -> Vec<Span> {
        self.store
            .spans
            .lock()
            .map(|s| s.clone())
            .unwrap_or_default()
    }

    /// How many spans were received so far.
    pub fn count(&self) -> usize {
        self.store.count.load(Ordering::Relaxed)
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct Store {
    keep: bool,
    count: AtomicUsize,
    spans: Mutex<Vec<Span>>,
}

#[tonic::async_trait]
impl TraceService for Store {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let request = request.into_inner();
        let n: usize = request
            .resource_spans
            .iter()
            .flat_map(|rs| &rs.scope_spans)
            .map(|ss| ss.spans.len())
            .sum();
        self.count.fetch_add(n, Ordering::Relaxed);
        if !self.keep {
            return Ok(tonic::Response::new(ExportTraceServiceResponse::default()));
        }
        let mut got = Vec::new();
        for rs in request.resource_spans {
            let service = rs
                .resource
                .iter()
                .flat_map(|r| &r.attributes)
                .find(|kv| kv.key == "service.name")
                .and_then(|kv| kv.value.as_ref()?.value.as_ref())
                .map(text)
                .unwrap_or_default();
            for span in rs.scope_spans.into_iter().flat_map(|s| s.spans) {
                got.push(Span {
                    service: service.clone(),
                    name: span.name,
                    trace_id: hex::encode(&span.trace_id),
                    span_id: hex::encode(&span.span_id),
                    start_unix_nano: span.start_time_unix_nano,
                    end_unix_nano: span.end_time_unix_nano,
                    error: span
                        .status
                        .as_ref()
                        .filter(|s| s.code == ERROR)
                        .map(|s| s.message.clone()),
                    parent: hex::encode(&span.parent_span_id),
                    attributes: span
                        .attributes
                        .iter()
                        .filter_map(|kv| {
                            Some((kv.key.clone(), text(kv.value.as_ref()?.value.as_ref()?)))
                        })
                        .collect(),
                });
            }
        }
        if let Ok(mut all) = self.spans.lock() {
            all.extend(got);
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

/// An attribute's value as text.
fn text(value: &AnyValue) -> String {
    match value {
        AnyValue::StringValue(s) => s.clone(),
        AnyValue::IntValue(i) => i.to_string(),
        AnyValue::BoolValue(b) => b.to_string(),
        AnyValue::DoubleValue(d) => d.to_string(),
        other => format!("{other:?}"),
    }
}
