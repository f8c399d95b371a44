//! What a step receives: identity, caller, scope, services, memory, cancellation, and the
//! journaled helpers.

use std::any::Any;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::error::StepError;
use crate::hash::ContentHash;
use crate::identity::Caller;
use crate::ids::{InterruptId, RunId, StepPath, Timestamp};
use crate::outcome::{Decision, Event, InterruptKind, InterruptRequest, Resolution};
use crate::recording::{RunShared, StepRecording};
use crate::scope::Scope;
use crate::services::{CallInfo, CallKind, ProvidedLayers, Services};

/// The context a step runs in. Cheap to clone (one reference count).
#[derive(Clone)]
pub struct StepContext {
    inner: Arc<Inner>,
}

struct Inner {
    recording: StepRecording,
    scope: Scope,
    layers: ProvidedLayers,
    services: Services,
    idempotency_key: Option<String>,
    checkpoint: Option<Value>,
    /// While content goes on spans: the step's guardrails, applied to it first.
    redaction: Option<Vec<crate::policy::Guardrail>>,
}

impl fmt::Debug for StepContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StepContext")
            .field("run", &self.inner.recording.run.run_id)
            .field("path", &self.inner.recording.path)
            .field("attempt", &self.inner.recording.attempt)
            .finish_non_exhaustive()
    }
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
    pub(crate) redaction: Option<Vec<crate::policy::Guardrail>>,
}

impl StepContext {
    pub(crate) fn new(parts: ContextParts) -> Self {
        Self {
            inner: Arc::new(Inner {
                recording: StepRecording::new(parts.run, parts.path, parts.attempt, parts.cancel),
                scope: parts.scope,
                layers: parts.layers,
                services: parts.services,
                idempotency_key: parts.idempotency_key,
                checkpoint: parts.checkpoint,
                redaction: parts.redaction,
            }),
        }
    }

    /// A value as it may go on an exported span (`gen_ai.input.messages`, a tool call's
    /// arguments): `None` unless content capture is on for this run (the workflow's
    /// `telemetry.capture_content`, else the engine's); else the value after this step's
    /// output guardrails (a guardrail that blocks it withholds it), as JSON, cut at the
    /// capture's size with the cut said.
    pub fn content_for_telemetry(&self, value: &Value) -> Option<String> {
        let capture = self.inner.recording.run.capture_content?;
        let guardrails = self.inner.redaction.as_deref().unwrap_or_default();
        let text = match crate::policy::apply_guardrails(
            guardrails,
            crate::policy::GuardrailStage::Output,
            Arc::new(value.clone()),
        ) {
            Ok((redacted, _)) => match redacted.as_ref() {
                Value::String(text) => text.clone(),
                other => other.to_string(),
            },
            Err(_) => return Some("[withheld: a guardrail of this step blocks it]".to_owned()),
        };
        if text.len() <= capture.max_bytes {
            return Some(text);
        }
        let mut cut = capture.max_bytes;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        Some(format!("{}…[cut: {} bytes in all]", &text[..cut], text.len()))
    }

    /// Whether content goes on this run's spans (see [`StepContext::content_for_telemetry`]).
    pub fn captures_content(&self) -> bool {
        self.inner.recording.run.capture_content.is_some()
    }

    /// The run's id.
    pub fn run_id(&self) -> RunId {
        self.inner.recording.run.run_id
    }

    /// The workflow's name.
    pub fn workflow(&self) -> &str {
        &self.inner.recording.run.workflow
    }

    /// The workflow's version.
    pub fn workflow_version(&self) -> &str {
        &self.inner.recording.run.version
    }

    /// This step execution's path.
    pub fn path(&self) -> &StepPath {
        &self.inner.recording.path
    }

    /// The attempt number, from 1.
    pub fn attempt(&self) -> u32 {
        self.inner.recording.attempt
    }

    /// Who started the run.
    pub fn caller(&self) -> &Caller {
        &self.inner.recording.run.caller
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
        &self.inner.recording.cancel
    }

    /// Whether the step was asked to stop.
    pub fn is_cancelled(&self) -> bool {
        self.inner.recording.cancel.is_cancelled()
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
        self.inner.recording.run.event(&self.inner.recording.path, &event.kind, event.data);
    }

    /// Captures an artifact; returns its content hash (SHA-256 of canonical JSON). In
    /// hash-only capture mode only the hash is kept.
    pub fn artifact(&self, kind: &str, data: &Value) -> ContentHash {
        self.inner.recording.run.artifact(&self.inner.recording.path, kind, data)
    }

    /// Streams a token to the observer (a terminal, an SSE stream).
    pub fn token(&self, text: &str) {
        if let Some(observer) = &self.inner.recording.run.observer {
            observer.token(self.inner.recording.run.run_id, &self.inner.recording.path, text);
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
        self.inner.recording.value(draw)
    }

    /// Asks a human (or waits for an event or a timer) mid-step. Returns the resolution once
    /// there is one; until then returns a `suspended` signal to propagate with `?`, and the
    /// run suspends. On resume the step runs again from the top, and this call returns the
    /// decision. Work before the call should itself be journaled (`now`, `uuid`, sub-steps).
    pub async fn interrupt(&self, request: InterruptRequest) -> Result<Resolution, StepError> {
        let ordinal = self.inner.recording.next_interrupt_ordinal();
        self.interrupt_with_ordinal(ordinal, request).await
    }

    /// Like [`interrupt`](Self::interrupt), but identified by a name unique within the step
    /// (`turn.3/approve.1`) instead of by its order among the step's interrupts. Use it when
    /// some interrupts may be skipped on a later execution because the work around them is
    /// served from the journal (an interrupt inside a journaled sub-step).
    pub async fn interrupt_named(&self, name: &str, request: InterruptRequest) -> Result<Resolution, StepError> {
        let id = InterruptId::derive(self.inner.recording.run.run_id, &self.inner.recording.path.join(name), 0);
        self.inner.recording.interrupt(id, request).await
    }

    pub(crate) async fn interrupt_with_ordinal(
        &self,
        ordinal: u32,
        request: InterruptRequest,
    ) -> Result<Resolution, StepError> {
        let id = InterruptId::derive(self.inner.recording.run.run_id, &self.inner.recording.path, ordinal);
        self.inner.recording.interrupt(id, request).await
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
        self.call_dispatching(name, kind, false, work).await
    }

    /// [`StepContext::call`] for work that may hand a task to a step worker
    /// ([`StepContext::dispatch`] at the call's path, as a `worker:` tool does): when
    /// `dispatches`, a fenced call's intent is not committed alone but goes in the task's own
    /// commit, so a crash never leaves an intent without its task (which would make the call's
    /// outcome look unknown when nothing was handed over).
    pub async fn call_dispatching<F, Fut>(
        &self,
        name: &str,
        kind: CallKind,
        dispatches: bool,
        work: F,
    ) -> Result<Arc<Value>, StepError>
    where
        F: FnOnce(CallInfo) -> Fut,
        Fut: std::future::Future<Output = Result<Value, StepError>>,
    {
        self.inner.recording.call(name, kind, dispatches, None, work).await
    }

    /// [`StepContext::call_dispatching`] of a call that says what it does (an agent's tool
    /// call: `{"tool": …, "args": …}`): a fenced call's intent keeps the hash of that, with
    /// the step's place, and an experiment's fresh run is served the answer a recorded run's
    /// call with the same identity got instead of making it (see `RecordedEffects`).
    pub async fn call_identified<F, Fut>(
        &self,
        name: &str,
        kind: CallKind,
        dispatches: bool,
        identity: &Value,
        work: F,
    ) -> Result<Arc<Value>, StepError>
    where
        F: FnOnce(CallInfo) -> Fut,
        Fut: std::future::Future<Output = Result<Value, StepError>>,
    {
        self.inner.recording.call(name, kind, dispatches, Some(identity), work).await
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

    /// Hands work to a step worker (a process that claims tasks over the HTTP API) and
    /// returns its output. The task is journaled and stored once per attempt; the run holds
    /// for a short while (`EngineConfig::task_hold`), then suspends until the worker
    /// answers, and on resume this call returns the answer. A fenced step's idempotency key
    /// goes with the task (the request's, else this step's). Return its error with `?`:
    /// while the answer is not there, the error is the suspension signal.
    pub async fn dispatch(&self, mut request: crate::recording::TaskRequest) -> Result<Value, StepError> {
        if request.idempotency_key.is_none() && request.at.is_none() {
            request.idempotency_key.clone_from(&self.inner.idempotency_key);
        }
        self.inner.recording.dispatch(request).await
    }

    pub(crate) fn take_pending(&self) -> (bool, Option<StepError>) {
        self.inner.recording.take_pending()
    }
}
