//! [`InMemoryStore`]: the store in memory, with all its impls ([`Store`] here; sessions and the
//! memory bank in `sessions`, step tasks in `tasks`). Replay uses it as a sandbox; tests and
//! examples use it as a store.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use futures_util::future::BoxFuture;
use serde_json::Value;

use super::backend::{
    admit, check_fence, claim_order, decide_cancel, effective_update, holds_slot, is_due, referenced_blob,
    retention_victims, start_claimed, try_claim, try_take_over,
};
use super::{CancelOutcome, Removed, Retention, RunFilter, StatusUpdate, Store, StoreError};
use crate::hash::ContentHash;
use crate::ids::{RunId, Timestamp};
use crate::journal::{
    CancelRequest, DefinitionSource, EventRecord, JournalBatch, JournalEntry, Lease, LoadedRun, Record, RunRecord,
    RunStatus,
};
use crate::store::bank::{MemoryAddress, MemoryItem, MemoryScope};

mod sessions;
mod tasks;

use sessions::MemorySession;

#[derive(Default)]
struct MemoryRun {
    record: Option<RunRecord>,
    entries: Vec<JournalEntry>,
    events: Vec<EventRecord>,
}

/// A store in memory: for tests, examples, and runs that need no durability.
///
/// Each run has its own lock and blobs are sharded, so concurrent runs on several threads
/// rarely wait for each other.
#[derive(Default)]
pub struct InMemoryStore {
    runs: RwLock<HashMap<RunId, Arc<Mutex<MemoryRun>>>>,
    /// Inbox messages: `(run, inbox, seq, message)` in posting order.
    messages: Mutex<Vec<(RunId, String, u64, Value)>>,
    definitions: Mutex<HashMap<ContentHash, DefinitionSource>>,
    /// Sessions by id (see [`crate::session`]).
    pub(crate) sessions: Mutex<HashMap<String, MemorySession>>,
    /// Memory bank items (see [`crate::bank`]).
    pub(crate) bank: Mutex<HashMap<MemoryAddress, MemoryItem>>,
    blobs: [Mutex<HashMap<ContentHash, Arc<Value>>>; BLOB_SHARDS],
    appends_left: AtomicUsize,
    fault_armed: std::sync::atomic::AtomicBool,
    /// Quota counters (one process: the in-memory store's are its own).
    quotas: super::quota::LocalQuotas,
    /// The step cache (see [`super::cache`]).
    cache: super::cache::InMemoryStepCache,
    /// Schedules and their ticks (see [`super::schedule`]).
    schedules: super::schedule::InMemorySchedules,
    /// The event log, its watchers and the triggers' fires (see [`super::event`]).
    events: super::event::InMemoryEvents,
    /// Held by every claim, so that two claims never both see room in one concurrency
    /// group (a run leaving its slot needs no lock: it only makes room).
    claiming: Mutex<()>,
    /// Step tasks (see [`super::task`]).
    tasks: super::task::InMemoryTasks,
}

const BLOB_SHARDS: usize = 16;

impl InMemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Fault injection for tests: the next `n` appends succeed, every later one fails
    /// without writing anything, as a process that died at that point would leave it.
    #[cfg(feature = "test-util")]
    pub fn fail_appends_after(&self, n: usize) {
        self.appends_left.store(n, Ordering::SeqCst);
        self.fault_armed.store(true, Ordering::SeqCst);
    }

    /// Turns fault injection off.
    #[cfg(feature = "test-util")]
    pub fn heal(&self) {
        self.fault_armed.store(false, Ordering::SeqCst);
    }

    /// Every entry of a run, in order (for tests and inspection).
    pub fn entries(&self, run: RunId) -> Vec<JournalEntry> {
        self.run(run).map(|r| r.lock().expect("poisoned").entries.clone()).unwrap_or_default()
    }

    /// A stored blob (a step output or an artifact) by its hash.
    pub fn blob(&self, hash: &ContentHash) -> Option<Arc<Value>> {
        self.shard(hash).lock().expect("poisoned").get(hash).cloned()
    }

    /// The number of distinct blobs.
    pub fn blob_count(&self) -> usize {
        self.blobs.iter().map(|shard| shard.lock().expect("poisoned").len()).sum()
    }

    fn run(&self, run: RunId) -> Option<Arc<Mutex<MemoryRun>>> {
        self.runs.read().expect("poisoned").get(&run).cloned()
    }

    /// Runs `change` on a run's header under the run's lock.
    /// How many runs of concurrency group `key` hold a slot.
    fn slots_held(&self, key: &str) -> usize {
        let runs: Vec<Arc<Mutex<MemoryRun>>> = self.runs.read().expect("poisoned").values().cloned().collect();
        runs.iter()
            .filter(|data| data.lock().expect("poisoned").record.as_ref().is_some_and(|r| holds_slot(r, key)))
            .count()
    }

    fn with_record<T>(
        &self,
        run: RunId,
        change: impl FnOnce(&mut RunRecord) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let data = self.run(run).ok_or(StoreError::RunNotFound(run))?;
        let mut data = data.lock().expect("poisoned");
        change(data.record.as_mut().ok_or(StoreError::RunNotFound(run))?)
    }

    fn shard(&self, hash: &ContentHash) -> &Mutex<HashMap<ContentHash, Arc<Value>>> {
        &self.blobs[usize::from(hash.as_bytes()[0]) % BLOB_SHARDS]
    }

    fn check_fault(&self) -> Result<(), StoreError> {
        if !self.fault_armed.load(Ordering::SeqCst) {
            return Ok(());
        }
        let left = self.appends_left.load(Ordering::SeqCst);
        if left == 0 {
            return Err(StoreError::Backend {
                doing: "appending to the journal".into(),
                source: "injected fault".into(),
            });
        }
        self.appends_left.store(left - 1, Ordering::SeqCst);
        Ok(())
    }
}

/// A copy of `record` without its input, output and error (a listing's header): they are
/// set aside while the rest is cloned, and put back.
fn header_of(record: &mut RunRecord) -> RunRecord {
    let (output, error) = (record.output.take(), record.error.take());
    let input = std::mem::replace(&mut record.input, Arc::new(Value::Null));
    let header = record.clone();
    (record.output, record.error, record.input) = (output, error, input);
    header
}

impl Store for InMemoryStore {
    fn blob(&self, hash: ContentHash) -> BoxFuture<'_, Result<Option<Arc<Value>>, StoreError>> {
        let found = InMemoryStore::blob(self, &hash);
        Box::pin(async move { Ok(found) })
    }

    fn create_run(&self, record: RunRecord) -> BoxFuture<'_, Result<(), StoreError>> {
        let result = (|| {
            let mut runs = self.runs.write().expect("poisoned");
            if runs.contains_key(&record.id) {
                return Err(StoreError::RunExists(record.id));
            }
            let id = record.id;
            runs.insert(id, Arc::new(Mutex::new(MemoryRun { record: Some(record), ..MemoryRun::default() })));
            Ok(())
        })();
        Box::pin(std::future::ready(result))
    }

    fn append<'a>(
        &'a self,
        run: RunId,
        fence: Option<u64>,
        batch: &'a mut JournalBatch,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let result = (|| {
            self.check_fault()?;
            let data = self.run(run).ok_or(StoreError::RunNotFound(run))?;
            let mut data = data.lock().expect("poisoned");
            check_fence(data.record.as_ref(), run, fence)?;
            for (hash, value) in batch.blobs.drain(..) {
                self.shard(&hash).lock().expect("poisoned").entry(hash).or_insert(value);
            }
            let mut dispatched = false;
            for entry in &batch.entries {
                if let Record::Dispatched { attempt, task } = &entry.record
                    && let Some(record) = data.record.as_ref()
                {
                    let row = super::task::new_task(task.clone(), run, entry.path.clone(), *attempt, record, entry.at);
                    self.tasks.rows.lock().expect("poisoned").entry(task.id.clone()).or_insert(row);
                    dispatched = true;
                }
            }
            data.entries.append(&mut batch.entries);
            data.events.append(&mut batch.events);
            if dispatched {
                self.tasks.signals.dispatched();
            }
            Ok(())
        })();
        Box::pin(std::future::ready(result))
    }

    fn set_status(&self, run: RunId, update: StatusUpdate) -> BoxFuture<'_, Result<(), StoreError>> {
        let result = (|| {
            let data = self.run(run).ok_or(StoreError::RunNotFound(run))?;
            let mut data = data.lock().expect("poisoned");
            let record = data.record.as_ref().ok_or(StoreError::RunNotFound(run))?;
            // A finished run says so first, whatever the writer's token (this store drops
            // the lease of a finished run, where the SQL stores keep its token).
            let update = effective_update(run, record.status, record.cancel.as_ref(), update)?;
            check_fence(data.record.as_ref(), run, update.fence)?;
            let record = data.record.as_mut().ok_or(StoreError::RunNotFound(run))?;
            if update.status != RunStatus::Running {
                record.lease = None;
            }
            record.status = update.status;
            record.output = update.output;
            record.error = update.error;
            record.updated_at = update.at;
            record.wake_at = update.wake_at;
            Ok(())
        })();
        Box::pin(std::future::ready(result))
    }

    fn load_from(&self, run: RunId, from: u64) -> BoxFuture<'_, Result<LoadedRun, StoreError>> {
        let result = (|| {
            let data = self.run(run).ok_or(StoreError::RunNotFound(run))?;
            let data = data.lock().expect("poisoned");
            let record = data.record.clone().ok_or(StoreError::RunNotFound(run))?;
            let entries = data.entries.get(usize::try_from(from).unwrap_or(usize::MAX)..).unwrap_or_default();
            let mut blobs = HashMap::new();
            for entry in entries {
                if let Record::Completed { output, .. } = &entry.record
                    && let Some(value) = self.shard(output).lock().expect("poisoned").get(output)
                {
                    blobs.insert(*output, value.clone());
                }
            }
            Ok(LoadedRun { record, entries: entries.to_vec(), blobs })
        })();
        Box::pin(std::future::ready(result))
    }

    fn resolve_interrupt(&self, run: RunId, entry: JournalEntry) -> BoxFuture<'_, Result<(), StoreError>> {
        let result = (|| {
            let Record::InterruptResolved { id, .. } = &entry.record else {
                return Err(StoreError::Backend {
                    doing: "resolving an interrupt".into(),
                    source: "the entry is not an interrupt resolution".into(),
                });
            };
            let data = self.run(run).ok_or(StoreError::RunNotFound(run))?;
            let mut data = data.lock().expect("poisoned");
            let mut opened = false;
            for e in &data.entries {
                match &e.record {
                    Record::InterruptOpened { id: open, .. } if open == id => opened = true,
                    Record::InterruptResolved { id: done, .. } if done == id => {
                        return Err(StoreError::AlreadyResolved { run, interrupt: id.clone() });
                    }
                    _ => {}
                }
            }
            if !opened {
                return Err(StoreError::InterruptNotFound { run, interrupt: id.clone() });
            }
            data.entries.push(entry);
            Ok(())
        })();
        Box::pin(std::future::ready(result))
    }

    fn events_from(&self, run: RunId, from: u64) -> BoxFuture<'_, Result<Vec<EventRecord>, StoreError>> {
        let result = self
            .run(run)
            .map(|r| {
                let events = &r.lock().expect("poisoned").events;
                events.get(usize::try_from(from).unwrap_or(usize::MAX)..).unwrap_or_default().to_vec()
            })
            .ok_or(StoreError::RunNotFound(run));
        Box::pin(std::future::ready(result))
    }

    fn events_of_kind<'a>(&'a self, run: RunId, kind: &'a str) -> BoxFuture<'a, Result<Vec<EventRecord>, StoreError>> {
        // Filtered under the lock: only the events asked for are copied.
        let result = self
            .run(run)
            .map(|r| r.lock().expect("poisoned").events.iter().filter(|e| e.kind == kind).cloned().collect())
            .ok_or(StoreError::RunNotFound(run));
        Box::pin(std::future::ready(result))
    }

    fn visit_events_of_kind<'a>(
        &'a self,
        run: RunId,
        kind: &'a str,
        visit: &'a mut (dyn FnMut(&EventRecord) + Send),
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let result = self
            .run(run)
            .map(|r| r.lock().expect("poisoned").events.iter().filter(|e| e.kind == kind).for_each(visit))
            .ok_or(StoreError::RunNotFound(run));
        Box::pin(std::future::ready(result))
    }

    fn wake_run(&self, run: RunId, now: Timestamp) -> BoxFuture<'_, Result<bool, StoreError>> {
        let result = (|| {
            let data = self.run(run).ok_or(StoreError::RunNotFound(run))?;
            let mut data = data.lock().expect("poisoned");
            let record = data.record.as_mut().ok_or(StoreError::RunNotFound(run))?;
            let later = record.wake_at.is_some_and(|at| at > now);
            if record.status == RunStatus::Suspended && later {
                record.wake_at = Some(now);
                return Ok(true);
            }
            Ok(false)
        })();
        Box::pin(std::future::ready(result))
    }

    fn list_runs(&self, filter: RunFilter) -> BoxFuture<'_, Result<Vec<RunRecord>, StoreError>> {
        let matches = |r: &RunRecord| {
            filter.status.is_none_or(|s| s == r.status)
                && filter.workflow.as_deref().is_none_or(|w| w == r.workflow)
                && (filter.tenant.is_none() || filter.tenant == r.caller.tenant)
                && (filter.started_by.is_none() || filter.started_by == r.caller.user)
                && filter.tag.as_ref().is_none_or(|tag| r.tags.contains(tag))
                && filter.updated_since.is_none_or(|since| r.updated_at >= since)
                && filter.created_from.is_none_or(|from| r.created_at >= from)
                && filter.created_until.is_none_or(|until| r.created_at < until)
                && filter.parent.is_none_or(|parent| r.parent.as_ref().is_some_and(|p| p.run == parent))
                && filter
                    .concurrency_key
                    .as_ref()
                    .is_none_or(|key| r.flow.concurrency.as_ref().is_some_and(|group| &group.key == key))
                && filter
                    .input_contains
                    .as_deref()
                    .is_none_or(|text| r.input.to_string().to_ascii_lowercase().contains(&text.to_ascii_lowercase()))
        };
        // Each record is tested where it lies; only the page is copied (a listing pages through
        // many matches a few at a time), and a header without its input and output.
        let by_update = filter.updated_since.is_some();
        let all = self.runs.read().expect("poisoned");
        let cursor = match filter.before.filter(|_| !by_update) {
            None => None,
            Some(before) => {
                let at = all
                    .get(&before)
                    .and_then(|data| data.lock().expect("poisoned").record.as_ref().map(|r| (r.created_at, r.id)));
                match at {
                    Some(at) => Some(at),
                    None => return Box::pin(std::future::ready(Ok(Vec::new()))),
                }
            }
        };
        let mut found: Vec<(Timestamp, RunId, &Arc<Mutex<MemoryRun>>)> = all
            .values()
            .filter_map(|data| {
                let held = data.lock().expect("poisoned");
                let r = held.record.as_ref().filter(|r| matches(r))?;
                if cursor.is_some_and(|cursor| (r.created_at, r.id) >= cursor) {
                    return None;
                }
                Some((if by_update { r.updated_at } else { r.created_at }, r.id, data))
            })
            .collect();
        if by_update {
            found.sort_unstable_by_key(|r| (r.0, r.1));
        } else {
            found.sort_unstable_by_key(|r| std::cmp::Reverse((r.0, r.1)));
        }
        found.truncate(filter.limit.unwrap_or(100));
        // A record changed since it was tested is copied as it is now: it matched then.
        let runs: Vec<RunRecord> = found
            .into_iter()
            .filter_map(|(_, _, data)| {
                let mut held = data.lock().expect("poisoned");
                let record = held.record.as_mut()?;
                Some(if filter.headers_only { header_of(record) } else { record.clone() })
            })
            .collect();
        Box::pin(std::future::ready(Ok(runs)))
    }

    fn run_headers(&self, runs: Vec<RunId>) -> BoxFuture<'_, Result<Vec<RunRecord>, StoreError>> {
        let all = self.runs.read().expect("poisoned");
        let headers = runs
            .iter()
            .filter_map(|run| all.get(run)?.lock().expect("poisoned").record.as_mut().map(header_of))
            .collect();
        Box::pin(std::future::ready(Ok(headers)))
    }

    fn erase_run(&self, run: RunId) -> BoxFuture<'_, Result<Removed, StoreError>> {
        let result = self.remove(&[run]);
        Box::pin(std::future::ready(result))
    }

    fn apply_retention(&self, policy: Retention) -> BoxFuture<'_, Result<Removed, StoreError>> {
        let all: Vec<RunRecord> = self
            .runs
            .read()
            .expect("poisoned")
            .values()
            .filter_map(|r| r.lock().expect("poisoned").record.clone())
            .collect();
        let result = self.remove(&retention_victims(&all, &policy));
        Box::pin(std::future::ready(result))
    }

    fn claim(
        &self,
        run: RunId,
        owner: &str,
        now: Timestamp,
        lease_for: std::time::Duration,
    ) -> BoxFuture<'_, Result<Lease, StoreError>> {
        let _claiming = self.claiming.lock().expect("poisoned");
        let group = self.run(run).and_then(|data| {
            let data = data.lock().expect("poisoned");
            data.record.as_ref().and_then(|r| r.flow.needs_slot(r.status).map(|group| group.key.clone()))
        });
        let held = group.map_or(0, |key| self.slots_held(&key));
        let result = self.with_record(run, |record| {
            let lease = try_claim(record, owner, now, lease_for)?;
            admit(record, held)?;
            start_claimed(record, now);
            record.lease = Some(lease.held());
            Ok(lease)
        });
        Box::pin(std::future::ready(result))
    }

    fn take_over(
        &self,
        run: RunId,
        from: &str,
        owner: &str,
        now: Timestamp,
        lease_for: std::time::Duration,
    ) -> BoxFuture<'_, Result<Lease, StoreError>> {
        let result = self.with_record(run, |record| {
            let lease = try_take_over(record, from, owner, now, lease_for)?;
            record.lease = Some(lease.held());
            Ok(lease)
        });
        Box::pin(std::future::ready(result))
    }

    fn request_cancel(
        &self,
        run: RunId,
        request: CancelRequest,
        now: Timestamp,
    ) -> BoxFuture<'_, Result<CancelOutcome, StoreError>> {
        let result = self.with_record(run, |record| {
            let outcome = decide_cancel(record, now);
            match &outcome {
                CancelOutcome::Finished(_) => {}
                CancelOutcome::Requested { .. } => record.cancel = Some(request),
                CancelOutcome::Cancelled => {
                    record.status = RunStatus::Cancelled;
                    record.output = None;
                    record.error = Some(request.error());
                    record.updated_at = now;
                    record.wake_at = None;
                    // The token grows, so a holder that stalled past its lease cannot write.
                    record.lease = record.lease.take().map(|l| Lease { token: l.token + 1, expires_at: now, ..l });
                    record.cancel = Some(request);
                }
            }
            Ok(outcome)
        });
        Box::pin(std::future::ready(result))
    }

    fn cancel_requests(&self, runs: &[RunId]) -> BoxFuture<'_, Result<Vec<(RunId, CancelRequest)>, StoreError>> {
        let found = runs
            .iter()
            .filter_map(|run| {
                let data = self.run(*run)?;
                let data = data.lock().expect("poisoned");
                let record = data.record.as_ref()?;
                record.cancel.clone().map(|request| (*run, request))
            })
            .collect();
        Box::pin(std::future::ready(Ok(found)))
    }

    fn claim_due(
        &self,
        owner: &str,
        now: Timestamp,
        lease_for: std::time::Duration,
        limit: usize,
        tenant: Option<&str>,
    ) -> BoxFuture<'_, Result<Vec<Lease>, StoreError>> {
        let _claiming = self.claiming.lock().expect("poisoned");
        let runs: Vec<Arc<Mutex<MemoryRun>>> = self.runs.read().expect("poisoned").values().cloned().collect();
        // The due runs in claim order, and how many slots each concurrency group holds.
        let mut due = Vec::new();
        let mut held: HashMap<String, usize> = HashMap::new();
        for data in &runs {
            let guard = data.lock().expect("poisoned");
            let Some(record) = guard.record.as_ref() else { continue };
            if let Some(group) = &record.flow.concurrency
                && holds_slot(record, &group.key)
            {
                *held.entry(group.key.clone()).or_default() += 1;
            }
            if is_due(record, now) && tenant.is_none_or(|t| record.caller.tenant.as_deref() == Some(t)) {
                due.push((claim_order(record), data.clone()));
            }
        }
        due.sort_by_key(|(order, _)| *order);
        let mut leases = Vec::new();
        for (_, data) in due {
            if leases.len() >= limit {
                break;
            }
            let mut data = data.lock().expect("poisoned");
            let Some(record) = data.record.as_mut() else { continue };
            let group = record.flow.needs_slot(record.status).map(|group| group.key.clone());
            let slots = group.as_ref().map_or(0, |key| held.get(key).copied().unwrap_or(0));
            if admit(record, slots).is_ok()
                && let Ok(lease) = try_claim(record, owner, now, lease_for)
            {
                start_claimed(record, now);
                record.lease = Some(lease.held());
                leases.push(lease);
                if let Some(key) = group {
                    *held.entry(key).or_default() += 1;
                }
            }
        }
        Box::pin(std::future::ready(Ok(leases)))
    }

    fn put_definition(&self, hash: ContentHash, source: DefinitionSource) -> BoxFuture<'_, Result<(), StoreError>> {
        self.definitions.lock().expect("poisoned").entry(hash).or_insert(source);
        Box::pin(std::future::ready(Ok(())))
    }

    fn get_definition(&self, hash: ContentHash) -> BoxFuture<'_, Result<Option<DefinitionSource>, StoreError>> {
        let found = self.definitions.lock().expect("poisoned").get(&hash).cloned();
        Box::pin(std::future::ready(Ok(found)))
    }

    fn post_message(&self, run: RunId, inbox: &str, message: Value) -> BoxFuture<'_, Result<u64, StoreError>> {
        let mut messages = self.messages.lock().expect("poisoned");
        let seq = messages.last().map_or(0, |m| m.2 + 1);
        messages.push((run, inbox.to_owned(), seq, message));
        Box::pin(std::future::ready(Ok(seq)))
    }

    fn next_message(
        &self,
        run: RunId,
        inbox: &str,
        after: Option<u64>,
    ) -> BoxFuture<'_, Result<Option<(u64, Value)>, StoreError>> {
        let found = self
            .messages
            .lock()
            .expect("poisoned")
            .iter()
            .find(|(r, i, seq, _)| *r == run && i == inbox && after.is_none_or(|a| *seq > a))
            .map(|(_, _, seq, m)| (*seq, m.clone()));
        Box::pin(std::future::ready(Ok(found)))
    }

    fn logged_events<'a>(
        &'a self,
        tenant: Option<&'a str>,
        name: &'a str,
        after: Option<u64>,
        since: Timestamp,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<super::event::StoredEvent>, StoreError>> {
        let query = super::event::EventQuery::for_wait(name, after, since, limit);
        let found = self.events.log.lock().expect("poisoned").query(tenant, &query);
        Box::pin(std::future::ready(Ok(found)))
    }

    fn watch_events<'a>(
        &'a self,
        run: RunId,
        tenant: Option<&'a str>,
        name: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.events.log.lock().expect("poisoned").watch(run, tenant, name);
        Box::pin(std::future::ready(Ok(())))
    }

    fn heartbeat(
        &self,
        lease: &Lease,
        now: Timestamp,
        lease_for: std::time::Duration,
    ) -> BoxFuture<'_, Result<Lease, StoreError>> {
        let result = (|| {
            let data = self.run(lease.run).ok_or(StoreError::RunNotFound(lease.run))?;
            let mut data = data.lock().expect("poisoned");
            check_fence(data.record.as_ref(), lease.run, Some(lease.token))?;
            let record = data.record.as_mut().ok_or(StoreError::RunNotFound(lease.run))?;
            let renewed = Lease { expires_at: now.plus(lease_for), ..lease.clone() };
            record.lease = Some(renewed.clone());
            Ok(renewed)
        })();
        Box::pin(std::future::ready(result))
    }

    fn tasks(&self) -> Option<&dyn super::task::TaskStore> {
        Some(self)
    }

    fn task_signals(&self) -> Option<&super::task::TaskSignals> {
        Some(&self.tasks.signals)
    }
}

impl InMemoryStore {
    fn remove(&self, victims: &[RunId]) -> Result<Removed, StoreError> {
        self.messages.lock().expect("poisoned").retain(|(run, ..)| !victims.contains(run));
        // A run's own memory goes with it.
        self.bank
            .lock()
            .expect("poisoned")
            .retain(|address, _| !matches!(&address.scope, MemoryScope::Run(run) if victims.contains(run)));
        let mut runs = self.runs.write().expect("poisoned");
        let mut removed = Removed::default();
        for id in victims {
            if runs.remove(id).is_some() {
                removed.runs += 1;
            }
        }
        let mut live = std::collections::HashSet::new();
        for run in runs.values() {
            for entry in &run.lock().expect("poisoned").entries {
                live.extend(referenced_blob(&entry.record));
            }
        }
        for shard in &self.blobs {
            let mut shard = shard.lock().expect("poisoned");
            let before = shard.len();
            shard.retain(|hash, _| live.contains(hash));
            removed.blobs += before - shard.len();
        }
        Ok(removed)
    }
}

impl super::cache::StepCache for InMemoryStore {
    fn cached<'a>(&'a self, key: &'a ContentHash) -> BoxFuture<'a, Result<Option<Value>, StoreError>> {
        self.cache.cached(key)
    }

    fn keep<'a>(&'a self, key: &'a ContentHash, output: &'a Value) -> BoxFuture<'a, Result<(), StoreError>> {
        self.cache.keep(key, output)
    }

    fn forget_before(&self, before: Timestamp) -> BoxFuture<'_, Result<u64, StoreError>> {
        self.cache.forget_before(before)
    }
}

impl super::quota::QuotaStore for InMemoryStore {
    fn take_quota<'a>(
        &'a self,
        quota: &'a super::quota::Quota,
        amount: u64,
    ) -> BoxFuture<'a, Result<super::quota::QuotaTaken, StoreError>> {
        self.quotas.take_quota(quota, amount)
    }

    fn charge_quota<'a>(
        &'a self,
        quota: &'a super::quota::Quota,
        amount: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.quotas.charge_quota(quota, amount)
    }
}

impl super::schedule::ScheduleStore for InMemoryStore {
    fn put_schedule(&self, record: super::schedule::ScheduleRecord) -> BoxFuture<'_, Result<(), StoreError>> {
        self.schedules.put(record);
        Box::pin(std::future::ready(Ok(())))
    }

    fn schedule<'a>(
        &'a self,
        key: &'a super::schedule::ScheduleKey,
    ) -> BoxFuture<'a, Result<Option<super::schedule::ScheduleRecord>, StoreError>> {
        Box::pin(std::future::ready(Ok(self.schedules.get(key))))
    }

    fn schedules<'a>(
        &'a self,
        tenant: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Vec<super::schedule::ScheduleRecord>, StoreError>> {
        Box::pin(std::future::ready(Ok(self.schedules.list(tenant))))
    }

    fn delete_schedule<'a>(&'a self, key: &'a super::schedule::ScheduleKey) -> BoxFuture<'a, Result<bool, StoreError>> {
        let tenant = key.tenant.clone().unwrap_or_default();
        self.events.log.lock().expect("poisoned").fires.retain(|(t, name, _), _| *t != tenant || *name != key.name);
        Box::pin(std::future::ready(Ok(self.schedules.delete(key))))
    }

    fn due_schedules(
        &self,
        now: Timestamp,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<super::schedule::ScheduleRecord>, StoreError>> {
        Box::pin(std::future::ready(Ok(self.schedules.due(now, limit))))
    }

    fn next_due(&self) -> BoxFuture<'_, Result<Option<Timestamp>, StoreError>> {
        Box::pin(std::future::ready(Ok(self.schedules.next_due())))
    }

    fn advance_schedule(&self, advance: super::schedule::ScheduleAdvance) -> BoxFuture<'_, Result<bool, StoreError>> {
        Box::pin(std::future::ready(self.schedules.advance(advance, self, &self.events.log)))
    }

    fn ticks<'a>(
        &'a self,
        key: &'a super::schedule::ScheduleKey,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<super::schedule::TickRecord>, StoreError>> {
        Box::pin(std::future::ready(Ok(self.schedules.ticks(key, limit))))
    }
}

impl super::event::EventStore for InMemoryStore {
    fn append_event(&self, event: super::event::NewEvent) -> BoxFuture<'_, Result<super::event::Appended, StoreError>> {
        let result = super::event::check_new_event(&event).map(|()| {
            let (tenant, at) = (event.tenant.clone(), event.at);
            let (appended, woken) = self.events.log.lock().expect("poisoned").append(event);
            if appended.created {
                self.schedules.wake_triggers(tenant.as_deref(), at);
                for run in woken {
                    // A run gone or no longer suspended has nothing to wake.
                    drop(futures_util::FutureExt::now_or_never(self.wake_run(run, at)));
                }
            }
            appended
        });
        Box::pin(std::future::ready(result))
    }

    fn event_log<'a>(
        &'a self,
        tenant: Option<&'a str>,
        query: super::event::EventQuery,
    ) -> BoxFuture<'a, Result<Vec<super::event::StoredEvent>, StoreError>> {
        Box::pin(std::future::ready(Ok(self.events.log.lock().expect("poisoned").query(tenant, &query))))
    }

    fn event_by_seq<'a>(
        &'a self,
        tenant: Option<&'a str>,
        seq: u64,
    ) -> BoxFuture<'a, Result<Option<super::event::StoredEvent>, StoreError>> {
        let query = super::event::EventQuery { after: Some(seq.saturating_sub(1)), limit: 1, ..Default::default() };
        let found = self.events.log.lock().expect("poisoned").query(tenant, &query).into_iter().find(|e| e.seq == seq);
        Box::pin(std::future::ready(Ok(found)))
    }

    fn event_fires<'a>(
        &'a self,
        tenant: Option<&'a str>,
        seq: u64,
    ) -> BoxFuture<'a, Result<Vec<super::event::EventFire>, StoreError>> {
        Box::pin(std::future::ready(Ok(self.events.log.lock().expect("poisoned").fires_of_event(tenant, seq))))
    }

    fn trigger_fires<'a>(
        &'a self,
        key: &'a super::schedule::ScheduleKey,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<super::event::EventFire>, StoreError>> {
        Box::pin(std::future::ready(Ok(self.events.log.lock().expect("poisoned").fires_of_trigger(key, limit))))
    }
}
