//! A file's `schedules:` compile to the scheduler's specs, with the documented defaults, and
//! an input template renders against a tick.

use std::time::Duration;

use serde_json::json;
use stepwright_schedule::{Cadence, DstPolicy, FoldPolicy, GapPolicy, Overlap, ScheduleSpec};

const FILE: &str = r#"
workflow: digest
schedules:
  weekday-morning:
    cron: "0 7 * * 1-5"
    timezone: Europe/Berlin
    dst: { gap: skip, fold: twice }
    input: { day: "{{ tick.local }}", from: "{{ tick.schedule }}", fixed: 3 }
    overlap: cancel_other
    catchup_window: 1h
    jitter: 30s
    start: "2026-12-01T00:00:00+01:00"
    pause_on_failure: true
  often:
    every: 15m
    phase: 5m
steps:
  - id: a
    set: "{{ input }}"
"#;

#[test]
fn schedules_compile_with_their_defaults() {
    let loaded = stepwright_flow::load_source(FILE, "digest.yaml").unwrap_or_else(|e| panic!("{e}"));
    let names: Vec<&str> = loaded.schedules.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["often", "weekday-morning"], "by name");
    let often = &loaded.schedules[0].spec;
    assert_eq!(
        often,
        &ScheduleSpec::new(Cadence::every(Duration::from_secs(900), Duration::from_secs(300))),
        "the defaults: skip on overlap, a minute's catch-up, no jitter, no bounds"
    );
    let morning = &loaded.schedules[1].spec;
    assert_eq!(
        morning.cadence,
        Cadence::Cron {
            expression: "0 7 * * 1-5".into(),
            timezone: "Europe/Berlin".into(),
            dst: DstPolicy { gap: GapPolicy::Skip, fold: FoldPolicy::Twice },
        }
    );
    assert_eq!(morning.overlap, Overlap::CancelOther);
    assert_eq!((morning.catchup_window_us, morning.jitter_us), (3_600_000_000, 30_000_000));
    assert_eq!(morning.start, stepwright_schedule::parse_instant("2026-11-30T23:00:00Z"));
    assert!(morning.pause_on_failure);
    let tick = json!({ "at": "2026-12-01T06:00:00Z", "local": "2026-12-01T07:00:00+01:00", "schedule": "digest/weekday-morning" });
    assert_eq!(
        stepwright_flow::render_schedule_input(&morning.input, &tick).unwrap(),
        json!({ "day": "2026-12-01T07:00:00+01:00", "from": "digest/weekday-morning", "fixed": 3 })
    );
}

/// A file's `triggers:` compile to their specs; the filter and the templates are the file
/// format's: strict (a field the payload lacks is an error the trigger records), with `is
/// defined` for an optional field.
#[test]
fn triggers_compile_and_their_filters_are_strict_with_is_defined_for_optional_fields() {
    let loaded = stepwright_flow::load_source(
        r#"
workflow: tickets
triggers:
  urgent:
    event: "ticket.*"
    when: event.payload.priority is defined and event.payload.priority != "low"
    input: { id: "{{ event.payload.id }}", count: "{{ events | length }}" }
    debounce: { key: "{{ event.payload.customer }}", period: 30s }
    concurrency: { limit: 3 }
steps:
  - id: a
    set: 1
"#,
        "tickets.yaml",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let [trigger] = loaded.triggers.as_slice() else { panic!("one trigger: {:?}", loaded.triggers) };
    let spec = &trigger.spec;
    assert_eq!((trigger.name.as_str(), spec.event.as_str()), ("urgent", "ticket.*"));
    assert_eq!(
        spec.debounce.as_ref().map(|d| (d.key.as_deref(), d.period_us)),
        Some((Some("{{ event.payload.customer }}"), 30_000_000))
    );
    assert_eq!(spec.concurrency.as_ref().map(|c| (c.key.as_deref(), c.limit)), Some((None, 3)));
    let when = spec.when.as_deref().unwrap();
    let seen = |payload: serde_json::Value| serde_json::json!({ "event": { "name": "ticket.created", "payload": payload }, "events": [{}, {}] });
    assert_eq!(stepwright_flow::eval_event_filter(when, &seen(json!({ "priority": "high" }))), Ok(true));
    assert_eq!(stepwright_flow::eval_event_filter(when, &seen(json!({ "priority": "low" }))), Ok(false));
    assert_eq!(stepwright_flow::eval_event_filter(when, &seen(json!({}))), Ok(false), "`is defined` guards it");
    let strict = stepwright_flow::eval_event_filter(r#"event.payload.priority != "low""#, &seen(json!({})));
    assert!(strict.is_err_and(|e| e.contains("undefined")), "a missing field is an error, not a silent no");
    let input = stepwright_flow::render_event_template(spec.input.as_ref().unwrap(), &seen(json!({ "id": 7 })));
    assert_eq!(input, Ok(json!({ "id": 7, "count": 2 })));
}
