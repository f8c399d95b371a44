//! `loop`: runs its body until a verdict says done, optionally one inbox message per
//! iteration.

use crate::definition::{LoopOnError, LoopSpec, OnMaxIterations, Verdict};
use crate::error::{ErrorCode, StepError};
use crate::ids::StepPath;
use crate::journal::{Choice, Record};
use crate::scope::Scope;
use serde_json::{Value, json};
use std::sync::Arc;

use crate::recording::StoreFailed;

use super::{Env, Exec, Flow, Res, null};

impl Exec {
    pub(super) async fn run_loop(
        &self,
        spec: &LoopSpec,
        path: &StepPath,
        input: Arc<Value>,
        scope: &Scope,
        env: &Env,
    ) -> Res {
        let mut input = input;
        let mut last = input.clone();
        let mut iteration: u32 = 1;
        let mut cursor = InboxCursor::default();
        loop {
            if iteration > spec.max_iterations {
                let reason = format!("max_iterations ({}) reached without a done verdict", spec.max_iterations);
                self.run.event(path, "loop.stopped", json!({ "iterations": spec.max_iterations, "reason": reason }));
                return Ok(match spec.on_max {
                    OnMaxIterations::Complete => Flow::Done(last),
                    OnMaxIterations::Fail => Flow::Failed(StepError::new(ErrorCode::MAX_ITERATIONS, reason)),
                });
            }
            let iteration_path = path.ordinal(u64::from(iteration));
            let mut child = scope.child();
            // `loop.input` is what this iteration starts from: the loop's input first, then the
            // last iteration's output (or `prepare_next`'s), so an iteration can build on the
            // one before it.
            let mut loop_var = json!({ "iteration": iteration, "input": input.as_ref() });
            if let Some(inbox) = &spec.inbox {
                let message_path = iteration_path.join("@inbox");
                let message = match self.iteration_message(spec, inbox, &message_path, &mut cursor, env).await? {
                    Ok(message) => message,
                    Err(flow) => return Ok(flow),
                };
                match message {
                    Some(message) if !message.is_null() => loop_var["message"] = message,
                    _ => {
                        let reason = format!("no message on inbox {inbox:?} within the park timeout");
                        self.run.event(path, "loop.stopped", json!({ "iterations": iteration - 1, "reason": reason }));
                        return Ok(Flow::Done(last));
                    }
                }
            }
            let message = loop_var.get("message").cloned();
            child.bind_var("loop", Arc::new(loop_var));
            match self.exec_seq(&spec.body, &iteration_path, input.clone(), &mut child, env).await? {
                Flow::Done(value) => last = value,
                Flow::Skipped(_) => last = null(),
                Flow::Failed(error) if !(error.is(&ErrorCode::CANCELLED) && env.cancel.is_cancelled()) => {
                    match spec.on_error {
                        LoopOnError::Abort => return Ok(Flow::Failed(error)),
                        LoopOnError::Retry | LoopOnError::Skip => {
                            self.run.event(
                            &iteration_path,
                            "loop.iteration_failed",
                            json!({ "iteration": iteration, "error": { "code": error.code, "message": error.message }, "then": spec.on_error }),
                        );
                            if spec.on_error == LoopOnError::Retry {
                                // Same input, same message: the iteration is done again.
                                cursor.retry_message = message;
                            } else if let Some(next) = &spec.prepare_next {
                                // Skip: move on as if the iteration had finished.
                                match next.eval(&child) {
                                    Ok(value) => input = Arc::new(value),
                                    Err(error) => return Ok(Flow::Failed(error)),
                                }
                            }
                            iteration += 1;
                            continue;
                        }
                    }
                }
                other => return Ok(other),
            }
            let verdict = self.decide_once(
                &iteration_path,
                |choice| match choice {
                    Choice::Verdict { done, reason } => Some(Verdict { done: *done, reason: reason.clone() }),
                    _ => None,
                },
                || {
                    let verdict = match &spec.until {
                        Some(until) => until.eval(&child)?,
                        None => Verdict::again("no until condition"),
                    };
                    Ok(Choice::Verdict { done: verdict.done, reason: verdict.reason })
                },
            );
            let verdict = match verdict {
                Ok(verdict) => verdict,
                Err(error) => return Ok(Flow::Failed(error)),
            };
            if verdict.done {
                self.run.event(path, "loop.stopped", json!({ "iterations": iteration, "reason": verdict.reason }));
                return Ok(Flow::Done(last));
            }
            input = match &spec.prepare_next {
                Some(next) => match next.eval(&child) {
                    Ok(value) => Arc::new(value),
                    Err(error) => return Ok(Flow::Failed(error)),
                },
                None => last.clone(),
            };
            iteration += 1;
        }
    }

    /// The inbox message an iteration consumes: the one the journal has for it, else the
    /// failed iteration's again (`on_error: retry`), else the next one sent (parked for up
    /// to `park_timeout`), committed before the body sees it. `Ok(None)`: none came in time.
    async fn iteration_message(
        &self,
        spec: &LoopSpec,
        inbox: &str,
        message_path: &StepPath,
        cursor: &mut InboxCursor,
        env: &Env,
    ) -> Result<Result<Option<Value>, Flow>, StoreFailed> {
        let recorded = self.recorded_choice(message_path, |choice| match choice {
            Choice::Message { message, seq } => Some((message.clone(), *seq)),
            _ => None,
        });
        match recorded {
            Err(error) => return Ok(Err(Flow::Failed(error))),
            Ok(Some((message, seq))) => {
                if seq.is_some() {
                    cursor.last_seq = seq;
                }
                return Ok(Ok(message));
            }
            Ok(None) => {}
        }
        let message = match cursor.retry_message.take() {
            Some(message) => Some(message),
            None => match self.receive(inbox, spec.park_timeout.unwrap_or_default(), cursor.last_seq, env).await? {
                Ok(Some((seq, message))) => {
                    cursor.last_seq = Some(seq);
                    Some(message)
                }
                Ok(None) => None,
                Err(flow) => return Ok(Err(flow)),
            },
        };
        // A consumed message is durable before the body sees it.
        let decided = Record::Decided { choice: Choice::Message { message: message.clone(), seq: cursor.last_seq } };
        self.run.recorder.commit(message_path, self.now(), decided).await?;
        Ok(Ok(message))
    }
}

/// Where a loop is in its inbox.
#[derive(Default)]
struct InboxCursor {
    /// `on_error: retry` runs the failed iteration again on the same message.
    retry_message: Option<Value>,
    /// The sequence number of the last message taken from the inbox.
    last_seq: Option<u64>,
}
