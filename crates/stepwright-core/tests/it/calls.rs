//! Journaled sub-steps (`StepContext::call`): a finished call is never made again by the
//! same attempt, whether the step re-runs after a crash, a suspension or in a replay.

use std::sync::Arc;

use serde_json::{Value, json};
use stepwright_core::{
    CallKind, Caller, Decision, Effect, EngineError, ErrorCode, InMemoryStore, InterruptRequest, Node, Record,
    RetryPolicy, RunId, RunStatus, StartOptions, StepContext, StepError, Workflow, fn_step,
};
use stepwright_testkit::{Counter, engine};

const RUN: &str = "01890000-0000-7000-8000-0000000ca110";

/// A step that makes three model-like calls, each counted, and sums their answers.
fn three_calls(counters: &[Counter; 3]) -> Workflow {
    let counters = counters.clone();
    let step = Node::step(
        "agent",
        fn_step(move |ctx: StepContext, _x: Value| {
            let counters = counters.clone();
            async move {
                let mut total = 0;
                for (turn, counter) in counters.iter().enumerate() {
                    let answer = ctx
                        .call(&format!("turn.{turn}"), CallKind::Input, |info| async move {
                            counter.hit();
                            Ok(json!({ "path": info.path.as_str(), "answer": turn * 10 }))
                        })
                        .await?;
                    total += answer["answer"].as_u64().unwrap();
                }
                Ok(total)
            }
        }),
    );
    Workflow::builder("calls").step(step).build().unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_crash_after_two_calls_resumes_at_the_third() {
    let (engine, store) = engine();
    let counters: [Counter; 3] = Default::default();
    let workflow = three_calls(&counters);
    // Two call results reach the store; the third's commit fails, as a dying process would.
    store.fail_appends_after(2);
    let run: RunId = RUN.parse().unwrap();
    let crashed =
        engine.start_with(&workflow, json!(null), StartOptions { run_id: Some(run), ..Default::default() }).await;
    assert!(matches!(crashed, Err(EngineError::Store { .. })), "{crashed:?}");
    store.heal();
    let report = engine.resume(&workflow, run).await.unwrap();
    assert_eq!(report.status, RunStatus::Completed);
    assert_eq!(report.output, Some(json!(30)));
    let hits: Vec<usize> = counters.iter().map(Counter::get).collect();
    assert_eq!(hits, [1, 1, 2], "the finished calls were served; only the unrecorded one ran again");
    // Each call is its own journal path below its step.
    let paths: Vec<String> = store
        .entries(run)
        .iter()
        .filter(|e| matches!(e.record, Record::Completed { .. }))
        .map(|e| e.path.as_str().to_owned())
        .collect();
    assert_eq!(paths, ["agent/turn.0", "agent/turn.1", "agent/turn.2", "agent"]);
}

#[tokio::test(start_paused = true)]
async fn a_replay_serves_recorded_calls() {
    let (engine, _store) = engine();
    let counters: [Counter; 3] = Default::default();
    let workflow = three_calls(&counters);
    let report = engine.start(&workflow, json!(null)).await.unwrap();
    let replay = engine.replay(&workflow, report.run_id).await.unwrap();
    assert!(replay.identical, "{replay:?}");
    let hits: Vec<usize> = counters.iter().map(Counter::get).collect();
    assert_eq!(hits, [1, 1, 1], "a replay never pays for a model call again");
}

#[tokio::test(start_paused = true)]
async fn a_call_before_an_interrupt_is_not_made_again_after_the_decision() {
    let (engine, _store) = engine();
    let calls = Counter::default();
    let step = {
        let calls = calls.clone();
        Node::step(
            "gated",
            fn_step(move |ctx: StepContext, _x: Value| {
                let calls = calls.clone();
                async move {
                    let plan = ctx
                        .call("plan", CallKind::Input, |_| async {
                            calls.hit();
                            Ok(json!("delete the cache"))
                        })
                        .await?;
                    let approved = ctx.approval(InterruptRequest::approval("run the plan?")).await?;
                    Ok(json!({ "plan": *plan, "approved": approved.is_some() }))
                }
            }),
        )
    };
    let workflow = Workflow::builder("gated").step(step).build().unwrap();
    let report = engine.start(&workflow, json!(null)).await.unwrap();
    assert_eq!(report.status, RunStatus::Suspended);
    let interrupt = report.pending[0].id.clone();
    engine.resolve(report.run_id, &interrupt, Decision::Approve, &Caller::default()).await.unwrap();
    let done = engine.resume(&workflow, report.run_id).await.unwrap();
    assert_eq!(done.output, Some(json!({ "plan": "delete the cache", "approved": true })));
    assert_eq!(calls.get(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_retried_attempt_makes_its_calls_afresh() {
    let (engine, _store) = engine();
    let calls = Counter::default();
    let step = {
        let calls = calls.clone();
        Node::step(
            "flaky",
            fn_step(move |ctx: StepContext, _x: Value| {
                let calls = calls.clone();
                async move {
                    let n = ctx.call("call.0", CallKind::Input, |_| async { Ok(json!(calls.hit())) }).await?;
                    if ctx.attempt() == 1 {
                        return Err(StepError::new(ErrorCode::new("bad_answer"), "try again").retryable(true));
                    }
                    Ok(n.as_u64().unwrap())
                }
            }),
        )
        .retry(RetryPolicy::new(2))
    };
    let workflow = Workflow::builder("retried").step(step).build().unwrap();
    let report = engine.start(&workflow, json!(null)).await.unwrap();
    assert_eq!(report.output, Some(json!(2)), "attempt 2 asked again instead of reusing attempt 1's answer");
    assert_eq!(calls.get(), 2);
}

/// A step that performs one `write` action through `call` and reports what `call` said.
fn one_write(effects: &Counter, safe_to_retry: bool) -> Workflow {
    let effects = effects.clone();
    let step = Node::step(
        "tools",
        fn_step(move |ctx: StepContext, _x: Value| {
            let effects = effects.clone();
            async move {
                let kind = CallKind::Action { effect: Effect::Write, safe_to_retry };
                let result = ctx
                    .call("tool.0", kind, |info| async move {
                        assert!(info.idempotency_key.is_some(), "a fenced action gets a key");
                        effects.hit();
                        Ok(json!("sent"))
                    })
                    .await;
                Ok(match result {
                    Ok(value) => (*value).clone(),
                    Err(error) => json!({ "error": error.code.as_str() }),
                })
            }
        }),
    );
    Workflow::builder("write").step(step).build().unwrap()
}

#[tokio::test(start_paused = true)]
async fn an_interrupted_write_that_is_not_safe_to_retry_reports_outcome_unknown() {
    for safe in [false, true] {
        let store = Arc::new(InMemoryStore::new());
        let engine = stepwright_core::Engine::builder().store(store.clone()).build();
        let effects = Counter::default();
        let workflow = one_write(&effects, safe);
        // The intent is committed; the result is not.
        store.fail_appends_after(1);
        let run: RunId = RUN.parse().unwrap();
        let crashed =
            engine.start_with(&workflow, json!(null), StartOptions { run_id: Some(run), ..Default::default() }).await;
        assert!(crashed.is_err());
        store.heal();
        let report = engine.resume(&workflow, run).await.unwrap();
        if safe {
            assert_eq!(report.output, Some(json!("sent")));
            assert_eq!(effects.get(), 2, "safe to retry: done again");
        } else {
            assert_eq!(report.output, Some(json!({ "error": ErrorCode::OUTCOME_UNKNOWN.as_str() })));
            assert_eq!(effects.get(), 1, "never silently done twice");
        }
    }
}
