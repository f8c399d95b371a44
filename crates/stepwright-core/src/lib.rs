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

// Modules in dependency order: each uses only those above it (see ARCHITECTURE.md).
pub mod bank;
mod config;
mod context;
mod definition;
mod engine;
mod error;
mod hash;
mod identity;
mod ids;
pub mod journal;
mod outcome;
mod policy;
mod recording;
mod runtime;
mod scope;
mod services;
pub mod session;
mod step;
pub mod store;

pub use bank::{MemoryAddress, MemoryBank, MemoryHit, MemoryItem, MemoryScope, MemorySearch};
pub use config::{ArtifactCapture, Durability, EngineConfig, InMemoryStepCache, StepCache};
pub use context::StepContext;
pub use definition::{
    Branch, Every, EveryOnError, Expr, Fork, ForkMode, Graph, InputSource, Loop, LoopOnError, Node, OnFailure,
    OnMaxIterations, PathResult, Predicate, Verdict, Workflow, WorkflowBuilder, check_schema,
};
pub use engine::owner::{is_dead_local_process, local_worker_id};
pub use engine::{
    DecisionChange, DefinitionResolver, Engine, EngineBuilder, EngineError, ForkPatch, PendingInterrupt,
    RecomputeOptions, RecomputeReport, RecomputedStep, ReplayReport, ResumeOptions, RunOutcome, RunReport, Runner,
    RunnerEvent, RunnerLog, StartOptions, StepChange, StepComparison, StepReplay, json_diff,
};
pub use error::{BuildError, BuildProblem, ErrorCode, StepError};
pub use hash::ContentHash;
pub use identity::Caller;
pub use ids::{InterruptId, RunId, StepPath, Timestamp, check_step_name};
pub use journal::{CancelRequest, JournalEntry, Lease, Record, RunRecord, RunStatus};
pub use outcome::{Decision, Event, InterruptKind, InterruptRequest, Outcome, OutcomeKind, Resolution, TimeoutAction};
pub use policy::{
    ApprovalGate, Backoff, Effect, FnGuardrail, Guardrail, GuardrailAction, GuardrailCheck, GuardrailStage,
    GuardrailVerdict, PatternGuardrail, RetryPolicy,
};
pub use runtime::{Clock, Entropy, SeededEntropy, SystemEntropy, TokioClock};
pub use scope::Scope;
pub use services::{CallInfo, CallKind, MapLayer, Observer, ProvidedLayer, ProvidedLayers, Services};
pub use session::{SessionAppend, SessionMessage, SessionOwner, SessionStore};
pub use step::{DynStep, Step, Typed, dyn_fn_step, fn_step};
pub use store::{CancelOutcome, InMemoryStore, Store, StoreError};
/// The cancellation token steps receive and `Runner::run` stops on.
pub use tokio_util::sync::CancellationToken;
