//! Sessions: a conversation's history kept across runs, message by message.
//!
//! A session is an ordered list of messages (JSON values; the kernel does not know their
//! shape) under a session id, owned by the tenant and user that first wrote to it. Every
//! operation names its caller, and a caller who is not the owner gets
//! [`StoreError::AccessDenied`] — never the history, and never a hint of whose it is.
//!
//! Appends carry a key (the writing run and step): a second append with the same key is a
//! no-op, so a step that appended and crashed before journaling it can append again safely.
//! An append keeps only the newest `max_stored` messages of the session.

use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::identity::Caller;
use crate::ids::Timestamp;
use crate::store::StoreError;

/// The longest session id accepted.
pub const MAX_SESSION_ID_LEN: usize = 200;

/// Who a session belongs to: the tenant and user of the run that first wrote to it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionOwner {
    /// The tenant, if the run had one.
    pub tenant: Option<String>,
    /// The user, if the run had one.
    pub user: Option<String>,
}

impl SessionOwner {
    /// The owner as stores keep it: `(tenant, user)` with "" for none, so owners compare
    /// with `=` in SQL.
    pub fn stored(&self) -> (String, String) {
        (self.tenant.clone().unwrap_or_default(), self.user.clone().unwrap_or_default())
    }
}

impl From<&Caller> for SessionOwner {
    fn from(caller: &Caller) -> Self {
        Self { tenant: caller.tenant.clone(), user: caller.user.clone() }
    }
}

/// One stored message and its position in the session (increasing, never reused).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionMessage {
    /// Its sequence number in the session.
    pub seq: u64,
    /// The message as the step appended it (the kernel does not know its shape).
    pub message: Value,
}

/// Messages to add to the end of a session.
#[derive(Debug, Clone)]
pub struct SessionAppend {
    /// The session; created, owned by `owner`, if it does not exist.
    pub session: String,
    /// Who is writing.
    pub owner: SessionOwner,
    /// Makes the append idempotent: a second append with this key changes nothing.
    pub key: String,
    /// The messages, in order.
    pub messages: Vec<Value>,
    /// Keep at most this many messages (the newest); older ones are deleted.
    pub max_stored: usize,
    /// When.
    pub at: Timestamp,
}

/// What an append did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    /// False if an append with the same key was applied before (nothing changed now).
    pub applied: bool,
    /// How many messages the session holds afterwards.
    pub stored: u64,
}

/// Where sessions are kept. Implemented by every store.
pub trait SessionStore: Send + Sync + 'static {
    /// The newest `limit` messages of a session, oldest first; none if it does not exist.
    fn session_history(
        &self,
        session: &str,
        owner: &SessionOwner,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<SessionMessage>, StoreError>>;

    /// Appends messages (idempotent per key), creating the session if needed, then trims it
    /// to `max_stored` messages — all in one transaction.
    fn append_to_session(&self, append: SessionAppend) -> BoxFuture<'_, Result<Appended, StoreError>>;

    /// Deletes a session and its messages; false if there was none.
    fn delete_session(&self, session: &str, owner: &SessionOwner) -> BoxFuture<'_, Result<bool, StoreError>>;
}
