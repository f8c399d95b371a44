//! The memory bank: what `memory.store` writes and `memory.recall` finds — namespaced
//! key/value items with full-text search, kept in the store across runs.
//!
//! An item lives at an address: tenant, scope (a run, a session, a user, or global to the
//! tenant), namespace and key. Writing an address again replaces the item. Search matches
//! any of the query's words (case-insensitive, whole words) in an item's text and ranks by
//! the backend's relevance score (SQLite FTS5 `bm25`, Postgres `ts_rank`); the kernel only
//! promises that items matching more of the words rank above items matching fewer when
//! everything else is equal, and that ties are broken by the newest update, then the key.
//!
//! Tenants never see each other's items: every operation is scoped by tenant.

use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::ids::{RunId, Timestamp};
use crate::store::StoreError;

/// The longest namespace or key accepted.
pub const MAX_MEMORY_NAME_LEN: usize = 200;

/// Whose an item is.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "scope", content = "id", rename_all = "snake_case")]
pub enum MemoryScope {
    /// One run's: deleted with the run.
    Run(RunId),
    /// One conversation's.
    Session(String),
    /// One user's, across runs and sessions.
    User(String),
    /// Everyone's in the tenant.
    Global,
}

impl MemoryScope {
    /// The scope's kind as stored: `run`, `session`, `user` or `global`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Run(_) => "run",
            Self::Session(_) => "session",
            Self::User(_) => "user",
            Self::Global => "global",
        }
    }

    /// The scope's owner as stored (empty for global).
    pub fn owner(&self) -> String {
        match self {
            Self::Run(run) => run.to_string(),
            Self::Session(id) | Self::User(id) => id.clone(),
            Self::Global => String::new(),
        }
    }

    /// Rebuilds a scope from its stored kind and owner.
    pub fn from_stored(kind: &str, owner: &str) -> Result<Self, StoreError> {
        let corrupt = || StoreError::Invalid(format!("a stored memory item has an unknown scope {kind:?}/{owner:?}"));
        Ok(match kind {
            "run" => Self::Run(owner.parse().map_err(|_| corrupt())?),
            "session" => Self::Session(owner.to_owned()),
            "user" => Self::User(owner.to_owned()),
            "global" => Self::Global,
            _ => return Err(corrupt()),
        })
    }
}

/// Where an item lives.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct MemoryAddress {
    /// The tenant ("" when runs have none).
    pub tenant: String,
    /// Whose it is.
    pub scope: MemoryScope,
    /// A name grouping items (`facts`, `preferences`…).
    pub namespace: String,
    /// The item's key within the namespace.
    pub key: String,
}

/// A stored item.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemoryItem {
    /// Where it lives.
    pub address: MemoryAddress,
    /// What is kept (any JSON); its text is what search matches.
    pub value: Value,
    /// The text that search looks in.
    pub text: String,
    /// When it was last written.
    pub updated_at: Timestamp,
}

impl MemoryItem {
    /// An item whose searchable text is taken from its value: a string is its own text; of
    /// anything else, every string and number in it (array items in order, object members in
    /// key order).
    pub fn new(address: MemoryAddress, value: Value, updated_at: Timestamp) -> Self {
        let text = text_of(&value);
        Self { address, value, text, updated_at }
    }
}

/// The searchable text of a value.
pub fn text_of(value: &Value) -> String {
    fn walk(value: &Value, out: &mut String) {
        match value {
            Value::String(text) => push(out, text),
            Value::Number(number) => push(out, &number.to_string()),
            Value::Bool(_) | Value::Null => {}
            Value::Array(items) => items.iter().for_each(|item| walk(item, out)),
            Value::Object(map) => map.values().for_each(|item| walk(item, out)),
        }
    }
    fn push(out: &mut String, text: &str) {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(text);
    }
    let mut out = String::new();
    walk(value, &mut out);
    out
}

/// A search in one namespace of one scope.
#[derive(Debug, Clone, PartialEq)]
pub struct MemorySearch {
    /// The tenant searched; never another's items.
    pub tenant: String,
    /// Whose items.
    pub scope: MemoryScope,
    /// The namespace searched, within the scope.
    pub namespace: String,
    /// Words to look for; none lists the newest items.
    pub query: Option<String>,
    /// At most this many hits.
    pub limit: usize,
}

/// An item a search found, with its relevance (0 when listing without a query).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemoryHit {
    /// The item found.
    pub item: MemoryItem,
    /// Higher is more relevant; comparable only within one search.
    pub score: f64,
}

/// Where memory items are kept. Implemented by every store.
pub trait MemoryBank: Send + Sync + 'static {
    /// Writes an item, replacing whatever was at its address.
    fn memory_put(&self, item: MemoryItem) -> BoxFuture<'_, Result<(), StoreError>>;

    /// The item at an address.
    fn memory_get(&self, address: MemoryAddress) -> BoxFuture<'_, Result<Option<MemoryItem>, StoreError>>;

    /// Items matching a search, most relevant first.
    fn memory_search(&self, search: MemorySearch) -> BoxFuture<'_, Result<Vec<MemoryHit>, StoreError>>;

    /// Deletes the item at an address; false if there was none.
    fn memory_delete(&self, address: MemoryAddress) -> BoxFuture<'_, Result<bool, StoreError>>;
}
