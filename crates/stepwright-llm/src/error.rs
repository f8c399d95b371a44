//! Model call failures, classified so that the right ones are retried.

use std::time::Duration;

use stepwright_core::{ErrorCode, StepError};

/// What went wrong with a model call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ModelErrorKind {
    /// 429: too many requests.
    RateLimited,
    /// 529 (Anthropic) or 503: the provider is overloaded.
    Overloaded,
    /// Another 5xx.
    Server,
    /// The connection failed before the first byte of the answer.
    Connection,
    /// No answer within the request timeout.
    Timeout,
    /// 400, 404, 422: the provider refused the request as written.
    BadRequest,
    /// 401: the key is missing or wrong.
    Unauthorized,
    /// 403: the key may not do this.
    Forbidden,
    /// The stream broke after it started (the connection dropped, or it ended without its
    /// end marker). Not retried by the adapter: tokens already reached the sink.
    StreamInterrupted,
    /// The provider answered with something that does not follow its own wire format.
    Protocol,
    /// The binding cannot be used (no key, an unknown provider).
    Config,
    /// A cassette in replay mode has no recording of this request.
    CassetteMiss,
}

impl ModelErrorKind {
    /// The stable error code (docs/error-codes.md).
    pub fn code(self) -> &'static str {
        match self {
            Self::RateLimited => "model_rate_limited",
            Self::Overloaded => "model_overloaded",
            Self::Server => "model_server_error",
            Self::Connection => "model_connection",
            Self::Timeout => "model_timeout",
            Self::BadRequest => "model_bad_request",
            Self::Unauthorized => "model_unauthorized",
            Self::Forbidden => "model_forbidden",
            Self::StreamInterrupted => "model_stream_interrupted",
            Self::Protocol => "model_protocol",
            Self::Config => "model_config",
            Self::CassetteMiss => "cassette_miss",
        }
    }

    /// Whether the adapter retries it (before any byte of an answer arrived).
    pub fn retryable(self) -> bool {
        matches!(self, Self::RateLimited | Self::Overloaded | Self::Server | Self::Connection | Self::Timeout)
    }

    /// The kind for an HTTP status that is not a success.
    pub fn from_status(status: u16) -> Self {
        match status {
            429 => Self::RateLimited,
            503 | 529 => Self::Overloaded,
            401 => Self::Unauthorized,
            403 => Self::Forbidden,
            500..=599 => Self::Server,
            _ => Self::BadRequest,
        }
    }
}

/// A model call that failed.
#[derive(Debug, Clone, thiserror::Error)]
#[error("calling {provider}: {message}")]
pub struct ModelError {
    /// What went wrong.
    pub kind: ModelErrorKind,
    /// The provider (`openai`, `anthropic`).
    pub provider: String,
    /// The HTTP status, when there was one.
    pub status: Option<u16>,
    /// The provider's own message where it gave one.
    pub message: String,
    /// How long the provider asked us to wait (`retry-after`).
    pub retry_after: Option<Duration>,
}

impl ModelError {
    /// An error without status.
    pub fn new(kind: ModelErrorKind, provider: &str, message: impl Into<String>) -> Self {
        let message = shorten(&message.into(), MESSAGE_MOST);
        Self { kind, provider: provider.to_owned(), status: None, message, retry_after: None }
    }
}

/// The most characters of a provider's error text kept: it is journaled with the failed
/// step, and a provider may put a whole echoed request (or an HTML page) into it.
pub(crate) const MESSAGE_MOST: usize = 1000;

impl From<ModelError> for StepError {
    fn from(error: ModelError) -> Self {
        // A stream that broke may be retried by the step's retry policy (the adapter does
        // not, as tokens were already streamed); everything the adapter retries is
        // retryable at the step level too, once the adapter gave up.
        let retryable = error.kind.retryable() || error.kind == ModelErrorKind::StreamInterrupted;
        StepError::new(ErrorCode::from_static(error.kind.code()), error.to_string()).retryable(retryable)
    }
}

/// `text` cut to `most` characters, marked with `…` when cut (a provider's or a tool's
/// message in an error).
pub(crate) fn shorten(text: &str, most: usize) -> String {
    if text.chars().count() <= most {
        text.to_owned()
    } else {
        let cut: String = text.chars().take(most).collect();
        format!("{cut}…")
    }
}
