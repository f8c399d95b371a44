//! The control tables in SQLite: `registered_workflows`, `api_keys`, `idempotency_keys` and
//! `audit_log`. Writes go through the writer thread like every other write, so two
//! registrations or two claims never interleave.

use futures_util::future::BoxFuture;
use rusqlite::{OptionalExtension, Row, params};
use stepwright_core::{RunId, StoreError, Timestamp};

use super::{SqliteStore, hash_from};
use crate::control::{
    ApiKey, AuditEntry, AuditLog, IdempotencyClaim, IdempotencyStore, KeyStore, NewWorkflow, RegisteredWorkflow,
    WorkflowRegistry,
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
            conn.prepare_cached("UPDATE api_keys SET revoked_at = ?2 WHERE id = ?1 AND revoked_at IS NULL")
                .and_then(|mut s| s.execute(params![id, at.as_micros()]))
                .map(|changed| changed == 1)
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
