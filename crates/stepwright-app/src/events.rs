//! The event log as every host shows it: an event with what each trigger did with it — the
//! run it started or why none (recorded), and what a trigger still holds it for (a debounce, a
//! batch: read from the trigger's state, since nothing is decided yet).

use stepwright_api::trigger::{EventDetails, EventView, FireView, HeldBy, HeldView};
use stepwright_core::store::event::{EventFire, StoredEvent};
use stepwright_core::store::schedule::TickOutcome;
use stepwright_store::AnyStore;

use crate::AppError;

/// An event as the API shows it.
pub fn event_view(event: &StoredEvent) -> EventView {
    EventView {
        seq: event.seq,
        name: event.name.clone(),
        payload: event.payload.clone(),
        idempotency_key: event.idempotency_key.clone(),
        received_at: event.received_at.as_micros(),
    }
}

/// A trigger's fire as the API shows it.
pub fn fire_view(fire: &EventFire) -> FireView {
    let (run_id, skipped) = match &fire.outcome {
        TickOutcome::Started { run } => (Some(run.to_string()), None),
        TickOutcome::Skipped { reason } => (None, Some(reason.clone())),
    };
    FireView { trigger: fire.trigger.clone(), event: fire.event, run_id, skipped }
}

/// Event `seq` of `tenant` with its history, or `None` when the tenant has no such event.
pub async fn event_details(
    store: &dyn AnyStore,
    tenant: Option<&str>,
    seq: u64,
) -> Result<Option<EventDetails>, AppError> {
    let Some(event) = store.event_by_seq(tenant, seq).await? else { return Ok(None) };
    let fires = store.event_fires(tenant, seq).await?;
    let mut held = Vec::new();
    for record in store.schedules(tenant).await? {
        if record.on_event.is_none() {
            continue;
        }
        let Ok(state) = stepwright_schedule::trigger_state_of(&record) else { continue };
        let trigger = record.key.name.clone();
        for (key, group) in &state.held {
            if group.event.seq == seq {
                held.push(HeldView {
                    trigger: trigger.clone(),
                    by: HeldBy::Debounced,
                    key: Some(key.clone()),
                    until: group.due.as_micros(),
                });
            }
        }
        if state.batch.iter().any(|e| e.seq == seq)
            && let Ok(spec) = stepwright_schedule::trigger_spec_of(&record)
            && let Some(until) = state.next_due(&spec)
        {
            held.push(HeldView { trigger, by: HeldBy::Batched, key: None, until: until.as_micros() });
        }
    }
    Ok(Some(EventDetails { event: event_view(&event), fires: fires.iter().map(fire_view).collect(), held }))
}
