//! The step cache: outputs of pure steps marked `cache`, kept by a key made of the
//! workflow, the step, the step's identity, the tenant and the input's hash. An engine over
//! a store that keeps it (SQLite, Postgres) serves a second run in any process from it; the
//! in-memory cache serves only the engine that filled it.
//!
//! A cache is an optimisation: a read that fails is a miss and a write that fails is
//! dropped (the engine reports both as events), never a failed step.

use std::collections::HashMap;
use std::sync::Mutex;

use futures_util::future::BoxFuture;
use serde_json::Value;

use super::StoreError;
use super::quota::wall_now;
use crate::hash::ContentHash;
use crate::ids::Timestamp;

/// Memoized outputs of pure steps, by cache key.
pub trait StepCache: Send + Sync + 'static {
    /// The output kept under `key`, if any.
    fn cached<'a>(&'a self, key: &'a ContentHash) -> BoxFuture<'a, Result<Option<Value>, StoreError>>;

    /// Keeps `output` under `key` (a key kept already keeps its first output: a pure step
    /// gives the same output for the same input).
    fn keep<'a>(&'a self, key: &'a ContentHash, output: &'a Value) -> BoxFuture<'a, Result<(), StoreError>>;

    /// Forgets the outputs kept before `before` (retention: `runs prune` applies its age to
    /// the cache too); how many.
    fn forget_before(&self, before: Timestamp) -> BoxFuture<'_, Result<u64, StoreError>>;
}

/// A step cache in this process's memory (the default of an engine built without one).
#[derive(Debug, Default)]
pub struct InMemoryStepCache {
    /// By key: the output and when it was kept.
    entries: Mutex<HashMap<ContentHash, (Value, Timestamp)>>,
}

impl StepCache for InMemoryStepCache {
    fn cached<'a>(&'a self, key: &'a ContentHash) -> BoxFuture<'a, Result<Option<Value>, StoreError>> {
        let found = self.entries.lock().expect("poisoned").get(key).map(|(output, _)| output.clone());
        Box::pin(async move { Ok(found) })
    }

    fn keep<'a>(&'a self, key: &'a ContentHash, output: &'a Value) -> BoxFuture<'a, Result<(), StoreError>> {
        self.entries.lock().expect("poisoned").entry(*key).or_insert_with(|| (output.clone(), wall_now()));
        Box::pin(async { Ok(()) })
    }

    fn forget_before(&self, before: Timestamp) -> BoxFuture<'_, Result<u64, StoreError>> {
        let mut entries = self.entries.lock().expect("poisoned");
        let had = entries.len();
        entries.retain(|_, (_, kept)| *kept >= before);
        let forgotten = (had - entries.len()) as u64;
        Box::pin(async move { Ok(forgotten) })
    }
}
