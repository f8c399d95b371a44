//! The `agent` step: a ReAct loop. The model is called with the agent's tools; the tool
//! calls it asks for run (in parallel when it asks for several), their results go back to
//! it, and so on until it answers without calling a tool. Every model call and every tool
//! call is its own journaled sub-step (`turn.N/model`, `turn.N/tool.M`), so a crash
//! mid-agent resumes at the first unfinished call and never pays for a finished one again.
//!
//! Budgets (tokens, cost, iterations, wall time, delegation depth) end the run with
//! `budget_exceeded`; stuck detection ends, fails or escalates it; tools that need approval
//! open an interrupt before they run; agents delegate to other agents (a tool call whose
//! result is the other agent's answer) or hand off to them (one way).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use futures_util::future::BoxFuture;
use serde_json::{Value, json};
use stepwright_core::{DynStep, ErrorCode, Event, Outcome, StepContext, StepError, StepPath};
use tokio::time::Instant;

mod conversation;
mod spec;
mod tools;

pub use spec::{AgentHooks, AgentSpec, Agents, Budget, HookEvent, OnStuck, STUCK_RETRIES, ToolHooks};

use crate::memory::Sessions;
use crate::models::Models;
use crate::step::messages;
use crate::tools::{Tools, model_name};
use crate::types::{ChatResponse, Message, ToolSpec};
use tools::Target;

/// A budget (tokens, cost, iterations, wall time, delegation depth) ran out.
pub const BUDGET_EXCEEDED: ErrorCode = ErrorCode::from_static("budget_exceeded");
/// An agent went `stuck_after` iterations without a successful tool call and its
/// `on_stuck` is `fail` (or the person it escalated to rejected going on).
pub const AGENT_STUCK: ErrorCode = ErrorCode::from_static("agent_stuck");

/// The error code of an agent that answered with nothing (no text, no tool call), also
/// after its repair turns.
pub const AGENT_EMPTY_ANSWER: ErrorCode = ErrorCode::from_static("agent_empty_answer");

/// Event kinds an agent journals (besides `model.call` and `tool.call`).
pub const AGENT_STARTED_EVENT: &str = "agent.started";
/// The agent answered.
pub const AGENT_COMPLETED_EVENT: &str = "agent.completed";
/// The agent was found stuck.
pub const AGENT_STUCK_EVENT: &str = "agent.stuck";
/// The agent handed the conversation to another agent.
pub const AGENT_HANDOFF_EVENT: &str = "agent.handoff";
/// One tool call ran.
pub const TOOL_CALL_EVENT: &str = "tool.call";

/// The `agent` step. Its input is a prompt (a string or `{ "prompt": … }`) or a conversation
/// (`{ "messages": [...] }`); it needs [`Models`], [`Tools`] if it has tools, and [`Agents`]
/// if it delegates, hands off or has hooks.
///
/// With a `"session": "ID"` in its input (and the [`Sessions`] service), the agent continues
/// that session: its history (at most `max_stored_messages`) comes before the new messages,
/// and when the agent answers, the messages this run added (the input, tool calls and
/// results, the answer; not the system prompt) are appended to it. Loading and saving are
/// the journaled sub-steps `session.load` and `session.save`; a session owned by another
/// user or tenant fails the step with `access_denied`. An agent that fails saves nothing.
pub struct AgentStep {
    spec: AgentSpec,
    /// The kind and the whole spec: what the definition hash covers.
    identity: String,
    /// Its output schema, compiled once (not for every answer).
    validator: Option<Arc<jsonschema::Validator>>,
}

impl AgentStep {
    /// A step running this agent.
    pub fn new(spec: AgentSpec) -> Arc<Self> {
        // The configuration is part of the step's identity, so of the definition hash.
        let identity = format!("agent {}", serde_json::to_string(&spec).expect("a spec serializes"));
        let validator = output_validator(&spec);
        Arc::new(Self { spec, identity, validator })
    }
}

/// An agent's output schema, compiled; `None` without one (or with one that does not compile:
/// each answer then says why).
fn output_validator(spec: &AgentSpec) -> Option<Arc<jsonschema::Validator>> {
    spec.output.as_ref().and_then(|schema| jsonschema::validator_for(schema).ok()).map(Arc::new)
}

impl DynStep for AgentStep {
    fn run<'a>(&'a self, ctx: &'a StepContext, input: Arc<Value>) -> BoxFuture<'a, Result<Outcome<Value>, StepError>> {
        Box::pin(async move {
            let (input, session) = split_session(&input)?;
            let mut conversation = messages(self.spec.instructions.as_deref(), &input)?;
            let sessions = match &session {
                Some(_) => Some(ctx.require::<Sessions>().map_err(|e| {
                    StepError::execution_failed(format!(
                        "agent {:?} was given a session: {}",
                        self.spec.name, e.message
                    ))
                })?),
                None => None,
            };
            let max_stored =
                sessions.as_ref().map(|s| self.spec.max_stored_messages.unwrap_or(s.default_max_stored_messages()));
            // The session's history goes after the system prompt, before the new messages.
            let mut earlier = 0;
            if let (Some(id), Some(sessions), Some(limit)) = (&session, &sessions, max_stored) {
                let history = sessions.load(ctx, id, limit).await?;
                let history: Vec<Message> =
                    history
                        .into_iter()
                        .map(serde_json::from_value)
                        .collect::<Result<_, _>>()
                        .map_err(|e| StepError::execution_failed(format!("reading session {id:?}'s history: {e}")))?;
                earlier = history.len();
                let at = conversation.iter().take_while(|m| matches!(m, Message::System { .. })).count();
                conversation.splice(at..at, history);
            }
            let run = AgentRun {
                ctx,
                models: ctx.require::<Models>()?,
                tools: ctx.service::<Tools>(),
                agents: ctx.service::<Agents>(),
                budget: &self.spec.budget,
                spent: Mutex::new(Spent::default()),
                started: Instant::now(),
                own_validator: self.validator.clone(),
            };
            let (answer, conversation) = run.run(self.spec.clone(), StepPath::root(), 0, conversation).await?;
            if let (Some(id), Some(sessions), Some(limit)) = (&session, &sessions, max_stored) {
                // Handoffs only change system prompts, so the non-system messages are the
                // history followed by what this run added.
                let added: Vec<Value> = conversation
                    .iter()
                    .filter(|m| !matches!(m, Message::System { .. }))
                    .skip(earlier)
                    .map(|m| serde_json::to_value(m).expect("a message serializes"))
                    .collect();
                sessions.save(ctx, id, added, limit).await?;
            }
            Ok(Outcome::completed(answer))
        })
    }

    fn type_name(&self) -> &str {
        "agent"
    }

    fn identity(&self) -> std::borrow::Cow<'_, str> {
        std::borrow::Cow::Borrowed(&self.identity)
    }

    fn output_schema(&self) -> Option<Value> {
        self.spec.output.clone()
    }
}

#[derive(Default)]
struct Spent {
    tokens: u64,
    cost_usd: f64,
    iterations: u32,
}

/// One execution of an agent step: what it may spend and has spent, shared with the agents
/// it delegates to. Rebuilt from the served sub-steps on every execution, so the same after
/// a crash.
struct AgentRun<'a> {
    ctx: &'a StepContext,
    models: Arc<Models>,
    tools: Option<Arc<Tools>>,
    agents: Option<Arc<Agents>>,
    budget: &'a Budget,
    spent: Mutex<Spent>,
    started: Instant,
    /// The step's own agent's output schema, compiled when the step was made.
    own_validator: Option<Arc<jsonschema::Validator>>,
}

fn exceeded(message: String) -> StepError {
    StepError::new(BUDGET_EXCEEDED, message)
}

fn text_of(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// Errors that end the step rather than becoming a result the model sees: the run is
/// suspending, being cancelled, could not record, or spent its budget.
fn ends_the_step(error: &StepError) -> bool {
    error.is_control_flow() || error.is(&ErrorCode::EXECUTION_FAILED) || error.is(&BUDGET_EXCEEDED)
}

impl AgentRun<'_> {
    fn hooks(&self) -> &[Arc<dyn AgentHooks>] {
        self.agents.as_deref().map_or(&[], |a| &a.hooks)
    }

    fn agent(&self, name: &str, by: &str) -> Result<AgentSpec, StepError> {
        self.agents.as_deref().and_then(|a| a.get(name)).cloned().ok_or_else(|| {
            StepError::execution_failed(format!(
                "agent {by:?} names agent {name:?}, which is not registered (register it with `Agents::with`)"
            ))
        })
    }

    fn check_time(&self, agent: &str) -> Result<(), StepError> {
        if let Some(limit) = self.budget.wall_time_ms {
            let elapsed = self.started.elapsed();
            if elapsed.as_millis() > u128::from(limit) {
                return Err(exceeded(format!(
                    "agent {agent:?} ran {elapsed:?}, over its wall-time budget of {limit} ms"
                )));
            }
        }
        Ok(())
    }

    fn charge_iteration(&self, agent: &str) -> Result<(), StepError> {
        let mut spent = self.spent.lock().expect("poisoned");
        spent.iterations += 1;
        if let Some(limit) = self.budget.iterations
            && spent.iterations > limit
        {
            return Err(exceeded(format!(
                "agent {agent:?} needs model call {} over a budget of {limit}",
                spent.iterations
            )));
        }
        Ok(())
    }

    fn charge_usage(&self, agent: &str, binding: &str, response: &ChatResponse) -> Result<(), StepError> {
        let mut spent = self.spent.lock().expect("poisoned");
        spent.tokens += response.usage.total();
        if let Some(pricing) = self.models.pricing(binding) {
            spent.cost_usd += pricing.cost(response.usage);
        }
        if let Some(limit) = self.budget.tokens
            && spent.tokens > limit
        {
            return Err(exceeded(format!("agent {agent:?} used {} tokens, over its budget of {limit}", spent.tokens)));
        }
        if let Some(limit) = self.budget.cost_usd
            && spent.cost_usd > limit
        {
            return Err(exceeded(format!("agent {agent:?} spent ${:.6}, over its budget of ${limit}", spent.cost_usd)));
        }
        Ok(())
    }

    /// The tools the model is offered, and what each name it may answer with stands for.
    fn offer(&self, agent: &AgentSpec) -> Result<(Vec<ToolSpec>, BTreeMap<String, Target>), StepError> {
        let mut specs = Vec::new();
        let mut targets = BTreeMap::new();
        if !agent.tools.is_empty() {
            let tools = self.tools.as_deref().ok_or_else(|| {
                StepError::execution_failed(format!(
                    "agent {:?} has tools but the engine has no `Tools` service",
                    agent.name
                ))
            })?;
            for name in &agent.tools {
                let spec = tools.spec(name).ok_or_else(|| {
                    StepError::execution_failed(format!(
                        "agent {:?} names tool {name:?}, which is not registered (registered: {})",
                        agent.name,
                        tools.names().join(", ")
                    ))
                })?;
                targets.insert(spec.name.clone(), Target::Tool(name.clone()));
                specs.push(spec);
            }
        }
        for name in &agent.delegates {
            let other = self.agent(name, &agent.name)?;
            let tool = format!("delegate_to_{}", model_name(name));
            specs.push(ToolSpec {
                name: tool.clone(),
                description: format!(
                    "Ask agent {name} to do a task and get its answer. {}",
                    other.description.as_deref().unwrap_or_default()
                ),
                parameters: json!({
                    "type": "object", "required": ["task"], "additionalProperties": false,
                    "properties": { "task": { "type": "string", "description": "The task; the agent sees only this." } }
                }),
            });
            targets.insert(tool, Target::Delegate(other));
        }
        for name in &agent.handoffs {
            let other = self.agent(name, &agent.name)?;
            let tool = format!("handoff_to_{}", model_name(name));
            specs.push(ToolSpec {
                name: tool.clone(),
                description: format!(
                    "Hand this conversation over to agent {name} for good; it answers from here on. {}",
                    other.description.as_deref().unwrap_or_default()
                ),
                parameters: json!({
                    "type": "object", "additionalProperties": false,
                    "properties": { "note": { "type": "string", "description": "What the next agent should know." } }
                }),
            });
            targets.insert(tool, Target::Handoff(other));
        }
        Ok((specs, targets))
    }

    /// Calls the agent's hook tool for `moment` (`start`, `complete`, `stuck`), if it has
    /// one, as the journaled sub-step `hook.<moment>.<ordinal>` below `prefix`: served on
    /// resume, fenced by the tool's effect like any tool call. Its failure fails the step.
    async fn call_hook(
        &self,
        agent: &AgentSpec,
        prefix: &StepPath,
        moment: &str,
        ordinal: u32,
        detail: Value,
    ) -> Result<(), StepError> {
        let Some((_, tool)) = agent.hooks.tools().find(|(m, _)| *m == moment) else { return Ok(()) };
        let ctx = self.ctx;
        let missing = || {
            StepError::new(
                crate::tools::TOOL_NOT_FOUND,
                format!("agent {:?}'s {moment} hook calls tool {tool:?}, which is not registered", agent.name),
            )
        };
        let tools = self.tools.as_deref().ok_or_else(missing)?;
        let def = tools.get(tool).ok_or_else(missing)?.def();
        let kind = stepwright_core::CallKind::Action { effect: def.effect, safe_to_retry: def.safe_to_retry };
        let path = prefix.sub(&format!("hook.{moment}"), u64::from(ordinal));
        let args = json!({ "agent": agent.name, "hook": moment, "detail": detail });
        ctx.call(path.as_str(), kind, |info| async move {
            let cx = crate::tools::ToolContext {
                step: ctx.clone(),
                idempotency_key: info.idempotency_key,
                call_path: Some(info.path.clone()),
            };
            tools.invoke(tool, cx, args).await
        })
        .await
        .map(drop)
    }

    fn started_event(&self, agent: &AgentSpec, prefix: &StepPath, iteration: u32) {
        let detail = json!({ "agent": agent.name, "at": prefix.as_str() });
        self.ctx.emit(Event::new(AGENT_STARTED_EVENT, detail.clone()));
        for hook in self.hooks() {
            hook.on_start(&HookEvent { agent: &agent.name, ctx: self.ctx, iteration, detail: &detail });
        }
    }

    fn completed_event(&self, agent: &AgentSpec, prefix: &StepPath, iteration: u32, answer: &Value) {
        self.ctx.emit(Event::new(
            AGENT_COMPLETED_EVENT,
            json!({ "agent": agent.name, "at": prefix.as_str(), "iterations": iteration }),
        ));
        for hook in self.hooks() {
            hook.on_complete(&HookEvent { agent: &agent.name, ctx: self.ctx, iteration, detail: answer });
        }
    }
}

/// Takes the `session` id out of an agent step's input, leaving the prompt or messages.
fn split_session(input: &Value) -> Result<(Value, Option<String>), StepError> {
    let Value::Object(fields) = input else { return Ok((input.clone(), None)) };
    let Some(session) = fields.get("session") else { return Ok((input.clone(), None)) };
    let Value::String(session) = session else {
        return Err(StepError::new(
            ErrorCode::INPUT_VALIDATION,
            format!("an agent's `session` must be a string id, not {session}"),
        ));
    };
    let mut rest = fields.clone();
    rest.remove("session");
    Ok((Value::Object(rest), Some(session.clone())))
}

#[cfg(test)]
mod tests {
    use stepwright_core::DynStep;

    use super::{AgentSpec, AgentStep};

    /// People see the kind; the definition hash sees the kind and the whole spec, in the
    /// form stored runs were pinned with.
    #[test]
    fn an_agent_step_is_named_by_kind_and_identified_by_its_spec() {
        let step = AgentStep::new(AgentSpec::new("triage", "fast"));
        assert_eq!(step.type_name(), "agent");
        let identity = step.identity();
        assert!(identity.starts_with("agent {"), "{identity}");
        assert!(identity.contains(r#""name":"triage""#) && identity.contains(r#""model":"fast""#), "{identity}");
    }
}
