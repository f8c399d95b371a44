//! The memory bank in Postgres: `stepwright_memory_items`, searched through its generated
//! `tsvector` column with a GIN index.

use futures_util::future::BoxFuture;
use sqlx::Row;
use sqlx::postgres::PgRow;
use stepwright_core::bank::{MemoryAddress, MemoryBank, MemoryHit, MemoryItem, MemoryScope, MemorySearch};
use stepwright_core::store::backend::{check_address, check_memory_name, query_terms, sort_hits};
use stepwright_core::{StoreError, Timestamp};

use super::{PostgresStore, pg};
use crate::encoding::backend;

const ITEM_COLUMNS: &str = "tenant, scope, owner, namespace, key, value, text, updated_at";

type PgQuery<'q> = sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>;

/// Binding where items live, in the column order every statement here uses.
trait BindPlace<'q> {
    /// The next four parameters: tenant, scope, owner, namespace.
    fn bind_place(self, tenant: &'q str, scope: &MemoryScope, namespace: &'q str) -> Self;
    /// The next five: an item's address.
    fn bind_address(self, address: &'q MemoryAddress) -> Self;
}

impl<'q> BindPlace<'q> for PgQuery<'q> {
    fn bind_place(self, tenant: &'q str, scope: &MemoryScope, namespace: &'q str) -> Self {
        self.bind(tenant).bind(scope.kind()).bind(scope.owner()).bind(namespace)
    }

    fn bind_address(self, a: &'q MemoryAddress) -> Self {
        self.bind_place(&a.tenant, &a.scope, &a.namespace).bind(&a.key)
    }
}

fn hit_from_row(row: &PgRow) -> Result<MemoryHit, StoreError> {
    let doing = "reading a memory item";
    let get = pg(doing);
    let scope: String = row.try_get(1).map_err(&get)?;
    let owner: String = row.try_get(2).map_err(&get)?;
    let value: String = row.try_get(5).map_err(&get)?;
    Ok(MemoryHit {
        item: MemoryItem {
            address: MemoryAddress {
                tenant: row.try_get(0).map_err(&get)?,
                scope: MemoryScope::from_stored(&scope, &owner)?,
                namespace: row.try_get(3).map_err(&get)?,
                key: row.try_get(4).map_err(&get)?,
            },
            value: serde_json::from_str(&value).map_err(|e| backend(doing, e))?,
            text: row.try_get(6).map_err(&get)?,
            updated_at: Timestamp::from_micros(row.try_get(7).map_err(&get)?),
        },
        score: f64::from(row.try_get::<f32, _>(8).map_err(&get)?),
    })
}

impl MemoryBank for PostgresStore {
    fn memory_put(&self, item: MemoryItem) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            check_address(&item.address)?;
            let doing = "storing a memory item";
            let value = serde_json::to_string(&item.value).map_err(|e| backend(doing, e))?;
            let a = &item.address;
            sqlx::query(
                "INSERT INTO stepwright_memory_items (tenant, scope, owner, namespace, key, value, text, words, updated_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
                 ON CONFLICT (tenant, scope, owner, namespace, key) DO UPDATE SET \
                 value = excluded.value, text = excluded.text, words = excluded.words, updated_at = excluded.updated_at",
            )
            .bind_address(a)
            .bind(&value)
            .bind(&item.text)
            .bind(query_terms(&item.text).join(" "))
            .bind(item.updated_at.as_micros())
            .execute(self.pool())
            .await
            .map_err(pg(doing))?;
            Ok(())
        })
    }

    fn memory_get(&self, address: MemoryAddress) -> BoxFuture<'_, Result<Option<MemoryItem>, StoreError>> {
        Box::pin(async move {
            let row = sqlx::query(sqlx::AssertSqlSafe(format!(
                "SELECT {ITEM_COLUMNS}, 0::real FROM stepwright_memory_items \
                 WHERE tenant = $1 AND scope = $2 AND owner = $3 AND namespace = $4 AND key = $5"
            )))
            .bind_address(&address)
            .fetch_optional(self.pool())
            .await
            .map_err(pg("reading a memory item"))?;
            row.as_ref().map(hit_from_row).transpose().map(|hit| hit.map(|h| h.item))
        })
    }

    fn memory_search(&self, search: MemorySearch) -> BoxFuture<'_, Result<Vec<MemoryHit>, StoreError>> {
        Box::pin(async move {
            check_memory_name("namespace", &search.namespace)?;
            let doing = "searching memory";
            let limit = i64::try_from(search.limit).unwrap_or(i64::MAX);
            let rows = match &search.query {
                None => sqlx::query(sqlx::AssertSqlSafe(format!(
                    "SELECT {ITEM_COLUMNS}, 0::real FROM stepwright_memory_items \
                         WHERE tenant = $1 AND scope = $2 AND owner = $3 AND namespace = $4 \
                         ORDER BY updated_at DESC, key LIMIT $5"
                )))
                .bind_place(&search.tenant, &search.scope, &search.namespace)
                .bind(limit)
                .fetch_all(self.pool())
                .await
                .map_err(pg(doing))?,
                Some(query) => {
                    let terms = query_terms(query);
                    if terms.is_empty() {
                        return Ok(Vec::new());
                    }
                    // Any of the words may match. Each is given to `to_tsquery` as a quoted
                    // lexeme, so no word can be read as an operator.
                    let matching =
                        terms.iter().map(|t| format!("'{}'", t.replace('\'', "''"))).collect::<Vec<_>>().join(" | ");
                    sqlx::query(sqlx::AssertSqlSafe(format!(
                        "SELECT {ITEM_COLUMNS}, ts_rank(search, q) AS score \
                         FROM stepwright_memory_items, to_tsquery('simple', $1) q \
                         WHERE search @@ q AND tenant = $2 AND scope = $3 AND owner = $4 AND namespace = $5 \
                         ORDER BY score DESC, updated_at DESC, key LIMIT $6"
                    )))
                    .bind(&matching)
                    .bind_place(&search.tenant, &search.scope, &search.namespace)
                    .bind(limit)
                    .fetch_all(self.pool())
                    .await
                    .map_err(pg(doing))?
                }
            };
            let mut hits = rows.iter().map(hit_from_row).collect::<Result<Vec<_>, _>>()?;
            sort_hits(&mut hits);
            Ok(hits)
        })
    }

    fn memory_delete(&self, address: MemoryAddress) -> BoxFuture<'_, Result<bool, StoreError>> {
        Box::pin(async move {
            let deleted = sqlx::query(
                "DELETE FROM stepwright_memory_items \
                 WHERE tenant = $1 AND scope = $2 AND owner = $3 AND namespace = $4 AND key = $5",
            )
            .bind_address(&address)
            .execute(self.pool())
            .await
            .map_err(pg("deleting a memory item"))?
            .rows_affected();
            Ok(deleted > 0)
        })
    }
}
