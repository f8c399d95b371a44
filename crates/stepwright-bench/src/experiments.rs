//! X2: experiments (DESIGN §18). A W-style workflow of ten `llm` steps against instant
//! in-process models, `runs` completed runs in a store (in memory, then SQLite); then the same change (one
//! model binding answering another's calls) tried on all of them twice, one run at a time:
//! as bare `Engine::recompute` calls, and as an experiment (the run's record read, the recompute,
//! its usage view, the output diff, two evaluators, the verdict and totals), batch by batch.
//! The difference is the experiment's overhead per run. Then the experiment at concurrency 4
//! over every run: its wall time.

use std::sync::Arc;
use std::time::Instant;

use serde_json::json;
use stepwright::api::experiment::{Change, Evaluator, ExperimentSpec, Population};
use stepwright::app::experiment::{Candidate, run_experiment};
use stepwright::{Engine, InMemoryStore, Node, RecomputeOptions, Store, Synchronous, Workflow};

use crate::current_thread;

/// Steps in each run.
const STEPS: usize = 10;

/// Runs in a batch: the ways are compared batch by batch.
const BATCH: usize = 50;

/// Times over every batch.
const ROUNDS: usize = 3;

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
    /// Bare recomputes, one at a time: ms per run (the median batch's).
    pub(crate) bare_ms_per_run: f64,
    /// Recomputes with their report (what `stepwright recompute` prints), one at a time.
    pub(crate) reported_ms_per_run: f64,
    /// The experiment, one at a time: ms per run (the median batch's).
    pub(crate) experiment_ms_per_run: f64,
    /// The experiment's time over the bare recomputes' of the same batch, less one, in
    /// percent: the median over the batches.
    pub(crate) overhead_pct: f64,
    /// The same over the recomputes with their report.
    pub(crate) over_reported_pct: f64,
    /// How many batch measurements the medians are of.
    pub(crate) batches: usize,
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
            let (overhead, over_reported, batches) = (x.overhead_pct, x.over_reported_pct, x.batches);
            println!(
                "| X2 | experiment overhead per recomputed run over a bare `Engine::recompute` ({runs} runs × 10 `llm` steps, instant models, {name}, one at a time; median over {batches} batches of {BATCH}, each way timed back to back on each; measurement {round}: bare {:.3} ms, experiment {:.3} ms) | {overhead:.1} % | | ≤ 10 % |",
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
        let mut batches: Vec<Vec<stepwright::RunId>> = vec![Vec::new(); runs.div_ceil(BATCH)];
        for i in 0..runs {
            let report = engine.start(&workflow, json!("Classify: it crashes")).await.expect("run");
            assert_eq!(report.status, stepwright::RunStatus::Completed, "{:?}", report.error);
            batches[i / BATCH].push(report.run_id);
        }
        let replacements = std::collections::BTreeMap::from([("smart".to_owned(), "cheap".to_owned())]);
        let rebound = stepwright::app::rebind_models(workflow.clone(), &replacements).expect("rebind");

        // A batch's experiment names its runs by id, as every experiment a front end starts
        // does (`stepwright experiments run` and `POST /v1/experiments` fix the population by
        // id before the first recompute); the one over every run finds them by the filter.
        let experiment = |concurrency: u32, batch: Option<&[stepwright::RunId]>| ExperimentSpec {
            experiment: "cheaper".into(),
            runs: Population {
                ids: batch.map(|ids| ids.iter().map(ToString::to_string).collect()).unwrap_or_default(),
                ..Population::of("x2")
            },
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
        // The three ways, each over the same batch back to back (in an order that turns with
        // every batch), so that each pair of times is taken under the same conditions: the
        // overhead is the median of the batches' ratios, which a slow spell of the machine
        // (it has them) moves little.
        let (mut bare, mut reported, mut experimented) = (Vec::new(), Vec::new(), Vec::new());
        let (mut over_bare, mut over_reported) = (Vec::new(), Vec::new());
        for round in 0..ROUNDS {
            for (b, ids) in batches.iter().enumerate() {
                let per_run = |start: Instant| start.elapsed().as_secs_f64() * 1e3 / ids.len() as f64;
                let mut times = [0.0; 3];
                for way in (0..3).map(|w| (w + round + b) % 3) {
                    let start = Instant::now();
                    match way {
                        0 => {
                            for run in ids {
                                let report = engine
                                    .recompute(&rebound, *run, RecomputeOptions::default())
                                    .await
                                    .expect("recompute");
                                assert!(report.changed);
                            }
                        }
                        // What `stepwright recompute` gives a person: the recompute and its
                        // report with the usage then and now.
                        1 => {
                            for run in ids {
                                let view = stepwright::app::recompute_with_report(
                                    &engine,
                                    &rebound,
                                    *run,
                                    RecomputeOptions::default(),
                                )
                                .await
                                .expect("recompute");
                                assert!(view.changed);
                            }
                        }
                        _ => {
                            let report = run_experiment(
                                &engine,
                                store.as_ref(),
                                &experiment(1, Some(ids)),
                                &candidate,
                                None,
                                None,
                            )
                            .await
                            .expect("experiment");
                            assert_eq!(
                                (report.totals.runs, report.totals.changed),
                                (ids.len() as u64, ids.len() as u64)
                            );
                        }
                    }
                    times[way] = per_run(start);
                }
                bare.push(times[0]);
                reported.push(times[1]);
                experimented.push(times[2]);
                over_bare.push((times[2] / times[0] - 1.0) * 100.0);
                over_reported.push((times[2] / times[1] - 1.0) * 100.0);
            }
        }
        let batches_measured = over_bare.len();
        let (bare_ms_per_run, reported_ms_per_run, experiment_ms_per_run) =
            (crate::median(bare), crate::median(reported), crate::median(experimented));

        let start = Instant::now();
        let report = run_experiment(&engine, store.as_ref(), &experiment(4, None), &candidate, None, None)
            .await
            .expect("experiment");
        let concurrent_wall_ms = start.elapsed().as_secs_f64() * 1e3;
        assert_eq!(report.totals.regressed, runs as u64);
        X2 {
            bare_ms_per_run,
            reported_ms_per_run,
            experiment_ms_per_run,
            overhead_pct: crate::median(over_bare),
            over_reported_pct: crate::median(over_reported),
            batches: batches_measured,
            concurrent_wall_ms,
        }
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
