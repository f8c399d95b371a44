//! A run's event stream (`GET /v1/runs/{id}/events`, Server-Sent Events): where to start,
//! and what each event carries.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Where to start.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StreamFrom {
    /// The `id` of the last event received: the stream starts after it (as `Last-Event-ID`).
    #[serde(default)]
    pub after: Option<u64>,
    /// Also send the text models stream, as `token` events (`{"path", "text"}`) without an
    /// `id`: they are live only — not journaled, never sent again on a reconnect — and come
    /// from runs executing in the server that serves the stream.
    #[serde(default)]
    pub tokens: bool,
}

/// The `data:` of each streamed event: the run's event as `runs events --json` prints it.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct StreamedEvent {
    /// The run.
    pub run: String,
    /// The step path it concerns (empty for the run's own events).
    pub path: String,
    /// When (µs since the epoch).
    pub at: i64,
    /// The run's tenant, for events steps emitted.
    pub tenant: Option<String>,
    /// The run's user, for events steps emitted.
    pub user: Option<String>,
    /// The event's name, as in `event:` (`step.started`, `step.completed`, `interrupt.opened`,
    /// `run.completed`, …).
    pub kind: String,
    /// The event's own fields.
    pub data: serde_json::Value,
}

/// A piece of text a model streamed for a step: the `data:` of a `token` event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct StreamedToken {
    /// The step whose model streams it.
    pub path: String,
    /// The text.
    pub text: String,
}
