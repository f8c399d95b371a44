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

/// The interrupt a decision is for: the one named, else the run's only open one (a run as
/// the API shows it, so the command line decides the same way locally and over `--server`).
pub fn only_interrupt(run: &stepwright_api::RunDetails, named: Option<&str>) -> Result<InterruptId, AppError> {
    if let Some(id) = named {
        return Ok(InterruptId::new(id));
    }
    match run.pending.as_slice() {
        [only] => Ok(InterruptId::new(&only.id)),
        [] => Err(AppError::BadInput(format!("run {} has no open interrupt", run.run_id))),
        many => {
            let ids: Vec<String> = many.iter().map(|p| format!("{} ({})", p.id, p.step)).collect();
            Err(AppError::BadInput(format!(
                "run {} has several open interrupts; pick one with --interrupt: {}",
                run.run_id,
                ids.join(", ")
            )))
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
    engine.resolve(run, interrupt, decision, caller).await?;
    continue_run(engine, bindings, run).await
}

/// Continues a run after a decision: here, unless a live process holds it (and continues it
/// itself) or has finished it already.
pub async fn continue_run(engine: &Engine, bindings: &Bindings, run: RunId) -> Result<Decided, AppError> {
    let store: &dyn Store = engine.store().as_ref();
    let workflow = definition_of(store, run, bindings).await?;
    match engine.resume(&workflow, run).await {
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

/// Claims a decided run to continue it in this process, then executes it in a task of its
/// own: once this returns, the run is `running` (a client that reads it next sees that, not
/// the suspension it left). A run another live process holds (one waiting on the decision in
/// process) is left to it, and a claim that fails is logged: the runner (or a worker) takes
/// the run once it is due.
pub async fn continue_in_background(engine: &Engine, workflow: Workflow, run: RunId) {
    match engine.claim_to_resume(run).await {
        Ok(lease) => {
            let engine = engine.clone();
            tokio::spawn(async move { engine.resume_leased(&workflow, lease).await });
        }
        Err(error) => tracing::warn!(run = %run, error = %error, "a decided run was not continued here"),
    }
}
