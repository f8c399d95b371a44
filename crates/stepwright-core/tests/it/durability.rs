//! Durability modes: what `sync`, `async` and `none` write, and what a crash can lose.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde_json::json;
use stepwright_core::journal::{EventRecord, JournalBatch, JournalEntry, Lease, LoadedRun, RunRecord};
use stepwright_core::store::{Removed, Retention, RunFilter, StatusUpdate};
use stepwright_core::{
    Durability, Effect, Engine, EngineConfig, InMemoryStore, Node, Record, RunId, SeededEntropy, StartOptions, Store,
    StoreError, Timestamp, TokioClock, Workflow, fn_step,
};
use stepwright_testkit::{Counter, T0, records_at};

/// A memory store that counts its calls: all of them, appends, claims of due runs and
/// lease renewals.
#[derive(Default)]
pub(crate) struct Counting {
    pub(crate) inner: InMemoryStore,
    pub(crate) calls: AtomicUsize,
    pub(crate) appends: AtomicUsize,
    pub(crate) claims: AtomicUsize,
    pub(crate) renewals: AtomicUsize,
    /// The next this many appends commit, then answer an error (the answer lost on the way:
    /// a connection cut after the commit).
    pub(crate) lose_answers: AtomicUsize,
    /// Each append's entries, as (path, record), in order: what went in one commit.
    pub(crate) batches: std::sync::Mutex<Vec<Vec<(String, stepwright_core::Record)>>>,
    /// Each claim of one run takes this long (a slow commit): `None`, at once.
    pub(crate) claim_takes: std::sync::Mutex<Option<Duration>>,
    /// Claims of one run in flight now, and the most there were at once.
    pub(crate) claims_in_flight: AtomicUsize,
    pub(crate) most_claims_at_once: AtomicUsize,
}

impl Counting {
    pub(crate) fn new() -> Self {
        Self::default()
    }
}

impl Store for Counting {
    fn create_run(&self, record: RunRecord) -> BoxFuture<'_, Result<(), StoreError>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner.create_run(record)
    }
    fn append<'a>(
        &'a self,
        run: RunId,
        fence: Option<u64>,
        batch: &'a mut JournalBatch,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.appends.fetch_add(1, Ordering::SeqCst);
        let entries = batch.entries.iter().map(|e| (e.path.as_str().to_owned(), e.record.clone())).collect();
        self.batches.lock().unwrap().push(entries);
        let lose = self.lose_answers.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok();
        Box::pin(async move {
            self.inner.append(run, fence, batch).await?;
            if lose {
                return Err(StoreError::Backend { doing: "appending".into(), source: "connection reset".into() });
            }
            Ok(())
        })
    }
    fn set_status(&self, run: RunId, update: StatusUpdate) -> BoxFuture<'_, Result<(), StoreError>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner.set_status(run, update)
    }
    fn load_from(&self, run: RunId, from: u64) -> BoxFuture<'_, Result<LoadedRun, StoreError>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner.load_from(run, from)
    }
    fn resolve_interrupt(&self, run: RunId, entry: JournalEntry) -> BoxFuture<'_, Result<(), StoreError>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner.resolve_interrupt(run, entry)
    }
    fn events_from(&self, run: RunId, from: u64) -> BoxFuture<'_, Result<Vec<EventRecord>, StoreError>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner.events_from(run, from)
    }

    fn blob(
        &self,
        hash: stepwright_core::ContentHash,
    ) -> BoxFuture<'_, Result<Option<std::sync::Arc<serde_json::Value>>, StoreError>> {
        Store::blob(&self.inner, hash)
    }
    fn wake_run(&self, run: RunId, now: Timestamp) -> BoxFuture<'_, Result<bool, StoreError>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner.wake_run(run, now)
    }
    fn list_runs(&self, filter: RunFilter) -> BoxFuture<'_, Result<Vec<RunRecord>, StoreError>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner.list_runs(filter)
    }
    fn erase_run(&self, run: RunId) -> BoxFuture<'_, Result<Removed, StoreError>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner.erase_run(run)
    }
    fn apply_retention(&self, policy: Retention) -> BoxFuture<'_, Result<Removed, StoreError>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner.apply_retention(policy)
    }
    fn claim(
        &self,
        run: RunId,
        owner: &str,
        now: Timestamp,
        lease_for: Duration,
    ) -> BoxFuture<'_, Result<Lease, StoreError>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let takes = *self.claim_takes.lock().unwrap();
        let owner = owner.to_owned();
        Box::pin(async move {
            let now_in_flight = self.claims_in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            self.most_claims_at_once.fetch_max(now_in_flight, Ordering::SeqCst);
            if let Some(takes) = takes {
                tokio::time::sleep(takes).await;
            }
            let claimed = self.inner.claim(run, &owner, now, lease_for).await;
            self.claims_in_flight.fetch_sub(1, Ordering::SeqCst);
            claimed
        })
    }
    fn take_over(
        &self,
        run: RunId,
        from: &str,
        owner: &str,
        now: Timestamp,
        lease_for: Duration,
    ) -> BoxFuture<'_, Result<Lease, StoreError>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner.take_over(run, from, owner, now, lease_for)
    }
    fn request_cancel(
        &self,
        run: RunId,
        request: stepwright_core::CancelRequest,
        now: Timestamp,
    ) -> BoxFuture<'_, Result<stepwright_core::CancelOutcome, StoreError>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner.request_cancel(run, request, now)
    }
    fn cancel_requests(
        &self,
        runs: &[RunId],
    ) -> BoxFuture<'_, Result<Vec<(RunId, stepwright_core::CancelRequest)>, StoreError>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner.cancel_requests(runs)
    }
    fn claim_due(
        &self,
        owner: &str,
        now: Timestamp,
        lease_for: Duration,
        limit: usize,
        tenant: Option<&str>,
    ) -> BoxFuture<'_, Result<Vec<Lease>, StoreError>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.claims.fetch_add(1, Ordering::SeqCst);
        self.inner.claim_due(owner, now, lease_for, limit, tenant)
    }
    fn renew_leases<'a>(
        &'a self,
        leases: &'a [Lease],
        now: Timestamp,
        lease_for: Duration,
    ) -> BoxFuture<'a, Result<Vec<Result<Lease, StoreError>>, StoreError>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.renewals.fetch_add(1, Ordering::SeqCst);
        self.inner.renew_leases(leases, now, lease_for)
    }
    fn heartbeat(
        &self,
        lease: &Lease,
        now: Timestamp,
        lease_for: Duration,
    ) -> BoxFuture<'_, Result<Lease, StoreError>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner.heartbeat(lease, now, lease_for)
    }
    fn post_message(
        &self,
        run: RunId,
        inbox: &str,
        message: serde_json::Value,
    ) -> BoxFuture<'_, Result<u64, StoreError>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner.post_message(run, inbox, message)
    }
    fn next_message(
        &self,
        run: RunId,
        inbox: &str,
        after: Option<u64>,
    ) -> BoxFuture<'_, Result<Option<(u64, serde_json::Value)>, StoreError>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner.next_message(run, inbox, after)
    }
    fn put_definition(
        &self,
        hash: stepwright_core::ContentHash,
        source: stepwright_core::journal::DefinitionSource,
    ) -> BoxFuture<'_, Result<(), StoreError>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner.put_definition(hash, source)
    }
    fn get_definition(
        &self,
        hash: stepwright_core::ContentHash,
    ) -> BoxFuture<'_, Result<Option<stepwright_core::journal::DefinitionSource>, StoreError>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner.get_definition(hash)
    }
    fn tasks(&self) -> Option<&dyn stepwright_core::store::task::TaskStore> {
        self.inner.tasks()
    }
    fn task_signals(&self) -> Option<&stepwright_core::store::task::TaskSignals> {
        self.inner.task_signals()
    }
}

fn engine_on(store: Arc<dyn Store>, durability: Durability, delay: Duration) -> Engine {
    Engine::builder()
        .store(store)
        .clock(Arc::new(TokioClock::starting_at(T0)))
        .entropy(Arc::new(SeededEntropy::new(5)))
        .worker_id("w")
        .config(EngineConfig { durability, async_max_delay: delay, ..EngineConfig::default() })
        .build()
}

fn pure(id: &str, calls: &Counter) -> Node {
    let calls = calls.clone();
    Node::step(
        id,
        fn_step(move |_c, x: i64| {
            calls.hit();
            async move { Ok(x + 1) }
        }),
    )
}

#[tokio::test(start_paused = true)]
async fn async_writes_batches_sync_writes_every_step() {
    let workflow = {
        let calls = Counter::default();
        Workflow::builder("ten").steps((0..10).map(|i| pure(&format!("s{i}"), &calls))).build().unwrap()
    };
    let mut appends = Vec::new();
    for durability in [Durability::Sync, Durability::Async] {
        let store = Arc::new(Counting::new());
        let engine = engine_on(store.clone(), durability, Duration::from_secs(3600));
        let report = engine.start(&workflow, json!(0)).await.unwrap();
        assert_eq!(report.output, Some(json!(10)));
        assert_eq!(store.inner.entries(report.run_id).len(), 10, "{durability:?} records every step in the end");
        appends.push(store.appends.load(Ordering::SeqCst));
    }
    assert_eq!(appends, [10, 1], "sync: one write per step; async: one batch at the end");
}

#[tokio::test(start_paused = true)]
async fn async_delay_is_bounded_even_while_a_step_runs() {
    let store = Arc::new(InMemoryStore::new());
    let engine = engine_on(store.clone(), Durability::Async, Duration::from_millis(50));
    let calls = Counter::default();
    let workflow = Workflow::builder("slow-second")
        .step(pure("quick", &calls))
        .step(Node::step(
            "slow",
            fn_step(|_c, x: i64| async move {
                tokio::time::sleep(Duration::from_secs(10)).await;
                Ok(x)
            }),
        ))
        .build()
        .unwrap();
    let run: RunId = "01890000-0000-7000-8000-0000000000d1".parse().unwrap();
    let running = {
        let engine = engine.clone();
        tokio::spawn(async move {
            engine.start_with(&workflow, json!(0), StartOptions { run_id: Some(run), ..Default::default() }).await
        })
    };
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(records_at(&store, run, "quick").is_empty(), "still waiting within the delay");
    tokio::time::sleep(Duration::from_millis(60)).await;
    assert!(
        records_at(&store, run, "quick").iter().any(|r| matches!(r, Record::Completed { .. })),
        "written within the delay while `slow` still runs"
    );
    assert_eq!(running.await.unwrap().unwrap().output, Some(json!(1)));
}

#[tokio::test(start_paused = true)]
async fn an_async_crash_reruns_only_unwritten_pure_steps_and_never_a_write() {
    let store = Arc::new(InMemoryStore::new());
    let engine = engine_on(store.clone(), Durability::Async, Duration::from_secs(3600));
    let (early, late, writes) = (Counter::default(), Counter::default(), Counter::default());
    let write = {
        let writes = writes.clone();
        Node::step(
            "write",
            fn_step(move |_c, x: i64| {
                writes.hit();
                async move { Ok(x * 100) }
            }),
        )
        .effect(Effect::Write)
    };
    let workflow = Workflow::builder("mixed")
        .step(pure("p1", &early))
        .step(pure("p2", &early))
        .step(write)
        .step(pure("p3", &late))
        .step(pure("p4", &late))
        .build()
        .unwrap();
    // Write 1: p1, p2 and the write's intent (the fence flushes what waits); write 2: the
    // write's completion; write 3, the final batch with p3 and p4, fails: the crash.
    store.fail_appends_after(2);
    let run: RunId = "01890000-0000-7000-8000-0000000000d2".parse().unwrap();
    let crashed =
        engine.start_with(&workflow, json!(0), StartOptions { run_id: Some(run), ..Default::default() }).await;
    assert!(crashed.is_err());
    store.heal();
    let done = engine.resume(&workflow, run).await.unwrap();
    assert_eq!(done.output, Some(json!(202)));
    assert_eq!(early.get(), 2, "p1 and p2 were written with the fence: not run again");
    assert_eq!(late.get(), 4, "p3 and p4 were lost with the last batch: run again");
    assert_eq!(writes.get(), 1, "the write is never done twice");
}

/// A run with one `write` step whose effect counts its calls.
fn one_write(writes: &Counter) -> Workflow {
    let writes = writes.clone();
    let write = Node::step(
        "charge",
        fn_step(move |_c, x: i64| {
            writes.hit();
            async move { Ok(x * 100) }
        }),
    )
    .effect(Effect::Write);
    Workflow::builder("charge").step(write).build().unwrap()
}

/// The store fails while a write step's intent is committed (a database restarting): the
/// commit is retried while the lease lasts, and once the store is back the write runs,
/// once — not `outcome_unknown` for an effect that never started.
#[tokio::test(start_paused = true)]
async fn a_store_outage_before_a_write_is_waited_out_not_outcome_unknown() {
    let store = Arc::new(InMemoryStore::new());
    let engine = engine_on(store.clone(), Durability::Sync, Duration::from_secs(3600));
    let writes = Counter::default();
    store.fail_appends_after(0);
    let healing = {
        let store = store.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(10)).await;
            store.heal();
        })
    };
    let report = engine.start(&one_write(&writes), json!(2)).await.unwrap();
    healing.await.unwrap();
    assert_eq!(report.output, Some(json!(200)), "{:?}", report.error);
    assert_eq!(writes.get(), 1);
    let intents =
        records_at(&store, report.run_id, "charge").into_iter().filter(|r| matches!(r, Record::Intent { .. }));
    assert_eq!(intents.count(), 1);
}

/// The intent's commit lands but its answer is lost: the retry finds it in the journal and
/// does not write it again; the write runs once and completes.
#[tokio::test(start_paused = true)]
async fn a_commit_whose_answer_was_lost_is_found_not_written_twice() {
    let store = Arc::new(Counting::new());
    let engine = engine_on(store.clone(), Durability::Sync, Duration::from_secs(3600));
    let writes = Counter::default();
    store.lose_answers.store(1, Ordering::SeqCst);
    let report = engine.start(&one_write(&writes), json!(3)).await.unwrap();
    assert_eq!(report.output, Some(json!(300)), "{:?}", report.error);
    assert_eq!(writes.get(), 1);
    let records: Vec<Record> = store
        .inner
        .entries(report.run_id)
        .into_iter()
        .filter(|e| e.path.as_str() == "charge")
        .map(|e| e.record)
        .collect();
    assert_eq!(records.iter().filter(|r| matches!(r, Record::Intent { .. })).count(), 1, "{records:?}");
    assert_eq!(records.iter().filter(|r| matches!(r, Record::Started { .. })).count(), 1, "{records:?}");
}

/// An outage longer than the lease: the commit gives up (the run stops, resumable), and
/// the write never ran.
#[tokio::test(start_paused = true)]
async fn an_outage_longer_than_the_lease_stops_the_run_before_its_write() {
    let store = Arc::new(InMemoryStore::new());
    let engine = engine_on(store.clone(), Durability::Sync, Duration::from_secs(3600));
    let writes = Counter::default();
    store.fail_appends_after(0);
    let stopped = engine.start(&one_write(&writes), json!(2)).await;
    assert!(stopped.is_err(), "{stopped:?}");
    assert_eq!(writes.get(), 0, "nothing was done without its intent stored");
}

/// A store that does not read headers by id itself reads each run as `load_from` gives it:
/// the headers a memory store reads whole, in the order asked, a missing run left out.
#[tokio::test]
async fn headers_by_id_default_to_each_runs_own_read() {
    let store = Arc::new(Counting::new());
    let engine = engine_on(store.clone(), Durability::Sync, Duration::from_secs(3600));
    let workflow = {
        let calls = Counter::default();
        Workflow::builder("two").steps((0..2).map(|i| pure(&format!("s{i}"), &calls))).build().unwrap()
    };
    let a = engine.start(&workflow, json!(1)).await.unwrap().run_id;
    let b = engine.start(&workflow, json!(2)).await.unwrap().run_id;
    let missing = RunId::from_bytes([9; 16]);
    let by_default = store.run_headers(vec![b, missing, a]).await.unwrap();
    let by_memory = store.inner.run_headers(vec![b, missing, a]).await.unwrap();
    assert_eq!(by_default.iter().map(|r| r.id).collect::<Vec<_>>(), [b, a]);
    assert_eq!(by_default, by_memory);
    assert!(by_default.iter().all(|r| *r.input == serde_json::Value::Null && r.output.is_none()));
}
