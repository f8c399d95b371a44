//! Step tasks: the work a `worker:` tool hands to a process outside the engine (a Python or
//! TypeScript step worker), as one table.
//!
//! A task is born from the journal: the `dispatched` entry a step writes carries the task,
//! and the store inserts the task's row in the same commit (as an `interrupt.opened` entry
//! makes the interrupt's row). Workers claim tasks under a lease whose token grows on every
//! claim; each answer (complete, fail, release, heartbeat) is fenced by that token on the
//! store's clock (Postgres: the database's), so a worker that lost its lease can no longer
//! change anything. The engine reads a task's state when the run comes back to the step
//! ([`TaskStore::settle_task`]), which also decides, on the store's clock, that a lease
//! lapsed or that nobody claimed the task in time.

use std::time::Duration;

use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::StoreError;
use crate::error::StepError;
use crate::ids::{RunId, StepPath, Timestamp};
pub use crate::task::{NO_WORKER, TaskId, TaskSpec};

/// Where a task is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskState {
    /// Waiting for a worker.
    Pending,
    /// A worker holds it under a lease.
    Claimed,
    /// The handler returned an output.
    Completed,
    /// The handler failed (the step's retry policy decides what follows).
    Failed,
    /// The worker's lease ran out: it died, hung or lost its connection.
    Lapsed,
    /// Nobody claimed it before its `schedule_to_start` passed.
    NoWorker,
    /// The worker acknowledged a cancel.
    Cancelled,
}

impl TaskState {
    /// Every state.
    pub const ALL: [Self; 7] =
        [Self::Pending, Self::Claimed, Self::Completed, Self::Failed, Self::Lapsed, Self::NoWorker, Self::Cancelled];

    /// Its name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Claimed => "claimed",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Lapsed => "lapsed",
            Self::NoWorker => "no_worker",
            Self::Cancelled => "cancelled",
        }
    }

    /// Parses a name.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == text)
    }

    /// Whether the task will not change again.
    pub fn is_final(self) -> bool {
        !matches!(self, Self::Pending | Self::Claimed)
    }
}

/// A task as the store has it.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredTask {
    /// What the step handed over.
    pub spec: TaskSpec,
    /// The run it belongs to.
    pub run: RunId,
    /// The step's path.
    pub path: StepPath,
    /// The attempt.
    pub attempt: u32,
    /// The run's tenant (the namespace workers claim in).
    pub tenant: Option<String>,
    /// The run's workflow.
    pub workflow: String,
    /// When it was dispatched.
    pub created_at: Timestamp,
    /// Its state.
    pub state: TaskState,
    /// The worker that holds (or last held) it.
    pub worker: Option<String>,
    /// The current lease's token (0 before the first claim).
    pub lease_token: u64,
    /// When the current lease runs out.
    pub lease_expires: Option<Timestamp>,
    /// When it was first claimed.
    pub claimed_at: Option<Timestamp>,
    /// The last heartbeat's details (kept for the next attempt).
    pub details: Option<Value>,
    /// The output of a completed task.
    pub output: Option<Value>,
    /// The error of a failed task.
    pub error: Option<StepError>,
    /// When it reached a final state.
    pub finished_at: Option<Timestamp>,
}

impl StoredTask {
    /// When the engine must look at the task again: when its lease runs out, or when it must
    /// have been claimed; `None` when neither applies.
    pub fn next_deadline(&self) -> Option<Timestamp> {
        match self.state {
            TaskState::Claimed => self.lease_expires,
            TaskState::Pending => {
                self.spec.schedule_to_start_ms.map(|ms| self.created_at.plus(Duration::from_millis(ms)))
            }
            _ => None,
        }
    }

    /// What the store decides about the task at `now`, if anything: a claimed task whose
    /// lease ran out lapsed; a pending one past its `schedule_to_start` has no worker.
    pub fn settled_at(&self, now: Timestamp) -> Option<TaskState> {
        match self.state {
            TaskState::Claimed if self.lease_expires.is_some_and(|at| at <= now) => Some(TaskState::Lapsed),
            TaskState::Pending if self.next_deadline().is_some_and(|at| at <= now) => Some(TaskState::NoWorker),
            _ => None,
        }
    }
}

/// A worker's claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// The worker's id (stable for the process's life).
    pub worker: String,
    /// The namespace it works in (its key's).
    pub tenant: String,
    /// The queue.
    pub queue: String,
    /// The handlers it offers: names, and `name@version` for versioned ones.
    pub handlers: Vec<String>,
    /// At most this many tasks.
    pub max: usize,
}

/// A lease on a task: the task and the token its claim got.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskLease {
    /// The task.
    pub task: TaskId,
    /// The claim's token.
    pub token: u64,
}

/// What a worker reports about a task it holds.
#[derive(Debug, Clone, PartialEq)]
pub enum TaskAnswer {
    /// The handler returned this output.
    Complete(Value),
    /// The handler failed.
    Fail(StepError),
    /// The handler acknowledged a cancel.
    Cancelled,
    /// The handler never started: the task goes back to the queue, not counted as tried.
    Release,
    /// The work goes on elsewhere (an asynchronous completion): the lease now lasts this long,
    /// without heartbeats; whoever holds the task's id and lease answers it later.
    Defer(Duration),
}

impl TaskAnswer {
    /// The state the answer puts the task in.
    pub fn state(&self) -> TaskState {
        match self {
            Self::Complete(_) => TaskState::Completed,
            Self::Fail(_) => TaskState::Failed,
            Self::Cancelled => TaskState::Cancelled,
            Self::Release => TaskState::Pending,
            Self::Defer(_) => TaskState::Claimed,
        }
    }
}

/// What a heartbeat says about one lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Beat {
    /// Renewed until then.
    Renewed(Timestamp),
    /// Renewed, but the run was cancelled: stop the handler.
    Cancel(Timestamp),
    /// The lease is no longer this worker's (lapsed, answered, or the task is unknown).
    Lost,
}

/// The task table's filter.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TaskFilter {
    /// Only this tenant's.
    pub tenant: Option<String>,
    /// Only this queue's.
    pub queue: Option<String>,
    /// Only in this state.
    pub state: Option<TaskState>,
    /// Only this run's.
    pub run: Option<RunId>,
    /// At most this many (newest first).
    pub limit: usize,
}

/// Whether the caller may answer a task, as stored: its tenant and queue are the caller's.
pub type MayAnswer = std::sync::Arc<dyn Fn(&StoredTask) -> bool + Send + Sync>;

/// What [`TaskStore::answer_task_if`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum Answered {
    /// The answer was taken.
    Taken {
        /// The task's state after the answer.
        state: TaskState,
        /// The task: its spec, run and tenant.
        task: Box<StoredTask>,
    },
    /// The caller may not answer this task (another tenant's, or a queue its key does not
    /// work): nothing was written.
    Refused(Box<StoredTask>),
    /// No such task.
    Missing,
}

/// The step tasks of a store.
pub trait TaskStore: Send + Sync {
    /// Claims up to `claim.max` pending tasks of the claim's queue and namespace whose
    /// handler it offers, oldest first, leasing each until now + its lease length (a new
    /// token each); a tool's `concurrency` counts the claimed tasks of the same handler.
    fn claim_tasks<'a>(
        &'a self,
        claim: &'a Claim,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Vec<StoredTask>, StoreError>>;

    /// Renews every lease a worker holds, in one write, and keeps each one's details: one
    /// answer per lease, in order. `cancelled` lists the runs the caller knows to be
    /// cancelled (or asked to be).
    fn heartbeat_tasks<'a>(
        &'a self,
        leases: &'a [(TaskLease, Option<Value>)],
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Vec<Beat>, StoreError>>;

    /// Answers a task under its lease: `Ok(state)` with the state it is in after (an answer
    /// repeated under the same lease changes nothing and is answered the same);
    /// `TaskLeaseLost` when the token is not the task's current one or the lease ran out.
    fn answer_task<'a>(
        &'a self,
        lease: &'a TaskLease,
        answer: TaskAnswer,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<TaskState, StoreError>>;

    /// Answers a task as [`TaskStore::answer_task`] does if `may` lets the caller answer it as
    /// stored (its tenant, its queue), the look and the answer in one write where the store
    /// can: a worker's answer then costs no read of its own. Nothing is written for a task
    /// that is missing or that `may` refuses.
    fn answer_task_if<'a>(
        &'a self,
        lease: &'a TaskLease,
        answer: TaskAnswer,
        now: Timestamp,
        may: MayAnswer,
    ) -> BoxFuture<'a, Result<Answered, StoreError>> {
        Box::pin(async move {
            let Some(task) = self.settle_task(&lease.task, now).await? else {
                return Ok(Answered::Missing);
            };
            if !may(&task) {
                return Ok(Answered::Refused(Box::new(task)));
            }
            let state = self.answer_task(lease, answer, now).await?;
            Ok(Answered::Taken { state, task: Box::new(task) })
        })
    }

    /// A task, after applying what `now` decides about it ([`StoredTask::settled_at`]).
    fn settle_task<'a>(
        &'a self,
        task: &'a TaskId,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Option<StoredTask>, StoreError>>;

    /// Of `tasks`, those of `tenant` a worker holds (`claimed`) whose runs are cancelled or
    /// asked to be — what the worker holding them must stop — in one read (ids unknown or of
    /// another tenant are left out).
    fn cancelling_among<'a>(
        &'a self,
        tenant: &'a str,
        tasks: &'a [TaskId],
    ) -> BoxFuture<'a, Result<Vec<TaskId>, StoreError>>;

    /// Writes the row of a recompute's task (`spec.recompute`): one no journal entry stands
    /// behind, for a step of `run` that a recompute executes again in its sandbox. Workers
    /// claim it like any other; its answer goes to the recompute waiting for it (which reads
    /// the task), never to the run's journal. Announced like a dispatched task.
    fn dispatch_for_recompute<'a>(
        &'a self,
        run: RunId,
        path: &'a StepPath,
        attempt: u32,
        spec: &'a TaskSpec,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<(), StoreError>>;

    /// Tasks matching a filter, newest first.
    fn list_tasks<'a>(&'a self, filter: &'a TaskFilter) -> BoxFuture<'a, Result<Vec<StoredTask>, StoreError>>;
}

/// Whether a worker offering `offered` may run `handler`: the same name, and the same
/// version when the task names one (`summarise@2` goes only to a worker offering
/// `summarise@2`; a worker offering `summarise@2` also takes unversioned `summarise`).
pub fn offers(offered: &[String], handler: &str) -> bool {
    offered.iter().any(|o| o == handler || (!handler.contains('@') && o.split('@').next() == Some(handler)))
}

/// The answer to a repeated or late answer on a task in `state`, answered under `token`
/// while the task's current token is `current`: the same answer again is accepted as done;
/// anything else is a lost lease.
pub fn repeated_answer(
    state: TaskState,
    current: u64,
    token: u64,
    answer: &TaskAnswer,
) -> Option<Result<TaskState, ()>> {
    if current != token {
        return Some(Err(()));
    }
    if state == TaskState::Pending && *answer == TaskAnswer::Release {
        return Some(Ok(state));
    }
    if state.is_final() {
        return Some(if state == answer.state() { Ok(state) } else { Err(()) });
    }
    None
}

/// Whether a task passes a filter.
pub fn matches(task: &StoredTask, filter: &TaskFilter) -> bool {
    filter.tenant.as_ref().is_none_or(|t| task.tenant.as_deref().unwrap_or_default() == t)
        && filter.queue.as_ref().is_none_or(|q| &task.spec.queue == q)
        && filter.state.is_none_or(|s| task.state == s)
        && filter.run.is_none_or(|r| task.run == r)
}

/// A task row as the store writes it when the `dispatched` entry is appended.
pub fn new_task(
    spec: TaskSpec,
    run: RunId,
    path: StepPath,
    attempt: u32,
    record: &crate::journal::RunRecord,
    at: Timestamp,
) -> StoredTask {
    StoredTask::born(spec, run, path, attempt, record.caller.tenant.clone(), record.workflow.clone(), at)
}

impl StoredTask {
    /// The row of `spec`, dispatched at `at` by `run` (of `tenant` and `workflow`) for the
    /// step at `path`: as every store writes it.
    pub fn born(
        spec: TaskSpec,
        run: RunId,
        path: StepPath,
        attempt: u32,
        tenant: Option<String>,
        workflow: String,
        at: Timestamp,
    ) -> Self {
        let details = spec.details.clone();
        let born = Born::of(&spec, at);
        Self {
            spec,
            run,
            path,
            attempt,
            tenant,
            workflow,
            created_at: at,
            state: born.state,
            worker: born.worker,
            lease_token: born.lease_token,
            lease_expires: born.lease_expires,
            claimed_at: born.claimed_at,
            details,
            output: None,
            error: None,
            finished_at: None,
        }
    }
}

/// How a task row starts: pending, or — a task handed over at dispatch (pushed, or matched to
/// a parked claim) — already leased to its holder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Born {
    /// Its state.
    pub state: TaskState,
    /// Who holds it.
    pub worker: Option<String>,
    /// Its lease's token.
    pub lease_token: u64,
    /// When that lease runs out.
    pub lease_expires: Option<Timestamp>,
    /// When it was claimed.
    pub claimed_at: Option<Timestamp>,
}

impl Born {
    /// How the task `spec` dispatched at `at` starts.
    pub fn of(spec: &TaskSpec, at: Timestamp) -> Self {
        match &spec.leased_to {
            Some(holder) => Self {
                state: TaskState::Claimed,
                worker: Some(holder.clone()),
                lease_token: 1,
                lease_expires: Some(at.plus(spec.lease_for())),
                claimed_at: Some(at),
            },
            None => {
                Self { state: TaskState::Pending, worker: None, lease_token: 0, lease_expires: None, claimed_at: None }
            }
        }
    }
}

/// The rules every store applies to a task row the same way (SQLite and the in-memory store
/// apply them to the row they read under their lock; Postgres under `FOR UPDATE`).
pub mod rules {
    use super::{Beat, Claim, StoredTask, TaskAnswer, TaskLease, TaskState, offers, repeated_answer};
    use crate::ids::Timestamp;
    use crate::store::StoreError;
    use serde_json::Value;

    /// Pending tasks a claim looks at, at most, per task it may take: those its worker cannot
    /// take (a handler version it does not offer, a concurrency limit reached) are passed
    /// over, this many at most. A store reads them a page at a time, each as large as what
    /// the claim may still take.
    pub const LOOKED_AT_PER_SLOT: usize = 8;

    /// Whether `claim` may take `task` (before its concurrency is counted).
    pub fn claimable(task: &StoredTask, claim: &Claim) -> bool {
        task.state == TaskState::Pending
            && task.tenant.as_deref().unwrap_or_default() == claim.tenant
            && task.spec.queue == claim.queue
            && offers(&claim.handlers, &task.spec.handler)
    }

    /// Leases `task` to `worker` until its lease length from `now`, under a new token.
    pub fn lease(task: &mut StoredTask, worker: &str, now: Timestamp) {
        task.state = TaskState::Claimed;
        task.worker = Some(worker.to_owned());
        task.lease_token += 1;
        task.lease_expires = Some(now.plus(task.spec.lease_for()));
        task.claimed_at.get_or_insert(now);
    }

    /// Applies what `now` decides (a lapsed lease, no worker in time); whether it changed.
    pub fn settle(task: &mut StoredTask, now: Timestamp) -> bool {
        match task.settled_at(now) {
            Some(state) => {
                task.state = state;
                task.finished_at = Some(now);
                true
            }
            None => false,
        }
    }

    /// Renews `lease` on `task` with `details`; `cancelled`: the task's run is cancelled or
    /// asked to be.
    pub fn beat(
        task: &mut StoredTask,
        lease: &TaskLease,
        details: Option<Value>,
        now: Timestamp,
        cancelled: bool,
    ) -> Beat {
        settle(task, now);
        if task.state != TaskState::Claimed || task.lease_token != lease.token {
            return Beat::Lost;
        }
        let until = now.plus(task.spec.lease_for());
        task.lease_expires = Some(until);
        if details.is_some() {
            task.details = details;
        }
        if cancelled { Beat::Cancel(until) } else { Beat::Renewed(until) }
    }

    /// Applies a worker's answer under `lease` (see [`super::TaskStore::answer_task`]).
    pub fn answer(
        task: &mut StoredTask,
        lease: &TaskLease,
        answer: TaskAnswer,
        now: Timestamp,
    ) -> Result<TaskState, StoreError> {
        settle(task, now);
        let lost = || StoreError::TaskLeaseLost { task: task.spec.id.clone(), token: lease.token };
        if let Some(repeated) = repeated_answer(task.state, task.lease_token, lease.token, &answer) {
            return repeated.map_err(|()| lost());
        }
        if task.state != TaskState::Claimed {
            return Err(lost());
        }
        match answer {
            TaskAnswer::Complete(output) => task.output = Some(output),
            TaskAnswer::Fail(error) => task.error = Some(error),
            TaskAnswer::Cancelled => {}
            TaskAnswer::Release => {
                task.state = TaskState::Pending;
                task.worker = None;
                task.lease_expires = None;
                return Ok(TaskState::Pending);
            }
            TaskAnswer::Defer(lasts) => {
                task.lease_expires = Some(now.plus(lasts));
                return Ok(TaskState::Claimed);
            }
        }
        task.state = match task.output.is_some() {
            true => TaskState::Completed,
            false if task.error.is_some() => TaskState::Failed,
            false => TaskState::Cancelled,
        };
        task.lease_expires = None;
        task.finished_at = Some(now);
        Ok(task.state)
    }
}

/// The task table of the in-memory store: rows under one lock, and its signals.
#[derive(Default)]
pub(crate) struct InMemoryTasks {
    pub(crate) rows: std::sync::Mutex<std::collections::BTreeMap<TaskId, StoredTask>>,
    pub(crate) signals: TaskSignals,
}

/// A store's in-process task notifications: new tasks wake the parked claims (few); an
/// answered task wakes only the step that waits for it (many steps may hold at once, and
/// waking them all on every answer would make each answer cost as many reads as there are
/// holders).
#[derive(Default)]
pub struct TaskSignals {
    dispatched: tokio::sync::Notify,
    answered: std::sync::Mutex<std::collections::HashMap<TaskId, std::sync::Weak<AnswerWaiter>>>,
    parked: std::sync::Mutex<ParkedClaims>,
}

/// What a step waiting for its task's answer in this process is woken by: the answer's
/// notification, and the answered task itself when the answer was written in this process
/// (the step then reads nothing back). An answer written by another process (Postgres) only
/// notifies; the step reads the task.
#[derive(Debug, Default)]
pub struct AnswerWaiter {
    notify: std::sync::Arc<tokio::sync::Notify>,
    answered: std::sync::Mutex<Option<StoredTask>>,
}

impl AnswerWaiter {
    /// What the answer notifies (enable a `notified()` before looking).
    #[must_use]
    pub fn notify(&self) -> std::sync::Arc<tokio::sync::Notify> {
        self.notify.clone()
    }

    /// The answered task handed over by an answer written in this process, if one was.
    pub fn take(&self) -> Option<StoredTask> {
        self.answered.lock().expect("poisoned").take()
    }
}

/// The claims parked in this process, waiting for a task.
#[derive(Default)]
struct ParkedClaims {
    next: u64,
    waiting: Vec<(u64, ParkedClaim, tokio::sync::oneshot::Sender<StoredTask>)>,
}

/// A worker's claim waiting for a task in this process: a dispatch here may hand it one
/// directly — the task born leased to the worker, in its own commit — with no look and no
/// claim write ([`TaskSignals::park`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParkedClaim {
    /// The worker.
    pub worker: String,
    /// Its namespace.
    pub tenant: String,
    /// The queue.
    pub queue: String,
    /// The handlers it offers.
    pub handlers: Vec<String>,
}

/// A parked claim a dispatch took: [`Matched::deliver`] hands it the task once committed
/// (dropped undelivered, the claim goes on waiting the usual way).
#[derive(Debug)]
pub struct Matched {
    /// The worker the task is leased to.
    pub worker: String,
    deliver: tokio::sync::oneshot::Sender<StoredTask>,
}

impl Matched {
    /// Hands the committed task to the claim; gives it back when the claim is gone meanwhile
    /// (its worker disconnected), for the caller to put back on the queue.
    #[must_use = "a task given back must go back on the queue"]
    pub fn deliver(self, task: StoredTask) -> Option<StoredTask> {
        self.deliver.send(task).err()
    }
}

/// A parked claim's place in line (see [`TaskSignals::park`]); leaving it (or dropping it)
/// takes the claim out of the line.
pub struct Parking<'a> {
    signals: &'a TaskSignals,
    id: u64,
    received: tokio::sync::oneshot::Receiver<StoredTask>,
    done: bool,
}

impl Parking<'_> {
    /// The task a dispatch handed this claim, once one has; `None` when the dispatch that
    /// took it failed (the claim then looks for tasks the usual way).
    pub async fn matched(&mut self) -> Option<StoredTask> {
        if self.done {
            return std::future::pending().await;
        }
        let task = (&mut self.received).await.ok();
        self.done = true;
        task
    }

    /// Leaves the line: no later dispatch takes this claim. A task a dispatch already took
    /// it for is returned (waited for while its commit is under way, at most `within`).
    pub async fn leave(mut self, within: std::time::Duration) -> Option<StoredTask> {
        if self.done {
            return None;
        }
        let still_waiting = self.signals.unpark(self.id);
        self.done = true;
        if still_waiting {
            return None;
        }
        tokio::time::timeout(within, &mut self.received).await.ok().and_then(Result::ok)
    }
}

impl Drop for Parking<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.signals.unpark(self.id);
        }
    }
}

impl TaskSignals {
    /// Parks `claim` until the returned place is left: a dispatch of a task it may take
    /// ([`TaskSignals::take_parked`]) hands it over directly.
    pub fn park(&self, claim: ParkedClaim) -> Parking<'_> {
        let (deliver, received) = tokio::sync::oneshot::channel();
        let mut parked = self.parked.lock().expect("poisoned");
        parked.next += 1;
        let id = parked.next;
        parked.waiting.push((id, claim, deliver));
        Parking { signals: self, id, received, done: false }
    }

    /// Takes a parked claim out of line; whether it was still in it.
    fn unpark(&self, id: u64) -> bool {
        let mut parked = self.parked.lock().expect("poisoned");
        let before = parked.waiting.len();
        parked.waiting.retain(|(waiting, _, _)| *waiting != id);
        parked.waiting.len() < before
    }

    /// The longest-parked claim that may take a task of `handler` on `queue` in `tenant`,
    /// taken out of line (one task per parked claim), if one is waiting.
    pub fn take_parked(&self, tenant: &str, queue: &str, handler: &str) -> Option<Matched> {
        let mut parked = self.parked.lock().expect("poisoned");
        let at = parked.waiting.iter().position(|(_, claim, deliver)| {
            !deliver.is_closed() && claim.tenant == tenant && claim.queue == queue && offers(&claim.handlers, handler)
        })?;
        let (_, claim, deliver) = parked.waiting.remove(at);
        Some(Matched { worker: claim.worker, deliver })
    }

    /// A task was dispatched: parked claims look.
    pub fn dispatched(&self) {
        self.dispatched.notify_waiters();
    }

    /// What a dispatch notifies (enable a `notified()` before looking).
    pub fn on_dispatch(&self) -> &tokio::sync::Notify {
        &self.dispatched
    }

    /// `task` was answered (in another process, or its new state is not at hand): the step
    /// waiting for it looks.
    pub fn answered(&self, task: &TaskId) {
        let waiter = self.answered.lock().expect("poisoned").get(task).and_then(std::sync::Weak::upgrade);
        if let Some(waiter) = waiter {
            waiter.notify.notify_waiters();
        }
    }

    /// `task` was answered in this process and is now as given: a step waiting for it is
    /// handed it (when it is final) and woken.
    pub fn answered_as(&self, task: &StoredTask) {
        let waiter = self.answered.lock().expect("poisoned").get(&task.spec.id).and_then(std::sync::Weak::upgrade);
        if let Some(waiter) = waiter {
            if task.state.is_final() {
                *waiter.answered.lock().expect("poisoned") = Some(task.clone());
            }
            waiter.notify.notify_waiters();
        }
    }

    /// Whether a step in this process is waiting for `task`'s answer now. Asked after the
    /// answer is written, `true` means the step sees it: it is still waiting, or it stopped
    /// waiting so recently that its run's suspension (if it suspends) is not yet written, and
    /// the run's last look after writing it finds the answer.
    #[must_use]
    pub fn is_awaited(&self, task: &TaskId) -> bool {
        self.answered.lock().expect("poisoned").get(task).is_some_and(|waiter| waiter.strong_count() > 0)
    }

    /// What `task`'s answer wakes and hands over; kept while the caller holds it (take it
    /// before the task can be answered, and no answer is missed).
    pub fn on_answer(&self, task: &TaskId) -> std::sync::Arc<AnswerWaiter> {
        let mut answered = self.answered.lock().expect("poisoned");
        if answered.len() > 1024 {
            answered.retain(|_, w| w.strong_count() > 0);
        }
        if let Some(waiter) = answered.get(task).and_then(std::sync::Weak::upgrade) {
            return waiter;
        }
        let waiter = std::sync::Arc::new(AnswerWaiter::default());
        answered.insert(task.clone(), std::sync::Arc::downgrade(&waiter));
        waiter
    }
}
