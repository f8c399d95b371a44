//! Step tasks in Postgres: `stepwright_tasks`, one row per task. Rows are written by the
//! journal's group commit (the `dispatched` entry, same statement); every change afterwards
//! locks the rows it changes (`FOR UPDATE`; a claim skips rows another claim holds), applies
//! the shared rules (`stepwright_core::store::task::rules`) on the database's clock, and
//! writes them back, so two workers never both claim one task and a stale lease never
//! answers one.

use futures_util::future::BoxFuture;
use serde_json::Value;
use sqlx::postgres::PgRow;
use sqlx::{PgConnection, Row};
use stepwright_core::store::task::{
    Beat, Born, Claim, StoredTask, TaskAnswer, TaskFilter, TaskId, TaskLease, TaskSpec, TaskState, TaskStore, rules,
};
use stepwright_core::{RunId, StepPath, StoreError, Timestamp};

use super::{PostgresStore, from_value, pg, to_value};

const COLUMNS: &str = "spec, run_id, path, attempt, tenant, workflow, created_at, state, worker, lease_token, \
                       lease_expires, claimed_at, details, output, error, finished_at";

fn read_row(row: &PgRow) -> Result<StoredTask, StoreError> {
    let doing = "reading a task";
    let spec: TaskSpec = from_value(doing, row.get(0))?;
    let run: uuid::Uuid = row.get(1);
    let tenant: String = row.get(4);
    let state: String = row.get(7);
    let opt = |value: Option<Value>| value;
    Ok(StoredTask {
        spec,
        run: RunId::from_bytes(run.into_bytes()),
        path: StepPath::new(&row.get::<String, _>(2)),
        attempt: u32::try_from(row.get::<i32, _>(3)).unwrap_or_default(),
        tenant: (!tenant.is_empty()).then_some(tenant),
        workflow: row.get(5),
        created_at: Timestamp::from_micros(row.get(6)),
        state: TaskState::parse(&state).ok_or_else(|| {
            crate::encoding::backend(doing, std::io::Error::other(format!("unknown task state {state:?}")))
        })?,
        worker: row.get(8),
        lease_token: row.get::<i64, _>(9) as u64,
        lease_expires: row.get::<Option<i64>, _>(10).map(Timestamp::from_micros),
        claimed_at: row.get::<Option<i64>, _>(11).map(Timestamp::from_micros),
        details: opt(row.get(12)),
        output: opt(row.get(13)),
        error: row.get::<Option<Value>, _>(14).map(|e| from_value(doing, e)).transpose()?,
        finished_at: row.get::<Option<i64>, _>(15).map(Timestamp::from_micros),
    })
}

async fn now(conn: &mut PgConnection) -> Result<Timestamp, StoreError> {
    let micros: i64 =
        sqlx::query_scalar("SELECT stepwright_now_us()").fetch_one(conn).await.map_err(pg("reading the clock"))?;
    Ok(Timestamp::from_micros(micros))
}

async fn locked(conn: &mut PgConnection, task: &TaskId) -> Result<Option<StoredTask>, StoreError> {
    sqlx::query(sqlx::AssertSqlSafe(format!("SELECT {COLUMNS} FROM stepwright_tasks WHERE id = $1 FOR UPDATE")))
        .bind(task.as_str())
        .fetch_optional(conn)
        .await
        .map_err(pg("reading a task"))?
        .map(|row| read_row(&row))
        .transpose()
}

async fn save(conn: &mut PgConnection, task: &StoredTask) -> Result<(), StoreError> {
    sqlx::query(
        "UPDATE stepwright_tasks SET state = $2, worker = $3, lease_token = $4, lease_expires = $5, claimed_at = $6, \
         details = $7, output = $8, error = $9, finished_at = $10 WHERE id = $1",
    )
    .bind(task.spec.id.as_str())
    .bind(task.state.as_str())
    .bind(&task.worker)
    .bind(task.lease_token as i64)
    .bind(task.lease_expires.map(Timestamp::as_micros))
    .bind(task.claimed_at.map(Timestamp::as_micros))
    .bind(&task.details)
    .bind(&task.output)
    .bind(task.error.as_ref().map(to_value))
    .bind(task.finished_at.map(Timestamp::as_micros))
    .execute(conn)
    .await
    .map(drop)
    .map_err(pg("writing a task"))
}

impl PostgresStore {
    async fn claim_in(&self, claim: &Claim) -> Result<Vec<StoredTask>, StoreError> {
        let doing = "claiming tasks";
        let mut tx = self.pool.begin().await.map_err(pg(doing))?;
        let now = now(&mut tx).await?;
        // A page at a time, each as large as what is still to take, so a claim locks (and
        // keeps other claims off) only the rows it looks at: eight per slot at most.
        let mut budget = claim.max.max(1) * rules::LOOKED_AT_PER_SLOT;
        // The last row looked at, (created_at, id): the next page starts after it.
        let mut after = (i64::MIN, String::new());
        let mut claimed = Vec::new();
        while claimed.len() < claim.max && budget > 0 {
            let page = (claim.max - claimed.len()).min(budget);
            let candidates = sqlx::query(sqlx::AssertSqlSafe(format!(
                "SELECT {COLUMNS} FROM stepwright_tasks WHERE tenant = $1 AND queue = $2 AND state = 'pending' \
                 AND (created_at, id) > ($4, $5) ORDER BY created_at, id LIMIT $3 FOR UPDATE SKIP LOCKED"
            )))
            .bind(&claim.tenant)
            .bind(&claim.queue)
            .bind(page as i64)
            .bind(after.0)
            .bind(&after.1)
            .fetch_all(&mut *tx)
            .await
            .map_err(pg(doing))?;
            let fetched = candidates.len();
            budget -= fetched;
            for row in candidates {
                let mut task = read_row(&row)?;
                after = (task.created_at.as_micros(), task.spec.id.as_str().to_owned());
                if rules::settle(&mut task, now) {
                    save(&mut tx, &task).await?;
                    continue;
                }
                if !rules::claimable(&task, claim) {
                    continue;
                }
                if let Some(limit) = task.spec.concurrency {
                    // One claimer at a time per handler's limit, so two never both see room.
                    sqlx::query(
                        "SELECT pg_advisory_xact_lock(hashtextextended('stepwright.task:' || $1 || ':' || $2, 0))",
                    )
                    .bind(&claim.tenant)
                    .bind(&task.spec.handler)
                    .execute(&mut *tx)
                    .await
                    .map_err(pg(doing))?;
                    let running: i64 = sqlx::query_scalar(
                        "SELECT COUNT(*) FROM stepwright_tasks WHERE tenant = $1 AND handler = $2 AND state = 'claimed' \
                         AND lease_expires > $3",
                    )
                    .bind(&claim.tenant)
                    .bind(&task.spec.handler)
                    .bind(now.as_micros())
                    .fetch_one(&mut *tx)
                    .await
                    .map_err(pg(doing))?;
                    if running >= i64::from(limit) {
                        continue;
                    }
                }
                rules::lease(&mut task, &claim.worker, now);
                save(&mut tx, &task).await?;
                claimed.push(task);
            }
            if fetched < page {
                break;
            }
        }
        tx.commit().await.map_err(pg(doing))?;
        Ok(claimed)
    }

    async fn beat_in(&self, leases: &[(TaskLease, Option<Value>)]) -> Result<Vec<Beat>, StoreError> {
        let doing = "renewing task leases";
        let mut tx = self.pool.begin().await.map_err(pg(doing))?;
        let now = now(&mut tx).await?;
        let mut beats = Vec::with_capacity(leases.len());
        for (lease, details) in leases {
            let Some(mut task) = locked(&mut tx, &lease.task).await? else {
                beats.push(Beat::Lost);
                continue;
            };
            let cancelled: bool = sqlx::query_scalar(
                "SELECT COALESCE((SELECT status = 'cancelled' OR cancel_request IS NOT NULL FROM stepwright_runs WHERE id = $1), false)",
            )
            .bind(task.run.as_uuid())
            .fetch_one(&mut *tx)
            .await
            .map_err(pg(doing))?;
            let beat = rules::beat(&mut task, lease, details.clone(), now, cancelled);
            save(&mut tx, &task).await?;
            beats.push(beat);
        }
        tx.commit().await.map_err(pg(doing))?;
        Ok(beats)
    }

    async fn answer_in(&self, lease: &TaskLease, answer: TaskAnswer) -> Result<TaskState, StoreError> {
        let doing = "answering a task";
        let mut tx = self.pool.begin().await.map_err(pg(doing))?;
        let now = now(&mut tx).await?;
        let mut task =
            locked(&mut tx, &lease.task).await?.ok_or_else(|| StoreError::TaskNotFound(lease.task.clone()))?;
        let before = task.clone();
        let result = rules::answer(&mut task, lease, answer, now);
        if task != before {
            save(&mut tx, &task).await?;
        }
        tx.commit().await.map_err(pg(doing))?;
        // A step waiting in this process is handed the task as written: it reads nothing back.
        self.tasks_changed.answered_as(&task);
        if result.as_ref().is_ok_and(|state| state.is_final()) {
            self.announce_task(Some(&lease.task)).await;
        }
        result
    }

    async fn settle_in(&self, id: &TaskId) -> Result<Option<StoredTask>, StoreError> {
        let doing = "reading a task";
        let found = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {COLUMNS}, stepwright_now_us() FROM stepwright_tasks WHERE id = $1"
        )))
        .bind(id.as_str())
        .fetch_optional(&self.pool)
        .await
        .map_err(pg(doing))?;
        let Some(row) = found else { return Ok(None) };
        let task = read_row(&row)?;
        let now = Timestamp::from_micros(row.get(16));
        if task.settled_at(now).is_none() {
            return Ok(Some(task));
        }
        let mut tx = self.pool.begin().await.map_err(pg(doing))?;
        let now = self::now(&mut tx).await?;
        let Some(mut task) = locked(&mut tx, id).await? else { return Ok(None) };
        if rules::settle(&mut task, now) {
            save(&mut tx, &task).await?;
        }
        tx.commit().await.map_err(pg(doing))?;
        Ok(Some(task))
    }
}

impl TaskStore for PostgresStore {
    fn claim_tasks<'a>(&'a self, claim: &'a Claim, _: Timestamp) -> BoxFuture<'a, Result<Vec<StoredTask>, StoreError>> {
        Box::pin(self.claim_in(claim))
    }

    fn heartbeat_tasks<'a>(
        &'a self,
        leases: &'a [(TaskLease, Option<Value>)],
        _: Timestamp,
    ) -> BoxFuture<'a, Result<Vec<Beat>, StoreError>> {
        Box::pin(self.beat_in(leases))
    }

    fn answer_task<'a>(
        &'a self,
        lease: &'a TaskLease,
        answer: TaskAnswer,
        _: Timestamp,
    ) -> BoxFuture<'a, Result<TaskState, StoreError>> {
        Box::pin(self.answer_in(lease, answer))
    }

    fn settle_task<'a>(
        &'a self,
        task: &'a TaskId,
        _: Timestamp,
    ) -> BoxFuture<'a, Result<Option<StoredTask>, StoreError>> {
        Box::pin(self.settle_in(task))
    }

    fn cancelling_among<'a>(
        &'a self,
        tenant: &'a str,
        tasks: &'a [TaskId],
    ) -> BoxFuture<'a, Result<Vec<TaskId>, StoreError>> {
        let ids: Vec<&str> = tasks.iter().map(TaskId::as_str).collect();
        Box::pin(async move {
            let rows: Vec<String> = sqlx::query_scalar(
                "SELECT t.id FROM stepwright_tasks t JOIN stepwright_runs r ON r.id = t.run_id \
                 WHERE t.id = ANY($1) AND t.tenant = $2 AND t.state = 'claimed' \
                 AND (r.status = 'cancelled' OR r.cancel_request IS NOT NULL)",
            )
            .bind(&ids)
            .bind(tenant)
            .fetch_all(&self.pool)
            .await
            .map_err(pg("reading held tasks' cancels"))?;
            Ok(rows.iter().map(|id| TaskId::new(id)).collect())
        })
    }

    fn dispatch_for_recompute<'a>(
        &'a self,
        run: RunId,
        path: &'a StepPath,
        attempt: u32,
        spec: &'a TaskSpec,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let born = Born::of(spec, now);
            let inserted = sqlx::query(
                "INSERT INTO stepwright_tasks (id, run_id, path, attempt, tenant, workflow, queue, handler, spec, state, created_at, \
                 details, worker, lease_token, lease_expires, claimed_at) \
                 SELECT $1, r.id, $2, $3, COALESCE(r.caller->>'tenant', ''), r.workflow, $4, $5, $6, $9, $7, $6->'details', \
                 $10, $11, $12, $13 FROM stepwright_runs r WHERE r.id = $8 ON CONFLICT (id) DO NOTHING",
            )
            .bind(spec.id.as_str())
            .bind(path.as_str())
            .bind(i32::try_from(attempt).unwrap_or(i32::MAX))
            .bind(&spec.queue)
            .bind(&spec.handler)
            .bind(to_value(spec))
            .bind(now.as_micros())
            .bind(run.as_uuid())
            .bind(born.state.as_str())
            .bind(&born.worker)
            .bind(born.lease_token as i64)
            .bind(born.lease_expires.map(Timestamp::as_micros))
            .bind(born.claimed_at.map(Timestamp::as_micros))
            .execute(&self.pool)
            .await
            .map_err(pg("dispatching a recompute's task"))?;
            if inserted.rows_affected() == 0 {
                return Err(StoreError::RunNotFound(run));
            }
            self.tasks_changed.dispatched();
            self.announce_task(None).await;
            Ok(())
        })
    }

    fn list_tasks<'a>(&'a self, filter: &'a TaskFilter) -> BoxFuture<'a, Result<Vec<StoredTask>, StoreError>> {
        Box::pin(async move {
            // Only the conditions the filter sets (see the SQLite store's): each shape its own
            // statement, planned for its indexes.
            let mut conditions: Vec<String> = Vec::new();
            let mut next = 0;
            let mut placeholder = || {
                next += 1;
                format!("${next}")
            };
            for (set, column) in [
                (filter.tenant.is_some(), "tenant"),
                (filter.queue.is_some(), "queue"),
                (filter.state.is_some(), "state"),
                (filter.run.is_some(), "run_id"),
            ] {
                if set {
                    conditions.push(format!("{column} = {}", placeholder()));
                }
            }
            let limit = placeholder();
            let matching =
                if conditions.is_empty() { String::new() } else { format!("WHERE {}", conditions.join(" AND ")) };
            let sql = format!(
                "SELECT {COLUMNS} FROM stepwright_tasks {matching} ORDER BY created_at DESC, id DESC LIMIT {limit}"
            );
            let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
            if let Some(tenant) = &filter.tenant {
                query = query.bind(tenant);
            }
            if let Some(queue) = &filter.queue {
                query = query.bind(queue);
            }
            if let Some(state) = filter.state {
                query = query.bind(state.as_str());
            }
            if let Some(run) = filter.run {
                query = query.bind(run.as_uuid());
            }
            let rows = query
                .bind(i64::try_from(filter.limit).unwrap_or(i64::MAX))
                .fetch_all(&self.pool)
                .await
                .map_err(pg("listing tasks"))?;
            rows.iter().map(read_row).collect()
        })
    }
}
