//! The engine's API: observers, durability modes, create/report, artifacts of outputs,
//! cancellation grace, event interrupts, graph entry, descriptions.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use stepwright_core::{
    Caller, Decision, Durability, EngineConfig, ErrorCode, Fork, Graph, InterruptRequest, Node, Observer, Outcome,
    Record, RunId, RunStatus, StartOptions, StepContext, StepError, StepPath, StepStatus, Workflow, dyn_fn_step,
    fn_step,
};
use stepwright_testkit::{Log, engine, engine_with, records_at};

struct Recording(Log);

impl Observer for Recording {
    fn step_started(&self, _run: RunId, path: &StepPath, attempt: u32) {
        self.0.push(format!("start {path} #{attempt}"));
    }

    fn step_finished(&self, _run: RunId, path: &StepPath, status: StepStatus) {
        self.0.push(format!("{status} {path}"));
    }

    fn token(&self, _run: RunId, path: &StepPath, text: &str) {
        self.0.push(format!("token {path} {text:?}"));
    }

    fn run_stopped(&self, _run: RunId, status: RunStatus) {
        self.0.push(format!("stopped {}", status.as_str()));
    }
}

#[tokio::test(start_paused = true)]
async fn observers_see_progress_and_streamed_tokens() {
    let log = Log::default();
    let engine = stepwright_core::Engine::builder().observer(Arc::new(Recording(log.clone()))).build();
    let workflow = Workflow::builder("observed")
        .step(Node::step(
            "speak",
            fn_step(|ctx: StepContext, _x: Value| async move {
                ctx.token("Hel");
                ctx.token("lo");
                Ok("Hello")
            }),
        ))
        .build()
        .unwrap();
    engine.start(&workflow, json!(null)).await.unwrap();
    assert_eq!(
        log.take(),
        ["start speak #1", "token speak \"Hel\"", "token speak \"lo\"", "completed speak", "stopped completed"]
    );

    // The run's end is told once its status is written, however it ends.
    let failing = Workflow::builder("failing")
        .step(Node::step(
            "fall",
            fn_step(|_ctx: StepContext, _x: Value| async move {
                Err::<Value, _>(StepError::new(ErrorCode::new("broken"), "it broke"))
            }),
        ))
        .build()
        .unwrap();
    let report = engine.start(&failing, json!(null)).await.unwrap();
    assert_eq!(report.status, RunStatus::Failed);
    assert_eq!(log.take().last().map(String::as_str), Some("stopped failed"));
}

#[tokio::test]
async fn durability_none_writes_no_journal() {
    let (ephemeral, store) = engine_with(EngineConfig { durability: Durability::None, ..EngineConfig::default() });
    let workflow = Workflow::builder("ephemeral")
        .step(Node::step("one", fn_step(|_c, x: i64| async move { Ok(x + 1) })))
        .build()
        .unwrap();
    let report = ephemeral.start(&workflow, json!(1)).await.unwrap();
    assert_eq!(report.output, Some(json!(2)));
    assert!(store.entries(report.run_id).is_empty());
    assert_eq!(ephemeral.report(report.run_id).await.unwrap().status, RunStatus::Completed);

    let (engine, store) = engine();
    let report = engine.start(&workflow, json!(1)).await.unwrap();
    assert!(!store.entries(report.run_id).is_empty(), "sync mode journals the same run");
}

#[tokio::test]
async fn create_then_resume_runs_a_pending_run_and_report_reads_the_store() {
    let (engine, _) = engine();
    let workflow = Workflow::builder("detached")
        .step(Node::step("one", fn_step(|_c, x: i64| async move { Ok(x * 10) })))
        .build()
        .unwrap();
    let caller = Caller::user(Some("acme"), "ann");
    let record = engine
        .create(&workflow, json!(4), StartOptions { caller: caller.clone(), ..Default::default() })
        .await
        .unwrap();
    assert_eq!(record.status, RunStatus::Pending);
    assert_eq!(record.caller, caller);
    assert_eq!(record.definition_hash, workflow.hash());
    assert_eq!(engine.report(record.id).await.unwrap().status, RunStatus::Pending);
    let done = engine.resume(&workflow, record.id).await.unwrap();
    assert_eq!(done.output, Some(json!(40)));
    let report = engine.report(record.id).await.unwrap();
    assert_eq!((report.status, report.output), (RunStatus::Completed, Some(json!(40))));
}

#[tokio::test]
async fn capture_output_records_an_artifact_of_the_output() {
    let (engine, store) = engine();
    let workflow = Workflow::builder("captured")
        .step(
            Node::step("answer", fn_step(|_c, _x: Value| async move { Ok(json!({ "text": "42" })) }))
                .capture_output("llm-output"),
        )
        .build()
        .unwrap();
    let report = engine.start(&workflow, json!(null)).await.unwrap();
    let artifact = records_at(&store, report.run_id, "answer").into_iter().find_map(|r| match r {
        Record::Artifact { kind, hash, stored } => Some((kind, hash, stored)),
        _ => None,
    });
    assert_eq!(
        artifact,
        Some(("llm-output".to_owned(), stepwright_core::ContentHash::of_value(&json!({ "text": "42" })), true))
    );
}

#[tokio::test(start_paused = true)]
async fn a_step_that_ignores_cancellation_is_dropped_after_the_grace_period() {
    let (engine, _) = engine_with(EngineConfig { cancel_grace: Duration::from_secs(2), ..EngineConfig::default() });
    let stubborn = Node::step(
        "stubborn",
        fn_step(|_c, _x: Value| async move {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Ok(())
        }),
    );
    let failing = Node::step(
        "failing",
        fn_step(|_c, _x: Value| async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            Err::<(), _>(StepError::new(ErrorCode::new("boom"), "failed"))
        }),
    );
    let workflow = Workflow::builder("grace").step(Fork::new("f").path([stubborn]).path([failing])).build().unwrap();
    let start = tokio::time::Instant::now();
    let report = engine.start(&workflow, json!(null)).await.unwrap();
    assert_eq!(report.error.unwrap().code, ErrorCode::new("boom"));
    // Failed at 1 s; the stubborn sibling had 2 s to stop, then was dropped.
    assert_eq!(start.elapsed(), Duration::from_secs(3));
}

#[tokio::test]
async fn event_interrupts_take_a_value() {
    let (engine, _) = engine();
    let workflow = Workflow::builder("webhook")
        .step(Node::dyn_step(
            "await-payment",
            dyn_fn_step("await", |ctx, _input| async move {
                let resolution = ctx.interrupt(InterruptRequest::event("payment.settled")).await?;
                match resolution.decision {
                    Decision::Respond { value } => Ok(Outcome::completed(value)),
                    other => Err(StepError::execution_failed(format!("unexpected {other:?}"))),
                }
            }),
        ))
        .build()
        .unwrap();
    let report = engine.start(&workflow, json!(null)).await.unwrap();
    assert_eq!(report.pending[0].kind, stepwright_core::InterruptKind::Event);
    let id = report.pending[0].id.clone();
    let modify = engine.resolve(report.run_id, &id, Decision::Modify { payload: json!(1) }, &Caller::default()).await;
    assert!(modify.is_err(), "only approvals can be modified");
    engine
        .resolve(report.run_id, &id, Decision::Respond { value: json!({ "amount": 12 }) }, &Caller::default())
        .await
        .unwrap();
    let done = engine.resume(&workflow, report.run_id).await.unwrap();
    assert_eq!(done.output, Some(json!({ "amount": 12 })));
}

#[tokio::test]
async fn graph_entry_chooses_the_first_node() {
    let (engine, _) = engine();
    let workflow = Workflow::builder("entry")
        .step(
            Graph::new("g", 5)
                .node(Node::step("first", fn_step(|_c, x: i64| async move { Ok(x + 1) })))
                .node(Node::step("second", fn_step(|_c, x: i64| async move { Ok(x * 100) })))
                .edge("second", "first")
                .entry("second"),
        )
        .build()
        .unwrap();
    assert_eq!(engine.start(&workflow, json!(2)).await.unwrap().output, Some(json!(201)));
}

#[test]
fn descriptions_are_part_of_the_definition() {
    let build = |text: &str| {
        Workflow::builder("described")
            .step(Node::step("one", fn_step(|_c, x: i64| async move { Ok(x) })).description(text))
            .build()
            .unwrap()
    };
    assert_eq!(build("adds nothing").describe()["steps"][0]["description"], "adds nothing");
    assert_ne!(build("a").hash(), build("b").hash());
}

#[tokio::test(start_paused = true)]
async fn paths_not_started_before_a_cancellation_never_run() {
    let (engine, store) = engine();
    let started = stepwright_testkit::Counter::default();
    let later = |id: &str| {
        let started = started.clone();
        Node::step(
            id,
            fn_step(move |_c, _x: Value| {
                started.hit();
                async move { Ok(()) }
            }),
        )
    };
    let failing = Node::step(
        "first",
        fn_step(|_c, _x: Value| async move { Err::<(), _>(StepError::new(ErrorCode::new("boom"), "first failed")) }),
    );
    let workflow = Workflow::builder("serial-fork")
        .step(Fork::new("f").concurrency(1).path([failing]).path([later("second")]).path([later("third")]))
        .build()
        .unwrap();
    let report = engine.start(&workflow, json!(null)).await.unwrap();
    assert_eq!(report.error.unwrap().message, "first failed");
    assert_eq!(started.get(), 0, "no path starts after the fork was cancelled");
    for path in ["f[1]", "f[2]"] {
        assert!(
            records_at(&store, report.run_id, path).iter().any(|r| matches!(r, Record::Cancelled { .. })),
            "{path} is recorded as cancelled"
        );
    }
}
