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
    /// The newest version's structure (steps, operators, policies), as `stepwright graph`
    /// draws it.
    pub graph: Value,
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
