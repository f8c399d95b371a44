//! The store seam: the [`Store`] trait that persists runs, and what its operations take and
//! return. Implementations: [`InMemoryStore`] here; SQLite and Postgres in `stepwright-store`.
//! Helpers shared by the implementations (so that they agree) are in [`backend`].

pub mod backend;
pub mod bank;
pub mod cache;
mod tick;
pub mod event;
pub mod experiment;
mod memory;
pub mod quota;
pub mod schedule;
pub mod session;
pub mod task;

use futures_util::future::BoxFuture;
use serde_json::Value;

use crate::error::StepError;
use crate::hash::ContentHash;
use crate::ids::{InterruptId, RunId, Timestamp};
use crate::journal::{
    CancelRequest, DefinitionSource, EventRecord, JournalBatch, JournalEntry, Lease, LoadedRun, RunRecord, RunStatus,
};

pub use memory::InMemoryStore;

/// What asking to cancel a run did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CancelOutcome {
    /// The run had already finished; nothing changed.
    Finished(RunStatus),
    /// Nobody was executing the run: it is now cancelled.
    Cancelled,
    /// A live process executes the run: the request is stored, and that process stops the
    /// run (its running steps see their tokens fire, no later step starts).
    Requested {
        /// The worker executing it.
        owner: String,
        /// Until when its lease runs unless renewed.
        until: Timestamp,
    },
}

/// A status change at the end of an execution.
#[derive(Debug, Clone)]
pub struct StatusUpdate {
    /// The new status.
    pub status: RunStatus,
    /// The output (completed runs).
    pub output: Option<Value>,
    /// The error (failed runs).
    pub error: Option<StepError>,
    /// When.
    pub at: Timestamp,
    /// When the run must be resumed (a timer, a retry, a deadline), if it waits on one.
    pub wake_at: Option<Timestamp>,
    /// The writer's fencing token (`None`: no lease check). Any status but `running`
    /// releases the lease.
    pub fence: Option<u64>,
}

impl StatusUpdate {
    /// The run is executing again (a resume): no output, no error, no wake-up.
    pub fn running(at: Timestamp, fence: Option<u64>) -> Self {
        Self { status: RunStatus::Running, output: None, error: None, at, wake_at: None, fence }
    }

    /// The run completed with `output`.
    pub fn completed(output: Value, at: Timestamp, fence: Option<u64>) -> Self {
        Self { status: RunStatus::Completed, output: Some(output), error: None, at, wake_at: None, fence }
    }

    /// The run ended without finishing: failed or cancelled with `error`.
    pub fn ended(status: RunStatus, error: StepError, at: Timestamp, fence: Option<u64>) -> Self {
        Self { status, output: None, error: Some(error), at, wake_at: None, fence }
    }
}

/// Which runs to list.
#[derive(Debug, Clone, Default)]
pub struct RunFilter {
    /// Only runs with this status.
    pub status: Option<RunStatus>,
    /// Only runs of this workflow.
    pub workflow: Option<String>,
    /// Only runs started in this tenant (`Caller::tenant`): a server scopes every listing
    /// to the namespace of the key that asks.
    pub tenant: Option<String>,
    /// At most this many, newest first (default 100).
    pub limit: Option<usize>,
    /// Only runs older than this one (created before it, or at the same time with a
    /// smaller id): the cursor of the next page after a page ending with it.
    pub before: Option<RunId>,
    /// Leave inputs, outputs and errors out (they come back `null`): a listing that shows
    /// only headers does not read megabytes of input per run.
    pub headers_only: bool,
    /// Only runs last updated at or after this time, and then the least recently updated
    /// first (what a reader of changes pages through; `before` does not apply).
    pub updated_since: Option<Timestamp>,
    /// Only runs created at or after this time.
    pub created_from: Option<Timestamp>,
    /// Only runs created before this time.
    pub created_until: Option<Timestamp>,
    /// Only runs whose input, as stored JSON text, contains this text (ignoring ASCII case):
    /// a person looking for "the run about invoice 1042".
    pub input_contains: Option<String>,
    /// Only runs forked from this run (its lineage's children).
    pub parent: Option<RunId>,
    /// Only runs of this concurrency group (what a waiting run waits behind).
    pub concurrency_key: Option<String>,
    /// Only runs started by this user (`Caller::user`: a person's id, `schedule:NAME`,
    /// `trigger:NAME`).
    pub started_by: Option<String>,
    /// Only runs with this tag among their `tags`.
    pub tag: Option<String>,
}

/// What retention deletes: finished runs (completed, failed, cancelled) updated before
/// `finished_before`, except the newest `keep_last` runs of each workflow.
#[derive(Debug, Clone, Default)]
pub struct Retention {
    /// Delete finished runs last updated before this time.
    pub finished_before: Option<Timestamp>,
    /// Keep this many newest finished runs per workflow whatever their age.
    pub keep_last: Option<usize>,
    /// Only finished runs that ended so (completed, failed or cancelled).
    pub status: Option<RunStatus>,
}

/// What a retention pass or an erase removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Removed {
    /// Runs deleted (with their journal, events and interrupts).
    pub runs: usize,
    /// Blobs no run references any more.
    pub blobs: usize,
}

/// Errors from a store operation.
// The variants' fields are named for what they hold and the variant's message says how
// they relate; a doc per field would only repeat its name.
#[allow(missing_docs)]
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// No run with this id.
    #[error("run {0} was not found")]
    RunNotFound(RunId),
    /// A run with this id exists already.
    #[error("run {0} exists already")]
    RunExists(RunId),
    /// No task with this id.
    #[error("task {0} was not found")]
    TaskNotFound(task::TaskId),
    /// A worker answered a task under a lease that is not the task's current one (it ran
    /// out, or the task was answered or claimed again).
    #[error("the lease on task {task} is no longer this worker's (token {token})")]
    TaskLeaseLost {
        /// The task.
        task: task::TaskId,
        /// The stale token.
        token: u64,
    },
    /// The interrupt was never opened in this run.
    #[error("interrupt {interrupt} is not open in run {run}")]
    InterruptNotFound { run: RunId, interrupt: InterruptId },
    /// Another decision won the compare-and-set.
    #[error("interrupt {interrupt} of run {run} was already resolved")]
    AlreadyResolved { run: RunId, interrupt: InterruptId },
    /// Another worker holds a live lease on the run.
    #[error("run {run} is leased by {owner} until {until:?}")]
    Leased {
        run: RunId,
        owner: String,
        /// Until when.
        until: Timestamp,
    },
    /// The run has finished (completed, failed or cancelled); its status never changes again.
    #[error("run {run} has already finished ({status:?})")]
    Finished {
        run: RunId,
        /// How it finished.
        status: RunStatus,
    },
    /// The writer's lease is no longer the current one: another worker claimed the run.
    #[error("the lease on run {run} was lost (fencing token {token} is stale)")]
    LeaseLost {
        run: RunId,
        /// The stale token.
        token: u64,
    },
    /// Stored content does not match its hash.
    #[error("blob {0} does not match its content hash")]
    Corrupt(ContentHash),
    /// A pending run of a concurrency group whose group is full: it waits its turn.
    #[error("run {run} waits for a slot in concurrency group {key:?} ({limit} at a time)")]
    Queued {
        run: RunId,
        /// The group.
        key: String,
        /// How many of its runs may execute at once.
        limit: u32,
    },
    /// The caller may not read or change this (a session another user owns).
    #[error("access denied: {0}")]
    AccessDenied(String),
    /// The request itself is invalid (an empty session id, a memory key too long…).
    #[error("invalid request: {0}")]
    Invalid(String),
    /// The backend failed.
    #[error("store backend failed while {doing}")]
    Backend {
        /// What was being done.
        doing: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl StoreError {
    /// Whose fault it is (see [`Fault`](crate::Fault)).
    pub fn fault(&self) -> crate::error::Fault {
        use crate::error::Fault;
        match self {
            Self::RunNotFound(_)
            | Self::TaskNotFound(_)
            | Self::TaskLeaseLost { .. }
            | Self::RunExists(_)
            | Self::InterruptNotFound { .. }
            | Self::AlreadyResolved { .. }
            | Self::Leased { .. }
            | Self::Finished { .. }
            | Self::Queued { .. }
            | Self::AccessDenied(_)
            | Self::Invalid(_) => Fault::Caller,
            Self::LeaseLost { .. } | Self::Corrupt(_) | Self::Backend { .. } => Fault::Engine,
        }
    }

    /// A stable code for the error (`docs/error-codes.md`).
    pub fn code(&self) -> &'static str {
        match self {
            Self::RunNotFound(_) | Self::TaskNotFound(_) => "not_found",
            Self::TaskLeaseLost { .. } => "lease_lost",
            Self::RunExists(_) => "run_exists",
            Self::InterruptNotFound { .. } => "not_found",
            Self::AlreadyResolved { .. } => "already_resolved",
            Self::Leased { .. } => "leased",
            Self::Finished { .. } => "finished",
            Self::Queued { .. } => "queued",
            Self::LeaseLost { .. } => "lease_lost",
            Self::Corrupt(_) => "corrupt",
            Self::AccessDenied(_) => "access_denied",
            Self::Invalid(_) => "invalid",
            Self::Backend { .. } => "store_failed",
        }
    }
}

/// The persistence seam. Implementations: [`InMemoryStore`] here; SQLite and Postgres in
/// `stepwright-store`. Methods return boxed futures so the trait is object-safe.
pub trait Store: Send + Sync + 'static {
    /// Creates a run (its header); fails if the id exists.
    fn create_run(&self, record: RunRecord) -> BoxFuture<'_, Result<(), StoreError>>;

    /// Appends a batch atomically: all of it is visible, or none. With a `fence`, the write
    /// fails with `LeaseLost` unless it is the run's current lease token. The store drains
    /// the batch (so the caller can reuse its buffers); on error its content is undefined.
    fn append<'a>(
        &'a self,
        run: RunId,
        fence: Option<u64>,
        batch: &'a mut JournalBatch,
    ) -> BoxFuture<'a, Result<(), StoreError>>;

    /// Changes a run's status (and output or error).
    fn set_status(&self, run: RunId, update: StatusUpdate) -> BoxFuture<'_, Result<(), StoreError>>;

    /// Loads a run for resume.
    fn load(&self, run: RunId) -> BoxFuture<'_, Result<LoadedRun, StoreError>> {
        self.load_from(run, 0)
    }

    /// Loads a run's header and its journal from position `from` on (entries are numbered
    /// from 0 in append order), with the blobs those entries reference: what a follower of a
    /// live run has not seen yet. The header is read before the entries, and a run's status
    /// changes only after its last append, so once the header says the run has finished the
    /// entries returned are the last there are.
    fn load_from(&self, run: RunId, from: u64) -> BoxFuture<'_, Result<LoadedRun, StoreError>>;

    /// Appends an `InterruptResolved` entry if and only if the interrupt is open and not yet
    /// resolved (compare-and-set: of two concurrent decisions exactly one wins).
    fn resolve_interrupt(&self, run: RunId, entry: JournalEntry) -> BoxFuture<'_, Result<(), StoreError>>;

    /// A run's events, in order.
    fn events(&self, run: RunId) -> BoxFuture<'_, Result<Vec<EventRecord>, StoreError>> {
        self.events_from(run, 0)
    }

    /// A run's events from position `from` on (numbered from 0 in append order).
    fn events_from(&self, run: RunId, from: u64) -> BoxFuture<'_, Result<Vec<EventRecord>, StoreError>>;

    /// A run's events of one kind, in order: what a report needs of a run without reading
    /// every event it has (`model.call`: what its model calls cost).
    fn events_of_kind<'a>(&'a self, run: RunId, kind: &'a str) -> BoxFuture<'a, Result<Vec<EventRecord>, StoreError>> {
        Box::pin(async move { Ok(self.events(run).await?.into_iter().filter(|e| e.kind == kind).collect()) })
    }

    /// Shows `visit` a run's events of one kind, in order, without handing out copies where
    /// the store need not make them (the memory store shows its own, under its lock): a
    /// roll-up that reads a few fields of each (what a run's model calls cost) pays for no
    /// copy of the rest. `visit` must not call the store.
    fn visit_events_of_kind<'a>(
        &'a self,
        run: RunId,
        kind: &'a str,
        visit: &'a mut (dyn FnMut(&EventRecord) + Send),
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            self.events_of_kind(run, kind).await?.iter().for_each(visit);
            Ok(())
        })
    }

    /// A stored value by its hash — an artifact's content (`load` reads completed outputs
    /// only, so that resuming a run never reads its model inputs back); `None` if no blob
    /// has that hash.
    fn blob(&self, hash: ContentHash) -> BoxFuture<'_, Result<Option<std::sync::Arc<Value>>, StoreError>>;

    /// Runs matching a filter, newest first.
    fn list_runs(&self, filter: RunFilter) -> BoxFuture<'_, Result<Vec<RunRecord>, StoreError>>;

    /// The headers of those of `runs` that exist (without input, output and error, as a
    /// [`RunFilter::headers_only`] listing gives them), in the order asked: what a caller
    /// that names its runs by id reads before it works on them, in one read where the
    /// store can. Name each run once.
    fn run_headers(&self, runs: Vec<RunId>) -> BoxFuture<'_, Result<Vec<RunRecord>, StoreError>> {
        Box::pin(async move {
            let mut headers = Vec::with_capacity(runs.len());
            for run in runs {
                match self.load_from(run, u64::MAX).await {
                    Ok(loaded) => headers.push(RunRecord {
                        input: std::sync::Arc::new(Value::Null),
                        output: None,
                        error: None,
                        ..loaded.record
                    }),
                    Err(StoreError::RunNotFound(_)) => {}
                    Err(e) => return Err(e),
                }
            }
            Ok(headers)
        })
    }

    /// Deletes one run and everything it recorded, then every blob no run references.
    fn erase_run(&self, run: RunId) -> BoxFuture<'_, Result<Removed, StoreError>>;

    /// Deletes finished runs as the policy says, then every blob no run references.
    fn apply_retention(&self, policy: Retention) -> BoxFuture<'_, Result<Removed, StoreError>>;

    /// Claims one run for `owner` until `now + lease_for`: succeeds if the run is not
    /// finished and has no live lease held by another owner. Postgres takes `now` from the
    /// database; other stores use the one given.
    fn claim(
        &self,
        run: RunId,
        owner: &str,
        now: Timestamp,
        lease_for: std::time::Duration,
    ) -> BoxFuture<'_, Result<Lease, StoreError>>;

    /// Claims up to `limit` runs that are ready: pending, or suspended with `wake_at` due,
    /// or running under an expired lease (its worker died) — skipping runs another worker
    /// is claiming at the same moment. With a `tenant`, only runs started in that tenant (a
    /// worker dedicated to one tenant). A store may mark a claimed pending run `running` in
    /// the same write (Postgres does: one statement fewer per run); the engine then does
    /// not write that status again.
    fn claim_due(
        &self,
        owner: &str,
        now: Timestamp,
        lease_for: std::time::Duration,
        limit: usize,
        tenant: Option<&str>,
    ) -> BoxFuture<'_, Result<Vec<Lease>, StoreError>>;

    /// Takes over a run whose lease `from` holds, however fresh, because that owner is known
    /// to be gone (a process on this host that no longer exists); a run with no live lease
    /// is claimed as by [`Store::claim`]. Fails with `Leased` if someone else holds it.
    fn take_over(
        &self,
        run: RunId,
        from: &str,
        owner: &str,
        now: Timestamp,
        lease_for: std::time::Duration,
    ) -> BoxFuture<'_, Result<Lease, StoreError>>;

    /// Asks for a run to be cancelled (see [`decide_cancel`]): a run nobody executes is
    /// cancelled at once (its lease token grows, so a stalled holder can no longer write); a
    /// run a live process executes keeps the request, which that process sees through
    /// [`Store::cancel_requests`]. Postgres takes `now` from the database.
    fn request_cancel(
        &self,
        run: RunId,
        request: CancelRequest,
        now: Timestamp,
    ) -> BoxFuture<'_, Result<CancelOutcome, StoreError>>;

    /// The cancel requests stored for any of `runs` (the runs a process executes).
    fn cancel_requests(&self, runs: &[RunId]) -> BoxFuture<'_, Result<Vec<(RunId, CancelRequest)>, StoreError>>;

    /// Waits until a cancel may have been requested (a notification: `true`) or `timeout`
    /// passes (`false`). Stores without notifications simply wait out the timeout (callers
    /// then poll).
    fn wait_for_cancel(&self, timeout: std::time::Duration) -> BoxFuture<'_, bool> {
        Box::pin(async move {
            tokio::time::sleep(timeout).await;
            false
        })
    }

    /// Whether [`Store::wait_for_cancel`] reports every cancel request as it is made (then a
    /// process looks for requests when told, not at every poll).
    fn announces_cancels(&self) -> bool {
        false
    }

    /// Stores a message for a loop inbox of a run (the run need not exist yet) and returns
    /// its sequence number; messages of one inbox are taken in this order.
    fn post_message(&self, run: RunId, inbox: &str, message: Value) -> BoxFuture<'_, Result<u64, StoreError>>;

    /// Brings a run's timer forward: if the run is suspended with a `wake_at` later than
    /// `now`, it becomes `now`, so that a runner claims the run at once (a wake channel was
    /// woken from outside). Returns whether it did. Runs waiting on nothing but a person
    /// (no `wake_at`) are left alone. Postgres takes `now` from the database.
    fn wake_run(&self, run: RunId, now: Timestamp) -> BoxFuture<'_, Result<bool, StoreError>>;

    /// The first message of an inbox after sequence number `after` (from the start if none).
    fn next_message(
        &self,
        run: RunId,
        inbox: &str,
        after: Option<u64>,
    ) -> BoxFuture<'_, Result<Option<(u64, Value)>, StoreError>>;

    /// The events of `tenant` named `name` in the event log ([`event`]) after sequence
    /// number `after` (from the start if none) and received at or after `since`, oldest
    /// first, at most `limit`: what a `wait` may take besides its inbox's messages. A store
    /// without an event log has none.
    fn logged_events<'a>(
        &'a self,
        tenant: Option<&'a str>,
        name: &'a str,
        after: Option<u64>,
        since: Timestamp,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<event::StoredEvent>, StoreError>> {
        let _ = (tenant, name, after, since, limit);
        Box::pin(std::future::ready(Ok(Vec::new())))
    }

    /// Registers the wait of a suspended run on events named `name` in `tenant`: the next
    /// such event stored brings the run's timer forward (as [`Store::wake_run`]). A
    /// registration is used once; a run still waiting registers again.
    fn watch_events<'a>(
        &'a self,
        run: RunId,
        tenant: Option<&'a str>,
        name: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let _ = (run, tenant, name);
        Box::pin(std::future::ready(Ok(())))
    }

    /// Keeps a workflow's source under its definition hash (idempotent).
    fn put_definition(&self, hash: ContentHash, source: DefinitionSource) -> BoxFuture<'_, Result<(), StoreError>>;

    /// The source kept under a definition hash.
    fn get_definition(&self, hash: ContentHash) -> BoxFuture<'_, Result<Option<DefinitionSource>, StoreError>>;

    /// Waits until work may have become available (a notification) or `timeout` passes.
    /// Stores without notifications simply wait out the timeout (runners then poll).
    fn wait_for_work(&self, timeout: std::time::Duration) -> BoxFuture<'_, ()> {
        Box::pin(tokio::time::sleep(timeout))
    }

    /// Extends the leases of the runs one worker executes: one answer per lease, in order —
    /// renewed, or `LeaseLost` if its token is no longer current. The default renews them
    /// one by one at once; a store with round trips to a server does it in one statement.
    fn renew_leases<'a>(
        &'a self,
        leases: &'a [Lease],
        now: Timestamp,
        lease_for: std::time::Duration,
    ) -> BoxFuture<'a, Result<Vec<Result<Lease, StoreError>>, StoreError>> {
        Box::pin(async move {
            Ok(futures_util::future::join_all(leases.iter().map(|lease| self.heartbeat(lease, now, lease_for))).await)
        })
    }

    /// Extends a lease; fails with `LeaseLost` if the token is no longer current.
    fn heartbeat(
        &self,
        lease: &Lease,
        now: Timestamp,
        lease_for: std::time::Duration,
    ) -> BoxFuture<'_, Result<Lease, StoreError>>;

    /// The store's step tasks (`worker:` tools), if it keeps them: the stores that persist
    /// do; a store without them fails a `worker:` step with a clear error.
    fn tasks(&self) -> Option<&dyn task::TaskStore> {
        None
    }

    /// The store's in-process task notifications (a task dispatched, a task answered), if
    /// it has them; parked claims and holding steps enable them before they look, so nothing
    /// announced while they look is missed. Without them, callers poll.
    fn task_signals(&self) -> Option<&task::TaskSignals> {
        None
    }
}
