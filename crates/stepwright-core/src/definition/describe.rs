//! The canonical description of a definition: what its content hash covers (ids, kinds,
//! schemas, policies, step identities, expression sources), and what history diffs
//! compare. Each operator writes its own part (`operator`); this walk writes the rest. Its shape is part of every stored run's pin: changing it changes
//! every definition's hash, so existing runs could no longer be resumed.

use serde_json::{Value, json};

use super::operator::Description;
use super::{Expr, InputSource, Node, OnFailure};

pub(super) fn describe_nodes(nodes: &[Node]) -> Value {
    Value::Array(nodes.iter().map(describe_node).collect())
}

fn describe_node(node: &Node) -> Value {
    let mut d = Description(serde_json::Map::new());
    d.put("id", json!(&*node.id));
    d.put("kind", json!(node.kind.name()));
    describe_io(node, &mut d);
    describe_policies(node, &mut d);
    node.kind.operator().describe(&mut d, &describe_nodes);
    Value::Object(d.0)
}

/// The node's description, schemas and input source.
fn describe_io(node: &Node, d: &mut Description) {
    d.put("description", node.description.as_ref().map(|d| json!(d)).unwrap_or(Value::Null));
    d.put("input_schema", node.input_schema.as_ref().map(|s| s.value.clone()).unwrap_or(Value::Null));
    d.put("output_schema", node.output_schema.as_ref().map(|s| s.value.clone()).unwrap_or(Value::Null));
    d.put(
        "input",
        match &node.input {
            InputSource::Previous => Value::Null,
            InputSource::WorkflowInput => json!("$input"),
            InputSource::Output(id) => json!({ "output_of": id }),
            InputSource::Value(v) => json!({ "value": v }),
            InputSource::Expr(e) => json!({ "expr": e.describe() }),
        },
    );
}

/// The policies that apply to any node.
fn describe_policies(node: &Node, d: &mut Description) {
    let p = &node.policy;
    d.put("retry", p.retry.as_ref().map(|r| serde_json::to_value(r).unwrap_or_default()).unwrap_or(Value::Null));
    d.put("timeout_ms", p.timeout.map(|t| json!(t.as_millis() as u64)).unwrap_or(Value::Null));
    if !matches!(p.on_failure, OnFailure::Abort) {
        d.put("on_failure", json!(p.on_failure.name()));
    }
    if let OnFailure::Fallback(f) = &p.on_failure {
        d.put("fallback", describe_node(f));
    }
    d.put("effect", p.effect.map(|e| serde_json::to_value(e).unwrap_or_default()).unwrap_or(Value::Null));
    if p.safe_to_retry {
        d.put("safe_to_retry", json!(true));
    }
    if let Some(gate) = &p.approval {
        d.put("requires_approval", json!({ "message": gate.message, "approvers": gate.approvers }));
    }
    if !p.guardrails.is_empty() {
        d.put(
            "guardrails",
            Value::Array(
                p.guardrails
                    .iter()
                    .map(|g| {
                        json!({
                            "name": g.check.name(), "stage": g.stage, "action": g.action,
                        })
                    })
                    .collect(),
            ),
        );
    }
    d.put("if", p.condition.as_ref().map(Expr::describe).unwrap_or(Value::Null));
    if p.cache {
        d.put("cache", json!(true));
    }
    d.put("capture_output", p.artifact_key.as_ref().map(|k| json!(k)).unwrap_or(Value::Null));
    d.put("diff_key", p.diff_key.as_ref().map(|k| json!(k)).unwrap_or(Value::Null));
}
