//! "Decide, then continue": an interrupt resolved as a caller, and the run it held
//! continued — here, or by the live process that waits on it.

use stepwright_core::{Caller, Decision, Engine, EngineError, InterruptId, RunId, RunReport, Store, Workflow};

use crate::{AppError, Bindings, definition_of};

/// What became of a run after a decision.
#[derive(Debug)]
pub enum Decided {
    /// This process continued the run: how it ended, or where it stopped again.
    Continued(RunReport),
    /// A live process waits on the interrupt and continues the run itself.
    ContinuesIn {
        /// That process's worker id.
        owner: String,
    },
    /// The process that waited saw the decision and finished the run before this one
    /// looked: how it ended.
    FinishedElsewhere(RunReport),
}

/// The interrupt a decision is for: the one named, else the run's only open decision (a
/// run as the API shows it, so the command line decides the same way locally and over
/// `--server`). Timers are not decisions: they are woken ([`only_timer`]).
pub fn only_interrupt(run: &stepwright_api::RunDetails, named: Option<&str>) -> Result<InterruptId, AppError> {
    let decisions: Vec<_> = run.pending.iter().filter(|p| p.kind != stepwright_api::InterruptKind::Timer).collect();
    only_one(run, named, &decisions, "open interrupt", "--interrupt")
}

/// The timer a wake is for: the one named, else the run's only open timer.
pub fn only_timer(run: &stepwright_api::RunDetails, named: Option<&str>) -> Result<InterruptId, AppError> {
    let timers: Vec<_> = run.pending.iter().filter(|p| p.kind == stepwright_api::InterruptKind::Timer).collect();
    only_one(run, named, &timers, "running timer", "--timer")
}

fn only_one(
    run: &stepwright_api::RunDetails,
    named: Option<&str>,
    open: &[&stepwright_api::PendingView],
    what: &str,
    flag: &str,
) -> Result<InterruptId, AppError> {
    if let Some(id) = named {
        return Ok(InterruptId::new(id));
    }
    match open {
        [only] => Ok(InterruptId::new(&only.id)),
        [] => {
            let mut waits: Vec<String> =
                run.pending.iter().map(|p| format!("{} (a {})", p.id, p.kind.as_str())).collect();
            // A `wait` is answered by a message, not by a decision: say how.
            waits.extend(run.awaiting.iter().map(|a| {
                format!(
                    "the event `{}` at {} (send it: stepwright send {} --inbox {} --message JSON)",
                    a.event, a.step, run.run_id, a.event
                )
            }));
            let besides = if waits.is_empty() { String::new() } else { format!("; it waits on {}", waits.join(", ")) };
            Err(AppError::BadInput(format!("run {} has no {what}{besides}", run.run_id)))
        }
        many => {
            let ids: Vec<String> = many.iter().map(|p| format!("{} ({})", p.id, p.step)).collect();
            Err(AppError::BadInput(format!("run {} has several: pick one with {flag}: {}", run.run_id, ids.join(", "))))
        }
    }
}

/// Resolves `interrupt` as `caller` (who must be among its approvers), then continues the
/// run with its definition rebuilt from the store.
pub async fn decide_then_continue(
    engine: &Engine,
    bindings: &Bindings,
    run: RunId,
    interrupt: &InterruptId,
    decision: Decision,
    caller: &Caller,
) -> Result<Decided, AppError> {
    let workflow = definition_before_deciding(engine, bindings, run).await?;
    engine.resolve(run, interrupt, decision, caller).await?;
    continue_with(engine, bindings, workflow, run).await
}

/// The definition to continue a run with, rebuilt before anything is decided: a definition
/// that no longer rebuilds refuses the decision with nothing stored. Only a run with no source
/// in the store (a Rust workflow, continued by the process that defines it) is decided
/// without one.
async fn definition_before_deciding(
    engine: &Engine,
    bindings: &Bindings,
    run: RunId,
) -> Result<Option<Workflow>, AppError> {
    match definition_of(engine.store().as_ref(), run, bindings).await {
        Ok(workflow) => Ok(Some(workflow)),
        Err(AppError::NoSource { .. }) => Ok(None),
        Err(other) => Err(other),
    }
}

async fn continue_with(
    engine: &Engine,
    bindings: &Bindings,
    workflow: Option<Workflow>,
    run: RunId,
) -> Result<Decided, AppError> {
    match workflow {
        Some(workflow) => resume(engine, &workflow, run).await,
        None => continue_run(engine, bindings, run).await,
    }
}

/// Continues a run after a decision: here, unless a live process holds it (and continues it
/// itself) or has finished it already.
pub async fn continue_run(engine: &Engine, bindings: &Bindings, run: RunId) -> Result<Decided, AppError> {
    let store: &dyn Store = engine.store().as_ref();
    match definition_of(store, run, bindings).await {
        Ok(workflow) => resume(engine, &workflow, run).await,
        // A Rust workflow is continued by the live process that defines it, if one holds it.
        Err(error @ AppError::NoSource { .. }) => match live_owner(engine, run).await? {
            Some(owner) => Ok(Decided::ContinuesIn { owner }),
            None => Err(error),
        },
        Err(other) => Err(other),
    }
}

/// The live process that holds `run`, if one does.
async fn live_owner(engine: &Engine, run: RunId) -> Result<Option<String>, AppError> {
    let record = engine.store().load_from(run, u64::MAX).await?.record;
    let now = engine.clock().now();
    Ok(record.lease.filter(|lease| lease.expires_at > now).map(|lease| lease.owner))
}

async fn resume(engine: &Engine, workflow: &Workflow, run: RunId) -> Result<Decided, AppError> {
    match engine.resume(workflow, run).await {
        Ok(report) => Ok(Decided::Continued(report)),
        Err(EngineError::Leased { owner, .. }) => Ok(Decided::ContinuesIn { owner }),
        Err(EngineError::NotResumable { status, .. }) if status.is_terminal() => {
            Ok(Decided::FinishedElsewhere(engine.report(run).await?))
        }
        Err(other) => Err(other.into()),
    }
}

/// Resolves `interrupt` as `caller` (who must be among its approvers), then continues the run
/// in a task of its own here ([`continue_in_background`]); answers where the run stands once
/// it is claimed (`running`), or as the live process that waits on it left it.
pub async fn decide_in_background(
    engine: &Engine,
    workflow: Workflow,
    run: RunId,
    interrupt: &InterruptId,
    decision: Decision,
    caller: &Caller,
) -> Result<stepwright_core::RunStatus, AppError> {
    engine.resolve(run, interrupt, decision, caller).await?;
    continue_in_background(engine, workflow, run).await;
    Ok(engine.store().load_from(run, u64::MAX).await?.record.status)
}

/// Wakes a durable timer of `run` as `caller`, then continues the run in a task of its own
/// here, as [`decide_in_background`] does for a decision.
pub async fn wake_in_background(
    engine: &Engine,
    workflow: Workflow,
    run: RunId,
    interrupt: &InterruptId,
    caller: &Caller,
) -> Result<stepwright_core::RunStatus, AppError> {
    engine.wake_timer(run, interrupt, caller).await?;
    continue_in_background(engine, workflow, run).await;
    Ok(engine.store().load_from(run, u64::MAX).await?.record.status)
}

/// Wakes a durable timer of `run` as `caller`, then continues the run (as
/// [`decide_then_continue`] does).
pub async fn wake_then_continue(
    engine: &Engine,
    bindings: &Bindings,
    run: RunId,
    interrupt: &InterruptId,
    caller: &Caller,
) -> Result<Decided, AppError> {
    let workflow = definition_before_deciding(engine, bindings, run).await?;
    engine.wake_timer(run, interrupt, caller).await?;
    continue_with(engine, bindings, workflow, run).await
}

/// Claims a decided run to continue it in this process, then executes it in a task of its
/// own: once this returns, the run is `running` (a client that reads it next sees that, not
/// the suspension it left). A run another live process holds (one waiting on the decision in
/// process) is left to it, and a claim that fails is logged: the runner (or a worker) takes
/// the run once it is due. Whether it was claimed here.
pub async fn continue_in_background(engine: &Engine, workflow: Workflow, run: RunId) -> bool {
    match engine.claim_to_resume(run).await {
        Ok(lease) => {
            let engine = engine.clone();
            tokio::spawn(async move { engine.resume_leased(&workflow, lease).await });
            true
        }
        Err(error) => {
            tracing::warn!(run = %run, error = %error, "a decided run was not continued here");
            false
        }
    }
}
