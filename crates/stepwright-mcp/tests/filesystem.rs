//! Interop with the official filesystem server, `@modelcontextprotocol/server-filesystem`
//! (pinned by `.ci/run`, which sets `STEPWRIGHT_TEST_MCP_FILESYSTEM` to its `dist/index.js`;
//! without it these tests say they were skipped): a write fenced as a `write`, a read, a
//! listing, and a path outside the allowed directory refused by the server as a tool error.

mod support;

use std::sync::Arc;

use serde_json::{Value, json};
use stepwright_core::{Effect, Engine, InMemoryStore, RunReport, RunStatus, Store, Workflow};
use stepwright_llm::{ToolStep, Tools};
use stepwright_mcp::{McpServer, ServerConfig, ToolPolicy};

fn server_script() -> Option<String> {
    support::server_script("STEPWRIGHT_TEST_MCP_FILESYSTEM")
}

async fn call(tools: &Arc<Tools>, tool: &str, args: Value) -> RunReport {
    let node = ToolStep::node("call", tools, tool).unwrap();
    let workflow = Workflow::builder("fs").step(node).build().unwrap();
    let engine =
        Engine::builder().store(Arc::new(InMemoryStore::new()) as Arc<dyn Store>).service(tools.clone()).build();
    engine.start(&workflow, args).await.unwrap()
}

/// The text a result carries, however the server shaped it (text, or structured content).
fn text_of(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

#[tokio::test]
async fn the_official_filesystem_server_writes_reads_lists_and_refuses_outside_its_directory() {
    let Some(script) = server_script() else { return };
    let dir = tempfile::tempdir().unwrap();
    let allowed = std::fs::canonicalize(dir.path()).unwrap();
    let allowed_text = allowed.display().to_string();
    let mut config = ServerConfig::stdio("filesystem", "node", &[&script, &allowed_text]);
    config.policy = ToolPolicy { effect: Effect::Read, ..ToolPolicy::default() };
    config.tool_policies.insert("write_file".into(), ToolPolicy { effect: Effect::Write, ..ToolPolicy::default() });
    config.only = vec!["write_file".into(), "read_text_file".into(), "list_directory".into()];
    let mut tools = Tools::new();
    let _server = McpServer::register(config, &mut tools).await.unwrap();
    assert_eq!(tools.get("filesystem.write_file").unwrap().def().effect, Effect::Write);
    let tools = Arc::new(tools);
    let note = allowed.join("note.txt").display().to_string();

    let written = call(&tools, "filesystem.write_file", json!({ "path": note, "content": "durable\nworkflows" })).await;
    assert_eq!(written.status, RunStatus::Completed, "{:?}", written.error);
    assert_eq!(std::fs::read_to_string(allowed.join("note.txt")).unwrap(), "durable\nworkflows");

    let read = call(&tools, "filesystem.read_text_file", json!({ "path": note })).await;
    assert_eq!(read.status, RunStatus::Completed, "{:?}", read.error);
    // The server answers with structured content, which is the step's output as it is.
    assert_eq!(read.output, Some(json!({ "content": "durable\nworkflows" })));

    let listed = call(&tools, "filesystem.list_directory", json!({ "path": allowed_text })).await;
    let listing = listed.output.unwrap();
    assert!(text_of(&listing["content"]).contains("[FILE] note.txt"), "{listing}");

    // Outside the allowed directory: the server says no, and the step fails with its words.
    let outside = call(&tools, "filesystem.read_text_file", json!({ "path": "/etc/hostname" })).await;
    assert_eq!(outside.status, RunStatus::Failed);
    let error = outside.error.unwrap();
    assert_eq!(error.code.as_str(), "tool_failed");
    assert!(error.message.contains("filesystem.read_text_file failed"), "{}", error.message);
    assert!(error.message.to_lowercase().contains("access denied"), "{}", error.message);
    stepwright_mcp::close_all().await;
}
