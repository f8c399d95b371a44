//! Fork (and replay): new runs from a run's history.

use serde_json::{Value, json};
use stepwright_core::{EngineError, ForkPatch, Node, RunStatus, StepContext, StepPath, Workflow, fn_step};
use stepwright_testkit::{Counter, engine};

fn counted(id: &str, counter: &Counter, f: fn(i64) -> i64) -> Node {
    let counter = counter.clone();
    Node::step(
        id,
        fn_step(move |_ctx: StepContext, x: i64| {
            counter.hit();
            async move { Ok(f(x)) }
        }),
    )
}

#[tokio::test(start_paused = true)]
async fn fork_continues_from_before_a_step_with_edited_state_and_records_lineage() {
    let (engine, store) = engine();
    let (a, b, c) = (Counter::default(), Counter::default(), Counter::default());
    let workflow = Workflow::builder("forkable")
        .step(counted("a", &a, |x| x + 1))
        .step(counted("b", &b, |x| x * 10))
        .step(counted("c", &c, |x| x - 3))
        .build()
        .unwrap();
    let parent = engine.start(&workflow, json!(1)).await.unwrap();
    assert_eq!(parent.output, Some(json!(17)));

    // Fork before `b`, claiming `a` had produced 5: b and c run again, a does not.
    let patch = ForkPatch { outputs: [("a".to_owned(), json!(5))].into(), ..ForkPatch::default() };
    let child = engine.fork(parent.run_id, &StepPath::new("b"), patch).await.unwrap();
    assert_eq!(child.status, RunStatus::Pending);
    assert_eq!(child.parent.as_ref().map(|l| (l.run, l.at.as_str().to_owned())), Some((parent.run_id, "b".to_owned())));
    let done = engine.resume(&workflow, child.id).await.unwrap();
    assert_eq!(done.output, Some(json!(47)));
    assert_eq!((a.get(), b.get(), c.get()), (1, 2, 2), "a ran once (in the parent); b and c again in the fork");
    // The parent is unchanged.
    let parent_now = stepwright_core::Store::load(&*store, parent.run_id).await.unwrap();
    assert_eq!(parent_now.record.output, Some(json!(17)));

    // A fork at the first step with a new input re-runs everything.
    let patch = ForkPatch { input: Some(json!(100)), ..ForkPatch::default() };
    let fresh = engine.fork(parent.run_id, &StepPath::new("a"), patch).await.unwrap();
    assert_eq!(engine.resume(&workflow, fresh.id).await.unwrap().output, Some(json!(1007)));
}

#[tokio::test]
async fn fork_refuses_points_and_patches_that_do_not_fit() {
    let (engine, _) = engine();
    let workflow = Workflow::builder("small")
        .step(Node::step("a", fn_step(|_c, x: Value| async move { Ok(x) })))
        .step(Node::step("b", fn_step(|_c, x: Value| async move { Ok(x) })))
        .build()
        .unwrap();
    let run = engine.start(&workflow, json!(1)).await.unwrap().run_id;
    let never = engine.fork(run, &StepPath::new("zzz"), ForkPatch::default()).await.unwrap_err();
    assert!(
        matches!(&never, EngineError::InvalidRequest { reason, .. } if reason.contains("never reached step `zzz`")),
        "{never}"
    );
    let patch = ForkPatch { outputs: [("b".to_owned(), json!(0))].into(), ..ForkPatch::default() };
    let late = engine.fork(run, &StepPath::new("b"), patch).await.unwrap_err();
    assert!(
        matches!(&late, EngineError::InvalidRequest { reason, .. } if reason.contains("`b` did not complete before `b`")),
        "{late}"
    );
}

fn replayable(b: fn(i64) -> i64, charges: &Counter, pure_calls: &Counter) -> Workflow {
    let charges = charges.clone();
    Workflow::builder("replayable")
        .step(counted("a", pure_calls, |x| x + 1))
        .step(counted("b", pure_calls, b))
        .step(
            Node::step(
                "charge",
                fn_step(move |_c, x: i64| {
                    charges.hit();
                    async move { Ok(json!({ "charged": x })) }
                }),
            )
            .effect(stepwright_core::Effect::External),
        )
        .build()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn replay_serves_effects_and_reports_identical_steps() {
    let (engine, store) = engine();
    let (charges, pure) = (Counter::default(), Counter::default());
    let workflow = replayable(|x| x * 2, &charges, &pure);
    let run = engine.start(&workflow, json!(1)).await.unwrap();
    let before = store.entries(run.run_id).len();
    let report = engine.replay(&workflow, run.run_id).await.unwrap();
    assert!(report.identical, "{report:#?}");
    let outcomes: Vec<_> = report.steps.iter().map(|s| (s.path.as_str().to_owned(), s.outcome)).collect();
    assert_eq!(
        outcomes,
        [
            ("a".to_owned(), stepwright_core::StepReplay::Identical),
            ("b".to_owned(), stepwright_core::StepReplay::Identical),
            ("charge".to_owned(), stepwright_core::StepReplay::Served),
        ]
    );
    assert_eq!(charges.get(), 1, "the external effect was served from the journal, not repeated");
    assert_eq!(pure.get(), 4, "the pure steps ran again");
    assert_eq!(store.entries(run.run_id).len(), before, "the replay wrote nothing to the engine's store");
}

#[tokio::test(start_paused = true)]
async fn replay_with_changed_code_reports_what_differs() {
    let (engine, _) = engine();
    let (charges, pure) = (Counter::default(), Counter::default());
    let run = engine.start(&replayable(|x| x * 2, &charges, &pure), json!(1)).await.unwrap();
    let changed = replayable(|x| x * 3, &charges, &pure);
    let report = engine.replay(&changed, run.run_id).await.unwrap();
    assert!(!report.identical);
    let b = report.steps.iter().find(|s| s.path.as_str() == "b").unwrap();
    assert_eq!(b.outcome, stepwright_core::StepReplay::Different);
    assert_eq!(b.replayed, Some(stepwright_core::ContentHash::of_value(&json!(6))));
    // The external step's recorded result is served even though its input changed.
    assert_eq!(report.replayed_output, Some(json!({ "charged": 4 })));
    assert_eq!(charges.get(), 1);
}

#[tokio::test(start_paused = true)]
async fn replay_re_evaluates_branch_decisions() {
    let (engine, _) = engine();
    let route = |threshold: i64| {
        Workflow::builder("route")
            .step(
                stepwright_core::Branch::new("pick")
                    .when(
                        stepwright_core::Expr::new(move |s| s.input().as_i64() > Some(threshold)),
                        [Node::step("big", fn_step(|_c, x: i64| async move { Ok(x) }))],
                    )
                    .otherwise([Node::step("small", fn_step(|_c, x: i64| async move { Ok(-x) }))]),
            )
            .build()
            .unwrap()
    };
    let run = engine.start(&route(10), json!(5)).await.unwrap();
    let report = engine.replay(&route(1), run.run_id).await.unwrap();
    let outcomes: Vec<_> = report.steps.iter().map(|s| (s.path.as_str().to_owned(), s.outcome)).collect();
    assert!(outcomes.contains(&("pick/small".to_owned(), stepwright_core::StepReplay::Missing)), "{outcomes:?}");
    assert!(outcomes.contains(&("pick/big".to_owned(), stepwright_core::StepReplay::Added)), "{outcomes:?}");
    assert_eq!(report.replayed_output, Some(json!(5)));
}

fn order_flow(lines: fn(i64) -> Value, writes: &Counter, a_calls: &Counter) -> Workflow {
    let writes = writes.clone();
    let a_calls = a_calls.clone();
    Workflow::builder("orders")
        .step(Node::step(
            "a",
            fn_step(move |_c, x: i64| {
                a_calls.hit();
                async move { Ok(x) }
            }),
        ))
        .step(Node::step("lines", fn_step(move |_c, x: i64| async move { Ok(lines(x)) })).diff_key("sku"))
        .step(
            Node::step(
                "save",
                fn_step(move |_c, v: Value| {
                    writes.hit();
                    async move { Ok(json!({ "saved": v.as_array().map_or(0, Vec::len) })) }
                }),
            )
            .effect(stepwright_core::Effect::Write),
        )
        .build()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn recompute_reports_keyed_diffs_and_never_repeats_writes() {
    let (engine, _) = engine();
    let (writes, a_calls) = (Counter::default(), Counter::default());
    let v1 = order_flow(|x| json!([{ "sku": "a", "qty": x }, { "sku": "b", "qty": 1 }]), &writes, &a_calls);
    let run = engine.start(&v1, json!(2)).await.unwrap();
    let v2 = order_flow(
        |x| json!([{ "sku": "new", "qty": 9 }, { "sku": "a", "qty": x * 10 }, { "sku": "b", "qty": 1 }]),
        &writes,
        &a_calls,
    );
    let report = engine.recompute(&v2, run.run_id, stepwright_core::RecomputeOptions::default()).await.unwrap();
    assert!(report.changed);
    let by_path: std::collections::HashMap<_, _> =
        report.steps.iter().map(|s| (s.path.as_str().to_owned(), s.change.clone())).collect();
    assert_eq!(by_path["a"], stepwright_core::StepChange::Clean);
    assert_eq!(
        by_path["lines"],
        stepwright_core::StepChange::ValueChanged {
            diff: vec![
                r#"[sku="a"]/qty: 2 → 20"#.to_owned(),
                r#"[sku="new"]: (absent) → {"qty":9,"sku":"new"}"#.to_owned()
            ]
        }
    );
    assert_eq!(by_path["save"], stepwright_core::StepChange::Served, "a write is never repeated by a recompute");
    assert_eq!(writes.get(), 1);
    assert_eq!(report.recomputed_output, Some(json!({ "saved": 2 })), "the served write keeps its recorded result");
    // Its input changed (`lines` did): the report says what it would have been given.
    let save = report.steps.iter().find(|s| s.path.as_str() == "save").unwrap();
    assert_eq!(
        save.would_execute_with,
        Some(json!([{ "sku": "new", "qty": 9 }, { "sku": "a", "qty": 20 }, { "sku": "b", "qty": 1 }]))
    );
    assert!(save.why.as_deref().unwrap().contains("whose input changed"), "{:?}", save.why);

    // A definition that changes nothing the write is given: served, and nothing to say.
    let same = order_flow(|x| json!([{ "sku": "a", "qty": x }, { "sku": "b", "qty": 1 }]), &writes, &a_calls);
    let report = engine.recompute(&same, run.run_id, stepwright_core::RecomputeOptions::default()).await.unwrap();
    let save = report.steps.iter().find(|s| s.path.as_str() == "save").unwrap();
    assert_eq!((&save.change, &save.would_execute_with), (&stepwright_core::StepChange::Served, &None));
    assert!(!report.changed);
}

#[tokio::test(start_paused = true)]
async fn a_recompute_leaves_out_only_the_diffs_it_is_told_to() {
    let (engine, _) = engine();
    let (writes, a_calls) = (Counter::default(), Counter::default());
    let v1 = order_flow(|x| json!([{ "sku": "a", "qty": x }]), &writes, &a_calls);
    let run = engine.start(&v1, json!(2)).await.unwrap().run_id;
    let v2 = order_flow(|x| json!([{ "sku": "a", "qty": x * 10 }]), &writes, &a_calls);
    let full = engine.recompute(&v2, run, stepwright_core::RecomputeOptions::default()).await.unwrap();
    let lines = stepwright_core::StepFilter::new(|path| path.as_str() == "lines");
    let options = stepwright_core::RecomputeOptions { without_diff: Some(lines), ..Default::default() };
    let bare = engine.recompute(&v2, run, options).await.unwrap();
    let change_of = |report: &stepwright_core::RecomputeReport, path: &str| {
        report.steps.iter().find(|s| s.path.as_str() == path).map(|s| s.change.clone()).unwrap()
    };
    assert_eq!(
        change_of(&full, "lines"),
        stepwright_core::StepChange::ValueChanged { diff: vec![r#"[sku="a"]/qty: 2 → 20"#.to_owned()] }
    );
    // Still a change, without its lines; every other step, the outputs and the verdict as they were.
    assert_eq!(change_of(&bare, "lines"), stepwright_core::StepChange::ValueChanged { diff: Vec::new() });
    let others = |report: &stepwright_core::RecomputeReport| {
        report.steps.iter().filter(|s| s.path.as_str() != "lines").cloned().collect::<Vec<_>>()
    };
    assert_eq!(others(&bare), others(&full));
    assert_eq!(
        (bare.changed, &bare.recorded_output, &bare.recomputed_output),
        (full.changed, &full.recorded_output, &full.recomputed_output)
    );
    assert!(bare.changed);
}

#[tokio::test(start_paused = true)]
async fn recompute_from_a_step_serves_what_came_before_and_can_persist_as_a_fork() {
    let (engine, store) = engine();
    let (writes, a_calls) = (Counter::default(), Counter::default());
    let v1 = order_flow(|x| json!([{ "sku": "a", "qty": x }]), &writes, &a_calls);
    let run = engine.start(&v1, json!(3)).await.unwrap();
    let v2 = order_flow(|x| json!([{ "sku": "a", "qty": x + 1 }]), &writes, &a_calls);
    let options =
        stepwright_core::RecomputeOptions { from: Some(StepPath::new("lines")), persist: true, without_diff: None };
    let report = engine.recompute(&v2, run.run_id, options).await.unwrap();
    assert_eq!(a_calls.get(), 1, "`a` came before `lines`: served, not run again");
    let a = report.steps.iter().find(|s| s.path.as_str() == "a").unwrap();
    assert_eq!(a.change, stepwright_core::StepChange::Served);
    let forked = report.forked.expect("persisted");
    let kept = stepwright_core::Store::load(&*store, forked).await.unwrap();
    assert_eq!(kept.record.parent.map(|l| (l.run, l.at.as_str().to_owned())), Some((run.run_id, "lines".to_owned())));
    assert_eq!(kept.record.status, RunStatus::Completed);
    let lines = kept
        .entries
        .iter()
        .find(|e| e.path.as_str() == "lines" && matches!(e.record, stepwright_core::Record::Completed { .. }));
    assert!(lines.is_some());
    let original = stepwright_core::Store::load(&*store, run.run_id).await.unwrap();
    assert_eq!(original.record.output, run.output, "the original is unchanged");
}

#[tokio::test(start_paused = true)]
async fn recompute_reports_schema_violations_and_changed_decisions() {
    let (engine, _) = engine();
    // score = input × multiplier, checked against a schema; route picks `high` above 10.
    let flow = |multiplier: i64, schema_max: i64| {
        Workflow::builder("checked")
            .step(
                Node::step("score", fn_step(move |_c, x: i64| async move { Ok(x * multiplier) }))
                    .output_schema(json!({ "type": "integer", "maximum": schema_max })),
            )
            .step(
                stepwright_core::Branch::new("route")
                    .when(
                        stepwright_core::Expr::new(|s| s.output("score").and_then(Value::as_i64) > Some(10)),
                        [Node::step("high", fn_step(|_c, x: i64| async move { Ok(x) }))],
                    )
                    .otherwise([Node::step("low", fn_step(|_c, x: i64| async move { Ok(x) }))]),
            )
            .build()
            .unwrap()
    };
    let run = engine.start(&flow(1, 100), json!(5)).await.unwrap();
    assert_eq!(run.output, Some(json!(5)), "score 5 took the `low` arm");
    // A tighter schema that the new score (15) breaks.
    let strict = engine.recompute(&flow(3, 10), run.run_id, Default::default()).await.unwrap();
    let score = strict.steps.iter().find(|s| s.path.as_str() == "score").unwrap();
    assert!(
        matches!(&score.change, stepwright_core::StepChange::SchemaViolation { message } if message.contains("maximum")),
        "{score:?}"
    );
    assert!(strict.changed);
    // The same schema: score 15 now takes the `high` arm.
    let rerouted = engine.recompute(&flow(3, 100), run.run_id, Default::default()).await.unwrap();
    assert_eq!(rerouted.decisions.len(), 1, "{:?}", rerouted.decisions);
    assert_eq!(rerouted.decisions[0].path.as_str(), "route");
    assert_eq!(rerouted.decisions[0].before, Some(json!({ "arm": "otherwise" })));
    assert_eq!(rerouted.decisions[0].after, Some(json!({ "arm": 0 })));
    let outcomes: Vec<_> = rerouted.steps.iter().map(|s| (s.path.as_str().to_owned(), s.change.clone())).collect();
    assert!(outcomes.contains(&("route/low".to_owned(), stepwright_core::StepChange::Missing)), "{outcomes:?}");
    assert!(outcomes.contains(&("route/high".to_owned(), stepwright_core::StepChange::Added)), "{outcomes:?}");
}

/// A recompute that fails says where and why: the step that failed is `failed` with its error,
/// the steps after it are missing "not reached: … failed at STEP", and the report carries the
/// recompute's status and error.
#[tokio::test(start_paused = true)]
async fn a_failed_recompute_says_which_step_failed_and_why() {
    let (engine, _) = engine();
    let flow = |fail: bool| {
        Workflow::builder("fragile")
            .step(Node::step("a", fn_step(|_c, x: i64| async move { Ok(x + 1) })))
            .step(Node::step(
                "b",
                fn_step(move |_c, x: i64| async move {
                    if fail {
                        Err(stepwright_core::StepError::execution_failed("the new code divides by zero"))
                    } else {
                        Ok(x * 2)
                    }
                }),
            ))
            .step(Node::step("c", fn_step(|_c, x: i64| async move { Ok(x - 1) })))
            .build()
            .unwrap()
    };
    let run = engine.start(&flow(false), json!(1)).await.unwrap();
    let report = engine.recompute(&flow(true), run.run_id, Default::default()).await.unwrap();
    assert_eq!(report.status, RunStatus::Failed);
    assert!(report.error.as_ref().is_some_and(|e| e.message.contains("divides by zero")), "{:?}", report.error);
    let b = report.steps.iter().find(|s| s.path.as_str() == "b").unwrap();
    assert!(
        matches!(&b.change, stepwright_core::StepChange::Failed { error } if error.message.contains("divides by zero")),
        "{b:?}"
    );
    let c = report.steps.iter().find(|s| s.path.as_str() == "c").unwrap();
    assert_eq!(c.change, stepwright_core::StepChange::Missing);
    assert_eq!(c.why.as_deref(), Some("not reached: the recompute ended failed at b before it"));
    assert!(report.changed);
}

/// From a later step, a step served from the journal serves its sub-steps too (a branch's
/// arm): they are `served`, not missing, and nothing changed when nothing did.
#[tokio::test(start_paused = true)]
async fn a_served_steps_sub_steps_are_served_not_missing() {
    let (engine, _) = engine();
    let flow = Workflow::builder("arms")
        .step(
            stepwright_core::Branch::new("route")
                .when(
                    stepwright_core::Expr::new(|s| s.input().as_i64() > Some(10)),
                    [Node::step("high", fn_step(|_c, x: i64| async move { Ok(x) }))],
                )
                .otherwise([Node::step("low", fn_step(|_c, x: i64| async move { Ok(-x) }))]),
        )
        .step(Node::step("last", fn_step(|_c, x: i64| async move { Ok(x * 2) })))
        .build()
        .unwrap();
    let run = engine.start(&flow, json!(5)).await.unwrap();
    let options =
        stepwright_core::RecomputeOptions { from: Some(StepPath::new("last")), persist: false, without_diff: None };
    let report = engine.recompute(&flow, run.run_id, options).await.unwrap();
    let low = report.steps.iter().find(|s| s.path.as_str() == "route/low").unwrap();
    assert_eq!(low.change, stepwright_core::StepChange::Served, "{:?}", report.steps);
    assert!(!report.changed, "{:?}", report.steps);
    assert_eq!(report.status, RunStatus::Completed);
}

/// A write whose input guardrail rewrites what it is given is compared as the attempt got it:
/// recomputed with nothing changed, it would get the same — no "would execute" is claimed.
#[tokio::test(start_paused = true)]
async fn a_guarded_write_is_compared_as_its_attempt_got_its_input() {
    use stepwright_core::{Guardrail, GuardrailAction, GuardrailStage, PatternGuardrail};
    let (engine, store) = engine();
    let writes = Counter::default();
    let flow = |prefix: &'static str| {
        let writes = writes.clone();
        Workflow::builder("guarded-write")
            .step(Node::step(
                "draft",
                fn_step(move |_c, to: String| async move { Ok(json!(format!("{prefix} {to}"))) }),
            ))
            .step(
                Node::step(
                    "send",
                    fn_step(move |_c, v: Value| {
                        writes.hit();
                        async move { Ok(json!({ "sent": v })) }
                    }),
                )
                .effect(stepwright_core::Effect::Write)
                .guardrail(Guardrail::new(
                    GuardrailStage::Input,
                    GuardrailAction::Redact,
                    PatternGuardrail::new("email", r"[\w.]+@[\w.]+").unwrap(),
                )),
            )
            .build()
            .unwrap()
    };
    let run = engine.start(&flow("write to"), json!("bob@example.com")).await.unwrap();
    assert_eq!(run.output, Some(json!({ "sent": "write to [REDACTED]" })));
    let same = engine.recompute(&flow("write to"), run.run_id, stepwright_core::RecomputeOptions::default()).await;
    let send = same.unwrap().steps.into_iter().find(|s| s.path.as_str() == "send").unwrap();
    assert_eq!(send.would_execute_with, None, "the same input, through the same guardrail");
    let kept = stepwright_core::RecomputeOptions { from: None, persist: true, without_diff: None };
    let other = engine.recompute(&flow("mail"), run.run_id, kept).await.unwrap();
    let send = other.steps.iter().find(|s| s.path.as_str() == "send").unwrap();
    assert_eq!(send.would_execute_with, Some(json!("mail [REDACTED]")), "as the attempt would get it");
    assert_eq!(writes.get(), 1);
    // Kept as a fork, the artifact that says so is there to read.
    let fork = stepwright_core::Store::load(&*store, other.forked.unwrap()).await.unwrap();
    let noted = fork.entries.iter().find_map(|e| match &e.record {
        stepwright_core::Record::Artifact { kind, hash, stored: true } if kind == "would-execute-input" => Some(*hash),
        _ => None,
    });
    let blob = stepwright_core::Store::blob(&*store, noted.expect("noted in the fork")).await.unwrap();
    assert_eq!(blob.as_deref(), Some(&json!("mail [REDACTED]")));
}
