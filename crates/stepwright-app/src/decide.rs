//! "Decide, then continue": an interrupt resolved as a caller, and the run it held
//! continued — here, or by the live process that waits on it.

use stepwright_core::{Caller, Decision, Engine, EngineError, InterruptId, RunId, RunReport, Store};

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

/// The interrupt a decision is for: the one named, else the run's only open one.
pub fn only_interrupt(report: &RunReport, named: Option<&str>) -> Result<InterruptId, AppError> {
    if let Some(id) = named {
        return Ok(InterruptId::new(id));
    }
    match report.pending.as_slice() {
        [only] => Ok(only.id.clone()),
        [] => Err(AppError::BadInput(format!("run {} has no open interrupt", report.run_id))),
        many => {
            let ids: Vec<String> = many.iter().map(|p| format!("{} ({})", p.id, p.step)).collect();
            Err(AppError::BadInput(format!(
                "run {} has several open interrupts; pick one with --interrupt: {}",
                report.run_id,
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
