//! X2: experiments (DESIGN §18). A W-style workflow of ten `llm` steps against instant
//! in-process models, `runs` completed runs in a store (in memory, then SQLite); then the same change (one
//! model binding answering another's calls) tried on all of them twice, one run at a time:
//! as bare `Engine::recompute` calls, and as an experiment (the run's record read, the recompute,
//! its usage view, the output diff, two evaluators, the verdict and totals). The difference is
//! the experiment's overhead per run. Then the experiment at concurrency 4: its wall time.

use std::sync::Arc;
use std::time::Instant;

use serde_json::json;
use stepwright::api::experiment::{Change, Evaluator, ExperimentSpec, Population};
use stepwright::app::experiment::{Candidate, run_experiment};
use stepwright::{Engine, InMemoryStore, Node, RecomputeOptions, Store, Synchronous, Workflow};

use crate::current_thread;

/// Steps in each run.
const STEPS: usize = 10;

/// An instant model whose answer says which model gave it.
fn model(category: &'static str) -> stepwright::llm::ScriptedModel {
    stepwright::llm::ScriptedModel::new(move |_request| stepwright::llm::ChatResponse {
        id: None,
        content: json!({ "category": category }).to_string(),
        tool_calls: Vec::new(),
        finish_reason: stepwright::llm::FinishReason::Stop,
        usage: stepwright::llm::Usage { input_tokens: 120, output_tokens: 8, ..Default::default() },
        model: "instant".into(),
    })
}

/// What one X2 measurement found.
pub(crate) struct X2 {
    /// Bare recomputes, one at a time: ms per run (mean).
    pub(crate) bare_ms_per_run: f64,
    /// Recomputes with their report (what `stepwright recompute` prints), one at a time.
    pub(crate) reported_ms_per_run: f64,
    /// The experiment, one at a time: ms per run (mean).
    pub(crate) experiment_ms_per_run: f64,
    /// The experiment at concurrency 4: wall time for all the runs, ms.
    pub(crate) concurrent_wall_ms: f64,
}

/// X2 in memory (two measurements) and on SQLite with `synchronous = NORMAL` (one), as the
/// results table's rows.
pub(crate) fn print_x2(runs: usize) {
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, measurements, on_sqlite) in [("in-memory store", 2, false), ("SQLite NORMAL", 1, true)] {
        let store = |round: u32| -> Arc<dyn Store> {
            if on_sqlite {
                crate::sqlite_engine(dir.path(), &format!("x2-{round}.db"), Synchronous::Normal).1
            } else {
                Arc::new(InMemoryStore::new())
            }
        };
        for round in 1..=measurements {
            let x = x2(runs, &store(round));
            let overhead = (x.experiment_ms_per_run / x.bare_ms_per_run - 1.0) * 100.0;
            let over_reported = (x.experiment_ms_per_run / x.reported_ms_per_run - 1.0) * 100.0;
            println!(
                "| X2 | experiment overhead per recomputed run over a bare `Engine::recompute` ({runs} runs × 10 `llm` steps, instant models, {name}, one at a time, median of 3 interleaved rounds; measurement {round}: bare {:.3} ms, experiment {:.3} ms) | {overhead:.1} % | | ≤ 10 % |",
                x.bare_ms_per_run, x.experiment_ms_per_run
            );
            println!(
                "| X2 | the same over a recompute with its report, as `stepwright recompute` gives it ({:.3} ms) | {over_reported:.1} % | | ≤ 10 % |",
                x.reported_ms_per_run
            );
            println!(
                "| X2 | the same experiment, concurrency 4: {runs} runs recomputed, scored, totalled ({name}, measurement {round}) | {:.0} ms wall | | ≤ 5,000 ms for 1,000 runs |",
                x.concurrent_wall_ms
            );
        }
    }
}

fn x2(runs: usize, store: &Arc<dyn Store>) -> X2 {
    let mut models = stepwright::llm::Models::new();
    models.bind_adapter("smart", "instant-smart", Arc::new(model("bug")), None);
    models.bind_adapter("cheap", "instant-cheap", Arc::new(model("billing")), None);
    let mut spec = stepwright::llm::LlmSpec::new("smart");
    spec.output =
        Some(json!({ "type": "object", "required": ["category"], "properties": { "category": { "type": "string" } } }));
    let mut builder = Workflow::builder("x2");
    for i in 0..STEPS {
        let step = Node::dyn_step(&format!("s{i}"), stepwright::llm::LlmStep::new(spec.clone()));
        builder = builder.step(step.input(stepwright::InputSource::WorkflowInput));
    }
    let workflow = builder.build().expect("valid").with_service(Arc::new(models));
    let engine = Engine::builder().store(store.clone()).build();
    let rt = current_thread();
    rt.block_on(async {
        let mut ids = Vec::with_capacity(runs);
        for _ in 0..runs {
            let report = engine.start(&workflow, json!("Classify: it crashes")).await.expect("run");
            assert_eq!(report.status, stepwright::RunStatus::Completed, "{:?}", report.error);
            ids.push(report.run_id);
        }
        let replacements = std::collections::BTreeMap::from([("smart".to_owned(), "cheap".to_owned())]);
        let rebound = stepwright::app::rebind_models(workflow.clone(), &replacements).expect("rebind");

        let experiment = |concurrency: u32| ExperimentSpec {
            experiment: "cheaper".into(),
            runs: Population::of("x2"),
            change: Change { rebind: replacements.clone(), ..Change::default() },
            evaluators: vec![
                Evaluator {
                    name: "shape".into(),
                    schema: Some(json!({ "required": ["category"] })),
                    check: None,
                    compare: None,
                    judge: None,
                    worker: None,
                },
                Evaluator {
                    name: "same".into(),
                    schema: None,
                    check: None,
                    compare: Some("new.category == old.category".into()),
                    judge: None,
                    worker: None,
                },
            ],
            concurrency: Some(concurrency),
            budget_usd: None,
        };
        let candidate = Candidate::Workflow(workflow.clone(), stepwright::app::Bindings::default());
        // Three rounds, the three ways interleaved in each; the median round of each.
        let (mut bare, mut reported, mut experimented) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..3 {
            let start = Instant::now();
            for run in &ids {
                let report = engine.recompute(&rebound, *run, RecomputeOptions::default()).await.expect("recompute");
                assert!(report.changed);
            }
            bare.push(start.elapsed().as_secs_f64() * 1e3 / runs as f64);
            // What `stepwright recompute` gives a person: the recompute and its report with
            // the usage then and now (the run's model calls read and rolled up).
            let start = Instant::now();
            for run in &ids {
                let view = stepwright::app::recompute_with_report(&engine, &rebound, *run, RecomputeOptions::default())
                    .await
                    .expect("recompute");
                assert!(view.changed);
            }
            reported.push(start.elapsed().as_secs_f64() * 1e3 / runs as f64);
            let start = Instant::now();
            let report = run_experiment(&engine, store.as_ref(), &experiment(1), &candidate, None, None)
                .await
                .expect("experiment");
            experimented.push(start.elapsed().as_secs_f64() * 1e3 / runs as f64);
            assert_eq!((report.totals.runs, report.totals.changed), (runs as u64, runs as u64));
        }
        let (bare_ms_per_run, reported_ms_per_run, experiment_ms_per_run) =
            (crate::median(bare), crate::median(reported), crate::median(experimented));

        let start = Instant::now();
        let report =
            run_experiment(&engine, store.as_ref(), &experiment(4), &candidate, None, None).await.expect("experiment");
        let concurrent_wall_ms = start.elapsed().as_secs_f64() * 1e3;
        assert_eq!(report.totals.regressed, runs as u64);
        X2 { bare_ms_per_run, reported_ms_per_run, experiment_ms_per_run, concurrent_wall_ms }
    })
}

/// R1: recomputing one long run with its own definition (every step clean; then every step a
/// `write`, served from the journal), in memory: what a recompute costs per step of the run,
/// as the run grows.
pub(crate) fn print_r1(lengths: &[usize]) {
    let rt = current_thread();
    for (kind, effect) in [("pure", stepwright::Effect::Pure), ("write", stepwright::Effect::Write)] {
        print_r1_of(&rt, lengths, kind, effect);
    }
}

fn print_r1_of(rt: &tokio::runtime::Runtime, lengths: &[usize], kind: &str, effect: stepwright::Effect) {
    for &steps in lengths {
        let workflow = crate::inc_chain_of("r1", steps, effect);
        let store = Arc::new(InMemoryStore::new());
        let engine = Engine::builder().store(store as Arc<dyn Store>).build();
        let (median, best) = rt.block_on(async {
            let run = engine.start(&workflow, json!(0)).await.expect("run").run_id;
            let mut times = Vec::new();
            for _ in 0..5 {
                let start = Instant::now();
                let report = engine.recompute(&workflow, run, RecomputeOptions::default()).await.expect("recompute");
                times.push(start.elapsed().as_secs_f64() * 1e3);
                assert!(!report.changed, "the same definition changes nothing");
                assert_eq!(report.steps.len(), steps);
            }
            let best = times.iter().copied().fold(f64::INFINITY, f64::min);
            (crate::median(times), best)
        });
        let per_step = |ms: f64| ms * 1e3 / steps as f64;
        println!(
            "| R1 | recompute of one run of {steps} {kind} steps with its own definition, in memory (median of 5) | {median:.1} ms ({:.1} µs/step) | {best:.1} ms ({:.1} µs/step) | (report) |",
            per_step(median),
            per_step(best)
        );
    }
}
