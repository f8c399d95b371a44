//! Operations over a run's history: fork (and, next, replay and recompute).

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;

use crate::definition::Workflow;
use crate::engine::run::ReplayIndex;
use crate::engine::{Engine, EngineError, EngineInner, Mailboxes};
use crate::hash::ContentHash;
use crate::ids::{RunId, StepPath};
use crate::journal::{
    JournalBatch, Lease, Lineage, LoadedRun, MemoryStore, Record, RunRecord, RunStatus, StatusUpdate, Store,
};

/// Edits applied to a fork: a new workflow input, and replacement outputs for steps that
/// completed before the fork point.
#[derive(Debug, Clone, Default)]
pub struct ForkPatch {
    /// Replaces the workflow input.
    pub input: Option<Value>,
    /// Replaces the recorded output of a step (by path) that completed before the fork point.
    pub outputs: HashMap<String, Value>,
}

/// How one step compares in a replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepReplay {
    /// Re-executed; the same output as recorded.
    Identical,
    /// Re-executed; a different output.
    Different,
    /// A `write`/`external` step: its recorded output was served, not re-executed.
    Served,
    /// Recorded in the original, not reached by the replay.
    Missing,
    /// Reached by the replay, not recorded in the original.
    Added,
}

/// One step's comparison.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StepComparison {
    /// The step.
    pub path: StepPath,
    /// How it compares.
    pub outcome: StepReplay,
    /// The recorded output's hash.
    pub recorded: Option<ContentHash>,
    /// The replayed output's hash.
    pub replayed: Option<ContentHash>,
}

/// What a replay found.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ReplayReport {
    /// The run replayed.
    pub run: RunId,
    /// Every step, in path order.
    pub steps: Vec<StepComparison>,
    /// The original run's output.
    pub recorded_output: Option<Value>,
    /// The replay's output.
    pub replayed_output: Option<Value>,
    /// Whether every step and the output are identical (served steps count as identical).
    pub identical: bool,
}

impl Engine {
    /// Replays a run with the given (current) definition and code, in a private in-memory
    /// sandbox: `write`/`external` steps, journaled values and human decisions are served
    /// from the original journal; everything else (pure and read steps, branch, map, loop
    /// and graph decisions) runs again. Reports, per step, whether outputs are identical.
    /// Nothing is written to this engine's store.
    pub async fn replay(&self, workflow: &Workflow, run: RunId) -> Result<ReplayReport, EngineError> {
        let original = self.inner.store.load(run).await.map_err(EngineError::store(run))?;
        let index = ReplayIndex::from_loaded(&original).map_err(EngineError::store(run))?;
        let recorded: HashMap<StepPath, ContentHash> = index.completions().map(|(p, h)| (p.clone(), h)).collect();
        let sandbox_store = Arc::new(MemoryStore::new());
        let inner = &self.inner;
        let sandbox = Engine {
            inner: Arc::new(EngineInner {
                worker_id: format!("{}-replay", inner.worker_id),
                store: sandbox_store.clone() as Arc<dyn Store>,
                clock: inner.clock.clone(),
                entropy: inner.entropy.clone(),
                config: inner.config.clone(),
                services: inner.services.clone(),
                observer: None,
                cache: Arc::new(crate::engine::MemoryCache::default()),
                mailboxes: Arc::new(Mailboxes::default()),
                live: std::sync::Mutex::new(HashMap::new()),
            }),
        };
        let now = inner.clock.now();
        let lease = Lease {
            run,
            owner: sandbox.inner.worker_id.clone(),
            token: 1,
            expires_at: now.plus(inner.config.lease_for),
        };
        let record = RunRecord {
            status: RunStatus::Running,
            output: None,
            error: None,
            lease: Some(lease.clone()),
            ..original.record.clone()
        };
        sandbox_store.create_run(record.clone()).await.map_err(EngineError::store(run))?;
        let loaded = LoadedRun { record, entries: Vec::new(), blobs: HashMap::new() };
        let report = sandbox.execute_indexed(workflow, loaded, lease, index.for_replay()).await?;
        let replayed_journal = sandbox_store.entries(run);
        let mut replayed: HashMap<StepPath, ContentHash> = HashMap::new();
        for entry in &replayed_journal {
            if let Record::Completed { output, .. } = &entry.record {
                replayed.insert(entry.path.clone(), *output);
            }
        }
        let fenced: std::collections::HashSet<StepPath> = original
            .entries
            .iter()
            .filter(|e| matches!(e.record, Record::Intent { .. }))
            .map(|e| e.path.clone())
            .collect();
        let mut paths: Vec<&StepPath> = recorded.keys().chain(replayed.keys()).collect();
        paths.sort();
        paths.dedup();
        let steps: Vec<StepComparison> = paths
            .into_iter()
            .map(|path| {
                let (before, after) = (recorded.get(path).copied(), replayed.get(path).copied());
                let outcome = match (before, after) {
                    (Some(_), Some(_)) if fenced.contains(path) => StepReplay::Served,
                    (Some(a), Some(b)) if a == b => StepReplay::Identical,
                    (Some(_), Some(_)) => StepReplay::Different,
                    (Some(_), None) => StepReplay::Missing,
                    (None, _) => StepReplay::Added,
                };
                StepComparison { path: path.clone(), outcome, recorded: before, replayed: after }
            })
            .collect();
        let identical = original.record.output == report.output
            && steps.iter().all(|s| matches!(s.outcome, StepReplay::Identical | StepReplay::Served));
        Ok(ReplayReport {
            run,
            steps,
            recorded_output: original.record.output,
            replayed_output: report.output,
            identical,
        })
    }

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
