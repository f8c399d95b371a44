//! `GET /metrics`: what the server's process counts, in the Prometheus text format. The
//! server knows no metrics library: a host gives it a [`ServerMetrics`] (the CLI's is
//! `stepwright-telemetry`'s) that records and renders.
//!
//! Tenancy holds here as on every endpoint: each series about runs carries the namespace
//! they were started in (`stepwright_namespace`), and a namespace admin's key reads only its
//! namespace's series. The whole set — every namespace, and the process's own series (claim
//! latency, take-overs) — is for the server's operator: a scraper that presents the token
//! `serve --metrics-token-env VAR` names.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use stepwright_core::{Observer, RunnerEvent};

/// What a server reports about itself, for a host's metrics.
pub trait ServerMetrics: std::fmt::Debug + Send + Sync + 'static {
    /// The engine observer that records runs, steps and model calls.
    fn observer(&self) -> Arc<dyn Observer>;
    /// What the server's runner reports (claims, queue waits, takeovers).
    fn runner_event(&self, event: &RunnerEvent<'_>);
    /// A webhook delivery attempt of `namespace` ended: `delivered`, `retrying` or `failed`.
    fn webhook_delivery(&self, namespace: &str, outcome: &str);
    /// Everything recorded, in the Prometheus text format, with each namespace's runs
    /// waiting for a worker now (`namespace`, `runs`; `""` for runs started without one).
    fn prometheus_text(&self, queue_depths: &[(String, u64)]) -> String;
}

/// The most pending runs counted for the queue depth: beyond, the gauges stop counting.
pub(crate) const QUEUE_COUNTED: usize = 100_000;

/// The Prometheus label every series about runs carries.
const NAMESPACE_LABEL: &str = "stepwright_namespace";

/// Namespaces whose queue depth was reported before: reported again (as 0) when their
/// queue empties, so that the gauge does not keep its last value.
#[derive(Debug, Default)]
pub(crate) struct QueuesSeen(pub(crate) Mutex<BTreeSet<String>>);

/// Compares a presented secret with the configured one in time independent of where they
/// differ.
pub(crate) fn same_secret(given: &str, expected: &str) -> bool {
    let (given, expected) = (given.as_bytes(), expected.as_bytes());
    given.len() == expected.len() && given.iter().zip(expected).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
}

/// The exposition text with only `namespace`'s samples (and the `# HELP` / `# TYPE` lines,
/// which name metrics, not tenants' data).
pub(crate) fn only_namespace(text: &str, namespace: &str) -> String {
    let escaped = namespace.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n");
    let wanted = format!("{NAMESPACE_LABEL}=\"{escaped}\"");
    let mut kept = String::with_capacity(text.len() / 2);
    for line in text.lines() {
        let keep = line.starts_with('#') || sample_has_label(line, &wanted);
        if keep {
            kept.push_str(line);
            kept.push('\n');
        }
    }
    kept
}

/// Whether a sample line's label set has exactly `label="value"` (not as a prefix of a
/// longer value, not inside another label's value).
fn sample_has_label(line: &str, wanted: &str) -> bool {
    let Some(open) = line.find('{') else { return false };
    let labels = &line[open + 1..];
    let mut rest = labels;
    while let Some(at) = rest.find(wanted) {
        let before = &labels[..labels.len() - rest.len() + at];
        let after = &rest[at + wanted.len()..];
        let at_label_start = before.is_empty() || before.ends_with(',');
        // Inside a quoted value, an odd number of unescaped quotes precede it.
        let quotes = before.matches('"').count() - before.matches("\\\"").count();
        if at_label_start && quotes.is_multiple_of(2) && (after.starts_with(',') || after.starts_with('}')) {
            return true;
        }
        rest = &rest[at + wanted.len()..];
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"# HELP stepwright_runs_finished_total Runs that ended.
# TYPE stepwright_runs_finished_total counter
stepwright_runs_finished_total{stepwright_namespace="acme",stepwright_run_status="completed",stepwright_workflow="a"} 3
stepwright_runs_finished_total{stepwright_namespace="acme-eu",stepwright_run_status="completed",stepwright_workflow="b"} 5
stepwright_runs_finished_total{stepwright_run_status="completed",stepwright_workflow="x",stepwright_namespace="globex"} 7
stepwright_runs_finished_total{stepwright_workflow="stepwright_namespace=\"acme\"",stepwright_namespace="globex"} 1
# HELP stepwright_claim_latency_seconds How long new runs waited.
stepwright_claim_latency_seconds_count 4
target_info{service_name="stepwright"} 1
"#;

    #[test]
    fn a_namespace_sees_only_its_own_samples() {
        let acme = only_namespace(TEXT, "acme");
        let samples: Vec<&str> = acme.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(samples.len(), 1, "{acme}");
        assert!(samples[0].ends_with("} 3"), "{acme}");
        let globex = only_namespace(TEXT, "globex");
        assert_eq!(globex.lines().filter(|l| !l.starts_with('#')).count(), 2, "{globex}");
        assert!(!globex.contains("target_info") && !globex.contains("claim_latency_seconds_count"));
        assert_eq!(only_namespace(TEXT, "initech").lines().filter(|l| !l.starts_with('#')).count(), 0);
    }

    #[test]
    fn secrets_compare_whole() {
        assert!(same_secret("s3cret-token", "s3cret-token"));
        assert!(!same_secret("s3cret-toke", "s3cret-token"));
        assert!(!same_secret("s3cret-tokex", "s3cret-token"));
    }
}
