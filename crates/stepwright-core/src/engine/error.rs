//! Errors from engine operations, each saying whether it is the caller's.

use crate::error::Fault;
use crate::error::StepError;
use crate::hash::ContentHash;
use crate::ids::{InterruptId, RunId, Timestamp};
use crate::journal::RunStatus;
use crate::store::StoreError;

/// Errors from engine operations.
// The variants' fields are named for what they hold and the variant's message says how
// they relate; a doc per field would only repeat its name.
#[allow(missing_docs)]
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// The workflow input does not match the workflow's input schema; nothing was created.
    #[error("starting workflow {workflow:?}: {source}")]
    InvalidInput {
        workflow: String,
        /// The validation error.
        #[source]
        source: StepError,
    },
    /// The store failed; the run stopped where the journal ends and can be resumed.
    #[error("the store failed during run {run}")]
    Store {
        run: RunId,
        #[source]
        source: StoreError,
    },
    /// The request does not fit the run (fork at a step it never reached, …).
    #[error("run {run}: {reason}")]
    InvalidRequest {
        run: RunId,
        /// Why not.
        reason: String,
    },
    /// Another worker holds the run's lease.
    #[error("run {run} is being executed by {owner} (lease until {until:?})")]
    Leased {
        run: RunId,
        /// The worker holding it.
        owner: String,
        /// Until when.
        until: Timestamp,
    },
    /// This worker lost the run's lease while executing it (another worker claimed it, for
    /// instance after a long pause); it stopped and wrote nothing more.
    #[error("the lease on run {run} was lost while executing it")]
    LeaseLost { run: RunId },
    /// The run is finished or running and cannot be resumed.
    #[error("run {run} cannot be resumed: it is {}", status.as_str())]
    NotResumable { run: RunId, status: RunStatus },
    /// A runner found no definition to execute the run with: none registered has its hash,
    /// and the resolver (if any) said why it could not build one. The run stays resumable.
    #[error("run {run} of workflow {workflow:?} has no definition to execute it with: {reason}")]
    Unresolved {
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
        run: RunId,
        workflow: String,
        /// The run's definition hash.
        pinned: ContentHash,
        /// The given definition's hash.
        given: ContentHash,
    },
    /// The interrupt cannot be resolved this way.
    #[error("resolving interrupt {interrupt} of run {run}: {reason}")]
    Resolve {
        run: RunId,
        interrupt: InterruptId,
        /// Why not.
        reason: String,
        /// A stable code: `not_found`, `already_resolved`, `access_denied`, `invalid_decision`,
        /// `run_finished`, `not_a_decision` (a timer), `not_a_timer` (a wake of a decision).
        code: &'static str,
    },
}

impl EngineError {
    /// Whose fault it is (see [`Fault`]).
    pub fn fault(&self) -> Fault {
        match self {
            Self::InvalidInput { .. }
            | Self::InvalidRequest { .. }
            | Self::Leased { .. }
            | Self::NotResumable { .. }
            | Self::DefinitionMismatch { .. }
            | Self::Resolve { .. } => Fault::Caller,
            Self::Store { source, .. } => source.fault(),
            Self::LeaseLost { .. } | Self::Unresolved { .. } => Fault::Engine,
        }
    }

    /// A stable code for the error (`docs/error-codes.md`), for machines: what an API
    /// answer carries besides its status.
    pub fn code(&self) -> &'static str {
        match self {
            Self::InvalidInput { .. } => "invalid_input",
            Self::InvalidRequest { .. } => "invalid_request",
            Self::Leased { .. } => "leased",
            Self::LeaseLost { .. } => "lease_lost",
            Self::NotResumable { .. } => "not_resumable",
            Self::Unresolved { .. } => "unresolved",
            Self::DefinitionMismatch { .. } => "definition_mismatch",
            Self::Resolve { code, .. } => code,
            Self::Store { source, .. } => source.code(),
        }
    }

    pub(crate) fn store(run: RunId) -> impl FnOnce(StoreError) -> Self {
        move |source| match source {
            StoreError::Leased { run, owner, until } => Self::Leased { run, owner, until },
            StoreError::LeaseLost { run, .. } => Self::LeaseLost { run },
            // A run that finished between a look at its status and a claim on it.
            StoreError::Finished { run, status } => Self::NotResumable { run, status },
            source => Self::Store { run, source },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::InterruptId;

    /// What front ends map to exit codes and HTTP statuses: the caller's mistakes, with
    /// their stable codes, apart from the engine's failures.
    #[test]
    fn errors_say_whose_fault_they_are() {
        let run = RunId::from_bytes([1; 16]);
        let cases = [
            (EngineError::InvalidRequest { run, reason: "no".into() }, Fault::Caller, "invalid_request"),
            (EngineError::store(run)(StoreError::RunNotFound(run)), Fault::Caller, "not_found"),
            (
                EngineError::Resolve {
                    run,
                    interrupt: InterruptId::new("int_1"),
                    reason: "decided".into(),
                    code: "already_resolved",
                },
                Fault::Caller,
                "already_resolved",
            ),
            (EngineError::store(run)(StoreError::Invalid("bad id".into())), Fault::Caller, "invalid"),
            // A run that finished between a look and a claim cannot be resumed; nobody holds it.
            (
                EngineError::store(run)(StoreError::Finished { run, status: RunStatus::Completed }),
                Fault::Caller,
                "not_resumable",
            ),
            (EngineError::LeaseLost { run }, Fault::Engine, "lease_lost"),
            (EngineError::Unresolved { run, workflow: "w".into(), reason: "gone".into() }, Fault::Engine, "unresolved"),
            (
                EngineError::store(run)(StoreError::Backend { doing: "writing".into(), source: "disk full".into() }),
                Fault::Engine,
                "store_failed",
            ),
        ];
        for (error, fault, code) in cases {
            assert_eq!((error.fault(), error.code()), (fault, code), "{error}");
        }
    }
}
