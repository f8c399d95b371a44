//! Schedules and triggers as every host keeps and runs them: a file's schedules stored under
//! `workflow/name` (with the file's source, so any worker rebuilds the definition), and the
//! scheduler a worker or a server runs, resolving definitions from the store and rendering
//! inputs with the file format's templates.

use std::sync::Arc;

use stepwright_core::store::schedule::{ScheduleKey, ScheduleRecord, ScheduleStore};
use stepwright_core::{Engine, Workflow};
use stepwright_schedule::{ScheduleError, Scheduler};
use stepwright_store::ServerStore;

use crate::Bindings;

/// The stored name of schedule `schedule` of `workflow` in `tenant`: `workflow/schedule`.
pub fn schedule_key(tenant: Option<&str>, workflow: &str, schedule: &str) -> ScheduleKey {
    ScheduleKey::new(tenant, &format!("{workflow}/{schedule}"))
}

/// The scheduler a host runs over `store`: definitions from the store's sources (bound with
/// `bindings`), inputs rendered as the file format renders templates.
pub fn scheduler(engine: Engine, store: Arc<dyn ServerStore>, bindings: Bindings) -> Scheduler {
    let resolver_store = store.clone();
    let events = store.clone() as Arc<dyn stepwright_core::store::event::EventStore>;
    Scheduler::new(engine, store as Arc<dyn ScheduleStore>)
        .resolve_with(Arc::new(move |workflow, hash| {
            let (store, bindings) =
                (resolver_store.clone(), bindings.clone().sharing_limits_in(resolver_store.clone()));
            Box::pin(async move { crate::definition_by_hash(store.as_ref(), &workflow, hash, &bindings).await })
        }))
        .render_with(Arc::new(|template, tick| stepwright_flow::render_schedule_input(template, &tick.as_value())))
        .triggers_with(
            events,
            Arc::new(stepwright_flow::render_event_template),
            Arc::new(stepwright_flow::eval_event_filter),
        )
}

/// Keeps a loaded file's schedules (all, or those named in `only`) for `workflow`, whose
/// source the caller has kept in the store: created, or replaced keeping what they decided.
pub async fn create_schedules(
    scheduler: &Scheduler,
    tenant: Option<&str>,
    workflow: &Workflow,
    schedules: &[stepwright_flow::FileSchedule],
    only: &[String],
    paused: bool,
) -> Result<Vec<ScheduleRecord>, ScheduleError> {
    let mut kept = Vec::new();
    for schedule in schedules.iter().filter(|s| only.is_empty() || only.contains(&s.name)) {
        let key = schedule_key(tenant, workflow.name(), &schedule.name);
        kept.push(scheduler.put(key, workflow, schedule.spec.clone(), paused).await?);
    }
    Ok(kept)
}

/// Keeps a loaded file's triggers (all, or those named in `only`) for `workflow`, whose
/// source the caller has kept in the store: created (reading the events stored from now
/// on), or replaced keeping their position in the event log.
pub async fn create_triggers(
    scheduler: &Scheduler,
    tenant: Option<&str>,
    workflow: &Workflow,
    triggers: &[stepwright_flow::FileTrigger],
    only: &[String],
    paused: bool,
) -> Result<Vec<ScheduleRecord>, ScheduleError> {
    let mut kept = Vec::new();
    for trigger in triggers.iter().filter(|t| only.is_empty() || only.contains(&t.name)) {
        let key = schedule_key(tenant, workflow.name(), &trigger.name);
        kept.push(scheduler.put_trigger(key, workflow, trigger.spec.clone(), paused).await?);
    }
    Ok(kept)
}
