//! Every request body the adapters send, over a matrix of options, captured off the wire by
//! a loopback server. With `STEPWRIGHT_SDK_BODIES=DIR` set, each is written to
//! `DIR/{openai,anthropic}/NAME.json` for `tools/sdk/check.sh`, which validates them against
//! the official `openai` and `anthropic` Python SDKs' request types (pinned, from PyPI;
//! unknown fields refused). `.ci/run` runs it; without the variable the bodies are only
//! captured and checked for their shape here.

use serde_json::{Value, json};
use stepwright_llm::{
    Anthropic, ChatModel, ChatRequest, Message, ModelParams, OpenAi, OutputFormat, RateLimits, TokenLimitField,
    ToolCall, ToolChoice, ToolSpec,
};
use stepwright_testkit::http::{FakeServer, Reply};

use crate::support::fast_http;

fn lookup() -> ToolSpec {
    ToolSpec {
        name: "lookup_order".into(),
        description: "Look up an order".into(),
        parameters: json!({ "type": "object", "required": ["order_id"], "properties": { "order_id": { "type": "string" } } }),
    }
}

/// A conversation with every kind of message: system, user, an assistant's text and two
/// tool calls, their results (one an error).
fn conversation() -> Vec<Message> {
    vec![
        Message::system("You resolve tickets."),
        Message::user("Where are orders 41 and 42?"),
        Message::Assistant {
            content: "Looking.".into(),
            tool_calls: vec![
                ToolCall { id: "call_1".into(), name: "lookup_order".into(), arguments: json!({ "order_id": "41" }) },
                ToolCall { id: "call_2".into(), name: "lookup_order".into(), arguments: json!({ "order_id": "42" }) },
            ],
        },
        Message::Tool { call_id: "call_1".into(), content: "shipped".into(), is_error: false },
        Message::Tool { call_id: "call_2".into(), content: "no such order".into(), is_error: true },
    ]
}

/// The matrix: (name, request, streamed); `temperature` where the model takes one.
fn requests(model: &str, temperature: Option<f64>) -> Vec<(&'static str, ChatRequest, bool)> {
    let plain = ChatRequest::new(model, vec![Message::user("Hello")]);
    let mut tools = ChatRequest::new(model, conversation());
    tools.tools = vec![lookup()];
    let with_choice = |choice: ToolChoice| {
        let mut request = tools.clone();
        request.tool_choice = Some(choice);
        request
    };
    let mut params = plain.clone();
    params.params = ModelParams { temperature, top_p: None, max_tokens: Some(256), stop: vec!["END".into()] };
    let structured = |schema: Value| {
        let mut request = plain.clone();
        request.output = Some(OutputFormat { name: "answer".into(), schema });
        request
    };
    let object = json!({ "type": "object", "required": ["category"], "properties": {
        "category": { "enum": ["billing", "bug"] }, "note": { "type": "string" } } });
    let map = json!({ "type": "object", "required": ["scores"], "properties": {
        "scores": { "type": "object", "additionalProperties": { "type": "number" } } } });
    let list = json!({ "type": "array", "items": { "type": "string" } });
    vec![
        ("plain", plain.clone(), false),
        ("plain-streamed", plain.clone(), true),
        ("tools-history", tools.clone(), false),
        ("tool-choice-auto", with_choice(ToolChoice::Auto), false),
        ("tool-choice-none", with_choice(ToolChoice::None), false),
        ("tool-choice-required", with_choice(ToolChoice::Required), true),
        ("tool-choice-named", with_choice(ToolChoice::Tool("lookup_order".into())), false),
        ("params", params, false),
        ("structured-object", structured(object), false),
        ("structured-map", structured(map), false),
        ("structured-array-root", structured(list), true),
    ]
}

fn ok_openai() -> Reply {
    Reply::json(
        200,
        json!({ "model": "m", "choices": [{ "finish_reason": "stop", "message": { "role": "assistant", "content": "{}" } }] }),
    )
}

fn ok_anthropic() -> Reply {
    Reply::json(
        200,
        json!({ "id": "m", "type": "message", "role": "assistant", "model": "m", "stop_reason": "end_turn",
                "content": [{ "type": "text", "text": "{}" }], "usage": { "input_tokens": 1, "output_tokens": 1 } }),
    )
}

/// Sends each request (whole; streamed ones by `chat_stream`, to which the loopback answers
/// whole, as some servers do) and returns the bodies that went out.
async fn captured(model: &dyn ChatModel, server: &FakeServer, requests: &[(&str, ChatRequest, bool)]) -> Vec<Value> {
    for (_, request, streamed) in requests {
        if *streamed {
            model.chat_stream(request, &|_| {}).await.unwrap();
        } else {
            model.chat(request).await.unwrap();
        }
    }
    server.requests().into_iter().map(|r| r.body).collect()
}

fn write(provider: &str, names: impl Iterator<Item = String>, bodies: &[Value]) {
    let Some(dir) = std::env::var_os("STEPWRIGHT_SDK_BODIES") else { return };
    let dir = std::path::Path::new(&dir).join(provider);
    std::fs::create_dir_all(&dir).unwrap();
    for (name, body) in names.zip(bodies) {
        std::fs::write(dir.join(format!("{name}.json")), serde_json::to_string_pretty(body).unwrap()).unwrap();
    }
}

#[tokio::test]
async fn every_request_body_is_captured_for_the_sdk_check() {
    // OpenAI: both token-limit fields.
    let matrix = requests("gpt-4o-mini", Some(0.3));
    let mut names = Vec::new();
    let mut bodies = Vec::new();
    for field in [TokenLimitField::MaxTokens, TokenLimitField::MaxCompletionTokens] {
        let server = FakeServer::scripted(vec![ok_openai(); matrix.len()]);
        let adapter =
            OpenAi::new(&format!("{}/v1", server.url), Some("sk".into()), fast_http(), &RateLimits::default())
                .unwrap()
                .token_limit_field(field);
        bodies.extend(captured(&adapter, &server, &matrix).await);
        names.extend(matrix.iter().map(|(name, _, _)| format!("{name}-{}", field.as_str())));
    }
    assert_eq!(bodies.len(), 2 * matrix.len());
    assert!(bodies.iter().all(|b| b["model"] == "gpt-4o-mini" && b["messages"].is_array()));
    write("openai", names.into_iter(), &bodies);

    // Anthropic: current models (and the SDK) take no temperature.
    let matrix = requests("claude-sonnet-4-5", None);
    let server = FakeServer::scripted(vec![ok_anthropic(); matrix.len()]);
    let adapter = Anthropic::new(&server.url, Some("sk".into()), fast_http(), &RateLimits::default()).unwrap();
    let bodies = captured(&adapter, &server, &matrix).await;
    assert!(bodies.iter().all(|b| b["max_tokens"].is_u64() && b["messages"].is_array()));
    write("anthropic", matrix.iter().map(|(name, _, _)| (*name).to_owned()), &bodies);
}
