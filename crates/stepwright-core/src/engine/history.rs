//! Operations over a run's history: fork (and, next, replay and recompute).

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;

use crate::definition::Workflow;
use crate::engine::{Engine, EngineError, EngineInner};
use crate::error::StepError;
use crate::hash::ContentHash;
use crate::ids::{RunId, StepPath};
use crate::journal::{Choice, JournalBatch, Lease, Lineage, LoadedRun, Record, RunRecord, RunStatus};
use crate::recording::Mailboxes;
use crate::recording::{ReplayIndex, ReplayMode};
use crate::store::{InMemoryStore, StatusUpdate, Store};

/// Edits applied to a fork: a new workflow input, and replacement outputs for steps that
/// completed before the fork point.
#[derive(Debug, Clone, Default)]
pub struct ForkPatch {
    /// Replaces the workflow input.
    pub input: Option<Value>,
    /// Replaces the recorded output of a step (by path) that completed before the fork point.
    pub outputs: HashMap<String, Value>,
}

/// How one step compares in a replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum StepReplay {
    /// Re-executed; the same output as recorded.
    Identical,
    /// Re-executed; a different output.
    Different,
    /// A `write`/`external` step: its recorded output was served, not re-executed.
    Served,
    /// Recorded in the original, not reached by the replay.
    Missing,
    /// Reached by the replay, not recorded in the original.
    Added,
}

/// One step's comparison.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct StepComparison {
    /// The step path compared.
    pub path: StepPath,
    /// How it compares.
    pub outcome: StepReplay,
    /// The recorded output's hash.
    pub recorded: Option<ContentHash>,
    /// The replayed output's hash.
    pub replayed: Option<ContentHash>,
    /// For a different output: the structural differences, as `pointer: before → after`
    /// lines (arrays matched by the step's `diff_key` when it has one).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub diff: Vec<String>,
}

/// What a replay found.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct ReplayReport {
    /// The run replayed.
    pub run: RunId,
    /// Every step, in the order the original run first reached it (steps only the replay
    /// reached after them, in its order).
    pub steps: Vec<StepComparison>,
    /// The original run's output.
    pub recorded_output: Option<Value>,
    /// The replay's output.
    pub replayed_output: Option<Value>,
    /// Whether every step and the output are identical (served steps count as identical).
    pub identical: bool,
}

/// How a step's output compares in a recompute.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(tag = "change", rename_all = "snake_case")]
pub enum StepChange {
    /// The same output.
    Clean,
    /// Another output; the differences, as `pointer: before → after` lines.
    ValueChanged {
        /// The structural differences.
        diff: Vec<String>,
    },
    /// The new output does not match the step's output schema.
    SchemaViolation {
        /// What the validation said.
        message: String,
    },
    /// Served from the journal (before the starting point, an effect not repeated, or a
    /// sub-step of a served step).
    Served,
    /// Failed in the recompute (its last attempt): why.
    Failed {
        /// The error, with its stable code.
        #[schemars(with = "serde_json::Value")]
        error: StepError,
    },
    /// Recorded in the original, not reached now.
    Missing,
    /// Reached now, not recorded in the original.
    Added,
}

/// One step in a recompute report.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct RecomputedStep {
    /// The step path compared.
    pub path: StepPath,
    /// What changed.
    #[serde(flatten)]
    pub change: StepChange,
    /// Why a step was served or is missing, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
    /// A served write (or unsafe external step) whose input changed: the input it would be
    /// given now. It was not executed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub would_execute_with: Option<Value>,
}

/// A decision (branch arm, map items, loop verdict, graph edge) that came out differently.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct DecisionChange {
    /// Where.
    pub path: StepPath,
    /// What the original decided.
    pub before: Option<Value>,
    /// What the recompute decided.
    pub after: Option<Value>,
}

/// Options for [`Engine::recompute`].
#[derive(Debug, Clone, Default)]
pub struct RecomputeOptions {
    /// Re-execute from this step on (default: from the start); everything recorded before
    /// it is served from the journal.
    pub from: Option<StepPath>,
    /// Keep the result as a new run, forked from the original (lineage recorded).
    pub persist: bool,
    /// Steps whose changed value is reported without the lines of its diff (none, when
    /// unset): for a caller that drops such steps and would pay for lines it never reads, as
    /// an experiment drops each model call's own record. Such a step is still
    /// [`StepChange::ValueChanged`], with no lines.
    pub without_diff: Option<StepFilter>,
}

/// Which steps something applies to, by path: see [`RecomputeOptions::without_diff`].
#[derive(Clone)]
pub struct StepFilter(Arc<dyn Fn(&StepPath) -> bool + Send + Sync>);

impl StepFilter {
    /// The steps `matches` says yes to.
    pub fn new(matches: impl Fn(&StepPath) -> bool + Send + Sync + 'static) -> Self {
        Self(Arc::new(matches))
    }

    /// Whether the step at `path` is one of them.
    #[must_use]
    pub fn matches(&self, path: &StepPath) -> bool {
        (self.0)(path)
    }
}

impl std::fmt::Debug for StepFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StepFilter(..)")
    }
}

/// What a recompute found.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct RecomputeReport {
    /// The run recomputed.
    pub run: RunId,
    /// Every step, in the order the original run first reached it (steps only the
    /// recompute reached after them, in its order).
    pub steps: Vec<RecomputedStep>,
    /// Decisions that changed.
    pub decisions: Vec<DecisionChange>,
    /// The run's input, as it was given: what an experiment's evaluators and judges read
    /// beside the two outputs. Not serialized.
    #[serde(skip)]
    #[schemars(skip)]
    pub recorded_input: Arc<Value>,
    /// The original output.
    pub recorded_output: Option<Value>,
    /// The recomputed output.
    pub recomputed_output: Option<Value>,
    /// The new run, if persisted.
    pub forked: Option<RunId>,
    /// Whether anything changed (a value, a schema violation, a decision, the output).
    pub changed: bool,
    /// How the recompute ended.
    pub status: RunStatus,
    /// Why it failed, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<serde_json::Value>")]
    pub error: Option<StepError>,
    /// The events the recompute emitted (in its sandbox): what a host reads the new model
    /// calls' usage and cost from, to compare with the original run's. Not serialized.
    #[serde(skip)]
    #[schemars(skip)]
    pub recomputed_events: Vec<crate::journal::EventRecord>,
}

/// The step paths `keep` accepts, in the order `first` (the original journal) reaches them,
/// then those only `then` (the re-execution's journal) reaches, in its order.
fn execution_order<'a>(
    first: &'a [crate::journal::JournalEntry],
    then: &'a [crate::journal::JournalEntry],
    keep: impl Fn(&StepPath) -> bool,
) -> Vec<&'a StepPath> {
    let mut seen = std::collections::HashSet::new();
    first.iter().chain(then).map(|e| &e.path).filter(|p| keep(p) && seen.insert(*p)).collect()
}

/// Whether `path` lies below one of `wholes` (not is one): each ancestor of it — what comes
/// before a `/`, `[` or `#`, as [`StepPath::starts_with`] reads a path — looked up.
fn below(path: &StepPath, wholes: &std::collections::HashSet<&str>) -> bool {
    let text = path.as_str();
    (wholes.contains("") && !text.is_empty())
        || text.char_indices().any(|(at, c)| matches!(c, '/' | '[' | '#') && at > 0 && wholes.contains(&text[..at]))
}

/// Structural differences between two JSON values, as `pointer: before → after` lines.
/// Arrays of objects are matched by `key` when given, else by position.
#[must_use]
pub fn json_diff(before: &Value, after: &Value, key: Option<&str>) -> Vec<String> {
    let mut out = Vec::new();
    diff_into(&mut String::new(), before, after, key, &mut out);
    out
}

fn show(value: Option<&Value>) -> String {
    value.map_or_else(|| "(absent)".to_owned(), Value::to_string)
}

/// The differences under the pointer `at`, which each level extends while it looks below and
/// gives back after (a recompute diffs every changed step's output: a path string allocated
/// per key visited cost more than the rest). Equal values are not looked into.
fn diff_into(at: &mut String, before: &Value, after: &Value, key: Option<&str>, out: &mut Vec<String>) {
    use std::fmt::Write as _;
    if before == after {
        return;
    }
    let here = at.len();
    match (before, after) {
        (Value::Object(a), Value::Object(b)) => {
            let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                at.push('/');
                if k.contains(['~', '/']) {
                    at.push_str(&k.replace('~', "~0").replace('/', "~1"));
                } else {
                    at.push_str(k);
                }
                match (a.get(k), b.get(k)) {
                    (Some(x), Some(y)) => diff_into(at, x, y, key, out),
                    (x, y) => out.push(format!("{at}: {} → {}", show(x), show(y))),
                }
                at.truncate(here);
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            // Items matched by their `key` when every item has one, else by position.
            fn keyed<'v>(items: &'v [Value], key: Option<&str>) -> Option<Vec<(String, &'v Value)>> {
                let key = key?;
                items.iter().map(|v| v.get(key).map(|k| (k.to_string(), v))).collect()
            }
            if let (Some(a), Some(b)) = (keyed(a, key), keyed(b, key)) {
                let name = key.unwrap_or_default();
                for (k, x) in &a {
                    let _ = write!(at, "[{name}={k}]");
                    match b.iter().find(|(kb, _)| kb == k) {
                        Some((_, y)) => diff_into(at, x, y, key, out),
                        None => out.push(format!("{at}: {x} → (absent)")),
                    }
                    at.truncate(here);
                }
                for (k, y) in b.iter().filter(|(k, _)| !a.iter().any(|(ka, _)| ka == k)) {
                    out.push(format!("{at}[{name}={k}]: (absent) → {y}"));
                }
            } else {
                for i in 0..a.len().max(b.len()) {
                    let _ = write!(at, "/{i}");
                    match (a.get(i), b.get(i)) {
                        (Some(x), Some(y)) => diff_into(at, x, y, key, out),
                        (x, y) => out.push(format!("{at}: {} → {}", show(x), show(y))),
                    }
                    at.truncate(here);
                }
            }
        }
        (x, y) => out.push(format!("{}: {x} → {y}", if at.is_empty() { "/" } else { at })),
    }
}

impl Engine {
    /// Runs `workflow` over a copy of `original` in a private in-memory store, with the
    /// journal used as `index` says. Returns the report and the sandbox store.
    pub(super) async fn in_sandbox(
        &self,
        workflow: &Workflow,
        original: &LoadedRun,
        index: ReplayIndex,
        kind: &'static str,
    ) -> Result<(crate::engine::RunReport, Arc<InMemoryStore>), EngineError> {
        let run = original.record.id;
        let sandbox_store = Arc::new(InMemoryStore::new());
        let inner = &self.inner;
        let sandbox = Engine {
            inner: Arc::new(EngineInner {
                worker_id: format!("{}-sandbox", inner.worker_id),
                store: sandbox_store.clone() as Arc<dyn Store>,
                clock: inner.clock.clone(),
                entropy: inner.entropy.clone(),
                config: inner.config.clone(),
                services: inner.services.clone(),
                observer: None,
                cache: Arc::new(crate::store::cache::InMemoryStepCache::default()),
                mailboxes: Arc::new(Mailboxes::default()),
                live: std::sync::Mutex::new(HashMap::new()),
                cancels: std::sync::Mutex::new(HashMap::new()),
                held: std::sync::Mutex::new(HashMap::new()),
                claiming: tokio::sync::Mutex::new(()),
                watching: std::sync::atomic::AtomicBool::new(false),
                task_home: Some(inner.store.clone()),
            }),
        };
        let now = inner.clock.now();
        let lease = Lease::new(run, sandbox.inner.worker_id.clone(), 1, now.plus(inner.config.lease_for));
        let record = RunRecord {
            status: RunStatus::Running,
            output: None,
            error: None,
            lease: Some(lease.clone()),
            cancel: None,
            ..original.record.clone()
        };
        sandbox_store.create_run(record.clone()).await.map_err(EngineError::store(run))?;
        let loaded = LoadedRun { record, entries: Vec::new(), blobs: HashMap::new() };
        // Its own trace, linked to the original's last activation.
        let original_trace = match crate::trace::contexts() {
            Some(_) => self.journaled_traces(run).await.1,
            None => None,
        };
        let trace = super::TraceStart::Again { original: original_trace, kind };
        let report = sandbox.execute_indexed(workflow, loaded, lease, index, trace).await?;
        Ok((report, sandbox_store))
    }

    /// Recomputes a run with a new definition (new prompts, models, code), from the start or
    /// from a step, in a sandbox, and reports what changed step by step. Served from the
    /// journal: everything recorded before `from`, `write` steps, `external` steps that are
    /// not `safe_to_retry`, and human decisions; everything else runs again. Nothing is
    /// written unless `persist`, which keeps the result as a run forked from the original.
    pub async fn recompute(
        &self,
        workflow: &Workflow,
        run: RunId,
        options: RecomputeOptions,
    ) -> Result<RecomputeReport, EngineError> {
        let original = self.inner.store.load(run).await.map_err(EngineError::store(run))?;
        self.recompute_over(workflow, original, options, None).await
    }

    /// [`Engine::recompute`] of a journal given (a run's, or a fresh run's from a sandbox),
    /// serving `recorded` answers for effects the original never had. Only a run in the
    /// store may be kept (`persist`): the fork names it as its parent.
    pub(super) async fn recompute_over(
        &self,
        workflow: &Workflow,
        original: LoadedRun,
        options: RecomputeOptions,
        answers: Option<Arc<crate::recording::RecordedEffects>>,
    ) -> Result<RecomputeReport, EngineError> {
        let run = original.record.id;
        let prefix: std::collections::HashSet<StepPath> = match &options.from {
            None => std::collections::HashSet::new(),
            Some(from) => {
                let cut = original.entries.iter().position(|e| e.path.starts_with(from)).ok_or_else(|| {
                    EngineError::InvalidRequest { run, reason: format!("the run never reached step `{from}`") }
                })?;
                original.entries[..cut].iter().map(|e| e.path.clone()).collect()
            }
        };
        let index = ReplayIndex::from_loaded(&original).map_err(EngineError::store(run))?;
        let recorded: HashMap<StepPath, ContentHash> = index.completions().map(|(p, h)| (p.clone(), h)).collect();
        let decided_before: HashMap<StepPath, Choice> = index.choices().map(|(p, d)| (p.clone(), d.clone())).collect();
        let index = index.with_mode(ReplayMode::Recompute(prefix.clone())).with_recorded(answers);
        let (report, sandbox_store) = self.in_sandbox(workflow, &original, index, "recompute").await?;
        let journal = sandbox_store.entries(run);
        let mut sandbox = sandbox_store.load(run).await.map_err(EngineError::store(run))?;
        let mut after: HashMap<StepPath, ContentHash> = HashMap::new();
        let mut violations: HashMap<StepPath, String> = HashMap::new();
        let mut decided_after: HashMap<StepPath, Choice> = HashMap::new();
        let mut failures: HashMap<StepPath, StepError> = HashMap::new();
        let mut would_execute: HashMap<StepPath, Value> = HashMap::new();
        let mut recorded_from: HashMap<StepPath, String> = HashMap::new();
        for entry in &journal {
            match &entry.record {
                Record::Artifact { kind, hash, .. } if kind == crate::recording::RECORDED_ANSWER => {
                    if let Some(source) = sandbox_store.blob(hash).and_then(|v| v.as_str().map(str::to_owned)) {
                        recorded_from.insert(entry.path.clone(), source);
                    }
                }
                Record::Artifact { kind, hash, .. } if kind == crate::recording::WOULD_EXECUTE => {
                    // Not an output, so not among the blobs a load brings: read by its hash.
                    if let Some(input) = sandbox_store.blob(hash) {
                        would_execute.insert(entry.path.clone(), (*input).clone());
                        // Kept with the fork too, when the recompute is kept.
                        sandbox.blobs.insert(*hash, input);
                    }
                }
                Record::Completed { output, .. } => {
                    after.insert(entry.path.clone(), *output);
                }
                Record::Failed { error, .. } if error.is(&crate::error::ErrorCode::OUTPUT_VALIDATION) => {
                    violations.insert(entry.path.clone(), error.message.clone());
                }
                Record::Failed { error, .. } => {
                    failures.insert(entry.path.clone(), error.clone());
                }
                Record::Decided { choice } => {
                    decided_after.insert(entry.path.clone(), choice.clone());
                }
                _ => {}
            }
        }
        // Steps whose effect was recorded then (an intent) and not made again now: served. Read
        // once into sets — a scan of both journals per step was quadratic in a run's length.
        let intents = |entries: &'_ [crate::journal::JournalEntry]| -> std::collections::HashSet<StepPath> {
            entries.iter().filter(|e| matches!(e.record, Record::Intent { .. })).map(|e| e.path.clone()).collect()
        };
        let (intended_then, intended_now) = (intents(&original.entries), intents(&journal));
        let served_itself =
            |path: &StepPath| prefix.contains(path) || intended_then.contains(path) && !intended_now.contains(path);
        let paths = execution_order(&original.entries, &journal, |p| {
            recorded.contains_key(p) || after.contains_key(p) || violations.contains_key(p) || failures.contains_key(p)
        });
        // A step served whole (its recorded output stands) serves its sub-steps too: they were
        // not run again, and are neither missing nor savings.
        let served_whole: Vec<&StepPath> = paths
            .iter()
            .copied()
            .filter(|p| recorded.contains_key(*p) && after.contains_key(*p) && served_itself(p))
            .collect();
        // Looked up by each path's own ancestors, not by scanning every served step per path.
        let wholes: std::collections::HashSet<&str> = served_whole.iter().map(|p| p.as_str()).collect();
        let served = |path: &StepPath| served_itself(path) || wholes.contains(path.as_str()) || below(path, &wholes);
        let under_served = |path: &StepPath| below(path, &wholes);
        let first_failed = paths.iter().find(|p| failures.contains_key(**p)).copied();
        let decisions_changed =
            decided_before.iter().any(|(p, c)| !prefix.contains(p) && decided_after.get(p) != Some(c));
        // How the steps that never completed then ended: one that fails now as it failed then
        // (the same error; a refused write, given the same input) did not change.
        let mut failed_then: HashMap<&StepPath, &StepError> = HashMap::new();
        let mut refused_then: HashMap<&StepPath, ContentHash> = HashMap::new();
        for entry in &original.entries {
            match &entry.record {
                Record::Failed { error, .. } => {
                    failed_then.insert(&entry.path, error);
                }
                Record::Artifact { kind, hash, .. } if kind == crate::recording::WOULD_EXECUTE => {
                    refused_then.insert(&entry.path, *hash);
                }
                _ => {}
            }
        }
        let fails_as_then = |path: &StepPath| {
            let (then, now) = (failed_then.get(path), failures.get(path));
            then.zip(now).is_some_and(|(then, now)| then.code == now.code && then.message == now.message)
                && refused_then.get(path).copied() == would_execute.get(path).map(ContentHash::of_value)
        };
        let steps: Vec<RecomputedStep> = paths
            .into_iter()
            .map(|path| {
                let change = if let Some(message) = violations.get(path) {
                    StepChange::SchemaViolation { message: message.clone() }
                } else {
                    match (recorded.get(path), after.get(path)) {
                        (Some(_), Some(_)) if served(path) => StepChange::Served,
                        (Some(_), None) if under_served(path) => StepChange::Served,
                        (None, None) if failures.contains_key(path) && fails_as_then(path) => StepChange::Clean,
                        (_, None) if failures.contains_key(path) => {
                            StepChange::Failed { error: failures[path].clone() }
                        }
                        (Some(a), Some(b)) if a == b => StepChange::Clean,
                        (Some(_), Some(_)) if options.without_diff.as_ref().is_some_and(|f| f.matches(path)) => {
                            StepChange::ValueChanged { diff: Vec::new() }
                        }
                        (Some(a), Some(b)) => {
                            let key = workflow.diff_key_at(path.as_str());
                            let (x, y) = (original.blobs.get(a), sandbox.blobs.get(b));
                            let diff = match (x, y) {
                                (Some(x), Some(y)) => json_diff(x, y, key.as_deref()),
                                _ => vec![format!("output {a} → {b}")],
                            };
                            StepChange::ValueChanged { diff }
                        }
                        (Some(_), None) => StepChange::Missing,
                        (None, _) => StepChange::Added,
                    }
                };
                let why = match &change {
                    StepChange::Served if prefix.contains(path) => {
                        Some("recorded before the step the recompute starts from".to_owned())
                    }
                    StepChange::Served if under_served(path) => {
                        Some("part of a step served from the journal".to_owned())
                    }
                    StepChange::Served if would_execute.contains_key(path) => Some(
                        "a write or external step that is not safe_to_retry, whose input changed: it was not \
                         executed; it would execute with the input shown"
                            .to_owned(),
                    ),
                    StepChange::Served => Some(
                        "a write or external step that is not safe_to_retry: its recorded effect is not repeated"
                            .to_owned(),
                    ),
                    StepChange::Failed { error } if error.is(&crate::error::ErrorCode::NOT_EXECUTED) => Some(
                        if would_execute.contains_key(path) {
                            "a write or external step that is not safe_to_retry, which the original run never ran \
                             here: it was not executed; it would execute with the input shown"
                        } else {
                            "a write or external call that is not safe_to_retry, which the original run never made: \
                             it was not executed"
                        }
                        .to_owned(),
                    ),
                    StepChange::Added if recorded_from.contains_key(path) => Some(format!(
                        "a write or external step that is not safe_to_retry: not executed; run {} recorded its \
                         answer for the same input, served here",
                        recorded_from[path]
                    )),
                    StepChange::Missing if !workflow.unknown_paths([path.as_str()]).is_empty() => {
                        Some("the new definition has no step here".to_owned())
                    }
                    StepChange::Missing if report.status != crate::journal::RunStatus::Completed => {
                        let at = first_failed.map(|p| format!(" at {p}")).unwrap_or_default();
                        Some(format!("not reached: the recompute ended {}{at} before it", report.status.as_str()))
                    }
                    StepChange::Missing if decisions_changed => {
                        Some("not reached: a decision went another way (see the decisions)".to_owned())
                    }
                    StepChange::Missing => Some("not reached by the recompute".to_owned()),
                    _ => None,
                };
                let refused =
                    matches!(&change, StepChange::Failed { error } if error.is(&crate::error::ErrorCode::NOT_EXECUTED));
                let would_execute_with = (matches!(change, StepChange::Served) || refused)
                    .then(|| would_execute.get(path).cloned())
                    .flatten();
                RecomputedStep { path: path.clone(), change, why, would_execute_with }
            })
            .collect();
        let mut decision_paths: Vec<&StepPath> = decided_before.keys().chain(decided_after.keys()).collect();
        decision_paths.sort();
        decision_paths.dedup();
        let decisions: Vec<DecisionChange> = decision_paths
            .into_iter()
            .filter(|p| !prefix.contains(*p) && decided_before.get(*p) != decided_after.get(*p))
            .map(|p| DecisionChange {
                path: p.clone(),
                before: decided_before.get(p).and_then(|c| serde_json::to_value(c).ok()),
                after: decided_after.get(p).and_then(|c| serde_json::to_value(c).ok()),
            })
            .collect();
        let changed = original.record.output != report.output
            || !decisions.is_empty()
            || steps.iter().any(|s| s.would_execute_with.is_some())
            || steps.iter().any(|s| !matches!(s.change, StepChange::Clean | StepChange::Served));
        let forked = if options.persist {
            Some(self.keep_recompute(&original, &sandbox, &options, &report).await?)
        } else {
            None
        };
        Ok(RecomputeReport {
            run,
            steps,
            decisions,
            recorded_input: original.record.input.clone(),
            recorded_output: original.record.output.clone(),
            recomputed_output: report.output,
            forked,
            changed,
            status: report.status,
            error: report.error,
            recomputed_events: sandbox_store.events(run).await.map_err(EngineError::store(run))?,
        })
    }

    /// Stores a recompute's journal as a new run, forked from the original.
    async fn keep_recompute(
        &self,
        original: &LoadedRun,
        sandbox: &LoadedRun,
        options: &RecomputeOptions,
        report: &crate::engine::RunReport,
    ) -> Result<RunId, EngineError> {
        let store = &self.inner.store;
        let now = self.inner.clock.now();
        let id = RunId::from_parts(now, self.inner.entropy.bytes10());
        let record = RunRecord {
            id,
            status: RunStatus::Suspended,
            output: None,
            error: None,
            parent: Some(Lineage { run: original.record.id, at: options.from.clone().unwrap_or_else(StepPath::root) }),
            created_at: now,
            updated_at: now,
            wake_at: None,
            lease: None,
            cancel: None,
            ..sandbox.record.clone()
        };
        store.create_run(record).await.map_err(EngineError::store(id))?;
        let mut batch = JournalBatch {
            entries: sandbox.entries.clone(),
            blobs: sandbox.blobs.iter().map(|(h, v)| (*h, v.clone())).collect(),
            events: Vec::new(),
        };
        if let Err(e) = store.append(id, None, &mut batch).await {
            let _ = store.erase_run(id).await;
            return Err(EngineError::store(id)(e));
        }
        let status = if report.status == RunStatus::Running { RunStatus::Pending } else { report.status };
        let update = StatusUpdate {
            status,
            output: report.output.clone(),
            error: report.error.clone(),
            at: now,
            wake_at: None,
            fence: None,
        };
        store.set_status(id, update).await.map_err(EngineError::store(id))?;
        Ok(id)
    }

    /// Replays a run with the given (current) definition and code, in a private in-memory
    /// sandbox: `write`/`external` steps, journaled values and human decisions are served
    /// from the original journal; everything else (pure and read steps, branch, map, loop
    /// and graph decisions) runs again. Reports, per step, whether outputs are identical.
    /// Nothing is written to this engine's store.
    pub async fn replay(&self, workflow: &Workflow, run: RunId) -> Result<ReplayReport, EngineError> {
        let original = self.inner.store.load(run).await.map_err(EngineError::store(run))?;
        let index = ReplayIndex::from_loaded(&original).map_err(EngineError::store(run))?;
        let recorded: HashMap<StepPath, ContentHash> = index.completions().map(|(p, h)| (p.clone(), h)).collect();
        let (report, sandbox_store) =
            self.in_sandbox(workflow, &original, index.with_mode(ReplayMode::Replay), "replay").await?;
        let replayed_journal = sandbox_store.entries(run);
        let mut replayed: HashMap<StepPath, ContentHash> = HashMap::new();
        for entry in &replayed_journal {
            if let Record::Completed { output, .. } = &entry.record {
                replayed.insert(entry.path.clone(), *output);
            }
        }
        let fenced: std::collections::HashSet<StepPath> = original
            .entries
            .iter()
            .filter(|e| matches!(e.record, Record::Intent { .. }))
            .map(|e| e.path.clone())
            .collect();
        let sandbox = sandbox_store.load(run).await.map_err(EngineError::store(run))?;
        let paths = execution_order(&original.entries, &replayed_journal, |p| {
            recorded.contains_key(p) || replayed.contains_key(p)
        });
        let steps: Vec<StepComparison> = paths
            .into_iter()
            .map(|path| {
                let (before, after) = (recorded.get(path).copied(), replayed.get(path).copied());
                let outcome = match (before, after) {
                    (Some(_), Some(_)) if fenced.contains(path) => StepReplay::Served,
                    (Some(a), Some(b)) if a == b => StepReplay::Identical,
                    (Some(_), Some(_)) => StepReplay::Different,
                    (Some(_), None) => StepReplay::Missing,
                    (None, _) => StepReplay::Added,
                };
                let diff = match (outcome, before, after) {
                    (StepReplay::Different, Some(a), Some(b)) => {
                        let key = workflow.diff_key_at(path.as_str());
                        match (original.blobs.get(&a), sandbox.blobs.get(&b)) {
                            (Some(x), Some(y)) => json_diff(x, y, key.as_deref()),
                            _ => vec![format!("output {a} → {b}")],
                        }
                    }
                    _ => Vec::new(),
                };
                StepComparison { path: path.clone(), outcome, recorded: before, replayed: after, diff }
            })
            .collect();
        let identical = original.record.output == report.output
            && steps.iter().all(|s| matches!(s.outcome, StepReplay::Identical | StepReplay::Served));
        Ok(ReplayReport {
            run,
            steps,
            recorded_output: original.record.output,
            replayed_output: report.output,
            identical,
        })
    }

    /// Forks `run` at `at`: a new run whose journal is everything the parent recorded before
    /// the step at `at` first started, with `patch` applied, and whose lineage names the
    /// parent and the step. The new run is `pending`: [`Engine::resume`] (or a runner)
    /// continues it from `at`, serving everything before from the copied journal. The parent
    /// is not changed.
    pub async fn fork(&self, run: RunId, at: &StepPath, patch: ForkPatch) -> Result<RunRecord, EngineError> {
        let store = &self.inner.store;
        let parent = store.load(run).await.map_err(EngineError::store(run))?;
        let invalid = |reason: String| EngineError::InvalidRequest { run, reason };
        let cut = parent
            .entries
            .iter()
            .position(|e| e.path.starts_with(at))
            .ok_or_else(|| invalid(format!("the run never reached step `{at}`, so it cannot be forked there")))?;
        let mut entries = parent.entries[..cut].to_vec();
        let mut blobs: HashMap<ContentHash, Arc<Value>> = HashMap::new();
        let mut patched = std::collections::HashSet::new();
        for entry in &mut entries {
            if let Record::Completed { output, .. } = &mut entry.record {
                if let Some(value) = patch.outputs.get(entry.path.as_str()) {
                    *output = ContentHash::of_value(value);
                    blobs.insert(*output, Arc::new(value.clone()));
                    patched.insert(entry.path.as_str().to_owned());
                } else if let Some(value) = parent.blobs.get(output) {
                    blobs.insert(*output, value.clone());
                }
            }
        }
        if let Some(missing) = patch.outputs.keys().find(|p| !patched.contains(*p)) {
            return Err(invalid(format!(
                "step `{missing}` did not complete before `{at}`, so its output cannot be set"
            )));
        }
        // A step inside an operator that also completed before the fork point: the
        // operator's recorded output (what later steps read) still holds the old value, so
        // the edit would change nothing. Said, not ignored.
        for path in patch.outputs.keys().map(|p| StepPath::new(p)) {
            let enclosing = entries
                .iter()
                .find(|e| matches!(e.record, Record::Completed { .. }) && e.path != path && path.starts_with(&e.path));
            if let Some(enclosing) = enclosing {
                return Err(invalid(format!(
                    "step `{path}` is inside `{}`, which completed before `{at}` and keeps its recorded output: \
                     set `{}` instead, or fork at a step inside `{}`",
                    enclosing.path, enclosing.path, enclosing.path
                )));
            }
        }
        let now = self.inner.clock.now();
        let id = RunId::from_parts(now, self.inner.entropy.bytes10());
        let record = RunRecord {
            id,
            input: patch.input.map(Arc::new).unwrap_or_else(|| parent.record.input.clone()),
            // Inert until its journal is in place: suspended with nothing to wake it.
            status: RunStatus::Suspended,
            output: None,
            error: None,
            parent: Some(Lineage { run, at: at.clone() }),
            created_at: now,
            updated_at: now,
            wake_at: None,
            lease: None,
            cancel: None,
            ..parent.record.clone()
        };
        store.create_run(record.clone()).await.map_err(EngineError::store(id))?;
        let mut batch = JournalBatch { entries, blobs: blobs.into_iter().collect(), events: Vec::new() };
        if let Err(e) = store.append(id, None, &mut batch).await {
            let _ = store.erase_run(id).await;
            return Err(EngineError::store(id)(e));
        }
        let ready =
            StatusUpdate { status: RunStatus::Pending, output: None, error: None, at: now, wake_at: None, fence: None };
        store.set_status(id, ready).await.map_err(EngineError::store(id))?;
        Ok(RunRecord { status: RunStatus::Pending, ..record })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{below, json_diff};
    use crate::StepPath;

    #[test]
    fn json_diff_by_position_and_by_key() {
        assert_eq!(
            json_diff(&json!({ "a": 1, "b": [1, 2] }), &json!({ "a": 2, "b": [1] }), None),
            ["/a: 1 → 2", "/b/1: 2 → (absent)"]
        );
        assert!(json_diff(&json!({ "x": [1] }), &json!({ "x": [1] }), None).is_empty());
        let keyed = json_diff(&json!([{ "id": 1, "v": "a" }]), &json!([{ "id": 1, "v": "b" }]), Some("id"));
        assert_eq!(keyed, ["[id=1]/v: \"a\" → \"b\""]);
        // Pointers escape `~` and `/`; each sibling's pointer is its own after a deep one.
        let before = json!({ "a/b": { "deep": [1, { "x": 1 }] }, "t~x": 1, "z": { "k": "s" }, "gone": true });
        let after = json!({ "a/b": { "deep": [1, { "x": 2 }] }, "t~x": 2, "z": { "k": "t" }, "new": null });
        assert_eq!(
            json_diff(&before, &after, None),
            [
                "/a~1b/deep/1/x: 1 → 2",
                "/gone: true → (absent)",
                "/new: (absent) → null",
                "/t~0x: 1 → 2",
                "/z/k: \"s\" → \"t\"",
            ]
        );
        assert_eq!(json_diff(&json!(1), &json!("1"), None), ["/: 1 → \"1\""]);
        let items = |v: &[(i64, &str)]| json!(v.iter().map(|(id, s)| json!({ "id": id, "s": s })).collect::<Vec<_>>());
        assert_eq!(
            json_diff(&items(&[(1, "a"), (2, "b")]), &items(&[(3, "c"), (1, "z")]), Some("id")),
            [
                "[id=1]/s: \"a\" → \"z\"",
                "[id=2]: {\"id\":2,\"s\":\"b\"} → (absent)",
                "[id=3]: (absent) → {\"id\":3,\"s\":\"c\"}",
            ]
        );
    }

    /// `below` says what `StepPath::starts_with` says of every whole, less the path itself.
    #[test]
    fn below_agrees_with_starts_with() {
        let wholes = ["pay", "each[3]", "loop#2/send", "a/b"];
        let set: std::collections::HashSet<&str> = wholes.into_iter().collect();
        for path in [
            "pay",
            "pay/call.0",
            "payroll",
            "pay[1]",
            "each[3]/x",
            "each[30]/x",
            "each[3]",
            "loop#2/send/tool.0",
            "loop#2/sender",
            "loop#20/send/x",
            "a/b/c",
            "a/bc",
            "a",
            "other",
        ] {
            let path = StepPath::new(path);
            let by_scan = wholes.iter().any(|w| path.as_str() != *w && path.starts_with(&StepPath::new(w)));
            assert_eq!(below(&path, &set), by_scan, "{path}");
        }
    }
}
