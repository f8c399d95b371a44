//! Schedules and triggers as every host keeps and runs them: a file's schedules stored under
//! `workflow/name` (with the file's source, so any worker rebuilds the definition), and the
//! scheduler a worker or a server runs, resolving definitions from the store and rendering
//! inputs with the file format's templates.

use std::sync::Arc;

use stepwright_core::store::schedule::{ScheduleKey, ScheduleRecord, ScheduleStore};
use stepwright_core::{Engine, Workflow};
use stepwright_store::ServerStore;

use crate::Bindings;

pub use stepwright_schedule::scheduler::state_of as schedule_state_of;
pub use stepwright_schedule::{ScheduleError, Scheduler, TriggerState, next_fire, parse_instant, trigger_state_of};

/// What a workflow file keeps in the store: its `schedules:` or its `triggers:`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Section {
    /// `schedules:`.
    Schedules,
    /// `triggers:`.
    Triggers,
}

impl Section {
    /// What one of its entries is called: `schedule` or `trigger`.
    pub fn kind(self) -> &'static str {
        match self {
            Self::Schedules => "schedule",
            Self::Triggers => "trigger",
        }
    }
}

/// Why a file's section cannot be kept as asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotDeclared {
    /// The file declares no entry of the section.
    Empty {
        /// `schedule` or `trigger`.
        kind: &'static str,
    },
    /// `only` names an entry the file does not declare.
    Unknown {
        /// `schedule` or `trigger`.
        kind: &'static str,
        /// The name asked for.
        name: String,
        /// The names the file declares.
        declared: Vec<String>,
    },
}

/// Checks that `loaded` declares entries of `section`, and every name in `only` among them:
/// the one check the command line (a file) and the server (a registered workflow) make
/// before keeping a file's schedules or triggers. Each host words the refusal.
pub fn check_declared(loaded: &stepwright_flow::Loaded, section: Section, only: &[String]) -> Result<(), NotDeclared> {
    let declared: Vec<String> = match section {
        Section::Schedules => loaded.schedules.iter().map(|s| s.name.clone()).collect(),
        Section::Triggers => loaded.triggers.iter().map(|t| t.name.clone()).collect(),
    };
    let kind = section.kind();
    if declared.is_empty() {
        return Err(NotDeclared::Empty { kind });
    }
    match only.iter().find(|name| !declared.contains(name)) {
        Some(unknown) => Err(NotDeclared::Unknown { kind, name: unknown.clone(), declared }),
        None => Ok(()),
    }
}

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
