//! `sequence`: a named group of nodes run in order; its output is the last node's.

use serde_json::Value;

use super::{Description, NodeKind, Operator, Problems, problem};
use crate::definition::Node;
use crate::definition::outline::{Drawn, OutlineLayout};
use crate::definition::segment::Segment;

#[derive(Clone)]
pub(crate) struct SequenceSpec {
    pub(crate) body: Vec<Node>,
}

impl Node {
    /// A named group of nodes run in order; its output is the last node's.
    pub fn sequence(id: &str, nodes: impl IntoIterator<Item = Node>) -> Self {
        Self::with_kind(id, NodeKind::Sequence(SequenceSpec { body: nodes.into_iter().collect() }))
    }
}

impl Operator for SequenceSpec {
    fn name(&self) -> &'static str {
        "sequence"
    }

    fn children<'a>(&'a self, groups: &mut Vec<(Segment, &'a [Node])>) {
        groups.push((Segment::Body, self.body.as_slice()));
    }

    fn check(&self, at: &str, problems: &mut Problems) {
        if self.body.is_empty() {
            problem(problems, at, "sequence needs at least one step");
        }
    }

    fn describe(&self, d: &mut Description, nodes: &dyn Fn(&[Node]) -> Value) {
        d.put("steps", nodes(&self.body));
    }

    fn drawn(&self) -> Drawn {
        Drawn::new("sequence", "", OutlineLayout::Boxed)
    }
}
