//! Group commit of run creations, journal appends and status changes: the writes of every
//! run this process executes go through a few lanes (a run always through the same one), and
//! each lane commits the creations queued on it as one statement, the appends as one — the run rows locked and their
//! counters moved, the fencing token checked per run, journal rows, events, interrupts and
//! blobs inserted — and the status changes queued with them as a second — acknowledging each
//! caller after the commit.
//!
//! A lane waits for nothing: it commits as soon as it has something, and what arrives while
//! it commits goes in its next batch, so one run alone pays one commit per append while many
//! share one. A run whose token does not match (its lease was lost) or that does not exist
//! fails alone: its rows are not written, the others' are. A batch the database refuses as a
//! whole (a deadlock, a value the database rejects) is applied again one append per
//! statement, so what failed fails alone there too. A status change the batched update does
//! not write (a finished run, a stale token, a cancel request that turns a suspension into a
//! cancellation) is redone with the run's row locked, which applies or explains it.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures_util::future::BoxFuture;
use sqlx::PgPool;
use stepwright_core::journal::{JournalBatch, RunRecord};
use stepwright_core::store::StatusUpdate;
use stepwright_core::store::backend::referenced_blob;
use stepwright_core::{Record, RunId, RunStatus, StoreError};
use tokio::sync::{mpsc, oneshot};

use super::{check_token, pg, set_status_locked, to_value};
use crate::encoding::{EncodedBlobs, encode_batch_blobs};

/// The most appends one commit takes.
const MAX_BATCH: usize = 512;

/// Lanes per process: enough that a commit's wait for the disk overlaps the next batch's.
const LANES: usize = 4;

/// One caller's append, waiting for its commit.
struct Pending {
    run: RunId,
    fence: Option<u64>,
    batch: JournalBatch,
    ack: oneshot::Sender<Result<JournalBatch, StoreError>>,
}

/// One caller's status change, waiting for its commit; answered with the status written.
struct PendingStatus {
    run: RunId,
    update: StatusUpdate,
    ack: oneshot::Sender<Result<RunStatus, StoreError>>,
}

/// One caller's new run, waiting for its commit.
struct PendingCreate {
    record: RunRecord,
    ack: oneshot::Sender<Result<(), StoreError>>,
}

/// What a lane commits.
enum Write {
    // Boxed: a run's record is several times larger than the other writes.
    Create(Box<PendingCreate>),
    Append(Pending),
    Status(PendingStatus),
}

/// How group commit has gone in this process.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct GroupCommitStats {
    /// Commits made.
    pub commits: u64,
    /// Appends they carried.
    pub appends: u64,
    /// The most appends one commit carried.
    pub largest: u64,
}

#[derive(Default)]
struct Counters {
    commits: AtomicU64,
    appends: AtomicU64,
    largest: AtomicU64,
}

/// The lanes of one store.
pub(super) struct GroupCommit {
    lanes: Vec<mpsc::UnboundedSender<Write>>,
    counters: Arc<Counters>,
}

impl GroupCommit {
    /// Starts the lanes on the current runtime; they stop when the store is dropped.
    pub(super) fn start(pool: &PgPool) -> Self {
        let counters = Arc::new(Counters::default());
        let lanes = (0..LANES)
            .map(|_| {
                let (sender, receiver) = mpsc::unbounded_channel();
                tokio::spawn(lane(pool.clone(), receiver, counters.clone()));
                sender
            })
            .collect();
        Self { lanes, counters }
    }

    /// Creates a run in the next commit of its lane (`RunExists` if its id is taken).
    pub(super) fn create(&self, record: RunRecord) -> BoxFuture<'static, Result<(), StoreError>> {
        self.submit(record.id, |ack| Write::Create(Box::new(PendingCreate { record, ack })))
    }

    /// Appends `batch` to `run`'s journal in the next commit of its lane; hands the drained
    /// batch back (the caller keeps its buffers' capacity).
    pub(super) fn append(
        &self,
        run: RunId,
        fence: Option<u64>,
        batch: JournalBatch,
    ) -> BoxFuture<'static, Result<JournalBatch, StoreError>> {
        self.submit(run, |ack| Write::Append(Pending { run, fence, batch, ack }))
    }

    /// Writes a status change in the next commit of the run's lane; answers with the status
    /// written (a cancel request turns a suspension into a cancellation).
    pub(super) fn set_status(
        &self,
        run: RunId,
        update: StatusUpdate,
    ) -> BoxFuture<'static, Result<RunStatus, StoreError>> {
        self.submit(run, |ack| Write::Status(PendingStatus { run, update, ack }))
    }

    /// Queues a write on the run's lane now (so the order of a run's writes is the order
    /// of these calls) and answers once its commit is done.
    fn submit<T: Send + 'static>(
        &self,
        run: RunId,
        write: impl FnOnce(oneshot::Sender<Result<T, StoreError>>) -> Write,
    ) -> BoxFuture<'static, Result<T, StoreError>> {
        let (ack, answer) = oneshot::channel();
        let sent = self.lane(run).send(write(ack));
        Box::pin(async move {
            sent.map_err(|_| stopped())?;
            answer.await.map_err(|_| stopped())?
        })
    }

    fn lane(&self, run: RunId) -> &mpsc::UnboundedSender<Write> {
        &self.lanes[(run.as_uuid().as_u128() % self.lanes.len() as u128) as usize]
    }

    pub(super) fn stats(&self) -> GroupCommitStats {
        GroupCommitStats {
            commits: self.counters.commits.load(Ordering::Relaxed),
            appends: self.counters.appends.load(Ordering::Relaxed),
            largest: self.counters.largest.load(Ordering::Relaxed),
        }
    }
}

fn stopped() -> StoreError {
    crate::encoding::backend("appending to the journal", std::io::Error::other("the store's commit lane stopped"))
}

/// Commits what is queued on one lane, batch after batch, until the store is dropped: the
/// new runs first, then the appends, then the status changes (a run's appends follow its
/// creation, and its status change its appends, each of which its caller waited for).
async fn lane(pool: PgPool, mut queue: mpsc::UnboundedReceiver<Write>, counters: Arc<Counters>) {
    let mut writes = Vec::with_capacity(MAX_BATCH);
    let (mut creates, mut appends, mut statuses) = (Vec::new(), Vec::with_capacity(MAX_BATCH), Vec::new());
    while queue.recv_many(&mut writes, MAX_BATCH).await > 0 {
        for write in writes.drain(..) {
            match write {
                Write::Create(create) => creates.push(*create),
                Write::Append(append) => appends.push(append),
                Write::Status(status) => statuses.push(status),
            }
        }
        if !creates.is_empty() {
            commit_creates(&pool, &mut creates).await;
        }
        if !appends.is_empty() {
            counters.commits.fetch_add(1, Ordering::Relaxed);
            counters.appends.fetch_add(appends.len() as u64, Ordering::Relaxed);
            counters.largest.fetch_max(appends.len() as u64, Ordering::Relaxed);
            commit(&pool, &mut appends).await;
        }
        if !statuses.is_empty() {
            commit_statuses(&pool, &mut statuses).await;
        }
    }
}

/// Creates a batch of runs in one statement; a run whose id appears twice in the batch is
/// created on its own after the others (so the second one hears that the id is taken).
async fn commit_creates(pool: &PgPool, pending: &mut Vec<PendingCreate>) {
    let mut seen = HashSet::with_capacity(pending.len());
    let (together, after): (Vec<PendingCreate>, Vec<PendingCreate>) =
        pending.drain(..).partition(|p| seen.insert(p.record.id));
    let records: Vec<&RunRecord> = together.iter().map(|p| &p.record).collect();
    let created = insert_runs(pool, &records).await;
    for PendingCreate { record, ack } in together {
        let result = match &created {
            Ok(created) if created.contains(&record.id) => Ok(()),
            Ok(_) => Err(StoreError::RunExists(record.id)),
            // Refused as a whole: each again on its own, where what fails fails alone.
            Err(_) => create_alone(pool, &record).await,
        };
        drop(ack.send(result));
    }
    for PendingCreate { record, ack } in after {
        drop(ack.send(create_alone(pool, &record).await));
    }
}

async fn create_alone(pool: &PgPool, record: &RunRecord) -> Result<(), StoreError> {
    if insert_runs(pool, &[record]).await?.contains(&record.id) {
        Ok(())
    } else {
        Err(StoreError::RunExists(record.id))
    }
}

/// Inserts runs (those whose id is free); returns the ids inserted. A lease's expiry is
/// measured on the database's clock.
pub(crate) async fn insert_runs<'c>(
    executor: impl sqlx::PgExecutor<'c>,
    records: &[&RunRecord],
) -> Result<HashSet<RunId>, StoreError> {
    let n = records.len();
    let mut c = RunColumns::with_capacity(n);
    for r in records {
        let lease = r.lease.as_ref();
        c.ids.push(r.id.as_uuid());
        c.workflows.push(r.workflow.as_str());
        c.versions.push(r.version.as_str());
        c.hashes.push(&r.definition_hash.as_bytes()[..]);
        c.inputs.push(&*r.input);
        c.callers.push(to_value(&r.caller));
        c.statuses.push(r.status.as_str());
        c.outputs.push(r.output.as_ref());
        c.errors.push(r.error.as_ref().map(to_value));
        c.parent_runs.push(r.parent.as_ref().map(|p| p.run.as_uuid()));
        c.parent_paths.push(r.parent.as_ref().map(|p| p.at.as_str()));
        c.created.push(r.created_at.as_micros());
        c.updated.push(r.updated_at.as_micros());
        c.wakes.push(r.wake_at.map(stepwright_core::Timestamp::as_micros));
        c.owners.push(lease.map(|l| l.owner.as_str()));
        c.tokens.push(lease.map_or(0, |l| l.token as i64));
        // The lease's length; its end is counted from the database's now.
        c.lease_for.push(lease.map_or(0, |l| (l.expires_at.as_micros() - r.created_at.as_micros()).max(0)));
        c.priorities.push(r.flow.priority);
        c.group_keys.push(r.flow.concurrency.as_ref().map(|g| g.key.as_str()));
        c.group_limits.push(r.flow.concurrency.as_ref().map(|g| i32::try_from(g.limit).unwrap_or(i32::MAX)));
        c.tags.push((!r.tags.is_empty()).then(|| to_value(&r.tags)));
    }
    let created: Vec<uuid::Uuid> = sqlx::query_scalar(
        "INSERT INTO stepwright_runs (id, workflow, version, definition_hash, input, caller, status, output, error, \
           parent_run, parent_path, created_at, updated_at, wake_at, lease_owner, lease_token, lease_expires, \
           priority, concurrency_key, concurrency_limit, tags) \
         SELECT id, workflow, version, hash, input, caller, status, output, error, parent_run, parent_path, \
           created_at, updated_at, wake_at, lease_owner, lease_token, \
           CASE WHEN lease_owner IS NULL THEN NULL ELSE stepwright_now_us() + lease_for END, \
           priority, group_key, group_limit, tags \
         FROM UNNEST($1::uuid[], $2::text[], $3::text[], $4::bytea[], $5::jsonb[], $6::jsonb[], $7::text[], \
           $8::jsonb[], $9::jsonb[], $10::uuid[], $11::text[], $12::bigint[], $13::bigint[], $14::bigint[], \
           $15::text[], $16::bigint[], $17::bigint[], $18::int[], $19::text[], $20::int[], $21::jsonb[]) \
           AS c(id, workflow, version, hash, input, caller, status, output, error, parent_run, parent_path, \
                created_at, updated_at, wake_at, lease_owner, lease_token, lease_for, priority, group_key, \
                group_limit, tags) \
         ON CONFLICT (id) DO NOTHING RETURNING id",
    )
    .bind(&c.ids)
    .bind(&c.workflows)
    .bind(&c.versions)
    .bind(&c.hashes)
    .bind(&c.inputs)
    .bind(&c.callers)
    .bind(&c.statuses)
    .bind(&c.outputs)
    .bind(&c.errors)
    .bind(&c.parent_runs)
    .bind(&c.parent_paths)
    .bind(&c.created)
    .bind(&c.updated)
    .bind(&c.wakes)
    .bind(&c.owners)
    .bind(&c.tokens)
    .bind(&c.lease_for)
    .bind(&c.priorities)
    .bind(&c.group_keys)
    .bind(&c.group_limits)
    .bind(&c.tags)
    .fetch_all(executor)
    .await
    .map_err(pg("creating runs"))?;
    Ok(created.into_iter().map(|id| RunId::from_bytes(id.into_bytes())).collect())
}

/// The columns of [`insert_runs`]'s statement.
struct RunColumns<'a> {
    ids: Vec<uuid::Uuid>,
    workflows: Vec<&'a str>,
    versions: Vec<&'a str>,
    hashes: Vec<&'a [u8]>,
    inputs: Vec<&'a serde_json::Value>,
    callers: Vec<serde_json::Value>,
    statuses: Vec<&'static str>,
    outputs: Vec<Option<&'a serde_json::Value>>,
    errors: Vec<Option<serde_json::Value>>,
    parent_runs: Vec<Option<uuid::Uuid>>,
    parent_paths: Vec<Option<&'a str>>,
    created: Vec<i64>,
    updated: Vec<i64>,
    wakes: Vec<Option<i64>>,
    owners: Vec<Option<&'a str>>,
    tokens: Vec<i64>,
    lease_for: Vec<i64>,
    priorities: Vec<i32>,
    group_keys: Vec<Option<&'a str>>,
    group_limits: Vec<Option<i32>>,
    tags: Vec<Option<serde_json::Value>>,
}

impl RunColumns<'_> {
    fn with_capacity(n: usize) -> Self {
        Self {
            ids: Vec::with_capacity(n),
            workflows: Vec::with_capacity(n),
            versions: Vec::with_capacity(n),
            hashes: Vec::with_capacity(n),
            inputs: Vec::with_capacity(n),
            callers: Vec::with_capacity(n),
            statuses: Vec::with_capacity(n),
            outputs: Vec::with_capacity(n),
            errors: Vec::with_capacity(n),
            parent_runs: Vec::with_capacity(n),
            parent_paths: Vec::with_capacity(n),
            created: Vec::with_capacity(n),
            updated: Vec::with_capacity(n),
            wakes: Vec::with_capacity(n),
            owners: Vec::with_capacity(n),
            tokens: Vec::with_capacity(n),
            lease_for: Vec::with_capacity(n),
            priorities: Vec::with_capacity(n),
            group_keys: Vec::with_capacity(n),
            group_limits: Vec::with_capacity(n),
            tags: Vec::with_capacity(n),
        }
    }
}

/// Writes a batch of status changes in one statement, where nothing stands in the way; each
/// of the rest with the run's row locked. Answers each caller.
async fn commit_statuses(pool: &PgPool, pending: &mut Vec<PendingStatus>) {
    // One change per run in the statement; a second one for a run waits for the first.
    let mut seen = HashSet::with_capacity(pending.len());
    let (together, after): (Vec<PendingStatus>, Vec<PendingStatus>) =
        pending.drain(..).partition(|p| seen.insert(p.run));
    let written = write_statuses(pool, &together).await.ok();
    for op in together.into_iter().chain(after) {
        let PendingStatus { run, update, ack } = op;
        let result = match &written {
            Some(written) if written.contains(&run) => Ok(update.status),
            _ => set_status_locked(pool, run, update).await,
        };
        drop(ack.send(result));
    }
}

/// The batched status update: a run is written only if it is unfinished, its token is the
/// update's fence, and no cancel request would turn the update into a cancellation.
async fn write_statuses(pool: &PgPool, pending: &[PendingStatus]) -> Result<HashSet<RunId>, StoreError> {
    let n = pending.len();
    let (mut runs, mut statuses, mut outputs, mut errors, mut ats, mut wakes, mut fences) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    for PendingStatus { run, update, .. } in pending {
        runs.push(run.as_uuid());
        statuses.push(update.status.as_str());
        outputs.push(update.output.clone());
        errors.push(update.error.as_ref().map(to_value));
        ats.push(update.at.as_micros());
        wakes.push(update.wake_at.map(stepwright_core::Timestamp::as_micros));
        fences.push(update.fence.map(|f| f as i64));
    }
    let written: Vec<uuid::Uuid> = sqlx::query_scalar(
        "UPDATE stepwright_runs r SET status = u.status, output = u.output, error = u.error, updated_at = u.at, \
           wake_at = u.wake_at, \
           lease_owner = CASE WHEN u.status <> 'running' THEN NULL ELSE r.lease_owner END, \
           lease_expires = CASE WHEN u.status <> 'running' THEN NULL ELSE r.lease_expires END \
         FROM UNNEST($1::uuid[], $2::text[], $3::jsonb[], $4::jsonb[], $5::bigint[], $6::bigint[], $7::bigint[]) \
              AS u(id, status, output, error, at, wake_at, fence) \
         WHERE r.id = u.id AND r.status IN ('pending', 'running', 'suspended') \
           AND (u.fence IS NULL OR r.lease_token = u.fence) \
           AND (u.status NOT IN ('pending', 'suspended') OR r.cancel_request IS NULL) \
         RETURNING r.id",
    )
    .bind(&runs)
    .bind(&statuses)
    .bind(&outputs)
    .bind(&errors)
    .bind(&ats)
    .bind(&wakes)
    .bind(&fences)
    .fetch_all(pool)
    .await
    .map_err(pg("setting runs' status"))?;
    Ok(written.into_iter().map(|id| RunId::from_bytes(id.into_bytes())).collect())
}

/// Commits a batch of appends and answers each caller.
async fn commit(pool: &PgPool, pending: &mut Vec<Pending>) {
    // Two appends to one run with different tokens cannot share the run's check: the later
    // ones go one by one, after.
    let mut fences: HashMap<RunId, Option<u64>> = HashMap::with_capacity(pending.len());
    let (grouped, alone): (Vec<Pending>, Vec<Pending>) =
        pending.drain(..).partition(|p| *fences.entry(p.run).or_insert(p.fence) == p.fence);
    // Refused as a whole: each append again on its own, where what failed fails alone.
    let written = commit_together(pool, &grouped).await.ok();
    for op in grouped {
        let result = match &written {
            Some(written) if written.contains(&op.run) => Ok(()),
            Some(_) => Err(refusal(pool, op.run, op.fence).await),
            None => append_alone(pool, &op).await,
        };
        answer(op, result);
    }
    for op in alone {
        let result = append_alone(pool, &op).await;
        answer(op, result);
    }
}

fn answer(op: Pending, result: Result<(), StoreError>) {
    let Pending { mut batch, ack, .. } = op;
    let result = result.map(|()| {
        batch.entries.clear();
        batch.blobs.clear();
        batch.events.clear();
        batch
    });
    // A caller that stopped waiting no longer needs the answer; its write stands.
    drop(ack.send(result));
}

/// One append on its own (the same statement, with one run): the path a refused batch
/// falls back to, where what the database refuses is this append's error alone.
async fn append_alone(pool: &PgPool, op: &Pending) -> Result<(), StoreError> {
    if commit_together(pool, std::slice::from_ref(op)).await?.contains(&op.run) {
        Ok(())
    } else {
        Err(refusal(pool, op.run, op.fence).await)
    }
}

/// Why a run's append was not written: it does not exist, or its token is not the fence.
async fn refusal(pool: &PgPool, run: RunId, fence: Option<u64>) -> StoreError {
    let token: Result<Option<i64>, _> = sqlx::query_scalar("SELECT lease_token FROM stepwright_runs WHERE id = $1")
        .bind(run.as_uuid())
        .fetch_optional(pool)
        .await;
    match token {
        Ok(Some(token)) => check_token(run, token as u64, fence).err().unwrap_or_else(|| {
            // The token matches now: it was taken and given back between the two reads.
            StoreError::LeaseLost { run, token: fence.unwrap_or_default() }
        }),
        Ok(None) => StoreError::RunNotFound(run),
        Err(e) => crate::encoding::backend("appending to the journal", e),
    }
}

/// The rows of one batch statement, column by column.
#[derive(Default)]
struct Columns {
    runs: Vec<uuid::Uuid>,
    fences: Vec<Option<i64>>,
    entry_counts: Vec<i64>,
    event_counts: Vec<i64>,
    entry_runs: Vec<uuid::Uuid>,
    entry_offsets: Vec<i64>,
    entry_paths: Vec<String>,
    entry_ats: Vec<i64>,
    entry_records: Vec<serde_json::Value>,
    entry_blobs: Vec<Option<Vec<u8>>>,
    entry_values: Vec<Option<Vec<u8>>>,
    event_runs: Vec<uuid::Uuid>,
    event_offsets: Vec<i64>,
    event_paths: Vec<String>,
    event_ats: Vec<i64>,
    event_tenants: Vec<Option<String>>,
    event_users: Vec<Option<String>>,
    event_kinds: Vec<String>,
    event_datas: Vec<serde_json::Value>,
    interrupt_runs: Vec<uuid::Uuid>,
    interrupt_ids: Vec<String>,
    interrupt_paths: Vec<String>,
    blob_hashes: Vec<Vec<u8>>,
    blob_codecs: Vec<i16>,
    blob_datas: Vec<Vec<u8>>,
    task_ids: Vec<String>,
    task_runs: Vec<uuid::Uuid>,
    task_paths: Vec<String>,
    task_attempts: Vec<i32>,
    task_queues: Vec<String>,
    task_handlers: Vec<String>,
    task_specs: Vec<serde_json::Value>,
    task_ats: Vec<i64>,
}

/// Writes every append of the batch whose run exists and whose token matches, in one
/// statement (so one commit); returns the runs written.
async fn commit_together(pool: &PgPool, pending: &[Pending]) -> Result<HashSet<RunId>, StoreError> {
    let mut columns = Columns::default();
    // Per run: its fence and how many entries and events the batch adds, in run order.
    let mut per_run: BTreeMap<RunId, (Option<u64>, i64, i64)> = BTreeMap::new();
    let mut seen_blobs = HashSet::new();
    for op in pending {
        let counts = per_run.entry(op.run).or_insert((op.fence, 0, 0));
        let run = op.run.as_uuid();
        let EncodedBlobs { inline, stored } = encode_batch_blobs(&op.batch);
        for (hash, codec, bytes) in stored {
            if seen_blobs.insert(hash) {
                columns.blob_hashes.push(hash.as_bytes().to_vec());
                columns.blob_codecs.push(codec as i16);
                columns.blob_datas.push(bytes);
            }
        }
        for entry in &op.batch.entries {
            let referenced = referenced_blob(&entry.record);
            let value = referenced.and_then(|h| inline.get(&h)).cloned();
            let blob = if value.is_some() { None } else { referenced.map(|h| h.as_bytes().to_vec()) };
            if let Record::InterruptOpened { id, .. } = &entry.record {
                columns.interrupt_runs.push(run);
                columns.interrupt_ids.push(id.as_str().to_owned());
                columns.interrupt_paths.push(entry.path.as_str().to_owned());
            }
            if let Record::Dispatched { attempt, task } = &entry.record {
                columns.task_ids.push(task.id.as_str().to_owned());
                columns.task_runs.push(run);
                columns.task_paths.push(entry.path.as_str().to_owned());
                columns.task_attempts.push(i32::try_from(*attempt).unwrap_or(i32::MAX));
                columns.task_queues.push(task.queue.clone());
                columns.task_handlers.push(task.handler.clone());
                columns.task_specs.push(to_value(task));
                columns.task_ats.push(entry.at.as_micros());
            }
            columns.entry_runs.push(run);
            columns.entry_offsets.push(counts.1);
            counts.1 += 1;
            columns.entry_paths.push(entry.path.as_str().to_owned());
            columns.entry_ats.push(entry.at.as_micros());
            columns.entry_records.push(to_value(&entry.record));
            columns.entry_blobs.push(blob);
            columns.entry_values.push(value);
        }
        for event in &op.batch.events {
            columns.event_runs.push(run);
            columns.event_offsets.push(counts.2);
            counts.2 += 1;
            columns.event_paths.push(event.path.as_str().to_owned());
            columns.event_ats.push(event.at.as_micros());
            columns.event_tenants.push(event.tenant.clone());
            columns.event_users.push(event.user.clone());
            columns.event_kinds.push(event.kind.clone());
            columns.event_datas.push(event.data.clone());
        }
    }
    for (run, (fence, entries, events)) in &per_run {
        columns.runs.push(run.as_uuid());
        columns.fences.push(fence.map(|f| f as i64));
        columns.entry_counts.push(*entries);
        columns.event_counts.push(*events);
    }
    // Every part joins `locked`: a run that is missing or whose token differs is not
    // updated, so none of its rows are inserted.
    let written: Vec<uuid::Uuid> = sqlx::query_scalar(
        "WITH batch AS ( \
             SELECT * FROM UNNEST($1::uuid[], $2::bigint[], $3::bigint[], $4::bigint[]) AS b(id, fence, entries, events) \
         ), locked AS ( \
             UPDATE stepwright_runs r SET journal_next = r.journal_next + b.entries, event_next = r.event_next + b.events \
             FROM batch b WHERE r.id = b.id AND (b.fence IS NULL OR r.lease_token = b.fence) \
             RETURNING r.id, r.journal_next - b.entries AS seq, r.event_next - b.events AS event_seq \
         ), blobs AS ( \
             INSERT INTO stepwright_blobs (hash, codec, data) \
             SELECT * FROM UNNEST($23::bytea[], $24::smallint[], $25::bytea[]) ON CONFLICT (hash) DO NOTHING \
         ), journal AS ( \
             INSERT INTO stepwright_journal (run_id, seq, path, at, record, blob, value) \
             SELECT e.run, l.seq + e.n, e.path, e.at, e.record, e.blob, e.value \
             FROM UNNEST($5::uuid[], $6::bigint[], $7::text[], $8::bigint[], $9::jsonb[], $10::bytea[], $11::bytea[]) \
                  AS e(run, n, path, at, record, blob, value) \
             JOIN locked l ON l.id = e.run \
         ), events AS ( \
             INSERT INTO stepwright_events (run_id, seq, path, at, tenant, user_id, kind, data) \
             SELECT v.run, l.event_seq + v.n, v.path, v.at, v.tenant, v.user_id, v.kind, v.data \
             FROM UNNEST($12::uuid[], $13::bigint[], $14::text[], $15::bigint[], $16::text[], $17::text[], $18::text[], $19::jsonb[]) \
                  AS v(run, n, path, at, tenant, user_id, kind, data) \
             JOIN locked l ON l.id = v.run \
         ), interrupts AS ( \
             INSERT INTO stepwright_interrupts (run_id, id, path, resolved) \
             SELECT i.run, i.id, i.path, false FROM UNNEST($20::uuid[], $21::text[], $22::text[]) AS i(run, id, path) \
             JOIN locked l ON l.id = i.run ON CONFLICT DO NOTHING \
         ), tasks AS ( \
             INSERT INTO stepwright_tasks (id, run_id, path, attempt, tenant, workflow, queue, handler, spec, state, created_at, \
                                           details, worker, lease_token, lease_expires, claimed_at) \
             SELECT t.id, t.run, t.path, t.attempt, COALESCE(r.caller->>'tenant', ''), r.workflow, t.queue, t.handler, \
                    t.spec, CASE WHEN t.spec->>'leased_to' IS NULL THEN 'pending' ELSE 'claimed' END, t.at, t.spec->'details', \
                    t.spec->>'leased_to', CASE WHEN t.spec->>'leased_to' IS NULL THEN 0 ELSE 1 END, \
                    CASE WHEN t.spec->>'leased_to' IS NOT NULL THEN t.at + GREATEST((t.spec->>'lease_ms')::bigint, 1) * 1000 END, \
                    CASE WHEN t.spec->>'leased_to' IS NOT NULL THEN t.at END \
             FROM UNNEST($26::text[], $27::uuid[], $28::text[], $29::int[], $30::text[], $31::text[], $32::jsonb[], $33::bigint[]) \
                  AS t(id, run, path, attempt, queue, handler, spec, at) \
             JOIN locked l ON l.id = t.run JOIN stepwright_runs r ON r.id = t.run ON CONFLICT (id) DO NOTHING \
         ) \
         SELECT id FROM locked",
    )
    .bind(&columns.runs)
    .bind(&columns.fences)
    .bind(&columns.entry_counts)
    .bind(&columns.event_counts)
    .bind(&columns.entry_runs)
    .bind(&columns.entry_offsets)
    .bind(&columns.entry_paths)
    .bind(&columns.entry_ats)
    .bind(&columns.entry_records)
    .bind(&columns.entry_blobs)
    .bind(&columns.entry_values)
    .bind(&columns.event_runs)
    .bind(&columns.event_offsets)
    .bind(&columns.event_paths)
    .bind(&columns.event_ats)
    .bind(&columns.event_tenants)
    .bind(&columns.event_users)
    .bind(&columns.event_kinds)
    .bind(&columns.event_datas)
    .bind(&columns.interrupt_runs)
    .bind(&columns.interrupt_ids)
    .bind(&columns.interrupt_paths)
    .bind(&columns.blob_hashes)
    .bind(&columns.blob_codecs)
    .bind(&columns.blob_datas)
    .bind(&columns.task_ids)
    .bind(&columns.task_runs)
    .bind(&columns.task_paths)
    .bind(&columns.task_attempts)
    .bind(&columns.task_queues)
    .bind(&columns.task_handlers)
    .bind(&columns.task_specs)
    .bind(&columns.task_ats)
    .fetch_all(pool)
    .await
    .map_err(pg("appending to the journal"))?;
    Ok(written.into_iter().map(|id| RunId::from_bytes(id.into_bytes())).collect())
}
