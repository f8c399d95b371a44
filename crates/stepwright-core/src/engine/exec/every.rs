//! `every`: its body on a fixed interval (with jitter), started early by a wake-up.

use crate::definition::EveryOnError;
use crate::error::{ErrorCode, StepError};
use crate::ids::StepPath;
use crate::journal::{Choice, Record};
use crate::scope::Scope;
use serde_json::{Value, json};
use std::sync::Arc;

use super::{Env, Exec, Flow, Res};

impl Exec {
    pub(super) async fn run_every(
        &self,
        spec: &crate::definition::EverySpec,
        path: &StepPath,
        input: Arc<Value>,
        scope: &Scope,
        env: &Env,
    ) -> Res {
        let mut tick: u64 = 1;
        let mut due = self.now();
        let wake_inbox = spec.wake.as_deref().map(crate::engine::wake_inbox);
        // The sequence number of the last wake-up taken, journaled with the tick it started.
        let mut last_wake: Option<u64> = None;
        loop {
            let tick_path = path.ordinal(tick);
            let due_path = tick_path.join("@due");
            let recorded = self.recorded_choice(&due_path, |choice| match choice {
                Choice::Due { at, wake, .. } => Some((*at, *wake)),
                _ => None,
            });
            let started = match recorded {
                Err(error) => return Ok(Flow::Failed(error)),
                Ok(Some((at, wake))) => {
                    if wake.is_some() {
                        last_wake = wake;
                    }
                    at
                }
                Ok(None) => {
                    let now = self.now();
                    let mut woken_by = None;
                    if due > now {
                        // A wake-up already waiting (sent while the last tick ran, or while
                        // this run was suspended) starts the tick at once.
                        if let Some(inbox) = &wake_inbox {
                            woken_by = self.pending_wake(inbox, last_wake).await?;
                        }
                        if woken_by.is_none() {
                            if due.since(now) > self.run.config.in_process_wait_limit {
                                if let Some(inbox) = &wake_inbox {
                                    self.run.note_wake_check(inbox.clone(), last_wake);
                                }
                                self.run.note_wake_at(due);
                                self.run.recorder.flush().await?;
                                return Ok(Flow::Suspended);
                            }
                            let woken = async {
                                match &wake_inbox {
                                    Some(inbox) => self.wait_for_wake(inbox, last_wake).await,
                                    None => std::future::pending().await,
                                }
                            };
                            tokio::select! {
                                () = self.run.clock.sleep_until(due) => {}
                                found = woken => woken_by = Some(found?),
                                () = env.cancel.cancelled() => return Ok(Flow::Failed(StepError::cancelled("every was cancelled"))),
                            }
                        }
                    }
                    let at = self.now();
                    if woken_by.is_some() {
                        last_wake = woken_by;
                    }
                    self.run.recorder.note(
                        &due_path,
                        at,
                        Record::Decided { choice: Choice::Due { at, wake: woken_by, event: None } },
                    );
                    at
                }
            };
            if env.cancel.is_cancelled() {
                return Ok(Flow::Failed(StepError::cancelled("every was cancelled")));
            }
            let mut child = scope.child();
            child.bind_var("tick", Arc::new(json!(tick)));
            match self.exec_seq(&spec.body, &tick_path, input.clone(), &mut child, env).await? {
                Flow::Done(_) | Flow::Skipped(_) => {}
                Flow::Failed(error) if !(error.is(&ErrorCode::CANCELLED) && env.cancel.is_cancelled()) => {
                    match spec.on_error {
                        EveryOnError::Fail => return Ok(Flow::Failed(error)),
                        EveryOnError::Continue => self.run.event(
                            &tick_path,
                            "every.tick_failed",
                            json!({ "tick": tick, "error": { "code": error.code, "message": error.message } }),
                        ),
                    }
                }
                other => return Ok(other),
            }
            let factor =
                if spec.jitter == 0.0 { 1.0 } else { 1.0 + spec.jitter * (2.0 * self.run.entropy.next_f64() - 1.0) };
            due = started.plus(spec.interval.mul_f64(factor));
            tick += 1;
        }
    }
}
