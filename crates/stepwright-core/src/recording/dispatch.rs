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

/// How soon a step holding for a task first looks at the store again for an answer given
/// in another process (one given in this process wakes it at once, as does one given in
/// another process on Postgres); each look waits twice as long as the last, up to
/// [`TASK_POLL_MOST`]: hundreds of runs may hold at once, and a look is a read.
const TASK_POLL: std::time::Duration = std::time::Duration::from_millis(50);

/// The longest a holding step waits between two looks.
const TASK_POLL_MOST: std::time::Duration = std::time::Duration::from_secs(1);

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
    /// Hand the task over at once instead of waiting for a worker to claim it (an `http`
    /// tool in push mode): the task is born leased to the pusher's endpoint.
    pub push: Option<std::sync::Arc<dyn TaskPusher>>,
}

/// Sends a task to an endpoint that answers it (push mode): the engine calls it once, right
/// after the task is dispatched and leased to [`TaskPusher::endpoint`] under token 1.
pub trait TaskPusher: Send + Sync + std::fmt::Debug {
    /// Who the task is leased to, shown as its worker (the endpoint's URL).
    fn endpoint(&self) -> &str;

    /// Sends `task`: `Ok(Some(output))` when the endpoint answered at once, `Ok(None)` when it
    /// accepted the task to answer later through the task endpoints (under the task's
    /// lease), an error when it refused or could not be reached (the attempt fails with it).
    fn push<'a>(
        &'a self,
        task: &'a StoredTask,
    ) -> futures_util::future::BoxFuture<'a, Result<Option<Value>, StepError>>;
}

/// How long a recompute's task may wait to be claimed when its tool sets no
/// `schedule_to_start`: a recompute is a question someone waits for, not a run that may
/// suspend for days.
const RECOMPUTE_SCHEDULE_TO_START: std::time::Duration = std::time::Duration::from_secs(30);

/// How a wait for a task's answer ended.
enum Waited {
    /// The task was answered (or could not be read, or the step was cancelled).
    Answer(Result<Value, StepError>),
    /// Still unanswered when the hold ran out.
    Held(Box<StoredTask>),
}

impl StepRecording {
    /// Hands `request` to a step worker and returns its output: see the module's doc. In a
    /// replay, the run's recorded answer (a replay re-executes code, not workers); in a
    /// recompute, a task of its own in the real store, waited for without suspending.
    pub(crate) async fn dispatch(&self, request: TaskRequest) -> Result<Value, StepError> {
        let run = &self.run;
        let path = request.at.clone().unwrap_or_else(|| self.path.clone());
        if run.replay.is_replay() {
            return run.replay.recorded_output(&path).map(|value| (*value).clone()).ok_or_else(|| {
                StepError::execution_failed(format!(
                    "a replay hands no work to step workers, and the run recorded no answer for {path}"
                ))
            });
        }
        let store = run.recorder.store().clone();
        let recompute_home = run.task_home.clone();
        let no_tasks = || {
            StepError::new(
                ErrorCode::EXECUTION_FAILED,
                "this store keeps no step tasks: `worker` tools need the SQLite or Postgres store",
            )
        };
        let tasks = store.tasks().ok_or_else(no_tasks)?;
        if recompute_home.as_ref().is_some_and(|home| home.tasks().is_none()) {
            return Err(no_tasks());
        }
        if run.config.durability == crate::config::Durability::None {
            return Err(StepError::new(
                ErrorCode::EXECUTION_FAILED,
                "`worker` tools need a journal: the run's durability is `none`",
            ));
        }
        let failed = |doing: &str, e: crate::store::StoreError| {
            StepError::execution_failed(format!("{doing} task for {path}: {e}")).retryable(true)
        };
        let id = match recompute_home {
            Some(_) => TaskId::for_recompute(run.run_id, &path, self.attempt, run.entropy.next_u64()),
            None => TaskId::derive(run.run_id, &path, self.attempt),
        };
        let retry_is_safe = request.retry_is_safe;
        // A task exists only once its `dispatched` entry is committed: an attempt the journal
        // shows no dispatch for has none to read (the common case, a fresh attempt, costs no
        // read), and a recompute's ids are new.
        // Waited on before the task is read or written, so an answer written in this process
        // (however soon) hands the task over: the step reads nothing back.
        let home_signals = match &recompute_home {
            Some(home) => home.task_signals(),
            None => store.task_signals(),
        };
        let waiter = home_signals.map(|signals| signals.on_answer(&id));
        let known = match recompute_home.is_none() && run.replay.dispatched(&path) == Some(self.attempt) {
            true => tasks.settle_task(&id, run.clock.now()).await.map_err(|e| failed("reading the", e))?,
            false => None,
        };
        // The task as just read or written: the step's first look.
        let mut first_look = known.clone();
        if known.is_none() {
            // A retry resumes from the last attempt's heartbeat details.
            let details = match self.attempt {
                1 => None,
                n => {
                    let before = TaskId::derive(run.run_id, &path, n - 1);
                    tasks.settle_task(&before, run.clock.now()).await.ok().flatten().and_then(|t| t.details)
                }
            };
            let schedule_to_start = match recompute_home {
                Some(_) => Some(request.schedule_to_start.unwrap_or(RECOMPUTE_SCHEDULE_TO_START)),
                None => request.schedule_to_start,
            };
            let spec = TaskSpec {
                id: id.clone(),
                queue: request.queue,
                handler: request.handler,
                input: request.input,
                idempotency_key: request.idempotency_key,
                lease_ms: u64::try_from(request.lease_for.as_millis()).unwrap_or(u64::MAX),
                schedule_to_start_ms: schedule_to_start.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
                concurrency: request.concurrency,
                details,
                recompute: recompute_home.is_some(),
                leased_to: request.push.as_ref().map(|pusher| pusher.endpoint().to_owned()),
            };
            // A claim parked in this process for this queue and handler takes the task at
            // once: born leased to its worker, in the task's own commit (no look, no claim
            // write). Not a tool's concurrency-limited task (the limit is counted at claim),
            // nor a pushed or a recompute's one.
            let tenant = run.caller.tenant.as_deref().unwrap_or_default();
            let matched = match (&spec.leased_to, recompute_home.is_some(), spec.concurrency) {
                (None, false, None) => {
                    store.task_signals().and_then(|signals| signals.take_parked(tenant, &spec.queue, &spec.handler))
                }
                _ => None,
            };
            let spec = TaskSpec { leased_to: matched.as_ref().map(|m| m.worker.clone()).or(spec.leased_to), ..spec };
            // In a recompute, the sandbox's journal records the task too (with the intent a
            // fenced step buffered into it), for the comparison.
            let at = run.clock.now();
            let record = Record::Dispatched { attempt: self.attempt, task: spec.clone() };
            run.recorder.commit(&path, at, record).await.map_err(|e| failed("dispatching the", e.0))?;
            if let Some(real) = recompute_home.as_ref().and_then(|home| home.tasks()) {
                real.dispatch_for_recompute(run.run_id, &path, self.attempt, &spec, at)
                    .await
                    .map_err(|e| failed("dispatching the recompute's", e))?;
            }
            // A task handed over at dispatch is the row just written (born leased to its
            // holder), built here rather than read back.
            let born = || {
                let (tenant, workflow) = (run.caller.tenant.clone(), run.workflow.to_string());
                StoredTask::born(spec.clone(), run.run_id, path.clone(), self.attempt, tenant, workflow, at)
            };
            let mut handed_back = false;
            if let Some(matched) = matched
                && let Some(task) = matched.deliver(born())
            {
                handed_back = true;
                // The claim went away before it got the task: back to the queue for anyone.
                let lease = crate::store::task::TaskLease { task: task.spec.id.clone(), token: task.lease_token };
                let released = tasks.answer_task(&lease, crate::store::task::TaskAnswer::Release, run.clock.now());
                released.await.map_err(|e| failed("releasing the", e))?;
                if let Some(signals) = store.task_signals() {
                    signals.dispatched();
                }
            }
            if let Some(pusher) = &request.push {
                let home = recompute_home.as_ref().and_then(|home| home.tasks()).unwrap_or(tasks);
                self.push(home, born(), pusher.as_ref()).await.map_err(|e| failed("pushing the", e))?;
            } else if !handed_back {
                first_look = Some(born());
            }
        }
        if let Some(real) = recompute_home.as_ref().and_then(|home| home.tasks()) {
            // The real workers answer in the real store; the recompute waits for them.
            return match self.await_answer(real, waiter, &id, retry_is_safe, None, first_look).await {
                Waited::Answer(answer) => answer,
                Waited::Held(_) => unreachable!("a wait without a hold ends with an answer"),
            };
        }
        let hold_until = run.clock.now().plus(run.config.task_hold);
        // While it holds, the run's slot on the runner takes another run.
        let lent = crate::slots::lend_while_waiting();
        let waited = self.await_answer(tasks, waiter, &id, retry_is_safe, Some(hold_until), first_look).await;
        drop(lent);
        let found = match waited {
            Waited::Answer(answer) => return answer,
            Waited::Held(found) => found,
        };
        // Without a deadline the run still looks again now and then (and an answer brings
        // the look forward).
        let now = run.clock.now();
        run.note_wake_at(found.next_deadline().unwrap_or_else(|| now.plus(RECHECK)));
        run.note_task_check(id.clone());
        self.local.lock().expect("poisoned").waiting = true;
        Err(StepError::new(
            ErrorCode::SUSPENDED,
            format!("waiting for a worker on queue `{}` to run `{}` ({id})", found.spec.queue, found.spec.handler),
        ))
    }

    /// Pushes `task` (born leased to the pusher) and records what the endpoint said
    /// at once: an output completes the task, a refusal fails it, an acceptance leaves it
    /// to the endpoint. The step then reads the task as it would a worker's.
    async fn push(
        &self,
        tasks: &dyn crate::store::task::TaskStore,
        task: StoredTask,
        pusher: &dyn TaskPusher,
    ) -> Result<(), crate::store::StoreError> {
        use crate::store::task::{TaskAnswer, TaskLease};
        // A cancelled step stops waiting for the endpoint (the request is dropped); the task,
        // leased to the endpoint, is then the cancel's to settle.
        let pushed = tokio::select! {
            pushed = pusher.push(&task) => pushed,
            () = self.cancel.cancelled() => return Ok(()),
        };
        let answer = match pushed {
            Ok(Some(output)) => TaskAnswer::Complete(output),
            Ok(None) => return Ok(()),
            Err(error) => TaskAnswer::Fail(error),
        };
        let lease = TaskLease { task: task.spec.id.clone(), token: task.lease_token };
        match tasks.answer_task(&lease, answer, self.run.clock.now()).await {
            // The endpoint answered through the task endpoints meanwhile (or its lease ran
            // out): the task says what happened.
            Ok(_) | Err(crate::store::StoreError::TaskLeaseLost { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Waits for `id`'s answer in `tasks`, woken by `waiter` (else polling), until
    /// `hold_until` if given. `first_look`: the task as the step just read or wrote it, taken
    /// for the first look instead of reading it again (an answer since is in the waiter).
    async fn await_answer(
        &self,
        tasks: &dyn crate::store::task::TaskStore,
        waiter: Option<std::sync::Arc<crate::store::task::AnswerWaiter>>,
        id: &TaskId,
        retry_is_safe: bool,
        hold_until: Option<crate::ids::Timestamp>,
        mut first_look: Option<StoredTask>,
    ) -> Waited {
        let run = &self.run;
        let mut poll = TASK_POLL;
        loop {
            // Enabled before the look, so an answer given while the step looks is not missed.
            let mut answered = waiter.as_ref().map(|waiter| Box::pin(waiter.notify().notified_owned()));
            if let Some(answered) = answered.as_mut() {
                answered.as_mut().enable();
            }
            // The task as last read or written stands in only for a final one or a look that
            // then waits (a held step's deadline is read from the row).
            let waits = hold_until.is_none_or(|until| run.clock.now() < until);
            let first = first_look.take().filter(|task| waits || task.state.is_final());
            let handed = waiter.as_ref().and_then(|waiter| waiter.take()).or(first);
            let looked = match handed {
                Some(task) => Ok(Some(task)),
                None => tasks.settle_task(id, run.clock.now()).await,
            };
            let task = match looked {
                Ok(Some(task)) => task,
                Ok(None) => {
                    return Waited::Answer(Err(StepError::execution_failed(format!(
                        "task {id} of {} vanished from the store",
                        self.path
                    ))));
                }
                Err(e) => {
                    return Waited::Answer(Err(StepError::execution_failed(format!(
                        "reading task {id} of {}: {e}",
                        self.path
                    ))
                    .retryable(true)));
                }
            };
            if let Some(answer) = answer_of(&task, retry_is_safe) {
                return Waited::Answer(answer);
            }
            let now = run.clock.now();
            let wait = match hold_until {
                Some(until) if now >= until => return Waited::Held(Box::new(task)),
                Some(until) => until.since(now).min(poll),
                None => poll,
            };
            poll = (poll * 2).min(TASK_POLL_MOST);
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
                    return Waited::Answer(Err(StepError::cancelled(format!("cancelled while task {id} ran on a worker"))));
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
