//! Where a run stands after an execution returns: the report callers get.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::StepError;
use crate::ids::{InterruptId, RunId, StepPath, Timestamp};
use crate::journal::{LoadedRun, RunStatus};
use crate::outcome::InterruptKind;
use crate::recording::ReplayIndex;

/// An open interrupt, as reported to callers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingInterrupt {
    /// Its stable id.
    pub id: InterruptId,
    /// The step that asked.
    pub step: StepPath,
    /// What is asked: an approval, an input, an event or a timer.
    pub kind: InterruptKind,
    /// What the person deciding is shown.
    pub message: String,
    /// When its `on_timeout` applies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<Timestamp>,
}

/// Where a run stands after an execution returns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunReport {
    /// The run executed.
    pub run_id: RunId,
    /// Where it stands now (`running` only when another process continues it).
    pub status: RunStatus,
    /// Its output, if completed.
    pub output: Option<Value>,
    /// Its error, if failed or cancelled.
    pub error: Option<StepError>,
    /// Open interrupts, if suspended.
    pub pending: Vec<PendingInterrupt>,
    /// When a timer or retry is due, if the run waits for one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake_at: Option<Timestamp>,
}

impl RunReport {
    /// Where a loaded run stands (what [`crate::Engine::report`] answers), without reading it
    /// again.
    pub fn of(loaded: &LoadedRun) -> Self {
        report_from(loaded, None)
    }
}

pub(super) fn report_from(loaded: &LoadedRun, wake_at: Option<Timestamp>) -> RunReport {
    let mut pending = Vec::new();
    if let Ok(index) = ReplayIndex::from_loaded(loaded) {
        let mut open: Vec<_> = index.interrupts.iter().filter(|(_, log)| log.resolution.is_none()).collect();
        open.sort_by(|a, b| a.1.path.cmp(&b.1.path).then(a.0.cmp(b.0)));
        for (id, log) in open {
            pending.push(PendingInterrupt {
                id: id.clone(),
                step: log.path.clone(),
                kind: log.request.kind,
                message: log.request.message.clone(),
                deadline: log.deadline,
            });
        }
    }
    let wake_at = wake_at.or_else(|| pending.iter().filter_map(|p| p.deadline).min());
    RunReport {
        run_id: loaded.record.id,
        status: loaded.record.status,
        output: loaded.record.output.clone(),
        error: loaded.record.error.clone(),
        // A running run may be waiting on an interrupt in process: it is open all the same.
        pending: if matches!(loaded.record.status, RunStatus::Suspended | RunStatus::Running) {
            pending
        } else {
            Vec::new()
        },
        wake_at,
    }
}
