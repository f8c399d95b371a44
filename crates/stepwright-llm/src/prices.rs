//! The price table: list prices of the providers' current models, versioned, for bindings
//! whose file gives no `pricing`. A cost is computed once, at the call, with the prices in
//! force then, and journaled with the call (with where its prices came from), so the
//! dashboard, `runs show`, a recompute's delta and the exported spans read the same figure
//! and a later change of this table never rewrites history.

use serde::{Deserialize, Serialize};

use crate::provider::Provider;
use crate::types::Usage;

/// Prices in US dollars per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pricing {
    /// Per million prompt tokens not served from (or written to) the provider's cache.
    pub input: f64,
    /// Per million generated tokens.
    pub output: f64,
    /// Per million prompt tokens read from the provider's cache (`input` when not given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read: Option<f64>,
    /// Per million prompt tokens written to the provider's cache (`input` when not given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write: Option<f64>,
}

impl Pricing {
    /// Input and output prices, cached tokens at the input price.
    pub fn per_million(input: f64, output: f64) -> Self {
        Self { input, output, cache_read: None, cache_write: None }
    }

    /// What a call cost: the prompt's cached parts at their prices, the rest at `input`.
    pub fn cost(&self, usage: Usage) -> f64 {
        let cached = usage.cache_read_input_tokens + usage.cache_creation_input_tokens;
        let uncached = usage.input_tokens.saturating_sub(cached);
        (uncached as f64 * self.input
            + usage.cache_read_input_tokens as f64 * self.cache_read.unwrap_or(self.input)
            + usage.cache_creation_input_tokens as f64 * self.cache_write.unwrap_or(self.input)
            + usage.output_tokens as f64 * self.output)
            / 1_000_000.0
    }
}

/// The table's version: the date its prices were read from the providers' price pages.
pub const PRICE_TABLE_VERSION: &str = "2026-11-01";

/// `(provider, model id prefix, input, output, cache read, cache write)`, US dollars per
/// million tokens. A model id matches its longest prefix here (providers append dates:
/// `claude-sonnet-4-5-20250929`, `gpt-4o-mini-2024-07-18`).
const TABLE: &[(Provider, &str, f64, f64, f64, f64)] = &[
    // OpenAI: cached input at its discount; writing the cache costs nothing extra.
    (Provider::Openai, "gpt-5", 1.25, 10.0, 0.125, 1.25),
    (Provider::Openai, "gpt-5-mini", 0.25, 2.0, 0.025, 0.25),
    (Provider::Openai, "gpt-5-nano", 0.05, 0.40, 0.005, 0.05),
    (Provider::Openai, "gpt-4.1", 2.0, 8.0, 0.50, 2.0),
    (Provider::Openai, "gpt-4.1-mini", 0.40, 1.60, 0.10, 0.40),
    (Provider::Openai, "gpt-4.1-nano", 0.10, 0.40, 0.025, 0.10),
    (Provider::Openai, "gpt-4o", 2.50, 10.0, 1.25, 2.50),
    (Provider::Openai, "gpt-4o-mini", 0.15, 0.60, 0.075, 0.15),
    (Provider::Openai, "o3", 2.0, 8.0, 0.50, 2.0),
    (Provider::Openai, "o4-mini", 1.10, 4.40, 0.275, 1.10),
    // Anthropic: cache reads at a tenth of input, five-minute cache writes at 1.25×.
    (Provider::Anthropic, "claude-opus-4", 15.0, 75.0, 1.50, 18.75),
    (Provider::Anthropic, "claude-opus-4-5", 5.0, 25.0, 0.50, 6.25),
    (Provider::Anthropic, "claude-sonnet-4", 3.0, 15.0, 0.30, 3.75),
    (Provider::Anthropic, "claude-haiku-4-5", 1.0, 5.0, 0.10, 1.25),
    (Provider::Anthropic, "claude-3-5-haiku", 0.80, 4.0, 0.08, 1.0),
];

/// The list price of a provider's model, if the table has it.
pub fn list_price(provider: Provider, model: &str) -> Option<Pricing> {
    TABLE
        .iter()
        .filter(|(p, prefix, ..)| *p == provider && model.starts_with(prefix))
        .max_by_key(|(_, prefix, ..)| prefix.len())
        .map(|&(_, _, input, output, read, write)| Pricing {
            input,
            output,
            cache_read: Some(read),
            cache_write: Some(write),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Usage;

    #[test]
    fn a_model_id_takes_its_longest_prefix_and_unknown_models_have_no_price() {
        let mini = list_price(Provider::Openai, "gpt-4o-mini-2024-07-18").unwrap();
        assert_eq!((mini.input, mini.output), (0.15, 0.60), "gpt-4o-mini, not gpt-4o");
        let sonnet = list_price(Provider::Anthropic, "claude-sonnet-4-5-20250929").unwrap();
        assert_eq!((sonnet.input, sonnet.cache_read, sonnet.cache_write), (3.0, Some(0.30), Some(3.75)));
        assert_eq!(list_price(Provider::Openai, "llama3"), None);
        assert_eq!(list_price(Provider::Anthropic, "gpt-4o"), None, "prices are per provider");
    }

    #[test]
    fn cached_tokens_are_priced_apart_from_the_rest_of_the_prompt() {
        let sonnet = list_price(Provider::Anthropic, "claude-sonnet-4-5").unwrap();
        // 1,210 prompt tokens: 10 uncached, 1,000 read from the cache, 200 written to it.
        let usage = Usage {
            input_tokens: 1210,
            output_tokens: 5,
            cache_read_input_tokens: 1000,
            cache_creation_input_tokens: 200,
        };
        let expected = (10.0 * 3.0 + 1000.0 * 0.30 + 200.0 * 3.75 + 5.0 * 15.0) / 1e6;
        assert!((sonnet.cost(usage) - expected).abs() < 1e-12, "{} vs {expected}", sonnet.cost(usage));
        // Without cache prices, cached tokens cost what the rest of the prompt does.
        let flat = Pricing::per_million(3.0, 15.0);
        assert!((flat.cost(usage) - (1210.0 * 3.0 + 5.0 * 15.0) / 1e6).abs() < 1e-12);
    }
}
