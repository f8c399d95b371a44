//! Operations over a run's history: fork (and, next, replay and recompute).

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;

use crate::engine::{Engine, EngineError};
use crate::hash::ContentHash;
use crate::ids::{RunId, StepPath};
use crate::journal::{JournalBatch, Lineage, Record, RunRecord, RunStatus, StatusUpdate};

/// Edits applied to a fork: a new workflow input, and replacement outputs for steps that
/// completed before the fork point.
#[derive(Debug, Clone, Default)]
pub struct ForkPatch {
    /// Replaces the workflow input.
    pub input: Option<Value>,
    /// Replaces the recorded output of a step (by path) that completed before the fork point.
    pub outputs: HashMap<String, Value>,
}

impl Engine {
    /// Forks `run` at `at`: a new run whose journal is everything the parent recorded before
    /// the step at `at` first started, with `patch` applied, and whose lineage names the
    /// parent and the step. The new run is `pending`: [`Engine::resume`] (or a runner)
    /// continues it from `at`, serving everything before from the copied journal. The parent
    /// is not changed.
    pub async fn fork(&self, run: RunId, at: &StepPath, patch: ForkPatch) -> Result<RunRecord, EngineError> {
        let store = &self.inner.store;
        let parent = store.load(run).await.map_err(EngineError::store(run))?;
        let invalid = |reason: String| EngineError::InvalidRequest { run, reason };
        let cut = parent
            .entries
            .iter()
            .position(|e| e.path.starts_with(at))
            .ok_or_else(|| invalid(format!("the run never reached step `{at}`, so it cannot be forked there")))?;
        let mut entries = parent.entries[..cut].to_vec();
        let mut blobs: HashMap<ContentHash, Arc<Value>> = HashMap::new();
        let mut patched = std::collections::HashSet::new();
        for entry in &mut entries {
            if let Record::Completed { output, .. } = &mut entry.record {
                if let Some(value) = patch.outputs.get(entry.path.as_str()) {
                    *output = ContentHash::of_value(value);
                    blobs.insert(*output, Arc::new(value.clone()));
                    patched.insert(entry.path.as_str().to_owned());
                } else if let Some(value) = parent.blobs.get(output) {
                    blobs.insert(*output, value.clone());
                }
            }
        }
        if let Some(missing) = patch.outputs.keys().find(|p| !patched.contains(*p)) {
            return Err(invalid(format!(
                "step `{missing}` did not complete before `{at}`, so its output cannot be set"
            )));
        }
        let now = self.inner.clock.now();
        let id = RunId::from_parts(now, self.inner.entropy.bytes10());
        let record = RunRecord {
            id,
            input: patch.input.map(Arc::new).unwrap_or_else(|| parent.record.input.clone()),
            // Inert until its journal is in place: suspended with nothing to wake it.
            status: RunStatus::Suspended,
            output: None,
            error: None,
            parent: Some(Lineage { run, at: at.clone() }),
            created_at: now,
            updated_at: now,
            wake_at: None,
            lease: None,
            ..parent.record.clone()
        };
        store.create_run(record.clone()).await.map_err(EngineError::store(id))?;
        let mut batch = JournalBatch { entries, blobs: blobs.into_iter().collect(), events: Vec::new() };
        if let Err(e) = store.append(id, None, &mut batch).await {
            let _ = store.erase_run(id).await;
            return Err(EngineError::store(id)(e));
        }
        let ready =
            StatusUpdate { status: RunStatus::Pending, output: None, error: None, at: now, wake_at: None, fence: None };
        store.set_status(id, ready).await.map_err(EngineError::store(id))?;
        Ok(RunRecord { status: RunStatus::Pending, ..record })
    }
}
