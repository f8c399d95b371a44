//! Quotas shared by every process on a store: a model provider's requests or tokens per
//! minute, counted in one place, so that forty workers do not each believe they own the
//! provider's whole quota.
//!
//! A quota is counted in fixed windows (a second for requests, so that a minute's quota is
//! never spent in one burst; a minute for tokens). Taking from a quota is one atomic write:
//! it succeeds if what the window has used plus the amount fits, else it says how long until
//! the next window. The window is on the store's clock (Postgres: the database's), so every
//! process agrees on it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use futures_util::future::BoxFuture;

use super::StoreError;
use crate::ids::Timestamp;

/// What taking from a quota did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuotaTaken {
    /// Taken.
    Granted,
    /// The window is full: ask again after this long (when the next window starts).
    Full {
        /// Until the next window.
        retry_in: Duration,
    },
}

/// A quota: at most `limit` per `window`, under a name every process uses for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quota {
    /// The quota's name (a provider and a fingerprint of its key, never the key).
    pub name: String,
    /// How much one window holds.
    pub limit: u64,
    /// The window's length.
    pub window: Duration,
}

/// The quota counters of a store.
pub trait QuotaStore: Send + Sync {
    /// Takes `amount` from the current window of `quota` if it fits (an amount of 0 asks
    /// whether the window still has room, taking nothing).
    fn take_quota<'a>(&'a self, quota: &'a Quota, amount: u64) -> BoxFuture<'a, Result<QuotaTaken, StoreError>>;

    /// Adds `amount` to the current window of `quota` whatever it holds: what a call used
    /// that is known only after it (a model call's tokens).
    fn charge_quota<'a>(&'a self, quota: &'a Quota, amount: u64) -> BoxFuture<'a, Result<(), StoreError>>;
}

/// The start of the window `now` falls in, and how long until the next.
pub fn window_of(now: Timestamp, window: Duration) -> (i64, Duration) {
    let length = i64::try_from(window.as_micros()).unwrap_or(i64::MAX).max(1);
    let start = now.as_micros().div_euclid(length) * length;
    let left = u64::try_from(start + length - now.as_micros()).unwrap_or(0);
    (start, Duration::from_micros(left))
}

/// The system's wall time.
pub fn wall_now() -> Timestamp {
    let micros = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
        .unwrap_or(0);
    Timestamp::from_micros(micros)
}

/// Quotas counted in this process only: the default of a host without a shared store, and
/// the in-memory store's.
#[derive(Debug, Default)]
pub struct LocalQuotas {
    /// By quota name: the current window's start and what it used.
    windows: Mutex<HashMap<String, (i64, u64)>>,
}

impl LocalQuotas {
    /// Takes or charges on this process's clock.
    fn apply(&self, quota: &Quota, amount: u64, always: bool) -> QuotaTaken {
        let (start, left) = window_of(wall_now(), quota.window);
        let mut windows = self.windows.lock().expect("poisoned");
        let used = windows.entry(quota.name.clone()).or_insert((start, 0));
        if used.0 != start {
            *used = (start, 0);
        }
        let fits = if amount == 0 { used.1 < quota.limit } else { used.1 + amount <= quota.limit };
        if always || fits {
            used.1 += amount;
            QuotaTaken::Granted
        } else {
            QuotaTaken::Full { retry_in: left }
        }
    }
}

impl QuotaStore for LocalQuotas {
    fn take_quota<'a>(&'a self, quota: &'a Quota, amount: u64) -> BoxFuture<'a, Result<QuotaTaken, StoreError>> {
        Box::pin(std::future::ready(Ok(self.apply(quota, amount, false))))
    }

    fn charge_quota<'a>(&'a self, quota: &'a Quota, amount: u64) -> BoxFuture<'a, Result<(), StoreError>> {
        self.apply(quota, amount, true);
        Box::pin(std::future::ready(Ok(())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_are_aligned_and_say_what_is_left() {
        let second = Duration::from_secs(1);
        let (start, left) = window_of(Timestamp::from_micros(5_250_000), second);
        assert_eq!((start, left), (5_000_000, Duration::from_millis(750)));
        let (start, left) = window_of(Timestamp::from_micros(6_000_000), second);
        assert_eq!((start, left), (6_000_000, second));
    }

    #[test]
    fn a_window_grants_up_to_its_limit() {
        let quotas = LocalQuotas::default();
        let quota = Quota { name: "q".into(), limit: 3, window: Duration::from_secs(3600) };
        let taken: Vec<QuotaTaken> = (0..4).map(|_| quotas.apply(&quota, 1, false)).collect();
        assert_eq!(&taken[..3], &[QuotaTaken::Granted; 3]);
        assert!(matches!(taken[3], QuotaTaken::Full { retry_in } if retry_in <= Duration::from_secs(3600)));
        assert!(matches!(quotas.apply(&quota, 0, false), QuotaTaken::Full { .. }), "asking takes nothing, and is full");
    }
}
