//! `graph`: named nodes with conditional edges; cycles bounded by `max_steps`.

use std::collections::HashSet;

use serde_json::{Value, json};

use super::{Description, NodeKind, Operator, Problems, problem};
use crate::definition::outline::{Drawn, OutlineEdge, OutlineLayout, short};
use crate::definition::segment::Segment;
use crate::definition::{Expr, Node, Predicate};

#[derive(Clone)]
pub(crate) struct GraphSpec {
    pub(crate) nodes: Vec<Node>,
    pub(crate) edges: Vec<Edge>,
    pub(crate) entry: Option<String>,
    pub(crate) max_steps: u32,
}

#[derive(Clone)]
pub(crate) struct Edge {
    pub(crate) from: String,
    pub(crate) to: String,
    pub(crate) when: Option<Predicate>,
}

/// Builds a `graph`: named nodes with conditional edges; cycles bounded by `max_steps`.
pub struct Graph {
    id: String,
    spec: GraphSpec,
}

impl Graph {
    /// An empty graph that stops after `max_steps` node executions.
    pub fn new(id: &str, max_steps: u32) -> Self {
        Self { id: id.to_owned(), spec: GraphSpec { nodes: Vec::new(), edges: Vec::new(), entry: None, max_steps } }
    }

    /// Adds a node (its id is its name). The first node added is the entry unless set.
    #[must_use]
    pub fn node(mut self, node: Node) -> Self {
        self.spec.nodes.push(node);
        self
    }

    /// Sets the entry node.
    #[must_use]
    pub fn entry(mut self, name: &str) -> Self {
        self.spec.entry = Some(name.to_owned());
        self
    }

    /// An unconditional edge. Edges from a node are tried in the order they were added.
    #[must_use]
    pub fn edge(mut self, from: &str, to: &str) -> Self {
        self.spec.edges.push(Edge { from: from.to_owned(), to: to.to_owned(), when: None });
        self
    }

    /// A conditional edge.
    #[must_use]
    pub fn edge_if(mut self, from: &str, to: &str, when: Predicate) -> Self {
        self.spec.edges.push(Edge { from: from.to_owned(), to: to.to_owned(), when: Some(when) });
        self
    }
}

impl From<Graph> for Node {
    fn from(g: Graph) -> Self {
        Node::with_kind(&g.id, NodeKind::Graph(g.spec))
    }
}

impl Operator for GraphSpec {
    fn name(&self) -> &'static str {
        "graph"
    }

    fn children<'a>(&'a self, groups: &mut Vec<(Segment, &'a [Node])>) {
        groups.push((Segment::Visit, self.nodes.as_slice()));
    }

    fn check(&self, at: &str, problems: &mut Problems) {
        if self.max_steps == 0 {
            problem(problems, at, "graph max_steps must be at least 1");
        }
        if self.nodes.is_empty() {
            problem(problems, at, "graph needs at least one node");
        }
        let names: HashSet<String> = self.nodes.iter().map(|n| n.id.to_string()).collect();
        if let Some(entry) = &self.entry
            && !names.contains(entry)
        {
            problem(problems, at, format!("graph entry {entry:?} is not one of its nodes"));
        }
        for edge in &self.edges {
            for end in [&edge.from, &edge.to] {
                if !names.contains(end) {
                    problem(
                        problems,
                        at,
                        format!("graph edge {:?} -> {:?} names unknown node {end:?}", edge.from, edge.to),
                    );
                }
            }
        }
    }

    fn describe(&self, d: &mut Description, nodes: &dyn Fn(&[Node]) -> Value) {
        d.put("max_steps", json!(self.max_steps));
        d.put("entry", self.entry.as_ref().map(|e| json!(e)).unwrap_or(Value::Null));
        d.put("nodes", nodes(&self.nodes));
        d.put(
            "edges",
            Value::Array(
                self.edges
                    .iter()
                    .map(|e| json!({ "from": e.from, "to": e.to, "when": e.when.as_ref().map(Expr::describe) }))
                    .collect(),
            ),
        );
    }

    fn drawn(&self) -> Drawn {
        let entry = self.entry.clone().or_else(|| self.nodes.first().map(|n| n.id.to_string()));
        let edges = self
            .edges
            .iter()
            .map(|e| OutlineEdge {
                from: e.from.clone(),
                to: e.to.clone(),
                when: e.when.as_ref().map(|w| short(&w.describe())),
            })
            .collect();
        Drawn::new("graph", format!("graph (at most {} steps)", self.max_steps), OutlineLayout::Graph { entry, edges })
    }
}
