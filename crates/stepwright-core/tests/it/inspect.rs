//! Reading a run: its timeline and its event stream, typed, from what the store returns.

use std::sync::Arc;

use serde_json::json;
use stepwright_core::inspect::{EventCursor, timeline};
use stepwright_core::{
    Caller, Decision, InterruptRequest, Node, RunStatus, StepContext, StepStatus, Store, Workflow, fn_step,
};
use stepwright_testkit::engine;

fn draft_then_review() -> Workflow {
    Workflow::builder("review")
        .step(Node::step("draft", fn_step(|_c, x: i64| async move { Ok(x * 2) })))
        .step(Node::step(
            "review",
            fn_step(|ctx: StepContext, x: i64| async move {
                ctx.interrupt(InterruptRequest::approval("ok?")).await?;
                Ok(x + 1)
            }),
        ))
        .build()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn the_timeline_shows_each_step_where_it_stands() {
    let (engine, store) = engine();
    let report = engine.start(&draft_then_review(), json!(5)).await.unwrap();
    let loaded = store.load(report.run_id).await.unwrap();
    let rows = timeline(&loaded);
    let states: Vec<(&str, StepStatus)> = rows.iter().map(|r| (r.path.as_str(), r.status)).collect();
    assert_eq!(states, [("draft", StepStatus::Completed), ("review", StepStatus::Waiting)]);
    assert_eq!((rows[0].attempts, rows[0].output.as_deref()), (1, Some(&json!(10))));
    assert!(rows[0].duration().is_some() && rows[1].duration().is_none());

    let interrupt = report.pending[0].id.clone();
    engine.resolve(report.run_id, &interrupt, Decision::Approve, &Caller::default()).await.unwrap();
    let finished = engine.resume(&draft_then_review(), report.run_id).await.unwrap();
    assert_eq!(finished.status, RunStatus::Completed);
    let rows = timeline(&store.load(report.run_id).await.unwrap());
    assert_eq!((rows[1].status, rows[1].output.as_deref()), (StepStatus::Completed, Some(&json!(11))));
}

/// Polled as a run goes on, the cursor returns every event once, in order, named
/// explicitly, and ends with `run.<status>`.
#[tokio::test(start_paused = true)]
async fn the_event_cursor_returns_each_event_once_and_ends_with_the_run() {
    let (engine, store) = engine();
    let store: Arc<dyn Store> = store;
    let report = engine.start(&draft_then_review(), json!(5)).await.unwrap();
    let mut cursor = EventCursor::new();
    let kinds = |events: &[stepwright_core::journal::EventRecord]| -> Vec<(String, String)> {
        events.iter().map(|e| (e.kind.clone(), e.path.as_str().to_owned())).collect()
    };
    let first = cursor.poll(store.as_ref(), report.run_id).await.unwrap();
    assert_eq!(
        kinds(&first),
        [
            ("step.started".into(), "draft".into()),
            ("step.completed".into(), "draft".into()),
            ("step.started".into(), "review".into()),
            ("interrupt.opened".into(), "review".into()),
        ]
    );
    assert_eq!(first[1].data["output"], json!(10));
    assert!(cursor.poll(store.as_ref(), report.run_id).await.unwrap().is_empty(), "nothing new, nothing again");
    assert!(!cursor.finished());

    let interrupt = report.pending[0].id.clone();
    engine.resolve(report.run_id, &interrupt, Decision::Approve, &Caller::default()).await.unwrap();
    engine.resume(&draft_then_review(), report.run_id).await.unwrap();
    let rest = cursor.poll(store.as_ref(), report.run_id).await.unwrap();
    let rest_kinds = kinds(&rest);
    assert!(rest_kinds.contains(&("interrupt.resolved".into(), "review".into())), "{rest_kinds:?}");
    assert_eq!(rest_kinds.last().unwrap(), &("run.completed".into(), String::new()));
    assert_eq!(rest.last().unwrap().data["output"], json!(11));
    assert!(!rest_kinds.contains(&("step.completed".into(), "draft".into())), "seen events are not returned again");
    assert!(cursor.finished());
    assert!(cursor.poll(store.as_ref(), report.run_id).await.unwrap().is_empty());
}

/// With parallel paths that start together and finish apart, emitting events as they go,
/// the stream read as it happens (a poll every millisecond) is the stream read at once when
/// the run has ended: an event's position does not depend on when it was read, which is
/// what lets an API number events and a client resume by number.
#[tokio::test(start_paused = true)]
async fn the_stream_is_the_same_however_often_it_is_read() {
    use stepwright_core::{Event, Fork};
    let (engine, store) = engine();
    let store: Arc<dyn Store> = store;
    let nap = |name: &'static str, ms: u64| {
        Node::step(
            name,
            fn_step(move |ctx: StepContext, _x: serde_json::Value| async move {
                ctx.emit(Event::new("nap.begun", json!({ "ms": ms })));
                tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
                ctx.emit(Event::new("nap.ended", json!({ "ms": ms })));
                Ok(ms)
            }),
        )
    };
    let workflow = Workflow::builder("naps")
        .step(Fork::new("naps").path([nap("long", 30)]).path([nap("short", 5)]).path([nap("mid", 12)]))
        .step(nap("after", 3))
        .build()
        .unwrap();
    let run = engine.create(&workflow, json!(null), Default::default()).await.unwrap().id;
    let executing = tokio::spawn({
        let (engine, workflow) = (engine.clone(), workflow.clone());
        async move { engine.resume(&workflow, run).await.unwrap() }
    });
    let mut cursor = EventCursor::new();
    let mut as_it_happened = Vec::new();
    while !cursor.finished() {
        as_it_happened.extend(cursor.poll(store.as_ref(), run).await.unwrap());
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    assert_eq!(executing.await.unwrap().status, RunStatus::Completed);
    let at_once = EventCursor::new().poll(store.as_ref(), run).await.unwrap();
    let key = |events: &[stepwright_core::journal::EventRecord]| -> Vec<(String, String, i64)> {
        events.iter().map(|e| (e.kind.clone(), e.path.as_str().to_owned(), e.at.as_micros())).collect()
    };
    assert_eq!(key(&as_it_happened), key(&at_once));
    let kinds: Vec<String> = at_once.iter().map(|e| e.kind.clone()).collect();
    assert_eq!(kinds.iter().filter(|k| *k == "nap.ended").count(), 4, "{kinds:?}");
    assert_eq!(kinds.last().map(String::as_str), Some("run.completed"));
}

/// A step that runs for a while is seen running — in the timeline and the event stream —
/// long before it ends (its start is journaled once it has run a moment), and still has one
/// start and one end when it is done.
#[tokio::test(start_paused = true)]
async fn a_slow_step_is_seen_running_before_it_ends() {
    let (engine, store) = engine();
    let store: Arc<dyn Store> = store;
    let gate = Arc::new(tokio::sync::Notify::new());
    let opened = gate.clone();
    let workflow = Workflow::builder("slow")
        .step(Node::step("quick", fn_step(|_c, x: i64| async move { Ok(x + 1) })))
        .step(Node::step(
            "slow",
            fn_step(move |_c, x: i64| {
                let gate = opened.clone();
                async move {
                    gate.notified().await;
                    Ok(x * 10)
                }
            }),
        ))
        .build()
        .unwrap();
    let run = {
        let (engine, workflow) = (engine.clone(), workflow.clone());
        tokio::spawn(async move { engine.start(&workflow, json!(1)).await.unwrap() })
    };
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let id = store.list_runs(stepwright_core::store::RunFilter::default()).await.unwrap()[0].id;
    let rows = timeline(&store.load(id).await.unwrap());
    let states: Vec<(&str, StepStatus, u32)> = rows.iter().map(|r| (r.path.as_str(), r.status, r.attempts)).collect();
    assert_eq!(states, [("quick", StepStatus::Completed, 1), ("slow", StepStatus::Running, 1)]);
    assert!(rows[1].started.is_some() && rows[1].ended.is_none());
    let mut cursor = EventCursor::new();
    let seen: Vec<(String, String)> = cursor
        .poll(store.as_ref(), id)
        .await
        .unwrap()
        .iter()
        .map(|e| (e.kind.clone(), e.path.as_str().to_owned()))
        .collect();
    assert_eq!(seen.last().unwrap(), &("step.started".to_owned(), "slow".to_owned()), "{seen:?}");

    gate.notify_one();
    let report = run.await.unwrap();
    assert_eq!(report.status, RunStatus::Completed);
    let rest = cursor.poll(store.as_ref(), id).await.unwrap();
    let rest: Vec<&str> = rest.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(rest, ["step.completed", "run.completed"], "no second start");
    let rows = timeline(&store.load(id).await.unwrap());
    assert_eq!((rows[1].status, rows[1].attempts), (StepStatus::Completed, 1));
    assert!(rows[1].duration().unwrap() >= std::time::Duration::from_millis(500));
}

/// The timeline says what each step did when, from the journal's facts: a step that waited a
/// minute for a person and then executed for 50 ms has those two intervals in that
/// proportion, and a run that ended (here: cancelled while a step waited) is frozen at its end.
#[tokio::test(start_paused = true)]
async fn the_timeline_has_what_each_step_did_and_stops_at_the_runs_end() {
    use stepwright_core::inspect::Activity;
    let (engine, store) = engine();
    let workflow = Workflow::builder("wait-then-work")
        .step(Node::step(
            "review",
            fn_step(|ctx: StepContext, x: i64| async move {
                ctx.interrupt(InterruptRequest::approval("ok?")).await?;
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                Ok(x + 1)
            }),
        ))
        .step(Node::step(
            "again",
            fn_step(|ctx: StepContext, x: i64| async move {
                ctx.interrupt(InterruptRequest::approval("sure?")).await?;
                Ok(x)
            }),
        ))
        .build()
        .unwrap();
    let report = engine.start(&workflow, json!(1)).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_secs(60)).await;
    let interrupt = report.pending[0].id.clone();
    engine.resolve(report.run_id, &interrupt, Decision::Approve, &Caller::default()).await.unwrap();
    let waiting = engine.resume(&workflow, report.run_id).await.unwrap();
    assert_eq!(waiting.status, RunStatus::Suspended);
    let rows = timeline(&store.load(report.run_id).await.unwrap());
    let review: Vec<(Activity, std::time::Duration)> =
        rows[0].spans.iter().map(|s| (s.activity, s.to.unwrap().since(s.from))).collect();
    let activities: Vec<Activity> = review.iter().map(|(a, _)| *a).collect();
    assert_eq!(activities, [Activity::Executing, Activity::Person, Activity::Executing], "{review:?}");
    assert_eq!(review[1].1, std::time::Duration::from_secs(60));
    assert_eq!(review[2].1, std::time::Duration::from_millis(50));
    assert_eq!(rows[0].attempts, 1, "one attempt, however long it waited");
    assert_eq!(rows[1].now_doing(), Some(Activity::Person), "the second step waits for a person now");

    // Cancelled while it waits: the wait ends with the run, and stays so however late it is read.
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    engine.cancel(report.run_id, "enough").await.unwrap();
    tokio::time::sleep(std::time::Duration::from_secs(600)).await;
    let loaded = store.load(report.run_id).await.unwrap();
    let rows = timeline(&loaded);
    let ended = loaded.record.updated_at;
    assert_eq!((rows[1].status, rows[1].ended), (StepStatus::Cancelled, Some(ended)));
    let last = rows[1].spans.last().unwrap();
    assert_eq!((last.activity, last.to), (Activity::Person, Some(ended)));
    assert_eq!(last.to.unwrap().since(last.from), std::time::Duration::from_secs(5));
}
