//! A browser's session: signed in with a key, kept in an HttpOnly `SameSite=Strict` cookie,
//! refused for changes without the CSRF header, ended by signing out or by revoking the key.

use serde_json::{Value, json};

use crate::{TestServer, answer};

/// The `stepwright_session=…` pair of a `Set-Cookie` header, and the whole header.
fn session_cookie(response: &reqwest::Response) -> (String, String) {
    let set = response.headers().get("set-cookie").expect("a Set-Cookie header").to_str().unwrap().to_owned();
    let pair = set.split(';').next().unwrap().trim().to_owned();
    assert!(pair.starts_with("stepwright_session="), "{set}");
    (pair, set)
}

#[tokio::test]
async fn a_browser_signs_in_with_a_key_and_its_cookie_is_a_session() {
    let server = TestServer::start().await;
    let key = server.key("acme", "ann", &["operator", "approver"]).await;
    server.register(&server.key("acme", "root", &["admin"]).await, crate::THREE_SETS).await;
    let url = |path: &str| format!("{}{path}", server.base);

    // A wrong key signs nobody in, and sets no cookie.
    let refused = server.http.post(url("/v1/session")).json(&json!({ "api_key": "sw_nope" })).send().await.unwrap();
    assert!(refused.headers().get("set-cookie").is_none());
    assert_eq!(answer(refused).await.0, 401);

    let signed = server.http.post(url("/v1/session")).json(&json!({ "api_key": key })).send().await.unwrap();
    assert_eq!(signed.status(), 201);
    let (cookie, set) = session_cookie(&signed);
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/", "Max-Age=43200"] {
        assert!(set.contains(attribute), "{attribute} in {set}");
    }
    assert!(!set.contains("Secure"), "plain HTTP: a Secure cookie would never come back: {set}");
    let body = signed.text().await.unwrap();
    assert!(!body.contains("sw_"), "the page never sees a secret: {body}");
    let shown: Value = serde_json::from_str(&body).unwrap();
    assert_eq!((&shown["namespace"], &shown["user"]), (&json!("acme"), &json!("ann")));
    assert_eq!(shown["roles"], json!(["operator", "approver"]));
    let session_key = shown["key_id"].as_str().unwrap().to_owned();
    assert!(session_key.contains(".s"), "a key of its own, derived from the key: {session_key}");

    // The cookie alone reads…
    let whoami = server.http.get(url("/v1/session")).header("cookie", &cookie).send().await.unwrap();
    assert_eq!(answer(whoami).await, (200, shown.clone()));
    let listed = server.http.get(url("/v1/runs")).header("cookie", &cookie).send().await.unwrap();
    assert_eq!(listed.status(), 200);
    // …but changes nothing without the CSRF header, which another site's page cannot send.
    let start = json!({ "workflow": "three", "input": 1, "wait_seconds": 5 });
    let forged = server.http.post(url("/v1/runs")).header("cookie", &cookie).json(&start).send().await.unwrap();
    let (status, problem) = answer(forged).await;
    assert_eq!((status, problem["code"].as_str()), (403, Some("csrf_required")));
    let started = server
        .http
        .post(url("/v1/runs"))
        .header("cookie", &cookie)
        .header("x-stepwright-csrf", "1")
        .json(&start)
        .send()
        .await
        .unwrap();
    let (status, run) = answer(started).await;
    assert_eq!((status, run["status"].as_str()), (201, Some("completed")));

    // Behind TLS (as the proxy says) the cookie is Secure.
    let over_tls = server
        .http
        .post(url("/v1/session"))
        .header("x-forwarded-proto", "https")
        .json(&json!({ "api_key": key }))
        .send()
        .await
        .unwrap();
    let (second, set) = session_cookie(&over_tls);
    assert!(set.contains("; Secure"), "{set}");

    // Signing out needs the session (a key in a header has none), ends it and clears the cookie.
    let with_key = server.http.delete(url("/v1/session")).bearer_auth(&key).send().await.unwrap();
    assert_eq!(answer(with_key).await.0, 409);
    let out = server
        .http
        .delete(url("/v1/session"))
        .header("cookie", &cookie)
        .header("x-stepwright-csrf", "1")
        .send()
        .await
        .unwrap();
    assert_eq!(out.status(), 204);
    assert!(session_cookie(&out).1.contains("Max-Age=0"));
    let after = server.http.get(url("/v1/runs")).header("cookie", &cookie).send().await.unwrap();
    assert_eq!(answer(after).await.0, 401, "a session signed out of is refused");

    // Revoking the key ends the sessions signed in with it (once this server's key cache of a
    // few seconds has let go of it).
    let ann =
        server.store.keys(Some("acme")).await.unwrap().into_iter().find(|k| k.user == "ann" && !k.id.contains('.'));
    assert!(server.store.revoke_key(&ann.unwrap().id, stepwright_core::Timestamp::from_micros(1)).await.unwrap());
    tokio::time::sleep(std::time::Duration::from_millis(5_100)).await;
    let revoked = server.http.get(url("/v1/runs")).header("cookie", &second).send().await.unwrap();
    assert_eq!(answer(revoked).await.0, 401, "the key's revocation ends its sessions");
    server.shutdown().await;
}
