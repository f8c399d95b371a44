//! What a step returns: an outcome (a control signal), plus the interrupt vocabulary.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::ids::Timestamp;

/// The result of a step that did not fail: a control signal for the engine, plus events the
/// step returns (recorded after any it emitted through the context).
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome<T> {
    /// What happened.
    pub kind: OutcomeKind<T>,
    /// Events returned with the outcome.
    pub events: Vec<Event>,
}

/// The control signal of an [`Outcome`].
#[derive(Debug, Clone, PartialEq)]
pub enum OutcomeKind<T> {
    /// The step produced its output.
    Completed(T),
    /// The step decided not to run; its output is `null`.
    Skipped(String),
    /// The step waits for a human or a timer; the run suspends until it is resolved, then
    /// the step runs again and its `ctx.interrupt()` calls return the decisions.
    Suspended(InterruptRequest),
    /// The step saved a checkpoint and stops; the run stops as `pending`, and when it is
    /// resumed the step runs again with `ctx.checkpoint()` returning this value.
    Continue(Value),
    /// The step hands control to another node of the nearest enclosing graph, which runs
    /// next with `payload` as its input.
    Handoff {
        /// The graph node to run next.
        target: String,
        /// The input the target node is given.
        payload: Value,
    },
}

impl<T> Outcome<T> {
    /// A completed outcome.
    pub fn completed(output: T) -> Self {
        Self { kind: OutcomeKind::Completed(output), events: Vec::new() }
    }

    /// A skipped outcome.
    pub fn skipped(reason: impl Into<String>) -> Self {
        Self { kind: OutcomeKind::Skipped(reason.into()), events: Vec::new() }
    }

    /// A suspended outcome.
    pub fn suspended(request: InterruptRequest) -> Self {
        Self { kind: OutcomeKind::Suspended(request), events: Vec::new() }
    }

    /// A checkpoint-and-stop outcome.
    pub fn checkpoint(state: Value) -> Self {
        Self { kind: OutcomeKind::Continue(state), events: Vec::new() }
    }

    /// A handoff outcome.
    pub fn handoff(target: impl Into<String>, payload: Value) -> Self {
        Self { kind: OutcomeKind::Handoff { target: target.into(), payload }, events: Vec::new() }
    }

    /// Adds a returned event.
    #[must_use]
    pub fn with_event(mut self, event: Event) -> Self {
        self.events.push(event);
        self
    }

    /// Maps the completed output.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Outcome<U> {
        let kind = match self.kind {
            OutcomeKind::Completed(output) => OutcomeKind::Completed(f(output)),
            OutcomeKind::Skipped(reason) => OutcomeKind::Skipped(reason),
            OutcomeKind::Suspended(request) => OutcomeKind::Suspended(request),
            OutcomeKind::Continue(state) => OutcomeKind::Continue(state),
            OutcomeKind::Handoff { target, payload } => OutcomeKind::Handoff { target, payload },
        };
        Outcome { kind, events: self.events }
    }
}

impl<T> From<T> for Outcome<T> {
    fn from(output: T) -> Self {
        Self::completed(output)
    }
}

/// An audit event emitted by a step; the engine stamps it with run, step path, time, tenant
/// and user when it records it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// The event's type, such as `order.refunded`.
    pub kind: String,
    /// The event's own fields; its shape depends on `kind`.
    pub data: Value,
}

impl Event {
    /// An event of a type with a payload.
    pub fn new(kind: impl Into<String>, data: Value) -> Self {
        Self { kind: kind.into(), data }
    }
}

/// What kind of pause an interrupt is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum InterruptKind {
    /// Approve, reject or modify.
    Approval,
    /// Provide a value matching a schema.
    Input,
    /// Wait for an external event.
    Event,
    /// Wait until a time.
    Timer,
}

/// Who may resolve an interrupt: a user or anyone holding a role.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Approver {
    /// One user, by id.
    User(String),
    /// Anyone with this role.
    Role(String),
}

impl Approver {
    /// Parses `user:ID` or `role:NAME` (a bare name is a user).
    pub fn parse(text: &str) -> Self {
        if let Some(role) = text.strip_prefix("role:") {
            Self::Role(role.to_owned())
        } else {
            Self::User(text.strip_prefix("user:").unwrap_or(text).to_owned())
        }
    }
}

/// What happens when an interrupt's deadline passes unresolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimeoutAction {
    /// Resolve as rejected.
    #[default]
    Reject,
    /// Resolve as approved.
    Approve,
    /// Fail the step with `interrupt_timeout`.
    Fail,
}

/// A request to pause: what to ask, whom, and until when.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InterruptRequest {
    /// The kind of pause.
    pub kind: InterruptKind,
    /// A message for the human.
    pub message: String,
    /// Data shown with the request (for approvals, the value being approved).
    #[serde(default)]
    pub payload: Value,
    /// Who may resolve it; empty means anyone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approvers: Vec<Approver>,
    /// For `input`: the JSON Schema the answer must match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<Value>,
    /// How long it may stay open (from when it opens); for `timer`, when it fires.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "opt_duration_ms")]
    pub timeout: Option<Duration>,
    /// What happens at the deadline.
    #[serde(default)]
    pub on_timeout: TimeoutAction,
}

impl InterruptRequest {
    /// Whether `caller` may decide it: it names no approvers, or the caller is one of them
    /// (by user) or has one of their roles.
    pub fn may_decide(&self, caller: &crate::identity::Caller) -> bool {
        self.approvers.is_empty()
            || self.approvers.iter().any(|approver| match approver {
                Approver::User(user) => caller.user.as_deref() == Some(user.as_str()),
                Approver::Role(role) => caller.roles.iter().any(|r| r == role),
            })
    }

    /// An approval request.
    pub fn approval(message: impl Into<String>) -> Self {
        Self::of(InterruptKind::Approval, message)
    }

    /// An input request whose answer must match `schema`.
    pub fn input(message: impl Into<String>, schema: Value) -> Self {
        let mut request = Self::of(InterruptKind::Input, message);
        request.schema = Some(schema);
        request
    }

    /// A wait for an external event.
    pub fn event(message: impl Into<String>) -> Self {
        Self::of(InterruptKind::Event, message)
    }

    /// A timer that fires after `after`.
    pub fn timer(after: Duration) -> Self {
        let mut request = Self::of(InterruptKind::Timer, "timer");
        request.timeout = Some(after);
        request.on_timeout = TimeoutAction::Approve;
        request
    }

    fn of(kind: InterruptKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            payload: Value::Null,
            approvers: Vec::new(),
            schema: None,
            timeout: None,
            on_timeout: TimeoutAction::Reject,
        }
    }

    /// Sets the payload.
    #[must_use]
    pub fn payload(mut self, payload: Value) -> Self {
        self.payload = payload;
        self
    }

    /// Adds an approver (`user:ID` or `role:NAME`).
    #[must_use]
    pub fn approver(mut self, approver: &str) -> Self {
        self.approvers.push(Approver::parse(approver));
        self
    }

    /// Sets the deadline and what happens at it.
    #[must_use]
    pub fn timeout(mut self, after: Duration, on_timeout: TimeoutAction) -> Self {
        self.timeout = Some(after);
        self.on_timeout = on_timeout;
        self
    }
}

/// A human's (or timer's) answer to an interrupt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum Decision {
    /// Go ahead.
    Approve,
    /// Do not.
    Reject {
        /// Why.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// Go ahead with a corrected payload (kept as an overlay beside the computed value).
    Modify {
        /// The corrected value.
        payload: Value,
    },
    /// The answer to an `input` request, or the payload of an `event`.
    Respond {
        /// The answer (checked against an input request's schema), or the event's payload.
        value: Value,
    },
}

/// A recorded decision: what, by whom, when, and whether the deadline made it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Resolution {
    /// What was decided.
    #[serde(flatten)]
    pub decision: Decision,
    /// The deciding user (none for a deadline).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// When it was decided.
    pub at: Timestamp,
    /// Whether the deadline decided it.
    #[serde(default)]
    pub timed_out: bool,
}

mod opt_duration_ms {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub(super) fn serialize<S: Serializer>(value: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match value {
            Some(d) => s.serialize_some(&u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            None => s.serialize_none(),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        Ok(Option::<u64>::deserialize(d)?.map(Duration::from_millis))
    }
}
