//! The step-worker protocol (DESIGN §17): `POST /v1/tasks/claim` (a long poll),
//! `/v1/tasks/heartbeat`, `/v1/tasks/{id}/complete | fail | cancelled | release`, and what
//! operators read: `GET /v1/tasks`, `/v1/queues`, `/v1/workers`. Tasks are found in the
//! key's namespace only; a `worker:<pattern>` key only in the queues it names. Every answer
//! is fenced by the task's lease in the store; one that ends the task wakes its run, and
//! continues it here when this server executes runs.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use stepwright_api::task::{
    BeatAnswer, BeatState, ChunkKind, ChunksTaken, ClaimTasks, ClaimedTasks, CompleteTask, DeferTask, FailTask,
    Heartbeat, HeartbeatAnswer, PROTOCOL_HEADER, PROTOCOLS, QueueList, QueueView, TaskAnswerTaken, TaskAnswered,
    TaskAnswers, TaskAnswersTaken, TaskChunks, TaskLeaseBody, TaskList, TaskOutcome, TaskQuery, TaskSummary,
    WorkerList,
};
use stepwright_core::store::task::{
    Answered, Beat, Claim, MayAnswer, ParkedClaim, StoredTask, TaskAnswer, TaskFilter, TaskId, TaskLease, TaskState,
    TaskStore,
};
use stepwright_core::{ErrorCode, RunStatus, StepError, Timestamp};

use stepwright_app::wire::{task_state as state_of, task_status as status_of};

use super::{Body, Params};
use crate::keys::{Principal, Role};
use crate::problem::ApiError;
use crate::state::Shared;
use crate::workers::Parked;

/// How often a parked claim looks at the store for work another process dispatched (work
/// dispatched in this process wakes it at once).
const CLAIM_POLL: Duration = Duration::from_millis(50);

/// How often a parked claim looks whether the runs of the tasks it holds were cancelled by
/// another process (a cancel in this process is looked at at once).
const CANCEL_LOOK: Duration = Duration::from_millis(250);

/// The longest heartbeat interval advised.
const MAX_HEARTBEAT_INTERVAL: Duration = Duration::from_secs(10);

/// How long a claim leaving its place in line waits for a task a dispatch took it for, whose
/// commit is under way (a commit takes milliseconds; past this the task's lease decides).
const MATCH_COMMIT: Duration = Duration::from_secs(2);

/// `400 protocol_unsupported` unless the request speaks a protocol this server does (a
/// request without the header is taken as version 1).
fn check_protocol(headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(value) = headers.get(PROTOCOL_HEADER) else { return Ok(()) };
    let version = value.to_str().ok().and_then(|v| v.trim().parse::<u32>().ok());
    match version {
        Some(v) if PROTOCOLS.contains(&v) => Ok(()),
        _ => Err(ApiError::new(
            axum::http::StatusCode::BAD_REQUEST,
            "protocol_unsupported",
            format!(
                "protocol {:?} is not spoken here: this server speaks {PROTOCOL_HEADER} {PROTOCOLS:?}",
                value.to_str().unwrap_or("?")
            ),
        )),
    }
}

fn tasks_of(shared: &Shared) -> Result<&dyn TaskStore, ApiError> {
    shared.store.tasks().ok_or_else(|| ApiError::bad_request("this server's store keeps no step tasks"))
}

/// The tasks among `holding` (this namespace's, claimed) whose runs are cancelled or asked
/// to be: one read, however many the worker holds.
async fn to_cancel(shared: &Shared, who: &Principal, holding: &[String]) -> Result<Vec<String>, ApiError> {
    let held: Vec<TaskId> = holding.iter().map(|id| TaskId::new(id)).collect();
    let cancelling = tasks_of(shared)?.cancelling_among(who.namespace(), &held).await?;
    Ok(cancelling.iter().map(|id| id.as_str().to_owned()).collect())
}

/// `POST /v1/tasks/claim`.
pub(crate) async fn claim(
    State(shared): State<Arc<Shared>>,
    who: Principal,
    headers: HeaderMap,
    Body(body): Body<ClaimTasks>,
) -> Result<Json<ClaimedTasks>, ApiError> {
    check_protocol(&headers)?;
    who.require_queue(&body.queue)?;
    if body.max > 100 || body.wait_seconds > 60 {
        return Err(ApiError::new(
            axum::http::StatusCode::UNPROCESSABLE_ENTITY,
            "bad_request",
            "`max` is at most 100 and `wait_seconds` at most 60",
        ));
    }
    if body.max > 0 && body.handlers.is_empty() {
        return Err(ApiError::new(
            axum::http::StatusCode::UNPROCESSABLE_ENTITY,
            "bad_request",
            "a claim for tasks names the handlers the worker offers",
        ));
    }
    let store = tasks_of(&shared)?;
    let claim = Claim {
        worker: body.worker.id.clone(),
        tenant: who.namespace().to_owned(),
        queue: body.queue.clone(),
        handlers: body.handlers.clone(),
        max: body.max as usize,
    };
    let started = tokio::time::Instant::now();
    let wait = Duration::from_secs(u64::from(body.wait_seconds));
    shared.workers.heard(who.namespace(), &body, shared.now(), 1);
    let _parked = Parked { workers: &shared.workers, namespace: who.namespace(), claim: &body, now: shared.now() };
    // In line in this process: a dispatch here may hand this claim its task directly
    // (decision 72).
    let mut parking = match (claim.max > 0, shared.store.task_signals()) {
        (true, Some(signals)) => Some(signals.park(ParkedClaim {
            worker: claim.worker.clone(),
            tenant: claim.tenant.clone(),
            queue: claim.queue.clone(),
            handlers: claim.handlers.clone(),
        })),
        _ => None,
    };
    // The held tasks' cancels are looked up when this process cancels a run and every
    // `CANCEL_LOOK` (another process's cancel) — per worker, across its claims; tasks at
    // every wake-up.
    loop {
        // Enabled before looking, so a task dispatched (or a run cancelled) while this looks
        // is not missed.
        let dispatched = shared.store.task_signals().map(|signals| signals.on_dispatch().notified());
        let mut dispatched = std::pin::pin!(dispatched);
        if let Some(dispatched) = dispatched.as_mut().as_pin_mut() {
            dispatched.enable();
        }
        let announced = shared.workers.announced();
        tokio::pin!(announced);
        announced.as_mut().enable();
        let look =
            !body.holding.is_empty() && shared.workers.cancels_due(who.namespace(), &body.worker.id, CANCEL_LOOK);
        let cancel = if look { to_cancel(&shared, &who, &body.holding).await? } else { Vec::new() };
        let mut tasks = if claim.max > 0 { store.claim_tasks(&claim, shared.now()).await? } else { Vec::new() };
        if !tasks.is_empty() || !cancel.is_empty() || started.elapsed() >= wait || shared.shutdown.is_cancelled() {
            // Out of line; a task a dispatch took this claim for meanwhile comes too (or, past
            // the claim's `max`, goes back to the queue).
            if let Some(matched) = match parking.take() {
                Some(parking) => parking.leave(MATCH_COMMIT).await,
                None => None,
            } {
                if tasks.len() < claim.max {
                    tasks.push(matched);
                } else {
                    let lease = TaskLease { task: matched.spec.id.clone(), token: matched.lease_token };
                    store.answer_task(&lease, TaskAnswer::Release, shared.now()).await?;
                    if let Some(signals) = shared.store.task_signals() {
                        signals.dispatched();
                    }
                }
            }
            return Ok(Json(claimed(&tasks, cancel)));
        }
        let changed = async {
            match dispatched.as_mut().as_pin_mut() {
                Some(dispatched) => {
                    let _ = tokio::time::timeout(CLAIM_POLL, dispatched).await;
                }
                None => tokio::time::sleep(CLAIM_POLL).await,
            }
        };
        let matched = async {
            match parking.as_mut() {
                Some(parking) => parking.matched().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = changed => {}
            () = &mut announced => {}
            () = shared.shutdown.cancelled() => {}
            task = matched => match task {
                Some(task) => return Ok(Json(claimed(&[task], Vec::new()))),
                // The dispatch that took this claim failed: it looks the usual way.
                None => parking = None,
            },
        }
    }
}

/// A claim's answer: the tasks leased, the cancels, and the heartbeat interval the shortest
/// lease calls for.
fn claimed(tasks: &[StoredTask], cancel: Vec<String>) -> ClaimedTasks {
    let shortest = tasks.iter().map(|t| Duration::from_millis(t.spec.lease_ms)).min();
    let interval = shortest.map_or(MAX_HEARTBEAT_INTERVAL, |lease| (lease / 3).min(MAX_HEARTBEAT_INTERVAL));
    ClaimedTasks {
        tasks: tasks.iter().map(stepwright_llm::task_view).collect(),
        cancel,
        heartbeat_interval_ms: u64::try_from(interval.as_millis()).unwrap_or(u64::MAX).max(1),
    }
}

/// `POST /v1/tasks/heartbeat`.
pub(crate) async fn heartbeat(
    State(shared): State<Arc<Shared>>,
    who: Principal,
    headers: HeaderMap,
    Body(body): Body<Heartbeat>,
) -> Result<Json<HeartbeatAnswer>, ApiError> {
    check_protocol(&headers)?;
    who.require(Role::Worker)?;
    let store = tasks_of(&shared)?;
    shared.workers.touch(who.namespace(), &body.worker_id, shared.now());
    // A task of another namespace (or one this key may not work) is `lost` to this worker.
    let mut mine = Vec::with_capacity(body.tasks.len());
    let mut leases = Vec::new();
    for held in &body.tasks {
        let task = store.settle_task(&TaskId::new(&held.id), shared.now()).await?;
        let allowed = task.as_ref().is_some_and(|t| {
            t.tenant.as_deref().unwrap_or_default() == who.namespace() && who.require_queue(&t.spec.queue).is_ok()
        });
        mine.push(allowed);
        if allowed {
            leases.push((TaskLease { task: TaskId::new(&held.id), token: held.lease }, held.details.clone()));
        }
    }
    let mut beats = store.heartbeat_tasks(&leases, shared.now()).await?.into_iter();
    let tasks = body
        .tasks
        .iter()
        .zip(mine)
        .map(|(held, allowed)| {
            let beat = if allowed { beats.next().unwrap_or(Beat::Lost) } else { Beat::Lost };
            let (state, until) = match beat {
                Beat::Renewed(until) => (BeatState::Ok, Some(until.as_micros())),
                Beat::Cancel(until) => (BeatState::Cancel, Some(until.as_micros())),
                Beat::Lost => (BeatState::Lost, None),
            };
            BeatAnswer { id: held.id.clone(), state, lease_expires: until }
        })
        .collect();
    Ok(Json(HeartbeatAnswer { tasks }))
}

/// Answers a task under its lease (a worker's request, checked for its protocol and role).
async fn answer(
    shared: &Shared,
    who: &Principal,
    headers: &HeaderMap,
    id: &str,
    lease: u64,
    answer: TaskAnswer,
) -> Result<Json<TaskAnswered>, ApiError> {
    check_protocol(headers)?;
    who.require(Role::Worker)?;
    let state = answer_one(shared, who, id, lease, answer).await?;
    Ok(Json(TaskAnswered { id: id.to_owned(), state: status_of(state) }))
}

/// Answers the task `id` of the caller's namespace and queues under `lease`, then wakes its
/// run (and continues it here when this server executes runs and the run is suspended).
async fn answer_one(
    shared: &Shared,
    who: &Principal,
    id: &str,
    lease: u64,
    answer: TaskAnswer,
) -> Result<TaskState, ApiError> {
    let store = tasks_of(shared)?;
    let task_id = TaskId::new(id);
    let missing = || ApiError::not_found("not_found", format!("task {id} was not found"));
    // The caller's tenant and queues are checked against the task in the answer's own write.
    let namespace = who.namespace().to_owned();
    let works = who.clone();
    let may: MayAnswer = Arc::new(move |task: &StoredTask| {
        task.tenant.as_deref().unwrap_or_default() == namespace && works.require_queue(&task.spec.queue).is_ok()
    });
    let lease = TaskLease { task: task_id, token: lease };
    let (state, task) = match store.answer_task_if(&lease, answer, shared.now(), may).await? {
        Answered::Taken { state, task } => (state, task),
        Answered::Missing => return Err(missing()),
        // Another tenant's task is not there for this caller; one of its own tenant on a queue
        // its key does not work is forbidden.
        Answered::Refused(task) => {
            if task.tenant.as_deref().unwrap_or_default() == who.namespace() {
                who.require_queue(&task.spec.queue)?;
            }
            return Err(missing());
        }
    };
    // A step waiting here for the answer sees it itself (and a run suspending at this
    // moment looks at its task once its suspension is written); a run that suspended is
    // woken (and continued here). (A recompute's task wakes nothing: the recompute waiting
    // for it reads it.)
    let awaited_here = || shared.store.task_signals().is_some_and(|signals| signals.is_awaited(&task.spec.id));
    if state.is_final() && !task.spec.recompute && !awaited_here() {
        let record = shared.store.load_from(task.run, u64::MAX).await?.record;
        if record.status == RunStatus::Suspended {
            // Claimed and continued here if this server executes runs (its timer is then
            // moot); else, or if the claim fails, its timer is brought forward for a runner.
            let continued = match shared.executes {
                true => {
                    let workflow = shared.definition_of(&record).await?;
                    stepwright_app::continue_in_background(&shared.engine, workflow, task.run).await
                }
                false => false,
            };
            if !continued {
                shared.store.wake_run(task.run, shared.now()).await?;
            }
        }
    }
    Ok(state)
}

/// A handler's failure as the step's error; its code must be a code.
fn handler_error(error: stepwright_api::task::TaskError) -> Result<StepError, ApiError> {
    let code = error.code.trim();
    if code.is_empty() || !code.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '.') {
        return Err(ApiError::new(
            axum::http::StatusCode::UNPROCESSABLE_ENTITY,
            "bad_request",
            format!("error code {code:?}: a code is lowercase letters, digits, `_` and `.`"),
        ));
    }
    Ok(StepError::new(ErrorCode::new(code), error.message).retryable(error.retryable))
}

/// `POST /v1/tasks/answers`: each answer as its own endpoint would take it, all at once (the
/// store's writer commits them together), each with its own result.
pub(crate) async fn answers(
    State(shared): State<Arc<Shared>>,
    who: Principal,
    headers: HeaderMap,
    Body(body): Body<TaskAnswers>,
) -> Result<Json<TaskAnswersTaken>, ApiError> {
    check_protocol(&headers)?;
    who.require(Role::Worker)?;
    if !(1..=1000).contains(&body.answers.len()) {
        return Err(ApiError::new(
            axum::http::StatusCode::UNPROCESSABLE_ENTITY,
            "bad_request",
            format!("`answers` holds 1 to 1000 answers, not {}", body.answers.len()),
        ));
    }
    let (shared, who) = (&*shared, &who);
    let taken = body.answers.into_iter().map(|item| async move {
        let answer = match (item.outcome, item.error) {
            (TaskOutcome::Complete, _) => Ok(TaskAnswer::Complete(item.output.unwrap_or(serde_json::Value::Null))),
            (TaskOutcome::Fail, Some(error)) => handler_error(error).map(TaskAnswer::Fail),
            (TaskOutcome::Fail, None) => Err(ApiError::new(
                axum::http::StatusCode::UNPROCESSABLE_ENTITY,
                "bad_request",
                "a `fail` answer needs its `error`",
            )),
            (TaskOutcome::Cancelled, _) => Ok(TaskAnswer::Cancelled),
            (TaskOutcome::Release, _) => Ok(TaskAnswer::Release),
        };
        let result = match answer {
            Ok(answer) => answer_one(shared, who, &item.id, item.lease, answer).await,
            Err(refused) => Err(refused),
        };
        match result {
            Ok(state) => TaskAnswerTaken { id: item.id, state: Some(status_of(state)), code: None, detail: None },
            Err(refused) => TaskAnswerTaken {
                id: item.id,
                state: None,
                code: Some(refused.problem.code),
                detail: Some(refused.problem.detail),
            },
        }
    });
    Ok(Json(TaskAnswersTaken { answers: futures_util::future::join_all(taken).await }))
}

/// `POST /v1/tasks/{id}/complete`.
pub(crate) async fn complete(
    State(shared): State<Arc<Shared>>,
    who: Principal,
    headers: HeaderMap,
    Path(id): Path<String>,
    Body(body): Body<CompleteTask>,
) -> Result<Json<TaskAnswered>, ApiError> {
    answer(&shared, &who, &headers, &id, body.lease, TaskAnswer::Complete(body.output)).await
}

/// `POST /v1/tasks/{id}/fail`.
pub(crate) async fn fail(
    State(shared): State<Arc<Shared>>,
    who: Principal,
    headers: HeaderMap,
    Path(id): Path<String>,
    Body(body): Body<FailTask>,
) -> Result<Json<TaskAnswered>, ApiError> {
    let error = handler_error(body.error)?;
    answer(&shared, &who, &headers, &id, body.lease, TaskAnswer::Fail(error)).await
}

/// `POST /v1/tasks/{id}/cancelled`.
pub(crate) async fn cancelled(
    State(shared): State<Arc<Shared>>,
    who: Principal,
    headers: HeaderMap,
    Path(id): Path<String>,
    Body(body): Body<TaskLeaseBody>,
) -> Result<Json<TaskAnswered>, ApiError> {
    answer(&shared, &who, &headers, &id, body.lease, TaskAnswer::Cancelled).await
}

/// `POST /v1/tasks/{id}/release`.
pub(crate) async fn release(
    State(shared): State<Arc<Shared>>,
    who: Principal,
    headers: HeaderMap,
    Path(id): Path<String>,
    Body(body): Body<TaskLeaseBody>,
) -> Result<Json<TaskAnswered>, ApiError> {
    answer(&shared, &who, &headers, &id, body.lease, TaskAnswer::Release).await
}

/// `POST /v1/tasks/{id}/defer`.
pub(crate) async fn defer(
    State(shared): State<Arc<Shared>>,
    who: Principal,
    headers: HeaderMap,
    Path(id): Path<String>,
    Body(body): Body<DeferTask>,
) -> Result<Json<TaskAnswered>, ApiError> {
    if !(1..=604_800_000).contains(&body.for_ms) {
        return Err(ApiError::new(
            axum::http::StatusCode::UNPROCESSABLE_ENTITY,
            "bad_request",
            "`for_ms` is between 1 and 604800000 (7 days)",
        ));
    }
    let lasts = Duration::from_millis(body.for_ms);
    answer(&shared, &who, &headers, &id, body.lease, TaskAnswer::Defer(lasts)).await
}

/// `POST /v1/tasks/{id}/chunks`: under the task's current lease, tokens go to the run's
/// live stream; progress and log lines are appended to the run's events (beside the
/// journal's writer, unfenced: events are not the journal). A chunk whose `seq` was taken
/// already is dropped.
pub(crate) async fn chunks(
    State(shared): State<Arc<Shared>>,
    who: Principal,
    headers: HeaderMap,
    Path(id): Path<String>,
    Body(body): Body<TaskChunks>,
) -> Result<Json<ChunksTaken>, ApiError> {
    check_protocol(&headers)?;
    who.require(Role::Worker)?;
    let store = tasks_of(&shared)?;
    let missing = || ApiError::not_found("not_found", format!("task {id} was not found"));
    let task = store.settle_task(&TaskId::new(&id), shared.now()).await?.ok_or_else(missing)?;
    if task.tenant.as_deref().unwrap_or_default() != who.namespace() {
        return Err(missing());
    }
    who.require_queue(&task.spec.queue)?;
    if task.state != TaskState::Claimed || task.lease_token != body.lease {
        return Err(ApiError::from(stepwright_core::StoreError::TaskLeaseLost {
            task: task.spec.id.clone(),
            token: body.lease,
        }));
    }
    if !shared.workers.take_chunk(&id, body.lease, body.seq) {
        return Ok(Json(ChunksTaken { accepted: 0 }));
    }
    let mut batch = stepwright_core::journal::JournalBatch::default();
    let record = shared.store.load_from(task.run, u64::MAX).await?.record;
    for item in &body.items {
        match item.kind {
            ChunkKind::Token => shared.feeds.token(task.run, &task.path, item.text.as_deref().unwrap_or_default()),
            kind => {
                let name = if kind == ChunkKind::Progress { "step.progress" } else { "step.log" };
                batch.events.push(stepwright_core::journal::EventRecord {
                    run: task.run,
                    path: task.path.clone(),
                    at: shared.now(),
                    tenant: record.caller.tenant.clone(),
                    user: record.caller.user.clone(),
                    kind: name.to_owned(),
                    data: serde_json::json!({ "task": id, "text": item.text, "data": item.data }),
                });
            }
        }
    }
    if !batch.events.is_empty() {
        shared.store.append(task.run, None, &mut batch).await?;
        shared.feeds.nudge(task.run);
    }
    Ok(Json(ChunksTaken { accepted: body.items.len() as u64 }))
}

/// `GET /v1/tasks`.
pub(crate) async fn list(
    State(shared): State<Arc<Shared>>,
    who: Principal,
    Params(query): Params<TaskQuery>,
) -> Result<Json<TaskList>, ApiError> {
    let run = match &query.run {
        Some(text) => {
            Some(super::parse_run(text).map_err(|_| ApiError::bad_request(format!("`run` {text:?} is not a run id")))?)
        }
        None => None,
    };
    let limit = query.limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(ApiError::bad_request("`limit` is between 1 and 1000"));
    }
    let filter = TaskFilter {
        tenant: Some(who.namespace().to_owned()),
        queue: query.queue,
        state: query.state.map(state_of),
        run,
        limit: limit as usize,
    };
    let tasks = tasks_of(&shared)?.list_tasks(&filter).await?;
    Ok(Json(TaskList {
        tasks: tasks
            .iter()
            .map(|t| TaskSummary {
                id: t.spec.id.to_string(),
                queue: t.spec.queue.clone(),
                handler: t.spec.handler.clone(),
                state: status_of(t.state),
                run_id: t.run.to_string(),
                step: t.path.to_string(),
                attempt: t.attempt,
                worker: t.worker.clone(),
                created_at: t.created_at.as_micros(),
                finished_at: t.finished_at.map(Timestamp::as_micros),
                recompute: t.spec.recompute,
            })
            .collect(),
    }))
}

/// `GET /v1/queues`: every queue with waiting or held tasks or a worker polling it.
pub(crate) async fn queues(State(shared): State<Arc<Shared>>, who: Principal) -> Result<Json<QueueList>, ApiError> {
    let store = tasks_of(&shared)?;
    let mut queues: BTreeMap<String, QueueView> = BTreeMap::new();
    let view =
        |queue: &str| QueueView { queue: queue.to_owned(), pending: 0, claimed: 0, pollers: 0, handlers: Vec::new() };
    for state in [TaskState::Pending, TaskState::Claimed] {
        let filter = TaskFilter {
            tenant: Some(who.namespace().to_owned()),
            state: Some(state),
            limit: 100_000,
            ..TaskFilter::default()
        };
        for task in store.list_tasks(&filter).await? {
            let entry = queues.entry(task.spec.queue.clone()).or_insert_with(|| view(&task.spec.queue));
            if state == TaskState::Pending { entry.pending += 1 } else { entry.claimed += 1 }
        }
    }
    for worker in shared.workers.views(who.namespace(), shared.now()) {
        let entry = queues.entry(worker.queue.clone()).or_insert_with(|| view(&worker.queue));
        if worker.polling {
            entry.pollers += 1;
        }
        for handler in worker.handlers {
            if !entry.handlers.contains(&handler) {
                entry.handlers.push(handler);
            }
        }
    }
    for queue in queues.values_mut() {
        queue.handlers.sort();
    }
    Ok(Json(QueueList { queues: queues.into_values().collect() }))
}

/// `GET /v1/workers`.
pub(crate) async fn workers(State(shared): State<Arc<Shared>>, who: Principal) -> Result<Json<WorkerList>, ApiError> {
    Ok(Json(WorkerList { workers: shared.workers.views(who.namespace(), shared.now()) }))
}
