//! S1: 10,000 active schedules in one store, decided and executed by one worker (a `Runner`
//! and a `Scheduler`, as `stepwright worker` runs them): how long from a tick's time to its
//! run starting to execute (p50, p99), and what the worker costs while no tick is due (CPU
//! time per second, store queries per second).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use stepwright::schedule::{Cadence, ScheduleSpec, Scheduler};
use stepwright::store::schedule::{ScheduleKey, ScheduleStore};
use stepwright::{Clock, Engine, RunId, Runner, RunnerEvent, Store, TokioClock};

use crate::inc_chain;

/// Schedules in the store.
pub(crate) const SCHEDULES: usize = 10_000;

/// What S1 measured on one store.
pub(crate) struct Figures {
    pub(crate) ticks: usize,
    pub(crate) p50_ms: f64,
    pub(crate) p99_ms: f64,
    pub(crate) max_ms: f64,
    pub(crate) idle_cpu_ms_per_s: f64,
}

/// Where S1 runs.
pub(crate) enum Target {
    /// A SQLite file.
    Sqlite(std::path::PathBuf),
    /// A Postgres database (a schema of its own in it).
    Postgres(String),
}

/// A store the benchmark can schedule on.
pub(crate) trait Both: Store + ScheduleStore {}
impl<T: Store + ScheduleStore> Both for T {}

/// The tick a schedule's run stands for: the run id's time (a tick's run id is made from
/// the tick's time, in milliseconds).
pub(crate) fn tick_ms(run: RunId) -> i64 {
    let bytes = run.as_uuid().into_bytes();
    let mut ms = [0u8; 8];
    ms[2..].copy_from_slice(&bytes[..6]);
    i64::from_be_bytes(ms)
}

/// A runner log that notes, for every run it starts executing, how long after the time its
/// id carries (a tick's, an event's) that was, in milliseconds.
pub(crate) fn executing_latencies() -> (stepwright::RunnerLog, Arc<Mutex<Vec<f64>>>) {
    let latencies: Arc<Mutex<Vec<f64>>> = Arc::default();
    let clock = TokioClock::new();
    let noted = latencies.clone();
    let log: stepwright::RunnerLog = Arc::new(move |event| {
        if let RunnerEvent::Executing { run, .. } = event {
            let now_ms = clock.now().as_micros() as f64 / 1000.0;
            noted.lock().expect("poisoned").push(now_ms - tick_ms(run) as f64);
        }
    });
    (log, latencies)
}

/// This process's CPU time (user + system), from `/proc/self/stat`.
fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat.rsplit(')').next().unwrap_or_default().split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
    // Fields 14 and 15 of the file (utime, stime), counted after the `)`: 11 and 12.
    let clock_ticks = 100; // USER_HZ on Linux
    Duration::from_millis((ticks(11) + ticks(12)) * 1000 / clock_ticks)
}

/// S1 on `store`: 10,000 schedules ticking every `period` with their phases spread over it,
/// run for `seconds`; then the same number of schedules with no tick due for a year, idle
/// for `idle_seconds`.
pub(crate) fn s1(target: Target, period: Duration, seconds: u64, idle_seconds: u64) -> Figures {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    rt.block_on(async move {
        let store: Arc<dyn Both> = match target {
            Target::Sqlite(path) => Arc::new(stepwright::SqliteStore::open(path).expect("open sqlite")),
            Target::Postgres(url) => crate::postgres::s1_store(&url).await,
        };
        let workflow = inc_chain("ticking", 1);
        let engine = Engine::builder()
            .store(store.clone() as Arc<dyn Store>)
            .clock(Arc::new(TokioClock::new()))
            .worker_id("bench-worker")
            .build();
        let scheduler = Scheduler::new(engine.clone(), store.clone() as Arc<dyn ScheduleStore>).register(&workflow);
        let period_ms = period.as_millis() as u64;
        for i in 0..SCHEDULES {
            let phase = Duration::from_millis((i as u64 * 7_919) % period_ms);
            let spec = ScheduleSpec {
                overlap: stepwright::schedule::Overlap::AllowAll,
                ..ScheduleSpec::new(Cadence::every(period, phase))
            };
            scheduler.put(ScheduleKey::new(None, &format!("s{i}")), &workflow, spec, false).await.expect("put");
        }
        // Tick → the run executing, measured by the runner's own report.
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
        // The first period settles (every schedule's first tick); then measure.
        tokio::time::sleep(period).await;
        latencies.lock().expect("poisoned").clear();
        tokio::time::sleep(Duration::from_secs(seconds)).await;
        let mut measured = std::mem::take(&mut *latencies.lock().expect("poisoned"));
        stop.cancel();
        let _ = working.await;
        let _ = scheduling.await;
        measured.sort_by(f64::total_cmp);
        let at = |q: f64| measured.get(((measured.len() as f64 - 1.0) * q) as usize).copied().unwrap_or(f64::NAN);

        // Idle: every schedule's next tick a year away.
        let yearly = Cadence::cron("0 0 1 1 *", "UTC");
        for i in 0..SCHEDULES {
            let spec = ScheduleSpec::new(yearly.clone());
            scheduler.put(ScheduleKey::new(None, &format!("s{i}")), &workflow, spec, false).await.expect("put");
        }
        // The runs still waiting from the ticks above are executed first, so the idle
        // figure is the idle worker's.
        let stop = stepwright::CancellationToken::new();
        let draining = {
            let (runner, stop) = (runner.clone(), stop.clone());
            tokio::spawn(async move { runner.run(stop).await })
        };
        let pending = stepwright::store::RunFilter {
            status: Some(stepwright::RunStatus::Pending),
            limit: Some(1),
            headers_only: true,
            ..Default::default()
        };
        let deadline = Instant::now() + Duration::from_secs(300);
        while !store.list_runs(pending.clone()).await.expect("list").is_empty() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        stop.cancel();
        let _ = draining.await;
        let stop = stepwright::CancellationToken::new();
        let idle = {
            let (scheduler, runner, stop) = (scheduler.clone(), runner.clone(), stop.clone());
            tokio::spawn(async move {
                let scheduling = scheduler.run(stop.clone());
                let working = runner.run(stop);
                let _ = tokio::join!(scheduling, working);
            })
        };
        tokio::time::sleep(Duration::from_secs(1)).await;
        let (cpu, wall) = (cpu_time(), Instant::now());
        tokio::time::sleep(Duration::from_secs(idle_seconds)).await;
        let idle_cpu = cpu_time().saturating_sub(cpu).as_secs_f64() * 1000.0 / wall.elapsed().as_secs_f64();
        stop.cancel();
        let _ = idle.await;
        Figures {
            ticks: measured.len(),
            p50_ms: at(0.5),
            p99_ms: at(0.99),
            max_ms: at(1.0),
            idle_cpu_ms_per_s: idle_cpu,
        }
    })
}
