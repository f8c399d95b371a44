//! The canonical description of a definition: what its content hash covers (ids, kinds,
//! schemas, policies, step identities, expression sources), and what `graph` draws and
//! history diffs compare. Its shape is part of every stored run's pin: changing it changes
//! every definition's hash, so existing runs could no longer be resumed.

use serde_json::{Value, json};

use super::{Expr, ForkPaths, InputSource, Node, NodeKind, OnFailure};

pub(super) fn describe_nodes(nodes: &[Node]) -> Value {
    nodes_with(nodes, false)
}

/// The description with each called workflow's steps under its call (`steps`): what
/// `graph` draws. Not hashed: a call is pinned by its callee's hash.
pub(super) fn outline_nodes(nodes: &[Node]) -> Value {
    nodes_with(nodes, true)
}

fn nodes_with(nodes: &[Node], expand: bool) -> Value {
    Value::Array(nodes.iter().map(|node| describe_node(node, expand)).collect())
}

/// A description under construction: a JSON object that leaves out what is unset (`null`),
/// so adding an option does not change the hash of definitions that do not use it.
struct Description(serde_json::Map<String, Value>);

impl Description {
    fn put(&mut self, key: &str, value: Value) {
        if !value.is_null() {
            self.0.insert(key.to_owned(), value);
        }
    }
}

fn describe_node(node: &Node, expand: bool) -> Value {
    let mut d = Description(serde_json::Map::new());
    d.put("id", json!(&*node.id));
    d.put("kind", json!(node.kind.name()));
    describe_io(node, &mut d);
    describe_policies(node, &mut d, expand);
    describe_kind(&node.kind, &mut d, expand);
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
fn describe_policies(node: &Node, d: &mut Description, expand: bool) {
    let p = &node.policy;
    d.put("retry", p.retry.as_ref().map(|r| serde_json::to_value(r).unwrap_or_default()).unwrap_or(Value::Null));
    d.put("timeout_ms", p.timeout.map(|t| json!(t.as_millis() as u64)).unwrap_or(Value::Null));
    if !matches!(p.on_failure, OnFailure::Abort) {
        d.put("on_failure", json!(p.on_failure.name()));
    }
    if let OnFailure::Fallback(f) = &p.on_failure {
        d.put("fallback", describe_node(f, expand));
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

/// What the operator (or the step) itself is.
fn describe_kind(kind: &NodeKind, d: &mut Description, expand: bool) {
    match kind {
        NodeKind::Step(step) => d.put("step_type", json!(step.identity())),
        NodeKind::Sequence(body) => d.put("steps", nodes_with(body, expand)),
        NodeKind::Provide { layers, body } => {
            d.put("layers", Value::Array(layers.iter().map(|l| json!(l.name())).collect()));
            d.put("steps", nodes_with(body, expand));
        }
        NodeKind::Branch { arms, otherwise } => {
            d.put(
                "arms",
                Value::Array(
                    arms.iter().map(|(c, b)| json!({ "when": c.describe(), "steps": nodes_with(b, expand) })).collect(),
                ),
            );
            d.put("otherwise", otherwise.as_ref().map(|b| nodes_with(b, expand)).unwrap_or(Value::Null));
        }
        NodeKind::Fork(spec) => {
            d.put("mode", json!(spec.mode));
            d.put("concurrency", spec.concurrency.map(|c| json!(c)).unwrap_or(Value::Null));
            d.put(
                "merge",
                match (&spec.merge, &spec.merge_source) {
                    (Some(_), Some(source)) => json!(source),
                    (Some(_), None) => json!("<closure>"),
                    (None, _) => Value::Null,
                },
            );
            d.put("as", spec.item_name.as_ref().map(|n| json!(n)).unwrap_or(Value::Null));
            match &spec.paths {
                ForkPaths::Static(paths) => {
                    d.put("paths", Value::Array(paths.iter().map(|p| nodes_with(p, expand)).collect()));
                }
                ForkPaths::Dynamic { items, body } => {
                    d.put("items", items.describe());
                    d.put("steps", nodes_with(body, expand));
                }
            }
        }
        NodeKind::Loop(spec) => {
            d.put("max_iterations", json!(spec.max_iterations));
            d.put("until", spec.until.as_ref().map(Expr::describe).unwrap_or(Value::Null));
            d.put("prepare_next", spec.prepare_next.as_ref().map(Expr::describe).unwrap_or(Value::Null));
            d.put("on_error", json!(spec.on_error));
            d.put("on_max_iterations", json!(spec.on_max));
            d.put("inbox", spec.inbox.as_ref().map(|i| json!(i)).unwrap_or(Value::Null));
            d.put("park_timeout_ms", spec.park_timeout.map(|t| json!(t.as_millis() as u64)).unwrap_or(Value::Null));
            d.put("steps", nodes_with(&spec.body, expand));
        }
        NodeKind::Graph(spec) => {
            d.put("max_steps", json!(spec.max_steps));
            d.put("entry", spec.entry.as_ref().map(|e| json!(e)).unwrap_or(Value::Null));
            d.put("nodes", nodes_with(&spec.nodes, expand));
            d.put(
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
            d.put(
                "workflow",
                json!({ "name": workflow.name(), "version": workflow.version(), "hash": workflow.hash().to_hex() }),
            );
            d.put("spawn_timeout_ms", spawn.map(|t| json!(t.as_millis() as u64)).unwrap_or(Value::Null));
            if expand {
                d.put("steps", outline_nodes(&workflow.inner.body));
            }
        }
        NodeKind::Every(spec) => {
            d.put("interval_ms", json!(spec.interval.as_millis() as u64));
            d.put("jitter", json!(spec.jitter));
            d.put("wake", spec.wake.as_ref().map(|w| json!(w)).unwrap_or(Value::Null));
            d.put("on_error", json!(spec.on_error));
            d.put("steps", nodes_with(&spec.body, expand));
        }
        NodeKind::Sleep(duration) => d.put("duration_ms", json!(duration.as_millis() as u64)),
        NodeKind::Wait(spec) => {
            d.put("event", json!(spec.event));
            d.put("timeout_ms", json!(spec.timeout.as_millis() as u64));
            if let Some(matching) = &spec.matching {
                d.put("match", matching.describe());
            }
        }
    }
}
