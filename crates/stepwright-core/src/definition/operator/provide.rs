//! `provide`: memory layers made available to every descendant of a body.

use std::sync::Arc;

use serde_json::{Value, json};

use super::{Description, NodeKind, Operator, Problems, problem};
use crate::definition::Node;
use crate::definition::outline::{Drawn, OutlineLayout};
use crate::definition::segment::Segment;
use crate::services::ProvidedLayer;

#[derive(Clone)]
pub(crate) struct ProvideSpec {
    pub(crate) layers: Vec<Arc<dyn ProvidedLayer>>,
    pub(crate) body: Vec<Node>,
}

impl Node {
    /// Make memory layers available to every descendant of `body`.
    pub fn provide(
        id: &str,
        layers: impl IntoIterator<Item = Arc<dyn ProvidedLayer>>,
        body: impl IntoIterator<Item = Node>,
    ) -> Self {
        Self::with_kind(
            id,
            NodeKind::Provide(ProvideSpec { layers: layers.into_iter().collect(), body: body.into_iter().collect() }),
        )
    }
}

impl Operator for ProvideSpec {
    fn name(&self) -> &'static str {
        "provide"
    }

    fn children<'a>(&'a self, groups: &mut Vec<(Segment, &'a [Node])>) {
        groups.push((Segment::Body, self.body.as_slice()));
    }

    fn check(&self, at: &str, problems: &mut Problems) {
        if self.body.is_empty() {
            problem(problems, at, "provide needs at least one step");
        }
    }

    fn describe(&self, d: &mut Description, nodes: &dyn Fn(&[Node]) -> Value) {
        d.put("layers", Value::Array(self.layers.iter().map(|l| json!(l.name())).collect()));
        d.put("steps", nodes(&self.body));
    }

    fn drawn(&self) -> Drawn {
        let names: Vec<&str> = self.layers.iter().map(|l| l.name()).collect();
        let label = if names.is_empty() { "provide".to_owned() } else { format!("provide {}", names.join(", ")) };
        Drawn::new("provide", label, OutlineLayout::Boxed)
    }
}
