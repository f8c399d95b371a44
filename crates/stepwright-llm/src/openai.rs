//! OpenAI-compatible chat completions (OpenAI, Azure, Ollama, vLLM, llama.cpp server, Groq,
//! OpenRouter… through `base_url`).

use std::collections::BTreeMap;

use futures_util::future::BoxFuture;
use serde_json::{Map, Value, json};

use crate::adapter::{ChatModel, TokenSink};
use crate::error::{ModelError, ModelErrorKind};
use crate::http::{HttpOptions, RateLimits, Transport, is_event_stream};
use crate::schema::{object_root, openai_strict, strict_expressible};
use crate::types::{
    ChatRequest, ChatResponse, FinishReason, Message, TokenLimitField, ToolCall, ToolChoice, Usage, sampling_problem,
};

const PROVIDER: &str = "openai";

/// The OpenAI chat completions adapter.
pub struct OpenAi {
    transport: Transport,
    base_url: String,
    api_key: Option<String>,
    token_limit_field: TokenLimitField,
    sampling: bool,
}

impl std::fmt::Debug for OpenAi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAi").field("base_url", &self.base_url).finish_non_exhaustive()
    }
}

impl OpenAi {
    /// The default endpoint.
    pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

    /// An adapter for `base_url` (`…/v1`), with a key (local servers often need none).
    pub fn new(
        base_url: &str,
        api_key: Option<String>,
        options: HttpOptions,
        limits: &RateLimits,
    ) -> Result<Self, ModelError> {
        let transport = Transport::new(PROVIDER, options, limits, api_key.as_deref().unwrap_or(base_url))?;
        Ok(Self {
            transport,
            base_url: base_url.trim_end_matches('/').to_owned(),
            api_key,
            token_limit_field: TokenLimitField::MaxTokens,
            sampling: true,
        })
    }

    /// Sends the token limit as `field` (default `max_tokens`, which compatible servers read;
    /// OpenAI's own endpoint wants `max_completion_tokens`).
    #[must_use]
    pub fn token_limit_field(mut self, field: TokenLimitField) -> Self {
        self.token_limit_field = field;
        self
    }

    /// Whether the model takes temperature and top_p: when it does not, a request that sets
    /// them fails (`model_config`) instead of being sent.
    #[must_use]
    pub fn sampling(mut self, takes: bool) -> Self {
        self.sampling = takes;
        self
    }

    fn headers(&self) -> Vec<(&'static str, String)> {
        self.api_key.iter().map(|key| ("authorization", format!("Bearer {key}"))).collect()
    }

    async fn call(&self, request: &ChatRequest, sink: Option<TokenSink<'_>>) -> Result<ChatResponse, ModelError> {
        // A structured answer with a non-object root went out wrapped; it comes back bare.
        let answer = self.exchange(request, sink).await?;
        self.transport.count_tokens(answer.usage.total()).await;
        Ok(crate::schema::unwrapped(request, answer))
    }

    async fn exchange(&self, request: &ChatRequest, sink: Option<TokenSink<'_>>) -> Result<ChatResponse, ModelError> {
        if let Some(problem) = sampling_problem(&request.params, self.sampling, false) {
            return Err(ModelError::new(ModelErrorKind::Config, PROVIDER, problem));
        }
        let body = encode(request, sink.is_some(), self.token_limit_field);
        let url = format!("{}/chat/completions", self.base_url);
        let response = self.transport.post(&url, &self.headers(), &body).await?;
        match sink {
            None => decode(&self.transport.json(response).await?),
            // Some compatible servers ignore `stream: true` and answer in one piece.
            Some(sink) if !is_event_stream(&response) => {
                let whole = decode(&self.transport.json(response).await?)?;
                if !whole.content.is_empty() {
                    sink(&whole.content);
                }
                Ok(whole)
            }
            Some(sink) => {
                let mut stream = StreamState::default();
                self.transport.events(response, "[DONE]", |event| stream.event(&event.data, sink)).await?;
                stream.finish()
            }
        }
    }
}

impl ChatModel for OpenAi {
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

/// The request body.
pub(crate) fn encode(request: &ChatRequest, stream: bool, token_limit_field: TokenLimitField) -> Value {
    let messages: Vec<Value> = request
        .messages
        .iter()
        .map(|message| match message {
            Message::System { content } => json!({ "role": "system", "content": content }),
            Message::User { content } => json!({ "role": "user", "content": content }),
            Message::Assistant { content, tool_calls } => {
                // `content` may be null only beside `tool_calls`; an empty answer being repaired
                // is sent as the empty string it was.
                let content = if content.is_empty() && !tool_calls.is_empty() { Value::Null } else { json!(content) };
                let mut m = json!({ "role": "assistant", "content": content });
                if !tool_calls.is_empty() {
                    m["tool_calls"] = tool_calls
                        .iter()
                        .map(|call| {
                            let arguments = match &call.arguments {
                                Value::String(raw) => raw.clone(),
                                other => other.to_string(),
                            };
                            json!({ "id": call.id, "type": "function", "function": { "name": call.name, "arguments": arguments } })
                        })
                        .collect();
                }
                m
            }
            Message::Tool { call_id, content, .. } => json!({ "role": "tool", "tool_call_id": call_id, "content": content }),
        })
        .collect();
    let mut body = Map::new();
    body.insert("model".into(), json!(request.model));
    body.insert("messages".into(), Value::Array(messages));
    if !request.tools.is_empty() {
        let tools = request
            .tools
            .iter()
            .map(|t| json!({ "type": "function", "function": { "name": t.name, "description": t.description, "parameters": t.parameters } }))
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    if let Some(choice) = &request.tool_choice {
        body.insert(
            "tool_choice".into(),
            match choice {
                ToolChoice::Auto => json!("auto"),
                ToolChoice::None => json!("none"),
                ToolChoice::Required => json!("required"),
                ToolChoice::Tool(name) => json!({ "type": "function", "function": { "name": name } }),
            },
        );
    }
    if let Some(output) = &request.output {
        body.insert("response_format".into(), {
            let (schema, _) = object_root(&output.schema);
            // What strict mode cannot express is sent as written, not narrowed.
            let strict = strict_expressible(&schema);
            let schema = if strict { openai_strict(&schema) } else { schema };
            json!({ "type": "json_schema", "json_schema": { "name": output.name, "schema": schema, "strict": strict } })
        });
    }
    let params = &request.params;
    if let Some(t) = params.temperature {
        body.insert("temperature".into(), json!(t));
    }
    if let Some(p) = params.top_p {
        body.insert("top_p".into(), json!(p));
    }
    if let Some(n) = params.max_tokens {
        body.insert(token_limit_field.as_str().into(), json!(n));
    }
    if !params.stop.is_empty() {
        body.insert("stop".into(), json!(params.stop));
    }
    if stream {
        body.insert("stream".into(), json!(true));
        body.insert("stream_options".into(), json!({ "include_usage": true }));
    }
    Value::Object(body)
}

fn protocol(message: impl Into<String>) -> ModelError {
    ModelError::new(ModelErrorKind::Protocol, PROVIDER, message)
}

fn finish_reason(text: &str) -> FinishReason {
    match text {
        "stop" => FinishReason::Stop,
        "length" => FinishReason::Length,
        "tool_calls" | "function_call" => FinishReason::ToolCalls,
        "content_filter" => FinishReason::ContentFilter,
        other => FinishReason::Other(other.to_owned()),
    }
}

fn usage(value: &Value) -> Usage {
    Usage {
        input_tokens: value["prompt_tokens"].as_u64().unwrap_or(0),
        output_tokens: value["completion_tokens"].as_u64().unwrap_or(0),
        // Counted in `prompt_tokens` already; OpenAI's caching writes at no extra price.
        cache_read_input_tokens: value["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap_or(0),
        cache_creation_input_tokens: 0,
    }
}

/// Arguments as JSON, or the raw text when the model wrote something else.
fn arguments(raw: &str) -> Value {
    if raw.trim().is_empty() {
        return json!({});
    }
    serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_owned()))
}

/// A whole (non-streamed) response.
pub(crate) fn decode(body: &Value) -> Result<ChatResponse, ModelError> {
    let choice = body["choices"].get(0).ok_or_else(|| protocol(format!("the answer has no choices: {body}")))?;
    let message = &choice["message"];
    let tool_calls = message["tool_calls"]
        .as_array()
        .map(|calls| {
            calls
                .iter()
                .map(|call| ToolCall {
                    id: call["id"].as_str().unwrap_or_default().to_owned(),
                    name: call["function"]["name"].as_str().unwrap_or_default().to_owned(),
                    arguments: arguments(call["function"]["arguments"].as_str().unwrap_or_default()),
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(ChatResponse {
        id: body["id"].as_str().map(str::to_owned),
        content: message["content"].as_str().unwrap_or_default().to_owned(),
        tool_calls,
        finish_reason: finish_reason(choice["finish_reason"].as_str().unwrap_or("stop")),
        usage: usage(&body["usage"]),
        model: body["model"].as_str().unwrap_or_default().to_owned(),
    })
}

/// A tool call being assembled from stream fragments.
#[derive(Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

/// The state of a streamed answer.
#[derive(Default)]
struct StreamState {
    content: String,
    calls: BTreeMap<u64, PartialCall>,
    finish: Option<FinishReason>,
    usage: Usage,
    model: String,
    id: Option<String>,
    done: bool,
}

impl StreamState {
    /// Takes one `data:` payload; `Ok(true)` at `[DONE]`.
    fn event(&mut self, data: &str, sink: TokenSink<'_>) -> Result<bool, ModelError> {
        if data.trim() == "[DONE]" {
            self.done = true;
            return Ok(true);
        }
        let chunk: Value =
            serde_json::from_str(data).map_err(|e| protocol(format!("a stream chunk is not JSON ({e}): {data}")))?;
        if let Some(error) = chunk.get("error") {
            let message = error["message"].as_str().unwrap_or("an error in the stream");
            let kind = if error["type"] == "server_error" {
                ModelErrorKind::Server
            } else {
                ModelErrorKind::StreamInterrupted
            };
            return Err(ModelError::new(kind, PROVIDER, format!("the stream reported an error: {message}")));
        }
        if let Some(model) = chunk["model"].as_str() {
            model.clone_into(&mut self.model);
        }
        if let Some(id) = chunk["id"].as_str() {
            self.id = Some(id.to_owned());
        }
        if chunk["usage"].is_object() {
            self.usage = usage(&chunk["usage"]);
        }
        for choice in chunk["choices"].as_array().into_iter().flatten() {
            let delta = &choice["delta"];
            if let Some(text) = delta["content"].as_str()
                && !text.is_empty()
            {
                self.content.push_str(text);
                sink(text);
            }
            for fragment in delta["tool_calls"].as_array().into_iter().flatten() {
                let index = fragment["index"].as_u64().unwrap_or(0);
                let call = self.calls.entry(index).or_default();
                if let Some(id) = fragment["id"].as_str() {
                    id.clone_into(&mut call.id);
                }
                if let Some(name) = fragment["function"]["name"].as_str() {
                    call.name.push_str(name);
                }
                if let Some(part) = fragment["function"]["arguments"].as_str() {
                    call.arguments.push_str(part);
                }
            }
            if let Some(reason) = choice["finish_reason"].as_str() {
                self.finish = Some(finish_reason(reason));
            }
        }
        Ok(false)
    }

    fn finish(self) -> Result<ChatResponse, ModelError> {
        if !self.done {
            return Err(ModelError::new(ModelErrorKind::StreamInterrupted, PROVIDER, "the stream ended before [DONE]"));
        }
        let finish_reason = self.finish.ok_or_else(|| protocol("the stream ended without a finish_reason"))?;
        Ok(ChatResponse {
            id: self.id,
            content: self.content,
            tool_calls: self
                .calls
                .into_values()
                .map(|c| ToolCall { id: c.id, name: c.name, arguments: arguments(&c.arguments) })
                .collect(),
            finish_reason,
            usage: self.usage,
            model: self.model,
        })
    }
}
