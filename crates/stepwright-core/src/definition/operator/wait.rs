//! `wait`: a durable wait for an external event or a message to the run.

use std::time::Duration;

use serde_json::{Value, json};

use super::{Description, Mailboxes, NodeKind, Operator, Problems, problem};
use crate::definition::outline::{Drawn, OutlineLayout, duration, short};
use crate::definition::{Expr, Node};

/// A wait for an external event: the next message sent to the run's inbox `event`, or the
/// next event of that name stored in the run's tenant since the run was created (whose
/// payload has every field `matching` gives, when it gives some).
#[derive(Clone)]
pub(crate) struct WaitSpec {
    pub(crate) event: String,
    pub(crate) timeout: Duration,
    pub(crate) matching: Option<Expr<Value>>,
}

impl Node {
    /// A durable wait for an external event: the next message sent to the run's inbox
    /// `event` (`Engine::send`), which becomes the node's output. Messages sent before the
    /// wait began are not lost: each wait takes the oldest message its inbox has that no
    /// earlier wait of the run took. Short waits happen in process; a longer one (over the
    /// engine's threshold) suspends the run until the message comes (a send makes the run
    /// due at once) or the `timeout`, when the node fails with `interrupt_timeout`. Check a
    /// message's shape with [`Node::output_schema`].
    ///
    /// The wait also takes events stored in the run's tenant (`POST /v1/events`,
    /// `stepwright events send`) named `event` and received since the run was created,
    /// whichever comes first; the output is the event's payload. An event stored before the
    /// wait began is not lost either.
    pub fn wait(id: &str, event: &str, timeout: Duration) -> Self {
        Self::with_kind(id, NodeKind::Wait(WaitSpec { event: event.to_owned(), timeout, matching: None }))
    }

    /// [`Node::wait`] taking only stored events whose payload has every field of the
    /// object `matching` evaluates to (over the scope when the wait begins), each equal:
    /// `{ticket: 42}` takes `{ticket: 42, status: "closed"}`, not `{ticket: 7}`. Messages
    /// sent to the run's inbox are the run's own and taken whatever they hold.
    pub fn wait_matching(id: &str, event: &str, timeout: Duration, matching: Expr<Value>) -> Self {
        Self::with_kind(id, NodeKind::Wait(WaitSpec { event: event.to_owned(), timeout, matching: Some(matching) }))
    }
}

impl Operator for WaitSpec {
    fn name(&self) -> &'static str {
        "wait"
    }

    fn check(&self, at: &str, problems: &mut Problems) {
        if self.timeout.is_zero() {
            problem(problems, at, "a wait's timeout must be longer than zero");
        }
        if self.event.is_empty() || self.event.starts_with('@') {
            problem(problems, at, "a wait's event must be a name that does not start with '@'");
        }
    }

    fn describe(&self, d: &mut Description, _nodes: &dyn Fn(&[Node]) -> Value) {
        d.put("event", json!(self.event));
        d.put("timeout_ms", json!(self.timeout.as_millis() as u64));
        if let Some(matching) = &self.matching {
            d.put("match", matching.describe());
        }
    }

    fn drawn(&self) -> Drawn {
        let matching =
            self.matching.as_ref().map(|m| format!(" matching {}", short(&m.describe()))).unwrap_or_default();
        let label = format!(
            "wait for `{}`{matching} (at most {})",
            short(&Value::String(self.event.clone())),
            duration(self.timeout)
        );
        Drawn::new("wait", label, OutlineLayout::Step)
    }

    fn reads(&self, mailboxes: &mut Mailboxes) {
        mailboxes.inboxes.insert(self.event.clone());
    }
}
