//! What templates see of a run, read lazily from its scope (only what an expression names is
//! converted): the same as a JSON copy of the whole scope would give — the steps as a map
//! (its length, its keys, membership, rendered whole as JSON), a map's variable, the input
//! — and a field that does not exist is an error, as before (a name that does not exist is
//! refused when the file is loaded).

use std::sync::Arc;

use serde_json::{Value, json};
use stepwright_core::{Engine, InMemoryStore, RunStatus, Store};
use stepwright_flow::load_str;

async fn run(source: &str, input: Value) -> stepwright_core::RunReport {
    let workflow = load_str(source, "scope.yaml").unwrap_or_else(|e| panic!("{e}"));
    let engine = Engine::builder().store(Arc::new(InMemoryStore::new()) as Arc<dyn Store>).build();
    engine.start(&workflow, input).await.unwrap()
}

#[tokio::test]
async fn templates_see_the_scope_as_one_json_object() {
    let source = r#"
workflow: seen
steps:
  - id: a
    set: { x: [1, 2] }
  - id: b
    set: "{{ input.n + 1 }}"
  - id: each
    map:
      items: "{{ [10, 20] }}"
      as: item
      steps:
        - id: inner
          set: "{{ item + steps.b.output }}"
  - id: seen
    set:
      count: "{{ steps | length }}"
      keys: "{% for k in steps %}{{ k }},{% endfor %}"
      has_a: "{{ 'a' in steps }}"
      has_z: "{{ 'z' in steps }}"
      whole: "{{ steps.a }}"
      text: "a is {{ steps.a }}, x is {{ steps.a.output.x }}"
      mapped: "{{ steps.each.output }}"
      input: "{{ input }}"
"#;
    let report = run(source, json!({ "n": 4 })).await;
    assert_eq!(report.status, RunStatus::Completed, "{:?}", report.error);
    assert_eq!(
        report.output,
        Some(json!({
            "count": 3,
            "keys": "a,b,each,",
            "has_a": true,
            "has_z": false,
            "whole": { "output": { "x": [1, 2] } },
            "text": r#"a is {"output":{"x":[1,2]}}, x is [1,2]"#,
            "mapped": [15, 25],
            "input": { "n": 4 },
        }))
    );
}

#[tokio::test]
async fn a_name_or_field_that_does_not_exist_is_an_error() {
    for (expression, says) in [
        ("{{ steps.a.nope }}", "undefined"),
        ("{{ input.missing }}", "undefined"),
        ("{{ steps.a.output.deeper }}", "undefined"),
    ] {
        let source =
            format!("workflow: missing\nsteps:\n  - id: a\n    set: 1\n  - id: b\n    set: \"{expression}\"\n");
        let report = run(&source, json!(null)).await;
        assert_eq!(report.status, RunStatus::Failed, "{expression}");
        let error = report.error.unwrap();
        assert_eq!(error.code.as_str(), "expression", "{expression}: {error:?}");
        assert!(error.message.contains(says), "{expression}: {}", error.message);
    }
}

/// An experiment's evaluators speak the same language over named values: the same answers as
/// over one JSON object of them, and a name not given is an `expression` error.
#[test]
fn named_values_are_seen_as_one_json_object_would_be() {
    let (old, new, input) =
        (json!({ "category": "bug", "n": 2 }), json!({ "category": "billing", "n": 5 }), json!("it crashes"));
    let names = [("old", &old), ("new", &new), ("input", &input)];
    let whole = json!({ "old": old, "new": new, "input": input });
    for source in
        ["new.category == old.category", "new.n - old.n", "input ~ '!'", "old | length", "[new.n, old.n] | max"]
    {
        assert_eq!(
            stepwright_flow::Expression::parse(source).unwrap().eval_over(&names).unwrap(),
            stepwright_flow::eval_expression(source, &whole).unwrap(),
            "{source}"
        );
    }
    let over = |source: &str| stepwright_flow::Expression::parse(source).unwrap().eval_over(&names);
    assert_eq!(over("new.n - old.n").unwrap(), json!(3));
    let missing = over("output.n > 1").unwrap_err();
    assert_eq!(missing.code.as_str(), "expression", "{missing:?}");
}
