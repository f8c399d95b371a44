//! The event log in Postgres: `stepwright_events`, `stepwright_event_watches` and
//! `stepwright_event_fires`. Appending an event is one transaction: the row, its tenant's
//! triggers made due, its watchers woken.
//!
//! An append is one call of `stepwright_append_event` (migration 011): one round trip, one
//! transaction. Appends take their tenant's advisory lock until they commit, so a tenant's events commit
//! in the order of their sequence numbers: a trigger that has read through one has seen
//! every earlier one (a sequence allocated by one transaction and committed after a later
//! one's would otherwise be skipped for good). A wait's registration takes the same lock, so
//! it and an append always see each other: an append after a registration wakes the run, a
//! registration after an append is followed by a look that finds the event.

use futures_util::future::BoxFuture;
use sqlx::postgres::PgRow;
use sqlx::{Postgres, Row, Transaction};
use stepwright_core::store::event::{
    Appended, EventFire, EventQuery, EventStore, NewEvent, StoredEvent, check_new_event, fire_recorded,
};
use stepwright_core::store::schedule::{ScheduleKey, TickOutcome};
use stepwright_core::{RunId, StoreError, Timestamp};

use super::{PostgresStore, pg, uuid};
use crate::encoding::backend;

macro_rules! columns {
    () => {
        "seq, tenant, name, payload, idempotency_key, received_at"
    };
}

fn event_from(row: &PgRow) -> Result<StoredEvent, StoreError> {
    let get = |e: sqlx::Error| backend("reading an event", e);
    let tenant: String = row.try_get(1).map_err(get)?;
    Ok(StoredEvent {
        seq: row.try_get::<i64, _>(0).map_err(get)? as u64,
        tenant: (!tenant.is_empty()).then_some(tenant),
        name: row.try_get(2).map_err(get)?,
        payload: row.try_get(3).map_err(get)?,
        idempotency_key: row.try_get(4).map_err(get)?,
        received_at: Timestamp::from_micros(row.try_get(5).map_err(get)?),
    })
}

fn fire_from(row: &PgRow) -> Result<EventFire, StoreError> {
    let get = |e: sqlx::Error| backend("reading an event's fires", e);
    let run: Option<uuid::Uuid> = row.try_get(2).map_err(get)?;
    Ok(EventFire {
        trigger: row.try_get(0).map_err(get)?,
        event: row.try_get::<i64, _>(1).map_err(get)? as u64,
        outcome: match run {
            Some(run) => TickOutcome::Started { run: RunId::from_bytes(run.into_bytes()) },
            None => {
                TickOutcome::Skipped { reason: row.try_get::<Option<String>, _>(3).map_err(get)?.unwrap_or_default() }
            }
        },
        recorded_at: Timestamp::from_micros(row.try_get(4).map_err(get)?),
    })
}

/// Takes the advisory lock of a tenant's event log until the transaction ends.
async fn lock_log(tx: &mut Transaction<'_, Postgres>, tenant: &str) -> Result<(), StoreError> {
    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended('stepwright.event_log:' || $1, 7))")
        .bind(tenant)
        .execute(&mut **tx)
        .await
        .map(drop)
        .map_err(pg("locking the event log"))
}

/// Records a trigger's fires in an advance's transaction; a fire recorded already fails it.
pub(super) async fn insert_fires(
    tx: &mut Transaction<'_, Postgres>,
    key: &ScheduleKey,
    fires: &[EventFire],
) -> Result<(), StoreError> {
    if fires.is_empty() {
        return Ok(());
    }
    let doing = "recording a trigger's fires";
    let (mut events, mut runs, mut reasons, mut recorded) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for fire in fires {
        events.push(fire.event as i64);
        let (run, reason) = match &fire.outcome {
            TickOutcome::Started { run } => (Some(uuid(*run)), None),
            TickOutcome::Skipped { reason } => (None, Some(reason.as_str())),
        };
        runs.push(run);
        reasons.push(reason);
        recorded.push(fire.recorded_at.as_micros());
    }
    let inserted = sqlx::query(
        "INSERT INTO stepwright_event_fires (tenant, trigger, event_seq, run_id, reason, recorded_at) \
         SELECT $1, $2, event_seq, run_id, reason, recorded_at \
         FROM UNNEST($3::bigint[], $4::uuid[], $5::text[], $6::bigint[]) AS f(event_seq, run_id, reason, recorded_at) \
         ON CONFLICT DO NOTHING",
    )
    .bind(key.tenant.as_deref().unwrap_or(""))
    .bind(&key.name)
    .bind(&events)
    .bind(&runs)
    .bind(&reasons)
    .bind(&recorded)
    .execute(&mut **tx)
    .await
    .map_err(pg(doing))?
    .rows_affected();
    if inserted != fires.len() as u64 {
        // Rolled back when the transaction drops.
        return Err(fire_recorded(key, fires[0].event));
    }
    Ok(())
}

impl PostgresStore {
    async fn append(&self, event: &NewEvent) -> Result<Appended, StoreError> {
        let doing = "storing an event";
        let get = |e: sqlx::Error| backend(doing, e);
        let row = sqlx::query("SELECT * FROM stepwright_append_event($1, $2, $3, $4, $5)")
            .bind(event.tenant.as_deref().unwrap_or(""))
            .bind(&event.name)
            .bind(&event.payload)
            .bind(&event.idempotency_key)
            .bind(event.at.as_micros())
            .fetch_one(&self.pool)
            .await
            .map_err(pg(doing))?;
        let created: bool = row.try_get(6).map_err(get)?;
        let woken: i64 = row.try_get(7).map_err(get)?;
        if woken > 0 {
            self.notifier.announce(&self.pool).await;
        }
        Ok(Appended { event: event_from(&row)?, created })
    }

    pub(super) async fn query_events(
        &self,
        tenant: Option<&str>,
        q: &EventQuery,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        let sql = if q.after.is_some() {
            concat!(
                "SELECT ",
                columns!(),
                " FROM stepwright_event_log WHERE tenant = $1 AND ($2::text IS NULL OR name = $2) \
                 AND ($3::bigint IS NULL OR seq > $3) AND ($4::bigint IS NULL OR seq < $4) \
                 AND ($5::bigint IS NULL OR received_at >= $5) ORDER BY seq ASC LIMIT $6"
            )
        } else {
            concat!(
                "SELECT ",
                columns!(),
                " FROM stepwright_event_log WHERE tenant = $1 AND ($2::text IS NULL OR name = $2) \
                 AND ($3::bigint IS NULL OR seq > $3) AND ($4::bigint IS NULL OR seq < $4) \
                 AND ($5::bigint IS NULL OR received_at >= $5) ORDER BY seq DESC LIMIT $6"
            )
        };
        let rows = sqlx::query(sql)
            .bind(tenant.unwrap_or(""))
            .bind(&q.name)
            .bind(q.after.map(|a| a as i64))
            .bind(q.before.map(|b| b as i64))
            .bind(q.since.map(Timestamp::as_micros))
            .bind(q.limit() as i64)
            .fetch_all(&self.pool)
            .await
            .map_err(pg("reading events"))?;
        rows.iter().map(event_from).collect()
    }

    pub(super) async fn watch(&self, run: RunId, tenant: Option<&str>, name: &str) -> Result<(), StoreError> {
        let doing = "watching events";
        let tenant = tenant.unwrap_or("");
        let mut tx = self.pool.begin().await.map_err(pg(doing))?;
        lock_log(&mut tx, tenant).await?;
        sqlx::query(
            "INSERT INTO stepwright_event_watches (tenant, name, run_id) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
        )
        .bind(tenant)
        .bind(name)
        .bind(uuid(run))
        .execute(&mut *tx)
        .await
        .map_err(pg(doing))?;
        tx.commit().await.map_err(pg(doing))
    }
}

impl EventStore for PostgresStore {
    fn append_event(&self, event: NewEvent) -> BoxFuture<'_, Result<Appended, StoreError>> {
        Box::pin(async move {
            check_new_event(&event)?;
            self.append(&event).await
        })
    }

    fn event_log<'a>(
        &'a self,
        tenant: Option<&'a str>,
        q: EventQuery,
    ) -> BoxFuture<'a, Result<Vec<StoredEvent>, StoreError>> {
        Box::pin(async move { self.query_events(tenant, &q).await })
    }

    fn event_by_seq<'a>(
        &'a self,
        tenant: Option<&'a str>,
        seq: u64,
    ) -> BoxFuture<'a, Result<Option<StoredEvent>, StoreError>> {
        Box::pin(async move {
            let row = sqlx::query(concat!(
                "SELECT ",
                columns!(),
                " FROM stepwright_event_log WHERE tenant = $1 AND seq = $2"
            ))
            .bind(tenant.unwrap_or(""))
            .bind(seq as i64)
            .fetch_optional(&self.pool)
            .await
            .map_err(pg("reading an event"))?;
            row.as_ref().map(event_from).transpose()
        })
    }

    fn event_fires<'a>(
        &'a self,
        tenant: Option<&'a str>,
        seq: u64,
    ) -> BoxFuture<'a, Result<Vec<EventFire>, StoreError>> {
        Box::pin(async move {
            let rows = sqlx::query(
                "SELECT trigger, event_seq, run_id, reason, recorded_at FROM stepwright_event_fires \
                 WHERE tenant = $1 AND event_seq = $2 ORDER BY trigger",
            )
            .bind(tenant.unwrap_or(""))
            .bind(seq as i64)
            .fetch_all(&self.pool)
            .await
            .map_err(pg("reading an event's fires"))?;
            rows.iter().map(fire_from).collect()
        })
    }

    fn trigger_fires<'a>(
        &'a self,
        key: &'a ScheduleKey,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<EventFire>, StoreError>> {
        Box::pin(async move {
            let rows = sqlx::query(
                "SELECT trigger, event_seq, run_id, reason, recorded_at FROM stepwright_event_fires \
                 WHERE tenant = $1 AND trigger = $2 ORDER BY event_seq DESC LIMIT $3",
            )
            .bind(key.tenant.as_deref().unwrap_or(""))
            .bind(&key.name)
            .bind(limit as i64)
            .fetch_all(&self.pool)
            .await
            .map_err(pg("reading a trigger's fires"))?;
            rows.iter().map(fire_from).collect()
        })
    }
}
