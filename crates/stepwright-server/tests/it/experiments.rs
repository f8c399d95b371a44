//! `/v1/experiments`: a change (a new source, never registered) tried on a namespace's past
//! runs by the server in the background; followed as it goes, listed, cancelled mid-way;
//! roles and namespaces hold, and nothing the runs or the registry hold changes.

use std::time::Duration;

use serde_json::{Value, json};

use crate::TestServer;

const GRADE: &str = "workflow: grade\ninput:\n  type: object\n  properties: { n: { type: integer } }\nsteps:\n  - id: label\n    set: \"n={{ input.n }}\"\n";
const SLOW: &str = "workflow: slow\ntools:\n  look:\n    command: [sh, -c, 'sleep 0.3; echo done']\n    effect: read\nsteps:\n  - id: look\n    tool: look\n";

/// Polls the experiment until `done` holds of it.
async fn until(server: &TestServer, key: &str, id: &str, done: impl Fn(&Value) -> bool) -> Value {
    let mut shown = Value::Null;
    for _ in 0..200 {
        shown = server.get(key, &format!("/v1/experiments/{id}")).await.1;
        if done(&shown) {
            return shown;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the experiment did not get there: {shown}");
}

async fn start_runs(server: &TestServer, key: &str, workflow: &str, inputs: &[Value]) -> Vec<String> {
    let mut ids = Vec::new();
    for input in inputs {
        let body = json!({ "workflow": workflow, "input": input, "wait_seconds": 10 });
        let (status, run) = server.post(key, "/v1/runs", body).await;
        assert_eq!((status, run["status"].as_str()), (201, Some("completed")), "{run}");
        ids.push(run["run_id"].as_str().unwrap().to_owned());
    }
    ids
}

#[tokio::test]
async fn an_experiment_runs_in_the_background_and_reports_what_changed() {
    let server = TestServer::start().await;
    let admin = server.key("acme", "ann", &["admin", "operator"]).await;
    let viewer = server.key("acme", "vic", &["viewer"]).await;
    let other = server.key("globex", "gil", &["admin", "operator"]).await;
    server.register(&admin, GRADE).await;
    let inputs: Vec<Value> = (0..6).map(|n| json!({ "n": n })).collect();
    let runs = start_runs(&server, &admin, "grade", &inputs).await;
    let runs_before = server.get(&admin, "/v1/runs?limit=100").await.1;
    let workflows_before = server.get(&admin, "/v1/workflows/grade").await.1;

    // Odd inputs get another label: three runs change, and `compare` calls them regressions.
    let changed =
        GRADE.replace("set: \"n={{ input.n }}\"", "set: \"{{ 'odd' if input.n % 2 == 1 else 'n=' ~ input.n }}\"");
    let spec = json!({
        "experiment": "labels",
        "runs": { "workflow": "grade" },
        "change": { "source": changed },
        "evaluators": [{ "name": "same-label", "compare": "new == old" }],
    });
    let (status, refused) = server.post(&viewer, "/v1/experiments", spec.clone()).await;
    assert_eq!((status, refused["code"].as_str()), (403, Some("access_denied")), "{refused}");
    let (status, started) = server.post(&admin, "/v1/experiments", spec.clone()).await;
    assert_eq!(status, 202, "{started}");
    assert_eq!(
        (&started["experiment"], &started["workflow"], &started["runs"]),
        (&json!("labels"), &json!("grade"), &json!(6))
    );
    let id = started["id"].as_str().unwrap().to_owned();

    let shown = until(&server, &viewer, &id, |e| e["status"] == "completed").await;
    let totals = &shown["report"]["totals"];
    assert_eq!(
        (&totals["runs"], &totals["changed"], &totals["unchanged"], &totals["regressed"]),
        (&json!(6), &json!(3), &json!(3), &json!(3)),
        "{shown}"
    );
    assert_eq!(shown["recomputed"], json!(6));
    assert_eq!(shown["spec"]["runs"]["ids"], json!(runs), "the population, fixed by id, oldest first");
    let regressed: Vec<&str> = shown["report"]["runs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["verdict"] == "regressed")
        .map(|r| r["run"].as_str().unwrap())
        .collect();
    assert_eq!(regressed, [runs[1].as_str(), runs[3].as_str(), runs[5].as_str()]);
    let first = &shown["report"]["runs"][1];
    let diff = first["diff"].as_array().unwrap();
    assert!(diff.len() == 1 && diff[0].as_str().unwrap().contains("\"n=1\" → \"odd\""), "{first}");
    assert_eq!(shown["report"]["look_first"].as_array().unwrap().len(), 3);

    // Listed in its namespace only; another namespace neither sees nor stops it.
    let (status, listed) = server.get(&viewer, "/v1/experiments").await;
    assert_eq!((status, &listed[0]["id"], &listed[0]["status"]), (200, &json!(id), &json!("completed")));
    assert_eq!(server.get(&other, "/v1/experiments").await.1, json!([]));
    assert_eq!(server.get(&other, &format!("/v1/experiments/{id}")).await.0, 404);
    assert_eq!(server.post(&other, &format!("/v1/experiments/{id}/cancel"), json!({})).await.0, 404);
    let (status, ended) = server.post(&admin, &format!("/v1/experiments/{id}/cancel"), json!({})).await;
    assert_eq!((status, ended["code"].as_str()), (409, Some("experiment_ended")), "{ended}");
    assert_eq!(server.post(&admin, &format!("/v1/experiments/{id}/resume"), json!({})).await.0, 409);

    // Nothing the runs or the registry hold changed: no run was started, no version registered.
    assert_eq!(server.get(&admin, "/v1/runs?limit=100").await.1, runs_before);
    assert_eq!(server.get(&admin, "/v1/workflows/grade").await.1, workflows_before);

    // Bad specs are refused before anything runs, with what to change.
    for (bad, says) in [
        (
            json!({ "experiment": "x", "runs": { "workflow": "grade" }, "change": { "file": "v2.yaml" } }),
            "send the file's text as `change.source`",
        ),
        (
            json!({ "experiment": "x", "runs": { "workflow": "grade" }, "change": { "version": 9 } }),
            "no workflow \"grade\" version 9",
        ),
        (
            json!({ "experiment": "x", "runs": { "workflow": "grade" }, "change": { "source": "workflow: other\nsteps:\n  - { id: a, set: 1 }\n" } }),
            "is workflow \"other\"",
        ),
        (
            // The caller would choose where the server sends its provider key.
            json!({ "experiment": "x", "runs": { "workflow": "grade" }, "change": { "models": { "smart": "openai:m@http://10.0.0.1/v1" } } }),
            "`change.rebind` it to a binding the definition has",
        ),
        (
            json!({ "experiment": "x", "runs": { "workflow": "grade" }, "change": { "models": { "smart": "nonsense" } } }),
            "`change.models.smart`",
        ),
        (json!({ "experiment": "x", "runs": { "workflow": "grade" }, "colour": "red" }), "colour"),
        // Serde's derive alone reads a struct from an array of its fields' values.
        (json!({ "experiment": "x", "runs": { "workflow": "grade" }, "change": [null, null] }), "expected an object"),
        (json!({ "experiment": "x", "runs": ["grade"] }), "expected an object"),
        (json!(["x", { "workflow": "grade" }]), "not a JSON object"),
        (
            json!({ "experiment": "x", "runs": { "workflow": "grade", "ids": [runs[0]] }, "concurrency": 0 }),
            "between 1 and 64",
        ),
    ] {
        let (status, body) = server.post(&admin, "/v1/experiments", bad).await;
        assert_eq!(status, 422, "{body}");
        assert!(body["detail"].as_str().unwrap().contains(says), "{says}: {body}");
    }
    let (status, body) = server
        .post(
            &other,
            "/v1/experiments",
            json!({ "experiment": "x", "runs": { "workflow": "grade", "ids": [runs[0]] } }),
        )
        .await;
    assert_eq!(status, 422, "another namespace's run is named as if it did not exist: {body}");
    assert!(body["detail"].as_str().unwrap().contains("does not exist"), "{body}");
    server.shutdown().await;
}

#[tokio::test]
async fn an_experiment_is_cancelled_mid_way_over_the_api() {
    let server = TestServer::start().await;
    let admin = server.key("acme", "ann", &["admin", "operator"]).await;
    server.register(&admin, SLOW).await;
    start_runs(&server, &admin, "slow", &vec![json!({}); 8]).await;
    let spec = json!({ "experiment": "again", "runs": { "workflow": "slow" }, "concurrency": 1 });
    let (status, started) = server.post(&admin, "/v1/experiments", spec).await;
    assert_eq!(status, 202, "{started}");
    let id = started["id"].as_str().unwrap().to_owned();
    let so_far = until(&server, &admin, &id, |e| e["recomputed"].as_u64() >= Some(2)).await;
    assert_eq!((&so_far["status"], &so_far["report"]["status"]), (&json!("running"), &json!("running")), "{so_far}");
    let (status, busy) = server.post(&admin, &format!("/v1/experiments/{id}/resume"), json!({})).await;
    assert_eq!((status, busy["code"].as_str()), (409, Some("already_running")), "{busy}");

    let (status, cancelled) = server.post(&admin, &format!("/v1/experiments/{id}/cancel"), json!({})).await;
    assert_eq!((status, &cancelled["status"]), (200, &json!("cancelled")), "{cancelled}");
    // The runs under way when it was cancelled finish and are kept; then nothing more starts.
    let path = format!("/v1/experiments/{id}");
    let mut later = until(&server, &admin, &id, |e| e["report"]["status"] == "cancelled").await;
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(800)).await;
        let now = server.get(&admin, &path).await.1;
        if now["recomputed"] == later["recomputed"] {
            break;
        }
        later = now;
    }
    let recomputed = later["recomputed"].as_u64().unwrap();
    assert!((2..8).contains(&recomputed), "stopped mid-way: {later}");
    assert_eq!(later["report"]["totals"]["skipped"].as_u64(), Some(8 - recomputed));
    let (status, body) = server.post(&admin, &format!("/v1/experiments/{id}/resume"), json!({})).await;
    assert_eq!((status, body["code"].as_str()), (409, Some("experiment_ended")), "{body}");
    server.shutdown().await;
}

/// New inputs over the API: sent whole (a server reads no file of its callers), each tried
/// with the workflow as its newest run ran it and with the change, in the background.
#[tokio::test]
async fn an_experiment_tries_new_inputs_sent_with_it() {
    let server = TestServer::start().await;
    let admin = server.key("acme", "ann", &["admin", "operator"]).await;
    server.register(&admin, GRADE).await;
    start_runs(&server, &admin, "grade", &[json!({ "n": 0 })]).await;
    let runs_before = server.get(&admin, "/v1/runs?limit=100").await.1;
    let changed =
        GRADE.replace("set: \"n={{ input.n }}\"", "set: \"{{ 'odd' if input.n % 2 == 1 else 'n=' ~ input.n }}\"");
    let spec = json!({
        "experiment": "new numbers",
        "runs": { "workflow": "grade", "inputs": [{ "n": 41 }, { "n": 42 }, { "n": 43 }] },
        "change": { "source": changed },
    });
    let (status, started) = server.post(&admin, "/v1/experiments", spec).await;
    assert_eq!((status, &started["runs"]), (202, &json!(3)), "{started}");
    let id = started["id"].as_str().unwrap().to_owned();
    let shown = until(&server, &admin, &id, |e| e["status"] == "completed").await;
    let runs = shown["report"]["runs"].as_array().unwrap();
    let seen: Vec<(u64, bool, Value)> = runs
        .iter()
        .map(|r| (r["fresh"]["line"].as_u64().unwrap(), r["changed"].as_bool().unwrap(), r["diff"].clone()))
        .collect();
    assert_eq!(
        seen,
        [(1, true, json!([r#"/: "n=41" → "odd""#])), (2, false, json!([])), (3, true, json!([r#"/: "n=43" → "odd""#]))],
        "{shown}"
    );
    assert_eq!((&shown["runs"], &shown["recomputed"]), (&json!(3), &json!(3)));
    assert_eq!(server.get(&admin, "/v1/runs?limit=100").await.1, runs_before, "no run was kept");

    // A file of inputs is the CLI's to read.
    let file = json!({ "experiment": "f", "runs": { "workflow": "grade", "inputs_file": "cases.jsonl" } });
    let (status, refused) = server.post(&admin, "/v1/experiments", file).await;
    assert_eq!(status, 422, "{refused}");
    assert!(refused["detail"].as_str().unwrap().contains("send the inputs as `runs.inputs`"), "{refused}");
}
