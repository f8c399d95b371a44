//! rmcp's streamable HTTP client (reqwest), watched for answers over the size limit.
//!
//! rmcp refuses an SSE event or a JSON answer over its limit inside its worker and reports
//! only that the transport closed; the call would then be repeated on a new session and run
//! the tool again. This client passes every request to reqwest's implementation and raises
//! a flag when an answer was refused for its size, so the caller reports the size and does
//! not repeat the call.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
};
use sse_stream::Sse;

/// What rmcp's errors say when an answer was over the limit.
const OVER_THE_LIMIT: &str = "exceeded the maximum size";

type Events = BoxStream<'static, Result<Sse, SseError>>;

/// The last session id the server gave (or the client sent): the MCP conventions'
/// `mcp.session.id` of a call's span.
#[derive(Clone, Default)]
pub(crate) struct SessionSeen(Arc<std::sync::Mutex<Option<Arc<str>>>>);

impl SessionSeen {
    pub(crate) fn last(&self) -> Option<Arc<str>> {
        self.0.lock().expect("poisoned").clone()
    }

    fn saw(&self, session: Option<&str>) {
        if let Some(session) = session {
            let mut last = self.0.lock().expect("poisoned");
            if last.as_deref() != Some(session) {
                *last = Some(session.into());
            }
        }
    }
}

/// reqwest's client, with a flag raised when an answer is refused for its size, and the
/// session id kept.
#[derive(Clone)]
pub(crate) struct SizeWatched {
    inner: reqwest::Client,
    tripped: Arc<AtomicBool>,
    session: SessionSeen,
}

impl SizeWatched {
    pub(crate) fn new(tripped: Arc<AtomicBool>, session: SessionSeen) -> Self {
        Self { inner: reqwest::Client::new(), tripped, session }
    }

    fn note<T>(&self, result: &Result<T, StreamableHttpError<reqwest::Error>>) {
        if let Err(error) = result
            && error.to_string().contains(OVER_THE_LIMIT)
        {
            self.tripped.store(true, Ordering::SeqCst);
        }
    }

    /// A POST's answer, noted and its event stream watched.
    fn watch_answer(
        &self,
        answer: Result<StreamableHttpPostResponse, StreamableHttpError<reqwest::Error>>,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<reqwest::Error>> {
        self.note(&answer);
        if let Ok(StreamableHttpPostResponse::Sse(_, session) | StreamableHttpPostResponse::Json(_, session)) = &answer
        {
            self.session.saw(session.as_deref());
        }
        answer.map(|answer| match answer {
            StreamableHttpPostResponse::Sse(events, session) => {
                StreamableHttpPostResponse::Sse(self.watch(events), session)
            }
            other => other,
        })
    }

    /// A GET's event stream, noted and watched.
    fn watch_stream(
        &self,
        events: Result<Events, StreamableHttpError<reqwest::Error>>,
    ) -> Result<Events, StreamableHttpError<reqwest::Error>> {
        self.note(&events);
        events.map(|events| self.watch(events))
    }

    fn watch(&self, events: Events) -> Events {
        let tripped = self.tripped.clone();
        events
            .inspect(move |event| {
                if let Err(error) = event
                    && format!("{error} {error:?}").contains(OVER_THE_LIMIT)
                {
                    tripped.store(true, Ordering::SeqCst);
                }
            })
            .boxed()
    }
}

impl StreamableHttpClient for SizeWatched {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        self.session.saw(session_id.as_deref());
        let answer = self.inner.post_message(uri, message, session_id, auth_header, custom_headers).await;
        self.watch_answer(answer)
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        self.session.saw(session_id.as_deref());
        let answer = self
            .inner
            .post_message_with_max_sse_event_size(
                uri,
                message,
                session_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await;
        self.watch_answer(answer)
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), StreamableHttpError<Self::Error>> {
        self.inner.delete_session(uri, session_id, auth_header, custom_headers).await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<Events, StreamableHttpError<Self::Error>> {
        self.watch_stream(self.inner.get_stream(uri, session_id, last_event_id, auth_header, custom_headers).await)
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<Events, StreamableHttpError<Self::Error>> {
        let events = self
            .inner
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await;
        self.watch_stream(events)
    }
}
