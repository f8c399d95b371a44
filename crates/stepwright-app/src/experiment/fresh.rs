//! Experiments over new inputs (`runs.inputs`): each input is run fresh in a sandbox with the
//! workflow as its newest recorded run ran it ("then"), recomputed with the change ("now"),
//! and the two compared and scored as a past run's recompute is. No effect is performed: a
//! `write` or unsafe `external` step is served the answer one of the recorded runs (the
//! population's filter finds them) gave for the same step and input, else not executed.

use std::sync::Arc;

use futures_util::StreamExt;
use serde_json::Value;
use stepwright_api::experiment::{ExperimentRun, ExperimentSpec, FreshCase, Population, ServedAnswer};
use stepwright_core::journal::Record;
use stepwright_core::{Caller, Engine, RecordedEffects, RunId, RunRecord, StartOptions, Store, Workflow};

use super::{Candidate, MAX_POPULATION, Prepared, drawn, without_models};
use crate::AppError;

/// How many recorded runs serve answers at most: the newest the filter finds.
pub(super) const MAX_RECORDED: usize = 1_000;

/// What [`super::check_experiment`] checks of a population of new inputs.
pub(super) fn check(population: &Population) -> Result<(), String> {
    if population.inputs_file.is_some() && !population.inputs.is_empty() {
        return Err("`runs`: give `inputs` or `inputs_file`, not both".into());
    }
    if population.inputs.len() > MAX_POPULATION {
        return Err(format!(
            "`runs.inputs` holds {} inputs: at most {MAX_POPULATION} (draw a `sample`)",
            population.inputs.len()
        ));
    }
    Ok(())
}

/// Reads a JSON Lines file's text into inputs: one JSON value per line (blank lines only at
/// the end), so that an input's place is its line.
///
/// # Errors
/// A line that is not JSON, or blank, named by its number (from 1).
pub fn parse_inputs(text: &str, file: &str) -> Result<Vec<Value>, AppError> {
    let mut inputs = Vec::new();
    let text = text.trim_end();
    for (at, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            return Err(AppError::BadInput(format!(
                "{file}:{}: a blank line: one JSON value per line (an input's place is its line)",
                at + 1
            )));
        }
        let value: Value = serde_json::from_str(line)
            .map_err(|e| AppError::BadInput(format!("{file}:{}: not a JSON value: {e}", at + 1)))?;
        inputs.push(value);
    }
    if inputs.is_empty() {
        return Err(AppError::BadInput(format!("{file} holds no input (one JSON value per line)")));
    }
    Ok(inputs)
}

/// Why new inputs cannot be tried without a recorded run.
pub(super) fn no_recorded_run(workflow: &str) -> String {
    format!(
        "`runs.inputs`: no recorded run of {workflow:?} matches the filter: new inputs are compared with the workflow \
         as its newest recorded run ran it, and served the effects recorded runs performed"
    )
}

/// The newest [`MAX_RECORDED`] of `runs` (oldest first, as they come).
pub(super) fn newest_recorded(mut runs: Vec<RunRecord>) -> Vec<RunRecord> {
    let extra = runs.len().saturating_sub(MAX_RECORDED);
    runs.drain(..extra);
    runs
}

/// The key a case's result is kept under: the experiment's id with the case's index mixed
/// into its random bits, the same in every process that goes on with it.
fn case_key(experiment: RunId, index: usize) -> RunId {
    let mut bytes = *experiment.as_uuid().as_bytes();
    for (byte, mixed) in bytes[10..].iter_mut().zip(&(index as u64).to_be_bytes()[2..]) {
        *byte ^= mixed;
    }
    RunId::from_bytes(bytes)
}

/// The keys an experiment keeps its results under, in its population's order: its runs' ids,
/// or its new inputs' keys.
pub(super) fn population_keys(spec: &ExperimentSpec, experiment: RunId) -> Vec<String> {
    if spec.runs.inputs.is_empty() {
        return spec.runs.ids.clone();
    }
    drawn(spec.runs.inputs.len(), spec.runs.sample, spec.runs.seed)
        .into_iter()
        .map(|i| case_key(experiment, i).to_string())
        .collect()
}

/// The new inputs of an experiment, ready to be tried.
pub(super) struct Cases {
    /// The drawn inputs' indices among `spec.runs.inputs`, in order.
    drawn: Vec<usize>,
    keys: Vec<RunId>,
    recorded: Arc<RecordedEffects>,
    /// The workflow as its newest recorded run ran it, unchanged.
    baseline: Workflow,
    /// The change: what each input is recomputed with.
    candidate: Workflow,
    caller: Caller,
}

impl Cases {
    /// Reads what `runs` (the recorded runs, oldest first) recorded and builds the two
    /// definitions.
    ///
    /// # Errors
    /// No recorded run (there is no "then" to compare with); a definition that cannot be
    /// rebuilt or rebound; the store failing.
    pub(super) async fn prepare(
        store: &dyn Store,
        spec: &ExperimentSpec,
        candidate: &Candidate,
        runs: &[RunRecord],
        experiment: Option<RunId>,
        tenant: Option<&str>,
    ) -> Result<Self, AppError> {
        let newest = runs.last().ok_or_else(|| AppError::BadInput(no_recorded_run(&spec.runs.workflow)))?;
        // Up to 1,000 journals: read eight at a time (a Postgres store's round trips overlap),
        // added in the runs' order so a newer run's answer wins.
        let mut recorded = RecordedEffects::new();
        let mut journals = futures_util::stream::iter(newest_recorded(runs.to_vec()))
            .map(|run| async move { store.load(run.id).await })
            .buffered(8);
        while let Some(journal) = journals.next().await {
            recorded.add(&journal?);
        }
        let baseline = crate::definition_of(store, newest.id, &without_models(candidate.bindings(), spec)).await?;
        let changed = match candidate {
            Candidate::Workflow(workflow, _) => workflow.clone(),
            Candidate::EachRunsOwn(bindings) => crate::definition_of(store, newest.id, bindings).await?,
        };
        let candidate = crate::rebind_models(changed, &spec.change.rebind)?;
        let drawn = drawn(spec.runs.inputs.len(), spec.runs.sample, spec.runs.seed);
        let base = experiment.unwrap_or_else(|| RunId::from_bytes([0; 16]));
        let keys = drawn.iter().map(|i| case_key(base, *i)).collect();
        let caller = Caller { tenant: tenant.map(str::to_owned), ..newest.caller.clone() };
        Ok(Self { drawn, keys, recorded: Arc::new(recorded), baseline, candidate, caller })
    }

    /// The keys of the cases, in order.
    pub(super) fn keys(&self) -> &[RunId] {
        &self.keys
    }

    /// The case at `index` (among the drawn), without what it was served.
    pub(super) fn case(&self, spec: &ExperimentSpec, index: usize) -> FreshCase {
        let at = self.drawn[index];
        FreshCase { line: at as u64 + 1, input: spec.runs.inputs[at].clone(), served: Vec::new() }
    }

    /// Tries the case at `index`: "then" and "now" in sandboxes, compared and scored.
    ///
    /// # Errors
    /// The input does not meet the workflow's schema; the sandbox fails.
    pub(super) async fn try_one(
        &self,
        engine: &Engine,
        spec: &ExperimentSpec,
        evaluators: &[(String, Prepared)],
        index: usize,
    ) -> Result<ExperimentRun, AppError> {
        let mut case = self.case(spec, index);
        let started = std::time::Instant::now();
        let options = StartOptions { caller: self.caller.clone(), ..StartOptions::default() };
        let recompute = super::recompute_options(spec);
        let trial = engine
            .try_fresh(&self.baseline, &self.candidate, case.input.clone(), options, recompute, self.recorded.clone())
            .await?;
        let elapsed_ms = started.elapsed().as_secs_f64() * 1e3;
        // Every intent in a sandbox's fresh run is an answer it was served (it performs none).
        for entry in &trial.baseline.entries {
            if let Record::Intent { input: Some(input), .. } = &entry.record
                && let Some((run, _)) = self.recorded.answer(&entry.path, *input)
            {
                case.served.push(ServedAnswer { step: entry.path.as_str().to_owned(), run: run.to_string() });
            }
        }
        let then = stepwright_llm::Rollup::default();
        let then = trial.baseline_events.iter().fold(then, |mut rollup, event| {
            rollup.add(event);
            rollup
        });
        let usage = crate::view::usage_change(&trial.report, then);
        let judges = self.baseline.services().get::<stepwright_llm::Models>();
        let then_status = trial.baseline.record.status;
        let mut run = super::assess(
            engine,
            evaluators,
            judges.as_deref(),
            &self.caller,
            &case.input,
            then_status,
            trial.report,
            usage,
            elapsed_ms,
        )
        .await;
        run.run = self.keys[index].to_string();
        run.fresh = Some(case);
        Ok(run)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_case_key_is_the_same_in_every_process_and_one_per_case() {
        let experiment: RunId = "01a22189-3364-7ee4-b99f-46665f18c977".parse().unwrap();
        let keys: std::collections::HashSet<RunId> = (0..10_000).map(|i| case_key(experiment, i)).collect();
        assert_eq!(keys.len(), 10_000);
        assert_eq!(case_key(experiment, 7), case_key(experiment, 7));
        assert_ne!(case_key(experiment, 7), experiment);
    }

    #[test]
    fn the_population_of_new_inputs_is_their_sample_in_order() {
        let spec = |sample: Option<u32>| ExperimentSpec {
            runs: Population { inputs: (0..10).map(Value::from).collect(), sample, seed: 3, ..Population::of("w") },
            ..super::super::parse_experiment("experiment: e\nruns: { workflow: w }\n", "e.yaml").unwrap()
        };
        let experiment = RunId::from_bytes([7; 16]);
        assert_eq!(population_keys(&spec(None), experiment).len(), 10);
        let drawn = population_keys(&spec(Some(4)), experiment);
        assert_eq!(drawn, population_keys(&spec(Some(4)), experiment), "the same seed, the same inputs");
        let all = population_keys(&spec(None), experiment);
        let places: Vec<usize> = drawn.iter().map(|k| all.iter().position(|a| a == k).unwrap()).collect();
        assert!(places.len() == 4 && places.windows(2).all(|w| w[0] < w[1]), "{places:?}");
    }

    #[test]
    fn a_file_of_inputs_names_its_bad_lines() {
        assert_eq!(parse_inputs("{\"a\": 1}\n2\n\n\n", "f").unwrap(), [serde_json::json!({ "a": 1 }), Value::from(2)]);
        assert!(parse_inputs("1\n\n2\n", "f").unwrap_err().to_string().contains("f:2: a blank line"));
        assert!(parse_inputs("1\n{\n", "f").unwrap_err().to_string().contains("f:2: not a JSON value"));
        assert!(parse_inputs("\n", "f").unwrap_err().to_string().contains("holds no input"));
    }
}
