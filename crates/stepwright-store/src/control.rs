//! The control plane's tables: what a server keeps besides runs. Workflows registered by
//! name and version, API keys (a hash of each secret, never the secret), the idempotency
//! keys of started runs, and the audit log of decisions, cancels and key changes.
//!
//! Every call that reads or writes what belongs to a namespace takes the namespace: a caller
//! of one namespace cannot name a row of another.

use std::collections::BTreeMap;

use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use stepwright_core::{ContentHash, RunId, StoreError, Timestamp};

/// A workflow file offered for registration: its text and the files it calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewWorkflow {
    /// The namespace it is registered in.
    pub namespace: String,
    /// The workflow's name (its `workflow:` field).
    pub name: String,
    /// The definition hash its source compiles to: a source registered again under the
    /// same name keeps its version.
    pub hash: ContentHash,
    /// The file's text.
    pub source: String,
    /// The files it calls, by path relative to it.
    pub files: BTreeMap<String, String>,
    /// When.
    pub at: Timestamp,
    /// Who registered it (the key's user).
    pub by: Option<String>,
}

/// One version of a registered workflow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegisteredWorkflow {
    /// The namespace it is registered in.
    pub namespace: String,
    /// The workflow's name.
    pub name: String,
    /// 1 for the first source registered under the name, then one more for each new one.
    pub version: u32,
    /// The definition hash its source compiles to.
    pub hash: ContentHash,
    /// The file's text.
    pub source: String,
    /// The files it calls, by path relative to it.
    pub files: BTreeMap<String, String>,
    /// When it was registered.
    pub registered_at: Timestamp,
    /// Who registered it.
    pub registered_by: Option<String>,
}

/// An API key as stored: everything but its secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiKey {
    /// The key's public id (`swk_…`); the first part of the secret the caller holds.
    pub id: String,
    /// The namespace every request made with it is confined to.
    pub namespace: String,
    /// The user it acts as: decisions are taken, and runs started, as this user.
    pub user: String,
    /// `viewer`, `operator`, `approver`, `admin`.
    pub roles: Vec<String>,
    /// When it was created.
    pub created_at: Timestamp,
    /// After this it is refused.
    pub expires_at: Option<Timestamp>,
    /// When it was revoked; a revoked key is refused.
    pub revoked_at: Option<Timestamp>,
    /// When a request last used it (kept at most once a minute).
    pub last_used_at: Option<Timestamp>,
}

/// What the audit log keeps of one action.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditEntry {
    /// The namespace it happened in.
    pub namespace: String,
    /// When.
    pub at: Timestamp,
    /// Who did it: a key's user (and the key id), or `cli` for a local command.
    pub actor: String,
    /// `interrupt.decided`, `run.cancelled`, `key.created`, `key.revoked`, …
    pub action: String,
    /// What it was done to: a run, an interrupt, a key id.
    pub subject: String,
    /// The rest (the decision, the reason).
    pub detail: Value,
}

/// Registered workflows.
pub trait WorkflowRegistry: Send + Sync {
    /// Registers a source under its name: the version of the same source if the name has it
    /// already, else the next version. Two registrations racing get distinct versions.
    fn register_workflow(&self, workflow: NewWorkflow) -> BoxFuture<'_, Result<RegisteredWorkflow, StoreError>>;

    /// Every version of every workflow of the namespace, newest version first within a name,
    /// names in order.
    fn registered_workflows(&self, namespace: &str) -> BoxFuture<'_, Result<Vec<RegisteredWorkflow>, StoreError>>;

    /// One version of a workflow, the newest if `version` is `None`.
    fn registered_workflow(
        &self,
        namespace: &str,
        name: &str,
        version: Option<u32>,
    ) -> BoxFuture<'_, Result<Option<RegisteredWorkflow>, StoreError>>;
}

/// API keys.
pub trait KeyStore: Send + Sync {
    /// Stores a new key with the hash of its secret.
    fn create_key(&self, key: ApiKey, secret_hash: [u8; 32]) -> BoxFuture<'_, Result<(), StoreError>>;

    /// The key whose secret hashes to this, if any (revoked and expired ones included: the
    /// caller says why it refuses them).
    fn key_by_secret(&self, secret_hash: [u8; 32]) -> BoxFuture<'_, Result<Option<ApiKey>, StoreError>>;

    /// Every key, or every key of a namespace, oldest first.
    fn keys(&self, namespace: Option<&str>) -> BoxFuture<'_, Result<Vec<ApiKey>, StoreError>>;

    /// Revokes a key; `false` if there is no such key (or it was revoked already).
    fn revoke_key(&self, id: &str, at: Timestamp) -> BoxFuture<'_, Result<bool, StoreError>>;

    /// Records a use of the key.
    fn touch_key(&self, id: &str, at: Timestamp) -> BoxFuture<'_, Result<(), StoreError>>;
}

/// What [`IdempotencyStore::claim_idempotency`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdempotencyClaim {
    /// The key was free and now names the run offered.
    Claimed,
    /// The key names this run already (claimed at that time).
    Taken {
        /// The run the key names.
        run: RunId,
        /// When it was claimed.
        at: Timestamp,
    },
}

/// The idempotency keys of started runs.
pub trait IdempotencyStore: Send + Sync {
    /// Makes `key` name `run` unless it names a run already. Of two claims racing, exactly one
    /// is [`IdempotencyClaim::Claimed`].
    fn claim_idempotency(
        &self,
        namespace: &str,
        key: &str,
        run: RunId,
        at: Timestamp,
    ) -> BoxFuture<'_, Result<IdempotencyClaim, StoreError>>;

    /// Moves `key` from `from` (a run that was never created: its starter died between the
    /// claim and the run) to `to`; `false` if the key names another run by now.
    fn reclaim_idempotency(
        &self,
        namespace: &str,
        key: &str,
        from: RunId,
        to: RunId,
        at: Timestamp,
    ) -> BoxFuture<'_, Result<bool, StoreError>>;
}

/// The audit log.
pub trait AuditLog: Send + Sync {
    /// Appends an entry.
    fn audit(&self, entry: AuditEntry) -> BoxFuture<'_, Result<(), StoreError>>;

    /// A namespace's entries, newest first.
    fn audit_entries(&self, namespace: &str, limit: usize) -> BoxFuture<'_, Result<Vec<AuditEntry>, StoreError>>;
}

/// Everything a server keeps: runs, sessions and memory ([`crate::AnyStore`]) and the
/// control tables. SQLite and Postgres are both one.
pub trait ServerStore: crate::AnyStore + WorkflowRegistry + KeyStore + IdempotencyStore + AuditLog {}

impl<T: crate::AnyStore + WorkflowRegistry + KeyStore + IdempotencyStore + AuditLog> ServerStore for T {}
