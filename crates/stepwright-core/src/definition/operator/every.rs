//! `every`: a body on a fixed interval with jitter, until cancelled.

use std::time::Duration;

use serde_json::{Value, json};

use super::{Description, Mailboxes, NodeKind, Operator, Problems, problem};
use crate::definition::outline::{Drawn, OutlineLayout, duration};
use crate::definition::segment::Segment;
use crate::definition::{EveryOnError, Node};

#[derive(Clone)]
pub(crate) struct EverySpec {
    pub(crate) interval: Duration,
    pub(crate) jitter: f64,
    pub(crate) wake: Option<String>,
    pub(crate) on_error: EveryOnError,
    pub(crate) body: Vec<Node>,
}

/// Builds an `every`: the body on a fixed interval with jitter, until cancelled.
pub struct Every {
    id: String,
    spec: EverySpec,
}

impl Every {
    /// Runs `body` every `interval`.
    pub fn new(id: &str, interval: Duration, body: impl IntoIterator<Item = Node>) -> Self {
        Self {
            id: id.to_owned(),
            spec: EverySpec {
                interval,
                jitter: 0.0,
                wake: None,
                on_error: EveryOnError::Continue,
                body: body.into_iter().collect(),
            },
        }
    }

    /// Scales each interval by a random factor in `[1 - jitter, 1 + jitter]` (jitter < 1).
    #[must_use]
    pub fn jitter(mut self, jitter: f64) -> Self {
        self.spec.jitter = jitter;
        self
    }

    /// A wake channel: a wake-up runs the next tick at once.
    #[must_use]
    pub fn wake_on(mut self, channel: &str) -> Self {
        self.spec.wake = Some(channel.to_owned());
        self
    }

    /// What a failed tick does.
    #[must_use]
    pub fn on_error(mut self, on_error: EveryOnError) -> Self {
        self.spec.on_error = on_error;
        self
    }
}

impl From<Every> for Node {
    fn from(e: Every) -> Self {
        Node::with_kind(&e.id, NodeKind::Every(e.spec))
    }
}

impl Operator for EverySpec {
    fn name(&self) -> &'static str {
        "every"
    }

    fn children<'a>(&'a self, groups: &mut Vec<(Segment, &'a [Node])>) {
        groups.push((Segment::Iteration, self.body.as_slice()));
    }

    fn check(&self, at: &str, problems: &mut Problems) {
        if self.interval.is_zero() {
            problem(problems, at, "every interval must be longer than zero");
        }
        if !(0.0..1.0).contains(&self.jitter) {
            problem(problems, at, format!("every jitter must be within 0..1, not {}", self.jitter));
        }
        if self.body.is_empty() {
            problem(problems, at, "every needs at least one step");
        }
    }

    fn describe(&self, d: &mut Description, nodes: &dyn Fn(&[Node]) -> Value) {
        d.put("interval_ms", json!(self.interval.as_millis() as u64));
        d.put("jitter", json!(self.jitter));
        d.put("wake", self.wake.as_ref().map(|w| json!(w)).unwrap_or(Value::Null));
        d.put("on_error", json!(self.on_error));
        d.put("steps", nodes(&self.body));
    }

    fn drawn(&self) -> Drawn {
        let wake = self.wake.as_ref().map(|w| format!(", or when woken on `{w}`")).unwrap_or_default();
        Drawn::new(
            "every",
            format!("every {}{wake}", duration(self.interval)),
            OutlineLayout::Repeated { again: "next tick".to_owned() },
        )
    }

    fn reads(&self, mailboxes: &mut Mailboxes) {
        mailboxes.wake_channels.extend(self.wake.clone());
    }
}
