//! Builders for the operators: branch, fork (and map), loop, graph, every. Each builds a
//! [`Node`]; the build checks it (see `check`).

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::{
    Edge, EveryOnError, EverySpec, Expr, ForkMode, ForkPaths, ForkSpec, GraphSpec, LoopOnError, LoopSpec, Node,
    NodeKind, OnMaxIterations, PathResult, Predicate, Verdict,
};
use crate::error::StepError;

/// A step (or any node) list, for builders.
fn nodes(nodes: impl IntoIterator<Item = Node>) -> Vec<Node> {
    nodes.into_iter().collect()
}

/// Builds a `branch`: ordered conditions, the first true one wins; no match skips.
pub struct Branch {
    id: String,
    arms: Vec<(Predicate, Vec<Node>)>,
    otherwise: Option<Vec<Node>>,
}

impl Branch {
    /// An empty branch.
    pub fn new(id: &str) -> Self {
        Self { id: id.to_owned(), arms: Vec::new(), otherwise: None }
    }

    /// Adds an arm.
    #[must_use]
    pub fn when(mut self, condition: Predicate, steps: impl IntoIterator<Item = Node>) -> Self {
        self.arms.push((condition, nodes(steps)));
        self
    }

    /// Sets the arm taken when no condition holds.
    #[must_use]
    pub fn otherwise(mut self, steps: impl IntoIterator<Item = Node>) -> Self {
        self.otherwise = Some(nodes(steps));
        self
    }
}

impl From<Branch> for Node {
    fn from(b: Branch) -> Self {
        Node::with_kind(&b.id, NodeKind::Branch { arms: b.arms, otherwise: b.otherwise })
    }
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
        fork.spec.paths = ForkPaths::Dynamic { items, body: nodes(body) };
        fork.spec.is_map = true;
        fork.spec.item_name = Some(as_name.to_owned());
        fork
    }

    /// Adds a static path.
    #[must_use]
    pub fn path(mut self, steps: impl IntoIterator<Item = Node>) -> Self {
        match &mut self.spec.paths {
            ForkPaths::Static(paths) => paths.push(nodes(steps)),
            ForkPaths::Dynamic { .. } => {
                // Mixing is rejected at build time; keep the paths so the error can name them.
                self.spec.paths = ForkPaths::Static(vec![nodes(steps)]);
                self.spec.concurrency = Some(0);
            }
        }
        self
    }

    /// Dynamic paths: one per value `items` computes, each running `body` with it as input.
    #[must_use]
    pub fn paths_from(mut self, items: Expr<Vec<Value>>, body: impl IntoIterator<Item = Node>) -> Self {
        self.spec.paths = ForkPaths::Dynamic { items, body: nodes(body) };
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

/// Builds a `loop`: the body repeated until a verdict says done or `max_iterations`.
pub struct Loop {
    id: String,
    spec: LoopSpec,
}

impl Loop {
    /// A loop over `body`, at most `max_iterations` times.
    pub fn new(id: &str, max_iterations: u32, body: impl IntoIterator<Item = Node>) -> Self {
        Self {
            id: id.to_owned(),
            spec: LoopSpec {
                body: nodes(body),
                until: None,
                max_iterations,
                prepare_next: None,
                on_error: LoopOnError::Abort,
                on_max: OnMaxIterations::Complete,
                inbox: None,
                park_timeout: None,
            },
        }
    }

    /// The verdict after each iteration (the scope sees the iteration's outputs and `loop`).
    #[must_use]
    pub fn until(mut self, verdict: Expr<Verdict>) -> Self {
        self.spec.until = Some(verdict);
        self
    }

    /// Computes the next iteration's input (default: the last iteration's output).
    #[must_use]
    pub fn prepare_next(mut self, next: Expr<Value>) -> Self {
        self.spec.prepare_next = Some(next);
        self
    }

    /// What a failed iteration does.
    #[must_use]
    pub fn on_error(mut self, on_error: LoopOnError) -> Self {
        self.spec.on_error = on_error;
        self
    }

    /// What reaching `max_iterations` does.
    #[must_use]
    pub fn on_max_iterations(mut self, on_max: OnMaxIterations) -> Self {
        self.spec.on_max = on_max;
        self
    }

    /// Each iteration first takes one message from this inbox (bound as `loop.message`);
    /// the loop ends when none arrives within `park_timeout`.
    #[must_use]
    pub fn inbox(mut self, name: &str, park_timeout: Duration) -> Self {
        self.spec.inbox = Some(name.to_owned());
        self.spec.park_timeout = Some(park_timeout);
        self
    }
}

impl From<Loop> for Node {
    fn from(l: Loop) -> Self {
        Node::with_kind(&l.id, NodeKind::Loop(l.spec))
    }
}

/// Builds a `graph`: named nodes with conditional edges; cycles bounded by `max_steps`.
pub struct Graph {
    id: String,
    spec: GraphSpec,
}

impl Graph {
    /// An empty graph that stops after `max_steps` node executions.
    pub fn new(id: &str, max_steps: u32) -> Self {
        Self { id: id.to_owned(), spec: GraphSpec { nodes: Vec::new(), edges: Vec::new(), entry: None, max_steps } }
    }

    /// Adds a node (its id is its name). The first node added is the entry unless set.
    #[must_use]
    pub fn node(mut self, node: Node) -> Self {
        self.spec.nodes.push(node);
        self
    }

    /// Sets the entry node.
    #[must_use]
    pub fn entry(mut self, name: &str) -> Self {
        self.spec.entry = Some(name.to_owned());
        self
    }

    /// An unconditional edge. Edges from a node are tried in the order they were added.
    #[must_use]
    pub fn edge(mut self, from: &str, to: &str) -> Self {
        self.spec.edges.push(Edge { from: from.to_owned(), to: to.to_owned(), when: None });
        self
    }

    /// A conditional edge.
    #[must_use]
    pub fn edge_if(mut self, from: &str, to: &str, when: Predicate) -> Self {
        self.spec.edges.push(Edge { from: from.to_owned(), to: to.to_owned(), when: Some(when) });
        self
    }
}

impl From<Graph> for Node {
    fn from(g: Graph) -> Self {
        Node::with_kind(&g.id, NodeKind::Graph(g.spec))
    }
}

/// Builds an `every`: the body on a fixed interval with jitter, until cancelled.
pub struct Every {
    id: String,
    spec: EverySpec,
}

impl Every {
    /// Runs `body` every `interval`.
    pub fn new(id: &str, interval: Duration, body: impl IntoIterator<Item = Node>) -> Self {
        Self {
            id: id.to_owned(),
            spec: EverySpec { interval, jitter: 0.0, wake: None, on_error: EveryOnError::Continue, body: nodes(body) },
        }
    }

    /// Scales each interval by a random factor in `[1 - jitter, 1 + jitter]` (jitter < 1).
    #[must_use]
    pub fn jitter(mut self, jitter: f64) -> Self {
        self.spec.jitter = jitter;
        self
    }

    /// A wake channel: a wake-up runs the next tick at once.
    #[must_use]
    pub fn wake_on(mut self, channel: &str) -> Self {
        self.spec.wake = Some(channel.to_owned());
        self
    }

    /// What a failed tick does.
    #[must_use]
    pub fn on_error(mut self, on_error: EveryOnError) -> Self {
        self.spec.on_error = on_error;
        self
    }
}

impl From<Every> for Node {
    fn from(e: Every) -> Self {
        Node::with_kind(&e.id, NodeKind::Every(e.spec))
    }
}
