//! The engine: starts, resumes, resolves and cancels runs.

mod builder;
mod cancel;
mod error;
pub(crate) mod exec;
mod execute;
mod fresh;
mod history;
mod keeper;
pub(crate) mod owner;
mod report;
mod runner;

pub use builder::EngineBuilder;
use cancel::cancelled_event;
pub use error::EngineError;
use execute::TraceStart;
pub use fresh::FreshTrial;
use report::report_from;
pub use report::{AwaitedEvent, PendingInterrupt, RunReport};

pub use history::{
    DecisionChange, ForkPatch, RecomputeOptions, RecomputeReport, RecomputedStep, ReplayReport, StepChange,
    StepComparison, StepFilter, StepReplay, json_diff,
};
pub use runner::{DefinitionResolver, RunOutcome, Runner, RunnerEvent, RunnerLog};

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use serde_json::Value;

use crate::config::EngineConfig;
use crate::definition::Workflow;
use crate::error::{ErrorCode, StepError};
use crate::identity::Caller;
use crate::ids::{InterruptId, RunId};
use crate::journal::{
    CancelRequest, Concurrency, FlowControl, JournalEntry, Lease, LoadedRun, Record, RunRecord, RunStatus,
};
use crate::outcome::{Decision, InterruptKind};
use crate::recording::{Mailboxes, ReplayIndex};
use crate::runtime::{Clock, Entropy};
use crate::services::{Observer, Services};
use crate::store::cache::StepCache;
use crate::store::{StatusUpdate, Store, StoreError};

/// The inbox that carries the wake-ups of an `every` wake channel. Wake-ups are stored like
/// inbox messages, so they reach a run executing in any process and survive a crash; the
/// `@` keeps them apart from the inboxes a workflow names.
pub(crate) fn wake_inbox(channel: &str) -> String {
    format!("@wake/{channel}")
}

/// A run's concurrency key: the workflow's key expression over its input, as text (a
/// string as it is, anything else as JSON).
fn concurrency_key(
    def: &crate::definition::WorkflowDef,
    key: &crate::Expr<Value>,
    input: &Value,
) -> Result<String, EngineError> {
    let invalid = |why: String| EngineError::InvalidInput {
        workflow: def.name.clone(),
        source: StepError::new(ErrorCode::INPUT_VALIDATION, format!("the concurrency key: {why}")),
    };
    match key.eval(&crate::scope::Scope::new(Arc::new(input.clone()))) {
        Ok(Value::String(text)) if !text.is_empty() => Ok(text),
        Ok(Value::Null) => Err(invalid("it is null for this input".into())),
        Ok(Value::String(_)) => Err(invalid("it is empty for this input".into())),
        Ok(other) => Ok(other.to_string()),
        Err(error) => Err(invalid(error.message)),
    }
}

/// Options for starting a run.
#[derive(Debug, Clone, Default)]
pub struct StartOptions {
    /// Who starts it.
    pub caller: Caller,
    /// The run id to use (default: a fresh UUIDv7).
    pub run_id: Option<RunId>,
    /// The run's priority among runs waiting to be claimed, instead of the workflow's.
    pub priority: Option<i32>,
    /// The run's concurrency group, instead of the one the workflow's key gives.
    pub concurrency: Option<crate::journal::Concurrency>,
    /// The trace the run was started in (a caller's W3C `traceparent`): the parent of its
    /// first activation's trace. Kept with the run, so a worker that executes it later
    /// continues that trace.
    pub traceparent: Option<crate::trace::TraceParent>,
    /// The run's tags (checked by [`crate::journal::check_tags`]).
    pub tags: Vec<String>,
}

/// Options for resuming a run.
#[derive(Debug, Clone, Copy, Default)]
pub struct ResumeOptions {
    /// Resume with a definition other than the one the run is pinned to. The journal is
    /// checked against it first: if a recorded step path has no place in the new definition
    /// (a step renamed or removed), the run fails with `nondeterminism` and a diff, and
    /// nothing runs. Reordered steps are not detected.
    pub allow_new_definition: bool,
}

/// The engine: runs workflows against a store. Cheap to clone; share one per process.
#[derive(Clone)]
pub struct Engine {
    inner: Arc<EngineInner>,
}

struct EngineInner {
    worker_id: String,
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    entropy: Arc<dyn Entropy>,
    config: Arc<EngineConfig>,
    services: Services,
    observer: Option<Arc<dyn Observer>>,
    cache: Arc<dyn StepCache>,
    mailboxes: Arc<Mailboxes>,
    /// The runs this engine executes now: their root tokens and leases.
    live: Mutex<HashMap<RunId, keeper::LiveRun>>,
    /// Cancel requests seen for live runs: who asked and why, for the run's final error.
    cancels: Mutex<HashMap<RunId, CancelRequest>>,
    /// The runs an activation of this engine holds the lease of, from the claim (or the
    /// leased create) until the activation ends. A lease in this engine's name on a run
    /// *not* here belongs to an activation that is over — one here that stopped with an
    /// error, or another process that ran under the same name — and may be taken over; one
    /// on a run here belongs to an activation starting or executing, and a second would race
    /// it.
    /// A resume's claim in flight is marked too, so that a second resume of the run here
    /// does not race it.
    held: Mutex<HashMap<RunId, Hold>>,
    /// Claims that may take over a lease in this engine's own name are made one at a time:
    /// the runner's claim of due runs and the marking of what it claimed happen together, so
    /// a resume that found the run leased in this engine's name never sees a run the runner
    /// has just claimed as not held. A resume's first claim, of a run nothing here holds,
    /// does not wait for it (see [`Engine::claim_for_resume`]).
    claiming: tokio::sync::Mutex<()>,
    /// Whether the keeper runs (one task per engine while it has live runs).
    watching: AtomicBool,
    /// A sandbox's (replay, recompute): the store its tasks for step workers go to — the
    /// real one, whose workers claim them. `None` for an engine over its own store.
    task_home: Option<Arc<dyn Store>>,
}

/// What this engine does with a run it marks in [`EngineInner::held`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hold {
    /// A resume here is claiming it (not yet known to hold its lease).
    Claiming,
    /// An activation here holds its lease.
    Holding,
}

impl EngineInner {
    /// An activation of `run` here holds its lease now.
    fn hold(&self, run: RunId) {
        self.held.lock().expect("poisoned").insert(run, Hold::Holding);
    }

    /// The activation of `run` here ended (however: a lease it may still hold in the store
    /// is then a resume's to take over).
    fn release(&self, run: RunId) {
        self.held.lock().expect("poisoned").remove(&run);
    }

    /// Whether an activation of `run` here holds its lease, or a resume here is claiming it.
    fn holds(&self, run: RunId) -> bool {
        self.held.lock().expect("poisoned").contains_key(&run)
    }

    /// Marks `run` as being claimed by a resume here, unless something here holds or claims
    /// it already (then `false`).
    fn mark_claiming(&self, run: RunId) -> bool {
        match self.held.lock().expect("poisoned").entry(run) {
            std::collections::hash_map::Entry::Occupied(_) => false,
            std::collections::hash_map::Entry::Vacant(vacant) => {
                vacant.insert(Hold::Claiming);
                true
            }
        }
    }

    /// Drops a resume's mark on `run` — unless the runner claimed it meanwhile and holds it.
    fn unmark_claiming(&self, run: RunId) {
        let mut held = self.held.lock().expect("poisoned");
        if held.get(&run) == Some(&Hold::Claiming) {
            held.remove(&run);
        }
    }
}

/// Releases a held run when its activation ends — returned, failed, or its future dropped
/// (a task aborted at shutdown).
pub(super) struct Releases {
    engine: Engine,
    run: RunId,
}

impl Releases {
    pub(super) fn new(engine: &Engine, run: RunId) -> Self {
        Self { engine: engine.clone(), run }
    }
}

impl Drop for Releases {
    fn drop(&mut self) {
        self.engine.inner.release(self.run);
    }
}

impl Default for Engine {
    fn default() -> Self {
        Self::builder().build()
    }
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine").field("config", &self.inner.config).finish_non_exhaustive()
    }
}

impl Engine {
    /// Starts building an engine.
    pub fn builder() -> EngineBuilder {
        EngineBuilder {
            store: None,
            clock: None,
            entropy: None,
            config: EngineConfig::default(),
            services: Services::default(),
            observer: None,
            cache: None,
            worker_id: None,
        }
    }

    /// The name this engine claims runs under.
    pub fn worker_id(&self) -> &str {
        &self.inner.worker_id
    }

    /// The store this engine journals to.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.inner.store
    }

    /// The clock this engine reads (injected: paused in tests).
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.inner.clock
    }

    /// A new id as a run's is made (a UUIDv7 of this engine's clock and entropy): for what
    /// lives beside runs, such as experiments.
    #[must_use]
    pub fn new_id(&self) -> RunId {
        RunId::from_parts(self.inner.clock.now(), self.inner.entropy.bytes10())
    }

    /// Starts a run and executes it until it completes, fails or suspends.
    pub async fn start(&self, workflow: &Workflow, input: Value) -> Result<RunReport, EngineError> {
        self.start_with(workflow, input, StartOptions::default()).await
    }

    /// [`Engine::start`] with a caller identity or a chosen run id.
    pub async fn start_with(
        &self,
        workflow: &Workflow,
        input: Value,
        options: StartOptions,
    ) -> Result<RunReport, EngineError> {
        let traceparent = options.traceparent.clone();
        let (record, lease) = self.create_inner(workflow, input, options, true).await?;
        let (record, lease) = match lease {
            Some(lease) => {
                self.inner.hold(record.id);
                (record, lease)
            }
            // In a concurrency group: it waits its turn, then executes here.
            None => {
                let lease = self.claim_in_turn(record.id).await?;
                self.inner.hold(record.id);
                // The claim started it: what the store now has, without reading it back.
                let record = RunRecord { status: RunStatus::Running, lease: Some(lease.clone()), ..record };
                (record, lease)
            }
        };
        let _releases = Releases::new(self, record.id);
        let loaded = LoadedRun { record, entries: Vec::new(), blobs: HashMap::new() };
        self.execute(workflow, loaded, lease, TraceStart::Fresh(traceparent)).await
    }

    /// Claims a pending run of a concurrency group as soon as its group has room (looking
    /// a few times a second), in competition with every runner on the store.
    async fn claim_in_turn(&self, run: RunId) -> Result<Lease, EngineError> {
        const LOOK_EVERY: std::time::Duration = std::time::Duration::from_millis(200);
        let inner = &self.inner;
        loop {
            match inner.store.claim(run, &inner.worker_id, inner.clock.now(), inner.config.lease_for).await {
                Err(StoreError::Queued { .. }) => inner.clock.sleep(LOOK_EVERY).await,
                other => return other.map_err(EngineError::store(run)),
            }
        }
    }

    /// Creates a run without executing it (status `pending`); `resume` executes it.
    pub async fn create(
        &self,
        workflow: &Workflow,
        input: Value,
        options: StartOptions,
    ) -> Result<RunRecord, EngineError> {
        Ok(self.create_inner(workflow, input, options, false).await?.0)
    }

    /// Checks an input against the workflow's input schema, as creating a run does: a host
    /// that must refuse bad input before it does anything else (claims an idempotency key)
    /// asks first.
    pub fn check_input(workflow: &Workflow, input: &Value) -> Result<(), EngineError> {
        let def = &workflow.inner;
        if let Some(schema) = &def.input_schema {
            schema
                .check(input, ErrorCode::INPUT_VALIDATION, "the workflow input")
                .map_err(|source| EngineError::InvalidInput { workflow: def.name.clone(), source })?;
        }
        Ok(())
    }

    /// The header of a new pending run of `workflow` — checked as [`Engine::create`] checks
    /// it — without writing it: for a host that writes it together with something else (a
    /// schedule's tick and the run it starts, in one transaction).
    pub fn prepare_run(
        &self,
        workflow: &Workflow,
        input: Value,
        options: StartOptions,
    ) -> Result<RunRecord, EngineError> {
        self.new_record(workflow, input, options, false)
    }

    async fn create_inner(
        &self,
        workflow: &Workflow,
        input: Value,
        options: StartOptions,
        leased: bool,
    ) -> Result<(RunRecord, Option<Lease>), EngineError> {
        let traceparent = options.traceparent.clone();
        let record = self.new_record(workflow, input, options, leased)?;
        let (id, now, leased) = (record.id, record.created_at, record.lease.is_some());
        self.inner.store.create_run(record.clone()).await.map_err(EngineError::store(id))?;
        if let Some(traceparent) = traceparent.as_ref().filter(|_| !leased) {
            // Whoever executes the run later continues the caller's trace.
            let mut batch = crate::journal::JournalBatch::default();
            batch.events.push(crate::journal::EventRecord {
                run: id,
                path: crate::ids::StepPath::root(),
                at: now,
                tenant: record.caller.tenant.clone(),
                user: record.caller.user.clone(),
                kind: crate::trace::PARENT_EVENT.to_owned(),
                data: serde_json::json!({ "traceparent": traceparent.as_str() }),
            });
            self.inner.store.append(id, None, &mut batch).await.map_err(EngineError::store(id))?;
        }
        let lease = record.lease.clone();
        Ok((record, lease))
    }

    /// A new run's header, checked (input, concurrency group).
    fn new_record(
        &self,
        workflow: &Workflow,
        input: Value,
        options: StartOptions,
        leased: bool,
    ) -> Result<RunRecord, EngineError> {
        let def = &workflow.inner;
        Self::check_input(workflow, &input)?;
        if let Err(why) = crate::journal::check_tags(&options.tags) {
            let source = StepError::new(ErrorCode::INPUT_VALIDATION, why);
            return Err(EngineError::InvalidInput { workflow: def.name.clone(), source });
        }
        let concurrency = match (options.concurrency, &def.concurrency) {
            (Some(given), _) if given.limit == 0 => {
                let source = StepError::new(ErrorCode::INPUT_VALIDATION, "a concurrency limit must be at least 1");
                return Err(EngineError::InvalidInput { workflow: def.name.clone(), source });
            }
            (Some(given), _) => Some(given),
            (None, Some((key, limit))) => Some(Concurrency { key: concurrency_key(def, key, &input)?, limit: *limit }),
            (None, None) => None,
        };
        // A run in a concurrency group starts when its group has room: it is created
        // pending, and a claim admits it.
        let leased = leased && concurrency.is_none();
        let now = self.inner.clock.now();
        let id = options.run_id.unwrap_or_else(|| RunId::from_parts(now, self.inner.entropy.bytes10()));
        Ok(RunRecord {
            id,
            workflow: def.name.clone(),
            version: def.version.clone(),
            definition_hash: def.hash,
            input: Arc::new(input),
            caller: options.caller,
            // A run created to execute at once is created running and claimed, in one write.
            status: if leased { RunStatus::Running } else { RunStatus::Pending },
            output: None,
            error: None,
            parent: None,
            created_at: now,
            updated_at: now,
            wake_at: None,
            lease: leased
                .then(|| Lease::new(id, self.inner.worker_id.clone(), 1, now.plus(self.inner.config.lease_for))),
            cancel: None,
            flow: FlowControl { concurrency, priority: options.priority.unwrap_or(def.priority) },
            tags: options.tags,
        })
    }

    /// Continues a run that is pending, suspended, or was left running by a crash: the
    /// definition is re-walked and every recorded result is served from the journal.
    pub async fn resume(&self, workflow: &Workflow, run: RunId) -> Result<RunReport, EngineError> {
        self.resume_with(workflow, run, ResumeOptions::default()).await
    }

    /// [`Engine::resume`] with options (such as moving the run to a new definition).
    pub async fn resume_with(
        &self,
        workflow: &Workflow,
        run: RunId,
        options: ResumeOptions,
    ) -> Result<RunReport, EngineError> {
        let loaded = self.inner.store.load(run).await.map_err(EngineError::store(run))?;
        if loaded.record.status.is_terminal() {
            return Err(EngineError::NotResumable { run, status: loaded.record.status });
        }
        let lease = self.claim_for_resume(run).await?;
        let _releases = Releases::new(self, run);
        self.resume_leased_with(workflow, lease, options).await
    }

    /// Claims a run to resume it. A live lease refuses the claim (`Leased`: who and until
    /// when), except a lease whose holder is known to be gone: this engine's own name on a
    /// run no activation here holds (one that stopped with an error, or a process before
    /// this one under the same name), or a process on this host that no longer exists (see
    /// [`owner::is_dead_local_process`]). A lease in this engine's name on a run an
    /// activation here holds is refused like another worker's: the runner or a start
    /// claimed it and executes it, or is about to.
    async fn claim_for_resume(&self, run: RunId) -> Result<Lease, EngineError> {
        let inner = &self.inner;
        // Nothing here holds or claims the run: claim it without waiting for other claims (the
        // answers of one batch each continue their run, and their claims then share a
        // commit). The store lets one claimant win; only a lease found in this engine's own
        // name needs the look below, made one at a time with the runner's claims.
        if inner.mark_claiming(run) {
            let (now, lease_for) = (inner.clock.now(), inner.config.lease_for);
            match inner.store.claim(run, &inner.worker_id, now, lease_for).await {
                Ok(lease) => {
                    inner.hold(run);
                    return Ok(lease);
                }
                Err(StoreError::Leased { owner, .. })
                    if owner == inner.worker_id || owner::is_dead_local_process(&owner) =>
                {
                    inner.unmark_claiming(run);
                }
                Err(error) => {
                    inner.unmark_claiming(run);
                    return Err(EngineError::store(run)(error));
                }
            }
        }
        let _one_at_a_time = inner.claiming.lock().await;
        let (now, lease_for) = (inner.clock.now(), inner.config.lease_for);
        let lease = match inner.store.claim(run, &inner.worker_id, now, lease_for).await {
            Err(StoreError::Leased { owner, .. })
                if (owner == inner.worker_id && !inner.holds(run)) || owner::is_dead_local_process(&owner) =>
            {
                inner.store.take_over(run, &owner, &inner.worker_id, now, lease_for).await
            }
            other => other,
        }
        .map_err(EngineError::store(run))?;
        inner.hold(run);
        Ok(lease)
    }

    /// Executes a run this engine has claimed (see [`Runner`], [`Engine::claim_to_resume`]).
    pub async fn resume_leased(&self, workflow: &Workflow, lease: Lease) -> Result<RunReport, EngineError> {
        let _releases = Releases::new(self, lease.run);
        self.resume_leased_with(workflow, lease, ResumeOptions::default()).await
    }

    /// Claims a run to resume it, as [`Engine::resume`] does, without executing it yet: for a
    /// host that answers once the run is claimed (its status `running`) and executes it in
    /// a task of its own with [`Engine::resume_leased`].
    pub async fn claim_to_resume(&self, run: RunId) -> Result<Lease, EngineError> {
        self.claim_for_resume(run).await
    }

    async fn resume_leased_with(
        &self,
        workflow: &Workflow,
        lease: Lease,
        options: ResumeOptions,
    ) -> Result<RunReport, EngineError> {
        let run = lease.run;
        let loaded = self.inner.store.load(run).await.map_err(EngineError::store(run))?;
        if loaded.record.status.is_terminal() {
            return Err(EngineError::NotResumable { run, status: loaded.record.status });
        }
        // Asked to cancel while its last owner executed it, and that owner died first: the
        // cancel stands, and nothing more runs.
        if let Some(request) = loaded.record.cancel.clone() {
            return self.finish_cancelled(run, &lease, &request).await;
        }
        if loaded.record.definition_hash != workflow.hash() && options.allow_new_definition {
            let unknown = workflow.unknown_paths(loaded.entries.iter().map(|e| e.path.as_str()));
            if !unknown.is_empty() {
                return self.fail_nondeterministic(workflow, &loaded, &lease, &unknown).await;
            }
        } else if loaded.record.definition_hash != workflow.hash() {
            return Err(EngineError::DefinitionMismatch {
                run,
                workflow: workflow.name().to_owned(),
                pinned: loaded.record.definition_hash,
                given: workflow.hash(),
            });
        }
        self.execute(workflow, loaded, lease, TraceStart::Continue).await
    }

    /// Fails a run whose journal does not fit the definition it was to resume with.
    async fn fail_nondeterministic(
        &self,
        workflow: &Workflow,
        loaded: &LoadedRun,
        lease: &Lease,
        unknown: &[String],
    ) -> Result<RunReport, EngineError> {
        let run = loaded.record.id;
        let mut message = format!(
            "the journal of run {run} does not fit definition {} of workflow {:?}:\n",
            &workflow.hash().to_hex()[..12],
            workflow.name()
        );
        for path in unknown {
            message.push_str(&format!("  - the journal has `{path}`; the definition has no such step\n"));
        }
        message.push_str("  the definition's steps: ");
        message.push_str(&workflow.path_patterns().join(", "));
        let error = StepError::new(ErrorCode::NONDETERMINISM, message);
        let update = StatusUpdate::ended(RunStatus::Failed, error.clone(), self.inner.clock.now(), Some(lease.token));
        self.inner.store.set_status(run, update).await.map_err(EngineError::store(run))?;
        if let Some(observer) = &self.inner.observer {
            observer.run_stopped(run, RunStatus::Failed);
        }
        Ok(RunReport {
            run_id: run,
            status: RunStatus::Failed,
            output: None,
            error: Some(error),
            pending: Vec::new(),
            awaiting: Vec::new(),
            wake_at: None,
        })
    }

    /// Resolves an open interrupt (compare-and-set: of concurrent decisions exactly one
    /// wins). Approvers are enforced; an `input` answer is validated against its schema. A
    /// timer is not a decision (it is woken: [`Engine::wake_timer`]), and a finished run's
    /// interrupts are decided by nobody. The run is not continued: call [`Engine::resume`].
    pub async fn resolve(
        &self,
        run: RunId,
        interrupt: &InterruptId,
        decision: Decision,
        by: &Caller,
    ) -> Result<(), EngineError> {
        self.settle(run, interrupt, Some(decision), by).await
    }

    /// Wakes a durable timer before it is due: its step goes on as if the time had come.
    /// Only a timer is woken (a person's decision is not skipped this way); who may wake
    /// one is the caller's business (the server asks for the operator role). The run is not
    /// continued: call [`Engine::resume`].
    pub async fn wake_timer(&self, run: RunId, interrupt: &InterruptId, by: &Caller) -> Result<(), EngineError> {
        self.settle(run, interrupt, None, by).await
    }

    /// Resolves an open interrupt with `decision`, or wakes it if it is a timer (`None`).
    async fn settle(
        &self,
        run: RunId,
        interrupt: &InterruptId,
        decision: Option<Decision>,
        by: &Caller,
    ) -> Result<(), EngineError> {
        let loaded = self.inner.store.load(run).await.map_err(EngineError::store(run))?;
        let error = |code: &'static str, reason: String| EngineError::Resolve {
            run,
            interrupt: interrupt.clone(),
            reason,
            code,
        };
        let index = ReplayIndex::from_loaded(&loaded).map_err(EngineError::store(run))?;
        let Some(log) = index.interrupt(interrupt) else {
            return Err(error("not_found", "no such interrupt in this run".into()));
        };
        if log.resolution.is_some() {
            return Err(error("already_resolved", "it was already resolved".into()));
        }
        if loaded.record.status.is_terminal() {
            return Err(error(
                "run_finished",
                format!("the run is {}: its interrupts are decided by nobody now", loaded.record.status.as_str()),
            ));
        }
        let request = &log.request;
        let decision = match (request.kind, decision) {
            (InterruptKind::Timer, None) => Decision::Approve,
            (_, None) => {
                return Err(error("not_a_timer", "only a timer is woken; this interrupt waits for a decision".into()));
            }
            (InterruptKind::Timer, Some(_)) => {
                return Err(error("not_a_decision", "a timer is not decided: it is woken (by an operator)".into()));
            }
            (_, Some(decision)) => decision,
        };
        {
            if !request.may_decide(by) {
                return Err(error(
                    "access_denied",
                    format!(
                        "{} is not among its approvers",
                        by.user.as_deref().map_or("an anonymous caller".to_owned(), |u| format!("user {u:?}"))
                    ),
                ));
            }
        }
        match (request.kind, &decision) {
            (InterruptKind::Input, Decision::Respond { value }) => {
                if let Some(schema) = &request.schema {
                    let validator = jsonschema::validator_for(schema)
                        .map_err(|e| error("invalid_decision", format!("the request's schema is invalid: {e}")))?;
                    let problems = crate::definition::schema_violations(&validator, value);
                    if !problems.is_empty() {
                        return Err(error(
                            "invalid_decision",
                            format!("the value does not match the requested schema: {}", problems.join("; ")),
                        ));
                    }
                }
            }
            (InterruptKind::Input, Decision::Reject { .. }) => {}
            (InterruptKind::Input, _) => {
                return Err(error(
                    "invalid_decision",
                    "an input request takes a value (respond) or a rejection".into(),
                ));
            }
            (InterruptKind::Approval, Decision::Respond { .. }) => {
                return Err(error("invalid_decision", "an approval takes approve, reject or modify".into()));
            }
            (InterruptKind::Event, Decision::Modify { .. }) => {
                return Err(error("invalid_decision", "only approvals can be modified".into()));
            }
            _ => {}
        }
        let now = self.inner.clock.now();
        let entry = JournalEntry {
            path: log.path.clone(),
            at: now,
            record: Record::InterruptResolved {
                id: interrupt.clone(),
                resolution: crate::outcome::Resolution { decision, by: by.user.clone(), at: now, timed_out: false },
            },
        };
        self.inner.store.resolve_interrupt(run, entry).await.map_err(|e| match e {
            StoreError::AlreadyResolved { .. } => error("already_resolved", "another decision won".into()),
            StoreError::InterruptNotFound { .. } => error("not_found", "no such interrupt in this run".into()),
            other => EngineError::Store { run, source: other },
        })?;
        // A run of this engine waiting on it in process looks at once.
        self.inner.mailboxes.notify.notify_waiters();
        Ok(())
    }

    /// Sends a message to an inbox of a run: a loop's `inbox`, or the event a `wait` waits
    /// for. The message is stored (it survives a crash and reaches a run executing in any
    /// process); a step parked on the inbox in this process wakes at once, elsewhere within
    /// its poll interval, and a run suspended on a `wait` is made due, so a runner resumes
    /// it now. A message for a run that does not exist yet is kept for it.
    pub async fn send(&self, run: RunId, inbox: &str, message: Value) -> Result<(), EngineError> {
        let store = &self.inner.store;
        store.post_message(run, inbox, message).await.map_err(EngineError::store(run))?;
        match store.wake_run(run, self.inner.clock.now()).await {
            Ok(_) | Err(StoreError::RunNotFound(_)) => {}
            Err(error) => return Err(EngineError::store(run)(error)),
        }
        self.inner.mailboxes.notify.notify_waiters();
        Ok(())
    }

    /// Wakes an `every` channel of a run: its next tick runs at once. The wake-up is stored,
    /// so it reaches the run in whichever process executes it (at once in this one, within
    /// the poll interval elsewhere), and a run that suspended until its next tick is made
    /// due, so a runner resumes it now. Wake-ups sent while a tick runs count once. A wake-up
    /// for a run that does not exist yet is kept for it, as inbox messages are.
    pub async fn wake(&self, run: RunId, channel: &str) -> Result<(), EngineError> {
        let store = &self.inner.store;
        store.post_message(run, &wake_inbox(channel), Value::Null).await.map_err(EngineError::store(run))?;
        match store.wake_run(run, self.inner.clock.now()).await {
            Ok(_) | Err(StoreError::RunNotFound(_)) => {}
            Err(error) => return Err(EngineError::store(run)(error)),
        }
        self.inner.mailboxes.notify.notify_waiters();
        Ok(())
    }

    /// The report of a run as the store has it.
    pub async fn report(&self, run: RunId) -> Result<RunReport, EngineError> {
        let loaded = self.inner.store.load(run).await.map_err(EngineError::store(run))?;
        Ok(report_from(&loaded, None))
    }
}

const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Engine>();
    assert_send_sync::<Workflow>();
    assert_send_sync::<crate::context::StepContext>();
};
