//! A node's attempts: retries with backoff, timeouts, output checks, the step cache, and
//! what `on_failure` does when the attempts run out.

use crate::definition::OnFailure;
use crate::definition::{Node, NodeKind};
use crate::error::{ErrorCode, StepError};
use crate::hash::ContentHash;
use crate::ids::{StepPath, Timestamp};
use crate::journal::Record;
use crate::policy::{GuardrailStage, apply_guardrails};
use crate::recording::StoreFailed;
use crate::services::StepStatus;
use serde_json::{Value, json};
use std::sync::Arc;

use super::{Env, Exec, Flow, Frame, Res};
use tracing::Instrument;

/// What an attempt's span says about how it ended.
fn record_flow(span: &tracing::Span, flow: &Flow) {
    let status = match flow {
        Flow::Done(_) => StepStatus::Completed,
        Flow::Failed(error) => {
            span.record("otel.status_code", "error");
            span.record("otel.status_description", format!("{}: {}", error.code, error.message).as_str());
            span.record("error.type", error.code.as_str());
            StepStatus::Failed
        }
        Flow::Skipped(_) => StepStatus::Skipped,
        Flow::Suspended => StepStatus::Suspended,
        Flow::Handoff(..) => StepStatus::Handoff,
    };
    span.record("stepwright.step.status", status.as_str());
}

/// Errors that no retry policy retries: a retry could not change them.
fn is_never_retried(error: &StepError) -> bool {
    [ErrorCode::INPUT_VALIDATION, ErrorCode::CANCELLED, ErrorCode::NONDETERMINISM, ErrorCode::REJECTED]
        .contains(&error.code)
}

impl Exec {
    pub(super) async fn attempts(
        &self,
        frame: &mut Frame<'_>,
        input: Arc<Value>,
        cache_key: Option<ContentHash>,
    ) -> Res {
        let Frame { node, path, env, .. } = *frame;
        let policy = &node.policy;
        let fenced = node.effect_or_default().is_fenced();
        let mut attempt = 1;
        let mut wait_until = None;
        // An attempt that handed its work to a step worker and suspended goes on where it
        // was: no new start, no new intent; the step asks for its task's answer again.
        let mut reentered = false;
        if let Some(log) = self.run.replay.path(path, node.served_as()) {
            let last = log.last_attempt;
            match log.failures.iter().rev().find(|f| f.0 == last) {
                Some((_, _, Some(retry_at))) => {
                    attempt = last + 1;
                    wait_until = Some(*retry_at);
                }
                Some((_, error, None)) => {
                    return self.on_failure(frame, error.clone(), input, last).await;
                }
                None if last == 0 => {}
                None if log.dispatched.as_ref().is_some_and(|(at, _)| *at == last) => {
                    attempt = last;
                    reentered = true;
                }
                None => {
                    attempt = last;
                    if fenced && log.intent == Some(last) && !policy.safe_to_retry {
                        let error = StepError::new(
                            ErrorCode::OUTCOME_UNKNOWN,
                            format!(
                                "the {} step was interrupted after it started and is not safe to retry; whether its effect happened is unknown",
                                format!("{:?}", node.effect_or_default()).to_lowercase()
                            ),
                        );
                        return self.fail(frame, error, input, attempt).await;
                    }
                }
            }
        }
        loop {
            if let Some(due) = wait_until.take()
                && let Some(flow) = self.wait_until(due, env).await?
            {
                return Ok(flow);
            }
            let key = fenced.then(|| crate::ids::idempotency_key(self.run.run_id, path));
            if std::mem::take(&mut reentered) {
                // Started (and fenced) when the task was dispatched.
            } else if let Some(key) = &key {
                self.started(path, attempt);
                // The fence: the intent is durable before the effect can happen (for a step
                // that dispatches a task, in the task's own commit).
                let intent =
                    Record::Intent { attempt, key: key.clone(), input: Some(crate::ContentHash::of_value(&input)) };
                if matches!(&node.kind, NodeKind::Step(step) if step.dispatches()) {
                    self.run.recorder.note_intent(path, self.now(), intent);
                } else {
                    self.run.recorder.commit(path, self.now(), intent).await?;
                }
            } else {
                self.started(path, attempt);
            }
            let span = tracing::info_span!(
                "step",
                otel.name = %format_args!("step {}", node.id),
                stepwright.run.id = %self.run.run_id,
                stepwright.step.path = %path,
                stepwright.attempt = i64::from(attempt),
                stepwright.tenant = self.run.caller.tenant.as_deref(),
                stepwright.step.status = tracing::field::Empty,
                otel.status_code = tracing::field::Empty,
                otel.status_description = tracing::field::Empty,
                error.type = tracing::field::Empty,
            );
            // Nothing listening (the common case): no span to enter at every poll.
            let flow = if span.is_disabled() {
                let work = self.run_with_timeout(frame, attempt, input.clone(), key);
                self.shown_when_slow(path, attempt, work).await?
            } else {
                let work = self.run_with_timeout(frame, attempt, input.clone(), key).instrument(span.clone());
                let flow = self.shown_when_slow(path, attempt, work).await?;
                record_flow(&span, &flow);
                flow
            };
            let error = match flow {
                Flow::Done(value) => match self.check_output(node, path, value) {
                    Ok(value) => {
                        if let Some(kind) = &policy.artifact_key {
                            self.run.artifact(path, kind, &value);
                        }
                        if let Some(key) = cache_key
                            && let Err(error) = self.run.cache.keep(&key, &value).await
                        {
                            // A cache is an optimisation: the step completed all the same.
                            self.run.event(
                                path,
                                "cache.unavailable",
                                json!({ "writing": true, "error": error.to_string() }),
                            );
                        }
                        return self.complete(path, attempt, value, false).await;
                    }
                    Err(error) => error,
                },
                Flow::Failed(error) => error,
                Flow::Skipped(reason) => {
                    self.run.recorder.commit(path, self.now(), Record::Skipped { reason: reason.clone() }).await?;
                    self.finished(path, StepStatus::Skipped);
                    return Ok(Flow::Skipped(reason));
                }
                Flow::Suspended => {
                    self.run.recorder.flush().await?;
                    self.finished(path, StepStatus::Suspended);
                    return Ok(Flow::Suspended);
                }
                Flow::Handoff(target, payload) => {
                    self.run
                        .recorder
                        .commit(
                            path,
                            self.now(),
                            Record::Handoff { target: target.clone(), payload: (*payload).clone() },
                        )
                        .await?;
                    self.finished(path, StepStatus::Handoff);
                    return Ok(Flow::Handoff(target, payload));
                }
            };
            if error.is(&ErrorCode::CANCELLED) && env.cancel.is_cancelled() {
                self.run.recorder.note(path, self.now(), Record::Cancelled { reason: error.message.clone() });
                self.finished(path, StepStatus::Cancelled);
                return Ok(Flow::Failed(error));
            }
            let retry_all = matches!(policy.on_failure, OnFailure::Retry);
            if let Some(retry) = &policy.retry
                && attempt < retry.max_attempts
                && (error.retryable || retry_all)
                && !is_never_retried(&error)
            {
                let delay = retry.delay_after(attempt, self.run.entropy.next_f64());
                span.in_scope(|| {
                    let retry_in_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
                    tracing::info!(code = %error.code, error = %error.message, retry_in_ms, "step attempt failed; retrying");
                });
                let due = self.now().plus(delay);
                self.run
                    .recorder
                    .commit(path, self.now(), Record::Failed { attempt, error, retry_at: Some(due), started_at: None })
                    .await?;
                self.finished(path, StepStatus::Retrying);
                attempt += 1;
                wait_until = Some(due);
                continue;
            }
            return self.fail(frame, error, input, attempt).await;
        }
    }

    /// Notes that an attempt started.
    fn started(&self, path: &StepPath, attempt: u32) {
        self.run.recorder.note(path, self.now(), Record::Started { attempt });
        if let Some(observer) = &self.run.observer {
            observer.step_started(self.run.run_id, path, attempt);
        }
    }

    /// Runs an attempt's work; once it has run for `show_running_after`, its start is
    /// written to the journal while it goes on, so that readers in any process see it
    /// running. A step done at its first poll (the common case) never arms the timer.
    async fn shown_when_slow<T>(&self, path: &StepPath, attempt: u32, work: impl Future<Output = T>) -> T {
        let mut work = std::pin::pin!(work);
        let first = std::future::poll_fn(|cx| std::task::Poll::Ready(work.as_mut().poll(cx))).await;
        if let std::task::Poll::Ready(done) = first {
            return done;
        }
        tokio::select! {
            biased;
            done = &mut work => return done,
            () = self.run.clock.sleep(self.run.config.show_running_after) => {}
        }
        let (done, written) = tokio::join!(work, self.run.recorder.flush_start(path, attempt));
        // A store that failed the write fails the step's own next commit, which says so.
        if let Err(StoreFailed(error)) = written {
            tracing::warn!(run = %self.run.run_id, path = %path, %error, "a running step's start was not written");
        }
        done
    }

    /// Waits for a journaled time. `Some(flow)` when the run must stop instead (cancelled, or
    /// the wait is longer than the engine waits in process).
    pub(super) async fn wait_until(&self, due: Timestamp, env: &Env) -> Result<Option<Flow>, StoreFailed> {
        let now = self.now();
        if due <= now {
            return Ok(None);
        }
        if due.since(now) > self.run.config.in_process_wait_limit {
            self.run.note_wake_at(due);
            self.run.recorder.flush().await?;
            return Ok(Some(Flow::Suspended));
        }
        tokio::select! {
            () = self.run.clock.sleep_until(due) => Ok(None),
            () = env.cancel.cancelled() => Ok(Some(Flow::Failed(StepError::cancelled("cancelled while waiting to retry")))),
        }
    }

    pub(super) fn check_output(
        &self,
        node: &Node,
        path: &StepPath,
        value: Arc<Value>,
    ) -> Result<Arc<Value>, StepError> {
        if let Some(schema) = &node.output_schema {
            schema.check(&value, ErrorCode::OUTPUT_VALIDATION, "the output")?;
        }
        if node.policy.guardrails.is_empty() {
            return Ok(value);
        }
        let (value, warnings) = apply_guardrails(&node.policy.guardrails, GuardrailStage::Output, value)?;
        self.warn(path, &warnings);
        Ok(value)
    }

    pub(super) fn cache_key(&self, node: &Node, input: &Value) -> ContentHash {
        let step_type = match &node.kind {
            NodeKind::Step(step) => step.identity().into_owned(),
            other => other.name().to_owned(),
        };
        // The tenant is part of the key: a tenant is never served what another computed.
        let tenant = self.run.caller.tenant.as_deref().unwrap_or_default();
        ContentHash::of_parts(&[
            tenant.as_bytes(),
            self.run.workflow.as_bytes(),
            node.id.as_bytes(),
            step_type.as_bytes(),
            ContentHash::of_value(input).as_bytes(),
        ])
    }

    /// The cached output under `key`; a cache that cannot be read is a miss.
    pub(super) async fn cached(&self, path: &StepPath, key: &ContentHash) -> Option<Value> {
        match self.run.cache.cached(key).await {
            Ok(found) => found,
            Err(error) => {
                self.run.event(path, "cache.unavailable", json!({ "writing": false, "error": error.to_string() }));
                None
            }
        }
    }

    pub(super) fn warn(&self, path: &StepPath, warnings: &[(String, String)]) {
        for (name, message) in warnings {
            self.run.event(path, "guardrail.warning", json!({ "guardrail": name, "message": message }));
        }
    }

    pub(super) async fn complete(&self, path: &StepPath, attempt: u32, value: Arc<Value>, cached: bool) -> Res {
        let hash = ContentHash::of_value(&value);
        self.run.recorder.commit_output(path, self.now(), attempt, hash, value.clone(), cached).await?;
        self.finished(path, StepStatus::Completed);
        Ok(Flow::Done(value))
    }

    /// Records a final failure and applies `on_failure`.
    pub(super) async fn fail(&self, frame: &mut Frame<'_>, error: StepError, input: Arc<Value>, attempt: u32) -> Res {
        let Frame { path, .. } = *frame;
        self.run
            .recorder
            .commit(
                path,
                self.now(),
                Record::Failed { attempt, error: error.clone(), retry_at: None, started_at: None },
            )
            .await?;
        self.finished(path, StepStatus::Failed);
        self.on_failure(frame, error, input, attempt).await
    }

    pub(super) async fn on_failure(
        &self,
        frame: &mut Frame<'_>,
        error: StepError,
        input: Arc<Value>,
        attempt: u32,
    ) -> Res {
        let Frame { node, path, env, .. } = *frame;
        if error.is(&ErrorCode::CANCELLED) && env.cancel.is_cancelled() {
            return Ok(Flow::Failed(error));
        }
        match &node.policy.on_failure {
            OnFailure::Abort | OnFailure::Retry => Ok(Flow::Failed(error)),
            OnFailure::Skip => {
                let reason = format!("failed and on_failure is skip: {error}");
                self.run.recorder.commit(path, self.now(), Record::Skipped { reason: reason.clone() }).await?;
                self.finished(path, StepStatus::Skipped);
                Ok(Flow::Skipped(reason))
            }
            OnFailure::Fallback(fallback) => {
                let fallback_path = path.join("@fallback");
                match Box::pin(self.exec_node(fallback, fallback_path, input, frame.scope, env)).await? {
                    Flow::Done(value) => self.complete(path, attempt, value, false).await,
                    other => Ok(other),
                }
            }
        }
    }

    pub(super) async fn run_with_timeout(
        &self,
        frame: &mut Frame<'_>,
        attempt: u32,
        input: Arc<Value>,
        key: Option<String>,
    ) -> Res {
        let Frame { node, path, env, .. } = *frame;
        let Some(limit) = node.policy.timeout else {
            return self.run_kind(frame, attempt, input, key).await;
        };
        // The work gets its own token: a timeout cancels it (and everything below it), and
        // dropping the future stops it at its next await point.
        let local =
            Env { layers: env.layers.clone(), cancel: env.cancel.child_token(), services: env.services.clone() };
        let mut frame = Frame { node, path, scope: &mut *frame.scope, env: &local };
        let work = self.run_kind(&mut frame, attempt, input, key);
        tokio::select! {
            result = work => result,
            () = self.run.clock.sleep(limit) => {
                local.cancel.cancel();
                Ok(Flow::Failed(StepError::timeout(format!("the step did not finish within {limit:?}; its work was cancelled"))))
            }
        }
    }
}
