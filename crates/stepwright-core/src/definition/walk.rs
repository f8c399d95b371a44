//! The walks of the definition tree, in one place: each node's children (asked of its
//! operator), group by group with the [`Segment`] that places them below their parent; every
//! node with its path pattern; the mailboxes a definition reads; and the outline `graph`
//! draws. The checker, the description, the path patterns and the diff keys walk the tree
//! through [`Node::children`].

use super::operator::{Mailboxes, NodeKind};
use super::outline::{Outline, OutlineGroup, OutlineNode, short};
use super::segment::Segment;
use super::{Node, OnFailure, Workflow};
use crate::ids::PathPattern;

impl Node {
    /// The node's children, group by group in declaration order: its fallback first, then
    /// its body, arms, paths or nodes.
    pub(crate) fn children(&self) -> Vec<(Segment, &[Node])> {
        let mut groups = Vec::new();
        if let OnFailure::Fallback(fallback) = &self.policy.on_failure {
            groups.push((Segment::Fallback, std::slice::from_ref(&**fallback)));
        }
        self.kind.operator().children(&mut groups);
        groups
    }
}

/// Visits every node below `at` with its path pattern, parents before children.
pub(crate) fn each_pattern<'a>(at: &PathPattern, nodes: &'a [Node], visit: &mut impl FnMut(&PathPattern, &'a Node)) {
    for node in nodes {
        each_node_pattern(&at.join(&node.id), node, visit);
    }
}

fn each_node_pattern<'a>(at: &PathPattern, node: &'a Node, visit: &mut impl FnMut(&PathPattern, &'a Node)) {
    visit(at, node);
    for (segment, group) in node.children() {
        for child in group {
            each_node_pattern(&segment.child_pattern(at, child), child, visit);
        }
    }
}

impl Workflow {
    /// The inboxes and wake channels its steps (and the workflows it calls) read: what a
    /// message sent to one of its runs can reach.
    pub fn mailboxes(&self) -> Mailboxes {
        let mut found = Mailboxes::default();
        each_pattern(&PathPattern::root(), &self.inner.body, &mut |_, node| node.kind.operator().reads(&mut found));
        found
    }

    /// The workflow as it is drawn: each node with its kind, label and layout, each called
    /// workflow's steps under its call.
    pub fn outline(&self) -> Outline {
        Outline { name: self.inner.name.clone(), version: self.inner.version.clone(), steps: nodes(&self.inner.body) }
    }
}

fn nodes(nodes: &[Node]) -> Vec<OutlineNode> {
    nodes.iter().map(node).collect()
}

/// A node as it is drawn: what its operator says, its notes, and its groups, outlined.
fn node(node: &Node) -> OutlineNode {
    let operator = node.kind.operator();
    let drawn = operator.drawn();
    let mut groups = Vec::new();
    let mut fallback = None;
    for (segment, group) in node.children() {
        if segment == Segment::Fallback {
            fallback = Some(OutlineGroup { label: Some("on failure".to_owned()), steps: instead(group) });
        } else {
            groups.push(OutlineGroup { label: operator.group_label(segment), steps: nodes(group) });
        }
    }
    OutlineNode {
        id: node.id.to_string(),
        kind: drawn.kind,
        label: drawn.label,
        notes: notes(node),
        layout: drawn.layout,
        groups,
        fallback,
    }
}

/// A fallback's steps: a sequence's (as a file writes a fallback's list) or the one node.
fn instead(fallback: &[Node]) -> Vec<OutlineNode> {
    match fallback {
        [Node { kind: NodeKind::Sequence(sequence), .. }] => nodes(&sequence.body),
        _ => nodes(fallback),
    }
}

/// What a node's policies add to its drawing.
fn notes(node: &Node) -> Vec<String> {
    let policy = &node.policy;
    let mut notes = Vec::new();
    if let Some(condition) = &policy.condition {
        notes.push(format!("if {}", short(&condition.describe())));
    }
    if policy.approval.is_some() {
        notes.push("approved first".to_owned());
    }
    if policy.cache {
        notes.push("cached".to_owned());
    }
    notes
}
