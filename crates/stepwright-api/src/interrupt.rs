//! Interrupts: the inbox, decisions, and approval links.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{InterruptKind, RunStatus};

/// Inbox filters.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InboxQuery {
    /// `open`: interrupts waiting for a decision (the only status listed).
    #[serde(default)]
    #[schemars(extend("enum" = ["open", null]))]
    pub status: Option<String>,
    /// Only interrupts of this kind. Without it: the decisions a person takes (`approval`
    /// and `input`); durable timers (`timer`) and awaited events (`event`) are listed only
    /// when asked for.
    #[serde(default)]
    pub kind: Option<InterruptKind>,
}

/// An open interrupt the caller may decide.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct InboxItem {
    /// The id to decide it by: `<run id>.<interrupt id>`.
    pub id: String,
    /// The run that waits.
    pub run_id: String,
    /// The run's workflow.
    pub workflow: String,
    /// The interrupt's id within the run.
    pub interrupt_id: String,
    /// The step that asked.
    pub step: String,
    /// `approval`, `input`, `event` or `timer`.
    pub kind: InterruptKind,
    /// What the person deciding is shown.
    pub message: String,
    /// The value to approve, or what the request carries.
    pub payload: Value,
    /// For `input`: the schema the answer must match; `x-stepwright-order` lists its
    /// top-level properties in the order the file declares them (what a form follows).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<Value>,
    /// When its `on_timeout` applies (µs since the epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<i64>,
}

/// A decision.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DecisionBody {
    /// `approve`, `reject`, `modify` (an approval with a corrected `payload`) or `respond`
    /// (the `value` an input or event request asks for).
    pub decision: DecisionKind,
    /// For `modify`: the corrected value.
    #[serde(default)]
    pub payload: Option<Value>,
    /// For `respond`: the answer.
    #[serde(default)]
    pub value: Option<Value>,
    /// For `reject`: why.
    #[serde(default)]
    pub reason: Option<String>,
}

/// What is decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DecisionKind {
    /// Go ahead.
    Approve,
    /// Do not.
    Reject,
    /// Go ahead with a corrected payload.
    Modify,
    /// Answer an input or event request.
    Respond,
}

/// What a decision did.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct DecisionTaken {
    /// The run.
    pub run_id: String,
    /// The interrupt decided.
    pub interrupt_id: String,
    /// Who decided (the key's user).
    pub decided_by: String,
    /// Where the run stands: it continues on a worker.
    pub status: RunStatus,
}

/// A durable timer woken before it was due.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct TimerWoken {
    /// The run.
    pub run_id: String,
    /// The timer's interrupt.
    pub interrupt_id: String,
    /// Who woke it (the key's user).
    pub woken_by: String,
    /// Where the run stands: it continues on a worker.
    pub status: RunStatus,
}

/// A link to make.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NewLink {
    /// How long it lasts, in seconds (60 to 604800; default 3600).
    #[serde(default, deserialize_with = "crate::whole::optional")]
    #[schemars(range(min = 60, max = 604_800))]
    pub expires_in_seconds: Option<u64>,
}

/// A link made.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct LinkMade {
    /// The page to open, on the host the request was made to (behind a proxy, the host it
    /// forwarded): send this.
    pub url: String,
    /// The same page relative to the server's root (`/link#…`).
    pub path: String,
    /// The interrupt it decides (`<run id>.<interrupt id>`).
    pub interrupt: String,
    /// When it stops working (µs since the epoch).
    pub expires_at: i64,
}

/// What a link opens.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct LinkView {
    /// The request to decide.
    pub interrupt: InboxItem,
    /// Who the decision is taken as.
    pub decide_as: String,
    /// When the link stops working (µs since the epoch).
    pub expires_at: Option<i64>,
}

/// An approver list to check against who can sign in to the namespace.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckApprovers {
    /// The entries, as a file writes them (`role:lead`, `user:ann`, a built-in role).
    #[schemars(length(min = 1, max = 100))]
    pub approvers: Vec<String>,
}

/// Who could meet an approver list: live keys and OIDC group mappings of the namespace that
/// hold the approver role and meet the list. None of either: a step naming it waits for
/// someone who cannot sign in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ApproversChecked {
    /// How many live keys could decide.
    pub keys: u32,
    /// The provider groups whose members could decide (for a `user:` entry: those whose
    /// members may be that user, as only their sign-in says).
    pub groups: Vec<String>,
}
