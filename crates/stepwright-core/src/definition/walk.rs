//! The shape of the definition tree, in one place: each node's children, group by group,
//! with the [`Segment`] that places them below their parent. The checker, the path patterns
//! and the diff keys walk the tree through [`Node::children`]; a new operator says where its
//! children are here and nowhere else (the match has no catch-all arm, so forgetting it
//! does not compile).

use super::{ForkPaths, Node, NodeKind, OnFailure};
use crate::ids::PathPattern;

/// How a group of children sits below its parent, in the path grammar [`crate::StepPath`]
/// owns. Arms add no segment to step paths; the checker names them in its messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Segment {
    /// `at/id`: a sequence's or `provide`'s body, a subworkflow's steps.
    Body,
    /// `at/id`: the index-th `when` arm of a branch.
    Arm(usize),
    /// `at/id`: a branch's `otherwise` arm.
    Otherwise,
    /// `at[index]/id`: the index-th static path of a fork.
    Path(usize),
    /// `at[i]/id` for each item: a dynamic fork's or a map's body.
    Item,
    /// `at#n/id` for each n: a loop's iterations, an `every`'s ticks.
    Iteration,
    /// `at/id#n` for each n: a graph node's visits (the graph's own decisions are `at#n`).
    Visit,
    /// `at/@fallback`: a step's fallback, which runs in the step's place.
    Fallback,
}

impl Segment {
    /// Where the children's own patterns start from, given the parent's pattern; `None` for
    /// segments that place each child themselves (see [`Segment::child_pattern`]).
    fn prefix(self, at: &PathPattern) -> PathPattern {
        match self {
            Self::Body | Self::Arm(_) | Self::Otherwise | Self::Visit | Self::Fallback => at.clone(),
            Self::Path(_) | Self::Item => at.any_index(),
            Self::Iteration => at.any_ordinal(),
        }
    }

    /// The pattern of a child `node` of this group below the parent's pattern `at`.
    pub(crate) fn child_pattern(self, at: &PathPattern, node: &Node) -> PathPattern {
        match self {
            Self::Fallback => at.fallback(),
            Self::Visit => at.join(&node.id).any_ordinal(),
            _ => self.prefix(at).join(&node.id),
        }
    }

    /// Paths the parent itself records for this group, besides its children's: a fork
    /// path's or an iteration's own entries (`at[*]`, `at#*`), a graph's decisions (`at#*`).
    pub(crate) fn own_pattern(self, at: &PathPattern) -> Option<PathPattern> {
        match self {
            Self::Path(_) | Self::Item => Some(at.any_index()),
            Self::Iteration | Self::Visit => Some(at.any_ordinal()),
            Self::Body | Self::Arm(_) | Self::Otherwise | Self::Fallback => None,
        }
    }

    /// How the checker names the group's children in its messages: `at[0]/id` for a branch
    /// arm or a fork path, `at[otherwise]/id`, `at[*]/id`, `at#*/id`, `at/fallback`.
    pub(crate) fn display(self, at: &str, id: &str) -> String {
        let join = |prefix: &str| if prefix.is_empty() { id.to_owned() } else { format!("{prefix}/{id}") };
        match self {
            Self::Body | Self::Visit => join(at),
            Self::Arm(index) | Self::Path(index) => join(&format!("{at}[{index}]")),
            Self::Otherwise => join(&format!("{at}[otherwise]")),
            Self::Item => join(&format!("{at}[*]")),
            Self::Iteration => join(&format!("{at}#*")),
            Self::Fallback => format!("{at}/fallback"),
        }
    }
}

impl Node {
    /// The node's children, group by group in declaration order: its fallback first, then
    /// its body, arms, paths or nodes.
    pub(crate) fn children(&self) -> Vec<(Segment, &[Node])> {
        let mut groups = Vec::new();
        if let OnFailure::Fallback(fallback) = &self.policy.on_failure {
            groups.push((Segment::Fallback, std::slice::from_ref(&**fallback)));
        }
        match &self.kind {
            NodeKind::Step(_) | NodeKind::Sleep(_) | NodeKind::Wait(_) => {}
            NodeKind::Sequence(body) | NodeKind::Provide { body, .. } => groups.push((Segment::Body, body.as_slice())),
            NodeKind::Branch { arms, otherwise } => {
                groups.extend(arms.iter().enumerate().map(|(index, (_, body))| (Segment::Arm(index), body.as_slice())));
                groups.extend(otherwise.iter().map(|body| (Segment::Otherwise, body.as_slice())));
            }
            NodeKind::Fork(spec) => match &spec.paths {
                ForkPaths::Static(paths) => {
                    groups
                        .extend(paths.iter().enumerate().map(|(index, path)| (Segment::Path(index), path.as_slice())));
                }
                ForkPaths::Dynamic { body, .. } => groups.push((Segment::Item, body.as_slice())),
            },
            NodeKind::Loop(spec) => groups.push((Segment::Iteration, spec.body.as_slice())),
            NodeKind::Every(spec) => groups.push((Segment::Iteration, spec.body.as_slice())),
            NodeKind::Graph(spec) => groups.push((Segment::Visit, spec.nodes.as_slice())),
            NodeKind::Workflow { workflow, .. } => groups.push((Segment::Body, workflow.inner.body.as_slice())),
        }
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

/// What a run of a definition takes messages from, by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Mailboxes {
    /// The inboxes its loops take messages from and the events its waits wait for.
    pub inboxes: std::collections::BTreeSet<String>,
    /// The channels that wake its `every` steps.
    pub wake_channels: std::collections::BTreeSet<String>,
}

impl super::Workflow {
    /// The inboxes and wake channels its steps (and the workflows it calls) read: what a
    /// message sent to one of its runs can reach.
    pub fn mailboxes(&self) -> Mailboxes {
        let mut found = Mailboxes::default();
        each_pattern(&PathPattern::root(), &self.inner.body, &mut |_, node| match &node.kind {
            NodeKind::Loop(spec) => found.inboxes.extend(spec.inbox.clone()),
            NodeKind::Wait(spec) => {
                found.inboxes.insert(spec.event.clone());
            }
            NodeKind::Every(spec) => found.wake_channels.extend(spec.wake.clone()),
            _ => {}
        });
        found
    }
}
