//! Building an engine: its store, clock, entropy, services, observer and settings.

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use super::{Engine, EngineInner};
use crate::config::EngineConfig;
use crate::recording::Mailboxes;
use crate::runtime::{Clock, Entropy, SystemEntropy, TokioClock};
use crate::services::{Observer, Services};
use crate::store::cache::{InMemoryStepCache, StepCache};
use crate::store::{InMemoryStore, Store};

/// Builds an [`Engine`].
pub struct EngineBuilder {
    pub(super) store: Option<Arc<dyn Store>>,
    pub(super) clock: Option<Arc<dyn Clock>>,
    pub(super) entropy: Option<Arc<dyn Entropy>>,
    pub(super) config: EngineConfig,
    pub(super) services: Services,
    pub(super) observer: Option<Arc<dyn Observer>>,
    pub(super) cache: Option<Arc<dyn StepCache>>,
    pub(super) worker_id: Option<String>,
}

impl EngineBuilder {
    /// The name this engine claims runs under (default: `engine@{host}:{pid}:{nonce}`, see
    /// [`super::owner::local_worker_id`]; a name of that shape lets another process on the host
    /// take this one's runs over at once if it dies).
    #[must_use]
    pub fn worker_id(mut self, id: &str) -> Self {
        self.worker_id = Some(id.to_owned());
        self
    }

    /// The store (default: a fresh [`InMemoryStore`]).
    #[must_use]
    pub fn store(mut self, store: Arc<dyn Store>) -> Self {
        self.store = Some(store);
        self
    }

    /// The clock (default: [`TokioClock`]).
    #[must_use]
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// The entropy source (default: [`SystemEntropy`]).
    #[must_use]
    pub fn entropy(mut self, entropy: Arc<dyn Entropy>) -> Self {
        self.entropy = Some(entropy);
        self
    }

    /// The settings (default: `EngineConfig::default()`).
    #[must_use]
    pub fn config(mut self, config: EngineConfig) -> Self {
        self.config = config;
        self
    }

    /// Registers a service for steps (`ctx.service::<T>()`).
    #[must_use]
    pub fn service<T: std::any::Any + Send + Sync>(mut self, service: Arc<T>) -> Self {
        self.services = self.services.with(service);
        self
    }

    /// Live progress and token notifications. Each observer given is told everything (a
    /// terminal view and a metrics recorder, say), in the order given.
    #[must_use]
    pub fn observer(mut self, observer: Arc<dyn Observer>) -> Self {
        self.observer = Some(match self.observer.take() {
            None => observer,
            Some(first) => Arc::new(crate::services::Observers(vec![first, observer])),
        });
        self
    }

    /// The step cache (default: in memory).
    #[must_use]
    pub fn cache(mut self, cache: Arc<dyn StepCache>) -> Self {
        self.cache = Some(cache);
        self
    }

    /// Builds the engine.
    pub fn build(self) -> Engine {
        let entropy: Arc<dyn Entropy> = self.entropy.unwrap_or_else(|| Arc::new(SystemEntropy::new()));
        let worker_id = self.worker_id.unwrap_or_else(|| super::owner::local_worker_id("engine", entropy.as_ref()));
        Engine {
            inner: Arc::new(EngineInner {
                worker_id,
                store: self.store.unwrap_or_else(|| Arc::new(InMemoryStore::new())),
                clock: self.clock.unwrap_or_else(|| Arc::new(TokioClock::new())),
                entropy,
                config: Arc::new(self.config),
                services: self.services,
                observer: self.observer,
                cache: self.cache.unwrap_or_else(|| Arc::new(InMemoryStepCache::default())),
                mailboxes: Arc::new(Mailboxes::default()),
                live: Mutex::new(HashMap::new()),
                cancels: Mutex::new(HashMap::new()),
                held: Mutex::new(HashMap::new()),
                claiming: tokio::sync::Mutex::new(()),
                watching: AtomicBool::new(false),
                task_home: None,
            }),
        }
    }
}
