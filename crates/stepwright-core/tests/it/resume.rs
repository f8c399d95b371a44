//! Resume from the journal: an interrupted run, continued, equals an uninterrupted one; and
//! interrupts, checkpoints and the effect fence across resumes.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use serde_json::{Value, json};
use stepwright_core::{
    Branch, Caller, Decision, Effect, Engine, EngineError, ErrorCode, Expr, Fork, InMemoryStore, InterruptRequest,
    Loop, Node, OnFailure, Outcome, Record, RetryPolicy, RunId, RunStatus, SeededEntropy, StartOptions, Step,
    StepContext, StepError, Store, TokioClock, Verdict, Workflow, dyn_fn_step, fn_step,
};
use stepwright_testkit::{Counter, Log, T0, completed_paths, engine, records_at};

#[derive(Debug, Clone)]
enum Shape {
    Add(i64),
    Fork(usize),
    Map(usize),
    Loop(u32),
    Retry,
    Branch,
}

fn shape() -> impl Strategy<Value = Shape> {
    prop_oneof![
        (-5i64..5).prop_map(Shape::Add),
        (1usize..4).prop_map(Shape::Fork),
        (0usize..4).prop_map(Shape::Map),
        (1u32..4).prop_map(Shape::Loop),
        Just(Shape::Retry),
        Just(Shape::Branch),
    ]
}

/// A leaf that logs each execution of its path, then computes.
fn leaf(id: &str, log: &Log, f: fn(i64, u32) -> Result<i64, StepError>) -> Node {
    let log = log.clone();
    Node::step(
        id,
        fn_step(move |ctx: StepContext, x: i64| {
            let log = log.clone();
            async move {
                log.push(ctx.path().as_str());
                // Yield so that fork paths interleave and crashes land mid-fan-out.
                tokio::task::yield_now().await;
                f(x, ctx.attempt())
            }
        }),
    )
}

#[allow(clippy::needless_pass_by_value)] // The merge signature hands results over by value.
fn sum_merge(results: Vec<stepwright_core::PathResult>) -> Result<Value, StepError> {
    Ok(json!(
        results
            .iter()
            .map(|r| match r {
                stepwright_core::PathResult::Completed(v) => v.as_i64().unwrap_or(0),
                _ => 0,
            })
            .sum::<i64>()
    ))
}

fn build(shapes: &[Shape], log: &Log) -> Workflow {
    let mut builder = Workflow::builder("prop");
    for (index, shape) in shapes.iter().enumerate() {
        let id = format!("s{index}");
        let node: Node = match shape {
            Shape::Add(n) => {
                let n = *n;
                let f: fn(i64, u32) -> Result<i64, StepError> = match n {
                    -5 => |x, _| Ok(x - 5),
                    -4 => |x, _| Ok(x - 4),
                    -3 => |x, _| Ok(x - 3),
                    -2 => |x, _| Ok(x - 2),
                    -1 => |x, _| Ok(x - 1),
                    0 => |x, _| Ok(x),
                    1 => |x, _| Ok(x + 1),
                    2 => |x, _| Ok(x + 2),
                    3 => |x, _| Ok(x + 3),
                    _ => |x, _| Ok(x + 4),
                };
                leaf(&id, log, f)
            }
            Shape::Fork(paths) => {
                let mut fork = Fork::new(&id).merge(sum_merge);
                for p in 0..*paths {
                    fork = fork.path([leaf("a", log, |x, _| Ok(x + 1)), leaf(&format!("b{p}"), log, |x, _| Ok(x * 2))]);
                }
                fork.into()
            }
            Shape::Map(items) => {
                let items = *items as i64;
                Fork::map(
                    &id,
                    Expr::new(move |s| {
                        let x = s.output_or_input();
                        (0..items).map(|i| json!(x + i)).collect()
                    }),
                    "item",
                    [leaf("inc", log, |x, _| Ok(x + 1))],
                )
                .concurrency(2)
                .merge(sum_merge)
                .into()
            }
            Shape::Loop(times) => {
                let times = *times;
                Loop::new(&id, 10, [leaf("step", log, |x, _| Ok(x + 3))])
                    .until(Expr::new(move |s| {
                        let iteration = s.var("loop").unwrap()["iteration"].as_u64().unwrap();
                        if iteration >= u64::from(times) { Verdict::done("enough") } else { Verdict::again("more") }
                    }))
                    .into()
            }
            Shape::Retry => leaf(&id, log, |x, attempt| {
                if attempt == 1 {
                    Err(StepError::new(ErrorCode::new("flaky"), "first try fails").retryable(true))
                } else {
                    Ok(x * 3)
                }
            })
            .retry(RetryPolicy::new(3).initial_delay(Duration::from_millis(10))),
            Shape::Branch => Branch::new(&id)
                .when(Expr::new(|s| s.output_or_input() % 2 == 0), [leaf("even", log, |x, _| Ok(x + 10))])
                .otherwise([leaf("odd", log, |x, _| Ok(x - 10))])
                .into(),
        };
        builder = builder.step(node);
    }
    builder.build().unwrap()
}

/// The previous step's output as a number: the last bound output, else the input.
trait LastNumber {
    fn output_or_input(&self) -> i64;
}

impl LastNumber for stepwright_core::Scope {
    fn output_or_input(&self) -> i64 {
        let json = self.to_json();
        let steps = json["steps"].as_object().unwrap();
        let last = (0..100).rev().find_map(|i| steps.get(&format!("s{i}")));
        last.map_or_else(|| self.input().as_i64().unwrap(), |s| s["output"].as_i64().unwrap())
    }
}

fn engine_over(store: Arc<InMemoryStore>) -> Engine {
    engine_at(store, Arc::new(TokioClock::starting_at(T0)))
}

/// Engines that stand for different processes share the wall clock.
fn engine_at(store: Arc<InMemoryStore>, clock: Arc<TokioClock>) -> Engine {
    Engine::builder().store(store as Arc<dyn Store>).clock(clock).entropy(Arc::new(SeededEntropy::new(3))).build()
}

async fn check_resume_equivalence(shapes: Vec<Shape>, crashes: Vec<usize>, input: i64) -> Result<(), TestCaseError> {
    let log = Log::default();
    let workflow = build(&shapes, &log);
    let reference = engine_over(Arc::new(InMemoryStore::new())).start(&workflow, json!(input)).await.unwrap();
    prop_assert_eq!(reference.status, RunStatus::Completed);

    let store = Arc::new(InMemoryStore::new());
    let engine = engine_over(store.clone());
    let run: RunId = "01890000-0000-7000-8000-00000000abcd".parse().unwrap();
    let mut finished = None;
    let mut first = true;
    for after in crashes {
        store.fail_appends_after(after);
        let before = completed_paths(&store, run).into_iter().collect::<HashSet<_>>();
        let executions_before = log.take().len();
        let result = if first {
            first = false;
            engine.start_with(&workflow, json!(input), StartOptions { run_id: Some(run), ..Default::default() }).await
        } else {
            engine.resume(&workflow, run).await
        };
        // No step that had committed its completion ran again.
        let ran: Vec<String> = log.take()[executions_before..].to_vec();
        for path in &ran {
            prop_assert!(!before.contains(path), "{} ran again after it had completed", path);
        }
        match result {
            Ok(report) => {
                finished = Some(report);
                break;
            }
            Err(EngineError::Store { .. }) => {}
            Err(other) => return Err(TestCaseError::fail(other.to_string())),
        }
    }
    store.heal();
    let report = match finished {
        Some(report) => report,
        None => {
            let before = completed_paths(&store, run).into_iter().collect::<HashSet<_>>();
            let executions_before = log.take().len();
            let report = if first {
                engine
                    .start_with(&workflow, json!(input), StartOptions { run_id: Some(run), ..Default::default() })
                    .await
                    .unwrap()
            } else {
                engine.resume(&workflow, run).await.unwrap()
            };
            for path in &log.take()[executions_before..] {
                prop_assert!(!before.contains(path), "{} ran again after it had completed", path);
            }
            report
        }
    };
    prop_assert_eq!(report.status, RunStatus::Completed);
    prop_assert_eq!(report.output, reference.output);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn an_interrupted_run_continued_equals_an_uninterrupted_one(
        shapes in prop::collection::vec(shape(), 1..7),
        crashes in prop::collection::vec(0usize..6, 0..6),
        input in -20i64..20,
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap();
        runtime.block_on(check_resume_equivalence(shapes, crashes, input))?;
    }
}

struct AskTwice;

impl Step for AskTwice {
    type Input = Value;
    type Output = Value;

    async fn run(&self, ctx: &StepContext, _input: Value) -> Result<Outcome<Value>, StepError> {
        let token = ctx.random();
        let first = ctx.interrupt(InterruptRequest::input("pick a size", json!({ "type": "integer" }))).await?;
        let second = ctx.approval(InterruptRequest::approval("ship it?").payload(json!("as is"))).await?;
        Ok(json!({ "token": token, "size": first.decision, "ship": second }).into())
    }
}

/// Resumes of different runs claim their runs at the same time (a batch of workers' answers
/// each continues its run, and their claims share a commit), while two resumes of one run
/// still never both claim it.
#[tokio::test(start_paused = true)]
async fn resumes_of_different_runs_claim_at_once_and_of_one_run_once() {
    let store = Arc::new(crate::durability::Counting::new());
    let workflow = Workflow::builder("ask").step(Node::step("ask", AskTwice)).build().unwrap();
    let engine = Engine::builder()
        .store(store.clone())
        .clock(Arc::new(TokioClock::starting_at(T0)))
        .entropy(Arc::new(SeededEntropy::new(3)))
        .worker_id("here")
        .build();
    let mut runs = Vec::new();
    for _ in 0..6 {
        let report = engine.start(&workflow, json!(null)).await.unwrap();
        assert_eq!(report.status, RunStatus::Suspended);
        runs.push(report.run_id);
    }
    *store.claim_takes.lock().unwrap() = Some(Duration::from_millis(5));

    let claims = futures_util::future::join_all(runs.iter().map(|run| engine.claim_to_resume(*run))).await;
    assert!(claims.iter().all(Result::is_ok), "{claims:?}");
    assert_eq!(
        store.most_claims_at_once.load(std::sync::atomic::Ordering::SeqCst),
        6,
        "the six claims were in flight together"
    );

    // Two resumes of one suspended run at once: one claims it, the other finds it held here.
    let ask_again = engine.start(&workflow, json!(null)).await.unwrap().run_id;
    let (a, b) = tokio::join!(engine.claim_to_resume(ask_again), engine.claim_to_resume(ask_again));
    let won = [&a, &b].iter().filter(|claim| claim.is_ok()).count();
    assert_eq!(won, 1, "{a:?} {b:?}");
    let lost = if a.is_ok() { b } else { a };
    assert!(matches!(lost, Err(EngineError::Leased { ref owner, .. }) if owner == "here"), "{lost:?}");
    // The claimed runs continue: each now waits on its second question.
    for (run, lease) in runs.iter().zip(claims) {
        let report = engine.resume_leased(&workflow, lease.unwrap()).await.unwrap();
        assert_eq!((report.run_id, report.status), (*run, RunStatus::Suspended));
    }
}

#[tokio::test(start_paused = true)]
async fn interrupt_mid_step_returns_the_decision_after_resume_in_another_engine() {
    let store = Arc::new(InMemoryStore::new());
    let workflow = Workflow::builder("ask").step(Node::step("ask", AskTwice)).build().unwrap();
    let first = engine_over(store.clone());
    let report = first.start(&workflow, json!(null)).await.unwrap();
    assert_eq!(report.status, RunStatus::Suspended);
    let token_entries: Vec<_> =
        records_at(&store, report.run_id, "ask").into_iter().filter(|r| matches!(r, Record::Value { .. })).collect();
    assert_eq!(token_entries.len(), 1, "the random draw is journaled with the interrupt");

    // Another engine (as another process would) answers and resumes.
    let second = engine_over(store.clone());
    let anyone = Caller::default();
    let id = report.pending[0].id.clone();
    let bad = second.resolve(report.run_id, &id, Decision::Respond { value: json!("big") }, &anyone).await.unwrap_err();
    assert!(matches!(bad, EngineError::Resolve { code: "invalid_decision", .. }), "{bad}");
    second.resolve(report.run_id, &id, Decision::Respond { value: json!(42) }, &anyone).await.unwrap();
    let report = second.resume(&workflow, report.run_id).await.unwrap();
    assert_eq!(report.status, RunStatus::Suspended, "now waiting on the second question");
    assert_eq!(report.pending.len(), 1);
    assert_ne!(report.pending[0].id, id);
    let third = engine_over(store.clone());
    third
        .resolve(report.run_id, &report.pending[0].id, Decision::Modify { payload: json!("with a bow") }, &anyone)
        .await
        .unwrap();
    let done = third.resume(&workflow, report.run_id).await.unwrap();
    let Record::Value { value: token, .. } = &token_entries[0] else { unreachable!() };
    assert_eq!(
        done.output,
        Some(json!({ "token": token, "size": { "decision": "respond", "value": 42 }, "ship": "with a bow" }))
    );
}

#[tokio::test(start_paused = true)]
async fn concurrent_decisions_exactly_one_wins_and_approvers_are_enforced() {
    let (engine, store) = engine();
    let workflow = Workflow::builder("approve")
        .step(Node::dyn_step(
            "gate",
            dyn_fn_step("gate", |_c, input: Arc<Value>| async move {
                Ok(Outcome::suspended(
                    InterruptRequest::approval("ok?")
                        .payload((*input).clone())
                        .approver("role:lead")
                        .approver("user:zoe"),
                ))
            }),
        ))
        .build()
        .unwrap();
    let report = engine.start(&workflow, json!({ "amount": 10 })).await.unwrap();
    let id = report.pending[0].id.clone();
    let outsider = Caller::user(None, "mallory");
    let denied = engine.resolve(report.run_id, &id, Decision::Approve, &outsider).await.unwrap_err();
    assert!(matches!(denied, EngineError::Resolve { code: "access_denied", .. }));

    let lead = Caller::user(None, "ann").with_role("lead");
    let zoe = Caller::user(None, "zoe");
    let (a, b) = tokio::join!(
        engine.resolve(report.run_id, &id, Decision::Approve, &lead),
        engine.resolve(report.run_id, &id, Decision::Reject { reason: None }, &zoe),
    );
    assert!(a.is_ok() != b.is_ok(), "exactly one decision wins");
    let loser = a.err().or(b.err()).unwrap();
    assert!(matches!(loser, EngineError::Resolve { code: "already_resolved", .. }), "{loser}");
    let done = engine.resume(&workflow, report.run_id).await.unwrap();
    assert_eq!(done.output, Some(json!({ "amount": 10 })), "the approve won: output is the payload");
    let resolved = records_at(&store, report.run_id, "gate")
        .into_iter()
        .find_map(|r| match r {
            Record::InterruptResolved { resolution, .. } => Some(resolution),
            _ => None,
        })
        .unwrap();
    assert_eq!(resolved.by.as_deref(), Some("ann"));
    assert_eq!(resolved.at, T0);
}

#[tokio::test(start_paused = true)]
async fn many_open_interrupts_in_parallel_paths() {
    let (engine, _) = engine();
    let ask = |id: &str| {
        Node::dyn_step(
            id,
            dyn_fn_step("ask", |ctx, _input| async move {
                Ok(Outcome::suspended(
                    InterruptRequest::approval(format!("approve {}?", ctx.path())).payload(json!(ctx.path().as_str())),
                ))
            }),
        )
    };
    let workflow = Workflow::builder("parallel-asks")
        .step(Fork::new("f").path([ask("left")]).path([ask("right")]))
        .build()
        .unwrap();
    let report = engine.start(&workflow, json!(null)).await.unwrap();
    let steps: Vec<_> = report.pending.iter().map(|p| p.step.as_str().to_owned()).collect();
    assert_eq!(steps, ["f[0]/left", "f[1]/right"]);
    engine.resolve(report.run_id, &report.pending[1].id, Decision::Approve, &Caller::default()).await.unwrap();
    let mid = engine.resume(&workflow, report.run_id).await.unwrap();
    assert_eq!(mid.status, RunStatus::Suspended);
    assert_eq!(mid.pending.len(), 1);
    engine.resolve(report.run_id, &mid.pending[0].id, Decision::Approve, &Caller::default()).await.unwrap();
    let done = engine.resume(&workflow, report.run_id).await.unwrap();
    assert_eq!(done.output, Some(json!(["f[0]/left", "f[1]/right"])));
}

#[tokio::test(start_paused = true)]
async fn interrupt_deadline_applies_on_timeout_when_resumed_late() {
    for (action, expect_status) in [
        (stepwright_core::TimeoutAction::Reject, RunStatus::Failed),
        (stepwright_core::TimeoutAction::Approve, RunStatus::Completed),
        (stepwright_core::TimeoutAction::Fail, RunStatus::Failed),
    ] {
        let (engine, _) = engine();
        let workflow = Workflow::builder("deadline")
            .step(Node::dyn_step(
                "wait",
                dyn_fn_step("wait", move |_c, _i| async move {
                    Ok(Outcome::suspended(
                        InterruptRequest::approval("ok?").timeout(Duration::from_secs(86_400), action),
                    ))
                }),
            ))
            .build()
            .unwrap();
        let report = engine.start(&workflow, json!(null)).await.unwrap();
        assert_eq!(report.wake_at, Some(T0.plus(Duration::from_secs(86_400))));
        tokio::time::sleep(Duration::from_secs(86_400)).await;
        let done = engine.resume(&workflow, report.run_id).await.unwrap();
        assert_eq!(done.status, expect_status, "{action:?}");
        if action == stepwright_core::TimeoutAction::Fail {
            assert_eq!(done.error.unwrap().code, ErrorCode::INTERRUPT_TIMEOUT);
        }
    }
}

struct Batches;

impl Step for Batches {
    type Input = u32;
    type Output = Value;

    async fn run(&self, ctx: &StepContext, total: u32) -> Result<Outcome<Value>, StepError> {
        let done = ctx.checkpoint().and_then(Value::as_u64).unwrap_or(0) as u32;
        if done < total {
            // One batch per execution: checkpoint and stop.
            return Ok(Outcome::checkpoint(json!(done + 1)));
        }
        Ok(json!({ "batches": done, "attempt": ctx.attempt() }).into())
    }
}

#[tokio::test(start_paused = true)]
async fn continue_checkpoints_stop_the_run_as_pending_and_resume_re_enters() {
    let (engine, _) = engine();
    let workflow = Workflow::builder("batches").step(Node::step("work", Batches)).build().unwrap();
    let mut report = engine.start(&workflow, json!(3)).await.unwrap();
    let mut stops = 0;
    while report.status == RunStatus::Pending {
        stops += 1;
        report = engine.resume(&workflow, report.run_id).await.unwrap();
    }
    assert_eq!(stops, 3);
    assert_eq!(report.output, Some(json!({ "batches": 3, "attempt": 1 })));
}

#[tokio::test(start_paused = true)]
async fn a_fenced_step_interrupted_after_its_intent_is_outcome_unknown() {
    for (safe, on_failure, expected) in [
        (false, OnFailure::Abort, Err(ErrorCode::OUTCOME_UNKNOWN)),
        (false, OnFailure::Skip, Ok(Value::Null)),
        (true, OnFailure::Abort, Ok(json!("charged"))),
    ] {
        let store = Arc::new(InMemoryStore::new());
        let engine = engine_over(store.clone());
        let charges = Counter::default();
        let mut charge = {
            let charges = charges.clone();
            Node::step(
                "charge",
                fn_step(move |_ctx, _x: Value| {
                    charges.hit();
                    async move { Ok("charged") }
                }),
            )
            .effect(Effect::Write)
            .on_failure(on_failure.clone())
        };
        if safe {
            charge = charge.safe_to_retry();
        }
        let workflow = Workflow::builder("fence").step(charge).build().unwrap();
        // The intent is the first append; the completion (second) fails: a crash after the
        // effect but before its result was recorded.
        store.fail_appends_after(1);
        let run: RunId = "01890000-0000-7000-8000-00000000fe11".parse().unwrap();
        let crashed =
            engine.start_with(&workflow, json!(null), StartOptions { run_id: Some(run), ..Default::default() }).await;
        assert!(matches!(crashed, Err(EngineError::Store { .. })));
        assert_eq!(charges.get(), 1);
        store.heal();
        let report = engine.resume(&workflow, run).await.unwrap();
        match expected {
            Err(code) => assert_eq!(report.error.unwrap().code, code),
            Ok(output) => assert_eq!(report.output, Some(output)),
        }
        assert_eq!(charges.get(), if safe { 2 } else { 1 }, "never silently done twice");
    }
}

#[tokio::test(start_paused = true)]
async fn retries_are_durable_a_resumed_run_waits_out_the_recorded_backoff() {
    let store = Arc::new(InMemoryStore::new());
    let clock = Arc::new(TokioClock::starting_at(T0));
    let engine = engine_at(store.clone(), clock.clone());
    let attempts = Log::default();
    let step = {
        let attempts = attempts.clone();
        Node::step(
            "flaky",
            fn_step(move |ctx: StepContext, _x: Value| {
                let attempts = attempts.clone();
                async move {
                    attempts.push(format!("{}@{}", ctx.attempt(), ctx.now().since(T0).as_secs()));
                    if ctx.attempt() < 3 {
                        Err(StepError::new(ErrorCode::new("busy"), "busy").retryable(true))
                    } else {
                        Ok(ctx.attempt())
                    }
                }
            }),
        )
        .retry(RetryPolicy::new(3).initial_delay(Duration::from_secs(100)).max_delay(Duration::from_secs(1000)))
    };
    let workflow = Workflow::builder("durable-retry").step(step).build().unwrap();
    // Backoffs longer than the in-process limit (60 s) suspend the run with a wake time.
    let report = engine.start(&workflow, json!(null)).await.unwrap();
    assert_eq!(report.status, RunStatus::Suspended);
    assert_eq!(report.wake_at, Some(T0.plus(Duration::from_secs(100))));
    tokio::time::sleep(Duration::from_secs(100)).await;
    let report = engine_at(store.clone(), clock.clone()).resume(&workflow, report.run_id).await.unwrap();
    assert_eq!(report.wake_at, Some(T0.plus(Duration::from_secs(300))));
    tokio::time::sleep(Duration::from_secs(200)).await;
    let report = engine_at(store.clone(), clock).resume(&workflow, report.run_id).await.unwrap();
    assert_eq!(report.output, Some(json!(3)));
    assert_eq!(attempts.take(), ["1@0", "2@100", "3@300"]);
}

#[tokio::test(start_paused = true)]
async fn resume_refuses_a_changed_definition_and_finished_runs() {
    let (engine, _) = engine();
    let v1 = Workflow::builder("pinned")
        .step(Node::dyn_step(
            "wait",
            dyn_fn_step("wait", |_c, _i| async move { Ok(Outcome::suspended(InterruptRequest::approval("?"))) }),
        ))
        .build()
        .unwrap();
    let v2 = Workflow::builder("pinned")
        .step(Node::dyn_step(
            "renamed",
            dyn_fn_step("wait", |_c, _i| async move { Ok(Outcome::suspended(InterruptRequest::approval("?"))) }),
        ))
        .build()
        .unwrap();
    let report = engine.start(&v1, json!(null)).await.unwrap();
    let error = engine.resume(&v2, report.run_id).await.unwrap_err();
    assert!(matches!(error, EngineError::DefinitionMismatch { .. }), "{error}");
    engine.cancel(report.run_id, "no longer needed").await.unwrap();
    let error = engine.resume(&v1, report.run_id).await.unwrap_err();
    assert!(matches!(error, EngineError::NotResumable { status: RunStatus::Cancelled, .. }), "{error}");
}

#[tokio::test(start_paused = true)]
async fn cancelling_a_live_run_cancels_its_steps() {
    let (engine, _) = engine();
    let saw = Log::default();
    let workflow = {
        let saw = saw.clone();
        Workflow::builder("cancel-me")
            .step(Node::step(
                "wait",
                fn_step(move |ctx: StepContext, _x: Value| {
                    let saw = saw.clone();
                    async move {
                        ctx.cancellation().cancelled().await;
                        saw.push("saw-cancel");
                        Err::<Value, _>(StepError::cancelled("stopping"))
                    }
                }),
            ))
            .build()
            .unwrap()
    };
    let run: RunId = "01890000-0000-7000-8000-00000000cccc".parse().unwrap();
    let canceller = {
        let engine = engine.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            assert!(engine.cancel(run, "user asked").await.unwrap());
        })
    };
    let report = engine
        .start_with(&workflow, json!(null), StartOptions { run_id: Some(run), ..Default::default() })
        .await
        .unwrap();
    canceller.await.unwrap();
    assert_eq!(report.status, RunStatus::Cancelled);
    assert_eq!(saw.take(), ["saw-cancel"]);
}

fn approval_then(first: &str, after: Option<&str>) -> Workflow {
    let mut builder = Workflow::builder("evolving")
        .step(Node::step(first, fn_step(|_c, x: i64| async move { Ok(x + 1) })))
        .step(Node::dyn_step(
            "wait",
            dyn_fn_step("wait", |_c, input| async move {
                Ok(Outcome::suspended(InterruptRequest::approval("ok?").payload((*input).clone())))
            }),
        ));
    if let Some(after) = after {
        builder = builder.step(Node::step(after, fn_step(|_c, x: i64| async move { Ok(x * 10) })));
    }
    builder.build().unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_renamed_step_fails_the_run_with_nondeterminism_and_a_diff() {
    let (engine, _) = engine();
    let v1 = approval_then("prepare", None);
    let report = engine.start(&v1, json!(1)).await.unwrap();
    engine.resolve(report.run_id, &report.pending[0].id, Decision::Approve, &Caller::default()).await.unwrap();
    let renamed = approval_then("setup", None);
    let options = stepwright_core::ResumeOptions { allow_new_definition: true };
    let done = engine.resume_with(&renamed, report.run_id, options).await.unwrap();
    assert_eq!(done.status, RunStatus::Failed);
    let error = done.error.unwrap();
    assert_eq!(error.code, ErrorCode::NONDETERMINISM);
    assert!(error.message.contains("the journal has `prepare`; the definition has no such step"), "{}", error.message);
    assert!(error.message.contains("the definition's steps: setup, wait"), "{}", error.message);
}

#[tokio::test(start_paused = true)]
async fn a_compatible_new_definition_resumes_and_serves_recorded_results() {
    let (engine, _) = engine();
    let v1 = approval_then("prepare", None);
    let report = engine.start(&v1, json!(1)).await.unwrap();
    engine.resolve(report.run_id, &report.pending[0].id, Decision::Approve, &Caller::default()).await.unwrap();
    let pinned = engine.resume(&approval_then("prepare", Some("finish")), report.run_id).await.unwrap_err();
    assert!(matches!(pinned, EngineError::DefinitionMismatch { .. }), "runs are pinned unless asked: {pinned}");
    let v2 = approval_then("prepare", Some("finish"));
    let options = stepwright_core::ResumeOptions { allow_new_definition: true };
    let done = engine.resume_with(&v2, report.run_id, options).await.unwrap();
    assert_eq!(done.output, Some(json!(20)), "prepare's recorded 2 flowed through the approval into the new step");
}

#[test]
fn path_patterns_cover_every_operator() {
    let leaf = |id: &str| Node::step(id, fn_step(|_c, x: Value| async move { Ok(x) }));
    let workflow = Workflow::builder("shapes")
        .step(Fork::new("f").path([leaf("a")]).path([leaf("b")]))
        .step(Loop::new("l", 3, [leaf("c")]))
        .step(stepwright_core::Graph::new("g", 5).node(leaf("n")))
        .step(leaf("s").on_failure(OnFailure::Fallback(Box::new(leaf("alt")))))
        .build()
        .unwrap();
    let journal = [
        "f",
        "f[0]/a",
        "f[1]/b",
        "l#2/c",
        "l#2",
        "l#1/@inbox",
        "g/n#3",
        "g#1",
        "s/@fallback",
        "f[0]/zzz",
        "l#1/gone",
        "h",
        // Journaled sub-steps of a leaf (model and tool calls) belong to it.
        "f[0]/a/turn.1/tool.0",
        "s/@fallback/call.0",
        "l#2/c/call.1",
        "l#2/call.1",
    ];
    assert_eq!(workflow.unknown_paths(journal), ["f[0]/zzz", "h", "l#1/gone", "l#2/call.1"]);
}

#[tokio::test(start_paused = true)]
async fn a_handoff_survives_a_resume() {
    let (engine, _) = engine();
    let routed = Counter::default();
    let router = {
        let routed = routed.clone();
        Node::dyn_step(
            "router",
            dyn_fn_step("router", move |_c, input| {
                routed.hit();
                async move { Ok(Outcome::handoff("review", json!({ "ticket": *input }))) }
            }),
        )
    };
    let review = Node::step("review", fn_step(|_c, payload: Value| async move { Ok(json!({ "reviewed": payload })) }))
        .requires_approval(stepwright_core::ApprovalGate::new("review it?"));
    let workflow = Workflow::builder("handoff-resume")
        .step(stepwright_core::Graph::new("desk", 5).node(router).node(review))
        .build()
        .unwrap();
    let report = engine.start(&workflow, json!(7)).await.unwrap();
    assert_eq!(report.status, RunStatus::Suspended);
    assert_eq!(report.pending[0].step.as_str(), "desk/review#1");
    engine.resolve(report.run_id, &report.pending[0].id, Decision::Approve, &Caller::default()).await.unwrap();
    let done = engine.resume(&workflow, report.run_id).await.unwrap();
    assert_eq!(done.output, Some(json!({ "reviewed": { "ticket": 7 } })));
    assert_eq!(routed.get(), 1, "the recorded handoff was replayed, not decided again");
}
