//! Tools: what an agent (or a `tool` step) can call. A tool declares its name, description,
//! input schema, effect class, whether it is safe to retry and whether a person must
//! approve each call; the [`Tools`] registry validates arguments and applies timeouts the
//! same way for every kind (Rust functions, subprocesses, HTTP endpoints, MCP servers).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use stepwright_core::{DynStep, Effect, ErrorCode, Outcome, StepContext, StepError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::schema::check;
use crate::types::ToolSpec;

/// A tool failed: the command exited non-zero, the endpoint answered an error status, the
/// server reported an error.
pub const TOOL_FAILED: ErrorCode = ErrorCode::from_static("tool_failed");
/// A tool took longer than its timeout and was stopped.
pub const TOOL_TIMEOUT: ErrorCode = ErrorCode::from_static("tool_timeout");
/// No tool has the name asked for.
pub const TOOL_NOT_FOUND: ErrorCode = ErrorCode::from_static("tool_not_found");

/// What a tool declares about itself.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolDef {
    /// Its name (`lookup_order`, `everything.echo`).
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// The JSON Schema of its arguments (an object).
    pub input_schema: Value,
    /// What it does to the world. Tools default to `external`: fenced, and not re-run
    /// after a crash unless marked safe to retry.
    pub effect: Effect,
    /// Whether running it twice is harmless (an interrupted call is then re-run).
    pub safe_to_retry: bool,
    /// Whether a person approves each call before it runs.
    pub needs_approval: bool,
    /// How long a call may take.
    pub timeout: Option<Duration>,
    /// The JSON Schema its result must match (a result that does not is the call's
    /// `output_validation` failure, which an agent sees as an error result).
    pub output_schema: Option<Value>,
}

impl ToolDef {
    /// A definition with an open object schema and the cautious defaults (`external`,
    /// not safe to retry, no approval, no timeout).
    pub fn new(name: &str, description: &str) -> Self {
        Self {
            name: name.to_owned(),
            description: description.to_owned(),
            input_schema: json!({ "type": "object" }),
            effect: Effect::External,
            safe_to_retry: false,
            needs_approval: false,
            timeout: None,
            output_schema: None,
        }
    }

    /// Sets the schema its result must match.
    #[must_use]
    pub fn output_schema(mut self, schema: Value) -> Self {
        self.output_schema = Some(schema);
        self
    }

    /// Sets the argument schema.
    #[must_use]
    pub fn input_schema(mut self, schema: Value) -> Self {
        self.input_schema = schema;
        self
    }

    /// Sets the effect class.
    #[must_use]
    pub fn effect(mut self, effect: Effect) -> Self {
        self.effect = effect;
        self
    }

    /// Marks it safe to run again after an interrupted call.
    #[must_use]
    pub fn safe_to_retry(mut self) -> Self {
        self.safe_to_retry = true;
        self
    }

    /// Requires a person's approval before each call.
    #[must_use]
    pub fn needs_approval(mut self) -> Self {
        self.needs_approval = true;
        self
    }

    /// Bounds each call.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Whether an interrupted call may simply run again: reads and pure computations
    /// always, anything else only when marked safe to retry.
    pub fn retry_is_safe(&self) -> bool {
        self.safe_to_retry || !self.effect.is_fenced()
    }
}

/// Where a worker tool's calls go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerTarget {
    /// The queue workers poll.
    pub queue: String,
    /// The handler: a name, or `name@version`.
    pub handler: String,
    /// A claim without a heartbeat lasts this long (default: the tool's `timeout`, else
    /// `DEFAULT_LEASE` of the worker tool).
    pub heartbeat_timeout: Option<Duration>,
    /// Fail with `no_worker` if nobody claims a call within this long.
    pub schedule_to_start: Option<Duration>,
    /// At most this many calls of the handler run at once, across all workers.
    pub concurrency: Option<u32>,
}

/// What a tool call is given besides its arguments.
#[derive(Debug, Clone)]
pub struct ToolContext {
    /// The calling step's context (services, cancellation, identity).
    pub step: StepContext,
    /// For fenced tools: the call's idempotency key, the same after a crash. Pass it on to
    /// the system the tool changes.
    pub idempotency_key: Option<String>,
    /// The journaled sub-step the call runs as (an agent's `turn.1/tool.0`); `None` when the
    /// call is the step itself (a `tool` step).
    pub call_path: Option<stepwright_core::StepPath>,
}

/// A tool. Implement it for a custom kind; the built-in kinds are [`FnTool`],
/// [`CommandTool`], [`HttpTool`] and the MCP tools of `stepwright-mcp`.
pub trait Tool: Send + Sync + 'static {
    /// What the tool declares.
    fn def(&self) -> &ToolDef;

    /// Runs one call with arguments already validated against the input schema. A failure
    /// is a [`StepError`]; an agent shows it to the model as an error result.
    fn invoke(&self, cx: ToolContext, args: Value) -> BoxFuture<'_, Result<Value, StepError>>;

    /// Where a step worker takes the tool's calls, for a `worker:` tool.
    fn worker_target(&self) -> Option<&WorkerTarget> {
        None
    }

    /// Whether a call hands its work to a step worker (a `worker:` tool).
    fn dispatches(&self) -> bool {
        self.worker_target().is_some()
    }
}

struct Registered {
    tool: Arc<dyn Tool>,
    validator: jsonschema::Validator,
    /// The tool's `output_schema`, compiled.
    output_validator: Option<jsonschema::Validator>,
    model_name: String,
}

/// The tools of an engine. Register it as a service (`Services::with(Arc::new(tools))`);
/// agents and `tool` steps find it there. Cloning is cheap (the registrations are shared), so
/// a set of tools can be extended, for instance with an MCP server's once it is connected.
#[derive(Default, Clone)]
pub struct Tools {
    by_name: BTreeMap<String, Arc<Registered>>,
}

impl std::fmt::Debug for Tools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tools").field("names", &self.names()).finish()
    }
}

/// Why a tool could not be registered.
#[derive(Debug, thiserror::Error)]
pub enum RegisterError {
    /// Two tools with one name.
    #[error("a tool named {0:?} is registered already")]
    Duplicate(String),
    /// Two names that the model would see as one.
    #[error("tools {0:?} and {1:?} have the same name for the model ({2:?})")]
    ModelNameClash(String, String, String),
    /// An empty name.
    #[error("tool name {0:?} is empty")]
    BadName(String),
    /// The input schema does not compile.
    #[error("tool {0:?} has an invalid input schema: {1}")]
    BadSchema(String, String),
}

/// The longest name providers accept for a tool.
const MODEL_NAME_MAX: usize = 64;

/// The name a model sees: providers accept `[A-Za-z0-9_-]{1,64}`, so `server.tool` becomes
/// `server__tool` and any other character an underscore. A name longer than 64 characters
/// once escaped (an MCP server's long tool under its server's prefix) keeps its first 55
/// and ends in `_` and 8 hex digits of the full name's SHA-256: still unique, still
/// recognisable, and one long tool no longer stops a whole workflow from starting.
pub fn model_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 2);
    for c in name.chars() {
        match c {
            '.' => out.push_str("__"),
            c if c.is_ascii_alphanumeric() || c == '_' || c == '-' => out.push(c),
            _ => out.push('_'),
        }
    }
    if out.len() > MODEL_NAME_MAX {
        let digest = stepwright_core::ContentHash::of_bytes(name.as_bytes()).to_hex();
        out.truncate(MODEL_NAME_MAX - 9);
        out.push('_');
        out.push_str(&digest[..8]);
    }
    out
}

impl Tools {
    /// No tools.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a tool.
    pub fn register(&mut self, tool: Arc<dyn Tool>) -> Result<(), RegisterError> {
        let def = tool.def();
        let name = def.name.clone();
        if self.by_name.contains_key(&name) {
            return Err(RegisterError::Duplicate(name));
        }
        let model_name = model_name(&name);
        if model_name.is_empty() {
            return Err(RegisterError::BadName(name));
        }
        if let Some(other) = self.by_name.values().find(|r| r.model_name == model_name) {
            return Err(RegisterError::ModelNameClash(other.tool.def().name.clone(), name, model_name));
        }
        let validator = jsonschema::validator_for(&def.input_schema)
            .map_err(|e| RegisterError::BadSchema(name.clone(), e.to_string()))?;
        let output_validator = def
            .output_schema
            .as_ref()
            .map(|schema| {
                jsonschema::validator_for(schema).map_err(|e| RegisterError::BadSchema(name.clone(), e.to_string()))
            })
            .transpose()?;
        self.by_name.insert(name, Arc::new(Registered { tool, validator, output_validator, model_name }));
        Ok(())
    }

    /// Adds a tool, builder style.
    pub fn with(mut self, tool: Arc<dyn Tool>) -> Result<Self, RegisterError> {
        self.register(tool)?;
        Ok(self)
    }

    /// A tool by name.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.by_name.get(name).map(|r| &r.tool)
    }

    /// The tool a model's name stands for.
    pub fn by_model_name(&self, model_name: &str) -> Option<&Arc<dyn Tool>> {
        self.by_name.values().find(|r| r.model_name == model_name).map(|r| &r.tool)
    }

    /// The registered names, sorted.
    pub fn names(&self) -> Vec<&str> {
        self.by_name.keys().map(String::as_str).collect()
    }

    /// How the model sees a tool.
    pub fn spec(&self, name: &str) -> Option<ToolSpec> {
        let registered = self.by_name.get(name)?;
        let def = registered.tool.def();
        Some(ToolSpec {
            name: registered.model_name.clone(),
            description: def.description.clone(),
            parameters: def.input_schema.clone(),
        })
    }

    /// Runs a call: arguments checked against the input schema (`input_validation` with
    /// every problem), then the tool, bounded by its timeout (`tool_timeout`).
    pub async fn invoke(&self, name: &str, cx: ToolContext, args: Value) -> Result<Value, StepError> {
        let registered = self.by_name.get(name).ok_or_else(|| {
            StepError::new(TOOL_NOT_FOUND, format!("no tool named {name:?} (registered: {})", self.names().join(", ")))
        })?;
        if let Err(problems) = check(&registered.validator, &args) {
            return Err(StepError::new(
                ErrorCode::INPUT_VALIDATION,
                format!("the arguments of tool {name:?} do not match its input schema: {}", problems.join("; ")),
            ));
        }
        let def = registered.tool.def();
        let call = registered.tool.invoke(cx, args);
        let result = match def.timeout {
            Some(limit) => tokio::time::timeout(limit, call).await.unwrap_or_else(|_| {
                Err(StepError::new(TOOL_TIMEOUT, format!("tool {name:?} did not finish within {limit:?}"))
                    .retryable(true))
            }),
            None => call.await,
        }?;
        if let Some(validator) = &registered.output_validator
            && let Err(problems) = check(validator, &result)
        {
            return Err(StepError::new(
                ErrorCode::OUTPUT_VALIDATION,
                format!("the result of tool {name:?} does not match its output schema: {}", problems.join("; ")),
            ));
        }
        Ok(result)
    }
}

/// A Rust function as a tool; its input schema is derived from the argument type.
pub struct FnTool<F, I> {
    def: ToolDef,
    f: F,
    _input: std::marker::PhantomData<fn(I)>,
}

/// A tool from an async function of a typed argument (its schema derived with schemars).
///
/// ```
/// use stepwright_llm::{fn_tool, Tools, ToolDef};
/// use stepwright_core::Effect;
///
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct Order { order_id: String }
///
/// let lookup = fn_tool(ToolDef::new("lookup_order", "Look up an order").effect(Effect::Read), |_cx, order: Order| async move {
///     Ok(serde_json::json!({ "id": order.order_id, "status": "shipped" }))
/// });
/// let tools = Tools::new().with(lookup).unwrap();
/// assert_eq!(tools.spec("lookup_order").unwrap().parameters["required"], serde_json::json!(["order_id"]));
/// ```
pub fn fn_tool<I, O, F, Fut>(mut def: ToolDef, f: F) -> Arc<FnTool<F, I>>
where
    I: DeserializeOwned + schemars::JsonSchema + Send + 'static,
    O: Serialize,
    F: Fn(ToolContext, I) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<O, StepError>> + Send + 'static,
{
    let mut schema = schemars::schema_for!(I).to_value();
    if let Some(object) = schema.as_object_mut() {
        // Providers want the bare object schema.
        object.remove("$schema");
        object.remove("title");
    }
    def.input_schema = schema;
    Arc::new(FnTool { def, f, _input: std::marker::PhantomData })
}

impl<I, O, F, Fut> Tool for FnTool<F, I>
where
    I: DeserializeOwned + schemars::JsonSchema + Send + 'static,
    O: Serialize,
    F: Fn(ToolContext, I) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<O, StepError>> + Send + 'static,
{
    fn def(&self) -> &ToolDef {
        &self.def
    }

    fn invoke(&self, cx: ToolContext, args: Value) -> BoxFuture<'_, Result<Value, StepError>> {
        let input: Result<I, _> = serde_path_to_error::deserialize(args);
        Box::pin(async move {
            let input = input.map_err(|e| {
                StepError::new(
                    ErrorCode::INPUT_VALIDATION,
                    format!("reading the arguments of {:?}: {e}", self.def.name),
                )
            })?;
            let output = (self.f)(cx, input).await?;
            serde_json::to_value(output).map_err(|e| {
                StepError::execution_failed(format!("tool {:?} returned a value that is not JSON: {e}", self.def.name))
            })
        })
    }
}

/// Computes a command line from a call's arguments (a workflow file's templates).
pub type ArgvFn = Arc<dyn Fn(&Value) -> Result<Vec<String>, String> + Send + Sync>;

/// A subprocess as a tool: started from an argument vector (never through a shell), given
/// the arguments as JSON on stdin, its stdout read as JSON (or text). A non-zero exit is a
/// retryable `tool_failed` with the end of stderr (a command that cannot start is not
/// retryable); the process is killed when the call is cancelled or times out.
pub struct CommandTool {
    def: ToolDef,
    argv: Vec<String>,
    argv_fn: Option<ArgvFn>,
    cwd: Option<PathBuf>,
    env: Vec<(String, String)>,
    max_output_bytes: usize,
    kill_grace: Duration,
}

/// The most stdout a command may write unless told otherwise (16 MiB): a tool result goes
/// to a model and into the journal, so a runaway command must not fill memory.
pub const DEFAULT_MAX_OUTPUT_BYTES: usize = 16 << 20;

/// How much of a command's stderr is kept (its end), for the error message.
const STDERR_TAIL: usize = 64 << 10;

impl std::fmt::Debug for CommandTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommandTool").field("def", &self.def).field("argv", &self.argv).finish_non_exhaustive()
    }
}

impl CommandTool {
    /// A command with a fixed argument vector (`argv[0]` is the program).
    pub fn new(def: ToolDef, argv: Vec<String>) -> Self {
        Self {
            def,
            argv,
            argv_fn: None,
            cwd: None,
            env: Vec::new(),
            max_output_bytes: DEFAULT_MAX_OUTPUT_BYTES,
            kill_grace: crate::process::DEFAULT_KILL_GRACE,
        }
    }

    /// How long the command's process group has between `SIGTERM` and `SIGKILL` when its
    /// step stops early (cancel, timeout, lease lost, shutdown) or leaves processes behind.
    #[must_use]
    pub fn kill_grace(mut self, grace: Duration) -> Self {
        self.kill_grace = grace;
        self
    }

    /// Fails the call (`tool_failed`, the process killed) once stdout passes `max` bytes.
    #[must_use]
    pub fn max_output_bytes(mut self, max: usize) -> Self {
        self.max_output_bytes = max;
        self
    }

    /// Computes the argument vector from each call's arguments instead.
    #[must_use]
    pub fn argv_from(mut self, render: ArgvFn) -> Self {
        self.argv_fn = Some(render);
        self
    }

    /// Runs the command in this directory.
    #[must_use]
    pub fn cwd(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cwd = Some(dir.into());
        self
    }

    /// Sets an environment variable for the command.
    #[must_use]
    pub fn env(mut self, name: &str, value: &str) -> Self {
        self.env.push((name.to_owned(), value.to_owned()));
        self
    }

    async fn run(&self, cx: ToolContext, args: Value) -> Result<Value, StepError> {
        let name = &self.def.name;
        let argv = match &self.argv_fn {
            Some(render) => {
                render(&args).map_err(|e| StepError::new(ErrorCode::INPUT_VALIDATION, format!("tool {name:?}: {e}")))?
            }
            None => self.argv.clone(),
        };
        let (program, rest) = argv
            .split_first()
            .ok_or_else(|| StepError::new(TOOL_FAILED, format!("tool {name:?} has an empty command")))?;
        let mut command = tokio::process::Command::new(program);
        // A group of its own, stopped as a whole when the call ends (see `process`): the
        // leader alone would leave its children running, re-parented to init.
        command.args(rest).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).process_group(0);
        if let Some(dir) = &self.cwd {
            command.current_dir(dir);
        }
        for (key, value) in &self.env {
            command.env(key, value);
        }
        if let Some(key) = &cx.idempotency_key {
            command.env("STEPWRIGHT_IDEMPOTENCY_KEY", key);
        }
        let mut child = command.spawn().map_err(|e| {
            StepError::new(TOOL_FAILED, format!("tool {name:?}: starting {program:?}: {e}")).with_cause(e)
        })?;
        // Dropped on every way out of this call, a cancelled or timed-out future included.
        let mut group = crate::process::ProcessGroup::led_by(child.id(), self.kill_grace);
        let mut stdin = child.stdin.take().expect("stdin is piped");
        let mut stdout = child.stdout.take().expect("stdout is piped");
        let mut stderr = child.stderr.take().expect("stderr is piped");
        let body = serde_json::to_vec(&args).expect("arguments serialize");
        // Write, read and wait together: a child that answers before it has read all of its
        // input must not deadlock against a full pipe.
        let write = async move {
            // A child that exits without reading its input closes the pipe; that is its choice.
            let _ = stdin.write_all(&body).await;
            drop(stdin);
        };
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let cap = self.max_output_bytes;
        let read_out = async {
            let read = (&mut stdout).take(cap as u64 + 1).read_to_end(&mut out).await?;
            if read > cap {
                // Stop here: returning the error ends the join, and dropping the child kills it.
                return Err(std::io::Error::other(format!(
                    "it wrote more than {cap} bytes to stdout (max_output_bytes)"
                )));
            }
            Ok(())
        };
        let read_err = async {
            // Only the end of stderr is shown, so only the end is kept.
            let mut chunk = [0u8; 8192];
            loop {
                let read = stderr.read(&mut chunk).await?;
                if read == 0 {
                    return Ok::<(), std::io::Error>(());
                }
                err.extend_from_slice(&chunk[..read]);
                if err.len() > 2 * STDERR_TAIL {
                    err.drain(..err.len() - STDERR_TAIL);
                }
            }
        };
        let run = async {
            let ((), (), (), status) = tokio::try_join!(
                async {
                    write.await;
                    Ok(())
                },
                read_out,
                read_err,
                async {
                    let status = child.wait().await;
                    // What the command left in its group goes too; their pipes then close.
                    group.stop();
                    status
                }
            )?;
            Ok::<_, std::io::Error>(status)
        };
        let status = tokio::select! {
            status = run => status.map_err(|e| StepError::new(TOOL_FAILED, format!("tool {name:?}: running {program:?}: {e}")))?,
            () = cx.step.cancellation().cancelled() => {
                return Err(StepError::cancelled(format!(
                    "tool {name:?} was cancelled; its processes were stopped (SIGTERM, then SIGKILL)"
                )));
            }
        };
        if !status.success() {
            let stderr = String::from_utf8_lossy(&err);
            let how = match status.code() {
                Some(code) => format!("exited with code {code}"),
                None => "was killed by a signal".to_owned(),
            };
            // Retryable: a command may fail for a moment (a busy service, a lock), and a step
            // that declares `retry` asks for another try; one that does not is not retried.
            return Err(StepError::new(
                TOOL_FAILED,
                format!("tool {name:?}: {program:?} {how}: {}", tail(stderr.trim(), 500)),
            )
            .retryable(true));
        }
        Ok(output_value(&out))
    }
}

/// The last `most` characters of a text (where a failing command says why), marked as cut.
fn tail(text: &str, most: usize) -> String {
    let count = text.chars().count();
    if count <= most {
        return text.to_owned();
    }
    let cut: String = text.chars().skip(count - most).collect();
    format!("…{cut}")
}

/// A tool's output: JSON if it parses, otherwise its text; nothing is `null`.
pub(crate) fn output_value(bytes: &[u8]) -> Value {
    let text = String::from_utf8_lossy(bytes);
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Value::Null;
    }
    serde_json::from_str(trimmed).unwrap_or_else(|_| Value::String(trimmed.to_owned()))
}

impl Tool for CommandTool {
    fn def(&self) -> &ToolDef {
        &self.def
    }

    fn invoke(&self, cx: ToolContext, args: Value) -> BoxFuture<'_, Result<Value, StepError>> {
        Box::pin(self.run(cx, args))
    }
}

/// The `tool` step: one call of a registered tool with the step's input as arguments. The
/// step itself is the journaled unit, so give its node the tool's effect class (and an
/// approval gate if the tool needs one); [`ToolStep::node`] does both.
pub struct ToolStep {
    tool: String,
    name: String,
    /// The tool hands its calls to a step worker.
    dispatches: bool,
}

impl ToolStep {
    /// A step calling the tool with this name.
    pub fn new(tool: &str) -> Arc<Self> {
        Arc::new(Self { tool: tool.to_owned(), name: format!("tool {tool}"), dispatches: false })
    }

    /// A node calling `tool`, with the effect class, retry safety and approval gate the tool
    /// declares.
    pub fn node(id: &str, tools: &Tools, tool: &str) -> Result<stepwright_core::Node, StepError> {
        let found = tools
            .get(tool)
            .ok_or_else(|| StepError::new(TOOL_NOT_FOUND, format!("step {id}: no tool named {tool:?}")))?;
        let def = found.def();
        if found.dispatches() {
            let step = Arc::new(Self { tool: tool.to_owned(), name: format!("tool {tool}"), dispatches: true });
            return Ok(Self::gated(
                stepwright_core::Node::dyn_step(id, step),
                tool,
                def.effect,
                def.safe_to_retry,
                def.needs_approval,
            ));
        }
        Ok(Self::declared_node(id, tool, def.effect, def.safe_to_retry, def.needs_approval))
    }

    /// A node calling `tool` with an effect class, retry safety and approval gate declared
    /// here, for a tool that is not registered yet (an MCP server's, connected when the run
    /// starts).
    pub fn declared_node(
        id: &str,
        tool: &str,
        effect: Effect,
        safe_to_retry: bool,
        needs_approval: bool,
    ) -> stepwright_core::Node {
        Self::gated(stepwright_core::Node::dyn_step(id, Self::new(tool)), tool, effect, safe_to_retry, needs_approval)
    }

    /// `node` with a tool's effect class, retry safety and approval gate.
    fn gated(
        node: stepwright_core::Node,
        tool: &str,
        effect: Effect,
        safe_to_retry: bool,
        needs_approval: bool,
    ) -> stepwright_core::Node {
        let mut node = node.effect(effect);
        // Reads and pure calls are retried anyway; the mark means something for fenced ones.
        if safe_to_retry && effect.is_fenced() {
            node = node.safe_to_retry();
        }
        if needs_approval {
            node = node.requires_approval(stepwright_core::ApprovalGate::new(format!("Run tool {tool}?")));
        }
        node
    }
}

impl DynStep for ToolStep {
    fn run<'a>(&'a self, ctx: &'a StepContext, input: Arc<Value>) -> BoxFuture<'a, Result<Outcome<Value>, StepError>> {
        Box::pin(async move {
            let tools = ctx.require::<Tools>()?;
            let cx = ToolContext {
                step: ctx.clone(),
                idempotency_key: ctx.idempotency_key().map(str::to_owned),
                call_path: None,
            };
            tools.invoke(&self.tool, cx, (*input).clone()).await.map(Outcome::completed)
        })
    }

    fn type_name(&self) -> &str {
        &self.name
    }

    fn dispatches(&self) -> bool {
        self.dispatches
    }
}
