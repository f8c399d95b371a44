//! The checks a workflow passes when it is built: every option that cannot be honoured is
//! reported with the node's path, all problems at once.

use std::collections::HashSet;
use std::time::Duration;

use serde_json::Value;

use super::operator::{NodeKind, problem};
use super::segment::Segment;
use super::{Node, OnFailure, Schema};
use crate::error::BuildProblem;
use crate::ids::check_step_name as check_name;
use crate::policy::{Effect, GuardrailAction};

#[derive(Default)]
pub(super) struct Checker {
    pub(super) problems: Vec<BuildProblem>,
}

impl Checker {
    pub(super) fn problem(&mut self, at: &str, message: impl Into<String>) {
        problem(&mut self.problems, at, message);
    }

    pub(super) fn nodes(&mut self, segment: Segment, parent: &str, nodes: &[Node]) {
        let mut seen = HashSet::new();
        for node in nodes {
            let at = segment.display(parent, &node.id);
            if !seen.insert(node.id.clone()) {
                self.problem(&at, format!("duplicate step id {:?} in the same scope", &*node.id));
            }
            self.node(&at, node);
        }
    }

    fn node(&mut self, at: &str, node: &Node) {
        if let Err(why) = check_name(&node.id) {
            self.problem(at, format!("step id: {why}"));
        }
        for (what, schema) in [("input", &node.input_schema), ("output", &node.output_schema)] {
            if let Some(Schema { validator: Err(why), .. }) = schema {
                self.problem(at, format!("{what} schema is not a valid JSON Schema: {why}"));
            }
        }
        let is_leaf = matches!(node.kind, NodeKind::Step(_));
        let policy = &node.policy;
        let mut problems: Vec<String> = Vec::new();
        if let Some(retry) = &policy.retry {
            if retry.max_attempts == 0 {
                problems.push("retry.max_attempts must be at least 1".into());
            }
            if retry.initial_delay > retry.max_delay {
                problems.push(format!(
                    "retry.initial_delay ({:?}) is larger than retry.max_delay ({:?})",
                    retry.initial_delay, retry.max_delay
                ));
            }
            if !(0.0..=1.0).contains(&retry.jitter) {
                problems.push(format!("retry.jitter must be within 0..=1, not {}", retry.jitter));
            }
        }
        if policy.timeout == Some(Duration::ZERO) {
            problems.push("timeout must be longer than zero".into());
        }
        if matches!(policy.on_failure, OnFailure::Retry) && policy.retry.is_none() {
            problems.push("on_failure: retry needs a retry policy (max_attempts, backoff)".into());
        }
        if policy.cache {
            if !is_leaf {
                problems.push(format!("cache applies to steps, not to a {}", node.kind.name()));
            } else if node.effect_or_default() != Effect::Pure {
                problems.push(
                    format!("cache needs a pure step, but this step's effect is {:?}", node.effect_or_default())
                        .to_lowercase(),
                );
            }
        }
        if policy.effect.is_some() && !is_leaf {
            problems.push(format!("effect applies to steps, not to a {}", node.kind.name()));
        }
        if policy.safe_to_retry && !node.effect_or_default().is_fenced() {
            problems.push("safe_to_retry applies only to write or external steps".into());
        }
        for guardrail in &policy.guardrails {
            if guardrail.action == GuardrailAction::Redact && !guardrail.check.can_redact() {
                problems.push(format!(
                    "guardrail {:?} cannot redact, so its action cannot be redact",
                    guardrail.check.name()
                ));
            }
        }
        for p in problems {
            self.problem(at, p);
        }
        node.kind.operator().check(at, &mut self.problems);
        // A called workflow's steps were checked when it was built; checking them again
        // would redo that work once for every workflow that calls it.
        let called = matches!(node.kind, NodeKind::Workflow { .. });
        for (segment, group) in node.children() {
            if !(called && segment == Segment::Body) {
                self.nodes(segment, at, group);
            }
        }
    }
}

/// Whether a value is a JSON Schema the engine can validate with; the error says what is
/// wrong. Loaders call it to report a bad schema at the place it was written; the build
/// checks the same thing for schemas set from Rust.
///
/// ```
/// use serde_json::json;
/// assert!(stepwright_core::check_schema(&json!({ "type": "object" })).is_ok());
/// assert!(stepwright_core::check_schema(&json!({ "type": 12 })).is_err());
/// ```
pub fn check_schema(schema: &Value) -> Result<(), SchemaError> {
    jsonschema::validator_for(schema)
        .map(|_| ())
        .map_err(|e| SchemaError { pointer: e.instance_path().to_string(), message: e.to_string() })
}

/// Why a value is not a valid JSON Schema, and where in it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct SchemaError {
    /// A JSON pointer to the offending keyword's value inside the schema (`/properties/x/type`),
    /// empty for the schema itself: a loader places the problem there.
    pub pointer: String,
    /// What is wrong.
    pub message: String,
}

/// Every way `value` breaks a compiled schema, each as `at /pointer: message` (`/` for the
/// value itself): how every schema violation reads, wherever it is found.
pub(crate) fn schema_violations(validator: &jsonschema::Validator, value: &Value) -> Vec<String> {
    validator
        .iter_errors(value)
        .map(|e| {
            let at = e.instance_path().to_string();
            format!("at {}: {e}", if at.is_empty() { "/" } else { &at })
        })
        .collect()
}
