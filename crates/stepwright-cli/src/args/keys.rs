//! `keys` and `serve --oidc-…`: who may call the server.

#[allow(clippy::wildcard_imports)] // The argument types every group shares.
use super::*;

/// Sign-in to the dashboard through an OpenID Connect provider.
#[derive(clap::Args)]
pub(crate) struct OidcArgs {
    /// The OpenID Connect issuer people sign in with (its metadata is read from
    /// `{issuer}/.well-known/openid-configuration`); needs --oidc-client-id and --oidc-map.
    #[arg(long, value_name = "URL", requires_all = ["oidc_client_id", "oidc_map"])]
    pub(crate) oidc_issuer: Option<String>,
    /// This server's client id at the provider.
    #[arg(long, value_name = "ID", requires = "oidc_issuer")]
    pub(crate) oidc_client_id: Option<String>,
    /// The environment variable holding the client secret (a confidential client); none: a
    /// public client, protected by PKCE.
    #[arg(long, value_name = "VAR", requires = "oidc_issuer")]
    pub(crate) oidc_client_secret_env: Option<String>,
    /// The callback URL registered at the provider, `https://HOST/v1/auth/oidc/callback`
    /// (default: made from the address the browser reached).
    #[arg(long, value_name = "URL", requires = "oidc_issuer")]
    pub(crate) oidc_redirect_url: Option<String>,
    /// A scope to ask for besides `openid` (repeatable; default: email, profile).
    #[arg(long = "oidc-scope", value_name = "SCOPE", requires = "oidc_issuer")]
    pub(crate) oidc_scopes: Vec<String>,
    /// The ID token claim that lists the person's groups.
    #[arg(long, value_name = "CLAIM", default_value = "groups")]
    pub(crate) oidc_groups_claim: String,
    /// A provider group's namespace and roles, `GROUP=NAMESPACE:ROLE[+ROLE…]` (repeatable;
    /// the first that matches a person's groups decides the namespace); a role of your own is
    /// `role:NAME`, as approver lists write it (`leads=acme:approver+role:lead`).
    #[arg(long = "oidc-map", value_name = "MAPPING", requires = "oidc_issuer")]
    pub(crate) oidc_map: Vec<stepwright::server::GroupMapping>,
    /// Who may sign in at all: a user (email, username or subject) or `group:NAME`
    /// (repeatable; none: anyone a mapping gives roles).
    #[arg(long = "oidc-allow", value_name = "WHO", requires = "oidc_issuer")]
    pub(crate) oidc_allow: Vec<String>,
}

/// `keys` subcommands.
#[derive(Subcommand)]
pub(crate) enum KeysCommand {
    /// Create a key; its secret is printed once and stored only as a hash.
    Create {
        /// The namespace (tenant) every request with the key is confined to.
        #[arg(long)]
        namespace: String,
        /// The user it acts as (decisions are taken, runs started, as this user).
        #[arg(long)]
        user: String,
        /// A role: viewer, operator, approver, admin, worker, `worker:<queue pattern>` (a step
        /// worker limited to the queues the pattern matches, `*` any run of characters), or
        /// `role:NAME`, a role of your own that approver lists name (`approvers: ["role:lead"]`
        /// is met by `--role approver --role role:lead`); repeatable.
        #[arg(long = "role", required = true)]
        roles: Vec<String>,
        /// It is refused after this many days.
        #[arg(long, value_name = "DAYS")]
        expires_in_days: Option<u32>,
        /// Print one JSON object (with the secret).
        #[arg(long)]
        json: bool,
    },
    /// The keys (never their secrets), oldest first.
    List {
        /// Only this namespace's.
        #[arg(long)]
        namespace: Option<String>,
        /// JSON lines.
        #[arg(long)]
        json: bool,
    },
    /// Revoke a key by its id: every request with it is refused (within 5 seconds on a
    /// running server).
    Revoke {
        /// The key's id (`swk…`).
        id: String,
    },
}
