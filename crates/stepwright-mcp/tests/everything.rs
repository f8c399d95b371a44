//! Interop with the official reference server `@modelcontextprotocol/server-everything`,
//! over stdio and streamable HTTP: discovery, calls of `echo` and `get-sum` (through the
//! `tool` step and through an agent), a killed server started again, and an HTTP session
//! re-initialized after the server forgot it.
//!
//! `.ci/run` installs the server from the npm registry and sets
//! `STEPWRIGHT_TEST_MCP_EVERYTHING` to its `dist/index.js`; without the variable these tests
//! say they were skipped.

mod support;

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use stepwright_core::{Effect, Engine, ErrorCode, InMemoryStore, Node, RunStatus, Store, Workflow};
use stepwright_llm::{
    AgentSpec, AgentStep, ChatRequest, ChatResponse, FinishReason, Models, ScriptedModel, ToolCall, ToolStep, Tools,
    Usage,
};
use stepwright_mcp::{McpServer, ServerConfig, ToolPolicy};

fn server_script() -> Option<String> {
    support::server_script("STEPWRIGHT_TEST_MCP_EVERYTHING")
}

fn read_only() -> ToolPolicy {
    ToolPolicy { effect: Effect::Read, ..ToolPolicy::default() }
}

fn stdio_config(script: &str) -> ServerConfig {
    let mut config = ServerConfig::stdio("everything", "node", &[script, "stdio"]);
    config.policy = read_only();
    config.only = vec!["echo".into(), "get-sum".into()];
    config
}

async fn call(tools: &Arc<Tools>, tool: &str, args: Value) -> Value {
    let node = ToolStep::node("call", tools, tool).unwrap();
    let workflow = Workflow::builder("mcp").step(node).build().unwrap();
    let engine =
        Engine::builder().store(Arc::new(InMemoryStore::new()) as Arc<dyn Store>).service(tools.clone()).build();
    let report = engine.start(&workflow, args).await.unwrap();
    assert_eq!(report.status, RunStatus::Completed, "{:?}", report.error);
    report.output.unwrap()
}

#[tokio::test]
async fn stdio_tools_are_discovered_called_and_survive_a_killed_server() {
    let Some(script) = server_script() else { return };
    let mut tools = Tools::new();
    let server = McpServer::register(stdio_config(&script), &mut tools).await.unwrap();
    assert_eq!(tools.names(), ["everything.echo", "everything.get-sum"]);
    let spec = tools.spec("everything.get-sum").unwrap();
    assert_eq!(spec.name, "everything__get-sum");
    assert_eq!(spec.parameters["required"], json!(["a", "b"]), "the server's input schema is offered as is");
    let tools = Arc::new(tools);

    assert_eq!(call(&tools, "everything.echo", json!({ "message": "hello" })).await, json!("Echo: hello"));
    assert_eq!(
        call(&tools, "everything.get-sum", json!({ "a": 2, "b": 40 })).await,
        json!("The sum of 2 and 40 is 42.")
    );

    // The server dies; the next call starts it again.
    let pid = server.pid().unwrap();
    assert!(std::process::Command::new("kill").args(["-9", &pid.to_string()]).status().unwrap().success());
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(call(&tools, "everything.echo", json!({ "message": "again" })).await, json!("Echo: again"));
    assert_eq!(server.starts(), 2);
    assert_ne!(server.pid(), Some(pid));
}

/// Asks for both reference tools at once, then answers with their results.
fn planner(request: &ChatRequest) -> ChatResponse {
    let results: Vec<&str> = request.tool_results().map(|(_, content, _)| content).collect();
    let (content, tool_calls) = if results.is_empty() {
        let call = |id: &str, name: &str, arguments: Value| ToolCall { id: id.into(), name: name.into(), arguments };
        (
            String::new(),
            vec![
                call("1", "everything__echo", json!({ "message": "ping" })),
                call("2", "everything__get-sum", json!({ "a": 1, "b": 2 })),
            ],
        )
    } else {
        (results.join(" | "), Vec::new())
    };
    ChatResponse {
        id: None,
        content,
        tool_calls,
        finish_reason: FinishReason::Stop,
        usage: Usage::default(),
        model: "planner".into(),
    }
}

#[tokio::test]
async fn an_agent_calls_mcp_tools_in_parallel() {
    let Some(script) = server_script() else { return };
    let mut tools = Tools::new();
    McpServer::register(stdio_config(&script), &mut tools).await.unwrap();
    let mut models = Models::new();
    let planner = Arc::new(ScriptedModel::new(planner).recording());
    models.bind_adapter("fast", "planner", planner.clone(), None);
    let mut spec = AgentSpec::new("mcp-user", "fast");
    spec.tools = vec!["everything.echo".into(), "everything.get-sum".into()];
    let workflow = Workflow::builder("agent").step(Node::dyn_step("agent", AgentStep::new(spec))).build().unwrap();
    let engine = Engine::builder()
        .store(Arc::new(InMemoryStore::new()) as Arc<dyn Store>)
        .service(Arc::new(models))
        .service(Arc::new(tools))
        .build();
    let report = engine.start(&workflow, json!("use both")).await.unwrap();
    assert_eq!(report.status, RunStatus::Completed, "{:?}", report.error);
    assert_eq!(report.output, Some(json!("Echo: ping | The sum of 1 and 2 is 3.")));
    let offered: Vec<String> = planner.requests()[0].tools.iter().map(|t| t.name.clone()).collect();
    assert_eq!(offered, ["everything__echo", "everything__get-sum"]);
}

/// Starts the reference server on HTTP and waits until it listens.
async fn http_server(script: &str, port: u16) -> tokio::process::Child {
    let mut command = tokio::process::Command::new("node");
    command.args([script, "streamableHttp"]).env("PORT", port.to_string());
    support::listening(command, port).await
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

#[tokio::test]
async fn streamable_http_tools_work_and_a_forgotten_session_is_initialized_again() {
    let Some(script) = server_script() else { return };
    let port = free_port();
    let mut first = http_server(&script, port).await;
    let mut config = ServerConfig::http("remote", &format!("http://127.0.0.1:{port}/mcp"));
    config.policy =
        ToolPolicy { effect: Effect::Read, timeout: Some(Duration::from_secs(20)), ..ToolPolicy::default() };
    config.only = vec!["echo".into(), "get-sum".into()];
    // The reference server answers a forgotten session with 400 and no request id, so the
    // call would wait forever; the call timeout is what notices.
    config.call_timeout = Some(Duration::from_secs(2));
    let mut tools = Tools::new();
    let server = McpServer::register(config, &mut tools).await.unwrap();
    let tools = Arc::new(tools);
    assert_eq!(call(&tools, "remote.get-sum", json!({ "a": 5, "b": 6 })).await, json!("The sum of 5 and 6 is 11."));

    // The server restarts and forgets every session.
    first.kill().await.unwrap();
    let _second = http_server(&script, port).await;
    assert_eq!(call(&tools, "remote.echo", json!({ "message": "still there?" })).await, json!("Echo: still there?"));
    assert_eq!(server.starts(), 2, "one new session");
}

#[tokio::test]
async fn a_server_that_cannot_start_or_lacks_a_tool_is_a_clear_error() {
    let Some(script) = server_script() else { return };
    let error = McpServer::connect(ServerConfig::stdio("ghost", "/nonexistent/mcp-server", &[])).await.unwrap_err();
    assert!(
        error.to_string().starts_with("starting MCP server \"ghost\": running \"/nonexistent/mcp-server\""),
        "{error}"
    );

    let mut config = stdio_config(&script);
    config.only = vec!["echo".into(), "teleport".into()];
    let error = McpServer::register(config, &mut Tools::new()).await.unwrap_err();
    let text = error.to_string();
    assert!(text.starts_with("MCP server \"everything\" has no tool \"teleport\" (it has: "), "{text}");
    assert!(text.contains("get-sum"), "{text}");
}

/// `call_timeout` bounds every attempt: a call that gets no answer within it is repeated
/// once on a new connection (when repeating is safe) under the same limit, then fails —
/// never waiting out the slow call the second time. Without a `timeout`, a tool call is
/// bounded by the default limit.
#[tokio::test]
async fn the_call_timeout_bounds_the_repeat_too_and_every_call_has_a_limit() {
    let Some(script) = server_script() else { return };
    let mut config = stdio_config(&script);
    config.only = vec!["echo".into(), "trigger-long-running-operation".into()];
    config.policy = ToolPolicy { effect: Effect::Read, safe_to_retry: true, ..ToolPolicy::default() };
    config.call_timeout = Some(Duration::from_secs(1));
    let mut tools = Tools::new();
    let server = McpServer::register(config, &mut tools).await.unwrap();
    let slow = "everything.trigger-long-running-operation";
    assert_eq!(tools.get(slow).unwrap().def().timeout, Some(stepwright_mcp::DEFAULT_CALL_LIMIT));
    let tools = Arc::new(tools);
    let node = ToolStep::node("call", &tools, slow).unwrap();
    let workflow = Workflow::builder("slow").step(node).build().unwrap();
    let engine =
        Engine::builder().store(Arc::new(InMemoryStore::new()) as Arc<dyn Store>).service(tools.clone()).build();
    let report = engine.start(&workflow, json!({ "duration": 4, "steps": 1 })).await.unwrap();
    assert_eq!(report.status, RunStatus::Failed);
    let error = report.error.unwrap();
    assert!(error.message.contains("nor when repeated on a new connection"), "{}", error.message);
    assert_eq!(error.code, ErrorCode::TIMEOUT, "a call cut off by call_timeout timed out: {}", error.message);
    assert_eq!(server.starts(), 2, "the repeat went over a new connection");
    // The server is usable afterwards.
    assert_eq!(call(&tools, "everything.echo", json!({ "message": "hi" })).await, json!("Echo: hi"));
}

/// A tool that is not safe to repeat and gets no answer within `call_timeout` timed out — it is
/// not repeated, and the message says so, not that a connection broke.
#[tokio::test]
async fn an_unsafe_call_past_its_call_timeout_is_a_timeout_not_repeated() {
    let Some(script) = server_script() else { return };
    let mut config = stdio_config(&script);
    config.only = vec!["trigger-long-running-operation".into()];
    config.policy = ToolPolicy { effect: Effect::Write, safe_to_retry: false, ..ToolPolicy::default() };
    config.call_timeout = Some(Duration::from_secs(1));
    let mut tools = Tools::new();
    let server = McpServer::register(config, &mut tools).await.unwrap();
    let tools = Arc::new(tools);
    let node = ToolStep::node("call", &tools, "everything.trigger-long-running-operation").unwrap();
    let workflow = Workflow::builder("slow").step(node).build().unwrap();
    let engine =
        Engine::builder().store(Arc::new(InMemoryStore::new()) as Arc<dyn Store>).service(tools.clone()).build();
    let report = engine.start(&workflow, json!({ "duration": 4, "steps": 1 })).await.unwrap();
    let error = report.error.expect("failed");
    assert_eq!(error.code, ErrorCode::TIMEOUT, "{}", error.message);
    assert_eq!(
        error.message,
        "MCP tool everything.trigger-long-running-operation got no answer within 1s (its call_timeout); the call is not safe to repeat, so it was not, and it may or may not have happened"
    );
    assert!(!error.message.contains("broke"), "{}", error.message);
    assert_eq!(server.starts(), 2, "a new connection for the next call, but no repeat on it");
}

/// A stdio server that fails says why on stderr: the start error carries what it said.
#[tokio::test]
async fn a_stdio_server_that_dies_at_start_is_reported_with_its_stderr() {
    let config = ServerConfig::stdio(
        "broken",
        "sh",
        &["-c", "echo 'starting up' >&2; echo 'fatal: DATABASE_URL is not set' >&2; exit 3"],
    );
    let error = McpServer::connect(config).await.unwrap_err().to_string();
    assert!(error.starts_with("starting MCP server \"broken\": the MCP handshake failed"), "{error}");
    assert!(error.contains("its stderr ended with: starting up | fatal: DATABASE_URL is not set"), "{error}");
}
