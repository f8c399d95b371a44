//! What a schedule says (its spec, kept as the store's `spec`) and what the scheduler keeps
//! between ticks (its state, the store's `state`), and the decision for each tick — a pure
//! function of the tick, the time, and whether the schedule's last run is still going.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::Digest;
use stepwright_core::store::schedule::ScheduleKey;
use stepwright_core::{RunId, Timestamp};

use crate::cadence::{Cadence, Tick};

/// What a tick does while the schedule's previous run is still going.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Overlap {
    /// The default: the tick starts nothing (recorded `overlap`).
    #[default]
    Skip,
    /// The tick waits; when the run ends, it starts. One waits at most: a later tick while
    /// one waits starts nothing (recorded `buffer_full`).
    BufferOne,
    /// Every tick waits, in order (at most [`MAX_BUFFERED`]), each starting when the run
    /// before it ends.
    BufferAll,
    /// The running run is asked to cancel, and the tick starts a new one.
    CancelOther,
    /// The tick starts a run alongside.
    AllowAll,
}

/// How many ticks `buffer_all` keeps waiting; past it, a tick is recorded `buffer_full`.
pub const MAX_BUFFERED: usize = 1_000;

/// The default catch-up window: a tick found late by more than this (the processes were
/// all down, or the store unreachable) starts nothing and is recorded
/// `outside_catchup_window`. A minute covers a restart or a deploy; a longer outage must not
/// start a burst of stale runs unless the schedule asks for it.
pub const DEFAULT_CATCHUP_WINDOW: Duration = Duration::from_secs(60);

/// A schedule: when, with what input, and what to do about overlaps, outages and failures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleSpec {
    /// When it ticks.
    pub cadence: Cadence,
    /// No tick before this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<Timestamp>,
    /// No tick after this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<Timestamp>,
    /// Each tick fires up to this much after its time (microseconds), spread by a hash of the
    /// schedule and the tick, so every process agrees and the load of many schedules that
    /// share a time spreads.
    #[serde(default)]
    pub jitter_us: i64,
    /// The input of each run: a template that sees the tick (`tick.at`, `tick.local`,
    /// `tick.schedule`), rendered by the host.
    #[serde(default)]
    pub input: Value,
    /// What a tick does while the last run still goes.
    #[serde(default)]
    pub overlap: Overlap,
    /// How late a tick may still start a run (microseconds).
    #[serde(default = "default_catchup_us")]
    pub catchup_window_us: i64,
    /// A run of this schedule that fails pauses it.
    #[serde(default)]
    pub pause_on_failure: bool,
}

fn default_catchup_us() -> i64 {
    micros(DEFAULT_CATCHUP_WINDOW)
}

/// A duration in microseconds, saturating.
pub fn micros(duration: Duration) -> i64 {
    i64::try_from(duration.as_micros()).unwrap_or(i64::MAX)
}

impl ScheduleSpec {
    /// A spec with the defaults around `cadence`.
    pub fn new(cadence: Cadence) -> Self {
        Self {
            cadence,
            start: None,
            end: None,
            jitter_us: 0,
            input: Value::Null,
            overlap: Overlap::default(),
            catchup_window_us: default_catchup_us(),
            pause_on_failure: false,
        }
    }

    /// How long after its time `tick` of schedule `key` fires: in `[0, jitter)`, the same in
    /// every process.
    pub fn jitter_of(&self, key: &ScheduleKey, tick: Timestamp) -> Duration {
        if self.jitter_us <= 0 {
            return Duration::ZERO;
        }
        let digest = sha2::Sha256::digest(format!("{key}\u{0}{}", tick.as_micros()).as_bytes());
        let mut word = [0u8; 8];
        word.copy_from_slice(&digest[..8]);
        Duration::from_micros(u64::from_le_bytes(word) % self.jitter_us.unsigned_abs())
    }

    /// When `tick` fires: its time plus its jitter.
    pub fn fires_at(&self, key: &ScheduleKey, tick: &Tick) -> Timestamp {
        tick.at.plus(self.jitter_of(key, tick.at))
    }
}

/// A tick waiting for the run before it to end.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Waiting {
    /// The tick's time.
    pub at: Timestamp,
    /// Its reading.
    pub local: String,
}

/// What the scheduler keeps between ticks.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduleState {
    /// Every tick up to this one is decided (`None`: none yet; the first is the first
    /// after the schedule's creation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_through: Option<Timestamp>,
    /// The run the last started tick started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_run: Option<RunId>,
    /// Ticks waiting for the last run to end (`buffer_one`, `buffer_all`), oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waiting: Vec<Waiting>,
}

/// Why a tick started nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkipReason {
    /// The last run still went (`overlap: skip`).
    Overlap,
    /// The buffer was full.
    BufferFull,
    /// Found later than the catch-up window allows.
    OutsideCatchupWindow,
    /// The schedule was paused.
    Paused,
    /// A reading that did not exist (`dst.gap: skip`).
    DstGap,
}

impl SkipReason {
    /// The reason as recorded.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Overlap => "overlap",
            Self::BufferFull => "buffer_full",
            Self::OutsideCatchupWindow => "outside_catchup_window",
            Self::Paused => "paused",
            Self::DstGap => "dst_gap",
        }
    }
}

/// What one tick does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Start a run.
    Start,
    /// Start a run and ask the running one to cancel.
    StartCancellingOther,
    /// Wait for the running run to end.
    Wait,
    /// Start nothing.
    Skip(SkipReason),
}

/// The decision for a tick that fires at `fires_at`, found at `now`, given whether the
/// schedule is paused, whether its last run still goes, and how many ticks wait already.
pub fn decide(
    spec: &ScheduleSpec,
    tick: &Tick,
    fires_at: Timestamp,
    now: Timestamp,
    paused: bool,
    running: bool,
    waiting: usize,
) -> Decision {
    if tick.in_dst_gap {
        return Decision::Skip(SkipReason::DstGap);
    }
    if paused {
        return Decision::Skip(SkipReason::Paused);
    }
    if now.as_micros() - fires_at.as_micros() > spec.catchup_window_us {
        return Decision::Skip(SkipReason::OutsideCatchupWindow);
    }
    if !running {
        return Decision::Start;
    }
    match spec.overlap {
        Overlap::Skip => Decision::Skip(SkipReason::Overlap),
        Overlap::AllowAll => Decision::Start,
        Overlap::CancelOther => Decision::StartCancellingOther,
        Overlap::BufferOne if waiting == 0 => Decision::Wait,
        Overlap::BufferAll if waiting < MAX_BUFFERED => Decision::Wait,
        Overlap::BufferOne | Overlap::BufferAll => Decision::Skip(SkipReason::BufferFull),
    }
}
