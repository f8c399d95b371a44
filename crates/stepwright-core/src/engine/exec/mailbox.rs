//! Mailboxes: inbox messages and wake-ups, read from the store (so they reach a run in
//! any process) and announced in process so a parked step looks at once.

use crate::error::StepError;
use crate::recording::StoreFailed;
use serde_json::Value;

use super::{Env, Exec, Flow};

/// How often a step parked on a mailbox (an inbox, a wake channel) looks at the store for
/// what another process sent; sends in this process wake it at once.
const MAILBOX_POLL: std::time::Duration = std::time::Duration::from_millis(50);

impl Exec {
    /// Waits for the next inbox message after `after`, up to `park`: from the store (so
    /// messages survive crashes and come from any process), woken at once by a send in this
    /// process and otherwise polling.
    pub(super) async fn receive(
        &self,
        inbox: &str,
        park: std::time::Duration,
        after: Option<u64>,
        env: &Env,
    ) -> Result<Result<Option<(u64, Value)>, Flow>, StoreFailed> {
        let deadline = self.now().plus(park);
        let store = self.run.recorder.store();
        loop {
            let notified = self.run.mailboxes.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            match store.next_message(self.run.run_id, inbox, after).await {
                Ok(Some(found)) => return Ok(Ok(Some(found))),
                Ok(None) => {}
                Err(error) => return Err(StoreFailed(error)),
            }
            let now = self.now();
            if now >= deadline {
                return Ok(Ok(None));
            }
            let wait = deadline.since(now).min(MAILBOX_POLL);
            tokio::select! {
                () = &mut notified => {}
                () = self.run.clock.sleep(wait) => {}
                () = env.cancel.cancelled() => {
                    return Ok(Err(Flow::Failed(StepError::cancelled("cancelled while parked on an inbox"))));
                }
            }
        }
    }

    /// The newest wake-up stored on an `every` wake inbox after `after`, if any: several
    /// waiting wake-ups start one tick.
    pub(super) async fn pending_wake(&self, inbox: &str, after: Option<u64>) -> Result<Option<u64>, StoreFailed> {
        let store = self.run.recorder.store();
        let mut newest = None;
        while let Some((seq, _)) =
            store.next_message(self.run.run_id, inbox, newest.or(after)).await.map_err(StoreFailed)?
        {
            newest = Some(seq);
        }
        Ok(newest)
    }

    /// Waits for a wake-up on an `every` wake inbox after `after`: at once when it is sent
    /// in this process, within the poll interval when another process sends it.
    pub(super) async fn wait_for_wake(&self, inbox: &str, after: Option<u64>) -> Result<u64, StoreFailed> {
        loop {
            let notified = self.run.mailboxes.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(seq) = self.pending_wake(inbox, after).await? {
                return Ok(seq);
            }
            tokio::select! {
                () = &mut notified => {}
                () = self.run.clock.sleep(MAILBOX_POLL) => {}
            }
        }
    }
}
