//! Starting and resuming a run for a caller who may wait: executed here in a task of its own
//! (a caller who leaves does not stop it), or left to the runner, and read back as the
//! contract's `RunDetails` once it stops or the wait ends.

use std::time::Duration;

use serde_json::Value;
use stepwright_api::RunDetails;
use stepwright_core::{Engine, RunId, StartOptions, Workflow};

use crate::{AppError, run_details};

/// How often a waiting caller looks at the run again.
const LOOK_EVERY: Duration = Duration::from_millis(10);

/// Starts a run of `workflow` (its id chosen in `options`) and answers it once it stops
/// (finishes, or waits for a person or a time) or `wait` passes. When this process executes
/// runs and the caller waits, the run is created leased and executed at once in a task of its
/// own — the fastest path to a finished run; otherwise it is created pending and the runner
/// (this process's, woken by the store, or another worker's) claims it: one owner, within the
/// runner's concurrency.
pub async fn start_and_wait(
    engine: &Engine,
    workflow: &Workflow,
    input: Value,
    options: StartOptions,
    wait: Duration,
    executes_here: bool,
) -> Result<RunDetails, AppError> {
    let run = options.run_id.ok_or_else(|| AppError::BadInput("a start to wait for names its run id".into()))?;
    if executes_here && !wait.is_zero() {
        let (task_engine, workflow) = (engine.clone(), workflow.clone());
        let task = tokio::spawn(async move { task_engine.start_with(&workflow, input, options).await });
        match tokio::time::timeout(wait, task).await {
            Ok(Ok(Ok(report)))
                if report.status.is_terminal() || report.status == stepwright_core::RunStatus::Suspended =>
            {
                return run_details(engine, report.run_id).await;
            }
            Ok(Ok(Ok(_))) | Err(_) => {}
            Ok(Ok(Err(error))) => return Err(error.into()),
            Ok(Err(panicked)) => return Err(AppError::TaskFailed(panicked.to_string())),
        }
        return run_details(engine, run).await;
    }
    engine.create(workflow, input, options).await?;
    wait_until_stopped(engine, run, wait).await
}

/// Continues a run that is pending, suspended or left running by a process that is gone, in
/// a task of its own, and answers it once it stops or `wait` passes (at least a moment, so a
/// run that stops at once is answered stopped).
pub async fn resume_and_wait(
    engine: &Engine,
    workflow: Workflow,
    run: RunId,
    wait: Duration,
) -> Result<RunDetails, AppError> {
    let task_engine = engine.clone();
    let task = tokio::spawn(async move { task_engine.resume(&workflow, run).await });
    match tokio::time::timeout(wait.max(Duration::from_millis(50)), task).await {
        Ok(Ok(Ok(report))) => run_details(engine, report.run_id).await,
        Ok(Ok(Err(error))) => Err(error.into()),
        Ok(Err(panicked)) => Err(AppError::TaskFailed(panicked.to_string())),
        Err(_still_running) => run_details(engine, run).await,
    }
}

/// The run's details once it stops (finishes, or waits for a person or a time) or `wait`
/// passes.
pub async fn wait_until_stopped(engine: &Engine, run: RunId, wait: Duration) -> Result<RunDetails, AppError> {
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let details = run_details(engine, run).await?;
        if details.status.has_stopped() || tokio::time::Instant::now() >= deadline {
            return Ok(details);
        }
        tokio::time::sleep(LOOK_EVERY).await;
    }
}
