//! The control tables: registered workflows, keys, idempotency keys, the audit log.

use super::*;

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
    experiments(store).await;
}

/// Experiments: kept with their spec, each run's first result kept once, ended with a report;
/// listed newest first by tenant, without reports.
async fn experiments(store: &dyn crate::ServerStore) {
    use stepwright_core::store::experiment::{ExperimentRecord, ExperimentState};
    let id = |n: u8| RunId::from_parts(Timestamp::from_micros(i64::from(n) * 1_000), [n; 10]);
    let record = |n: u8, tenant: &str| ExperimentRecord {
        id: id(n),
        tenant: Some(tenant.into()),
        name: format!("e{n}"),
        workflow: "triage".into(),
        spec: serde_json::json!({ "experiment": format!("e{n}"), "runs": { "ids": ["a", "b"] } }),
        state: ExperimentState::Running,
        created_at: Timestamp::from_micros(i64::from(n)),
        report: None,
        hold: None,
    };
    store.experiment_begin(record(1, "acme")).await.expect("begin");
    store.experiment_begin(record(2, "acme")).await.expect("begin");
    store.experiment_begin(record(3, "other")).await.expect("begin");
    assert_eq!(store.experiment(id(1)).await.expect("read"), Some(record(1, "acme")));
    assert_eq!(store.experiment(id(9)).await.expect("read"), None);
    store.experiment_keep(id(1), id(7), serde_json::json!({ "run": "seven" })).await.expect("keep");
    store.experiment_keep(id(1), id(7), serde_json::json!({ "run": "again" })).await.expect("keep");
    store.experiment_keep(id(1), id(8), serde_json::json!({ "run": "eight" })).await.expect("keep");
    let mut kept = store.experiment_kept(id(1)).await.expect("kept");
    kept.sort_by_key(|(run, _)| *run);
    assert_eq!(
        kept,
        [(id(7), serde_json::json!({ "run": "seven" })), (id(8), serde_json::json!({ "run": "eight" }))],
        "a run's first result stays"
    );
    assert!(store.experiment_kept(id(2)).await.expect("kept").is_empty());
    store.experiment_end(id(1), ExperimentState::BudgetSpent, serde_json::json!({ "totals": 2 })).await.expect("end");
    let ended = store.experiment(id(1)).await.expect("read").expect("kept");
    assert_eq!((ended.state, ended.report), (ExperimentState::BudgetSpent, Some(serde_json::json!({ "totals": 2 }))));
    assert!(!store.experiment_cancel(id(1)).await.expect("cancel"), "an ended experiment is not cancelled");
    assert_eq!(store.experiment(id(1)).await.expect("read").expect("kept").state, ExperimentState::BudgetSpent);
    assert!(store.experiment_cancel(id(2)).await.expect("cancel"), "a running one is");
    assert!(!store.experiment_cancel(id(2)).await.expect("cancel"), "once");
    assert!(!store.experiment_cancel(id(9)).await.expect("cancel"), "one that does not exist is not");
    assert_eq!(store.experiment(id(2)).await.expect("read").expect("kept").state, ExperimentState::Cancelled);
    let acme = store.experiments(Some("acme".into()), 10).await.expect("list");
    assert_eq!(acme.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(), ["e2", "e1"], "newest first");
    assert!(acme.iter().all(|e| e.report.is_none()), "listed without reports");
    assert_eq!(store.experiments(None, 2).await.expect("list").len(), 2, "the limit");
    assert_eq!(store.experiments(None, 10).await.expect("list").len(), 3, "every tenant's");

    // Holds: taken from whoever the taker saw hold it, renewed by its holder, never from
    // another, never of an ended experiment.
    use stepwright_core::store::experiment::ExperimentHold;
    let hold =
        |holder: &str, until: i64| ExperimentHold { holder: holder.into(), until: Timestamp::from_micros(until) };
    let (running, a, b) = (id(3), Some("a".to_owned()), Some("b".to_owned()));
    assert!(store.experiment_hold(running, None, hold("a", 100)).await.expect("hold"), "no one held it");
    assert!(!store.experiment_hold(running, None, hold("b", 100)).await.expect("hold"), "a holds it now");
    assert!(!store.experiment_hold(running, b.clone(), hold("b", 100)).await.expect("hold"), "b never held it");
    assert!(store.experiment_hold(running, a.clone(), hold("a", 200)).await.expect("hold"), "a renews");
    assert_eq!(store.experiment(running).await.expect("read").expect("kept").hold, Some(hold("a", 200)));
    assert!(store.experiment_hold(running, a, hold("b", 300)).await.expect("hold"), "taken up from a");
    let held = store.experiments_running(10).await.expect("running");
    assert_eq!(held.iter().map(|e| (e.id, e.hold.clone())).collect::<Vec<_>>(), [(running, Some(hold("b", 300)))]);
    assert!(!store.experiment_hold(id(1), None, hold("b", 300)).await.expect("hold"), "an ended one is not held");
    store.experiment_begin(ExperimentRecord { hold: Some(hold("c", 5)), ..record(4, "acme") }).await.expect("begin");
    store.experiment_begin(record(5, "acme")).await.expect("begin");
    let running: Vec<RunId> = store.experiments_running(10).await.expect("running").iter().map(|e| e.id).collect();
    assert_eq!(running, [id(3), id(4), id(5)], "oldest first");
    assert_eq!(store.experiments_running(2).await.expect("running").len(), 2, "the limit");
    assert_eq!(store.experiment(id(4)).await.expect("read").expect("kept").hold, Some(hold("c", 5)), "begun held");
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
    // Two servers taking up one experiment whose holder stopped: one does.
    use stepwright_core::store::experiment::{ExperimentHold, ExperimentRecord, ExperimentState};
    for round in 0..10u8 {
        let experiment = id(round.wrapping_add(200));
        let gone = ExperimentHold { holder: "gone".into(), until: at };
        a.experiment_begin(ExperimentRecord {
            id: experiment,
            tenant: Some("ns".into()),
            name: "raced".into(),
            workflow: "w".into(),
            spec: serde_json::json!({}),
            state: ExperimentState::Running,
            created_at: at,
            report: None,
            hold: Some(gone),
        })
        .await
        .expect("begin");
        let to = |holder: &str| ExperimentHold { holder: holder.into(), until: Timestamp::from_micros(9) };
        let (first, second) = futures_util::future::join(
            a.experiment_hold(experiment, Some("gone".into()), to("a")),
            b.experiment_hold(experiment, Some("gone".into()), to("b")),
        )
        .await;
        assert!(first.expect("hold") ^ second.expect("hold"), "round {round}: exactly one takes it up");
    }
}
