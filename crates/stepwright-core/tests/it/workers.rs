//! Steps a step worker runs, used again: a replay gives them their recorded answers, a
//! recompute hands them to the workers anew (unless their effect is served).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use stepwright_core::store::task::{Claim, StoredTask, TaskAnswer, TaskLease, TaskState};
use stepwright_core::{
    Effect, Engine, EngineConfig, InMemoryStore, Node, RecomputeOptions, Record, RunStatus, SeededEntropy, StepChange,
    StepContext, Store, TaskRequest, TokioClock, Workflow, fn_step,
};

const T0: i64 = 1_700_000_000_000_000;

fn worker_step(id: &str, handler: &'static str, effect: Effect) -> Node {
    Node::step(
        id,
        fn_step(move |ctx: StepContext, input: Value| async move {
            let request = TaskRequest {
                queue: "py".into(),
                handler: handler.into(),
                input,
                lease_for: Duration::from_secs(30),
                schedule_to_start: None,
                concurrency: None,
                retry_is_safe: effect != Effect::Write,
                idempotency_key: None,
                at: None,
                push: None,
            };
            ctx.dispatch(request).await
        }),
    )
    .effect(effect)
}

/// What the test's worker answers to a task (changed between executions).
type Answers = Arc<Mutex<fn(&StoredTask) -> Value>>;

/// A step worker in the test: claims every task of queue `py` and answers `answer(task)`,
/// keeping what it was given.
fn serve<S: Store + 'static>(
    store: Arc<S>,
    clock: Arc<TokioClock>,
    answer: Answers,
    seen: Arc<Mutex<Vec<StoredTask>>>,
) -> tokio::task::JoinHandle<()> {
    use stepwright_core::Clock as _;
    tokio::spawn(async move {
        let claim = Claim {
            worker: "w1".into(),
            tenant: String::new(),
            queue: "py".into(),
            handlers: vec!["lookup".into(), "send".into()],
            max: 8,
        };
        let tasks = store.tasks().expect("the in-memory store keeps tasks");
        loop {
            let claimed = tasks.claim_tasks(&claim, clock.now()).await.expect("claimed");
            if claimed.is_empty() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            for task in claimed {
                let output = (answer.lock().unwrap())(&task);
                let lease = TaskLease { task: task.spec.id.clone(), token: task.lease_token };
                seen.lock().unwrap().push(task);
                let state =
                    tasks.answer_task(&lease, TaskAnswer::Complete(output), clock.now()).await.expect("answered");
                assert_eq!(state, TaskState::Completed);
            }
        }
    })
}

#[tokio::test]
async fn a_replay_serves_worker_answers_and_a_recompute_dispatches_them_anew_but_never_a_write() {
    let store = Arc::new(InMemoryStore::new());
    let clock = Arc::new(TokioClock::starting_at(stepwright_core::Timestamp::from_micros(T0)));
    let engine = Engine::builder()
        .store(store.clone() as Arc<dyn Store>)
        .clock(clock.clone())
        .entropy(Arc::new(SeededEntropy::new(3)))
        .config(EngineConfig::default())
        .build();
    let workflow = Workflow::builder("quote")
        .step(worker_step("lookup", "lookup", Effect::Read))
        .step(worker_step("send", "send", Effect::Write))
        .build()
        .unwrap();
    let first: fn(&StoredTask) -> Value = |task| match task.spec.handler.as_str() {
        "lookup" => json!({ "price": 1 }),
        _ => json!({ "sent": task.spec.input }),
    };
    let answer = Arc::new(Mutex::new(first));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let worker = serve(store.clone(), clock.clone(), answer.clone(), seen.clone());

    let run = engine.start(&workflow, json!({ "sku": "a" })).await.unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!(run.output, Some(json!({ "sent": { "price": 1 } })));
    assert_eq!(seen.lock().unwrap().len(), 2);
    let journal = store.load(run.run_id).await.unwrap().entries.len();

    // A replay re-executes code, not workers: both answers come from the journal.
    let replay = engine.replay(&workflow, run.run_id).await.unwrap();
    assert!(replay.identical, "{:?}", replay.steps);
    assert_eq!(seen.lock().unwrap().len(), 2, "a replay dispatches nothing");

    // The worker's lookup now answers otherwise: a recompute asks it again (a task of its
    // own, marked as a recompute's) and serves the write from the journal.
    *answer.lock().unwrap() = |task| match task.spec.handler.as_str() {
        "lookup" => json!({ "price": 2 }),
        _ => json!({ "sent": "twice!" }),
    };
    let report = engine.recompute(&workflow, run.run_id, RecomputeOptions::default()).await.unwrap();
    let seen_now = seen.lock().unwrap().clone();
    assert_eq!(seen_now.len(), 3, "only the read step went to a worker again: {seen_now:?}");
    let again = &seen_now[2];
    assert_eq!((again.spec.handler.as_str(), again.spec.recompute, again.run), ("lookup", true, run.run_id));
    assert_ne!(again.spec.id, seen_now[0].spec.id, "a task of its own, not the run's");
    let change = |path: &str| report.steps.iter().find(|s| s.path.as_str() == path).map(|s| s.change.clone());
    assert_eq!(change("lookup"), Some(StepChange::ValueChanged { diff: vec!["/price: 1 → 2".into()] }));
    assert_eq!(change("send"), Some(StepChange::Served), "a write is never repeated");
    assert_eq!(report.recomputed_output, Some(json!({ "sent": { "price": 1 } })), "the served write's answer");

    // The run itself is untouched: its journal, and the tasks it waits on (none).
    let after = store.load(run.run_id).await.unwrap();
    assert_eq!(after.entries.len(), journal);
    assert!(!after.entries.iter().any(|e| matches!(&e.record, Record::Dispatched { task, .. } if task.recompute)));
    worker.abort();
}

/// A fenced call whose work hands a task to a step worker (an agent calling a `worker:` tool)
/// commits its intent in the task's own commit: a crash between the two cannot leave an
/// intent with no task, which would make the call look as if its effect might have happened.
#[tokio::test]
async fn a_dispatching_calls_intent_goes_in_its_tasks_commit() {
    use stepwright_core::CallKind;
    let store = Arc::new(crate::durability::Counting::new());
    let clock = Arc::new(TokioClock::starting_at(stepwright_core::Timestamp::from_micros(T0)));
    let engine = Engine::builder()
        .store(store.clone() as Arc<dyn Store>)
        .clock(clock.clone())
        .entropy(Arc::new(SeededEntropy::new(3)))
        .build();
    let answer: Answers = Arc::new(Mutex::new(|_| json!({ "charged": true })));
    let worker = serve(store.clone(), clock.clone(), answer, Arc::new(Mutex::new(Vec::new())));
    let workflow = Workflow::builder("agentish")
        .step(Node::step(
            "turn",
            fn_step(|ctx: StepContext, input: Value| async move {
                let kind = CallKind::Action { effect: Effect::Write, safe_to_retry: false };
                let inner = ctx.clone();
                let output = ctx
                    .call_dispatching("tool.0", kind, true, |info| async move {
                        let request = TaskRequest {
                            queue: "py".into(),
                            handler: "send".into(),
                            input,
                            lease_for: Duration::from_secs(30),
                            schedule_to_start: None,
                            concurrency: None,
                            retry_is_safe: false,
                            idempotency_key: info.idempotency_key.clone(),
                            at: Some(info.path.clone()),
                            push: None,
                        };
                        inner.dispatch(request).await
                    })
                    .await?;
                Ok((*output).clone())
            }),
        ))
        .build()
        .unwrap();
    let run = engine.start(&workflow, json!({ "to": "ada" })).await.unwrap();
    assert_eq!(run.output, Some(json!({ "charged": true })));
    let batches = store.batches.lock().unwrap().clone();
    let at_call = |b: &Vec<(String, Record)>, kind: fn(&Record) -> bool| {
        b.iter().any(|(path, record)| path == "turn/tool.0" && kind(record))
    };
    let intent = |r: &Record| matches!(r, Record::Intent { .. });
    let dispatched = |r: &Record| matches!(r, Record::Dispatched { .. });
    let with_intent: Vec<_> = batches.iter().filter(|b| at_call(b, intent)).collect();
    assert_eq!(with_intent.len(), 1, "{batches:?}");
    assert!(at_call(with_intent[0], dispatched), "the intent and the task in one commit: {batches:?}");
    worker.abort();
}

/// A claim parked in the same process gets a dispatched task handed to it: born leased to
/// its worker (token 1) in the task's own commit, with no claim of its own. Only a claim that
/// may take the task is taken (namespace, queue, handler and version), one task per claim;
/// a claim that left the line is never taken, and one taken as it leaves still gets its task.
#[tokio::test]
async fn a_parked_claim_is_handed_its_task_at_dispatch() {
    use stepwright_core::store::task::ParkedClaim;
    let store = Arc::new(InMemoryStore::new());
    let signals = store.task_signals().expect("the in-memory store has task signals");
    let claim = |worker: &str, tenant: &str, queue: &str, handlers: &[&str]| ParkedClaim {
        worker: worker.into(),
        tenant: tenant.into(),
        queue: queue.into(),
        handlers: handlers.iter().map(|h| (*h).to_owned()).collect(),
    };
    let _other_tenant = signals.park(claim("w-other", "globex", "py", &["send"]));
    let _other_queue = signals.park(claim("w-queue", "", "ts", &["send"]));
    let _pinned = signals.park(claim("w-v2", "", "py", &["lookup@2"]));
    let left = signals.park(claim("w-left", "", "py", &["send"]));
    assert_eq!(left.leave(Duration::from_millis(1)).await, None);
    let mut waiting = signals.park(claim("w-1", "", "py", &["lookup", "send"]));

    let clock = Arc::new(TokioClock::starting_at(stepwright_core::Timestamp::from_micros(T0)));
    let engine = Engine::builder().store(store.clone() as Arc<dyn Store>).clock(clock.clone()).build();
    let workflow = Workflow::builder("handed").step(worker_step("send", "send", Effect::Write)).build().unwrap();
    let run = {
        let (engine, workflow) = (engine.clone(), workflow.clone());
        tokio::spawn(async move { engine.start(&workflow, json!({ "to": "ada" })).await })
    };
    let task =
        tokio::time::timeout(Duration::from_secs(5), waiting.matched()).await.expect("handed over").expect("a task");
    assert_eq!((task.state, task.worker.as_deref(), task.lease_token), (TaskState::Claimed, Some("w-1"), 1));
    assert_eq!(task.spec.leased_to.as_deref(), Some("w-1"));
    let stored = store.tasks().unwrap().settle_task(&task.spec.id, stepwright_core::Clock::now(&*clock)).await.unwrap();
    assert_eq!(stored.as_ref(), Some(&task), "what the claim got is the committed row");
    // Nobody else can claim it; its worker answers under token 1.
    let tasks = store.tasks().unwrap();
    let other = Claim {
        worker: "w-2".into(),
        tenant: String::new(),
        queue: "py".into(),
        handlers: vec!["send".into()],
        max: 5,
    };
    assert!(tasks.claim_tasks(&other, stepwright_core::Clock::now(&*clock)).await.unwrap().is_empty());
    let lease = TaskLease { task: task.spec.id.clone(), token: 1 };
    let answered =
        tasks.answer_task(&lease, TaskAnswer::Complete(json!({ "sent": true })), stepwright_core::Clock::now(&*clock));
    assert_eq!(answered.await.unwrap(), TaskState::Completed);
    assert_eq!(run.await.unwrap().unwrap().output, Some(json!({ "sent": true })));
    // The claims that could not take it are still in line; a second dispatch takes none of
    // them for another queue's handler.
    assert!(signals.take_parked("", "py", "send").is_none(), "w-1 got one task; w-v2 offers another handler");
    assert!(signals.take_parked("", "py", "lookup@3").is_none(), "nor another version");
    assert_eq!(signals.take_parked("", "py", "lookup@2").map(|m| m.worker), Some("w-v2".into()));
    assert_eq!(signals.take_parked("globex", "py", "send").map(|m| m.worker), Some("w-other".into()));
}

/// An answer written in this process hands the answered task to the step waiting for it,
/// which then reads nothing back; a task that is not final yet (claimed) only wakes it. While
/// the step waits, the answer's writer is told so (and need not wake the run); once it
/// stops waiting, it is not.
#[tokio::test]
async fn an_answer_written_here_is_handed_to_the_step_waiting_for_it() {
    use stepwright_core::store::task::{TaskId, TaskSpec};
    let store = InMemoryStore::new();
    let signals = store.task_signals().expect("the in-memory store has task signals");
    let id = TaskId::new("t-handed");
    assert!(!signals.is_awaited(&id), "nobody waits yet");
    let waiter = signals.on_answer(&id);
    assert!(signals.is_awaited(&id));
    let spec = TaskSpec {
        id: id.clone(),
        queue: "py".into(),
        handler: "send".into(),
        input: json!({}),
        idempotency_key: None,
        lease_ms: 30_000,
        schedule_to_start_ms: None,
        concurrency: None,
        details: None,
        recompute: false,
        leased_to: Some("w-1".into()),
    };
    let at = stepwright_core::Timestamp::from_micros(T0);
    let run = stepwright_core::RunId::from_bytes([7; 16]);
    let mut task = StoredTask::born(spec, run, stepwright_core::StepPath::new("send"), 1, None, "w".into(), at);
    assert_eq!(task.state, TaskState::Claimed);

    let woken = waiter.notify().notified_owned();
    tokio::pin!(woken);
    woken.as_mut().enable();
    signals.answered_as(&task);
    tokio::time::timeout(Duration::from_secs(1), woken).await.expect("a claimed task's change wakes the step");
    assert_eq!(waiter.take(), None, "but hands nothing over: it is not answered");

    task.state = TaskState::Completed;
    task.output = Some(json!({ "sent": true }));
    let woken = waiter.notify().notified_owned();
    tokio::pin!(woken);
    woken.as_mut().enable();
    signals.answered_as(&task);
    tokio::time::timeout(Duration::from_secs(1), woken).await.expect("the answer wakes the step");
    assert_eq!(waiter.take(), Some(task.clone()), "and hands it the task as written");
    assert_eq!(waiter.take(), None, "once");

    drop(waiter);
    assert!(!signals.is_awaited(&id), "a step that stopped waiting is not counted");
    signals.answered_as(&task);
    assert_eq!(signals.on_answer(&id).take(), None, "an answer nobody waited for is not kept");
}

/// A run holding for its worker lends its runner slot: with one slot and a hold longer than
/// the test, the runner still dispatches every run's task (up to four waiting per slot),
/// and the runs complete once a worker answers.
#[tokio::test]
async fn a_run_holding_for_a_worker_lends_its_runner_slot() {
    use stepwright_core::store::task::TaskFilter;
    let store = Arc::new(InMemoryStore::new());
    let clock = Arc::new(TokioClock::starting_at(stepwright_core::Timestamp::from_micros(T0)));
    let config = EngineConfig { task_hold: Duration::from_secs(600), ..EngineConfig::default() };
    let engine = Engine::builder()
        .store(store.clone() as Arc<dyn Store>)
        .clock(clock.clone())
        .entropy(Arc::new(SeededEntropy::new(5)))
        .config(config)
        .build();
    let workflow = Workflow::builder("held").step(worker_step("lookup", "lookup", Effect::Read)).build().unwrap();
    let mut runs = Vec::new();
    for i in 0..7 {
        runs.push(engine.create(&workflow, json!({ "i": i }), Default::default()).await.unwrap().id);
    }
    let runner = stepwright_core::Runner::new(engine.clone())
        .register(&workflow)
        .max_concurrent(1)
        .poll_interval(Duration::from_millis(20));
    let stop = tokio_util::sync::CancellationToken::new();
    let running = tokio::spawn({
        let stop = stop.clone();
        async move { runner.run(stop).await }
    });
    let tasks = store.tasks().expect("the in-memory store keeps tasks");
    let dispatched =
        || async { tasks.list_tasks(&TaskFilter { limit: 100, ..TaskFilter::default() }).await.unwrap().len() };
    // One slot, four runs waiting on it: five tasks out, each run holding for ten minutes.
    tokio::time::timeout(Duration::from_secs(30), async {
        while dispatched().await < 5 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("runs holding for a worker lend their slot to the next runs");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(dispatched().await, 5, "at most four runs wait per slot");

    let answer: Answers = Arc::new(Mutex::new(|_| json!({ "price": 1 })));
    let worker = serve(store.clone(), clock.clone(), answer, Arc::new(Mutex::new(Vec::new())));
    tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let mut done = 0;
            for run in &runs {
                done += usize::from(store.load(*run).await.unwrap().record.status == RunStatus::Completed);
            }
            if done == runs.len() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("every run completes once a worker answers");
    stop.cancel();
    running.await.unwrap().unwrap();
    worker.abort();
}
