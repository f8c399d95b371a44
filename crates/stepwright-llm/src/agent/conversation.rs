//! The ReAct loop as a small state machine: a [`Conversation`] holds what one agent run has
//! said and counted, and each turn moves it on — ask the model, then answer (or repair a
//! malformed answer), run the tools it asked for, hand the conversation to another agent, or
//! deal with being stuck.

use std::collections::BTreeMap;

use futures_util::future::BoxFuture;
use serde_json::{Value, json};
use stepwright_core::{CallKind, Decision, ErrorCode, Event, InterruptRequest, StepError, StepPath};
use tracing::Instrument;

use super::tools::Target;
use super::{
    AGENT_HANDOFF_EVENT, AGENT_STUCK, AGENT_STUCK_EVENT, AgentRun, AgentSpec, HookEvent, OnStuck, exceeded, text_of,
};
use crate::step::{Continues, call_model, repair_prompt, structured};
use crate::types::{ChatRequest, ChatResponse, Message, OutputFormat, ToolChoice, ToolSpec};

/// What an agent that answered with nothing is told.
const EMPTY_ANSWER_PROMPT: &str =
    "Your answer was empty: you neither answered nor called a tool. Answer the task, or call one of your tools.";

/// One agent's conversation and its counters, from its first model call to its answer.
struct Conversation {
    /// The agent holding the conversation (another one after a handoff).
    agent: AgentSpec,
    /// Its output schema, compiled once per agent holding the conversation.
    validator: Option<std::sync::Arc<jsonschema::Validator>>,
    /// Where its sub-steps are journaled, relative to the step: the step itself (the root
    /// path), or a delegation's call (`turn.2/tool.0`).
    prefix: StepPath,
    /// How deep in delegations this agent runs (0: the step's own agent).
    depth: u32,
    messages: Vec<Message>,
    /// The turn being taken; names its sub-steps (`turn.N/model`, `turn.N/tool.M`).
    turn: u32,
    /// Model calls made, by every agent that held the conversation: it is not reset by a
    /// handoff, so agents handing it back and forth still stop at `max_iterations`.
    iterations: u32,
    /// Turns in a row in which no tool call succeeded (for `stuck_after`).
    since_success: u32,
    /// Repair turns spent on answers that did not match the output schema.
    repairs: u32,
    /// What was wrong with the answers that needed repair.
    problems: Vec<String>,
    /// Escalations opened so far (names each one's interrupt).
    escalations: u32,
    /// How many times `on_stuck: retry` told the model it was stuck.
    nudges: u32,
    /// How many hook calls this conversation made (each hook's sub-step is numbered).
    hooks_called: u32,
    /// The previous model call and how many messages it was sent, so each call's input
    /// artifact holds only what is new; `None` after a handoff rewrote the history.
    earlier: Option<(String, usize)>,
    /// The tools offered, the same every turn until a handoff, and what each name stands for.
    offered: Vec<ToolSpec>,
    targets: BTreeMap<String, Target>,
}

/// What a turn leads to.
enum Turn {
    /// The agent answered: the loop ends.
    Answer(Value),
    /// Another turn follows.
    Again,
}

impl Conversation {
    fn model_call_name(&self) -> StepPath {
        self.turn_path(self.turn).join("model")
    }

    /// `turn.N` below the prefix: a turn's sub-steps are named below it.
    fn turn_path(&self, turn: u32) -> StepPath {
        self.prefix.sub("turn", u64::from(turn))
    }

    /// Calls the model once (a journaled sub-step: served on every later execution), within
    /// the budgets.
    async fn ask_model(&mut self, run: &AgentRun<'_>) -> Result<ChatResponse, StepError> {
        let agent = &self.agent;
        if self.iterations >= agent.max_iterations {
            return Err(exceeded(format!(
                "agent {:?} made {} model calls (max_iterations) without a final answer",
                agent.name, self.iterations
            )));
        }
        run.check_time(&agent.name)?;
        run.charge_iteration(&agent.name)?;
        let request = ChatRequest {
            model: String::new(),
            messages: self.messages.clone(),
            tool_choice: (!self.offered.is_empty()).then_some(ToolChoice::Auto),
            tools: self.offered.clone(),
            // The provider is asked for the schema's shape; the answer is still checked (and
            // repaired) here, as not every provider or model keeps to it.
            output: agent.output.as_ref().map(|schema| OutputFormat { name: "answer".into(), schema: schema.clone() }),
            params: agent.params.clone(),
        };
        let (ctx, models) = (run.ctx, &run.models);
        let (binding, stream) = (agent.model.as_str(), agent.stream);
        let sent = self.messages.len();
        let continues = self.earlier.as_ref().map(|(call, from)| Continues { call: call.as_str(), from: *from });
        let call = self.model_call_name();
        let recorded = ctx
            .call(call.as_str(), CallKind::Input, |info| {
                call_model(ctx, models, binding, stream, info.path, request, continues)
            })
            .await?;
        self.earlier = Some((ctx.path().join(call.as_str()).as_str().to_owned(), sent));
        let response: ChatResponse = serde_json::from_value((*recorded).clone())
            .map_err(|e| StepError::execution_failed(format!("reading a recorded model answer: {e}")))?;
        self.iterations += 1;
        run.charge_usage(&agent.name, &agent.model, &response)?;
        Ok(response)
    }

    /// A reply without tool calls: the answer, or (when it does not match the output schema
    /// and repair turns are left) a repair turn that tells the model what was wrong.
    fn answer_or_repair(&mut self, run: &AgentRun<'_>, response: &ChatResponse) -> Result<Turn, StepError> {
        let answer = match &self.agent.output {
            // Nothing said and no tool asked for is no answer: asked again within the repair
            // turns, then a failure (never a success with "").
            None if response.content.trim().is_empty() => {
                if self.repairs < self.agent.repair_turns {
                    self.repairs += 1;
                    self.messages.push(response.to_message());
                    self.messages.push(Message::user(EMPTY_ANSWER_PROMPT.to_owned()));
                    self.turn += 1;
                    return Ok(Turn::Again);
                }
                return Err(StepError::new(
                    super::AGENT_EMPTY_ANSWER,
                    format!(
                        "agent {:?} answered with nothing and called no tool, also after {} repair turn(s)",
                        self.agent.name, self.repairs
                    ),
                ));
            }
            None => Value::String(response.content.clone()),
            Some(schema) => match structured(schema, self.validator.as_deref(), &response.content) {
                Ok(value) => value,
                Err(found) if self.repairs < self.agent.repair_turns => {
                    self.repairs += 1;
                    self.messages.push(response.to_message());
                    self.messages.push(Message::user(repair_prompt(&found)));
                    self.problems = found;
                    self.turn += 1;
                    return Ok(Turn::Again);
                }
                Err(found) => {
                    self.problems.extend(found);
                    return Err(StepError::new(
                        ErrorCode::OUTPUT_VALIDATION,
                        format!(
                            "agent {:?}'s answer does not match its output schema after {} repair turn(s): {}",
                            self.agent.name,
                            self.repairs,
                            self.problems.join("; ")
                        ),
                    ));
                }
            },
        };
        run.completed_event(&self.agent, &self.prefix, self.iterations, &answer);
        self.messages.push(response.to_message());
        Ok(Turn::Answer(answer))
    }

    /// The next agent takes the conversation under its own instructions. The history is
    /// rewritten, so the next input artifact is whole again.
    fn hand_off(&mut self, run: &AgentRun<'_>, next: AgentSpec, note: &Value) -> Result<(), StepError> {
        run.ctx.emit(Event::new(
            AGENT_HANDOFF_EVENT,
            json!({ "from": self.agent.name, "to": next.name, "note": note, "turn": self.turn_path(self.turn - 1).as_str() }),
        ));
        self.earlier = None;
        self.messages.retain(|m| !matches!(m, Message::System { .. }));
        if let Some(instructions) = &next.instructions {
            self.messages.insert(0, Message::system(instructions.clone()));
        }
        (self.offered, self.targets) = run.offer(&next)?;
        self.validator = super::output_validator(&next);
        self.agent = next;
        self.since_success = 0;
        self.repairs = 0;
        run.started_event(&self.agent, &self.prefix, self.iterations);
        Ok(())
    }

    /// The agent's hook tool for `moment`, if it has one (numbered in this conversation).
    async fn hook(&mut self, run: &AgentRun<'_>, moment: &str, detail: Value) -> Result<(), StepError> {
        if !self.agent.hooks.tools().any(|(m, _)| m == moment) {
            return Ok(());
        }
        let ordinal = self.hooks_called;
        self.hooks_called += 1;
        run.call_hook(&self.agent, &self.prefix, moment, ordinal, detail).await
    }

    /// After `stuck_after` turns in a row without a successful tool call: fail, stop with
    /// the last reply, or ask a person (approve: go on; modify: go on with their guidance;
    /// reject: fail).
    async fn on_stuck(&mut self, run: &AgentRun<'_>, response: &ChatResponse) -> Result<Turn, StepError> {
        let ctx = run.ctx;
        let detail = json!({
            "agent": self.agent.name,
            "iterations_without_success": self.since_success,
            "turn": self.turn_path(self.turn - 1).as_str(),
            "on_stuck": self.agent.on_stuck,
        });
        ctx.emit(Event::new(AGENT_STUCK_EVENT, detail.clone()));
        for hook in run.hooks() {
            hook.on_stuck(&HookEvent { agent: &self.agent.name, ctx, iteration: self.iterations, detail: &detail });
        }
        self.hook(run, "stuck", detail.clone()).await?;
        let stuck = StepError::new(
            AGENT_STUCK,
            format!(
                "agent {:?} made {} iteration(s) in a row without a successful tool call",
                self.agent.name, self.since_success
            ),
        );
        match self.agent.on_stuck {
            OnStuck::Fail => Err(stuck),
            OnStuck::Retry if self.nudges < super::spec::STUCK_RETRIES => {
                // The same words at the same turn on every replay: the conversation a resume
                // rebuilds is the one the model saw.
                self.nudges += 1;
                self.messages.push(Message::user(format!(
                    "You have made {} attempt(s) in a row without a successful tool call. Step back, reconsider \
                     the task and the tools you have, and try a different approach.",
                    self.since_success
                )));
                self.since_success = 0;
                Ok(Turn::Again)
            }
            OnStuck::Retry => {
                let mut error = stuck;
                error.message.push_str(&format!(" again, after {} retries", self.nudges));
                Err(error)
            }
            OnStuck::Stop => {
                let answer = Value::String(response.content.clone());
                run.completed_event(&self.agent, &self.prefix, self.iterations, &answer);
                Ok(Turn::Answer(answer))
            }
            OnStuck::Escalate => {
                let request = InterruptRequest::approval(format!(
                    "Agent {} is stuck: {} iteration(s) without a successful tool call. Approve to let it go on, modify with guidance for it, or reject to fail it.",
                    self.agent.name, self.since_success
                ))
                .payload(detail);
                let name = self.turn_path(self.turn - 1).sub("escalate", u64::from(self.escalations));
                self.escalations += 1;
                let resolution = ctx.interrupt_named(name.as_str(), request).await?;
                match resolution.decision {
                    Decision::Approve => {}
                    Decision::Modify { payload } | Decision::Respond { value: payload } => {
                        let guidance = payload.get("guidance").cloned().unwrap_or(payload);
                        self.messages.push(Message::user(format!("Guidance from a person: {}", text_of(&guidance))));
                    }
                    Decision::Reject { reason } => {
                        let mut error = stuck;
                        if let Some(reason) = reason {
                            error.message.push_str(&format!("; the escalation was rejected: {reason}"));
                        }
                        return Err(error);
                    }
                }
                self.since_success = 0;
                Ok(Turn::Again)
            }
        }
    }
}

impl AgentRun<'_> {
    /// The ReAct loop of one agent, at sub-step names under `prefix`: returns its answer
    /// and the conversation as it ended.
    pub(super) fn run(
        &self,
        agent: AgentSpec,
        prefix: StepPath,
        depth: u32,
        messages: Vec<Message>,
    ) -> BoxFuture<'_, Result<(Value, Vec<Message>), StepError>> {
        let span = tracing::info_span!(
            "invoke_agent",
            otel.name = %format_args!("invoke_agent {}", agent.name),
            gen_ai.operation.name = "invoke_agent",
            gen_ai.agent.name = agent.name.as_str(),
            stepwright.step.path = %self.ctx.path(),
            otel.status_code = tracing::field::Empty,
            otel.status_description = tracing::field::Empty,
        );
        let traced = span.clone();
        Box::pin(
            async move {
                let result = self.run_untraced(agent, prefix, depth, messages).await;
                if let Err(error) = &result {
                    traced.record("otel.status_code", "error");
                    traced.record("otel.status_description", error.message.as_str());
                }
                result
            }
            .instrument(span),
        )
    }

    async fn run_untraced(
        &self,
        agent: AgentSpec,
        prefix: StepPath,
        depth: u32,
        messages: Vec<Message>,
    ) -> Result<(Value, Vec<Message>), StepError> {
        {
            let (offered, targets) = self.offer(&agent)?;
            // The step's own agent's schema was compiled with the step; a delegate's is now.
            let validator = if depth == 0 { self.own_validator.clone() } else { super::output_validator(&agent) };
            let mut conversation = Conversation {
                agent,
                validator,
                prefix,
                depth,
                messages,
                turn: 0,
                iterations: 0,
                since_success: 0,
                repairs: 0,
                problems: Vec::new(),
                escalations: 0,
                nudges: 0,
                hooks_called: 0,
                earlier: None,
                offered,
                targets,
            };
            let c = &mut conversation;
            self.started_event(&c.agent, &c.prefix, c.iterations);
            c.hook(self, "start", json!({ "at": c.prefix.as_str() })).await?;
            loop {
                let response = c.ask_model(self).await?;
                if response.tool_calls.is_empty() {
                    match c.answer_or_repair(self, &response)? {
                        Turn::Answer(answer) => {
                            c.hook(self, "complete", answer.clone()).await?;
                            return Ok((answer, conversation.messages));
                        }
                        Turn::Again => continue,
                    }
                }
                c.messages.push(response.to_message());
                let (results, handoff) =
                    self.tool_round(&c.agent, &c.prefix, c.turn, c.depth, &response.tool_calls, &c.targets).await?;
                c.since_success = if results.iter().any(|r| r.succeeded) { 0 } else { c.since_success + 1 };
                c.messages.extend(results.into_iter().map(|r| r.message));
                c.turn += 1;
                if let Some((next, note)) = handoff {
                    c.hand_off(self, next, &note)?;
                    continue;
                }
                if c.agent.stuck_after.is_some_and(|limit| c.since_success >= limit)
                    && let Turn::Answer(answer) = c.on_stuck(self, &response).await?
                {
                    c.hook(self, "complete", answer.clone()).await?;
                    return Ok((answer, conversation.messages));
                }
            }
        }
    }
}
