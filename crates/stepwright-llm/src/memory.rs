//! Sessions and long-term memory as steps see them: the [`Sessions`] and [`MemoryService`]
//! services over a store, and the `memory.store` / `memory.recall` steps.
//!
//! A session is a conversation kept across runs (an agent step given a `session` id loads
//! its history first and appends what it added when it completes). Memory is namespaced
//! key/value items with full-text recall, scoped to the run, a session, the user or the whole
//! tenant. Both live in the store ([`SessionStore`], [`MemoryBank`]); every read and write
//! is a journaled sub-step, so a resumed or replayed run sees what the first execution saw
//! and never writes twice.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use stepwright_core::bank::{MemoryAddress, MemoryBank, MemoryItem, MemoryScope, MemorySearch, text_of};
use stepwright_core::session::{SessionAppend, SessionOwner, SessionStore};
use stepwright_core::{CallKind, DynStep, Effect, ErrorCode, Node, Outcome, StepContext, StepError, StoreError};

/// The error code for a session or memory item that belongs to someone else.
pub const ACCESS_DENIED: ErrorCode = ErrorCode::from_static("access_denied");

/// How many messages a session keeps unless told otherwise.
pub const DEFAULT_MAX_STORED_MESSAGES: usize = 200;

/// A store error as a step error: someone else's session is `access_denied`, a bad id is
/// the input's fault, and a backend failure may pass.
pub(crate) fn step_error(doing: &str, error: StoreError) -> StepError {
    match error {
        StoreError::AccessDenied(message) => StepError::new(ACCESS_DENIED, format!("{doing}: {message}")),
        StoreError::Invalid(message) => StepError::new(ErrorCode::INPUT_VALIDATION, format!("{doing}: {message}")),
        other => StepError::execution_failed(format!("{doing}: {other}")).retryable(true),
    }
}

/// The sessions service: where agents keep conversations across runs. Register it with the
/// engine (`.service(Arc::new(Sessions::new(store)))`).
#[derive(Clone)]
pub struct Sessions {
    store: Arc<dyn SessionStore>,
    max_stored_messages: usize,
}

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sessions").field("max_stored_messages", &self.max_stored_messages).finish_non_exhaustive()
    }
}

impl Sessions {
    /// Sessions kept in `store`, each capped at [`DEFAULT_MAX_STORED_MESSAGES`] messages.
    pub fn new(store: Arc<dyn SessionStore>) -> Self {
        Self { store, max_stored_messages: DEFAULT_MAX_STORED_MESSAGES }
    }

    /// Caps every session at `max` messages (the newest are kept), unless an agent says
    /// otherwise.
    #[must_use]
    pub fn max_stored_messages(mut self, max: usize) -> Self {
        self.max_stored_messages = max;
        self
    }

    /// The default cap.
    pub fn default_max_stored_messages(&self) -> usize {
        self.max_stored_messages
    }

    /// The store sessions are kept in.
    pub fn store(&self) -> &Arc<dyn SessionStore> {
        &self.store
    }

    /// Loads a session's history (at most `limit` messages) as the journaled sub-step
    /// `session.load`: served from the journal on resume and replay.
    pub(crate) async fn load(&self, ctx: &StepContext, session: &str, limit: usize) -> Result<Vec<Value>, StepError> {
        let owner = SessionOwner::from(ctx.caller());
        let store = self.store.clone();
        let recorded = ctx
            .call("session.load", CallKind::Input, |_| async move {
                let history = store
                    .session_history(session, &owner, limit)
                    .await
                    .map_err(|e| step_error(&format!("loading session {session:?}"), e))?;
                Ok(Value::Array(history.into_iter().map(|m| m.message).collect()))
            })
            .await?;
        match &*recorded {
            Value::Array(messages) => Ok(messages.clone()),
            other => Err(StepError::execution_failed(format!("a recorded session history is not a list: {other}"))),
        }
    }

    /// Appends messages to a session as the journaled sub-step `session.save`. The append
    /// is keyed by the run and sub-step, so doing it again after a crash changes nothing.
    pub(crate) async fn save(
        &self,
        ctx: &StepContext,
        session: &str,
        messages: Vec<Value>,
        max_stored: usize,
    ) -> Result<(), StepError> {
        let owner = SessionOwner::from(ctx.caller());
        let store = self.store.clone();
        let at = ctx.now();
        let kind = CallKind::Action { effect: Effect::Write, safe_to_retry: true };
        ctx.call("session.save", kind, |info| async move {
            let key = format!("{}/{}", ctx.run_id(), info.path);
            let append = SessionAppend { session: session.to_owned(), owner, key, messages, max_stored, at };
            let done = store
                .append_to_session(append)
                .await
                .map_err(|e| step_error(&format!("saving session {session:?}"), e))?;
            Ok(json!({ "stored": done.stored, "applied": done.applied }))
        })
        .await
        .map(drop)
    }
}

/// The memory service: where `memory.store` writes and `memory.recall` looks. Register it
/// with the engine (`.service(Arc::new(MemoryService::new(store)))`).
#[derive(Clone)]
pub struct MemoryService {
    bank: Arc<dyn MemoryBank>,
}

impl std::fmt::Debug for MemoryService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryService").finish_non_exhaustive()
    }
}

impl MemoryService {
    /// Memory kept in `bank`.
    pub fn new(bank: Arc<dyn MemoryBank>) -> Self {
        Self { bank }
    }

    /// The bank items are kept in (usually the run store).
    pub fn bank(&self) -> &Arc<dyn MemoryBank> {
        &self.bank
    }
}

/// Whose memory a step reads or writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScopeKind {
    /// This run's only; erased with the run.
    #[default]
    Run,
    /// The session named by the step input's `session` (whose owner must be the run's
    /// caller).
    Session,
    /// The run's user's (the run needs a user).
    User,
    /// Everyone's in the run's tenant.
    Global,
}

/// The scope a step means, resolved against its run: the run, the input's session (checked
/// against its owner), the caller's user, or global — always within the caller's tenant.
async fn resolve_scope(ctx: &StepContext, kind: ScopeKind, session: Option<&str>) -> Result<MemoryScope, StepError> {
    let bad = |message: String| StepError::new(ErrorCode::INPUT_VALIDATION, message);
    Ok(match kind {
        ScopeKind::Run => MemoryScope::Run(ctx.run_id()),
        ScopeKind::Global => MemoryScope::Global,
        ScopeKind::User => match &ctx.caller().user {
            Some(user) => MemoryScope::User(user.clone()),
            None => return Err(bad("memory scope `user` needs a run started by a user; this run has none".into())),
        },
        ScopeKind::Session => {
            let Some(session) = session else {
                return Err(bad("memory scope `session` needs a `session` id in the step's input".into()));
            };
            // Session memory follows the session's owner: reading no messages still checks it.
            let sessions = ctx.require::<Sessions>()?;
            let owner = SessionOwner::from(ctx.caller());
            sessions
                .store()
                .session_history(session, &owner, 0)
                .await
                .map_err(|e| step_error(&format!("using session {session:?}'s memory"), e))?;
            MemoryScope::Session(session.to_owned())
        }
    })
}

fn tenant(ctx: &StepContext) -> String {
    ctx.caller().tenant.clone().unwrap_or_default()
}

/// What a `memory.store` step writes to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RememberSpec {
    /// Where in the scope items are written (`facts`, `preferences`).
    pub namespace: String,
    /// Whose memory.
    #[serde(default)]
    pub scope: ScopeKind,
}

/// The input of a `memory.store` step.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StoreInput {
    key: String,
    value: Value,
    /// What recall searches; by default the value's strings and numbers.
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    session: Option<String>,
}

/// The `memory.store` step: writes `{key, value, text?, session?}` to its namespace and
/// scope, replacing what the key held. Its output is the item's address.
pub struct RememberStep {
    spec: RememberSpec,
    name: String,
}

impl RememberStep {
    /// A step writing as `spec` says.
    pub fn new(spec: RememberSpec) -> Arc<Self> {
        let name = format!("memory.store {}", serde_json::to_string(&spec).expect("a spec serializes"));
        Arc::new(Self { spec, name })
    }

    /// A node running this step as a write that is safe to retry (writing the same item
    /// twice leaves the same item).
    pub fn node(id: &str, spec: RememberSpec) -> Node {
        Node::dyn_step(id, Self::new(spec)).effect(Effect::Write).safe_to_retry()
    }
}

impl DynStep for RememberStep {
    fn run<'a>(&'a self, ctx: &'a StepContext, input: Arc<Value>) -> BoxFuture<'a, Result<Outcome<Value>, StepError>> {
        Box::pin(async move {
            let input: StoreInput = serde_json::from_value((*input).clone()).map_err(|e| {
                StepError::new(
                    ErrorCode::INPUT_VALIDATION,
                    format!("memory.store takes {{key, value, text?, session?}}: {e}"),
                )
            })?;
            let memories = ctx.require::<MemoryService>()?;
            let scope = resolve_scope(ctx, self.spec.scope, input.session.as_deref()).await?;
            let address = MemoryAddress {
                tenant: tenant(ctx),
                scope,
                namespace: self.spec.namespace.clone(),
                key: input.key.clone(),
            };
            let text = input.text.unwrap_or_else(|| text_of(&input.value));
            let item = MemoryItem { address, value: input.value, text, updated_at: ctx.now() };
            memories.bank.memory_put(item).await.map_err(|e| step_error("storing a memory item", e))?;
            Ok(Outcome::completed(json!({
                "namespace": self.spec.namespace,
                "scope": self.spec.scope,
                "key": input.key,
            })))
        })
    }

    fn type_name(&self) -> &str {
        &self.name
    }
}

/// What a `memory.recall` step reads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecallSpec {
    /// Where in the scope items are searched.
    pub namespace: String,
    /// Whose memory.
    #[serde(default)]
    pub scope: ScopeKind,
    /// At most this many items (default 5).
    #[serde(default = "default_limit")]
    pub limit: usize,
}

fn default_limit() -> usize {
    5
}

/// The input of a `memory.recall` step.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RecallInput {
    #[serde(default)]
    key: Option<String>,
    #[serde(default)]
    query: Option<String>,
    #[serde(default)]
    session: Option<String>,
}

/// The `memory.recall` step. Its input is a query string, or `{query}` (full-text search,
/// most relevant first), `{key}` (one item), or `{}` (the newest items), each with an
/// optional `session`. Its output is a list of `{key, value, text, score, updated_at}`.
pub struct RecallStep {
    spec: RecallSpec,
    name: String,
}

impl RecallStep {
    /// A step reading as `spec` says.
    pub fn new(spec: RecallSpec) -> Arc<Self> {
        let name = format!("memory.recall {}", serde_json::to_string(&spec).expect("a spec serializes"));
        Arc::new(Self { spec, name })
    }

    /// A node running this step as a read.
    pub fn node(id: &str, spec: RecallSpec) -> Node {
        Node::dyn_step(id, Self::new(spec)).effect(Effect::Read)
    }
}

impl DynStep for RecallStep {
    fn run<'a>(&'a self, ctx: &'a StepContext, input: Arc<Value>) -> BoxFuture<'a, Result<Outcome<Value>, StepError>> {
        Box::pin(async move {
            let input: RecallInput = match &*input {
                Value::String(query) => RecallInput { query: Some(query.clone()), ..RecallInput::default() },
                Value::Null => RecallInput::default(),
                other => serde_json::from_value(other.clone()).map_err(|e| {
                    StepError::new(
                        ErrorCode::INPUT_VALIDATION,
                        format!("memory.recall takes a query string or {{query?, key?, session?}}: {e}"),
                    )
                })?,
            };
            if input.key.is_some() && input.query.is_some() {
                return Err(StepError::new(
                    ErrorCode::INPUT_VALIDATION,
                    "memory.recall takes a `key` or a `query`, not both",
                ));
            }
            let memories = ctx.require::<MemoryService>()?;
            let scope = resolve_scope(ctx, self.spec.scope, input.session.as_deref()).await?;
            let hits = match input.key {
                Some(key) => {
                    let address =
                        MemoryAddress { tenant: tenant(ctx), scope, namespace: self.spec.namespace.clone(), key };
                    let found = memories
                        .bank
                        .memory_get(address)
                        .await
                        .map_err(|e| step_error("recalling a memory item", e))?;
                    found.into_iter().map(|item| (item, 0.0)).collect::<Vec<_>>()
                }
                None => {
                    let search = MemorySearch {
                        tenant: tenant(ctx),
                        scope,
                        namespace: self.spec.namespace.clone(),
                        query: input.query,
                        limit: self.spec.limit,
                    };
                    let hits =
                        memories.bank.memory_search(search).await.map_err(|e| step_error("searching memory", e))?;
                    hits.into_iter().map(|hit| (hit.item, hit.score)).collect()
                }
            };
            let out: Vec<Value> = hits
                .into_iter()
                .map(|(item, score)| {
                    json!({
                        "key": item.address.key,
                        "value": item.value,
                        "text": item.text,
                        "score": score,
                        "updated_at": item.updated_at,
                    })
                })
                .collect();
            Ok(Outcome::completed(Value::Array(out)))
        })
    }

    fn type_name(&self) -> &str {
        &self.name
    }
}
