//! Policies that apply to any step: retry, timeout, on_failure, effect, approval gate,
//! guardrails, `if` and cache.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{ErrorCode, StepError};
use crate::outcome::{InterruptRequest, TimeoutAction};

/// How the delay between attempts grows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Backoff {
    /// Always `initial_delay`.
    Fixed,
    /// `initial_delay × n` before attempt n+1.
    Linear,
    /// `initial_delay × 2^(n-1)` before attempt n+1.
    Exponential,
}

/// Retry a failed step: how often and how long to wait.
///
/// The attempt count and the next attempt's time are journaled, so retries survive a crash:
/// a resumed run waits out the recorded time, then makes the next attempt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RetryPolicy {
    /// Attempts in all, the first included (≥ 1).
    pub max_attempts: u32,
    /// How the delay grows.
    pub backoff: Backoff,
    /// The delay before the second attempt.
    pub initial_delay: Duration,
    /// The largest delay (≥ `initial_delay`).
    pub max_delay: Duration,
    /// A fraction in `[0, 1]`: each delay is scaled by a random factor in
    /// `[1 - jitter, 1 + jitter]`, then capped at `max_delay`.
    pub jitter: f64,
}

impl RetryPolicy {
    /// `max_attempts` attempts with exponential backoff from 1 s up to 1 min, no jitter.
    pub fn new(max_attempts: u32) -> Self {
        Self {
            max_attempts,
            backoff: Backoff::Exponential,
            initial_delay: Duration::from_secs(1),
            max_delay: Duration::from_secs(60),
            jitter: 0.0,
        }
    }

    /// Sets the backoff.
    #[must_use]
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// Sets the first delay.
    #[must_use]
    pub fn initial_delay(mut self, delay: Duration) -> Self {
        self.initial_delay = delay;
        self
    }

    /// Sets the largest delay.
    #[must_use]
    pub fn max_delay(mut self, delay: Duration) -> Self {
        self.max_delay = delay;
        self
    }

    /// Sets the jitter fraction.
    #[must_use]
    pub fn jitter(mut self, jitter: f64) -> Self {
        self.jitter = jitter;
        self
    }

    /// The delay after the `failed_attempt`-th attempt failed (1-based), given a uniform
    /// random number in `[0, 1)` for the jitter.
    pub fn delay_after(&self, failed_attempt: u32, random: f64) -> Duration {
        let n = failed_attempt.max(1);
        let base = match self.backoff {
            Backoff::Fixed => self.initial_delay,
            Backoff::Linear => self.initial_delay.saturating_mul(n),
            Backoff::Exponential => {
                let factor = 1u32.checked_shl(n - 1).unwrap_or(u32::MAX);
                self.initial_delay.saturating_mul(factor)
            }
        };
        let base = base.min(self.max_delay);
        if self.jitter == 0.0 {
            return base;
        }
        let factor = 1.0 + self.jitter * (2.0 * random - 1.0);
        base.mul_f64(factor.max(0.0)).min(self.max_delay)
    }
}

/// What a step does to the world; decides the effect fence and what is safe to re-run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Effect {
    /// Computes from its input only; may be cached and re-run freely.
    #[default]
    Pure,
    /// Reads the world; safe to re-run.
    Read,
    /// Changes state the workflow owns; fenced by an intent entry.
    Write,
    /// Calls the outside world; fenced by an intent entry.
    External,
    /// Waits for a person.
    Human,
}

impl Effect {
    /// Whether an intent entry with an idempotency key is committed before the step runs.
    pub fn is_fenced(self) -> bool {
        matches!(self, Self::Write | Self::External)
    }
}

/// An approval gate before a step runs.
#[derive(Debug, Clone, PartialEq)]
pub struct ApprovalGate {
    /// Message shown to the approver.
    pub message: String,
    /// Who may decide (`user:ID`, `role:NAME`); empty means anyone.
    pub approvers: Vec<String>,
    /// How long the gate stays open, and what happens then.
    pub timeout: Option<(Duration, TimeoutAction)>,
}

impl ApprovalGate {
    /// A gate with a message that anyone may resolve.
    pub fn new(message: impl Into<String>) -> Self {
        Self { message: message.into(), approvers: Vec::new(), timeout: None }
    }

    /// Adds an approver.
    #[must_use]
    pub fn approver(mut self, approver: impl Into<String>) -> Self {
        self.approvers.push(approver.into());
        self
    }

    /// Sets the deadline.
    #[must_use]
    pub fn timeout(mut self, after: Duration, on_timeout: TimeoutAction) -> Self {
        self.timeout = Some((after, on_timeout));
        self
    }

    pub(crate) fn request(&self, input: &Value) -> InterruptRequest {
        let mut request = InterruptRequest::approval(self.message.clone()).payload(input.clone());
        for approver in &self.approvers {
            request = request.approver(approver);
        }
        if let Some((after, action)) = self.timeout {
            request = request.timeout(after, action);
        }
        request
    }
}

/// Where a guardrail looks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GuardrailStage {
    /// At the step's input, before it runs.
    Input,
    /// At the step's output, before it is recorded.
    Output,
}

/// What happens when a guardrail finds a violation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GuardrailAction {
    /// Fail the step with `guardrail_blocked`.
    Block,
    /// Record a `guardrail.warning` event and go on.
    Warn,
    /// Replace the value with the guardrail's redacted version and go on.
    Redact,
}

/// What a guardrail check found.
#[derive(Debug, Clone, PartialEq)]
pub enum GuardrailVerdict {
    /// Nothing wrong.
    Pass,
    /// A violation, with a message and (if the check can redact) the redacted value.
    Violation {
        /// What was found.
        message: String,
        /// The value with the offending parts removed.
        redacted: Option<Value>,
    },
}

/// A check over a step's input or output.
pub trait GuardrailCheck: Send + Sync + 'static {
    /// A short name for events and errors.
    fn name(&self) -> &str;
    /// Whether violations come with a redacted value (required for the `redact` action).
    fn can_redact(&self) -> bool;
    /// Checks a value.
    fn check(&self, value: &Value) -> GuardrailVerdict;
}

/// A guardrail: a check, where it looks, and what a violation does.
#[derive(Clone)]
pub struct Guardrail {
    /// Where it looks.
    pub stage: GuardrailStage,
    /// What a violation does.
    pub action: GuardrailAction,
    /// What it looks for.
    pub check: Arc<dyn GuardrailCheck>,
}

impl fmt::Debug for Guardrail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Guardrail")
            .field("name", &self.check.name())
            .field("stage", &self.stage)
            .field("action", &self.action)
            .finish()
    }
}

impl Guardrail {
    /// A guardrail from its parts.
    pub fn new(stage: GuardrailStage, action: GuardrailAction, check: impl GuardrailCheck) -> Self {
        Self { stage, action, check: Arc::new(check) }
    }
}

/// A regular-expression guardrail: any string in the value (at any depth) that matches is a
/// violation; redaction replaces each match with `[REDACTED]`.
#[derive(Debug, Clone)]
pub struct PatternGuardrail {
    name: String,
    pattern: regex::Regex,
}

impl PatternGuardrail {
    /// A guardrail named `name` that matches `pattern`.
    pub fn new(name: impl Into<String>, pattern: &str) -> Result<Self, regex::Error> {
        Ok(Self { name: name.into(), pattern: regex::Regex::new(pattern)? })
    }

    fn redact(&self, value: &Value, found: &mut usize) -> Value {
        match value {
            Value::String(text) => {
                let count = self.pattern.find_iter(text).count();
                if count == 0 {
                    return value.clone();
                }
                *found += count;
                Value::String(self.pattern.replace_all(text, "[REDACTED]").into_owned())
            }
            Value::Array(items) => Value::Array(items.iter().map(|v| self.redact(v, found)).collect()),
            Value::Object(map) => Value::Object(map.iter().map(|(k, v)| (k.clone(), self.redact(v, found))).collect()),
            other => other.clone(),
        }
    }
}

impl GuardrailCheck for PatternGuardrail {
    fn name(&self) -> &str {
        &self.name
    }

    fn can_redact(&self) -> bool {
        true
    }

    fn check(&self, value: &Value) -> GuardrailVerdict {
        let mut found = 0;
        let redacted = self.redact(value, &mut found);
        if found == 0 {
            GuardrailVerdict::Pass
        } else {
            GuardrailVerdict::Violation {
                message: format!("{} matched {found} time(s)", self.name),
                redacted: Some(redacted),
            }
        }
    }
}

/// A guardrail from a closure that returns `Some(message)` on a violation; it cannot redact.
pub struct FnGuardrail<F> {
    name: String,
    check: F,
}

impl<F> FnGuardrail<F>
where
    F: Fn(&Value) -> Option<String> + Send + Sync + 'static,
{
    /// A named closure check.
    pub fn new(name: impl Into<String>, check: F) -> Self {
        Self { name: name.into(), check }
    }
}

impl<F> GuardrailCheck for FnGuardrail<F>
where
    F: Fn(&Value) -> Option<String> + Send + Sync + 'static,
{
    fn name(&self) -> &str {
        &self.name
    }

    fn can_redact(&self) -> bool {
        false
    }

    fn check(&self, value: &Value) -> GuardrailVerdict {
        match (self.check)(value) {
            None => GuardrailVerdict::Pass,
            Some(message) => GuardrailVerdict::Violation { message, redacted: None },
        }
    }
}

/// Guardrail warnings: `(guardrail name, message)`.
pub(crate) type Warnings = Vec<(String, String)>;

/// Applies the guardrails of one stage to a value: returns the (possibly redacted) value and
/// the warnings to record, or the blocking error.
pub(crate) fn apply_guardrails(
    guardrails: &[Guardrail],
    stage: GuardrailStage,
    value: Arc<Value>,
) -> Result<(Arc<Value>, Warnings), StepError> {
    let mut value = value;
    let mut warnings = Vec::new();
    for guardrail in guardrails.iter().filter(|g| g.stage == stage) {
        if let GuardrailVerdict::Violation { message, redacted } = guardrail.check.check(&value) {
            match guardrail.action {
                GuardrailAction::Block => {
                    return Err(StepError::new(
                        ErrorCode::GUARDRAIL_BLOCKED,
                        format!("guardrail {:?} blocked the {stage:?} value: {message}", guardrail.check.name())
                            .to_lowercase(),
                    ));
                }
                GuardrailAction::Warn => warnings.push((guardrail.check.name().to_owned(), message)),
                GuardrailAction::Redact => {
                    if let Some(redacted) = redacted {
                        value = Arc::new(redacted);
                    }
                    warnings.push((guardrail.check.name().to_owned(), format!("redacted: {message}")));
                }
            }
        }
    }
    Ok((value, warnings))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn backoff_shapes() {
        let base = RetryPolicy::new(5).initial_delay(Duration::from_millis(100)).max_delay(Duration::from_millis(350));
        let exp: Vec<_> = (1..=4).map(|n| base.delay_after(n, 0.5).as_millis()).collect();
        assert_eq!(exp, [100, 200, 350, 350]);
        let lin = base.clone().backoff(Backoff::Linear);
        assert_eq!((1..=4).map(|n| lin.delay_after(n, 0.5).as_millis()).collect::<Vec<_>>(), [100, 200, 300, 350]);
        let fixed = base.backoff(Backoff::Fixed);
        assert_eq!(fixed.delay_after(9, 0.5).as_millis(), 100);
    }

    #[test]
    fn jitter_scales_within_bounds() {
        let policy = RetryPolicy::new(3).backoff(Backoff::Fixed).initial_delay(Duration::from_millis(100)).jitter(0.5);
        assert_eq!(policy.delay_after(1, 0.0).as_millis(), 50);
        assert_eq!(policy.delay_after(1, 0.5).as_millis(), 100);
        assert_eq!(policy.delay_after(1, 0.75).as_millis(), 125);
    }

    #[test]
    fn pattern_guardrail_redacts_deeply() {
        let g = Guardrail::new(
            GuardrailStage::Output,
            GuardrailAction::Redact,
            PatternGuardrail::new("email", r"[a-z]+@[a-z]+\.com").unwrap(),
        );
        let value = Arc::new(json!({"to": "bob@example.com", "cc": ["x", "al@ex.com"], "n": 1}));
        let (out, warnings) = apply_guardrails(&[g], GuardrailStage::Output, value).unwrap();
        assert_eq!(*out, json!({"to": "[REDACTED]", "cc": ["x", "[REDACTED]"], "n": 1}));
        assert_eq!(warnings.len(), 1);
    }

    #[test]
    fn block_fails_and_warn_passes() {
        let block = Guardrail::new(
            GuardrailStage::Input,
            GuardrailAction::Block,
            FnGuardrail::new("no-negatives", |v: &Value| (v.as_i64() < Some(0)).then(|| "negative".to_owned())),
        );
        let err =
            apply_guardrails(std::slice::from_ref(&block), GuardrailStage::Input, Arc::new(json!(-1))).unwrap_err();
        assert_eq!(err.code, ErrorCode::GUARDRAIL_BLOCKED);
        // Guardrails of the other stage are not applied.
        assert!(apply_guardrails(&[block], GuardrailStage::Output, Arc::new(json!(-1))).is_ok());
    }
}
