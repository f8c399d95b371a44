//! The `worker` tool: a tool whose calls run in a step worker — a Python or TypeScript (or
//! any) process that claims tasks over the HTTP API — instead of in the engine. A call is a
//! task journaled with the step and stored with it; the run holds for a moment, then
//! suspends until a worker answers. Retries, timeouts and the effect fence stay in the
//! engine: a worker that dies mid-task lapses its lease, and the step is tried again (a
//! `pure`/`read` tool, or one safe to retry) or ends `outcome_unknown`.

use std::time::Duration;

use futures_util::future::BoxFuture;
use serde_json::Value;
use stepwright_core::{StepError, TaskRequest};

use crate::tools::{Tool, ToolContext, ToolDef, WorkerTarget};

/// How long a claim lasts when the tool sets neither a heartbeat timeout nor a timeout.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(300);

/// A tool whose calls run in a step worker.
pub struct WorkerTool {
    def: ToolDef,
    target: WorkerTarget,
    /// The tool's own `timeout`: a claim's length when there is no heartbeat timeout. It
    /// is not applied around the call in process (the run suspends while the task runs).
    timeout: Option<Duration>,
}

impl WorkerTool {
    /// A worker tool: `def` says what it is (its `timeout` bounds each claim), `target`
    /// where its calls go.
    pub fn new(mut def: ToolDef, target: WorkerTarget) -> Self {
        let timeout = def.timeout.take();
        Self { def, target, timeout }
    }

    /// Where its calls go.
    pub fn target(&self) -> &WorkerTarget {
        &self.target
    }

    /// How long one claim lasts without a heartbeat.
    pub fn lease_for(&self) -> Duration {
        self.target.heartbeat_timeout.or(self.timeout).unwrap_or(DEFAULT_LEASE)
    }
}

impl Tool for WorkerTool {
    fn def(&self) -> &ToolDef {
        &self.def
    }

    fn invoke(&self, cx: ToolContext, args: Value) -> BoxFuture<'_, Result<Value, StepError>> {
        Box::pin(async move {
            let request = TaskRequest {
                queue: self.target.queue.clone(),
                handler: self.target.handler.clone(),
                input: args,
                lease_for: self.lease_for(),
                schedule_to_start: self.target.schedule_to_start,
                concurrency: self.target.concurrency,
                retry_is_safe: self.def.retry_is_safe(),
                idempotency_key: cx.idempotency_key.clone(),
                at: cx.call_path.clone(),
                push: None,
            };
            cx.step.dispatch(request).await
        })
    }

    fn worker_target(&self) -> Option<&WorkerTarget> {
        Some(&self.target)
    }
}
