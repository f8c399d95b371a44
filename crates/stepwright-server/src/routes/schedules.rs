//! `/v1/schedules`: a registered workflow's `schedules:` kept and driven through the API,
//! in the key's namespace — create (from the workflow's file), list, show (next fires, ticks
//! waiting, last ticks), pause, resume, trigger, delete. The server's worker (and every
//! other worker on the store) starts their runs, each tick once.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use stepwright_core::store::schedule::{ScheduleKey, ScheduleRecord, TickOutcome, TickRecord};
use stepwright_schedule::{ScheduleError, Scheduler};

use super::Body;
use super::runs::audit;
use crate::keys::{Principal, Role};
use crate::problem::ApiError;
use crate::state::{Shared, registered_source};

/// The schedules of a registered workflow to keep.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateSchedules {
    /// The registered workflow whose file declares them (`schedules:`).
    #[schemars(length(min = 1))]
    pub workflow: String,
    /// Its version (default: the newest).
    #[serde(default, deserialize_with = "super::whole::optional")]
    #[schemars(range(min = 1))]
    pub version: Option<u32>,
    /// Only these schedules of the file (default: all).
    #[serde(default)]
    pub only: Vec<String>,
    /// Keep them paused: their ticks are recorded as skipped until resumed.
    #[serde(default)]
    pub paused: bool,
}

/// A schedule as the API shows it.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct ScheduleView {
    /// Its workflow.
    pub workflow: String,
    /// Its name in the workflow's file.
    pub schedule: String,
    /// What it says: cadence, bounds, jitter, input, overlap, catch-up window.
    pub spec: Value,
    /// Paused: its ticks start nothing.
    pub paused: bool,
    /// When its next tick fires (µs since the epoch; none past its end).
    pub next_fire_at: Option<i64>,
    /// When it was created (µs since the epoch).
    pub created_at: i64,
}

/// A schedule with its next fires and its recent ticks.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct ScheduleDetails {
    /// The schedule.
    #[serde(flatten)]
    pub schedule: ScheduleView,
    /// Its next ticks (µs since the epoch, and the reading in its zone).
    pub next_fires: Vec<TickView>,
    /// Ticks waiting for the last run to end (`buffer_one`, `buffer_all`).
    pub waiting: Vec<TickView>,
    /// The run of its last started tick.
    pub last_run: Option<String>,
    /// Its last ticks, newest first: the run each started, or why it started none.
    pub ticks: Vec<TickView>,
}

/// A tick.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct TickView {
    /// Its time (µs since the epoch).
    pub at: i64,
    /// Its reading in the schedule's zone.
    pub local: String,
    /// The run it started.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// Why it started none (`overlap`, `buffer_full`, `outside_catchup_window`, `paused`,
    /// `dst_gap`, `start_failed: why`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
}

/// A past range of a schedule's ticks to start.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct BackfillRequest {
    /// After this time (RFC 3339).
    #[schemars(extend("format" = "date-time"))]
    pub from: String,
    /// Up to this time, inclusive (RFC 3339); not after the schedule's last decided tick.
    #[schemars(extend("format" = "date-time"))]
    pub to: String,
    /// At most this many runs a second (default 10).
    #[serde(default, deserialize_with = "super::whole::optional")]
    #[schemars(range(min = 1, max = 100))]
    pub rate: Option<u32>,
}

/// What a backfill starts.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct BackfillAccepted {
    /// How many ticks of the range it starts a run for (in the background, at the rate;
    /// each shows in the schedule's ticks as it starts).
    pub ticks: usize,
    /// How many ticks of the range had started a run already.
    pub already: usize,
}

/// What `trigger` started.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Triggered {
    /// The run.
    pub run_id: String,
    /// Its tick (µs since the epoch).
    pub tick_at: i64,
}

impl From<&TickRecord> for TickView {
    fn from(tick: &TickRecord) -> Self {
        let (run_id, skipped) = match &tick.outcome {
            TickOutcome::Started { run } => (Some(run.to_string()), None),
            TickOutcome::Skipped { reason } => (None, Some(reason.clone())),
        };
        Self { at: tick.at.as_micros(), local: tick.local.clone(), run_id, skipped }
    }
}

fn view(record: &ScheduleRecord) -> ScheduleView {
    let schedule = record.key.name.split_once('/').map_or(record.key.name.as_str(), |(_, name)| name);
    ScheduleView {
        workflow: record.workflow.clone(),
        schedule: schedule.to_owned(),
        spec: record.spec.clone(),
        paused: record.paused,
        // The next tick that starts a run (a skipped daylight-saving tick is due, not fired).
        next_fire_at: stepwright_schedule::next_fire(
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

/// What a registered workflow's file keeps: its `schedules:` or its `triggers:`.
#[derive(Clone, Copy)]
pub(crate) enum Section {
    Schedules,
    Triggers,
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
) -> Result<(stepwright_core::Workflow, stepwright_flow::Loaded), ApiError> {
    let registered = shared
        .registered(who.namespace(), name, version)
        .await?
        .ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, "not_found", format!("no registered workflow {name:?}")))?;
    let workflow = shared.workflow(&registered).await?;
    let source = registered_source(&registered);
    let mut options = shared.bindings.load_options();
    options.files = Some(Arc::new(registered.files.clone()));
    let loaded = stepwright_flow::load_source_with(&source.source, &source.name, &options)
        .map_err(|e| ApiError::from(stepwright_app::AppError::Load(e)))?;
    let (declared, kind): (Vec<&str>, &str) = match section {
        Section::Schedules => (loaded.schedules.iter().map(|s| s.name.as_str()).collect(), "schedule"),
        Section::Triggers => (loaded.triggers.iter().map(|t| t.name.as_str()).collect(), "trigger"),
    };
    // A well-formed request that the registered workflow does not fit: a conflict with
    // what is registered, not a malformed request.
    let conflict = |detail: String| ApiError::new(axum::http::StatusCode::CONFLICT, "not_declared", detail);
    if declared.is_empty() {
        return Err(conflict(format!("workflow {name:?} declares no `{kind}s:`")));
    }
    if let Some(unknown) = only.iter().find(|wanted| !declared.contains(&wanted.as_str())) {
        return Err(conflict(format!(
            "only: workflow {name:?} declares no {kind} {unknown:?} (it has: {})",
            declared.join(", ")
        )));
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
    let state = stepwright_schedule::scheduler::state_of(&record).map_err(ApiError::from)?;
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
        ticks: ticks.iter().map(TickView::from).collect(),
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
        stepwright_schedule::parse_instant(text)
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
