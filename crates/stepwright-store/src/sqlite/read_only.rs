//! A store file this process may only read (a 0444 file, a directory it cannot write): the
//! read-only commands (`runs list`, `runs show`) are served, and every write fails as SQLite
//! says, "attempt to write a readonly database".

use std::path::Path;

use rusqlite::{Connection, OpenFlags};
use stepwright_core::StoreError;

use super::{MIGRATIONS, add_functions, backend};

/// A database this process may only read: opened read-only, its schema checked to be this
/// build's (a store that needs migrating cannot be migrated by a reader). Every write then
/// fails with SQLite's "attempt to write a readonly database".
pub(super) fn open(path: &Path) -> Result<(Connection, String), StoreError> {
    let doing = "opening the sqlite database read-only (this process may not write the file)";
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX | OpenFlags::SQLITE_OPEN_URI;
    let open = |uri: &str| -> rusqlite::Result<(Connection, i64)> {
        let conn = Connection::open_with_flags(uri, flags)?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        add_functions(&conn)?;
        let applied =
            conn.query_row("SELECT COALESCE(MAX(version), 0) FROM stepwright_migrations", [], |r| r.get(0))?;
        Ok((conn, applied))
    };
    let uri = format!("file:{}?mode=ro", uri_path(path));
    // A WAL database read with no write access anywhere near it (its `-shm` cannot be made):
    // read as an immutable file — what it holds when opened, which is what a reader that
    // may not write can be shown.
    let immutable = format!("file:{}?mode=ro&immutable=1", uri_path(path));
    let ((conn, applied), uri) = match open(&uri) {
        Ok(opened) => (opened, uri),
        Err(_) => (open(&immutable).map_err(|e| backend(doing, e))?, immutable),
    };
    let latest = MIGRATIONS.iter().map(|(version, _)| *version).max().unwrap_or(0);
    if applied < latest {
        return Err(StoreError::Invalid(format!(
            "{} is read-only and at schema version {applied}; this build needs {latest}: open it once with write              access to migrate it",
            path.display()
        )));
    }
    Ok((conn, uri))
}

/// A path as the path of a `file:` URI (`%`, `?` and `#` escaped).
fn uri_path(path: &Path) -> String {
    path.to_string_lossy().replace('%', "%25").replace('?', "%3f").replace('#', "%23")
}
