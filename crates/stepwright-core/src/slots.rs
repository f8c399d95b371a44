//! A runner's slots lent while a run waits for a step worker's answer.
//!
//! A run whose step holds for its task (the engine's short `task_hold`) uses no CPU and no
//! connection while it waits; were its slot kept, a burst of runs of a `worker:` tool with
//! no worker online would each pin a slot for the whole hold, and every other run on the
//! runner would queue behind them (64 slots, a 2 s hold: 32 runs a second). So the runner
//! lends a waiting run's slot to the next due run, and the number of runs waiting so is
//! bounded on its own ([`Slots::most_waiting`]).
//!
//! The run's execution carries its slot as a task-local ([`RUN_SLOT`]): only the runner's
//! executions lend (a run the API executes in a request of its own has no slot), and the
//! steps of a run's parallel branches, polled in the run's task, all see the same slot. A
//! run lends its slot while any of its steps waits, even if another branch works meanwhile:
//! the bound is on runs claimed, not a measure of CPU.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

tokio::task_local! {
    /// The slot of the run this task executes, when the runner executes it.
    static RUN_SLOT: Arc<RunSlot>;
}

/// The runner's count of runs whose slot is lent, and the wake-up it listens to.
#[derive(Debug, Default)]
pub(crate) struct Slots {
    /// Runs executing whose slot is lent now.
    lent: AtomicUsize,
    /// A slot was lent: the runner may claim another run.
    freed: tokio::sync::Notify,
}

impl Slots {
    /// Runs whose slot is lent now.
    pub(crate) fn lent(&self) -> usize {
        self.lent.load(Ordering::Acquire)
    }

    /// Resolves once a slot was lent since the last wake-up.
    pub(crate) async fn freed(&self) {
        self.freed.notified().await;
    }

    /// How many runs may wait with their slot lent, for `max_concurrent` slots: waiting
    /// costs memory only, so several times the slots.
    pub(crate) fn most_waiting(max_concurrent: usize) -> usize {
        max_concurrent.saturating_mul(4)
    }

    /// Executes `run` with a slot of these that it lends while it waits for a worker.
    pub(crate) fn scope<F: std::future::Future>(
        self: &Arc<Self>,
        run: F,
    ) -> tokio::task::futures::TaskLocalFuture<Arc<RunSlot>, F> {
        RUN_SLOT.scope(Arc::new(RunSlot { slots: self.clone(), waits: AtomicUsize::new(0) }), run)
    }
}

/// One run's slot.
#[derive(Debug)]
pub(crate) struct RunSlot {
    slots: Arc<Slots>,
    /// The run's steps waiting for a worker now (parallel branches may wait together): its
    /// slot is lent while there is at least one.
    waits: AtomicUsize,
}

/// The slot of the run executing here, lent until this is dropped (`None` outside a
/// runner's execution).
#[must_use = "the slot is lent until the guard is dropped"]
pub(crate) fn lend_while_waiting() -> Option<Lent> {
    let slot = RUN_SLOT.try_with(Arc::clone).ok()?;
    if slot.waits.fetch_add(1, Ordering::AcqRel) == 0 {
        slot.slots.lent.fetch_add(1, Ordering::AcqRel);
        slot.slots.freed.notify_one();
    }
    Some(Lent(slot))
}

/// A slot lent while a step waits; taken back when dropped.
#[derive(Debug)]
pub(crate) struct Lent(Arc<RunSlot>);

impl Drop for Lent {
    fn drop(&mut self) {
        if self.0.waits.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.slots.lent.fetch_sub(1, Ordering::AcqRel);
        }
    }
}
