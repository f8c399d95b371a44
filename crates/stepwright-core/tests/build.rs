//! Options that cannot be honoured are rejected when the workflow is built, all at once.

use std::time::Duration;

use serde_json::{Value, json};
use stepwright_core::{
    Branch, Effect, Every, Expr, FnGuardrail, Fork, ForkMode, Graph, Guardrail, GuardrailAction, GuardrailStage, Loop,
    Node, OnFailure, RetryPolicy, Workflow, fn_step,
};

fn noop(id: &str) -> Node {
    Node::step(id, fn_step(|_c, x: Value| async move { Ok(x) }))
}

fn problems(builder: stepwright_core::WorkflowBuilder) -> Vec<String> {
    builder.build().unwrap_err().problems.into_iter().map(|p| p.to_string()).collect()
}

#[test]
fn every_problem_is_reported_with_its_location() {
    let found = problems(
        Workflow::builder("Bad_Name")
            .version("")
            .step(noop("a"))
            .step(noop("a"))
            .step(noop("B"))
            .step(noop("r").retry(RetryPolicy::new(0)))
            .step(
                noop("d")
                    .retry(RetryPolicy::new(2).initial_delay(Duration::from_secs(5)).max_delay(Duration::from_secs(1))),
            )
            .step(noop("j").retry(RetryPolicy::new(2).jitter(1.5)))
            .step(noop("t").timeout(Duration::ZERO))
            .step(noop("f").on_failure(OnFailure::Retry))
            .step(noop("c").cache().effect(Effect::Write))
            .step(Node::sequence("s", [noop("x")]).cache())
            .step(Node::sequence("e", [noop("x")]).effect(Effect::Read))
            .step(noop("safe").safe_to_retry())
            .step(noop("g").guardrail(Guardrail::new(
                GuardrailStage::Output,
                GuardrailAction::Redact,
                FnGuardrail::new("no-redact", |_v: &Value| None),
            )))
            .step(noop("fb").on_failure(OnFailure::Fallback(Box::new(noop("Bad")))))
            .step(Node::sequence("outer", [noop("inner"), noop("inner")]))
            .input_schema(json!({ "type": "no-such-type" })),
    );
    let expected = [
        "<workflow>: workflow name: \"Bad_Name\" must start with a lowercase letter (a-z)",
        "<workflow>: version must not be empty",
        "<workflow>: input schema is not a valid JSON Schema",
        "a: duplicate step id \"a\" in the same scope",
        "B: step id: \"B\" must start with a lowercase letter (a-z)",
        "r: retry.max_attempts must be at least 1",
        "d: retry.initial_delay (5s) is larger than retry.max_delay (1s)",
        "j: retry.jitter must be within 0..=1, not 1.5",
        "t: timeout must be longer than zero",
        "f: on_failure: retry needs a retry policy (max_attempts, backoff)",
        "c: cache needs a pure step, but this step's effect is write",
        "s: cache applies to steps, not to a sequence",
        "e: effect applies to steps, not to a sequence",
        "safe: safe_to_retry applies only to write or external steps",
        "g: guardrail \"no-redact\" cannot redact, so its action cannot be redact",
        "fb/fallback: step id: \"Bad\" must start with a lowercase letter (a-z)",
        "outer/inner: duplicate step id \"inner\" in the same scope",
    ];
    for line in expected {
        assert!(found.iter().any(|f| f.starts_with(line)), "missing {line:?} in {found:#?}");
    }
    assert_eq!(found.len(), expected.len(), "{found:#?}");
}

#[test]
fn operator_options_are_checked() {
    let found = problems(
        Workflow::builder("ops")
            .step(Branch::new("br"))
            .step(Fork::new("empty"))
            .step(Fork::new("zero").path([noop("x")]).concurrency(0))
            .step(Fork::map("m", Expr::new(|_| vec![]), "item", [noop("x")]).mode(ForkMode::Race))
            .step(Loop::new("l", 0, [noop("x")]))
            .step(Loop::new("p", 1, [noop("x")]).inbox("in", Duration::ZERO))
            .step(Graph::new("g", 0).node(noop("a")).edge("a", "nowhere").entry("missing"))
            .step(Every::new("ev", Duration::ZERO, [noop("x")]).jitter(1.0))
            .step(Node::sleep("nap", Duration::ZERO))
            .step(Node::sequence("seq", [])),
    );
    let expected = [
        "br: branch needs at least one `when` arm",
        "empty: fork needs at least one path",
        "zero: fork concurrency must be at least 1",
        "m: map always fails fast",
        "l: loop max_iterations must be at least 1",
        "p: loop park_timeout must be longer than zero",
        "g: graph max_steps must be at least 1",
        "g: graph entry \"missing\" is not one of its nodes",
        "g: graph edge \"a\" -> \"nowhere\" names unknown node \"nowhere\"",
        "ev: every interval must be longer than zero",
        "ev: every jitter must be within 0..1, not 1",
        "nap: sleep duration must be longer than zero",
        "seq: sequence needs at least one step",
    ];
    for line in expected {
        assert!(found.iter().any(|f| f.starts_with(line)), "missing {line:?} in {found:#?}");
    }
    assert_eq!(found.len(), expected.len(), "{found:#?}");
}

#[test]
fn the_definition_hash_follows_structure() {
    let build = |retries: u32| Workflow::builder("h").step(noop("a").retry(RetryPolicy::new(retries))).build().unwrap();
    assert_eq!(build(3).hash(), build(3).hash());
    assert_ne!(build(3).hash(), build(4).hash());
    let renamed = Workflow::builder("h").step(noop("b").retry(RetryPolicy::new(3))).build().unwrap();
    assert_ne!(build(3).hash(), renamed.hash());
    assert_eq!(build(3).describe()["steps"][0]["retry"]["max_attempts"], 3);
}

#[test]
fn an_empty_workflow_is_rejected() {
    assert_eq!(problems(Workflow::builder("empty")), ["<workflow>: a workflow needs at least one step"]);
}
