//! Runs that start themselves: schedules.
//!
//! - [`cadence`]: when a schedule ticks (cron in a time zone with an explicit daylight-saving
//!   policy, or an interval with a phase), between a start and an end.
//! - [`spec`]: what a schedule says (jitter, input, overlap, catch-up window, pause on
//!   failure), what the scheduler keeps between ticks, and the decision for each tick.
//! - [`scheduler`]: the loop in every `worker` and `serve` process that decides due ticks and
//!   writes each decision — new state, tick records, runs started — in one transaction that
//!   only one process wins, so a tick starts at most one run and every tick is recorded.
//!
//! - [`trigger`]: what a trigger says (an event pattern, a filter, the input, debounce,
//!   batch, a concurrency limit per key) and what the scheduler keeps for it; the scheduler
//!   advances a trigger as it advances a schedule, reading the event log instead of a clock.
//!
//! Architecture invariant: the store knows nothing of cron or policies; this crate knows
//! nothing of SQL. They meet at `stepwright_core::store::schedule`.

pub mod cadence;
pub mod scheduler;
pub mod spec;
pub mod trigger;
mod triggers;

pub use cadence::{Cadence, CadenceError, DstPolicy, FoldPolicy, GapPolicy, Tick, Ticker};
pub use scheduler::{
    Backfill, EventFilter, EventRenderer, InputRenderer, PassReport, ScheduleError, ScheduleResolver, Scheduler,
    TickContext, next_fire, tick_run_id,
};
pub use spec::{
    DEFAULT_CATCHUP_WINDOW, Decision, MAX_BUFFERED, Overlap, ScheduleSpec, ScheduleState, SkipReason, decide,
};
pub use trigger::{TriggerSpec, TriggerState};
pub use triggers::{fire_run_id, trigger_spec_of, trigger_state_of};

/// An RFC 3339 time (with its offset) as a timestamp: a schedule's `start` and `end`, a
/// backfill's range.
pub fn parse_instant(text: &str) -> Option<stepwright_core::Timestamp> {
    chrono::DateTime::parse_from_rfc3339(text.trim())
        .ok()
        .map(|at| stepwright_core::Timestamp::from_micros(at.timestamp_micros()))
}

/// A timestamp in RFC 3339, UTC, to the microsecond when it has one
/// (`2026-11-23T07:00:00Z`): what a tick's time is shown as.
pub fn format_instant(at: stepwright_core::Timestamp) -> String {
    cadence::rfc3339(at, &chrono_tz::Tz::UTC)
}
