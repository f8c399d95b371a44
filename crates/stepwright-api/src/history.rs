//! Replay, recompute and fork: the requests and what each found.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::Totals;

/// A recompute.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RecomputeRun {
    /// Re-execute from this step on (default: from the start); what was recorded before it
    /// is served from the journal.
    #[serde(default)]
    pub from: Option<String>,
    /// Recompute with this registered version of the run's workflow — a new prompt, model or
    /// step — instead of the definition the run is pinned to.
    #[serde(default, deserialize_with = "crate::whole::optional")]
    pub version: Option<u32>,
    /// Model bindings answered by others the definition already has: `{"smart": "fast"}`
    /// sends every call to `smart` to `fast`'s endpoint and model (`GET
    /// /v1/runs/{id}/definition` lists them). Never an endpoint or a key: those are the
    /// server's configuration.
    #[serde(default)]
    pub models: BTreeMap<String, String>,
    /// Keep the result as a new run forked from this one (its id is the report's `forked`).
    #[serde(default)]
    pub persist: bool,
    /// Recompute with this definition — an edited file's YAML, never registered: a what-if
    /// changes no version the workflow's runs start with. Not with `version`.
    #[serde(default)]
    pub source: Option<String>,
    /// The files `source` calls (`workflow: parts/x.yaml`), by path relative to it.
    #[serde(default)]
    pub files: BTreeMap<String, String>,
}

/// A fork.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ForkRun {
    /// The step to fork before: the new run has everything the run recorded before it.
    pub at: String,
    /// A new input for the new run (default: the run's).
    #[serde(default)]
    pub input: Option<Value>,
    /// Replacement outputs, by step path, for steps that completed before `at`.
    #[serde(default)]
    pub steps: BTreeMap<String, Value>,
    /// Wait up to this long (at most 60) for the new run to finish or stop for a person.
    #[serde(default)]
    #[schemars(range(min = 0, max = 60))]
    pub wait_seconds: Option<f64>,
}

/// What a replay found (`POST /v1/runs/{id}/replay`, `replay --json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ReplayReport {
    /// The run replayed.
    pub run: String,
    /// Every step, in the order the original run first reached it (steps only the replay
    /// reached after them, in its order).
    pub steps: Vec<StepComparison>,
    /// The original run's output.
    pub recorded_output: Option<Value>,
    /// The replay's output.
    pub replayed_output: Option<Value>,
    /// Whether every step and the output are identical (served steps count as identical).
    pub identical: bool,
}

/// How one step compares in a replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum StepReplay {
    /// Re-executed; the same output as recorded.
    Identical,
    /// Re-executed; a different output.
    Different,
    /// A `write`/`external` step: its recorded output was served, not re-executed.
    Served,
    /// Recorded in the original, not reached by the replay.
    Missing,
    /// Reached by the replay, not recorded in the original.
    Added,
}

/// One step's comparison in a replay.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct StepComparison {
    /// The step path compared.
    pub path: String,
    /// How it compares.
    pub outcome: StepReplay,
    /// The recorded output's hash (SHA-256 of its canonical JSON, in hex).
    pub recorded: Option<String>,
    /// The replayed output's hash.
    pub replayed: Option<String>,
    /// For a different output: the structural differences, as `pointer: before → after`
    /// lines (arrays matched by the step's `diff_key` when it has one).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub diff: Vec<String>,
}

/// What a recompute found (`POST /v1/runs/{id}/recompute`, `recompute --json`): per step
/// what changed, decisions, outputs, and what the run's model calls used and cost before
/// and after.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RecomputeView {
    /// The run recomputed.
    pub run: String,
    /// Every step, in the order the original run first reached it (steps only the
    /// recompute reached after them, in its order).
    pub steps: Vec<RecomputedStep>,
    /// Decisions that changed.
    pub decisions: Vec<DecisionChange>,
    /// The original output.
    pub recorded_output: Option<Value>,
    /// The recomputed output.
    pub recomputed_output: Option<Value>,
    /// The new run, if persisted.
    pub forked: Option<String>,
    /// Whether anything changed (a value, a schema violation, a decision, the output).
    pub changed: bool,
    /// How the recompute ended.
    pub status: crate::RunStatus,
    /// Why it failed, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<crate::run::ErrorView>,
    /// Model usage and cost, original against recomputed.
    pub usage: UsageChange,
}

/// How a step's output compares in a recompute.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "change", rename_all = "snake_case")]
pub enum StepChange {
    /// The same output.
    Clean,
    /// Another output; the differences, as `pointer: before → after` lines.
    ValueChanged {
        /// The structural differences.
        diff: Vec<String>,
    },
    /// The new output does not match the step's output schema.
    SchemaViolation {
        /// What the validation said.
        message: String,
    },
    /// Served from the journal (before the starting point, an effect not repeated, or a
    /// sub-step of a served step).
    Served,
    /// Failed in the recompute (its last attempt).
    Failed {
        /// Why.
        error: crate::run::ErrorView,
    },
    /// Recorded in the original, not reached now.
    Missing,
    /// Reached now, not recorded in the original.
    Added,
}

/// One step in a recompute.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RecomputedStep {
    /// The step path compared.
    pub path: String,
    /// What changed.
    #[serde(flatten)]
    pub change: StepChange,
    /// Why a step was served or is missing, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
    /// A served write (or unsafe external step) whose input changed: the input it would be
    /// given now. It was not executed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub would_execute_with: Option<serde_json::Value>,
}

/// A decision (branch arm, map items, loop verdict, graph edge) that came out differently.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DecisionChange {
    /// Where.
    pub path: String,
    /// What the original decided.
    pub before: Option<Value>,
    /// What the recompute decided.
    pub after: Option<Value>,
}

/// Model usage and cost of a run against its recompute.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct UsageChange {
    /// The original run's, in all.
    pub before: Totals,
    /// The recompute's, in all (a step served from the journal counts what it cost then).
    pub after: Totals,
    /// Per step path whose usage differs, in the report's step order.
    pub steps: Vec<StepUsageChange>,
}

/// One step's model usage before and after a recompute.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StepUsageChange {
    /// The step path (where its model calls were made).
    pub path: String,
    /// Before.
    pub before: Totals,
    /// After.
    pub after: Totals,
}
