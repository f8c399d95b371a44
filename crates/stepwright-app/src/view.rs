//! A run as every front end shows it: `runs show --json` and `GET /v1/runs/{id}` are this
//! one shape.

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;
use stepwright_core::inspect::timeline;
use stepwright_core::{Engine, InterruptKind, RunId, RunReport, RunStatus, StepStatus, Timestamp};

use crate::AppError;

/// A run: where it stands, its output or error, what it waits for, and a row per step.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct RunDetails {
    /// The run's id (a UUIDv7).
    #[schemars(with = "String")]
    pub run_id: RunId,
    /// Its workflow's name.
    pub workflow: String,
    /// Where it stands.
    pub status: RunStatus,
    /// Its output, once completed.
    pub output: Option<Value>,
    /// Why it failed or was cancelled.
    pub error: Option<ErrorView>,
    /// The interrupts it waits on.
    pub pending: Vec<PendingView>,
    /// The events its `wait` steps wait for (each answered by a message sent to the run's
    /// inbox of that name).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub awaiting: Vec<AwaitedView>,
    /// The worker executing it now, if one is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// When that worker's lease lapses unless renewed (µs since the epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<i64>")]
    pub lease_expires_at: Option<Timestamp>,
    /// A row per step path, in the order they first appear.
    pub steps: Vec<StepView>,
    /// Model usage and cost over the whole run, when it called models.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<stepwright_llm::Totals>,
    /// When it was created (µs since the epoch), when read from a store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<i64>")]
    pub created_at: Option<Timestamp>,
    /// The run it was forked from, if it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<ParentView>,
    /// When a timer, retry or deadline it waits on is due (µs since the epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<i64>")]
    pub wake_at: Option<Timestamp>,
    /// Why a pending run has not started: what it waits for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued: Option<QueuedView>,
}

/// An event a `wait` step waits for.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct AwaitedView {
    /// The waiting step's path.
    pub step: String,
    /// The event: the name of the run's inbox its message is sent to.
    pub event: String,
    /// When the wait fails if no message comes (µs since the epoch).
    #[schemars(with = "i64")]
    pub until: Timestamp,
}

/// Why a pending run waits, as the store sees it now.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct QueuedView {
    /// In words, for a person.
    pub reason: String,
    /// Its priority among runs waiting for a worker.
    pub priority: i32,
    /// Its concurrency group, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency_key: Option<String>,
    /// How many of the group's runs may execute at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency_limit: Option<u32>,
    /// The group's runs holding its slots now (running or suspended).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(with = "Vec<String>")]
    pub held_by: Vec<RunId>,
}

/// Why a pending run has not started: a yield's delay, a full concurrency group, or no
/// worker having claimed it yet.
async fn queued_view(
    store: &dyn stepwright_core::Store,
    record: &stepwright_core::RunRecord,
) -> Result<QueuedView, AppError> {
    let priority = record.flow.priority;
    let mut view = QueuedView {
        reason: String::new(),
        priority,
        concurrency_key: None,
        concurrency_limit: None,
        held_by: Vec::new(),
    };
    let now = stepwright_core::store::quota::wall_now();
    if let Some(wake_at) = record.wake_at.filter(|at| *at > now) {
        view.reason = format!("it yielded: it may start again in {:.1} s", wake_at.since(now).as_secs_f64());
        return Ok(view);
    }
    let Some(group) = &record.flow.concurrency else {
        view.reason = format!("no worker has claimed it yet (priority {priority})");
        return Ok(view);
    };
    let filter = stepwright_core::store::RunFilter {
        concurrency_key: Some(group.key.clone()),
        headers_only: true,
        limit: Some(1000),
        ..Default::default()
    };
    let holding = |r: &stepwright_core::RunRecord| matches!(r.status, RunStatus::Running | RunStatus::Suspended);
    view.held_by = store.list_runs(filter).await?.into_iter().filter(holding).map(|r| r.id).collect();
    view.concurrency_key = Some(group.key.clone());
    view.concurrency_limit = Some(group.limit);
    view.reason = if view.held_by.len() >= group.limit as usize {
        format!(
            "concurrency group {:?} is full: {} of {} at a time, held by {}",
            group.key,
            view.held_by.len(),
            group.limit,
            view.held_by.iter().map(RunId::to_string).collect::<Vec<_>>().join(", ")
        )
    } else {
        format!("no worker has claimed it yet (its concurrency group {:?} has room; priority {priority})", group.key)
    };
    Ok(view)
}

/// Where a forked run came from.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ParentView {
    /// The run it was forked from.
    #[schemars(with = "String")]
    pub run_id: RunId,
    /// The step before which it was forked.
    pub at: String,
}

/// A run's error.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ErrorView {
    /// The stable error code.
    pub code: String,
    /// What happened.
    pub message: String,
}

/// An open interrupt of a run.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct PendingView {
    /// The interrupt's id.
    pub id: String,
    /// The step that asked.
    pub step: String,
    /// `approval`, `input`, `event` or `timer`.
    pub kind: InterruptKind,
    /// What the person deciding is shown.
    pub message: String,
}

/// One step path of a run.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct StepView {
    /// The step path (`drafts[1]/write`).
    pub path: String,
    /// Where it stands.
    pub status: StepStatus,
    /// The highest attempt recorded.
    pub attempts: u32,
    /// From its first start to its end, once both are known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<f64>,
    /// Its output, once completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    /// Its model usage and cost, when it called models.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<stepwright_llm::Totals>,
}

impl RunDetails {
    /// The report part of a run (what `run --json` prints): id, status, output, error and
    /// pending interrupts, without steps.
    pub fn of_report(report: &RunReport, workflow: &str) -> Self {
        Self {
            run_id: report.run_id,
            workflow: workflow.to_owned(),
            status: report.status,
            output: report.output.clone(),
            error: report.error.as_ref().map(|e| ErrorView { code: e.code.to_string(), message: e.message.clone() }),
            pending: report
                .pending
                .iter()
                .map(|p| PendingView {
                    id: p.id.to_string(),
                    step: p.step.as_str().to_owned(),
                    kind: p.kind,
                    message: p.message.clone(),
                })
                .collect(),
            awaiting: report
                .awaiting
                .iter()
                .map(|a| AwaitedView { step: a.step.as_str().to_owned(), event: a.event.clone(), until: a.until })
                .collect(),
            owner: None,
            lease_expires_at: None,
            steps: Vec::new(),
            usage: None,
            created_at: None,
            parent: None,
            wake_at: None,
            queued: None,
        }
    }
}

/// Reads a run's details from the engine's store.
pub async fn run_details(engine: &Engine, run: RunId) -> Result<RunDetails, AppError> {
    let store = engine.store();
    // One read of the journal and one of the events, at once.
    let (loaded, events) = futures_util::future::join(store.load(run), store.events(run)).await;
    let (loaded, events) = (loaded?, events?);
    let report = RunReport::of(&loaded);
    let (by_step, total) = stepwright_llm::rollup(&events);
    let mut details = RunDetails::of_report(&report, &loaded.record.workflow);
    if let Some(lease) = &loaded.record.lease {
        details.owner = Some(lease.owner.clone());
        details.lease_expires_at = Some(lease.expires_at);
    }
    details.steps = timeline(&loaded)
        .into_iter()
        .map(|row| StepView {
            path: row.path.as_str().to_owned(),
            status: row.status,
            attempts: row.attempts,
            duration_ms: row.duration().map(|d| d.as_secs_f64() * 1000.0),
            output: row.output.as_deref().cloned(),
            usage: by_step.get(row.path.as_str()).copied(),
        })
        .collect();
    details.usage = (total.calls > 0).then_some(total);
    details.created_at = Some(loaded.record.created_at);
    details.parent = loaded.record.parent.as_ref().map(|p| ParentView { run_id: p.run, at: p.at.as_str().to_owned() });
    details.wake_at = loaded.record.wake_at.filter(|_| !loaded.record.status.is_terminal());
    if loaded.record.status == RunStatus::Pending {
        details.queued = Some(queued_view(store.as_ref(), &loaded.record).await?);
    }
    Ok(details)
}

/// A recompute as every front end shows it (`recompute --json` and `POST
/// /v1/runs/{id}/recompute`): the engine's report, and what the run's model calls used and
/// cost before and after, per step and in all.
#[derive(Debug, Clone, Serialize, serde::Deserialize, JsonSchema)]
pub struct RecomputeView {
    /// The engine's report: per step what changed, decisions, outputs.
    #[serde(flatten)]
    pub report: stepwright_core::RecomputeReport,
    /// Model usage and cost, original against recomputed.
    pub usage: UsageChange,
}

/// Model usage and cost of a run against its recompute.
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize, JsonSchema)]
pub struct UsageChange {
    /// The original run's, in all.
    pub before: stepwright_llm::Totals,
    /// The recompute's, in all (a step served from the journal counts what it cost then).
    pub after: stepwright_llm::Totals,
    /// Per step path whose usage differs, in the report's step order.
    pub steps: Vec<StepUsageChange>,
}

/// One step's model usage before and after a recompute.
#[derive(Debug, Clone, Serialize, serde::Deserialize, JsonSchema)]
pub struct StepUsageChange {
    /// The step path (where its model calls were made).
    pub path: String,
    /// Before.
    pub before: stepwright_llm::Totals,
    /// After.
    pub after: stepwright_llm::Totals,
}

/// The recompute `report` of a run whose events were `original_events`, with its usage
/// change. A step served from the journal made no new call: it counts what it cost then, so
/// only steps that ran again (or no longer run) change the totals.
pub fn recompute_view(
    report: stepwright_core::RecomputeReport,
    original_events: &[stepwright_core::journal::EventRecord],
) -> RecomputeView {
    let (before_by_step, before) = stepwright_llm::rollup(original_events);
    let (mut after_by_step, _) = stepwright_llm::rollup(&report.recomputed_events);
    for step in &report.steps {
        if step.change == stepwright_core::StepChange::Served
            && let Some(kept) = before_by_step.get(step.path.as_str())
        {
            after_by_step.insert(step.path.as_str().to_owned(), *kept);
        }
    }
    // Events made by the sandbox for served paths were already replaced above; a path
    // that only the original has (its step no longer runs) counts zero after.
    let mut paths: Vec<&String> = Vec::new();
    let order: Vec<&str> = report.steps.iter().map(|s| s.path.as_str()).collect();
    for path in before_by_step.keys().chain(after_by_step.keys()) {
        if !paths.contains(&path) {
            paths.push(path);
        }
    }
    paths.sort_by_key(|p| order.iter().position(|o| o == p).unwrap_or(usize::MAX));
    let steps: Vec<StepUsageChange> = paths
        .into_iter()
        .filter_map(|path| {
            let (b, a) = (
                before_by_step.get(path).copied().unwrap_or_default(),
                after_by_step.get(path).copied().unwrap_or_default(),
            );
            (b != a).then(|| StepUsageChange { path: path.clone(), before: b, after: a })
        })
        .collect();
    let mut after = stepwright_llm::Totals::default();
    for totals in after_by_step.values() {
        after.calls += totals.calls;
        after.input_tokens += totals.input_tokens;
        after.output_tokens += totals.output_tokens;
        after.cost_usd += totals.cost_usd;
        after.calls_without_usage += totals.calls_without_usage;
    }
    RecomputeView { report, usage: UsageChange { before, after, steps } }
}

/// What each of `runs` used of models and cost, in order (reading each run's events, a few
/// at a time): the cost column of a run listing.
pub async fn usage_of(
    store: &dyn stepwright_core::Store,
    runs: &[RunId],
) -> Result<Vec<stepwright_llm::Totals>, AppError> {
    use futures_util::{StreamExt, TryStreamExt};
    futures_util::stream::iter(runs.iter().copied())
        .map(|run| async move { Ok::<_, AppError>(stepwright_llm::rollup(&store.events(run).await?).1) })
        .buffered(8)
        .try_collect()
        .await
}
