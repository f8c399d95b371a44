//! Durable stores for Stepwright.
//!
//! [`SqliteStore`] is the embedded default: one file, WAL, one writer thread that commits
//! many runs' entries in one transaction (group commit), a pool of read connections. The
//! `conformance` module (feature `conformance`) is the suite every `Store` backend must
//! pass; this crate's tests run it against the memory store, SQLite and (with the `postgres` feature and a database
//! to reach) Postgres.
//!
//! This crate knows SQL and files; it knows nothing of workflows beyond the journal types
//! of `stepwright-core`, and nothing of HTTP or YAML.

#[cfg(feature = "conformance")]
pub mod conformance;
pub mod control;
mod encoding;
mod open;
#[cfg(feature = "postgres")]
pub mod postgres;
pub mod sqlite;

pub use control::ServerStore;
pub use open::{AnyStore, OpenError, open};
#[cfg(feature = "postgres")]
pub use postgres::{GroupCommitStats, PostgresStore};
pub use sqlite::{SqliteOptions, SqliteStore, Synchronous, used_bytes};
