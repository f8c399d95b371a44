//! `GET /metrics`: what the server's process counts, in the Prometheus text format, for an
//! admin key. The server knows no metrics library: a host gives it a [`ServerMetrics`]
//! (the CLI's is `stepwright-telemetry`'s) that records and renders.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use stepwright_core::{Observer, RunnerEvent};

use crate::keys::{Principal, Role};
use crate::problem::ApiError;
use crate::state::Shared;

/// What a server reports about itself, for a host's metrics.
pub trait ServerMetrics: std::fmt::Debug + Send + Sync + 'static {
    /// The engine observer that records runs, steps and model calls.
    fn observer(&self) -> Arc<dyn Observer>;
    /// What the server's runner reports (claims, queue waits, takeovers).
    fn runner_event(&self, event: &RunnerEvent<'_>);
    /// A webhook delivery attempt ended: `delivered`, `retrying` or `failed`.
    fn webhook_delivery(&self, outcome: &str);
    /// Everything recorded, in the Prometheus text format, with `queue_depth` runs waiting
    /// for a worker now.
    fn prometheus_text(&self, queue_depth: u64) -> String;
}

/// The most pending runs counted for the queue depth: beyond, the gauge says this many.
const QUEUE_COUNTED: usize = 100_000;

/// `GET /metrics` (admin): the Prometheus text format.
pub(crate) async fn scrape(State(shared): State<Arc<Shared>>, who: Principal) -> Result<Response, ApiError> {
    // Counts and workflow names across every tenant of the server: an admin's to read.
    who.require(Role::Admin)?;
    let Some(metrics) = &shared.metrics else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            "this server keeps no metrics (the host gave it none)",
        ));
    };
    let filter = stepwright_core::store::RunFilter {
        status: Some(stepwright_core::RunStatus::Pending),
        limit: Some(QUEUE_COUNTED),
        headers_only: true,
        ..Default::default()
    };
    let pending = shared.store.list_runs(filter).await?;
    let text = metrics.prometheus_text(u64::try_from(pending.len()).unwrap_or(u64::MAX));
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], text).into_response())
}
