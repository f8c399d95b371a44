//! MCP servers as Stepwright tools. A server is started (stdio) or reached (streamable
//! HTTP) through the official Rust SDK, its tools are discovered and registered as
//! `server.tool`, and each call goes through the same [`Tools`] registry as any other tool
//! (argument validation, timeout, effect fence, approval).
//!
//! A server that dies is started again on the next call; an HTTP session the server has
//! forgotten (it restarted, or expired the session) is initialized again. A call that was
//! in flight when the connection broke is repeated only if the tool is safe to retry.
//!
//! Architecture invariant: this crate knows MCP and nothing of agents, YAML or storage; it
//! only produces [`Tool`]s.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use futures_util::future::BoxFuture;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{RoleClient, RunningService, ServiceError};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ServiceExt, model::Tool as McpToolInfo};
use serde_json::Value;
use stepwright_core::{Effect, ErrorCode, StepError};
use stepwright_llm::{TOOL_FAILED, Tool, ToolContext, ToolDef, Tools};
use tokio::sync::Mutex;
use tracing::Instrument;

mod http;
mod stdio;

/// How to reach a server.
#[derive(Debug, Clone, PartialEq)]
pub enum Transport {
    /// A child process speaking MCP on stdin and stdout (never through a shell).
    Stdio {
        /// The program to start (looked up on `PATH`; never run through a shell).
        command: String,
        /// Its arguments, passed as given.
        args: Vec<String>,
        /// Extra environment variables.
        env: Vec<(String, String)>,
        /// Its working directory.
        cwd: Option<PathBuf>,
    },
    /// Streamable HTTP at this URL.
    Http {
        /// The endpoint (`http://127.0.0.1:3001/mcp`).
        url: String,
        /// Extra headers (`authorization` goes as the bearer token).
        headers: Vec<(String, String)>,
    },
}

/// What is declared for a server's tools (MCP servers do not say; their annotations are
/// hints and are not trusted for the effect fence).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolPolicy {
    /// The effect class (`external` unless declared).
    pub effect: Effect,
    /// Whether an interrupted call may run again.
    pub safe_to_retry: bool,
    /// Whether each call needs a person's approval.
    pub needs_approval: bool,
    /// How long a call may take, all attempts together (default [`DEFAULT_CALL_LIMIT`]:
    /// a server that never answers must not hold a step forever). When it runs out the call
    /// is abandoned, and the server is told (`notifications/cancelled`).
    pub timeout: Option<Duration>,
}

/// How long an MCP tool call may take when its policy names no `timeout`.
pub const DEFAULT_CALL_LIMIT: Duration = Duration::from_secs(300);

impl Default for ToolPolicy {
    fn default() -> Self {
        Self { effect: Effect::External, safe_to_retry: false, needs_approval: false, timeout: None }
    }
}

/// One server's configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerConfig {
    /// Its name: tools are registered as `name.tool`.
    pub name: String,
    /// How to reach it.
    pub transport: Transport,
    /// The policy for its tools.
    pub policy: ToolPolicy,
    /// Per-tool policies, by the server's tool name.
    pub tool_policies: BTreeMap<String, ToolPolicy>,
    /// Only these tools are registered (all when empty).
    pub only: Vec<String>,
    /// How long starting and initializing may take.
    pub connect_timeout: Duration,
    /// How long one call may go unanswered before the connection is taken for broken: it
    /// is dropped, a new one opened, and the call repeated if that is safe. This is how a
    /// server that lost the session without saying so (it answers 400 where the spec says
    /// 404, or never answers) is recovered from. `None` waits for the tool's own timeout.
    pub call_timeout: Option<Duration>,
    /// The largest message the server may send (one JSON-RPC message: a tool's result with
    /// its text and structured forms). A larger one fails the call with
    /// `tool_result_too_large`, and the call is not repeated.
    pub max_message_bytes: usize,
}

/// The largest message a server may send unless configured otherwise.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// A server answered with a message over [`ServerConfig::max_message_bytes`].
pub const RESULT_TOO_LARGE: stepwright_core::ErrorCode =
    stepwright_core::ErrorCode::from_static("tool_result_too_large");

impl ServerConfig {
    /// A server started as a child process.
    pub fn stdio(name: &str, command: &str, args: &[&str]) -> Self {
        Self::new(
            name,
            Transport::Stdio {
                command: command.to_owned(),
                args: args.iter().map(|a| (*a).to_owned()).collect(),
                env: Vec::new(),
                cwd: None,
            },
        )
    }

    /// A server reached over streamable HTTP.
    pub fn http(name: &str, url: &str) -> Self {
        Self::new(name, Transport::Http { url: url.to_owned(), headers: Vec::new() })
    }

    fn new(name: &str, transport: Transport) -> Self {
        Self {
            name: name.to_owned(),
            transport,
            policy: ToolPolicy::default(),
            tool_policies: BTreeMap::new(),
            only: Vec::new(),
            connect_timeout: Duration::from_secs(60),
            call_timeout: None,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
        }
    }

    /// Sets the policy of one tool.
    #[must_use]
    pub fn tool_policy(mut self, tool: &str, policy: ToolPolicy) -> Self {
        self.tool_policies.insert(tool.to_owned(), policy);
        self
    }
}

/// Why a server could not be used.
// The variants' fields are named for what they hold and the variant's message says how
// they relate; a doc per field would only repeat its name.
#[allow(missing_docs)]
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    /// Starting the process or opening the connection failed.
    #[error("starting MCP server {server:?}: {message}")]
    Start {
        server: String,
        /// What went wrong.
        message: String,
    },
    /// The server did not finish its handshake in time.
    #[error("MCP server {server:?} did not initialize within {timeout:?}")]
    StartTimeout { server: String, timeout: Duration },
    /// Listing its tools failed.
    #[error("listing the tools of MCP server {server:?}: {source}")]
    List {
        server: String,
        /// Why.
        #[source]
        source: ServiceError,
    },
    /// A tool named in `only` does not exist.
    #[error("MCP server {server:?} has no tool {tool:?} (it has: {available})")]
    MissingTool {
        server: String,
        tool: String,
        /// What it has.
        available: String,
    },
    /// Registering a discovered tool failed.
    #[error("registering the tools of MCP server {server:?}: {source}")]
    Register {
        server: String,
        /// Why.
        #[source]
        source: stepwright_llm::RegisterError,
    },
}

type Client = RunningService<RoleClient, ()>;

/// A connected server. Cheap to share; its tools hold it.
pub struct McpServer {
    config: ServerConfig,
    client: Mutex<Option<Arc<Client>>>,
    pid: std::sync::Mutex<Option<u32>>,
    starts: AtomicU32,
    /// The last lines a stdio server wrote to stderr: what it said before it failed.
    stderr: Arc<std::sync::Mutex<std::collections::VecDeque<String>>>,
    /// Raised when the connection ended because the server sent a message over the limit.
    oversized: Arc<AtomicBool>,
    /// The task reading a stdio server's stderr; it ends when the process does.
    stderr_reader: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// The session a streamable HTTP server gave (`Mcp-Session-Id`), for the spans.
    session: http::SessionSeen,
}

/// Every server this process connected to, so that [`close_all`] can end their sessions.
static OPEN: std::sync::Mutex<Vec<std::sync::Weak<McpServer>>> = std::sync::Mutex::new(Vec::new());

/// The closes of servers dropped while their connection was open, under way.
static CLOSING: std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>> = std::sync::Mutex::new(Vec::new());

/// Closes every MCP server this process connected to ([`McpServer::close`]), and waits for
/// the closes of those already dropped: a program calls it before it exits, so HTTP servers
/// are not left with open sessions nor stdio servers with a parent gone mid-write.
pub async fn close_all() {
    let open: Vec<Arc<McpServer>> = std::mem::take(&mut *OPEN.lock().expect("poisoned"))
        .into_iter()
        .filter_map(|server| server.upgrade())
        .collect();
    for server in open {
        server.close().await;
    }
    let closing = std::mem::take(&mut *CLOSING.lock().expect("poisoned"));
    for close in closing {
        let _ = tokio::time::timeout(Duration::from_secs(5), close).await;
    }
}

impl Drop for McpServer {
    fn drop(&mut self) {
        // A server no workflow holds any more still has a session (or a process) open:
        // closed in the background, and `close_all` waits for it.
        let Some(client) = self.client.get_mut().take().and_then(Arc::into_inner) else { return };
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let close = runtime.spawn(async move {
                let _ = tokio::time::timeout(Duration::from_secs(5), client.cancel()).await;
            });
            let mut closing = CLOSING.lock().expect("poisoned");
            closing.retain(|earlier| !earlier.is_finished());
            closing.push(close);
        }
    }
}

/// How many of a stdio server's last stderr lines are kept for its errors.
const STDERR_LINES: usize = 20;

impl std::fmt::Debug for McpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServer").field("name", &self.config.name).field("starts", &self.starts()).finish()
    }
}

impl McpServer {
    /// Starts (or reaches) a server and completes the MCP handshake.
    pub async fn connect(config: ServerConfig) -> Result<Arc<Self>, McpError> {
        let server = Arc::new(Self {
            config,
            client: Mutex::new(None),
            pid: std::sync::Mutex::new(None),
            starts: AtomicU32::new(0),
            stderr: Arc::default(),
            oversized: Arc::default(),
            stderr_reader: std::sync::Mutex::default(),
            session: http::SessionSeen::default(),
        });
        server.client().await?;
        let mut open = OPEN.lock().expect("poisoned");
        // A long-running process connects again and again: the dropped are forgotten.
        open.retain(|server| server.strong_count() > 0);
        open.push(Arc::downgrade(&server));
        drop(open);
        Ok(server)
    }

    /// Closes the connection: an HTTP session is deleted (`DELETE` with its session id), a
    /// stdio server's input is closed and the process waited for (a few seconds at most).
    /// A later call opens a new one.
    pub async fn close(&self) {
        let client = self.client.lock().await.take();
        if let Some(client) = client.and_then(Arc::into_inner) {
            let _ = tokio::time::timeout(Duration::from_secs(5), client.cancel()).await;
        }
    }

    /// Connects to a server and registers its tools (`name.tool`) in `tools`.
    pub async fn register(config: ServerConfig, tools: &mut Tools) -> Result<Arc<Self>, McpError> {
        let server = Self::connect(config).await?;
        for tool in server.tools().await? {
            tools.register(tool).map_err(|source| McpError::Register { server: server.name().to_owned(), source })?;
        }
        Ok(server)
    }

    /// The server's name as the file declares it (tools are `name.tool`).
    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// How many times it was started (or connected): 1, plus one per restart.
    pub fn starts(&self) -> u32 {
        self.starts.load(Ordering::SeqCst)
    }

    /// The process id of a stdio server.
    pub fn pid(&self) -> Option<u32> {
        *self.pid.lock().expect("poisoned")
    }

    /// Its tools, discovered now, as Stepwright tools named `server.tool`.
    pub async fn tools(self: &Arc<Self>) -> Result<Vec<Arc<dyn Tool>>, McpError> {
        let client = self.client().await?;
        let listed = client
            .peer()
            .list_all_tools()
            .await
            .map_err(|source| McpError::List { server: self.config.name.clone(), source })?;
        for wanted in &self.config.only {
            if !listed.iter().any(|t| t.name == wanted.as_str()) {
                let available: Vec<&str> = listed.iter().map(|t| t.name.as_ref()).collect();
                return Err(McpError::MissingTool {
                    server: self.config.name.clone(),
                    tool: wanted.clone(),
                    available: available.join(", "),
                });
            }
        }
        Ok(listed
            .into_iter()
            .filter(|t| self.config.only.is_empty() || self.config.only.iter().any(|o| t.name == o.as_str()))
            .map(|info| Arc::new(McpTool::new(self.clone(), &info)) as Arc<dyn Tool>)
            .collect())
    }

    /// The live client, started again if it is gone.
    async fn client(&self) -> Result<Arc<Client>, McpError> {
        let mut slot = self.client.lock().await;
        if let Some(client) = slot.as_ref()
            && !client.is_closed()
        {
            return Ok(client.clone());
        }
        let limit = self.config.connect_timeout;
        let started = tokio::time::timeout(limit, self.start())
            .await
            .map_err(|_| McpError::StartTimeout { server: self.config.name.clone(), timeout: limit })??;
        let client = Arc::new(started);
        *slot = Some(client.clone());
        self.starts.fetch_add(1, Ordering::SeqCst);
        Ok(client)
    }

    async fn start(&self) -> Result<Client, McpError> {
        let failed = |message: String| McpError::Start { server: self.config.name.clone(), message };
        match &self.config.transport {
            Transport::Stdio { command, args, env, cwd } => {
                let mut cmd = tokio::process::Command::new(command);
                cmd.args(args);
                for (key, value) in env {
                    cmd.env(key, value);
                }
                if let Some(dir) = cwd {
                    cmd.current_dir(dir);
                }
                use std::process::Stdio;
                cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true);
                let mut child = cmd.spawn().map_err(|e| failed(format!("running {command:?}: {e}")))?;
                *self.pid.lock().expect("poisoned") = child.id();
                // A new process: what an earlier one said is not this one's.
                self.stderr.lock().expect("poisoned").clear();
                self.oversized.store(false, Ordering::SeqCst);
                let read = child.stderr.take().map(|pipe| tokio::spawn(keep_tail(pipe, self.stderr.clone())));
                *self.stderr_reader.lock().expect("poisoned") = read;
                let transport =
                    stdio::StdioTransport::new(child, self.config.max_message_bytes, self.oversized.clone())
                        .map_err(|e| failed(format!("running {command:?}: {e}")))?;
                match ().serve(transport).await {
                    Ok(client) => Ok(client),
                    Err(e) => Err(failed(format!("the MCP handshake failed: {e}{}", self.last_words().await))),
                }
            }
            Transport::Http { url, headers } => {
                let mut config =
                    StreamableHttpClientTransportConfig::with_uri(url.as_str()).reinit_on_expired_session(true);
                let mut custom = HashMap::new();
                for (name, value) in headers {
                    if name.eq_ignore_ascii_case("authorization") {
                        let token = value.strip_prefix("Bearer ").unwrap_or(value);
                        config = config.auth_header(token.to_owned());
                        continue;
                    }
                    let header = reqwest::header::HeaderName::from_bytes(name.as_bytes())
                        .map_err(|e| failed(format!("header {name:?}: {e}")))?;
                    let value = reqwest::header::HeaderValue::from_str(value)
                        .map_err(|e| failed(format!("header {name:?}: {e}")))?;
                    custom.insert(header, value);
                }
                if !custom.is_empty() {
                    config = config.custom_headers(custom);
                }
                stepwright_llm::install_crypto_provider();
                config.max_sse_event_size = self.config.max_message_bytes;
                self.oversized.store(false, Ordering::SeqCst);
                let client = http::SizeWatched::new(self.oversized.clone(), self.session.clone());
                let transport = StreamableHttpClientTransport::with_client(client, config);
                ().serve(transport).await.map_err(|e| failed(format!("initializing the session at {url}: {e}")))
            }
        }
    }

    /// The error of a call whose answer was over the size limit.
    fn too_large(&self, tool: &str) -> StepError {
        let limit = self.config.max_message_bytes;
        StepError::new(
            RESULT_TOO_LARGE,
            format!(
                "MCP tool {}.{tool} answered with a message of more than {limit} bytes ({} MiB), this server's \
                 `max_message_bytes`; the call was not repeated. Raise the limit for this server, or have the tool \
                 return less (a page, a file path)",
                self.config.name,
                limit / (1024 * 1024)
            ),
        )
    }

    /// [`Self::stderr_tail`] once the stdio server's stderr is read to its end (it ends when
    /// the process does; half a second at most).
    async fn last_words(&self) -> String {
        let reader = self.stderr_reader.lock().expect("poisoned").take();
        if let Some(reader) = reader {
            let _ = tokio::time::timeout(Duration::from_millis(500), reader).await;
        }
        self.stderr_tail()
    }

    /// `; its stderr ended with: …` when a stdio server wrote to stderr, else nothing.
    fn stderr_tail(&self) -> String {
        let lines = self.stderr.lock().expect("poisoned");
        if lines.is_empty() {
            return String::new();
        }
        format!("; its stderr ended with: {}", lines.iter().cloned().collect::<Vec<_>>().join(" | "))
    }

    /// Forgets a client whose connection broke, so the next call starts a new one.
    async fn drop_client(&self, broken: &Arc<Client>) {
        let mut slot = self.client.lock().await;
        if slot.as_ref().is_some_and(|c| Arc::ptr_eq(c, broken)) {
            *slot = None;
        }
    }

    async fn call(
        &self,
        tool: &str,
        args: Value,
        idempotency_key: Option<&str>,
        retry_is_safe: bool,
        wrapped: bool,
    ) -> Result<Value, StepError> {
        // The MCP conventions' client span: `{method} {target}`, with how the server is
        // reached (`pipe` for a child's stdio, `tcp` and the address for streamable HTTP).
        let (transport, address) = match &self.config.transport {
            Transport::Stdio { .. } => ("pipe", None),
            Transport::Http { url, .. } => {
                ("tcp", reqwest::Url::parse(url).ok().and_then(|u| u.host_str().map(str::to_owned)))
            }
        };
        let span = tracing::info_span!(
            "tools/call",
            otel.name = %format_args!("tools/call {tool}"),
            otel.kind = "client",
            mcp.method.name = "tools/call",
            gen_ai.operation.name = "execute_tool",
            gen_ai.tool.name = tool,
            network.transport = transport,
            server.address = address.as_deref(),
            stepwright.mcp.server = self.config.name.as_str(),
            mcp.session.id = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
            otel.status_description = tracing::field::Empty,
        );
        let result =
            self.call_untraced(tool, args, idempotency_key, retry_is_safe, wrapped).instrument(span.clone()).await;
        // The session the call went out in (a call repeated after a reconnect: the new one).
        if let Some(session) = self.session.last() {
            span.record("mcp.session.id", &*session);
        }
        if let Err(error) = &result {
            span.record("otel.status_code", "error");
            span.record("otel.status_description", error.message.as_str());
        }
        result
    }

    async fn call_untraced(
        &self,
        tool: &str,
        args: Value,
        idempotency_key: Option<&str>,
        retry_is_safe: bool,
        wrapped: bool,
    ) -> Result<Value, StepError> {
        let server = &self.config.name;
        let arguments = match args {
            Value::Object(map) => Some(map),
            Value::Null => None,
            other => {
                return Err(StepError::new(
                    stepwright_core::ErrorCode::INPUT_VALIDATION,
                    format!("MCP tool {server}.{tool} takes an object of arguments, not {other}"),
                ));
            }
        };
        let params = call_params(tool, arguments, idempotency_key);
        let unavailable = |e: &McpError| StepError::new(TOOL_FAILED, e.to_string()).retryable(true);
        let client = self.client().await.map_err(|e| unavailable(&e))?;
        let first = match self.config.call_timeout {
            Some(limit) => tokio::time::timeout(limit, client.peer().call_tool(params.clone())).await.ok(),
            None => Some(client.peer().call_tool(params.clone()).await),
        };
        let limit = self.config.call_timeout.unwrap_or_default();
        let broken = match first {
            Some(Ok(result)) => return convert(server, tool, result, wrapped),
            // The answer was too large: the connection ended for it. Asking again would only
            // bring the same answer (and run the tool again).
            Some(Err(_)) | None if self.oversized.load(Ordering::SeqCst) => {
                self.drop_client(&client).await;
                return Err(self.too_large(tool));
            }
            Some(Err(error @ (ServiceError::TransportClosed | ServiceError::TransportSend(_)))) => {
                // A send that failed never reached the server; anything else may have.
                let delivered = !matches!(error, ServiceError::TransportSend(_));
                (Broken::Connection(error.to_string()), delivered)
            }
            Some(Err(error)) => return Err(call_failed(server, tool, &error)),
            None => (Broken::Silent, true),
        };
        // The server died or forgot us. Start it (or a session) again; repeat the call only
        // if that is harmless, since the first one may have reached it.
        self.drop_client(&client).await;
        // What a server that died said on its way out, before a new one starts.
        let said = self.last_words().await;
        let client = self.client().await.map_err(|e| unavailable(&e))?;
        let (why, delivered) = broken;
        if delivered && !retry_is_safe {
            return Err(match why {
                Broken::Silent => StepError::new(
                    ErrorCode::TIMEOUT,
                    format!(
                        "MCP tool {server}.{tool} got no answer within {limit:?} (its call_timeout); the call is not safe to repeat, so it was not, and it may or may not have happened"
                    ),
                ),
                Broken::Connection(why) => StepError::new(
                    TOOL_FAILED,
                    format!(
                        "the connection to MCP server {server:?} broke during a call of {tool} ({why}{said}); it was opened again, but the call is not safe to repeat and may or may not have happened"
                    ),
                ),
            });
        }
        // The repeat is bounded as the first attempt was: `call_timeout` is a limit on every
        // attempt, not only the first.
        let again = match self.config.call_timeout {
            Some(limit) => tokio::time::timeout(limit, client.peer().call_tool(params)).await.ok(),
            None => Some(client.peer().call_tool(params).await),
        };
        match again {
            Some(Ok(result)) => convert(server, tool, result, wrapped),
            Some(Err(_)) | None if self.oversized.load(Ordering::SeqCst) => {
                self.drop_client(&client).await;
                Err(self.too_large(tool))
            }
            Some(Err(error)) => Err(call_failed(server, tool, &error)),
            None => Err(StepError::new(
                ErrorCode::TIMEOUT,
                match why {
                    Broken::Silent => format!(
                        "MCP tool {server}.{tool} got no answer within {limit:?} (its call_timeout), nor when repeated on a new connection"
                    ),
                    Broken::Connection(why) => format!(
                        "the connection to MCP server {server:?} broke during a call of {tool} ({why}{said}); repeated on a new connection, the call got no answer within {limit:?} (its call_timeout)"
                    ),
                },
            )
            .retryable(true)),
        }
    }
}

/// Why a call's first attempt got no answer.
enum Broken {
    /// None came within `call_timeout`.
    Silent,
    /// The connection ended or could not be written to (what the transport said).
    Connection(String),
}

fn call_failed(server: &str, tool: &str, error: &ServiceError) -> StepError {
    let retryable = matches!(error, ServiceError::TransportClosed | ServiceError::TransportSend(_));
    StepError::new(TOOL_FAILED, format!("calling MCP tool {server}.{tool}: {error}")).retryable(retryable)
}

/// A tool result as a value: the structured content if there is one (unwrapped when the tool
/// says it wrapped a plain value: `wrapped`); else a single text block (as JSON if it
/// parses); else the content blocks. An error result is `tool_failed` with its text.
fn convert(server: &str, tool: &str, result: CallToolResult, wrapped: bool) -> Result<Value, StepError> {
    let texts: Vec<&str> = result.content.iter().filter_map(|c| c.as_text().map(|t| t.text.as_str())).collect();
    if result.is_error == Some(true) {
        return Err(StepError::new(TOOL_FAILED, format!("MCP tool {server}.{tool} failed: {}", texts.join("\n"))));
    }
    if let Some(structured) = result.structured_content {
        return Ok(match structured {
            Value::Object(mut object) if wrapped && object.len() == 1 && object.contains_key("result") => {
                object.remove("result").unwrap_or_default()
            }
            other => other,
        });
    }
    if texts.len() == 1 && result.content.len() == 1 {
        let text = texts[0];
        return Ok(serde_json::from_str(text.trim())
            .ok()
            .filter(|v: &Value| v.is_object() || v.is_array())
            .unwrap_or_else(|| Value::String(text.to_owned())));
    }
    serde_json::to_value(&result.content)
        .map_err(|e| StepError::execution_failed(format!("reading the result of {server}.{tool}: {e}")))
}

/// One tool of a server.
struct McpTool {
    server: Arc<McpServer>,
    tool: String,
    def: ToolDef,
    /// Its output schema says that a plain value comes wrapped as `{"result": …}` (FastMCP's
    /// `x-fastmcp-wrap-result`, since MCP's structured content must be an object): the step's
    /// output is the value, as the tool's author wrote it.
    wrapped: bool,
}

impl McpTool {
    fn new(server: Arc<McpServer>, info: &McpToolInfo) -> Self {
        let policy = server.config.tool_policies.get(info.name.as_ref()).unwrap_or(&server.config.policy).clone();
        let mut def = ToolDef::new(
            &format!("{}.{}", server.config.name, info.name),
            info.description.as_deref().unwrap_or_default(),
        )
        .input_schema(Value::Object((*info.input_schema).clone()))
        .effect(policy.effect);
        def.safe_to_retry = policy.safe_to_retry;
        def.needs_approval = policy.needs_approval;
        def.timeout = Some(policy.timeout.unwrap_or(DEFAULT_CALL_LIMIT));
        let wrapped = info
            .output_schema
            .as_ref()
            .is_some_and(|schema| schema.get("x-fastmcp-wrap-result") == Some(&Value::Bool(true)));
        Self { server, tool: info.name.to_string(), def, wrapped }
    }
}

impl Tool for McpTool {
    fn def(&self) -> &ToolDef {
        &self.def
    }

    fn invoke(&self, cx: ToolContext, args: Value) -> BoxFuture<'_, Result<Value, StepError>> {
        Box::pin(async move {
            let key = cx.idempotency_key.as_deref();
            self.server.call(&self.tool, args, key, self.def.retry_is_safe(), self.wrapped).await
        })
    }
}

/// The `_meta` key a fenced call's idempotency key travels under. MCP has no standard
/// place for one; a server that deduplicates calls can read it here (and a repeated call
/// after a reconnect carries the same key).
pub const IDEMPOTENCY_META_KEY: &str = "io.stepwright/idempotencyKey";

/// A `tools/call` request's parameters.
fn call_params(
    tool: &str,
    arguments: Option<serde_json::Map<String, Value>>,
    idempotency_key: Option<&str>,
) -> CallToolRequestParams {
    let mut params = CallToolRequestParams::new(tool.to_owned());
    params.arguments = arguments;
    let mut meta = rmcp::model::RequestMetaObject::default();
    if let Some(key) = idempotency_key {
        meta.0.0.insert(IDEMPOTENCY_META_KEY.to_owned(), Value::String(key.to_owned()));
    }
    // The MCP conventions' propagation: W3C Trace Context in `_meta`.
    if let Some(traceparent) = stepwright_core::trace::current_traceparent() {
        meta.0.0.insert("traceparent".to_owned(), Value::String(traceparent.to_string()));
    }
    if !meta.0.0.is_empty() {
        params.meta = Some(meta);
    }
    params
}

#[cfg(test)]
mod params {
    use serde_json::json;

    #[test]
    fn a_fenced_call_carries_its_idempotency_key_in_meta() {
        let arguments = json!({ "message": "hi" }).as_object().cloned();
        let fenced = serde_json::to_value(super::call_params("echo", arguments.clone(), Some("k-1"))).unwrap();
        assert_eq!(
            fenced,
            json!({ "name": "echo", "arguments": { "message": "hi" }, "_meta": { "io.stepwright/idempotencyKey": "k-1" } })
        );
        let plain = serde_json::to_value(super::call_params("echo", arguments, None)).unwrap();
        assert_eq!(plain, json!({ "name": "echo", "arguments": { "message": "hi" } }));
    }
}

#[cfg(test)]
mod send_sync {
    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn public_handles_are_send_and_sync() {
        assert_send_sync::<super::McpServer>();
    }
}

/// Reads a stdio server's stderr to its end (so the pipe never fills and blocks it), keeping
/// the last [`STDERR_LINES`] lines, each cut to 300 characters.
async fn keep_tail(pipe: tokio::process::ChildStderr, tail: Arc<std::sync::Mutex<std::collections::VecDeque<String>>>) {
    use tokio::io::AsyncBufReadExt;
    let mut lines = tokio::io::BufReader::new(pipe).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let line: String = line.chars().take(300).collect();
        if line.trim().is_empty() {
            continue;
        }
        let mut kept = tail.lock().expect("poisoned");
        if kept.len() == STDERR_LINES {
            kept.pop_front();
        }
        kept.push_back(line);
    }
}
