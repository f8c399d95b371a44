//! Helpers shared by the integration tests.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use stepwright_core::{
    Engine, EngineConfig, InMemoryStore, Record, RunId, SeededEntropy, StepPath, Store, Timestamp, TokioClock,
};

/// The fixed wall time tests start at.
pub(crate) const T0: Timestamp = Timestamp::from_millis(1_700_000_000_000);

/// An engine over a memory store with a clock at `T0` (pause tokio's clock for exact timing)
/// and seeded entropy.
pub(crate) fn engine() -> (Engine, Arc<InMemoryStore>) {
    engine_with(EngineConfig::default())
}

pub(crate) fn engine_with(config: EngineConfig) -> (Engine, Arc<InMemoryStore>) {
    let store = Arc::new(InMemoryStore::new());
    let engine = Engine::builder()
        .store(store.clone() as Arc<dyn Store>)
        .clock(Arc::new(TokioClock::starting_at(T0)))
        .entropy(Arc::new(SeededEntropy::new(7)))
        .config(config)
        .build();
    (engine, store)
}

/// Counts calls.
#[derive(Clone, Default)]
pub(crate) struct Counter(Arc<AtomicUsize>);

impl Counter {
    pub(crate) fn hit(&self) -> usize {
        self.0.fetch_add(1, Ordering::SeqCst) + 1
    }

    pub(crate) fn get(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

/// Records strings in order.
#[derive(Clone, Default)]
pub(crate) struct Log(Arc<Mutex<Vec<String>>>);

impl Log {
    pub(crate) fn push(&self, s: impl Into<String>) {
        self.0.lock().unwrap().push(s.into());
    }

    pub(crate) fn take(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

/// The journal records at one path.
pub(crate) fn records_at(store: &InMemoryStore, run: RunId, path: &str) -> Vec<Record> {
    store.entries(run).into_iter().filter(|e| e.path == StepPath::new(path)).map(|e| e.record).collect()
}

/// The `(path, attempt)` of every `Failed` entry with a retry time, and that time.
pub(crate) fn retry_times(store: &InMemoryStore, run: RunId) -> Vec<(String, u32, Timestamp)> {
    store
        .entries(run)
        .into_iter()
        .filter_map(|e| match e.record {
            Record::Failed { attempt, retry_at: Some(at), .. } => Some((e.path.as_str().to_owned(), attempt, at)),
            _ => None,
        })
        .collect()
}
