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

/// A workflow with every operator and policy, for the compatibility checks below. Its steps
/// are named, so the hash does not depend on where a closure is defined.
fn every_kind() -> Workflow {
    let noop = |id: &str| {
        Node::dyn_step(
            id,
            stepwright_core::dyn_fn_step("noop", |_ctx, input| async move {
                Ok(stepwright_core::Outcome::completed((*input).clone()))
            }),
        )
    };
    let sub = Workflow::builder("sub").step(noop("inner")).build().unwrap();
    let when = |source: &str| Expr::new(|_| true).with_source(source);
    Workflow::builder("every-kind")
        .version("1.2.0")
        .input_schema(json!({ "type": "object" }))
        .step(noop("first").retry(RetryPolicy::new(3)).timeout(Duration::from_secs(2)).diff_key("id"))
        .step(Node::sequence("seq", [noop("a"), noop("b").on_failure(OnFailure::Fallback(Box::new(noop("spare"))))]))
        .step(Branch::new("route").when(when("input.x > 1"), [noop("big")]).otherwise([noop("small")]))
        .step(Fork::new("fan").path([noop("left")]).path([noop("right")]).mode(ForkMode::Settle))
        .step(Fork::map("each", Expr::new(|_| Vec::new()).with_source("input.items"), "item", [noop("one")]))
        .step(Loop::new("refine", 3, [noop("draft")]).until(Expr::new(|_| stepwright_core::Verdict::done("ok"))))
        .step(Graph::new("g", 5).node(noop("plan")).node(noop("act")).edge("plan", "act"))
        .step(Every::new("tick", Duration::from_secs(60), [noop("poll")]))
        .step(Node::workflow("call", &sub))
        .step(Node::sleep("nap", Duration::from_secs(1)))
        .build()
        .unwrap()
}

/// Stored runs are pinned to their definition's hash, so the canonical description must not
/// change shape between releases: a change here means existing runs could not be resumed.
#[test]
fn a_definitions_hash_does_not_change_across_releases() {
    assert_eq!(every_kind().hash().to_hex(), "12de75871d7219d53b0c9c78f581f13003ce7c0b59ec1fb874a38659b3a65c34");
}

/// The path patterns a definition produces (what a resume checks a journal against).
#[test]
fn path_patterns_cover_every_operator() {
    assert_eq!(
        every_kind().path_patterns(),
        [
            "first",
            "seq",
            "seq/a",
            "seq/b",
            "seq/b/@fallback",
            "route",
            "route/big",
            "route/small",
            "fan",
            "fan[*]",
            "fan[*]/left",
            "fan[*]/right",
            "each",
            "each[*]",
            "each[*]/one",
            "refine",
            "refine#*",
            "refine#*/draft",
            "g",
            "g#*",
            "g/plan#*",
            "g/act#*",
            "tick",
            "tick#*",
            "tick#*/poll",
            "call",
            "call/inner",
            "nap",
        ]
    );
    let journal = ["seq/b/@fallback", "g/plan#2", "refine#3/draft", "each[4]/one", "gone", "fan[0]/missing"];
    assert_eq!(every_kind().unknown_paths(journal), ["fan[0]/missing", "gone"]);
}
