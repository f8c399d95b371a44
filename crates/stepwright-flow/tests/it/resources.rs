//! Workflow files that declare models, tools and agents, and the steps that use them
//! (`llm`, `agent`, `tool`, `memory.store`, `memory.recall`), run in an engine with a
//! scripted model.

use std::sync::Arc;

use serde_json::{Value, json};
use stepwright_core::{Caller, Effect, Engine, InMemoryStore, MemoryBank, RunStatus, StartOptions, Store};
use stepwright_flow::load_source;
use stepwright_llm::{
    Agents, ChatRequest, ChatResponse, FinishReason, MemoryService, Message, Models, Provider, ScriptedModel, Sessions,
    ToolCall, Tools, Usage,
};

const FILE: &str = r#"
workflow: support
input:
  type: object
  required: [ticket, session]
  properties: { ticket: { type: string }, session: { type: string } }
models:
  fast: { provider: openai, model: gpt-4o-mini, pricing: { input: 0.15, output: 0.6 }, timeout: 20s }
  careful: { provider: anthropic, model: claude-sonnet, base_url: "http://127.0.0.1:9/v1", api_key_env: MY_KEY, api_version: "2099-01-01", sampling: false, pricing: { input: 3, output: 15, cache_read: 0.3, cache_write: 3.75 } }
tools:
  shout:
    description: Upper-cases text
    input: { type: object, required: [text], properties: { text: { type: string } } }
    command: [sh, -c, "printf '%s' \"$1\" | tr a-z A-Z", sh, "{{ args.text }}"]
    effect: read
    timeout: 5s
agents:
  helper:
    model: fast
    instructions: You shout.
    tools: [shout]
    max_iterations: 4
steps:
  - id: classify
    llm: { model: fast, prompt: "Classify: {{ input.ticket }}", system: "Be terse.", temperature: 0, max_tokens: 50, stop: END }
    output:
      type: object
      required: [category]
      properties: { category: { enum: [billing, bug] } }
  - id: remember
    memory.store: { namespace: tickets, scope: user }
    with: { key: last, value: "{{ steps.classify.output.category }}" }
  - id: recall
    memory.recall: { namespace: tickets, scope: user, limit: 3 }
    with: "billing please"
  - id: loud
    tool: shout
    with: { text: "{{ input.ticket }}" }
  - id: assist
    agent: helper
    prompt: "Shout {{ steps.loud.output }}"
    session: "{{ input.session }}"
output:
  category: "{{ steps.classify.output.category }}"
  recalled: "{{ steps.recall.output[0].value }}"
  loud: "{{ steps.loud.output }}"
  assist: "{{ steps.assist.output }}"
"#;

fn answer(content: &str, calls: Vec<ToolCall>) -> ChatResponse {
    ChatResponse {
        id: None,
        content: content.into(),
        finish_reason: if calls.is_empty() { FinishReason::Stop } else { FinishReason::ToolCalls },
        tool_calls: calls,
        usage: Usage { input_tokens: 20, output_tokens: 5, ..Default::default() },
        model: "scripted".into(),
    }
}

/// Answers structured requests with a category, calls the first offered tool once, then
/// reports the tool's result.
fn script(request: &ChatRequest) -> ChatResponse {
    if request.output.is_some() {
        return answer(r#"{"category": "billing"}"#, Vec::new());
    }
    let result = request.tool_results().next().map(|(_, content, _)| content);
    match (result, request.tools.first()) {
        (Some(result), _) => answer(&format!("done: {result}"), Vec::new()),
        (None, Some(tool)) => {
            let call = ToolCall { id: "t1".into(), name: tool.name.clone(), arguments: json!({ "text": "quiet" }) };
            answer("", vec![call])
        }
        (None, None) => answer("nothing to do", Vec::new()),
    }
}

#[tokio::test]
async fn a_file_with_models_tools_and_agents_runs_every_resource_step() {
    let loaded = load_source(FILE, "support.yaml").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(loaded.models.len(), 2);
    let fast = &loaded.models["fast"];
    assert_eq!((fast.provider, fast.model.as_str()), (Provider::Openai, "gpt-4o-mini"));
    assert_eq!(fast.pricing.map(|p| (p.input, p.output)), Some((0.15, 0.6)));
    assert_eq!(fast.http.timeout, std::time::Duration::from_secs(20));
    let careful = &loaded.models["careful"];
    let priced = careful.pricing.expect("careful has prices");
    assert_eq!((priced.cache_read, priced.cache_write), (Some(0.3), Some(3.75)));
    // 1,210 prompt tokens, 1,000 of them read from the cache and 200 written to it.
    let usage = stepwright_llm::Usage {
        input_tokens: 1210,
        output_tokens: 5,
        cache_read_input_tokens: 1000,
        cache_creation_input_tokens: 200,
    };
    let expected = (10.0 * 3.0 + 1000.0 * 0.3 + 200.0 * 3.75 + 5.0 * 15.0) / 1e6;
    assert!((priced.cost(usage) - expected).abs() < 1e-12, "the file's cache prices are what a call costs");
    assert_eq!(fast.pricing.and_then(|p| p.cache_read), None, "a price not given is the input's");
    assert_eq!(careful.base_url.as_deref(), Some("http://127.0.0.1:9/v1"));
    assert_eq!(careful.api_key_env.as_deref(), Some("MY_KEY"));
    assert_eq!((careful.api_version.as_deref(), careful.sampling), (Some("2099-01-01"), Some(false)));
    assert_eq!((fast.token_limit_field, fast.sampling), (None, None), "defaults: chosen at bind time");
    assert!(fast.takes_sampling() && !careful.takes_sampling(), "openai takes sampling, anthropic not by default");
    let tools = loaded.workflow.services().get::<Tools>().expect("the file's tools travel with the workflow");
    let shout = tools.get("shout").unwrap().def();
    assert_eq!((shout.effect, shout.timeout), (Effect::Read, Some(std::time::Duration::from_secs(5))));
    let agents = loaded.workflow.services().get::<Agents>().unwrap();
    assert_eq!(agents.get("helper").unwrap().max_iterations, 4);

    let model = Arc::new(ScriptedModel::new(script).recording());
    let mut models = Models::new();
    models.bind_adapter("fast", "gpt-4o-mini", model.clone(), loaded.models["fast"].pricing);
    let store = Arc::new(InMemoryStore::new());
    let engine = Engine::builder()
        .store(store.clone() as Arc<dyn Store>)
        .service(Arc::new(models))
        .service(Arc::new(Sessions::new(store.clone())))
        .service(Arc::new(MemoryService::new(store.clone() as Arc<dyn MemoryBank>)))
        .build();
    let options = StartOptions { caller: Caller::user(Some("acme"), "ann"), ..StartOptions::default() };
    let input = json!({ "ticket": "refund me", "session": "s-1" });
    let report = engine.start_with(&loaded.workflow, input, options).await.unwrap();
    assert_eq!(report.status, RunStatus::Completed, "{:?}", report.error);
    assert_eq!(
        report.output,
        Some(json!({ "category": "billing", "recalled": "billing", "loud": "REFUND ME", "assist": "done: QUIET" }))
    );

    let requests = model.requests();
    let classify = &requests[0];
    assert_eq!(classify.messages[0], Message::system("Be terse."));
    assert_eq!(classify.messages[1], Message::user("Classify: refund me"));
    assert_eq!(classify.params.temperature, Some(0.0));
    assert_eq!(classify.params.max_tokens, Some(50));
    assert_eq!(classify.params.stop, ["END"]);
    assert_eq!(classify.output.as_ref().unwrap().schema["required"], json!(["category"]), "the step's output schema");
    let agent = &requests[1];
    assert_eq!(agent.messages[0], Message::system("You shout."));
    assert_eq!(agent.messages[1], Message::user("Shout REFUND ME"));
    assert_eq!(agent.tools.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(), ["shout"]);
    // The agent's session was saved under the caller.
    let owner = stepwright_core::SessionOwner::from(&Caller::user(Some("acme"), "ann"));
    let history = stepwright_core::SessionStore::session_history(&*store, "s-1", &owner, 10).await.unwrap();
    assert_eq!(history.len(), 4, "prompt, tool call, tool result, answer");
}

#[tokio::test]
async fn a_tool_step_carries_the_tools_effect_and_approval_gate() {
    let file = r#"
workflow: pay
tools:
  charge:
    command: [echo, "charged {{ args.amount }}"]
    effect: write
    needs_approval: true
steps:
  - id: pay
    tool: charge
    with: { amount: "{{ input }}" }
"#;
    let loaded = load_source(file, "pay.yaml").unwrap_or_else(|e| panic!("{e}"));
    let engine = Engine::builder().store(Arc::new(InMemoryStore::new()) as Arc<dyn Store>).build();
    let report = engine.start(&loaded.workflow, json!(12)).await.unwrap();
    assert_eq!(report.status, RunStatus::Suspended, "the tool's approval gate holds the step");
    let pending = &report.pending[0];
    assert!(pending.message.contains("charge"), "{}", pending.message);
    engine.resolve(report.run_id, &pending.id, stepwright_core::Decision::Approve, &Caller::default()).await.unwrap();
    let report = engine.resume(&loaded.workflow, report.run_id).await.unwrap();
    assert_eq!(report.output, Some(Value::String("charged 12".into())));
}

#[test]
fn mcp_servers_are_declared_with_every_option_and_their_tools_checked() {
    use std::time::Duration;
    use stepwright_mcp::{ToolPolicy, Transport};
    let file = r#"
workflow: with-mcp
mcp_servers:
  local:
    command: node
    args: [server.js, --quiet]
    env: { LOG: "0" }
    cwd: /srv/mcp
    tools: [echo, get-sum]
    effect: write
    safe_to_retry: true
    timeout: 5s
    connect_timeout: 20s
    call_timeout: 3s
    max_message_bytes: 67108864
    tool_policies:
      get-sum: { effect: pure, needs_approval: true }
  remote:
    url: "http://127.0.0.1:3001/mcp"
    headers: { authorization: "Bearer t" }
agents:
  helper:
    model: fast
    instructions: Use the tools.
    tools: [local.echo, remote.anything]
models:
  fast: { provider: openai, model: gpt-4o-mini }
steps:
  - id: sum
    tool: local.get-sum
    with: { a: 1, b: 2 }
  - id: echo
    tool: local.echo
    with: { message: hi }
  - id: ask
    agent: helper
    prompt: hi
"#;
    let loaded = load_source(file, "mcp.yaml").unwrap_or_else(|e| panic!("{e}"));
    let [local, remote] = loaded.mcp_servers.as_slice() else { panic!("{:?}", loaded.mcp_servers) };
    assert_eq!(local.name, "local");
    assert_eq!(
        local.transport,
        Transport::Stdio {
            command: "node".into(),
            args: vec!["server.js".into(), "--quiet".into()],
            env: vec![("LOG".into(), "0".into())],
            cwd: Some("/srv/mcp".into()),
        }
    );
    assert_eq!(local.only, ["echo", "get-sum"]);
    let server_policy = ToolPolicy {
        effect: Effect::Write,
        safe_to_retry: true,
        needs_approval: false,
        timeout: Some(Duration::from_secs(5)),
    };
    assert_eq!(local.policy, server_policy);
    assert_eq!(local.connect_timeout, Duration::from_secs(20));
    assert_eq!(local.call_timeout, Some(Duration::from_secs(3)));
    assert_eq!(local.max_message_bytes, 64 << 20);
    assert_eq!(remote.max_message_bytes, stepwright_mcp::DEFAULT_MAX_MESSAGE_BYTES);
    // A tool's own policy overrides what it names and keeps the server's for the rest.
    assert_eq!(
        local.tool_policies["get-sum"],
        ToolPolicy { effect: Effect::Pure, needs_approval: true, ..server_policy }
    );
    assert_eq!(
        remote.transport,
        Transport::Http {
            url: "http://127.0.0.1:3001/mcp".into(),
            headers: vec![("authorization".into(), "Bearer t".into())]
        }
    );
    assert_eq!(remote.policy, ToolPolicy::default(), "MCP tools are `external` and not retried unless declared");
    // Every use is recorded with its position, to be checked once the servers are connected.
    let uses: Vec<(&str, u64, u64)> =
        loaded.mcp_tool_uses.iter().map(|u| (u.tool.as_str(), u.line, u.column)).collect();
    assert_eq!(
        uses,
        [("local.echo", 25, 13), ("remote.anything", 25, 25), ("local.get-sum", 30, 11), ("local.echo", 33, 11)]
    );
    // A `tool` step on an MCP tool takes the declared policy.
    let described = loaded.workflow.describe();
    let steps = described["steps"].as_array().unwrap();
    assert_eq!(steps[0]["effect"], json!("pure"), "{}", steps[0]);
    assert_eq!(steps[0]["requires_approval"]["message"], json!("Run tool local.get-sum?"), "{}", steps[0]);
    assert_eq!(steps[1]["effect"], json!("write"), "{}", steps[1]);
    assert_eq!(steps[1]["safe_to_retry"], json!(true), "{}", steps[1]);
    assert!(steps[1].get("requires_approval").is_none(), "{}", steps[1]);
}
