//! Executing a run: its shared state, the walk (its lease kept by the engine's keeper), and
//! the status it ends in.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::exec::{Env, Exec, Flow};
use super::keeper::{LiveRun, ensure_keeper};
use super::{Engine, EngineError, EngineInner, RunReport, cancelled_event, report_from};
use crate::definition::Workflow;
use crate::error::{ErrorCode, StepError};
use crate::ids::{RunId, StepPath};
use crate::journal::{Lease, LoadedRun, RunStatus};
use crate::recording::{Recorder, ReplayIndex, RunShared, StoreFailed};
use crate::scope::Scope;
use crate::services::ProvidedLayers;
use crate::store::StatusUpdate;
use crate::trace::{self, TraceLink, TraceParent};
use tracing::Instrument;

impl ActivationTrace {
    /// Records how the activation ended, and what it served from the journal.
    fn end(self, shared: &RunShared, result: &Result<RunReport, EngineError>) {
        if self.span.is_disabled() {
            return;
        }
        let (steps, calls) = shared.served();
        self.span.record("stepwright.served.steps", i64::try_from(steps).unwrap_or(i64::MAX));
        self.span.record("stepwright.served.calls", i64::try_from(calls).unwrap_or(i64::MAX));
        match result {
            Ok(report) => {
                self.span.record("stepwright.run.status", report.status.as_str());
                if let Some(error) = &report.error {
                    self.span.record("otel.status_code", "error");
                    self.span.record("otel.status_description", error.message.as_str());
                }
            }
            Err(error) => {
                self.span.record("otel.status_code", "error");
                self.span.record("otel.status_description", error.to_string().as_str());
            }
        }
    }
}

/// Where an activation's trace comes from (looked at only while traces are exported).
pub(crate) enum TraceStart {
    /// A run's first activation, in the trace its starter gave, if any.
    Fresh(Option<TraceParent>),
    /// A later activation of a run (a resume, a worker's claim): a new trace linked to the
    /// activation before it (or, for a run created for later, in the trace it was created in).
    Continue,
    /// A replay or recompute of a run: a new trace linked to the run's last activation.
    Again { original: Option<TraceParent>, kind: &'static str },
}

impl TraceStart {
    /// What started the activation: `start`, `resume`, `replay` or `recompute`.
    fn kind(&self) -> &'static str {
        match self {
            Self::Fresh(_) => "start",
            Self::Continue => "resume",
            Self::Again { kind, .. } => kind,
        }
    }
}

/// Architecture invariant: one trace per activation. A run that waits days for a person
/// has no span open for days: each activation (start to suspend, resume to suspend) is
/// its own trace, linked to the one before, and the run id is an attribute of each.
struct ActivationTrace {
    span: tracing::Span,
}

impl Engine {
    pub(super) async fn execute(
        &self,
        workflow: &Workflow,
        loaded: LoadedRun,
        lease: Lease,
        trace: TraceStart,
    ) -> Result<RunReport, EngineError> {
        let replay = ReplayIndex::from_loaded(&loaded).map_err(EngineError::store(loaded.record.id))?;
        self.execute_indexed(workflow, loaded, lease, replay, trace).await
    }

    /// The activation's span, a trace root: parented by the trace the run was started in
    /// (first activation) and linked to the activation before it (later ones), whose
    /// `traceparent`s the journal keeps as events.
    async fn activation_span(&self, workflow: &Workflow, loaded: &LoadedRun, trace: TraceStart) -> tracing::Span {
        let record = &loaded.record;
        let kind = trace.kind();
        let span = tracing::info_span!(
            parent: None,
            "invoke_workflow",
            otel.name = %format_args!("invoke_workflow {}", workflow.name()),
            gen_ai.operation.name = "invoke_workflow",
            gen_ai.workflow.name = workflow.name(),
            stepwright.run.id = %record.id,
            stepwright.tenant = record.caller.tenant.as_deref(),
            stepwright.activation = kind,
            stepwright.run.status = tracing::field::Empty,
            stepwright.served.steps = tracing::field::Empty,
            stepwright.served.calls = tracing::field::Empty,
            trace_id = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
            otel.status_description = tracing::field::Empty,
        );
        let Some(contexts) = trace::contexts().filter(|_| !span.is_disabled()) else { return span };
        let (parent, link) = match trace {
            TraceStart::Fresh(parent) => (parent, None),
            TraceStart::Continue => {
                let (parent, previous) = self.journaled_traces(record.id).await;
                match previous {
                    Some(previous) => (None, Some((previous, TraceLink::PreviousActivation))),
                    None => (parent, None),
                }
            }
            TraceStart::Again { original, .. } => (None, original.map(|original| (original, TraceLink::Original))),
        };
        if let Some(parent) = &parent {
            contexts.set_parent(&span, parent);
        }
        if let Some((to, link)) = &link {
            contexts.add_link(&span, to, *link);
        }
        span
    }

    /// The `traceparent` a run was started in and that of its last activation, from its
    /// events. A store that cannot say is no trace to continue: tracing never fails a run.
    pub(super) async fn journaled_traces(&self, run: RunId) -> (Option<TraceParent>, Option<TraceParent>) {
        let Ok(events) = self.inner.store.events(run).await else { return (None, None) };
        let of = |kind: &str| {
            events
                .iter()
                .rev()
                .find(|e| e.kind == kind)
                .and_then(|e| e.data["traceparent"].as_str()?.parse::<TraceParent>().ok())
        };
        (of(trace::PARENT_EVENT), of(trace::ACTIVATION_EVENT))
    }

    /// Executes a run against a given replay index (a resume's, or a replay's).
    pub(super) async fn execute_indexed(
        &self,
        workflow: &Workflow,
        loaded: LoadedRun,
        lease: Lease,
        replay: ReplayIndex,
        trace: TraceStart,
    ) -> Result<RunReport, EngineError> {
        if let Some(observer) = &self.inner.observer {
            let tenant = loaded.record.caller.tenant.as_deref();
            observer.activation_started(loaded.record.id, workflow.name(), tenant, trace.kind());
        }
        let span = self.activation_span(workflow, &loaded, trace).await;
        let shared = self.run_shared(workflow, &loaded, Some(lease.token), replay);
        if let Some(traceparent) = trace::contexts().and_then(|c| c.traceparent(&span)) {
            // Log lines inside the activation carry its trace id (a backend links the two).
            span.record("trace_id", traceparent.trace_id());
            let data = serde_json::json!({ "traceparent": traceparent.as_str() });
            shared.event(&StepPath::root(), trace::ACTIVATION_EVENT, data);
        }
        let activation = ActivationTrace { span: span.clone() };
        let result = async {
            tracing::info!(workflow = workflow.name(), "activation started");
            let result = self.execute_shared(workflow, loaded, lease, shared.clone()).await;
            match &result {
                Ok(report) => tracing::info!(status = report.status.as_str(), "activation ended"),
                Err(error) => tracing::warn!(error = %error, code = error.code(), "activation stopped"),
            }
            result
        }
        .instrument(span)
        .await;
        activation.end(&shared, &result);
        result
    }

    async fn execute_shared(
        &self,
        workflow: &Workflow,
        loaded: LoadedRun,
        lease: Lease,
        shared: Arc<RunShared>,
    ) -> Result<RunReport, EngineError> {
        let fence = Some(lease.token);
        let run_id = loaded.record.id;
        let inner = &self.inner;
        let cancel = CancellationToken::new();
        let lost = Arc::new(AtomicBool::new(false));
        let token = lease.token;
        let live = LiveRun { cancel: cancel.clone(), lease, lost: lost.clone() };
        inner.live.lock().expect("poisoned").insert(run_id, live);
        let _live = LiveGuard { engine: inner, run: run_id, token };
        ensure_keeper(&self.inner);
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
        let flow = self.walk(workflow, &shared, &lost, input, &mut scope, &env).await?;
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
        if let Some(observer) = &inner.observer {
            observer.run_stopped(run_id, status);
        }
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
            awaiting: Vec::new(),
            wake_at: wake_at.filter(|_| status == RunStatus::Pending),
        })
    }

    /// What one execution of a run shares: identity, services, the recorder (fenced by the
    /// lease's token) and the replay index.
    pub(super) fn run_shared(
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
                inner.config.lease_for,
            ),
            replay,
            observer: inner.observer.clone(),
            cache: inner.cache.clone(),
            mailboxes: inner.mailboxes.clone(),
            root_layers: ProvidedLayers::default(),
            wake_at: Mutex::new(None),
            wake_checks: Mutex::new(Vec::new()),
            task_checks: Mutex::new(Vec::new()),
            task_home: inner.task_home.clone(),
            event_watches: Mutex::new(Vec::new()),
            created_at: loaded.record.created_at,
            event_cursors: tokio::sync::Mutex::default(),
            yielded: AtomicBool::new(false),
            served: Default::default(),
            capture_content: workflow.inner.capture_content.unwrap_or(inner.config.capture_content),
        })
    }

    /// Walks the workflow body on this task, with (`async` durability) the deferred-entry
    /// flusher beside it. The engine's keeper renews the lease; a lost lease cancels the
    /// walk, which then stops writing, and is reported as `LeaseLost`.
    pub(super) async fn walk(
        &self,
        workflow: &Workflow,
        shared: &Arc<RunShared>,
        lost: &AtomicBool,
        input: Arc<Value>,
        scope: &mut Scope,
        env: &Env,
    ) -> Result<Flow, EngineError> {
        let inner = &self.inner;
        let run_id = shared.run_id;
        let exec = Exec { run: shared.clone() };
        let flow = {
            let root = StepPath::root();
            let walk = exec.exec_seq(&workflow.inner.body, &root, input, scope, env);
            tokio::pin!(walk);
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
                () = flusher => walk.await,
            }
        };
        if lost.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(EngineError::LeaseLost { run: run_id });
        }
        flow.map_err(|StoreFailed(source)| EngineError::store(run_id)(source))
    }

    /// The status, output and error a walk's flow ends the run with.
    pub(super) fn ending(
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
    pub(super) async fn wake_if_woken_meanwhile(&self, shared: &RunShared) -> Result<(), EngineError> {
        let (inner, run_id) = (&self.inner, shared.run_id);
        let checks = std::mem::take(&mut *shared.wake_checks.lock().expect("poisoned"));
        let mut woken = false;
        for (inbox, after) in checks {
            let waiting = inner.store.next_message(run_id, &inbox, after).await.map_err(EngineError::store(run_id))?;
            if waiting.is_some() {
                woken = true;
                break;
            }
        }
        let tasks = std::mem::take(&mut *shared.task_checks.lock().expect("poisoned"));
        if let Some(store) = inner.store.tasks() {
            for task in tasks {
                if woken {
                    break;
                }
                let now = inner.clock.now();
                let found = store.settle_task(&task, now).await.map_err(EngineError::store(run_id))?;
                woken = found.is_none_or(|t| t.state.is_final());
            }
        }
        let watches = std::mem::take(&mut *shared.event_watches.lock().expect("poisoned"));
        let tenant = shared.caller.tenant.as_deref();
        for mut watch in watches {
            // Registered first: an event stored after this sees the registration and wakes
            // the (suspended) run; one stored before is found by the look that follows.
            inner.store.watch_events(run_id, tenant, &watch.name).await.map_err(EngineError::store(run_id))?;
            if !woken {
                let found =
                    super::exec::first_logged_event(inner.store.as_ref(), tenant, &mut watch, shared.created_at)
                        .await
                        .map_err(EngineError::store(run_id))?;
                woken = found.is_some();
            }
        }
        if woken {
            inner.store.wake_run(run_id, inner.clock.now()).await.map_err(EngineError::store(run_id))?;
        }
        Ok(())
    }
}

/// Takes a run out of the engine's live runs when its activation ends, unless a later
/// activation (one with a newer lease) replaced it there: that one's lease must stay renewed.
struct LiveGuard<'a> {
    engine: &'a EngineInner,
    run: RunId,
    token: u64,
}

impl Drop for LiveGuard<'_> {
    fn drop(&mut self) {
        let mut live = self.engine.live.lock().expect("poisoned");
        if live.get(&self.run).is_some_and(|live| live.lease.token == self.token) {
            live.remove(&self.run);
            self.engine.cancels.lock().expect("poisoned").remove(&self.run);
        }
    }
}
