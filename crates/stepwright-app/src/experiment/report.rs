//! Reports: what an experiment found, totalled, and a kept experiment as the contract shows
//! it (its summary, its details — a report of what it kept so far while it runs).

use std::collections::HashMap;

use stepwright_api::experiment::{
    ExperimentDetails, ExperimentReport, ExperimentRun, ExperimentSpec, ExperimentStatus, ExperimentSummary,
    ExperimentTotals, Score, Verdict,
};
use stepwright_api::run::Totals;
use stepwright_core::store::experiment::{ExperimentRecord, ExperimentState, ExperimentStore};

use crate::AppError;

/// How a kept experiment stands, as the contract says it.
#[must_use]
pub fn experiment_status(state: ExperimentState) -> ExperimentStatus {
    match state {
        ExperimentState::Running => ExperimentStatus::Running,
        ExperimentState::Completed => ExperimentStatus::Completed,
        ExperimentState::BudgetSpent => ExperimentStatus::BudgetSpent,
        ExperimentState::Cancelled => ExperimentStatus::Cancelled,
    }
}

pub(super) fn kept_state(status: ExperimentStatus) -> ExperimentState {
    match status {
        ExperimentStatus::Running => ExperimentState::Running,
        ExperimentStatus::Completed => ExperimentState::Completed,
        ExperimentStatus::BudgetSpent => ExperimentState::BudgetSpent,
        ExperimentStatus::Cancelled => ExperimentState::Cancelled,
    }
}

/// The report of `done`, the runs recomputed, in the population's order.
pub(super) fn report(
    spec: &ExperimentSpec,
    status: ExperimentStatus,
    done: Vec<ExperimentRun>,
    skipped: u64,
) -> ExperimentReport {
    ExperimentReport {
        experiment: spec.experiment.clone(),
        workflow: spec.runs.workflow.clone(),
        status,
        totals: totals(&done, skipped),
        look_first: look_first(&done),
        runs: done,
    }
}

/// The spec a kept experiment runs.
///
/// # Errors
/// It does not read as a spec (it was kept by another version).
pub fn kept_spec(record: &ExperimentRecord) -> Result<ExperimentSpec, AppError> {
    serde_json::from_value(record.spec.clone())
        .map_err(|e| AppError::BadInput(format!("experiment {}: its kept spec does not read: {e}", record.id)))
}

/// A kept experiment as listed.
#[must_use]
pub fn experiment_summary(record: &ExperimentRecord) -> ExperimentSummary {
    ExperimentSummary {
        id: record.id.to_string(),
        experiment: record.name.clone(),
        workflow: record.workflow.clone(),
        status: experiment_status(record.state),
        created_at: record.created_at.as_micros(),
        runs: population_size(&record.spec["runs"]),
    }
}

/// How many runs (or new inputs) a kept spec's population holds, read without the spec
/// whole (a listing reads many).
fn population_size(runs: &serde_json::Value) -> u64 {
    let count = |field: &str| runs[field].as_array().map_or(0, |items| items.len() as u64);
    match count("inputs") {
        0 => count("ids"),
        inputs => runs["sample"].as_u64().map_or(inputs, |sample| sample.min(inputs)),
    }
}

/// A kept experiment whole: its report once it ended, else the report of what it kept so
/// far (a cancelled one whose process was gone when it was cancelled has only that).
///
/// # Errors
/// The store fails, or what it keeps does not read.
pub async fn experiment_details(
    kept: &dyn ExperimentStore,
    record: ExperimentRecord,
) -> Result<ExperimentDetails, AppError> {
    let spec = kept_spec(&record)?;
    let status = experiment_status(record.state);
    let keys = super::fresh::population_keys(&spec, record.id);
    let population = keys.len() as u64;
    let unreadable = |e: serde_json::Error| AppError::BadInput(format!("experiment {}: {e}", record.id));
    let report: ExperimentReport = match &record.report {
        Some(report) => serde_json::from_value(report.clone()).map_err(unreadable)?,
        None => {
            let mut results: HashMap<String, ExperimentRun> = HashMap::new();
            for (run, value) in kept.experiment_kept(record.id).await? {
                results.insert(run.to_string(), serde_json::from_value(value).map_err(unreadable)?);
            }
            let done: Vec<ExperimentRun> = keys.iter().filter_map(|id| results.remove(id)).collect();
            let skipped = population.saturating_sub(done.len() as u64);
            report(&spec, status, done, skipped)
        }
    };
    Ok(ExperimentDetails {
        id: record.id.to_string(),
        status,
        created_at: record.created_at.as_micros(),
        runs: population,
        recomputed: report.runs.len() as u64,
        spec,
        report,
    })
}

fn add(into: &mut Totals, more: &Totals) {
    into.calls += more.calls;
    into.input_tokens += more.input_tokens;
    into.output_tokens += more.output_tokens;
    into.cost_usd += more.cost_usd;
    into.calls_without_usage += more.calls_without_usage;
    into.latency_ms += more.latency_ms;
}

fn totals(runs: &[ExperimentRun], skipped: u64) -> ExperimentTotals {
    let (mut before, mut after) = (Totals::default(), Totals::default());
    for run in runs {
        add(&mut before, &run.usage.before);
        add(&mut after, &run.usage.after);
    }
    let count = |f: &dyn Fn(&ExperimentRun) -> bool| runs.iter().filter(|r| f(r)).count() as u64;
    let per_1000 = |cost: f64| if runs.is_empty() { 0.0 } else { cost / runs.len() as f64 * 1000.0 };
    // The mean of each evaluator's scores, over the runs it scored.
    let mut means: Vec<Score> = Vec::new();
    if let Some(first) = runs.iter().find(|r| !r.scores.is_empty()) {
        for (i, score) in first.scores.iter().enumerate() {
            let mean = |pick: &dyn Fn(&Score) -> Option<f64>| {
                let values: Vec<f64> = runs.iter().filter_map(|r| r.scores.get(i).and_then(pick)).collect();
                (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
            };
            means.push(Score {
                name: score.name.clone(),
                old: mean(&|s| s.old),
                new: mean(&|s| s.new),
                error: None,
                reason: None,
            });
        }
    }
    ExperimentTotals {
        runs: runs.len() as u64,
        changed: count(&|r| r.changed),
        unchanged: count(&|r| !r.changed),
        improved: count(&|r| r.verdict == Verdict::Improved),
        regressed: count(&|r| r.verdict == Verdict::Regressed),
        failed: count(&|r| r.status == stepwright_api::RunStatus::Failed),
        would_execute: count(&|r| !r.would_execute.is_empty()),
        skipped,
        cost_per_1000_before: per_1000(before.cost_usd),
        cost_per_1000_after: per_1000(after.cost_usd),
        before,
        after,
        means,
        evaluation_cost_usd: runs.iter().map(|r| r.evaluation_cost_usd).sum(),
    }
}

/// Regressions first, then the largest output diffs: at most ten runs.
fn look_first(runs: &[ExperimentRun]) -> Vec<String> {
    let mut candidates: Vec<&ExperimentRun> =
        runs.iter().filter(|r| r.verdict == Verdict::Regressed || r.changed).collect();
    candidates
        .sort_by_key(|r| (r.verdict != Verdict::Regressed, std::cmp::Reverse(r.diff.len() + r.changed_steps.len())));
    candidates.into_iter().take(10).map(|r| r.run.clone()).collect()
}
