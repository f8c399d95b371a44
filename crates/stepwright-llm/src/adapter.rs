//! The one trait every model adapter implements.

use futures_util::future::BoxFuture;

use crate::error::ModelError;
use crate::types::{ChatRequest, ChatResponse};

/// Where streamed text goes as it arrives (a step's token sink, a terminal).
pub type TokenSink<'a> = &'a (dyn Fn(&str) + Send + Sync);

/// A chat model: the built-in OpenAI-compatible and Anthropic adapters, or any type of
/// yours. Cancelling a call is dropping its future (the connection is closed).
///
/// ```
/// use futures_util::future::BoxFuture;
/// use stepwright_llm::{ChatModel, ChatRequest, ChatResponse, FinishReason, ModelError, Usage};
///
/// /// A model that shouts the last message back.
/// struct Echo;
///
/// impl ChatModel for Echo {
///     fn provider(&self) -> &str {
///         "echo"
///     }
///
///     fn chat<'a>(&'a self, request: &'a ChatRequest) -> BoxFuture<'a, Result<ChatResponse, ModelError>> {
///         let last = serde_json::to_value(request.messages.last()).unwrap();
///         let text = last["content"].as_str().unwrap_or_default().to_uppercase();
///         Box::pin(async move {
///             Ok(ChatResponse {
///                 id: None,
///                 content: text,
///                 tool_calls: Vec::new(),
///                 finish_reason: FinishReason::Stop,
///                 usage: Usage::default(),
///                 model: "echo-1".into(),
///             })
///         })
///     }
/// }
/// ```
pub trait ChatModel: Send + Sync + 'static {
    /// The provider's name (`openai`, `anthropic`); part of a cassette's request key.
    fn provider(&self) -> &str;

    /// One call; the whole answer at once.
    fn chat<'a>(&'a self, request: &'a ChatRequest) -> BoxFuture<'a, Result<ChatResponse, ModelError>>;

    /// One call, streaming text to `sink` as it arrives; returns the whole answer at the
    /// end. The default calls [`ChatModel::chat`] and hands the text over in one piece.
    fn chat_stream<'a>(
        &'a self,
        request: &'a ChatRequest,
        sink: TokenSink<'a>,
    ) -> BoxFuture<'a, Result<ChatResponse, ModelError>> {
        Box::pin(async move {
            let response = self.chat(request).await?;
            if !response.content.is_empty() {
                sink(&response.content);
            }
            Ok(response)
        })
    }
}

type Script = dyn Fn(&ChatRequest) -> ChatResponse + Send + Sync;

/// A model that answers at once with what a function of the request says: for tests,
/// benchmarks and demos that must not reach a provider (a cassette replays real answers;
/// this one makes them up). It can remember every request it was sent.
///
/// ```
/// use stepwright_llm::{ChatResponse, FinishReason, ScriptedModel, Usage};
///
/// let model = ScriptedModel::new(|request| ChatResponse {
///     id: None,
///     content: format!("{} messages", request.messages.len()),
///     tool_calls: Vec::new(),
///     finish_reason: FinishReason::Stop,
///     usage: Usage::default(),
///     model: "scripted-1".into(),
/// })
/// .recording();
/// # let _ = model;
/// ```
pub struct ScriptedModel {
    script: Box<Script>,
    requests: Option<std::sync::Mutex<Vec<ChatRequest>>>,
}

impl std::fmt::Debug for ScriptedModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptedModel").field("recording", &self.requests.is_some()).finish_non_exhaustive()
    }
}

impl ScriptedModel {
    /// A model answering with `script(request)`.
    pub fn new(script: impl Fn(&ChatRequest) -> ChatResponse + Send + Sync + 'static) -> Self {
        Self { script: Box::new(script), requests: None }
    }

    /// Remembers every request (a copy each; leave it off where the cost matters).
    #[must_use]
    pub fn recording(mut self) -> Self {
        self.requests = Some(std::sync::Mutex::new(Vec::new()));
        self
    }

    /// The requests sent so far, if recording.
    pub fn requests(&self) -> Vec<ChatRequest> {
        self.requests.as_ref().map(|r| r.lock().expect("poisoned").clone()).unwrap_or_default()
    }
}

impl ChatModel for ScriptedModel {
    fn provider(&self) -> &str {
        "scripted"
    }

    fn chat<'a>(&'a self, request: &'a ChatRequest) -> BoxFuture<'a, Result<ChatResponse, ModelError>> {
        if let Some(requests) = &self.requests {
            requests.lock().expect("poisoned").push(request.clone());
        }
        let response = (self.script)(request);
        Box::pin(std::future::ready(Ok(response)))
    }
}
