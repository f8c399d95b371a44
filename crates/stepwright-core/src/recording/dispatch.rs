//! A step's task for a step worker (a `worker:` tool): dispatched once per attempt — the
//! `dispatched` entry journaled, the store's task row written in the same commit — then
//! awaited here for the engine's short hold; a task still unanswered after it suspends the
//! run (its lease released) until the task is answered, its lease runs out, or nobody
//! claimed it in time. Coming back, the step asks again and is told.

use serde_json::Value;

use crate::error::{ErrorCode, StepError};
use crate::journal::Record;
use crate::store::task::{NO_WORKER, StoredTask, TaskId, TaskSpec, TaskState};

use super::StepRecording;

/// How often a step holding for a task looks at the store for an answer given in another
/// process (one given in this process wakes it at once).
const TASK_POLL: std::time::Duration = std::time::Duration::from_millis(50);

/// How long a run waits for a task with no deadline before it looks again on its own.
const RECHECK: std::time::Duration = std::time::Duration::from_secs(3600);

/// What a step asks of a step worker.
#[derive(Debug, Clone)]
pub struct TaskRequest {
    /// The queue.
    pub queue: String,
    /// The handler (`name` or `name@version`).
    pub handler: String,
    /// The input.
    pub input: Value,
    /// How long one claim lasts without a heartbeat.
    pub lease_for: std::time::Duration,
    /// How long the task may wait to be claimed.
    pub schedule_to_start: Option<std::time::Duration>,
    /// At most this many at once across workers.
    pub concurrency: Option<u32>,
    /// Whether a lapsed lease may simply be tried again (a `pure`/`read` tool, or one
    /// marked safe to retry); otherwise whether the effect happened is unknown.
    pub retry_is_safe: bool,
    /// The effect fence's key, handed to the worker (a fenced tool's).
    pub idempotency_key: Option<String>,
    /// The journaled sub-step the task is for (an agent's tool call, `turn.1/tool.0`);
    /// `None`: the step itself.
    pub at: Option<crate::ids::StepPath>,
}

impl StepRecording {
    /// Hands `request` to a step worker and returns its output: see the module's doc.
    pub(crate) async fn dispatch(&self, request: TaskRequest) -> Result<Value, StepError> {
        let run = &self.run;
        let store = run.recorder.store().clone();
        let tasks = store.tasks().ok_or_else(|| {
            StepError::new(
                ErrorCode::EXECUTION_FAILED,
                "this store keeps no step tasks: `worker` tools need the SQLite or Postgres store",
            )
        })?;
        if run.config.durability == crate::config::Durability::None {
            return Err(StepError::new(
                ErrorCode::EXECUTION_FAILED,
                "`worker` tools need a journal: the run's durability is `none`",
            ));
        }
        let path = request.at.clone().unwrap_or_else(|| self.path.clone());
        let failed = |doing: &str, e: crate::store::StoreError| {
            StepError::execution_failed(format!("{doing} task for {path}: {e}")).retryable(true)
        };
        let id = TaskId::derive(run.run_id, &path, self.attempt);
        let retry_is_safe = request.retry_is_safe;
        let known = tasks.settle_task(&id, run.clock.now()).await.map_err(|e| failed("reading the", e))?;
        if known.is_none() {
            // A retry resumes from the last attempt's heartbeat details.
            let details = match self.attempt {
                1 => None,
                n => {
                    let before = TaskId::derive(run.run_id, &path, n - 1);
                    tasks.settle_task(&before, run.clock.now()).await.ok().flatten().and_then(|t| t.details)
                }
            };
            let spec = TaskSpec {
                id: id.clone(),
                queue: request.queue,
                handler: request.handler,
                input: request.input,
                idempotency_key: request.idempotency_key,
                lease_ms: u64::try_from(request.lease_for.as_millis()).unwrap_or(u64::MAX),
                schedule_to_start_ms: request
                    .schedule_to_start
                    .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
                concurrency: request.concurrency,
                details,
            };
            let record = Record::Dispatched { attempt: self.attempt, task: spec };
            run.recorder.commit(&path, run.clock.now(), record).await.map_err(|e| failed("dispatching the", e.0))?;
        }
        let hold_until = run.clock.now().plus(run.config.task_hold);
        let waiter = store.task_signals().map(|signals| signals.on_answer(&id));
        loop {
            // Enabled before the look, so an answer given while the step looks is not missed.
            let mut answered = waiter.clone().map(|waiter| Box::pin(waiter.notified_owned()));
            if let Some(answered) = answered.as_mut() {
                answered.as_mut().enable();
            }
            let task = tasks.settle_task(&id, run.clock.now()).await.map_err(|e| failed("reading the", e))?;
            let Some(found) = &task else {
                return Err(StepError::execution_failed(format!("task {id} of {path} vanished from the store")));
            };
            if let Some(answer) = answer_of(found, retry_is_safe) {
                return answer;
            }
            let now = run.clock.now();
            if now >= hold_until {
                // Without a deadline the run still looks again now and then (and an answer
                // brings the look forward).
                run.note_wake_at(found.next_deadline().unwrap_or_else(|| now.plus(RECHECK)));
                run.note_task_check(id.clone());
                self.local.lock().expect("poisoned").waiting = true;
                return Err(StepError::new(
                    ErrorCode::SUSPENDED,
                    format!(
                        "waiting for a worker on queue `{}` to run `{}` ({id})",
                        found.spec.queue, found.spec.handler
                    ),
                ));
            }
            let wait = hold_until.since(now).min(TASK_POLL);
            let look_again = async {
                match answered {
                    Some(answered) => {
                        let _ = tokio::time::timeout(wait, answered).await;
                    }
                    None => run.clock.sleep(wait).await,
                }
            };
            tokio::select! {
                () = look_again => {}
                () = self.cancel.cancelled() => {
                    return Err(StepError::cancelled(format!("cancelled while task {id} ran on a worker")));
                }
            }
        }
    }
}

impl super::RunShared {
    /// Notes that the run suspends waiting for a step worker's answer to `task` (see
    /// `Engine::wake_if_woken_meanwhile`).
    pub(crate) fn note_task_check(&self, task: TaskId) {
        self.task_checks.lock().expect("poisoned").push(task);
    }
}

/// What a task's state means for the step: its output, its failure, or `None` while it is
/// pending or claimed.
fn answer_of(task: &StoredTask, retry_is_safe: bool) -> Option<Result<Value, StepError>> {
    let handler = &task.spec.handler;
    Some(match task.state {
        TaskState::Pending | TaskState::Claimed => return None,
        TaskState::Completed => Ok(task.output.clone().unwrap_or(Value::Null)),
        TaskState::Failed => Err(task
            .error
            .clone()
            .unwrap_or_else(|| StepError::execution_failed(format!("handler `{handler}` failed without saying why")))),
        TaskState::Cancelled => Err(StepError::cancelled(format!("handler `{handler}` stopped on a cancel"))),
        TaskState::NoWorker => Err(StepError::new(
            NO_WORKER,
            format!(
                "no worker claimed the task from queue `{}` for handler `{handler}` within its schedule_to_start",
                task.spec.queue
            ),
        )),
        TaskState::Lapsed if retry_is_safe => Err(StepError::timeout(format!(
            "the worker running `{handler}` stopped answering (its lease ran out); the task is tried again"
        ))),
        TaskState::Lapsed => Err(StepError::new(
            ErrorCode::OUTCOME_UNKNOWN,
            format!(
                "the worker running `{handler}` stopped answering after it started, and the tool is not safe to retry; whether its effect happened is unknown"
            ),
        )),
    })
}
