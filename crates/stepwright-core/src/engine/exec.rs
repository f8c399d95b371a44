//! The walk: executes a definition tree on one task, journaling every step execution through
//! the recorder and serving recorded results on resume. Fan-out (fork, map) runs its paths
//! concurrently on the same task; nothing here spawns.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use futures_util::stream::{FuturesUnordered, StreamExt};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::context::{ContextParts, StepContext};
use crate::definition::OnFailure;
use crate::definition::{
    EveryOnError, ForkMode, ForkPaths, ForkSpec, GraphSpec, InputSource, LoopOnError, LoopSpec, Node, NodeKind,
    OnMaxIterations, PathResult, Verdict,
};
use crate::error::{ErrorCode, StepError};
use crate::hash::ContentHash;
use crate::ids::{InterruptId, StepPath, Timestamp};
use crate::journal::{Arm, Choice, OtherwiseArm, Record};
use crate::outcome::{Decision, InterruptRequest, OutcomeKind};
use crate::policy::{GuardrailStage, apply_guardrails};
use crate::recording::{RunShared, StoreFailed};
use crate::scope::Scope;
use crate::services::{ProvidedLayers, Services, StepStatus};

/// How a node ended, as seen by its parent.
#[derive(Debug, Clone)]
pub(crate) enum Flow {
    Done(Arc<Value>),
    Skipped(String),
    /// Waiting on an interrupt, a checkpoint, or a timer too long to wait for in process.
    Suspended,
    Handoff(String, Arc<Value>),
    Failed(StepError),
}

pub(crate) type Res = Result<Flow, StoreFailed>;

/// How often a step parked on a mailbox (an inbox, a wake channel) looks at the store for
/// what another process sent; sends in this process wake it at once.
const MAILBOX_POLL: std::time::Duration = std::time::Duration::from_millis(50);

/// What descendants inherit.
#[derive(Clone)]
pub(crate) struct Env {
    pub(crate) layers: ProvidedLayers,
    pub(crate) cancel: CancellationToken,
    /// The services steps here see: the run's, with each enclosing subworkflow's own on top
    /// (a called file's tools and agents are its own, not its caller's).
    pub(crate) services: Services,
}

/// Interrupt ordinals the engine itself uses at a step path (a step's own `ctx.interrupt`
/// calls count up from 0, so these cannot collide).
const GATE_ORDINAL: u32 = u32::MAX - 1;
const OUTCOME_ORDINAL: u32 = u32::MAX;

fn null() -> Arc<Value> {
    static NULL: std::sync::OnceLock<Arc<Value>> = std::sync::OnceLock::new();
    NULL.get_or_init(|| Arc::new(Value::Null)).clone()
}

fn is_never_retried(error: &StepError) -> bool {
    [ErrorCode::INPUT_VALIDATION, ErrorCode::CANCELLED, ErrorCode::NONDETERMINISM, ErrorCode::REJECTED]
        .contains(&error.code)
}

pub(crate) struct Exec {
    pub(crate) run: Arc<RunShared>,
}

impl Exec {
    fn now(&self) -> Timestamp {
        self.run.clock.now()
    }

    /// The choice this run recorded at `path`, if this execution serves it, read as the kind
    /// `read` expects. A choice of another kind means the definition changed under the run:
    /// that fails with `nondeterminism` instead of being re-interpreted.
    fn recorded_choice<T>(
        &self,
        path: &StepPath,
        read: impl FnOnce(&Choice) -> Option<T>,
    ) -> Result<Option<T>, StepError> {
        let Some(choice) = self.run.replay.choice(path) else { return Ok(None) };
        let kind = choice.kind();
        read(choice).map(Some).ok_or_else(|| {
            StepError::new(
                ErrorCode::NONDETERMINISM,
                format!("{path} recorded a {kind}, but this definition decides something else there"),
            )
        })
    }

    /// The one way an operator decides: served from the journal when this run already chose
    /// at `path`, else chosen now by `choose` and recorded (with the next commit).
    fn decide_once<T>(
        &self,
        path: &StepPath,
        read: impl Fn(&Choice) -> Option<T>,
        choose: impl FnOnce() -> Result<Choice, StepError>,
    ) -> Result<T, StepError> {
        if let Some(served) = self.recorded_choice(path, &read)? {
            return Ok(served);
        }
        let choice = choose()?;
        let chosen = read(&choice).expect("a choice is read as the kind it was made as");
        self.run.recorder.note(path, self.now(), Record::Decided { choice });
        Ok(chosen)
    }

    fn finished(&self, path: &StepPath, status: StepStatus) {
        if let Some(observer) = &self.run.observer {
            observer.step_finished(self.run.run_id, path, status);
        }
    }

    /// Runs nodes in order, binding each output into `scope`; the output is the last one's.
    pub(crate) fn exec_seq<'a>(
        &'a self,
        nodes: &'a [Node],
        prefix: &'a StepPath,
        input: Arc<Value>,
        scope: &'a mut Scope,
        env: &'a Env,
    ) -> BoxFuture<'a, Res> {
        Box::pin(async move {
            let mut previous = input;
            for node in nodes {
                // A cancelled run starts no later step, whether or not the step before it
                // looked at its token.
                if env.cancel.is_cancelled() {
                    return Ok(Flow::Failed(StepError::cancelled("the run was cancelled")));
                }
                let path = prefix.join_id(&node.id);
                match self.exec_node(node, path, previous.clone(), scope, env).await? {
                    Flow::Done(value) => {
                        scope.bind_output(&node.id, value.clone());
                        previous = value;
                    }
                    Flow::Skipped(_) => {
                        scope.bind_output(&node.id, null());
                        previous = null();
                    }
                    other => return Ok(other),
                }
            }
            Ok(Flow::Done(previous))
        })
    }

    fn resolve_input(&self, node: &Node, previous: Arc<Value>, scope: &Scope) -> Result<Arc<Value>, StepError> {
        Ok(match &node.input {
            InputSource::Previous => previous,
            InputSource::WorkflowInput => scope.input_arc().clone(),
            InputSource::Output(id) => scope.output_arc(id).cloned().ok_or_else(|| {
                StepError::new(ErrorCode::EXPRESSION, format!("resolving the input: no earlier step {id:?} in scope"))
            })?,
            InputSource::Value(value) => Arc::new(value.clone()),
            InputSource::Expr(expr) => Arc::new(expr.eval(scope)?),
        })
    }

    /// One node with its policies: replay, `if`, input, guardrails, approval gate, cache,
    /// attempts with retry and timeout, effect fence, on_failure.
    pub(crate) async fn exec_node(
        &self,
        node: &Node,
        path: StepPath,
        previous: Arc<Value>,
        scope: &mut Scope,
        env: &Env,
    ) -> Res {
        {
            let replay = &self.run.replay;
            let class = (node.effect_or_default(), node.policy.safe_to_retry);
            let log = replay.path(&path, class);
            if let Some(log) = log {
                if let Some(value) = replay.completed_output(&path, class) {
                    if replay.replaying() {
                        // A replay's own journal shows the served step too, for comparison.
                        return self.complete(&path, log.last_attempt.max(1), value, false).await;
                    }
                    return Ok(Flow::Done(value));
                }
                if let Some(reason) = &log.skipped {
                    return Ok(Flow::Skipped(reason.clone()));
                }
                if let Some((target, payload)) = &log.handoff {
                    return Ok(Flow::Handoff(target.clone(), Arc::new(payload.clone())));
                }
            }
            let policy = &node.policy;
            if let Some(condition) = &policy.condition {
                match condition.eval(scope) {
                    Ok(true) => {}
                    Ok(false) => {
                        let reason = "condition is false".to_owned();
                        self.run.recorder.note(&path, self.now(), Record::Skipped { reason: reason.clone() });
                        self.finished(&path, StepStatus::Skipped);
                        return Ok(Flow::Skipped(reason));
                    }
                    Err(error) => {
                        return self.fail(node, &path, error, null(), scope, env, 1).await;
                    }
                }
            }
            let mut input = match self.resolve_input(node, previous, scope) {
                Ok(input) => input,
                Err(error) => return self.fail(node, &path, error, null(), scope, env, 1).await,
            };
            if let Some(schema) = &node.input_schema
                && let Err(error) = schema.check(&input, ErrorCode::INPUT_VALIDATION, "the input")
            {
                return self.fail(node, &path, error, input, scope, env, 1).await;
            }
            if !policy.guardrails.is_empty() {
                match apply_guardrails(&policy.guardrails, GuardrailStage::Input, input.clone()) {
                    Ok((value, warnings)) => {
                        self.warn(&path, &warnings);
                        input = value;
                    }
                    Err(error) => return self.fail(node, &path, error, input, scope, env, 1).await,
                }
            }
            if let Some(gate) = &policy.approval {
                let ctx = self.context(&path, 0, scope, env, None);
                let request = gate.request(&input);
                match self.interrupt_at(&ctx, GATE_ORDINAL, request).await? {
                    Err(flow) => return Ok(flow),
                    Ok(Decision::Approve | Decision::Respond { .. }) => {}
                    Ok(Decision::Modify { payload }) => input = Arc::new(payload),
                    Ok(Decision::Reject { reason }) => {
                        let error = StepError::new(
                            ErrorCode::REJECTED,
                            format!(
                                "the approval before this step was rejected{}",
                                reason.map(|r| format!(": {r}")).unwrap_or_default()
                            ),
                        );
                        return self.fail(node, &path, error, input, scope, env, 1).await;
                    }
                }
            }
            let cache_key = if policy.cache { Some(self.cache_key(node, &input)) } else { None };
            if let Some(key) = &cache_key
                && let Some(value) = self.run.cache.get(key)
            {
                return self.complete(&path, 1, value, true).await;
            }
            self.attempts(node, &path, input, scope, env, cache_key).await
        }
    }

    fn cache_key(&self, node: &Node, input: &Value) -> ContentHash {
        let step_type = match &node.kind {
            NodeKind::Step(step) => step.type_name().to_owned(),
            other => other.name().to_owned(),
        };
        ContentHash::of_parts(&[
            self.run.workflow.as_bytes(),
            node.id.as_bytes(),
            step_type.as_bytes(),
            ContentHash::of_value(input).as_bytes(),
        ])
    }

    fn warn(&self, path: &StepPath, warnings: &[(String, String)]) {
        for (name, message) in warnings {
            self.run.event(path, "guardrail.warning", json!({ "guardrail": name, "message": message }));
        }
    }

    async fn complete(&self, path: &StepPath, attempt: u32, value: Arc<Value>, cached: bool) -> Res {
        let hash = ContentHash::of_value(&value);
        self.run.recorder.commit_output(path, self.now(), attempt, hash, value.clone(), cached).await?;
        self.finished(path, StepStatus::Completed);
        Ok(Flow::Done(value))
    }

    #[allow(clippy::too_many_arguments)]
    async fn attempts(
        &self,
        node: &Node,
        path: &StepPath,
        input: Arc<Value>,
        scope: &mut Scope,
        env: &Env,
        cache_key: Option<ContentHash>,
    ) -> Res {
        let policy = &node.policy;
        let fenced = node.effect_or_default().is_fenced();
        let mut attempt = 1;
        let mut wait_until = None;
        if let Some(log) = self.run.replay.path(path, (node.effect_or_default(), policy.safe_to_retry)) {
            let last = log.last_attempt;
            match log.failures.iter().rev().find(|f| f.0 == last) {
                Some((_, _, Some(retry_at))) => {
                    attempt = last + 1;
                    wait_until = Some(*retry_at);
                }
                Some((_, error, None)) => {
                    return self.on_failure(node, path, error.clone(), input, scope, env, last).await;
                }
                None if last == 0 => {}
                None => {
                    attempt = last;
                    if fenced && log.intent == Some(last) && !policy.safe_to_retry {
                        let error = StepError::new(
                            ErrorCode::OUTCOME_UNKNOWN,
                            format!(
                                "the {} step was interrupted after it started and is not safe to retry; whether its effect happened is unknown",
                                format!("{:?}", node.effect_or_default()).to_lowercase()
                            ),
                        );
                        return self.fail(node, path, error, input, scope, env, attempt).await;
                    }
                }
            }
        }
        loop {
            if let Some(due) = wait_until.take()
                && let Some(flow) = self.wait_until(due, env).await?
            {
                return Ok(flow);
            }
            self.run.recorder.note(path, self.now(), Record::Started { attempt });
            if let Some(observer) = &self.run.observer {
                observer.step_started(self.run.run_id, path, attempt);
            }
            let key = fenced.then(|| crate::ids::idempotency_key(self.run.run_id, path));
            if let Some(key) = &key {
                // The fence: the intent is durable before the effect can happen.
                self.run.recorder.commit(path, self.now(), Record::Intent { attempt, key: key.clone() }).await?;
            }
            let flow = self.run_with_timeout(node, path, attempt, input.clone(), scope, env, key).await?;
            let error = match flow {
                Flow::Done(value) => match self.check_output(node, path, value) {
                    Ok(value) => {
                        if let Some(kind) = &policy.artifact_key {
                            self.run.artifact(path, kind, &value);
                        }
                        if let Some(key) = cache_key {
                            self.run.cache.put(key, value.clone());
                        }
                        return self.complete(path, attempt, value, false).await;
                    }
                    Err(error) => error,
                },
                Flow::Failed(error) => error,
                Flow::Skipped(reason) => {
                    self.run.recorder.commit(path, self.now(), Record::Skipped { reason: reason.clone() }).await?;
                    self.finished(path, StepStatus::Skipped);
                    return Ok(Flow::Skipped(reason));
                }
                Flow::Suspended => {
                    self.run.recorder.flush().await?;
                    self.finished(path, StepStatus::Suspended);
                    return Ok(Flow::Suspended);
                }
                Flow::Handoff(target, payload) => {
                    self.run
                        .recorder
                        .commit(
                            path,
                            self.now(),
                            Record::Handoff { target: target.clone(), payload: (*payload).clone() },
                        )
                        .await?;
                    self.finished(path, StepStatus::Handoff);
                    return Ok(Flow::Handoff(target, payload));
                }
            };
            if error.is(&ErrorCode::CANCELLED) && env.cancel.is_cancelled() {
                self.run.recorder.note(path, self.now(), Record::Cancelled { reason: error.message.clone() });
                self.finished(path, StepStatus::Cancelled);
                return Ok(Flow::Failed(error));
            }
            let retry_all = matches!(policy.on_failure, OnFailure::Retry);
            if let Some(retry) = &policy.retry
                && attempt < retry.max_attempts
                && (error.retryable || retry_all)
                && !is_never_retried(&error)
            {
                let delay = retry.delay_after(attempt, self.run.entropy.next_f64());
                let due = self.now().plus(delay);
                self.run
                    .recorder
                    .commit(path, self.now(), Record::Failed { attempt, error, retry_at: Some(due), started_at: None })
                    .await?;
                self.finished(path, StepStatus::Retrying);
                attempt += 1;
                wait_until = Some(due);
                continue;
            }
            return self.fail(node, path, error, input, scope, env, attempt).await;
        }
    }

    /// Waits for a journaled time. `Some(flow)` when the run must stop instead (cancelled, or
    /// the wait is longer than the engine waits in process).
    async fn wait_until(&self, due: Timestamp, env: &Env) -> Result<Option<Flow>, StoreFailed> {
        let now = self.now();
        if due <= now {
            return Ok(None);
        }
        if due.since(now) > self.run.config.in_process_wait_limit {
            self.run.note_wake_at(due);
            self.run.recorder.flush().await?;
            return Ok(Some(Flow::Suspended));
        }
        tokio::select! {
            () = self.run.clock.sleep_until(due) => Ok(None),
            () = env.cancel.cancelled() => Ok(Some(Flow::Failed(StepError::cancelled("cancelled while waiting to retry")))),
        }
    }

    fn check_output(&self, node: &Node, path: &StepPath, value: Arc<Value>) -> Result<Arc<Value>, StepError> {
        if let Some(schema) = &node.output_schema {
            schema.check(&value, ErrorCode::OUTPUT_VALIDATION, "the output")?;
        }
        if node.policy.guardrails.is_empty() {
            return Ok(value);
        }
        let (value, warnings) = apply_guardrails(&node.policy.guardrails, GuardrailStage::Output, value)?;
        self.warn(path, &warnings);
        Ok(value)
    }

    /// Records a final failure and applies `on_failure`.
    #[allow(clippy::too_many_arguments)]
    async fn fail(
        &self,
        node: &Node,
        path: &StepPath,
        error: StepError,
        input: Arc<Value>,
        scope: &mut Scope,
        env: &Env,
        attempt: u32,
    ) -> Res {
        self.run
            .recorder
            .commit(
                path,
                self.now(),
                Record::Failed { attempt, error: error.clone(), retry_at: None, started_at: None },
            )
            .await?;
        self.finished(path, StepStatus::Failed);
        self.on_failure(node, path, error, input, scope, env, attempt).await
    }

    #[allow(clippy::too_many_arguments)]
    async fn on_failure(
        &self,
        node: &Node,
        path: &StepPath,
        error: StepError,
        input: Arc<Value>,
        scope: &mut Scope,
        env: &Env,
        attempt: u32,
    ) -> Res {
        if error.is(&ErrorCode::CANCELLED) && env.cancel.is_cancelled() {
            return Ok(Flow::Failed(error));
        }
        match &node.policy.on_failure {
            OnFailure::Abort | OnFailure::Retry => Ok(Flow::Failed(error)),
            OnFailure::Skip => {
                let reason = format!("failed and on_failure is skip: {error}");
                self.run.recorder.commit(path, self.now(), Record::Skipped { reason: reason.clone() }).await?;
                self.finished(path, StepStatus::Skipped);
                Ok(Flow::Skipped(reason))
            }
            OnFailure::Fallback(fallback) => {
                let fallback_path = path.join("@fallback");
                match Box::pin(self.exec_node(fallback, fallback_path, input, scope, env)).await? {
                    Flow::Done(value) => self.complete(path, attempt, value, false).await,
                    other => Ok(other),
                }
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn run_with_timeout(
        &self,
        node: &Node,
        path: &StepPath,
        attempt: u32,
        input: Arc<Value>,
        scope: &mut Scope,
        env: &Env,
        key: Option<String>,
    ) -> Res {
        let Some(limit) = node.policy.timeout else {
            return self.run_kind(node, path, attempt, input, scope, env, key).await;
        };
        // The work gets its own token: a timeout cancels it (and everything below it), and
        // dropping the future stops it at its next await point.
        let local =
            Env { layers: env.layers.clone(), cancel: env.cancel.child_token(), services: env.services.clone() };
        let work = self.run_kind(node, path, attempt, input, scope, &local, key);
        tokio::select! {
            result = work => result,
            () = self.run.clock.sleep(limit) => {
                local.cancel.cancel();
                Ok(Flow::Failed(StepError::timeout(format!("the step did not finish within {limit:?}; its work was cancelled"))))
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn run_kind(
        &self,
        node: &Node,
        path: &StepPath,
        attempt: u32,
        input: Arc<Value>,
        scope: &mut Scope,
        env: &Env,
        key: Option<String>,
    ) -> Res {
        match &node.kind {
            NodeKind::Step(step) => self.run_leaf(step.as_ref(), path, attempt, input, scope, env, key).await,
            NodeKind::Sequence(body) => self.exec_seq(body, path, input, scope, env).await,
            NodeKind::Provide { layers, body } => {
                let inner =
                    Env { layers: env.layers.with(layers), cancel: env.cancel.clone(), services: env.services.clone() };
                self.exec_seq(body, path, input, scope, &inner).await
            }
            NodeKind::Branch { arms, otherwise } => {
                let chosen = self.decide_once(
                    path,
                    |choice| match choice {
                        Choice::Arm { arm } => Some(*arm),
                        _ => None,
                    },
                    || {
                        for (index, (condition, _)) in arms.iter().enumerate() {
                            if condition.eval(scope)? {
                                return Ok(Choice::Arm { arm: Some(Arm::When(index)) });
                            }
                        }
                        Ok(Choice::Arm { arm: otherwise.as_ref().map(|_| Arm::Otherwise(OtherwiseArm::Otherwise)) })
                    },
                );
                let body = match chosen {
                    Ok(Some(Arm::When(index))) => arms.get(index).map(|(_, body)| body),
                    Ok(Some(Arm::Otherwise(_))) => otherwise.as_ref(),
                    Ok(None) => None,
                    Err(error) => return Ok(Flow::Failed(error)),
                };
                match body {
                    Some(body) => self.exec_seq(body, path, input, scope, env).await,
                    None => Ok(Flow::Skipped("no branch condition matched".into())),
                }
            }
            NodeKind::Fork(spec) => Box::pin(self.run_fork(spec, path, input, scope, env)).await,
            NodeKind::Loop(spec) => Box::pin(self.run_loop(spec, path, input, scope, env)).await,
            NodeKind::Graph(spec) => Box::pin(self.run_graph(spec, path, input, scope, env)).await,
            NodeKind::Workflow { workflow, spawn } => {
                Box::pin(self.run_subworkflow(workflow, *spawn, path, input, scope, env)).await
            }
            NodeKind::Every(spec) => Box::pin(self.run_every(spec, path, input, scope, env)).await,
            NodeKind::Sleep(duration) => {
                let ctx = self.context(path, attempt, scope, env, None);
                match self.interrupt_at(&ctx, OUTCOME_ORDINAL, InterruptRequest::timer(*duration)).await? {
                    Err(flow) => Ok(flow),
                    Ok(_) => Ok(Flow::Done(null())),
                }
            }
        }
    }

    async fn run_subworkflow(
        &self,
        workflow: &crate::definition::Workflow,
        spawn: Option<std::time::Duration>,
        path: &StepPath,
        input: Arc<Value>,
        scope: &Scope,
        env: &Env,
    ) -> Res {
        {
            {
                let def = &workflow.inner;
                if let Some(schema) = &def.input_schema
                    && let Err(error) = schema.check(&input, ErrorCode::INPUT_VALIDATION, "the subworkflow input")
                {
                    return Ok(Flow::Failed(error));
                }
                let layers = if spawn.is_some() { self.run.root_layers.clone() } else { env.layers.clone() };
                let services = env.services.layered(workflow.services());
                let inner = Env { layers, cancel: env.cancel.child_token(), services };
                let mut child_scope = scope.isolated(input.clone());
                let body = self.exec_seq(&def.body, path, input, &mut child_scope, &inner);
                let flow = match spawn {
                    None => body.await?,
                    Some(limit) => tokio::select! {
                        result = body => result?,
                        () = self.run.clock.sleep(limit) => {
                            inner.cancel.cancel();
                            Flow::Failed(StepError::timeout(format!("the spawned workflow did not finish within {limit:?}")))
                        }
                    },
                };
                let Flow::Done(last) = flow else {
                    return Ok(flow);
                };
                let output = match &def.output {
                    Some(expr) => match expr.eval(&child_scope) {
                        Ok(value) => Arc::new(value),
                        Err(error) => return Ok(Flow::Failed(error)),
                    },
                    None => last,
                };
                if let Some(schema) = &def.output_schema
                    && let Err(error) = schema.check(&output, ErrorCode::OUTPUT_VALIDATION, "the subworkflow output")
                {
                    return Ok(Flow::Failed(error));
                }
                Ok(Flow::Done(output))
            }
        }
    }

    fn context(&self, path: &StepPath, attempt: u32, scope: &Scope, env: &Env, key: Option<String>) -> StepContext {
        let checkpoint = self
            .run
            .replay
            .path(path, (crate::policy::Effect::Pure, false))
            .and_then(|log| log.checkpoint.as_ref())
            .map(|(_, state)| state.clone());
        StepContext::new(ContextParts {
            run: self.run.clone(),
            path: path.clone(),
            attempt,
            scope: scope.clone(),
            layers: env.layers.clone(),
            services: env.services.clone(),
            // Nothing cancels one leaf alone: timeouts and fork paths already own a child
            // token, so the leaf shares its parent's (a child token costs two locks).
            cancel: env.cancel.clone(),
            idempotency_key: key,
            checkpoint,
        })
    }

    /// Opens (or replays) an engine-owned interrupt at a path. `Ok(Err(flow))` when the node
    /// must stop: suspended, or failed at the deadline.
    async fn interrupt_at(
        &self,
        ctx: &StepContext,
        ordinal: u32,
        request: InterruptRequest,
    ) -> Result<Result<Decision, Flow>, StoreFailed> {
        let result = ctx.interrupt_with_ordinal(ordinal, request).await;
        let (pending, failure) = ctx.take_pending();
        if !pending.is_empty() {
            self.run.recorder.flush().await?;
            return Ok(Err(Flow::Suspended));
        }
        if let Some(error) = failure {
            return Ok(Err(Flow::Failed(error)));
        }
        match result {
            Ok(resolution) => Ok(Ok(resolution.decision)),
            Err(error) => Ok(Err(Flow::Failed(error))),
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn run_leaf(
        &self,
        step: &dyn crate::step::DynStep,
        path: &StepPath,
        attempt: u32,
        input: Arc<Value>,
        scope: &Scope,
        env: &Env,
        key: Option<String>,
    ) -> Res {
        let ctx = self.context(path, attempt, scope, env, key);
        // A step that returned `suspended(request)` earlier: its output is the decision.
        if self.run.replay.has_interrupts() {
            let outcome_id = InterruptId::derive(self.run.run_id, path, OUTCOME_ORDINAL);
            if let Some(log) = self.run.replay.interrupt(&outcome_id) {
                let request = log.request.clone();
                return self.outcome_interrupt(&ctx, request).await;
            }
        }
        let work = AssertUnwindSafe(step.run(&ctx, input)).catch_unwind();
        let mut work = std::pin::pin!(work);
        let result = tokio::select! {
            biased;
            result = &mut work => result,
            () = ctx.cancellation().cancelled() => {
                // Cooperative cancellation: the step sees its token fire and gets a grace
                // period to stop on its own; then its future is dropped.
                tokio::select! {
                    _ = &mut work => {}
                    () = self.run.clock.sleep(self.run.config.cancel_grace) => {}
                }
                return Ok(Flow::Failed(StepError::cancelled("the step was cancelled")));
            }
        };
        let (pending, failure) = ctx.take_pending();
        if !pending.is_empty() {
            return Ok(Flow::Suspended);
        }
        if let Some(error) = failure {
            return Ok(Flow::Failed(error));
        }
        let outcome = match result {
            Err(panic) => {
                let message = panic
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "a non-string panic payload".into());
                return Ok(Flow::Failed(StepError::execution_failed(format!("the step panicked: {message}"))));
            }
            Ok(Err(error)) => return Ok(Flow::Failed(error)),
            Ok(Ok(outcome)) => outcome,
        };
        for event in outcome.events {
            self.run.event(path, &event.kind, event.data);
        }
        Ok(match outcome.kind {
            OutcomeKind::Completed(value) => Flow::Done(Arc::new(value)),
            OutcomeKind::Skipped(reason) => Flow::Skipped(reason),
            OutcomeKind::Handoff { target, payload } => Flow::Handoff(target, Arc::new(payload)),
            OutcomeKind::Continue(state) => {
                self.run.recorder.commit(path, self.now(), Record::Checkpoint { attempt, state }).await?;
                self.run.note_yielded();
                Flow::Suspended
            }
            OutcomeKind::Suspended(request) => return self.outcome_interrupt(&ctx, request).await,
        })
    }

    /// The decision on a `suspended` outcome becomes the step's result: approve → the
    /// request's payload; modify → the corrected payload; respond → the value; reject →
    /// `rejected`.
    async fn outcome_interrupt(&self, ctx: &StepContext, request: InterruptRequest) -> Res {
        let payload = request.payload.clone();
        Ok(match self.interrupt_at(ctx, OUTCOME_ORDINAL, request).await? {
            Err(flow) => flow,
            Ok(Decision::Approve) => Flow::Done(Arc::new(payload)),
            Ok(Decision::Modify { payload } | Decision::Respond { value: payload }) => Flow::Done(Arc::new(payload)),
            Ok(Decision::Reject { reason }) => Flow::Failed(StepError::new(
                ErrorCode::REJECTED,
                format!("the request was rejected{}", reason.map(|r| format!(": {r}")).unwrap_or_default()),
            )),
        })
    }

    async fn run_fork(&self, spec: &ForkSpec, path: &StepPath, input: Arc<Value>, scope: &Scope, env: &Env) -> Res {
        // The list of path inputs: static paths all get the fork's input; dynamic ones get
        // the computed items, journaled so that a resume fans out over the same list.
        let (bodies, inputs): (Vec<&[Node]>, Vec<Arc<Value>>) = match &spec.paths {
            ForkPaths::Static(paths) => (paths.iter().map(Vec::as_slice).collect(), vec![input; paths.len()]),
            ForkPaths::Dynamic { items, body } => {
                let items = self.decide_once(
                    path,
                    |choice| match choice {
                        Choice::Items { items } => Some(items.clone()),
                        _ => None,
                    },
                    || Ok(Choice::Items { items: items.eval(scope)? }),
                );
                let items = match items {
                    Ok(items) => items,
                    Err(error) => return Ok(Flow::Failed(error)),
                };
                (vec![body.as_slice(); items.len()], items.into_iter().map(Arc::new).collect())
            }
        };
        let count = inputs.len();
        if count == 0 {
            return Ok(Flow::Done(Arc::new(match spec.mode {
                ForkMode::Race => {
                    return Ok(Flow::Failed(StepError::new(ErrorCode::ALL_PATHS_FAILED, "the race had no paths")));
                }
                _ => match &spec.merge {
                    Some(merge) => match merge(Vec::new()) {
                        Ok(v) => v,
                        Err(e) => return Ok(Flow::Failed(e)),
                    },
                    None => json!([]),
                },
            })));
        }
        let decided_winner = if spec.mode == ForkMode::Race {
            match self.recorded_choice(path, |choice| match choice {
                Choice::Winner { winner } => Some(*winner),
                _ => None,
            }) {
                Ok(winner) => winner,
                Err(error) => return Ok(Flow::Failed(error)),
            }
        } else {
            None
        };
        let fork_cancel = env.cancel.child_token();
        let limit = spec.concurrency.unwrap_or(count).max(1);
        let mut results: Vec<Option<Flow>> = vec![None; count];
        let mut running = FuturesUnordered::new();
        let mut next = 0usize;
        let launch = |index: usize| {
            let body = bodies[index];
            let item = inputs[index].clone();
            let mut child = scope.child();
            if let Some(name) = &spec.item_name {
                child.bind_var(name, item.clone());
            }
            let child_env =
                Env { layers: env.layers.clone(), cancel: fork_cancel.child_token(), services: env.services.clone() };
            let path = path.index(index);
            async move {
                let result = self.exec_seq(body, &path, item, &mut child, &child_env).await;
                (index, result)
            }
        };
        let mut stop = false;
        let mut winner = None;
        let mut first_failure: Option<Flow> = None;
        while next < count && running.len() < limit {
            if decided_winner.is_some_and(|w| w != next) {
                results[next] = Some(Flow::Failed(StepError::cancelled("another path won the race")));
            } else {
                running.push(launch(next));
            }
            next += 1;
        }
        while let Some((index, result)) = running.next().await {
            let flow = result?;
            match (&flow, spec.mode) {
                (Flow::Done(_) | Flow::Skipped(_), ForkMode::Race) if winner.is_none() => {
                    winner = Some(index);
                    self.run.recorder.note(
                        path,
                        self.now(),
                        Record::Decided { choice: Choice::Winner { winner: index } },
                    );
                    fork_cancel.cancel();
                    stop = true;
                }
                (Flow::Failed(_) | Flow::Handoff(..), ForkMode::All) if first_failure.is_none() && !stop => {
                    // Fail fast: siblings see their tokens fire and are recorded as cancelled.
                    first_failure = Some(flow.clone());
                    fork_cancel.cancel();
                    stop = true;
                }
                _ => {}
            }
            results[index] = Some(flow);
            while next < count && running.len() < limit {
                if stop || decided_winner.is_some_and(|w| w != next) {
                    results[next] =
                        Some(Flow::Failed(StepError::cancelled("the fork stopped before this path started")));
                } else {
                    running.push(launch(next));
                }
                next += 1;
            }
        }
        drop(running);
        let results: Vec<Flow> = results.into_iter().map(|r| r.unwrap_or(Flow::Suspended)).collect();
        for (index, flow) in results.iter().enumerate() {
            if let Flow::Failed(e) = flow
                && e.is(&ErrorCode::CANCELLED)
                && fork_cancel.is_cancelled()
                && !env.cancel.is_cancelled()
            {
                self.run.recorder.note(&path.index(index), self.now(), Record::Cancelled { reason: e.message.clone() });
            }
        }
        if env.cancel.is_cancelled() {
            return Ok(Flow::Failed(StepError::cancelled("the fork was cancelled")));
        }
        let to_result = |flow: &Flow| match flow {
            Flow::Done(v) => PathResult::Completed((**v).clone()),
            Flow::Skipped(_) => PathResult::Completed(Value::Null),
            Flow::Failed(e) if e.is(&ErrorCode::CANCELLED) => PathResult::Cancelled,
            Flow::Failed(e) => PathResult::Failed(e.clone()),
            Flow::Suspended | Flow::Handoff(..) => PathResult::Cancelled,
        };
        let merged = |default: Value| -> Flow {
            match &spec.merge {
                Some(merge) => match merge(results.iter().map(to_result).collect()) {
                    Ok(value) => Flow::Done(Arc::new(value)),
                    Err(error) => Flow::Failed(error),
                },
                None => Flow::Done(Arc::new(default)),
            }
        };
        let suspended = results.iter().any(|f| matches!(f, Flow::Suspended));
        match spec.mode {
            ForkMode::All => {
                if let Some(failure) = first_failure {
                    return Ok(failure);
                }
                if suspended {
                    return Ok(Flow::Suspended);
                }
                let outputs: Vec<Value> = results
                    .iter()
                    .map(|f| match f {
                        Flow::Done(v) => (**v).clone(),
                        _ => Value::Null,
                    })
                    .collect();
                Ok(merged(Value::Array(outputs)))
            }
            ForkMode::Race => {
                if let Some(index) =
                    winner.or(decided_winner.filter(|w| matches!(results[*w], Flow::Done(_) | Flow::Skipped(_))))
                {
                    let output = match &results[index] {
                        Flow::Done(v) => (**v).clone(),
                        _ => Value::Null,
                    };
                    return Ok(merged(output));
                }
                if suspended {
                    return Ok(Flow::Suspended);
                }
                let messages: Vec<String> = results
                    .iter()
                    .enumerate()
                    .map(|(i, f)| match f {
                        Flow::Failed(e) => format!("path {i}: {e}"),
                        _ => format!("path {i}: did not complete"),
                    })
                    .collect();
                Ok(Flow::Failed(StepError::new(
                    ErrorCode::ALL_PATHS_FAILED,
                    format!("every path of the race failed ({})", messages.join("; ")),
                )))
            }
            ForkMode::Settle => {
                if suspended {
                    return Ok(Flow::Suspended);
                }
                let settled: Vec<Value> = results
                    .iter()
                    .map(|f| match f {
                        Flow::Done(v) => json!({ "status": "completed", "output": **v }),
                        Flow::Skipped(r) => json!({ "status": "skipped", "reason": r }),
                        Flow::Failed(e) => {
                            json!({ "status": "failed", "error": { "code": e.code, "message": e.message } })
                        }
                        Flow::Suspended | Flow::Handoff(..) => json!({ "status": "cancelled" }),
                    })
                    .collect();
                Ok(merged(Value::Array(settled)))
            }
        }
    }

    async fn run_loop(&self, spec: &LoopSpec, path: &StepPath, input: Arc<Value>, scope: &Scope, env: &Env) -> Res {
        let mut input = input;
        let mut last = input.clone();
        let mut iteration: u32 = 1;
        // `on_error: retry` runs the failed iteration again on the same message.
        let mut retry_message: Option<Value> = None;
        // The sequence number of the last message taken from the inbox.
        let mut last_seq: Option<u64> = None;
        loop {
            if iteration > spec.max_iterations {
                let reason = format!("max_iterations ({}) reached without a done verdict", spec.max_iterations);
                self.run.event(path, "loop.stopped", json!({ "iterations": spec.max_iterations, "reason": reason }));
                return Ok(match spec.on_max {
                    OnMaxIterations::Complete => Flow::Done(last),
                    OnMaxIterations::Fail => Flow::Failed(StepError::new(ErrorCode::MAX_ITERATIONS, reason)),
                });
            }
            let iteration_path = path.ordinal(u64::from(iteration));
            let mut child = scope.child();
            // `loop.input` is what this iteration starts from: the loop's input first, then the
            // last iteration's output (or `prepare_next`'s), so an iteration can build on the
            // one before it.
            let mut loop_var = json!({ "iteration": iteration, "input": input.as_ref() });
            if let Some(inbox) = &spec.inbox {
                let message_path = iteration_path.join("@inbox");
                let recorded = self.recorded_choice(&message_path, |choice| match choice {
                    Choice::Message { message, seq } => Some((message.clone(), *seq)),
                    _ => None,
                });
                let message = match recorded {
                    Err(error) => return Ok(Flow::Failed(error)),
                    Ok(Some((message, seq))) => {
                        if seq.is_some() {
                            last_seq = seq;
                        }
                        message
                    }
                    Ok(None) => {
                        let message = match retry_message.take() {
                            Some(message) => Some(message),
                            None => {
                                match self.receive(inbox, spec.park_timeout.unwrap_or_default(), last_seq, env).await? {
                                    Ok(Some((seq, message))) => {
                                        last_seq = Some(seq);
                                        Some(message)
                                    }
                                    Ok(None) => None,
                                    Err(flow) => return Ok(flow),
                                }
                            }
                        };
                        // A consumed message is durable before the body sees it.
                        let decided =
                            Record::Decided { choice: Choice::Message { message: message.clone(), seq: last_seq } };
                        self.run.recorder.commit(&message_path, self.now(), decided).await?;
                        message
                    }
                };
                match message {
                    Some(message) if !message.is_null() => loop_var["message"] = message,
                    _ => {
                        let reason = format!("no message on inbox {inbox:?} within the park timeout");
                        self.run.event(path, "loop.stopped", json!({ "iterations": iteration - 1, "reason": reason }));
                        return Ok(Flow::Done(last));
                    }
                }
            }
            let message = loop_var.get("message").cloned();
            child.bind_var("loop", Arc::new(loop_var));
            match self.exec_seq(&spec.body, &iteration_path, input.clone(), &mut child, env).await? {
                Flow::Done(value) => last = value,
                Flow::Skipped(_) => last = null(),
                Flow::Failed(error) if !(error.is(&ErrorCode::CANCELLED) && env.cancel.is_cancelled()) => {
                    match spec.on_error {
                        LoopOnError::Abort => return Ok(Flow::Failed(error)),
                        LoopOnError::Retry | LoopOnError::Skip => {
                            self.run.event(
                            &iteration_path,
                            "loop.iteration_failed",
                            json!({ "iteration": iteration, "error": { "code": error.code, "message": error.message }, "then": spec.on_error }),
                        );
                            if spec.on_error == LoopOnError::Retry {
                                // Same input, same message: the iteration is done again.
                                retry_message = message;
                            } else if let Some(next) = &spec.prepare_next {
                                // Skip: move on as if the iteration had finished.
                                match next.eval(&child) {
                                    Ok(value) => input = Arc::new(value),
                                    Err(error) => return Ok(Flow::Failed(error)),
                                }
                            }
                            iteration += 1;
                            continue;
                        }
                    }
                }
                other => return Ok(other),
            }
            let verdict = self.decide_once(
                &iteration_path,
                |choice| match choice {
                    Choice::Verdict { done, reason } => Some(Verdict { done: *done, reason: reason.clone() }),
                    _ => None,
                },
                || {
                    let verdict = match &spec.until {
                        Some(until) => until.eval(&child)?,
                        None => Verdict::again("no until condition"),
                    };
                    Ok(Choice::Verdict { done: verdict.done, reason: verdict.reason })
                },
            );
            let verdict = match verdict {
                Ok(verdict) => verdict,
                Err(error) => return Ok(Flow::Failed(error)),
            };
            if verdict.done {
                self.run.event(path, "loop.stopped", json!({ "iterations": iteration, "reason": verdict.reason }));
                return Ok(Flow::Done(last));
            }
            input = match &spec.prepare_next {
                Some(next) => match next.eval(&child) {
                    Ok(value) => Arc::new(value),
                    Err(error) => return Ok(Flow::Failed(error)),
                },
                None => last.clone(),
            };
            iteration += 1;
        }
    }

    /// Waits for the next inbox message after `after`, up to `park`: from the store (so
    /// messages survive crashes and come from any process), woken at once by a send in this
    /// process and otherwise polling.
    async fn receive(
        &self,
        inbox: &str,
        park: std::time::Duration,
        after: Option<u64>,
        env: &Env,
    ) -> Result<Result<Option<(u64, Value)>, Flow>, StoreFailed> {
        let deadline = self.now().plus(park);
        let store = self.run.recorder.store();
        loop {
            let notified = self.run.mailboxes.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            match store.next_message(self.run.run_id, inbox, after).await {
                Ok(Some(found)) => return Ok(Ok(Some(found))),
                Ok(None) => {}
                Err(error) => return Err(StoreFailed(error)),
            }
            let now = self.now();
            if now >= deadline {
                return Ok(Ok(None));
            }
            let wait = deadline.since(now).min(MAILBOX_POLL);
            tokio::select! {
                () = &mut notified => {}
                () = self.run.clock.sleep(wait) => {}
                () = env.cancel.cancelled() => {
                    return Ok(Err(Flow::Failed(StepError::cancelled("cancelled while parked on an inbox"))));
                }
            }
        }
    }

    /// The newest wake-up stored on an `every` wake inbox after `after`, if any: several
    /// waiting wake-ups start one tick.
    async fn pending_wake(&self, inbox: &str, after: Option<u64>) -> Result<Option<u64>, StoreFailed> {
        let store = self.run.recorder.store();
        let mut newest = None;
        while let Some((seq, _)) =
            store.next_message(self.run.run_id, inbox, newest.or(after)).await.map_err(StoreFailed)?
        {
            newest = Some(seq);
        }
        Ok(newest)
    }

    /// Waits for a wake-up on an `every` wake inbox after `after`: at once when it is sent
    /// in this process, within the poll interval when another process sends it.
    async fn wait_for_wake(&self, inbox: &str, after: Option<u64>) -> Result<u64, StoreFailed> {
        loop {
            let notified = self.run.mailboxes.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(seq) = self.pending_wake(inbox, after).await? {
                return Ok(seq);
            }
            tokio::select! {
                () = &mut notified => {}
                () = self.run.clock.sleep(MAILBOX_POLL) => {}
            }
        }
    }

    async fn run_graph(&self, spec: &GraphSpec, path: &StepPath, input: Arc<Value>, scope: &Scope, env: &Env) -> Res {
        let by_name: HashMap<&str, &Node> = spec.nodes.iter().map(|n| (&*n.id, n)).collect();
        let mut current: String = spec.entry.clone().unwrap_or_else(|| spec.nodes[0].id.to_string());
        let mut visits: HashMap<String, u64> = HashMap::new();
        let mut child = scope.child();
        let mut input = input;
        let mut last: Arc<Value>;
        let mut step: u32 = 0;
        loop {
            step += 1;
            if step > spec.max_steps {
                return Ok(Flow::Failed(StepError::new(
                    ErrorCode::MAX_STEPS,
                    format!("the graph took more than max_steps ({}) steps; last node {current:?}", spec.max_steps),
                )));
            }
            let Some(node) = by_name.get(current.as_str()).copied() else {
                return Ok(Flow::Failed(StepError::new(
                    ErrorCode::UNKNOWN_HANDOFF_TARGET,
                    format!("graph has no node {current:?}"),
                )));
            };
            let visit = visits.entry(current.clone()).or_default();
            *visit += 1;
            let node_path = path.join(&node.id).ordinal(*visit);
            match self.exec_node(node, node_path, input.clone(), &mut child, env).await? {
                Flow::Done(value) => {
                    child.bind_output(&node.id, value.clone());
                    last = value.clone();
                    input = value;
                }
                Flow::Skipped(_) => {
                    child.bind_output(&node.id, null());
                    last = null();
                    input = null();
                }
                Flow::Handoff(target, payload) if by_name.contains_key(target.as_str()) => {
                    current = target;
                    input = payload;
                    continue;
                }
                other => return Ok(other),
            }
            let decision_path = path.ordinal(u64::from(step));
            let next = self.decide_once(
                &decision_path,
                |choice| match choice {
                    Choice::Next { next } => Some(next.clone()),
                    _ => None,
                },
                || {
                    for edge in spec.edges.iter().filter(|e| e.from == current) {
                        let take = match &edge.when {
                            None => true,
                            Some(when) => when.eval(&child)?,
                        };
                        if take {
                            return Ok(Choice::Next { next: Some(edge.to.clone()) });
                        }
                    }
                    Ok(Choice::Next { next: None })
                },
            );
            match next {
                Ok(Some(next)) => current = next,
                Ok(None) => return Ok(Flow::Done(last)),
                Err(error) => return Ok(Flow::Failed(error)),
            }
        }
    }

    async fn run_every(
        &self,
        spec: &crate::definition::EverySpec,
        path: &StepPath,
        input: Arc<Value>,
        scope: &Scope,
        env: &Env,
    ) -> Res {
        let mut tick: u64 = 1;
        let mut due = self.now();
        let wake_inbox = spec.wake.as_deref().map(crate::engine::wake_inbox);
        // The sequence number of the last wake-up taken, journaled with the tick it started.
        let mut last_wake: Option<u64> = None;
        loop {
            let tick_path = path.ordinal(tick);
            let due_path = tick_path.join("@due");
            let recorded = self.recorded_choice(&due_path, |choice| match choice {
                Choice::Due { at, wake } => Some((*at, *wake)),
                _ => None,
            });
            let started = match recorded {
                Err(error) => return Ok(Flow::Failed(error)),
                Ok(Some((at, wake))) => {
                    if wake.is_some() {
                        last_wake = wake;
                    }
                    at
                }
                Ok(None) => {
                    let now = self.now();
                    let mut woken_by = None;
                    if due > now {
                        // A wake-up already waiting (sent while the last tick ran, or while
                        // this run was suspended) starts the tick at once.
                        if let Some(inbox) = &wake_inbox {
                            woken_by = self.pending_wake(inbox, last_wake).await?;
                        }
                        if woken_by.is_none() {
                            if due.since(now) > self.run.config.in_process_wait_limit {
                                if let Some(inbox) = &wake_inbox {
                                    self.run.note_wake_check(inbox.clone(), last_wake);
                                }
                                self.run.note_wake_at(due);
                                self.run.recorder.flush().await?;
                                return Ok(Flow::Suspended);
                            }
                            let woken = async {
                                match &wake_inbox {
                                    Some(inbox) => self.wait_for_wake(inbox, last_wake).await,
                                    None => std::future::pending().await,
                                }
                            };
                            tokio::select! {
                                () = self.run.clock.sleep_until(due) => {}
                                found = woken => woken_by = Some(found?),
                                () = env.cancel.cancelled() => return Ok(Flow::Failed(StepError::cancelled("every was cancelled"))),
                            }
                        }
                    }
                    let at = self.now();
                    if woken_by.is_some() {
                        last_wake = woken_by;
                    }
                    self.run.recorder.note(
                        &due_path,
                        at,
                        Record::Decided { choice: Choice::Due { at, wake: woken_by } },
                    );
                    at
                }
            };
            if env.cancel.is_cancelled() {
                return Ok(Flow::Failed(StepError::cancelled("every was cancelled")));
            }
            let mut child = scope.child();
            child.bind_var("tick", Arc::new(json!(tick)));
            match self.exec_seq(&spec.body, &tick_path, input.clone(), &mut child, env).await? {
                Flow::Done(_) | Flow::Skipped(_) => {}
                Flow::Failed(error) if !(error.is(&ErrorCode::CANCELLED) && env.cancel.is_cancelled()) => {
                    match spec.on_error {
                        EveryOnError::Fail => return Ok(Flow::Failed(error)),
                        EveryOnError::Continue => self.run.event(
                            &tick_path,
                            "every.tick_failed",
                            json!({ "tick": tick, "error": { "code": error.code, "message": error.message } }),
                        ),
                    }
                }
                other => return Ok(other),
            }
            let factor =
                if spec.jitter == 0.0 { 1.0 } else { 1.0 + spec.jitter * (2.0 * self.run.entropy.next_f64() - 1.0) };
            due = started.plus(spec.interval.mul_f64(factor));
            tick += 1;
        }
    }
}
