//! Sign-in through an OpenID Connect provider: the authorization code flow with PKCE (S256).
//! The provider's groups decide the namespace and roles (`--oidc-map`), an allow-list may
//! narrow who signs in at all (`--oidc-allow`), and a person who signs in gets the same
//! browser session a key gives (a key of its own in the HttpOnly cookie, 12 hours).
//!
//! The ID token is checked here — signature against the provider's published keys (JWKS),
//! issuer, audience, expiry, and the nonce this server chose — never trusted as sent.

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use base64::Engine as _;
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::keys::Role;

/// How an OpenID Connect provider is used.
#[derive(Debug, Clone, Default)]
pub struct OidcConfig {
    /// The issuer; its metadata is read from `{issuer}/.well-known/openid-configuration`.
    pub issuer: String,
    /// This server's client id at the provider.
    pub client_id: String,
    /// Its client secret, for a confidential client (sent with HTTP Basic); none: a public
    /// client, which PKCE protects.
    pub client_secret: Option<String>,
    /// The callback URL registered at the provider (`https://host/v1/auth/oidc/callback`);
    /// none: made from the request's `Host` (and `X-Forwarded-Proto`).
    pub redirect_url: Option<String>,
    /// The scopes asked for (`openid` is always asked).
    pub scopes: Vec<String>,
    /// The claim holding the person's groups.
    pub groups_claim: String,
    /// Which groups give which namespace and roles, in order of precedence.
    pub mappings: Vec<GroupMapping>,
    /// Who may sign in at all: users (their email, username or subject) and `group:NAME`s.
    /// Empty: anyone a mapping gives a role.
    pub allow: Vec<String>,
}

/// A provider group's namespace and roles: `--oidc-map GROUP=NAMESPACE:ROLE[+ROLE…]`, each
/// role a built-in one or one of the organisation's own (`leads=acme:approver+role:lead`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMapping {
    /// The provider's group.
    pub group: String,
    /// The namespace its members work in.
    pub namespace: String,
    /// The roles they get there, as a key holds them (`approver`, `role:lead`).
    pub roles: Vec<String>,
}

impl std::str::FromStr for GroupMapping {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let shape = || format!("{text:?} is not GROUP=NAMESPACE:ROLE[+ROLE…] (e.g. approvers=acme:approver+viewer)");
        let (group, rest) = text.split_once('=').ok_or_else(shape)?;
        let (namespace, roles) = rest.split_once(':').ok_or_else(shape)?;
        if group.is_empty() || namespace.is_empty() || roles.is_empty() {
            return Err(shape());
        }
        let roles = roles
            .split('+')
            .map(|name| match Role::parse(name) {
                // Claiming step tasks is a machine's, by a key of its own, not a person's.
                Some(Role::Worker) => Err(format!("{text:?}: `worker` is a step worker's key's role, not a person's")),
                Some(role) => Ok(role.as_str().to_owned()),
                None if crate::keys::custom_role(name).is_some() => Ok(name.to_owned()),
                None => Err(format!(
                    "{text:?}: unknown role {name:?} (the roles are viewer, operator, approver and admin, \
                     and role:NAME for a role of your own that approver lists name)"
                )),
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self { group: group.to_owned(), namespace: namespace.to_owned(), roles })
    }
}

/// Who the provider says signed in, once checked and mapped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SignedIn {
    pub(crate) user: String,
    pub(crate) subject: String,
    pub(crate) groups: Vec<String>,
    pub(crate) namespace: String,
    pub(crate) roles: Vec<String>,
}

/// Why a sign-in through the provider failed (shown to the person, so without secrets).
#[derive(Debug, thiserror::Error)]
pub(crate) enum OidcError {
    /// The provider could not be reached or answered something unusable.
    #[error("the identity provider: {0}")]
    Provider(String),
    /// The provider refused or the person cancelled.
    #[error("the identity provider answered {0}")]
    Refused(String),
    /// The flow's state does not match: an old, replayed or forged callback.
    #[error("this sign-in was not started here, or took too long (start again)")]
    State,
    /// The ID token did not check out.
    #[error("the ID token is not valid: {0}")]
    Token(String),
    /// The person may not sign in.
    #[error("{0}")]
    NotAllowed(String),
}

/// The provider's metadata (the parts used).
#[derive(Debug, Clone, Deserialize)]
struct Metadata {
    issuer: String,
    authorization_endpoint: String,
    token_endpoint: String,
    jwks_uri: String,
}

/// How long the provider's metadata and keys are trusted before being read again.
const METADATA_FOR: Duration = Duration::from_secs(600);

/// A configured provider with its metadata and keys, read when first needed.
pub(crate) struct Oidc {
    pub(crate) config: OidcConfig,
    http: reqwest::Client,
    cached: Mutex<Option<(Metadata, JwkSet, Instant)>>,
}

/// What a started sign-in keeps (in a short-lived cookie) until its callback.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Pending {
    pub(crate) state: String,
    pub(crate) nonce: String,
    pub(crate) verifier: String,
}

impl Pending {
    /// Fresh random values.
    pub(crate) fn new() -> Result<Self, OidcError> {
        let random = |n: usize| -> Result<String, OidcError> {
            let mut bytes = vec![0u8; n];
            getrandom::fill(&mut bytes).map_err(|e| OidcError::Provider(format!("no randomness: {e}")))?;
            Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes))
        };
        Ok(Self { state: random(24)?, nonce: random(24)?, verifier: random(48)? })
    }

    /// The cookie value.
    pub(crate) fn encode(&self) -> String {
        format!("{}.{}.{}", self.state, self.nonce, self.verifier)
    }

    /// Back from the cookie value.
    pub(crate) fn decode(text: &str) -> Option<Self> {
        let mut parts = text.split('.');
        let (state, nonce, verifier) = (parts.next()?, parts.next()?, parts.next()?);
        parts.next().is_none().then(|| Self { state: state.into(), nonce: nonce.into(), verifier: verifier.into() })
    }

    /// The PKCE challenge: base64url(SHA-256(verifier)).
    fn challenge(&self) -> String {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(Sha256::digest(self.verifier.as_bytes()))
    }
}

impl Oidc {
    pub(crate) fn new(config: OidcConfig) -> Self {
        // The TLS provider every client here uses (a no-op when the process installed it).
        let _ = rustls::crypto::ring::default_provider().install_default();
        Self { config, http: reqwest::Client::new(), cached: Mutex::new(None) }
    }

    /// The metadata and keys, read again when old or when `refresh` (an unknown key id).
    async fn metadata(&self, refresh: bool) -> Result<(Metadata, JwkSet), OidcError> {
        if !refresh {
            let cached = self.cached.lock().expect("poisoned");
            if let Some((metadata, keys, at)) = cached.as_ref().filter(|(_, _, at)| at.elapsed() < METADATA_FOR) {
                let _ = at;
                return Ok((metadata.clone(), keys.clone()));
            }
        }
        let url = format!("{}/.well-known/openid-configuration", self.config.issuer.trim_end_matches('/'));
        let metadata: Metadata = self.get_json(&url).await?;
        if metadata.issuer.trim_end_matches('/') != self.config.issuer.trim_end_matches('/') {
            return Err(OidcError::Provider(format!(
                "its metadata names the issuer {:?}, not {:?}",
                metadata.issuer, self.config.issuer
            )));
        }
        let keys: JwkSet = self.get_json(&metadata.jwks_uri).await?;
        *self.cached.lock().expect("poisoned") = Some((metadata.clone(), keys.clone(), Instant::now()));
        Ok((metadata, keys))
    }

    async fn get_json<T: serde::de::DeserializeOwned>(&self, url: &str) -> Result<T, OidcError> {
        let response = self
            .http
            .get(url)
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .map_err(|e| OidcError::Provider(format!("reading {url}: {e}")))?;
        if !response.status().is_success() {
            return Err(OidcError::Provider(format!("reading {url}: HTTP {}", response.status())));
        }
        response.json().await.map_err(|e| OidcError::Provider(format!("reading {url}: {e}")))
    }

    /// Where to send the browser to sign in.
    pub(crate) async fn authorization_url(&self, pending: &Pending, redirect: &str) -> Result<String, OidcError> {
        let (metadata, _) = self.metadata(false).await?;
        let mut url = reqwest::Url::parse(&metadata.authorization_endpoint)
            .map_err(|e| OidcError::Provider(format!("its authorization endpoint: {e}")))?;
        let mut scopes: Vec<&str> = vec!["openid"];
        scopes.extend(self.config.scopes.iter().map(String::as_str).filter(|s| *s != "openid"));
        url.query_pairs_mut()
            .append_pair("response_type", "code")
            .append_pair("client_id", &self.config.client_id)
            .append_pair("redirect_uri", redirect)
            .append_pair("scope", &scopes.join(" "))
            .append_pair("state", &pending.state)
            .append_pair("nonce", &pending.nonce)
            .append_pair("code_challenge", &pending.challenge())
            .append_pair("code_challenge_method", "S256");
        Ok(url.into())
    }

    /// Exchanges the code, checks the ID token, and maps the person to a namespace and roles.
    pub(crate) async fn finish(&self, code: &str, pending: &Pending, redirect: &str) -> Result<SignedIn, OidcError> {
        let (metadata, _) = self.metadata(false).await?;
        let mut form = reqwest::Url::parse("form:").expect("a URL");
        form.query_pairs_mut()
            .append_pair("grant_type", "authorization_code")
            .append_pair("code", code)
            .append_pair("redirect_uri", redirect)
            .append_pair("code_verifier", &pending.verifier)
            .append_pair("client_id", &self.config.client_id);
        let mut request = self
            .http
            .post(&metadata.token_endpoint)
            .timeout(Duration::from_secs(10))
            .header(reqwest::header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header(reqwest::header::ACCEPT, "application/json")
            .body(form.query().unwrap_or_default().to_owned());
        if let Some(secret) = &self.config.client_secret {
            request = request.basic_auth(form_encode(&self.config.client_id), Some(form_encode(secret)));
        }
        let response = request.send().await.map_err(|e| OidcError::Provider(format!("the token endpoint: {e}")))?;
        let status = response.status();
        let body: Value = response.json().await.unwrap_or(Value::Null);
        if !status.is_success() {
            let error = body["error"].as_str().unwrap_or("an error");
            return Err(OidcError::Refused(format!("{error} at the token endpoint (HTTP {status})")));
        }
        let token = body["id_token"].as_str().ok_or_else(|| OidcError::Token("the answer has no id_token".into()))?;
        let claims = self.check(token, &pending.nonce).await?;
        self.map(&claims)
    }

    /// The ID token's claims, once its signature, issuer, audience, expiry and nonce hold.
    async fn check(&self, token: &str, nonce: &str) -> Result<Value, OidcError> {
        let header = jsonwebtoken::decode_header(token).map_err(|e| OidcError::Token(e.to_string()))?;
        if !matches!(
            header.alg,
            Algorithm::RS256
                | Algorithm::RS384
                | Algorithm::RS512
                | Algorithm::PS256
                | Algorithm::PS384
                | Algorithm::PS512
                | Algorithm::ES256
                | Algorithm::ES384
                | Algorithm::EdDSA
        ) {
            return Err(OidcError::Token(format!("it is signed with {:?}, not a public-key algorithm", header.alg)));
        }
        let find = |keys: &JwkSet| match &header.kid {
            Some(kid) => keys.find(kid).cloned(),
            None => keys.keys.first().cloned(),
        };
        let (metadata, keys) = self.metadata(false).await?;
        let jwk = match find(&keys) {
            Some(jwk) => jwk,
            // The provider may have rotated its keys since they were read.
            None => find(&self.metadata(true).await?.1)
                .ok_or_else(|| OidcError::Token("no published key has its key id".into()))?,
        };
        let key = DecodingKey::from_jwk(&jwk).map_err(|e| OidcError::Token(e.to_string()))?;
        let mut validation = Validation::new(header.alg);
        validation.set_issuer(&[metadata.issuer.as_str()]);
        validation.set_audience(&[self.config.client_id.as_str()]);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        validation.leeway = 60;
        let claims = jsonwebtoken::decode::<Value>(token, &key, &validation)
            .map_err(|e| OidcError::Token(e.to_string()))?
            .claims;
        if claims["nonce"].as_str() != Some(nonce) {
            return Err(OidcError::Token("its nonce is not the one this sign-in sent".into()));
        }
        Ok(claims)
    }

    /// The person's user name, groups, namespace and roles, by the allow-list and mappings.
    pub(crate) fn map(&self, claims: &Value) -> Result<SignedIn, OidcError> {
        let subject = claims["sub"].as_str().unwrap_or_default().to_owned();
        let email = claims["email"].as_str().filter(|_| claims["email_verified"] != Value::Bool(false));
        let user = email.or_else(|| claims["preferred_username"].as_str()).unwrap_or(&subject).to_owned();
        let groups: Vec<String> = match &claims[self.config.groups_claim.as_str()] {
            Value::Array(items) => items.iter().filter_map(Value::as_str).map(str::to_owned).collect(),
            Value::String(one) => vec![one.clone()],
            _ => Vec::new(),
        };
        let allow = &self.config.allow;
        let allowed = allow.is_empty()
            || allow.iter().any(|entry| match entry.strip_prefix("group:") {
                Some(group) => groups.iter().any(|g| g == group),
                None => *entry == user || *entry == subject,
            });
        if !allowed {
            return Err(OidcError::NotAllowed(format!("{user} is not on this server's allow-list")));
        }
        let mapped: Vec<&GroupMapping> = self.config.mappings.iter().filter(|m| groups.contains(&m.group)).collect();
        let namespace = mapped.first().map(|m| m.namespace.clone()).ok_or_else(|| {
            OidcError::NotAllowed(format!(
                "none of {user}'s groups ({}) gives a namespace and roles here",
                if groups.is_empty() { "none".to_owned() } else { groups.join(", ") }
            ))
        })?;
        // Every mapping of the person's groups to that namespace adds its roles.
        let roles: BTreeSet<&str> = mapped
            .iter()
            .filter(|m| m.namespace == namespace)
            .flat_map(|m| m.roles.iter().map(String::as_str))
            .collect();
        // The built-in roles in their order, then the organisation's own by name.
        let order = [Role::Viewer, Role::Operator, Role::Approver, Role::Admin];
        let mut roles: Vec<String> = order
            .iter()
            .map(|r| r.as_str())
            .filter(|r| roles.contains(r))
            .map(str::to_owned)
            .collect::<Vec<_>>()
            .into_iter()
            .chain(roles.iter().filter(|r| crate::keys::custom_role(r).is_some()).map(|r| (*r).to_owned()))
            .collect();
        roles.dedup();
        Ok(SignedIn { user, subject, groups, namespace, roles })
    }
}

/// `application/x-www-form-urlencoded` for a client id or secret in HTTP Basic (RFC 6749 §2.3.1).
fn form_encode(text: &str) -> String {
    let mut url = reqwest::Url::parse("form:").expect("a URL");
    url.query_pairs_mut().append_pair("v", text);
    url.query().unwrap_or_default().trim_start_matches("v=").to_owned()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn oidc(mappings: &[&str], allow: &[&str]) -> Oidc {
        Oidc::new(OidcConfig {
            issuer: "http://127.0.0.1:1".into(),
            client_id: "stepwright".into(),
            groups_claim: "groups".into(),
            mappings: mappings.iter().map(|m| m.parse().unwrap()).collect(),
            allow: allow.iter().map(|a| (*a).to_owned()).collect(),
            ..OidcConfig::default()
        })
    }

    #[test]
    fn mappings_parse_with_their_roles_and_refuse_what_is_not_one() {
        let mapping: GroupMapping = "approvers=acme:approver+viewer".parse().unwrap();
        assert_eq!((mapping.group.as_str(), mapping.namespace.as_str()), ("approvers", "acme"));
        assert_eq!(mapping.roles, ["approver", "viewer"]);
        let leads: GroupMapping = "leads=acme:approver+role:lead".parse().unwrap();
        assert_eq!(leads.roles, ["approver", "role:lead"], "a role of the organisation's own");
        for bad in ["x=acme:role:", "x=acme:role:admin", "x=acme:role:a b"] {
            assert!(bad.parse::<GroupMapping>().is_err(), "{bad}");
        }
        for bad in ["approvers", "approvers=acme", "=acme:viewer", "ops=acme:", "ops=acme:root"] {
            assert!(bad.parse::<GroupMapping>().is_err(), "{bad}");
        }
        assert!("ops=acme:root".parse::<GroupMapping>().unwrap_err().contains("unknown role \"root\""));
    }

    #[test]
    fn groups_give_the_first_mapped_namespace_and_every_role_it_maps() {
        let provider = oidc(&["approvers=acme:approver", "staff=acme:viewer", "ops=globex:operator"], &[]);
        let claims = json!({ "sub": "u1", "email": "olga@example.com", "groups": ["ops", "staff", "approvers"] });
        let signed = provider.map(&claims).unwrap();
        assert_eq!(signed.user, "olga@example.com");
        assert_eq!(signed.namespace, "acme", "the first mapping in order decides the namespace");
        assert_eq!(signed.roles, ["viewer", "approver"]);
        let with_leads = oidc(&["staff=acme:viewer", "leads=acme:approver+role:lead"], &[]);
        let lead = json!({ "sub": "u9", "email": "lee@example.com", "groups": ["staff", "leads"] });
        assert_eq!(with_leads.map(&lead).unwrap().roles, ["viewer", "approver", "role:lead"]);
        // An unverified email is not a name: the username, then the subject, is.
        let unverified = json!({ "sub": "u2", "email": "x@example.com", "email_verified": false, "groups": "staff" });
        assert_eq!(provider.map(&unverified).unwrap().user, "u2");
        let named = json!({ "sub": "u3", "preferred_username": "pat", "groups": ["staff"] });
        assert_eq!(provider.map(&named).unwrap().user, "pat");
        let unmapped = json!({ "sub": "u4", "groups": ["visitors"] });
        assert!(provider.map(&unmapped).unwrap_err().to_string().contains("none of u4's groups (visitors)"));
    }

    #[test]
    fn the_allow_list_names_users_and_groups() {
        let provider = oidc(&["staff=acme:viewer"], &["olga@example.com", "group:leads"]);
        let olga = json!({ "sub": "1", "email": "olga@example.com", "groups": ["staff"] });
        let lead = json!({ "sub": "2", "email": "lee@example.com", "groups": ["staff", "leads"] });
        let other = json!({ "sub": "3", "email": "sam@example.com", "groups": ["staff"] });
        assert!(provider.map(&olga).is_ok());
        assert!(provider.map(&lead).is_ok());
        assert!(provider.map(&other).unwrap_err().to_string().contains("not on this server's allow-list"));
    }

    #[test]
    fn pending_sign_ins_round_trip_through_their_cookie_and_make_an_s256_challenge() {
        let pending = Pending::new().unwrap();
        assert_eq!(Pending::decode(&pending.encode()), Some(pending));
        assert_eq!(Pending::decode("a.b"), None);
        // RFC 7636, appendix B.
        let known = Pending {
            state: String::new(),
            nonce: String::new(),
            verifier: "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk".into(),
        };
        assert_eq!(known.challenge(), "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM");
    }
}
