//! The runner loop and leases: due runs are picked up, deadlines applied, work shared
//! between runners with no run executed twice, and a worker that loses its lease stops.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use stepwright_core::{
    ApprovalGate, Clock, Engine, EngineConfig, EngineError, InMemoryStore, Node, RunId, RunStatus, Runner,
    SeededEntropy, StepContext, Store, TimeoutAction, TokioClock, Workflow, fn_step,
};
use stepwright_testkit::{T0, engine};

fn counting_workflow(counts: Arc<Mutex<HashMap<RunId, usize>>>) -> Workflow {
    Workflow::builder("counted")
        .step(Node::step(
            "work",
            fn_step(move |ctx: StepContext, x: i64| {
                let counts = counts.clone();
                async move {
                    *counts.lock().unwrap().entry(ctx.run_id()).or_default() += 1;
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    Ok(x + 1)
                }
            }),
        ))
        .build()
        .unwrap()
}

fn engine_on(store: Arc<InMemoryStore>, clock: Arc<TokioClock>, worker: &str, config: EngineConfig) -> Engine {
    Engine::builder()
        .store(store as Arc<dyn Store>)
        .clock(clock)
        .entropy(Arc::new(SeededEntropy::new(9)))
        .worker_id(worker)
        .config(config)
        .build()
}

/// An engine over a store that counts its calls.
fn counted_engine(store: &Arc<crate::durability::Counting>, worker: &str, config: EngineConfig) -> Engine {
    Engine::builder()
        .store(store.clone() as Arc<dyn Store>)
        .clock(Arc::new(TokioClock::starting_at(T0)))
        .entropy(Arc::new(SeededEntropy::new(9)))
        .worker_id(worker)
        .config(config)
        .build()
}

/// Runs `runner`'s loop for `how_long` (of tokio's clock), then stops it.
async fn run_for(runner: &Runner, how_long: Duration) {
    let stop = tokio_util::sync::CancellationToken::new();
    let stopper = {
        let stop = stop.clone();
        tokio::spawn(async move {
            tokio::time::sleep(how_long).await;
            stop.cancel();
        })
    };
    runner.run(stop).await.unwrap();
    stopper.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn two_runners_share_the_work_and_run_each_run_once() {
    let store = Arc::new(InMemoryStore::new());
    let clock = Arc::new(TokioClock::starting_at(T0));
    let counts = Arc::new(Mutex::new(HashMap::new()));
    let workflow = counting_workflow(counts.clone());
    let a = engine_on(store.clone(), clock.clone(), "a", EngineConfig::default());
    let b = engine_on(store.clone(), clock.clone(), "b", EngineConfig::default());
    let mut runs = Vec::new();
    for i in 0..40 {
        runs.push(a.create(&workflow, json!(i), Default::default()).await.unwrap().id);
    }
    let ra = Runner::new(a).register(&workflow).max_concurrent(16);
    let rb = Runner::new(b).register(&workflow).max_concurrent(16);
    let (mut done_a, mut done_b) = (0, 0);
    while done_a + done_b < runs.len() {
        let (xa, xb) = tokio::join!(ra.tick(), rb.tick());
        done_a += xa.unwrap().len();
        done_b += xb.unwrap().len();
    }
    assert!(done_a > 0 && done_b > 0, "both runners took work ({done_a} + {done_b})");
    let counts = counts.lock().unwrap().clone();
    for run in &runs {
        assert_eq!(counts.get(run), Some(&1), "run {run} executed exactly once");
        let record = store.load(*run).await.unwrap().record;
        assert_eq!(record.status, RunStatus::Completed);
        assert_eq!(record.lease, None);
    }
}

#[tokio::test(start_paused = true)]
async fn a_runner_resumes_due_timers_and_applies_deadlines_while_nothing_runs() {
    let (engine, store) = engine();
    let sleepy = Workflow::builder("sleepy")
        .step(Node::sleep("nap", Duration::from_secs(3600)))
        .step(Node::step("after", fn_step(|_c, _x: Value| async move { Ok("woke") })))
        .build()
        .unwrap();
    let gated = Workflow::builder("gated")
        .step(
            Node::step("go", fn_step(|_c, _x: Value| async move { Ok("approved by the deadline") }))
                .requires_approval(ApprovalGate::new("ok?").timeout(Duration::from_secs(7200), TimeoutAction::Approve)),
        )
        .build()
        .unwrap();
    let nap = engine.start(&sleepy, json!(null)).await.unwrap();
    let gate = engine.start(&gated, json!(null)).await.unwrap();
    assert_eq!((nap.status, gate.status), (RunStatus::Suspended, RunStatus::Suspended));
    let runner = Runner::new(engine.clone()).register(&sleepy).register(&gated);
    assert!(runner.tick().await.unwrap().is_empty(), "nothing is due yet");
    tokio::time::sleep(Duration::from_secs(3600)).await;
    let first = runner.tick().await.unwrap();
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].1.as_ref().unwrap().output, Some(json!("woke")));
    tokio::time::sleep(Duration::from_secs(3600)).await;
    let second = runner.tick().await.unwrap();
    assert_eq!(second[0].0, gate.run_id);
    assert_eq!(second[0].1.as_ref().unwrap().output, Some(json!("approved by the deadline")));
    assert_eq!(store.load(gate.run_id).await.unwrap().record.status, RunStatus::Completed);
}

#[tokio::test(start_paused = true)]
async fn the_run_loop_picks_up_work_until_stopped() {
    let (engine, store) = engine();
    let counts = Arc::new(Mutex::new(HashMap::new()));
    let workflow = counting_workflow(counts.clone());
    let run = engine.create(&workflow, json!(1), Default::default()).await.unwrap().id;
    let runner = Runner::new(engine.clone()).register(&workflow).poll_interval(Duration::from_millis(100));
    run_for(&runner, Duration::from_secs(1)).await;
    assert_eq!(store.load(run).await.unwrap().record.output, Some(json!(2)));
}

/// A busy runner claims in batches: a finished run does not send a claim of one to the
/// store; the next claim waits until a quarter of the slots are free and takes them all.
#[tokio::test(start_paused = true)]
async fn a_busy_runner_claims_in_batches_not_once_per_finished_run() {
    const RUNS: u64 = 64;
    let store = Arc::new(crate::durability::Counting::new());
    let engine = counted_engine(&store, "busy", EngineConfig::default());
    // Runs take 1 to 97 ms, spread, so they finish one by one.
    let workflow = Workflow::builder("uneven")
        .step(Node::step(
            "work",
            fn_step(|_c, x: u64| async move {
                tokio::time::sleep(Duration::from_millis(1 + (x * 7919) % 97)).await;
                Ok(x)
            }),
        ))
        .build()
        .unwrap();
    let mut runs = Vec::new();
    for n in 0..RUNS {
        runs.push(engine.create(&workflow, json!(n), Default::default()).await.unwrap().id);
    }
    // No poll during the test: only finished runs (and the start) make the runner claim.
    let runner =
        Runner::new(engine.clone()).register(&workflow).max_concurrent(16).poll_interval(Duration::from_secs(3600));
    let stop = tokio_util::sync::CancellationToken::new();
    let watcher = {
        let (stop, store, runs) = (stop.clone(), store.clone(), runs.clone());
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(1)).await;
                let mut done = 0;
                for run in &runs {
                    done += usize::from(store.inner.load(*run).await.unwrap().record.status == RunStatus::Completed);
                }
                if done == runs.len() {
                    stop.cancel();
                    return;
                }
            }
        })
    };
    runner.run(stop).await.unwrap();
    watcher.await.unwrap();
    let claims = store.claims.load(std::sync::atomic::Ordering::SeqCst);
    // The start, then a claim each time 4 of the 16 slots are free: about 64 / 4.
    assert!(claims <= 20, "{claims} claims for {RUNS} runs: one per finished run would be ~{RUNS}");
    assert!(claims >= 4, "the runner claimed as slots freed: {claims}");
}

#[tokio::test(start_paused = true)]
async fn a_worker_that_loses_its_lease_stops_and_writes_nothing_more() {
    let store = Arc::new(InMemoryStore::new());
    let clock = Arc::new(TokioClock::starting_at(T0));
    let config = EngineConfig { lease_for: Duration::from_secs(3), ..EngineConfig::default() };
    let a = engine_on(store.clone(), clock.clone(), "a", config.clone());
    let workflow = Workflow::builder("slow")
        .step(Node::step(
            "long",
            fn_step(|ctx: StepContext, _x: Value| async move {
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_secs(60)) => Ok("finished"),
                    () = ctx.cancellation().cancelled() => Err(stepwright_core::StepError::cancelled("lost the lease")),
                }
            }),
        ))
        .build()
        .unwrap();
    let run = a.create(&workflow, json!(null), Default::default()).await.unwrap().id;
    let executing = {
        let a = a.clone();
        let workflow = workflow.clone();
        tokio::spawn(async move { a.resume(&workflow, run).await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Worker b steals the run as if a's lease had expired (a paused, a partition).
    let stolen =
        store.claim(run, "b", clock.now().plus(Duration::from_secs(10)), Duration::from_secs(60)).await.unwrap();
    assert_eq!(stolen.token, 2);
    let entries_before = store.entries(run).len();
    let result = executing.await.unwrap();
    assert!(matches!(result, Err(EngineError::LeaseLost { .. })), "{result:?}");
    assert_eq!(store.entries(run).len(), entries_before, "the old worker wrote nothing after losing the lease");
    assert_eq!(store.load(run).await.unwrap().record.lease.map(|l| l.owner), Some("b".to_owned()));
}

#[tokio::test(start_paused = true)]
async fn resume_refuses_a_run_another_worker_holds() {
    let store = Arc::new(InMemoryStore::new());
    let clock = Arc::new(TokioClock::starting_at(T0));
    let a = engine_on(store.clone(), clock.clone(), "a", EngineConfig::default());
    let b = engine_on(store.clone(), clock.clone(), "b", EngineConfig::default());
    let workflow = counting_workflow(Arc::new(Mutex::new(HashMap::new())));
    let run = a.create(&workflow, json!(1), Default::default()).await.unwrap().id;
    store.claim(run, "a", clock.now(), Duration::from_secs(30)).await.unwrap();
    let refused = b.resume(&workflow, run).await.unwrap_err();
    assert!(matches!(refused, EngineError::Leased { ref owner, .. } if owner == "a"), "{refused}");
    tokio::time::sleep(Duration::from_secs(31)).await;
    assert_eq!(b.resume(&workflow, run).await.unwrap().output, Some(json!(2)), "an expired lease can be taken over");
}

/// A run whose definition the runner cannot find stops with the reason (for the worker's
/// log), not silently: no resolver, a resolver that fails and says why, and a resolver that
/// builds another definition (its hash is reported). The run stays resumable, and a runner
/// that can resolve it finishes it.
#[tokio::test(start_paused = true)]
async fn a_run_without_a_definition_stops_with_the_reason() {
    let (engine, _store) = engine();
    let counts = Arc::new(Mutex::new(HashMap::new()));
    let workflow = counting_workflow(counts.clone());
    let run = engine.create(&workflow, json!(1), Default::default()).await.unwrap().id;
    // A runner that could not execute the run keeps its lease until it lapses (a back-off:
    // it does not claim the run again at every poll); the next runner claims it after that.
    let lapse = || tokio::time::advance(EngineConfig::default().lease_for + Duration::from_secs(1));
    let stopped = |outcomes: Vec<stepwright_core::RunOutcome>| -> EngineError {
        let (id, result) = outcomes.into_iter().next().expect("the run was claimed");
        assert_eq!(id, run);
        result.expect_err("the run cannot execute")
    };

    let error = stopped(Runner::new(engine.clone()).tick().await.unwrap());
    assert!(matches!(&error, EngineError::Unresolved { reason, .. } if reason.contains("no registered workflow")));

    lapse().await;
    let failing: stepwright_core::DefinitionResolver =
        Arc::new(|_record| Box::pin(async { Err("its MCP server would not start".to_owned()) }));
    let error = stopped(Runner::new(engine.clone()).resolve_with(failing).tick().await.unwrap());
    assert!(error.to_string().contains("its MCP server would not start"), "{error}");

    lapse().await;
    let other = Workflow::builder("counted").version("2").step(Node::sleep("nap", Duration::from_secs(1))).build();
    let other = other.unwrap();
    let wrong: stepwright_core::DefinitionResolver = Arc::new(move |_record| {
        let other = other.clone();
        Box::pin(async move { Ok(other) })
    });
    let error = stopped(Runner::new(engine.clone()).resolve_with(wrong).tick().await.unwrap());
    assert!(matches!(error, EngineError::DefinitionMismatch { .. }), "{error}");
    assert!(counts.lock().unwrap().is_empty(), "nothing executed");

    lapse().await;
    let right: stepwright_core::DefinitionResolver = Arc::new(move |_record| {
        let workflow = workflow.clone();
        Box::pin(async move { Ok(workflow) })
    });
    let outcomes = Runner::new(engine.clone()).resolve_with(right).tick().await.unwrap();
    assert_eq!(outcomes[0].1.as_ref().unwrap().status, RunStatus::Completed);
}

/// An idle worker asks the store at most once per poll interval (a second by default),
/// its look for runs orphaned by dead processes included.
#[tokio::test(start_paused = true)]
async fn an_idle_runner_asks_the_store_at_most_once_a_second() {
    let store = Arc::new(crate::durability::Counting::new());
    let engine = counted_engine(&store, "idle", EngineConfig::default());
    let runner = Runner::new(engine);
    run_for(&runner, Duration::from_secs(60)).await;
    let calls = store.calls.load(std::sync::atomic::Ordering::SeqCst);
    let claims = store.claims.load(std::sync::atomic::Ordering::SeqCst);
    // One call per second: a look at 0 s and one at 60 s, and between them a second's
    // wait per call (a look that also sought orphans made two, then waited two seconds).
    // Without the pacing it is 68: a claim every second and an orphan look every ten.
    assert!(calls <= 62, "{calls} store calls in an idle minute ({claims} claims)");
    assert!(calls >= 40, "it still looks for work every second or two: {calls}");
}

/// However many runs a worker executes, it renews their leases in one store call per beat
/// (a third of the lease), and the leases hold: another worker polling all along takes
/// none of the runs, though every step outlasts the lease many times.
#[tokio::test(start_paused = true)]
async fn a_worker_renews_all_its_leases_in_one_call_per_beat() {
    const RUNS: usize = 16;
    let store = Arc::new(crate::durability::Counting::new());
    let config = EngineConfig { lease_for: Duration::from_secs(3), ..EngineConfig::default() };
    let on = |worker: &str| counted_engine(&store, worker, config.clone());
    let executed = Arc::new(Mutex::new(HashMap::<RunId, usize>::new()));
    let workflow = {
        let executed = executed.clone();
        Workflow::builder("long")
            .step(Node::step(
                "work",
                fn_step(move |ctx: StepContext, _x: Value| {
                    *executed.lock().unwrap().entry(ctx.run_id()).or_default() += 1;
                    async move {
                        tokio::time::sleep(Duration::from_secs(60)).await;
                        Ok("done")
                    }
                }),
            ))
            .build()
            .unwrap()
    };
    let (a, b) = (on("a"), on("b"));
    let mut runs = Vec::new();
    for i in 0..RUNS {
        runs.push(a.create(&workflow, json!(i), Default::default()).await.unwrap().id);
    }
    let (first, second) = (
        Runner::new(a).register(&workflow).max_concurrent(RUNS),
        Runner::new(b).register(&workflow).poll_interval(Duration::from_millis(500)),
    );
    let stop = tokio_util::sync::CancellationToken::new();
    let outcomes = tokio::select! {
        // Worker a claims first (its claim completes at its first poll); b then polls.
        biased;
        outcomes = first.tick() => outcomes.unwrap(),
        _ = second.run(stop.clone()) => unreachable!("the second runner runs until stopped"),
    };
    stop.cancel();
    assert_eq!(outcomes.len(), RUNS, "worker a executed every run");
    for (run, result) in &outcomes {
        assert_eq!(result.as_ref().unwrap().status, RunStatus::Completed, "{run}");
    }
    assert!(executed.lock().unwrap().values().all(|n| *n == 1), "no run was taken over and executed again");
    let renewals = store.renewals.load(std::sync::atomic::Ordering::SeqCst);
    // 60 s of work, a beat a second: about 60 calls for all 16 runs (one per run would be ~960).
    assert!((50..=70).contains(&renewals), "{renewals} renewals for {RUNS} runs over 60 s");
}

/// A runner that claims a run whose holder's lease lapsed while it executed (a worker on
/// another host that died or stalled) says whom it took the run from — what the lease
/// takeover metric counts; a run it claims fresh is taken from nobody.
#[tokio::test(start_paused = true)]
async fn a_runner_says_whom_it_took_a_lapsed_run_from() {
    let store = Arc::new(InMemoryStore::new());
    let clock = Arc::new(TokioClock::starting_at(T0));
    let engine = engine_on(store.clone(), clock.clone(), "here", EngineConfig::default());
    let workflow = counting_workflow(Arc::new(Mutex::new(HashMap::new())));
    let abandoned = engine.create(&workflow, json!(1), Default::default()).await.unwrap().id;
    let fresh = engine.create(&workflow, json!(2), Default::default()).await.unwrap().id;
    let lease = store.claim(abandoned, "elsewhere:7", clock.now(), Duration::from_secs(3)).await.unwrap();
    let running = stepwright_core::store::StatusUpdate {
        status: RunStatus::Running,
        output: None,
        error: None,
        at: clock.now(),
        wake_at: None,
        fence: Some(lease.token),
    };
    store.set_status(abandoned, running).await.unwrap();
    tokio::time::sleep(Duration::from_secs(4)).await;

    let taken = Arc::new(Mutex::new(Vec::new()));
    let log: stepwright_core::RunnerLog = {
        let taken = taken.clone();
        Arc::new(move |event| {
            if let stepwright_core::RunnerEvent::TookOver { run, from } = event {
                taken.lock().unwrap().push((run, from.to_owned()));
            }
        })
    };
    let outcomes = Runner::new(engine).register(&workflow).log_to(log).tick().await.unwrap();
    assert_eq!(outcomes.len(), 2, "both runs executed");
    assert_eq!(*taken.lock().unwrap(), [(abandoned, "elsewhere:7".to_owned())], "not {fresh}");
    assert_eq!(store.load(abandoned).await.unwrap().record.status, RunStatus::Completed);
}
