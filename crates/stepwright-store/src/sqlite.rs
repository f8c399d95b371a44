//! The SQLite store.
//!
//! One writer thread owns the only read-write connection. Callers send it operations;
//! it drains everything queued (up to `max_batch`), applies them in one `BEGIN IMMEDIATE`
//! transaction — each in its own savepoint, so one failing operation does not fail the
//! others — commits once, then acknowledges each caller. Under load, many runs share one
//! fsync (group commit); alone, a run pays one commit per step. Reads use a small pool of
//! read-only connections, which WAL lets run beside the writer.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use futures_util::future::BoxFuture;
use rusqlite::{Connection, OpenFlags, OptionalExtension, params};
use serde_json::Value;
use stepwright_core::journal::{
    CancelRequest, Concurrency, DefinitionSource, EventRecord, FlowControl, JournalBatch, JournalEntry, Lease,
    LoadedRun, RunRecord,
};
use stepwright_core::store::backend::{
    admit, check_fence, decide_cancel, effective_update, is_due, referenced_blob, retention_victims, try_claim,
    try_take_over,
};
use stepwright_core::store::{CancelOutcome, Removed, Retention, RunFilter, StatusUpdate};
use stepwright_core::{ContentHash, InterruptId, Record, RunId, RunStatus, StepPath, Store, StoreError, Timestamp};
use tokio::sync::oneshot;

#[allow(clippy::wildcard_imports)] // The writer's and the journal's items are this module's.
use self::{journal::*, writer::*};
use crate::encoding::{EncodedBlobs, backend, decode_blob, encode_batch_blobs};

mod bank;
mod cache;
mod events;
mod experiments;
mod journal;
pub(crate) mod control;
mod quota;
mod read_only;
mod schedules;
mod sessions;
mod tasks;
mod writer;

/// SQLite's `synchronous` setting for the writer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Synchronous {
    /// Every commit is fsynced: a committed step survives power loss (the default).
    #[default]
    Full,
    /// The WAL is fsynced at checkpoints only: a committed step survives a process crash,
    /// but the last commits may be lost on power loss or an OS crash.
    Normal,
}

/// Settings for [`SqliteStore::open_with`].
#[derive(Debug, Clone, Copy)]
pub struct SqliteOptions {
    /// The writer's durability.
    pub synchronous: Synchronous,
    /// How many read-only connections to keep. Reads beyond this many at once open a
    /// connection each and close it after, so a server answering many requests at once
    /// wants this well above its core count.
    pub read_connections: usize,
    /// The most operations one transaction commits.
    pub max_batch: usize,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        Self { synchronous: Synchronous::Full, read_connections: 32, max_batch: 1024 }
    }
}

/// The migrations, in order; each runs once, in a transaction, recorded in
/// `stepwright_migrations`.
const MIGRATIONS: &[(i64, &str)] = &[
    (1, include_str!("sqlite/001_initial.sql")),
    (2, include_str!("sqlite/002_leases.sql")),
    (3, include_str!("sqlite/003_drop_counters.sql")),
    (4, include_str!("sqlite/004_inline_values.sql")),
    (5, include_str!("sqlite/005_messages.sql")),
    (6, include_str!("sqlite/006_definitions.sql")),
    (7, include_str!("sqlite/007_sessions_memory.sql")),
    (8, include_str!("sqlite/008_cancel_requests.sql")),
    (9, include_str!("sqlite/009_control.sql")),
    (10, include_str!("sqlite/010_flow_control.sql")),
    (11, include_str!("sqlite/011_step_cache.sql")),
    (12, include_str!("sqlite/012_schedules.sql")),
    (13, include_str!("sqlite/013_events.sql")),
    (14, include_str!("sqlite/014_tasks.sql")),
    (15, include_str!("sqlite/015_experiments.sql")),
    (16, include_str!("sqlite/016_run_tags.sql")),
    (17, include_str!("sqlite/017_experiment_holds.sql")),
];

/// What an [`Op::Write`] does, where the writer's durability depends on it.
enum WriteKind {
    /// Anything: committed as the store's `synchronous` setting says.
    Other,
    /// A worker's answer to this task: an unfenced task's may reach the disk with the next
    /// synced commit (see `Writer::syncs_later`).
    AnswersTask(stepwright_core::store::task::TaskId),
}

/// A durable store in one SQLite file.
pub struct SqliteStore {
    path: PathBuf,
    shared: Arc<Shared>,
    readers: Arc<Mutex<Vec<Connection>>>,
    max_readers: usize,
    /// One permit per read connection: a read waits for one before it takes a connection,
    /// so reads never open connections past the pool's size (each new one would prepare
    /// every statement again, and be closed after its one read).
    reading: Arc<tokio::sync::Semaphore>,
    /// Read connections opened so far.
    readers_opened: Arc<std::sync::atomic::AtomicUsize>,
    fail_next_commit: Arc<AtomicBool>,
    /// New pending work written by this process (a run created, a run woken, the runs of a
    /// schedule's tick): a runner in this process waiting for work wakes at once. Other
    /// processes on the file find it at their next poll (SQLite has no notifications).
    work: Arc<tokio::sync::Notify>,
    /// A task was dispatched or answered by this process: parked claims and steps holding
    /// for an answer look at once (other processes on the file poll).
    tasks_changed: Arc<stepwright_core::store::task::TaskSignals>,
    /// For a file this process may only read: the URI its readers open (see
    /// `open_read_only`); `None`: the file itself, read-only.
    reader_uri: Option<String>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore").field("path", &self.path).finish_non_exhaustive()
    }
}

impl SqliteStore {
    /// Opens (creating if needed) the store at `path` with default options.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        Self::open_with(path, SqliteOptions::default())
    }

    /// Opens (creating if needed) the store at `path`, applying migrations.
    pub fn open_with(path: impl AsRef<Path>, options: SqliteOptions) -> Result<Self, StoreError> {
        let path = path.as_ref().to_path_buf();
        let mut conn = Connection::open(&path).map_err(|e| backend("opening the sqlite database", e))?;
        if conn.is_readonly(rusqlite::MAIN_DB).unwrap_or(false) {
            // SQLite fell back to reading (the file is not writable by this process): a
            // store to look at — `runs list`, `runs show` — whose writes fail as such.
            let (conn, uri) = read_only::open(&path)?;
            return Ok(Self::over(path, conn, &options, Some(uri)));
        }
        // Another process creating or migrating the same file holds locks that switching to
        // WAL does not wait for through the busy handler: wait for it here, as a second
        // command started at the same moment as the first must.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let ready = configure(&conn, options.synchronous)
                .map_err(|e| backend("configuring the sqlite database", e))
                .and_then(|()| migrate(&mut conn));
            match ready {
                Err(error) if is_busy(&error) && std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                other => break other?,
            }
        }
        Ok(Self::over(path, conn, &options, None))
    }

    /// The store over an open, configured writer connection.
    fn over(path: std::path::PathBuf, conn: Connection, options: &SqliteOptions, reader_uri: Option<String>) -> Self {
        // Read connections open on first use (and are then kept, up to `read_connections`):
        // a process that only writes, or reads once, does not pay for a pool.
        let readers = Vec::with_capacity(options.read_connections.max(1));
        let fail_next_commit = Arc::new(AtomicBool::new(false));
        let writer = Writer {
            conn,
            runs: HashMap::new(),
            data_version: -1,
            fail_next_commit: fail_next_commit.clone(),
            synchronous: options.synchronous,
            lazy_now: false,
            unfenced: std::collections::HashSet::new(),
        };
        let shared = Arc::new(Shared {
            writer: Mutex::new(writer),
            queue: Mutex::new(Vec::new()),
            max_batch: options.max_batch.max(1),
        });
        Self {
            path,
            shared,
            readers: Arc::new(Mutex::new(readers)),
            max_readers: options.read_connections.max(1),
            reading: Arc::new(tokio::sync::Semaphore::new(options.read_connections.max(1))),
            readers_opened: Arc::default(),
            fail_next_commit,
            work: Arc::new(tokio::sync::Notify::new()),
            tasks_changed: Arc::default(),
            reader_uri,
        }
    }

    /// Wakes a runner of this process waiting for work (one permit is kept if none waits,
    /// so a runner busy right now looks when it next waits).
    pub(crate) fn announce_work(&self) {
        self.work.notify_one();
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Fault injection for tests: the next transaction writes everything, then fails
    /// instead of committing, as if the disk had failed at that point.
    pub fn fail_next_commit(&self) {
        self.fail_next_commit.store(true, Ordering::SeqCst);
    }

    async fn send<T: Send + 'static>(&self, make: impl FnOnce(Ack<T>) -> Op) -> Result<T, StoreError> {
        let (ack, done) = oneshot::channel();
        self.shared.queue.lock().expect("poisoned").push(make(ack));
        // Let every sibling that is ready (the other paths of a fan-out on this task, other
        // runs on this thread) queue its operation first, so one transaction takes them all.
        tokio::task::yield_now().await;
        let on_worker = tokio::runtime::Handle::try_current()
            .is_ok_and(|runtime| runtime.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
        self.shared.lead(on_worker);
        done.await.map_err(|_| writer_gone())?
    }

    async fn read<T: Send + 'static>(
        &self,
        doing: &'static str,
        f: impl FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let readers = self.readers.clone();
        let path = self.reader_uri.clone().map_or_else(|| self.path.clone(), PathBuf::from);
        let max_readers = self.max_readers;
        let permit = self.reading.clone().acquire_owned().await.map_err(|e| backend(doing, e))?;
        let opened = self.readers_opened.clone();
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            let pooled = readers.lock().expect("poisoned").pop();
            let conn = match pooled {
                Some(conn) => conn,
                None => {
                    opened.fetch_add(1, Ordering::Relaxed);
                    let conn = Connection::open_with_flags(
                        &path,
                        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX | OpenFlags::SQLITE_OPEN_URI,
                    )
                    .map_err(|e| backend("opening a sqlite read connection", e))?;
                    conn.busy_timeout(std::time::Duration::from_secs(5))
                        .and_then(|()| for_reuse(&conn))
                        .and_then(|()| add_functions(&conn))
                        .map_err(|e| backend("configuring a reader", e))?;
                    conn
                }
            };
            let result = f(&conn);
            let mut pool = readers.lock().expect("poisoned");
            if pool.len() < max_readers {
                pool.push(conn);
            }
            result
        })
        .await
        .map_err(|e| backend(doing, e))?
    }
}

impl SqliteStore {
    /// Runs `write` in the writer's next transaction (group-committed with everything else
    /// queued) and returns its answer once that transaction has committed.
    async fn write<T: Send + 'static>(
        &self,
        write: impl Fn(&Connection) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        self.write_as(WriteKind::Other, write).await
    }

    /// [`SqliteStore::write`], saying what the write is (the writer's durability depends on it).
    async fn write_as<T: Send + 'static>(
        &self,
        kind: WriteKind,
        write: impl Fn(&Connection) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let erased: Box<WriteFn> =
            Box::new(move |conn| write(conn).map(|answer| Box::new(answer) as Box<dyn std::any::Any + Send>));
        let answer = self.send(|ack| Op::Write(erased, kind, ack)).await?;
        answer
            .downcast::<T>()
            .map(|answer| *answer)
            .map_err(|_| backend("answering a store call", std::io::Error::other("mismatched answer")))
    }
}

/// Whether a store error is SQLite saying another connection holds the lock it needs.
fn is_busy(error: &StoreError) -> bool {
    let StoreError::Backend { source, .. } = error else { return false };
    source.downcast_ref::<rusqlite::Error>().is_some_and(|e| {
        matches!(e.sqlite_error_code(), Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked))
    })
}

impl SqliteStore {
    /// Claims one run for `owner`: free, under a lapsed lease, or (taking over) held by
    /// `from`, who is known to be gone.
    async fn claim_one(
        &self,
        run: RunId,
        take_from: Option<String>,
        owner: String,
        now: Timestamp,
        lease_for: std::time::Duration,
    ) -> Result<Lease, StoreError> {
        let claim = Claim { run: Some(run), take_from, owner, now, lease_for, limit: 1, tenant: None };
        let mut leases = self.send(|ack| Op::Claim(claim, ack)).await?;
        leases.pop().ok_or(StoreError::RunNotFound(run))
    }
}

fn writer_gone() -> StoreError {
    StoreError::Backend { doing: "talking to the sqlite writer".into(), source: "the writer thread stopped".into() }
}

fn configure(conn: &Connection, synchronous: Synchronous) -> rusqlite::Result<()> {
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", if synchronous == Synchronous::Full { "FULL" } else { "NORMAL" })?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    for_reuse(conn)?;
    add_functions(conn)
}

/// Statements are prepared once per connection and reused: room for every statement the store
/// runs (the default 16 evicted some on every task), and the query planner's stability
/// guarantee, without which a statement with `LIMIT ?` is prepared again each time the limit
/// bound to it changes (the claims' do). The plans do not depend on the values bound.
fn for_reuse(conn: &Connection) -> rusqlite::Result<()> {
    conn.set_prepared_statement_cache_capacity(256);
    conn.set_db_config(rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true).map(drop)
}

/// The SQL functions the queries use: `input_contains(stored, text)` is whether a stored JSON
/// value (plain text, or LZ4-compressed when large) contains `text` (lowercase), ignoring
/// ASCII case — SQL's own `instr` cannot look into a compressed value.
fn add_functions(conn: &Connection) -> rusqlite::Result<()> {
    use rusqlite::functions::FunctionFlags;
    use rusqlite::types::ValueRef;
    let flags = FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC | FunctionFlags::SQLITE_INNOCUOUS;
    conn.create_scalar_function("input_contains", 2, flags, |context| {
        let needle = context.get::<String>(1)?;
        let contains = |haystack: &[u8]| {
            needle.is_empty()
                || haystack.windows(needle.len()).any(|window| window.eq_ignore_ascii_case(needle.as_bytes()))
        };
        Ok(match context.get_raw(0) {
            ValueRef::Text(text) => contains(text),
            ValueRef::Blob(bytes) => lz4_flex::decompress_size_prepended(bytes).is_ok_and(|json| contains(&json)),
            _ => false,
        })
    })
}

fn migrate(conn: &mut Connection) -> Result<(), StoreError> {
    let doing = "migrating the sqlite database";
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS stepwright_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)",
    )
    .map_err(|e| backend(doing, e))?;
    // Usually everything is applied already: one read says so, without a write transaction.
    let applied: i64 = conn
        .query_row("SELECT COALESCE(MAX(version), 0) FROM stepwright_migrations", [], |r| r.get(0))
        .map_err(|e| backend(doing, e))?;
    for (version, sql) in MIGRATIONS.iter().filter(|(v, _)| *v > applied) {
        let tx =
            conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate).map_err(|e| backend(doing, e))?;
        let done: bool = tx
            .query_row("SELECT EXISTS (SELECT 1 FROM stepwright_migrations WHERE version = ?1)", [version], |r| {
                r.get(0)
            })
            .map_err(|e| backend(doing, e))?;
        if !done {
            tracing::info!(version, "applying a sqlite migration");
            tx.execute_batch(sql).map_err(|e| backend(doing, e))?;
            let now =
                std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
            tx.execute(
                "INSERT INTO stepwright_migrations (version, applied_at) VALUES (?1, ?2)",
                params![version, now as i64],
            )
            .map_err(|e| backend(doing, e))?;
        }
        tx.commit().map_err(|e| backend(doing, e))?;
    }
    Ok(())
}

/// The bytes a store's file holds in pages in use, after its write-ahead log is folded in
/// (free pages not counted): what a store costs on disk once it is quiet.
pub fn used_bytes(path: &Path) -> Result<u64, StoreError> {
    let failed = |doing: &str| {
        let doing = doing.to_owned();
        move |e: rusqlite::Error| StoreError::Backend { doing, source: Box::new(e) }
    };
    let conn = Connection::open(path).map_err(failed("opening the store file"))?;
    conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)").map_err(failed("checkpointing the log"))?;
    let pragma = |name: &str| -> Result<i64, StoreError> {
        conn.query_row(&format!("PRAGMA {name}"), [], |r| r.get(0)).map_err(failed("reading the page counts"))
    };
    let used = (pragma("page_count")? - pragma("freelist_count")?) * pragma("page_size")?;
    Ok(u64::try_from(used).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Many reads at once wait for the pool's connections: none is opened past its size.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn reads_at_once_never_open_connections_past_the_pool() {
        let dir = tempfile::tempdir().expect("a directory");
        let options = SqliteOptions { read_connections: 2, ..SqliteOptions::default() };
        let store = SqliteStore::open_with(dir.path().join("reads.db"), options).expect("opened");
        let reads = (0..64).map(|_| {
            store.read("reading in a test", |conn| {
                std::thread::sleep(std::time::Duration::from_millis(2));
                conn.query_row("SELECT 1", [], |r| r.get::<_, i64>(0)).map_err(|e| backend("selecting", e))
            })
        });
        let answers = futures_util::future::join_all(reads).await;
        assert!(answers.iter().all(|a| matches!(a, Ok(1))));
        assert_eq!(store.readers_opened.load(Ordering::Relaxed), 2, "two connections, each used again");
    }

    /// Under `synchronous = FULL`, the commits that only dispatch or answer unfenced tasks
    /// are written with `NORMAL` (made durable by the synced commit after them); a fenced
    /// task's dispatch and answer, a claim, a second answer and a completion are synced.
    /// Under `NORMAL`, nothing changes.
    #[tokio::test]
    async fn only_an_unfenced_tasks_dispatch_and_answer_wait_for_the_next_sync() {
        use stepwright_core::store::task::{Claim, TaskAnswer, TaskLease, TaskSpec};
        let dir = tempfile::tempdir().expect("a directory");
        let (full, normal) = (2, 1);
        for setting in [Synchronous::Full, Synchronous::Normal] {
            let options = SqliteOptions { synchronous: setting, ..SqliteOptions::default() };
            let store = SqliteStore::open_with(dir.path().join(format!("{setting:?}.db")), options).expect("opened");
            // The level SQLite wrote the last commit with.
            let last_commit = || -> i64 {
                let writer = store.shared.writer.lock().expect("poisoned");
                writer.conn.query_row("PRAGMA synchronous", [], |r| r.get(0)).expect("read")
            };
            // A commit that must be synced is, under FULL; everything is NORMAL under NORMAL.
            let expect = |lazy: bool| if setting == Synchronous::Full && !lazy { full } else { normal };
            let run = crate::conformance::record(1, "w", RunStatus::Running, crate::conformance::wall().as_micros());
            let run_id = run.id;
            store.create_run(run).await.expect("created");
            assert_eq!(last_commit(), expect(false), "a run's creation");
            let task = |step: &str, key: Option<&str>| TaskSpec {
                id: stepwright_core::store::task::TaskId::derive(run_id, &StepPath::new(step), 1),
                queue: "py".into(),
                handler: "h".into(),
                input: serde_json::json!(null),
                idempotency_key: key.map(str::to_owned),
                lease_ms: 60_000,
                schedule_to_start_ms: None,
                concurrency: None,
                details: None,
                recompute: false,
                leased_to: Some("w1".into()),
            };
            let at = crate::conformance::wall().as_micros();
            let dispatch = |step: &str, spec: &TaskSpec, intent: bool| {
                let mut batch = JournalBatch::default();
                batch.entries.push(crate::conformance::entry(step, at, Record::Started { attempt: 1 }));
                if intent {
                    let intent = Record::Intent { attempt: 1, key: "k".into(), input: None };
                    batch.entries.push(crate::conformance::entry(step, at, intent));
                }
                batch.entries.push(crate::conformance::entry(
                    step,
                    at,
                    Record::Dispatched { attempt: 1, task: spec.clone() },
                ));
                batch
            };
            let tasks = store.tasks().expect("tasks");
            let answer = |spec: &TaskSpec, answer: TaskAnswer| {
                let lease = TaskLease { task: spec.id.clone(), token: 1 };
                async move { tasks.answer_task(&lease, answer, crate::conformance::wall()).await.expect("answered") }
            };

            let read = task("read", None);
            store.append(run_id, None, &mut dispatch("read", &read, false)).await.expect("dispatched");
            assert_eq!(last_commit(), expect(true), "an unfenced task's dispatch");
            answer(&read, TaskAnswer::Release).await;
            assert_eq!(last_commit(), expect(true), "its answer");
            let claim = Claim {
                worker: "w2".into(),
                tenant: "acme".into(),
                queue: "py".into(),
                handlers: vec!["h".into()],
                max: 1,
            };
            let claimed = tasks.claim_tasks(&claim, crate::conformance::wall()).await.expect("claimed");
            assert_eq!(claimed.len(), 1);
            assert_eq!(last_commit(), expect(false), "a claim");
            let lease = TaskLease { task: read.id.clone(), token: claimed[0].lease_token };
            tasks
                .answer_task(&lease, TaskAnswer::Complete(serde_json::json!(1)), crate::conformance::wall())
                .await
                .expect("answered");
            assert_eq!(last_commit(), expect(false), "a second answer to the same task");

            let write = task("write", Some("k"));
            store.append(run_id, None, &mut dispatch("write", &write, true)).await.expect("dispatched");
            assert_eq!(last_commit(), expect(false), "a fenced task's dispatch, with its intent");
            answer(&write, TaskAnswer::Complete(serde_json::json!(2))).await;
            assert_eq!(last_commit(), expect(false), "a fenced task's answer");

            let (done, blob) = crate::conformance::completed("read", serde_json::json!(1));
            let mut batch = JournalBatch { entries: vec![done], blobs: vec![blob], events: Vec::new() };
            store.append(run_id, None, &mut batch).await.expect("completed");
            assert_eq!(last_commit(), expect(false), "a completion");
        }
    }
}
