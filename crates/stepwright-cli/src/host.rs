//! What the commands stand on: opening the store, the engine over it, loading and preparing
//! workflow files (models, cassettes, MCP servers), rebuilding a run's definition from the
//! store, and reading inputs.

use std::path::Path;
use std::sync::Arc;

use anyhow::anyhow;
use serde_json::Value;
use stepwright::journal::DefinitionSource;
use stepwright::{Engine, RunId, Store};

use crate::args::ModelFlags;
use crate::exit::BadInput;
use crate::progress;

/// The largest `--input @FILE` read (16 MiB).
pub(crate) const MAX_INPUT_BYTES: u64 = 16 << 20;

/// A store with everything the CLI's steps use: the journal, sessions and memory.
pub(crate) use stepwright::backends::ServerStore as CliStore;

/// Each command is its own worker (`cli@host:pid:nonce`): a run it executes is not taken by
/// another command while it lives, and is taken over at once once it is gone.
pub(crate) fn cli_engine(store: &Arc<dyn CliStore>, progress: bool, flags: &ModelFlags) -> Engine {
    let name = stepwright::local_worker_id("cli", &stepwright::SystemEntropy::new());
    let mut builder = engine_over(store).worker_id(&name).config(flags.engine_config());
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
) -> anyhow::Result<stepwright::Workflow> {
    let bindings = flags.bindings().sharing_limits_in(store.clone());
    Ok(stepwright::app::definition_of(store.as_ref(), run, &bindings).await?)
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

pub(crate) use stepwright::app::Servers;

pub(crate) async fn load(file: &Path, flags: &ModelFlags, servers: Servers) -> anyhow::Result<stepwright::Workflow> {
    Ok(stepwright::app::load_file(file, &flags.bindings(), servers).await?)
}

/// The engine over a store, with the process's metrics observer when it keeps metrics.
pub(crate) fn engine_over(store: &Arc<dyn CliStore>) -> stepwright::EngineBuilder {
    let builder = stepwright::app::engine_over(store);
    match stepwright::telemetry::metrics() {
        Some(metrics) => builder.observer(metrics.observer()),
        None => builder,
    }
}

/// A workflow file's text: a regular file (a FIFO or a device is refused at once, never
/// waited on) within the file size limit.
pub(crate) fn read_workflow_file(file: &Path) -> anyhow::Result<String> {
    stepwright::flow::read_limited(file, stepwright::flow::MAX_FILE_BYTES)
        .map_err(|why| anyhow!(BadInput(format!("{} cannot be read: {why}", file.display()))))
}

pub(crate) fn parse_input(input: Option<&str>) -> anyhow::Result<Value> {
    let Some(input) = input else { return Ok(Value::Null) };
    let text = match input.strip_prefix('@') {
        Some(path) => stepwright::flow::read_limited(Path::new(path), MAX_INPUT_BYTES)
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
    match stepwright::backends::open(&url).await {
        Ok(store) => Ok(store),
        Err(e @ stepwright::backends::OpenError::UnknownScheme { .. }) => Err(anyhow!(BadInput(format!("--db: {e}")))),
        Err(e) => Err(anyhow!(e)),
    }
}

/// Keeps a workflow file's source in the store under its definition hash, so any later
/// command, or a worker elsewhere, rebuilds the definition from the store.
pub(crate) async fn keep_source(
    store: &Arc<dyn CliStore>,
    workflow: &stepwright::Workflow,
    file: &Path,
    called_files: Option<std::collections::BTreeMap<String, String>>,
) -> anyhow::Result<()> {
    let source = read_workflow_file(file)?;
    // With the files it calls as they were read: a run goes on with the definition it started
    // with, whatever becomes of those files.
    let definition = DefinitionSource {
        name: file.display().to_string(),
        files: called_files.unwrap_or_default(),
        ..DefinitionSource::default_yaml(&source)
    };
    Ok(stepwright::app::keep_source(store.as_ref(), workflow, definition).await?)
}
