//! Experiments in SQLite: `experiments` and `experiment_runs`. Reads go to a reader; writes
//! ride the writer's group commit; a run's result kept once stays.

use futures_util::future::BoxFuture;
use rusqlite::{OptionalExtension, params};
use serde_json::Value;
use stepwright_core::store::experiment::{ExperimentHold, ExperimentRecord, ExperimentState, ExperimentStore};
use stepwright_core::{RunId, StoreError, Timestamp};

use super::SqliteStore;
use super::journal::{bytes_to_id, conversion};
use crate::encoding::backend;

const COLUMNS: &str = "id, tenant, name, workflow, spec, state, created_at, holder, held_until";

fn json(text: &str) -> rusqlite::Result<Value> {
    serde_json::from_str(text).map_err(conversion)
}

fn record(row: &rusqlite::Row<'_>, report: Option<&str>) -> rusqlite::Result<ExperimentRecord> {
    let state: String = row.get(5)?;
    Ok(ExperimentRecord {
        id: bytes_to_id(&row.get::<_, Vec<u8>>(0)?)?,
        tenant: row.get(1)?,
        name: row.get(2)?,
        workflow: row.get(3)?,
        spec: json(&row.get::<_, String>(4)?)?,
        state: ExperimentState::parse(&state)
            .ok_or_else(|| conversion(std::io::Error::other(format!("unknown experiment state {state:?}"))))?,
        created_at: Timestamp::from_micros(row.get(6)?),
        report: report.map(json).transpose()?,
        hold: match (row.get::<_, Option<String>>(7)?, row.get::<_, Option<i64>>(8)?) {
            (Some(holder), Some(until)) => Some(ExperimentHold { holder, until: Timestamp::from_micros(until) }),
            _ => None,
        },
    })
}

fn id_bytes(id: RunId) -> [u8; 16] {
    id.as_uuid().into_bytes()
}

impl ExperimentStore for SqliteStore {
    fn experiment_begin(&self, record: ExperimentRecord) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(self.write(move |conn| {
            conn.prepare_cached(
                "INSERT INTO experiments (id, tenant, name, workflow, spec, state, created_at, holder, held_until) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            )
            .and_then(|mut s| {
                let hold = record.hold.as_ref();
                s.execute(params![
                    id_bytes(record.id),
                    record.tenant,
                    record.name,
                    record.workflow,
                    record.spec.to_string(),
                    record.state.as_str(),
                    record.created_at.as_micros(),
                    hold.map(|h| h.holder.clone()),
                    hold.map(|h| h.until.as_micros())
                ])
            })
            .map(drop)
            .map_err(|e| backend("keeping an experiment", e))
        }))
    }

    fn experiment_keep(&self, id: RunId, run: RunId, result: Value) -> BoxFuture<'_, Result<(), StoreError>> {
        let text = result.to_string();
        Box::pin(self.write(move |conn| {
            conn.prepare_cached(
                "INSERT INTO experiment_runs (experiment, run, result) VALUES (?1, ?2, ?3) \
                 ON CONFLICT (experiment, run) DO NOTHING",
            )
            .and_then(|mut s| s.execute(params![id_bytes(id), id_bytes(run), text]))
            .map(drop)
            .map_err(|e| backend("keeping an experiment's result", e))
        }))
    }

    fn experiment_kept(&self, id: RunId) -> BoxFuture<'_, Result<Vec<(RunId, Value)>, StoreError>> {
        Box::pin(self.read("reading an experiment's results", move |conn| {
            let mut statement = conn
                .prepare_cached("SELECT run, result FROM experiment_runs WHERE experiment = ?1")
                .map_err(|e| backend("reading an experiment's results", e))?;
            let rows = statement
                .query_map(params![id_bytes(id)], |row| {
                    Ok((bytes_to_id(&row.get::<_, Vec<u8>>(0)?)?, json(&row.get::<_, String>(1)?)?))
                })
                .and_then(Iterator::collect)
                .map_err(|e| backend("reading an experiment's results", e))?;
            Ok(rows)
        }))
    }

    fn experiment_end(
        &self,
        id: RunId,
        state: ExperimentState,
        report: Value,
    ) -> BoxFuture<'_, Result<(), StoreError>> {
        let text = report.to_string();
        Box::pin(self.write(move |conn| {
            conn.prepare_cached("UPDATE experiments SET state = ?2, report = ?3 WHERE id = ?1")
                .and_then(|mut s| s.execute(params![id_bytes(id), state.as_str(), text]))
                .map(drop)
                .map_err(|e| backend("ending an experiment", e))
        }))
    }

    fn experiment_cancel(&self, id: RunId) -> BoxFuture<'_, Result<bool, StoreError>> {
        Box::pin(self.write(move |conn| {
            conn.prepare_cached("UPDATE experiments SET state = 'cancelled' WHERE id = ?1 AND state = 'running'")
                .and_then(|mut s| s.execute(params![id_bytes(id)]))
                .map(|changed| changed == 1)
                .map_err(|e| backend("cancelling an experiment", e))
        }))
    }

    fn experiment_hold(
        &self,
        id: RunId,
        from: Option<String>,
        to: ExperimentHold,
    ) -> BoxFuture<'_, Result<bool, StoreError>> {
        Box::pin(self.write(move |conn| {
            conn.prepare_cached(
                "UPDATE experiments SET holder = ?3, held_until = ?4 \
                 WHERE id = ?1 AND state = 'running' AND holder IS ?2",
            )
            .and_then(|mut s| s.execute(params![id_bytes(id), from, to.holder, to.until.as_micros()]))
            .map(|changed| changed == 1)
            .map_err(|e| backend("holding an experiment", e))
        }))
    }

    fn experiments_running(&self, limit: usize) -> BoxFuture<'_, Result<Vec<ExperimentRecord>, StoreError>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        Box::pin(self.read("listing running experiments", move |conn| {
            let mut statement = conn
                .prepare_cached(&format!(
                    "SELECT {COLUMNS} FROM experiments WHERE state = 'running' ORDER BY created_at, id LIMIT ?1"
                ))
                .map_err(|e| backend("listing running experiments", e))?;
            statement
                .query_map(params![limit], |row| record(row, None))
                .and_then(Iterator::collect)
                .map_err(|e| backend("listing running experiments", e))
        }))
    }

    fn experiment(&self, id: RunId) -> BoxFuture<'_, Result<Option<ExperimentRecord>, StoreError>> {
        Box::pin(self.read("reading an experiment", move |conn| {
            conn.prepare_cached(&format!("SELECT {COLUMNS}, report FROM experiments WHERE id = ?1"))
                .and_then(|mut s| {
                    s.query_row(params![id_bytes(id)], |row| record(row, row.get::<_, Option<String>>(9)?.as_deref()))
                        .optional()
                })
                .map_err(|e| backend("reading an experiment", e))
        }))
    }

    fn experiments(
        &self,
        tenant: Option<String>,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<ExperimentRecord>, StoreError>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        Box::pin(self.read("listing experiments", move |conn| {
            let mut statement = conn
                .prepare_cached(&format!(
                    "SELECT {COLUMNS} FROM experiments WHERE ?1 IS NULL OR tenant = ?1 \
                     ORDER BY created_at DESC, id DESC LIMIT ?2"
                ))
                .map_err(|e| backend("listing experiments", e))?;
            statement
                .query_map(params![tenant, limit], |row| record(row, None))
                .and_then(Iterator::collect)
                .map_err(|e| backend("listing experiments", e))
        }))
    }
}
