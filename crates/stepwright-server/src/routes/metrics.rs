//! `GET /metrics`: what this server's process counts, in the Prometheus text format.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{FromRequestParts, Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::keys::{Principal, Role};
use crate::metrics::{QUEUE_COUNTED, only_namespace, same_secret};
use crate::problem::ApiError;
use crate::state::Shared;

/// `GET /metrics`: the whole set for the operator's token, a namespace admin's own series
/// for an admin key.
pub(crate) async fn scrape(State(shared): State<Arc<Shared>>, request: Request) -> Result<Response, ApiError> {
    let (mut parts, _) = request.into_parts();
    let operator = shared.metrics_token.as_deref().is_some_and(|token| {
        let presented = parts.headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
        presented.and_then(|v| v.strip_prefix("Bearer ")).is_some_and(|given| same_secret(given.trim(), token))
    });
    let namespace = if operator {
        None
    } else {
        let who = Principal::from_request_parts(&mut parts, &shared).await?;
        who.require(Role::Admin)?;
        Some(who.namespace().to_owned())
    };
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
    let mut depths: BTreeMap<String, u64> = BTreeMap::new();
    for run in shared.store.list_runs(filter).await? {
        *depths.entry(run.caller.tenant.unwrap_or_default()).or_default() += 1;
    }
    {
        let mut seen = shared.queues_seen.0.lock().expect("poisoned");
        for namespace in seen.iter() {
            depths.entry(namespace.clone()).or_default();
        }
        seen.extend(depths.keys().cloned());
    }
    let depths: Vec<(String, u64)> = depths.into_iter().collect();
    let text = metrics.prometheus_text(&depths);
    let text = match &namespace {
        None => text,
        Some(namespace) => only_namespace(&text, namespace),
    };
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], text).into_response())
}
