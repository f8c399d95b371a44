//! Cancelling runs wherever they execute: the request, the per-engine watcher that
//! fires a live run's token, and how a cancelled run ends.

use super::{Engine, EngineError, RunReport};
use crate::ids::{RunId, StepPath, Timestamp};
use crate::journal::{CancelRequest, EventRecord, JournalBatch, Lease, RunStatus};
use crate::store::{CancelOutcome, StatusUpdate};

impl Engine {
    /// Cancels a run on behalf of nobody in particular: see [`Engine::cancel_by`]. Returns
    /// whether the run was still going (so the cancel took or will take effect).
    pub async fn cancel(&self, run: RunId, reason: &str) -> Result<bool, EngineError> {
        let outcome = self.cancel_by(run, reason, None).await?;
        Ok(!matches!(outcome, CancelOutcome::Finished(_)))
    }

    /// Cancels a run, wherever it executes. The request is stored with who asked and why: a
    /// run nobody executes is cancelled at once (with a `run.cancelled` event); a run a live
    /// process executes (this one or another) is stopped by that process, which sees the
    /// request within [`EngineConfig::cancel_poll`]: its running steps' tokens fire, no
    /// later step starts, and it ends `cancelled` with the request's reason. A finished run
    /// is left as it is.
    pub async fn cancel_by(&self, run: RunId, reason: &str, by: Option<&str>) -> Result<CancelOutcome, EngineError> {
        let now = self.inner.clock.now();
        let request = CancelRequest { by: by.map(str::to_owned), reason: reason.to_owned(), at: now };
        let outcome =
            self.inner.store.request_cancel(run, request.clone(), now).await.map_err(EngineError::store(run))?;
        match &outcome {
            CancelOutcome::Finished(_) => {}
            CancelOutcome::Cancelled => {
                let mut batch =
                    JournalBatch { events: vec![cancelled_event(run, &request, now)], ..Default::default() };
                self.inner.store.append(run, None, &mut batch).await.map_err(EngineError::store(run))?;
            }
            CancelOutcome::Requested { .. } => {}
        }
        // Executing here: stop at once rather than at the next poll.
        let live = self.inner.live.lock().expect("poisoned").get(&run).map(|live| live.cancel.clone());
        if let Some(token) = live
            && !matches!(outcome, CancelOutcome::Finished(_))
        {
            self.inner.cancels.lock().expect("poisoned").insert(run, request);
            token.cancel();
        }
        Ok(outcome)
    }

    /// Ends a claimed run as cancelled by an earlier request, running nothing.
    pub(super) async fn finish_cancelled(
        &self,
        run: RunId,
        lease: &Lease,
        request: &CancelRequest,
    ) -> Result<RunReport, EngineError> {
        let now = self.inner.clock.now();
        let mut batch = JournalBatch { events: vec![cancelled_event(run, request, now)], ..Default::default() };
        self.inner.store.append(run, Some(lease.token), &mut batch).await.map_err(EngineError::store(run))?;
        let error = request.error();
        let update = StatusUpdate::ended(RunStatus::Cancelled, error.clone(), now, Some(lease.token));
        self.inner.store.set_status(run, update).await.map_err(EngineError::store(run))?;
        if let Some(observer) = &self.inner.observer {
            observer.run_stopped(run, RunStatus::Cancelled);
        }
        Ok(RunReport {
            run_id: run,
            status: RunStatus::Cancelled,
            output: None,
            error: Some(error),
            pending: Vec::new(),
            awaiting: Vec::new(),
            wake_at: None,
        })
    }
}

/// The `run.cancelled` event: who asked and why.
pub(super) fn cancelled_event(run: RunId, request: &CancelRequest, at: Timestamp) -> EventRecord {
    EventRecord {
        run,
        path: StepPath::root(),
        at,
        tenant: None,
        user: request.by.clone(),
        kind: "run.cancelled".into(),
        data: serde_json::json!({ "by": request.by, "reason": request.reason, "requested_at": request.at }),
    }
}
