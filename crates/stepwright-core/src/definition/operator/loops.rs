//! `loop`: a body repeated until a verdict says done or `max_iterations`.

use std::time::Duration;

use serde_json::{Value, json};

use super::{Description, Mailboxes, NodeKind, Operator, Problems, problem};
use crate::definition::outline::{Drawn, OutlineLayout, short};
use crate::definition::segment::Segment;
use crate::definition::{Expr, LoopOnError, Node, OnMaxIterations, Verdict};

#[derive(Clone)]
pub(crate) struct LoopSpec {
    pub(crate) body: Vec<Node>,
    pub(crate) until: Option<Expr<Verdict>>,
    pub(crate) max_iterations: u32,
    pub(crate) prepare_next: Option<Expr<Value>>,
    pub(crate) on_error: LoopOnError,
    pub(crate) on_max: OnMaxIterations,
    pub(crate) inbox: Option<String>,
    pub(crate) park_timeout: Option<Duration>,
}

/// Builds a `loop`: the body repeated until a verdict says done or `max_iterations`.
pub struct Loop {
    id: String,
    spec: LoopSpec,
}

impl Loop {
    /// A loop over `body`, at most `max_iterations` times.
    pub fn new(id: &str, max_iterations: u32, body: impl IntoIterator<Item = Node>) -> Self {
        Self {
            id: id.to_owned(),
            spec: LoopSpec {
                body: body.into_iter().collect(),
                until: None,
                max_iterations,
                prepare_next: None,
                on_error: LoopOnError::Abort,
                on_max: OnMaxIterations::Complete,
                inbox: None,
                park_timeout: None,
            },
        }
    }

    /// The verdict after each iteration (the scope sees the iteration's outputs and `loop`).
    #[must_use]
    pub fn until(mut self, verdict: Expr<Verdict>) -> Self {
        self.spec.until = Some(verdict);
        self
    }

    /// Computes the next iteration's input (default: the last iteration's output).
    #[must_use]
    pub fn prepare_next(mut self, next: Expr<Value>) -> Self {
        self.spec.prepare_next = Some(next);
        self
    }

    /// What a failed iteration does.
    #[must_use]
    pub fn on_error(mut self, on_error: LoopOnError) -> Self {
        self.spec.on_error = on_error;
        self
    }

    /// What reaching `max_iterations` does.
    #[must_use]
    pub fn on_max_iterations(mut self, on_max: OnMaxIterations) -> Self {
        self.spec.on_max = on_max;
        self
    }

    /// Each iteration first takes one message from this inbox (bound as `loop.message`);
    /// the loop ends when none arrives within `park_timeout`.
    #[must_use]
    pub fn inbox(mut self, name: &str, park_timeout: Duration) -> Self {
        self.spec.inbox = Some(name.to_owned());
        self.spec.park_timeout = Some(park_timeout);
        self
    }
}

impl From<Loop> for Node {
    fn from(l: Loop) -> Self {
        Node::with_kind(&l.id, NodeKind::Loop(l.spec))
    }
}

impl Operator for LoopSpec {
    fn name(&self) -> &'static str {
        "loop"
    }

    fn children<'a>(&'a self, groups: &mut Vec<(Segment, &'a [Node])>) {
        groups.push((Segment::Iteration, self.body.as_slice()));
    }

    fn check(&self, at: &str, problems: &mut Problems) {
        if self.max_iterations == 0 {
            problem(problems, at, "loop max_iterations must be at least 1");
        }
        if self.body.is_empty() {
            problem(problems, at, "loop needs at least one step");
        }
        if self.park_timeout == Some(Duration::ZERO) {
            problem(problems, at, "loop park_timeout must be longer than zero");
        }
    }

    fn describe(&self, d: &mut Description, nodes: &dyn Fn(&[Node]) -> Value) {
        d.put("max_iterations", json!(self.max_iterations));
        d.put("until", self.until.as_ref().map(Expr::describe).unwrap_or(Value::Null));
        d.put("prepare_next", self.prepare_next.as_ref().map(Expr::describe).unwrap_or(Value::Null));
        d.put("on_error", json!(self.on_error));
        d.put("on_max_iterations", json!(self.on_max));
        d.put("inbox", self.inbox.as_ref().map(|i| json!(i)).unwrap_or(Value::Null));
        d.put("park_timeout_ms", self.park_timeout.map(|t| json!(t.as_millis() as u64)).unwrap_or(Value::Null));
        d.put("steps", nodes(&self.body));
    }

    fn drawn(&self) -> Drawn {
        let until = self.until.as_ref().map(|u| format!("until {}, ", short(&u.describe()))).unwrap_or_default();
        let inbox = self.inbox.as_ref().map(|i| format!(", a message from `{i}` each")).unwrap_or_default();
        let label = format!("loop {until}at most {}{inbox}", self.max_iterations);
        Drawn::new("loop", label, OutlineLayout::Repeated { again: "again".to_owned() })
    }

    fn reads(&self, mailboxes: &mut Mailboxes) {
        mailboxes.inboxes.extend(self.inbox.clone());
    }
}
