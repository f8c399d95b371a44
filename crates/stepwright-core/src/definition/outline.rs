//! The outline of a definition: what `graph`, the API and the dashboard draw. `walk` builds
//! it by the one walk of the tree, with what each operator says of its own drawing
//! ([`Drawn`]), so a renderer draws a handful of layouts and has no case per operator.
//! Unlike the hashed description, a called workflow's steps are under its call, and labels
//! are written to be read: an expression in a label is cut to [`LABEL_CHARS`].

use serde::Serialize;
use serde_json::Value;

/// The longest an expression or template gets in a label, so a long condition keeps a
/// drawing readable.
pub const LABEL_CHARS: usize = 48;

/// A workflow as it is drawn.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Outline {
    /// The workflow's name.
    pub name: String,
    /// Its version as written.
    pub version: String,
    /// Its steps, run in order.
    pub steps: Vec<OutlineNode>,
}

/// A step or an operator, as it is drawn.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OutlineNode {
    /// Its id (a child's path is its parent's path, `/`, its id).
    pub id: String,
    /// The operator's name (`branch`, `map`, `spawn`…), or a step's kind (`llm`, `agent`,
    /// `tool`, `set`, `approval`…; `step` for a step written in Rust).
    pub kind: String,
    /// What it is in a few words: `map over input.items as item`, `sleep 5m`, `llm`.
    pub label: String,
    /// What its policies add: `if …`, `approved first`, `cached`.
    pub notes: Vec<String>,
    /// How its groups are drawn.
    pub layout: OutlineLayout,
    /// Its children, group by group (a branch's arms, a fork's paths, a body).
    pub groups: Vec<OutlineGroup>,
    /// What runs in its place when it fails for good.
    pub fallback: Option<OutlineGroup>,
}

/// How a node's groups are drawn.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum OutlineLayout {
    /// A step: no groups.
    Step,
    /// Its one group in a box, run in order.
    Boxed,
    /// Its one group in a box, run again and again: an edge from its end back to its start.
    Repeated {
        /// The back edge's label (`again`, `next tick`).
        again: String,
    },
    /// A decision: one group is taken, the edge to it labelled by the group's label.
    Choice {
        /// Whether none may be taken, the run going on past the decision.
        falls_through: bool,
    },
    /// Its groups side by side between a split and a join.
    Parallel {
        /// The join's label (`join`, `merge …`).
        join: String,
    },
    /// Its one group's steps are named nodes joined by edges.
    Graph {
        /// The node it starts at.
        entry: Option<String>,
        /// The edges, in the order they are tried.
        edges: Vec<OutlineEdge>,
    },
}

/// Children drawn together.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OutlineGroup {
    /// What leads to it: a branch arm's condition, `otherwise`, `path 0`.
    pub label: Option<String>,
    /// Its steps, run in order.
    pub steps: Vec<OutlineNode>,
}

/// An edge between two nodes of a graph.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OutlineEdge {
    /// The node it leaves.
    pub from: String,
    /// The node it goes to.
    pub to: String,
    /// The condition under which it is taken; always when none.
    pub when: Option<String>,
}

/// What an operator says of its own drawing; the walk adds its id, notes and groups.
pub(crate) struct Drawn {
    pub(crate) kind: String,
    pub(crate) label: String,
    pub(crate) layout: OutlineLayout,
}

impl Drawn {
    pub(crate) fn new(kind: &str, label: impl Into<String>, layout: OutlineLayout) -> Self {
        Self { kind: kind.to_owned(), label: label.into(), layout }
    }
}

/// An expression's (or any described value's) text for a label, cut to [`LABEL_CHARS`].
pub(crate) fn short(value: &Value) -> String {
    let text = match value {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    };
    if text.chars().count() <= LABEL_CHARS {
        return text;
    }
    format!("{}…", text.chars().take(LABEL_CHARS - 1).collect::<String>())
}

/// A duration as the file format writes it: `1d`, `2h`, `5m`, `30s`, `500ms`.
pub(crate) fn duration(duration: std::time::Duration) -> String {
    let ms = duration.as_millis();
    [(86_400_000, "d"), (3_600_000, "h"), (60_000, "m"), (1000, "s")]
        .into_iter()
        .find(|(unit, _)| ms >= *unit && ms.is_multiple_of(*unit))
        .map_or_else(|| format!("{ms}ms"), |(unit, name)| format!("{}{name}", ms / unit))
}
