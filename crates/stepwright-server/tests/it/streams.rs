//! Event streams: what `runs events` shows, numbered by position, resumable from any id,
//! one feed for many watchers, and a last comment at shutdown.

use eventsource_stream::Eventsource;
use futures_util::StreamExt;
use serde_json::{Value, json};
use stepwright_core::inspect::EventCursor;

use crate::{APPROVAL, TestServer};

/// One received event: its id, its name and its data.
#[derive(Debug, Clone, PartialEq)]
struct Received {
    id: u64,
    event: String,
    data: Value,
}

/// Reads a stream to its end (or `limit` events) with an independent SSE parser.
async fn read(server: &TestServer, key: &str, path: &str, last_event_id: Option<u64>, limit: usize) -> Vec<Received> {
    let mut request = server.http.get(format!("{}{path}", server.base)).bearer_auth(key);
    if let Some(id) = last_event_id {
        request = request.header("last-event-id", id.to_string());
    }
    collect(request.send().await.unwrap(), limit).await
}

/// The events of a stream's answer, to its end or `limit` of them.
async fn collect(response: reqwest::Response, limit: usize) -> Vec<Received> {
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let mut events = response.bytes_stream().eventsource();
    let mut received = Vec::new();
    while received.len() < limit {
        let next =
            tokio::time::timeout(std::time::Duration::from_secs(20), events.next()).await.expect("an event in time");
        let Some(event) = next else { break };
        let event = event.unwrap();
        received.push(Received {
            id: event.id.parse().unwrap(),
            event: event.event,
            data: serde_json::from_str(&event.data).unwrap(),
        });
    }
    received
}

/// What `runs events` prints for the run, read at once from the store.
async fn runs_events(server: &TestServer, run: &str) -> Vec<(String, String)> {
    let mut cursor = EventCursor::new();
    let events = cursor.poll(server.store.as_ref(), run.parse().unwrap()).await.unwrap();
    events.into_iter().map(|e| (e.kind, e.path.as_str().to_owned())).collect()
}

#[tokio::test]
async fn two_watchers_see_every_event_once_in_order_as_runs_events_does_and_resume_from_any_id() {
    let server = TestServer::start().await;
    let admin = server.key("acme", "ann", &["admin", "operator"]).await;
    let approver = server.key("acme", "lee", &["approver"]).await;
    server.register(&admin, APPROVAL).await;
    let (_, run) = server
        .post(&admin, "/v1/runs", json!({ "workflow": "greet", "input": { "name": "Ada" }, "wait_seconds": 10 }))
        .await;
    let id = run["run_id"].as_str().unwrap().to_owned();
    let path = format!("/v1/runs/{id}/events");
    // Two watchers connect while the run waits, then the approval comes.
    let first = tokio::spawn({
        let (server_base, key, path) = (server.base.clone(), admin.clone(), path.clone());
        async move { read_at(&server_base, &key, &path).await }
    });
    let second = tokio::spawn({
        let (server_base, key, path) = (server.base.clone(), approver.clone(), path.clone());
        async move { read_at(&server_base, &key, &path).await }
    });
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let interrupt = run["pending"][0]["id"].as_str().unwrap();
    let (status, _) = server
        .post(&approver, &format!("/v1/interrupts/{id}.{interrupt}/decision"), json!({ "decision": "approve" }))
        .await;
    assert_eq!(status, 200);
    let (first, second) = (first.await.unwrap(), second.await.unwrap());
    assert_eq!(first, second, "every watcher sees the same stream");
    let ids: Vec<u64> = first.iter().map(|e| e.id).collect();
    assert_eq!(ids, (0..first.len() as u64).collect::<Vec<_>>(), "numbered by position, none missing or twice");
    assert_eq!(first.last().unwrap().event, "run.completed", "the stream ends after the final event");
    assert_eq!(first.last().unwrap().data["data"]["output"], json!("Hello, Ada!"));
    let shown: Vec<(String, String)> =
        first.iter().map(|e| (e.event.clone(), e.data["path"].as_str().unwrap().to_owned())).collect();
    assert_eq!(shown, runs_events(&server, &id).await, "the same events, in the same order, as `runs events`");
    assert!(shown.contains(&("interrupt.opened".into(), "ok".into())));

    // Resuming: after any id, exactly the rest — by `Last-Event-ID` or by `?after=`.
    for last in [0, 3, first.len() as u64 - 2] {
        let rest = read(&server, &admin, &path, Some(last), usize::MAX).await;
        assert_eq!(rest, first[last as usize + 1..].to_vec(), "after {last}");
        let by_query = read(&server, &admin, &format!("{path}?after={last}"), None, usize::MAX).await;
        assert_eq!(by_query, rest);
    }
    let (status, body) = server.get(&admin, &format!("{path}?after=x")).await;
    assert_eq!((status, body["code"].as_str()), (400, Some("bad_request")));
    server.shutdown().await;
}

async fn read_at(base: &str, key: &str, path: &str) -> Vec<Received> {
    collect(reqwest::Client::new().get(format!("{base}{path}")).bearer_auth(key).send().await.unwrap(), usize::MAX)
        .await
}

#[tokio::test]
async fn a_shutdown_ends_open_streams_with_a_comment_and_streams_per_key_are_limited() {
    let server = TestServer::start_with(|config| config.limits.streams_per_key = 1).await;
    let admin = server.key("acme", "ann", &["admin", "operator"]).await;
    server.register(&admin, APPROVAL).await;
    let (_, run) = server
        .post(&admin, "/v1/runs", json!({ "workflow": "greet", "input": { "name": "Ada" }, "wait_seconds": 10 }))
        .await;
    let path = format!("{}/v1/runs/{}/events", server.base, run["run_id"].as_str().unwrap());
    let open = server.http.get(&path).bearer_auth(&admin).send().await.unwrap();
    assert_eq!(open.status(), 200);
    let (status, body) = crate::answer(server.http.get(&path).bearer_auth(&admin).send().await.unwrap()).await;
    assert_eq!((status, body["code"].as_str()), (429, Some("rate_limited")), "one stream per key here");
    let reading = tokio::spawn(async move { open.text().await.unwrap() });
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    server.shutdown().await;
    let text = tokio::time::timeout(std::time::Duration::from_secs(10), reading).await.expect("ends").unwrap();
    assert!(text.contains("id: 3\nevent: interrupt.opened"), "{text}");
    assert!(text.trim_end().ends_with(": server shutting down; reconnect with Last-Event-ID"), "{text}");
}
