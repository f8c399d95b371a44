//! The adapters against the LiteLLM proxy (`tools/litellm/config.yaml`, from PyPI, pinned): an
//! independent OpenAI-compatible (`/v1/chat/completions`) and Anthropic-compatible
//! (`/v1/messages`) server whose answers are scripted per model name — plain, streamed,
//! structured (both APIs' ways), tool calls, cut off (`length` / `max_tokens`), refused
//! (`content_filter` / `refusal`), rate limited (429) and overloaded (503, and Anthropic's 529).
//!
//! `.ci/run` installs the proxy into a virtual environment and sets
//! `STEPWRIGHT_TEST_LITELLM` to its `litellm` command; without the variable this test says it
//! was skipped.

use std::sync::Mutex;
use std::time::Duration;

use serde_json::{Value, json};
use stepwright_llm::{
    Anthropic, ChatModel, ChatRequest, ChatResponse, FinishReason, HttpOptions, Message, ModelErrorKind, OpenAi,
    OutputFormat, RateLimits, ToolSpec,
};

const KEY: &str = "sk-litellm-test";

/// The proxy, started in `tools/litellm` (its scripted handler is imported from there).
struct Proxy {
    child: std::process::Child,
    base: String,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn proxy(command: &str) -> Proxy {
    stepwright_llm::install_crypto_provider();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let dir = format!("{}/../../tools/litellm", env!("CARGO_MANIFEST_DIR"));
    let child = std::process::Command::new(command)
        .args(["--config", "config.yaml", "--host", "127.0.0.1", "--port", &port.to_string()])
        .current_dir(dir)
        // The model price list ships with the package: nothing is fetched.
        .env("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start the LiteLLM proxy");
    let proxy = Proxy { child, base: format!("http://127.0.0.1:{port}") };
    let http = reqwest::Client::new();
    for _ in 0..240 {
        let live = http.get(format!("{}/health/liveliness", proxy.base)).send().await;
        if live.is_ok_and(|r| r.status().is_success()) {
            return proxy;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    panic!("the LiteLLM proxy did not come up on port {port}");
}

/// No retries: a scripted 429 is answered once, and the test sees it.
fn once() -> HttpOptions {
    HttpOptions {
        timeout: Duration::from_secs(30),
        max_retries: 0,
        initial_backoff: Duration::from_millis(5),
        max_backoff: Duration::from_millis(5),
        requests_per_minute: None,
        tokens_per_minute: None,
    }
}

fn ask(model: &str) -> ChatRequest {
    let mut request = ChatRequest::new(model, vec![Message::user("Where is order A-42?")]);
    request.params.max_tokens = Some(200);
    request
}

fn with_tool(model: &str) -> ChatRequest {
    let mut request = ask(model);
    request.tools = vec![ToolSpec {
        name: "lookup_order".into(),
        description: "Look up an order".into(),
        parameters: json!({ "type": "object", "required": ["order_id"], "properties": { "order_id": { "type": "string" } } }),
    }];
    request
}

/// The answer whole, and streamed (the streamed text is what reached the sink).
async fn both(model: &dyn ChatModel, request: &ChatRequest) -> (ChatResponse, ChatResponse, String) {
    let whole = model.chat(request).await.unwrap_or_else(|e| panic!("{} {}: {e}", model.provider(), request.model));
    let seen = Mutex::new(String::new());
    let sink = |text: &str| seen.lock().unwrap().push_str(text);
    let streamed = model
        .chat_stream(request, &sink)
        .await
        .unwrap_or_else(|e| panic!("{} {} streamed: {e}", model.provider(), request.model));
    let seen = seen.into_inner().unwrap();
    (whole, streamed, seen)
}

async fn scenarios(model: &dyn ChatModel) {
    let provider = model.provider().to_owned();
    let (whole, streamed, seen) = both(model, &ask("plain")).await;
    for answer in [&whole, &streamed] {
        assert_eq!((answer.content.as_str(), &answer.finish_reason), ("Hello from LiteLLM.", &FinishReason::Stop));
        assert!(answer.usage.output_tokens > 0, "{provider}: usage is read");
    }
    assert_eq!(seen, "Hello from LiteLLM.", "{provider}: the streamed text reached the sink");

    let (whole, streamed, _) = both(model, &with_tool("calls")).await;
    for answer in [&whole, &streamed] {
        assert_eq!(answer.finish_reason, FinishReason::ToolCalls, "{provider}");
        assert_eq!(answer.tool_calls.len(), 1, "{provider}");
        assert_eq!(answer.tool_calls[0].name, "lookup_order", "{provider}");
        assert_eq!(answer.tool_calls[0].arguments, json!({ "order_id": "A-42" }), "{provider}");
    }

    let (whole, streamed, _) = both(model, &ask("truncated")).await;
    for answer in [&whole, &streamed] {
        assert_eq!(answer.finish_reason, FinishReason::Length, "{provider}: a cut-off answer says so");
        assert_eq!(answer.content, "The answer goes on and on until it is cut", "{provider}");
    }
    let (whole, streamed, _) = both(model, &ask("refused")).await;
    for answer in [&whole, &streamed] {
        assert_eq!(answer.finish_reason, FinishReason::ContentFilter, "{provider}: a refusal says so");
    }

    for (scenario, kind, status) in [
        ("limited", ModelErrorKind::RateLimited, 429),
        ("overloaded", ModelErrorKind::Overloaded, 503),
        ("overloaded529", ModelErrorKind::Overloaded, 529),
    ] {
        let error = model.chat(&ask(scenario)).await.expect_err("an error status");
        assert_eq!((error.kind, error.status), (kind, Some(status)), "{provider} {scenario}: {error}");
        assert!(error.kind.retryable(), "{provider} {scenario}");
    }
}

#[tokio::test]
async fn the_adapters_read_the_litellm_proxys_answers_in_both_wire_formats() {
    let Ok(command) = std::env::var("STEPWRIGHT_TEST_LITELLM") else {
        #[allow(clippy::print_stderr)]
        {
            eprintln!("skipped: STEPWRIGHT_TEST_LITELLM is not set (`.ci/run` installs the LiteLLM proxy from PyPI)");
        }
        return;
    };
    let proxy = proxy(&command).await;
    let openai = OpenAi::new(&format!("{}/v1", proxy.base), Some(KEY.into()), once(), &RateLimits::default()).unwrap();
    scenarios(&openai).await;
    let anthropic = Anthropic::new(&proxy.base, Some(KEY.into()), once(), &RateLimits::default()).unwrap();
    scenarios(&anthropic).await;

    // Structured output: LiteLLM's own mock answers OpenAI's `response_format` with JSON
    // text; the scripted model answers each API its way (JSON text, or the input of the tool
    // an Anthropic request forces). Either way the adapter's answer is the JSON text.
    let schema = json!({ "type": "object", "required": ["city"], "properties": { "city": { "type": "string" }, "population": { "type": "integer" } } });
    let expected = json!({ "city": "Paris", "population": 2_100_000 });
    for (model, scenario) in [(&openai as &dyn ChatModel, "structured"), (&openai, "shaped"), (&anthropic, "shaped")] {
        let mut structured = ask(scenario);
        structured.output = Some(OutputFormat { name: "city".into(), schema: schema.clone() });
        let (whole, streamed, _) = both(model, &structured).await;
        for answer in [whole, streamed] {
            let parsed: Value = serde_json::from_str(&answer.content)
                .unwrap_or_else(|e| panic!("{} {scenario}: {e}: {:?}", model.provider(), answer.content));
            assert_eq!(parsed, expected, "{} {scenario}", model.provider());
        }
    }
}
