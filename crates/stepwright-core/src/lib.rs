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

// Modules in dependency order: each uses only those above it (checked by `layers` below;
// see ARCHITECTURE.md for what each one holds).
mod hash;
mod ids;
mod identity;
mod error;
mod runtime;
pub mod trace;
mod scope;
mod outcome;
mod task;
pub mod journal;
pub mod store;
mod policy;
mod config;
mod services;
mod slots;
mod recording;
mod context;
mod step;
mod definition;
mod engine;
pub mod inspect;

pub use config::{ArtifactCapture, ContentCapture, Durability, EngineConfig};
pub use context::StepContext;
pub use definition::{
    Branch, Every, EveryOnError, Expr, FIELD_ORDER, Fork, ForkMode, Graph, InputSource, LABEL_CHARS, Loop, LoopOnError,
    Mailboxes, Node, OnFailure, OnMaxIterations, Outline, OutlineEdge, OutlineGroup, OutlineLayout, OutlineNode,
    PathResult, Predicate, SchemaError, Verdict, Workflow, WorkflowBuilder, check_schema, with_field_order,
};
pub use engine::owner::{is_dead_local_process, local_worker_id};
pub use engine::{
    AwaitedEvent, DecisionChange, DefinitionResolver, Engine, EngineBuilder, EngineError, ForkPatch, FreshTrial,
    PendingInterrupt, RecomputeOptions, RecomputeReport, RecomputedStep, ReplayReport, ResumeOptions, RunOutcome,
    RunReport, Runner, RunnerEvent, RunnerLog, StartOptions, StepChange, StepComparison, StepFilter, StepReplay,
    json_diff,
};
pub use error::{BuildError, BuildProblem, ErrorCode, Fault, StepError};
pub use hash::ContentHash;
pub use identity::Caller;
pub use ids::{InterruptId, RunId, StepPath, Timestamp, check_step_name};
pub use journal::{CancelRequest, Concurrency, FlowControl, JournalEntry, Lease, Record, RunRecord, RunStatus};
pub use outcome::{
    Approver, Decision, Event, InterruptKind, InterruptRequest, Outcome, OutcomeKind, Resolution, TimeoutAction,
};
pub use policy::{
    ApprovalGate, Backoff, Effect, FnGuardrail, Guardrail, GuardrailAction, GuardrailCheck, GuardrailStage,
    GuardrailVerdict, PatternGuardrail, RetryPolicy,
};
pub use recording::{RecordedEffects, TaskPusher, TaskRequest};
pub use runtime::{Clock, Entropy, SeededEntropy, SystemEntropy, TokioClock};
pub use scope::Scope;
pub use services::{CallInfo, CallKind, MapLayer, Observer, ProvidedLayer, ProvidedLayers, Services, StepStatus};
pub use step::{DynStep, Step, TypedStep, dyn_fn_step, fn_step};
pub use store::bank::{MemoryAddress, MemoryBank, MemoryHit, MemoryItem, MemoryScope, MemorySearch};
pub use store::cache::{InMemoryStepCache, StepCache};
pub use store::session::{SessionAppend, SessionMessage, SessionOwner, SessionStore};
pub use store::{CancelOutcome, InMemoryStore, Store, StoreError};
/// Sessions and the memory bank: the stores' other two seams.
pub use store::{bank, session};
/// The cancellation token steps receive and `Runner::run` stops on.
pub use tokio_util::sync::CancellationToken;

/// Architecture invariant: the modules form layers. Each module (a file, or a directory's
/// files) uses only the modules declared above it in this file, so the order above is the
/// real dependency order and a newcomer can read the core top to bottom.
#[cfg(test)]
mod layers {
    use std::path::Path;

    fn declared_order() -> Vec<String> {
        include_str!("lib.rs")
            .lines()
            .filter_map(|line| line.strip_prefix("pub mod ").or_else(|| line.strip_prefix("mod ")))
            .filter_map(|rest| rest.strip_suffix(';'))
            .map(str::to_owned)
            .collect()
    }

    fn sources(module: &str) -> Vec<String> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let file = root.join(format!("{module}.rs"));
        if file.exists() {
            return vec![std::fs::read_to_string(file).expect("readable")];
        }
        let mut out = Vec::new();
        let mut dirs = vec![root.join(module)];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).expect("a module file or directory") {
                let path = entry.expect("readable").path();
                if path.is_dir() {
                    dirs.push(path);
                } else {
                    out.push(std::fs::read_to_string(path).expect("readable"));
                }
            }
        }
        out
    }

    #[test]
    fn each_module_uses_only_modules_above_it() {
        let order = declared_order();
        assert!(order.len() > 10, "lib.rs declares the modules: {order:?}");
        let mut violations = Vec::new();
        for (rank, module) in order.iter().enumerate() {
            for text in sources(module) {
                for (later_rank, later) in order.iter().enumerate().skip(rank + 1) {
                    if text.contains(&format!("crate::{later}::")) {
                        violations.push(format!("{module} (layer {rank}) uses {later} (layer {later_rank})"));
                    }
                }
            }
        }
        violations.sort();
        violations.dedup();
        assert!(violations.is_empty(), "back-edges between core modules:\n{}", violations.join("\n"));
    }
}
