//! Events and triggers across processes, on SQLite and on Postgres: a burst of 1,000 events
//! (300 repeating an earlier one's idempotency key) while two workers — one SIGKILLed and
//! started again mid-burst — decide three triggers (each event, a debounce by customer, a
//! batch): every stored event is one event, each fires each trigger once, every run stands
//! for the events it should; and a `wait` takes an event sent before it began, or is woken
//! by one sent while its run is suspended.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use stepwright::store::event::{EventFire, EventQuery, NewEvent, StoredEvent};
use stepwright::store::schedule::{ScheduleKey, TickOutcome};

use crate::processes::{Db, stores, text};
use crate::schedules::{ok, worker};

fn stepwright(dir: &Path, args: &[&str]) -> std::process::Output {
    crate::support::stepwright(dir, args)
}

const TICKETS: &str = r#"
workflow: tickets
triggers:
  each:
    event: ticket.created
    when: event.payload.priority != "low"
    input: { id: "{{ event.payload.id }}" }
  quiet:
    event: ticket.*
    debounce: { key: "{{ event.payload.customer }}", period: 3s }
  grouped:
    event: ticket.created
    batch: { max: 50, within: 2s }
    concurrency: { limit: 2 }
steps:
  - id: note
    set: "{{ input }}"
"#;

const EVENTS: u32 = 1_000;
const QUIET: Duration = Duration::from_secs(3);

fn fired_run(fire: &EventFire) -> Option<String> {
    match &fire.outcome {
        TickOutcome::Started { run } => Some(run.to_string()),
        TickOutcome::Skipped { .. } => None,
    }
}

#[test]
fn a_burst_of_events_fires_each_trigger_once_per_event_while_a_worker_is_killed() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("tickets.yaml"), TICKETS).unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    for db in stores(dir.path(), "a_burst_of_events_fires_each_trigger_once") {
        let created = ok(&stepwright(dir.path(), &db.args(&["triggers", "create", "tickets.yaml"])), "create");
        assert_eq!(created.lines().count(), 3, "{}: {created}", db.name);
        let mut workers = [worker(dir.path(), &db), worker(dir.path(), &db)];
        let store = runtime.block_on(stepwright::backends::open(&db.url)).unwrap();

        // The burst: 8 senders at once; every 8th, 9th and 10th of ten events repeats the
        // idempotency key of the 4th, 5th and 6th (sent earlier by the same sender).
        let burst = runtime.spawn({
            let store = store.clone();
            async move {
                let mut senders = Vec::new();
                for sender in 0..8u32 {
                    let store = store.clone();
                    senders.push(tokio::spawn(async move {
                        let mut sent = Vec::new();
                        for n in 0..EVENTS / 8 {
                            let i = sender * (EVENTS / 8) + n;
                            let id = if i % 10 >= 7 { i - 4 } else { i };
                            let payload = json!({
                                "id": id,
                                "customer": format!("c{}", id % 10),
                                "priority": if id % 10 == 0 { "low" } else { "high" },
                            });
                            let event = NewEvent {
                                tenant: None,
                                name: "ticket.created".into(),
                                payload,
                                idempotency_key: Some(format!("k{id}")),
                                at: stepwright::store::quota::wall_now(),
                            };
                            let appended = store.append_event(event).await.expect("stored");
                            sent.push((id, appended.event, appended.created));
                        }
                        sent
                    }));
                }
                let mut all = Vec::new();
                for sender in senders {
                    all.extend(sender.await.unwrap());
                }
                all
            }
        });
        // SIGKILL each worker once while the burst goes on (and the triggers read it), each
        // started again.
        for victim in &mut workers {
            std::thread::sleep(Duration::from_millis(150));
            victim.kill().unwrap();
            victim.wait().unwrap();
            *victim = worker(dir.path(), &db);
        }
        let sent: Vec<(u32, StoredEvent, bool)> = runtime.block_on(burst).unwrap();

        let mut first: BTreeMap<u32, StoredEvent> = BTreeMap::new();
        for (id, event, created) in &sent {
            if *created {
                assert!(first.insert(*id, event.clone()).is_none(), "{}: key k{id} stored twice", db.name);
            }
        }
        for (id, event, created) in &sent {
            if !created {
                assert_eq!(&first[id], event, "{}: a repeated key returns the first event", db.name);
            }
        }
        assert_eq!(first.len(), 700, "{}: 700 distinct keys", db.name);
        let events: Vec<StoredEvent> = runtime
            .block_on(store.event_log(None, EventQuery { after: Some(0), limit: 10_000, ..Default::default() }))
            .unwrap();
        assert_eq!(events.len(), 700, "{}: the log holds each event once", db.name);
        let last_seq = events.iter().map(|e| e.seq).max().unwrap();

        // Wait until every trigger has read the whole log and holds nothing.
        let key = |name: &str| ScheduleKey::new(None, &format!("tickets/{name}"));
        let began = Instant::now();
        loop {
            let settled = ["each", "quiet", "grouped"].iter().all(|name| {
                let record = runtime.block_on(store.schedule(&key(name))).unwrap().unwrap();
                let state: stepwright::schedule::TriggerState = serde_json::from_value(record.state).unwrap();
                state.read_through >= last_seq && state.held.is_empty() && state.batch.is_empty()
            });
            if settled {
                break;
            }
            if began.elapsed() > Duration::from_secs(90) {
                let states: Vec<String> = ["each", "quiet", "grouped"]
                    .iter()
                    .map(|name| {
                        let record = runtime.block_on(store.schedule(&key(name))).unwrap().unwrap();
                        format!("{name}: due {:?} state {}", record.due_at, record.state)
                    })
                    .collect();
                panic!("{}: the triggers did not settle (log through {last_seq}): {states:#?}", db.name);
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        let fires_of = |name: &str| runtime.block_on(store.trigger_fires(&key(name), 100_000)).unwrap();

        // `each`: one run per event but the low-priority ones, with its id; the low-priority
        // ones are recorded `filter_false`.
        let each = fires_of("each");
        assert_eq!(each.len(), events.len(), "{}: one fire per event read", db.name);
        let wanted: HashSet<u64> = events.iter().filter(|e| e.payload["priority"] != "low").map(|e| e.seq).collect();
        let started: Vec<&EventFire> = each.iter().filter(|f| fired_run(f).is_some()).collect();
        assert_eq!(started.iter().map(|f| f.event).collect::<HashSet<_>>(), wanted, "{}", db.name);
        let filtered = each
            .iter()
            .filter(|f| matches!(&f.outcome, TickOutcome::Skipped { reason } if reason.starts_with("filter_false")));
        assert_eq!(filtered.count(), events.len() - wanted.len(), "{}: the rest filtered out", db.name);
        let runs: HashSet<String> = started.iter().filter_map(|f| fired_run(f)).collect();
        assert_eq!(runs.len(), wanted.len(), "{}: a run each", db.name);

        // `quiet`: per customer, an event starts a run exactly when no later event of the
        // customer came within the quiet period; the others are recorded as debounced.
        let quiet = fires_of("quiet");
        assert_eq!(quiet.len(), 700, "{}: every event recorded once", db.name);
        let by_seq: BTreeMap<u64, &StoredEvent> = events.iter().map(|e| (e.seq, e)).collect();
        let mut quiet_runs = 0;
        for fire in &quiet {
            let event = by_seq[&fire.event];
            let next = events
                .iter()
                .filter(|e| e.seq > event.seq && e.payload["customer"] == event.payload["customer"])
                .map(|e| e.received_at)
                .min();
            let superseded =
                next.is_some_and(|at| at.as_micros() - event.received_at.as_micros() < QUIET.as_micros() as i64);
            match (&fire.outcome, superseded) {
                (TickOutcome::Started { .. }, false) => quiet_runs += 1,
                (TickOutcome::Skipped { reason }, true) => assert!(reason.starts_with("debounced"), "{reason}"),
                (outcome, _) => panic!("{}: event {} ({superseded}): {outcome:?}", db.name, event.seq),
            }
        }
        let customers: HashSet<&Value> = events.iter().map(|e| &e.payload["customer"]).collect();
        assert!(quiet_runs >= customers.len(), "{}: at least one run per customer ({quiet_runs})", db.name);

        // `grouped`: every event in exactly one batch of at most 50.
        let grouped = fires_of("grouped");
        assert_eq!(grouped.len(), 700, "{}", db.name);
        let mut batches: BTreeMap<String, Vec<u64>> = BTreeMap::new();
        for fire in &grouped {
            batches.entry(fired_run(fire).expect("in a batch")).or_default().push(fire.event);
        }
        assert!(batches.values().all(|b| b.len() <= 50), "{}", db.name);
        assert!(batches.len() >= 14, "{}: 700 events in batches of at most 50 ({})", db.name, batches.len());

        // The store's runs are exactly the runs the fires name, and the workers finish them.
        let fired: HashSet<String> =
            runs.iter().cloned().chain(quiet.iter().filter_map(fired_run)).chain(batches.keys().cloned()).collect();
        let finished = loop {
            let listed = ok(&stepwright(dir.path(), &db.args(&["runs", "list", "--json", "--limit", "5000"])), "list");
            let runs: Vec<Value> = listed.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
            if runs.iter().all(|r| r["status"] == "completed") || began.elapsed() > Duration::from_secs(120) {
                break runs;
            }
            std::thread::sleep(Duration::from_millis(300));
        };
        let listed: HashSet<String> = finished.iter().map(|r| r["run_id"].as_str().unwrap().to_owned()).collect();
        assert_eq!(listed, fired, "{}: no run but the fires', none twice", db.name);
        assert!(finished.iter().all(|r| r["status"] == "completed"), "{}: the workers ran them all", db.name);

        // An event's history names what it started.
        let seq = each[0].event.to_string();
        let described = ok(&stepwright(dir.path(), &db.args(&["events", "describe", &seq, "--json"])), "describe");
        let described: Value = serde_json::from_str(&described).unwrap();
        let triggers: HashSet<&str> =
            described["fires"].as_array().unwrap().iter().map(|f| f["trigger"].as_str().unwrap()).collect();
        assert!(triggers.contains("tickets/each") && triggers.contains("tickets/grouped"), "{described}");
        for worker in &mut workers {
            worker.kill().unwrap();
            worker.wait().unwrap();
        }
    }
}

const WAITER: &str = r#"
workflow: waiter
steps:
  - id: work
    sleep: 2s
  - id: reply
    wait: { event: ticket.updated, timeout: 1h, match: { ticket: "{{ input.ticket }}" } }
"#;

#[test]
fn a_wait_takes_an_event_sent_before_it_began_and_is_woken_by_a_later_one() {
    crate::support::on_each_store("a_wait_takes_an_event_sent_before_it_began", |dir, db| {
        std::fs::write(dir.join("waiter.yaml"), WAITER).unwrap();
        let send = |payload: &str| {
            ok(&stepwright(dir, &["--db", db, "events", "send", "ticket.updated", "--payload", payload]), "send")
        };
        // Sent while the run is in its first step: before its wait began.
        let running = Command::new(env!("CARGO_BIN_EXE_stepwright"))
            .current_dir(dir)
            .env_remove("STEPWRIGHT_DB")
            .args(["--db", db, "run", "waiter.yaml", "--input", r#"{"ticket": 7}"#, "--json"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(700));
        send(r#"{"ticket": 8}"#);
        send(r#"{"ticket": 7, "state": "closed"}"#);
        let done = running.wait_with_output().unwrap();
        let report: Value = serde_json::from_slice(&done.stdout).unwrap_or(Value::Null);
        assert_eq!(
            (done.status.code(), &report["output"]),
            (Some(0), &json!({ "ticket": 7, "state": "closed" })),
            "{report} {}",
            text(&done.stderr)
        );

        // Nothing yet for ticket 9: the run suspends (its wait is longer than the engine
        // holds a run); an event sent later, from another process, wakes it on a worker.
        let suspended = stepwright(dir, &["--db", db, "run", "waiter.yaml", "--input", r#"{"ticket": 9}"#, "--json"]);
        let report: Value = serde_json::from_slice(&suspended.stdout).unwrap();
        assert_eq!((suspended.status.code(), report["status"].as_str()), (Some(3), Some("suspended")), "{report}");
        let run = report["run_id"].as_str().unwrap().to_owned();
        let mut worker = Command::new(env!("CARGO_BIN_EXE_stepwright"))
            .current_dir(dir)
            .env_remove("STEPWRIGHT_DB")
            .args(["--db", db, "worker"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        send(r#"{"ticket": 9, "state": "answered"}"#);
        let began = Instant::now();
        let shown = loop {
            let shown: Value =
                serde_json::from_str(&ok(&stepwright(dir, &["--db", db, "runs", "show", &run, "--json"]), "show"))
                    .unwrap();
            if shown["status"] == "completed" || began.elapsed() > Duration::from_secs(30) {
                break shown;
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        worker.kill().unwrap();
        worker.wait().unwrap();
        assert_eq!(shown["status"], "completed", "{shown}");
        assert_eq!(shown["output"], json!({ "ticket": 9, "state": "answered" }));
    });
}

#[test]
fn the_events_and_triggers_commands_do_what_they_say() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("commands.db").display());
    std::fs::write(dir.path().join("tickets.yaml"), TICKETS).unwrap();
    std::fs::write(dir.path().join("plain.yaml"), "workflow: plain\nsteps:\n  - id: a\n    set: 1\n").unwrap();
    let run = |args: &[&str]| stepwright(dir.path(), &[&["--db", db.as_str()][..], args].concat());
    let json_lines = |output: &std::process::Output| -> Vec<Value> {
        text(&output.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    };

    // create: --only (an unknown one refused), --paused, --tenant, --json; a file without
    // triggers refused.
    let refused = run(&["triggers", "create", "tickets.yaml", "--only", "nightly"]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(text(&refused.stderr).contains("it has: each, grouped, quiet"), "{}", text(&refused.stderr));
    let none = run(&["triggers", "create", "plain.yaml"]);
    assert_eq!(none.status.code(), Some(2));
    assert!(text(&none.stderr).contains("no `triggers:` section"), "{}", text(&none.stderr));
    let created = json_lines(&run(&["triggers", "create", "tickets.yaml", "--only", "each", "--paused", "--json"]));
    assert_eq!(created.len(), 1);
    assert_eq!(
        (&created[0]["name"], &created[0]["paused"], &created[0]["mode"]),
        (&json!("tickets/each"), &json!(true), &json!("each"))
    );
    ok(&run(&["triggers", "create", "tickets.yaml", "--tenant", "acme"]), "create in acme");
    let acme = json_lines(&run(&["triggers", "list", "--tenant", "acme", "--json"]));
    let names: Vec<&str> = acme.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["tickets/each", "tickets/grouped", "tickets/quiet"]);
    assert_eq!(acme[2]["mode"], "debounce 3s");
    assert_eq!(json_lines(&run(&["triggers", "list", "--json"])).len(), 4, "every tenant's without --tenant");
    let table = ok(&run(&["triggers", "list"]), "list");
    assert!(table.starts_with("NAME") && table.contains("ticket.*") && table.contains("paused"), "{table}");
    // Triggers are not schedules, nor the other way round.
    assert_eq!(text(&run(&["schedules", "list", "--json"]).stdout), "", "no schedule listed");
    assert_eq!(run(&["schedules", "describe", "tickets/each"]).status.code(), Some(2));

    // send: the payload (JSON or @file), --idempotency-key (the same key: the first event),
    // --tenant, --json; a bad payload or an empty name refused.
    let first = ok(
        &run(&[
            "events",
            "send",
            "ticket.created",
            "--payload",
            r#"{"id": 1, "priority": "high"}"#,
            "--idempotency-key",
            "k1",
        ]),
        "send",
    );
    let again = run(&["events", "send", "ticket.created", "--payload", r#"{"id": 2}"#, "--idempotency-key", "k1"]);
    assert_eq!(text(&again.stdout), first, "the same key: the first event");
    assert!(text(&again.stderr).contains("nothing stored"), "{}", text(&again.stderr));
    std::fs::write(dir.path().join("payload.json"), r#"{"id": 3, "priority": "low"}"#).unwrap();
    let from_file: Value = serde_json::from_str(&ok(
        &run(&["events", "send", "ticket.created", "--payload", "@payload.json", "--json"]),
        "send a file",
    ))
    .unwrap();
    assert_eq!((&from_file["event"]["payload"]["id"], &from_file["created"]), (&json!(3), &json!(true)));
    let in_acme: Value = serde_json::from_str(&ok(
        &run(&[
            "events",
            "send",
            "ticket.created",
            "--tenant",
            "acme",
            "--payload",
            r#"{"id": 4, "priority": "high", "customer": "c4"}"#,
            "--idempotency-key",
            "k1",
            "--json",
        ]),
        "send in acme",
    ))
    .unwrap();
    assert_eq!(
        (&in_acme["created"], &in_acme["event"]["tenant"]),
        (&json!(true), &json!("acme")),
        "keys are per tenant"
    );
    let bad = run(&["events", "send", "ticket.created", "--payload", "{nope"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(text(&bad.stderr).contains("the payload is not JSON"), "{}", text(&bad.stderr));
    assert_eq!(run(&["events", "send", ""]).status.code(), Some(2), "an empty name");

    // list: newest first, --name, --limit, --tenant, --json.
    let listed = json_lines(&run(&["events", "list", "--json"]));
    assert_eq!(listed.iter().map(|e| e["payload"]["id"].as_i64().unwrap()).collect::<Vec<_>>(), [3, 1]);
    assert_eq!(json_lines(&run(&["events", "list", "--json", "--limit", "1"])).len(), 1);
    assert!(json_lines(&run(&["events", "list", "--json", "--name", "ticket.closed"])).is_empty());
    assert_eq!(json_lines(&run(&["events", "list", "--json", "--tenant", "acme"]))[0]["payload"]["id"], 4);
    let table = ok(&run(&["events", "list"]), "list");
    assert!(table.starts_with("SEQ") && table.contains("ticket.created"), "{table}");

    // A worker reads them: acme's triggers fire; the paused one records `paused`.
    ok(&run(&["triggers", "resume", "tickets/each", "--tenant", "acme"]), "resume");
    let mut worker = worker(dir.path(), &Db { name: "sqlite", url: db.clone() });
    let acme_seq = in_acme["event"]["seq"].as_u64().unwrap().to_string();
    let began = Instant::now();
    let history = loop {
        let shown: Value = serde_json::from_str(&ok(
            &run(&["events", "describe", &acme_seq, "--tenant", "acme", "--json"]),
            "describe",
        ))
        .unwrap();
        let fired = shown["fires"].as_array().unwrap().iter().any(|f| f["trigger"] == "tickets/each");
        if fired || began.elapsed() > Duration::from_secs(20) {
            break shown;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let each = history["fires"].as_array().unwrap().iter().find(|f| f["trigger"] == "tickets/each").unwrap();
    assert!(each["started"].is_string(), "{history}");
    let first_seq = first.trim().to_owned();
    let paused = loop {
        let shown: Value =
            serde_json::from_str(&ok(&run(&["events", "describe", &first_seq, "--json"]), "describe")).unwrap();
        if !shown["fires"].as_array().unwrap().is_empty() || began.elapsed() > Duration::from_secs(20) {
            break shown;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(paused["fires"][0]["skipped"], "paused", "{paused}");
    // A `when` that is false is recorded too (before the trigger's pause is looked at).
    let low_seq = from_file["event"]["seq"].as_u64().unwrap().to_string();
    let low = loop {
        let human = ok(&run(&["events", "describe", &low_seq]), "describe");
        if human.contains("skipped") || began.elapsed() > Duration::from_secs(20) {
            break human;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(low.contains("tickets/each  skipped: filter_false"), "{low}");
    // A filter that cannot be evaluated (a field the payload lacks) says so on the event.
    let lacking = ok(&run(&["events", "send", "ticket.created", "--payload", r#"{"id": 5}"#]), "send");
    let lacking = loop {
        let shown: Value =
            serde_json::from_str(&ok(&run(&["events", "describe", lacking.trim(), "--json"]), "describe")).unwrap();
        if !shown["fires"].as_array().unwrap().is_empty() || began.elapsed() > Duration::from_secs(20) {
            break shown;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let reason = lacking["fires"][0]["skipped"].as_str().unwrap_or_default();
    assert!(reason.starts_with("filter_failed: ") && reason.contains("undefined"), "{lacking}");
    let human = ok(&run(&["events", "describe", &first_seq]), "describe");
    assert!(human.contains("tickets/each  skipped: paused") && human.contains("key       k1"), "{human}");
    assert_eq!(run(&["events", "describe", "999"]).status.code(), Some(2));

    // describe a trigger: --fires, --json; pause, resume, delete say what they did.
    let described: Value = serde_json::from_str(&ok(
        &run(&["triggers", "describe", "tickets/grouped", "--tenant", "acme", "--fires", "5", "--json"]),
        "describe",
    ))
    .unwrap();
    assert!(described["read_through"].as_u64().unwrap() >= in_acme["event"]["seq"].as_u64().unwrap(), "{described}");
    assert!(described["fires"].as_array().unwrap().len() <= 5);
    let human = ok(&run(&["triggers", "describe", "tickets/each"]), "describe");
    assert!(human.contains("(paused)") && human.contains("skipped: paused"), "{human}");
    let resumed = run(&["triggers", "resume", "tickets/each"]);
    assert!(text(&resumed.stderr).contains("resumed"), "{}", text(&resumed.stderr));
    assert!(text(&run(&["triggers", "resume", "tickets/each"]).stderr).contains("was not paused"));
    assert!(text(&run(&["triggers", "pause", "tickets/each"]).stderr).contains("paused"));
    let deleted = run(&["triggers", "delete", "tickets/each"]);
    assert!(text(&deleted.stderr).contains("deleted trigger tickets/each"), "{}", text(&deleted.stderr));
    assert_eq!(run(&["triggers", "describe", "tickets/each"]).status.code(), Some(2));
    assert_eq!(run(&["triggers", "delete", "tickets/each"]).status.code(), Some(2));
    worker.kill().unwrap();
    worker.wait().unwrap();
}

/// `events send|list|describe --server`: the API in the key's namespace, printed as the
/// local commands print; `--tenant` is the key's to say, not the command line's.
#[test]
fn the_events_commands_call_a_server() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("served.db").display());
    let key = crate::support::api_key(dir.path(), &db, "ann", &["operator", "viewer"]);
    let serving = crate::support::serve(dir.path(), &db);
    let remote = |args: &[&str]| crate::support::over_server(dir.path(), &serving.base, &key, args);
    let first = ok(
        &remote(&["events", "send", "ticket.created", "--payload", r#"{"id": 1}"#, "--idempotency-key", "k"]),
        "send",
    );
    let again = remote(&["events", "send", "ticket.created", "--payload", r#"{"id": 2}"#, "--idempotency-key", "k"]);
    assert_eq!(text(&again.stdout), first);
    assert!(text(&again.stderr).contains("nothing stored"), "{}", text(&again.stderr));
    let sent: Value =
        serde_json::from_str(&ok(&remote(&["events", "send", "ticket.closed", "--json"]), "send --json")).unwrap();
    assert_eq!((&sent["created"], &sent["event"]["payload"]), (&json!(true), &Value::Null));
    let listed = ok(&remote(&["events", "list", "--json", "--name", "ticket.created", "--limit", "5"]), "list");
    let listed: Vec<Value> = listed.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(listed.len(), 1);
    assert_eq!((&listed[0]["payload"], &listed[0]["idempotency_key"]), (&json!({ "id": 1 }), &json!("k")));
    let shown: Value =
        serde_json::from_str(&ok(&remote(&["events", "describe", first.trim(), "--json"]), "describe")).unwrap();
    assert_eq!((&shown["name"], &shown["fires"]), (&json!("ticket.created"), &json!([])), "{shown}");
    assert_eq!(remote(&["events", "describe", "999"]).status.code(), Some(2), "not found");
    let refused = remote(&["events", "send", "x", "--tenant", "acme"]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(text(&refused.stderr).contains("--tenant is not taken"), "{}", text(&refused.stderr));
    // The server stored them in the key's namespace.
    let local =
        ok(&stepwright(dir.path(), &["--db", &db, "events", "list", "--tenant", "acme", "--json"]), "local list");
    assert_eq!(local.lines().count(), 2);
}

/// `schedules` and `triggers` over `--server`: `create FILE` registers the file and keeps its
/// schedules or triggers in the key's namespace; list, describe, pause, resume, trigger,
/// delete act through the API and print as the local commands print.
#[test]
fn the_schedules_and_triggers_commands_call_a_server() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("served.db").display());
    let key = crate::support::api_key(dir.path(), &db, "ann", &["admin", "operator", "viewer"]);
    let serving = crate::support::serve(dir.path(), &db);
    let remote = |args: &[&str]| crate::support::over_server(dir.path(), &serving.base, &key, args);
    std::fs::write(
        dir.path().join("digest.yaml"),
        "workflow: digest\nschedules:\n  hourly: { every: 1h, input: { why: tick } }\ntriggers:\n  on-ping: { event: ping }\n\
         steps:\n  - id: note\n    set: \"{{ input }}\"\n",
    )
    .unwrap();
    let created = remote(&["schedules", "create", "digest.yaml"]);
    assert!(
        text(&created.stderr).contains("registered digest.yaml as version 1 of digest"),
        "{}",
        text(&created.stderr)
    );
    assert!(ok(&created, "create").starts_with("digest/hourly  next 20"));
    let listed: Value = serde_json::from_str(&ok(&remote(&["schedules", "list", "--json"]), "list")).unwrap();
    assert_eq!(
        (&listed["name"], &listed["cadence"], &listed["paused"]),
        (&json!("digest/hourly"), &json!("every 3600s"), &json!(false))
    );
    let described = ok(&remote(&["schedules", "describe", "digest/hourly", "--next", "2"]), "describe");
    assert!(described.starts_with("schedule  digest/hourly") && described.contains("next fires:"), "{described}");
    assert!(ok(&remote(&["schedules", "pause", "digest/hourly"]), "pause").is_empty());
    let paused: Value = serde_json::from_str(&ok(&remote(&["schedules", "list", "--json"]), "list")).unwrap();
    assert_eq!(paused["paused"], json!(true));
    ok(&remote(&["schedules", "resume", "digest/hourly"]), "resume");
    let run = ok(&remote(&["schedules", "trigger", "digest/hourly"]), "trigger").trim().to_owned();
    let shown: Value = serde_json::from_str(&ok(&remote(&["runs", "show", &run, "--json"]), "show")).unwrap();
    assert_eq!(shown["workflow"], json!("digest"), "{shown}");
    // Backfill: the three hourly ticks after 4 h ago up to 1 h ago, started by the server.
    let hour = 3_600_000_000_i64;
    let now =
        i64::try_from(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_micros()).unwrap();
    let hours_ago =
        |h: i64| stepwright::schedule::format_instant(stepwright::Timestamp::from_micros((now / hour - h) * hour));
    let backfill =
        remote(&["schedules", "backfill", "digest/hourly", "--from", &hours_ago(4), "--to", &hours_ago(1), "--json"]);
    let accepted: Value = serde_json::from_str(&ok(&backfill, "backfill")).unwrap();
    assert_eq!((&accepted["ticks"], &accepted["already"]), (&json!(3), &json!(0)), "{accepted}");
    let refused = remote(&["schedules", "list", "--tenant", "acme"]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(text(&refused.stderr).contains("--tenant is not taken"), "{}", text(&refused.stderr));

    // Triggers: kept from the file (its second version is the same source: no new version).
    let kept = remote(&["triggers", "create", "digest.yaml", "--json"]);
    let kept: Value = serde_json::from_str(&ok(&kept, "triggers create")).unwrap();
    assert_eq!(
        (&kept["name"], &kept["event"], &kept["mode"]),
        (&json!("digest/on-ping"), &json!("ping"), &json!("each"))
    );
    let sent = ok(&remote(&["events", "send", "ping", "--payload", r#"{"n": 1}"#]), "send").trim().to_owned();
    let began = Instant::now();
    let fired = loop {
        let shown: Value =
            serde_json::from_str(&ok(&remote(&["triggers", "describe", "digest/on-ping", "--json"]), "describe"))
                .unwrap();
        if !shown["fires"].as_array().unwrap().is_empty() || began.elapsed() > Duration::from_secs(20) {
            break shown;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(fired["fires"][0]["event"].to_string(), sent, "{fired}");
    assert!(fired["fires"][0]["started"].is_string(), "{fired}");
    let table = ok(&remote(&["triggers", "list"]), "list");
    assert!(table.starts_with("NAME") && table.contains("digest/on-ping") && table.contains("active"), "{table}");
    ok(&remote(&["triggers", "pause", "digest/on-ping"]), "pause");
    ok(&remote(&["triggers", "delete", "digest/on-ping"]), "delete");
    assert_eq!(remote(&["triggers", "describe", "digest/on-ping"]).status.code(), Some(2), "gone");
    ok(&remote(&["schedules", "delete", "digest/hourly"]), "delete");
    assert_eq!(remote(&["schedules", "describe", "digest/hourly"]).status.code(), Some(2), "gone");
}
