//! The HTTP plumbing both adapters share: one client, retries that honour `retry-after`,
//! timeouts, rate limits per provider key, and reading SSE bodies.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use governor::{DefaultDirectRateLimiter, RateLimiter};
use serde_json::Value;
use stepwright_core::store::quota::{LocalQuotas, Quota, QuotaStore, QuotaTaken};

use crate::error::{ModelError, ModelErrorKind, shorten};
use crate::sse::{SseDecoder, SseEvent};

/// What every request to a model provider or an HTTP tool says it comes from: providers ask
/// for it, and it tells a proxy's logs which program sent what.
pub const USER_AGENT: &str = concat!("stepwright/", env!("CARGO_PKG_VERSION"));
/// How a binding talks HTTP.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpOptions {
    /// The longest wait for the answer's headers, and then between two chunks of it.
    pub timeout: Duration,
    /// Retries of a retryable failure (429, 5xx, 529, connection errors before the first
    /// byte, timeouts) before giving up.
    pub max_retries: u32,
    /// The first backoff when the provider gives no `retry-after`; doubled each retry.
    pub initial_backoff: Duration,
    /// The longest backoff, and the longest `retry-after` honoured in process: a provider
    /// that asks for more fails the call (retryable), so the step's own retry policy, which
    /// is durable, takes over.
    pub max_backoff: Duration,
    /// Requests per minute for this provider key, shared by every binding using the key
    /// (and, with [`RateLimits::shared`], by every process on the store).
    pub requests_per_minute: Option<NonZeroU32>,
    /// Tokens (input and output) per minute for this provider key, shared as requests are:
    /// a call waits while the minute's tokens are spent, and its usage is counted after it.
    pub tokens_per_minute: Option<NonZeroU32>,
}

impl Default for HttpOptions {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(120),
            max_retries: 3,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(60),
            requests_per_minute: None,
            tokens_per_minute: None,
        }
    }
}

/// Rate limiters by provider and key, shared by the bindings of one registry; with
/// [`RateLimits::shared`], counted in a store, so that every worker on it shares them.
pub struct RateLimits {
    limiters: Mutex<HashMap<String, Arc<DefaultDirectRateLimiter>>>,
    /// Where token quotas (and, when `shared`, request quotas) are counted.
    quotas: Arc<dyn QuotaStore>,
    shared: bool,
}

impl Default for RateLimits {
    fn default() -> Self {
        Self { limiters: Mutex::default(), quotas: Arc::new(LocalQuotas::default()), shared: false }
    }
}

impl std::fmt::Debug for RateLimits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimits").finish_non_exhaustive()
    }
}

impl RateLimits {
    /// Limits counted in `quotas`, a store every worker shares: requests in windows of a
    /// second (a sixtieth of the minute's quota each, so that it is never spent in one
    /// burst), tokens in windows of a minute.
    pub fn shared(quotas: Arc<dyn QuotaStore>) -> Self {
        Self { limiters: Mutex::default(), quotas, shared: true }
    }

    /// The limiter for a provider and key (by a hash of the key, never the key itself). The
    /// first binding to ask sets the quota; bursts are at most a second's worth of it.
    pub(crate) fn limiter(&self, provider: &str, key: &str, per_minute: NonZeroU32) -> Arc<DefaultDirectRateLimiter> {
        let fingerprint = stepwright_core::ContentHash::of_parts(&[provider.as_bytes(), key.as_bytes()]).to_hex();
        self.limiters
            .lock()
            .expect("poisoned")
            .entry(fingerprint)
            .or_insert_with(|| {
                // Bursts of at most a second's worth: a full minute's quota at once is what
                // gets a client a 429 from a provider counting over shorter windows.
                let burst = NonZeroU32::new(per_minute.get() / 60).unwrap_or(NonZeroU32::MIN);
                Arc::new(RateLimiter::direct(governor::Quota::per_minute(per_minute).allow_burst(burst)))
            })
            .clone()
    }
}

const SECOND: Duration = Duration::from_secs(1);
const MINUTE: Duration = Duration::from_secs(60);

/// Installs ring as rustls's crypto provider once per process. The workspace builds reqwest
/// without a provider of its own (aws-lc builds slowly); call this before building any
/// reqwest client outside this crate.
pub fn install_crypto_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // `Err` means another provider is installed already, which serves as well.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// One provider endpoint's client.
pub(crate) struct Transport {
    client: reqwest::Client,
    provider: &'static str,
    options: HttpOptions,
    /// The request limit counted in this process.
    limiter: Option<Arc<DefaultDirectRateLimiter>>,
    /// The quotas counted in the store, and the request and token quotas counted there.
    quotas: Arc<dyn QuotaStore>,
    requests: Option<Quota>,
    tokens: Option<Quota>,
}

impl Transport {
    pub(crate) fn new(
        provider: &'static str,
        options: HttpOptions,
        limits: &RateLimits,
        key: &str,
    ) -> Result<Self, ModelError> {
        install_crypto_provider();
        let client = reqwest::Client::builder()
            .user_agent(USER_AGENT)
            .connect_timeout(options.timeout.min(Duration::from_secs(30)))
            .build()
            .map_err(|e| ModelError::new(ModelErrorKind::Config, provider, format!("building an HTTP client: {e}")))?;
        let fingerprint = stepwright_core::ContentHash::of_parts(&[provider.as_bytes(), key.as_bytes()]).to_hex();
        let (limiter, requests) = match options.requests_per_minute {
            None => (None, None),
            Some(rpm) if limits.shared => {
                let per_second = u64::from(rpm.get()).div_ceil(60);
                let quota =
                    Quota { name: format!("{provider}:{fingerprint}:requests"), limit: per_second, window: SECOND };
                (None, Some(quota))
            }
            Some(rpm) => (Some(limits.limiter(provider, key, rpm)), None),
        };
        let tokens = options.tokens_per_minute.map(|tpm| Quota {
            name: format!("{provider}:{fingerprint}:tokens"),
            limit: u64::from(tpm.get()),
            window: MINUTE,
        });
        Ok(Self { client, provider, options, limiter, quotas: limits.quotas.clone(), requests, tokens })
    }

    /// Waits until the request and token quotas let a request go, taking one request. A
    /// store that cannot answer does not hold model calls up: the call goes.
    async fn wait_for_quotas(&self) {
        if let Some(limiter) = &self.limiter {
            limiter.until_ready().await;
        }
        for (quota, amount) in [(&self.requests, 1), (&self.tokens, 0)] {
            let Some(quota) = quota else { continue };
            while let Ok(QuotaTaken::Full { retry_in }) = self.quotas.take_quota(quota, amount).await {
                tokio::time::sleep(retry_in.max(Duration::from_millis(1))).await;
            }
        }
    }

    /// Counts a finished call's tokens against the token quota.
    pub(crate) async fn count_tokens(&self, tokens: u64) {
        if let Some(quota) = &self.tokens {
            // A store that cannot count them now leaves the next calls freer; nothing else.
            let _ = self.quotas.charge_quota(quota, tokens).await;
        }
    }

    fn error(&self, kind: ModelErrorKind, message: impl Into<String>) -> ModelError {
        ModelError::new(kind, self.provider, message)
    }

    /// POSTs a JSON body and returns the successful response (headers read), retrying
    /// what may be retried.
    pub(crate) async fn post(
        &self,
        url: &str,
        headers: &[(&'static str, String)],
        body: &Value,
    ) -> Result<reqwest::Response, ModelError> {
        let body = serde_json::to_vec(body).map_err(|e| self.error(ModelErrorKind::Protocol, e.to_string()))?;
        let mut retries = 0;
        loop {
            self.wait_for_quotas().await;
            let mut request = self.client.post(url).header("content-type", "application/json").body(body.clone());
            for (name, value) in headers {
                request = request.header(*name, value);
            }
            // W3C Trace Context: the provider (or a gateway in front of it) joins the trace.
            if let Some(traceparent) = stepwright_core::trace::current_traceparent() {
                request = request.header("traceparent", traceparent.as_str());
            }
            let error = match tokio::time::timeout(self.options.timeout, request.send()).await {
                Err(_) => self.error(
                    ModelErrorKind::Timeout,
                    format!("no answer from {url} within {} s", self.options.timeout.as_secs_f64()),
                ),
                Ok(Err(e)) => self.error(ModelErrorKind::Connection, format!("sending to {url}: {}", error_chain(&e))),
                Ok(Ok(response)) if response.status().is_success() => return Ok(response),
                Ok(Ok(response)) => self.status_error(response).await,
            };
            if !error.kind.retryable() || retries >= self.options.max_retries {
                return Err(error);
            }
            let backoff = self.options.initial_backoff.saturating_mul(1 << retries.min(16));
            let delay = error.retry_after.unwrap_or(backoff.min(self.options.max_backoff));
            if delay > self.options.max_backoff {
                return Err(error);
            }
            tokio::time::sleep(delay).await;
            retries += 1;
        }
    }

    async fn status_error(&self, response: reqwest::Response) -> ModelError {
        let status = response.status().as_u16();
        let retry_after = retry_after(response.headers());
        let text = match tokio::time::timeout(self.options.timeout, response.text()).await {
            Ok(Ok(text)) => text,
            _ => String::new(),
        };
        // Both providers wrap their message as `{"error": {"message": …}}`.
        let message = serde_json::from_str::<Value>(&text)
            .ok()
            .and_then(|v| v["error"]["message"].as_str().map(|m| shorten(m, crate::error::MESSAGE_MOST)))
            .unwrap_or_else(|| shorten(&text, 500));
        ModelError {
            kind: ModelErrorKind::from_status(status),
            provider: self.provider.to_owned(),
            status: Some(status),
            message: format!("HTTP {status}: {message}"),
            retry_after,
        }
    }

    /// Reads a whole JSON body.
    pub(crate) async fn json(&self, response: reqwest::Response) -> Result<Value, ModelError> {
        let bytes = match tokio::time::timeout(self.options.timeout, response.bytes()).await {
            Err(_) => return Err(self.error(ModelErrorKind::StreamInterrupted, "the answer stopped arriving")),
            Ok(Err(e)) => {
                return Err(
                    self.error(ModelErrorKind::StreamInterrupted, format!("reading the answer: {}", error_chain(&e)))
                );
            }
            Ok(Ok(bytes)) => bytes,
        };
        serde_json::from_slice(&bytes).map_err(|e| {
            self.error(
                ModelErrorKind::Protocol,
                format!("the answer is not JSON ({e}): {}", shorten(&String::from_utf8_lossy(&bytes), 200)),
            )
        })
    }

    /// Reads an SSE body, handing each event to `on_event` as it completes. `on_event`
    /// returns `Ok(true)` at the stream's end `marker`. A stream that stops before it (a
    /// dropped connection, a server that just closes) is `StreamInterrupted`.
    pub(crate) async fn events(
        &self,
        response: reqwest::Response,
        marker: &str,
        mut on_event: impl FnMut(SseEvent) -> Result<bool, ModelError>,
    ) -> Result<(), ModelError> {
        let mut decoder = SseDecoder::new();
        let mut body = response.bytes_stream();
        loop {
            let chunk = match tokio::time::timeout(self.options.timeout, body.next()).await {
                Err(_) => return Err(self.error(ModelErrorKind::StreamInterrupted, "the stream went silent")),
                Ok(None) => {
                    return Err(
                        self.error(ModelErrorKind::StreamInterrupted, format!("the stream ended before {marker}"))
                    );
                }
                Ok(Some(Err(e))) => {
                    return Err(
                        self.error(ModelErrorKind::StreamInterrupted, format!("the stream broke: {}", error_chain(&e)))
                    );
                }
                Ok(Some(Ok(chunk))) => chunk,
            };
            for event in decoder.push(&chunk) {
                if on_event(event)? {
                    return Ok(());
                }
            }
        }
    }
}

/// Whether a response is an SSE stream (by its content type).
pub(crate) fn is_event_stream(response: &reqwest::Response) -> bool {
    response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().starts_with("text/event-stream"))
}

/// `retry-after-ms`, then `retry-after` as seconds or an HTTP date.
fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim);
    if let Some(ms) = text("retry-after-ms").and_then(|v| v.parse::<f64>().ok())
        && ms.is_finite()
        && ms >= 0.0
    {
        return Some(Duration::from_secs_f64(ms / 1000.0));
    }
    let value = text("retry-after")?;
    if let Ok(seconds) = value.parse::<f64>() {
        return (seconds.is_finite() && seconds >= 0.0).then(|| Duration::from_secs_f64(seconds));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(std::time::SystemTime::now()).unwrap_or_default())
}

/// An error with its sources, which is where reqwest keeps the useful part.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_reads_milliseconds_seconds_and_dates() {
        let mut headers = reqwest::header::HeaderMap::new();
        assert_eq!(retry_after(&headers), None);
        headers.insert("retry-after", "7".parse().unwrap());
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(7)));
        headers.insert("retry-after-ms", "250".parse().unwrap());
        assert_eq!(retry_after(&headers), Some(Duration::from_millis(250)), "the precise header wins");
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert("retry-after", "Wed, 21 Oct 2015 07:28:00 GMT".parse().unwrap());
        assert_eq!(retry_after(&headers), Some(Duration::ZERO), "a date in the past means now");
        headers.insert("retry-after", "soon".parse().unwrap());
        assert_eq!(retry_after(&headers), None);
    }
}
