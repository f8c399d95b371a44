//! The event log in SQLite: `events` (the log), `event_watches` (runs whose wait watches a
//! name) and `event_fires` (what each trigger did with each event). Appending an event is
//! one writer operation: the row, its tenant's triggers made due, its watchers woken.

use futures_util::future::BoxFuture;
use rusqlite::{Connection, OptionalExtension, Row, params};
use stepwright_core::store::event::{
    Appended, EventFire, EventQuery, EventStore, NewEvent, StoredEvent, check_new_event, fire_recorded,
};
use stepwright_core::store::schedule::{ScheduleKey, TickOutcome};
use stepwright_core::{RunId, StoreError, Timestamp};

use super::{SqliteStore, bytes_to_id};
use crate::encoding::backend;

const COLUMNS: &str = "seq, tenant, name, payload, idempotency_key, received_at";

fn event_from(row: &Row<'_>) -> rusqlite::Result<StoredEvent> {
    let tenant: String = row.get(1)?;
    let payload: String = row.get(3)?;
    Ok(StoredEvent {
        seq: row.get::<_, i64>(0)? as u64,
        tenant: (!tenant.is_empty()).then_some(tenant),
        name: row.get(2)?,
        payload: serde_json::from_str(&payload)
            .map_err(|e| rusqlite::Error::FromSqlConversionFailure(3, rusqlite::types::Type::Text, Box::new(e)))?,
        idempotency_key: row.get(4)?,
        received_at: Timestamp::from_micros(row.get(5)?),
    })
}

fn fire_from(row: &Row<'_>) -> rusqlite::Result<EventFire> {
    let run: Option<Vec<u8>> = row.get(2)?;
    let outcome = match run {
        Some(run) => TickOutcome::Started { run: bytes_to_id(&run)? },
        None => TickOutcome::Skipped { reason: row.get::<_, Option<String>>(3)?.unwrap_or_default() },
    };
    Ok(EventFire {
        trigger: row.get(0)?,
        event: row.get::<_, i64>(1)? as u64,
        outcome,
        recorded_at: Timestamp::from_micros(row.get(4)?),
    })
}

/// Records a trigger's fire in an advance's transaction; a fire recorded already fails it.
pub(super) fn insert_fire(conn: &Connection, key: &ScheduleKey, fire: &EventFire) -> Result<(), StoreError> {
    let (run, reason) = match &fire.outcome {
        TickOutcome::Started { run } => (Some(run.as_uuid().as_bytes().to_vec()), None),
        TickOutcome::Skipped { reason } => (None, Some(reason.as_str())),
    };
    let inserted = conn
        .prepare_cached(
            "INSERT INTO event_fires (tenant, trigger, event_seq, run_id, reason, recorded_at) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT DO NOTHING",
        )
        .and_then(|mut s| {
            s.execute(params![
                key.tenant.as_deref().unwrap_or(""),
                key.name,
                fire.event as i64,
                run,
                reason,
                fire.recorded_at.as_micros()
            ])
        })
        .map_err(|e| backend("recording a trigger's fire", e))?;
    if inserted == 0 {
        return Err(fire_recorded(key, fire.event));
    }
    Ok(())
}

fn by_key(conn: &Connection, tenant: &str, key: &str) -> Result<Option<StoredEvent>, StoreError> {
    conn.prepare_cached(&format!("SELECT {COLUMNS} FROM event_log WHERE tenant = ?1 AND idempotency_key = ?2"))
        .and_then(|mut s| s.query_row(params![tenant, key], event_from).optional())
        .map_err(|e| backend("reading an event", e))
}

fn append(conn: &Connection, event: &NewEvent) -> Result<(Appended, bool), StoreError> {
    let doing = "storing an event";
    let tenant = event.tenant.as_deref().unwrap_or("");
    if let Some(key) = &event.idempotency_key
        && let Some(first) = by_key(conn, tenant, key)?
    {
        return Ok((Appended { event: first, created: false }, false));
    }
    let at = event.at.as_micros();
    conn.prepare_cached(
        "INSERT INTO event_log (tenant, name, payload, idempotency_key, received_at) VALUES (?1, ?2, ?3, ?4, ?5)",
    )
    .and_then(|mut s| s.execute(params![tenant, event.name, event.payload.to_string(), event.idempotency_key, at]))
    .map_err(|e| backend(doing, e))?;
    let seq = conn.last_insert_rowid() as u64;
    let triggers = conn
        .prepare_cached(
            "UPDATE schedules SET due_at = ?2 WHERE tenant = ?1 AND on_event IS NOT NULL \
             AND (due_at IS NULL OR due_at > ?2)",
        )
        .and_then(|mut s| s.execute(params![tenant, at]))
        .map_err(|e| backend(doing, e))?;
    let woken = conn
        .prepare_cached(
            "UPDATE runs SET wake_at = ?3 WHERE status = 'suspended' AND wake_at > ?3 AND id IN \
             (SELECT run_id FROM event_watches WHERE tenant = ?1 AND name = ?2)",
        )
        .and_then(|mut s| s.execute(params![tenant, event.name, at]))
        .map_err(|e| backend(doing, e))?;
    conn.prepare_cached("DELETE FROM event_watches WHERE tenant = ?1 AND name = ?2")
        .and_then(|mut s| s.execute(params![tenant, event.name]))
        .map_err(|e| backend(doing, e))?;
    let stored = StoredEvent {
        seq,
        tenant: event.tenant.clone(),
        name: event.name.clone(),
        payload: event.payload.clone(),
        idempotency_key: event.idempotency_key.clone(),
        received_at: event.at,
    };
    Ok((Appended { event: stored, created: true }, triggers > 0 || woken > 0))
}

/// The events of a query (see [`EventQuery`]).
pub(super) fn query(conn: &Connection, tenant: Option<&str>, q: &EventQuery) -> Result<Vec<StoredEvent>, StoreError> {
    let order = if q.after.is_some() { "ASC" } else { "DESC" };
    conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM event_log WHERE tenant = ?1 AND (?2 IS NULL OR name = ?2) \
         AND (?3 IS NULL OR seq > ?3) AND (?4 IS NULL OR seq < ?4) AND (?5 IS NULL OR received_at >= ?5) \
         ORDER BY seq {order} LIMIT ?6"
    ))
    .and_then(|mut s| {
        s.query_map(
            params![
                tenant.unwrap_or(""),
                q.name,
                q.after.map(|a| a as i64),
                q.before.map(|b| b as i64),
                q.since.map(Timestamp::as_micros),
                q.limit() as i64
            ],
            event_from,
        )?
        .collect::<rusqlite::Result<Vec<_>>>()
    })
    .map_err(|e| backend("reading events", e))
}

impl SqliteStore {
    pub(super) fn watch_events_in(
        &self,
        run: RunId,
        tenant: Option<&str>,
        name: &str,
    ) -> BoxFuture<'_, Result<(), StoreError>> {
        let (tenant, name) = (tenant.unwrap_or("").to_owned(), name.to_owned());
        Box::pin(self.write(move |conn| {
            conn.prepare_cached(
                "INSERT INTO event_watches (tenant, name, run_id) VALUES (?1, ?2, ?3) ON CONFLICT DO NOTHING",
            )
            .and_then(|mut s| s.execute(params![tenant, name, run.as_uuid().as_bytes()]))
            .map(drop)
            .map_err(|e| backend("watching events", e))
        }))
    }
}

impl EventStore for SqliteStore {
    fn append_event(&self, event: NewEvent) -> BoxFuture<'_, Result<Appended, StoreError>> {
        Box::pin(async move {
            check_new_event(&event)?;
            let (appended, work) = self.write(move |conn| append(conn, &event)).await?;
            if work {
                self.announce_work();
            }
            Ok(appended)
        })
    }

    fn event_log<'a>(
        &'a self,
        tenant: Option<&'a str>,
        q: EventQuery,
    ) -> BoxFuture<'a, Result<Vec<StoredEvent>, StoreError>> {
        let tenant = tenant.map(str::to_owned);
        Box::pin(self.read("reading events", move |conn| query(conn, tenant.as_deref(), &q)))
    }

    fn event_by_seq<'a>(
        &'a self,
        tenant: Option<&'a str>,
        seq: u64,
    ) -> BoxFuture<'a, Result<Option<StoredEvent>, StoreError>> {
        let tenant = tenant.unwrap_or("").to_owned();
        Box::pin(self.read("reading an event", move |conn| {
            conn.prepare_cached(&format!("SELECT {COLUMNS} FROM event_log WHERE tenant = ?1 AND seq = ?2"))
                .and_then(|mut s| s.query_row(params![tenant, seq as i64], event_from).optional())
                .map_err(|e| backend("reading an event", e))
        }))
    }

    fn event_fires<'a>(
        &'a self,
        tenant: Option<&'a str>,
        seq: u64,
    ) -> BoxFuture<'a, Result<Vec<EventFire>, StoreError>> {
        let tenant = tenant.unwrap_or("").to_owned();
        Box::pin(self.read("reading an event's fires", move |conn| {
            conn.prepare_cached(
                "SELECT trigger, event_seq, run_id, reason, recorded_at FROM event_fires \
                 WHERE tenant = ?1 AND event_seq = ?2 ORDER BY trigger",
            )
            .and_then(|mut s| {
                s.query_map(params![tenant, seq as i64], fire_from)?.collect::<rusqlite::Result<Vec<_>>>()
            })
            .map_err(|e| backend("reading an event's fires", e))
        }))
    }

    fn trigger_fires<'a>(
        &'a self,
        key: &'a ScheduleKey,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<EventFire>, StoreError>> {
        let key = key.clone();
        Box::pin(self.read("reading a trigger's fires", move |conn| {
            conn.prepare_cached(
                "SELECT trigger, event_seq, run_id, reason, recorded_at FROM event_fires \
                 WHERE tenant = ?1 AND trigger = ?2 ORDER BY event_seq DESC LIMIT ?3",
            )
            .and_then(|mut s| {
                s.query_map(params![key.tenant.as_deref().unwrap_or(""), key.name, limit as i64], fire_from)?
                    .collect::<rusqlite::Result<Vec<_>>>()
            })
            .map_err(|e| backend("reading a trigger's fires", e))
        }))
    }
}
