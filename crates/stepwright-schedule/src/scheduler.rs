//! The scheduler: in every `worker` and `serve` process, it finds the schedules with a tick
//! due, decides each tick, and writes the decision — the schedule's new state, the tick
//! records and the runs they start — in one store transaction that only one process can
//! win (see [`ScheduleStore::advance_schedule`]). The runs are created pending; whichever
//! worker claims them executes them.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde_json::{Value, json};
use sha2::Digest;
use stepwright_core::store::event::EventStore;
use stepwright_core::store::schedule::{
    ScheduleAdvance, ScheduleKey, ScheduleRecord, ScheduleStore, TickOutcome, TickRecord,
};
use stepwright_core::{
    Caller, CancelRequest, ContentHash, Engine, EngineError, RunId, RunStatus, StartOptions, StoreError, Timestamp,
    Workflow,
};
use tokio_util::sync::CancellationToken;

use crate::cadence::{CadenceError, Tick, Ticker};
use crate::spec::{Decision, ScheduleSpec, ScheduleState, Waiting, decide};

/// Finds a schedule's workflow definition by name and hash (a worker reads it from the
/// store's definitions).
pub type ScheduleResolver =
    Arc<dyn Fn(String, ContentHash) -> BoxFuture<'static, Result<Workflow, String>> + Send + Sync>;

/// Renders a schedule's input template for a tick (the host's template language); the
/// default takes the input as it is.
pub type InputRenderer = Arc<dyn Fn(&Value, &TickContext) -> Result<Value, String> + Send + Sync>;

/// Renders a trigger's template (an input, a debounce or concurrency key) over what it sees
/// of its events ([`crate::trigger::events_context`]); the default takes it as it is.
pub type EventRenderer = Arc<dyn Fn(&Value, &Value) -> Result<Value, String> + Send + Sync>;

/// Evaluates a trigger's `when` over what it sees of an event; the default refuses every
/// filter (a host without an expression language cannot hold one).
pub type EventFilter = Arc<dyn Fn(&str, &Value) -> Result<bool, String> + Send + Sync>;

/// What an input template sees of the tick: `tick.at` (RFC 3339, UTC), `tick.local` (the
/// reading in the schedule's zone), `tick.schedule`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TickContext {
    /// The schedule.
    pub schedule: ScheduleKey,
    /// The tick's time.
    pub at: Timestamp,
    /// The tick's reading.
    pub local: String,
}

impl TickContext {
    /// The tick as a template sees it.
    pub fn as_value(&self) -> Value {
        json!({ "at": crate::format_instant(self.at), "local": self.local, "schedule": self.schedule.name })
    }
}

/// What went wrong with a schedule.
#[derive(Debug, thiserror::Error)]
pub enum ScheduleError {
    /// Its spec is not usable.
    #[error("schedule {key}: {source}")]
    Cadence {
        /// The schedule.
        key: ScheduleKey,
        /// Why.
        source: CadenceError,
    },
    /// The stored spec or state did not decode (written by a newer version?).
    #[error("schedule {key}: its stored {what} does not decode: {reason}")]
    Corrupt {
        /// The schedule.
        key: ScheduleKey,
        /// `spec` or `state`.
        what: &'static str,
        /// Why.
        reason: String,
    },
    /// Its workflow's definition cannot be found.
    #[error("schedule {key}: workflow {workflow}: {reason}")]
    Unresolved {
        /// The schedule.
        key: ScheduleKey,
        /// The workflow.
        workflow: String,
        /// Why.
        reason: String,
    },
    /// The input template did not render.
    #[error("schedule {key}: its input for the tick at {at}: {reason}")]
    Input {
        /// The schedule.
        key: ScheduleKey,
        /// The tick.
        at: String,
        /// Why.
        reason: String,
    },
    /// The engine refused the run (its input does not fit the workflow's schema, …).
    #[error("schedule {key}: {source}")]
    Engine {
        /// The schedule.
        key: ScheduleKey,
        /// Why.
        source: Box<EngineError>,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// No such schedule.
    #[error("no schedule {0}")]
    NotFound(ScheduleKey),
    /// A trigger that cannot be kept as given, or whose run cannot be made for an event.
    #[error("trigger {key}: {reason}")]
    Trigger {
        /// The trigger.
        key: ScheduleKey,
        /// Why.
        reason: String,
    },
    /// A backfill that cannot be done as asked.
    #[error("backfill of schedule {key}: {reason}")]
    Backfill {
        /// The schedule.
        key: ScheduleKey,
        /// Why.
        reason: String,
    },
}

impl ScheduleError {
    /// Whose fault it is: a bad spec, an unknown schedule or an impossible backfill is the
    /// caller's; the rest ours.
    pub fn fault(&self) -> stepwright_core::Fault {
        match self {
            Self::Cadence { .. }
            | Self::NotFound(_)
            | Self::Backfill { .. }
            | Self::Input { .. }
            | Self::Trigger { .. } => stepwright_core::Fault::Caller,
            Self::Engine { source, .. } => source.fault(),
            Self::Store(error) => error.fault(),
            Self::Corrupt { .. } | Self::Unresolved { .. } => stepwright_core::Fault::Engine,
        }
    }
}

/// What a backfill will do: the ticks it starts, and how many of its range had started a
/// run already.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct BackfillPlan {
    /// The ticks to start, oldest first.
    pub ticks: Vec<Tick>,
    /// Ticks of the range that had started a run already.
    pub already: usize,
}

/// What a backfill did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Backfill {
    /// The runs it started, by tick.
    pub started: Vec<(Timestamp, RunId)>,
    /// Ticks of the range that had started a run already.
    pub already: usize,
}

/// How many ticks one advance decides at most (a long outage's ticks are recorded in
/// transactions of this size).
const TICKS_PER_ADVANCE: usize = 500;

/// How many due schedules one pass takes.
const DUE_PER_PASS: usize = 1_000;

/// How many schedules one pass advances at once.
const ADVANCES_AT_ONCE: usize = 64;

/// How often a schedule with ticks waiting for its last run looks again.
const WAITING_RECHECK: Duration = Duration::from_secs(1);

/// What a pass did, for the host's log and the tests.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PassReport {
    /// Runs started, by schedule.
    pub started: Vec<(ScheduleKey, Timestamp, RunId)>,
    /// Ticks recorded as skipped.
    pub skipped: usize,
    /// Advances another process won (nothing written here).
    pub lost: usize,
    /// Schedules that could not advance, with why (they are tried again at the next poll).
    pub failed: Vec<String>,
}

/// Starts the runs of due schedules.
#[derive(Clone)]
pub struct Scheduler {
    pub(crate) engine: Engine,
    pub(crate) store: Arc<dyn ScheduleStore>,
    workflows: HashMap<(String, ContentHash), Workflow>,
    resolver: Option<ScheduleResolver>,
    render: InputRenderer,
    pub(crate) events: Option<Arc<dyn EventStore>>,
    pub(crate) event_render: EventRenderer,
    pub(crate) event_filter: EventFilter,
    wake: Arc<tokio::sync::Notify>,
    poll: Duration,
    /// Where in the list of due schedules this process starts (from its engine's name).
    offset: u16,
}

impl Scheduler {
    /// A scheduler that starts runs with `engine`, over `store` (the same database as the
    /// engine's store).
    pub fn new(engine: Engine, store: Arc<dyn ScheduleStore>) -> Self {
        Self {
            store,
            workflows: HashMap::new(),
            resolver: None,
            render: Arc::new(|input, _| Ok(input.clone())),
            events: None,
            event_render: Arc::new(|template, _| Ok(template.clone())),
            event_filter: Arc::new(|_, _| Err("this host evaluates no filters".into())),
            wake: Arc::new(tokio::sync::Notify::new()),
            poll: Duration::from_secs(1),
            offset: {
                let digest = sha2::Sha256::digest(engine.worker_id().as_bytes());
                u16::from_le_bytes([digest[0], digest[1]])
            },
            engine,
        }
    }

    /// A workflow whose schedules this scheduler may start.
    #[must_use]
    pub fn register(mut self, workflow: &Workflow) -> Self {
        self.workflows.insert((workflow.name().to_owned(), workflow.hash()), workflow.clone());
        self
    }

    /// Where to find definitions that are not registered.
    #[must_use]
    pub fn resolve_with(mut self, resolver: ScheduleResolver) -> Self {
        self.resolver = Some(resolver);
        self
    }

    /// How inputs are rendered.
    #[must_use]
    pub fn render_with(mut self, render: InputRenderer) -> Self {
        self.render = render;
        self
    }

    /// Where triggers read events (the same database), and how their templates and filters
    /// are evaluated. Without it, a due trigger fails its advance.
    #[must_use]
    pub fn triggers_with(mut self, events: Arc<dyn EventStore>, render: EventRenderer, filter: EventFilter) -> Self {
        self.events = Some(events);
        self.event_render = render;
        self.event_filter = filter;
        self
    }

    /// Passes at once when `wake` is notified (the host stored an event: triggers are
    /// due), not only at the next poll.
    #[must_use]
    pub fn wake_on(mut self, wake: Arc<tokio::sync::Notify>) -> Self {
        self.wake = wake;
        self
    }

    /// How often to look for due schedules at most (default: a second; sooner when the
    /// next tick is sooner).
    #[must_use]
    pub fn poll(mut self, poll: Duration) -> Self {
        self.poll = poll;
        self
    }

    pub(crate) fn now(&self) -> Timestamp {
        self.engine.clock().now()
    }

    /// Creates (or replaces) a schedule of `workflow`: its first tick is the first after
    /// now (a replaced schedule keeps what it decided, so no tick is decided twice).
    pub async fn put(
        &self,
        key: ScheduleKey,
        workflow: &Workflow,
        spec: ScheduleSpec,
        paused: bool,
    ) -> Result<ScheduleRecord, ScheduleError> {
        let ticker = ticker_of(&key, &spec)?;
        let now = self.now();
        let existing = self.store.schedule(&key).await?;
        let mut state = match &existing {
            Some(record) => state_of(record)?,
            None => ScheduleState::default(),
        };
        let through = *state.decided_through.get_or_insert(now);
        let record = ScheduleRecord {
            key: key.clone(),
            workflow: workflow.name().to_owned(),
            definition_hash: workflow.hash(),
            due_at: ticker.next_after(through).map(|tick| spec.fires_at(&key, &tick)),
            spec: serde_json::to_value(&spec).expect("a spec serializes"),
            state: serde_json::to_value(&state).expect("a state serializes"),
            paused,
            version: existing.as_ref().map_or(0, |record| record.version + 1),
            created_at: existing.as_ref().map_or(now, |record| record.created_at),
            updated_at: now,
            on_event: None,
        };
        self.store.put_schedule(record.clone()).await?;
        Ok(record)
    }

    /// A schedule on a clock (a trigger is refused: it has no ticks).
    async fn cadenced(&self, key: &ScheduleKey) -> Result<ScheduleRecord, ScheduleError> {
        match self.store.schedule(key).await? {
            Some(record) if record.on_event.is_some() => Err(ScheduleError::Trigger {
                key: key.clone(),
                reason: "is a trigger: it starts runs on events, not ticks".into(),
            }),
            Some(record) => Ok(record),
            None => Err(ScheduleError::NotFound(key.clone())),
        }
    }

    /// The next `count` ticks of a schedule after now.
    pub async fn next_ticks(&self, key: &ScheduleKey, count: usize) -> Result<Vec<Tick>, ScheduleError> {
        let record = self.cadenced(key).await?;
        let spec = spec_of(&record)?;
        let ticker = ticker_of(key, &spec)?;
        let state = state_of(&record)?;
        let from = state.decided_through.unwrap_or_else(|| self.now()).max(self.now());
        Ok(ticker.between(from, Timestamp::from_micros(i64::MAX), count))
    }

    /// Pauses or resumes a schedule (a paused schedule's ticks are recorded as skipped,
    /// `paused`); whether it changed.
    pub async fn set_paused(&self, key: &ScheduleKey, paused: bool) -> Result<bool, ScheduleError> {
        loop {
            let record = self.store.schedule(key).await?.ok_or_else(|| ScheduleError::NotFound(key.clone()))?;
            if record.paused == paused {
                return Ok(false);
            }
            let advance = ScheduleAdvance {
                key: key.clone(),
                version: record.version,
                state: record.state.clone(),
                paused,
                due_at: record.due_at,
                ticks: Vec::new(),
                fires: Vec::new(),
                read_through: None,
                runs: Vec::new(),
                replace_skipped: false,
                at: self.now(),
            };
            if self.store.advance_schedule(advance).await? {
                return Ok(true);
            }
        }
    }

    /// Starts a run of a schedule now, outside its cadence, recorded as a tick at this
    /// instant (a paused schedule too: asking is explicit). The schedule's state notes the
    /// run, so its overlap policy sees it.
    pub async fn trigger(&self, key: &ScheduleKey) -> Result<(Timestamp, RunId), ScheduleError> {
        loop {
            let record = self.cadenced(key).await?;
            let spec = spec_of(&record)?;
            let mut state = state_of(&record)?;
            let now = self.now();
            let tick =
                Tick { at: now, local: format!("{} (triggered)", crate::format_instant(now)), in_dst_gap: false };
            let run = self.start(&record, &spec, &tick, &mut None).await?;
            let id = run.id;
            state.last_run = Some(id);
            let state = serde_json::to_value(&state).expect("a state serializes");
            let advance = starting_one(&record, state, &tick, run, now, false);
            if self.store.advance_schedule(advance).await? {
                return Ok((now, id));
            }
        }
    }

    /// The plan of a backfill of `(from, to]`: the ticks that started no run (before the
    /// schedule existed, or recorded as skipped: an outage, a pause), oldest first, and how
    /// many of the range started one already. Only ticks the scheduler has passed: `to` may
    /// not be later than its last decided tick.
    pub async fn backfill_plan(
        &self,
        key: &ScheduleKey,
        from: Timestamp,
        to: Timestamp,
    ) -> Result<BackfillPlan, ScheduleError> {
        let record = self.cadenced(key).await?;
        let spec = spec_of(&record)?;
        let ticker = ticker_of(key, &spec)?;
        let through = state_of(&record)?.decided_through.unwrap_or(record.created_at);
        if to > through {
            return Err(ScheduleError::Backfill {
                key: key.clone(),
                reason: format!(
                    "`to` is after the last tick the schedule has decided ({}); later ticks are the scheduler's",
                    crate::format_instant(through)
                ),
            });
        }
        if from >= to {
            return Err(ScheduleError::Backfill { key: key.clone(), reason: "`from` must be before `to`".into() });
        }
        let started_already: std::collections::HashSet<Timestamp> = self
            .store
            .ticks(key, usize::MAX >> 1)
            .await?
            .into_iter()
            .filter(|tick| tick.at > from && tick.at <= to && matches!(tick.outcome, TickOutcome::Started { .. }))
            .map(|tick| tick.at)
            .collect();
        let mut plan = BackfillPlan { ticks: Vec::new(), already: 0 };
        let mut cursor = from;
        while let Some(tick) = ticker.next_after(cursor).filter(|tick| tick.at <= to) {
            cursor = tick.at;
            if tick.in_dst_gap {
                continue;
            }
            if started_already.contains(&tick.at) {
                plan.already += 1;
            } else {
                plan.ticks.push(tick);
            }
        }
        Ok(plan)
    }

    /// Starts a run for each tick of a backfill's plan, oldest first, at most `per_second`
    /// a second; each recorded as its tick (a skipped tick becomes started; a tick started
    /// meanwhile is left as it is), so a second backfill of the range starts nothing. `each`
    /// hears every run started.
    pub async fn backfill(
        &self,
        key: &ScheduleKey,
        plan: BackfillPlan,
        per_second: u32,
        mut each: impl FnMut(&Tick, RunId),
    ) -> Result<Backfill, ScheduleError> {
        let pace = Duration::from_secs(1) / per_second.max(1);
        let mut report = Backfill { started: Vec::new(), already: plan.already };
        let mut workflow = None;
        for tick in plan.ticks {
            loop {
                let current = self.cadenced(key).await?;
                let spec = spec_of(&current)?;
                let run = self.start(&current, &spec, &tick, &mut workflow).await?;
                let id = run.id;
                let advance = starting_one(&current, current.state.clone(), &tick, run, self.now(), true);
                match self.store.advance_schedule(advance).await {
                    Ok(true) => {
                        each(&tick, id);
                        report.started.push((tick.at, id));
                        break;
                    }
                    // The schedule moved on (the scheduler, a pause): read it again.
                    Ok(false) => {}
                    // Started meanwhile (another backfill): nothing to do for this tick.
                    Err(_) if self.tick_started(key, tick.at).await? => {
                        report.already += 1;
                        break;
                    }
                    Err(error) => return Err(error.into()),
                }
            }
            tokio::time::sleep(pace).await;
        }
        Ok(report)
    }

    /// Whether a schedule's tick at `at` started a run.
    async fn tick_started(&self, key: &ScheduleKey, at: Timestamp) -> Result<bool, ScheduleError> {
        let ticks = self.store.ticks(key, usize::MAX >> 1).await?;
        Ok(ticks.iter().any(|tick| tick.at == at && matches!(tick.outcome, TickOutcome::Started { .. })))
    }

    /// Decides every due schedule's ticks, once.
    pub async fn pass(&self) -> Result<PassReport, ScheduleError> {
        use futures_util::StreamExt;
        let now = self.now();
        let mut due = self.store.due_schedules(now, DUE_PER_PASS).await?;
        // Processes that pass at the same moment start at different places in the list, so
        // they mostly advance different schedules instead of racing for the same ones.
        if !due.is_empty() {
            let start = usize::from(self.offset) % due.len();
            due.rotate_left(start);
        }
        // Advances go to the store together (SQLite commits them in one transaction,
        // Postgres on its pool), not one round trip after another.
        let mut advances = futures_util::stream::iter(due)
            .map(|record| async move {
                let key = record.key.clone();
                let mut report = PassReport::default();
                let result = if record.on_event.is_some() {
                    self.advance_trigger(record, now, &mut report).await
                } else {
                    self.advance(record, now, &mut report).await
                };
                (key, result, report)
            })
            .buffer_unordered(ADVANCES_AT_ONCE);
        let mut report = PassReport::default();
        while let Some((key, result, one)) = advances.next().await {
            report.started.extend(one.started);
            report.skipped += one.skipped;
            report.lost += one.lost;
            if let Err(error) = result {
                tracing::warn!(schedule = %key, %error, "a schedule could not advance");
                report.failed.push(error.to_string());
            }
        }
        Ok(report)
    }

    /// Passes until `stop` fires: at every poll, or sooner when a tick is due sooner.
    pub async fn run(&self, stop: CancellationToken) {
        loop {
            if let Err(error) = self.pass().await {
                tracing::warn!(%error, "the scheduler's pass failed; it looks again at the next poll");
            }
            let wait = match self.store.next_due().await {
                Ok(Some(due)) => {
                    let until =
                        Duration::from_micros(due.as_micros().saturating_sub(self.now().as_micros()).max(0) as u64);
                    until.min(self.poll)
                }
                _ => self.poll,
            };
            tokio::select! {
                () = stop.cancelled() => return,
                () = self.wake.notified() => {}
                () = tokio::time::sleep(wait.max(Duration::from_millis(1))) => {}
            }
        }
    }

    pub(crate) async fn workflow(&self, record: &ScheduleRecord) -> Result<Workflow, ScheduleError> {
        if let Some(workflow) = self.workflows.get(&(record.workflow.clone(), record.definition_hash)) {
            return Ok(workflow.clone());
        }
        let unresolved = |reason: String| ScheduleError::Unresolved {
            key: record.key.clone(),
            workflow: record.workflow.clone(),
            reason,
        };
        match &self.resolver {
            Some(resolve) => resolve(record.workflow.clone(), record.definition_hash).await.map_err(unresolved),
            None => Err(unresolved("no registered workflow has its definition".into())),
        }
    }

    /// Whether the schedule's last run still goes, and whether it failed.
    async fn last_run(&self, state: &ScheduleState) -> Result<(bool, bool), ScheduleError> {
        let Some(run) = state.last_run else { return Ok((false, false)) };
        match self.engine.store().load_from(run, u64::MAX).await {
            Ok(loaded) => {
                let status = loaded.record.status;
                Ok((!status.is_terminal(), status == RunStatus::Failed))
            }
            // Erased by retention: it ended long ago.
            Err(StoreError::RunNotFound(_)) => Ok((false, false)),
            Err(error) => Err(error.into()),
        }
    }

    /// Decides one schedule's due ticks and writes the decision.
    async fn advance(
        &self,
        record: ScheduleRecord,
        now: Timestamp,
        report: &mut PassReport,
    ) -> Result<(), ScheduleError> {
        let key = record.key.clone();
        let spec = spec_of(&record)?;
        let ticker = ticker_of(&key, &spec)?;
        let mut state = state_of(&record)?;
        // Whether the last run still goes matters to every overlap policy but `allow_all`,
        // and to `pause_on_failure`.
        let (mut running, failed) = if spec.overlap == crate::spec::Overlap::AllowAll && !spec.pause_on_failure {
            (false, false)
        } else {
            self.last_run(&state).await?
        };
        let mut paused = record.paused;
        if failed && spec.pause_on_failure && !paused && state.last_run.is_some() {
            tracing::info!(schedule = %key, run = ?state.last_run, "a run of the schedule failed: paused");
            paused = true;
        }
        let mut ticks = Vec::new();
        let mut runs = Vec::new();
        let mut cancel = Vec::new();
        let mut workflow = None;
        // A waiting tick starts once the run before it has ended.
        if !running && !paused && !state.waiting.is_empty() {
            let waiting = state.waiting.remove(0);
            let tick = Tick { at: waiting.at, local: waiting.local, in_dst_gap: false };
            match self.start(&record, &spec, &tick, &mut workflow).await {
                Ok(run) => {
                    state.last_run = Some(run.id);
                    running = true;
                    ticks.push(started(&tick, run.id, now));
                    runs.push(run);
                }
                Err(error @ ScheduleError::Store(_)) => return Err(error),
                Err(error) => ticks.push(start_failed(&tick, &error, now)),
            }
        }
        let mut cursor = state.decided_through.unwrap_or(record.created_at);
        let mut next = ticker.next_after(cursor);
        while let Some(tick) = next.take() {
            let fires_at = spec.fires_at(&key, &tick);
            if fires_at > now || ticks.len() >= TICKS_PER_ADVANCE {
                next = Some(tick);
                break;
            }
            cursor = tick.at;
            match decide(&spec, &tick, fires_at, now, paused, running, state.waiting.len()) {
                decision @ (Decision::Start | Decision::StartCancellingOther) => {
                    match self.start(&record, &spec, &tick, &mut workflow).await {
                        Ok(run) => {
                            if decision == Decision::StartCancellingOther {
                                cancel.extend(state.last_run);
                            }
                            state.last_run = Some(run.id);
                            running = true;
                            ticks.push(started(&tick, run.id, now));
                            runs.push(run);
                        }
                        // The store failing is tried again at the next poll; a run that
                        // cannot be made (its definition gone, its input not rendering or
                        // not fitting) is this tick's outcome, recorded with why.
                        Err(error @ ScheduleError::Store(_)) => return Err(error),
                        Err(error) => ticks.push(start_failed(&tick, &error, now)),
                    }
                }
                Decision::Wait => state.waiting.push(Waiting { at: tick.at, local: tick.local.clone() }),
                Decision::Skip(reason) => {
                    ticks.push(TickRecord {
                        at: tick.at,
                        local: tick.local.clone(),
                        outcome: TickOutcome::Skipped { reason: reason.as_str().to_owned() },
                        recorded_at: now,
                    });
                }
            }
            next = ticker.next_after(cursor);
        }
        state.decided_through = Some(cursor);
        let next_fire = next.map(|tick| spec.fires_at(&key, &tick));
        // Ticks waiting for a run are looked at again soon; a tick not yet due, at its time.
        let recheck = (!state.waiting.is_empty()).then(|| now.plus(WAITING_RECHECK));
        let due_at = match (next_fire, recheck) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let skipped = ticks.iter().filter(|t| matches!(t.outcome, TickOutcome::Skipped { .. })).count();
        let starts: Vec<(ScheduleKey, Timestamp, RunId)> = ticks
            .iter()
            .filter_map(|t| match t.outcome {
                TickOutcome::Started { run } => Some((key.clone(), t.at, run)),
                TickOutcome::Skipped { .. } => None,
            })
            .collect();
        let advance = ScheduleAdvance {
            key: key.clone(),
            version: record.version,
            state: serde_json::to_value(&state).expect("a state serializes"),
            paused,
            due_at,
            ticks,
            fires: Vec::new(),
            read_through: None,
            runs,
            replace_skipped: false,
            at: now,
        };
        if !self.store.advance_schedule(advance).await? {
            report.lost += 1;
            return Ok(());
        }
        report.skipped += skipped;
        report.started.extend(starts);
        for run in cancel {
            let request = CancelRequest {
                by: Some(format!("schedule:{}", key.name)),
                reason: "a new tick started (overlap: cancel_other)".into(),
                at: now,
            };
            if let Err(error) = self.engine.store().request_cancel(run, request, now).await {
                tracing::warn!(schedule = %key, %run, %error, "could not ask the previous run to cancel");
            }
        }
        Ok(())
    }

    /// The header of the run a tick starts: pending, its input rendered for the tick, its
    /// caller the schedule (`metadata.schedule`, `metadata.tick`), and an id derived from the
    /// schedule and the tick, so the same tick can never create two runs.
    async fn start(
        &self,
        record: &ScheduleRecord,
        spec: &ScheduleSpec,
        tick: &Tick,
        workflow: &mut Option<Workflow>,
    ) -> Result<stepwright_core::RunRecord, ScheduleError> {
        let workflow = match workflow {
            Some(workflow) => workflow.clone(),
            None => workflow.insert(self.workflow(record).await?).clone(),
        };
        let context = TickContext { schedule: record.key.clone(), at: tick.at, local: tick.local.clone() };
        let input = (self.render)(&spec.input, &context).map_err(|reason| ScheduleError::Input {
            key: record.key.clone(),
            at: tick.local.clone(),
            reason,
        })?;
        let mut caller = Caller {
            tenant: record.key.tenant.clone(),
            user: Some(format!("schedule:{}", record.key.name)),
            ..Caller::default()
        };
        caller.metadata.insert("schedule".into(), Value::String(record.key.name.clone()));
        caller.metadata.insert("tick".into(), Value::String(crate::format_instant(tick.at)));
        let options =
            StartOptions { caller, run_id: Some(tick_run_id(&record.key, tick.at)), ..StartOptions::default() };
        self.engine
            .prepare_run(&workflow, input, options)
            .map_err(|source| ScheduleError::Engine { key: record.key.clone(), source: Box::new(source) })
    }
}

/// The run id of a schedule's tick: time-ordered by the tick, the rest a hash of the
/// schedule and the tick.
pub fn tick_run_id(key: &ScheduleKey, at: Timestamp) -> RunId {
    let digest = sha2::Sha256::digest(format!("stepwright.schedule\u{0}{key}\u{0}{}", at.as_micros()).as_bytes());
    let mut random = [0u8; 10];
    random.copy_from_slice(&digest[..10]);
    RunId::from_parts(Timestamp::from_micros(at.as_micros().max(0)), random)
}

/// An advance that records one started tick and creates its run, leaving the schedule as
/// `record` has it but for `state` (a trigger, a backfill).
fn starting_one(
    record: &ScheduleRecord,
    state: Value,
    tick: &Tick,
    run: stepwright_core::RunRecord,
    now: Timestamp,
    replace_skipped: bool,
) -> ScheduleAdvance {
    ScheduleAdvance {
        key: record.key.clone(),
        version: record.version,
        state,
        paused: record.paused,
        due_at: record.due_at,
        ticks: vec![started(tick, run.id, now)],
        fires: Vec::new(),
        read_through: None,
        runs: vec![run],
        replace_skipped,
        at: now,
    }
}

/// The record of a tick whose run could not be made: `start_failed: why`.
fn start_failed(tick: &Tick, error: &ScheduleError, now: Timestamp) -> TickRecord {
    tracing::warn!(%error, tick = %tick.local, "a tick could not start its run");
    TickRecord {
        at: tick.at,
        local: tick.local.clone(),
        outcome: TickOutcome::Skipped { reason: format!("start_failed: {error}") },
        recorded_at: now,
    }
}

fn started(tick: &Tick, run: RunId, now: Timestamp) -> TickRecord {
    TickRecord { at: tick.at, local: tick.local.clone(), outcome: TickOutcome::Started { run }, recorded_at: now }
}

fn ticker_of(key: &ScheduleKey, spec: &ScheduleSpec) -> Result<Ticker, ScheduleError> {
    spec.cadence.ticker(spec.start, spec.end).map_err(|source| ScheduleError::Cadence { key: key.clone(), source })
}

/// When a stored schedule next starts a run (with its jitter): its first tick after those
/// already decided that fires. `due_at` is not that: a tick of a daylight-saving gap under
/// `gap: skip` is due — to be recorded as skipped — but starts nothing. `None`: no tick
/// fires again (past its `end`), or the record cannot be read.
pub fn next_fire(record: &ScheduleRecord, now: Timestamp) -> Option<Timestamp> {
    let spec = spec_of(record).ok()?;
    let ticker = ticker_of(&record.key, &spec).ok()?;
    let state = state_of(record).ok()?;
    let mut cursor = state.decided_through.unwrap_or(now);
    // A year of gaps is two ticks of a daily cron; a bound, not a real limit.
    for _ in 0..64 {
        let tick = ticker.next_after(cursor)?;
        if !tick.in_dst_gap {
            return Some(spec.fires_at(&record.key, &tick));
        }
        cursor = tick.at;
    }
    None
}

/// A stored schedule's spec.
pub fn spec_of(record: &ScheduleRecord) -> Result<ScheduleSpec, ScheduleError> {
    decode(record, "spec", &record.spec)
}

/// A stored schedule's state.
pub fn state_of(record: &ScheduleRecord) -> Result<ScheduleState, ScheduleError> {
    decode(record, "state", &record.state)
}

/// A record's stored spec or state (`what`), as the type it is for.
pub(crate) fn decode<T: serde::de::DeserializeOwned>(
    record: &ScheduleRecord,
    what: &'static str,
    value: &Value,
) -> Result<T, ScheduleError> {
    serde_json::from_value(value.clone()).map_err(|e| ScheduleError::Corrupt {
        key: record.key.clone(),
        what,
        reason: e.to_string(),
    })
}
