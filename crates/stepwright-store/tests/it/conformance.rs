//! The store conformance suite against every backend available here.

use std::sync::Arc;

use stepwright_core::InMemoryStore;
use stepwright_store::{SqliteOptions, SqliteStore, Synchronous, conformance};

#[tokio::test]
async fn memory_store_conforms() {
    conformance::run_all(|| async { Arc::new(InMemoryStore::new()) }).await;
}

#[tokio::test]
async fn sqlite_store_conforms() {
    let dir = tempfile::tempdir().unwrap();
    let counter = std::sync::atomic::AtomicUsize::new(0);
    conformance::run_all(|| {
        let n = counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let path = dir.path().join(format!("conformance-{n}.db"));
        async move { Arc::new(SqliteStore::open(path).unwrap()) }
    })
    .await;
    conformance::control_tables(&SqliteStore::open(dir.path().join("control.db")).unwrap()).await;
}

/// SQLite's writer thread serializes claims and registrations from one process; two
/// processes are two stores on one file.
#[tokio::test]
async fn sqlite_control_tables_hold_under_races_between_two_stores() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("races.db");
    let (a, b) = (SqliteStore::open(&path).unwrap(), SqliteStore::open(&path).unwrap());
    conformance::control_races(&a, &b).await;
}

/// Two stores on one file advancing one schedule at once: one wins, one run exists.
#[tokio::test]
async fn sqlite_schedule_advances_from_two_stores_race_to_one_winner() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("schedules.db");
    let (a, b) = (SqliteStore::open(&path).unwrap(), SqliteStore::open(&path).unwrap());
    conformance::schedule_advances_race(&a, &b).await;
}

#[tokio::test]
async fn sqlite_store_conforms_with_synchronous_normal_and_batches_of_one() {
    let dir = tempfile::tempdir().unwrap();
    let counter = std::sync::atomic::AtomicUsize::new(0);
    conformance::run_all(|| {
        let n = counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let path = dir.path().join(format!("normal-{n}.db"));
        let options = SqliteOptions { synchronous: Synchronous::Normal, read_connections: 1, max_batch: 1 };
        async move { Arc::new(SqliteStore::open_with(path, options).unwrap()) }
    })
    .await;
}
