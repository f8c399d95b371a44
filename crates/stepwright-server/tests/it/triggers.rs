//! `/v1/events` and `/v1/triggers`: events stored in the key's namespace (once per
//! idempotency key), a registered workflow's triggers kept and run by the server's worker
//! (each event once), an event's history, a wait woken by an event sent through the API;
//! roles and namespaces hold.

use std::time::Duration;

use serde_json::{Value, json};

use crate::TestServer;

const TICKETS: &str = r#"workflow: tickets
triggers:
  each:
    event: ticket.*
    when: event.payload.priority != "low"
    input: { id: "{{ event.payload.id }}" }
  grouped:
    event: ticket.created
    batch: { max: 2, within: 1h }
  quiet:
    event: ticket.created
    debounce: { key: "{{ event.payload.customer }}", period: 1h }
steps:
  - id: note
    set: "{{ input }}"
"#;

const WAITER: &str = r#"workflow: waiter
steps:
  - id: reply
    wait: { event: ticket.answered, timeout: 1h, match: { ticket: "{{ input.ticket }}" } }
"#;

async fn delete(server: &TestServer, key: &str, path: &str) -> u16 {
    server.http.delete(format!("{}{path}", server.base)).bearer_auth(key).send().await.unwrap().status().as_u16()
}

async fn until(server: &TestServer, key: &str, path: &str, done: impl Fn(&Value) -> bool) -> Value {
    let mut shown = Value::Null;
    for _ in 0..200 {
        shown = server.get(key, path).await.1;
        if done(&shown) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    shown
}

#[tokio::test]
async fn events_start_triggers_once_and_say_what_they_started_through_the_api() {
    let server = TestServer::start().await;
    let admin = server.key("acme", "ann", &["admin", "operator"]).await;
    let viewer = server.key("acme", "vic", &["viewer"]).await;
    let other = server.key("globex", "gil", &["admin", "operator"]).await;
    server.register(&admin, TICKETS).await;

    let (status, body) = server.post(&viewer, "/v1/triggers", json!({ "workflow": "tickets" })).await;
    assert_eq!((status, body["code"].as_str()), (403, Some("access_denied")));
    let (status, body) = server.post(&admin, "/v1/triggers", json!({ "workflow": "tickets", "only": ["x"] })).await;
    assert_eq!(status, 409, "{body}");
    assert!(body["detail"].as_str().unwrap().contains("each, grouped, quiet"), "{body}");
    let (status, kept) = server.post(&admin, "/v1/triggers", json!({ "workflow": "tickets" })).await;
    assert_eq!(status, 201, "{kept}");
    let names: Vec<&str> = kept.as_array().unwrap().iter().map(|t| t["trigger"].as_str().unwrap()).collect();
    assert_eq!(names, ["each", "grouped", "quiet"]);
    assert_eq!(server.get(&viewer, "/v1/triggers").await.1.as_array().map(Vec::len), Some(3));
    assert_eq!(server.get(&viewer, "/v1/schedules").await.1, json!([]), "triggers are not schedules");

    // Sending: a viewer may not; the same idempotency key gives the first event back.
    let event = json!({ "name": "ticket.created", "payload": { "id": 1, "priority": "high", "customer": "c1" }, "idempotency_key": "t-1" });
    assert_eq!(server.post(&viewer, "/v1/events", event.clone()).await.0, 403);
    let (status, first) = server.post(&admin, "/v1/events", event.clone()).await;
    assert_eq!((status, &first["created"]), (201, &json!(true)), "{first}");
    let (status, again) = server.post(&admin, "/v1/events", event).await;
    assert_eq!((status, &again["created"], &again["event"]), (200, &json!(false), &first["event"]), "{again}");
    let (status, body) = server.post(&admin, "/v1/events", json!({ "name": "" })).await;
    assert_eq!(status, 400, "{body}");
    let (status, second) = server
        .post(
            &admin,
            "/v1/events",
            json!({ "name": "ticket.created", "payload": { "id": 2, "priority": "low", "customer": "c2" } }),
        )
        .await;
    assert_eq!(status, 201, "{second}");

    // The server's worker reads them: `each` starts a run for the first (the second is
    // filtered out), `grouped` one run for both.
    let seq = first["event"]["seq"].as_u64().unwrap();
    let shown =
        until(&server, &viewer, &format!("/v1/events/{seq}"), |e| e["fires"].as_array().is_some_and(|f| f.len() == 2))
            .await;
    let fires = shown["fires"].as_array().unwrap();
    assert_eq!(fires.len(), 2, "{shown}");
    assert!(fires.iter().all(|f| f["run_id"].is_string()), "{shown}");
    let run = fires.iter().find(|f| f["trigger"] == "tickets/each").unwrap()["run_id"].as_str().unwrap().to_owned();
    let done = until(&server, &viewer, &format!("/v1/runs/{run}"), |r| r["status"] == "completed").await;
    assert_eq!(done["output"], json!({ "id": 1 }), "{done}");
    let by = &done["started_by"];
    assert_eq!(
        (by["kind"].as_str(), by["id"].as_str(), &by["events"]),
        (Some("trigger"), Some("trigger:tickets/each"), &json!([seq])),
        "{done}"
    );
    let second_seq = second["event"]["seq"].as_u64().unwrap();
    let grouped = until(&server, &viewer, "/v1/triggers/tickets/grouped", |t| {
        t["fires"].as_array().is_some_and(|f| f.len() == 2)
    })
    .await;
    let batch: Vec<&Value> = grouped["fires"].as_array().unwrap().iter().map(|f| &f["run_id"]).collect();
    assert!(batch[0].is_string() && batch[0] == batch[1], "one run for the batch: {grouped}");
    assert_eq!(grouped["read_through"].as_u64(), Some(second_seq));
    // Every evaluation is on the event: a `when` that is false is recorded, and what a trigger
    // still holds (a debounce of an hour) is shown with its key and when it will start.
    let low = until(&server, &viewer, &format!("/v1/events/{second_seq}"), |e| {
        e["fires"].as_array().is_some_and(|f| f.len() == 2)
    })
    .await;
    let each = low["fires"].as_array().unwrap().iter().find(|f| f["trigger"] == "tickets/each").unwrap();
    assert!(each["skipped"].as_str().unwrap().starts_with("filter_false"), "{low}");
    let held = &low["held"];
    assert_eq!(held.as_array().map(Vec::len), Some(1), "{low}");
    assert_eq!(
        (&held[0]["trigger"], &held[0]["by"], &held[0]["key"]),
        (&json!("tickets/quiet"), &json!("debounced"), &json!("c2"))
    );
    let received = low["received_at"].as_i64().unwrap();
    let until_us = held[0]["until"].as_i64().unwrap();
    assert!((until_us - received - 3_600_000_000).abs() < 1_000_000, "an hour after it came: {low}");

    // Listing: newest first, by name, paged by `before`; another namespace sees nothing.
    let listed = server.get(&viewer, "/v1/events").await.1;
    let seqs: Vec<u64> = listed.as_array().unwrap().iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, [second_seq, seq]);
    assert_eq!(server.get(&viewer, &format!("/v1/events?before={second_seq}")).await.1[0]["seq"], seq);
    assert_eq!(server.get(&viewer, "/v1/events?name=ticket.closed").await.1, json!([]));
    assert_eq!(server.get(&viewer, "/v1/events?limit=0").await.0, 400);
    assert_eq!(server.get(&viewer, "/v1/events/nope").await.0, 400);
    assert_eq!(server.get(&other, "/v1/events").await.1, json!([]));
    assert_eq!(server.get(&other, &format!("/v1/events/{seq}")).await.0, 404);
    assert_eq!(server.get(&other, "/v1/triggers/tickets/each").await.0, 404);

    // Pause, resume, delete.
    let (status, paused) = server.post(&admin, "/v1/triggers/tickets/each/pause", json!({})).await;
    assert_eq!((status, &paused["paused"]), (200, &json!(true)), "{paused}");
    let (status, sent) = server
        .post(&admin, "/v1/events", json!({ "name": "ticket.closed", "payload": { "id": 1, "priority": "high" } }))
        .await;
    assert_eq!(status, 201);
    let seq = sent["event"]["seq"].as_u64().unwrap();
    let shown =
        until(&server, &viewer, &format!("/v1/events/{seq}"), |e| e["fires"].as_array().is_some_and(|f| !f.is_empty()))
            .await;
    assert_eq!(shown["fires"][0]["skipped"], "paused", "{shown}");
    let (status, resumed) = server.post(&admin, "/v1/triggers/tickets/each/resume", json!({})).await;
    assert_eq!((status, &resumed["paused"]), (200, &json!(false)));
    assert_eq!(delete(&server, &viewer, "/v1/triggers/tickets/each").await, 403);
    assert_eq!(delete(&server, &admin, "/v1/triggers/tickets/each").await, 204);
    assert_eq!(delete(&server, &admin, "/v1/triggers/tickets/each").await, 404);
    assert_eq!(server.post(&admin, "/v1/triggers/tickets/each/pause", json!({})).await.0, 404);
}

#[tokio::test]
async fn a_wait_is_woken_by_an_event_sent_through_the_api() {
    let server = TestServer::start().await;
    let admin = server.key("acme", "ann", &["admin", "operator"]).await;
    server.register(&admin, WAITER).await;
    let (status, run) = server
        .post(&admin, "/v1/runs", json!({ "workflow": "waiter", "input": { "ticket": 7 }, "wait_seconds": 1 }))
        .await;
    assert!(status == 202 || status == 201, "{run}");
    let id = run["run_id"].as_str().or(run["id"].as_str()).unwrap().to_owned();
    let suspended = until(&server, &admin, &format!("/v1/runs/{id}"), |r| r["status"] == "suspended").await;
    assert_eq!(suspended["status"], "suspended", "{suspended}");
    let other = server.key("globex", "gil", &["operator"]).await;
    let answer = json!({ "name": "ticket.answered", "payload": { "ticket": 7, "by": "gil" } });
    assert_eq!(server.post(&other, "/v1/events", answer).await.0, 201, "another namespace's event");
    server.post(&admin, "/v1/events", json!({ "name": "ticket.answered", "payload": { "ticket": 8 } })).await;
    server
        .post(&admin, "/v1/events", json!({ "name": "ticket.answered", "payload": { "ticket": 7, "by": "ann" } }))
        .await;
    let done = until(&server, &admin, &format!("/v1/runs/{id}"), |r| r["status"] == "completed").await;
    assert_eq!(done["output"], json!({ "ticket": 7, "by": "ann" }), "its namespace's, its ticket's: {done}");
}
