//! Triggers: runs started by events. A trigger names an event (or a pattern of names), an
//! optional filter over the event, the input of its runs, and optionally a debounce (by a
//! key, for a period: the last event of a quiet period starts one run), a batch (up to N
//! events or T after the first: one run for them all) and a concurrency limit per key.
//!
//! A trigger is kept as a schedule whose `on_event` is set; its state is the log position
//! it has read through and what it holds (debounced events, a batch). The scheduler reads
//! the events after that position and writes, in one advance, the new position, a fire per
//! event it matched (the run it started, or why none) and the runs — only one process wins
//! an advance, so an event starts its run once. See DESIGN §16.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use stepwright_core::Timestamp;
use stepwright_core::store::event::StoredEvent;

use crate::spec::micros;

/// The most events a batch may hold.
pub const MAX_BATCH: usize = 1_000;

/// What a trigger says.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TriggerSpec {
    /// The event name it reads, or a pattern: `*` stands for any run of characters
    /// (`ticket.*`, `*`).
    pub event: String,
    /// A filter over the event (`event.payload.priority != "low"`), in the host's expression
    /// language: only events it holds for start runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when: Option<String>,
    /// The input of each run: a template that sees `event` (`name`, `seq`, `payload`,
    /// `received_at`) and `events` (all the events a run stands for). Without one, a run's
    /// input is the event's payload (a batch's: the list of its events).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<Value>,
    /// One run for the last event of a quiet period.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub debounce: Option<Debounce>,
    /// One run for several events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<Batch>,
    /// At most this many runs of the trigger with the same key execute at once; the rest
    /// wait their turn (the engine's concurrency groups).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<KeyedLimit>,
}

/// A debounce: events with the same key collapse into one run, started `period` after the
/// last of them (each new event restarts the period), with the last event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Debounce {
    /// A template over the event giving the group (`{{ event.payload.customer }}`); none:
    /// one group for the trigger.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// The quiet period (microseconds).
    pub period_us: i64,
}

/// A batch: events are collected and start one run when `max` have come or `within` has
/// passed since the first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Batch {
    /// At most this many events in one run.
    pub max: usize,
    /// At most this long after the first event (microseconds).
    pub within_us: i64,
}

/// A concurrency limit per key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyedLimit {
    /// A template over the event giving the group; none: one group for the trigger.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// How many runs of a group execute at once.
    pub limit: u32,
}

impl TriggerSpec {
    /// A trigger on `event` with no filter, input template, debounce, batch or limit.
    pub fn on(event: &str) -> Self {
        Self { event: event.to_owned(), when: None, input: None, debounce: None, batch: None, concurrency: None }
    }

    /// Checks what a file or an API call gave: a pattern, positive periods, a batch of 1 to
    /// [`MAX_BATCH`], a limit of at least 1, debounce and batch not both.
    pub fn check(&self) -> Result<(), String> {
        if self.event.is_empty() {
            return Err("a trigger's `event` must not be empty".into());
        }
        if let Some(debounce) = &self.debounce
            && debounce.period_us <= 0
        {
            return Err("a debounce `period` must be longer than zero".into());
        }
        if let Some(batch) = &self.batch {
            if batch.max == 0 || batch.max > MAX_BATCH {
                return Err(format!("a batch's `max` must be 1 to {MAX_BATCH}, not {}", batch.max));
            }
            if batch.within_us <= 0 {
                return Err("a batch's `within` must be longer than zero".into());
            }
        }
        if self.debounce.is_some() && self.batch.is_some() {
            return Err("a trigger debounces or batches, not both".into());
        }
        if self.concurrency.as_ref().is_some_and(|c| c.limit == 0) {
            return Err("a concurrency `limit` must be at least 1".into());
        }
        Ok(())
    }

    /// Whether an event's name is one this trigger reads.
    pub fn reads(&self, name: &str) -> bool {
        name_matches(&self.event, name)
    }

    /// The debounce period.
    pub fn debounce_period(&self) -> Option<Duration> {
        self.debounce.as_ref().map(|d| Duration::from_micros(d.period_us.max(0) as u64))
    }

    /// The default input of a run for `events` (see [`TriggerSpec::input`]).
    pub fn default_input(&self, events: &[StoredEvent]) -> Value {
        match (&self.batch, events) {
            (None, [.., last]) => last.payload.clone(),
            _ => Value::Array(events.iter().map(event_value).collect()),
        }
    }
}

/// Whether `name` matches `pattern`, where `*` stands for any run of characters.
pub fn name_matches(pattern: &str, name: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == name;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !name.starts_with(first) || name.len() < first.len() + last.len() || !name.ends_with(last) {
        return false;
    }
    let mut rest = &name[first.len()..name.len() - last.len()];
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    true
}

/// An event as templates and filters see it: `name`, `seq`, `payload`, `received_at`.
pub fn event_value(event: &StoredEvent) -> Value {
    json!({
        "name": event.name,
        "seq": event.seq,
        "payload": event.payload,
        "received_at": crate::format_instant(event.received_at),
    })
}

/// What a template over events sees: `event` (the last) and `events`.
pub fn events_context(events: &[StoredEvent]) -> Value {
    json!({
        "event": events.last().map(event_value).unwrap_or(Value::Null),
        "events": events.iter().map(event_value).collect::<Vec<_>>(),
    })
}

/// An event held by a debounce until its group is quiet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Held {
    /// The last event of the group.
    pub event: StoredEvent,
    /// When it starts its run unless another comes.
    pub due: Timestamp,
}

/// What the scheduler keeps for a trigger between advances.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TriggerState {
    /// The last event of the log read (every later one is still to read).
    #[serde(default)]
    pub read_through: u64,
    /// Debounced events by group.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub held: BTreeMap<String, Held>,
    /// The batch being collected, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub batch: Vec<StoredEvent>,
}

impl TriggerState {
    /// When something held becomes due: the earliest debounce, the batch's deadline.
    pub fn next_due(&self, spec: &TriggerSpec) -> Option<Timestamp> {
        let held = self.held.values().map(|held| held.due).min();
        let batch = match (&spec.batch, self.batch.first()) {
            (Some(batch), Some(first)) => Some(first.received_at.plus(Duration::from_micros(batch.within_us as u64))),
            _ => None,
        };
        match (held, batch) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// A debounce's period as stored.
pub fn period_us(period: Duration) -> i64 {
    micros(period)
}

#[cfg(test)]
mod tests {
    use super::name_matches;

    #[test]
    fn patterns_match_names_by_their_stars() {
        assert!(name_matches("ticket.created", "ticket.created"));
        assert!(!name_matches("ticket.created", "ticket.created2"));
        assert!(name_matches("ticket.*", "ticket.created"));
        assert!(name_matches("ticket.*", "ticket."));
        assert!(!name_matches("ticket.*", "tickets.created"));
        assert!(name_matches("*", "anything"));
        assert!(name_matches("*.created", "order.created"));
        assert!(!name_matches("*.created", "order.updated"));
        assert!(name_matches("a*b*c", "a-x-b-y-c"));
        assert!(!name_matches("a*b*c", "a-x-c"));
        assert!(!name_matches("ab*ba", "aba"));
    }
}
