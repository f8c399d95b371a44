//! Webhooks: registering them, their deliveries, and the payload each delivery posts.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{ErrorView, InterruptKind, RunStatus};

/// A webhook to make.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NewWebhook {
    /// Where events are posted (`http://` or `https://`, no user name or password): a public
    /// address, or one in a network the operator allows (`serve --webhook-allow`).
    #[schemars(extend("format" = "uri"))]
    pub url: String,
    /// Which: `interrupt.opened`, `run.completed`, `run.failed`, `run.suspended`.
    pub events: Vec<String>,
    /// The HMAC key each delivery is signed with (16 characters or more).
    pub secret: String,
}

/// A webhook as the API shows it (never its secret).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct WebhookView {
    /// Its id.
    pub id: String,
    /// Where events are posted.
    pub url: String,
    /// Which.
    pub events: Vec<String>,
    /// When it was made (µs since the epoch).
    pub created_at: i64,
}

/// One delivery with its attempts.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct DeliveryView {
    /// Its id (also sent as `Stepwright-Delivery`).
    pub id: i64,
    /// The event.
    pub event: String,
    /// `pending`, `delivered` or `failed`.
    pub state: String,
    /// Every attempt, oldest first.
    pub attempts: Vec<AttemptView>,
    /// When the next attempt is due, for a pending one (µs since the epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_attempt_at: Option<i64>,
    /// The body posted.
    pub body: serde_json::Value,
}

/// One attempt.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct AttemptView {
    /// When (µs since the epoch).
    pub at: i64,
    /// The receiver's status, if it answered.
    pub status: Option<u16>,
    /// Why it failed, if it did.
    pub error: Option<String>,
}

/// The body a webhook delivery posts (signed: `Stepwright-Signature: t=<unix>,v1=<hex
/// hmac-sha256 of "t.body">`), named by `event`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "event")]
pub enum WebhookPayload {
    /// A step asked a person (or an event, or a time) and waits.
    #[serde(rename = "interrupt.opened")]
    InterruptOpened {
        /// The run.
        run_id: String,
        /// Its workflow.
        workflow: String,
        /// When it opened (µs since the epoch).
        at: i64,
        /// What it asks.
        interrupt: WebhookInterrupt,
    },
    /// The run stopped to wait: for an interrupt (`interrupt`), or for a time (`wake_at`).
    #[serde(rename = "run.suspended")]
    RunSuspended {
        /// The run.
        run_id: String,
        /// Its workflow.
        workflow: String,
        /// When it stopped (µs since the epoch).
        at: i64,
        /// `suspended`.
        status: RunStatus,
        /// The interrupt it waits on, when it waits on one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        interrupt: Option<WebhookInterrupt>,
        /// When it wakes, when it waits for a time (µs since the epoch).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        wake_at: Option<i64>,
    },
    /// The run finished with an output.
    #[serde(rename = "run.completed")]
    RunCompleted {
        /// The run.
        run_id: String,
        /// Its workflow.
        workflow: String,
        /// When it finished (µs since the epoch).
        at: i64,
        /// `completed`.
        status: RunStatus,
        /// Its output.
        output: Value,
    },
    /// The run finished with an error.
    #[serde(rename = "run.failed")]
    RunFailed {
        /// The run.
        run_id: String,
        /// Its workflow.
        workflow: String,
        /// When it failed (µs since the epoch).
        at: i64,
        /// `failed`.
        status: RunStatus,
        /// Why.
        error: Option<ErrorView>,
    },
}

impl WebhookPayload {
    /// Every event name a webhook may ask for.
    pub const EVENTS: [&'static str; 4] = ["interrupt.opened", "run.completed", "run.failed", "run.suspended"];

    /// The event's name (`run.completed`, …), as `events` lists it.
    pub fn event(&self) -> &'static str {
        match self {
            Self::InterruptOpened { .. } => "interrupt.opened",
            Self::RunSuspended { .. } => "run.suspended",
            Self::RunCompleted { .. } => "run.completed",
            Self::RunFailed { .. } => "run.failed",
        }
    }
}

/// An interrupt as a webhook payload carries it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct WebhookInterrupt {
    /// Its id within the run.
    pub id: String,
    /// The step that asked.
    pub step: String,
    /// `approval`, `input`, `event` or `timer`.
    pub kind: InterruptKind,
    /// What the person deciding is shown.
    pub message: String,
    /// The value to approve, or what the request carries.
    pub payload: Value,
    /// When its `on_timeout` applies (µs since the epoch).
    pub deadline: Option<i64>,
    /// Where to post the decision (`/v1/interrupts/<run>.<id>/decision`).
    pub decide: String,
}
