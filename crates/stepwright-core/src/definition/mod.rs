//! Workflow definitions: nodes (steps and operators), their policies, and the checks that
//! reject an option that cannot be honoured when the workflow is built.
//!
//! `mod.rs` holds the node, its policies and the workflow; `expr` the expressions and small
//! option types; `operator` one file per operator (and the leaf step) with all the
//! definition knows of it; `segment` where a group of children sits in the path grammar;
//! `walk` the walks of the tree (children, patterns, mailboxes, the outline); `check` the
//! build checks; `describe` the canonical description that is hashed; `outline` what is
//! drawn; `paths` the path patterns a definition can produce.

mod check;
mod describe;
mod expr;
mod operator;
mod outline;
mod paths;
mod segment;
mod walk;

use check::Checker;
pub(crate) use check::schema_violations;
pub use check::{SchemaError, check_schema};
use describe::describe_nodes;
pub(crate) use expr::Merge;
pub use expr::{
    EveryOnError, Expr, ForkMode, InputSource, LoopOnError, OnMaxIterations, PathResult, Predicate, Verdict,
};
pub use operator::{Branch, Every, Fork, Graph, Loop, Mailboxes};
pub(crate) use operator::{EverySpec, ForkPaths, ForkSpec, GraphSpec, LoopSpec, NodeKind, WaitSpec};
pub use outline::{LABEL_CHARS, Outline, OutlineEdge, OutlineGroup, OutlineLayout, OutlineNode};
use segment::Segment;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::error::{BuildError, ErrorCode, StepError};
use crate::hash::ContentHash;
use crate::ids::check_step_name as check_name;
use crate::policy::{ApprovalGate, Effect, Guardrail, RetryPolicy};
use crate::scope::Scope;
use crate::services::Services;

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

/// The annotation a schema served to a form carries: its top-level property names in the
/// order they were declared (a JSON object has none; a form shows fields in this order).
/// Validators ignore it, as JSON Schema says of keywords it does not define.
pub const FIELD_ORDER: &str = "x-stepwright-order";

/// `schema` with [`FIELD_ORDER`] set to `order` (when `order` has two names or more and the
/// schema is an object).
#[must_use]
pub fn with_field_order(mut schema: Value, order: &[String]) -> Value {
    if order.len() > 1
        && let Some(object) = schema.as_object_mut()
    {
        object.insert(FIELD_ORDER.to_owned(), Value::from(order.to_vec()));
    }
    schema
}

/// A JSON Schema, compiled when it is set; a schema that does not compile is reported by
/// the build's checks (so a built workflow has only compiled schemas).
#[derive(Clone)]
pub(crate) struct Schema {
    pub(crate) value: Value,
    pub(crate) validator: Result<Arc<jsonschema::Validator>, String>,
}

impl Schema {
    fn new(value: Value) -> Self {
        // Keep in step with `check_schema`, which loaders use to report the same problem
        // where the schema was written.
        let validator = jsonschema::validator_for(&value).map(Arc::new).map_err(|e| e.to_string());
        Self { value, validator }
    }

    /// Validates, returning every violation with its JSON-pointer path.
    pub(crate) fn check(&self, value: &Value, code: ErrorCode, what: &str) -> Result<(), StepError> {
        let Ok(validator) = &self.validator else {
            return Ok(());
        };
        if validator.is_valid(value) {
            return Ok(());
        }
        let problems = check::schema_violations(validator, value);
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

    /// How the journal serves the node in a replay or a recompute: by its effect. A step
    /// whose work a step worker does is no exception: a replay gives it its recorded answer
    /// where it would dispatch, a recompute dispatches it anew unless its effect is served
    /// (see `StepRecording::dispatch`).
    pub(crate) fn served_as(&self) -> (Effect, bool) {
        (self.effect_or_default(), self.policy.safe_to_retry)
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
    /// The concurrency key (over the input) and limit of its runs. Like the priority, not
    /// in the hash: flow control says when a run executes, not what it is.
    pub(crate) concurrency: Option<(Expr<Value>, u32)>,
    pub(crate) priority: i32,
    /// Content on spans for this workflow's runs, whatever the engine says: `Some(None)`
    /// off, `Some(Some(_))` on. Not in the hash: what is observed, not what runs.
    pub(crate) capture_content: Option<Option<crate::config::ContentCapture>>,
    /// The input schema's top-level properties in the order the file declares them, for
    /// forms. Not in the hash (JSON objects have no order; the schema is the same schema).
    pub(crate) input_order: Vec<String>,
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

    /// Starts a definition.
    pub fn builder(name: &str) -> WorkflowBuilder {
        WorkflowBuilder {
            name: name.to_owned(),
            version: "0.0.0".to_owned(),
            input_schema: None,
            output_schema: None,
            body: Vec::new(),
            output: None,
            concurrency: None,
            priority: 0,
            capture_content: None,
            input_order: Vec::new(),
        }
    }

    /// The workflow's name (`^[a-z][a-z0-9-]*$`); runs are listed and registered by it.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The version as written; the hash, not this, is what runs are pinned to.
    pub fn version(&self) -> &str {
        &self.inner.version
    }

    /// The content hash of the definition's structure (ids, kinds, schemas, policies, step
    /// types, expression sources). Runs are pinned to it.
    pub fn hash(&self) -> ContentHash {
        self.inner.hash
    }

    /// The structure as JSON (what the hash covers); used to diff definitions.
    pub fn describe(&self) -> &Value {
        &self.inner.description
    }

    /// The input schema for a form: with [`FIELD_ORDER`] listing its top-level properties
    /// in the order they were declared, when the builder was told it.
    pub fn input_schema_for_forms(&self) -> Option<Value> {
        let schema = self.inner.input_schema.as_ref()?.value.clone();
        Some(with_field_order(schema, &self.inner.input_order))
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
    concurrency: Option<(Expr<Value>, u32)>,
    priority: i32,
    capture_content: Option<Option<crate::config::ContentCapture>>,
    input_order: Vec<String>,
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

    /// At most `limit` runs with the same `key` (evaluated over the run's input when it is
    /// created: `input.customer`) execute at a time, across every worker on the store; the
    /// others wait, pending, in priority order (see [`crate::Concurrency`]).
    #[must_use]
    pub fn concurrency(mut self, key: Expr<Value>, limit: u32) -> Self {
        self.concurrency = Some((key, limit));
        self
    }

    /// The priority of its runs among runs waiting to be claimed: higher first (default 0).
    #[must_use]
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }

    /// Content on the spans of this workflow's runs (prompts, completions, tool arguments
    /// and results, redacted by each step's output guardrails): `Some` on, `None` off,
    /// whatever the engine's [`crate::EngineConfig::capture_content`] says.
    #[must_use]
    pub fn capture_content(mut self, capture: Option<crate::config::ContentCapture>) -> Self {
        self.capture_content = Some(capture);
        self
    }

    /// The input schema's top-level properties in the order a form shows them (a file's
    /// order); not in the hash.
    #[must_use]
    pub fn input_order(mut self, order: Vec<String>) -> Self {
        self.input_order = order;
        self
    }

    /// Checks every node and policy, compiles schemas, and computes the definition hash.
    /// Every problem is reported, not only the first.
    pub fn build(mut self) -> Result<Workflow, BuildError> {
        let mut checker = Checker::default();
        if let Err(why) = check_name(&self.name) {
            checker.problem("<workflow>", format!("workflow name: {why}"));
        }
        if self.version.trim().is_empty() {
            checker.problem("<workflow>", "version must not be empty");
        }
        let mut schema = |what: &str, value: Option<Value>| {
            let schema = Schema::new(value?);
            if let Err(why) = &schema.validator {
                checker.problem("<workflow>", format!("{what} schema is not a valid JSON Schema: {why}"));
            }
            Some(schema)
        };
        let input_schema = schema("input", self.input_schema.take());
        let output_schema = schema("output", self.output_schema.take());
        checker.nodes(Segment::Body, "", &self.body);
        if self.body.is_empty() {
            checker.problem("<workflow>", "a workflow needs at least one step");
        }
        if self.concurrency.as_ref().is_some_and(|(_, limit)| *limit == 0) {
            checker.problem("<workflow>", "concurrency limit must be at least 1");
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
            "steps": describe_nodes(&self.body),
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
                concurrency: self.concurrency,
                priority: self.priority,
                capture_content: self.capture_content,
                input_order: self.input_order,
                hash,
                description,
            }),
        })
    }
}
