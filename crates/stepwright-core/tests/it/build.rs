//! Options that cannot be honoured are rejected when the workflow is built, all at once.

use std::time::Duration;

use serde_json::{Value, json};
use stepwright_core::{
    Branch, Effect, Every, Expr, FnGuardrail, Fork, ForkMode, Graph, Guardrail, GuardrailAction, GuardrailStage, Loop,
    Node, OnFailure, OutlineLayout, OutlineNode, RetryPolicy, Workflow, fn_step,
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

/// A step that passes its input on, named `noop`: its identity is part of the pinned hashes.
fn pinned_noop(id: &str) -> Node {
    Node::dyn_step(
        id,
        stepwright_core::dyn_fn_step("noop", |_ctx, input| async move {
            Ok(stepwright_core::Outcome::completed((*input).clone()))
        }),
    )
}

/// A workflow with every operator and policy, for the compatibility checks below. Its steps
/// are named, so the hash does not depend on where a closure is defined.
fn every_kind() -> Workflow {
    let noop = pinned_noop;
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

/// The operators and options `every_kind` leaves out, pinned the same way.
fn every_other_kind() -> Workflow {
    let noop = pinned_noop;
    let sub = Workflow::builder("sub").step(noop("inner")).build().unwrap();
    let when = |source: &str| Expr::new(|_| true).with_source(source);
    let layer: std::sync::Arc<dyn stepwright_core::ProvidedLayer> =
        std::sync::Arc::new(stepwright_core::MapLayer::new("notes"));
    Workflow::builder("every-other-kind")
        .step(noop("first").cache().only_if(when("input.go")).capture_output("report"))
        .step(
            noop("write")
                .effect(Effect::Write)
                .safe_to_retry()
                .requires_approval(stepwright_core::ApprovalGate::new("ok?")),
        )
        .step(Node::wait("paid", "payment", Duration::from_secs(86_400)))
        .step(Node::wait_matching(
            "shipped",
            "shipment",
            Duration::from_secs(60),
            Expr::new(|_| json!({})).with_source("{ id: input.id }"),
        ))
        .step(Node::provide("mem", [layer], [noop("remember")]))
        .step(Node::spawn("child", &sub, Duration::from_secs(600)))
        .step(Branch::new("maybe").when(when("input.x"), [noop("yes")]))
        .step(
            Fork::new("dyn")
                .paths_from(Expr::new(|_| Vec::new()).with_source("input.list"), [noop("each")])
                .concurrency(2)
                .mode(ForkMode::Race)
                .merge_described("{{ results }}", |_| Ok(Value::Null)),
        )
        .step(
            Loop::new("chat", 9, [noop("turn")])
                .inbox("messages", Duration::from_secs(30))
                .prepare_next(Expr::new(|_| Value::Null).with_source("loop.message"))
                .on_error(stepwright_core::LoopOnError::Retry),
        )
        .step(
            Graph::new("agentic", 7)
                .node(noop("plan"))
                .node(noop("act"))
                .entry("act")
                .edge_if("act", "plan", when("steps.act.output.again"))
                .edge("plan", "act"),
        )
        .step(
            Every::new("beat", Duration::from_millis(1500), [noop("ping")])
                .jitter(0.1)
                .wake_on("nudge")
                .on_error(stepwright_core::EveryOnError::Fail),
        )
        .build()
        .unwrap()
}

/// The same for the operators and options `every_kind` leaves out (pinned when each
/// operator's description moved into its own file).
#[test]
fn the_other_kinds_hash_does_not_change_across_releases() {
    assert_eq!(every_other_kind().hash().to_hex(), "70a49441f2dc8eb49efad8c6a3434aaf69d5ec17d5674df2239b239e8b273748");
}

/// A node of an outline by its path of ids (`call/inner`), through any group.
fn outlined(nodes: &[OutlineNode], path: &str) -> OutlineNode {
    let (head, rest) = path.split_once('/').map_or((path, None), |(h, r)| (h, Some(r)));
    let node = nodes.iter().find(|n| n.id == head).unwrap_or_else(|| panic!("{head} is outlined"));
    match rest {
        None => node.clone(),
        Some(rest) => {
            let children: Vec<OutlineNode> = node.groups.iter().flat_map(|g| g.steps.clone()).collect();
            outlined(&children, rest)
        }
    }
}

/// What each operator says of its drawing: kind, label, layout, group labels; a called
/// workflow's steps under its call; a fallback's steps; the notes policies add.
#[test]
fn the_outline_draws_each_operator_by_its_layout() {
    let outline = every_kind().outline();
    assert_eq!((outline.name.as_str(), outline.version.as_str()), ("every-kind", "1.2.0"));
    let ids: Vec<&str> = outline.steps.iter().map(|n| n.id.as_str()).collect();
    assert_eq!(ids, ["first", "seq", "route", "fan", "each", "refine", "g", "tick", "call", "nap"]);
    let steps = &outline.steps;
    let first = outlined(steps, "first");
    assert_eq!((first.kind.as_str(), first.layout, first.groups.len()), ("noop", OutlineLayout::Step, 0));
    let seq = outlined(steps, "seq");
    assert_eq!((seq.label.as_str(), &seq.layout), ("", &OutlineLayout::Boxed));
    let b = outlined(steps, "seq/b");
    let fallback = b.fallback.as_ref().expect("b has a fallback");
    assert_eq!(fallback.label.as_deref(), Some("on failure"));
    assert_eq!(fallback.steps.iter().map(|n| n.id.as_str()).collect::<Vec<_>>(), ["spare"]);
    let route = outlined(steps, "route");
    assert_eq!(route.layout, OutlineLayout::Choice { falls_through: false });
    let arms: Vec<Option<&str>> = route.groups.iter().map(|g| g.label.as_deref()).collect();
    assert_eq!(arms, [Some("input.x > 1"), Some("otherwise")]);
    let fan = outlined(steps, "fan");
    assert_eq!((fan.kind.as_str(), fan.label.as_str()), ("fork", "fork (settle)"));
    assert_eq!(fan.layout, OutlineLayout::Parallel { join: "join".into() });
    assert_eq!(fan.groups.iter().map(|g| g.label.clone().unwrap()).collect::<Vec<_>>(), ["path 0", "path 1"]);
    let each = outlined(steps, "each");
    assert_eq!((each.kind.as_str(), each.label.as_str()), ("map", "map over input.items as item"));
    let refine = outlined(steps, "refine");
    assert_eq!(refine.label, "loop until <closure>, at most 3");
    assert_eq!(refine.layout, OutlineLayout::Repeated { again: "again".into() });
    let g = outlined(steps, "g");
    let OutlineLayout::Graph { entry, edges } = &g.layout else { panic!("a graph's layout: {:?}", g.layout) };
    assert_eq!(entry.as_deref(), Some("plan"), "the first node when none is set");
    assert_eq!((edges[0].from.as_str(), edges[0].to.as_str(), edges[0].when.as_deref()), ("plan", "act", None));
    assert_eq!(outlined(steps, "tick").label, "every 1m");
    let call = outlined(steps, "call");
    assert_eq!((call.kind.as_str(), call.label.as_str()), ("workflow", "workflow sub"));
    assert_eq!(outlined(steps, "call/inner").kind, "noop", "a called workflow's steps are under its call");
    assert_eq!(outlined(steps, "nap").label, "sleep 1s");

    let other = every_other_kind().outline();
    let steps = &other.steps;
    assert_eq!(outlined(steps, "first").notes, ["if input.go", "cached"]);
    assert_eq!(outlined(steps, "write").notes, ["approved first"]);
    assert_eq!(outlined(steps, "paid").label, "wait for `payment` (at most 1d)");
    assert_eq!(outlined(steps, "shipped").label, "wait for `shipment` matching { id: input.id } (at most 1m)");
    assert_eq!(outlined(steps, "mem").label, "provide notes");
    assert_eq!(outlined(steps, "child").label, "spawn sub (at most 10m)");
    assert_eq!(outlined(steps, "maybe").layout, OutlineLayout::Choice { falls_through: true });
    let dynamic = outlined(steps, "dyn");
    assert_eq!(dynamic.label, "fork (race) over input.list · 2 at a time");
    assert_eq!(dynamic.layout, OutlineLayout::Boxed);
    assert_eq!(outlined(steps, "chat").label, "loop at most 9, a message from `messages` each");
    let OutlineLayout::Graph { entry, edges } = &outlined(steps, "agentic").layout else { panic!("a graph") };
    assert_eq!(entry.as_deref(), Some("act"));
    assert_eq!(edges[0].when.as_deref(), Some("steps.act.output.again"));
    assert_eq!(outlined(steps, "beat").label, "every 1500ms, or when woken on `nudge`");
}

/// An expression in a label is cut, so a drawing stays readable; its source is not.
#[test]
fn a_long_condition_is_cut_in_the_outline() {
    let long = "input.tickets | selectattr('priority', 'equalto', 'urgent') | list | length > 0";
    let workflow = Workflow::builder("long")
        .step(Branch::new("route").when(Expr::new(|_| true).with_source(long), [noop("page")]))
        .build()
        .unwrap();
    let label = workflow.outline().steps[0].groups[0].label.clone().unwrap();
    assert_eq!(label.chars().count(), stepwright_core::LABEL_CHARS);
    assert!(label.ends_with('…') && long.starts_with(label.trim_end_matches('…')));
}
