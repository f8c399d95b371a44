//! The workflow the crash tests kill and resume, shared by the worker and the harness.
//!
//! It has a fork, a loop, a retry and a `write` step. Every step appends `pid path` to an
//! execution log before it works, so the harness can tell which steps a process ran. The
//! write step charges a ledger (a file) under its idempotency key; if a crash leaves its
//! outcome unknown, its fallback reconciles from the ledger, so the charge happens once.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use stepwright::{
    Effect, Expr, Fork, Loop, Node, OnFailure, PathResult, RetryPolicy, StepContext, StepError, Verdict, Workflow,
    fn_step,
};

/// Where the steps write what they did.
#[derive(Debug, Clone)]
pub struct Files {
    /// `pid run path micros` per step execution.
    pub log: PathBuf,
    /// A directory with one ledger file per run: `key amount` per charge.
    pub ledgers: PathBuf,
}

impl Files {
    fn ledger(&self, run: stepwright::RunId) -> PathBuf {
        self.ledgers.join(run.to_string())
    }
}

/// Microseconds since the Unix epoch, as the engine's clock also reports them.
pub fn now_micros() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_micros() as i64).unwrap_or(0)
}

fn append_line(path: &PathBuf, line: &str) -> Result<(), StepError> {
    // One small O_APPEND write: whole or nothing, even if the process is killed.
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| StepError::execution_failed("opening a log").with_cause(e))?;
    file.write_all(format!("{line}\n").as_bytes())
        .map_err(|e| StepError::execution_failed("writing a log").with_cause(e))
}

fn logged(ctx: &StepContext) -> Result<Arc<Files>, StepError> {
    let files = ctx.require::<Files>()?;
    append_line(&files.log, &format!("{} {} {} {}", std::process::id(), ctx.run_id(), ctx.path(), now_micros()))?;
    Ok(files)
}

/// A step that logs, waits `ms`, then computes `f(input)`.
fn work(id: &str, ms: u64, f: fn(i64) -> i64) -> Node {
    Node::step(
        id,
        fn_step(move |ctx: StepContext, x: i64| async move {
            logged(&ctx)?;
            tokio::time::sleep(Duration::from_millis(ms)).await;
            Ok(f(x))
        }),
    )
}

fn ledger_entry(files: &Files, run: stepwright::RunId, key: &str) -> Option<i64> {
    let text = std::fs::read_to_string(files.ledger(run)).unwrap_or_default();
    text.lines().find_map(|line| {
        let (k, amount) = line.split_once(' ')?;
        (k == key).then(|| amount.parse().ok()).flatten()
    })
}

#[allow(clippy::needless_pass_by_value)] // The merge signature hands results over by value.
fn sum(results: Vec<PathResult>) -> Result<Value, StepError> {
    let mut total = 0;
    for result in results {
        match result {
            PathResult::Completed(v) => total += v.as_i64().unwrap_or_default(),
            other => return Err(StepError::execution_failed(format!("a fork path did not complete: {other:?}"))),
        }
    }
    Ok(json!(total))
}

/// A `write` step that charges `input` to the run's ledger under its idempotency key, taking
/// `ms` on either side of the write; if a crash leaves its outcome unknown, its fallback
/// reconciles from the ledger, so the charge happens once.
fn charge(id: &str, ms: u64) -> Node {
    Node::step(
        id,
        fn_step(move |ctx: StepContext, amount: i64| async move {
            let files = logged(&ctx)?;
            let key = ctx.idempotency_key().unwrap_or_default().to_owned();
            tokio::time::sleep(Duration::from_millis(ms)).await;
            append_line(&files.ledger(ctx.run_id()), &format!("{key} {amount}"))?;
            tokio::time::sleep(Duration::from_millis(ms)).await;
            Ok(json!({ "charged": amount }))
        }),
    )
    .effect(Effect::Write)
    .on_failure(OnFailure::Fallback(Box::new(
        Node::step(
            "reconcile",
            fn_step(|ctx: StepContext, amount: i64| async move {
                let files = logged(&ctx)?;
                // A fallback is handed the key of the step it stands in for.
                let key = ctx.idempotency_key().unwrap_or_default().to_owned();
                if ledger_entry(&files, ctx.run_id(), &key).is_none() {
                    append_line(&files.ledger(ctx.run_id()), &format!("{key} {amount}"))?;
                }
                Ok(json!({ "charged": amount }))
            }),
        )
        .effect(Effect::Write)
        .safe_to_retry(),
    )))
}

/// The map the Postgres harness adds: six items, four at once, each computing and then
/// charging its own amount (a `write` per item).
pub const MAPPED_ITEMS: i64 = 6;

/// The workflow the Postgres harness kills: prepare → fork(3) → map(6 items, 4 at once,
/// each with a write) → write. Steps take tens of milliseconds, so a killed worker dies with
/// many paths of a run in flight.
pub fn mapped_workflow() -> Workflow {
    Workflow::builder("crash-test-mapped")
        .version("1.0.0")
        .step(work("prepare", 20, |x| x * 10))
        .step(
            Fork::new("fan")
                .path([work("plus-one", 30, |x| x + 1)])
                .path([work("double", 25, |x| x * 2)])
                .path([work("plus-three", 20, |x| x + 3), work("again", 10, |x| x - 1)])
                .merge(sum),
        )
        .step(
            Fork::map(
                "items",
                Expr::new(|s| {
                    let base = s.input().as_i64().unwrap_or_default();
                    (0..MAPPED_ITEMS).map(|i| json!(base + i)).collect()
                }),
                "item",
                [work("price", 15, |x| x * 3 + 1), charge("ship", 5)],
            )
            .concurrency(4),
        )
        .step(Node::step(
            "total",
            fn_step(|ctx: StepContext, items: Vec<Value>| async move {
                logged(&ctx)?;
                Ok(items.iter().map(|v| v["charged"].as_i64().unwrap_or_default()).sum::<i64>())
            }),
        ))
        .step(charge("charge", 5))
        .build()
        .expect("the mapped crash-test workflow is valid")
}

/// The workflow: prepare → fork(3) → loop(3) → flaky retry → write (with reconcile).
pub fn workflow() -> Workflow {
    let charge = charge("charge", 2);
    Workflow::builder("crash-test")
        .version("1.0.0")
        .step(work("prepare", 2, |x| x * 10))
        .step(
            Fork::new("fan")
                .path([work("plus-one", 3, |x| x + 1)])
                .path([work("double", 3, |x| x * 2)])
                .path([work("plus-three", 3, |x| x + 3), work("again", 1, |x| x - 1)])
                .merge(sum),
        )
        .step(Loop::new("refine", 5, [work("grow", 2, |x| x + 7)]).until(Expr::new(|s| {
            let iteration = s.var("loop").and_then(|l| l["iteration"].as_u64()).unwrap_or(0);
            if iteration >= 3 { Verdict::done("three rounds") } else { Verdict::again("more") }
        })))
        .step(
            Node::step(
                "flaky",
                fn_step(|ctx: StepContext, x: i64| async move {
                    logged(&ctx)?;
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    if ctx.attempt() == 1 {
                        return Err(StepError::new(stepwright::ErrorCode::new("busy"), "try again").retryable(true));
                    }
                    Ok(x * 3)
                }),
            )
            .retry(RetryPolicy::new(3).initial_delay(Duration::from_millis(5))),
        )
        .step(charge)
        .build()
        .expect("the crash-test workflow is valid")
}
