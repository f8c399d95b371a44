//! What the model layer's tests share besides the testkit: adapter options for tests.

use std::time::Duration;

/// Adapter options for tests: short backoffs and timeouts.
pub(crate) fn fast_http() -> stepwright_llm::HttpOptions {
    stepwright_llm::HttpOptions {
        timeout: Duration::from_secs(5),
        max_retries: 2,
        initial_backoff: Duration::from_millis(5),
        max_backoff: Duration::from_secs(2),
        requests_per_minute: None,
        tokens_per_minute: None,
    }
}
