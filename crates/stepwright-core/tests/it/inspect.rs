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
