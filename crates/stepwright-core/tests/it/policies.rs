//! Policies: retry, timeout, on_failure, effect fence, requires_approval, guardrails, `if`,
//! cache.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use stepwright_core::{
    ApprovalGate, Backoff, Caller, Decision, Effect, ErrorCode, Expr, FnGuardrail, Guardrail, GuardrailAction,
    GuardrailStage, Node, OnFailure, PatternGuardrail, Record, RetryPolicy, RunStatus, StepContext, StepError,
    TimeoutAction, Workflow, fn_step,
};
use stepwright_testkit::{Counter, T0, engine, records_at, retry_times};

/// Fails `failures` times with a retryable (or not) error, then returns the attempt number.
fn flaky(counter: Counter, failures: usize, retryable: bool) -> Node {
    Node::step(
        "flaky",
        fn_step(move |ctx: StepContext, _x: Value| {
            let counter = counter.clone();
            async move {
                if counter.hit() <= failures {
                    Err(StepError::new(ErrorCode::new("transient"), "try again").retryable(retryable))
                } else {
                    Ok(ctx.attempt())
                }
            }
        }),
    )
}

#[tokio::test(start_paused = true)]
async fn retry_counts_and_exact_exponential_delays() {
    let (engine, store) = engine();
    let counter = Counter::default();
    let policy = RetryPolicy::new(5)
        .backoff(Backoff::Exponential)
        .initial_delay(Duration::from_millis(100))
        .max_delay(Duration::from_millis(300));
    let workflow = Workflow::builder("retry").step(flaky(counter.clone(), 3, true).retry(policy)).build().unwrap();
    let start = tokio::time::Instant::now();
    let report = engine.start(&workflow, json!(null)).await.unwrap();
    assert_eq!(report.output, Some(json!(4)));
    assert_eq!(counter.get(), 4);
    // 100 + 200 + 300 (capped) ms.
    assert_eq!(start.elapsed(), Duration::from_millis(600));
    let retries = retry_times(&store, report.run_id);
    let expected: Vec<_> = [(1, 100), (2, 300), (3, 600)]
        .into_iter()
        .map(|(attempt, at)| ("flaky".to_owned(), attempt, T0.plus(Duration::from_millis(at))))
        .collect();
    assert_eq!(retries, expected);
}

#[tokio::test(start_paused = true)]
async fn retry_linear_fixed_and_jitter_delays() {
    for (backoff, jitter, total_ms) in [(Backoff::Linear, 0.0, 100 + 200), (Backoff::Fixed, 0.0, 100 + 100)] {
        let (engine, _) = engine();
        let counter = Counter::default();
        let policy = RetryPolicy::new(3).backoff(backoff).initial_delay(Duration::from_millis(100)).jitter(jitter);
        let workflow = Workflow::builder("retry").step(flaky(counter, 2, true).retry(policy)).build().unwrap();
        let start = tokio::time::Instant::now();
        engine.start(&workflow, json!(null)).await.unwrap();
        assert_eq!(start.elapsed(), Duration::from_millis(total_ms), "{backoff:?}");
    }
    // Jitter: the delays come from the seeded entropy, so the same seed gives the same times.
    let mut runs = Vec::new();
    for _ in 0..2 {
        let (engine, store) = engine();
        let policy = RetryPolicy::new(4).backoff(Backoff::Fixed).initial_delay(Duration::from_millis(1000)).jitter(0.5);
        let workflow =
            Workflow::builder("retry").step(flaky(Counter::default(), 3, true).retry(policy)).build().unwrap();
        let report = engine.start(&workflow, json!(null)).await.unwrap();
        let times: Vec<_> = retry_times(&store, report.run_id).into_iter().map(|(_, _, t)| t).collect();
        let mut previous = T0;
        for t in &times {
            let gap = t.since(previous).as_millis();
            assert!((500..=1500).contains(&gap), "gap {gap}");
            previous = *t;
        }
        runs.push(times);
    }
    assert_eq!(runs[0], runs[1]);
}

#[tokio::test(start_paused = true)]
async fn only_retryable_errors_retry_unless_on_failure_is_retry() {
    let (engine, _) = engine();
    let counter = Counter::default();
    let workflow = Workflow::builder("no-retry")
        .step(flaky(counter.clone(), 1, false).retry(RetryPolicy::new(3).initial_delay(Duration::from_millis(1))))
        .build()
        .unwrap();
    let report = engine.start(&workflow, json!(null)).await.unwrap();
    assert_eq!(report.status, RunStatus::Failed);
    assert_eq!(counter.get(), 1, "a non-retryable error is not retried");

    let counter = Counter::default();
    let workflow = Workflow::builder("retry-all")
        .step(
            flaky(counter.clone(), 1, false)
                .retry(RetryPolicy::new(3).initial_delay(Duration::from_millis(1)))
                .on_failure(OnFailure::Retry),
        )
        .build()
        .unwrap();
    let report = engine.start(&workflow, json!(null)).await.unwrap();
    assert_eq!(report.output, Some(json!(2)));
    assert_eq!(counter.get(), 2);

    let counter = Counter::default();
    let exhausted = Workflow::builder("exhausted")
        .step(flaky(counter.clone(), 10, true).retry(RetryPolicy::new(3).initial_delay(Duration::from_millis(1))))
        .build()
        .unwrap();
    let report = engine.start(&exhausted, json!(null)).await.unwrap();
    assert_eq!(report.error.unwrap().code, ErrorCode::new("transient"));
    assert_eq!(counter.get(), 3);
}

#[tokio::test(start_paused = true)]
async fn timeout_drops_the_steps_future_and_retries_as_timeout() {
    let (engine, store) = engine();
    let dropped = Arc::new(AtomicBool::new(false));
    let attempts = Counter::default();
    struct SetOnDrop(Arc<AtomicBool>);
    impl Drop for SetOnDrop {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let step = {
        let dropped = dropped.clone();
        let attempts = attempts.clone();
        Node::step(
            "slow",
            fn_step(move |_ctx, _x: Value| {
                let guard = SetOnDrop(dropped.clone());
                let attempt = attempts.hit();
                async move {
                    let _guard = guard;
                    // Ignores cancellation on purpose: the timeout must drop it anyway.
                    tokio::time::sleep(Duration::from_secs(if attempt == 1 { 3600 } else { 1 })).await;
                    Ok(attempt)
                }
            }),
        )
    };
    let workflow = Workflow::builder("timeout")
        .step(step.timeout(Duration::from_secs(5)).retry(RetryPolicy::new(2).initial_delay(Duration::from_secs(1))))
        .build()
        .unwrap();
    let start = tokio::time::Instant::now();
    let report = engine.start(&workflow, json!(null)).await.unwrap();
    assert!(dropped.load(Ordering::SeqCst), "the timed-out future was dropped");
    assert_eq!(report.output, Some(json!(2)));
    // 5 s timeout, 1 s backoff, 1 s second attempt.
    assert_eq!(start.elapsed(), Duration::from_secs(7));
    let failed = records_at(&store, report.run_id, "slow")
        .into_iter()
        .find_map(|r| match r {
            Record::Failed { error, .. } => Some(error),
            _ => None,
        })
        .unwrap();
    assert_eq!(failed.code, ErrorCode::TIMEOUT);
    assert!(failed.retryable);
}

#[tokio::test(start_paused = true)]
async fn timeout_cancels_the_work_below_a_composite() {
    let (engine, _) = engine();
    let (tx, rx) = tokio::sync::oneshot::channel::<Duration>();
    let tx = Arc::new(std::sync::Mutex::new(Some(tx)));
    let inner = Node::step(
        "inner",
        fn_step(move |ctx: StepContext, _x: Value| {
            let tx = tx.clone();
            async move {
                // Work that escaped into a task of its own still sees the token fire.
                let token = ctx.cancellation().clone();
                let started = tokio::time::Instant::now();
                tokio::spawn(async move {
                    token.cancelled().await;
                    if let Some(tx) = tx.lock().unwrap().take() {
                        let _ = tx.send(started.elapsed());
                    }
                });
                std::future::pending::<()>().await;
                Ok(())
            }
        }),
    );
    let workflow = Workflow::builder("composite-timeout")
        .step(Node::sequence("group", [inner]).timeout(Duration::from_millis(50)))
        .build()
        .unwrap();
    let report = engine.start(&workflow, json!(null)).await.unwrap();
    assert_eq!(report.error.unwrap().code, ErrorCode::TIMEOUT);
    assert_eq!(rx.await.unwrap(), Duration::from_millis(50));
}

#[tokio::test(start_paused = true)]
async fn on_failure_skip_and_fallback() {
    let (engine, store) = engine();
    let broken = || {
        Node::step(
            "broken",
            fn_step(|_c, _x: Value| async move { Err::<Value, _>(StepError::execution_failed("down")) }),
        )
    };
    let skip = Workflow::builder("skip")
        .step(broken().on_failure(OnFailure::Skip))
        .step(Node::step(
            "after",
            fn_step(|ctx: StepContext, x: Value| async move {
                Ok(json!({ "prev": x, "broken": ctx.scope().output("broken") }))
            }),
        ))
        .build()
        .unwrap();
    let report = engine.start(&skip, json!(1)).await.unwrap();
    assert_eq!(report.output, Some(json!({ "prev": null, "broken": null })));
    assert!(records_at(&store, report.run_id, "broken").iter().any(|r| matches!(r, Record::Skipped { .. })));

    let fallback =
        Node::step("cached-copy", fn_step(|_c, x: i64| async move { Ok(json!({ "from": "fallback", "input": x })) }));
    let workflow = Workflow::builder("fallback")
        .step(broken().on_failure(OnFailure::Fallback(Box::new(fallback))))
        .build()
        .unwrap();
    let report = engine.start(&workflow, json!(7)).await.unwrap();
    assert_eq!(report.output, Some(json!({ "from": "fallback", "input": 7 })));
    assert!(
        records_at(&store, report.run_id, "broken/@fallback").iter().any(|r| matches!(r, Record::Completed { .. }))
    );
}

#[tokio::test(start_paused = true)]
async fn panics_become_execution_failed() {
    let (engine, _) = engine();
    let workflow = Workflow::builder("panic")
        .step(Node::step(
            "oops",
            fn_step(|_c, x: i64| async move {
                if x > 0 {
                    panic!("index out of range");
                }
                Ok(x)
            }),
        ))
        .build()
        .unwrap();
    let report = engine.start(&workflow, json!(1)).await.unwrap();
    let error = report.error.unwrap();
    assert_eq!(error.code, ErrorCode::EXECUTION_FAILED);
    assert_eq!(error.message, "the step panicked: index out of range");
    assert!(!error.retryable);
}

#[tokio::test(start_paused = true)]
async fn fenced_steps_get_an_intent_and_a_stable_idempotency_key() {
    let (engine, store) = engine();
    let keys = stepwright_testkit::Log::default();
    let write = {
        let keys = keys.clone();
        let counter = Counter::default();
        Node::step(
            "charge",
            fn_step(move |ctx: StepContext, _x: Value| {
                let keys = keys.clone();
                let counter = counter.clone();
                async move {
                    keys.push(ctx.idempotency_key().unwrap().to_owned());
                    if counter.hit() == 1 {
                        Err(StepError::new(ErrorCode::new("503"), "busy").retryable(true))
                    } else {
                        Ok("charged")
                    }
                }
            }),
        )
        .effect(Effect::External)
        .retry(RetryPolicy::new(2).initial_delay(Duration::from_millis(1)))
    };
    let pure =
        Node::step("pure", fn_step(|ctx: StepContext, _x: Value| async move { Ok(ctx.idempotency_key().is_none()) }));
    let workflow = Workflow::builder("fenced").step(pure).step(write).build().unwrap();
    let report = engine.start(&workflow, json!(null)).await.unwrap();
    assert_eq!(report.output, Some(json!("charged")));
    let keys = keys.take();
    assert_eq!(keys.len(), 2);
    assert_eq!(keys[0], keys[1], "the key is the same in every attempt");
    assert_eq!(keys[0].len(), 64);
    let records = records_at(&store, report.run_id, "charge");
    let intents: Vec<_> = records.iter().filter(|r| matches!(r, Record::Intent { .. })).collect();
    assert_eq!(intents.len(), 2);
    assert!(matches!(records[1], Record::Intent { attempt: 1, .. }), "the intent precedes the attempt's outcome");
    assert!(records_at(&store, report.run_id, "pure").iter().all(|r| !matches!(r, Record::Intent { .. })));
}

#[tokio::test(start_paused = true)]
async fn a_fenced_fallback_gets_the_key_of_the_step_it_replaces() {
    let (engine, _) = engine();
    let keys = stepwright_testkit::Log::default();
    let key_step = |id: &str, fail: bool| {
        let keys = keys.clone();
        Node::step(
            id,
            fn_step(move |ctx: StepContext, _x: Value| {
                keys.push(ctx.idempotency_key().unwrap().to_owned());
                async move { if fail { Err(StepError::execution_failed("lost")) } else { Ok(()) } }
            }),
        )
        .effect(Effect::Write)
    };
    let workflow = Workflow::builder("reconcile")
        .step(key_step("pay", true).on_failure(OnFailure::Fallback(Box::new(key_step("reconcile", false)))))
        .build()
        .unwrap();
    engine.start(&workflow, json!(null)).await.unwrap();
    let keys = keys.take();
    assert_eq!(keys.len(), 2);
    assert_eq!(keys[0], keys[1]);
}

#[tokio::test(start_paused = true)]
async fn requires_approval_gate_approve_reject_modify() {
    let (engine, _) = engine();
    let counter = Counter::default();
    let send = {
        let counter = counter.clone();
        Node::step(
            "send",
            fn_step(move |_c, body: String| {
                let counter = counter.clone();
                async move {
                    counter.hit();
                    Ok(format!("sent: {body}"))
                }
            }),
        )
        .requires_approval(ApprovalGate::new("send it?").approver("role:lead"))
    };
    let workflow = Workflow::builder("gated").step(send).build().unwrap();
    let lead = Caller::user(None, "ann").with_role("lead");

    let report = engine.start(&workflow, json!("hello")).await.unwrap();
    assert_eq!(report.status, RunStatus::Suspended);
    assert_eq!(counter.get(), 0, "the step does not run before the approval");
    let pending = &report.pending[0];
    assert_eq!(pending.step.as_str(), "send");
    assert_eq!(pending.message, "send it?");
    engine.resolve(report.run_id, &pending.id, Decision::Approve, &lead).await.unwrap();
    let done = engine.resume(&workflow, report.run_id).await.unwrap();
    assert_eq!(done.output, Some(json!("sent: hello")));

    let report = engine.start(&workflow, json!("hello")).await.unwrap();
    let id = report.pending[0].id.clone();
    engine.resolve(report.run_id, &id, Decision::Modify { payload: json!("hello, politely") }, &lead).await.unwrap();
    let done = engine.resume(&workflow, report.run_id).await.unwrap();
    assert_eq!(done.output, Some(json!("sent: hello, politely")));

    let report = engine.start(&workflow, json!("hello")).await.unwrap();
    let id = report.pending[0].id.clone();
    engine.resolve(report.run_id, &id, Decision::Reject { reason: Some("tone".into()) }, &lead).await.unwrap();
    let done = engine.resume(&workflow, report.run_id).await.unwrap();
    let error = done.error.unwrap();
    assert_eq!(error.code, ErrorCode::REJECTED);
    assert!(error.message.ends_with(": tone"));
    assert_eq!(counter.get(), 2);
}

#[tokio::test(start_paused = true)]
async fn approval_gate_deadline_applies_on_timeout() {
    let (engine, _) = engine();
    let workflow = Workflow::builder("deadline")
        .step(
            Node::step("go", fn_step(|_c, _x: Value| async move { Ok("went") }))
                .requires_approval(ApprovalGate::new("ok?").timeout(Duration::from_secs(7200), TimeoutAction::Approve)),
        )
        .build()
        .unwrap();
    let report = engine.start(&workflow, json!(null)).await.unwrap();
    assert_eq!(report.status, RunStatus::Suspended);
    assert_eq!(report.wake_at, Some(T0.plus(Duration::from_secs(7200))));
    tokio::time::sleep(Duration::from_secs(7200)).await;
    let done = engine.resume(&workflow, report.run_id).await.unwrap();
    assert_eq!(done.output, Some(json!("went")));
}

#[tokio::test(start_paused = true)]
async fn guardrails_block_warn_and_redact() {
    let (engine, _) = engine();
    let echo = || Node::step("echo", fn_step(|_c, x: Value| async move { Ok(json!({ "reply": x })) }));
    let email = || PatternGuardrail::new("email", r"[\w.]+@[\w.]+").unwrap();
    let workflow = Workflow::builder("guarded")
        .step(echo().guardrail(Guardrail::new(GuardrailStage::Output, GuardrailAction::Redact, email())).guardrail(
            Guardrail::new(
                GuardrailStage::Input,
                GuardrailAction::Warn,
                FnGuardrail::new("long", |v: &Value| (v.to_string().len() > 20).then(|| "long input".to_owned())),
            ),
        ))
        .build()
        .unwrap();
    let report = engine.start(&workflow, json!("write to bob@example.com now")).await.unwrap();
    assert_eq!(report.output, Some(json!({ "reply": "write to [REDACTED] now" })));
    let events = engine.store().events(report.run_id).await.unwrap();
    let kinds: Vec<_> = events.iter().map(|e| (e.kind.as_str(), e.data["guardrail"].as_str().unwrap())).collect();
    assert_eq!(kinds, [("guardrail.warning", "long"), ("guardrail.warning", "email")]);

    let blocked = Workflow::builder("blocked")
        .step(echo().guardrail(Guardrail::new(GuardrailStage::Input, GuardrailAction::Block, email())))
        .build()
        .unwrap();
    let report = engine.start(&blocked, json!("a@b.c")).await.unwrap();
    assert_eq!(report.error.unwrap().code, ErrorCode::GUARDRAIL_BLOCKED);
}

#[tokio::test(start_paused = true)]
async fn if_skips_when_false() {
    let (engine, store) = engine();
    let counter = Counter::default();
    let step = {
        let counter = counter.clone();
        Node::step(
            "maybe",
            fn_step(move |_c, x: i64| {
                counter.hit();
                async move { Ok(x) }
            }),
        )
        .only_if(Expr::new(|s| s.input().as_i64() > Some(0)))
    };
    let workflow = Workflow::builder("cond").step(step).build().unwrap();
    let report = engine.start(&workflow, json!(-1)).await.unwrap();
    assert_eq!(report.output, Some(Value::Null));
    assert_eq!(counter.get(), 0);
    assert_eq!(records_at(&store, report.run_id, "maybe"), [Record::Skipped { reason: "condition is false".into() }]);
    let report = engine.start(&workflow, json!(3)).await.unwrap();
    assert_eq!(report.output, Some(json!(3)));
}

#[tokio::test(start_paused = true)]
async fn cache_memoizes_pure_steps_by_input_hash() {
    let (engine, store) = engine();
    let counter = Counter::default();
    let step = {
        let counter = counter.clone();
        Node::step(
            "square",
            fn_step(move |_c, x: i64| {
                counter.hit();
                async move { Ok(x * x) }
            }),
        )
        .cache()
    };
    let workflow = Workflow::builder("cached").step(step).build().unwrap();
    assert_eq!(engine.start(&workflow, json!(4)).await.unwrap().output, Some(json!(16)));
    let second = engine.start(&workflow, json!(4)).await.unwrap();
    assert_eq!(second.output, Some(json!(16)));
    assert_eq!(engine.start(&workflow, json!(5)).await.unwrap().output, Some(json!(25)));
    assert_eq!(counter.get(), 2, "the second run with input 4 came from the cache");
    assert!(matches!(records_at(&store, second.run_id, "square")[0], Record::Completed { cached: true, .. }));
}
