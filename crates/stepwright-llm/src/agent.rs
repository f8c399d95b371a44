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

use futures_util::future::{BoxFuture, join_all};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use stepwright_core::{
    CallKind, Decision, DynStep, Effect, ErrorCode, Event, InterruptRequest, Outcome, StepContext, StepError,
};
use tokio::time::Instant;

use crate::memory::Sessions;
use crate::models::Models;
use crate::step::{Continues, call_model, messages, repair_prompt, structured};
use crate::tools::{ToolContext, Tools, model_name};
use crate::types::{ChatRequest, ChatResponse, Message, ModelParams, ToolCall, ToolChoice, ToolSpec};

/// A budget (tokens, cost, iterations, wall time, delegation depth) ran out.
pub const BUDGET_EXCEEDED: ErrorCode = ErrorCode::from_static("budget_exceeded");
/// An agent went `stuck_after` iterations without a successful tool call and its
/// `on_stuck` is `fail` (or the person it escalated to rejected going on).
pub const AGENT_STUCK: ErrorCode = ErrorCode::from_static("agent_stuck");

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

/// What an agent does when it is stuck.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum OnStuck {
    /// End with its last text as the answer.
    Stop,
    /// Fail with `agent_stuck`.
    #[default]
    Fail,
    /// Ask a person (an approval interrupt): approve to go on, modify with guidance (a
    /// string, or `{ "guidance": … }`) that the model is shown, reject to fail.
    Escalate,
}

/// Limits on what one agent step (with everything it delegates to) may spend. Exceeding
/// any is `budget_exceeded`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Budget {
    /// Prompt plus generated tokens, over every model call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    /// US dollars, over every model call of a priced binding.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// Model calls over the agent and the agents it delegates to or hands off to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iterations: Option<u32>,
    /// Milliseconds one execution of the step may run (time suspended waiting for a
    /// person, or before a crash, does not count).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wall_time_ms: Option<u64>,
    /// How deep delegation may nest (an agent delegating is depth 1).
    #[serde(default = "default_max_depth")]
    pub max_depth: u32,
}

fn default_max_depth() -> u32 {
    3
}

impl Default for Budget {
    fn default() -> Self {
        Self { tokens: None, cost_usd: None, iterations: None, wall_time_ms: None, max_depth: default_max_depth() }
    }
}

/// An agent's configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentSpec {
    /// Its name (for delegation, handoff, events and hooks).
    pub name: String,
    /// What it is for, shown to agents that can delegate or hand off to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The model binding.
    pub model: String,
    /// The system prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
    /// Names of registered tools it may call.
    #[serde(default)]
    pub tools: Vec<String>,
    /// Agents it may delegate a task to (each offered as a `delegate_to_NAME` tool whose
    /// result is that agent's answer).
    #[serde(default)]
    pub delegates: Vec<String>,
    /// Agents it may hand the conversation to for good (`handoff_to_NAME`).
    #[serde(default)]
    pub handoffs: Vec<String>,
    /// Model calls before it must have answered (counted over the conversation, including
    /// calls made by the agents that handed it over).
    #[serde(default = "default_max_iterations")]
    pub max_iterations: u32,
    /// Iterations in a row without a successful tool call after which it is stuck.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stuck_after: Option<u32>,
    /// What happens when it is stuck.
    #[serde(default)]
    pub on_stuck: OnStuck,
    /// Spending limits.
    #[serde(default)]
    pub budget: Budget,
    /// Sampling parameters.
    #[serde(default)]
    pub params: ModelParams,
    /// The JSON Schema its final answer must match; without one the answer is text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    /// How many times a non-matching final answer is shown its errors.
    #[serde(default = "default_repair_turns")]
    pub repair_turns: u32,
    /// Whether several tool calls of one turn run at once.
    #[serde(default = "default_true")]
    pub parallel_tool_calls: bool,
    /// Whether text streams to the step's token sink.
    #[serde(default = "default_true")]
    pub stream: bool,
    /// The most messages a session keeps when this agent saves to it (the newest); by
    /// default the [`Sessions`] service's cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_stored_messages: Option<usize>,
}

fn default_max_iterations() -> u32 {
    10
}

fn default_repair_turns() -> u32 {
    1
}

fn default_true() -> bool {
    true
}

impl AgentSpec {
    /// An agent on this model binding with defaults (10 iterations, no tools).
    pub fn new(name: &str, model: &str) -> Self {
        Self {
            name: name.to_owned(),
            description: None,
            model: model.to_owned(),
            instructions: None,
            tools: Vec::new(),
            delegates: Vec::new(),
            handoffs: Vec::new(),
            max_iterations: default_max_iterations(),
            stuck_after: None,
            on_stuck: OnStuck::default(),
            budget: Budget::default(),
            params: ModelParams::default(),
            output: None,
            repair_turns: default_repair_turns(),
            parallel_tool_calls: true,
            stream: true,
            max_stored_messages: None,
        }
    }
}

/// What a lifecycle hook is told.
#[derive(Debug, Clone, Copy)]
pub struct HookEvent<'a> {
    /// The agent.
    pub agent: &'a str,
    /// The step running it.
    pub ctx: &'a StepContext,
    /// Model calls made so far by this agent.
    pub iteration: u32,
    /// The answer (complete) or what happened (stuck).
    pub detail: &'a Value,
}

/// Lifecycle hooks, called as things happen. They are live notifications: after a crash or
/// a suspension the step runs again from the top and `on_start` is called again. What must
/// be durable is in the journal as `agent.*` events.
pub trait AgentHooks: Send + Sync + 'static {
    /// An agent began (or resumed) its loop.
    fn on_start(&self, _event: &HookEvent<'_>) {}
    /// An agent answered.
    fn on_complete(&self, _event: &HookEvent<'_>) {}
    /// An agent was found stuck.
    fn on_stuck(&self, _event: &HookEvent<'_>) {}
}

/// The agents an engine knows (for delegation and handoff) and the lifecycle hooks. Register
/// it as a service; an agent step without delegation or hooks does not need it.
#[derive(Default)]
pub struct Agents {
    specs: BTreeMap<String, AgentSpec>,
    hooks: Vec<Arc<dyn AgentHooks>>,
}

impl std::fmt::Debug for Agents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agents").field("names", &self.specs.keys().collect::<Vec<_>>()).finish_non_exhaustive()
    }
}

impl Agents {
    /// No agents.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) an agent.
    #[must_use]
    pub fn with(mut self, spec: AgentSpec) -> Self {
        self.specs.insert(spec.name.clone(), spec);
        self
    }

    /// Adds a lifecycle hook.
    #[must_use]
    pub fn hook(mut self, hook: Arc<dyn AgentHooks>) -> Self {
        self.hooks.push(hook);
        self
    }

    /// An agent by name.
    pub fn get(&self, name: &str) -> Option<&AgentSpec> {
        self.specs.get(name)
    }
}

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
    name: String,
}

impl AgentStep {
    /// A step running this agent.
    pub fn new(spec: AgentSpec) -> Arc<Self> {
        // The configuration is part of the step's identity, so of the definition hash.
        let name = format!("agent {}", serde_json::to_string(&spec).expect("a spec serializes"));
        Arc::new(Self { spec, name })
    }
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
            };
            let (answer, conversation) = run.run(self.spec.clone(), String::new(), 0, conversation).await?;
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
        &self.name
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
}

/// What a tool call the model asked for stands for.
enum Target {
    Tool(String),
    Delegate(AgentSpec),
    Handoff(AgentSpec),
}

/// One tool call's result, as the model will see it.
struct CallResult {
    message: Message,
    succeeded: bool,
}

fn exceeded(message: String) -> StepError {
    StepError::new(BUDGET_EXCEEDED, message)
}

fn result_message(call: &ToolCall, recorded: &Value) -> CallResult {
    let (content, is_error) = match recorded {
        Value::Object(o) if o.contains_key("ok") => (text_of(&o["ok"]), false),
        Value::Object(o) if o.contains_key("error") => {
            let error = &o["error"];
            (format!("error ({}): {}", text_of(&error["code"]), text_of(&error["message"])), true)
        }
        other => (text_of(other), false),
    };
    CallResult { message: Message::Tool { call_id: call.id.clone(), content, is_error }, succeeded: !is_error }
}

fn error_result(call: &ToolCall, message: impl Into<String>) -> CallResult {
    CallResult {
        message: Message::Tool { call_id: call.id.clone(), content: message.into(), is_error: true },
        succeeded: false,
    }
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

    /// The ReAct loop of one agent, at sub-step names under `prefix`.
    fn run(
        &self,
        spec: AgentSpec,
        prefix: String,
        depth: u32,
        mut conversation: Vec<Message>,
    ) -> BoxFuture<'_, Result<(Value, Vec<Message>), StepError>> {
        Box::pin(async move {
            let ctx = self.ctx;
            let mut agent = spec;
            let mut turn = 0u32;
            let mut iterations = 0u32;
            let mut since_success = 0u32;
            let mut repairs = 0u32;
            let mut problems = Vec::new();
            let mut escalations = 0u32;
            // The previous model call and how many messages it was sent, so each call's
            // input artifact holds only what is new.
            let mut earlier: Option<(String, usize)> = None;
            // What the agent is offered is the same every turn, until a handoff.
            let (mut specs, mut targets) = self.offer(&agent)?;
            self.started_event(&agent, &prefix, iterations);
            loop {
                if iterations >= agent.max_iterations {
                    return Err(exceeded(format!(
                        "agent {:?} made {iterations} model calls (max_iterations) without a final answer",
                        agent.name
                    )));
                }
                self.check_time(&agent.name)?;
                self.charge_iteration(&agent.name)?;
                let request = ChatRequest {
                    model: String::new(),
                    messages: conversation.clone(),
                    tool_choice: (!specs.is_empty()).then_some(ToolChoice::Auto),
                    tools: specs.clone(),
                    output: None,
                    params: agent.params.clone(),
                };
                let models = &self.models;
                let (binding, stream) = (agent.model.as_str(), agent.stream);
                let sent = conversation.len();
                let continues = earlier.as_ref().map(|(call, from)| Continues { call: call.as_str(), from: *from });
                let call = format!("{prefix}turn.{turn}/model");
                let recorded = ctx
                    .call(&call, CallKind::Input, |info| {
                        call_model(ctx, models, binding, stream, info.path, request, continues)
                    })
                    .await?;
                earlier = Some((ctx.path().join(&call).as_str().to_owned(), sent));
                let response: ChatResponse = serde_json::from_value((*recorded).clone())
                    .map_err(|e| StepError::execution_failed(format!("reading a recorded model answer: {e}")))?;
                iterations += 1;
                self.charge_usage(&agent.name, &agent.model, &response)?;

                if response.tool_calls.is_empty() {
                    let answer = match &agent.output {
                        None => Value::String(response.content.clone()),
                        Some(schema) => match structured(schema, &response.content) {
                            Ok(value) => value,
                            Err(found) if repairs < agent.repair_turns => {
                                repairs += 1;
                                conversation.push(response.to_message());
                                conversation.push(Message::user(repair_prompt(&found)));
                                problems = found;
                                turn += 1;
                                continue;
                            }
                            Err(found) => {
                                problems.extend(found);
                                return Err(StepError::new(
                                    ErrorCode::OUTPUT_VALIDATION,
                                    format!(
                                        "agent {:?}'s answer does not match its output schema after {repairs} repair turn(s): {}",
                                        agent.name,
                                        problems.join("; ")
                                    ),
                                ));
                            }
                        },
                    };
                    self.completed_event(&agent, &prefix, iterations, &answer);
                    conversation.push(response.to_message());
                    return Ok((answer, conversation));
                }

                conversation.push(response.to_message());
                let (results, handoff) =
                    self.tool_round(&agent, &prefix, turn, depth, &response.tool_calls, &targets).await?;
                if results.iter().any(|r| r.succeeded) {
                    since_success = 0;
                } else {
                    since_success += 1;
                }
                conversation.extend(results.into_iter().map(|r| r.message));
                turn += 1;

                if let Some((next, note)) = handoff {
                    ctx.emit(Event::new(
                        AGENT_HANDOFF_EVENT,
                        json!({ "from": agent.name, "to": next.name, "note": note, "turn": format!("{prefix}turn.{}", turn - 1) }),
                    ));
                    // The next agent keeps the conversation under its own instructions; the
                    // history is rewritten, so the next input artifact is whole again.
                    earlier = None;
                    conversation.retain(|m| !matches!(m, Message::System { .. }));
                    if let Some(instructions) = &next.instructions {
                        conversation.insert(0, Message::system(instructions.clone()));
                    }
                    // `iterations` is not reset: the conversation's model calls count against
                    // whichever agent holds it, so agents handing it back and forth still stop.
                    agent = next;
                    (specs, targets) = self.offer(&agent)?;
                    since_success = 0;
                    repairs = 0;
                    self.started_event(&agent, &prefix, iterations);
                    continue;
                }

                if let Some(limit) = agent.stuck_after
                    && since_success >= limit
                {
                    let detail = json!({
                        "agent": agent.name,
                        "iterations_without_success": since_success,
                        "turn": format!("{prefix}turn.{}", turn - 1),
                        "on_stuck": agent.on_stuck,
                    });
                    ctx.emit(Event::new(AGENT_STUCK_EVENT, detail.clone()));
                    for hook in self.hooks() {
                        hook.on_stuck(&HookEvent { agent: &agent.name, ctx, iteration: iterations, detail: &detail });
                    }
                    let stuck = || {
                        StepError::new(
                            AGENT_STUCK,
                            format!(
                                "agent {:?} made {since_success} iteration(s) in a row without a successful tool call",
                                agent.name
                            ),
                        )
                    };
                    match agent.on_stuck {
                        OnStuck::Fail => return Err(stuck()),
                        OnStuck::Stop => {
                            let answer = Value::String(response.content.clone());
                            self.completed_event(&agent, &prefix, iterations, &answer);
                            return Ok((answer, conversation));
                        }
                        OnStuck::Escalate => {
                            let request = InterruptRequest::approval(format!(
                                "Agent {} is stuck: {since_success} iteration(s) without a successful tool call. Approve to let it go on, modify with guidance for it, or reject to fail it.",
                                agent.name
                            ))
                            .payload(detail);
                            let name = format!("{prefix}turn.{}/escalate.{escalations}", turn - 1);
                            escalations += 1;
                            let resolution = ctx.interrupt_named(&name, request).await?;
                            match resolution.decision {
                                Decision::Approve => {}
                                Decision::Modify { payload } | Decision::Respond { value: payload } => {
                                    let guidance = payload.get("guidance").cloned().unwrap_or(payload);
                                    conversation
                                        .push(Message::user(format!("Guidance from a person: {}", text_of(&guidance))));
                                }
                                Decision::Reject { reason } => {
                                    let mut error = stuck();
                                    if let Some(reason) = reason {
                                        error.message.push_str(&format!("; the escalation was rejected: {reason}"));
                                    }
                                    return Err(error);
                                }
                            }
                            since_success = 0;
                        }
                    }
                }
            }
        })
    }

    fn started_event(&self, agent: &AgentSpec, prefix: &str, iteration: u32) {
        let detail = json!({ "agent": agent.name, "at": prefix.trim_end_matches('/') });
        self.ctx.emit(Event::new(AGENT_STARTED_EVENT, detail.clone()));
        for hook in self.hooks() {
            hook.on_start(&HookEvent { agent: &agent.name, ctx: self.ctx, iteration, detail: &detail });
        }
    }

    fn completed_event(&self, agent: &AgentSpec, prefix: &str, iteration: u32, answer: &Value) {
        self.ctx.emit(Event::new(
            AGENT_COMPLETED_EVENT,
            json!({ "agent": agent.name, "at": prefix.trim_end_matches('/'), "iterations": iteration }),
        ));
        for hook in self.hooks() {
            hook.on_complete(&HookEvent { agent: &agent.name, ctx: self.ctx, iteration, detail: answer });
        }
    }

    /// Runs one turn's tool calls: approvals first (one at a time, so interrupts open in a
    /// stable order), then the tools (at once, unless the agent says otherwise), then
    /// delegations (one at a time). Returns the results in the model's order and the
    /// handoff, if the model asked for one.
    async fn tool_round(
        &self,
        agent: &AgentSpec,
        prefix: &str,
        turn: u32,
        depth: u32,
        calls: &[ToolCall],
        targets: &BTreeMap<String, Target>,
    ) -> Result<(Vec<CallResult>, Option<(AgentSpec, Value)>), StepError> {
        let ctx = self.ctx;
        let mut results: Vec<Option<CallResult>> = calls.iter().map(|_| None).collect();
        let mut runnable: Vec<(usize, String, Value)> = Vec::new();
        let mut delegations: Vec<(usize, AgentSpec)> = Vec::new();
        let mut handoff = None;
        for (index, call) in calls.iter().enumerate() {
            match targets.get(&call.name) {
                None => {
                    results[index] = Some(error_result(
                        call,
                        format!("there is no tool named {:?}; the tools are: {}", call.name, names(targets)),
                    ));
                }
                Some(Target::Handoff(next)) => {
                    if handoff.is_some() {
                        results[index] = Some(error_result(call, "only one handoff per turn is possible"));
                    } else {
                        results[index] = Some(CallResult {
                            message: Message::Tool {
                                call_id: call.id.clone(),
                                content: format!("Handed off to {}.", next.name),
                                is_error: false,
                            },
                            succeeded: true,
                        });
                        handoff = Some((next.clone(), call.arguments.get("note").cloned().unwrap_or(Value::Null)));
                    }
                }
                Some(Target::Delegate(other)) => delegations.push((index, other.clone())),
                Some(Target::Tool(name)) => {
                    let tools = self.tools.as_deref().expect("offered tools exist");
                    let def = tools.get(name).expect("offered tools exist").def();
                    let mut args = call.arguments.clone();
                    if def.needs_approval {
                        let request =
                            InterruptRequest::approval(format!("Agent {} wants to call tool {name}.", agent.name))
                                .payload(json!({ "tool": name, "arguments": args }));
                        let approval = format!("{prefix}turn.{turn}/tool.{index}/approval");
                        match ctx.interrupt_named(&approval, request).await?.decision {
                            Decision::Approve => {}
                            Decision::Modify { payload } | Decision::Respond { value: payload } => {
                                // A person may correct the arguments.
                                args = payload.get("arguments").cloned().unwrap_or(payload);
                            }
                            Decision::Reject { reason } => {
                                let why = reason.map(|r| format!(": {r}")).unwrap_or_default();
                                results[index] = Some(error_result(
                                    call,
                                    format!(
                                        "a person rejected this call of {name}{why}. Do not call it again with the same arguments."
                                    ),
                                ));
                                continue;
                            }
                        }
                    }
                    runnable.push((index, name.clone(), args));
                }
            }
        }

        let tool_calls = runnable.iter().map(|(index, name, args)| {
            let call = &calls[*index];
            async move { (*index, self.call_tool(prefix, turn, *index, name, args.clone(), call).await) }
        });
        let ran: Vec<(usize, Result<CallResult, StepError>)> = if agent.parallel_tool_calls {
            join_all(tool_calls).await
        } else {
            let mut ran = Vec::new();
            for call in tool_calls {
                ran.push(call.await);
            }
            ran
        };
        for (index, result) in ran {
            results[index] = Some(result?);
        }

        for (index, other) in delegations {
            let call = &calls[index];
            if depth + 1 > self.budget.max_depth {
                return Err(exceeded(format!(
                    "agent {:?} delegating to {:?} would nest {} deep, over the budget's max_depth of {}",
                    agent.name,
                    other.name,
                    depth + 1,
                    self.budget.max_depth
                )));
            }
            let Some(task) = call.arguments.get("task").and_then(Value::as_str) else {
                results[index] = Some(error_result(call, "a delegation needs a `task` string"));
                continue;
            };
            let name = format!("{prefix}turn.{turn}/tool.{index}");
            let inner_prefix = format!("{name}/");
            let mut conversation = Vec::new();
            if let Some(instructions) = &other.instructions {
                conversation.push(Message::system(instructions.clone()));
            }
            conversation.push(Message::user(task));
            // The delegation is a sub-step too, so a finished one is served whole; an
            // unfinished one runs again and its own finished calls are served.
            let outcome = ctx
                .call(&name, CallKind::Action { effect: Effect::Pure, safe_to_retry: true }, |_| async {
                    match self.run(other.clone(), inner_prefix.clone(), depth + 1, conversation).await {
                        Ok((answer, _)) => Ok(json!({ "ok": answer })),
                        Err(e) if ends_the_step(&e) => Err(e),
                        Err(e) => Ok(json!({ "error": { "code": e.code.as_str(), "message": e.message } })),
                    }
                })
                .await?;
            results[index] = Some(result_message(call, &outcome));
        }
        let results = results.into_iter().map(|r| r.expect("every call has a result")).collect();
        Ok((results, handoff))
    }

    /// One tool call as a journaled sub-step. Its failure is recorded as a result for the
    /// model; a call that was interrupted and is not safe to run again reaches the model as
    /// an error saying its outcome is unknown.
    async fn call_tool(
        &self,
        prefix: &str,
        turn: u32,
        index: usize,
        name: &str,
        args: Value,
        call: &ToolCall,
    ) -> Result<CallResult, StepError> {
        let ctx = self.ctx;
        let tools = self.tools.as_deref().expect("offered tools exist");
        let def = tools.get(name).expect("offered tools exist").def();
        let kind = CallKind::Action { effect: def.effect, safe_to_retry: def.safe_to_retry };
        let recorded = ctx
            .call(&format!("{prefix}turn.{turn}/tool.{index}"), kind, |info| async move {
                let started = std::time::Instant::now();
                let cx = ToolContext { step: ctx.clone(), idempotency_key: info.idempotency_key };
                let outcome = tools.invoke(name, cx, args).await;
                let ok = outcome.is_ok();
                ctx.emit(Event::new(
                    TOOL_CALL_EVENT,
                    json!({
                        "call": info.path.as_str(), "tool": name, "ok": ok,
                        "latency_ms": u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                    }),
                ));
                match outcome {
                    Ok(value) => Ok(json!({ "ok": value })),
                    Err(e) if e.is_control_flow() => Err(e),
                    Err(e) => Ok(json!({ "error": { "code": e.code.as_str(), "message": e.message } })),
                }
            })
            .await;
        match recorded {
            Ok(value) => Ok(result_message(call, &value)),
            Err(e) if e.is(&ErrorCode::OUTCOME_UNKNOWN) => Ok(error_result(
                call,
                format!(
                    "the outcome of this call is unknown: {}. It may or may not have taken effect; check before calling it again.",
                    e.message
                ),
            )),
            Err(e) => Err(e),
        }
    }
}

fn names(targets: &BTreeMap<String, Target>) -> String {
    let names: Vec<&str> = targets.keys().map(String::as_str).collect();
    if names.is_empty() { "none".to_owned() } else { names.join(", ") }
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
