//! Triggers over the in-memory store's event log, under tokio's paused clock. Templates
//! and filters are the host's; here a template `{{ a.b }}` is a path into what it sees and a
//! filter `a.b != v` compares one (the file format's language is tested with the CLI).

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use stepwright_core::store::event::{EventFire, EventStore, NewEvent};
use stepwright_core::store::schedule::{ScheduleKey, ScheduleStore, TickOutcome};
use stepwright_core::{Engine, InMemoryStore, Node, RunId, Store, Workflow, fn_step};
use stepwright_schedule::trigger::{Batch, Debounce, KeyedLimit};
use stepwright_schedule::{Scheduler, TriggerSpec};

fn workflow() -> Workflow {
    Workflow::builder("tickets").step(Node::step("a", fn_step(|_c, x: Value| async move { Ok(x) }))).build().unwrap()
}

fn lookup<'a>(context: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(context, |value, part| value.get(part))
}

/// `{{ path }}` looks a path up; anything else is itself.
fn render(template: &Value, context: &Value) -> Result<Value, String> {
    match template {
        Value::String(text) => match text.strip_prefix("{{ ").and_then(|t| t.strip_suffix(" }}")) {
            Some(path) => lookup(context, path).cloned().ok_or_else(|| format!("`{path}` is undefined")),
            None => Ok(template.clone()),
        },
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| Ok((k.clone(), render(v, context)?)))
            .collect::<Result<_, String>>()
            .map(Value::Object),
        other => Ok(other.clone()),
    }
}

/// `path != value`.
fn filter(source: &str, context: &Value) -> Result<bool, String> {
    let (path, value) = source.split_once(" != ").ok_or("not a filter")?;
    Ok(lookup(context, path).and_then(Value::as_str) != Some(value))
}

fn scheduler_of(engine: &Engine, store: &Arc<InMemoryStore>) -> Scheduler {
    Scheduler::new(engine.clone(), store.clone() as Arc<dyn ScheduleStore>).register(&workflow()).triggers_with(
        store.clone() as Arc<dyn EventStore>,
        Arc::new(render),
        Arc::new(filter),
    )
}

fn key(name: &str) -> ScheduleKey {
    ScheduleKey::new(None, &format!("tickets/{name}"))
}

async fn send(engine: &Engine, store: &InMemoryStore, name: &str, payload: Value, key: Option<String>) -> u64 {
    let event = NewEvent { tenant: None, name: name.into(), payload, idempotency_key: key, at: engine.clock().now() };
    store.append_event(event).await.unwrap().event.seq
}

async fn fires(store: &InMemoryStore, name: &str) -> Vec<EventFire> {
    let mut fires = store.trigger_fires(&key(name), 100_000).await.unwrap();
    fires.reverse();
    fires
}

fn started(fire: &EventFire) -> Option<RunId> {
    match fire.outcome {
        TickOutcome::Started { run } => Some(run),
        TickOutcome::Skipped { .. } => None,
    }
}

async fn input_of(store: &InMemoryStore, run: RunId) -> Value {
    (*store.load(run).await.unwrap().record.input).clone()
}

/// Each matching event starts one run, with the event's payload (or the rendered input),
/// carrying the trigger and the event; the filter leaves events out (recorded `filter_false`); a
/// pattern reads several names; a paused trigger records `paused`; a pass after them starts
/// nothing more, and events from before the trigger existed are not its.
#[tokio::test(start_paused = true)]
async fn each_matching_event_starts_one_run_that_carries_it() {
    let (engine, store) = stepwright_testkit::engine();
    let scheduler = scheduler_of(&engine, &store);
    send(&engine, &store, "ticket.created", json!({ "id": 0 }), None).await;
    let mut spec = TriggerSpec::on("ticket.*");
    spec.when = Some("event.payload.priority != low".into());
    scheduler.put_trigger(key("triage"), &workflow(), spec, false).await.unwrap();
    let mut plain = TriggerSpec::on("ticket.created");
    plain.input = Some(json!({ "id": "{{ event.payload.id }}", "name": "{{ event.name }}" }));
    scheduler.put_trigger(key("plain"), &workflow(), plain, false).await.unwrap();

    let a = send(&engine, &store, "ticket.created", json!({ "id": 1, "priority": "high" }), None).await;
    let b = send(&engine, &store, "ticket.closed", json!({ "id": 1, "priority": "high" }), None).await;
    let low = send(&engine, &store, "ticket.created", json!({ "id": 2, "priority": "low" }), None).await;
    send(&engine, &store, "order.created", json!({ "id": 3 }), None).await;
    let report = scheduler.pass().await.unwrap();
    assert_eq!(report.started.len(), 2 + 2, "triage: a and b; plain: a and low");
    let triage = fires(&store, "triage").await;
    assert_eq!(triage.iter().map(|f| f.event).collect::<Vec<_>>(), [a, b, low], "filtered out: recorded too");
    assert!(
        matches!(&triage[2].outcome, TickOutcome::Skipped { reason } if reason.starts_with("filter_false")),
        "{:?}",
        triage[2]
    );
    let run = started(&triage[0]).unwrap();
    assert_eq!(input_of(&store, run).await, json!({ "id": 1, "priority": "high" }), "the payload by default");
    let caller = store.load(run).await.unwrap().record.caller;
    assert_eq!(caller.user.as_deref(), Some("trigger:tickets/triage"));
    assert_eq!((&caller.metadata["trigger"], &caller.metadata["events"]), (&json!("tickets/triage"), &json!([a])));
    let plain = fires(&store, "plain").await;
    assert_eq!(plain.iter().map(|f| f.event).collect::<Vec<_>>(), [a, low]);
    assert_eq!(input_of(&store, started(&plain[1]).unwrap()).await, json!({ "id": 2, "name": "ticket.created" }));
    let history = store.event_fires(None, a).await.unwrap();
    assert_eq!(history.len(), 2, "the event's history names both runs: {history:?}");

    assert!(scheduler.pass().await.unwrap().started.is_empty(), "each event once");
    scheduler.set_paused(&key("triage"), true).await.unwrap();
    let paused = send(&engine, &store, "ticket.created", json!({ "id": 4 }), None).await;
    scheduler.pass().await.unwrap();
    let last = fires(&store, "triage").await.pop().unwrap();
    assert_eq!((last.event, last.outcome), (paused, TickOutcome::Skipped { reason: "paused".into() }));
}

/// A debounce holds a key's events until the key has been quiet for the period, then starts
/// one run with the last of them; the earlier ones are recorded as debounced by it.
#[tokio::test(start_paused = true)]
async fn a_debounce_starts_one_run_per_quiet_key_with_its_last_event() {
    let (engine, store) = stepwright_testkit::engine();
    let scheduler = scheduler_of(&engine, &store);
    let mut spec = TriggerSpec::on("ticket.updated");
    spec.debounce = Some(Debounce { key: Some("{{ event.payload.customer }}".into()), period_us: 5_000_000 });
    scheduler.put_trigger(key("quiet"), &workflow(), spec, false).await.unwrap();
    let mut sent: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    // Sent at 0, 0.5, 1.5, 3.5 and 6.5 s.
    for (customer, pause) in [("acme", 0), ("globex", 500), ("acme", 1_000), ("acme", 2_000), ("globex", 3_000)] {
        tokio::time::sleep(Duration::from_millis(pause)).await;
        let seq = send(&engine, &store, "ticket.updated", json!({ "customer": customer }), None).await;
        sent.entry(customer).or_default().push(seq);
        assert!(scheduler.pass().await.unwrap().started.is_empty(), "nothing while events come");
    }
    // acme is quiet from 8.5 s, globex from 11.5 s.
    tokio::time::sleep(Duration::from_millis(2_100)).await;
    let report = scheduler.pass().await.unwrap();
    assert_eq!(report.started.len(), 1, "acme only: {report:?}");
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(scheduler.pass().await.unwrap().started.len(), 1, "then globex");
    let fires = fires(&store, "quiet").await;
    for (customer, seqs) in &sent {
        let (last, earlier) = seqs.split_last().unwrap();
        let run = fires.iter().find(|f| f.event == *last).and_then(started).expect("the last event starts a run");
        assert_eq!(input_of(&store, run).await["customer"], json!(customer));
        for seq in earlier {
            let fire = fires.iter().find(|f| f.event == *seq).unwrap();
            assert!(
                matches!(&fire.outcome, TickOutcome::Skipped { reason } if reason.starts_with("debounced: event")),
                "{fire:?}"
            );
        }
    }
    assert_eq!(fires.len(), 5, "every event recorded once");
}

/// A batch starts one run as soon as it holds `max` events, or `within` after its first;
/// the run's input is the list of its events, and each event names the run.
#[tokio::test(start_paused = true)]
async fn a_batch_starts_one_run_for_max_events_or_after_its_window() {
    let (engine, store) = stepwright_testkit::engine();
    let scheduler = scheduler_of(&engine, &store);
    let mut spec = TriggerSpec::on("row.*");
    spec.batch = Some(Batch { max: 3, within_us: 10_000_000 });
    spec.concurrency = Some(KeyedLimit { key: None, limit: 2 });
    scheduler.put_trigger(key("rows"), &workflow(), spec, false).await.unwrap();
    let mut seqs = Vec::new();
    for n in 0..7 {
        seqs.push(send(&engine, &store, "row.added", json!({ "n": n }), None).await);
    }
    assert_eq!(scheduler.pass().await.unwrap().started.len(), 2, "two full batches at once");
    tokio::time::sleep(Duration::from_secs(9)).await;
    assert!(scheduler.pass().await.unwrap().started.is_empty(), "the seventh waits for its window");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(scheduler.pass().await.unwrap().started.len(), 1);
    let fires_now = fires(&store, "rows").await;
    let runs: Vec<RunId> = fires_now.iter().map(|f| started(f).expect("every event in a run")).collect();
    assert_eq!(fires_now.iter().map(|f| f.event).collect::<Vec<_>>(), seqs);
    assert_eq!((runs[0], runs[2], runs[3], runs[5]), (runs[2], runs[0], runs[5], runs[3]));
    assert!(runs[0] != runs[3] && runs[3] != runs[6]);
    // Paused while a batch waits for its window: it starts nothing, recorded `paused`.
    let held = send(&engine, &store, "row.added", json!({ "n": 7 }), None).await;
    scheduler.pass().await.unwrap();
    scheduler.set_paused(&key("rows"), true).await.unwrap();
    tokio::time::sleep(Duration::from_secs(11)).await;
    assert!(scheduler.pass().await.unwrap().started.is_empty());
    let last = fires(&store, "rows").await.pop().unwrap();
    assert_eq!((last.event, last.outcome), (held, TickOutcome::Skipped { reason: "paused".into() }));
    let input = input_of(&store, runs[0]).await;
    let ns: Vec<&Value> = input.as_array().unwrap().iter().map(|e| &e["payload"]["n"]).collect();
    assert_eq!(ns, [&json!(0), &json!(1), &json!(2)], "the batch's events, in order");
    let record = store.load(runs[6]).await.unwrap().record;
    let group = record.flow.concurrency.expect("in the trigger's group");
    assert_eq!((group.key.as_str(), group.limit), ("trigger:tickets/rows:", 2));
}

/// A burst of 1,000 events, 300 of them repeating an earlier one's idempotency key, read by
/// two schedulers passing at once: 700 events stored, each starting exactly one run.
#[tokio::test(start_paused = true)]
async fn a_burst_with_duplicate_keys_starts_one_run_per_event_across_two_schedulers() {
    let (engine, store) = stepwright_testkit::engine();
    let (one, two) = (scheduler_of(&engine, &store), scheduler_of(&engine, &store));
    one.put_trigger(key("each"), &workflow(), TriggerSpec::on("ticket.created"), false).await.unwrap();
    let mut first_seq: BTreeMap<String, u64> = BTreeMap::new();
    for i in 0..1_000u32 {
        // Every 8th, 9th and 10th of ten repeats the key of the 4th, 5th and 6th.
        let id = if i % 10 >= 7 { i - 4 } else { i };
        let seq = send(&engine, &store, "ticket.created", json!({ "id": id }), Some(format!("k{id}"))).await;
        assert_eq!(*first_seq.entry(format!("k{id}")).or_insert(seq), seq, "a repeated key returns the first event");
        if i % 100 == 99 {
            let (a, b) = tokio::join!(one.pass(), two.pass());
            a.unwrap();
            b.unwrap();
        }
    }
    let (a, b) = tokio::join!(one.pass(), two.pass());
    a.unwrap();
    b.unwrap();
    assert_eq!(first_seq.len(), 700);
    let fires = fires(&store, "each").await;
    let events: HashSet<u64> = fires.iter().map(|f| f.event).collect();
    assert_eq!((fires.len(), events.len()), (700, 700), "each stored event fired once");
    let runs: HashSet<RunId> = fires.iter().map(|f| started(f).unwrap()).collect();
    assert_eq!(runs.len(), 700, "one run each");
    let all =
        store.list_runs(stepwright_core::store::RunFilter { limit: Some(10_000), ..Default::default() }).await.unwrap();
    assert_eq!(all.len(), 700, "and no other run");
}
