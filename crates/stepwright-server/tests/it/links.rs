//! Approval links: one interrupt, one decision, no sign-in; refused once used, expired or
//! revoked with the key that made them, and good for nothing else.

use serde_json::{Value, json};

use crate::{APPROVAL, TestServer, answer};

/// `GET`/`POST` with a link's key (the part of its URL after `#`).
async fn with_link(server: &TestServer, secret: &str, decision: Option<Value>) -> (u16, Value) {
    let request = match decision {
        None => server.http.get(format!("{}/v1/link", server.base)),
        Some(body) => server.http.post(format!("{}/v1/link/decision", server.base)).json(&body),
    };
    answer(request.bearer_auth(secret).send().await.unwrap()).await
}

/// Starts a greeting that waits for an approval; its interrupt's `<run>.<interrupt>` id.
async fn waiting(server: &TestServer, operator: &str, approver: &str, name: &str) -> String {
    let (status, run) = server
        .post(operator, "/v1/runs", json!({ "workflow": "greet", "input": { "name": name }, "wait_seconds": 10 }))
        .await;
    assert_eq!((status, run["status"].as_str()), (201, Some("suspended")), "{run}");
    let (_, inbox) = server.get(approver, "/v1/interrupts").await;
    let item = inbox.as_array().unwrap().iter().find(|item| item["run_id"] == run["run_id"]).expect("in the inbox");
    item["id"].as_str().unwrap().to_owned()
}

/// A server with the greeting registered, an operator's and an approver's keys, and Ada's
/// greeting waiting for its approval (the interrupt's id).
async fn set_up() -> (TestServer, String, String, String) {
    let server = TestServer::start().await;
    let admin = server.key("acme", "root", &["admin"]).await;
    let operator = server.key("acme", "op", &["operator"]).await;
    let approver = server.key("acme", "lee", &["approver"]).await;
    server.register(&admin, APPROVAL).await;
    let interrupt = waiting(&server, &operator, &approver, "Ada").await;
    (server, operator, approver, interrupt)
}

/// The link's key: the part of its URL after `#`.
fn secret_of(link: &Value) -> String {
    link["path"].as_str().unwrap().split_once('#').unwrap().1.to_owned()
}

#[tokio::test]
async fn an_approval_link_decides_its_interrupt_once_as_its_maker() {
    let (server, operator, approver, interrupt) = set_up().await;

    // Made by an approver only, for an interrupt that is open.
    let (status, _) = server.post(&operator, &format!("/v1/interrupts/{interrupt}/link"), json!({})).await;
    assert_eq!(status, 403, "an operator makes no links");
    let (status, problem) =
        server.post(&approver, &format!("/v1/interrupts/{interrupt}/link"), json!({ "expires_in_seconds": 5 })).await;
    assert_eq!((status, problem["code"].as_str()), (400, Some("bad_request")), "{problem}");
    let response = server
        .http
        .post(format!("{}/v1/interrupts/{interrupt}/link", server.base))
        .bearer_auth(&approver)
        .header("host", "approvals.example.com")
        .header("x-forwarded-proto", "https")
        .send()
        .await
        .unwrap();
    let (status, link) = answer(response).await;
    assert_eq!(status, 201, "{link}");
    let url = link["url"].as_str().unwrap();
    assert!(url.starts_with("https://approvals.example.com/link#sw_"), "the secret in the fragment: {url}");
    let secret = url.split_once('#').unwrap().1.to_owned();
    assert_eq!(link["interrupt"], json!(interrupt));

    // Its key opens the link and nothing else.
    for path in ["/v1/runs", "/v1/interrupts", "/v1/session"] {
        let (status, problem) = server.get(&secret, path).await;
        assert_eq!(status, 401, "{path}: {problem}");
        assert!(problem["detail"].as_str().unwrap().contains("approval link"), "{problem}");
    }
    let (status, shown) = with_link(&server, &secret, None).await;
    assert_eq!(status, 200, "{shown}");
    assert_eq!((shown["interrupt"]["id"].as_str(), shown["decide_as"].as_str()), (Some(&*interrupt), Some("lee")));
    assert_eq!(shown["interrupt"]["message"], json!("Send it?"));

    // A malformed decision does not spend it; the decision does, taken as the link's maker.
    let (status, _) = with_link(&server, &secret, Some(json!({ "decision": "approve", "value": 1 }))).await;
    assert_eq!(status, 400);
    let (status, taken) = with_link(&server, &secret, Some(json!({ "decision": "approve" }))).await;
    assert_eq!((status, taken["decided_by"].as_str()), (200, Some("lee")), "{taken}");
    for decision in [None, Some(json!({ "decision": "reject" }))] {
        let (status, problem) = with_link(&server, &secret, decision).await;
        assert_eq!((status, problem["code"].as_str()), (410, Some("link_used")), "{problem}");
    }
    let run = interrupt.split_once('.').unwrap().0;
    let mut finished = server.get(&operator, &format!("/v1/runs/{run}")).await.1;
    for _ in 0..100 {
        if finished["status"] == "completed" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        finished = server.get(&operator, &format!("/v1/runs/{run}")).await.1;
    }
    assert_eq!(finished["output"], json!("Hello, Ada!"));
    let audit = server.store.audit_entries("acme", 20).await.unwrap();
    assert!(audit.iter().any(|e| e.action == "link.created" && e.subject == interrupt), "{audit:?}");
    assert!(audit.iter().any(|e| e.action == "interrupt.decided" && e.actor.starts_with("lee (key swk")));

    // Someone else deciding first: the link answers 409; a link is revoked with its key.
    let second = waiting(&server, &operator, &approver, "Bo").await;
    let (_, link) = server.post(&approver, &format!("/v1/interrupts/{second}/link"), json!({})).await;
    let secret = secret_of(&link);
    let (status, _) =
        server.post(&approver, &format!("/v1/interrupts/{second}/decision"), json!({ "decision": "reject" })).await;
    assert_eq!(status, 200);
    let (status, problem) = with_link(&server, &secret, Some(json!({ "decision": "approve" }))).await;
    assert_eq!((status, problem["code"].as_str()), (409, Some("already_resolved")), "{problem}");
    let (status, _) = server.post(&approver, &format!("/v1/interrupts/{second}/link"), json!({})).await;
    assert_eq!(status, 409, "a decided interrupt gets no link");

    let third = waiting(&server, &operator, &approver, "Cy").await;
    let (_, link) = server.post(&approver, &format!("/v1/interrupts/{third}/link"), json!({})).await;
    let secret = secret_of(&link);
    let maker = server.store.keys(Some("acme")).await.unwrap();
    let lee = maker.iter().find(|k| k.user == "lee" && !k.id.contains('.')).unwrap();
    assert!(server.store.revoke_key(&lee.id, stepwright_core::Timestamp::from_micros(1)).await.unwrap());
    let (status, problem) = with_link(&server, &secret, None).await;
    assert_eq!((status, problem["code"].as_str()), (410, Some("link_used")), "{problem}");
    let (status, _) = with_link(&server, "sw_swk000000000000_nonsense", None).await;
    assert_eq!(status, 401);
    let (status, _) = with_link(&server, &operator, None).await;
    assert_eq!(status, 401, "an API key is not a link");
    server.shutdown().await;
}

#[tokio::test]
async fn a_link_expires() {
    let (server, _, _, interrupt) = set_up().await;
    // A link lasts at most as long as the key that makes it.
    let now = stepwright_core::Timestamp::from_micros(0);
    let roles = vec!["approver".to_owned()];
    let wall = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
    let until = stepwright_core::Timestamp::from_micros(i64::try_from(wall.as_micros()).unwrap())
        .plus(std::time::Duration::from_secs(1));
    let brief = stepwright_server::create_key(server.store.as_ref(), "acme", "sue", &roles, Some(until), now).await;
    let (status, link) =
        server.post(&brief.unwrap().secret, &format!("/v1/interrupts/{interrupt}/link"), json!({})).await;
    assert_eq!(status, 201, "{link}");
    assert!(link["expires_at"].as_i64().unwrap() <= until.as_micros());
    let secret = secret_of(&link);
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let (status, problem) = with_link(&server, &secret, Some(json!({ "decision": "approve" }))).await;
    assert_eq!((status, problem["code"].as_str()), (410, Some("link_expired")), "{problem}");
    server.shutdown().await;
}
