//! `GET /v1/health` and `GET /v1/openapi.json`: the two routes that need no key.

use std::sync::{Arc, LazyLock};

use axum::Json;
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;

/// Liveness.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct Health {
    /// `ok`.
    pub status: &'static str,
}

/// `GET /v1/health`.
pub(crate) async fn health() -> Json<Health> {
    Json(Health { status: "ok" })
}

/// Built once per process: it depends only on the types.
static DOCUMENT: LazyLock<Arc<Value>> = LazyLock::new(|| Arc::new(crate::openapi::document()));

/// `GET /v1/openapi.json`.
pub(crate) async fn openapi() -> Json<Value> {
    Json((**DOCUMENT).clone())
}
