//! Sessions and long-term memory in a running engine: an agent continuing a conversation
//! across runs, the session cap, ownership (`access_denied`), a crash right after a session
//! save, and the `memory.store` / `memory.recall` steps with their scopes.

use stepwright_testkit::completed_paths;

use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde_json::{Value, json};
use stepwright_core::bank::{MemoryAddress, MemoryBank, MemoryScope};
use stepwright_core::session::{Appended, SessionAppend, SessionMessage, SessionOwner, SessionStore};
use stepwright_core::{
    Caller, Engine, InMemoryStore, Node, RunId, RunStatus, StartOptions, Store, StoreError, Workflow,
};
use stepwright_llm::{
    AgentSpec, AgentStep, ChatRequest, ChatResponse, FinishReason, MemoryService, Message, Models, RecallSpec,
    RecallStep, RememberSpec, RememberStep, ScopeKind, ScriptedModel, Sessions, Usage,
};

/// A model that says how many messages it was sent and repeats the last user message.
fn echo_model() -> Arc<ScriptedModel> {
    Arc::new(
        ScriptedModel::new(|request: &ChatRequest| {
            let last = request
                .messages
                .iter()
                .rev()
                .find_map(|m| match m {
                    Message::User { content } => Some(content.clone()),
                    _ => None,
                })
                .unwrap_or_default();
            ChatResponse {
                id: None,
                content: format!("{} messages; you said {last:?}", request.messages.len()),
                tool_calls: Vec::new(),
                finish_reason: FinishReason::Stop,
                usage: Usage { input_tokens: 10, output_tokens: 5, ..Default::default() },
                model: "scripted-1".into(),
            }
        })
        .recording(),
    )
}

fn engine(store: Arc<InMemoryStore>, sessions: Arc<dyn SessionStore>, model: Arc<ScriptedModel>) -> Engine {
    let mut models = Models::new();
    models.bind_adapter("fast", "scripted-1", model, None);
    Engine::builder()
        .store(store.clone() as Arc<dyn Store>)
        .service(Arc::new(models))
        .service(Arc::new(Sessions::new(sessions)))
        .service(Arc::new(MemoryService::new(store as Arc<dyn MemoryBank>)))
        .build()
}

fn chat(spec: AgentSpec) -> Workflow {
    Workflow::builder("chat").step(Node::dyn_step("agent", AgentStep::new(spec))).build().unwrap()
}

fn assistant() -> AgentSpec {
    let mut spec = AgentSpec::new("assistant", "fast");
    spec.instructions = Some("Be brief.".into());
    spec
}

fn alice() -> StartOptions {
    StartOptions { caller: Caller::user(Some("acme"), "alice"), ..StartOptions::default() }
}

fn say(session: &str, prompt: &str) -> Value {
    json!({ "prompt": prompt, "session": session })
}

async fn history(store: &InMemoryStore, session: &str, owner: &Caller) -> Vec<Value> {
    let history = store.session_history(session, &SessionOwner::from(owner), 1000).await.unwrap();
    history.into_iter().map(|m| m.message).collect()
}

#[tokio::test]
async fn an_agent_continues_its_session_across_runs() {
    let store = Arc::new(InMemoryStore::new());
    let model = echo_model();
    let engine = engine(store.clone(), store.clone(), model.clone());
    let first = engine.start_with(&chat(assistant()), say("s-1", "My name is Alice."), alice()).await.unwrap();
    assert_eq!(first.status, RunStatus::Completed, "{:?}", first.error);
    assert_eq!(first.output, Some(json!("2 messages; you said \"My name is Alice.\"")));
    assert_eq!(
        completed_paths(&store, first.run_id),
        ["agent/session.load", "agent/turn.0/model", "agent/session.save", "agent"]
    );

    let second = engine.start_with(&chat(assistant()), say("s-1", "What is my name?"), alice()).await.unwrap();
    assert_eq!(second.status, RunStatus::Completed, "{:?}", second.error);
    let requests = model.requests();
    assert_eq!(
        requests[1].messages,
        [
            Message::system("Be brief."),
            Message::user("My name is Alice."),
            Message::assistant("2 messages; you said \"My name is Alice.\""),
            Message::user("What is my name?"),
        ],
        "the history comes after the system prompt and before the new message"
    );
    // Stored message by message, without the system prompt.
    let stored = history(&store, "s-1", &alice().caller).await;
    assert_eq!(stored.len(), 4);
    assert_eq!(
        stored[3],
        serde_json::to_value(Message::assistant("4 messages; you said \"What is my name?\"")).unwrap()
    );

    // A run without a session id is on its own.
    engine.start_with(&chat(assistant()), json!("Hello?"), alice()).await.unwrap();
    assert_eq!(model.requests()[2].messages.len(), 2);
    assert_eq!(history(&store, "s-1", &alice().caller).await.len(), 4);
}

#[tokio::test]
async fn a_session_keeps_only_its_newest_messages() {
    let store = Arc::new(InMemoryStore::new());
    let model = echo_model();
    let engine = engine(store.clone(), store.clone(), model.clone());
    let mut spec = assistant();
    spec.max_stored_messages = Some(3);
    for prompt in ["one", "two", "three"] {
        let report = engine.start_with(&chat(spec.clone()), say("s", prompt), alice()).await.unwrap();
        assert_eq!(report.status, RunStatus::Completed, "{:?}", report.error);
    }
    // Before the third run the session had had 4 messages and kept the newest three:
    // the answer to "one", "two", the answer to "two".
    let third = &model.requests()[2].messages;
    assert_eq!(third.len(), 1 + 3 + 1, "system, the three kept, the new prompt");
    assert_eq!(third[2], Message::user("two"));
    let stored = history(&store, "s", &alice().caller).await;
    assert_eq!(stored.len(), 3);
    assert_eq!(stored[1], serde_json::to_value(Message::user("three")).unwrap());

    // The service's cap applies to agents that set none.
    let store = Arc::new(InMemoryStore::new());
    let model = echo_model();
    let mut models = Models::new();
    models.bind_adapter("fast", "scripted-1", model.clone(), None);
    let capped = Engine::builder()
        .store(store.clone() as Arc<dyn Store>)
        .service(Arc::new(models))
        .service(Arc::new(Sessions::new(store.clone()).max_stored_messages(1)))
        .build();
    capped.start_with(&chat(assistant()), say("s", "one"), alice()).await.unwrap();
    capped.start_with(&chat(assistant()), say("s", "two"), alice()).await.unwrap();
    assert_eq!(model.requests()[1].messages.len(), 3, "system, one kept message, the prompt");
}

#[tokio::test]
async fn someone_elses_session_is_access_denied() {
    let store = Arc::new(InMemoryStore::new());
    let model = echo_model();
    let engine = engine(store.clone(), store.clone(), model.clone());
    engine.start_with(&chat(assistant()), say("s-1", "secret plans"), alice()).await.unwrap();
    for caller in [Caller::user(Some("acme"), "bob"), Caller::user(Some("rival"), "alice"), Caller::default()] {
        let options = StartOptions { caller: caller.clone(), ..StartOptions::default() };
        let report = engine.start_with(&chat(assistant()), say("s-1", "what were the plans?"), options).await.unwrap();
        assert_eq!(report.status, RunStatus::Failed);
        let error = report.error.unwrap();
        assert_eq!(error.code.as_str(), "access_denied", "{caller:?}: {error:?}");
        assert!(!error.message.contains("alice") || caller.tenant.as_deref() == Some("rival"), "{}", error.message);
    }
    assert_eq!(model.requests().len(), 1, "no stranger's run reached the model");
    assert_eq!(history(&store, "s-1", &alice().caller).await.len(), 2, "nothing was added");

    let report = engine.start_with(&chat(assistant()), json!({ "prompt": "hi", "session": 7 }), alice()).await.unwrap();
    assert_eq!(report.error.unwrap().code.as_str(), "input_validation");
}

/// Saves to the session, then (the first time) makes the next journal commit fail, as if
/// the process died right after the session append and before the journal recorded it.
struct CrashAfterSave {
    inner: Arc<InMemoryStore>,
    armed: std::sync::atomic::AtomicBool,
}

impl SessionStore for CrashAfterSave {
    fn session_history(
        &self,
        session: &str,
        owner: &SessionOwner,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<SessionMessage>, StoreError>> {
        self.inner.session_history(session, owner, limit)
    }

    fn append_to_session(&self, append: SessionAppend) -> BoxFuture<'_, Result<Appended, StoreError>> {
        Box::pin(async move {
            let done = self.inner.append_to_session(append).await;
            if self.armed.swap(false, std::sync::atomic::Ordering::SeqCst) {
                self.inner.fail_appends_after(0);
            }
            done
        })
    }

    fn delete_session(&self, session: &str, owner: &SessionOwner) -> BoxFuture<'_, Result<bool, StoreError>> {
        self.inner.delete_session(session, owner)
    }
}

#[tokio::test]
async fn a_crash_right_after_a_session_save_does_not_save_twice() {
    let store = Arc::new(InMemoryStore::new());
    let model = echo_model();
    let engine =
        engine(store.clone(), Arc::new(CrashAfterSave { inner: store.clone(), armed: true.into() }), model.clone());
    let run: RunId = "01890000-0000-7000-8000-00000005e55a".parse().unwrap();
    let options = StartOptions { run_id: Some(run), ..alice() };
    let crashed = engine.start_with(&chat(assistant()), say("s", "remember me"), options).await;
    assert!(crashed.is_err(), "{crashed:?}");
    assert_eq!(history(&store, "s", &alice().caller).await.len(), 2, "the append landed before the crash");
    store.heal();
    let report = engine.resume(&chat(assistant()), run).await.unwrap();
    assert_eq!(report.status, RunStatus::Completed, "{:?}", report.error);
    assert_eq!(model.requests().len(), 1, "the model call was served from the journal");
    assert_eq!(history(&store, "s", &alice().caller).await.len(), 2, "the second save changed nothing");
    assert!(
        completed_paths(&store, run).contains(&"agent/session.save".to_owned()),
        "the save ran again and was recorded"
    );
}

fn remember(scope: ScopeKind) -> Node {
    RememberStep::node("remember", RememberSpec { namespace: "facts".into(), scope })
        .input_from(|scope| scope.input().get("store").cloned().unwrap_or(Value::Null))
}

fn recall(scope: ScopeKind, limit: usize) -> Node {
    RecallStep::node("recall", RecallSpec { namespace: "facts".into(), scope, limit })
        .input_from(|scope| scope.input().get("recall").cloned().unwrap_or(Value::Null))
}

fn memory_flow(scope: ScopeKind, limit: usize) -> Workflow {
    Workflow::builder("memory").step(remember(scope)).step(recall(scope, limit)).build().unwrap()
}

#[tokio::test]
async fn memory_store_and_recall_by_query_key_and_newest() {
    let store = Arc::new(InMemoryStore::new());
    let engine = engine(store.clone(), store.clone(), echo_model());
    let flow = memory_flow(ScopeKind::User, 5);
    let facts = [
        ("tea", json!("Alice drinks green tea")),
        ("city", json!({ "lives_in": "Oslo, Norway" })),
        ("pet", json!("a cat called Tea")),
    ];
    for (key, value) in &facts {
        let input = json!({ "store": { "key": key, "value": value }, "recall": { "key": key } });
        let report = engine.start_with(&flow, input, alice()).await.unwrap();
        assert_eq!(report.status, RunStatus::Completed, "{:?}", report.error);
        let found = report.output.unwrap();
        assert_eq!(found[0]["value"], *value, "recall by key finds what was stored");
    }
    let input = json!({ "store": { "key": "tea", "value": "Alice drinks green tea", "text": "beverage: green tea" }, "recall": "TEA please" });
    let report = engine.start_with(&flow, input, alice()).await.unwrap();
    let hits = report.output.unwrap();
    let keys: Vec<&str> = hits.as_array().unwrap().iter().map(|h| h["key"].as_str().unwrap()).collect();
    assert_eq!(keys.len(), 2, "{hits}");
    assert!(keys.contains(&"tea") && keys.contains(&"pet"), "{hits}");
    assert!(hits[0]["score"].as_f64().unwrap() > 0.0);
    let item = store
        .memory_get(MemoryAddress {
            tenant: "acme".into(),
            scope: MemoryScope::User("alice".into()),
            namespace: "facts".into(),
            key: "tea".into(),
        })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(item.text, "beverage: green tea", "an explicit text is what search looks in");

    let input = json!({ "store": { "key": "dog", "value": "no dog" }, "recall": {} });
    let newest = engine.start_with(&memory_flow(ScopeKind::User, 2), input, alice()).await.unwrap().output.unwrap();
    let keys: Vec<&str> = newest.as_array().unwrap().iter().map(|h| h["key"].as_str().unwrap()).collect();
    assert_eq!(keys, ["dog", "tea"], "without a query: the newest, up to the limit");

    // Bob, in the same tenant, has his own user memory.
    let bob = StartOptions { caller: Caller::user(Some("acme"), "bob"), ..StartOptions::default() };
    let input = json!({ "store": { "key": "x", "value": "bob's" }, "recall": "tea" });
    let report = engine.start_with(&flow, input, bob).await.unwrap();
    assert_eq!(report.output, Some(json!([])));
}

#[tokio::test]
async fn memory_scopes_resolve_against_the_run() {
    let store = Arc::new(InMemoryStore::new());
    let engine = engine(store.clone(), store.clone(), echo_model());

    // Run scope: each run sees only its own items, and erasing the run erases them.
    let input = json!({ "store": { "key": "draft", "value": "first draft" }, "recall": "draft" });
    let first = engine.start_with(&memory_flow(ScopeKind::Run, 5), input.clone(), alice()).await.unwrap();
    assert_eq!(first.output.as_ref().unwrap().as_array().unwrap().len(), 1);
    let only_recall = Workflow::builder("memory").step(recall(ScopeKind::Run, 5)).build().unwrap();
    let other = engine.start_with(&only_recall, json!({ "recall": "draft" }), alice()).await.unwrap();
    assert_eq!(other.output, Some(json!([])), "another run's scratch memory is not visible");
    let run_item = MemoryAddress {
        tenant: "acme".into(),
        scope: MemoryScope::Run(first.run_id),
        namespace: "facts".into(),
        key: "draft".into(),
    };
    assert!(store.memory_get(run_item.clone()).await.unwrap().is_some());
    store.erase_run(first.run_id).await.unwrap();
    assert!(store.memory_get(run_item).await.unwrap().is_none());

    // Global scope: shared by the tenant, not across tenants.
    let flow = memory_flow(ScopeKind::Global, 5);
    let input = json!({ "store": { "key": "policy", "value": "refunds within 30 days" }, "recall": "refunds" });
    engine.start_with(&flow, input, alice()).await.unwrap();
    let colleague = StartOptions { caller: Caller::user(Some("acme"), "carol"), ..StartOptions::default() };
    let found = engine.start_with(&only_global(), json!({ "recall": "refunds" }), colleague).await.unwrap();
    assert_eq!(found.output.unwrap().as_array().unwrap().len(), 1);
    let outsider = StartOptions { caller: Caller::user(Some("rival"), "carol"), ..StartOptions::default() };
    let found = engine.start_with(&only_global(), json!({ "recall": "refunds" }), outsider).await.unwrap();
    assert_eq!(found.output, Some(json!([])));

    // User scope needs a user.
    let report =
        engine.start(&memory_flow(ScopeKind::User, 5), json!({ "store": { "key": "k", "value": 1 } })).await.unwrap();
    let error = report.error.unwrap();
    assert_eq!(error.code.as_str(), "input_validation");
    assert!(error.message.contains("needs a run started by a user"), "{}", error.message);

    // Session scope follows the session's owner.
    let chat_engine = engine;
    chat_engine.start_with(&chat(assistant()), say("s-9", "hello"), alice()).await.unwrap();
    let flow = memory_flow(ScopeKind::Session, 5);
    let input = json!({ "store": { "key": "topic", "value": "trains", "session": "s-9" }, "recall": { "query": "trains", "session": "s-9" } });
    let report = chat_engine.start_with(&flow, input.clone(), alice()).await.unwrap();
    assert_eq!(report.output.unwrap()[0]["value"], json!("trains"));
    let bob = StartOptions { caller: Caller::user(Some("acme"), "bob"), ..StartOptions::default() };
    let report = chat_engine.start_with(&flow, input, bob).await.unwrap();
    assert_eq!(report.error.unwrap().code.as_str(), "access_denied");
    let report = chat_engine.start_with(&flow, json!({ "store": { "key": "k", "value": 1 } }), alice()).await.unwrap();
    assert!(report.error.unwrap().message.contains("needs a `session` id"));
}

fn only_global() -> Workflow {
    Workflow::builder("memory").step(recall(ScopeKind::Global, 5)).build().unwrap()
}

#[tokio::test]
async fn memory_steps_reject_bad_input() {
    let store = Arc::new(InMemoryStore::new());
    let engine = engine(store.clone(), store.clone(), echo_model());
    for (input, expect) in [
        (json!({ "store": { "key": "k" } }), "memory.store takes"),
        (json!({ "store": { "key": "k", "value": 1, "extra": true } }), "unknown field"),
        (json!({ "store": { "key": "", "value": 1 } }), "must not be empty"),
        (json!({ "store": { "key": "k", "value": 1 }, "recall": { "key": "k", "query": "q" } }), "not both"),
        (json!({ "store": { "key": "k", "value": 1 }, "recall": 42 }), "memory.recall takes"),
    ] {
        let report = engine.start_with(&memory_flow(ScopeKind::User, 5), input.clone(), alice()).await.unwrap();
        let error = report.error.unwrap_or_else(|| panic!("{input} should fail"));
        assert_eq!(error.code.as_str(), "input_validation", "{input}");
        assert!(error.message.contains(expect), "{input}: {}", error.message);
    }
}
