//! What a step receives: identity, caller, scope, services, memory, cancellation, and the
//! journaled helpers.

use std::any::Any;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::error::{ErrorCode, StepError};
use crate::hash::ContentHash;
use crate::identity::Caller;
use crate::ids::{InterruptId, RunId, StepPath, Timestamp};
use crate::journal::Record;
use crate::outcome::{Decision, Event, InterruptKind, InterruptRequest, Resolution};
use crate::recording::RunShared;
use crate::scope::Scope;
use crate::services::{CallInfo, CallKind, ProvidedLayers, Services};

#[derive(Default)]
struct Local {
    value_seq: u32,
    interrupt_seq: u32,
    pending: Vec<InterruptId>,
    interrupt_failure: Option<StepError>,
}

/// The context a step runs in. Cheap to clone (one reference count).
#[derive(Clone)]
pub struct StepContext {
    inner: Arc<Inner>,
}

struct Inner {
    run: Arc<RunShared>,
    path: StepPath,
    attempt: u32,
    scope: Scope,
    layers: ProvidedLayers,
    services: Services,
    cancel: CancellationToken,
    idempotency_key: Option<String>,
    checkpoint: Option<Value>,
    local: Mutex<Local>,
}

impl fmt::Debug for StepContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StepContext")
            .field("run", &self.inner.run.run_id)
            .field("path", &self.inner.path)
            .field("attempt", &self.inner.attempt)
            .finish_non_exhaustive()
    }
}

/// The signal `ctx.interrupt()` returns while the answer is not there yet: propagate it
/// with `?`. The engine suspends the step; on resume the step runs again and the same call
/// returns the decision.
pub(crate) fn suspended_signal(id: &InterruptId) -> StepError {
    StepError::new(ErrorCode::from_static("suspended"), format!("waiting on interrupt {id}"))
}

pub(crate) struct ContextParts {
    pub(crate) run: Arc<RunShared>,
    pub(crate) path: StepPath,
    pub(crate) attempt: u32,
    pub(crate) scope: Scope,
    pub(crate) layers: ProvidedLayers,
    pub(crate) services: Services,
    pub(crate) cancel: CancellationToken,
    pub(crate) idempotency_key: Option<String>,
    pub(crate) checkpoint: Option<Value>,
}

impl StepContext {
    pub(crate) fn new(parts: ContextParts) -> Self {
        Self {
            inner: Arc::new(Inner {
                run: parts.run,
                path: parts.path,
                attempt: parts.attempt,
                scope: parts.scope,
                layers: parts.layers,
                services: parts.services,
                cancel: parts.cancel,
                idempotency_key: parts.idempotency_key,
                checkpoint: parts.checkpoint,
                local: Mutex::new(Local::default()),
            }),
        }
    }

    /// The run's id.
    pub fn run_id(&self) -> RunId {
        self.inner.run.run_id
    }

    /// The workflow's name.
    pub fn workflow(&self) -> &str {
        &self.inner.run.workflow
    }

    /// The workflow's version.
    pub fn workflow_version(&self) -> &str {
        &self.inner.run.version
    }

    /// This step execution's path.
    pub fn path(&self) -> &StepPath {
        &self.inner.path
    }

    /// The attempt number, from 1.
    pub fn attempt(&self) -> u32 {
        self.inner.attempt
    }

    /// Who started the run.
    pub fn caller(&self) -> &Caller {
        &self.inner.run.caller
    }

    /// Earlier outputs, bound variables and the workflow input.
    pub fn scope(&self) -> &Scope {
        &self.inner.scope
    }

    /// The workflow input.
    pub fn workflow_input(&self) -> &Value {
        self.inner.scope.input()
    }

    /// A registered service.
    pub fn service<T: Any + Send + Sync>(&self) -> Option<Arc<T>> {
        self.inner.services.get::<T>()
    }

    /// A registered service, or an `execution_failed` error naming the missing type.
    pub fn require<T: Any + Send + Sync>(&self) -> Result<Arc<T>, StepError> {
        self.service::<T>().ok_or_else(|| {
            StepError::execution_failed(format!(
                "looking up service {}: none is registered with the engine",
                std::any::type_name::<T>()
            ))
        })
    }

    /// The memory layers provided by enclosing `provide` nodes.
    pub fn provided(&self) -> &ProvidedLayers {
        &self.inner.layers
    }

    /// The cancellation token; a step must stop soon after it fires.
    pub fn cancellation(&self) -> &CancellationToken {
        &self.inner.cancel
    }

    /// Whether the step was asked to stop.
    pub fn is_cancelled(&self) -> bool {
        self.inner.cancel.is_cancelled()
    }

    /// For `write`/`external` steps: the idempotency key (hash of run id and step path), the
    /// same in every attempt and after a crash. Pass it to the system you call.
    pub fn idempotency_key(&self) -> Option<&str> {
        self.inner.idempotency_key.as_deref()
    }

    /// The state saved by this step's last `continue` outcome, when it is re-entered.
    pub fn checkpoint(&self) -> Option<&Value> {
        self.inner.checkpoint.as_ref()
    }

    /// Records an audit event (recorded before the events the step returns).
    pub fn emit(&self, event: Event) {
        self.inner.run.event(&self.inner.path, &event.kind, event.data);
    }

    /// Captures an artifact; returns its content hash (SHA-256 of canonical JSON). In
    /// hash-only capture mode only the hash is kept.
    pub fn artifact(&self, kind: &str, data: &Value) -> ContentHash {
        self.inner.run.artifact(&self.inner.path, kind, data)
    }

    /// Streams a token to the observer (a terminal, an SSE stream).
    pub fn token(&self, text: &str) {
        if let Some(observer) = &self.inner.run.observer {
            observer.token(self.inner.run.run_id, &self.inner.path, text);
        }
    }

    /// Journaled wall time: the same value when this step is re-executed after a crash.
    pub fn now(&self) -> Timestamp {
        let value = self.journaled(|run| Value::from(run.clock.now().as_micros()));
        Timestamp::from_micros(value.as_i64().unwrap_or_default())
    }

    /// A journaled UUIDv7.
    pub fn uuid(&self) -> uuid::Uuid {
        let value = self.journaled(|run| {
            Value::from(crate::ids::RunId::from_parts(run.clock.now(), run.entropy.bytes10()).to_string())
        });
        value.as_str().and_then(|s| uuid::Uuid::parse_str(s).ok()).unwrap_or_default()
    }

    /// A journaled random word.
    pub fn random(&self) -> u64 {
        let value = self.journaled(|run| Value::from(run.entropy.next_u64()));
        value.as_u64().unwrap_or_default()
    }

    fn journaled(&self, draw: impl FnOnce(&RunShared) -> Value) -> Value {
        let run = &self.inner.run;
        let seq = {
            let mut local = self.inner.local.lock().expect("poisoned");
            local.value_seq += 1;
            local.value_seq
        };
        if let Some(value) = run.replay.value(&self.inner.path, self.inner.attempt, seq) {
            return value.clone();
        }
        let value = draw(run);
        run.recorder.note(
            &self.inner.path,
            run.clock.now(),
            Record::Value { attempt: self.inner.attempt, seq, value: value.clone() },
        );
        value
    }

    /// Asks a human (or waits for an event or a timer) mid-step. Returns the resolution once
    /// there is one; until then returns a `suspended` signal to propagate with `?`, and the
    /// run suspends. On resume the step runs again from the top, and this call returns the
    /// decision. Work before the call should itself be journaled (`now`, `uuid`, sub-steps).
    pub async fn interrupt(&self, request: InterruptRequest) -> Result<Resolution, StepError> {
        let ordinal = {
            let mut local = self.inner.local.lock().expect("poisoned");
            local.interrupt_seq += 1;
            local.interrupt_seq - 1
        };
        self.interrupt_with_ordinal(ordinal, request).await
    }

    /// Like [`interrupt`](Self::interrupt), but identified by a name unique within the step
    /// (`turn.3/approve.1`) instead of by its order among the step's interrupts. Use it when
    /// some interrupts may be skipped on a later execution because the work around them is
    /// served from the journal (an interrupt inside a journaled sub-step).
    pub async fn interrupt_named(&self, name: &str, request: InterruptRequest) -> Result<Resolution, StepError> {
        let id = InterruptId::derive(self.inner.run.run_id, &self.inner.path.join(name), 0);
        self.interrupt_with_id(id, request).await
    }

    pub(crate) async fn interrupt_with_ordinal(
        &self,
        ordinal: u32,
        request: InterruptRequest,
    ) -> Result<Resolution, StepError> {
        let id = InterruptId::derive(self.inner.run.run_id, &self.inner.path, ordinal);
        self.interrupt_with_id(id, request).await
    }

    async fn interrupt_with_id(&self, id: InterruptId, request: InterruptRequest) -> Result<Resolution, StepError> {
        let run = &self.inner.run;
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
                    &self.inner.path,
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
        self.inner.local.lock().expect("poisoned").pending.push(id.clone());
        Err(suspended_signal(&id))
    }

    /// Waits in process for a decision on an interrupt until its deadline. The interrupt is
    /// committed first, so any process can see it and decide; a decision made in this
    /// process is seen at once, one made elsewhere within `decision_poll`. `None`: the
    /// deadline came with no decision.
    async fn wait_for_decision(&self, id: &InterruptId, deadline: Timestamp) -> Result<Option<Resolution>, StepError> {
        let run = &self.inner.run;
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
                () = self.inner.cancel.cancelled() => {
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
        let run = &self.inner.run;
        let decision = match request.on_timeout {
            TimeoutAction::Approve => Decision::Approve,
            TimeoutAction::Reject => Decision::Reject { reason: Some("the deadline passed".into()) },
            TimeoutAction::Fail => {
                let error = StepError::new(
                    ErrorCode::INTERRUPT_TIMEOUT,
                    format!("waiting on interrupt {id}: the deadline passed with no decision"),
                );
                self.inner.local.lock().expect("poisoned").interrupt_failure = Some(error.clone());
                return Err(error);
            }
        };
        let resolution = Resolution { decision, by: None, at: deadline, timed_out: true };
        // Resolution goes through the store's compare-and-set, like a human decision: if a
        // person decided first, theirs stands.
        let entry = crate::journal::JournalEntry {
            path: self.inner.path.clone(),
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

    /// Runs `work` as a journaled sub-step at `self.path()/name`: its output is committed to
    /// the journal as soon as it returns, so when the step runs again after a crash or a
    /// suspension (the same attempt), the recorded output comes back and the work is not
    /// done again. This is how a model call or a tool call inside an agent is paid for
    /// once. Names must be unique within the step (`turn.1`, `turn.1/tool.0`). A failure is
    /// not recorded as a result: the work runs again on the next execution.
    ///
    /// ```
    /// # use stepwright_core::{CallKind, StepContext, StepError};
    /// # async fn demo(ctx: &StepContext) -> Result<(), StepError> {
    /// let answer = ctx
    ///     .call("call.0", CallKind::Input, |_info| async { Ok(serde_json::json!("expensive")) })
    ///     .await?;
    /// # let _ = answer; Ok(()) }
    /// ```
    pub async fn call<F, Fut>(&self, name: &str, kind: CallKind, work: F) -> Result<Arc<Value>, StepError>
    where
        F: FnOnce(CallInfo) -> Fut,
        Fut: std::future::Future<Output = Result<Value, StepError>>,
    {
        use crate::recording::RecordedCall;
        let run = &self.inner.run;
        let attempt = self.inner.attempt;
        let path = self.inner.path.join(name);
        let fenced = matches!(kind, CallKind::Action { effect, .. } if effect.is_fenced());
        let crash = |doing: &str, e: crate::recording::StoreFailed| {
            StepError::execution_failed(format!("recording sub-step {path} ({doing}): {}", e.0))
        };
        match run.replay.call(&path, attempt, kind) {
            Some(RecordedCall::Output(value)) => {
                // A sandbox re-execution journals what it served too, for the comparison.
                if run.replay.replaying() {
                    let hash = ContentHash::of_value(&value);
                    run.recorder
                        .commit_output(&path, run.clock.now(), attempt, hash, value.clone(), false)
                        .await
                        .map_err(|e| crash("its served result", e))?;
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
        let idempotency_key = fenced.then(|| crate::ids::idempotency_key(run.run_id, &path));
        if let Some(key) = &idempotency_key {
            // The fence: the intent is durable before the effect can happen.
            run.recorder
                .commit(&path, run.clock.now(), Record::Intent { attempt, key: key.clone() })
                .await
                .map_err(|e| crash("its intent", e))?;
        }
        // A cancelled step stops waiting at once: the work is dropped (an HTTP request's
        // connection closes, a child process started with kill-on-drop is killed), whether
        // or not the work watches the token itself.
        let work = work(CallInfo { path: path.clone(), idempotency_key });
        let value = tokio::select! {
            result = work => Arc::new(result?),
            () = self.inner.cancel.cancelled() => {
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

    /// A durable sleep: the deadline is journaled, so after a crash the step waits only for
    /// what is left. A wait longer than the engine's in-process limit suspends the run.
    pub async fn sleep(&self, duration: Duration) -> Result<(), StepError> {
        self.interrupt(InterruptRequest::timer(duration)).await.map(|_| ())
    }

    /// An approval request mid-step: `Ok(Some(payload))` when approved (the corrected payload
    /// if modified), `Ok(None)` when rejected.
    pub async fn approval(&self, request: InterruptRequest) -> Result<Option<Value>, StepError> {
        debug_assert_eq!(request.kind, InterruptKind::Approval);
        let payload = request.payload.clone();
        let resolution = self.interrupt(request).await?;
        Ok(match resolution.decision {
            Decision::Approve => Some(payload),
            Decision::Modify { payload } | Decision::Respond { value: payload } => Some(payload),
            Decision::Reject { .. } => None,
        })
    }

    pub(crate) fn take_pending(&self) -> (Vec<InterruptId>, Option<StepError>) {
        let mut local = self.inner.local.lock().expect("poisoned");
        (std::mem::take(&mut local.pending), local.interrupt_failure.take())
    }
}
