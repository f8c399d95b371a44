//! A run as every front end shows it: `runs show --json` and `GET /v1/runs/{id}` are this
//! one shape, the contract's [`RunDetails`], read from a store.

use stepwright_api::history::{DecisionChange, RecomputeView, RecomputedStep, StepUsageChange, UsageChange};
use stepwright_api::run::{AwaitedView, ErrorView, ParentView, PendingView, QueuedView, RunDetails, StepView};
use stepwright_core::inspect::timeline;
use stepwright_core::{Engine, RunId, RunReport, RunStatus};

use crate::AppError;
use crate::wire::{interrupt_kind, run_status, step_change, step_status, totals};

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
    let held_by: Vec<RunId> = store.list_runs(filter).await?.into_iter().filter(holding).map(|r| r.id).collect();
    view.held_by = held_by.iter().map(RunId::to_string).collect();
    view.concurrency_key = Some(group.key.clone());
    view.concurrency_limit = Some(group.limit);
    view.reason = if view.held_by.len() >= group.limit as usize {
        format!(
            "concurrency group {:?} is full: {} of {} at a time, held by {}",
            group.key,
            view.held_by.len(),
            group.limit,
            view.held_by.join(", ")
        )
    } else {
        format!("no worker has claimed it yet (its concurrency group {:?} has room; priority {priority})", group.key)
    };
    Ok(view)
}

/// The report part of a run (what `run --json` prints): id, status, output, error and
/// pending interrupts, without steps.
pub fn details_of_report(report: &RunReport, workflow: &str) -> RunDetails {
    RunDetails {
        run_id: report.run_id.to_string(),
        workflow: workflow.to_owned(),
        status: run_status(report.status),
        output: report.output.clone(),
        error: report.error.as_ref().map(|e| ErrorView { code: e.code.to_string(), message: e.message.clone() }),
        pending: report
            .pending
            .iter()
            .map(|p| PendingView {
                id: p.id.to_string(),
                step: p.step.as_str().to_owned(),
                kind: interrupt_kind(p.kind),
                message: p.message.clone(),
                deadline: p.deadline.map(stepwright_core::Timestamp::as_micros),
            })
            .collect(),
        awaiting: report
            .awaiting
            .iter()
            .map(|a| AwaitedView {
                step: a.step.as_str().to_owned(),
                event: a.event.clone(),
                until: a.until.as_micros(),
            })
            .collect(),
        owner: None,
        lease_expires_at: None,
        steps: Vec::new(),
        usage: None,
        created_at: None,
        parent: None,
        started_by: None,
        tags: Vec::new(),
        input: None,
        wake_at: report.wake_at.filter(|_| !report.status.is_terminal()).map(stepwright_core::Timestamp::as_micros),
        queued: None,
        tasks: Vec::new(),
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
    let mut details = details_of_report(&report, &loaded.record.workflow);
    if let Some(lease) = &loaded.record.lease {
        details.owner = Some(lease.owner.clone());
        details.lease_expires_at = Some(lease.expires_at.as_micros());
    }
    details.steps = timeline(&loaded)
        .into_iter()
        .map(|row| StepView {
            path: row.path.as_str().to_owned(),
            status: step_status(row.status),
            attempts: row.attempts,
            duration_ms: row.duration().map(|d| d.as_secs_f64() * 1000.0),
            output: row.output.as_deref().cloned(),
            usage: by_step.get(row.path.as_str()).copied().map(totals),
            started_at: row.started.map(|at| at.as_micros()),
            ended_at: row.ended.map(|at| at.as_micros()),
            spans: row
                .spans
                .iter()
                .map(|span| stepwright_api::SpanView {
                    activity: crate::wire::activity(span.activity),
                    from: span.from.as_micros(),
                    to: span.to.map(|at| at.as_micros()),
                })
                .collect(),
            waiting_for: None,
        })
        .collect();
    details.usage = (total.calls > 0).then_some(totals(total));
    details.created_at = Some(loaded.record.created_at.as_micros());
    details.started_by = crate::wire::started_by(&loaded.record.caller);
    details.tags = loaded.record.tags.clone();
    details.input = Some((*loaded.record.input).clone());
    details.parent =
        loaded.record.parent.as_ref().map(|p| ParentView { run_id: p.run.to_string(), at: p.at.as_str().to_owned() });
    details.wake_at = loaded.record.wake_at.filter(|_| !loaded.record.status.is_terminal()).map(|at| at.as_micros());
    if loaded.record.status == RunStatus::Pending {
        details.queued = Some(queued_view(store.as_ref(), &loaded.record).await?);
    }
    if !loaded.record.status.is_terminal()
        && let Some(tasks) = store.tasks()
    {
        details.tasks = task_waits(tasks, run).await?;
    }
    say_what_steps_wait_for(&mut details);
    Ok(details)
}

/// What a suspended run waits for, said for a person (the runs list's status): its first
/// open interrupt — a person, a timer until when, an event — else its wake-up time.
pub fn run_waits_for(loaded: &stepwright_core::journal::LoadedRun) -> Option<String> {
    use stepwright_core::InterruptKind;
    if loaded.record.status != RunStatus::Suspended {
        return None;
    }
    let when = |at: stepwright_core::Timestamp| stepwright_schedule::format_instant(at);
    let open = loaded.open_interrupts();
    let said = open.first().map(|open| match open.request.kind {
        InterruptKind::Approval | InterruptKind::Input => {
            format!("a person at {}: {}", open.step, open.request.message)
        }
        InterruptKind::Timer => match open.deadline {
            Some(until) => format!("a timer at {} until {}", open.step, when(until)),
            None => format!("a timer at {}", open.step),
        },
        InterruptKind::Event => format!("an event at {}: {}", open.step, open.request.message),
    });
    let more = open.len().saturating_sub(1);
    match (said, loaded.record.wake_at) {
        (Some(said), _) if more > 0 => Some(format!("{said} (and {more} more)")),
        (Some(said), _) => Some(said),
        (None, Some(at)) => Some(format!("its wake-up at {}", when(at))),
        (None, None) => None,
    }
}

/// Each waiting step's `waiting_for`, from what the run waits on: its interrupts, the events
/// its `wait`s expect, its workers' tasks, a retry's time.
pub fn say_what_steps_wait_for(details: &mut RunDetails) {
    use stepwright_api::{InterruptKind, StepStatus};
    let when = |micros: i64| stepwright_schedule::format_instant(stepwright_core::Timestamp::from_micros(micros));
    for step in &mut details.steps {
        if !matches!(step.status, StepStatus::Waiting | StepStatus::Retrying) {
            continue;
        }
        let interrupt = details.pending.iter().find(|p| p.step == step.path).map(|p| match p.kind {
            InterruptKind::Approval | InterruptKind::Input => format!("a person: {}", p.message),
            InterruptKind::Timer => match p.deadline {
                Some(until) => format!("a timer until {}", when(until)),
                None => "a timer".to_owned(),
            },
            InterruptKind::Event => format!("an event: {}", p.message),
        });
        let awaited = || {
            let awaited = details.awaiting.iter().find(|a| a.step == step.path)?;
            Some(format!("the event `{}` until {}", awaited.event, when(awaited.until)))
        };
        let task = || details.tasks.iter().find(|t| t.step == step.path).map(|t| t.reason.clone());
        let retry = || {
            (step.status == StepStatus::Retrying).then(|| match details.wake_at {
                Some(at) => format!("its next attempt at {}", when(at)),
                None => "its next attempt".to_owned(),
            })
        };
        step.waiting_for = interrupt.or_else(awaited).or_else(task).or_else(retry);
    }
}

/// The step workers' tasks a run waits on, each with why (the server, which knows who
/// polls, says it more precisely).
async fn task_waits(
    tasks: &dyn stepwright_core::store::task::TaskStore,
    run: RunId,
) -> Result<Vec<stepwright_api::TaskWaitView>, AppError> {
    use stepwright_core::store::task::{TaskFilter, TaskState};
    let filter = TaskFilter { run: Some(run), limit: 1000, ..TaskFilter::default() };
    let mut waits: Vec<stepwright_api::TaskWaitView> = tasks
        .list_tasks(&filter)
        .await?
        .into_iter()
        // A recompute's tasks are not the run's: it waits on none of them.
        .filter(|t| !t.state.is_final() && !t.spec.recompute)
        .map(|t| {
            let (queue, handler) = (&t.spec.queue, &t.spec.handler);
            let reason = match (&t.state, &t.worker) {
                (TaskState::Claimed, Some(worker)) => {
                    format!("worker {worker} runs `{handler}` (attempt {})", t.attempt)
                }
                _ => format!("waiting for a worker on queue `{queue}` to claim `{handler}`"),
            };
            stepwright_api::TaskWaitView {
                step: t.path.to_string(),
                task_id: t.spec.id.to_string(),
                queue: queue.clone(),
                handler: handler.clone(),
                state: crate::wire::task_status(t.state),
                worker: t.worker.clone(),
                attempt: t.attempt,
                reason,
            }
        })
        .collect();
    waits.sort_by(|a, b| a.step.cmp(&b.step));
    Ok(waits)
}

/// A recompute as every front end reports it (`stepwright recompute`, `POST …/recompute`, an
/// experiment's runs): `engine.recompute` with what the run's model calls cost then and now.
///
/// # Errors
/// The recompute's own, or the store cannot read the run's events.
pub async fn recompute_with_report(
    engine: &Engine,
    workflow: &stepwright_core::Workflow,
    run: RunId,
    options: stepwright_core::RecomputeOptions,
) -> Result<RecomputeView, AppError> {
    let (report, then) = recompute_with_usage(engine, workflow, run, options).await?;
    Ok(recompute_view(report, then))
}

/// `engine.recompute` and what the run's model calls cost then (its `model.call` events
/// alone, read while the recompute runs: on a store whose reads go to another thread, the
/// report costs no wait of its own), for [`recompute_view`].
///
/// # Errors
/// The recompute's own, or the store cannot read the run's events.
pub async fn recompute_with_usage(
    engine: &Engine,
    workflow: &stepwright_core::Workflow,
    run: RunId,
    options: stepwright_core::RecomputeOptions,
) -> Result<(stepwright_core::RecomputeReport, stepwright_llm::Rollup), AppError> {
    let (report, then) = futures_util::future::join(engine.recompute(workflow, run, options), async {
        let mut then = stepwright_llm::Rollup::default();
        engine.store().visit_events_of_kind(run, stepwright_llm::MODEL_CALL_EVENT, &mut |e| then.add(e)).await?;
        Ok::<_, AppError>(then)
    })
    .await;
    Ok((report?, then?))
}

/// The recompute `report` of a run whose model calls cost `then`, with its usage change. A
/// step served from the journal made no new call: it counts what it cost then, so only steps
/// that ran again (or no longer run) change the totals.
pub fn recompute_view(report: stepwright_core::RecomputeReport, then: stepwright_llm::Rollup) -> RecomputeView {
    let usage = usage_change(&report, then);
    RecomputeView {
        run: report.run.to_string(),
        steps: report.steps.into_iter().map(recomputed_step).collect(),
        decisions: report.decisions.into_iter().map(decision_change).collect(),
        recorded_output: report.recorded_output,
        recomputed_output: report.recomputed_output,
        forked: report.forked.map(|run| run.to_string()),
        changed: report.changed,
        status: crate::wire::run_status(report.status),
        error: report.error.as_ref().map(crate::wire::error_view),
        usage,
    }
}

/// One step of a recompute's report, as the contract says it.
pub(crate) fn recomputed_step(step: stepwright_core::RecomputedStep) -> RecomputedStep {
    RecomputedStep {
        path: step.path.as_str().to_owned(),
        change: step_change(step.change),
        why: step.why,
        would_execute_with: step.would_execute_with,
    }
}

/// A decision a recompute took otherwise, as the contract says it.
pub(crate) fn decision_change(decision: stepwright_core::DecisionChange) -> DecisionChange {
    DecisionChange { path: decision.path.as_str().to_owned(), before: decision.before, after: decision.after }
}

/// What the recompute `report` of a run whose model calls cost `then` uses: in total, and
/// for each step whose usage changed.
pub(crate) fn usage_change(report: &stepwright_core::RecomputeReport, then: stepwright_llm::Rollup) -> UsageChange {
    let stepwright_llm::Rollup { by_step: before_by_step, total: before } = then;
    let (mut after_by_step, _) = stepwright_llm::rollup(&report.recomputed_events);
    // A served step's usage is what it used the first time (its calls were not made again).
    for step in &report.steps {
        if step.change == stepwright_core::StepChange::Served
            && let Some(kept) = before_by_step.get(step.path.as_str())
        {
            after_by_step.insert(step.path.clone(), *kept);
        }
    }
    let mut after = stepwright_llm::Totals::default();
    for totals in after_by_step.values() {
        after += *totals;
    }
    // Each step whose usage changed, in the report's order; then, sorted, any path that only
    // the usage names (a call whose step the report does not list).
    let usage_of = |path: &str| {
        let (b, a) = (before_by_step.get(path).copied(), after_by_step.get(path).copied());
        (b.is_some() || a.is_some()).then(|| (b.unwrap_or_default(), a.unwrap_or_default()))
    };
    let change = |path: &str, (b, a): (stepwright_llm::Totals, stepwright_llm::Totals)| {
        (b != a).then(|| StepUsageChange { path: path.to_owned(), before: totals(b), after: totals(a) })
    };
    let mut steps: Vec<StepUsageChange> = Vec::new();
    let mut listed = 0;
    for step in &report.steps {
        if let Some(usage) = usage_of(step.path.as_str()) {
            listed += 1;
            steps.extend(change(step.path.as_str(), usage));
        }
    }
    let both = before_by_step.keys().filter(|p| after_by_step.contains_key(*p)).count();
    if listed < before_by_step.len() + after_by_step.len() - both {
        let reported: std::collections::HashSet<&str> = report.steps.iter().map(|s| s.path.as_str()).collect();
        let others: std::collections::BTreeSet<&str> = before_by_step
            .keys()
            .chain(after_by_step.keys())
            .map(stepwright_core::StepPath::as_str)
            .filter(|p| !reported.contains(p))
            .collect();
        for path in others {
            steps.extend(usage_of(path).and_then(|usage| change(path, usage)));
        }
    }
    UsageChange { before: totals(before), after: totals(after), steps }
}

/// What each of `runs` used of models and cost, in order (reading each run's model calls
/// alone, a few runs at a time): the cost column of a run listing.
pub async fn usage_of(
    store: &dyn stepwright_core::Store,
    runs: &[RunId],
) -> Result<Vec<stepwright_api::Totals>, AppError> {
    use futures_util::{StreamExt, TryStreamExt};
    futures_util::stream::iter(runs.iter().copied())
        .map(|run| async move {
            let mut used = stepwright_llm::Rollup::default();
            store.visit_events_of_kind(run, stepwright_llm::MODEL_CALL_EVENT, &mut |e| used.add(e)).await?;
            Ok::<_, AppError>(totals(used.total))
        })
        .buffered(8)
        .try_collect()
        .await
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use stepwright_core::journal::EventRecord;
    use stepwright_core::{RecomputeReport, RecomputedStep, RunId, StepChange, StepPath, Timestamp};

    fn call(path: &str, input_tokens: u64) -> EventRecord {
        EventRecord {
            run: RunId::from_bytes([1; 16]),
            path: StepPath::new(path),
            at: Timestamp::from_micros(0),
            tenant: None,
            user: None,
            kind: stepwright_llm::MODEL_CALL_EVENT.to_owned(),
            data: json!({ "usage": { "input_tokens": input_tokens, "output_tokens": 1 }, "cost_usd": 0.5 }),
        }
    }

    /// The steps whose usage changed come in the report's order, then (sorted) the paths only
    /// the usage names; a served step costs what it cost then; a path gone costs nothing now.
    #[test]
    fn the_usage_change_follows_the_report_and_counts_served_steps_as_then() {
        let step = |path: &str, change| RecomputedStep {
            path: StepPath::new(path),
            change,
            why: None,
            would_execute_with: None,
        };
        let report = RecomputeReport {
            run: RunId::from_bytes([1; 16]),
            steps: vec![
                step("b", StepChange::Served),
                step("a", StepChange::ValueChanged { diff: Vec::new() }),
                step("c", StepChange::Clean),
            ],
            decisions: Vec::new(),
            recorded_input: std::sync::Arc::new(json!(null)),
            recorded_output: None,
            recomputed_output: None,
            forked: None,
            changed: true,
            status: stepwright_core::RunStatus::Completed,
            error: None,
            recomputed_events: vec![call("a", 5), call("c", 7), call("y", 3)],
        };
        let mut then = stepwright_llm::Rollup::default();
        for event in [call("a", 10), call("b", 20), call("c", 7), call("z", 4)] {
            then.add(&event);
        }
        let usage = super::usage_change(&report, then);
        let paths: Vec<&str> = usage.steps.iter().map(|s| s.path.as_str()).collect();
        assert_eq!(paths, ["a", "y", "z"], "b was served, c used the same; y and z only the usage names");
        assert_eq!((usage.steps[0].before.input_tokens, usage.steps[0].after.input_tokens), (10, 5));
        assert_eq!((usage.steps[1].before.calls, usage.steps[1].after.input_tokens), (0, 3));
        assert_eq!((usage.steps[2].before.input_tokens, usage.steps[2].after.calls), (4, 0));
        assert_eq!((usage.before.input_tokens, usage.after.input_tokens), (41, 5 + 20 + 7 + 3));
        assert_eq!((usage.before.calls, usage.after.calls), (4, 4));
    }
}
