//! The conformance suite every [`Store`] backend must pass.
//!
//! Each check takes a fresh, empty store and panics with a message on a violation; a
//! backend's tests call [`run_all`] (or single checks) with a factory of fresh stores.

use std::sync::Arc;

use serde_json::json;
use stepwright_core::bank::{MemoryAddress, MemoryBank, MemoryItem, MemoryScope, MemorySearch};
use stepwright_core::journal::{JournalBatch, JournalEntry, RunRecord};
use stepwright_core::session::{SessionAppend, SessionOwner, SessionStore};
use stepwright_core::store::event::{EventFire, EventQuery, EventStore, NewEvent};
use stepwright_core::store::schedule::{
    ScheduleAdvance, ScheduleKey, ScheduleRecord, ScheduleStore, TickOutcome, TickRecord,
};
use stepwright_core::store::{Retention, RunFilter, StatusUpdate};
use stepwright_core::{
    Caller, ContentHash, Decision, InterruptId, InterruptRequest, Record, Resolution, RunId, RunStatus, StepError,
    StepPath, Store, StoreError, Timestamp,
};

/// Runs every check, each on a fresh store from `fresh`.
pub async fn run_all<S, F, Fut>(fresh: F)
where
    S: Store
        + SessionStore
        + MemoryBank
        + ScheduleStore
        + EventStore
        + stepwright_core::store::quota::QuotaStore
        + stepwright_core::StepCache,
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Arc<S>>,
{
    create_and_load(&*fresh().await).await;
    append_keeps_order_and_blobs(&*fresh().await).await;
    concurrent_appends_to_one_run(&*fresh().await).await;
    refused_appends_fail_alone(&*fresh().await).await;
    concurrent_creates_take_an_id_once(&*fresh().await).await;
    concurrent_status_changes_each_get_their_own_answer(&*fresh().await).await;
    status_updates(&*fresh().await).await;
    interrupts_resolve_once(&*fresh().await).await;
    events_in_order(&*fresh().await).await;
    reads_from_a_position(&*fresh().await).await;
    waking_brings_a_timer_forward(&*fresh().await).await;
    list_filters(&*fresh().await).await;
    erase_and_retention_collect_blobs(&*fresh().await).await;
    missing_runs_are_errors(&*fresh().await).await;
    messages_keep_their_order(&*fresh().await).await;
    definitions_are_kept_by_hash(&*fresh().await).await;
    leases_fence_writes(&*fresh().await).await;
    a_live_lease_is_never_shared(&*fresh().await).await;
    leases_are_renewed_together(&*fresh().await).await;
    claims_keep_to_priority_and_concurrency_groups(&*fresh().await).await;
    quotas_grant_up_to_their_limit_per_window(&*fresh().await).await;
    the_step_cache_keeps_the_first_output_by_key(&*fresh().await).await;
    cancels_reach_executing_runs(&*fresh().await).await;
    claim_due_finds_ready_runs(&*fresh().await).await;
    claim_due_keeps_to_a_tenant(&*fresh().await).await;
    sessions_keep_history_for_their_owner(&*fresh().await).await;
    memory_bank_stores_and_recalls(&*fresh().await).await;
    run_memory_goes_with_its_run(&*fresh().await).await;
    schedules_advance_once(&*fresh().await).await;
    events_are_stored_once_and_wake_their_readers(&*fresh().await).await;
}

/// The step cache answers what was kept under a key, exactly as kept (key order, large
/// numbers), keeps the first output under a key, and keeps keys apart.
pub async fn the_step_cache_keeps_the_first_output_by_key<S: stepwright_core::StepCache + ?Sized>(store: &S) {
    let (one, two) = (ContentHash::of_bytes(b"key one"), ContentHash::of_bytes(b"key two"));
    assert_eq!(store.cached(&one).await.expect("read"), None, "an empty cache has nothing");
    let output = json!({ "zeta": 1, "alpha": [1.5, "x", null], "big": 9_007_199_254_740_993_u64 });
    store.keep(&one, &output).await.expect("keep");
    assert_eq!(store.cached(&one).await.expect("read"), Some(output.clone()));
    store.keep(&one, &json!("another")).await.expect("keeping a kept key again");
    assert_eq!(store.cached(&one).await.expect("read"), Some(output), "the first output stays");
    assert_eq!(store.cached(&two).await.expect("read"), None, "keys are apart");
    store.keep(&two, &json!(2)).await.expect("keep");
    let long_ago = Timestamp::from_micros(1_000_000);
    assert_eq!(store.forget_before(long_ago).await.expect("forget"), 0, "nothing was kept in 1970");
    let later = stepwright_core::store::quota::wall_now().plus(std::time::Duration::from_secs(3600));
    assert_eq!(store.forget_before(later).await.expect("forget"), 2, "both were kept before an hour from now");
    assert_eq!(store.cached(&one).await.expect("read"), None, "forgotten");
}

/// Workflow sources are kept by hash; the first one stays.
pub async fn definitions_are_kept_by_hash(store: &dyn Store) {
    use stepwright_core::journal::DefinitionSource;
    let hash = ContentHash::of_bytes(b"definition");
    assert_eq!(store.get_definition(hash).await.expect("read"), None);
    let source = DefinitionSource {
        format: "yaml".into(),
        name: "flow.yaml".into(),
        source: "workflow: x\n".into(),
        files: Default::default(),
    };
    store.put_definition(hash, source.clone()).await.expect("put");
    let other = DefinitionSource { source: "workflow: y\n".into(), ..source.clone() };
    store.put_definition(hash, other).await.expect("put again");
    assert_eq!(store.get_definition(hash).await.expect("read"), Some(source));
    // A source with the files it calls keeps them.
    let called = ContentHash::of_bytes(b"calls");
    let with_files = DefinitionSource {
        name: "main.yaml".into(),
        files: [("parts/x.yaml".to_owned(), "workflow: part\n".to_owned())].into(),
        ..DefinitionSource::default_yaml("workflow: main\n")
    };
    store.put_definition(called, with_files.clone()).await.expect("put");
    assert_eq!(store.get_definition(called).await.expect("read"), Some(with_files));
}

/// The control tables: registered workflows get versions by source, keys are found by the
/// hash of their secret, an idempotency key names its first run, the audit log keeps order.
pub async fn control_tables(store: &dyn crate::ServerStore) {
    use crate::control::{ApiKey, AuditEntry, IdempotencyClaim, NewWorkflow};
    let new = |name: &str, source: &str, namespace: &str| NewWorkflow {
        namespace: namespace.into(),
        name: name.into(),
        hash: ContentHash::of_bytes(source.as_bytes()),
        source: source.into(),
        files: [("parts/a.yaml".to_owned(), format!("# {source}"))].into(),
        at: Timestamp::from_micros(5),
        by: Some("ann".into()),
    };
    let first = store.register_workflow(new("greet", "v1", "acme")).await.expect("register");
    assert_eq!(first.version, 1);
    assert_eq!(store.register_workflow(new("greet", "v1", "acme")).await.expect("again").version, 1, "same source");
    assert_eq!(store.register_workflow(new("greet", "v2", "acme")).await.expect("v2").version, 2);
    assert_eq!(store.register_workflow(new("greet", "v1", "other")).await.expect("other ns").version, 1);
    assert_eq!(store.register_workflow(new("aaa", "a", "acme")).await.expect("aaa").version, 1);
    let newest = store.registered_workflow("acme", "greet", None).await.expect("read").expect("found");
    assert_eq!((newest.version, newest.source.as_str()), (2, "v2"));
    let named = store.registered_workflow("acme", "greet", Some(1)).await.expect("read").expect("found");
    assert_eq!(named, first);
    assert_eq!(named.files["parts/a.yaml"], "# v1");
    assert!(store.registered_workflow("acme", "greet", Some(3)).await.expect("read").is_none());
    assert!(store.registered_workflow("nobody", "greet", None).await.expect("read").is_none());
    let listed: Vec<(String, u32)> =
        store.registered_workflows("acme").await.expect("list").into_iter().map(|w| (w.name, w.version)).collect();
    assert_eq!(listed, [("aaa".into(), 1), ("greet".into(), 2), ("greet".into(), 1)]);

    let key = |id: &str, namespace: &str, at: i64| ApiKey {
        id: id.into(),
        namespace: namespace.into(),
        user: "ann".into(),
        roles: vec!["operator".into(), "approver".into()],
        created_at: Timestamp::from_micros(at),
        expires_at: Some(Timestamp::from_micros(1_000)),
        revoked_at: None,
        last_used_at: None,
    };
    store.create_key(key("k1", "acme", 1), [1; 32]).await.expect("create");
    store.create_key(key("k2", "other", 2), [2; 32]).await.expect("create");
    assert!(store.create_key(key("k3", "acme", 3), [1; 32]).await.is_err(), "a secret hash is unique");
    assert_eq!(store.key_by_secret([1; 32]).await.expect("read"), Some(key("k1", "acme", 1)));
    assert_eq!(store.key_by_secret([9; 32]).await.expect("read"), None);
    assert_eq!(store.keys(None).await.expect("list").len(), 2);
    assert_eq!(store.keys(Some("other")).await.expect("list"), [key("k2", "other", 2)]);
    store.touch_key("k1", Timestamp::from_micros(50)).await.expect("touch");
    // Keys derived from k1 (browser sessions: `k1.…`) go with it; `k10`'s do not.
    store.create_key(key("k1.s1", "acme", 4), [4; 32]).await.expect("create");
    store.create_key(key("k10.s1", "acme", 5), [5; 32]).await.expect("create");
    assert!(store.revoke_key("k1", Timestamp::from_micros(60)).await.expect("revoke"));
    let session = store.key_by_secret([4; 32]).await.expect("read").expect("found");
    assert_eq!(session.revoked_at, Some(Timestamp::from_micros(60)), "a key's session is revoked with it");
    let unrelated = store.key_by_secret([5; 32]).await.expect("read").expect("found");
    assert_eq!(unrelated.revoked_at, None, "only ids that start with the key's id and a dot");
    assert!(!store.revoke_key("k1", Timestamp::from_micros(70)).await.expect("revoke again"));
    assert!(!store.revoke_key("nope", Timestamp::from_micros(70)).await.expect("revoke missing"));
    let used = store.key_by_secret([1; 32]).await.expect("read").expect("found");
    assert_eq!(
        (used.last_used_at, used.revoked_at),
        (Some(Timestamp::from_micros(50)), Some(Timestamp::from_micros(60)))
    );

    let (a, b, c) = (id(200), id(201), id(202));
    let at = Timestamp::from_micros(7);
    assert_eq!(store.claim_idempotency("acme", "order-1", a, at).await.expect("claim"), IdempotencyClaim::Claimed);
    assert_eq!(
        store.claim_idempotency("acme", "order-1", b, Timestamp::from_micros(8)).await.expect("claim"),
        IdempotencyClaim::Taken { run: a, at }
    );
    assert_eq!(store.claim_idempotency("other", "order-1", b, at).await.expect("claim"), IdempotencyClaim::Claimed);
    assert!(!store.reclaim_idempotency("acme", "order-1", b, c, at).await.expect("reclaim"), "not b's");
    assert!(store.reclaim_idempotency("acme", "order-1", a, c, at).await.expect("reclaim"));
    assert_eq!(
        store.claim_idempotency("acme", "order-1", b, at).await.expect("claim"),
        IdempotencyClaim::Taken { run: c, at }
    );

    for (n, action) in ["key.created", "interrupt.decided"].into_iter().enumerate() {
        let entry = AuditEntry {
            namespace: "acme".into(),
            at: Timestamp::from_micros(n as i64),
            actor: "ann".into(),
            action: action.into(),
            subject: "s".into(),
            detail: json!({ "n": n }),
        };
        store.audit(entry).await.expect("audit");
    }
    let log = store.audit_entries("acme", 10).await.expect("log");
    assert_eq!(log.iter().map(|e| e.action.as_str()).collect::<Vec<_>>(), ["interrupt.decided", "key.created"]);
    assert_eq!(log[0].detail, json!({ "n": 1 }));
    assert!(store.audit_entries("other", 10).await.expect("log").is_empty());

    // Webhooks: a delivery per (webhook, event key), leased to one claimer, its attempts kept.
    use crate::control::{Attempt, DeliveryState, NewDelivery, Webhook};
    let hook = |id: &str, namespace: &str| Webhook {
        id: id.into(),
        namespace: namespace.into(),
        url: "http://127.0.0.1:9/hook".into(),
        events: vec!["run.completed".into()],
        secret: "sixteen-characters".into(),
        created_at: Timestamp::from_micros(1),
    };
    store.create_webhook(hook("h1", "acme")).await.expect("create");
    store.create_webhook(hook("h2", "other")).await.expect("create");
    assert_eq!(store.webhooks(Some("acme")).await.expect("list"), [hook("h1", "acme")]);
    assert_eq!(store.webhooks(None).await.expect("list").len(), 2);
    let delivery = |key: &str| NewDelivery {
        webhook_id: "h1".into(),
        namespace: "acme".into(),
        event_key: key.into(),
        event: "run.completed".into(),
        body: "{}".into(),
        at: Timestamp::from_micros(10),
    };
    assert!(store.enqueue_delivery(delivery("run.completed:a")).await.expect("enqueue"));
    assert!(!store.enqueue_delivery(delivery("run.completed:a")).await.expect("again"), "one per key");
    assert!(store.enqueue_delivery(delivery("run.completed:b")).await.expect("enqueue"));
    let lease = std::time::Duration::from_secs(30);
    assert!(store.claim_deliveries(Timestamp::from_micros(5), lease, 10).await.expect("claim").is_empty(), "not due");
    let claimed = store.claim_deliveries(Timestamp::from_micros(20), lease, 10).await.expect("claim");
    assert_eq!(claimed.len(), 2);
    assert!(store.claim_deliveries(Timestamp::from_micros(20), lease, 10).await.expect("claim").is_empty(), "leased");
    let failed = Attempt { at: Timestamp::from_micros(21), status: Some(500), error: Some("no".into()) };
    store
        .record_attempt(claimed[0].id, failed.clone(), DeliveryState::Pending, Timestamp::from_micros(50))
        .await
        .expect("record");
    let ok = Attempt { at: Timestamp::from_micros(22), status: Some(200), error: None };
    store
        .record_attempt(claimed[1].id, ok, DeliveryState::Delivered, Timestamp::from_micros(22))
        .await
        .expect("record");
    let again = store.claim_deliveries(Timestamp::from_micros(60), lease, 10).await.expect("claim");
    assert_eq!(again.iter().map(|d| d.id).collect::<Vec<_>>(), [claimed[0].id], "the failed one, once due");
    assert_eq!(again[0].attempts, [failed]);
    let log = store.deliveries("acme", "h1", 10).await.expect("log");
    assert_eq!(log.len(), 2);
    assert!(store.deliveries("other", "h1", 10).await.expect("log").is_empty(), "another namespace sees none");
    assert!(store.delete_webhook("acme", "h1", Timestamp::from_micros(70)).await.expect("delete"));
    assert!(!store.delete_webhook("other", "h1", Timestamp::from_micros(70)).await.expect("delete"));
    assert!(
        store.claim_deliveries(Timestamp::from_micros(1_000_000_000), lease, 10).await.expect("claim").is_empty(),
        "a deleted webhook's deliveries stop"
    );
    assert_eq!(store.webhook_watermark("acme").await.expect("read"), None);
    store.set_webhook_watermark("acme", Timestamp::from_micros(40)).await.expect("set");
    store.set_webhook_watermark("acme", Timestamp::from_micros(30)).await.expect("set");
    assert_eq!(store.webhook_watermark("acme").await.expect("read"), Some(Timestamp::from_micros(40)), "never back");
}

/// Two stores on one database (two processes) claiming one idempotency key and registering
/// one workflow name at once: one claim wins, every other sees the winner; the versions of
/// distinct sources are distinct.
pub async fn control_races(a: &dyn crate::ServerStore, b: &dyn crate::ServerStore) {
    use crate::control::{IdempotencyClaim, NewWorkflow};
    let at = Timestamp::from_micros(1);
    for round in 0..20u8 {
        let key = format!("race-{round}");
        let (x, y) = (id(round), id(round.wrapping_add(100)));
        let (first, second) =
            futures_util::future::join(a.claim_idempotency("ns", &key, x, at), b.claim_idempotency("ns", &key, y, at))
                .await;
        let outcomes = [first.expect("claim"), second.expect("claim")];
        let claimed = outcomes.iter().filter(|o| **o == IdempotencyClaim::Claimed).count();
        assert_eq!(claimed, 1, "round {round}: exactly one claim wins: {outcomes:?}");
        let winner = if outcomes[0] == IdempotencyClaim::Claimed { x } else { y };
        assert!(outcomes.contains(&IdempotencyClaim::Taken { run: winner, at }), "the loser sees the winner");
    }
    let new = |source: String| NewWorkflow {
        namespace: "ns".into(),
        name: "raced".into(),
        hash: ContentHash::of_bytes(source.as_bytes()),
        source,
        files: Default::default(),
        at,
        by: None,
    };
    let mut versions = Vec::new();
    for round in 0..10 {
        let (first, second) = futures_util::future::join(
            a.register_workflow(new(format!("a{round}"))),
            b.register_workflow(new(format!("b{round}"))),
        )
        .await;
        versions.push(first.expect("register").version);
        versions.push(second.expect("register").version);
    }
    versions.sort_unstable();
    assert_eq!(versions, (1..=20).collect::<Vec<u32>>(), "distinct versions, none skipped");
}

/// Inbox messages come back in posting order, per inbox, and go with an erased run.
pub async fn messages_keep_their_order(store: &dyn Store) {
    let run = record(50, "flow", RunStatus::Running, 1);
    store.create_run(run.clone()).await.expect("create");
    let first = store.post_message(run.id, "in", json!("one")).await.expect("post");
    store.post_message(run.id, "other", json!("elsewhere")).await.expect("post");
    let second = store.post_message(run.id, "in", json!({ "two": 2 })).await.expect("post");
    assert!(second > first);
    assert_eq!(store.next_message(run.id, "in", None).await.expect("read"), Some((first, json!("one"))));
    assert_eq!(store.next_message(run.id, "in", Some(first)).await.expect("read"), Some((second, json!({ "two": 2 }))));
    assert_eq!(store.next_message(run.id, "in", Some(second)).await.expect("read"), None);
    assert_eq!(store.next_message(id(51), "in", None).await.expect("read"), None, "inboxes are per run");
    store.erase_run(run.id).await.expect("erase");
    assert_eq!(store.next_message(run.id, "in", None).await.expect("read"), None, "erased with the run");
}

/// Wall time now: lease checks use real time, since some stores (Postgres) take lease times
/// from their own clock rather than the caller's.
fn wall() -> Timestamp {
    let micros = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_micros()).unwrap_or(0);
    Timestamp::from_micros(i64::try_from(micros).unwrap_or(i64::MAX))
}

fn near(actual: Timestamp, expected: Timestamp) -> bool {
    (actual.as_micros() - expected.as_micros()).abs() < 2_000_000
}

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

/// A quota grants up to its limit in a window, to concurrent takers too, and then says how
/// long until the next window; asking (an amount of 0) takes nothing; a charge is added
/// whatever the window holds; quotas are counted apart by name.
pub async fn quotas_grant_up_to_their_limit_per_window<S: stepwright_core::store::quota::QuotaStore + ?Sized>(
    store: &S,
) {
    use std::time::Duration;
    use stepwright_core::store::quota::{Quota, QuotaTaken};
    let hour = Duration::from_secs(3600);
    let quota = Quota { name: "openai:abc".into(), limit: 10, window: hour };
    let takes = futures_util::future::join_all((0..25).map(|_| store.take_quota(&quota, 1))).await;
    let granted = takes.iter().filter(|t| matches!(t, Ok(QuotaTaken::Granted))).count();
    assert_eq!(granted, 10, "exactly the limit is granted to 25 concurrent takers: {takes:?}");
    assert!(
        takes.iter().all(|t| match t {
            Ok(QuotaTaken::Full { retry_in }) => *retry_in <= hour,
            other => matches!(other, Ok(QuotaTaken::Granted)),
        }),
        "the rest are told to wait for the next window: {takes:?}"
    );
    assert!(matches!(store.take_quota(&quota, 0).await, Ok(QuotaTaken::Full { .. })), "asking: full");
    let other = Quota { name: "openai:def".into(), limit: 100, window: hour };
    assert_eq!(store.take_quota(&other, 0).await.expect("ask"), QuotaTaken::Granted, "another quota has room");
    store.charge_quota(&other, 150).await.expect("charge past the limit");
    assert!(matches!(store.take_quota(&other, 0).await, Ok(QuotaTaken::Full { .. })), "charged: now full");
    assert!(matches!(store.take_quota(&other, 1).await, Ok(QuotaTaken::Full { .. })));
    // A short window lets through again once it has passed.
    let brief = Quota { name: "brief".into(), limit: 1, window: Duration::from_millis(200) };
    assert_eq!(store.take_quota(&brief, 1).await.expect("take"), QuotaTaken::Granted);
    let retry_in = match store.take_quota(&brief, 1).await.expect("take") {
        QuotaTaken::Full { retry_in } => retry_in,
        QuotaTaken::Granted => {
            // The first take fell at the very end of a window: the second is in the next.
            Duration::ZERO
        }
    };
    tokio::time::sleep(retry_in + Duration::from_millis(10)).await;
    assert_eq!(store.take_quota(&brief, 1).await.expect("take"), QuotaTaken::Granted, "the next window");
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

fn running_update() -> StatusUpdate {
    StatusUpdate { status: RunStatus::Running, output: None, error: None, at: wall(), wake_at: None, fence: None }
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

fn id(n: u8) -> RunId {
    RunId::from_parts(Timestamp::from_millis(1_700_000_000_000 + i64::from(n)), [n; 10])
}

fn record(n: u8, workflow: &str, status: RunStatus, at: i64) -> RunRecord {
    RunRecord {
        id: id(n),
        workflow: workflow.to_owned(),
        version: "1.0.0".into(),
        definition_hash: ContentHash::of_value(&json!(workflow)),
        input: Arc::new(json!({ "n": n })),
        caller: Caller::user(Some("acme"), "ann").with_role("lead"),
        status,
        output: None,
        error: None,
        parent: None,
        created_at: Timestamp::from_micros(at),
        updated_at: Timestamp::from_micros(at),
        wake_at: None,
        lease: None,
        cancel: None,
        flow: Default::default(),
    }
}

fn entry(path: &str, at: i64, record: Record) -> JournalEntry {
    JournalEntry { path: StepPath::new(path), at: Timestamp::from_micros(at), record }
}

fn completed(path: &str, value: serde_json::Value) -> (JournalEntry, (ContentHash, Arc<serde_json::Value>)) {
    let hash = ContentHash::of_value(&value);
    (
        entry(path, 2, Record::Completed { attempt: 1, output: hash, cached: false, started_at: None }),
        (hash, Arc::new(value)),
    )
}

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

    let missing = id(240);
    assert!(matches!(store.load_from(missing, 0).await, Err(StoreError::RunNotFound(_))));
    assert!(matches!(store.events_from(missing, 0).await, Err(StoreError::RunNotFound(_))));
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

fn owner(tenant: Option<&str>, user: Option<&str>) -> SessionOwner {
    SessionOwner { tenant: tenant.map(str::to_owned), user: user.map(str::to_owned) }
}

fn append(session: &str, owner: &SessionOwner, key: &str, messages: &[serde_json::Value], max: usize) -> SessionAppend {
    SessionAppend {
        session: session.into(),
        owner: owner.clone(),
        key: key.into(),
        messages: messages.to_vec(),
        max_stored: max,
        at: Timestamp::from_micros(1_000),
    }
}

/// Sessions: history in order, newest `limit`, idempotent appends, trimming to the cap,
/// and every operation refused to anyone but the owner (tenant and user).
pub async fn sessions_keep_history_for_their_owner<S: SessionStore + ?Sized>(store: &S) {
    let alice = owner(Some("acme"), Some("alice"));
    assert!(store.session_history("s-1", &alice, 10).await.expect("read").is_empty(), "no session, no history");
    let first =
        [json!({ "role": "user", "content": "héllo ✓" }), json!({ "role": "assistant", "content": "hi" }), json!(3)];
    let done = store.append_to_session(append("s-1", &alice, "run-a/step", &first, 100)).await.expect("append");
    assert!(done.applied);
    assert_eq!(done.stored, 3);
    let history = store.session_history("s-1", &alice, 10).await.expect("read");
    assert_eq!(history.iter().map(|m| m.message.clone()).collect::<Vec<_>>(), first.to_vec());
    assert_eq!(history.iter().map(|m| m.seq).collect::<Vec<_>>(), vec![0, 1, 2]);
    let newest = store.session_history("s-1", &alice, 2).await.expect("read");
    assert_eq!(newest.iter().map(|m| m.seq).collect::<Vec<_>>(), vec![1, 2], "the newest two, oldest first");

    let again = store.append_to_session(append("s-1", &alice, "run-a/step", &first, 100)).await.expect("append");
    assert_eq!((again.applied, again.stored), (false, 3), "a repeated append key changes nothing");

    let more = [json!("four"), json!("five")];
    let trimmed = store.append_to_session(append("s-1", &alice, "run-b/step", &more, 4)).await.expect("append");
    assert_eq!((trimmed.applied, trimmed.stored), (true, 4));
    let history = store.session_history("s-1", &alice, 100).await.expect("read");
    assert_eq!(history.iter().map(|m| m.seq).collect::<Vec<_>>(), vec![1, 2, 3, 4], "the oldest beyond the cap go");
    assert_eq!(history[3].message, json!("five"));

    for stranger in [owner(Some("acme"), Some("bob")), owner(Some("other"), Some("alice")), owner(None, None)] {
        let denied = store.session_history("s-1", &stranger, 10).await.expect_err("another owner may not read");
        assert!(matches!(&denied, StoreError::AccessDenied(m) if !m.contains("alice")), "{denied}");
        let denied = store.append_to_session(append("s-1", &stranger, "x", &more, 10)).await.expect_err("nor write");
        assert!(matches!(denied, StoreError::AccessDenied(_)), "{denied}");
        let denied = store.delete_session("s-1", &stranger).await.expect_err("nor delete");
        assert!(matches!(denied, StoreError::AccessDenied(_)), "{denied}");
    }
    assert_eq!(store.session_history("s-1", &alice, 100).await.expect("read").len(), 4, "nothing changed");

    // A session's owner is whoever wrote first, anonymous included.
    let nobody = owner(None, None);
    store.append_to_session(append("s-2", &nobody, "k", &more, 10)).await.expect("anonymous session");
    assert_eq!(store.session_history("s-2", &nobody, 10).await.expect("read").len(), 2);
    assert!(matches!(store.session_history("s-2", &alice, 10).await, Err(StoreError::AccessDenied(_))));

    let invalid = store.session_history("", &alice, 10).await.expect_err("an empty id");
    assert!(matches!(invalid, StoreError::Invalid(_)), "{invalid}");
    let invalid =
        store.append_to_session(append(&"x".repeat(201), &alice, "k", &more, 10)).await.expect_err("too long");
    assert!(matches!(invalid, StoreError::Invalid(_)), "{invalid}");

    assert!(store.delete_session("s-1", &alice).await.expect("delete"));
    assert!(!store.delete_session("s-1", &alice).await.expect("delete again"));
    assert!(store.session_history("s-1", &alice, 10).await.expect("read").is_empty());
    let bob = owner(Some("acme"), Some("bob"));
    let reborn = store.append_to_session(append("s-1", &bob, "run-a/step", &more, 10)).await.expect("a new session");
    assert_eq!((reborn.applied, reborn.stored), (true, 2), "a deleted session's append keys go with it");
}

fn address(tenant: &str, scope: MemoryScope, namespace: &str, key: &str) -> MemoryAddress {
    MemoryAddress { tenant: tenant.into(), scope, namespace: namespace.into(), key: key.into() }
}

fn item(address: MemoryAddress, value: serde_json::Value, at: i64) -> MemoryItem {
    MemoryItem::new(address, value, Timestamp::from_micros(at))
}

fn keys(hits: &[stepwright_core::MemoryHit]) -> Vec<&str> {
    hits.iter().map(|h| h.item.address.key.as_str()).collect()
}

/// The memory bank: put, get, replace, delete, full-text search (any word, ranked, whole
/// words, case-insensitive), listing without a query, limits, and isolation between
/// tenants, scopes and namespaces.
pub async fn memory_bank_stores_and_recalls<S: MemoryBank + ?Sized>(store: &S) {
    let alice = MemoryScope::User("alice".into());
    let at = |key: &str| address("acme", alice.clone(), "facts", key);
    let search = |query: Option<&str>, limit: usize| MemorySearch {
        tenant: "acme".into(),
        scope: alice.clone(),
        namespace: "facts".into(),
        query: query.map(str::to_owned),
        limit,
    };
    let tea = item(at("tea"), json!("Alice likes green tea and hiking"), 1);
    store.memory_put(tea.clone()).await.expect("put");
    store.memory_put(item(at("coffee"), json!("Bob prefers coffee"), 2)).await.expect("put");
    let mail = item(at("mail"), json!({ "note": "her address is alice@example.com", "floor": 42, "ok": true }), 3);
    assert_eq!(mail.text, "42 her address is alice@example.com", "strings and numbers, members in key order");
    store.memory_put(mail.clone()).await.expect("put");
    // The same key elsewhere: another tenant, another user, another namespace, a session.
    store.memory_put(item(address("other", alice.clone(), "facts", "tea"), json!("green tea"), 4)).await.expect("put");
    store
        .memory_put(item(address("acme", MemoryScope::User("bob".into()), "facts", "tea"), json!("green"), 4))
        .await
        .expect("put");
    store.memory_put(item(address("acme", alice.clone(), "prefs", "tea"), json!("green"), 4)).await.expect("put");
    store
        .memory_put(item(address("acme", MemoryScope::Session("s".into()), "facts", "tea"), json!("green"), 4))
        .await
        .expect("put");
    store.memory_put(item(address("acme", MemoryScope::Global, "facts", "tea"), json!("green"), 4)).await.expect("put");

    assert_eq!(store.memory_get(at("tea")).await.expect("get"), Some(tea.clone()));
    assert_eq!(store.memory_get(at("nothing")).await.expect("get"), None);

    let hits = store.memory_search(search(Some("GREEN tea?"), 10)).await.expect("search");
    assert_eq!(keys(&hits), vec!["tea"], "one tenant, scope and namespace; case-insensitive");
    assert_eq!(hits[0].item, tea);
    assert!(hits[0].score > 0.0);
    let hits = store.memory_search(search(Some("alice hiking"), 10)).await.expect("search");
    assert_eq!(keys(&hits), vec!["tea", "mail"], "any word matches; more words rank higher");
    let hits = store.memory_search(search(Some("mail to alice@example.com"), 10)).await.expect("search");
    assert_eq!(keys(&hits), vec!["mail", "tea"], "an address is searched by its words");
    assert!(store.memory_search(search(Some("hik"), 10)).await.expect("search").is_empty(), "whole words only");
    assert!(store.memory_search(search(Some("?! -"), 10)).await.expect("search").is_empty(), "no words, no hits");
    assert_eq!(keys(&store.memory_search(search(Some("42"), 10)).await.expect("search")), vec!["mail"]);
    assert_eq!(keys(&store.memory_search(search(Some("alice hiking"), 1)).await.expect("search")), vec!["tea"]);

    let newest = store.memory_search(search(None, 2)).await.expect("list");
    assert_eq!(keys(&newest), vec!["mail", "coffee"], "without a query: the newest first");
    assert!(newest.iter().all(|h| h.score == 0.0));

    // Writing an address again replaces the item and its text in the index.
    let replaced = item(at("tea"), json!({ "drink": "black coffee" }), 5);
    store.memory_put(replaced.clone()).await.expect("replace");
    assert_eq!(store.memory_get(at("tea")).await.expect("get"), Some(replaced));
    assert!(store.memory_search(search(Some("green hiking"), 10)).await.expect("search").is_empty());
    assert_eq!(keys(&store.memory_search(search(Some("coffee"), 10)).await.expect("search")).len(), 2);

    assert!(store.memory_delete(at("coffee")).await.expect("delete"));
    assert!(!store.memory_delete(at("coffee")).await.expect("delete again"));
    assert_eq!(keys(&store.memory_search(search(Some("coffee"), 10)).await.expect("search")), vec!["tea"]);
    let elsewhere = store.memory_get(address("other", alice.clone(), "facts", "tea")).await.expect("get");
    assert_eq!(elsewhere.map(|i| i.value), Some(json!("green tea")), "other tenants are untouched");

    let invalid = store.memory_put(item(at(""), json!(1), 6)).await.expect_err("an empty key");
    assert!(matches!(invalid, StoreError::Invalid(_)), "{invalid}");
    let invalid = store
        .memory_put(item(address("acme", alice.clone(), &"n".repeat(201), "k"), json!(1), 6))
        .await
        .expect_err("a long namespace");
    assert!(matches!(invalid, StoreError::Invalid(_)), "{invalid}");
}

/// Items scoped to a run are erased with it; other scopes stay.
pub async fn run_memory_goes_with_its_run<S: Store + MemoryBank + ?Sized>(store: &S) {
    let run = record(70, "flow", RunStatus::Completed, 1);
    store.create_run(run.clone()).await.expect("create");
    let own = address("", MemoryScope::Run(run.id), "scratch", "k");
    let kept = address("", MemoryScope::Global, "scratch", "k");
    store.memory_put(item(own.clone(), json!("draft one"), 1)).await.expect("put");
    store.memory_put(item(kept.clone(), json!("draft two"), 1)).await.expect("put");
    let found = store.memory_get(own.clone()).await.expect("get").expect("stored");
    assert_eq!(found.address.scope, MemoryScope::Run(run.id), "the scope reads back");
    store.erase_run(run.id).await.expect("erase");
    assert_eq!(store.memory_get(own).await.expect("get"), None);
    assert!(store.memory_get(kept).await.expect("get").is_some());
}

fn schedule(tenant: Option<&str>, name: &str, due_at: Option<i64>) -> ScheduleRecord {
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

fn tick(at: i64, outcome: TickOutcome) -> TickRecord {
    TickRecord {
        at: Timestamp::from_micros(at),
        local: format!("t{at}"),
        outcome,
        recorded_at: Timestamp::from_micros(at),
    }
}

fn advance_of(
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

fn new_event(tenant: Option<&str>, name: &str, payload: serde_json::Value, key: Option<&str>, at: i64) -> NewEvent {
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
