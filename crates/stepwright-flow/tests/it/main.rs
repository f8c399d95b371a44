//! The file format's integration tests: loading, diagnostics (the corpus), the schema, fuzzing, and files run in an engine.
//!
//! One test binary for the crate: each module is one area (a file per area, as before),
//! linked once instead of once per file.

mod calls;
mod corpus;
mod fuzz;
mod load;
mod loops;
mod parity;
mod resources;
mod schedules;
mod schema;
mod scope;
