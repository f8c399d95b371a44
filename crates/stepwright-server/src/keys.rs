//! API keys: made here (shown once), kept as a SHA-256 hash, and turned back into a
//! [`Principal`] on every request. The key alone decides who the caller is.

use std::sync::Arc;

use axum::http::header;
use sha2::{Digest, Sha256};
use stepwright_core::{Caller, Timestamp};
use stepwright_store::ServerStore;
use stepwright_store::control::ApiKey;

use crate::problem::ApiError;

pub use stepwright_api::Role;

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
        return Err(KeyError::Invalid(
            "a key needs at least one role (viewer, operator, approver, admin, worker)".into(),
        ));
    }
    let known = |role: &str| {
        Role::parse(role).is_some()
            || role.strip_prefix(WORKER_SCOPE).is_some_and(|p| !p.is_empty() && !p.contains(char::is_whitespace))
            || custom_role(role).is_some()
    };
    if let Some(unknown) = roles.iter().find(|role| !known(role)) {
        return Err(KeyError::Invalid(format!(
            "unknown role {unknown:?}: the roles are viewer, operator, approver, admin and worker (or              worker:<queue pattern>); a role of your own, as approver lists name it, is given as role:NAME              (approvers: [\"role:lead\"] is met by --role role:lead)"
        )));
    }
    let (id, secret) = fresh_secret("swk")?;
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

/// A fresh id (`{prefix}` and 12 hex digits) and its secret (`sw_<id>_<64 hex digits>`).
fn fresh_secret(prefix: &str) -> Result<(String, String), KeyError> {
    let mut random = [0u8; 38];
    getrandom::fill(&mut random).map_err(|e| KeyError::Random(e.to_string()))?;
    let id = format!("{prefix}{}", hex::encode(&random[..6]));
    let secret = format!("sw_{id}_{}", hex::encode(&random[6..]));
    Ok((id, secret))
}

/// How long a browser session lasts (at most: never past its key's expiry).
pub const SESSION_FOR: std::time::Duration = std::time::Duration::from_secs(12 * 3600);

/// The cookie a browser session's secret is kept in.
pub const SESSION_COOKIE: &str = "stepwright_session";

/// The header a request authenticated by the session cookie must carry to change anything:
/// a page of another site can make a browser send the cookie, but not this header.
pub const CSRF_HEADER: &str = "x-stepwright-csrf";

/// Signs a browser in with a key: a key of its own, `{key id}.s…`, with the key's namespace,
/// user and roles, that lasts [`SESSION_FOR`] (or until the key expires) and is revoked with
/// the key. Its secret goes into an HttpOnly cookie, never to the page's scripts.
pub async fn create_session(store: &dyn ServerStore, key: &ApiKey, now: Timestamp) -> Result<NewKey, KeyError> {
    let (suffix, secret) = fresh_secret(&format!("{}.s", key.id))?;
    let until = now.plus(SESSION_FOR);
    let session = ApiKey {
        id: suffix,
        namespace: key.namespace.clone(),
        user: key.user.clone(),
        roles: key.roles.clone(),
        created_at: now,
        expires_at: Some(key.expires_at.map_or(until, |expires| expires.min(until))),
        revoked_at: None,
        last_used_at: None,
    };
    store.create_key(session.clone(), secret_hash(&secret)).await?;
    Ok(NewKey { key: session, secret })
}

/// The prefix of a role an organisation names itself, spelt as a workflow's approver lists
/// spell it: a key (or a provider group) with `role:lead` meets `approvers: ["role:lead"]`.
pub const CUSTOM_ROLE: &str = "role:";

/// The name of a role of one's own (`role:lead` → `lead`): not empty, no whitespace or
/// colon, and not a built-in role's name (whose powers it would seem to give).
pub fn custom_role(role: &str) -> Option<&str> {
    let name = role.strip_prefix(CUSTOM_ROLE)?;
    let fits = !name.is_empty() && !name.contains(|c: char| c.is_whitespace() || c == ':');
    (fits && Role::parse(name).is_none()).then_some(name)
}

/// The role prefix that limits a worker key to queues: `worker:py-*`.
pub const WORKER_SCOPE: &str = "worker:";

/// Whether `text` matches `pattern`, where `*` matches any run of characters.
fn glob_matches(pattern: &str, text: &str) -> bool {
    let Some((first, rest)) = pattern.split_once('*') else { return pattern == text };
    let Some(mut left) = text.strip_prefix(first) else { return false };
    let parts: Vec<&str> = rest.split('*').collect();
    for (i, part) in parts.iter().enumerate() {
        if i == parts.len() - 1 {
            return left.len() >= part.len() && left.ends_with(part);
        }
        match left.find(part) {
            Some(at) => left = &left[at + part.len()..],
            None => return false,
        }
    }
    true
}

/// The role that marks a key as an approval link's, naming the one interrupt it decides:
/// `link:<run id>.<interrupt id>`. A link's key is refused everywhere but the link's own
/// endpoints (`/v1/link`), and its roles are otherwise the key's that made it.
pub const LINK_SCOPE: &str = "link:";

/// The interrupt an approval link's key is for (`<run id>.<interrupt id>`), if it is one.
pub fn link_scope(key: &ApiKey) -> Option<&str> {
    key.roles.iter().find_map(|role| role.strip_prefix(LINK_SCOPE))
}

/// Makes an approval link for one interrupt: a key of its own, `{key id}.l…`, deciding as
/// the key's user with its roles, lasting `lasts` (never past the key's expiry), revoked with
/// the key and once it is used.
pub async fn create_link(
    store: &dyn ServerStore,
    key: &ApiKey,
    interrupt: &str,
    now: Timestamp,
    lasts: std::time::Duration,
) -> Result<NewKey, KeyError> {
    let (id, secret) = fresh_secret(&format!("{}.l", key.id))?;
    let until = now.plus(lasts);
    let mut roles: Vec<String> = key.roles.iter().filter(|role| !role.starts_with(LINK_SCOPE)).cloned().collect();
    roles.push(format!("{LINK_SCOPE}{interrupt}"));
    let link = ApiKey {
        id,
        namespace: key.namespace.clone(),
        user: key.user.clone(),
        roles,
        created_at: now,
        expires_at: Some(key.expires_at.map_or(until, |expires| expires.min(until))),
        revoked_at: None,
        last_used_at: None,
    };
    store.create_key(link.clone(), secret_hash(&secret)).await?;
    Ok(NewKey { key: link, secret })
}

/// Signs in a person an identity provider vouched for: a session key of its own, `swo…`,
/// with the namespace and roles the provider's groups map to, lasting [`SESSION_FOR`].
pub async fn create_provider_session(
    store: &dyn ServerStore,
    namespace: &str,
    user: &str,
    roles: Vec<String>,
    now: Timestamp,
) -> Result<NewKey, KeyError> {
    let (id, secret) = fresh_secret("swo")?;
    let session = ApiKey {
        id,
        namespace: namespace.to_owned(),
        user: user.to_owned(),
        roles,
        created_at: now,
        expires_at: Some(now.plus(SESSION_FOR)),
        revoked_at: None,
        last_used_at: None,
    };
    store.create_key(session.clone(), secret_hash(&secret)).await?;
    Ok(NewKey { key: session, secret })
}

/// The value of cookie `name` in the request's `Cookie` headers.
pub(crate) fn cookie<'a>(headers: &'a axum::http::HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value)
}

/// Who a request is from, as its key says.
#[derive(Debug, Clone)]
pub struct Principal {
    /// The key (a browser session's own key, when it came in the session cookie).
    pub key: Arc<ApiKey>,
    /// Whether the key came in the session cookie rather than an `Authorization` header.
    pub by_cookie: bool,
}

impl Principal {
    /// The namespace every query of the request is confined to.
    pub fn namespace(&self) -> &str {
        &self.key.namespace
    }

    /// Whether the key has `role` (an admin has every role but approver's and worker's: a
    /// decision is a person's and claiming tasks a machine's, each given to the key that
    /// says so).
    pub fn has(&self, role: Role) -> bool {
        let named = |r: Role| self.key.roles.iter().any(|name| name == r.as_str());
        match role {
            Role::Viewer => !self.key.roles.is_empty(),
            Role::Operator => named(Role::Operator) || named(Role::Admin),
            Role::Approver => named(Role::Approver),
            Role::Admin => named(Role::Admin),
            // A worker key is a machine's, given explicitly (as an approver's is a person's).
            Role::Worker => named(Role::Worker) || !self.queue_patterns().is_empty(),
        }
    }

    /// The queue patterns a `worker:<pattern>` key is limited to (empty: no such limit).
    fn queue_patterns(&self) -> Vec<&str> {
        self.key.roles.iter().filter_map(|role| role.strip_prefix(WORKER_SCOPE)).collect()
    }

    /// `403` unless the key may work `queue`: a `worker` key any queue, a
    /// `worker:<pattern>` key those its patterns match (`*` matches any run of characters).
    pub fn require_queue(&self, queue: &str) -> Result<(), ApiError> {
        self.require(Role::Worker)?;
        let named = self.key.roles.iter().any(|r| r == Role::Worker.as_str());
        if named || self.queue_patterns().iter().any(|pattern| glob_matches(pattern, queue)) {
            Ok(())
        } else {
            Err(ApiError::forbidden(format!(
                "this key ({}) works only the queues {}, not {queue:?}",
                self.key.id,
                self.queue_patterns().join(", ")
            )))
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
            // A role of one's own is the caller's by its name (`role:lead` meets an approver
            // list's `role:lead` as `lead`); a link's scope is no role.
            roles: self
                .key
                .roles
                .iter()
                .filter(|role| !role.starts_with(LINK_SCOPE))
                .map(|role| custom_role(role).unwrap_or(role).to_owned())
                .collect(),
            ..Caller::default()
        }
    }

    /// How the audit log names the caller.
    pub fn actor(&self) -> String {
        format!("{} (key {})", self.key.user, self.key.id)
    }
}

#[cfg(test)]
mod tests {
    use super::glob_matches;

    #[test]
    fn queue_patterns_match_with_stars() {
        assert!(glob_matches("py", "py"));
        assert!(!glob_matches("py", "py-2"));
        assert!(glob_matches("py-*", "py-2"));
        assert!(glob_matches("py-*", "py-"));
        assert!(!glob_matches("py-*", "ts-1"));
        assert!(glob_matches("*-gpu", "py-gpu"));
        assert!(glob_matches("a*b*c", "a-x-b-y-c"));
        assert!(!glob_matches("a*b*c", "a-x-c"));
        assert!(glob_matches("*", "anything"));
    }
}
