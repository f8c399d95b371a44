//! Errors: the step error value, its stable codes, and definition (build) errors.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// A stable, lowercase error code that users can look up (see `docs/error-codes.md`).
#[derive(Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ErrorCode(Cow<'static, str>);

impl ErrorCode {
    /// The step's input did not match its input schema (or type).
    pub const INPUT_VALIDATION: Self = Self::from_static("input_validation");
    /// The step's output did not match its output schema.
    pub const OUTPUT_VALIDATION: Self = Self::from_static("output_validation");
    /// A panic or an unexpected error inside a step.
    pub const EXECUTION_FAILED: Self = Self::from_static("execution_failed");
    /// The step did not finish within its `timeout`; its work was cancelled.
    pub const TIMEOUT: Self = Self::from_static("timeout");
    /// The step was cancelled (run cancelled, fork sibling failed, race lost).
    pub const CANCELLED: Self = Self::from_static("cancelled");
    /// A `write`/`external` step was interrupted after its intent was recorded, and it is not
    /// safe to retry: whether its effect happened is unknown.
    pub const OUTCOME_UNKNOWN: Self = Self::from_static("outcome_unknown");
    /// A replay or a recompute reached a `write` step or an `external` one that is not safe to
    /// retry (or such a sub-step: an agent's tool call) that the original run never ran there:
    /// a sandbox re-execution does not perform an effect the run did not have.
    pub const NOT_EXECUTED: Self = Self::from_static("not_executed");
    /// The definition no longer matches the run's journal.
    pub const NONDETERMINISM: Self = Self::from_static("nondeterminism");
    /// A guardrail with action `block` found a violation.
    pub const GUARDRAIL_BLOCKED: Self = Self::from_static("guardrail_blocked");
    /// An approval (a `requires_approval` gate or an approval step) was rejected.
    pub const REJECTED: Self = Self::from_static("rejected");
    /// A loop with `on_max_iterations: fail` ran out of iterations.
    pub const MAX_ITERATIONS: Self = Self::from_static("max_iterations");
    /// A graph took more than `max_steps` steps.
    pub const MAX_STEPS: Self = Self::from_static("max_steps");
    /// Every path of a `race` fork failed.
    pub const ALL_PATHS_FAILED: Self = Self::from_static("all_paths_failed");
    /// A step handed off to a target that no enclosing graph has.
    pub const UNKNOWN_HANDOFF_TARGET: Self = Self::from_static("unknown_handoff_target");
    /// An expression (condition, input mapping) could not be evaluated.
    pub const EXPRESSION: Self = Self::from_static("expression");
    /// Not a failure: the step is waiting on an interrupt (`ctx.interrupt`, `ctx.sleep`) and
    /// the run suspends. Propagate it with `?`; code that turns errors into results (a tool
    /// wrapper) must let it through: see [`StepError::is_control_flow`].
    pub const SUSPENDED: Self = Self::from_static("suspended");
    /// An interrupt's deadline passed and its `on_timeout` says fail.
    pub const INTERRUPT_TIMEOUT: Self = Self::from_static("interrupt_timeout");

    /// A code from a static string (for a step's own codes).
    pub const fn from_static(code: &'static str) -> Self {
        Self(Cow::Borrowed(code))
    }

    /// A code from any string (for a step's own codes).
    pub fn new(code: impl Into<String>) -> Self {
        Self(Cow::Owned(code.into()))
    }

    /// The code's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", &*self.0)
    }
}

/// The cause attached to a [`StepError`]. Journaled as its message chain.
type Cause = Arc<dyn std::error::Error + Send + Sync + 'static>;

/// An expected failure, returned as a value: `{ code, message, retryable, cause }`.
///
/// A step that fails without saying otherwise is not retryable: only errors a step marks
/// `retryable` (or kernel errors such as `timeout`) are retried by a `retry` policy.
#[derive(Clone, Serialize, Deserialize)]
pub struct StepError {
    /// The stable code.
    pub code: ErrorCode,
    /// A lowercase sentence that says what was being done.
    pub message: String,
    /// Whether trying again may succeed.
    pub retryable: bool,
    /// The underlying error, if any.
    #[serde(with = "cause_serde", default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<Cause>,
}

impl StepError {
    /// A non-retryable error with a code and message.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self { code, message: message.into(), retryable: false, cause: None }
    }

    /// Marks the error as retryable (or not).
    #[must_use]
    pub fn retryable(mut self, retryable: bool) -> Self {
        self.retryable = retryable;
        self
    }

    /// Attaches a cause.
    #[must_use]
    pub fn with_cause(mut self, cause: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.cause = Some(Arc::new(cause));
        self
    }

    /// An `execution_failed` error (unexpected failure, not retryable).
    pub fn execution_failed(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::EXECUTION_FAILED, message)
    }

    /// A `cancelled` error.
    pub fn cancelled(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::CANCELLED, message)
    }

    /// A retryable `timeout` error.
    pub fn timeout(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::TIMEOUT, message).retryable(true)
    }

    /// Whether this error's code is `code`.
    pub fn is(&self, code: &ErrorCode) -> bool {
        &self.code == code
    }

    /// Whether this is a control signal rather than a failure: the run is suspending
    /// (`suspended`) or being cancelled (`cancelled`). Code that turns a step's errors into
    /// data (a tool's result for a model, a `settle` fork's path result) must propagate
    /// these instead, or "wait for a human" becomes "the tool failed".
    pub fn is_control_flow(&self) -> bool {
        self.is(&ErrorCode::SUSPENDED) || self.is(&ErrorCode::CANCELLED)
    }
}

impl fmt::Debug for StepError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = f.debug_struct("StepError");
        s.field("code", &self.code).field("message", &self.message).field("retryable", &self.retryable);
        if let Some(cause) = &self.cause {
            s.field("cause", &cause.to_string());
        }
        s.finish()
    }
}

impl fmt::Display for StepError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for StepError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.cause.as_deref().map(|c| c as &(dyn std::error::Error + 'static))
    }
}

impl PartialEq for StepError {
    fn eq(&self, other: &Self) -> bool {
        self.code == other.code
            && self.message == other.message
            && self.retryable == other.retryable
            && self.cause.as_ref().map(ToString::to_string) == other.cause.as_ref().map(ToString::to_string)
    }
}

/// A cause restored from the journal: only its message survives serialization.
#[derive(Debug)]
struct RecordedCause(String);

impl fmt::Display for RecordedCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RecordedCause {}

mod cause_serde {
    use super::{Cause, RecordedCause};
    use serde::{Deserialize, Deserializer, Serializer};
    use std::sync::Arc;

    pub(super) fn serialize<S: Serializer>(cause: &Option<Cause>, s: S) -> Result<S::Ok, S::Error> {
        match cause {
            Some(cause) => {
                // Journal the whole chain, since the source objects cannot be stored.
                let mut text = cause.to_string();
                let mut next = cause.source();
                while let Some(inner) = next {
                    text.push_str(": ");
                    text.push_str(&inner.to_string());
                    next = inner.source();
                }
                s.serialize_some(&text)
            }
            None => s.serialize_none(),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Cause>, D::Error> {
        let text = Option::<String>::deserialize(d)?;
        Ok(text.map(|t| Arc::new(RecordedCause(t)) as Cause))
    }
}

/// One problem found while building a workflow definition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildProblem {
    /// Where: the step path of the offending node (`<workflow>` for workflow-level fields).
    pub at: String,
    /// What is wrong, as a lowercase sentence.
    pub message: String,
}

impl fmt::Display for BuildProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.at, self.message)
    }
}

/// The error returned when a workflow definition cannot be honoured. It lists every problem
/// found, not just the first.
#[derive(Debug, Clone, thiserror::Error)]
#[error("building workflow {workflow:?} found {} problem(s):\n{}", problems.len(), render(problems))]
pub struct BuildError {
    /// The workflow's name.
    pub workflow: String,
    /// Every problem, in definition order.
    pub problems: Vec<BuildProblem>,
}

fn render(problems: &[BuildProblem]) -> String {
    problems.iter().map(|p| format!("  {p}")).collect::<Vec<_>>().join("\n")
}

/// Whose fault a failed operation is: what a command line maps to exit code 2 or 1, and a
/// server to a 4xx or a 5xx answer. One classification, so every front end agrees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The request does not fit: bad input, a run or interrupt that does not exist, a
    /// decision that does not fit, a run another process holds. The caller can fix it.
    Caller,
    /// The engine, its store or a definition could not serve a request that fits.
    Engine,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn causes_survive_the_journal_as_text() {
        let err =
            StepError::execution_failed("calling the api").with_cause(Outer(std::io::Error::other("connection reset")));
        let json = serde_json::to_value(&err).unwrap();
        assert_eq!(json["cause"], "outer: connection reset");
        let back: StepError = serde_json::from_value(json).unwrap();
        assert_eq!(back.cause.unwrap().to_string(), "outer: connection reset");
        assert!(!back.retryable);
    }
}
