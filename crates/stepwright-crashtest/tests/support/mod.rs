//! Helpers the crash harnesses share.

use std::collections::HashSet;
use std::path::Path;

use stepwright::RunId;

/// The paths with a committed completion in a run's SQLite journal (read-only, so it can
/// watch a database a worker is writing).
pub(crate) fn completed_paths(db: &Path, run: RunId) -> HashSet<String> {
    let Ok(conn) = rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY) else {
        return HashSet::new();
    };
    let Ok(mut stmt) =
        conn.prepare("SELECT path FROM journal WHERE run_id = ?1 AND json_extract(record, '$.type') = 'completed'")
    else {
        return HashSet::new(); // The worker has not created the schema yet.
    };
    stmt.query_map([&run.as_uuid().as_bytes()[..]], |r| r.get::<_, String>(0)).unwrap().map(Result::unwrap).collect()
}
