//! The canonical description of a definition: what its content hash covers (ids, kinds,
//! schemas, policies, step identities, expression sources), and what `graph` draws and
//! history diffs compare. Its shape is part of every stored run's pin: changing it changes
//! every definition's hash, so existing runs could no longer be resumed.

use serde_json::{Value, json};

use super::{Expr, ForkPaths, InputSource, Node, NodeKind, OnFailure};

pub(super) fn describe_nodes(nodes: &[Node]) -> Value {
    Value::Array(nodes.iter().map(describe_node).collect())
}

fn describe_node(node: &Node) -> Value {
    let p = &node.policy;
    let mut d = json!({ "id": &*node.id, "kind": node.kind.name() });
    let obj = d.as_object_mut().expect("object");
    let mut put = |key: &str, value: Value| {
        if !value.is_null() {
            obj.insert(key.to_owned(), value);
        }
    };
    put("description", node.description.as_ref().map(|d| json!(d)).unwrap_or(Value::Null));
    put("input_schema", node.input_schema.as_ref().map(|s| s.value.clone()).unwrap_or(Value::Null));
    put("output_schema", node.output_schema.as_ref().map(|s| s.value.clone()).unwrap_or(Value::Null));
    put(
        "input",
        match &node.input {
            InputSource::Previous => Value::Null,
            InputSource::WorkflowInput => json!("$input"),
            InputSource::Output(id) => json!({ "output_of": id }),
            InputSource::Value(v) => json!({ "value": v }),
            InputSource::Expr(e) => json!({ "expr": e.describe() }),
        },
    );
    put("retry", p.retry.as_ref().map(|r| serde_json::to_value(r).unwrap_or_default()).unwrap_or(Value::Null));
    put("timeout_ms", p.timeout.map(|t| json!(t.as_millis() as u64)).unwrap_or(Value::Null));
    if !matches!(p.on_failure, OnFailure::Abort) {
        put("on_failure", json!(p.on_failure.name()));
    }
    if let OnFailure::Fallback(f) = &p.on_failure {
        put("fallback", describe_node(f));
    }
    put("effect", p.effect.map(|e| serde_json::to_value(e).unwrap_or_default()).unwrap_or(Value::Null));
    if p.safe_to_retry {
        put("safe_to_retry", json!(true));
    }
    if let Some(gate) = &p.approval {
        put("requires_approval", json!({ "message": gate.message, "approvers": gate.approvers }));
    }
    if !p.guardrails.is_empty() {
        put(
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
    put("if", p.condition.as_ref().map(Expr::describe).unwrap_or(Value::Null));
    if p.cache {
        put("cache", json!(true));
    }
    put("capture_output", p.artifact_key.as_ref().map(|k| json!(k)).unwrap_or(Value::Null));
    put("diff_key", p.diff_key.as_ref().map(|k| json!(k)).unwrap_or(Value::Null));
    match &node.kind {
        NodeKind::Step(step) => put("step_type", json!(step.identity())),
        NodeKind::Sequence(body) => put("steps", describe_nodes(body)),
        NodeKind::Provide { layers, body } => {
            put("layers", Value::Array(layers.iter().map(|l| json!(l.name())).collect()));
            put("steps", describe_nodes(body));
        }
        NodeKind::Branch { arms, otherwise } => {
            put(
                "arms",
                Value::Array(
                    arms.iter().map(|(c, b)| json!({ "when": c.describe(), "steps": describe_nodes(b) })).collect(),
                ),
            );
            put("otherwise", otherwise.as_ref().map(|b| describe_nodes(b)).unwrap_or(Value::Null));
        }
        NodeKind::Fork(spec) => {
            put("mode", json!(spec.mode));
            put("concurrency", spec.concurrency.map(|c| json!(c)).unwrap_or(Value::Null));
            put("merge", if spec.merge.is_some() { json!("<closure>") } else { Value::Null });
            put("as", spec.item_name.as_ref().map(|n| json!(n)).unwrap_or(Value::Null));
            match &spec.paths {
                ForkPaths::Static(paths) => {
                    put("paths", Value::Array(paths.iter().map(|p| describe_nodes(p)).collect()));
                }
                ForkPaths::Dynamic { items, body } => {
                    put("items", items.describe());
                    put("steps", describe_nodes(body));
                }
            }
        }
        NodeKind::Loop(spec) => {
            put("max_iterations", json!(spec.max_iterations));
            put("until", spec.until.as_ref().map(Expr::describe).unwrap_or(Value::Null));
            put("prepare_next", spec.prepare_next.as_ref().map(Expr::describe).unwrap_or(Value::Null));
            put("on_error", json!(spec.on_error));
            put("on_max_iterations", json!(spec.on_max));
            put("inbox", spec.inbox.as_ref().map(|i| json!(i)).unwrap_or(Value::Null));
            put("park_timeout_ms", spec.park_timeout.map(|t| json!(t.as_millis() as u64)).unwrap_or(Value::Null));
            put("steps", describe_nodes(&spec.body));
        }
        NodeKind::Graph(spec) => {
            put("max_steps", json!(spec.max_steps));
            put("entry", spec.entry.as_ref().map(|e| json!(e)).unwrap_or(Value::Null));
            put("nodes", describe_nodes(&spec.nodes));
            put(
                "edges",
                Value::Array(
                    spec.edges
                        .iter()
                        .map(|e| {
                            json!({
                                "from": e.from, "to": e.to, "when": e.when.as_ref().map(Expr::describe),
                            })
                        })
                        .collect(),
                ),
            );
        }
        NodeKind::Workflow { workflow, spawn } => {
            put(
                "workflow",
                json!({ "name": workflow.name(), "version": workflow.version(), "hash": workflow.hash().to_hex() }),
            );
            put("spawn_timeout_ms", spawn.map(|t| json!(t.as_millis() as u64)).unwrap_or(Value::Null));
        }
        NodeKind::Every(spec) => {
            put("interval_ms", json!(spec.interval.as_millis() as u64));
            put("jitter", json!(spec.jitter));
            put("wake", spec.wake.as_ref().map(|w| json!(w)).unwrap_or(Value::Null));
            put("on_error", json!(spec.on_error));
            put("steps", describe_nodes(&spec.body));
        }
        NodeKind::Sleep(d) => put("duration_ms", json!(d.as_millis() as u64)),
    }
    d
}
