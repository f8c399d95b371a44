//! The writer: one thread owns the read-write connection and applies every queued
//! operation in one transaction, each in a savepoint (group commit).

use super::*;

pub(super) type Ack<T> = oneshot::Sender<Result<T, StoreError>>;

pub(super) enum Op {
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
    Write(Box<WriteFn>, WriteKind, Ack<Box<dyn std::any::Any + Send>>),
}

/// A [`Op::Write`] operation.
pub(super) type WriteFn = dyn Fn(&Connection) -> Result<Box<dyn std::any::Any + Send>, StoreError> + Send;

impl Op {
    /// The one run an operation changes, if it changes exactly one.
    pub(super) fn run(&self) -> Option<RunId> {
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

pub(super) struct Claim {
    pub(super) run: Option<RunId>,
    /// Take the run over from this owner, however fresh its lease (it is known to be gone).
    pub(super) take_from: Option<String>,
    pub(super) owner: String,
    pub(super) now: Timestamp,
    pub(super) lease_for: std::time::Duration,
    pub(super) limit: usize,
    /// Only runs of this tenant.
    pub(super) tenant: Option<String>,
}

pub(super) enum Removal {
    Runs(Vec<RunId>),
    Retention(Retention),
}

/// Group commit without a thread hop: callers queue their operation, and whoever finds
/// the writer free becomes the leader — it commits everything queued (its own operation and
/// those that arrived meanwhile) in one transaction and answers each caller, then looks
/// again. A lone run therefore commits on its own thread with no hand-off, and under load
/// one fsync covers every queued run.
pub(super) struct Shared {
    pub(super) writer: Mutex<Writer>,
    pub(super) queue: Mutex<Vec<Op>>,
    pub(super) max_batch: usize,
}

impl Shared {
    /// Commits what is queued if the writer is free. On a multi-thread runtime's worker the
    /// leader commits one batch (the one holding its own operation) and hands the rest to a
    /// blocking thread: under a steady stream of callers the queue never empties, and a
    /// worker kept committing would hold back every task queued on it (a server's p99
    /// climbed to half a second that way). On one thread (a current-thread runtime, or no
    /// runtime) nothing else could run meanwhile, so it commits until the queue is empty.
    pub(super) fn lead(self: &Arc<Self>, on_worker: bool) {
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
pub(super) struct RunState {
    pub(super) next_seq: i64,
    pub(super) next_event: i64,
    pub(super) token: u64,
}

pub(super) struct Writer {
    pub(super) conn: Connection,
    pub(super) runs: HashMap<RunId, RunState>,
    /// The last `data_version` seen: a change means another connection wrote.
    pub(super) data_version: i64,
    pub(super) fail_next_commit: Arc<AtomicBool>,
    /// The store's setting: with `Full`, a commit that only dispatches or answers unfenced
    /// tasks is still written with `NORMAL` (see [`Writer::syncs_later`]).
    pub(super) synchronous: Synchronous,
    /// Whether the connection is at `synchronous = NORMAL` under a `Full` setting now (set
    /// back before the next commit that must be synced: SQLite refuses to change it inside
    /// a transaction).
    pub(super) lazy_now: bool,
    /// Unfenced tasks this writer inserted and no answer has reached yet: an answer to one
    /// of them may commit lazily. A task not here (dispatched by another process, or before
    /// a restart) is answered with a synced commit, which is never wrong.
    pub(super) unfenced: std::collections::HashSet<stepwright_core::store::task::TaskId>,
}

/// Tasks remembered as unfenced at most; past it the memory is dropped, and answers to the
/// forgotten ones are synced.
const UNFENCED_REMEMBERED: usize = 65_536;

/// What one operation answers, held until its transaction commits.
pub(super) enum Answer {
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
pub(super) fn reply(op: Op, result: Result<Answer, StoreError>) {
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
        (Op::Write(_, _, ack), Ok(Answer::Any(answer))) => drop(ack.send(Ok(answer))),
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
    pub(super) fn exec(&self, sql: &'static str) -> rusqlite::Result<()> {
        self.conn.prepare_cached(sql)?.execute([]).map(drop)
    }

    /// Whether a commit of `ops` alone may reach the disk with the next synced commit
    /// rather than its own fsync: every operation dispatches unfenced tasks (with their
    /// attempts' starts) or answers one. Such work is retried when it is lost — what a power
    /// loss could take back is a task the engine dispatches again, or an answer whose task
    /// runs again, as a `read` step that was running when the machine died — while the
    /// commit after it (the step's completion) is synced and carries it to the disk: the
    /// WAL is appended in order, so a synced commit makes every commit before it durable.
    /// A fenced task's dispatch carries its intent and is never lazy; its answer neither.
    fn syncs_later(&self, ops: &[Op]) -> bool {
        self.synchronous == Synchronous::Full
            && ops.iter().all(|op| match op {
                Op::Append(_, _, batch, _) => {
                    batch.entries.iter().any(|e| matches!(e.record, Record::Dispatched { .. }))
                        && batch.entries.iter().all(|e| match &e.record {
                            Record::Started { .. } => true,
                            Record::Dispatched { task, .. } => task.idempotency_key.is_none(),
                            _ => false,
                        })
                }
                Op::Write(_, WriteKind::AnswersTask(task), _) => self.unfenced.contains(task),
                _ => false,
            })
    }

    /// Sets the connection's `synchronous` for the next transaction (outside one).
    fn sync_commits(&mut self, lazy: bool) -> rusqlite::Result<()> {
        if lazy != self.lazy_now {
            self.conn.pragma_update(None, "synchronous", if lazy { "NORMAL" } else { "FULL" })?;
            self.lazy_now = lazy;
        }
        Ok(())
    }

    pub(super) fn commit(&mut self, ops: Vec<Op>) {
        let doing = "committing to the sqlite journal";
        let lazy = self.syncs_later(&ops);
        // Answered: the next answer to the task (after a release) is synced, which is never wrong.
        for op in &ops {
            if let Op::Write(_, WriteKind::AnswersTask(task), _) = op {
                self.unfenced.remove(task);
            }
        }
        if let Err(e) = self.sync_commits(lazy) {
            let message = e.to_string();
            for op in ops {
                answer_err(op, || backend(doing, std::io::Error::other(message.clone())));
            }
            return;
        }
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
    pub(super) fn state(&mut self, run: RunId) -> Result<&mut RunState, StoreError> {
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

    pub(super) fn apply(&mut self, op: &Op) -> Result<Answer, StoreError> {
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
            Op::Write(write, ..) => write(&self.conn).map(Answer::Any),
            Op::Post(run, inbox, message, _) => self
                .conn
                .prepare_cached("INSERT INTO messages (run_id, inbox, message) VALUES (?1, ?2, ?3)")
                .and_then(|mut s| s.insert(params![run.as_uuid().as_bytes(), inbox, json(message)]))
                .map(|seq| Answer::Seq(seq as u64))
                .map_err(|e| backend("storing a message", e)),
        }
    }

    pub(super) fn create(&mut self, r: &RunRecord) -> Result<(), StoreError> {
        insert_run(&self.conn, r)?;
        let token = r.lease.as_ref().map_or(0, |l| l.token);
        self.runs.insert(r.id, RunState { next_seq: 0, next_event: 0, token });
        Ok(())
    }

    pub(super) fn append(&mut self, run: RunId, batch: &JournalBatch) -> Result<(), StoreError> {
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
                if let Record::Dispatched { attempt, task } = &entry.record {
                    super::tasks::insert(&self.conn, run, &entry.path, *attempt, task, entry.at)?;
                    if task.idempotency_key.is_none() && self.synchronous == Synchronous::Full {
                        if self.unfenced.len() >= UNFENCED_REMEMBERED {
                            self.unfenced.clear();
                        }
                        self.unfenced.insert(task.id.clone());
                    }
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

    pub(super) fn record(&self, run: RunId) -> Result<Option<RunRecord>, StoreError> {
        self.conn
            .prepare_cached(&format!("SELECT {RUN_COLUMNS} FROM runs WHERE id = ?1"))
            .and_then(|mut s| s.query_row([run.as_uuid().as_bytes()], run_from_row).optional())
            .map_err(|e| backend("reading a run", e))
    }

    pub(super) fn check_fence(&mut self, run: RunId, fence: Option<u64>) -> Result<(), StoreError> {
        if fence.is_none() {
            return Ok(());
        }
        // Read inside the write transaction: no other process can change it until commit.
        let token = self.state(run)?.token;
        let lease = Lease::new(run, String::new(), token, Timestamp::EPOCH);
        check_fence(Some(&RunRecord { lease: Some(lease), ..placeholder(run) }), run, fence)
    }

    pub(super) fn store_lease(&mut self, lease: &Lease) -> Result<(), StoreError> {
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

    pub(super) fn claim(&mut self, claim: &Claim) -> Result<Vec<Lease>, StoreError> {
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
    pub(super) fn admit(
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

    pub(super) fn heartbeat(
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

    pub(super) fn set_status(&mut self, run: RunId, u: &StatusUpdate) -> Result<(), StoreError> {
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

    pub(super) fn cancel(
        &mut self,
        run: RunId,
        request: &CancelRequest,
        now: Timestamp,
    ) -> Result<CancelOutcome, StoreError> {
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

    pub(super) fn resolve(&mut self, run: RunId, entry: &JournalEntry) -> Result<(), StoreError> {
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

    pub(super) fn remove(&mut self, removal: &Removal) -> Result<Removed, StoreError> {
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
            for table in ["journal", "events", "interrupts", "messages", "tasks"] {
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

pub(super) fn answer_err(op: Op, error: impl Fn() -> StoreError) {
    match op {
        Op::Create(_, ack) | Op::SetStatus(_, _, ack) | Op::Resolve(_, _, ack) => drop(ack.send(Err(error()))),
        Op::Append(_, _, _, ack) => drop(ack.send(Err(error()))),
        Op::Remove(_, ack) => drop(ack.send(Err(error()))),
        Op::Claim(_, ack) => drop(ack.send(Err(error()))),
        Op::Heartbeat(_, _, _, ack) => drop(ack.send(Err(error()))),
        Op::Post(.., ack) => drop(ack.send(Err(error()))),
        Op::Define(.., ack) => drop(ack.send(Err(error()))),
        Op::Write(.., ack) => drop(ack.send(Err(error()))),
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
                 priority, concurrency_key, concurrency_limit, tags) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21)",
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
            (!r.tags.is_empty()).then(|| json(&r.tags)),
        ])
    })
    .map_err(|e| backend(doing, e))?;
    Ok(())
}
