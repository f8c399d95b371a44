//! Ticks, checked against instants worked out by hand from the zone rules: Europe/Berlin
//! springs forward at 02:00 CET on 2026-03-29 (01:00 UTC) and falls back at 03:00 CEST on
//! 2026-10-25 (01:00 UTC); America/New_York springs forward at 02:00 EST on 2026-03-08
//! (07:00 UTC) and falls back at 02:00 EDT on 2026-11-01 (06:00 UTC).

use std::time::Duration;

use chrono::{DateTime, Utc};
use stepwright_core::Timestamp;
use stepwright_schedule::{Cadence, DstPolicy, FoldPolicy, GapPolicy, Tick};

fn at(rfc3339: &str) -> Timestamp {
    Timestamp::from_micros(DateTime::parse_from_rfc3339(rfc3339).unwrap().with_timezone(&Utc).timestamp_micros())
}

fn utc(ts: Timestamp) -> String {
    DateTime::<Utc>::from_timestamp_micros(ts.as_micros()).unwrap().to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
}

fn cron(expression: &str, zone: &str, gap: GapPolicy, fold: FoldPolicy) -> Cadence {
    Cadence::Cron { expression: expression.into(), timezone: zone.into(), dst: DstPolicy { gap, fold } }
}

/// The ticks in `(from, to]` as (UTC, local reading, in the gap).
fn ticks(cadence: &Cadence, from: &str, to: &str) -> Vec<(String, String, bool)> {
    let ticker = cadence.ticker(None, None).unwrap();
    ticker.between(at(from), at(to), 1000).into_iter().map(|t: Tick| (utc(t.at), t.local, t.in_dst_gap)).collect()
}

fn times(cadence: &Cadence, from: &str, to: &str) -> Vec<String> {
    ticks(cadence, from, to).into_iter().map(|(utc, _, _)| utc).collect()
}

#[test]
fn a_daily_tick_in_the_skipped_hour_fires_at_the_jump_or_is_recorded_as_skipped() {
    let shift = cron("30 2 * * *", "Europe/Berlin", GapPolicy::Shift, FoldPolicy::Once);
    assert_eq!(
        ticks(&shift, "2026-03-27T12:00:00Z", "2026-03-30T12:00:00Z"),
        [
            ("2026-03-28T01:30:00Z".into(), "2026-03-28T02:30:00+01:00".into(), false),
            ("2026-03-29T01:00:00Z".into(), "2026-03-29T03:00:00+02:00".into(), false),
            ("2026-03-30T00:30:00Z".into(), "2026-03-30T02:30:00+02:00".into(), false),
        ]
    );
    let skip = cron("30 2 * * *", "Europe/Berlin", GapPolicy::Skip, FoldPolicy::Once);
    let found = ticks(&skip, "2026-03-27T12:00:00Z", "2026-03-30T12:00:00Z");
    assert_eq!(found.len(), 3);
    assert_eq!(found[1].0, "2026-03-29T00:59:59.999999Z", "recorded at the last instant before the jump");
    assert!(found[1].1.starts_with("2026-03-29T02:30:00"), "{}", found[1].1);
    assert!(found[1].2, "a gap tick");
    assert!(!found[0].2 && !found[2].2);
}

#[test]
fn the_gaps_ticks_collapse_into_one_at_the_jump() {
    let quarter = cron("*/15 * * * *", "Europe/Berlin", GapPolicy::Shift, FoldPolicy::Once);
    assert_eq!(
        times(&quarter, "2026-03-29T00:20:00Z", "2026-03-29T01:20:00Z"),
        [
            "2026-03-29T00:30:00Z", // 01:30 CET
            "2026-03-29T00:45:00Z", // 01:45 CET
            "2026-03-29T01:00:00Z", // 02:00–02:45 do not exist, and 03:00 CEST is the jump
            "2026-03-29T01:15:00Z", // 03:15 CEST
        ]
    );
}

#[test]
fn a_tick_in_the_repeated_hour_fires_once_by_default_or_twice_when_asked() {
    let once = cron("30 2 * * *", "Europe/Berlin", GapPolicy::Shift, FoldPolicy::Once);
    assert_eq!(
        ticks(&once, "2026-10-24T12:00:00Z", "2026-10-26T12:00:00Z"),
        [
            ("2026-10-25T00:30:00Z".into(), "2026-10-25T02:30:00+02:00".into(), false),
            ("2026-10-26T01:30:00Z".into(), "2026-10-26T02:30:00+01:00".into(), false),
        ]
    );
    let twice = cron("30 2 * * *", "Europe/Berlin", GapPolicy::Shift, FoldPolicy::Twice);
    assert_eq!(
        times(&twice, "2026-10-24T12:00:00Z", "2026-10-26T12:00:00Z"),
        ["2026-10-25T00:30:00Z", "2026-10-25T01:30:00Z", "2026-10-26T01:30:00Z"]
    );
}

#[test]
fn every_half_hour_keeps_its_rhythm_through_the_repeated_hour_when_asked() {
    let twice = cron("*/30 * * * *", "Europe/Berlin", GapPolicy::Shift, FoldPolicy::Twice);
    assert_eq!(
        times(&twice, "2026-10-24T23:45:00Z", "2026-10-25T02:10:00Z"),
        [
            "2026-10-25T00:00:00Z", // 02:00 CEST
            "2026-10-25T00:30:00Z", // 02:30 CEST
            "2026-10-25T01:00:00Z", // 02:00 CET
            "2026-10-25T01:30:00Z", // 02:30 CET
            "2026-10-25T02:00:00Z", // 03:00 CET
        ]
    );
    let once = cron("*/30 * * * *", "Europe/Berlin", GapPolicy::Shift, FoldPolicy::Once);
    assert_eq!(
        times(&once, "2026-10-24T23:45:00Z", "2026-10-25T02:10:00Z"),
        ["2026-10-25T00:00:00Z", "2026-10-25T00:30:00Z", "2026-10-25T02:00:00Z"],
        "the repeated readings fire the first time only: a gap of an hour and a half in real time"
    );
}

#[test]
fn new_york_both_transitions() {
    let two = cron("0 2 * * *", "America/New_York", GapPolicy::Shift, FoldPolicy::Once);
    assert_eq!(
        times(&two, "2026-03-07T00:00:00Z", "2026-03-09T12:00:00Z"),
        ["2026-03-07T07:00:00Z", "2026-03-08T07:00:00Z", "2026-03-09T06:00:00Z"],
        "02:00 EST; on the 8th 02:00 does not exist: 03:00 EDT (07:00 UTC); then 02:00 EDT"
    );
    let one_thirty = cron("30 1 * * *", "America/New_York", GapPolicy::Shift, FoldPolicy::Twice);
    assert_eq!(
        times(&one_thirty, "2026-10-31T12:00:00Z", "2026-11-02T12:00:00Z"),
        ["2026-11-01T05:30:00Z", "2026-11-01T06:30:00Z", "2026-11-02T06:30:00Z"],
        "01:30 EDT and 01:30 EST on the 1st"
    );
}

#[test]
fn weekdays_are_posix_numbered_and_seconds_are_optional() {
    // 2026-11-23 is a Monday.
    let weekdays = cron("0 7 * * 1-5", "UTC", GapPolicy::Shift, FoldPolicy::Once);
    let found = times(&weekdays, "2026-11-21T00:00:00Z", "2026-11-29T23:00:00Z");
    assert_eq!(found.len(), 5, "{found:?}");
    assert_eq!(found[0], "2026-11-23T07:00:00Z");
    assert_eq!(found[4], "2026-11-27T07:00:00Z");
    let every_20s = cron("*/20 * * * * *", "UTC", GapPolicy::Shift, FoldPolicy::Once);
    assert_eq!(
        times(&every_20s, "2026-11-23T00:00:05Z", "2026-11-23T00:01:00Z"),
        ["2026-11-23T00:00:20Z", "2026-11-23T00:00:40Z", "2026-11-23T00:01:00Z"]
    );
}

#[test]
fn a_tick_is_on_its_second_whatever_the_fraction_searched_from() {
    let daily = cron("0 7 * * *", "Europe/Berlin", GapPolicy::Shift, FoldPolicy::Once);
    assert_eq!(
        ticks(&daily, "2026-11-24T12:34:56.497242Z", "2026-11-26T00:00:00Z"),
        [("2026-11-25T06:00:00Z".into(), "2026-11-25T07:00:00+01:00".into(), false)]
    );
    let every_second = cron("* * * * * *", "UTC", GapPolicy::Shift, FoldPolicy::Once);
    assert_eq!(
        times(&every_second, "2026-11-24T12:00:00.75Z", "2026-11-24T12:00:02Z"),
        ["2026-11-24T12:00:01Z", "2026-11-24T12:00:02Z"]
    );
}

#[test]
fn an_interval_ticks_at_its_phase_within_its_bounds() {
    let hourly = Cadence::every(Duration::from_secs(3600), Duration::from_secs(15 * 60));
    assert_eq!(
        times(&hourly, "2026-11-23T10:15:00Z", "2026-11-23T13:00:00Z"),
        ["2026-11-23T11:15:00Z", "2026-11-23T12:15:00Z"],
        "strictly after the start of the range"
    );
    let bounded = hourly.ticker(Some(at("2026-11-23T12:00:00Z")), Some(at("2026-11-23T14:15:00Z"))).unwrap();
    let found: Vec<String> = bounded
        .between(at("2026-11-23T00:00:00Z"), at("2026-11-24T00:00:00Z"), 100)
        .into_iter()
        .map(|t| utc(t.at))
        .collect();
    assert_eq!(
        found,
        ["2026-11-23T12:15:00Z", "2026-11-23T13:15:00Z", "2026-11-23T14:15:00Z"],
        "start and end inclusive"
    );
    assert_eq!(bounded.next_after(at("2026-11-23T14:15:00Z")), None, "none after the end");
}

#[test]
fn bad_cadences_say_what_is_wrong() {
    let error = |cadence: Cadence| cadence.ticker(None, None).unwrap_err().to_string();
    assert!(error(Cadence::cron("61 * * * *", "UTC")).contains("cron expression \"61 * * * *\""));
    assert!(error(Cadence::cron("0 7 * * *", "Mars/Olympus")).contains("not an IANA zone name"));
    assert!(error(Cadence::every(Duration::from_millis(500), Duration::ZERO)).contains("at least 1s"));
    assert!(error(Cadence::every(Duration::from_secs(60), Duration::from_secs(60))).contains("must be less than"));
    for never in ["0 0 30 2 *", "0 0 31 4 *", "0 0 31 11 *"] {
        let said = error(Cadence::cron(never, "UTC"));
        assert!(said.contains("matches no date") && said.contains("never fire"), "{never}: {said}");
    }
    // Rare is not never: the 29th of February comes every four years.
    let leap = Cadence::cron("0 0 29 2 *", "UTC").ticker(None, None).unwrap();
    assert_eq!(leap.next_after(at("2026-01-01T00:00:00Z")).map(|t| utc(t.at)), Some("2028-02-29T00:00:00Z".into()));
}

/// What a schedule lists as its next fire is a tick that fires: under `gap: skip`, the
/// tick of the spring-forward gap is due (to be recorded as skipped), and the next fire is
/// the day after.
#[test]
fn the_next_fire_passes_over_a_skipped_gap_tick() {
    use stepwright_core::store::schedule::{ScheduleKey, ScheduleRecord};
    let spec =
        stepwright_schedule::ScheduleSpec::new(cron("30 2 * * *", "Europe/Berlin", GapPolicy::Skip, FoldPolicy::Once));
    let state =
        stepwright_schedule::ScheduleState { decided_through: Some(at("2026-03-28T12:00:00Z")), ..Default::default() };
    let key = ScheduleKey { tenant: None, name: "w/nightly".into() };
    let ticker = spec.cadence.ticker(None, None).unwrap();
    let due = ticker.next_after(at("2026-03-28T12:00:00Z")).unwrap();
    assert!(due.in_dst_gap, "2026-03-29 02:30 does not exist in Berlin: {due:?}");
    let record = ScheduleRecord {
        key,
        workflow: "w".into(),
        definition_hash: stepwright_core::ContentHash::of_bytes(b"w"),
        spec: serde_json::to_value(&spec).unwrap(),
        state: serde_json::to_value(&state).unwrap(),
        paused: false,
        on_event: None,
        due_at: Some(due.at),
        version: 1,
        created_at: at("2026-03-01T00:00:00Z"),
        updated_at: at("2026-03-01T00:00:00Z"),
    };
    let next = stepwright_schedule::next_fire(&record, at("2026-03-28T12:00:00Z")).unwrap();
    assert_eq!(utc(next), "2026-03-30T00:30:00Z", "02:30 CEST on the 30th");
}
