//! Schedules, their ticks, and the events that fire triggers.

use super::*;

pub(super) fn schedule(tenant: Option<&str>, name: &str, due_at: Option<i64>) -> ScheduleRecord {
    ScheduleRecord {
        key: ScheduleKey::new(tenant, name),
        workflow: "flow".into(),
        definition_hash: ContentHash::of_value(&json!("flow")),
        spec: json!({ "cadence": { "every": { "period_us": 1_000_000, "phase_us": 0 } } }),
        state: json!({}),
        paused: false,
        due_at: due_at.map(Timestamp::from_micros),
        version: 0,
        created_at: Timestamp::from_micros(1),
        updated_at: Timestamp::from_micros(1),
        on_event: None,
    }
}

pub(super) fn tick(at: i64, outcome: TickOutcome) -> TickRecord {
    TickRecord {
        at: Timestamp::from_micros(at),
        local: format!("t{at}"),
        outcome,
        recorded_at: Timestamp::from_micros(at),
    }
}

pub(super) fn advance_of(
    record: &ScheduleRecord,
    state: serde_json::Value,
    ticks: Vec<TickRecord>,
    runs: Vec<RunRecord>,
) -> ScheduleAdvance {
    ScheduleAdvance {
        key: record.key.clone(),
        version: record.version,
        state,
        paused: record.paused,
        due_at: Some(Timestamp::from_micros(9_000)),
        ticks,
        fires: Vec::new(),
        read_through: None,
        runs,
        replace_skipped: false,
        at: Timestamp::from_micros(5_000),
    }
}

/// Schedules are kept by tenant and name; the due ones come most overdue first; an advance
/// writes state, ticks and runs together only from the version it read; a tick is recorded
/// once, and an advance that repeats one writes nothing at all.
pub async fn schedules_advance_once<S: Store + ScheduleStore + ?Sized>(store: &S) {
    for record in [
        schedule(None, "b", Some(300)),
        schedule(None, "a", Some(100)),
        schedule(Some("acme"), "a", Some(200)),
        schedule(None, "never", None),
    ] {
        store.put_schedule(record).await.expect("put");
    }
    let names = |records: Vec<ScheduleRecord>| records.into_iter().map(|r| r.key.to_string()).collect::<Vec<_>>();
    assert_eq!(names(store.schedules(None).await.unwrap()).len(), 4);
    assert_eq!(names(store.schedules(Some("acme")).await.unwrap()), ["acme:a"], "a tenant's own");
    assert_eq!(names(store.due_schedules(Timestamp::from_micros(250), 10).await.unwrap()), ["a", "acme:a"]);
    assert_eq!(names(store.due_schedules(Timestamp::from_micros(1_000), 2).await.unwrap()), ["a", "acme:a"], "limited");
    assert_eq!(store.next_due().await.unwrap(), Some(Timestamp::from_micros(100)));

    let a = store.schedule(&ScheduleKey::new(None, "a")).await.unwrap().expect("kept");
    assert_eq!(
        (a.due_at, a.spec["cadence"]["every"]["period_us"].as_i64()),
        (Some(Timestamp::from_micros(100)), Some(1_000_000))
    );
    let mut run = record(90, "flow", RunStatus::Pending, 100);
    run.caller = Caller::default();
    let first = advance_of(
        &a,
        json!({ "decided_through": 100 }),
        vec![
            tick(100, TickOutcome::Started { run: run.id }),
            tick(50, TickOutcome::Skipped { reason: "paused".into() }),
        ],
        vec![run.clone()],
    );
    assert!(store.advance_schedule(first.clone()).await.expect("advance"), "written");
    let after = store.schedule(&a.key).await.unwrap().unwrap();
    assert_eq!(
        (after.version, &after.state, after.due_at),
        (a.version + 1, &json!({ "decided_through": 100 }), Some(Timestamp::from_micros(9_000)))
    );
    assert_eq!(store.load(run.id).await.expect("the run").record.status, RunStatus::Pending, "created with the tick");
    let ticks = store.ticks(&a.key, 10).await.unwrap();
    assert_eq!(
        ticks,
        [tick(100, TickOutcome::Started { run: run.id }), tick(50, TickOutcome::Skipped { reason: "paused".into() })],
        "newest first"
    );

    // From a stale version: nothing.
    assert!(!store.advance_schedule(first).await.expect("advance"), "another process advanced it first");
    // A tick recorded already: an error, and nothing of the advance is written.
    let other = record(91, "flow", RunStatus::Pending, 100);
    let repeat = advance_of(
        &after,
        json!({ "decided_through": 200 }),
        vec![
            tick(200, TickOutcome::Skipped { reason: "overlap".into() }),
            tick(100, TickOutcome::Started { run: other.id }),
        ],
        vec![other.clone()],
    );
    assert!(store.advance_schedule(repeat).await.is_err(), "a tick is recorded once");
    let unchanged = store.schedule(&a.key).await.unwrap().unwrap();
    assert_eq!((unchanged.version, &unchanged.state), (after.version, &after.state));
    assert_eq!(store.ticks(&a.key, 10).await.unwrap().len(), 2);
    assert!(matches!(store.load(other.id).await, Err(StoreError::RunNotFound(_))), "its run was not created");

    // A backfill turns a skipped tick into a started one, never a started one again.
    let backfilled = record(92, "flow", RunStatus::Pending, 100);
    let mut backfill = advance_of(
        &after,
        json!({ "decided_through": 100 }),
        vec![tick(50, TickOutcome::Started { run: backfilled.id })],
        vec![backfilled.clone()],
    );
    assert!(store.advance_schedule(backfill.clone()).await.is_err(), "not without `replace_skipped`");
    backfill.replace_skipped = true;
    assert!(store.advance_schedule(backfill).await.expect("backfill"));
    let after = store.schedule(&a.key).await.unwrap().unwrap();
    assert_eq!(store.ticks(&a.key, 10).await.unwrap()[1].outcome, TickOutcome::Started { run: backfilled.id });
    let again = record(93, "flow", RunStatus::Pending, 100);
    let mut twice = advance_of(&after, json!({}), vec![tick(100, TickOutcome::Started { run: again.id })], vec![again]);
    twice.replace_skipped = true;
    assert!(store.advance_schedule(twice).await.is_err(), "a started tick stays started");

    // A replacement moves the version on, so an advance decided before it writes nothing.
    let mut replaced = schedule(None, "a", Some(400));
    replaced.version = 0;
    store.put_schedule(replaced).await.unwrap();
    let now = store.schedule(&a.key).await.unwrap().unwrap();
    assert!(now.version > after.version, "{} > {}", now.version, after.version);
    assert!(!store.advance_schedule(advance_of(&after, json!({}), vec![], vec![])).await.unwrap());
    // Deleted with its ticks; the runs stay.
    assert!(store.delete_schedule(&a.key).await.unwrap());
    assert!(!store.delete_schedule(&a.key).await.unwrap());
    assert!(store.schedule(&a.key).await.unwrap().is_none());
    assert!(store.ticks(&a.key, 10).await.unwrap().is_empty());
    assert!(store.load(run.id).await.is_ok());
}

/// Two stores on one database (two processes) advancing the same schedule from the same
/// version at once: exactly one wins, and exactly one run is created.
pub async fn schedule_advances_race<A: Store + ScheduleStore + ?Sized, B: Store + ScheduleStore + ?Sized>(
    a: &A,
    b: &B,
) {
    for round in 0..20u8 {
        let name = format!("race-{round}");
        a.put_schedule(schedule(None, &name, Some(100))).await.unwrap();
        let read = b.schedule(&ScheduleKey::new(None, &name)).await.unwrap().unwrap();
        let (mut one, mut two) = (
            record(100 + round, "flow", RunStatus::Pending, 100),
            record(100 + round, "flow", RunStatus::Pending, 100),
        );
        one.caller = Caller::default();
        two.caller = Caller::default();
        two.id = id(200 - round);
        let advance = |run: &RunRecord| {
            advance_of(
                &read,
                json!({ "by": run.id.to_string() }),
                vec![tick(100, TickOutcome::Started { run: run.id })],
                vec![run.clone()],
            )
        };
        let (x, y) = tokio::join!(a.advance_schedule(advance(&one)), b.advance_schedule(advance(&two)));
        let won = [x.unwrap_or(false), y.unwrap_or(false)];
        assert_eq!(won.iter().filter(|w| **w).count(), 1, "round {round}: exactly one advance wins: {won:?}");
        let created = [a.load(one.id).await.is_ok(), a.load(two.id).await.is_ok()];
        assert_eq!(created, won, "round {round}: only the winner's run exists");
        assert_eq!(a.ticks(&read.key, 10).await.unwrap().len(), 1);
    }
}

pub(super) fn new_event(
    tenant: Option<&str>,
    name: &str,
    payload: serde_json::Value,
    key: Option<&str>,
    at: i64,
) -> NewEvent {
    NewEvent {
        tenant: tenant.map(str::to_owned),
        name: name.to_owned(),
        payload,
        idempotency_key: key.map(str::to_owned),
        at: Timestamp::from_micros(at),
    }
}

/// Events are stored once per idempotency key and tenant, read back in either order and by
/// name, position and time; storing one makes its tenant's triggers due and wakes the runs
/// watching its name (once per registration); a trigger's fire is recorded once per event,
/// with the advance that writes it, and goes with the trigger.
pub async fn events_are_stored_once_and_wake_their_readers<S: Store + ScheduleStore + EventStore + ?Sized>(store: &S) {
    let mut trigger = schedule(None, "flow/on-ticket", None);
    trigger.on_event = Some("ticket.*".into());
    let mut elsewhere = schedule(Some("acme"), "flow/on-ticket", None);
    elsewhere.on_event = Some("ticket.*".into());
    let clock = schedule(None, "flow/clock", Some(9_000));
    for record in [trigger.clone(), elsewhere, clock] {
        store.put_schedule(record).await.unwrap();
    }
    // A suspended run watching `ticket.closed`, far from its timer.
    let far = Timestamp::from_micros(i64::MAX / 2);
    let mut waiting = record(40, "flow", RunStatus::Pending, 10);
    waiting.caller = Caller::default();
    store.create_run(waiting.clone()).await.unwrap();
    let suspend = StatusUpdate {
        status: RunStatus::Suspended,
        output: None,
        error: None,
        at: Timestamp::from_micros(20),
        wake_at: Some(far),
        fence: None,
    };
    store.set_status(waiting.id, suspend.clone()).await.unwrap();
    store.watch_events(waiting.id, None, "ticket.closed").await.unwrap();
    store.watch_events(waiting.id, None, "ticket.closed").await.expect("watching twice is watching");
    let wake_at = |run| async move { store.load(run).await.unwrap().record.wake_at };

    let first =
        store.append_event(new_event(None, "ticket.created", json!({ "id": 1 }), Some("k1"), 500)).await.unwrap();
    assert!(first.created);
    assert_eq!((first.event.name.as_str(), &first.event.payload), ("ticket.created", &json!({ "id": 1 })));
    assert_eq!(wake_at(waiting.id).await, Some(far), "another name wakes no one");
    let due = |key: ScheduleKey| async move { store.schedule(&key).await.unwrap().unwrap().due_at };
    assert_eq!(due(trigger.key.clone()).await, Some(Timestamp::from_micros(500)), "the tenant's trigger is due");
    assert_eq!(due(ScheduleKey::new(Some("acme"), "flow/on-ticket")).await, None, "another tenant's is not");
    assert_eq!(
        due(ScheduleKey::new(None, "flow/clock")).await,
        Some(Timestamp::from_micros(9_000)),
        "a clock's is not"
    );

    let again =
        store.append_event(new_event(None, "ticket.created", json!({ "id": 99 }), Some("k1"), 600)).await.unwrap();
    assert!(!again.created, "the key was sent before");
    assert_eq!(again.event, first.event, "the first event comes back");
    let acme = store.append_event(new_event(Some("acme"), "ticket.created", json!(2), Some("k1"), 700)).await.unwrap();
    assert!(acme.created, "keys are per tenant");
    let closed = store.append_event(new_event(None, "ticket.closed", json!({ "id": 1 }), None, 800)).await.unwrap();
    assert!(closed.created && closed.event.seq > first.event.seq);
    let woken = wake_at(waiting.id).await;
    assert!(woken.is_some_and(|at| at < far), "the watching run is due: {woken:?}");
    // A registration is used once.
    store.set_status(waiting.id, suspend).await.unwrap();
    store.append_event(new_event(None, "ticket.closed", json!({ "id": 2 }), None, 900)).await.unwrap();
    assert_eq!(wake_at(waiting.id).await, Some(far), "nobody watches any more");

    let seqs =
        |events: Vec<stepwright_core::store::event::StoredEvent>| events.iter().map(|e| e.seq).collect::<Vec<_>>();
    let all = seqs(store.event_log(None, EventQuery::default()).await.unwrap());
    assert_eq!(all.len(), 3, "the tenant's own: {all:?}");
    assert!(all.windows(2).all(|w| w[0] > w[1]), "newest first: {all:?}");
    let forward = seqs(store.event_log(None, EventQuery { after: Some(0), ..Default::default() }).await.unwrap());
    assert_eq!(forward, all.iter().rev().copied().collect::<Vec<_>>(), "after a position: oldest first");
    let named = EventQuery { name: Some("ticket.closed".into()), limit: 1, ..Default::default() };
    assert_eq!(seqs(store.event_log(None, named).await.unwrap()), [all[0]], "by name, limited");
    let before = EventQuery { before: Some(all[0]), since: Some(Timestamp::from_micros(600)), ..Default::default() };
    assert_eq!(
        seqs(store.event_log(None, before).await.unwrap()),
        [closed.event.seq],
        "before a position, since a time"
    );
    let logged =
        store.logged_events(None, "ticket.closed", Some(closed.event.seq), Timestamp::from_micros(0), 10).await;
    assert_eq!(seqs(logged.unwrap()), [all[0]], "what a wait reads: after its cursor");
    let since = store.logged_events(None, "ticket.created", None, Timestamp::from_micros(501), 10).await.unwrap();
    assert!(since.is_empty(), "received before the run: not for its wait");
    assert_eq!(store.event_by_seq(None, first.event.seq).await.unwrap(), Some(first.event.clone()));
    assert_eq!(store.event_by_seq(Some("acme"), first.event.seq).await.unwrap(), None, "another tenant's");
    assert!(matches!(store.append_event(new_event(None, "", json!(1), None, 1)).await, Err(StoreError::Invalid(_))));
    let long = "k".repeat(256);
    assert!(matches!(
        store.append_event(new_event(None, "x", json!(1), Some(&long), 1)).await,
        Err(StoreError::Invalid(_))
    ));

    // Fires: written with the advance, once per (trigger, event).
    let fire = |event: u64, outcome: TickOutcome| EventFire {
        trigger: trigger.key.name.clone(),
        event,
        outcome,
        recorded_at: Timestamp::from_micros(1_000),
    };
    let mut run = record(41, "flow", RunStatus::Pending, 10);
    run.caller = Caller::default();
    let read = store.schedule(&trigger.key).await.unwrap().unwrap();
    let mut advance = advance_of(&read, json!({ "read_through": closed.event.seq }), vec![], vec![run.clone()]);
    advance.fires = vec![
        fire(first.event.seq, TickOutcome::Started { run: run.id }),
        fire(closed.event.seq, TickOutcome::Skipped { reason: "paused".into() }),
    ];
    assert!(store.advance_schedule(advance.clone()).await.unwrap());
    assert_eq!(store.event_fires(None, first.event.seq).await.unwrap(), [advance.fires[0].clone()]);
    assert_eq!(store.event_fires(Some("acme"), first.event.seq).await.unwrap(), [], "another tenant's");
    let fires = store.trigger_fires(&trigger.key, 10).await.unwrap();
    assert_eq!(fires, [advance.fires[1].clone(), advance.fires[0].clone()], "newest event first");
    // An advance that read through an older position leaves the trigger due: events came
    // after what it read.
    let read = store.schedule(&trigger.key).await.unwrap().unwrap();
    let mut behind = advance_of(&read, json!({}), vec![], vec![]);
    (behind.due_at, behind.read_through) = (None, Some(first.event.seq));
    assert!(store.advance_schedule(behind).await.unwrap());
    let read = store.schedule(&trigger.key).await.unwrap().unwrap();
    assert_eq!(read.due_at, Some(Timestamp::from_micros(5_000)), "due again at once");
    let mut through = advance_of(&read, json!({}), vec![], vec![]);
    (through.due_at, through.read_through) = (None, Some(all[0]));
    assert!(store.advance_schedule(through).await.unwrap());
    assert_eq!(store.schedule(&trigger.key).await.unwrap().unwrap().due_at, None, "nothing after what it read");
    let after = store.schedule(&trigger.key).await.unwrap().unwrap();
    let mut other = record(42, "flow", RunStatus::Pending, 10);
    other.caller = Caller::default();
    let mut repeat = advance_of(&after, json!({}), vec![], vec![other.clone()]);
    repeat.fires = vec![fire(first.event.seq, TickOutcome::Started { run: other.id })];
    assert!(store.advance_schedule(repeat).await.is_err(), "an event fires a trigger once");
    assert!(matches!(store.load(other.id).await, Err(StoreError::RunNotFound(_))), "nothing of it written");
    assert_eq!(store.schedule(&trigger.key).await.unwrap().unwrap().version, after.version);
    assert!(store.delete_schedule(&trigger.key).await.unwrap());
    assert!(store.trigger_fires(&trigger.key, 10).await.unwrap().is_empty(), "the fires go with the trigger");
    assert!(store.load(run.id).await.is_ok(), "its runs stay");
}
