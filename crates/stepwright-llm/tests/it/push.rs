//! The `http` tool in push mode: each call is a step task, sent signed to the endpoint as
//! the body; `200` answers at once, `202` hands the task to the endpoint, which answers it
//! later under the task's lease (here through the store, as `/v1/tasks/{id}/complete` does).

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use stepwright_core::store::task::{TaskAnswer, TaskFilter, TaskId, TaskLease, TaskState};
use stepwright_core::{Effect, Engine, InMemoryStore, RunStatus, Store, Workflow};
use stepwright_llm::{HttpTool, PUSH_QUEUE, TOOL_FAILED, Tool, ToolDef, ToolStep, Tools, signature};
use stepwright_testkit::http::{FakeServer, Reply};

fn engine_for(tool: HttpTool) -> (Engine, Workflow, Arc<InMemoryStore>) {
    let tool: Arc<dyn Tool> = Arc::new(tool);
    let name = tool.def().name.clone();
    let tools = Tools::new().with(tool).unwrap();
    let node = ToolStep::node("call", &tools, &name).unwrap();
    let workflow = Workflow::builder("pushed").step(node).build().unwrap();
    let store = Arc::new(InMemoryStore::new());
    let engine = Engine::builder().store(store.clone() as Arc<dyn Store>).service(Arc::new(tools)).build();
    (engine, workflow, store)
}

fn pushed(server: &FakeServer, effect: Effect) -> HttpTool {
    let def = ToolDef::new("summarise", "Summarise").effect(effect);
    HttpTool::new(def, "POST", &format!("{}/summarise", server.url))
        .unwrap()
        .signed_with("s3cret")
        .push(Some(Duration::from_secs(30)))
        .unwrap()
}

/// The one task in the store.
async fn the_task(store: &InMemoryStore) -> stepwright_core::store::task::StoredTask {
    let tasks = store.tasks().unwrap().list_tasks(&TaskFilter { limit: 10, ..TaskFilter::default() }).await.unwrap();
    assert_eq!(tasks.len(), 1, "{tasks:?}");
    tasks.into_iter().next().unwrap()
}

#[tokio::test]
async fn an_endpoint_that_accepts_a_task_answers_it_later_under_its_lease() {
    let server = FakeServer::scripted(vec![Reply::json(202, json!({ "accepted": true }))]);
    let (engine, workflow, store) = engine_for(pushed(&server, Effect::Write));
    let run = {
        let (engine, workflow) = (engine.clone(), workflow.clone());
        tokio::spawn(async move { engine.start(&workflow, json!({ "doc": "long text" })).await })
    };
    while server.served() == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let request = &server.requests()[0];
    // The body is the task as a worker would claim it, signed like a webhook.
    let task: stepwright_api::task::Task = serde_json::from_slice(&request.raw).expect("a task");
    assert_eq!((task.queue.as_str(), task.handler.as_str(), task.lease), (PUSH_QUEUE, "summarise", 1));
    assert_eq!((task.input.clone(), task.step.as_str(), task.attempt), (json!({ "doc": "long text" }), "call", 1));
    let key = task.idempotency_key.clone().expect("a write carries the fence's key");
    assert_eq!(request.headers["idempotency-key"], key);
    let header = &request.headers["stepwright-signature"];
    let unix: i64 = header.strip_prefix("t=").and_then(|h| h.split(',').next()).unwrap().parse().unwrap();
    assert_eq!(header, &signature("s3cret", unix, &request.raw), "signed over the exact body");

    // Born leased to the endpoint: no worker can claim it; the endpoint answers under its lease.
    let row = the_task(&store).await;
    assert_eq!(
        (row.state, row.worker.as_deref()),
        (TaskState::Claimed, Some(format!("{}/summarise", server.url).as_str()))
    );
    let lease = TaskLease { task: TaskId::new(&task.id), token: task.lease };
    let now = stepwright_core::TokioClock::new();
    let at = stepwright_core::Clock::now(&now);
    let state = store.tasks().unwrap().answer_task(&lease, TaskAnswer::Complete(json!({ "summary": "short" })), at);
    assert_eq!(state.await.unwrap(), TaskState::Completed);
    let report = run.await.unwrap().unwrap();
    assert_eq!(report.status, RunStatus::Completed);
    assert_eq!(report.output, Some(json!({ "summary": "short" })));
    assert_eq!(server.served(), 1, "pushed once");
}

#[tokio::test]
async fn an_endpoint_that_answers_at_once_completes_the_task_and_a_refusal_fails_it() {
    let server = FakeServer::scripted(vec![Reply::json(200, json!({ "summary": "now" }))]);
    let (engine, workflow, store) = engine_for(pushed(&server, Effect::Read));
    let report = engine.start(&workflow, json!({ "doc": "d" })).await.unwrap();
    assert_eq!(report.output, Some(json!({ "summary": "now" })));
    let row = the_task(&store).await;
    assert_eq!((row.state, row.output), (TaskState::Completed, Some(json!({ "summary": "now" }))));

    let server = FakeServer::scripted(vec![Reply::json(422, json!({ "error": "doc too long" }))]);
    let (engine, workflow, store) = engine_for(pushed(&server, Effect::Read));
    let report = engine.start(&workflow, json!({ "doc": "d" })).await.unwrap();
    assert_eq!(report.status, RunStatus::Failed);
    let error = report.error.unwrap();
    assert_eq!(error.code, TOOL_FAILED);
    assert!(error.message.contains("422") && error.message.contains("doc too long"), "{}", error.message);
    let row = the_task(&store).await;
    assert_eq!(row.state, TaskState::Failed);
}

#[tokio::test]
async fn a_signed_tool_without_push_signs_its_plain_request() {
    let server = FakeServer::scripted(vec![Reply::json(200, json!({ "price": 3 }))]);
    let def = ToolDef::new("lookup", "Look up").effect(Effect::Read);
    let tool = HttpTool::new(def, "POST", &format!("{}/lookup", server.url)).unwrap().signed_with("s3cret");
    let (engine, workflow, store) = engine_for(tool);
    let report = engine.start(&workflow, json!({ "sku": "a" })).await.unwrap();
    assert_eq!(report.output, Some(json!({ "price": 3 })));
    let request = &server.requests()[0];
    assert_eq!(request.body, json!({ "sku": "a" }), "the arguments, not a task");
    let header = &request.headers["stepwright-signature"];
    let unix: i64 = header.strip_prefix("t=").and_then(|h| h.split(',').next()).unwrap().parse().unwrap();
    assert_eq!(header, &signature("s3cret", unix, &request.raw));
    assert!(
        store.tasks().unwrap().list_tasks(&TaskFilter { limit: 1, ..TaskFilter::default() }).await.unwrap().is_empty()
    );
}
