//! Interop with a FastMCP server (`tools/fastmcp/server.py`, the `fastmcp` package from PyPI),
//! over stdio and streamable HTTP: a call (its wrapped plain result unwrapped), an error
//! result, a slow call cut off by its timeout on every attempt and cancelled at the server,
//! a result past `max_message_bytes` refused at once with a clear error and not repeated, and
//! a server that dies mid-call.
//!
//! `.ci/run` installs `fastmcp` (pinned) into a virtual environment and sets
//! `STEPWRIGHT_TEST_FASTMCP_PYTHON` to its interpreter; without the variable these tests say
//! they were skipped.

mod support;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use stepwright_core::{Effect, Engine, InMemoryStore, RunReport, RunStatus, Store, Workflow};
use stepwright_llm::{ToolStep, Tools};
use stepwright_mcp::{McpServer, ServerConfig, ToolPolicy};

fn python() -> Option<String> {
    support::server_script("STEPWRIGHT_TEST_FASTMCP_PYTHON")
}

fn script() -> String {
    format!("{}/../../tools/fastmcp/server.py", env!("CARGO_MANIFEST_DIR"))
}

async fn run(tools: &Arc<Tools>, tool: &str, args: Value) -> RunReport {
    let node = ToolStep::node("call", tools, tool).unwrap();
    let workflow = Workflow::builder("fastmcp").step(node).build().unwrap();
    let engine =
        Engine::builder().store(Arc::new(InMemoryStore::new()) as Arc<dyn Store>).service(tools.clone()).build();
    engine.start(&workflow, args).await.unwrap()
}

/// Starts the server on HTTP and waits until it listens.
async fn http_server(python: &str, port: u16) -> tokio::process::Child {
    let mut command = tokio::process::Command::new(python);
    command.args([&script(), "http", &port.to_string()]);
    support::listening(command, port).await
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Read-only tools, safe to repeat, but the one that crashes its server: that one is not.
fn configure(mut config: ServerConfig) -> ServerConfig {
    config.policy = ToolPolicy { effect: Effect::Read, safe_to_retry: true, ..ToolPolicy::default() };
    config = config.tool_policy("crash", ToolPolicy { effect: Effect::Write, ..ToolPolicy::default() });
    config.connect_timeout = Duration::from_secs(30);
    config.call_timeout = Some(Duration::from_secs(2));
    config.max_message_bytes = 4 * 1024 * 1024;
    config
}

async fn wait_for(path: &Path) -> bool {
    for _ in 0..100 {
        if path.exists() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// The scenarios every transport shares; `kind` names it in failures.
async fn shared_scenarios(tools: &Arc<Tools>, server: &McpServer, kind: &str) {
    let dir = tempfile::tempdir().unwrap();

    // A plain value FastMCP wrapped as `{"result": …}` (its `x-fastmcp-wrap-result`) is the
    // value again.
    let echoed = run(tools, "interop.echo", json!({ "text": "hello" })).await;
    assert_eq!((echoed.status, echoed.output), (RunStatus::Completed, Some(json!("hello"))), "{kind}");

    // An error result is the tool's failure, with its message.
    let failed = run(tools, "interop.fail", json!({ "message": "the index is stale" })).await;
    let error = failed.error.expect("failed");
    assert_eq!(error.code.as_str(), "tool_failed", "{kind}");
    assert!(error.message.contains("the index is stale"), "{kind}: {}", error.message);

    // A slow call is cut off at `call_timeout` on each of its two attempts, and the server
    // stops working on it (the tool sees its cancellation).
    let mark = dir.path().join("cancelled");
    let started = Instant::now();
    let slow = run(tools, "interop.slow", json!({ "seconds": 60, "mark": mark.to_str().unwrap() })).await;
    let took = started.elapsed();
    assert_eq!(slow.status, RunStatus::Failed, "{kind}");
    assert!(slow.error.unwrap().message.contains("nor when repeated on a new connection"), "{kind}");
    assert!(took < Duration::from_secs(15), "{kind}: two 2 s attempts took {took:?}");
    assert!(wait_for(&mark).await, "{kind}: the server was not told to stop");

    // Under the limit (4 MiB here): a 1 MiB result comes as text and structured content.
    let calls = dir.path().join("huge-calls");
    let args = |mib: f64| json!({ "mebibytes": mib, "mark": calls.to_str().unwrap() });
    let fits = run(tools, "interop.huge", args(1.0)).await;
    assert_eq!(fits.output.as_ref().and_then(Value::as_str).map(str::len), Some(1 << 20), "{kind}");
    // Past it: refused at once, by size, and not repeated (the tool ran once).
    let starts = server.starts();
    let started = Instant::now();
    let huge = run(tools, "interop.huge", args(3.0)).await;
    let error = huge.error.expect("refused");
    assert_eq!(error.code.as_str(), "tool_result_too_large", "{kind}: {}", error.message);
    assert!(error.message.contains("more than 4194304 bytes (4 MiB)"), "{kind}: {}", error.message);
    assert!(!error.retryable, "{kind}");
    assert!(started.elapsed() < Duration::from_secs(2), "{kind}: {:?}, not a timeout", started.elapsed());
    let ran = std::fs::read_to_string(&calls).unwrap().lines().count();
    assert_eq!(ran, 2, "{kind}: the 1 MiB call and the 3 MiB call, once each");
    // The next call works on a new connection.
    let after = run(tools, "interop.echo", json!({ "text": "still here" })).await;
    assert_eq!(after.output, Some(json!("still here")), "{kind}");
    assert_eq!(server.starts(), starts + 1, "{kind}");
}

#[tokio::test]
async fn fastmcp_over_stdio() {
    let Some(python) = python() else { return };
    let config = configure(ServerConfig::stdio("interop", &python, &[&script(), "stdio"]));
    let mut tools = Tools::new();
    let server = McpServer::register(config, &mut tools).await.unwrap();
    let tools = Arc::new(tools);
    shared_scenarios(&tools, &server, "stdio").await;

    // The server dies mid-call: a call that is not safe to repeat is not, and the error
    // says what the server said on its way out; the next call starts it again.
    let crashed = run(&tools, "interop.crash", json!({})).await;
    let error = crashed.error.expect("failed");
    assert!(error.message.contains("not safe to repeat"), "{}", error.message);
    assert!(error.message.contains("crashing on purpose"), "{}", error.message);
    let again = run(&tools, "interop.echo", json!({ "text": "again" })).await;
    assert_eq!(again.output, Some(json!("again")));
}

#[tokio::test]
async fn fastmcp_over_streamable_http() {
    let Some(python) = python() else { return };
    let port = free_port();
    let process = http_server(&python, port).await;
    let config = configure(ServerConfig::http("interop", &format!("http://127.0.0.1:{port}/mcp")));
    let mut tools = Tools::new();
    let server = McpServer::register(config, &mut tools).await.unwrap();
    let tools = Arc::new(tools);
    shared_scenarios(&tools, &server, "http").await;

    // The server dies mid-call: the call fails (not repeated: not safe); once the server is
    // back, a new session is opened and calls work.
    let crashed = run(&tools, "interop.crash", json!({})).await;
    assert_eq!(crashed.status, RunStatus::Failed);
    drop(process);
    let _back = http_server(&python, port).await;
    let again = run(&tools, "interop.echo", json!({ "text": "again" })).await;
    assert_eq!(again.output, Some(json!("again")), "{:?}", again.error);
}
