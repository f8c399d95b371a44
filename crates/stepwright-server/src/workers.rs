//! The step workers this process heard from (their claims and heartbeats): what
//! `GET /v1/workers` and `GET /v1/queues` show. Kept in memory: a worker is listed by the
//! `serve` process it polls, for ten minutes after it was last heard from.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use stepwright_api::task::{ClaimTasks, WorkerInfo, WorkerView};
use stepwright_core::Timestamp;

/// How long a worker stays listed after it was last heard from.
const WORKER_SEEN_FOR: Duration = Duration::from_secs(600);

/// The step workers this process heard from, by namespace and worker id.
#[derive(Default)]
pub(crate) struct Workers(
    Mutex<HashMap<(String, String), Seen>>,
    tokio::sync::Notify,
    /// The next chunk number each (task, lease) expects: a repeated chunk is dropped.
    Mutex<HashMap<(String, u64), u64>>,
    /// How many cancels this process has announced: a worker's held tasks are looked at
    /// again when it moved.
    std::sync::atomic::AtomicU64,
    /// When each worker's held tasks were last looked at for cancels, and the count then.
    Mutex<HashMap<(String, String), (std::time::Instant, u64)>>,
);

struct Seen {
    info: WorkerInfo,
    queue: String,
    handlers: Vec<String>,
    last_seen: Timestamp,
    parked: usize,
}

impl Workers {
    pub(crate) fn heard(&self, namespace: &str, claim: &ClaimTasks, now: Timestamp, parked: isize) {
        let mut seen = self.0.lock().expect("poisoned");
        let entry = seen.entry((namespace.to_owned(), claim.worker.id.clone())).or_insert_with(|| Seen {
            info: claim.worker.clone(),
            queue: claim.queue.clone(),
            handlers: Vec::new(),
            last_seen: now,
            parked: 0,
        });
        entry.info = claim.worker.clone();
        entry.queue.clone_from(&claim.queue);
        entry.handlers.clone_from(&claim.handlers);
        entry.last_seen = now;
        entry.parked = entry.parked.saturating_add_signed(parked);
    }

    pub(crate) fn touch(&self, namespace: &str, worker: &str, now: Timestamp) {
        if let Some(seen) = self.0.lock().expect("poisoned").get_mut(&(namespace.to_owned(), worker.to_owned())) {
            seen.last_seen = now;
        }
    }

    pub(crate) fn views(&self, namespace: &str, now: Timestamp) -> Vec<WorkerView> {
        let mut seen = self.0.lock().expect("poisoned");
        seen.retain(|_, s| s.parked > 0 || now.since(s.last_seen) < WORKER_SEEN_FOR);
        let mut views: Vec<WorkerView> = seen
            .iter()
            .filter(|((ns, _), _)| ns == namespace)
            .map(|(_, s)| WorkerView {
                id: s.info.id.clone(),
                name: s.info.name.clone(),
                sdk: s.info.sdk.clone(),
                queue: s.queue.clone(),
                handlers: s.handlers.clone(),
                last_seen: s.last_seen.as_micros(),
                polling: s.parked > 0,
            })
            .collect();
        views.sort_by(|a, b| a.queue.cmp(&b.queue).then_with(|| a.id.cmp(&b.id)));
        views
    }
}

/// Counts a parked claim while it waits, however the wait ends.
pub(crate) struct Parked<'a> {
    pub(crate) workers: &'a Workers,
    pub(crate) namespace: &'a str,
    pub(crate) claim: &'a ClaimTasks,
    pub(crate) now: Timestamp,
}

impl Drop for Parked<'_> {
    fn drop(&mut self) {
        self.workers.heard(self.namespace, self.claim, self.now, -1);
    }
}

impl Workers {
    /// Whether a worker of `namespace` polled `queue` offering `handler` in the last ten
    /// minutes (as this process heard).
    pub(crate) fn offers(&self, namespace: &str, queue: &str, handler: &str, now: Timestamp) -> bool {
        self.views(namespace, now)
            .iter()
            .any(|w| w.queue == queue && stepwright_core::store::task::offers(&w.handlers, handler))
    }
}

impl Workers {
    /// Wakes every parked claim of this process to look again (a run was cancelled here).
    pub(crate) fn announce(&self) {
        self.3.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.1.notify_waiters();
    }

    /// Whether a worker's held tasks are due a look for cancels: a cancel was announced here
    /// since its last look, or `every` passed (another process's cancel). A look is noted.
    /// Looking costs a read per held task, so a busy worker's claims do not each look.
    pub(crate) fn cancels_due(&self, namespace: &str, worker: &str, every: std::time::Duration) -> bool {
        let epoch = self.3.load(std::sync::atomic::Ordering::SeqCst);
        let mut looked = self.4.lock().expect("poisoned");
        if looked.len() > 10_000 {
            looked.retain(|_, (at, _)| at.elapsed() < WORKER_SEEN_FOR);
        }
        let key = (namespace.to_owned(), worker.to_owned());
        let due = looked.get(&key).is_none_or(|(at, seen)| *seen != epoch || at.elapsed() >= every);
        if due {
            looked.insert(key, (std::time::Instant::now(), epoch));
        }
        due
    }

    /// Resolves when [`Workers::announce`] is called.
    pub(crate) fn announced(&self) -> tokio::sync::futures::Notified<'_> {
        self.1.notified()
    }
}

impl Workers {
    /// Whether chunk `seq` of a task's lease is new (and from now on taken). Chunks of a
    /// lease come from one worker in order; a repeat (a retried request) is not.
    pub(crate) fn take_chunk(&self, task: &str, lease: u64, seq: u64) -> bool {
        let mut next = self.2.lock().expect("poisoned");
        if next.len() > 100_000 {
            // Leases long gone: a repeat of theirs no longer matters.
            next.clear();
        }
        let expected = next.entry((task.to_owned(), lease)).or_insert(0);
        if seq < *expected {
            return false;
        }
        *expected = seq + 1;
        true
    }
}
