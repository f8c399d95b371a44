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
    // After the final event, a client that comes back gets `204`: nothing more will come, and
    // a browser's EventSource stops reconnecting.
    let last = first.last().unwrap().id;
    for request in [
        server.http.get(format!("{}{path}", server.base)).header("last-event-id", last.to_string()),
        server.http.get(format!("{}{path}?after={last}", server.base)),
    ] {
        let response = request.bearer_auth(&admin).send().await.unwrap();
        assert_eq!(response.status(), 204);
        assert!(response.bytes().await.unwrap().is_empty());
    }
    // Lifecycle events are the run's: its tenant and who started it.
    assert_eq!(
        (first[0].data["tenant"].as_str(), first[0].data["user"].as_str()),
        (Some("acme"), Some("ann")),
        "{:?}",
        first[0]
    );
    server.shutdown().await;
}

/// Every error is a problem document: a path nothing serves (`404`), a method a path does not
/// take (`405`, with `Allow`), a limit (`429`, with `Retry-After`).
#[tokio::test]
async fn unknown_paths_and_methods_are_problem_documents() {
    let server = TestServer::start().await;
    let admin = server.key("acme", "ann", &["admin", "operator"]).await;
    let (status, body) = server.get(&admin, "/v1/nothing-here").await;
    assert_eq!((status, body["code"].as_str()), (404, Some("not_found")), "{body}");
    let response = server.http.delete(format!("{}/v1/runs", server.base)).bearer_auth(&admin).send().await.unwrap();
    assert_eq!(response.headers()["allow"], "POST, GET");
    let (status, body) = crate::answer(response).await;
    assert_eq!((status, body["code"].as_str()), (405, Some("method_not_allowed")), "{body}");
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
    let refused = server.http.get(&path).bearer_auth(&admin).send().await.unwrap();
    assert_eq!((refused.status().as_u16(), refused.headers()["retry-after"].to_str().unwrap()), (429, "1"));
    let reading = tokio::spawn(async move { open.text().await.unwrap() });
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    server.shutdown().await;
    let text = tokio::time::timeout(std::time::Duration::from_secs(10), reading).await.expect("ends").unwrap();
    assert!(text.contains("id: 3\nevent: interrupt.opened"), "{text}");
    assert!(text.trim_end().ends_with(": server shutting down; reconnect with Last-Event-ID"), "{text}");
}

/// What the fake model streams, word by word.
const STREAMED: &str = "Durable workflows survive crashes and wait for people";

fn streamed_answer(_request: &Value) -> stepwright_testkit::openai::Answer {
    stepwright_testkit::openai::Answer::Text(STREAMED.into())
}

/// One raw SSE block: its field lines, as sent.
fn blocks(text: &str) -> Vec<Vec<(String, String)>> {
    text.split("\n\n")
        .map(|block| {
            block
                .lines()
                .filter(|line| !line.starts_with(':'))
                .filter_map(|line| line.split_once(':').map(|(k, v)| (k.to_owned(), v.trim_start().to_owned())))
                .collect::<Vec<_>>()
        })
        .filter(|fields| !fields.is_empty())
        .collect()
}

#[tokio::test]
async fn tokens_stream_live_without_ids_to_those_who_ask_and_never_twice() {
    let model = stepwright_testkit::openai::chat_model(
        streamed_answer,
        stepwright_testkit::openai::Tokens::Fixed(10, 9),
        std::time::Duration::from_millis(15),
    );
    let server = TestServer::start().await;
    let admin = server.key("acme", "ann", &["admin", "operator", "approver"]).await;
    // The fake model takes any key: PATH is a variable every process has.
    let source = format!(
        "workflow: talk\nmodels:\n  fast: {{ provider: openai, model: gpt-test, base_url: \"http://127.0.0.1:{}/v1\", api_key_env: PATH }}\nsteps:\n  - id: ok\n    approval: {{ message: Go? }}\n  - id: write\n    llm: {{ model: fast, prompt: Write }}\n",
        model.port
    );
    server.register(&admin, &source).await;
    let (_, run) = server.post(&admin, "/v1/runs", json!({ "workflow": "talk", "wait_seconds": 10 })).await;
    assert_eq!(run["status"], "suspended", "{run}");
    let id = run["run_id"].as_str().unwrap().to_owned();
    let watch = |query: &'static str| {
        let (url, key) = (format!("{}/v1/runs/{id}/events{query}", server.base), admin.clone());
        tokio::spawn(async move { reqwest::Client::new().get(url).bearer_auth(key).send().await.unwrap().text().await })
    };
    let (with_tokens, without) = (watch("?tokens=true"), watch(""));
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let interrupt = run["pending"][0]["id"].as_str().unwrap();
    let decision = format!("/v1/interrupts/{id}.{interrupt}/decision");
    assert_eq!(server.post(&admin, &decision, json!({ "decision": "approve" })).await.0, 200);
    let with_tokens = blocks(&with_tokens.await.unwrap().unwrap());
    let without = blocks(&without.await.unwrap().unwrap());

    let (tokens, recorded): (Vec<_>, Vec<_>) =
        with_tokens.into_iter().partition(|fields| fields.contains(&("event".into(), "token".into())));
    assert_eq!(recorded, without, "the recorded events are the same, numbered the same, with or without tokens");
    assert!(without.iter().all(|fields| fields[0].0 == "id"), "every recorded event has an id");
    let mut text = String::new();
    for fields in &tokens {
        assert!(fields.iter().all(|(name, _)| name != "id"), "a token has no id, so a reconnect never repeats it");
        let data: Value = serde_json::from_str(&fields.iter().find(|(n, _)| n == "data").unwrap().1).unwrap();
        assert_eq!(data["path"], "write");
        text.push_str(data["text"].as_str().unwrap());
    }
    assert!(tokens.len() > 1, "streamed in pieces: {tokens:?}");
    assert_eq!(text, STREAMED, "every token once, in order");
    // Coming back after the run ended: the recorded events, no tokens (they were live only).
    let again = server.http.get(format!("{}/v1/runs/{id}/events?tokens=true&after=0", server.base));
    let again = blocks(&again.bearer_auth(&admin).send().await.unwrap().text().await.unwrap());
    assert_eq!(again, without[1..].to_vec());
    server.shutdown().await;
}
