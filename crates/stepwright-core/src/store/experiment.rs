//! Experiments as a store keeps them (DESIGN §18): one row per experiment — its spec, how it
//! stands and, once it ended, its report — and one per run it recomputed, with the result.
//! An experiment that a crash (or Ctrl-C) stopped goes on from what it kept: the runs it
//! finished are not recomputed again. The spec, results and report are the contract's JSON;
//! the store keeps them as it is given them.

use futures_util::future::BoxFuture;
use serde_json::Value;

use super::StoreError;
use crate::ids::{RunId, Timestamp};

/// How an experiment stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExperimentState {
    /// Started, not ended: its process is at work, or it was stopped and can go on.
    Running,
    /// Every run of its population was recomputed.
    Completed,
    /// Its budget was spent before the last runs.
    BudgetSpent,
    /// A person stopped it: the runs it had not recomputed are left out.
    Cancelled,
}

impl ExperimentState {
    /// As stored.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Completed => "completed",
            Self::BudgetSpent => "budget_spent",
            Self::Cancelled => "cancelled",
        }
    }

    /// From its stored name.
    #[must_use]
    pub fn parse(text: &str) -> Option<Self> {
        [Self::Running, Self::Completed, Self::BudgetSpent, Self::Cancelled].into_iter().find(|s| s.as_str() == text)
    }
}

/// An experiment as kept.
#[derive(Debug, Clone, PartialEq)]
pub struct ExperimentRecord {
    /// Its id (a UUIDv7, as a run's).
    pub id: RunId,
    /// The tenant whose runs it recomputes.
    pub tenant: Option<String>,
    /// Its name (the spec's `experiment`).
    pub name: String,
    /// The workflow whose runs it recomputes.
    pub workflow: String,
    /// The spec it was started with (what going on needs again).
    pub spec: Value,
    /// How it stands.
    pub state: ExperimentState,
    /// When it started.
    pub created_at: Timestamp,
    /// Its report, once it ended.
    pub report: Option<Value>,
    /// Who works on it, while a server does (none: a CLI's, or no one's).
    pub hold: Option<ExperimentHold>,
}

/// Who works on an experiment, and until when: a server holds the experiments it works on
/// and renews the hold as it goes; one whose holder stopped (the hold lapsed, or its process
/// on this host is gone) is taken up by another server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExperimentHold {
    /// The holder (a worker id: host, process, instance).
    pub holder: String,
    /// When the hold lapses unless renewed.
    pub until: Timestamp,
}

/// Where experiments are kept.
pub trait ExperimentStore: Send + Sync + 'static {
    /// Keeps a new experiment (state `running`).
    fn experiment_begin(&self, record: ExperimentRecord) -> BoxFuture<'_, Result<(), StoreError>>;

    /// Keeps what recomputing `run` gave (a run kept once keeps its first result).
    fn experiment_keep(&self, id: RunId, run: RunId, result: Value) -> BoxFuture<'_, Result<(), StoreError>>;

    /// What the experiment kept, run by run.
    fn experiment_kept(&self, id: RunId) -> BoxFuture<'_, Result<Vec<(RunId, Value)>, StoreError>>;

    /// Ends the experiment with its report.
    fn experiment_end(&self, id: RunId, state: ExperimentState, report: Value)
    -> BoxFuture<'_, Result<(), StoreError>>;

    /// Stops a running experiment: its state becomes `cancelled` (the process at work on it
    /// sees so before its next run and ends it with what it kept). False when it is not
    /// running (it ended, or does not exist).
    fn experiment_cancel(&self, id: RunId) -> BoxFuture<'_, Result<bool, StoreError>>;

    /// Moves the hold of a running experiment from `from` (none: no one holds it) to `to`, a
    /// compare-and-set: of two processes taking up one experiment, one does; renewing is
    /// taking from oneself. False when it is not running or not held as `from` says.
    fn experiment_hold(
        &self,
        id: RunId,
        from: Option<String>,
        to: ExperimentHold,
    ) -> BoxFuture<'_, Result<bool, StoreError>>;

    /// The running experiments of every tenant, oldest first, at most `limit`, without their
    /// reports: what a server looks through for ones to take up.
    fn experiments_running(&self, limit: usize) -> BoxFuture<'_, Result<Vec<ExperimentRecord>, StoreError>>;

    /// One experiment (its tenant checked by the caller).
    fn experiment(&self, id: RunId) -> BoxFuture<'_, Result<Option<ExperimentRecord>, StoreError>>;

    /// The newest `limit` experiments of a tenant (all tenants' when `None`), without their
    /// reports.
    fn experiments(
        &self,
        tenant: Option<String>,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<ExperimentRecord>, StoreError>>;
}
