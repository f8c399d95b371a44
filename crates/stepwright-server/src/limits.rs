//! What one key may take of a server: requests per second (GCRA, with a burst), open event
//! streams, and the size of a request body.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};

use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};

use crate::problem::ApiError;

/// The limits a server applies.
#[derive(Debug, Clone)]
pub struct LimitsConfig {
    /// The largest request body, in bytes.
    pub max_body_bytes: usize,
    /// Requests per second one key may make (its burst is the same number).
    pub requests_per_second: u32,
    /// Event streams one key may hold open at once.
    pub streams_per_key: usize,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self { max_body_bytes: 4 << 20, requests_per_second: 1000, streams_per_key: 1000 }
    }
}

/// The limits, with what each key has used.
pub struct Limits {
    /// As configured.
    pub config: LimitsConfig,
    rate: DefaultKeyedRateLimiter<String>,
    streams: Arc<Mutex<HashMap<String, usize>>>,
}

impl Limits {
    /// Limits as configured, nothing used yet.
    pub fn new(config: LimitsConfig) -> Self {
        let per_second = NonZeroU32::new(config.requests_per_second.max(1)).expect("at least one");
        Self { rate: RateLimiter::keyed(Quota::per_second(per_second)), streams: Arc::default(), config }
    }

    /// `429` if the key has used its requests for now.
    pub fn check_rate(&self, key: &str) -> Result<(), ApiError> {
        self.rate.check_key(&key.to_owned()).map_err(|_| {
            ApiError::too_many(format!(
                "this key made more than {} requests in a second; slow down",
                self.config.requests_per_second
            ))
        })
    }

    /// A stream slot for the key, given back when the guard drops; `429` if it holds its
    /// limit already.
    pub fn open_stream(&self, key: &str) -> Result<StreamSlot, ApiError> {
        let mut streams = self.streams.lock().expect("poisoned");
        let open = streams.entry(key.to_owned()).or_default();
        if *open >= self.config.streams_per_key {
            return Err(ApiError::too_many(format!(
                "this key holds {} event streams open, its limit; close one first",
                self.config.streams_per_key
            )));
        }
        *open += 1;
        Ok(StreamSlot { key: key.to_owned(), streams: self.streams.clone() })
    }
}

/// One open event stream of a key.
pub struct StreamSlot {
    key: String,
    streams: Arc<Mutex<HashMap<String, usize>>>,
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut streams = self.streams.lock().expect("poisoned");
        if let Some(open) = streams.get_mut(&self.key) {
            *open = open.saturating_sub(1);
            if *open == 0 {
                streams.remove(&self.key);
            }
        }
    }
}
