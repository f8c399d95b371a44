//! Times for people and the wall clock: a leaf every printer and error message uses.

/// The wall clock as a timestamp (for showing leases and log lines).
pub(crate) fn wall_now() -> stepwright::Timestamp {
    use stepwright::Clock;
    stepwright::TokioClock::new().now()
}

/// A time for people: ISO 8601 in the local time zone, to the millisecond, with its offset.
pub(crate) fn local_time(at: stepwright::Timestamp) -> String {
    chrono::DateTime::from_timestamp_micros(at.as_micros()).map_or_else(
        || format!("{} µs", at.as_micros()),
        |t| t.with_timezone(&chrono::Local).to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
    )
}

/// [`local_time`] of a time the API gives (µs since the epoch).
pub(crate) fn micros_time(at: i64) -> String {
    local_time(stepwright::Timestamp::from_micros(at))
}

/// `HH:MM:SS.mmm` (UTC) of a time: a lease's expiry in a one-line message.
pub(crate) fn clock_time(at: stepwright::Timestamp) -> String {
    let millis = at.as_micros().div_euclid(1000);
    let of_day = millis.rem_euclid(86_400_000);
    let (hours, minutes) = (of_day / 3_600_000, of_day / 60_000 % 60);
    let (seconds, millis) = (of_day / 1000 % 60, of_day % 1000);
    format!("{hours:02}:{minutes:02}:{seconds:02}.{millis:03}")
}
