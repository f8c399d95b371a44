//! Stepwright: a durable engine for AI-agent workflows.
//!
//! This facade is the API boundary a Rust user depends on: one crate, with the rest behind
//! cargo features. The kernel ([`stepwright_core`]: steps, workflows, the engine, the
//! journal and the store seam) is at the root; with the default features come the SQLite
//! store and [`open`] (`sqlite` — `postgres` adds `PostgresStore`), workflow files
//! ([`flow`], `yaml`) and the model layer ([`llm`], `models`); `mcp` adds [`mcp`]; `app`
//! adds [`app`] (what a host does: bindings, a run's details, decide-then-continue) and
//! [`stores`] (every store and the control tables); `server` adds [`server`], the HTTP API.
//!
//! A workflow file run on an SQLite store, with nothing but this crate:
//!
//! ```
//! use std::sync::Arc;
//! use serde_json::json;
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let dir = tempfile::tempdir().unwrap();
//! let store = stepwright::open(&format!("sqlite://{}", dir.path().join("runs.db").display())).await.unwrap();
//! let file = "workflow: greet\nsteps:\n  - id: hello\n    set: \"{{ 'Hello, ' ~ input.name }}\"\n";
//! let loaded = stepwright::flow::load_source(file, "greet.yaml").unwrap();
//! let engine = stepwright::Engine::builder().store(store as Arc<dyn stepwright::Store>).build();
//! let report = engine.start(&loaded.workflow, json!({ "name": "Ada" })).await.unwrap();
//! assert_eq!(report.output, Some(json!("Hello, Ada")));
//! # }
//! ```

pub use stepwright_core::*;
#[cfg(feature = "postgres")]
pub use stepwright_store::PostgresStore;
#[cfg(feature = "sqlite")]
pub use stepwright_store::{AnyStore, OpenError, SqliteOptions, SqliteStore, Synchronous, open, used_bytes};

/// Workflow files: load, validate and compile YAML into workflows (`stepwright-flow`).
#[cfg(feature = "yaml")]
pub mod flow {
    pub use stepwright_flow::*;
}

/// Models, cassettes, tools, and the `llm` and `agent` steps (`stepwright-llm`).
#[cfg(feature = "models")]
pub mod llm {
    pub use stepwright_llm::*;
}

/// MCP servers as tools (`stepwright-mcp`).
#[cfg(feature = "mcp")]
pub mod mcp {
    pub use stepwright_mcp::*;
}

/// The HTTP contract: the API's request, response, event and webhook types and its
/// OpenAPI document (`stepwright-api`), for a Rust client of a Stepwright server.
pub mod api {
    pub use stepwright_api::*;
}

/// The application layer: what every host (the CLI, the server, yours) does the same way
/// (`stepwright-app`).
#[cfg(feature = "app")]
pub mod app {
    pub use stepwright_app::*;
}

/// Schedules: cron and intervals, overlap, catch-up, exactly once per tick
/// (`stepwright-schedule`).
#[cfg(feature = "app")]
pub mod schedule {
    pub use stepwright_schedule::*;
}

/// The stores' backends — SQLite and Postgres, opened by URL — with the control tables a
/// server keeps (`stepwright-store`). The traits they implement are [`store`].
#[cfg(feature = "app")]
pub mod backends {
    pub use stepwright_store::*;
}

/// Logs and OpenTelemetry traces for a process (`stepwright-telemetry`).
#[cfg(feature = "telemetry")]
pub mod telemetry {
    pub use stepwright_telemetry::*;
}

/// The HTTP API of `stepwright serve`, to embed (`stepwright-server`).
#[cfg(feature = "server")]
pub mod server {
    pub use stepwright_server::*;
}
