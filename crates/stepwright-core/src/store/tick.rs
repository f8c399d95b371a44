//! What both a schedule and an event trigger are named by and what each of their fires did:
//! a leaf the schedule table and the event log both use.

use serde::{Deserialize, Serialize};

use crate::ids::RunId;

/// A schedule's name within its tenant (`workflow/schedule` for those a workflow file
/// declares).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ScheduleKey {
    /// Its tenant (`None`: a deployment without tenants).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// Its name, unique within the tenant.
    pub name: String,
}

impl ScheduleKey {
    /// The key of `name` in `tenant`.
    pub fn new(tenant: Option<&str>, name: &str) -> Self {
        Self { tenant: tenant.map(str::to_owned), name: name.to_owned() }
    }
}

impl std::fmt::Display for ScheduleKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.tenant {
            Some(tenant) => write!(f, "{tenant}:{}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

/// What a tick did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum TickOutcome {
    /// It started this run.
    Started {
        /// The run.
        run: RunId,
    },
    /// It started nothing, for this reason.
    Skipped {
        /// `overlap`, `buffer_full`, `outside_catchup_window`, `paused`, `dst_gap`, or
        /// `start_failed: why` (its run could not be made: the definition gone, the input
        /// not rendering or not fitting).
        reason: String,
    },
}
