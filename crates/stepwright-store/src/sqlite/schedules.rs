//! Schedules in SQLite: `schedules` (one row per schedule) and `schedule_ticks` (one row per
//! tick). An advance is one writer operation: the compare-and-set of the schedule's version,
//! its tick rows and the runs they start commit together or not at all.

use futures_util::future::BoxFuture;
use rusqlite::{Connection, OptionalExtension, Row, params};
use stepwright_core::store::schedule::{
    ScheduleAdvance, ScheduleKey, ScheduleRecord, ScheduleStore, TickOutcome, TickRecord, tick_recorded,
};
use stepwright_core::{StoreError, Timestamp};

use super::{SqliteStore, bytes_to_id, hash_from, insert_run};
use crate::encoding::backend;

const COLUMNS: &str =
    "tenant, name, workflow, definition_hash, spec, state, paused, due_at, version, created_at, updated_at, on_event";

fn tenant_of(key: &ScheduleKey) -> &str {
    key.tenant.as_deref().unwrap_or("")
}

fn schedule_from(row: &Row<'_>) -> rusqlite::Result<ScheduleRecord> {
    let tenant: String = row.get(0)?;
    let json = |i: usize| -> rusqlite::Result<serde_json::Value> {
        let text: String = row.get(i)?;
        serde_json::from_str(&text)
            .map_err(|e| rusqlite::Error::FromSqlConversionFailure(i, rusqlite::types::Type::Text, Box::new(e)))
    };
    Ok(ScheduleRecord {
        key: ScheduleKey { tenant: (!tenant.is_empty()).then_some(tenant), name: row.get(1)? },
        workflow: row.get(2)?,
        definition_hash: hash_from(&row.get::<_, Vec<u8>>(3)?)?,
        spec: json(4)?,
        state: json(5)?,
        paused: row.get(6)?,
        due_at: row.get::<_, Option<i64>>(7)?.map(Timestamp::from_micros),
        version: row.get::<_, i64>(8)? as u64,
        created_at: Timestamp::from_micros(row.get(9)?),
        updated_at: Timestamp::from_micros(row.get(10)?),
        on_event: row.get(11)?,
    })
}

fn tick_from(row: &Row<'_>) -> rusqlite::Result<TickRecord> {
    let run: Option<Vec<u8>> = row.get(2)?;
    let reason: Option<String> = row.get(3)?;
    let outcome = match run {
        Some(run) => TickOutcome::Started { run: bytes_to_id(&run)? },
        None => TickOutcome::Skipped { reason: reason.unwrap_or_default() },
    };
    Ok(TickRecord {
        at: Timestamp::from_micros(row.get(0)?),
        local: row.get(1)?,
        outcome,
        recorded_at: Timestamp::from_micros(row.get(4)?),
    })
}

fn put(conn: &Connection, r: &ScheduleRecord) -> Result<(), StoreError> {
    conn.prepare_cached(&format!(
        "INSERT INTO schedules ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12) \
         ON CONFLICT (tenant, name) DO UPDATE SET workflow = excluded.workflow, on_event = excluded.on_event, \
         definition_hash = excluded.definition_hash, spec = excluded.spec, state = excluded.state, \
         paused = excluded.paused, due_at = excluded.due_at, \
         version = MAX(excluded.version, schedules.version + 1), updated_at = excluded.updated_at"
    ))
    .and_then(|mut s| {
        s.execute(params![
            tenant_of(&r.key),
            r.key.name,
            r.workflow,
            r.definition_hash.as_bytes(),
            r.spec.to_string(),
            r.state.to_string(),
            r.paused,
            r.due_at.map(Timestamp::as_micros),
            r.version as i64,
            r.created_at.as_micros(),
            r.updated_at.as_micros(),
            r.on_event,
        ])
    })
    .map(drop)
    .map_err(|e| backend("keeping a schedule", e))
}

fn advance(conn: &Connection, a: &ScheduleAdvance) -> Result<bool, StoreError> {
    let doing = "advancing a schedule";
    let changed = conn
        .prepare_cached(
            "UPDATE schedules SET state = ?3, paused = ?4, due_at = ?5, version = version + 1, updated_at = ?6 \
             WHERE tenant = ?1 AND name = ?2 AND version = ?7",
        )
        .and_then(|mut s| {
            s.execute(params![
                tenant_of(&a.key),
                a.key.name,
                a.state.to_string(),
                a.paused,
                a.due_at.map(Timestamp::as_micros),
                a.at.as_micros(),
                a.version as i64,
            ])
        })
        .map_err(|e| backend(doing, e))?;
    if changed == 0 {
        return Ok(false);
    }
    if let Some(position) = a.read_through {
        conn.prepare_cached(
            "UPDATE schedules SET due_at = ?3 WHERE tenant = ?1 AND name = ?2 \
             AND EXISTS (SELECT 1 FROM event_log WHERE tenant = ?1 AND seq > ?4)",
        )
        .and_then(|mut s| s.execute(params![tenant_of(&a.key), a.key.name, a.at.as_micros(), position as i64]))
        .map_err(|e| backend(doing, e))?;
    }
    for tick in &a.ticks {
        let (run, reason) = match &tick.outcome {
            TickOutcome::Started { run } => (Some(run.as_uuid().as_bytes().to_vec()), None),
            TickOutcome::Skipped { reason } => (None, Some(reason.as_str())),
        };
        let inserted = conn
            .prepare_cached(
                "INSERT INTO schedule_ticks (tenant, name, at, local, run_id, reason, recorded_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT (tenant, name, at) DO UPDATE SET \
                 run_id = excluded.run_id, reason = NULL, recorded_at = excluded.recorded_at \
                 WHERE ?8 AND schedule_ticks.run_id IS NULL AND excluded.run_id IS NOT NULL",
            )
            .and_then(|mut s| {
                s.execute(params![
                    tenant_of(&a.key),
                    a.key.name,
                    tick.at.as_micros(),
                    tick.local,
                    run,
                    reason,
                    tick.recorded_at.as_micros(),
                    a.replace_skipped
                ])
            })
            .map_err(|e| backend(doing, e))?;
        if inserted == 0 {
            return Err(tick_recorded(&a.key, tick.at));
        }
    }
    for fire in &a.fires {
        super::events::insert_fire(conn, &a.key, fire)?;
    }
    for run in &a.runs {
        insert_run(conn, run)?;
    }
    Ok(true)
}

impl ScheduleStore for SqliteStore {
    fn put_schedule(&self, record: ScheduleRecord) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(self.write(move |conn| put(conn, &record)))
    }

    fn schedule<'a>(&'a self, key: &'a ScheduleKey) -> BoxFuture<'a, Result<Option<ScheduleRecord>, StoreError>> {
        let key = key.clone();
        Box::pin(self.read("reading a schedule", move |conn| {
            conn.prepare_cached(&format!("SELECT {COLUMNS} FROM schedules WHERE tenant = ?1 AND name = ?2"))
                .and_then(|mut s| s.query_row(params![tenant_of(&key), key.name], schedule_from).optional())
                .map_err(|e| backend("reading a schedule", e))
        }))
    }

    fn schedules<'a>(&'a self, tenant: Option<&'a str>) -> BoxFuture<'a, Result<Vec<ScheduleRecord>, StoreError>> {
        let tenant = tenant.map(str::to_owned);
        Box::pin(self.read("listing schedules", move |conn| {
            conn.prepare_cached(&format!(
                "SELECT {COLUMNS} FROM schedules WHERE ?1 IS NULL OR tenant = ?1 ORDER BY tenant, name"
            ))
            .and_then(|mut s| s.query_map(params![tenant], schedule_from)?.collect::<rusqlite::Result<Vec<_>>>())
            .map_err(|e| backend("listing schedules", e))
        }))
    }

    fn delete_schedule<'a>(&'a self, key: &'a ScheduleKey) -> BoxFuture<'a, Result<bool, StoreError>> {
        let key = key.clone();
        Box::pin(self.write(move |conn| {
            let doing = "deleting a schedule";
            for table in ["schedule_ticks", "event_fires"] {
                let column = if table == "event_fires" { "trigger" } else { "name" };
                conn.prepare_cached(&format!("DELETE FROM {table} WHERE tenant = ?1 AND {column} = ?2"))
                    .and_then(|mut s| s.execute(params![tenant_of(&key), key.name]))
                    .map_err(|e| backend(doing, e))?;
            }
            conn.prepare_cached("DELETE FROM schedules WHERE tenant = ?1 AND name = ?2")
                .and_then(|mut s| s.execute(params![tenant_of(&key), key.name]))
                .map(|n| n > 0)
                .map_err(|e| backend(doing, e))
        }))
    }

    fn due_schedules(&self, now: Timestamp, limit: usize) -> BoxFuture<'_, Result<Vec<ScheduleRecord>, StoreError>> {
        Box::pin(self.read("finding due schedules", move |conn| {
            conn.prepare_cached(&format!(
                "SELECT {COLUMNS} FROM schedules WHERE due_at IS NOT NULL AND due_at <= ?1 ORDER BY due_at LIMIT ?2"
            ))
            .and_then(|mut s| {
                s.query_map(params![now.as_micros(), i64::try_from(limit).unwrap_or(i64::MAX)], schedule_from)?
                    .collect::<rusqlite::Result<Vec<_>>>()
            })
            .map_err(|e| backend("finding due schedules", e))
        }))
    }

    fn next_due(&self) -> BoxFuture<'_, Result<Option<Timestamp>, StoreError>> {
        Box::pin(self.read("finding the next due schedule", |conn| {
            conn.prepare_cached("SELECT MIN(due_at) FROM schedules WHERE due_at IS NOT NULL")
                .and_then(|mut s| s.query_row([], |r| r.get::<_, Option<i64>>(0)))
                .map(|at| at.map(Timestamp::from_micros))
                .map_err(|e| backend("finding the next due schedule", e))
        }))
    }

    fn advance_schedule(&self, a: ScheduleAdvance) -> BoxFuture<'_, Result<bool, StoreError>> {
        let starts = !a.runs.is_empty();
        Box::pin(async move {
            let written = self.write(move |conn| advance(conn, &a)).await?;
            if written && starts {
                self.announce_work();
            }
            Ok(written)
        })
    }

    fn ticks<'a>(&'a self, key: &'a ScheduleKey, limit: usize) -> BoxFuture<'a, Result<Vec<TickRecord>, StoreError>> {
        let key = key.clone();
        Box::pin(self.read("reading a schedule's ticks", move |conn| {
            conn.prepare_cached(
                "SELECT at, local, run_id, reason, recorded_at FROM schedule_ticks \
                 WHERE tenant = ?1 AND name = ?2 ORDER BY at DESC LIMIT ?3",
            )
            .and_then(|mut s| {
                s.query_map(params![tenant_of(&key), key.name, i64::try_from(limit).unwrap_or(i64::MAX)], tick_from)?
                    .collect::<rusqlite::Result<Vec<_>>>()
            })
            .map_err(|e| backend("reading a schedule's ticks", e))
        }))
    }
}
