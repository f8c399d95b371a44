//! What the engine hands steps besides their input: typed [`Services`], the layers that
//! `provide` nodes make visible, the kinds of journaled sub-steps, and the [`Observer`] of
//! live progress.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::ids::{RunId, StepPath};
use crate::journal::RunStatus;
use crate::policy::Effect;

/// Typed services available to steps (dependency injection): a map from type to instance.
#[derive(Clone, Default)]
pub struct Services {
    map: Arc<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>,
}

impl fmt::Debug for Services {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Services({} registered)", self.map.len())
    }
}

impl Services {
    /// Registers a service, replacing one of the same type.
    #[must_use]
    pub fn with<T: Any + Send + Sync>(mut self, service: Arc<T>) -> Self {
        Arc::make_mut(&mut self.map).insert(TypeId::of::<T>(), service);
        self
    }

    /// The service of type `T`, if registered.
    pub fn get<T: Any + Send + Sync>(&self) -> Option<Arc<T>> {
        self.map.get(&TypeId::of::<T>()).and_then(|s| s.clone().downcast::<T>().ok())
    }

    /// These services with `over`'s on top (a workflow's own over the engine's).
    pub fn layered(&self, over: &Services) -> Services {
        if over.map.is_empty() {
            return self.clone();
        }
        let mut map = (*self.map).clone();
        map.extend(over.map.iter().map(|(k, v)| (*k, v.clone())));
        Services { map: Arc::new(map) }
    }
}

/// A memory layer made available to descendant steps by a `provide` node.
pub trait ProvidedLayer: Send + Sync + 'static {
    /// The layer's name (steps look layers up by it).
    fn name(&self) -> &str;
    /// Reads a key.
    fn recall(&self, key: &str) -> Option<Value>;
    /// Writes a key.
    fn store(&self, key: &str, value: Value);
}

/// A memory layer in a hash map.
#[derive(Debug, Default)]
pub struct MapLayer {
    name: String,
    entries: Mutex<HashMap<String, Value>>,
}

impl MapLayer {
    /// An empty layer.
    pub fn new(name: &str) -> Self {
        Self { name: name.to_owned(), entries: Mutex::new(HashMap::new()) }
    }
}

impl ProvidedLayer for MapLayer {
    fn name(&self) -> &str {
        &self.name
    }

    fn recall(&self, key: &str) -> Option<Value> {
        self.entries.lock().expect("poisoned").get(key).cloned()
    }

    fn store(&self, key: &str, value: Value) {
        self.entries.lock().expect("poisoned").insert(key.to_owned(), value);
    }
}

/// The memory layers visible to a step, innermost last.
#[derive(Clone, Default)]
pub struct ProvidedLayers {
    layers: Arc<Vec<Arc<dyn ProvidedLayer>>>,
}

impl fmt::Debug for ProvidedLayers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.layers.iter().map(|l| l.name())).finish()
    }
}

impl ProvidedLayers {
    pub(crate) fn with(&self, more: &[Arc<dyn ProvidedLayer>]) -> Self {
        let mut layers = (*self.layers).clone();
        layers.extend(more.iter().cloned());
        Self { layers: Arc::new(layers) }
    }

    /// The innermost layer with this name.
    pub fn layer(&self, name: &str) -> Option<&Arc<dyn ProvidedLayer>> {
        self.layers.iter().rev().find(|l| l.name() == name)
    }

    /// Reads a key from the innermost layer that has it.
    pub fn recall(&self, key: &str) -> Option<Value> {
        self.layers.iter().rev().find_map(|l| l.recall(key))
    }

    /// The layer names, outermost first.
    pub fn names(&self) -> Vec<&str> {
        self.layers.iter().map(|l| l.name()).collect()
    }
}

/// What a journaled sub-step ([`StepContext::call`]) is, which decides when its recorded
/// result is served again instead of doing the work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallKind {
    /// An outside, non-deterministic input such as a model call: served on resume and in a
    /// replay (a replay never pays for a model call), made again after a recompute's
    /// starting point (that is what a recompute is for).
    Input,
    /// An action with an effect class, such as a tool call: served like a step of that
    /// class. A `write` or `external` action has its intent committed before it runs; if
    /// the process died between the intent and the result and the action is not safe to
    /// retry, the call returns `outcome_unknown` instead of running it twice.
    Action {
        /// The action's effect class.
        effect: Effect,
        /// Whether running it again is harmless.
        safe_to_retry: bool,
    },
}

/// What the work of a sub-step is told.
#[derive(Debug, Clone)]
pub struct CallInfo {
    /// The sub-step's path (`research/turn.2/tool.0`).
    pub path: StepPath,
    /// For fenced actions: the idempotency key (hash of run id and the sub-step's path),
    /// the same after a crash. Pass it to the system you call.
    pub idempotency_key: Option<String>,
}

/// Where a step path stands: how an execution ended, as observers see it, and (in a run's
/// timeline, `inspect::timeline`) also `running` and `waiting`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum StepStatus {
    /// It produced its output.
    Completed,
    /// It failed for good (after its retries and `on_failure`).
    Failed,
    /// Its condition was false, or `on_failure: skip` turned a failure into `null`.
    Skipped,
    /// It waits on an interrupt; the run suspends.
    Suspended,
    /// It handed control to another node of its graph.
    Handoff,
    /// It was stopped: the run was cancelled, or a sibling's failure or a race ended it.
    Cancelled,
    /// This attempt failed and another one follows.
    Retrying,
    /// An attempt started and has not ended (timelines only).
    Running,
    /// It opened an interrupt and waits for the decision (timelines only).
    Waiting,
}

impl StepStatus {
    /// The status as every surface spells it (`completed`, `retrying`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Skipped => "skipped",
            Self::Suspended => "suspended",
            Self::Handoff => "handoff",
            Self::Cancelled => "cancelled",
            Self::Retrying => "retrying",
            Self::Running => "running",
            Self::Waiting => "waiting",
        }
    }
}

impl fmt::Display for StepStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Live, non-durable notifications: progress and streamed tokens (for a terminal view).
pub trait Observer: Send + Sync + 'static {
    /// A step path started an attempt.
    fn step_started(&self, _run: RunId, _path: &StepPath, _attempt: u32) {}
    /// A step path finished (completed, failed, skipped, suspended...).
    fn step_finished(&self, _run: RunId, _path: &StepPath, _status: StepStatus) {}
    /// A step streamed a token.
    fn token(&self, _run: RunId, _path: &StepPath, _text: &str) {}
    /// A step emitted an event (a model call with its usage and cost, a tool call…) as it
    /// is recorded, before it is committed.
    fn event(&self, _run: RunId, _path: &StepPath, _kind: &str, _data: &Value) {}
    /// This execution of the run ended with `status` (finished, suspended, handed back),
    /// and that status is committed.
    fn run_stopped(&self, _run: RunId, _status: RunStatus) {}
    /// An execution (an activation) of a run of `workflow`, started in `tenant`, begins:
    /// `start` (its first), `resume` (a later one), `replay` or `recompute` (in a sandbox).
    fn activation_started(&self, _run: RunId, _workflow: &str, _tenant: Option<&str>, _kind: &str) {}
}

/// Several observers as one: each is told everything, in order.
pub(crate) struct Observers(pub(crate) Vec<Arc<dyn Observer>>);

impl Observer for Observers {
    fn step_started(&self, run: RunId, path: &StepPath, attempt: u32) {
        self.0.iter().for_each(|o| o.step_started(run, path, attempt));
    }
    fn step_finished(&self, run: RunId, path: &StepPath, status: StepStatus) {
        self.0.iter().for_each(|o| o.step_finished(run, path, status));
    }
    fn token(&self, run: RunId, path: &StepPath, text: &str) {
        self.0.iter().for_each(|o| o.token(run, path, text));
    }
    fn event(&self, run: RunId, path: &StepPath, kind: &str, data: &Value) {
        self.0.iter().for_each(|o| o.event(run, path, kind, data));
    }
    fn run_stopped(&self, run: RunId, status: RunStatus) {
        self.0.iter().for_each(|o| o.run_stopped(run, status));
    }
    fn activation_started(&self, run: RunId, workflow: &str, tenant: Option<&str>, kind: &str) {
        self.0.iter().for_each(|o| o.activation_started(run, workflow, tenant, kind));
    }
}
