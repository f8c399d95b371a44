//! Keys, namespaces, roles, registration, runs, decisions, idempotency and limits.

use std::collections::BTreeMap;

use serde_json::json;

use crate::{APPROVAL, THREE_SETS, TestServer, answer};

#[tokio::test]
async fn health_and_the_document_need_no_key_and_everything_else_does() {
    let server = TestServer::start().await;
    let health = server.http.get(format!("{}/v1/health", server.base)).send().await.unwrap();
    assert_eq!(answer(health).await, (200, json!({ "status": "ok", "protocols": { "worker": [1] } })));
    let document = server.http.get(format!("{}/v1/openapi.json", server.base)).send().await.unwrap();
    assert_eq!(document.status(), 200);
    let nobody = server.http.get(format!("{}/v1/runs", server.base)).send().await.unwrap();
    let (status, body) = answer(nobody).await;
    assert_eq!((status, body["code"].as_str()), (401, Some("unauthorized")));
    let (status, body) = server.get("sw_swk000000000000_nonsense", "/v1/runs").await;
    assert_eq!((status, body["detail"].as_str()), (401, Some("unknown API key")));
    server.shutdown().await;
}

#[tokio::test]
async fn revoked_and_expired_keys_are_refused() {
    let server = TestServer::start().await;
    let now = stepwright_core::Timestamp::from_micros(0);
    let roles = vec!["viewer".to_owned()];
    let revoked = stepwright_server::create_key(server.store.as_ref(), "acme", "ann", &roles, None, now).await.unwrap();
    assert_eq!(server.get(&revoked.secret, "/v1/runs").await.0, 200);
    assert!(server.store.revoke_key(&revoked.key.id, now).await.unwrap());
    // A server trusts a key it read for a few seconds; a fresh server reads it again.
    let fresh = TestServer::start().await;
    let moved =
        stepwright_server::create_key(fresh.store.as_ref(), "acme", "bob", &roles, Some(now), now).await.unwrap();
    let (status, body) = fresh.get(&moved.secret, "/v1/runs").await;
    assert_eq!(status, 401);
    assert!(body["detail"].as_str().unwrap().contains("expired"), "{body}");
    let again = stepwright_server::create_key(fresh.store.as_ref(), "acme", "cy", &roles, None, now).await.unwrap();
    fresh.store.revoke_key(&again.key.id, now).await.unwrap();
    let (status, body) = fresh.get(&again.secret, "/v1/runs").await;
    assert_eq!(status, 401);
    assert!(body["detail"].as_str().unwrap().contains("revoked"), "{body}");
    assert!(
        stepwright_server::create_key(fresh.store.as_ref(), "acme", "dee", &["owner".to_owned()], None, now)
            .await
            .is_err(),
        "an unknown role is refused"
    );
    server.shutdown().await;
    fresh.shutdown().await;
}

#[tokio::test]
async fn registration_validates_versions_and_needs_admin() {
    let server = TestServer::start().await;
    let admin = server.key("acme", "ann", &["admin"]).await;
    let viewer = server.key("acme", "vic", &["viewer"]).await;
    let (status, body) = server.post(&viewer, "/v1/workflows", json!({ "source": THREE_SETS })).await;
    assert_eq!((status, body["code"].as_str()), (403, Some("access_denied")));
    let first = server.register(&admin, THREE_SETS).await;
    assert_eq!((first["name"].as_str(), first["version"].as_u64()), (Some("three"), Some(1)));
    let (status, again) = server.post(&admin, "/v1/workflows", json!({ "source": THREE_SETS })).await;
    assert_eq!((status, again["version"].as_u64()), (200, Some(1)), "the same source keeps its version");
    let changed = THREE_SETS.replace("id: c", "id: d");
    let (status, second) = server.post(&admin, "/v1/workflows", json!({ "source": changed })).await;
    assert_eq!((status, second["version"].as_u64()), (201, Some(2)));

    // Every problem of a file that does not load, at its line and column.
    let broken = "workflow: bad\nsteps:\n  - id: a\n    set: \"{{ input.\"\n  - id: b\n    nonsense: 1\n";
    let (status, problem) = server.post(&admin, "/v1/workflows", json!({ "source": broken })).await;
    assert_eq!((status, problem["code"].as_str()), (422, Some("invalid_workflow")));
    let problems: Vec<&str> = problem["problems"].as_array().unwrap().iter().filter_map(|p| p.as_str()).collect();
    assert!(problems.len() >= 2 && problems.iter().all(|p| p.starts_with("workflow.yaml:")), "{problems:?}");
    // Unknown fields in the body are errors, as in the file format.
    let (status, problem) = server.post(&admin, "/v1/workflows", json!({ "source": THREE_SETS, "sorce": 1 })).await;
    assert_eq!(status, 422);
    assert!(problem["detail"].as_str().unwrap().contains("sorce"), "{problem}");

    // Called files come with the workflow.
    let caller = "workflow: outer\nsteps:\n  - id: call\n    workflow: parts/inner.yaml\n    with: \"{{ input }}\"\n";
    let files = BTreeMap::from([(
        "parts/inner.yaml",
        "workflow: inner\nsteps:\n  - id: twice\n    set: \"{{ input * 2 }}\"\n",
    )]);
    let (status, body) = server.post(&admin, "/v1/workflows", json!({ "source": caller, "files": files })).await;
    assert_eq!(status, 201, "{body}");
    let operator = server.key("acme", "op", &["operator"]).await;
    let (status, run) =
        server.post(&operator, "/v1/runs", json!({ "workflow": "outer", "input": 21, "wait_seconds": 10 })).await;
    assert_eq!((status, run["status"].as_str(), &run["output"]), (201, Some("completed"), &json!(42)), "{run}");

    let (status, listed) = server.get(&viewer, "/v1/workflows").await;
    assert_eq!(status, 200);
    assert_eq!(
        listed,
        json!([
            { "name": "outer", "latest_version": 1, "versions": 1 },
            { "name": "three", "latest_version": 2, "versions": 2 },
        ])
    );
    let (status, shown) = server.get(&viewer, "/v1/workflows/three").await;
    assert_eq!(status, 200);
    assert_eq!(shown["versions"].as_array().unwrap().len(), 2);
    assert_eq!(shown["versions"][0]["version"], 2);
    assert!(shown["graph"].is_object());
    assert_eq!(shown["input_schema"], json!(null), "three declares no input schema");
    // The graph is the typed outline, a called workflow's steps under its call.
    let (_, outer) = server.get(&viewer, "/v1/workflows/outer").await;
    let outline: stepwright_api::workflow::Outline = serde_json::from_value(outer["graph"].clone()).unwrap();
    let call = &outline.steps[0];
    assert_eq!((call.kind.as_str(), call.label.as_str()), ("workflow", "workflow inner"));
    assert_eq!(call.layout, stepwright_api::workflow::OutlineLayout::Boxed);
    let inner = &call.groups[0].steps[0];
    assert_eq!(
        (inner.id.as_str(), inner.kind.as_str(), &inner.layout),
        ("twice", "set", &stepwright_api::workflow::OutlineLayout::Step)
    );
    server.register(&admin, crate::APPROVAL).await;
    let (_, greet) = server.get(&viewer, "/v1/workflows/greet").await;
    assert_eq!(greet["input_schema"]["required"], json!(["name"]), "{greet}");
    let (status, _) = server.get(&viewer, "/v1/workflows/nope").await;
    assert_eq!(status, 404);
    // Another namespace sees none of it.
    let stranger = server.key("globex", "gus", &["admin"]).await;
    assert_eq!(server.get(&stranger, "/v1/workflows").await, (200, json!([])));
    let (status, body) = server.post(&stranger, "/v1/runs", json!({ "workflow": "three", "input": 1 })).await;
    assert_eq!((status, body["code"].as_str()), (404, Some("workflow_not_found")));
    server.shutdown().await;
}

#[tokio::test]
async fn starting_picks_the_newest_version_unless_one_is_named_and_waits_as_asked() {
    let server = TestServer::start().await;
    let admin = server.key("acme", "ann", &["admin"]).await;
    server.register(&admin, THREE_SETS).await;
    server.register(&admin, &THREE_SETS.replace("{{ steps.b.output }}", "{{ steps.b.output ~ '-v2' }}")).await;
    let (status, newest) =
        server.post(&admin, "/v1/runs", json!({ "workflow": "three", "input": "x", "wait_seconds": 10 })).await;
    assert_eq!((status, &newest["output"]), (201, &json!("x-v2")), "{newest}");
    let (_, named) = server
        .post(&admin, "/v1/runs", json!({ "workflow": "three", "version": 1, "input": "x", "wait_seconds": 10 }))
        .await;
    assert_eq!(named["output"], json!("x"));
    assert_eq!(named["steps"].as_array().unwrap().len(), 3, "{named}");
    // Without waiting: 202 and the run as it stands; it completes on its own.
    let (status, started) = server.post(&admin, "/v1/runs", json!({ "workflow": "three", "input": "y" })).await;
    assert!(status == 202 || status == 201, "{status}");
    let id = started["run_id"].as_str().unwrap().to_owned();
    let mut done = json!(null);
    for _ in 0..200 {
        let (_, run) = server.get(&admin, &format!("/v1/runs/{id}")).await;
        if run["status"] == "completed" {
            done = run;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(done["output"], json!("y-v2"), "{done}");
    // Bad input is the caller's: the workflow's schema, a bad wait.
    let (status, body) = server.post(&admin, "/v1/runs", json!({ "workflow": "three", "wait_seconds": -1 })).await;
    assert_eq!((status, body["code"].as_str()), (400, Some("bad_request")));
    server.register(&admin, APPROVAL).await;
    let (status, body) = server.post(&admin, "/v1/runs", json!({ "workflow": "greet", "input": { "nom": 1 } })).await;
    assert_eq!((status, body["code"].as_str()), (422, Some("invalid_input")), "{body}");
    server.shutdown().await;
}

#[tokio::test]
async fn a_run_of_another_namespace_is_not_found_and_roles_are_enforced() {
    let server = TestServer::start().await;
    let admin = server.key("acme", "ann", &["admin"]).await;
    let operator = server.key("acme", "op", &["operator"]).await;
    let approver = server.key("acme", "lee", &["approver"]).await;
    let viewer = server.key("acme", "vic", &["viewer"]).await;
    let stranger = server.key("globex", "gus", &["admin", "approver", "operator"]).await;
    server.register(&admin, APPROVAL).await;
    let (status, _) = server.post(&viewer, "/v1/runs", json!({ "workflow": "greet", "input": { "name": "A" } })).await;
    assert_eq!(status, 403, "a viewer does not start runs");
    let (status, run) = server
        .post(&operator, "/v1/runs", json!({ "workflow": "greet", "input": { "name": "Ada" }, "wait_seconds": 10 }))
        .await;
    assert_eq!((status, run["status"].as_str()), (201, Some("suspended")), "{run}");
    let id = run["run_id"].as_str().unwrap();

    // The other namespace: 404 for the run, its events, its interrupts; nothing in lists.
    for path in [format!("/v1/runs/{id}"), format!("/v1/runs/{id}/events")] {
        let (status, body) = server.get(&stranger, &path).await;
        assert_eq!((status, body["code"].as_str()), (404, Some("not_found")), "{path}");
    }
    assert_eq!(server.get(&stranger, "/v1/interrupts").await, (200, json!([])));
    assert_eq!(server.get(&stranger, "/v1/runs").await.1["runs"], json!([]));
    let (status, _) = server.post(&stranger, &format!("/v1/runs/{id}/cancel"), json!({})).await;
    assert_eq!(status, 404);

    // The inbox: only keys that may decide see the interrupt.
    assert_eq!(server.get(&viewer, "/v1/interrupts").await, (200, json!([])));
    let (_, inbox) = server.get(&approver, "/v1/interrupts?status=open").await;
    assert_eq!(inbox.as_array().unwrap().len(), 1, "{inbox}");
    let item = &inbox[0];
    assert_eq!(
        (item["run_id"].as_str(), item["kind"].as_str(), item["payload"].as_str()),
        (Some(id), Some("approval"), Some("Hello, Ada"))
    );
    let decision = format!("/v1/interrupts/{}/decision", item["id"].as_str().unwrap());
    let (status, body) = server.post(&stranger, &decision, json!({ "decision": "approve" })).await;
    assert_eq!((status, body["code"].as_str()), (404, Some("not_found")), "another namespace cannot even see it");
    let (status, body) = server.post(&operator, &decision, json!({ "decision": "approve" })).await;
    assert_eq!((status, body["code"].as_str()), (403, Some("access_denied")), "no approver role");
    // A body cannot claim another identity: there is no field for it.
    let (status, _) = server.post(&approver, &decision, json!({ "decision": "approve", "user": "boss" })).await;
    assert_eq!(status, 422);
    let (status, body) = server.post(&approver, &decision, json!({ "decision": "respond", "value": 1 })).await;
    assert_eq!((status, body["code"].as_str()), (422, Some("invalid_decision")), "{body}");
    let (status, decided) = server.post(&approver, &decision, json!({ "decision": "approve" })).await;
    assert_eq!((status, decided["decided_by"].as_str()), (200, Some("lee")), "{decided}");
    let done = wait_for_status(&server, &viewer, id, "completed").await;
    assert_eq!(done["output"], json!("Hello, Ada!"));
    // The decision and who took it are in the audit log.
    let log = server.store.audit_entries("acme", 10).await.unwrap();
    assert!(log.iter().any(|e| e.action == "interrupt.decided" && e.actor.starts_with("lee")), "{log:?}");
    server.shutdown().await;
}

#[tokio::test]
async fn two_racing_decisions_give_one_200_and_one_409() {
    let server = TestServer::start().await;
    let admin = server.key("acme", "ann", &["admin", "operator"]).await;
    let first = server.key("acme", "lee", &["approver"]).await;
    let second = server.key("acme", "kim", &["approver"]).await;
    server.register(&admin, APPROVAL).await;
    for round in 0..5 {
        let (_, run) = server
            .post(&admin, "/v1/runs", json!({ "workflow": "greet", "input": { "name": "A" }, "wait_seconds": 10 }))
            .await;
        let id = run["run_id"].as_str().unwrap();
        let interrupt = run["pending"][0]["id"].as_str().unwrap();
        let path = format!("/v1/interrupts/{id}.{interrupt}/decision");
        let (a, b) = tokio::join!(
            server.post(&first, &path, json!({ "decision": "approve" })),
            server.post(&second, &path, json!({ "decision": "reject", "reason": "no" })),
        );
        let mut statuses = [a.0, b.0];
        statuses.sort_unstable();
        assert_eq!(statuses, [200, 409], "round {round}: {a:?} {b:?}");
        let loser = if a.0 == 409 { &a.1 } else { &b.1 };
        assert_eq!(loser["code"], "already_resolved");
    }
    server.shutdown().await;
}

#[tokio::test]
async fn racing_starts_with_one_idempotency_key_make_one_run() {
    let server = TestServer::start().await;
    let admin = server.key("acme", "ann", &["admin", "operator"]).await;
    let other = server.key("globex", "gus", &["admin", "operator"]).await;
    server.register(&admin, THREE_SETS).await;
    server.register(&other, THREE_SETS).await;
    for round in 0..5 {
        let key = format!("order-{round}");
        let body = json!({ "workflow": "three", "input": round, "idempotency_key": key, "wait_seconds": 5 });
        let (a, b, c) = tokio::join!(
            server.post(&admin, "/v1/runs", body.clone()),
            server.post(&admin, "/v1/runs", body.clone()),
            server.post(&admin, "/v1/runs", body.clone()),
        );
        let ids: std::collections::BTreeSet<&str> =
            [&a.1, &b.1, &c.1].iter().map(|r| r["run_id"].as_str().unwrap()).collect();
        assert_eq!(ids.len(), 1, "round {round}: one run for one key: {a:?} {b:?} {c:?}");
        let mut statuses = [a.0, b.0, c.0];
        statuses.sort_unstable();
        assert_eq!(statuses, [200, 200, 201], "round {round}");
        // The key is the namespace's: another namespace's same key starts its own run.
        let (status, theirs) = server.post(&other, "/v1/runs", body).await;
        assert_eq!(status, 201);
        assert!(!ids.contains(theirs["run_id"].as_str().unwrap()));
    }
    let (_, page) = server.get(&admin, "/v1/runs?limit=100").await;
    assert_eq!(page["runs"].as_array().unwrap().len(), 5, "{page}");
    server.shutdown().await;
}

#[tokio::test]
async fn refused_input_claims_no_idempotency_key() {
    let server = TestServer::start().await;
    let admin = server.key("acme", "ann", &["admin", "operator"]).await;
    server.register(&admin, APPROVAL).await;
    let bad = json!({ "workflow": "greet", "input": { "name": 7 }, "idempotency_key": "k-1" });
    let (status, problem) = server.post(&admin, "/v1/runs", bad).await;
    assert_eq!((status, problem["code"].as_str()), (422, Some("invalid_input")), "{problem}");
    // The same request fixed is a first request: a run at once, not `409` for seconds.
    let good = json!({ "workflow": "greet", "input": { "name": "Ada" }, "idempotency_key": "k-1", "wait_seconds": 5 });
    let (status, run) = server.post(&admin, "/v1/runs", good.clone()).await;
    assert_eq!(status, 201, "{run}");
    let (again, same) = server.post(&admin, "/v1/runs", good).await;
    assert_eq!((again, &same["run_id"]), (200, &run["run_id"]));
    server.shutdown().await;
}

#[tokio::test]
async fn listing_pages_by_cursor_and_filters() {
    let server = TestServer::start().await;
    let admin = server.key("acme", "ann", &["admin", "operator"]).await;
    server.register(&admin, THREE_SETS).await;
    let mut started = Vec::new();
    for n in 0..5 {
        let (_, run) =
            server.post(&admin, "/v1/runs", json!({ "workflow": "three", "input": n, "wait_seconds": 5 })).await;
        started.push(run["run_id"].as_str().unwrap().to_owned());
    }
    let mut seen = Vec::new();
    let mut path = "/v1/runs?limit=2&status=completed&workflow=three".to_owned();
    loop {
        let (status, page) = server.get(&admin, &path).await;
        assert_eq!(status, 200, "{page}");
        seen.extend(page["runs"].as_array().unwrap().iter().map(|r| r["run_id"].as_str().unwrap().to_owned()));
        match page["next_cursor"].as_str() {
            Some(cursor) => path = format!("/v1/runs?limit=2&status=completed&workflow=three&cursor={cursor}"),
            None => break,
        }
    }
    started.reverse();
    assert_eq!(seen, started, "newest first, each once");
    assert_eq!(server.get(&admin, "/v1/runs?workflow=other").await.1["runs"], json!([]));
    assert_eq!(server.get(&admin, "/v1/runs?limit=0").await.0, 400);
    assert_eq!(server.get(&admin, "/v1/runs?status=bogus").await.0, 400);
    assert_eq!(server.get(&admin, "/v1/runs?cursor=nope").await.0, 400);
    assert_eq!(server.get(&admin, "/v1/runs?colour=red").await.0, 400, "unknown parameters are errors");

    // Text in the input, and creation time, with the rest.
    let (_, invoice) = server
        .post(
            &admin,
            "/v1/runs",
            json!({ "workflow": "three", "input": { "about": "Invoice 1042" }, "wait_seconds": 5 }),
        )
        .await;
    let ids = |page: &serde_json::Value| {
        page["runs"].as_array().unwrap().iter().map(|r| r["run_id"].clone()).collect::<Vec<_>>()
    };
    let (status, found) = server.get(&admin, "/v1/runs?input_contains=invoice%201042&status=completed").await;
    assert_eq!((status, ids(&found)), (200, vec![invoice["run_id"].clone()]), "{found}");
    assert_eq!(
        ids(&server.get(&admin, "/v1/runs?input_contains=invoice%201043").await.1),
        Vec::<serde_json::Value>::new()
    );
    assert_eq!(server.get(&admin, "/v1/runs?input_contains=").await.0, 400);
    let (_, shown) = server.get(&admin, &format!("/v1/runs/{}", invoice["run_id"].as_str().unwrap())).await;
    let created = shown["created_at"].as_i64().expect("a stored run says when it was created");
    let (_, older) = server.get(&admin, &format!("/v1/runs?created_before={created}")).await;
    assert_eq!(ids(&older).len(), 5, "the five before it");
    let (_, newer) = server.get(&admin, &format!("/v1/runs?created_after={created}")).await;
    assert_eq!(ids(&newer), vec![invoice["run_id"].clone()]);
    assert_eq!(server.get(&admin, "/v1/runs?created_after=soon").await.0, 400);

    // Lineage: the runs forked from a run.
    let invoice_id = invoice["run_id"].as_str().unwrap();
    let (status, forked) = server.post(&admin, &format!("/v1/runs/{invoice_id}/fork"), json!({ "at": "b" })).await;
    assert_eq!(status, 201, "{forked}");
    let (_, children) = server.get(&admin, &format!("/v1/runs?parent={invoice_id}")).await;
    assert_eq!(ids(&children), vec![forked["run_id"].clone()]);
    assert_eq!(children["runs"][0]["parent_run_id"], json!(invoice_id));
    assert_eq!(server.get(&admin, "/v1/runs?parent=nope").await.0, 400);

    // The definition a run is pinned to.
    let (status, definition) =
        server.get(&admin, &format!("/v1/runs/{}/definition", invoice["run_id"].as_str().unwrap())).await;
    assert_eq!(status, 200, "{definition}");
    let steps: Vec<&str> =
        definition["graph"]["steps"].as_array().unwrap().iter().map(|s| s["id"].as_str().unwrap()).collect();
    assert_eq!(steps, ["a", "b", "c"]);
    assert_eq!(definition["hash"].as_str().map(str::len), Some(64));
    server.shutdown().await;
}

#[tokio::test]
async fn cancel_resume_and_messages_act_on_runs() {
    let server = TestServer::start().await;
    let admin = server.key("acme", "ann", &["admin", "operator"]).await;
    let viewer = server.key("acme", "vic", &["viewer"]).await;
    server.register(&admin, APPROVAL).await;
    let (_, run) = server
        .post(&admin, "/v1/runs", json!({ "workflow": "greet", "input": { "name": "A" }, "wait_seconds": 10 }))
        .await;
    let id = run["run_id"].as_str().unwrap();
    assert_eq!(server.post(&viewer, &format!("/v1/runs/{id}/cancel"), json!({})).await.0, 403);
    let (status, cancelled) =
        server.post(&admin, &format!("/v1/runs/{id}/cancel"), json!({ "reason": "changed my mind" })).await;
    assert_eq!(
        (status, cancelled["outcome"].as_str(), cancelled["status"].as_str()),
        (200, Some("cancelled"), Some("cancelled"))
    );
    let (_, shown) = server.get(&viewer, &format!("/v1/runs/{id}")).await;
    assert_eq!(shown["status"], "cancelled");
    assert!(shown["error"]["message"].as_str().unwrap().contains("changed my mind"), "{shown}");
    let (status, again) = server.post(&admin, &format!("/v1/runs/{id}/cancel"), json!({})).await;
    assert_eq!((status, again["outcome"].as_str()), (200, Some("finished")));
    // A finished run has nothing to continue: it is answered as it ended (as `resume` does).
    let (status, body) = server.post(&admin, &format!("/v1/runs/{id}/resume"), json!({})).await;
    assert_eq!((status, body["status"].as_str()), (200, Some("cancelled")), "{body}");
    let (status, body) = server.post(&admin, &format!("/v1/runs/{id}/messages"), json!({ "inbox": "x" })).await;
    assert_eq!((status, body["code"].as_str()), (400, Some("bad_request")));
    // A name the run's workflow does not read is refused: it would be stored and never taken.
    let (status, refused) =
        server.post(&admin, &format!("/v1/runs/{id}/messages"), json!({ "inbox": "x", "message": { "hi": 1 } })).await;
    assert_eq!((status, refused["code"].as_str()), (422, Some("unknown_inbox")), "{refused}");
    assert!(refused["detail"].as_str().unwrap().contains("has no inbox `x`"), "{refused}");
    let (status, _) = server.get(&admin, "/v1/runs/not-a-run").await;
    assert_eq!(status, 404);
    let log = server.store.audit_entries("acme", 10).await.unwrap();
    assert!(log.iter().any(|e| e.action == "run.cancelled" && e.subject == id));
    // Registering is audited: what later runs of the name start with changed.
    assert!(log.iter().any(|e| e.action == "workflow.registered" && e.subject == "greet"), "{log:?}");
    server.shutdown().await;
}

#[tokio::test]
async fn limits_refuse_large_bodies_and_fast_keys_and_cors_is_off_unless_configured() {
    let server = TestServer::start_with(|config| {
        config.limits.max_body_bytes = 1024;
        config.limits.requests_per_second = 5;
    })
    .await;
    let admin = server.key("acme", "ann", &["admin"]).await;
    let big = "x".repeat(4096);
    let (status, body) = server.post(&admin, "/v1/workflows", json!({ "source": big })).await;
    assert_eq!((status, body["code"].as_str()), (413, Some("too_large")));
    let mut refused = 0;
    for _ in 0..20 {
        let (status, body) = server.get(&admin, "/v1/runs").await;
        if status == 429 {
            assert_eq!(body["code"], "rate_limited");
            refused += 1;
        }
    }
    assert!(refused > 0, "20 requests at once exceed 5 a second");
    let preflight = server
        .http
        .request(reqwest::Method::OPTIONS, format!("{}/v1/runs", server.base))
        .header("origin", "https://app.example")
        .header("access-control-request-method", "GET")
        .send()
        .await
        .unwrap();
    assert!(preflight.headers().get("access-control-allow-origin").is_none(), "no CORS unless configured");
    server.shutdown().await;

    let open = TestServer::start_with(|config| config.cors_origins = vec!["https://app.example".into()]).await;
    let preflight = open
        .http
        .request(reqwest::Method::OPTIONS, format!("{}/v1/runs", open.base))
        .header("origin", "https://app.example")
        .header("access-control-request-method", "GET")
        .send()
        .await
        .unwrap();
    assert_eq!(preflight.headers().get("access-control-allow-origin").unwrap(), "https://app.example");
    open.shutdown().await;
}

/// Polls a run until it has the status.
pub(crate) async fn wait_for_status(server: &TestServer, key: &str, run: &str, status: &str) -> serde_json::Value {
    for _ in 0..500 {
        let (_, shown) = server.get(key, &format!("/v1/runs/{run}")).await;
        if shown["status"] == status {
            return shown;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("run {run} never became {status}");
}

/// `--no-worker`: a started run is created pending and left to the workers on the store.
#[tokio::test]
async fn without_a_worker_started_runs_wait_for_one() {
    let server = TestServer::start_with(|config| config.worker = false).await;
    let admin = server.key("acme", "ann", &["admin", "operator"]).await;
    server.register(&admin, THREE_SETS).await;
    let (status, run) =
        server.post(&admin, "/v1/runs", json!({ "workflow": "three", "input": 7, "wait_seconds": 0.3 })).await;
    assert_eq!((status, run["status"].as_str()), (202, Some("pending")), "{run}");
    let id = run["run_id"].as_str().unwrap().to_owned();
    // A worker elsewhere on the same store (here, a runner over it) executes it.
    let engine = stepwright_app::engine_over(&server.store).build();
    let resolver = stepwright_app::resolver(server.store.clone(), stepwright_app::Bindings::default());
    let outcomes = stepwright_core::Runner::new(engine).resolve_with(resolver).tick().await.unwrap();
    assert_eq!(outcomes.len(), 1);
    let done = wait_for_status(&server, &admin, &id, "completed").await;
    assert_eq!(done["output"], json!(7));
    server.shutdown().await;
}

/// `priority` and `concurrency` on `POST /v1/runs` are kept with the run and obeyed by the
/// workers: of two runs in one group of one, the higher priority runs, the other waits.
#[tokio::test]
async fn start_options_set_a_runs_priority_and_concurrency_group() {
    let server = TestServer::start_with(|config| config.worker = false).await;
    let admin = server.key("acme", "ann", &["admin", "operator"]).await;
    server.register(&admin, THREE_SETS).await;
    let bad = json!({ "workflow": "three", "concurrency": { "key": "k", "limit": 0 } });
    let (status, problem) = server.post(&admin, "/v1/runs", bad).await;
    assert_eq!(status, 400, "{problem}");
    let mut ids = Vec::new();
    for (input, priority) in [(1, 0), (2, 7)] {
        let body = json!({ "workflow": "three", "input": input, "priority": priority,
                           "concurrency": { "key": "customer-9", "limit": 1 } });
        let (status, run) = server.post(&admin, "/v1/runs", body).await;
        assert_eq!(status, 202, "{run}");
        ids.push(run["run_id"].as_str().unwrap().parse::<stepwright_core::RunId>().unwrap());
    }
    let kept = server.store.load(ids[1]).await.unwrap().record.flow;
    assert_eq!(kept.priority, 7);
    assert_eq!(kept.concurrency.map(|c| (c.key, c.limit)), Some(("customer-9".to_owned(), 1)));
    let engine = stepwright_app::engine_over(&server.store).build();
    let resolver = stepwright_app::resolver(server.store.clone(), stepwright_app::Bindings::default());
    let outcomes = stepwright_core::Runner::new(engine).resolve_with(resolver).tick().await.unwrap();
    assert_eq!(outcomes.iter().map(|(run, _)| *run).collect::<Vec<_>>(), [ids[1]], "one slot: priority 7 first");
    let waiting = server.store.load(ids[0]).await.unwrap().record;
    assert_eq!(waiting.status, stepwright_core::RunStatus::Pending, "the other waits its turn");
    let (_, shown) = server.get(&admin, &format!("/v1/runs/{}", ids[0])).await;
    assert!(shown["queued"]["reason"].as_str().unwrap().contains("has room"), "{shown}");

    // A run waiting on a person holds its slot: the next run of the group says it waits
    // behind it, and why.
    server.register(&admin, APPROVAL).await;
    let group = json!({ "key": "desk", "limit": 1 });
    let body = json!({ "workflow": "greet", "input": { "name": "Ada" }, "concurrency": group });
    let (_, holder) = server.post(&admin, "/v1/runs", body).await;
    let body = json!({ "workflow": "three", "input": 3, "concurrency": group });
    let (_, queued) = server.post(&admin, "/v1/runs", body).await;
    let engine = stepwright_app::engine_over(&server.store).build();
    let resolver = stepwright_app::resolver(server.store.clone(), stepwright_app::Bindings::default());
    let outcomes = stepwright_core::Runner::new(engine).resolve_with(resolver).tick().await.unwrap();
    assert!(outcomes.iter().all(|(run, _)| run.to_string() != queued["run_id"].as_str().unwrap()));
    wait_for_status(&server, &admin, holder["run_id"].as_str().unwrap(), "suspended").await;
    let (_, shown) = server.get(&admin, &format!("/v1/runs/{}", queued["run_id"].as_str().unwrap())).await;
    let why = &shown["queued"];
    assert!(why["reason"].as_str().unwrap().contains("concurrency group \"desk\" is full"), "{shown}");
    assert_eq!((&why["concurrency_key"], &why["concurrency_limit"]), (&json!("desk"), &json!(1)), "{shown}");
    assert_eq!(why["held_by"], json!([holder["run_id"]]), "{shown}");
    server.shutdown().await;
}

/// The fake model says which model id it was asked for.
fn says_its_model(request: &serde_json::Value) -> stepwright_testkit::openai::Answer {
    stepwright_testkit::openai::Answer::Text(format!("I am {}", request["model"].as_str().unwrap_or("?")))
}

#[tokio::test]
async fn a_recompute_may_answer_a_binding_with_another_the_definition_has_and_nothing_else() {
    let model = stepwright_testkit::openai::chat_model(
        says_its_model,
        stepwright_testkit::openai::Tokens::Fixed(10, 4),
        std::time::Duration::ZERO,
    );
    let server = TestServer::start().await;
    let admin = server.key("acme", "ann", &["admin", "operator"]).await;
    let endpoint = format!("base_url: \"http://127.0.0.1:{}/v1\", api_key_env: PATH", model.port);
    let source = format!(
        "workflow: ask\nmodels:\n  smart: {{ provider: openai, model: gpt-big, {endpoint} }}\n  fast: {{ provider: openai, model: gpt-small, {endpoint} }}\nsteps:\n  - id: answer\n    llm: {{ model: smart, prompt: Who are you? }}\n"
    );
    server.register(&admin, &source).await;
    let (_, run) = server.post(&admin, "/v1/runs", json!({ "workflow": "ask", "wait_seconds": 10 })).await;
    assert_eq!((&run["status"], &run["output"]), (&json!("completed"), &json!("I am gpt-big")), "{run}");
    let id = run["run_id"].as_str().unwrap();

    let (status, definition) = server.get(&admin, &format!("/v1/runs/{id}/definition")).await;
    assert_eq!(status, 200, "{definition}");
    assert_eq!(
        definition["models"],
        json!([{ "name": "fast", "model": "gpt-small" }, { "name": "smart", "model": "gpt-big" }]),
        "what a recompute may name"
    );
    let recompute = format!("/v1/runs/{id}/recompute");
    let (status, report) =
        server.post(&admin, &recompute, json!({ "models": { "smart": "fast" }, "persist": true })).await;
    assert_eq!(status, 200, "{report}");
    assert_eq!((&report["changed"], &report["recomputed_output"]), (&json!(true), &json!("I am gpt-small")));
    let step = report["steps"].as_array().unwrap().iter().find(|s| s["path"] == "answer").unwrap();
    assert_eq!(step["change"], "value_changed", "{report}");
    let asked: Vec<String> = model.requests().iter().map(|r| r.body["model"].as_str().unwrap().to_owned()).collect();
    assert_eq!(asked, ["gpt-big", "gpt-small"], "the recompute called the other binding's model");
    let forked = report["forked"].as_str().expect("kept");
    let (_, kept) = server.get(&admin, &format!("/v1/runs/{forked}")).await;
    assert_eq!(kept["output"], "I am gpt-small", "{kept}");
    let audit = server.store.audit_entries("acme", 50).await.unwrap();
    let entry = audit.iter().find(|e| e.action == "run.recomputed").expect("audited");
    assert_eq!(entry.detail["models"], json!({ "smart": "fast" }), "the audit says which model answered");

    // Only bindings the definition has, both sides; never an endpoint.
    for (models, names) in [
        (json!({ "clever": "fast" }), "\"clever\""),
        (json!({ "smart": "https://evil.example/v1" }), "\"https://evil.example/v1\""),
    ] {
        let (status, problem) = server.post(&admin, &recompute, json!({ "models": models })).await;
        assert_eq!((status, problem["code"].as_str()), (422, Some("bad_input")), "{problem}");
        let detail = problem["detail"].as_str().unwrap();
        assert!(detail.contains(names) && detail.contains("bound: fast, smart"), "{detail}");
    }
    assert_eq!(model.requests().len(), 2, "a refused recompute calls nothing");
    server.shutdown().await;
}

#[tokio::test]
async fn replay_recompute_and_fork_answer_the_cli_reports_in_the_namespace() {
    let server = TestServer::start().await;
    let admin = server.key("acme", "ann", &["admin", "operator"]).await;
    let viewer = server.key("acme", "vic", &["viewer"]).await;
    let stranger = server.key("globex", "gus", &["admin", "operator"]).await;
    server.register(&admin, THREE_SETS).await;
    let (_, run) = server.post(&admin, "/v1/runs", json!({ "workflow": "three", "input": 5, "wait_seconds": 5 })).await;
    assert_eq!(run["status"], "completed", "{run}");
    let id = run["run_id"].as_str().unwrap();

    let (status, replay) = server.post(&admin, &format!("/v1/runs/{id}/replay"), json!({})).await;
    assert_eq!(status, 200, "{replay}");
    assert_eq!(replay["identical"], true);
    let outcomes: Vec<(&str, &str)> = replay["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["path"].as_str().unwrap(), s["outcome"].as_str().unwrap()))
        .collect();
    assert_eq!(outcomes, [("a", "identical"), ("b", "identical"), ("c", "identical")]);
    for (action, body) in [("replay", json!({})), ("recompute", json!({})), ("fork", json!({ "at": "b" }))] {
        let path = format!("/v1/runs/{id}/{action}");
        assert_eq!(server.post(&viewer, &path, body.clone()).await.0, 403, "{action}: a viewer");
        assert_eq!(server.post(&stranger, &path, body).await.0, 404, "{action}: another namespace");
    }

    // A second version changes the last step: recomputing with it says what changed.
    let changed = THREE_SETS.replace("set: \"{{ steps.b.output }}\"", "set: \"{{ steps.b.output + 1 }}\"");
    assert_eq!(server.register(&admin, &changed).await["version"], 2);
    let recompute = format!("/v1/runs/{id}/recompute");
    let (status, same) = server.post(&admin, &recompute, json!({})).await;
    assert_eq!((status, &same["changed"]), (200, &json!(false)), "{same}");
    let (status, report) = server.post(&admin, &recompute, json!({ "version": 2, "from": "c" })).await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["changed"], true);
    let c = report["steps"].as_array().unwrap().iter().find(|s| s["path"] == "c").unwrap();
    assert_eq!(c["change"], "value_changed", "{report}");
    assert_eq!(report["recomputed_output"], 6);
    assert_eq!(server.post(&admin, &recompute, json!({ "version": 9 })).await.0, 404);
    assert_eq!(server.post(&admin, &recompute, json!({ "form": "c" })).await.0, 422, "unknown fields are errors");
    let (status, kept) = server.post(&admin, &recompute, json!({ "version": 2, "persist": true })).await;
    assert_eq!(status, 200, "{kept}");
    let forked = kept["forked"].as_str().expect("a kept recompute names its run");
    let (status, kept_run) = server.get(&admin, &format!("/v1/runs/{forked}")).await;
    assert_eq!((status, &kept_run["output"]), (200, &json!(6)), "{kept_run}");
    assert_eq!(server.get(&stranger, &format!("/v1/runs/{forked}")).await.0, 404);

    // A fork before `b` with `a` replaced runs on from there.
    let fork = format!("/v1/runs/{id}/fork");
    let (status, child) =
        server.post(&admin, &fork, json!({ "at": "b", "steps": { "a": 41 }, "wait_seconds": 5 })).await;
    assert_eq!(status, 201, "{child}");
    assert_eq!((&child["status"], &child["output"]), (&json!("completed"), &json!(41)), "{child}");
    assert_ne!(child["run_id"], run["run_id"]);
    let (status, problem) = server.post(&admin, &fork, json!({ "at": "nowhere" })).await;
    assert_eq!((status, problem["code"].as_str()), (422, Some("invalid_request")), "{problem}");
    assert_eq!(server.post(&admin, &fork, json!({})).await.0, 422, "`at` is required");
    let audit = server.store.audit_entries("acme", 50).await.unwrap();
    let actions: Vec<&str> = audit.iter().map(|e| e.action.as_str()).collect();
    assert!(actions.contains(&"run.forked") && actions.contains(&"run.recomputed"), "{actions:?}");
    server.shutdown().await;
}
