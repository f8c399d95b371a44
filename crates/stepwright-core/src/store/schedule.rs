//! Schedules and their ticks: the table of schedules (what starts a workflow when, and the
//! scheduler's state for it) and the record of every tick (the run it started, or why it
//! started none).
//!
//! The store knows nothing of cron or overlap policies (`stepwright-schedule` does): a
//! schedule's `spec` and `state` are JSON it keeps. What it guarantees is what makes a tick
//! fire exactly once whatever the number of processes: [`ScheduleStore::advance_schedule`]
//! writes the schedule's new state, its tick records and the runs they start in one
//! transaction, only if nobody advanced the schedule since it was read (its `version`), and a
//! tick is recorded once under (schedule, tick time).

use std::collections::BTreeMap;
use std::sync::Mutex;

use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::event::{EventFire, EventLog, fire_recorded};
use super::{Store, StoreError};
use crate::hash::ContentHash;
use crate::ids::Timestamp;
use crate::journal::RunRecord;

pub use super::tick::{ScheduleKey, TickOutcome};

/// A schedule as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScheduleRecord {
    /// Its key.
    pub key: ScheduleKey,
    /// The workflow its runs execute.
    pub workflow: String,
    /// The definition its runs are pinned to (kept in the store's definitions).
    pub definition_hash: ContentHash,
    /// When and how it starts runs (`stepwright-schedule` reads it).
    pub spec: Value,
    /// The scheduler's state: the next tick to decide, the run of the last tick, the ticks
    /// waiting for it (`stepwright-schedule` reads it).
    pub state: Value,
    /// Paused: its ticks are recorded as skipped.
    pub paused: bool,
    /// A trigger: the event name (or pattern) it starts runs on; it is due whenever an
    /// event is stored in its tenant (`None`: a schedule on a clock).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_event: Option<String>,
    /// When the scheduler has something to do for it next (`None`: never again).
    pub due_at: Option<Timestamp>,
    /// Grows with every change; an advance names the version it read.
    pub version: u64,
    /// When it was created.
    pub created_at: Timestamp,
    /// When it last changed.
    pub updated_at: Timestamp,
}

/// A tick's record: kept once per (schedule, tick time).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TickRecord {
    /// The tick's time (its nominal instant, before jitter).
    pub at: Timestamp,
    /// The tick's wall-clock reading in the schedule's zone.
    pub local: String,
    /// What it did.
    #[serde(flatten)]
    pub outcome: TickOutcome,
    /// When it was recorded.
    pub recorded_at: Timestamp,
}

/// One step of a schedule: its new state, the ticks decided and the runs they start.
#[derive(Debug, Clone)]
pub struct ScheduleAdvance {
    /// The schedule.
    pub key: ScheduleKey,
    /// The version this advance was decided from: if the schedule changed since, nothing is
    /// written.
    pub version: u64,
    /// The new state.
    pub state: Value,
    /// Paused or not from now (a failure may pause it).
    pub paused: bool,
    /// When the scheduler has something to do for it next.
    pub due_at: Option<Timestamp>,
    /// The ticks decided.
    pub ticks: Vec<TickRecord>,
    /// A trigger's fires: what it did with each event it read (unique per trigger and
    /// event, as ticks are per schedule and time).
    pub fires: Vec<EventFire>,
    /// A trigger's position in its tenant's event log after this advance: if an event
    /// after it is stored by the time the advance is written, the trigger stays due (`due_at`
    /// is now), so an event stored while the advance was decided is never left unread.
    pub read_through: Option<u64>,
    /// The runs they start (created pending, for any worker to claim).
    pub runs: Vec<RunRecord>,
    /// A backfill: a tick recorded as skipped may become started (the run the outage or
    /// the pause kept it from); a started tick stays as it is.
    pub replace_skipped: bool,
    /// Now.
    pub at: Timestamp,
}

/// Schedules, kept where the runs are.
pub trait ScheduleStore: Send + Sync + 'static {
    /// Creates or replaces a schedule (a replacement's version grows past the stored one, so
    /// an advance decided from the old one writes nothing).
    fn put_schedule(&self, record: ScheduleRecord) -> BoxFuture<'_, Result<(), StoreError>>;

    /// One schedule.
    fn schedule<'a>(&'a self, key: &'a ScheduleKey) -> BoxFuture<'a, Result<Option<ScheduleRecord>, StoreError>>;

    /// The schedules of a tenant (`None`: every schedule), by name.
    fn schedules<'a>(&'a self, tenant: Option<&'a str>) -> BoxFuture<'a, Result<Vec<ScheduleRecord>, StoreError>>;

    /// Deletes a schedule and its tick records; whether it existed.
    fn delete_schedule<'a>(&'a self, key: &'a ScheduleKey) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// Up to `limit` schedules with something to do at `now` (`due_at <= now`), the most
    /// overdue first.
    fn due_schedules(&self, now: Timestamp, limit: usize) -> BoxFuture<'_, Result<Vec<ScheduleRecord>, StoreError>>;

    /// The earliest `due_at` of any schedule (`None`: none is ever due): how long an idle
    /// scheduler may sleep.
    fn next_due(&self) -> BoxFuture<'_, Result<Option<Timestamp>, StoreError>>;

    /// Writes an advance in one transaction (state, ticks, runs), if the schedule is still
    /// at `advance.version`: `true` when written, `false` when another process advanced (or
    /// replaced, or deleted) it first. A tick recorded already is an error (nothing written).
    fn advance_schedule(&self, advance: ScheduleAdvance) -> BoxFuture<'_, Result<bool, StoreError>>;

    /// A schedule's tick records, newest first, at most `limit`.
    fn ticks<'a>(&'a self, key: &'a ScheduleKey, limit: usize) -> BoxFuture<'a, Result<Vec<TickRecord>, StoreError>>;
}

/// A schedule's tick records by tick time.
type Ticks = BTreeMap<Timestamp, TickRecord>;

/// Schedules in this process's memory, for the in-memory store.
#[derive(Debug, Default)]
pub struct InMemorySchedules {
    /// By key: the schedule and its ticks by time.
    table: Mutex<BTreeMap<ScheduleKey, (ScheduleRecord, Ticks)>>,
}

impl InMemorySchedules {
    /// Puts a schedule (see [`ScheduleStore::put_schedule`]).
    pub fn put(&self, mut record: ScheduleRecord) {
        let mut table = self.table.lock().expect("poisoned");
        let key = record.key.clone();
        match table.get_mut(&key) {
            Some((stored, _)) => {
                record.version = record.version.max(stored.version + 1);
                *stored = record;
            }
            None => {
                table.insert(key, (record, BTreeMap::new()));
            }
        }
    }

    /// One schedule.
    pub fn get(&self, key: &ScheduleKey) -> Option<ScheduleRecord> {
        self.table.lock().expect("poisoned").get(key).map(|(record, _)| record.clone())
    }

    /// A tenant's schedules.
    pub fn list(&self, tenant: Option<&str>) -> Vec<ScheduleRecord> {
        let table = self.table.lock().expect("poisoned");
        table
            .values()
            .filter(|(record, _)| tenant.is_none() || record.key.tenant.as_deref() == tenant)
            .map(|(record, _)| record.clone())
            .collect()
    }

    /// Deletes a schedule.
    pub fn delete(&self, key: &ScheduleKey) -> bool {
        self.table.lock().expect("poisoned").remove(key).is_some()
    }

    /// The due schedules.
    pub fn due(&self, now: Timestamp, limit: usize) -> Vec<ScheduleRecord> {
        let table = self.table.lock().expect("poisoned");
        let mut due: Vec<ScheduleRecord> = table
            .values()
            .filter(|(record, _)| record.due_at.is_some_and(|at| at <= now))
            .map(|(record, _)| record.clone())
            .collect();
        due.sort_by_key(|record| record.due_at);
        due.truncate(limit);
        due
    }

    /// Makes a tenant's triggers due at `now` (an event was stored).
    pub fn wake_triggers(&self, tenant: Option<&str>, now: Timestamp) {
        let mut table = self.table.lock().expect("poisoned");
        for (record, _) in table.values_mut() {
            if record.on_event.is_some() && record.key.tenant.as_deref() == tenant {
                record.due_at = Some(record.due_at.map_or(now, |at| at.min(now)));
            }
        }
    }

    /// The earliest due time.
    pub fn next_due(&self) -> Option<Timestamp> {
        self.table.lock().expect("poisoned").values().filter_map(|(record, _)| record.due_at).min()
    }

    /// Applies an advance: the schedule's part under the table's lock, the runs through
    /// `runs` (created while the lock is held, so no other advance interleaves).
    pub(crate) fn advance(
        &self,
        advance: ScheduleAdvance,
        runs: &dyn Store,
        events: &Mutex<EventLog>,
    ) -> Result<bool, StoreError> {
        let mut table = self.table.lock().expect("poisoned");
        let mut events = events.lock().expect("poisoned");
        let Some((record, ticks)) = table.get_mut(&advance.key) else { return Ok(false) };
        if record.version != advance.version {
            return Ok(false);
        }
        let taken = |tick: &TickRecord| match ticks.get(&tick.at) {
            None => false,
            Some(kept) => {
                !(advance.replace_skipped
                    && matches!(kept.outcome, TickOutcome::Skipped { .. })
                    && matches!(tick.outcome, TickOutcome::Started { .. }))
            }
        };
        if let Some(tick) = advance.ticks.iter().find(|tick| taken(tick)) {
            return Err(tick_recorded(&advance.key, tick.at));
        }
        let tenant = advance.key.tenant.clone().unwrap_or_default();
        let fire_key = |fire: &EventFire| (tenant.clone(), advance.key.name.clone(), fire.event);
        if let Some(fire) = advance.fires.iter().find(|fire| events.fires.contains_key(&fire_key(fire))) {
            return Err(fire_recorded(&advance.key, fire.event));
        }
        for run in &advance.runs {
            // The in-memory store creates at once (a future that is ready).
            futures_util::FutureExt::now_or_never(runs.create_run(run.clone())).unwrap_or(Ok(()))?;
        }
        for tick in advance.ticks {
            ticks.insert(tick.at, tick);
        }
        for fire in advance.fires {
            events.fires.insert(fire_key(&fire), fire);
        }
        record.state = advance.state;
        record.paused = advance.paused;
        record.due_at = advance.due_at;
        if let Some(position) = advance.read_through
            && events.has_after(advance.key.tenant.as_deref(), position)
        {
            record.due_at = Some(advance.at);
        }
        record.version += 1;
        record.updated_at = advance.at;
        Ok(true)
    }

    /// A schedule's ticks, newest first.
    pub fn ticks(&self, key: &ScheduleKey, limit: usize) -> Vec<TickRecord> {
        let table = self.table.lock().expect("poisoned");
        table.get(key).map(|(_, ticks)| ticks.values().rev().take(limit).cloned().collect()).unwrap_or_default()
    }
}

/// The error of an advance that records a tick recorded already.
pub fn tick_recorded(key: &ScheduleKey, at: Timestamp) -> StoreError {
    StoreError::Backend {
        doing: "recording a schedule's tick".into(),
        source: format!("schedule {key} has a record of its tick at {} already", at.as_micros()).into(),
    }
}
