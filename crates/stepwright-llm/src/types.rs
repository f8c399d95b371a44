//! The provider-neutral shapes of a chat: messages, tools, requests and responses.
//!
//! These are what the journal, the cassettes and the request hash see; each adapter maps
//! them to and from its provider's wire format.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Message {
    /// Instructions for the model.
    System {
        /// The instructions, sent before the conversation.
        content: String,
    },
    /// What the user (or the workflow) says.
    User {
        /// What the user said.
        content: String,
    },
    /// What the model said: text, tool calls, or both.
    Assistant {
        /// The text (may be empty when the model only called tools).
        #[serde(default)]
        content: String,
        /// The tools it asked to call.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
    },
    /// A tool's result, answering one tool call.
    Tool {
        /// The id of the call it answers.
        call_id: String,
        /// The result as text (JSON for structured results).
        content: String,
        /// Whether the tool failed (the model is told so).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        is_error: bool,
    },
}

impl Message {
    /// A system message.
    pub fn system(content: impl Into<String>) -> Self {
        Self::System { content: content.into() }
    }

    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Self::User { content: content.into() }
    }

    /// An assistant message with text only.
    pub fn assistant(content: impl Into<String>) -> Self {
        Self::Assistant { content: content.into(), tool_calls: Vec::new() }
    }
}

/// A tool call the model asked for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The provider's id for the call; the result must quote it.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments. A model that produced arguments that are not JSON gets them back as a
    /// string, so the caller can answer with an error instead of failing the turn.
    pub arguments: Value,
}

/// A tool offered to the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// Its name (`lookup_order`, `everything.echo`).
    pub name: String,
    /// What it does, for the model.
    #[serde(default)]
    pub description: String,
    /// The JSON Schema of its arguments.
    pub parameters: Value,
}

/// Whether and which tool the model must call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolChoice {
    /// The model decides.
    Auto,
    /// No tool calls.
    None,
    /// At least one tool call.
    Required,
    /// This tool.
    Tool(String),
}

/// Sampling parameters. `None` leaves the provider's default.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ModelParams {
    /// Sampling temperature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// Nucleus sampling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    /// The most tokens to generate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Sequences that end the answer.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stop: Vec<String>,
}

/// A JSON Schema the answer must match (structured output).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutputFormat {
    /// A name for the schema (`^[a-zA-Z0-9_-]+$`, as providers require).
    pub name: String,
    /// The schema, as the workflow wrote it; adapters transform it their provider's way.
    pub schema: Value,
}

/// A chat request, provider-neutral.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatRequest {
    /// The provider's model id (`gpt-4o-mini`).
    pub model: String,
    /// The messages so far, oldest first; the model answers the last.
    pub messages: Vec<Message>,
    /// Tools the model may call.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolSpec>,
    /// Whether and which tool to call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoice>,
    /// Structured output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<OutputFormat>,
    /// Sampling parameters.
    #[serde(default)]
    pub params: ModelParams,
}

impl ChatRequest {
    /// The tool results in the conversation, in order, as `(call_id, content, is_error)` —
    /// what a scripted model usually answers from.
    pub fn tool_results(&self) -> impl Iterator<Item = (&str, &str, bool)> + '_ {
        self.messages.iter().filter_map(|m| match m {
            Message::Tool { call_id, content, is_error } => Some((call_id.as_str(), content.as_str(), *is_error)),
            _ => None,
        })
    }

    /// A request with these messages and nothing else.
    pub fn new(model: impl Into<String>, messages: Vec<Message>) -> Self {
        Self {
            model: model.into(),
            messages,
            tools: Vec::new(),
            tool_choice: None,
            output: None,
            params: ModelParams::default(),
        }
    }
}

/// Why the model stopped, normalized across providers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// A natural end or a stop sequence.
    Stop,
    /// The token limit.
    Length,
    /// The model called tools and waits for their results.
    ToolCalls,
    /// The provider filtered the content.
    ContentFilter,
    /// Anything else, as the provider said it.
    Other(String),
}

/// Messages as the GenAI conventions' `gen_ai.input.messages` spell them: a role and its
/// parts (`text`, `tool_call`, `tool_call_response`).
pub(crate) fn conventions_messages(messages: &[Message]) -> serde_json::Value {
    use serde_json::json;
    let text = |content: &str| json!({ "type": "text", "content": content });
    messages
        .iter()
        .map(|message| match message {
            Message::System { content } => json!({ "role": "system", "parts": [text(content)] }),
            Message::User { content } => json!({ "role": "user", "parts": [text(content)] }),
            Message::Assistant { content, tool_calls } => {
                json!({ "role": "assistant", "parts": assistant_parts(content, tool_calls) })
            }
            Message::Tool { call_id, content, .. } => json!({
                "role": "tool",
                "parts": [{ "type": "tool_call_response", "id": call_id, "result": content }],
            }),
        })
        .collect()
}

/// An answer as the conventions' `gen_ai.output.messages` spell it.
pub(crate) fn conventions_answer(response: &ChatResponse) -> serde_json::Value {
    serde_json::json!([{
        "role": "assistant",
        "parts": assistant_parts(&response.content, &response.tool_calls),
        "finish_reason": response.finish_reason.as_str(),
    }])
}

fn assistant_parts(content: &str, tool_calls: &[ToolCall]) -> Vec<serde_json::Value> {
    use serde_json::json;
    let mut parts = Vec::new();
    if !content.is_empty() {
        parts.push(json!({ "type": "text", "content": content }));
    }
    parts.extend(
        tool_calls.iter().map(|c| json!({ "type": "tool_call", "id": c.id, "name": c.name, "arguments": c.arguments })),
    );
    parts
}

impl FinishReason {
    /// The reason as the GenAI conventions spell it (`stop`, `length`, `tool_calls`,
    /// `content_filter`, or the provider's own word).
    pub fn as_str(&self) -> &str {
        match self {
            Self::Stop => "stop",
            Self::Length => "length",
            Self::ToolCalls => "tool_calls",
            Self::ContentFilter => "content_filter",
            Self::Other(reason) => reason,
        }
    }
}

/// Tokens used by one call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens, those read from or written to the provider's prompt cache included
    /// (as the GenAI conventions count them; Anthropic reports the three apart).
    pub input_tokens: u64,
    /// Generated tokens.
    pub output_tokens: u64,
    /// Of the prompt tokens, those served from the provider's prompt cache.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_read_input_tokens: u64,
    /// Of the prompt tokens, those written to the provider's prompt cache.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_creation_input_tokens: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Usage {
    /// Input plus output.
    pub fn total(&self) -> u64 {
        self.input_tokens + self.output_tokens
    }
}

/// A model's answer, provider-neutral.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatResponse {
    /// The provider's id of the completion (`chatcmpl-…`, `msg_…`), when it gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The text. For structured output, the JSON text of the answer (an Anthropic forced
    /// tool call's input is turned into this text too).
    pub content: String,
    /// Tools the model asked to call.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// Why it stopped.
    pub finish_reason: FinishReason,
    /// Tokens used.
    pub usage: Usage,
    /// The model that answered, as the provider named it.
    #[serde(default)]
    pub model: String,
}

impl ChatResponse {
    /// The assistant message to append to the conversation.
    pub fn to_message(&self) -> Message {
        Message::Assistant { content: self.content.clone(), tool_calls: self.tool_calls.clone() }
    }
}

/// Which request field carries an OpenAI-style token limit: `max_tokens` (what compatible
/// servers such as vLLM, Ollama or LiteLLM read) or `max_completion_tokens` (what OpenAI's
/// current models, reasoning models included, require).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenLimitField {
    /// `max_tokens`.
    MaxTokens,
    /// `max_completion_tokens`.
    MaxCompletionTokens,
}

impl TokenLimitField {
    /// The field's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::MaxTokens => "max_tokens",
            Self::MaxCompletionTokens => "max_completion_tokens",
        }
    }
}

/// A request's temperature or top_p for a model that takes neither, or both for an
/// Anthropic model that takes sampling parameters (one of the two): `None` if it is fine.
/// Anthropic's current models (and its SDK since 1.0) take neither, so an Anthropic binding
/// takes none unless it says `sampling: true`; an OpenAI one takes them unless it says
/// `sampling: false` (reasoning models).
pub fn sampling_problem(params: &ModelParams, sampling: bool, anthropic: bool) -> Option<String> {
    let (temperature, top_p) = (params.temperature.is_some(), params.top_p.is_some());
    if !sampling && (temperature || top_p) {
        return Some(if anthropic {
            "Anthropic's current models take no temperature or top_p (say `sampling: true` on the binding of one that does)"
                .into()
        } else {
            "this model takes no temperature or top_p (its binding says `sampling: false`)".into()
        });
    }
    if anthropic && temperature && top_p {
        return Some("an Anthropic model takes temperature or top_p, not both".into());
    }
    None
}
