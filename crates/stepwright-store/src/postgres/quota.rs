//! Quotas in Postgres: `stepwright_quotas`, one row per quota (its current window), on the
//! database's clock. A take is one `INSERT … ON CONFLICT DO UPDATE … WHERE`: the row lock
//! serializes the workers, and the condition is checked against the latest count, so two
//! never both fit into the last of a window.

use futures_util::future::BoxFuture;
use sqlx::Row;
use stepwright_core::StoreError;
use stepwright_core::store::quota::{Quota, QuotaStore, QuotaTaken};

use super::{PostgresStore, pg};

impl PostgresStore {
    async fn apply_quota(&self, quota: &Quota, amount: u64, always: bool) -> Result<QuotaTaken, StoreError> {
        let window = i64::try_from(quota.window.as_micros()).unwrap_or(i64::MAX).max(1);
        let limit = i64::try_from(quota.limit).unwrap_or(i64::MAX);
        let amount = i64::try_from(amount).unwrap_or(i64::MAX);
        let row = if amount == 0 && !always {
            sqlx::query(
                "WITH w AS (SELECT (stepwright_now_us() / $2) * $2 AS start, stepwright_now_us() AS now) \
                 SELECT COALESCE((SELECT used FROM stepwright_quotas q, w \
                                  WHERE q.name = $1 AND q.window_start = w.start), 0) < $3, \
                        start + $2 - now FROM w",
            )
            .bind(&quota.name)
            .bind(window)
            .bind(limit)
            .fetch_one(&self.pool)
            .await
        } else {
            sqlx::query(
                "WITH w AS (SELECT (stepwright_now_us() / $2) * $2 AS start, stepwright_now_us() AS now), \
                 taken AS ( \
                   INSERT INTO stepwright_quotas (name, window_start, used) SELECT $1, start, $3 FROM w \
                   ON CONFLICT (name) DO UPDATE SET \
                     used = CASE WHEN stepwright_quotas.window_start = EXCLUDED.window_start \
                            THEN stepwright_quotas.used + EXCLUDED.used ELSE EXCLUDED.used END, \
                     window_start = EXCLUDED.window_start \
                   WHERE $5 OR stepwright_quotas.window_start <> EXCLUDED.window_start \
                         OR stepwright_quotas.used + EXCLUDED.used <= $4 \
                   RETURNING 1) \
                 SELECT EXISTS (SELECT 1 FROM taken), start + $2 - now FROM w",
            )
            .bind(&quota.name)
            .bind(window)
            .bind(amount)
            .bind(limit)
            .bind(always)
            .fetch_one(&self.pool)
            .await
        }
        .map_err(pg("taking from a quota"))?;
        let left = u64::try_from(row.get::<i64, _>(1)).unwrap_or(0);
        Ok(if row.get(0) {
            QuotaTaken::Granted
        } else {
            QuotaTaken::Full { retry_in: std::time::Duration::from_micros(left) }
        })
    }
}

impl QuotaStore for PostgresStore {
    fn take_quota<'a>(&'a self, quota: &'a Quota, amount: u64) -> BoxFuture<'a, Result<QuotaTaken, StoreError>> {
        Box::pin(self.apply_quota(quota, amount, false))
    }

    fn charge_quota<'a>(&'a self, quota: &'a Quota, amount: u64) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move { self.apply_quota(quota, amount, true).await.map(drop) })
    }
}
