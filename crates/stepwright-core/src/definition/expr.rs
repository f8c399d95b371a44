//! Expressions over the scope (conditions, input mappings, item lists) and the small option
//! types operators take.

use std::fmt;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::error::StepError;
use crate::scope::Scope;

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

    pub(super) fn describe(&self) -> Value {
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
    /// A constant, the same for every run.
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
