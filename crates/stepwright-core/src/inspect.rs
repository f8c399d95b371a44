//! Reading a run, for people and programs: its timeline (a row per step path) and its event
//! stream (the journal as lifecycle events, interleaved with the events its steps emitted,
//! then `run.<status>`), typed and built from what any store returns. Front ends (the
//! command line, an API) render these; they do not derive them from the journal again.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::ids::{RunId, StepPath, Timestamp};
use crate::journal::{EventRecord, LoadedRun, Record};
use crate::services::StepStatus;
use crate::store::{Store, StoreError};

/// What a step did over one interval of its timeline, from the journal's facts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activity {
    /// Executing an attempt.
    Executing,
    /// Waiting for a person: an approval or an input.
    Person,
    /// Waiting for a durable timer.
    Timer,
    /// Waiting for an event (a `wait`'s message, an event interrupt).
    Event,
    /// Waiting for a step worker to claim and answer its task.
    Worker,
    /// Waiting out a retry's delay.
    Retry,
}

impl Activity {
    fn of(kind: crate::outcome::InterruptKind) -> Self {
        match kind {
            crate::outcome::InterruptKind::Approval | crate::outcome::InterruptKind::Input => Self::Person,
            crate::outcome::InterruptKind::Timer => Self::Timer,
            crate::outcome::InterruptKind::Event => Self::Event,
        }
    }
}

/// One interval of a step's timeline: open (`to: None`) while it lasts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    /// What the step did.
    pub activity: Activity,
    /// From when.
    pub from: Timestamp,
    /// Until when; `None` while it goes on.
    pub to: Option<Timestamp>,
}

/// One step path in a run's timeline.
#[derive(Debug, Clone, PartialEq)]
pub struct StepRow {
    /// The step path (`drafts[1]/write`).
    pub path: StepPath,
    /// Where it stands, from its last journal entry.
    pub status: StepStatus,
    /// The highest attempt recorded (0 for paths with no attempts: skipped, waiting).
    pub attempts: u32,
    /// When its first recorded attempt started.
    pub started: Option<Timestamp>,
    /// When it ended, if it has.
    pub ended: Option<Timestamp>,
    /// Its output, once completed.
    pub output: Option<Arc<Value>>,
    /// What it did when, in order: executing, waiting for a person, a timer, an event, a
    /// worker, a retry's delay. Once the run has ended, none is open.
    pub spans: Vec<Span>,
}

impl StepRow {
    /// From its first start to its end, once both are known.
    pub fn duration(&self) -> Option<Duration> {
        Some(self.ended?.since(self.started?))
    }

    /// What it does now, if it goes on (the last span, when open).
    pub fn now_doing(&self) -> Option<Activity> {
        self.spans.last().filter(|span| span.to.is_none()).map(|span| span.activity)
    }

    /// Closes the open span at `at`, then opens one of `activity` — unless the open span
    /// is that activity already (a start written twice stays one interval).
    fn open(&mut self, activity: Activity, at: Timestamp) {
        if self.now_doing() == Some(activity) {
            return;
        }
        self.close(at);
        self.spans.push(Span { activity, from: at, to: None });
    }

    fn close(&mut self, at: Timestamp) {
        if let Some(span) = self.spans.last_mut().filter(|span| span.to.is_none()) {
            span.to = Some(at.max(span.from));
        }
    }
}

/// A run's steps in the order they first appear in its journal, each with its status,
/// attempts, times, output and what it did when. Once the run has ended the timeline is
/// frozen: what was still open (a step cancelled while it waited) ends with the run.
pub fn timeline(loaded: &LoadedRun) -> Vec<StepRow> {
    let mut rows: Vec<StepRow> = Vec::new();
    let mut index: HashMap<&StepPath, usize> = HashMap::new();
    for entry in &loaded.entries {
        // A `wait` that began waiting: its step waits (until its message is taken and the
        // step completes).
        if let Record::Decided { choice: crate::journal::Choice::Due { event: Some(_), .. } } = &entry.record {
            let step = StepPath::new(entry.path.owning_step());
            if let Some(row) = index.get(&step).map(|at| &mut rows[*at])
                && row.status == StepStatus::Running
            {
                row.status = StepStatus::Waiting;
                row.open(Activity::Event, entry.at);
            }
            continue;
        }
        // A step that handed its work to a step worker waits for it.
        if let Record::Dispatched { .. } = &entry.record {
            if let Some(row) = index.get(&entry.path).map(|at| &mut rows[*at])
                && row.status == StepStatus::Running
            {
                row.status = StepStatus::Waiting;
                row.open(Activity::Worker, entry.at);
            }
            continue;
        }
        if let Record::InterruptResolved { .. } = &entry.record {
            if let Some(row) = index.get(&entry.path).map(|at| &mut rows[*at])
                && row.now_doing().is_some_and(|doing| doing != Activity::Executing)
            {
                row.close(entry.at);
            }
            continue;
        }
        let (status, attempt, started, ended) = match &entry.record {
            Record::Started { attempt } => (StepStatus::Running, *attempt, Some(entry.at), None),
            Record::Completed { attempt, started_at, .. } => {
                (StepStatus::Completed, *attempt, *started_at, Some(entry.at))
            }
            Record::Failed { attempt, retry_at: Some(_), started_at, .. } => {
                (StepStatus::Retrying, *attempt, *started_at, None)
            }
            Record::Failed { attempt, started_at, .. } => (StepStatus::Failed, *attempt, *started_at, Some(entry.at)),
            Record::Skipped { .. } => (StepStatus::Skipped, 0, None, Some(entry.at)),
            Record::InterruptOpened { .. } => (StepStatus::Waiting, 0, None, None),
            Record::Cancelled { .. } => (StepStatus::Cancelled, 0, None, Some(entry.at)),
            _ => continue,
        };
        let at = *index.entry(&entry.path).or_insert_with(|| {
            rows.push(StepRow {
                path: entry.path.clone(),
                status,
                attempts: 0,
                started: None,
                ended: None,
                output: None,
                spans: Vec::new(),
            });
            rows.len() - 1
        });
        let row = &mut rows[at];
        row.status = status;
        row.attempts = row.attempts.max(attempt);
        row.started = row.started.or(started);
        row.ended = ended;
        if let Some(started) = started {
            row.open(Activity::Executing, started);
        }
        match &entry.record {
            Record::Completed { output, .. } => row.output = loaded.blobs.get(output).cloned(),
            Record::Failed { retry_at: Some(_), .. } => row.open(Activity::Retry, entry.at),
            Record::InterruptOpened { request, .. } => row.open(Activity::of(request.kind), entry.at),
            _ => {}
        }
        if ended.is_some() {
            row.close(entry.at);
        }
    }
    let record = &loaded.record;
    if record.status.is_terminal() {
        for row in &mut rows {
            if row.ended.is_none() && !matches!(row.status, StepStatus::Completed | StepStatus::Skipped) {
                row.close(record.updated_at);
                row.ended = Some(record.updated_at);
                if record.status == crate::journal::RunStatus::Cancelled {
                    row.status = StepStatus::Cancelled;
                }
            }
        }
    }
    rows
}

/// A reader of a run's event stream that remembers where it is, so each call returns only
/// what is new — on any store, across processes (what `runs events --follow` polls, and
/// what an API streams). Event names come from [`Record::event_name`], never from the
/// storage encoding.
#[derive(Debug, Default, Clone)]
pub struct EventCursor {
    journal_seen: u64,
    events_seen: u64,
    finished: bool,
}

impl EventCursor {
    /// A cursor at the start of the run's stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether the final `run.<status>` event has been returned: nothing more will come.
    pub fn finished(&self) -> bool {
        self.finished
    }

    /// What is new since the last call, in time order.
    pub async fn poll(&mut self, store: &dyn Store, run: RunId) -> Result<Vec<EventRecord>, StoreError> {
        if self.finished {
            return Ok(Vec::new());
        }
        // Only what has not been seen is read. The header and journal are read before the
        // emitted events: a run's status changes only after its last commit, so once the
        // status read here is final, the entries and events read with it are the last.
        let loaded = store.load_from(run, self.journal_seen).await?;
        let emitted = store.events_from(run, self.events_seen).await?;
        // Lifecycle events are the run's own: its tenant, and the user who started it.
        let caller = &loaded.record.caller;
        let lifecycle = |path: &StepPath, at, kind: &str, data: Value| EventRecord {
            run,
            path: path.clone(),
            at,
            tenant: caller.tenant.clone(),
            user: caller.user.clone(),
            kind: kind.to_owned(),
            data,
        };
        // The order is the log's, never the clock's, so that it does not depend on when
        // the stream is read: a reader that polls after every commit and one that reads a
        // finished run at once see the same sequence (an API numbers events by it, and a
        // client resumes by number). Journal entries in position order; before each, the
        // start of the attempt it completes (rank 0) and the events its step emitted since
        // its previous entry (rank 1, in emission order).
        let mut new: Vec<(usize, u8, EventRecord)> = Vec::new();
        for (position, entry) in loaded.entries.iter().enumerate() {
            // Draws of `now`/`uuid`/`random` are replay bookkeeping, not progress.
            let Some(kind) = entry.record.event_name() else { continue };
            let mut data = serde_json::to_value(&entry.record)
                .map_err(|e| StoreError::Backend { doing: "describing a journal entry".into(), source: Box::new(e) })?;
            if let Some(object) = data.as_object_mut() {
                object.remove("type");
                object.remove("started_at");
            }
            match &entry.record {
                Record::Completed { attempt, output, started_at, .. } => {
                    if let Some(started) = started_at {
                        let started_data = json!({ "attempt": attempt });
                        new.push((position, 0, lifecycle(&entry.path, *started, "step.started", started_data)));
                    }
                    data["output"] = loaded.blobs.get(output).map_or(Value::Null, |v| (**v).clone());
                }
                Record::Failed { attempt, started_at: Some(started), .. } => {
                    let started_data = json!({ "attempt": attempt });
                    new.push((position, 0, lifecycle(&entry.path, *started, "step.started", started_data)));
                }
                _ => {}
            }
            let rank = if kind == "step.started" { 0 } else { 2 };
            new.push((position, rank, lifecycle(&entry.path, entry.at, kind, data)));
        }
        // Each path's entries in journal order (so in time order), looked up once per event
        // by binary search rather than by scanning the whole journal.
        let mut by_path: HashMap<&StepPath, Vec<(Timestamp, usize)>> = HashMap::new();
        for (position, entry) in loaded.entries.iter().enumerate() {
            by_path.entry(&entry.path).or_default().push((entry.at, position));
        }
        // A step's events are committed with its next entry. One read here without that
        // entry was made between the two reads above: it waits for the next poll (with all
        // after it, so that emission order holds), unless the run has ended.
        let terminal = loaded.record.status.is_terminal();
        let mut taken = 0;
        for event in emitted {
            let position = by_path
                .get(&event.path)
                .and_then(|entries| entries.get(entries.partition_point(|(at, _)| *at < event.at)))
                .map(|(_, position)| *position);
            match position {
                Some(position) => new.push((position, 1, event)),
                None if terminal => new.push((loaded.entries.len(), 1, event)),
                None => break,
            }
            taken += 1;
        }
        self.journal_seen += loaded.entries.len() as u64;
        self.events_seen += taken;
        // Stable: ties keep emission order.
        new.sort_by_key(|(position, rank, _)| (*position, *rank));
        let mut events: Vec<EventRecord> = new.into_iter().map(|(_, _, event)| event).collect();
        let record = &loaded.record;
        if terminal {
            self.finished = true;
            let data = json!({ "output": record.output, "error": record.error });
            let kind = format!("run.{}", record.status.as_str());
            events.push(lifecycle(&StepPath::root(), record.updated_at, &kind, data));
        }
        Ok(events)
    }
}
