//! The engine: starts, resumes, resolves and cancels runs.

pub(crate) mod exec;
mod history;
pub(crate) mod owner;
mod runner;

pub use history::{
    DecisionChange, ForkPatch, RecomputeOptions, RecomputeReport, RecomputedStep, ReplayReport, StepChange,
    StepComparison, StepReplay,
};
pub use runner::{DefinitionResolver, RunOutcome, Runner, RunnerEvent, RunnerLog};

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::config::{EngineConfig, InMemoryStepCache, StepCache};
use crate::definition::Workflow;
use crate::error::{ErrorCode, StepError};
use crate::hash::ContentHash;
use crate::identity::Caller;
use crate::ids::{InterruptId, RunId, StepPath, Timestamp};
use crate::journal::{
    CancelRequest, EventRecord, JournalBatch, JournalEntry, Lease, LoadedRun, Record, RunRecord, RunStatus,
};
use crate::outcome::{Decision, InterruptKind};
use crate::recording::{Mailboxes, Recorder, ReplayIndex, RunShared, StoreFailed};
use crate::runtime::{Clock, Entropy, SystemEntropy, TokioClock};
use crate::scope::Scope;
use crate::services::{Observer, ProvidedLayers, Services};
use crate::store::{CancelOutcome, InMemoryStore, StatusUpdate, Store, StoreError};
use exec::{Env, Exec, Flow};

/// The inbox that carries the wake-ups of an `every` wake channel. Wake-ups are stored like
/// inbox messages, so they reach a run executing in any process and survive a crash; the
/// `@` keeps them apart from the inboxes a workflow names.
pub(crate) fn wake_inbox(channel: &str) -> String {
    format!("@wake/{channel}")
}

/// An open interrupt, as reported to callers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingInterrupt {
    /// Its stable id.
    pub id: InterruptId,
    /// The step that asked.
    pub step: StepPath,
    /// What is asked: an approval, an input, an event or a timer.
    pub kind: InterruptKind,
    /// What the person deciding is shown.
    pub message: String,
    /// When its `on_timeout` applies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<Timestamp>,
}

/// Where a run stands after an execution returns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunReport {
    /// The run executed.
    pub run_id: RunId,
    /// Where it stands now (`running` only when another process continues it).
    pub status: RunStatus,
    /// Its output, if completed.
    pub output: Option<Value>,
    /// Its error, if failed or cancelled.
    pub error: Option<StepError>,
    /// Open interrupts, if suspended.
    pub pending: Vec<PendingInterrupt>,
    /// When a timer or retry is due, if the run waits for one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake_at: Option<Timestamp>,
}

/// Errors from engine operations.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// The workflow input does not match the workflow's input schema; nothing was created.
    #[error("starting workflow {workflow:?}: {source}")]
    InvalidInput {
        /// The workflow.
        workflow: String,
        /// The validation error.
        #[source]
        source: StepError,
    },
    /// The store failed; the run stopped where the journal ends and can be resumed.
    #[error("the store failed during run {run}")]
    Store {
        /// The run.
        run: RunId,
        /// The cause.
        #[source]
        source: StoreError,
    },
    /// The request does not fit the run (fork at a step it never reached, …).
    #[error("run {run}: {reason}")]
    InvalidRequest {
        /// The run.
        run: RunId,
        /// Why not.
        reason: String,
    },
    /// Another worker holds the run's lease.
    #[error("run {run} is being executed by {owner} (lease until {until:?})")]
    Leased {
        /// The run.
        run: RunId,
        /// The worker holding it.
        owner: String,
        /// Until when.
        until: Timestamp,
    },
    /// This worker lost the run's lease while executing it (another worker claimed it, for
    /// instance after a long pause); it stopped and wrote nothing more.
    #[error("the lease on run {run} was lost while executing it")]
    LeaseLost {
        /// The run.
        run: RunId,
    },
    /// The run is finished or running and cannot be resumed.
    #[error("run {run} cannot be resumed: it is {status:?}")]
    NotResumable {
        /// The run.
        run: RunId,
        /// Its status.
        status: RunStatus,
    },
    /// A runner found no definition to execute the run with: none registered has its hash,
    /// and the resolver (if any) said why it could not build one. The run stays resumable.
    #[error("run {run} of workflow {workflow:?} has no definition to execute it with: {reason}")]
    Unresolved {
        /// The run.
        run: RunId,
        /// The run's workflow.
        workflow: String,
        /// Why no definition was found.
        reason: String,
    },
    /// The run was started from another workflow definition.
    #[error(
        "run {run} is pinned to definition {pinned} of workflow {workflow:?}, but the definition given has hash {given}"
    )]
    DefinitionMismatch {
        /// The run.
        run: RunId,
        /// The workflow.
        workflow: String,
        /// The run's definition hash.
        pinned: ContentHash,
        /// The given definition's hash.
        given: ContentHash,
    },
    /// The interrupt cannot be resolved this way.
    #[error("resolving interrupt {interrupt} of run {run}: {reason}")]
    Resolve {
        /// The run.
        run: RunId,
        /// The interrupt.
        interrupt: InterruptId,
        /// Why not.
        reason: String,
        /// A stable code: `not_found`, `already_resolved`, `access_denied`, `invalid_decision`.
        code: &'static str,
    },
}

impl EngineError {
    fn store(run: RunId) -> impl FnOnce(StoreError) -> Self {
        move |source| match source {
            StoreError::Leased { run, owner, until } => Self::Leased { run, owner, until },
            StoreError::LeaseLost { run, .. } => Self::LeaseLost { run },
            source => Self::Store { run, source },
        }
    }
}

/// Options for starting a run.
#[derive(Debug, Clone, Default)]
pub struct StartOptions {
    /// Who starts it.
    pub caller: Caller,
    /// The run id to use (default: a fresh UUIDv7).
    pub run_id: Option<RunId>,
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

/// Builds an [`Engine`].
pub struct EngineBuilder {
    store: Option<Arc<dyn Store>>,
    clock: Option<Arc<dyn Clock>>,
    entropy: Option<Arc<dyn Entropy>>,
    config: EngineConfig,
    services: Services,
    observer: Option<Arc<dyn Observer>>,
    cache: Option<Arc<dyn StepCache>>,
    worker_id: Option<String>,
}

impl EngineBuilder {
    /// The name this engine claims runs under (default: `engine@{host}:{pid}:{nonce}`, see
    /// [`owner::local_worker_id`]; a name of that shape lets another process on the host
    /// take this one's runs over at once if it dies).
    #[must_use]
    pub fn worker_id(mut self, id: &str) -> Self {
        self.worker_id = Some(id.to_owned());
        self
    }

    /// The store (default: a fresh [`InMemoryStore`]).
    #[must_use]
    pub fn store(mut self, store: Arc<dyn Store>) -> Self {
        self.store = Some(store);
        self
    }

    /// The clock (default: [`TokioClock`]).
    #[must_use]
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// The entropy source (default: [`SystemEntropy`]).
    #[must_use]
    pub fn entropy(mut self, entropy: Arc<dyn Entropy>) -> Self {
        self.entropy = Some(entropy);
        self
    }

    /// The settings.
    #[must_use]
    pub fn config(mut self, config: EngineConfig) -> Self {
        self.config = config;
        self
    }

    /// Registers a service for steps (`ctx.service::<T>()`).
    #[must_use]
    pub fn service<T: std::any::Any + Send + Sync>(mut self, service: Arc<T>) -> Self {
        self.services = self.services.with(service);
        self
    }

    /// Live progress and token notifications.
    #[must_use]
    pub fn observer(mut self, observer: Arc<dyn Observer>) -> Self {
        self.observer = Some(observer);
        self
    }

    /// The step cache (default: in memory).
    #[must_use]
    pub fn cache(mut self, cache: Arc<dyn StepCache>) -> Self {
        self.cache = Some(cache);
        self
    }

    /// Builds the engine.
    pub fn build(self) -> Engine {
        let entropy: Arc<dyn Entropy> = self.entropy.unwrap_or_else(|| Arc::new(SystemEntropy::new()));
        let worker_id = self.worker_id.unwrap_or_else(|| owner::local_worker_id("engine", entropy.as_ref()));
        Engine {
            inner: Arc::new(EngineInner {
                worker_id,
                store: self.store.unwrap_or_else(|| Arc::new(InMemoryStore::new())),
                clock: self.clock.unwrap_or_else(|| Arc::new(TokioClock::new())),
                entropy,
                config: Arc::new(self.config),
                services: self.services,
                observer: self.observer,
                cache: self.cache.unwrap_or_else(|| Arc::new(InMemoryStepCache::default())),
                mailboxes: Arc::new(Mailboxes::default()),
                live: Mutex::new(HashMap::new()),
                cancels: Mutex::new(HashMap::new()),
                watching: AtomicBool::new(false),
            }),
        }
    }
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
    /// The runs this engine executes now, with their root tokens.
    live: Mutex<HashMap<RunId, CancellationToken>>,
    /// Cancel requests seen for live runs: who asked and why, for the run's final error.
    cancels: Mutex<HashMap<RunId, CancelRequest>>,
    /// Whether a cancel watcher task runs (one per engine while it has live runs).
    watching: AtomicBool,
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

    /// The store.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.inner.store
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
        let (record, lease) = self.create_inner(workflow, input, options, true).await?;
        let lease = lease.expect("a run created to execute is leased");
        let loaded = LoadedRun { record, entries: Vec::new(), blobs: HashMap::new() };
        self.execute(workflow, loaded, lease).await
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

    async fn create_inner(
        &self,
        workflow: &Workflow,
        input: Value,
        options: StartOptions,
        leased: bool,
    ) -> Result<(RunRecord, Option<Lease>), EngineError> {
        let def = &workflow.inner;
        if let Some(schema) = &def.input_schema {
            schema
                .check(&input, ErrorCode::INPUT_VALIDATION, "the workflow input")
                .map_err(|source| EngineError::InvalidInput { workflow: def.name.clone(), source })?;
        }
        let now = self.inner.clock.now();
        let id = options.run_id.unwrap_or_else(|| RunId::from_parts(now, self.inner.entropy.bytes10()));
        let record = RunRecord {
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
            lease: leased.then(|| Lease {
                run: id,
                owner: self.inner.worker_id.clone(),
                token: 1,
                expires_at: now.plus(self.inner.config.lease_for),
            }),
            cancel: None,
        };
        self.inner.store.create_run(record.clone()).await.map_err(EngineError::store(id))?;
        let lease = record.lease.clone();
        Ok((record, lease))
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
        self.resume_leased_with(workflow, lease, options).await
    }

    /// Claims a run to resume it. A live lease refuses the claim (`Leased`: who and until
    /// when), except a lease whose holder is known to be gone: this engine's own name on a
    /// run it does not execute (an execution that ended in an error), or a process on this
    /// host that no longer exists (see [`owner::is_dead_local_process`]).
    async fn claim_for_resume(&self, run: RunId) -> Result<Lease, EngineError> {
        let inner = &self.inner;
        let (now, lease_for) = (inner.clock.now(), inner.config.lease_for);
        match inner.store.claim(run, &inner.worker_id, now, lease_for).await {
            Err(StoreError::Leased { owner, .. })
                if (owner == inner.worker_id && !inner.live.lock().expect("poisoned").contains_key(&run))
                    || owner::is_dead_local_process(&owner) =>
            {
                inner
                    .store
                    .take_over(run, &owner, &inner.worker_id, now, lease_for)
                    .await
                    .map_err(EngineError::store(run))
            }
            other => other.map_err(EngineError::store(run)),
        }
    }

    /// Executes a run this engine has claimed (see [`Runner`]).
    pub async fn resume_leased(&self, workflow: &Workflow, lease: Lease) -> Result<RunReport, EngineError> {
        self.resume_leased_with(workflow, lease, ResumeOptions::default()).await
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
        self.execute(workflow, loaded, lease).await
    }

    /// Ends a claimed run as cancelled by an earlier request, running nothing.
    async fn finish_cancelled(
        &self,
        run: RunId,
        lease: &Lease,
        request: &CancelRequest,
    ) -> Result<RunReport, EngineError> {
        let now = self.inner.clock.now();
        let mut batch = JournalBatch { events: vec![cancelled_event(run, request, now)], ..Default::default() };
        self.inner.store.append(run, Some(lease.token), &mut batch).await.map_err(EngineError::store(run))?;
        let error = request.error();
        let update = StatusUpdate::ended(RunStatus::Cancelled, error.clone(), now, Some(lease.token));
        self.inner.store.set_status(run, update).await.map_err(EngineError::store(run))?;
        Ok(RunReport {
            run_id: run,
            status: RunStatus::Cancelled,
            output: None,
            error: Some(error),
            pending: Vec::new(),
            wake_at: None,
        })
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
        Ok(RunReport {
            run_id: run,
            status: RunStatus::Failed,
            output: None,
            error: Some(error),
            pending: Vec::new(),
            wake_at: None,
        })
    }

    /// Resolves an open interrupt (compare-and-set: of concurrent decisions exactly one
    /// wins). Approvers are enforced; an `input` answer is validated against its schema. The
    /// run is not continued: call [`Engine::resume`].
    pub async fn resolve(
        &self,
        run: RunId,
        interrupt: &InterruptId,
        decision: Decision,
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
        let request = &log.request;
        if !request.approvers.is_empty() {
            let allowed = request.approvers.iter().any(|a| match a {
                crate::outcome::Approver::User(user) => by.user.as_deref() == Some(user.as_str()),
                crate::outcome::Approver::Role(role) => by.roles.iter().any(|r| r == role),
            });
            if !allowed {
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
            (InterruptKind::Event | InterruptKind::Timer, Decision::Modify { .. }) => {
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

    /// Cancels a run on behalf of nobody in particular: see [`Engine::cancel_by`]. Returns
    /// whether the run was still going (so the cancel took or will take effect).
    pub async fn cancel(&self, run: RunId, reason: &str) -> Result<bool, EngineError> {
        let outcome = self.cancel_by(run, reason, None).await?;
        Ok(!matches!(outcome, CancelOutcome::Finished(_)))
    }

    /// Cancels a run, wherever it executes. The request is stored with who asked and why: a
    /// run nobody executes is cancelled at once (with a `run.cancelled` event); a run a live
    /// process executes (this one or another) is stopped by that process, which sees the
    /// request within [`EngineConfig::cancel_poll`]: its running steps' tokens fire, no
    /// later step starts, and it ends `cancelled` with the request's reason. A finished run
    /// is left as it is.
    pub async fn cancel_by(&self, run: RunId, reason: &str, by: Option<&str>) -> Result<CancelOutcome, EngineError> {
        let now = self.inner.clock.now();
        let request = CancelRequest { by: by.map(str::to_owned), reason: reason.to_owned(), at: now };
        let outcome =
            self.inner.store.request_cancel(run, request.clone(), now).await.map_err(EngineError::store(run))?;
        match &outcome {
            CancelOutcome::Finished(_) => {}
            CancelOutcome::Cancelled => {
                let mut batch =
                    JournalBatch { events: vec![cancelled_event(run, &request, now)], ..Default::default() };
                self.inner.store.append(run, None, &mut batch).await.map_err(EngineError::store(run))?;
            }
            CancelOutcome::Requested { .. } => {}
        }
        // Executing here: stop at once rather than at the next poll.
        let live = self.inner.live.lock().expect("poisoned").get(&run).cloned();
        if let Some(token) = live
            && !matches!(outcome, CancelOutcome::Finished(_))
        {
            self.inner.cancels.lock().expect("poisoned").insert(run, request);
            token.cancel();
        }
        Ok(outcome)
    }

    /// Sends a message to a loop inbox of a run. The message is stored (it survives a
    /// crash and reaches a run executing in any process); a loop parked on the inbox in this
    /// process wakes at once, elsewhere within its poll interval.
    pub async fn send(&self, run: RunId, inbox: &str, message: Value) -> Result<(), EngineError> {
        self.inner.store.post_message(run, inbox, message).await.map_err(EngineError::store(run))?;
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

    async fn execute(&self, workflow: &Workflow, loaded: LoadedRun, lease: Lease) -> Result<RunReport, EngineError> {
        let replay = ReplayIndex::from_loaded(&loaded).map_err(EngineError::store(loaded.record.id))?;
        self.execute_indexed(workflow, loaded, lease, replay).await
    }

    /// Executes a run against a given replay index (a resume's, or a replay's).
    async fn execute_indexed(
        &self,
        workflow: &Workflow,
        loaded: LoadedRun,
        lease: Lease,
        replay: ReplayIndex,
    ) -> Result<RunReport, EngineError> {
        let fence = Some(lease.token);
        let run_id = loaded.record.id;
        let inner = &self.inner;
        let shared = self.run_shared(workflow, &loaded, fence, replay);
        let cancel = CancellationToken::new();
        inner.live.lock().expect("poisoned").insert(run_id, cancel.clone());
        let _live = LiveGuard { engine: inner, run: run_id };
        if !inner.watching.swap(true, std::sync::atomic::Ordering::SeqCst) {
            tokio::spawn(watch_cancels(Arc::downgrade(&self.inner)));
        }
        let fresh = loaded.entries.is_empty() && loaded.record.status == RunStatus::Running;
        if !fresh {
            let running = StatusUpdate::running(inner.clock.now(), fence);
            inner.store.set_status(run_id, running).await.map_err(EngineError::store(run_id))?;
        }

        let input = loaded.record.input.clone();
        let caller = &loaded.record.caller;
        let mut scope = Scope::new(input.clone()).with_run(serde_json::json!({
            "id": run_id,
            "workflow": workflow.name(),
            "tenant": caller.tenant,
            "user": caller.user,
            "roles": caller.roles,
        }));
        let env = Env { layers: ProvidedLayers::default(), cancel, services: shared.services.clone() };
        let flow = self.walk(workflow, &shared, lease, input, &mut scope, &env).await?;
        let (status, output, error) = self.ending(workflow, flow, &scope, &shared, &env.cancel);
        shared.recorder.flush().await.map_err(|StoreFailed(source)| EngineError::store(run_id)(source))?;
        let wake_at = *shared.wake_at.lock().expect("poisoned");
        let update = StatusUpdate {
            status,
            output: output.clone(),
            error: error.clone(),
            at: inner.clock.now(),
            // A runner resumes suspended and pending runs when this is due.
            wake_at: wake_at.filter(|_| matches!(status, RunStatus::Suspended | RunStatus::Pending)),
            // Any status but running releases the lease.
            fence,
        };
        inner.store.set_status(run_id, update).await.map_err(EngineError::store(run_id))?;
        if status == RunStatus::Suspended {
            self.wake_if_woken_meanwhile(&shared).await?;
            let loaded = inner.store.load(run_id).await.map_err(EngineError::store(run_id))?;
            return Ok(report_from(&loaded, wake_at));
        }
        Ok(RunReport {
            run_id,
            status,
            output,
            error,
            pending: Vec::new(),
            wake_at: wake_at.filter(|_| status == RunStatus::Pending),
        })
    }

    /// What one execution of a run shares: identity, services, the recorder (fenced by the
    /// lease's token) and the replay index.
    fn run_shared(
        &self,
        workflow: &Workflow,
        loaded: &LoadedRun,
        fence: Option<u64>,
        replay: ReplayIndex,
    ) -> Arc<RunShared> {
        let inner = &self.inner;
        let run_id = loaded.record.id;
        Arc::new(RunShared {
            run_id,
            workflow: Arc::from(workflow.name()),
            version: Arc::from(workflow.version()),
            caller: loaded.record.caller.clone(),
            services: inner.services.layered(workflow.services()),
            clock: inner.clock.clone(),
            entropy: inner.entropy.clone(),
            config: inner.config.clone(),
            recorder: Recorder::new(
                inner.store.clone(),
                run_id,
                inner.config.durability,
                fence,
                (inner.config.async_max_delay, inner.config.async_max_entries),
                loaded.entries.len(),
            ),
            replay,
            observer: inner.observer.clone(),
            cache: inner.cache.clone(),
            mailboxes: inner.mailboxes.clone(),
            root_layers: ProvidedLayers::default(),
            wake_at: Mutex::new(None),
            wake_checks: Mutex::new(Vec::new()),
            yielded: AtomicBool::new(false),
        })
    }

    /// Walks the workflow body on this task, with the lease's heartbeat and (`async`
    /// durability) the deferred-entry flusher beside it. A lost lease cancels the walk,
    /// which then stops writing, and is reported as `LeaseLost`.
    async fn walk(
        &self,
        workflow: &Workflow,
        shared: &Arc<RunShared>,
        lease: Lease,
        input: Arc<Value>,
        scope: &mut Scope,
        env: &Env,
    ) -> Result<Flow, EngineError> {
        let inner = &self.inner;
        let run_id = shared.run_id;
        let exec = Exec { run: shared.clone() };
        let lost = AtomicBool::new(false);
        let flow = {
            let root = StepPath::root();
            let walk = exec.exec_seq(&workflow.inner.body, &root, input, scope, env);
            tokio::pin!(walk);
            // The heartbeat keeps the lease alive; if the lease is lost it cancels the run.
            let heartbeat = async {
                let mut lease = lease;
                let every = inner.config.lease_for / 3;
                loop {
                    inner.clock.sleep(every).await;
                    match inner.store.heartbeat(&lease, inner.clock.now(), inner.config.lease_for).await {
                        Ok(renewed) => lease = renewed,
                        Err(_) => {
                            lost.store(true, std::sync::atomic::Ordering::SeqCst);
                            env.cancel.cancel();
                            return;
                        }
                    }
                }
            };
            // `async` durability: the deferred entries are written within the delay even while
            // a long step runs.
            let flusher = async {
                match shared.recorder.async_delay() {
                    Some(delay) => loop {
                        inner.clock.sleep(delay).await;
                        if shared.recorder.flush().await.is_err() {
                            // The walk sees the failure at its next write.
                            return std::future::pending().await;
                        }
                    },
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                biased;
                flow = &mut walk => flow,
                () = heartbeat => walk.await,
                () = flusher => walk.await,
            }
        };
        if lost.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(EngineError::LeaseLost { run: run_id });
        }
        flow.map_err(|StoreFailed(source)| EngineError::store(run_id)(source))
    }

    /// The status, output and error a walk's flow ends the run with.
    fn ending(
        &self,
        workflow: &Workflow,
        flow: Flow,
        scope: &Scope,
        shared: &RunShared,
        cancel: &CancellationToken,
    ) -> (RunStatus, Option<Value>, Option<StepError>) {
        match flow {
            Flow::Done(last) => {
                let output = match &workflow.inner.output {
                    Some(expr) => expr.eval(scope).map(Arc::new),
                    None => Ok(last),
                };
                let checked = output.and_then(|output| match &workflow.inner.output_schema {
                    Some(schema) => {
                        schema.check(&output, ErrorCode::OUTPUT_VALIDATION, "the workflow output").map(|()| output)
                    }
                    None => Ok(output),
                });
                match checked {
                    Ok(output) => (RunStatus::Completed, Some((*output).clone()), None),
                    Err(error) => (RunStatus::Failed, None, Some(error)),
                }
            }
            Flow::Skipped(_) => (RunStatus::Completed, Some(Value::Null), None),
            Flow::Suspended => {
                let yielded = shared.yielded.load(std::sync::atomic::Ordering::Relaxed);
                (if yielded { RunStatus::Pending } else { RunStatus::Suspended }, None, None)
            }
            Flow::Handoff(target, _) => (
                RunStatus::Failed,
                None,
                Some(StepError::new(
                    ErrorCode::UNKNOWN_HANDOFF_TARGET,
                    format!("a step handed off to {target:?}, but no enclosing graph has such a node"),
                )),
            ),
            Flow::Failed(error) if cancel.is_cancelled() && error.is(&ErrorCode::CANCELLED) => {
                let requested = self.inner.cancels.lock().expect("poisoned").remove(&shared.run_id);
                match requested {
                    Some(request) => {
                        let event = cancelled_event(shared.run_id, &request, self.inner.clock.now());
                        shared.recorder.note_event(event);
                        (RunStatus::Cancelled, None, Some(request.error()))
                    }
                    None => (RunStatus::Cancelled, None, Some(error)),
                }
            }
            Flow::Failed(error) => (RunStatus::Failed, None, Some(error)),
        }
    }

    /// A wake-up sent while this run was deciding to suspend found it still running, so
    /// `wake` left its timer alone; now that the suspension is written, look once more. One
    /// of the two sides always sees the other.
    async fn wake_if_woken_meanwhile(&self, shared: &RunShared) -> Result<(), EngineError> {
        let (inner, run_id) = (&self.inner, shared.run_id);
        let checks = std::mem::take(&mut *shared.wake_checks.lock().expect("poisoned"));
        for (inbox, after) in checks {
            let waiting = inner.store.next_message(run_id, &inbox, after).await.map_err(EngineError::store(run_id))?;
            if waiting.is_some() {
                inner.store.wake_run(run_id, inner.clock.now()).await.map_err(EngineError::store(run_id))?;
                break;
            }
        }
        Ok(())
    }
}

struct LiveGuard<'a> {
    engine: &'a EngineInner,
    run: RunId,
}

impl Drop for LiveGuard<'_> {
    fn drop(&mut self) {
        self.engine.live.lock().expect("poisoned").remove(&self.run);
        self.engine.cancels.lock().expect("poisoned").remove(&self.run);
    }
}

/// The `run.cancelled` event: who asked and why.
fn cancelled_event(run: RunId, request: &CancelRequest, at: Timestamp) -> EventRecord {
    EventRecord {
        run,
        path: StepPath::root(),
        at,
        tenant: None,
        user: request.by.clone(),
        kind: "run.cancelled".into(),
        data: serde_json::json!({ "by": request.by, "reason": request.reason, "requested_at": request.at }),
    }
}

/// Watches the store for cancel requests of the runs an engine executes, one task per
/// engine while it has live runs (one query per poll, however many runs): a run asked to
/// cancel from another process has its root token fired here. It holds the engine weakly,
/// so a dropped engine stops it.
async fn watch_cancels(engine: std::sync::Weak<EngineInner>) {
    use std::sync::atomic::Ordering::SeqCst;
    loop {
        let Some((store, poll)) = engine.upgrade().map(|inner| (inner.store.clone(), inner.config.cancel_poll)) else {
            return;
        };
        store.wait_for_cancel(poll).await;
        let Some(inner) = engine.upgrade() else { return };
        let live: Vec<RunId> = inner.live.lock().expect("poisoned").keys().copied().collect();
        if live.is_empty() {
            inner.watching.store(false, SeqCst);
            // A run that started after the look above found `watching` set and started no
            // watcher of its own: this one goes on for it, unless another took over.
            if inner.live.lock().expect("poisoned").is_empty() || inner.watching.swap(true, SeqCst) {
                return;
            }
            continue;
        }
        // A store that cannot answer now is asked again at the next poll.
        let Ok(found) = store.cancel_requests(&live).await else { continue };
        for (run, request) in found {
            let token = inner.live.lock().expect("poisoned").get(&run).cloned();
            if let Some(token) = token {
                inner.cancels.lock().expect("poisoned").entry(run).or_insert(request);
                token.cancel();
            }
        }
    }
}

fn report_from(loaded: &LoadedRun, wake_at: Option<Timestamp>) -> RunReport {
    let mut pending = Vec::new();
    if let Ok(index) = ReplayIndex::from_loaded(loaded) {
        let mut open: Vec<_> = index.interrupts.iter().filter(|(_, log)| log.resolution.is_none()).collect();
        open.sort_by(|a, b| a.1.path.cmp(&b.1.path).then(a.0.cmp(b.0)));
        for (id, log) in open {
            pending.push(PendingInterrupt {
                id: id.clone(),
                step: log.path.clone(),
                kind: log.request.kind,
                message: log.request.message.clone(),
                deadline: log.deadline,
            });
        }
    }
    let wake_at = wake_at.or_else(|| pending.iter().filter_map(|p| p.deadline).min());
    RunReport {
        run_id: loaded.record.id,
        status: loaded.record.status,
        output: loaded.record.output.clone(),
        error: loaded.record.error.clone(),
        // A running run may be waiting on an interrupt in process: it is open all the same.
        pending: if matches!(loaded.record.status, RunStatus::Suspended | RunStatus::Running) {
            pending
        } else {
            Vec::new()
        },
        wake_at,
    }
}

const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Engine>();
    assert_send_sync::<Workflow>();
    assert_send_sync::<crate::context::StepContext>();
};
