//! Experiments in Postgres: `stepwright_experiments` and `stepwright_experiment_runs`; a
//! run's result kept once stays (`ON CONFLICT DO NOTHING`).

use futures_util::future::BoxFuture;
use serde_json::Value;
use sqlx::Row;
use stepwright_core::store::experiment::{ExperimentHold, ExperimentRecord, ExperimentState, ExperimentStore};
use stepwright_core::{RunId, StoreError, Timestamp};

use super::rows::uuid;
use super::{PostgresStore, pg};
use crate::encoding::backend;

const COLUMNS: &str = "id, tenant, name, workflow, spec, state, created_at, holder, held_until";

fn json(text: &str) -> Result<Value, StoreError> {
    serde_json::from_str(text).map_err(|e| backend("decoding an experiment", e))
}

fn record(row: &sqlx::postgres::PgRow, with_report: bool) -> Result<ExperimentRecord, StoreError> {
    let state: String = row.get(5);
    let report: Option<String> = if with_report { row.get(9) } else { None };
    Ok(ExperimentRecord {
        id: RunId::from_bytes(row.get::<uuid::Uuid, _>(0).into_bytes()),
        tenant: row.get(1),
        name: row.get(2),
        workflow: row.get(3),
        spec: json(&row.get::<String, _>(4))?,
        state: ExperimentState::parse(&state).ok_or_else(|| {
            backend("decoding an experiment", std::io::Error::other(format!("unknown state {state:?}")))
        })?,
        created_at: Timestamp::from_micros(row.get(6)),
        report: report.as_deref().map(json).transpose()?,
        hold: match (row.get::<Option<String>, _>(7), row.get::<Option<i64>, _>(8)) {
            (Some(holder), Some(until)) => Some(ExperimentHold { holder, until: Timestamp::from_micros(until) }),
            _ => None,
        },
    })
}

impl ExperimentStore for PostgresStore {
    fn experiment_begin(&self, record: ExperimentRecord) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            sqlx::query(
                "INSERT INTO stepwright_experiments \
                 (id, tenant, name, workflow, spec, state, created_at, holder, held_until) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
            )
            .bind(uuid(record.id))
            .bind(record.tenant)
            .bind(record.name)
            .bind(record.workflow)
            .bind(record.spec.to_string())
            .bind(record.state.as_str())
            .bind(record.created_at.as_micros())
            .bind(record.hold.as_ref().map(|h| h.holder.clone()))
            .bind(record.hold.as_ref().map(|h| h.until.as_micros()))
            .execute(&self.pool)
            .await
            .map(drop)
            .map_err(pg("keeping an experiment"))
        })
    }

    fn experiment_keep(&self, id: RunId, run: RunId, result: Value) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            sqlx::query(
                "INSERT INTO stepwright_experiment_runs (experiment, run, result) VALUES ($1, $2, $3) \
                 ON CONFLICT (experiment, run) DO NOTHING",
            )
            .bind(uuid(id))
            .bind(uuid(run))
            .bind(result.to_string())
            .execute(&self.pool)
            .await
            .map(drop)
            .map_err(pg("keeping an experiment's result"))
        })
    }

    fn experiment_kept(&self, id: RunId) -> BoxFuture<'_, Result<Vec<(RunId, Value)>, StoreError>> {
        Box::pin(async move {
            let rows = sqlx::query("SELECT run, result FROM stepwright_experiment_runs WHERE experiment = $1")
                .bind(uuid(id))
                .fetch_all(&self.pool)
                .await
                .map_err(pg("reading an experiment's results"))?;
            rows.iter()
                .map(|row| {
                    Ok((RunId::from_bytes(row.get::<uuid::Uuid, _>(0).into_bytes()), json(&row.get::<String, _>(1))?))
                })
                .collect()
        })
    }

    fn experiment_end(
        &self,
        id: RunId,
        state: ExperimentState,
        report: Value,
    ) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            sqlx::query("UPDATE stepwright_experiments SET state = $2, report = $3 WHERE id = $1")
                .bind(uuid(id))
                .bind(state.as_str())
                .bind(report.to_string())
                .execute(&self.pool)
                .await
                .map(drop)
                .map_err(pg("ending an experiment"))
        })
    }

    fn experiment_cancel(&self, id: RunId) -> BoxFuture<'_, Result<bool, StoreError>> {
        Box::pin(async move {
            sqlx::query("UPDATE stepwright_experiments SET state = 'cancelled' WHERE id = $1 AND state = 'running'")
                .bind(uuid(id))
                .execute(&self.pool)
                .await
                .map(|done| done.rows_affected() == 1)
                .map_err(pg("cancelling an experiment"))
        })
    }

    fn experiment_hold(
        &self,
        id: RunId,
        from: Option<String>,
        to: ExperimentHold,
    ) -> BoxFuture<'_, Result<bool, StoreError>> {
        Box::pin(async move {
            sqlx::query(
                "UPDATE stepwright_experiments SET holder = $3, held_until = $4 \
                 WHERE id = $1 AND state = 'running' AND holder IS NOT DISTINCT FROM $2",
            )
            .bind(uuid(id))
            .bind(from)
            .bind(to.holder)
            .bind(to.until.as_micros())
            .execute(&self.pool)
            .await
            .map(|done| done.rows_affected() == 1)
            .map_err(pg("holding an experiment"))
        })
    }

    fn experiments_running(&self, limit: usize) -> BoxFuture<'_, Result<Vec<ExperimentRecord>, StoreError>> {
        Box::pin(async move {
            let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
                "SELECT {COLUMNS} FROM stepwright_experiments WHERE state = 'running' ORDER BY created_at, id LIMIT $1"
            )))
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(&self.pool)
            .await
            .map_err(pg("listing running experiments"))?;
            rows.iter().map(|row| record(row, false)).collect()
        })
    }

    fn experiment(&self, id: RunId) -> BoxFuture<'_, Result<Option<ExperimentRecord>, StoreError>> {
        Box::pin(async move {
            let row = sqlx::query(sqlx::AssertSqlSafe(format!(
                "SELECT {COLUMNS}, report FROM stepwright_experiments WHERE id = $1"
            )))
            .bind(uuid(id))
            .fetch_optional(&self.pool)
            .await
            .map_err(pg("reading an experiment"))?;
            row.as_ref().map(|row| record(row, true)).transpose()
        })
    }

    fn experiments(
        &self,
        tenant: Option<String>,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<ExperimentRecord>, StoreError>> {
        Box::pin(async move {
            let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
                "SELECT {COLUMNS} FROM stepwright_experiments WHERE $1::text IS NULL OR tenant = $1 \
                 ORDER BY created_at DESC, id DESC LIMIT $2"
            )))
            .bind(tenant)
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(&self.pool)
            .await
            .map_err(pg("listing experiments"))?;
            rows.iter().map(|row| record(row, false)).collect()
        })
    }
}
