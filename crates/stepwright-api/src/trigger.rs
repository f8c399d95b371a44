//! Events and triggers: sending events, and what the triggers that match them did.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// An event to store.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SendEvent {
    /// Its name (`ticket.created`).
    #[schemars(length(min = 1, max = 255), regex(pattern = r"^[^\u0000-\u001F\u007F-\u009F]*$"))]
    pub name: String,
    /// What it carries (default null).
    #[serde(default)]
    pub payload: Value,
    /// A key naming one event in the namespace: the same key again stores nothing and
    /// returns the first event (`200`).
    #[serde(default)]
    #[schemars(length(min = 1, max = 255))]
    pub idempotency_key: Option<String>,
}

/// An event as the API shows it.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct EventView {
    /// Its place in the log.
    pub seq: u64,
    /// Its name.
    pub name: String,
    /// What it carries.
    pub payload: Value,
    /// Its idempotency key.
    pub idempotency_key: Option<String>,
    /// When it was received (µs since the epoch).
    pub received_at: i64,
}

/// What storing an event did.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct EventSent {
    /// The event (the first one, when its idempotency key was sent before).
    pub event: EventView,
    /// Whether this call stored it.
    pub created: bool,
}

/// An event with its history.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct EventDetails {
    /// The event.
    #[serde(flatten)]
    pub event: EventView,
    /// What each trigger did with it: the run it started, or why none.
    pub fires: Vec<FireView>,
    /// The triggers that hold it still (a debounce waiting for its key to be quiet, a batch
    /// being collected): what it will do is not decided yet.
    #[serde(default)]
    pub held: Vec<HeldView>,
}

/// An event a trigger holds before deciding what it starts.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct HeldView {
    /// The trigger (`workflow/trigger`).
    pub trigger: String,
    /// How it holds it.
    pub by: HeldBy,
    /// The debounce's key (its rendered `key`), for a debounce.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// When it starts its run unless something else comes first (µs since the epoch): the
    /// debounce's quiet period ends, or the batch's `within` runs out.
    pub until: i64,
}

/// How a trigger holds an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum HeldBy {
    /// A debounce: a later event of the same key replaces it (recorded `debounced`).
    Debounced,
    /// A batch: it starts with the others when the batch is full or its time is up.
    Batched,
}

/// What one trigger did with one event.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct FireView {
    /// The trigger (`workflow/trigger`).
    pub trigger: String,
    /// The event.
    pub event: u64,
    /// The run it started (a debounced or batched run names every event it stands for).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// Why it started none (`paused`, `debounced: …`, `filter_failed: …`, `start_failed: …`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
}

/// `GET /v1/events` filters.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListEvents {
    /// Only events with this name.
    #[serde(default)]
    #[schemars(length(min = 1, max = 255), regex(pattern = r"^[^\u0000-\u001F\u007F-\u009F]*$"))]
    pub name: Option<String>,
    /// At most this many (1 to 500, default 50).
    #[serde(default)]
    #[schemars(range(min = 1, max = 500))]
    pub limit: Option<usize>,
    /// Only events before this one (the next page after a page ending with it).
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub before: Option<u64>,
}

/// The triggers of a registered workflow to keep.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateTriggers {
    /// The registered workflow whose file declares them (`triggers:`).
    #[schemars(length(min = 1))]
    pub workflow: String,
    /// Its version (default: the newest).
    #[serde(default, deserialize_with = "crate::whole::optional")]
    #[schemars(range(min = 1))]
    pub version: Option<u32>,
    /// Only these triggers of the file (default: all).
    #[serde(default)]
    pub only: Vec<String>,
    /// Keep them paused: the events they match are recorded as skipped until resumed.
    #[serde(default)]
    pub paused: bool,
}

/// A trigger as the API shows it.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct TriggerView {
    /// Its workflow.
    pub workflow: String,
    /// Its name in the workflow's file.
    pub trigger: String,
    /// What it says: event pattern, filter, input, debounce, batch, concurrency.
    pub spec: Value,
    /// Paused: the events it matches start nothing.
    pub paused: bool,
    /// When it was created (µs since the epoch).
    pub created_at: i64,
}

/// A trigger with what it holds and its recent fires.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct TriggerDetails {
    /// The trigger.
    #[serde(flatten)]
    pub trigger: TriggerView,
    /// The last event of the log it has read.
    pub read_through: u64,
    /// Events a debounce holds (by key) until their key is quiet.
    pub held: Vec<Value>,
    /// Events of the batch being collected.
    pub batch: Vec<u64>,
    /// Its last fires, newest event first.
    pub fires: Vec<FireView>,
}
