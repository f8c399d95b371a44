//! The Anthropic adapter against a loopback server speaking the Messages API.

use std::sync::{Arc, Mutex};

use crate::support::fast_http;
use serde_json::{Value, json};
use stepwright_llm::{
    Anthropic, ChatModel, ChatRequest, FinishReason, Message, ModelErrorKind, ModelParams, OutputFormat, RateLimits,
    ToolCall, ToolChoice, ToolSpec, Usage,
};
use stepwright_testkit::http::{FakeServer, Reply};

/// An adapter for a model that takes sampling parameters (older models and compatible
/// servers; current Anthropic models take none, which `Models` binds by default), so the
/// wire format of `temperature` is covered too.
fn adapter(server: &FakeServer) -> Anthropic {
    Anthropic::new(&server.url, Some("sk-ant-test".into()), fast_http(), &RateLimits::default()).unwrap().sampling(true)
}

fn request() -> ChatRequest {
    let mut request = ChatRequest::new(
        "claude-sonnet-4-5",
        vec![
            Message::system("You resolve tickets."),
            Message::user("Where are orders 41 and 42?"),
            Message::Assistant {
                content: "Looking.".into(),
                tool_calls: vec![
                    ToolCall {
                        id: "toolu_1".into(),
                        name: "lookup_order".into(),
                        arguments: json!({ "order_id": "41" }),
                    },
                    ToolCall {
                        id: "toolu_2".into(),
                        name: "lookup_order".into(),
                        arguments: json!({ "order_id": "42" }),
                    },
                ],
            },
            Message::Tool { call_id: "toolu_1".into(), content: "shipped".into(), is_error: false },
            Message::Tool { call_id: "toolu_2".into(), content: "no such order".into(), is_error: true },
        ],
    );
    request.tools = vec![ToolSpec {
        name: "lookup_order".into(),
        description: "Look up an order".into(),
        parameters: json!({ "type": "object", "properties": { "order_id": { "type": "string" } } }),
    }];
    request.tool_choice = Some(ToolChoice::Required);
    request.params =
        ModelParams { temperature: Some(0.2), top_p: None, max_tokens: Some(512), stop: vec!["END".into()] };
    request
}

#[tokio::test]
async fn a_plain_call_sends_system_tool_use_and_tool_results_the_messages_way() {
    let server = FakeServer::scripted(vec![Reply::json(
        200,
        json!({
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5-20250929",
            "content": [
                { "type": "text", "text": "Order 41 shipped; " },
                { "type": "text", "text": "let me check 42 again." },
                { "type": "tool_use", "id": "toolu_3", "name": "lookup_order", "input": { "order_id": "42" } }
            ],
            "stop_reason": "tool_use", "stop_sequence": null,
            "usage": { "input_tokens": 120, "output_tokens": 40 }
        }),
    )]);
    let response = adapter(&server).chat(&request()).await.unwrap();
    assert_eq!(response.content, "Order 41 shipped; let me check 42 again.");
    assert_eq!(response.finish_reason, FinishReason::ToolCalls);
    assert_eq!(response.usage, Usage { input_tokens: 120, output_tokens: 40, ..Default::default() });
    assert_eq!(
        response.tool_calls,
        [ToolCall { id: "toolu_3".into(), name: "lookup_order".into(), arguments: json!({ "order_id": "42" }) }]
    );

    let sent = &server.requests()[0];
    assert_eq!(sent.path, "/v1/messages");
    assert_eq!(sent.headers["x-api-key"], "sk-ant-test");
    assert_eq!(sent.headers["anthropic-version"], "2023-06-01");
    assert_eq!(sent.headers["user-agent"], stepwright_llm::USER_AGENT);
    assert_eq!(
        sent.body,
        json!({
            "model": "claude-sonnet-4-5",
            "max_tokens": 512,
            "system": "You resolve tickets.",
            "messages": [
                { "role": "user", "content": [{ "type": "text", "text": "Where are orders 41 and 42?" }] },
                { "role": "assistant", "content": [
                    { "type": "text", "text": "Looking." },
                    { "type": "tool_use", "id": "toolu_1", "name": "lookup_order", "input": { "order_id": "41" } },
                    { "type": "tool_use", "id": "toolu_2", "name": "lookup_order", "input": { "order_id": "42" } }
                ]},
                { "role": "user", "content": [
                    { "type": "tool_result", "tool_use_id": "toolu_1", "content": "shipped" },
                    { "type": "tool_result", "tool_use_id": "toolu_2", "content": "no such order", "is_error": true }
                ]}
            ],
            "tools": [{ "name": "lookup_order", "description": "Look up an order",
                        "input_schema": { "type": "object", "properties": { "order_id": { "type": "string" } } } }],
            "tool_choice": { "type": "any" },
            "temperature": 0.2,
            "stop_sequences": ["END"]
        })
    );
}

#[tokio::test]
async fn max_tokens_defaults_because_the_api_requires_it() {
    let server = FakeServer::scripted(vec![Reply::json(
        200,
        json!({ "content": [{ "type": "text", "text": "hi" }], "stop_reason": "end_turn", "usage": { "input_tokens": 1, "output_tokens": 1 } }),
    )]);
    adapter(&server).chat(&ChatRequest::new("claude", vec![Message::user("hi")])).await.unwrap();
    assert_eq!(server.requests()[0].body["max_tokens"], json!(stepwright_llm::ANTHROPIC_DEFAULT_MAX_TOKENS));
}

fn event(name: &str, data: &Value) -> String {
    format!("event: {name}\ndata: {data}\n\n")
}

fn stream_text() -> String {
    [
        event("message_start", &json!({ "type": "message_start", "message": { "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5", "content": [], "stop_reason": null, "usage": { "input_tokens": 90, "output_tokens": 1 } } })),
        event("content_block_start", &json!({ "type": "content_block_start", "index": 0, "content_block": { "type": "text", "text": "" } })),
        event("ping", &json!({ "type": "ping" })),
        event("content_block_delta", &json!({ "type": "content_block_delta", "index": 0, "delta": { "type": "text_delta", "text": "Let me look — " } })),
        event("content_block_delta", &json!({ "type": "content_block_delta", "index": 0, "delta": { "type": "text_delta", "text": "ça marche." } })),
        event("content_block_stop", &json!({ "type": "content_block_stop", "index": 0 })),
        event("content_block_start", &json!({ "type": "content_block_start", "index": 1, "content_block": { "type": "tool_use", "id": "toolu_9", "name": "lookup_order", "input": {} } })),
        event("content_block_delta", &json!({ "type": "content_block_delta", "index": 1, "delta": { "type": "input_json_delta", "partial_json": "" } })),
        event("content_block_delta", &json!({ "type": "content_block_delta", "index": 1, "delta": { "type": "input_json_delta", "partial_json": "{\"order_id\": \"4" } })),
        event("content_block_delta", &json!({ "type": "content_block_delta", "index": 1, "delta": { "type": "input_json_delta", "partial_json": "2\"}" } })),
        event("content_block_stop", &json!({ "type": "content_block_stop", "index": 1 })),
        ": keep-alive\n\n".to_owned(),
        event("message_delta", &json!({ "type": "message_delta", "delta": { "stop_reason": "tool_use", "stop_sequence": null }, "usage": { "output_tokens": 57 } })),
        event("message_stop", &json!({ "type": "message_stop" })),
    ]
    .concat()
}

#[tokio::test]
async fn a_stream_split_at_awkward_boundaries_accumulates_text_and_input_json_deltas() {
    for piece in [7, 13, 64, 4096] {
        let server = FakeServer::scripted(vec![Reply::sse(&stream_text(), piece)]);
        let tokens = Arc::new(Mutex::new(Vec::<String>::new()));
        let sink = {
            let tokens = tokens.clone();
            move |t: &str| tokens.lock().unwrap().push(t.to_owned())
        };
        let response = adapter(&server).chat_stream(&request(), &sink).await.unwrap();
        assert_eq!(response.content, "Let me look — ça marche.", "pieces of {piece} bytes");
        assert_eq!(tokens.lock().unwrap().concat(), response.content, "tool input is not streamed as text");
        assert_eq!(response.finish_reason, FinishReason::ToolCalls);
        assert_eq!(response.usage, Usage { input_tokens: 90, output_tokens: 57, ..Default::default() });
        assert_eq!(
            response.tool_calls,
            [ToolCall { id: "toolu_9".into(), name: "lookup_order".into(), arguments: json!({ "order_id": "42" }) }]
        );
        assert_eq!(server.requests()[0].body["stream"], json!(true));
    }
}

#[tokio::test]
async fn structured_output_is_a_forced_tool_whose_input_is_the_answer() {
    let schema = json!({ "type": "object", "required": ["category"], "properties": { "category": { "enum": ["billing", "bug"] } } });
    let stream = [
        event("message_start", &json!({ "type": "message_start", "message": { "model": "claude", "usage": { "input_tokens": 20, "output_tokens": 1 } } })),
        event("content_block_start", &json!({ "type": "content_block_start", "index": 0, "content_block": { "type": "tool_use", "id": "toolu_1", "name": "answer", "input": {} } })),
        event("content_block_delta", &json!({ "type": "content_block_delta", "index": 0, "delta": { "type": "input_json_delta", "partial_json": "{\"category\":" } })),
        event("content_block_delta", &json!({ "type": "content_block_delta", "index": 0, "delta": { "type": "input_json_delta", "partial_json": " \"bug\"}" } })),
        event("content_block_stop", &json!({ "type": "content_block_stop", "index": 0 })),
        event("message_delta", &json!({ "type": "message_delta", "delta": { "stop_reason": "tool_use" }, "usage": { "output_tokens": 12 } })),
        event("message_stop", &json!({ "type": "message_stop" })),
    ]
    .concat();
    let server = FakeServer::scripted(vec![
        Reply::json(
            200,
            json!({ "content": [{ "type": "tool_use", "id": "toolu_0", "name": "answer", "input": { "category": "billing" } }],
                    "stop_reason": "tool_use", "usage": { "input_tokens": 20, "output_tokens": 9 } }),
        ),
        Reply::sse(&stream, 11),
    ]);
    let mut request = ChatRequest::new("claude", vec![Message::user("Classify: refund please")]);
    request.output = Some(OutputFormat { name: "answer".into(), schema: schema.clone() });
    let plain = adapter(&server).chat(&request).await.unwrap();
    assert_eq!(serde_json::from_str::<Value>(&plain.content).unwrap(), json!({ "category": "billing" }));
    assert!(plain.tool_calls.is_empty(), "the forced tool is the answer, not a call to run");
    assert_eq!(plain.finish_reason, FinishReason::Stop);
    let streamed = adapter(&server).chat_stream(&request, &|_| {}).await.unwrap();
    assert_eq!(serde_json::from_str::<Value>(&streamed.content).unwrap(), json!({ "category": "bug" }));
    let sent = &server.requests()[0].body;
    assert_eq!(sent["tool_choice"], json!({ "type": "tool", "name": "answer" }));
    assert_eq!(sent["tools"][0]["name"], json!("answer"));
    assert_eq!(sent["tools"][0]["input_schema"], schema);
}

/// Beside the step's own tools (an agent with an output schema) the answer tool is one the model
/// may choose: forcing it would leave the agent unable to call anything else.
#[tokio::test]
async fn an_output_schema_beside_tools_lets_the_model_call_either() {
    let server = FakeServer::scripted(vec![Reply::json(
        200,
        json!({ "content": [{ "type": "tool_use", "id": "toolu_0", "name": "lookup_order", "input": { "order_id": "42" } }],
                "stop_reason": "tool_use", "usage": { "input_tokens": 20, "output_tokens": 9 } }),
    )]);
    let mut request = ChatRequest::new("claude", vec![Message::user("Where is order 42?")]);
    request.tools = vec![ToolSpec {
        name: "lookup_order".into(),
        description: "Look up an order".into(),
        parameters: json!({ "type": "object", "properties": { "order_id": { "type": "string" } } }),
    }];
    request.tool_choice = Some(ToolChoice::Auto);
    request.output = Some(OutputFormat { name: "answer".into(), schema: json!({ "type": "object" }) });
    let response = adapter(&server).chat(&request).await.unwrap();
    assert_eq!(response.tool_calls.len(), 1, "a real tool call stays a call");
    assert_eq!(response.finish_reason, FinishReason::ToolCalls);
    let sent = &server.requests()[0].body;
    assert_eq!(sent["tool_choice"], json!({ "type": "any" }));
    let names: Vec<&str> = sent["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["lookup_order", "answer"]);
}

#[tokio::test]
async fn overloaded_529_is_retried_and_an_error_event_mid_stream_is_classified() {
    let ok = json!({ "content": [{ "type": "text", "text": "fine" }], "stop_reason": "end_turn", "usage": { "input_tokens": 3, "output_tokens": 1 } });
    let server = FakeServer::scripted(vec![
        Reply::json(529, json!({ "type": "error", "error": { "type": "overloaded_error", "message": "Overloaded" } }))
            .header("retry-after", "0"),
        Reply::json(200, ok),
    ]);
    assert_eq!(adapter(&server).chat(&request()).await.unwrap().content, "fine");
    assert_eq!(server.requests().len(), 2);

    let stream = [
        event(
            "message_start",
            &json!({ "type": "message_start", "message": { "model": "claude", "usage": { "input_tokens": 5 } } }),
        ),
        event("error", &json!({ "type": "error", "error": { "type": "overloaded_error", "message": "Overloaded" } })),
    ]
    .concat();
    let server = FakeServer::scripted(vec![Reply::sse(&stream, 9)]);
    let failure = adapter(&server).chat_stream(&request(), &|_| {}).await.unwrap_err();
    assert_eq!(failure.kind, ModelErrorKind::Overloaded);
    assert!(failure.message.contains("Overloaded"), "{failure}");
}

#[tokio::test]
async fn a_dropped_stream_is_interrupted_and_a_401_is_terminal() {
    let text = stream_text();
    let server = FakeServer::scripted(vec![Reply::sse(&text, 10).dropped_after(text.len() / 2)]);
    let failure = adapter(&server).chat_stream(&request(), &|_| {}).await.unwrap_err();
    assert_eq!(failure.kind, ModelErrorKind::StreamInterrupted, "{failure}");

    let server = FakeServer::scripted(vec![Reply::json(
        401,
        json!({ "type": "error", "error": { "type": "authentication_error", "message": "invalid x-api-key" } }),
    )]);
    let failure = adapter(&server).chat(&request()).await.unwrap_err();
    assert_eq!(failure.kind, ModelErrorKind::Unauthorized);
    assert!(failure.message.contains("invalid x-api-key"), "{failure}");
    assert_eq!(server.requests().len(), 1);
}

/// Anthropic counts the prompt tokens read from and written to its cache apart from
/// `input_tokens`; the usage counts the whole prompt (as the GenAI conventions do) and keeps
/// the cached parts, whole and streamed (where `message_delta` may update them).
#[tokio::test]
async fn prompt_cache_tokens_are_part_of_the_prompt_and_kept_apart() {
    let server = FakeServer::scripted(vec![Reply::json(
        200,
        json!({
            "id": "msg_7", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
            "content": [{ "type": "text", "text": "ok" }], "stop_reason": "end_turn",
            "usage": { "input_tokens": 10, "cache_read_input_tokens": 1000, "cache_creation_input_tokens": 200, "output_tokens": 5 }
        }),
    )]);
    let response = adapter(&server).chat(&request()).await.unwrap();
    assert_eq!(response.id.as_deref(), Some("msg_7"));
    let expected =
        Usage { input_tokens: 1210, output_tokens: 5, cache_read_input_tokens: 1000, cache_creation_input_tokens: 200 };
    assert_eq!(response.usage, expected);

    let streamed = [
        event("message_start", &json!({ "type": "message_start", "message": { "id": "msg_8", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5", "content": [], "stop_reason": null, "usage": { "input_tokens": 10, "cache_read_input_tokens": 1000, "cache_creation_input_tokens": 0, "output_tokens": 1 } } })),
        event("content_block_start", &json!({ "type": "content_block_start", "index": 0, "content_block": { "type": "text", "text": "" } })),
        event("content_block_delta", &json!({ "type": "content_block_delta", "index": 0, "delta": { "type": "text_delta", "text": "ok" } })),
        event("content_block_stop", &json!({ "type": "content_block_stop", "index": 0 })),
        event("message_delta", &json!({ "type": "message_delta", "delta": { "stop_reason": "end_turn" }, "usage": { "output_tokens": 9, "cache_creation_input_tokens": 30 } })),
        event("message_stop", &json!({ "type": "message_stop" })),
    ]
    .concat();
    let server = FakeServer::scripted(vec![Reply::sse(&streamed, 4096)]);
    let response = adapter(&server).chat_stream(&request(), &|_: &str| {}).await.unwrap();
    assert_eq!(response.id.as_deref(), Some("msg_8"));
    let expected =
        Usage { input_tokens: 1040, output_tokens: 9, cache_read_input_tokens: 1000, cache_creation_input_tokens: 30 };
    assert_eq!(response.usage, expected);
}
