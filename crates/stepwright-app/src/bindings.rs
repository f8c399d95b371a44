//! Binding a loaded workflow file to the world: its models (with overrides and a
//! cassette) and, to run steps, its MCP servers.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::AppError;

/// How a host loads workflow files and reaches their models: the CLI's `--allow-dir`,
/// `--model` and `--cassette`, a server's configuration.
#[derive(Debug, Clone, Default)]
pub struct Bindings {
    /// Directories a `workflow:` call may reach besides the first file's own tree.
    pub allow_dirs: Vec<PathBuf>,
    /// Model bindings replaced: `NAME=provider:model[@base_url]`.
    pub overrides: Vec<String>,
    /// Record model calls to, or replay them from, this file.
    pub cassette: Option<PathBuf>,
    /// How the cassette is used.
    pub cassette_mode: stepwright_llm::CassetteMode,
    /// Where the models' request and token limits are counted: a store every worker on
    /// the database shares (none: in this process).
    pub shared_limits: Option<SharedLimits>,
    /// The cassette, once a workflow was prepared with it: every workflow these bindings
    /// (and their clones) prepare records to and replays from this one, so two of them
    /// never overwrite each other's recordings.
    pub opened_cassette: OpenedCassette,
}

/// The cassette [`Bindings`] opened, shared by their clones.
#[derive(Clone, Default)]
pub struct OpenedCassette(Arc<std::sync::Mutex<Option<Arc<stepwright_llm::Cassette>>>>);

impl std::fmt::Debug for OpenedCassette {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OpenedCassette")
    }
}

impl OpenedCassette {
    /// The cassette at `path`, opened at the first call.
    fn get(&self, path: &Path, mode: stepwright_llm::CassetteMode) -> Result<Arc<stepwright_llm::Cassette>, AppError> {
        let mut opened = self.0.lock().expect("poisoned");
        if let Some(cassette) = opened.as_ref().filter(|c| c.path() == path && c.mode() == mode) {
            return Ok(cassette.clone());
        }
        let cassette = Arc::new(
            stepwright_llm::Cassette::open(path, mode)
                .map_err(|e| AppError::BadInput(format!("--cassette {}: {e}", path.display())))?,
        );
        *opened = Some(cassette.clone());
        Ok(cassette)
    }
}

/// A store that counts model rate limits for every process on it.
#[derive(Clone)]
pub struct SharedLimits(pub Arc<dyn stepwright_core::store::quota::QuotaStore>);

impl std::fmt::Debug for SharedLimits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SharedLimits")
    }
}

impl Bindings {
    /// These bindings with their models' rate limits counted in `store`, shared by every
    /// process on it.
    #[must_use]
    pub fn sharing_limits_in(mut self, store: Arc<dyn stepwright_core::store::quota::QuotaStore>) -> Self {
        self.shared_limits = Some(SharedLimits(store));
        self
    }

    /// The loader's options these bindings imply.
    pub fn load_options(&self) -> stepwright_flow::LoadOptions {
        stepwright_flow::LoadOptions { allowed_dirs: self.allow_dirs.clone(), ..Default::default() }
    }

    /// A workflow's source (named `name`) loaded the way every process loads it again: the
    /// files it calls from `files`, never from a disk, so a server, a worker and a later
    /// command compile the same definition.
    pub fn load_source(
        &self,
        source: &str,
        name: &str,
        files: &std::collections::BTreeMap<String, String>,
    ) -> Result<stepwright_flow::Loaded, AppError> {
        let mut options = self.load_options();
        options.files = Some(Arc::new(files.clone()));
        stepwright_flow::load_source_with(source, name, &options).map_err(AppError::Load)
    }
}

/// Whether preparing a workflow starts the MCP servers its file declares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Servers {
    /// Only declared: checking or drawing a file starts no process.
    Declared,
    /// Connected and their tools registered, to run steps.
    Connected,
}

/// Loads a workflow file from disk and prepares it.
pub async fn load_file(
    file: &Path,
    bindings: &Bindings,
    servers: Servers,
) -> Result<stepwright_core::Workflow, AppError> {
    let loaded = stepwright_flow::load_with(file, &bindings.load_options()).map_err(AppError::Load)?;
    prepare(loaded, bindings, servers).await
}

/// Binds a loaded file's models (with the overrides and the cassette) and hands them to its
/// workflow as a service, beside the file's tools and agents; with [`Servers::Connected`],
/// also starts its MCP servers and adds their tools.
pub async fn prepare(
    loaded: stepwright_flow::Loaded,
    bindings: &Bindings,
    servers: Servers,
) -> Result<stepwright_core::Workflow, AppError> {
    let stepwright_flow::Loaded { workflow, models: mut configs, mcp_servers, mcp_tool_uses, .. } = loaded;
    for entry in &bindings.overrides {
        let (name, spec) = entry
            .split_once('=')
            .ok_or_else(|| AppError::BadInput(format!("--model {entry:?}: expected NAME=provider:model[@base_url]")))?;
        if !configs.contains_key(name) {
            let known: Vec<&str> = configs.keys().map(String::as_str).collect();
            return Err(AppError::BadInput(format!(
                "--model {name}=…: the workflow declares no model {name:?} (its models: {})",
                if known.is_empty() { "none".to_owned() } else { known.join(", ") }
            )));
        }
        let config = stepwright_llm::ModelConfig::parse_spec(spec)
            .map_err(|e| AppError::BadInput(format!("--model {entry:?}: {e}")))?;
        configs.insert(name.to_owned(), config);
    }
    let mut models = stepwright_llm::Models::new();
    if let Some(SharedLimits(quotas)) = &bindings.shared_limits {
        models = models.with_shared_limits(quotas.clone());
    }
    // The cassette first: with one, a key is needed only for a call it has no recording of.
    if let Some(path) = &bindings.cassette {
        models = models.with_shared_cassette(bindings.opened_cassette.get(path, bindings.cassette_mode)?);
    }
    for (name, config) in &configs {
        models.bind(name, config).map_err(|e| AppError::BadInput(format!("model {name:?}: {e}")))?;
    }
    let workflow = workflow.with_service(Arc::new(models));
    if servers == Servers::Declared || mcp_servers.is_empty() {
        return Ok(workflow);
    }
    connect_servers(workflow, mcp_servers, &mcp_tool_uses).await
}

/// A workflow whose model calls to some bindings are answered by others it already has:
/// `{"smart": "fast"}` sends every call to `smart` to `fast`'s endpoint and model. How a run
/// is recomputed with another model without the caller naming an endpoint or a key.
pub fn rebind_models(
    workflow: stepwright_core::Workflow,
    replacements: &std::collections::BTreeMap<String, String>,
) -> Result<stepwright_core::Workflow, AppError> {
    if replacements.is_empty() {
        return Ok(workflow);
    }
    let models = workflow.services().get::<stepwright_llm::Models>().unwrap_or_default();
    let rebound = models
        .rebound(replacements.iter().map(|(name, by)| (name.as_str(), by.as_str())))
        .map_err(|e| AppError::BadInput(format!("models: {e}")))?;
    Ok(workflow.with_service(Arc::new(rebound)))
}

/// The model bindings a workflow has, by name, with the provider's model id each sends.
pub fn model_bindings(workflow: &stepwright_core::Workflow) -> Vec<(String, String)> {
    let Some(models) = workflow.services().get::<stepwright_llm::Models>() else { return Vec::new() };
    models
        .names()
        .into_iter()
        .map(|name| (name.to_owned(), models.model_id(name).unwrap_or_default().to_owned()))
        .collect()
}

/// Connects a file's MCP servers, adds their tools to the workflow's, and checks every use
/// the file makes of them (which tools a server has is known only now).
pub async fn connect_servers(
    workflow: stepwright_core::Workflow,
    servers: Vec<stepwright_mcp::ServerConfig>,
    uses: &[stepwright_flow::McpToolUse],
) -> Result<stepwright_core::Workflow, AppError> {
    let mut tools = workflow.services().get::<stepwright_llm::Tools>().map(|t| (*t).clone()).unwrap_or_default();
    for config in servers {
        let server = config.name.clone();
        stepwright_mcp::McpServer::register(config, &mut tools)
            .await
            .map_err(|source| AppError::McpServer { server, source })?;
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
        return Err(AppError::BadInput(problems.join("\n")));
    }
    Ok(workflow.with_service(Arc::new(tools)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every workflow one set of bindings prepares shares one cassette: two instances of a
    /// file would each rewrite it with only their own recordings (an experiment recording at
    /// a concurrency of 4 lost some that way).
    #[test]
    fn bindings_open_their_cassette_once() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a.json"), dir.path().join("b.json"));
        let bindings = Bindings { cassette: Some(a.clone()), ..Bindings::default() };
        let clone = bindings.clone();
        let first = bindings.opened_cassette.get(&a, stepwright_llm::CassetteMode::Record).unwrap();
        let again = clone.opened_cassette.get(&a, stepwright_llm::CassetteMode::Record).unwrap();
        assert!(Arc::ptr_eq(&first, &again), "a clone of the bindings shares the cassette");
        let other = bindings.opened_cassette.get(&b, stepwright_llm::CassetteMode::Record).unwrap();
        assert!(!Arc::ptr_eq(&first, &other) && other.path() == b, "another file is another cassette");
        let separate = Bindings::default().opened_cassette.get(&a, stepwright_llm::CassetteMode::Record).unwrap();
        assert!(!Arc::ptr_eq(&first, &separate), "bindings made apart open their own");
    }
}
