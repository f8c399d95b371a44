//! Opening a store from a URL: what every host (the CLI, a server, a Rust program) does the
//! same way, so that `sqlite://…` and `postgres://…` mean one thing everywhere.

use std::sync::Arc;

use stepwright_core::store::event::EventStore;
use stepwright_core::store::quota::QuotaStore;
use stepwright_core::store::schedule::ScheduleStore;
use stepwright_core::{MemoryBank, SessionStore, StepCache, Store, StoreError};

/// A store with everything steps use: the journal ([`Store`]), sessions
/// ([`SessionStore`]), the memory bank ([`MemoryBank`]), shared quotas ([`QuotaStore`])
/// the step cache ([`StepCache`]), schedules and triggers ([`ScheduleStore`]) and the event
/// log ([`EventStore`]). Every backend here is one.
pub trait AnyStore: Store + SessionStore + MemoryBank + QuotaStore + StepCache + ScheduleStore + EventStore {}

impl<T: Store + SessionStore + MemoryBank + QuotaStore + StepCache + ScheduleStore + EventStore> AnyStore for T {}

/// Why a store could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// The URL names no backend this build has: the caller's mistake.
    #[error("{url:?} is not a store URL: expected sqlite://PATH or postgres://…")]
    UnknownScheme {
        /// The URL given.
        url: String,
    },
    /// The backend is known but could not be opened (a file that cannot be created, a
    /// database that does not answer).
    #[error("opening {url}")]
    Backend {
        /// The URL given (for Postgres, without its password).
        url: String,
        /// Why.
        #[source]
        source: StoreError,
    },
}

/// Opens the store a URL names, with the control tables a server keeps beside the runs: `sqlite://PATH` (created if missing; a relative path is
/// relative to the working directory) or `postgres://…` / `postgresql://…` (with the
/// `postgres` feature).
pub async fn open(url: &str) -> Result<Arc<dyn crate::ServerStore>, OpenError> {
    if let Some(path) = url.strip_prefix("sqlite://") {
        let store =
            crate::SqliteStore::open(path).map_err(|source| OpenError::Backend { url: url.to_owned(), source })?;
        return Ok(Arc::new(store));
    }
    #[cfg(feature = "postgres")]
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        let store = crate::PostgresStore::connect(url)
            .await
            .map_err(|source| OpenError::Backend { url: without_password(url), source })?;
        return Ok(Arc::new(store));
    }
    Err(OpenError::UnknownScheme { url: url.to_owned() })
}

/// A Postgres URL fit for messages: `postgres://user:secret@host/db` → `postgres://user@host/db`.
#[cfg(feature = "postgres")]
fn without_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_owned() };
    match rest.split_once('@') {
        Some((credentials, host)) => {
            let user = credentials.split(':').next().unwrap_or_default();
            format!("{scheme}://{user}@{host}")
        }
        None => url.to_owned(),
    }
}

#[cfg(all(test, feature = "postgres"))]
mod tests {
    #[test]
    fn passwords_stay_out_of_messages() {
        assert_eq!(super::without_password("postgres://ann:s3cret@db:5432/runs"), "postgres://ann@db:5432/runs");
        assert_eq!(super::without_password("postgres://db/runs"), "postgres://db/runs");
    }
}
