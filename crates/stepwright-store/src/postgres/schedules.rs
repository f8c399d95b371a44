//! Schedules in Postgres: `stepwright_schedules` and `stepwright_schedule_ticks`. An advance
//! is one transaction: the compare-and-set of the schedule's version (a row lock: a second
//! advance from the same version waits for the first, then finds the version moved on), its
//! tick rows and the runs they start.

use futures_util::future::BoxFuture;
use sqlx::Row;
use sqlx::postgres::PgRow;
use stepwright_core::store::schedule::{
    ScheduleAdvance, ScheduleKey, ScheduleRecord, ScheduleStore, TickOutcome, TickRecord, tick_recorded,
};
use stepwright_core::{ContentHash, RunId, RunStatus, StoreError, Timestamp};

use super::group_commit::insert_runs;
use super::{PostgresStore, pg};
use crate::encoding::backend;

/// A schedule's columns, in the order `schedule_from` reads them (a macro: sqlx takes only
/// static SQL).
macro_rules! columns {
    () => {
        "tenant, name, workflow, definition_hash, spec, state, paused, due_at, version, created_at, updated_at, on_event"
    };
}

fn tenant_of(key: &ScheduleKey) -> &str {
    key.tenant.as_deref().unwrap_or("")
}

fn schedule_from(row: &PgRow) -> Result<ScheduleRecord, StoreError> {
    let doing = "reading a schedule";
    let get = |e: sqlx::Error| backend(doing, e);
    let tenant: String = row.try_get(0).map_err(get)?;
    let hash: Vec<u8> = row.try_get(3).map_err(get)?;
    Ok(ScheduleRecord {
        key: ScheduleKey { tenant: (!tenant.is_empty()).then_some(tenant), name: row.try_get(1).map_err(get)? },
        workflow: row.try_get(2).map_err(get)?,
        definition_hash: ContentHash::from_slice(&hash)
            .ok_or_else(|| backend(doing, std::io::Error::other("a content hash is not 32 bytes")))?,
        spec: row.try_get(4).map_err(get)?,
        state: row.try_get(5).map_err(get)?,
        paused: row.try_get(6).map_err(get)?,
        due_at: row.try_get::<Option<i64>, _>(7).map_err(get)?.map(Timestamp::from_micros),
        version: row.try_get::<i64, _>(8).map_err(get)? as u64,
        created_at: Timestamp::from_micros(row.try_get(9).map_err(get)?),
        updated_at: Timestamp::from_micros(row.try_get(10).map_err(get)?),
        on_event: row.try_get(11).map_err(get)?,
    })
}

fn tick_from(row: &PgRow) -> Result<TickRecord, StoreError> {
    let get = |e: sqlx::Error| backend("reading a schedule's ticks", e);
    let run: Option<uuid::Uuid> = row.try_get(2).map_err(get)?;
    let reason: Option<String> = row.try_get(3).map_err(get)?;
    Ok(TickRecord {
        at: Timestamp::from_micros(row.try_get(0).map_err(get)?),
        local: row.try_get(1).map_err(get)?,
        outcome: match run {
            Some(run) => TickOutcome::Started { run: RunId::from_bytes(run.into_bytes()) },
            None => TickOutcome::Skipped { reason: reason.unwrap_or_default() },
        },
        recorded_at: Timestamp::from_micros(row.try_get(4).map_err(get)?),
    })
}

impl PostgresStore {
    async fn advance(&self, a: &ScheduleAdvance) -> Result<bool, StoreError> {
        let doing = "advancing a schedule";
        let mut tx = self.pool.begin().await.map_err(pg(doing))?;
        let changed = sqlx::query(
            "UPDATE stepwright_schedules SET state = $3, paused = $4, due_at = $5, version = version + 1, \
             updated_at = $6 WHERE tenant = $1 AND name = $2 AND version = $7",
        )
        .bind(tenant_of(&a.key))
        .bind(&a.key.name)
        .bind(&a.state)
        .bind(a.paused)
        .bind(a.due_at.map(Timestamp::as_micros))
        .bind(a.at.as_micros())
        .bind(a.version as i64)
        .execute(&mut *tx)
        .await
        .map_err(pg(doing))?
        .rows_affected();
        if changed == 0 {
            return Ok(false);
        }
        if let Some(position) = a.read_through {
            // Appends hold their tenant's lock until they commit, and this row's lock is
            // held from the update above: an event committed after this statement finds
            // the row and makes it due itself.
            sqlx::query(
                "UPDATE stepwright_schedules SET due_at = $3 WHERE tenant = $1 AND name = $2 \
                 AND EXISTS (SELECT 1 FROM stepwright_event_log WHERE tenant = $1 AND seq > $4)",
            )
            .bind(tenant_of(&a.key))
            .bind(&a.key.name)
            .bind(a.at.as_micros())
            .bind(position as i64)
            .execute(&mut *tx)
            .await
            .map_err(pg(doing))?;
        }
        if !a.ticks.is_empty() {
            let (mut ats, mut locals, mut runs, mut reasons, mut recorded) =
                (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
            for tick in &a.ticks {
                ats.push(tick.at.as_micros());
                locals.push(tick.local.as_str());
                let (run, reason) = match &tick.outcome {
                    TickOutcome::Started { run } => (Some(run.as_uuid()), None),
                    TickOutcome::Skipped { reason } => (None, Some(reason.as_str())),
                };
                runs.push(run);
                reasons.push(reason);
                recorded.push(tick.recorded_at.as_micros());
            }
            let inserted = sqlx::query(
                "INSERT INTO stepwright_schedule_ticks (tenant, name, at, local, run_id, reason, recorded_at) \
                 SELECT $1, $2, at, local, run_id, reason, recorded_at \
                 FROM UNNEST($3::bigint[], $4::text[], $5::uuid[], $6::text[], $7::bigint[]) \
                   AS t(at, local, run_id, reason, recorded_at) \
                 ON CONFLICT (tenant, name, at) DO UPDATE SET run_id = excluded.run_id, reason = NULL, \
                   recorded_at = excluded.recorded_at \
                 WHERE $8 AND stepwright_schedule_ticks.run_id IS NULL AND excluded.run_id IS NOT NULL",
            )
            .bind(tenant_of(&a.key))
            .bind(&a.key.name)
            .bind(&ats)
            .bind(&locals)
            .bind(&runs)
            .bind(&reasons)
            .bind(&recorded)
            .bind(a.replace_skipped)
            .execute(&mut *tx)
            .await
            .map_err(pg(doing))?
            .rows_affected();
            if inserted != a.ticks.len() as u64 {
                // Rolled back when `tx` drops.
                let ours: Vec<i64> = ats.clone();
                let existing: Vec<i64> = sqlx::query_scalar(
                    "SELECT at FROM stepwright_schedule_ticks WHERE tenant = $1 AND name = $2 AND at = ANY($3)",
                )
                .bind(tenant_of(&a.key))
                .bind(&a.key.name)
                .bind(&ours)
                .fetch_all(&mut *tx)
                .await
                .map_err(pg(doing))?;
                let at = existing.into_iter().min().unwrap_or(ours[0]);
                return Err(tick_recorded(&a.key, Timestamp::from_micros(at)));
            }
        }
        super::events::insert_fires(&mut tx, &a.key, &a.fires).await?;
        if !a.runs.is_empty() {
            let records: Vec<&stepwright_core::RunRecord> = a.runs.iter().collect();
            let created = insert_runs(&mut *tx, &records).await?;
            if let Some(taken) = a.runs.iter().find(|run| !created.contains(&run.id)) {
                return Err(StoreError::RunExists(taken.id));
            }
        }
        tx.commit().await.map_err(pg(doing))?;
        if a.runs.iter().any(|run| run.status == RunStatus::Pending) {
            self.notify(a.runs[0].id).await;
        }
        Ok(true)
    }
}

impl ScheduleStore for PostgresStore {
    fn put_schedule(&self, r: ScheduleRecord) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            sqlx::query(concat!(
                "INSERT INTO stepwright_schedules (",
                columns!(),
                ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) \
                 ON CONFLICT (tenant, name) DO UPDATE SET workflow = excluded.workflow, on_event = excluded.on_event, \
                 definition_hash = excluded.definition_hash, spec = excluded.spec, state = excluded.state, \
                 paused = excluded.paused, due_at = excluded.due_at, \
                 version = GREATEST(excluded.version, stepwright_schedules.version + 1), \
                 updated_at = excluded.updated_at"
            ))
            .bind(tenant_of(&r.key))
            .bind(&r.key.name)
            .bind(&r.workflow)
            .bind(r.definition_hash.as_bytes().as_slice())
            .bind(&r.spec)
            .bind(&r.state)
            .bind(r.paused)
            .bind(r.due_at.map(Timestamp::as_micros))
            .bind(r.version as i64)
            .bind(r.created_at.as_micros())
            .bind(r.updated_at.as_micros())
            .bind(&r.on_event)
            .execute(&self.pool)
            .await
            .map(drop)
            .map_err(pg("keeping a schedule"))
        })
    }

    fn schedule<'a>(&'a self, key: &'a ScheduleKey) -> BoxFuture<'a, Result<Option<ScheduleRecord>, StoreError>> {
        Box::pin(async move {
            let row = sqlx::query(concat!(
                "SELECT ",
                columns!(),
                " FROM stepwright_schedules WHERE tenant = $1 AND name = $2"
            ))
            .bind(tenant_of(key))
            .bind(&key.name)
            .fetch_optional(&self.pool)
            .await
            .map_err(pg("reading a schedule"))?;
            row.as_ref().map(schedule_from).transpose()
        })
    }

    fn schedules<'a>(&'a self, tenant: Option<&'a str>) -> BoxFuture<'a, Result<Vec<ScheduleRecord>, StoreError>> {
        Box::pin(async move {
            let rows = sqlx::query(concat!(
                "SELECT ",
                columns!(),
                " FROM stepwright_schedules WHERE $1::text IS NULL OR tenant = $1 ORDER BY tenant, name"
            ))
            .bind(tenant)
            .fetch_all(&self.pool)
            .await
            .map_err(pg("listing schedules"))?;
            rows.iter().map(schedule_from).collect()
        })
    }

    fn delete_schedule<'a>(&'a self, key: &'a ScheduleKey) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let doing = "deleting a schedule";
            let mut tx = self.pool.begin().await.map_err(pg(doing))?;
            for delete in [
                "DELETE FROM stepwright_schedule_ticks WHERE tenant = $1 AND name = $2",
                "DELETE FROM stepwright_event_fires WHERE tenant = $1 AND trigger = $2",
            ] {
                sqlx::query(delete).bind(tenant_of(key)).bind(&key.name).execute(&mut *tx).await.map_err(pg(doing))?;
            }
            let deleted = sqlx::query("DELETE FROM stepwright_schedules WHERE tenant = $1 AND name = $2")
                .bind(tenant_of(key))
                .bind(&key.name)
                .execute(&mut *tx)
                .await
                .map_err(pg(doing))?
                .rows_affected();
            tx.commit().await.map_err(pg(doing))?;
            Ok(deleted > 0)
        })
    }

    fn due_schedules(&self, now: Timestamp, limit: usize) -> BoxFuture<'_, Result<Vec<ScheduleRecord>, StoreError>> {
        Box::pin(async move {
            let rows = sqlx::query(concat!(
                "SELECT ",
                columns!(),
                " FROM stepwright_schedules WHERE due_at IS NOT NULL AND due_at <= $1 \
                 ORDER BY due_at LIMIT $2"
            ))
            .bind(now.as_micros())
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(&self.pool)
            .await
            .map_err(pg("finding due schedules"))?;
            rows.iter().map(schedule_from).collect()
        })
    }

    fn next_due(&self) -> BoxFuture<'_, Result<Option<Timestamp>, StoreError>> {
        Box::pin(async move {
            sqlx::query_scalar::<_, Option<i64>>("SELECT MIN(due_at) FROM stepwright_schedules")
                .fetch_one(&self.pool)
                .await
                .map(|at| at.map(Timestamp::from_micros))
                .map_err(pg("finding the next due schedule"))
        })
    }

    fn advance_schedule(&self, advance: ScheduleAdvance) -> BoxFuture<'_, Result<bool, StoreError>> {
        Box::pin(async move { self.advance(&advance).await })
    }

    fn ticks<'a>(&'a self, key: &'a ScheduleKey, limit: usize) -> BoxFuture<'a, Result<Vec<TickRecord>, StoreError>> {
        Box::pin(async move {
            let rows = sqlx::query(
                "SELECT at, local, run_id, reason, recorded_at FROM stepwright_schedule_ticks \
                 WHERE tenant = $1 AND name = $2 ORDER BY at DESC LIMIT $3",
            )
            .bind(tenant_of(key))
            .bind(&key.name)
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(&self.pool)
            .await
            .map_err(pg("reading a schedule's ticks"))?;
            rows.iter().map(tick_from).collect()
        })
    }
}
