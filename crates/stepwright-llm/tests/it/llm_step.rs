//! The `llm` step in a running engine: structured output with repair turns, journaled calls
//! with artifacts and usage events, cassettes, and a crash that does not pay twice.

use std::sync::Arc;

use crate::support::fast_http;
use serde_json::{Value, json};
use stepwright_core::{
    Engine, ErrorCode, InMemoryStore, Node, Record, RunId, RunStatus, StartOptions, Store, Workflow,
};
use stepwright_llm::{
    Cassette, CassetteMode, LlmSpec, LlmStep, MODEL_CALL_EVENT, ModelConfig, Models, Pricing, Provider, rollup,
};
use stepwright_testkit::http::{FakeServer, Reply};

fn answer(content: &str) -> Reply {
    Reply::json(
        200,
        json!({ "model": "gpt-4o-mini", "choices": [{ "finish_reason": "stop", "message": { "role": "assistant", "content": content } }],
                "usage": { "prompt_tokens": 1000, "completion_tokens": 200 } }),
    )
}

fn models(server_url: &str) -> Models {
    let mut config = ModelConfig::new(Provider::Openai, "gpt-4o-mini");
    config.base_url = Some(format!("{server_url}/v1"));
    config.pricing = Some(Pricing::per_million(0.15, 0.60));
    config.http = fast_http();
    let mut models = Models::new();
    models.bind("fast", &config).unwrap();
    models
}

/// An Anthropic Messages answer that stopped for `stop`, with these content blocks.
fn anthropic_answer(stop: &str, content: &Value) -> Reply {
    Reply::json(
        200,
        json!({ "id": "msg_1", "type": "message", "role": "assistant", "model": "claude", "content": content,
                "stop_reason": stop, "usage": { "input_tokens": 10, "output_tokens": 5 } }),
    )
}

fn engine(store: Arc<InMemoryStore>, models: Models) -> Engine {
    Engine::builder().store(store as Arc<dyn Store>).service(Arc::new(models)).build()
}

fn classify() -> Workflow {
    let mut spec = LlmSpec::new("fast");
    spec.system = Some("You classify support tickets.".into());
    spec.output = Some(json!({
        "type": "object", "required": ["category"],
        "properties": { "category": { "enum": ["billing", "bug", "other"] }, "confidence": { "type": "number" } }
    }));
    Workflow::builder("classify").step(Node::dyn_step("classify", LlmStep::new(spec))).build().unwrap()
}

#[tokio::test]
async fn a_wrong_answer_gets_one_repair_turn_that_shows_the_validation_errors() {
    let server = FakeServer::scripted(vec![
        answer("{\"category\": \"sales\"}"),
        answer("{\"category\": \"billing\", \"confidence\": null}"),
    ]);
    let store = Arc::new(InMemoryStore::new());
    let engine = engine(store.clone(), models(&server.url));
    let report = engine.start(&classify(), json!("I was charged twice")).await.unwrap();
    assert_eq!(report.status, RunStatus::Completed, "{:?}", report.error);
    assert_eq!(report.output, Some(json!({ "category": "billing" })), "the strict-mode null was stripped");

    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let repair = requests[1].body["messages"].as_array().unwrap();
    assert_eq!(repair[0], json!({ "role": "system", "content": "You classify support tickets." }));
    assert_eq!(repair[1], json!({ "role": "user", "content": "I was charged twice" }));
    assert_eq!(repair[2], json!({ "role": "assistant", "content": "{\"category\": \"sales\"}" }));
    let shown = repair[3]["content"].as_str().unwrap();
    assert!(shown.contains("at /category:") && shown.contains("sales"), "{shown}");

    // Each call is a journaled sub-step, with both artifacts and a usage event with cost.
    let entries = store.entries(report.run_id);
    let completed: Vec<&str> =
        entries.iter().filter(|e| matches!(e.record, Record::Completed { .. })).map(|e| e.path.as_str()).collect();
    assert_eq!(completed, ["classify/call.0", "classify/call.1", "classify"]);
    let artifacts: Vec<&str> = entries
        .iter()
        .filter_map(|e| match &e.record {
            Record::Artifact { kind, .. } => Some(kind.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(artifacts, ["llm-input", "llm-output", "llm-input", "llm-output"]);
    let events = store.events(report.run_id).await.unwrap();
    let calls: Vec<&Value> = events.iter().filter(|e| e.kind == MODEL_CALL_EVENT).map(|e| &e.data).collect();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[1]["call"], json!("classify/call.1"));
    assert_eq!(calls[0]["usage"], json!({ "input_tokens": 1000, "output_tokens": 200 }));
    let (by_step, total) = rollup(&events);
    assert_eq!(total.calls, 2);
    assert_eq!(total.input_tokens, 2000);
    // 2 × (1000 × 0.15 + 200 × 0.60) / 1e6 = 0.00054 dollars.
    assert!((total.cost_usd - 0.000_54).abs() < 1e-12, "{}", total.cost_usd);
    assert_eq!(by_step["classify"], total);
    assert_eq!(calls[0]["prices"], json!("binding"), "the binding's own prices");
}

/// The `model.call` event of one run of `classify` through a binding to `model` without
/// `pricing`.
async fn call_event_without_prices(model: &str) -> Value {
    let server = FakeServer::scripted(vec![answer("{\"category\": \"bug\"}")]);
    let mut config = ModelConfig::new(Provider::Openai, model);
    config.base_url = Some(format!("{}/v1", server.url));
    config.http = fast_http();
    let mut models = Models::new();
    models.bind("fast", &config).unwrap();
    let store = Arc::new(InMemoryStore::new());
    let report = engine(store.clone(), models).start(&classify(), json!("it crashes")).await.unwrap();
    assert_eq!(report.status, RunStatus::Completed);
    let events = store.events(report.run_id).await.unwrap();
    events.into_iter().find(|e| e.kind == MODEL_CALL_EVENT).unwrap().data
}

/// A binding without `pricing` is priced from the built-in table, and the call's event says
/// which table: the cost is fixed at the call, whatever the table says later.
#[tokio::test]
async fn a_binding_without_prices_is_priced_from_the_versioned_table() {
    let call = call_event_without_prices("gpt-4o-mini").await;
    assert_eq!(call["prices"], json!(format!("price table {}", stepwright_llm::PRICE_TABLE_VERSION)));
    // gpt-4o-mini's list price: 1000 × 0.15 + 200 × 0.60 per million.
    assert!((call["cost_usd"].as_f64().unwrap() - 0.000_27).abs() < 1e-12, "{call}");
    // A model the table does not know has no cost, never a made-up one.
    let call = call_event_without_prices("my-finetune").await;
    assert_eq!((&call["cost_usd"], call.get("prices")), (&Value::Null, None), "{call}");
}

#[tokio::test]
async fn answers_that_stay_wrong_fail_with_output_validation() {
    let server = FakeServer::scripted(vec![answer("not json"), answer("{\"category\": 7}")]);
    let engine = engine(Arc::new(InMemoryStore::new()), models(&server.url));
    let report = engine.start(&classify(), json!({ "prompt": "?" })).await.unwrap();
    assert_eq!(report.status, RunStatus::Failed);
    let error = report.error.unwrap();
    assert_eq!(error.code, ErrorCode::OUTPUT_VALIDATION);
    assert!(error.message.contains("after 1 repair turn"), "{}", error.message);
    assert_eq!(server.requests().len(), 2, "repair turns are bounded");
}

#[tokio::test]
async fn a_crash_after_the_first_call_resumes_without_paying_for_it_again() {
    let server = FakeServer::scripted(vec![
        answer("{\"category\": \"sales\"}"),
        answer("{\"category\": \"bug\"}"),
        answer("{\"category\": \"bug\"}"),
    ]);
    let store = Arc::new(InMemoryStore::new());
    let engine = engine(store.clone(), models(&server.url));
    // call.0 is committed; call.1's commit fails as if the process died right after the
    // provider answered.
    store.fail_appends_after(1);
    let run: RunId = "01890000-0000-7000-8000-00000000a11a".parse().unwrap();
    let crashed = engine
        .start_with(&classify(), json!("it crashes"), StartOptions { run_id: Some(run), ..Default::default() })
        .await;
    assert!(crashed.is_err());
    store.heal();
    let report = engine.resume(&classify(), run).await.unwrap();
    assert_eq!(report.output, Some(json!({ "category": "bug" })));
    let requests = server.requests();
    assert_eq!(requests.len(), 3, "call.0 once; call.1 twice (its answer was lost with the process)");
    assert_eq!(requests[2].body, requests[1].body, "the resumed run went straight to the repair turn");
}

#[tokio::test]
async fn a_cassette_records_then_replays_offline_and_a_miss_names_the_step() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("classify.cassette.json");
    let server = FakeServer::scripted(vec![answer("{\"category\": \"bug\"}")]);
    let recording = models(&server.url).with_cassette(Cassette::open(&path, CassetteMode::Record).unwrap());
    let report =
        engine(Arc::new(InMemoryStore::new()), recording).start(&classify(), json!("it crashes")).await.unwrap();
    assert_eq!(report.output, Some(json!({ "category": "bug" })));
    let file: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(file["version"], json!(1));
    assert_eq!(file["interactions"].as_array().unwrap().len(), 1);

    // Replay against no server at all, and without a key: the public endpoint is used (the
    // cassette is attached first, so the unset api_key_env does not stop the binding).
    let mut replaying = Models::new().with_cassette(Cassette::open(&path, CassetteMode::Replay).unwrap());
    replaying
        .bind(
            "fast",
            &ModelConfig {
                api_key_env: Some("STEPWRIGHT_TEST_NO_SUCH_KEY".into()),
                ..ModelConfig::new(Provider::Openai, "gpt-4o-mini")
            },
        )
        .unwrap();
    let engine = engine(Arc::new(InMemoryStore::new()), replaying);
    let replayed = engine.start(&classify(), json!("it crashes")).await.unwrap();
    assert_eq!(replayed.output, Some(json!({ "category": "bug" })));
    assert_eq!(server.requests().len(), 1, "nothing reached the server");

    let missed = engine.start(&classify(), json!("a different ticket")).await.unwrap();
    let error = missed.error.unwrap();
    assert_eq!(error.code.as_str(), "cassette_miss");
    assert!(error.message.contains("classify/call.0"), "{}", error.message);
    assert!(error.message.contains("a different ticket"), "{}", error.message);
    assert!(!error.retryable);
}

#[tokio::test]
async fn auto_mode_calls_only_what_is_not_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("auto.json");
    let server = FakeServer::scripted(vec![answer("{\"category\": \"bug\"}"), answer("{\"category\": \"other\"}")]);
    for (input, expected) in [("one", "bug"), ("one", "bug"), ("two", "other"), ("two", "other")] {
        let models = models(&server.url).with_cassette(Cassette::open(&path, CassetteMode::Auto).unwrap());
        let report = engine(Arc::new(InMemoryStore::new()), models).start(&classify(), json!(input)).await.unwrap();
        assert_eq!(report.output, Some(json!({ "category": expected })));
    }
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn a_binding_without_a_key_says_which_variable_to_set() {
    // An api_key_env that is not set fails at bind time, naming it (with a base_url too: a
    // request would otherwise go out with no key and no warning).
    for base_url in [None, Some("http://127.0.0.1:9/v1".to_owned())] {
        let config = ModelConfig {
            api_key_env: Some("STEPWRIGHT_TEST_NO_SUCH_KEY".into()),
            base_url,
            ..ModelConfig::new(Provider::Anthropic, "claude")
        };
        let error = Models::new().bind("fast", &config).unwrap_err();
        assert_eq!(error.kind.code(), "model_config");
        assert!(error.to_string().contains("api_key_env names STEPWRIGHT_TEST_NO_SUCH_KEY"), "{error}");

        // With a cassette, only a call it has no recording of needs the key, and says which.
        let dir = tempfile::tempdir().unwrap();
        let cassette = Cassette::open(dir.path().join("c.jsonl"), CassetteMode::Auto).unwrap();
        let mut models = Models::new().with_cassette(cassette);
        models.bind("fast", &config).unwrap();
        let report = engine(Arc::new(InMemoryStore::new()), models).start(&classify(), json!("x")).await.unwrap();
        let error = report.error.unwrap();
        assert_eq!(error.code.as_str(), "model_config");
        assert!(error.message.contains("set STEPWRIGHT_TEST_NO_SUCH_KEY"), "{}", error.message);
    }
    // No api_key_env: the provider's variable, named at the call (a cassette may answer it).
    let mut models = Models::new();
    models.bind("fast", &ModelConfig::new(Provider::Anthropic, "claude")).unwrap();
    let report = engine(Arc::new(InMemoryStore::new()), models).start(&classify(), json!("x")).await.unwrap();
    let error = report.error.unwrap();
    assert_eq!(error.code.as_str(), "model_config");
    assert!(error.message.contains("ANTHROPIC_API_KEY"), "{}", error.message);
}

#[test]
fn model_specs_parse_with_clear_errors() {
    let spec = ModelConfig::parse_spec("openai:llama3.2@http://127.0.0.1:11434/v1").unwrap();
    assert_eq!((spec.provider, spec.model.as_str()), (Provider::Openai, "llama3.2"));
    assert_eq!(spec.base_url.as_deref(), Some("http://127.0.0.1:11434/v1"));
    assert_eq!(ModelConfig::parse_spec("anthropic:claude-sonnet-4-5").unwrap().base_url, None);
    assert!(ModelConfig::parse_spec("gpt-4o").unwrap_err().contains("provider:model"));
    assert!(ModelConfig::parse_spec("mistral:large").unwrap_err().contains("unknown provider"));
    assert!(ModelConfig::parse_spec("openai:").unwrap_err().contains("no model"));
    assert!(ModelConfig::parse_spec("openai:m@ftp://x").unwrap_err().contains("http://"));
}

/// Collects streamed tokens by step path.
#[derive(Default)]
struct Tokens(std::sync::Mutex<Vec<(String, String)>>);

impl stepwright_core::Observer for Tokens {
    fn token(&self, _run: RunId, path: &stepwright_core::StepPath, text: &str) {
        self.0.lock().unwrap().push((path.as_str().to_owned(), text.to_owned()));
    }
}

#[tokio::test]
async fn tokens_stream_to_the_steps_sink_as_they_arrive() {
    let chunks = ["Dear ", "customer, ", "sorry."]
        .iter()
        .map(|t| format!("data: {}\n\n", json!({ "choices": [{ "index": 0, "delta": { "content": t } }] })))
        .collect::<String>();
    let stream = format!(
        "{chunks}data: {}\n\ndata: [DONE]\n\n",
        json!({ "choices": [{ "index": 0, "delta": {}, "finish_reason": "stop" }] })
    );
    let server = FakeServer::scripted(vec![Reply::sse(&stream, 9)]);
    let tokens = Arc::new(Tokens::default());
    let engine = Engine::builder()
        .store(Arc::new(InMemoryStore::new()) as Arc<dyn Store>)
        .service(Arc::new(models(&server.url)))
        .observer(tokens.clone())
        .build();
    let workflow =
        Workflow::builder("reply").step(Node::dyn_step("draft", LlmStep::new(LlmSpec::new("fast")))).build().unwrap();
    let report = engine.start(&workflow, json!("Write a reply")).await.unwrap();
    assert_eq!(report.output, Some(json!("Dear customer, sorry.")));
    let seen = tokens.0.lock().unwrap().clone();
    let expected: Vec<(String, String)> =
        ["Dear ", "customer, ", "sorry."].iter().map(|t| ("draft".to_owned(), (*t).to_owned())).collect();
    assert_eq!(seen, expected);
    assert_eq!(server.requests()[0].body["stream"], json!(true));
}

/// An OpenAI answer that ended for `reason`, whole.
fn ended(reason: &str, content: &str) -> Reply {
    Reply::json(
        200,
        json!({ "model": "gpt-4o-mini", "choices": [{ "finish_reason": reason, "message": { "role": "assistant", "content": content } }],
                "usage": { "prompt_tokens": 1000, "completion_tokens": 200 } }),
    )
}

/// The same, streamed.
fn ended_streamed(reason: &str, content: &str) -> Reply {
    let chunks = [
        json!({ "model": "gpt-4o-mini", "choices": [{ "index": 0, "delta": { "role": "assistant", "content": content } }] }),
        json!({ "model": "gpt-4o-mini", "choices": [{ "index": 0, "delta": {}, "finish_reason": reason }] }),
        json!({ "model": "gpt-4o-mini", "choices": [], "usage": { "prompt_tokens": 1000, "completion_tokens": 200 } }),
    ];
    let mut text: String = chunks.iter().map(|chunk| format!("data: {chunk}\n\n")).collect();
    text.push_str("data: [DONE]\n\n");
    Reply::sse(&text, 64)
}

fn summarize(stream: bool) -> Workflow {
    let mut spec = LlmSpec::new("fast");
    spec.stream = stream;
    Workflow::builder("summarize").step(Node::dyn_step("summarize", LlmStep::new(spec))).build().unwrap()
}

/// An answer cut off by the token limit, or withheld, is not a success: the step fails with
/// a stable code (whole and streamed, OpenAI and Anthropic), and the call is still journaled
/// with its usage, since it was paid for.
#[tokio::test]
async fn cut_off_and_refused_answers_fail_with_their_own_codes() {
    let cases = [
        (ended("length", "The ticket says the customer was char"), false, "model_truncated"),
        (ended_streamed("length", "The ticket says the customer was char"), true, "model_truncated"),
        (ended("content_filter", ""), false, "model_refused"),
        (ended_streamed("content_filter", ""), true, "model_refused"),
    ];
    for (reply, stream, code) in cases {
        let server = FakeServer::scripted(vec![reply]);
        let store = Arc::new(InMemoryStore::new());
        let report = engine(store.clone(), models(&server.url)).start(&summarize(stream), json!("text")).await.unwrap();
        assert_eq!(report.status, RunStatus::Failed, "{code} (stream {stream})");
        let error = report.error.unwrap();
        assert_eq!(error.code.as_str(), code, "{}", error.message);
        assert!(!error.retryable, "the same request would get the same answer");
        let calls: Vec<Value> = store
            .events(report.run_id)
            .await
            .unwrap()
            .into_iter()
            .filter(|event| event.kind == MODEL_CALL_EVENT)
            .map(|event| event.data)
            .collect();
        assert_eq!(calls.len(), 1, "{code}: the call is journaled");
        assert_eq!(calls[0]["usage"]["input_tokens"], 1000, "{code}: and its usage kept");
    }

    // Anthropic: `max_tokens` and `refusal`, also when the answer is a forced output tool.
    let cases = [
        (anthropic_answer("max_tokens", &json!([{ "type": "text", "text": "The cust" }])), false, "model_truncated"),
        (anthropic_answer("refusal", &json!([])), false, "model_refused"),
        (
            anthropic_answer(
                "max_tokens",
                &json!([{ "type": "tool_use", "id": "t1", "name": "output", "input": { "category": "bil" } }]),
            ),
            true,
            "model_truncated",
        ),
    ];
    for (reply, structured, code) in cases {
        let server = FakeServer::scripted(vec![reply]);
        let mut config = ModelConfig::new(Provider::Anthropic, "claude");
        config.base_url = Some(server.url.clone());
        config.api_key = Some("sk-test".into());
        config.http = fast_http();
        let mut models = Models::new();
        models.bind("fast", &config).unwrap();
        let workflow = if structured { classify() } else { summarize(false) };
        let report = engine(Arc::new(InMemoryStore::new()), models).start(&workflow, json!("text")).await.unwrap();
        let error = report.error.unwrap_or_else(|| panic!("{code}: {:?}", report.output));
        assert_eq!(error.code.as_str(), code, "{}", error.message);
        assert_eq!(server.requests().len(), 1, "{code}: no repair turn is spent on a cut-off answer");
    }
}

/// The binding options where models and servers differ: which field carries an OpenAI token
/// limit, the `anthropic-version` header, models that refuse sampling parameters, and
/// Anthropic's "temperature or top_p, not both" — refused before anything is sent.
#[tokio::test]
async fn binding_options_shape_the_requests_that_current_apis_accept() {
    let openai_ok = || {
        Reply::json(
            200,
            json!({ "model": "o4", "choices": [{ "finish_reason": "stop", "message": { "role": "assistant", "content": "ok" } }],
                    "usage": { "prompt_tokens": 1, "completion_tokens": 1 } }),
        )
    };
    let anthropic_ok = || anthropic_answer("end_turn", &json!([{ "type": "text", "text": "ok" }]));
    let request = |temperature: Option<f64>, top_p: Option<f64>| {
        let mut request = stepwright_llm::ChatRequest::new("m", vec![stepwright_llm::Message::user("hi")]);
        request.params = stepwright_llm::ModelParams { temperature, top_p, max_tokens: Some(50), stop: Vec::new() };
        request
    };
    let bound = |config: ModelConfig| {
        let mut models = Models::new();
        models.bind("m", &config).map(|()| models)
    };

    // OpenAI: a base_url means a compatible server (`max_tokens`) unless the binding says.
    let server = FakeServer::scripted(vec![openai_ok(), openai_ok()]);
    let mut config = ModelConfig::new(Provider::Openai, "o4");
    config.base_url = Some(format!("{}/v1", server.url));
    config.api_key = Some("sk".into());
    config.http = fast_http();
    bound(config.clone()).unwrap().chat("s", "m", request(None, None), None).await.unwrap();
    config.token_limit_field = Some(stepwright_llm::TokenLimitField::MaxCompletionTokens);
    config.sampling = Some(false);
    let reasoning = bound(config.clone()).unwrap();
    reasoning.chat("s", "m", request(None, None), None).await.unwrap();
    let bodies: Vec<Value> = server.requests().into_iter().map(|r| r.body).collect();
    assert_eq!((&bodies[0]["max_tokens"], bodies[0].get("max_completion_tokens")), (&json!(50), None));
    assert_eq!((bodies[1].get("max_tokens"), &bodies[1]["max_completion_tokens"]), (None, &json!(50)));
    // A model that takes no sampling parameters: the request is refused here, not sent.
    let refused = reasoning.chat("s", "m", request(Some(0.2), None), None).await.unwrap_err();
    assert_eq!(refused.kind.code(), "model_config");
    assert!(refused.to_string().contains("sampling: false"), "{refused}");
    assert_eq!(server.requests().len(), 2, "nothing was sent");
    config.api_version = Some("2024-01-01".into());
    assert!(bound(config).unwrap_err().to_string().contains("`api_version` is not an option of openai bindings"));

    // Anthropic: current models take no sampling parameters unless the binding says so; the
    // version header the binding names; one of temperature and top_p.
    let server = FakeServer::scripted(vec![anthropic_ok(), anthropic_ok()]);
    let mut config = ModelConfig::new(Provider::Anthropic, "claude");
    config.base_url = Some(server.url.clone());
    config.api_key = Some("sk".into());
    config.http = fast_http();
    let current = bound(config.clone()).unwrap().chat("s", "m", request(Some(0.5), None), None).await.unwrap_err();
    assert!(current.to_string().contains("say `sampling: true`"), "{current}");
    config.sampling = Some(true);
    bound(config.clone()).unwrap().chat("s", "m", request(Some(0.5), None), None).await.unwrap();
    config.api_version = Some("2099-01-01".into());
    let newer = bound(config.clone()).unwrap();
    newer.chat("s", "m", request(None, Some(0.9)), None).await.unwrap();
    let versions: Vec<String> = server.requests().iter().map(|r| r.headers["anthropic-version"].clone()).collect();
    assert_eq!(versions, [stepwright_llm::ANTHROPIC_DEFAULT_API_VERSION, "2099-01-01"]);
    let both = newer.chat("s", "m", request(Some(0.5), Some(0.9)), None).await.unwrap_err();
    assert!(both.to_string().contains("temperature or top_p, not both"), "{both}");
    assert_eq!(server.requests().len(), 2, "nothing was sent");
    config.token_limit_field = Some(stepwright_llm::TokenLimitField::MaxTokens);
    assert!(bound(config).unwrap_err().to_string().contains("`token_limit_field` is not an option of anthropic"));
}

/// A stream that ends without its usage chunk (some compatible servers never send one) is
/// not a free call on a priced binding: its cost is `null`, the event says the usage was not
/// reported, and the roll-up counts it apart.
#[tokio::test]
async fn a_call_without_reported_usage_has_no_cost_rather_than_zero() {
    let chunks = [
        json!({ "model": "gpt-4o-mini", "choices": [{ "index": 0, "delta": { "role": "assistant", "content": "fine" } }] }),
        json!({ "model": "gpt-4o-mini", "choices": [{ "index": 0, "delta": {}, "finish_reason": "stop" }] }),
    ];
    let mut text: String = chunks.iter().map(|chunk| format!("data: {chunk}\n\n")).collect();
    text.push_str("data: [DONE]\n\n");
    let server = FakeServer::scripted(vec![Reply::sse(&text, 64), ended("stop", "also fine")]);
    let store = Arc::new(InMemoryStore::new());
    let engine = engine(store.clone(), models(&server.url));
    let unreported = engine.start(&summarize(true), json!("text")).await.unwrap();
    let reported = engine.start(&summarize(false), json!("text")).await.unwrap();
    let call = |run: RunId| {
        let store = store.clone();
        async move {
            let events = store.events(run).await.unwrap();
            let data = events.iter().find(|e| e.kind == MODEL_CALL_EVENT).unwrap().data.clone();
            (data, rollup(&events).1)
        }
    };
    let (data, total) = call(unreported.run_id).await;
    assert_eq!((&data["cost_usd"], &data["usage_reported"]), (&Value::Null, &json!(false)), "{data}");
    assert_eq!((total.calls, total.calls_without_usage, total.cost_usd), (1, 1, 0.0));
    let (data, total) = call(reported.run_id).await;
    assert_eq!(data["usage_reported"], json!(true));
    assert!(data["cost_usd"].as_f64().is_some_and(|c| c > 0.0), "{data}");
    assert_eq!(total.calls_without_usage, 0);
}

fn shaped(schema: Value) -> Workflow {
    let mut spec = LlmSpec::new("fast");
    spec.stream = false;
    spec.output = Some(schema);
    Workflow::builder("shaped").step(Node::dyn_step("shape", LlmStep::new(spec))).build().unwrap()
}

/// Output schemas keep their meaning on the wire: a non-object root (both APIs require an
/// object) is wrapped as `value` and the answer unwrapped; a schema strict mode cannot
/// express (a map, a `$ref` with keys beside it) goes out non-strict, as written, instead of
/// being narrowed so the model could only answer `{}`.
#[tokio::test]
async fn output_schemas_keep_their_meaning_on_the_wire() {
    // An array at the root, OpenAI.
    let server = FakeServer::scripted(vec![answer(r#"{"value": ["red", "blue"]}"#)]);
    let list = json!({ "type": "array", "items": { "type": "string" } });
    let report = engine(Arc::new(InMemoryStore::new()), models(&server.url))
        .start(&shaped(list.clone()), json!("x"))
        .await
        .unwrap();
    assert_eq!(report.output, Some(json!(["red", "blue"])), "{:?}", report.error);
    let format = &server.requests()[0].body["response_format"]["json_schema"];
    assert_eq!(format["strict"], json!(true));
    assert_eq!(format["schema"]["required"], json!(["value"]));
    assert_eq!(format["schema"]["properties"]["value"]["items"], json!({ "type": "string" }));

    // A map: non-strict, the schema as written.
    let scores = json!({
        "type": "object", "required": ["scores"],
        "properties": { "scores": { "type": "object", "additionalProperties": { "type": "number" } } }
    });
    let server = FakeServer::scripted(vec![answer(r#"{"scores": {"speed": 0.9, "cost": 0.2}}"#)]);
    let report = engine(Arc::new(InMemoryStore::new()), models(&server.url))
        .start(&shaped(scores.clone()), json!("x"))
        .await
        .unwrap();
    assert_eq!(report.output, Some(json!({ "scores": { "speed": 0.9, "cost": 0.2 } })), "{:?}", report.error);
    let format = &server.requests()[0].body["response_format"]["json_schema"];
    assert_eq!((&format["strict"], &format["schema"]), (&json!(false), &scores), "not narrowed");

    // A `$ref` with a description beside it: non-strict too.
    let referenced = json!({
        "type": "object", "required": ["who"], "$defs": { "person": { "type": "object", "properties": { "name": { "type": "string" } }, "required": ["name"] } },
        "properties": { "who": { "$ref": "#/$defs/person", "description": "the customer" } }
    });
    let server = FakeServer::scripted(vec![answer(r#"{"who": {"name": "Ada"}}"#)]);
    let report = engine(Arc::new(InMemoryStore::new()), models(&server.url))
        .start(&shaped(referenced), json!("x"))
        .await
        .unwrap();
    assert_eq!(report.output, Some(json!({ "who": { "name": "Ada" } })), "{:?}", report.error);
    assert_eq!(server.requests()[0].body["response_format"]["json_schema"]["strict"], json!(false));

    // A string at the root, Anthropic: the forced tool's input schema is the wrapper.
    let server = FakeServer::scripted(vec![anthropic_answer(
        "tool_use",
        &json!([{ "type": "tool_use", "id": "t1", "name": "answer", "input": { "value": "Hello, Ada" } }]),
    )]);
    let mut config = ModelConfig::new(Provider::Anthropic, "claude");
    config.base_url = Some(server.url.clone());
    config.api_key = Some("sk".into());
    config.http = fast_http();
    let mut anthropic = Models::new();
    anthropic.bind("fast", &config).unwrap();
    let text = json!({ "type": "string", "minLength": 1 });
    let report = engine(Arc::new(InMemoryStore::new()), anthropic).start(&shaped(text), json!("x")).await.unwrap();
    assert_eq!(report.output, Some(json!("Hello, Ada")), "{:?}", report.error);
    let tool = &server.requests()[0].body["tools"][0];
    assert_eq!(tool["input_schema"]["properties"]["value"], json!({ "type": "string", "minLength": 1 }));
}
