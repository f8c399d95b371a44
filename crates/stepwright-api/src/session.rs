//! Who calls: signing a browser in, the ways to sign in, the caller, liveness.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A sign-in.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SignIn {
    /// The API key to sign in with (`keys create` made it).
    pub api_key: String,
}

/// Who is signed in.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Session {
    /// The namespace every request is confined to.
    pub namespace: String,
    /// The user decisions are taken as.
    pub user: String,
    /// The roles (`viewer`, `operator`, `approver`, `admin`).
    pub roles: Vec<String>,
    /// The key in use: the session's own key when signed in by the cookie.
    pub key_id: String,
    /// When it stops being accepted (µs since the epoch), if ever.
    pub expires_at: Option<i64>,
}
/// How one may sign in.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct AuthMethods {
    /// With an API key (`POST /v1/session`): always.
    pub api_key: bool,
    /// Through the OpenID Connect provider (`GET /v1/auth/oidc/start`), when one is set up.
    pub oidc: bool,
}

/// What the provider sends back. Other parameters it adds (`session_state`, …) are ignored:
/// they are the provider's, not a caller's mistake.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct Callback {
    /// The authorization code.
    #[serde(default)]
    pub code: Option<String>,
    /// The state this server sent.
    #[serde(default)]
    pub state: Option<String>,
    /// Why the provider did not sign the person in.
    #[serde(default)]
    pub error: Option<String>,
    /// More about it.
    #[serde(default)]
    pub error_description: Option<String>,
    /// The issuer (RFC 9207), when the provider says.
    #[serde(default)]
    pub iss: Option<String>,
}
/// Liveness.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Health {
    /// `ok`.
    pub status: String,
    /// The protocol versions the server speaks, by protocol: `{"worker": [1]}` (a step
    /// worker sends its version as `Stepwright-Protocol`).
    pub protocols: Protocols,
}

/// The protocol versions a server speaks.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Protocols {
    /// The step-worker protocol's versions.
    pub worker: Vec<u32>,
}
