//! Anthropic Messages.

use std::collections::BTreeMap;

use futures_util::future::BoxFuture;
use serde_json::{Map, Value, json};

use crate::adapter::{ChatModel, TokenSink};
use crate::error::{ModelError, ModelErrorKind};
use crate::http::{HttpOptions, RateLimits, Transport, is_event_stream};
use crate::types::{ChatRequest, ChatResponse, FinishReason, Message, ToolCall, ToolChoice, Usage, sampling_problem};

const PROVIDER: &str = "anthropic";
/// The `anthropic-version` header sent unless the binding names another.
pub const DEFAULT_API_VERSION: &str = "2023-06-01";
/// Anthropic requires `max_tokens`; this is used when the request sets none.
pub const DEFAULT_MAX_TOKENS: u32 = 4096;

/// The Anthropic Messages adapter.
pub struct Anthropic {
    transport: Transport,
    base_url: String,
    api_key: Option<String>,
    api_version: String,
    sampling: bool,
}

impl std::fmt::Debug for Anthropic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Anthropic").field("base_url", &self.base_url).finish_non_exhaustive()
    }
}

impl Anthropic {
    /// The default endpoint.
    pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";

    /// An adapter for `base_url` (without `/v1`).
    pub fn new(
        base_url: &str,
        api_key: Option<String>,
        options: HttpOptions,
        limits: &RateLimits,
    ) -> Result<Self, ModelError> {
        let transport = Transport::new(PROVIDER, options, limits, api_key.as_deref().unwrap_or(base_url))?;
        Ok(Self {
            transport,
            base_url: base_url.trim_end_matches('/').trim_end_matches("/v1").to_owned(),
            api_key,
            api_version: DEFAULT_API_VERSION.to_owned(),
            // Current models (and the SDK since 1.0) take no temperature or top_p.
            sampling: false,
        })
    }

    /// Sends `version` as `anthropic-version` (default [`DEFAULT_API_VERSION`]).
    #[must_use]
    pub fn api_version(mut self, version: &str) -> Self {
        version.clone_into(&mut self.api_version);
        self
    }

    /// Whether the model takes temperature and top_p: when it does not, a request that sets
    /// them fails (`model_config`) instead of being sent.
    #[must_use]
    pub fn sampling(mut self, takes: bool) -> Self {
        self.sampling = takes;
        self
    }

    async fn call(&self, request: &ChatRequest, sink: Option<TokenSink<'_>>) -> Result<ChatResponse, ModelError> {
        // A structured answer with a non-object root went out wrapped; it comes back bare.
        let answer = self.exchange(request, sink).await?;
        self.transport.count_tokens(answer.usage.total()).await;
        Ok(crate::schema::unwrapped(request, answer))
    }

    async fn exchange(&self, request: &ChatRequest, sink: Option<TokenSink<'_>>) -> Result<ChatResponse, ModelError> {
        if let Some(problem) = sampling_problem(&request.params, self.sampling, true) {
            return Err(ModelError::new(ModelErrorKind::Config, PROVIDER, problem));
        }
        let body = encode(request, sink.is_some());
        let url = format!("{}/v1/messages", self.base_url);
        let mut headers = vec![("anthropic-version", self.api_version.clone())];
        if let Some(key) = &self.api_key {
            headers.push(("x-api-key", key.clone()));
        }
        let response = self.transport.post(&url, &headers, &body).await?;
        let forced = request.output.as_ref().map(|o| o.name.as_str());
        match sink {
            None => decode(&self.transport.json(response).await?, forced),
            // Some compatible servers ignore `stream: true` and answer in one piece.
            Some(sink) if !is_event_stream(&response) => {
                let whole = decode(&self.transport.json(response).await?, forced)?;
                if !whole.content.is_empty() {
                    sink(&whole.content);
                }
                Ok(whole)
            }
            Some(sink) => {
                let mut stream = StreamState::default();
                self.transport
                    .events(response, "message_stop", |event| stream.event(&event.data, sink, forced))
                    .await?;
                stream.finish(forced)
            }
        }
    }
}

impl ChatModel for Anthropic {
    fn provider(&self) -> &str {
        PROVIDER
    }

    fn chat<'a>(&'a self, request: &'a ChatRequest) -> BoxFuture<'a, Result<ChatResponse, ModelError>> {
        Box::pin(self.call(request, None))
    }

    fn chat_stream<'a>(
        &'a self,
        request: &'a ChatRequest,
        sink: TokenSink<'a>,
    ) -> BoxFuture<'a, Result<ChatResponse, ModelError>> {
        Box::pin(self.call(request, Some(sink)))
    }
}

/// The request body. System messages become the `system` field; tool results are content
/// blocks of a user turn; consecutive turns of one role are merged, as the API requires.
/// Structured output is a forced tool named after the output format.
pub(crate) fn encode(request: &ChatRequest, stream: bool) -> Value {
    let mut system = Vec::new();
    let mut turns: Vec<(&str, Vec<Value>)> = Vec::new();
    let mut push = |role: &'static str, block: Value| match turns.last_mut() {
        Some((last, blocks)) if *last == role => blocks.push(block),
        _ => turns.push((role, vec![block])),
    };
    for message in &request.messages {
        match message {
            Message::System { content } => system.push(content.clone()),
            Message::User { content } => push("user", json!({ "type": "text", "text": content })),
            Message::Assistant { content, tool_calls } => {
                if !content.is_empty() {
                    push("assistant", json!({ "type": "text", "text": content }));
                }
                for call in tool_calls {
                    let input = if call.arguments.is_object() { call.arguments.clone() } else { json!({}) };
                    push("assistant", json!({ "type": "tool_use", "id": call.id, "name": call.name, "input": input }));
                }
            }
            Message::Tool { call_id, content, is_error } => {
                let mut block = json!({ "type": "tool_result", "tool_use_id": call_id, "content": content });
                if *is_error {
                    block["is_error"] = json!(true);
                }
                push("user", block);
            }
        }
    }
    let mut body = Map::new();
    body.insert("model".into(), json!(request.model));
    body.insert("max_tokens".into(), json!(request.params.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS)));
    if !system.is_empty() {
        body.insert("system".into(), json!(system.join("\n\n")));
    }
    body.insert(
        "messages".into(),
        Value::Array(turns.into_iter().map(|(role, content)| json!({ "role": role, "content": content })).collect()),
    );
    let mut tools: Vec<Value> = request
        .tools
        .iter()
        .map(|t| json!({ "name": t.name, "description": t.description, "input_schema": t.parameters }))
        .collect();
    let mut choice = request.tool_choice.as_ref().map(|c| match c {
        ToolChoice::Auto => json!({ "type": "auto" }),
        ToolChoice::None => json!({ "type": "none" }),
        ToolChoice::Required => json!({ "type": "any" }),
        ToolChoice::Tool(name) => json!({ "type": "tool", "name": name }),
    });
    if let Some(output) = &request.output {
        tools.push(json!({
            "name": output.name,
            "description": "Give the final answer by calling this tool with it as the input.",
            "input_schema": crate::schema::object_root(&output.schema).0,
        }));
        // Alone, the answer tool is forced. Beside the step's own tools (an agent with an output
        // schema) the model must call a tool, and answering is one of them.
        choice = Some(if tools.len() == 1 {
            json!({ "type": "tool", "name": output.name })
        } else {
            json!({ "type": "any" })
        });
    }
    if !tools.is_empty() {
        body.insert("tools".into(), Value::Array(tools));
    }
    if let Some(choice) = choice {
        body.insert("tool_choice".into(), choice);
    }
    let params = &request.params;
    if let Some(t) = params.temperature {
        body.insert("temperature".into(), json!(t));
    }
    if let Some(p) = params.top_p {
        body.insert("top_p".into(), json!(p));
    }
    if !params.stop.is_empty() {
        body.insert("stop_sequences".into(), json!(params.stop));
    }
    if stream {
        body.insert("stream".into(), json!(true));
    }
    Value::Object(body)
}

fn protocol(message: impl Into<String>) -> ModelError {
    ModelError::new(ModelErrorKind::Protocol, PROVIDER, message)
}

fn finish_reason(text: &str) -> FinishReason {
    match text {
        "end_turn" | "stop_sequence" => FinishReason::Stop,
        "max_tokens" => FinishReason::Length,
        "tool_use" => FinishReason::ToolCalls,
        "refusal" => FinishReason::ContentFilter,
        other => FinishReason::Other(other.to_owned()),
    }
}

/// Assembles the response from content blocks; a forced output tool's input becomes the
/// text (JSON) and its call is removed, as is the `tool_use` stop reason it causes.
fn assemble(
    id: Option<String>,
    blocks: Vec<Value>,
    stop: &str,
    usage: Usage,
    model: String,
    forced: Option<&str>,
) -> Result<ChatResponse, ModelError> {
    let mut content = String::new();
    let mut tool_calls = Vec::new();
    let mut answered = false;
    for block in blocks {
        match block["type"].as_str() {
            Some("text") => content.push_str(block["text"].as_str().unwrap_or_default()),
            Some("tool_use") => {
                let name = block["name"].as_str().unwrap_or_default();
                if Some(name) == forced {
                    content = block["input"].to_string();
                    answered = true;
                } else {
                    tool_calls.push(ToolCall {
                        id: block["id"].as_str().unwrap_or_default().to_owned(),
                        name: name.to_owned(),
                        arguments: block["input"].clone(),
                    });
                }
            }
            _ => {}
        }
    }
    // A forced output tool's call ends the turn with `tool_use`: that is the answer's end. Any
    // other stop reason (`max_tokens` mid-answer, `refusal`) stands.
    let finish_reason =
        if answered && tool_calls.is_empty() && stop == "tool_use" { FinishReason::Stop } else { finish_reason(stop) };
    Ok(ChatResponse { id, content, tool_calls, finish_reason, usage, model })
}

/// A whole (non-streamed) response.
pub(crate) fn decode(body: &Value, forced: Option<&str>) -> Result<ChatResponse, ModelError> {
    let blocks = body["content"].as_array().ok_or_else(|| protocol(format!("the answer has no content: {body}")))?;
    let usage = usage_of(&body["usage"]);
    assemble(
        body["id"].as_str().map(str::to_owned),
        blocks.clone(),
        body["stop_reason"].as_str().unwrap_or("end_turn"),
        usage,
        body["model"].as_str().unwrap_or_default().to_owned(),
        forced,
    )
}

/// Usage as the GenAI conventions count it: Anthropic reports the prompt tokens read from
/// and written to its cache apart from `input_tokens`; the prompt is all three.
fn usage_of(usage: &Value) -> Usage {
    let count = |field: &str| usage[field].as_u64().unwrap_or(0);
    let (read, created) = (count("cache_read_input_tokens"), count("cache_creation_input_tokens"));
    Usage {
        input_tokens: count("input_tokens") + read + created,
        output_tokens: count("output_tokens"),
        cache_read_input_tokens: read,
        cache_creation_input_tokens: created,
    }
}

/// The state of a streamed answer.
#[derive(Default)]
struct StreamState {
    blocks: BTreeMap<u64, Value>,
    /// `input_json_delta` fragments per tool_use block.
    json: BTreeMap<u64, String>,
    stop: Option<String>,
    /// The usage fields as reported so far (`message_start`, updated by `message_delta`).
    usage: serde_json::Map<String, Value>,
    model: String,
    id: Option<String>,
    done: bool,
}

impl StreamState {
    /// Takes one event's data; `Ok(true)` at `message_stop`.
    fn event(&mut self, data: &str, sink: TokenSink<'_>, forced: Option<&str>) -> Result<bool, ModelError> {
        let event: Value =
            serde_json::from_str(data).map_err(|e| protocol(format!("a stream event is not JSON ({e}): {data}")))?;
        match event["type"].as_str().unwrap_or_default() {
            "message_start" => {
                let message = &event["message"];
                message["model"].as_str().unwrap_or_default().clone_into(&mut self.model);
                self.id = message["id"].as_str().map(str::to_owned);
                if let Some(usage) = message["usage"].as_object() {
                    self.usage.clone_from(usage);
                }
            }
            "content_block_start" => {
                let index = event["index"].as_u64().unwrap_or(0);
                self.blocks.insert(index, event["content_block"].clone());
            }
            "content_block_delta" => {
                let index = event["index"].as_u64().unwrap_or(0);
                let delta = &event["delta"];
                match delta["type"].as_str() {
                    Some("text_delta") => {
                        let text = delta["text"].as_str().unwrap_or_default();
                        if let Some(block) = self.blocks.get_mut(&index) {
                            let mut whole = block["text"].as_str().unwrap_or_default().to_owned();
                            whole.push_str(text);
                            block["text"] = json!(whole);
                        }
                        if !text.is_empty() {
                            sink(text);
                        }
                    }
                    Some("input_json_delta") => {
                        let part = delta["partial_json"].as_str().unwrap_or_default();
                        self.json.entry(index).or_default().push_str(part);
                        // The forced output tool's JSON is the answer: stream it as text.
                        let is_answer =
                            self.blocks.get(&index).and_then(|b| b["name"].as_str()).is_some_and(|n| Some(n) == forced);
                        if is_answer && !part.is_empty() {
                            sink(part);
                        }
                    }
                    _ => {}
                }
            }
            "content_block_stop" => {
                let index = event["index"].as_u64().unwrap_or(0);
                if let Some(raw) = self.json.remove(&index)
                    && let Some(block) = self.blocks.get_mut(&index)
                {
                    block["input"] = if raw.trim().is_empty() {
                        json!({})
                    } else {
                        serde_json::from_str(&raw).unwrap_or(Value::String(raw))
                    };
                }
            }
            "message_delta" => {
                if let Some(stop) = event["delta"]["stop_reason"].as_str() {
                    self.stop = Some(stop.to_owned());
                }
                // Cumulative counts: a field given replaces the one before.
                if let Some(usage) = event["usage"].as_object() {
                    for (field, count) in usage.iter().filter(|(_, count)| count.is_u64()) {
                        self.usage.insert(field.clone(), count.clone());
                    }
                }
            }
            "message_stop" => {
                self.done = true;
                return Ok(true);
            }
            "error" => {
                let error = &event["error"];
                let message = error["message"].as_str().unwrap_or("an error in the stream");
                let kind = match error["type"].as_str() {
                    Some("overloaded_error") => ModelErrorKind::Overloaded,
                    Some("api_error") => ModelErrorKind::Server,
                    Some("rate_limit_error") => ModelErrorKind::RateLimited,
                    _ => ModelErrorKind::StreamInterrupted,
                };
                return Err(ModelError::new(kind, PROVIDER, format!("the stream reported an error: {message}")));
            }
            // `ping` and event types added later.
            _ => {}
        }
        Ok(false)
    }

    fn finish(self, forced: Option<&str>) -> Result<ChatResponse, ModelError> {
        if !self.done {
            return Err(ModelError::new(
                ModelErrorKind::StreamInterrupted,
                PROVIDER,
                "the stream ended before message_stop",
            ));
        }
        let stop = self.stop.unwrap_or_else(|| "end_turn".into());
        assemble(
            self.id,
            self.blocks.into_values().collect(),
            &stop,
            usage_of(&Value::Object(self.usage)),
            self.model,
            forced,
        )
    }
}
