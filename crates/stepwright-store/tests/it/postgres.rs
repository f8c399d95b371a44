//! The Postgres store: the conformance suite, and what only a shared database shows.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use stepwright_core::journal::RunRecord;
use stepwright_core::{
    Caller, ContentHash, Decision, Engine, InterruptRequest, Node, Outcome, RunStatus, Store, Timestamp, Workflow,
    dyn_fn_step,
};
use stepwright_store::conformance;
use stepwright_store::postgres::{same_database, test_store};

#[tokio::test]
async fn postgres_store_conforms() {
    if test_store("postgres_store_conforms").await.is_none() {
        return;
    }
    conformance::run_all(|| async { test_store("postgres_store_conforms").await.expect("configured") }).await;
}

#[tokio::test]
async fn postgres_control_tables_conform_and_hold_under_races() {
    let Some(store) = test_store("postgres_control_tables").await else { return };
    conformance::control_tables(&*store).await;
    let Some(a) = test_store("postgres_control_races").await else { return };
    let b = same_database(&a).await;
    conformance::control_races(&*a, &*b).await;
}

/// Two pools on one database advancing one schedule at once: one wins, one run exists.
#[tokio::test]
async fn schedule_advances_from_two_pools_race_to_one_winner() {
    let Some(a) = test_store("schedule_advances_race").await else { return };
    let b = same_database(&a).await;
    conformance::schedule_advances_race(&*a, &*b).await;
}

/// Two connection pools on one database, as two processes have: appends to one run from
/// both at once never collide.
#[tokio::test]
async fn appends_from_two_pools_to_one_run() {
    let Some(store) = test_store("appends_from_two_pools_to_one_run").await else { return };
    let other = same_database(&store).await;
    conformance::concurrent_appends_from(&*store, &*other).await;
}

fn pending(n: u8) -> RunRecord {
    RunRecord {
        id: stepwright_core::RunId::from_parts(Timestamp::from_millis(1_700_000_000_000), [n; 10]),
        workflow: "w".into(),
        version: "1".into(),
        definition_hash: ContentHash::of_bytes(b"w"),
        input: Arc::new(json!(n)),
        caller: Caller::default(),
        status: RunStatus::Pending,
        output: None,
        error: None,
        parent: None,
        created_at: Timestamp::from_micros(i64::from(n)),
        updated_at: Timestamp::from_micros(i64::from(n)),
        wake_at: None,
        lease: None,
        cancel: None,
        flow: Default::default(),
        tags: Vec::new(),
    }
}

#[tokio::test]
async fn two_workers_claiming_at_once_never_get_the_same_run() {
    let Some(a) = test_store("two_workers_claiming_at_once_never_get_the_same_run").await else { return };
    let b = same_database(&a).await;
    for n in 0..50 {
        a.create_run(pending(n)).await.unwrap();
    }
    let mut seen = std::collections::HashSet::new();
    loop {
        let (x, y) = tokio::join!(
            a.claim_due("a", Timestamp::EPOCH, Duration::from_secs(60), 7, None),
            b.claim_due("b", Timestamp::EPOCH, Duration::from_secs(60), 7, None)
        );
        let (x, y) = (x.unwrap(), y.unwrap());
        if x.is_empty() && y.is_empty() {
            break;
        }
        for lease in x.into_iter().chain(y) {
            assert!(seen.insert(lease.run), "run {} was claimed twice", lease.run);
        }
    }
    assert_eq!(seen.len(), 50);
}

#[tokio::test]
async fn an_approval_from_another_process_finishes_the_run() {
    let Some(a) = test_store("an_approval_from_another_process_finishes_the_run").await else { return };
    let b = same_database(&a).await;
    let workflow = Workflow::builder("approve")
        .step(Node::dyn_step(
            "ask",
            dyn_fn_step("ask", |_c, input| async move {
                Ok(Outcome::suspended(InterruptRequest::approval("ok?").payload((*input).clone())))
            }),
        ))
        .build()
        .unwrap();
    let first = Engine::builder().store(a.clone() as Arc<dyn Store>).worker_id("a").build();
    let report = first.start(&workflow, json!({ "amount": 3 })).await.unwrap();
    assert_eq!(report.status, RunStatus::Suspended);
    let second = Engine::builder().store(b.clone() as Arc<dyn Store>).worker_id("b").build();
    let id = report.pending[0].id.clone();
    let anyone = Caller::default();
    let (x, y) = tokio::join!(
        second.resolve(report.run_id, &id, Decision::Approve, &anyone),
        first.resolve(report.run_id, &id, Decision::Reject { reason: None }, &anyone),
    );
    assert!(x.is_ok() != y.is_ok(), "exactly one decision wins across processes");
    let done = second.resume(&workflow, report.run_id).await.unwrap();
    assert_eq!(done.status, if x.is_ok() { RunStatus::Completed } else { RunStatus::Failed });
}

#[tokio::test]
async fn lease_times_come_from_the_database_clock() {
    let Some(store) = test_store("lease_times_come_from_the_database_clock").await else { return };
    store.create_run(pending(1)).await.unwrap();
    // The caller's clock says 1970; the lease still lasts a minute from the database's now.
    let lease = store.claim(pending(1).id, "w", Timestamp::EPOCH, Duration::from_secs(60)).await.unwrap();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_micros() as i64;
    let ahead = lease.expires_at.as_micros() - now;
    assert!((55_000_000..=65_000_000).contains(&ahead), "lease ends {ahead} µs from now");
}

/// `open` connects to Postgres by URL.
#[tokio::test]
async fn open_connects_by_url() {
    // Skipped where no database is configured, like every Postgres test (CI sets it).
    let Ok(url) = std::env::var("STEPWRIGHT_TEST_DATABASE_URL") else { return };
    let store = stepwright_store::open(&url).await.unwrap();
    let runs = store.list_runs(stepwright_core::store::RunFilter { limit: Some(1), ..Default::default() }).await;
    assert!(runs.is_ok(), "{runs:?}");
}

/// Appends of many runs at once share commits (group commit), and what is refused fails
/// alone (the conformance case, here with the batches' sizes read back).
#[tokio::test]
async fn appends_of_many_runs_share_commits() {
    let Some(store) = test_store("appends_of_many_runs_share_commits").await else { return };
    conformance::refused_appends_fail_alone(&*store).await;
    let stats = store.group_commit_stats();
    assert!(stats.largest > 1, "a commit carried several appends: {stats:?}");
    assert!(stats.commits < stats.appends, "{stats:?}");
}

/// One append the database refuses (JSONB takes no NUL character) among others committed
/// with it: the batch is applied again one append at a time, and only that one fails.
#[tokio::test]
async fn an_append_the_database_refuses_fails_alone_in_its_batch() {
    use stepwright_core::journal::{EventRecord, JournalBatch, JournalEntry};
    use stepwright_core::{Record, StepPath, StoreError};
    let Some(store) = test_store("an_append_the_database_refuses_fails_alone").await else { return };
    for n in 0..8 {
        store.create_run(pending(n)).await.unwrap();
    }
    let append = |n: u8| {
        let store = store.clone();
        async move {
            let run = pending(n).id;
            let data = if n == 5 { json!("a\u{0}b") } else { json!(n) };
            let mut batch = JournalBatch {
                entries: vec![JournalEntry {
                    path: StepPath::new("a"),
                    at: Timestamp::from_micros(1),
                    record: Record::Started { attempt: 1 },
                }],
                blobs: Vec::new(),
                events: vec![EventRecord {
                    run,
                    path: StepPath::new("a"),
                    at: Timestamp::from_micros(1),
                    tenant: None,
                    user: None,
                    kind: "step.started".into(),
                    data,
                }],
            };
            store.append(run, None, &mut batch).await
        }
    };
    let results = futures_util::future::join_all((0..8).map(append)).await;
    for (n, result) in (0..8).zip(&results) {
        let written = store.load(pending(n).id).await.unwrap().entries.len();
        if n == 5 {
            assert!(matches!(result, Err(StoreError::Backend { .. })), "{result:?}");
            assert_eq!(written, 0, "nothing of the refused append");
        } else {
            assert!(result.is_ok(), "{n}: {result:?}");
            assert_eq!(written, 1, "{n}");
        }
    }
    assert!(store.group_commit_stats().largest > 1, "{:?}", store.group_commit_stats());
}

/// A burst of new runs wakes the runners with a few notifications, not one per run: at most
/// one per 10 ms per process, sent after the commits; a listener hears them.
#[tokio::test]
async fn new_work_is_announced_at_most_every_ten_milliseconds() {
    let Some(store) = test_store("new_work_is_announced_at_most_every_ten_milliseconds").await else { return };
    let mut listener = sqlx::postgres::PgListener::connect_with(store.pool()).await.unwrap();
    listener.listen(stepwright_store::postgres::WORK_CHANNEL).await.unwrap();
    let started = std::time::Instant::now();
    let creates = (0..200u8).map(|n| {
        let store = store.clone();
        let mut run = pending(n);
        run.id = stepwright_core::RunId::from_parts(
            Timestamp::from_millis(1_700_000_000_000),
            [7, 7, 7, 7, 7, 7, 7, 7, 7, n],
        );
        async move { store.create_run(run).await }
    });
    for created in futures_util::future::join_all(creates).await {
        created.unwrap();
    }
    let elapsed = started.elapsed();
    let heard = tokio::time::timeout(Duration::from_secs(2), listener.recv()).await;
    assert!(matches!(heard, Ok(Ok(_))), "a runner listening hears of the new work: {heard:?}");
    tokio::time::sleep(Duration::from_millis(50)).await;
    let sent = store.notifications_sent();
    let bound = u64::try_from(elapsed.as_millis() / 10).unwrap() + 3;
    assert!((1..=bound).contains(&sent), "{sent} notifications for 200 new runs in {elapsed:?} (at most {bound})");
}
