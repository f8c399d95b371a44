//! The keeper of an engine's live runs: one task per engine, while it executes runs, that
//! renews all their leases in one store call per beat and fires the root token of a run
//! asked to cancel from another process. However many runs a worker executes, it costs the
//! store one lease write per beat (a third of the lease) and one cancel look per poll on a
//! store without notifications, or per notification (with a slow safety poll) on one with.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Weak};

use tokio_util::sync::CancellationToken;

use super::EngineInner;
use crate::ids::{RunId, Timestamp};
use crate::journal::Lease;
use crate::store::StoreError;

/// A run this engine executes now.
pub(super) struct LiveRun {
    /// Its root token: cancelling it stops the walk.
    pub(super) cancel: CancellationToken,
    /// Its lease as last renewed.
    pub(super) lease: Lease,
    /// Set when the lease was lost (another worker holds the run): the walk then reports
    /// `LeaseLost` rather than how it ended.
    pub(super) lost: Arc<AtomicBool>,
}

/// On a store that announces cancels, how many cancel polls pass between looks made
/// without an announcement (in case one was missed while its connection was down).
const SAFETY_LOOK_EVERY: u32 = 20;

/// Starts the keeper unless one runs (called after a run is added to `live`).
pub(super) fn ensure_keeper(inner: &Arc<EngineInner>) {
    if !inner.watching.swap(true, SeqCst) {
        tokio::spawn(keep_live_runs(Arc::downgrade(inner)));
    }
}

/// The keeper's loop. It holds the engine weakly, so a dropped engine stops it.
async fn keep_live_runs(engine: Weak<EngineInner>) {
    let Some(inner) = engine.upgrade() else { return };
    let beat_every = inner.config.lease_for / 3;
    let mut next_beat = inner.clock.now().plus(beat_every);
    let announces = inner.store.announces_cancels();
    drop(inner);
    let mut quiet_polls = 0;
    loop {
        let Some((store, clock, poll)) =
            engine.upgrade().map(|inner| (inner.store.clone(), inner.clock.clone(), inner.config.cancel_poll))
        else {
            return;
        };
        let announced = tokio::select! {
            announced = store.wait_for_cancel(poll) => announced,
            () = clock.sleep_until(next_beat) => false,
        };
        let Some(inner) = engine.upgrade() else { return };
        let live: Vec<(RunId, Lease)> =
            inner.live.lock().expect("poisoned").iter().map(|(run, live)| (*run, live.lease.clone())).collect();
        if live.is_empty() {
            inner.watching.store(false, SeqCst);
            // A run that started after the look above found `watching` set and started no
            // keeper of its own: this one goes on for it, unless another took over.
            if inner.live.lock().expect("poisoned").is_empty() || inner.watching.swap(true, SeqCst) {
                return;
            }
            continue;
        }
        let now = inner.clock.now();
        if now >= next_beat {
            renew(&inner, live.iter().map(|(_, lease)| lease.clone()).collect(), now).await;
            next_beat = inner.clock.now().plus(beat_every);
        }
        quiet_polls += 1;
        if !announces || announced || quiet_polls >= SAFETY_LOOK_EVERY {
            quiet_polls = 0;
            let runs: Vec<RunId> = live.iter().map(|(run, _)| *run).collect();
            // A store that cannot answer now is asked again at the next poll.
            if let Ok(found) = store.cancel_requests(&runs).await {
                for (run, request) in found {
                    let token = inner.live.lock().expect("poisoned").get(&run).map(|live| live.cancel.clone());
                    if let Some(token) = token {
                        inner.cancels.lock().expect("poisoned").entry(run).or_insert(request);
                        token.cancel();
                    }
                }
            }
        }
    }
}

/// Renews every live lease in one store call. A lease the store no longer honours is lost:
/// its run is cancelled and reports `LeaseLost`. A store that cannot answer is asked again
/// at the next beat; a lease it could not renew before it ran out is lost too.
async fn renew(inner: &EngineInner, leases: Vec<Lease>, now: Timestamp) {
    let answers = inner.store.renew_leases(&leases, now, inner.config.lease_for).await;
    let mut live = inner.live.lock().expect("poisoned");
    let lose = |run: RunId, live: &HashMap<RunId, LiveRun>| {
        if let Some(run) = live.get(&run) {
            run.lost.store(true, SeqCst);
            run.cancel.cancel();
        }
    };
    match answers {
        Ok(answers) => {
            for (asked, answer) in leases.iter().zip(answers) {
                match answer {
                    Ok(renewed) => {
                        if let Some(run) = live.get_mut(&asked.run)
                            && run.lease.token == renewed.token
                        {
                            run.lease = renewed;
                        }
                    }
                    Err(StoreError::Backend { .. }) if asked.expires_at > now => {}
                    Err(_) => lose(asked.run, &live),
                }
            }
        }
        Err(_) => {
            for lease in leases.iter().filter(|lease| lease.expires_at <= now) {
                lose(lease.run, &live);
            }
        }
    }
}
