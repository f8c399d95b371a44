//! The step-worker protocol (DESIGN §17): a worker claims tasks by long poll, renews every
//! lease it holds in one heartbeat, and answers each task under its lease. Request types
//! accept fields they do not know (a newer SDK talks to an older server); answers only add
//! fields.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The protocol versions this server speaks (`Stepwright-Protocol` header).
pub const PROTOCOLS: [u32; 1] = [1];

/// The header a worker names its protocol version in.
pub const PROTOCOL_HEADER: &str = "stepwright-protocol";

/// Who is claiming.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct WorkerInfo {
    /// A stable id for the worker process's life (the SDKs make one).
    pub id: String,
    /// A name for people (a host name, a deployment).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The SDK and its version: `py/0.1.0`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sdk: Option<String>,
}

/// A long-poll claim: up to `max` tasks of `queue` for the handlers the worker offers.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ClaimTasks {
    /// The worker.
    pub worker: WorkerInfo,
    /// The queue.
    pub queue: String,
    /// The handlers it offers: names, and `name@version` for versioned ones.
    pub handlers: Vec<String>,
    /// Its free slots (0: only cancels for the tasks it holds — a control channel).
    #[serde(default = "one", deserialize_with = "crate::whole::required")]
    #[schemars(range(max = 100))]
    pub max: u32,
    /// How long to wait for a task before answering empty, in seconds (at most 60).
    #[serde(default = "thirty", deserialize_with = "crate::whole::required")]
    #[schemars(range(max = 60))]
    pub wait_seconds: u32,
    /// The tasks it is running: the answer lists those to cancel.
    #[serde(default)]
    pub holding: Vec<String>,
}

fn one() -> u32 {
    1
}

fn thirty() -> u32 {
    30
}

/// The run a task belongs to.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct TaskRun {
    /// The run's id.
    pub id: String,
    /// Its workflow.
    pub workflow: String,
}

/// A task as a worker gets it.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Task {
    /// The task's id.
    pub id: String,
    /// The lease: send it with every answer about the task.
    pub lease: u64,
    /// The queue it came from.
    pub queue: String,
    /// The handler to run (`name` or `name@version`).
    pub handler: String,
    /// The handler's input.
    pub input: Value,
    /// The attempt (1-based) of the step.
    pub attempt: u32,
    /// The effect fence's key for a fenced tool: pass it to the system the handler changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    /// The run.
    pub run: TaskRun,
    /// The step's path in the run.
    pub step: String,
    /// How long the lease lasts without a heartbeat, in milliseconds.
    pub lease_ms: u64,
    /// When the lease runs out unless renewed (microseconds since the Unix epoch).
    pub lease_expires: i64,
    /// The last heartbeat's details from an earlier attempt's worker, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
    /// A recompute's task (a what-if over a past run): its answer goes to the recompute, not
    /// to the run. Absent when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub recompute: bool,
}

/// What a claim got.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ClaimedTasks {
    /// Tasks now leased to the worker.
    pub tasks: Vec<Task>,
    /// Tasks it holds whose runs were cancelled: stop them and answer `cancelled`.
    pub cancel: Vec<String>,
    /// How often to heartbeat while holding tasks, in milliseconds.
    pub heartbeat_interval_ms: u64,
}

/// One lease a heartbeat renews.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct HeldTask {
    /// The task.
    pub id: String,
    /// Its lease.
    #[serde(deserialize_with = "crate::whole::required")]
    pub lease: u64,
    /// Progress to keep for a later attempt (a checkpoint).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
}

/// One heartbeat for every task a worker holds.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Heartbeat {
    /// The worker.
    pub worker_id: String,
    /// Its tasks.
    pub tasks: Vec<HeldTask>,
}

/// What a heartbeat says about one task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum BeatState {
    /// Renewed.
    Ok,
    /// Renewed, but the run was cancelled: stop the handler and answer `cancelled`.
    Cancel,
    /// The lease is no longer this worker's: stop the handler and drop its result.
    Lost,
}

/// A heartbeat's answer about one task.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct BeatAnswer {
    /// The task.
    pub id: String,
    /// What to do.
    pub state: BeatState,
    /// When the renewed lease runs out (microseconds since the Unix epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_expires: Option<i64>,
}

/// A heartbeat's answer.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct HeartbeatAnswer {
    /// One per task, in order.
    pub tasks: Vec<BeatAnswer>,
}

/// A handler's output.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct CompleteTask {
    /// The task's lease.
    #[serde(deserialize_with = "crate::whole::required")]
    pub lease: u64,
    /// The output (checked against the tool's `output` schema by the engine).
    pub output: Value,
}

/// A handler's failure.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct TaskError {
    /// A stable lowercase code (`docs/error-codes.md`, or the handler's own).
    #[schemars(regex(pattern = r"^[a-z0-9_.]+$"))]
    pub code: String,
    /// What went wrong.
    pub message: String,
    /// Whether the step's retry policy may try again.
    #[serde(default)]
    pub retryable: bool,
}

/// A handler failed.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct FailTask {
    /// The task's lease.
    #[serde(deserialize_with = "crate::whole::required")]
    pub lease: u64,
    /// Why.
    pub error: TaskError,
}

/// A lease alone: for `cancelled` (the handler stopped on a cancel) and `release` (the
/// handler never started; the task goes back to the queue, not counted as an attempt).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct TaskLeaseBody {
    /// The task's lease.
    #[serde(deserialize_with = "crate::whole::required")]
    pub lease: u64,
}

/// Async completion: the handler hands the work to something that answers later (a job
/// queue, a person, a serverless function), and the worker frees its slot.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct DeferTask {
    /// The task's lease.
    #[serde(deserialize_with = "crate::whole::required")]
    pub lease: u64,
    /// How long the lease lasts from now without heartbeats, in milliseconds (at most 7 days);
    /// whoever holds the task's id and lease answers it (`complete`, `fail`) before then.
    #[serde(deserialize_with = "crate::whole::required")]
    #[schemars(range(min = 1, max = 604_800_000))]
    pub for_ms: u64,
}

/// Many answers in one request (`POST /v1/tasks/answers`): what a busy worker sends instead
/// of one request per task. Each answer is fenced by its own lease and answered on its own.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct TaskAnswers {
    /// The answers (1 to 1000), each about a task the worker holds.
    #[schemars(length(min = 1, max = 1000))]
    pub answers: Vec<TaskAnswerItem>,
}

/// What a handler did with a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TaskOutcome {
    /// It returned `output`.
    Complete,
    /// It failed with `error`.
    Fail,
    /// It stopped on a cancel.
    Cancelled,
    /// It never started: back to the queue, not counted as an attempt.
    Release,
}

/// One answer of [`TaskAnswers`].
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct TaskAnswerItem {
    /// The task.
    pub id: String,
    /// Its lease.
    #[serde(deserialize_with = "crate::whole::required")]
    pub lease: u64,
    /// What the handler did.
    pub outcome: TaskOutcome,
    /// For `complete`: the output (absent is `null`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    /// For `fail`: why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<TaskError>,
}

/// What became of each answer of a [`TaskAnswers`], in order.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct TaskAnswersTaken {
    /// One per answer sent.
    pub answers: Vec<TaskAnswerTaken>,
}

/// What became of one answer: the task's state after it, or why it was refused (the codes of
/// the single-answer endpoints: `lease_lost`, `not_found`, `forbidden`, `bad_request`).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct TaskAnswerTaken {
    /// The task.
    pub id: String,
    /// Its state after the answer, when it was taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<TaskStatus>,
    /// The refusal's code, when it was refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// The refusal, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// Where a task is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    /// Waiting for a worker.
    Pending,
    /// A worker holds it.
    Claimed,
    /// The handler returned an output.
    Completed,
    /// The handler failed.
    Failed,
    /// The worker's lease ran out.
    Lapsed,
    /// Nobody claimed it before its `schedule_to_start`.
    NoWorker,
    /// The handler stopped on a cancel.
    Cancelled,
}

/// The state a task is in after an answer.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct TaskAnswered {
    /// The task.
    pub id: String,
    /// Its state now.
    pub state: TaskStatus,
}

/// Task filters.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskQuery {
    /// Only this queue's.
    #[serde(default)]
    pub queue: Option<String>,
    /// Only in this state.
    #[serde(default)]
    pub state: Option<TaskStatus>,
    /// Only this run's.
    #[serde(default)]
    #[schemars(extend("format" = "uuid"))]
    pub run: Option<String>,
    /// At most this many (default 100, at most 1000).
    #[serde(default)]
    #[schemars(range(min = 1, max = 1000))]
    pub limit: Option<u32>,
}

/// A task as operators see it.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct TaskSummary {
    /// The task's id.
    pub id: String,
    /// Its queue.
    pub queue: String,
    /// Its handler.
    pub handler: String,
    /// Its state.
    pub state: TaskStatus,
    /// The run.
    pub run_id: String,
    /// The step's path.
    pub step: String,
    /// The attempt.
    pub attempt: u32,
    /// The worker that holds (or last held) it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
    /// When it was dispatched (microseconds since the Unix epoch).
    pub created_at: i64,
    /// When it ended, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<i64>,
    /// A recompute's task (a what-if over a past run): its answer goes to the recompute, not
    /// to the run. Absent when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub recompute: bool,
}

/// Tasks, newest first.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct TaskList {
    /// The tasks.
    pub tasks: Vec<TaskSummary>,
}

/// A worker the server has heard from.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct WorkerView {
    /// Its id.
    pub id: String,
    /// Its name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Its SDK.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sdk: Option<String>,
    /// The queue it polls.
    pub queue: String,
    /// The handlers it offers.
    pub handlers: Vec<String>,
    /// When it last claimed or heartbeat (microseconds since the Unix epoch).
    pub last_seen: i64,
    /// Whether a claim of it is parked now.
    pub polling: bool,
}

/// The workers this server heard from in the last ten minutes.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct WorkerList {
    /// The workers.
    pub workers: Vec<WorkerView>,
}

/// A queue as operators see it.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct QueueView {
    /// Its name.
    pub queue: String,
    /// Tasks waiting for a worker.
    pub pending: u64,
    /// Tasks workers hold.
    pub claimed: u64,
    /// Workers polling it now.
    pub pollers: u64,
    /// The handlers workers polling it offer.
    pub handlers: Vec<String>,
}

/// The queues with work or workers.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct QueueList {
    /// The queues.
    pub queues: Vec<QueueView>,
}

/// What a chunk carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ChunkKind {
    /// Streamed text (a model's tokens): live on the run's stream (`?tokens=true`), not
    /// journaled.
    Token,
    /// How far the handler got: a `step.progress` event on the run's stream, journaled.
    Progress,
    /// A line for people: a `step.log` event, journaled.
    Log,
}

/// One item of a chunk.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ChunkItem {
    /// What it is.
    pub kind: ChunkKind,
    /// Its text (tokens, log lines).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Its data (progress: `{done, total}` or anything).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

/// What a running handler streams, in order.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct TaskChunks {
    /// The task's lease.
    #[serde(deserialize_with = "crate::whole::required")]
    pub lease: u64,
    /// The chunk's number for this task (from 0, one more each time): a repeat is dropped.
    #[serde(deserialize_with = "crate::whole::required")]
    pub seq: u64,
    /// Its items.
    #[schemars(length(max = 1000))]
    pub items: Vec<ChunkItem>,
}

/// What a chunk did.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ChunksTaken {
    /// Items taken (0 for a repeated chunk).
    pub accepted: u64,
}
