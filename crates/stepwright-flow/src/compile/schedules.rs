//! A file's `schedules:` section (DESIGN §16): each schedule by name, compiled to a
//! `stepwright-schedule` spec, every problem at its position.
//!
//! ```yaml
//! schedules:
//!   weekday-morning:
//!     cron: "0 7 * * 1-5"          # or `every: 15m` (with `phase: 5m`)
//!     timezone: Europe/Berlin      # default UTC
//!     dst: { gap: shift, fold: once }
//!     input: { day: "{{ tick.local }}" }
//!     overlap: skip                # skip | buffer_one | buffer_all | cancel_other | allow_all
//!     catchup_window: 1h           # default 1m
//!     jitter: 30s
//!     start: 2026-12-01T00:00:00Z
//!     end: 2027-12-01T00:00:00Z
//!     pause_on_failure: true
//! ```

use stepwright_schedule::{Cadence, DstPolicy, FoldPolicy, GapPolicy, Overlap, ScheduleSpec};

use super::Compiler;
use crate::yaml::{Item, Yaml};

/// A schedule a file declares.
#[derive(Debug, Clone, PartialEq)]
pub struct FileSchedule {
    /// Its name in the file (the stored schedule is `workflow/name`).
    pub name: String,
    /// What it says.
    pub spec: ScheduleSpec,
}

const FIELDS: &[&str] = &[
    "cron",
    "every",
    "phase",
    "timezone",
    "dst",
    "input",
    "overlap",
    "catchup_window",
    "jitter",
    "start",
    "end",
    "pause_on_failure",
];

impl Compiler {
    /// The `schedules:` section, in name order.
    pub(super) fn schedules(&mut self, root: &Item, workflow: Option<&stepwright_core::Workflow>) -> Vec<FileSchedule> {
        let Some(node) = root.get("schedules") else { return Vec::new() };
        let Some(entries) = self.entries(node, "`schedules`") else { return Vec::new() };
        let mut schedules = Vec::new();
        for (key, item) in entries {
            let name = key.name.clone();
            if let Err(why) = stepwright_core::check_step_name(&name) {
                self.error(key.pos, format!("schedule name `{name}`: {why}"));
                continue;
            }
            if let Some(spec) = self.schedule(&name, item) {
                if let Some(workflow) = workflow {
                    self.check_schedule_input(&name, item, &spec, workflow);
                }
                schedules.push(FileSchedule { name, spec });
            }
        }
        schedules.sort_by(|a, b| a.name.cmp(&b.name));
        schedules
    }

    fn schedule(&mut self, name: &str, node: &Item) -> Option<ScheduleSpec> {
        let what = format!("schedule `{name}`");
        let entries = self.entries(node, &what)?;
        self.unknown_fields(entries, FIELDS, &what);
        let cadence = match (node.get("cron"), node.get("every")) {
            (Some(cron), None) => {
                if let Some(phase) = node.get("phase") {
                    self.error_hint(
                        phase.pos,
                        format!("{what}: `phase` is for `every`"),
                        "a cron expression says its own times",
                    );
                }
                let expression = self.string(cron, &format!("{what}'s `cron`"))?;
                let timezone = match node.get("timezone") {
                    Some(zone) => self.string(zone, &format!("{what}'s `timezone`"))?,
                    None => "UTC".to_owned(),
                };
                let dst = self.dst(node, &what);
                Cadence::Cron { expression, timezone, dst }
            }
            (None, Some(every)) => {
                for field in ["timezone", "dst"] {
                    if let Some(item) = node.get(field) {
                        self.error_hint(
                            item.pos,
                            format!("{what}: `{field}` is for `cron`"),
                            "an interval counts real time from the Unix epoch (UTC), whatever the zone",
                        );
                    }
                }
                let period = self.duration(every, &format!("{what}'s `every`"))?;
                let phase = match node.get("phase") {
                    Some(phase) => self.duration(phase, &format!("{what}'s `phase`"))?,
                    None => std::time::Duration::ZERO,
                };
                Cadence::every(period, phase)
            }
            (Some(cron), Some(_)) => {
                self.error_hint(cron.pos, format!("{what} has both `cron` and `every`"), "keep one");
                return None;
            }
            (None, None) => {
                self.error_hint(
                    node.pos,
                    format!("{what} says neither `cron` nor `every`"),
                    "`cron: \"0 7 * * 1-5\"` (with `timezone`), or `every: 15m`",
                );
                return None;
            }
        };
        let mut spec = ScheduleSpec::new(cadence);
        if let Some(item) = node.get("start") {
            spec.start = self.instant(item, &format!("{what}'s `start`"));
        }
        if let Some(item) = node.get("end") {
            spec.end = self.instant(item, &format!("{what}'s `end`"));
        }
        if let (Some(start), Some(end)) = (spec.start, spec.end)
            && end < start
            && let Some(item) = node.get("end")
        {
            self.error(item.pos, format!("{what}'s `end` is before its `start`"));
        }
        // The cadence is checked as the scheduler will use it (the expression, the zone).
        if let Err(why) = spec.cadence.ticker(spec.start, spec.end) {
            use stepwright_schedule::CadenceError;
            let field = match &why {
                CadenceError::Cron { .. } => "cron",
                CadenceError::Zone(_) => "timezone",
                CadenceError::Interval(message) if message.starts_with("`phase`") => "phase",
                CadenceError::Interval(_) => "every",
            };
            let pos = node.get(field).map_or(node.pos, |item| item.pos);
            match &why {
                CadenceError::Cron { .. } => self.error_hint(
                    pos,
                    format!("{what}: {why}"),
                    "five fields (minute hour day-of-month month day-of-week), or six with seconds first",
                ),
                _ => self.error(pos, format!("{what}: {why}")),
            }
        }
        if let Some(item) = node.get("jitter") {
            spec.jitter_us =
                self.duration(item, &format!("{what}'s `jitter`")).map_or(0, stepwright_schedule::spec::micros);
        }
        if let Some(item) = node.get("catchup_window")
            && let Some(window) = self.duration(item, &format!("{what}'s `catchup_window`"))
        {
            spec.catchup_window_us = stepwright_schedule::spec::micros(window);
        }
        if let Some(item) = node.get("overlap") {
            spec.overlap = self
                .choice(
                    item,
                    &format!("{what}'s `overlap`"),
                    &[
                        ("skip", Overlap::Skip),
                        ("buffer_one", Overlap::BufferOne),
                        ("buffer_all", Overlap::BufferAll),
                        ("cancel_other", Overlap::CancelOther),
                        ("allow_all", Overlap::AllowAll),
                    ],
                )
                .unwrap_or_default();
        }
        if let Some(item) = node.get("pause_on_failure") {
            match item.value {
                Yaml::Bool(on) => spec.pause_on_failure = on,
                _ => self.error(item.pos, format!("{what}'s `pause_on_failure` must be true or false")),
            }
        }
        if let Some(input) = node.get("input") {
            // Rendered at each tick, when only the tick is known.
            let outer = self.roots_only.replace(&["tick"]);
            self.templates(input);
            self.roots_only = outer;
            spec.input = input.to_json();
        }
        Some(spec)
    }

    /// A schedule's runs start with its `input` (null without one): one that the workflow's
    /// input schema refuses would fail every tick, so it is refused here. The input is rendered
    /// for a tick of this schedule, as the scheduler will render it.
    fn check_schedule_input(
        &mut self,
        name: &str,
        node: &Item,
        spec: &ScheduleSpec,
        workflow: &stepwright_core::Workflow,
    ) {
        let tick =
            serde_json::json!({ "at": "2026-01-01T00:00:00Z", "local": "2026-01-01T00:00:00", "schedule": name });
        // A template that does not render is reported where templates are checked.
        let Ok(input) = render_schedule_input(&spec.input, &tick) else { return };
        let Err(refused) = stepwright_core::Engine::check_input(workflow, &input) else { return };
        let why = match &refused {
            stepwright_core::EngineError::InvalidInput { source, .. } => source.message.clone(),
            other => other.to_string(),
        };
        match node.get("input") {
            Some(item) => self.error(item.pos, format!("schedule `{name}`'s `input` would start runs that fail at once: {why}")),
            None => self.error_hint(
                node.pos,
                format!("schedule `{name}` has no `input`, so its runs would start with null and fail at once: {why}"),
                "give it the input the workflow takes: `input: { … }` (templates see `tick.at`, `tick.local`, `tick.schedule`)",
            ),
        }
    }

    fn dst(&mut self, node: &Item, what: &str) -> DstPolicy {
        let Some(dst) = node.get("dst") else { return DstPolicy::default() };
        let Some(entries) = self.entries(dst, &format!("{what}'s `dst`")) else { return DstPolicy::default() };
        self.unknown_fields(entries, &["gap", "fold"], &format!("{what}'s `dst`"));
        let mut policy = DstPolicy::default();
        if let Some(gap) = dst.get("gap") {
            policy.gap = self
                .choice(gap, &format!("{what}'s `dst.gap`"), &[("shift", GapPolicy::Shift), ("skip", GapPolicy::Skip)])
                .unwrap_or_default();
        }
        if let Some(fold) = dst.get("fold") {
            policy.fold = self
                .choice(
                    fold,
                    &format!("{what}'s `dst.fold`"),
                    &[("once", FoldPolicy::Once), ("twice", FoldPolicy::Twice)],
                )
                .unwrap_or_default();
        }
        policy
    }

    fn choice<T: Copy>(&mut self, node: &Item, what: &str, choices: &[(&str, T)]) -> Option<T> {
        let text = self.string(node, what)?;
        match choices.iter().find(|(name, _)| *name == text) {
            Some((_, value)) => Some(*value),
            None => {
                let names: Vec<&str> = choices.iter().map(|(name, _)| *name).collect();
                self.error_hint(
                    node.pos,
                    format!("{what} `{text}` is not one of them"),
                    format!("one of: {}", names.join(", ")),
                );
                None
            }
        }
    }

    fn instant(&mut self, node: &Item, what: &str) -> Option<stepwright_core::Timestamp> {
        let text = self.string(node, what)?;
        match stepwright_schedule::parse_instant(&text) {
            Some(at) => Some(at),
            None => {
                self.error_hint(
                    node.pos,
                    format!("{what} `{text}` is not a time"),
                    "RFC 3339, with its offset: 2026-12-01T07:00:00Z or 2026-12-01T08:00:00+01:00",
                );
                None
            }
        }
    }
}

/// Renders a schedule's `input` for a tick (`tick` is the only name it sees).
pub fn render_schedule_input(
    template: &serde_json::Value,
    tick: &serde_json::Value,
) -> Result<serde_json::Value, String> {
    crate::expr::eval_value(template, &serde_json::json!({ "tick": tick })).map_err(|e| e.message)
}
