//! Stepwright: a durable engine for AI-agent workflows.
//!
//! This facade re-exports what a Rust user needs. Today that is the kernel
//! ([`stepwright_core`]); stores, model adapters and the workflow-file loader join it behind
//! cargo features as they land.

pub use stepwright_core::*;
