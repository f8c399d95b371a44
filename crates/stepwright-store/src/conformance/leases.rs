//! Leases, claims and cancels: who executes a run, and handing it over.

use super::*;

/// A claim fences out the previous holder; heartbeats extend; a live lease blocks others;
/// a finished status releases it.
pub async fn leases_fence_writes(store: &dyn Store) {
    use std::time::Duration;
    let short = Duration::from_millis(300);
    let run = record(30, "flow", RunStatus::Pending, 10);
    store.create_run(run.clone()).await.expect("create");
    let first = store.claim(run.id, "a", wall(), short).await.expect("claim");
    assert_eq!((first.owner.as_str(), first.token), ("a", 1));
    assert!(near(first.expires_at, wall().plus(short)), "the lease lasts as long as asked");
    let blocked = store.claim(run.id, "b", wall(), short).await;
    assert!(matches!(blocked, Err(StoreError::Leased { ref owner, .. }) if owner == "a"), "{blocked:?}");
    let renewed = store.heartbeat(&first, wall(), Duration::from_secs(60)).await.expect("heartbeat");
    assert!(renewed.expires_at > first.expires_at);
    tokio::time::sleep(short + Duration::from_millis(100)).await;
    assert!(store.claim(run.id, "b", wall(), short).await.is_err(), "the heartbeat kept it");
    // Let it lapse: b takes over; a's writes and heartbeats are refused from then on.
    store.heartbeat(&renewed, wall(), Duration::from_millis(1)).await.expect("shorten");
    tokio::time::sleep(Duration::from_millis(50)).await;
    let second = store.claim(run.id, "b", wall(), Duration::from_secs(60)).await.expect("takeover");
    assert_eq!(second.token, 2);
    let mut batch =
        JournalBatch { entries: vec![entry("x", 1, Record::Started { attempt: 1 })], ..JournalBatch::default() };
    let stale = store.append(run.id, Some(first.token), &mut batch).await;
    assert!(matches!(stale, Err(StoreError::LeaseLost { token: 1, .. })), "{stale:?}");
    assert!(matches!(store.heartbeat(&first, wall(), short).await, Err(StoreError::LeaseLost { .. })));
    let mut batch =
        JournalBatch { entries: vec![entry("x", 1, Record::Started { attempt: 1 })], ..JournalBatch::default() };
    store.append(run.id, Some(second.token), &mut batch).await.expect("the current holder writes");
    assert_eq!(store.load(run.id).await.expect("load").entries.len(), 1, "the stale write left nothing");
    let done = StatusUpdate::completed(json!(1), wall(), Some(second.token));
    store.set_status(run.id, done).await.expect("finish");
    let finished = store.load(run.id).await.expect("load").record;
    assert_eq!(finished.lease, None, "finishing releases the lease");
    assert!(
        matches!(
            store.claim(run.id, "c", wall(), short).await,
            Err(StoreError::Finished { status: RunStatus::Completed, .. })
        ),
        "a finished run cannot be claimed, and the refusal says it finished (not that someone holds it)"
    );
}

/// One call renews every lease a worker holds; a lease another worker took since is
/// `LeaseLost` alone, and the others are renewed all the same.
pub async fn leases_are_renewed_together(store: &dyn Store) {
    use std::time::Duration;
    let short = Duration::from_millis(200);
    let mut leases = Vec::new();
    for n in 0..3 {
        let run = record(150 + n, "flow", RunStatus::Pending, 10);
        store.create_run(run.clone()).await.expect("create");
        leases.push(store.claim(run.id, "w", wall(), short).await.expect("claim"));
    }
    assert!(store.renew_leases(&[], wall(), short).await.expect("nothing to renew").is_empty());
    // The second run's lease lapses and another worker takes it.
    store.heartbeat(&leases[1], wall(), Duration::from_millis(1)).await.expect("shorten");
    tokio::time::sleep(Duration::from_millis(20)).await;
    let taken = store.claim(leases[1].run, "other", wall(), Duration::from_secs(60)).await.expect("takeover");
    let answers = store.renew_leases(&leases, wall(), Duration::from_secs(60)).await.expect("renew");
    assert_eq!(answers.len(), 3, "one answer per lease, in order");
    for (n, answer) in answers.iter().enumerate() {
        match (n, answer) {
            (1, Err(StoreError::LeaseLost { run, token: 1 })) => assert_eq!(*run, leases[1].run),
            (0 | 2, Ok(renewed)) => {
                assert_eq!((renewed.run, renewed.token, renewed.owner.as_str()), (leases[n].run, 1, "w"));
                assert!(near(renewed.expires_at, wall().plus(Duration::from_secs(60))), "{renewed:?}");
            }
            other => panic!("unexpected answer {other:?}"),
        }
    }
    tokio::time::sleep(short + Duration::from_millis(50)).await;
    for n in [0, 2] {
        let blocked = store.claim(leases[n].run, "other", wall(), short).await;
        assert!(matches!(blocked, Err(StoreError::Leased { ref owner, .. }) if owner == "w"), "renewed: {blocked:?}");
    }
    let kept = store.load(taken.run).await.expect("load").record.lease.expect("leased");
    assert_eq!((kept.owner.as_str(), kept.token), ("other", 2), "the lost lease was left alone");
}

/// A live lease refuses every claim, its own owner's too; `take_over` from the named
/// holder (known to be gone) succeeds and fences the old holder out.
pub async fn a_live_lease_is_never_shared(store: &dyn Store) {
    use std::time::Duration;
    let long = Duration::from_secs(60);
    let run = record(31, "flow", RunStatus::Pending, 10);
    store.create_run(run.clone()).await.expect("create");
    let first = store.claim(run.id, "a", wall(), long).await.expect("claim");
    let again = store.claim(run.id, "a", wall(), long).await;
    assert!(
        matches!(again, Err(StoreError::Leased { ref owner, .. }) if owner == "a"),
        "the same owner may not claim a live lease twice: {again:?}"
    );
    let stolen = store.take_over(run.id, "b", "c", wall(), long).await;
    assert!(matches!(stolen, Err(StoreError::Leased { .. })), "only the named holder's lease is taken: {stolen:?}");
    let taken = store.take_over(run.id, "a", "c", wall(), long).await.expect("take over");
    assert_eq!((taken.owner.as_str(), taken.token), ("c", first.token + 1));
    let mut batch =
        JournalBatch { entries: vec![entry("x", 1, Record::Started { attempt: 1 })], ..JournalBatch::default() };
    let stale = store.append(run.id, Some(first.token), &mut batch).await;
    assert!(matches!(stale, Err(StoreError::LeaseLost { .. })), "the old holder is fenced out: {stale:?}");
    assert_eq!(store.load(run.id).await.expect("load").record.lease.map(|l| l.owner), Some("c".into()));
}

/// A cancel asked for a run that a live lease holds is stored for its holder to see and
/// turns its next stop (suspend, yield) into `cancelled`; one for a run nobody holds
/// cancels it at once and fences a stalled holder out; a finished run stays as it is and
/// its status never changes again.
pub async fn cancels_reach_executing_runs(store: &dyn Store) {
    use std::time::Duration;
    use stepwright_core::{CancelOutcome, CancelRequest};
    let long = Duration::from_secs(60);
    let request = |why: &str| CancelRequest { by: Some("ann".into()), reason: why.into(), at: wall() };
    let status = |run: RunId| async move { store.load(run).await.expect("load").record };
    let update = |status: RunStatus, fence: Option<u64>| StatusUpdate {
        status,
        output: None,
        error: None,
        at: wall(),
        wake_at: None,
        fence,
    };

    // Executing: the request waits for the holder.
    let live = record(32, "flow", RunStatus::Pending, 10);
    store.create_run(live.clone()).await.expect("create");
    let lease = store.claim(live.id, "w", wall(), long).await.expect("claim");
    store.set_status(live.id, update(RunStatus::Running, Some(lease.token))).await.expect("running");
    assert!(store.cancel_requests(&[live.id]).await.expect("poll").is_empty(), "nothing asked yet");
    let outcome = store.request_cancel(live.id, request("too slow"), wall()).await.expect("cancel");
    assert!(matches!(outcome, CancelOutcome::Requested { ref owner, .. } if owner == "w"), "{outcome:?}");
    assert_eq!(status(live.id).await.status, RunStatus::Running, "the holder decides when it stops");
    let seen = store.cancel_requests(&[live.id, id(99)]).await.expect("poll");
    assert_eq!(seen.len(), 1);
    assert_eq!((seen[0].0, seen[0].1.reason.as_str(), seen[0].1.by.as_deref()), (live.id, "too slow", Some("ann")));
    // The holder suspends before it saw the request: the run is cancelled instead.
    store.set_status(live.id, update(RunStatus::Suspended, Some(lease.token))).await.expect("stop");
    let stopped = status(live.id).await;
    assert_eq!(stopped.status, RunStatus::Cancelled, "a cancel that raced with a suspension is not lost");
    assert!(stopped.error.expect("error").message.contains("too slow"));
    let late = store.set_status(live.id, update(RunStatus::Completed, Some(lease.token))).await;
    assert!(matches!(late, Err(StoreError::Finished { status: RunStatus::Cancelled, .. })), "{late:?}");
    assert_eq!(status(live.id).await.status, RunStatus::Cancelled, "nothing overwrites a cancellation");

    // Held by nobody (suspended): cancelled at once.
    let idle = record(33, "flow", RunStatus::Suspended, 10);
    store.create_run(idle.clone()).await.expect("create");
    let outcome = store.request_cancel(idle.id, request("not needed"), wall()).await.expect("cancel");
    assert_eq!(outcome, CancelOutcome::Cancelled);
    let cancelled = status(idle.id).await;
    assert_eq!(cancelled.status, RunStatus::Cancelled);
    assert_eq!(cancelled.cancel.map(|c| c.reason), Some("not needed".into()), "who and why are kept");
    assert!(
        matches!(
            store.claim(idle.id, "w", wall(), long).await,
            Err(StoreError::Finished { status: RunStatus::Cancelled, .. })
        ),
        "a cancelled run cannot be claimed"
    );

    // Running under a lapsed lease (its holder stalled or died): cancelled at once, and the
    // stalled holder can no longer write.
    let stalled = record(34, "flow", RunStatus::Pending, 10);
    store.create_run(stalled.clone()).await.expect("create");
    let old = store.claim(stalled.id, "w", wall(), Duration::from_millis(30)).await.expect("claim");
    store.set_status(stalled.id, update(RunStatus::Running, Some(old.token))).await.expect("running");
    tokio::time::sleep(Duration::from_millis(80)).await;
    assert_eq!(
        store.request_cancel(stalled.id, request("stuck"), wall()).await.expect("cancel"),
        CancelOutcome::Cancelled
    );
    let mut batch =
        JournalBatch { entries: vec![entry("x", 1, Record::Started { attempt: 1 })], ..JournalBatch::default() };
    let write = store.append(stalled.id, Some(old.token), &mut batch).await;
    assert!(matches!(write, Err(StoreError::LeaseLost { .. })), "{write:?}");

    // Finished: left alone.
    let done = record(35, "flow", RunStatus::Completed, 10);
    store.create_run(done.clone()).await.expect("create");
    let outcome = store.request_cancel(done.id, request("late"), wall()).await.expect("cancel");
    assert_eq!(outcome, CancelOutcome::Finished(RunStatus::Completed));
    assert_eq!(status(done.id).await.cancel, None);
    let missing = store.request_cancel(id(98), request("who?"), wall()).await;
    assert!(matches!(missing, Err(StoreError::RunNotFound(_))), "{missing:?}");
}

/// `claim_due` takes pending runs, due suspended runs and runs under expired leases, and
/// never the same run twice while its lease lives.
pub async fn claim_due_finds_ready_runs(store: &dyn Store) {
    use std::time::Duration;
    let now = wall();
    let mut due = record(40, "flow", RunStatus::Suspended, 1);
    due.wake_at = Some(Timestamp::from_micros(now.as_micros() - 1_000_000));
    let mut later = record(41, "flow", RunStatus::Suspended, 2);
    later.wake_at = Some(now.plus(Duration::from_secs(3600)));
    let pending = record(42, "flow", RunStatus::Pending, 3);
    let done = record(43, "flow", RunStatus::Completed, 4);
    let waiting = record(44, "flow", RunStatus::Suspended, 5);
    for r in [due, later, pending, done, waiting] {
        store.create_run(r).await.expect("create");
    }
    // A worker claims run 45, sets it running, and dies: its short lease lapses.
    store.create_run(record(45, "flow", RunStatus::Pending, 6)).await.expect("create");
    let dead = store.claim(id(45), "dead", wall(), Duration::from_millis(50)).await.expect("claim");
    let running = StatusUpdate {
        status: RunStatus::Running,
        output: None,
        error: None,
        at: wall(),
        wake_at: None,
        fence: Some(dead.token),
    };
    store.set_status(id(45), running).await.expect("running");
    tokio::time::sleep(Duration::from_millis(120)).await;

    let mut claimed: Vec<(RunId, Option<String>)> = store
        .claim_due("w1", wall(), Duration::from_secs(60), 10, None)
        .await
        .expect("claim")
        .into_iter()
        .map(|l| (l.run, l.took_over_from))
        .collect();
    claimed.sort();
    assert_eq!(
        claimed,
        [(id(40), None), (id(42), None), (id(45), Some("dead".into()))],
        "due, pending and abandoned runs (this one taken from its dead holder); not later, done or waiting ones"
    );
    let kept = store.load(id(45)).await.expect("load").record.lease.expect("leased");
    assert_eq!(
        (kept.owner.as_str(), kept.took_over_from),
        ("w1", None),
        "the header keeps the lease, not the claim's news"
    );
    let again = store.claim_due("w2", wall(), Duration::from_secs(60), 10, None).await.expect("claim");
    assert!(again.is_empty(), "claimed runs are not claimed again while leased: {again:?}");

    // One run claimed by name under a lapsed lease says whom it was taken from too.
    store.create_run(record(46, "flow", RunStatus::Pending, 7)).await.expect("create");
    let stalled = store.claim(id(46), "stalled", wall(), Duration::from_millis(50)).await.expect("claim");
    assert_eq!(stalled.took_over_from, None, "a pending run is taken from nobody");
    let running = StatusUpdate { fence: Some(stalled.token), at: wall(), ..running_update() };
    store.set_status(id(46), running).await.expect("running");
    tokio::time::sleep(Duration::from_millis(120)).await;
    let taken = store.claim(id(46), "w3", wall(), Duration::from_secs(60)).await.expect("claim");
    assert_eq!(taken.took_over_from.as_deref(), Some("stalled"));
}

/// A worker dedicated to one tenant claims only that tenant's runs.
pub async fn claim_due_keeps_to_a_tenant(store: &dyn Store) {
    use std::time::Duration;
    let ours = record(46, "flow", RunStatus::Pending, 1);
    let mut theirs = record(47, "flow", RunStatus::Pending, 2);
    theirs.caller = Caller::user(Some("globex"), "gil");
    let mut nobodys = record(48, "flow", RunStatus::Pending, 3);
    nobodys.caller = Caller::default();
    for r in [ours, theirs, nobodys] {
        store.create_run(r).await.expect("create");
    }
    let claimed = store.claim_due("g", wall(), Duration::from_secs(60), 10, Some("globex")).await.expect("claim");
    assert_eq!(claimed.iter().map(|l| l.run).collect::<Vec<_>>(), [id(47)], "only globex's run");
    let mut rest: Vec<RunId> = store
        .claim_due("any", wall(), Duration::from_secs(60), 10, None)
        .await
        .expect("claim")
        .into_iter()
        .map(|l| l.run)
        .collect();
    rest.sort();
    assert_eq!(rest, [id(46), id(48)], "a worker for every tenant takes the others");
}

/// Claims take higher priority first (then the oldest), and start a pending run of a
/// concurrency group only while fewer than its limit of the group's runs are running or
/// suspended; a single-run claim of a run whose group is full is `Queued`.
pub async fn claims_keep_to_priority_and_concurrency_groups(store: &dyn Store) {
    use std::time::Duration;
    use stepwright_core::{Concurrency, FlowControl};
    let long = Duration::from_secs(60);
    let with = |n: u8, at: i64, priority: i32, group: Option<&str>| RunRecord {
        flow: FlowControl { priority, concurrency: group.map(|key| Concurrency { key: key.to_owned(), limit: 1 }) },
        ..record(n, "flow", RunStatus::Pending, at)
    };
    let claim_one = || async { store.claim_due("w", wall(), long, 1, None).await.expect("claim") };
    store.create_run(with(160, 10, 0, None)).await.expect("create");
    store.create_run(with(161, 20, 5, None)).await.expect("create");
    assert_eq!(claim_one().await[0].run, id(161), "priority 5 before an older run of priority 0");
    assert_eq!(claim_one().await[0].run, id(160));

    // A group of one: the newest run has the highest priority and goes first; the others wait.
    for (n, at, priority) in [(162, 30, 0), (163, 40, 0), (164, 50, 9)] {
        store.create_run(with(n, at, priority, Some("customer-7"))).await.expect("create");
    }
    let first = store.claim_due("w", wall(), long, 10, None).await.expect("claim");
    assert_eq!(first.iter().map(|l| l.run).collect::<Vec<_>>(), [id(164)], "one slot: the highest priority");
    assert_eq!(store.load(id(164)).await.expect("load").record.status, RunStatus::Running, "started by its claim");
    let queued = store.claim(id(162), "w", wall(), long).await;
    assert!(
        matches!(&queued, Err(StoreError::Queued { key, limit: 1, .. }) if key == "customer-7"),
        "the group is full: {queued:?}"
    );
    assert_eq!(store.load(id(162)).await.expect("load").record.status, RunStatus::Pending, "left waiting");
    assert_eq!(store.load(id(162)).await.expect("load").record.lease, None, "and unleased");

    // Suspended (on a person, a timer) still holds the slot; finishing frees it.
    let suspend = StatusUpdate {
        status: RunStatus::Suspended,
        output: None,
        error: None,
        at: wall(),
        wake_at: None,
        fence: Some(first[0].token),
    };
    store.set_status(id(164), suspend).await.expect("suspend");
    assert!(claim_one().await.is_empty(), "a suspended run holds its slot");
    let lease = store.claim(id(164), "w", wall(), long).await.expect("resume the suspended run");
    let done = StatusUpdate::completed(json!(1), wall(), Some(lease.token));
    store.set_status(id(164), done).await.expect("finish");
    let next = store.claim(id(163), "w", wall(), long).await.expect("room again: a single-run claim is admitted");
    assert_eq!(store.load(next.run).await.expect("load").record.status, RunStatus::Running);
    assert!(claim_one().await.is_empty(), "the group is full again");
    let flow = store.load(id(162)).await.expect("load").record.flow;
    assert_eq!(flow.concurrency.map(|c| (c.key, c.limit)), Some(("customer-7".to_owned(), 1)), "kept as created");
}

pub(super) fn running_update() -> StatusUpdate {
    StatusUpdate { status: RunStatus::Running, output: None, error: None, at: wall(), wake_at: None, fence: None }
}
