//! `/v1/schedules`: a registered workflow's schedules kept in the key's namespace, run by
//! the server's worker (each tick once), shown with their ticks, paused and resumed,
//! triggered, deleted; roles and namespaces hold.

use std::time::Duration;

use serde_json::{Value, json};

use crate::TestServer;

const TICKING: &str = "workflow: ticking\nschedules:\n  each-second: { every: 1s, overlap: allow_all, input: { at: \"{{ tick.at }}\" } }\n  nightly: { cron: \"0 3 * * *\", timezone: America/New_York }\nsteps:\n  - id: note\n    set: \"{{ input.at }}\"\n";

async fn delete(server: &TestServer, key: &str, path: &str) -> u16 {
    server.http.delete(format!("{}{path}", server.base)).bearer_auth(key).send().await.unwrap().status().as_u16()
}

#[tokio::test]
async fn schedules_are_kept_run_shown_paused_triggered_and_deleted_through_the_api() {
    let server = TestServer::start().await;
    let admin = server.key("acme", "ann", &["admin", "operator"]).await;
    let viewer = server.key("acme", "vic", &["viewer"]).await;
    let other = server.key("globex", "gil", &["admin", "operator"]).await;
    server.register(&admin, TICKING).await;

    let (status, body) = server.post(&viewer, "/v1/schedules", json!({ "workflow": "ticking" })).await;
    assert_eq!((status, body["code"].as_str()), (403, Some("access_denied")));
    let (status, body) = server.post(&admin, "/v1/schedules", json!({ "workflow": "nothing" })).await;
    assert_eq!(status, 404, "{body}");
    let (status, body) =
        server.post(&admin, "/v1/schedules", json!({ "workflow": "ticking", "only": ["hourly"] })).await;
    assert_eq!(status, 409, "{body}");
    assert!(body["detail"].as_str().unwrap().contains("each-second, nightly"), "{body}");
    let (status, kept) = server.post(&admin, "/v1/schedules", json!({ "workflow": "ticking" })).await;
    assert_eq!(status, 201, "{kept}");
    let names: Vec<&str> = kept.as_array().unwrap().iter().map(|s| s["schedule"].as_str().unwrap()).collect();
    assert_eq!(names, ["each-second", "nightly"]);
    assert!(kept[1]["next_fire_at"].as_i64().is_some());

    // The server's worker decides the ticks and executes their runs.
    let path = "/v1/schedules/ticking/each-second";
    let mut shown = Value::Null;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        shown = server.get(&viewer, path).await.1;
        if shown["ticks"].as_array().is_some_and(|t| t.len() >= 2) {
            break;
        }
    }
    let ticks = shown["ticks"].as_array().unwrap();
    assert!(ticks.len() >= 2, "{shown}");
    assert!(ticks.iter().all(|t| t["run_id"].is_string()), "{shown}");
    assert!(ticks[0]["at"].as_i64() > ticks[1]["at"].as_i64(), "newest first");
    assert_eq!(shown["next_fires"].as_array().unwrap().len(), 5);
    let run = ticks[0]["run_id"].as_str().unwrap();
    let (status, details) = server.get(&viewer, &format!("/v1/runs/{run}")).await;
    assert_eq!(status, 200, "the tick's run, in the namespace: {details}");
    let by = &details["started_by"];
    assert_eq!(
        (by["kind"].as_str(), by["id"].as_str()),
        (Some("schedule"), Some("schedule:ticking/each-second")),
        "{details}"
    );
    assert!(by["tick"].is_string(), "the tick that started it: {details}");
    let (_, page) = server.get(&viewer, "/v1/runs?started_by=schedule:ticking/each-second&limit=500").await;
    let listed = page["runs"].as_array().unwrap();
    assert!(listed.iter().any(|r| r["run_id"] == run), "{page}");
    assert!(listed.iter().all(|r| r["started_by"]["id"] == "schedule:ticking/each-second"), "{page}");

    // Another namespace sees none of it.
    assert_eq!(server.get(&other, "/v1/schedules").await.1, json!([]));
    assert_eq!(server.get(&other, path).await.0, 404);

    // Paused: its ticks are recorded `paused`.
    let (status, paused) = server.post(&admin, &format!("{path}/pause"), json!(null)).await;
    assert_eq!((status, &paused["paused"]), (200, &json!(true)), "{paused}");
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let shown = server.get(&viewer, path).await.1;
    assert_eq!(shown["ticks"][0]["skipped"], "paused", "{shown}");
    let (status, resumed) = server.post(&admin, &format!("{path}/resume"), json!(null)).await;
    assert_eq!((status, &resumed["paused"]), (200, &json!(false)));

    // A backfill of the paused ticks starts them, in the background.
    let paused_ticks: Vec<i64> = shown["ticks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["skipped"] == "paused")
        .map(|t| t["at"].as_i64().unwrap())
        .collect();
    let rfc3339 = |micros: i64| chrono::DateTime::<chrono::Utc>::from_timestamp_micros(micros).unwrap().to_rfc3339();
    let (first, last) = (*paused_ticks.iter().min().unwrap(), *paused_ticks.iter().max().unwrap());
    let range = json!({ "from": rfc3339(first - 1), "to": rfc3339(last), "rate": 100 });
    let (status, accepted) = server.post(&admin, &format!("{path}/backfill"), range.clone()).await;
    assert_eq!((status, accepted["ticks"].as_u64()), (202, Some(paused_ticks.len() as u64)), "{accepted}");
    let mut started = 0;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let ticks = server.get(&viewer, path).await.1["ticks"].clone();
        started = ticks
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| paused_ticks.contains(&t["at"].as_i64().unwrap()) && t["run_id"].is_string())
            .count();
        if started == paused_ticks.len() {
            break;
        }
    }
    assert_eq!(started, paused_ticks.len(), "every paused tick started");
    let (status, again) = server.post(&admin, &format!("{path}/backfill"), range).await;
    assert_eq!(
        (status, again["ticks"].as_u64(), again["already"].as_u64()),
        (202, Some(0), Some(paused_ticks.len() as u64))
    );
    let (status, _) =
        server.post(&admin, &format!("{path}/backfill"), json!({ "from": "yesterday", "to": rfc3339(last) })).await;
    assert_eq!(status, 400);
    let (status, _) = server
        .post(&admin, &format!("{path}/backfill"), json!({ "from": rfc3339(first - 1), "to": "2999-01-01T00:00:00Z" }))
        .await;
    assert_eq!(status, 400, "ticks not yet decided are the scheduler's");

    let (status, triggered) = server.post(&admin, "/v1/schedules/ticking/nightly/trigger", json!(null)).await;
    assert_eq!(status, 201, "{triggered}");
    let shown = server.get(&viewer, "/v1/schedules/ticking/nightly").await.1;
    assert_eq!(shown["ticks"][0]["run_id"], triggered["run_id"]);
    assert_eq!(shown["last_run"], triggered["run_id"]);

    assert_eq!(delete(&server, &viewer, path).await, 403);
    assert_eq!(delete(&server, &admin, path).await, 204);
    assert_eq!(delete(&server, &admin, path).await, 404);
    let listed = server.get(&viewer, "/v1/schedules").await.1;
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    server.shutdown().await;
}
