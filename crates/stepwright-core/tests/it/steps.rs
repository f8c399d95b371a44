//! The step contract: typed input/output validation, outcomes, context, events, artifacts.

use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use stepwright_core::{
    ArtifactCapture, Caller, ContentHash, EngineConfig, ErrorCode, Event, Node, Outcome, Record, RunStatus,
    StartOptions, Step, StepContext, StepError, Workflow, dyn_fn_step, fn_step,
};
use stepwright_testkit::{T0, engine, engine_with};

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Order {
    id: String,
    lines: Vec<Line>,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct Line {
    #[allow(dead_code)]
    sku: String,
    quantity: u32,
}

#[derive(Debug, Serialize, JsonSchema, PartialEq)]
struct Total {
    id: String,
    items: u32,
}

struct Count;

impl Step for Count {
    type Input = Order;
    type Output = Total;

    async fn run(&self, ctx: &StepContext, order: Order) -> Result<Outcome<Total>, StepError> {
        ctx.emit(Event::new("order.counted", json!({ "id": order.id })));
        let items = order.lines.iter().map(|l| l.quantity).sum();
        Ok(Outcome::completed(Total { id: order.id, items }).with_event(Event::new("order.total", json!(items))))
    }
}

#[tokio::test]
async fn typed_input_errors_name_the_json_path() {
    let (engine, _) = engine();
    let workflow = Workflow::builder("orders").step(Node::step("count", Count)).build().unwrap();
    let ok = engine
        .start(
            &workflow,
            json!({ "id": "o1", "lines": [{ "sku": "a", "quantity": 2 }, { "sku": "b", "quantity": 3 }] }),
        )
        .await
        .unwrap();
    assert_eq!(ok.output, Some(json!({ "id": "o1", "items": 5 })));

    let bad = engine
        .start(
            &workflow,
            json!({ "id": "o1", "lines": [{ "sku": "a", "quantity": 2 }, { "sku": "b", "quantity": -1 }] }),
        )
        .await
        .unwrap();
    let error = bad.error.unwrap();
    assert_eq!(error.code, ErrorCode::INPUT_VALIDATION);
    assert!(error.message.starts_with("input at /lines/1/quantity: invalid value"), "{}", error.message);

    let unknown = engine.start(&workflow, json!({ "id": "o1", "lines": [], "extra": 1 })).await.unwrap();
    assert!(unknown.error.unwrap().message.contains("unknown field `extra`"));
}

#[tokio::test]
async fn declared_schemas_validate_input_and_output_with_pointers() {
    let (engine, _) = engine();
    let step = Node::dyn_step(
        "shape",
        dyn_fn_step("shape", |_ctx, input: Arc<Value>| async move {
            Ok(Outcome::completed(json!({ "label": input["name"], "score": input["score"] })))
        }),
    )
    .input_schema(json!({ "type": "object", "required": ["name"], "properties": { "name": { "type": "string" } } }))
    .output_schema(json!({ "type": "object", "properties": { "score": { "type": "number", "maximum": 1 } } }));
    let workflow = Workflow::builder("schemas").step(step).build().unwrap();

    let bad_in = engine.start(&workflow, json!({ "name": 3 })).await.unwrap().error.unwrap();
    assert_eq!(bad_in.code, ErrorCode::INPUT_VALIDATION);
    assert!(bad_in.message.contains("at /name:"), "{}", bad_in.message);

    let bad_out = engine.start(&workflow, json!({ "name": "x", "score": 7 })).await.unwrap().error.unwrap();
    assert_eq!(bad_out.code, ErrorCode::OUTPUT_VALIDATION);
    assert!(bad_out.message.contains("at /score:"), "{}", bad_out.message);

    let fine = engine.start(&workflow, json!({ "name": "x", "score": 0.5 })).await.unwrap();
    assert_eq!(fine.output, Some(json!({ "label": "x", "score": 0.5 })));
}

#[tokio::test]
async fn workflow_input_and_output_schemas() {
    let (engine, store) = engine();
    let workflow = Workflow::builder("typed-io")
        .input_schema(json!({ "type": "integer", "minimum": 0 }))
        .output_schema(json!({ "type": "integer", "maximum": 10 }))
        .step(Node::step("double", fn_step(|_c, x: i64| async move { Ok(x * 2) })))
        .build()
        .unwrap();
    let error = engine.start(&workflow, json!(-1)).await.unwrap_err();
    assert!(error.to_string().starts_with("starting workflow \"typed-io\""), "{error}");
    assert_eq!(store.blob_count(), 0, "a rejected input creates nothing");
    let report = engine.start(&workflow, json!(6)).await.unwrap();
    assert_eq!(report.error.unwrap().code, ErrorCode::OUTPUT_VALIDATION);
}

#[tokio::test]
async fn events_from_the_context_come_before_returned_ones_and_are_stamped() {
    let (engine, _) = engine();
    let workflow = Workflow::builder("events").step(Node::step("count", Count)).build().unwrap();
    let caller = Caller::user(Some("acme"), "ann");
    let report = engine
        .start_with(&workflow, json!({ "id": "o9", "lines": [] }), StartOptions { caller, ..Default::default() })
        .await
        .unwrap();
    let events = engine.store().events(report.run_id).await.unwrap();
    let kinds: Vec<_> = events.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(kinds, ["order.counted", "order.total"]);
    assert!(events.iter().all(|e| e.tenant.as_deref() == Some("acme") && e.user.as_deref() == Some("ann")));
    assert!(events.iter().all(|e| e.run == report.run_id && e.path.as_str() == "count"));
}

#[tokio::test]
async fn artifacts_are_content_addressed_and_hash_only_keeps_no_content() {
    for (mode, stored) in [(ArtifactCapture::Full, true), (ArtifactCapture::HashOnly, false)] {
        let (engine, store) = engine_with(EngineConfig { artifacts: mode, ..EngineConfig::default() });
        let workflow = Workflow::builder("artifacts")
            .step(Node::step(
                "prompt",
                fn_step(|ctx: StepContext, x: Value| async move {
                    Ok(ctx.artifact("llm-input", &json!({ "b": 1, "a": x })).to_hex())
                }),
            ))
            .build()
            .unwrap();
        let report = engine.start(&workflow, json!("hi")).await.unwrap();
        let expected = ContentHash::of_bytes(br#"{"a":"hi","b":1}"#);
        assert_eq!(report.output, Some(json!(expected.to_hex())));
        let artifact = store
            .entries(report.run_id)
            .into_iter()
            .find_map(|e| match e.record {
                Record::Artifact { kind, hash, stored } => Some((kind, hash, stored)),
                _ => None,
            })
            .unwrap();
        assert_eq!(artifact, ("llm-input".to_owned(), expected, stored));
        // Full mode stores the artifact's blob besides the step output's.
        assert_eq!(store.blob_count(), if stored { 2 } else { 1 });
    }
}

#[derive(Debug)]
struct Greeter(&'static str);

#[tokio::test(start_paused = true)]
async fn context_carries_identity_services_and_journaled_values() {
    let engine = stepwright_core::Engine::builder()
        .clock(Arc::new(stepwright_core::TokioClock::starting_at(T0)))
        .entropy(Arc::new(stepwright_core::SeededEntropy::new(1)))
        .service(Arc::new(Greeter("hello")))
        .build();
    let workflow = Workflow::builder("ctx")
        .version("2.1.0")
        .step(Node::step(
            "look",
            fn_step(|ctx: StepContext, _x: Value| async move {
                let greeter = ctx.require::<Greeter>()?;
                let missing = ctx.require::<String>().unwrap_err();
                Ok(json!({
                    "greeting": greeter.0,
                    "missing": missing.message,
                    "workflow": ctx.workflow(),
                    "version": ctx.workflow_version(),
                    "path": ctx.path().as_str(),
                    "attempt": ctx.attempt(),
                    "user": ctx.caller().user,
                    "roles": ctx.caller().roles,
                    "now": ctx.now().as_micros(),
                    "uuid_version": ctx.uuid().get_version_num(),
                    "random_differs": ctx.random() != ctx.random(),
                }))
            }),
        ))
        .build()
        .unwrap();
    let caller = Caller::user(None, "bob").with_role("lead");
    let report =
        engine.start_with(&workflow, json!(null), StartOptions { caller, ..Default::default() }).await.unwrap();
    let out = report.output.unwrap();
    assert_eq!(out["greeting"], "hello");
    assert!(out["missing"].as_str().unwrap().contains("alloc::string::String"));
    assert_eq!(out["workflow"], "ctx");
    assert_eq!(out["version"], "2.1.0");
    assert_eq!(out["path"], "look");
    assert_eq!(out["attempt"], 1);
    assert_eq!(out["user"], "bob");
    assert_eq!(out["roles"], json!(["lead"]));
    assert_eq!(out["now"], T0.as_micros());
    assert_eq!(out["uuid_version"], 7);
    assert_eq!(out["random_differs"], true);
}

#[tokio::test]
async fn skipped_outcome_records_null() {
    let (engine, _) = engine();
    let workflow = Workflow::builder("skips")
        .step(Node::dyn_step(
            "nothing",
            dyn_fn_step("nothing", |_c, _i| async move { Ok(Outcome::skipped("nothing to do")) }),
        ))
        .step(Node::step("after", fn_step(|_c, x: Value| async move { Ok(json!({ "saw": x })) })))
        .build()
        .unwrap();
    let report = engine.start(&workflow, json!(1)).await.unwrap();
    assert_eq!(report.status, RunStatus::Completed);
    assert_eq!(report.output, Some(json!({ "saw": null })));
}
