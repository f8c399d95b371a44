//! What every request handler shares: the store, the engine, the bindings, the compiled
//! workflows, the keys recently seen, and the run feeds.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use stepwright_app::{Bindings, Servers};
use stepwright_core::journal::DefinitionSource;
use stepwright_core::{Clock, Engine, Timestamp, Workflow};
use stepwright_store::ServerStore;
use stepwright_store::control::{ApiKey, RegisteredWorkflow};
use tokio_util::sync::CancellationToken;

use crate::feed::Feeds;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{Method, header};

use crate::keys::{CSRF_HEADER, Principal, SESSION_COOKIE, cookie, link_scope, secret_hash};
use crate::limits::Limits;
use crate::problem::ApiError;

/// How long a key read from the store is trusted before it is read again: a key revoked
/// anywhere (another server, `keys revoke` on the store) is refused by every server within
/// this. One indexed read per key per second under load.
const KEY_CACHE_FOR: Duration = Duration::from_secs(1);

/// How long "the newest version of a workflow" is trusted before it is read again.
const NEWEST_CACHED_FOR: Duration = Duration::from_secs(1);

/// A key's use is written to the store at most this often.
const TOUCH_EVERY: Duration = Duration::from_secs(60);

/// A start's workflow: namespace, name, and the version named (`None`: the newest).
type VersionAsked = (String, String, Option<u32>);

/// A key as read from the store, and when.
type CachedKey = (Arc<ApiKey>, Instant);

/// The state behind every handler.
pub struct Shared {
    /// The store: runs and the control tables.
    pub store: Arc<dyn ServerStore>,
    /// The engine runs are started and continued with.
    pub engine: Engine,
    /// How workflow files are bound (models, cassettes).
    pub bindings: Bindings,
    /// Whether this server executes runs itself (else workers do).
    pub executes: bool,
    /// One feed per run streamed.
    pub feeds: Arc<Feeds>,
    /// The request limits.
    pub limits: Limits,
    /// Cancelled when the server shuts down: streams end with a last comment.
    pub shutdown: CancellationToken,
    /// The OpenID Connect provider people sign in with, if one is configured.
    pub(crate) oidc: Option<crate::oidc::Oidc>,
    /// The host's metrics (`/metrics`), if it keeps any.
    pub(crate) metrics: Option<Arc<dyn crate::metrics::ServerMetrics>>,
    /// Wakes this process's scheduler (an event was stored here: its triggers are due).
    pub(crate) scheduler_wake: Arc<tokio::sync::Notify>,
    /// Where webhooks may post.
    pub(crate) destinations: crate::destination::DestinationPolicy,
    /// The token that reads every namespace's metrics (the server operator's scraper).
    pub(crate) metrics_token: Option<String>,
    /// Namespaces whose queue depth `/metrics` reported.
    pub(crate) queues_seen: crate::metrics::QueuesSeen,
    clock: Arc<dyn Clock>,
    /// Keys by the hash of their secret, with when they were read.
    keys: Mutex<HashMap<[u8; 32], CachedKey>>,
    touched: Mutex<HashMap<String, Instant>>,
    /// Registered versions recently looked up by (namespace, name, version asked).
    registered: Mutex<HashMap<VersionAsked, (RegisteredWorkflow, Instant)>>,
    /// Compiled workflows by definition hash (registered versions and rebuilt definitions).
    workflows: Mutex<HashMap<stepwright_core::ContentHash, Workflow>>,
    /// The step workers this process heard from (`GET /v1/workers`, `/v1/queues`).
    pub(crate) workers: crate::workers::Workers,
    /// The experiments this process recomputes now (a second `resume` of one is refused).
    pub(crate) experiments_at_work: Mutex<std::collections::HashSet<stepwright_core::RunId>>,
}

impl Shared {
    /// The state over a store and an engine on it.
    pub(crate) fn new(
        store: Arc<dyn ServerStore>,
        engine: Engine,
        bindings: Bindings,
        executes: bool,
        limits: Limits,
        shutdown: CancellationToken,
        feeds: Arc<Feeds>,
    ) -> Self {
        // Model rate limits are counted in the store, shared with every worker on it.
        let bindings = bindings.sharing_limits_in(store.clone());
        Self {
            store,
            engine,
            bindings,
            executes,
            feeds,
            limits,
            shutdown,
            oidc: None,
            metrics: None,
            scheduler_wake: Arc::new(tokio::sync::Notify::new()),
            destinations: crate::destination::DestinationPolicy::default(),
            metrics_token: None,
            queues_seen: crate::metrics::QueuesSeen::default(),
            clock: Arc::new(stepwright_core::TokioClock::new()),
            keys: Mutex::default(),
            touched: Mutex::default(),
            workflows: Mutex::default(),
            registered: Mutex::default(),
            workers: crate::workers::Workers::default(),
            experiments_at_work: Mutex::default(),
        }
    }

    /// With people signing in through this provider too.
    pub(crate) fn with_oidc(mut self, oidc: Option<crate::oidc::Oidc>) -> Self {
        self.oidc = oidc;
        self
    }

    /// With webhooks posting where this policy allows.
    pub(crate) fn with_destinations(mut self, destinations: crate::destination::DestinationPolicy) -> Self {
        self.destinations = destinations;
        self
    }

    pub(crate) fn with_metrics(
        mut self,
        metrics: Option<Arc<dyn crate::metrics::ServerMetrics>>,
        token: Option<String>,
    ) -> Self {
        self.metrics = metrics;
        self.metrics_token = token.filter(|token| !token.is_empty());
        self
    }

    /// Tells this process's scheduler that triggers are due (an event was stored).
    pub(crate) fn wake_scheduler(&self) {
        self.scheduler_wake.notify_one();
    }

    /// The wall clock.
    pub fn now(&self) -> Timestamp {
        self.clock.now()
    }

    /// Drops a key from this server's cache, so its revocation here takes effect at once
    /// (other servers see it within their cache's few seconds).
    pub fn forget_key(&self, id: &str) {
        self.keys.lock().expect("poisoned").retain(|_, (key, _)| key.id != id);
    }

    /// The principal a secret names, or `401`.
    pub async fn authenticate(&self, secret: &str) -> Result<Principal, ApiError> {
        let hash = secret_hash(secret);
        let cached = self
            .keys
            .lock()
            .expect("poisoned")
            .get(&hash)
            .filter(|(_, at)| at.elapsed() < KEY_CACHE_FOR)
            .map(|(key, _)| key.clone());
        let key = match cached {
            Some(key) => key,
            None => {
                let key =
                    self.store.key_by_secret(hash).await?.ok_or_else(|| ApiError::unauthorized("unknown API key"))?;
                let key = Arc::new(key);
                self.keys.lock().expect("poisoned").insert(hash, (key.clone(), Instant::now()));
                key
            }
        };
        let now = self.now();
        if key.revoked_at.is_some() {
            return Err(ApiError::unauthorized(format!("API key {} was revoked", key.id)));
        }
        if key.expires_at.is_some_and(|at| at <= now) {
            return Err(ApiError::unauthorized(format!("API key {} has expired", key.id)));
        }
        let due = {
            let mut touched = self.touched.lock().expect("poisoned");
            let due = touched.get(&key.id).is_none_or(|at| at.elapsed() >= TOUCH_EVERY);
            if due {
                touched.insert(key.id.clone(), Instant::now());
            }
            due
        };
        if due {
            let (store, id) = (self.store.clone(), key.id.clone());
            // Best effort: a request is not failed because its key's last use was not noted.
            tokio::spawn(async move { store.touch_key(&id, now).await });
        }
        Ok(Principal { key, by_cookie: false })
    }

    /// The registered version a start names: the newest unless one is named. A named
    /// version never changes and is kept; "the newest" is read again after a second (a
    /// registration in another process shows within it; one in this process at once).
    pub(crate) async fn registered(
        &self,
        namespace: &str,
        name: &str,
        version: Option<u32>,
    ) -> Result<Option<RegisteredWorkflow>, ApiError> {
        let id = (namespace.to_owned(), name.to_owned(), version);
        let cached = self.registered.lock().expect("poisoned").get(&id).cloned();
        if let Some((workflow, at)) = cached
            && (version.is_some() || at.elapsed() < NEWEST_CACHED_FOR)
        {
            return Ok(Some(workflow));
        }
        let found = self.store.registered_workflow(namespace, name, version).await?;
        if let Some(workflow) = &found {
            self.registered.lock().expect("poisoned").insert(id, (workflow.clone(), Instant::now()));
        }
        Ok(found)
    }

    /// Forgets the newest versions looked up in a namespace (after a registration here).
    pub(crate) fn registered_changed(&self, namespace: &str) {
        self.registered.lock().expect("poisoned").retain(|(ns, _, version), _| ns != namespace || version.is_some());
    }

    /// The compiled workflow of a registered version (compiled once per process; its MCP
    /// servers started once).
    pub async fn workflow(&self, registered: &RegisteredWorkflow) -> Result<Workflow, ApiError> {
        if let Some(workflow) = self.workflows.lock().expect("poisoned").get(&registered.hash) {
            return Ok(workflow.clone());
        }
        let source = registered_source(registered);
        let loaded = self.bindings.load_source(&source.source, &source.name, &registered.files)?;
        let workflow = stepwright_app::prepare(loaded, &self.bindings, Servers::Connected).await?;
        if workflow.hash() != registered.hash {
            return Err(ApiError::internal(format!(
                "{} version {} no longer compiles to the definition it was registered with",
                registered.name, registered.version
            )));
        }
        self.workflows.lock().expect("poisoned").insert(registered.hash, workflow.clone());
        Ok(workflow)
    }

    /// The definition a run is pinned to: compiled before in this process, or rebuilt from
    /// the source the store keeps.
    pub(crate) async fn definition_of(&self, run: &stepwright_core::RunRecord) -> Result<Workflow, ApiError> {
        let hash = run.definition_hash;
        if let Some(workflow) = self.workflows.lock().expect("poisoned").get(&hash) {
            return Ok(workflow.clone());
        }
        let workflow = stepwright_app::definition_of(self.store.as_ref(), run.id, &self.bindings).await?;
        self.workflows.lock().expect("poisoned").insert(hash, workflow.clone());
        Ok(workflow)
    }
}

/// The source a registered version is kept under in the definitions table, so that any
/// process (a worker, another server) rebuilds its runs' definition.
pub(crate) fn registered_source(registered: &RegisteredWorkflow) -> DefinitionSource {
    DefinitionSource {
        name: format!("{}.yaml", registered.name),
        files: registered.files.clone(),
        ..DefinitionSource::default_yaml(&registered.source)
    }
}

impl FromRequestParts<Arc<Shared>> for Principal {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, shared: &Arc<Shared>) -> Result<Self, Self::Rejection> {
        let (secret, by_cookie) = match parts.headers.get(header::AUTHORIZATION) {
            Some(header) => {
                let secret = header
                    .to_str()
                    .ok()
                    .and_then(|value| value.strip_prefix("Bearer "))
                    .map(str::trim)
                    .ok_or_else(|| ApiError::unauthorized("the Authorization header is not `Bearer <api key>`"))?;
                (secret, false)
            }
            None => {
                let secret = cookie(&parts.headers, SESSION_COOKIE).ok_or_else(|| {
                    ApiError::unauthorized(
                        "no Authorization header and no session: send `Authorization: Bearer <api key>`, or sign in",
                    )
                })?;
                let safe = matches!(parts.method, Method::GET | Method::HEAD | Method::OPTIONS);
                if !safe && !parts.headers.contains_key(CSRF_HEADER) {
                    return Err(ApiError::new(
                        axum::http::StatusCode::FORBIDDEN,
                        "csrf_required",
                        format!(
                            "a request signed in by the session cookie changes nothing without the {CSRF_HEADER} header"
                        ),
                    ));
                }
                (secret, true)
            }
        };
        let mut principal = shared.authenticate(secret).await?;
        if link_scope(&principal.key).is_some() {
            return Err(ApiError::unauthorized(
                "this is an approval link's key: it opens its link (/v1/link) and nothing else",
            ));
        }
        principal.by_cookie = by_cookie;
        shared.limits.check_rate(&principal.key.id)?;
        Ok(principal)
    }
}
