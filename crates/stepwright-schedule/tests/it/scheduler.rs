//! The scheduler over the in-memory store, under tokio's paused clock. No worker executes
//! the runs it starts, so a started run stays pending — "still going" — until a test ends
//! it: that is what the overlap policies see.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde_json::{Value, json};
use stepwright_core::store::schedule::{ScheduleKey, ScheduleStore, TickOutcome, TickRecord};
use stepwright_core::store::{StatusUpdate, Store, StoreError};
use stepwright_core::{Engine, InMemoryStore, Node, RunStatus, Timestamp, Workflow, fn_step};
use stepwright_schedule::{Cadence, Overlap, ScheduleSpec, Scheduler};
use stepwright_testkit::T0;

fn workflow() -> Workflow {
    Workflow::builder("digest").step(Node::step("a", fn_step(|_c, x: Value| async move { Ok(x) }))).build().unwrap()
}

fn scheduler_of(engine: &Engine, store: &Arc<InMemoryStore>) -> Scheduler {
    Scheduler::new(engine.clone(), store.clone() as Arc<dyn ScheduleStore>).register(&workflow())
}

fn key() -> ScheduleKey {
    ScheduleKey::new(None, "digest/minutely")
}

/// A spec ticking every minute on the minute.
fn minutely() -> ScheduleSpec {
    ScheduleSpec::new(Cadence::every(Duration::from_secs(60), Duration::ZERO))
}

/// Seconds past T0 to the next whole minute.
fn to_next_minute() -> Duration {
    let past = T0.as_micros() % 60_000_000;
    Duration::from_micros((60_000_000 - past) as u64)
}

async fn ticks(store: &InMemoryStore) -> Vec<TickRecord> {
    let mut ticks = store.ticks(&key(), 10_000).await.unwrap();
    ticks.reverse();
    ticks
}

fn outcomes(ticks: &[TickRecord]) -> Vec<&str> {
    ticks
        .iter()
        .map(|t| match &t.outcome {
            TickOutcome::Started { .. } => "started",
            TickOutcome::Skipped { reason } => reason.as_str(),
        })
        .collect()
}

fn run_of(tick: &TickRecord) -> stepwright_core::RunId {
    match tick.outcome {
        TickOutcome::Started { run } => run,
        TickOutcome::Skipped { .. } => panic!("not started: {tick:?}"),
    }
}

async fn finish(store: &InMemoryStore, tick: &TickRecord, status: RunStatus) {
    let update = StatusUpdate { status, output: None, error: None, at: T0, wake_at: None, fence: None };
    store.set_status(run_of(tick), update).await.unwrap();
}

async fn minutes(n: u64) {
    tokio::time::sleep(Duration::from_secs(60 * n)).await;
}

#[tokio::test(start_paused = true)]
async fn a_tick_starts_a_run_that_carries_the_schedule_and_its_rendered_input() {
    let (engine, store) = stepwright_testkit::engine();
    let render: stepwright_schedule::InputRenderer =
        Arc::new(|input, tick| Ok(json!({ "given": input, "tick": tick.as_value() })));
    let scheduler = scheduler_of(&engine, &store).render_with(render);
    let mut spec = minutely();
    spec.input = json!("inbox");
    scheduler.put(key(), &workflow(), spec, false).await.unwrap();
    assert!(scheduler.pass().await.unwrap().started.is_empty(), "nothing is due at creation");
    tokio::time::sleep(to_next_minute()).await;
    let report = scheduler.pass().await.unwrap();
    assert_eq!(report.started.len(), 1);
    let (_, tick_at, run) = report.started[0].clone();
    assert_eq!(tick_at.as_micros() % 60_000_000, 0, "on the minute");
    let record = store.load(run).await.unwrap().record;
    assert_eq!(record.status, RunStatus::Pending, "for any worker to claim");
    assert_eq!(record.workflow, "digest");
    assert_eq!(record.caller.user.as_deref(), Some("schedule:digest/minutely"));
    assert_eq!(record.caller.metadata["schedule"], json!("digest/minutely"));
    assert_eq!(record.input["given"], json!("inbox"));
    assert_eq!(record.input["tick"]["at"], record.caller.metadata["tick"]);
    assert_eq!(run, stepwright_schedule::tick_run_id(&key(), tick_at), "the tick's own run id");
    let recorded = ticks(&store).await;
    assert_eq!(outcomes(&recorded), ["started"]);
    assert!(scheduler.pass().await.unwrap().started.is_empty(), "a tick fires once");
}

#[tokio::test(start_paused = true)]
async fn overlap_skip_allow_all_and_cancel_other() {
    for (overlap, expected) in [
        (Overlap::Skip, vec!["started", "overlap", "overlap"]),
        (Overlap::AllowAll, vec!["started", "started", "started"]),
        (Overlap::CancelOther, vec!["started", "started", "started"]),
    ] {
        let (engine, store) = stepwright_testkit::engine();
        let scheduler = scheduler_of(&engine, &store);
        scheduler.put(key(), &workflow(), ScheduleSpec { overlap, ..minutely() }, false).await.unwrap();
        tokio::time::sleep(to_next_minute()).await;
        for _ in 0..3 {
            scheduler.pass().await.unwrap();
            minutes(1).await;
        }
        let recorded = ticks(&store).await;
        assert_eq!(outcomes(&recorded), expected, "{overlap:?}");
        if overlap == Overlap::CancelOther {
            // Nobody executes the earlier runs, so asking cancels them at once.
            for tick in &recorded[..2] {
                assert_eq!(store.load(run_of(tick)).await.unwrap().record.status, RunStatus::Cancelled);
            }
            assert_eq!(store.load(run_of(&recorded[2])).await.unwrap().record.status, RunStatus::Pending);
        }
    }
}

#[tokio::test(start_paused = true)]
async fn buffered_ticks_start_in_order_when_the_run_before_them_ends() {
    for (overlap, expected) in [
        (Overlap::BufferOne, vec!["started", "started", "buffer_full"]),
        (Overlap::BufferAll, vec!["started", "started", "started"]),
    ] {
        let (engine, store) = stepwright_testkit::engine();
        let scheduler = scheduler_of(&engine, &store);
        scheduler.put(key(), &workflow(), ScheduleSpec { overlap, ..minutely() }, false).await.unwrap();
        tokio::time::sleep(to_next_minute()).await;
        // Three ticks while the first run goes: tick 1 starts, ticks 2 and 3 wait (or 3 is
        // refused when one may wait).
        for _ in 0..3 {
            scheduler.pass().await.unwrap();
            minutes(1).await;
        }
        let first = ticks(&store).await;
        finish(&store, &first[0], RunStatus::Completed).await;
        scheduler.pass().await.unwrap();
        let after_first = ticks(&store).await;
        let started: Vec<_> =
            after_first.iter().filter(|t| matches!(t.outcome, TickOutcome::Started { .. })).cloned().collect();
        assert_eq!(started.len(), 2, "{overlap:?}: the next waiting tick started: {after_first:?}");
        finish(&store, &started[1], RunStatus::Completed).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        scheduler.pass().await.unwrap();
        // The tick that fell due meanwhile (the fourth) is also decided: it waits or starts.
        let mut recorded = ticks(&store).await;
        recorded.truncate(3);
        assert_eq!(outcomes(&recorded), expected, "{overlap:?}");
        // In tick order.
        assert!(recorded.windows(2).all(|w| w[0].at < w[1].at));
    }
}

#[tokio::test(start_paused = true)]
async fn after_a_three_hour_outage_only_ticks_inside_the_catchup_window_start() {
    let (engine, store) = stepwright_testkit::engine();
    let scheduler = scheduler_of(&engine, &store);
    let spec = ScheduleSpec {
        cadence: Cadence::every(Duration::from_secs(600), Duration::ZERO),
        overlap: Overlap::AllowAll,
        catchup_window_us: 25 * 60 * 1_000_000,
        ..ScheduleSpec::new(Cadence::every(Duration::from_secs(600), Duration::ZERO))
    };
    scheduler.put(key(), &workflow(), spec, false).await.unwrap();
    // Every process was down for three hours.
    tokio::time::sleep(Duration::from_secs(3 * 3600)).await;
    let report = scheduler.pass().await.unwrap();
    let recorded = ticks(&store).await;
    assert_eq!(recorded.len(), 18, "every tick of the three hours is recorded");
    let now = engine.clock().now();
    for tick in &recorded {
        let late = now.since(tick.at);
        let started = matches!(tick.outcome, TickOutcome::Started { .. });
        assert_eq!(started, late <= Duration::from_secs(25 * 60), "{tick:?} late by {late:?}");
    }
    assert_eq!(report.started.len(), 3, "the ticks of the last 25 minutes");
    assert_eq!(outcomes(&recorded).iter().filter(|o| **o == "outside_catchup_window").count(), 15);
}

#[tokio::test(start_paused = true)]
async fn jitter_delays_each_tick_within_its_bound_the_same_in_every_process() {
    let spec = ScheduleSpec { jitter_us: 30_000_000, ..minutely() };
    let offsets: Vec<Duration> =
        (0..200).map(|i| spec.jitter_of(&key(), Timestamp::from_micros(i * 60_000_000))).collect();
    assert!(offsets.iter().all(|o| *o < Duration::from_secs(30)), "below the bound");
    assert!(
        offsets.iter().any(|o| *o > Duration::from_secs(20)) && offsets.iter().any(|o| *o < Duration::from_secs(10))
    );
    assert_eq!(spec.jitter_of(&key(), Timestamp::from_micros(60_000_000)), offsets[1], "deterministic");

    let (engine, store) = stepwright_testkit::engine();
    let scheduler = scheduler_of(&engine, &store);
    scheduler.put(key(), &workflow(), spec.clone(), false).await.unwrap();
    tokio::time::sleep(to_next_minute()).await;
    let tick_at = engine.clock().now();
    let offset = spec.jitter_of(&key(), tick_at);
    if offset > Duration::from_millis(1) {
        scheduler.pass().await.unwrap();
        assert!(ticks(&store).await.is_empty(), "not before its jittered time");
    }
    tokio::time::sleep(offset).await;
    scheduler.pass().await.unwrap();
    assert_eq!(outcomes(&ticks(&store).await), ["started"]);
}

#[tokio::test(start_paused = true)]
async fn a_paused_schedule_records_its_ticks_as_skipped_and_a_failure_can_pause_it() {
    let (engine, store) = stepwright_testkit::engine();
    let scheduler = scheduler_of(&engine, &store);
    scheduler.put(key(), &workflow(), minutely(), true).await.unwrap();
    tokio::time::sleep(to_next_minute()).await;
    scheduler.pass().await.unwrap();
    assert_eq!(outcomes(&ticks(&store).await), ["paused"]);

    let (engine, store) = stepwright_testkit::engine();
    let scheduler = scheduler_of(&engine, &store);
    scheduler.put(key(), &workflow(), ScheduleSpec { pause_on_failure: true, ..minutely() }, false).await.unwrap();
    tokio::time::sleep(to_next_minute()).await;
    scheduler.pass().await.unwrap();
    finish(&store, &ticks(&store).await[0], RunStatus::Failed).await;
    minutes(1).await;
    scheduler.pass().await.unwrap();
    assert_eq!(outcomes(&ticks(&store).await), ["started", "paused"]);
    assert!(store.schedule(&key()).await.unwrap().unwrap().paused, "paused by the failure");
}

/// Two schedulers (two processes' worth) over one store, passing at the same moments, many
/// times: every tick is recorded once and started at most one run.
#[tokio::test(start_paused = true)]
async fn two_schedulers_racing_start_each_tick_once() {
    let store = Arc::new(InMemoryStore::new());
    let engine = |name: &str| {
        Engine::builder()
            .store(store.clone() as Arc<dyn Store>)
            .clock(Arc::new(stepwright_core::TokioClock::starting_at(T0)))
            .entropy(Arc::new(stepwright_core::SeededEntropy::new(1)))
            .worker_id(name)
            .build()
    };
    // Each store call yields first, so the two passes interleave as two processes' would.
    let yielding = Arc::new(Yielding(store.clone())) as Arc<dyn ScheduleStore>;
    let (a, b) = (
        Scheduler::new(engine("a"), yielding.clone()).register(&workflow()),
        Scheduler::new(engine("b"), yielding).register(&workflow()),
    );
    for i in 0..20 {
        let spec = ScheduleSpec {
            cadence: Cadence::every(Duration::from_secs(1), Duration::ZERO),
            overlap: Overlap::AllowAll,
            ..minutely()
        };
        a.put(ScheduleKey::new(None, &format!("s{i}")), &workflow(), spec, false).await.unwrap();
    }
    let (mut started, mut lost) = (0, 0);
    for _ in 0..30 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (x, y) = tokio::join!(a.pass(), b.pass());
        for report in [x.unwrap(), y.unwrap()] {
            started += report.started.len();
            lost += report.lost;
        }
    }
    let mut recorded = 0;
    for i in 0..20 {
        let ticks = store.ticks(&ScheduleKey::new(None, &format!("s{i}")), 1000).await.unwrap();
        assert!(ticks.iter().all(|t| matches!(t.outcome, TickOutcome::Started { .. })), "{ticks:?}");
        recorded += ticks.len();
    }
    let runs =
        store.list_runs(stepwright_core::store::RunFilter { limit: Some(10_000), ..Default::default() }).await.unwrap();
    assert_eq!(runs.len(), started, "one run per started tick");
    assert_eq!(recorded, started);
    assert_eq!(started, 20 * 15, "15 seconds of ticks for each of 20 schedules");
    assert!(lost > 0, "the schedulers did race");
}

/// The in-memory store, yielding to the runtime before each schedule call.
struct Yielding(Arc<InMemoryStore>);

impl ScheduleStore for Yielding {
    fn put_schedule(
        &self,
        record: stepwright_core::store::schedule::ScheduleRecord,
    ) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            tokio::task::yield_now().await;
            self.0.put_schedule(record).await
        })
    }

    fn schedule<'a>(
        &'a self,
        key: &'a ScheduleKey,
    ) -> BoxFuture<'a, Result<Option<stepwright_core::store::schedule::ScheduleRecord>, StoreError>> {
        Box::pin(async move {
            tokio::task::yield_now().await;
            self.0.schedule(key).await
        })
    }

    fn schedules<'a>(
        &'a self,
        tenant: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Vec<stepwright_core::store::schedule::ScheduleRecord>, StoreError>> {
        Box::pin(async move {
            tokio::task::yield_now().await;
            self.0.schedules(tenant).await
        })
    }

    fn delete_schedule<'a>(&'a self, key: &'a ScheduleKey) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            tokio::task::yield_now().await;
            self.0.delete_schedule(key).await
        })
    }

    fn due_schedules(
        &self,
        now: Timestamp,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<stepwright_core::store::schedule::ScheduleRecord>, StoreError>> {
        Box::pin(async move {
            tokio::task::yield_now().await;
            self.0.due_schedules(now, limit).await
        })
    }

    fn next_due(&self) -> BoxFuture<'_, Result<Option<Timestamp>, StoreError>> {
        Box::pin(async move {
            tokio::task::yield_now().await;
            self.0.next_due().await
        })
    }

    fn advance_schedule(
        &self,
        advance: stepwright_core::store::schedule::ScheduleAdvance,
    ) -> BoxFuture<'_, Result<bool, StoreError>> {
        Box::pin(async move {
            tokio::task::yield_now().await;
            self.0.advance_schedule(advance).await
        })
    }

    fn ticks<'a>(&'a self, key: &'a ScheduleKey, limit: usize) -> BoxFuture<'a, Result<Vec<TickRecord>, StoreError>> {
        Box::pin(async move {
            tokio::task::yield_now().await;
            self.0.ticks(key, limit).await
        })
    }
}

/// After an outage the scheduler recorded the missed ticks as skipped; a backfill of the
/// range starts a run for each, at the rate asked, and a second backfill starts nothing.
#[tokio::test(start_paused = true)]
async fn a_backfill_starts_the_missed_ticks_once_at_a_bounded_rate() {
    let (engine, store) = stepwright_testkit::engine();
    let scheduler = scheduler_of(&engine, &store);
    let spec = ScheduleSpec { overlap: Overlap::AllowAll, ..minutely() };
    scheduler.put(key(), &workflow(), spec, false).await.unwrap();
    let created = engine.clock().now();
    tokio::time::sleep(Duration::from_secs(3600)).await;
    scheduler.pass().await.unwrap();
    let recorded = ticks(&store).await;
    assert_eq!(recorded.len(), 60);
    let skipped = outcomes(&recorded).iter().filter(|o| **o == "outside_catchup_window").count();
    assert_eq!(skipped, 59, "the last minute's tick started; the rest were too late");

    let through = recorded.last().unwrap().at;
    let future = scheduler.backfill_plan(&key(), created, engine.clock().now().plus(Duration::from_secs(600))).await;
    assert!(future.unwrap_err().to_string().contains("later ticks are the scheduler's"));

    let began = tokio::time::Instant::now();
    let mut heard = 0;
    let plan = scheduler.backfill_plan(&key(), created, through).await.unwrap();
    assert_eq!((plan.ticks.len(), plan.already), (59, 1));
    let done = scheduler.backfill(&key(), plan, 10, |_, _| heard += 1).await.unwrap();
    assert_eq!((done.started.len(), done.already, heard), (59, 1, 59));
    assert!(began.elapsed() >= Duration::from_millis(5_800), "10 a second: {:?}", began.elapsed());
    let after = ticks(&store).await;
    assert_eq!(outcomes(&after), vec!["started"; 60], "every tick started one run");
    let runs =
        store.list_runs(stepwright_core::store::RunFilter { limit: Some(1000), ..Default::default() }).await.unwrap();
    assert_eq!(runs.len(), 60);

    let plan = scheduler.backfill_plan(&key(), created, through).await.unwrap();
    let again = scheduler.backfill(&key(), plan, 10, |_, _| {}).await.unwrap();
    assert_eq!((again.started.len(), again.already), (0, 60), "nothing twice");
}

#[tokio::test(start_paused = true)]
async fn trigger_starts_a_run_now_and_pause_resume_change_what_ticks_do() {
    let (engine, store) = stepwright_testkit::engine();
    let scheduler = scheduler_of(&engine, &store);
    scheduler.put(key(), &workflow(), minutely(), false).await.unwrap();
    let (at, run) = scheduler.trigger(&key()).await.unwrap();
    assert_eq!(at, engine.clock().now());
    assert_eq!(store.load(run).await.unwrap().record.caller.user.as_deref(), Some("schedule:digest/minutely"));
    tokio::time::sleep(to_next_minute()).await;
    scheduler.pass().await.unwrap();
    assert_eq!(outcomes(&ticks(&store).await), ["started", "overlap"], "the triggered run still goes");

    assert!(scheduler.set_paused(&key(), true).await.unwrap());
    assert!(!scheduler.set_paused(&key(), true).await.unwrap(), "paused already");
    minutes(1).await;
    scheduler.pass().await.unwrap();
    assert!(scheduler.set_paused(&key(), false).await.unwrap());
    finish(&store, &ticks(&store).await[0], RunStatus::Completed).await;
    minutes(1).await;
    scheduler.pass().await.unwrap();
    assert_eq!(outcomes(&ticks(&store).await), ["started", "overlap", "paused", "started"]);
    let next = scheduler.next_ticks(&key(), 3).await.unwrap();
    assert_eq!(next.len(), 3);
    assert!(next.windows(2).all(|w| w[1].at.as_micros() - w[0].at.as_micros() == 60_000_000));
    assert!(next[0].at > engine.clock().now());
}

/// A tick whose run cannot be made (its input template fails) is recorded with why, and the
/// schedule goes on to its next tick.
#[tokio::test(start_paused = true)]
async fn a_tick_whose_run_cannot_be_made_is_recorded_with_why() {
    let (engine, store) = stepwright_testkit::engine();
    let render: stepwright_schedule::InputRenderer = Arc::new(|_, _| Err("`tick.nope` is undefined".into()));
    let scheduler = scheduler_of(&engine, &store).render_with(render);
    scheduler.put(key(), &workflow(), minutely(), false).await.unwrap();
    tokio::time::sleep(to_next_minute()).await;
    let report = scheduler.pass().await.unwrap();
    assert!(report.failed.is_empty(), "the pass goes on: {report:?}");
    let recorded = ticks(&store).await;
    assert_eq!(recorded.len(), 1);
    match &recorded[0].outcome {
        TickOutcome::Skipped { reason } => {
            assert!(reason.starts_with("start_failed: ") && reason.contains("tick.nope"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    minutes(1).await;
    scheduler.pass().await.unwrap();
    assert_eq!(ticks(&store).await.len(), 2, "the next tick is decided too");
}
