//! The control tables in SQLite: `registered_workflows`, `api_keys`, `idempotency_keys`,
//! `audit_log`, and `webhooks` with `webhook_deliveries` (the outbox) and
//! `webhook_watermarks`. Writes go through the writer thread like every other write, so two
//! registrations or two claims never interleave.

use futures_util::future::BoxFuture;
use rusqlite::{OptionalExtension, Row, params};
use stepwright_core::{RunId, StoreError, Timestamp};

use super::{SqliteStore, hash_from};
use crate::control::{
    ApiKey, Attempt, AuditEntry, AuditLog, Delivery, DeliveryState, IdempotencyClaim, IdempotencyStore, KeyStore,
    NewDelivery, NewWorkflow, RegisteredWorkflow, Webhook, WebhookStore, WorkflowRegistry,
};
use crate::encoding::{backend, files_from_column};

const WORKFLOW_COLUMNS: &str = "namespace, name, version, hash, source, files, registered_at, registered_by";

fn workflow_from_row(row: &Row<'_>) -> rusqlite::Result<(RegisteredWorkflow, Option<String>)> {
    Ok((
        RegisteredWorkflow {
            namespace: row.get(0)?,
            name: row.get(1)?,
            version: row.get(2)?,
            hash: hash_from(&row.get::<_, Vec<u8>>(3)?)?,
            source: row.get(4)?,
            files: Default::default(),
            registered_at: Timestamp::from_micros(row.get(6)?),
            registered_by: row.get(7)?,
        },
        row.get(5)?,
    ))
}

fn with_files(
    doing: &'static str,
) -> impl Fn((RegisteredWorkflow, Option<String>)) -> Result<RegisteredWorkflow, StoreError> {
    move |(mut workflow, files)| {
        workflow.files = files_from_column(files.as_deref()).map_err(|e| backend(doing, e))?;
        Ok(workflow)
    }
}

const KEY_COLUMNS: &str = "id, namespace, user_id, roles, created_at, expires_at, revoked_at, last_used_at";

fn key_from_row(row: &Row<'_>) -> rusqlite::Result<(ApiKey, String)> {
    Ok((
        ApiKey {
            id: row.get(0)?,
            namespace: row.get(1)?,
            user: row.get(2)?,
            roles: Vec::new(),
            created_at: Timestamp::from_micros(row.get(4)?),
            expires_at: row.get::<_, Option<i64>>(5)?.map(Timestamp::from_micros),
            revoked_at: row.get::<_, Option<i64>>(6)?.map(Timestamp::from_micros),
            last_used_at: row.get::<_, Option<i64>>(7)?.map(Timestamp::from_micros),
        },
        row.get(3)?,
    ))
}

fn with_roles(doing: &'static str) -> impl Fn((ApiKey, String)) -> Result<ApiKey, StoreError> {
    move |(mut key, roles)| {
        key.roles = serde_json::from_str(&roles).map_err(|e| backend(doing, e))?;
        Ok(key)
    }
}

impl WorkflowRegistry for SqliteStore {
    fn register_workflow(&self, workflow: NewWorkflow) -> BoxFuture<'_, Result<RegisteredWorkflow, StoreError>> {
        Box::pin(self.write(move |conn| {
            let doing = "registering a workflow";
            let sql = |e| backend(doing, e);
            let same: Option<(RegisteredWorkflow, Option<String>)> = conn
                .prepare_cached(&format!(
                    "SELECT {WORKFLOW_COLUMNS} FROM registered_workflows \
                     WHERE namespace = ?1 AND name = ?2 AND hash = ?3 ORDER BY version DESC LIMIT 1"
                ))
                .and_then(|mut s| {
                    s.query_row(params![workflow.namespace, workflow.name, workflow.hash.as_bytes()], workflow_from_row)
                        .optional()
                })
                .map_err(sql)?;
            if let Some(same) = same {
                return with_files(doing)(same);
            }
            let version: u32 = conn
                .prepare_cached(
                    "SELECT COALESCE(MAX(version), 0) + 1 FROM registered_workflows WHERE namespace = ?1 AND name = ?2",
                )
                .and_then(|mut s| s.query_row(params![workflow.namespace, workflow.name], |r| r.get(0)))
                .map_err(sql)?;
            let files =
                (!workflow.files.is_empty()).then(|| serde_json::to_string(&workflow.files).unwrap_or_default());
            conn.prepare_cached(&format!(
                "INSERT INTO registered_workflows ({WORKFLOW_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"
            ))
            .and_then(|mut s| {
                s.execute(params![
                    workflow.namespace,
                    workflow.name,
                    version,
                    workflow.hash.as_bytes(),
                    workflow.source,
                    files,
                    workflow.at.as_micros(),
                    workflow.by,
                ])
            })
            .map_err(sql)?;
            let NewWorkflow { namespace, name, hash, source, files, at, by } = workflow.clone();
            Ok(RegisteredWorkflow {
                namespace,
                name,
                version,
                hash,
                source,
                files,
                registered_at: at,
                registered_by: by,
            })
        }))
    }

    fn registered_workflows(&self, namespace: &str) -> BoxFuture<'_, Result<Vec<RegisteredWorkflow>, StoreError>> {
        let namespace = namespace.to_owned();
        Box::pin(self.read("listing workflows", move |conn| {
            let doing = "listing workflows";
            let rows = conn
                .prepare_cached(&format!(
                    "SELECT {WORKFLOW_COLUMNS} FROM registered_workflows WHERE namespace = ?1 \
                     ORDER BY name, version DESC"
                ))
                .and_then(|mut s| s.query_map([&namespace], workflow_from_row)?.collect::<rusqlite::Result<Vec<_>>>())
                .map_err(|e| backend(doing, e))?;
            rows.into_iter().map(with_files(doing)).collect()
        }))
    }

    fn registered_workflow(
        &self,
        namespace: &str,
        name: &str,
        version: Option<u32>,
    ) -> BoxFuture<'_, Result<Option<RegisteredWorkflow>, StoreError>> {
        let (namespace, name) = (namespace.to_owned(), name.to_owned());
        Box::pin(self.read("reading a workflow", move |conn| {
            let doing = "reading a workflow";
            let row = conn
                .prepare_cached(&format!(
                    "SELECT {WORKFLOW_COLUMNS} FROM registered_workflows \
                     WHERE namespace = ?1 AND name = ?2 AND (?3 IS NULL OR version = ?3) ORDER BY version DESC LIMIT 1"
                ))
                .and_then(|mut s| s.query_row(params![namespace, name, version], workflow_from_row).optional())
                .map_err(|e| backend(doing, e))?;
            row.map(with_files(doing)).transpose()
        }))
    }
}

impl KeyStore for SqliteStore {
    fn create_key(&self, key: ApiKey, secret_hash: [u8; 32]) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(self.write(move |conn| {
            let roles = serde_json::to_string(&key.roles).unwrap_or_default();
            conn.prepare_cached(&format!(
                "INSERT INTO api_keys ({KEY_COLUMNS}, secret_hash) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"
            ))
            .and_then(|mut s| {
                s.execute(params![
                    key.id,
                    key.namespace,
                    key.user,
                    roles,
                    key.created_at.as_micros(),
                    key.expires_at.map(Timestamp::as_micros),
                    key.revoked_at.map(Timestamp::as_micros),
                    key.last_used_at.map(Timestamp::as_micros),
                    &secret_hash[..],
                ])
            })
            .map(|_| ())
            .map_err(|e| backend("creating a key", e))
        }))
    }

    fn key_by_secret(&self, secret_hash: [u8; 32]) -> BoxFuture<'_, Result<Option<ApiKey>, StoreError>> {
        Box::pin(self.read("reading a key", move |conn| {
            let doing = "reading a key";
            let row = conn
                .prepare_cached(&format!("SELECT {KEY_COLUMNS} FROM api_keys WHERE secret_hash = ?1"))
                .and_then(|mut s| s.query_row([&secret_hash[..]], key_from_row).optional())
                .map_err(|e| backend(doing, e))?;
            row.map(with_roles(doing)).transpose()
        }))
    }

    fn keys(&self, namespace: Option<&str>) -> BoxFuture<'_, Result<Vec<ApiKey>, StoreError>> {
        let namespace = namespace.map(str::to_owned);
        Box::pin(self.read("listing keys", move |conn| {
            let doing = "listing keys";
            let rows = conn
                .prepare_cached(&format!(
                    "SELECT {KEY_COLUMNS} FROM api_keys WHERE ?1 IS NULL OR namespace = ?1 ORDER BY created_at, id"
                ))
                .and_then(|mut s| s.query_map([&namespace], key_from_row)?.collect::<rusqlite::Result<Vec<_>>>())
                .map_err(|e| backend(doing, e))?;
            rows.into_iter().map(with_roles(doing)).collect()
        }))
    }

    fn revoke_key(&self, id: &str, at: Timestamp) -> BoxFuture<'_, Result<bool, StoreError>> {
        let id = id.to_owned();
        Box::pin(self.write(move |conn| {
            conn.prepare_cached(
                "UPDATE api_keys SET revoked_at = ?2 \
                 WHERE (id = ?1 OR substr(id, 1, length(?1) + 1) = ?1 || '.') AND revoked_at IS NULL",
            )
            .and_then(|mut s| s.execute(params![id, at.as_micros()]))
            .map(|changed| changed >= 1)
            .map_err(|e| backend("revoking a key", e))
        }))
    }

    fn touch_key(&self, id: &str, at: Timestamp) -> BoxFuture<'_, Result<(), StoreError>> {
        let id = id.to_owned();
        Box::pin(self.write(move |conn| {
            conn.prepare_cached("UPDATE api_keys SET last_used_at = ?2 WHERE id = ?1")
                .and_then(|mut s| s.execute(params![id, at.as_micros()]))
                .map(|_| ())
                .map_err(|e| backend("recording a key's use", e))
        }))
    }
}

impl IdempotencyStore for SqliteStore {
    fn claim_idempotency(
        &self,
        namespace: &str,
        key: &str,
        run: RunId,
        at: Timestamp,
    ) -> BoxFuture<'_, Result<IdempotencyClaim, StoreError>> {
        let (namespace, key) = (namespace.to_owned(), key.to_owned());
        Box::pin(self.write(move |conn| {
            let doing = "claiming an idempotency key";
            let sql = |e| backend(doing, e);
            let inserted = conn
                .prepare_cached(
                    "INSERT OR IGNORE INTO idempotency_keys (namespace, key, run_id, created_at) VALUES (?1, ?2, ?3, ?4)",
                )
                .and_then(|mut s| s.execute(params![namespace, key, run.as_uuid().as_bytes(), at.as_micros()]))
                .map_err(sql)?;
            if inserted == 1 {
                return Ok(IdempotencyClaim::Claimed);
            }
            let (id, at): (Vec<u8>, i64) = conn
                .prepare_cached("SELECT run_id, created_at FROM idempotency_keys WHERE namespace = ?1 AND key = ?2")
                .and_then(|mut s| s.query_row(params![namespace, key], |r| Ok((r.get(0)?, r.get(1)?))))
                .map_err(sql)?;
            let id: [u8; 16] = id.try_into().map_err(|_| backend(doing, std::io::Error::other("a run id is not 16 bytes")))?;
            Ok(IdempotencyClaim::Taken { run: RunId::from_bytes(id), at: Timestamp::from_micros(at) })
        }))
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
        Box::pin(self.write(move |conn| {
            conn.prepare_cached(
                "UPDATE idempotency_keys SET run_id = ?4, created_at = ?5 WHERE namespace = ?1 AND key = ?2 AND run_id = ?3",
            )
            .and_then(|mut s| {
                s.execute(params![namespace, key, from.as_uuid().as_bytes(), to.as_uuid().as_bytes(), at.as_micros()])
            })
            .map(|changed| changed == 1)
            .map_err(|e| backend("reclaiming an idempotency key", e))
        }))
    }
}

impl AuditLog for SqliteStore {
    fn audit(&self, entry: AuditEntry) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(self.write(move |conn| {
            conn.prepare_cached(
                "INSERT INTO audit_log (namespace, at, actor, action, subject, detail) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )
            .and_then(|mut s| {
                s.execute(params![
                    entry.namespace,
                    entry.at.as_micros(),
                    entry.actor,
                    entry.action,
                    entry.subject,
                    entry.detail.to_string(),
                ])
            })
            .map(|_| ())
            .map_err(|e| backend("writing the audit log", e))
        }))
    }

    fn audit_entries(&self, namespace: &str, limit: usize) -> BoxFuture<'_, Result<Vec<AuditEntry>, StoreError>> {
        let namespace = namespace.to_owned();
        Box::pin(self.read("reading the audit log", move |conn| {
            let doing = "reading the audit log";
            let rows = conn
                .prepare_cached(
                    "SELECT namespace, at, actor, action, subject, detail FROM audit_log WHERE namespace = ?1 \
                     ORDER BY seq DESC LIMIT ?2",
                )
                .and_then(|mut s| {
                    s.query_map(params![namespace, i64::try_from(limit).unwrap_or(i64::MAX)], |r| {
                        Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get::<_, String>(5)?))
                    })?
                    .collect::<rusqlite::Result<Vec<_>>>()
                })
                .map_err(|e| backend(doing, e))?;
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
        }))
    }
}

const WEBHOOK_COLUMNS: &str = "id, namespace, url, events, secret, created_at";

fn webhook_from_row(row: &Row<'_>) -> rusqlite::Result<(Webhook, String)> {
    Ok((
        Webhook {
            id: row.get(0)?,
            namespace: row.get(1)?,
            url: row.get(2)?,
            events: Vec::new(),
            secret: row.get(4)?,
            created_at: Timestamp::from_micros(row.get(5)?),
        },
        row.get(3)?,
    ))
}

const DELIVERY_COLUMNS: &str =
    "id, webhook_id, namespace, event_key, event, body, state, attempts, next_attempt_at, created_at";

type DeliveryRow = (i64, String, String, String, String, String, String, String, i64, i64);

fn delivery_row(row: &Row<'_>) -> rusqlite::Result<DeliveryRow> {
    Ok((
        row.get(0)?,
        row.get(1)?,
        row.get(2)?,
        row.get(3)?,
        row.get(4)?,
        row.get(5)?,
        row.get(6)?,
        row.get(7)?,
        row.get(8)?,
        row.get(9)?,
    ))
}

pub(crate) fn delivery_from(doing: &'static str, row: DeliveryRow) -> Result<Delivery, StoreError> {
    let (id, webhook_id, namespace, event_key, event, body, state, attempts, next, created) = row;
    Ok(Delivery {
        id,
        webhook_id,
        namespace,
        event_key,
        event,
        body,
        state: DeliveryState::parse(&state)
            .ok_or_else(|| backend(doing, std::io::Error::other(format!("unknown delivery state {state:?}"))))?,
        attempts: serde_json::from_str(&attempts).map_err(|e| backend(doing, e))?,
        next_attempt_at: Timestamp::from_micros(next),
        created_at: Timestamp::from_micros(created),
    })
}

impl WebhookStore for SqliteStore {
    fn create_webhook(&self, webhook: Webhook) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(self.write(move |conn| {
            conn.prepare_cached(&format!("INSERT INTO webhooks ({WEBHOOK_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6)"))
                .and_then(|mut s| {
                    s.execute(params![
                        webhook.id,
                        webhook.namespace,
                        webhook.url,
                        serde_json::to_string(&webhook.events).unwrap_or_default(),
                        webhook.secret,
                        webhook.created_at.as_micros(),
                    ])
                })
                .map(|_| ())
                .map_err(|e| backend("creating a webhook", e))
        }))
    }

    fn webhooks(&self, namespace: Option<&str>) -> BoxFuture<'_, Result<Vec<Webhook>, StoreError>> {
        let namespace = namespace.map(str::to_owned);
        Box::pin(self.read("listing webhooks", move |conn| {
            let doing = "listing webhooks";
            let rows = conn
                .prepare_cached(&format!(
                    "SELECT {WEBHOOK_COLUMNS} FROM webhooks WHERE deleted_at IS NULL AND (?1 IS NULL OR namespace = ?1) \
                     ORDER BY created_at, id"
                ))
                .and_then(|mut s| s.query_map([&namespace], webhook_from_row)?.collect::<rusqlite::Result<Vec<_>>>())
                .map_err(|e| backend(doing, e))?;
            rows.into_iter()
                .map(|(mut webhook, events)| {
                    webhook.events = serde_json::from_str(&events).map_err(|e| backend(doing, e))?;
                    Ok(webhook)
                })
                .collect()
        }))
    }

    fn delete_webhook(&self, namespace: &str, id: &str, at: Timestamp) -> BoxFuture<'_, Result<bool, StoreError>> {
        let (namespace, id) = (namespace.to_owned(), id.to_owned());
        Box::pin(self.write(move |conn| {
            conn.prepare_cached(
                "UPDATE webhooks SET deleted_at = ?3 WHERE namespace = ?1 AND id = ?2 AND deleted_at IS NULL",
            )
            .and_then(|mut s| s.execute(params![namespace, id, at.as_micros()]))
            .map(|changed| changed == 1)
            .map_err(|e| backend("deleting a webhook", e))
        }))
    }

    fn enqueue_delivery(&self, delivery: NewDelivery) -> BoxFuture<'_, Result<bool, StoreError>> {
        Box::pin(self.write(move |conn| {
            conn.prepare_cached(
                "INSERT OR IGNORE INTO webhook_deliveries (webhook_id, namespace, event_key, event, body, state, \
                 attempts, next_attempt_at, created_at) VALUES (?1, ?2, ?3, ?4, ?5, 'pending', '[]', ?6, ?6)",
            )
            .and_then(|mut s| {
                s.execute(params![
                    delivery.webhook_id,
                    delivery.namespace,
                    delivery.event_key,
                    delivery.event,
                    delivery.body,
                    delivery.at.as_micros(),
                ])
            })
            .map(|added| added == 1)
            .map_err(|e| backend("adding a delivery", e))
        }))
    }

    fn claim_deliveries(
        &self,
        now: Timestamp,
        lease_for: std::time::Duration,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<Delivery>, StoreError>> {
        Box::pin(self.write(move |conn| {
            let doing = "claiming deliveries";
            let rows = conn
                .prepare_cached(&format!(
                    "UPDATE webhook_deliveries SET lease_until = ?2 WHERE id IN ( \
                       SELECT d.id FROM webhook_deliveries d JOIN webhooks w ON w.id = d.webhook_id \
                       WHERE d.state = 'pending' AND d.next_attempt_at <= ?1 AND w.deleted_at IS NULL \
                       AND (d.lease_until IS NULL OR d.lease_until < ?1) ORDER BY d.next_attempt_at, d.id LIMIT ?3) \
                     RETURNING {DELIVERY_COLUMNS}"
                ))
                .and_then(|mut s| {
                    s.query_map(
                        params![
                            now.as_micros(),
                            now.plus(lease_for).as_micros(),
                            i64::try_from(limit).unwrap_or(i64::MAX)
                        ],
                        delivery_row,
                    )?
                    .collect::<rusqlite::Result<Vec<_>>>()
                })
                .map_err(|e| backend(doing, e))?;
            rows.into_iter().map(|row| delivery_from(doing, row)).collect()
        }))
    }

    fn record_attempt(
        &self,
        id: i64,
        attempt: Attempt,
        state: DeliveryState,
        next: Timestamp,
    ) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(self.write(move |conn| {
            let doing = "recording a delivery attempt";
            let attempts: String = conn
                .prepare_cached("SELECT attempts FROM webhook_deliveries WHERE id = ?1")
                .and_then(|mut s| s.query_row([id], |r| r.get(0)))
                .map_err(|e| backend(doing, e))?;
            let mut attempts: Vec<Attempt> = serde_json::from_str(&attempts).map_err(|e| backend(doing, e))?;
            attempts.push(attempt.clone());
            conn.prepare_cached(
                "UPDATE webhook_deliveries SET attempts = ?2, state = ?3, next_attempt_at = ?4, lease_until = NULL \
                 WHERE id = ?1",
            )
            .and_then(|mut s| {
                s.execute(params![
                    id,
                    serde_json::to_string(&attempts).unwrap_or_default(),
                    state.column(),
                    next.as_micros()
                ])
            })
            .map(|_| ())
            .map_err(|e| backend(doing, e))
        }))
    }

    fn deliveries(
        &self,
        namespace: &str,
        webhook_id: &str,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<Delivery>, StoreError>> {
        let (namespace, webhook_id) = (namespace.to_owned(), webhook_id.to_owned());
        Box::pin(self.read("listing deliveries", move |conn| {
            let doing = "listing deliveries";
            let rows = conn
                .prepare_cached(&format!(
                    "SELECT {DELIVERY_COLUMNS} FROM webhook_deliveries WHERE namespace = ?1 AND webhook_id = ?2 \
                     ORDER BY id DESC LIMIT ?3"
                ))
                .and_then(|mut s| {
                    s.query_map(params![namespace, webhook_id, i64::try_from(limit).unwrap_or(i64::MAX)], delivery_row)?
                        .collect::<rusqlite::Result<Vec<_>>>()
                })
                .map_err(|e| backend(doing, e))?;
            rows.into_iter().map(|row| delivery_from(doing, row)).collect()
        }))
    }

    fn webhook_watermark(&self, namespace: &str) -> BoxFuture<'_, Result<Option<Timestamp>, StoreError>> {
        let namespace = namespace.to_owned();
        Box::pin(self.read("reading a webhook watermark", move |conn| {
            conn.prepare_cached("SELECT updated_since FROM webhook_watermarks WHERE namespace = ?1")
                .and_then(|mut s| s.query_row([&namespace], |r| r.get::<_, i64>(0)).optional())
                .map(|at| at.map(Timestamp::from_micros))
                .map_err(|e| backend("reading a webhook watermark", e))
        }))
    }

    fn set_webhook_watermark(&self, namespace: &str, at: Timestamp) -> BoxFuture<'_, Result<(), StoreError>> {
        let namespace = namespace.to_owned();
        Box::pin(self.write(move |conn| {
            conn.prepare_cached(
                "INSERT INTO webhook_watermarks (namespace, updated_since) VALUES (?1, ?2) \
                 ON CONFLICT (namespace) DO UPDATE SET updated_since = MAX(updated_since, excluded.updated_since)",
            )
            .and_then(|mut s| s.execute(params![namespace, at.as_micros()]))
            .map(|_| ())
            .map_err(|e| backend("moving a webhook watermark", e))
        }))
    }
}
