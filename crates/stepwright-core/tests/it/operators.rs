//! Operators: sequence, branch, fork (all, race, settle), map, loop, graph, subworkflow,
//! spawn, provide, every, sleep.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use stepwright_core::journal::Choice;
use stepwright_core::{
    Branch, Engine, ErrorCode, Every, EveryOnError, Expr, Fork, ForkMode, Graph, InputSource, Loop, LoopOnError,
    MapLayer, Node, OnMaxIterations, Outcome, PathResult, ProvidedLayer, Record, RunStatus, Step, StepContext,
    StepError, Verdict, Workflow, fn_step,
};
use stepwright_testkit::{Log, T0, engine, records_at};

fn add(n: i64) -> Node {
    Node::step(&format!("add-{n}"), fn_step(move |_ctx, x: i64| async move { Ok(x + n) }))
}

fn fails(id: &str, message: &'static str) -> Node {
    Node::step(
        id,
        fn_step(move |_ctx, _x: Value| async move { Err::<Value, _>(StepError::new(ErrorCode::new("boom"), message)) }),
    )
}

/// Sleeps `ms`, honouring cancellation, and logs what it saw.
fn sleeper(id: &str, ms: u64, output: Value, log: Log) -> Node {
    let name = id.to_owned();
    Node::step(
        id,
        fn_step(move |ctx: StepContext, _x: Value| {
            let log = log.clone();
            let name = name.clone();
            let output = output.clone();
            async move {
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_millis(ms)) => {
                        log.push(format!("{name}:done"));
                        Ok(output)
                    }
                    () = ctx.cancellation().cancelled() => {
                        log.push(format!("{name}:saw-cancel"));
                        Err(StepError::cancelled("stopped"))
                    }
                }
            }
        }),
    )
}

async fn run(
    workflow: &Workflow,
    input: Value,
) -> (stepwright_core::RunReport, Engine, Arc<stepwright_core::InMemoryStore>) {
    let (engine, store) = engine();
    let report = engine.start(workflow, input).await.unwrap();
    (report, engine, store)
}

#[tokio::test(start_paused = true)]
async fn sequence_threads_outputs_and_steps_see_earlier_outputs() {
    let workflow = Workflow::builder("seq")
        .step(add(1))
        .step(add(10))
        .step(Node::step(
            "sum",
            fn_step(|ctx: StepContext, x: i64| async move {
                let first = ctx.scope().output("add-1").and_then(Value::as_i64).unwrap();
                Ok(json!({ "first": first, "last": x, "input": ctx.workflow_input() }))
            }),
        ))
        .build()
        .unwrap();
    let (report, _, _) = run(&workflow, json!(5)).await;
    assert_eq!(report.status, RunStatus::Completed);
    assert_eq!(report.output, Some(json!({ "first": 6, "last": 16, "input": 5 })));
}

#[tokio::test(start_paused = true)]
async fn input_sources_pick_where_input_comes_from() {
    let workflow = Workflow::builder("inputs")
        .step(add(1))
        .step(add(2).input(InputSource::WorkflowInput))
        .step(add(3).input(InputSource::Output("add-1".into())))
        .step(add(4).input(InputSource::Value(json!(100))))
        .step(Node::step("last", fn_step(|_c, x: i64| async move { Ok(x) })).input_from(|s| {
            json!(s.output("add-2").unwrap().as_i64().unwrap() * 1000 + s.output("add-4").unwrap().as_i64().unwrap())
        }))
        .build()
        .unwrap();
    let (report, _, _) = run(&workflow, json!(0)).await;
    assert_eq!(report.output, Some(json!(2104)));
}

/// A choice of another kind where an operator expects one (a corrupt or hand-edited
/// journal) fails the run with `nondeterminism`; it is never re-interpreted.
#[tokio::test(start_paused = true)]
async fn a_recorded_choice_of_another_kind_fails_with_nondeterminism() {
    let wait = Node::step(
        "wait",
        fn_step(|ctx: StepContext, x: i64| async move {
            ctx.interrupt(stepwright_core::InterruptRequest::approval("go on?")).await?;
            Ok(x)
        }),
    );
    // The arm's step suspends, so the branch itself has no output yet and a resume asks
    // the journal which arm it took.
    let workflow = Workflow::builder("branch-then-wait")
        .step(Branch::new("route").when(Expr::new(|s| s.input().as_i64() > Some(0)), [wait]).otherwise([add(-1)]))
        .build()
        .unwrap();
    let (report, _, store) = run(&workflow, json!(5)).await;
    assert_eq!(report.status, RunStatus::Suspended);
    let loaded = stepwright_core::Store::load(store.as_ref(), report.run_id).await.unwrap();
    let mut entries = loaded.entries.clone();
    let decided = entries
        .iter_mut()
        .find(|e| e.path.as_str() == "route" && matches!(e.record, Record::Decided { choice: Choice::Arm { .. } }))
        .expect("the branch recorded its arm");
    decided.record = Record::Decided { choice: Choice::Winner { winner: 0 } };

    let (engine, copy) = engine();
    stepwright_core::Store::create_run(copy.as_ref(), loaded.record.clone()).await.unwrap();
    let mut batch = stepwright_core::journal::JournalBatch {
        entries,
        blobs: loaded.blobs.iter().map(|(hash, value)| (*hash, value.clone())).collect(),
        events: Vec::new(),
    };
    stepwright_core::Store::append(copy.as_ref(), report.run_id, None, &mut batch).await.unwrap();
    let resumed = engine.resume(&workflow, report.run_id).await.unwrap();
    assert_eq!(resumed.status, RunStatus::Failed);
    let error = resumed.error.unwrap();
    assert_eq!(error.code, ErrorCode::NONDETERMINISM);
    assert!(error.message.contains("route recorded a race winner"), "{}", error.message);
}

#[tokio::test(start_paused = true)]
async fn branch_takes_first_true_arm_and_journals_the_decision() {
    let branch = |id: &str| -> Node {
        Branch::new(id)
            .when(Expr::new(|s| s.input().as_i64() > Some(10)), [add(100)])
            .when(Expr::new(|s| s.input().as_i64() > Some(0)), [add(1)])
            .otherwise([add(-1)])
            .into()
    };
    let workflow = Workflow::builder("branchy").step(branch("route")).build().unwrap();
    for (input, expected, arm) in [(20, 120, json!(0)), (5, 6, json!(1)), (-5, -6, json!("otherwise"))] {
        let (report, _, store) = run(&workflow, json!(input)).await;
        assert_eq!(report.output, Some(json!(expected)));
        assert!(
            records_at(&store, report.run_id, "route")
                .contains(&Record::Decided { choice: serde_json::from_value(json!({ "arm": arm })).unwrap() })
        );
    }
    // No match and no otherwise: skipped, output null.
    let only =
        Workflow::builder("no-match").step(Branch::new("route").when(Expr::new(|_| false), [add(1)])).build().unwrap();
    let (report, _, store) = run(&only, json!(1)).await;
    assert_eq!(report.output, Some(Value::Null));
    assert!(matches!(records_at(&store, report.run_id, "route").last(), Some(Record::Skipped { .. })));
}

#[tokio::test(start_paused = true)]
async fn fork_all_merges_in_path_order_and_caps_concurrency() {
    let log = Log::default();
    let workflow = Workflow::builder("fork-all")
        .step(
            Fork::new("drafts")
                .path([sleeper("slow", 30, json!("a"), log.clone())])
                .path([sleeper("fast", 10, json!("b"), log.clone())])
                .path([sleeper("mid", 20, json!("c"), log.clone())])
                .concurrency(2),
        )
        .build()
        .unwrap();
    let start = tokio::time::Instant::now();
    let (report, _, store) = run(&workflow, json!(null)).await;
    assert_eq!(report.output, Some(json!(["a", "b", "c"])));
    // Concurrency 2: slow and fast start; mid starts when fast ends at 10ms and ends at 30ms.
    assert_eq!(start.elapsed(), Duration::from_millis(30));
    assert_eq!(log.take(), ["fast:done", "slow:done", "mid:done"]);
    assert!(records_at(&store, report.run_id, "drafts[1]/fast").iter().any(|r| matches!(r, Record::Completed { .. })));
}

#[tokio::test(start_paused = true)]
async fn fork_all_fails_fast_and_siblings_observe_cancellation() {
    let log = Log::default();
    let workflow = Workflow::builder("fail-fast")
        .step(
            Fork::new("f")
                .path([sleeper("long-a", 1_000, json!(1), log.clone())])
                .path([Node::sequence(
                    "quick",
                    [sleeper("wait", 5, json!(0), log.clone()), fails("bad", "path two broke")],
                )])
                .path([sleeper("long-b", 1_000, json!(3), log.clone())]),
        )
        .build()
        .unwrap();
    let start = tokio::time::Instant::now();
    let (report, _, store) = run(&workflow, json!(null)).await;
    assert_eq!(report.status, RunStatus::Failed);
    assert_eq!(report.error.unwrap().message, "path two broke");
    assert!(start.elapsed() < Duration::from_millis(100), "siblings were cancelled, not awaited");
    let mut seen = log.take();
    seen.sort();
    assert_eq!(seen, ["long-a:saw-cancel", "long-b:saw-cancel", "wait:done"]);
    assert!(records_at(&store, report.run_id, "f[0]").iter().any(|r| matches!(r, Record::Cancelled { .. })));
    assert!(records_at(&store, report.run_id, "f[2]").iter().any(|r| matches!(r, Record::Cancelled { .. })));
}

#[tokio::test(start_paused = true)]
async fn race_first_success_wins_and_losers_are_cancelled() {
    let log = Log::default();
    let workflow = Workflow::builder("race")
        .step(
            Fork::new("r")
                .mode(ForkMode::Race)
                .path([fails("quick-fail", "no")])
                .path([sleeper("winner", 20, json!("w"), log.clone())])
                .path([sleeper("loser", 50, json!("l"), log.clone())]),
        )
        .build()
        .unwrap();
    let (report, _, store) = run(&workflow, json!(null)).await;
    assert_eq!(report.output, Some(json!("w")));
    assert_eq!(log.take(), ["winner:done", "loser:saw-cancel"]);
    assert!(records_at(&store, report.run_id, "r").contains(&Record::Decided { choice: Choice::Winner { winner: 1 } }));
    assert!(records_at(&store, report.run_id, "r[2]").iter().any(|r| matches!(r, Record::Cancelled { .. })));
}

#[tokio::test(start_paused = true)]
async fn race_where_every_path_fails() {
    let workflow = Workflow::builder("race-fail")
        .step(Fork::new("r").mode(ForkMode::Race).path([fails("a", "first")]).path([fails("b", "second")]))
        .build()
        .unwrap();
    let (report, _, _) = run(&workflow, json!(null)).await;
    let error = report.error.unwrap();
    assert_eq!(error.code, ErrorCode::ALL_PATHS_FAILED);
    assert!(
        error.message.contains("path 0: boom: first") && error.message.contains("path 1: boom: second"),
        "{}",
        error.message
    );
}

#[tokio::test(start_paused = true)]
async fn settle_reports_mixed_results() {
    let workflow = Workflow::builder("settle")
        .step(
            Fork::new("s")
                .mode(ForkMode::Settle)
                .path([add(1)])
                .path([fails("bad", "nope")])
                .path([add(2).only_if(Expr::new(|_| false))]),
        )
        .build()
        .unwrap();
    let (report, _, _) = run(&workflow, json!(1)).await;
    assert_eq!(report.status, RunStatus::Completed);
    assert_eq!(
        report.output.unwrap(),
        json!([
            { "status": "completed", "output": 2 },
            { "status": "failed", "error": { "code": "boom", "message": "nope" } },
            { "status": "completed", "output": null },
        ])
    );
}

#[tokio::test(start_paused = true)]
async fn dynamic_paths_and_explicit_merge() {
    let workflow = Workflow::builder("dyn")
        .step(
            Fork::new("d")
                .mode(ForkMode::Settle)
                .paths_from(
                    Expr::new(|s| s.input().as_array().unwrap().clone()),
                    [Node::step(
                        "check",
                        fn_step(|_c, x: i64| async move {
                            if x < 0 { Err(StepError::new(ErrorCode::new("negative"), "negative")) } else { Ok(x * 10) }
                        }),
                    )],
                )
                .merge(|results| {
                    let ok: i64 = results
                        .iter()
                        .filter_map(|r| match r {
                            PathResult::Completed(v) => v.as_i64(),
                            _ => None,
                        })
                        .sum();
                    let failed = results.iter().filter(|r| matches!(r, PathResult::Failed(_))).count();
                    Ok(json!({ "sum": ok, "failed": failed }))
                }),
        )
        .build()
        .unwrap();
    let (report, _, store) = run(&workflow, json!([1, -2, 3])).await;
    assert_eq!(report.output, Some(json!({ "sum": 40, "failed": 1 })));
    assert!(
        records_at(&store, report.run_id, "d")
            .contains(&Record::Decided { choice: Choice::Items { items: vec![json!(1), json!(-2), json!(3)] } })
    );
}

#[tokio::test(start_paused = true)]
async fn map_outputs_follow_item_order_not_completion_order() {
    let workflow = Workflow::builder("map")
        .step(
            Fork::map(
                "m",
                Expr::new(|s| s.input().as_array().unwrap().clone()),
                "item",
                [Node::step(
                    "wait",
                    fn_step(|ctx: StepContext, ms: u64| async move {
                        tokio::time::sleep(Duration::from_millis(ms)).await;
                        let item = ctx.scope().var("item").cloned().unwrap();
                        Ok(json!({ "ms": ms, "item": item, "path": ctx.path().as_str() }))
                    }),
                )],
            )
            .concurrency(2),
        )
        .build()
        .unwrap();
    let (report, _, _) = run(&workflow, json!([30, 10, 20])).await;
    assert_eq!(
        report.output.unwrap(),
        json!([
            { "ms": 30, "item": 30, "path": "m[0]/wait" },
            { "ms": 10, "item": 10, "path": "m[1]/wait" },
            { "ms": 20, "item": 20, "path": "m[2]/wait" },
        ])
    );
}

#[tokio::test(start_paused = true)]
async fn loop_until_verdict_with_prepare_next() {
    let workflow = Workflow::builder("refine")
        .step(
            Loop::new(
                "refine",
                10,
                [Node::step(
                    "improve",
                    fn_step(|ctx: StepContext, x: i64| async move {
                        let iteration = ctx.scope().var("loop").unwrap()["iteration"].as_i64().unwrap();
                        Ok(json!({ "value": x * 2, "iteration": iteration, "path": ctx.path().as_str() }))
                    }),
                )],
            )
            .until(Expr::new(|s| {
                let v = s.output("improve").unwrap()["value"].as_i64().unwrap();
                if v >= 20 { Verdict::done(format!("{v} is good enough")) } else { Verdict::again("too small") }
            }))
            .prepare_next(Expr::new(|s| s.output("improve").unwrap()["value"].clone())),
        )
        .build()
        .unwrap();
    let (report, engine, store) = run(&workflow, json!(3)).await;
    assert_eq!(report.output, Some(json!({ "value": 24, "iteration": 3, "path": "refine#3/improve" })));
    assert!(
        records_at(&store, report.run_id, "refine#3")
            .contains(&Record::Decided { choice: Choice::Verdict { done: true, reason: "24 is good enough".into() } })
    );
    let events = engine.store().events(report.run_id).await.unwrap();
    assert_eq!(events.last().unwrap().data["reason"], "24 is good enough");
}

#[tokio::test(start_paused = true)]
async fn loop_hitting_max_iterations_reports_the_reason() {
    let body = || [add(1)];
    let complete = Workflow::builder("max").step(Loop::new("l", 3, body())).build().unwrap();
    let (report, engine, _) = run(&complete, json!(0)).await;
    assert_eq!(report.output, Some(json!(3)));
    let events = engine.store().events(report.run_id).await.unwrap();
    assert_eq!(events[0].kind, "loop.stopped");
    assert_eq!(events[0].data["reason"], "max_iterations (3) reached without a done verdict");

    let fail = Workflow::builder("max-fail")
        .step(Loop::new("l", 2, body()).on_max_iterations(OnMaxIterations::Fail))
        .build()
        .unwrap();
    let (report, _, _) = run(&fail, json!(0)).await;
    let error = report.error.unwrap();
    assert_eq!(error.code, ErrorCode::MAX_ITERATIONS);
    assert_eq!(error.message, "max_iterations (2) reached without a done verdict");
}

fn flaky_on_odd_iterations() -> Node {
    Node::step(
        "flaky",
        fn_step(|ctx: StepContext, x: i64| async move {
            let iteration = ctx.scope().var("loop").unwrap()["iteration"].as_i64().unwrap();
            if iteration % 2 == 1 { Err(StepError::new(ErrorCode::new("odd"), "odd iteration")) } else { Ok(x + 1) }
        }),
    )
}

#[tokio::test(start_paused = true)]
async fn loop_on_error_retry_skip_abort() {
    for (policy, status, output) in [
        (LoopOnError::Abort, RunStatus::Failed, None),
        (LoopOnError::Skip, RunStatus::Completed, Some(json!(12))),
        (LoopOnError::Retry, RunStatus::Completed, Some(json!(12))),
    ] {
        let workflow = Workflow::builder("loop-errors")
            .step(Loop::new("l", 4, [flaky_on_odd_iterations()]).on_error(policy))
            .build()
            .unwrap();
        let (report, _, _) = run(&workflow, json!(10)).await;
        assert_eq!(report.status, status, "{policy:?}");
        assert_eq!(report.output, output, "{policy:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn loop_on_error_retry_reuses_the_message_and_skip_moves_on() {
    for (policy, expected) in [(LoopOnError::Retry, vec!["a", "bad", "c"]), (LoopOnError::Skip, vec!["a", "c"])] {
        let (engine, _) = engine();
        let handled = Log::default();
        let bad_seen = stepwright_testkit::Counter::default();
        let body = {
            let handled = handled.clone();
            Node::step(
                "handle",
                fn_step(move |ctx: StepContext, _x: Value| {
                    let handled = handled.clone();
                    let bad_seen = bad_seen.clone();
                    async move {
                        let message = ctx.scope().var("loop").unwrap()["message"].as_str().unwrap().to_owned();
                        if message == "bad" && bad_seen.hit() == 1 {
                            return Err(StepError::new(ErrorCode::new("flaky"), "first try at bad fails"));
                        }
                        handled.push(message);
                        Ok(())
                    }
                }),
            )
        };
        let workflow = Workflow::builder("inbox-errors")
            .step(Loop::new("l", 10, [body]).inbox("in", Duration::from_secs(1)).on_error(policy))
            .build()
            .unwrap();
        let run_id: stepwright_core::RunId = "01890000-0000-7000-8000-0000000000a1".parse().unwrap();
        for message in ["a", "bad", "c"] {
            engine.send(run_id, "in", json!(message)).await.unwrap();
        }
        let report = engine
            .start_with(
                &workflow,
                json!(null),
                stepwright_core::StartOptions { run_id: Some(run_id), ..Default::default() },
            )
            .await
            .unwrap();
        assert_eq!(report.status, RunStatus::Completed, "{policy:?}");
        assert_eq!(handled.take(), expected, "{policy:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn loop_inbox_keeps_the_loop_alive_until_park_timeout() {
    let (engine, _) = engine();
    let workflow = Workflow::builder("inbox")
        .step(
            Loop::new(
                "chat",
                100,
                [Node::step(
                    "reply",
                    fn_step(|ctx: StepContext, _x: Value| async move {
                        Ok(json!(format!("echo {}", ctx.scope().var("loop").unwrap()["message"])))
                    }),
                )],
            )
            .inbox("messages", Duration::from_secs(5)),
        )
        .build()
        .unwrap();
    let run_id: stepwright_core::RunId = "01890000-0000-7000-8000-000000000001".parse().unwrap();
    engine.send(run_id, "messages", json!("hi")).await.unwrap();
    let sender = {
        let engine = engine.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(3)).await;
            engine.send(run_id, "messages", json!("again")).await.unwrap();
        })
    };
    let start = tokio::time::Instant::now();
    let report = engine
        .start_with(
            &workflow,
            json!(null),
            stepwright_core::StartOptions { run_id: Some(run_id), ..Default::default() },
        )
        .await
        .unwrap();
    sender.await.unwrap();
    assert_eq!(report.output, Some(json!("echo \"again\"")));
    // First message at once, second at 3 s, then parked for 5 s with nothing: ends at 8 s.
    assert_eq!(start.elapsed(), Duration::from_secs(8));
}

#[tokio::test(start_paused = true)]
async fn graph_follows_conditional_edges_and_cycles_are_bounded() {
    let counter = || Node::step("count", fn_step(|_c, x: i64| async move { Ok(x + 1) }));
    let graph = |max: u32| -> Workflow {
        Workflow::builder("g")
            .step(
                Graph::new("g", max)
                    .node(counter())
                    .node(Node::step("finish", fn_step(|_c, x: i64| async move { Ok(json!({ "final": x })) })))
                    .edge_if("count", "finish", Expr::new(|s| s.output("count").unwrap().as_i64() >= Some(3)))
                    .edge("count", "count"),
            )
            .build()
            .unwrap()
    };
    let (report, _, store) = run(&graph(10), json!(0)).await;
    assert_eq!(report.output, Some(json!({ "final": 3 })));
    assert!(records_at(&store, report.run_id, "g/count#3").iter().any(|r| matches!(r, Record::Completed { .. })));
    assert!(
        records_at(&store, report.run_id, "g#3")
            .contains(&Record::Decided { choice: Choice::Next { next: Some("finish".into()) } })
    );

    let (report, _, _) = run(&graph(2), json!(0)).await;
    let error = report.error.unwrap();
    assert_eq!(error.code, ErrorCode::MAX_STEPS);
    assert!(error.message.contains("max_steps (2)"), "{}", error.message);
}

struct Router;

impl Step for Router {
    type Input = i64;
    type Output = i64;

    async fn run(&self, _ctx: &StepContext, input: i64) -> Result<Outcome<i64>, StepError> {
        Ok(Outcome::handoff(if input > 0 { "positive" } else { "negative" }, json!(input.abs())))
    }
}

#[tokio::test(start_paused = true)]
async fn handoff_jumps_to_a_graph_node_with_the_payload() {
    let workflow = Workflow::builder("handoff")
        .step(
            Graph::new("agents", 5)
                .node(Node::step("router", Router))
                .node(Node::step("positive", fn_step(|_c, x: i64| async move { Ok(format!("pos {x}")) })))
                .node(Node::step("negative", fn_step(|_c, x: i64| async move { Ok(format!("neg {x}")) }))),
        )
        .build()
        .unwrap();
    let (report, _, _) = run(&workflow, json!(-4)).await;
    assert_eq!(report.output, Some(json!("neg 4")));
    // Outside a graph a handoff has nowhere to go.
    let lost = Workflow::builder("lost").step(Node::step("router", Router)).build().unwrap();
    let (report, _, _) = run(&lost, json!(1)).await;
    assert_eq!(report.error.unwrap().code, ErrorCode::UNKNOWN_HANDOFF_TARGET);
}

#[tokio::test(start_paused = true)]
async fn subworkflow_nests_its_journal_and_checks_its_schemas() {
    let child = Workflow::builder("child")
        .input_schema(json!({ "type": "integer" }))
        .output_schema(json!({ "type": "integer", "maximum": 100 }))
        .step(Node::step(
            "triple",
            fn_step(|ctx: StepContext, x: i64| async move {
                assert!(ctx.scope().output("before").is_none(), "a subworkflow does not see the caller's outputs");
                Ok(x * 3)
            }),
        ))
        .build()
        .unwrap();
    let parent = Workflow::builder("parent")
        .step(add(1).input(InputSource::WorkflowInput))
        .step(Node::step("before", fn_step(|_c, x: i64| async move { Ok(x) })))
        .step(Node::workflow("call", &child))
        .build()
        .unwrap();
    let (report, _, store) = run(&parent, json!(2)).await;
    assert_eq!(report.output, Some(json!(9)));
    assert!(records_at(&store, report.run_id, "call/triple").iter().any(|r| matches!(r, Record::Completed { .. })));

    let (report, _, _) = run(&parent, json!(40)).await;
    assert_eq!(report.error.unwrap().code, ErrorCode::OUTPUT_VALIDATION);
    let bad_input = Workflow::builder("bad")
        .step(Node::workflow("call", &child).input(InputSource::Value(json!("x"))))
        .build()
        .unwrap();
    let (report, _, _) = run(&bad_input, json!(null)).await;
    assert_eq!(report.error.unwrap().code, ErrorCode::INPUT_VALIDATION);
}

#[tokio::test(start_paused = true)]
async fn spawn_is_isolated_and_times_out() {
    let layer: Arc<dyn ProvidedLayer> = Arc::new(MapLayer::new("notes"));
    let child = Workflow::builder("child")
        .step(Node::step(
            "look",
            fn_step(|ctx: StepContext, ms: u64| async move {
                let names: Vec<String> = ctx.provided().names().into_iter().map(str::to_owned).collect();
                tokio::time::sleep(Duration::from_millis(ms)).await;
                Ok(names)
            }),
        ))
        .build()
        .unwrap();
    let workflow = |ms: u64| {
        Workflow::builder("spawner")
            .step(Node::provide(
                "mem",
                [layer.clone()],
                [
                    Node::workflow("inherit", &child).input(InputSource::Value(json!(0))),
                    Node::spawn("isolated", &child, Duration::from_millis(100)).input(InputSource::Value(json!(ms))),
                ],
            ))
            .output(Expr::new(|s| json!([s.output("inherit"), s.output("isolated")])))
            .build()
            .unwrap()
    };
    let (report, _, _) = run(&workflow(10), json!(null)).await;
    assert_eq!(report.output, Some(json!([["notes"], []])));
    let (report, _, _) = run(&workflow(500), json!(null)).await;
    assert_eq!(report.error.unwrap().code, ErrorCode::TIMEOUT);
}

#[tokio::test(start_paused = true)]
async fn provide_makes_memory_layers_visible_to_descendants() {
    let outer = Arc::new(MapLayer::new("facts"));
    outer.store("color", json!("blue"));
    let inner = Arc::new(MapLayer::new("scratch"));
    inner.store("color", json!("red"));
    let reader =
        || Node::step("read", fn_step(|ctx: StepContext, _x: Value| async move { Ok(ctx.provided().recall("color")) }));
    let workflow = Workflow::builder("provide")
        .step(Node::provide(
            "outer",
            [outer as Arc<dyn ProvidedLayer>],
            [Node::sequence("a", [reader()]), Node::provide("inner", [inner as Arc<dyn ProvidedLayer>], [reader()])],
        ))
        .step(Node::sequence("outside", [reader()]))
        .output(Expr::new(|s| json!([s.output("a"), s.output("inner"), s.output("outside")])))
        .build()
        .unwrap();
    let (report, _, _) = run(&workflow, json!(null)).await;
    assert_eq!(report.output, Some(json!(["blue", "red", null])));
}

#[tokio::test(start_paused = true)]
async fn every_ticks_on_interval_wakes_early_and_runs_until_cancelled() {
    let (engine, _) = engine();
    let ticks = Log::default();
    let workflow = poller(Duration::from_secs(10), &ticks, Some(2));
    let run_id: stepwright_core::RunId = "01890000-0000-7000-8000-0000000000e1".parse().unwrap();
    let driver = {
        let engine = engine.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(13)).await;
            engine.wake(run_id, "kick").await.unwrap();
            tokio::time::sleep(Duration::from_secs(12)).await;
            engine.cancel(run_id, "done polling").await.unwrap();
        })
    };
    let report = engine
        .start_with(
            &workflow,
            json!(null),
            stepwright_core::StartOptions { run_id: Some(run_id), ..Default::default() },
        )
        .await
        .unwrap();
    driver.await.unwrap();
    // Ticks at 0 and 10; woken at 13; then every 10 s from there: 23; cancelled at 25.
    assert_eq!(ticks.take(), ["1@0", "2@10", "3@13", "4@23"]);
    assert_eq!(report.status, RunStatus::Cancelled);
    let events = engine.store().events(run_id).await.unwrap();
    assert!(events.iter().any(|e| e.kind == "every.tick_failed" && e.data["tick"] == 2));

    let failing = Workflow::builder("poller-fail")
        .step(Every::new("poll", Duration::from_secs(1), [fails("bad", "always")]).on_error(EveryOnError::Fail))
        .build()
        .unwrap();
    let report = engine.start(&failing, json!(null)).await.unwrap();
    assert_eq!(report.error.unwrap().message, "always");
}

/// An `every` on the wake channel `kick` whose tick logs `tick@seconds` (and fails on
/// `failing_tick`; a failed tick does not stop it).
fn poller(interval: Duration, ticks: &Log, failing_tick: Option<i64>) -> Workflow {
    let ticks = ticks.clone();
    Workflow::builder("poller")
        .step(
            Every::new(
                "poll",
                interval,
                [Node::step(
                    "tick",
                    fn_step(move |ctx: StepContext, _x: Value| {
                        let ticks = ticks.clone();
                        async move {
                            let tick = ctx.scope().var("tick").unwrap().as_i64().unwrap();
                            ticks.push(format!("{tick}@{}", ctx.now().since(T0).as_secs()));
                            if Some(tick) == failing_tick {
                                Err(StepError::new(ErrorCode::new("flaky"), format!("tick {tick} fails")))
                            } else {
                                Ok(tick)
                            }
                        }
                    }),
                )],
            )
            .wake_on("kick")
            .on_error(EveryOnError::Continue),
        )
        .build()
        .unwrap()
}

/// The wake-up each recorded tick was started by, in tick order (`None`: its timer).
async fn ticks_woken(store: &stepwright_core::InMemoryStore, run: stepwright_core::RunId) -> Vec<Option<u64>> {
    let loaded = stepwright_core::Store::load(store, run).await.unwrap();
    loaded
        .entries
        .iter()
        .filter(|e| e.path.as_str().ends_with("@due"))
        .map(|e| match &e.record {
            Record::Decided { choice: Choice::Due { wake, .. } } => *wake,
            other => panic!("a tick's start is a decision, not {other:?}"),
        })
        .collect()
}

/// Wake-ups go through the store: one sent by another engine (as from another process —
/// the two share nothing but the store) reaches an `every` waiting in its process, and one
/// that suspended until its next tick is made due and ticks when a runner resumes it.
#[tokio::test(start_paused = true)]
async fn every_is_woken_through_the_store_from_another_engine() {
    let (engine, store) = engine();
    let other = Engine::builder()
        .store(store.clone() as Arc<dyn stepwright_core::Store>)
        .clock(Arc::new(stepwright_core::TokioClock::starting_at(T0)))
        .build();

    // Waiting in process: a 30 s interval, woken at 5 s from the other engine.
    let ticks = Log::default();
    let run_id: stepwright_core::RunId = "01890000-0000-7000-8000-0000000000e2".parse().unwrap();
    let driver = {
        let (engine, other) = (engine.clone(), other.clone());
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(5)).await;
            other.wake(run_id, "kick").await.unwrap();
            other.wake(run_id, "kick").await.unwrap();
            tokio::time::sleep(Duration::from_secs(10)).await;
            engine.cancel(run_id, "done polling").await.unwrap();
        })
    };
    let options = stepwright_core::StartOptions { run_id: Some(run_id), ..Default::default() };
    let report = engine.start_with(&poller(Duration::from_secs(30), &ticks, None), json!(null), options).await.unwrap();
    driver.await.unwrap();
    assert_eq!(report.status, RunStatus::Cancelled);
    // Two wake-ups sent together start one tick; the next is 30 s after it, past the cancel.
    assert_eq!(ticks.take(), ["1@0", "2@5"]);
    let woken = ticks_woken(&store, run_id).await;
    assert!(matches!(woken[..], [None, Some(_)]), "{woken:?}");

    // Suspended: a one-hour interval is longer than the engine waits in process.
    let ticks = Log::default();
    let hourly = poller(Duration::from_secs(3600), &ticks, None);
    let report = engine.start(&hourly, json!(null)).await.unwrap();
    assert_eq!(report.status, RunStatus::Suspended);
    let run_id = report.run_id;
    let runner = stepwright_core::Runner::new(engine.clone()).register(&hourly);
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(runner.tick().await.unwrap().is_empty(), "not due for an hour");
    other.wake(run_id, "kick").await.unwrap();
    let resumed = runner.tick().await.unwrap();
    assert_eq!(resumed.len(), 1, "the wake-up made the run due");
    assert_eq!(resumed[0].1.as_ref().unwrap().status, RunStatus::Suspended, "and it waits for the next tick");
    // Started at 15 s (after the first run), woken at 25 s.
    assert_eq!(ticks.take(), ["1@15", "2@25"]);
    assert!(runner.tick().await.unwrap().is_empty(), "a wake-up is taken once");
    let woken = ticks_woken(&store, run_id).await;
    assert!(matches!(woken[..], [None, Some(_)]), "{woken:?}");
}

#[tokio::test(start_paused = true)]
async fn every_jitter_is_drawn_from_injected_entropy() {
    let (engine, _) = engine();
    let times = Log::default();
    let workflow = {
        let times = times.clone();
        Workflow::builder("jittery")
            .step(
                Every::new(
                    "poll",
                    Duration::from_secs(10),
                    [Node::step(
                        "tick",
                        fn_step(move |ctx: StepContext, _x: Value| {
                            let times = times.clone();
                            async move {
                                times.push(ctx.now().since(T0).as_millis().to_string());
                                Ok(())
                            }
                        }),
                    )],
                )
                .jitter(0.5),
            )
            .build()
            .unwrap()
    };
    let run_id: stepwright_core::RunId = "01890000-0000-7000-8000-0000000000e2".parse().unwrap();
    let stopper = {
        let engine = engine.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(40)).await;
            engine.cancel(run_id, "stop").await.unwrap();
        })
    };
    engine
        .start_with(
            &workflow,
            json!(null),
            stepwright_core::StartOptions { run_id: Some(run_id), ..Default::default() },
        )
        .await
        .unwrap();
    stopper.await.unwrap();
    let times: Vec<u64> = times.take().iter().map(|t| t.parse().unwrap()).collect();
    assert_eq!(times[0], 0);
    for pair in times.windows(2) {
        let gap = pair[1] - pair[0];
        assert!((5_000..=15_000).contains(&gap), "gap {gap} outside 10 s ± 50%");
    }
    assert!(times.windows(2).any(|p| p[1] - p[0] != 10_000), "jitter moved at least one tick");
}

#[tokio::test(start_paused = true)]
async fn sleep_waits_in_process_or_suspends_with_a_wake_time() {
    let (engine, _) = engine();
    let workflow = |d: Duration| {
        Workflow::builder("sleepy")
            .step(Node::sleep("nap", d))
            .step(add(1).input(InputSource::Value(json!(1))))
            .build()
            .unwrap()
    };
    let start = tokio::time::Instant::now();
    let report = engine.start(&workflow(Duration::from_secs(30)), json!(null)).await.unwrap();
    assert_eq!(report.output, Some(json!(2)));
    assert_eq!(start.elapsed(), Duration::from_secs(30));

    let long = workflow(Duration::from_secs(3600));
    let report = engine.start(&long, json!(null)).await.unwrap();
    assert_eq!(report.status, RunStatus::Suspended);
    let due = T0.plus(Duration::from_secs(30)).plus(Duration::from_secs(3600));
    assert_eq!(report.wake_at, Some(due));
    assert_eq!(report.pending.len(), 1);
    // Resumed early: still suspended. Resumed when due: completes.
    let again = engine.resume(&long, report.run_id).await.unwrap();
    assert_eq!(again.status, RunStatus::Suspended);
    tokio::time::sleep(Duration::from_secs(3600)).await;
    let done = engine.resume(&long, report.run_id).await.unwrap();
    assert_eq!(done.output, Some(json!(2)));
}
