//! Logs and OpenTelemetry traces.
//!
//! Logs go to stderr: human-readable on a terminal, JSON otherwise (or with
//! `TASKFORCE_LOG_FORMAT=json`); `RUST_LOG` filters them.
//!
//! Traces are exported over OTLP/gRPC when `OTEL_EXPORTER_OTLP_ENDPOINT` (or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set, with the standard `OTEL_*` variables
//! (`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_BSP_SCHEDULE_DELAY`, ...); when it is
//! not, no OpenTelemetry layer is installed at all. The W3C trace context (`traceparent`) is
//! read from incoming HTTP and gRPC requests ([`server_span`]) and sent with outgoing gRPC calls
//! ([`traced`]), so one request is one trace across the gateway, the registry and the
//! executor. Log lines inside a traced request carry its `trace_id`.

use std::time::Duration;

use opentelemetry::{
    propagation::TextMapCompositePropagator, trace::TraceContextExt, trace::TracerProvider,
};
use opentelemetry_http::HeaderInjector;
use opentelemetry_sdk::{
    Resource,
    propagation::TraceContextPropagator,
    trace::{BatchSpanProcessor, SdkTracerProvider},
};
use tonic::transport::Channel;
use tracing::{Span, warn};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::{
    EnvFilter, Layer, filter::LevelFilter, layer::SubscriberExt, util::SubscriberInitExt,
};

/// The spans that become OpenTelemetry spans: each request served ([`server_span`]), each run,
/// model call and tool call. Other spans (a handler's `#[instrument]`) and log events stay in
/// the logs only: a trace shows the hops and the work, at a cost a busy service can carry (a
/// span's parent is its nearest traced ancestor). All are made at [`TRACED_LEVEL`].
const TRACED_SPANS: [&str; 4] = ["request", "run", "llm", "tool"];

/// The level of the [`TRACED_SPANS`] (`info_span!`), the most verbose the OpenTelemetry layer
/// asks for.
const TRACED_LEVEL: LevelFilter = LevelFilter::INFO;

/// Whether spans of this callsite reach the OpenTelemetry layer.
fn traced_callsite(meta: &tracing::Metadata<'_>) -> bool {
    meta.is_span() && TRACED_SPANS.contains(&meta.name())
}

/// A filter letting through the spans and events of the callsites `keep` picks, decided once
/// per callsite (the answer depends on the callsite alone), so nothing is checked per span or
/// event: per layer (`.with_filter`), or for every layer (`.with` it as a layer).
///
/// `most_verbose` is the most verbose level `keep` lets through (or the global filter lets
/// reach it). Without it a per-layer filter makes the whole subscriber's level hint "any", and
/// every `log` record of a dependency (sled writes a `trace!` per page it reads) is built and
/// offered to the subscriber only to be dropped.
fn by_callsite<S: tracing::Subscriber>(
    keep: fn(&tracing::Metadata<'_>) -> bool,
    most_verbose: Option<LevelFilter>,
) -> impl tracing_subscriber::layer::Filter<S> + Layer<S> {
    let filter = tracing_subscriber::filter::DynFilterFn::new(move |meta, _| keep(meta))
        .with_callsite_filter(move |meta| {
            if keep(meta) {
                tracing::subscriber::Interest::always()
            } else {
                tracing::subscriber::Interest::never()
            }
        });
    match most_verbose {
        Some(level) => filter.with_max_level_hint(level),
        None => filter,
    }
}

/// A filter for every layer: everything but the SDK's own reports of failed exports
/// ([`ReportedExporter`] says them better; without an exporter there are none, and the filter,
/// decided per callsite, costs nothing). Not a per-layer filter of the log layer: each
/// per-layer filter costs each span entered and left a lookup. No level hint: a global filter
/// without one leaves the subscriber's hint to the others (`RUST_LOG`'s), and one at the
/// global filter's level would be less verbose than the INFO events this lets through.
fn quiet_exports<S: tracing::Subscriber>() -> impl Layer<S> {
    by_callsite(|meta| !sdk_export_error(meta), None)
}

/// The OpenTelemetry layer's filter: the [`TRACED_SPANS`] only.
fn traced_filter<S: tracing::Subscriber>() -> impl tracing_subscriber::layer::Filter<S> {
    by_callsite(traced_callsite, Some(TRACED_LEVEL))
}

/// Whether [`init`] set up trace export: without it, [`server_span`] makes no span (a request
/// span only carries the trace, so it would cost every request and say nothing).
static EXPORTING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether [`init`] set up trace export: without it no request span is made.
pub fn traces_exported() -> bool {
    EXPORTING.load(std::sync::atomic::Ordering::Relaxed)
}

/// How long flushing the last spans at exit may take.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(5);

/// How long it may take while exports are failing.
const FAILING_FLUSH_TIMEOUT: Duration = Duration::from_millis(500);

/// Whether the latest trace export failed.
static EXPORTS_FAILING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// What [`init`] set up; call [`Telemetry::shutdown`] before exiting so the last spans leave.
#[must_use = "call shutdown() before exiting, or the last spans are lost"]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Whether traces are exported.
    pub fn exporting(&self) -> bool {
        self.provider.is_some()
    }

    /// Exports the spans still buffered (within 5 s; 0.5 s while exports are failing: the
    /// endpoint that did not take the last batches will hardly take these, and a stop should
    /// not wait on it) and stops the exporter.
    pub async fn shutdown(self) {
        let Some(provider) = self.provider else {
            return;
        };
        let failing = EXPORTS_FAILING.load(std::sync::atomic::Ordering::Relaxed);
        let within = if failing {
            warn!(
                "trace exports are failing: the spans still held get 0.5 s to leave, then are \
                 dropped"
            );
            FAILING_FLUSH_TIMEOUT
        } else {
            FLUSH_TIMEOUT
        };
        // The provider's shutdown blocks until its export thread has sent the last batch, whose
        // gRPC connection runs on this runtime: wait on a blocking thread, not a worker.
        let flushing = tokio::task::spawn_blocking(move || provider.shutdown_with_timeout(within));
        match tokio::time::timeout(within + Duration::from_millis(100), flushing).await {
            // Said above.
            Ok(Ok(Err(_))) | Err(_) if failing => {}
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => warn!(error = %e, "flushing traces failed"),
            Ok(Err(e)) => warn!(error = %e, "flushing traces failed"),
            Err(_) => warn!(
                timeout_ms = u64::try_from(within.as_millis()).unwrap_or(u64::MAX),
                "flushing traces timed out"
            ),
        }
    }
}

/// Sets up logging and, when an OTLP endpoint is configured, trace export for `service` (the
/// default `service.name`; `OTEL_SERVICE_NAME` wins). Call once, inside the Tokio runtime.
pub fn init(service: &'static str) -> Telemetry {
    use std::io::IsTerminal;
    let agent_level = std::env::var("AGENT_LOG_LEVEL").ok();
    // Said once logging is up: a filter or format that was asked for and is not used.
    let mut settings_ignored = Vec::new();
    let default_filter = |ignored: &mut Vec<String>| {
        EnvFilter::new(
            crate::default_level(agent_level.as_deref()).unwrap_or_else(|e| {
                ignored.push(e);
                "info"
            }),
        )
    };
    let filter = match std::env::var("RUST_LOG") {
        Ok(directives) if !directives.trim().is_empty() => EnvFilter::try_new(&directives)
            .unwrap_or_else(|e| {
                settings_ignored.push(format!(
                    "RUST_LOG is not a valid filter ({e}); using the default level"
                ));
                default_filter(&mut settings_ignored)
            }),
        _ => default_filter(&mut settings_ignored),
    };
    let terminal = std::io::stderr().is_terminal();
    // Empty is unset (a compose file's `TASKFORCE_LOG_FORMAT: ""`).
    let json = match std::env::var("TASKFORCE_LOG_FORMAT") {
        Err(_) => !terminal,
        Ok(f) if f.trim().is_empty() => !terminal,
        Ok(f) if f.eq_ignore_ascii_case("json") => true,
        Ok(f) if f.eq_ignore_ascii_case("text") => false,
        Ok(f) => {
            settings_ignored.push(format!(
                "TASKFORCE_LOG_FORMAT={f:?} is neither json nor text; using {}",
                if terminal { "text" } else { "json" }
            ));
            !terminal
        }
    };
    // Colours only for a terminal: text logs forced into a file or a pipe stay plain.
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(|| Masked(std::io::stderr()))
        .with_ansi(terminal);
    let fmt = if json {
        // The spans from the outermost in (`spans`, the request's carrying `trace_id`), without
        // repeating the innermost as `span`: serializing span fields is most of a line's cost.
        fmt.json()
            .with_current_span(false)
            .fmt_fields(SpanJsonFields)
            .boxed()
    } else {
        // Field values as text, their line breaks and control characters escaped: a value
        // carrying remote text (a provider's error message) would otherwise forge log lines
        // and send escape sequences to the operator's terminal. (JSON escapes them anyway.)
        fmt.fmt_fields(TextFields).boxed()
    };
    let (provider, problem) = match exporter_configured().then(|| provider(service)) {
        Some(Ok(p)) => (Some(p), None),
        Some(Err(e)) => (None, Some(e)),
        None => (None, None),
    };
    let quiet = quiet_exports();
    let otel = provider.as_ref().map(|p| {
        opentelemetry::global::set_text_map_propagator(TextMapCompositePropagator::new(vec![
            Box::new(TraceContextPropagator::new()),
        ]));
        tracing_opentelemetry::layer()
            .with_tracer(p.tracer(service))
            // Per-span attributes nobody reads in a trace view, at a cost per span.
            .with_tracked_inactivity(false)
            .with_threads(false)
            .with_location(false)
            // The module a span was made in: its name says what it is.
            .with_target(false)
            // Entering a span (each poll of a run or a stream) would attach its context to the
            // thread: nothing here reads it (`traced` asks the current span), so skip the cost.
            .with_context_activation(false)
            // Decided once per callsite (the answer depends on the callsite alone), so spans
            // and events the layer never sees cost no per-span check.
            .with_filter(traced_filter())
    });
    tracing_subscriber::registry()
        .with(filter)
        .with(quiet)
        .with(fmt)
        .with(otel)
        .init();
    for ignored in settings_ignored {
        warn!("{ignored}");
    }
    if let Some(e) = problem {
        warn!(error = %e, "OTLP trace export is configured but could not start; no traces are exported");
    } else if provider.is_some() {
        EXPORTING.store(true, std::sync::atomic::Ordering::Relaxed);
        tracing::info!("exporting traces over OTLP");
    }
    Telemetry { provider }
}

/// A log writer that masks the values of [`crate::env::never_log`] in what it writes: the fmt
/// layer writes each line whole, so no value is split between two writes.
struct Masked<W>(W);

impl<W: std::io::Write> std::io::Write for Masked<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match std::str::from_utf8(buf)
            .ok()
            .and_then(crate::env::mask_logged)
        {
            Some(masked) => {
                self.0.write_all(masked.as_bytes())?;
                Ok(buf.len())
            }
            None => self.0.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

/// Fields as tracing-subscriber's default text format writes them (`message` bare, then
/// `name=value`, space-separated), with the control characters of every value escaped (`\n`,
/// `\r`, `\u{1b}`): one event is one line, whatever its values hold.
#[derive(Debug, Clone, Copy, Default)]
struct TextFields;

impl<'w> tracing_subscriber::fmt::FormatFields<'w> for TextFields {
    fn format_fields<R: tracing_subscriber::field::RecordFields>(
        &self,
        mut writer: tracing_subscriber::fmt::format::Writer<'w>,
        fields: R,
    ) -> std::fmt::Result {
        let mut visitor = TextVisitor {
            writer: &mut writer,
            first: true,
            result: Ok(()),
        };
        fields.record(&mut visitor);
        visitor.result
    }
}

struct TextVisitor<'a, 'w> {
    writer: &'a mut tracing_subscriber::fmt::format::Writer<'w>,
    first: bool,
    result: std::fmt::Result,
}

impl TextVisitor<'_, '_> {
    fn write(&mut self, field: &tracing::field::Field, value: &str) {
        // As the default format: the `log` crate's own fields are not shown.
        if self.result.is_err() || field.name().starts_with("log.") {
            return;
        }
        use std::fmt::Write;
        let mut line = String::with_capacity(value.len() + field.name().len() + 2);
        if !self.first {
            line.push(' ');
        }
        self.first = false;
        if field.name() != "message" {
            line.push_str(field.name().trim_start_matches("r#"));
            line.push('=');
        }
        for c in value.chars() {
            if c.is_control() {
                let _ = write!(line, "{}", c.escape_default());
            } else {
                line.push(c);
            }
        }
        self.result = self.writer.write_str(&line);
    }
}

impl tracing::field::Visit for TextVisitor<'_, '_> {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        if field.name() == "message" {
            self.write(field, value);
        } else {
            self.write(field, &format!("{value:?}"));
        }
    }

    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.write(field, &format!("{value:?}"));
    }
}

/// A span's fields as a JSON object, as tracing-subscriber's `JsonFields` writes them, but
/// without the attributes that are for traces only (`http.*`, `rpc.*`: `otel.name` says the
/// call in a log line), and a field recorded after the span was made (the request span's
/// `trace_id`, its status) is spliced into the stored object instead of the object being
/// parsed and written again (`JsonFields` does that, for every such field of every request).
#[derive(Debug, Clone, Copy, Default)]
struct SpanJsonFields;

impl<'w> tracing_subscriber::fmt::FormatFields<'w> for SpanJsonFields {
    fn format_fields<R: tracing_subscriber::field::RecordFields>(
        &self,
        mut writer: tracing_subscriber::fmt::format::Writer<'w>,
        fields: R,
    ) -> std::fmt::Result {
        let mut logged = LoggedFields::default();
        fields.record(&mut logged);
        write!(writer, "{}", serde_json::Value::Object(logged.0))
    }

    fn add_fields(
        &self,
        current: &'w mut tracing_subscriber::fmt::FormattedFields<Self>,
        fields: &tracing::span::Record<'_>,
    ) -> std::fmt::Result {
        let mut logged = LoggedFields::default();
        fields.record(&mut logged);
        if !logged.0.is_empty() {
            splice_json_object(
                &mut current.fields,
                &serde_json::Value::Object(logged.0).to_string(),
            );
        }
        Ok(())
    }
}

/// The fields of a span that its log lines show, as JSON values.
#[derive(Default)]
struct LoggedFields(serde_json::Map<String, serde_json::Value>);

impl LoggedFields {
    fn put(&mut self, field: &tracing::field::Field, value: serde_json::Value) {
        let name = field.name();
        if !(name.starts_with("http.") || name.starts_with("rpc.")) {
            self.0.insert(name.to_owned(), value);
        }
    }
}

impl tracing::field::Visit for LoggedFields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.put(field, serde_json::Value::String(format!("{value:?}")));
    }

    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.put(field, value.into());
    }

    fn record_i64(&mut self, field: &tracing::field::Field, value: i64) {
        self.put(field, value.into());
    }

    fn record_u64(&mut self, field: &tracing::field::Field, value: u64) {
        self.put(field, value.into());
    }

    fn record_bool(&mut self, field: &tracing::field::Field, value: bool) {
        self.put(field, value.into());
    }

    fn record_f64(&mut self, field: &tracing::field::Field, value: f64) {
        self.put(field, value.into());
    }
}

/// Adds the members of the JSON object `more` to the JSON object `current` (either may be
/// empty text, or `{}`). A key recorded twice appears twice; readers keep the last.
fn splice_json_object(current: &mut String, more: &str) {
    let Some(members) = more
        .trim()
        .strip_prefix('{')
        .and_then(|m| m.strip_suffix('}'))
        .filter(|m| !m.trim().is_empty())
    else {
        return;
    };
    match current.trim_end().strip_suffix('}') {
        Some(head) if head.trim() != "{" => {
            let keep = head.len();
            current.truncate(keep);
            current.push(',');
        }
        _ => {
            current.clear();
            current.push('{');
        }
    }
    current.push_str(members);
    current.push('}');
}

fn exporter_configured() -> bool {
    [
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
    ]
    .iter()
    .any(|v| std::env::var(v).is_ok_and(|s| !s.trim().is_empty()))
        && !std::env::var("OTEL_SDK_DISABLED").is_ok_and(|v| v.eq_ignore_ascii_case("true"))
}

fn provider(service: &'static str) -> Result<SdkTracerProvider, String> {
    // The exporter connects lazily: an endpoint that cannot work is said now, not as failed
    // exports later.
    for var in [
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
    ] {
        if let Ok(url) = std::env::var(var)
            && !url.trim().is_empty()
        {
            crate::check_service_url(&url).map_err(|e| format!("{var}: {e}"))?;
        }
    }
    let exporter = ReportedExporter::new(
        opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .build()
            .map_err(|e| e.to_string())?,
    );
    // The SDK's own batch processor: an ended span goes into a queue its export thread reads
    // on its schedule (or when a batch is full); the async-runtime variant woke a Tokio task
    // per span ended. The gRPC exporter's connection still runs on this (the caller's) runtime.
    let processor = BatchSpanProcessor::builder(exporter).build();
    let mut resource = Resource::builder();
    if std::env::var("OTEL_SERVICE_NAME").is_err() {
        resource = resource.with_service_name(service);
    }
    Ok(SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_resource(resource.build())
        .build())
}

/// How often a failing export is said again in the log.
const EXPORT_FAILURE_REPEAT: Duration = Duration::from_secs(60);

/// The OTLP exporter, reporting failed exports itself: one warning naming the error when
/// exports start failing (then at most once a minute, with how many spans were dropped since),
/// one line when they work again, and `taskforce_trace_export_failures_total`. The SDK's own
/// error event per failed batch (an ERROR with an empty message, every few seconds while the
/// collector is down) is left out of the logs.
#[derive(Debug)]
struct ReportedExporter<E> {
    inner: E,
    failing: std::sync::Mutex<Failing>,
    failures: prometheus_client::metrics::counter::Counter,
}

/// Failed exports since the last one that worked.
#[derive(Debug, Default)]
struct Failing {
    /// When the failure was last said in the log (`None`: exports work).
    said: Option<std::time::Instant>,
    /// Spans dropped since then.
    dropped: u64,
}

impl<E> ReportedExporter<E> {
    fn new(inner: E) -> Self {
        let failures = prometheus_client::metrics::counter::Counter::default();
        crate::metrics::register(
            "taskforce_trace_export_failures",
            "OTLP trace exports that failed (their spans are dropped)",
            failures.clone(),
        );
        Self {
            inner,
            failing: std::sync::Mutex::default(),
            failures,
        }
    }

    fn report(&self, result: &opentelemetry_sdk::error::OTelSdkResult, spans: usize) {
        let mut failing = self
            .failing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        EXPORTS_FAILING.store(result.is_err(), std::sync::atomic::Ordering::Relaxed);
        match result {
            Ok(()) => {
                if failing.said.take().is_some() {
                    tracing::info!(dropped_spans = failing.dropped, "trace export works again");
                }
                failing.dropped = 0;
            }
            Err(e) => {
                self.failures.inc();
                failing.dropped += spans as u64;
                let due = failing
                    .said
                    .is_none_or(|at| at.elapsed() >= EXPORT_FAILURE_REPEAT);
                if due {
                    warn!(
                        error = %e,
                        dropped_spans = failing.dropped,
                        "trace export failed; spans are dropped until the OTLP endpoint answers \
                         (said again at most once a minute)"
                    );
                    failing.said = Some(std::time::Instant::now());
                    failing.dropped = 0;
                }
            }
        }
    }
}

impl<E: opentelemetry_sdk::trace::SpanExporter> opentelemetry_sdk::trace::SpanExporter
    for ReportedExporter<E>
{
    fn export(
        &self,
        batch: Vec<opentelemetry_sdk::trace::SpanData>,
    ) -> impl std::future::Future<Output = opentelemetry_sdk::error::OTelSdkResult> + Send {
        let spans = batch.len();
        let exported = self.inner.export(batch);
        async move {
            let result = exported.await;
            self.report(&result, spans);
            result
        }
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> opentelemetry_sdk::error::OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> opentelemetry_sdk::error::OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// Whether a log event is the SDK's own report of a failed export batch (or of a shutdown
/// whose flush timed out, said by [`Telemetry::shutdown`]), which
/// [`ReportedExporter`] says better.
fn sdk_export_error(meta: &tracing::Metadata<'_>) -> bool {
    meta.is_event()
        && matches!(
            meta.name(),
            "BatchSpanProcessor.ExportError" | "BatchSpanProcessor.Shutdown.Timeout"
        )
        && meta.target().starts_with("opentelemetry")
}

/// The span of one incoming request (`kind` "HTTP" or "gRPC", `name` its route or method),
/// continuing the caller's trace when the headers carry a W3C `traceparent`. Its `trace_id`
/// field puts the trace id on every log line inside it.
/// Without trace export ([`init`] found no OTLP endpoint) it is [`Span::none`]: nothing to
/// continue, no trace id to put on log lines, and no cost per request. Probes and scrapes
/// (`/healthz`, `/readyz`, `/metrics`, `grpc.health.v1`) get none either.
pub fn server_span(kind: &str, name: &str, headers: &http::HeaderMap) -> Span {
    if !traces_exported() || is_probe(name) {
        return Span::none();
    }
    let parent =
        opentelemetry::global::get_text_map_propagator(|p| p.extract(&CallerHeaders::new(headers)));
    let inherited = Some(parent.span().span_context().trace_id())
        .filter(|id| *id != opentelemetry::trace::TraceId::INVALID);
    // A continued trace's id is a field from the start; a new trace's is made with the span,
    // so it is recorded after (a second formatting of the span's fields for the logs). The
    // semantic conventions' attributes of the call; its status is recorded with the response
    // ([`record_status`]).
    let trace_id = inherited.map(tracing::field::display);
    let span = if kind == "gRPC" {
        // `/package.Service/Method`, or `unknown` for a method the server does not have: no
        // service then, and the conventions' `_OTHER` method.
        let (service, method) = match name.strip_prefix('/').and_then(|n| n.split_once('/')) {
            Some((service, method)) => (Some(service), method),
            None => (None, "_OTHER"),
        };
        tracing::info_span!(
            "request",
            otel.name = %format_args!("{kind} {name}"),
            otel.kind = "server",
            trace_id,
            otel.status_description = tracing::field::Empty,
            rpc.system = "grpc",
            rpc.service = service,
            rpc.method = method,
            rpc.grpc.status_code = tracing::field::Empty,
        )
    } else {
        tracing::info_span!(
            "request",
            otel.name = %format_args!("{kind} {name}"),
            otel.kind = "server",
            trace_id,
            otel.status_description = tracing::field::Empty,
            // The conventions' spelling of a method outside the standard ones, and no route
            // for a path that matched none.
            http.request.method = if kind == "other" { "_OTHER" } else { kind },
            http.route = (name != "unmatched").then_some(name),
            http.response.status_code = tracing::field::Empty,
        )
    };
    if inherited.is_some() {
        // Fails only when no OpenTelemetry layer is installed, and then nothing is traced.
        let _ = span.set_parent(parent);
    } else {
        let trace_id = span.context().span().span_context().trace_id();
        if trace_id != opentelemetry::trace::TraceId::INVALID {
            span.record("trace_id", tracing::field::display(trace_id));
        }
    }
    span
}

/// The most of a caller's `tracestate` that is passed on. The W3C Trace Context asks for at
/// least 512 characters to be propagated; a caller's 16 KiB one, passed on whole, took every call
/// to the registry and the executors past their header limit (431: the gateway answered 503).
const MAX_TRACESTATE: usize = 512;

/// Its members longer than this go first when a `tracestate` is cut (W3C Trace Context §3.3.1.5).
const LONG_TRACESTATE_MEMBER: usize = 128;

/// A request's headers as the trace context is read from them, its `tracestate` cut to
/// [`MAX_TRACESTATE`].
struct CallerHeaders<'a> {
    headers: &'a http::HeaderMap,
    /// The cut `tracestate`, when it had to be.
    tracestate: Option<String>,
}

impl<'a> CallerHeaders<'a> {
    fn new(headers: &'a http::HeaderMap) -> Self {
        let tracestate = headers
            .get("tracestate")
            .and_then(|v| v.to_str().ok())
            .filter(|t| t.len() > MAX_TRACESTATE)
            .map(cut_tracestate);
        Self {
            headers,
            tracestate,
        }
    }
}

impl opentelemetry::propagation::Extractor for CallerHeaders<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        match &self.tracestate {
            Some(cut) if key.eq_ignore_ascii_case("tracestate") => Some(cut),
            _ => self.headers.get(key).and_then(|v| v.to_str().ok()),
        }
    }

    fn keys(&self) -> Vec<&str> {
        self.headers.keys().map(http::HeaderName::as_str).collect()
    }
}

/// `tracestate` cut to [`MAX_TRACESTATE`] as the W3C Trace Context says: whole members only,
/// the long ones dropped first, then from the end.
fn cut_tracestate(tracestate: &str) -> String {
    let mut members: Vec<&str> = tracestate
        .split(',')
        .map(str::trim)
        .filter(|m| !m.is_empty())
        .collect();
    let length = |members: &[&str]| {
        members.iter().map(|m| m.len()).sum::<usize>() + members.len().saturating_sub(1)
    };
    if length(&members) > MAX_TRACESTATE {
        members.retain(|m| m.len() <= LONG_TRACESTATE_MEMBER);
    }
    while length(&members) > MAX_TRACESTATE {
        members.pop();
    }
    members.join(",")
}

/// Marks `span` failed in its trace: OpenTelemetry status ERROR with `description`. The span
/// must have been made with an empty `otel.status_description` field (the request spans of
/// [`server_span`], and the executor's `run`, `llm` and `tool` spans are).
pub fn fail_span(span: &Span, description: &str) {
    span.record("otel.status_description", description);
}

/// Why a response is a server error for its trace: an HTTP 5xx, or a gRPC status that
/// OpenTelemetry counts as the server's failure (`UNKNOWN`, `DEADLINE_EXCEEDED`,
/// `UNIMPLEMENTED`, `INTERNAL`, `UNAVAILABLE`, `DATA_LOSS`). A client's mistake (4xx,
/// `NOT_FOUND`, `INVALID_ARGUMENT`, ...) is not the server's error, as the semantic conventions
/// say.
fn server_failure(status: Option<http::StatusCode>, grpc: Option<u16>) -> Option<String> {
    if let Some(status) = status.filter(http::StatusCode::is_server_error) {
        return Some(format!("HTTP {}", status.as_u16()));
    }
    grpc.filter(|code| matches!(code, 2 | 4 | 12 | 13 | 14 | 15))
        .map(|code| format!("gRPC status {code}"))
}

/// The gRPC status code in `headers` (or trailers), if they carry one.
fn grpc_status(headers: &http::HeaderMap) -> Option<u16> {
    headers.get("grpc-status")?.to_str().ok()?.parse().ok()
}

/// Records a response's status on its request's span ([`server_span`]): the HTTP status of a
/// REST request (`status`), and the gRPC status of a call when `headers` (or trailers) carry
/// one; a server's failure also marks the span failed. A field the span does not have is no
/// cost.
fn record_status(span: &Span, status: Option<http::StatusCode>, headers: &http::HeaderMap) {
    let grpc = grpc_status(headers);
    if let Some(status) = status {
        span.record("http.response.status_code", status.as_u16());
    }
    if let Some(code) = grpc {
        span.record("rpc.grpc.status_code", code);
    }
    if let Some(failure) = server_failure(status, grpc) {
        fail_span(span, &failure);
    }
}

/// Marks a call made by a probe (the gateway's `/readyz` checking that the services take its
/// token): like the probe itself, it makes no trace and is not counted in the gRPC servers'
/// request metrics. Only gRPC servers heed it, and only on the methods the probe calls
/// ([`PROBE_METHODS`]); a REST client's is ignored.
pub const PROBE_HEADER: &str = "x-taskforce-probe";

/// The methods the gateway's readiness probe calls (reads of an agent and a session that do
/// not exist): the only ones [`PROBE_HEADER`] keeps out of traces and metrics, so a client
/// sending it cannot hide its runs or writes.
pub const PROBE_METHODS: [&str; 2] = [
    "/taskforce.v1.AgentRegistry/GetAgent",
    "/taskforce.v1.Executor/GetSession",
];

/// Whether a gRPC request is marked as the readiness probe's ([`PROBE_HEADER`] on one of the
/// [`PROBE_METHODS`]).
pub fn is_probe_call<B>(request: &http::Request<B>) -> bool {
    request.headers().contains_key(PROBE_HEADER) && PROBE_METHODS.contains(&request.uri().path())
}

/// Whether `name` (a route or gRPC method) is a probe or a scrape: asked every few seconds by
/// orchestrators and Prometheus, each would be a trace of its own that says nothing.
fn is_probe(name: &str) -> bool {
    matches!(name, "/healthz" | "/readyz" | "/metrics")
        || name.starts_with("/grpc.health.v1.Health/")
}

/// A gRPC channel to another Taskforce service: every call carries the current span's trace
/// context (`traceparent`) and, when the service has one, its token (`authorization`).
#[derive(Debug, Clone)]
pub struct TracedChannel {
    inner: Channel,
    authorization: Option<http::HeaderValue>,
}

/// Wraps `channel` so its calls carry the current trace context (nothing when not tracing) and
/// `authorization` (see [`crate::auth::AuthArgs::outgoing`]).
pub fn traced(channel: Channel, authorization: Option<http::HeaderValue>) -> TracedChannel {
    TracedChannel {
        inner: channel,
        authorization,
    }
}

impl tower::Service<http::Request<tonic::body::Body>> for TracedChannel {
    type Response = http::Response<tonic::body::Body>;
    type Error = tonic::transport::Error;
    type Future = <Channel as tower::Service<http::Request<tonic::body::Body>>>::Future;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        tower::Service::poll_ready(&mut self.inner, cx)
    }

    fn call(&mut self, mut req: http::Request<tonic::body::Body>) -> Self::Future {
        if let Some(value) = &self.authorization {
            req.headers_mut()
                .insert(http::header::AUTHORIZATION, value.clone());
        }
        let cx = Span::current().context();
        if cx.span().span_context().is_valid() {
            opentelemetry::global::get_text_map_propagator(|p| {
                p.inject_context(&cx, &mut HeaderInjector(req.headers_mut()));
            });
        }
        self.inner.call(req)
    }
}

/// A layer that runs each request in the span `make_span` makes for it (normally
/// [`server_span`]): the handler runs inside it, and the response body holds it until the body
/// ends, so the span's duration covers a streamed response.
///
/// Unlike `tower_http`'s `TraceLayer`, the body is not polled inside the span: a streamed run
/// polls its body once per event (each SSE frame, each gRPC message), and entering and leaving a
/// span each time cost every layer of the subscriber a lookup. Nothing of a request's work runs
/// in its body's polls but turning events into frames, so nothing traced is lost; a log line
/// written there carries no `trace_id`. The span is entered once more when the body is dropped,
/// so its end is the response's.
#[derive(Debug, Clone, Copy)]
pub struct RequestSpanLayer<F> {
    make_span: F,
}

impl<F> RequestSpanLayer<F> {
    /// Spans made by `make_span` for each request.
    pub fn new(make_span: F) -> Self {
        Self { make_span }
    }
}

impl<S, F: Clone> tower::Layer<S> for RequestSpanLayer<F> {
    type Service = RequestSpanService<S, F>;

    fn layer(&self, inner: S) -> Self::Service {
        RequestSpanService {
            inner,
            make_span: self.make_span.clone(),
        }
    }
}

/// The span of the request being served, in its extensions (when traces are exported): work
/// the request hands to another task continues its trace by running in it.
#[derive(Debug, Clone)]
pub struct RequestSpan(pub Span);

/// The service of [`RequestSpanLayer`].
#[derive(Debug, Clone, Copy)]
pub struct RequestSpanService<S, F> {
    inner: S,
    make_span: F,
}

impl<S, F, ReqBody, ResBody> tower::Service<http::Request<ReqBody>> for RequestSpanService<S, F>
where
    S: tower::Service<http::Request<ReqBody>, Response = http::Response<ResBody>>,
    F: Fn(&http::Request<ReqBody>) -> Span,
{
    type Response = http::Response<SpanBody<ResBody>>;
    type Error = S::Error;
    type Future = SpanFuture<S::Future>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: http::Request<ReqBody>) -> Self::Future {
        let span = (self.make_span)(&req);
        if !span.is_none() {
            // For work the request hands to another task (an MCP tool call runs in rmcp's).
            req.extensions_mut().insert(RequestSpan(span.clone()));
        }
        let inner = span.in_scope(|| self.inner.call(req));
        SpanFuture {
            inner,
            span: Some(SpanEnd(span)),
        }
    }
}

pin_project_lite::pin_project! {
    /// The response future of [`RequestSpanService`]: polled inside the request's span, which
    /// ends when the future is dropped before its response (the client left) or, with the
    /// response, when the response body is.
    pub struct SpanFuture<F> {
        #[pin]
        inner: F,
        span: Option<SpanEnd>,
    }
}

impl<F, B, E> std::future::Future for SpanFuture<F>
where
    F: std::future::Future<Output = Result<http::Response<B>, E>>,
{
    type Output = Result<http::Response<SpanBody<B>>, E>;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let this = self.project();
        let response = {
            let _entered = this.span.as_ref().map(|s| s.0.enter());
            std::task::ready!(this.inner.poll(cx))
        };
        let span = this.span.take().unwrap_or_else(|| SpanEnd(Span::none()));
        // Without a span (no trace export) there is no status to record.
        if let Ok(r) = &response
            && !span.0.is_none()
        {
            record_status(&span.0, Some(r.status()), r.headers());
        }
        std::task::Poll::Ready(response.map(|r| r.map(|body| SpanBody { inner: body, span })))
    }
}

pin_project_lite::pin_project! {
    /// A response body that keeps its request's span open until the body is dropped.
    pub struct SpanBody<B> {
        #[pin]
        inner: B,
        span: SpanEnd,
    }
}

/// Ends a span when dropped. The OpenTelemetry layer takes a span's end time from its last
/// exit, so the span is entered and left once more here: its end is when its holder is done
/// with it (a response body sent, a model's answer read), not when it was last polled.
#[derive(Debug)]
pub struct SpanEnd(pub Span);

impl Drop for SpanEnd {
    fn drop(&mut self) {
        drop(self.0.enter());
    }
}

impl<B: http_body::Body> http_body::Body for SpanBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        let frame = std::task::ready!(this.inner.poll_frame(cx));
        // A streamed gRPC answer's status comes in its trailers.
        if let Some(Ok(frame)) = &frame
            && !this.span.0.is_none()
            && let Some(trailers) = frame.trailers_ref()
        {
            record_status(&this.span.0, None, trailers);
        }
        std::task::Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::{MAX_TRACESTATE, cut_tracestate, splice_json_object};

    #[test]
    fn a_text_log_line_stays_one_line_whatever_its_values_hold() {
        let buffer = Buffer::default();
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .fmt_fields(super::TextFields)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        let remote = "boom\n2026-11-30T05:00:00Z  INFO gateway: FORGED\r\n\u{1b}[2JRED";
        tracing::subscriber::with_default(subscriber, || {
            tracing::warn!(error = %remote, kind = "x\ny", "run failed");
        });
        let text = buffer.text();
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(
            text.contains(r#"run failed error=boom\n2026-11-30T05:00:00Z  INFO gateway: FORGED\r\n\u{1b}[2JRED kind="x\ny""#),
            "{text}"
        );
        assert!(!text.contains('\u{1b}'), "{text}");
    }

    #[test]
    fn a_long_tracestate_is_cut_to_whole_members_the_long_ones_first() {
        let short = "a=1,b=2";
        assert_eq!(cut_tracestate(short), short);
        // 31 members of ~510 characters (16 KiB): none short enough to keep.
        let huge: Vec<String> = (0..31)
            .map(|i| format!("k{i:03}{}={}", "a".repeat(250), "v".repeat(256)))
            .collect();
        assert_eq!(cut_tracestate(&huge.join(",")), "");
        // A long member goes first, then members from the end.
        let mixed: Vec<String> = std::iter::once(format!("long={}", "x".repeat(200)))
            .chain((0..40).map(|i| format!("v{i:02}={}", "y".repeat(10))))
            .collect();
        let cut = cut_tracestate(&mixed.join(", "));
        assert!(cut.len() <= MAX_TRACESTATE, "{}", cut.len());
        assert!(cut.starts_with("v00="), "{cut}");
        let kept = cut.split(',').count();
        assert_eq!(kept, MAX_TRACESTATE / 15, "{cut}");
        assert_eq!(
            cut.split(',').next_back(),
            Some(format!("v{:02}={}", kept - 1, "y".repeat(10)).as_str())
        );
    }

    /// With trace export, the subscriber still tells `log` and `tracing` how verbose it is at
    /// most: a per-layer filter without a level hint makes it "any level", and every `log`
    /// record of a dependency is then built and offered only to be dropped.
    #[test]
    fn filtered_layers_keep_the_level_hint() {
        use opentelemetry::trace::TracerProvider;
        use tracing::Subscriber;
        use tracing_subscriber::{EnvFilter, Layer, filter::LevelFilter, layer::SubscriberExt};

        let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
        for (directives, want) in [
            ("info", LevelFilter::INFO),
            ("warn", LevelFilter::INFO),
            ("debug,h2=trace", LevelFilter::TRACE),
        ] {
            let global = EnvFilter::new(directives);
            let quiet = super::quiet_exports();
            let log = tracing_subscriber::fmt::layer().with_writer(std::io::sink);
            let otel = tracing_opentelemetry::layer()
                .with_tracer(provider.tracer("test"))
                .with_filter(super::traced_filter());
            let subscriber = tracing_subscriber::registry()
                .with(global)
                .with(quiet)
                .with(log)
                .with(otel);
            assert_eq!(subscriber.max_level_hint(), Some(want), "{directives}");
            // No hint of a filter below what it lets through (a debug build asserts that).
            tracing::subscriber::with_default(subscriber, || tracing::info!("dropped or kept"));
        }
        // Without an exporter the hint is the global filter's, `off` included.
        for (directives, want) in [("off", LevelFilter::OFF), ("warn", LevelFilter::WARN)] {
            let subscriber = tracing_subscriber::registry()
                .with(EnvFilter::new(directives))
                .with(super::quiet_exports())
                .with(tracing_subscriber::fmt::layer().with_writer(std::io::sink));
            assert_eq!(subscriber.max_level_hint(), Some(want), "{directives}");
        }
    }

    #[test]
    fn probes_and_scrapes_are_no_traces() {
        for probe in [
            "/readyz",
            "/healthz",
            "/metrics",
            "/grpc.health.v1.Health/Check",
        ] {
            assert!(super::is_probe(probe), "{probe}");
        }
        for call in [
            "/api/v1/agents/{agent_id}",
            "/taskforce.v1.Executor/Execute",
            "/mcp",
        ] {
            assert!(!super::is_probe(call), "{call}");
        }
    }

    #[test]
    fn server_errors_fail_a_request_span_and_client_errors_do_not() {
        let grpc = |code: &'static str| {
            let mut h = http::HeaderMap::new();
            h.insert("grpc-status", http::HeaderValue::from_static(code));
            h
        };
        let none = http::HeaderMap::new();
        let failure = |status: http::StatusCode, headers: &http::HeaderMap| {
            super::server_failure(Some(status), super::grpc_status(headers))
        };
        assert_eq!(
            failure(http::StatusCode::SERVICE_UNAVAILABLE, &none).as_deref(),
            Some("HTTP 503")
        );
        assert_eq!(failure(http::StatusCode::NOT_FOUND, &none), None);
        assert_eq!(
            failure(http::StatusCode::OK, &grpc("14")).as_deref(),
            Some("gRPC status 14")
        );
        for client in ["0", "3", "5", "6", "9", "16"] {
            assert_eq!(
                failure(http::StatusCode::OK, &grpc(client)),
                None,
                "{client}"
            );
        }
    }

    /// An exporter whose exports fail while `failing` is set.
    #[derive(Debug, Default)]
    struct Flaky {
        failing: std::sync::atomic::AtomicBool,
    }

    impl opentelemetry_sdk::trace::SpanExporter for Flaky {
        async fn export(
            &self,
            _batch: Vec<opentelemetry_sdk::trace::SpanData>,
        ) -> opentelemetry_sdk::error::OTelSdkResult {
            if self.failing.load(std::sync::atomic::Ordering::Relaxed) {
                Err(opentelemetry_sdk::error::OTelSdkError::InternalFailure(
                    "tcp connect error".into(),
                ))
            } else {
                Ok(())
            }
        }
    }

    #[tokio::test]
    async fn failing_exports_are_said_once_then_their_end() {
        use opentelemetry_sdk::trace::SpanExporter;
        use tracing_subscriber::layer::SubscriberExt;

        let buffer = Buffer::default();
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::registry().with(
            tracing_subscriber::fmt::layer()
                .json()
                .with_writer(move || writer.clone()),
        );
        let _default = tracing::subscriber::set_default(subscriber);
        let exporter = super::ReportedExporter::new(Flaky::default());
        exporter
            .inner
            .failing
            .store(true, std::sync::atomic::Ordering::Relaxed);
        for _ in 0..3 {
            assert!(exporter.export(Vec::new()).await.is_err());
        }
        exporter
            .inner
            .failing
            .store(false, std::sync::atomic::Ordering::Relaxed);
        assert!(exporter.export(Vec::new()).await.is_ok());
        assert!(exporter.export(Vec::new()).await.is_ok());
        assert_eq!(exporter.failures.get(), 3);
        let text = buffer.text();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines.len(),
            2,
            "one line when failing starts, one when it ends: {text}"
        );
        assert!(
            lines[0].contains("trace export failed") && lines[0].contains("tcp connect error"),
            "{text}"
        );
        assert!(lines[1].contains("trace export works again"), "{text}");
        assert!(super::sdk_export_error(&tracing::Metadata::new(
            "BatchSpanProcessor.ExportError",
            "opentelemetry_sdk",
            tracing::Level::ERROR,
            None,
            None,
            None,
            tracing::field::FieldSet::new(&[], tracing::callsite::Identifier(&CALLSITE)),
            tracing::metadata::Kind::EVENT,
        )));
    }

    struct Callsite;
    static CALLSITE: Callsite = Callsite;
    impl tracing::callsite::Callsite for Callsite {
        fn set_interest(&self, _: tracing::subscriber::Interest) {}
        fn metadata(&self) -> &tracing::Metadata<'_> {
            unreachable!("not registered")
        }
    }

    /// A log sink for tests.
    #[derive(Clone, Default)]
    struct Buffer(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl Buffer {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().expect("buffer").clone()).expect("utf-8")
        }
    }

    impl std::io::Write for Buffer {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .map_err(|_| std::io::ErrorKind::Other)?
                .extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn values_never_to_log_are_masked_in_json_and_text_lines() {
        use tracing_subscriber::layer::SubscriberExt;

        crate::env::never_log(["tok-canary-7f3a9e", r#"pa"ss\wo-rd-canary"#, "short"]);
        let buffer = Buffer::default();
        let (json, text) = (buffer.clone(), buffer.clone());
        let subscriber = tracing_subscriber::registry()
            .with(
                tracing_subscriber::fmt::layer()
                    .json()
                    .with_writer(move || super::Masked(json.clone())),
            )
            .with(
                tracing_subscriber::fmt::layer().with_writer(move || super::Masked(text.clone())),
            );
        tracing::subscriber::with_default(subscriber, || {
            // As a library logs what a server printed.
            tracing::warn!(
                line = r#"{"token":"tok-canary-7f3a9e"} pa"ss\wo-rd-canary"#,
                "short"
            );
        });
        let written = buffer.text();
        assert_eq!(written.lines().count(), 2, "{written}");
        assert!(!written.contains("tok-canary-7f3a9e"), "{written}");
        assert!(!written.contains("wo-rd-canary"), "{written}");
        assert!(written.contains("***"), "{written}");
        // Too short to mask: common words stay readable.
        assert!(written.contains("short"), "{written}");
    }

    #[test]
    fn fields_recorded_later_join_the_stored_object() {
        let cases = [
            ("{}", r#"{"a":1}"#, r#"{"a":1}"#),
            ("", r#"{"a":1}"#, r#"{"a":1}"#),
            (r#"{"a":1}"#, r#"{"b":"x"}"#, r#"{"a":1,"b":"x"}"#),
            (r#"{"a":1}"#, "{}", r#"{"a":1}"#),
            (
                r#"{"a":{"n":"}"}}"#,
                r#"{"b":2}"#,
                r#"{"a":{"n":"}"},"b":2}"#,
            ),
        ];
        for (current, more, want) in cases {
            let mut got = current.to_owned();
            splice_json_object(&mut got, more);
            assert_eq!(got, want, "{current} + {more}");
            let parsed: serde_json::Value = serde_json::from_str(&got).expect("still JSON");
            assert!(parsed.is_object());
        }
    }

    #[test]
    fn a_recorded_field_reaches_the_json_log_line() {
        use tracing_subscriber::layer::SubscriberExt;

        let buffer = Buffer::default();
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::registry().with(
            tracing_subscriber::fmt::layer()
                .json()
                .with_current_span(false)
                .fmt_fields(super::SpanJsonFields)
                .with_writer(move || writer.clone()),
        );
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!(
                "request",
                otel.name = "GET /x",
                trace_id = tracing::field::Empty,
                http.route = "/x",
                http.response.status_code = tracing::field::Empty,
                agent_count = 3_u64,
                found = true
            );
            span.record("trace_id", "4bf92f3577b34da6a3ce929d0e0e4736");
            span.record("http.response.status_code", 200_u16);
            span.in_scope(|| tracing::info!(n = 1, "inside"));
        });
        let text = buffer.text();
        let line: serde_json::Value = serde_json::from_str(text.trim()).expect("one JSON line");
        let request = &line["spans"][0];
        assert_eq!(request["name"], "request", "{line}");
        assert_eq!(request["otel.name"], "GET /x", "{line}");
        assert_eq!(
            request["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736",
            "{line}"
        );
        assert_eq!(line["fields"]["message"], "inside", "{line}");
        // Values keep their JSON types; the trace-only attributes stay out of the logs.
        assert_eq!(request["agent_count"], 3, "{line}");
        assert_eq!(request["found"], true, "{line}");
        assert!(request.get("http.route").is_none(), "{line}");
        assert!(request.get("http.response.status_code").is_none(), "{line}");
    }
}
