//! A new input tried on a definition and on a change of it, both in sandboxes: what an
//! experiment does with a case no run has had yet. Effects are never performed: a `write`
//! or unsafe `external` step is served the answer a past run recorded for the same step and
//! input ([`RecordedEffects`]), or not executed (`not_executed`, with the input it would
//! have been given); pure and read steps and model calls run.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;

use crate::definition::Workflow;
use crate::engine::{Engine, EngineError, RecomputeOptions, RecomputeReport, StartOptions};
use crate::journal::{EventRecord, LoadedRun};
use crate::recording::{RecordedEffects, ReplayIndex, ReplayMode};
use crate::store::Store;

/// What [`Engine::try_fresh`] found.
#[derive(Debug)]
pub struct FreshTrial {
    /// The run of the definition as it is, in its sandbox: its header (how it ended, its
    /// output) and journal. It is not in the engine's store.
    pub baseline: LoadedRun,
    /// The events that run emitted (its model calls' usage and cost among them).
    pub baseline_events: Vec<EventRecord>,
    /// The change recomputed over that run, step by step: as [`Engine::recompute`] reports.
    pub report: RecomputeReport,
}

impl Engine {
    /// Runs `baseline` on `input` as a new run in a sandbox, then recomputes it with
    /// `candidate` in another (as `recompute` says, but for `persist`: the run is in no
    /// store, and is not kept), and reports what changed. Nothing is written to this engine's
    /// store; no effect is performed (see the module's doc).
    ///
    /// # Errors
    /// The input does not meet the baseline's schema; the sandbox fails.
    pub async fn try_fresh(
        &self,
        baseline: &Workflow,
        candidate: &Workflow,
        input: Value,
        options: StartOptions,
        recompute: RecomputeOptions,
        recorded: Arc<RecordedEffects>,
    ) -> Result<FreshTrial, EngineError> {
        let record = self.new_record(baseline, input, StartOptions { concurrency: None, ..options }, true)?;
        let run = record.id;
        let blank = LoadedRun { record, entries: Vec::new(), blobs: HashMap::new() };
        // A recompute of nothing: everything runs anew but the effects it refuses, for which
        // it is served what past runs recorded.
        let index = ReplayIndex::default()
            .with_mode(ReplayMode::Recompute(std::collections::HashSet::new()))
            .with_recorded(Some(recorded.clone()));
        let (_, sandbox) = self.in_sandbox(baseline, &blank, index, "experiment").await?;
        let journal = sandbox.load(run).await.map_err(EngineError::store(run))?;
        let baseline_events = sandbox.events(run).await.map_err(EngineError::store(run))?;
        let recompute = RecomputeOptions { persist: false, ..recompute };
        let report = self.recompute_over(candidate, journal.clone(), recompute, Some(recorded)).await?;
        Ok(FreshTrial { baseline: journal, baseline_events, report })
    }
}
