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

use crate::encoding::{EncodedBlobs, backend, decode_blob, encode_batch_blobs};

mod bank;
mod cache;
mod events;
pub(crate) mod control;
mod quota;
mod read_only;
mod schedules;
mod sessions;

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
];

/// A durable store in one SQLite file.
pub struct SqliteStore {
    path: PathBuf,
    shared: Arc<Shared>,
    readers: Arc<Mutex<Vec<Connection>>>,
    max_readers: usize,
    fail_next_commit: Arc<AtomicBool>,
    /// New pending work written by this process (a run created, a run woken, the runs of a
    /// schedule's tick): a runner in this process waiting for work wakes at once. Other
    /// processes on the file find it at their next poll (SQLite has no notifications).
    work: Arc<tokio::sync::Notify>,
    /// For a file this process may only read: the URI its readers open (see
    /// `open_read_only`); `None`: the file itself, read-only.
    reader_uri: Option<String>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore").field("path", &self.path).finish_non_exhaustive()
    }
}

type Ack<T> = oneshot::Sender<Result<T, StoreError>>;

enum Op {
    Create(Box<RunRecord>, Ack<()>),
    Append(RunId, Option<u64>, JournalBatch, Ack<JournalBatch>),
    Claim(Claim, Ack<Vec<Lease>>),
    Heartbeat(Lease, Timestamp, std::time::Duration, Ack<Lease>),
    Post(RunId, String, Value, Ack<u64>),
    Define(ContentHash, Box<DefinitionSource>, Ack<()>),
    SetStatus(RunId, StatusUpdate, Ack<()>),
    Resolve(RunId, JournalEntry, Ack<()>),
    Remove(Removal, Ack<Removed>),
    Cancel(RunId, CancelRequest, Timestamp, Ack<CancelOutcome>),
    /// A write of a table the journal does not know (sessions, the memory bank): it runs
    /// in the writer's transaction like every other operation. `Fn`, not `FnOnce`: after a
    /// sibling fails, the transaction is rolled back and every operation is applied again.
    Write(Box<WriteFn>, Ack<Box<dyn std::any::Any + Send>>),
}

/// A [`Op::Write`] operation.
type WriteFn = dyn Fn(&Connection) -> Result<Box<dyn std::any::Any + Send>, StoreError> + Send;

impl Op {
    /// The one run an operation changes, if it changes exactly one.
    fn run(&self) -> Option<RunId> {
        match self {
            Op::Create(record, _) => Some(record.id),
            Op::Append(run, ..) | Op::SetStatus(run, ..) | Op::Resolve(run, ..) | Op::Cancel(run, ..) => Some(*run),
            Op::Heartbeat(lease, ..) => Some(lease.run),
            Op::Post(..) | Op::Define(..) | Op::Write(..) => None,
            Op::Claim(Claim { run, .. }, _) => *run,
            Op::Remove(..) => None,
        }
    }
}

struct Claim {
    run: Option<RunId>,
    /// Take the run over from this owner, however fresh its lease (it is known to be gone).
    take_from: Option<String>,
    owner: String,
    now: Timestamp,
    lease_for: std::time::Duration,
    limit: usize,
    /// Only runs of this tenant.
    tenant: Option<String>,
}

enum Removal {
    Runs(Vec<RunId>),
    Retention(Retention),
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
        let writer =
            Writer { conn, runs: HashMap::new(), data_version: -1, fail_next_commit: fail_next_commit.clone() };
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
            fail_next_commit,
            work: Arc::new(tokio::sync::Notify::new()),
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
        tokio::task::spawn_blocking(move || {
            let pooled = readers.lock().expect("poisoned").pop();
            let conn = match pooled {
                Some(conn) => conn,
                None => {
                    let conn = Connection::open_with_flags(
                        &path,
                        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX | OpenFlags::SQLITE_OPEN_URI,
                    )
                    .map_err(|e| backend("opening a sqlite read connection", e))?;
                    conn.busy_timeout(std::time::Duration::from_secs(5))
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
        let erased: Box<WriteFn> =
            Box::new(move |conn| write(conn).map(|answer| Box::new(answer) as Box<dyn std::any::Any + Send>));
        let answer = self.send(|ack| Op::Write(erased, ack)).await?;
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
    add_functions(conn)
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

/// Group commit without a thread hop: callers queue their operation, and whoever finds
/// the writer free becomes the leader — it commits everything queued (its own operation and
/// those that arrived meanwhile) in one transaction and answers each caller, then looks
/// again. A lone run therefore commits on its own thread with no hand-off, and under load
/// one fsync covers every queued run.
struct Shared {
    writer: Mutex<Writer>,
    queue: Mutex<Vec<Op>>,
    max_batch: usize,
}

impl Shared {
    /// Commits what is queued if the writer is free. On a multi-thread runtime's worker the
    /// leader commits one batch (the one holding its own operation) and hands the rest to a
    /// blocking thread: under a steady stream of callers the queue never empties, and a
    /// worker kept committing would hold back every task queued on it (a server's p99
    /// climbed to half a second that way). On one thread (a current-thread runtime, or no
    /// runtime) nothing else could run meanwhile, so it commits until the queue is empty.
    fn lead(self: &Arc<Self>, on_worker: bool) {
        loop {
            let Ok(mut writer) = self.writer.try_lock() else {
                // The current leader will take our operation: it drains the queue until it
                // is empty (or hands it on), and looks again after it lets go.
                return;
            };
            let mut committed = 0;
            loop {
                let ops: Vec<Op> = {
                    let mut queue = self.queue.lock().expect("poisoned");
                    if queue.is_empty() {
                        break;
                    }
                    if on_worker && committed == 1 {
                        drop(queue);
                        drop(writer);
                        let shared = self.clone();
                        tokio::task::spawn_blocking(move || shared.lead(false));
                        return;
                    }
                    let take = queue.len().min(self.max_batch);
                    queue.drain(..take).collect()
                };
                writer.commit(ops);
                committed += 1;
            }
            drop(writer);
            // An operation queued between our last look and letting go would otherwise wait
            // for the next caller: look once more.
            if self.queue.lock().expect("poisoned").is_empty() {
                return;
            }
        }
    }
}

/// What the writer knows of a run: its next sequence numbers and lease token. Kept across
/// transactions while no other connection has written (`PRAGMA data_version`), so a run's
/// steps do not re-read it on every commit.
#[derive(Debug, Clone, Copy)]
struct RunState {
    next_seq: i64,
    next_event: i64,
    token: u64,
}

struct Writer {
    conn: Connection,
    runs: HashMap<RunId, RunState>,
    /// The last `data_version` seen: a change means another connection wrote.
    data_version: i64,
    fail_next_commit: Arc<AtomicBool>,
}

/// What one operation answers, held until its transaction commits.
enum Answer {
    Unit,
    Batch,
    Removed(Removed),
    Leases(Vec<Lease>),
    Lease(Lease),
    Seq(u64),
    Cancel(CancelOutcome),
    Any(Box<dyn std::any::Any + Send>),
}

/// Answers a caller. An append hands its (now empty) batch back, so the caller keeps the
/// buffers' capacity. A caller that went away no longer needs its answer.
fn reply(op: Op, result: Result<Answer, StoreError>) {
    match (op, result) {
        (Op::Append(.., mut batch, ack), Ok(_)) => {
            batch.entries.clear();
            batch.blobs.clear();
            batch.events.clear();
            drop(ack.send(Ok(batch)));
        }
        (Op::Remove(_, ack), Ok(Answer::Removed(removed))) => drop(ack.send(Ok(removed))),
        (Op::Claim(_, ack), Ok(Answer::Leases(leases))) => drop(ack.send(Ok(leases))),
        (Op::Heartbeat(.., ack), Ok(Answer::Lease(lease))) => drop(ack.send(Ok(lease))),
        (Op::Post(.., ack), Ok(Answer::Seq(seq))) => drop(ack.send(Ok(seq))),
        (Op::Write(_, ack), Ok(Answer::Any(answer))) => drop(ack.send(Ok(answer))),
        (Op::Cancel(.., ack), Ok(Answer::Cancel(outcome))) => drop(ack.send(Ok(outcome))),
        (Op::Create(_, ack) | Op::SetStatus(_, _, ack) | Op::Resolve(_, _, ack) | Op::Define(_, _, ack), Ok(_)) => {
            drop(ack.send(Ok(())));
        }
        (op, Ok(_)) => answer_err(op, || backend("answering a store call", std::io::Error::other("mismatched answer"))),
        (op, Err(error)) => {
            let error = std::cell::Cell::new(Some(error));
            answer_err(op, move || error.take().unwrap_or_else(writer_gone));
        }
    }
}

impl Writer {
    fn exec(&self, sql: &'static str) -> rusqlite::Result<()> {
        self.conn.prepare_cached(sql)?.execute([]).map(drop)
    }

    fn commit(&mut self, ops: Vec<Op>) {
        let doing = "committing to the sqlite journal";
        if let Err(e) = self.exec("BEGIN IMMEDIATE") {
            let message = e.to_string();
            for op in ops {
                answer_err(op, || backend(doing, std::io::Error::other(message.clone())));
            }
            return;
        }
        // Holding the write lock now: if anyone else wrote since our last transaction, what
        // we cached may be stale.
        let version = self
            .conn
            .prepare_cached("PRAGMA data_version")
            .and_then(|mut statement| statement.query_row([], |r| r.get::<_, i64>(0)))
            .unwrap_or(-2);
        if version != self.data_version {
            self.runs.clear();
            self.data_version = version;
        }
        // Optimistic pass: operations almost never fail, so apply them without savepoints.
        // If one does, undo the transaction and apply them again, one savepoint each, so
        // that a failing operation leaves the others.
        let mut results = Vec::with_capacity(ops.len());
        let mut clean = true;
        for op in &ops {
            match self.apply(op) {
                Ok(answer) => results.push(Ok(answer)),
                Err(error) => {
                    clean = ops.len() == 1;
                    results.push(Err(error));
                    break;
                }
            }
        }
        if !clean {
            let _ = self.exec("ROLLBACK");
            self.runs.clear();
            results.clear();
            if let Err(e) = self.exec("BEGIN IMMEDIATE") {
                let message = e.to_string();
                for op in ops {
                    answer_err(op, || backend(doing, std::io::Error::other(message.clone())));
                }
                return;
            }
            for op in &ops {
                let run = op.run();
                let before = run.and_then(|r| self.runs.get(&r).copied());
                let _ = self.exec("SAVEPOINT op");
                let result = self.apply(op);
                if result.is_ok() {
                    let _ = self.exec("RELEASE op");
                } else {
                    let _ = self.exec("ROLLBACK TO op");
                    let _ = self.exec("RELEASE op");
                    if let Some(run) = run {
                        match before {
                            Some(state) => self.runs.insert(run, state),
                            None => self.runs.remove(&run),
                        };
                    }
                }
                results.push(result);
            }
        }
        // A lone operation that failed may have written part of what it does before it
        // failed (a write closure's first statement): nothing of it is kept.
        if clean && results.iter().any(Result::is_err) {
            let _ = self.exec("ROLLBACK");
            self.runs.clear();
            for (op, result) in ops.into_iter().zip(results) {
                reply(op, result);
            }
            return;
        }
        let injected = self.fail_next_commit.swap(false, Ordering::SeqCst);
        let committed = if injected {
            Err("injected commit failure".to_owned())
        } else {
            self.exec("COMMIT").map_err(|e| e.to_string())
        };
        match committed {
            Ok(()) => {
                for (op, result) in ops.into_iter().zip(results) {
                    reply(op, result);
                }
            }
            Err(message) => {
                let _ = self.exec("ROLLBACK");
                // Counters handed out in the rolled-back transaction are free again.
                self.runs.clear();
                for op in ops {
                    answer_err(op, || backend(doing, std::io::Error::other(message.clone())));
                }
            }
        }
    }

    /// The run's state in this transaction, read on first use.
    fn state(&mut self, run: RunId) -> Result<&mut RunState, StoreError> {
        if !self.runs.contains_key(&run) {
            let row: Option<(i64, i64, i64)> = self
                .conn
                .prepare_cached(
                    "SELECT (SELECT COALESCE(MAX(seq) + 1, 0) FROM journal WHERE run_id = ?1), \
                     (SELECT COALESCE(MAX(seq) + 1, 0) FROM events WHERE run_id = ?1), lease_token FROM runs WHERE id = ?1",
                )
                .and_then(|mut s| s.query_row([run.as_uuid().as_bytes()], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?))).optional())
                .map_err(|e| backend("reading a run's counters", e))?;
            let (next_seq, next_event, token) = row.ok_or(StoreError::RunNotFound(run))?;
            self.runs.insert(run, RunState { next_seq, next_event, token: token as u64 });
        }
        Ok(self.runs.get_mut(&run).expect("inserted above"))
    }

    fn apply(&mut self, op: &Op) -> Result<Answer, StoreError> {
        match op {
            Op::Create(record, _) => self.create(record).map(|()| Answer::Unit),
            Op::Append(run, fence, batch, _) => {
                self.check_fence(*run, *fence)?;
                self.append(*run, batch).map(|()| Answer::Batch)
            }
            Op::Claim(claim, _) => self.claim(claim).map(Answer::Leases),
            Op::Heartbeat(lease, now, lease_for, _) => self.heartbeat(lease, *now, *lease_for).map(Answer::Lease),
            Op::SetStatus(run, update, _) => self.set_status(*run, update).map(|()| Answer::Unit),
            Op::Resolve(run, entry, _) => self.resolve(*run, entry).map(|()| Answer::Unit),
            Op::Remove(removal, _) => self.remove(removal).map(Answer::Removed),
            Op::Cancel(run, request, now, _) => self.cancel(*run, request, *now).map(Answer::Cancel),
            Op::Define(hash, source, _) => self
                .conn
                .prepare_cached(
                    "INSERT OR IGNORE INTO definitions (hash, format, name, source, files) VALUES (?1, ?2, ?3, ?4, ?5)",
                )
                .and_then(|mut s| {
                    s.execute(params![
                        hash.as_bytes(),
                        source.format,
                        source.name,
                        source.source,
                        files_column(&source.files)
                    ])
                })
                .map(|_| Answer::Unit)
                .map_err(|e| backend("storing a definition", e)),
            Op::Write(write, _) => write(&self.conn).map(Answer::Any),
            Op::Post(run, inbox, message, _) => self
                .conn
                .prepare_cached("INSERT INTO messages (run_id, inbox, message) VALUES (?1, ?2, ?3)")
                .and_then(|mut s| s.insert(params![run.as_uuid().as_bytes(), inbox, json(message)]))
                .map(|seq| Answer::Seq(seq as u64))
                .map_err(|e| backend("storing a message", e)),
        }
    }

    fn create(&mut self, r: &RunRecord) -> Result<(), StoreError> {
        insert_run(&self.conn, r)?;
        let token = r.lease.as_ref().map_or(0, |l| l.token);
        self.runs.insert(r.id, RunState { next_seq: 0, next_event: 0, token });
        Ok(())
    }

    fn append(&mut self, run: RunId, batch: &JournalBatch) -> Result<(), StoreError> {
        let doing = "appending to the journal";
        let state = *self.state(run)?;
        let (mut seq, mut event_seq) = (state.next_seq, state.next_event);
        let id = run.as_uuid().into_bytes();
        // Small completed outputs go inline in their journal row; everything else that the
        // entries reference goes to `blobs` once.
        let EncodedBlobs { inline, stored } = encode_batch_blobs(batch);
        if !stored.is_empty() {
            let mut insert_blob = self
                .conn
                .prepare_cached("INSERT OR IGNORE INTO blobs (hash, codec, data) VALUES (?1, ?2, ?3)")
                .map_err(|e| backend(doing, e))?;
            for (hash, codec, bytes) in stored {
                insert_blob.execute(params![hash.as_bytes(), codec, bytes]).map_err(|e| backend(doing, e))?;
            }
        }
        {
            let mut insert_entry = self
                .conn
                .prepare_cached(
                    "INSERT INTO journal (run_id, seq, path, at, record, blob, value) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                )
                .map_err(|e| backend(doing, e))?;
            let mut insert_interrupt = self
                .conn
                .prepare_cached("INSERT OR IGNORE INTO interrupts (run_id, id, path, resolved) VALUES (?1, ?2, ?3, 0)")
                .map_err(|e| backend(doing, e))?;
            for entry in &batch.entries {
                let referenced = referenced_blob(&entry.record);
                let value = referenced.and_then(|h| inline.get(&h));
                let blob = if value.is_some() { None } else { referenced.map(|h| h.as_bytes().to_vec()) };
                insert_entry
                    .execute(params![
                        &id[..],
                        seq,
                        entry.path.as_str(),
                        entry.at.as_micros(),
                        json(&entry.record),
                        blob,
                        value
                    ])
                    .map_err(|e| backend(doing, e))?;
                if let Record::InterruptOpened { id: interrupt, .. } = &entry.record {
                    insert_interrupt
                        .execute(params![&id[..], interrupt.as_str(), entry.path.as_str()])
                        .map_err(|e| backend(doing, e))?;
                }
                seq += 1;
            }
        }
        if !batch.events.is_empty() {
            let mut insert_event = self
                .conn
                .prepare_cached(
                    "INSERT INTO events (run_id, seq, path, at, tenant, user_id, kind, data) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                )
                .map_err(|e| backend(doing, e))?;
            for event in &batch.events {
                insert_event
                    .execute(params![
                        &id[..],
                        event_seq,
                        event.path.as_str(),
                        event.at.as_micros(),
                        event.tenant,
                        event.user,
                        event.kind,
                        json(&event.data)
                    ])
                    .map_err(|e| backend(doing, e))?;
                event_seq += 1;
            }
        }
        let state = self.state(run)?;
        state.next_seq = seq;
        state.next_event = event_seq;
        Ok(())
    }

    fn record(&self, run: RunId) -> Result<Option<RunRecord>, StoreError> {
        self.conn
            .prepare_cached(&format!("SELECT {RUN_COLUMNS} FROM runs WHERE id = ?1"))
            .and_then(|mut s| s.query_row([run.as_uuid().as_bytes()], run_from_row).optional())
            .map_err(|e| backend("reading a run", e))
    }

    fn check_fence(&mut self, run: RunId, fence: Option<u64>) -> Result<(), StoreError> {
        if fence.is_none() {
            return Ok(());
        }
        // Read inside the write transaction: no other process can change it until commit.
        let token = self.state(run)?.token;
        let lease = Lease::new(run, String::new(), token, Timestamp::EPOCH);
        check_fence(Some(&RunRecord { lease: Some(lease), ..placeholder(run) }), run, fence)
    }

    fn store_lease(&mut self, lease: &Lease) -> Result<(), StoreError> {
        if let Some(state) = self.runs.get_mut(&lease.run) {
            state.token = lease.token;
        }
        self.conn
            .prepare_cached("UPDATE runs SET lease_owner = ?2, lease_token = ?3, lease_expires = ?4 WHERE id = ?1")
            .and_then(|mut s| {
                s.execute(params![
                    lease.run.as_uuid().as_bytes(),
                    lease.owner,
                    lease.token as i64,
                    lease.expires_at.as_micros()
                ])
            })
            .map_err(|e| backend("storing a lease", e))?;
        Ok(())
    }

    fn claim(&mut self, claim: &Claim) -> Result<Vec<Lease>, StoreError> {
        if let Some(run) = claim.run {
            let record = self.record(run)?.ok_or(StoreError::RunNotFound(run))?;
            let lease = match &claim.take_from {
                Some(from) => try_take_over(&record, from, &claim.owner, claim.now, claim.lease_for)?,
                None => try_claim(&record, &claim.owner, claim.now, claim.lease_for)?,
            };
            self.admit(&record, &mut HashMap::new(), claim.now)?;
            self.store_lease(&lease)?;
            return Ok(vec![lease]);
        }
        let candidates: Vec<RunRecord> = self
            .conn
            .prepare_cached(&format!(
                "SELECT {RUN_HEADER_COLUMNS} FROM runs WHERE status IN ('pending', 'running', 'suspended') \
                 AND (lease_expires IS NULL OR lease_expires <= ?1) AND (wake_at IS NULL OR wake_at <= ?1) \
                 AND (?3 IS NULL OR json_extract(caller, '$.tenant') = ?3) \
                 ORDER BY priority DESC, created_at LIMIT ?2"
            ))
            .and_then(|mut s| {
                let limit = i64::try_from(claim.limit.saturating_mul(4)).unwrap_or(i64::MAX);
                s.query_map(params![claim.now.as_micros(), limit, claim.tenant], run_from_row)?
                    .collect::<rusqlite::Result<Vec<_>>>()
            })
            .map_err(|e| backend("finding due runs", e))?;
        let mut leases = Vec::new();
        let mut held = HashMap::new();
        for record in candidates.iter().filter(|r| is_due(r, claim.now)) {
            if leases.len() >= claim.limit {
                break;
            }
            // A run whose concurrency group is full waits; the next in line may go.
            if self.admit(record, &mut held, claim.now).is_err() {
                continue;
            }
            let lease = try_claim(record, &claim.owner, claim.now, claim.lease_for)?;
            self.store_lease(&lease)?;
            leases.push(lease);
        }
        Ok(leases)
    }

    /// Admits a claimed run to its concurrency group, if it needs a slot (see [`admit`]):
    /// the group's count of slots held is read once per claim (`held`) and kept as runs
    /// are admitted, and an admitted run is marked running in this same transaction. The
    /// single writer serializes claims, so two never both see room.
    fn admit(
        &mut self,
        record: &RunRecord,
        held: &mut HashMap<String, usize>,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        let Some(group) = record.flow.needs_slot(record.status) else { return Ok(()) };
        let count = match held.get(&group.key) {
            Some(count) => *count,
            None => self
                .conn
                .prepare_cached(
                    "SELECT COUNT(*) FROM runs WHERE concurrency_key = ?1 AND status IN ('running', 'suspended')",
                )
                .and_then(|mut s| s.query_row([&group.key], |r| r.get::<_, i64>(0)))
                .map_err(|e| backend("counting a concurrency group's runs", e))? as usize,
        };
        admit(record, count)?;
        held.insert(group.key.clone(), count + 1);
        self.conn
            .prepare_cached("UPDATE runs SET status = 'running', wake_at = NULL, updated_at = ?2 WHERE id = ?1")
            .and_then(|mut s| s.execute(params![record.id.as_uuid().as_bytes(), now.as_micros()]))
            .map_err(|e| backend("starting an admitted run", e))?;
        Ok(())
    }

    fn heartbeat(
        &mut self,
        lease: &Lease,
        now: Timestamp,
        lease_for: std::time::Duration,
    ) -> Result<Lease, StoreError> {
        self.check_fence(lease.run, Some(lease.token))?;
        let renewed = Lease { expires_at: now.plus(lease_for), ..lease.clone() };
        self.store_lease(&renewed)?;
        Ok(renewed)
    }

    fn set_status(&mut self, run: RunId, u: &StatusUpdate) -> Result<(), StoreError> {
        self.check_fence(run, u.fence)?;
        let (current, cancel): (String, Option<String>) = self
            .conn
            .prepare_cached("SELECT status, cancel_request FROM runs WHERE id = ?1")
            .and_then(|mut s| s.query_row([run.as_uuid().as_bytes()], |r| Ok((r.get(0)?, r.get(1)?))).optional())
            .map_err(|e| backend("setting a run's status", e))?
            .ok_or(StoreError::RunNotFound(run))?;
        let current = parse_status(&current).map_err(|e| backend("setting a run's status", e))?;
        let cancel: Option<CancelRequest> = cancel
            .map(|text| serde_json::from_str(&text))
            .transpose()
            .map_err(|e| backend("reading a cancel request", e))?;
        let u = &effective_update(run, current, cancel.as_ref(), u.clone())?;
        // Any status but running releases the lease (the token stays, so it keeps growing).
        let changed = self
            .conn
            .prepare_cached(
                "UPDATE runs SET status = ?2, output = ?3, error = ?4, updated_at = ?5, wake_at = ?6, \
                 lease_owner = CASE WHEN ?7 THEN NULL ELSE lease_owner END, \
                 lease_expires = CASE WHEN ?7 THEN NULL ELSE lease_expires END WHERE id = ?1",
            )
            .and_then(|mut s| {
                s.execute(params![
                    run.as_uuid().as_bytes(),
                    RunStatus::as_str(u.status),
                    u.output.as_ref().map(stored_json),
                    u.error.as_ref().map(json),
                    u.at.as_micros(),
                    u.wake_at.map(Timestamp::as_micros),
                    u.status != RunStatus::Running,
                ])
            })
            .map_err(|e| backend("setting a run's status", e))?;
        if changed == 0 {
            return Err(StoreError::RunNotFound(run));
        }
        Ok(())
    }

    fn cancel(&mut self, run: RunId, request: &CancelRequest, now: Timestamp) -> Result<CancelOutcome, StoreError> {
        let doing = "cancelling a run";
        let record = self.record(run)?.ok_or(StoreError::RunNotFound(run))?;
        let outcome = decide_cancel(&record, now);
        let id = run.as_uuid().into_bytes();
        match &outcome {
            CancelOutcome::Finished(_) => {}
            CancelOutcome::Requested { .. } => {
                self.conn
                    .prepare_cached("UPDATE runs SET cancel_request = ?2 WHERE id = ?1")
                    .and_then(|mut s| s.execute(params![&id[..], json(request)]))
                    .map_err(|e| backend(doing, e))?;
            }
            CancelOutcome::Cancelled => {
                // The token grows, so a holder that stalled past its lease cannot write.
                self.conn
                    .prepare_cached(
                        "UPDATE runs SET status = 'cancelled', output = NULL, error = ?2, updated_at = ?3, \
                         wake_at = NULL, lease_owner = NULL, lease_expires = NULL, lease_token = lease_token + 1, \
                         cancel_request = ?4 WHERE id = ?1",
                    )
                    .and_then(|mut s| {
                        s.execute(params![&id[..], json(&request.error()), now.as_micros(), json(request)])
                    })
                    .map_err(|e| backend(doing, e))?;
                self.runs.remove(&run);
            }
        }
        Ok(outcome)
    }

    fn resolve(&mut self, run: RunId, entry: &JournalEntry) -> Result<(), StoreError> {
        let doing = "resolving an interrupt";
        let Record::InterruptResolved { id, .. } = &entry.record else {
            return Err(backend(doing, std::io::Error::other("the entry is not an interrupt resolution")));
        };
        let changed = self
            .conn
            .prepare_cached("UPDATE interrupts SET resolved = 1 WHERE run_id = ?1 AND id = ?2 AND resolved = 0")
            .and_then(|mut s| s.execute(params![run.as_uuid().as_bytes(), id.as_str()]))
            .map_err(|e| backend(doing, e))?;
        if changed == 0 {
            let exists: bool = self
                .conn
                .prepare_cached("SELECT EXISTS (SELECT 1 FROM interrupts WHERE run_id = ?1 AND id = ?2)")
                .and_then(|mut s| s.query_row(params![run.as_uuid().as_bytes(), id.as_str()], |r| r.get(0)))
                .map_err(|e| backend(doing, e))?;
            let interrupt = InterruptId::new(id.as_str());
            return Err(if exists {
                StoreError::AlreadyResolved { run, interrupt }
            } else {
                StoreError::InterruptNotFound { run, interrupt }
            });
        }
        let batch = JournalBatch { entries: vec![entry.clone()], ..JournalBatch::default() };
        self.append(run, &batch)
    }

    fn remove(&mut self, removal: &Removal) -> Result<Removed, StoreError> {
        let doing = "removing runs";
        let victims = match removal {
            Removal::Runs(runs) => runs.clone(),
            Removal::Retention(policy) => {
                let all = all_runs(&self.conn).map_err(|e| backend(doing, e))?;
                retention_victims(&all, policy)
            }
        };
        let mut removed = Removed::default();
        for run in victims {
            let id = run.as_uuid().into_bytes();
            for table in ["journal", "events", "interrupts", "messages"] {
                self.conn
                    .execute(&format!("DELETE FROM {table} WHERE run_id = ?1"), [&id[..]])
                    .map_err(|e| backend(doing, e))?;
            }
            // A run's own memory goes with it.
            self.conn
                .execute("DELETE FROM memory_items WHERE scope = 'run' AND owner = ?1", [run.to_string()])
                .map_err(|e| backend(doing, e))?;
            removed.runs +=
                self.conn.execute("DELETE FROM runs WHERE id = ?1", [&id[..]]).map_err(|e| backend(doing, e))?;
            self.runs.remove(&run);
        }
        removed.blobs = self
            .conn
            .execute("DELETE FROM blobs WHERE NOT EXISTS (SELECT 1 FROM journal WHERE journal.blob = blobs.hash)", [])
            .map_err(|e| backend(doing, e))?;
        Ok(removed)
    }
}

fn answer_err(op: Op, error: impl Fn() -> StoreError) {
    match op {
        Op::Create(_, ack) | Op::SetStatus(_, _, ack) | Op::Resolve(_, _, ack) => drop(ack.send(Err(error()))),
        Op::Append(_, _, _, ack) => drop(ack.send(Err(error()))),
        Op::Remove(_, ack) => drop(ack.send(Err(error()))),
        Op::Claim(_, ack) => drop(ack.send(Err(error()))),
        Op::Heartbeat(_, _, _, ack) => drop(ack.send(Err(error()))),
        Op::Post(.., ack) => drop(ack.send(Err(error()))),
        Op::Define(.., ack) => drop(ack.send(Err(error()))),
        Op::Write(_, ack) => drop(ack.send(Err(error()))),
        Op::Cancel(.., ack) => drop(ack.send(Err(error()))),
    }
}

/// Inserts a new run's header (`RunExists` when the id is taken): a run's creation, and
/// the runs a schedule's tick starts in the same transaction as the tick.
pub(crate) fn insert_run(conn: &Connection, r: &RunRecord) -> Result<(), StoreError> {
    let doing = "creating a run";
    let exists: bool = conn
        .prepare_cached("SELECT EXISTS (SELECT 1 FROM runs WHERE id = ?1)")
        .and_then(|mut s| s.query_row([r.id.as_uuid().as_bytes()], |row| row.get(0)))
        .map_err(|e| backend(doing, e))?;
    if exists {
        return Err(StoreError::RunExists(r.id));
    }
    conn.prepare_cached(
        "INSERT INTO runs (id, workflow, version, definition_hash, input, caller, status, output, error, \
                 parent_run, parent_path, created_at, updated_at, wake_at, lease_owner, lease_token, lease_expires, \
                 priority, concurrency_key, concurrency_limit) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20)",
    )
    .and_then(|mut s| {
        s.execute(params![
            r.id.as_uuid().as_bytes(),
            r.workflow,
            r.version,
            r.definition_hash.as_bytes(),
            stored_json(&r.input),
            json(&r.caller),
            RunStatus::as_str(r.status),
            r.output.as_ref().map(stored_json),
            r.error.as_ref().map(json),
            r.parent.as_ref().map(|p| p.run.as_uuid().as_bytes().to_vec()),
            r.parent.as_ref().map(|p| p.at.as_str().to_owned()),
            r.created_at.as_micros(),
            r.updated_at.as_micros(),
            r.wake_at.map(Timestamp::as_micros),
            r.lease.as_ref().map(|l| l.owner.clone()),
            r.lease.as_ref().map_or(0, |l| l.token as i64),
            r.lease.as_ref().map(|l| l.expires_at.as_micros()),
            r.flow.priority,
            r.flow.concurrency.as_ref().map(|c| c.key.clone()),
            r.flow.concurrency.as_ref().map(|c| c.limit),
        ])
    })
    .map_err(|e| backend(doing, e))?;
    Ok(())
}

/// A run's input or output as the runs table keeps it: its JSON as text, or, from
/// `COMPRESS_AT` bytes on when that is smaller, lz4-compressed JSON as a BLOB (as blobs are).
fn stored_json(value: &Value) -> rusqlite::types::Value {
    match crate::encoding::encode_json(serde_json::to_vec(value).unwrap_or_default()) {
        (crate::encoding::CODEC_LZ4_JSON, bytes) => rusqlite::types::Value::Blob(bytes),
        (_, json) => rusqlite::types::Value::Text(String::from_utf8(json).unwrap_or_default()),
    }
}

/// Reads what [`stored_json`] wrote (and the plain JSON text of older rows).
fn read_json(stored: rusqlite::types::ValueRef<'_>) -> rusqlite::Result<Option<Value>> {
    use rusqlite::types::ValueRef;
    match stored {
        ValueRef::Null => Ok(None),
        ValueRef::Text(text) => serde_json::from_slice(text).map(Some).map_err(conversion),
        ValueRef::Blob(bytes) => {
            let json = lz4_flex::decompress_size_prepended(bytes).map_err(conversion)?;
            serde_json::from_slice(&json).map(Some).map_err(conversion)
        }
        ValueRef::Integer(_) | ValueRef::Real(_) => {
            Err(conversion(std::io::Error::other("a run's input or output is neither JSON text nor compressed JSON")))
        }
    }
}

fn json<T: serde::Serialize + ?Sized>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

fn parse_status(name: &str) -> rusqlite::Result<RunStatus> {
    RunStatus::parse(name).ok_or_else(|| conversion(std::io::Error::other(format!("unknown run status {name:?}"))))
}

fn conversion(e: impl std::error::Error + Send + Sync + 'static) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(0, rusqlite::types::Type::Text, Box::new(e))
}

fn bytes_to_id(bytes: &[u8]) -> rusqlite::Result<RunId> {
    let bytes: [u8; 16] =
        bytes.try_into().map_err(|_| conversion(std::io::Error::other("a run id is not 16 bytes")))?;
    Ok(RunId::from_bytes(bytes))
}

fn hash_from(bytes: &[u8]) -> rusqlite::Result<ContentHash> {
    ContentHash::from_slice(bytes).ok_or_else(|| conversion(std::io::Error::other("a content hash is not 32 bytes")))
}

const RUN_COLUMNS: &str = "id, workflow, version, definition_hash, input, caller, status, output, error, \
                           parent_run, parent_path, created_at, updated_at, wake_at, lease_owner, lease_token, lease_expires, \
                           cancel_request, priority, concurrency_key, concurrency_limit";

/// The creation-time, input-text, parent and concurrency-group filters of a listing
/// (parameters 6 to 10).
const NARROWED: &str = "(?6 IS NULL OR created_at >= ?6) AND (?7 IS NULL OR created_at < ?7) \
                        AND (?8 IS NULL OR input_contains(input, ?8)) AND (?9 IS NULL OR parent_run = ?9) \
                        AND (?10 IS NULL OR concurrency_key = ?10)";

/// [`RUN_COLUMNS`] with the input, output and error left out (read as JSON `null`).
const RUN_HEADER_COLUMNS: &str = "id, workflow, version, definition_hash, 'null', caller, status, NULL, NULL, \
                                  parent_run, parent_path, created_at, updated_at, wake_at, lease_owner, lease_token, \
                                  lease_expires, cancel_request, priority, concurrency_key, concurrency_limit";

/// A header with only an id, for fence checks.
fn placeholder(run: RunId) -> RunRecord {
    RunRecord {
        id: run,
        workflow: String::new(),
        version: String::new(),
        definition_hash: ContentHash::of_bytes(b""),
        input: Arc::new(Value::Null),
        caller: Default::default(),
        status: RunStatus::Running,
        output: None,
        error: None,
        parent: None,
        created_at: Timestamp::EPOCH,
        updated_at: Timestamp::EPOCH,
        wake_at: None,
        lease: None,
        cancel: None,
        flow: Default::default(),
    }
}

fn files_column(files: &std::collections::BTreeMap<String, String>) -> Option<String> {
    (!files.is_empty()).then(|| json(&serde_json::to_value(files).unwrap_or_default()))
}

fn run_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<RunRecord> {
    let parent_run: Option<Vec<u8>> = row.get(9)?;
    let parent_path: Option<String> = row.get(10)?;
    Ok(RunRecord {
        id: bytes_to_id(&row.get::<_, Vec<u8>>(0)?)?,
        workflow: row.get(1)?,
        version: row.get(2)?,
        definition_hash: hash_from(&row.get::<_, Vec<u8>>(3)?)?,
        input: Arc::new(read_json(row.get_ref(4)?)?.unwrap_or(Value::Null)),
        caller: serde_json::from_str(&row.get::<_, String>(5)?).map_err(conversion)?,
        status: parse_status(&row.get::<_, String>(6)?)?,
        output: read_json(row.get_ref(7)?)?,
        error: row.get::<_, Option<String>>(8)?.map(|t| serde_json::from_str(&t).map_err(conversion)).transpose()?,
        parent: match (parent_run, parent_path) {
            (Some(run), Some(path)) => {
                Some(stepwright_core::journal::Lineage { run: bytes_to_id(&run)?, at: StepPath::new(&path) })
            }
            _ => None,
        },
        created_at: Timestamp::from_micros(row.get(11)?),
        updated_at: Timestamp::from_micros(row.get(12)?),
        wake_at: row.get::<_, Option<i64>>(13)?.map(Timestamp::from_micros),
        lease: match (row.get::<_, Option<String>>(14)?, row.get::<_, Option<i64>>(16)?) {
            (Some(owner), Some(expires)) => Some(Lease::new(
                bytes_to_id(&row.get::<_, Vec<u8>>(0)?)?,
                owner,
                row.get::<_, i64>(15)? as u64,
                Timestamp::from_micros(expires),
            )),
            _ => None,
        },
        cancel: row.get::<_, Option<String>>(17)?.map(|t| serde_json::from_str(&t).map_err(conversion)).transpose()?,
        flow: FlowControl {
            priority: row.get(18)?,
            concurrency: match (row.get::<_, Option<String>>(19)?, row.get::<_, Option<u32>>(20)?) {
                (Some(key), Some(limit)) => Some(Concurrency { key, limit }),
                _ => None,
            },
        },
    })
}

fn all_runs(conn: &Connection) -> rusqlite::Result<Vec<RunRecord>> {
    let mut stmt = conn.prepare_cached(&format!("SELECT {RUN_COLUMNS} FROM runs"))?;
    let rows = stmt.query_map([], run_from_row)?;
    rows.collect()
}

/// A position in a run's journal or events as SQLite stores it.
fn position(from: u64) -> i64 {
    i64::try_from(from).unwrap_or(i64::MAX)
}

fn load_from(conn: &Connection, run: RunId, from: u64) -> Result<LoadedRun, StoreError> {
    let doing = "loading a run";
    let id = run.as_uuid().into_bytes();
    let record = conn
        .prepare_cached(&format!("SELECT {RUN_COLUMNS} FROM runs WHERE id = ?1"))
        .and_then(|mut s| s.query_row([&id[..]], run_from_row).optional())
        .map_err(|e| backend(doing, e))?
        .ok_or(StoreError::RunNotFound(run))?;
    let mut entries = Vec::new();
    let mut wanted = Vec::new();
    let mut inline = HashMap::new();
    {
        let mut stmt = conn
            .prepare_cached("SELECT path, at, record, value FROM journal WHERE run_id = ?1 AND seq >= ?2 ORDER BY seq")
            .map_err(|e| backend(doing, e))?;
        let mut rows = stmt.query(params![&id[..], position(from)]).map_err(|e| backend(doing, e))?;
        while let Some(row) = rows.next().map_err(|e| backend(doing, e))? {
            let path: String = row.get(0).map_err(|e| backend(doing, e))?;
            let at: i64 = row.get(1).map_err(|e| backend(doing, e))?;
            let text: String = row.get(2).map_err(|e| backend(doing, e))?;
            let record: Record = serde_json::from_str(&text).map_err(|e| backend(doing, e))?;
            let value: Option<Vec<u8>> = row.get(3).map_err(|e| backend(doing, e))?;
            if let Record::Completed { output, .. } = &record {
                match value {
                    // An inline output is checked against its hash like any blob.
                    Some(json) => {
                        inline.insert(*output, decode_blob(*output, crate::encoding::CODEC_JSON, &json)?);
                    }
                    None => wanted.push(*output),
                }
            }
            entries.push(JournalEntry { path: StepPath::new(&path), at: Timestamp::from_micros(at), record });
        }
    }
    let mut blobs = inline;
    let mut stmt =
        conn.prepare_cached("SELECT codec, data FROM blobs WHERE hash = ?1").map_err(|e| backend(doing, e))?;
    for hash in wanted {
        if blobs.contains_key(&hash) {
            continue;
        }
        let row: Option<(i64, Vec<u8>)> = stmt
            .query_row([&hash.as_bytes()[..]], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()
            .map_err(|e| backend(doing, e))?;
        let (codec, data) = row.ok_or(StoreError::Corrupt(hash))?;
        blobs.insert(hash, decode_blob(hash, codec, &data)?);
    }
    Ok(LoadedRun { record, entries, blobs })
}

impl Store for SqliteStore {
    fn create_run(&self, record: RunRecord) -> BoxFuture<'_, Result<(), StoreError>> {
        let pending = record.status == RunStatus::Pending;
        Box::pin(async move {
            self.send(|ack| Op::Create(Box::new(record), ack)).await?;
            if pending {
                self.announce_work();
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
        Box::pin(async move {
            let owned = std::mem::take(batch);
            // The writer hands the drained buffers back, so the caller keeps their capacity.
            *batch = self.send(|ack| Op::Append(run, fence, owned, ack)).await?;
            Ok(())
        })
    }

    fn set_status(&self, run: RunId, update: StatusUpdate) -> BoxFuture<'_, Result<(), StoreError>> {
        let waits = matches!(update.status, RunStatus::Pending | RunStatus::Suspended);
        Box::pin(async move {
            self.send(move |ack| Op::SetStatus(run, update, ack)).await?;
            if waits {
                self.announce_work();
            }
            Ok(())
        })
    }

    fn wait_for_work(&self, timeout: std::time::Duration) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let _ = tokio::time::timeout(timeout, self.work.notified()).await;
        })
    }

    fn load_from(&self, run: RunId, from: u64) -> BoxFuture<'_, Result<LoadedRun, StoreError>> {
        Box::pin(self.read("loading a run", move |conn| load_from(conn, run, from)))
    }

    fn resolve_interrupt(&self, run: RunId, entry: JournalEntry) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(self.send(move |ack| Op::Resolve(run, entry, ack)))
    }

    fn events_from(&self, run: RunId, from: u64) -> BoxFuture<'_, Result<Vec<EventRecord>, StoreError>> {
        Box::pin(self.read("reading events", move |conn| {
            let doing = "reading events";
            let id = run.as_uuid().into_bytes();
            let exists: bool = conn
                .query_row("SELECT EXISTS (SELECT 1 FROM runs WHERE id = ?1)", [&id[..]], |r| r.get(0))
                .map_err(|e| backend(doing, e))?;
            if !exists {
                return Err(StoreError::RunNotFound(run));
            }
            let mut stmt = conn
                .prepare_cached(
                    "SELECT path, at, tenant, user_id, kind, data FROM events WHERE run_id = ?1 AND seq >= ?2 ORDER BY seq",
                )
                .map_err(|e| backend(doing, e))?;
            let rows = stmt
                .query_map(params![&id[..], position(from)], |r| {
                    Ok(EventRecord {
                        run,
                        path: StepPath::new(&r.get::<_, String>(0)?),
                        at: Timestamp::from_micros(r.get(1)?),
                        tenant: r.get(2)?,
                        user: r.get(3)?,
                        kind: r.get(4)?,
                        data: serde_json::from_str(&r.get::<_, String>(5)?).map_err(conversion)?,
                    })
                })
                .map_err(|e| backend(doing, e))?;
            rows.collect::<rusqlite::Result<Vec<_>>>().map_err(|e| backend(doing, e))
        }))
    }

    fn list_runs(&self, filter: RunFilter) -> BoxFuture<'_, Result<Vec<RunRecord>, StoreError>> {
        Box::pin(self.read("listing runs", move |conn| {
            let columns = if filter.headers_only { RUN_HEADER_COLUMNS } else { RUN_COLUMNS };
            let limit = i64::try_from(filter.limit.unwrap_or(100)).unwrap_or(i64::MAX);
            let status = filter.status.map(RunStatus::as_str);
            let from = filter.created_from.map(Timestamp::as_micros);
            let until = filter.created_until.map(Timestamp::as_micros);
            let text = filter.input_contains.as_deref().map(str::to_ascii_lowercase);
            let parent = filter.parent.map(|run| run.as_uuid().as_bytes().to_vec());
            let rows = if let Some(since) = filter.updated_since {
                let mut stmt = conn
                    .prepare_cached(&format!(
                        "SELECT {columns} FROM runs WHERE (?1 IS NULL OR status = ?1) AND (?2 IS NULL OR workflow = ?2) \
                         AND (?4 IS NULL OR json_extract(caller, '$.tenant') = ?4) AND updated_at >= ?5 \
                         AND {NARROWED} ORDER BY updated_at, id LIMIT ?3"
                    ))
                    .map_err(|e| backend("listing runs", e))?;
                let rows = stmt
                    .query_map(
                        params![
                            status,
                            filter.workflow,
                            limit,
                            filter.tenant,
                            since.as_micros(),
                            from,
                            until,
                            text,
                            parent,
                            filter.concurrency_key
                        ],
                        run_from_row,
                    )
                    .map_err(|e| backend("listing runs", e))?;
                rows.collect::<rusqlite::Result<Vec<_>>>()
            } else {
                let mut stmt = conn
                    .prepare_cached(&format!(
                        "SELECT {columns} FROM runs WHERE (?1 IS NULL OR status = ?1) AND (?2 IS NULL OR workflow = ?2) \
                         AND (?5 IS NULL OR json_extract(caller, '$.tenant') = ?5) \
                         AND (?4 IS NULL OR (created_at, id) < (SELECT created_at, id FROM runs WHERE id = ?4)) \
                         AND {NARROWED} ORDER BY created_at DESC, id DESC LIMIT ?3"
                    ))
                    .map_err(|e| backend("listing runs", e))?;
                let before = filter.before.map(|run| run.as_uuid().as_bytes().to_vec());
                let rows = stmt
                    .query_map(
                        params![
                            status,
                            filter.workflow,
                            limit,
                            before,
                            filter.tenant,
                            from,
                            until,
                            text,
                            parent,
                            filter.concurrency_key
                        ],
                        run_from_row,
                    )
                    .map_err(|e| backend("listing runs", e))?;
                rows.collect::<rusqlite::Result<Vec<_>>>()
            };
            rows.map_err(|e| backend("listing runs", e))
        }))
    }

    fn erase_run(&self, run: RunId) -> BoxFuture<'_, Result<Removed, StoreError>> {
        Box::pin(self.send(move |ack| Op::Remove(Removal::Runs(vec![run]), ack)))
    }

    fn apply_retention(&self, policy: Retention) -> BoxFuture<'_, Result<Removed, StoreError>> {
        Box::pin(self.send(move |ack| Op::Remove(Removal::Retention(policy), ack)))
    }

    fn claim(
        &self,
        run: RunId,
        owner: &str,
        now: Timestamp,
        lease_for: std::time::Duration,
    ) -> BoxFuture<'_, Result<Lease, StoreError>> {
        Box::pin(self.claim_one(run, None, owner.to_owned(), now, lease_for))
    }

    fn take_over(
        &self,
        run: RunId,
        from: &str,
        owner: &str,
        now: Timestamp,
        lease_for: std::time::Duration,
    ) -> BoxFuture<'_, Result<Lease, StoreError>> {
        Box::pin(self.claim_one(run, Some(from.to_owned()), owner.to_owned(), now, lease_for))
    }

    fn request_cancel(
        &self,
        run: RunId,
        request: CancelRequest,
        now: Timestamp,
    ) -> BoxFuture<'_, Result<CancelOutcome, StoreError>> {
        Box::pin(self.send(move |ack| Op::Cancel(run, request, now, ack)))
    }

    fn cancel_requests(&self, runs: &[RunId]) -> BoxFuture<'_, Result<Vec<(RunId, CancelRequest)>, StoreError>> {
        let runs = runs.to_vec();
        Box::pin(self.read("reading cancel requests", move |conn| {
            let doing = "reading cancel requests";
            let mut found = Vec::new();
            let mut stmt = conn
                .prepare_cached("SELECT cancel_request FROM runs WHERE id = ?1 AND cancel_request IS NOT NULL")
                .map_err(|e| backend(doing, e))?;
            for run in runs {
                let text: Option<String> = stmt
                    .query_row([run.as_uuid().as_bytes()], |r| r.get(0))
                    .optional()
                    .map_err(|e| backend(doing, e))?;
                if let Some(text) = text {
                    found.push((run, serde_json::from_str(&text).map_err(|e| backend(doing, e))?));
                }
            }
            Ok(found)
        }))
    }

    fn claim_due(
        &self,
        owner: &str,
        now: Timestamp,
        lease_for: std::time::Duration,
        limit: usize,
        tenant: Option<&str>,
    ) -> BoxFuture<'_, Result<Vec<Lease>, StoreError>> {
        let tenant = tenant.map(str::to_owned);
        let claim = Claim { run: None, take_from: None, owner: owner.to_owned(), now, lease_for, limit, tenant };
        Box::pin(self.send(|ack| Op::Claim(claim, ack)))
    }

    fn put_definition(&self, hash: ContentHash, source: DefinitionSource) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(self.send(move |ack| Op::Define(hash, Box::new(source), ack)))
    }

    fn get_definition(&self, hash: ContentHash) -> BoxFuture<'_, Result<Option<DefinitionSource>, StoreError>> {
        Box::pin(self.read("reading a definition", move |conn| {
            let row = conn
                .prepare_cached("SELECT format, name, source, files FROM definitions WHERE hash = ?1")
                .and_then(|mut s| {
                    s.query_row([&hash.as_bytes()[..]], |r| {
                        Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get::<_, Option<String>>(3)?))
                    })
                    .optional()
                })
                .map_err(|e| backend("reading a definition", e))?;
            row.map(|(format, name, source, files)| {
                let files = crate::encoding::files_from_column(files.as_deref())
                    .map_err(|e| backend("reading a definition", e))?;
                Ok(DefinitionSource { format, name, source, files })
            })
            .transpose()
        }))
    }

    fn post_message(&self, run: RunId, inbox: &str, message: Value) -> BoxFuture<'_, Result<u64, StoreError>> {
        let inbox = inbox.to_owned();
        Box::pin(self.send(move |ack| Op::Post(run, inbox, message, ack)))
    }

    fn wake_run(&self, run: RunId, now: Timestamp) -> BoxFuture<'_, Result<bool, StoreError>> {
        Box::pin(self.write(move |conn| {
            let doing = "bringing a run's timer forward";
            let id = run.as_uuid().into_bytes();
            let changed = conn
                .prepare_cached("UPDATE runs SET wake_at = ?2 WHERE id = ?1 AND status = 'suspended' AND wake_at > ?2")
                .and_then(|mut s| s.execute(params![&id[..], now.as_micros()]))
                .map_err(|e| backend(doing, e))?;
            if changed == 0 {
                let exists: bool = conn
                    .query_row("SELECT EXISTS (SELECT 1 FROM runs WHERE id = ?1)", [&id[..]], |r| r.get(0))
                    .map_err(|e| backend(doing, e))?;
                if !exists {
                    return Err(StoreError::RunNotFound(run));
                }
            }
            Ok(changed > 0)
        }))
    }

    fn next_message(
        &self,
        run: RunId,
        inbox: &str,
        after: Option<u64>,
    ) -> BoxFuture<'_, Result<Option<(u64, Value)>, StoreError>> {
        let inbox = inbox.to_owned();
        Box::pin(self.read("reading a message", move |conn| {
            let doing = "reading a message";
            let after = after.map_or(-1, |a| a as i64);
            let row: Option<(i64, String)> = conn
                .prepare_cached(
                    "SELECT seq, message FROM messages WHERE run_id = ?1 AND inbox = ?2 AND seq > ?3 ORDER BY seq LIMIT 1",
                )
                .and_then(|mut s| s.query_row(params![run.as_uuid().as_bytes(), inbox, after], |r| Ok((r.get(0)?, r.get(1)?))).optional())
                .map_err(|e| backend(doing, e))?;
            row.map(|(seq, text)| Ok((seq as u64, serde_json::from_str(&text).map_err(|e| backend(doing, e))?))).transpose()
        }))
    }

    fn logged_events<'a>(
        &'a self,
        tenant: Option<&'a str>,
        name: &'a str,
        after: Option<u64>,
        since: Timestamp,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<stepwright_core::store::event::StoredEvent>, StoreError>> {
        let (tenant, name) = (tenant.map(str::to_owned), name.to_owned());
        Box::pin(self.read("reading events", move |conn| {
            let query = stepwright_core::store::event::EventQuery::for_wait(&name, after, since, limit);
            events::query(conn, tenant.as_deref(), &query)
        }))
    }

    fn watch_events<'a>(
        &'a self,
        run: RunId,
        tenant: Option<&'a str>,
        name: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.watch_events_in(run, tenant, name)
    }

    fn heartbeat(
        &self,
        lease: &Lease,
        now: Timestamp,
        lease_for: std::time::Duration,
    ) -> BoxFuture<'_, Result<Lease, StoreError>> {
        let lease = lease.clone();
        Box::pin(self.send(move |ack| Op::Heartbeat(lease, now, lease_for, ack)))
    }
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
