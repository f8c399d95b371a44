//! Run tags: given at the start, kept on the run and its forks, shown in the run and the
//! listing, found by `?tag=` (whole tags, in the caller's namespace only), checked with an
//! error that names the tag; and an experiment's population drawn by tag.

use std::time::Duration;

use serde_json::{Value, json};

use crate::{THREE_SETS, TestServer};

fn ids(page: &Value) -> Vec<&str> {
    page["runs"].as_array().unwrap().iter().map(|r| r["run_id"].as_str().unwrap()).collect()
}

#[tokio::test]
async fn a_run_keeps_its_tags_and_is_found_by_each_of_them() {
    let server = TestServer::start().await;
    let admin = server.key("acme", "ann", &["admin", "operator"]).await;
    let other = server.key("globex", "gil", &["admin", "operator"]).await;
    server.register(&admin, THREE_SETS).await;
    server.register(&other, THREE_SETS).await;
    let start = |key: &str, tags: Value| {
        let body = json!({ "workflow": "three", "input": 1, "wait_seconds": 5, "tags": tags });
        let key = key.to_owned();
        let server = &server;
        async move { server.post(&key, "/v1/runs", body).await }
    };
    let (status, prod) = start(&admin, json!(["env:prod", "customer-42"])).await;
    assert_eq!((status, &prod["tags"]), (201, &json!(["env:prod", "customer-42"])), "{prod}");
    let prod_id = prod["run_id"].as_str().unwrap();
    let (_, eu) = start(&admin, json!(["env:prod-eu"])).await;
    let (_, plain) = start(&admin, json!([])).await;
    assert_eq!(plain.get("tags"), None, "no tags: the field is left out: {plain}");
    let (_, theirs) = start(&other, json!(["env:prod"])).await;
    assert_eq!(theirs["status"], "completed");

    let (_, shown) = server.get(&admin, &format!("/v1/runs/{prod_id}")).await;
    assert_eq!(shown["tags"], json!(["env:prod", "customer-42"]), "{shown}");
    let (status, page) = server.get(&admin, "/v1/runs?tag=env:prod").await;
    assert_eq!((status, ids(&page)), (200, vec![prod_id]), "whole tags, this namespace only: {page}");
    assert_eq!(page["runs"][0]["tags"], json!(["env:prod", "customer-42"]), "the listing shows them");
    assert_eq!(ids(&server.get(&admin, "/v1/runs?tag=customer-42&workflow=three").await.1), vec![prod_id]);
    assert_eq!(ids(&server.get(&admin, "/v1/runs?tag=env:prod-eu").await.1), vec![eu["run_id"].as_str().unwrap()]);
    assert!(ids(&server.get(&admin, "/v1/runs?tag=env").await.1).is_empty());

    // A fork keeps its run's tags.
    let (status, forked) = server.post(&admin, &format!("/v1/runs/{prod_id}/fork"), json!({ "at": "b" })).await;
    assert_eq!((status, &forked["tags"]), (201, &json!(["env:prod", "customer-42"])), "{forked}");
    assert_eq!(ids(&server.get(&admin, "/v1/runs?tag=customer-42").await.1).len(), 2);

    // Refused, with the tag and the reason; nothing is started.
    let before = ids(&server.get(&admin, "/v1/runs?limit=100").await.1).len();
    let many: Vec<String> = (0..17).map(|n| format!("t{n}")).collect();
    for (tags, says) in [
        (json!(["has space"]), "tags[0]: \"has space\" has ' '"),
        (json!(["ok", ""]), "tags[1]: a tag is 1 to 64 characters"),
        (json!(["a", "a"]), "tags[1]: \"a\" is given twice"),
        (json!(["x".repeat(65)]), "tags[0]: a tag is 1 to 64 characters"),
        (json!(many), "a run has at most 16 tags; 17 were given"),
    ] {
        let (status, refused) = start(&admin, tags.clone()).await;
        assert_eq!((status, refused["code"].as_str()), (400, Some("bad_request")), "{tags}: {refused}");
        assert!(refused["detail"].as_str().unwrap().contains(says), "{tags}: {refused}");
    }
    let (status, refused) = start(&admin, json!("env:prod")).await;
    assert_eq!(status, 422, "a list, not a string: {refused}");
    assert_eq!(ids(&server.get(&admin, "/v1/runs?limit=100").await.1).len(), before, "none was started");
    for bad in ["", "a%20b", "%C3%A9t%C3%A9"] {
        let (status, refused) = server.get(&admin, &format!("/v1/runs?tag={bad}")).await;
        assert_eq!(status, 400, "tag={bad}: {refused}");
    }
    server.shutdown().await;
}

#[tokio::test]
async fn an_experiment_takes_the_runs_with_a_tag() {
    let server = TestServer::start().await;
    let admin = server.key("acme", "ann", &["admin", "operator"]).await;
    server.register(&admin, THREE_SETS).await;
    let mut canary = Vec::new();
    for n in 0..5 {
        let tags = if n % 2 == 0 { json!(["canary"]) } else { json!([]) };
        let body = json!({ "workflow": "three", "input": n, "wait_seconds": 5, "tags": tags });
        let (_, run) = server.post(&admin, "/v1/runs", body).await;
        if n % 2 == 0 {
            canary.push(run["run_id"].as_str().unwrap().to_owned());
        }
    }
    let spec = json!({ "experiment": "canaries", "runs": { "workflow": "three", "tag": "canary" } });
    let (status, started) = server.post(&admin, "/v1/experiments", spec).await;
    assert_eq!((status, &started["runs"]), (202, &json!(3)), "{started}");
    let id = started["id"].as_str().unwrap();
    let mut shown = Value::Null;
    for _ in 0..200 {
        shown = server.get(&admin, &format!("/v1/experiments/{id}")).await.1;
        if shown["status"] == "completed" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(shown["spec"]["runs"]["ids"], json!(canary), "the tagged runs, oldest first: {shown}");
    assert_eq!(shown["report"]["totals"]["unchanged"], json!(3), "{shown}");
    let bad = json!({ "experiment": "x", "runs": { "workflow": "three", "tag": "no good" } });
    let (status, refused) = server.post(&admin, "/v1/experiments", bad).await;
    assert_eq!((status, refused["code"].as_str()), (422, Some("bad_input")), "{refused}");
    assert!(refused["detail"].as_str().unwrap().contains("`runs.tag`"), "{refused}");
    server.shutdown().await;
}
