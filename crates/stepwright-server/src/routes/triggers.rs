//! `/v1/events` and `/v1/triggers` (DESIGN §16): events stored in the key's namespace before
//! anything reads them, each with its history (what every trigger did with it); and a
//! registered workflow's `triggers:` kept and driven through the API. The server's worker
//! (and every other worker on the store) starts their runs, each event once.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde_json::json;
use stepwright_api::trigger::{
    CreateTriggers, EventDetails, EventSent, EventView, ListEvents, SendEvent, TriggerDetails, TriggerView,
};
use stepwright_app::{ScheduleError, Section, TriggerState, event_view, fire_view};
use stepwright_core::store::event::{EventQuery, NewEvent};
use stepwright_core::store::schedule::{ScheduleKey, ScheduleRecord};

use super::audit;
use super::schedules::{key, load_to_keep, scheduler};
use super::{Body, Params};
use crate::keys::{Principal, Role};
use crate::problem::ApiError;
use crate::state::Shared;

fn trigger_view(record: &ScheduleRecord) -> TriggerView {
    let trigger = record.key.name.split_once('/').map_or(record.key.name.as_str(), |(_, name)| name);
    TriggerView {
        workflow: record.workflow.clone(),
        trigger: trigger.to_owned(),
        spec: record.spec.clone(),
        paused: record.paused,
        created_at: record.created_at.as_micros(),
    }
}

fn not_found(key: &ScheduleKey) -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "not_found", format!("no trigger {}", key.name))
}

async fn trigger_record(shared: &Shared, key: &ScheduleKey) -> Result<ScheduleRecord, ApiError> {
    shared.store.schedule(key).await?.filter(|record| record.on_event.is_some()).ok_or_else(|| not_found(key))
}

/// `POST /v1/events` (operator): stores an event in the namespace; triggers and waits take
/// it from the store.
pub(crate) async fn send(
    State(shared): State<Arc<Shared>>,
    who: Principal,
    Body(body): Body<SendEvent>,
) -> Result<(StatusCode, Json<EventSent>), ApiError> {
    who.require(Role::Operator)?;
    let event = NewEvent {
        tenant: Some(who.namespace().to_owned()),
        name: body.name,
        payload: body.payload,
        idempotency_key: body.idempotency_key,
        at: shared.engine.clock().now(),
    };
    stepwright_core::store::event::check_new_event(&event).map_err(|e| ApiError::bad_request(e.to_string()))?;
    let appended = shared.store.append_event(event).await?;
    let status = if appended.created { StatusCode::CREATED } else { StatusCode::OK };
    if appended.created {
        // The scheduler of this process looks at once (others at their next poll).
        shared.wake_scheduler();
    }
    Ok((status, Json(EventSent { event: event_view(&appended.event), created: appended.created })))
}

/// `GET /v1/events` (viewer): the namespace's events, newest first.
pub(crate) async fn list(
    State(shared): State<Arc<Shared>>,
    who: Principal,
    Params(query): Params<ListEvents>,
) -> Result<Json<Vec<EventView>>, ApiError> {
    who.require(Role::Viewer)?;
    let limit = match query.limit {
        None => 50,
        Some(limit @ 1..=500) => limit,
        Some(limit) => return Err(ApiError::bad_request(format!("limit must be 1 to 500, not {limit}"))),
    };
    if let Some(name) = query.name.as_deref().filter(|name| !stepwright_core::store::event::is_event_name(name)) {
        return Err(ApiError::bad_request(format!(
            "name {name:?} is not an event's name (1 to 255 printable characters)"
        )));
    }
    if query.before == Some(0) {
        return Err(ApiError::bad_request("before must be 1 or more: no event comes before the first"));
    }
    let query = EventQuery { name: query.name, before: query.before, limit, ..EventQuery::default() };
    let events = shared.store.event_log(Some(who.namespace()), query).await?;
    Ok(Json(events.iter().map(event_view).collect()))
}

/// `GET /v1/events/{seq}` (viewer): an event and what each trigger did with it.
pub(crate) async fn show(
    State(shared): State<Arc<Shared>>,
    who: Principal,
    Path(seq): Path<String>,
) -> Result<Json<EventDetails>, ApiError> {
    who.require(Role::Viewer)?;
    let seq: u64 = seq
        .parse()
        .map_err(|_| ApiError::bad_request(format!("{seq:?} is not an event's sequence number (a whole number)")))?;
    let details = stepwright_app::event_details(shared.store.as_ref(), Some(who.namespace()), seq)
        .await?
        .ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, "not_found", format!("no event {seq}")))?;
    Ok(Json(details))
}

/// `POST /v1/triggers` (operator): keeps a registered workflow's triggers.
pub(crate) async fn create(
    State(shared): State<Arc<Shared>>,
    who: Principal,
    Body(body): Body<CreateTriggers>,
) -> Result<(StatusCode, Json<Vec<TriggerView>>), ApiError> {
    who.require(Role::Operator)?;
    let (workflow, loaded) =
        load_to_keep(&shared, &who, &body.workflow, body.version, &body.only, Section::Triggers).await?;
    let kept = stepwright_app::create_triggers(
        &scheduler(&shared),
        Some(who.namespace()),
        &workflow,
        &loaded.triggers,
        &body.only,
        body.paused,
    )
    .await
    .map_err(ApiError::from)?;
    for record in &kept {
        audit(&shared, &who, "trigger.created", record.key.name.clone(), json!({ "paused": record.paused })).await?;
    }
    Ok((StatusCode::CREATED, Json(kept.iter().map(trigger_view).collect())))
}

/// `GET /v1/triggers` (viewer): the namespace's triggers, by name.
pub(crate) async fn list_triggers(
    State(shared): State<Arc<Shared>>,
    who: Principal,
) -> Result<Json<Vec<TriggerView>>, ApiError> {
    who.require(Role::Viewer)?;
    let records = shared.store.schedules(Some(who.namespace())).await?;
    Ok(Json(records.iter().filter(|r| r.on_event.is_some()).map(trigger_view).collect()))
}

/// `GET /v1/triggers/{workflow}/{trigger}` (viewer).
pub(crate) async fn show_trigger(
    State(shared): State<Arc<Shared>>,
    who: Principal,
    Path((workflow, trigger)): Path<(String, String)>,
) -> Result<Json<TriggerDetails>, ApiError> {
    who.require(Role::Viewer)?;
    let key = key(&who, &workflow, &trigger);
    let record = trigger_record(&shared, &key).await?;
    let state: TriggerState = stepwright_app::trigger_state_of(&record).map_err(ApiError::from)?;
    let fires = shared.store.trigger_fires(&key, 20).await?;
    Ok(Json(TriggerDetails {
        trigger: trigger_view(&record),
        read_through: state.read_through,
        held: state
            .held
            .iter()
            .map(|(group, held)| json!({ "key": group, "event": held.event.seq, "due_at": held.due.as_micros() }))
            .collect(),
        batch: state.batch.iter().map(|e| e.seq).collect(),
        fires: fires.iter().map(fire_view).collect(),
    }))
}

/// `POST /v1/triggers/{workflow}/{trigger}/pause` (operator).
pub(crate) async fn pause(
    State(shared): State<Arc<Shared>>,
    who: Principal,
    Path((workflow, trigger)): Path<(String, String)>,
) -> Result<Json<TriggerView>, ApiError> {
    set_paused(&shared, &who, &workflow, &trigger, true).await
}

/// `POST /v1/triggers/{workflow}/{trigger}/resume` (operator).
pub(crate) async fn resume(
    State(shared): State<Arc<Shared>>,
    who: Principal,
    Path((workflow, trigger)): Path<(String, String)>,
) -> Result<Json<TriggerView>, ApiError> {
    set_paused(&shared, &who, &workflow, &trigger, false).await
}

async fn set_paused(
    shared: &Shared,
    who: &Principal,
    workflow: &str,
    trigger: &str,
    paused: bool,
) -> Result<Json<TriggerView>, ApiError> {
    who.require(Role::Operator)?;
    let key = key(who, workflow, trigger);
    trigger_record(shared, &key).await?;
    let changed = scheduler(shared).set_paused(&key, paused).await.map_err(|error| match error {
        ScheduleError::NotFound(key) => not_found(&key),
        error => ApiError::from(error),
    })?;
    if changed {
        let action = if paused { "trigger.paused" } else { "trigger.resumed" };
        audit(shared, who, action, key.name.clone(), json!({})).await?;
    }
    Ok(Json(trigger_view(&trigger_record(shared, &key).await?)))
}

/// `DELETE /v1/triggers/{workflow}/{trigger}` (operator): the trigger and its fire
/// records; its runs and the events stay.
pub(crate) async fn delete(
    State(shared): State<Arc<Shared>>,
    who: Principal,
    Path((workflow, trigger)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    who.require(Role::Operator)?;
    let key = key(&who, &workflow, &trigger);
    trigger_record(&shared, &key).await?;
    if !shared.store.delete_schedule(&key).await? {
        return Err(not_found(&key));
    }
    audit(&shared, &who, "trigger.deleted", key.name.clone(), json!({})).await?;
    Ok(StatusCode::NO_CONTENT)
}
