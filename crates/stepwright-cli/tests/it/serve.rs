//! `stepwright serve` as a real process: killed mid-run and started again, a client's
//! event stream resumes with nothing lost or repeated; SIGTERM stops it gracefully. On
//! SQLite, and on Postgres when `STEPWRIGHT_TEST_DATABASE_URL` is set.

use std::path::Path;
use std::process::Command;

use crate::support::serve;
use std::time::Duration;

use eventsource_stream::Eventsource;
use futures_util::StreamExt;
use serde_json::{Value, json};

/// Six steps of a quarter second each: long enough to kill the server in the middle.
const SLOW: &str = r#"
workflow: slow
tools:
  nap:
    command: [sh, -c, "sleep 0.25; echo \"$1\"", sh, "{{ args.n }}"]
    effect: read
steps:
  - id: one
    tool: nap
    with: { n: 1 }
  - id: two
    tool: nap
    with: { n: 2 }
  - id: three
    tool: nap
    with: { n: 3 }
  - id: four
    tool: nap
    with: { n: 4 }
  - id: five
    tool: nap
    with: { n: 5 }
  - id: six
    tool: nap
    with: { n: 6 }
"#;

fn key(dir: &Path, db: &str) -> String {
    crate::support::api_key(dir, db, "ann", &["admin", "operator"])
}

/// `(id, event, path)` of each event read from `path` until the stream ends or breaks.
async fn read_until_broken(
    http: &reqwest::Client,
    url: &str,
    key: &str,
    last_event_id: Option<u64>,
    mut on_event: impl FnMut(usize),
) -> Vec<(u64, String, String)> {
    let mut request = http.get(url).bearer_auth(key);
    if let Some(id) = last_event_id {
        request = request.header("last-event-id", id.to_string());
    }
    let response = request.send().await.unwrap();
    assert_eq!(response.status(), 200);
    let mut events = response.bytes_stream().eventsource();
    let mut received = Vec::new();
    while let Ok(Some(Ok(event))) = tokio::time::timeout(Duration::from_secs(30), events.next()).await {
        let data: Value = serde_json::from_str(&event.data).unwrap();
        received.push((event.id.parse().unwrap(), event.event, data["path"].as_str().unwrap().to_owned()));
        on_event(received.len());
    }
    received
}

fn stores(dir: &Path, test: &str) -> Vec<String> {
    let mut stores = vec![format!("sqlite://{}", dir.join("served.db").display())];
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    if let Some(url) = runtime.block_on(stepwright::backends::postgres::test_url(test)) {
        stores.push(url);
    }
    stores
}

#[test]
fn an_event_stream_resumes_exactly_once_across_a_server_killed_mid_run() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    for db in stores(dir.path(), "an_event_stream_resumes_exactly_once") {
        let key = key(dir.path(), &db);
        let mut first = serve(dir.path(), &db);
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let http = reqwest::Client::new();
        let (run, before) = runtime.block_on(async {
            let registered = http
                .post(format!("{}/v1/workflows", first.base))
                .bearer_auth(&key)
                .json(&json!({ "source": SLOW }))
                .send()
                .await
                .unwrap();
            assert_eq!(registered.status(), 201);
            let started: Value = http
                .post(format!("{}/v1/runs", first.base))
                .bearer_auth(&key)
                .json(&json!({ "workflow": "slow", "input": null }))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            let run = started["run_id"].as_str().unwrap().to_owned();
            let url = format!("{}/v1/runs/{run}/events", first.base);
            // Kill the server (SIGKILL) once a few events have arrived: mid-run.
            let pid = first.child.id();
            let before = read_until_broken(&http, &url, &key, None, |count| {
                if count == 4 {
                    let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
                }
            })
            .await;
            (run, before)
        });
        first.child.wait().unwrap();
        assert!(before.len() >= 4, "{db}: events before the kill: {before:?}");
        assert!(before.iter().all(|(_, event, _)| !event.starts_with("run.")), "{db}: the run was mid-way");

        // Started again on the same store: the run is taken over (its owner is dead) and the
        // client comes back with the last id it saw.
        let mut second = serve(dir.path(), &db);
        let last = before.last().unwrap().0;
        let after = runtime.block_on(read_until_broken(
            &http,
            &format!("{}/v1/runs/{run}/events", second.base),
            &key,
            Some(last),
            |_| {},
        ));
        let _ = second.child.kill();
        second.child.wait().unwrap();
        let all: Vec<(u64, String, String)> = before.into_iter().chain(after).collect();
        let ids: Vec<u64> = all.iter().map(|(id, ..)| *id).collect();
        assert_eq!(ids, (0..all.len() as u64).collect::<Vec<_>>(), "{db}: every event once, in order");
        assert_eq!(all.last().unwrap().1, "run.completed", "{db}: {all:?}");
        // The same sequence `runs events` prints from the store.
        let printed = crate::support::stepwright(dir.path(), &["--db", &db, "runs", "events", &run, "--json"]);
        let printed: Vec<(String, String)> = String::from_utf8(printed.stdout)
            .unwrap()
            .lines()
            .map(|line| {
                let event: Value = serde_json::from_str(line).unwrap();
                (event["kind"].as_str().unwrap().to_owned(), event["path"].as_str().unwrap().to_owned())
            })
            .collect();
        let streamed: Vec<(String, String)> = all.into_iter().map(|(_, event, path)| (event, path)).collect();
        assert_eq!(streamed, printed, "{db}");
    }
}

#[test]
fn sigterm_ends_streams_with_a_comment_and_exits_zero() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("term.db").display());
    let key = key(dir.path(), &db);
    let mut serving = serve(dir.path(), &db);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let text = runtime.block_on(async {
        let http = reqwest::Client::new();
        let source = "workflow: wait\nsteps:\n  - id: ok\n    approval:\n      message: go?\n";
        let registered =
            http.post(format!("{}/v1/workflows", serving.base)).bearer_auth(&key).json(&json!({ "source": source }));
        assert_eq!(registered.send().await.unwrap().status(), 201);
        let started: Value = http
            .post(format!("{}/v1/runs", serving.base))
            .bearer_auth(&key)
            .json(&json!({ "workflow": "wait", "wait_seconds": 10 }))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(started["status"], "suspended");
        let stream = http
            .get(format!("{}/v1/runs/{}/events", serving.base, started["run_id"].as_str().unwrap()))
            .bearer_auth(&key)
            .send()
            .await
            .unwrap();
        let reading = tokio::spawn(stream.text());
        tokio::time::sleep(Duration::from_millis(200)).await;
        let _ = Command::new("kill").args(["-TERM", &serving.child.id().to_string()]).status();
        tokio::time::timeout(Duration::from_secs(20), reading).await.expect("the stream ends").unwrap().unwrap()
    });
    let status = serving.child.wait().unwrap();
    assert!(status.success(), "serve exits 0 after SIGTERM: {status}");
    assert!(text.contains("event: interrupt.opened"), "{text}");
    assert!(text.trim_end().ends_with(": server shutting down; reconnect with Last-Event-ID"), "{text}");
}

/// The README's "Drive it over HTTP" block, run by bash as written (on another port and
/// database): the curl commands work, and the run it starts completes.
#[test]
fn the_readme_http_walkthrough_works_as_written() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md")).unwrap();
    let section = readme.split("## Drive it over HTTP").nth(1).expect("the section");
    let block = section.split("```sh\n").nth(1).and_then(|rest| rest.split("```").next()).expect("its shell block");
    let dir = tempfile::tempdir().unwrap();
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let script = block
        .replace("8080", &port.to_string())
        .replace("sqlite:///tmp/api.db", &format!("sqlite://{}", dir.path().join("api.db").display()))
        .replace(
            "sleep 1",
            "for _ in $(seq 1 100); do curl -sf localhost:PORT/v1/health >/dev/null && break; sleep 0.1; done",
        )
        .replace("PORT", &port.to_string())
        .replace("cargo build -p stepwright-cli && ", "");
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_stepwright")).parent().unwrap().display().to_string();
    let output = Command::new("bash")
        .args(["-euo", "pipefail", "-c", &script.replace("$PWD/target/debug", &bin_dir)])
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.contains("\"hello-approval\""), "registered: {stdout}");
    assert!(stdout.contains("\"decided_by\":\"ann\""), "decided: {stdout}");
    assert!(stdout.contains("event: run.completed"), "streamed to the end: {stdout}");
    assert!(stdout.trim_end().ends_with("\"completed\""), "{stdout}");
}

/// `stepwright` with the given environment (for `STEPWRIGHT_SERVER` / `STEPWRIGHT_API_KEY`).
fn remote(dir: &Path, server: &str, key: &str, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_stepwright"))
        .current_dir(dir)
        .env_remove("STEPWRIGHT_DB")
        .env("STEPWRIGHT_SERVER", server)
        .env("STEPWRIGHT_API_KEY", key)
        .args(args)
        .output()
        .unwrap()
}

/// The CLI's remote mode: the same scenarios as locally — a run that waits, its approval
/// (by a key with the approver role only), a rejection, a cancel, the listings — with the
/// same output and exit codes; `runs show --json` over the server is what it is locally.
#[test]
fn the_remote_mode_gives_the_local_output_and_exit_codes() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("remote.db").display());
    let operator = key(dir.path(), &db);
    let approver = {
        let output = crate::support::stepwright(
            dir.path(),
            &["--db", &db, "keys", "create", "--namespace", "acme", "--user", "lee", "--role", "approver", "--json"],
        );
        let created: Value = serde_json::from_slice(&output.stdout).unwrap();
        created["secret"].as_str().unwrap().to_owned()
    };
    let mut serving = serve(dir.path(), &db);
    let file = dir.path().join("greet.yaml");
    std::fs::write(
        &file,
        "workflow: greet\nsteps:\n  - id: hello\n    set: \"{{ 'Hello, ' ~ input.name }}\"\n  - id: ok\n    approval:\n      message: Send it?\n      approvers: [\"role:approver\"]\n  - id: shout\n    set: \"{{ steps.hello.output ~ '!' }}\"\n",
    )
    .unwrap();
    let file = file.display().to_string();
    let base = serving.base.clone();
    let text = |output: &std::process::Output| String::from_utf8_lossy(&output.stdout).into_owned();

    let started = remote(dir.path(), &base, &operator, &["run", &file, "--input", r#"{"name":"Ada"}"#, "--json"]);
    assert_eq!(started.status.code(), Some(3), "suspended: {}", String::from_utf8_lossy(&started.stderr));
    let report: Value = serde_json::from_slice(&started.stdout).unwrap();
    assert_eq!(report["status"], "suspended");
    assert_eq!(report["pending"][0]["step"], "ok");
    let run = report["run_id"].as_str().unwrap().to_owned();

    // The same details over the server as from the store.
    let over_http = remote(dir.path(), &base, &operator, &["runs", "show", &run, "--json"]);
    let local = crate::support::stepwright(dir.path(), &["--db", &db, "runs", "show", &run, "--json"]);
    let (mut over_http, mut local): (Value, Value) =
        (serde_json::from_slice(&over_http.stdout).unwrap(), serde_json::from_slice(&local.stdout).unwrap());
    for shown in [&mut over_http, &mut local] {
        // The lease's expiry moves with every heartbeat; everything else must match.
        shown.as_object_mut().unwrap().remove("lease_expires_at");
    }
    assert_eq!(over_http, local);

    // Identity comes from the key: --as is refused, and the operator key may not approve.
    let claimed = remote(dir.path(), &base, &operator, &["approve", &run, "--as", "boss"]);
    assert_eq!(claimed.status.code(), Some(2));
    let denied = remote(dir.path(), &base, &operator, &["approve", &run]);
    assert_eq!(denied.status.code(), Some(2), "{}", String::from_utf8_lossy(&denied.stderr));
    assert!(String::from_utf8_lossy(&denied.stderr).contains("access_denied"));
    let approved = remote(dir.path(), &base, &approver, &["approve", &run, "--json"]);
    assert_eq!(approved.status.code(), Some(0), "{}", String::from_utf8_lossy(&approved.stderr));
    let done: Value = serde_json::from_slice(&approved.stdout).unwrap();
    assert_eq!((done["status"].as_str(), &done["output"]), (Some("completed"), &json!("Hello, Ada!")));
    let plain = remote(dir.path(), &base, &operator, &["runs", "show", &run]);
    assert!(text(&plain).contains("shout") && text(&plain).contains("completed"), "{}", text(&plain));

    // A rejection fails the run (exit 1), as locally.
    let second = remote(dir.path(), &base, &operator, &["run", &file, "--input", r#"{"name":"Bo"}"#, "--json"]);
    let second: Value = serde_json::from_slice(&second.stdout).unwrap();
    let second = second["run_id"].as_str().unwrap().to_owned();
    let rejected = remote(dir.path(), &base, &approver, &["reject", &second, "--reason", "no", "--json"]);
    assert_eq!(rejected.status.code(), Some(1), "{}", String::from_utf8_lossy(&rejected.stderr));
    let rejected: Value = serde_json::from_slice(&rejected.stdout).unwrap();
    assert_eq!(rejected["error"]["code"], "rejected");

    // A cancel of a waiting run; then the listing and the events of both.
    let third = remote(dir.path(), &base, &operator, &["run", &file, "--input", r#"{"name":"Cy"}"#, "--detach"]);
    assert_eq!(third.status.code(), Some(0));
    let third = text(&third).trim().to_owned();
    let cancelled = remote(dir.path(), &base, &operator, &["cancel", &third]);
    assert_eq!((cancelled.status.code(), text(&cancelled).trim()), (Some(0), "cancelled"));
    let listed = remote(dir.path(), &base, &operator, &["runs", "list", "--json"]);
    let statuses: Vec<String> = text(&listed)
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap()["status"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(statuses, ["cancelled", "failed", "completed"], "newest first");
    for args in [&["runs", "list", "--json"][..], &["runs", "list"][..]] {
        let local = crate::support::stepwright(dir.path(), &[&["--db", db.as_str()][..], args].concat());
        assert_eq!(text(&remote(dir.path(), &base, &operator, args)), text(&local), "{args:?}: the same lines");
    }
    let events = remote(dir.path(), &base, &operator, &["runs", "events", &run, "--json"]);
    let local_events = crate::support::stepwright(dir.path(), &["--db", &db, "runs", "events", &run, "--json"]);
    assert_eq!(text(&events), text(&local_events), "the same events, the same lines");
    // Replay, recompute and fork of the approved run: the local reports, the local exit codes.
    let replayed = remote(dir.path(), &base, &operator, &["replay", &run, "--json"]);
    let local_replay = crate::support::stepwright(dir.path(), &["--db", &db, "replay", &run, "--json"]);
    assert_eq!(replayed.status.code(), Some(0), "{}", String::from_utf8_lossy(&replayed.stderr));
    assert_eq!((text(&replayed), replayed.status.code()), (text(&local_replay), local_replay.status.code()));
    let louder = dir.path().join("louder.yaml");
    std::fs::write(&louder, std::fs::read_to_string(&file).unwrap().replace("~ '!'", "~ '!!'")).unwrap();
    let louder = louder.display().to_string();
    let args = ["recompute", &run, "--file", &louder, "--from", "shout"];
    let recomputed = remote(dir.path(), &base, &operator, &args);
    let local_recompute = crate::support::stepwright(dir.path(), &[&["--db", db.as_str()][..], &args[..]].concat());
    assert_eq!(recomputed.status.code(), Some(1), "changed: {}", String::from_utf8_lossy(&recomputed.stderr));
    assert!(text(&recomputed).contains("value_changed shout"), "{}", text(&recomputed));
    assert_eq!((text(&recomputed), recomputed.status.code()), (text(&local_recompute), local_recompute.status.code()));
    // A what-if changes no version: the edited file was compiled for the recompute only, and
    // the workflow's runs still start with the version they did.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let versions = tokio::runtime::Runtime::new().unwrap().block_on(async {
        let shown: Value = reqwest::Client::new()
            .get(format!("{base}/v1/workflows/greet"))
            .bearer_auth(&operator)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        shown["versions"].as_array().map_or(0, Vec::len)
    });
    assert_eq!(versions, 1, "the recompute registered nothing");
    let other_workflow = dir.path().join("other.yaml");
    std::fs::write(&other_workflow, "workflow: other\nsteps:\n  - id: a\n    set: 1\n").unwrap();
    let wrong =
        remote(dir.path(), &base, &operator, &["recompute", &run, "--file", &other_workflow.display().to_string()]);
    assert_eq!(wrong.status.code(), Some(2), "a version of another workflow is refused");
    let model = remote(dir.path(), &base, &operator, &["--model", "m=openai:gpt-4o", "replay", &run]);
    assert_eq!(model.status.code(), Some(2), "the server binds models");
    let forked = remote(
        dir.path(),
        &base,
        &operator,
        &["fork", &run, "--at", "shout", "--set", r#"{"steps":{"hello":"Hi"}}"#, "--json"],
    );
    assert_eq!(forked.status.code(), Some(0), "{}", String::from_utf8_lossy(&forked.stderr));
    let forked: Value = serde_json::from_slice(&forked.stdout).unwrap();
    assert_eq!((&forked["parent"], &forked["at"]), (&json!(run), &json!("shout")));
    // An idempotency key means one run, through the server and from the store alike.
    let keyed = |args: &[&str]| {
        let output = remote(dir.path(), &base, &operator, args);
        assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
        text(&output).trim().to_owned()
    };
    let input = r#"{"name":"Bo"}"#;
    let first = keyed(&["run", &file, "--input", input, "--detach", "--idempotency-key", "greet-bo"]);
    assert_eq!(keyed(&["run", &file, "--input", input, "--detach", "--idempotency-key", "greet-bo"]), first);
    let local = crate::support::stepwright(
        dir.path(),
        &["--db", &db, "run", &file, "--input", input, "--detach", "--idempotency-key", "greet-bo", "--tenant", "acme"],
    );
    assert_eq!(String::from_utf8_lossy(&local.stdout).trim(), first, "the API's key, from the CLI in its tenant");

    let child = forked["run_id"].as_str().unwrap();
    let mut shown = Value::Null;
    for _ in 0..100 {
        shown =
            serde_json::from_slice(&remote(dir.path(), &base, &operator, &["runs", "show", child, "--json"]).stdout)
                .unwrap();
        if shown["status"] == "completed" {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(shown["output"], "Hi!", "the server continues the fork: {shown}");
    let missing = remote(dir.path(), &base, &operator, &["runs", "show", "01a20a00-6495-7509-b03d-a6af6726a5a7"]);
    assert_eq!(missing.status.code(), Some(2));
    let _ = serving.child.kill();
    serving.child.wait().unwrap();
}

/// Webhook deliveries are rows in the store before they are sent: a server SIGKILLed while
/// its receiver still fails them is started again, and every event arrives. On SQLite, and
/// on Postgres when `STEPWRIGHT_TEST_DATABASE_URL` is set.
#[test]
fn webhook_deliveries_survive_a_server_killed_while_they_fail() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    for db in stores(dir.path(), "webhook_deliveries_survive") {
        deliveries_survive_a_kill(dir.path(), &db);
    }
}

fn deliveries_survive_a_kill(dir: &Path, db: &str) {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use stepwright_testkit::http::{FakeServer, Reply};
    let failing = Arc::new(AtomicUsize::new(0));
    let receiver = FakeServer::responding({
        let failing = failing.clone();
        // Everything fails until the first server is gone.
        move |_| {
            if failing.load(Ordering::SeqCst) == 0 { Reply::json(503, json!({})) } else { Reply::json(200, json!({})) }
        }
    });
    let key = key(dir, db);
    let mut first = crate::support::serve_flags(dir, db, &["--webhook-allow", "127.0.0.1/32"]);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let http = reqwest::Client::new();
    let runs: Vec<String> = runtime.block_on(async {
        let post = |path: String, body: Value| http.post(path).bearer_auth(&key).json(&body).send();
        let hook = json!({ "url": receiver.url, "events": ["run.completed"], "secret": "sixteen-characters" });
        assert_eq!(post(format!("{}/v1/webhooks", first.base), hook).await.unwrap().status(), 201);
        let source = "workflow: quick\nsteps:\n  - id: a\n    set: \"{{ input }}\"\n";
        post(format!("{}/v1/workflows", first.base), json!({ "source": source })).await.unwrap();
        let mut runs = Vec::new();
        for n in 0..5 {
            let started: Value =
                post(format!("{}/v1/runs", first.base), json!({ "workflow": "quick", "input": n, "wait_seconds": 5 }))
                    .await
                    .unwrap()
                    .json()
                    .await
                    .unwrap();
            assert_eq!(started["status"], "completed");
            runs.push(started["run_id"].as_str().unwrap().to_owned());
        }
        runs
    });
    // Attempts have been made and failed; then the server dies without a word.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while receiver.served() < 5 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(receiver.served() >= 5, "every delivery was tried once before the kill");
    let _ = first.child.kill();
    first.child.wait().unwrap();
    // From here on the receiver accepts: only what the second server sends counts.
    let tried_before = receiver.served();
    failing.store(1, Ordering::SeqCst);
    let mut second = crate::support::serve_flags(dir, db, &["--webhook-allow", "127.0.0.1/32"]);
    // A delivery the first server was sending when it died is leased for 30 s, then sent.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let delivered = loop {
        let ok: std::collections::BTreeSet<String> = receiver
            .requests()
            .into_iter()
            .skip(tried_before)
            .filter(|r| r.body["event"] == "run.completed")
            .map(|r| r.body["run_id"].as_str().unwrap_or_default().to_owned())
            .collect();
        if ok.len() == runs.len() || std::time::Instant::now() > deadline {
            break ok;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let _ = second.child.kill();
    second.child.wait().unwrap();
    let expected: std::collections::BTreeSet<String> = runs.into_iter().collect();
    assert_eq!(delivered, expected, "every run's completion reached the receiver ({db})");
}

/// Two `serve` processes on one store (SQLite, and Postgres when it is there), as a
/// deployment runs them behind a load balancer: a workflow registered on one starts on the
/// other; racing starts with one idempotency key, one to each, make one run; a stream read
/// from one sees the run the other continues; racing decisions, one to each, give one `200`
/// and one `409`; a key revoked through the store is refused by both.
#[test]
fn two_servers_on_one_store_share_runs_streams_decisions_and_keys() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    for db in stores(dir.path(), "two_servers_on_one_store") {
        let operator = key(dir.path(), &db);
        let created = crate::support::stepwright(
            dir.path(),
            &["--db", &db, "keys", "create", "--namespace", "acme", "--user", "lee", "--role", "approver", "--json"],
        );
        let created: Value = serde_json::from_slice(&created.stdout).unwrap();
        let (approver, approver_id) =
            (created["secret"].as_str().unwrap().to_owned(), created["id"].as_str().unwrap().to_owned());
        let (mut a, mut b) = (serve(dir.path(), &db), serve(dir.path(), &db));
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let http = reqwest::Client::new();
        let call = |base: &str, key: &str, path: &str, body: Option<Value>| {
            let request = match body {
                Some(body) => http.post(format!("{base}{path}")).json(&body),
                None => http.get(format!("{base}{path}")),
            };
            let request = request.bearer_auth(key);
            async move {
                let response = request.send().await.unwrap();
                (response.status().as_u16(), response.json::<Value>().await.unwrap_or(Value::Null))
            }
        };
        runtime.block_on(async {
            let greet = "workflow: greet\nsteps:\n  - id: hello\n    set: \"{{ 'Hello, ' ~ input.name }}\"\n  - id: ok\n    approval:\n      message: Send it?\n      approvers: [\"role:approver\"]\n  - id: shout\n    set: \"{{ steps.hello.output ~ '!' }}\"\n";
            let (status, _) = call(&a.base, &operator, "/v1/workflows", Some(json!({ "source": greet }))).await;
            assert_eq!(status, 201, "{db}");
            let start = json!({ "workflow": "greet", "input": { "name": "Ada" }, "idempotency_key": "o-1", "wait_seconds": 10 });
            let (one, two) = tokio::join!(
                call(&a.base, &operator, "/v1/runs", Some(start.clone())),
                call(&b.base, &operator, "/v1/runs", Some(start)),
            );
            let mut statuses = [one.0, two.0];
            statuses.sort_unstable();
            assert_eq!(statuses, [200, 201], "{db}: {one:?} {two:?}");
            assert_eq!(one.1["run_id"], two.1["run_id"], "{db}: one run for one key across servers");
            let run = one.1["run_id"].as_str().unwrap().to_owned();
            let (_, shown) = call(&b.base, &operator, &format!("/v1/runs/{run}"), None).await;
            assert_eq!(shown["status"], "suspended", "{db}: {shown}");

            let url = format!("{}/v1/runs/{run}/events", a.base);
            let stream = tokio::spawn({
                let (http, key) = (http.clone(), operator.clone());
                async move { read_until_broken(&http, &url, &key, None, |_| {}).await }
            });
            let (_, inbox) = call(&b.base, &approver, "/v1/interrupts", None).await;
            let interrupt = inbox[0]["id"].as_str().unwrap().to_owned();
            let decision = format!("/v1/interrupts/{interrupt}/decision");
            let approve = json!({ "decision": "approve" });
            let (one, two) = tokio::join!(
                call(&a.base, &approver, &decision, Some(approve.clone())),
                call(&b.base, &approver, &decision, Some(approve)),
            );
            let mut statuses = [one.0, two.0];
            statuses.sort_unstable();
            assert_eq!(statuses, [200, 409], "{db}: {one:?} {two:?}");
            let streamed = tokio::time::timeout(Duration::from_secs(30), stream).await.expect("ends").unwrap();
            let ids: Vec<u64> = streamed.iter().map(|(id, ..)| *id).collect();
            assert_eq!(ids, (0..streamed.len() as u64).collect::<Vec<_>>(), "{db}");
            assert_eq!(streamed.last().unwrap().1, "run.completed", "{db}: {streamed:?}");
            let (_, done) = call(&a.base, &operator, &format!("/v1/runs/{run}"), None).await;
            assert_eq!(done["output"], "Hello, Ada!", "{db}: {done}");

            // Revoked through the store: each server refuses it once its 1 s cache lapses —
            // the very first request more than a second later (both caches are warm now).
            for base in [&a.base, &b.base] {
                assert_eq!(call(base, &approver, "/v1/interrupts", None).await.0, 200, "{db}");
            }
            let revoked = crate::support::stepwright(dir.path(), &["--db", &db, "keys", "revoke", &approver_id]);
            assert!(revoked.status.success(), "{db}");
            tokio::time::sleep(Duration::from_millis(1_100)).await;
            for base in [&a.base, &b.base] {
                let status = call(base, &approver, "/v1/interrupts", None).await.0;
                assert_eq!(status, 401, "{db}: {base} still takes a key revoked over a second ago");
            }
        });
        for serving in [&mut a, &mut b] {
            let _ = serving.child.kill();
            serving.child.wait().unwrap();
        }
    }
}

#[test]
fn provider_sign_in_flags_are_checked_before_serving() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("oidc.db").display());
    let refused = |args: &[&str], expected: &str| {
        let mut all = vec!["serve", "--db", &db, "--listen", "127.0.0.1:0"];
        all.extend_from_slice(args);
        let out = crate::support::stepwright(dir.path(), &all);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_ne!(out.status.code(), Some(0), "{args:?}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    };
    let issuer = ["--oidc-issuer", "http://127.0.0.1:9"];
    refused(&issuer, "--oidc-client-id");
    refused(&["--oidc-client-id", "x"], "--oidc-issuer");
    let with = |more: &[&'static str]| {
        let mut args = vec!["--oidc-issuer", "http://127.0.0.1:9", "--oidc-client-id", "sw"];
        args.extend_from_slice(more);
        args
    };
    refused(&with(&["--oidc-map", "staff"]), "is not GROUP=NAMESPACE:ROLE");
    refused(&with(&["--oidc-map", "staff=acme:root"]), "unknown role \"root\"");
    refused(
        &with(&["--oidc-map", "staff=acme:viewer", "--oidc-client-secret-env", "STEPWRIGHT_TEST_UNSET_SECRET"]),
        "--oidc-client-secret-env STEPWRIGHT_TEST_UNSET_SECRET: the variable is not set",
    );
}

/// `validate --server` warns, at the list's line, about an approver list that no live key
/// with the approver role in the key's namespace meets — and not about one a key meets.
#[test]
fn validate_with_a_server_warns_of_approver_lists_nobody_can_meet() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("approvers.db").display());
    let key = key(dir.path(), &db);
    crate::support::api_key(dir.path(), &db, "lee", &["approver", "role:lead"]);
    // A lead who is no approver cannot decide anything: not counted.
    crate::support::api_key(dir.path(), &db, "max", &["viewer", "role:auditor"]);
    std::fs::write(
        dir.path().join("gates.yaml"),
        "workflow: gates\nsteps:\n  - id: lead\n    approval:\n      message: Ship?\n      approvers: [role:lead]\n  \
         - id: audit\n    approval:\n      message: Audited?\n      approvers: [role:auditor, user:nobody]\n",
    )
    .unwrap();
    let serving = serve(dir.path(), &db);
    let checked = remote(dir.path(), &serving.base, &key, &["validate", "gates.yaml"]);
    let stderr = String::from_utf8_lossy(&checked.stderr);
    assert_eq!(checked.status.code(), Some(0), "a warning does not fail it: {stderr}");
    assert!(
        stderr.contains(&format!(
            "gates.yaml:10:18: warning: no key or OIDC group at {} can approve [role:auditor, user:nobody]",
            serving.base
        )),
        "{stderr}"
    );
    assert!(!stderr.contains("[role:lead]"), "a lead with the approver role meets it: {stderr}");
    drop(serving);
    // A provider group mapped to the namespace with the approver role and `role:auditor` meets
    // the other list (its members sign in through the provider, which is not asked here).
    let flags = [
        "--oidc-issuer",
        "http://127.0.0.1:9",
        "--oidc-client-id",
        "stepwright",
        "--oidc-map",
        "audit=acme:approver+role:auditor",
    ];
    let serving = crate::support::serve_flags(dir.path(), &db, &flags);
    let checked = remote(dir.path(), &serving.base, &key, &["validate", "gates.yaml"]);
    let stderr = String::from_utf8_lossy(&checked.stderr);
    assert_eq!(checked.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("warning"), "the group `audit` meets it: {stderr}");
}
