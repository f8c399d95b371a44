//! Model bindings: names a workflow uses (`fast`, `local`) bound to a provider, a model,
//! an endpoint, a key, a price and limits; the registry steps find as a service.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::Instrument;

use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::adapter::{ChatModel, TokenSink};
use crate::anthropic::Anthropic;
use crate::cassette::{Cassette, CassetteMode};
use crate::error::shorten;
use crate::error::{ModelError, ModelErrorKind};
use crate::http::{HttpOptions, RateLimits};
use crate::openai::OpenAi;
pub use crate::prices::Pricing;
pub use crate::provider::Provider;
use crate::types::{ChatRequest, ChatResponse, Message, TokenLimitField, Usage};

/// How one binding reaches its model.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    /// Whose wire format and endpoint to use.
    pub provider: Provider,
    /// The provider's model id.
    pub model: String,
    /// The endpoint (the provider's public one by default).
    pub base_url: Option<String>,
    /// The key itself (prefer `api_key_env`).
    pub api_key: Option<String>,
    /// The environment variable holding the key (the provider's usual one by default).
    pub api_key_env: Option<String>,
    /// Prices, for cost per call, step and run.
    pub pricing: Option<Pricing>,
    /// Timeouts, retries and the rate limit.
    pub http: HttpOptions,
    /// Anthropic: the `anthropic-version` header (default `2023-06-01`).
    pub api_version: Option<String>,
    /// OpenAI: the field of the token limit (default `max_completion_tokens` on OpenAI's own
    /// endpoint, `max_tokens` on a `base_url`: what compatible servers read).
    pub token_limit_field: Option<TokenLimitField>,
    /// Whether the model takes temperature and top_p; a request that sets them for a model
    /// that does not fails instead of being sent. Default: yes for OpenAI (say `false` for
    /// reasoning models), no for Anthropic (its current models take neither).
    pub sampling: Option<bool>,
}

impl ModelConfig {
    /// A binding with defaults for everything but provider and model.
    pub fn new(provider: Provider, model: &str) -> Self {
        Self {
            provider,
            model: model.to_owned(),
            base_url: None,
            api_key: None,
            api_key_env: None,
            pricing: None,
            http: HttpOptions::default(),
            api_version: None,
            token_limit_field: None,
            sampling: None,
        }
    }

    /// Whether the model takes temperature and top_p: as the binding says, else yes for
    /// OpenAI and no for Anthropic.
    pub fn takes_sampling(&self) -> bool {
        self.sampling.unwrap_or(self.provider != Provider::Anthropic)
    }

    /// Parses `provider:model[@base_url]` (the CLI's `--model NAME=SPEC`).
    pub fn parse_spec(spec: &str) -> Result<Self, String> {
        let (provider, rest) = spec
            .split_once(':')
            .ok_or_else(|| format!("{spec:?} is not provider:model[@base_url], e.g. openai:gpt-4o-mini"))?;
        let provider: Provider = provider.parse()?;
        let (model, base_url) = match rest.split_once('@') {
            Some((model, url)) => (model, Some(url.to_owned())),
            None => (rest, None),
        };
        if model.is_empty() {
            return Err(format!("{spec:?} names no model"));
        }
        if let Some(url) = &base_url
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            return Err(format!("{spec:?}: the base URL must start with http:// or https://"));
        }
        Ok(Self { base_url, ..Self::new(provider, model) })
    }

    /// Sets the requests-per-minute limit.
    #[must_use]
    pub fn requests_per_minute(mut self, rpm: u32) -> Self {
        self.http.requests_per_minute = NonZeroU32::new(rpm);
        self
    }

    /// Tokens (input and output) per minute for this key.
    #[must_use]
    pub fn tokens_per_minute(mut self, tpm: u32) -> Self {
        self.http.tokens_per_minute = NonZeroU32::new(tpm);
        self
    }

    fn key(&self) -> Option<String> {
        self.api_key.clone().or_else(|| {
            let variable = self.api_key_env.as_deref().unwrap_or(self.provider.key_variable());
            std::env::var(variable).ok().filter(|k| !k.is_empty())
        })
    }
}

/// How a value becomes span content: redacted and cut, or `None` (not captured).
pub type ContentRenderer<'a> = dyn Fn(&serde_json::Value) -> Option<String> + Send + Sync + 'a;

/// One binding: its adapter, the model id sent, and the price.
#[derive(Clone)]
struct Binding {
    model: Arc<dyn ChatModel>,
    model_id: String,
    /// The host and port its requests go to (`server.address`/`server.port` on its spans).
    server: Option<(String, u16)>,
    pricing: Option<Pricing>,
    /// Where the prices came from (journaled with each call's cost).
    prices: Option<PriceSource>,
}

/// Where a binding's prices came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PriceSource {
    /// The binding's own `pricing` (the file's, or the embedding code's).
    Binding,
    /// The built-in price table of this version.
    Table(&'static str),
}

impl PriceSource {
    fn describe(self) -> String {
        match self {
            Self::Binding => "binding".to_owned(),
            Self::Table(version) => format!("price table {version}"),
        }
    }
}

/// What one call returned, and what it cost.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallRecord {
    /// The binding name.
    pub binding: String,
    /// The model id asked for (the binding's; a provider may answer with another).
    pub request_model: String,
    /// The provider that answered (`openai`, `anthropic`, `scripted`).
    pub provider: String,
    /// The answer as the adapter decoded it, usage included.
    pub response: ChatResponse,
    /// Cost in US dollars, if the binding has prices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// Where the prices came from: `binding` (its `pricing`) or `price table <version>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prices: Option<String>,
    /// Wall time of the call.
    pub latency_ms: u64,
    /// A streamed call: how long until its first chunk arrived.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_to_first_chunk_ms: Option<u64>,
    /// Whether a cassette played it back.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub replayed: bool,
}

/// The model bindings of an engine, with an optional cassette. Register it as a service
/// (`Services::with(Arc::new(models))`); `llm` steps find it there.
#[derive(Default)]
pub struct Models {
    bindings: HashMap<String, Binding>,
    cassette: Option<Arc<Cassette>>,
    limits: Arc<RateLimits>,
}

impl std::fmt::Debug for Models {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut names: Vec<&String> = self.bindings.keys().collect();
        names.sort();
        f.debug_struct("Models").field("bindings", &names).field("cassette", &self.cassette).finish()
    }
}

impl Models {
    /// No bindings.
    pub fn new() -> Self {
        Self::default()
    }

    /// Binds a name to a built-in provider. The key is read now (from the config or the
    /// environment); a binding to a provider's public endpoint without a key fails only
    /// when it is called, so a cassette can replay it without one.
    pub fn bind(&mut self, name: &str, config: &ModelConfig) -> Result<(), ModelError> {
        let key = config.key();
        let base_url = config.base_url.clone().unwrap_or_else(|| default_base_url(config.provider).to_owned());
        let named_but_unset = config.api_key.is_none() && config.api_key_env.is_some() && key.is_none();
        let variable = config.api_key_env.clone().unwrap_or_else(|| config.provider.key_variable().to_owned());
        if named_but_unset && self.cassette.is_none() {
            // Named on purpose: a request without it would go out with no key and no warning.
            return Err(ModelError::new(
                ModelErrorKind::Config,
                config.provider.name(),
                format!("model binding {name:?}: its api_key_env names {variable}, which is not set"),
            ));
        }
        let model: Arc<dyn ChatModel> = if key.is_none() && (config.base_url.is_none() || named_but_unset) {
            // With a cassette, a missing key matters only on a miss: that call says so.
            Arc::new(MissingKey { provider: config.provider, binding: name.to_owned(), variable })
        } else {
            let refuse = |option: &str| {
                Err(ModelError::new(
                    ModelErrorKind::Config,
                    config.provider.name(),
                    format!(
                        "model binding {name:?}: `{option}` is not an option of {} bindings",
                        config.provider.name()
                    ),
                ))
            };
            match config.provider {
                Provider::Openai => {
                    if config.api_version.is_some() {
                        return refuse("api_version");
                    }
                    let field = config.token_limit_field.unwrap_or(if config.base_url.is_none() {
                        TokenLimitField::MaxCompletionTokens
                    } else {
                        TokenLimitField::MaxTokens
                    });
                    let adapter =
                        OpenAi::new(&base_url, key, config.http.clone(), &self.limits)?.token_limit_field(field);
                    Arc::new(adapter.sampling(config.takes_sampling()))
                }
                Provider::Anthropic => {
                    if config.token_limit_field.is_some() {
                        return refuse("token_limit_field");
                    }
                    let mut adapter = Anthropic::new(&base_url, key, config.http.clone(), &self.limits)?;
                    if let Some(version) = &config.api_version {
                        adapter = adapter.api_version(version);
                    }
                    Arc::new(adapter.sampling(config.takes_sampling()))
                }
            }
        };
        let (pricing, prices) = match config.pricing {
            Some(pricing) => (Some(pricing), Some(PriceSource::Binding)),
            None => match crate::prices::list_price(config.provider, &config.model) {
                Some(pricing) => (Some(pricing), Some(PriceSource::Table(crate::prices::PRICE_TABLE_VERSION))),
                None => (None, None),
            },
        };
        let server = reqwest::Url::parse(&base_url)
            .ok()
            .and_then(|url| Some((url.host_str()?.to_owned(), url.port_or_known_default()?)));
        let binding = Binding { model, model_id: config.model.clone(), server, pricing, prices };
        self.bindings.insert(name.to_owned(), binding);
        Ok(())
    }

    /// Binds a name to any adapter (a custom provider, a scripted fake in tests).
    pub fn bind_adapter(&mut self, name: &str, model_id: &str, model: Arc<dyn ChatModel>, pricing: Option<Pricing>) {
        let prices = pricing.map(|_| PriceSource::Binding);
        let binding = Binding { model, model_id: model_id.to_owned(), server: None, pricing, prices };
        self.bindings.insert(name.to_owned(), binding);
    }

    /// Counts the bindings' request and token limits in `quotas` (a store every worker on
    /// the database shares) instead of in this process. Set it before binding.
    #[must_use]
    pub fn with_shared_limits(mut self, quotas: Arc<dyn stepwright_core::store::quota::QuotaStore>) -> Self {
        self.limits = Arc::new(RateLimits::shared(quotas));
        self
    }

    /// Plays back and records calls through a cassette. Attach it before binding: with a
    /// cassette, a binding whose `api_key_env` is unset binds, and only a call the cassette
    /// has no recording of fails for the missing key.
    #[must_use]
    pub fn with_cassette(mut self, cassette: Cassette) -> Self {
        self.cassette = Some(Arc::new(cassette));
        self
    }

    /// [`Models::with_cassette`] with a cassette other bindings use too (one file, one
    /// writer: recordings made through any of them are all kept).
    #[must_use]
    pub fn with_shared_cassette(mut self, cassette: Arc<Cassette>) -> Self {
        self.cassette = Some(cassette);
        self
    }

    /// Whether a binding exists.
    pub fn has(&self, name: &str) -> bool {
        self.bindings.contains_key(name)
    }

    /// The binding names, sorted.
    pub fn names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.bindings.keys().map(String::as_str).collect();
        names.sort_unstable();
        names
    }

    /// Calls a binding. `site` names the caller (a step path) for error messages; the
    /// request's `model` is set to the binding's model id. With a sink, text streams to it.
    pub async fn chat(
        &self,
        site: &str,
        binding: &str,
        request: ChatRequest,
        sink: Option<TokenSink<'_>>,
    ) -> Result<CallRecord, ModelError> {
        self.chat_observed(site, binding, request, sink, None).await
    }

    /// [`Models::chat`], with the messages sent and received put on the call's span as
    /// `content` renders them (content capture: redacted and cut by the caller's step), when
    /// a span is recorded.
    pub async fn chat_observed(
        &self,
        site: &str,
        binding: &str,
        request: ChatRequest,
        sink: Option<TokenSink<'_>>,
        content: Option<&ContentRenderer<'_>>,
    ) -> Result<CallRecord, ModelError> {
        let bound = self.bindings.get(binding);
        let model = bound.map_or(request.model.as_str(), |b| b.model_id.as_str());
        let (address, port) = bound
            .and_then(|b| b.server.as_ref())
            .map_or((None, None), |(host, port)| (Some(host.as_str()), Some(i64::from(*port))));
        // The conventions' output type: structured output asks for JSON, else text.
        let output_type = if request.output.is_some() { "json" } else { "text" };
        let params = &request.params;
        let span = tracing::info_span!(
            "chat",
            otel.name = %format_args!("chat {model}"),
            otel.kind = "client",
            gen_ai.operation.name = "chat",
            gen_ai.provider.name = tracing::field::Empty,
            gen_ai.request.model = model,
            gen_ai.request.max_tokens = params.max_tokens.map(i64::from),
            gen_ai.request.temperature = params.temperature,
            gen_ai.request.top_p = params.top_p,
            gen_ai.request.stream = sink.is_some(),
            gen_ai.output.type = output_type,
            server.address = address,
            server.port = port,
            gen_ai.response.id = tracing::field::Empty,
            gen_ai.response.model = tracing::field::Empty,
            gen_ai.usage.input_tokens = tracing::field::Empty,
            gen_ai.usage.output_tokens = tracing::field::Empty,
            gen_ai.usage.cache_read.input_tokens = tracing::field::Empty,
            gen_ai.usage.cache_creation.input_tokens = tracing::field::Empty,
            gen_ai.response.time_to_first_chunk = tracing::field::Empty,
            gen_ai.input.messages = tracing::field::Empty,
            gen_ai.output.messages = tracing::field::Empty,
            stepwright.binding = binding,
            stepwright.cassette = tracing::field::Empty,
            stepwright.cost.usd = tracing::field::Empty,
            error.type = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
            otel.status_description = tracing::field::Empty,
        );
        if let Some(render) = content.filter(|_| !span.is_disabled())
            && let Some(text) = render(&crate::types::conventions_messages(&request.messages))
        {
            span.record("gen_ai.input.messages", text.as_str());
        }
        let result = self.chat_untraced(site, binding, request, sink).instrument(span.clone()).await;
        if !span.is_disabled() {
            trace_call(&span, &result);
            if let (Some(render), Ok(call)) = (content, &result)
                && let Some(text) = render(&crate::types::conventions_answer(&call.response))
            {
                span.record("gen_ai.output.messages", text.as_str());
            }
        }
        result
    }

    async fn chat_untraced(
        &self,
        site: &str,
        binding: &str,
        mut request: ChatRequest,
        sink: Option<TokenSink<'_>>,
    ) -> Result<CallRecord, ModelError> {
        let bound = self.bindings.get(binding).ok_or_else(|| {
            ModelError::new(
                ModelErrorKind::Config,
                "stepwright",
                format!("{site}: no model is bound to {binding:?} (bound: {})", self.names().join(", ")),
            )
        })?;
        bound.model_id.clone_into(&mut request.model);
        let provider = bound.model.provider().to_owned();
        let started = Instant::now();
        // Hashing a long conversation is not free: only a cassette needs the key.
        let cassette = self.cassette.as_ref().map(|c| (c, Cassette::key(&provider, &request)));
        if let Some((cassette, key)) = &cassette
            && let Some(response) = cassette.lookup(key)
        {
            if let Some(sink) = sink {
                // Played back in word-sized pieces, so a live view still shows it arrive.
                for piece in response.content.split_inclusive(' ') {
                    sink(piece);
                }
            }
            return Ok(record(binding, &provider, bound, response, started, None, true));
        }
        if let Some((cassette, key)) = &cassette
            && cassette.mode() == CassetteMode::Replay
        {
            let last = request.messages.iter().rev().find_map(|m| match m {
                Message::User { content } | Message::System { content } => Some(content.as_str()),
                _ => None,
            });
            return Err(ModelError::new(
                ModelErrorKind::CassetteMiss,
                &provider,
                format!(
                    "{site}: cassette {} has no recording of this request (model {:?} through binding {binding:?}, key {}, last prompt {:?}); nothing was called and the file is unchanged; to call the model and add its answer to the cassette, run again with `--cassette-mode auto`",
                    cassette.path().display(),
                    request.model,
                    &key.to_hex()[..12],
                    shorten(last.unwrap_or_default(), 120),
                ),
            ));
        }
        // When the first chunk of a streamed answer arrived (the conventions' time to first
        // chunk), noted by the sink on its first call.
        let first_chunk = std::sync::OnceLock::new();
        let answered = match sink {
            Some(sink) => {
                let noting = |text: &str| {
                    let _ = first_chunk.set(Instant::now());
                    sink(text);
                };
                bound.model.chat_stream(&request, &noting).await
            }
            None => bound.model.chat(&request).await,
        };
        // A cassette that lacked the call sent it to the provider: a failure says which
        // cassette missed, so "no API key" is not a mystery.
        let response = answered.map_err(|mut error| {
            if let Some((cassette, key)) = &cassette {
                error.message = format!(
                    "{}; cassette {} has no recording of this call (model {:?}, key {}), so it went to the provider",
                    error.message,
                    cassette.path().display(),
                    request.model,
                    &key.to_hex()[..12]
                );
            }
            error
        })?;
        if let Some((cassette, key)) = &cassette {
            cassette
                .record(key, &provider, &request, &response)
                .map_err(|e| ModelError::new(ModelErrorKind::Config, &provider, format!("{site}: {e}")))?;
        }
        let first_chunk = first_chunk.get().map(|at| at.duration_since(started));
        Ok(record(binding, &provider, bound, response, started, first_chunk, false))
    }

    /// A binding's prices, if it has them.
    pub fn pricing(&self, binding: &str) -> Option<Pricing> {
        self.bindings.get(binding).and_then(|b| b.pricing)
    }

    /// The provider's model id a binding sends, if the binding exists.
    pub fn model_id(&self, binding: &str) -> Option<&str> {
        self.bindings.get(binding).map(|b| b.model_id.as_str())
    }

    /// These bindings with some answered by others already here: for each `(name, by)`, a
    /// call to `name` goes to `by`'s endpoint with `by`'s model id and prices (the same
    /// cassette, the same rate limits). How a run is recomputed with another model the host
    /// already binds, without a caller naming an endpoint or a key.
    pub fn rebound<'a>(&self, replacements: impl IntoIterator<Item = (&'a str, &'a str)>) -> Result<Self, String> {
        let mut bindings = self.bindings.clone();
        for (name, by) in replacements {
            if !self.bindings.contains_key(name) {
                return Err(format!("no model is bound to {name:?} (bound: {})", self.names().join(", ")));
            }
            let replacement = self.bindings.get(by).ok_or_else(|| {
                format!(
                    "{name:?} cannot be answered by {by:?}: no model is bound to it (bound: {})",
                    self.names().join(", ")
                )
            })?;
            bindings.insert(name.to_owned(), replacement.clone());
        }
        Ok(Self { bindings, cassette: self.cassette.clone(), limits: self.limits.clone() })
    }
}

/// A count as an OpenTelemetry int attribute (the bridge writes a `u64` field as a string).
fn as_i64(count: u64) -> i64 {
    i64::try_from(count).unwrap_or(i64::MAX)
}

/// What a `chat` span says about the call's answer, in the GenAI conventions' terms.
fn trace_call(span: &tracing::Span, result: &Result<CallRecord, ModelError>) {
    match result {
        Ok(call) => {
            let response = &call.response;
            span.record("gen_ai.provider.name", call.provider.as_str());
            if let Some(id) = &response.id {
                span.record("gen_ai.response.id", id.as_str());
            }
            if !response.model.is_empty() {
                span.record("gen_ai.response.model", response.model.as_str());
            }
            // A string array in the conventions, which a `tracing` field cannot carry.
            if let Some(contexts) = stepwright_core::trace::contexts() {
                let reasons = vec![response.finish_reason.as_str().to_owned()];
                contexts.set_strings(span, "gen_ai.response.finish_reasons", reasons);
            }
            if usage_reported(response.usage) {
                let usage = response.usage;
                span.record("gen_ai.usage.input_tokens", as_i64(usage.input_tokens));
                span.record("gen_ai.usage.output_tokens", as_i64(usage.output_tokens));
                span.record("gen_ai.usage.cache_read.input_tokens", as_i64(usage.cache_read_input_tokens));
                span.record("gen_ai.usage.cache_creation.input_tokens", as_i64(usage.cache_creation_input_tokens));
            }
            if let Some(cost) = call.cost_usd {
                span.record("stepwright.cost.usd", cost);
            }
            if call.replayed {
                span.record("stepwright.cassette", "replayed");
            }
            if let Some(first) = call.time_to_first_chunk_ms {
                span.record("gen_ai.response.time_to_first_chunk", first as f64 / 1000.0);
            }
        }
        Err(error) => {
            span.record("error.type", format!("{:?}", error.kind).to_lowercase().as_str());
            span.record("otel.status_code", "error");
            span.record("otel.status_description", error.to_string().as_str());
        }
    }
}

fn record(
    binding: &str,
    provider: &str,
    bound: &Binding,
    response: ChatResponse,
    started: Instant,
    first_chunk: Option<Duration>,
    replayed: bool,
) -> CallRecord {
    CallRecord {
        binding: binding.to_owned(),
        request_model: bound.model_id.clone(),
        provider: provider.to_owned(),
        // No usage reported (a stream some servers end without it) is no cost known: `null`,
        // counted apart, never a silent $0.
        cost_usd: bound.pricing.filter(|_| usage_reported(response.usage)).map(|p| p.cost(response.usage)),
        prices: bound.prices.filter(|_| usage_reported(response.usage)).map(PriceSource::describe),
        response,
        latency_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        time_to_first_chunk_ms: first_chunk.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        replayed,
    }
}

/// The adapter of a binding to a public endpoint with no key: every call says how to fix it.
struct MissingKey {
    provider: Provider,
    binding: String,
    /// The variable the key is read from.
    variable: String,
}

impl ChatModel for MissingKey {
    fn provider(&self) -> &str {
        self.provider.name()
    }

    fn chat<'a>(
        &'a self,
        _request: &'a ChatRequest,
    ) -> futures_util::future::BoxFuture<'a, Result<ChatResponse, ModelError>> {
        Box::pin(async move {
            Err(ModelError::new(
                ModelErrorKind::Config,
                self.provider.name(),
                format!(
                    "model binding {:?} has no API key: set {} (or give the binding a base_url, or replay a cassette)",
                    self.binding, self.variable
                ),
            ))
        })
    }
}

/// Usage and cost summed over calls.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Totals {
    /// Calls made or played back.
    pub calls: u64,
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Generated tokens.
    pub output_tokens: u64,
    /// Cost in US dollars (calls without prices count zero).
    pub cost_usd: f64,
    /// Calls whose provider reported no usage: their tokens and cost are unknown (not zero).
    #[serde(default)]
    pub calls_without_usage: u64,
    /// The calls' time, in all: from each request to its whole answer, in milliseconds.
    #[serde(default)]
    pub latency_ms: f64,
}

/// Whether the provider said what a call used: every request has a prompt, so a call with
/// no tokens at all is one whose usage never came (a stream ended without its usage chunk).
fn usage_reported(usage: Usage) -> bool {
    usage.input_tokens > 0 || usage.output_tokens > 0
}

impl Totals {
    /// Adds one `model.call` event's data.
    pub fn add(&mut self, event: &serde_json::Value) {
        *self += Self::of_call(event);
    }

    /// One `model.call` event's data as the totals of its one call: its fields read in one
    /// pass (a lookup by name each cost more than the rest of a report's arithmetic).
    pub fn of_call(event: &serde_json::Value) -> Self {
        use serde_json::Value;
        let mut call = Self { calls: 1, ..Self::default() };
        let Value::Object(fields) = event else { return call };
        for (name, value) in fields {
            match (name.as_str(), value) {
                ("usage", Value::Object(usage)) => {
                    for (name, value) in usage {
                        match name.as_str() {
                            "input_tokens" => call.input_tokens = value.as_u64().unwrap_or(0),
                            "output_tokens" => call.output_tokens = value.as_u64().unwrap_or(0),
                            _ => {}
                        }
                    }
                }
                ("cost_usd", value) => call.cost_usd = value.as_f64().unwrap_or(0.0),
                ("latency_ms", value) => call.latency_ms = value.as_f64().unwrap_or(0.0),
                ("usage_reported", Value::Bool(false)) => call.calls_without_usage = 1,
                _ => {}
            }
        }
        call
    }
}

impl std::ops::AddAssign for Totals {
    fn add_assign(&mut self, other: Self) {
        self.calls += other.calls;
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.cost_usd += other.cost_usd;
        self.calls_without_usage += other.calls_without_usage;
        self.latency_ms += other.latency_ms;
    }
}

/// The `model.call` event's data for a call (what roll-ups per step and run read).
pub fn call_event(record: &CallRecord) -> serde_json::Value {
    let mut event = json!({
        "binding": record.binding,
        "request_model": record.request_model,
        "provider": record.provider,
        "model": record.response.model,
        "usage": record.response.usage,
        "cost_usd": record.cost_usd,
        "usage_reported": usage_reported(record.response.usage),
        "latency_ms": record.latency_ms,
        "replayed": record.replayed,
    });
    if let Some(first) = record.time_to_first_chunk_ms {
        event["time_to_first_chunk_ms"] = json!(first);
    }
    if let Some(prices) = &record.prices {
        // The cost is this figure for good: where its prices came from is kept with it.
        event["prices"] = json!(prices);
    }
    event
}

/// Usage and cost per step path and for the whole run, from a run's events.
pub fn rollup<'a>(
    events: impl IntoIterator<Item = &'a stepwright_core::journal::EventRecord>,
) -> (std::collections::BTreeMap<stepwright_core::StepPath, Totals>, Totals) {
    let mut rollup = Rollup::default();
    events.into_iter().for_each(|event| rollup.add(event));
    (rollup.by_step, rollup.total)
}

/// A run's model usage and cost as its `model.call` events are shown to it one by one (see
/// `Store::visit_events_of_kind`): per step path, and for the whole run.
#[derive(Clone, Debug, Default)]
pub struct Rollup {
    /// Per step path.
    pub by_step: std::collections::BTreeMap<stepwright_core::StepPath, Totals>,
    /// The whole run.
    pub total: Totals,
}

impl Rollup {
    /// Counts one event, if it is a `model.call`.
    pub fn add(&mut self, event: &stepwright_core::journal::EventRecord) {
        if event.kind != MODEL_CALL_EVENT {
            return;
        }
        let call = Totals::of_call(&event.data);
        *self.by_step.entry(event.path.clone()).or_default() += call;
        self.total += call;
    }
}

/// The kind of the event recorded for every model call.
pub const MODEL_CALL_EVENT: &str = "model.call";

/// The request timeout a binding uses unless configured.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// Where a provider's API is when a binding gives no `base_url`.
fn default_base_url(provider: Provider) -> &'static str {
    match provider {
        Provider::Openai => OpenAi::DEFAULT_BASE_URL,
        Provider::Anthropic => Anthropic::DEFAULT_BASE_URL,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::Totals;

    #[test]
    fn a_call_event_counts_what_it_says_and_nothing_it_does_not() {
        let call = json!({
            "binding": "smart", "model": "m", "usage": { "input_tokens": 120, "output_tokens": 8, "cached_tokens": 99 },
            "cost_usd": 0.25, "usage_reported": true, "latency_ms": 12.5, "prices": { "input_tokens": 3.0 },
        });
        let mut totals = Totals::default();
        totals.add(&call);
        totals.add(&call);
        let expected = Totals {
            calls: 2,
            input_tokens: 240,
            output_tokens: 16,
            cost_usd: 0.5,
            calls_without_usage: 0,
            latency_ms: 25.0,
        };
        assert_eq!(totals, expected);
        // A provider that reported no usage: the call counts, its tokens and cost are unknown.
        let unreported = Totals::of_call(&json!({ "usage": {}, "usage_reported": false, "latency_ms": 3 }));
        assert_eq!(unreported, Totals { calls: 1, calls_without_usage: 1, latency_ms: 3.0, ..Totals::default() });
        // Whatever the data, it is one call.
        assert_eq!(Totals::of_call(&json!("not an object")), Totals { calls: 1, ..Totals::default() });
    }
}
