//! `/v1/schedules`: a registered workflow's `schedules:` kept and driven through the API,
//! in the key's namespace — create (from the workflow's file), list, show (next fires, ticks
//! waiting, last ticks), pause, resume, trigger, delete. The server's worker (and every
//! other worker on the store) starts their runs, each tick once.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde_json::json;
use stepwright_api::schedule::{
    BackfillAccepted, BackfillRequest, CreateSchedules, ScheduleDetails, ScheduleView, TickView, Triggered,
};
use stepwright_app::{NotDeclared, ScheduleError, Scheduler, Section};
use stepwright_core::store::schedule::{ScheduleKey, ScheduleRecord, TickOutcome, TickRecord};

use super::Body;
use super::audit;
use crate::keys::{Principal, Role};
use crate::problem::ApiError;
use crate::state::{Shared, registered_source};

/// A tick as the API shows it.
pub(crate) fn tick_view(tick: &TickRecord) -> TickView {
    let (run_id, skipped) = match &tick.outcome {
        TickOutcome::Started { run } => (Some(run.to_string()), None),
        TickOutcome::Skipped { reason } => (None, Some(reason.clone())),
    };
    TickView { at: tick.at.as_micros(), local: tick.local.clone(), run_id, skipped }
}

fn view(record: &ScheduleRecord) -> ScheduleView {
    let schedule = record.key.name.split_once('/').map_or(record.key.name.as_str(), |(_, name)| name);
    ScheduleView {
        workflow: record.workflow.clone(),
        schedule: schedule.to_owned(),
        spec: record.spec.clone(),
        paused: record.paused,
        // The next tick that starts a run (a skipped daylight-saving tick is due, not fired).
        next_fire_at: stepwright_app::next_fire(
            record,
            stepwright_core::Clock::now(&stepwright_core::TokioClock::new()),
        )
        .map(stepwright_core::Timestamp::as_micros),
        created_at: record.created_at.as_micros(),
    }
}

pub(crate) fn key(who: &Principal, workflow: &str, schedule: &str) -> ScheduleKey {
    stepwright_app::schedule_key(Some(who.namespace()), workflow, schedule)
}

pub(crate) fn scheduler(shared: &Shared) -> Scheduler {
    stepwright_app::scheduler(shared.engine.clone(), shared.store.clone(), shared.bindings.clone())
}

impl From<ScheduleError> for ApiError {
    fn from(error: ScheduleError) -> Self {
        match error {
            ScheduleError::NotFound(key) => {
                Self::new(StatusCode::NOT_FOUND, "not_found", format!("no schedule {}", key.name))
            }
            ScheduleError::Store(error) => error.into(),
            error if error.fault() == stepwright_core::Fault::Caller => Self::bad_request(error.to_string()),
            error => Self::internal(error.to_string()),
        }
    }
}

/// A registered workflow and its file loaded again to read what it keeps (a `Section`),
/// with `only` checked against the names the section declares; its source kept in the
/// store's definitions, so any worker rebuilds it.
pub(crate) async fn load_to_keep(
    shared: &Shared,
    who: &Principal,
    name: &str,
    version: Option<u32>,
    only: &[String],
    section: Section,
) -> Result<(stepwright_core::Workflow, stepwright_app::Loaded), ApiError> {
    let registered = shared
        .registered(who.namespace(), name, version)
        .await?
        .ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, "not_found", format!("no registered workflow {name:?}")))?;
    let workflow = shared.workflow(&registered).await?;
    let source = registered_source(&registered);
    let loaded = shared.bindings.load_source(&source.source, &source.name, &registered.files)?;
    // A well-formed request that the registered workflow does not fit: a conflict with
    // what is registered, not a malformed request.
    let conflict = |detail: String| ApiError::new(axum::http::StatusCode::CONFLICT, "not_declared", detail);
    match stepwright_app::check_declared(&loaded, section, only) {
        Ok(()) => {}
        Err(NotDeclared::Empty { kind }) => return Err(conflict(format!("workflow {name:?} declares no `{kind}s:`"))),
        Err(NotDeclared::Unknown { kind, name: unknown, declared }) => {
            return Err(conflict(format!(
                "only: workflow {name:?} declares no {kind} {unknown:?} (it has: {})",
                declared.join(", ")
            )));
        }
    }
    shared.store.put_definition(registered.hash, source).await?;
    Ok((workflow, loaded))
}

/// `POST /v1/schedules` (operator): keeps a registered workflow's schedules.
pub(crate) async fn create(
    State(shared): State<Arc<Shared>>,
    who: Principal,
    Body(body): Body<CreateSchedules>,
) -> Result<(StatusCode, Json<Vec<ScheduleView>>), ApiError> {
    who.require(Role::Operator)?;
    let (workflow, loaded) =
        load_to_keep(&shared, &who, &body.workflow, body.version, &body.only, Section::Schedules).await?;
    let kept = stepwright_app::create_schedules(
        &scheduler(&shared),
        Some(who.namespace()),
        &workflow,
        &loaded.schedules,
        &body.only,
        body.paused,
    )
    .await
    .map_err(ApiError::from)?;
    for record in &kept {
        audit(&shared, &who, "schedule.created", record.key.name.clone(), json!({ "paused": record.paused })).await?;
    }
    Ok((StatusCode::CREATED, Json(kept.iter().map(view).collect())))
}

/// `GET /v1/schedules` (viewer): the namespace's schedules, by name.
pub(crate) async fn list(
    State(shared): State<Arc<Shared>>,
    who: Principal,
) -> Result<Json<Vec<ScheduleView>>, ApiError> {
    who.require(Role::Viewer)?;
    let records = shared.store.schedules(Some(who.namespace())).await?;
    Ok(Json(records.iter().filter(|r| r.on_event.is_none()).map(view).collect()))
}

/// `GET /v1/schedules/{workflow}/{schedule}` (viewer).
pub(crate) async fn show(
    State(shared): State<Arc<Shared>>,
    who: Principal,
    Path((workflow, schedule)): Path<(String, String)>,
) -> Result<Json<ScheduleDetails>, ApiError> {
    who.require(Role::Viewer)?;
    let key = key(&who, &workflow, &schedule);
    let record = shared
        .store
        .schedule(&key)
        .await?
        .filter(|r| r.on_event.is_none())
        .ok_or_else(|| ApiError::from(ScheduleError::NotFound(key.clone())))?;
    let next_fires = scheduler(&shared).next_ticks(&key, 5).await.map_err(ApiError::from)?;
    let state = stepwright_app::schedule_state_of(&record).map_err(ApiError::from)?;
    let ticks = shared.store.ticks(&key, 20).await?;
    Ok(Json(ScheduleDetails {
        schedule: view(&record),
        next_fires: next_fires
            .iter()
            .map(|t| TickView { at: t.at.as_micros(), local: t.local.clone(), run_id: None, skipped: None })
            .collect(),
        waiting: state
            .waiting
            .iter()
            .map(|w| TickView { at: w.at.as_micros(), local: w.local.clone(), run_id: None, skipped: None })
            .collect(),
        last_run: state.last_run.map(|run| run.to_string()),
        ticks: ticks.iter().map(tick_view).collect(),
    }))
}

/// `POST /v1/schedules/{workflow}/{schedule}/pause` (operator).
pub(crate) async fn pause(
    State(shared): State<Arc<Shared>>,
    who: Principal,
    Path((workflow, schedule)): Path<(String, String)>,
) -> Result<Json<ScheduleView>, ApiError> {
    set_paused(&shared, &who, &workflow, &schedule, true).await
}

/// `POST /v1/schedules/{workflow}/{schedule}/resume` (operator).
pub(crate) async fn resume(
    State(shared): State<Arc<Shared>>,
    who: Principal,
    Path((workflow, schedule)): Path<(String, String)>,
) -> Result<Json<ScheduleView>, ApiError> {
    set_paused(&shared, &who, &workflow, &schedule, false).await
}

async fn set_paused(
    shared: &Shared,
    who: &Principal,
    workflow: &str,
    schedule: &str,
    paused: bool,
) -> Result<Json<ScheduleView>, ApiError> {
    who.require(Role::Operator)?;
    let key = key(who, workflow, schedule);
    if scheduler(shared).set_paused(&key, paused).await.map_err(ApiError::from)? {
        let action = if paused { "schedule.paused" } else { "schedule.resumed" };
        audit(shared, who, action, key.name.clone(), json!({})).await?;
    }
    let record =
        shared.store.schedule(&key).await?.ok_or_else(|| ApiError::from(ScheduleError::NotFound(key.clone())))?;
    Ok(Json(view(&record)))
}

/// `POST /v1/schedules/{workflow}/{schedule}/trigger` (operator): a run now.
pub(crate) async fn trigger(
    State(shared): State<Arc<Shared>>,
    who: Principal,
    Path((workflow, schedule)): Path<(String, String)>,
) -> Result<(StatusCode, Json<Triggered>), ApiError> {
    who.require(Role::Operator)?;
    let key = key(&who, &workflow, &schedule);
    let (at, run) = scheduler(&shared).trigger(&key).await.map_err(ApiError::from)?;
    audit(&shared, &who, "schedule.triggered", key.name.clone(), json!({ "run_id": run })).await?;
    Ok((StatusCode::CREATED, Json(Triggered { run_id: run.to_string(), tick_at: at.as_micros() })))
}

/// `DELETE /v1/schedules/{workflow}/{schedule}` (operator): the schedule and its tick
/// records; its runs stay.
pub(crate) async fn delete(
    State(shared): State<Arc<Shared>>,
    who: Principal,
    Path((workflow, schedule)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    who.require(Role::Operator)?;
    let key = key(&who, &workflow, &schedule);
    if !shared.store.delete_schedule(&key).await? {
        return Err(ApiError::from(ScheduleError::NotFound(key)));
    }
    audit(&shared, &who, "schedule.deleted", key.name.clone(), json!({})).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /v1/schedules/{workflow}/{schedule}/backfill` (operator): starts, in the
/// background and at the rate asked, a run for every tick of a past range that started
/// none (before the schedule existed, or skipped: an outage, a pause). A second backfill of
/// the range starts nothing; one cut short by a restart is asked again.
pub(crate) async fn backfill(
    State(shared): State<Arc<Shared>>,
    who: Principal,
    Path((workflow, schedule)): Path<(String, String)>,
    Body(body): Body<BackfillRequest>,
) -> Result<(StatusCode, Json<BackfillAccepted>), ApiError> {
    who.require(Role::Operator)?;
    let instant = |text: &str, what: &str| {
        stepwright_app::parse_instant(text)
            .ok_or_else(|| ApiError::bad_request(format!("{what} {text:?} is not an RFC 3339 time")))
    };
    let (from, to) = (instant(&body.from, "from")?, instant(&body.to, "to")?);
    let rate = match body.rate {
        None => 10,
        Some(rate @ 1..=100) => rate,
        Some(rate) => return Err(ApiError::bad_request(format!("rate must be 1 to 100 a second, not {rate}"))),
    };
    let key = key(&who, &workflow, &schedule);
    let scheduler = scheduler(&shared);
    let plan = scheduler.backfill_plan(&key, from, to).await?;
    let accepted = BackfillAccepted { ticks: plan.ticks.len(), already: plan.already };
    audit(
        &shared,
        &who,
        "schedule.backfilled",
        key.name.clone(),
        json!({ "from": body.from, "to": body.to, "ticks": accepted.ticks }),
    )
    .await?;
    tokio::spawn(async move {
        if let Err(error) = scheduler.backfill(&key, plan, rate, |_, _| {}).await {
            tracing::warn!(schedule = %key, %error, "a backfill stopped");
        }
    });
    Ok((StatusCode::ACCEPTED, Json(accepted)))
}
