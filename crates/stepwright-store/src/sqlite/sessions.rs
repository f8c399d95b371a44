//! Sessions in SQLite: `sessions`, `session_messages` and `session_appends`.

use futures_util::future::BoxFuture;
use rusqlite::{Connection, OptionalExtension, params};
use stepwright_core::StoreError;
use stepwright_core::session::{Appended, SessionAppend, SessionMessage, SessionOwner, SessionStore};
use stepwright_core::store::backend::{bad_session_id, check_owner, check_session_id};

use super::SqliteStore;
use crate::encoding::backend;

/// Whether the session exists, and fails with `AccessDenied` if it is someone else's.
fn owner_check(conn: &Connection, session: &str, owner: &SessionOwner, doing: &str) -> Result<bool, StoreError> {
    let found: Option<(String, String)> = conn
        .prepare_cached("SELECT tenant, user_id FROM sessions WHERE id = ?1")
        .and_then(|mut s| s.query_row([session], |r| Ok((r.get(0)?, r.get(1)?))).optional())
        .map_err(|e| backend(doing, e))?;
    check_owner(session, found, owner)
}

impl SessionStore for SqliteStore {
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
            self.read(doing, move |conn| {
                if !owner_check(conn, &session, &owner, doing)? {
                    return Ok(Vec::new());
                }
                let mut newest_first = conn
                    .prepare_cached(
                        "SELECT seq, message FROM session_messages WHERE session_id = ?1 ORDER BY seq DESC LIMIT ?2",
                    )
                    .and_then(|mut s| {
                        s.query_map(params![session, i64::try_from(limit).unwrap_or(i64::MAX)], |r| {
                            Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?))
                        })?
                        .collect::<rusqlite::Result<Vec<_>>>()
                    })
                    .map_err(|e| backend(doing, e))?;
                newest_first.reverse();
                newest_first
                    .into_iter()
                    .map(|(seq, message)| {
                        let message = serde_json::from_str(&message).map_err(|e| backend(doing, e))?;
                        Ok(SessionMessage { seq: seq as u64, message })
                    })
                    .collect()
            })
            .await
        })
    }

    fn append_to_session(&self, append: SessionAppend) -> BoxFuture<'_, Result<Appended, StoreError>> {
        Box::pin(async move {
            check_session_id(&append.session).map_err(bad_session_id)?;
            let messages: Vec<String> =
                append.messages.iter().map(|m| serde_json::to_string(m).unwrap_or_default()).collect();
            self.write(move |conn| {
                let doing = "appending to a session";
                let at = append.at.as_micros();
                let sql = |e| backend(doing, e);
                if !owner_check(conn, &append.session, &append.owner, doing)? {
                    let (tenant, user) = append.owner.stored();
                    conn.prepare_cached(
                        "INSERT INTO sessions (id, tenant, user_id, next_seq, created_at, updated_at) VALUES (?1, ?2, ?3, 0, ?4, ?4)",
                    )
                    .and_then(|mut s| s.execute(params![append.session, tenant, user, at]))
                    .map_err(sql)?;
                }
                let fresh = conn
                    .prepare_cached("INSERT OR IGNORE INTO session_appends (session_id, append_key) VALUES (?1, ?2)")
                    .and_then(|mut s| s.execute(params![append.session, append.key]))
                    .map_err(sql)?
                    == 1;
                if fresh {
                    let next: i64 = conn
                        .prepare_cached("SELECT next_seq FROM sessions WHERE id = ?1")
                        .and_then(|mut s| s.query_row([&append.session], |r| r.get(0)))
                        .map_err(sql)?;
                    let mut insert = conn
                        .prepare_cached("INSERT INTO session_messages (session_id, seq, message) VALUES (?1, ?2, ?3)")
                        .map_err(sql)?;
                    for (offset, message) in messages.iter().enumerate() {
                        insert.execute(params![append.session, next + offset as i64, message]).map_err(sql)?;
                    }
                    let next = next + messages.len() as i64;
                    conn.prepare_cached("UPDATE sessions SET next_seq = ?2, updated_at = ?3 WHERE id = ?1")
                        .and_then(|mut s| s.execute(params![append.session, next, at]))
                        .map_err(sql)?;
                    let keep_from = next - i64::try_from(append.max_stored).unwrap_or(i64::MAX).min(next);
                    conn.prepare_cached("DELETE FROM session_messages WHERE session_id = ?1 AND seq < ?2")
                        .and_then(|mut s| s.execute(params![append.session, keep_from]))
                        .map_err(sql)?;
                }
                let stored: i64 = conn
                    .prepare_cached("SELECT COUNT(*) FROM session_messages WHERE session_id = ?1")
                    .and_then(|mut s| s.query_row([&append.session], |r| r.get(0)))
                    .map_err(sql)?;
                Ok(Appended { applied: fresh, stored: stored as u64 })
            })
            .await
        })
    }

    fn delete_session(&self, session: &str, owner: &SessionOwner) -> BoxFuture<'_, Result<bool, StoreError>> {
        let (session, owner) = (session.to_owned(), owner.clone());
        Box::pin(async move {
            self.write(move |conn| {
                let doing = "deleting a session";
                if !owner_check(conn, &session, &owner, doing)? {
                    return Ok(false);
                }
                // Foreign keys cascade to the messages and append keys.
                conn.execute("DELETE FROM sessions WHERE id = ?1", [&session]).map_err(|e| backend(doing, e))?;
                Ok(true)
            })
            .await
        })
    }
}
