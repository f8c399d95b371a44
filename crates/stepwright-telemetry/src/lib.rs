//! Stepwright's telemetry: what a process installs so that its runs can be seen.
//!
//! - **Logs**: `tracing` events of the engine, the stores and the server, on stderr as text
//!   or as JSON lines (`--log-format json`), filtered by `STEPWRIGHT_LOG` (the `RUST_LOG`
//!   syntax; default `warn`). Every event inside a run carries the run id and the step path
//!   of the spans it is in.
//! - **Traces**: the spans the engine opens (`invoke_workflow`, `step`, and the model layer's
//!   `invoke_agent`, `chat`, `execute_tool`), exported over OTLP/HTTP as the standard
//!   `OTEL_*` variables say (see [`Settings`]).
//!
//! With no exporter configured nothing but the log layer is installed: the engine's spans
//! are disabled at their call sites and cost a branch.
//!
//! Architecture invariant: this crate is the only one that knows OpenTelemetry. The engine
//! and the model layer speak `tracing` with the field names of [`genai`]; the engine's
//! [`stepwright_core::trace::TraceContexts`] seam is implemented here.

pub mod genai;
mod metrics;

pub use metrics::Metrics;

use std::collections::HashMap;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use stepwright_core::trace::{TraceContexts, TraceLink, TraceParent};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// How log lines are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// For a person at a terminal.
    #[default]
    Text,
    /// One JSON object per line, with the fields of the span the event is in (run id, step
    /// path, attempt).
    Json,
}

/// What a process asks for.
#[derive(Debug, Clone, Copy, Default)]
pub struct Settings {
    /// How log lines are written.
    pub log_format: LogFormat,
    /// Export traces: `Some(true)` (`--otel on`) or `Some(false)` (`--otel off`); `None`
    /// exports when an OTLP endpoint is configured (`OTEL_EXPORTER_OTLP_ENDPOINT` or
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) and `OTEL_SDK_DISABLED` is not `true`.
    /// Metrics are exported along with traces (unless `OTEL_METRICS_EXPORTER=none`).
    pub otel: Option<bool>,
    /// Keep the metrics for a Prometheus scrape (`serve`'s `/metrics`).
    pub prometheus: bool,
}

/// A configuration the `OTEL_*` variables or the flags got wrong.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// A variable holds a value this build does not support.
    #[error("{variable}={value:?}: {why}")]
    Unsupported {
        /// The variable.
        variable: &'static str,
        /// Its value.
        value: String,
        /// What is supported instead.
        why: &'static str,
    },
    /// The log filter does not parse.
    #[error("STEPWRIGHT_LOG: {0}")]
    LogFilter(String),
    /// The exporter could not be built.
    #[error("the OTLP exporter: {0}")]
    Exporter(String),
}

/// What [`install`] set up; dropping it exports the spans still buffered.
#[must_use = "dropping it flushes and stops the exporter"]
pub struct Telemetry {
    tracer_provider: Option<SdkTracerProvider>,
}

static METRICS: std::sync::OnceLock<Metrics> = std::sync::OnceLock::new();

/// The process's metrics, if [`install`] set any up (an OTLP endpoint, or `prometheus`).
pub fn metrics() -> Option<&'static Metrics> {
    METRICS.get()
}

impl Telemetry {
    /// Whether traces are exported.
    pub fn exports_traces(&self) -> bool {
        self.tracer_provider.is_some()
    }

    /// Exports what is buffered now (a process about to exit or to be killed in a test).
    pub fn flush(&self) {
        if let Some(provider) = &self.tracer_provider {
            let _ = provider.force_flush();
        }
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Some(provider) = self.tracer_provider.take() {
            // Spans still buffered are exported before the process goes.
            let _ = provider.shutdown();
        }
        if let Some(metrics) = metrics() {
            metrics.shutdown();
        }
    }
}

/// Content on spans for the whole process, as the GenAI instrumentations' variable says
/// (`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`; off otherwise). A workflow's
/// `telemetry.capture_content` wins over it.
pub fn content_capture() -> Option<stepwright_core::ContentCapture> {
    variable("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT")
        .is_some_and(|v| v.eq_ignore_ascii_case("true"))
        .then(stepwright_core::ContentCapture::default)
}

/// The variables that name an OTLP endpoint for traces.
const ENDPOINT_VARIABLES: [&str; 2] = ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"];

fn variable(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// Whether traces are exported, from the flag and the standard variables.
fn exporting(settings: &Settings) -> Result<bool, TelemetryError> {
    if variable("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
        return Ok(false);
    }
    match variable("OTEL_TRACES_EXPORTER").as_deref() {
        None | Some("otlp") => {}
        Some("none") => return Ok(false),
        Some(other) => {
            return Err(TelemetryError::Unsupported {
                variable: "OTEL_TRACES_EXPORTER",
                value: other.to_owned(),
                why: "this build exports traces over OTLP only: use otlp or none",
            });
        }
    }
    Ok(settings.otel.unwrap_or_else(|| ENDPOINT_VARIABLES.iter().any(|v| variable(v).is_some())))
}

/// The OTLP protocol the variables ask for, for one signal (`http/protobuf` by default, as
/// the specification recommends).
fn protocol(signal: &'static str) -> Result<Protocol, TelemetryError> {
    let (name, value) = [signal, "OTEL_EXPORTER_OTLP_PROTOCOL"]
        .into_iter()
        .find_map(|name| variable(name).map(|value| (name, value)))
        .unwrap_or(("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf".to_owned()));
    match value.as_str() {
        "http/protobuf" => Ok(Protocol::HttpBinary),
        "http/json" => Ok(Protocol::HttpJson),
        _ => Err(TelemetryError::Unsupported {
            variable: if name == signal { signal } else { "OTEL_EXPORTER_OTLP_PROTOCOL" },
            value,
            why: "this build speaks OTLP over HTTP: use http/protobuf (the default) or http/json; a collector takes both on port 4318",
        }),
    }
}

/// Whether metrics go out over OTLP as well as traces.
fn exporting_metrics() -> Result<bool, TelemetryError> {
    match variable("OTEL_METRICS_EXPORTER").as_deref() {
        None | Some("otlp") => Ok(true),
        Some("none") => Ok(false),
        Some(other) => Err(TelemetryError::Unsupported {
            variable: "OTEL_METRICS_EXPORTER",
            value: other.to_owned(),
            why: "this build exports metrics over OTLP (and as Prometheus text on serve's /metrics): use otlp or none",
        }),
    }
}

/// The metrics, read by an OTLP exporter and a Prometheus registry as asked.
fn install_metrics(otlp: bool, prometheus: bool) -> Result<(), TelemetryError> {
    if !otlp && !prometheus {
        return Ok(());
    }
    let mut builder = opentelemetry_sdk::metrics::SdkMeterProvider::builder().with_resource(resource());
    if otlp {
        let exporter = opentelemetry_otlp::MetricExporter::builder()
            .with_http()
            .with_protocol(protocol("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL")?)
            .build()
            .map_err(|e| TelemetryError::Exporter(e.to_string()))?;
        // Every OTEL_METRIC_EXPORT_INTERVAL (60 s by default), and once more at shutdown.
        builder = builder.with_reader(opentelemetry_sdk::metrics::PeriodicReader::builder(exporter).build());
    }
    let registry = if prometheus {
        let registry = ::prometheus::Registry::new();
        let reader = opentelemetry_prometheus::exporter()
            .with_registry(registry.clone())
            .build()
            .map_err(|e| TelemetryError::Exporter(e.to_string()))?;
        builder = builder.with_reader(reader);
        Some(registry)
    } else {
        None
    };
    let _ = METRICS.set(Metrics::new(builder.build(), registry));
    Ok(())
}

/// The resource: `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES`, with `stepwright` as
/// the service name when neither names one.
fn resource() -> Resource {
    let named = variable("OTEL_SERVICE_NAME").is_some()
        || variable("OTEL_RESOURCE_ATTRIBUTES")
            .is_some_and(|a| a.split(',').any(|kv| kv.trim().starts_with("service.name=")));
    let builder = Resource::builder();
    let builder = if named { builder } else { builder.with_service_name("stepwright") };
    builder.with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION"))).build()
}

/// Installs the process's logs and, when configured, its trace and metric exporters (and the
/// Prometheus registry of `/metrics`). Call once, early, before the Tokio runtime starts:
/// the OTLP exporters' blocking HTTP clients run on threads of their own.
pub fn install(settings: Settings) -> Result<Telemetry, TelemetryError> {
    let filter = match variable("STEPWRIGHT_LOG") {
        Some(directives) => EnvFilter::try_new(&directives).map_err(|e| TelemetryError::LogFilter(e.to_string()))?,
        None => EnvFilter::new("warn"),
    };
    let logs = match settings.log_format {
        // Colours for a person at a terminal only: a file or a pipe gets plain text (and
        // NO_COLOR turns them off everywhere, https://no-color.org).
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_target(false)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()) && std::env::var_os("NO_COLOR").is_none())
            .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .with_writer(std::io::stderr)
            // Every span the event is in, outermost first: the activation's (run id, trace
            // id), the step's (path, attempt), the model call's.
            .with_current_span(false)
            .with_span_list(true)
            .flatten_event(true)
            .boxed(),
    }
    .with_filter(filter);
    let exporting = exporting(&settings)?;
    if exporting {
        // The build has no default TLS provider (see the workspace's rustls): ring, as the
        // model clients use, whoever installs it first.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
    install_metrics(exporting && exporting_metrics()?, settings.prometheus)?;
    let tracer_provider = if exporting {
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(protocol("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")?)
            .build()
            .map_err(|e| TelemetryError::Exporter(e.to_string()))?;
        Some(SdkTracerProvider::builder().with_batch_exporter(exporter).with_resource(resource()).build())
    } else {
        None
    };
    let traces = tracer_provider.as_ref().map(|provider| {
        tracing_opentelemetry::layer()
            .with_tracer(provider.tracer("stepwright"))
            .with_tracked_inactivity(false)
            // The conventions' attributes only: no `target`, thread or source location.
            .with_target(false)
            .with_threads(false)
            .with_location(false)
            .with_filter(tracing_subscriber::filter::filter_fn(|meta| {
                // Our spans, not the HTTP or SQL libraries' internals.
                meta.is_span() && meta.target().starts_with("stepwright") && *meta.level() <= tracing::Level::INFO
            }))
    });
    // A second install (tests, an embedding host) keeps the first.
    let _ = tracing_subscriber::registry().with(logs).with(traces).try_init();
    if tracer_provider.is_some() {
        stepwright_core::trace::install(Box::new(OtelContexts));
    }
    Ok(Telemetry { tracer_provider })
}

/// The engine's trace-context seam, over `tracing-opentelemetry`.
struct OtelContexts;

fn context_of(traceparent: &TraceParent) -> Context {
    let carrier: HashMap<String, String> = HashMap::from([("traceparent".to_owned(), traceparent.as_str().to_owned())]);
    TraceContextPropagator::new().extract(&carrier)
}

impl TraceContexts for OtelContexts {
    fn set_parent(&self, span: &tracing::Span, parent: &TraceParent) {
        let _ = span.set_parent(context_of(parent));
    }

    fn add_link(&self, span: &tracing::Span, to: &TraceParent, link: TraceLink) {
        let cx = context_of(to);
        let linked = cx.span().span_context().clone();
        span.add_link_with_attributes(linked, vec![KeyValue::new(genai::STEPWRIGHT_LINK, link.as_str())]);
    }

    fn set_strings(&self, span: &tracing::Span, key: &'static str, values: Vec<String>) {
        let values: Vec<opentelemetry::StringValue> = values.into_iter().map(Into::into).collect();
        span.set_attribute(key, opentelemetry::Value::Array(values.into()));
    }

    fn traceparent(&self, span: &tracing::Span) -> Option<TraceParent> {
        let cx = span.context();
        if !cx.span().span_context().is_valid() {
            return None;
        }
        let mut carrier: HashMap<String, String> = HashMap::new();
        TraceContextPropagator::new().inject_context(&cx, &mut carrier);
        carrier.get("traceparent")?.parse().ok()
    }
}
