//! `sleep`: a durable timer.

use std::time::Duration;

use serde_json::{Value, json};

use super::{Description, NodeKind, Operator, Problems, problem};
use crate::definition::Node;
use crate::definition::outline::{Drawn, OutlineLayout, duration};

#[derive(Clone)]
pub(crate) struct SleepSpec {
    pub(crate) duration: Duration,
}

impl Node {
    /// A durable timer: the deadline is journaled; a short wait happens in process, a long
    /// one (over the engine's threshold) suspends the run until the deadline.
    pub fn sleep(id: &str, duration: Duration) -> Self {
        Self::with_kind(id, NodeKind::Sleep(SleepSpec { duration }))
    }
}

impl Operator for SleepSpec {
    fn name(&self) -> &'static str {
        "sleep"
    }

    fn check(&self, at: &str, problems: &mut Problems) {
        if self.duration.is_zero() {
            problem(problems, at, "sleep duration must be longer than zero");
        }
    }

    fn describe(&self, d: &mut Description, _nodes: &dyn Fn(&[Node]) -> Value) {
        d.put("duration_ms", json!(self.duration.as_millis() as u64));
    }

    fn drawn(&self) -> Drawn {
        Drawn::new("sleep", format!("sleep {}", duration(self.duration)), OutlineLayout::Step)
    }
}
