//! The journal: what a run records, and the [`Store`] seam that persists it.
//!
//! Every step execution goes through one recording point (the executor's recorder), which
//! turns it into [`JournalEntry`]s keyed by step path. Outputs are stored once, by hash, as
//! blobs. A store only appends and loads; it never interprets entries, so the durable
//! backends (SQLite, Postgres) plug in here without the executor changing.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::context::Caller;
use crate::error::StepError;
use crate::hash::ContentHash;
use crate::ids::{InterruptId, RunId, StepPath, Timestamp};
use crate::outcome::{InterruptRequest, Resolution};

/// A run's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Ready to run and not running: created, or stopped at a checkpoint.
    Pending,
    /// Being executed.
    Running,
    /// Waiting on at least one interrupt (approval, input, event or timer).
    Suspended,
    /// Finished with an output.
    Completed,
    /// Finished with an error.
    Failed,
    /// Cancelled.
    Cancelled,
}

impl RunStatus {
    /// The status as stores and the file format spell it (`pending`, `running`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Running => "running",
            Self::Suspended => "suspended",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }

    /// Parses [`RunStatus::as_str`]'s spelling.
    pub fn parse(text: &str) -> Option<Self> {
        [Self::Pending, Self::Running, Self::Suspended, Self::Completed, Self::Failed, Self::Cancelled]
            .into_iter()
            .find(|s| s.as_str() == text)
    }

    /// Whether the run has finished for good.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Cancelled)
    }
}

/// Where a forked run came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Lineage {
    /// The parent run.
    pub run: RunId,
    /// The step before which it was forked.
    pub at: StepPath,
}

/// A worker's claim on a run: while it holds (until `expires_at`), no other worker executes
/// the run. `token` grows with every claim; every journal write carries it, and a store
/// refuses a write whose token is not the current one (a fencing token), so a worker that
/// lost its lease cannot write after the new owner started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// The run.
    pub run: RunId,
    /// The worker holding it.
    pub owner: String,
    /// The fencing token.
    pub token: u64,
    /// When it lapses unless renewed.
    pub expires_at: Timestamp,
}

/// A workflow's source, kept by definition hash so that any process can rebuild the
/// definition a run is pinned to (workflow files; Rust definitions are registered instead).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DefinitionSource {
    /// The format: `yaml`.
    pub format: String,
    /// Where it came from (a file name), for messages.
    pub name: String,
    /// The text.
    pub source: String,
}

/// A run's header: everything but its journal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// The run's id.
    pub id: RunId,
    /// The workflow's name.
    pub workflow: String,
    /// The workflow's version.
    pub version: String,
    /// The definition hash the run is pinned to.
    pub definition_hash: ContentHash,
    /// The workflow input.
    pub input: Arc<Value>,
    /// Who started it.
    pub caller: Caller,
    /// Its status.
    pub status: RunStatus,
    /// Its output, once completed.
    pub output: Option<Value>,
    /// Its error, once failed.
    pub error: Option<StepError>,
    /// Where it was forked from.
    pub parent: Option<Lineage>,
    /// When it was created.
    pub created_at: Timestamp,
    /// When its status last changed.
    pub updated_at: Timestamp,
    /// When a timer, retry or deadline it waits on is due (suspended and pending runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake_at: Option<Timestamp>,
    /// The current lease, if a worker holds or held one that has not been released.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<Lease>,
    /// A cancel someone asked for (kept once the run is cancelled, to say who and why).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancel: Option<CancelRequest>,
}

/// A cancel asked for by someone, stored with the run: the process executing the run sees
/// it and stops, wherever it runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CancelRequest {
    /// Who asked (a user), if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// Why.
    pub reason: String,
    /// When it was asked (the caller's clock).
    pub at: Timestamp,
}

impl CancelRequest {
    /// The error a run cancelled by this request ends with.
    pub fn error(&self) -> StepError {
        StepError::cancelled(match &self.by {
            Some(by) => format!("cancelled by {by}: {}", self.reason),
            None => format!("cancelled: {}", self.reason),
        })
    }
}

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

/// Decides what a cancel request does to a run as a store has it at `now` (shared by the
/// backends, so they agree).
pub fn decide_cancel(record: &RunRecord, now: Timestamp) -> CancelOutcome {
    if record.status.is_terminal() {
        return CancelOutcome::Finished(record.status);
    }
    match &record.lease {
        Some(lease) if record.status == RunStatus::Running && lease.expires_at > now => {
            CancelOutcome::Requested { owner: lease.owner.clone(), until: lease.expires_at }
        }
        _ => CancelOutcome::Cancelled,
    }
}

/// The status change a store actually writes for `update` on a run whose status is
/// `current`: a finished run never changes again (`Finished`), and a run with a cancel
/// request that would stop without finishing (suspend, yield) is cancelled instead, so a
/// cancel that raced with a suspension is not lost.
pub fn effective_update(
    run: RunId,
    current: RunStatus,
    cancel: Option<&CancelRequest>,
    update: StatusUpdate,
) -> Result<StatusUpdate, StoreError> {
    if current.is_terminal() {
        return Err(StoreError::Finished { run, status: current });
    }
    match cancel {
        Some(request) if matches!(update.status, RunStatus::Suspended | RunStatus::Pending) => Ok(StatusUpdate {
            status: RunStatus::Cancelled,
            output: None,
            error: Some(request.error()),
            wake_at: None,
            ..update
        }),
        _ => Ok(update),
    }
}

/// One journal entry: what happened at a step path, and when.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JournalEntry {
    /// The step execution it belongs to.
    pub path: StepPath,
    /// When it was recorded.
    pub at: Timestamp,
    /// What happened.
    pub record: Record,
}

/// What a journal entry records.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Record {
    /// An attempt started.
    Started {
        /// 1-based attempt number.
        attempt: u32,
    },
    /// A fenced (`write`/`external`) attempt is about to run with this idempotency key.
    Intent {
        /// 1-based attempt number.
        attempt: u32,
        /// The key handed to the step: hash of run id and step path.
        key: String,
    },
    /// The step (or operator) completed; its output is the blob with this hash.
    Completed {
        /// The attempt that completed.
        attempt: u32,
        /// The output's hash.
        output: ContentHash,
        /// Whether the output came from the step cache.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        cached: bool,
        /// When the attempt started, if its `Started` entry was folded into this one (it is
        /// whenever both are written in the same commit, which saves a row per step).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        started_at: Option<Timestamp>,
    },
    /// An attempt failed; `retry_at` is set when another attempt will follow.
    Failed {
        /// The attempt that failed.
        attempt: u32,
        /// The error.
        error: StepError,
        /// When the next attempt is due, if there is one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        retry_at: Option<Timestamp>,
        /// When the attempt started (see `Completed::started_at`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        started_at: Option<Timestamp>,
    },
    /// The step was skipped; its output is `null`.
    Skipped {
        /// Why.
        reason: String,
    },
    /// A decision replayed on resume: a branch's arm, a map's items, a loop's verdict, a
    /// graph's next node, a tick's due time.
    Decided {
        /// The decision.
        value: Value,
    },
    /// A journaled non-deterministic value (`now`, `uuid`, `random`) inside a step.
    Value {
        /// The attempt that drew it.
        attempt: u32,
        /// Its ordinal within the attempt.
        seq: u32,
        /// The value.
        value: Value,
    },
    /// An interrupt was opened.
    InterruptOpened {
        /// Its stable id.
        id: InterruptId,
        /// What it asks.
        request: InterruptRequest,
        /// When its `on_timeout` applies.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        deadline: Option<Timestamp>,
    },
    /// An interrupt was resolved (exactly once: stores compare-and-set).
    InterruptResolved {
        /// Its id.
        id: InterruptId,
        /// The decision.
        resolution: Resolution,
    },
    /// The step saved a checkpoint and stopped (`continue`).
    Checkpoint {
        /// The attempt.
        attempt: u32,
        /// The saved state.
        state: Value,
    },
    /// The step handed off to another graph node.
    Handoff {
        /// The target node.
        target: String,
        /// Its input.
        payload: Value,
    },
    /// An artifact was captured.
    Artifact {
        /// Its kind (`llm-input`, `tool-call`, ...).
        kind: String,
        /// Its content hash.
        hash: ContentHash,
        /// Whether the content was stored (false in hash-only capture mode).
        stored: bool,
    },
    /// The step was cancelled.
    Cancelled {
        /// Why.
        reason: String,
    },
}

/// An audit event: typed, timestamped, stamped with run, step path, tenant and user.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventRecord {
    /// The run.
    pub run: RunId,
    /// The step that emitted it.
    pub path: StepPath,
    /// When.
    pub at: Timestamp,
    /// The caller's tenant.
    pub tenant: Option<String>,
    /// The caller's user.
    pub user: Option<String>,
    /// The event's type.
    pub kind: String,
    /// Its payload.
    pub data: Value,
}

/// What one commit appends: entries, the blobs they reference, and events.
#[derive(Debug, Default, Clone)]
pub struct JournalBatch {
    /// Entries in order.
    pub entries: Vec<JournalEntry>,
    /// Content-addressed values the entries reference (stored once).
    pub blobs: Vec<(ContentHash, Arc<Value>)>,
    /// Audit events.
    pub events: Vec<EventRecord>,
}

impl JournalBatch {
    /// Whether there is nothing to write.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty() && self.blobs.is_empty() && self.events.is_empty()
    }
}

/// A run as loaded for resume: header, journal in order, and the blobs it references.
#[derive(Debug, Clone)]
pub struct LoadedRun {
    /// The header.
    pub record: RunRecord,
    /// The journal, in append order.
    pub entries: Vec<JournalEntry>,
    /// Blobs by hash.
    pub blobs: HashMap<ContentHash, Arc<Value>>,
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

/// Which runs to list.
#[derive(Debug, Clone, Default)]
pub struct RunFilter {
    /// Only runs with this status.
    pub status: Option<RunStatus>,
    /// Only runs of this workflow.
    pub workflow: Option<String>,
    /// At most this many, newest first (default 100).
    pub limit: Option<usize>,
    /// Only runs older than this one (created before it, or at the same time with a
    /// smaller id): the cursor of the next page after a page ending with it.
    pub before: Option<RunId>,
    /// Leave inputs, outputs and errors out (they come back `null`): a listing that shows
    /// only headers does not read megabytes of input per run.
    pub headers_only: bool,
}

/// What retention deletes: finished runs (completed, failed, cancelled) updated before
/// `finished_before`, except the newest `keep_last` runs of each workflow.
#[derive(Debug, Clone, Default)]
pub struct Retention {
    /// Delete finished runs last updated before this time.
    pub finished_before: Option<Timestamp>,
    /// Keep this many newest finished runs per workflow whatever their age.
    pub keep_last: Option<usize>,
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
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// No run with this id.
    #[error("run {0} was not found")]
    RunNotFound(RunId),
    /// A run with this id exists already.
    #[error("run {0} exists already")]
    RunExists(RunId),
    /// The interrupt was never opened in this run.
    #[error("interrupt {interrupt} is not open in run {run}")]
    InterruptNotFound {
        /// The run.
        run: RunId,
        /// The interrupt.
        interrupt: InterruptId,
    },
    /// Another decision won the compare-and-set.
    #[error("interrupt {interrupt} of run {run} was already resolved")]
    AlreadyResolved {
        /// The run.
        run: RunId,
        /// The interrupt.
        interrupt: InterruptId,
    },
    /// Another worker holds a live lease on the run.
    #[error("run {run} is leased by {owner} until {until:?}")]
    Leased {
        /// The run.
        run: RunId,
        /// The holder.
        owner: String,
        /// Until when.
        until: Timestamp,
    },
    /// The run has finished (completed, failed or cancelled); its status never changes again.
    #[error("run {run} has already finished ({status:?})")]
    Finished {
        /// The run.
        run: RunId,
        /// How it finished.
        status: RunStatus,
    },
    /// The writer's lease is no longer the current one: another worker claimed the run.
    #[error("the lease on run {run} was lost (fencing token {token} is stale)")]
    LeaseLost {
        /// The run.
        run: RunId,
        /// The stale token.
        token: u64,
    },
    /// Stored content does not match its hash.
    #[error("blob {0} does not match its content hash")]
    Corrupt(ContentHash),
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
        /// The cause.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// The persistence seam. Implementations: [`MemoryStore`] here; SQLite and Postgres in
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

    /// Runs matching a filter, newest first.
    fn list_runs(&self, filter: RunFilter) -> BoxFuture<'_, Result<Vec<RunRecord>, StoreError>>;

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
    /// worker dedicated to one tenant).
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

    /// Waits until a cancel may have been requested (a notification) or `timeout` passes.
    /// Stores without notifications simply wait out the timeout (callers then poll).
    fn wait_for_cancel(&self, timeout: std::time::Duration) -> BoxFuture<'_, ()> {
        Box::pin(tokio::time::sleep(timeout))
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

    /// Keeps a workflow's source under its definition hash (idempotent).
    fn put_definition(&self, hash: ContentHash, source: DefinitionSource) -> BoxFuture<'_, Result<(), StoreError>>;

    /// The source kept under a definition hash.
    fn get_definition(&self, hash: ContentHash) -> BoxFuture<'_, Result<Option<DefinitionSource>, StoreError>>;

    /// Waits until work may have become available (a notification) or `timeout` passes.
    /// Stores without notifications simply wait out the timeout (runners then poll).
    fn wait_for_work(&self, timeout: std::time::Duration) -> BoxFuture<'_, ()> {
        Box::pin(tokio::time::sleep(timeout))
    }

    /// Extends a lease; fails with `LeaseLost` if the token is no longer current.
    fn heartbeat(
        &self,
        lease: &Lease,
        now: Timestamp,
        lease_for: std::time::Duration,
    ) -> BoxFuture<'_, Result<Lease, StoreError>>;
}

/// Whether a run is ready for `claim_due` at `now`.
pub fn is_due(record: &RunRecord, now: Timestamp) -> bool {
    let free = record.lease.as_ref().is_none_or(|l| l.expires_at <= now);
    free && match record.status {
        RunStatus::Pending => record.wake_at.is_none_or(|w| w <= now),
        RunStatus::Running => true,
        RunStatus::Suspended => record.wake_at.is_some_and(|w| w <= now),
        _ => false,
    }
}

/// Checks a claim against a run's header; returns the new lease.
pub fn try_claim(
    record: &RunRecord,
    owner: &str,
    now: Timestamp,
    lease_for: std::time::Duration,
) -> Result<Lease, StoreError> {
    if record.status.is_terminal() {
        return Err(StoreError::Leased {
            run: record.id,
            owner: format!("nobody: the run is {:?}", record.status).to_lowercase(),
            until: now,
        });
    }
    // A live lease is a live owner, whoever it is: even the same worker name must not run
    // a run twice at once (two `resume`s in one process, a server's two requests).
    if let Some(lease) = &record.lease
        && lease.expires_at > now
    {
        return Err(StoreError::Leased { run: record.id, owner: lease.owner.clone(), until: lease.expires_at });
    }
    let token = record.lease.as_ref().map_or(0, |l| l.token) + 1;
    Ok(Lease { run: record.id, owner: owner.to_owned(), token, expires_at: now.plus(lease_for) })
}

/// Checks a take-over (see [`Store::take_over`]) against a run's header; returns the new
/// lease.
pub fn try_take_over(
    record: &RunRecord,
    from: &str,
    owner: &str,
    now: Timestamp,
    lease_for: std::time::Duration,
) -> Result<Lease, StoreError> {
    match &record.lease {
        Some(lease) if lease.owner == from && !record.status.is_terminal() => Ok(Lease {
            run: record.id,
            owner: owner.to_owned(),
            token: lease.token + 1,
            expires_at: now.plus(lease_for),
        }),
        _ => try_claim(record, owner, now, lease_for),
    }
}

/// Which runs a retention policy removes from a list of headers (shared by the backends,
/// so they agree): finished, updated before the cut-off, and not among the newest
/// `keep_last` finished runs of their workflow.
pub fn retention_victims(runs: &[RunRecord], policy: &Retention) -> Vec<RunId> {
    let mut finished: Vec<&RunRecord> = runs.iter().filter(|r| r.status.is_terminal()).collect();
    finished.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(b.id.cmp(&a.id)));
    let mut seen: HashMap<&str, usize> = HashMap::new();
    let mut victims = Vec::new();
    for run in finished {
        let rank = seen.entry(run.workflow.as_str()).or_default();
        *rank += 1;
        if policy.keep_last.is_some_and(|keep| *rank <= keep) {
            continue;
        }
        if policy.finished_before.is_none_or(|cut| run.updated_at < cut) {
            victims.push(run.id);
        }
    }
    victims
}

/// The blob hashes an entry references.
pub fn referenced_blob(record: &Record) -> Option<ContentHash> {
    match record {
        Record::Completed { output, .. } => Some(*output),
        Record::Artifact { hash, stored: true, .. } => Some(*hash),
        _ => None,
    }
}

#[derive(Default)]
struct MemoryRun {
    record: Option<RunRecord>,
    entries: Vec<JournalEntry>,
    events: Vec<EventRecord>,
}

/// A store in memory: for tests, examples, and runs that need no durability.
///
/// Each run has its own lock and blobs are sharded, so concurrent runs on several threads
/// rarely wait for each other.
#[derive(Default)]
pub struct MemoryStore {
    runs: RwLock<HashMap<RunId, Arc<Mutex<MemoryRun>>>>,
    /// Inbox messages: `(run, inbox, seq, message)` in posting order.
    messages: Mutex<Vec<(RunId, String, u64, Value)>>,
    definitions: Mutex<HashMap<ContentHash, DefinitionSource>>,
    /// Sessions by id (see [`crate::session`]).
    pub(crate) sessions: Mutex<HashMap<String, crate::session::MemorySession>>,
    /// Memory bank items (see [`crate::bank`]).
    pub(crate) bank: Mutex<HashMap<crate::bank::MemoryAddress, crate::bank::MemoryItem>>,
    blobs: [Mutex<HashMap<ContentHash, Arc<Value>>>; BLOB_SHARDS],
    appends_left: AtomicUsize,
    fault_armed: std::sync::atomic::AtomicBool,
}

const BLOB_SHARDS: usize = 16;

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Fault injection for tests: the next `n` appends succeed, every later one fails
    /// without writing anything, as a process that died at that point would leave it.
    pub fn fail_appends_after(&self, n: usize) {
        self.appends_left.store(n, Ordering::SeqCst);
        self.fault_armed.store(true, Ordering::SeqCst);
    }

    /// Turns fault injection off.
    pub fn heal(&self) {
        self.fault_armed.store(false, Ordering::SeqCst);
    }

    /// Every entry of a run, in order (for tests and inspection).
    pub fn entries(&self, run: RunId) -> Vec<JournalEntry> {
        self.run(run).map(|r| r.lock().expect("poisoned").entries.clone()).unwrap_or_default()
    }

    /// A stored blob (a step output or an artifact) by its hash.
    pub fn blob(&self, hash: &ContentHash) -> Option<Arc<Value>> {
        self.shard(hash).lock().expect("poisoned").get(hash).cloned()
    }

    /// The number of distinct blobs.
    pub fn blob_count(&self) -> usize {
        self.blobs.iter().map(|shard| shard.lock().expect("poisoned").len()).sum()
    }

    fn run(&self, run: RunId) -> Option<Arc<Mutex<MemoryRun>>> {
        self.runs.read().expect("poisoned").get(&run).cloned()
    }

    /// Runs `change` on a run's header under the run's lock.
    fn with_record<T>(
        &self,
        run: RunId,
        change: impl FnOnce(&mut RunRecord) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let data = self.run(run).ok_or(StoreError::RunNotFound(run))?;
        let mut data = data.lock().expect("poisoned");
        change(data.record.as_mut().ok_or(StoreError::RunNotFound(run))?)
    }

    fn shard(&self, hash: &ContentHash) -> &Mutex<HashMap<ContentHash, Arc<Value>>> {
        &self.blobs[usize::from(hash.as_bytes()[0]) % BLOB_SHARDS]
    }

    fn check_fault(&self) -> Result<(), StoreError> {
        if !self.fault_armed.load(Ordering::SeqCst) {
            return Ok(());
        }
        let left = self.appends_left.load(Ordering::SeqCst);
        if left == 0 {
            return Err(StoreError::Backend {
                doing: "appending to the journal".into(),
                source: "injected fault".into(),
            });
        }
        self.appends_left.store(left - 1, Ordering::SeqCst);
        Ok(())
    }
}

impl Store for MemoryStore {
    fn create_run(&self, record: RunRecord) -> BoxFuture<'_, Result<(), StoreError>> {
        let result = (|| {
            let mut runs = self.runs.write().expect("poisoned");
            if runs.contains_key(&record.id) {
                return Err(StoreError::RunExists(record.id));
            }
            let id = record.id;
            runs.insert(id, Arc::new(Mutex::new(MemoryRun { record: Some(record), ..MemoryRun::default() })));
            Ok(())
        })();
        Box::pin(std::future::ready(result))
    }

    fn append<'a>(
        &'a self,
        run: RunId,
        fence: Option<u64>,
        batch: &'a mut JournalBatch,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let result = (|| {
            self.check_fault()?;
            let data = self.run(run).ok_or(StoreError::RunNotFound(run))?;
            let mut data = data.lock().expect("poisoned");
            check_fence(data.record.as_ref(), run, fence)?;
            for (hash, value) in batch.blobs.drain(..) {
                self.shard(&hash).lock().expect("poisoned").entry(hash).or_insert(value);
            }
            data.entries.append(&mut batch.entries);
            data.events.append(&mut batch.events);
            Ok(())
        })();
        Box::pin(std::future::ready(result))
    }

    fn set_status(&self, run: RunId, update: StatusUpdate) -> BoxFuture<'_, Result<(), StoreError>> {
        let result = (|| {
            let data = self.run(run).ok_or(StoreError::RunNotFound(run))?;
            let mut data = data.lock().expect("poisoned");
            let record = data.record.as_ref().ok_or(StoreError::RunNotFound(run))?;
            // A finished run says so first, whatever the writer's token (this store drops
            // the lease of a finished run, where the SQL stores keep its token).
            let update = effective_update(run, record.status, record.cancel.as_ref(), update)?;
            check_fence(data.record.as_ref(), run, update.fence)?;
            let record = data.record.as_mut().ok_or(StoreError::RunNotFound(run))?;
            if update.status != RunStatus::Running {
                record.lease = None;
            }
            record.status = update.status;
            record.output = update.output;
            record.error = update.error;
            record.updated_at = update.at;
            record.wake_at = update.wake_at;
            Ok(())
        })();
        Box::pin(std::future::ready(result))
    }

    fn load_from(&self, run: RunId, from: u64) -> BoxFuture<'_, Result<LoadedRun, StoreError>> {
        let result = (|| {
            let data = self.run(run).ok_or(StoreError::RunNotFound(run))?;
            let data = data.lock().expect("poisoned");
            let record = data.record.clone().ok_or(StoreError::RunNotFound(run))?;
            let entries = data.entries.get(usize::try_from(from).unwrap_or(usize::MAX)..).unwrap_or_default();
            let mut blobs = HashMap::new();
            for entry in entries {
                if let Record::Completed { output, .. } = &entry.record
                    && let Some(value) = self.shard(output).lock().expect("poisoned").get(output)
                {
                    blobs.insert(*output, value.clone());
                }
            }
            Ok(LoadedRun { record, entries: entries.to_vec(), blobs })
        })();
        Box::pin(std::future::ready(result))
    }

    fn resolve_interrupt(&self, run: RunId, entry: JournalEntry) -> BoxFuture<'_, Result<(), StoreError>> {
        let result = (|| {
            let Record::InterruptResolved { id, .. } = &entry.record else {
                return Err(StoreError::Backend {
                    doing: "resolving an interrupt".into(),
                    source: "the entry is not an interrupt resolution".into(),
                });
            };
            let data = self.run(run).ok_or(StoreError::RunNotFound(run))?;
            let mut data = data.lock().expect("poisoned");
            let mut opened = false;
            for e in &data.entries {
                match &e.record {
                    Record::InterruptOpened { id: open, .. } if open == id => opened = true,
                    Record::InterruptResolved { id: done, .. } if done == id => {
                        return Err(StoreError::AlreadyResolved { run, interrupt: id.clone() });
                    }
                    _ => {}
                }
            }
            if !opened {
                return Err(StoreError::InterruptNotFound { run, interrupt: id.clone() });
            }
            data.entries.push(entry);
            Ok(())
        })();
        Box::pin(std::future::ready(result))
    }

    fn events_from(&self, run: RunId, from: u64) -> BoxFuture<'_, Result<Vec<EventRecord>, StoreError>> {
        let result = self
            .run(run)
            .map(|r| {
                let events = &r.lock().expect("poisoned").events;
                events.get(usize::try_from(from).unwrap_or(usize::MAX)..).unwrap_or_default().to_vec()
            })
            .ok_or(StoreError::RunNotFound(run));
        Box::pin(std::future::ready(result))
    }

    fn wake_run(&self, run: RunId, now: Timestamp) -> BoxFuture<'_, Result<bool, StoreError>> {
        let result = (|| {
            let data = self.run(run).ok_or(StoreError::RunNotFound(run))?;
            let mut data = data.lock().expect("poisoned");
            let record = data.record.as_mut().ok_or(StoreError::RunNotFound(run))?;
            let later = record.wake_at.is_some_and(|at| at > now);
            if record.status == RunStatus::Suspended && later {
                record.wake_at = Some(now);
                return Ok(true);
            }
            Ok(false)
        })();
        Box::pin(std::future::ready(result))
    }

    fn list_runs(&self, filter: RunFilter) -> BoxFuture<'_, Result<Vec<RunRecord>, StoreError>> {
        let mut runs: Vec<RunRecord> = self
            .runs
            .read()
            .expect("poisoned")
            .values()
            .filter_map(|r| r.lock().expect("poisoned").record.clone())
            .filter(|r| filter.status.is_none_or(|s| s == r.status))
            .filter(|r| filter.workflow.as_deref().is_none_or(|w| w == r.workflow))
            .collect();
        if let Some(before) = filter.before {
            let cursor = self
                .run(before)
                .and_then(|data| data.lock().expect("poisoned").record.as_ref().map(|r| (r.created_at, r.id)));
            match cursor {
                Some(cursor) => runs.retain(|r| (r.created_at, r.id) < cursor),
                None => runs.clear(),
            }
        }
        runs.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(b.id.cmp(&a.id)));
        runs.truncate(filter.limit.unwrap_or(100));
        if filter.headers_only {
            for run in &mut runs {
                run.input = Arc::new(Value::Null);
                run.output = None;
                run.error = None;
            }
        }
        Box::pin(std::future::ready(Ok(runs)))
    }

    fn erase_run(&self, run: RunId) -> BoxFuture<'_, Result<Removed, StoreError>> {
        let result = self.remove(&[run]);
        Box::pin(std::future::ready(result))
    }

    fn apply_retention(&self, policy: Retention) -> BoxFuture<'_, Result<Removed, StoreError>> {
        let all: Vec<RunRecord> = self
            .runs
            .read()
            .expect("poisoned")
            .values()
            .filter_map(|r| r.lock().expect("poisoned").record.clone())
            .collect();
        let result = self.remove(&retention_victims(&all, &policy));
        Box::pin(std::future::ready(result))
    }

    fn claim(
        &self,
        run: RunId,
        owner: &str,
        now: Timestamp,
        lease_for: std::time::Duration,
    ) -> BoxFuture<'_, Result<Lease, StoreError>> {
        let result = self.with_record(run, |record| {
            let lease = try_claim(record, owner, now, lease_for)?;
            record.lease = Some(lease.clone());
            Ok(lease)
        });
        Box::pin(std::future::ready(result))
    }

    fn take_over(
        &self,
        run: RunId,
        from: &str,
        owner: &str,
        now: Timestamp,
        lease_for: std::time::Duration,
    ) -> BoxFuture<'_, Result<Lease, StoreError>> {
        let result = self.with_record(run, |record| {
            let lease = try_take_over(record, from, owner, now, lease_for)?;
            record.lease = Some(lease.clone());
            Ok(lease)
        });
        Box::pin(std::future::ready(result))
    }

    fn request_cancel(
        &self,
        run: RunId,
        request: CancelRequest,
        now: Timestamp,
    ) -> BoxFuture<'_, Result<CancelOutcome, StoreError>> {
        let result = self.with_record(run, |record| {
            let outcome = decide_cancel(record, now);
            match &outcome {
                CancelOutcome::Finished(_) => {}
                CancelOutcome::Requested { .. } => record.cancel = Some(request),
                CancelOutcome::Cancelled => {
                    record.status = RunStatus::Cancelled;
                    record.output = None;
                    record.error = Some(request.error());
                    record.updated_at = now;
                    record.wake_at = None;
                    // The token grows, so a holder that stalled past its lease cannot write.
                    record.lease = record.lease.take().map(|l| Lease { token: l.token + 1, expires_at: now, ..l });
                    record.cancel = Some(request);
                }
            }
            Ok(outcome)
        });
        Box::pin(std::future::ready(result))
    }

    fn cancel_requests(&self, runs: &[RunId]) -> BoxFuture<'_, Result<Vec<(RunId, CancelRequest)>, StoreError>> {
        let found = runs
            .iter()
            .filter_map(|run| {
                let data = self.run(*run)?;
                let data = data.lock().expect("poisoned");
                let record = data.record.as_ref()?;
                record.cancel.clone().map(|request| (*run, request))
            })
            .collect();
        Box::pin(std::future::ready(Ok(found)))
    }

    fn claim_due(
        &self,
        owner: &str,
        now: Timestamp,
        lease_for: std::time::Duration,
        limit: usize,
        tenant: Option<&str>,
    ) -> BoxFuture<'_, Result<Vec<Lease>, StoreError>> {
        let runs: Vec<Arc<Mutex<MemoryRun>>> = self.runs.read().expect("poisoned").values().cloned().collect();
        let mut leases = Vec::new();
        for data in runs {
            if leases.len() >= limit {
                break;
            }
            let mut data = data.lock().expect("poisoned");
            let Some(record) = data.record.as_mut() else { continue };
            if is_due(record, now)
                && tenant.is_none_or(|t| record.caller.tenant.as_deref() == Some(t))
                && let Ok(lease) = try_claim(record, owner, now, lease_for)
            {
                record.lease = Some(lease.clone());
                leases.push(lease);
            }
        }
        Box::pin(std::future::ready(Ok(leases)))
    }

    fn put_definition(&self, hash: ContentHash, source: DefinitionSource) -> BoxFuture<'_, Result<(), StoreError>> {
        self.definitions.lock().expect("poisoned").entry(hash).or_insert(source);
        Box::pin(std::future::ready(Ok(())))
    }

    fn get_definition(&self, hash: ContentHash) -> BoxFuture<'_, Result<Option<DefinitionSource>, StoreError>> {
        let found = self.definitions.lock().expect("poisoned").get(&hash).cloned();
        Box::pin(std::future::ready(Ok(found)))
    }

    fn post_message(&self, run: RunId, inbox: &str, message: Value) -> BoxFuture<'_, Result<u64, StoreError>> {
        let mut messages = self.messages.lock().expect("poisoned");
        let seq = messages.last().map_or(0, |m| m.2 + 1);
        messages.push((run, inbox.to_owned(), seq, message));
        Box::pin(std::future::ready(Ok(seq)))
    }

    fn next_message(
        &self,
        run: RunId,
        inbox: &str,
        after: Option<u64>,
    ) -> BoxFuture<'_, Result<Option<(u64, Value)>, StoreError>> {
        let found = self
            .messages
            .lock()
            .expect("poisoned")
            .iter()
            .find(|(r, i, seq, _)| *r == run && i == inbox && after.is_none_or(|a| *seq > a))
            .map(|(_, _, seq, m)| (*seq, m.clone()));
        Box::pin(std::future::ready(Ok(found)))
    }

    fn heartbeat(
        &self,
        lease: &Lease,
        now: Timestamp,
        lease_for: std::time::Duration,
    ) -> BoxFuture<'_, Result<Lease, StoreError>> {
        let result = (|| {
            let data = self.run(lease.run).ok_or(StoreError::RunNotFound(lease.run))?;
            let mut data = data.lock().expect("poisoned");
            check_fence(data.record.as_ref(), lease.run, Some(lease.token))?;
            let record = data.record.as_mut().ok_or(StoreError::RunNotFound(lease.run))?;
            let renewed = Lease { expires_at: now.plus(lease_for), ..lease.clone() };
            record.lease = Some(renewed.clone());
            Ok(renewed)
        })();
        Box::pin(std::future::ready(result))
    }
}

/// Refuses a write whose fencing token is not the run's current lease token.
pub fn check_fence(record: Option<&RunRecord>, run: RunId, fence: Option<u64>) -> Result<(), StoreError> {
    let Some(token) = fence else { return Ok(()) };
    let current = record.and_then(|r| r.lease.as_ref()).map(|l| l.token);
    if current == Some(token) { Ok(()) } else { Err(StoreError::LeaseLost { run, token }) }
}

impl MemoryStore {
    fn remove(&self, victims: &[RunId]) -> Result<Removed, StoreError> {
        self.messages.lock().expect("poisoned").retain(|(run, ..)| !victims.contains(run));
        // A run's own memory goes with it.
        self.bank.lock().expect("poisoned").retain(
            |address, _| !matches!(&address.scope, crate::bank::MemoryScope::Run(run) if victims.contains(run)),
        );
        let mut runs = self.runs.write().expect("poisoned");
        let mut removed = Removed::default();
        for id in victims {
            if runs.remove(id).is_some() {
                removed.runs += 1;
            }
        }
        let mut live = std::collections::HashSet::new();
        for run in runs.values() {
            for entry in &run.lock().expect("poisoned").entries {
                live.extend(referenced_blob(&entry.record));
            }
        }
        for shard in &self.blobs {
            let mut shard = shard.lock().expect("poisoned");
            let before = shard.len();
            shard.retain(|hash, _| live.contains(hash));
            removed.blobs += before - shard.len();
        }
        Ok(removed)
    }
}
