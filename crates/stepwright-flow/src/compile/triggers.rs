//! A file's `triggers:` section (DESIGN §16): each trigger by name, compiled to a
//! `stepwright-schedule` spec, every problem at its position.
//!
//! ```yaml
//! triggers:
//!   new-ticket:
//!     event: ticket.created          # a name, or a pattern: ticket.*
//!     when: event.payload.priority != "low"
//!     input: { ticket: "{{ event.payload.id }}" }   # default: the event's payload
//!     debounce: { key: "{{ event.payload.customer }}", period: 30s }
//!     batch: { max: 100, within: 10s }               # not with debounce
//!     concurrency: { key: "{{ event.payload.customer }}", limit: 1 }
//! ```

use stepwright_schedule::TriggerSpec;
use stepwright_schedule::trigger::{Batch, Debounce, KeyedLimit};

use super::Compiler;
use crate::expr;
use crate::yaml::{Item, Yaml};

/// A trigger a file declares.
#[derive(Debug, Clone, PartialEq)]
pub struct FileTrigger {
    /// Its name in the file (the stored trigger is `workflow/name`).
    pub name: String,
    /// What it says.
    pub spec: TriggerSpec,
}

const FIELDS: &[&str] = &["event", "when", "input", "debounce", "batch", "concurrency"];

/// What a trigger's templates and filter see.
const ROOTS: &[&str] = &["event", "events"];

impl Compiler {
    /// The `triggers:` section, in name order; a name a schedule has too is refused (both
    /// are kept as `workflow/name`).
    pub(super) fn triggers(&mut self, root: &Item, schedules: &[super::FileSchedule]) -> Vec<FileTrigger> {
        let Some(node) = root.get("triggers") else { return Vec::new() };
        let Some(entries) = self.entries(node, "`triggers`") else { return Vec::new() };
        let mut triggers = Vec::new();
        for (key, item) in entries {
            let name = key.name.clone();
            if let Err(why) = stepwright_core::check_step_name(&name) {
                self.error(key.pos, format!("trigger name `{name}`: {why}"));
                continue;
            }
            if schedules.iter().any(|s| s.name == name) {
                self.error_hint(
                    key.pos,
                    format!("trigger `{name}` has the name of a schedule of this workflow"),
                    "schedules and triggers are kept together by name: give it another",
                );
                continue;
            }
            if let Some(spec) = self.trigger(&name, item) {
                triggers.push(FileTrigger { name, spec });
            }
        }
        triggers.sort_by(|a, b| a.name.cmp(&b.name));
        triggers
    }

    fn trigger(&mut self, name: &str, node: &Item) -> Option<TriggerSpec> {
        let what = format!("trigger `{name}`");
        let entries = self.entries(node, &what)?;
        self.unknown_fields(entries, FIELDS, &what);
        let Some(event) = node.get("event") else {
            self.error_hint(
                node.pos,
                format!("{what} needs an `event`"),
                "the event name it starts runs on, or a pattern: `event: ticket.created`, `event: ticket.*`",
            );
            return None;
        };
        let pattern = self.string(event, &format!("{what}'s `event`"))?;
        let mut spec = TriggerSpec::on(&pattern);
        let outer = self.roots_only.replace(ROOTS);
        if let Some(when) = node.get("when") {
            spec.when = self.expression(when, &format!("{what}'s `when`"));
        }
        if let Some(input) = node.get("input") {
            self.templates(input);
            spec.input = Some(input.to_json());
        }
        if let Some(item) = node.get("debounce") {
            spec.debounce = self.debounce(item, &what);
        }
        if let Some(item) = node.get("batch") {
            spec.batch = self.batch(item, &what);
        }
        if let Some(item) = node.get("concurrency") {
            spec.concurrency = self.keyed_limit(item, &what);
        }
        self.roots_only = outer;
        if let Err(why) = spec.check() {
            let at = match (&spec.debounce, &spec.batch) {
                (Some(_), Some(_)) => node.get("batch").map_or(node.pos, |item| item.pos),
                _ => event.pos,
            };
            self.error(at, format!("{what}: {why}"));
        }
        Some(spec)
    }

    /// A template key (`key: "{{ event.payload.customer }}"`), checked.
    fn key_template(&mut self, node: &Item, what: &str) -> Option<String> {
        let key = self.string(node, what)?;
        if let Err(why) = expr::check_template(&key) {
            self.error(node.pos, format!("{what} `{key}` does not parse: {why}"));
            return None;
        }
        self.roots(node.pos, &expr::template_roots(&key));
        Some(key)
    }

    fn debounce(&mut self, node: &Item, what: &str) -> Option<Debounce> {
        let inner = format!("{what}'s `debounce`");
        let entries = self.entries(node, &inner)?;
        self.unknown_fields(entries, &["key", "period"], &inner);
        let key = match node.get("key") {
            Some(key) => Some(self.key_template(key, &format!("{inner} `key`"))?),
            None => None,
        };
        let Some(period) = node.get("period") else {
            self.error_hint(node.pos, format!("{inner} needs a `period`"), "how long a key stays quiet: `period: 30s`");
            return None;
        };
        let period = self.duration(period, &format!("{inner} `period`"))?;
        Some(Debounce { key, period_us: stepwright_schedule::spec::micros(period) })
    }

    fn batch(&mut self, node: &Item, what: &str) -> Option<Batch> {
        let inner = format!("{what}'s `batch`");
        let entries = self.entries(node, &inner)?;
        self.unknown_fields(entries, &["max", "within"], &inner);
        let (Some(max), Some(within)) = (node.get("max"), node.get("within")) else {
            self.error_hint(
                node.pos,
                format!("{inner} needs `max` and `within`"),
                "up to how many events, and how long after the first: `{ max: 100, within: 10s }`",
            );
            return None;
        };
        let max = match max.value {
            Yaml::Int(n) if n >= 1 => n as usize,
            _ => {
                self.error(max.pos, format!("{inner} `max` must be a whole number of at least 1"));
                return None;
            }
        };
        let within = self.duration(within, &format!("{inner} `within`"))?;
        Some(Batch { max, within_us: stepwright_schedule::spec::micros(within) })
    }

    fn keyed_limit(&mut self, node: &Item, what: &str) -> Option<KeyedLimit> {
        let inner = format!("{what}'s `concurrency`");
        let entries = self.entries(node, &inner)?;
        self.unknown_fields(entries, &["key", "limit"], &inner);
        let key = match node.get("key") {
            Some(key) => Some(self.key_template(key, &format!("{inner} `key`"))?),
            None => None,
        };
        let limit = match node.get("limit").map(|item| (item, &item.value)) {
            Some((_, Yaml::Int(n))) if (1..=i64::from(u32::MAX)).contains(n) => *n as u32,
            Some((item, _)) => {
                self.error(item.pos, format!("{inner} `limit` must be a whole number of at least 1"));
                return None;
            }
            None => {
                self.error_hint(
                    node.pos,
                    format!("{inner} needs a `limit`"),
                    "how many runs per key at once: `limit: 1`",
                );
                return None;
            }
        };
        Some(KeyedLimit { key, limit })
    }
}

/// Renders a trigger's template (its input, a key) over what it sees of its events.
pub fn render_event_template(
    template: &serde_json::Value,
    context: &serde_json::Value,
) -> Result<serde_json::Value, String> {
    expr::eval_value(template, context).map_err(|e| e.message)
}

/// Evaluates a trigger's `when` over what it sees of an event.
pub fn eval_event_filter(source: &str, context: &serde_json::Value) -> Result<bool, String> {
    expr::truthy(source, context).map_err(|e| e.message)
}
