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

#[allow(clippy::wildcard_imports)] // The rows' items are this module's.
use self::rows::*;
use crate::encoding::{CODEC_JSON, EncodedBlobs, backend, decode_blob, encode_batch_blobs};

mod group_commit;
mod journal;
mod rows;
mod bank;
mod cache;
mod control;
mod quota;
mod events;
mod experiments;
mod schedules;
mod sessions;
mod tasks;

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
    (12, include_str!("postgres/012_tasks.sql")),
    (13, include_str!("postgres/013_experiments.sql")),
    (14, include_str!("postgres/014_run_tags.sql")),
    (15, include_str!("postgres/015_experiment_holds.sql")),
];

/// How long connecting to the database may take before it is reported as unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The channel runners listen on.
pub const WORK_CHANNEL: &str = "stepwright_work";

/// The channel a cancel request is announced on (the payload is the run id), so the process
/// executing the run sees it at once rather than at its next poll.
pub const CANCEL_CHANNEL: &str = "stepwright_cancel";

/// The channel step tasks are announced on: an empty payload for a dispatched task, the
/// task's id for an answered one.
pub const TASKS_CHANNEL: &str = "stepwright_tasks";

/// A durable store in a Postgres database.
pub struct PostgresStore {
    pool: PgPool,
    writer: group_commit::GroupCommit,
    notifier: WorkNotifier,
    listener: tokio::sync::Mutex<Option<PgListener>>,
    cancel_listener: tokio::sync::Mutex<Option<PgListener>>,
    /// Tasks dispatched and answered, in this process and (through `NOTIFY` on
    /// [`TASKS_CHANNEL`], once something waits on them) in every other process on the
    /// database: parked claims and steps holding for an answer look at once.
    tasks_changed: Arc<stepwright_core::store::task::TaskSignals>,
    /// Whether this process listens on [`TASKS_CHANNEL`] yet (started on first use).
    tasks_listening: std::sync::OnceLock<()>,
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
            tasks_changed: Arc::default(),
            tasks_listening: std::sync::OnceLock::new(),
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

    /// The task signals, listening on [`TASKS_CHANNEL`] from the first use on (a process
    /// that never waits on a task holds no listening connection).
    pub(crate) fn task_signals(&self) -> &stepwright_core::store::task::TaskSignals {
        self.tasks_listening.get_or_init(|| {
            let (pool, signals) = (self.pool.clone(), self.tasks_changed.clone());
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(listen_for_tasks(pool, signals));
            }
        });
        &self.tasks_changed
    }

    /// Announces a task change to every process (`None`: a task was dispatched).
    pub(crate) async fn announce_task(&self, answered: Option<&stepwright_core::store::task::TaskId>) {
        let payload = answered.map_or("", |task| task.as_str());
        // A lost announcement only delays the others until their next look.
        let _ = sqlx::query("SELECT pg_notify($1, $2)").bind(TASKS_CHANNEL).bind(payload).execute(&self.pool).await;
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

/// Listens on [`TASKS_CHANNEL`] for as long as the process lives, passing each announcement
/// to this process's task signals; a connection lost is made again after a second.
async fn listen_for_tasks(pool: PgPool, signals: Arc<stepwright_core::store::task::TaskSignals>) {
    loop {
        if let Ok(mut listener) = PgListener::connect_with(&pool).await
            && listener.listen(TASKS_CHANNEL).await.is_ok()
        {
            while let Ok(notification) = listener.recv().await {
                match notification.payload() {
                    "" => signals.dispatched(),
                    task => signals.answered(&stepwright_core::store::task::TaskId::new(task)),
                }
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
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
