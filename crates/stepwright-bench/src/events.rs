//! E1: events and a trigger in one store, decided and executed by one worker (a `Runner` and
//! a `Scheduler`, as `stepwright serve` runs them, woken by the API's own sends): how long
//! from an event's receipt to its run starting to execute (p50, p99) at a steady rate, and
//! how many events a second the store takes from 8 senders at once.

use std::sync::Arc;
use std::time::{Duration, Instant};

use stepwright::schedule::{Scheduler, TriggerSpec};
use stepwright::store::event::{EventStore, NewEvent};
use stepwright::store::schedule::{ScheduleKey, ScheduleStore};
use stepwright::{Clock, Engine, Runner, Store, TokioClock};

use crate::inc_chain;
use crate::schedules::{Target, executing_latencies};

/// What E1 measured on one store.
pub(crate) struct Figures {
    pub(crate) events: usize,
    pub(crate) p50_ms: f64,
    pub(crate) p99_ms: f64,
    pub(crate) max_ms: f64,
    pub(crate) burst_per_second: f64,
}

/// A store the benchmark can trigger on.
pub(crate) trait All: Store + ScheduleStore + EventStore {}
impl<T: Store + ScheduleStore + EventStore> All for T {}

fn event(n: u64) -> NewEvent {
    NewEvent {
        tenant: None,
        name: "ticket.created".into(),
        payload: serde_json::json!({ "id": n }),
        idempotency_key: Some(format!("e{n}")),
        at: TokioClock::new().now(),
    }
}

/// E1 on `store`: `rate` events a second for `seconds`, each starting a run of a one-step
/// workflow; then a burst of `burst` events from 8 senders.
pub(crate) fn e1(target: Target, rate: u32, seconds: u64, burst: u64) -> Figures {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    rt.block_on(async move {
        let store: Arc<dyn All> = match target {
            Target::Sqlite(path) => Arc::new(stepwright::SqliteStore::open(path).expect("open sqlite")),
            Target::Postgres(url) => crate::postgres::e1_store(&url).await,
        };
        let workflow = inc_chain("triaged", 1);
        let engine = Engine::builder()
            .store(store.clone() as Arc<dyn Store>)
            .clock(Arc::new(TokioClock::new()))
            .worker_id("bench-worker")
            .build();
        let wake = Arc::new(tokio::sync::Notify::new());
        let scheduler = Scheduler::new(engine.clone(), store.clone() as Arc<dyn ScheduleStore>)
            .register(&workflow)
            .triggers_with(
                store.clone() as Arc<dyn EventStore>,
                Arc::new(|template, _| Ok(template.clone())),
                Arc::new(|_, _| Ok(true)),
            )
            .wake_on(wake.clone());
        let mut spec = TriggerSpec::on("ticket.created");
        spec.input = Some(serde_json::json!(1));
        scheduler.put_trigger(ScheduleKey::new(None, "triaged/each"), &workflow, spec, false).await.expect("put");
        let (log, latencies) = executing_latencies();
        let runner = Arc::new(Runner::new(engine.clone()).register(&workflow).log_to(log).max_concurrent(256));
        let stop = stepwright::CancellationToken::new();
        let working = {
            let (runner, stop) = (runner.clone(), stop.clone());
            tokio::spawn(async move { runner.run(stop).await })
        };
        let scheduling = {
            let (scheduler, stop) = (scheduler.clone(), stop.clone());
            tokio::spawn(async move { scheduler.run(stop).await })
        };
        // Steady: one event every 1/rate s, the scheduler told at once (as the API does).
        let pace = Duration::from_secs(1) / rate.max(1);
        let mut next = tokio::time::Instant::now();
        let total = u64::from(rate) * seconds;
        for n in 0..total {
            tokio::time::sleep_until(next).await;
            next += pace;
            store.append_event(event(n)).await.expect("append");
            wake.notify_one();
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        while latencies.lock().expect("poisoned").len() < total as usize && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        stop.cancel();
        let _ = working.await;
        let _ = scheduling.await;
        let mut measured = std::mem::take(&mut *latencies.lock().expect("poisoned"));
        measured.sort_by(f64::total_cmp);
        let at = |q: f64| measured.get(((measured.len() as f64 - 1.0) * q) as usize).copied().unwrap_or(f64::NAN);

        // Burst: 8 senders, as fast as the store takes them.
        let began = Instant::now();
        let mut senders = Vec::new();
        for sender in 0..8u64 {
            let store = store.clone();
            senders.push(tokio::spawn(async move {
                for n in 0..burst / 8 {
                    store.append_event(event(1_000_000 + sender * burst + n)).await.expect("append");
                }
            }));
        }
        for sender in senders {
            sender.await.expect("sender");
        }
        let burst_per_second = (burst / 8 * 8) as f64 / began.elapsed().as_secs_f64();
        Figures { events: measured.len(), p50_ms: at(0.5), p99_ms: at(0.99), max_ms: at(1.0), burst_per_second }
    })
}
