//! Injected sources of time and randomness.
//!
//! The executor never reads the system clock or an RNG directly: it asks a [`Clock`] and an
//! [`Entropy`] source. Production uses [`TokioClock`] and [`SystemEntropy`]; tests pause
//! tokio's clock and seed the entropy, so retries, timeouts, sleeps and ids are exact.

use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::future::BoxFuture;

use crate::ids::Timestamp;

/// A source of wall time and of timers.
pub trait Clock: Send + Sync + 'static {
    /// The current time.
    fn now(&self) -> Timestamp;

    /// A future that completes at `deadline` (at once if it has passed).
    fn sleep_until(&self, deadline: Timestamp) -> BoxFuture<'static, ()>;

    /// A future that completes after `duration`.
    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()> {
        self.sleep_until(self.now().plus(duration))
    }
}

/// Wall time anchored to tokio's monotonic clock.
///
/// `now()` is the wall time at construction plus the tokio time elapsed since, so when a test
/// pauses tokio's clock (`#[tokio::test(start_paused = true)]`) every timestamp and timer is
/// exact and a 10-minute backoff takes no real time.
#[derive(Debug, Clone)]
pub struct TokioClock {
    base_wall: Timestamp,
    base_instant: tokio::time::Instant,
}

impl TokioClock {
    /// A clock that starts at the system's wall time.
    pub fn new() -> Self {
        let micros = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
            .unwrap_or(0);
        Self::starting_at(Timestamp::from_micros(micros))
    }

    /// A clock whose `now()` starts at `start` (for exact timestamps in tests).
    pub fn starting_at(start: Timestamp) -> Self {
        Self { base_wall: start, base_instant: tokio::time::Instant::now() }
    }
}

impl Default for TokioClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for TokioClock {
    fn now(&self) -> Timestamp {
        self.base_wall.plus(self.base_instant.elapsed())
    }

    fn sleep_until(&self, deadline: Timestamp) -> BoxFuture<'static, ()> {
        let offset = deadline.since(self.base_wall);
        let at = self.base_instant + offset;
        Box::pin(tokio::time::sleep_until(at))
    }
}

/// A source of random 64-bit words.
pub trait Entropy: Send + Sync + 'static {
    /// The next random word.
    fn next_u64(&self) -> u64;

    /// A float uniformly distributed in `[0, 1)`.
    fn next_f64(&self) -> f64 {
        // 53 random bits make every representable value in [0, 1) equally spaced.
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Ten random bytes (the random part of a UUIDv7).
    fn bytes10(&self) -> [u8; 10] {
        let a = self.next_u64().to_le_bytes();
        let b = self.next_u64().to_le_bytes();
        [a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], b[0], b[1]]
    }
}

/// SplitMix64 over an atomic counter: lock-free, reproducible from its seed.
#[derive(Debug)]
pub struct SeededEntropy {
    state: AtomicU64,
}

impl SeededEntropy {
    /// A generator that always produces the same sequence for the same seed.
    pub fn new(seed: u64) -> Self {
        Self { state: AtomicU64::new(seed) }
    }
}

impl Entropy for SeededEntropy {
    fn next_u64(&self) -> u64 {
        let mut z = self.state.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed).wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// Entropy seeded from the operating system (through std's `RandomState`, which reads the
/// OS generator), so ids from different processes do not collide. Not for cryptography.
#[derive(Debug)]
pub struct SystemEntropy(SeededEntropy);

impl SystemEntropy {
    /// A generator with a fresh OS-provided seed.
    pub fn new() -> Self {
        let seed = std::collections::hash_map::RandomState::new().build_hasher().finish();
        Self(SeededEntropy::new(seed))
    }
}

impl Default for SystemEntropy {
    fn default() -> Self {
        Self::new()
    }
}

impl Entropy for SystemEntropy {
    fn next_u64(&self) -> u64 {
        self.0.next_u64()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_entropy_repeats() {
        let a = SeededEntropy::new(42);
        let b = SeededEntropy::new(42);
        let xs: Vec<u64> = (0..4).map(|_| a.next_u64()).collect();
        let ys: Vec<u64> = (0..4).map(|_| b.next_u64()).collect();
        assert_eq!(xs, ys);
        assert_ne!(xs[0], xs[1]);
        let f = a.next_f64();
        assert!((0.0..1.0).contains(&f));
    }

    #[tokio::test(start_paused = true)]
    async fn paused_clock_is_exact() {
        let clock = TokioClock::starting_at(Timestamp::from_millis(1_000));
        clock.sleep(Duration::from_secs(600)).await;
        assert_eq!(clock.now(), Timestamp::from_millis(601_000));
    }
}
