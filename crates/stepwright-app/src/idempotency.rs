//! Idempotent start, the same for every starter (the API's `idempotency_key`, `run
//! --idempotency-key`): the key is claimed for the new run's id before the run is created;
//! a key used before answers with the run it named first.

use std::time::Duration;

use stepwright_core::{RunId, Timestamp};
use stepwright_store::ServerStore;
use stepwright_store::control::IdempotencyClaim;

use crate::AppError;

/// A claim whose run was never stored after this long was abandoned (its starter died
/// between the claim and the run): the key may be taken for a new run.
pub const CLAIM_ABANDONED_AFTER: Duration = Duration::from_secs(10);

/// What an idempotency key says about a start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdempotentStart {
    /// The key is this start's now: create the run with the id offered.
    Fresh,
    /// The key named this run first: answer with it, create nothing.
    First(RunId),
    /// Another start holds the key and is creating its run right now: ask again shortly.
    Starting(RunId),
}

/// Claims `key` in `namespace` for `run` (the id the start will create), as one of any
/// number of racing starts: exactly one gets [`IdempotentStart::Fresh`].
pub async fn claim_start(
    store: &dyn ServerStore,
    namespace: &str,
    key: &str,
    run: RunId,
    now: Timestamp,
) -> Result<IdempotentStart, AppError> {
    if key.is_empty() || key.len() > 255 {
        return Err(AppError::BadInput("an idempotency key must be 1 to 255 characters".into()));
    }
    let (first, at) = match store.claim_idempotency(namespace, key, run, now).await? {
        IdempotencyClaim::Claimed => return Ok(IdempotentStart::Fresh),
        IdempotencyClaim::Taken { run, at } => (run, at),
    };
    // The first start stores its run right after claiming the key: give it a moment.
    for _ in 0..100 {
        if store.load_from(first, u64::MAX).await.is_ok() {
            return Ok(IdempotentStart::First(first));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let abandoned = now.since(at) >= CLAIM_ABANDONED_AFTER;
    if abandoned && store.reclaim_idempotency(namespace, key, first, run, now).await? {
        return Ok(IdempotentStart::Fresh);
    }
    Ok(IdempotentStart::Starting(first))
}
