//! The closed vocabularies of the wire: where a run and a step stand, what kind of pause an
//! interrupt is, what a key may do. Each mirrors a kernel enum spelling for spelling; the
//! application layer converts (exhaustively, so a new kernel variant is a compile error
//! there) and a test there checks every spelling.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Where a run stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Ready to run and not running: created, or stopped at a checkpoint.
    Pending,
    /// Being executed.
    Running,
    /// Waiting on at least one interrupt (approval, input, event or timer).
    Suspended,
    /// Finished with an output.
    Completed,
    /// Finished with an error.
    Failed,
    /// Cancelled.
    Cancelled,
}

impl RunStatus {
    /// Every status, in the order a run may pass through them.
    pub const ALL: [Self; 6] =
        [Self::Pending, Self::Running, Self::Suspended, Self::Completed, Self::Failed, Self::Cancelled];

    /// The status as the API spells it (`pending`, `running`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Running => "running",
            Self::Suspended => "suspended",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }

    /// Whether the run has finished for good.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Cancelled)
    }

    /// Whether the run has stopped for now: finished, or waiting for a person or a time.
    pub fn has_stopped(self) -> bool {
        self.is_terminal() || self == Self::Suspended
    }
}

/// Where a step path stands in a run's timeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum StepStatus {
    /// It produced its output.
    Completed,
    /// It failed for good (after its retries and `on_failure`).
    Failed,
    /// Its condition was false, or `on_failure: skip` turned a failure into `null`.
    Skipped,
    /// It waits on an interrupt; the run suspends.
    Suspended,
    /// It handed control to another node of its graph.
    Handoff,
    /// It was stopped: the run was cancelled, or a sibling's failure or a race ended it.
    Cancelled,
    /// This attempt failed and another one follows.
    Retrying,
    /// An attempt started and has not ended.
    Running,
    /// It opened an interrupt and waits for the decision.
    Waiting,
}

impl StepStatus {
    /// Every status.
    pub const ALL: [Self; 9] = [
        Self::Completed,
        Self::Failed,
        Self::Skipped,
        Self::Suspended,
        Self::Handoff,
        Self::Cancelled,
        Self::Retrying,
        Self::Running,
        Self::Waiting,
    ];

    /// The status as the API spells it (`completed`, `retrying`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Skipped => "skipped",
            Self::Suspended => "suspended",
            Self::Handoff => "handoff",
            Self::Cancelled => "cancelled",
            Self::Retrying => "retrying",
            Self::Running => "running",
            Self::Waiting => "waiting",
        }
    }
}

/// What kind of pause an interrupt is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
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

impl InterruptKind {
    /// Every kind.
    pub const ALL: [Self; 4] = [Self::Approval, Self::Input, Self::Event, Self::Timer];

    /// The kind as the API spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Approval => "approval",
            Self::Input => "input",
            Self::Event => "event",
            Self::Timer => "timer",
        }
    }
}

/// What a key may do. Any role may read its namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Reads runs, events, workflows and interrupts.
    Viewer,
    /// Starts, cancels and resumes runs, and sends them messages.
    Operator,
    /// Decides interrupts (as the key's user, among the interrupt's approvers).
    Approver,
    /// Registers workflows, manages webhooks; everything an operator does.
    Admin,
    /// Claims and answers step tasks (a step worker's key); `worker:<pattern>` limits it
    /// to the queues the pattern matches (`worker:py-*`).
    Worker,
}

impl Role {
    /// Every role.
    pub const ALL: [Self; 5] = [Self::Viewer, Self::Operator, Self::Approver, Self::Admin, Self::Worker];

    /// The role's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Viewer => "viewer",
            Self::Operator => "operator",
            Self::Approver => "approver",
            Self::Admin => "admin",
            Self::Worker => "worker",
        }
    }

    /// Parses a role's name.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|role| role.as_str() == text)
    }
}
