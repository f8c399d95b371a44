//! The in-memory store's step tasks: the rows and the rules of `store::task`, under one lock.

use futures_util::future::BoxFuture;
use serde_json::Value;

use super::InMemoryStore;
use crate::ids::{RunId, Timestamp};
use crate::journal::RunStatus;
use crate::store::StoreError;

impl InMemoryStore {
    /// Whether a run is cancelled or asked to be.
    fn cancelling(&self, run: RunId) -> bool {
        self.run(run).is_some_and(|data| {
            let data = data.lock().expect("poisoned");
            data.record.as_ref().is_some_and(|r| r.status == RunStatus::Cancelled || r.cancel.is_some())
        })
    }
}

impl crate::store::task::TaskStore for InMemoryStore {
    fn claim_tasks<'a>(
        &'a self,
        claim: &'a crate::store::task::Claim,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Vec<crate::store::task::StoredTask>, StoreError>> {
        use crate::store::task::{TaskState, rules};
        let mut rows = self.tasks.rows.lock().expect("poisoned");
        for task in rows.values_mut() {
            rules::settle(task, now);
        }
        let mut candidates: Vec<&crate::store::task::StoredTask> =
            rows.values().filter(|t| rules::claimable(t, claim)).collect();
        candidates.sort_by_key(|t| t.created_at);
        let ids: Vec<crate::store::task::TaskId> = candidates.iter().map(|t| t.spec.id.clone()).collect();
        let mut claimed = Vec::new();
        for id in ids {
            if claimed.len() >= claim.max {
                break;
            }
            let (limit, handler, tenant) = {
                let task = &rows[&id];
                (task.spec.concurrency, task.spec.handler.clone(), task.tenant.clone())
            };
            if let Some(limit) = limit {
                let running = rows
                    .values()
                    .filter(|t| t.state == TaskState::Claimed && t.spec.handler == handler && t.tenant == tenant)
                    .count();
                if running >= limit as usize {
                    continue;
                }
            }
            let task = rows.get_mut(&id).expect("listed above");
            rules::lease(task, &claim.worker, now);
            claimed.push(task.clone());
        }
        Box::pin(std::future::ready(Ok(claimed)))
    }

    fn heartbeat_tasks<'a>(
        &'a self,
        leases: &'a [(crate::store::task::TaskLease, Option<Value>)],
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Vec<crate::store::task::Beat>, StoreError>> {
        use crate::store::task::{Beat, rules};
        let runs: Vec<Option<RunId>> = {
            let rows = self.tasks.rows.lock().expect("poisoned");
            leases.iter().map(|(lease, _)| rows.get(&lease.task).map(|t| t.run)).collect()
        };
        let cancelling: Vec<bool> = runs.iter().map(|run| run.is_some_and(|run| self.cancelling(run))).collect();
        let mut rows = self.tasks.rows.lock().expect("poisoned");
        let beats = leases
            .iter()
            .zip(cancelling)
            .map(|((lease, details), cancelled)| match rows.get_mut(&lease.task) {
                Some(task) => rules::beat(task, lease, details.clone(), now, cancelled),
                None => Beat::Lost,
            })
            .collect();
        Box::pin(std::future::ready(Ok(beats)))
    }

    fn answer_task<'a>(
        &'a self,
        lease: &'a crate::store::task::TaskLease,
        answer: crate::store::task::TaskAnswer,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<crate::store::task::TaskState, StoreError>> {
        let (result, after) = {
            let mut rows = self.tasks.rows.lock().expect("poisoned");
            match rows.get_mut(&lease.task) {
                Some(task) => (crate::store::task::rules::answer(task, lease, answer, now), Some(task.clone())),
                None => (Err(StoreError::TaskNotFound(lease.task.clone())), None),
            }
        };
        if let Some(task) = after {
            self.tasks.signals.answered_as(&task);
        }
        Box::pin(std::future::ready(result))
    }

    fn settle_task<'a>(
        &'a self,
        task: &'a crate::store::task::TaskId,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<Option<crate::store::task::StoredTask>, StoreError>> {
        let mut rows = self.tasks.rows.lock().expect("poisoned");
        let found = rows.get_mut(task).map(|row| {
            crate::store::task::rules::settle(row, now);
            row.clone()
        });
        Box::pin(std::future::ready(Ok(found)))
    }

    fn cancelling_among<'a>(
        &'a self,
        tenant: &'a str,
        tasks: &'a [crate::store::task::TaskId],
    ) -> BoxFuture<'a, Result<Vec<crate::store::task::TaskId>, StoreError>> {
        let held: Vec<(crate::store::task::TaskId, RunId)> = {
            let rows = self.tasks.rows.lock().expect("poisoned");
            tasks
                .iter()
                .filter_map(|id| rows.get(id))
                .filter(|t| {
                    t.state == crate::store::task::TaskState::Claimed
                        && t.tenant.as_deref().unwrap_or_default() == tenant
                })
                .map(|t| (t.spec.id.clone(), t.run))
                .collect()
        };
        let cancelling = held.into_iter().filter(|(_, run)| self.cancelling(*run)).map(|(id, _)| id).collect();
        Box::pin(std::future::ready(Ok(cancelling)))
    }

    fn dispatch_for_recompute<'a>(
        &'a self,
        run: RunId,
        path: &'a crate::ids::StepPath,
        attempt: u32,
        spec: &'a crate::store::task::TaskSpec,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let result = (|| {
            let data = self.run(run).ok_or(StoreError::RunNotFound(run))?;
            let data = data.lock().expect("poisoned");
            let record = data.record.as_ref().ok_or(StoreError::RunNotFound(run))?;
            let row = crate::store::task::new_task(spec.clone(), run, path.clone(), attempt, record, now);
            self.tasks.rows.lock().expect("poisoned").entry(spec.id.clone()).or_insert(row);
            Ok(())
        })();
        if result.is_ok() {
            self.tasks.signals.dispatched();
        }
        Box::pin(std::future::ready(result))
    }

    fn list_tasks<'a>(
        &'a self,
        filter: &'a crate::store::task::TaskFilter,
    ) -> BoxFuture<'a, Result<Vec<crate::store::task::StoredTask>, StoreError>> {
        let rows = self.tasks.rows.lock().expect("poisoned");
        let mut found: Vec<crate::store::task::StoredTask> =
            rows.values().filter(|t| crate::store::task::matches(t, filter)).cloned().collect();
        found.sort_by(|a, b| b.created_at.cmp(&a.created_at).then_with(|| b.spec.id.cmp(&a.spec.id)));
        found.truncate(filter.limit);
        Box::pin(std::future::ready(Ok(found)))
    }
}
