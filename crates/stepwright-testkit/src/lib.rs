//! Test support shared by Stepwright's crates (the role `tokio-test` plays for tokio): a test
//! engine over a memory store with injected time ([`engine`]), counters and logs, journal
//! readers, and one fake model provider on loopback ([`http::FakeServer`]) that speaks the
//! providers' wire formats — scripted replies for adapter tests, or an OpenAI-compatible
//! chat model answering as a function of the conversation ([`openai`]).
//!
//! Only ever a dev-dependency; not published.

pub mod http;
pub mod openai;
pub mod otlp;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use stepwright_core::{
    Engine, EngineConfig, InMemoryStore, Record, RunId, SeededEntropy, StepPath, Store, Timestamp, TokioClock,
};

/// The fixed wall time tests start at.
pub const T0: Timestamp = Timestamp::from_millis(1_700_000_000_000);

/// An engine over a memory store with a clock at [`T0`] (pause tokio's clock for exact
/// timing) and seeded entropy.
pub fn engine() -> (Engine, Arc<InMemoryStore>) {
    engine_with(EngineConfig::default())
}

/// [`engine`] with these settings.
pub fn engine_with(config: EngineConfig) -> (Engine, Arc<InMemoryStore>) {
    let store = Arc::new(InMemoryStore::new());
    let engine = Engine::builder()
        .store(store.clone() as Arc<dyn Store>)
        .clock(Arc::new(TokioClock::starting_at(T0)))
        .entropy(Arc::new(SeededEntropy::new(7)))
        .config(config)
        .build();
    (engine, store)
}

/// Counts calls, across clones.
#[derive(Clone, Default)]
pub struct Counter(Arc<AtomicUsize>);

impl Counter {
    /// Counts one call; returns the count so far.
    pub fn hit(&self) -> usize {
        self.0.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// The count so far.
    pub fn get(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

/// Records strings in order, across clones.
#[derive(Clone, Default)]
pub struct Log(Arc<Mutex<Vec<String>>>);

impl Log {
    /// Appends a line.
    pub fn push(&self, line: impl Into<String>) {
        self.0.lock().expect("poisoned").push(line.into());
    }

    /// Every line so far, in order.
    pub fn take(&self) -> Vec<String> {
        self.0.lock().expect("poisoned").clone()
    }
}

/// The journal records at one path.
pub fn records_at(store: &InMemoryStore, run: RunId, path: &str) -> Vec<Record> {
    store.entries(run).into_iter().filter(|e| e.path == StepPath::new(path)).map(|e| e.record).collect()
}

/// The `(path, attempt)` of every `Failed` entry with a retry time, and that time.
pub fn retry_times(store: &InMemoryStore, run: RunId) -> Vec<(String, u32, Timestamp)> {
    store
        .entries(run)
        .into_iter()
        .filter_map(|e| match e.record {
            Record::Failed { attempt, retry_at: Some(at), .. } => Some((e.path.as_str().to_owned(), attempt, at)),
            _ => None,
        })
        .collect()
}

/// The paths a run completed, in journal order (steps and sub-steps).
pub fn completed_paths(store: &InMemoryStore, run: RunId) -> Vec<String> {
    store
        .entries(run)
        .iter()
        .filter(|e| matches!(e.record, Record::Completed { .. }))
        .map(|e| e.path.as_str().to_owned())
        .collect()
}
