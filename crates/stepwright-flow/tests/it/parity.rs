//! A file's steps at parity with the Rust API: `on_failure: fallback` with `fallback`,
//! `spawn`, a fork's and a map's `merge`, `diff_key` and `cache`. Each test fails if its
//! field does nothing.

use std::sync::Arc;

use serde_json::{Value, json};
use stepwright_core::{Engine, InMemoryStore, RecomputeOptions, RunStatus, StepChange, Store};
use stepwright_flow::{load_file, load_str};

fn engine() -> Engine {
    Engine::builder().store(Arc::new(InMemoryStore::new()) as Arc<dyn Store>).build()
}

async fn run(source: &str, input: Value) -> stepwright_core::RunReport {
    let workflow = load_str(source, "parity.yaml").unwrap_or_else(|e| panic!("{e}"));
    engine().start(&workflow, input).await.unwrap()
}

/// A tool that always fails (exit 3), for the tests that need a failing step.
macro_rules! failing_tool {
    () => {
        r#"tools:
  fail:
    description: Always fails
    command: [sh, -c, "exit 3"]
    effect: read
"#
    };
}

const FAILING: &str = concat!(
    "\nworkflow: fallback\n",
    failing_tool!(),
    r#"steps:
  - id: fetch
    tool: fail
    with: {}
POLICY
  - id: after
    set: "got {{ steps.fetch.output }}"
"#
);

/// The fallback steps run in the failed step's place, with its input, and their output is
/// the step's; without `on_failure: fallback` the run fails.
#[tokio::test]
async fn fallback_steps_run_in_place_of_a_failed_step() {
    let policy = "    on_failure: fallback\n    fallback:\n      - id: cached\n        set: \"{{ input.default }}\"\n      - id: shout\n        set: \"{{ steps.cached.output | upper }}\"\n";
    let report = run(&FAILING.replace("POLICY\n", policy), json!({ "default": "stale" })).await;
    assert_eq!((report.status, report.output), (RunStatus::Completed, Some(json!("got STALE"))));
    let report = run(&FAILING.replace("POLICY\n", ""), json!({ "default": "stale" })).await;
    assert_eq!(report.status, RunStatus::Failed);
}

/// `spawn` cancels the whole child when its `timeout` passes; the same call as `workflow`
/// waits for it. A `spawn` without a `timeout` does not load.
#[tokio::test]
async fn a_spawned_workflow_is_cancelled_at_its_timeout() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("slow.yaml"),
        "workflow: slow\nsteps:\n  - id: nap\n    sleep: 600ms\n  - id: done\n    set: \"woke\"\n",
    )
    .unwrap();
    let parent = |call: &str| {
        let path = dir.path().join("parent.yaml");
        std::fs::write(&path, format!("workflow: parent\nsteps:\n  - id: child\n{call}\n")).unwrap();
        load_file(&path)
    };
    let spawned = parent("    spawn: ./slow.yaml\n    timeout: 100ms").unwrap();
    let report = engine().start(&spawned, json!(null)).await.unwrap();
    assert_eq!(report.status, RunStatus::Failed);
    assert_eq!(report.error.map(|e| e.code.to_string()), Some("timeout".to_owned()));
    let called = parent("    workflow: ./slow.yaml").unwrap();
    let report = engine().start(&called, json!(null)).await.unwrap();
    assert_eq!((report.status, report.output), (RunStatus::Completed, Some(json!("woke"))));
    let error = parent("    spawn: ./slow.yaml").unwrap_err();
    assert!(error.to_string().contains("a `spawn` step needs a `timeout`"), "{error}");
}

/// A fork's `merge` makes its output from every path's result, failures included; a map's
/// the same over its items.
#[tokio::test]
async fn a_merge_makes_the_output_of_a_fork_and_a_map_from_their_results() {
    let fork = concat!(
        "\nworkflow: merged\n",
        failing_tool!(),
        r#"steps:
  - id: both
    fork:
      mode: settle
      paths:
        - - id: one
            set: 1
        - - id: two
            tool: fail
            with: {}
MERGE
"#
    );
    let merge = "      merge: \"{{ results | map(attribute='status') | join(',') }}\"\n";
    let report = run(&fork.replace("MERGE\n", merge), json!(null)).await;
    assert_eq!((report.status, report.output), (RunStatus::Completed, Some(json!("completed,failed"))));
    let report = run(&fork.replace("MERGE\n", ""), json!(null)).await;
    assert_eq!(report.output.and_then(|o| o.as_array().map(Vec::len)), Some(2), "settle's list without a merge");
    let map = r#"
workflow: summed
steps:
  - id: each
    map:
      items: "{{ input }}"
      steps:
        - id: double
          set: "{{ item * 2 }}"
      merge: { total: "{{ results | map(attribute='output') | sum }}" }
"#;
    let report = run(map, json!([1, 2, 3])).await;
    assert_eq!(report.output, Some(json!({ "total": 12 })));
}

/// `diff_key` makes recompute match a list's elements by that field: an element inserted
/// at the front is one change, not one per position.
#[tokio::test]
async fn diff_key_matches_list_elements_by_field_in_a_recompute() {
    let file = |items: &str, key: &str| format!("workflow: listed\nsteps:\n  - id: rows\n    set: {items}\n{key}");
    let before = "[{ id: a, v: 1 }, { id: b, v: 2 }, { id: c, v: 3 }]";
    let after = "[{ id: z, v: 0 }, { id: a, v: 1 }, { id: b, v: 2 }, { id: c, v: 3 }]";
    let changes = |key: &'static str| async move {
        let engine = engine();
        let original = load_str(&file(before, key), "listed.yaml").unwrap();
        let report = engine.start(&original, json!(null)).await.unwrap();
        let changed = load_str(&file(after, key), "listed.yaml").unwrap();
        let recomputed = engine.recompute(&changed, report.run_id, RecomputeOptions::default()).await.unwrap();
        let step = recomputed.steps.into_iter().find(|s| s.path.as_str() == "rows").unwrap();
        match step.change {
            StepChange::ValueChanged { diff } => diff,
            other => panic!("expected a changed value, got {other:?}"),
        }
    };
    let keyed = changes("    diff_key: id\n").await;
    assert_eq!(keyed.len(), 1, "{keyed:?}");
    assert!(keyed[0].contains('z'), "{keyed:?}");
    let positional = changes("").await;
    assert!(positional.len() > 1, "by position every element moved: {positional:?}");
}

const WAITS: &str = r#"
workflow: paid
steps:
  - id: first
    wait:
      event: payment
      timeout: TIMEOUT
      schema: { type: object, required: [amount], properties: { amount: { type: integer } } }
  - id: second
    wait: { event: payment, timeout: TIMEOUT }
  - id: total
    set: "{{ steps.first.output.amount + steps.second.output.amount }}"
"#;

/// Runs `source` as run `run` after sending `messages` to its `payment` inbox.
async fn run_after_sending(engine: &Engine, source: &str, messages: &[Value]) -> stepwright_core::RunReport {
    let workflow = load_str(source, "paid.yaml").unwrap_or_else(|e| panic!("{e}"));
    static NEXT: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);
    let unique = [NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed); 10];
    let run = stepwright_core::RunId::from_parts(stepwright_core::store::quota::wall_now(), unique);
    for message in messages {
        engine.send(run, "payment", message.clone()).await.unwrap();
    }
    let options = stepwright_core::StartOptions { run_id: Some(run), ..Default::default() };
    engine.start_with(&workflow, json!(null), options).await.unwrap()
}

/// A `wait` takes the next message sent to its event's inbox, one sent before it began
/// included; two waits on one event take two messages in order; a message that does not
/// match the schema fails the step; none within the timeout fails it with
/// `interrupt_timeout`.
#[tokio::test]
async fn a_wait_takes_the_next_message_of_its_event() {
    let quick = WAITS.replace("TIMEOUT", "300ms");
    let report = run_after_sending(&engine(), &quick, &[json!({ "amount": 2 }), json!({ "amount": 40 })]).await;
    assert_eq!((report.status, report.output), (RunStatus::Completed, Some(json!(42))));
    let report = run_after_sending(&engine(), &quick, &[json!({ "amount": "two" })]).await;
    assert_eq!(report.error.map(|e| e.code.to_string()), Some("output_validation".to_owned()));
    let report = run_after_sending(&engine(), &quick, &[json!({ "amount": 2 })]).await;
    assert_eq!(report.status, RunStatus::Failed);
    let error = report.error.unwrap();
    assert_eq!(error.code.to_string(), "interrupt_timeout", "{error}");
    assert!(error.message.contains("no `payment` event came"), "{error}");
}

/// A wait longer than the engine holds a run in process suspends the run until its
/// deadline; a send makes it due at once, and the resumed run takes the message.
#[tokio::test]
async fn a_long_wait_suspends_until_a_message_is_sent() {
    let store = Arc::new(InMemoryStore::new());
    let engine = Engine::builder().store(store.clone() as Arc<dyn Store>).build();
    let source = WAITS.replace("TIMEOUT", "1d");
    let workflow = load_str(&source, "paid.yaml").unwrap();
    let report = run_after_sending(&engine, &source, &[json!({ "amount": 1 })]).await;
    assert_eq!(report.status, RunStatus::Suspended, "the second wait has no message yet");
    let now = || stepwright_core::store::quota::wall_now();
    let until = report.wake_at.expect("suspended until the deadline");
    assert!(until > now().plus(std::time::Duration::from_secs(23 * 3600)), "{until:?}");
    engine.send(report.run_id, "payment", json!({ "amount": 9 })).await.unwrap();
    let record = store.load(report.run_id).await.unwrap().record;
    assert!(record.wake_at.is_some_and(|at| at <= now()), "the send made the run due");
    let resumed = engine.resume(&workflow, report.run_id).await.unwrap();
    assert_eq!((resumed.status, resumed.output), (RunStatus::Completed, Some(json!(10))));
}

const FLAKY: &str = r#"
workflow: flaky
tools:
  flaky:
    description: Fails the first time (leaving a marker), then succeeds
    command: [sh, -c, "[ -e \"$1\" ] || { touch \"$1\"; exit 1; }; printf ok", sh, "{{ args.marker }}"]
    effect: read
steps:
  - id: call
    tool: flaky
    with: { marker: "{{ input }}" }
RETRY
"#;

/// The retry rule: a command tool that exits non-zero is retried by the step's `retry`
/// (without it, the run fails at the first exit).
#[tokio::test]
async fn a_retry_retries_a_command_tool_that_exits_non_zero() {
    let dir = tempfile::tempdir().unwrap();
    let marker = |name: &str| json!(dir.path().join(name).display().to_string());
    let retried = FLAKY.replace("RETRY\n", "    retry: { max_attempts: 2, initial_delay: 10ms }\n");
    let report = run(&retried, marker("a")).await;
    assert_eq!((report.status, report.output), (RunStatus::Completed, Some(json!("ok"))));
    let report = run(&FLAKY.replace("RETRY\n", ""), marker("b")).await;
    assert_eq!(report.status, RunStatus::Failed);
}

/// `validate`'s warnings: a `retry` on a kind whose failures are never retryable, or with
/// one attempt, loads but is reported; a `retry` that can act is not.
#[test]
fn a_retry_that_cannot_take_effect_is_warned_about() {
    let source = "workflow: w\ntools:\n  t: { description: d, command: [\"true\"] }\nsteps:\n  - id: a\n    set: 1\n    retry: { max_attempts: 3 }\n  \
                  - id: b\n    tool: t\n    with: {}\n    retry: { max_attempts: 1 }\n  - id: c\n    tool: t\n    with: {}\n    retry: { max_attempts: 3 }\n";
    let loaded = stepwright_flow::load_source(source, "w.yaml").unwrap_or_else(|e| panic!("{e}"));
    let warnings: Vec<String> = loaded.warnings.iter().map(ToString::to_string).collect();
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(
        warnings[0].starts_with("w.yaml:7:12: this `retry` never takes effect: a `set` step's failures"),
        "{warnings:?}"
    );
    assert!(
        warnings[1].starts_with("w.yaml:11:12: this `retry` never takes effect: `max_attempts: 1`"),
        "{warnings:?}"
    );
}

/// `validate` warns where a template is written into code an interpreter runs (shell
/// injection), and not where the value is passed as an argument of its own.
#[test]
fn a_template_inside_shell_code_is_warned_about() {
    let source = r#"workflow: w
tools:
  unsafe: { description: d, command: [sh, -c, "echo {{ args.text }}"] }
  flags: { description: d, command: [/bin/bash, -euc, "grep {{ args.text }} log"] }
  python: { description: d, command: [python3, -c, "print('{{ args.text }}')"] }
  safe: { description: d, command: [sh, -c, 'echo "$1"', sh, "{{ args.text }}"] }
  plain: { description: d, command: [./lookup, "{{ args.text }}"] }
steps:
  - id: a
    tool: safe
    with: { text: hi }
"#;
    let loaded = stepwright_flow::load_source(source, "w.yaml").unwrap_or_else(|e| panic!("{e}"));
    let warnings: Vec<String> = loaded.warnings.iter().map(ToString::to_string).collect();
    assert_eq!(warnings.len(), 3, "{warnings:?}");
    assert!(warnings[0].starts_with("w.yaml:3:47: a template inside the code `sh` runs"), "{warnings:?}");
    assert!(warnings[0].contains("`$(rm -rf ~)` runs as a command"), "{warnings:?}");
    assert!(warnings[0].contains(r#"[sh, -c, 'echo "$1"', sh, "{{ args.x }}"]"#), "{warnings:?}");
    assert!(warnings[1].starts_with("w.yaml:4:55: a template inside the code `bash` runs"), "{warnings:?}");
    assert!(warnings[2].starts_with("w.yaml:5:52: a template inside the code `python3` runs"), "{warnings:?}");
}

/// `fork` with a nested step's output: taken where its enclosing operator runs again
/// after the fork point (the edit reaches what follows), refused with the enclosing step
/// named where that operator already completed (the edit would change nothing).
#[tokio::test]
async fn a_fork_sets_a_nested_output_or_says_why_it_cannot() {
    let source = "workflow: nested\nsteps:\n  - id: each\n    loop:\n      max_iterations: 2\n      steps:\n        \
                  - id: draft\n          set: \"d{{ loop.iteration }}\"\n        - id: shout\n          set: \"{{ steps.draft.output | upper }}\"\n  \
                  - id: after\n    set: \"{{ steps.each.output }}!\"\n";
    let workflow = load_str(source, "nested.yaml").unwrap();
    let engine = engine();
    let report = engine.start(&workflow, json!(null)).await.unwrap();
    assert_eq!(report.output, Some(json!("D2!")));
    let patch = |path: &str| stepwright_core::ForkPatch {
        input: None,
        outputs: [(path.to_owned(), json!("x"))].into_iter().collect(),
    };
    let at = stepwright_core::StepPath::new("each#2/shout");
    let fork = engine.fork(report.run_id, &at, patch("each#2/draft")).await.unwrap();
    let resumed = engine.resume(&workflow, fork.id).await.unwrap();
    assert_eq!(resumed.output, Some(json!("X!")), "the edit reached the steps after it");
    let refused = engine.fork(report.run_id, &stepwright_core::StepPath::new("after"), patch("each#2/draft")).await;
    let error = refused.unwrap_err().to_string();
    assert!(error.contains("step `each#2/draft` is inside `each`, which completed before `after`"), "{error}");
}

/// A tool's `output` schema checks every result it gives: one that does not match fails the
/// call with `output_validation`.
#[tokio::test]
async fn a_tools_output_schema_checks_its_results() {
    let source = |prints: &str| {
        format!(
            "workflow: checked\ntools:\n  lookup:\n    description: d\n    command: [printf, '{prints}']\n    effect: read\n    \
             output: {{ type: object, required: [id] }}\nsteps:\n  - id: get\n    tool: lookup\n    with: {{}}\n"
        )
    };
    let fine = run(&source(r#"{"id": 7}"#), json!(null)).await;
    assert_eq!((fine.status, fine.output), (RunStatus::Completed, Some(json!({ "id": 7 }))));
    let bad = run(&source(r#"{"name": "x"}"#), json!(null)).await;
    let error = bad.error.unwrap();
    assert_eq!(error.code.to_string(), "output_validation");
    assert!(error.message.contains("the result of tool \"lookup\" does not match its output schema"), "{error}");
}

/// A wait that timed out (and was skipped) is no longer reported as awaited, while the run
/// waits on something else.
#[tokio::test]
async fn a_wait_that_ended_is_not_awaited() {
    let source = "workflow: w\nsteps:\n  - id: paid\n    wait: { event: payment, timeout: 50ms }\n    on_failure: skip\n  \
                  - id: ok\n    approval: { message: go? }\n";
    let report = run(source, json!(null)).await;
    assert_eq!(report.status, RunStatus::Suspended);
    assert_eq!(report.pending.len(), 1, "the approval");
    assert!(report.awaiting.is_empty(), "{:?}", report.awaiting);
}

const TICKET_WAIT: &str = r#"
workflow: ticket
steps:
  - id: work
    sleep: 10ms
  - id: reply
    wait:
      event: ticket.updated
      timeout: TIMEOUT
      match: { ticket: "{{ input.ticket }}" }
"#;

fn ticket_event(engine: &Engine, payload: Value) -> stepwright_core::store::event::NewEvent {
    stepwright_core::store::event::NewEvent {
        tenant: None,
        name: "ticket.updated".into(),
        payload,
        idempotency_key: None,
        at: engine.clock().now(),
    }
}

/// A `wait` takes a stored event (`events send`, `POST /v1/events`) of its name that came
/// after the run was created, even 1 ms before the wait began; with `match`, only one whose
/// payload has those fields; an event from before the run is not its.
#[tokio::test(start_paused = true)]
async fn a_wait_takes_a_stored_event_sent_1ms_before_it_began() {
    use stepwright_core::store::event::EventStore;
    let store = Arc::new(InMemoryStore::new());
    let engine = Engine::builder().store(store.clone() as Arc<dyn Store>).build();
    let workflow = load_str(&TICKET_WAIT.replace("TIMEOUT", "5s"), "ticket.yaml").unwrap();
    // Before the run: not for it.
    store.append_event(ticket_event(&engine, json!({ "ticket": 7, "note": "old" }))).await.unwrap();
    tokio::time::advance(std::time::Duration::from_millis(1)).await;
    let running = tokio::spawn({
        let (engine, workflow) = (engine.clone(), workflow.clone());
        async move { engine.start(&workflow, json!({ "ticket": 7 })).await.unwrap() }
    });
    // The run is in its 10 ms step; 9 ms in, another ticket's event and then its own.
    tokio::time::sleep(std::time::Duration::from_millis(9)).await;
    store.append_event(ticket_event(&engine, json!({ "ticket": 8 }))).await.unwrap();
    store.append_event(ticket_event(&engine, json!({ "ticket": 7, "note": "new" }))).await.unwrap();
    let report = running.await.unwrap();
    assert_eq!(
        (report.status, report.output),
        (RunStatus::Completed, Some(json!({ "ticket": 7, "note": "new" }))),
        "the event sent 1 ms before the wait began, not the older one nor another ticket's"
    );
    // Without an event in time: the timeout.
    let report = engine.start(&workflow, json!({ "ticket": 9 })).await.unwrap();
    assert_eq!(report.error.map(|e| e.code.to_string()), Some("interrupt_timeout".to_owned()));
}

/// A long wait on a stored event suspends the run; an event of its name stored later makes
/// the run due (another ticket's too: the run looks, and suspends again), and the resumed
/// run takes the one that matches.
#[tokio::test]
async fn a_long_wait_on_a_stored_event_is_woken_by_it() {
    use stepwright_core::store::event::EventStore;
    let store = Arc::new(InMemoryStore::new());
    let engine = Engine::builder().store(store.clone() as Arc<dyn Store>).build();
    let workflow = load_str(&TICKET_WAIT.replace("TIMEOUT", "1d"), "ticket.yaml").unwrap();
    let report = engine.start(&workflow, json!({ "ticket": 7 })).await.unwrap();
    assert_eq!(report.status, RunStatus::Suspended);
    let now = || stepwright_core::store::quota::wall_now();
    let wake_at = || async { store.load(report.run_id).await.unwrap().record.wake_at.unwrap() };
    assert!(wake_at().await > now().plus(std::time::Duration::from_secs(3600)));
    store.append_event(ticket_event(&engine, json!({ "ticket": 8 }))).await.unwrap();
    assert!(wake_at().await <= now(), "an event of its name made the run due");
    let resumed = engine.resume(&workflow, report.run_id).await.unwrap();
    assert_eq!(resumed.status, RunStatus::Suspended, "another ticket's: it waits on");
    assert!(wake_at().await > now().plus(std::time::Duration::from_secs(3600)));
    store.append_event(ticket_event(&engine, json!({ "ticket": 7, "state": "closed" }))).await.unwrap();
    assert!(wake_at().await <= now(), "watched again after it suspended again");
    let resumed = engine.resume(&workflow, report.run_id).await.unwrap();
    assert_eq!(
        (resumed.status, resumed.output),
        (RunStatus::Completed, Some(json!({ "ticket": 7, "state": "closed" })))
    );
}
