//! `wait`: the next message on the run's inbox for an event, durable, with a timeout.
//!
//! The deadline is journaled when the wait begins (`@due`), the message taken when it comes
//! (`@message`), so a resume anywhere serves both. Each wait takes the oldest message its
//! inbox holds that no earlier wait of the run took: a message sent before the wait began
//! is not lost. Parallel waits on one event take the inbox's messages in turn.

use std::sync::Arc;

use crate::definition::WaitSpec;
use crate::error::{ErrorCode, StepError};
use crate::ids::StepPath;
use crate::journal::{Choice, Record};
use crate::recording::StoreFailed;

use super::{Env, Exec, Flow, Res};

impl Exec {
    pub(super) async fn run_wait(&self, spec: &WaitSpec, path: &StepPath, env: &Env) -> Res {
        let message_path = path.join("@message");
        let recorded = self.recorded_choice(&message_path, |choice| match choice {
            Choice::Event { message, .. } => Some(message.clone()),
            _ => None,
        });
        match recorded {
            Err(error) => return Ok(Flow::Failed(error)),
            Ok(Some(message)) => return Ok(Flow::Done(Arc::new(message))),
            Ok(None) => {}
        }
        let due_path = path.join("@due");
        let recorded_due = self.recorded_choice(&due_path, |choice| match choice {
            Choice::Due { at, .. } => Some(*at),
            _ => None,
        });
        let deadline = match recorded_due {
            Err(error) => return Ok(Flow::Failed(error)),
            Ok(Some(at)) => at,
            Ok(None) => {
                let now = self.now();
                let at = now.plus(spec.timeout);
                let choice = Choice::Due { at, wake: None, event: Some(spec.event.clone()) };
                self.run.recorder.note(&due_path, now, Record::Decided { choice });
                at
            }
        };
        let mut cursors = self.run.event_cursors.lock().await;
        let after = *cursors.entry(spec.event.clone()).or_insert_with(|| {
            // What the run's waits took before this execution (served waits do not run).
            self.run
                .replay
                .choices()
                .filter_map(|(_, choice)| match choice {
                    Choice::Event { event, seq, .. } if *event == spec.event => Some(*seq),
                    _ => None,
                })
                .max()
        });
        let left = deadline.since(self.now());
        let found = if left > self.run.config.in_process_wait_limit {
            // Too long to hold the run here: look once, then suspend until the deadline.
            self.run.recorder.store().next_message(self.run.run_id, &spec.event, after).await.map_err(StoreFailed)?
        } else {
            match self.receive(&spec.event, left, after, env).await? {
                Ok(found) => found,
                Err(flow) => return Ok(flow),
            }
        };
        match found {
            Some((seq, message)) => {
                cursors.insert(spec.event.clone(), Some(seq));
                let choice = Choice::Event { event: spec.event.clone(), message: message.clone(), seq };
                self.run.recorder.commit(&message_path, self.now(), Record::Decided { choice }).await?;
                Ok(Flow::Done(Arc::new(message)))
            }
            None if self.now() >= deadline => Ok(Flow::Failed(StepError::new(
                ErrorCode::INTERRUPT_TIMEOUT,
                format!("no `{}` event came within the wait's timeout ({:?})", spec.event, spec.timeout),
            ))),
            None => {
                // A send makes the run due at once; one that lands while this suspension is
                // being written is seen by the look after it.
                self.run.note_wake_check(spec.event.clone(), after);
                self.run.note_wake_at(deadline);
                self.run.recorder.flush().await?;
                Ok(Flow::Suspended)
            }
        }
    }
}
