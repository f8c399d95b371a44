//! The agent crash-test worker.
//!
//! `agent-worker DB RUN LOG SLOW_MS`: starts run RUN of a one-agent workflow on SQLite, or
//! resumes it, and prints the final report as JSON. The scripted model asks for two tools at
//! once (`fast`, and `slow`, which takes SLOW_MS), then answers with their results. Every
//! model call and every tool execution appends `pid what detail` to LOG, so the harness can
//! tell what each process did.
#![allow(clippy::print_stdout)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use stepwright::SqliteStore;
use stepwright::llm::{
    AgentSpec, AgentStep, ChatResponse, FinishReason, Models, ScriptedModel, ToolCall, ToolDef, Tools, Usage, fn_tool,
};
use stepwright::{Effect, Engine, Node, StartOptions, Store, StoreError, Workflow};

fn append(log: &Path, line: &str) {
    // One small O_APPEND write: whole or nothing, even if the process is killed.
    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(log).expect("the log opens");
    file.write_all(format!("{} {line}\n", std::process::id()).as_bytes()).expect("the log is written");
}

/// Asks for both tools at once, then answers with their results; logs every call.
fn scripted(log: PathBuf) -> ScriptedModel {
    ScriptedModel::new(move |request| {
        let results: Vec<&str> = request.tool_results().map(|(_, content, _)| content).collect();
        append(&log, &format!("model {}", results.len()));
        let (content, tool_calls) = if results.is_empty() {
            let call = |id: &str, name: &str| ToolCall { id: id.into(), name: name.into(), arguments: json!({}) };
            (String::new(), vec![call("a", "fast"), call("b", "slow")])
        } else {
            (results.join(" | "), Vec::new())
        };
        ChatResponse {
            id: None,
            content,
            tool_calls,
            finish_reason: FinishReason::Stop,
            usage: Usage { input_tokens: 10, output_tokens: 5, ..Default::default() },
            model: "scripted-1".into(),
        }
    })
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct NoArgs {}

fn tools(log: &Path, slow_ms: u64) -> Tools {
    let mut tools = Tools::new();
    for (name, wait) in [("fast", 0), ("slow", slow_ms)] {
        let log = log.to_path_buf();
        let tool = fn_tool(ToolDef::new(name, "A tool").effect(Effect::Read), move |_cx, _args: NoArgs| {
            let log = log.clone();
            async move {
                append(&log, &format!("tool {name}"));
                tokio::time::sleep(Duration::from_millis(wait)).await;
                Ok(Value::String(format!("{name} done")))
            }
        });
        tools.register(tool).expect("distinct names");
    }
    tools
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [db, run, log, slow_ms] = &args[..] else { return Err("usage: agent-worker DB RUN LOG SLOW_MS".into()) };
    let log = PathBuf::from(log);
    let store = Arc::new(SqliteStore::open(db)?);
    let mut models = Models::new();
    models.bind_adapter("fast", "scripted-1", Arc::new(scripted(log.clone())), None);
    let engine = Engine::builder()
        .store(store.clone() as Arc<dyn Store>)
        .service(Arc::new(models))
        .service(Arc::new(tools(&log, slow_ms.parse()?)))
        .worker_id("agent-worker")
        .build();
    let mut spec = AgentSpec::new("worker", "fast");
    spec.tools = vec!["fast".into(), "slow".into()];
    let workflow = Workflow::builder("agent-crash").step(Node::dyn_step("agent", AgentStep::new(spec))).build()?;
    let run = run.parse()?;
    let report = match store.load(run).await {
        Ok(loaded) if loaded.record.status.is_terminal() => engine.report(run).await?,
        Ok(_) => engine.resume(&workflow, run).await?,
        Err(StoreError::RunNotFound(_)) => {
            engine
                .start_with(&workflow, json!("go"), StartOptions { run_id: Some(run), ..StartOptions::default() })
                .await?
        }
        Err(other) => return Err(other.into()),
    };
    println!("{}", serde_json::to_string(&report)?);
    Ok(())
}
