//! Workflow definitions: nodes (steps and operators), their policies, and the checks that
//! reject an option that cannot be honoured when the workflow is built.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::error::{BuildError, BuildProblem, ErrorCode, StepError};
use crate::hash::ContentHash;
use crate::ids::check_step_name as check_name;
use crate::policy::{ApprovalGate, Effect, Guardrail, GuardrailAction, RetryPolicy};
use crate::scope::Scope;
use crate::services::{ProvidedLayer, Services};
use crate::step::{DynStep, Step, Typed};

type ScopeFn<T> = Arc<dyn Fn(&Scope) -> Result<T, StepError> + Send + Sync>;

/// A function of the scope: conditions, input mappings, item lists. `source` is the
/// expression's text when it came from a workflow file (used in diagnostics and hashes).
pub struct Expr<T> {
    f: ScopeFn<T>,
    source: Option<Arc<str>>,
}

impl<T> Clone for Expr<T> {
    fn clone(&self) -> Self {
        Self { f: self.f.clone(), source: self.source.clone() }
    }
}

impl<T> fmt::Debug for Expr<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Expr({})", self.source.as_deref().unwrap_or("<closure>"))
    }
}

impl<T> Expr<T> {
    /// An infallible expression.
    pub fn new(f: impl Fn(&Scope) -> T + Send + Sync + 'static) -> Self {
        Self { f: Arc::new(move |s| Ok(f(s))), source: None }
    }

    /// A fallible expression.
    pub fn try_new(f: impl Fn(&Scope) -> Result<T, StepError> + Send + Sync + 'static) -> Self {
        Self { f: Arc::new(f), source: None }
    }

    /// Attaches the expression's source text.
    #[must_use]
    pub fn with_source(mut self, source: impl Into<Arc<str>>) -> Self {
        self.source = Some(source.into());
        self
    }

    /// Evaluates the expression.
    pub fn eval(&self, scope: &Scope) -> Result<T, StepError> {
        (self.f)(scope)
    }

    fn describe(&self) -> Value {
        json!(self.source.as_deref().unwrap_or("<closure>"))
    }
}

/// A condition over the scope.
pub type Predicate = Expr<bool>;

/// Where a node's input comes from.
#[derive(Clone, Debug, Default)]
pub enum InputSource {
    /// The output of the previous node in the same sequence; for the first node, the input
    /// of the enclosing operator (the workflow input, a fork path's or map item's value, a
    /// loop iteration's input).
    #[default]
    Previous,
    /// The workflow input.
    WorkflowInput,
    /// The output of an earlier step by id.
    Output(String),
    /// A constant.
    Value(Value),
    /// An expression over the scope.
    Expr(Expr<Value>),
}

/// A loop's verdict after an iteration: stop or go on, and why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Verdict {
    /// Whether the loop is done.
    pub done: bool,
    /// Why (reported in the journal and events).
    pub reason: String,
}

impl Verdict {
    /// Stop, because of `reason`.
    pub fn done(reason: impl Into<String>) -> Self {
        Self { done: true, reason: reason.into() }
    }

    /// Go on, because of `reason`.
    pub fn again(reason: impl Into<String>) -> Self {
        Self { done: false, reason: reason.into() }
    }
}

/// How a fork waits for its paths.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ForkMode {
    /// Wait for every path; on the first failure cancel the others and fail.
    #[default]
    All,
    /// The first path to succeed wins; the others are cancelled. Fails only if all fail.
    Race,
    /// Wait for every path; the output lists each path's result or error.
    Settle,
}

/// The result of one fork path, handed to an explicit merge.
#[derive(Debug, Clone, PartialEq)]
pub enum PathResult {
    /// The path completed with this output.
    Completed(Value),
    /// The path failed.
    Failed(StepError),
    /// The path was cancelled (a race loser, or a sibling failed).
    Cancelled,
}

/// An explicit merge of fork path results (in path order) into the fork's output.
pub(crate) type Merge = Arc<dyn Fn(Vec<PathResult>) -> Result<Value, StepError> + Send + Sync>;

/// What a loop does when an iteration fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LoopOnError {
    /// Fail the loop.
    #[default]
    Abort,
    /// Run the failed iteration again: same input, same inbox message (it counts towards
    /// `max_iterations`).
    Retry,
    /// Move on: the next iteration takes the next inbox message, and its input comes from
    /// `prepare_next` (evaluated on what the failed iteration produced), else stays the same.
    Skip,
}

/// What a loop does when it reaches `max_iterations` without a `done` verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnMaxIterations {
    /// Complete with the last iteration's output; the verdict's reason says why it stopped.
    #[default]
    Complete,
    /// Fail with `max_iterations`.
    Fail,
}

/// What `every` does when its body fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EveryOnError {
    /// Record the failure and wait for the next tick.
    #[default]
    Continue,
    /// Fail the `every` node.
    Fail,
}

/// What happens when a step fails for good (after its retries).
#[derive(Clone, Default)]
pub enum OnFailure {
    /// The failure propagates (the default).
    #[default]
    Abort,
    /// The step is recorded as skipped (output `null`) and the run goes on.
    Skip,
    /// Retry every failure, retryable or not, under the step's `retry` policy (which is
    /// required); abort when attempts run out. Without it, only retryable errors retry.
    Retry,
    /// Run this node instead, with the same input; its output becomes the step's output.
    Fallback(Box<Node>),
}

impl fmt::Debug for OnFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl OnFailure {
    /// The policy's name as the file format spells it.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Abort => "abort",
            Self::Skip => "skip",
            Self::Retry => "retry",
            Self::Fallback(_) => "fallback",
        }
    }
}
/// A node: a step or an operator, with an id, an input source, optional schemas and policies.
#[derive(Clone)]
pub struct Node {
    pub(crate) id: Arc<str>,
    pub(crate) description: Option<String>,
    pub(crate) kind: NodeKind,
    pub(crate) input: InputSource,
    pub(crate) input_schema: Option<Schema>,
    pub(crate) output_schema: Option<Schema>,
    pub(crate) policy: Policies,
}

impl fmt::Debug for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Node").field("id", &self.id).field("kind", &self.kind.name()).finish_non_exhaustive()
    }
}

/// A JSON Schema, compiled when the workflow is built.
#[derive(Clone)]
pub(crate) struct Schema {
    pub(crate) value: Value,
    pub(crate) validator: Option<Arc<jsonschema::Validator>>,
}

impl Schema {
    fn new(value: Value) -> Self {
        Self { value, validator: None }
    }

    /// Validates, returning every violation with its JSON-pointer path.
    pub(crate) fn check(&self, value: &Value, code: ErrorCode, what: &str) -> Result<(), StepError> {
        let Some(validator) = &self.validator else {
            return Ok(());
        };
        if validator.is_valid(value) {
            return Ok(());
        }
        let problems: Vec<String> = validator
            .iter_errors(value)
            .map(|e| {
                let at = e.instance_path().to_string();
                format!("at {}: {e}", if at.is_empty() { "/" } else { &at })
            })
            .collect();
        Err(StepError::new(code, format!("{what} does not match its schema: {}", problems.join("; "))))
    }
}

/// Policies that apply to any node.
#[derive(Clone, Default)]
pub(crate) struct Policies {
    pub(crate) retry: Option<RetryPolicy>,
    pub(crate) timeout: Option<Duration>,
    pub(crate) on_failure: OnFailure,
    pub(crate) effect: Option<Effect>,
    pub(crate) safe_to_retry: bool,
    pub(crate) approval: Option<ApprovalGate>,
    pub(crate) guardrails: Vec<Guardrail>,
    pub(crate) condition: Option<Predicate>,
    pub(crate) cache: bool,
    pub(crate) artifact_key: Option<String>,
    pub(crate) diff_key: Option<String>,
}

#[derive(Clone)]
pub(crate) enum NodeKind {
    Step(Arc<dyn DynStep>),
    Sequence(Vec<Node>),
    Branch { arms: Vec<(Predicate, Vec<Node>)>, otherwise: Option<Vec<Node>> },
    Fork(ForkSpec),
    Loop(LoopSpec),
    Graph(GraphSpec),
    Workflow { workflow: Workflow, spawn: Option<Duration> },
    Provide { layers: Vec<Arc<dyn ProvidedLayer>>, body: Vec<Node> },
    Every(EverySpec),
    Sleep(Duration),
}

impl NodeKind {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Self::Step(_) => "step",
            Self::Sequence(_) => "sequence",
            Self::Branch { .. } => "branch",
            Self::Fork(f) if f.is_map => "map",
            Self::Fork(_) => "fork",
            Self::Loop(_) => "loop",
            Self::Graph(_) => "graph",
            Self::Workflow { spawn: None, .. } => "workflow",
            Self::Workflow { spawn: Some(_), .. } => "spawn",
            Self::Provide { .. } => "provide",
            Self::Every(_) => "every",
            Self::Sleep(_) => "sleep",
        }
    }
}

#[derive(Clone)]
pub(crate) struct ForkSpec {
    pub(crate) mode: ForkMode,
    pub(crate) concurrency: Option<usize>,
    pub(crate) paths: ForkPaths,
    pub(crate) merge: Option<Merge>,
    pub(crate) is_map: bool,
    pub(crate) item_name: Option<String>,
}

#[derive(Clone)]
pub(crate) enum ForkPaths {
    Static(Vec<Vec<Node>>),
    Dynamic { items: Expr<Vec<Value>>, body: Vec<Node> },
}

#[derive(Clone)]
pub(crate) struct LoopSpec {
    pub(crate) body: Vec<Node>,
    pub(crate) until: Option<Expr<Verdict>>,
    pub(crate) max_iterations: u32,
    pub(crate) prepare_next: Option<Expr<Value>>,
    pub(crate) on_error: LoopOnError,
    pub(crate) on_max: OnMaxIterations,
    pub(crate) inbox: Option<String>,
    pub(crate) park_timeout: Option<Duration>,
}

#[derive(Clone)]
pub(crate) struct GraphSpec {
    pub(crate) nodes: Vec<Node>,
    pub(crate) edges: Vec<Edge>,
    pub(crate) entry: Option<String>,
    pub(crate) max_steps: u32,
}

#[derive(Clone)]
pub(crate) struct Edge {
    pub(crate) from: String,
    pub(crate) to: String,
    pub(crate) when: Option<Predicate>,
}

#[derive(Clone)]
pub(crate) struct EverySpec {
    pub(crate) interval: Duration,
    pub(crate) jitter: f64,
    pub(crate) wake: Option<String>,
    pub(crate) on_error: EveryOnError,
    pub(crate) body: Vec<Node>,
}

impl Node {
    fn with_kind(id: &str, kind: NodeKind) -> Self {
        Self {
            id: Arc::from(id),
            description: None,
            kind,
            input: InputSource::Previous,
            input_schema: None,
            output_schema: None,
            policy: Policies::default(),
        }
    }

    /// A typed step. Its input is checked by deserializing into `S::Input` (errors name the
    /// JSON path), its output is `S::Output` serialized.
    pub fn step<S: Step>(id: &str, step: S) -> Self {
        Self::with_kind(id, NodeKind::Step(Arc::new(Typed::new(step))))
    }

    /// A step in its dynamic JSON form (how workflow files drive steps).
    pub fn dyn_step(id: &str, step: Arc<dyn DynStep>) -> Self {
        Self::with_kind(id, NodeKind::Step(step))
    }

    /// A named group of nodes run in order; its output is the last node's.
    pub fn sequence(id: &str, nodes: impl IntoIterator<Item = Node>) -> Self {
        Self::with_kind(id, NodeKind::Sequence(nodes.into_iter().collect()))
    }

    /// Call another workflow: its input and output are checked against its schemas, its
    /// journal nests under this node's path, and it sees only its own input (not the caller's
    /// earlier outputs). Memory layers and services are inherited.
    pub fn workflow(id: &str, workflow: &Workflow) -> Self {
        Self::with_kind(id, NodeKind::Workflow { workflow: workflow.clone(), spawn: None })
    }

    /// Like [`Node::workflow`] with an isolated context (no inherited memory layers) and a
    /// timeout that cancels the whole child.
    pub fn spawn(id: &str, workflow: &Workflow, timeout: Duration) -> Self {
        Self::with_kind(id, NodeKind::Workflow { workflow: workflow.clone(), spawn: Some(timeout) })
    }

    /// Make memory layers available to every descendant of `body`.
    pub fn provide(
        id: &str,
        layers: impl IntoIterator<Item = Arc<dyn ProvidedLayer>>,
        body: impl IntoIterator<Item = Node>,
    ) -> Self {
        Self::with_kind(
            id,
            NodeKind::Provide { layers: layers.into_iter().collect(), body: body.into_iter().collect() },
        )
    }

    /// A durable timer: the deadline is journaled; a short wait happens in process, a long
    /// one (over the engine's threshold) suspends the run until the deadline.
    pub fn sleep(id: &str, duration: Duration) -> Self {
        Self::with_kind(id, NodeKind::Sleep(duration))
    }

    /// The node's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The node's kind as the file format spells it (`step`, `fork`, `map`, ...).
    pub fn kind_name(&self) -> &'static str {
        self.kind.name()
    }

    /// Sets a description.
    #[must_use]
    pub fn description(mut self, text: impl Into<String>) -> Self {
        self.description = Some(text.into());
        self
    }

    /// Sets where the input comes from.
    #[must_use]
    pub fn input(mut self, source: InputSource) -> Self {
        self.input = source;
        self
    }

    /// Takes the input from an expression over the scope.
    #[must_use]
    pub fn input_from(self, f: impl Fn(&Scope) -> Value + Send + Sync + 'static) -> Self {
        self.input(InputSource::Expr(Expr::new(f)))
    }

    /// Declares a JSON Schema the input must match (checked before the step runs).
    #[must_use]
    pub fn input_schema(mut self, schema: Value) -> Self {
        self.input_schema = Some(Schema::new(schema));
        self
    }

    /// Declares a JSON Schema the output must match (checked after the step runs).
    #[must_use]
    pub fn output_schema(mut self, schema: Value) -> Self {
        self.output_schema = Some(Schema::new(schema));
        self
    }

    /// Retries failures under this policy.
    #[must_use]
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.policy.retry = Some(policy);
        self
    }

    /// Cancels the work (not just the wait) after `duration`; fails with `timeout`.
    #[must_use]
    pub fn timeout(mut self, duration: Duration) -> Self {
        self.policy.timeout = Some(duration);
        self
    }

    /// What happens on a final failure.
    #[must_use]
    pub fn on_failure(mut self, policy: OnFailure) -> Self {
        self.policy.on_failure = policy;
        self
    }

    /// Declares the step's effect class (default `pure`).
    #[must_use]
    pub fn effect(mut self, effect: Effect) -> Self {
        self.policy.effect = Some(effect);
        self
    }

    /// Marks a fenced (`write`/`external`) step as safe to run again after a crash.
    #[must_use]
    pub fn safe_to_retry(mut self) -> Self {
        self.policy.safe_to_retry = true;
        self
    }

    /// Requires an approval before the step runs. `modify` replaces the step's input.
    #[must_use]
    pub fn requires_approval(mut self, gate: ApprovalGate) -> Self {
        self.policy.approval = Some(gate);
        self
    }

    /// Adds a guardrail.
    #[must_use]
    pub fn guardrail(mut self, guardrail: Guardrail) -> Self {
        self.policy.guardrails.push(guardrail);
        self
    }

    /// Skips the node (output `null`) unless the condition holds.
    #[must_use]
    pub fn only_if(mut self, condition: Predicate) -> Self {
        self.policy.condition = Some(condition);
        self
    }

    /// Memoizes a pure step by its input's hash, across runs of this engine.
    #[must_use]
    pub fn cache(mut self) -> Self {
        self.policy.cache = true;
        self
    }

    /// For recompute diffs: array elements in this node's output are matched by this field
    /// (`id`, `sku`…) rather than by position, so an insertion shows as one added element.
    #[must_use]
    pub fn diff_key(mut self, field: &str) -> Self {
        self.policy.diff_key = Some(field.to_owned());
        self
    }

    /// Captures the node's output as an artifact of this kind (content-addressed).
    #[must_use]
    pub fn capture_output(mut self, kind: impl Into<String>) -> Self {
        self.policy.artifact_key = Some(kind.into());
        self
    }

    pub(crate) fn effect_or_default(&self) -> Effect {
        self.policy.effect.unwrap_or_default()
    }
}

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

/// A built, checked workflow definition. Cheap to clone.
#[derive(Clone)]
pub struct Workflow {
    pub(crate) inner: Arc<WorkflowDef>,
    /// Services this workflow brings (a workflow file's tools and agents), layered over the
    /// engine's for its runs. Not part of the definition hash: like the engine's services,
    /// they are what the steps are given, not what the steps are.
    pub(crate) services: Services,
}

pub(crate) struct WorkflowDef {
    pub(crate) name: String,
    pub(crate) version: String,
    pub(crate) input_schema: Option<Schema>,
    pub(crate) output_schema: Option<Schema>,
    pub(crate) body: Vec<Node>,
    pub(crate) output: Option<Expr<Value>>,
    pub(crate) hash: ContentHash,
    pub(crate) description: Value,
}

impl fmt::Debug for Workflow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Workflow")
            .field("name", &self.inner.name)
            .field("version", &self.inner.version)
            .field("hash", &self.inner.hash)
            .finish()
    }
}

impl Workflow {
    /// Adds a service for this workflow's runs; it wins over an engine service of the same
    /// type. A workflow file's tools and agents reach its steps this way, so one engine (a
    /// worker) can run files that declare different tools under the same names.
    #[must_use]
    pub fn with_service<T: std::any::Any + Send + Sync>(mut self, service: Arc<T>) -> Self {
        self.services = self.services.with(service);
        self
    }

    /// The services this workflow brings.
    pub fn services(&self) -> &Services {
        &self.services
    }

    /// The `diff_key` of the node at `path` (patterns `[*]`, `#*` match any ordinal).
    pub(crate) fn diff_key_at(&self, path: &str) -> Option<String> {
        fn find(prefix: &str, nodes: &[Node], path: &str) -> Option<String> {
            for node in nodes {
                let at = join(prefix, &node.id);
                if regex::Regex::new(&pattern_regex(&at)).is_ok_and(|r| r.is_match(path)) {
                    return node.policy.diff_key.clone();
                }
                let children: Vec<(String, &[Node])> = match &node.kind {
                    NodeKind::Sequence(body) | NodeKind::Provide { body, .. } => vec![(at.clone(), body)],
                    NodeKind::Branch { arms, otherwise } => arms
                        .iter()
                        .map(|(_, b)| (at.clone(), b.as_slice()))
                        .chain(otherwise.iter().map(|b| (at.clone(), b.as_slice())))
                        .collect(),
                    NodeKind::Fork(spec) => match &spec.paths {
                        ForkPaths::Static(paths) => paths.iter().map(|p| (format!("{at}[*]"), p.as_slice())).collect(),
                        ForkPaths::Dynamic { body, .. } => vec![(format!("{at}[*]"), body)],
                    },
                    NodeKind::Loop(spec) => vec![(format!("{at}#*"), &spec.body)],
                    NodeKind::Every(spec) => vec![(format!("{at}#*"), &spec.body)],
                    NodeKind::Workflow { workflow, .. } => vec![(at.clone(), &workflow.inner.body)],
                    _ => Vec::new(),
                };
                for (prefix, body) in children {
                    if let Some(key) = find(&prefix, body, path) {
                        return Some(key);
                    }
                }
            }
            None
        }
        find("", &self.inner.body, path)
    }

    /// Starts a definition.
    pub fn builder(name: &str) -> WorkflowBuilder {
        WorkflowBuilder {
            name: name.to_owned(),
            version: "0.0.0".to_owned(),
            input_schema: None,
            output_schema: None,
            body: Vec::new(),
            output: None,
        }
    }

    /// The name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The version.
    pub fn version(&self) -> &str {
        &self.inner.version
    }

    /// The content hash of the definition's structure (ids, kinds, schemas, policies, step
    /// types, expression sources). Runs are pinned to it.
    pub fn hash(&self) -> ContentHash {
        self.inner.hash
    }

    /// The structure as JSON (what the hash covers); used to draw and diff definitions.
    pub fn describe(&self) -> &Value {
        &self.inner.description
    }

    /// Every step path this definition can produce, as patterns: `[*]` stands for any fork
    /// path or map item, `#*` for any iteration or visit (`drafts[*]/formal`,
    /// `refine#*/critique`). Used to check a journal against a changed definition.
    pub fn path_patterns(&self) -> Vec<String> {
        let mut out = self.all_path_patterns();
        out.retain(|p| !p.ends_with("/**"));
        out
    }

    /// The path patterns including leaf steps' sub-step patterns (`agent/**`).
    fn all_path_patterns(&self) -> Vec<String> {
        let mut out = Vec::new();
        collect_patterns("", &self.inner.body, &mut out);
        out
    }

    /// The journal paths (of those given) that have no place in this definition.
    pub fn unknown_paths<'a>(&self, paths: impl IntoIterator<Item = &'a str>) -> Vec<String> {
        let patterns: Vec<regex::Regex> =
            self.all_path_patterns().iter().filter_map(|p| regex::Regex::new(&pattern_regex(p)).ok()).collect();
        let mut unknown: Vec<String> = paths
            .into_iter()
            .filter(|path| !path.is_empty())
            // Engine-internal entries (`@fallback`, `@inbox`, `@due`) belong to their step.
            .map(|path| path.split("/@").next().unwrap_or(path))
            .filter(|path| !patterns.iter().any(|p| p.is_match(path)))
            .map(str::to_owned)
            .collect();
        unknown.sort();
        unknown.dedup();
        unknown
    }
}

/// `drafts[*]/x#*` → `^drafts\[\d+\]/x#\d+$`; a trailing `/**` matches any sub-path.
fn pattern_regex(pattern: &str) -> String {
    let mut out = String::from("^");
    let mut rest = pattern;
    while !rest.is_empty() {
        if let Some(tail) = rest.strip_prefix("[*]") {
            out.push_str(r"\[\d+\]");
            rest = tail;
        } else if let Some(tail) = rest.strip_prefix("/**") {
            out.push_str("/.+");
            rest = tail;
        } else if let Some(tail) = rest.strip_prefix("#*") {
            out.push_str(r"#\d+");
            rest = tail;
        } else {
            let c = rest.chars().next().expect("not empty");
            out.push_str(&regex::escape(&c.to_string()));
            rest = &rest[c.len_utf8()..];
        }
    }
    out.push('$');
    out
}

fn collect_patterns(prefix: &str, nodes: &[Node], out: &mut Vec<String>) {
    for node in nodes {
        collect_node(&join(prefix, &node.id), node, out);
    }
}

fn collect_node(at: &str, node: &Node, out: &mut Vec<String>) {
    out.push(at.to_owned());
    if let OnFailure::Fallback(fallback) = &node.policy.on_failure {
        collect_node(&format!("{at}/@fallback"), fallback, out);
    }
    match &node.kind {
        // A leaf step's journaled sub-steps (an agent's `turn.2/tool.0`) belong to it.
        NodeKind::Step(_) => out.push(format!("{at}/**")),
        NodeKind::Sleep(_) => {}
        NodeKind::Sequence(body) | NodeKind::Provide { body, .. } => collect_patterns(at, body, out),
        NodeKind::Branch { arms, otherwise } => {
            for (_, body) in arms {
                collect_patterns(at, body, out);
            }
            if let Some(body) = otherwise {
                collect_patterns(at, body, out);
            }
        }
        NodeKind::Fork(spec) => {
            let item = format!("{at}[*]");
            out.push(item.clone());
            match &spec.paths {
                ForkPaths::Static(paths) => paths.iter().for_each(|p| collect_patterns(&item, p, out)),
                ForkPaths::Dynamic { body, .. } => collect_patterns(&item, body, out),
            }
        }
        NodeKind::Loop(LoopSpec { body, .. }) | NodeKind::Every(EverySpec { body, .. }) => {
            let iteration = format!("{at}#*");
            out.push(iteration.clone());
            collect_patterns(&iteration, body, out);
        }
        NodeKind::Graph(spec) => {
            out.push(format!("{at}#*"));
            for node in &spec.nodes {
                collect_node(&format!("{at}/{}#*", node.id), node, out);
            }
        }
        NodeKind::Workflow { workflow, .. } => collect_patterns(at, &workflow.inner.body, out),
    }
}

/// Builds a [`Workflow`].
pub struct WorkflowBuilder {
    name: String,
    version: String,
    input_schema: Option<Value>,
    output_schema: Option<Value>,
    body: Vec<Node>,
    output: Option<Expr<Value>>,
}

impl WorkflowBuilder {
    /// Sets the version.
    #[must_use]
    pub fn version(mut self, version: &str) -> Self {
        self.version = version.to_owned();
        self
    }

    /// Declares the input schema (checked when a run starts).
    #[must_use]
    pub fn input_schema(mut self, schema: Value) -> Self {
        self.input_schema = Some(schema);
        self
    }

    /// Declares the input schema from a type.
    #[must_use]
    pub fn input_type<T: schemars::JsonSchema>(self) -> Self {
        self.input_schema(schemars::schema_for!(T).to_value())
    }

    /// Declares the output schema (checked when the run completes).
    #[must_use]
    pub fn output_schema(mut self, schema: Value) -> Self {
        self.output_schema = Some(schema);
        self
    }

    /// Appends a node to the body.
    #[must_use]
    pub fn step(mut self, node: impl Into<Node>) -> Self {
        self.body.push(node.into());
        self
    }

    /// Appends nodes to the body.
    #[must_use]
    pub fn steps(mut self, nodes: impl IntoIterator<Item = Node>) -> Self {
        self.body.extend(nodes);
        self
    }

    /// The workflow's output (default: the last node's output).
    #[must_use]
    pub fn output(mut self, output: Expr<Value>) -> Self {
        self.output = Some(output);
        self
    }

    /// Checks every node and policy, compiles schemas, and computes the definition hash.
    /// Every problem is reported, not only the first.
    pub fn build(mut self) -> Result<Workflow, BuildError> {
        let mut checker = Checker { problems: Vec::new() };
        if let Err(why) = check_name(&self.name) {
            checker.problem("<workflow>", format!("workflow name: {why}"));
        }
        if self.version.trim().is_empty() {
            checker.problem("<workflow>", "version must not be empty");
        }
        let input_schema = self.input_schema.take().and_then(|s| checker.compile("<workflow>", "input", s));
        let output_schema = self.output_schema.take().and_then(|s| checker.compile("<workflow>", "output", s));
        checker.nodes("", &mut self.body);
        if self.body.is_empty() {
            checker.problem("<workflow>", "a workflow needs at least one step");
        }
        if !checker.problems.is_empty() {
            return Err(BuildError { workflow: self.name, problems: checker.problems });
        }
        let description = json!({
            "workflow": self.name,
            "version": self.version,
            "input": input_schema.as_ref().map(|s| &s.value),
            "output_schema": output_schema.as_ref().map(|s| &s.value),
            "output": self.output.as_ref().map(Expr::describe),
            "steps": self.body.iter().map(describe_node).collect::<Vec<_>>(),
        });
        let hash = ContentHash::of_value(&description);
        Ok(Workflow {
            services: Services::default(),
            inner: Arc::new(WorkflowDef {
                name: self.name,
                version: self.version,
                input_schema,
                output_schema,
                body: self.body,
                output: self.output,
                hash,
                description,
            }),
        })
    }
}

struct Checker {
    problems: Vec<BuildProblem>,
}

impl Checker {
    fn problem(&mut self, at: &str, message: impl Into<String>) {
        self.problems.push(BuildProblem {
            at: if at.is_empty() { "<workflow>".into() } else { at.to_owned() },
            message: message.into(),
        });
    }

    fn compile(&mut self, at: &str, what: &str, value: Value) -> Option<Schema> {
        // Keep in step with `check_schema`, which loaders use to report the same problem
        // where the schema was written.
        match jsonschema::validator_for(&value) {
            Ok(validator) => Some(Schema { value, validator: Some(Arc::new(validator)) }),
            Err(e) => {
                self.problem(at, format!("{what} schema is not a valid JSON Schema: {e}"));
                None
            }
        }
    }

    fn nodes(&mut self, prefix: &str, nodes: &mut [Node]) {
        let mut seen = HashSet::new();
        for node in nodes.iter_mut() {
            let at = join(prefix, &node.id);
            if !seen.insert(node.id.clone()) {
                self.problem(&at, format!("duplicate step id {:?} in the same scope", &*node.id));
            }
            self.node(&at, node);
        }
    }

    fn node(&mut self, at: &str, node: &mut Node) {
        if let Err(why) = check_name(&node.id) {
            self.problem(at, format!("step id: {why}"));
        }
        if let Some(schema) = node.input_schema.take() {
            node.input_schema = self.compile(at, "input", schema.value);
        }
        if let Some(schema) = node.output_schema.take() {
            node.output_schema = self.compile(at, "output", schema.value);
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
        if let OnFailure::Fallback(fallback) = &mut node.policy.on_failure {
            self.node(&join(at, "fallback"), fallback);
        }
        let kind_name = node.kind.name();
        match &mut node.kind {
            NodeKind::Step(_) | NodeKind::Sleep(_) => {
                if let NodeKind::Sleep(d) = node.kind
                    && d.is_zero()
                {
                    self.problem(at, "sleep duration must be longer than zero");
                }
            }
            NodeKind::Sequence(body) | NodeKind::Provide { body, .. } => {
                if body.is_empty() {
                    self.problem(at, format!("{kind_name} needs at least one step"));
                }
                self.nodes(at, body);
            }
            NodeKind::Branch { arms, otherwise } => {
                if arms.is_empty() {
                    self.problem(at, "branch needs at least one `when` arm");
                }
                for (index, (_, body)) in arms.iter_mut().enumerate() {
                    self.nodes(&format!("{at}[{index}]"), body);
                }
                if let Some(body) = otherwise {
                    self.nodes(&format!("{at}[otherwise]"), body);
                }
            }
            NodeKind::Fork(spec) => {
                let kind = if spec.is_map { "map" } else { "fork" };
                if spec.concurrency == Some(0) {
                    self.problem(
                        at,
                        format!("{kind} concurrency must be at least 1 (and paths cannot mix static and dynamic)"),
                    );
                }
                if spec.is_map && spec.mode != ForkMode::All {
                    self.problem(at, "map always fails fast; use a fork with dynamic paths for race or settle");
                }
                match &mut spec.paths {
                    ForkPaths::Static(paths) => {
                        if paths.is_empty() {
                            self.problem(at, "fork needs at least one path");
                        }
                        for (index, path) in paths.iter_mut().enumerate() {
                            if path.is_empty() {
                                self.problem(&format!("{at}[{index}]"), "a fork path needs at least one step");
                            }
                            self.nodes(&format!("{at}[{index}]"), path);
                        }
                    }
                    ForkPaths::Dynamic { body, .. } => {
                        if body.is_empty() {
                            self.problem(at, format!("{kind} body needs at least one step"));
                        }
                        self.nodes(&format!("{at}[*]"), body);
                    }
                }
                if let Some(name) = &spec.item_name
                    && check_name(name).is_err()
                    && !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                {
                    self.problem(at, format!("map `as` name {name:?} must be an identifier"));
                }
            }
            NodeKind::Loop(spec) => {
                if spec.max_iterations == 0 {
                    self.problem(at, "loop max_iterations must be at least 1");
                }
                if spec.body.is_empty() {
                    self.problem(at, "loop needs at least one step");
                }
                if spec.park_timeout == Some(Duration::ZERO) {
                    self.problem(at, "loop park_timeout must be longer than zero");
                }
                self.nodes(&format!("{at}#*"), &mut spec.body);
            }
            NodeKind::Graph(spec) => {
                if spec.max_steps == 0 {
                    self.problem(at, "graph max_steps must be at least 1");
                }
                if spec.nodes.is_empty() {
                    self.problem(at, "graph needs at least one node");
                }
                let names: HashSet<String> = spec.nodes.iter().map(|n| n.id.to_string()).collect();
                if let Some(entry) = &spec.entry
                    && !names.contains(entry)
                {
                    self.problem(at, format!("graph entry {entry:?} is not one of its nodes"));
                }
                for edge in &spec.edges {
                    for end in [&edge.from, &edge.to] {
                        if !names.contains(end) {
                            self.problem(
                                at,
                                format!("graph edge {:?} -> {:?} names unknown node {end:?}", edge.from, edge.to),
                            );
                        }
                    }
                }
                self.nodes(at, &mut spec.nodes);
            }
            NodeKind::Workflow { spawn, .. } => {
                if *spawn == Some(Duration::ZERO) {
                    self.problem(at, "spawn timeout must be longer than zero");
                }
            }
            NodeKind::Every(spec) => {
                if spec.interval.is_zero() {
                    self.problem(at, "every interval must be longer than zero");
                }
                if !(0.0..1.0).contains(&spec.jitter) {
                    self.problem(at, format!("every jitter must be within 0..1, not {}", spec.jitter));
                }
                if spec.body.is_empty() {
                    self.problem(at, "every needs at least one step");
                }
                self.nodes(&format!("{at}#*"), &mut spec.body);
            }
        }
    }
}

fn join(prefix: &str, id: &str) -> String {
    if prefix.is_empty() { id.to_owned() } else { format!("{prefix}/{id}") }
}

fn describe_nodes(nodes: &[Node]) -> Value {
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
        NodeKind::Step(step) => put("step_type", json!(step.type_name())),
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

/// Whether a value is a JSON Schema the engine can validate with; the error says what is
/// wrong. Loaders call it to report a bad schema at the place it was written; the build
/// checks the same thing for schemas set from Rust.
///
/// ```
/// use serde_json::json;
/// assert!(stepwright_core::check_schema(&json!({ "type": "object" })).is_ok());
/// assert!(stepwright_core::check_schema(&json!({ "type": 12 })).is_err());
/// ```
pub fn check_schema(schema: &Value) -> Result<(), String> {
    jsonschema::validator_for(schema).map(|_| ()).map_err(|e| e.to_string())
}
