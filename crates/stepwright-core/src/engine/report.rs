//! Where a run stands after an execution returns: the report callers get.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::StepError;
use crate::ids::{InterruptId, RunId, StepPath, Timestamp};
use crate::journal::{Choice, LoadedRun, Record, RunStatus};
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

/// An event a run waits for (a `wait` step), as reported to callers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AwaitedEvent {
    /// The waiting step.
    pub step: StepPath,
    /// The event: the inbox its message is sent to (`Engine::send`).
    pub event: String,
    /// When the wait fails if no message comes.
    pub until: Timestamp,
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
    /// Events its `wait` steps wait for, if suspended.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub awaiting: Vec<AwaitedEvent>,
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
    let mut awaiting = Vec::new();
    if let Ok(index) = ReplayIndex::from_loaded(loaded) {
        // A wait that took its message, or ended otherwise (timed out and skipped), waits
        // no more.
        let ended: std::collections::HashSet<&StepPath> = loaded
            .entries
            .iter()
            .filter(|e| matches!(e.record, Record::Completed { .. } | Record::Failed { .. } | Record::Skipped { .. }))
            .map(|e| &e.path)
            .collect();
        for (path, choice) in index.choices() {
            if let Choice::Due { at, event: Some(event), .. } = choice {
                let step = StepPath::new(path.owning_step());
                if index.choice(&step.join("@message")).is_none() && !ended.contains(&step) {
                    awaiting.push(AwaitedEvent { step, event: event.clone(), until: *at });
                }
            }
        }
        awaiting.sort_by(|a, b| a.step.cmp(&b.step));
        let mut open = loaded.open_interrupts();
        open.sort_by(|a, b| a.step.cmp(b.step).then(a.id.cmp(b.id)));
        for interrupt in open {
            pending.push(PendingInterrupt {
                id: interrupt.id.clone(),
                step: interrupt.step.clone(),
                kind: interrupt.request.kind,
                message: interrupt.request.message.clone(),
                deadline: interrupt.deadline,
            });
        }
    }
    let wake_at = wake_at.or_else(|| pending.iter().filter_map(|p| p.deadline).min());
    // A running run may be waiting on an interrupt or an event in process: open all the same.
    let waiting = matches!(loaded.record.status, RunStatus::Suspended | RunStatus::Running);
    RunReport {
        run_id: loaded.record.id,
        status: loaded.record.status,
        output: loaded.record.output.clone(),
        error: loaded.record.error.clone(),
        pending: if waiting { pending } else { Vec::new() },
        awaiting: if waiting { awaiting } else { Vec::new() },
        wake_at,
    }
}
