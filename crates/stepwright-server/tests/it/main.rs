//! The HTTP API end to end: a real server on loopback over a real SQLite store, driven by a
//! real HTTP client (reqwest) and read by an independent SSE parser (eventsource-stream).

mod api;
mod connections;
mod dashboard;
mod experiments;
mod hooks;
mod interrupts;
mod links;
mod openapi;
mod schedules;
mod session;
mod streams;
mod tags;
mod triggers;

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use stepwright_server::{LimitsConfig, Server, ServerConfig};
use stepwright_store::ServerStore;
use tokio_util::sync::CancellationToken;

/// A server on a free loopback port over a fresh SQLite store.
pub(crate) struct TestServer {
    /// `http://127.0.0.1:PORT`.
    pub(crate) base: String,
    /// The store it serves (for keys and for reading what it wrote).
    pub(crate) store: Arc<dyn ServerStore>,
    stop: CancellationToken,
    /// A client.
    pub(crate) http: reqwest::Client,
    _dir: tempfile::TempDir,
    task: tokio::task::JoinHandle<()>,
}

impl TestServer {
    /// With the default configuration.
    pub(crate) async fn start() -> Self {
        Self::start_with(|_| {}).await
    }

    /// With a configuration changed first.
    pub(crate) async fn start_with(configure: impl FnOnce(&mut ServerConfig)) -> Self {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("api.db").display());
        let store = stepwright_store::open(&url).await.unwrap();
        let mut config = ServerConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            limits: LimitsConfig::default(),
            // The tests' webhook receivers listen on loopback, as an intranet receiver would
            // on an allowed network; `hooks.rs` checks the default refuses them.
            webhook_destinations: stepwright_server::DestinationPolicy::allowing(vec!["127.0.0.0/8".parse().unwrap()]),
            ..ServerConfig::default()
        };
        configure(&mut config);
        let server = Server::bind(store.clone(), config).await.unwrap();
        let base = format!("http://{}", server.local_addr().unwrap());
        let stop = CancellationToken::new();
        let task = tokio::spawn({
            let stop = stop.clone();
            async move { server.serve(stop).await.unwrap() }
        });
        Self { base, store, stop, http: reqwest::Client::new(), _dir: dir, task }
    }

    /// A key with these roles (the secret).
    pub(crate) async fn key(&self, namespace: &str, user: &str, roles: &[&str]) -> String {
        let roles: Vec<String> = roles.iter().map(|r| (*r).to_owned()).collect();
        let now = stepwright_core::Timestamp::from_micros(0);
        stepwright_server::create_key(self.store.as_ref(), namespace, user, &roles, None, now).await.unwrap().secret
    }

    /// `GET`: status and body.
    pub(crate) async fn get(&self, key: &str, path: &str) -> (u16, Value) {
        let response = self.http.get(format!("{}{path}", self.base)).bearer_auth(key).send().await.unwrap();
        answer(response).await
    }

    /// `POST` a JSON body: status and body.
    pub(crate) async fn post(&self, key: &str, path: &str, body: Value) -> (u16, Value) {
        let response =
            self.http.post(format!("{}{path}", self.base)).bearer_auth(key).json(&body).send().await.unwrap();
        answer(response).await
    }

    /// Registers a workflow source with an admin key of the namespace.
    pub(crate) async fn register(&self, admin: &str, source: &str) -> Value {
        let (status, body) = self.post(admin, "/v1/workflows", json!({ "source": source })).await;
        assert!(status == 201 || status == 200, "{status} {body}");
        body
    }

    /// Stops it gracefully and waits until it has.
    pub(crate) async fn shutdown(self) {
        self.stop.cancel();
        tokio::time::timeout(Duration::from_secs(20), self.task).await.expect("stops").unwrap();
    }
}

/// The status and JSON body; a problem document is checked for its content type and
/// fields on the way.
pub(crate) async fn answer(response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    let content_type = response.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
    let body: Value = response.json().await.unwrap_or(Value::Null);
    if status >= 400 {
        assert_eq!(content_type, "application/problem+json", "{status} {body}");
        assert!(body["code"].is_string() && body["title"].is_string() && body["detail"].is_string(), "{body}");
        assert_eq!(body["status"], json!(status));
    }
    (status, body)
}

/// A three-step workflow with an approval in the middle that only approvers may decide.
pub(crate) const APPROVAL: &str = r#"
workflow: greet
input: { type: object, required: [name], properties: { name: { type: string } } }
steps:
  - id: hello
    set: "{{ 'Hello, ' ~ input.name }}"
  - id: ok
    approval:
      message: "Send it?"
      approvers: ["role:approver"]
  - id: shout
    set: "{{ steps.hello.output ~ '!' }}"
"#;

/// Three `set` steps: what the benchmark starts.
pub(crate) const THREE_SETS: &str = r#"
workflow: three
steps:
  - id: a
    set: "{{ input }}"
  - id: b
    set: "{{ steps.a.output }}"
  - id: c
    set: "{{ steps.b.output }}"
"#;
