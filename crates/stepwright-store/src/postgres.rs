//! The Postgres store: many workers, one database.
//!
//! Every write that touches a run's journal locks the run's row (`SELECT … FOR UPDATE`),
//! checks the writer's fencing token there, and appends in the same transaction, so a
//! worker that lost its lease cannot write. Runs are claimed with `FOR UPDATE SKIP LOCKED`
//! (two workers claiming at once take different runs); lease times come from the
//! database's clock, so workers whose clocks disagree still agree on expiry. Writes that make
//! work available send `NOTIFY stepwright_work` (after their commit, at most one per 10 ms
//! per process); runners listen, and poll as a fallback.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use serde_json::Value;
use sqlx::postgres::{PgConnectOptions, PgListener, PgPool, PgPoolOptions, PgRow};
use sqlx::{Row, Transaction};
use stepwright_core::journal::{
    CancelRequest, Concurrency, DefinitionSource, EventRecord, FlowControl, JournalBatch, JournalEntry, Lease, Lineage,
    LoadedRun, RunRecord,
};
use stepwright_core::store::backend::{decide_cancel, effective_update, referenced_blob, retention_victims};
use stepwright_core::store::{CancelOutcome, Removed, Retention, RunFilter, StatusUpdate};
use stepwright_core::{ContentHash, InterruptId, Record, RunId, RunStatus, StepPath, Store, StoreError, Timestamp};

use crate::encoding::{CODEC_JSON, EncodedBlobs, backend, decode_blob, encode_batch_blobs};

mod group_commit;
mod bank;
mod cache;
mod control;
mod quota;
mod events;
mod schedules;
mod sessions;

pub use group_commit::GroupCommitStats;

const MIGRATIONS: &[(i64, &str)] = &[
    (1, include_str!("postgres/001_initial.sql")),
    (2, include_str!("postgres/002_messages.sql")),
    (3, include_str!("postgres/003_definitions.sql")),
    (4, include_str!("postgres/004_sessions_memory.sql")),
    (5, include_str!("postgres/005_counters_cancel.sql")),
    (6, include_str!("postgres/006_control.sql")),
    (7, include_str!("postgres/007_flow_control.sql")),
    (8, include_str!("postgres/008_step_cache.sql")),
    (9, include_str!("postgres/009_claims_say_takeovers.sql")),
    (10, include_str!("postgres/010_schedules.sql")),
    (11, include_str!("postgres/011_events.sql")),
];

/// How long connecting to the database may take before it is reported as unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The channel runners listen on.
pub const WORK_CHANNEL: &str = "stepwright_work";

/// The channel a cancel request is announced on (the payload is the run id), so the process
/// executing the run sees it at once rather than at its next poll.
pub const CANCEL_CHANNEL: &str = "stepwright_cancel";

/// A durable store in a Postgres database.
pub struct PostgresStore {
    pool: PgPool,
    writer: group_commit::GroupCommit,
    notifier: WorkNotifier,
    listener: tokio::sync::Mutex<Option<PgListener>>,
    cancel_listener: tokio::sync::Mutex<Option<PgListener>>,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore").finish_non_exhaustive()
    }
}

pub(crate) fn pg(doing: &str) -> impl Fn(sqlx::Error) -> StoreError + '_ {
    move |e| backend(doing, e)
}

impl PostgresStore {
    /// Connects to `url` (`postgres://…`) and applies migrations.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        let options: PgConnectOptions = url.parse().map_err(pg("parsing the postgres url"))?;
        Self::connect_with(options).await
    }

    /// Connects with explicit options (a schema through `search_path`, a pool size…).
    pub async fn connect_with(options: PgConnectOptions) -> Result<Self, StoreError> {
        // One plain connection first: a pool retries until its timeout and then says only
        // that it timed out, where this says why (refused, unknown host, bad password, no
        // such database) at once.
        let probe =
            tokio::time::timeout(CONNECT_TIMEOUT, <sqlx::PgConnection as sqlx::Connection>::connect_with(&options))
                .await
                .map_err(|_| {
                    backend(
                        "connecting to postgres",
                        std::io::Error::new(
                            std::io::ErrorKind::TimedOut,
                            format!(
                                "no answer from {}:{} within {CONNECT_TIMEOUT:?}",
                                options.get_host(),
                                options.get_port()
                            ),
                        ),
                    )
                })?
                .map_err(pg("connecting to postgres"))?;
        drop(probe);
        let pool = PgPoolOptions::new()
            .max_connections(16)
            .acquire_timeout(CONNECT_TIMEOUT)
            .connect_with(options)
            .await
            .map_err(pg("connecting to postgres"))?;
        migrate(&pool).await?;
        let writer = group_commit::GroupCommit::start(&pool);
        let notifier = WorkNotifier::start(&pool);
        Ok(Self {
            pool,
            writer,
            notifier,
            listener: tokio::sync::Mutex::new(None),
            cancel_listener: tokio::sync::Mutex::new(None),
        })
    }

    /// The connection pool.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// How group commit has gone in this process: commits, the appends they carried, the
    /// largest batch.
    pub fn group_commit_stats(&self) -> GroupCommitStats {
        self.writer.stats()
    }

    /// Announces that a run became ready (see [`WorkNotifier`]).
    async fn notify(&self, _run: RunId) {
        self.notifier.announce(&self.pool).await;
    }

    /// How many `NOTIFY stepwright_work` this store has sent.
    pub fn notifications_sent(&self) -> u64 {
        self.notifier.sent.load(Ordering::Relaxed)
    }
}

/// How often a process announces new work at most.
const NOTIFY_EVERY: Duration = Duration::from_millis(10);

/// Announces new work on [`WORK_CHANNEL`], outside every commit and at most once per
/// [`NOTIFY_EVERY`]: the first announcement of a window is sent at once (a command that
/// creates one run and exits still wakes the workers), later ones in the window become one
/// trailing announcement that a task sends when the window ends. A burst of new runs (an
/// API starting a thousand) wakes the runners a few times, not a thousand. Listeners only
/// wake and claim, so the notification carries no run id; a lost one only delays a runner
/// until its next poll.
struct WorkNotifier {
    /// When the last announcement went out, in µs since `epoch`.
    last: Arc<AtomicU64>,
    epoch: Instant,
    trailing: tokio::sync::mpsc::Sender<()>,
    sent: Arc<AtomicU64>,
}

async fn send_notify(pool: &PgPool, sent: &AtomicU64) {
    if sqlx::query("SELECT pg_notify($1, '')").bind(WORK_CHANNEL).execute(pool).await.is_ok() {
        sent.fetch_add(1, Ordering::Relaxed);
    }
}

impl WorkNotifier {
    fn start(pool: &PgPool) -> Self {
        let (trailing, mut asked) = tokio::sync::mpsc::channel::<()>(1);
        let (last, sent, epoch) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)), Instant::now());
        let (pool, task_last, task_sent) = (pool.clone(), last.clone(), sent.clone());
        tokio::spawn(async move {
            while asked.recv().await.is_some() {
                tokio::time::sleep(NOTIFY_EVERY).await;
                task_last.store(micros_since(epoch), Ordering::Relaxed);
                send_notify(&pool, &task_sent).await;
            }
        });
        Self { last, epoch, trailing, sent }
    }

    async fn announce(&self, pool: &PgPool) {
        let now = micros_since(self.epoch);
        let last = self.last.load(Ordering::Relaxed);
        let window = NOTIFY_EVERY.as_micros() as u64;
        if (last == 0 || now.saturating_sub(last) >= window)
            && self.last.compare_exchange(last, now.max(1), Ordering::Relaxed, Ordering::Relaxed).is_ok()
        {
            send_notify(pool, &self.sent).await;
        } else {
            // One trailing announcement already asked for covers this one.
            let _ = self.trailing.try_send(());
        }
    }
}

fn micros_since(epoch: Instant) -> u64 {
    u64::try_from(epoch.elapsed().as_micros()).unwrap_or(u64::MAX)
}

async fn migrate(pool: &PgPool) -> Result<(), StoreError> {
    let doing = "migrating the postgres database";
    let mut tx = pool.begin().await.map_err(pg(doing))?;
    // Workers starting together must not apply a migration twice.
    sqlx::query("SELECT pg_advisory_xact_lock(7270617374657077)").execute(&mut *tx).await.map_err(pg(doing))?;
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS stepwright_migrations (version BIGINT PRIMARY KEY, applied_at BIGINT NOT NULL)",
    )
    .execute(&mut *tx)
    .await
    .map_err(pg(doing))?;
    for (version, sql) in MIGRATIONS {
        let done: bool = sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM stepwright_migrations WHERE version = $1)")
            .bind(version)
            .fetch_one(&mut *tx)
            .await
            .map_err(pg(doing))?;
        if !done {
            tracing::info!(version, "applying a postgres migration");
            sqlx::raw_sql(sqlx::AssertSqlSafe(*sql)).execute(&mut *tx).await.map_err(pg(doing))?;
            sqlx::query("INSERT INTO stepwright_migrations (version, applied_at) VALUES ($1, stepwright_now_us())")
                .bind(version)
                .execute(&mut *tx)
                .await
                .map_err(pg(doing))?;
        }
    }
    tx.commit().await.map_err(pg(doing))
}

fn hash_from(bytes: &[u8]) -> Result<ContentHash, StoreError> {
    ContentHash::from_slice(bytes)
        .ok_or_else(|| backend("reading a content hash", std::io::Error::other("a content hash is not 32 bytes")))
}

fn to_value<T: serde::Serialize>(value: &T) -> Value {
    serde_json::to_value(value).unwrap_or(Value::Null)
}

fn from_value<T: serde::de::DeserializeOwned>(doing: &str, value: Value) -> Result<T, StoreError> {
    serde_json::from_value(value).map_err(|e| backend(doing, e))
}

const RUN_COLUMNS: &str = "id, workflow, version, definition_hash, input, caller, status, output, error, \
                           parent_run, parent_path, created_at, updated_at, wake_at, lease_owner, lease_token, lease_expires, \
                           cancel_request, priority, concurrency_key, concurrency_limit";

/// How many columns [`RUN_COLUMNS`] has: a query's next column is at this index.
const RUN_COLUMN_COUNT: usize = 21;

/// [`RUN_COLUMNS`] with the input, output and error left out (read as JSON `null`).
const RUN_HEADER_COLUMNS: &str = "id, workflow, version, definition_hash, 'null'::jsonb, caller, status, NULL::jsonb, \
                                  NULL::jsonb, parent_run, parent_path, created_at, updated_at, wake_at, lease_owner, \
                                  lease_token, lease_expires, cancel_request, priority, concurrency_key, concurrency_limit";

fn run_from_row(row: &PgRow) -> Result<RunRecord, StoreError> {
    let doing = "reading a run";
    let get = |e: sqlx::Error| backend(doing, e);
    let id = RunId::from_bytes(row.try_get::<uuid::Uuid, _>(0).map_err(get)?.into_bytes());
    let hash: Vec<u8> = row.try_get(3).map_err(get)?;
    let status: String = row.try_get(6).map_err(get)?;
    let parent_run: Option<uuid::Uuid> = row.try_get(9).map_err(get)?;
    let parent_path: Option<String> = row.try_get(10).map_err(get)?;
    let lease_owner: Option<String> = row.try_get(14).map_err(get)?;
    let lease_expires: Option<i64> = row.try_get(16).map_err(get)?;
    Ok(RunRecord {
        id,
        workflow: row.try_get(1).map_err(get)?,
        version: row.try_get(2).map_err(get)?,
        definition_hash: hash_from(&hash)?,
        input: Arc::new(row.try_get(4).map_err(get)?),
        caller: from_value(doing, row.try_get(5).map_err(get)?)?,
        status: RunStatus::parse(&status)
            .ok_or_else(|| backend(doing, std::io::Error::other(format!("unknown run status {status:?}"))))?,
        output: row.try_get(7).map_err(get)?,
        error: row.try_get::<Option<Value>, _>(8).map_err(get)?.map(|v| from_value(doing, v)).transpose()?,
        parent: match (parent_run, parent_path) {
            (Some(run), Some(at)) => Some(Lineage { run: RunId::from_bytes(run.into_bytes()), at: StepPath::new(&at) }),
            _ => None,
        },
        created_at: Timestamp::from_micros(row.try_get(11).map_err(get)?),
        updated_at: Timestamp::from_micros(row.try_get(12).map_err(get)?),
        wake_at: row.try_get::<Option<i64>, _>(13).map_err(get)?.map(Timestamp::from_micros),
        lease: match (lease_owner, lease_expires) {
            (Some(owner), Some(expires)) => Some(Lease::new(
                id,
                owner,
                row.try_get::<i64, _>(15).map_err(get)? as u64,
                Timestamp::from_micros(expires),
            )),
            _ => None,
        },
        cancel: row.get::<Option<Value>, _>(17).map(|v| from_value(doing, v)).transpose()?,
        flow: FlowControl {
            priority: row.try_get(18).map_err(get)?,
            concurrency: match (row.try_get::<Option<String>, _>(19).map_err(get)?, row.try_get::<Option<i32>, _>(20)) {
                (Some(key), Ok(Some(limit))) => Some(Concurrency { key, limit: limit.max(1) as u32 }),
                _ => None,
            },
        },
    })
}

fn uuid(run: RunId) -> uuid::Uuid {
    run.as_uuid()
}

/// Locks the run's row, reserves `entries` journal and `events` event positions, and
/// returns `(lease_token, first reserved journal seq, first reserved event seq)`. The
/// counters live on the row and are bumped by the locking `UPDATE` itself: a writer that
/// waited for the lock sees the row as the previous writer committed it (READ COMMITTED
/// re-reads an updated row), so two concurrent appends to one run never take the same seq.
/// A refused write rolls back, and its reservation with it.
async fn lock_run(
    tx: &mut Transaction<'_, sqlx::Postgres>,
    run: RunId,
    entries: usize,
    events: usize,
) -> Result<(u64, i64, i64), StoreError> {
    let locked = lock_run_row(tx, run, entries, events).await?;
    Ok((locked.token, locked.seq, locked.event_seq))
}

/// What [`lock_run_row`] read of a locked run.
struct Locked {
    token: u64,
    seq: i64,
    event_seq: i64,
    status: RunStatus,
    cancel: Option<CancelRequest>,
}

/// [`lock_run`], also returning the run's status and cancel request.
async fn lock_run_row(
    tx: &mut Transaction<'_, sqlx::Postgres>,
    run: RunId,
    entries: usize,
    events: usize,
) -> Result<Locked, StoreError> {
    let doing = "locking a run";
    let (entries, events) = (entries as i64, events as i64);
    let row = sqlx::query(
        "UPDATE stepwright_runs SET journal_next = journal_next + $2, event_next = event_next + $3 \
         WHERE id = $1 RETURNING lease_token, journal_next - $2, event_next - $3, status, cancel_request",
    )
    .bind(uuid(run))
    .bind(entries)
    .bind(events)
    .fetch_optional(&mut **tx)
    .await
    .map_err(pg(doing))?
    .ok_or(StoreError::RunNotFound(run))?;
    let status: String = row.get(3);
    Ok(Locked {
        token: row.get::<i64, _>(0) as u64,
        seq: row.get(1),
        event_seq: row.get(2),
        status: RunStatus::parse(&status)
            .ok_or_else(|| backend(doing, std::io::Error::other(format!("unknown run status {status:?}"))))?,
        cancel: row.get::<Option<Value>, _>(4).map(|v| from_value(doing, v)).transpose()?,
    })
}

fn check_token(run: RunId, current: u64, fence: Option<u64>) -> Result<(), StoreError> {
    match fence {
        Some(token) if token != current => Err(StoreError::LeaseLost { run, token }),
        _ => Ok(()),
    }
}

/// Appends a batch inside an open transaction whose run row is locked.
async fn append_locked(
    tx: &mut Transaction<'_, sqlx::Postgres>,
    run: RunId,
    mut seq: i64,
    mut event_seq: i64,
    batch: &JournalBatch,
) -> Result<(), StoreError> {
    let doing = "appending to the journal";
    let EncodedBlobs { inline, stored } = encode_batch_blobs(batch);
    let (mut hashes, mut codecs, mut datas) = (Vec::new(), Vec::new(), Vec::new());
    for (hash, codec, bytes) in stored {
        hashes.push(hash.as_bytes().to_vec());
        codecs.push(codec as i16);
        datas.push(bytes);
    }
    if !hashes.is_empty() {
        sqlx::query(
            "INSERT INTO stepwright_blobs (hash, codec, data) SELECT * FROM UNNEST($1::bytea[], $2::smallint[], $3::bytea[]) \
             ON CONFLICT (hash) DO NOTHING",
        )
        .bind(&hashes)
        .bind(&codecs)
        .bind(&datas)
        .execute(&mut **tx)
        .await
        .map_err(pg(doing))?;
    }
    if !batch.entries.is_empty() {
        let n = batch.entries.len();
        let (mut seqs, mut paths, mut ats, mut records, mut blobs, mut values) = (
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
        );
        let (mut opened_ids, mut opened_paths) = (Vec::new(), Vec::new());
        for entry in &batch.entries {
            let referenced = referenced_blob(&entry.record);
            let value = referenced.and_then(|h| inline.get(&h)).cloned();
            let blob = if value.is_some() { None } else { referenced.map(|h| h.as_bytes().to_vec()) };
            if let Record::InterruptOpened { id, .. } = &entry.record {
                opened_ids.push(id.as_str().to_owned());
                opened_paths.push(entry.path.as_str().to_owned());
            }
            seqs.push(seq);
            seq += 1;
            paths.push(entry.path.as_str().to_owned());
            ats.push(entry.at.as_micros());
            records.push(to_value(&entry.record));
            blobs.push(blob);
            values.push(value);
        }
        sqlx::query(
            "INSERT INTO stepwright_journal (run_id, seq, path, at, record, blob, value) \
             SELECT $1, * FROM UNNEST($2::bigint[], $3::text[], $4::bigint[], $5::jsonb[], $6::bytea[], $7::bytea[])",
        )
        .bind(uuid(run))
        .bind(&seqs)
        .bind(&paths)
        .bind(&ats)
        .bind(&records)
        .bind(&blobs)
        .bind(&values)
        .execute(&mut **tx)
        .await
        .map_err(pg(doing))?;
        if !opened_ids.is_empty() {
            sqlx::query(
                "INSERT INTO stepwright_interrupts (run_id, id, path, resolved) \
                 SELECT $1, i, p, false FROM UNNEST($2::text[], $3::text[]) AS t(i, p) ON CONFLICT DO NOTHING",
            )
            .bind(uuid(run))
            .bind(&opened_ids)
            .bind(&opened_paths)
            .execute(&mut **tx)
            .await
            .map_err(pg(doing))?;
        }
    }
    if !batch.events.is_empty() {
        let n = batch.events.len();
        let (mut seqs, mut paths, mut ats, mut tenants, mut users, mut kinds, mut datas) = (
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
        );
        for event in &batch.events {
            seqs.push(event_seq);
            event_seq += 1;
            paths.push(event.path.as_str().to_owned());
            ats.push(event.at.as_micros());
            tenants.push(event.tenant.clone());
            users.push(event.user.clone());
            kinds.push(event.kind.clone());
            datas.push(event.data.clone());
        }
        sqlx::query(
            "INSERT INTO stepwright_events (run_id, seq, path, at, tenant, user_id, kind, data) \
             SELECT $1, * FROM UNNEST($2::bigint[], $3::text[], $4::bigint[], $5::text[], $6::text[], $7::text[], $8::jsonb[])",
        )
        .bind(uuid(run))
        .bind(&seqs)
        .bind(&paths)
        .bind(&ats)
        .bind(&tenants)
        .bind(&users)
        .bind(&kinds)
        .bind(&datas)
        .execute(&mut **tx)
        .await
        .map_err(pg(doing))?;
    }
    Ok(())
}

/// A status update in a transaction of its own, with the run's row locked: the path for
/// what the batched update did not write (an error to explain, a cancel request to apply).
/// Returns the status written.
async fn set_status_locked(pool: &PgPool, run: RunId, u: StatusUpdate) -> Result<RunStatus, StoreError> {
    let doing = "setting a run's status";
    let mut tx = pool.begin().await.map_err(pg(doing))?;
    let locked = lock_run_row(&mut tx, run, 0, 0).await?;
    check_token(run, locked.token, u.fence)?;
    let u = effective_update(run, locked.status, locked.cancel.as_ref(), u)?;
    sqlx::query(
        "UPDATE stepwright_runs SET status = $2, output = $3, error = $4, updated_at = $5, wake_at = $6, \
         lease_owner = CASE WHEN $7 THEN NULL ELSE lease_owner END, \
         lease_expires = CASE WHEN $7 THEN NULL ELSE lease_expires END WHERE id = $1",
    )
    .bind(uuid(run))
    .bind(RunStatus::as_str(u.status))
    .bind(&u.output)
    .bind(u.error.as_ref().map(to_value))
    .bind(u.at.as_micros())
    .bind(u.wake_at.map(Timestamp::as_micros))
    .bind(u.status != RunStatus::Running)
    .execute(&mut *tx)
    .await
    .map_err(pg(doing))?;
    tx.commit().await.map_err(pg(doing))?;
    Ok(u.status)
}

/// Why a claim matched no row.
async fn claim_refusal(pool: &PgPool, run: RunId) -> StoreError {
    let row = sqlx::query(
        "SELECT status, lease_owner, lease_expires, concurrency_key, concurrency_limit, stepwright_now_us() \
         FROM stepwright_runs WHERE id = $1",
    )
    .bind(uuid(run))
    .fetch_optional(pool)
    .await;
    match row {
        Ok(Some(row)) => {
            let status: String = row.get(0);
            let owner: Option<String> = row.get(1);
            let until: Option<i64> = row.get(2);
            let group: (Option<String>, Option<i32>) = (row.get(3), row.get(4));
            let now: i64 = row.get(5);
            let lapsed = until.is_none_or(|until| until <= now);
            match (RunStatus::parse(&status), owner) {
                (Some(status), _) if status.is_terminal() => StoreError::Finished { run, status },
                (Some(RunStatus::Pending), _) if lapsed && group.0.is_some() => StoreError::Queued {
                    run,
                    key: group.0.unwrap_or_default(),
                    limit: group.1.unwrap_or(1).max(1) as u32,
                },
                // No owner: the lease was let go between the claim and this look.
                (_, owner) => StoreError::Leased {
                    run,
                    owner: owner.unwrap_or_else(|| "another worker, which has just let it go".to_owned()),
                    until: Timestamp::from_micros(until.unwrap_or_default()),
                },
            }
        }
        Ok(None) => StoreError::RunNotFound(run),
        Err(e) => backend("claiming a run", e),
    }
}

fn micros(duration: Duration) -> i64 {
    i64::try_from(duration.as_micros()).unwrap_or(i64::MAX)
}

impl PostgresStore {
    /// Claims one run for `owner`: free, under a lapsed lease, or (taking over) held by
    /// `from`, who is known to be gone.
    async fn claim_one(
        &self,
        run: RunId,
        from: Option<String>,
        owner: String,
        lease_for: Duration,
    ) -> Result<Lease, StoreError> {
        // `before` is the row as the claim found it (locked), to say whom it took the run from.
        let row = sqlx::query(
            "WITH before AS (SELECT id, status, lease_owner FROM stepwright_runs WHERE id = $1 FOR UPDATE) \
             UPDATE stepwright_runs r SET lease_owner = $3, lease_token = r.lease_token + 1, \
             lease_expires = stepwright_now_us() + $4 FROM before \
             WHERE r.id = before.id AND r.status NOT IN ('completed', 'failed', 'cancelled') \
             AND NOT (r.status = 'pending' AND r.concurrency_key IS NOT NULL) \
             AND (r.lease_owner IS NULL OR r.lease_owner = $2 OR r.lease_expires <= stepwright_now_us()) \
             RETURNING r.lease_token, r.lease_expires, \
             CASE WHEN before.status = 'running' AND before.lease_owner <> '' AND before.lease_owner <> $3 \
             THEN before.lease_owner END",
        )
        .bind(uuid(run))
        .bind(&from)
        .bind(&owner)
        .bind(micros(lease_for))
        .fetch_optional(&self.pool)
        .await
        .map_err(pg("claiming a run"))?;
        match row {
            Some(row) => Ok(Lease {
                took_over_from: row.get(2),
                ..Lease::new(run, owner, row.get::<i64, _>(0) as u64, Timestamp::from_micros(row.get(1)))
            }),
            None => match claim_refusal(&self.pool, run).await {
                // A pending run of a concurrency group: admitted if its group has room.
                StoreError::Queued { key, limit, .. } => {
                    self.claim_in_group(run, &from, owner, lease_for, &key, limit).await
                }
                refusal => Err(refusal),
            },
        }
    }

    /// Claims a pending run of a concurrency group and starts it, if the group has room:
    /// under the group's advisory lock (see `stepwright_claim_due`), so that no other claim
    /// counts its slots meanwhile.
    async fn claim_in_group(
        &self,
        run: RunId,
        from: &Option<String>,
        owner: String,
        lease_for: Duration,
        key: &str,
        limit: u32,
    ) -> Result<Lease, StoreError> {
        let doing = "claiming a run of a concurrency group";
        let mut tx = self.pool.begin().await.map_err(pg(doing))?;
        sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended('stepwright.concurrency:' || $1, 0))")
            .bind(key)
            .execute(&mut *tx)
            .await
            .map_err(pg(doing))?;
        let held: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM stepwright_runs WHERE concurrency_key = $1 AND status IN ('running', 'suspended')",
        )
        .bind(key)
        .fetch_one(&mut *tx)
        .await
        .map_err(pg(doing))?;
        if held >= i64::from(limit) {
            return Err(StoreError::Queued { run, key: key.to_owned(), limit });
        }
        let row = sqlx::query(
            "UPDATE stepwright_runs SET lease_owner = $3, lease_token = lease_token + 1, \
             lease_expires = stepwright_now_us() + $4, status = 'running', wake_at = NULL, \
             updated_at = stepwright_now_us() \
             WHERE id = $1 AND status = 'pending' \
             AND (lease_owner IS NULL OR lease_owner = $2 OR lease_expires <= stepwright_now_us()) \
             RETURNING lease_token, lease_expires",
        )
        .bind(uuid(run))
        .bind(from)
        .bind(&owner)
        .bind(micros(lease_for))
        .fetch_optional(&mut *tx)
        .await
        .map_err(pg(doing))?;
        let Some(row) = row else {
            drop(tx);
            return Err(claim_refusal(&self.pool, run).await);
        };
        tx.commit().await.map_err(pg(doing))?;
        Ok(Lease::new(run, owner, row.get::<i64, _>(0) as u64, Timestamp::from_micros(row.get(1))))
    }

    /// `RunNotFound` unless the run exists.
    async fn check_exists(&self, run: RunId, doing: &str) -> Result<(), StoreError> {
        let exists: bool = sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM stepwright_runs WHERE id = $1)")
            .bind(uuid(run))
            .fetch_one(&self.pool)
            .await
            .map_err(pg(doing))?;
        if exists { Ok(()) } else { Err(StoreError::RunNotFound(run)) }
    }
}

/// A position in a run's journal or events as Postgres stores it.
fn position(from: u64) -> i64 {
    i64::try_from(from).unwrap_or(i64::MAX)
}

impl Store for PostgresStore {
    fn create_run(&self, r: RunRecord) -> BoxFuture<'_, Result<(), StoreError>> {
        // Group-committed with this process's other new runs (see `group_commit`).
        let (run, pending) = (r.id, r.status == RunStatus::Pending);
        let created = self.writer.create(r);
        Box::pin(async move {
            created.await?;
            if pending {
                self.notify(run).await;
            }
            Ok(())
        })
    }

    fn append<'a>(
        &'a self,
        run: RunId,
        fence: Option<u64>,
        batch: &'a mut JournalBatch,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        // Group-committed with the appends of this process's other runs (see `group_commit`).
        let owned = std::mem::take(batch);
        let committed = self.writer.append(run, fence, owned);
        Box::pin(async move {
            *batch = committed.await?;
            Ok(())
        })
    }

    fn set_status(&self, run: RunId, u: StatusUpdate) -> BoxFuture<'_, Result<(), StoreError>> {
        // Group-committed with this process's other status changes (see `group_commit`).
        let written = self.writer.set_status(run, u);
        Box::pin(async move {
            let status = written.await?;
            if matches!(status, RunStatus::Pending | RunStatus::Suspended) {
                self.notify(run).await;
            }
            Ok(())
        })
    }

    fn load_from(&self, run: RunId, from: u64) -> BoxFuture<'_, Result<LoadedRun, StoreError>> {
        Box::pin(async move {
            let doing = "loading a run";
            let row =
                sqlx::query(sqlx::AssertSqlSafe(format!("SELECT {RUN_COLUMNS} FROM stepwright_runs WHERE id = $1")))
                    .bind(uuid(run))
                    .fetch_optional(&self.pool)
                    .await
                    .map_err(pg(doing))?
                    .ok_or(StoreError::RunNotFound(run))?;
            let record = run_from_row(&row)?;
            let rows = sqlx::query(
                "SELECT path, at, record, value FROM stepwright_journal WHERE run_id = $1 AND seq >= $2 ORDER BY seq",
            )
            .bind(uuid(run))
            .bind(position(from))
            .fetch_all(&self.pool)
            .await
            .map_err(pg(doing))?;
            let mut entries = Vec::with_capacity(rows.len());
            let mut blobs = HashMap::new();
            let mut wanted: Vec<Vec<u8>> = Vec::new();
            for row in rows {
                let record: Record = from_value(doing, row.get::<Value, _>(2))?;
                if let Record::Completed { output, .. } = &record {
                    match row.get::<Option<Vec<u8>>, _>(3) {
                        Some(json) => {
                            blobs.insert(*output, decode_blob(*output, CODEC_JSON, &json)?);
                        }
                        None => wanted.push(output.as_bytes().to_vec()),
                    }
                }
                let path: String = row.get(0);
                entries.push(JournalEntry {
                    path: StepPath::new(&path),
                    at: Timestamp::from_micros(row.get(1)),
                    record,
                });
            }
            if !wanted.is_empty() {
                let rows = sqlx::query("SELECT hash, codec, data FROM stepwright_blobs WHERE hash = ANY($1)")
                    .bind(&wanted)
                    .fetch_all(&self.pool)
                    .await
                    .map_err(pg(doing))?;
                for row in rows {
                    let hash: Vec<u8> = row.get(0);
                    let hash = hash_from(&hash)?;
                    blobs.insert(hash, decode_blob(hash, i64::from(row.get::<i16, _>(1)), &row.get::<Vec<u8>, _>(2))?);
                }
                for hash in &wanted {
                    let hash = hash_from(hash)?;
                    if !blobs.contains_key(&hash) {
                        return Err(StoreError::Corrupt(hash));
                    }
                }
            }
            Ok(LoadedRun { record, entries, blobs })
        })
    }

    fn resolve_interrupt(&self, run: RunId, entry: JournalEntry) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            let doing = "resolving an interrupt";
            let Record::InterruptResolved { id, .. } = &entry.record else {
                return Err(backend(doing, std::io::Error::other("the entry is not an interrupt resolution")));
            };
            let mut tx = self.pool.begin().await.map_err(pg(doing))?;
            let (_, seq, event_seq) = lock_run(&mut tx, run, 1, 0).await?;
            let changed = sqlx::query(
                "UPDATE stepwright_interrupts SET resolved = true WHERE run_id = $1 AND id = $2 AND NOT resolved",
            )
            .bind(uuid(run))
            .bind(id.as_str())
            .execute(&mut *tx)
            .await
            .map_err(pg(doing))?;
            if changed.rows_affected() == 0 {
                let exists: bool = sqlx::query_scalar(
                    "SELECT EXISTS (SELECT 1 FROM stepwright_interrupts WHERE run_id = $1 AND id = $2)",
                )
                .bind(uuid(run))
                .bind(id.as_str())
                .fetch_one(&mut *tx)
                .await
                .map_err(pg(doing))?;
                let interrupt = InterruptId::new(id.as_str());
                return Err(if exists {
                    StoreError::AlreadyResolved { run, interrupt }
                } else {
                    StoreError::InterruptNotFound { run, interrupt }
                });
            }
            let batch = JournalBatch { entries: vec![entry.clone()], ..JournalBatch::default() };
            append_locked(&mut tx, run, seq, event_seq, &batch).await?;
            tx.commit().await.map_err(pg(doing))?;
            self.notify(run).await;
            Ok(())
        })
    }

    fn events_from(&self, run: RunId, from: u64) -> BoxFuture<'_, Result<Vec<EventRecord>, StoreError>> {
        Box::pin(async move {
            let doing = "reading events";
            self.check_exists(run, doing).await?;
            let rows = sqlx::query(
                "SELECT path, at, tenant, user_id, kind, data FROM stepwright_events WHERE run_id = $1 AND seq >= $2 \
                 ORDER BY seq",
            )
            .bind(uuid(run))
            .bind(position(from))
            .fetch_all(&self.pool)
            .await
            .map_err(pg(doing))?;
            Ok(rows
                .into_iter()
                .map(|r| EventRecord {
                    run,
                    path: StepPath::new(&r.get::<String, _>(0)),
                    at: Timestamp::from_micros(r.get(1)),
                    tenant: r.get(2),
                    user: r.get(3),
                    kind: r.get(4),
                    data: r.get(5),
                })
                .collect())
        })
    }

    fn list_runs(&self, filter: RunFilter) -> BoxFuture<'_, Result<Vec<RunRecord>, StoreError>> {
        Box::pin(async move {
            let doing = "listing runs";
            let columns = if filter.headers_only { RUN_HEADER_COLUMNS } else { RUN_COLUMNS };
            let (since, order) = match filter.updated_since {
                Some(since) => (Some(since.as_micros()), "updated_at, id"),
                None => (None, "created_at DESC, id DESC"),
            };
            let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
                "SELECT {columns} FROM stepwright_runs WHERE ($1::text IS NULL OR status = $1) \
                 AND ($2::text IS NULL OR workflow = $2) \
                 AND ($5::text IS NULL OR caller->>'tenant' = $5) \
                 AND ($6::bigint IS NULL OR updated_at >= $6) \
                 AND ($6::bigint IS NOT NULL OR $4::uuid IS NULL \
                      OR (created_at, id) < (SELECT created_at, id FROM stepwright_runs WHERE id = $4)) \
                 AND ($7::bigint IS NULL OR created_at >= $7) AND ($8::bigint IS NULL OR created_at < $8) \
                 AND ($9::text IS NULL OR strpos(lower(input::text), lower($9)) > 0) \
                 AND ($10::uuid IS NULL OR parent_run = $10) \
                 AND ($11::text IS NULL OR concurrency_key = $11) \
                 ORDER BY {order} LIMIT $3"
            )))
            .bind(filter.status.map(RunStatus::as_str))
            .bind(filter.workflow)
            .bind(i64::try_from(filter.limit.unwrap_or(100)).unwrap_or(i64::MAX))
            .bind(filter.before.map(uuid))
            .bind(filter.tenant)
            .bind(since)
            .bind(filter.created_from.map(Timestamp::as_micros))
            .bind(filter.created_until.map(Timestamp::as_micros))
            .bind(filter.input_contains)
            .bind(filter.parent.map(uuid))
            .bind(filter.concurrency_key)
            .fetch_all(&self.pool)
            .await
            .map_err(pg(doing))?;
            rows.iter().map(run_from_row).collect()
        })
    }

    fn erase_run(&self, run: RunId) -> BoxFuture<'_, Result<Removed, StoreError>> {
        Box::pin(self.remove(vec![run]))
    }

    fn apply_retention(&self, policy: Retention) -> BoxFuture<'_, Result<Removed, StoreError>> {
        Box::pin(async move {
            let all = self.list_runs(RunFilter { limit: Some(usize::MAX >> 1), ..RunFilter::default() }).await?;
            self.remove(retention_victims(&all, &policy)).await
        })
    }

    fn claim(
        &self,
        run: RunId,
        owner: &str,
        _now: Timestamp,
        lease_for: Duration,
    ) -> BoxFuture<'_, Result<Lease, StoreError>> {
        Box::pin(self.claim_one(run, None, owner.to_owned(), lease_for))
    }

    fn take_over(
        &self,
        run: RunId,
        from: &str,
        owner: &str,
        _now: Timestamp,
        lease_for: Duration,
    ) -> BoxFuture<'_, Result<Lease, StoreError>> {
        Box::pin(self.claim_one(run, Some(from.to_owned()), owner.to_owned(), lease_for))
    }

    fn request_cancel(
        &self,
        run: RunId,
        request: CancelRequest,
        _now: Timestamp,
    ) -> BoxFuture<'_, Result<CancelOutcome, StoreError>> {
        Box::pin(async move {
            let doing = "cancelling a run";
            let mut tx = self.pool.begin().await.map_err(pg(doing))?;
            let row = sqlx::query(sqlx::AssertSqlSafe(format!(
                "SELECT {RUN_COLUMNS}, stepwright_now_us() FROM stepwright_runs WHERE id = $1 FOR UPDATE"
            )))
            .bind(uuid(run))
            .fetch_optional(&mut *tx)
            .await
            .map_err(pg(doing))?
            .ok_or(StoreError::RunNotFound(run))?;
            let record = run_from_row(&row)?;
            let now = Timestamp::from_micros(row.get(RUN_COLUMN_COUNT));
            let outcome = decide_cancel(&record, now);
            match &outcome {
                CancelOutcome::Finished(_) => return Ok(outcome),
                CancelOutcome::Requested { .. } => {
                    sqlx::query("UPDATE stepwright_runs SET cancel_request = $2 WHERE id = $1")
                        .bind(uuid(run))
                        .bind(to_value(&request))
                        .execute(&mut *tx)
                        .await
                        .map_err(pg(doing))?;
                }
                CancelOutcome::Cancelled => {
                    // The token grows, so a holder that stalled past its lease cannot write.
                    sqlx::query(
                        "UPDATE stepwright_runs SET status = 'cancelled', output = NULL, error = $2, updated_at = $3, \
                         wake_at = NULL, lease_owner = NULL, lease_expires = NULL, lease_token = lease_token + 1, \
                         cancel_request = $4 WHERE id = $1",
                    )
                    .bind(uuid(run))
                    .bind(to_value(&request.error()))
                    .bind(now.as_micros())
                    .bind(to_value(&request))
                    .execute(&mut *tx)
                    .await
                    .map_err(pg(doing))?;
                }
            }
            sqlx::query("SELECT pg_notify($1, $2)")
                .bind(CANCEL_CHANNEL)
                .bind(run.to_string())
                .execute(&mut *tx)
                .await
                .map_err(pg(doing))?;
            tx.commit().await.map_err(pg(doing))?;
            Ok(outcome)
        })
    }

    fn cancel_requests(&self, runs: &[RunId]) -> BoxFuture<'_, Result<Vec<(RunId, CancelRequest)>, StoreError>> {
        let ids: Vec<uuid::Uuid> = runs.iter().map(|r| uuid(*r)).collect();
        Box::pin(async move {
            let doing = "reading cancel requests";
            let rows = sqlx::query(
                "SELECT id, cancel_request FROM stepwright_runs WHERE id = ANY($1) AND cancel_request IS NOT NULL",
            )
            .bind(&ids)
            .fetch_all(&self.pool)
            .await
            .map_err(pg(doing))?;
            rows.into_iter()
                .map(|row| {
                    let run = RunId::from_bytes(row.get::<uuid::Uuid, _>(0).into_bytes());
                    Ok((run, from_value(doing, row.get::<Value, _>(1))?))
                })
                .collect()
        })
    }

    fn wait_for_cancel(&self, timeout: Duration) -> BoxFuture<'_, bool> {
        Box::pin(async move {
            let mut guard = self.cancel_listener.lock().await;
            if guard.is_none()
                && let Ok(mut listener) = PgListener::connect_with(&self.pool).await
                && listener.listen(CANCEL_CHANNEL).await.is_ok()
            {
                *guard = Some(listener);
            }
            match guard.as_mut() {
                // A notification, or the poll interval: whichever comes first. A listener
                // that failed may have missed one: say so, and connect again next time.
                Some(listener) => match tokio::time::timeout(timeout, listener.recv()).await {
                    Ok(Ok(_)) => true,
                    Ok(Err(_)) => {
                        *guard = None;
                        true
                    }
                    Err(_) => false,
                },
                None => {
                    tokio::time::sleep(timeout).await;
                    true
                }
            }
        })
    }

    fn announces_cancels(&self) -> bool {
        true
    }

    fn claim_due(
        &self,
        owner: &str,
        _now: Timestamp,
        lease_for: Duration,
        limit: usize,
        tenant: Option<&str>,
    ) -> BoxFuture<'_, Result<Vec<Lease>, StoreError>> {
        let tenant = tenant.map(str::to_owned);
        let owner = owner.to_owned();
        Box::pin(async move {
            let rows = sqlx::query(
                "SELECT run_id, run_token, run_expires, run_taken_from FROM stepwright_claim_due($1, $2, $3, $4)",
            )
            .bind(&owner)
            .bind(micros(lease_for))
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .bind(tenant)
            .fetch_all(&self.pool)
            .await
            .map_err(pg("claiming due runs"))?;
            Ok(rows
                .into_iter()
                .map(|row| Lease {
                    took_over_from: row.get(3),
                    ..Lease::new(
                        RunId::from_bytes(row.get::<uuid::Uuid, _>(0).into_bytes()),
                        owner.clone(),
                        row.get::<i64, _>(1) as u64,
                        Timestamp::from_micros(row.get(2)),
                    )
                })
                .collect())
        })
    }

    fn renew_leases<'a>(
        &'a self,
        leases: &'a [Lease],
        _now: Timestamp,
        lease_for: Duration,
    ) -> BoxFuture<'a, Result<Vec<Result<Lease, StoreError>>, StoreError>> {
        Box::pin(async move {
            let ids: Vec<uuid::Uuid> = leases.iter().map(|l| uuid(l.run)).collect();
            let tokens: Vec<i64> = leases.iter().map(|l| l.token as i64).collect();
            // One statement for every run the worker executes; the database's clock.
            let rows = sqlx::query(
                "UPDATE stepwright_runs r SET lease_expires = stepwright_now_us() + $3 \
                 FROM UNNEST($1::uuid[], $2::bigint[]) AS l(id, token) \
                 WHERE r.id = l.id AND r.lease_token = l.token RETURNING r.id, r.lease_expires",
            )
            .bind(&ids)
            .bind(&tokens)
            .bind(micros(lease_for))
            .fetch_all(&self.pool)
            .await
            .map_err(pg("renewing leases"))?;
            let renewed: HashMap<uuid::Uuid, i64> = rows.iter().map(|row| (row.get(0), row.get(1))).collect();
            Ok(leases
                .iter()
                .map(|lease| match renewed.get(&uuid(lease.run)) {
                    Some(expires) => Ok(Lease { expires_at: Timestamp::from_micros(*expires), ..lease.clone() }),
                    None => Err(StoreError::LeaseLost { run: lease.run, token: lease.token }),
                })
                .collect())
        })
    }

    fn heartbeat(
        &self,
        lease: &Lease,
        _now: Timestamp,
        lease_for: Duration,
    ) -> BoxFuture<'_, Result<Lease, StoreError>> {
        let lease = lease.clone();
        Box::pin(async move {
            let row = sqlx::query(
                "UPDATE stepwright_runs SET lease_expires = stepwright_now_us() + $3 \
                 WHERE id = $1 AND lease_token = $2 RETURNING lease_expires",
            )
            .bind(uuid(lease.run))
            .bind(lease.token as i64)
            .bind(micros(lease_for))
            .fetch_optional(&self.pool)
            .await
            .map_err(pg("renewing a lease"))?;
            match row {
                Some(row) => Ok(Lease { expires_at: Timestamp::from_micros(row.get(0)), ..lease }),
                None => Err(StoreError::LeaseLost { run: lease.run, token: lease.token }),
            }
        })
    }

    fn put_definition(&self, hash: ContentHash, source: DefinitionSource) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            sqlx::query(
                "INSERT INTO stepwright_definitions (hash, format, name, source, files) VALUES ($1, $2, $3, $4, $5) \
                 ON CONFLICT (hash) DO NOTHING",
            )
            .bind(&hash.as_bytes()[..])
            .bind(&source.format)
            .bind(&source.name)
            .bind(&source.source)
            .bind((!source.files.is_empty()).then(|| serde_json::to_string(&source.files).unwrap_or_default()))
            .execute(&self.pool)
            .await
            .map_err(pg("storing a definition"))?;
            Ok(())
        })
    }

    fn get_definition(&self, hash: ContentHash) -> BoxFuture<'_, Result<Option<DefinitionSource>, StoreError>> {
        Box::pin(async move {
            let doing = "reading a definition";
            let row = sqlx::query("SELECT format, name, source, files FROM stepwright_definitions WHERE hash = $1")
                .bind(&hash.as_bytes()[..])
                .fetch_optional(&self.pool)
                .await
                .map_err(pg(doing))?;
            row.map(|r| {
                let files = crate::encoding::files_from_column(r.get::<Option<String>, _>(3).as_deref())
                    .map_err(|e| backend(doing, e))?;
                Ok(DefinitionSource { format: r.get(0), name: r.get(1), source: r.get(2), files })
            })
            .transpose()
        })
    }

    fn logged_events<'a>(
        &'a self,
        tenant: Option<&'a str>,
        name: &'a str,
        after: Option<u64>,
        since: Timestamp,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<stepwright_core::store::event::StoredEvent>, StoreError>> {
        Box::pin(async move {
            let query = stepwright_core::store::event::EventQuery::for_wait(name, after, since, limit);
            self.query_events(tenant, &query).await
        })
    }

    fn watch_events<'a>(
        &'a self,
        run: RunId,
        tenant: Option<&'a str>,
        name: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(self.watch(run, tenant, name))
    }

    fn wake_run(&self, run: RunId, _now: Timestamp) -> BoxFuture<'_, Result<bool, StoreError>> {
        Box::pin(async move {
            let doing = "bringing a run's timer forward";
            // The database's clock, as `claim_due` uses: a worker's clock may be off.
            let changed = sqlx::query(
                "UPDATE stepwright_runs SET wake_at = stepwright_now_us() \
                 WHERE id = $1 AND status = 'suspended' AND wake_at > stepwright_now_us()",
            )
            .bind(uuid(run))
            .execute(&self.pool)
            .await
            .map_err(pg(doing))?
            .rows_affected();
            if changed == 0 {
                self.check_exists(run, doing).await?;
                return Ok(false);
            }
            self.notify(run).await;
            Ok(true)
        })
    }

    fn post_message(&self, run: RunId, inbox: &str, message: Value) -> BoxFuture<'_, Result<u64, StoreError>> {
        let inbox = inbox.to_owned();
        Box::pin(async move {
            let seq: i64 = sqlx::query_scalar(
                "INSERT INTO stepwright_messages (run_id, inbox, message) VALUES ($1, $2, $3) RETURNING seq",
            )
            .bind(uuid(run))
            .bind(&inbox)
            .bind(&message)
            .fetch_one(&self.pool)
            .await
            .map_err(pg("storing a message"))?;
            self.notify(run).await;
            Ok(seq as u64)
        })
    }

    fn next_message(
        &self,
        run: RunId,
        inbox: &str,
        after: Option<u64>,
    ) -> BoxFuture<'_, Result<Option<(u64, Value)>, StoreError>> {
        let inbox = inbox.to_owned();
        Box::pin(async move {
            let row = sqlx::query(
                "SELECT seq, message FROM stepwright_messages WHERE run_id = $1 AND inbox = $2 AND seq > $3 ORDER BY seq LIMIT 1",
            )
            .bind(uuid(run))
            .bind(&inbox)
            .bind(after.map_or(-1, |a| a as i64))
            .fetch_optional(&self.pool)
            .await
            .map_err(pg("reading a message"))?;
            Ok(row.map(|r| (r.get::<i64, _>(0) as u64, r.get::<Value, _>(1))))
        })
    }

    fn wait_for_work(&self, timeout: Duration) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let mut guard = self.listener.lock().await;
            if guard.is_none()
                && let Ok(mut listener) = PgListener::connect_with(&self.pool).await
                && listener.listen(WORK_CHANNEL).await.is_ok()
            {
                *guard = Some(listener);
            }
            match guard.as_mut() {
                Some(listener) => {
                    // A notification, or the poll interval: whichever comes first.
                    let _ = tokio::time::timeout(timeout, listener.recv()).await;
                }
                None => tokio::time::sleep(timeout).await,
            }
        })
    }
}

impl PostgresStore {
    async fn remove(&self, victims: Vec<RunId>) -> Result<Removed, StoreError> {
        let doing = "removing runs";
        let ids: Vec<uuid::Uuid> = victims.iter().map(|r| uuid(*r)).collect();
        let mut tx = self.pool.begin().await.map_err(pg(doing))?;
        for table in ["stepwright_journal", "stepwright_events", "stepwright_interrupts", "stepwright_messages"] {
            sqlx::query(sqlx::AssertSqlSafe(format!("DELETE FROM {table} WHERE run_id = ANY($1)")))
                .bind(&ids)
                .execute(&mut *tx)
                .await
                .map_err(pg(doing))?;
        }
        // A run's own memory goes with it.
        {
            let owners: Vec<String> = victims.iter().map(ToString::to_string).collect();
            sqlx::query("DELETE FROM stepwright_memory_items WHERE scope = 'run' AND owner = ANY($1)")
                .bind(&owners)
                .execute(&mut *tx)
                .await
                .map_err(pg(doing))?;
        }
        let runs = sqlx::query("DELETE FROM stepwright_runs WHERE id = ANY($1)")
            .bind(&ids)
            .execute(&mut *tx)
            .await
            .map_err(pg(doing))?
            .rows_affected();
        let blobs = sqlx::query(
            "DELETE FROM stepwright_blobs b WHERE NOT EXISTS (SELECT 1 FROM stepwright_journal j WHERE j.blob = b.hash)",
        )
        .execute(&mut *tx)
        .await
        .map_err(pg(doing))?
        .rows_affected();
        tx.commit().await.map_err(pg(doing))?;
        Ok(Removed { runs: runs as usize, blobs: blobs as usize })
    }
}

/// Test support: a store in a fresh schema of the database named by
/// `STEPWRIGHT_TEST_DATABASE_URL`, or `None` (and a line saying the test is skipped) when
/// the variable is not set.
pub async fn test_store(test: &str) -> Option<Arc<PostgresStore>> {
    let url = test_database_url(test)?;
    let schema = fresh_schema(&url).await;
    let options: PgConnectOptions =
        url.parse::<PgConnectOptions>().expect("a postgres url").options([("search_path", schema.as_str())]);
    Some(Arc::new(PostgresStore::connect_with(options).await.expect("connect the test store")))
}

/// Test support: a `postgres://` URL of the test database whose connections use a fresh
/// schema, for tests that hand the database to other processes (`stepwright --db URL`), or
/// `None` (and a line saying the test is skipped) when the variable is not set.
pub async fn test_url(test: &str) -> Option<String> {
    let url = test_database_url(test)?;
    let schema = fresh_schema(&url).await;
    let separator = if url.contains('?') { '&' } else { '?' };
    Some(format!("{url}{separator}options=-c%20search_path%3D{schema}"))
}

/// `STEPWRIGHT_TEST_DATABASE_URL`, or `None` after saying that `test` is skipped.
fn test_database_url(test: &str) -> Option<String> {
    let Ok(url) = std::env::var("STEPWRIGHT_TEST_DATABASE_URL") else {
        // Straight to stderr: the test harness captures `println!`, and a newcomer should see
        // that these tests did not run.
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "skipped {test}: STEPWRIGHT_TEST_DATABASE_URL is not set");
        return None;
    };
    Some(url)
}

/// Creates a schema of its own for one test (dropping those of test runs over an hour old)
/// and returns its name.
async fn fresh_schema(url: &str) -> String {
    let schema = format!(
        "sw_test_{}_{:x}",
        std::process::id(),
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0)
    );
    let admin = PgPool::connect(url).await.expect("connect to STEPWRIGHT_TEST_DATABASE_URL");
    // Schemas of earlier test runs (older than an hour, by the time in their name) go.
    let old: Vec<String> = sqlx::query_scalar("SELECT nspname::text FROM pg_namespace WHERE nspname LIKE 'sw_test_%'")
        .fetch_all(&admin)
        .await
        .unwrap_or_default();
    let hour_ago = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos().saturating_sub(3_600_000_000_000))
        .unwrap_or(0);
    for name in old {
        let created = name.rsplit('_').next().and_then(|hex| u128::from_str_radix(hex, 16).ok()).unwrap_or(0);
        if created < hour_ago {
            let _ =
                sqlx::query(sqlx::AssertSqlSafe(format!("DROP SCHEMA IF EXISTS {name} CASCADE"))).execute(&admin).await;
        }
    }
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}")))
        .execute(&admin)
        .await
        .expect("create a test schema");
    admin.close().await;
    schema
}

/// Test support: a second store (another "process") over the same schema as `store`.
pub async fn same_database(store: &PostgresStore) -> Arc<PostgresStore> {
    let schema: String = sqlx::query_scalar("SELECT current_schema()").fetch_one(&store.pool).await.expect("schema");
    let url = std::env::var("STEPWRIGHT_TEST_DATABASE_URL").expect("set");
    let options: PgConnectOptions =
        url.parse::<PgConnectOptions>().expect("a postgres url").options([("search_path", schema.as_str())]);
    Arc::new(PostgresStore::connect_with(options).await.expect("connect"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_run_column_count_is_the_columns_count() {
        assert_eq!(super::RUN_COLUMNS.split(',').count(), super::RUN_COLUMN_COUNT);
        assert_eq!(super::RUN_HEADER_COLUMNS.split(',').count(), super::RUN_COLUMN_COUNT);
    }
}
