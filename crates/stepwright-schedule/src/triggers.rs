//! The scheduler's side of triggers: keeping one, and advancing it — read the events after
//! its position, decide each (filtered out, held by a debounce, added to a batch, or a run
//! started), start what became due, and write it all in one advance.

use serde_json::Value;
use sha2::Digest;
use stepwright_core::store::event::{EventFire, EventQuery, EventStore, StoredEvent};
use stepwright_core::store::schedule::{ScheduleAdvance, ScheduleKey, ScheduleRecord, TickOutcome};
use stepwright_core::{Caller, RunId, RunRecord, StartOptions, Timestamp, Workflow};

use crate::scheduler::{PassReport, ScheduleError, Scheduler};
use crate::trigger::{Held, TriggerSpec, TriggerState, events_context};

/// How many events one advance of a trigger reads at most (a burst is read in advances of
/// this size, one after another).
const EVENTS_PER_ADVANCE: usize = 500;

/// What one advance decided.
struct Decided<'a> {
    record: &'a ScheduleRecord,
    spec: &'a TriggerSpec,
    now: Timestamp,
    fires: Vec<EventFire>,
    runs: Vec<RunRecord>,
    workflow: Option<Workflow>,
}

impl Decided<'_> {
    fn fire(&mut self, event: u64, outcome: TickOutcome) {
        let trigger = self.record.key.name.clone();
        self.fires.push(EventFire { trigger, event, outcome, recorded_at: self.now });
    }

    fn skip(&mut self, event: u64, reason: impl Into<String>) {
        self.fire(event, TickOutcome::Skipped { reason: reason.into() });
    }
}

/// The run id of a trigger's fire: time-ordered by its first event, the rest a hash of the
/// trigger and the event.
pub fn fire_run_id(key: &ScheduleKey, event: &StoredEvent) -> RunId {
    let digest = sha2::Sha256::digest(format!("stepwright.trigger\u{0}{key}\u{0}{}", event.seq).as_bytes());
    let mut random = [0u8; 10];
    random.copy_from_slice(&digest[..10]);
    RunId::from_parts(event.received_at, random)
}

impl Scheduler {
    fn event_store(&self) -> Result<&dyn EventStore, ScheduleError> {
        self.events.as_deref().ok_or_else(|| {
            ScheduleError::Store(stepwright_core::StoreError::Invalid(
                "this scheduler was given no event store: triggers cannot run".into(),
            ))
        })
    }

    /// Creates (or replaces) a trigger of `workflow`: it reads the events stored from now on
    /// (a replaced trigger keeps its position and what it holds).
    pub async fn put_trigger(
        &self,
        key: ScheduleKey,
        workflow: &Workflow,
        spec: TriggerSpec,
        paused: bool,
    ) -> Result<ScheduleRecord, ScheduleError> {
        spec.check().map_err(|reason| ScheduleError::Trigger { key: key.clone(), reason })?;
        let events = self.event_store()?;
        let now = self.now();
        let existing = self.store.schedule(&key).await?;
        let state = match &existing {
            Some(record) if record.on_event.is_some() => trigger_state_of(record)?,
            _ => {
                let newest =
                    events.event_log(key.tenant.as_deref(), EventQuery { limit: 1, ..Default::default() }).await?;
                TriggerState { read_through: newest.first().map_or(0, |e| e.seq), ..TriggerState::default() }
            }
        };
        let record = ScheduleRecord {
            key: key.clone(),
            workflow: workflow.name().to_owned(),
            definition_hash: workflow.hash(),
            // Looked at once: events may have come while it was being replaced.
            due_at: Some(now),
            on_event: Some(spec.event.clone()),
            spec: serde_json::to_value(&spec).expect("a spec serializes"),
            state: serde_json::to_value(&state).expect("a state serializes"),
            paused,
            version: existing.as_ref().map_or(0, |record| record.version + 1),
            created_at: existing.as_ref().map_or(now, |record| record.created_at),
            updated_at: now,
        };
        self.store.put_schedule(record.clone()).await?;
        Ok(record)
    }

    /// Reads a trigger's new events and writes what they did.
    pub(crate) async fn advance_trigger(
        &self,
        record: ScheduleRecord,
        now: Timestamp,
        report: &mut PassReport,
    ) -> Result<(), ScheduleError> {
        let spec = trigger_spec_of(&record)?;
        let mut state = trigger_state_of(&record)?;
        let events = self
            .event_store()?
            .event_log(
                record.key.tenant.as_deref(),
                EventQuery { after: Some(state.read_through), limit: EVENTS_PER_ADVANCE, ..Default::default() },
            )
            .await?;
        let more = events.len() == EVENTS_PER_ADVANCE;
        let mut decided =
            Decided { record: &record, spec: &spec, now, fires: Vec::new(), runs: Vec::new(), workflow: None };
        for event in events {
            state.read_through = event.seq;
            if !spec.reads(&event.name) {
                continue;
            }
            let context = events_context(std::slice::from_ref(&event));
            if let Some(when) = &spec.when {
                match (self.event_filter)(when, &context) {
                    Ok(true) => {}
                    Ok(false) => {
                        decided.skip(event.seq, "filter_false: its `when` is false for this event");
                        continue;
                    }
                    Err(reason) => {
                        decided.skip(event.seq, format!("filter_failed: {reason}"));
                        continue;
                    }
                }
            }
            if record.paused {
                decided.skip(event.seq, "paused");
                continue;
            }
            if let Some(debounce) = &spec.debounce {
                let group = match self.render_key(debounce.key.as_deref(), &context) {
                    Ok(group) => group,
                    Err(reason) => {
                        decided.skip(event.seq, format!("start_failed: the debounce key: {reason}"));
                        continue;
                    }
                };
                let due = event.received_at.plus(spec.debounce_period().unwrap_or_default());
                if let Some(previous) = state.held.insert(group, Held { event: event.clone(), due }) {
                    decided.skip(previous.event.seq, format!("debounced: event {} came after it", event.seq));
                }
                continue;
            }
            if let Some(batch) = &spec.batch {
                state.batch.push(event);
                if state.batch.len() >= batch.max {
                    let events = std::mem::take(&mut state.batch);
                    self.start_for(&mut decided, &events).await?;
                }
                continue;
            }
            self.start_for(&mut decided, std::slice::from_ref(&event)).await?;
        }
        // What a debounce or a batch held and is now due.
        let quiet: Vec<String> =
            state.held.iter().filter(|(_, held)| held.due <= now).map(|(group, _)| group.clone()).collect();
        // (Paused meanwhile: what it held starts nothing, recorded `paused`.)
        for group in quiet {
            let held = state.held.remove(&group).expect("listed above");
            match record.paused {
                true => decided.skip(held.event.seq, "paused"),
                false => self.start_for(&mut decided, std::slice::from_ref(&held.event)).await?,
            }
        }
        if spec.batch.is_some() && state.next_due(&spec).is_some_and(|due| due <= now) {
            let events = std::mem::take(&mut state.batch);
            match record.paused {
                true => events.iter().for_each(|event| decided.skip(event.seq, "paused")),
                false => self.start_for(&mut decided, &events).await?,
            }
        }
        let due_at = if more { Some(now) } else { state.next_due(&spec) };
        let Decided { fires, runs, .. } = decided;
        let starts: Vec<(ScheduleKey, Timestamp, RunId)> = fires
            .iter()
            .filter_map(|fire| match fire.outcome {
                TickOutcome::Started { run } => Some((record.key.clone(), now, run)),
                TickOutcome::Skipped { .. } => None,
            })
            .collect();
        let skipped = fires.iter().filter(|f| matches!(f.outcome, TickOutcome::Skipped { .. })).count();
        let read_through = state.read_through;
        let advance = ScheduleAdvance {
            key: record.key.clone(),
            version: record.version,
            state: serde_json::to_value(&state).expect("a state serializes"),
            paused: record.paused,
            due_at,
            ticks: Vec::new(),
            fires,
            read_through: Some(read_through),
            runs,
            replace_skipped: false,
            at: now,
        };
        if !self.store.advance_schedule(advance).await? {
            report.lost += 1;
            return Ok(());
        }
        report.skipped += skipped;
        let mut seen = std::collections::HashSet::new();
        report.started.extend(starts.into_iter().filter(|(_, _, run)| seen.insert(*run)));
        Ok(())
    }

    fn render_key(&self, template: Option<&str>, context: &Value) -> Result<String, String> {
        let Some(template) = template else { return Ok(String::new()) };
        match (self.event_render)(&Value::String(template.to_owned()), context)? {
            Value::String(text) => Ok(text),
            other => Ok(other.to_string()),
        }
    }

    /// Starts the run of a fire for `events` (one, or a batch), recording a fire for each:
    /// started, or `start_failed: why` when its run cannot be made.
    async fn start_for(&self, decided: &mut Decided<'_>, events: &[StoredEvent]) -> Result<(), ScheduleError> {
        if events.is_empty() {
            return Ok(());
        }
        match self.trigger_run(decided, events).await {
            Ok(run) => {
                let id = run.id;
                decided.runs.push(run);
                for event in events {
                    decided.fire(event.seq, TickOutcome::Started { run: id });
                }
            }
            Err(error @ ScheduleError::Store(_)) => return Err(error),
            Err(error) => {
                tracing::warn!(%error, "a trigger could not start its run");
                for event in events {
                    decided.skip(event.seq, format!("start_failed: {error}"));
                }
            }
        }
        Ok(())
    }

    /// The header of a fire's run: pending, its input rendered over its events, its caller
    /// the trigger (`metadata.trigger`, `metadata.events`), its concurrency group the
    /// trigger's key, and an id derived from the trigger and its first event.
    async fn trigger_run(&self, decided: &mut Decided<'_>, events: &[StoredEvent]) -> Result<RunRecord, ScheduleError> {
        let (record, spec) = (decided.record, decided.spec);
        let key = &record.key;
        let workflow = match &decided.workflow {
            Some(workflow) => workflow.clone(),
            None => decided.workflow.insert(self.workflow(record).await?).clone(),
        };
        let context = events_context(events);
        let failed = |reason: String| ScheduleError::Trigger { key: key.clone(), reason };
        let input = match &spec.input {
            Some(template) => (self.event_render)(template, &context).map_err(|e| failed(format!("its input: {e}")))?,
            None => spec.default_input(events),
        };
        let concurrency = match &spec.concurrency {
            Some(limit) => {
                let group = self
                    .render_key(limit.key.as_deref(), &context)
                    .map_err(|e| failed(format!("its concurrency key: {e}")))?;
                Some(stepwright_core::journal::Concurrency {
                    key: format!("trigger:{}:{group}", key.name),
                    limit: limit.limit,
                })
            }
            None => None,
        };
        let mut caller =
            Caller { tenant: key.tenant.clone(), user: Some(format!("trigger:{}", key.name)), ..Caller::default() };
        caller.metadata.insert("trigger".into(), Value::String(key.name.clone()));
        caller.metadata.insert("events".into(), Value::Array(events.iter().map(|e| e.seq.into()).collect()));
        let options =
            StartOptions { caller, run_id: Some(fire_run_id(key, &events[0])), concurrency, ..StartOptions::default() };
        self.engine
            .prepare_run(&workflow, input, options)
            .map_err(|source| ScheduleError::Engine { key: key.clone(), source: Box::new(source) })
    }
}

/// A stored trigger's spec.
pub fn trigger_spec_of(record: &ScheduleRecord) -> Result<TriggerSpec, ScheduleError> {
    crate::scheduler::decode(record, "spec", &record.spec)
}

/// A stored trigger's state.
pub fn trigger_state_of(record: &ScheduleRecord) -> Result<TriggerState, ScheduleError> {
    crate::scheduler::decode(record, "state", &record.state)
}
