//! The stores' integration tests: the conformance suite on every backend, and each backend's own behaviour (faults, corruption, processes, pragmas).
//!
//! One test binary for the crate: each module is one area (a file per area, as before),
//! linked once instead of once per file.

mod conformance;
mod postgres;
mod sqlite;
