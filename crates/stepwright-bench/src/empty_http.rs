//! The floor for the HTTP API benchmarks: an axum server whose one route reads a JSON body
//! and answers a small JSON document, with no store and no engine. What the machine does
//! without Stepwright under the same load (BENCHMARKS.md). Usage: `empty-http ADDR`.

use axum::Json;
use axum::routing::post;
use serde_json::{Value, json};

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let addr = std::env::args().nth(1).unwrap_or_else(|| "127.0.0.1:18090".into());
    let app = axum::Router::new().route(
        "/v1/runs",
        post(|Json(body): Json<Value>| async move {
            Json(json!({ "run_id": "0", "status": "completed", "output": body["input"] }))
        }),
    );
    let listener = tokio::net::TcpListener::bind(&addr).await.expect("bind");
    axum::serve(listener, app).await.expect("serve");
}
