//! Where a group of children sits below its parent, in the path grammar
//! [`crate::StepPath`] owns: the vocabulary every walk of the definition and every operator
//! shares.

use super::Node;
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
