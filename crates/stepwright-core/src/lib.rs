//! The Stepwright kernel: typed steps, outcomes, policies, operators and the executor.
//!
//! A workflow is a tree of [`Node`]s (steps and operators) built with [`Workflow::builder`]
//! and checked when built. An [`Engine`] runs it against a [`Store`]; every step execution is
//! journaled through one recording point, so a run can stop anywhere and be resumed with
//! the same result.
//!
//! ```
//! use stepwright_core::{Engine, Node, Workflow, fn_step};
//! use serde_json::json;
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let workflow = Workflow::builder("double-then-add")
//!     .step(Node::step("double", fn_step(|_ctx, n: u64| async move { Ok(n * 2) })))
//!     .step(Node::step("add", fn_step(|_ctx, n: u64| async move { Ok(n + 1) })))
//!     .build()
//!     .unwrap();
//! let report = Engine::default().start(&workflow, json!(20)).await.unwrap();
//! assert_eq!(report.output, Some(json!(41)));
//! # }
//! ```
//!
//! This crate knows no SQL, no HTTP and no YAML.

pub mod bank;
pub mod context;
pub mod definition;
pub mod engine;
pub mod error;
pub mod hash;
pub mod ids;
pub mod journal;
pub mod outcome;
pub mod policy;
pub mod runtime;
pub mod scope;
pub mod session;
pub mod step;

pub use bank::{MemoryAddress, MemoryBank, MemoryHit, MemoryItem, MemoryScope, MemorySearch};
pub use context::{CallInfo, CallKind, Caller, InMemoryLayer, Memory, MemoryLayer, Observer, Services, StepContext};
pub use definition::{
    Branch, Every, EveryOnError, Expr, Fork, ForkMode, Graph, InputSource, Loop, LoopOnError, Node, OnMaxIterations,
    PathResult, Predicate, Verdict, Workflow, WorkflowBuilder, check_schema,
};
pub use engine::{
    ArtifactCapture, DecisionChange, DefinitionResolver, Durability, Engine, EngineBuilder, EngineConfig, EngineError,
    ForkPatch, MemoryCache, PendingInterrupt, RecomputeOptions, RecomputeReport, RecomputedStep, ReplayReport,
    ResumeOptions, RunOutcome, RunReport, Runner, RunnerEvent, RunnerLog, StartOptions, StepCache, StepChange,
    StepComparison, StepReplay, json_diff,
};
pub use error::{BuildError, BuildProblem, ErrorCode, StepError};
pub use hash::ContentHash;
pub use ids::{InterruptId, RunId, StepPath, Timestamp};
pub use journal::{
    CancelOutcome, CancelRequest, JournalEntry, Lease, MemoryStore, Record, RunRecord, RunStatus, Store, StoreError,
};
pub use outcome::{Decision, Event, InterruptKind, InterruptRequest, Outcome, OutcomeKind, Resolution, TimeoutAction};
pub use policy::{
    ApprovalGate, Backoff, Effect, FnGuardrail, Guardrail, GuardrailAction, GuardrailCheck, GuardrailStage,
    GuardrailVerdict, OnFailure, PatternGuardrail, RetryPolicy,
};
pub use runtime::{Clock, Entropy, SeededEntropy, SystemEntropy, TokioClock};
pub use scope::Scope;
pub use session::{SessionAppend, SessionMessage, SessionOwner, SessionStore};
pub use step::{DynStep, Step, Typed, dyn_fn_step, fn_step};
/// The cancellation token steps receive and `Runner::run` stops on.
pub use tokio_util::sync::CancellationToken;
