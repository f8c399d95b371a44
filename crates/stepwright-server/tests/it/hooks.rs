//! Webhooks: every event of the namespace delivered to a loopback receiver that fails the
//! first attempts, each signed; the attempts visible in the redelivery log.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use hmac::{KeyInit, Mac};
use serde_json::json;
use stepwright_testkit::http::{FakeServer, Reply};

use crate::{APPROVAL, TestServer};

const SECRET: &str = "a-secret-of-sixteen+";

/// Checks `Stepwright-Signature: t=…,v1=…` against the body, as a receiver would.
fn verify(header: &str, body: &str) -> bool {
    let Some((t, v1)) = header.split_once(",v1=") else { return false };
    let t = t.trim_start_matches("t=");
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
    mac.update(format!("{t}.{body}").as_bytes());
    mac.verify_slice(&hex::decode(v1).unwrap_or_default()).is_ok()
}

#[tokio::test(flavor = "multi_thread")]
async fn every_event_is_delivered_signed_through_failures_and_logged() {
    let seen = Arc::new(AtomicUsize::new(0));
    let receiver = FakeServer::responding({
        let seen = seen.clone();
        // The first two deliveries fail: retried after a backoff.
        move |_| {
            if seen.fetch_add(1, Ordering::SeqCst) < 2 {
                Reply::json(500, json!({}))
            } else {
                Reply::json(200, json!({}))
            }
        }
    });
    let server = TestServer::start().await;
    let admin = server.key("acme", "ann", &["admin", "operator", "approver"]).await;
    let viewer = server.key("acme", "vic", &["viewer"]).await;
    let (status, body) = server
        .post(&viewer, "/v1/webhooks", json!({ "url": receiver.url, "events": ["run.completed"], "secret": SECRET }))
        .await;
    assert_eq!((status, body["code"].as_str()), (403, Some("access_denied")));
    for bad in [
        json!({ "url": "ftp://x", "events": ["run.completed"], "secret": SECRET }),
        json!({ "url": receiver.url, "events": ["run.exploded"], "secret": SECRET }),
        json!({ "url": receiver.url, "events": [], "secret": SECRET }),
        json!({ "url": receiver.url, "events": ["run.completed"], "secret": "short" }),
    ] {
        assert_eq!(server.post(&admin, "/v1/webhooks", bad.clone()).await.0, 400, "{bad}");
    }
    let events = ["interrupt.opened", "run.completed", "run.failed", "run.suspended"];
    let (status, hook) =
        server.post(&admin, "/v1/webhooks", json!({ "url": receiver.url, "events": events, "secret": SECRET })).await;
    assert_eq!(status, 201, "{hook}");
    assert!(hook.get("secret").is_none(), "the secret is never shown");
    let id = hook["id"].as_str().unwrap().to_owned();

    server.register(&admin, APPROVAL).await;
    let (_, run) = server
        .post(&admin, "/v1/runs", json!({ "workflow": "greet", "input": { "name": "Ada" }, "wait_seconds": 10 }))
        .await;
    let run_id = run["run_id"].as_str().unwrap().to_owned();
    let interrupt = run["pending"][0]["id"].as_str().unwrap();
    server
        .post(&admin, &format!("/v1/interrupts/{run_id}.{interrupt}/decision"), json!({ "decision": "approve" }))
        .await;

    // Three events: the stop, its interrupt, the end; delivered despite the failures.
    let mut delivered = Vec::new();
    for _ in 0..300 {
        delivered =
            receiver.requests().into_iter().filter(|r| r.headers.contains_key("stepwright-signature")).collect();
        let ok: std::collections::BTreeSet<String> =
            delivered.iter().skip(2).map(|r| r.body["event"].as_str().unwrap_or_default().to_owned()).collect();
        if ok.len() == 3 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let kinds: std::collections::BTreeSet<&str> = delivered.iter().filter_map(|r| r.body["event"].as_str()).collect();
    assert_eq!(kinds, ["interrupt.opened", "run.completed", "run.suspended"].into(), "{delivered:?}");
    for request in &delivered {
        // Checked over the bytes received, as a receiver must (not a re-serialization).
        let body = String::from_utf8(request.raw.clone()).unwrap();
        assert!(verify(&request.headers["stepwright-signature"], &body), "a signature the receiver can check");
        let payload: stepwright_api::webhook::WebhookPayload = serde_json::from_str(&body).unwrap();
        assert_eq!(payload.event(), request.body["event"], "the body is the contract's payload");
        assert_eq!(request.body["run_id"], run_id);
    }
    let completed = delivered.iter().find(|r| r.body["event"] == "run.completed").unwrap();
    assert_eq!(completed.body["output"], json!("Hello, Ada!"));

    // The redelivery log: each delivery once, delivered, the failed attempts kept.
    let (status, log) = server.get(&admin, &format!("/v1/webhooks/{id}/deliveries")).await;
    assert_eq!(status, 200);
    let log = log.as_array().unwrap().clone();
    assert_eq!(log.len(), 3, "one delivery per event: {log:?}");
    assert!(log.iter().all(|d| d["state"] == "delivered"), "{log:?}");
    let attempts: usize = log.iter().map(|d| d["attempts"].as_array().unwrap().len()).sum();
    assert_eq!(attempts, 5, "three deliveries, two of them tried twice: {log:?}");
    assert!(log.iter().flat_map(|d| d["attempts"].as_array().unwrap().clone()).any(|a| a["status"] == 500));

    // Listing and deleting.
    let (_, listed) = server.get(&admin, "/v1/webhooks").await;
    assert_eq!(listed.as_array().unwrap().len(), 1);
    let stranger = server.key("globex", "gus", &["admin"]).await;
    assert_eq!(server.get(&stranger, &format!("/v1/webhooks/{id}/deliveries")).await.0, 404);
    let deleted =
        server.http.delete(format!("{}/v1/webhooks/{id}", server.base)).bearer_auth(&admin).send().await.unwrap();
    assert_eq!(deleted.status(), 204);
    assert_eq!(server.get(&admin, "/v1/webhooks").await.1, json!([]));
    server.shutdown().await;
}

/// More runs change at once than the finder reads in one turn: every one is delivered (the
/// watermark moves forward past a busy window instead of re-reading it).
#[tokio::test(flavor = "multi_thread")]
async fn a_burst_of_runs_larger_than_one_read_is_delivered_whole() {
    let receiver = FakeServer::responding(|_| Reply::json(200, json!({})));
    let server = TestServer::start().await;
    let admin = server.key("acme", "ann", &["admin", "operator"]).await;
    let hook = json!({ "url": receiver.url, "events": ["run.completed"], "secret": SECRET });
    assert_eq!(server.post(&admin, "/v1/webhooks", hook).await.0, 201);
    server.register(&admin, crate::THREE_SETS).await;
    let mut runs = std::collections::BTreeSet::new();
    for round in 0..25 {
        let starts = (0..20).map(|n| {
            server.post(&admin, "/v1/runs", json!({ "workflow": "three", "input": round * 20 + n, "wait_seconds": 10 }))
        });
        for (status, run) in futures_util::future::join_all(starts).await {
            assert_eq!(status, 201);
            runs.insert(run["run_id"].as_str().unwrap().to_owned());
        }
    }
    assert_eq!(runs.len(), 500);
    let mut delivered = std::collections::BTreeSet::new();
    for _ in 0..600 {
        delivered = receiver.requests().iter().filter_map(|r| r.body["run_id"].as_str().map(str::to_owned)).collect();
        if delivered.len() == runs.len() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(delivered, runs, "every completion delivered");
    assert_eq!(receiver.served(), runs.len(), "each once");
    server.shutdown().await;
}

/// A hostile corpus of destinations, each refused at registration by a server with the
/// default policy (public addresses only), with why; nothing is stored.
const HOSTILE: [&str; 16] = [
    "http://169.254.169.254/latest/meta-data/",
    "http://metadata.google.internal/computeMetadata/v1/",
    "http://[fd00:ec2::254]/latest/meta-data/",
    "http://10.0.0.5/",
    "http://172.16.3.4:8080/",
    "http://192.168.1.1/admin",
    "http://127.0.0.1:5432/",
    "http://localhost:8080/",
    "http://0.0.0.0/",
    "http://2130706433/",
    "http://0x7f.1/",
    "http://[::ffff:169.254.169.254]/",
    "http://[::1]:8080/",
    "http://[fe80::1]/",
    "http://user:secret@example.com/",
    "http://no-such-receiver.invalid/",
];

#[tokio::test(flavor = "multi_thread")]
async fn internal_destinations_are_refused_at_registration_and_at_delivery() {
    let server = TestServer::start_with(|config| {
        config.webhook_destinations = stepwright_server::DestinationPolicy::default();
    })
    .await;
    let admin = server.key("acme", "ann", &["admin", "operator"]).await;
    for url in HOSTILE {
        let (status, body) = server
            .post(&admin, "/v1/webhooks", json!({ "url": url, "events": ["run.completed"], "secret": SECRET }))
            .await;
        assert_eq!((status, body["code"].as_str()), (400, Some("bad_request")), "{url}: {body}");
        let detail = body["detail"].as_str().unwrap_or_default();
        assert!(
            ["address", "metadata host", "user name", "does not resolve"].iter().any(|why| detail.contains(why)),
            "{url}: {detail}"
        );
    }
    assert_eq!(server.get(&admin, "/v1/webhooks").await.1, json!([]));

    // A webhook stored before the check (or under an allow-list since narrowed) to a
    // loopback receiver: its delivery is refused, nothing reaches the receiver, and the log
    // says why and no more, after one attempt.
    let receiver = FakeServer::responding(|_| Reply::json(200, json!({ "secret": "internal" })));
    let webhook = stepwright_store::control::Webhook {
        id: "swhold".into(),
        namespace: "acme".into(),
        url: receiver.url.clone(),
        events: vec!["run.completed".into()],
        secret: SECRET.into(),
        created_at: stepwright_core::Timestamp::from_micros(0),
    };
    server.store.create_webhook(webhook).await.unwrap();
    server.register(&admin, crate::THREE_SETS).await;
    let (status, _) =
        server.post(&admin, "/v1/runs", json!({ "workflow": "three", "input": 1, "wait_seconds": 10 })).await;
    assert_eq!(status, 201);
    let mut log = json!([]);
    for _ in 0..200 {
        log = server.get(&admin, "/v1/webhooks/swhold/deliveries").await.1;
        if log.as_array().is_some_and(|l| l.iter().any(|d| d["state"] == "failed")) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let delivery = &log.as_array().unwrap()[0];
    assert_eq!(delivery["state"], "failed", "{log}");
    let attempts = delivery["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 1, "a refused destination is not tried again: {log}");
    assert_eq!(attempts[0]["status"], json!(null));
    let error = attempts[0]["error"].as_str().unwrap();
    assert!(error.starts_with("destination refused:") && error.contains("loopback"), "{error}");
    assert!(receiver.requests().is_empty(), "nothing was sent");
    server.shutdown().await;
}
