//! `fork` (static or dynamic parallel paths) and `map` (a body once per item).

use std::sync::Arc;

use serde_json::{Value, json};

use super::{Description, NodeKind, Operator, Problems, problem};
use crate::definition::outline::{Drawn, OutlineLayout, short};
use crate::definition::segment::Segment;
use crate::definition::{Expr, ForkMode, Merge, Node, PathResult};
use crate::error::StepError;
use crate::ids::check_step_name as check_name;

#[derive(Clone)]
pub(crate) struct ForkSpec {
    pub(crate) mode: ForkMode,
    pub(crate) concurrency: Option<usize>,
    pub(crate) paths: ForkPaths,
    pub(crate) merge: Option<Merge>,
    /// The merge's text where it came from a file (for the definition's description).
    pub(crate) merge_source: Option<String>,
    pub(crate) is_map: bool,
    pub(crate) item_name: Option<String>,
}

#[derive(Clone)]
pub(crate) enum ForkPaths {
    Static(Vec<Vec<Node>>),
    Dynamic { items: Expr<Vec<Value>>, body: Vec<Node> },
}

/// Builds a `fork` (static or dynamic parallel paths) or a `map`.
pub struct Fork {
    id: String,
    spec: ForkSpec,
}

impl Fork {
    /// A fork with no paths yet (mode `all`).
    pub fn new(id: &str) -> Self {
        Self {
            id: id.to_owned(),
            spec: ForkSpec {
                mode: ForkMode::All,
                concurrency: None,
                paths: ForkPaths::Static(Vec::new()),
                merge: None,
                merge_source: None,
                is_map: false,
                item_name: None,
            },
        }
    }

    /// A map: run `body` once per item of the list `items` computes, in parallel (fail fast),
    /// output the list of item outputs in item order. Each item is bound as `as_name` and is
    /// the body's input.
    pub fn map(id: &str, items: Expr<Vec<Value>>, as_name: &str, body: impl IntoIterator<Item = Node>) -> Self {
        let mut fork = Self::new(id);
        fork.spec.paths = ForkPaths::Dynamic { items, body: body.into_iter().collect() };
        fork.spec.is_map = true;
        fork.spec.item_name = Some(as_name.to_owned());
        fork
    }

    /// Adds a static path.
    #[must_use]
    pub fn path(mut self, steps: impl IntoIterator<Item = Node>) -> Self {
        match &mut self.spec.paths {
            ForkPaths::Static(paths) => paths.push(steps.into_iter().collect()),
            ForkPaths::Dynamic { .. } => {
                // Mixing is rejected at build time; keep the paths so the error can name them.
                self.spec.paths = ForkPaths::Static(vec![steps.into_iter().collect()]);
                self.spec.concurrency = Some(0);
            }
        }
        self
    }

    /// Dynamic paths: one per value `items` computes, each running `body` with it as input.
    #[must_use]
    pub fn paths_from(mut self, items: Expr<Vec<Value>>, body: impl IntoIterator<Item = Node>) -> Self {
        self.spec.paths = ForkPaths::Dynamic { items, body: body.into_iter().collect() };
        self
    }

    /// Sets the mode.
    #[must_use]
    pub fn mode(mut self, mode: ForkMode) -> Self {
        self.spec.mode = mode;
        self
    }

    /// Caps how many paths run at once.
    #[must_use]
    pub fn concurrency(mut self, limit: usize) -> Self {
        self.spec.concurrency = Some(limit);
        self
    }

    /// Merges path results explicitly.
    #[must_use]
    pub fn merge(
        mut self,
        merge: impl Fn(Vec<PathResult>) -> Result<Value, StepError> + Send + Sync + 'static,
    ) -> Self {
        self.spec.merge = Some(Arc::new(merge));
        self
    }

    /// [`Fork::merge`] written as `source` (a file's expression): the source, not a
    /// closure, is what the definition hash sees, so changing it changes the hash.
    #[must_use]
    pub fn merge_described(
        mut self,
        source: &str,
        merge: impl Fn(Vec<PathResult>) -> Result<Value, StepError> + Send + Sync + 'static,
    ) -> Self {
        self.spec.merge = Some(Arc::new(merge));
        self.spec.merge_source = Some(source.to_owned());
        self
    }
}

impl From<Fork> for Node {
    fn from(f: Fork) -> Self {
        Node::with_kind(&f.id, NodeKind::Fork(f.spec))
    }
}

impl ForkSpec {
    /// The merge as the description writes it: a file's source, `<closure>` for Rust's.
    fn merge_described(&self) -> Value {
        match (&self.merge, &self.merge_source) {
            (Some(_), Some(source)) => json!(source),
            (Some(_), None) => json!("<closure>"),
            (None, _) => Value::Null,
        }
    }

    fn mode_name(&self) -> String {
        serde_json::to_value(self.mode).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default()
    }
}

impl Operator for ForkSpec {
    fn name(&self) -> &'static str {
        if self.is_map { "map" } else { "fork" }
    }

    fn children<'a>(&'a self, groups: &mut Vec<(Segment, &'a [Node])>) {
        match &self.paths {
            ForkPaths::Static(paths) => {
                groups.extend(paths.iter().enumerate().map(|(index, path)| (Segment::Path(index), path.as_slice())));
            }
            ForkPaths::Dynamic { body, .. } => groups.push((Segment::Item, body.as_slice())),
        }
    }

    fn check(&self, at: &str, problems: &mut Problems) {
        let kind = self.name();
        if self.concurrency == Some(0) {
            problem(
                problems,
                at,
                format!("{kind} concurrency must be at least 1 (and paths cannot mix static and dynamic)"),
            );
        }
        if self.is_map && self.mode != ForkMode::All {
            problem(problems, at, "map always fails fast; use a fork with dynamic paths for race or settle");
        }
        match &self.paths {
            ForkPaths::Static(paths) => {
                if paths.is_empty() {
                    problem(problems, at, "fork needs at least one path");
                }
                for (index, path) in paths.iter().enumerate() {
                    if path.is_empty() {
                        problem(problems, &format!("{at}[{index}]"), "a fork path needs at least one step");
                    }
                }
            }
            ForkPaths::Dynamic { body, .. } => {
                if body.is_empty() {
                    problem(problems, at, format!("{kind} body needs at least one step"));
                }
            }
        }
        if let Some(name) = &self.item_name
            && check_name(name).is_err()
            && !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            problem(problems, at, format!("map `as` name {name:?} must be an identifier"));
        }
    }

    fn describe(&self, d: &mut Description, nodes: &dyn Fn(&[Node]) -> Value) {
        d.put("mode", json!(self.mode));
        d.put("concurrency", self.concurrency.map(|c| json!(c)).unwrap_or(Value::Null));
        d.put("merge", self.merge_described());
        d.put("as", self.item_name.as_ref().map(|n| json!(n)).unwrap_or(Value::Null));
        match &self.paths {
            ForkPaths::Static(paths) => {
                d.put("paths", Value::Array(paths.iter().map(|p| nodes(p)).collect()));
            }
            ForkPaths::Dynamic { items, body } => {
                d.put("items", items.describe());
                d.put("steps", nodes(body));
            }
        }
    }

    fn group_label(&self, segment: Segment) -> Option<String> {
        match segment {
            Segment::Path(index) => Some(format!("path {index}")),
            _ => None,
        }
    }

    /// Static paths side by side between a split and a join; a map's (or dynamic fork's)
    /// one body in a box, since it runs once per item.
    fn drawn(&self) -> Drawn {
        let at_a_time = self.concurrency.map(|n| format!(" · {n} at a time")).unwrap_or_default();
        match &self.paths {
            ForkPaths::Static(_) => {
                let join = match self.merge_described() {
                    Value::Null => "join".to_owned(),
                    // A file's merge is kept as its template's JSON text.
                    Value::String(source) => {
                        let template = serde_json::from_str::<Value>(&source).unwrap_or(Value::String(source));
                        format!("merge {}", short(&template))
                    }
                    other => format!("merge {}", short(&other)),
                };
                Drawn::new("fork", format!("fork ({}){at_a_time}", self.mode_name()), OutlineLayout::Parallel { join })
            }
            ForkPaths::Dynamic { items, .. } => {
                let name = self.item_name.as_ref().map(|n| format!(" as {n}")).unwrap_or_default();
                let label = if self.is_map {
                    format!("map over {}{name}{at_a_time}", short(&items.describe()))
                } else {
                    format!("fork ({}) over {}{name}{at_a_time}", self.mode_name(), short(&items.describe()))
                };
                Drawn::new(self.name(), label, OutlineLayout::Boxed)
            }
        }
    }
}
