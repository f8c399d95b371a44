//! Loading workflow files: they run like Rust-built workflows, and broken ones report every
//! problem with its position.

use std::sync::Arc;

use serde_json::json;
use stepwright_core::{Caller, Decision, Engine, InMemoryStore, RunStatus, Store};
use stepwright_flow::load_str;

const TRIAGE: &str = r#"
workflow: triage
version: "1.0.0"
input:
  type: object
  required: [tickets]
  properties: { tickets: { type: array } }
steps:
  - id: count
    set: "{{ input.tickets | length }}"
  - id: sized
    set:
      total: "{{ steps.count.output }}"
      label: "{{ steps.count.output }} tickets"
  - id: route
    branch:
      - when: steps.count.output > 2
        steps:
          - id: busy
            set: "busy"
      - otherwise:
          - id: calm
            set: "calm"
  - id: each
    map:
      items: "{{ input.tickets }}"
      as: ticket
      concurrency: 2
      steps:
        - id: shout
          set: "{{ ticket | upper }}"
  - id: both
    fork:
      mode: all
      paths:
        - [ { id: first, set: "{{ steps.each.output[0] }}" } ]
        - [ { id: last, set: "{{ steps.each.output[-1] }}" } ]
  - id: skipped
    if: steps.count.output > 100
    set: "never"
  - id: wait
    sleep: 2s
  - id: refine
    loop:
      max_iterations: 5
      until: loop.iteration >= 3
      steps:
        - id: turn
          set: "{{ loop.iteration }}"
  - id: review
    approval:
      message: "Ship {{ steps.sized.output.label }}?"
      approvers: ["role:lead"]
output:
  mood: "{{ steps.route.output }}"
  shouted: "{{ steps.each.output }}"
  ends: "{{ steps.both.output }}"
  turns: "{{ steps.refine.output }}"
  skipped: "{{ steps.skipped.output }}"
  approved: "{{ steps.review.output }}"
"#;

#[tokio::test(start_paused = true)]
async fn a_workflow_file_runs_end_to_end() {
    let workflow = load_str(TRIAGE, "triage.yaml").unwrap();
    assert_eq!(workflow.name(), "triage");
    let engine = Engine::builder().store(Arc::new(InMemoryStore::new()) as Arc<dyn Store>).build();
    let report = engine.start(&workflow, json!({ "tickets": ["a", "b", "c"] })).await.unwrap();
    assert_eq!(report.status, RunStatus::Suspended);
    assert_eq!(report.pending[0].message, "Ship 3 tickets?");
    // An approval's payload is its input (here, the loop's output); approving passes it on.
    let lead = Caller::user(None, "ann").with_role("lead");
    engine.resolve(report.run_id, &report.pending[0].id, Decision::Approve, &lead).await.unwrap();
    let done = engine.resume(&workflow, report.run_id).await.unwrap();
    assert_eq!(
        done.output,
        Some(json!({
            "mood": "busy",
            "shouted": ["A", "B", "C"],
            "ends": ["A", "C"],
            "turns": 3,
            "skipped": null,
            "approved": 3,
        }))
    );
    // The workflow's input schema applies.
    assert!(engine.start(&workflow, json!({})).await.is_err());
}

const BROKEN: &str = r#"workflow: Bad_Name
stepz: []
steps:
  - id: a
    set: 1
    retyr: { max_attempts: 2 }
  - id: a
    set: 2
  - set: 3
  - id: two
    set: 1
    sleep: 1s
  - id: nothing
    description: no kind
  - id: talk
    llm: { model: fast, prompt: hi }
  - id: cond
    if: "steps.a.output =="
    set: 1
  - id: ref
    set: "{{ steps.unknown.output }}"
  - id: nap
    sleep: soon
  - id: fan
    fork:
      mode: sideways
      paths: [ [ { id: x, set: 1 } ] ]
  - id: never-tries
    set: 1
    retry: { max_attempts: 0 }
"#;

#[test]
fn a_broken_file_reports_every_problem_with_its_position() {
    let error = load_str(BROKEN, "broken.yaml").unwrap_err();
    let lines: Vec<String> = error.diagnostics.iter().map(ToString::to_string).collect();
    let expected = [
        "broken.yaml:2:1: unknown field `stepz` in the workflow (hint: did you mean `steps`?)",
        "broken.yaml:6:5: unknown field `retyr` in a step (hint: did you mean `retry`?)",
        "broken.yaml:7:9: duplicate step id `a` in the same scope",
        "broken.yaml:9:5: a step needs an `id` (hint: add `id: a-name` to the step)",
        "broken.yaml:10:5: step `two` has 2 kinds (`set`, `sleep`); a step has exactly one",
        "broken.yaml:13:5: step `nothing` has no kind",
        "broken.yaml:16:19: model `fast` is not declared under `models`",
        "broken.yaml:18:9: the `if` condition `steps.a.output ==` does not parse",
        "broken.yaml:21:10: `steps.unknown` refers to no step declared before this point",
        "broken.yaml:23:12: `sleep` `soon` is not a duration (hint: write it like 500ms, 30s, 5m, 2h or 1d)",
        "broken.yaml:26:13: unknown fork `mode` (hint: one of: all, race, settle)",
        // Found by the core's build checks, placed at the step.
        "broken.yaml:28:5: retry.max_attempts must be at least 1",
    ];
    for want in expected {
        assert!(lines.iter().any(|l| l.starts_with(want)), "missing {want:?} in:\n{}", lines.join("\n"));
    }
    assert!(error.to_string().contains("broken.yaml:2:1"), "the error lists them all");
}

#[test]
fn yaml_syntax_errors_have_a_position() {
    let error = load_str("workflow: x\nsteps: [\n", "syntax.yaml").unwrap_err();
    assert_eq!(error.diagnostics.len(), 1);
    assert!(error.diagnostics[0].line >= 2, "{}", error.diagnostics[0]);
}

#[tokio::test(start_paused = true)]
async fn input_steps_ask_for_a_value_matching_their_schema() {
    let workflow = load_str(
        r#"
workflow: ask
steps:
  - id: size
    input:
      message: How many?
      schema: { type: integer, minimum: 1 }
  - id: double
    set: "{{ steps.size.output * 2 }}"
"#,
        "ask.yaml",
    )
    .unwrap();
    let engine = Engine::default();
    let report = engine.start(&workflow, json!(null)).await.unwrap();
    let id = report.pending[0].id.clone();
    let anyone = Caller::default();
    assert!(engine.resolve(report.run_id, &id, Decision::Respond { value: json!(0) }, &anyone).await.is_err());
    engine.resolve(report.run_id, &id, Decision::Respond { value: json!(21) }, &anyone).await.unwrap();
    assert_eq!(engine.resume(&workflow, report.run_id).await.unwrap().output, Some(json!(42)));
}

#[test]
fn the_definition_hash_covers_templates_and_is_stable() {
    let a = "workflow: w\nsteps:\n  - id: s\n    set: \"{{ input.x }}\"\n";
    let b = "workflow: w\nsteps:\n  - id: s\n    set: \"{{ input.y }}\"\n";
    assert_eq!(load_str(a, "a").unwrap().hash(), load_str(a, "a").unwrap().hash(), "the same file, the same hash");
    assert_ne!(load_str(a, "a").unwrap().hash(), load_str(b, "b").unwrap().hash(), "a changed template changes it");
}

/// A form shows fields in the order the file declares them; the order rides outside the
/// hash (the schema is the same schema), on the workflow and on an `input` step's request.
#[tokio::test]
async fn a_schemas_field_order_is_kept_for_forms_and_left_out_of_the_hash() {
    // The same schemas, their properties written in the order given.
    let file = |first: &str, second: &str| {
        let kind = |name: &str| if name == "alpha" { "integer" } else { "string" };
        let (a, b) = (kind(first), kind(second));
        format!(
            "workflow: w\ninput: {{ type: object, properties: {{ {first}: {{ type: {a} }}, {second}: {{ type: {b} }} }} }}\n\
             steps:\n  - id: ask\n    input:\n      message: Rate it\n      schema:\n        type: object\n        \
             properties:\n          {second}: {{ type: {b} }}\n          {first}: {{ type: {a} }}\n"
        )
    };
    let (zeta_first, alpha_first) =
        (load_str(&file("zeta", "alpha"), "w.yaml").unwrap(), load_str(&file("alpha", "zeta"), "w.yaml").unwrap());
    assert_eq!(zeta_first.hash(), alpha_first.hash(), "the order is not part of the definition");
    let schema = zeta_first.input_schema_for_forms().unwrap();
    assert_eq!(schema[stepwright_core::FIELD_ORDER], json!(["zeta", "alpha"]));
    assert_eq!(alpha_first.input_schema_for_forms().unwrap()[stepwright_core::FIELD_ORDER], json!(["alpha", "zeta"]));

    let store = Arc::new(InMemoryStore::new());
    let engine = Engine::builder().store(store.clone()).build();
    let asked = engine.start(&zeta_first, json!({})).await.unwrap();
    assert_eq!(asked.status, RunStatus::Suspended);
    let loaded = store.load(asked.run_id).await.unwrap();
    let open = loaded.open_interrupts();
    let schema = open[0].request.schema.as_ref().unwrap();
    assert_eq!(schema[stepwright_core::FIELD_ORDER], json!(["alpha", "zeta"]));
    // The annotation is not a constraint: an answer is checked by the schema alone.
    let id = asked.pending[0].id.clone();
    let answer = Decision::Respond { value: json!({ "alpha": 3, "zeta": "x" }) };
    let answered = engine.resolve(asked.run_id, &id, answer, &Caller::default()).await;
    assert!(answered.is_ok(), "{answered:?}");
}

const GUARDED: &str = r#"
workflow: guarded
input: { type: object }
steps:
  - id: letter
    set: "Dear {{ input.name }}, your SSN 123-45-6789 is on file."
    guardrails:
      - { on: output, action: redact, pattern: '\d{3}-\d{2}-\d{4}' }
      - { on: output, action: warn, when: "value | length > 20" }
  - id: order
    set: { amount: "{{ input.amount }}" }
  # `on: input` sees what the step receives: here the previous step's output.
  - id: charge
    set: "{{ steps.order.output.amount }}"
    guardrails:
      - { on: input, when: "value.amount > 1000" }
"#;

#[tokio::test]
async fn guardrails_in_a_file_redact_warn_and_block() {
    let workflow = load_str(GUARDED, "guarded.yaml").unwrap();
    let store = Arc::new(InMemoryStore::new());
    let engine = Engine::builder().store(store.clone()).build();
    let fine = engine.start(&workflow, json!({ "name": "Ann", "amount": 5 })).await.unwrap();
    assert_eq!(fine.status, RunStatus::Completed, "{:?}", fine.error);
    assert_eq!(fine.output, Some(json!(5)));
    let loaded = store.load(fine.run_id).await.unwrap();
    let letter = loaded
        .entries
        .iter()
        .find_map(|e| match &e.record {
            stepwright_core::Record::Completed { output, .. } if e.path.as_str() == "letter" => Some(output),
            _ => None,
        })
        .unwrap();
    assert_eq!(
        *loaded.blobs[letter],
        json!("Dear Ann, your SSN [REDACTED] is on file."),
        "redacted before it is recorded"
    );
    let warnings: Vec<_> =
        store.events(fine.run_id).await.unwrap().into_iter().filter(|e| e.kind == "guardrail.warning").collect();
    // A redaction is recorded too, so the log shows that the output was changed.
    let guardrails: Vec<_> =
        warnings.iter().map(|w| (w.path.as_str(), w.data["guardrail"].as_str().unwrap())).collect();
    assert_eq!(guardrails, [("letter", r"pattern /\d{3}-\d{2}-\d{4}/"), ("letter", "when value | length > 20")]);

    let blocked = engine.start(&workflow, json!({ "name": "Bo", "amount": 5000 })).await.unwrap();
    assert_eq!(blocked.status, RunStatus::Failed);
    let error = blocked.error.unwrap();
    assert_eq!(error.code.as_str(), "guardrail_blocked", "{error:?}");
}

#[test]
fn guardrails_are_part_of_the_definition_hash() {
    let with = |pattern: &str| {
        format!("workflow: w\nsteps:\n  - id: s\n    set: x\n    guardrails: [{{ pattern: '{pattern}' }}]\n")
    };
    let a = load_str(&with("a+"), "a").unwrap().hash();
    assert_eq!(a, load_str(&with("a+"), "a").unwrap().hash());
    assert_ne!(a, load_str(&with("b+"), "b").unwrap().hash(), "a changed pattern changes the hash");
}

#[tokio::test(start_paused = true)]
async fn every_in_a_file_ticks_wakes_early_and_runs_until_cancelled() {
    let workflow = load_str(
        r#"
workflow: poller
steps:
  - id: poll
    every:
      interval: 10s
      wake: kick
      on_error: continue
      steps:
        - id: tick
          set: "tick {{ tick }}"
"#,
        "poller.yaml",
    )
    .unwrap();
    let store = Arc::new(InMemoryStore::new());
    let engine = Engine::builder().store(store.clone()).build();
    let run_id: stepwright_core::RunId = "01890000-0000-7000-8000-0000000000f1".parse().unwrap();
    let driver = {
        let engine = engine.clone();
        tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_secs(13)).await;
            engine.wake(run_id, "kick").await.unwrap();
            tokio::time::sleep(std::time::Duration::from_secs(5)).await;
            engine.cancel(run_id, "done polling").await.unwrap();
        })
    };
    let options = stepwright_core::StartOptions { run_id: Some(run_id), ..Default::default() };
    let report = engine.start_with(&workflow, json!(null), options).await.unwrap();
    driver.await.unwrap();
    assert_eq!(report.status, RunStatus::Cancelled);
    let loaded = store.load(run_id).await.unwrap();
    let ticks: Vec<(String, serde_json::Value)> = loaded
        .entries
        .iter()
        .filter_map(|e| match &e.record {
            stepwright_core::Record::Completed { output, .. } if e.path.as_str().ends_with("/tick") => {
                Some((e.path.as_str().to_owned(), (*loaded.blobs[output]).clone()))
            }
            _ => None,
        })
        .collect();
    // Ticks at 0 and 10 s, then woken at 13 s; cancelled at 18 s, before the next.
    let expected = [("poll#1/tick", "tick 1"), ("poll#2/tick", "tick 2"), ("poll#3/tick", "tick 3")];
    let expected: Vec<(String, serde_json::Value)> =
        expected.iter().map(|(p, v)| ((*p).to_owned(), json!(v))).collect();
    assert_eq!(ticks, expected);
}

#[tokio::test(start_paused = true)]
async fn every_on_error_fail_ends_the_run_and_jitter_is_part_of_the_definition() {
    let file = |extra: &str| {
        format!(
            "workflow: w\nsteps:\n  - id: poll\n    every:\n      interval: 1m\n{extra}      steps:\n        - id: t\n          set: \"{{{{ input.missing.field }}}}\"\n"
        )
    };
    let failing = load_str(&file("      on_error: fail\n"), "w.yaml").unwrap();
    let report = Engine::default().start(&failing, json!(null)).await.unwrap();
    assert_eq!(report.status, RunStatus::Failed, "the first failed tick ends the run");
    let plain = load_str(&file(""), "w.yaml").unwrap().hash();
    assert_ne!(plain, load_str(&file("      jitter: 0.2\n"), "w.yaml").unwrap().hash());
    assert_ne!(plain, failing.hash());
}

const REVIEWED: &str = r#"
workflow: reviewed
steps:
  - id: cycle
    graph:
      max_steps: 10
      entry: draft
      nodes:
        - id: critique
          set: { score: "{{ steps.draft.output | length }}" }
        - id: draft
          set: "{{ (steps.draft.output if steps.draft is defined else '') ~ 'x' }}"
        - id: publish
          set: "published {{ steps.draft.output }}"
      edges:
        - { from: draft, to: critique }
        - { from: critique, to: draft, when: "steps.critique.output.score < 3" }
        - { from: critique, to: publish }
"#;

#[tokio::test]
async fn graphs_in_a_file_route_by_their_edges() {
    let workflow = load_str(REVIEWED, "reviewed.yaml").unwrap();
    let store = Arc::new(InMemoryStore::new());
    let engine = Engine::builder().store(store.clone()).build();
    let report = engine.start(&workflow, json!(null)).await.unwrap();
    assert_eq!(report.status, RunStatus::Completed, "{:?}", report.error);
    assert_eq!(report.output, Some(json!("published xxx")));
    let visited: Vec<String> = store
        .load(report.run_id)
        .await
        .unwrap()
        .entries
        .iter()
        .filter(|e| matches!(e.record, stepwright_core::Record::Completed { .. }) && e.path.as_str() != "cycle")
        .map(|e| e.path.as_str().to_owned())
        .collect();
    let expected = [
        "cycle/draft#1",
        "cycle/critique#1",
        "cycle/draft#2",
        "cycle/critique#2",
        "cycle/draft#3",
        "cycle/critique#3",
        "cycle/publish#1",
    ];
    assert_eq!(visited, expected);

    // `max_steps` bounds the cycle.
    let bounded = load_str(&REVIEWED.replace("max_steps: 10", "max_steps: 4"), "bounded.yaml").unwrap();
    let report = engine.start(&bounded, json!(null)).await.unwrap();
    assert_eq!(report.status, RunStatus::Failed);
    assert_eq!(report.error.unwrap().code.as_str(), "max_steps");
}

/// Strict undefined holds for a string that is one expression too: a misspelt field fails
/// the step with an `expression` error that names it, instead of quietly becoming `null`.
#[tokio::test]
async fn a_misspelt_field_in_one_expression_fails_the_step() {
    let workflow = load_str("workflow: w\nsteps:\n  - id: greet\n    set: \"{{ input.nmae }}\"\n", "w.yaml").unwrap();
    let report = Engine::default().start(&workflow, json!({ "name": "ann" })).await.unwrap();
    assert_eq!(report.status, RunStatus::Failed);
    let error = report.error.expect("an error");
    assert_eq!(error.code.as_str(), "expression");
    assert!(error.message.contains("input.nmae"), "{}", error.message);
    let nested = load_str("workflow: w\nsteps:\n  - id: greet\n    set: \"{{ [input.nmae] }}\"\n", "w.yaml").unwrap();
    let report = Engine::default().start(&nested, json!({ "name": "ann" })).await.unwrap();
    assert_eq!(report.status, RunStatus::Failed, "an undefined value inside a list is caught too");
    let condition =
        load_str("workflow: w\nsteps:\n  - id: greet\n    if: input.flagg\n    set: 1\n", "w.yaml").unwrap();
    let report = Engine::default().start(&condition, json!({ "flag": true })).await.unwrap();
    assert_eq!(report.status, RunStatus::Failed, "a condition on a misspelt field is an error, not false");
}

/// Templates see the run: its id, workflow, tenant, user and roles.
#[tokio::test]
async fn templates_see_the_run_and_who_started_it() {
    let workflow = load_str(
        "workflow: who\nsteps:\n  - id: me\n    set: { id: \"{{ run.id }}\", line: \"{{ run.user }}@{{ run.tenant }} as {{ run.roles | join(',') }} in {{ run.workflow }}\" }\n",
        "who.yaml",
    )
    .unwrap();
    let caller = Caller::user(Some("acme"), "ann").with_role("lead").with_role("ops");
    let options = stepwright_core::StartOptions { caller, ..Default::default() };
    let report = Engine::default().start_with(&workflow, json!(null), options).await.unwrap();
    assert_eq!(report.status, RunStatus::Completed, "{:?}", report.error);
    let output = report.output.unwrap();
    assert_eq!(output["id"], json!(report.run_id.to_string()));
    assert_eq!(output["line"], json!("ann@acme as lead,ops in who"));
}

/// An `input` step's message is rendered as an approval's is: the person sees the values,
/// not the template.
#[tokio::test(start_paused = true)]
async fn an_input_message_is_rendered_like_an_approval_message() {
    let source = r#"
workflow: billing
steps:
  - id: summarize
    set: "the March invoices"
  - id: centre
    input:
      message: "Which cost centre pays for: {{ steps.summarize.output }}?"
      schema: { type: string }
"#;
    let workflow = load_str(source, "billing.yaml").unwrap();
    let engine = Engine::builder().store(Arc::new(InMemoryStore::new()) as Arc<dyn Store>).build();
    let report = engine.start(&workflow, json!(null)).await.unwrap();
    assert_eq!(report.pending[0].message, "Which cost centre pays for: the March invoices?");
    // A reference to no step is caught by the loader, as in an approval's message.
    let broken = source.replace("steps.summarize.output", "steps.sumarize.output");
    let problems = load_str(&broken, "billing.yaml").unwrap_err().to_string();
    assert!(problems.contains("sumarize"), "{problems}");
}

/// `input.NAME` in a template is checked against the input schema's properties: a typo is
/// named with the property it likely meant — a warning, or an error where the schema allows
/// no other property.
#[test]
fn an_input_name_the_schema_does_not_declare_is_reported() {
    let open = r#"
workflow: greet
input: { type: object, properties: { name: { type: string } } }
steps:
  - id: hello
    set: "Hello, {{ input.nmae }}"
  - id: fine
    set: "{{ input.name }} and {{ steps.hello.input }}"
"#;
    let loaded = stepwright_flow::load_source(open, "greet.yaml").unwrap();
    let warnings: Vec<String> = loaded.warnings.iter().map(ToString::to_string).collect();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains(
            "greet.yaml:6:10: `input.nmae` names no property of the workflow's input (its schema declares `name`)"
        ),
        "{warnings:?}"
    );
    assert!(warnings[0].contains("did you mean `name`?"), "{warnings:?}");
    let closed = open.replace(
        "properties: { name: { type: string } } }",
        "properties: { name: { type: string } }, additionalProperties: false }",
    );
    let problems = load_str(&closed, "greet.yaml").unwrap_err().to_string();
    assert!(problems.contains("`input.nmae` names no property"), "{problems}");
}
