//! The step cache in SQLite: `step_cache`, one row per key. Reads go to a reader; a write
//! rides the writer's next group commit and keeps the first output under a key.

use futures_util::future::BoxFuture;
use rusqlite::{OptionalExtension, params};
use serde_json::Value;
use stepwright_core::store::cache::StepCache;
use stepwright_core::store::quota::wall_now;
use stepwright_core::{ContentHash, StoreError, Timestamp};

use super::SqliteStore;
use crate::encoding::backend;

impl StepCache for SqliteStore {
    fn cached<'a>(&'a self, key: &'a ContentHash) -> BoxFuture<'a, Result<Option<Value>, StoreError>> {
        let key = *key;
        Box::pin(self.read("reading the step cache", move |conn| {
            let text: Option<String> = conn
                .prepare_cached("SELECT output FROM step_cache WHERE key = ?1")
                .and_then(|mut s| s.query_row(params![key.as_bytes()], |r| r.get(0)).optional())
                .map_err(|e| backend("reading the step cache", e))?;
            text.map(|text| serde_json::from_str(&text).map_err(|e| backend("decoding a cached output", e))).transpose()
        }))
    }

    fn keep<'a>(&'a self, key: &'a ContentHash, output: &'a Value) -> BoxFuture<'a, Result<(), StoreError>> {
        let (key, text) = (*key, output.to_string());
        Box::pin(self.write(move |conn| {
            conn.prepare_cached(
                "INSERT INTO step_cache (key, output, created_at) VALUES (?1, ?2, ?3) ON CONFLICT (key) DO NOTHING",
            )
            .and_then(|mut s| s.execute(params![key.as_bytes(), text, wall_now().as_micros()]))
            .map(drop)
            .map_err(|e| backend("keeping a cached output", e))
        }))
    }

    fn forget_before(&self, before: Timestamp) -> BoxFuture<'_, Result<u64, StoreError>> {
        Box::pin(self.write(move |conn| {
            conn.prepare_cached("DELETE FROM step_cache WHERE created_at < ?1")
                .and_then(|mut s| s.execute(params![before.as_micros()]))
                .map(|n| n as u64)
                .map_err(|e| backend("forgetting cached outputs", e))
        }))
    }
}
