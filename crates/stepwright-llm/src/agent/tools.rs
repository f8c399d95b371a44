//! One turn's tool calls: tools run in parallel (each a journaled sub-step, fenced by its
//! effect class), delegations run the other agent's loop, and at most one handoff is taken.

use std::collections::BTreeMap;

use futures_util::future::join_all;
use serde_json::{Value, json};
use stepwright_core::{CallKind, Decision, Effect, ErrorCode, Event, InterruptRequest, StepError, StepPath};
use tracing::Instrument;

use super::{AgentRun, AgentSpec, TOOL_CALL_EVENT, ends_the_step, exceeded, text_of};
use crate::tools::ToolContext;
use crate::types::{Message, ToolCall};

/// What a tool call the model asked for stands for.
pub(super) enum Target {
    Tool(String),
    Delegate(AgentSpec),
    Handoff(AgentSpec),
}

/// One tool call's result, as the model will see it.
pub(super) struct CallResult {
    pub(super) message: Message,
    pub(super) succeeded: bool,
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

impl AgentRun<'_> {
    /// Runs one turn's tool calls: approvals first (one at a time, so interrupts open in a
    /// stable order), then the tools (at once, unless the agent says otherwise), then
    /// delegations (one at a time). Returns the results in the model's order and the
    /// handoff, if the model asked for one.
    pub(super) async fn tool_round(
        &self,
        agent: &AgentSpec,
        prefix: &StepPath,
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
                        let approval = tool_path(prefix, turn, index).join("approval");
                        match ctx.interrupt_named(approval.as_str(), request).await?.decision {
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
            let inner_prefix = tool_path(prefix, turn, index);
            let mut conversation = Vec::new();
            if let Some(instructions) = &other.instructions {
                conversation.push(Message::system(instructions.clone()));
            }
            conversation.push(Message::user(task));
            // The delegation is a sub-step too, so a finished one is served whole; an
            // unfinished one runs again and its own finished calls are served.
            let outcome = ctx
                .call(
                    inner_prefix.as_str(),
                    CallKind::Action { effect: Effect::Pure, safe_to_retry: true },
                    |_| async {
                        match self.run(other.clone(), inner_prefix.clone(), depth + 1, conversation).await {
                            Ok((answer, _)) => Ok(json!({ "ok": answer })),
                            Err(e) if ends_the_step(&e) => Err(e),
                            Err(e) => Ok(json!({ "error": { "code": e.code.as_str(), "message": e.message } })),
                        }
                    },
                )
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
        prefix: &StepPath,
        turn: u32,
        index: usize,
        name: &str,
        args: Value,
        call: &ToolCall,
    ) -> Result<CallResult, StepError> {
        let ctx = self.ctx;
        let tools = self.tools.as_deref().expect("offered tools exist");
        let tool = tools.get(name).expect("offered tools exist");
        let def = tool.def();
        let kind = CallKind::Action { effect: def.effect, safe_to_retry: def.safe_to_retry };
        // What the call does, whichever turn makes it: an experiment's fresh run is served a
        // recorded run's answer to the same call instead of making it again.
        let identity = serde_json::json!({ "tool": name, "args": &args });
        let path = tool_path(prefix, turn, index);
        let recorded = ctx
            .call_identified(path.as_str(), kind, tool.dispatches(), &identity, |info| async move {
                let started = std::time::Instant::now();
                // Opened here, inside the work: a call served from the journal has no span.
                let span = tracing::info_span!(
                    "execute_tool",
                    otel.name = %format_args!("execute_tool {name}"),
                    gen_ai.operation.name = "execute_tool",
                    gen_ai.tool.name = name,
                    gen_ai.tool.call.id = call.id.as_str(),
                    gen_ai.tool.type = "function",
                    gen_ai.tool.call.arguments = tracing::field::Empty,
                    gen_ai.tool.call.result = tracing::field::Empty,
                    stepwright.step.path = %info.path,
                    otel.status_code = tracing::field::Empty,
                    otel.status_description = tracing::field::Empty,
                );
                if !span.is_disabled()
                    && let Some(text) = ctx.content_for_telemetry(&args)
                {
                    span.record("gen_ai.tool.call.arguments", text.as_str());
                }
                let cx = ToolContext {
                    step: ctx.clone(),
                    idempotency_key: info.idempotency_key,
                    call_path: Some(info.path.clone()),
                };
                let outcome = tools.invoke(name, cx, args).instrument(span.clone()).await;
                match &outcome {
                    Err(error) => {
                        span.record("otel.status_code", "error");
                        span.record("otel.status_description", error.message.as_str());
                    }
                    Ok(value) if !span.is_disabled() => {
                        if let Some(text) = ctx.content_for_telemetry(value) {
                            span.record("gen_ai.tool.call.result", text.as_str());
                        }
                    }
                    Ok(_) => {}
                }
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

/// `turn.N/tool.M` below the prefix: one tool call of a turn (a delegation's own calls are
/// named below it).
fn tool_path(prefix: &StepPath, turn: u32, index: usize) -> StepPath {
    prefix.sub("turn", u64::from(turn)).sub("tool", index as u64)
}
