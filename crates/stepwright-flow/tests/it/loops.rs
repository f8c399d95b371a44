//! A file's `loop` at parity with `Loop`: `inbox` and `park_timeout`, `prepare_next`, and
//! `on_error`. Each test fails if its field does nothing.

use std::sync::Arc;

use serde_json::{Value, json};
use stepwright_core::{Engine, InMemoryStore, RunId, RunStatus, StartOptions, Store};
use stepwright_flow::load_str;

fn engine() -> Engine {
    Engine::builder().store(Arc::new(InMemoryStore::new()) as Arc<dyn Store>).build()
}

/// Sends `messages` to the run's inbox `notes`, then runs the file with `input`.
async fn run_with_messages(source: &str, input: Value, messages: &[&str]) -> (RunStatus, Option<Value>) {
    let workflow = load_str(source, "loop.yaml").unwrap_or_else(|e| panic!("{e}"));
    let engine = engine();
    let run = RunId::from_bytes(*uuid_bytes());
    for message in messages {
        engine.send(run, "notes", json!(message)).await.unwrap();
    }
    let report = engine.start_with(&workflow, input, StartOptions { run_id: Some(run), ..Default::default() }).await;
    let report = report.unwrap();
    (report.status, report.output)
}

fn uuid_bytes() -> &'static [u8; 16] {
    // A UUIDv7-shaped id: version 7, variant 10.
    &[0x01, 0x9a, 0, 0, 0, 0, 0x70, 0, 0x80, 0, 0, 0, 0, 0, 0, 1]
}

/// One message per iteration, in order; the loop ends when none comes within the park
/// timeout; each iteration's input is what `prepare_next` made of the one before.
#[tokio::test]
async fn a_loop_takes_its_inbox_one_message_an_iteration_and_prepares_the_next_input() {
    let source = r#"
workflow: notes
steps:
  - id: gather
    loop:
      max_iterations: 10
      inbox: notes
      park_timeout: 200ms
      prepare_next: "{{ steps.add.output | upper }}"
      steps:
        - id: add
          set: "{{ loop.input ~ loop.message }}"
"#;
    let (status, output) = run_with_messages(source, json!(""), &["a", "b"]).await;
    // "a"; then from "A": "Ab". Without prepare_next it would be "ab"; without the inbox, no
    // message at all.
    assert_eq!((status, output), (RunStatus::Completed, Some(json!("Ab"))));
    let without = source.replace("      prepare_next: \"{{ steps.add.output | upper }}\"\n", "");
    assert_eq!(run_with_messages(&without, json!(""), &["a", "b"]).await.1, Some(json!("ab")));
}

const CHECKED: &str = r#"
workflow: checked
tools:
  check:
    description: Fails for "bad", and the first time it sees a message it was told to fail once for
    input: { type: object, required: [m, marker], properties: { m: { type: string }, marker: { type: string } } }
    command: [sh, -c, "test \"$1\" != bad || exit 1; case \"$1\" in once*) [ -e \"$2\" ] || { touch \"$2\"; exit 1; };; esac; printf '%s' \"$1\"", sh, "{{ args.m }}", "{{ args.marker }}"]
    effect: read
steps:
  - id: each
    loop:
      max_iterations: 10
      inbox: notes
      park_timeout: 200ms
ON_ERROR
      steps:
        - id: checked
          tool: check
          with: { m: "{{ loop.message }}", marker: "{{ input }}/{{ loop.message }}" }
"#;

/// `on_error: skip` moves past a failed iteration to the next message; `retry` runs the
/// failed iteration again with the same message; without it (abort) the loop fails.
#[tokio::test]
async fn a_loop_skips_or_retries_a_failed_iteration_as_on_error_says() {
    let dir = tempfile::tempdir().unwrap();
    let marker = json!(dir.path().display().to_string());
    let with = |on_error: &str| CHECKED.replace("ON_ERROR\n", &format!("      on_error: {on_error}\n"));
    let (status, output) = run_with_messages(&with("skip"), marker.clone(), &["a", "bad", "c"]).await;
    assert_eq!((status, output), (RunStatus::Completed, Some(json!("c"))), "skip: past bad to c");
    let (status, output) = run_with_messages(&with("retry"), marker.clone(), &["once-x"]).await;
    assert_eq!((status, output), (RunStatus::Completed, Some(json!("once-x"))), "retry: the second attempt passes");
    let (status, _) = run_with_messages(&CHECKED.replace("ON_ERROR\n", ""), marker.clone(), &["a", "bad", "c"]).await;
    assert_eq!(status, RunStatus::Failed, "abort, the default: the loop fails at bad");
    let (status, _) = run_with_messages(&with("abort"), marker, &["once-y"]).await;
    assert_eq!(status, RunStatus::Failed, "abort said: the first failure ends it");
}

/// A step's `input_schema` is checked before it runs; a workflow's `output_schema` when the
/// run ends. Each fails the run with its code where it does not hold, and only there.
#[tokio::test]
async fn a_steps_input_schema_and_a_workflows_output_schema_are_checked() {
    let source = |n: &str, out: &str| {
        format!(
            "workflow: checked\noutput_schema: {{ type: object, required: [total], properties: {{ total: {{ type: {out} }} }} }}\n\
             steps:\n  - id: first\n    set: {{ n: {n} }}\n  - id: sum\n    input_schema: {{ type: object, required: [n], \
             properties: {{ n: {{ type: integer }} }} }}\n    set: {{ total: \"{{{{ steps.first.output.n + 1 }}}}\" }}\n"
        )
    };
    let run = |text: String| async move {
        let workflow = load_str(&text, "checked.yaml").unwrap_or_else(|e| panic!("{e}"));
        engine().start(&workflow, json!(null)).await.unwrap()
    };
    let fine = run(source("1", "integer")).await;
    assert_eq!((fine.status, fine.output), (RunStatus::Completed, Some(json!({ "total": 2 }))));
    let bad_input = run(source("\"one\"", "integer")).await;
    assert_eq!(bad_input.status, RunStatus::Failed);
    assert_eq!(bad_input.error.map(|e| e.code.to_string()), Some("input_validation".to_owned()));
    let bad_output = run(source("1", "string")).await;
    assert_eq!(bad_output.status, RunStatus::Failed);
    assert_eq!(bad_output.error.map(|e| e.code.to_string()), Some("output_validation".to_owned()));
}
