//! One error for the application layer, classified once: the caller's fault or ours.

use stepwright_core::{EngineError, Fault, RunId, StoreError};

/// Why an application-layer operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AppError {
    /// The request does not fit (a flag, a binding, a decision with no interrupt to take
    /// it); the message says what to change.
    #[error("{0}")]
    BadInput(String),
    /// A workflow file does not load: every problem, at its `file:line:col`.
    #[error(transparent)]
    Load(stepwright_flow::LoadError),
    /// An MCP server a file declares did not start, or its tools could not be added.
    #[error("{}", mcp_failure(server, source))]
    McpServer {
        /// The server's name in the file.
        server: String,
        /// Why.
        #[source]
        source: stepwright_mcp::McpError,
    },
    /// The run was started from a definition whose source the store does not keep (a Rust
    /// workflow, or a file run by a version that kept none).
    #[error("run {run} was not started from a workflow file this store knows (workflow {workflow:?})")]
    NoSource {
        /// The run.
        run: RunId,
        /// Its workflow's name.
        workflow: String,
    },
    /// The stored source compiles to another definition than the run is pinned to (the
    /// file format changed under it).
    #[error("the stored source of {name} no longer compiles to the definition run {run} is pinned to")]
    SourceChanged {
        /// The run.
        run: RunId,
        /// The source's name.
        name: String,
    },
    /// A message for an inbox or wake channel the run does not read (the message says which
    /// it does).
    #[error("{0}")]
    UnknownMailbox(String),
    /// The engine refused or failed.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The store could not be opened.
    #[error(transparent)]
    Open(#[from] stepwright_store::OpenError),
    /// Another process works on the experiment (it holds it, and is alive).
    #[error("experiment {id} is at work in {holder} (its hold lapses at {} unless renewed)", stepwright_schedule::format_instant(*until))]
    ExperimentHeld {
        /// The experiment.
        id: stepwright_core::RunId,
        /// Who holds it.
        holder: String,
        /// Until when.
        until: stepwright_core::Timestamp,
    },
    /// The task executing a run stopped without an answer (it panicked): a bug of ours.
    #[error("the run's task failed: {0}")]
    TaskFailed(String),
}

impl AppError {
    /// Whose fault it is: the CLI's exit 2 or 1, the server's 4xx or 5xx.
    pub fn fault(&self) -> Fault {
        match self {
            Self::BadInput(_) | Self::Load(_) | Self::UnknownMailbox(_) | Self::ExperimentHeld { .. } => Fault::Caller,
            Self::Open(stepwright_store::OpenError::UnknownScheme { .. }) => Fault::Caller,
            Self::Engine(e) => e.fault(),
            Self::Store(e) => e.fault(),
            Self::McpServer { .. }
            | Self::NoSource { .. }
            | Self::SourceChanged { .. }
            | Self::Open(_)
            | Self::TaskFailed(_) => Fault::Engine,
        }
    }

    /// The stable error code (docs/error-codes.md).
    pub fn code(&self) -> &'static str {
        match self {
            Self::BadInput(_) => "bad_input",
            Self::UnknownMailbox(_) => "unknown_inbox",
            Self::Load(_) => "invalid_workflow",
            Self::McpServer { .. } => "mcp_server_failed",
            Self::NoSource { .. } => "definition_missing",
            Self::SourceChanged { .. } => "definition_changed",
            Self::Engine(e) => e.code(),
            Self::Store(e) => e.code(),
            Self::Open(stepwright_store::OpenError::UnknownScheme { .. }) => "bad_input",
            Self::Open(_) => "store_unavailable",
            Self::ExperimentHeld { .. } => "already_running",
            Self::TaskFailed(_) => "internal",
        }
    }
}

/// "starting MCP server NAME: why", said once: a start error of the MCP layer already begins
/// so.
fn mcp_failure(server: &str, source: &stepwright_mcp::McpError) -> String {
    let why = source.to_string();
    let context = format!("starting MCP server {server:?}");
    if why.starts_with(&context) { why } else { format!("{context}: {why}") }
}
