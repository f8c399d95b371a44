//! Metrics: what the engine, a runner and a server count, recorded through OpenTelemetry
//! instruments and read two ways — exported over OTLP when an endpoint is configured, and
//! rendered as Prometheus text for `serve`'s `/metrics`.
//!
//! Names follow the GenAI metrics conventions where they name the thing
//! (`gen_ai.client.operation.duration`, `gen_ai.client.token.usage`,
//! `gen_ai.client.operation.time_to_first_chunk`, `gen_ai.workflow.duration`) and
//! `stepwright.*` elsewhere. Prometheus sees them with dots as underscores, a unit suffix
//! and `_total` on counters (`stepwright_runs_finished_total`).
//!
//! Every series about runs carries the namespace (tenant) they were started in,
//! `stepwright.namespace` (`stepwright_namespace`; empty for runs started without one), so
//! that a server can show a namespace only its own (see `stepwright-server`'s `/metrics`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Gauge, Histogram, Meter, MeterProvider as _};
use opentelemetry_sdk::metrics::SdkMeterProvider;
use serde_json::Value;
use stepwright_core::{Observer, RunId, RunStatus, RunnerEvent, StepPath, StepStatus};

/// Bucket boundaries for durations in seconds (the conventions' advice for GenAI
/// operations: 10 ms doubling to about 82 s, then longer for human-paced steps).
const SECONDS: [f64; 16] =
    [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92, 300.0, 3600.0];
/// Bucket boundaries for token counts (the conventions' advice: powers of 4).
const TOKENS: [f64; 14] = [
    1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0, 16777216.0,
    67108864.0,
];

/// The instruments.
struct Instruments {
    runs_started: Counter<u64>,
    runs_finished: Counter<u64>,
    activations: Counter<u64>,
    workflow_duration: Histogram<f64>,
    step_duration: Histogram<f64>,
    model_duration: Histogram<f64>,
    model_tokens: Histogram<u64>,
    first_chunk: Histogram<f64>,
    model_cost: Counter<f64>,
    queue_depth: Gauge<u64>,
    claim_latency: Histogram<f64>,
    takeovers: Counter<u64>,
    webhook_deliveries: Counter<u64>,
}

impl Instruments {
    fn new(meter: &Meter) -> Self {
        Self {
            runs_started: meter.u64_counter("stepwright.runs.started").with_description("Runs started.").build(),
            runs_finished: meter
                .u64_counter("stepwright.runs.finished")
                .with_description("Runs that ended (completed, failed, cancelled), by workflow and status.")
                .build(),
            activations: meter
                .u64_counter("stepwright.activations")
                .with_description("Executions of runs (start, resume), by workflow and kind.")
                .build(),
            workflow_duration: meter
                .f64_histogram("gen_ai.workflow.duration")
                .with_unit("s")
                .with_description("How long an activation of a run took (start or resume to stop or suspend).")
                .with_boundaries(SECONDS.to_vec())
                .build(),
            step_duration: meter
                .f64_histogram("stepwright.step.duration")
                .with_unit("s")
                .with_description("How long a step attempt took, by workflow and how it ended.")
                .with_boundaries(SECONDS.to_vec())
                .build(),
            model_duration: meter
                .f64_histogram("gen_ai.client.operation.duration")
                .with_unit("s")
                .with_description("GenAI operation duration.")
                .with_boundaries(SECONDS.to_vec())
                .build(),
            model_tokens: meter
                .u64_histogram("gen_ai.client.token.usage")
                .with_unit("{token}")
                .with_description("Number of input and output tokens used.")
                .with_boundaries(TOKENS.to_vec())
                .build(),
            first_chunk: meter
                .f64_histogram("gen_ai.client.operation.time_to_first_chunk")
                .with_unit("s")
                .with_description("Time to receive the first chunk of a streamed answer.")
                .with_boundaries(SECONDS.to_vec())
                .build(),
            model_cost: meter
                .f64_counter("stepwright.model.cost")
                .with_unit("USD")
                .with_description("What model calls cost, from the prices journaled with each call.")
                .build(),
            queue_depth: meter
                .u64_gauge("stepwright.queue.depth")
                .with_unit("{run}")
                .with_description("Runs waiting for a worker (pending).")
                .build(),
            claim_latency: meter
                .f64_histogram("stepwright.claim.latency")
                .with_unit("s")
                .with_description("How long a new run waited between its creation and a worker's claim.")
                .with_boundaries(SECONDS.to_vec())
                .build(),
            takeovers: meter
                .u64_counter("stepwright.lease.takeovers")
                .with_description(
                    "Runs taken from a worker whose lease lapsed while they executed (it died or stalled).",
                )
                .build(),
            webhook_deliveries: meter
                .u64_counter("stepwright.webhook.deliveries")
                .with_description("Webhook delivery attempts, by outcome.")
                .build(),
        }
    }
}

/// What is recorded and how it is read.
pub struct Metrics {
    provider: SdkMeterProvider,
    registry: Option<prometheus::Registry>,
    instruments: Arc<Instruments>,
    observer: Arc<MetricsObserver>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").field("prometheus", &self.registry.is_some()).finish_non_exhaustive()
    }
}

impl Metrics {
    pub(crate) fn new(provider: SdkMeterProvider, registry: Option<prometheus::Registry>) -> Self {
        let meter = provider.meter("stepwright");
        let instruments = Arc::new(Instruments::new(&meter));
        let observer = Arc::new(MetricsObserver { instruments: instruments.clone(), live: Mutex::default() });
        Self { provider, registry, instruments, observer }
    }

    /// The engine observer that records runs, steps and model calls.
    pub fn observer(&self) -> Arc<dyn Observer> {
        self.observer.clone()
    }

    /// Records what a runner reports (claims, how long new runs waited, takeovers).
    pub fn runner_event(&self, event: &RunnerEvent<'_>) {
        match event {
            RunnerEvent::Executing { waited: Some(waited), .. } => {
                self.instruments.claim_latency.record(waited.as_secs_f64(), &[]);
            }
            RunnerEvent::TookOver { .. } => self.instruments.takeovers.add(1, &[]),
            _ => {}
        }
    }

    /// A webhook delivery attempt of `namespace` ended: `delivered`, `retrying` or `failed`.
    pub fn webhook_delivery(&self, namespace: &str, outcome: &str) {
        let labels = [
            KeyValue::new(NAMESPACE, namespace.to_owned()),
            KeyValue::new("stepwright.webhook.outcome", outcome.to_owned()),
        ];
        self.instruments.webhook_deliveries.add(1, &labels);
    }

    /// Sets the number of `namespace`'s runs waiting for a worker.
    pub fn queue_depth(&self, namespace: &str, runs: u64) {
        self.instruments.queue_depth.record(runs, &[KeyValue::new(NAMESPACE, namespace.to_owned())]);
    }

    /// Everything recorded, in the Prometheus text format (`None` unless installed with
    /// `prometheus`).
    pub fn prometheus_text(&self) -> Option<String> {
        let registry = self.registry.as_ref()?;
        prometheus::TextEncoder::new().encode_to_string(&registry.gather()).ok()
    }

    /// Exports what is recorded now (OTLP), before a process exits.
    pub(crate) fn shutdown(&self) {
        let _ = self.provider.shutdown();
    }
}

/// The engine's observer: durations are measured between the notifications of a start and
/// its end, in this process.
struct MetricsObserver {
    instruments: Arc<Instruments>,
    live: Mutex<Live>,
}

/// The label every run's series carries: the namespace it was started in.
const NAMESPACE: &str = "stepwright.namespace";

/// What is under way: activations (by run) and step attempts (by run and path).
#[derive(Default)]
struct Live {
    activations: HashMap<RunId, Activation>,
    steps: HashMap<(RunId, StepPath), Instant>,
}

/// An activation under way: its workflow and namespace (labels), and when it began.
struct Activation {
    workflow: Arc<str>,
    namespace: Arc<str>,
    started: Instant,
}

impl MetricsObserver {
    /// The workflow and namespace labels of a run under way (empty for one that is not).
    fn labels_of(live: &Live, run: RunId) -> [KeyValue; 2] {
        let (workflow, namespace) = live
            .activations
            .get(&run)
            .map_or_else(|| (String::new(), String::new()), |a| (a.workflow.to_string(), a.namespace.to_string()));
        [KeyValue::new("stepwright.workflow", workflow), KeyValue::new(NAMESPACE, namespace)]
    }
}

impl Observer for MetricsObserver {
    fn activation_started(&self, run: RunId, workflow: &str, tenant: Option<&str>, kind: &str) {
        let (workflow, namespace): (Arc<str>, Arc<str>) = (Arc::from(workflow), Arc::from(tenant.unwrap_or_default()));
        let name = KeyValue::new("stepwright.workflow", workflow.to_string());
        let space = KeyValue::new(NAMESPACE, namespace.to_string());
        let activation = KeyValue::new("stepwright.activation", kind.to_owned());
        self.instruments.activations.add(1, &[name.clone(), space.clone(), activation]);
        if kind == "start" {
            self.instruments.runs_started.add(1, &[name, space]);
        }
        let activation = Activation { workflow, namespace, started: Instant::now() };
        self.live.lock().expect("poisoned").activations.insert(run, activation);
    }

    fn step_started(&self, run: RunId, path: &StepPath, _attempt: u32) {
        self.live.lock().expect("poisoned").steps.insert((run, path.clone()), Instant::now());
    }

    fn step_finished(&self, run: RunId, path: &StepPath, status: StepStatus) {
        let (started, [workflow, namespace]) = {
            let mut live = self.live.lock().expect("poisoned");
            (live.steps.remove(&(run, path.clone())), Self::labels_of(&live, run))
        };
        // A step that never started here (skipped by its condition, served) took no time here.
        if let Some(started) = started {
            let attributes = [workflow, namespace, KeyValue::new("stepwright.step.status", status.as_str())];
            self.instruments.step_duration.record(started.elapsed().as_secs_f64(), &attributes);
        }
    }

    fn event(&self, run: RunId, _path: &StepPath, kind: &str, data: &Value) {
        if kind != "model.call" {
            return;
        }
        let [_, namespace] = Self::labels_of(&self.live.lock().expect("poisoned"), run);
        let attributes = [
            namespace,
            KeyValue::new("gen_ai.operation.name", "chat"),
            KeyValue::new("gen_ai.provider.name", data["provider"].as_str().unwrap_or_default().to_owned()),
            KeyValue::new("gen_ai.request.model", data["request_model"].as_str().unwrap_or_default().to_owned()),
            KeyValue::new("gen_ai.response.model", data["model"].as_str().unwrap_or_default().to_owned()),
        ];
        if let Some(ms) = data["latency_ms"].as_u64() {
            self.instruments.model_duration.record(ms as f64 / 1000.0, &attributes);
        }
        if let Some(ms) = data["time_to_first_chunk_ms"].as_u64() {
            self.instruments.first_chunk.record(ms as f64 / 1000.0, &attributes);
        }
        if data["usage_reported"] != Value::Bool(false) {
            for (kind, field) in [("input", "input_tokens"), ("output", "output_tokens")] {
                if let Some(tokens) = data["usage"][field].as_u64() {
                    let mut typed = attributes.to_vec();
                    typed.push(KeyValue::new("gen_ai.token.type", kind));
                    self.instruments.model_tokens.record(tokens, &typed);
                }
            }
        }
        if let Some(cost) = data["cost_usd"].as_f64() {
            self.instruments.model_cost.add(cost, &attributes);
        }
    }

    fn run_stopped(&self, run: RunId, status: RunStatus) {
        let Some(activation) = self.live.lock().expect("poisoned").activations.remove(&run) else { return };
        let labels = [
            KeyValue::new("stepwright.workflow", activation.workflow.to_string()),
            KeyValue::new(NAMESPACE, activation.namespace.to_string()),
            KeyValue::new("stepwright.run.status", status.as_str()),
        ];
        self.instruments.workflow_duration.record(activation.started.elapsed().as_secs_f64(), &labels);
        if status.is_terminal() {
            self.instruments.runs_finished.add(1, &labels);
        }
    }
}
