//! Events: the log of what happened outside (`POST /v1/events`, `stepwright events send`),
//! each stored before anything reads it, and what each event started.
//!
//! The store keeps an event log per tenant (a sequence number grows across the log; an
//! idempotency key names one event per tenant) and the record of every trigger's fire
//! (trigger, event) → run or reason. Triggers themselves are kept with the schedules
//! ([`super::schedule`]: a schedule whose `on_event` is set is driven by events, not a
//! clock), so one compare-and-set advance writes a trigger's state, its fires and their
//! runs together. Appending an event makes its tenant's triggers due at once and wakes the
//! runs whose `wait` watches its name.
//!
//! The store knows nothing of patterns, filters or debounce (`stepwright-schedule` does).

use std::collections::BTreeMap;
use std::sync::Mutex;

use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::StoreError;
use super::tick::{ScheduleKey, TickOutcome};
use crate::ids::{RunId, Timestamp};

/// The longest idempotency key an event may carry (the API's limit for runs).
pub const MAX_EVENT_KEY_LEN: usize = 255;

/// An event to store.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEvent {
    /// Its tenant (`None`: a deployment without tenants).
    pub tenant: Option<String>,
    /// Its name (`ticket.created`).
    pub name: String,
    /// What it carries.
    pub payload: Value,
    /// A key naming one event in the tenant: a second send with it stores nothing and
    /// returns the first.
    pub idempotency_key: Option<String>,
    /// When it was received.
    pub at: Timestamp,
}

/// An event as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredEvent {
    /// Its place in the log (grows with every event stored, across tenants).
    pub seq: u64,
    /// Its tenant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// Its name.
    pub name: String,
    /// What it carries.
    pub payload: Value,
    /// Its idempotency key, if it was sent with one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    /// When it was received.
    pub received_at: Timestamp,
}

/// What appending an event did.
#[derive(Debug, Clone, PartialEq)]
pub struct Appended {
    /// The event: the new one, or the one stored first under the same idempotency key.
    pub event: StoredEvent,
    /// Whether this append stored it (`false`: its key named an event stored before).
    pub created: bool,
}

/// Which events of a tenant to read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EventQuery {
    /// Only events with this exact name.
    pub name: Option<String>,
    /// Only events after this sequence number, oldest first (a reader going through the
    /// log); without it, newest first.
    pub after: Option<u64>,
    /// Only events before this sequence number (the next page of a newest-first listing).
    pub before: Option<u64>,
    /// Only events received at or after this time.
    pub since: Option<Timestamp>,
    /// At most this many (0: 100).
    pub limit: usize,
}

impl EventQuery {
    /// What a `wait` reads ([`Store::logged_events`](super::Store::logged_events)): events
    /// named `name` after `after` (from the start if none), received at or after `since`,
    /// oldest first.
    pub fn for_wait(name: &str, after: Option<u64>, since: Timestamp, limit: usize) -> Self {
        Self { name: Some(name.to_owned()), after: Some(after.unwrap_or(0)), before: None, since: Some(since), limit }
    }

    /// The number of events to return at most.
    pub fn limit(&self) -> usize {
        if self.limit == 0 { 100 } else { self.limit }
    }

    /// Whether `event` is one this query asks for (the filters, not the order or limit).
    pub fn admits(&self, event: &StoredEvent) -> bool {
        self.name.as_deref().is_none_or(|name| name == event.name)
            && self.after.is_none_or(|after| event.seq > after)
            && self.before.is_none_or(|before| event.seq < before)
            && self.since.is_none_or(|since| event.received_at >= since)
    }
}

/// What one trigger did with one event: the run it started (a debounced or batched run
/// names every event it stands for), or why it started none.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventFire {
    /// The trigger (a schedule key's name: `workflow/trigger`).
    pub trigger: String,
    /// The event's sequence number.
    pub event: u64,
    /// What it did.
    #[serde(flatten)]
    pub outcome: TickOutcome,
    /// When it was recorded.
    pub recorded_at: Timestamp,
}

/// The event log and the record of what events started.
pub trait EventStore: Send + Sync + 'static {
    /// Stores an event (or, under an idempotency key stored before, returns that event),
    /// makes the tenant's triggers due now and wakes the runs watching its name — in one
    /// transaction with the event.
    fn append_event(&self, event: NewEvent) -> BoxFuture<'_, Result<Appended, StoreError>>;

    /// Events of a tenant (`None`: the deployment without tenants).
    fn event_log<'a>(
        &'a self,
        tenant: Option<&'a str>,
        query: EventQuery,
    ) -> BoxFuture<'a, Result<Vec<StoredEvent>, StoreError>>;

    /// One event of a tenant.
    fn event_by_seq<'a>(
        &'a self,
        tenant: Option<&'a str>,
        seq: u64,
    ) -> BoxFuture<'a, Result<Option<StoredEvent>, StoreError>>;

    /// What the triggers of the tenant did with an event, by trigger.
    fn event_fires<'a>(
        &'a self,
        tenant: Option<&'a str>,
        seq: u64,
    ) -> BoxFuture<'a, Result<Vec<EventFire>, StoreError>>;

    /// A trigger's fires, newest event first, at most `limit`.
    fn trigger_fires<'a>(
        &'a self,
        key: &'a ScheduleKey,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<EventFire>, StoreError>>;
}

/// The error of an advance that records a fire recorded already.
pub fn fire_recorded(key: &ScheduleKey, event: u64) -> StoreError {
    StoreError::Backend {
        doing: "recording a trigger's fire".into(),
        source: format!("trigger {key} has a record of event {event} already").into(),
    }
}

/// Whether `name` may name an event: 1 to 255 characters (as JSON Schema counts them), none
/// a control character.
pub fn is_event_name(name: &str) -> bool {
    !name.is_empty() && name.chars().count() <= 255 && !name.chars().any(char::is_control)
}

/// Checks an event before it is stored: a name, a key of bounded length.
pub fn check_new_event(event: &NewEvent) -> Result<(), StoreError> {
    if !is_event_name(&event.name) {
        return Err(StoreError::Invalid(format!(
            "an event's name must be 1 to 255 printable characters, not {:?}",
            event.name
        )));
    }
    if let Some(key) = &event.idempotency_key
        && (key.is_empty() || key.chars().count() > MAX_EVENT_KEY_LEN)
    {
        return Err(StoreError::Invalid(format!(
            "an event's idempotency key must be 1 to {MAX_EVENT_KEY_LEN} characters long (it is {})",
            key.chars().count()
        )));
    }
    Ok(())
}

/// The event log in this process's memory, for the in-memory store.
#[derive(Debug, Default)]
pub(crate) struct InMemoryEvents {
    pub(crate) log: Mutex<EventLog>,
}

#[derive(Debug, Default)]
pub(crate) struct EventLog {
    events: Vec<StoredEvent>,
    /// (tenant, key) → sequence number.
    keys: BTreeMap<(String, String), u64>,
    /// (tenant, name) → the runs whose wait watches it.
    pub(crate) watchers: BTreeMap<(String, String), Vec<RunId>>,
    /// (tenant, trigger, event) → fire.
    pub(crate) fires: BTreeMap<(String, String, u64), EventFire>,
}

fn tenant_text(tenant: Option<&str>) -> String {
    tenant.unwrap_or_default().to_owned()
}

impl EventLog {
    /// Stores (or finds by key) an event; the runs to wake if it is new.
    pub(crate) fn append(&mut self, event: NewEvent) -> (Appended, Vec<RunId>) {
        let tenant = tenant_text(event.tenant.as_deref());
        if let Some(key) = &event.idempotency_key
            && let Some(seq) = self.keys.get(&(tenant.clone(), key.clone()))
        {
            let stored = self.events.iter().find(|e| e.seq == *seq).expect("a keyed event is in the log").clone();
            return (Appended { event: stored, created: false }, Vec::new());
        }
        let seq = self.events.last().map_or(1, |e| e.seq + 1);
        let stored = StoredEvent {
            seq,
            tenant: event.tenant,
            name: event.name,
            payload: event.payload,
            idempotency_key: event.idempotency_key,
            received_at: event.at,
        };
        if let Some(key) = &stored.idempotency_key {
            self.keys.insert((tenant.clone(), key.clone()), seq);
        }
        let woken = self.watchers.remove(&(tenant, stored.name.clone())).unwrap_or_default();
        self.events.push(stored.clone());
        (Appended { event: stored, created: true }, woken)
    }

    pub(crate) fn query(&self, tenant: Option<&str>, query: &EventQuery) -> Vec<StoredEvent> {
        let of_tenant = |e: &&StoredEvent| e.tenant.as_deref() == tenant && query.admits(e);
        if query.after.is_some() {
            self.events.iter().filter(of_tenant).take(query.limit()).cloned().collect()
        } else {
            self.events.iter().rev().filter(of_tenant).take(query.limit()).cloned().collect()
        }
    }

    /// Whether the tenant has an event after `seq`.
    pub(crate) fn has_after(&self, tenant: Option<&str>, seq: u64) -> bool {
        self.events.iter().rev().take_while(|e| e.seq > seq).any(|e| e.tenant.as_deref() == tenant)
    }

    pub(crate) fn watch(&mut self, run: RunId, tenant: Option<&str>, name: &str) {
        let watchers = self.watchers.entry((tenant_text(tenant), name.to_owned())).or_default();
        if !watchers.contains(&run) {
            watchers.push(run);
        }
    }

    pub(crate) fn fires_of_event(&self, tenant: Option<&str>, seq: u64) -> Vec<EventFire> {
        let tenant = tenant_text(tenant);
        self.fires.iter().filter(|((t, _, e), _)| *t == tenant && *e == seq).map(|(_, fire)| fire.clone()).collect()
    }

    pub(crate) fn fires_of_trigger(&self, key: &ScheduleKey, limit: usize) -> Vec<EventFire> {
        let tenant = tenant_text(key.tenant.as_deref());
        let mut fires: Vec<EventFire> = self
            .fires
            .iter()
            .filter(|((t, name, _), _)| *t == tenant && *name == key.name)
            .map(|(_, fire)| fire.clone())
            .collect();
        fires.reverse();
        fires.truncate(limit);
        fires
    }
}
