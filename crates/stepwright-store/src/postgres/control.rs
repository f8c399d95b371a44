//! The control tables in Postgres: `stepwright_registered_workflows`, `stepwright_api_keys`,
//! `stepwright_idempotency_keys` and `stepwright_audit_log`. A registration takes a
//! transaction-scoped advisory lock on its name, so two racing registrations of one name
//! take their turns and get distinct versions.

use futures_util::future::BoxFuture;
use sqlx::Row;
use sqlx::postgres::PgRow;
use stepwright_core::{RunId, StoreError, Timestamp};

use super::{PostgresStore, hash_from, pg, uuid};
use crate::control::{
    ApiKey, Attempt, AuditEntry, AuditLog, Delivery, DeliveryState, IdempotencyClaim, IdempotencyStore, KeyStore,
    NewDelivery, NewWorkflow, RegisteredWorkflow, Webhook, WebhookStore, WorkflowRegistry,
};
use crate::encoding::{backend, files_from_column};

const WORKFLOW_COLUMNS: &str = "namespace, name, version, hash, source, files, registered_at, registered_by";

fn workflow_from_row(row: &PgRow, doing: &str) -> Result<RegisteredWorkflow, StoreError> {
    let get = |e: sqlx::Error| backend(doing, e);
    Ok(RegisteredWorkflow {
        namespace: row.try_get(0).map_err(get)?,
        name: row.try_get(1).map_err(get)?,
        version: u32::try_from(row.try_get::<i32, _>(2).map_err(get)?).unwrap_or_default(),
        hash: hash_from(&row.try_get::<Vec<u8>, _>(3).map_err(get)?)?,
        source: row.try_get(4).map_err(get)?,
        files: files_from_column(row.try_get::<Option<String>, _>(5).map_err(get)?.as_deref())
            .map_err(|e| backend(doing, e))?,
        registered_at: Timestamp::from_micros(row.try_get(6).map_err(get)?),
        registered_by: row.try_get(7).map_err(get)?,
    })
}

const KEY_COLUMNS: &str = "id, namespace, user_id, roles, created_at, expires_at, revoked_at, last_used_at";

fn key_from_row(row: &PgRow, doing: &str) -> Result<ApiKey, StoreError> {
    let get = |e: sqlx::Error| backend(doing, e);
    let roles: String = row.try_get(3).map_err(get)?;
    Ok(ApiKey {
        id: row.try_get(0).map_err(get)?,
        namespace: row.try_get(1).map_err(get)?,
        user: row.try_get(2).map_err(get)?,
        roles: serde_json::from_str(&roles).map_err(|e| backend(doing, e))?,
        created_at: Timestamp::from_micros(row.try_get(4).map_err(get)?),
        expires_at: row.try_get::<Option<i64>, _>(5).map_err(get)?.map(Timestamp::from_micros),
        revoked_at: row.try_get::<Option<i64>, _>(6).map_err(get)?.map(Timestamp::from_micros),
        last_used_at: row.try_get::<Option<i64>, _>(7).map_err(get)?.map(Timestamp::from_micros),
    })
}

impl WorkflowRegistry for PostgresStore {
    fn register_workflow(&self, workflow: NewWorkflow) -> BoxFuture<'_, Result<RegisteredWorkflow, StoreError>> {
        Box::pin(async move {
            let doing = "registering a workflow";
            let mut tx = self.pool().begin().await.map_err(pg(doing))?;
            sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))")
                .bind(format!("stepwright.workflow:{}:{}", workflow.namespace, workflow.name))
                .execute(&mut *tx)
                .await
                .map_err(pg(doing))?;
            let same = sqlx::query(sqlx::AssertSqlSafe(format!(
                "SELECT {WORKFLOW_COLUMNS} FROM stepwright_registered_workflows \
                 WHERE namespace = $1 AND name = $2 AND hash = $3 ORDER BY version DESC LIMIT 1"
            )))
            .bind(&workflow.namespace)
            .bind(&workflow.name)
            .bind(&workflow.hash.as_bytes()[..])
            .fetch_optional(&mut *tx)
            .await
            .map_err(pg(doing))?;
            if let Some(same) = same {
                tx.commit().await.map_err(pg(doing))?;
                return workflow_from_row(&same, doing);
            }
            let version: i32 = sqlx::query_scalar(
                "SELECT COALESCE(MAX(version), 0) + 1 FROM stepwright_registered_workflows \
                 WHERE namespace = $1 AND name = $2",
            )
            .bind(&workflow.namespace)
            .bind(&workflow.name)
            .fetch_one(&mut *tx)
            .await
            .map_err(pg(doing))?;
            let files =
                (!workflow.files.is_empty()).then(|| serde_json::to_string(&workflow.files).unwrap_or_default());
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "INSERT INTO stepwright_registered_workflows ({WORKFLOW_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"
            )))
            .bind(&workflow.namespace)
            .bind(&workflow.name)
            .bind(version)
            .bind(&workflow.hash.as_bytes()[..])
            .bind(&workflow.source)
            .bind(files)
            .bind(workflow.at.as_micros())
            .bind(&workflow.by)
            .execute(&mut *tx)
            .await
            .map_err(pg(doing))?;
            tx.commit().await.map_err(pg(doing))?;
            let NewWorkflow { namespace, name, hash, source, files, at, by } = workflow;
            Ok(RegisteredWorkflow {
                namespace,
                name,
                version: u32::try_from(version).unwrap_or_default(),
                hash,
                source,
                files,
                registered_at: at,
                registered_by: by,
            })
        })
    }

    fn registered_workflows(&self, namespace: &str) -> BoxFuture<'_, Result<Vec<RegisteredWorkflow>, StoreError>> {
        let namespace = namespace.to_owned();
        Box::pin(async move {
            let doing = "listing workflows";
            let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
                "SELECT {WORKFLOW_COLUMNS} FROM stepwright_registered_workflows WHERE namespace = $1 \
                 ORDER BY name, version DESC"
            )))
            .bind(&namespace)
            .fetch_all(self.pool())
            .await
            .map_err(pg(doing))?;
            rows.iter().map(|row| workflow_from_row(row, doing)).collect()
        })
    }

    fn registered_workflow(
        &self,
        namespace: &str,
        name: &str,
        version: Option<u32>,
    ) -> BoxFuture<'_, Result<Option<RegisteredWorkflow>, StoreError>> {
        let (namespace, name) = (namespace.to_owned(), name.to_owned());
        Box::pin(async move {
            let doing = "reading a workflow";
            let row = sqlx::query(sqlx::AssertSqlSafe(format!(
                "SELECT {WORKFLOW_COLUMNS} FROM stepwright_registered_workflows \
                 WHERE namespace = $1 AND name = $2 AND ($3::int IS NULL OR version = $3) ORDER BY version DESC LIMIT 1"
            )))
            .bind(&namespace)
            .bind(&name)
            .bind(version.map(|v| i32::try_from(v).unwrap_or(i32::MAX)))
            .fetch_optional(self.pool())
            .await
            .map_err(pg(doing))?;
            row.map(|row| workflow_from_row(&row, doing)).transpose()
        })
    }
}

impl KeyStore for PostgresStore {
    fn create_key(&self, key: ApiKey, secret_hash: [u8; 32]) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "INSERT INTO stepwright_api_keys ({KEY_COLUMNS}, secret_hash) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)"
            )))
            .bind(&key.id)
            .bind(&key.namespace)
            .bind(&key.user)
            .bind(serde_json::to_string(&key.roles).unwrap_or_default())
            .bind(key.created_at.as_micros())
            .bind(key.expires_at.map(Timestamp::as_micros))
            .bind(key.revoked_at.map(Timestamp::as_micros))
            .bind(key.last_used_at.map(Timestamp::as_micros))
            .bind(&secret_hash[..])
            .execute(self.pool())
            .await
            .map_err(pg("creating a key"))?;
            Ok(())
        })
    }

    fn key_by_secret(&self, secret_hash: [u8; 32]) -> BoxFuture<'_, Result<Option<ApiKey>, StoreError>> {
        Box::pin(async move {
            let doing = "reading a key";
            let row = sqlx::query(sqlx::AssertSqlSafe(format!(
                "SELECT {KEY_COLUMNS} FROM stepwright_api_keys WHERE secret_hash = $1"
            )))
            .bind(&secret_hash[..])
            .fetch_optional(self.pool())
            .await
            .map_err(pg(doing))?;
            row.map(|row| key_from_row(&row, doing)).transpose()
        })
    }

    fn keys(&self, namespace: Option<&str>) -> BoxFuture<'_, Result<Vec<ApiKey>, StoreError>> {
        let namespace = namespace.map(str::to_owned);
        Box::pin(async move {
            let doing = "listing keys";
            let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
                "SELECT {KEY_COLUMNS} FROM stepwright_api_keys WHERE $1::text IS NULL OR namespace = $1 \
                 ORDER BY created_at, id"
            )))
            .bind(&namespace)
            .fetch_all(self.pool())
            .await
            .map_err(pg(doing))?;
            rows.iter().map(|row| key_from_row(row, doing)).collect()
        })
    }

    fn revoke_key(&self, id: &str, at: Timestamp) -> BoxFuture<'_, Result<bool, StoreError>> {
        let id = id.to_owned();
        Box::pin(async move {
            let done = sqlx::query(
                "UPDATE stepwright_api_keys SET revoked_at = $2 \
                 WHERE (id = $1 OR left(id, length($1) + 1) = $1 || '.') AND revoked_at IS NULL",
            )
            .bind(&id)
            .bind(at.as_micros())
            .execute(self.pool())
            .await
            .map_err(pg("revoking a key"))?;
            Ok(done.rows_affected() >= 1)
        })
    }

    fn touch_key(&self, id: &str, at: Timestamp) -> BoxFuture<'_, Result<(), StoreError>> {
        let id = id.to_owned();
        Box::pin(async move {
            sqlx::query("UPDATE stepwright_api_keys SET last_used_at = $2 WHERE id = $1")
                .bind(&id)
                .bind(at.as_micros())
                .execute(self.pool())
                .await
                .map_err(pg("recording a key's use"))?;
            Ok(())
        })
    }
}

impl IdempotencyStore for PostgresStore {
    fn claim_idempotency(
        &self,
        namespace: &str,
        key: &str,
        run: RunId,
        at: Timestamp,
    ) -> BoxFuture<'_, Result<IdempotencyClaim, StoreError>> {
        let (namespace, key) = (namespace.to_owned(), key.to_owned());
        Box::pin(async move {
            let doing = "claiming an idempotency key";
            let inserted = sqlx::query(
                "INSERT INTO stepwright_idempotency_keys (namespace, key, run_id, created_at) \
                 VALUES ($1, $2, $3, $4) ON CONFLICT (namespace, key) DO NOTHING",
            )
            .bind(&namespace)
            .bind(&key)
            .bind(uuid(run))
            .bind(at.as_micros())
            .execute(self.pool())
            .await
            .map_err(pg(doing))?;
            if inserted.rows_affected() == 1 {
                return Ok(IdempotencyClaim::Claimed);
            }
            // A statement of its own: its snapshot sees the row the winner committed (a
            // conflicting insert waits for that commit, but its own snapshot predates it).
            let (id, at): (uuid::Uuid, i64) = sqlx::query_as(
                "SELECT run_id, created_at FROM stepwright_idempotency_keys WHERE namespace = $1 AND key = $2",
            )
            .bind(&namespace)
            .bind(&key)
            .fetch_one(self.pool())
            .await
            .map_err(pg(doing))?;
            Ok(IdempotencyClaim::Taken { run: RunId::from_bytes(*id.as_bytes()), at: Timestamp::from_micros(at) })
        })
    }

    fn reclaim_idempotency(
        &self,
        namespace: &str,
        key: &str,
        from: RunId,
        to: RunId,
        at: Timestamp,
    ) -> BoxFuture<'_, Result<bool, StoreError>> {
        let (namespace, key) = (namespace.to_owned(), key.to_owned());
        Box::pin(async move {
            let done = sqlx::query(
                "UPDATE stepwright_idempotency_keys SET run_id = $4, created_at = $5 \
                 WHERE namespace = $1 AND key = $2 AND run_id = $3",
            )
            .bind(&namespace)
            .bind(&key)
            .bind(uuid(from))
            .bind(uuid(to))
            .bind(at.as_micros())
            .execute(self.pool())
            .await
            .map_err(pg("reclaiming an idempotency key"))?;
            Ok(done.rows_affected() == 1)
        })
    }
}

impl AuditLog for PostgresStore {
    fn audit(&self, entry: AuditEntry) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            sqlx::query(
                "INSERT INTO stepwright_audit_log (namespace, at, actor, action, subject, detail) \
                 VALUES ($1, $2, $3, $4, $5, $6)",
            )
            .bind(&entry.namespace)
            .bind(entry.at.as_micros())
            .bind(&entry.actor)
            .bind(&entry.action)
            .bind(&entry.subject)
            .bind(entry.detail.to_string())
            .execute(self.pool())
            .await
            .map_err(pg("writing the audit log"))?;
            Ok(())
        })
    }

    fn audit_entries(&self, namespace: &str, limit: usize) -> BoxFuture<'_, Result<Vec<AuditEntry>, StoreError>> {
        let namespace = namespace.to_owned();
        Box::pin(async move {
            let doing = "reading the audit log";
            let rows: Vec<(String, i64, String, String, String, String)> = sqlx::query_as(
                "SELECT namespace, at, actor, action, subject, detail FROM stepwright_audit_log \
                 WHERE namespace = $1 ORDER BY seq DESC LIMIT $2",
            )
            .bind(&namespace)
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(self.pool())
            .await
            .map_err(pg(doing))?;
            rows.into_iter()
                .map(|(namespace, at, actor, action, subject, detail)| {
                    Ok(AuditEntry {
                        namespace,
                        at: Timestamp::from_micros(at),
                        actor,
                        action,
                        subject,
                        detail: serde_json::from_str(&detail).map_err(|e| backend(doing, e))?,
                    })
                })
                .collect()
        })
    }
}

const WEBHOOK_COLUMNS: &str = "id, namespace, url, events, secret, created_at";

fn webhook_from_row(row: &PgRow, doing: &str) -> Result<Webhook, StoreError> {
    let get = |e: sqlx::Error| backend(doing, e);
    let events: String = row.try_get(3).map_err(get)?;
    Ok(Webhook {
        id: row.try_get(0).map_err(get)?,
        namespace: row.try_get(1).map_err(get)?,
        url: row.try_get(2).map_err(get)?,
        events: serde_json::from_str(&events).map_err(|e| backend(doing, e))?,
        secret: row.try_get(4).map_err(get)?,
        created_at: Timestamp::from_micros(row.try_get(5).map_err(get)?),
    })
}

const DELIVERY_COLUMNS: &str =
    "id, webhook_id, namespace, event_key, event, body, state, attempts, next_attempt_at, created_at";

fn delivery_from_row(row: &PgRow, doing: &'static str) -> Result<Delivery, StoreError> {
    let get = |e: sqlx::Error| backend(doing, e);
    crate::sqlite::control::delivery_from(
        doing,
        (
            row.try_get(0).map_err(get)?,
            row.try_get(1).map_err(get)?,
            row.try_get(2).map_err(get)?,
            row.try_get(3).map_err(get)?,
            row.try_get(4).map_err(get)?,
            row.try_get(5).map_err(get)?,
            row.try_get(6).map_err(get)?,
            row.try_get(7).map_err(get)?,
            row.try_get(8).map_err(get)?,
            row.try_get(9).map_err(get)?,
        ),
    )
}

impl WebhookStore for PostgresStore {
    fn create_webhook(&self, webhook: Webhook) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "INSERT INTO stepwright_webhooks ({WEBHOOK_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6)"
            )))
            .bind(&webhook.id)
            .bind(&webhook.namespace)
            .bind(&webhook.url)
            .bind(serde_json::to_string(&webhook.events).unwrap_or_default())
            .bind(&webhook.secret)
            .bind(webhook.created_at.as_micros())
            .execute(self.pool())
            .await
            .map_err(pg("creating a webhook"))?;
            Ok(())
        })
    }

    fn webhooks(&self, namespace: Option<&str>) -> BoxFuture<'_, Result<Vec<Webhook>, StoreError>> {
        let namespace = namespace.map(str::to_owned);
        Box::pin(async move {
            let doing = "listing webhooks";
            let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
                "SELECT {WEBHOOK_COLUMNS} FROM stepwright_webhooks WHERE deleted_at IS NULL \
                 AND ($1::text IS NULL OR namespace = $1) ORDER BY created_at, id"
            )))
            .bind(&namespace)
            .fetch_all(self.pool())
            .await
            .map_err(pg(doing))?;
            rows.iter().map(|row| webhook_from_row(row, doing)).collect()
        })
    }

    fn delete_webhook(&self, namespace: &str, id: &str, at: Timestamp) -> BoxFuture<'_, Result<bool, StoreError>> {
        let (namespace, id) = (namespace.to_owned(), id.to_owned());
        Box::pin(async move {
            let done = sqlx::query(
                "UPDATE stepwright_webhooks SET deleted_at = $3 WHERE namespace = $1 AND id = $2 AND deleted_at IS NULL",
            )
            .bind(&namespace)
            .bind(&id)
            .bind(at.as_micros())
            .execute(self.pool())
            .await
            .map_err(pg("deleting a webhook"))?;
            Ok(done.rows_affected() == 1)
        })
    }

    fn enqueue_delivery(&self, delivery: NewDelivery) -> BoxFuture<'_, Result<bool, StoreError>> {
        Box::pin(async move {
            let done = sqlx::query(
                "INSERT INTO stepwright_webhook_deliveries (webhook_id, namespace, event_key, event, body, state, \
                 attempts, next_attempt_at, created_at) VALUES ($1, $2, $3, $4, $5, 'pending', '[]', $6, $6) \
                 ON CONFLICT (webhook_id, event_key) DO NOTHING",
            )
            .bind(&delivery.webhook_id)
            .bind(&delivery.namespace)
            .bind(&delivery.event_key)
            .bind(&delivery.event)
            .bind(&delivery.body)
            .bind(delivery.at.as_micros())
            .execute(self.pool())
            .await
            .map_err(pg("adding a delivery"))?;
            Ok(done.rows_affected() == 1)
        })
    }

    fn claim_deliveries(
        &self,
        now: Timestamp,
        lease_for: std::time::Duration,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<Delivery>, StoreError>> {
        Box::pin(async move {
            let doing = "claiming deliveries";
            let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
                "UPDATE stepwright_webhook_deliveries SET lease_until = $2 WHERE id IN ( \
                   SELECT d.id FROM stepwright_webhook_deliveries d JOIN stepwright_webhooks w ON w.id = d.webhook_id \
                   WHERE d.state = 'pending' AND d.next_attempt_at <= $1 AND w.deleted_at IS NULL \
                   AND (d.lease_until IS NULL OR d.lease_until < $1) ORDER BY d.next_attempt_at, d.id LIMIT $3 \
                   FOR UPDATE OF d SKIP LOCKED) \
                 RETURNING {DELIVERY_COLUMNS}"
            )))
            .bind(now.as_micros())
            .bind(now.plus(lease_for).as_micros())
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(self.pool())
            .await
            .map_err(pg(doing))?;
            rows.iter().map(|row| delivery_from_row(row, doing)).collect()
        })
    }

    fn record_attempt(
        &self,
        id: i64,
        attempt: Attempt,
        state: DeliveryState,
        next: Timestamp,
    ) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            let doing = "recording a delivery attempt";
            let mut tx = self.pool().begin().await.map_err(pg(doing))?;
            let attempts: String =
                sqlx::query_scalar("SELECT attempts FROM stepwright_webhook_deliveries WHERE id = $1 FOR UPDATE")
                    .bind(id)
                    .fetch_one(&mut *tx)
                    .await
                    .map_err(pg(doing))?;
            let mut attempts: Vec<Attempt> = serde_json::from_str(&attempts).map_err(|e| backend(doing, e))?;
            attempts.push(attempt);
            sqlx::query(
                "UPDATE stepwright_webhook_deliveries SET attempts = $2, state = $3, next_attempt_at = $4, \
                 lease_until = NULL WHERE id = $1",
            )
            .bind(id)
            .bind(serde_json::to_string(&attempts).unwrap_or_default())
            .bind(state.column())
            .bind(next.as_micros())
            .execute(&mut *tx)
            .await
            .map_err(pg(doing))?;
            tx.commit().await.map_err(pg(doing))?;
            Ok(())
        })
    }

    fn deliveries(
        &self,
        namespace: &str,
        webhook_id: &str,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<Delivery>, StoreError>> {
        let (namespace, webhook_id) = (namespace.to_owned(), webhook_id.to_owned());
        Box::pin(async move {
            let doing = "listing deliveries";
            let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
                "SELECT {DELIVERY_COLUMNS} FROM stepwright_webhook_deliveries WHERE namespace = $1 AND webhook_id = $2 \
                 ORDER BY id DESC LIMIT $3"
            )))
            .bind(&namespace)
            .bind(&webhook_id)
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(self.pool())
            .await
            .map_err(pg(doing))?;
            rows.iter().map(|row| delivery_from_row(row, doing)).collect()
        })
    }

    fn webhook_watermark(&self, namespace: &str) -> BoxFuture<'_, Result<Option<Timestamp>, StoreError>> {
        let namespace = namespace.to_owned();
        Box::pin(async move {
            let at: Option<i64> =
                sqlx::query_scalar("SELECT updated_since FROM stepwright_webhook_watermarks WHERE namespace = $1")
                    .bind(&namespace)
                    .fetch_optional(self.pool())
                    .await
                    .map_err(pg("reading a webhook watermark"))?;
            Ok(at.map(Timestamp::from_micros))
        })
    }

    fn set_webhook_watermark(&self, namespace: &str, at: Timestamp) -> BoxFuture<'_, Result<(), StoreError>> {
        let namespace = namespace.to_owned();
        Box::pin(async move {
            sqlx::query(
                "INSERT INTO stepwright_webhook_watermarks (namespace, updated_since) VALUES ($1, $2) \
                 ON CONFLICT (namespace) DO UPDATE SET updated_since = \
                 GREATEST(stepwright_webhook_watermarks.updated_since, excluded.updated_since)",
            )
            .bind(&namespace)
            .bind(at.as_micros())
            .execute(self.pool())
            .await
            .map_err(pg("moving a webhook watermark"))?;
            Ok(())
        })
    }
}
