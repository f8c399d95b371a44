//! The `http` tool: an HTTP endpoint as a tool, optionally signed, and optionally in **push
//! mode** (DESIGN §17), where each call is a step task sent to the endpoint, which answers at
//! once (`200`) or accepts it (`202`) and answers later through the task endpoints.
//!
//! ```yaml
//! tools:
//!   summarise:
//!     http: { url: "https://fn.example.com/summarise", signing_secret_env: PUSH_SECRET, async: true }
//!     timeout: 10m          # how long the endpoint holds the task without a heartbeat
//! ```

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde_json::Value;
use stepwright_core::store::task::StoredTask;
use stepwright_core::{StepError, TaskPusher, TaskRequest};

use crate::error::shorten;
use crate::tools::{TOOL_FAILED, Tool, ToolContext, ToolDef, output_value};

/// The queue of pushed tasks: an endpoint answers them with a key whose `worker` role
/// covers it.
pub const PUSH_QUEUE: &str = "push";

/// The signature header of `body` sent at `unix` seconds, as webhooks and pushed requests
/// carry it: `t=<unix>,v1=<hex hmac-sha256 of "t.body">`.
pub fn signature(secret: &str, unix: i64, body: &[u8]) -> String {
    use hmac::{KeyInit, Mac};
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).expect("any key length");
    mac.update(format!("{unix}.").as_bytes());
    mac.update(body);
    format!("t={unix},v1={}", hex::encode(mac.finalize().into_bytes()))
}

/// A task as a worker gets it (`POST /v1/tasks/claim`), and as push mode sends it.
pub fn task_view(task: &StoredTask) -> stepwright_api::task::Task {
    stepwright_api::task::Task {
        id: task.spec.id.to_string(),
        lease: task.lease_token,
        queue: task.spec.queue.clone(),
        handler: task.spec.handler.clone(),
        input: task.spec.input.clone(),
        attempt: task.attempt,
        idempotency_key: task.spec.idempotency_key.clone(),
        run: stepwright_api::task::TaskRun { id: task.run.to_string(), workflow: task.workflow.clone() },
        step: task.path.to_string(),
        lease_ms: task.spec.lease_ms,
        lease_expires: task.lease_expires.map_or(0, stepwright_core::Timestamp::as_micros),
        details: task.details.clone(),
        recompute: task.spec.recompute,
    }
}

/// Where an `http` tool's signing secret comes from.
enum Signing {
    /// This environment variable, read at each call (a file names the variable, never the
    /// secret).
    Env(String),
    /// This secret.
    Secret(String),
}

/// Where an `http` tool's requests go and how they are made.
struct Target {
    tool: String,
    method: reqwest::Method,
    url: String,
    headers: Vec<(String, String)>,
    /// How requests are signed, if they are.
    signing: Option<Signing>,
    client: reqwest::Client,
}

impl Target {
    /// A request with `body` (JSON, or `None` for the query-string methods), its headers,
    /// the fence's key, the trace and the signature.
    fn request(
        &self,
        url: reqwest::Url,
        body: Option<Vec<u8>>,
        idempotency_key: Option<&str>,
    ) -> Result<reqwest::RequestBuilder, StepError> {
        let mut request = self.client.request(self.method.clone(), url);
        if let Some(signing) = &self.signing {
            let secret = match signing {
                Signing::Secret(secret) => secret.clone(),
                Signing::Env(env) => std::env::var(env).map_err(|_| {
                    StepError::new(
                        TOOL_FAILED,
                        format!("tool {:?}: its signing secret's environment variable {env} is not set", self.tool),
                    )
                })?,
            };
            let unix = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
            request =
                request.header("Stepwright-Signature", signature(&secret, unix, body.as_deref().unwrap_or_default()));
        }
        if let Some(body) = body {
            request = request.header(reqwest::header::CONTENT_TYPE, "application/json").body(body);
        }
        for (header, value) in &self.headers {
            request = request.header(header, value);
        }
        if let Some(key) = idempotency_key {
            request = request.header("Idempotency-Key", key);
        }
        if let Some(traceparent) = stepwright_core::trace::current_traceparent() {
            request = request.header("traceparent", traceparent.as_str());
        }
        Ok(request)
    }

    /// Sends `request`: the response's status and body, or a transport failure.
    async fn send(&self, request: reqwest::RequestBuilder) -> Result<(reqwest::StatusCode, Vec<u8>), StepError> {
        let failed = |e: reqwest::Error| {
            StepError::new(TOOL_FAILED, format!("tool {:?}: {} {}: {e}", self.tool, self.method, self.url))
                .retryable(e.is_connect() || e.is_timeout())
        };
        let response = request.send().await.map_err(failed)?;
        let status = response.status();
        let bytes = response.bytes().await.map_err(failed)?;
        Ok((status, bytes.to_vec()))
    }

    /// An error status as the call's failure (retryable for 429 and 5xx).
    fn refused(&self, status: reqwest::StatusCode, bytes: &[u8]) -> StepError {
        let body = String::from_utf8_lossy(bytes);
        StepError::new(
            TOOL_FAILED,
            format!(
                "tool {:?}: {} {} answered {status}: {}",
                self.tool,
                self.method,
                self.url,
                shorten(body.trim(), 500)
            ),
        )
        .retryable(status.as_u16() == 429 || status.is_server_error())
    }
}

/// An HTTP endpoint as a tool. `GET` and `DELETE` send scalar arguments as the query string;
/// other methods send the arguments as a JSON body. A fenced call carries its idempotency
/// key in `Idempotency-Key`. An error status is `tool_failed` (retryable for 429 and 5xx).
/// Signed ([`HttpTool::signed_with`]), a request carries `Stepwright-Signature`; in push mode
/// ([`HttpTool::push`]) each call is a step task (see the module's doc).
pub struct HttpTool {
    def: ToolDef,
    target: Arc<Target>,
    /// Push mode: how long the endpoint holds a task without a heartbeat.
    push: Option<Duration>,
}

impl std::fmt::Debug for HttpTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpTool")
            .field("def", &self.def)
            .field("method", &self.target.method)
            .field("url", &self.target.url)
            .field("push", &self.push)
            .finish()
    }
}

impl HttpTool {
    /// A tool calling `method url`.
    pub fn new(def: ToolDef, method: &str, url: &str) -> Result<Self, String> {
        let method: reqwest::Method =
            method.to_ascii_uppercase().parse().map_err(|_| format!("{method:?} is not an HTTP method"))?;
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(format!("tool {:?}: the URL must start with http:// or https://, got {url:?}", def.name));
        }
        crate::http::install_crypto_provider();
        let client = reqwest::Client::builder()
            .user_agent(crate::http::USER_AGENT)
            .connect_timeout(Duration::from_secs(30))
            .build()
            .map_err(|e| format!("building an HTTP client: {e}"))?;
        let target =
            Target { tool: def.name.clone(), method, url: url.to_owned(), headers: Vec::new(), signing: None, client };
        Ok(Self { def, target: Arc::new(target), push: None })
    }

    fn target_mut(&mut self) -> &mut Target {
        Arc::get_mut(&mut self.target).expect("configured before it is shared")
    }

    /// Sends this header with every call.
    #[must_use]
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.target_mut().headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Signs every request with the secret in the environment variable `env` (read at each
    /// call): `Stepwright-Signature: t=<unix>,v1=<hex hmac-sha256 of "t.body">`.
    #[must_use]
    pub fn signed_with_env(mut self, env: &str) -> Self {
        self.target_mut().signing = Some(Signing::Env(env.to_owned()));
        self
    }

    /// Signs every request with `secret` (see [`HttpTool::signed_with_env`]).
    #[must_use]
    pub fn signed_with(mut self, secret: &str) -> Self {
        self.target_mut().signing = Some(Signing::Secret(secret.to_owned()));
        self
    }

    /// Push mode: each call is a step task, sent as the request's body; the endpoint answers
    /// at once or accepts it (`202`) and answers through the task endpoints, holding it for
    /// `lease_for` without a heartbeat (default: the tool's `timeout`, else
    /// [`crate::DEFAULT_LEASE`]). Needs a method with a body.
    pub fn push(mut self, lease_for: Option<Duration>) -> Result<Self, String> {
        if matches!(self.target.method, reqwest::Method::GET | reqwest::Method::DELETE | reqwest::Method::HEAD) {
            return Err(format!(
                "tool {:?}: push mode sends the task as the body: use POST, PUT or PATCH, not {}",
                self.def.name, self.target.method
            ));
        }
        let timeout = self.def.timeout.take();
        self.push = Some(lease_for.or(timeout).unwrap_or(crate::DEFAULT_LEASE));
        Ok(self)
    }

    async fn run(&self, cx: ToolContext, args: Value) -> Result<Value, StepError> {
        let name = &self.def.name;
        let target = &self.target;
        let mut url = reqwest::Url::parse(&target.url)
            .map_err(|e| StepError::new(TOOL_FAILED, format!("tool {name:?}: bad URL {:?}: {e}", target.url)))?;
        let in_query = matches!(target.method, reqwest::Method::GET | reqwest::Method::DELETE);
        if in_query && let Some(object) = args.as_object() {
            let mut pairs = url.query_pairs_mut();
            for (key, value) in object.iter().filter(|(_, v)| !v.is_null()) {
                pairs.append_pair(key, &value.as_str().map_or_else(|| value.to_string(), str::to_owned));
            }
        }
        let body = (!in_query).then(|| serde_json::to_vec(&args).expect("arguments serialize"));
        let request = target.request(url, body, cx.idempotency_key.as_deref())?;
        let (status, bytes) = tokio::select! {
            sent = target.send(request) => sent?,
            () = cx.step.cancellation().cancelled() => return Err(StepError::cancelled(format!("tool {name:?} was cancelled"))),
        };
        if !status.is_success() {
            return Err(target.refused(status, &bytes));
        }
        Ok(output_value(&bytes))
    }
}

impl Tool for HttpTool {
    fn def(&self) -> &ToolDef {
        &self.def
    }

    fn invoke(&self, cx: ToolContext, args: Value) -> BoxFuture<'_, Result<Value, StepError>> {
        let Some(lease_for) = self.push else { return Box::pin(self.run(cx, args)) };
        Box::pin(async move {
            let request = TaskRequest {
                queue: PUSH_QUEUE.to_owned(),
                handler: self.def.name.clone(),
                input: args,
                lease_for,
                schedule_to_start: None,
                concurrency: None,
                retry_is_safe: self.def.retry_is_safe(),
                idempotency_key: cx.idempotency_key.clone(),
                at: cx.call_path.clone(),
                push: Some(Arc::new(Pusher { target: self.target.clone(), lease_for })),
            };
            cx.step.dispatch(request).await
        })
    }

    fn dispatches(&self) -> bool {
        self.push.is_some()
    }
}

/// Sends an `http` tool's task in push mode.
struct Pusher {
    target: Arc<Target>,
    lease_for: Duration,
}

impl std::fmt::Debug for Pusher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pusher").field("url", &self.target.url).finish()
    }
}

impl TaskPusher for Pusher {
    fn endpoint(&self) -> &str {
        &self.target.url
    }

    fn push<'a>(&'a self, task: &'a StoredTask) -> BoxFuture<'a, Result<Option<Value>, StepError>> {
        Box::pin(async move {
            let target = &self.target;
            let url = reqwest::Url::parse(&target.url).map_err(|e| {
                StepError::new(TOOL_FAILED, format!("tool {:?}: bad URL {:?}: {e}", target.tool, target.url))
            })?;
            let body = serde_json::to_vec(&task_view(task)).expect("a task serializes");
            // An endpoint that answers at once holds the task while it works: its lease.
            let request =
                target.request(url, Some(body), task.spec.idempotency_key.as_deref())?.timeout(self.lease_for);
            let (status, bytes) = target.send(request).await?;
            match status.as_u16() {
                202 => Ok(None),
                _ if status.is_success() => Ok(Some(output_value(&bytes))),
                _ => Err(target.refused(status, &bytes)),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_signature_is_hmac_sha256_of_t_dot_body() {
        // Python's hmac.new(b"Jefe", b"1700000000.{}", sha256).hexdigest(), as a receiver checks it.
        let header = super::signature("Jefe", 1_700_000_000, b"{}");
        assert_eq!(header, "t=1700000000,v1=d3793e2b4103edfbd98cc19591832f5fad701d413db9fcae0ae7dab8184ed207");
        assert_ne!(header, super::signature("other", 1_700_000_000, b"{}"));
    }
}
