//! Schedules: keeping a workflow's schedules, and what they did.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The schedules of a registered workflow to keep.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateSchedules {
    /// The registered workflow whose file declares them (`schedules:`).
    #[schemars(length(min = 1))]
    pub workflow: String,
    /// Its version (default: the newest).
    #[serde(default, deserialize_with = "crate::whole::optional")]
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
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ScheduleView {
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
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ScheduleDetails {
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
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct TickView {
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
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BackfillRequest {
    /// After this time (RFC 3339).
    #[schemars(extend("format" = "date-time"))]
    pub from: String,
    /// Up to this time, inclusive (RFC 3339); not after the schedule's last decided tick.
    #[schemars(extend("format" = "date-time"))]
    pub to: String,
    /// At most this many runs a second (default 10).
    #[serde(default, deserialize_with = "crate::whole::optional")]
    #[schemars(range(min = 1, max = 100))]
    pub rate: Option<u32>,
}

/// What a backfill starts.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct BackfillAccepted {
    /// How many ticks of the range it starts a run for (in the background, at the rate;
    /// each shows in the schedule's ticks as it starts).
    pub ticks: usize,
    /// How many ticks of the range had started a run already.
    pub already: usize,
}

/// What `trigger` started.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Triggered {
    /// The run.
    pub run_id: String,
    /// Its tick (µs since the epoch).
    pub tick_at: i64,
}
