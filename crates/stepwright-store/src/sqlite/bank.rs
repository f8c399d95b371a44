//! The memory bank in SQLite: `memory_items`, searched through the FTS5 table `memory_fts`.

use futures_util::future::BoxFuture;
use rusqlite::{OptionalExtension, Row, params};
use stepwright_core::bank::{MemoryAddress, MemoryBank, MemoryHit, MemoryItem, MemoryScope, MemorySearch};
use stepwright_core::store::backend::{check_address, check_memory_name, query_terms, sort_hits};
use stepwright_core::{StoreError, Timestamp};

use super::SqliteStore;
use crate::encoding::backend;

const ITEM_COLUMNS: &str = "m.tenant, m.scope, m.owner, m.namespace, m.key, m.value, m.text, m.updated_at";

fn item_from_row(row: &Row<'_>) -> rusqlite::Result<(MemoryItemRow, f64)> {
    Ok((
        MemoryItemRow {
            tenant: row.get(0)?,
            scope: row.get(1)?,
            owner: row.get(2)?,
            namespace: row.get(3)?,
            key: row.get(4)?,
            value: row.get(5)?,
            text: row.get(6)?,
            updated_at: row.get(7)?,
        },
        row.get::<_, Option<f64>>(8).ok().flatten().unwrap_or(0.0),
    ))
}

/// A row before its value is parsed.
struct MemoryItemRow {
    tenant: String,
    scope: String,
    owner: String,
    namespace: String,
    key: String,
    value: String,
    text: String,
    updated_at: i64,
}

impl MemoryItemRow {
    fn into_item(self) -> Result<MemoryItem, StoreError> {
        Ok(MemoryItem {
            address: MemoryAddress {
                tenant: self.tenant,
                scope: MemoryScope::from_stored(&self.scope, &self.owner)?,
                namespace: self.namespace,
                key: self.key,
            },
            value: serde_json::from_str(&self.value).map_err(|e| backend("reading a memory item", e))?,
            text: self.text,
            updated_at: Timestamp::from_micros(self.updated_at),
        })
    }
}

impl MemoryBank for SqliteStore {
    fn memory_put(&self, item: MemoryItem) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            check_address(&item.address)?;
            let value = serde_json::to_string(&item.value).map_err(|e| backend("storing a memory item", e))?;
            let words = query_terms(&item.text).join(" ");
            self.write(move |conn| {
                let a = &item.address;
                conn.prepare_cached(
                    "INSERT INTO memory_items (tenant, scope, owner, namespace, key, value, text, words, updated_at) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) \
                     ON CONFLICT (tenant, scope, owner, namespace, key) DO UPDATE SET \
                     value = excluded.value, text = excluded.text, words = excluded.words, updated_at = excluded.updated_at",
                )
                .and_then(|mut s| {
                    s.execute(params![
                        a.tenant,
                        a.scope.kind(),
                        a.scope.owner(),
                        a.namespace,
                        a.key,
                        value,
                        item.text,
                        words,
                        item.updated_at.as_micros()
                    ])
                })
                .map(drop)
                .map_err(|e| backend("storing a memory item", e))
            })
            .await
        })
    }

    fn memory_get(&self, address: MemoryAddress) -> BoxFuture<'_, Result<Option<MemoryItem>, StoreError>> {
        Box::pin(async move {
            let doing = "reading a memory item";
            let row = self
                .read(doing, move |conn| {
                    conn.prepare_cached(&format!(
                        "SELECT {ITEM_COLUMNS}, 0.0 FROM memory_items m \
                         WHERE m.tenant = ?1 AND m.scope = ?2 AND m.owner = ?3 AND m.namespace = ?4 AND m.key = ?5"
                    ))
                    .and_then(|mut s| {
                        s.query_row(
                            params![
                                address.tenant,
                                address.scope.kind(),
                                address.scope.owner(),
                                address.namespace,
                                address.key
                            ],
                            item_from_row,
                        )
                        .optional()
                    })
                    .map_err(|e| backend(doing, e))
                })
                .await?;
            row.map(|(row, _)| row.into_item()).transpose()
        })
    }

    fn memory_search(&self, search: MemorySearch) -> BoxFuture<'_, Result<Vec<MemoryHit>, StoreError>> {
        Box::pin(async move {
            check_memory_name("namespace", &search.namespace)?;
            let doing = "searching memory";
            let limit = i64::try_from(search.limit).unwrap_or(i64::MAX);
            let scope = (search.scope.kind(), search.scope.owner());
            let rows = match &search.query {
                None => {
                    self.read(doing, move |conn| {
                        conn.prepare_cached(&format!(
                            "SELECT {ITEM_COLUMNS}, 0.0 FROM memory_items m \
                             WHERE m.tenant = ?1 AND m.scope = ?2 AND m.owner = ?3 AND m.namespace = ?4 \
                             ORDER BY m.updated_at DESC, m.key LIMIT ?5"
                        ))
                        .and_then(|mut s| {
                            s.query_map(
                                params![search.tenant, scope.0, scope.1, search.namespace, limit],
                                item_from_row,
                            )?
                            .collect::<rusqlite::Result<Vec<_>>>()
                        })
                        .map_err(|e| backend(doing, e))
                    })
                    .await?
                }
                Some(query) => {
                    let terms = query_terms(query);
                    if terms.is_empty() {
                        return Ok(Vec::new());
                    }
                    // Each word quoted (they hold only letters and digits, so there is
                    // nothing to escape), any of them may match; bm25 is lower for better
                    // matches, so its negation is the score.
                    let matching = terms.iter().map(|t| format!("\"{t}\"")).collect::<Vec<_>>().join(" OR ");
                    self.read(doing, move |conn| {
                        conn.prepare_cached(&format!(
                            "SELECT {ITEM_COLUMNS}, -bm25(memory_fts) AS score \
                             FROM memory_fts JOIN memory_items m ON m.rowid = memory_fts.rowid \
                             WHERE memory_fts MATCH ?1 \
                             AND m.tenant = ?2 AND m.scope = ?3 AND m.owner = ?4 AND m.namespace = ?5 \
                             ORDER BY score DESC, m.updated_at DESC, m.key LIMIT ?6"
                        ))
                        .and_then(|mut s| {
                            s.query_map(
                                params![matching, search.tenant, scope.0, scope.1, search.namespace, limit],
                                item_from_row,
                            )?
                            .collect::<rusqlite::Result<Vec<_>>>()
                        })
                        .map_err(|e| backend(doing, e))
                    })
                    .await?
                }
            };
            let mut hits = rows
                .into_iter()
                .map(|(row, score)| Ok(MemoryHit { item: row.into_item()?, score }))
                .collect::<Result<Vec<_>, StoreError>>()?;
            sort_hits(&mut hits);
            Ok(hits)
        })
    }

    fn memory_delete(&self, address: MemoryAddress) -> BoxFuture<'_, Result<bool, StoreError>> {
        Box::pin(async move {
            self.write(move |conn| {
                conn.prepare_cached(
                    "DELETE FROM memory_items WHERE tenant = ?1 AND scope = ?2 AND owner = ?3 AND namespace = ?4 AND key = ?5",
                )
                .and_then(|mut s| {
                    s.execute(params![
                        address.tenant,
                        address.scope.kind(),
                        address.scope.owner(),
                        address.namespace,
                        address.key
                    ])
                })
                .map(|deleted| deleted > 0)
                .map_err(|e| backend("deleting a memory item", e))
            })
            .await
        })
    }
}
