//! Workflows: registering a file, listing and showing what is registered.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A workflow file to register.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RegisterWorkflow {
    /// The file's YAML text.
    pub source: String,
    /// The files it calls (`workflow: parts/x.yaml`), by path relative to it.
    #[serde(default)]
    pub files: BTreeMap<String, String>,
}

/// A registered version.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct WorkflowVersion {
    /// The workflow's name.
    pub name: String,
    /// Its version: 1 for the first source of the name, one more for each new source.
    pub version: u32,
    /// The definition hash its runs are pinned to.
    pub hash: String,
}

/// A registered workflow in a listing.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct WorkflowSummary {
    /// The workflow's name.
    pub name: String,
    /// Its newest version (what a run started by name gets).
    pub latest_version: u32,
    /// How many versions it has.
    pub versions: usize,
}

/// A registered workflow with its versions, input schema and graph.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct WorkflowDetails {
    /// The workflow's name.
    pub name: String,
    /// Its versions, newest first.
    pub versions: Vec<VersionInfo>,
    /// The newest version's input schema, if it declares one; `x-stepwright-order` lists its
    /// top-level properties in the order the file declares them (what a form follows).
    pub input_schema: Option<Value>,
    /// The newest version's structure, as `stepwright graph` and the dashboard draw it.
    pub graph: Outline,
}

/// One version of a workflow.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct VersionInfo {
    /// The version.
    pub version: u32,
    /// Its definition hash.
    pub hash: String,
    /// When it was registered (µs since the epoch).
    pub registered_at: i64,
    /// Who registered it.
    pub registered_by: Option<String>,
}

/// A workflow as it is drawn: each step and operator with its kind, label and layout, each
/// called workflow's steps under its call. A renderer draws the six layouts and needs no
/// case per operator; an expression in a label is cut to 48 characters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Outline {
    /// The workflow's name.
    pub name: String,
    /// Its version as written in its definition.
    pub version: String,
    /// Its steps, run in order.
    pub steps: Vec<OutlineNode>,
}

/// A step or an operator, as it is drawn. A child's path is its parent's path, `/`, its id
/// (a run's step paths add `[i]` for an item or path and `#n` for an iteration).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct OutlineNode {
    /// Its id.
    pub id: String,
    /// The operator's name (`branch`, `fork`, `map`, `loop`, `graph`, `every`, `workflow`,
    /// `spawn`, `provide`, `sequence`, `sleep`, `wait`) or a step's kind (`llm`, `agent`,
    /// `tool`, `set`, `approval`, `input`…; `step` for a step written in Rust).
    pub kind: String,
    /// What it is in a few words: `map over input.items as item`, `sleep 5m`, `llm`; empty
    /// for a plain sequence.
    pub label: String,
    /// What its policies add: `if …`, `approved first`, `cached`.
    pub notes: Vec<String>,
    /// How its groups are drawn.
    pub layout: OutlineLayout,
    /// Its children, group by group: a branch's arms, a fork's paths, a body.
    pub groups: Vec<OutlineGroup>,
    /// What runs in its place when it fails for good (drawn on an `on failure` edge).
    pub fallback: Option<OutlineGroup>,
}

/// How a node's groups are drawn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct OutlineGroup {
    /// What leads to it: a branch arm's condition, `otherwise`, `path 0`, `on failure`.
    pub label: Option<String>,
    /// Its steps, run in order.
    pub steps: Vec<OutlineNode>,
}

/// An edge between two nodes of a graph.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct OutlineEdge {
    /// The node it leaves.
    pub from: String,
    /// The node it goes to.
    pub to: String,
    /// The condition under which it is taken; always when none.
    pub when: Option<String>,
}
