//! The agent loop in a running engine: parallel tool calls, crash and resume, budgets, stuck
//! detection, approval-gated tools, orphaned calls, delegation, handoff and hooks. The model
//! is scripted: it answers as a function of the conversation it is sent.

use stepwright_testkit::completed_paths;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use stepwright_core::{
    Caller, Decision, Effect, Engine, ErrorCode, InMemoryStore, Node, Record, RunId, RunStatus, StartOptions,
    StepError, Store, Workflow,
};
use stepwright_llm::{
    AGENT_STUCK, AGENT_STUCK_EVENT, AgentHooks, AgentSpec, AgentStep, Agents, BUDGET_EXCEEDED, Budget, ChatRequest,
    ChatResponse, FinishReason, HookEvent, Message, Models, OnStuck, Pricing, ScriptedModel, TOOL_CALL_EVENT, ToolCall,
    ToolContext, ToolDef, Tools, Usage, fn_tool,
};

/// A model that answers as its script says, and remembers every request.
fn scripted(script: impl Fn(&ChatRequest) -> ChatResponse + Send + Sync + 'static) -> Arc<ScriptedModel> {
    Arc::new(ScriptedModel::new(script).recording())
}

fn say(text: &str) -> ChatResponse {
    ChatResponse {
        id: None,
        content: text.into(),
        tool_calls: Vec::new(),
        finish_reason: FinishReason::Stop,
        usage: Usage { input_tokens: 100, output_tokens: 10, ..Default::default() },
        model: "scripted-1".into(),
    }
}

fn use_tools(calls: &[(&str, &str, Value)]) -> ChatResponse {
    ChatResponse {
        id: None,
        content: String::new(),
        tool_calls: calls
            .iter()
            .map(|(id, name, arguments)| ToolCall {
                id: (*id).into(),
                name: (*name).into(),
                arguments: arguments.clone(),
            })
            .collect(),
        finish_reason: FinishReason::ToolCalls,
        usage: Usage { input_tokens: 100, output_tokens: 10, ..Default::default() },
        model: "scripted-1".into(),
    }
}

/// The tool results in a request, as (call id, content, is_error).
fn tool_results(request: &ChatRequest) -> Vec<(String, String, bool)> {
    request.tool_results().map(|(id, content, error)| (id.to_owned(), content.to_owned(), error)).collect()
}

#[derive(Clone, Default)]
struct Counter(Arc<AtomicU32>);

impl Counter {
    fn hit(&self) -> u32 {
        self.0.fetch_add(1, Ordering::SeqCst) + 1
    }
    fn get(&self) -> u32 {
        self.0.load(Ordering::SeqCst)
    }
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct City {
    city: String,
}

/// `weather` and `time` tools that count their calls. Both wait on one barrier, so they
/// only finish if they run at the same time.
fn weather_tools(calls: &Counter, barrier: Option<&Arc<tokio::sync::Barrier>>) -> Tools {
    let mut tools = Tools::new();
    for name in ["weather", "time"] {
        let calls = calls.clone();
        let barrier = barrier.cloned();
        let tool = fn_tool(ToolDef::new(name, "Ask about a city").effect(Effect::Read), move |_cx, city: City| {
            let calls = calls.clone();
            let barrier = barrier.clone();
            async move {
                calls.hit();
                if let Some(barrier) = barrier {
                    barrier.wait().await;
                }
                Ok(json!(format!("{name} in {}: fine", city.city)))
            }
        });
        tools.register(tool).unwrap();
    }
    tools
}

fn engine(store: Arc<InMemoryStore>, model: Arc<ScriptedModel>, tools: Tools, agents: Agents) -> Engine {
    let mut models = Models::new();
    models.bind_adapter("fast", "scripted-1", model, Some(Pricing::per_million(1.0, 2.0)));
    Engine::builder()
        .store(store as Arc<dyn Store>)
        .service(Arc::new(models))
        .service(Arc::new(tools))
        .service(Arc::new(agents))
        .build()
}

fn workflow(spec: AgentSpec) -> Workflow {
    Workflow::builder("agentic").step(Node::dyn_step("agent", AgentStep::new(spec))).build().unwrap()
}

fn support_agent() -> AgentSpec {
    let mut spec = AgentSpec::new("support", "fast");
    spec.instructions = Some("You answer questions about cities.".into());
    spec.tools = vec!["weather".into(), "time".into()];
    spec
}

/// Asks for both tools at once, then answers with what they said.
fn two_tools_then_answer(request: &ChatRequest) -> ChatResponse {
    let results = tool_results(request);
    if results.is_empty() {
        use_tools(&[("c1", "weather", json!({ "city": "Oslo" })), ("c2", "time", json!({ "city": "Oslo" }))])
    } else {
        say(&results.iter().map(|(_, content, _)| content.as_str()).collect::<Vec<_>>().join(" / "))
    }
}

#[tokio::test]
async fn parallel_tool_calls_run_at_once_and_every_call_is_a_journaled_sub_step() {
    let model = scripted(two_tools_then_answer);
    let calls = Counter::default();
    let store = Arc::new(InMemoryStore::new());
    let tools = weather_tools(&calls, Some(&Arc::new(tokio::sync::Barrier::new(2))));
    let engine = engine(store.clone(), model.clone(), tools, Agents::new());
    let report =
        tokio::time::timeout(Duration::from_secs(10), engine.start(&workflow(support_agent()), json!("Oslo?")))
            .await
            .expect("the two tools ran at the same time (each waits for the other)")
            .unwrap();
    assert_eq!(report.status, RunStatus::Completed, "{:?}", report.error);
    assert_eq!(report.output, Some(json!("weather in Oslo: fine / time in Oslo: fine")));

    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    let offered: Vec<&str> = requests[0].tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(offered, ["weather", "time"]);
    assert_eq!(requests[0].tools[0].parameters["required"], json!(["city"]), "the schema is derived from the type");
    assert_eq!(requests[0].messages[0], Message::system("You answer questions about cities."));
    // The second request carries the assistant's calls, then both results in the model's order.
    assert_eq!(
        tool_results(&requests[1]),
        [
            ("c1".to_owned(), "weather in Oslo: fine".to_owned(), false),
            ("c2".to_owned(), "time in Oslo: fine".to_owned(), false)
        ]
    );
    let mut paths = completed_paths(&store, report.run_id);
    paths[1..3].sort();
    assert_eq!(
        paths,
        ["agent/turn.0/model", "agent/turn.0/tool.0", "agent/turn.0/tool.1", "agent/turn.1/model", "agent"]
    );
    // The second call's input artifact holds only the new messages and names the first.
    let inputs: Vec<Arc<Value>> = store
        .entries(report.run_id)
        .iter()
        .filter_map(|e| match &e.record {
            Record::Artifact { kind, hash, .. } if kind == "llm-input" => store.blob(hash),
            _ => None,
        })
        .collect();
    assert_eq!(inputs.len(), 2);
    assert_eq!(inputs[0]["messages"].as_array().unwrap().len(), 2, "system and user");
    assert!(inputs[0].get("continues").is_none());
    assert_eq!(inputs[1]["continues"], json!("agent/turn.0/model"));
    assert_eq!(inputs[1]["messages_from"], json!(2));
    let new: Vec<&str> =
        inputs[1]["messages"].as_array().unwrap().iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(new, ["assistant", "tool", "tool"], "each message is stored once");
    let events = store.events(report.run_id).await.unwrap();
    assert_eq!(events.iter().filter(|e| e.kind == TOOL_CALL_EVENT).count(), 2);
    let (_, total) = stepwright_llm::rollup(&events);
    assert_eq!((total.calls, total.input_tokens, total.output_tokens), (2, 200, 20));
}

#[tokio::test]
async fn a_crash_after_the_first_tool_result_resumes_without_repeating_anything_finished() {
    let model = scripted(two_tools_then_answer);
    let calls = Counter::default();
    let store = Arc::new(InMemoryStore::new());
    let mut spec = support_agent();
    spec.parallel_tool_calls = false;
    let engine = engine(store.clone(), model.clone(), weather_tools(&calls, None), Agents::new());
    // Journal commits: the model call, the first tool's result; the second tool's result is
    // lost as if the process died as it finished.
    store.fail_appends_after(2);
    let run: RunId = "01890000-0000-7000-8000-0000000a9e47".parse().unwrap();
    let crashed = engine
        .start_with(&workflow(spec.clone()), json!("Oslo?"), StartOptions { run_id: Some(run), ..Default::default() })
        .await;
    assert!(crashed.is_err(), "{crashed:?}");
    assert_eq!(completed_paths(&store, run), ["agent/turn.0/model", "agent/turn.0/tool.0"]);
    assert_eq!((model.requests().len(), calls.get()), (1, 2));
    store.heal();
    let report = engine.resume(&workflow(spec), run).await.unwrap();
    assert_eq!(report.status, RunStatus::Completed, "{:?}", report.error);
    assert_eq!(model.requests().len(), 2, "turn.0's model call was served from the journal");
    assert_eq!(calls.get(), 3, "only the unfinished tool call ran again");
}

fn counting_tool(name: &str, def: ToolDef, calls: &Counter, fail: bool) -> Arc<dyn stepwright_llm::Tool> {
    let calls = calls.clone();
    let name = name.to_owned();
    fn_tool(def, move |cx: ToolContext, args: Value| {
        let calls = calls.clone();
        let name = name.clone();
        async move {
            calls.hit();
            if fail {
                return Err(StepError::new(ErrorCode::new("not_found"), format!("{name}: nothing for {args}")));
            }
            Ok(json!({ "done": args, "key": cx.idempotency_key }))
        }
    })
}

#[tokio::test]
async fn an_interrupted_call_that_is_not_safe_to_retry_reaches_the_model_as_outcome_unknown() {
    let model = scripted(|request| {
        let results = tool_results(request);
        match results.first() {
            None => use_tools(&[("pay", "charge", json!({ "amount": 12 }))]),
            Some((_, content, true)) => say(&format!("I could not tell: {content}")),
            Some((_, content, false)) => say(content),
        }
    });
    let calls = Counter::default();
    let mut tools = Tools::new();
    tools.register(counting_tool("charge", ToolDef::new("charge", "Charge a card"), &calls, false)).unwrap();
    let store = Arc::new(InMemoryStore::new());
    let engine = engine(store.clone(), model.clone(), tools, Agents::new());
    let mut spec = AgentSpec::new("payer", "fast");
    spec.tools = vec!["charge".into()];
    // The model call, the charge's intent; its result is lost.
    store.fail_appends_after(2);
    let run: RunId = "01890000-0000-7000-8000-00000000c4a6".parse().unwrap();
    let crashed = engine
        .start_with(&workflow(spec.clone()), json!("pay"), StartOptions { run_id: Some(run), ..Default::default() })
        .await;
    assert!(crashed.is_err());
    assert_eq!(calls.get(), 1, "the charge ran once before the crash");
    store.heal();
    let report = engine.resume(&workflow(spec), run).await.unwrap();
    assert_eq!(report.status, RunStatus::Completed, "{:?}", report.error);
    assert_eq!(calls.get(), 1, "an external tool not safe to retry is never run twice");
    let answer = report.output.unwrap();
    assert!(answer.as_str().unwrap().starts_with("I could not tell: the outcome of this call is unknown"), "{answer}");
}

#[tokio::test]
async fn a_fenced_tool_gets_an_idempotency_key_that_is_stable_for_the_call() {
    let model = scripted(|request| match tool_results(request).first() {
        None => use_tools(&[("pay", "charge", json!({ "amount": 12 }))]),
        Some((_, content, _)) => say(content),
    });
    let calls = Counter::default();
    let mut tools = Tools::new();
    let def = ToolDef::new("charge", "Charge a card").effect(Effect::Write).safe_to_retry();
    tools.register(counting_tool("charge", def, &calls, false)).unwrap();
    let store = Arc::new(InMemoryStore::new());
    let engine = engine(store.clone(), model, tools, Agents::new());
    let mut spec = AgentSpec::new("payer", "fast");
    spec.tools = vec!["charge".into()];
    let report = engine.start(&workflow(spec), json!("pay")).await.unwrap();
    let answer: Value = serde_json::from_str(report.output.unwrap().as_str().unwrap()).unwrap();
    let key = answer["key"].as_str().expect("a fenced call has a key");
    let intent = store.entries(report.run_id).into_iter().find_map(|e| match e.record {
        Record::Intent { key, .. } => Some((e.path.as_str().to_owned(), key)),
        _ => None,
    });
    assert_eq!(intent, Some(("agent/turn.0/tool.0".to_owned(), key.to_owned())));
}

#[tokio::test]
async fn budgets_end_the_run_with_budget_exceeded() {
    let always_tools = || scripted(|_| use_tools(&[("c", "weather", json!({ "city": "Oslo" }))]));
    let calls = Counter::default();
    let run = |spec: AgentSpec, model: Arc<ScriptedModel>| {
        let engine = engine(Arc::new(InMemoryStore::new()), model, weather_tools(&calls, None), Agents::new());
        async move { engine.start(&workflow(spec), json!("loop forever")).await.unwrap() }
    };

    let mut spec = support_agent();
    spec.max_iterations = 3;
    let model = always_tools();
    let report = run(spec, model.clone()).await;
    assert_eq!(report.status, RunStatus::Failed);
    let error = report.error.unwrap();
    assert_eq!(error.code, BUDGET_EXCEEDED);
    assert!(error.message.contains("3 model calls (max_iterations)"), "{}", error.message);
    assert_eq!(model.requests().len(), 3);

    let mut spec = support_agent();
    spec.budget = Budget { tokens: Some(250), ..Budget::default() };
    let model = always_tools();
    let error = run(spec, model.clone()).await.error.unwrap();
    assert_eq!(error.code, BUDGET_EXCEEDED);
    assert!(error.message.contains("used 330 tokens, over its budget of 250"), "{}", error.message);

    // Each call costs (100 × 1 + 10 × 2) / 1e6 = $0.00012.
    let mut spec = support_agent();
    spec.budget = Budget { cost_usd: Some(0.0003), ..Budget::default() };
    let error = run(spec, always_tools()).await.error.unwrap();
    assert!(error.message.contains("spent $0.000360"), "{}", error.message);

    let mut spec = support_agent();
    spec.budget = Budget { iterations: Some(2), ..Budget::default() };
    let error = run(spec, always_tools()).await.error.unwrap();
    assert!(error.message.contains("needs model call 3 over a budget of 2"), "{}", error.message);

    // A slow tool makes the wall-time budget run out before the next model call.
    let mut tools = Tools::new();
    tools
        .register(fn_tool(ToolDef::new("weather", "slow").effect(Effect::Read), |_cx, _city: City| async {
            tokio::time::sleep(Duration::from_millis(80)).await;
            Ok("slow")
        }))
        .unwrap();
    let engine = engine(Arc::new(InMemoryStore::new()), always_tools(), tools, Agents::new());
    let mut spec = AgentSpec::new("slow", "fast");
    spec.tools = vec!["weather".into()];
    spec.budget = Budget { wall_time_ms: Some(50), ..Budget::default() };
    let error = engine.start(&workflow(spec), json!("go")).await.unwrap().error.unwrap();
    assert_eq!(error.code, BUDGET_EXCEEDED);
    assert!(error.message.contains("wall-time budget of 50 ms"), "{}", error.message);
}

fn failing_tools(calls: &Counter) -> Tools {
    let mut tools = Tools::new();
    tools
        .register(counting_tool("search", ToolDef::new("search", "Search").effect(Effect::Read), calls, true))
        .unwrap();
    tools
}

/// Keeps searching (and failing) until it is given guidance, then answers with it.
fn searches_until_guided(request: &ChatRequest) -> ChatResponse {
    let guidance = request.messages.iter().find_map(|m| match m {
        Message::User { content } if content.starts_with("Guidance from a person: ") => Some(content.clone()),
        _ => None,
    });
    match guidance {
        Some(text) => say(&format!("following {text}")),
        None => {
            let mut response = use_tools(&[("s", "search", json!({ "q": "anything" }))]);
            response.content = "still looking".into();
            response
        }
    }
}

#[tokio::test]
async fn a_stuck_agent_fails_stops_or_escalates_to_a_person() {
    let calls = Counter::default();
    let start = |on_stuck: OnStuck, store: Arc<InMemoryStore>| {
        let model = scripted(searches_until_guided);
        let engine = engine(store, model.clone(), failing_tools(&calls), Agents::new());
        let mut spec = AgentSpec::new("searcher", "fast");
        spec.tools = vec!["search".into()];
        spec.stuck_after = Some(2);
        spec.on_stuck = on_stuck;
        (engine, workflow(spec), model)
    };

    let (engine, flow, model) = start(OnStuck::Fail, Arc::new(InMemoryStore::new()));
    let report = engine.start(&flow, json!("find it")).await.unwrap();
    let error = report.error.unwrap();
    assert_eq!(error.code, AGENT_STUCK);
    assert_eq!(model.requests().len(), 2, "stuck after two iterations without a successful call");
    // The model saw each failure as an error result.
    let seen = tool_results(&model.requests()[1]);
    assert!(seen[0].2 && seen[0].1.starts_with("error (not_found): search: nothing for"), "{seen:?}");

    let (engine, flow, _) = start(OnStuck::Stop, Arc::new(InMemoryStore::new()));
    let report = engine.start(&flow, json!("find it")).await.unwrap();
    assert_eq!(report.output, Some(json!("still looking")), "stop ends with the last text");

    let store = Arc::new(InMemoryStore::new());
    let (engine, flow, model) = start(OnStuck::Escalate, store.clone());
    let report = engine.start(&flow, json!("find it")).await.unwrap();
    assert_eq!(report.status, RunStatus::Suspended);
    let events = store.events(report.run_id).await.unwrap();
    assert_eq!(events.iter().filter(|e| e.kind == AGENT_STUCK_EVENT).count(), 1);
    let pending = &report.pending[0];
    let guidance = Decision::Modify { payload: json!({ "guidance": "try the archive" }) };
    engine.resolve(report.run_id, &pending.id, guidance, &Caller::default()).await.unwrap();
    let done = engine.resume(&flow, report.run_id).await.unwrap();
    assert_eq!(done.status, RunStatus::Completed, "{:?}", done.error);
    assert_eq!(done.output, Some(json!("following Guidance from a person: try the archive")));
    assert_eq!(model.requests().len(), 3, "the two calls before the escalation were served on resume");

    // Retry: the model is told it is stuck and tries again, twice; stuck a third time, it fails.
    let (engine, flow, model) = start(OnStuck::Retry, Arc::new(InMemoryStore::new()));
    let report = engine.start(&flow, json!("find it")).await.unwrap();
    let error = report.error.unwrap();
    assert_eq!(error.code, AGENT_STUCK);
    assert!(error.message.ends_with("again, after 2 retries"), "{}", error.message);
    let requests = model.requests();
    assert_eq!(requests.len(), 6, "three stuck spells of two iterations");
    let nudged = |request: &ChatRequest| {
        request
            .messages
            .iter()
            .any(|m| matches!(m, Message::User { content } if content.contains("try a different approach")))
    };
    assert!(!nudged(&requests[1]) && nudged(&requests[2]) && nudged(&requests[5]), "nudged after each spell");
}

#[tokio::test]
async fn an_approval_gated_tool_waits_for_a_person_and_a_rejection_is_a_result() {
    let calls = Counter::default();
    let model = scripted(|request| match tool_results(request).first() {
        None => use_tools(&[("d", "delete", json!({ "path": "/tmp/x" }))]),
        Some((_, content, is_error)) => say(&format!("{is_error}: {content}")),
    });
    let mut tools = Tools::new();
    let def = ToolDef::new("delete", "Delete a file").effect(Effect::Write).needs_approval();
    tools.register(counting_tool("delete", def, &calls, false)).unwrap();
    let mut spec = AgentSpec::new("cleaner", "fast");
    spec.tools = vec!["delete".into()];
    let store = Arc::new(InMemoryStore::new());
    let engine = engine(store.clone(), model.clone(), tools, Agents::new());
    let flow = workflow(spec);

    // Rejected: the tool never runs and the model hears why.
    let report = engine.start(&flow, json!("clean up")).await.unwrap();
    assert_eq!(report.status, RunStatus::Suspended);
    assert_eq!(calls.get(), 0, "nothing runs before the decision");
    let opened = store.entries(report.run_id).into_iter().find_map(|e| match e.record {
        Record::InterruptOpened { request, .. } => Some(request.payload),
        _ => None,
    });
    assert_eq!(opened, Some(json!({ "tool": "delete", "arguments": { "path": "/tmp/x" } })));
    let reject = Decision::Reject { reason: Some("not that one".into()) };
    engine.resolve(report.run_id, &report.pending[0].id, reject, &Caller::default()).await.unwrap();
    let done = engine.resume(&flow, report.run_id).await.unwrap();
    let answer = done.output.unwrap();
    assert!(
        answer.as_str().unwrap().starts_with("true: a person rejected this call of delete: not that one"),
        "{answer}"
    );
    assert_eq!(calls.get(), 0);

    // Modified: it runs once, with the corrected arguments.
    let report = engine.start(&flow, json!("clean up")).await.unwrap();
    let modify = Decision::Modify { payload: json!({ "arguments": { "path": "/tmp/y" } }) };
    engine.resolve(report.run_id, &report.pending[0].id, modify, &Caller::default()).await.unwrap();
    let done = engine.resume(&flow, report.run_id).await.unwrap();
    assert_eq!(calls.get(), 1);
    let answer = done.output.unwrap();
    assert!(answer.as_str().unwrap().contains("\"path\":\"/tmp/y\""), "{answer}");
}

#[tokio::test]
async fn an_agent_delegates_a_task_and_hands_off_to_another() {
    // The researcher answers tasks; the lead delegates, then hands off to the writer.
    let model = scripted(|request| {
        let system = match &request.messages[0] {
            Message::System { content } => content.clone(),
            _ => String::new(),
        };
        let results = tool_results(request);
        match (system.as_str(), results.len()) {
            ("researcher", _) => say("Oslo has 700k people"),
            ("lead", 0) => use_tools(&[("d", "delegate_to_researcher", json!({ "task": "How big is Oslo?" }))]),
            ("lead", 1) => use_tools(&[("h", "handoff_to_writer", json!({ "note": "write it up" }))]),
            ("writer", n) => say(&format!("Report ({n} results seen): {}", results[0].1)),
            other => panic!("unexpected {other:?}"),
        }
    });
    let agent = |name: &str| {
        let mut spec = AgentSpec::new(name, "fast");
        spec.instructions = Some(name.to_owned());
        spec
    };
    let mut lead = agent("lead");
    lead.delegates = vec!["researcher".into()];
    lead.handoffs = vec!["writer".into()];
    let agents = Agents::new().with(agent("researcher")).with(agent("writer"));
    let store = Arc::new(InMemoryStore::new());
    let engine = engine(store.clone(), model.clone(), Tools::new(), agents);
    let report = engine.start(&workflow(lead.clone()), json!("Tell me about Oslo")).await.unwrap();
    assert_eq!(report.status, RunStatus::Completed, "{:?}", report.error);
    assert_eq!(report.output, Some(json!("Report (2 results seen): Oslo has 700k people")));
    let requests = model.requests();
    assert_eq!(requests.len(), 4);
    assert_eq!(requests[1].messages, [Message::system("researcher"), Message::user("How big is Oslo?")]);
    assert!(requests[3].tools.is_empty(), "the writer has no tools of its own");
    assert_eq!(
        completed_paths(&store, report.run_id),
        [
            "agent/turn.0/model",
            "agent/turn.0/tool.0/turn.0/model",
            "agent/turn.0/tool.0",
            "agent/turn.1/model",
            "agent/turn.2/model",
            "agent"
        ]
    );

    // Delegation deeper than the budget allows is budget_exceeded.
    lead.budget = Budget { max_depth: 0, ..Budget::default() };
    let report = engine.start(&workflow(lead), json!("Tell me about Oslo")).await.unwrap();
    let error = report.error.unwrap();
    assert_eq!(error.code, BUDGET_EXCEEDED);
    assert!(error.message.contains("max_depth of 0"), "{}", error.message);
}

#[derive(Default)]
struct Recorded(Mutex<Vec<String>>);

impl AgentHooks for Recorded {
    fn on_start(&self, event: &HookEvent<'_>) {
        self.0.lock().unwrap().push(format!("start {}", event.agent));
    }
    fn on_complete(&self, event: &HookEvent<'_>) {
        self.0.lock().unwrap().push(format!("complete {} after {} {}", event.agent, event.iteration, event.detail));
    }
    fn on_stuck(&self, event: &HookEvent<'_>) {
        self.0.lock().unwrap().push(format!("stuck {}", event.agent));
    }
}

#[tokio::test]
async fn hooks_hear_start_complete_and_stuck_and_bad_calls_are_results() {
    let hooks = Arc::new(Recorded::default());
    // First an unknown tool and arguments that do not match, then an answer.
    let model = scripted(|request| match tool_results(request).len() {
        0 => use_tools(&[("x", "teleport", json!({})), ("y", "weather", json!({ "town": 3 }))]),
        _ => say(&serde_json::to_string(&tool_results(request)).unwrap()),
    });
    let calls = Counter::default();
    let agents = Agents::new().hook(hooks.clone());
    let first = engine(Arc::new(InMemoryStore::new()), model, weather_tools(&calls, None), agents);
    let report = first.start(&workflow(support_agent()), json!("?")).await.unwrap();
    let seen: Vec<(String, String, bool)> = serde_json::from_str(report.output.unwrap().as_str().unwrap()).unwrap();
    assert!(seen[0].1.starts_with("there is no tool named \"teleport\"; the tools are: time, weather"), "{seen:?}");
    assert!(seen[0].2 && seen[1].2);
    assert!(seen[1].1.contains("input_validation") && seen[1].1.contains("city"), "{seen:?}");
    assert_eq!(calls.get(), 0, "a call with bad arguments never reaches the tool");
    {
        let heard = hooks.0.lock().unwrap();
        assert_eq!(heard[0], "start support");
        assert!(heard[1].starts_with("complete support after 2 \"[["), "{heard:?}");
    }

    let mut stuck = AgentSpec::new("searcher", "fast");
    stuck.tools = vec!["search".into()];
    stuck.stuck_after = Some(1);
    let stuck_engine = engine(
        Arc::new(InMemoryStore::new()),
        scripted(searches_until_guided),
        failing_tools(&calls),
        Agents::new().hook(hooks.clone()),
    );
    stuck_engine.start(&workflow(stuck), json!("?")).await.unwrap();
    assert_eq!(hooks.0.lock().unwrap()[2..], ["start searcher".to_owned(), "stuck searcher".to_owned()]);
}

#[tokio::test]
async fn agents_handing_a_conversation_back_and_forth_still_stop() {
    let model = scripted(|request| {
        let me = match &request.messages[0] {
            Message::System { content } => content.clone(),
            _ => String::new(),
        };
        let other = if me == "ping" { "pong" } else { "ping" };
        use_tools(&[("h", &format!("handoff_to_{other}"), json!({}))])
    });
    let agent = |name: &str, other: &str| {
        let mut spec = AgentSpec::new(name, "fast");
        spec.instructions = Some(name.to_owned());
        spec.handoffs = vec![other.to_owned()];
        spec.max_iterations = 4;
        spec
    };
    let agents = Agents::new().with(agent("ping", "pong")).with(agent("pong", "ping"));
    let store = Arc::new(InMemoryStore::new());
    let engine = engine(store.clone(), model.clone(), Tools::new(), agents);
    let report = engine.start(&workflow(agent("ping", "pong")), json!("go")).await.unwrap();
    assert_eq!(report.error.unwrap().code, BUDGET_EXCEEDED);
    assert_eq!(model.requests().len(), 4, "max_iterations counts the whole conversation");
    let events = store.events(report.run_id).await.unwrap();
    let handoffs: Vec<&str> =
        events.iter().filter(|e| e.kind == "agent.handoff").map(|e| e.data["to"].as_str().unwrap()).collect();
    assert_eq!(handoffs, ["pong", "ping", "pong", "ping"]);
}

/// A model call that never answers and says when it is dropped.
struct HangingModel {
    dropped: Arc<tokio::sync::Notify>,
    calls: Counter,
}

struct SignalOnDrop(Arc<tokio::sync::Notify>);

impl Drop for SignalOnDrop {
    fn drop(&mut self) {
        self.0.notify_one();
    }
}

impl stepwright_llm::ChatModel for HangingModel {
    fn provider(&self) -> &str {
        "hanging"
    }

    fn chat<'a>(
        &'a self,
        _request: &'a ChatRequest,
    ) -> futures_util::future::BoxFuture<'a, Result<ChatResponse, stepwright_llm::ModelError>> {
        self.calls.hit();
        let guard = SignalOnDrop(self.dropped.clone());
        Box::pin(async move {
            let _guard = guard;
            std::future::pending().await
        })
    }
}

/// Waits until `/proc/PID` is gone or a zombie (it no longer runs).
async fn process_ends(pid: &str) -> bool {
    for _ in 0..250 {
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        if state.is_empty() || state.split(' ').nth(2) == Some("Z") {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

#[tokio::test]
async fn cancelling_a_run_kills_a_running_tool_and_drops_a_waiting_model_call() {
    // A command tool that runs for 30 s: the agent is cancelled while it runs.
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pid");
    let script = format!("echo $$ > {}.tmp && mv {0}.tmp {0}; exec sleep 30", pid_file.display());
    let mut tools = Tools::new();
    let def = ToolDef::new("slow", "Takes its time").effect(Effect::Read);
    tools.register(Arc::new(stepwright_llm::CommandTool::new(def, vec!["sh".into(), "-c".into(), script]))).unwrap();
    let model = scripted(|request| match tool_results(request).first() {
        None => use_tools(&[("s", "slow", json!({}))]),
        Some((_, content, _)) => say(content),
    });
    let store = Arc::new(InMemoryStore::new());
    let engine = engine(store.clone(), model.clone(), tools, Agents::new());
    let mut spec = AgentSpec::new("waiter", "fast");
    spec.tools = vec!["slow".into()];
    let run: RunId = "01890000-0000-7000-8000-0000000ca9c1".parse().unwrap();
    let running = tokio::spawn({
        let (engine, flow) = (engine.clone(), workflow(spec.clone()));
        async move { engine.start_with(&flow, json!("go"), StartOptions { run_id: Some(run), ..Default::default() }).await }
    });
    let pid = loop {
        if let Ok(pid) = std::fs::read_to_string(&pid_file) {
            break pid.trim().to_owned();
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert!(engine.cancel(run, "the user gave up").await.unwrap());
    let report = tokio::time::timeout(Duration::from_secs(10), running).await.expect("the run ends").unwrap().unwrap();
    assert_eq!(report.status, RunStatus::Cancelled, "{:?}", report.error);
    assert!(process_ends(&pid).await, "the cancelled tool's process {pid} still runs");
    assert_eq!(model.requests().len(), 1, "nothing after the cancel reached the model");
    assert!(!completed_paths(&store, run).iter().any(|p| p.ends_with("tool.0")), "the tool call never completed");

    // A model call waiting for its answer is dropped (its connection would close).
    let dropped = Arc::new(tokio::sync::Notify::new());
    let calls = Counter::default();
    let hanging = Arc::new(HangingModel { dropped: dropped.clone(), calls: calls.clone() });
    let mut models = Models::new();
    models.bind_adapter("fast", "hanging-1", hanging, None);
    let engine =
        Engine::builder().store(Arc::new(InMemoryStore::new()) as Arc<dyn Store>).service(Arc::new(models)).build();
    let run: RunId = "01890000-0000-7000-8000-0000000ca9c2".parse().unwrap();
    let running = tokio::spawn({
        let (engine, flow) = (engine.clone(), workflow(AgentSpec::new("waiter", "fast")));
        async move { engine.start_with(&flow, json!("go"), StartOptions { run_id: Some(run), ..Default::default() }).await }
    });
    while calls.get() == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(engine.cancel(run, "too slow").await.unwrap());
    tokio::time::timeout(Duration::from_secs(5), dropped.notified()).await.expect("the model call was dropped");
    let report = tokio::time::timeout(Duration::from_secs(5), running).await.expect("the run ends").unwrap().unwrap();
    assert_eq!(report.status, RunStatus::Cancelled, "{:?}", report.error);
}

/// An agent that says nothing and calls no tool has not answered: it is asked again (within
/// its repair turns) and, still silent, fails as `agent_empty_answer` — never a success with "".
#[tokio::test]
async fn an_empty_answer_is_asked_again_then_fails() {
    // Silent once, then an answer.
    let silent_once =
        scripted(|request: &ChatRequest| if request.messages.len() <= 2 { say("") } else { say("Oslo is fine") });
    let answering = engine(Arc::new(InMemoryStore::new()), silent_once.clone(), Tools::new(), Agents::new());
    let report = answering.start(&workflow(AgentSpec::new("quiet", "fast")), json!("Oslo?")).await.unwrap();
    assert_eq!(report.output, Some(json!("Oslo is fine")), "{:?}", report.error);
    let second = &silent_once.requests()[1];
    let told = match second.messages.last() {
        Some(Message::User { content }) => content.clone(),
        other => panic!("{other:?}"),
    };
    assert!(told.contains("Your answer was empty"), "{told}");

    // Always silent.
    let silent = scripted(|_| say("  "));
    let mute = engine(Arc::new(InMemoryStore::new()), silent.clone(), Tools::new(), Agents::new());
    let report = mute.start(&workflow(AgentSpec::new("quiet", "fast")), json!("Oslo?")).await.unwrap();
    assert_eq!(report.status, RunStatus::Failed);
    assert_eq!(report.error.unwrap().code, stepwright_llm::AGENT_EMPTY_ANSWER);
    let repairs = AgentSpec::new("quiet", "fast").repair_turns as usize;
    assert_eq!(silent.requests().len(), 1 + repairs, "one call and its repair turns");
}

/// An agent with an output schema asks its provider for that shape (OpenAI's `response_format`,
/// Anthropic's answer tool) on every turn, tools still offered, and still checks the answer.
#[tokio::test]
async fn an_agent_with_an_output_schema_asks_the_model_for_it() {
    let model = scripted(|request: &ChatRequest| {
        if tool_results(request).is_empty() {
            use_tools(&[("c1", "weather", json!({ "city": "Oslo" }))])
        } else {
            say(r#"{"city": "Oslo", "fine": true}"#)
        }
    });
    let mut spec = support_agent();
    let schema = json!({ "type": "object", "required": ["city", "fine"], "properties": { "city": { "type": "string" }, "fine": { "type": "boolean" } } });
    spec.output = Some(schema.clone());
    let engine =
        engine(Arc::new(InMemoryStore::new()), model.clone(), weather_tools(&Counter::default(), None), Agents::new());
    let report = engine.start(&workflow(spec), json!("Oslo?")).await.unwrap();
    assert_eq!(report.output, Some(json!({ "city": "Oslo", "fine": true })), "{:?}", report.error);
    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    for request in &requests {
        let output = request.output.as_ref().expect("the schema is sent");
        assert_eq!(output.schema, schema);
        assert_eq!(request.tools.len(), 2, "the tools are still offered");
    }
}

/// An answer that does not match the agent's output schema is sent back with what is wrong
/// (a repair turn), and the repaired answer is the output.
#[tokio::test]
async fn an_answer_off_the_schema_is_repaired_with_what_is_wrong() {
    let model = scripted(|request: &ChatRequest| {
        let repairs = request
            .messages
            .iter()
            .filter(|m| matches!(m, stepwright_llm::Message::User { content } if content.contains("does not match the required JSON Schema")))
            .count();
        match (tool_results(request).is_empty(), repairs) {
            (true, _) => use_tools(&[("c1", "weather", json!({ "city": "Oslo" }))]),
            (false, 0) => say(r#"{"city": "Oslo", "fine": "yes"}"#),
            (false, _) => say(r#"{"city": "Oslo", "fine": true}"#),
        }
    });
    let mut spec = support_agent();
    spec.output = Some(
        json!({ "type": "object", "required": ["city", "fine"], "properties": { "city": { "type": "string" }, "fine": { "type": "boolean" } } }),
    );
    let engine =
        engine(Arc::new(InMemoryStore::new()), model.clone(), weather_tools(&Counter::default(), None), Agents::new());
    let report = engine.start(&workflow(spec), json!("Oslo?")).await.unwrap();
    assert_eq!(report.output, Some(json!({ "city": "Oslo", "fine": true })), "{:?}", report.error);
    let requests = model.requests();
    assert_eq!(requests.len(), 3, "the tool turn, the answer off the schema, its repair");
    let told = requests[2]
        .messages
        .iter()
        .find_map(|m| match m {
            stepwright_llm::Message::User { content } if content.contains("JSON Schema") => Some(content.clone()),
            _ => None,
        })
        .expect("the repair prompt");
    assert!(told.contains("at /fine") && told.contains("boolean"), "{told}");
}

/// An experiment's fresh run of an agent: its `write` tool call is served what a recorded run's
/// call of the same tool with the same arguments got, and one no recorded run made is not
/// made (the run stops there, as a recompute's does).
#[tokio::test]
async fn a_fresh_run_serves_an_agents_tool_call_a_recorded_run_made() {
    let model = scripted(|request| {
        let asked = request.messages.iter().find_map(|m| match m {
            Message::User { content } => Some(content.clone()),
            _ => None,
        });
        let amount = if asked.unwrap_or_default().contains("12") { 12 } else { 99 };
        match tool_results(request).first() {
            None => use_tools(&[("pay", "charge", json!({ "amount": amount }))]),
            Some((_, content, is_error)) => say(&format!("{is_error}: {content}")),
        }
    });
    let calls = Counter::default();
    let mut tools = Tools::new();
    tools
        .register(counting_tool("charge", ToolDef::new("charge", "Charge a card").effect(Effect::Write), &calls, false))
        .unwrap();
    let store = Arc::new(InMemoryStore::new());
    let engine = engine(store.clone(), model, tools, Agents::new());
    let mut spec = AgentSpec::new("payer", "fast");
    spec.tools = vec!["charge".into()];
    let flow = workflow(spec);
    let past = engine.start(&flow, json!("pay 12")).await.unwrap();
    assert_eq!((past.status, calls.get()), (RunStatus::Completed, 1));
    let mut recorded = stepwright_core::RecordedEffects::new();
    recorded.add(&store.load(past.run_id).await.unwrap());
    let recorded = Arc::new(recorded);

    // Another input, the same call: served, not charged again.
    let trial = engine.try_fresh(
        &flow,
        &flow,
        json!("pay the 12 now"),
        Default::default(),
        Default::default(),
        recorded.clone(),
    );
    let trial = trial.await.unwrap();
    assert_eq!(calls.get(), 1, "served, not charged");
    let answer = trial.baseline.record.output.unwrap();
    assert!(answer.as_str().unwrap().starts_with("false: {\"done\":{\"amount\":12}"), "{answer}");
    assert!(!trial.report.changed, "{:?}", trial.report.steps);
    // A call no recorded run made: not made, and the run stops there (as a recompute's does).
    let trial = engine
        .try_fresh(&flow, &flow, json!("pay 99"), Default::default(), Default::default(), recorded)
        .await
        .unwrap();
    assert_eq!(calls.get(), 1, "nothing charged");
    let error = trial.baseline.record.error.unwrap();
    assert!(error.is(&ErrorCode::NOT_EXECUTED) && error.message.contains("no recorded run made"), "{error:?}");
}
