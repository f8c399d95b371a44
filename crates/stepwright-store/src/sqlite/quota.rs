//! Quotas in SQLite: `quotas`, one row per quota (its current window). The single writer
//! takes and charges, so two processes never both fit into the last of a window.

use futures_util::future::BoxFuture;
use rusqlite::{Connection, OptionalExtension, params};
use stepwright_core::StoreError;
use stepwright_core::store::quota::{Quota, QuotaStore, QuotaTaken, wall_now, window_of};

use super::SqliteStore;
use crate::encoding::backend;

/// Takes (or with `always`, charges) `amount` in the window `now` falls in.
fn apply(conn: &Connection, quota: &Quota, amount: u64, always: bool) -> Result<QuotaTaken, StoreError> {
    let doing = "taking from a quota";
    let (start, left) = window_of(wall_now(), quota.window);
    let limit = i64::try_from(quota.limit).unwrap_or(i64::MAX);
    let amount = i64::try_from(amount).unwrap_or(i64::MAX);
    if amount == 0 && !always {
        let used: Option<i64> = conn
            .prepare_cached("SELECT used FROM quotas WHERE name = ?1 AND window_start = ?2")
            .and_then(|mut s| s.query_row(params![quota.name, start], |r| r.get(0)).optional())
            .map_err(|e| backend(doing, e))?;
        return Ok(if used.unwrap_or(0) < limit { QuotaTaken::Granted } else { QuotaTaken::Full { retry_in: left } });
    }
    let changed = conn
        .prepare_cached(
            "INSERT INTO quotas (name, window_start, used) VALUES (?1, ?2, ?3) \
             ON CONFLICT (name) DO UPDATE SET \
               used = CASE WHEN quotas.window_start = excluded.window_start THEN quotas.used + excluded.used \
                      ELSE excluded.used END, \
               window_start = excluded.window_start \
             WHERE ?5 OR quotas.window_start <> excluded.window_start OR quotas.used + excluded.used <= ?4",
        )
        .and_then(|mut s| s.execute(params![quota.name, start, amount, limit, always]))
        .map_err(|e| backend(doing, e))?;
    Ok(if changed > 0 { QuotaTaken::Granted } else { QuotaTaken::Full { retry_in: left } })
}

impl QuotaStore for SqliteStore {
    fn take_quota<'a>(&'a self, quota: &'a Quota, amount: u64) -> BoxFuture<'a, Result<QuotaTaken, StoreError>> {
        let quota = quota.clone();
        Box::pin(self.write(move |conn| apply(conn, &quota, amount, false)))
    }

    fn charge_quota<'a>(&'a self, quota: &'a Quota, amount: u64) -> BoxFuture<'a, Result<(), StoreError>> {
        let quota = quota.clone();
        Box::pin(async move { self.write(move |conn| apply(conn, &quota, amount, true)).await.map(drop) })
    }
}
