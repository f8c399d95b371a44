//! The JSON Schema of the workflow file format, generated from the types below for editors
//! (completion, hover text, unknown-field warnings as you type). The loader does not read a
//! file through these types (it keeps YAML positions for its diagnostics); they describe
//! what it accepts, and `tests/schema.rs` keeps the two in step: every example and every
//! test file that loads is valid against the schema, and every corpus file with an unknown
//! field is not. Agents are described by `stepwright_llm::AgentSpec` itself, the type the
//! loader reads them into.

#![allow(dead_code)] // The types exist for their schema only.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde_json::Value;

/// A Stepwright workflow file.
#[derive(JsonSchema)]
#[serde(deny_unknown_fields)]
struct WorkflowFile {
    /// The workflow's name.
    workflow: String,
    /// Its version, such as "1.0.0".
    version: Option<String>,
    /// What it does.
    description: Option<String>,
    /// A JSON Schema the run input must match.
    input: Option<Value>,
    /// The run's output: a template over `input` and `steps` (default: the last step's output).
    output: Option<Value>,
    /// A JSON Schema the run's output must match: a run whose output does not fails with
    /// `output_validation`.
    output_schema: Option<Value>,
    /// The steps, in order.
    steps: Vec<Step>,
    /// Models by binding name (`llm` steps and agents refer to them).
    models: Option<BTreeMap<String, Model>>,
    /// Tools by name (agents and `tool` steps refer to them).
    tools: Option<BTreeMap<String, Tool>>,
    /// MCP servers by name; their tools are `server.tool`.
    mcp_servers: Option<BTreeMap<String, McpServer>>,
    /// Agents by name.
    agents: Option<BTreeMap<String, stepwright_llm::AgentSpec>>,
    /// At most `limit` runs with one `key` execute at a time, across every worker on the
    /// store; the others wait, pending.
    concurrency: Option<ConcurrencyGroup>,
    /// Among runs waiting for a worker, higher priority goes first (default 0).
    priority: Option<i32>,
    /// What the exported traces of its runs carry.
    telemetry: Option<Telemetry>,
    /// Schedules by name: runs this workflow starts itself, once per tick, whatever the
    /// number of workers (`stepwright schedules create FILE` keeps them in the store).
    schedules: Option<BTreeMap<String, Schedule>>,
    /// Triggers by name: runs this workflow starts on events, once per event (or per
    /// debounced group, or batch), whatever the number of workers (`stepwright triggers
    /// create FILE` keeps them in the store). A name a schedule has is refused.
    triggers: Option<BTreeMap<String, Trigger>>,
}

/// A trigger: runs started by stored events (`stepwright events send`, `POST /v1/events`).
#[derive(JsonSchema)]
#[serde(deny_unknown_fields)]
struct Trigger {
    /// The event name, or a pattern where `*` stands for any characters (`ticket.*`).
    event: String,
    /// A condition over `event` (`name`, `seq`, `payload`, `received_at`): only events it
    /// holds for start runs.
    when: Option<String>,
    /// Each run's input: a template over `event` and `events` (default: the event's payload;
    /// a batch's: the list of its events).
    input: Option<Value>,
    /// One run for the last event of a quiet period, per key.
    debounce: Option<TriggerDebounce>,
    /// One run for up to `max` events, or those of `within` after the first.
    batch: Option<TriggerBatch>,
    /// At most `limit` runs of the trigger per key execute at once.
    concurrency: Option<TriggerConcurrency>,
}

/// A trigger's debounce.
#[derive(JsonSchema)]
#[serde(deny_unknown_fields)]
struct TriggerDebounce {
    /// A template over `event` giving the group (default: one group).
    key: Option<String>,
    /// How long a group must stay quiet before its last event starts a run.
    period: Duration,
}

/// A trigger's batch.
#[derive(JsonSchema)]
#[serde(deny_unknown_fields)]
struct TriggerBatch {
    /// At most this many events in one run (1 to 1000).
    #[schemars(range(min = 1, max = 1000))]
    max: u32,
    /// At most this long after the first event.
    within: Duration,
}

/// A trigger's concurrency limit per key.
#[derive(JsonSchema)]
#[serde(deny_unknown_fields)]
struct TriggerConcurrency {
    /// A template over `event` giving the group (default: one group).
    key: Option<String>,
    /// How many runs of a group execute at once.
    #[schemars(range(min = 1))]
    limit: u32,
}

/// A schedule: `cron` (with `timezone`) or `every` (with `phase`).
#[derive(JsonSchema)]
#[serde(deny_unknown_fields)]
struct Schedule {
    /// A cron expression: 5 fields (minute hour day-of-month month day-of-week, Sunday 0),
    /// or 6 with seconds first; read on the wall clock of `timezone`.
    cron: Option<String>,
    /// An interval (at least 1s), counted from the Unix epoch in real time.
    every: Option<Duration>,
    /// With `every`: how far past each multiple of the interval (`every: 1h, phase: 15m`
    /// ticks at :15).
    phase: Option<Duration>,
    /// The IANA time zone a cron expression is read in (default UTC).
    timezone: Option<String>,
    /// What the daylight-saving transitions do to a cron schedule.
    dst: Option<DstPolicy>,
    /// Each run's input: a template over `tick` (`tick.at`, `tick.local`, `tick.schedule`).
    input: Option<Value>,
    /// What a tick does while the previous run still goes (default skip).
    overlap: Option<OverlapPolicy>,
    /// How late a tick may still start a run, after an outage (default 1m); later ticks are
    /// recorded as skipped.
    catchup_window: Option<Duration>,
    /// Each tick fires up to this much after its time (the same in every process).
    jitter: Option<Duration>,
    /// No tick before this time (RFC 3339).
    start: Option<String>,
    /// No tick after this time (RFC 3339).
    end: Option<String>,
    /// A failed run pauses the schedule.
    pause_on_failure: Option<bool>,
}

/// The daylight-saving policy of a cron schedule.
#[derive(JsonSchema)]
#[serde(deny_unknown_fields)]
struct DstPolicy {
    /// A tick in the skipped hour: `shift` (default: at the jump, once) or `skip` (recorded).
    gap: Option<GapPolicy>,
    /// A tick in the repeated hour: `once` (default: the first time) or `twice`.
    fold: Option<FoldPolicy>,
}

/// A tick in the skipped hour.
#[derive(JsonSchema)]
#[serde(rename_all = "snake_case")]
enum GapPolicy {
    /// Fires at the jump (the gap's ticks are one tick).
    Shift,
    /// Starts nothing; recorded as skipped (`dst_gap`).
    Skip,
}

/// A tick in the repeated hour.
#[derive(JsonSchema)]
#[serde(rename_all = "snake_case")]
enum FoldPolicy {
    /// The first time only.
    Once,
    /// Both times.
    Twice,
}

/// What a tick does while the previous run still goes.
#[derive(JsonSchema)]
#[serde(rename_all = "snake_case")]
enum OverlapPolicy {
    /// Starts nothing (recorded `overlap`).
    Skip,
    /// Waits for the run to end; one waits at most.
    BufferOne,
    /// Every tick waits, in order.
    BufferAll,
    /// Asks the running run to cancel and starts.
    CancelOther,
    /// Starts alongside.
    AllowAll,
}

/// What the exported traces of a workflow's runs carry.
#[derive(JsonSchema)]
#[serde(deny_unknown_fields)]
struct Telemetry {
    /// Put prompts, completions and tool arguments and results on the spans (after each
    /// step's output guardrails), whatever the process says
    /// (`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`); default: as the process says
    /// (off).
    capture_content: Option<bool>,
    /// The most bytes of one value kept on a span (default 4096); the rest is cut, and the
    /// cut said.
    #[schemars(range(min = 1))]
    max_content_bytes: Option<u64>,
}

/// A workflow's concurrency group.
#[derive(JsonSchema)]
#[serde(deny_unknown_fields)]
struct ConcurrencyGroup {
    /// The group of a run: a template over `input`, such as "{{ input.customer }}".
    key: String,
    /// How many runs with one key may execute at once (running, or suspended on a timer or
    /// a person).
    #[schemars(range(min = 1))]
    limit: u32,
}

/// A duration: 500ms, 30s, 5m, 2h or 1d.
#[derive(JsonSchema)]
struct Duration(#[schemars(regex(pattern = r"^[0-9]+(\.[0-9]+)?(ms|s|m|h|d)$"))] String);

/// An effect class: what running the step does to the world.
#[derive(JsonSchema)]
#[serde(rename_all = "snake_case")]
enum Effect {
    /// Computes from its input only.
    Pure,
    /// Reads the world.
    Read,
    /// Changes the world.
    Write,
    /// Calls another system.
    External,
    /// Asks a person.
    Human,
}

/// One step: exactly one kind key (`set`, `llm`, `agent`, ...) and any common fields.
#[derive(JsonSchema)]
#[serde(deny_unknown_fields)]
struct Step {
    /// Its id: lowercase letters, digits and '-', unique among its siblings.
    #[schemars(regex(pattern = r"^[a-z0-9][a-z0-9-]*$"))]
    id: String,
    /// What it does.
    description: Option<String>,
    /// Runs the step only when this condition holds (a bare expression).
    #[serde(rename = "if")]
    condition: Option<Value>,
    /// A JSON Schema the step's input must match (checked before it runs: `input_validation`).
    input_schema: Option<Value>,
    /// A JSON Schema the step's output must match (for `llm`, also the structured-output schema).
    output: Option<Value>,
    /// Retry policy.
    retry: Option<Retry>,
    /// How long one attempt may take.
    timeout: Option<Duration>,
    /// What a failure does.
    on_failure: Option<OnFailure>,
    /// The step's effect class.
    effect: Option<Effect>,
    /// A person approves before the step runs.
    requires_approval: Option<Approval>,
    /// Checks on the step's input or output.
    guardrails: Option<Vec<Guardrail>>,
    /// Keep the output of this pure step in the store by its input: a later run (in any
    /// process) with the same input is served it without running the step.
    cache: Option<bool>,
    /// For recompute's diffs: array elements of the output are matched by this field (`id`,
    /// `sku`...) instead of by position.
    diff_key: Option<String>,
    /// With `on_failure: fallback`: the steps that run in this step's place, with its input,
    /// when it fails for good; their output becomes the step's.
    fallback: Option<Vec<Step>>,

    /// Kind: computes a value from a template.
    set: Option<Value>,
    /// Kind: the steps of the first arm whose `when` holds.
    branch: Option<Vec<BranchArm>>,
    /// Kind: paths run at the same time.
    fork: Option<Fork>,
    /// Kind: the same steps for each item of a list.
    map: Option<Map>,
    /// Kind: the same steps again until a condition holds.
    #[serde(rename = "loop")]
    repeat: Option<Loop>,
    /// Kind: nodes visited along edges.
    graph: Option<Graph>,
    /// Kind: the same steps on an interval.
    every: Option<Every>,
    /// Kind: a durable timer.
    sleep: Option<Duration>,
    /// Kind: a person approves or rejects.
    approval: Option<Approval>,
    /// Kind: the next message sent to the run's inbox for an event (`stepwright send RUN
    /// --inbox EVENT --message JSON`), including one sent before the wait began.
    wait: Option<Wait>,
    /// Kind: a person gives a value matching a schema.
    input: Option<HumanInput>,
    /// Kind: calls another workflow file (relative to this one).
    workflow: Option<String>,
    /// Kind: calls another workflow file in an isolated context (no memory layers are
    /// inherited); the step's `timeout` is required and cancels the whole child.
    spawn: Option<String>,
    /// Kind: one model call.
    llm: Option<Llm>,
    /// Kind: an agent of `agents`, given `prompt`.
    agent: Option<String>,
    /// Kind: a tool of `tools` (or `server.tool`), called with `with`.
    tool: Option<String>,
    /// Kind: stores a memory item (`with: { key, value, text?, session? }`).
    #[serde(rename = "memory.store")]
    memory_store: Option<MemoryTarget>,
    /// Kind: recalls memory items (`with`: a query, `{ query }`, `{ key }` or `{}`).
    #[serde(rename = "memory.recall")]
    memory_recall: Option<MemoryRecall>,

    /// For `agent`: the prompt (a template).
    prompt: Option<String>,
    /// For `agent`: the session whose conversation it continues (a template).
    session: Option<String>,
    /// For `tool`, `workflow`, `spawn`, `memory.store` and `memory.recall`: the input (a template).
    with: Option<Value>,
}

/// Retry policy.
#[derive(JsonSchema)]
#[serde(deny_unknown_fields)]
struct Retry {
    /// Attempts in all (default 3).
    max_attempts: Option<u32>,
    /// How the delay grows.
    backoff: Option<Backoff>,
    /// The first delay.
    initial_delay: Option<Duration>,
    /// The longest delay.
    max_delay: Option<Duration>,
    /// A random share of each delay, 0 to 1.
    jitter: Option<f64>,
}

#[derive(JsonSchema)]
#[serde(rename_all = "snake_case")]
enum Backoff {
    Fixed,
    Linear,
    Exponential,
}

#[derive(JsonSchema)]
#[serde(rename_all = "snake_case")]
enum OnFailure {
    /// The run fails.
    Abort,
    /// The step is skipped and the run goes on.
    Skip,
    /// Every failure is retried under the step's `retry` policy.
    Retry,
    /// The step's `fallback` steps run in its place.
    Fallback,
}

/// An `approval` step's body: what the person is asked, who may answer, and when it times out.
#[derive(JsonSchema)]
#[serde(deny_unknown_fields)]
struct Approval {
    /// What the person is asked (a template).
    message: Option<String>,
    /// Who may decide: `user:ann`, `role:lead`.
    approvers: Option<Vec<String>>,
    /// How long to wait.
    timeout: Option<Duration>,
    /// What happens when nobody decides in time.
    on_timeout: Option<OnTimeout>,
}

#[derive(JsonSchema)]
#[serde(rename_all = "snake_case")]
enum OnTimeout {
    Reject,
    Approve,
    Fail,
}

/// A `wait` step's body.
#[derive(JsonSchema)]
#[serde(deny_unknown_fields)]
struct Wait {
    /// The event: the name of the run's inbox its message is sent to, and of the stored
    /// events (`stepwright events send`) of the run's tenant it takes, received since the
    /// run was created.
    event: String,
    /// The fields a stored event's payload must have, each equal (templates over the scope
    /// when the wait begins): `{ ticket: "{{ input.ticket }}" }`.
    #[serde(rename = "match")]
    matching: Option<BTreeMap<String, Value>>,
    /// How long to wait; then the step fails with `interrupt_timeout`.
    timeout: Duration,
    /// A JSON Schema the message must match (else the step fails with `output_validation`).
    schema: Option<Value>,
}

/// A guardrail: a regular expression (`pattern`, can redact) or a condition on `value` (`when`).
#[derive(JsonSchema)]
#[serde(deny_unknown_fields)]
struct Guardrail {
    /// Where it looks (default output).
    on: Option<GuardrailStage>,
    /// What a violation does (default block).
    action: Option<GuardrailAction>,
    /// A regular expression.
    pattern: Option<String>,
    /// A condition on `value`.
    when: Option<String>,
}

#[derive(JsonSchema)]
#[serde(rename_all = "snake_case")]
enum GuardrailStage {
    Input,
    Output,
}

#[derive(JsonSchema)]
#[serde(rename_all = "snake_case")]
enum GuardrailAction {
    Block,
    Warn,
    Redact,
}

/// An arm of a branch: `when` with `steps`, or `otherwise`.
#[derive(JsonSchema)]
#[serde(deny_unknown_fields)]
struct BranchArm {
    /// The condition (a bare expression).
    when: Option<Value>,
    /// The steps when it holds.
    steps: Option<Vec<Step>>,
    /// The steps when no arm's condition holds.
    otherwise: Option<Vec<Step>>,
}

/// Paths run at the same time; the output is the list of their outputs.
#[derive(JsonSchema)]
#[serde(deny_unknown_fields)]
struct Fork {
    /// all (every path must finish), race (the first to finish wins) or settle (every path, failures kept).
    mode: Option<ForkMode>,
    /// How many paths run at once.
    concurrency: Option<u32>,
    /// The paths, each a list of steps.
    paths: Vec<Vec<Step>>,
    /// The fork's output instead of the default: a template over `results`, each path's
    /// `{status, output}` or `{status, error: {code, message}}`, in path order.
    merge: Option<Value>,
}

#[derive(JsonSchema)]
#[serde(rename_all = "snake_case")]
enum ForkMode {
    All,
    Race,
    Settle,
}

/// The same steps for each item of a list; the output is the list of their outputs.
#[derive(JsonSchema)]
#[serde(deny_unknown_fields)]
struct Map {
    /// An expression giving the list.
    items: Value,
    /// The name each item has in the steps (default `item`).
    #[serde(rename = "as")]
    name: Option<String>,
    /// How many items run at once.
    concurrency: Option<u32>,
    /// The steps each item runs through.
    steps: Vec<Step>,
    /// The map's output instead of the list of item outputs: a template over `results`, as
    /// for a fork's `merge`.
    merge: Option<Value>,
}

/// The same steps again; `loop.iteration` and `loop.input` inside.
#[derive(JsonSchema)]
#[serde(deny_unknown_fields)]
struct Loop {
    /// The steps of one iteration.
    steps: Vec<Step>,
    /// Stops when this condition holds after an iteration.
    until: Option<Value>,
    /// The most iterations (default 10).
    max_iterations: Option<u32>,
    /// The next iteration's input, a template over this iteration's steps and `loop`
    /// (default: this iteration's output).
    prepare_next: Option<Value>,
    /// A failed iteration: `abort` the loop (default), `retry` it (same input and message),
    /// or `skip` to the next.
    on_error: Option<LoopOnError>,
    /// Each iteration first takes one message from this inbox of the run (`loop.message`;
    /// `stepwright send RUN --inbox NAME`).
    inbox: Option<String>,
    /// How long an iteration waits for an inbox message before the loop ends.
    park_timeout: Option<Duration>,
}

#[derive(JsonSchema)]
#[serde(rename_all = "snake_case")]
enum LoopOnError {
    Abort,
    Retry,
    Skip,
}

/// Nodes visited along edges.
#[derive(JsonSchema)]
#[serde(deny_unknown_fields)]
struct Graph {
    /// The nodes (steps).
    nodes: Vec<Step>,
    /// Edges tried in order after a node.
    edges: Option<Vec<Edge>>,
    /// The first node (default: the first listed).
    entry: Option<String>,
    /// The most node visits (default 25).
    max_steps: Option<u32>,
}

#[derive(JsonSchema)]
#[serde(deny_unknown_fields)]
struct Edge {
    from: String,
    to: String,
    /// Taken only when this condition holds.
    when: Option<Value>,
}

/// The same steps on an interval; `tick` inside.
#[derive(JsonSchema)]
#[serde(deny_unknown_fields)]
struct Every {
    interval: Duration,
    /// A random share of each interval, 0 to below 1.
    jitter: Option<f64>,
    /// A channel whose wake-up runs the next tick at once.
    wake: Option<String>,
    /// What a failed tick does.
    on_error: Option<EveryOnError>,
    steps: Vec<Step>,
}

#[derive(JsonSchema)]
#[serde(rename_all = "snake_case")]
enum EveryOnError {
    Continue,
    Fail,
}

/// A value asked of a person.
#[derive(JsonSchema)]
#[serde(deny_unknown_fields)]
struct HumanInput {
    message: Option<String>,
    /// A JSON Schema the value must match.
    schema: Option<Value>,
}

/// One model call.
#[derive(JsonSchema)]
#[serde(deny_unknown_fields)]
struct Llm {
    /// A model of `models`.
    model: String,
    /// The user message (a template); or `messages`.
    prompt: Option<String>,
    /// The messages (`role`, `content`), templates inside.
    messages: Option<Vec<Value>>,
    /// The system message.
    system: Option<String>,
    temperature: Option<f64>,
    top_p: Option<f64>,
    max_tokens: Option<u32>,
    /// Stop sequences: one or a list.
    stop: Option<Value>,
    /// How many times a non-matching structured answer is shown its errors (default 1).
    repair_turns: Option<u32>,
    /// Whether text streams as it arrives (default true).
    stream: Option<bool>,
    /// Tools of `tools` (or `server.tool`) the model may call: the calls run (journaled,
    /// fenced by their effects), their results go back to it, and its answer is the output.
    tools: Option<Vec<String>>,
    /// With `tools`: how many rounds of calls before the answer (default 1; more fails the
    /// step with `budget_exceeded`).
    #[schemars(range(min = 1))]
    max_tool_rounds: Option<u32>,
}

#[derive(JsonSchema)]
#[serde(deny_unknown_fields)]
struct MemoryTarget {
    namespace: String,
    scope: Option<MemoryScope>,
}

#[derive(JsonSchema)]
#[serde(deny_unknown_fields)]
struct MemoryRecall {
    namespace: String,
    scope: Option<MemoryScope>,
    /// The most items (default 5).
    limit: Option<u32>,
}

#[derive(JsonSchema)]
#[serde(rename_all = "snake_case")]
enum MemoryScope {
    Run,
    Session,
    User,
    Global,
}

/// A model binding.
#[derive(JsonSchema)]
#[serde(deny_unknown_fields)]
struct Model {
    /// openai (any OpenAI-compatible endpoint) or anthropic.
    provider: Provider,
    /// The provider's model id.
    model: String,
    /// The endpoint (default: the provider's).
    base_url: Option<String>,
    /// The environment variable with the key (default OPENAI_API_KEY or ANTHROPIC_API_KEY).
    api_key_env: Option<String>,
    /// Dollars per million tokens.
    pricing: Option<Pricing>,
    timeout: Option<Duration>,
    max_retries: Option<u32>,
    /// Anthropic: the `anthropic-version` header (default 2023-06-01).
    api_version: Option<String>,
    /// OpenAI: the field of the token limit (default max_completion_tokens on OpenAI's own
    /// endpoint, max_tokens on a base_url, which compatible servers read).
    token_limit_field: Option<TokenLimitField>,
    /// Whether the model takes temperature and top_p (a step that sets them for a model that
    /// does not, does not load). Default: true for openai (false for reasoning models), false
    /// for anthropic (its current models take neither).
    sampling: Option<bool>,
    /// Requests per minute for this endpoint and key, counted across every worker on the
    /// store (a sixtieth of it per second).
    #[schemars(range(min = 1))]
    requests_per_minute: Option<u32>,
    /// Tokens (input and output) per minute for this endpoint and key, counted across every
    /// worker on the store: a call waits while the minute's tokens are spent.
    #[schemars(range(min = 1))]
    tokens_per_minute: Option<u32>,
}

#[derive(JsonSchema)]
#[serde(rename_all = "snake_case")]
enum TokenLimitField {
    MaxTokens,
    MaxCompletionTokens,
}

#[derive(JsonSchema)]
#[serde(rename_all = "snake_case")]
enum Provider {
    Openai,
    Anthropic,
}

#[derive(JsonSchema)]
#[serde(deny_unknown_fields)]
struct Pricing {
    /// Per million prompt tokens not served from the provider's cache.
    #[schemars(range(min = 0))]
    input: f64,
    /// Per million generated tokens.
    #[schemars(range(min = 0))]
    output: f64,
    /// Per million prompt tokens read from the provider's cache (default: `input`).
    #[schemars(range(min = 0))]
    cache_read: Option<f64>,
    /// Per million prompt tokens written to the provider's cache (default: `input`).
    #[schemars(range(min = 0))]
    cache_write: Option<f64>,
}

/// A tool: a command (argv templates over `args`, never a shell), an HTTP call, or a step
/// worker's handler.
#[derive(JsonSchema)]
#[serde(deny_unknown_fields)]
struct Tool {
    description: Option<String>,
    /// A JSON Schema of its arguments.
    input: Option<Value>,
    /// A JSON Schema its result must match (else the call fails with `output_validation`,
    /// an error result for an agent).
    output: Option<Value>,
    /// The program and its arguments.
    command: Option<Vec<String>>,
    http: Option<HttpCall>,
    /// Calls run in a step worker (a Python or TypeScript process polling a queue).
    worker: Option<WorkerCall>,
    effect: Option<Effect>,
    safe_to_retry: Option<bool>,
    needs_approval: Option<bool>,
    timeout: Option<Duration>,
    /// For `command`: the working directory.
    cwd: Option<String>,
    /// For `command`: extra environment variables.
    env: Option<BTreeMap<String, String>>,
}

/// Where a `worker` tool's calls go.
#[derive(JsonSchema)]
#[serde(deny_unknown_fields)]
struct WorkerCall {
    /// The queue workers poll (default `default`).
    queue: Option<String>,
    /// The handler a worker registers: a name, or `name@version` (default: the tool's name).
    handler: Option<String>,
    /// A claim without a heartbeat lasts this long (default: the tool's `timeout`, else 5m).
    heartbeat_timeout: Option<Duration>,
    /// Fail with `no_worker` if nobody claims a call within this long.
    schedule_to_start: Option<Duration>,
    /// At most this many calls at once, across all workers.
    concurrency: Option<WorkerConcurrency>,
}

#[derive(JsonSchema)]
#[serde(deny_unknown_fields)]
struct WorkerConcurrency {
    #[schemars(range(min = 1))]
    limit: u32,
}

#[derive(JsonSchema)]
#[serde(deny_unknown_fields)]
struct HttpCall {
    url: String,
    /// Default POST.
    method: Option<String>,
    headers: Option<BTreeMap<String, String>>,
    /// Sign every request with the secret in this environment variable:
    /// `Stepwright-Signature: t=<unix>,v1=<hex hmac-sha256 of "t.body">` (the webhooks' scheme).
    signing_secret_env: Option<String>,
    /// Push mode: each call is a step task sent as the body; the endpoint answers `200` with
    /// the output, or `202` and answers later through `/v1/tasks/{id}/complete` (or `fail`)
    /// with the task's lease, with a key whose `worker` role covers queue `push`.
    #[serde(rename = "async")]
    push: Option<bool>,
    /// Push mode: how long the endpoint holds a task without a heartbeat (default: the
    /// tool's `timeout`, else 5m); then it is tried again, or `outcome_unknown` for an unsafe
    /// effect.
    heartbeat_timeout: Option<Duration>,
}

/// An MCP server: started with `command` (stdio) or reached at `url` (streamable HTTP).
#[derive(JsonSchema)]
#[serde(deny_unknown_fields)]
struct McpServer {
    command: Option<String>,
    args: Option<Vec<String>>,
    env: Option<BTreeMap<String, String>>,
    cwd: Option<String>,
    url: Option<String>,
    headers: Option<BTreeMap<String, String>>,
    /// Only these tools (all when absent).
    tools: Option<Vec<String>>,
    /// The effect class of its tools (default external).
    effect: Option<Effect>,
    safe_to_retry: Option<bool>,
    needs_approval: Option<bool>,
    timeout: Option<Duration>,
    connect_timeout: Option<Duration>,
    call_timeout: Option<Duration>,
    /// The largest message (a tool's answer) the server may send, in bytes (default 16 MiB);
    /// a larger answer fails the call with `tool_result_too_large`, and it is not repeated.
    #[schemars(range(min = 1024))]
    max_message_bytes: Option<u64>,
    /// Policies of single tools, over the server's.
    tool_policies: Option<BTreeMap<String, ToolPolicy>>,
}

#[derive(JsonSchema)]
#[serde(deny_unknown_fields)]
struct ToolPolicy {
    effect: Option<Effect>,
    safe_to_retry: Option<bool>,
    needs_approval: Option<bool>,
    timeout: Option<Duration>,
}

/// The JSON Schema (draft 2020-12) of a workflow file.
pub fn file_schema() -> Value {
    let mut schema = serde_json::to_value(schemars::schema_for!(WorkflowFile)).unwrap_or_default();
    schema["$id"] = Value::String("https://stepwright.dev/schemas/workflow.json".into());
    // An agent's name is its key under `agents`, not a field.
    if let Some(agent) = schema.pointer_mut("/$defs/AgentSpec") {
        if let Some(properties) = agent.get_mut("properties").and_then(Value::as_object_mut) {
            properties.remove("name");
        }
        if let Some(required) = agent.get_mut("required").and_then(Value::as_array_mut) {
            required.retain(|r| r != "name");
        }
    }
    schema
}
