//! The recording protocol: per-run shared state ([`RunShared`]), the single recording point
//! ([`Recorder`]) and the replay index that serves what a run already recorded.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::config::{ArtifactCapture, Durability, EngineConfig};
use crate::error::{ErrorCode, StepError};
use crate::hash::ContentHash;
use crate::identity::Caller;
use crate::ids::{InterruptId, RunId, StepPath, Timestamp};
use crate::journal::{EventRecord, JournalBatch, JournalEntry, Record};
use crate::outcome::{Decision, InterruptRequest, Resolution};
use crate::runtime::{Clock, Entropy};
use crate::services::{CallInfo, CallKind, Observer, ProvidedLayers, Services};
use crate::store::cache::StepCache;
use crate::store::{Store, StoreError};

mod dispatch;
mod recorded;
mod replay;
pub use dispatch::{TaskPusher, TaskRequest};
pub use recorded::RecordedEffects;
pub(crate) use replay::{RecordedCall, ReplayIndex, ReplayMode};

/// The artifact kind a recompute's sandbox notes for a served write whose input changed:
/// its content is the input the write would get now.
pub(crate) const WOULD_EXECUTE: &str = "would-execute-input";

/// The artifact kind a sandbox notes for a fenced step it served a past run's answer (for
/// the same place and input, see [`RecordedEffects`]): its content is that run's id.
pub(crate) const RECORDED_ANSWER: &str = "recorded-answer-of";

/// Everything a run's steps share. One per execution (start or resume) of a run.
pub(crate) struct RunShared {
    pub(crate) run_id: RunId,
    pub(crate) workflow: Arc<str>,
    pub(crate) version: Arc<str>,
    pub(crate) caller: Caller,
    pub(crate) services: Services,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) entropy: Arc<dyn Entropy>,
    pub(crate) config: Arc<EngineConfig>,
    pub(crate) recorder: Recorder,
    pub(crate) replay: ReplayIndex,
    pub(crate) observer: Option<Arc<dyn Observer>>,
    pub(crate) cache: Arc<dyn StepCache>,
    pub(crate) mailboxes: Arc<Mailboxes>,
    pub(crate) root_layers: ProvidedLayers,
    pub(crate) wake_at: Mutex<Option<Timestamp>>,
    /// Wake inboxes of `every` steps that suspended until their next tick, each with the
    /// last wake-up taken: checked once more after the suspension is written.
    pub(crate) wake_checks: Mutex<Vec<(String, Option<u64>)>>,
    /// Tasks the run suspends on: looked at once more after the suspension is written, so
    /// an answer that came meanwhile is not left waiting for a deadline.
    pub(crate) task_checks: Mutex<Vec<crate::task::TaskId>>,
    /// In a sandbox, the real store: a recompute dispatches its tasks there (see
    /// `StepRecording::dispatch`).
    pub(crate) task_home: Option<Arc<dyn Store>>,
    /// Waits that suspended watching the tenant's event log: registered with the store and
    /// looked at once more after the suspension is written.
    pub(crate) event_watches: Mutex<Vec<EventWatch>>,
    /// When the run was created: a wait takes stored events received since.
    pub(crate) created_at: Timestamp,
    /// By event: the sequence number of the last message a `wait` of this run took from
    /// its inbox (held while a wait reads, so parallel waits take messages in turn).
    pub(crate) event_cursors: tokio::sync::Mutex<std::collections::HashMap<String, Option<u64>>>,
    pub(crate) yielded: AtomicBool,
    /// Steps and sub-step calls this execution served from the journal instead of running
    /// them (reported on the activation's span, which has no child span for them).
    pub(crate) served: (AtomicU64, AtomicU64),
    /// Content on spans for this run (the workflow's setting, else the engine's).
    pub(crate) capture_content: Option<crate::config::ContentCapture>,
}

/// A `wait` on stored events: their name, the last one the run's waits took, and the
/// fields a payload must have.
#[derive(Debug, Clone)]
pub(crate) struct EventWatch {
    pub(crate) name: String,
    pub(crate) after: Option<u64>,
    pub(crate) matching: Option<Value>,
}

/// The store failed: the run stops at once, as a crashed process would, and can be resumed
/// from what was committed.
#[derive(Debug)]
pub(crate) struct StoreFailed(pub(crate) StoreError);

/// The single recording point. Entries are buffered and written to the store in one batch
/// at the next commit, so a step costs one store write (its completion), not one per entry.
pub(crate) struct Recorder {
    store: Arc<dyn Store>,
    run: RunId,
    durability: Durability,
    pending: Mutex<JournalBatch>,
    crashed: AtomicBool,
    fence: Option<u64>,
    /// `async` durability: the longest a deferred entry waits, and the most entries waiting.
    window: Option<(std::time::Duration, usize)>,
    /// Paths of fenced steps: once a step's intent is committed, everything about it is
    /// committed at once, so an effect can never be done twice because its record waited;
    /// and a commit about one is retried through a store outage (see `flush`).
    fenced: Mutex<std::collections::HashSet<StepPath>>,
    /// How long a commit about a fenced step is retried while the store fails (the lease's
    /// length: past it, another worker may hold the run, and the fence refuses the write).
    retry_for: std::time::Duration,
    /// When the oldest deferred entry was buffered.
    oldest: Mutex<Option<tokio::time::Instant>>,
    /// Flushes come from several places (parallel branches, a slow step's start, the
    /// `async` timer): one at a time, so that batches reach the store in order.
    flushing: tokio::sync::Mutex<()>,
    /// How many journal entries of the run the store held when this execution began plus
    /// those this recorder wrote since: a lower bound of the journal's length (others may
    /// have appended decisions), so reading from here misses nothing new.
    written: std::sync::atomic::AtomicU64,
}

impl Recorder {
    pub(crate) fn new(
        store: Arc<dyn Store>,
        run: RunId,
        durability: Durability,
        fence: Option<u64>,
        window: (std::time::Duration, usize),
        already: usize,
        retry_for: std::time::Duration,
    ) -> Self {
        Self {
            store,
            run,
            durability,
            pending: Mutex::new(JournalBatch::default()),
            crashed: AtomicBool::new(false),
            fence,
            window: (durability == Durability::Async).then_some(window),
            fenced: Mutex::new(std::collections::HashSet::new()),
            retry_for,
            oldest: Mutex::new(None),
            flushing: tokio::sync::Mutex::new(()),
            written: std::sync::atomic::AtomicU64::new(already as u64),
        }
    }

    /// A position in the run's journal at or before every entry not yet seen by this
    /// execution (see `written`).
    pub(crate) fn position(&self) -> u64 {
        self.written.load(Ordering::SeqCst)
    }

    /// Whether an entry may wait for the next batch (`async` durability, not a fenced step,
    /// not an intent, interrupt, checkpoint or handoff).
    fn deferrable(&self, path: &StepPath, record: &Record) -> bool {
        self.window.is_some()
            && matches!(
                record,
                Record::Completed { .. }
                    | Record::Failed { .. }
                    | Record::Skipped { .. }
                    | Record::Decided { .. }
                    | Record::Value { .. }
            )
            && !self.fenced.lock().expect("poisoned").contains(path)
    }

    /// `async` durability: writes the buffer if its oldest entry is due or it is full.
    async fn flush_if_due(&self) -> Result<(), StoreFailed> {
        let Some((delay, most)) = self.window else { return self.flush().await };
        let due = {
            let oldest = *self.oldest.lock().expect("poisoned");
            let len = self.pending.lock().expect("poisoned").entries.len();
            len >= most || oldest.is_some_and(|t| t.elapsed() >= delay)
        };
        if due { self.flush().await } else { Ok(()) }
    }

    /// The longest an entry waits in `async` durability.
    pub(crate) fn async_delay(&self) -> Option<std::time::Duration> {
        self.window.map(|(delay, _)| delay)
    }

    /// Buffers an entry; it is written with the next commit. A completion or failure
    /// absorbs its attempt's buffered `Started` entry (keeping the start time).
    pub(crate) fn note(&self, path: &StepPath, at: Timestamp, mut record: Record) {
        if self.window.is_some() {
            self.oldest.lock().expect("poisoned").get_or_insert_with(tokio::time::Instant::now);
        }
        let mut pending = self.pending.lock().expect("poisoned");
        if let Record::Failed { attempt, started_at, .. } = &mut record {
            *started_at = take_started(&mut pending.entries, path, *attempt);
        }
        pending.entries.push(JournalEntry { path: path.clone(), at, record });
    }

    /// Buffers a completion with its output blob and writes everything buffered.
    pub(crate) async fn commit_output(
        &self,
        path: &StepPath,
        at: Timestamp,
        attempt: u32,
        hash: ContentHash,
        value: Arc<Value>,
        cached: bool,
    ) -> Result<(), StoreFailed> {
        {
            let mut pending = self.pending.lock().expect("poisoned");
            pending.blobs.push((hash, value));
            let started_at = take_started(&mut pending.entries, path, attempt);
            let record = Record::Completed { attempt, output: hash, cached, started_at };
            pending.entries.push(JournalEntry { path: path.clone(), at, record });
        }
        if self.window.is_some() {
            self.oldest.lock().expect("poisoned").get_or_insert_with(tokio::time::Instant::now);
            let probe = Record::Completed { attempt, output: hash, cached, started_at: None };
            if self.deferrable(path, &probe) {
                return self.flush_if_due().await;
            }
        }
        self.flush().await
    }

    pub(crate) fn note_blob(&self, hash: ContentHash, value: Arc<Value>) {
        self.pending.lock().expect("poisoned").blobs.push((hash, value));
    }

    pub(crate) fn note_event(&self, event: EventRecord) {
        self.pending.lock().expect("poisoned").events.push(event);
    }

    /// Buffers an entry and writes everything buffered; returns once the store has it (in
    /// `sync` durability).
    pub(crate) async fn commit(&self, path: &StepPath, at: Timestamp, record: Record) -> Result<(), StoreFailed> {
        if matches!(record, Record::Intent { .. }) {
            self.fenced.lock().expect("poisoned").insert(path.clone());
        }
        let deferrable = self.deferrable(path, &record);
        self.note(path, at, record);
        if deferrable { self.flush_if_due().await } else { self.flush().await }
    }

    /// Buffers a fence's intent, to be written with the next commit (the task a step
    /// dispatches): the path is fenced from now on, as by [`Recorder::commit`].
    pub(crate) fn note_intent(&self, path: &StepPath, at: Timestamp, record: Record) {
        self.fenced.lock().expect("poisoned").insert(path.clone());
        self.note(path, at, record);
    }

    /// Writes the buffer now if it still holds `path`'s start of `attempt` (a slow step is
    /// seen running; see `EngineConfig::show_running_after`).
    pub(crate) async fn flush_start(&self, path: &StepPath, attempt: u32) -> Result<(), StoreFailed> {
        let pending = self
            .pending
            .lock()
            .expect("poisoned")
            .entries
            .iter()
            .any(|e| &e.path == path && matches!(e.record, Record::Started { attempt: a } if a == attempt));
        if pending { self.flush().await } else { Ok(()) }
    }

    /// Writes everything buffered.
    pub(crate) async fn flush(&self) -> Result<(), StoreFailed> {
        // One batch at a time, so that batches reach the store in the order they were taken:
        // a step's start written by one flush never lands after its end written by another.
        let _serial = self.flushing.lock().await;
        if self.crashed.load(Ordering::Relaxed) {
            return Err(StoreFailed(StoreError::Backend {
                doing: "appending to the journal".into(),
                source: "an earlier write failed; the run stopped".into(),
            }));
        }
        let mut batch = {
            let mut pending = self.pending.lock().expect("poisoned");
            if pending.is_empty() {
                return Ok(());
            }
            if self.durability == Durability::None {
                *pending = JournalBatch::default();
                return Ok(());
            }
            if self.window.is_some() {
                *self.oldest.lock().expect("poisoned") = None;
            }
            std::mem::take(&mut *pending)
        };
        let entries = batch.entries.len() as u64;
        // A batch about a fenced step (its intent, or what its effect did) is kept until it
        // is known to be stored: through a store outage it is retried, so that an effect
        // that never started is not `outcome_unknown`, nor one that happened forgotten.
        let keep = {
            let fenced = self.fenced.lock().expect("poisoned");
            batch.entries.iter().any(|e| matches!(e.record, Record::Intent { .. }) || fenced.contains(&e.path))
        }
        .then(|| batch.clone());
        let appended = match (self.store.append(self.run, self.fence, &mut batch).await, keep) {
            (Err(error @ StoreError::Backend { .. }), Some(kept)) => self.append_through_outage(kept, error).await,
            (result, _) => result,
        };
        match appended {
            Ok(()) => {
                self.written.fetch_add(entries, Ordering::SeqCst);
                // Hand the drained buffers back so the next step reuses their capacity.
                let mut pending = self.pending.lock().expect("poisoned");
                if pending.is_empty() && batch.is_empty() {
                    *pending = batch;
                }
                Ok(())
            }
            Err(e) => {
                self.crashed.store(true, Ordering::Relaxed);
                Err(StoreFailed(e))
            }
        }
    }

    /// Retries an append that failed with a backend error (a database restarting, a
    /// connection cut) until the store answers or `retry_for` passes. A failed append may
    /// have committed all the same (the answer was lost): before each new try the journal
    /// is read, and a batch found there is done. The fence keeps this safe: once the lease
    /// has passed to another worker, the store refuses the write (`LeaseLost`).
    async fn append_through_outage(&self, kept: JournalBatch, first: StoreError) -> Result<(), StoreError> {
        let deadline = tokio::time::Instant::now() + self.retry_for;
        let mut wait = std::time::Duration::from_millis(50);
        let mut last = first;
        tracing::warn!(run = %self.run, error = %last, "the store failed a commit about a fenced step; retrying while the lease lasts");
        while tokio::time::Instant::now() + wait < deadline {
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(std::time::Duration::from_secs(2));
            let probe = kept.entries.first().cloned();
            match self.store.load_from(self.run, self.written.load(Ordering::SeqCst)).await {
                Ok(loaded) if probe.is_some_and(|probe| loaded.entries.contains(&probe)) => return Ok(()),
                Ok(_) => {}
                Err(error @ StoreError::Backend { .. }) => {
                    last = error;
                    continue;
                }
                Err(error) => return Err(error),
            }
            let mut again = kept.clone();
            match self.store.append(self.run, self.fence, &mut again).await {
                Ok(()) => return Ok(()),
                Err(error @ StoreError::Backend { .. }) => last = error,
                Err(error) => return Err(error),
            }
        }
        Err(last)
    }

    pub(crate) fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }
}

/// Removes the buffered `Started` entry of `path`'s `attempt`, returning its time. It is
/// usually the last entry or close to it, so the search is short.
fn take_started(entries: &mut Vec<JournalEntry>, path: &StepPath, attempt: u32) -> Option<Timestamp> {
    let index = entries
        .iter()
        .rposition(|e| &e.path == path && matches!(e.record, Record::Started { attempt: a } if a == attempt))?;
    Some(entries.remove(index).at)
}

impl RunShared {
    /// Steps and calls served from the journal so far.
    pub(crate) fn served(&self) -> (u64, u64) {
        (self.served.0.load(Ordering::Relaxed), self.served.1.load(Ordering::Relaxed))
    }

    /// Notes a time at which the suspended run must be resumed (the earliest wins).
    pub(crate) fn note_wake_at(&self, at: Timestamp) {
        let mut wake = self.wake_at.lock().expect("poisoned");
        *wake = Some(wake.map_or(at, |w| w.min(at)));
    }

    /// Notes that the run suspends with an `every` whose wake inbox must be looked at once
    /// more after the suspension is written (see `Engine::execute_indexed`).
    pub(crate) fn note_wake_check(&self, inbox: String, after: Option<u64>) {
        self.wake_checks.lock().expect("poisoned").push((inbox, after));
    }

    /// Notes that the run suspends with a `wait` watching the event log (see
    /// `Engine::wake_if_woken_meanwhile`).
    pub(crate) fn note_event_watch(&self, watch: EventWatch) {
        self.event_watches.lock().expect("poisoned").push(watch);
    }

    /// Notes that a step stopped at a checkpoint (`continue`).
    pub(crate) fn note_yielded(&self) {
        self.yielded.store(true, Ordering::Relaxed);
    }

    pub(crate) fn event(&self, path: &StepPath, kind: &str, data: Value) {
        if let Some(observer) = &self.observer {
            observer.event(self.run_id, path, kind, &data);
        }
        self.recorder.note_event(EventRecord {
            run: self.run_id,
            path: path.clone(),
            at: self.clock.now(),
            tenant: self.caller.tenant.clone(),
            user: self.caller.user.clone(),
            kind: kind.to_owned(),
            data,
        });
    }

    /// Notes, in a recompute's sandbox, the input a served write would get now (it is not
    /// executed): an artifact of kind [`WOULD_EXECUTE`], its content kept whatever the
    /// capture mode, for the recompute's report.
    pub(crate) fn would_execute(&self, path: &StepPath, input: &Value) {
        let hash = ContentHash::of_value(input);
        self.recorder.note_blob(hash, Arc::new(input.clone()));
        let record = Record::Artifact { kind: WOULD_EXECUTE.to_owned(), hash, stored: true };
        self.recorder.note(path, self.clock.now(), record);
    }

    /// Journals, in a sandbox, that a fenced step is served the answer `source` recorded
    /// for the same input: its intent with the input's hash, as a real attempt's (what a
    /// recompute over this journal compares a new input with), and an artifact of kind
    /// [`RECORDED_ANSWER`] naming the run.
    pub(crate) async fn served_recorded(
        &self,
        path: &StepPath,
        attempt: u32,
        input: ContentHash,
        source: RunId,
    ) -> Result<(), StoreFailed> {
        let key = crate::ids::idempotency_key(self.run_id, path);
        let intent = Record::Intent { attempt, key, input: Some(input) };
        let from = Value::String(source.to_string());
        let hash = ContentHash::of_value(&from);
        self.recorder.note_blob(hash, Arc::new(from));
        self.recorder.note(
            path,
            self.clock.now(),
            Record::Artifact { kind: RECORDED_ANSWER.to_owned(), hash, stored: true },
        );
        self.recorder.commit(path, self.clock.now(), intent).await
    }

    /// Commits a sub-step's output that was served (from this journal, or a recorded run's
    /// answer) rather than produced: what a sandbox compares.
    pub(crate) async fn commit_served(
        &self,
        path: &StepPath,
        attempt: u32,
        value: &Arc<Value>,
    ) -> Result<(), StoreFailed> {
        let hash = ContentHash::of_value(value);
        self.recorder.commit_output(path, self.clock.now(), attempt, hash, value.clone(), false).await
    }

    pub(crate) fn artifact(&self, path: &StepPath, kind: &str, value: &Value) -> ContentHash {
        let hash = ContentHash::of_value(value);
        let stored = self.config.artifacts == ArtifactCapture::Full;
        if stored {
            self.recorder.note_blob(hash, Arc::new(value.clone()));
        }
        self.recorder.note(path, self.clock.now(), Record::Artifact { kind: kind.to_owned(), hash, stored });
        hash
    }
}

/// In-process notifications: a message (an inbox message or a wake-up) was stored, so
/// steps parked on one look now instead of at their next poll.
#[derive(Default)]
pub(crate) struct Mailboxes {
    pub(crate) notify: Notify,
}

/// The signal `ctx.interrupt()` returns while the answer is not there yet: propagate it
/// with `?`. The engine suspends the step; on resume the step runs again and the same call
/// returns the decision.
pub(crate) fn suspended_signal(id: &InterruptId) -> StepError {
    StepError::new(ErrorCode::SUSPENDED, format!("waiting on interrupt {id}"))
}

/// What one step execution has drawn and opened so far: ordinals, so that a re-execution
/// asks for the same values and interrupts in the same order and is served them.
#[derive(Default)]
struct Local {
    value_seq: u32,
    interrupt_seq: u32,
    pending: Vec<InterruptId>,
    /// The step waits for a step worker's answer.
    waiting: bool,
    interrupt_failure: Option<StepError>,
}

/// One step execution's side of the recording protocol: the journaled values, interrupts and
/// sub-steps that `StepContext`'s helpers delegate to. Each asks the replay index first and
/// records only what it decides anew.
pub(crate) struct StepRecording {
    pub(crate) run: Arc<RunShared>,
    pub(crate) path: StepPath,
    pub(crate) attempt: u32,
    pub(crate) cancel: CancellationToken,
    local: Mutex<Local>,
}

impl StepRecording {
    pub(crate) fn new(run: Arc<RunShared>, path: StepPath, attempt: u32, cancel: CancellationToken) -> Self {
        Self { run, path, attempt, cancel, local: Mutex::new(Local::default()) }
    }

    /// The next interrupt ordinal of this step execution.
    pub(crate) fn next_interrupt_ordinal(&self) -> u32 {
        let mut local = self.local.lock().expect("poisoned");
        local.interrupt_seq += 1;
        local.interrupt_seq - 1
    }

    /// A journaled value (`now`, `uuid`, `random`): the recorded one for this ordinal, else
    /// `draw`n and recorded.
    pub(crate) fn value(&self, draw: impl FnOnce(&RunShared) -> Value) -> Value {
        let run = &self.run;
        let seq = {
            let mut local = self.local.lock().expect("poisoned");
            local.value_seq += 1;
            local.value_seq
        };
        if let Some(value) = run.replay.value(&self.path, self.attempt, seq) {
            return value.clone();
        }
        let value = draw(run);
        run.recorder.note(
            &self.path,
            run.clock.now(),
            Record::Value { attempt: self.attempt, seq, value: value.clone() },
        );
        value
    }

    /// An interrupt: its recorded resolution, else opened (once) and either decided here
    /// (a deadline within the in-process wait, a decision made meanwhile) or suspended.
    pub(crate) async fn interrupt(&self, id: InterruptId, request: InterruptRequest) -> Result<Resolution, StepError> {
        let run = &self.run;
        let now = run.clock.now();
        let deadline = match run.replay.interrupt(&id) {
            Some(log) => {
                if let Some(resolution) = &log.resolution {
                    return Ok(resolution.clone());
                }
                log.deadline
            }
            None => {
                let deadline = request.timeout.map(|t| now.plus(t));
                run.recorder.note(
                    &self.path,
                    now,
                    Record::InterruptOpened { id: id.clone(), request: request.clone(), deadline },
                );
                deadline
            }
        };
        // A deadline that has passed (or is close enough to wait for here) decides now.
        if let Some(deadline) = deadline {
            let wait = deadline.since(now);
            if deadline <= now || wait <= run.config.in_process_wait_limit {
                if !wait.is_zero()
                    && let Some(resolution) = self.wait_for_decision(&id, deadline).await?
                {
                    return Ok(resolution);
                }
                return self.apply_timeout(&id, &request, deadline).await;
            }
        }
        if let Some(deadline) = deadline {
            run.note_wake_at(deadline);
        }
        self.local.lock().expect("poisoned").pending.push(id.clone());
        Err(suspended_signal(&id))
    }

    /// Waits in process for a decision on an interrupt until its deadline. The interrupt is
    /// committed first, so any process can see it and decide; a decision made in this
    /// process is seen at once, one made elsewhere within `decision_poll`. `None`: the
    /// deadline came with no decision.
    async fn wait_for_decision(&self, id: &InterruptId, deadline: Timestamp) -> Result<Option<Resolution>, StepError> {
        let run = &self.run;
        let recorded =
            |e: crate::recording::StoreFailed| StepError::execution_failed(format!("recording an interrupt: {}", e.0));
        run.recorder.flush().await.map_err(recorded)?;
        let from = run.recorder.position();
        let deadline_passed = run.clock.sleep_until(deadline);
        tokio::pin!(deadline_passed);
        loop {
            let decided_here = run.mailboxes.notify.notified();
            tokio::select! {
                () = &mut deadline_passed => return Ok(None),
                () = self.cancel.cancelled() => {
                    return Err(StepError::cancelled("cancelled while waiting on an interrupt"));
                }
                () = decided_here => {}
                () = run.clock.sleep(run.config.decision_poll) => {}
            }
            let loaded = run
                .recorder
                .store()
                .load_from(run.run_id, from)
                .await
                .map_err(|e| StepError::execution_failed(format!("looking for a decision: {e}")))?;
            let decided = loaded.entries.into_iter().find_map(|e| match e.record {
                Record::InterruptResolved { id: done, resolution } if &done == id => Some(resolution),
                _ => None,
            });
            if decided.is_some() {
                return Ok(decided);
            }
        }
    }

    async fn apply_timeout(
        &self,
        id: &InterruptId,
        request: &InterruptRequest,
        deadline: Timestamp,
    ) -> Result<Resolution, StepError> {
        use crate::outcome::TimeoutAction;
        let run = &self.run;
        let decision = match request.on_timeout {
            TimeoutAction::Approve => Decision::Approve,
            TimeoutAction::Reject => Decision::Reject { reason: Some("the deadline passed".into()) },
            TimeoutAction::Fail => {
                let error = StepError::new(
                    ErrorCode::INTERRUPT_TIMEOUT,
                    format!("waiting on interrupt {id}: the deadline passed with no decision"),
                );
                self.local.lock().expect("poisoned").interrupt_failure = Some(error.clone());
                return Err(error);
            }
        };
        let resolution = Resolution { decision, by: None, at: deadline, timed_out: true };
        // Resolution goes through the store's compare-and-set, like a human decision: if a
        // person decided first, theirs stands.
        let entry = crate::journal::JournalEntry {
            path: self.path.clone(),
            at: run.clock.now(),
            record: Record::InterruptResolved { id: id.clone(), resolution: resolution.clone() },
        };
        run.recorder
            .flush()
            .await
            .map_err(|c| StepError::execution_failed(format!("recording a deadline: {}", c.0)))?;
        match run.recorder.store().resolve_interrupt(run.run_id, entry).await {
            Ok(()) => Ok(resolution),
            Err(crate::store::StoreError::AlreadyResolved { .. }) => {
                let loaded = run
                    .recorder
                    .store()
                    .load(run.run_id)
                    .await
                    .map_err(|e| StepError::execution_failed(format!("reloading a resolved interrupt: {e}")))?;
                loaded
                    .entries
                    .iter()
                    .find_map(|e| match &e.record {
                        Record::InterruptResolved { id: done, resolution } if done == id => Some(resolution.clone()),
                        _ => None,
                    })
                    .ok_or_else(|| StepError::execution_failed("an interrupt resolution vanished"))
            }
            Err(e) if run.config.durability == crate::config::Durability::None => {
                let _ = e;
                Ok(resolution)
            }
            Err(e) => Err(StepError::execution_failed(format!("recording a deadline: {e}"))),
        }
    }

    /// A journaled sub-step: its recorded output, else the work done (behind its intent, if
    /// fenced) and its output committed at once.
    /// `identity` says what the call does (an agent's tool call: the tool and its arguments):
    /// a fenced call's intent keeps its hash, with the step's place, and an experiment's fresh
    /// run is served the answer a recorded run's call with the same identity got.
    pub(crate) async fn call<F, Fut>(
        &self,
        name: &str,
        kind: CallKind,
        dispatches: bool,
        identity: Option<&Value>,
        work: F,
    ) -> Result<Arc<Value>, StepError>
    where
        F: FnOnce(CallInfo) -> Fut,
        Fut: std::future::Future<Output = Result<Value, StepError>>,
    {
        use crate::recording::RecordedCall;
        let run = &self.run;
        let attempt = self.attempt;
        let path = self.path.join(name);
        // What the call does is hashed only where it is kept (a fenced call's intent) or looked
        // up (a fresh run): an agent's ordinary tool call pays nothing for it.
        let identity = || identity.map(|call| RecordedEffects::call_identity(&self.path, call));
        let fenced = matches!(kind, CallKind::Action { effect, .. } if effect.is_fenced());
        let crash = |doing: &str, e: crate::recording::StoreFailed| {
            StepError::execution_failed(format!("recording sub-step {path} ({doing}): {}", e.0))
        };
        match run.replay.call(&path, attempt, kind) {
            Some(RecordedCall::Output(value)) => {
                run.served.1.fetch_add(1, Ordering::Relaxed);
                // A sandbox re-execution journals what it served too, for the comparison.
                if run.replay.replaying() {
                    run.commit_served(&path, attempt, &value).await.map_err(|e| crash("its served result", e))?;
                }
                return Ok(value);
            }
            Some(RecordedCall::Unfinished) => {
                if let CallKind::Action { effect, safe_to_retry: false } = kind {
                    return Err(StepError::new(
                        ErrorCode::OUTCOME_UNKNOWN,
                        format!(
                            "{path} was interrupted after it started and is not safe to retry; whether its {} effect happened is unknown",
                            format!("{effect:?}").to_lowercase()
                        ),
                    ));
                }
            }
            None => {}
        }
        if let CallKind::Action { effect, safe_to_retry } = kind
            && run.replay.refuses_anew((effect, safe_to_retry))
        {
            // An experiment's fresh run: a recorded run made the same call; its answer is
            // served, the effect not performed again.
            if let Some(identity) = identity()
                && let Some((source, value)) = run.replay.recorded_call(identity)
            {
                run.served_recorded(&path, attempt, identity, source).await.map_err(|e| crash("its intent", e))?;
                run.commit_served(&path, attempt, &value).await.map_err(|e| crash("its served result", e))?;
                return Ok(value);
            }
            // A sandbox does not perform an effect the original run did not have (an agent's
            // new tool call to a write tool): the failure is journaled, for the report.
            let effect = format!("{effect:?}").to_lowercase();
            let error = StepError::new(
                ErrorCode::NOT_EXECUTED,
                if run.replay.serves_recorded() {
                    format!(
                        "{path} is a {effect} call no recorded run made: an experiment's fresh run does not make it"
                    )
                } else {
                    format!(
                        "{path} is a {effect} call the original run never made: a replay or recompute does not execute it"
                    )
                },
            );
            let failed = Record::Failed { attempt, error: error.clone(), retry_at: None, started_at: None };
            run.recorder.commit(&path, run.clock.now(), failed).await.map_err(|e| crash("its refusal", e))?;
            return Err(error);
        }
        let idempotency_key = fenced.then(|| crate::ids::idempotency_key(run.run_id, &path));
        if let Some(key) = &idempotency_key {
            // The fence: the intent is durable before the effect can happen (for work that
            // hands a task to a step worker, in the task's own commit).
            let intent = Record::Intent { attempt, key: key.clone(), input: identity() };
            if dispatches {
                run.recorder.note_intent(&path, run.clock.now(), intent);
            } else {
                run.recorder.commit(&path, run.clock.now(), intent).await.map_err(|e| crash("its intent", e))?;
            }
        }
        // A cancelled step stops waiting at once: the work is dropped (an HTTP request's
        // connection closes, a child process started with kill-on-drop is killed), whether
        // or not the work watches the token itself.
        let work = work(CallInfo { path: path.clone(), idempotency_key });
        let value = tokio::select! {
            result = work => Arc::new(result?),
            () = self.cancel.cancelled() => {
                return Err(StepError::cancelled(format!("{path} was cancelled while it ran")));
            }
        };
        let hash = ContentHash::of_value(&value);
        run.recorder
            .commit_output(&path, run.clock.now(), attempt, hash, value.clone(), false)
            .await
            .map_err(|e| crash("its result", e))?;
        Ok(value)
    }

    /// Whether the step must suspend (an interrupt without its answer, a task without its
    /// worker's), and the failure an interrupt's timeout decided, if any.
    pub(crate) fn take_pending(&self) -> (bool, Option<StepError>) {
        let mut local = self.local.lock().expect("poisoned");
        let suspends = !local.pending.is_empty() || local.waiting;
        local.pending.clear();
        local.waiting = false;
        (suspends, local.interrupt_failure.take())
    }
}
