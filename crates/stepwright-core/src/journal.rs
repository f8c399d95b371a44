//! The journal's vocabulary: what a run records (its header, its entries, its events).
//!
//! Every step execution goes through one recording point (`recording`), which turns it into
//! [`JournalEntry`]s keyed by step path. Outputs are stored once, by hash, as blobs. Stores
//! (see [`crate::store`]) only append and load these; they never interpret them.
//!
//! The serde form of these types is the storage encoding. It is not the public event
//! stream: `inspect` maps records to public event names explicitly.

use std::collections::HashMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::StepError;
use crate::hash::ContentHash;
use crate::identity::Caller;
use crate::ids::{InterruptId, RunId, StepPath, Timestamp};
use crate::outcome::{InterruptRequest, Resolution};

/// A run's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
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
    /// The status as stores and the file format spell it (`pending`, `running`, …).
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

    /// Parses [`RunStatus::as_str`]'s spelling.
    pub fn parse(text: &str) -> Option<Self> {
        [Self::Pending, Self::Running, Self::Suspended, Self::Completed, Self::Failed, Self::Cancelled]
            .into_iter()
            .find(|s| s.as_str() == text)
    }

    /// Whether the run has finished for good.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Cancelled)
    }
}

/// Where a forked run came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Lineage {
    /// The parent run.
    pub run: RunId,
    /// The step before which it was forked.
    pub at: StepPath,
}

/// How a run waits its turn among runs waiting to be claimed, enforced by the store for
/// every worker on it: its concurrency group and its priority. Fixed when the run is
/// created.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlowControl {
    /// At most `limit` runs with this key at a time (see [`Concurrency`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<Concurrency>,
    /// Among runs waiting to be claimed, higher goes first (then the oldest); default 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub priority: i32,
}

fn is_zero(n: &i32) -> bool {
    *n == 0
}

/// A concurrency group: at most `limit` runs with the same `key` hold a slot at a time. A
/// run holds its slot while it is running or suspended (on a timer, a person, an event),
/// from the claim that starts it to its end; a pending run — not started yet, or yielded —
/// waits for one, and a claim passes it over while its key is full.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Concurrency {
    /// The group (a workflow's `concurrency.key` evaluated over the run's input: one
    /// customer, one repository).
    pub key: String,
    /// How many of its runs may hold a slot at once (at least 1).
    pub limit: u32,
}

impl FlowControl {
    /// Whether a claim must ask the key's group before starting the run: a pending run
    /// with a concurrency key.
    pub fn needs_slot(&self, status: RunStatus) -> Option<&Concurrency> {
        self.concurrency.as_ref().filter(|_| status == RunStatus::Pending)
    }
}

/// A worker's claim on a run: while it holds (until `expires_at`), no other worker executes
/// the run. `token` grows with every claim; every journal write carries it, and a store
/// refuses a write whose token is not the current one (a fencing token), so a worker that
/// lost its lease cannot write after the new owner started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// The run it leases.
    pub run: RunId,
    /// The worker holding it.
    pub owner: String,
    /// The fencing token.
    pub token: u64,
    /// When it lapses unless renewed.
    pub expires_at: Timestamp,
    /// Whose lease this claim replaced, when it took a running run from another worker (its
    /// lease lapsed, or its process is gone): what the claim says, never stored.
    #[serde(skip)]
    pub took_over_from: Option<String>,
}

impl Lease {
    /// A lease held by `owner`, taken from nobody.
    pub fn new(run: RunId, owner: impl Into<String>, token: u64, expires_at: Timestamp) -> Self {
        Self { run, owner: owner.into(), token, expires_at, took_over_from: None }
    }

    /// The lease as a run's header keeps it (without what the claim said).
    pub fn held(&self) -> Self {
        Self { took_over_from: None, ..self.clone() }
    }
}

/// A workflow's source, kept by definition hash so that any process can rebuild the
/// definition a run is pinned to (workflow files; Rust definitions are registered instead).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DefinitionSource {
    /// The format: `yaml`.
    pub format: String,
    /// Where it came from (a file name), for messages.
    pub name: String,
    /// The file's whole text, compiled again to rebuild the definition.
    pub source: String,
    /// The files it calls (`workflow: parts/x.yaml`), by their path relative to it, when
    /// they came with it rather than from a disk (a workflow registered over HTTP); empty
    /// when the calls are read from beside `name`.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub files: std::collections::BTreeMap<String, String>,
}

impl DefinitionSource {
    /// A YAML source with no name and no called files.
    pub fn default_yaml(source: &str) -> Self {
        Self { format: "yaml".into(), name: String::new(), source: source.to_owned(), files: Default::default() }
    }
}

/// A run's header: everything but its journal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// The run's id.
    pub id: RunId,
    /// The workflow's name.
    pub workflow: String,
    /// The workflow's version.
    pub version: String,
    /// The definition hash the run is pinned to.
    pub definition_hash: ContentHash,
    /// The workflow input.
    pub input: Arc<Value>,
    /// Who started it.
    pub caller: Caller,
    /// Where it stands; only the store changes it, through `set_status`.
    pub status: RunStatus,
    /// Its output, once completed.
    pub output: Option<Value>,
    /// Its error, once failed.
    pub error: Option<StepError>,
    /// Where it was forked from.
    pub parent: Option<Lineage>,
    /// When it was created.
    pub created_at: Timestamp,
    /// When its status last changed.
    pub updated_at: Timestamp,
    /// When a timer, retry or deadline it waits on is due (suspended and pending runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake_at: Option<Timestamp>,
    /// The current lease, if a worker holds or held one that has not been released.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<Lease>,
    /// A cancel someone asked for (kept once the run is cancelled, to say who and why).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancel: Option<CancelRequest>,
    /// Its concurrency group and priority.
    #[serde(default, skip_serializing_if = "is_default_flow")]
    pub flow: FlowControl,
    /// The labels it was started with (`env:prod`, `customer-42`): what a person, a listing
    /// or an experiment's population finds it by. Checked by [`check_tags`]; a fork keeps
    /// its run's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
}

/// How many tags a run may have.
pub const MAX_TAGS: usize = 16;

/// How long a tag may be, in bytes.
pub const MAX_TAG_LEN: usize = 64;

/// Checks a run's tags: at most [`MAX_TAGS`], each 1 to [`MAX_TAG_LEN`] ASCII letters,
/// digits and `_ - . : / =`, no tag twice. The error says which tag and why.
pub fn check_tags(tags: &[String]) -> Result<(), String> {
    if tags.len() > MAX_TAGS {
        return Err(format!("a run has at most {MAX_TAGS} tags; {} were given", tags.len()));
    }
    for (i, tag) in tags.iter().enumerate() {
        check_tag(tag).map_err(|why| format!("tags[{i}]: {why}"))?;
        if tags[..i].contains(tag) {
            return Err(format!("tags[{i}]: {tag:?} is given twice"));
        }
    }
    Ok(())
}

/// Checks one tag (also a listing's `tag` filter): 1 to [`MAX_TAG_LEN`] ASCII letters,
/// digits and `_ - . : / =`.
pub fn check_tag(tag: &str) -> Result<(), String> {
    if tag.is_empty() || tag.len() > MAX_TAG_LEN {
        return Err(format!("a tag is 1 to {MAX_TAG_LEN} characters; {tag:?} has {}", tag.len()));
    }
    match tag.chars().find(|c| !(c.is_ascii_alphanumeric() || "_-.:/=".contains(*c))) {
        Some(c) => Err(format!("{tag:?} has {c:?}: a tag holds ASCII letters, digits and _ - . : / = only")),
        None => Ok(()),
    }
}

fn is_default_flow(flow: &FlowControl) -> bool {
    *flow == FlowControl::default()
}

/// A cancel asked for by someone, stored with the run: the process executing the run sees
/// it and stops, wherever it runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CancelRequest {
    /// Who asked (a user), if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// Why.
    pub reason: String,
    /// When it was asked (the caller's clock).
    pub at: Timestamp,
}

impl CancelRequest {
    /// The error a run cancelled by this request ends with.
    pub fn error(&self) -> StepError {
        StepError::cancelled(match &self.by {
            Some(by) => format!("cancelled by {by}: {}", self.reason),
            None => format!("cancelled: {}", self.reason),
        })
    }
}

/// One journal entry: what happened at a step path, and when.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JournalEntry {
    /// The step execution it belongs to.
    pub path: StepPath,
    /// When it was recorded.
    pub at: Timestamp,
    /// What happened.
    pub record: Record,
}

/// What a journal entry records.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Record {
    /// An attempt started.
    Started {
        /// 1-based attempt number.
        attempt: u32,
    },
    /// A fenced (`write`/`external`) attempt is about to run with this idempotency key.
    Intent {
        /// 1-based attempt number.
        attempt: u32,
        /// The key handed to the step: hash of run id and step path.
        key: String,
        /// The hash of the input the step was given (a step's own intent), or of what a call
        /// within it does (an agent's tool call: its step's place, the tool, its arguments);
        /// none for other calls, and in journals written before it was kept. A recompute
        /// compares a step's: a served write whose input changed would have done something
        /// else; an experiment's fresh run finds recorded answers by it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        input: Option<ContentHash>,
    },
    /// The step (or operator) completed; its output is the blob with this hash.
    Completed {
        /// The attempt that completed.
        attempt: u32,
        /// The output's hash.
        output: ContentHash,
        /// Whether the output came from the step cache.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        cached: bool,
        /// When the attempt started, if its `Started` entry was folded into this one (it is
        /// whenever both are written in the same commit, which saves a row per step).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        started_at: Option<Timestamp>,
    },
    /// An attempt failed; `retry_at` is set when another attempt will follow.
    Failed {
        /// The attempt that failed.
        attempt: u32,
        /// Why, with its stable code.
        error: StepError,
        /// When the next attempt is due, if there is one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        retry_at: Option<Timestamp>,
        /// When the attempt started (see `Completed::started_at`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        started_at: Option<Timestamp>,
    },
    /// The step was skipped; its output is `null`.
    Skipped {
        /// Why.
        reason: String,
    },
    /// What an operator chose, replayed on resume: see [`Choice`].
    Decided {
        /// Stored under `value`, the field's name before choices were typed.
        #[serde(rename = "value")]
        choice: Choice,
    },
    /// A journaled non-deterministic value (`now`, `uuid`, `random`) inside a step.
    Value {
        /// The attempt that drew it.
        attempt: u32,
        /// Its ordinal within the attempt.
        seq: u32,
        /// What was drawn, served again on every later execution of the attempt.
        value: Value,
    },
    /// An interrupt was opened.
    InterruptOpened {
        /// Its stable id.
        id: InterruptId,
        /// What it asks.
        request: InterruptRequest,
        /// When its `on_timeout` applies.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        deadline: Option<Timestamp>,
    },
    /// An interrupt was resolved (exactly once: stores compare-and-set).
    InterruptResolved {
        /// The interrupt resolved.
        id: InterruptId,
        /// Who decided what, and when (or that the deadline did).
        resolution: Resolution,
    },
    /// The step saved a checkpoint and stopped (`continue`).
    Checkpoint {
        /// The attempt that saved it; the step is re-entered with it.
        attempt: u32,
        /// The saved state.
        state: Value,
    },
    /// The step handed off to another graph node.
    Handoff {
        /// The target node.
        target: String,
        /// The input the target node is given.
        payload: Value,
    },
    /// An artifact was captured.
    Artifact {
        /// Its kind (`llm-input`, `tool-call`, ...).
        kind: String,
        /// Its content hash.
        hash: ContentHash,
        /// Whether the content was stored (false in hash-only capture mode).
        stored: bool,
    },
    /// The step was cancelled.
    Cancelled {
        /// Why.
        reason: String,
    },
    /// The step handed a task to a step worker (a `worker:` tool); the store keeps the
    /// task's row from this entry, in the same commit.
    Dispatched {
        /// The attempt that dispatched it.
        attempt: u32,
        /// The task.
        task: crate::task::TaskSpec,
    },
}

impl Record {
    /// The public event this entry stands for in a run's event stream (`runs events`, and
    /// the API's stream): `step.completed`, `interrupt.opened`, and so on; `None` for replay
    /// bookkeeping (`now`/`uuid`/`random` draws). An explicit mapping, so renaming a variant
    /// or its storage encoding never renames a public event.
    pub fn event_name(&self) -> Option<&'static str> {
        Some(match self {
            Self::Started { .. } => "step.started",
            Self::Intent { .. } => "step.intent",
            Self::Completed { .. } => "step.completed",
            Self::Failed { .. } => "step.failed",
            Self::Skipped { .. } => "step.skipped",
            Self::Decided { .. } => "step.decided",
            Self::Value { .. } => return None,
            Self::InterruptOpened { .. } => "interrupt.opened",
            Self::InterruptResolved { .. } => "interrupt.resolved",
            Self::Checkpoint { .. } => "step.checkpoint",
            Self::Handoff { .. } => "step.handoff",
            Self::Artifact { .. } => "step.artifact",
            Self::Cancelled { .. } => "step.cancelled",
            Self::Dispatched { .. } => "step.dispatched",
        })
    }
}

/// What an operator chose at a step path, recorded once and served on every later
/// execution, so a resumed run takes the way it took before.
///
/// The stored form of each variant is its fields alone (`{"arm": 0}`, `{"winner": 1}`):
/// the journal's encoding since the first release. Every variant refuses fields it does not
/// know, so a choice of one shape never decodes as another, and the executor fails a run
/// with `nondeterminism` when it finds a choice of another kind where it expects one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged, deny_unknown_fields)]
#[non_exhaustive]
pub enum Choice {
    /// A branch's arm: its index or `otherwise`; `None` when no arm matched.
    Arm {
        /// The arm taken.
        arm: Option<Arm>,
    },
    /// A dynamic fork's or a map's items, in order: one path each.
    Items {
        /// Each path's input, in path order.
        items: Vec<Value>,
    },
    /// A race's winner: the index of the first path to finish.
    Winner {
        /// The path's index.
        winner: usize,
    },
    /// A loop's verdict after an iteration (the fields of [`Verdict`](crate::Verdict)).
    Verdict {
        /// Whether the loop stops.
        done: bool,
        /// Why.
        reason: String,
    },
    /// When an `every` tick ran, and the wake-up that started it early, if any; or when a
    /// `wait` for `event` times out.
    Due {
        /// When the tick's body started; a wait's deadline.
        at: Timestamp,
        /// The sequence number of the wake-up taken.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        wake: Option<u64>,
        /// The event a `wait` waits for.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        event: Option<String>,
    },
    /// The message a `wait` took: from its event's inbox, with its sequence number there
    /// (later waits on the event take messages after it).
    Event {
        /// The event (the inbox's name).
        event: String,
        /// The message, the wait's output.
        message: Value,
        /// Its sequence number in the inbox (in the event log when `logged`).
        seq: u64,
        /// Taken from the tenant's event log, not the run's inbox: `message` is the
        /// event's payload.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        logged: bool,
    },
    /// The inbox message a loop iteration consumed (`None`: none came within the park
    /// timeout), and the newest message sequence taken.
    Message {
        /// The message the iteration sees as `loop.message`.
        message: Option<Value>,
        /// Its sequence number in the inbox.
        seq: Option<u64>,
    },
    /// A graph's next node after a visit; `None` when no edge was taken (the graph ends).
    Next {
        /// The node's id.
        next: Option<String>,
    },
}

impl Choice {
    /// Whether this choice came from outside the code (a race's winner, an inbox message, a
    /// tick's time): such a choice is served even where a recompute runs the code again,
    /// since running it again could not reproduce it.
    pub fn is_outside_input(&self) -> bool {
        matches!(self, Self::Winner { .. } | Self::Message { .. } | Self::Event { .. } | Self::Due { .. })
    }

    /// The kind's name, for errors.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Arm { .. } => "branch arm",
            Self::Items { .. } => "items",
            Self::Winner { .. } => "race winner",
            Self::Verdict { .. } => "loop verdict",
            Self::Due { .. } => "tick",
            Self::Message { .. } => "inbox message",
            Self::Event { .. } => "event message",
            Self::Next { .. } => "graph edge",
        }
    }
}

/// A branch arm as recorded: its index among the `when` arms, or `otherwise`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Arm {
    /// The index-th `when` arm.
    When(usize),
    /// The `otherwise` arm (stored as the string `"otherwise"`).
    Otherwise(OtherwiseArm),
}

/// The marker stored for a branch's `otherwise` arm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum OtherwiseArm {
    /// `"otherwise"`.
    #[serde(rename = "otherwise")]
    Otherwise,
}

/// An audit event: typed, timestamped, stamped with run, step path, tenant and user.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventRecord {
    /// The run it happened in.
    pub run: RunId,
    /// The step that emitted it.
    pub path: StepPath,
    /// When.
    pub at: Timestamp,
    /// The caller's tenant.
    pub tenant: Option<String>,
    /// The caller's user.
    pub user: Option<String>,
    /// The event's type.
    pub kind: String,
    /// The event's own fields (its shape depends on `kind`).
    pub data: Value,
}

/// What one commit appends: entries, the blobs they reference, and events.
#[derive(Debug, Default, Clone)]
pub struct JournalBatch {
    /// Entries in order.
    pub entries: Vec<JournalEntry>,
    /// Content-addressed values the entries reference (stored once).
    pub blobs: Vec<(ContentHash, Arc<Value>)>,
    /// Audit events.
    pub events: Vec<EventRecord>,
}

impl JournalBatch {
    /// Whether there is nothing to write.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty() && self.blobs.is_empty() && self.events.is_empty()
    }
}

/// A run as loaded for resume: header, journal in order, and the blobs it references.
#[derive(Debug, Clone)]
pub struct LoadedRun {
    /// The run's header as of the load.
    pub record: RunRecord,
    /// The journal, in append order.
    pub entries: Vec<JournalEntry>,
    /// Blobs by hash.
    pub blobs: HashMap<ContentHash, Arc<Value>>,
}

/// An interrupt a run opened and nobody has decided yet, as its journal holds it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OpenInterrupt<'a> {
    /// Its id within the run.
    pub id: &'a InterruptId,
    /// The step that asked.
    pub step: &'a StepPath,
    /// What it asks, and who may decide it.
    pub request: &'a InterruptRequest,
    /// When its `on_timeout` applies.
    pub deadline: Option<Timestamp>,
}

impl LoadedRun {
    /// The interrupts the run opened and nobody has decided, in id order: what its report
    /// lists as pending, the inbox shows and a webhook's stop waits on.
    pub fn open_interrupts(&self) -> Vec<OpenInterrupt<'_>> {
        let mut open: std::collections::BTreeMap<&InterruptId, OpenInterrupt<'_>> = std::collections::BTreeMap::new();
        for entry in &self.entries {
            match &entry.record {
                Record::InterruptOpened { id, request, deadline } => {
                    open.insert(id, OpenInterrupt { id, step: &entry.path, request, deadline: *deadline });
                }
                Record::InterruptResolved { id, .. } => {
                    open.remove(id);
                }
                _ => {}
            }
        }
        open.into_values().collect()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// The public names are the ones the event stream has always had; this pins them.
    #[test]
    fn records_name_their_public_events_explicitly() {
        let id = InterruptId::new("int_1");
        let request = InterruptRequest::approval("ok?");
        let cases = [
            (Record::Started { attempt: 1 }, Some("step.started")),
            (Record::Skipped { reason: "no".into() }, Some("step.skipped")),
            (Record::Decided { choice: Choice::Winner { winner: 0 } }, Some("step.decided")),
            (Record::Value { attempt: 1, seq: 1, value: json!(1) }, None),
            (Record::InterruptOpened { id, request, deadline: None }, Some("interrupt.opened")),
            (Record::Cancelled { reason: "stop".into() }, Some("step.cancelled")),
        ];
        for (record, name) in cases {
            assert_eq!(record.event_name(), name, "{record:?}");
        }
    }

    #[test]
    fn choices_keep_the_stored_shapes_and_refuse_others() {
        let shapes = [
            (json!({ "arm": 1 }), Choice::Arm { arm: Some(Arm::When(1)) }),
            (json!({ "arm": "otherwise" }), Choice::Arm { arm: Some(Arm::Otherwise(OtherwiseArm::Otherwise)) }),
            (json!({ "arm": null }), Choice::Arm { arm: None }),
            (json!({ "items": [1, "a"] }), Choice::Items { items: vec![json!(1), json!("a")] }),
            (json!({ "winner": 2 }), Choice::Winner { winner: 2 }),
            (json!({ "done": true, "reason": "ok" }), Choice::Verdict { done: true, reason: "ok".into() }),
            (json!({ "at": 5 }), Choice::Due { at: Timestamp::from_micros(5), wake: None, event: None }),
            (json!({ "at": 5, "wake": 3 }), Choice::Due { at: Timestamp::from_micros(5), wake: Some(3), event: None }),
            (
                json!({ "at": 5, "event": "paid" }),
                Choice::Due { at: Timestamp::from_micros(5), wake: None, event: Some("paid".into()) },
            ),
            (json!({ "message": "hi", "seq": 4 }), Choice::Message { message: Some(json!("hi")), seq: Some(4) }),
            (
                json!({ "event": "paid", "message": { "amount": 2 }, "seq": 7 }),
                Choice::Event { event: "paid".into(), message: json!({ "amount": 2 }), seq: 7, logged: false },
            ),
            (json!({ "next": "review" }), Choice::Next { next: Some("review".into()) }),
            (json!({ "next": null }), Choice::Next { next: None }),
        ];
        for (stored, choice) in shapes {
            assert_eq!(serde_json::from_value::<Choice>(stored.clone()).unwrap(), choice, "{stored}");
            assert_eq!(serde_json::to_value(&choice).unwrap(), stored);
        }
        for corrupt in
            [json!({ "arm": 1, "extra": true }), json!({ "winner": "x" }), json!({ "arm": "other" }), json!(7)]
        {
            assert!(serde_json::from_value::<Choice>(corrupt.clone()).is_err(), "{corrupt} must not decode");
        }
    }
}
