//! Leaf steps: run the step's code with its context, and turn its outcome (output,
//! suspension, hand-off, continue) into a `Flow`.

use crate::context::StepContext;
use crate::error::{ErrorCode, StepError};
use crate::ids::{InterruptId, StepPath};
use crate::journal::Record;
use crate::outcome::{Decision, InterruptRequest, OutcomeKind};
use futures_util::FutureExt;
use serde_json::Value;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use super::{Exec, Flow, Frame, OUTCOME_ORDINAL, Res};

impl Exec {
    pub(super) async fn run_leaf(
        &self,
        step: &dyn crate::step::DynStep,
        frame: &Frame<'_>,
        attempt: u32,
        input: Arc<Value>,
        key: Option<String>,
    ) -> Res {
        let Frame { node, path, scope, env } = frame;
        let path: &StepPath = path;
        let ctx = self.context_of(path, attempt, scope, env, key, Some(&node.policy.guardrails));
        // A step that returned `suspended(request)` earlier: its output is the decision.
        if self.run.replay.has_interrupts() {
            let outcome_id = InterruptId::derive(self.run.run_id, path, OUTCOME_ORDINAL);
            if let Some(log) = self.run.replay.interrupt(&outcome_id) {
                let request = log.request.clone();
                return self.outcome_interrupt(&ctx, request).await;
            }
        }
        let work = AssertUnwindSafe(step.run(&ctx, input)).catch_unwind();
        let mut work = std::pin::pin!(work);
        let result = tokio::select! {
            biased;
            result = &mut work => result,
            () = ctx.cancellation().cancelled() => {
                // Cooperative cancellation: the step sees its token fire and gets a grace
                // period to stop on its own; then its future is dropped.
                tokio::select! {
                    _ = &mut work => {}
                    () = self.run.clock.sleep(self.run.config.cancel_grace) => {}
                }
                return Ok(Flow::Failed(StepError::cancelled("the step was cancelled")));
            }
        };
        let (suspends, failure) = ctx.take_pending();
        if suspends {
            return Ok(Flow::Suspended);
        }
        if let Some(error) = failure {
            return Ok(Flow::Failed(error));
        }
        let outcome = match result {
            Err(panic) => {
                let message = panic
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "a non-string panic payload".into());
                return Ok(Flow::Failed(StepError::execution_failed(format!("the step panicked: {message}"))));
            }
            Ok(Err(error)) => return Ok(Flow::Failed(error)),
            Ok(Ok(outcome)) => outcome,
        };
        for event in outcome.events {
            self.run.event(path, &event.kind, event.data);
        }
        Ok(match outcome.kind {
            OutcomeKind::Completed(value) => Flow::Done(Arc::new(value)),
            OutcomeKind::Skipped(reason) => Flow::Skipped(reason),
            OutcomeKind::Handoff { target, payload } => Flow::Handoff(target, Arc::new(payload)),
            OutcomeKind::Continue(state) => {
                self.run.recorder.commit(path, self.now(), Record::Checkpoint { attempt, state }).await?;
                self.run.note_yielded();
                Flow::Suspended
            }
            OutcomeKind::Suspended(request) => return self.outcome_interrupt(&ctx, request).await,
        })
    }

    /// The decision on a `suspended` outcome becomes the step's result: approve → the
    /// request's payload; modify → the corrected payload; respond → the value; reject →
    /// `rejected`.
    pub(super) async fn outcome_interrupt(&self, ctx: &StepContext, request: InterruptRequest) -> Res {
        let payload = request.payload.clone();
        Ok(match self.interrupt_at(ctx, OUTCOME_ORDINAL, request).await? {
            Err(flow) => flow,
            Ok(Decision::Approve) => Flow::Done(Arc::new(payload)),
            Ok(Decision::Modify { payload } | Decision::Respond { value: payload }) => Flow::Done(Arc::new(payload)),
            Ok(Decision::Reject { reason }) => Flow::Failed(StepError::new(
                ErrorCode::REJECTED,
                format!("the request was rejected{}", reason.map(|r| format!(": {r}")).unwrap_or_default()),
            )),
        })
    }
}
