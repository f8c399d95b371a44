//! Stepwright's HTTP API (DESIGN §13): `stepwright serve`.
//!
//! Another program, in any language, registers workflows, starts runs, streams their events
//! and decides their interrupts over HTTP; a person answers approvals from anywhere. Every
//! request but `/v1/health` and `/v1/openapi.json` carries an API key, which alone fixes
//! the caller's namespace, user and roles; nothing of another namespace is visible (`404`).
//!
//! The server is a host like the command line: it stands on the application layer
//! (`stepwright-app`) and the stores, and several servers and workers share one database.
//! This crate knows HTTP; the engine and the stores know nothing of it.

mod connections;
mod dashboard;
mod destination;
mod feed;
pub mod keys;
mod limits;
mod metrics;
mod oidc;
mod problem;
mod routes;
mod state;
mod webhooks;
mod workers;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::http::{HeaderValue, Method, header};
pub use connections::ConnectionLimits;
pub use destination::DestinationPolicy;
/// A network (`10.1.0.0/16`), as `ServerConfig::webhook_destinations` takes them.
pub use ipnet::IpNet;
pub use keys::{KeyError, NewKey, Role, create_key};
pub use limits::LimitsConfig;
pub use metrics::ServerMetrics;
pub use oidc::{GroupMapping, OidcConfig};
pub use problem::{ApiError, Problem};
use stepwright_app::Bindings;
use stepwright_core::{Engine, Runner};
use stepwright_store::ServerStore;
use tokio_util::sync::CancellationToken;
use tower_http::cors::CorsLayer;

use crate::feed::{Feeds, NudgeFeeds};
use crate::limits::Limits;
use crate::state::Shared;

/// How a server is set up.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Where it listens.
    pub listen: SocketAddr,
    /// How workflow files are bound (models, cassettes).
    pub bindings: Bindings,
    /// Whether this process executes runs (a worker loop, and the runs it starts); without,
    /// separate `stepwright worker` processes do.
    pub worker: bool,
    /// Origins a browser may call from; none: no CORS headers at all.
    pub cors_origins: Vec<String>,
    /// Request limits.
    pub limits: LimitsConfig,
    /// Connection limits: the header deadline, connections per client address.
    pub connections: ConnectionLimits,
    /// How long a shutdown waits for runs in flight before handing their leases back.
    pub drain: Duration,
    /// Sign-in through an OpenID Connect provider, besides API keys.
    pub oidc: Option<OidcConfig>,
    /// How the engine executes runs (durability, leases, waits).
    pub engine: stepwright_core::EngineConfig,
    /// What the process counts, served at `GET /metrics`; none: no `/metrics`.
    pub metrics: Option<Arc<dyn ServerMetrics>>,
    /// Where webhooks may post: public addresses, and the networks this allows.
    pub webhook_destinations: DestinationPolicy,
    /// A bearer token that reads every namespace's metrics at `/metrics` (the operator's
    /// scraper); without it, a namespace admin's key reads its own namespace's only.
    pub metrics_token: Option<String>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            bindings: Bindings::default(),
            worker: true,
            cors_origins: Vec::new(),
            limits: LimitsConfig::default(),
            connections: ConnectionLimits::default(),
            drain: Duration::from_secs(10),
            oidc: None,
            engine: stepwright_core::EngineConfig::default(),
            metrics: None,
            webhook_destinations: DestinationPolicy::default(),
            metrics_token: None,
        }
    }
}

/// Why the server could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The address could not be bound.
    #[error("listening on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A CORS origin is not a valid header value.
    #[error("--cors-origin {0:?} is not an origin")]
    BadOrigin(String),
    /// Serving failed.
    #[error("serving: {0}")]
    Io(#[from] std::io::Error),
}

/// A bound server, ready to serve.
pub struct Server {
    listener: tokio::net::TcpListener,
    app: axum::Router,
    shared: Arc<Shared>,
    config: ServerConfig,
}

impl Server {
    /// Binds the address and builds the routes over the store.
    pub async fn bind(store: Arc<dyn ServerStore>, config: ServerConfig) -> Result<Self, ServeError> {
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .map_err(|source| ServeError::Bind { addr: config.listen, source })?;
        let shutdown = CancellationToken::new();
        let feeds = Arc::new(Feeds::new(store.clone(), shutdown.clone()));
        let name = stepwright_core::local_worker_id("serve", &stepwright_core::SystemEntropy::new());
        let mut engine = stepwright_app::engine_over(&store)
            .worker_id(&name)
            .config(config.engine.clone())
            .observer(Arc::new(NudgeFeeds(feeds.clone())));
        if let Some(metrics) = &config.metrics {
            engine = engine.observer(metrics.observer());
        }
        let engine: Engine = engine.build();
        let limits = Limits::new(config.limits.clone());
        let oidc = config.oidc.clone().map(oidc::Oidc::new);
        let shared = Arc::new(
            Shared::new(store, engine, config.bindings.clone(), config.worker, limits, shutdown, feeds)
                .with_oidc(oidc)
                .with_metrics(config.metrics.clone(), config.metrics_token.clone())
                .with_destinations(config.webhook_destinations.clone()),
        );
        // The dashboard's files are compressed; the API's answers and streams are not (an
        // event must leave at once, not wait for a compressor's block).
        let dashboard = dashboard::router().layer(tower_http::compression::CompressionLayer::new());
        let mut app = routes::router()
            .merge(dashboard)
            .fallback(routes::no_such_path)
            .with_state(shared.clone())
            // The extractors refuse a larger body with a problem document (`too_large`).
            .layer(axum::extract::DefaultBodyLimit::max(config.limits.max_body_bytes));
        if !config.cors_origins.is_empty() {
            let origins = config
                .cors_origins
                .iter()
                .map(|origin| HeaderValue::from_str(origin).map_err(|_| ServeError::BadOrigin(origin.clone())))
                .collect::<Result<Vec<_>, _>>()?;
            app = app.layer(
                CorsLayer::new()
                    .allow_origin(origins)
                    .allow_methods([Method::GET, Method::POST, Method::DELETE])
                    .allow_headers([
                        header::AUTHORIZATION,
                        header::CONTENT_TYPE,
                        "last-event-id".parse().expect("valid"),
                    ]),
            );
        }
        Ok(Self { listener, app, shared, config })
    }

    /// The address it listens on (the port, when `:0` was asked).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `stop` is cancelled: then stops accepting, ends event streams with a
    /// last comment, lets runs in flight finish for the drain time, and returns (a run
    /// still executing keeps its lease, which lapses, and another process takes it over).
    pub async fn serve(self, stop: CancellationToken) -> Result<(), ServeError> {
        let Self { listener, app, shared, config } = self;
        let worker = config.worker.then(|| {
            let resolver = stepwright_app::resolver(shared.store.clone(), config.bindings.clone());
            let mut runner = Runner::new(shared.engine.clone()).resolve_with(resolver);
            if let Some(metrics) = config.metrics.clone() {
                runner = runner.log_to(Arc::new(move |event| metrics.runner_event(&event)));
            }
            let stop_worker = stop.clone();
            // The server's worker also starts the runs of due schedules (each tick once,
            // whichever process decides it first).
            let scheduler =
                stepwright_app::scheduler(shared.engine.clone(), shared.store.clone(), config.bindings.clone())
                    .wake_on(shared.scheduler_wake.clone());
            let stop_scheduler = stop.clone();
            tokio::spawn(async move { scheduler.run(stop_scheduler).await });
            // And it takes up experiments whose server stopped.
            tokio::spawn(routes::experiments::take_up(shared.clone(), stop.clone()));
            tokio::spawn(async move { runner.run(stop_worker).await })
        });
        let hooks = tokio::spawn(webhooks::run(
            shared.store.clone(),
            config.webhook_destinations.clone(),
            config.metrics.clone(),
            stop.clone(),
        ));
        let streams_end = shared.shutdown.clone();
        let stop_serving = stop.clone();
        connections::serve(listener, app, config.connections, async move {
            stop_serving.cancelled().await;
            // Open streams end now (with a comment saying to reconnect), so the graceful
            // shutdown does not wait on them.
            streams_end.cancel();
        })
        .await?;
        if let Some(worker) = worker {
            let _ = tokio::time::timeout(config.drain, worker).await;
            // The runs it stopped sent their tools' process groups SIGTERM: stay until each
            // group is gone or got its SIGKILL, so that none outlives the server.
            stepwright_app::process_groups_stopped(stepwright_app::DEFAULT_KILL_GRACE + Duration::from_secs(1)).await;
        }
        let _ = hooks.await;
        Ok(())
    }
}
