//! Stepwright's HTTP contract (DESIGN §13): every request, response, event and webhook
//! payload type of the API, the table of its operations, and the OpenAPI document generated
//! from the two.
//!
//! Architecture invariant: this crate knows nothing of the engine. Its types are views —
//! ids and times are the strings and integers the wire carries, and the closed
//! vocabularies ([`RunStatus`], [`StepStatus`], …) are its own, converted from the kernel's
//! by `stepwright-app`. So the server, the CLI's `--server` mode and any Rust client read
//! and write the same types, and the Python and TypeScript packages are generated from the
//! document they produce.

pub mod experiment;
pub mod history;
pub mod interrupt;
pub mod object;
pub mod openapi;
pub mod operations;
pub mod problem;
pub mod run;
pub mod schedule;
pub mod session;
mod status;
pub mod stream;
pub mod task;
pub mod trigger;
pub mod webhook;
pub mod whole;
pub mod workflow;

pub use history::{RecomputeView, ReplayReport};
pub use interrupt::{DecisionBody, DecisionKind, DecisionTaken, InboxItem};
pub use operations::{Method, Operation, OperationId, operations};
pub use problem::Problem;
pub use run::{
    ErrorView, PendingView, RunDetails, SpanView, StartedBy, StarterKind, StepActivity, StepView, TaskWaitView, Totals,
};
pub use status::{InterruptKind, Role, RunStatus, StepStatus};
