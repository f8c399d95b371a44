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
