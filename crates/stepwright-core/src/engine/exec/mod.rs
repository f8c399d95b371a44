//! The walk: executes a definition tree on one task, journaling every step execution through
//! the recorder and serving recorded results on resume. Fan-out (fork, map) runs its paths
//! concurrently on the same task; nothing here spawns.

mod attempt;
mod branch;
mod every;
mod fork;
mod graph;
mod leaf;
mod loops;
mod mailbox;
mod subworkflow;
mod wait;

pub(crate) use wait::first_logged_event;

use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::context::{ContextParts, StepContext};
use crate::definition::{InputSource, Node, NodeKind};
use crate::error::{ErrorCode, StepError};
use crate::ids::{StepPath, Timestamp};
use crate::journal::{Choice, Record};
use crate::outcome::{Decision, InterruptRequest};
use crate::policy::{GuardrailStage, apply_guardrails};
use crate::recording::{RunShared, StoreFailed};
use crate::scope::Scope;
use crate::services::{ProvidedLayers, Services, StepStatus};

/// The node being executed and where: what the attempt, failure and dispatch functions
/// share (the input and the attempt number vary within one frame, so they travel apart).
pub(crate) struct Frame<'a> {
    pub(crate) node: &'a Node,
    pub(crate) path: &'a StepPath,
    pub(crate) scope: &'a mut Scope,
    pub(crate) env: &'a Env,
}

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

/// The shared `null` output (skipped steps, sleeps), allocated once.
fn null() -> Arc<Value> {
    static NULL: std::sync::OnceLock<Arc<Value>> = std::sync::OnceLock::new();
    NULL.get_or_init(|| Arc::new(Value::Null)).clone()
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
        let frame = &mut Frame { node, path: &path, scope, env };
        {
            let replay = &self.run.replay;
            let class = node.served_as();
            let log = replay.path(&path, class);
            if let Some(log) = log {
                if let Some(value) = replay.completed_output(&path, class) {
                    self.run.served.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    // A write a recompute serves, whose input would now differ: it is not
                    // executed, and the report says what it would have been given (its input
                    // as the attempt gets it: through its input guardrails; behind an approval
                    // gate, the served decision may have replaced it, so nothing is claimed).
                    if let Some(then) = replay.served_effect_input(&path)
                        && node.policy.approval.is_none()
                        && let Ok(now) = self.resolve_input(node, previous.clone(), frame.scope)
                        && let Ok((now, _)) = apply_guardrails(&node.policy.guardrails, GuardrailStage::Input, now)
                        && crate::ContentHash::of_value(&now) != then
                    {
                        self.run.would_execute(&path, &now);
                    }
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
                match condition.eval(frame.scope) {
                    Ok(true) => {}
                    Ok(false) => {
                        let reason = "condition is false".to_owned();
                        self.run.recorder.note(&path, self.now(), Record::Skipped { reason: reason.clone() });
                        self.finished(&path, StepStatus::Skipped);
                        return Ok(Flow::Skipped(reason));
                    }
                    Err(error) => {
                        return self.fail(frame, error, null(), 1).await;
                    }
                }
            }
            let mut input = match self.resolve_input(node, previous, frame.scope) {
                Ok(input) => input,
                Err(error) => return self.fail(frame, error, null(), 1).await,
            };
            if let Some(schema) = &node.input_schema
                && let Err(error) = schema.check(&input, ErrorCode::INPUT_VALIDATION, "the input")
            {
                return self.fail(frame, error, input, 1).await;
            }
            if !policy.guardrails.is_empty() {
                match apply_guardrails(&policy.guardrails, GuardrailStage::Input, input.clone()) {
                    Ok((value, warnings)) => {
                        self.warn(&path, &warnings);
                        input = value;
                    }
                    Err(error) => return self.fail(frame, error, input, 1).await,
                }
            }
            if let Some(gate) = &policy.approval {
                let ctx = self.context(&path, 0, frame.scope, env, None);
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
                        return self.fail(frame, error, input, 1).await;
                    }
                }
            }
            let cache_key = if policy.cache { Some(self.cache_key(node, &input)) } else { None };
            if let Some(key) = &cache_key
                && let Some(value) = self.cached(&path, key).await
            {
                return self.complete(&path, 1, Arc::new(value), true).await;
            }
            let served_as = node.served_as();
            // An experiment's fresh run: a past run gave this step the same input; its answer
            // is served, not the effect performed again.
            if matches!(node.kind, NodeKind::Step(_))
                && let Some((source, value)) = self.run.replay.recorded_answer(&path, served_as, &input)
            {
                self.run.served_recorded(&path, 1, crate::ContentHash::of_value(&input), source).await?;
                self.run.served.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                return self.complete(&path, 1, value, false).await;
            }
            // A write the original run never ran here (a new step, a new map item): a sandbox
            // does not perform it; the report shows the input it would have been given.
            if matches!(node.kind, NodeKind::Step(_)) && self.run.replay.refuses_anew(served_as) {
                self.run.would_execute(&path, &input);
                let (effect, _) = served_as;
                let effect = format!("{effect:?}").to_lowercase();
                let error = StepError::new(
                    ErrorCode::NOT_EXECUTED,
                    if self.run.replay.serves_recorded() {
                        format!(
                            "{path} is a {effect} step no recorded run gave this input: an experiment's fresh run \
                             does not execute it"
                        )
                    } else {
                        format!(
                            "{path} is a {effect} step the original run never ran here: a replay or recompute does \
                             not execute it"
                        )
                    },
                );
                return self.fail(frame, error, input, 1).await;
            }
            self.attempts(frame, input, cache_key).await
        }
    }

    async fn run_kind(&self, frame: &mut Frame<'_>, attempt: u32, input: Arc<Value>, key: Option<String>) -> Res {
        let Frame { node, path, env, .. } = *frame;
        match &node.kind {
            NodeKind::Step(step) => self.run_leaf(step.as_ref(), frame, attempt, input, key).await,
            NodeKind::Sequence(spec) => self.exec_seq(&spec.body, path, input, frame.scope, env).await,
            NodeKind::Provide(spec) => {
                let inner = Env {
                    layers: env.layers.with(&spec.layers),
                    cancel: env.cancel.clone(),
                    services: env.services.clone(),
                };
                self.exec_seq(&spec.body, path, input, frame.scope, &inner).await
            }
            NodeKind::Branch(spec) => {
                self.run_branch(&spec.arms, spec.otherwise.as_deref(), path, input, frame.scope, env).await
            }
            NodeKind::Fork(spec) => Box::pin(self.run_fork(spec, path, input, frame.scope, env)).await,
            NodeKind::Loop(spec) => Box::pin(self.run_loop(spec, path, input, frame.scope, env)).await,
            NodeKind::Graph(spec) => Box::pin(self.run_graph(spec, path, input, frame.scope, env)).await,
            NodeKind::Workflow(call) => {
                Box::pin(self.run_subworkflow(&call.workflow, call.spawn, path, input, frame.scope, env)).await
            }
            NodeKind::Every(spec) => Box::pin(self.run_every(spec, path, input, frame.scope, env)).await,
            NodeKind::Wait(spec) => self.run_wait(spec, path, frame.scope, env).await,
            NodeKind::Sleep(sleep) => {
                let ctx = self.context(path, attempt, frame.scope, env, None);
                match self.interrupt_at(&ctx, OUTCOME_ORDINAL, InterruptRequest::timer(sleep.duration)).await? {
                    Err(flow) => Ok(flow),
                    Ok(_) => Ok(Flow::Done(null())),
                }
            }
        }
    }

    fn context(&self, path: &StepPath, attempt: u32, scope: &Scope, env: &Env, key: Option<String>) -> StepContext {
        self.context_of(path, attempt, scope, env, key, None)
    }

    /// [`Exec::context`] for a leaf step, whose output guardrails redact what content
    /// capture puts on spans.
    fn context_of(
        &self,
        path: &StepPath,
        attempt: u32,
        scope: &Scope,
        env: &Env,
        key: Option<String>,
        guardrails: Option<&[crate::policy::Guardrail]>,
    ) -> StepContext {
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
            redaction: self.run.capture_content.and(guardrails).map(<[_]>::to_vec),
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
        let (suspends, failure) = ctx.take_pending();
        if suspends {
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
}
