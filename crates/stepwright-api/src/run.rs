//! Runs: starting, listing and showing them, and the actions on one (cancel, resume,
//! messages). [`RunDetails`] is the one shape of a run every front end shows:
//! `runs show --json`, `GET /v1/runs/{id}` and what a start or decision answers.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{InterruptKind, RunStatus, StepStatus};

/// A run: where it stands, its output or error, what it waits for, and a row per step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RunDetails {
    /// The run's id (a UUIDv7).
    pub run_id: String,
    /// Its workflow's name.
    pub workflow: String,
    /// Where it stands.
    pub status: RunStatus,
    /// Its output, once completed.
    pub output: Option<Value>,
    /// Why it failed or was cancelled.
    pub error: Option<ErrorView>,
    /// The interrupts it waits on.
    pub pending: Vec<PendingView>,
    /// The events its `wait` steps wait for (each answered by a message sent to the run's
    /// inbox of that name).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub awaiting: Vec<AwaitedView>,
    /// The worker executing it now, if one is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// When that worker's lease lapses unless renewed (µs since the epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_expires_at: Option<i64>,
    /// A row per step path, in the order they first appear.
    pub steps: Vec<StepView>,
    /// Model usage and cost over the whole run, when it called models.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Totals>,
    /// When it was created (µs since the epoch), when read from a store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<i64>,
    /// The run it was forked from, if it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<ParentView>,
    /// Who started it, when it was started by someone the store knows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_by: Option<StartedBy>,
    /// The tags it was started with (a fork keeps its run's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// Its input, when read from a store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<Value>,
    /// When a timer, retry or deadline it waits on is due (µs since the epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake_at: Option<i64>,
    /// Why a pending run has not started: what it waits for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued: Option<QueuedView>,
    /// The step workers' tasks it waits on (`worker:` tools), each with why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tasks: Vec<TaskWaitView>,
}

/// A step worker's task a run waits on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TaskWaitView {
    /// The step (or an agent's tool call) whose task it is.
    pub step: String,
    /// The task's id.
    pub task_id: String,
    /// The queue it waits in.
    pub queue: String,
    /// The handler that runs it.
    pub handler: String,
    /// `pending` (no worker has it) or `claimed` (a worker runs it).
    pub state: crate::task::TaskStatus,
    /// The worker that runs it, once claimed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
    /// The step's attempt.
    pub attempt: u32,
    /// Why the run waits, in words: "no worker polls queue `py` for `summarise`".
    pub reason: String,
}

/// An event a `wait` step waits for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct AwaitedView {
    /// The waiting step's path.
    pub step: String,
    /// The event: the name of the run's inbox its message is sent to.
    pub event: String,
    /// When the wait fails if no message comes (µs since the epoch).
    pub until: i64,
}

/// Why a pending run waits, as the store sees it now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct QueuedView {
    /// In words, for a person.
    pub reason: String,
    /// Its priority among runs waiting for a worker.
    pub priority: i32,
    /// Its concurrency group, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency_key: Option<String>,
    /// How many of the group's runs may execute at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency_limit: Option<u32>,
    /// The group's runs holding its slots now (running or suspended).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held_by: Vec<String>,
}

/// Where a forked run came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ParentView {
    /// The run it was forked from.
    pub run_id: String,
    /// The step before which it was forked.
    pub at: String,
}

/// A run's error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ErrorView {
    /// The stable error code.
    pub code: String,
    /// What happened.
    pub message: String,
}

/// An open interrupt of a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PendingView {
    /// The interrupt's id.
    pub id: String,
    /// The step that asked.
    pub step: String,
    /// `approval`, `input`, `event` or `timer`.
    pub kind: InterruptKind,
    /// What the person deciding is shown.
    pub message: String,
    /// When its `on_timeout` applies (for a timer: when it fires), µs since the epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<i64>,
}

/// One step path of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StepView {
    /// The step path (`drafts[1]/write`).
    pub path: String,
    /// Where it stands.
    pub status: StepStatus,
    /// The highest attempt recorded.
    pub attempts: u32,
    /// From its first start to its end, once both are known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<f64>,
    /// Its output, once completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    /// Its model usage and cost, when it called models.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Totals>,
    /// When its first attempt started (µs since the epoch): a running step's elapsed time is
    /// from here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<i64>,
    /// When it ended (µs since the epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<i64>,
    /// What it did when, in order, from the journal's facts (the timeline's bars); once the
    /// run has ended, none is open.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub spans: Vec<SpanView>,
    /// What it waits for now, said for a person: `a person: Ship it?`, `a timer until …`,
    /// `the event `paid``, `a worker on queue `py` to claim `summarise``.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_for: Option<String>,
}

/// One interval of a step's timeline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SpanView {
    /// What the step did.
    pub activity: StepActivity,
    /// From when (µs since the epoch).
    pub from: i64,
    /// Until when (µs since the epoch); absent while it goes on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<i64>,
}

/// What a step did over a span of its timeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum StepActivity {
    /// Executing an attempt.
    Executing,
    /// Waiting for a person (an approval, an input).
    Person,
    /// Waiting for a durable timer.
    Timer,
    /// Waiting for an event.
    Event,
    /// Waiting for a step worker.
    Worker,
    /// Waiting out a retry's delay.
    Retry,
}

/// Usage and cost summed over calls.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Totals {
    /// Calls made or played back.
    pub calls: u64,
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Generated tokens.
    pub output_tokens: u64,
    /// Cost in US dollars (calls without prices count zero).
    pub cost_usd: f64,
    /// Calls whose provider reported no usage: their tokens and cost are unknown (not zero).
    #[serde(default)]
    pub calls_without_usage: u64,
    /// The calls' time, in all: from each request to its whole answer, in milliseconds.
    #[serde(default)]
    pub latency_ms: f64,
}

/// What a cancel did: the values of [`Cancelled::outcome`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CancelOutcome {
    /// Nobody executed it: it is cancelled now.
    Cancelled,
    /// The process executing it stops it.
    Requested,
    /// It had ended already; `status` says how.
    Finished,
}

/// A run to start.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StartRun {
    /// The registered workflow's name.
    pub workflow: String,
    /// Its version (default: the newest).
    #[serde(default, deserialize_with = "crate::whole::optional")]
    pub version: Option<u32>,
    /// The workflow's input.
    #[serde(default)]
    pub input: Value,
    /// A key that makes the start idempotent: the same key in the namespace always answers
    /// the first run it started.
    #[serde(default)]
    pub idempotency_key: Option<String>,
    /// Wait up to this long (at most 60) for the run to finish or stop for a person.
    #[serde(default)]
    #[schemars(range(min = 0, max = 60))]
    pub wait_seconds: Option<f64>,
    /// The run's priority among runs waiting for a worker, higher first (default: the
    /// workflow's, else 0).
    #[serde(default, deserialize_with = "crate::whole::optional")]
    pub priority: Option<i32>,
    /// The run's concurrency group, instead of the one the workflow's `concurrency.key`
    /// gives: at most `limit` runs with this `key` execute at a time, across all workers.
    #[serde(default)]
    pub concurrency: Option<ConcurrencyGroup>,
    /// Labels to find the run by later (`GET /v1/runs?tag=…`, an experiment's population):
    /// at most 16, each 1 to 64 ASCII letters, digits and `_ - . : / =`, none twice.
    #[serde(default)]
    #[schemars(length(max = 16), inner(length(min = 1, max = 64), regex(pattern = r"^[A-Za-z0-9_.:/=-]+$")))]
    #[schemars(extend("uniqueItems" = true))]
    pub tags: Vec<String>,
}

/// A concurrency group a run is started in.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConcurrencyGroup {
    /// The group: runs with the same key share its slots.
    #[schemars(length(min = 1))]
    pub key: String,
    /// How many of its runs may execute at once.
    #[serde(deserialize_with = "crate::whole::required")]
    #[schemars(range(min = 1))]
    pub limit: u32,
}

/// `GET /v1/runs` filters.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListRuns {
    /// Only runs with this status.
    #[serde(default)]
    pub status: Option<RunStatus>,
    /// Only runs of this workflow.
    #[serde(default)]
    pub workflow: Option<String>,
    /// At most this many (1 to 500, default 50).
    #[serde(default)]
    #[schemars(range(min = 1, max = 500))]
    pub limit: Option<usize>,
    /// The `next_cursor` of the page before.
    #[serde(default)]
    #[schemars(extend("format" = "uuid"))]
    pub cursor: Option<String>,
    /// Only runs created at or after this time (µs since the epoch).
    #[serde(default)]
    pub created_after: Option<i64>,
    /// Only runs created before this time (µs since the epoch).
    #[serde(default)]
    pub created_before: Option<i64>,
    /// Only runs whose input (as JSON text) contains this text, ignoring case.
    #[serde(default)]
    #[schemars(length(min = 1, max = 200))]
    pub input_contains: Option<String>,
    /// Only runs forked from this run.
    #[serde(default)]
    #[schemars(extend("format" = "uuid"))]
    pub parent: Option<String>,
    /// Only runs started by this user (a person's id, `schedule:NAME`, `trigger:NAME`: the
    /// `started_by.id` the runs show).
    #[serde(default)]
    #[schemars(length(min = 1, max = 200))]
    pub started_by: Option<String>,
    /// Only runs with this tag (whole: `env:prod` does not find `env:prod-eu`).
    #[serde(default)]
    #[schemars(length(min = 1, max = 64), regex(pattern = r"^[A-Za-z0-9_.:/=-]+$"))]
    pub tag: Option<String>,
    /// Include each run's model usage and cost (`usage`), read from its events.
    #[serde(default)]
    pub usage: Option<bool>,
}

/// Who started a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StartedBy {
    /// A person (a key's or a signed-in user), a schedule's tick or a trigger's events.
    pub kind: StarterKind,
    /// As the runs' `started_by` filter takes it: the user's id, `schedule:NAME` or
    /// `trigger:NAME`.
    pub id: String,
    /// The schedule's tick that started it (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tick: Option<String>,
    /// The trigger's events that started it (their sequence numbers: `GET /v1/events/{seq}`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<u64>,
}

/// What kind of starter: the values of [`StartedBy::kind`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum StarterKind {
    /// A person.
    User,
    /// A schedule's tick.
    Schedule,
    /// A trigger's events.
    Trigger,
}

/// A page of runs.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct RunPage {
    /// Newest first.
    pub runs: Vec<RunSummary>,
    /// Pass as `cursor` for the next page; absent on the last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// A run in a listing.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct RunSummary {
    /// The run's id.
    pub run_id: String,
    /// Its workflow.
    pub workflow: String,
    /// Where it stands.
    pub status: RunStatus,
    /// When it was created (µs since the epoch).
    pub created_at: i64,
    /// When its status last changed (µs since the epoch): for a finished run, when it ended.
    pub updated_at: i64,
    /// The worker executing it, if one is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// When that worker's lease lapses unless renewed (µs since the epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_expires_at: Option<i64>,
    /// The run it was forked from, if it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_run_id: Option<String>,
    /// Who started it, when it was started by someone the server knows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_by: Option<StartedBy>,
    /// The tags it was started with.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// A suspended run: what it waits for, said for a person (`a person at review: Ship it?`,
    /// `a timer at nap until …`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_for: Option<String>,
    /// Its model usage and cost so far, when asked for (`usage=true`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Totals>,
}

/// The definition a run is pinned to.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct RunDefinition {
    /// The run.
    pub run_id: String,
    /// Its definition hash.
    pub hash: String,
    /// Its structure, as `stepwright graph` and the dashboard draw it: the version the run
    /// executes, not necessarily the newest one.
    pub graph: crate::workflow::Outline,
    /// Its model bindings: what a recompute's `models` may name.
    pub models: Vec<ModelBinding>,
}

/// A model binding a definition has.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ModelBinding {
    /// The name steps call it by.
    pub name: String,
    /// The provider's model id it sends.
    pub model: String,
}

/// An artifact a step captured (a model call's input or output, a tool call, ...).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Artifact {
    /// Its content hash.
    pub hash: String,
    /// Its kind (`llm-input`, `llm-output`, `tool-call`, ...).
    pub kind: String,
    /// The step that captured it.
    pub path: String,
    /// Its content.
    pub content: Value,
}

/// A cancel.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CancelRun {
    /// Why (kept in the run's error: `cancelled by ann: too slow`).
    #[serde(default)]
    pub reason: Option<String>,
}

/// What a cancel did.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Cancelled {
    /// The run.
    pub run_id: String,
    /// `cancelled` (nobody executed it), `requested` (the process executing it stops it),
    /// or `finished` (it had ended already; `status` says how).
    pub outcome: CancelOutcome,
    /// Where the run stands.
    pub status: RunStatus,
    /// The worker that executes it and stops it, for `requested`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executed_by: Option<String>,
}

/// A resume.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ResumeRun {
    /// Wait up to this long (at most 60) for it to finish or stop again.
    #[serde(default)]
    #[schemars(range(min = 0, max = 60))]
    pub wait_seconds: Option<f64>,
}

/// A message for a run: to a loop's inbox, or a wake-up of an `every` channel.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunMessage {
    /// The inbox a loop reads (with `message`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inbox: Option<String>,
    /// The message.
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    pub message: Option<Value>,
    /// A wake channel to wake instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake: Option<String>,
}

/// A message's two shapes, for the document: either an inbox and its message, or a
/// channel to wake (the handler says which was meant when a body has parts of both).
#[derive(JsonSchema)]
#[serde(untagged)]
#[allow(dead_code)] // Only its schema is used.
enum RunMessageShape {
    /// A message to a loop's inbox.
    Inbox(InboxMessage),
    /// A wake-up of an `every` channel.
    Wake(WakeChannel),
}

/// A message to a loop's inbox.
#[derive(JsonSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // Only its schema is used.
struct InboxMessage {
    /// The inbox a loop reads.
    inbox: String,
    /// The message (any JSON, `null` too).
    message: Value,
}

/// A wake-up of an `every` channel.
#[derive(JsonSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // Only its schema is used.
struct WakeChannel {
    /// The channel.
    wake: String,
}

/// A field that is there, `null` included (`None`: absent).
fn present<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(deserializer).map(Some)
}

impl JsonSchema for RunMessage {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "RunMessage".into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        RunMessageShape::json_schema(generator)
    }
}

/// What was stored.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Stored {
    /// The run.
    pub run_id: String,
    /// Always true: the answer comes once the message is stored.
    pub stored: bool,
}
