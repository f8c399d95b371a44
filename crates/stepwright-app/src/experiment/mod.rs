//! Experiments (DESIGN §18): a change tried on a population of real past runs. Each run is
//! recomputed in a sandbox — everything a `write` step, an unsafe `external` step or a
//! person decided is served from its journal, so nothing outside is touched and nothing is
//! registered — then scored by the evaluators, old output against new, and judged improved,
//! regressed or the same. The report totals what changed and what it would cost.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::Value;
use stepwright_api::experiment::{
    ExperimentReport, ExperimentRun, ExperimentSpec, ExperimentStatus, Population, Score, Verdict, WouldExecute,
};
use stepwright_api::history::RecomputedStep;
use stepwright_api::run::Totals;
use stepwright_core::store::RunFilter;
use stepwright_core::store::experiment::{ExperimentRecord, ExperimentState, ExperimentStore};
use stepwright_core::{ContentHash, Engine, RecomputeOptions, RunId, RunRecord, StepPath, Store, Workflow};

use crate::{AppError, Bindings};

mod evaluate;
mod fresh;
mod hold;
mod report;
mod worker;

pub use fresh::parse_inputs;
pub use hold::{HOLD_FOR, RENEW_EVERY, hold_from, holder_stopped, take_hold};

use evaluate::{Prepared, ask_judge, judge};
pub use report::{experiment_details, experiment_status, experiment_summary, kept_spec};
use report::{kept_state, report};

/// How many runs a population may hold before the filter must be narrowed (or sampled).
pub const MAX_POPULATION: usize = 100_000;

/// Runs recomputed at once when the spec says nothing.
const DEFAULT_CONCURRENCY: u32 = 4;

/// An experiment file (YAML, or JSON) read and checked: every evaluator's schema compiles and
/// expression parses, the ids are run ids, the instants RFC 3339, the numbers in range.
///
/// # Errors
/// [`AppError::BadInput`], naming `file` and what to change.
pub fn parse_experiment(source: &str, file: &str) -> Result<ExperimentSpec, AppError> {
    let spec: ExperimentSpec =
        serde_saphyr::from_str(source).map_err(|e| AppError::BadInput(format!("{file}: {e}")))?;
    check_experiment(&spec).map_err(|why| AppError::BadInput(format!("{file}: {why}")))?;
    Ok(spec)
}

/// What [`parse_experiment`] checks beyond the shape (the API checks a posted spec so too).
///
/// # Errors
/// What is wrong, and where in the spec.
pub fn check_experiment(spec: &ExperimentSpec) -> Result<(), String> {
    prepared(spec).map(drop)
}

/// [`check_experiment`], giving the evaluators ready to score (each compiled once).
fn prepared(spec: &ExperimentSpec) -> Result<Vec<(String, Prepared)>, String> {
    if spec.experiment.trim().is_empty() {
        return Err("`experiment` (its name) is empty".into());
    }
    if spec.runs.workflow.trim().is_empty() {
        return Err("`runs.workflow` is empty: name the workflow whose runs are recomputed".into());
    }
    if let Some(n) = spec.concurrency
        && !(1..=64).contains(&n)
    {
        return Err(format!("`concurrency` is {n}: it must be between 1 and 64"));
    }
    if let Some(budget) = spec.budget_usd
        && !(budget.is_finite() && budget >= 0.0)
    {
        return Err(format!("`budget_usd` is {budget}: it must be a number of dollars, 0 or more"));
    }
    if spec.runs.sample == Some(0) {
        return Err("`runs.sample` is 0: sample at least one run, or leave it out for all".into());
    }
    for (field, value) in [("since", &spec.runs.since), ("until", &spec.runs.until)] {
        if let Some(text) = value
            && stepwright_schedule::parse_instant(text).is_none()
        {
            return Err(format!("`runs.{field}` {text:?} is not an RFC 3339 instant (2026-11-01T00:00:00Z)"));
        }
    }
    if let Some(tag) = &spec.runs.tag {
        stepwright_core::journal::check_tag(tag).map_err(|why| format!("`runs.tag`: {why}"))?;
    }
    let change = &spec.change;
    let given = [change.file.is_some(), change.source.is_some(), change.version.is_some()];
    if given.iter().filter(|g| **g).count() > 1 {
        return Err("`change`: give at most one of `file`, `source` and `version`".into());
    }
    if !change.files.is_empty() && change.source.is_none() {
        return Err("`change.files` are the files `change.source` calls: give the `source`".into());
    }
    for (name, model) in &change.models {
        stepwright_llm::ModelConfig::parse_spec(model).map_err(|why| format!("`change.models.{name}`: {why}"))?;
    }
    for id in &spec.runs.ids {
        id.parse::<RunId>().map_err(|_| format!("`runs.ids`: {id:?} is not a run id"))?;
    }
    fresh::check(&spec.runs)?;
    let mut names = std::collections::HashSet::new();
    let mut evaluators = Vec::with_capacity(spec.evaluators.len());
    for (i, evaluator) in spec.evaluators.iter().enumerate() {
        let at = || format!("`evaluators[{i}]` ({})", evaluator.name);
        if !names.insert(evaluator.name.as_str()) {
            return Err(format!("{}: another evaluator has this name", at()));
        }
        let ready = Prepared::new(evaluator).map_err(|why| format!("{}: {why}", at()))?;
        evaluators.push((evaluator.name.clone(), ready));
    }
    Ok(evaluators)
}

/// What the runs are recomputed with.
pub enum Candidate {
    /// One definition for every run (a new version of the file, compiled, not registered),
    /// and the host's bindings with the change's models (see [`with_models`]).
    Workflow(Workflow, Bindings),
    /// Each run's own definition, rebuilt from the store with these bindings (the host's,
    /// with the change's models).
    EachRunsOwn(Bindings),
}

impl Candidate {
    /// The host's bindings with the change's models.
    fn bindings(&self) -> &Bindings {
        match self {
            Self::Workflow(_, bindings) | Self::EachRunsOwn(bindings) => bindings,
        }
    }
}

/// What an experiment's runs are recomputed with when its change is given as `source` or a
/// registered `version` of the namespace's (compiled, never registered), else each run's own
/// definition. A `change.file` is the CLI's to read (a server reads no file of its callers).
///
/// # Errors
/// A `file`; a source that does not compile or is another workflow; a version not registered.
pub async fn experiment_candidate(
    registry: &dyn stepwright_store::control::WorkflowRegistry,
    namespace: &str,
    spec: &ExperimentSpec,
    bindings: &Bindings,
) -> Result<Candidate, AppError> {
    let change = &spec.change;
    let bindings = &with_models(bindings, spec);
    let (source, files) = if let Some(file) = &change.file {
        return Err(AppError::BadInput(format!(
            "`change.file` ({file}) is read by the CLI: over the API, send the file's text as `change.source`"
        )));
    } else if let Some(source) = &change.source {
        (source.clone(), change.files.clone())
    } else if let Some(version) = change.version {
        let registered =
            registry.registered_workflow(namespace, &spec.runs.workflow, Some(version)).await?.ok_or_else(|| {
                AppError::BadInput(format!(
                    "`change.version`: no workflow {:?} version {version} is registered",
                    spec.runs.workflow
                ))
            })?;
        (registered.source, registered.files)
    } else {
        return Ok(Candidate::EachRunsOwn(bindings.clone()));
    };
    let loaded = bindings.load_source(&source, &format!("{}.yaml", spec.runs.workflow), &files)?;
    let workflow = crate::prepare(loaded, bindings, crate::Servers::Connected).await?;
    if workflow.name() != spec.runs.workflow {
        return Err(AppError::BadInput(format!(
            "`change.source` is workflow {:?}, but the runs are of {:?}",
            workflow.name(),
            spec.runs.workflow
        )));
    }
    Ok(Candidate::Workflow(workflow, bindings.clone()))
}

/// `bindings` with the spec's model replacements (`change.models`) added to their overrides.
#[must_use]
pub fn with_models(bindings: &Bindings, spec: &ExperimentSpec) -> Bindings {
    let mut bindings = bindings.clone();
    for (name, model) in &spec.change.models {
        let entry = format!("{name}={model}");
        if !bindings.overrides.contains(&entry) {
            bindings.overrides.push(entry);
        }
    }
    bindings
}

/// `bindings` without the spec's model replacements: what the workflow runs with unchanged.
fn without_models(bindings: &Bindings, spec: &ExperimentSpec) -> Bindings {
    let mut bindings = bindings.clone();
    let changed: Vec<String> = spec.change.models.iter().map(|(name, model)| format!("{name}={model}")).collect();
    bindings.overrides.retain(|entry| !changed.contains(entry));
    bindings
}

/// The runs of the population, oldest first: by id, or every run the filter finds (at
/// most [`MAX_POPULATION`]), then the sample drawn with its seed.
///
/// # Errors
/// A run that does not exist or is of another workflow (or tenant), a population too large,
/// the store failing.
pub async fn select_runs(
    store: &dyn Store,
    population: &Population,
    tenant: Option<&str>,
) -> Result<Vec<RunRecord>, AppError> {
    let mut runs: Vec<RunRecord> = Vec::new();
    if population.ids.is_empty() {
        let mut filter = RunFilter {
            workflow: Some(population.workflow.clone()),
            status: Some(crate::wire::kernel_run_status(
                population.status.unwrap_or(stepwright_api::RunStatus::Completed),
            )),
            tenant: tenant.map(str::to_owned),
            started_by: population.started_by.clone(),
            tag: population.tag.clone(),
            created_from: population.since.as_deref().and_then(stepwright_schedule::parse_instant),
            created_until: population.until.as_deref().and_then(stepwright_schedule::parse_instant),
            headers_only: true,
            limit: Some(1_000),
            ..RunFilter::default()
        };
        loop {
            let page = store.list_runs(filter.clone()).await?;
            let full = page.len() == 1_000;
            filter.before = page.last().map(|r| r.id);
            runs.extend(page);
            if runs.len() > MAX_POPULATION {
                return Err(AppError::BadInput(format!(
                    "the population has more than {MAX_POPULATION} runs: narrow it (`since`, `until`, `status`, `tag`) or \
                     draw a `sample`"
                )));
            }
            if !full {
                break;
            }
        }
    } else {
        // Read a thousand headers at a time (a population of ids may be large).
        let mut named: Vec<RunId> = Vec::with_capacity(population.ids.len());
        let mut seen = std::collections::HashSet::with_capacity(population.ids.len());
        for id in &population.ids {
            let run: RunId = id.parse().map_err(|_| AppError::BadInput(format!("{id:?} is not a run id")))?;
            if seen.insert(run) {
                named.push(run);
            }
        }
        for chunk in named.chunks(1_000) {
            let headers = store.run_headers(chunk.to_vec()).await?;
            let mut headers = headers.into_iter().peekable();
            for &run in chunk {
                // A run of another tenant is named as if it did not exist.
                let record = headers
                    .next_if(|r| r.id == run)
                    .filter(|r| tenant.is_none() || r.caller.tenant.as_deref() == tenant)
                    .ok_or_else(|| AppError::BadInput(format!("run {run} does not exist")))?;
                if record.workflow != population.workflow {
                    return Err(AppError::BadInput(format!(
                        "run {run} is a run of {:?}, not of {:?}",
                        record.workflow, population.workflow
                    )));
                }
                runs.push(record);
            }
        }
    }
    runs.sort_by_key(|r| r.id);
    // With new inputs, the sample draws from them; these are the runs that recorded answers.
    if population.inputs.is_empty() && population.sample.is_some() {
        let kept = drawn(runs.len(), population.sample, population.seed);
        runs = kept.into_iter().map(|i| runs[i].clone()).collect();
    }
    Ok(runs)
}

/// Which of `n` items (in their order) a sample of `sample` draws with `seed`: their
/// indices, in order; all of them without a sample.
fn drawn(n: usize, sample: Option<u32>, seed: u64) -> Vec<usize> {
    let mut indices: Vec<usize> = (0..n).collect();
    if let Some(take) = sample {
        let mut rng = SplitMix64(seed);
        // Fisher–Yates over the population in order: the same seed draws the same items.
        for i in (1..indices.len()).rev() {
            let j = usize::try_from(rng.next() % (i as u64 + 1)).unwrap_or(0);
            indices.swap(i, j);
        }
        indices.truncate(take as usize);
        indices.sort_unstable();
    }
    indices
}

/// SplitMix64 (Steele, Lea, Flood 2014): a seeded sequence good enough to draw a sample,
/// and the same on every platform.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// Keeps a new experiment in `kept` with its population fixed: the spec kept names the runs
/// the filter (and sample) found now by id, so that going on after a crash recomputes the
/// same runs, whatever was started since. Returns the spec kept, which is what runs.
///
/// # Errors
/// The spec does not check, the population cannot be read, the store fails.
pub async fn begin_experiment(
    store: &dyn Store,
    kept: &dyn ExperimentStore,
    spec: &ExperimentSpec,
    tenant: Option<&str>,
    id: RunId,
    now: stepwright_core::Timestamp,
    hold: Option<stepwright_core::store::experiment::ExperimentHold>,
) -> Result<ExperimentSpec, AppError> {
    check_experiment(spec).map_err(AppError::BadInput)?;
    if let Some(file) = &spec.runs.inputs_file {
        return Err(AppError::BadInput(format!(
            "`runs.inputs_file` ({file}) is read by the CLI: over the API, send the inputs as `runs.inputs`"
        )));
    }
    let mut runs = select_runs(store, &spec.runs, tenant).await?;
    // Said now: a population fixed with no id would read as no filter at all.
    if runs.is_empty() {
        return Err(AppError::BadInput(if spec.runs.inputs.is_empty() {
            format!("no run of {:?} matches the population's filter: there is nothing to recompute", spec.runs.workflow)
        } else {
            fresh::no_recorded_run(&spec.runs.workflow)
        }));
    }
    if !spec.runs.inputs.is_empty() {
        runs = fresh::newest_recorded(runs);
    }
    let mut fixed = spec.clone();
    let fresh = !spec.runs.inputs.is_empty();
    fixed.runs = Population {
        workflow: spec.runs.workflow.clone(),
        status: None,
        since: None,
        until: None,
        started_by: None,
        tag: None,
        ids: runs.iter().map(|r| r.id.to_string()).collect(),
        // New inputs are kept whole, with their sample: a resume draws the same ones.
        inputs: spec.runs.inputs.clone(),
        inputs_file: None,
        sample: if fresh { spec.runs.sample } else { None },
        seed: if fresh { spec.runs.seed } else { 0 },
    };
    let record = ExperimentRecord {
        id,
        tenant: tenant.map(str::to_owned),
        name: spec.experiment.clone(),
        workflow: spec.runs.workflow.clone(),
        spec: serde_json::to_value(&fixed).map_err(|e| AppError::BadInput(format!("the experiment: {e}")))?,
        state: ExperimentState::Running,
        created_at: now,
        report: None,
        hold,
    };
    kept.experiment_begin(record).await?;
    Ok(fixed)
}

/// Where an experiment keeps each run's result as it comes, and its report at the end.
#[derive(Clone, Copy)]
pub struct Keeping<'a> {
    /// The store.
    pub store: &'a dyn ExperimentStore,
    /// The experiment's id.
    pub id: RunId,
    /// Who holds it, renewing the hold as it works (a server); none: no one holds it (a CLI).
    pub holder: Option<&'a str>,
}

/// Runs the experiment: every run of the population recomputed with `candidate` (at the
/// spec's concurrency, until the budget is spent), scored and judged. With `keeping`, each
/// result is kept as it comes and the report at the end; a run already kept (the experiment
/// was stopped and goes on) is not recomputed, and what it cost counts against the budget.
///
/// # Errors
/// The population cannot be read, or the spec does not check; a run whose recompute fails
/// is reported as failed, not an error.
pub async fn run_experiment(
    engine: &Engine,
    store: &dyn Store,
    spec: &ExperimentSpec,
    candidate: &Candidate,
    tenant: Option<&str>,
    keeping: Option<Keeping<'_>>,
) -> Result<ExperimentReport, AppError> {
    let evaluators = prepared(spec).map_err(AppError::BadInput)?;
    let runs = select_runs(store, &spec.runs, tenant).await?;
    // New inputs (`runs.inputs`): the runs found are those whose recorded effects serve them.
    let cases = match spec.runs.inputs.is_empty() {
        true => None,
        false => Some(fresh::Cases::prepare(store, spec, candidate, &runs, keeping.map(|k| k.id), tenant).await?),
    };
    let keys: Vec<RunId> = match &cases {
        None => runs.iter().map(|r| r.id).collect(),
        Some(cases) => cases.keys().to_vec(),
    };
    let concurrency = spec.concurrency.unwrap_or(DEFAULT_CONCURRENCY) as usize;
    // What an earlier process of this experiment finished.
    let mut earlier: HashMap<RunId, ExperimentRun> = HashMap::new();
    if let Some(keeping) = keeping {
        for (run, result) in keeping.store.experiment_kept(keeping.id).await? {
            let result: ExperimentRun = serde_json::from_value(result).map_err(|e| {
                AppError::BadInput(format!("experiment {}: a kept result does not read: {e}", keeping.id))
            })?;
            earlier.insert(run, result);
        }
    }
    let spent = Mutex::new(earlier.values().map(spent_on).sum::<f64>());
    let definitions: Mutex<HashMap<Option<ContentHash>, (Workflow, Workflow)>> = Mutex::default();
    let over_budget = || spec.budget_usd.is_some_and(|budget| *spent.lock().expect("poisoned") >= budget);
    let cancelled = Cancelled::default();
    let one = |index: usize| {
        let (evaluators, definitions, spent, earlier, cancelled, cases, runs) =
            (&evaluators, &definitions, &spent, &earlier, &cancelled, &cases, &runs);
        let run = keys[index];
        async move {
            if let Some(done) = earlier.get(&run) {
                return (index, Some(Ok(done.clone())));
            }
            if over_budget() || cancelled.seen(keeping).await {
                return (index, None);
            }
            let result = match cases {
                None => recompute_one(engine, store, spec, candidate, definitions, evaluators, &runs[index]).await,
                Some(cases) => cases.try_one(engine, spec, evaluators, index).await,
            };
            if let Ok(done) = &result {
                *spent.lock().expect("poisoned") += spent_on(done);
                // Kept before the next starts: a crash from here on does not recompute it.
                if let Some(keeping) = keeping {
                    let value = serde_json::to_value(done).unwrap_or(Value::Null);
                    if let Err(error) = keeping.store.experiment_keep(keeping.id, run, value).await {
                        tracing::warn!(run = %run, error = %error, "an experiment's result could not be kept; it is recomputed if the experiment goes on");
                    }
                }
            }
            (index, Some(result))
        }
    };
    // `concurrency` workers, each taking the next run when it is done with one: a run's work
    // (a recompute's future is about 10 KiB) is not put on the heap, and no task is made, per run.
    let next = AtomicUsize::new(0);
    let worker = || async {
        let mut results = Vec::new();
        loop {
            let index = next.fetch_add(1, Ordering::Relaxed);
            if index >= keys.len() {
                return results;
            }
            results.push(one(index).await);
        }
    };
    let work = futures_util::stream::iter(0..concurrency.min(keys.len()))
        .map(|_| worker())
        .buffer_unordered(concurrency)
        .concat();
    // A holder renews its hold while it works; a hold lost (another took the experiment up)
    // stops the work: the runs under way are dropped, not kept, and the other goes on.
    let mut results: Vec<(usize, Option<Result<ExperimentRun, AppError>>)> =
        match keeping.and_then(|k| k.holder.map(|holder| (k, holder))) {
            None => work.await,
            Some((keeping, holder)) => {
                let lost = hold::keep_holding(engine, keeping.store, keeping.id, holder);
                tokio::select! {
                    results = work => results,
                    lost = lost => return Err(lost),
                }
            }
        };
    results.sort_by_key(|(index, _)| *index);
    let mut done = Vec::with_capacity(results.len());
    let mut skipped = 0_u64;
    for (index, result) in results {
        match result {
            None => skipped += 1,
            Some(Ok(run)) => done.push(run),
            Some(Err(error)) => {
                let case = cases.as_ref().map(|cases| cases.case(spec, index));
                done.push(failed_run(keys[index], &error, case));
            }
        }
    }
    let status = if cancelled.stopped.load(Ordering::Relaxed) {
        ExperimentStatus::Cancelled
    } else if skipped > 0 {
        ExperimentStatus::BudgetSpent
    } else {
        ExperimentStatus::Completed
    };
    let report = report(spec, status, done, skipped);
    if let Some(keeping) = keeping {
        let state = kept_state(status);
        let value = serde_json::to_value(&report).map_err(|e| AppError::BadInput(format!("the report: {e}")))?;
        keeping.store.experiment_end(keeping.id, state, value).await?;
    }
    Ok(report)
}

/// What trying one run cost now, against the budget: its recompute's model calls and the
/// judges'; for a new input, its run "then" too (made now, not read from a journal).
fn spent_on(run: &ExperimentRun) -> f64 {
    let then = if run.fresh.is_some() { run.usage.before.cost_usd } else { 0.0 };
    then + run.usage.after.cost_usd + run.evaluation_cost_usd
}

/// Whether the experiment was cancelled (by anyone, in any process: its kept state says so),
/// read from the store at most every [`Cancelled::EVERY`] while runs are started.
#[derive(Default)]
struct Cancelled {
    stopped: AtomicBool,
    read_at: Mutex<Option<Instant>>,
}

impl Cancelled {
    const EVERY: Duration = Duration::from_millis(200);

    async fn seen(&self, keeping: Option<Keeping<'_>>) -> bool {
        let Some(keeping) = keeping else { return false };
        if self.stopped.load(Ordering::Relaxed) {
            return true;
        }
        {
            let mut read_at = self.read_at.lock().expect("poisoned");
            if read_at.is_some_and(|at| at.elapsed() < Self::EVERY) {
                return false;
            }
            *read_at = Some(Instant::now());
        }
        // A store that cannot be read now does not stop the experiment: the next read tells.
        let state = keeping.store.experiment(keeping.id).await.ok().flatten().map(|r| r.state);
        let stopped = state == Some(ExperimentState::Cancelled);
        self.stopped.fetch_or(stopped, Ordering::Relaxed);
        stopped
    }
}

async fn recompute_one(
    engine: &Engine,
    store: &dyn Store,
    spec: &ExperimentSpec,
    candidate: &Candidate,
    definitions: &Mutex<HashMap<Option<ContentHash>, (Workflow, Workflow)>>,
    evaluators: &[(String, Prepared)],
    record: &RunRecord,
) -> Result<ExperimentRun, AppError> {
    // The run's header, as the population was read (not read again).
    let run = record.id;
    // The definition each run is recomputed with, rebound once per definition (a file's for
    // every run; each run's own, by its hash).
    let key = match candidate {
        Candidate::Workflow(..) => None,
        Candidate::EachRunsOwn(_) => Some(record.definition_hash),
    };
    let known = definitions.lock().expect("poisoned").get(&key).cloned();
    let (original, workflow) = match known {
        Some(pair) => pair,
        None => {
            let original = match candidate {
                Candidate::Workflow(workflow, _) => workflow.clone(),
                Candidate::EachRunsOwn(bindings) => crate::definition_of(store, run, bindings).await?,
            };
            let rebound = crate::rebind_models(original.clone(), &spec.change.rebind)?;
            // Kept for the runs after (the first of two built at once wins; both are the same).
            definitions.lock().expect("poisoned").entry(key).or_insert_with(|| (original.clone(), rebound.clone()));
            (original, rebound)
        }
    };
    let started = Instant::now();
    let (report, then) = crate::recompute_with_usage(engine, &workflow, run, recompute_options(spec)).await?;
    // The input as the recompute read it: the population's records are headers alone.
    let input = report.recorded_input.clone();
    let usage = crate::view::usage_change(&report, then);
    let elapsed_ms = started.elapsed().as_secs_f64() * 1e3;
    // A judge speaks with the workflow's own bindings, not the ones the change rebinds.
    let judges = original.services().get::<stepwright_llm::Models>();
    let caller = &record.caller;
    Ok(assess(engine, evaluators, judges.as_deref(), caller, &input, record.status, report, usage, elapsed_ms).await)
}

/// How an experiment recomputes a run (or a new input's run): from the change's step, kept
/// nowhere, and without the diffs of the steps it drops.
pub(super) fn recompute_options(spec: &ExperimentSpec) -> RecomputeOptions {
    RecomputeOptions {
        from: spec.change.from.as_deref().map(StepPath::new),
        persist: false,
        without_diff: Some(stepwright_core::StepFilter::new(model_call_record)),
    }
}

/// Whether the step at `path` is an `llm` step's own record of a model call (`…/call.0`):
/// it differs whenever the model does (its name, its usage), so an experiment leaves it
/// out. What the run did is its steps' values, decisions and output.
fn model_call_record(path: &StepPath) -> bool {
    path.as_str().rsplit('/').next().is_some_and(|last| last.starts_with("call."))
}

/// A recompute's report and usage, scored by the evaluators and judged: the result of one
/// run (or new input) of the population. `then` is how the run ended then.
#[allow(clippy::too_many_arguments)] // What a past run's and a new input's trial share.
async fn assess(
    engine: &Engine,
    evaluators: &[(String, Prepared)],
    judges: Option<&stepwright_llm::Models>,
    caller: &stepwright_core::Caller,
    input: &Value,
    then: stepwright_core::RunStatus,
    report: stepwright_core::RecomputeReport,
    usage: stepwright_api::history::UsageChange,
    elapsed_ms: f64,
) -> ExperimentRun {
    let (old, new) = (report.recorded_output.as_ref(), report.recomputed_output.as_ref());
    let diff = match (old, new) {
        (Some(old), Some(new)) => stepwright_core::json_diff(old, new, None),
        (Some(_), None) => vec!["(the recompute gave no output)".to_owned()],
        (None, Some(_)) => vec!["(the run gave no output; the recompute did)".to_owned()],
        (None, None) => Vec::new(),
    };
    let mut scores: Vec<Score> = Vec::with_capacity(evaluators.len());
    let mut evaluation_cost_usd = 0.0;
    for (name, evaluator) in evaluators {
        scores.push(match evaluator {
            Prepared::Judge(j) => {
                let (score, cost) = ask_judge(name, j, judges, input, old, new).await;
                evaluation_cost_usd += cost;
                score
            }
            Prepared::Worker(w) => worker::ask_worker(engine, name, w, caller, input, old, new).await,
            other => other.score(name, input, old, new),
        });
    }
    let status = crate::wire::run_status(report.status);
    let failed_now = status == stepwright_api::RunStatus::Failed && then != stepwright_core::RunStatus::Failed;
    let verdict = judge(evaluators, &scores, failed_now);
    // Only the steps kept are put in the contract's words.
    let mut step_changes: Vec<RecomputedStep> = Vec::new();
    let mut would_execute: Vec<WouldExecute> = Vec::new();
    for step in report.steps {
        if let Some(input) = &step.would_execute_with {
            would_execute.push(WouldExecute { step: step.path.as_str().to_owned(), input: input.clone() });
        }
        let changed = matches!(
            step.change,
            stepwright_core::StepChange::ValueChanged { .. }
                | stepwright_core::StepChange::SchemaViolation { .. }
                | stepwright_core::StepChange::Failed { .. }
        ) && !model_call_record(&step.path);
        if changed {
            step_changes.push(crate::view::recomputed_step(step));
        }
    }
    let changed_steps: Vec<String> = step_changes.iter().map(|s| s.path.clone()).collect();
    let decisions: Vec<_> = report.decisions.into_iter().map(crate::view::decision_change).collect();
    let changed = !diff.is_empty()
        || !changed_steps.is_empty()
        || !would_execute.is_empty()
        || !decisions.is_empty()
        || status != crate::wire::run_status(then);
    ExperimentRun {
        run: report.run.to_string(),
        changed,
        status,
        error: report.error.as_ref().map(crate::wire::error_view),
        diff,
        changed_steps,
        step_changes,
        decisions,
        would_execute,
        scores,
        verdict,
        usage,
        elapsed_ms,
        evaluation_cost_usd,
        fresh: None,
    }
}

/// A run whose recompute could not be made (its definition is gone, the change does not fit
/// it), or a new input that could not be tried: failed and regressed, with why.
fn failed_run(run: RunId, error: &AppError, fresh: Option<stepwright_api::experiment::FreshCase>) -> ExperimentRun {
    ExperimentRun {
        run: run.to_string(),
        changed: true,
        status: stepwright_api::RunStatus::Failed,
        error: Some(stepwright_api::ErrorView { code: error.code().to_string(), message: error.to_string() }),
        diff: Vec::new(),
        changed_steps: Vec::new(),
        step_changes: Vec::new(),
        decisions: Vec::new(),
        would_execute: Vec::new(),
        scores: Vec::new(),
        verdict: Verdict::Regressed,
        usage: stepwright_api::history::UsageChange {
            before: Totals::default(),
            after: Totals::default(),
            steps: Vec::new(),
        },
        elapsed_ms: 0.0,
        evaluation_cost_usd: 0.0,
        fresh,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spec_is_checked_before_anything_runs() {
        let parse = |yaml: &str| parse_experiment(yaml, "x.yaml").map(drop).map_err(|e| e.to_string());
        let base = "experiment: e\nruns: { workflow: w }\n";
        assert_eq!(parse(base), Ok(()));
        assert!(parse(&format!("{base}colour: red\n")).unwrap_err().contains("colour"), "unknown fields are errors");
        let both = format!("{base}evaluators:\n  - {{ name: a, check: 'output.x', compare: 'new == old' }}\n");
        assert!(parse(&both).unwrap_err().contains("exactly one of"));
        let judge = format!("{base}evaluators:\n  - {{ name: a, judge: {{ model: smart, rubric: '' }} }}\n");
        assert!(parse(&judge).unwrap_err().contains("a `judge` needs a `model`"));
        let bad = format!("{base}evaluators:\n  - {{ name: a, check: 'output.x ==' }}\n");
        assert!(parse(&bad).unwrap_err().contains("`evaluators[0]` (a): `check` does not parse"));
        let worker = format!("{base}evaluators:\n  - {{ name: a, worker: {{ queue: py, handler: '' }} }}\n");
        assert!(parse(&worker).unwrap_err().contains("a `worker` needs a `queue` and a `handler`"));
        let two =
            format!("{base}evaluators:\n  - {{ name: a, check: output.x, worker: {{ queue: py, handler: h }} }}\n");
        assert!(parse(&two).unwrap_err().contains("exactly one of"));
        assert_eq!(
            parse(&format!("{base}evaluators:\n  - {{ name: a, worker: {{ queue: py, handler: grade }} }}\n")),
            Ok(())
        );
        let schema = format!("{base}evaluators:\n  - {{ name: a, schema: {{ type: 12 }} }}\n");
        assert!(parse(&schema).unwrap_err().contains("the schema does not compile"));
        assert!(parse(&format!("{base}concurrency: 0\n")).unwrap_err().contains("between 1 and 64"));
        assert!(parse("experiment: e\nruns: { workflow: w, since: yesterday }\n").unwrap_err().contains("RFC 3339"));
        assert!(parse("experiment: e\nruns: { workflow: w, ids: [nope] }\n").unwrap_err().contains("not a run id"));
    }

    /// A population chosen by a filter is read as headers (without inputs, which may be
    /// large): an evaluator that reads `input` is given each run's input all the same, as its
    /// recompute read it.
    #[tokio::test]
    async fn an_evaluator_reads_each_runs_input_when_the_population_is_a_filter() {
        use stepwright_api::experiment::{Change, Evaluator, Population};
        use stepwright_core::{InMemoryStore, InputSource, Node, Outcome};
        let shout = stepwright_core::dyn_fn_step("shout", |_ctx, input| async move {
            let ticket = input["ticket"].as_str().unwrap_or_default().to_uppercase();
            Ok(Outcome::completed(serde_json::json!({ "ticket": ticket })))
        });
        let step = Node::dyn_step("shout", shout).input(InputSource::WorkflowInput);
        let workflow = Workflow::builder("shout").step(step).build().unwrap();
        let store: std::sync::Arc<dyn Store> = std::sync::Arc::new(InMemoryStore::new());
        let engine = Engine::builder().store(store.clone()).build();
        for ticket in ["it crashes", "refund me"] {
            engine.start(&workflow, serde_json::json!({ "ticket": ticket })).await.unwrap();
        }
        let spec = ExperimentSpec {
            experiment: "inputs".into(),
            runs: Population::of("shout"),
            change: Change::default(),
            evaluators: vec![Evaluator {
                name: "echoes".into(),
                schema: None,
                check: Some("output.ticket == input.ticket | upper".into()),
                compare: None,
                judge: None,
                worker: None,
            }],
            concurrency: None,
            budget_usd: None,
        };
        let candidate = Candidate::Workflow(workflow, Bindings::default());
        let report = run_experiment(&engine, store.as_ref(), &spec, &candidate, None, None).await.unwrap();
        assert_eq!(report.runs.len(), 2);
        for run in &report.runs {
            let score = &run.scores[0];
            assert_eq!((score.old, score.new, &score.error), (Some(1.0), Some(1.0), &None), "{run:?}");
        }
    }

    /// `concurrency` is how many runs are recomputed at once: never more, and that many while
    /// enough are left.
    #[tokio::test]
    async fn an_experiment_recomputes_as_many_runs_at_once_as_its_concurrency() {
        use std::sync::Arc;
        use std::sync::atomic::AtomicUsize;
        use stepwright_api::experiment::Population;
        use stepwright_core::{InMemoryStore, InputSource, Node, Outcome};
        let (now, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let slow = {
            let (now, most) = (now.clone(), most.clone());
            stepwright_core::dyn_fn_step("slow", move |_ctx, input| {
                let (now, most) = (now.clone(), most.clone());
                async move {
                    most.fetch_max(now.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    now.fetch_sub(1, Ordering::SeqCst);
                    Ok(Outcome::completed((*input).clone()))
                }
            })
        };
        let step = Node::dyn_step("slow", slow).input(InputSource::WorkflowInput);
        let workflow = Workflow::builder("slow").step(step).build().unwrap();
        let store: Arc<dyn Store> = Arc::new(InMemoryStore::new());
        let engine = Engine::builder().store(store.clone()).build();
        for n in 0..7 {
            engine.start(&workflow, serde_json::json!(n)).await.unwrap();
        }
        let candidate = Candidate::Workflow(workflow, Bindings::default());
        for concurrency in [1, 3, 64] {
            let spec = ExperimentSpec {
                experiment: "at once".into(),
                runs: Population::of("slow"),
                change: stepwright_api::experiment::Change::default(),
                evaluators: Vec::new(),
                concurrency: Some(concurrency),
                budget_usd: None,
            };
            most.store(0, Ordering::SeqCst);
            let report = run_experiment(&engine, store.as_ref(), &spec, &candidate, None, None).await.unwrap();
            assert_eq!((report.runs.len(), report.totals.unchanged), (7, 7), "concurrency {concurrency}");
            let expected = (concurrency as usize).min(7);
            assert_eq!(
                most.load(Ordering::SeqCst),
                expected,
                "concurrency {concurrency}: at most, and that many, at once"
            );
        }
    }

    /// Runs named by id are read as headers, each once, in id order; a run that does not
    /// exist, or is of another workflow, is named.
    #[tokio::test]
    async fn a_population_of_ids_is_read_once_each_and_checked() {
        use stepwright_api::experiment::Population;
        use stepwright_core::{InMemoryStore, Node, Outcome};
        let step =
            |name: &str| {
                let echo = stepwright_core::dyn_fn_step("echo", |_ctx, input| async move {
                    Ok(Outcome::completed((*input).clone()))
                });
                Workflow::builder(name).step(Node::dyn_step("echo", echo)).build().unwrap()
            };
        let store: std::sync::Arc<dyn Store> = std::sync::Arc::new(InMemoryStore::new());
        let engine = Engine::builder().store(store.clone()).build();
        let mut ids = Vec::new();
        for n in 0..3 {
            ids.push(engine.start(&step("a"), serde_json::json!(n)).await.unwrap().run_id);
        }
        let other = engine.start(&step("b"), serde_json::json!(0)).await.unwrap().run_id;
        let named =
            |runs: &[RunId]| Population { ids: runs.iter().map(ToString::to_string).collect(), ..Population::of("a") };
        let found = select_runs(store.as_ref(), &named(&[ids[2], ids[0], ids[2], ids[1]]), None).await.unwrap();
        let mut in_order = ids.clone();
        in_order.sort();
        assert_eq!(found.iter().map(|r| r.id).collect::<Vec<_>>(), in_order, "each once, in id order");
        assert!(found.iter().all(|r| r.workflow == "a" && *r.input == Value::Null), "headers");
        let missing = RunId::from_bytes([7; 16]);
        let error = select_runs(store.as_ref(), &named(&[ids[0], missing]), None).await.unwrap_err().to_string();
        assert!(error.contains(&format!("run {missing} does not exist")), "{error}");
        let error = select_runs(store.as_ref(), &named(&[other]), None).await.unwrap_err().to_string();
        assert!(error.contains("is a run of \"b\", not of \"a\""), "{error}");
        let error = select_runs(store.as_ref(), &named(&[ids[0]]), Some("globex")).await.unwrap_err().to_string();
        assert!(error.contains("does not exist"), "another tenant's run: {error}");
    }

    #[test]
    fn a_sample_is_the_same_for_the_same_seed() {
        let mut a = SplitMix64(7);
        let mut b = SplitMix64(7);
        assert_eq!((a.next(), a.next()), (b.next(), b.next()));
        assert_ne!(SplitMix64(8).next(), SplitMix64(7).next());
    }
}
