//! Scalars as workflow files write them: durations (`30s`) and effect classes (`write`).

use std::time::Duration;

use stepwright_core::Effect;

/// A duration as workflow files and the command line write it: `500ms`, `30s`, `5m`, `2h`,
/// `1d`.
pub fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit() && c != '.')?;
    let (number, unit) = text.split_at(split);
    let n: f64 = number.parse().ok()?;
    let seconds = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        "d" => n * 86_400.0,
        _ => return None,
    };
    (seconds.is_finite() && seconds >= 0.0).then(|| Duration::from_secs_f64(seconds))
}

/// An effect class by its name in the file format.
pub(super) fn parse_effect(text: &str) -> Option<Effect> {
    Some(match text {
        "pure" => Effect::Pure,
        "read" => Effect::Read,
        "write" => Effect::Write,
        "external" => Effect::External,
        "human" => Effect::Human,
        _ => return None,
    })
}
