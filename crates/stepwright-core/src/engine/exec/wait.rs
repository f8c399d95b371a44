//! `wait`: the next message on the run's inbox for an event, or the next event of that name
//! stored in the run's tenant, durable, with a timeout.
//!
//! The deadline is journaled when the wait begins (`@due`), the message taken when it comes
//! (`@message`), so a resume anywhere serves both. Each wait takes the oldest message its
//! inbox holds that no earlier wait of the run took: a message sent before the wait began
//! is not lost. Parallel waits on one event take the inbox's messages in turn. The tenant's
//! event log is read the same way (events received since the run was created, after the
//! last one a wait of the run took): an event stored before the wait began is not lost
//! either — the race the peers' users report.

use std::sync::Arc;

use serde_json::Value;

use crate::definition::WaitSpec;
use crate::error::{ErrorCode, StepError};
use crate::ids::{StepPath, Timestamp};
use crate::journal::{Choice, Record};
use crate::recording::{EventWatch, StoreFailed};
use crate::scope::Scope;
use crate::store::{Store, StoreError};

use super::{Env, Exec, Flow, Res};

/// How many stored events one look reads at a time.
const LOOK_PAGE: usize = 100;

/// How often an in-process wait looks at the event log.
const LOG_POLL: std::time::Duration = std::time::Duration::from_millis(50);

/// What a wait took: from the inbox or the log, its sequence number there, the message.
type Taken = (bool, u64, Value);

/// Whether `payload` has every field of `matching`, each equal (`None`: any payload).
fn matches(matching: Option<&Value>, payload: &Value) -> bool {
    match matching {
        None => true,
        Some(Value::Object(fields)) => fields.iter().all(|(name, want)| payload.get(name) == Some(want)),
        Some(other) => other == payload,
    }
}

/// The first event a watch may take: named as it says, stored after its cursor, received
/// since `since`, with the fields it asks for. When there is none, the watch's cursor moves
/// past the events it looked at (they are not its, and never will be: events do not
/// change), so the next look reads only newer ones.
pub(crate) async fn first_logged_event(
    store: &dyn Store,
    tenant: Option<&str>,
    watch: &mut EventWatch,
    since: Timestamp,
) -> Result<Option<(u64, Value)>, StoreError> {
    loop {
        let page = store.logged_events(tenant, &watch.name, watch.after, since, LOOK_PAGE).await?;
        if let Some(event) = page.iter().find(|e| matches(watch.matching.as_ref(), &e.payload)) {
            return Ok(Some((event.seq, event.payload.clone())));
        }
        if let Some(last) = page.last() {
            watch.after = Some(last.seq);
        }
        if page.len() < LOOK_PAGE {
            return Ok(None);
        }
    }
}

impl Exec {
    pub(super) async fn run_wait(&self, spec: &WaitSpec, path: &StepPath, scope: &Scope, env: &Env) -> Res {
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
        let matching = match spec.matching.as_ref().map(|m| m.eval(scope)).transpose() {
            Ok(matching) => matching,
            Err(error) => return Ok(Flow::Failed(error)),
        };
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
        let cursor = |logged: bool| {
            // What the run's waits took before this execution (served waits do not run).
            self.run
                .replay
                .choices()
                .filter_map(|(_, choice)| match choice {
                    Choice::Event { event, seq, logged: from_log, .. }
                        if *event == spec.event && *from_log == logged =>
                    {
                        Some(*seq)
                    }
                    _ => None,
                })
                .max()
        };
        let log_key = format!("\u{0}log\u{0}{}", spec.event);
        let after = *cursors.entry(spec.event.clone()).or_insert_with(|| cursor(false));
        let log_after = *cursors.entry(log_key.clone()).or_insert_with(|| cursor(true));
        let mut watch = EventWatch { name: spec.event.clone(), after: log_after, matching };
        let left = deadline.since(self.now());
        let found = if left > self.run.config.in_process_wait_limit {
            // Too long to hold the run here: look once, then suspend until the deadline.
            self.look(&spec.event, after, &mut watch).await?
        } else {
            match self.wait_here(spec, after, &mut watch, deadline, env).await? {
                Ok(found) => found,
                Err(flow) => return Ok(flow),
            }
        };
        match found {
            Some((logged, seq, message)) => {
                cursors.insert(if logged { log_key } else { spec.event.clone() }, Some(seq));
                let choice = Choice::Event { event: spec.event.clone(), message: message.clone(), seq, logged };
                self.run.recorder.commit(&message_path, self.now(), Record::Decided { choice }).await?;
                Ok(Flow::Done(Arc::new(message)))
            }
            None if self.now() >= deadline => Ok(Flow::Failed(StepError::new(
                ErrorCode::INTERRUPT_TIMEOUT,
                format!("no `{}` event came within the wait's timeout ({:?})", spec.event, spec.timeout),
            ))),
            None => {
                // A send or a stored event makes the run due at once; one that lands while
                // this suspension is being written is seen by the look after it.
                self.run.note_wake_check(spec.event.clone(), after);
                self.run.note_event_watch(watch);
                self.run.note_wake_at(deadline);
                self.run.recorder.flush().await?;
                Ok(Flow::Suspended)
            }
        }
    }

    /// One look: the inbox's next message, else the log's first event the watch takes.
    async fn look(
        &self,
        inbox: &str,
        after: Option<u64>,
        watch: &mut EventWatch,
    ) -> Result<Option<Taken>, StoreFailed> {
        let store = self.run.recorder.store();
        if let Some((seq, message)) = store.next_message(self.run.run_id, inbox, after).await.map_err(StoreFailed)? {
            return Ok(Some((false, seq, message)));
        }
        let tenant = self.run.caller.tenant.as_deref();
        let found =
            first_logged_event(store.as_ref(), tenant, watch, self.run.created_at).await.map_err(StoreFailed)?;
        Ok(found.map(|(seq, payload)| (true, seq, payload)))
    }

    /// Holds the run here until a message or an event comes or the deadline passes: a send
    /// in this process wakes it at once, the rest is polled.
    async fn wait_here(
        &self,
        spec: &WaitSpec,
        after: Option<u64>,
        watch: &mut EventWatch,
        deadline: Timestamp,
        env: &Env,
    ) -> Result<Result<Option<Taken>, Flow>, StoreFailed> {
        loop {
            let notified = self.run.mailboxes.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(found) = self.look(&spec.event, after, watch).await? {
                return Ok(Ok(Some(found)));
            }
            let now = self.now();
            if now >= deadline {
                return Ok(Ok(None));
            }
            tokio::select! {
                () = &mut notified => {}
                () = self.run.clock.sleep(deadline.since(now).min(LOG_POLL)) => {}
                () = env.cancel.cancelled() => {
                    return Ok(Err(Flow::Failed(StepError::cancelled("cancelled while waiting for an event"))));
                }
            }
        }
    }
}
