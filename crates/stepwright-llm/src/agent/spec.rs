//! What an agent is: its model, instructions, tools, the agents it may call or hand off
//! to, its budget and what it does when stuck; and the registry of agents with its hooks.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use stepwright_core::StepContext;

use crate::types::ModelParams;

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
    /// Tell the model it is stuck and let it try another way (at most
    /// [`STUCK_RETRIES`] times in one step; stuck once more, it fails with `agent_stuck`).
    Retry,
}

/// How many times `on_stuck: retry` nudges a stuck agent before it fails.
pub const STUCK_RETRIES: u32 = 2;

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
    /// Tools (of the engine's `Tools`) called at the agent's lifecycle moments, each a
    /// journaled sub-step (`hook.start.N`, `hook.complete.N`, `hook.stuck.N` under the
    /// agent's path) given `{agent, hook, detail}`; a hook that fails fails the step.
    #[serde(default, skip_serializing_if = "ToolHooks::is_empty")]
    pub hooks: ToolHooks,
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
            hooks: ToolHooks::default(),
        }
    }
}

/// The tools an agent calls at its lifecycle moments (what a workflow file can say; Rust
/// code can also register [`AgentHooks`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolHooks {
    /// When the agent begins (or another takes over by handoff).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_start: Option<String>,
    /// When the agent answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_complete: Option<String>,
    /// When the agent is found stuck (before `on_stuck` acts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_stuck: Option<String>,
}

impl ToolHooks {
    /// Whether no hook is set.
    pub fn is_empty(&self) -> bool {
        self.on_start.is_none() && self.on_complete.is_none() && self.on_stuck.is_none()
    }

    /// The hooks' tools with their moments.
    pub fn tools(&self) -> impl Iterator<Item = (&'static str, &str)> {
        [("start", &self.on_start), ("complete", &self.on_complete), ("stuck", &self.on_stuck)]
            .into_iter()
            .filter_map(|(moment, tool)| tool.as_deref().map(|tool| (moment, tool)))
    }
}

/// What a lifecycle hook is told.
#[derive(Debug, Clone, Copy)]
pub struct HookEvent<'a> {
    /// The agent's name (it may be a delegate's, not the step's own).
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
    pub(super) hooks: Vec<Arc<dyn AgentHooks>>,
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
