//! What the commands stand on: opening the store, the engine over it, loading and preparing
//! workflow files (models, cassettes, MCP servers), rebuilding a run's definition from the
//! store, and reading inputs.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, anyhow};
use serde_json::Value;
use stepwright_core::journal::DefinitionSource;
use stepwright_core::{Engine, EngineBuilder, MemoryBank, RunId, SessionStore, Store};

use crate::args::ModelFlags;
use crate::exit::BadInput;
use crate::progress;

/// The largest `--input @FILE` read (16 MiB).
pub(crate) const MAX_INPUT_BYTES: u64 = 16 << 20;

/// A store with everything the CLI's steps use: the journal, sessions and memory.
pub(crate) use stepwright_store::AnyStore as CliStore;

/// Each command is its own worker (`cli@host:pid:nonce`): a run it executes is not taken by
/// another command while it lives, and is taken over at once once it is gone.
pub(crate) fn cli_engine(store: &Arc<dyn CliStore>, progress: bool) -> Engine {
    let name = stepwright_core::local_worker_id("cli", &stepwright_core::SystemEntropy::new());
    let mut builder = engine_over(store).worker_id(&name);
    if progress {
        builder = builder.observer(Arc::new(progress::Progress::for_stderr()));
    }
    builder.build()
}

pub(crate) fn parse_run(text: &str) -> anyhow::Result<RunId> {
    text.parse().map_err(|e| anyhow!(BadInput(format!("{e}"))))
}

pub(crate) fn parse_json(text: &str, what: &str) -> anyhow::Result<Value> {
    serde_json::from_str(text).map_err(|e| anyhow!(BadInput(format!("{what} is not JSON: {e}"))))
}

/// Rebuilds a run's definition from the source the store keeps.
pub(crate) async fn definition_of(
    store: &Arc<dyn CliStore>,
    run: RunId,
    flags: &ModelFlags,
) -> anyhow::Result<stepwright_core::Workflow> {
    let record = store.load(run).await?.record;
    let source = store.get_definition(record.definition_hash).await?.ok_or_else(|| {
        anyhow!("run {run} was not started from a workflow file this store knows (workflow {:?})", record.workflow)
    })?;
    let loaded = stepwright_flow::load_source_with(&source.source, &source.name, &flags.load_options())
        .map_err(|e| anyhow!(BadInput(e.to_string())))?;
    let workflow = prepare(loaded, flags, Servers::Connected).await?;
    if workflow.hash() != record.definition_hash {
        return Err(anyhow!(
            "the stored source of {} no longer compiles to the definition run {run} is pinned to",
            source.name
        ));
    }
    Ok(workflow)
}

/// Refuses a run of another tenant than the one the caller names.
pub(crate) async fn check_tenant(store: &dyn Store, run: RunId, tenant: Option<&str>) -> anyhow::Result<()> {
    let Some(tenant) = tenant else { return Ok(()) };
    let record = store.load_from(run, u64::MAX).await?.record;
    if record.caller.tenant.as_deref() != Some(tenant) {
        return Err(anyhow!(BadInput(format!("access denied: run {run} does not belong to tenant {tenant:?}"))));
    }
    Ok(())
}

/// Whether preparing a workflow starts the MCP servers its file declares.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Servers {
    /// Only declared: checking or drawing a file starts no process.
    Declared,
    /// Connected and their tools registered, to run steps.
    Connected,
}

pub(crate) async fn load(
    file: &Path,
    flags: &ModelFlags,
    servers: Servers,
) -> anyhow::Result<stepwright_core::Workflow> {
    let loaded =
        stepwright_flow::load_with(file, &flags.load_options()).map_err(|e| anyhow!(BadInput(e.to_string())))?;
    prepare(loaded, flags, servers).await
}

/// Binds a loaded file's models (with `--model` overrides and `--cassette`) and hands them
/// to its workflow as a service, beside the file's tools and agents; with
/// [`Servers::Connected`], also starts its MCP servers and adds their tools.
pub(crate) async fn prepare(
    loaded: stepwright_flow::Loaded,
    flags: &ModelFlags,
    servers: Servers,
) -> anyhow::Result<stepwright_core::Workflow> {
    let stepwright_flow::Loaded { workflow, models: mut configs, mcp_servers, mcp_tool_uses } = loaded;
    for entry in &flags.overrides {
        let (name, spec) = entry
            .split_once('=')
            .ok_or_else(|| BadInput(format!("--model {entry:?}: expected NAME=provider:model[@base_url]")))?;
        if !configs.contains_key(name) {
            let known: Vec<&str> = configs.keys().map(String::as_str).collect();
            return Err(anyhow!(BadInput(format!(
                "--model {name}=…: the workflow declares no model {name:?} (its models: {})",
                if known.is_empty() { "none".to_owned() } else { known.join(", ") }
            ))));
        }
        let config =
            stepwright_llm::ModelConfig::parse_spec(spec).map_err(|e| BadInput(format!("--model {entry:?}: {e}")))?;
        configs.insert(name.to_owned(), config);
    }
    let mut models = stepwright_llm::Models::new();
    for (name, config) in &configs {
        models.bind(name, config).map_err(|e| BadInput(format!("model {name:?}: {e}")))?;
    }
    if let Some(path) = &flags.cassette {
        let cassette = stepwright_llm::Cassette::open(path, flags.cassette_mode)
            .map_err(|e| BadInput(format!("--cassette {}: {e}", path.display())))?;
        models = models.with_cassette(cassette);
    }
    let workflow = workflow.with_service(Arc::new(models));
    if servers == Servers::Declared || mcp_servers.is_empty() {
        return Ok(workflow);
    }
    connect_servers(workflow, mcp_servers, &mcp_tool_uses).await
}

/// Connects a file's MCP servers, adds their tools to the workflow's, and checks every use
/// the file makes of them (which tools a server has is known only now).
pub(crate) async fn connect_servers(
    workflow: stepwright_core::Workflow,
    servers: Vec<stepwright_mcp::ServerConfig>,
    uses: &[stepwright_flow::McpToolUse],
) -> anyhow::Result<stepwright_core::Workflow> {
    let mut tools = workflow.services().get::<stepwright_llm::Tools>().map(|t| (*t).clone()).unwrap_or_default();
    for config in servers {
        let name = config.name.clone();
        stepwright_mcp::McpServer::register(config, &mut tools)
            .await
            .with_context(|| format!("starting MCP server {name:?}"))?;
    }
    let problems: Vec<String> = uses
        .iter()
        .filter(|used| tools.get(&used.tool).is_none())
        .map(|used| {
            let (server, tool) = used.tool.split_once('.').unwrap_or_default();
            let prefix = format!("{server}.");
            let offered: Vec<&str> = tools.names().into_iter().filter_map(|n| n.strip_prefix(&prefix)).collect();
            format!(
                "{}:{}:{}: MCP server `{server}` has no tool `{tool}` (hint: it has: {})",
                used.file,
                used.line,
                used.column,
                offered.join(", ")
            )
        })
        .collect();
    if !problems.is_empty() {
        return Err(anyhow!(BadInput(problems.join("\n"))));
    }
    Ok(workflow.with_service(Arc::new(tools)))
}

/// An engine over the store, with the store's sessions and memory for agent and memory
/// steps.
pub(crate) fn engine_over(store: &Arc<dyn CliStore>) -> EngineBuilder {
    Engine::builder()
        .store(store.clone() as Arc<dyn Store>)
        .service(Arc::new(stepwright_llm::Sessions::new(store.clone() as Arc<dyn SessionStore>)))
        .service(Arc::new(stepwright_llm::MemoryService::new(store.clone() as Arc<dyn MemoryBank>)))
}

pub(crate) fn parse_input(input: Option<&str>) -> anyhow::Result<Value> {
    let Some(input) = input else { return Ok(Value::Null) };
    let text = match input.strip_prefix('@') {
        Some(path) => stepwright_flow::read_limited(Path::new(path), MAX_INPUT_BYTES)
            .map_err(|why| BadInput(format!("the input file {path} cannot be read: {why}")))?,
        None => input.to_owned(),
    };
    serde_json::from_str(&text).map_err(|e| anyhow!(BadInput(format!("the input is not JSON: {e}"))))
}

/// The store `--db` (else `STEPWRIGHT_DB`, else `sqlite://stepwright.db`) names.
pub(crate) async fn open_store(db: Option<&str>) -> anyhow::Result<Arc<dyn CliStore>> {
    let url = db
        .map(str::to_owned)
        .or_else(|| std::env::var("STEPWRIGHT_DB").ok())
        .unwrap_or_else(|| "sqlite://stepwright.db".into());
    match stepwright_store::open(&url).await {
        Ok(store) => Ok(store),
        Err(e @ stepwright_store::OpenError::UnknownScheme { .. }) => Err(anyhow!(BadInput(format!("--db: {e}")))),
        Err(e) => Err(anyhow!(e)),
    }
}

/// The wall clock as a timestamp (for showing leases and log lines).
pub(crate) fn wall_now() -> stepwright_core::Timestamp {
    use stepwright_core::Clock;
    stepwright_core::TokioClock::new().now()
}

/// Keeps a workflow file's source in the store under its definition hash, so any later
/// command, or a worker elsewhere, rebuilds the definition from the store.
pub(crate) async fn keep_source(
    store: &Arc<dyn CliStore>,
    workflow: &stepwright_core::Workflow,
    file: &Path,
) -> anyhow::Result<()> {
    let source = std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let definition = DefinitionSource { name: file.display().to_string(), ..DefinitionSource::default_yaml(&source) };
    store.put_definition(workflow.hash(), definition).await?;
    Ok(())
}
