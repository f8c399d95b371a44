//! The runner loop: claims runs that are ready and executes them.

use std::collections::HashMap;
use std::time::Duration;

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::definition::Workflow;
use crate::engine::{Engine, EngineError, RunReport};
use crate::ids::RunId;
use crate::journal::Lease;

use crate::slots::Slots;

/// Finds the definition of a run that no registered workflow matches (a workflow file kept
/// in the store, for instance). `Err` says why it could not (the source is missing, a
/// server it needs does not start): the run stops with that reason, for the worker's log.
pub type DefinitionResolver = std::sync::Arc<
    dyn Fn(crate::journal::RunRecord) -> futures_util::future::BoxFuture<'static, Result<Workflow, String>>
        + Send
        + Sync,
>;

/// A worker loop over an engine's store. It claims runs that are ready — created to run
/// detached, stopped at a checkpoint, waiting on a timer, retry or deadline that is due, or
/// left running by a worker whose lease expired — and executes each with the registered
/// definition that has the run's name and definition hash. Several runners (in one process
/// or many, on one database) share the work: a claim is a lease, so no run is executed by
/// two of them at once.
pub struct Runner {
    engine: Engine,
    workflows: HashMap<String, Vec<Workflow>>,
    resolver: Option<DefinitionResolver>,
    max_concurrent: usize,
    poll: Duration,
    log: Option<RunnerLog>,
    tenant: Option<String>,
    /// When it last looked for runs left by a dead process on this host.
    orphans_checked: std::sync::Mutex<Option<tokio::time::Instant>>,
    /// The runs its tasks execute now, with their leases' tokens: those still here when it
    /// stops were stopped mid-way, and their leases are handed back.
    in_flight: std::sync::Arc<std::sync::Mutex<HashMap<RunId, u64>>>,
    /// The slots its runs lend while they wait for a step worker.
    slots: std::sync::Arc<Slots>,
}

/// How often a runner looks for runs whose lease a dead process on this host holds (at
/// its start, then this often): a restarted server or worker, or one beside a process that
/// was killed, continues them within about this time, without waiting for their leases to
/// lapse. One read of the running runs' headers.
const ORPHANS_EVERY: Duration = Duration::from_secs(1);

/// Whether an execution stopped because the store failed (a database restarting, a
/// connection cut): the run is whole in the store, and this worker still holds its lease.
fn is_outage(error: &EngineError) -> bool {
    matches!(error, EngineError::Store { source: crate::store::StoreError::Backend { .. }, .. })
}

/// Continues a run whose execution stopped because the store failed, here, as soon as the
/// store answers again — while this worker's lease lasts (no other worker can have it), so
/// the run waits out the outage instead of its lease. Each try resumes from the journal
/// (the stopped activation's lease, in this engine's name, is its to take over).
async fn continue_after_outage(
    engine: &Engine,
    workflow: &Workflow,
    run: RunId,
    first: EngineError,
) -> Result<RunReport, EngineError> {
    let inner = &engine.inner;
    let deadline = inner.clock.now().plus(inner.config.lease_for);
    let mut wait = Duration::from_millis(100);
    tracing::warn!(run = %run, error = %first, "the store failed mid-run; continuing the run here once it answers");
    let mut last = first;
    while inner.clock.now().plus(wait) < deadline {
        inner.clock.sleep(wait).await;
        wait = (wait * 2).min(Duration::from_secs(2));
        match engine.resume(workflow, run).await {
            Err(error) if is_outage(&error) => last = error,
            other => return other,
        }
    }
    Err(last)
}

/// What one run's execution by the runner ended in.
pub type RunOutcome = (RunId, Result<RunReport, EngineError>);

/// What a runner does, as it does it: for a worker's log.
// The variants' fields are named for what they hold and the variant's message says how
// they relate; a doc per field would only repeat its name.
#[allow(missing_docs)]
#[derive(Debug)]
pub enum RunnerEvent<'a> {
    /// It claimed a run and starts executing it.
    Claimed { run: RunId },
    /// It loaded a claimed run and executes it now. `waited`: for a run executed for the
    /// first time, how long it waited between its creation and this claim (the queue's
    /// latency); `None` for a run resumed (a timer, a retry, a decision).
    Executing {
        run: RunId,
        /// How long a new run waited for a worker.
        waited: Option<Duration>,
    },
    /// It took a run over from another worker: one whose lease lapsed while the run was
    /// executing (on any host), or one on this host whose process is gone.
    TookOver {
        run: RunId,
        /// The dead worker's name.
        from: &'a str,
    },
    /// A run's execution ended (completed, failed, suspended, cancelled…).
    Finished {
        run: RunId,
        /// How it ended.
        report: &'a RunReport,
    },
    /// A run's execution stopped with an error (its lease lost, its definition missing, the
    /// store failing): the run stays resumable.
    Stopped {
        run: RunId,
        /// Why.
        error: &'a EngineError,
    },
    /// Looking for due runs failed; the runner tries again at its next poll.
    StoreFailed {
        /// Why.
        error: &'a EngineError,
    },
}

/// Receives a runner's events.
pub type RunnerLog = std::sync::Arc<dyn Fn(RunnerEvent<'_>) + Send + Sync>;

impl Runner {
    /// A runner over `engine` with no workflows registered, polling every second, executing
    /// up to 64 runs at once.
    pub fn new(engine: Engine) -> Self {
        Self {
            engine,
            workflows: HashMap::new(),
            resolver: None,
            max_concurrent: 64,
            poll: Duration::from_secs(1),
            log: None,
            tenant: None,
            orphans_checked: std::sync::Mutex::new(None),
            in_flight: std::sync::Arc::default(),
            slots: std::sync::Arc::default(),
        }
    }

    /// Claims only runs started in `tenant` (a worker dedicated to one tenant).
    #[must_use]
    pub fn only_tenant(mut self, tenant: &str) -> Self {
        self.tenant = Some(tenant.to_owned());
        self
    }

    /// Tells `log` about every claim, finished run, stopped run and store failure.
    #[must_use]
    pub fn log_to(mut self, log: RunnerLog) -> Self {
        self.log = Some(log);
        self
    }

    fn tell(&self, event: RunnerEvent<'_>) {
        if let Some(log) = &self.log {
            log(event);
        }
    }

    /// Registers a definition (several versions of one workflow may be registered).
    #[must_use]
    pub fn register(mut self, workflow: &Workflow) -> Self {
        self.workflows.entry(workflow.name().to_owned()).or_default().push(workflow.clone());
        self
    }

    /// Where to find definitions that are not registered.
    #[must_use]
    pub fn resolve_with(mut self, resolver: DefinitionResolver) -> Self {
        self.resolver = Some(resolver);
        self
    }

    /// How often to look for due runs when idle.
    #[must_use]
    pub fn poll_interval(mut self, every: Duration) -> Self {
        self.poll = every;
        self
    }

    /// How many runs to execute at once.
    #[must_use]
    pub fn max_concurrent(mut self, limit: usize) -> Self {
        self.max_concurrent = limit.max(1);
        self
    }

    /// Free slots with `active` runs executing: those waiting for a step worker lend theirs
    /// (see [`crate::slots`]), up to [`Slots::most_waiting`] of them.
    fn claim_limit(&self, active: usize) -> usize {
        let lent = self.slots.lent().min(active).min(Slots::most_waiting(self.max_concurrent));
        self.max_concurrent.saturating_sub(active - lent)
    }

    /// The fewest free slots worth a claim while runs execute (a quarter of them).
    fn claim_batch(&self) -> usize {
        (self.max_concurrent / 4).max(1)
    }

    async fn claim(&self, limit: usize) -> Result<Vec<Lease>, EngineError> {
        Ok(self.claim_counted(limit).await?.0)
    }

    /// Claims up to `limit` runs; also says how many store queries that took (one, or two
    /// when it was time to look for orphans), for the idle pacing of [`Runner::run`].
    async fn claim_counted(&self, limit: usize) -> Result<(Vec<Lease>, u32), EngineError> {
        if limit == 0 {
            return Ok((Vec::new(), 0));
        }
        let inner = &self.engine.inner;
        let store_failed = |source| EngineError::Store { run: RunId::from_bytes([0; 16]), source };
        let (mut leases, looked) = match self.orphans(limit).await.map_err(store_failed)? {
            Some(orphans) => (orphans, 2),
            None => (Vec::new(), 1),
        };
        // A run claimed here is marked held before any resume here can look (see `claiming`).
        let one_at_a_time = inner.claiming.lock().await;
        let due = inner
            .store
            .claim_due(
                &inner.worker_id,
                inner.clock.now(),
                inner.config.lease_for,
                limit - leases.len(),
                self.tenant.as_deref(),
            )
            .await
            .map_err(store_failed)?;
        leases.extend(due);
        for lease in &leases {
            inner.hold(lease.run);
        }
        drop(one_at_a_time);
        Ok((leases, looked))
    }

    /// Takes over running runs whose lease a process on this host holds that no longer
    /// exists (killed, crashed), when it is time to look (`None` when it is not).
    async fn orphans(&self, limit: usize) -> Result<Option<Vec<Lease>>, crate::store::StoreError> {
        {
            let mut checked = self.orphans_checked.lock().expect("poisoned");
            if checked.is_some_and(|at| at.elapsed() < ORPHANS_EVERY) {
                return Ok(None);
            }
            *checked = Some(tokio::time::Instant::now());
        }
        let inner = &self.engine.inner;
        let filter = crate::store::RunFilter {
            status: Some(crate::journal::RunStatus::Running),
            tenant: self.tenant.clone(),
            limit: Some(limit),
            headers_only: true,
            ..Default::default()
        };
        let mut leases = Vec::new();
        for run in inner.store.list_runs(filter).await? {
            let Some(owner) = run.lease.map(|lease| lease.owner) else { continue };
            if !crate::engine::owner::is_dead_local_process(&owner) {
                continue;
            }
            // Another runner may take it first: then this one leaves it.
            let (now, lease_for) = (inner.clock.now(), inner.config.lease_for);
            if let Ok(lease) = inner.store.take_over(run.id, &owner, &inner.worker_id, now, lease_for).await {
                leases.push(lease);
            }
        }
        Ok(Some(leases))
    }

    fn spawn(&self, set: &mut JoinSet<RunOutcome>, lease: Lease) {
        if let Some(from) = &lease.took_over_from {
            tracing::info!(run = %lease.run, from = from.as_str(), "took over a run from a worker that is gone");
            self.tell(RunnerEvent::TookOver { run: lease.run, from });
        }
        self.tell(RunnerEvent::Claimed { run: lease.run });
        let log = self.log.clone();
        let engine = self.engine.clone();
        let workflows = self.workflows.clone();
        let resolver = self.resolver.clone();
        let in_flight = self.in_flight.clone();
        in_flight.lock().expect("poisoned").insert(lease.run, lease.token);
        set.spawn(self.slots.scope(async move {
            let run = lease.run;
            let releases = super::Releases::new(&engine, run);
            let mut resolved: Option<Workflow> = None;
            let result = async {
                let loaded = engine.inner.store.load(run).await.map_err(EngineError::store(run))?;
                let record = &loaded.record;
                if let Some(log) = &log {
                    let waited = loaded.entries.is_empty().then(|| engine.inner.clock.now().since(record.created_at));
                    log(RunnerEvent::Executing { run, waited });
                }
                let registered = workflows
                    .get(&record.workflow)
                    .and_then(|versions| versions.iter().find(|w| w.hash() == record.definition_hash))
                    .cloned();
                let unresolved =
                    |reason: String| EngineError::Unresolved { run, workflow: record.workflow.clone(), reason };
                let workflow = match (registered, &resolver) {
                    (Some(workflow), _) => workflow,
                    (None, Some(resolve)) => resolve(record.clone()).await.map_err(unresolved)?,
                    (None, None) => {
                        return Err(unresolved("no registered workflow has its definition".into()));
                    }
                };
                if workflow.hash() != record.definition_hash {
                    return Err(EngineError::DefinitionMismatch {
                        run,
                        workflow: record.workflow.clone(),
                        pinned: record.definition_hash,
                        given: workflow.hash(),
                    });
                }
                resolved = Some(workflow.clone());
                engine.execute(&workflow, loaded, lease, super::TraceStart::Continue).await
            }
            .await;
            // Released before a continuation after an outage claims it again.
            drop(releases);
            let result = match (result, resolved) {
                (Err(error), Some(workflow)) if is_outage(&error) => {
                    continue_after_outage(&engine, &workflow, run, error).await
                }
                (result, _) => result,
            };
            in_flight.lock().expect("poisoned").remove(&run);
            if let Some(log) = &log {
                match &result {
                    Ok(report) => log(RunnerEvent::Finished { run, report }),
                    Err(error) => log(RunnerEvent::Stopped { run, error }),
                }
            }
            (run, result)
        }));
    }

    /// Claims every run that is due now (up to the concurrency limit), executes them, and
    /// returns how each ended.
    pub async fn tick(&self) -> Result<Vec<RunOutcome>, EngineError> {
        let mut set = JoinSet::new();
        for lease in self.claim(self.max_concurrent).await? {
            self.spawn(&mut set, lease);
        }
        let mut outcomes = Vec::new();
        while let Some(done) = set.join_next().await {
            outcomes.push(done.map_err(|e| EngineError::Store {
                run: RunId::from_bytes([0; 16]),
                source: crate::store::StoreError::Backend { doing: "executing a run".into(), source: Box::new(e) },
            })?);
        }
        outcomes.sort_by_key(|(run, _)| *run);
        Ok(outcomes)
    }

    /// Runs until `stop` fires: claims due runs whenever there is room, and looks again
    /// every poll interval or as soon as a run finishes. Runs still executing when it stops
    /// are cancelled and stay resumable.
    pub async fn run(&self, stop: CancellationToken) -> Result<(), EngineError> {
        let mut set = JoinSet::new();
        // Whether to look for work now whatever the free slots: at the start, and when the
        // store says there is new work or the poll interval passed.
        let mut look = true;
        // Whether the last claim found fewer due runs than it asked for: then nothing more
        // is due until the store announces work or the poll comes round.
        let mut drained = false;
        // How long to wait for work when idle: the poll interval per store query the last
        // look made, so that an idle runner asks the store at most once per interval.
        let mut idle_wait = self.poll;
        loop {
            let free = self.claim_limit(set.len());
            // Claims come in batches: with most slots busy, a finished run does not send a
            // claim of one to the store; the next claim waits until a quarter of the slots
            // are free (or for new work, or the poll), and takes them all at once.
            if free > 0 && (look || (!drained && (set.is_empty() || free >= self.claim_batch()))) {
                // A store that fails (a database restarting) is asked again at the next
                // poll; the runs executing meanwhile go on.
                match self.claim_counted(free).await {
                    Ok((leases, queries)) => {
                        idle_wait = self.poll * queries.max(1);
                        drained = leases.len() < free;
                        for lease in leases {
                            self.spawn(&mut set, lease);
                        }
                    }
                    Err(error) => {
                        tracing::warn!(error = %error, "looking for due runs failed; trying again at the next poll");
                        self.tell(RunnerEvent::StoreFailed { error: &error });
                    }
                }
            }
            let wait = if set.is_empty() { idle_wait } else { self.poll };
            tokio::select! {
                () = stop.cancelled() => break,
                Some(_) = set.join_next(), if !set.is_empty() => {
                    while set.try_join_next().is_some() {}
                    look = false;
                }
                () = self.engine.inner.store.wait_for_work(wait) => look = true,
                // A run waits for a step worker: its slot may take the next due run.
                () = self.slots.freed() => look = false,
            }
        }
        set.shutdown().await;
        self.hand_back().await;
        Ok(())
    }

    /// Hands back the leases of the runs it stopped mid-way (status `pending`, due now), so
    /// that another worker continues them at once instead of waiting for the leases to
    /// lapse. A run whose lease cannot be handed back (the store is down) is taken over when
    /// its lease lapses, as after a crash.
    async fn hand_back(&self) {
        let stopped: Vec<(RunId, u64)> = self.in_flight.lock().expect("poisoned").drain().collect();
        let inner = &self.engine.inner;
        for (run, token) in stopped {
            let now = inner.clock.now();
            let update = crate::store::StatusUpdate {
                status: crate::journal::RunStatus::Pending,
                output: None,
                error: None,
                at: now,
                wake_at: Some(now),
                fence: Some(token),
            };
            if let Err(error) = inner.store.set_status(run, update).await {
                tracing::warn!(run = %run, error = %error, "could not hand back the lease of a run stopped mid-way");
            }
        }
    }
}
