//! What a `worker:` tool hands to a step worker: the task's id and spec, as the journal's
//! `dispatched` entry carries them (the table of tasks is the store's: `store::task`).

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::ErrorCode;
use crate::hash::ContentHash;
use crate::ids::{RunId, StepPath};

/// Nobody claimed a task before its `schedule_to_start` passed.
pub const NO_WORKER: ErrorCode = ErrorCode::from_static("no_worker");

/// The stable id of a task: derived from the run, the step path and the attempt, so the
/// same attempt, executed again after a suspension or a crash, finds its task.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TaskId(String);

impl TaskId {
    /// The task of `attempt` of the step at `path` in `run`.
    pub fn derive(run: RunId, path: &StepPath, attempt: u32) -> Self {
        let hash = ContentHash::of_parts(&[run.as_uuid().as_bytes(), path.as_str().as_bytes(), &attempt.to_le_bytes()]);
        Self(format!("tsk_{}", &hash.to_hex()[..24]))
    }

    /// The task of `attempt` of the step at `path` in a recompute of `run`: unlike the run's
    /// own, new for every recompute (`nonce`), so a recompute never finds the run's answer.
    pub fn for_recompute(run: RunId, path: &StepPath, attempt: u32, nonce: u64) -> Self {
        let hash = ContentHash::of_parts(&[
            run.as_uuid().as_bytes(),
            path.as_str().as_bytes(),
            &attempt.to_le_bytes(),
            &nonce.to_le_bytes(),
        ]);
        Self(format!("tsk_{}", &hash.to_hex()[..24]))
    }

    /// An id from its textual form.
    pub fn new(text: &str) -> Self {
        Self(text.to_owned())
    }

    /// The textual form.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for TaskId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a step hands to a worker, as journaled in its `dispatched` entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskSpec {
    /// The task's id.
    pub id: TaskId,
    /// The queue workers claim it from.
    pub queue: String,
    /// The handler that runs it: a name, or `name@version` (only a worker offering that
    /// version gets it).
    pub handler: String,
    /// The handler's input.
    pub input: Value,
    /// The effect fence's key for a fenced step (stable across attempts and workers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    /// How long one claim lasts without a heartbeat, in milliseconds.
    pub lease_ms: u64,
    /// How long the task may wait to be claimed, in milliseconds (then `no_worker`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule_to_start_ms: Option<u64>,
    /// At most this many tasks of the same tool run at once, across all workers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<u32>,
    /// The last heartbeat details of the attempt before (a checkpoint to resume from).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
    /// A recompute's task: its answer goes to the recompute that waits for it, never to the
    /// run's journal (see `TaskStore::dispatch_for_recompute`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub recompute: bool,
    /// Handed over at dispatch rather than claimed: the task is born leased (token 1) to
    /// this holder — the endpoint an `http` tool in push mode sent it to, or the worker whose
    /// claim was parked waiting for it in the same process — which answers it through the task
    /// endpoints like any worker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leased_to: Option<String>,
}

impl TaskSpec {
    /// The lease's length.
    pub fn lease_for(&self) -> Duration {
        Duration::from_millis(self.lease_ms.max(1))
    }
}
