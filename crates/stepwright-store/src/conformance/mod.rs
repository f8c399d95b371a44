//! The conformance suite every [`Store`] backend must pass.
//!
//! Each check takes a fresh, empty store and panics with a message on a violation; a
//! backend's tests call [`run_all`] (or single checks) with a factory of fresh stores.

mod definitions;
mod control;
mod leases;
mod quotas;
mod journal;
mod sessions;
mod memory;
mod schedules;
mod tasks;

pub use control::*;
pub use definitions::*;
pub use journal::*;
pub use leases::*;
pub use memory::*;
pub use quotas::*;
pub use schedules::*;
pub use sessions::*;
pub use tasks::*;

use std::sync::Arc;

use serde_json::json;
use stepwright_core::bank::{MemoryAddress, MemoryBank, MemoryItem, MemoryScope, MemorySearch};
use stepwright_core::journal::{JournalBatch, JournalEntry, RunRecord};
use stepwright_core::session::{SessionAppend, SessionOwner, SessionStore};
use stepwright_core::store::event::{EventFire, EventQuery, EventStore, NewEvent};
use stepwright_core::store::schedule::{
    ScheduleAdvance, ScheduleKey, ScheduleRecord, ScheduleStore, TickOutcome, TickRecord,
};
use stepwright_core::store::{Retention, RunFilter, StatusUpdate};
use stepwright_core::{
    Caller, ContentHash, Decision, InterruptId, InterruptRequest, Record, Resolution, RunId, RunStatus, StepError,
    StepPath, Store, StoreError, Timestamp,
};

/// Runs every check, each on a fresh store from `fresh`.
pub async fn run_all<S, F, Fut>(fresh: F)
where
    S: Store
        + SessionStore
        + MemoryBank
        + ScheduleStore
        + EventStore
        + stepwright_core::store::quota::QuotaStore
        + stepwright_core::StepCache,
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Arc<S>>,
{
    create_and_load(&*fresh().await).await;
    append_keeps_order_and_blobs(&*fresh().await).await;
    concurrent_appends_to_one_run(&*fresh().await).await;
    refused_appends_fail_alone(&*fresh().await).await;
    concurrent_creates_take_an_id_once(&*fresh().await).await;
    concurrent_status_changes_each_get_their_own_answer(&*fresh().await).await;
    status_updates(&*fresh().await).await;
    interrupts_resolve_once(&*fresh().await).await;
    events_in_order(&*fresh().await).await;
    reads_from_a_position(&*fresh().await).await;
    waking_brings_a_timer_forward(&*fresh().await).await;
    list_filters(&*fresh().await).await;
    erase_and_retention_collect_blobs(&*fresh().await).await;
    missing_runs_are_errors(&*fresh().await).await;
    messages_keep_their_order(&*fresh().await).await;
    definitions_are_kept_by_hash(&*fresh().await).await;
    leases_fence_writes(&*fresh().await).await;
    a_live_lease_is_never_shared(&*fresh().await).await;
    leases_are_renewed_together(&*fresh().await).await;
    claims_keep_to_priority_and_concurrency_groups(&*fresh().await).await;
    quotas_grant_up_to_their_limit_per_window(&*fresh().await).await;
    the_step_cache_keeps_the_first_output_by_key(&*fresh().await).await;
    cancels_reach_executing_runs(&*fresh().await).await;
    claim_due_finds_ready_runs(&*fresh().await).await;
    claim_due_keeps_to_a_tenant(&*fresh().await).await;
    sessions_keep_history_for_their_owner(&*fresh().await).await;
    memory_bank_stores_and_recalls(&*fresh().await).await;
    run_memory_goes_with_its_run(&*fresh().await).await;
    schedules_advance_once(&*fresh().await).await;
    events_are_stored_once_and_wake_their_readers(&*fresh().await).await;
    tasks_are_claimed_once_and_fenced_by_their_lease(&*fresh().await).await;
    a_recompute_dispatches_tasks_outside_the_journal(&*fresh().await).await;
    a_pushed_task_is_born_leased_to_its_endpoint(&*fresh().await).await;
    a_claim_looks_past_tasks_its_worker_cannot_take(&*fresh().await).await;
    an_answer_is_taken_only_from_who_may_answer(&*fresh().await).await;
}

/// Wall time now: lease checks use real time, since some stores (Postgres) take lease times
/// from their own clock rather than the caller's.
pub(super) fn wall() -> Timestamp {
    let micros = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_micros()).unwrap_or(0);
    Timestamp::from_micros(i64::try_from(micros).unwrap_or(i64::MAX))
}

pub(super) fn near(actual: Timestamp, expected: Timestamp) -> bool {
    (actual.as_micros() - expected.as_micros()).abs() < 2_000_000
}

pub(super) fn id(n: u8) -> RunId {
    RunId::from_parts(Timestamp::from_millis(1_700_000_000_000 + i64::from(n)), [n; 10])
}

pub(super) fn record(n: u8, workflow: &str, status: RunStatus, at: i64) -> RunRecord {
    RunRecord {
        id: id(n),
        workflow: workflow.to_owned(),
        version: "1.0.0".into(),
        definition_hash: ContentHash::of_value(&json!(workflow)),
        input: Arc::new(json!({ "n": n })),
        caller: Caller::user(Some("acme"), "ann").with_role("lead"),
        status,
        output: None,
        error: None,
        parent: None,
        created_at: Timestamp::from_micros(at),
        updated_at: Timestamp::from_micros(at),
        wake_at: None,
        lease: None,
        cancel: None,
        flow: Default::default(),
        tags: Vec::new(),
    }
}

pub(super) fn entry(path: &str, at: i64, record: Record) -> JournalEntry {
    JournalEntry { path: StepPath::new(path), at: Timestamp::from_micros(at), record }
}

pub(super) fn completed(path: &str, value: serde_json::Value) -> (JournalEntry, (ContentHash, Arc<serde_json::Value>)) {
    let hash = ContentHash::of_value(&value);
    (
        entry(path, 2, Record::Completed { attempt: 1, output: hash, cached: false, started_at: None }),
        (hash, Arc::new(value)),
    )
}
