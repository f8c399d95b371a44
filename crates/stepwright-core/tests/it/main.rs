//! The kernel's integration tests: the engine driven through its public API.
//!
//! One test binary for the crate: each module is one area (a file per area, as before),
//! linked once instead of once per file.

mod build;
mod calls;
mod durability;
mod engine;
mod history;
mod inspect;
mod operators;
mod policies;
mod resume;
mod runner;
mod sandbox;
mod steps;
mod workers;
