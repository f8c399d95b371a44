//! A leaf step: what the walks know of it (its identity; no children).

use std::sync::Arc;

use serde_json::{Value, json};

use super::{Description, NodeKind, Operator};
use crate::definition::Node;
use crate::definition::outline::{Drawn, OutlineLayout};
use crate::step::{DynStep, Step, TypedStep};

impl Node {
    /// A typed step. Its input is checked by deserializing into `S::Input` (errors name the
    /// JSON path), its output is `S::Output` serialized.
    pub fn step<S: Step>(id: &str, step: S) -> Self {
        Self::with_kind(id, NodeKind::Step(Arc::new(TypedStep::new(step))))
    }

    /// A step in its dynamic JSON form (how workflow files drive steps).
    pub fn dyn_step(id: &str, step: Arc<dyn DynStep>) -> Self {
        Self::with_kind(id, NodeKind::Step(step))
    }
}

impl Operator for Arc<dyn DynStep> {
    fn name(&self) -> &'static str {
        "step"
    }

    fn describe(&self, d: &mut Description, _nodes: &dyn Fn(&[Node]) -> Value) {
        d.put("step_type", json!(self.identity()));
    }

    /// Drawn as its kind: a file step's identity starts with it (`llm …`, `memory.recall …`);
    /// a step written in Rust is named by its type (`my_crate::Classify`), drawn `step`.
    fn drawn(&self) -> Drawn {
        let identity = self.identity();
        let first = identity.split_whitespace().next().unwrap_or_default();
        let is_kind = first.starts_with(|c: char| c.is_ascii_lowercase())
            && first.chars().all(|c| c.is_ascii_lowercase() || c == '.' || c == '_');
        let kind = if is_kind { first } else { "step" };
        Drawn::new(kind, kind, OutlineLayout::Step)
    }
}
