//! `workflow` and `spawn`: a call of another workflow, its journal nested under the call.

use std::time::Duration;

use serde_json::{Value, json};

use super::{Description, NodeKind, Operator, Problems, problem};
use crate::definition::outline::{Drawn, OutlineLayout, duration};
use crate::definition::segment::Segment;
use crate::definition::{Node, Workflow};

#[derive(Clone)]
pub(crate) struct CallSpec {
    pub(crate) workflow: Workflow,
    /// A spawn's timeout; `None` for a call.
    pub(crate) spawn: Option<Duration>,
}

impl Node {
    /// Call another workflow: its input and output are checked against its schemas, its
    /// journal nests under this node's path, and it sees only its own input (not the caller's
    /// earlier outputs). Memory layers and services are inherited.
    pub fn workflow(id: &str, workflow: &Workflow) -> Self {
        Self::with_kind(id, NodeKind::Workflow(CallSpec { workflow: workflow.clone(), spawn: None }))
    }

    /// Like [`Node::workflow`] with an isolated context (no inherited memory layers) and a
    /// timeout that cancels the whole child.
    pub fn spawn(id: &str, workflow: &Workflow, timeout: Duration) -> Self {
        Self::with_kind(id, NodeKind::Workflow(CallSpec { workflow: workflow.clone(), spawn: Some(timeout) }))
    }
}

impl Operator for CallSpec {
    fn name(&self) -> &'static str {
        if self.spawn.is_some() { "spawn" } else { "workflow" }
    }

    /// The called workflow's steps (checked when it was built; the checker skips them).
    fn children<'a>(&'a self, groups: &mut Vec<(Segment, &'a [Node])>) {
        groups.push((Segment::Body, self.workflow.inner.body.as_slice()));
    }

    fn check(&self, at: &str, problems: &mut Problems) {
        if self.spawn == Some(Duration::ZERO) {
            problem(problems, at, "spawn timeout must be longer than zero");
        }
    }

    /// The callee by name, version and hash: a call is pinned by its callee's hash, so
    /// its steps are not described again.
    fn describe(&self, d: &mut Description, _nodes: &dyn Fn(&[Node]) -> Value) {
        let workflow = &self.workflow;
        d.put(
            "workflow",
            json!({ "name": workflow.name(), "version": workflow.version(), "hash": workflow.hash().to_hex() }),
        );
        d.put("spawn_timeout_ms", self.spawn.map(|t| json!(t.as_millis() as u64)).unwrap_or(Value::Null));
    }

    fn drawn(&self) -> Drawn {
        let callee = self.workflow.name();
        let label = match self.spawn {
            Some(timeout) => format!("spawn {callee} (at most {})", duration(timeout)),
            None => format!("workflow {callee}"),
        };
        Drawn::new(self.name(), label, OutlineLayout::Boxed)
    }
}
