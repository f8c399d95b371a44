//! Errors from engine operations, each saying whether it is the caller's.

use crate::error::StepError;
use crate::hash::ContentHash;
use crate::ids::{InterruptId, RunId, Timestamp};
use crate::journal::RunStatus;
use crate::store::StoreError;

/// Errors from engine operations.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// The workflow input does not match the workflow's input schema; nothing was created.
    #[error("starting workflow {workflow:?}: {source}")]
    InvalidInput {
        /// The workflow.
        workflow: String,
        /// The validation error.
        #[source]
        source: StepError,
    },
    /// The store failed; the run stopped where the journal ends and can be resumed.
    #[error("the store failed during run {run}")]
    Store {
        /// The run.
        run: RunId,
        /// The cause.
        #[source]
        source: StoreError,
    },
    /// The request does not fit the run (fork at a step it never reached, …).
    #[error("run {run}: {reason}")]
    InvalidRequest {
        /// The run.
        run: RunId,
        /// Why not.
        reason: String,
    },
    /// Another worker holds the run's lease.
    #[error("run {run} is being executed by {owner} (lease until {until:?})")]
    Leased {
        /// The run.
        run: RunId,
        /// The worker holding it.
        owner: String,
        /// Until when.
        until: Timestamp,
    },
    /// This worker lost the run's lease while executing it (another worker claimed it, for
    /// instance after a long pause); it stopped and wrote nothing more.
    #[error("the lease on run {run} was lost while executing it")]
    LeaseLost {
        /// The run.
        run: RunId,
    },
    /// The run is finished or running and cannot be resumed.
    #[error("run {run} cannot be resumed: it is {status:?}")]
    NotResumable {
        /// The run.
        run: RunId,
        /// Its status.
        status: RunStatus,
    },
    /// A runner found no definition to execute the run with: none registered has its hash,
    /// and the resolver (if any) said why it could not build one. The run stays resumable.
    #[error("run {run} of workflow {workflow:?} has no definition to execute it with: {reason}")]
    Unresolved {
        /// The run.
        run: RunId,
        /// The run's workflow.
        workflow: String,
        /// Why no definition was found.
        reason: String,
    },
    /// The run was started from another workflow definition.
    #[error(
        "run {run} is pinned to definition {pinned} of workflow {workflow:?}, but the definition given has hash {given}"
    )]
    DefinitionMismatch {
        /// The run.
        run: RunId,
        /// The workflow.
        workflow: String,
        /// The run's definition hash.
        pinned: ContentHash,
        /// The given definition's hash.
        given: ContentHash,
    },
    /// The interrupt cannot be resolved this way.
    #[error("resolving interrupt {interrupt} of run {run}: {reason}")]
    Resolve {
        /// The run.
        run: RunId,
        /// The interrupt.
        interrupt: InterruptId,
        /// Why not.
        reason: String,
        /// A stable code: `not_found`, `already_resolved`, `access_denied`, `invalid_decision`.
        code: &'static str,
    },
}

impl EngineError {
    pub(crate) fn store(run: RunId) -> impl FnOnce(StoreError) -> Self {
        move |source| match source {
            StoreError::Leased { run, owner, until } => Self::Leased { run, owner, until },
            StoreError::LeaseLost { run, .. } => Self::LeaseLost { run },
            source => Self::Store { run, source },
        }
    }
}
