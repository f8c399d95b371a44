//! `branch`: ordered conditions, the first true one wins; no match skips.

use serde_json::{Value, json};

use super::{Description, NodeKind, Operator, Problems, problem};
use crate::definition::outline::{Drawn, OutlineLayout, short};
use crate::definition::segment::Segment;
use crate::definition::{Node, Predicate};

#[derive(Clone)]
pub(crate) struct BranchSpec {
    pub(crate) arms: Vec<(Predicate, Vec<Node>)>,
    pub(crate) otherwise: Option<Vec<Node>>,
}

/// Builds a `branch`: ordered conditions, the first true one wins; no match skips.
pub struct Branch {
    id: String,
    spec: BranchSpec,
}

impl Branch {
    /// An empty branch.
    pub fn new(id: &str) -> Self {
        Self { id: id.to_owned(), spec: BranchSpec { arms: Vec::new(), otherwise: None } }
    }

    /// Adds an arm.
    #[must_use]
    pub fn when(mut self, condition: Predicate, steps: impl IntoIterator<Item = Node>) -> Self {
        self.spec.arms.push((condition, steps.into_iter().collect()));
        self
    }

    /// Sets the arm taken when no condition holds.
    #[must_use]
    pub fn otherwise(mut self, steps: impl IntoIterator<Item = Node>) -> Self {
        self.spec.otherwise = Some(steps.into_iter().collect());
        self
    }
}

impl From<Branch> for Node {
    fn from(b: Branch) -> Self {
        Node::with_kind(&b.id, NodeKind::Branch(b.spec))
    }
}

impl Operator for BranchSpec {
    fn name(&self) -> &'static str {
        "branch"
    }

    fn children<'a>(&'a self, groups: &mut Vec<(Segment, &'a [Node])>) {
        groups.extend(self.arms.iter().enumerate().map(|(index, (_, body))| (Segment::Arm(index), body.as_slice())));
        groups.extend(self.otherwise.iter().map(|body| (Segment::Otherwise, body.as_slice())));
    }

    fn check(&self, at: &str, problems: &mut Problems) {
        if self.arms.is_empty() {
            problem(problems, at, "branch needs at least one `when` arm");
        }
    }

    fn describe(&self, d: &mut Description, nodes: &dyn Fn(&[Node]) -> Value) {
        d.put(
            "arms",
            Value::Array(self.arms.iter().map(|(c, b)| json!({ "when": c.describe(), "steps": nodes(b) })).collect()),
        );
        d.put("otherwise", self.otherwise.as_ref().map(|b| nodes(b)).unwrap_or(Value::Null));
    }

    fn drawn(&self) -> Drawn {
        Drawn::new("branch", "branch", OutlineLayout::Choice { falls_through: self.otherwise.is_none() })
    }

    fn group_label(&self, segment: Segment) -> Option<String> {
        match segment {
            Segment::Arm(index) => self.arms.get(index).map(|(condition, _)| short(&condition.describe())),
            Segment::Otherwise => Some("otherwise".to_owned()),
            _ => None,
        }
    }
}
