//! `POST /v1/runs`, `GET /v1/runs`, `GET /v1/runs/{id}` and the run actions: cancel,
//! resume, messages.

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde_json::json;
use stepwright_api::run::{
    Artifact, CancelOutcome, CancelRun, Cancelled, ListRuns, ModelBinding, ResumeRun, RunDefinition, RunMessage,
    RunPage, RunSummary, StartRun, Stored,
};
use stepwright_app::RunDetails;
use stepwright_app::wire::{kernel_run_status, run_status};
use stepwright_app::{IdempotentStart, Mail};
use stepwright_core::store::RunFilter;
use stepwright_core::{Entropy, RunId, StartOptions, Timestamp};

use super::workflows::not_registered;
use super::{Body, OptionalBody, Params, audit, parse_run, run_in_namespace};
use crate::keys::{Principal, Role};
use crate::problem::ApiError;
use crate::state::Shared;

/// The longest `wait_seconds` honoured.
const MAX_WAIT: Duration = Duration::from_secs(60);

/// `POST /v1/runs` (operator): `201` and the run — finished, if it finished within
/// `wait_seconds`; `202` while it is still running; `200` and the first run for an
/// idempotency key used before.
pub(crate) async fn start(
    State(shared): State<Arc<Shared>>,
    who: Principal,
    headers: axum::http::HeaderMap,
    Body(body): Body<StartRun>,
) -> Result<(StatusCode, Json<RunDetails>), ApiError> {
    who.require(Role::Operator)?;
    // A malformed traceparent is ignored (a new trace begins), as W3C Trace Context says.
    let traceparent = headers.get("traceparent").and_then(|v| v.to_str().ok()).and_then(|v| v.parse().ok());
    let wait = wait_for(body.wait_seconds)?;
    let registered = shared
        .registered(who.namespace(), &body.workflow, body.version)
        .await?
        .ok_or_else(|| not_registered(&body.workflow, body.version))?;
    let workflow = shared.workflow(&registered).await?;
    // Refused input claims no idempotency key: the same request fixed is a first one.
    stepwright_core::Engine::check_input(&workflow, &body.input)?;
    stepwright_core::journal::check_tags(&body.tags).map_err(ApiError::bad_request)?;
    let concurrency = match body.concurrency {
        Some(group) if group.key.is_empty() || group.limit == 0 => {
            return Err(ApiError::bad_request("concurrency needs a non-empty key and a limit of at least 1"));
        }
        group => group.map(|g| stepwright_core::Concurrency { key: g.key, limit: g.limit }),
    };
    let now = shared.now();
    let run = RunId::from_parts(now, stepwright_core::SystemEntropy::new().bytes10());
    if let Some(key) = &body.idempotency_key {
        match stepwright_app::claim_start(shared.store.as_ref(), who.namespace(), key, run, now).await? {
            IdempotentStart::Fresh => {}
            IdempotentStart::First(first) => {
                run_in_namespace(&shared, &who, first).await?;
                return Ok((
                    StatusCode::OK,
                    Json(stepwright_app::wait_until_stopped(&shared.engine, first, wait).await?),
                ));
            }
            IdempotentStart::Starting(first) => {
                return Err(ApiError::new(
                    StatusCode::CONFLICT,
                    "idempotency_in_progress",
                    format!("a request with idempotency key {key:?} is starting run {first}; ask again shortly"),
                ));
            }
        }
    }
    let options = StartOptions {
        caller: who.caller(),
        run_id: Some(run),
        priority: body.priority,
        concurrency,
        traceparent,
        tags: body.tags,
    };
    let details =
        stepwright_app::start_and_wait(&shared.engine, &workflow, body.input, options, wait, shared.executes).await?;
    let status = if !details.status.has_stopped() { StatusCode::ACCEPTED } else { StatusCode::CREATED };
    Ok((status, Json(details)))
}

pub(crate) fn wait_for(seconds: Option<f64>) -> Result<Duration, ApiError> {
    match seconds {
        None => Ok(Duration::ZERO),
        Some(s) if (0.0..=60.0).contains(&s) => Ok(Duration::from_secs_f64(s).min(MAX_WAIT)),
        Some(s) => Err(ApiError::bad_request(format!("wait_seconds must be a number from 0 to 60, not {s}"))),
    }
}

/// `GET /v1/runs`: the namespace's runs, newest first, paged.
pub(crate) async fn list(
    State(shared): State<Arc<Shared>>,
    who: Principal,
    Params(query): Params<ListRuns>,
) -> Result<Json<RunPage>, ApiError> {
    let limit = query.limit.unwrap_or(50);
    if !(1..=500).contains(&limit) {
        return Err(ApiError::bad_request("limit must be from 1 to 500"));
    }
    if query.input_contains.as_ref().is_some_and(|text| text.is_empty() || text.len() > 200) {
        return Err(ApiError::bad_request("input_contains must be 1 to 200 characters"));
    }
    if query.started_by.as_ref().is_some_and(|who| who.is_empty() || who.len() > 200) {
        return Err(ApiError::bad_request("started_by must be 1 to 200 characters"));
    }
    if let Some(tag) = &query.tag {
        stepwright_core::journal::check_tag(tag).map_err(|why| ApiError::bad_request(format!("tag: {why}")))?;
    }
    let parent = match &query.parent {
        Some(parent) => Some(parent.parse::<RunId>().map_err(|_| ApiError::bad_request("parent is not a run id"))?),
        None => None,
    };
    let before = match &query.cursor {
        Some(cursor) => Some(cursor.parse::<RunId>().map_err(|_| ApiError::bad_request("cursor is not one we gave"))?),
        None => None,
    };
    let filter = RunFilter {
        status: query.status.map(kernel_run_status),
        workflow: query.workflow,
        tenant: Some(who.namespace().to_owned()),
        limit: Some(limit + 1),
        before,
        headers_only: true,
        updated_since: None,
        created_from: query.created_after.map(Timestamp::from_micros),
        created_until: query.created_before.map(Timestamp::from_micros),
        input_contains: query.input_contains,
        parent,
        concurrency_key: None,
        started_by: query.started_by,
        tag: query.tag,
    };
    let mut runs = shared.store.list_runs(filter).await?;
    let more = runs.len() > limit;
    runs.truncate(limit);
    let next_cursor = more.then(|| runs.last().map(|run| run.id.to_string())).flatten();
    let mut usage = match query.usage {
        Some(true) => {
            let ids: Vec<RunId> = runs.iter().map(|run| run.id).collect();
            stepwright_app::usage_of(shared.store.as_ref(), &ids).await?.into_iter().map(Some).collect()
        }
        _ => vec![None; runs.len()],
    }
    .into_iter();
    // What each suspended run of the page waits for (a page holds at most 500 runs, and only
    // the suspended ones are read).
    let mut waits = Vec::with_capacity(runs.len());
    for run in &runs {
        waits.push(match run.status {
            stepwright_core::RunStatus::Suspended => stepwright_app::run_waits_for(&shared.store.load(run.id).await?),
            _ => None,
        });
    }
    let mut waits = waits.into_iter();
    let runs = runs
        .into_iter()
        .map(|run| {
            let lease = run.lease.filter(|_| !run.status.is_terminal());
            RunSummary {
                run_id: run.id.to_string(),
                workflow: run.workflow,
                status: run_status(run.status),
                created_at: run.created_at.as_micros(),
                updated_at: run.updated_at.as_micros(),
                lease_expires_at: lease.as_ref().map(|lease| lease.expires_at.as_micros()),
                owner: lease.map(|lease| lease.owner),
                parent_run_id: run.parent.map(|parent| parent.run.to_string()),
                started_by: stepwright_app::wire::started_by(&run.caller),
                tags: run.tags,
                waiting_for: waits.next().flatten(),
                usage: usage.next().flatten(),
            }
        })
        .collect();
    Ok(Json(RunPage { runs, next_cursor }))
}

/// `GET /v1/runs/{id}`: the `runs show --json` shape.
pub(crate) async fn show(
    State(shared): State<Arc<Shared>>,
    who: Principal,
    Path(id): Path<String>,
) -> Result<Json<RunDetails>, ApiError> {
    let run = parse_run(&id)?;
    run_in_namespace(&shared, &who, run).await?;
    let mut details = stepwright_app::run_details(&shared.engine, run).await?;
    // Who polls is known here: a task nobody can take says so.
    for task in &mut details.tasks {
        if task.state == stepwright_api::task::TaskStatus::Pending
            && !shared.workers.offers(who.namespace(), &task.queue, &task.handler, shared.now())
        {
            task.reason = format!(
                "no worker polls queue `{}` for `{}` (none heard from in the last ten minutes)",
                task.queue, task.handler
            );
        }
    }
    stepwright_app::say_what_steps_wait_for(&mut details);
    Ok(Json(details))
}

/// `GET /v1/runs/{id}/definition`: the structure of the definition the run is pinned to.
pub(crate) async fn definition(
    State(shared): State<Arc<Shared>>,
    who: Principal,
    Path(id): Path<String>,
) -> Result<Json<RunDefinition>, ApiError> {
    let run = parse_run(&id)?;
    let record = run_in_namespace(&shared, &who, run).await?;
    let workflow = shared.definition_of(&record).await?;
    Ok(Json(RunDefinition {
        run_id: run.to_string(),
        hash: record.definition_hash.to_hex(),
        graph: stepwright_app::wire::outline(&workflow),
        models: stepwright_app::model_bindings(&workflow)
            .into_iter()
            .map(|(name, model)| ModelBinding { name, model })
            .collect(),
    }))
}

/// `GET /v1/runs/{id}/artifacts/{hash}`: an artifact of the run; `404` if the run captured
/// none with this hash, or kept only its hash (capture mode `hash`).
pub(crate) async fn artifact(
    State(shared): State<Arc<Shared>>,
    who: Principal,
    Path((id, hash)): Path<(String, String)>,
) -> Result<Json<Artifact>, ApiError> {
    let run = parse_run(&id)?;
    run_in_namespace(&shared, &who, run).await?;
    let missing = || ApiError::not_found("not_found", format!("run {run} has no stored artifact {hash}"));
    let loaded = shared.store.load(run).await?;
    let (path, kind, content_hash) = loaded
        .entries
        .iter()
        .find_map(|entry| match &entry.record {
            stepwright_core::Record::Artifact { kind, hash: content, stored: true } if content.to_hex() == hash => {
                Some((entry.path.as_str().to_owned(), kind.clone(), *content))
            }
            _ => None,
        })
        .ok_or_else(missing)?;
    // A small artifact equal to a step's output is kept inline with it (and loaded with the
    // journal); any other is a blob of its own.
    let content = match loaded.blobs.get(&content_hash) {
        Some(content) => content.clone(),
        None => shared.store.blob(content_hash).await?.ok_or_else(missing)?,
    };
    Ok(Json(Artifact { hash, kind, path, content: (*content).clone() }))
}

/// `POST /v1/runs/{id}/cancel` (operator): as `stepwright cancel`; reaches a run executing
/// in any process.
pub(crate) async fn cancel(
    State(shared): State<Arc<Shared>>,
    who: Principal,
    Path(id): Path<String>,
    OptionalBody(body): OptionalBody<CancelRun>,
) -> Result<Json<Cancelled>, ApiError> {
    who.require(Role::Operator)?;
    let run = parse_run(&id)?;
    run_in_namespace(&shared, &who, run).await?;
    let reason = body.reason.unwrap_or_else(|| "cancelled over the API".into());
    let outcome = shared.engine.cancel_by(run, &reason, Some(&who.key.user)).await?;
    // Step workers running the run's tasks hear of it at once (their parked claims).
    shared.workers.announce();
    audit(&shared, &who, "run.cancelled", run.to_string(), json!({ "reason": reason })).await?;
    let (outcome, status, executed_by) = match outcome {
        stepwright_core::CancelOutcome::Finished(status) => (CancelOutcome::Finished, run_status(status), None),
        stepwright_core::CancelOutcome::Cancelled => {
            (CancelOutcome::Cancelled, stepwright_api::RunStatus::Cancelled, None)
        }
        stepwright_core::CancelOutcome::Requested { owner, .. } => {
            (CancelOutcome::Requested, stepwright_api::RunStatus::Running, Some(owner))
        }
    };
    Ok(Json(Cancelled { run_id: run.to_string(), outcome, status, executed_by }))
}

/// `POST /v1/runs/{id}/resume` (operator): continues a run that is pending, suspended, or
/// was left running by a process that is gone (`409` if a live process executes it).
pub(crate) async fn resume(
    State(shared): State<Arc<Shared>>,
    who: Principal,
    Path(id): Path<String>,
    OptionalBody(body): OptionalBody<ResumeRun>,
) -> Result<(StatusCode, Json<RunDetails>), ApiError> {
    who.require(Role::Operator)?;
    let run = parse_run(&id)?;
    let record = run_in_namespace(&shared, &who, run).await?;
    let wait = wait_for(body.wait_seconds)?;
    if record.status.is_terminal() {
        // Nothing to continue: how it ended, as the command line's `resume` answers.
        return Ok((StatusCode::OK, Json(stepwright_app::run_details(&shared.engine, run).await?)));
    }
    let workflow = shared.definition_of(&record).await?;
    let details = stepwright_app::resume_and_wait(&shared.engine, workflow, run, wait).await?;
    let status = if details.status.has_stopped() { StatusCode::OK } else { StatusCode::ACCEPTED };
    Ok((status, Json(details)))
}

/// `POST /v1/runs/{id}/messages` (operator): answered once stored.
pub(crate) async fn message(
    State(shared): State<Arc<Shared>>,
    who: Principal,
    Path(id): Path<String>,
    Body(body): Body<RunMessage>,
) -> Result<(StatusCode, Json<Stored>), ApiError> {
    who.require(Role::Operator)?;
    let run = parse_run(&id)?;
    run_in_namespace(&shared, &who, run).await?;
    let mail = match body {
        RunMessage { inbox: Some(inbox), message: Some(message), wake: None } => Mail::Inbox { inbox, message },
        RunMessage { inbox: None, message: None, wake: Some(channel) } => Mail::Wake { channel },
        _ => return Err(ApiError::bad_request("send either {inbox, message} or {wake}")),
    };
    stepwright_app::send_mail(&shared.engine, &shared.bindings, run, mail).await?;
    Ok((StatusCode::ACCEPTED, Json(Stored { run_id: run.to_string(), stored: true })))
}
