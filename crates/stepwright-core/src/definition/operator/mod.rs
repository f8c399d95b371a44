//! The operators, one file each. A file holds everything the definition knows of its
//! operator: what it holds (its spec), how it is built, where its children are, what the
//! build checks of its own options, its part of the hashed description, and how it is
//! drawn. The walks of the tree — the checker, the description, the path patterns, the diff
//! keys, the outline — reach an operator only through [`Operator`], so none of them has a
//! case per operator.
//!
//! Adding an operator: its file here, its [`NodeKind`] variant (and the arm of
//! [`NodeKind::operator`]), its executor in `engine/exec`, and its syntax in
//! `stepwright-flow`. The renderers (`graph`, the dashboard) draw the [`super::Outline`]
//! and need nothing.

mod branch;
mod call;
mod every;
mod fork;
mod graph;
mod loops;
mod provide;
mod sequence;
mod sleep;
mod step;
mod wait;

use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::Value;

pub use branch::Branch;
pub(crate) use branch::BranchSpec;
pub(crate) use call::CallSpec;
pub use every::Every;
pub(crate) use every::EverySpec;
pub use fork::Fork;
pub(crate) use fork::{ForkPaths, ForkSpec};
pub use graph::Graph;
pub(crate) use graph::GraphSpec;
pub use loops::Loop;
pub(crate) use loops::LoopSpec;
pub(crate) use provide::ProvideSpec;
pub(crate) use sequence::SequenceSpec;
pub(crate) use sleep::SleepSpec;
pub(crate) use wait::WaitSpec;

use super::Node;
use super::outline::Drawn;
use super::segment::Segment;
use crate::error::BuildProblem;
use crate::step::DynStep;

/// What a node is: a step, or an operator with its spec.
#[derive(Clone)]
pub(crate) enum NodeKind {
    Step(Arc<dyn DynStep>),
    Sequence(SequenceSpec),
    Branch(BranchSpec),
    Fork(ForkSpec),
    Loop(LoopSpec),
    Graph(GraphSpec),
    Workflow(CallSpec),
    Provide(ProvideSpec),
    Every(EverySpec),
    Sleep(SleepSpec),
    Wait(WaitSpec),
}

impl NodeKind {
    /// The one place that goes from a node to what its operator knows.
    pub(crate) fn operator(&self) -> &dyn Operator {
        match self {
            Self::Step(step) => step,
            Self::Sequence(spec) => spec,
            Self::Branch(spec) => spec,
            Self::Fork(spec) => spec,
            Self::Loop(spec) => spec,
            Self::Graph(spec) => spec,
            Self::Workflow(spec) => spec,
            Self::Provide(spec) => spec,
            Self::Every(spec) => spec,
            Self::Sleep(spec) => spec,
            Self::Wait(spec) => spec,
        }
    }

    /// The operator's name as the file format spells it (`step` for a step).
    pub(crate) fn name(&self) -> &'static str {
        self.operator().name()
    }
}

/// What the definition's walks ask of an operator (or a step).
pub(crate) trait Operator {
    /// Its name as the file format spells it.
    fn name(&self) -> &'static str;

    /// Its children, group by group in declaration order, with the [`Segment`] that
    /// places each group below it. A leaf has none.
    fn children<'a>(&'a self, _groups: &mut Vec<(Segment, &'a [Node])>) {}

    /// The build's checks of its own options, each problem placed at `at` (its node's
    /// path) or below it; its children are checked by the walk.
    fn check(&self, _at: &str, _problems: &mut Problems) {}

    /// Its own part of the hashed description; the walk adds the id, kind, input, schemas
    /// and policies, and describes a list of child nodes with `nodes`. Changing what this
    /// writes changes every definition's hash, so stored runs could not be resumed.
    fn describe(&self, d: &mut Description, nodes: &dyn Fn(&[Node]) -> Value);

    /// How it is drawn: its kind, label and layout.
    fn drawn(&self) -> Drawn;

    /// What leads to the group of its children at `segment` in a drawing (a branch arm's
    /// condition, `otherwise`, `path 0`), if anything.
    fn group_label(&self, _segment: Segment) -> Option<String> {
        None
    }

    /// The inboxes and wake channels it reads.
    fn reads(&self, _mailboxes: &mut Mailboxes) {}
}

/// Where the build's checks put what they find.
pub(crate) type Problems = Vec<BuildProblem>;

/// Records a problem at `at`.
pub(crate) fn problem(problems: &mut Problems, at: &str, message: impl Into<String>) {
    problems.push(BuildProblem {
        at: if at.is_empty() { "<workflow>".into() } else { at.to_owned() },
        message: message.into(),
    });
}

/// A description under construction: a JSON object that leaves out what is unset (`null`),
/// so adding an option does not change the hash of definitions that do not use it.
pub(crate) struct Description(pub(crate) serde_json::Map<String, Value>);

impl Description {
    pub(crate) fn put(&mut self, key: &str, value: Value) {
        if !value.is_null() {
            self.0.insert(key.to_owned(), value);
        }
    }
}

/// What a run of a definition takes messages from, by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Mailboxes {
    /// The inboxes its loops take messages from and the events its waits wait for.
    pub inboxes: BTreeSet<String>,
    /// The channels that wake its `every` steps.
    pub wake_channels: BTreeSet<String>,
}
