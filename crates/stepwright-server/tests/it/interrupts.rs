//! Interrupts have kinds: the inbox lists the decisions a person takes, never a durable
//! timer; a timer is woken by an operator, never "answered"; a finished run's interrupts are
//! decided by nobody.

use serde_json::json;

use crate::TestServer;
use crate::api::wait_for_status;

/// A six-hour nap beside an approval: one timer, one decision, in the same run.
const NAP_AND_ASK: &str = r#"
workflow: nap
steps:
  - id: both
    fork:
      paths:
        - - id: nap
            sleep: 6h
        - - id: ask
            approval:
              message: "Ship it?"
              approvers: ["role:approver"]
  - id: done
    set: "{{ 'woke' }}"
"#;

#[tokio::test]
async fn the_inbox_lists_decisions_and_a_timer_is_woken_only_by_an_operator() {
    let server = TestServer::start().await;
    let admin = server.key("acme", "ann", &["admin", "operator", "approver"]).await;
    let approver = server.key("acme", "lee", &["approver"]).await;
    let operator = server.key("acme", "olga", &["operator"]).await;
    server.register(&admin, NAP_AND_ASK).await;
    let (status, run) = server.post(&admin, "/v1/runs", json!({ "workflow": "nap", "wait_seconds": 10 })).await;
    assert_eq!((status, run["status"].as_str()), (201, Some("suspended")), "{run}");
    let id = run["run_id"].as_str().unwrap();
    // Who started it, on the run, in the list (and its filter) and on its events.
    assert_eq!(run["started_by"], json!({ "kind": "user", "id": "ann" }), "{run}");
    assert_eq!(run["input"], json!(null));
    let (_, page) = server.get(&approver, "/v1/runs?started_by=ann").await;
    assert_eq!(page["runs"][0]["started_by"]["id"], "ann", "{page}");
    // The list says what a suspended run waits for.
    let waits = page["runs"][0]["waiting_for"].as_str().unwrap_or_default().to_owned();
    assert!(
        waits.ends_with("(and 1 more)") && (waits.starts_with("a person at") || waits.starts_with("a timer at")),
        "{page}"
    );
    assert_eq!(server.get(&approver, "/v1/runs?started_by=lee").await.1["runs"], json!([]));
    let kinds: Vec<&str> = run["pending"].as_array().unwrap().iter().map(|p| p["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds.len(), 2, "{run}");
    assert!(kinds.contains(&"timer") && kinds.contains(&"approval"), "{kinds:?}");

    // The inbox (and its badge) count the approval only; a timer is listed when asked for.
    let (_, inbox) = server.get(&approver, "/v1/interrupts").await;
    let listed: Vec<&str> = inbox.as_array().unwrap().iter().map(|i| i["kind"].as_str().unwrap()).collect();
    assert_eq!(listed, ["approval"], "{inbox}");
    let (_, timers) = server.get(&approver, "/v1/interrupts?kind=timer").await;
    assert_eq!(timers.as_array().unwrap().len(), 1, "{timers}");
    let timer = timers[0]["id"].as_str().unwrap().to_owned();
    assert!(timers[0]["deadline"].as_i64().is_some(), "a timer says when it goes off: {timers}");

    // "Answering" the timer skips nothing, whoever asks.
    let (status, body) =
        server.post(&admin, &format!("/v1/interrupts/{timer}/decision"), json!({ "decision": "approve" })).await;
    assert_eq!((status, body["code"].as_str()), (422, Some("not_a_decision")), "{body}");
    // Waking is an operator's act, and only for timers.
    let (status, body) = server.post(&approver, &format!("/v1/interrupts/{timer}/wake"), json!({})).await;
    assert_eq!((status, body["code"].as_str()), (403, Some("access_denied")), "{body}");
    let approval = inbox[0]["id"].as_str().unwrap();
    let (status, body) = server.post(&operator, &format!("/v1/interrupts/{approval}/wake"), json!({})).await;
    assert_eq!((status, body["code"].as_str()), (422, Some("not_a_timer")), "{body}");
    let (status, woken) = server.post(&operator, &format!("/v1/interrupts/{timer}/wake"), json!({})).await;
    assert_eq!((status, woken["woken_by"].as_str()), (200, Some("olga")), "{woken}");
    let (status, body) = server.post(&operator, &format!("/v1/interrupts/{timer}/wake"), json!({})).await;
    assert_eq!((status, body["code"].as_str()), (409, Some("already_resolved")), "{body}");
    let mut waits = String::new();
    for _ in 0..200 {
        let (_, page) = server.get(&approver, "/v1/runs?status=suspended").await;
        waits = page["runs"][0]["waiting_for"].as_str().unwrap_or_default().to_owned();
        if waits.starts_with("a person at") && !waits.contains("more") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(waits.ends_with(": Ship it?"), "only the person is left: {waits}");

    // The run still waits for the person; once approved it ends without sleeping six hours.
    let (status, _) =
        server.post(&approver, &format!("/v1/interrupts/{approval}/decision"), json!({ "decision": "approve" })).await;
    assert_eq!(status, 200);
    let done = wait_for_status(&server, &admin, id, "completed").await;
    assert_eq!(done["output"], json!("woke"));
    let log = server.store.audit_entries("acme", 10).await.unwrap();
    assert!(log.iter().any(|e| e.action == "timer.woken" && e.actor.starts_with("olga")), "{log:?}");
    server.shutdown().await;
}

#[tokio::test]
async fn a_cancelled_runs_interrupt_is_decided_by_nobody() {
    let server = TestServer::start().await;
    let admin = server.key("acme", "ann", &["admin", "operator", "approver"]).await;
    server.register(&admin, NAP_AND_ASK).await;
    let (_, run) = server.post(&admin, "/v1/runs", json!({ "workflow": "nap", "wait_seconds": 10 })).await;
    let id = run["run_id"].as_str().unwrap();
    let approval = run["pending"].as_array().unwrap().iter().find(|p| p["kind"] == "approval").unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (status, _) = server.post(&admin, &format!("/v1/runs/{id}/cancel"), json!({})).await;
    assert_eq!(status, 200);
    wait_for_status(&server, &admin, id, "cancelled").await;
    let (status, body) = server
        .post(&admin, &format!("/v1/interrupts/{id}.{approval}/decision"), json!({ "decision": "approve" }))
        .await;
    assert_eq!((status, body["code"].as_str()), (409, Some("run_finished")), "{body}");
    let (_, inbox) = server.get(&admin, "/v1/interrupts").await;
    assert_eq!(inbox, json!([]));
    server.shutdown().await;
}

/// An approver list that names a role of the organisation's own (`role:lead`) is met by a key
/// that holds it (`role:lead`, beside `approver`), and by nobody else — an admin included.
#[tokio::test]
async fn a_custom_approver_role_is_met_by_a_key_that_holds_it() {
    let server = TestServer::start().await;
    let admin = server.key("acme", "ann", &["admin", "operator", "approver"]).await;
    let lead = server.key("acme", "lee", &["approver", "role:lead"]).await;
    let source = r#"
workflow: triage
steps:
  - id: escalate
    approval: { message: "Page the on-call?", approvers: ["role:lead"] }
"#;
    server.register(&admin, source).await;
    let (_, run) = server.post(&admin, "/v1/runs", json!({ "workflow": "triage", "wait_seconds": 10 })).await;
    let id = run["run_id"].as_str().unwrap();
    let decision = format!("/v1/interrupts/{id}.{}/decision", run["pending"][0]["id"].as_str().unwrap());
    assert_eq!(server.get(&admin, "/v1/interrupts").await.1, json!([]), "not the admin's to decide");
    let (status, body) = server.post(&admin, &decision, json!({ "decision": "approve" })).await;
    assert_eq!((status, body["code"].as_str()), (403, Some("access_denied")), "{body}");
    let (_, inbox) = server.get(&lead, "/v1/interrupts").await;
    assert_eq!(inbox.as_array().unwrap().len(), 1, "{inbox}");
    let (status, decided) = server.post(&lead, &decision, json!({ "decision": "approve" })).await;
    assert_eq!((status, decided["decided_by"].as_str()), (200, Some("lee")), "{decided}");

    // A bare name is refused with the spelling that works; a built-in's name is no custom role.
    let now = stepwright_core::Timestamp::from_micros(0);
    for (roles, says) in
        [(&["lead"][..], "role:lead"), (&["role:admin"][..], "unknown role"), (&["role:"][..], "unknown role")]
    {
        let roles: Vec<String> = roles.iter().map(|r| (*r).to_owned()).collect();
        let refused = stepwright_server::create_key(server.store.as_ref(), "acme", "x", &roles, None, now).await;
        let said = refused.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(said.contains(says), "{roles:?}: {said}");
    }
    server.shutdown().await;
}
