//! Who a run is for: the [`Caller`] (tenant, user, roles), stored with the run and checked by
//! every operation that reads or changes it.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Who started a run: tenant, user, roles and free-form metadata.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Caller {
    /// The tenant: runs, sessions and memory of one tenant are never another's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// The user (an approver's name is checked against it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// The user's roles.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub roles: Vec<String>,
    /// Anything else.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub metadata: Map<String, Value>,
}

impl Caller {
    /// A user in a tenant.
    pub fn user(tenant: Option<&str>, user: &str) -> Self {
        Self { tenant: tenant.map(str::to_owned), user: Some(user.to_owned()), ..Self::default() }
    }

    /// Adds a role.
    #[must_use]
    pub fn with_role(mut self, role: &str) -> Self {
        self.roles.push(role.to_owned());
        self
    }
}
