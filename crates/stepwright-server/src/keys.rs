//! API keys: made here (shown once), kept as a SHA-256 hash, and turned back into a
//! [`Principal`] on every request. The key alone decides who the caller is.

use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::header;
use axum::http::request::Parts;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use stepwright_core::{Caller, Timestamp};
use stepwright_store::ServerStore;
use stepwright_store::control::ApiKey;

use crate::problem::ApiError;
use crate::state::Shared;

/// What a key may do. Any role may read its namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Reads runs, events, workflows and interrupts.
    Viewer,
    /// Starts, cancels and resumes runs, and sends them messages.
    Operator,
    /// Decides interrupts (as the key's user, among the interrupt's approvers).
    Approver,
    /// Registers workflows, manages webhooks; everything an operator does.
    Admin,
}

impl Role {
    /// The role's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Viewer => "viewer",
            Self::Operator => "operator",
            Self::Approver => "approver",
            Self::Admin => "admin",
        }
    }

    /// Parses a role's name.
    pub fn parse(text: &str) -> Option<Self> {
        [Self::Viewer, Self::Operator, Self::Approver, Self::Admin].into_iter().find(|role| role.as_str() == text)
    }
}

/// A key as created: the stored part and the secret, which exists only here.
#[derive(Debug)]
pub struct NewKey {
    /// What the store keeps.
    pub key: ApiKey,
    /// `sw_<id>_<secret>`: what the caller sends as `Authorization: Bearer …`.
    pub secret: String,
}

/// Why a key could not be made.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// A role that does not exist, or a namespace or user that is empty.
    #[error("{0}")]
    Invalid(String),
    /// The operating system gave no randomness.
    #[error("no randomness for a key: {0}")]
    Random(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] stepwright_core::StoreError),
}

/// The hash a key is found by.
pub fn secret_hash(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

/// Makes a key, stores its hash, and returns its secret (shown once) with what was stored.
pub async fn create_key(
    store: &dyn ServerStore,
    namespace: &str,
    user: &str,
    roles: &[String],
    expires_at: Option<Timestamp>,
    now: Timestamp,
) -> Result<NewKey, KeyError> {
    if namespace.is_empty() || user.is_empty() {
        return Err(KeyError::Invalid("a key needs a namespace and a user".into()));
    }
    if roles.is_empty() {
        return Err(KeyError::Invalid("a key needs at least one role (viewer, operator, approver, admin)".into()));
    }
    if let Some(unknown) = roles.iter().find(|role| Role::parse(role).is_none()) {
        return Err(KeyError::Invalid(format!(
            "unknown role {unknown:?}: the roles are viewer, operator, approver and admin"
        )));
    }
    let mut random = [0u8; 38];
    getrandom::fill(&mut random).map_err(|e| KeyError::Random(e.to_string()))?;
    let id = format!("swk{}", hex::encode(&random[..6]));
    let secret = format!("sw_{id}_{}", hex::encode(&random[6..]));
    let key = ApiKey {
        id,
        namespace: namespace.to_owned(),
        user: user.to_owned(),
        roles: roles.to_vec(),
        created_at: now,
        expires_at,
        revoked_at: None,
        last_used_at: None,
    };
    store.create_key(key.clone(), secret_hash(&secret)).await?;
    Ok(NewKey { key, secret })
}

/// Who a request is from, as its key says.
#[derive(Debug, Clone)]
pub struct Principal {
    /// The key.
    pub key: Arc<ApiKey>,
}

impl Principal {
    /// The namespace every query of the request is confined to.
    pub fn namespace(&self) -> &str {
        &self.key.namespace
    }

    /// Whether the key has `role` (an admin has every role but approver's: a decision is a
    /// person's and is given to the key that says so).
    pub fn has(&self, role: Role) -> bool {
        let named = |r: Role| self.key.roles.iter().any(|name| name == r.as_str());
        match role {
            Role::Viewer => !self.key.roles.is_empty(),
            Role::Operator => named(Role::Operator) || named(Role::Admin),
            Role::Approver => named(Role::Approver),
            Role::Admin => named(Role::Admin),
        }
    }

    /// `403` unless the key has `role`.
    pub fn require(&self, role: Role) -> Result<(), ApiError> {
        if self.has(role) {
            Ok(())
        } else {
            Err(ApiError::forbidden(format!("this key ({}) does not have the {} role", self.key.id, role.as_str())))
        }
    }

    /// The identity runs are started and decisions taken with.
    pub fn caller(&self) -> Caller {
        Caller {
            tenant: Some(self.key.namespace.clone()),
            user: Some(self.key.user.clone()),
            roles: self.key.roles.clone(),
            ..Caller::default()
        }
    }

    /// How the audit log names the caller.
    pub fn actor(&self) -> String {
        format!("{} (key {})", self.key.user, self.key.id)
    }
}

impl FromRequestParts<Arc<Shared>> for Principal {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, shared: &Arc<Shared>) -> Result<Self, Self::Rejection> {
        let header = parts
            .headers
            .get(header::AUTHORIZATION)
            .ok_or_else(|| ApiError::unauthorized("no Authorization header: send `Authorization: Bearer <api key>`"))?;
        let secret = header
            .to_str()
            .ok()
            .and_then(|value| value.strip_prefix("Bearer "))
            .map(str::trim)
            .ok_or_else(|| ApiError::unauthorized("the Authorization header is not `Bearer <api key>`"))?;
        let principal = shared.authenticate(secret).await?;
        shared.limits.check_rate(&principal.key.id)?;
        Ok(principal)
    }
}
