//! `GET /v1/health` and `GET /v1/openapi.json`: the two routes that need no key.

use std::sync::{Arc, LazyLock};

use axum::Json;
use serde_json::Value;
use stepwright_api::session::Health;

/// `GET /v1/health`.
pub(crate) async fn health() -> Json<Health> {
    Json(Health {
        status: "ok".to_owned(),
        protocols: stepwright_api::session::Protocols { worker: stepwright_api::task::PROTOCOLS.to_vec() },
    })
}

/// Built once per process: it depends only on the contract.
static DOCUMENT: LazyLock<Arc<Value>> = LazyLock::new(|| Arc::new(stepwright_api::openapi::document()));

/// `GET /v1/openapi.json`.
pub(crate) async fn openapi() -> Json<Value> {
    Json((**DOCUMENT).clone())
}
