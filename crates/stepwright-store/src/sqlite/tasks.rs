//! Step tasks in SQLite: `tasks`, one row per task. Rows are written by the journal's
//! append (the `dispatched` entry, same transaction); every change afterwards goes through
//! the single writer, which reads the row, applies the shared rules
//! (`stepwright_core::store::task::rules`) and writes it back, so two workers never both
//! claim one task and a stale lease never answers one.

use futures_util::future::BoxFuture;
use rusqlite::{Connection, OptionalExtension, Row, params};
use serde_json::Value;
use stepwright_core::store::task::{
    Answered, Beat, Born, Claim, MayAnswer, StoredTask, TaskAnswer, TaskFilter, TaskId, TaskLease, TaskSpec, TaskState,
    TaskStore, rules,
};
use stepwright_core::{RunId, StepPath, StoreError, Timestamp};

use super::journal::json;
use super::{SqliteStore, WriteKind};

use crate::encoding::backend;

const COLUMNS: &str = "spec, run_id, path, attempt, tenant, workflow, created_at, state, worker, lease_token, \
                       lease_expires, claimed_at, details, output, error, finished_at";

/// Writes the row of a dispatched task (once: a repeated append of the same entry keeps it),
/// as [`Born::of`] says it starts.
pub(super) fn insert(
    conn: &Connection,
    run: RunId,
    path: &StepPath,
    attempt: u32,
    task: &TaskSpec,
    at: Timestamp,
) -> Result<(), StoreError> {
    let born = Born::of(task, at);
    conn.prepare_cached(
        "INSERT OR IGNORE INTO tasks (id, run_id, path, attempt, tenant, workflow, queue, handler, spec, state, created_at, \
         details, worker, lease_token, lease_expires, claimed_at) \
         SELECT ?1, id, ?2, ?3, COALESCE(json_extract(caller, '$.tenant'), ''), workflow, ?4, ?5, ?6, ?10, ?7, ?9, ?11, ?12, ?13, ?14 \
         FROM runs WHERE id = ?8",
    )
    .and_then(|mut s| {
        s.execute(params![
            task.id.as_str(),
            path.as_str(),
            attempt,
            task.queue,
            task.handler,
            json(task),
            at.as_micros(),
            run.as_uuid().as_bytes(),
            task.details.as_ref().map(json),
            born.state.as_str(),
            born.worker,
            born.lease_token as i64,
            born.lease_expires.map(Timestamp::as_micros),
            born.claimed_at.map(Timestamp::as_micros),
        ])
    })
    .map(drop)
    .map_err(|e| backend("dispatching a task", e))
}

fn parse<T: serde::de::DeserializeOwned>(text: Option<String>) -> rusqlite::Result<Option<T>> {
    text.map(|t| serde_json::from_str(&t))
        .transpose()
        .map_err(|e| rusqlite::Error::FromSqlConversionFailure(0, rusqlite::types::Type::Text, Box::new(e)))
}

fn read_row(row: &Row<'_>) -> rusqlite::Result<StoredTask> {
    let spec: Option<TaskSpec> = parse(Some(row.get(0)?))?;
    let run: Vec<u8> = row.get(1)?;
    let run = uuid::Uuid::from_slice(&run)
        .map_err(|e| rusqlite::Error::FromSqlConversionFailure(1, rusqlite::types::Type::Blob, Box::new(e)))?;
    let tenant: String = row.get(4)?;
    let state: String = row.get(7)?;
    let state = TaskState::parse(&state).ok_or_else(|| {
        rusqlite::Error::FromSqlConversionFailure(
            7,
            rusqlite::types::Type::Text,
            Box::new(std::io::Error::other(format!("unknown task state {state:?}"))),
        )
    })?;
    Ok(StoredTask {
        spec: spec.expect("given"),
        run: RunId::from_bytes(run.into_bytes()),
        path: StepPath::new(&row.get::<_, String>(2)?),
        attempt: row.get(3)?,
        tenant: (!tenant.is_empty()).then_some(tenant),
        workflow: row.get(5)?,
        created_at: Timestamp::from_micros(row.get(6)?),
        state,
        worker: row.get(8)?,
        lease_token: row.get::<_, i64>(9)? as u64,
        lease_expires: row.get::<_, Option<i64>>(10)?.map(Timestamp::from_micros),
        claimed_at: row.get::<_, Option<i64>>(11)?.map(Timestamp::from_micros),
        details: parse(row.get(12)?)?,
        output: parse(row.get(13)?)?,
        error: parse(row.get(14)?)?,
        finished_at: row.get::<_, Option<i64>>(15)?.map(Timestamp::from_micros),
    })
}

fn find(conn: &Connection, task: &TaskId) -> Result<Option<StoredTask>, StoreError> {
    conn.prepare_cached(&format!("SELECT {COLUMNS} FROM tasks WHERE id = ?1"))
        .and_then(|mut s| s.query_row([task.as_str()], read_row).optional())
        .map_err(|e| backend("reading a task", e))
}

/// Writes back what the rules changed.
fn save(conn: &Connection, task: &StoredTask) -> Result<(), StoreError> {
    conn.prepare_cached(
        "UPDATE tasks SET state = ?2, worker = ?3, lease_token = ?4, lease_expires = ?5, claimed_at = ?6, \
         details = ?7, output = ?8, error = ?9, finished_at = ?10 WHERE id = ?1",
    )
    .and_then(|mut s| {
        s.execute(params![
            task.spec.id.as_str(),
            task.state.as_str(),
            task.worker,
            task.lease_token as i64,
            task.lease_expires.map(Timestamp::as_micros),
            task.claimed_at.map(Timestamp::as_micros),
            task.details.as_ref().map(json),
            task.output.as_ref().map(json),
            task.error.as_ref().map(json),
            task.finished_at.map(Timestamp::as_micros),
        ])
    })
    .map(drop)
    .map_err(|e| backend("writing a task", e))
}

/// Whether a run is cancelled or asked to be.
fn cancelling(conn: &Connection, run: RunId) -> Result<bool, StoreError> {
    conn.prepare_cached("SELECT status = 'cancelled' OR cancel_request IS NOT NULL FROM runs WHERE id = ?1")
        .and_then(|mut s| s.query_row([run.as_uuid().as_bytes()], |r| r.get::<_, bool>(0)).optional())
        .map(|found| found.unwrap_or(false))
        .map_err(|e| backend("reading a run's cancel", e))
}

/// Claims up to `claim.max` pending tasks of the queue, oldest first. The candidates are read
/// a page at a time, each page as large as what is still to be taken (the next one after the
/// last looked at), so a claim of 200 where all can be taken decodes 200 rows, not 1,600.
fn claim(conn: &Connection, claim: &Claim, now: Timestamp) -> Result<Vec<StoredTask>, StoreError> {
    let doing = "claiming tasks";
    let mut budget = claim.max.max(1) * rules::LOOKED_AT_PER_SLOT;
    // The last row looked at, (created_at, id): the next page starts after it.
    let mut after = (i64::MIN, String::new());
    let mut claimed = Vec::new();
    while claimed.len() < claim.max && budget > 0 {
        let page = (claim.max - claimed.len()).min(budget);
        let (at, id) = &after;
        let candidates: Vec<StoredTask> = conn
            .prepare_cached(&format!(
                "SELECT {COLUMNS} FROM tasks WHERE tenant = ?1 AND queue = ?2 AND state = 'pending' \
                 AND (created_at, id) > (?4, ?5) ORDER BY created_at, id LIMIT ?3"
            ))
            .and_then(|mut s| s.query_map(params![claim.tenant, claim.queue, page as i64, at, id], read_row)?.collect())
            .map_err(|e| backend(doing, e))?;
        let fetched = candidates.len();
        budget -= fetched;
        for mut task in candidates {
            after = (task.created_at.as_micros(), task.spec.id.as_str().to_owned());
            if rules::settle(&mut task, now) {
                save(conn, &task)?;
                continue;
            }
            if !rules::claimable(&task, claim) {
                continue;
            }
            if let Some(limit) = task.spec.concurrency {
                let running: i64 = conn
                    .prepare_cached(
                        "SELECT COUNT(*) FROM tasks WHERE tenant = ?1 AND handler = ?2 AND state = 'claimed' AND lease_expires > ?3",
                    )
                    .and_then(|mut s| s.query_row(params![claim.tenant, task.spec.handler, now.as_micros()], |r| r.get(0)))
                    .map_err(|e| backend(doing, e))?;
                if running >= i64::from(limit) {
                    continue;
                }
            }
            rules::lease(&mut task, &claim.worker, now);
            save(conn, &task)?;
            claimed.push(task);
        }
        if fetched < page {
            break;
        }
    }
    Ok(claimed)
}

impl TaskStore for SqliteStore {
    fn claim_tasks<'a>(&'a self, c: &'a Claim, now: Timestamp) -> BoxFuture<'a, Result<Vec<StoredTask>, StoreError>> {
        let c = c.clone();
        Box::pin(async move {
            // A look first, on a reader: a parked claim that finds nothing takes no write.
            let (tenant, queue) = (c.tenant.clone(), c.queue.clone());
            let waiting = self
                .read("looking for tasks", move |conn| {
                    conn.prepare_cached(
                        "SELECT EXISTS (SELECT 1 FROM tasks WHERE tenant = ?1 AND queue = ?2 AND state = 'pending')",
                    )
                    .and_then(|mut s| s.query_row(params![tenant, queue], |r| r.get::<_, bool>(0)))
                    .map_err(|e| backend("looking for tasks", e))
                })
                .await?;
            if !waiting {
                return Ok(Vec::new());
            }
            self.write(move |conn| claim(conn, &c, now)).await
        })
    }

    fn heartbeat_tasks<'a>(
        &'a self,
        leases: &'a [(TaskLease, Option<Value>)],
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Vec<Beat>, StoreError>> {
        let leases = leases.to_vec();
        Box::pin(self.write(move |conn| {
            let mut beats = Vec::with_capacity(leases.len());
            for (lease, details) in &leases {
                let Some(mut task) = find(conn, &lease.task)? else {
                    beats.push(Beat::Lost);
                    continue;
                };
                let cancelled = cancelling(conn, task.run)?;
                let beat = rules::beat(&mut task, lease, details.clone(), now, cancelled);
                save(conn, &task)?;
                beats.push(beat);
            }
            Ok(beats)
        }))
    }

    fn answer_task_if<'a>(
        &'a self,
        lease: &'a TaskLease,
        answer: TaskAnswer,
        now: Timestamp,
        may: MayAnswer,
    ) -> BoxFuture<'a, Result<Answered, StoreError>> {
        /// What the write found and did.
        enum Written {
            Missing,
            Refused(Box<StoredTask>),
            Answered(Result<TaskState, StoreError>, Box<StoredTask>),
        }
        let lease = lease.clone();
        Box::pin(async move {
            let written = self
                .write_as(WriteKind::AnswersTask(lease.task.clone()), move |conn| {
                    let Some(mut task) = find(conn, &lease.task)? else { return Ok(Written::Missing) };
                    if !may(&task) {
                        return Ok(Written::Refused(Box::new(task)));
                    }
                    let before = task.clone();
                    // A refused answer still keeps what `now` decided (a lapsed lease).
                    let result = rules::answer(&mut task, &lease, answer.clone(), now);
                    if task != before {
                        save(conn, &task)?;
                    }
                    let result = result.map(Ok).or_else(|e| match e {
                        StoreError::TaskLeaseLost { .. } => Ok(Err(e)),
                        other => Err(other),
                    })?;
                    Ok(Written::Answered(result, Box::new(task)))
                })
                .await?;
            match written {
                Written::Missing => Ok(Answered::Missing),
                Written::Refused(task) => Ok(Answered::Refused(task)),
                Written::Answered(result, task) => {
                    // The step waiting here is handed the task as written: it reads nothing back.
                    self.tasks_changed.answered_as(&task);
                    result.map(|state| Answered::Taken { state, task })
                }
            }
        })
    }

    fn answer_task<'a>(
        &'a self,
        lease: &'a TaskLease,
        answer: TaskAnswer,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<TaskState, StoreError>> {
        Box::pin(async move {
            let anyone: MayAnswer = std::sync::Arc::new(|_| true);
            match self.answer_task_if(lease, answer, now, anyone).await? {
                Answered::Taken { state, .. } => Ok(state),
                Answered::Missing | Answered::Refused(_) => Err(StoreError::TaskNotFound(lease.task.clone())),
            }
        })
    }

    fn settle_task<'a>(
        &'a self,
        task: &'a TaskId,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Option<StoredTask>, StoreError>> {
        let id = task.clone();
        Box::pin(async move {
            let read = id.clone();
            let found = self.read("reading a task", move |conn| find(conn, &read)).await?;
            match found {
                Some(task) if task.settled_at(now).is_some() => {
                    self.write(move |conn| {
                        let Some(mut task) = find(conn, &id)? else { return Ok(None) };
                        if rules::settle(&mut task, now) {
                            save(conn, &task)?;
                        }
                        Ok(Some(task))
                    })
                    .await
                }
                other => Ok(other),
            }
        })
    }

    fn cancelling_among<'a>(
        &'a self,
        tenant: &'a str,
        tasks: &'a [TaskId],
    ) -> BoxFuture<'a, Result<Vec<TaskId>, StoreError>> {
        let ids = Value::from(tasks.iter().map(|t| Value::from(t.as_str())).collect::<Vec<_>>()).to_string();
        let tenant = tenant.to_owned();
        Box::pin(self.read("reading held tasks' cancels", move |conn| {
            // From the ids to their rows (`CROSS JOIN` keeps SQLite's join order): left to
            // the planner, it scanned the tenant's tasks for the ids (9 ms with 8,000 tasks).
            conn.prepare_cached(
                "SELECT t.id FROM json_each(?1) AS j CROSS JOIN tasks AS t CROSS JOIN runs AS r \
                 WHERE t.id = j.value AND r.id = t.run_id AND t.tenant = ?2 AND t.state = 'claimed' \
                 AND (r.status = 'cancelled' OR r.cancel_request IS NOT NULL)",
            )
            .and_then(|mut s| {
                s.query_map(params![ids, tenant], |r| r.get::<_, String>(0).map(|id| TaskId::new(&id)))?.collect()
            })
            .map_err(|e| backend("reading held tasks' cancels", e))
        }))
    }

    fn dispatch_for_recompute<'a>(
        &'a self,
        run: RunId,
        path: &'a StepPath,
        attempt: u32,
        spec: &'a TaskSpec,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let (path, spec) = (path.clone(), spec.clone());
        Box::pin(async move {
            let inserted = self
                .write(move |conn| {
                    insert(conn, run, &path, attempt, &spec, now)?;
                    Ok(conn.changes() > 0)
                })
                .await?;
            if !inserted {
                return Err(StoreError::RunNotFound(run));
            }
            self.announce_tasks();
            Ok(())
        })
    }

    fn list_tasks<'a>(&'a self, filter: &'a TaskFilter) -> BoxFuture<'a, Result<Vec<StoredTask>, StoreError>> {
        // Only the conditions the filter sets: `?N IS NULL OR …` would keep the planner from
        // the indexes (a run's tasks, looked up on every run's details, scanned them all).
        use rusqlite::types::Value as Sql;
        let mut conditions: Vec<&str> = Vec::new();
        let mut values: Vec<Sql> = Vec::new();
        if let Some(tenant) = &filter.tenant {
            conditions.push("tenant = ?");
            values.push(Sql::Text(tenant.clone()));
        }
        if let Some(queue) = &filter.queue {
            conditions.push("queue = ?");
            values.push(Sql::Text(queue.clone()));
        }
        if let Some(state) = filter.state {
            conditions.push("state = ?");
            values.push(Sql::Text(state.as_str().to_owned()));
        }
        if let Some(run) = filter.run {
            conditions.push("run_id = ?");
            values.push(Sql::Blob(run.as_uuid().as_bytes().to_vec()));
        }
        values.push(Sql::Integer(i64::try_from(filter.limit).unwrap_or(i64::MAX)));
        let matching =
            if conditions.is_empty() { String::new() } else { format!("WHERE {}", conditions.join(" AND ")) };
        let sql = format!("SELECT {COLUMNS} FROM tasks {matching} ORDER BY created_at DESC, id DESC LIMIT ?");
        Box::pin(self.read("listing tasks", move |conn| {
            conn.prepare_cached(&sql)
                .and_then(|mut s| s.query_map(rusqlite::params_from_iter(values), read_row)?.collect())
                .map_err(|e| backend("listing tasks", e))
        }))
    }
}

impl SqliteStore {
    /// Announces that a task was dispatched in this process.
    pub(super) fn announce_tasks(&self) {
        self.tasks_changed.dispatched();
    }

    /// This process's task signals.
    pub(super) fn signals(&self) -> &stepwright_core::store::task::TaskSignals {
        &self.tasks_changed
    }
}
