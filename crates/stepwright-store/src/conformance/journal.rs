//! Runs and their journals: creating, appending, statuses, interrupts, events, reading, listing, erasing.

use super::*;

/// A created run loads with the same header and an empty journal; a duplicate id fails.
pub async fn create_and_load(store: &dyn Store) {
    let run = record(1, "flow", RunStatus::Pending, 10);
    store.create_run(run.clone()).await.expect("create");
    let loaded = store.load(run.id).await.expect("load");
    assert_eq!(loaded.record, run, "the header round-trips");
    assert!(loaded.entries.is_empty());
    assert!(matches!(store.create_run(run).await, Err(StoreError::RunExists(_))), "duplicate ids are refused");
}

/// Appends keep their order; blobs are stored once and loaded for completed entries.
pub async fn append_keeps_order_and_blobs(store: &dyn Store) {
    let run = record(2, "flow", RunStatus::Running, 10);
    store.create_run(run.clone()).await.expect("create");
    let big = json!({ "text": "long ".repeat(2_000) });
    let (a, blob_a) = completed("a", json!(1));
    let (b, blob_b) = completed("b", big.clone());
    let (c, blob_c) = completed("c", json!(1));
    let mut first = JournalBatch {
        entries: vec![entry("a", 1, Record::Started { attempt: 1 }), a],
        blobs: vec![blob_a],
        events: vec![],
    };
    store.append(run.id, None, &mut first).await.expect("append");
    assert!(first.entries.is_empty() && first.blobs.is_empty(), "the store drains the batch");
    let mut second = JournalBatch { entries: vec![b, c], blobs: vec![blob_b, blob_c], events: vec![] };
    store.append(run.id, None, &mut second).await.expect("append");
    let loaded = store.load(run.id).await.expect("load");
    let paths: Vec<&str> = loaded.entries.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(paths, ["a", "a", "b", "c"], "entries load in append order");
    assert_eq!(loaded.entries[0].record, Record::Started { attempt: 1 });
    assert_eq!(*loaded.blobs[&ContentHash::of_value(&big)], big, "a large blob round-trips");
    assert_eq!(loaded.blobs.len(), 2, "equal values are one blob");
    // An artifact's content is no step's output: `load` leaves it out, `blob` reads it.
    let prompt = json!({ "messages": [{ "role": "user", "content": "hi ".repeat(300) }] });
    let hash = ContentHash::of_value(&prompt);
    let artifact = Record::Artifact { kind: "llm-input".into(), hash, stored: true };
    let mut third = JournalBatch {
        entries: vec![entry("d", 5, artifact)],
        blobs: vec![(hash, Arc::new(prompt.clone()))],
        events: vec![],
    };
    store.append(run.id, None, &mut third).await.expect("append");
    assert!(!store.load(run.id).await.expect("load").blobs.contains_key(&hash), "a resume reads no prompts");
    assert_eq!(store.blob(hash).await.expect("blob").as_deref(), Some(&prompt));
    assert_eq!(store.blob(ContentHash::of_value(&json!("never stored"))).await.expect("blob"), None);
}

/// Many writers appending to one run at once (a fork's paths, a map's items, another
/// process): every batch lands whole, in one piece, and positions never collide. Pass two
/// handles on one database to check two processes; pass the same store twice for tasks.
pub async fn concurrent_appends_to_one_run(store: &dyn Store) {
    concurrent_appends_from(store, store).await;
}

/// [`concurrent_appends_to_one_run`] with writers split over two handles on one store.
pub async fn concurrent_appends_from(one: &dyn Store, other: &dyn Store) {
    const WRITERS: usize = 24;
    const ROUNDS: usize = 4;
    let run = record(20, "fanout", RunStatus::Running, 10);
    one.create_run(run.clone()).await.expect("create");
    let write = |writer: usize, round: usize| {
        let store = if writer.is_multiple_of(2) { one } else { other };
        let path = format!("f/{writer}/r{round}");
        let (done, blob) =
            completed(&path, json!({ "writer": writer, "round": round, "pad": "x".repeat(writer * 100) }));
        let mut batch = JournalBatch {
            entries: vec![entry(&path, 1, Record::Started { attempt: 1 }), done],
            blobs: vec![blob],
            events: vec![stepwright_core::journal::EventRecord {
                run: run.id,
                path: StepPath::new(&path),
                at: Timestamp::from_micros(1),
                tenant: None,
                user: None,
                kind: "step.completed".into(),
                data: json!(writer),
            }],
        };
        async move { store.append(run.id, None, &mut batch).await }
    };
    for round in 0..ROUNDS {
        let results = futures_util::future::join_all((0..WRITERS).map(|writer| write(writer, round))).await;
        for (writer, result) in results.into_iter().enumerate() {
            if let Err(error) = result {
                panic!("concurrent append {writer} of round {round} failed: {error}");
            }
        }
    }
    let loaded = other.load(run.id).await.expect("load");
    assert_eq!(loaded.entries.len(), WRITERS * ROUNDS * 2, "every entry of every concurrent batch is kept");
    for pair in loaded.entries.chunks(2) {
        assert_eq!(pair[0].path, pair[1].path, "a batch's entries stay together, in order");
        assert!(matches!(pair[0].record, Record::Started { .. }) && matches!(pair[1].record, Record::Completed { .. }));
    }
    let mut paths: Vec<&str> = loaded.entries.iter().map(|e| e.path.as_str()).collect();
    paths.sort_unstable();
    paths.dedup();
    assert_eq!(paths.len(), WRITERS * ROUNDS, "no batch is written twice");
    assert_eq!(loaded.blobs.len(), WRITERS * ROUNDS);
    let events = one.events(run.id).await.expect("events");
    assert_eq!(events.len(), WRITERS * ROUNDS, "every event is kept");
    let tail = one.load_from(run.id, (WRITERS * ROUNDS * 2 - 2) as u64).await.expect("load from");
    assert_eq!(tail.entries.len(), 2, "positions count the entries with no gap");
    assert_eq!(one.events_from(run.id, (WRITERS * ROUNDS - 1) as u64).await.expect("events from").len(), 1);
}

/// Appends to many runs at once (which a store may commit together): one with a stale token
/// and one to a run that does not exist fail, each alone; the others' entries, blobs,
/// events and interrupts are all written.
pub async fn refused_appends_fail_alone(store: &dyn Store) {
    const RUNS: u8 = 16;
    let mut tokens = Vec::new();
    for n in 0..RUNS {
        let run = record(100 + n, "many", RunStatus::Pending, 10);
        store.create_run(run.clone()).await.expect("create");
        let lease = store.claim(run.id, "w", wall(), std::time::Duration::from_secs(60)).await.expect("claim");
        tokens.push((run.id, lease.token));
    }
    let stale = |n: u8| n.is_multiple_of(4);
    let write = |run: RunId, fence: Option<u64>, n: u8| {
        let (done, blob) = completed("a", json!({ "run": n, "pad": "y".repeat(usize::from(n) * 50) }));
        let mut entries = vec![entry("a", 1, Record::Started { attempt: 1 }), done];
        if n % 4 == 2 {
            let id = InterruptId::new(&format!("int_{n}"));
            entries.push(entry(
                "ask",
                3,
                Record::InterruptOpened { id, request: InterruptRequest::approval("ok?"), deadline: None },
            ));
        }
        let event = stepwright_core::journal::EventRecord {
            run,
            path: StepPath::new("a"),
            at: Timestamp::from_micros(2),
            tenant: Some("acme".into()),
            user: None,
            kind: "step.completed".into(),
            data: json!(n),
        };
        let mut batch = JournalBatch { entries, blobs: vec![blob], events: vec![event] };
        async move { store.append(run, fence, &mut batch).await }
    };
    let missing = id(99);
    let writes = tokens
        .iter()
        .zip(0..)
        .map(|((run, token), n)| write(*run, Some(if stale(n) { token + 6 } else { *token }), n))
        .chain(std::iter::once(write(missing, None, RUNS)));
    let results = futures_util::future::join_all(writes).await;
    for ((run, token), n) in tokens.iter().zip(0..) {
        let result = &results[usize::from(n)];
        let loaded = store.load(*run).await.expect("load");
        if stale(n) {
            let refused = *token + 6;
            assert!(matches!(result, Err(StoreError::LeaseLost { token, .. }) if *token == refused), "{n}: {result:?}");
            assert!(loaded.entries.is_empty(), "{n}: a refused append writes nothing");
            assert!(store.events(*run).await.expect("events").is_empty(), "{n}: nor its events");
        } else {
            assert!(result.is_ok(), "{n}: {result:?}");
            let expected = if n % 4 == 2 { 3 } else { 2 };
            assert_eq!(loaded.entries.len(), expected, "{n}: every entry, in order");
            let Record::Completed { output, .. } = loaded.entries[1].record else {
                panic!("{n}: started, then completed: {:?}", loaded.entries)
            };
            assert_eq!(loaded.blobs.get(&output).map(|v| v["run"].clone()), Some(json!(n)), "{n}: its output");
            let events = store.events(*run).await.expect("events");
            assert_eq!(events.iter().map(|e| e.data.clone()).collect::<Vec<_>>(), [json!(n)], "{n}: its event");
        }
    }
    assert!(
        matches!(results.last(), Some(Err(StoreError::RunNotFound(run))) if *run == missing),
        "{:?}",
        results.last()
    );
    // The interrupts opened by written appends can be resolved; they were recorded.
    let (run, _) = tokens[2];
    let resolved = entry(
        "ask",
        4,
        Record::InterruptResolved {
            id: InterruptId::new("int_2"),
            resolution: Resolution {
                decision: Decision::Approve,
                by: None,
                at: Timestamp::from_micros(4),
                timed_out: false,
            },
        },
    );
    store.resolve_interrupt(run, resolved).await.expect("the interrupt was recorded with its append");
}

/// Runs created at once (which a store may commit together), one id asked for twice: every
/// other run is created, and of the two with one id exactly one is, the other hears
/// `RunExists`.
pub async fn concurrent_creates_take_an_id_once(store: &dyn Store) {
    let mut records: Vec<RunRecord> = (0..20).map(|n| record(200 + n, "burst", RunStatus::Pending, 10)).collect();
    let mut twin = record(205, "burst", RunStatus::Pending, 11);
    twin.input = Arc::new(json!("the twin"));
    records.push(twin);
    let results = futures_util::future::join_all(records.iter().map(|r| store.create_run(r.clone()))).await;
    let twice: Vec<&Result<(), StoreError>> =
        results.iter().zip(&records).filter(|(_, r)| r.id == id(205)).map(|(result, _)| result).collect();
    assert_eq!(twice.iter().filter(|r| r.is_ok()).count(), 1, "{twice:?}");
    assert!(twice.iter().any(|r| matches!(r, Err(StoreError::RunExists(run)) if *run == id(205))), "{twice:?}");
    for (result, record) in results.iter().zip(&records).filter(|(_, r)| r.id != id(205)) {
        assert!(result.is_ok(), "{result:?}");
        assert_eq!(store.load(record.id).await.expect("load").record.input, record.input);
    }
}

/// Status changes to many runs at once (which a store may commit together): each is
/// written, refused or changed on its own — a stale token is refused, a finished run says
/// so, a suspension with a cancel request waiting becomes a cancellation, the rest are
/// written with their outputs, and leases are released.
pub async fn concurrent_status_changes_each_get_their_own_answer(store: &dyn Store) {
    use std::time::Duration;
    use stepwright_core::CancelRequest;
    const RUNS: u8 = 12;
    let mut leases = Vec::new();
    for n in 0..RUNS {
        let run = record(150 + n, "many", RunStatus::Pending, 10);
        store.create_run(run.clone()).await.expect("create");
        leases.push(store.claim(run.id, "w", wall(), Duration::from_secs(60)).await.expect("claim"));
    }
    let done = |n: u8, fence: Option<u64>| StatusUpdate::completed(json!({ "n": n }), wall(), fence);
    // Run 1 is finished already; run 2 is asked to stop while it runs.
    store.set_status(leases[1].run, done(1, Some(leases[1].token))).await.expect("finish");
    let running =
        StatusUpdate { status: RunStatus::Running, output: None, error: None, at: wall(), wake_at: None, fence: None };
    store.set_status(leases[2].run, StatusUpdate { fence: Some(leases[2].token), ..running }).await.expect("running");
    let request = CancelRequest { by: Some("ann".into()), reason: "enough".into(), at: wall() };
    store.request_cancel(leases[2].run, request, wall()).await.expect("cancel");
    let changes = leases.iter().zip(0..).map(|(lease, n)| {
        let update = match n {
            0 => done(n, Some(lease.token + 1)),
            2 => StatusUpdate {
                status: RunStatus::Suspended,
                output: None,
                error: None,
                at: wall(),
                wake_at: Some(wall()),
                fence: Some(lease.token),
            },
            _ => done(n, Some(lease.token)),
        };
        store.set_status(lease.run, update)
    });
    let results = futures_util::future::join_all(changes).await;
    for (n, result) in (0..RUNS).zip(&results) {
        let record = store.load(leases[usize::from(n)].run).await.expect("load").record;
        match n {
            0 => {
                assert!(matches!(result, Err(StoreError::LeaseLost { .. })), "{n}: {result:?}");
                assert_eq!(record.status, RunStatus::Pending, "a refused change writes nothing");
            }
            1 => assert!(matches!(result, Err(StoreError::Finished { .. })), "{n}: {result:?}"),
            2 => {
                assert!(result.is_ok(), "{n}: {result:?}");
                assert_eq!(record.status, RunStatus::Cancelled, "the waiting request wins over the suspension");
                assert_eq!(record.lease, None);
            }
            _ => {
                assert!(result.is_ok(), "{n}: {result:?}");
                assert_eq!((record.status, record.output), (RunStatus::Completed, Some(json!({ "n": n }))));
                assert_eq!(record.lease, None, "{n}: finishing releases the lease");
            }
        }
    }
}

/// Status, output, error and wake-up time are stored.
pub async fn status_updates(store: &dyn Store) {
    let run = record(3, "flow", RunStatus::Pending, 10);
    store.create_run(run.clone()).await.expect("create");
    let update = StatusUpdate {
        status: RunStatus::Suspended,
        output: None,
        error: None,
        at: Timestamp::from_micros(20),
        wake_at: Some(Timestamp::from_micros(99)),
        fence: None,
    };
    store.set_status(run.id, update).await.expect("status");
    let loaded = store.load(run.id).await.expect("load").record;
    assert_eq!(
        (loaded.status, loaded.wake_at, loaded.updated_at),
        (RunStatus::Suspended, Some(Timestamp::from_micros(99)), Timestamp::from_micros(20))
    );
    let failed = StatusUpdate {
        status: RunStatus::Failed,
        output: None,
        error: Some(StepError::execution_failed("boom")),
        at: Timestamp::from_micros(30),
        wake_at: None,
        fence: None,
    };
    store.set_status(run.id, failed).await.expect("status");
    let loaded = store.load(run.id).await.expect("load").record;
    assert_eq!(loaded.error.expect("error").message, "boom");
    assert_eq!(loaded.wake_at, None);
}

/// Only an opened interrupt can be resolved, and only once.
pub async fn interrupts_resolve_once(store: &dyn Store) {
    let run = record(4, "flow", RunStatus::Running, 10);
    store.create_run(run.clone()).await.expect("create");
    let interrupt = InterruptId::new("int_1");
    let opened = entry(
        "ask",
        1,
        Record::InterruptOpened { id: interrupt.clone(), request: InterruptRequest::approval("ok?"), deadline: None },
    );
    store
        .append(run.id, None, &mut JournalBatch { entries: vec![opened], ..JournalBatch::default() })
        .await
        .expect("append");
    let resolution = |by: &str| {
        entry(
            "ask",
            2,
            Record::InterruptResolved {
                id: interrupt.clone(),
                resolution: Resolution {
                    decision: Decision::Approve,
                    by: Some(by.into()),
                    at: Timestamp::from_micros(2),
                    timed_out: false,
                },
            },
        )
    };
    let unknown = entry(
        "ask",
        2,
        Record::InterruptResolved {
            id: InterruptId::new("int_nope"),
            resolution: Resolution {
                decision: Decision::Approve,
                by: None,
                at: Timestamp::from_micros(2),
                timed_out: false,
            },
        },
    );
    assert!(matches!(store.resolve_interrupt(run.id, unknown).await, Err(StoreError::InterruptNotFound { .. })));
    let (first, second) = futures_util::future::join(
        store.resolve_interrupt(run.id, resolution("ann")),
        store.resolve_interrupt(run.id, resolution("bob")),
    )
    .await;
    assert!(first.is_ok() != second.is_ok(), "exactly one of two concurrent decisions wins");
    let loser = first.err().or(second.err()).expect("one failed");
    assert!(matches!(loser, StoreError::AlreadyResolved { .. }), "{loser}");
    let resolved = store
        .load(run.id)
        .await
        .expect("load")
        .entries
        .into_iter()
        .filter(|e| matches!(e.record, Record::InterruptResolved { .. }))
        .count();
    assert_eq!(resolved, 1);
}

/// Events keep their order and stamps.
pub async fn events_in_order(store: &dyn Store) {
    let run = record(5, "flow", RunStatus::Running, 10);
    store.create_run(run.clone()).await.expect("create");
    let event = |kind: &str, n: i64| stepwright_core::journal::EventRecord {
        run: run.id,
        path: StepPath::new("a"),
        at: Timestamp::from_micros(n),
        tenant: Some("acme".into()),
        user: Some("ann".into()),
        kind: kind.into(),
        data: json!({ "n": n }),
    };
    for (kind, n) in [("one", 1), ("two", 2)] {
        store
            .append(run.id, None, &mut JournalBatch { events: vec![event(kind, n)], ..JournalBatch::default() })
            .await
            .expect("append");
    }
    let events = store.events(run.id).await.expect("events");
    assert_eq!(events, vec![event("one", 1), event("two", 2)]);
}

/// A follower reads only what it has not seen: the journal and the events from a position
/// on, with the blobs of the entries returned and the current header.
pub async fn reads_from_a_position(store: &dyn Store) {
    let run = record(6, "flow", RunStatus::Running, 10);
    store.create_run(run.clone()).await.expect("create");
    let event = |n: i64| stepwright_core::journal::EventRecord {
        run: run.id,
        path: StepPath::new("a"),
        at: Timestamp::from_micros(n),
        tenant: None,
        user: None,
        kind: "tick".into(),
        data: json!({ "n": n }),
    };
    let (a, blob_a) = completed("a", json!("first"));
    let (b, blob_b) = completed("b", json!("second"));
    let mut first = JournalBatch {
        entries: vec![entry("a", 1, Record::Started { attempt: 1 }), a],
        blobs: vec![blob_a],
        events: vec![event(1)],
    };
    store.append(run.id, None, &mut first).await.expect("append");
    let mut second = JournalBatch { entries: vec![b], blobs: vec![blob_b], events: vec![event(2), event(3)] };
    store.append(run.id, None, &mut second).await.expect("append");

    let tail = store.load_from(run.id, 2).await.expect("load from 2");
    assert_eq!(tail.record, run, "the header comes with the tail");
    let paths: Vec<&str> = tail.entries.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(paths, ["b"], "entries before the position are skipped");
    assert_eq!(tail.blobs.len(), 1, "only the blobs of the entries returned");
    assert_eq!(*tail.blobs[&ContentHash::of_value(&json!("second"))], json!("second"));
    assert_eq!(store.load_from(run.id, 1).await.expect("load from 1").entries.len(), 2);
    assert!(store.load_from(run.id, 3).await.expect("load at the end").entries.is_empty());
    assert!(store.load_from(run.id, u64::MAX).await.expect("load past the end").entries.is_empty());

    assert_eq!(store.events_from(run.id, 1).await.expect("events from 1"), vec![event(2), event(3)]);
    assert_eq!(store.events_from(run.id, 0).await.expect("events from 0").len(), 3);
    assert!(store.events_from(run.id, 3).await.expect("events at the end").is_empty());
    assert!(store.events_from(run.id, u64::MAX).await.expect("events past the end").is_empty());
    // Of one kind only, in order.
    let mut other = JournalBatch {
        entries: Vec::new(),
        blobs: Vec::new(),
        events: vec![stepwright_core::journal::EventRecord { kind: "tock".into(), ..event(4) }, event(5)],
    };
    store.append(run.id, None, &mut other).await.expect("append");
    assert_eq!(
        store.events_of_kind(run.id, "tick").await.expect("ticks"),
        vec![event(1), event(2), event(3), event(5)]
    );
    assert_eq!(store.events_of_kind(run.id, "tock").await.expect("tocks").len(), 1);
    assert!(store.events_of_kind(run.id, "none").await.expect("none").is_empty());
    // Shown one by one, the same events in the same order, and none of another kind.
    let mut seen = Vec::new();
    store.visit_events_of_kind(run.id, "tick", &mut |e| seen.push(e.clone())).await.expect("visit ticks");
    assert_eq!(seen, vec![event(1), event(2), event(3), event(5)]);
    let mut none = 0;
    store.visit_events_of_kind(run.id, "none", &mut |_| none += 1).await.expect("visit none");
    assert_eq!(none, 0);

    let missing = id(240);
    assert!(matches!(store.load_from(missing, 0).await, Err(StoreError::RunNotFound(_))));
    assert!(matches!(store.events_from(missing, 0).await, Err(StoreError::RunNotFound(_))));
    assert!(matches!(store.events_of_kind(missing, "tick").await, Err(StoreError::RunNotFound(_))));
    assert!(matches!(store.visit_events_of_kind(missing, "tick", &mut |_| ()).await, Err(StoreError::RunNotFound(_))));
}

/// Waking a run suspended on a timer makes it due now; a run waiting on nothing but a
/// person, a running run and a run whose timer is already due are left as they are.
pub async fn waking_brings_a_timer_forward(store: &dyn Store) {
    // Far in the future by any clock, the database's included.
    let far = Timestamp::from_micros(i64::MAX / 2);
    let now = Timestamp::from_micros(1_000);
    let suspend = |wake_at| StatusUpdate {
        status: RunStatus::Suspended,
        output: None,
        error: None,
        at: Timestamp::from_micros(20),
        wake_at,
        fence: None,
    };
    let timer = record(7, "flow", RunStatus::Pending, 10);
    store.create_run(timer.clone()).await.expect("create");
    store.set_status(timer.id, suspend(Some(far))).await.expect("suspend");
    assert!(store.claim_due("w", now, std::time::Duration::from_secs(30), 10, None).await.expect("claim").is_empty());
    assert!(store.wake_run(timer.id, now).await.expect("wake"), "a far timer is brought forward");
    let woken = store.load(timer.id).await.expect("load").record;
    assert_eq!(woken.status, RunStatus::Suspended);
    assert!(woken.wake_at.is_some_and(|at| at < far), "the timer moved: {:?}", woken.wake_at);
    assert!(!store.wake_run(timer.id, now).await.expect("wake again"), "a due timer stays as it is");

    let person = record(8, "flow", RunStatus::Pending, 10);
    store.create_run(person.clone()).await.expect("create");
    store.set_status(person.id, suspend(None)).await.expect("suspend");
    assert!(!store.wake_run(person.id, now).await.expect("wake"), "no timer, nothing to bring forward");
    assert_eq!(store.load(person.id).await.expect("load").record.wake_at, None);

    let running = record(9, "flow", RunStatus::Running, 10);
    store.create_run(running.clone()).await.expect("create");
    assert!(!store.wake_run(running.id, now).await.expect("wake"), "a running run is left alone");

    let missing = id(241);
    assert!(matches!(store.wake_run(missing, now).await, Err(StoreError::RunNotFound(_))));
}

/// Listing filters by status and workflow, newest first, limited.
pub async fn list_filters(store: &dyn Store) {
    for (n, workflow, status) in
        [(10, "a", RunStatus::Completed), (11, "a", RunStatus::Failed), (12, "b", RunStatus::Completed)]
    {
        store.create_run(record(n, workflow, status, i64::from(n))).await.expect("create");
    }
    let all = store.list_runs(RunFilter::default()).await.expect("list");
    assert_eq!(all.iter().map(|r| r.id).collect::<Vec<_>>(), [id(12), id(11), id(10)]);
    let completed =
        store.list_runs(RunFilter { status: Some(RunStatus::Completed), ..RunFilter::default() }).await.expect("list");
    assert_eq!(completed.iter().map(|r| r.id).collect::<Vec<_>>(), [id(12), id(10)]);
    let of_a = store
        .list_runs(RunFilter { workflow: Some("a".into()), limit: Some(1), ..RunFilter::default() })
        .await
        .expect("list");
    assert_eq!(of_a.iter().map(|r| r.id).collect::<Vec<_>>(), [id(11)]);
    // Pages: the next page starts after the last run of the one before, whatever filters.
    let page = |before: Option<RunId>, status: Option<RunStatus>| RunFilter {
        limit: Some(1),
        before,
        status,
        ..RunFilter::default()
    };
    let first = store.list_runs(page(None, None)).await.expect("list");
    let second = store.list_runs(page(Some(first[0].id), None)).await.expect("list");
    let third = store.list_runs(page(Some(second[0].id), None)).await.expect("list");
    let last = store.list_runs(page(Some(third[0].id), None)).await.expect("list");
    assert_eq!([first[0].id, second[0].id, third[0].id], [id(12), id(11), id(10)]);
    assert!(last.is_empty());
    let completed_after = store.list_runs(page(Some(id(11)), Some(RunStatus::Completed))).await.expect("list");
    assert_eq!(completed_after.iter().map(|r| r.id).collect::<Vec<_>>(), [id(10)], "the cursor need not match");
    // Headers only: no input, output or error is read.
    let headers =
        store.list_runs(RunFilter { headers_only: true, ..RunFilter::default() }).await.expect("list headers");
    assert_eq!(headers.len(), 3);
    assert!(headers.iter().all(|r| *r.input == serde_json::Value::Null && r.output.is_none()));
    assert_eq!(headers[0].workflow, "b");
    assert_eq!(headers[0].caller, all[0].caller, "the rest of the header is there");
    // Headers by id: those that exist, in the order asked, as a listing of headers gives them.
    let named = store.run_headers(vec![id(10), id(99), id(12)]).await.expect("headers by id");
    assert_eq!(
        named.iter().map(|r| r.id).collect::<Vec<_>>(),
        [id(10), id(12)],
        "a run that does not exist is left out"
    );
    assert_eq!(named[1], headers[0], "the same header a listing gives");
    assert!(store.run_headers(Vec::new()).await.expect("no runs").is_empty());
    // Tenants: a run started in a tenant is listed only to that tenant's filter.
    let mut owned = record(13, "a", RunStatus::Completed, 13);
    owned.caller.tenant = Some("globex".into());
    store.create_run(owned).await.expect("create");
    let of_globex =
        store.list_runs(RunFilter { tenant: Some("globex".into()), ..RunFilter::default() }).await.expect("list");
    assert_eq!(of_globex.iter().map(|r| r.id).collect::<Vec<_>>(), [id(13)]);
    let of_acme =
        store.list_runs(RunFilter { tenant: Some("acme".into()), ..RunFilter::default() }).await.expect("list");
    assert_eq!(of_acme.len(), 3);
    let of_other =
        store.list_runs(RunFilter { tenant: Some("other".into()), ..RunFilter::default() }).await.expect("list");
    assert!(of_other.is_empty());
    assert_eq!(store.list_runs(RunFilter::default()).await.expect("list").len(), 4, "no filter: every tenant");
    // Changes: updated at or after a time, the least recently updated first.
    let since = |at: i64| RunFilter { updated_since: Some(Timestamp::from_micros(at)), ..RunFilter::default() };
    let changed = store.list_runs(since(11)).await.expect("list");
    assert_eq!(changed.iter().map(|r| r.id).collect::<Vec<_>>(), [id(11), id(12), id(13)]);
    let changed = store.list_runs(RunFilter { limit: Some(1), ..since(12) }).await.expect("list");
    assert_eq!(changed.iter().map(|r| r.id).collect::<Vec<_>>(), [id(12)]);
    // Creation time: from (inclusive) until (exclusive), with the other filters and pages.
    let created = |from: Option<i64>, until: Option<i64>| RunFilter {
        created_from: from.map(Timestamp::from_micros),
        created_until: until.map(Timestamp::from_micros),
        ..RunFilter::default()
    };
    let between = store.list_runs(created(Some(11), Some(13))).await.expect("list");
    assert_eq!(between.iter().map(|r| r.id).collect::<Vec<_>>(), [id(12), id(11)]);
    let later = store.list_runs(RunFilter { before: Some(id(12)), ..created(Some(11), None) }).await.expect("list");
    assert_eq!(later.iter().map(|r| r.id).collect::<Vec<_>>(), [id(11)], "with a cursor");
    let changed_between = store.list_runs(RunFilter { created_until: Some(Timestamp::from_micros(12)), ..since(0) });
    assert_eq!(changed_between.await.expect("list").iter().map(|r| r.id).collect::<Vec<_>>(), [id(10), id(11)]);
    // Text in the input, ignoring case; headers-only listings filter on it too.
    let mut invoice = record(14, "a", RunStatus::Completed, 14);
    invoice.input = Arc::new(json!({ "subject": "Invoice 1042 overdue", "n": 14 }));
    store.create_run(invoice).await.expect("create");
    let text = |text: &str| RunFilter { input_contains: Some(text.into()), headers_only: true, ..RunFilter::default() };
    let found = store.list_runs(text("invoice 1042")).await.expect("list");
    assert_eq!(found.iter().map(|r| r.id).collect::<Vec<_>>(), [id(14)]);
    assert!(store.list_runs(text("invoice 1043")).await.expect("list").is_empty());
    // A large input (stored compressed by some backends) is searched as well.
    let mut large = record(15, "a", RunStatus::Completed, 15);
    large.input = Arc::new(json!({ "document": "lorem ipsum ".repeat(400) + "Needle-77" }));
    store.create_run(large).await.expect("create");
    let found = store.list_runs(text("NEEDLE-77")).await.expect("list");
    assert_eq!(found.iter().map(|r| r.id).collect::<Vec<_>>(), [id(15)]);
    let digit = store.list_runs(RunFilter { status: Some(RunStatus::Failed), ..text("11") }).await.expect("list");
    assert_eq!(digit.iter().map(|r| r.id).collect::<Vec<_>>(), [id(11)], "with the other filters");
    // Lineage: the runs forked from a run.
    let mut child = record(16, "a", RunStatus::Completed, 16);
    child.parent = Some(stepwright_core::journal::Lineage { run: id(10), at: StepPath::new("b") });
    store.create_run(child).await.expect("create");
    let children = RunFilter { parent: Some(id(10)), headers_only: true, ..RunFilter::default() };
    let children = store.list_runs(children).await.expect("list");
    assert_eq!(children.iter().map(|r| r.id).collect::<Vec<_>>(), [id(16)]);
    assert_eq!(children[0].parent.as_ref().map(|p| p.run), Some(id(10)), "headers keep the lineage");
    assert!(
        store.list_runs(RunFilter { parent: Some(id(11)), ..RunFilter::default() }).await.expect("list").is_empty()
    );
    // Who started it: a person, or a schedule by its name.
    let mut ticked = record(17, "a", RunStatus::Completed, 17);
    ticked.caller.user = Some("schedule:hourly".into());
    store.create_run(ticked).await.expect("create");
    let by = |who: &str| RunFilter { started_by: Some(who.into()), headers_only: true, ..RunFilter::default() };
    let found = store.list_runs(by("schedule:hourly")).await.expect("list");
    assert_eq!(found.iter().map(|r| r.id).collect::<Vec<_>>(), [id(17)]);
    assert_eq!(found[0].caller.user.as_deref(), Some("schedule:hourly"), "headers keep the caller");
    assert!(store.list_runs(by("schedule:daily")).await.expect("list").is_empty());
    // Tags: kept as given, in order; a listing finds a run by any one of them, whole (not a
    // prefix or a part), in a full listing and in one of headers, and a run without tags
    // by none.
    let mut tagged = record(18, "a", RunStatus::Completed, 18);
    tagged.tags = vec!["env:prod".into(), "customer-42".into()];
    store.create_run(tagged).await.expect("create");
    let mut other = record(19, "a", RunStatus::Completed, 19);
    other.tags = vec!["env:prod-eu".into()];
    store.create_run(other).await.expect("create");
    assert_eq!(store.load(id(18)).await.expect("load").record.tags, ["env:prod", "customer-42"]);
    assert!(store.load(id(17)).await.expect("load").record.tags.is_empty(), "no tags: an empty list");
    let tag = |tag: &str, headers_only| RunFilter { tag: Some(tag.into()), headers_only, ..RunFilter::default() };
    for headers_only in [false, true] {
        let found = store.list_runs(tag("customer-42", headers_only)).await.expect("list");
        assert_eq!(found.iter().map(|r| r.id).collect::<Vec<_>>(), [id(18)]);
        assert_eq!(found[0].tags, ["env:prod", "customer-42"], "a listing keeps the tags");
        let found = store.list_runs(tag("env:prod", headers_only)).await.expect("list");
        assert_eq!(found.iter().map(|r| r.id).collect::<Vec<_>>(), [id(18)], "a whole tag, not a prefix");
    }
    for absent in ["env", "prod", "customer-4", "ENV:PROD"] {
        assert!(store.list_runs(tag(absent, true)).await.expect("list").is_empty(), "{absent} matches no run");
    }
    let both = RunFilter { tag: Some("env:prod-eu".into()), workflow: Some("a".into()), ..RunFilter::default() };
    assert_eq!(store.list_runs(both).await.expect("list").iter().map(|r| r.id).collect::<Vec<_>>(), [id(19)]);
}

/// Erase removes one run and the blobs only it referenced; retention removes old finished
/// runs but keeps the newest per workflow and every unfinished run.
pub async fn erase_and_retention_collect_blobs(store: &dyn Store) {
    // Large enough that every backend stores them as blobs (not inline in the journal).
    let pad = "x".repeat(600);
    let shared = json!({ "shared": pad });
    let runs = [
        (20, "w", RunStatus::Completed, 100),
        (21, "w", RunStatus::Completed, 200),
        (22, "w", RunStatus::Completed, 300),
        (23, "w", RunStatus::Suspended, 50),
        (24, "v", RunStatus::Failed, 60),
    ];
    for (n, workflow, status, at) in runs {
        store.create_run(record(n, workflow, status, at)).await.expect("create");
        let (own, own_blob) = completed("own", json!({ "run": n, "pad": pad }));
        let (common, common_blob) = completed("common", shared.clone());
        let mut batch = JournalBatch { entries: vec![own, common], blobs: vec![own_blob, common_blob], events: vec![] };
        store.append(id(n), None, &mut batch).await.expect("append");
    }
    let removed = store.erase_run(id(24)).await.expect("erase");
    assert_eq!(removed.runs, 1);
    assert_eq!(removed.blobs, 1, "only the erased run's own blob goes; the shared one stays");
    assert!(matches!(store.load(id(24)).await, Err(StoreError::RunNotFound(_))));

    store.create_run(record(25, "v", RunStatus::Cancelled, 70)).await.expect("create");
    let only_failed = Retention {
        finished_before: Some(Timestamp::from_micros(250)),
        status: Some(RunStatus::Failed),
        ..Default::default()
    };
    assert_eq!(store.apply_retention(only_failed).await.expect("retention").runs, 0, "no failed run is left");
    let cancelled = Retention { status: Some(RunStatus::Cancelled), ..Default::default() };
    assert_eq!(store.apply_retention(cancelled).await.expect("retention").runs, 1, "the cancelled one only");
    let removed = store
        .apply_retention(Retention {
            finished_before: Some(Timestamp::from_micros(250)),
            keep_last: Some(1),
            ..Default::default()
        })
        .await
        .expect("retention");
    // Runs 20 and 21 are old and finished; 22 is the newest of `w`; 23 is not finished.
    assert_eq!(removed.runs, 2);
    assert_eq!(removed.blobs, 2);
    for n in [22, 23] {
        let loaded = store.load(id(n)).await.expect("kept");
        assert_eq!(loaded.blobs.len(), 2, "kept runs keep their blobs");
    }
}

/// Operations on unknown runs say so.
pub async fn missing_runs_are_errors(store: &dyn Store) {
    let nobody = id(99);
    assert!(matches!(store.load(nobody).await, Err(StoreError::RunNotFound(_))));
    assert!(matches!(store.events(nobody).await, Err(StoreError::RunNotFound(_))));
    let mut batch =
        JournalBatch { entries: vec![entry("a", 1, Record::Started { attempt: 1 })], ..JournalBatch::default() };
    assert!(matches!(store.append(nobody, None, &mut batch).await, Err(StoreError::RunNotFound(_))));
    let update = StatusUpdate {
        status: RunStatus::Completed,
        output: None,
        error: None,
        at: Timestamp::EPOCH,
        wake_at: None,
        fence: None,
    };
    assert!(matches!(store.set_status(nobody, update).await, Err(StoreError::RunNotFound(_))));
}
