//! A sandbox re-execution (a recompute, a replay) never performs an effect the original run
//! did not have: a `write` step the new definition adds, or a `write` call a step makes anew
//! (an agent's new tool call), is not executed — it fails `not_executed`, and the recompute's
//! report says so, with the input it would have been given.

use serde_json::{Value, json};
use stepwright_core::{CallKind, Effect, ErrorCode, Node, RecomputeOptions, StepChange, Workflow, fn_step};
use stepwright_testkit::{Counter, engine};

fn write(id: &str, counter: &Counter) -> Node {
    let counter = counter.clone();
    Node::step(
        id,
        fn_step(move |_c, v: Value| {
            counter.hit();
            async move { Ok(json!({ "done": v })) }
        }),
    )
    .effect(Effect::Write)
}

fn flow(extra_write: bool, charges: &Counter, refunds: &Counter) -> Workflow {
    let mut builder = Workflow::builder("billing")
        .step(Node::step("amount", fn_step(|_c, x: i64| async move { Ok(x * 10) })))
        .step(write("charge", charges));
    if extra_write {
        builder = builder.step(write("refund", refunds));
    }
    builder.build().unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_recompute_does_not_perform_a_write_the_new_definition_adds() {
    let (engine, _) = engine();
    let (charges, refunds) = (Counter::default(), Counter::default());
    let run = engine.start(&flow(false, &charges, &refunds), json!(3)).await.unwrap();
    assert_eq!(charges.get(), 1);

    let report =
        engine.recompute(&flow(true, &charges, &refunds), run.run_id, RecomputeOptions::default()).await.unwrap();
    assert_eq!((charges.get(), refunds.get()), (1, 0), "no write ran in the sandbox");
    let refund = report.steps.iter().find(|s| s.path.as_str() == "refund").expect("the new step is reported");
    assert!(
        matches!(&refund.change, StepChange::Failed { error } if error.is(&ErrorCode::NOT_EXECUTED)),
        "{:?}",
        refund.change
    );
    assert_eq!(refund.would_execute_with, Some(json!({ "done": 30 })), "the input it would have been given");
    assert!(refund.why.as_deref().unwrap().contains("never ran here"), "{:?}", refund.why);
    assert!(report.changed);
    assert_eq!(report.recomputed_output, None, "the sandbox run ended at the refused write");
    let charge = report.steps.iter().find(|s| s.path.as_str() == "charge").unwrap();
    assert_eq!(charge.change, StepChange::Served, "the recorded write is served, as before");
}

/// A step that sends through a `write` call named by its input (as an agent's tool call is
/// made by its model's answer).
fn sender(sends: &Counter) -> Workflow {
    let sends = sends.clone();
    Workflow::builder("sender")
        .step(Node::step(
            "notify",
            fn_step(move |ctx, to: String| {
                let sends = sends.clone();
                async move {
                    let kind = CallKind::Action { effect: Effect::Write, safe_to_retry: false };
                    let sent = ctx
                        .call(&format!("send-{to}"), kind, |_| async move {
                            sends.hit();
                            Ok(json!({ "sent": to }))
                        })
                        .await?;
                    Ok((*sent).clone())
                }
            }),
        ))
        .build()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_recompute_does_not_make_a_write_call_the_original_run_did_not() {
    let (engine, store) = engine();
    let sends = Counter::default();
    let workflow = sender(&sends);
    let run = engine.start(&workflow, json!("ann")).await.unwrap();
    assert_eq!((sends.get(), run.output.clone()), (1, Some(json!({ "sent": "ann" }))));

    // The same call again: served from the journal, not sent twice.
    let same = engine.recompute(&workflow, run.run_id, RecomputeOptions::default()).await.unwrap();
    assert_eq!((sends.get(), same.recomputed_output), (1, Some(json!({ "sent": "ann" }))));

    // A call the original never made (the input says another recipient: a fork of the run
    // with a new input, recomputed): refused, and the step fails with it.
    let patch = stepwright_core::ForkPatch { input: Some(json!("bob")), ..Default::default() };
    let forked = engine.fork(run.run_id, &stepwright_core::StepPath::new("notify"), patch).await.unwrap();
    let report = engine.recompute(&workflow, forked.id, RecomputeOptions::default()).await.unwrap();
    assert_eq!(sends.get(), 1, "nothing was sent in the sandbox");
    let call =
        report.steps.iter().find(|s| s.path.as_str() == "notify/send-bob").expect("the refused call is reported");
    assert!(
        matches!(&call.change, StepChange::Failed { error } if error.is(&ErrorCode::NOT_EXECUTED)),
        "{:?}",
        call.change
    );
    assert!(call.why.as_deref().unwrap().contains("never made"), "{:?}", call.why);
    // The original runs are as they were.
    let original = stepwright_core::Store::load(&*store, run.run_id).await.unwrap();
    assert_eq!(original.record.output, Some(json!({ "sent": "ann" })));
}

fn scaled(factor: i64, charges: &Counter) -> Workflow {
    Workflow::builder("billing")
        .step(Node::step("amount", fn_step(move |_c, x: i64| async move { Ok(x * factor) })))
        .step(write("charge", charges))
        .build()
        .unwrap()
}

/// An experiment's fresh run: a new input tried on the definition and on a change of it.
/// A write a past run performed with the same input is served that run's answer; one no
/// past run performed is not executed. Nothing is written to the store.
#[tokio::test(start_paused = true)]
async fn a_fresh_run_is_served_what_past_runs_recorded_for_the_same_input_and_performs_nothing() {
    let (engine, store) = engine();
    let charges = Counter::default();
    let workflow = scaled(10, &charges);
    let mut recorded = stepwright_core::RecordedEffects::new();
    let mut past = Vec::new();
    for x in [3, 4] {
        let run = engine.start(&workflow, json!(x)).await.unwrap();
        past.push(run.run_id);
        recorded.add(&stepwright_core::Store::load(&*store, run.run_id).await.unwrap());
    }
    assert_eq!((charges.get(), recorded.runs(), recorded.len()), (2, 2, 2));
    let recorded = std::sync::Arc::new(recorded);
    let before = runs_in(&*store).await;

    // The same input as a past run: its charge is served, the same definition gives the same.
    let same = engine
        .try_fresh(&workflow, &workflow, json!(3), Default::default(), Default::default(), recorded.clone())
        .await
        .unwrap();
    assert_eq!(charges.get(), 2, "served, not performed");
    assert_eq!(same.baseline.record.output, Some(json!({ "done": 30 })));
    assert_eq!(same.report.recomputed_output, Some(json!({ "done": 30 })));
    assert!(!same.report.changed, "{:?}", same.report.steps);

    // A change that gives the charge another input a past run had (4 × 10 = 40 = 2 × 20): in
    // the recompute, the charge stands where the baseline's run had it, and the report says
    // what it would be given now.
    let doubled = scaled(20, &charges);
    let trial = engine
        .try_fresh(&workflow, &doubled, json!(2), Default::default(), Default::default(), recorded.clone())
        .await
        .unwrap();
    assert_eq!(charges.get(), 2);
    assert_eq!(trial.baseline.record.status, stepwright_core::RunStatus::Failed, "no past run charged 20");
    let error = trial.baseline.record.error.clone().unwrap();
    assert!(
        error.is(&ErrorCode::NOT_EXECUTED) && error.message.contains("no recorded run gave this input"),
        "{error:?}"
    );
    // The change reaches a charge a past run made (40): served, with which run's answer.
    assert_eq!(trial.report.recomputed_output, Some(json!({ "done": 40 })));
    let charge = trial.report.steps.iter().find(|s| s.path.as_str() == "charge").unwrap();
    assert_eq!(charge.change, StepChange::Added, "{charge:?}");
    assert!(charge.why.as_deref().unwrap().contains(&past[1].to_string()), "{:?}", charge.why);

    // A new input no past run had: not executed, then or now — the same, not a change.
    let fresh = engine
        .try_fresh(&workflow, &workflow, json!(7), Default::default(), Default::default(), recorded.clone())
        .await
        .unwrap();
    assert_eq!(charges.get(), 2);
    let charge = fresh.report.steps.iter().find(|s| s.path.as_str() == "charge").unwrap();
    assert_eq!((&charge.change, &charge.would_execute_with), (&StepChange::Clean, &None), "{charge:?}");
    assert!(!fresh.report.changed);
    // Changed so that the refused charge would be given another input: that is a change, and
    // the report says the input it would have been given now.
    let fresh = engine
        .try_fresh(&workflow, &doubled, json!(7), Default::default(), Default::default(), recorded.clone())
        .await
        .unwrap();
    assert_eq!(charges.get(), 2);
    let charge = fresh.report.steps.iter().find(|s| s.path.as_str() == "charge").unwrap();
    assert!(matches!(&charge.change, StepChange::Failed { error } if error.is(&ErrorCode::NOT_EXECUTED)));
    assert_eq!(charge.would_execute_with, Some(json!(140)));
    assert!(fresh.report.changed);

    assert_eq!(runs_in(&*store).await, before, "nothing was kept");
}

async fn runs_in(store: &dyn stepwright_core::Store) -> usize {
    store.list_runs(stepwright_core::store::RunFilter::default()).await.unwrap().len()
}

/// A step whose `write` call says what it does (as an agent's tool call does: the tool and its
/// arguments), made at a path that depends on its input (as a turn number does).
fn identified_sender(sends: &Counter) -> Workflow {
    let sends = sends.clone();
    Workflow::builder("sender")
        .step(Node::step(
            "notify",
            fn_step(move |ctx, input: Value| {
                let sends = sends.clone();
                async move {
                    let kind = CallKind::Action { effect: Effect::Write, safe_to_retry: false };
                    let to = input["to"].clone();
                    let name = format!("turn.{}/send", input["turn"]);
                    let identity = json!({ "tool": "send", "args": { "to": &to } });
                    let sent = ctx
                        .call_identified(&name, kind, false, &identity, |_| async move {
                            sends.hit();
                            Ok(json!({ "sent": to }))
                        })
                        .await?;
                    Ok((*sent).clone())
                }
            }),
        ))
        .build()
        .unwrap()
}

/// An experiment's fresh run is served a recorded run's answer to the same call — whichever
/// turn made it — and makes no call no recorded run made.
#[tokio::test(start_paused = true)]
async fn a_fresh_run_is_served_the_answer_to_the_same_call() {
    let (engine, store) = engine();
    let sends = Counter::default();
    let workflow = identified_sender(&sends);
    let run = engine.start(&workflow, json!({ "turn": 1, "to": "ann" })).await.unwrap();
    assert_eq!(sends.get(), 1);
    let mut recorded = stepwright_core::RecordedEffects::new();
    recorded.add(&stepwright_core::Store::load(&*store, run.run_id).await.unwrap());
    let recorded = std::sync::Arc::new(recorded);

    let same = engine
        .try_fresh(
            &workflow,
            &workflow,
            json!({ "turn": 3, "to": "ann" }),
            Default::default(),
            Default::default(),
            recorded.clone(),
        )
        .await
        .unwrap();
    assert_eq!(sends.get(), 1, "served, not sent");
    assert_eq!(same.baseline.record.output, Some(json!({ "sent": "ann" })));
    assert_eq!(same.report.recomputed_output, Some(json!({ "sent": "ann" })));

    let other = engine
        .try_fresh(
            &workflow,
            &workflow,
            json!({ "turn": 1, "to": "bob" }),
            Default::default(),
            Default::default(),
            recorded,
        )
        .await
        .unwrap();
    assert_eq!(sends.get(), 1, "nothing sent to bob");
    let error = other.baseline.record.error.unwrap();
    assert!(error.is(&ErrorCode::NOT_EXECUTED), "{error:?}");
}
