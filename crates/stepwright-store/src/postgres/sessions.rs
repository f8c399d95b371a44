//! Sessions in Postgres: `stepwright_sessions`, `stepwright_session_messages` and
//! `stepwright_session_appends`. An append locks the session's row, so concurrent appends
//! to one session take their turns and sequence numbers never collide.

use futures_util::future::BoxFuture;
use sqlx::Row;
use stepwright_core::StoreError;
use stepwright_core::session::{Appended, SessionAppend, SessionMessage, SessionOwner, SessionStore};
use stepwright_core::store::backend::{bad_session_id, check_owner, check_session_id};

use super::{PostgresStore, pg};

/// Whether the session exists (reading its owner, locking the row with `for_update`), and
/// `AccessDenied` if it is someone else's.
async fn owner_check(
    tx: &mut sqlx::PgConnection,
    session: &str,
    owner: &SessionOwner,
    for_update: bool,
    doing: &str,
) -> Result<bool, StoreError> {
    let sql = if for_update {
        "SELECT tenant, user_id FROM stepwright_sessions WHERE id = $1 FOR UPDATE"
    } else {
        "SELECT tenant, user_id FROM stepwright_sessions WHERE id = $1"
    };
    let found: Option<(String, String)> =
        sqlx::query_as(sql).bind(session).fetch_optional(tx).await.map_err(pg(doing))?;
    check_owner(session, found, owner)
}

impl SessionStore for PostgresStore {
    fn session_history(
        &self,
        session: &str,
        owner: &SessionOwner,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<SessionMessage>, StoreError>> {
        let (session, owner) = (session.to_owned(), owner.clone());
        Box::pin(async move {
            check_session_id(&session).map_err(bad_session_id)?;
            let doing = "reading a session";
            let mut tx = self.pool().begin().await.map_err(pg(doing))?;
            if !owner_check(&mut tx, &session, &owner, false, doing).await? {
                return Ok(Vec::new());
            }
            let rows = sqlx::query(
                "SELECT seq, message FROM (SELECT seq, message FROM stepwright_session_messages \
                 WHERE session_id = $1 ORDER BY seq DESC LIMIT $2) newest ORDER BY seq",
            )
            .bind(&session)
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(&mut *tx)
            .await
            .map_err(pg(doing))?;
            tx.commit().await.map_err(pg(doing))?;
            rows.iter()
                .map(|row| {
                    let message: String = row.try_get(1).map_err(pg(doing))?;
                    Ok(SessionMessage {
                        seq: row.try_get::<i64, _>(0).map_err(pg(doing))? as u64,
                        message: serde_json::from_str(&message).map_err(|e| crate::encoding::backend(doing, e))?,
                    })
                })
                .collect()
        })
    }

    fn append_to_session(&self, append: SessionAppend) -> BoxFuture<'_, Result<Appended, StoreError>> {
        Box::pin(async move {
            check_session_id(&append.session).map_err(bad_session_id)?;
            let doing = "appending to a session";
            let (tenant, user) = append.owner.stored();
            let at = append.at.as_micros();
            let mut tx = self.pool().begin().await.map_err(pg(doing))?;
            sqlx::query(
                "INSERT INTO stepwright_sessions (id, tenant, user_id, next_seq, created_at, updated_at) \
                 VALUES ($1, $2, $3, 0, $4, $4) ON CONFLICT (id) DO NOTHING",
            )
            .bind(&append.session)
            .bind(&tenant)
            .bind(&user)
            .bind(at)
            .execute(&mut *tx)
            .await
            .map_err(pg(doing))?;
            let (owner_tenant, owner_user, next): (String, String, i64) =
                sqlx::query_as("SELECT tenant, user_id, next_seq FROM stepwright_sessions WHERE id = $1 FOR UPDATE")
                    .bind(&append.session)
                    .fetch_one(&mut *tx)
                    .await
                    .map_err(pg(doing))?;
            check_owner(&append.session, Some((owner_tenant, owner_user)), &append.owner)?;
            let fresh = sqlx::query(
                "INSERT INTO stepwright_session_appends (session_id, append_key) VALUES ($1, $2) ON CONFLICT DO NOTHING",
            )
            .bind(&append.session)
            .bind(&append.key)
            .execute(&mut *tx)
            .await
            .map_err(pg(doing))?
            .rows_affected()
                == 1;
            if fresh {
                let messages: Vec<String> =
                    append.messages.iter().map(|m| serde_json::to_string(m).unwrap_or_default()).collect();
                let count = messages.len() as i64;
                sqlx::query(
                    "INSERT INTO stepwright_session_messages (session_id, seq, message) \
                     SELECT $1, $2 + ordinality - 1, message FROM UNNEST($3::text[]) WITH ORDINALITY AS m(message, ordinality)",
                )
                .bind(&append.session)
                .bind(next)
                .bind(&messages)
                .execute(&mut *tx)
                .await
                .map_err(pg(doing))?;
                let next = next + count;
                sqlx::query("UPDATE stepwright_sessions SET next_seq = $2, updated_at = $3 WHERE id = $1")
                    .bind(&append.session)
                    .bind(next)
                    .bind(at)
                    .execute(&mut *tx)
                    .await
                    .map_err(pg(doing))?;
                let keep_from = next - i64::try_from(append.max_stored).unwrap_or(i64::MAX).min(next);
                sqlx::query("DELETE FROM stepwright_session_messages WHERE session_id = $1 AND seq < $2")
                    .bind(&append.session)
                    .bind(keep_from)
                    .execute(&mut *tx)
                    .await
                    .map_err(pg(doing))?;
            }
            let stored: i64 =
                sqlx::query_scalar("SELECT COUNT(*) FROM stepwright_session_messages WHERE session_id = $1")
                    .bind(&append.session)
                    .fetch_one(&mut *tx)
                    .await
                    .map_err(pg(doing))?;
            tx.commit().await.map_err(pg(doing))?;
            Ok(Appended { applied: fresh, stored: stored as u64 })
        })
    }

    fn delete_session(&self, session: &str, owner: &SessionOwner) -> BoxFuture<'_, Result<bool, StoreError>> {
        let (session, owner) = (session.to_owned(), owner.clone());
        Box::pin(async move {
            let doing = "deleting a session";
            let mut tx = self.pool().begin().await.map_err(pg(doing))?;
            if !owner_check(&mut tx, &session, &owner, true, doing).await? {
                return Ok(false);
            }
            // Foreign keys cascade to the messages and append keys.
            sqlx::query("DELETE FROM stepwright_sessions WHERE id = $1")
                .bind(&session)
                .execute(&mut *tx)
                .await
                .map_err(pg(doing))?;
            tx.commit().await.map_err(pg(doing))?;
            Ok(true)
        })
    }
}
