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

    /// Revokes a key and the keys derived from it (ids `{id}.…`: the browser sessions signed
    /// in with it); `false` if there is no such key (or it was revoked already).
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

/// A webhook: where a namespace's events are posted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Webhook {
    /// Its id (`swh…`).
    pub id: String,
    /// The namespace whose events it receives.
    pub namespace: String,
    /// Where they are posted.
    pub url: String,
    /// Which: `interrupt.opened`, `run.completed`, `run.failed`, `run.suspended`.
    pub events: Vec<String>,
    /// The HMAC key deliveries are signed with.
    pub secret: String,
    /// When it was made.
    pub created_at: Timestamp,
}

/// A delivery to make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewDelivery {
    /// The webhook.
    pub webhook_id: String,
    /// Its namespace.
    pub namespace: String,
    /// What makes it unique for the webhook (`run.completed:<run>`): an event found twice is
    /// delivered once.
    pub event_key: String,
    /// The event's name.
    pub event: String,
    /// The JSON body to post.
    pub body: String,
    /// When it was found (its first attempt is due then).
    pub at: Timestamp,
}

/// One attempt at a delivery.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attempt {
    /// When it was made.
    pub at: Timestamp,
    /// The receiver's status, if it answered.
    pub status: Option<u16>,
    /// Why it failed, if it did.
    pub error: Option<String>,
}

/// Where a delivery stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryState {
    /// Not delivered yet; due at `next_attempt_at`.
    Pending,
    /// The receiver answered 2xx.
    Delivered,
    /// Every attempt failed; no more are made.
    Failed,
}

impl DeliveryState {
    fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Delivered => "delivered",
            Self::Failed => "failed",
        }
    }

    pub(crate) fn column(self) -> &'static str {
        self.as_str()
    }

    pub(crate) fn parse(text: &str) -> Option<Self> {
        [Self::Pending, Self::Delivered, Self::Failed].into_iter().find(|state| state.as_str() == text)
    }
}

/// A delivery with its attempts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// Its id.
    pub id: i64,
    /// The webhook.
    pub webhook_id: String,
    /// Its namespace.
    pub namespace: String,
    /// What makes it unique for the webhook.
    pub event_key: String,
    /// The event's name.
    pub event: String,
    /// The JSON body.
    pub body: String,
    /// Where it stands.
    pub state: DeliveryState,
    /// Every attempt so far, oldest first.
    pub attempts: Vec<Attempt>,
    /// When the next attempt is due (for a pending one).
    pub next_attempt_at: Timestamp,
    /// When it was found.
    pub created_at: Timestamp,
}

/// Webhooks and their outbox.
pub trait WebhookStore: Send + Sync {
    /// Stores a webhook.
    fn create_webhook(&self, webhook: Webhook) -> BoxFuture<'_, Result<(), StoreError>>;

    /// The live webhooks, of a namespace or of all.
    fn webhooks(&self, namespace: Option<&str>) -> BoxFuture<'_, Result<Vec<Webhook>, StoreError>>;

    /// Deletes a webhook of the namespace (its pending deliveries are not attempted again);
    /// `false` if it has none by that id.
    fn delete_webhook(&self, namespace: &str, id: &str, at: Timestamp) -> BoxFuture<'_, Result<bool, StoreError>>;

    /// Adds a delivery unless the webhook has one with its key; whether it was added.
    fn enqueue_delivery(&self, delivery: NewDelivery) -> BoxFuture<'_, Result<bool, StoreError>>;

    /// Leases up to `limit` pending deliveries that are due, of live webhooks, for
    /// `lease_for`: no other process attempts them meanwhile.
    fn claim_deliveries(
        &self,
        now: Timestamp,
        lease_for: std::time::Duration,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<Delivery>, StoreError>>;

    /// Records an attempt and what follows: delivered, another attempt at `next`, or failed.
    fn record_attempt(
        &self,
        id: i64,
        attempt: Attempt,
        state: DeliveryState,
        next: Timestamp,
    ) -> BoxFuture<'_, Result<(), StoreError>>;

    /// A webhook's deliveries, newest first.
    fn deliveries(
        &self,
        namespace: &str,
        webhook_id: &str,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<Delivery>, StoreError>>;

    /// How far the namespace's changed runs have been turned into deliveries.
    fn webhook_watermark(&self, namespace: &str) -> BoxFuture<'_, Result<Option<Timestamp>, StoreError>>;

    /// Moves the watermark forward (never back).
    fn set_webhook_watermark(&self, namespace: &str, at: Timestamp) -> BoxFuture<'_, Result<(), StoreError>>;
}

/// Everything a server keeps: runs, sessions and memory ([`crate::AnyStore`]) and the
/// control tables. SQLite and Postgres are both one.
pub trait ServerStore:
    crate::AnyStore
    + WorkflowRegistry
    + KeyStore
    + IdempotencyStore
    + AuditLog
    + WebhookStore
    + stepwright_core::store::experiment::ExperimentStore
{
}

impl<
    T: crate::AnyStore
        + WorkflowRegistry
        + KeyStore
        + IdempotencyStore
        + AuditLog
        + WebhookStore
        + stepwright_core::store::experiment::ExperimentStore,
> ServerStore for T
{
}
