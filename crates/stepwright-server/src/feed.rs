//! One feed per streamed run: a single task reads the run's event stream from the store
//! (an [`EventCursor`], so the same sequence `runs events` prints) and keeps it; every
//! subscriber of the run reads from it, so a thousand watchers of one run cost one poll.
//!
//! An event's number is its position in that sequence, which does not depend on when it is
//! read: a client that comes back with `Last-Event-ID: N` — to this process or another, or
//! after a restart — gets the events after N and nothing else.
//!
//! A feed also carries the text a model streams while a step of the run executes in this
//! process: tokens are not journaled, so they are passed on live to the subscribers of the
//! moment and never kept — a client that reconnects cannot be shown one twice (the model's
//! whole answer is in the journal's `model.call` event either way).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use stepwright_core::RunId;
use stepwright_core::inspect::EventCursor;
use stepwright_core::journal::EventRecord;
use stepwright_store::ServerStore;
use tokio::sync::{broadcast, watch};
use tokio_util::sync::CancellationToken;

/// How often a feed reads its run's new events while they come: this bounds the extra
/// delay an event has on the wire.
const POLL_EVERY: Duration = Duration::from_millis(5);

/// After a nudge, how soon a read that found nothing looks again, and how many times: the
/// engine nudges when it records an event, which may be just before its group commit, so
/// the first read can come too early; backing off then would add a whole poll to the event.
const AFTER_NUDGE_EVERY: Duration = Duration::from_millis(1);
const AFTER_NUDGE_READS: u8 = 5;

/// The longest a quiet run's feed waits between reads: a run that waits days for a person
/// costs a read every quarter second, not two hundred.
const POLL_AT_MOST_EVERY: Duration = Duration::from_millis(250);

/// How many streamed tokens a slow subscriber may fall behind before it misses some.
const TOKENS_BUFFERED: usize = 1024;

pub(crate) use stepwright_api::stream::StreamedToken;

/// A live feed's state: the events so far and whether the run has ended.
#[derive(Debug, Default)]
struct Log {
    events: Vec<Arc<EventRecord>>,
    finished: bool,
    /// Why the feed stopped reading (the store failed), if it did.
    failed: Option<String>,
}

/// One run's feed.
pub struct Feed {
    log: Mutex<Log>,
    /// Rung when this process's engine records something for the run: read now. The feed's
    /// task holds it, not the feed, while it waits, so the feed goes when its last
    /// subscriber does.
    nudge: Arc<tokio::sync::Notify>,
    /// The number of events (and the end) as they change, for subscribers to wait on.
    changed: watch::Sender<usize>,
    /// Tokens as models stream them in this process, to whoever listens now.
    tokens: broadcast::Sender<Arc<StreamedToken>>,
}

/// What a subscriber reads next.
pub enum Next {
    /// Events from the asked position on, and the position after them.
    Events(Vec<Arc<EventRecord>>, usize),
    /// The run ended and every event was read.
    End,
    /// The feed could not read the store.
    Failed(String),
}

impl Feed {
    /// The tokens streamed from now on.
    pub fn tokens(&self) -> broadcast::Receiver<Arc<StreamedToken>> {
        self.tokens.subscribe()
    }

    /// The events from `from` on, or the end; waits while there is nothing new.
    pub async fn next(&self, from: usize) -> Next {
        let mut changed = self.changed.subscribe();
        loop {
            {
                let log = self.log.lock().expect("poisoned");
                if log.events.len() > from {
                    return Next::Events(log.events[from..].to_vec(), log.events.len());
                }
                if let Some(why) = &log.failed {
                    return Next::Failed(why.clone());
                }
                if log.finished {
                    return Next::End;
                }
            }
            if changed.changed().await.is_err() {
                return Next::End;
            }
        }
    }
}

/// Every feed of this process, by run.
pub struct Feeds {
    store: Arc<dyn ServerStore>,
    shutdown: CancellationToken,
    live: Mutex<HashMap<RunId, Weak<Feed>>>,
}

/// The engine's observer that nudges feeds: an event reaches the wire within a poll of its
/// commit, however quiet the run was before.
pub(crate) struct NudgeFeeds(pub Arc<Feeds>);

impl stepwright_core::Observer for NudgeFeeds {
    fn step_started(&self, run: RunId, _path: &stepwright_core::StepPath, _attempt: u32) {
        self.0.nudge(run);
    }

    fn step_finished(&self, run: RunId, _path: &stepwright_core::StepPath, _status: stepwright_core::StepStatus) {
        self.0.nudge(run);
    }

    fn token(&self, run: RunId, path: &stepwright_core::StepPath, text: &str) {
        self.0.token(run, path, text);
    }

    fn run_stopped(&self, run: RunId, _status: stepwright_core::RunStatus) {
        // The run's last event is committed with its status: on the wire now, not a poll later.
        self.0.nudge(run);
    }
}

impl Feeds {
    /// No feeds yet.
    pub fn new(store: Arc<dyn ServerStore>, shutdown: CancellationToken) -> Self {
        Self { store, shutdown, live: Mutex::default() }
    }

    /// The run's feed, started if no subscriber holds one. A feed lives while a subscriber
    /// holds it (its task stops reading when the last one leaves).
    pub fn subscribe(&self, run: RunId) -> Arc<Feed> {
        let mut live = self.live.lock().expect("poisoned");
        if let Some(feed) = live.get(&run).and_then(Weak::upgrade) {
            return feed;
        }
        live.retain(|_, feed| feed.strong_count() > 0);
        let feed = Arc::new(Feed {
            log: Mutex::default(),
            nudge: Arc::default(),
            changed: watch::Sender::new(0),
            tokens: broadcast::Sender::new(TOKENS_BUFFERED),
        });
        live.insert(run, Arc::downgrade(&feed));
        tokio::spawn(read_run(self.store.clone(), run, Arc::downgrade(&feed), self.shutdown.clone()));
        feed
    }

    /// Says that this process's engine recorded something for the run: its feed, if any,
    /// reads at once instead of at its next poll.
    pub fn nudge(&self, run: RunId) {
        let feed = self.live.lock().expect("poisoned").get(&run).and_then(Weak::upgrade);
        if let Some(feed) = feed {
            feed.nudge.notify_one();
        }
    }

    /// Passes a streamed token to the run's subscribers, if it has any (nobody watching: it
    /// is dropped, as it is not journaled).
    pub fn token(&self, run: RunId, path: &stepwright_core::StepPath, text: &str) {
        let feed = self.live.lock().expect("poisoned").get(&run).and_then(Weak::upgrade);
        if let Some(feed) = feed
            && feed.tokens.receiver_count() > 0
        {
            let token = StreamedToken { path: path.as_str().to_owned(), text: text.to_owned() };
            // No receiver left in between is not an error: the token had nobody to reach.
            let _ = feed.tokens.send(Arc::new(token));
        }
    }

    /// How many runs have a live feed (for tests and metrics).
    pub fn live(&self) -> usize {
        self.live.lock().expect("poisoned").values().filter(|feed| feed.strong_count() > 0).count()
    }
}

/// A feed's task: reads the run's new events until it ends, the last subscriber leaves, or
/// the server shuts down.
async fn read_run(store: Arc<dyn ServerStore>, run: RunId, feed: Weak<Feed>, shutdown: CancellationToken) {
    let mut cursor = EventCursor::new();
    let mut wait = POLL_EVERY;
    // Reads left at the quick pace of a nudge whose event was not committed yet.
    let mut nudged = 0;
    loop {
        let polled = cursor.poll(store.as_ref(), run).await;
        // Quiet reads back off (but not while a nudged event is on its way to the disk);
        // any news brings the pace back.
        wait = match &polled {
            Ok(events) if events.is_empty() && nudged > 0 => {
                nudged -= 1;
                AFTER_NUDGE_EVERY
            }
            Ok(events) if events.is_empty() => (wait * 2).min(POLL_AT_MOST_EVERY),
            _ => {
                nudged = 0;
                POLL_EVERY
            }
        };
        let Some(feed) = feed.upgrade() else { return };
        {
            let mut log = feed.log.lock().expect("poisoned");
            match polled {
                Ok(events) => log.events.extend(events.into_iter().map(Arc::new)),
                Err(error) => log.failed = Some(error.to_string()),
            }
            log.finished = cursor.finished();
            let count = log.events.len();
            let done = log.finished || log.failed.is_some();
            drop(log);
            if done {
                // Wake every waiter, news or not, so each sees the end.
                feed.changed.send_replace(count);
                return;
            }
            // Waiters wake only for news: a quiet run's watchers cost nothing.
            feed.changed.send_if_modified(|seen| std::mem::replace(seen, count) != count);
        }
        let nudge = feed.nudge.clone();
        drop(feed);
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = nudge.notified() => {
                // What was recorded commits within a group commit: look now, then soon.
                nudged = AFTER_NUDGE_READS;
            }
            () = shutdown.cancelled() => return,
        }
    }
}
