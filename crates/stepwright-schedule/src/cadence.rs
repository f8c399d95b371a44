//! When a schedule ticks: cron expressions matched on the wall clock of a time zone (with an
//! explicit policy for the hour daylight saving skips and the hour it repeats), and fixed
//! intervals with a phase; bounded by a start and an end.
//!
//! A cron expression describes wall-clock readings ("07:00 on weekdays"), so it is matched on
//! a wall-clock timeline (croner over chrono's naive time, read as UTC only to have a
//! timeline without transitions), and each reading is then turned into an instant in the
//! schedule's zone, where daylight saving decides: a reading may not exist (the gap of a
//! spring-forward) or exist twice (the fold of a fall-back).

use std::str::FromStr;
use std::time::Duration;

use chrono::{LocalResult, NaiveDateTime, TimeZone, Utc};
use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};
use serde::{Deserialize, Serialize};
use stepwright_core::Timestamp;

/// What a tick of the daylight-saving gap does: the wall-clock readings of a spring-forward
/// (02:00–02:59 in most of Europe) do not exist.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GapPolicy {
    /// The default: the gap's ticks fire once, at the first instant after the gap (the jump),
    /// as Vixie cron does; a tick that also falls on that instant is the same tick.
    #[default]
    Shift,
    /// The gap's ticks do not fire; they are recorded as skipped (`dst_gap`), once per gap,
    /// at the last microsecond before the jump (a gap has no instants of its own).
    Skip,
}

/// What a tick of the daylight-saving fold does: the wall-clock readings of a fall-back
/// (02:00–02:59 in most of Europe) happen twice.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FoldPolicy {
    /// The default: once, at the first occurrence (a job "at 02:30" runs once that night).
    #[default]
    Once,
    /// At both occurrences (an "every 15 minutes" job keeps its rhythm through the extra hour).
    Twice,
}

/// The daylight-saving policy of a cron schedule.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DstPolicy {
    /// The skipped hour.
    #[serde(default)]
    pub gap: GapPolicy,
    /// The repeated hour.
    #[serde(default)]
    pub fold: FoldPolicy,
}

/// How often a schedule ticks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Cadence {
    /// A cron expression (5 fields, or 6 with seconds first) in an IANA time zone.
    Cron {
        /// The expression, as written.
        expression: String,
        /// The IANA zone its readings are in (`UTC` by default).
        timezone: String,
        /// What the skipped and the repeated hour do.
        #[serde(default)]
        dst: DstPolicy,
    },
    /// Every `period` (at least a second), at `phase` past each multiple of the period since
    /// the Unix epoch (`every: 1h, phase: 15m` ticks at :15 of every hour, UTC).
    Every {
        /// Microseconds between ticks.
        period_us: i64,
        /// Microseconds past each multiple of the period.
        phase_us: i64,
    },
}

/// Why a cadence cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CadenceError {
    /// The cron expression did not parse.
    #[error("cron expression {expression:?}: {reason}")]
    Cron {
        /// The expression.
        expression: String,
        /// What the parser said.
        reason: String,
    },
    /// The zone is not in the IANA database.
    #[error("time zone {0:?} is not an IANA zone name (like Europe/Berlin or America/New_York)")]
    Zone(String),
    /// The period is under a second, or the phase is not less than the period.
    #[error("{0}")]
    Interval(String),
}

/// One tick of a schedule: the instant it is due (before jitter), and the wall-clock reading
/// it stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tick {
    /// When it is due; unique per schedule (the key a tick is recorded under).
    pub at: Timestamp,
    /// The reading in the schedule's zone, RFC 3339 with its offset (`2026-03-29T03:00:00+02:00`);
    /// for a tick of the gap, the reading that did not exist.
    pub local: String,
    /// A tick of the daylight-saving gap under [`GapPolicy::Skip`]: recorded, never fired.
    pub in_dst_gap: bool,
}

/// A parsed cadence, ready to answer "what is the next tick after this instant".
#[derive(Debug, Clone)]
pub struct Ticker {
    kind: TickerKind,
    start: Option<Timestamp>,
    end: Option<Timestamp>,
}

#[derive(Debug, Clone)]
enum TickerKind {
    Cron { cron: Box<Cron>, zone: chrono_tz::Tz, dst: DstPolicy },
    Every { period: i64, phase: i64 },
}

/// How far ahead a cron search looks before it says the expression never matches again
/// (`0 0 30 2 *`, the 30th of February).
const HORIZON_YEARS: i32 = 5;

impl Cadence {
    /// Every `period` at `phase`.
    pub fn every(period: Duration, phase: Duration) -> Self {
        let micros = |d: Duration| i64::try_from(d.as_micros()).unwrap_or(i64::MAX);
        Self::Every { period_us: micros(period), phase_us: micros(phase) }
    }

    /// A cron expression in `timezone`, with the default daylight-saving policy.
    pub fn cron(expression: &str, timezone: &str) -> Self {
        Self::Cron { expression: expression.to_owned(), timezone: timezone.to_owned(), dst: DstPolicy::default() }
    }

    /// Checks the cadence and makes its ticker, bounded by `start` and `end` (inclusive).
    pub fn ticker(&self, start: Option<Timestamp>, end: Option<Timestamp>) -> Result<Ticker, CadenceError> {
        let kind = match self {
            Self::Cron { expression, timezone, dst } => {
                let cron = CronParser::builder()
                    .seconds(Seconds::Optional)
                    .year(Year::Disallowed)
                    .build()
                    .parse(expression)
                    .map_err(|e| CadenceError::Cron { expression: expression.clone(), reason: e.to_string() })?;
                let zone = chrono_tz::Tz::from_str(timezone).map_err(|_| CadenceError::Zone(timezone.clone()))?;
                // `0 0 30 2 *` parses and never matches a date: refused, not kept for ever.
                let reference = chrono::NaiveDate::from_ymd_opt(2000, 1, 1).and_then(|d| d.and_hms_opt(0, 0, 0));
                if reference.and_then(|reference| next_reading(&cron, reference)).is_none() {
                    return Err(CadenceError::Cron {
                        expression: expression.clone(),
                        reason: "it matches no date (a day the month never has?), so it would never fire".into(),
                    });
                }
                TickerKind::Cron { cron: Box::new(cron), zone, dst: *dst }
            }
            Self::Every { period_us, phase_us } => {
                if *period_us < 1_000_000 {
                    return Err(CadenceError::Interval(format!(
                        "`every` must be at least 1s, not {}",
                        humane(*period_us)
                    )));
                }
                if *phase_us < 0 || phase_us >= period_us {
                    return Err(CadenceError::Interval(format!(
                        "`phase` ({}) must be less than `every` ({})",
                        humane(*phase_us),
                        humane(*period_us)
                    )));
                }
                TickerKind::Every { period: *period_us, phase: *phase_us }
            }
        };
        Ok(Ticker { kind, start, end })
    }
}

fn humane(micros: i64) -> String {
    format!("{:?}", Duration::from_micros(micros.max(0).unsigned_abs()))
}

impl Ticker {
    /// The first tick strictly after `after`, within the start and the end; `None` when there
    /// is none (past the end, or a cron expression that never matches again).
    pub fn next_after(&self, after: Timestamp) -> Option<Tick> {
        // A start bound: the first tick at or after it.
        let after = match self.start {
            Some(start) if start > after => Timestamp::from_micros(start.as_micros() - 1),
            _ => after,
        };
        let tick = match &self.kind {
            TickerKind::Every { period, phase } => {
                let since = after.as_micros() - phase;
                let k = since.div_euclid(*period) + 1;
                let at = Timestamp::from_micros(k * period + phase);
                Some(Tick { at, local: rfc3339(at, &chrono_tz::Tz::UTC), in_dst_gap: false })
            }
            TickerKind::Cron { cron, zone, dst } => next_cron(cron, *zone, *dst, after),
        }?;
        match self.end {
            Some(end) if tick.at > end => None,
            _ => Some(tick),
        }
    }

    /// The ticks in `(after, until]`, at most `limit` of them.
    pub fn between(&self, after: Timestamp, until: Timestamp, limit: usize) -> Vec<Tick> {
        let mut ticks = Vec::new();
        let mut cursor = after;
        while ticks.len() < limit {
            match self.next_after(cursor) {
                Some(tick) if tick.at <= until => {
                    cursor = tick.at;
                    ticks.push(tick);
                }
                _ => break,
            }
        }
        ticks
    }
}

fn to_chrono(at: Timestamp) -> chrono::DateTime<Utc> {
    Utc.timestamp_micros(at.as_micros()).single().unwrap_or(chrono::DateTime::<Utc>::MIN_UTC)
}

fn from_chrono<Z: TimeZone>(at: &chrono::DateTime<Z>) -> Timestamp {
    Timestamp::from_micros(at.timestamp_micros())
}

pub(crate) fn rfc3339(at: Timestamp, zone: &chrono_tz::Tz) -> String {
    to_chrono(at).with_timezone(zone).to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
}

/// The next wall-clock reading the expression matches strictly after `reading`.
fn next_reading(cron: &Cron, reading: NaiveDateTime) -> Option<NaiveDateTime> {
    use chrono::Timelike;
    // Whole seconds: croner keeps the fraction of the second it starts from, and a tick is
    // on its second (07:00:00, not 07:00:00.497).
    let whole = reading.with_nanosecond(0).unwrap_or(reading);
    cron.find_next_occurrence(&Utc.from_utc_datetime(&whole), false).ok().map(|d| d.naive_utc())
}

/// The next cron tick strictly after `after` (see the module's comment).
fn next_cron(cron: &Cron, zone: chrono_tz::Tz, dst: DstPolicy, after: Timestamp) -> Option<Tick> {
    let now = to_chrono(after).with_timezone(&zone);
    let horizon = now.naive_local() + chrono::Duration::days(366 * i64::from(HORIZON_YEARS));
    // The searches: from the reading of `after`; under `FoldPolicy::Twice` also from its
    // reading in the offset in force a few hours later, which, inside the first pass of a
    // fold, brings the fold's second pass (readings already passed once) into view.
    let mut starts = vec![now.naive_local()];
    if dst.fold == FoldPolicy::Twice {
        let later = (to_chrono(after) + chrono::Duration::hours(3)).with_timezone(&zone);
        let shifted = to_chrono(after).naive_utc() + chrono::Duration::seconds(i64::from(offset_seconds(&later)));
        if shifted != starts[0] {
            starts.push(shifted);
        }
    }
    starts
        .into_iter()
        .filter_map(|start| first_instant_after(cron, zone, dst, start, after, horizon))
        .min_by_key(|t| t.at)
}

fn offset_seconds(at: &chrono::DateTime<chrono_tz::Tz>) -> i32 {
    use chrono::Offset;
    at.offset().fix().local_minus_utc()
}

/// Walks the readings after `start` until one resolves to an instant after `after`.
fn first_instant_after(
    cron: &Cron,
    zone: chrono_tz::Tz,
    dst: DstPolicy,
    start: NaiveDateTime,
    after: Timestamp,
    horizon: NaiveDateTime,
) -> Option<Tick> {
    let mut reading = start;
    loop {
        reading = next_reading(cron, reading)?;
        if reading > horizon {
            return None;
        }
        match zone.from_local_datetime(&reading) {
            LocalResult::Single(at) => {
                let at = from_chrono(&at);
                if at > after {
                    return Some(Tick { at, local: rfc3339(at, &zone), in_dst_gap: false });
                }
            }
            LocalResult::Ambiguous(first, second) => {
                let (first, second) = (from_chrono(&first), from_chrono(&second));
                if first > after {
                    return Some(Tick { at: first, local: rfc3339(first, &zone), in_dst_gap: false });
                }
                if dst.fold == FoldPolicy::Twice && second > after {
                    return Some(Tick { at: second, local: rfc3339(second, &zone), in_dst_gap: false });
                }
            }
            LocalResult::None => {
                // The gap: the first instant after it is where the clocks land.
                let jump = gap_end(zone, reading);
                let local = format!("{}", reading.format("%Y-%m-%dT%H:%M:%S"));
                match dst.gap {
                    GapPolicy::Shift if jump > after => {
                        return Some(Tick { at: jump, local: rfc3339(jump, &zone), in_dst_gap: false });
                    }
                    GapPolicy::Skip => {
                        let at = Timestamp::from_micros(jump.as_micros() - 1);
                        if at > after {
                            return Some(Tick {
                                at,
                                local: format!("{local} (in the daylight-saving gap)"),
                                in_dst_gap: true,
                            });
                        }
                    }
                    GapPolicy::Shift => {}
                }
            }
        }
    }
}

/// The instant a daylight-saving gap ends: the first instant whose reading is past `reading`.
fn gap_end(zone: chrono_tz::Tz, reading: NaiveDateTime) -> Timestamp {
    // Gaps are at most a few hours and end on a whole minute: step a minute at a time.
    use chrono::Timelike;
    let mut probe = reading.with_second(0).and_then(|p| p.with_nanosecond(0)).unwrap_or(reading);
    for _ in 0..(24 * 60) {
        probe += chrono::Duration::minutes(1);
        if let Some(at) = zone.from_local_datetime(&probe).earliest() {
            return from_chrono(&at);
        }
    }
    from_chrono(&Utc.from_utc_datetime(&reading))
}
