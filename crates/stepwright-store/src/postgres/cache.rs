//! The step cache in Postgres: `stepwright_step_cache`, one row per key; the first output
//! kept under a key stays (`ON CONFLICT DO NOTHING`).

use futures_util::future::BoxFuture;
use serde_json::Value;
use stepwright_core::store::cache::StepCache;
use stepwright_core::{ContentHash, StoreError, Timestamp};

use super::{PostgresStore, pg};
use crate::encoding::backend;

impl StepCache for PostgresStore {
    fn cached<'a>(&'a self, key: &'a ContentHash) -> BoxFuture<'a, Result<Option<Value>, StoreError>> {
        Box::pin(async move {
            let text: Option<String> = sqlx::query_scalar("SELECT output FROM stepwright_step_cache WHERE key = $1")
                .bind(key.as_bytes().as_slice())
                .fetch_optional(&self.pool)
                .await
                .map_err(pg("reading the step cache"))?;
            text.map(|text| serde_json::from_str(&text).map_err(|e| backend("decoding a cached output", e))).transpose()
        })
    }

    fn keep<'a>(&'a self, key: &'a ContentHash, output: &'a Value) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            sqlx::query("INSERT INTO stepwright_step_cache (key, output) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING")
                .bind(key.as_bytes().as_slice())
                .bind(output.to_string())
                .execute(&self.pool)
                .await
                .map(drop)
                .map_err(pg("keeping a cached output"))
        })
    }

    fn forget_before(&self, before: Timestamp) -> BoxFuture<'_, Result<u64, StoreError>> {
        Box::pin(async move {
            sqlx::query("DELETE FROM stepwright_step_cache WHERE created_at < to_timestamp($1::float8 / 1e6)")
                .bind(before.as_micros())
                .execute(&self.pool)
                .await
                .map(|done| done.rows_affected())
                .map_err(pg("forgetting cached outputs"))
        })
    }
}
