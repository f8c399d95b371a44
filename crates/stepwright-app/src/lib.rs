//! The application layer: what every host of the engine — the command line, the server, a
//! Rust program — does the same way. Opening a store from a URL; binding a workflow file's
//! models, cassettes and MCP servers; keeping a file's source in the store and rebuilding a
//! run's definition from it (so any process can continue any run); a worker's resolver;
//! and "decide, then continue". Its errors say whose fault they are ([`Fault`]), which the
//! CLI maps to exit codes and the server to HTTP statuses.
//!
//! This crate knows the engine, the stores, the file format and the model layer; it knows
//! nothing of terminals, arguments or HTTP.

mod bindings;
mod decide;
mod error;
mod events;
pub mod experiment;
mod idempotency;
mod mail;
mod schedules;
mod start;
mod view;
pub mod wire;

use std::sync::Arc;

pub use bindings::{
    Bindings, Servers, SharedLimits, connect_servers, load_file, model_bindings, prepare, rebind_models,
};
pub use decide::{
    Decided, continue_in_background, continue_run, decide_in_background, decide_then_continue, only_interrupt,
    only_timer, wake_in_background, wake_then_continue,
};
pub use error::AppError;
pub use events::{event_details, event_view, fire_view};
pub use idempotency::{CLAIM_ABANDONED_AFTER, IdempotentStart, claim_start};
pub use mail::{Mail, send_mail};
pub use schedules::{
    NotDeclared, ScheduleError, Scheduler, Section, TriggerState, check_declared, create_schedules, create_triggers,
    next_fire, parse_instant, schedule_key, schedule_state_of, scheduler, trigger_state_of,
};
pub use start::{resume_and_wait, start_and_wait, wait_until_stopped};
pub use stepwright_api::{RecomputeView, RunDetails};
use stepwright_core::journal::DefinitionSource;
use stepwright_core::{Engine, EngineBuilder, MemoryBank, RunId, SessionStore, Store};
pub use stepwright_core::{Fault, Workflow};
pub use stepwright_flow::Loaded;
pub use stepwright_llm::{DEFAULT_KILL_GRACE, process_groups_stopped};
pub use stepwright_store::{OpenError, ServerStore};
pub use view::{
    details_of_report, recompute_view, recompute_with_report, recompute_with_usage, run_details, run_waits_for,
    say_what_steps_wait_for, usage_of,
};

/// An engine over the store, with the store's sessions and memory for agent and memory
/// steps, and its step cache (so a cached step is served across runs and processes).
pub fn engine_over(store: &Arc<dyn ServerStore>) -> EngineBuilder {
    Engine::builder()
        .store(store.clone() as Arc<dyn Store>)
        .cache(store.clone() as Arc<dyn stepwright_core::StepCache>)
        .service(Arc::new(stepwright_llm::Sessions::new(store.clone() as Arc<dyn SessionStore>)))
        .service(Arc::new(stepwright_llm::MemoryService::new(store.clone() as Arc<dyn MemoryBank>)))
}

/// Keeps a workflow's source in the store under its definition hash, so any later command,
/// or a worker elsewhere, rebuilds the definition from the store.
pub async fn keep_source(store: &dyn Store, workflow: &Workflow, source: DefinitionSource) -> Result<(), AppError> {
    store.put_definition(workflow.hash(), source).await.map_err(AppError::Store)
}

/// Rebuilds a run's definition from the source the store keeps, with the host's bindings.
pub async fn definition_of(store: &dyn Store, run: RunId, bindings: &Bindings) -> Result<Workflow, AppError> {
    let record = store.load_from(run, u64::MAX).await.map_err(AppError::Store)?.record;
    match rebuild(store, record.definition_hash, bindings).await? {
        Rebuilt::Missing => Err(AppError::NoSource { run, workflow: record.workflow.clone() }),
        Rebuilt::Changed(name) => Err(AppError::SourceChanged { run, name }),
        Rebuilt::Same(workflow) => Ok(workflow),
    }
}

/// What the store's source of a definition compiles to.
enum Rebuilt {
    /// The store keeps no source under the hash.
    Missing,
    /// The source (named) compiles to another definition now.
    Changed(String),
    /// The definition.
    Same(Workflow),
}

async fn rebuild(
    store: &dyn Store,
    hash: stepwright_core::ContentHash,
    bindings: &Bindings,
) -> Result<Rebuilt, AppError> {
    let Some(source) = store.get_definition(hash).await.map_err(AppError::Store)? else { return Ok(Rebuilt::Missing) };
    let workflow = compile_source(&source, bindings, Servers::Connected).await?;
    Ok(if workflow.hash() == hash { Rebuilt::Same(workflow) } else { Rebuilt::Changed(source.name) })
}

/// A stored source compiled with its MCP servers only declared: its shape (steps, inboxes),
/// not a definition to execute.
pub(crate) async fn rebuild_declared(source: &DefinitionSource, bindings: &Bindings) -> Result<Workflow, AppError> {
    compile_source(source, bindings, Servers::Declared).await
}

async fn compile_source(
    source: &DefinitionSource,
    bindings: &Bindings,
    servers: Servers,
) -> Result<Workflow, AppError> {
    let mut options = bindings.load_options();
    if !source.files.is_empty() {
        options.files = Some(Arc::new(source.files.clone()));
    }
    let loaded = stepwright_flow::load_source_with(&source.source, &source.name, &options).map_err(AppError::Load)?;
    prepare(loaded, bindings, servers).await
}

/// The definition a schedule's runs are pinned to, rebuilt from the source the store keeps.
pub async fn definition_by_hash(
    store: &dyn Store,
    workflow: &str,
    hash: stepwright_core::ContentHash,
    bindings: &Bindings,
) -> Result<Workflow, String> {
    match rebuild(store, hash, bindings).await.map_err(|e| e.to_string())? {
        Rebuilt::Missing => {
            Err(format!("the store keeps no source of workflow {workflow:?} under its definition hash"))
        }
        Rebuilt::Changed(name) => {
            Err(format!("the stored source of {name} no longer compiles to the schedule's definition"))
        }
        Rebuilt::Same(workflow) => Ok(workflow),
    }
}

/// What a worker resolves a run's definition with: [`definition_of`] with these bindings.
/// Why it cannot (its source is gone, an MCP server will not start) goes to the worker's
/// log with the run.
pub fn resolver(store: Arc<dyn ServerStore>, bindings: Bindings) -> stepwright_core::DefinitionResolver {
    Arc::new(move |record| {
        let (store, bindings) = (store.clone(), bindings.clone().sharing_limits_in(store.clone()));
        Box::pin(async move { definition_of(&*store, record.id, &bindings).await.map_err(|e| e.to_string()) })
    })
}
