//! The `llm` step: one model call (plus bounded repair turns for structured output), each
//! a journaled sub-step with `llm-input`/`llm-output` artifacts, so a resumed run never pays
//! for a finished call again.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use stepwright_core::{CallKind, DynStep, ErrorCode, Event, Outcome, StepContext, StepError};

use crate::models::{MODEL_CALL_EVENT, Models, call_event};
use crate::schema::{check, strip_optional_nulls, validate};
use crate::types::{ChatRequest, ChatResponse, Message, ModelParams, OutputFormat};

/// What an `llm` step asks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LlmSpec {
    /// The model binding's name.
    pub model: String,
    /// A system prompt put before the input's messages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    /// Sampling parameters.
    #[serde(default)]
    pub params: ModelParams,
    /// The JSON Schema the answer must match (structured output). Without one the step's
    /// output is the answer's text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    /// How many times a non-matching answer is shown its validation errors and asked
    /// again before the step fails with `output_validation`.
    #[serde(default = "default_repair_turns")]
    pub repair_turns: u32,
    /// Whether text streams to the step's token sink as it arrives.
    #[serde(default = "default_stream")]
    pub stream: bool,
}

fn default_repair_turns() -> u32 {
    1
}

fn default_stream() -> bool {
    true
}

impl LlmSpec {
    /// A spec calling this binding with defaults (one repair turn, streaming).
    pub fn new(model: &str) -> Self {
        Self {
            model: model.to_owned(),
            system: None,
            params: ModelParams::default(),
            output: None,
            repair_turns: default_repair_turns(),
            stream: default_stream(),
        }
    }
}

/// The `llm` step. Its input is a prompt (a string, or `{ "prompt": …, "system": … }`) or a
/// conversation (`{ "messages": [...] }`); it needs a [`Models`] service.
pub struct LlmStep {
    spec: LlmSpec,
    /// The kind and the whole spec: what the definition hash covers.
    identity: String,
    /// The output schema, compiled once (compiling it for every answer cost more than the
    /// rest of a cached model call); `None` without one, or when it does not compile (each
    /// answer then says why).
    validator: Option<Arc<jsonschema::Validator>>,
}

impl LlmStep {
    /// A step for this spec.
    pub fn new(spec: LlmSpec) -> Arc<Self> {
        // The spec is part of the step's identity, so of the definition hash.
        let identity = format!("llm {}", serde_json::to_string(&spec).expect("a spec serializes"));
        let validator = spec.output.as_ref().and_then(|schema| jsonschema::validator_for(schema).ok()).map(Arc::new);
        Arc::new(Self { spec, identity, validator })
    }
}

impl DynStep for LlmStep {
    fn run<'a>(&'a self, ctx: &'a StepContext, input: Arc<Value>) -> BoxFuture<'a, Result<Outcome<Value>, StepError>> {
        Box::pin(async move { run(&self.spec, self.validator.as_deref(), ctx, &input).await.map(Outcome::completed) })
    }

    fn type_name(&self) -> &str {
        "llm"
    }

    fn identity(&self) -> std::borrow::Cow<'_, str> {
        std::borrow::Cow::Borrowed(&self.identity)
    }

    fn output_schema(&self) -> Option<Value> {
        self.spec.output.clone()
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PromptInput {
    #[serde(default)]
    prompt: Option<String>,
    #[serde(default)]
    system: Option<String>,
    #[serde(default)]
    messages: Option<Vec<Message>>,
}

/// The conversation an input asks for, after `system` (the step's own system prompt).
pub(crate) fn messages(system: Option<&str>, input: &Value) -> Result<Vec<Message>, StepError> {
    let bad = |message: String| StepError::new(ErrorCode::INPUT_VALIDATION, message);
    let input = match input {
        Value::String(prompt) => PromptInput { prompt: Some(prompt.clone()), system: None, messages: None },
        other => serde_json::from_value(other.clone())
            .map_err(|e| bad(format!("a model step takes a prompt string, {{prompt, system}} or {{messages}}: {e}")))?,
    };
    let mut out = Vec::new();
    for system in [system, input.system.as_deref()].into_iter().flatten() {
        out.push(Message::system(system));
    }
    match (input.prompt, input.messages) {
        (Some(prompt), None) => out.push(Message::user(prompt)),
        (None, Some(messages)) if !messages.is_empty() => out.extend(messages),
        (Some(_), Some(_)) => return Err(bad("a model step takes `prompt` or `messages`, not both".into())),
        _ => return Err(bad("a model step needs a `prompt` or a non-empty `messages`".into())),
    }
    Ok(out)
}

/// The answer as JSON matching `schema` (checked with `validator`, its compiled form, when
/// given), or what is wrong with it.
pub(crate) fn structured(
    schema: &Value,
    validator: Option<&jsonschema::Validator>,
    text: &str,
) -> Result<Value, Vec<String>> {
    let trimmed = text.trim();
    // Some models wrap JSON in a Markdown fence even when asked not to.
    let unfenced = trimmed
        .strip_prefix("```json")
        .or_else(|| trimmed.strip_prefix("```"))
        .and_then(|t| t.strip_suffix("```"))
        .unwrap_or(trimmed);
    let mut value: Value = serde_json::from_str(unfenced).map_err(|e| vec![format!("the answer is not JSON: {e}")])?;
    strip_optional_nulls(schema, &mut value);
    match validator {
        Some(validator) => check(validator, &value),
        None => validate(schema, &value),
    }
    .map(|()| value)
}

pub(crate) fn repair_prompt(problems: &[String]) -> String {
    let mut text = String::from("Your answer does not match the required JSON Schema:\n");
    for problem in problems {
        text.push_str("- ");
        text.push_str(problem);
        text.push('\n');
    }
    text.push_str("Answer again with only JSON that matches the schema.");
    text
}

async fn run(
    spec: &LlmSpec,
    validator: Option<&jsonschema::Validator>,
    ctx: &StepContext,
    input: &Value,
) -> Result<Value, StepError> {
    let models = ctx.require::<Models>()?;
    let mut conversation = messages(spec.system.as_deref(), input)?;
    let output = spec.output.as_ref().map(|schema| OutputFormat { name: "answer".into(), schema: schema.clone() });
    let mut problems = Vec::new();
    for turn in 0..=spec.repair_turns {
        let request = ChatRequest {
            model: String::new(),
            messages: conversation.clone(),
            tools: Vec::new(),
            tool_choice: None,
            output: output.clone(),
            params: spec.params.clone(),
        };
        let recorded = ctx
            .call(&format!("call.{turn}"), CallKind::Input, |info| {
                call_model(ctx, &models, &spec.model, spec.stream, info.path, request, None)
            })
            .await?;
        let response: ChatResponse = serde_json::from_value((*recorded).clone())
            .map_err(|e| StepError::execution_failed(format!("reading a recorded model answer: {e}")))?;
        let Some(schema) = &spec.output else { return Ok(Value::String(response.content)) };
        match structured(schema, validator, &response.content) {
            Ok(value) => return Ok(value),
            Err(found) => {
                conversation.push(response.to_message());
                conversation.push(Message::user(repair_prompt(&found)));
                problems = found;
            }
        }
    }
    Err(StepError::new(
        ErrorCode::OUTPUT_VALIDATION,
        format!(
            "the model's answer does not match the output schema after {} repair turn(s): {}",
            spec.repair_turns,
            problems.join("; ")
        ),
    ))
}

/// Where a conversation's earlier messages are recorded: the `llm-input` artifact of an
/// earlier call of the same step holds the messages before `from`.
pub(crate) struct Continues<'a> {
    /// The earlier call's sub-step path.
    pub(crate) call: &'a str,
    /// How many messages that call's input (with its own predecessors) holds.
    pub(crate) from: usize,
}

/// One model call: artifacts in, the call (streamed to the step's sink), artifacts and a
/// `model.call` event out. When the conversation continues an earlier call's, the `llm-input`
/// artifact holds only the new messages and names the earlier call, so a conversation that
/// grows turn by turn stores (and hashes) each message once.
pub(crate) async fn call_model(
    ctx: &StepContext,
    models: &Models,
    binding: &str,
    stream: bool,
    path: stepwright_core::StepPath,
    mut request: ChatRequest,
    continues: Option<Continues<'_>>,
) -> Result<Value, StepError> {
    // The artifact shows the model id actually sent, not the binding's name.
    if let Some(id) = models.model_id(binding) {
        id.clone_into(&mut request.model);
    }
    let input = match &continues {
        Some(earlier) if earlier.from <= request.messages.len() => {
            let new = ChatRequest {
                model: request.model.clone(),
                messages: request.messages[earlier.from..].to_vec(),
                tools: request.tools.clone(),
                tool_choice: request.tool_choice.clone(),
                output: request.output.clone(),
                params: request.params.clone(),
            };
            let mut value = serde_json::to_value(&new).expect("a request serializes");
            value["continues"] = Value::String(earlier.call.to_owned());
            value["messages_from"] = Value::from(earlier.from);
            value
        }
        _ => serde_json::to_value(&request).expect("a request serializes"),
    };
    let input_hash = ctx.artifact("llm-input", &input);
    let sink = |text: &str| ctx.token(text);
    let sink: Option<crate::adapter::TokenSink<'_>> = if stream { Some(&sink) } else { None };
    let content = |value: &Value| ctx.content_for_telemetry(value);
    let content: Option<&crate::models::ContentRenderer<'_>> =
        if ctx.captures_content() { Some(&content) } else { None };
    let record = models.chat_observed(path.as_str(), binding, request, sink, content).await?;
    let response = serde_json::to_value(&record.response).expect("a response serializes");
    let output_hash = ctx.artifact("llm-output", &response);
    let mut data = call_event(&record);
    data["call"] = Value::String(path.as_str().to_owned());
    data["input_hash"] = Value::String(input_hash.to_hex());
    data["output_hash"] = Value::String(output_hash.to_hex());
    ctx.emit(Event::new(MODEL_CALL_EVENT, data));
    // The call is journaled and paid for either way; a cut-off or refused answer is not one.
    unfinished(&record.response.finish_reason).map_or(Ok(response), Err)
}

/// The error for an answer the model did not finish: cut off by its token limit
/// (`model_truncated`) or withheld by the provider (`model_refused`). Neither is retried by
/// default (the same request gets the same answer); `retry` and `on_failure` can route them.
fn unfinished(reason: &crate::FinishReason) -> Option<StepError> {
    match reason {
        crate::FinishReason::Length => Some(StepError::new(
            ErrorCode::from_static("model_truncated"),
            "the model's answer was cut off at its token limit (finish reason `length` / `max_tokens`): raise \
             `max_tokens` or ask for less",
        )),
        crate::FinishReason::ContentFilter => Some(StepError::new(
            ErrorCode::from_static("model_refused"),
            "the model refused or the provider filtered the answer (finish reason `content_filter` / `refusal`)",
        )),
        _ => None,
    }
}
