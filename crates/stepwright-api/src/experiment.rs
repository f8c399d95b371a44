//! Experiments (DESIGN §18): a change — a new file, other model bindings — tried on a
//! population of real past runs, each recomputed in a sandbox (effects and people's decisions
//! served from its journal), scored by evaluators, and compared with what it did then.
//!
//! [`ExperimentSpec`] is the experiment file (YAML) and the request body alike; an unknown
//! field is an error. [`ExperimentReport`] is what running one gives.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::history::{DecisionChange, RecomputedStep, UsageChange};
use crate::run::Totals;
use crate::{ErrorView, RunStatus};

/// An experiment: which runs, what change, how each is scored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExperimentSpec {
    /// Its name (what reports and listings call it).
    #[schemars(regex(pattern = r"\S"))]
    pub experiment: String,
    /// The past runs to recompute.
    #[serde(deserialize_with = "crate::object::object")]
    pub runs: Population,
    /// What is tried on them (nothing: each run's own definition, again — a determinism check).
    #[serde(default, deserialize_with = "crate::object::object")]
    pub change: Change,
    /// How each run's output is scored, old against new.
    #[serde(default, deserialize_with = "crate::object::list")]
    pub evaluators: Vec<Evaluator>,
    /// How many runs are recomputed at once (1–64; default 4).
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "crate::whole::optional")]
    #[schemars(range(min = 1, max = 64))]
    pub concurrency: Option<u32>,
    /// Stop starting recomputes once their model calls cost this many US dollars; the report
    /// then says `budget_spent` and how many runs it left.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0))]
    pub budget_usd: Option<f64>,
}

/// Which past runs: one workflow's, narrowed by status and time, or by id; then a sample.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Population {
    /// The workflow whose runs are taken.
    #[schemars(regex(pattern = r"\S"))]
    pub workflow: String,
    /// Only runs that ended so (default: completed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<RunStatus>,
    /// Only runs created at or after this instant (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
    /// Only runs created before this instant (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<String>,
    /// Only runs started by this user (`ann`, `schedule:…`, `trigger:…`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_by: Option<String>,
    /// Only runs with this tag (`runs list --tag`, `GET /v1/runs?tag=`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64), regex(pattern = r"^[A-Za-z0-9_.:/=-]+$"))]
    pub tag: Option<String>,
    /// Exactly these runs (each must be of the workflow); the filters above then do not apply.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ids: Vec<String>,
    /// New inputs instead of past runs (at most 100,000): each is run fresh in a sandbox with
    /// the workflow as its newest recorded run ran it, then recomputed with the change, and
    /// the two compared. Their `write` and unsafe `external` steps are served the answer a
    /// past run recorded for the same step and input, else not executed. With `inputs`, the
    /// filter above (or `ids`) chooses those past runs (the newest 1,000 it finds), and
    /// `sample` draws from the inputs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inputs: Vec<Value>,
    /// A JSON Lines file of inputs, one JSON value per line (relative to the experiment
    /// file; the CLI reads it into `inputs` — a server reads no file of its callers: send
    /// `inputs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inputs_file: Option<String>,
    /// At most this many of them, drawn at random with `seed` (the same seed, the same runs).
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "crate::whole::optional")]
    #[schemars(range(min = 1))]
    pub sample: Option<u32>,
    /// The sample's seed (default 0).
    #[serde(default, deserialize_with = "crate::whole::required")]
    pub seed: u64,
}

impl Population {
    /// Every completed run of `workflow`: no filter, no sample.
    #[must_use]
    pub fn of(workflow: impl Into<String>) -> Self {
        Self {
            workflow: workflow.into(),
            status: None,
            since: None,
            until: None,
            started_by: None,
            tag: None,
            ids: Vec::new(),
            inputs: Vec::new(),
            inputs_file: None,
            sample: None,
            seed: 0,
        }
    }
}

/// The change tried: at most one of `file`, `source` and `version` (none: each run's own
/// definition), then `models`, `rebind` and `from`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Change {
    /// A new version of the workflow file (relative to the experiment file; the CLI reads it
    /// — a server reads no file of its callers: send `source`). Compiled, never registered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// A new version of the workflow file, its text (YAML). Compiled, never registered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// The files `source` calls (`workflow: parts/x.yaml`), by path relative to it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub files: BTreeMap<String, String>,
    /// A registered version of the workflow (`GET /v1/workflows/{name}` lists them).
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "crate::whole::optional")]
    #[schemars(range(min = 1))]
    pub version: Option<u32>,
    /// `NAME: provider:model[@base_url]`: model binding NAME replaced by another model (the
    /// CLI's `--model`, kept so that a resume recomputes with it too). Not accepted by
    /// `POST /v1/experiments`: a caller would choose where the server sends its provider key —
    /// over the API, `rebind` to a binding the definition has, or send a `source` declaring it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub models: BTreeMap<String, String>,
    /// `NAME: OTHER`: calls to model binding NAME go to binding OTHER (its endpoint and model).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub rebind: BTreeMap<String, String>,
    /// Re-execute from this step on; everything before it is served from the journal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
}

/// An `llm` judge: one of the workflow's model bindings compares the old and new outputs by a
/// rubric and answers better, same or worse, with its reason (a run whose output did not change
/// is not sent: it is the same).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Judge {
    /// The model binding that judges (the workflow's, before the change rebinds any).
    pub model: String,
    /// What "better" means here, for the model.
    pub rubric: String,
}

/// One evaluator: a name and exactly one of `schema`, `check`, `compare`, `judge`, `worker`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Evaluator {
    /// What the report calls its score.
    pub name: String,
    /// A JSON Schema the output must meet: scores 1 when it does, 0 when not (old and new).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<Value>,
    /// An expression over `output` and `input`, scored on the old and on the new output: true
    /// is 1, false 0, a number itself (`output.score`, `output.items | length`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check: Option<String>,
    /// An expression over `old`, `new` and `input`: true is no worse, false a regression; a
    /// number above 0 an improvement, below 0 a regression (`new.category == old.category`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compare: Option<String>,
    /// A model compares the outputs by a rubric: better is 1, same 0, worse −1.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "crate::object::optional")]
    pub judge: Option<Judge>,
    /// A step worker's handler compares the outputs (code of your own, in Python or
    /// TypeScript): given `{input, old, new}`, it answers as a `compare` does — true (no
    /// worse), false (a regression), a number — or `{"score": …, "reason": "…"}`.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "crate::object::optional")]
    pub worker: Option<WorkerEvaluator>,
}

/// Where a `worker` evaluator's handler is served.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WorkerEvaluator {
    /// The queue its workers poll.
    pub queue: String,
    /// The handler's name (`name@2` for a version).
    pub handler: String,
}

/// How an experiment stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ExperimentStatus {
    /// Not ended: a process is at work on it, or it was stopped and goes on when resumed.
    Running,
    /// Every run of the population was recomputed.
    Completed,
    /// The budget was spent: the runs left were not recomputed.
    BudgetSpent,
    /// A person stopped it: the runs left were not recomputed.
    Cancelled,
}

impl ExperimentStatus {
    /// Whether it ended (nothing more is recomputed).
    #[must_use]
    pub fn ended(self) -> bool {
        self != Self::Running
    }
}

/// What a run did under the change, judged by the evaluators.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// No evaluator scored it lower, and one higher.
    Improved,
    /// An evaluator scored it lower, or the recompute failed where the run had not.
    Regressed,
    /// Every evaluator scored it the same (or there are none).
    Same,
}

/// One evaluator's score of one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Score {
    /// The evaluator.
    pub name: String,
    /// The recorded output's score (`compare`: none).
    pub old: Option<f64>,
    /// The recomputed output's score; for `compare` and `judge`, the change judged: 0 no worse
    /// (true, same), −1 a regression (false, worse), 1 better, or the number a `compare` gave.
    pub new: Option<f64>,
    /// Why there is no score (the expression failed, there is no output).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// A judge's reason for its verdict.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// One run of the population, recomputed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ExperimentRun {
    /// The run.
    pub run: String,
    /// Whether what the run did changed: its output, a step's value (a model call's own record
    /// aside: it names the model), a decision, how it ended.
    pub changed: bool,
    /// How the recompute ended.
    pub status: RunStatus,
    /// Why it failed, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorView>,
    /// The output's differences, as `pointer: before → after` lines.
    pub diff: Vec<String>,
    /// The steps whose value changed, failed or broke their schema, by path (model call
    /// records aside).
    pub changed_steps: Vec<String>,
    /// Those steps, each with its structural diff (`pointer: before → after` lines), the
    /// schema it broke or why it failed: what `recompute` of the run shows, kept here.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub step_changes: Vec<RecomputedStep>,
    /// The decisions (branch arms, map items, loop verdicts, graph edges) that came out
    /// differently.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub decisions: Vec<DecisionChange>,
    /// The writes (and unsafe external steps) served, not executed, whose input changed:
    /// what each would have been given. A change that reaches them is a change in what the
    /// run does outside.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub would_execute: Vec<WouldExecute>,
    /// Each evaluator's score.
    pub scores: Vec<Score>,
    /// The judgement.
    pub verdict: Verdict,
    /// Model usage and cost, then and now.
    pub usage: UsageChange,
    /// How long the recompute took, in milliseconds.
    pub elapsed_ms: f64,
    /// What the judges' model calls cost (US dollars).
    #[serde(default)]
    pub evaluation_cost_usd: f64,
    /// For a population of new inputs: which input this was, and which past runs' answers
    /// its effects were served. `run` is then the case's id in this experiment (no run of
    /// the store), "then" the workflow as its newest recorded run ran it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fresh: Option<FreshCase>,
}

/// A new input an experiment tried.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct FreshCase {
    /// Its place among the inputs, from 1 (the line of an `inputs_file`).
    pub line: u64,
    /// The input.
    pub input: Value,
    /// The `write` and unsafe `external` steps served a past run's answer for the same
    /// input (the others were not executed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub served: Vec<ServedAnswer>,
}

/// An effect served from a past run's journal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ServedAnswer {
    /// The step's path.
    pub step: String,
    /// The run that recorded the answer served.
    pub run: String,
}

/// A write an experiment did not execute, whose input the change changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct WouldExecute {
    /// The step's path.
    pub step: String,
    /// The input it would be given now.
    pub input: Value,
}

/// The totals of an experiment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ExperimentTotals {
    /// Runs recomputed.
    pub runs: u64,
    /// Of them, changed.
    pub changed: u64,
    /// Unchanged.
    pub unchanged: u64,
    /// Judged improved.
    pub improved: u64,
    /// Judged regressed.
    pub regressed: u64,
    /// Whose recompute failed.
    pub failed: u64,
    /// In which a served write's input changed (it would execute with another input).
    #[serde(default)]
    pub would_execute: u64,
    /// Runs of the population not recomputed (the budget was spent, it was cancelled, or it
    /// is still at work).
    pub skipped: u64,
    /// What the runs' model calls cost then and now, in all.
    pub before: Totals,
    /// The same, recomputed.
    pub after: Totals,
    /// Cost per 1,000 runs, then (US dollars).
    pub cost_per_1000_before: f64,
    /// Cost per 1,000 runs, now.
    pub cost_per_1000_after: f64,
    /// Per evaluator: the mean score, old and new (over the runs it scored).
    pub means: Vec<Score>,
    /// What the judges' model calls cost, in all (US dollars; counted against the budget).
    pub evaluation_cost_usd: f64,
}

/// What an experiment found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ExperimentReport {
    /// Its name.
    pub experiment: String,
    /// The workflow.
    pub workflow: String,
    /// How it stands (while `running`, the report is of the runs recomputed so far).
    pub status: ExperimentStatus,
    /// The totals.
    pub totals: ExperimentTotals,
    /// The runs to look at first: regressions, then the largest diffs (at most 10).
    pub look_first: Vec<String>,
    /// Every run recomputed, in the population's order.
    pub runs: Vec<ExperimentRun>,
}

/// An experiment as `GET /v1/experiments` lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ExperimentSummary {
    /// Its id.
    pub id: String,
    /// Its name.
    pub experiment: String,
    /// The workflow whose runs it recomputes.
    pub workflow: String,
    /// How it stands.
    pub status: ExperimentStatus,
    /// When it started (microseconds since the Unix epoch).
    pub created_at: i64,
    /// The runs of its population.
    pub runs: u64,
}

/// One experiment: what it was started with and its report (while it runs, of the runs
/// recomputed so far).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ExperimentDetails {
    /// Its id.
    pub id: String,
    /// How it stands.
    pub status: ExperimentStatus,
    /// When it started (microseconds since the Unix epoch).
    pub created_at: i64,
    /// The spec it runs, its population fixed by id when it began.
    pub spec: ExperimentSpec,
    /// The runs of its population.
    pub runs: u64,
    /// Of them, recomputed so far.
    pub recomputed: u64,
    /// What it found.
    pub report: ExperimentReport,
}
